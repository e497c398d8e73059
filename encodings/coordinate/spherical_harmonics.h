// Real spherical harmonics Y_lm, l = 0 .. L, as an encoding of directions in R^3 (the
// SO(3) row of Lim et al.'s Table 1; Thomas et al.'s tensor-field networks).
//
// Normalisation and convention (state them; libraries differ):
// - Orthonormal on the unit sphere: int_{S^2} Y_lm Y_l'm' dOmega = delta_ll' delta_mm'
//   (so Y_00 = 1 / sqrt(4 pi)). Other conventions (4 pi-normalised, Schmidt
//   semi-normalised, "component"/"norm" scaling) are rescalings per degree l.
// - No Condon-Shortley phase: with theta the polar angle from +z and phi the azimuth,
//   Y_l0 = N_l0 P_l(cos theta), Y_lm = sqrt(2) N_lm P_l^m(cos theta) cos(m phi) (m > 0),
//   Y_l,-m = sqrt(2) N_lm P_l^m(cos theta) sin(m phi) (m > 0), where
//   N_lm = sqrt((2l + 1) / (4 pi) (l - m)! / (l + m)!) and P_l^m carries no (-1)^m.
//   (The complex Y_l^m of physics include (-1)^m; real ones here differ from them by
//   that sign for odd m > 0.)
// - Feature order: degree-major, m from -l to l: index l^2 + l + m; (L + 1)^2 features.
//
// Input: Cartesian vectors v (N x 3); only the direction u = v / |v| matters, so a
// zero vector is rejected. Evaluation uses P_l^m(z) sin^m(theta) e^{i m phi} =
// Q_l^m(z) (x + i y)^m with Q_l^m = d^m P_l / dz^m (a polynomial), normalised
// recurrences (no factorials, stable for the supported degrees L <= 64).
// Backward differentiates the polynomial in u and projects through the normalisation,
// dL/dv = (I - u u^T) dL/du / |v|, so the gradient is tangent to the sphere.
#ifndef ENCODINGS_COORDINATE_SPHERICAL_HARMONICS_H_
#define ENCODINGS_COORDINATE_SPHERICAL_HARMONICS_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "encodings/coordinate/encoder.h"

namespace gpe {
namespace encodings {

class SphericalHarmonicsEncoder final : public CoordinateEncoder {
 public:
  // 0 <= max_degree <= 64.
  static absl::StatusOr<SphericalHarmonicsEncoder> Create(int max_degree);

  int max_degree() const { return max_degree_; }
  int64_t input_dim() const override { return 3; }
  int64_t output_dim() const override {
    return static_cast<int64_t>(max_degree_ + 1) * (max_degree_ + 1);
  }
  // Index of Y_lm in a feature row.
  static int64_t Index(int l, int m) { return static_cast<int64_t>(l) * l + l + m; }

  // points: N x 3 finite, non-zero vectors.
  absl::StatusOr<RowMatrixXd> Encode(const PointsRef& points) const override;
  absl::StatusOr<RowMatrixXd> Backward(const PointsRef& points,
                                       const PointsRef& grad_features) const override;

  // Convenience: (theta, phi) per row, theta the polar angle from +z, phi the azimuth.
  absl::StatusOr<RowMatrixXd> EncodeAngles(const PointsRef& angles) const;

 private:
  explicit SphericalHarmonicsEncoder(int max_degree) : max_degree_(max_degree) {}
  absl::Status ValidateDirections(const PointsRef& points) const;
  // Features of the unit vector u (and, if grad != nullptr, d feature / d u as 3 rows).
  void EvaluateUnit(const double u[3], double* out, double* du) const;

  int max_degree_;
};

}  // namespace encodings
}  // namespace gpe

#endif  // ENCODINGS_COORDINATE_SPHERICAL_HARMONICS_H_
