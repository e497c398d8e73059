#include "encodings/analysis/distance_preservation.h"

#include <algorithm>
#include <cmath>

#include <Eigen/Dense>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace gpe {
namespace encodings {
namespace {

constexpr double kPi = 3.14159265358979323846;

absl::Status CheckSpacing(double s) {
  if (!(std::isfinite(s) && s > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("sample_spacing must be finite and > 0, got ", s));
  }
  return absl::OkStatus();
}

absl::Status CheckClosedForm(double param, double delta) {
  if (!(std::isfinite(param) && param > 0)) {
    return absl::InvalidArgumentError(absl::StrCat("parameter must be finite and > 0, got ", param));
  }
  if (!std::isfinite(delta)) return absl::InvalidArgumentError("delta must be finite");
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<double> EmbeddedDistance(const Eigen::Ref<const Eigen::VectorXd>& psi1,
                                        const Eigen::Ref<const Eigen::VectorXd>& psi2,
                                        double sample_spacing) {
  if (absl::Status s = CheckSpacing(sample_spacing); !s.ok()) return s;
  if (psi1.size() == 0 || psi1.size() != psi2.size()) {
    return absl::InvalidArgumentError(absl::StrCat("EmbeddedDistance: lengths ", psi1.size(),
                                                   " and ", psi2.size(), " (need equal, > 0)"));
  }
  if (!psi1.allFinite() || !psi2.allFinite()) {
    return absl::InvalidArgumentError("EmbeddedDistance: non-finite features");
  }
  // Zheng et al. eq. 6.
  return sample_spacing * psi1.dot(psi2);
}

absl::StatusOr<Eigen::MatrixXd> EmbeddedDistanceMatrix(
    const Eigen::Ref<const Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic,
                                         Eigen::RowMajor>>& features,
    double sample_spacing) {
  if (absl::Status s = CheckSpacing(sample_spacing); !s.ok()) return s;
  if (features.size() == 0) return absl::InvalidArgumentError("EmbeddedDistanceMatrix: empty");
  if (!features.allFinite()) {
    return absl::InvalidArgumentError("EmbeddedDistanceMatrix: non-finite features");
  }
  return Eigen::MatrixXd(sample_spacing * features * features.transpose());
}

absl::StatusOr<double> GaussianEmbedderDistance(double sigma, double delta) {
  if (absl::Status s = CheckClosedForm(sigma, delta); !s.ok()) return s;
  // Zheng et al. eq. 24, exp(-delta^2 / (4 sigma^2)) as exp(-r^2), r = delta / (2 sigma):
  // squaring first overflowed or underflowed for extreme widths (delta^2 / (4 sigma^2)
  // was inf / inf or 0 / 0 = NaN where the ratio itself is finite).
  const double r = delta / (2 * sigma);
  return std::sqrt(kPi) * sigma * std::exp(-r * r);
}

absl::StatusOr<double> RectangleEmbedderDistance(double width, double delta) {
  if (absl::Status s = CheckClosedForm(width, delta); !s.ok()) return s;
  // Zheng et al. eq. 34.
  return std::max(width - std::abs(delta), 0.0);
}

absl::StatusOr<double> TriangleEmbedderDistance(double width, double delta) {
  if (absl::Status s = CheckClosedForm(width, delta); !s.ok()) return s;
  // Autocorrelation of tri(2u / w) (replaces Zheng et al. eq. 39; see the header).
  const double u = 2 * std::abs(delta) / width;
  double c = 0;
  if (u <= 1) {
    c = 2.0 / 3.0 - u * u + 0.5 * u * u * u;
  } else if (u < 2) {
    c = (2 - u) * (2 - u) * (2 - u) / 6.0;
  }
  return 0.5 * width * c;
}

absl::StatusOr<double> RffExpectedDistance(double sigma, double delta) {
  if (absl::Status s = CheckClosedForm(sigma, delta); !s.ok()) return s;
  // Characteristic function of N(0, sigma^2) at 2 pi delta (Zheng et al. Prop. 3, eq. 29).
  // As exp(-2 (pi sigma delta)^2): sigma^2 delta^2 was 0 * inf = NaN for a tiny sigma and
  // a huge delta whose product is moderate.
  const double t = kPi * sigma * delta;
  return std::exp(-2 * t * t);
}

}  // namespace encodings
}  // namespace gpe
