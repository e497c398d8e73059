// bfloat16 tile kernels with the CPU's bf16 dot-product instruction (AVX512_BF16,
// vdpbf16ps: two bf16 products summed into each float lane, twice the float32 FMA
// rate), for bfloat16 attention, and the bf16 packs and row conversions both bf16 paths
// use. Without the instruction the bf16 path widens to float and runs kernels.h.
// Internal to attention/cpu. bf16 values are their uint16 bit patterns.
//
// Dispatch, as kernels.h's: Highway compiles kernels_bf16.cc once per target (AVX3,
// AVX2 and the portable baseline, the set kernels.cc has) and HWY_DYNAMIC_DISPATCH runs,
// on each call, the best one the CPU supports. On AVX3 the packs and row conversions
// use AVX512BW; on the other targets they are the element loops (the references below,
// the same bits). Highway 1.0.3 (Debian 12) has no target that implies AVX512_BF16, so
// the dot-product kernels live in the AVX3 target with avx512bf16 added, and
// HasBf16DotProduct(), itself dispatched, is false on every other target and on AVX3
// checks that one CPUID bit; callers use the dot-product kernels (ScoreTileBf16,
// RoundRowsBf16, SoftmaxRoundTileBf16, AccumulateTileBf16) only where it is true
// (elsewhere they abort with a message). Tests force each target t of CompiledTargetsBf16() with
// hwy::SetSupportedTargetsForTest(t) (0 restores the CPU's own), which moves every
// function here, HasBf16DotProduct() included, to t's code: AVX3 runs the dot products
// on a CPU with AVX512_BF16, AVX2 and the baseline the widening path and the loops.
//
// Layouts (pairs along the reduction dimension, which is what vdpbf16ps consumes):
//  - key panels: kPanel keys, [ceil(d / 2)][kPanel][2]: element (j, c) at
//    (c / 2) * 2 * kPanel + 2 * j + c % 2; components past d and keys past nk are 0;
//  - value pairs: [ceil(nk / 2)][dp][2]: element (j, c) at (j / 2) * 2 * dp + 2 * c + j % 2;
//    columns past d and a missing last key are 0;
//  - query rows and probability rows: plain bf16 rows, padded with a zero to even length.
#ifndef ATTENTION_CPU_KERNELS_BF16_H_
#define ATTENTION_CPU_KERNELS_BF16_H_

#include <cstdint>
#include <vector>

#include "attention/cpu/kernels_decode.h"

namespace gpe {
namespace attention {
namespace cpu {

// True when the dispatched target is AVX3 (AVX512F/VL/DQ/BW, saved by the OS) and the
// CPU has AVX512_BF16.
bool HasBf16DotProduct();
// Multiply-adds per second of vdpbf16ps over those of vfmadd231ps on this core (2 where
// the dot product issues at the FMA's rate, e.g. AMD Zen 4; 1 where at half the rate),
// from two short register-only loops timed now; 0 without the instruction.
double Bf16DotProductSpeedup();
// Bf16DotProductSpeedup() > 1.25, measured once per process and cached (false wherever
// HasBf16DotProduct() is false).
bool Bf16DotProductsFaster();

// nk keys (row j at keys + j * ld, d components) into ceil(nk / kPanel) panels. On AVX3
// a 32-bit transpose of each panel (16 x 16 blocks of bf16 pairs), else the reference.
void PackKeyPanelsBf16(const uint16_t* keys, int64_t nk, int64_t ld, int64_t d,
                       uint16_t* panels);
// nk value rows (row j at vals + j * ld, d components) into ceil(nk / 2) pair rows of dp
// (dp >= d, a multiple of 16). On AVX3 two rows interleaved per vector permute, else
// the reference.
void PackValuePairsBf16(const uint16_t* vals, int64_t nk, int64_t ld, int64_t d, int64_t dp,
                        uint16_t* pairs);
// Element-by-element loops of the two packs: the references the vector ones must match
// bit for bit.
void PackKeyPanelsBf16Reference(const uint16_t* keys, int64_t nk, int64_t ld, int64_t d,
                                uint16_t* panels);
void PackValuePairsBf16Reference(const uint16_t* vals, int64_t nk, int64_t ld, int64_t d,
                                 int64_t dp, uint16_t* pairs);

// n bf16 values widened to float (exact: the bits shifted up by 16).
void WidenBf16Row(const uint16_t* src, float* dst, int64_t n);
// n floats rounded to bf16 exactly as encodings/sequence/rope.h's ToBFloat16: to nearest
// even on the bit pattern (subnormals kept, overflow to infinity), a NaN stays a NaN
// (quiet bit set, sign and top payload kept). On AVX3 16 lanes at a time.
void RoundBf16Row(const float* src, uint16_t* dst, int64_t n);
// bf16 parts of x[0, n) for the split-bf16 float32 mode (split_bf16.h): part p (0 to 2)
// is RoundBf16Row's rounding of the rest, x less the parts before it (float
// subtractions, exact for finite x). Stores part part[t] of every x[i] at dst[t][i], for
// t < count (a part may go to several destinations). On AVX3 32 values per step in
// registers, each part stored to all its destinations from there; else the reference,
// the same bits.
void SplitPartsToBf16(const float* x, int64_t n, int count, const int* part,
                      uint16_t* const* dst);
void SplitPartsToBf16Reference(const float* x, int64_t n, int count, const int* part,
                               uint16_t* const* dst);
// x[i] <- its bf16 rounding (RoundBf16Row's), kept in float, for i < n: what the bf16 dot
// products multiply, for scores formed with float products of the same values (the
// forward's direct tiles, the backward's float tiles) to equal theirs.
inline void RoundToBf16InPlace(float* x, int64_t n) {
  constexpr int64_t kChunk = 256;
  uint16_t buf[kChunk];
  for (int64_t i = 0; i < n; i += kChunk) {
    const int64_t m = n - i < kChunk ? n - i : kChunk;
    RoundBf16Row(x + i, buf, m);
    WidenBf16Row(buf, x + i, m);
  }
}
// s[r * lds + j] = sum_c q[r * ldq + c] key_j[c] (float accumulation) for r < mq and the
// keys of num_panels panels; q rows padded to even length (ldq even).
// With init (an additive bias fused into the scores): the sums start from the rounded
// product init_scale * init[r * ldi + j] instead of 0 and take the dot products in the
// same order, for every column j < num_panels * kPanel (init is read there: a Toeplitz
// tile read from its diagonals has ldi = -1).
void ScoreTileBf16(const uint16_t* q, int64_t ldq, int64_t mq, int64_t d,
                   const uint16_t* panels, int64_t num_panels, float* s, int64_t lds,
                   const float* init = nullptr, int64_t ldi = 0, float init_scale = 1.0f);
// Rows of float probabilities rounded to bf16 (nearest even): out[r * ldo + j] for
// j < n (n a multiple of 16).
void RoundRowsBf16(const float* p, int64_t ldp, int64_t mq, int64_t n, uint16_t* out,
                   int64_t ldo);
// kernels.h's SoftmaxTile on an mq x n tile (n a multiple of 16) with the probabilities
// written as bf16 rows (p16[r * ldp + j], as RoundRowsBf16 would round them) in the same
// pass; s keeps the scores unless keep_float, which stores the float probabilities too.
// m, l and alpha as SoftmaxTile's, bit for bit on AVX-512 hosts (the same operations).
void SoftmaxRoundTileBf16(float* s, int64_t lds, int64_t mq, int64_t n, float* m, float* l,
                          float* alpha, uint16_t* p16, int64_t ldp, bool keep_float);
// o[r * ldo + c] <- alpha[r] o + sum_{j < nk} p[r * ldp + j] v[j][c] for c < dp (a multiple
// of 16), p bf16 rows (ldp even), v as value pairs of dp columns.
void AccumulateTileBf16(const uint16_t* p, int64_t ldp, int64_t mq, int64_t nk,
                        const uint16_t* pairs, int64_t dp, const float* alpha, float* o,
                        int64_t ldo);

// Decoding on the dot products (kernels_decode.h's ScoreDecode16 / AccumulateDecode16
// for a bf16 cache, with the queries and probabilities in bf16 as the kernels above):
// s[(g * rows + r) * lds + j] = sum_c q[(g * rows + r) * ldq + c] keys[j * ldk + g * ldh + c]
// for g < heads, r < rows, j < nk (q rows of d bf16, keys read in place); and
// o[(g * rows + r) * ldo + c] <- alpha[g * rows + r] o + sum_{j < nk}
//     p[(g * rows + r) * ldp + j] v[j * ldv + g * ldh + c]
// for c < dp (a multiple of 16; value columns past dv read as 0), p bf16 rows whose
// entries from nk up to the next even column are 0 (as SoftmaxRoundTileBf16 leaves a
// tile's padding: a last odd token is paired with that zero). Float
// sums; each vdpbf16ps takes 32 components (scores) or two tokens (P V). The cache is
// walked, and `ahead` requested, as kernels_decode.h's kernels do.
void ScoreDecodeBf16(const uint16_t* q, int64_t ldq, int64_t rows, int64_t heads, int64_t d,
                     const uint16_t* keys, int64_t ldk, int64_t ldh, int64_t nk, float* s,
                     int64_t lds, PrefetchAhead ahead = {});
void AccumulateDecodeBf16(const uint16_t* p, int64_t ldp, int64_t rows, int64_t heads,
                          int64_t nk, const uint16_t* v, int64_t ldv, int64_t ldh, int64_t dv,
                          int64_t dp, const float* alpha, float* o, int64_t ldo,
                          PrefetchAhead ahead = {});

// The Highway targets (hwy::TargetName) kernels_bf16.cc was compiled for that this CPU
// runs, best first (as kernels.h's CompiledTargets); tests force each in turn.
std::vector<int64_t> CompiledTargetsBf16();

// Name of the target the dispatcher picks for these kernels now (e.g. "AVX3", "AVX2").
const char* KernelTargetNameBf16();

}  // namespace cpu
}  // namespace attention
}  // namespace gpe

#endif  // ATTENTION_CPU_KERNELS_BF16_H_
