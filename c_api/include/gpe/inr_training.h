/* GroupPE's C ABI: implicit neural representations trained by full-batch Adam (inr/mlp.h,
 * linear_gd.h): a small ReLU network, and the linear layer over a fixed encoding. The
 * section's data, splits and metrics are in gpe/inr_data.h, its image files in
 * gpe/image.h. One part of gpe/gpe.h (include that); valid C99 on its own.
 */
#ifndef GPE_INR_TRAINING_H_
#define GPE_INR_TRAINING_H_

#include "gpe/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- INR training, data and metrics (since 0.5.0) ------------------------------------
 *
 * Iterative fits (full-batch Adam), Lim et al.'s analytic data and the papers' splits,
 * image files, and the error metrics, from inr/ (mlp.h, linear_gd.h, data.h).
 */

/* Progress of a long fit: called on the calling thread after `step` updates with the
 * training loss (MSE) of the forward pass that produced the last update's gradient. */
typedef void (*gpe_progress_callback)(void* user_data, int64_t step, double train_loss);

/* Adam (Kingma & Ba 2015, Algorithm 1), as PyTorch's torch.optim.Adam: with t the step
 * count after increment, m <- b1 m + (1 - b1) g, v <- b2 v + (1 - b2) g^2,
 * p <- p - lr (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps). */

/* -- A small fully connected ReLU network trained full-batch (Lim et al., appendix D.2) --
 * Layer l maps H_l [N, fan_in] to H_l W_l + 1 b_l (W_l [fan_in, fan_out]); hidden layers
 * apply ReLU, the output layer is linear. input_dim -> hidden_width (num_hidden_layers
 * times) -> output_dim; num_hidden_layers = 0 is one linear layer. Parameters are ONE flat
 * vector, layer by layer: W_0 (row-major), b_0, W_1, b_1, ... (gpe_inr_mlp_num_parameters
 * entries). Initialisation: PyTorch's nn.Linear default, W, b ~ U(-1/sqrt(fan_in),
 * 1/sqrt(fan_in)), from a seeded std::mt19937_64 (the same network on every platform).
 * Loss: MSE = mean over all N x output_dim entries of (prediction - target)^2.
 * Scalar type: float32 tensors train the float32 network (OpenBLAS sgemm, the fast path);
 * float64 tensors train the same network in float64 (for checks against references). */
typedef struct gpe_mlp_options {
  uint32_t struct_size;      /* sizeof(gpe_mlp_options) */
  int64_t hidden_width;      /* >= 1 (Lim et al.: 128) */
  int64_t num_hidden_layers; /* >= 0 (Lim et al.: 3) */
  int64_t steps;             /* full-batch Adam steps, >= 0 (Lim et al.: 500) */
  double learning_rate;      /* finite, > 0 */
  double beta1, beta2;       /* in [0, 1) */
  double epsilon;            /* finite, > 0 */
  uint64_t seed;             /* initialisation when no initial parameters are given */
  int64_t report_every;      /* progress every report_every steps and after the last; 0: last only */
  gpe_progress_callback progress; /* optional */
  void* progress_user_data;
} gpe_mlp_options;
#define GPE_MLP_OPTIONS_INIT                                                        \
  { (uint32_t)sizeof(gpe_mlp_options), 128, 3, 500, 1e-3, 0.9, 0.999, 1e-8, 0, 0, \
    NULL, NULL }

/* The parameter count for input_dim -> ... -> output_dim (both >= 1). */
GPE_API GPE_NODISCARD gpe_status gpe_inr_mlp_num_parameters(const gpe_mlp_options* options,
                                                            int64_t input_dim,
                                                            int64_t output_dim, int64_t* out);
/* The seeded initial parameters (options->seed): float32 or float64 [P]. */
GPE_API GPE_NODISCARD gpe_status gpe_inr_mlp_init(const gpe_mlp_options* options,
                                                  int64_t input_dim, int64_t output_dim,
                                                  DLTensor* parameters);
/* Trains on every row at each step. features [N, input_dim] and targets [N, output_dim]:
 * float32 or float64 (one dtype for all tensors), finite, N >= 1. initial_parameters
 * ([P], or NULL for the seeded initialisation) are not modified; parameters (out, [P]) receives
 * the trained network and may be initial_parameters itself. train_loss (optional, float64
 * [steps]) receives the MSE before each update; final_loss (optional) the MSE after the
 * last. A non-finite loss (too large a learning rate) is GPE_ERROR_INVALID_ARGUMENT and
 * leaves the outputs unwritten. */
GPE_API GPE_NODISCARD gpe_status gpe_inr_mlp_fit(const gpe_mlp_options* options,
                                                 const DLTensor* features,
                                                 const DLTensor* targets,
                                                 const DLTensor* initial_parameters,
                                                 DLTensor* parameters, DLTensor* train_loss,
                                                 double* final_loss);
/* out [N, output_dim] = the network's output on features [N, input_dim] (float32 or
 * float64, with parameters [P] of the same dtype; only the options' shape fields are read). */
GPE_API GPE_NODISCARD gpe_status gpe_inr_mlp_predict(const gpe_mlp_options* options,
                                                     const DLTensor* parameters,
                                                     const DLTensor* features, DLTensor* out);
/* (Since 0.6.0.) A held-out validation set for gpe_inr_mlp_fit_v2: the MSE of the network on it is
 * evaluated after every options->report_every updates and after the last (report_every
 * = 0: after the last only; steps = 0: once, at step 0, on the initial network): the
 * schedule of the progress callback, whose train_loss is unchanged. K, the number of
 * evaluations, is what gpe_inr_mlp_num_evaluations returns.
 *  - features [M, input_dim] and targets [M, output_dim]: the fit's dtype, finite,
 *    M >= 1; both or neither (neither: no validation, and no outputs below). They may
 *    share memory with the training features and targets.
 *  - steps (optional output, int64 [K]): the update count after which each evaluation
 *    was made, increasing; loss (optional output, float64 [K]): the validation MSE
 *    (accumulated in double) at each. Written only when the fit succeeds.
 *  - progress (Since 0.7.0; optional, with progress_user_data): called on the calling
 *    thread at each evaluation, K times, after options->progress when both are set, with
 *    the step and train_loss options->progress gets and the validation MSE just
 *    evaluated (the value written to loss[k] when the fit succeeds). A progress without
 *    features and targets is GPE_ERROR_INVALID_ARGUMENT. */
/* The validation progress of gpe_mlp_validation.progress (since 0.7.0): gpe_progress_callback's
 * arguments, then the held-out MSE of the network after `step` updates. */
typedef void (*gpe_validation_progress_callback)(void* user_data, int64_t step, double train_loss,
                                                 double validation_loss);
typedef struct gpe_mlp_validation {
  uint32_t struct_size;     /* sizeof(gpe_mlp_validation) */
  const DLTensor* features; /* [M, input_dim] */
  const DLTensor* targets;  /* [M, output_dim] */
  DLTensor* steps;          /* optional out: int64 [K] */
  DLTensor* loss;           /* optional out: float64 [K] */
  /* (Since 0.7.0; a struct_size of 0.6.0's sizeof, offsetof(gpe_mlp_validation, progress),
   * is still accepted and these two are then not read.) */
  gpe_validation_progress_callback progress; /* optional; needs features and targets */
  void* progress_user_data;
} gpe_mlp_validation;
#define GPE_MLP_VALIDATION_INIT \
  { (uint32_t)sizeof(gpe_mlp_validation), NULL, NULL, NULL, NULL, NULL, NULL }

/* K, the number of validation evaluations (and progress calls) of a fit with
 * options->steps (0..2^31) and options->report_every (>= 0):
 * floor(steps / report_every) when report_every > 0, plus one unless the last step is a
 * multiple of report_every; 1 when steps = 0. */
GPE_API GPE_NODISCARD gpe_status gpe_inr_mlp_num_evaluations(const gpe_mlp_options* options,
                                                             int64_t* out);
/* gpe_inr_mlp_fit with an optional validation set (validation NULL: exactly
 * gpe_inr_mlp_fit). The training bits do not depend on the validation set. */
GPE_API GPE_NODISCARD gpe_status gpe_inr_mlp_fit_v2(
    const gpe_mlp_options* options, const DLTensor* features, const DLTensor* targets,
    const DLTensor* initial_parameters, DLTensor* parameters, DLTensor* train_loss,
    double* final_loss, const gpe_mlp_validation* validation);

/* -- Gradient descent on the linear layer over a fixed encoding (Zheng et al. sec. 6.2) --
 * Adam from W = 0 on the MSE, full batch, float64, with the learning rate decayed
 * exponentially from learning_rate (step 1) to final_learning_rate (the last step):
 * lr_t = lr (final / lr)^((t - 1) / (steps - 1)). Without regularisation this is the
 * least-squares problem the closed forms solve at lambda = 0. */
typedef struct gpe_linear_adam_options {
  uint32_t struct_size;       /* sizeof(gpe_linear_adam_options) */
  int64_t steps;              /* >= 1 */
  double learning_rate;       /* finite, > 0 */
  double final_learning_rate; /* finite, > 0; equal to learning_rate: constant */
  double beta1, beta2;        /* in [0, 1) */
  double epsilon;             /* finite, > 0 */
  int64_t report_every;       /* progress every report_every steps; 0: never */
  gpe_progress_callback progress; /* optional */
  void* progress_user_data;
} gpe_linear_adam_options;
#define GPE_LINEAR_ADAM_OPTIONS_INIT                                                      \
  { (uint32_t)sizeof(gpe_linear_adam_options), 2000, 1e-2, 1e-2, 0.9, 0.999, 1e-8, 0, NULL, \
    NULL }

/* Dense model (the simple embedder, Zheng et al. eq. 16): Y_hat = Phi W.
 * features Phi: float64 [N, F], targets Y: float64 [N, C], finite, non-empty; w (out):
 * float64 [F, C]; train_loss (optional, float64 [steps]): the MSE before each update;
 * final_loss (optional): the MSE after the last. */
GPE_API GPE_NODISCARD gpe_status gpe_inr_fit_dense_adam(const gpe_linear_adam_options* options,
                                                        const DLTensor* features,
                                                        const DLTensor* targets, DLTensor* w,
                                                        DLTensor* train_loss,
                                                        double* final_loss);
/* Separable model (the complex embedder on a grid, eq. 10): S_hat = Psi_y W Psi_x^T, never
 * forming the Kronecker product. psi_y [Ny, Ky], psi_x [Nx, Kx], image [Ny, Nx]; w (out)
 * [Ky, Kx]; the rest as gpe_inr_fit_dense_adam. */
GPE_API GPE_NODISCARD gpe_status gpe_inr_fit_separable_adam_2d(
    const gpe_linear_adam_options* options, const DLTensor* psi_y, const DLTensor* psi_x,
    const DLTensor* image, DLTensor* w, DLTensor* train_loss, double* final_loss);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* GPE_INR_TRAINING_H_ */
