#include "encodings/coordinate/spherical_harmonics.h"

#include <cmath>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace gpe {
namespace encodings {
namespace {

constexpr int kMaxDegree = 64;
constexpr double kPi = 3.14159265358979323846;
constexpr double kSqrt2 = 1.41421356237309504880;

}  // namespace

absl::StatusOr<SphericalHarmonicsEncoder> SphericalHarmonicsEncoder::Create(int max_degree) {
  if (max_degree < 0 || max_degree > kMaxDegree) {
    return absl::InvalidArgumentError(absl::StrCat(
        "SphericalHarmonicsEncoder: max_degree must be in [0, 64], got ", max_degree));
  }
  return SphericalHarmonicsEncoder(max_degree);
}

absl::Status SphericalHarmonicsEncoder::ValidateDirections(const PointsRef& points) const {
  if (absl::Status s = ValidateFiniteMatrix(points, 3, "points"); !s.ok()) return s;
  for (Eigen::Index n = 0; n < points.rows(); ++n) {
    const double norm = points.row(n).stableNorm();  // scaled: no squares under- or overflow
    if (!(norm > 0) || !std::isfinite(norm)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "points: row ", n, " has no direction (norm ", norm, "); need a non-zero vector"));
    }
  }
  return absl::OkStatus();
}

void SphericalHarmonicsEncoder::EvaluateUnit(const double u[3], double* out, double* du) const {
  const int L = max_degree_;
  const int64_t f = output_dim();
  const double x = u[0], y = u[1], z = u[2];
  // qbar[l][m] = N_lm d^m P_l / dz^m (z), by the normalised recurrences.
  std::vector<double> qbar(static_cast<size_t>(L + 1) * (L + 1), 0.0);
  auto q = [&](int l, int m) -> double& { return qbar[static_cast<size_t>(l) * (L + 1) + m]; };
  q(0, 0) = std::sqrt(1.0 / (4.0 * kPi));
  for (int m = 0; m <= L; ++m) {
    if (m > 0) q(m, m) = q(m - 1, m - 1) * std::sqrt((2.0 * m + 1) / (2.0 * m));
    if (m + 1 <= L) q(m + 1, m) = std::sqrt(2.0 * m + 3) * z * q(m, m);
    for (int l = m + 2; l <= L; ++l) {
      const double a = std::sqrt((4.0 * l * l - 1) / (static_cast<double>(l) * l - m * m));
      const double b = std::sqrt(((l - 1.0) * (l - 1.0) - m * m) / (4.0 * (l - 1.0) * (l - 1.0) - 1));
      q(l, m) = a * (z * q(l - 1, m) - b * q(l - 2, m));
    }
  }
  // c[m] + i s[m] = (x + i y)^m.
  std::vector<double> c(L + 1), s(L + 1);
  c[0] = 1;
  s[0] = 0;
  for (int m = 1; m <= L; ++m) {
    c[m] = x * c[m - 1] - y * s[m - 1];
    s[m] = x * s[m - 1] + y * c[m - 1];
  }
  for (int l = 0; l <= L; ++l) {
    out[Index(l, 0)] = q(l, 0);
    for (int m = 1; m <= l; ++m) {
      out[Index(l, m)] = kSqrt2 * q(l, m) * c[m];
      out[Index(l, -m)] = kSqrt2 * q(l, m) * s[m];
    }
  }
  if (du == nullptr) return;
  double* dx = du;
  double* dy = du + f;
  double* dz = du + 2 * f;
  for (int l = 0; l <= L; ++l) {
    // d qbar_l^m / dz = sqrt((l - m)(l + m + 1)) qbar_l^{m+1}  (0 for m = l).
    auto dq = [&](int m) {
      return m < l ? std::sqrt((l - m) * (l + m + 1.0)) * q(l, m + 1) : 0.0;
    };
    dx[Index(l, 0)] = 0;
    dy[Index(l, 0)] = 0;
    dz[Index(l, 0)] = dq(0);
    for (int m = 1; m <= l; ++m) {
      const double a = kSqrt2 * q(l, m) * m;
      // d(x + i y)^m / dx = m (x + i y)^(m-1); d / dy = i m (x + i y)^(m-1).
      dx[Index(l, m)] = a * c[m - 1];
      dy[Index(l, m)] = -a * s[m - 1];
      dz[Index(l, m)] = kSqrt2 * dq(m) * c[m];
      dx[Index(l, -m)] = a * s[m - 1];
      dy[Index(l, -m)] = a * c[m - 1];
      dz[Index(l, -m)] = kSqrt2 * dq(m) * s[m];
    }
  }
}

absl::StatusOr<RowMatrixXd> SphericalHarmonicsEncoder::Encode(const PointsRef& points) const {
  if (absl::Status s = ValidateDirections(points); !s.ok()) return s;
  RowMatrixXd out(points.rows(), output_dim());
  for (Eigen::Index n = 0; n < points.rows(); ++n) {
    const double norm = points.row(n).stableNorm();  // scaled: no squares under- or overflow
    const double u[3] = {points(n, 0) / norm, points(n, 1) / norm, points(n, 2) / norm};
    EvaluateUnit(u, out.row(n).data(), nullptr);
  }
  return out;
}

absl::StatusOr<RowMatrixXd> SphericalHarmonicsEncoder::EncodeAngles(const PointsRef& angles) const {
  if (absl::Status s = ValidateFiniteMatrix(angles, 2, "angles"); !s.ok()) return s;
  RowMatrixXd out(angles.rows(), output_dim());
  for (Eigen::Index n = 0; n < angles.rows(); ++n) {
    const double theta = angles(n, 0), phi = angles(n, 1);
    const double u[3] = {std::sin(theta) * std::cos(phi), std::sin(theta) * std::sin(phi),
                         std::cos(theta)};
    EvaluateUnit(u, out.row(n).data(), nullptr);
  }
  return out;
}

absl::StatusOr<RowMatrixXd> SphericalHarmonicsEncoder::Backward(
    const PointsRef& points, const PointsRef& grad_features) const {
  if (absl::Status s = ValidateDirections(points); !s.ok()) return s;
  if (absl::Status s = ValidateBackwardArgs(points, 3, grad_features, output_dim()); !s.ok()) {
    return s;
  }
  const int64_t f = output_dim();
  std::vector<double> values(f), du(3 * f);
  RowMatrixXd grad(points.rows(), 3);
  for (Eigen::Index n = 0; n < points.rows(); ++n) {
    const double norm = points.row(n).stableNorm();  // scaled: no squares under- or overflow
    const Eigen::Vector3d u = points.row(n).transpose() / norm;
    EvaluateUnit(u.data(), values.data(), du.data());
    Eigen::Vector3d gu;
    for (int d = 0; d < 3; ++d) {
      double acc = 0;
      for (int64_t k = 0; k < f; ++k) acc += grad_features(n, k) * du[d * f + k];
      gu(d) = acc;
    }
    // Features depend on v only through u = v / |v|: project out the radial part.
    grad.row(n) = ((gu - u * u.dot(gu)) / norm).transpose();
  }
  return grad;
}

}  // namespace encodings
}  // namespace gpe
