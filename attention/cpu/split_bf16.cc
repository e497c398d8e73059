#include "attention/cpu/split_bf16.h"

#include <algorithm>
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
    bool ok = true;  // NaN fails the comparison
    for (int64_t c = 0; c < n; ++c) ok &= std::fabs(row[c]) <= kSplitMax;
    if (!ok) return false;
  }
  return true;
}

void SplitBf16Parts(const float* x, int64_t n, int parts, uint16_t* part0, uint16_t* part1,
                    uint16_t* part2) {
  constexpr int64_t kChunk = 256;
  float rest[kChunk], back[kChunk];
  uint16_t* out[3] = {part0, part1, part2};
  for (int64_t i = 0; i < n; i += kChunk) {
    const int64_t m = std::min(kChunk, n - i);
    std::copy(x + i, x + i + m, rest);
    for (int p = 0; p < parts; ++p) {
      RoundBf16Row(rest, out[p] + i, m);
      if (p + 1 == parts) break;
      WidenBf16Row(out[p] + i, back, m);
      for (int64_t c = 0; c < m; ++c) rest[c] -= back[c];  // exact (split_bf16.h)
    }
  }
}

void SplitRowsBf16(const float* x, int64_t ldx, int64_t rows, int64_t n, int64_t width,
                   const SplitTerms& terms, bool left, uint16_t* out, int64_t ldo) {
  constexpr int64_t kChunk = 256;
  uint16_t part[3][kChunk];
  const int* which = left ? terms.left : terms.right;
  for (int64_t r = 0; r < rows; ++r) {
    uint16_t* o = out + r * ldo;
    for (int64_t c0 = 0; c0 < n; c0 += kChunk) {
      const int64_t m = std::min(kChunk, n - c0);
      SplitBf16Parts(x + r * ldx + c0, m, terms.parts, part[0], part[1], part[2]);
      for (int t = 0; t < terms.n; ++t) {
        std::copy(part[which[t]], part[which[t]] + m, o + t * width + c0);
      }
    }
    for (int t = 0; t < terms.n; ++t) std::fill(o + t * width + n, o + (t + 1) * width, 0);
  }
}

}  // namespace cpu
}  // namespace attention
}  // namespace gpe
