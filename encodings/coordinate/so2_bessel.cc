#include "encodings/coordinate/so2_bessel.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "group/angle.h"

namespace gpe {
namespace encodings {
namespace {

// Orders up to 20 are checked against an independent oracle in the test (21 serves the
// derivative of order 20); larger ones are refused rather than answered inaccurately.
constexpr int kMaxOrder = 20;
constexpr int kMaxWeight = 1 << 20;
constexpr int64_t kMaxTerms = int64_t{1} << 20;

// From here on J comes from Hankel's expansion with an exactly reduced phase. libstdc++
// (12) also switches to the expansion past x = 1000, but forms its phase x - (m/2 + 1/4)
// pi in double: the rounding of x itself becomes the phase's error (relative to the
// amplitude, ~x 2^-53: 1e-12 at 1e4, 1e-4 at 1e12, wrong signs at 1e16).
constexpr double kHankelFrom = 1e4;

// J_m(x) for x >= kHankelFrom by Hankel's expansion (DLMF 10.17.3):
//   J_m(x) = sqrt(2 / (pi x)) (P cos w - Q sin w),  w = x - (2m + 1) pi / 4,
//   P = sum_k (-1)^k a_2k / x^2k,  Q = sum_k (-1)^k a_2k+1 / x^2k+1,
//   a_k = prod_{j=1..k} (4m^2 - (2j - 1)^2) / (k! 8^k).
// For m <= 21 and x >= 1e4 the terms fall below 1e-17 of the first by k = 9 (the ratio of
// consecutive terms is (4m^2 - (2k - 1)^2) / (8 k x) <= 0.03). The phase: x = M 2^e with
// an integer mantissa M, so x mod 2 pi is group::ReducedAngle(M, 2^e), exact to an ulp of
// the result; then (2m + 1) pi / 4 is a multiple of pi / 4, taken by its exact cos and sin.
double HankelJ(int m, double x) {
  const double mu = 4.0 * m * m;
  double p = 0, q = 0, term = 1;  // term = a_k / x^k
  for (int k = 0; k < 24; ++k) {
    if (k > 0) term *= (mu - (2.0 * k - 1) * (2.0 * k - 1)) / (8.0 * k * x);
    const double signed_term = (k / 2) % 2 == 0 ? term : -term;
    if (k % 2 == 0) {
      p += signed_term;
    } else {
      q += signed_term;
    }
    if (k > 1 && std::fabs(term) < 1e-18) break;
  }
  int exponent = 0;
  const double mant = std::frexp(x, &exponent);  // x = mant 2^exponent, mant in [0.5, 1)
  const int64_t integer = static_cast<int64_t>(std::ldexp(mant, 53));  // exact
  const double r = group::ReducedAngle(integer, std::ldexp(1.0, exponent - 53));
  // cos and sin of (2m + 1) pi / 4: octant o = (2m + 1) mod 8, all odd.
  constexpr double kHalfSqrt2 = 0.70710678118654752440;
  const int o = (2 * m + 1) % 8;
  const double cphi = (o == 1 || o == 7) ? kHalfSqrt2 : -kHalfSqrt2;
  const double sphi = (o == 1 || o == 3) ? kHalfSqrt2 : -kHalfSqrt2;
  const double cr = std::cos(r), sr = std::sin(r);
  const double cw = cr * cphi + sr * sphi;  // cos(r - phi)
  const double sw = sr * cphi - cr * sphi;  // sin(r - phi)
  return std::sqrt(2.0 / (group::kPi * x)) * (p * cw - q * sw);
}

// Callers have checked 0 <= m <= kMaxOrder + 1 and finite x >= 0, so libstdc++ won't throw.
double J(int m, double x) {
  if (x >= kHankelFrom) return HankelJ(m, x);
  return std::cyl_bessel_j(static_cast<double>(m), x);
}

double JPrime(int m, double x) {
  if (m == 0) return -J(1, x);
  return 0.5 * (J(m - 1, x) - J(m + 1, x));
}

absl::Status CheckBesselArgs(int m, double x) {
  if (m < 0 || m > kMaxOrder) {
    return absl::InvalidArgumentError(absl::StrCat("BesselJ: order must be in [0, 20], got ", m));
  }
  if (!(std::isfinite(x) && x >= 0)) {
    return absl::InvalidArgumentError(absl::StrCat("BesselJ: need finite x >= 0, got ", x));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<double> BesselJ(int m, double x) {
  if (absl::Status s = CheckBesselArgs(m, x); !s.ok()) return s;
  return J(m, x);
}

absl::StatusOr<double> BesselJDerivative(int m, double x) {
  if (absl::Status s = CheckBesselArgs(m, x); !s.ok()) return s;
  return JPrime(m, x);
}

absl::StatusOr<So2BesselEncoder> So2BesselEncoder::Create(std::vector<Term> terms, Input input) {
  if (terms.empty() || static_cast<int64_t>(terms.size()) > kMaxTerms) {
    return absl::InvalidArgumentError("So2BesselEncoder: need 1 to 2^20 terms");
  }
  for (size_t j = 0; j < terms.size(); ++j) {
    const Term& t = terms[j];
    if (t.order_m < 0 || t.order_m > kMaxOrder) {
      return absl::InvalidArgumentError(
          absl::StrCat("So2BesselEncoder: term ", j, ": order m must be in [0, 20]"));
    }
    if (!(std::isfinite(t.radial_scale) && t.radial_scale >= 0)) {
      return absl::InvalidArgumentError(
          absl::StrCat("So2BesselEncoder: term ", j, ": radial scale must be finite and >= 0"));
    }
    if (t.angular_k < -kMaxWeight || t.angular_k > kMaxWeight) {
      return absl::InvalidArgumentError(
          absl::StrCat("So2BesselEncoder: term ", j, ": |k| must be <= 2^20"));
    }
  }
  return So2BesselEncoder(std::move(terms), input);
}

absl::StatusOr<So2BesselEncoder> So2BesselEncoder::Sample(int64_t num_terms, double max_scale,
                                                          int max_k, int order_m, Input input,
                                                          uint64_t seed) {
  if (num_terms < 1 || num_terms > kMaxTerms) {
    return absl::InvalidArgumentError("So2BesselEncoder::Sample: need 1 to 2^20 terms");
  }
  if (!(std::isfinite(max_scale) && max_scale > 0)) {
    return absl::InvalidArgumentError("So2BesselEncoder::Sample: max scale C must be > 0");
  }
  if (max_k < 2 || max_k > kMaxWeight) {
    return absl::InvalidArgumentError(
        "So2BesselEncoder::Sample: max_k K must be in [2, 2^20] (k is drawn from [1, K))");
  }
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> scale(0.0, max_scale);
  std::uniform_int_distribution<int> weight(1, max_k - 1);
  std::vector<Term> terms(num_terms);
  for (Term& t : terms) {
    t.order_m = order_m;
    t.radial_scale = scale(rng);
    t.angular_k = weight(rng);
  }
  return Create(std::move(terms), input);
}

absl::Status So2BesselEncoder::ValidateInput(const PointsRef& points) const {
  if (absl::Status s = ValidateFiniteMatrix(points, 2, "points"); !s.ok()) return s;
  if (input_ == Input::kCartesian) {
    // hypot overflows only beyond ~1.3e308; reject those rather than return garbage.
    for (Eigen::Index n = 0; n < points.rows(); ++n) {
      if (!std::isfinite(std::hypot(points(n, 0), points(n, 1)))) {
        return absl::InvalidArgumentError(absl::StrCat("points: radius of row ", n, " overflows"));
      }
    }
  } else {
    for (Eigen::Index n = 0; n < points.rows(); ++n) {
      if (points(n, 0) < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("points: polar radius must be >= 0, row ", n, " has ", points(n, 0)));
      }
    }
  }
  // c r must stay finite, or cos/sin of an infinite phase would return NaN features.
  double max_r = 0, max_c = 0;
  for (Eigen::Index n = 0; n < points.rows(); ++n) {
    const double r = input_ == Input::kCartesian ? std::hypot(points(n, 0), points(n, 1))
                                                 : points(n, 0);
    max_r = std::max(max_r, r);
  }
  for (const Term& t : terms_) max_c = std::max(max_c, t.radial_scale);
  if (!std::isfinite(max_r * max_c)) {
    return absl::InvalidArgumentError("points: radial scale c times radius r overflows");
  }
  // k theta needs no check: any finite theta (polar input) is reduced exactly
  // (group::SinCosOfMultiple, past double's range included).
  return absl::OkStatus();
}

absl::StatusOr<RowMatrixXd> So2BesselEncoder::Encode(const PointsRef& points) const {
  if (absl::Status s = ValidateInput(points); !s.ok()) return s;
  const int64_t t = static_cast<int64_t>(terms_.size());
  RowMatrixXd out(points.rows(), 2 * t);
  for (Eigen::Index n = 0; n < points.rows(); ++n) {
    double r, theta;
    if (input_ == Input::kCartesian) {
      r = std::hypot(points(n, 0), points(n, 1));
      // theta = 0 at the origin, as Backward takes it: atan2 gives pi or -pi for (-0, +-0).
      theta = r == 0 ? 0.0 : std::atan2(points(n, 1), points(n, 0));
    } else {
      r = points(n, 0);
      theta = points(n, 1);
    }
    for (int64_t j = 0; j < t; ++j) {
      const Term& term = terms_[j];
      // Lim et al. section 4: J_m(c r) e^{i k theta}, k theta exact and reduced mod 2 pi
      // (group::SinCosOfMultiple): no rounding of the product grows with theta.
      const double radial = J(term.order_m, term.radial_scale * r);
      const group::SinCos sc = group::SinCosOfMultiple(term.angular_k, theta);
      out(n, j) = radial * sc.cos;
      out(n, t + j) = radial * sc.sin;
    }
  }
  return out;
}

absl::StatusOr<RowMatrixXd> So2BesselEncoder::Backward(const PointsRef& points,
                                                       const PointsRef& grad_features) const {
  if (absl::Status s = ValidateInput(points); !s.ok()) return s;
  if (absl::Status s = ValidateBackwardArgs(points, 2, grad_features, output_dim()); !s.ok()) {
    return s;
  }
  const int64_t t = static_cast<int64_t>(terms_.size());
  RowMatrixXd grad(points.rows(), 2);
  for (Eigen::Index n = 0; n < points.rows(); ++n) {
    const bool cartesian = input_ == Input::kCartesian;
    const double r = cartesian ? std::hypot(points(n, 0), points(n, 1)) : points(n, 0);
    const double theta = cartesian ? std::atan2(points(n, 1), points(n, 0)) : points(n, 1);
    // dL/dr and dL/dtheta, accumulated over terms.
    double g_r = 0, g_theta = 0;
    // At the Cartesian origin: the one-sided derivatives along +x and +y (see header).
    double g_x0 = 0, g_y0 = 0;
    const bool origin = cartesian && r == 0;
    for (int64_t j = 0; j < t; ++j) {
      const Term& term = terms_[j];
      const double gc = grad_features(n, j), gs = grad_features(n, t + j);
      const double c = term.radial_scale;
      const double k = term.angular_k;
      const double dradial = c * JPrime(term.order_m, c * r);
      if (origin) {
        g_x0 += dradial * gc;  // theta = 0: cos = 1, sin = 0
        // theta = pi / 2: cos(k pi / 2) and sin(k pi / 2) exactly, from k mod 4.
        static constexpr double kCos[4] = {1, 0, -1, 0}, kSin[4] = {0, 1, 0, -1};
        const int q = static_cast<int>(((term.angular_k % 4) + 4) % 4);
        g_y0 += dradial * (gc * kCos[q] + gs * kSin[q]);
        continue;
      }
      const double radial = J(term.order_m, c * r);
      const group::SinCos sc = group::SinCosOfMultiple(term.angular_k, theta);
      const double cs = sc.cos, sn = sc.sin;
      g_r += dradial * (gc * cs + gs * sn);
      g_theta += radial * k * (gs * cs - gc * sn);
    }
    if (!cartesian) {
      grad(n, 0) = g_r;
      grad(n, 1) = g_theta;
    } else if (origin) {
      grad(n, 0) = g_x0;
      grad(n, 1) = g_y0;
    } else {
      // dr/dx = x / r, dr/dy = y / r, dtheta/dx = -y / r^2, dtheta/dy = x / r^2.
      const double x = points(n, 0), y = points(n, 1);
      grad(n, 0) = g_r * (x / r) - g_theta * (y / r) / r;
      grad(n, 1) = g_r * (y / r) + g_theta * (x / r) / r;
    }
  }
  return grad;
}

}  // namespace encodings
}  // namespace gpe
