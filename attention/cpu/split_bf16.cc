#include "attention/cpu/split_bf16.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "attention/cpu/kernels_bf16.h"

namespace gpe {
namespace attention {
namespace cpu {

SplitTerms SplitTermsOf(int terms) {
  SplitTerms t;
  if (terms == 6) {  // a1 b1 + a0 b2 + a2 b0 + a0 b1 + a1 b0 + a0 b0
    t = {6, 3, {1, 0, 2, 0, 1, 0}, {1, 2, 0, 1, 0, 0}};
  } else if (terms == 3) {  // a1 b0 + a0 b1 + a0 b0
    t = {3, 2, {1, 0, 0, 0, 0, 0}, {0, 1, 0, 0, 0, 0}};
  } else {
    std::fprintf(stderr, "SplitTermsOf: %d terms (6 or 3)\n", terms);
    std::abort();
  }
  return t;
}

bool SplitSafe(const float* x, int64_t rows, int64_t ld, int64_t n) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = x + r * ld;
    bool ok = true;  // NaN fails the comparisons
    for (int64_t c = 0; c < n; ++c) {
      const float a = std::fabs(row[c]);
      ok &= (a <= kSplitMax) & ((a >= kSplitMin) | (a == 0.0f));
    }
    if (!ok) return false;
  }
  return true;
}

void SplitBf16Parts(const float* x, int64_t n, int parts, uint16_t* part0, uint16_t* part1,
                    uint16_t* part2) {
  const int part[3] = {0, 1, 2};
  uint16_t* const dst[3] = {part0, part1, part2};
  SplitPartsToBf16(x, n, parts, part, dst);
}

void SplitRowsBf16(const float* x, int64_t ldx, int64_t rows, int64_t n, int64_t width,
                   const SplitTerms& terms, bool left, uint16_t* out, int64_t ldo) {
  const int* which = left ? terms.left : terms.right;
  for (int64_t r = 0; r < rows; ++r) {
    uint16_t* o = out + r * ldo;
    uint16_t* dst[6];
    for (int t = 0; t < terms.n; ++t) dst[t] = o + t * width;
    SplitPartsToBf16(x + r * ldx, n, terms.n, which, dst);
    if (n < width) {
      for (int t = 0; t < terms.n; ++t) std::fill(o + t * width + n, o + (t + 1) * width, 0);
    }
  }
}

namespace {
std::atomic<bool> g_poison{false};
}  // namespace

void SetBf16BufferPoisonForTest(bool on) { g_poison.store(on, std::memory_order_relaxed); }
bool Bf16BufferPoisonForTest() { return g_poison.load(std::memory_order_relaxed); }

}  // namespace cpu
}  // namespace attention
}  // namespace gpe
