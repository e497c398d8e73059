// float32 products as sums of bfloat16 products (CpuAttentionOptions::Float32Arithmetic's
// split modes): each float x is split into bf16 parts
//   x0 = bf16(x), x1 = bf16(x - x0), x2 = bf16(x - x0 - x1),
// each difference exact in float (x - x0 keeps x's low bits), so x = x0 + x1 + x2 + r
// with |r| <= 2^-24 |x| about (three parts of 8 significant bits each). A product a b
// is then a sum of products of parts (bf16x6 and bf16x3 of Henry, Tang and Heinecke,
// "Leveraging the bfloat16 Artificial Intelligence Datatype For Higher-Precision
// Computations", ARITH 2019, arXiv:1904.06376):
//  - six terms, a1 b1 + a0 b2 + a2 b0 + a0 b1 + a1 b0 + a0 b0: the terms dropped are
//    2^-24 |a b| and smaller, float32's own rounding;
//  - three terms, a1 b0 + a0 b1 + a0 b0: a1 b1 and the third parts dropped, 2^-16 |a b|.
// The terms are listed smallest first, so a float accumulator that starts from 0 and
// takes them in order holds the small ones before the large ones arrive (measured on
// random rows of 64 and 128 N(0, 1) components, summed in one float in order: six terms
// in this order give a third of the error of naive float32 sums; largest first, twice
// it). That is the scores' case (each tile starts from 0); P V adds each 32-key step into
// the running output, where the order matters less.
//
// A dot product of length n then becomes one bf16 dot product of length terms x width:
// the left row's parts concatenated in the terms' order, against the right row's parts
// concatenated in theirs (each part a segment of `width` components, zeros past n).
// The attention tiles use this for both products: S = Q K^T (q rows left, key rows
// right) and P V (probability rows left, value rows right, segments along the keys).
// Internal to attention/cpu.
#ifndef ATTENTION_CPU_SPLIT_BF16_H_
#define ATTENTION_CPU_SPLIT_BF16_H_

#include <cstdint>

namespace gpe {
namespace attention {
namespace cpu {

// Largest magnitude the split takes: bf16's largest finite value is 3.3895e38, and a
// float above 3.3961e38 rounds to infinity in bf16.
constexpr float kSplitMax = 3.38e38f;
// Smallest nonzero magnitude it takes, 2^-100: the third part of x is about 2^-16 x, and
// the tiles (TDPBF16PS) read subnormal bf16 inputs (below 2^-126) as 0 and flush
// subnormal results, so below 2^-110 the parts, and the products of tiny values, would
// lose float32's accuracy; 2^-100 leaves a margin for the products' own scale.
constexpr float kSplitMin = 0x1p-100f;

// The product terms of a split mode: term t multiplies part left[t] of the left factor
// by part right[t] of the right one; `parts` is how many parts each side needs.
struct SplitTerms {
  int n = 0;
  int parts = 0;
  int left[6] = {0, 0, 0, 0, 0, 0};
  int right[6] = {0, 0, 0, 0, 0, 0};
};
// terms: 6 or 3 (anything else aborts with a message).
SplitTerms SplitTermsOf(int terms);

// Whether every x[r * ld + c] (r < rows, c < n) is 0 or finite with a magnitude in
// [kSplitMin, kSplitMax].
bool SplitSafe(const float* x, int64_t rows, int64_t ld, int64_t n);

// The first `parts` (1 to 3) bf16 parts of x[0, n): part[i][c] (nullptr for parts not
// asked for).
void SplitBf16Parts(const float* x, int64_t n, int parts, uint16_t* part0, uint16_t* part1,
                    uint16_t* part2);

// Rows of concatenated parts: out[r * ldo + t * width + c] is part (left ? terms.left[t]
// : terms.right[t]) of x[r * ldx + c] for c < n, and 0 for n <= c < width, for r < rows
// and t < terms.n (width >= n).
void SplitRowsBf16(const float* x, int64_t ldx, int64_t rows, int64_t n, int64_t width,
                   const SplitTerms& terms, bool left, uint16_t* out, int64_t ldo);

// Tests: while on, every forward workspace made fills its bf16 buffers (packs, query and
// probability rows) with a NaN pattern, 0x7FC0, so that what a kernel reads without
// having written shows as NaN rather than as the allocator's zeros.
void SetBf16BufferPoisonForTest(bool on);
bool Bf16BufferPoisonForTest();

}  // namespace cpu
}  // namespace attention
}  // namespace gpe

#endif  // ATTENTION_CPU_SPLIT_BF16_H_
