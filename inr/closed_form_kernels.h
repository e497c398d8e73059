// Vector kernels of the closed-form separable fit (closed_form.cc), compiled per
// instruction set with Highway and chosen at run time, each beside a plain reference
// that the tests compare it with (closed_form_kernels_test.cc).
#ifndef INR_CLOSED_FORM_KERNELS_H_
#define INR_CLOSED_FORM_KERNELS_H_

#include <cstdint>

namespace gpe {
namespace inr {
namespace internal {

// Solves G X = B in place for the columns [c0, c1) of B (k rows, row-major, leading
// dimension ldb), with G = L L^T and the band Cholesky factor L stored row by row:
// band[j * (kd + 1) + (i - j)] = L(i, j) for j <= i <= j + kd (LAPACK's dpbtrf "L"
// layout, column-major (kd + 1) x k). Forward substitution L Y = B, then L^T X = Y.
// Left-looking: each row of the result is accumulated in registers from the kd rows
// above (below) it over a chunk of columns, so a chunk's working set is kd + 1 rows.
void BandCholeskySolve(const double* band, int64_t k, int64_t kd, double* b, int64_t ldb,
                       int64_t c0, int64_t c1);
// The same by right-looking row operations (axpy of row j into the rows below), plain C++.
void BandCholeskySolveReference(const double* band, int64_t k, int64_t kd, double* b,
                                int64_t ldb, int64_t c0, int64_t c1);

// True iff every entry of the rows x cols block (leading dimension ld) is finite. Also
// the MLP trainer's input check (mlp.cc), hence the float overloads.
bool AllFinite(const double* data, int64_t rows, int64_t cols, int64_t ld);
bool AllFiniteReference(const double* data, int64_t rows, int64_t cols, int64_t ld);
bool AllFinite(const float* data, int64_t rows, int64_t cols, int64_t ld);
bool AllFiniteReference(const float* data, int64_t rows, int64_t cols, int64_t ld);

// max |entry| of the rows x cols block (leading dimension ld); 0 when empty. Entries
// finite.
double MaxAbs(const double* data, int64_t rows, int64_t cols, int64_t ld);
double MaxAbsReference(const double* data, int64_t rows, int64_t cols, int64_t ld);

// [lo, hi): from the first to one past the last index c < k with |row[c]| >= threshold;
// lo = k, hi = 0 when there is none. threshold > 0; entries finite.
void RowSpan(const double* row, int64_t k, double threshold, int64_t* lo, int64_t* hi);
void RowSpanReference(const double* row, int64_t k, double threshold, int64_t* lo, int64_t* hi);

// dst (cols x rows, leading dimension ldd) = src^T for src rows x cols (leading
// dimension lds), in 8 x 8 tiles (a column walk through a row-major matrix whose rows
// are 4 KiB apart misses the cache on every element).
void Transpose(const double* src, int64_t rows, int64_t cols, int64_t lds, double* dst,
               int64_t ldd);

// dst[i] = (float)src[i], i < n (round to nearest).
void DemoteToFloat(const double* src, int64_t n, float* dst);

}  // namespace internal
}  // namespace inr
}  // namespace gpe

#endif  // INR_CLOSED_FORM_KERNELS_H_
