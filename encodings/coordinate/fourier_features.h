// Fourier feature encodings of points in R^D: x -> [cos(w_f . x)]_f ++ [sin(w_f . x)]_f.
//
// Layout: F frequency vectors give 2F features per point, the F cosines first and then
// the F sines, in the order of the frequency rows (Zheng et al. eq. 52 and Tancik et al.;
// NeRF interleaves sin/cos per octave, which is the same set of features permuted).
//
// Frequency conventions, explicit because the papers differ:
// - kTwoPi:   the angle is 2 pi b . x (Tancik et al.'s random Fourier features, Zheng et
//             al.'s RFF/LinF/LogF, eqs. 50-52). A scale sigma then means b ~ N(0, sigma^2).
// - kAngular: the angle is b . x (Lim et al.'s T x T encoding, appendix D.2, where
//             alpha ~ N(0, c^2) with no 2 pi; also NeRF, whose frequencies 2^k pi are
//             already angular).
// frequencies() returns b as given; angular_frequencies() returns w = 2 pi b or w = b.
// Angles: under kTwoPi the phase in turns b . x is formed in double (one rounding per
// term), reduced exactly to r in [-1/2, 1/2] (std::remainder) and only then multiplied
// by 2 pi, so no rounding of 2 pi grows with the phase; NeRF's octaves are b = 2^(k-1)
// turns, exact, and their features are correctly rounded at every octave (2^(k-1) x and
// its remainder are exact). Under kAngular the angle b . x is passed to std::cos /
// std::sin, which reduce it exactly.
//
// Random frequencies come from std::mt19937_64(seed) and std::normal_distribution:
// reproducible for a given seed and standard library.
#ifndef ENCODINGS_COORDINATE_FOURIER_FEATURES_H_
#define ENCODINGS_COORDINATE_FOURIER_FEATURES_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "encodings/coordinate/encoder.h"

namespace gpe {
namespace encodings {

enum class FrequencyConvention {
  kTwoPi,    // angle = 2 pi b . x
  kAngular,  // angle = b . x
};

class FourierFeatures final : public CoordinateEncoder {
 public:
  // frequencies: F x D (F, D >= 1, F <= 2^24, F D <= 2^25: every constructor's bound),
  // finite; row f is the frequency vector b_f.
  static absl::StatusOr<FourierFeatures> Create(RowMatrixXd frequencies,
                                                FrequencyConvention convention);

  // Random Fourier features (Tancik et al.): F frequency vectors with i.i.d. N(0, scale^2)
  // entries; scale > 0.
  static absl::StatusOr<FourierFeatures> Gaussian(int64_t dim, int64_t num_frequencies,
                                                  double scale, FrequencyConvention convention,
                                                  uint64_t seed);

  // Lim et al.'s T x T encoding (Table 1, appendix D.2): D = 2, alpha ~ N(0, c^2), angle
  // alpha_1 x + alpha_2 y (no 2 pi). Lim et al. use 16 frequencies (32 features).
  static absl::StatusOr<FourierFeatures> TxT(int64_t num_frequencies, double scale_c,
                                             uint64_t seed);

  // Axis-aligned frequencies: for each axis d (outer) and each value f in `frequencies`
  // (inner), the frequency vector f * e_d. F = dim * frequencies.size().
  static absl::StatusOr<FourierFeatures> AxisAligned(int64_t dim,
                                                     absl::Span<const double> frequencies,
                                                     FrequencyConvention convention);

  // Zheng et al.'s LinF (eq. 50): per axis, K frequencies ((K - i) + i 2^sigma) / K,
  // i = 0 .. K-1, linearly from 2^0 towards 2^sigma, 2 pi convention.
  static absl::StatusOr<FourierFeatures> LinearlySpaced(int64_t dim, int64_t num_frequencies,
                                                        double sigma);

  // Zheng et al.'s LogF (eq. 51): per axis, K frequencies 2^(sigma i / K), i = 0 .. K-1,
  // 2 pi convention.
  static absl::StatusOr<FourierFeatures> LogLinearlySpaced(int64_t dim, int64_t num_frequencies,
                                                           double sigma);

  // NeRF's frequency encoding (Mildenhall et al.): per axis, angles 2^k pi x for
  // k = 0 .. num_octaves-1, as b = 2^(k-1) in the 2 pi convention (exact; angular
  // frequencies 2^k pi). The raw coordinates are not included; concatenate them yourself
  // if wanted.
  static absl::StatusOr<FourierFeatures> Nerf(int64_t dim, int64_t num_octaves);

  int64_t input_dim() const override { return angular_.cols(); }
  int64_t output_dim() const override { return 2 * angular_.rows(); }
  int64_t num_frequencies() const { return angular_.rows(); }
  FrequencyConvention convention() const { return convention_; }
  const RowMatrixXd& frequencies() const { return frequencies_; }
  const RowMatrixXd& angular_frequencies() const { return angular_; }

  absl::StatusOr<RowMatrixXd> Encode(const PointsRef& points) const override;
  absl::StatusOr<RowMatrixXd> Backward(const PointsRef& points,
                                       const PointsRef& grad_features) const override;

 private:
  // The angles of every point and frequency (points.rows() x F) into out, reduced as the
  // header says; InvalidArgument when a phase overflows.
  absl::Status Angles(const PointsRef& points, Eigen::Ref<RowMatrixXd> out) const;

  FourierFeatures(RowMatrixXd frequencies, RowMatrixXd angular, FrequencyConvention convention)
      : frequencies_(std::move(frequencies)),
        angular_(std::move(angular)),
        convention_(convention) {}

  RowMatrixXd frequencies_;  // b, F x D
  RowMatrixXd angular_;      // w (2 pi b or b), F x D
  FrequencyConvention convention_;
};

}  // namespace encodings
}  // namespace gpe

#endif  // ENCODINGS_COORDINATE_FOURIER_FEATURES_H_
