// SO(2) positional encodings of Lim et al. ("Positional Encodings as Group
// Representations", section 4 and appendix D.2):
//   (r, theta) -> { J_m(c r) e^{i k theta} }_{(m, c, k)}
// where J_m is the Bessel function of the first kind. The radius r indexes the orbit of
// SO(2) acting on R^2 and e^{i k theta} is the irrep of weight k on it.
//
// Real features: with T terms (m_j, c_j, k_j), 2T features per point, the T real parts
// J_m(c r) cos(k theta) first, then the T imaginary parts J_m(c r) sin(k theta).
// Lim et al. fix m = 0, draw c ~ U[0, C] and integer k ~ U{1, ..., K-1}, and use 16
// terms (32 features); Sample() does that for any m.
//
// Input: Cartesian (x, y), with r = hypot(x, y) and theta = atan2(y, x) (0 at the
// origin, signed zeros included), or polar (r, theta) with r >= 0 and any finite theta:
// k theta is formed exactly and reduced mod 2 pi (group::SinCosOfMultiple). Bessel values come from C++17's std::cyl_bessel_j below
// x = 1e4 and from Hankel's expansion with an exactly reduced phase from there on (within
// 2e-15 of the amplitude sqrt(2 / (pi x)) up to x = 1e300); the derivative is
// J_m' = (J_{m-1} - J_{m+1}) / 2 (J_0' = -J_1).
//
// Backward at the origin (Cartesian input): theta is undefined there, so the gradient
// is made of the one-sided derivatives along +x and +y, c J_m'(0) trig(k * 0) and
// c J_m'(0) trig(k pi / 2). This is the true gradient wherever the feature is smooth
// at the origin (for example m = |k| = 1), and 0 for m = 0 and m >= 2.
#ifndef ENCODINGS_COORDINATE_SO2_BESSEL_H_
#define ENCODINGS_COORDINATE_SO2_BESSEL_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "encodings/coordinate/encoder.h"

namespace gpe {
namespace encodings {

// J_m(x) and J_m'(x) for integer 0 <= m <= 20 and finite x >= 0 (std::cyl_bessel_j;
// larger orders are refused: libstdc++'s large-x expansion needs m^2 << x).
absl::StatusOr<double> BesselJ(int m, double x);
absl::StatusOr<double> BesselJDerivative(int m, double x);

class So2BesselEncoder final : public CoordinateEncoder {
 public:
  enum class Input { kCartesian, kPolar };

  struct Term {
    int order_m = 0;            // 0 <= m <= 20
    double radial_scale = 1.0;  // c >= 0, finite
    int angular_k = 1;          // any integer weight; |k| <= 2^20
  };

  static absl::StatusOr<So2BesselEncoder> Create(std::vector<Term> terms, Input input);

  // Lim et al.'s sampling: num_terms terms of order m, c ~ U[0, max_scale], integer
  // k ~ U{1, ..., max_k - 1} (max_k >= 2), from std::mt19937_64(seed).
  static absl::StatusOr<So2BesselEncoder> Sample(int64_t num_terms, double max_scale,
                                                 int max_k, int order_m, Input input,
                                                 uint64_t seed);

  const std::vector<Term>& terms() const { return terms_; }
  Input input() const { return input_; }
  int64_t input_dim() const override { return 2; }
  int64_t output_dim() const override { return 2 * static_cast<int64_t>(terms_.size()); }

  // Polar input needs r >= 0 in column 0.
  absl::StatusOr<RowMatrixXd> Encode(const PointsRef& points) const override;
  absl::StatusOr<RowMatrixXd> Backward(const PointsRef& points,
                                       const PointsRef& grad_features) const override;

 private:
  So2BesselEncoder(std::vector<Term> terms, Input input)
      : terms_(std::move(terms)), input_(input) {}
  absl::Status ValidateInput(const PointsRef& points) const;

  std::vector<Term> terms_;
  Input input_;
};

}  // namespace encodings
}  // namespace gpe

#endif  // ENCODINGS_COORDINATE_SO2_BESSEL_H_
