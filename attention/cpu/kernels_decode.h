// Kernels for few query rows per key (decoding), compiled like kernels.h's (Highway,
// kernels_decode.cc): scores and P V straight from key and value rows where they lie in
// the KV cache, no packed panels, the cache read in token order with requests ahead.
// Conventions as kernels.h (row-major, strides in floats, base-2 scores). Internal to
// attention/cpu.
#ifndef ATTENTION_CPU_KERNELS_DECODE_H_
#define ATTENTION_CPU_KERNELS_DECODE_H_

#include <cstdint>

namespace gpe {
namespace attention {
namespace cpu {

// ScoreTile's scores (kernels.h) read from key rows in place (row j at keys + j * ldk),
// j < nk, for few query rows per key (decoding); nothing is written past column nk.
void ScoreDirect(const float* q, int64_t ldq, int64_t mq, int64_t d, const float* keys,
                 int64_t ldk, int64_t nk, float* s, int64_t lds);

// Bytes a memory-bound kernel's caller reads next (e.g. the KV cache a few tens of KiB past
// the block being processed), requested into L2 (prefetcht1) a cache line at a time,
// spread evenly over the kernel's steps. The decode kernels read four tokens' rows at once
// (four streams a row apart), a pattern the hardware prefetchers follow poorly (measured
// here: ~35% below a one-stream read at the same arithmetic); this one sequential stream
// of requests ahead of them restores the one-stream rate where the host's bandwidth is
// low (30-40 GB/s here); where it is high (45-60 GB/s) the request stream itself caps a
// read at ~0.9 of the triad, while one stream left to the hardware prefetchers alone
// reaches 1.1-1.2x. Kernels that read the cache as that one stream (each token's row of kv
// heads whole: q reloaded for every token, values regrouped by head for P V) were measured
// and rejected: 1.25-1.4x the arithmetic time with the block in L2, and the whole decode
// at 0.5-0.65 of the triad against 0.85 for these. Measured again 2026-12-07 (Zen 5, 2
// threads, plain reads of 512 MiB in 2 MiB pages against the triad in the same process):
// one sequential stream 1.05x the triad, K and V read in alternating sequential blocks of
// 8-128 KiB ~1.0x, two rows read side by side 0.78x, four 0.73x (0.68-0.72x with a
// prefetch per line 8-256 KiB ahead and no arithmetic between the loads, where these
// kernels reach 0.8-1.0x); so one stream is the ceiling, but the simplest one-stream
// kernel (DotRows per token and head, one o update per token) ran 2.7x slower in cache
// (P V bound by the 512-bit stores of o) and 0.95-0.98x these from memory; one with four
// (head, four rows) units per transposing reduction (16 accumulators, 20 loads per 16
// FMAs: q reloaded per token) reached 40 GB/s for the scores in cache against 85 here,
// 0.85x these from memory.
// Prefetches never fault, but the range
// must lie inside the caller's tensor (no pointer leaves its object). Empty: none.
// `runs` ranges of `bytes` each, `stride` bytes apart, are requested in order (a KV cache
// with each kv head's rows contiguous: the next block of every head, head after head).
struct PrefetchAhead {
  const void* begin = nullptr;
  int64_t bytes = 0;
  int64_t runs = 1;
  int64_t stride = 0;
};

// Decoding scores for `heads` kv heads at once, keys read in token order:
// s[(g * rows + r) * lds + j] = sum_c q[(g * rows + r) * ldq + c] * keys[j * ldk + g * ldh + c]
// for g < heads, r < rows, j < nk. In a KV cache (bshd/thd) the kv heads of a token are
// adjacent (ldh = d), so the key rows are one contiguous stream, read token after token.
// Where heads lie further apart than tokens (ldh > ldk: each head's rows contiguous, as
// in bhsd), the kernel walks heads outermost, each head's block one run, in the order
// PrefetchAhead's runs request the next block. (Decoding a bhsd cache of 32768 tokens,
// GQA 32/8, d 128, 2 threads: 59 ms in token order without requests, 20.6 ms head after
// head, 8.9 ms with the next block requested: the bshd figure; a pass over all heads per
// four tokens keeps a stream per head live, 16 MiB apart, in the same L1/L2 sets.)
// AccumulateDecode orders its loops the same way (ldh > ldv).
// `ahead`: see PrefetchAhead.
void ScoreDecode(const float* q, int64_t ldq, int64_t rows, int64_t heads, int64_t d,
                 const float* keys, int64_t ldk, int64_t ldh, int64_t nk, float* s, int64_t lds,
                 PrefetchAhead ahead = {});

// Decoding's P V for `heads` kv heads at once, values read in token order:
// o[(g * rows + r) * ldo + c] <- alpha[g * rows + r] * o[(g * rows + r) * ldo + c]
//     + sum_{j < nk} p[(g * rows + r) * lds + j] * v[j * ldv + g * ldh + c]
// for g < heads, r < rows, c < dp (dp a multiple of the vector width). In a KV cache the
// kv heads of a token are adjacent (ldh = d), so the value rows are read as a few
// contiguous streams rather than one page-strided row per token and head.
void AccumulateDecode(const float* p, int64_t lds, int64_t rows, int64_t heads, int64_t nk,
                      const float* v, int64_t ldv, int64_t ldh, int64_t dp, const float* alpha,
                      float* o, int64_t ldo, PrefetchAhead ahead = {});

// ScoreDecode and AccumulateDecode over a 16-bit KV cache (half: IEEE float16, else
// bfloat16 bit patterns; strides in elements), each vector widened exactly to float in
// registers as it loads (bfloat16: a shift; float16: F16C's vcvtph2ps), the arithmetic
// that of the float32 kernels: half the bytes read per token.
void ScoreDecode16(const float* q, int64_t ldq, int64_t rows, int64_t heads, int64_t d,
                   const uint16_t* keys, int64_t ldk, int64_t ldh, int64_t nk, float* s,
                   int64_t lds, bool half, PrefetchAhead ahead = {});
void AccumulateDecode16(const float* p, int64_t lds, int64_t rows, int64_t heads, int64_t nk,
                        const uint16_t* v, int64_t ldv, int64_t ldh, int64_t dp,
                        const float* alpha, float* o, int64_t ldo, bool half,
                        PrefetchAhead ahead = {});

}  // namespace cpu
}  // namespace attention
}  // namespace gpe

#endif  // ATTENTION_CPU_KERNELS_DECODE_H_
