#include "inr/linear_gd.h"

#include <cmath>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "inr/mlp.h"

namespace gpe {
namespace inr {
namespace {

absl::Status CheckMatrix(const MatrixRef& m, absl::string_view what) {
  if (m.rows() == 0 || m.cols() == 0) {
    return absl::InvalidArgumentError(absl::StrCat(what, " is empty"));
  }
  if (!m.allFinite()) return absl::InvalidArgumentError(absl::StrCat(what, " is not finite"));
  return absl::OkStatus();
}

absl::Status CheckShape(const MatrixRef& m, int64_t rows, int64_t cols, absl::string_view what) {
  if (m.rows() != rows || m.cols() != cols) {
    return absl::InvalidArgumentError(absl::StrCat(what, " is ", m.rows(), " x ", m.cols(),
                                                   ", expected ", rows, " x ", cols));
  }
  return absl::OkStatus();
}

absl::Status CheckOptions(const LinearAdamOptions& o) {
  if (o.steps < 1) return absl::InvalidArgumentError("linear Adam: steps must be >= 1");
  for (double lr : {o.learning_rate, o.final_learning_rate}) {
    if (!std::isfinite(lr) || lr <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("linear Adam: learning rates must be finite and > 0, got ", lr));
    }
  }
  if (o.report_every < 0) return absl::InvalidArgumentError("linear Adam: report_every < 0");
  return absl::OkStatus();
}

// The shared loop: `loss_and_grad(w, grad)` returns the loss at w and fills grad.
template <typename LossFn>
absl::StatusOr<LinearAdamFit> RunAdam(int64_t rows, int64_t cols, const LinearAdamOptions& o,
                                      const LossFn& loss_and_grad) {
  AdamOptions adam_options;
  adam_options.learning_rate = o.learning_rate;
  adam_options.beta1 = o.beta1;
  adam_options.beta2 = o.beta2;
  adam_options.epsilon = o.epsilon;
  absl::StatusOr<AdamT<double>> adam = AdamT<double>::Create(rows * cols, adam_options);
  if (!adam.ok()) return adam.status();
  LinearAdamFit fit;
  fit.weights = RowMatrixXd::Zero(rows, cols);
  fit.loss.reserve(o.steps);
  Vector<double> params = Vector<double>::Zero(rows * cols), flat_grad;
  RowMatrixXd grad;
  const double ratio = o.final_learning_rate / o.learning_rate;
  for (int64_t t = 0; t < o.steps; ++t) {
    absl::StatusOr<double> loss = loss_and_grad(fit.weights, &grad);
    if (!loss.ok()) return loss.status();
    if (!std::isfinite(*loss)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "linear Adam: the loss became non-finite at step ", t + 1, " (learning rate too large?)"));
    }
    fit.loss.push_back(*loss);
    if (o.report_every > 0 && o.progress && (t + 1) % o.report_every == 0) o.progress(t + 1, *loss);
    const double frac = o.steps > 1 ? static_cast<double>(t) / static_cast<double>(o.steps - 1) : 0;
    adam->set_learning_rate(o.learning_rate * std::pow(ratio, frac));
    flat_grad = Eigen::Map<const Vector<double>>(grad.data(), grad.size());
    if (absl::Status s = adam->Step(flat_grad, &params); !s.ok()) return s;
    fit.weights = Eigen::Map<const RowMatrixXd>(params.data(), rows, cols);
  }
  absl::StatusOr<double> last = loss_and_grad(fit.weights, nullptr);
  if (!last.ok()) return last.status();
  if (!std::isfinite(*last)) {  // the last update diverged (each earlier one is checked above)
    return absl::FailedPreconditionError(absl::StrCat(
        "linear Adam: the loss became non-finite after the last step, ", o.steps,
        " (learning rate too large?)"));
  }
  fit.final_loss = *last;
  return fit;
}

}  // namespace

absl::StatusOr<double> DenseLinearLoss(const MatrixRef& phi, const MatrixRef& targets,
                                       const MatrixRef& w, RowMatrixXd* grad) {
  if (absl::Status s = CheckMatrix(phi, "features"); !s.ok()) return s;
  if (absl::Status s = CheckMatrix(targets, "targets"); !s.ok()) return s;
  if (absl::Status s = CheckShape(targets, phi.rows(), targets.cols(), "targets"); !s.ok()) return s;
  if (absl::Status s = CheckShape(w, phi.cols(), targets.cols(), "weights"); !s.ok()) return s;
  if (!w.allFinite()) return absl::InvalidArgumentError("weights are not finite");
  const RowMatrixXd residual = phi * w - targets;
  const double count = static_cast<double>(residual.size());
  if (grad != nullptr) *grad = (2.0 / count) * (phi.transpose() * residual);
  return residual.squaredNorm() / count;
}

absl::StatusOr<double> SeparableLinearLoss(const MatrixRef& psi_y, const MatrixRef& psi_x,
                                           const MatrixRef& s, const MatrixRef& w,
                                           RowMatrixXd* grad) {
  if (absl::Status st = CheckMatrix(psi_y, "Psi_y"); !st.ok()) return st;
  if (absl::Status st = CheckMatrix(psi_x, "Psi_x"); !st.ok()) return st;
  if (absl::Status st = CheckMatrix(s, "image"); !st.ok()) return st;
  if (absl::Status st = CheckShape(s, psi_y.rows(), psi_x.rows(), "image"); !st.ok()) return st;
  if (absl::Status st = CheckShape(w, psi_y.cols(), psi_x.cols(), "weights"); !st.ok()) return st;
  if (!w.allFinite()) return absl::InvalidArgumentError("weights are not finite");
  // Eq. 10: S_hat = Psi_y W Psi_x^T, the cheaper association first.
  const RowMatrixXd residual = psi_y * (w * psi_x.transpose()) - s;
  const double count = static_cast<double>(residual.size());
  if (grad != nullptr) *grad = (2.0 / count) * ((psi_y.transpose() * residual) * psi_x);
  return residual.squaredNorm() / count;
}

absl::StatusOr<LinearAdamFit> FitDenseAdam(const MatrixRef& phi, const MatrixRef& targets,
                                           const LinearAdamOptions& options) {
  if (absl::Status s = CheckOptions(options); !s.ok()) return s;
  const RowMatrixXd zero = RowMatrixXd::Zero(phi.cols(), targets.cols());
  if (absl::StatusOr<double> l = DenseLinearLoss(phi, targets, zero); !l.ok()) return l.status();
  return RunAdam(phi.cols(), targets.cols(), options,
                 [&](const RowMatrixXd& w, RowMatrixXd* g) {
                   return DenseLinearLoss(phi, targets, w, g);
                 });
}

absl::StatusOr<LinearAdamFit> FitSeparableAdam2D(const MatrixRef& psi_y, const MatrixRef& psi_x,
                                                 const MatrixRef& s,
                                                 const LinearAdamOptions& options) {
  if (absl::Status st = CheckOptions(options); !st.ok()) return st;
  const RowMatrixXd zero = RowMatrixXd::Zero(psi_y.cols(), psi_x.cols());
  if (absl::StatusOr<double> l = SeparableLinearLoss(psi_y, psi_x, s, zero); !l.ok()) {
    return l.status();
  }
  return RunAdam(psi_y.cols(), psi_x.cols(), options,
                 [&](const RowMatrixXd& w, RowMatrixXd* g) {
                   return SeparableLinearLoss(psi_y, psi_x, s, w, g);
                 });
}

}  // namespace inr
}  // namespace gpe
