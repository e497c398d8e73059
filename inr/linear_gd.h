// Gradient descent (Adam) on the single linear layer over a fixed encoding: Zheng et al.'s
// "simple / complex embedder + one linear layer trained by gradient descent" (sec. 6.2,
// Tables 1-3), the iterative counterpart of the closed forms in closed_form.h.
//
// Two models, both without a bias term (the closed forms have none either):
// - Dense: Y_hat = Phi W with Phi (N x F) any materialised encoding (the simple
//   embedder, eq. 16), W (F x C), targets Y (N x C).
// - Separable (the complex / Kronecker embedder on a grid, eq. 10 with the transposes its
//   shapes need, as in closed_form.h): S_hat = Psi_y W Psi_x^T with Psi_y (n_y x K_y),
//   Psi_x (n_x x K_x), W (K_y x K_x), never forming the Kronecker product.
// Loss: MSE, the mean over all entries of (prediction - target)^2 (mlp.h's MseLoss), so
//   dense:     dL/dW = 2 / (N C)     Phi^T (Phi W - Y)
//   separable: dL/dW = 2 / (n_y n_x) Psi_y^T (S_hat - S) Psi_x.
// With no regularisation these are the least-squares objectives FitSeparable2D solves at
// lambda = 0, so for full-column-rank encodings Adam converges to the closed form's W.
//
// Optimiser: Adam (mlp.h's AdamT<double>) from W = 0, full batch, with the learning rate
// decayed exponentially from learning_rate (step 1) to final_learning_rate (last step):
// lr_t = lr (final / lr)^((t - 1) / (steps - 1)). A constant rate leaves Adam hovering
// within ~lr of the minimiser; the decay lets it settle. Arithmetic is float64.
// Bad input (shape mismatch, empty or non-finite matrices, bad rates) returns a non-OK
// status, never a crash.
#ifndef INR_LINEAR_GD_H_
#define INR_LINEAR_GD_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/statusor.h"
#include "inr/closed_form.h"

namespace gpe {
namespace inr {

// The dense model's MSE at W; `grad` (optional) receives dL/dW (F x C).
absl::StatusOr<double> DenseLinearLoss(const MatrixRef& phi, const MatrixRef& targets,
                                       const MatrixRef& w, RowMatrixXd* grad = nullptr);
// The separable model's MSE at W for one channel s (n_y x n_x); `grad` receives dL/dW.
absl::StatusOr<double> SeparableLinearLoss(const MatrixRef& psi_y, const MatrixRef& psi_x,
                                           const MatrixRef& s, const MatrixRef& w,
                                           RowMatrixXd* grad = nullptr);

struct LinearAdamOptions {
  int64_t steps = 2000;               // >= 1
  double learning_rate = 1e-2;        // finite, > 0
  double final_learning_rate = 1e-2;  // finite, > 0; equal to learning_rate: constant
  double beta1 = 0.9, beta2 = 0.999, epsilon = 1e-8;  // as AdamOptions
  // Called every `report_every` steps (0: never) with (step, training loss before it).
  int64_t report_every = 0;
  std::function<void(int64_t, double)> progress;
};

struct LinearAdamFit {
  RowMatrixXd weights;
  std::vector<double> loss;  // loss[s]: training MSE before update s + 1 (length = steps)
  double final_loss = 0.0;   // training MSE after the last update
};

// Minimises DenseLinearLoss over W (F x C) from W = 0.
absl::StatusOr<LinearAdamFit> FitDenseAdam(const MatrixRef& phi, const MatrixRef& targets,
                                           const LinearAdamOptions& options);
// Minimises SeparableLinearLoss over W (K_y x K_x) from W = 0, one channel.
absl::StatusOr<LinearAdamFit> FitSeparableAdam2D(const MatrixRef& psi_y, const MatrixRef& psi_x,
                                                 const MatrixRef& s,
                                                 const LinearAdamOptions& options);

}  // namespace inr
}  // namespace gpe

#endif  // INR_LINEAR_GD_H_
