#include "encodings/analysis/stable_rank.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include <Eigen/Dense>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace gpe {
namespace encodings {
namespace {

constexpr double kPi = 3.14159265358979323846;
constexpr Eigen::Index kMaxGramSize = 8192;

absl::Status CheckClosedFormArgs(double param, int64_t num_points) {
  if (!(std::isfinite(param) && param > 0)) {
    return absl::InvalidArgumentError(absl::StrCat("parameter must be finite and > 0, got ", param));
  }
  if (num_points < 1) {
    return absl::InvalidArgumentError(absl::StrCat("num_points must be >= 1, got ", num_points));
  }
  return absl::OkStatus();
}

absl::StatusOr<double> Capped(double value, double param, int64_t num_points) {
  if (absl::Status s = CheckClosedFormArgs(param, num_points); !s.ok()) return s;
  return std::min(static_cast<double>(num_points), value);
}

}  // namespace

absl::StatusOr<double> StableRank(
    const Eigen::Ref<const Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic,
                                         Eigen::RowMajor>>& a) {
  if (a.size() == 0) return absl::InvalidArgumentError("StableRank: empty matrix");
  if (!a.allFinite()) return absl::InvalidArgumentError("StableRank: non-finite entries");
  const Eigen::Index small = std::min(a.rows(), a.cols());
  if (small > kMaxGramSize) {
    return absl::InvalidArgumentError(absl::StrCat(
        "StableRank: min(rows, cols) = ", small, " exceeds the dense limit ", kMaxGramSize));
  }
  // Scale first so squares neither overflow nor underflow; srank is scale-invariant.
  const double amax = a.cwiseAbs().maxCoeff();
  if (amax == 0) return absl::InvalidArgumentError("StableRank: zero matrix (0 / 0)");
  const Eigen::MatrixXd scaled = a / amax;
  const Eigen::MatrixXd gram = a.rows() <= a.cols()
                                   ? Eigen::MatrixXd(scaled * scaled.transpose())
                                   : Eigen::MatrixXd(scaled.transpose() * scaled);
  Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> eig(gram, Eigen::EigenvaluesOnly);
  if (eig.info() != Eigen::Success) {
    return absl::InternalError("StableRank: eigenvalue iteration did not converge");
  }
  const double top = eig.eigenvalues().maxCoeff();
  // trace(Gram) = ||A||_F^2 (scaled); top > 0 because the matrix is non-zero.
  return gram.trace() / top;
}

absl::StatusOr<double> GaussianEmbedderStableRank(double sigma, int64_t num_points) {
  // Zheng et al. Prop. 2, eq. 23.
  return Capped(1.0 / (2.0 * std::sqrt(kPi) * sigma), sigma, num_points);
}

absl::StatusOr<double> RffStableRank(double sigma, int64_t num_points) {
  // Zheng et al. Prop. 3, eq. 26.
  return Capped(std::sqrt(2.0 * kPi) * sigma, sigma, num_points);
}

absl::StatusOr<double> RectangleEmbedderStableRank(double width, int64_t num_points) {
  // Zheng et al. Prop. 4, eq. 33.
  return Capped(1.0 / width, width, num_points);
}

absl::StatusOr<double> TriangleEmbedderStableRank(double width, int64_t num_points) {
  // Zheng et al. Prop. 5, eq. 38 (min(N, 4 / (3 w)); the proof's last line drops 4/3).
  return Capped(4.0 / (3.0 * width), width, num_points);
}

}  // namespace encodings
}  // namespace gpe
