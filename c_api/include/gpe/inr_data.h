/* GroupPE's C ABI: data for implicit neural representations (inr/data.h): Lim et al.'s
 * analytic images and vector fields, pixel grids, the papers' train / validation / test
 * splits, and the error metrics (since 0.5.0). One part of gpe/gpe.h (include that);
 * valid C99 on its own.
 */
#ifndef GPE_INR_DATA_H_
#define GPE_INR_DATA_H_

#include "gpe/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* -- Data (Lim et al., appendix D.1; Zheng et al.'s splits) --
 * Grid: n x n pixel centres over [-1, 1]^2, rows = y (row i at y_i), columns = x, with
 * x_j = -1 + (2 j + 1) / n; r = sqrt(x^2 + y^2), theta = atan2(y, x). */
enum { GPE_SYNTHETIC_RADIAL = 0, GPE_SYNTHETIC_SPIRAL = 1 };
/* Radial: |sin(15 sqrt(r))|; Spiral: |sin(30 sqrt(0.1 r) + theta)| (the magnitude of the
 * vector fields; signed_values != 0 gives the signed sine). out: float64 [n, n], n >= 1. */
GPE_API GPE_NODISCARD gpe_status gpe_inr_synthetic_image(int32_t task, int32_t signed_values,
                                                         DLTensor* out);
/* The vector fields (eqs. 30, 31): out[i, j, :] = f(r, theta) (cos theta, sin theta) with
 * f the signed sine above. out: float64 [n, n, 2]. */
GPE_API GPE_NODISCARD gpe_status gpe_inr_synthetic_vector_field(int32_t task, DLTensor* out);
/* out[i * n + j, :] = (x_j, y_i): float64 [n * n, 2], the row-major pixel order. */
GPE_API GPE_NODISCARD gpe_status gpe_inr_grid_coordinates(int64_t n, DLTensor* out);
/* Splits of the row-major pixel indices 0..num_points-1 into train, validation and test.
 * indices (out): int64 [num_points], the train indices, then validation, then test, each
 * ascending; counts (out, 3 entries): the three sizes. */
/* Lim et al. D.2: uniformly random fractions (5% / 40% / rest), deterministic in seed
 * (std::mt19937_64 + std::shuffle: reproducible within one C++ standard library); sizes
 * round(fraction * num_points), halves away from zero (llround), the validation set
 * clipped to what the train set leaves when both round up (3 points at 1/2 + 1/2: 2, 1,
 * 0). Fractions finite, >= 0, sum <= 1; num_points >= 0. */
GPE_API GPE_NODISCARD gpe_status gpe_inr_random_split(int64_t num_points, double train_fraction,
                                                      double validation_fraction, uint64_t seed,
                                                      DLTensor* indices, int64_t* counts);
/* Zheng et al.: train on the [::2] x [::2] sub-grid of a rows x cols image, test on the
 * other pixels (no validation: counts[1] = 0). indices: int64 [rows * cols]. */
GPE_API GPE_NODISCARD gpe_status gpe_inr_regular_grid_split(int64_t rows, int64_t cols,
                                                            DLTensor* indices, int64_t* counts);
/* Mean over all entries of (a - b)^2: float64 tensors of one shape, 1 to 3 dimensions, at
 * least one entry, finite. The differences are scaled by a power of two before squaring
 * (no underflow or overflow on the way; inf only where the MSE itself overflows). */
GPE_API GPE_NODISCARD gpe_status gpe_inr_mse(const DLTensor* a, const DLTensor* b, double* out);
/* PSNR = 10 log10(peak^2 / MSE) in dB, formed in logarithms (any finite peak > 0 and
 * differences of any size; +inf exactly when a == b). */
GPE_API GPE_NODISCARD gpe_status gpe_inr_psnr(const DLTensor* a, const DLTensor* b, double peak,
                                              double* out);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* GPE_INR_DATA_H_ */
