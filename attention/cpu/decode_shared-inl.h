// What the decode kernels of kernels_decode.cc (float arithmetic) and kernels_bf16.cc
// (bf16 dot products) share: the walk over a PrefetchAhead's requests and the summing of
// a 4 x 4 block of dot products. A Highway "-inl" header, included once per target from
// inside each kernel file's foreach_target pass (the guard below toggles with
// HWY_TARGET_TOGGLE). Internal to attention/cpu.
#if defined(GPE_ATTENTION_CPU_DECODE_SHARED_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef GPE_ATTENTION_CPU_DECODE_SHARED_INL_H_
#undef GPE_ATTENTION_CPU_DECODE_SHARED_INL_H_
#else
#define GPE_ATTENTION_CPU_DECODE_SHARED_INL_H_
#endif

#include <cstdint>

#include "attention/cpu/kernels_decode.h"
#include "hwy/highway.h"

#if HWY_ARCH_X86
#include <immintrin.h>
#endif

HWY_BEFORE_NAMESPACE();
namespace gpe {
namespace attention {
namespace cpu {
namespace HWY_NAMESPACE {

// Walks a PrefetchAhead's runs in order: Step() requests the next `per_step` cache lines,
// with per_step chosen so that `steps` calls cover them all.
class PrefetchCursor {
 public:
  PrefetchCursor(PrefetchAhead ahead, int64_t steps) {
    if (ahead.begin == nullptr || ahead.bytes <= 0 || ahead.runs <= 0 || steps <= 0) return;
    begin_ = reinterpret_cast<uintptr_t>(ahead.begin);
    bytes_ = static_cast<uintptr_t>(ahead.bytes);
    stride_ = static_cast<uintptr_t>(ahead.stride);
    runs_ = ahead.runs;
    StartRun();
    // Lines in all runs (a run's start rounded down to its line adds at most one).
    const int64_t total = runs_ * ((ahead.bytes + 63) / 64 + 1);
    per_step_ = (total + steps - 1) / steps;
  }
  // The members are updated in place on purpose: the kernels' lambdas hold the cursor by
  // reference, so each line costs a load-decrement-store through memory, and that chain
  // spreads the requests between the FMAs. Kept in registers (tried 2026-12-07 on Zen 5)
  // the requests go out in bursts: the in-cache kernel gained 3%, decoding from a float32
  // cache lost 20-30% (the prefetches seem to take the miss buffers from demand loads).
  // Also measured (2026-12-07, Zen 5, alternating binaries, median of 3-6 rounds against
  // this cursor): in registers with the step's lines spread evenly over the dot products'
  // inner loop, +15-20% in cache but 0.9-1.0x from memory (capped near 40 GB/s where this
  // one reached 56); every other line requested, 0.5-0.75x (the hardware does not fetch
  // the neighbour); a demand load per line instead of a prefetch, 0.35-0.5x;
  // prefetcht0, 1.0-1.1x (noise); prefetchnta, 0.83-0.94x.
  HWY_INLINE void Step() {
    for (int64_t i = 0; i < per_step_ && run_ < runs_; ++i) {
      __builtin_prefetch(reinterpret_cast<const void*>(next_), 0, 2);  // prefetcht1 on x86
      next_ += 64;
      if (--lines_ == 0) {
        ++run_;
        StartRun();
      }
    }
  }

 private:
  // Points next_ at run run_'s first line; lines_: its line count.
  void StartRun() {
    if (run_ >= runs_) return;
    const uintptr_t start = begin_ + static_cast<uintptr_t>(run_) * stride_;
    next_ = start & ~uintptr_t{63};
    lines_ = static_cast<int64_t>((start + bytes_ - next_ + 63) / 64);
  }

  uintptr_t begin_ = 0, bytes_ = 0, stride_ = 0, next_ = 0;
  int64_t runs_ = 0, run_ = 0, lines_ = 0, per_step_ = 0;
};

#if HWY_TARGET <= HWY_AVX3
// s[r * lds + t] = the sum of the 16 lanes of acc[4 t + r] (key t, row r), r, t < 4.
// Halving steps: each adds the two halves of a pair of vectors' partial sums, so after
// four steps lane 4 a + b holds the full sum of acc[4 b + a] (row a, key b): 128-bit
// lane r of the result is row r's four sums. 15 additions and 30 shuffles for the 16
// sums (16 separate horizontal sums take about four times as many).
HWY_INLINE void StoreSums4x4(const __m512* acc, float* HWY_RESTRICT s, int64_t lds) {
  __m512 h1[8], h2[4], h3[2];
  HWY_UNROLL(16)
  for (int p = 0; p < 8; ++p) {
    h1[p] = _mm512_add_ps(_mm512_shuffle_f32x4(acc[2 * p], acc[2 * p + 1], 0x44),
                          _mm512_shuffle_f32x4(acc[2 * p], acc[2 * p + 1], 0xEE));
  }
  HWY_UNROLL(16)
  for (int p = 0; p < 4; ++p) {
    h2[p] = _mm512_add_ps(_mm512_shuffle_f32x4(h1[2 * p], h1[2 * p + 1], 0x88),
                          _mm512_shuffle_f32x4(h1[2 * p], h1[2 * p + 1], 0xDD));
  }
  HWY_UNROLL(16)
  for (int p = 0; p < 2; ++p) {
    h3[p] = _mm512_add_ps(_mm512_shuffle_ps(h2[2 * p], h2[2 * p + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                          _mm512_shuffle_ps(h2[2 * p], h2[2 * p + 1], _MM_SHUFFLE(3, 1, 3, 1)));
  }
  const __m512 sums = _mm512_add_ps(_mm512_shuffle_ps(h3[0], h3[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                    _mm512_shuffle_ps(h3[0], h3[1], _MM_SHUFFLE(3, 1, 3, 1)));
  _mm_storeu_ps(s, _mm512_castps512_ps128(sums));
  _mm_storeu_ps(s + lds, _mm512_extractf32x4_ps(sums, 1));
  _mm_storeu_ps(s + 2 * lds, _mm512_extractf32x4_ps(sums, 2));
  _mm_storeu_ps(s + 3 * lds, _mm512_extractf32x4_ps(sums, 3));
}
#endif  // HWY_TARGET <= HWY_AVX3

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace cpu
}  // namespace attention
}  // namespace gpe
HWY_AFTER_NAMESPACE();

#endif  // GPE_ATTENTION_CPU_DECODE_SHARED_INL_H_
