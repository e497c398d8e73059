#include "encodings/analysis/distance_preservation.h"

#include <algorithm>
#include <cmath>
#include <limits>

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

// s * (A B^T), entry by entry as s a_i . b_j where both a_i . b_j and that are normal
// doubles; where either overflowed (inf, or NaN from inf - inf) or fell below the normal
// range (a subnormal a_i . b_j has lost bits that s would lift back into range), again as
// 2^(e_i + e_j + f) (s' a'_i . b'_j), each row scaled by the power of two of its largest
// |entry| (a_i = 2^e_i a'_i) and s = 2^f s' (s' in [1, 2)), so that the products stay in
// range wherever the result is (a spacing of 1e-300 against features of 1e200 gave inf
// for 2e100). Power-of-two scalings are exact. A result past the double range is an
// error rather than inf.
Eigen::VectorXi RowExponents(const Eigen::MatrixXd& a) {
  Eigen::VectorXi e(a.rows());
  for (Eigen::Index i = 0; i < a.rows(); ++i) {
    const double m = a.row(i).cwiseAbs().maxCoeff();
    e(i) = m == 0 ? 0 : std::ilogb(m);
  }
  return e;
}

absl::StatusOr<Eigen::MatrixXd> ScaledProducts(const Eigen::MatrixXd& a, const Eigen::MatrixXd& b,
                                               double s, const char* what) {
  const Eigen::MatrixXd p = a * b.transpose();
  Eigen::MatrixXd out = s * p;
  Eigen::VectorXi ea, eb;
  Eigen::MatrixXd as, bs;
  const int f = std::ilogb(s);
  const double s1 = std::ldexp(s, -f);
  for (Eigen::Index i = 0; i < out.rows(); ++i) {
    for (Eigen::Index j = 0; j < out.cols(); ++j) {
      const double x = out(i, j), y = p(i, j);
      const double kMin = std::numeric_limits<double>::min();
      if (std::isfinite(x) && std::abs(x) >= kMin && std::isfinite(y) && std::abs(y) >= kMin) {
        continue;
      }
      if (ea.size() == 0) {  // first entry out of the normal range: the scaled rows
        ea = RowExponents(a);
        eb = RowExponents(b);
        as = a;
        bs = b;
        for (Eigen::Index r = 0; r < a.rows(); ++r) {
          as.row(r) = as.row(r).unaryExpr([k = -ea(r)](double v) { return std::ldexp(v, k); });
        }
        for (Eigen::Index r = 0; r < b.rows(); ++r) {
          bs.row(r) = bs.row(r).unaryExpr([k = -eb(r)](double v) { return std::ldexp(v, k); });
        }
      }
      out(i, j) = std::ldexp(s1 * as.row(i).dot(bs.row(j)), ea(i) + eb(j) + f);
      if (!std::isfinite(out(i, j))) {
        return absl::OutOfRangeError(absl::StrCat(what, ": entry (", i, ", ", j,
                                                  ") exceeds the double range (sample_spacing ",
                                                  s, ")"));
      }
    }
  }
  return out;
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
  absl::StatusOr<Eigen::MatrixXd> d = ScaledProducts(psi1.transpose(), psi2.transpose(),
                                                     sample_spacing, "EmbeddedDistance");
  if (!d.ok()) return d.status();
  return (*d)(0, 0);
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
  const Eigen::MatrixXd f = features;
  return ScaledProducts(f, f, sample_spacing, "EmbeddedDistanceMatrix");
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
