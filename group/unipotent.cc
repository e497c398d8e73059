#include "group/unipotent.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include <Eigen/Dense>
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "group/batch.h"

namespace gpe {
namespace group {
namespace {

absl::Status ValidatePath(absl::Span<const UnipotentStep> path) {
  for (size_t l = 0; l < path.size(); ++l) {
    if (absl::Status s = ValidateSquareZero(path[l].generator); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("path step ", l, ": ", s.message()));
    }
    if (path[l].generator.rows() != path[0].generator.rows()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "path step ", l, ": generator is ", path[l].generator.rows(), "x",
          path[l].generator.cols(), ", step 0's is ", path[0].generator.rows(), "x",
          path[0].generator.cols()));
    }
    if (!std::isfinite(path[l].t)) {
      return absl::InvalidArgumentError(absl::StrCat("path step ", l, ": t is not finite"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateSquareZero(const Eigen::Ref<const Eigen::MatrixXd>& a, double tol) {
  if (a.rows() != a.cols() || a.rows() < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "unipotent generator must be a non-empty square matrix, got ", a.rows(), "x", a.cols()));
  }
  if (!a.allFinite()) return absl::InvalidArgumentError("unipotent generator is not finite");
  // Relative to |A|^2 (the size A^2's rounding has), not to max(1, |A|)^2: an A of 1e-6
  // whose square is 1e-12 (not nilpotent at all) passed, and omega = 1e6 then broke the
  // homomorphism by omega^2 A^2 = -I.
  const double scale = a.cwiseAbs().maxCoeff();
  const double sq = (a * a).cwiseAbs().maxCoeff();
  if (sq > tol * scale * scale) {
    return absl::InvalidArgumentError(
        absl::StrCat("unipotent generator needs A^2 = 0, got |A^2|_max = ", sq));
  }
  return absl::OkStatus();
}

Eigen::VectorXd HomogeneousLift(const Eigen::Ref<const Eigen::VectorXd>& x) {
  Eigen::VectorXd out(x.size() + 1);
  out.head(x.size()) = x;
  out(x.size()) = 1.0;
  return out;
}

absl::StatusOr<UnipotentRepresentation> UnipotentRepresentation::Create(
    const Eigen::Ref<const Eigen::MatrixXd>& a, double omega) {
  if (absl::Status s = ValidateSquareZero(a); !s.ok()) return s;
  if (!std::isfinite(omega)) return absl::InvalidArgumentError("omega is not finite");
  return UnipotentRepresentation(a, omega);
}

Eigen::MatrixXd UnipotentRepresentation::Matrix(int64_t p) const {
  return Eigen::MatrixXd::Identity(dim(), dim()) + (static_cast<double>(p) * omega_) * a_;
}

template <class T>
absl::Status UnipotentRepresentation::Apply(absl::Span<const int64_t> positions, const T* in,
                                            int64_t in_stride, T* out, int64_t out_stride) const {
  const int64_t n = static_cast<int64_t>(positions.size());
  const int64_t d = dim();
  if (absl::Status s = internal::ValidateBatch("UnipotentRepresentation::Apply", n, d, in,
                                               in_stride, out, out_stride, sizeof(T));
      !s.ok()) {
    return s;
  }
  std::vector<double> buf(2 * static_cast<size_t>(d));
  // Fixed-size maps, never resized (also keeps GCC 12's -Wuse-after-free quiet in Eigen).
  Eigen::Map<Eigen::VectorXd> x(buf.data(), d), ax(buf.data() + d, d);
  for (int64_t j = 0; j < n; ++j) {
    const T* src = in + j * in_stride;
    for (int64_t i = 0; i < d; ++i) x(i) = static_cast<double>(src[i]);
    ax.noalias() = a_ * x;
    const double t = static_cast<double>(positions[j]) * omega_;
    T* dst = out + j * out_stride;
    for (int64_t i = 0; i < d; ++i) dst[i] = static_cast<T>(x(i) + t * ax(i));
  }
  return absl::OkStatus();
}

template absl::Status UnipotentRepresentation::Apply<float>(absl::Span<const int64_t>,
                                                            const float*, int64_t, float*,
                                                            int64_t) const;
template absl::Status UnipotentRepresentation::Apply<double>(absl::Span<const int64_t>,
                                                             const double*, int64_t, double*,
                                                             int64_t) const;

absl::StatusOr<Eigen::MatrixXd> UnipotentPathProduct(absl::Span<const UnipotentStep> path) {
  if (path.empty()) return absl::InvalidArgumentError("empty path: its size is unknown");
  if (absl::Status s = ValidatePath(path); !s.ok()) return s;
  const Eigen::Index d = path[0].generator.rows();
  Eigen::MatrixXd m = Eigen::MatrixXd::Identity(d, d);
  // M (I + t A) = M + t (M A).
  for (const UnipotentStep& step : path) m += step.t * (m * step.generator);
  return m;
}

absl::StatusOr<Eigen::MatrixXd> UnipotentPathInverse(absl::Span<const UnipotentStep> path) {
  if (path.empty()) return absl::InvalidArgumentError("empty path: its size is unknown");
  if (absl::Status s = ValidatePath(path); !s.ok()) return s;
  const Eigen::Index d = path[0].generator.rows();
  Eigen::MatrixXd m = Eigen::MatrixXd::Identity(d, d);
  for (auto it = path.rbegin(); it != path.rend(); ++it) m -= it->t * (m * it->generator);
  return m;
}

}  // namespace group
}  // namespace gpe
