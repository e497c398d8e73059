#include "encodings/coordinate/fourier_features.h"

#include <cmath>
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"

namespace gpe {
namespace encodings {
namespace {

constexpr double kTwoPi = 6.283185307179586476925286766559;
// Bounds the feature matrix so sizes never overflow int64 or exhaust memory silently.
constexpr int64_t kMaxFrequencies = int64_t{1} << 24;
// Entries of the frequency matrix B (frequencies x dim, doubles): 2^25 is 256 MiB, as
// many as 2^24 frequencies in 2 dimensions (TxT, the largest count) need.
// AxisAligned's B is (dim K) x dim, mostly zeros; without the bound a dim of 2^10 with
// 64 octaves built half a GiB and an unseeded coordinate_fuzzer run timed out in it.
constexpr int64_t kMaxEntries = int64_t{1} << 25;

absl::Status CheckEntries(int64_t rows, int64_t cols, const char* what) {
  if (rows > 0 && cols > kMaxEntries / rows) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": the frequency matrix would be ", rows, " x ", cols, "; at most 2^25 entries"));
  }
  return absl::OkStatus();
}

absl::Status CheckDims(int64_t dim, int64_t count, const char* what) {
  if (dim < 1) return absl::InvalidArgumentError(absl::StrCat(what, ": dim must be >= 1"));
  if (count < 1 || count > kMaxFrequencies) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": count must be in [1, 2^24], got ", count));
  }
  return absl::OkStatus();
}

// cos and sin of one angle; glibc's sincos shares the argument reduction (~1.5x faster
// than two calls on the reference machine).
inline void SinCos(double a, double* s, double* c) {
#if defined(__GLIBC__)
  ::sincos(a, s, c);
#else
  *s = std::sin(a);
  *c = std::cos(a);
#endif
}

}  // namespace

absl::StatusOr<FourierFeatures> FourierFeatures::Create(RowMatrixXd frequencies,
                                                        FrequencyConvention convention) {
  if (absl::Status s = ValidateFiniteMatrix(frequencies, -1, "FourierFeatures frequencies");
      !s.ok()) {
    return s;
  }
  if (frequencies.rows() > kMaxFrequencies) {
    return absl::InvalidArgumentError("FourierFeatures: more than 2^24 frequencies");
  }
  if (absl::Status s = CheckEntries(frequencies.rows(), frequencies.cols(), "FourierFeatures");
      !s.ok()) {
    return s;
  }
  RowMatrixXd angular =
      convention == FrequencyConvention::kTwoPi ? RowMatrixXd(kTwoPi * frequencies) : frequencies;
  if (!angular.allFinite()) {
    return absl::InvalidArgumentError("FourierFeatures: 2 pi * frequency overflows");
  }
  return FourierFeatures(std::move(frequencies), std::move(angular), convention);
}

absl::StatusOr<FourierFeatures> FourierFeatures::Gaussian(int64_t dim, int64_t num_frequencies,
                                                          double scale,
                                                          FrequencyConvention convention,
                                                          uint64_t seed) {
  if (absl::Status s = CheckDims(dim, num_frequencies, "FourierFeatures::Gaussian"); !s.ok()) {
    return s;
  }
  if (!(std::isfinite(scale) && scale > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("FourierFeatures::Gaussian: scale must be finite and > 0, got ", scale));
  }
  if (absl::Status s = CheckEntries(num_frequencies, dim, "FourierFeatures::Gaussian"); !s.ok()) {
    return s;
  }
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, scale);
  RowMatrixXd b(num_frequencies, dim);
  for (int64_t f = 0; f < num_frequencies; ++f) {
    for (int64_t d = 0; d < dim; ++d) b(f, d) = normal(rng);
  }
  return Create(std::move(b), convention);
}

absl::StatusOr<FourierFeatures> FourierFeatures::TxT(int64_t num_frequencies, double scale_c,
                                                     uint64_t seed) {
  return Gaussian(2, num_frequencies, scale_c, FrequencyConvention::kAngular, seed);
}

absl::StatusOr<FourierFeatures> FourierFeatures::AxisAligned(int64_t dim,
                                                             absl::Span<const double> frequencies,
                                                             FrequencyConvention convention) {
  const int64_t k = static_cast<int64_t>(frequencies.size());
  if (absl::Status s = CheckDims(dim, k, "FourierFeatures::AxisAligned"); !s.ok()) return s;
  if (dim > kMaxFrequencies / k) {
    return absl::InvalidArgumentError("FourierFeatures::AxisAligned: dim * K exceeds 2^24");
  }
  if (absl::Status s = CheckEntries(dim * k, dim, "FourierFeatures::AxisAligned"); !s.ok()) {
    return s;
  }
  RowMatrixXd b = RowMatrixXd::Zero(dim * k, dim);
  for (int64_t d = 0; d < dim; ++d) {
    for (int64_t i = 0; i < k; ++i) b(d * k + i, d) = frequencies[i];
  }
  return Create(std::move(b), convention);
}

absl::StatusOr<FourierFeatures> FourierFeatures::LinearlySpaced(int64_t dim,
                                                                int64_t num_frequencies,
                                                                double sigma) {
  if (absl::Status s = CheckDims(dim, num_frequencies, "FourierFeatures::LinearlySpaced");
      !s.ok()) {
    return s;
  }
  if (!std::isfinite(sigma)) {
    return absl::InvalidArgumentError("FourierFeatures::LinearlySpaced: sigma must be finite");
  }
  const double top = std::exp2(sigma);
  const double k = static_cast<double>(num_frequencies);
  std::vector<double> f(num_frequencies);
  // Zheng et al. eq. 50.
  for (int64_t i = 0; i < num_frequencies; ++i) f[i] = ((k - i) + i * top) / k;
  return AxisAligned(dim, f, FrequencyConvention::kTwoPi);
}

absl::StatusOr<FourierFeatures> FourierFeatures::LogLinearlySpaced(int64_t dim,
                                                                   int64_t num_frequencies,
                                                                   double sigma) {
  if (absl::Status s = CheckDims(dim, num_frequencies, "FourierFeatures::LogLinearlySpaced");
      !s.ok()) {
    return s;
  }
  if (!std::isfinite(sigma)) {
    return absl::InvalidArgumentError("FourierFeatures::LogLinearlySpaced: sigma must be finite");
  }
  std::vector<double> f(num_frequencies);
  // Zheng et al. eq. 51.
  for (int64_t i = 0; i < num_frequencies; ++i) {
    f[i] = std::exp2(sigma * static_cast<double>(i) / static_cast<double>(num_frequencies));
  }
  return AxisAligned(dim, f, FrequencyConvention::kTwoPi);
}

absl::StatusOr<FourierFeatures> FourierFeatures::Nerf(int64_t dim, int64_t num_octaves) {
  if (num_octaves < 1 || num_octaves > 64) {
    return absl::InvalidArgumentError(
        absl::StrCat("FourierFeatures::Nerf: num_octaves must be in [1, 64], got ", num_octaves));
  }
  std::vector<double> f(num_octaves);
  // NeRF: gamma(p) = (sin(2^k pi p), cos(2^k pi p)), k = 0 .. L-1: 2^(k-1) turns, exact
  // (2^k times a rounded pi would carry pi's rounding, 2^k x 1.2e-16 rad, into the phase).
  for (int64_t k = 0; k < num_octaves; ++k) f[k] = std::ldexp(0.5, static_cast<int>(k));
  return AxisAligned(dim, f, FrequencyConvention::kTwoPi);
}

namespace {

// Finite points and frequencies whose phases w . x leave double's range: cos and sin of
// them would be NaN features.
absl::Status PhasesOverflow() {
  return absl::InvalidArgumentError(
      "points: a phase w . x overflows (frequencies times coordinates beyond 1.8e308)");
}

}  // namespace

absl::Status FourierFeatures::Angles(const PointsRef& points, Eigen::Ref<RowMatrixXd> out) const {
  // Dot products in one fixed order (a GEMM's order may follow the buffers' alignment,
  // and the C ABI's results equal the C++ API's bit for bit). kTwoPi: turns b . x,
  // reduced exactly to [-1/2, 1/2] before the multiplication by 2 pi.
  const bool turns = convention_ == FrequencyConvention::kTwoPi;
  const RowMatrixXd& b = turns ? frequencies_ : angular_;
  const Eigen::Index dims = b.cols();
  for (Eigen::Index n = 0; n < out.rows(); ++n) {
    for (Eigen::Index j = 0; j < out.cols(); ++j) {
      double t = 0.0;
      for (Eigen::Index d = 0; d < dims; ++d) t += points(n, d) * b(j, d);
      if (!std::isfinite(t)) return PhasesOverflow();
      out(n, j) = turns ? kTwoPi * std::remainder(t, 1.0) : t;
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<RowMatrixXd> FourierFeatures::Encode(const PointsRef& points) const {
  if (absl::Status s = ValidateFiniteMatrix(points, input_dim(), "points"); !s.ok()) return s;
  const int64_t f = num_frequencies();
  // Angles written into the cosine half, then replaced in place.
  RowMatrixXd out(points.rows(), 2 * f);
  if (absl::Status s = Angles(points, out.leftCols(f)); !s.ok()) return s;
  for (Eigen::Index n = 0; n < out.rows(); ++n) {
    double* row = out.row(n).data();
    for (int64_t j = 0; j < f; ++j) SinCos(row[j], &row[f + j], &row[j]);
  }
  return out;
}

absl::StatusOr<RowMatrixXd> FourierFeatures::Backward(const PointsRef& points,
                                                      const PointsRef& grad_features) const {
  if (absl::Status s = ValidateBackwardArgs(points, input_dim(), grad_features, output_dim());
      !s.ok()) {
    return s;
  }
  const int64_t f = num_frequencies();
  RowMatrixXd grad_angles(points.rows(), f);
  if (absl::Status s = Angles(points, grad_angles); !s.ok()) return s;
  // d cos(a)/da = -sin(a), d sin(a)/da = cos(a); then da/dx = w.
  for (Eigen::Index n = 0; n < grad_angles.rows(); ++n) {
    for (int64_t j = 0; j < f; ++j) {
      double sn, cs;
      SinCos(grad_angles(n, j), &sn, &cs);
      grad_angles(n, j) = grad_features(n, f + j) * cs - grad_features(n, j) * sn;
    }
  }
  return RowMatrixXd(grad_angles * angular_);
}

}  // namespace encodings
}  // namespace gpe
