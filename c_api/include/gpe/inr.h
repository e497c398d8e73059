/* GroupPE's C ABI: implicit neural representations fitted by least squares over a fixed
 * encoding (inr/closed_form.h, blended.h): separable 2-D and 3-D closed forms, the
 * blended fit of scattered samples, and the condition number of a factor. Matrices are
 * float64 DLTensors of any strides. Training by gradient descent is in
 * gpe/inr_training.h, data and metrics in gpe/inr_data.h. One part of gpe/gpe.h
 * (include that); valid C99 on its own.
 */
#ifndef GPE_INR_H_
#define GPE_INR_H_

#include "gpe/common.h"
#include "gpe/coordinate.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gpe_separable_fit_options {
  uint32_t struct_size;           /* sizeof(gpe_separable_fit_options) */
  /* nonzero: the image-sized product Psi_y^T image in float32. Its sums of n_y products
   * psi_y * image must stay within float32's range, |x| <= 3.4e38 (sufficient:
   * n_y max|psi_y| max|image| <= 3.4e38; in particular every image and psi entry below
   * 3.4e38); past it the call is GPE_ERROR_INVALID_ARGUMENT naming the image, never a
   * non-finite W. Values below ~1e-38 lose precision (float32 subnormals); use 0 for
   * such data. */
  int32_t float32_image_products;
  double lambda;                  /* ridge on each factor, finite, >= 0 */
  /* Added after 0.3.0 (older callers' structs end before it and get 0): in [0, 1). 0: the
   * Cholesky route, which refuses singular factors. > 0: each factor's pseudo-inverse
   * from its SVD, singular values s <= rcond * s_max dropped and the others filtered by
   * s / (s^2 + lambda); accepts rank-deficient factors (NumPy's pinv(Psi, rcond) at
   * lambda = 0). float32_image_products is ignored on this route. */
  double rcond;
} gpe_separable_fit_options;
#define GPE_SEPARABLE_FIT_OPTIONS_INIT \
  { (uint32_t)sizeof(gpe_separable_fit_options), 0, 0.0, 0.0 }

/* The closed-form fit of a complex encoding + one linear layer on a separable grid
 * (Zheng et al. eq. 10): W = A_y S A_x^T, A = (Psi^T Psi + lambda I)^-1 Psi^T.
 * psi_y: [Ny, Ky], psi_x: [Nx, Kx], image: [Ny, Nx] (rows = y), w (out): [Ky, Kx].
 * With rcond = 0, a rank-deficient or numerically singular factor (cond(Psi^T Psi +
 * lambda I) above ~4e12) is GPE_ERROR_INVALID_ARGUMENT with a message suggesting
 * lambda > 0 or rcond > 0; no garbage is returned. A factor can be well-posed yet
 * ill-conditioned (the exact minimiser then interpolates the samples with weights that
 * explode between them): check gpe_inr_condition_number and use rcond or lambda.
 * Every input must be finite (a NaN or inf is GPE_ERROR_INVALID_ARGUMENT). Finite inputs
 * whose products overflow (float32_image_products: past 3.4e38, see above; otherwise
 * past float64's 1.8e308) are GPE_ERROR_INVALID_ARGUMENT and leave w untouched: a W with
 * an inf or NaN is never returned with GPE_OK. */
GPE_API GPE_NODISCARD gpe_status gpe_inr_fit_separable_2d(const gpe_separable_fit_options* options,
                                                          const DLTensor* psi_y,
                                                          const DLTensor* psi_x,
                                                          const DLTensor* image, DLTensor* w);
/* out = Psi_y W Psi_x^T: [Ny, Nx]. */
GPE_API GPE_NODISCARD gpe_status gpe_inr_predict_separable_2d(const DLTensor* psi_y,
                                                              const DLTensor* psi_x,
                                                              const DLTensor* w, DLTensor* out);

/* Volumes on a separable grid (mode-n products, Zheng et al. sec. 5): W = V x_0 A_0 x_1
 * A_1 x_2 A_2 with A_d = (Psi_d^T Psi_d + lambda I)^-1 Psi_d^T (or the truncated-SVD
 * pseudo-inverse when rcond > 0; float32_image_products is ignored). psi_d: float64
 * [n_d, K_d]; volume: float64 [n_0, n_1, n_2]; w (out): float64 [K_0, K_1, K_2]. Inputs
 * must be finite; a W that would overflow is GPE_ERROR_INVALID_ARGUMENT (never returned
 * with an inf or NaN). */
GPE_API GPE_NODISCARD gpe_status gpe_inr_fit_separable_3d(const gpe_separable_fit_options* options,
                                                          const DLTensor* psi_0,
                                                          const DLTensor* psi_1,
                                                          const DLTensor* psi_2,
                                                          const DLTensor* volume, DLTensor* w);
/* out = W x_0 Psi_0 x_1 Psi_1 x_2 Psi_2: float64 [n_0, n_1, n_2]. */
GPE_API GPE_NODISCARD gpe_status gpe_inr_predict_separable_3d(const DLTensor* psi_0,
                                                              const DLTensor* psi_1,
                                                              const DLTensor* psi_2,
                                                              const DLTensor* w, DLTensor* out);

/* Non-separable samples (Zheng et al. sec. 5, appendix B.2): the model's values on a
 * virtual grid grid_y x grid_x, V = Psi(grid_y) W Psi(grid_x)^T, reach a scattered point
 * through the 4 blending weights of its cell (eq. 44); W minimises |f(points) - values|^2
 * + lambda |V|_F^2 by preconditioned CGLS (inr/blended.h). encoder_x / encoder_y: 1-D
 * coordinate encoders (input width 1, e.g. a one-axis gpe_shifted_encoder_create);
 * grid_x [N], grid_y [M]: >= 2 strictly increasing; points: float64 [P, 2] as (x, y),
 * inside the grid's box; values: float64 [P]; w (out): float64 [K_y, K_x]. */
typedef struct gpe_blended_fit_options {
  uint32_t struct_size;   /* sizeof(gpe_blended_fit_options) */
  int32_t max_iterations; /* >= 1 */
  double lambda;          /* ridge on the virtual-grid values, finite, >= 0 */
  double tolerance;       /* stop when |grad| <= tolerance |grad_0|; finite, >= 0 */
} gpe_blended_fit_options;
#define GPE_BLENDED_FIT_OPTIONS_INIT \
  { (uint32_t)sizeof(gpe_blended_fit_options), 500, 1e-6, 1e-6 }
/* iterations and rms_residual (sqrt of the mean squared error at the samples) may be NULL. */
GPE_API GPE_NODISCARD gpe_status gpe_inr_fit_blended_2d(
    const gpe_blended_fit_options* options, const gpe_coordinate_encoder* encoder_x,
    const gpe_coordinate_encoder* encoder_y, const DLTensor* grid_x, const DLTensor* grid_y,
    const DLTensor* points, const DLTensor* values, DLTensor* w, int32_t* iterations,
    double* rms_residual);
/* out[p] = f(points[p]) for weights w: float64 [P]. */
GPE_API GPE_NODISCARD gpe_status gpe_inr_predict_blended_2d(
    const gpe_coordinate_encoder* encoder_x, const gpe_coordinate_encoder* encoder_y,
    const DLTensor* grid_x, const DLTensor* grid_y, const DLTensor* points, const DLTensor* w,
    DLTensor* out);

/* cond(Psi) = s_max / s_min of a float64 [N, K] factor (+inf when rank deficient or
 * K > N): how much the exact closed form amplifies data errors. */
GPE_API GPE_NODISCARD gpe_status gpe_inr_condition_number(const DLTensor* psi, double* out);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* GPE_INR_H_ */
