// The Gaussian window kernel is compiled once per instruction set by Highway
// (foreach_target.h re-includes this file with HWY_TARGET set); everything else once.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "encodings/coordinate/shifted_basis.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "hwy/contrib/math/math-inl.h"

#include "encodings/coordinate/shifted_basis.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"

HWY_BEFORE_NAMESPACE();
namespace gpe {
namespace encodings {
namespace internal {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// out[i] = exp(c (x - t_i)^2), t_i = lo + i spacing, for i in [first, last). The
// argument is formed by the same IEEE operations as the reference (no contraction:
// the BUILD compiles this file with -ffp-contract=off), so the two differ only by the
// exponential: Highway's Exp (contrib/math, documented max error 1 ulp for arguments
// down to -DBL_MAX). Arguments below -708, whose results are below 2^-1021 and become
// subnormal near -708.4, are recomputed with std::exp so that the tail matches the
// reference exactly.
void GaussianWindowImpl(double x, double lo, double spacing, double c, int64_t first,
                        int64_t last, double* HWY_RESTRICT out) {
  const hn::ScalableTag<double> d;
  const int64_t n = static_cast<int64_t>(hn::Lanes(d));
  const auto vx = hn::Set(d, x), vlo = hn::Set(d, lo), vs = hn::Set(d, spacing),
             vc = hn::Set(d, c), floor = hn::Set(d, -708.0);
  int64_t i = first;
  for (; i + n <= last; i += n) {
    const auto t = hn::Add(vlo, hn::Mul(hn::Iota(d, static_cast<double>(i)), vs));
    const auto u = hn::Sub(vx, t);
    const auto y = hn::Mul(hn::Mul(vc, u), u);
    // A NaN argument (a NaN coordinate) gives NaN, as std::exp does. It is kept from
    // Exp, which gives a number for it on AVX2 and AVX-512 and converts it to int32 on
    // the way, undefined for NaN where the conversion is C++ (EMU128, what CPUs without
    // AVX2 run; options_fuzzer found it there). IsNaN, not Ne(y, y): Highway's Ne is an
    // ordered compare on x86, false for NaN.
    const auto is_nan = hn::IsNaN(y);
    const auto e = hn::Exp(d, hn::IfThenZeroElse(is_nan, y));
    hn::StoreU(hn::IfThenElse(is_nan, y, e), d, out + i);
    if (!hn::AllFalse(d, hn::Lt(y, floor))) {
      for (int64_t q = i; q < i + n; ++q) {
        const double uq = x - (lo + static_cast<double>(q) * spacing);
        const double yq = c * uq * uq;
        if (yq < -708.0) out[q] = std::exp(yq);
      }
    }
  }
  for (; i < last; ++i) {
    const double u = x - (lo + static_cast<double>(i) * spacing);
    out[i] = std::exp(c * u * u);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace internal
}  // namespace encodings
}  // namespace gpe
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace gpe {
namespace encodings {
namespace internal {

HWY_EXPORT(GaussianWindowImpl);

void GaussianWindow(double x, double lo, double spacing, double c, int64_t first, int64_t last,
                    double* out) {
  HWY_DYNAMIC_DISPATCH(GaussianWindowImpl)(x, lo, spacing, c, first, last, out);
}

void GaussianWindowReference(double x, double lo, double spacing, double c, int64_t first,
                             int64_t last, double* out) {
  for (int64_t i = first; i < last; ++i) {
    const double u = x - (lo + static_cast<double>(i) * spacing);
    out[i] = std::exp(c * u * u);
  }
}

}  // namespace internal
}  // namespace encodings
}  // namespace gpe

namespace gpe {
namespace encodings {
namespace {

constexpr double kTwoPi = 6.283185307179586476925286766559;
constexpr int64_t kMaxShifts = int64_t{1} << 24;
constexpr int64_t kMaxComplexFeatures = int64_t{1} << 26;
constexpr int64_t kMaxMaterialisedEntries = int64_t{1} << 28;

absl::Status ValidateCoords(absl::Span<const double> coords) {
  if (coords.empty()) return absl::InvalidArgumentError("ShiftedBasis1D: no coordinates");
  for (size_t j = 0; j < coords.size(); ++j) {
    if (!std::isfinite(coords[j])) {
      return absl::InvalidArgumentError(
          absl::StrCat("ShiftedBasis1D: non-finite coordinate ", coords[j], " at ", j));
    }
  }
  return absl::OkStatus();
}

// out[0 .. prod sizes) = vecs[D-1] (x) ... (x) vecs[0] (axis 0 fastest), built in place.
void KroneckerInto(const std::vector<const double*>& vecs, const std::vector<int64_t>& sizes,
                   double* out) {
  const size_t dims = vecs.size();
  int64_t len = sizes[dims - 1];
  for (int64_t k = 0; k < len; ++k) out[k] = vecs[dims - 1][k];
  for (size_t d = dims - 1; d-- > 0;) {
    const int64_t kd = sizes[d];
    const double* v = vecs[d];
    // Backwards, so entry j is read before any write lands on it (writes start at j * kd).
    for (int64_t j = len - 1; j >= 0; --j) {
      const double a = out[j];
      double* dst = out + j * kd;
      for (int64_t k = 0; k < kd; ++k) dst[k] = a * v[k];
    }
    len *= kd;
  }
}

}  // namespace

absl::StatusOr<ShiftedBasis1D> ShiftedBasis1D::Create(ShiftedBasisKind kind, int64_t num_shifts,
                                                      double width, double lo, double hi) {
  if (num_shifts < 1 || num_shifts > kMaxShifts) {
    return absl::InvalidArgumentError(
        absl::StrCat("ShiftedBasis1D: num_shifts must be in [1, 2^24], got ", num_shifts));
  }
  if (kind != ShiftedBasisKind::kImpulse && !(std::isfinite(width) && width > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("ShiftedBasis1D: width must be finite and > 0, got ", width));
  }
  if (!(std::isfinite(lo) && std::isfinite(hi) && lo < hi && std::isfinite(hi - lo))) {
    return absl::InvalidArgumentError(
        absl::StrCat("ShiftedBasis1D: need finite lo < hi, got [", lo, ", ", hi, "]"));
  }
  // The shifts' spacing (hi - lo) / K is a divisor (ShiftWindow, the impulse's index): a
  // subnormal or zero one would make those NaN and their int64 casts undefined.
  const double spacing = (hi - lo) / static_cast<double>(num_shifts);
  if (!(spacing >= std::numeric_limits<double>::min())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ShiftedBasis1D: the shifts' spacing (hi - lo) / num_shifts = ", spacing,
        " is below double's normal range; widen [lo, hi]"));
  }
  // The kernels use 1 / width^2 (Gaussian) and 2 / width or 2 pi / width (the others):
  // each must be finite and nonzero, or every feature or derivative would be NaN.
  if (kind == ShiftedBasisKind::kGaussian &&
      !(width * width >= std::numeric_limits<double>::min() && std::isfinite(width * width))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ShiftedBasis1D: a Gaussian width must have its square in double's normal range "
        "(about 1.5e-154 to 1.3e154), got ",
        width));
  }
  if (kind != ShiftedBasisKind::kImpulse && kind != ShiftedBasisKind::kGaussian &&
      !std::isfinite(kTwoPi / width)) {
    return absl::InvalidArgumentError(
        absl::StrCat("ShiftedBasis1D: width ", width, " is too small (2 pi / width overflows)"));
  }
  return ShiftedBasis1D(kind, num_shifts, width, lo, hi);
}

void ShiftedBasis1D::ShiftWindow(double x, double reach, int64_t* first, int64_t* last) const {
  // Shifts with |x - t_i| <= reach, widened by one index each side so rounding in the
  // index arithmetic can only include extra shifts (which the kernels evaluate exactly).
  const double k = static_cast<double>(num_shifts_);
  const double a = std::floor((x - reach - lo_) / spacing_) - 1;
  const double b = std::ceil((x + reach - lo_) / spacing_) + 2;
  *first = a <= 0 ? 0 : (a >= k ? num_shifts_ : static_cast<int64_t>(a));
  *last = b <= 0 ? 0 : (b >= k ? num_shifts_ : static_cast<int64_t>(b));
}

void ShiftedBasis1D::EvaluateAt(double x, double* out) const {
  const int64_t k = num_shifts_;
  switch (kind_) {
    case ShiftedBasisKind::kGaussian: {
      // Zheng et al. Prop. 2: exp(-(x - t)^2 / (2 sigma^2)). exp(y) is exactly 0 in
      // double for y < -745.2, i.e. |x - t| > sqrt(1490.4) sigma: only shifts inside that
      // window are evaluated, the rest are the same exact zeros.
      const double c = -0.5 / (width_ * width_);
      const double reach = std::sqrt(1490.4) * width_;
      int64_t first, last;
      ShiftWindow(x, reach, &first, &last);
      for (int64_t i = 0; i < first; ++i) out[i] = 0.0;
      if (first < last) internal::GaussianWindow(x, lo_, spacing_, c, first, last, out);
      for (int64_t i = std::max(first, last); i < k; ++i) out[i] = 0.0;
      return;
    }
    case ShiftedBasisKind::kTriangle: {
      // Zheng et al. Prop. 5: tri((x - t) / (0.5 w)), zero outside |x - t| < w / 2.
      const double inv_half = 2.0 / width_;
      int64_t first, last;
      ShiftWindow(x, 0.5 * width_, &first, &last);
      for (int64_t i = 0; i < first; ++i) out[i] = 0.0;
      for (int64_t i = first; i < last; ++i) {
        const double v = 1.0 - std::abs(x - shift(i)) * inv_half;
        out[i] = v > 0 ? v : 0.0;
      }
      for (int64_t i = std::max(first, last); i < k; ++i) out[i] = 0.0;
      return;
    }
    case ShiftedBasisKind::kRectangle: {
      // Zheng et al. Prop. 4: rect((x - t) / w).
      const double half = 0.5 * width_;
      for (int64_t i = 0; i < k; ++i) {
        const double a = std::abs(x - shift(i));
        out[i] = a < half ? 1.0 : (a == half ? 0.5 : 0.0);
      }
      return;
    }
    case ShiftedBasisKind::kImpulse: {
      for (int64_t i = 0; i < k; ++i) out[i] = 0.0;
      const double v = std::floor((x - lo_) / spacing_ + 0.5);
      if (v >= 0 && v < static_cast<double>(k)) out[static_cast<int64_t>(v)] = 1.0;
      return;
    }
    case ShiftedBasisKind::kSine:
    case ShiftedBasisKind::kSquare: {
      // sin(2 pi (t - x) / w), the phase in turns reduced exactly to [-1/2, 1/2] first
      // (a rounded 2 pi / w times t - x would carry its rounding into large phases).
      const bool square = kind_ == ShiftedBasisKind::kSquare;
      for (int64_t i = 0; i < k; ++i) {
        const double s = std::sin(kTwoPi * std::remainder((shift(i) - x) / width_, 1.0));
        out[i] = square ? static_cast<double>((s > 0) - (s < 0)) : s;
      }
      return;
    }
  }
}

void ShiftedBasis1D::DerivativeAt(double x, double* out) const {
  const int64_t k = num_shifts_;
  switch (kind_) {
    case ShiftedBasisKind::kGaussian: {
      const double c = -0.5 / (width_ * width_);
      const double inv_var = 1.0 / (width_ * width_);
      for (int64_t i = 0; i < k; ++i) {
        const double u = x - shift(i);
        // Far out, u / w^2 may overflow where the exponential has underflowed to 0: the
        // derivative is 0 there, not inf times 0.
        const double e = std::exp(c * u * u);
        out[i] = e == 0.0 ? 0.0 : -u * inv_var * e;
      }
      return;
    }
    case ShiftedBasisKind::kTriangle: {
      const double half = 0.5 * width_;
      const double slope = 2.0 / width_;
      for (int64_t i = 0; i < k; ++i) {
        const double u = x - shift(i);
        const double a = std::abs(u);
        out[i] = (a < half && u != 0) ? (u > 0 ? -slope : slope) : 0.0;
      }
      return;
    }
    case ShiftedBasisKind::kSine: {
      const double omega = kTwoPi / width_;
      for (int64_t i = 0; i < k; ++i) {
        out[i] = -omega * std::cos(kTwoPi * std::remainder((shift(i) - x) / width_, 1.0));
      }
      return;
    }
    case ShiftedBasisKind::kRectangle:
    case ShiftedBasisKind::kImpulse:
    case ShiftedBasisKind::kSquare:
      for (int64_t i = 0; i < k; ++i) out[i] = 0.0;
      return;
  }
}

absl::Status ShiftedBasis1D::CheckCoordinate(double x) const {
  if (!std::isfinite(x)) {
    return absl::InvalidArgumentError(absl::StrCat("ShiftedBasis1D: non-finite coordinate ", x));
  }
  if (kind_ == ShiftedBasisKind::kSine || kind_ == ShiftedBasisKind::kSquare) {
    const double t = std::max(std::abs(shift(0)), std::abs(shift(num_shifts_ - 1)));
    if (!std::isfinite((std::abs(x) + t) / width_)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ShiftedBasis1D: the phase (t - x) / width of coordinate ", x, " at width ", width_,
          " overflows"));
    }
  }
  return absl::OkStatus();
}

absl::Status ShiftedBasis1D::CheckCoordinates(absl::Span<const double> coords) const {
  if (absl::Status s = ValidateCoords(coords); !s.ok()) return s;
  for (double x : coords) {
    if (absl::Status s = CheckCoordinate(x); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::StatusOr<RowMatrixXd> ShiftedBasis1D::Encode(absl::Span<const double> coords) const {
  if (absl::Status s = CheckCoordinates(coords); !s.ok()) return s;
  RowMatrixXd psi(static_cast<int64_t>(coords.size()), num_shifts_);
  for (size_t j = 0; j < coords.size(); ++j) EvaluateAt(coords[j], psi.row(j).data());
  return psi;
}

absl::Status ShiftedBasis1D::EncodeTo(absl::Span<const double> coords,
                                      Eigen::Ref<RowMatrixXd> out) const {
  if (absl::Status s = CheckCoordinates(coords); !s.ok()) return s;
  if (out.rows() != static_cast<Eigen::Index>(coords.size()) || out.cols() != num_shifts_) {
    return absl::InvalidArgumentError(absl::StrCat("ShiftedBasis1D::EncodeTo: output is ",
                                                   out.rows(), " x ", out.cols(), ", need ",
                                                   coords.size(), " x ", num_shifts_));
  }
  for (size_t j = 0; j < coords.size(); ++j) EvaluateAt(coords[j], out.row(j).data());
  return absl::OkStatus();
}

absl::StatusOr<RowMatrixXd> ShiftedBasis1D::EncodeDerivative(
    absl::Span<const double> coords) const {
  if (absl::Status s = CheckCoordinates(coords); !s.ok()) return s;
  RowMatrixXd dpsi(static_cast<int64_t>(coords.size()), num_shifts_);
  for (size_t j = 0; j < coords.size(); ++j) DerivativeAt(coords[j], dpsi.row(j).data());
  return dpsi;
}

absl::StatusOr<SimpleShiftedEncoder> SimpleShiftedEncoder::Create(
    std::vector<ShiftedBasis1D> axes) {
  if (axes.empty()) return absl::InvalidArgumentError("SimpleShiftedEncoder: no axes");
  int64_t total = 0;
  for (const ShiftedBasis1D& a : axes) total += a.num_shifts();
  if (total > kMaxComplexFeatures) {
    return absl::InvalidArgumentError("SimpleShiftedEncoder: more than 2^26 features");
  }
  return SimpleShiftedEncoder(std::move(axes), total);
}

// Every point's coordinate d through axes[d].CheckCoordinate (finite, phases in range).
static absl::Status CheckAxes(const std::vector<ShiftedBasis1D>& axes, const PointsRef& points) {
  for (Eigen::Index n = 0; n < points.rows(); ++n) {
    for (size_t d = 0; d < axes.size(); ++d) {
      if (absl::Status s = axes[d].CheckCoordinate(points(n, static_cast<Eigen::Index>(d)));
          !s.ok()) {
        return absl::InvalidArgumentError(absl::StrCat("points row ", n, ": ", s.message()));
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<RowMatrixXd> SimpleShiftedEncoder::Encode(const PointsRef& points) const {
  if (absl::Status s = ValidateFiniteMatrix(points, input_dim(), "points"); !s.ok()) return s;
  if (absl::Status s = CheckAxes(axes_, points); !s.ok()) return s;
  RowMatrixXd out(points.rows(), output_dim_);
  for (Eigen::Index n = 0; n < points.rows(); ++n) {
    double* row = out.row(n).data();
    for (size_t d = 0; d < axes_.size(); ++d) {
      axes_[d].EvaluateAt(points(n, static_cast<Eigen::Index>(d)), row);
      row += axes_[d].num_shifts();
    }
  }
  return out;
}

absl::StatusOr<RowMatrixXd> SimpleShiftedEncoder::Backward(const PointsRef& points,
                                                           const PointsRef& grad_features) const {
  if (absl::Status s = ValidateBackwardArgs(points, input_dim(), grad_features, output_dim_);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckAxes(axes_, points); !s.ok()) return s;
  RowMatrixXd grad(points.rows(), input_dim());
  std::vector<double> dpsi;
  for (Eigen::Index n = 0; n < points.rows(); ++n) {
    int64_t offset = 0;
    for (size_t d = 0; d < axes_.size(); ++d) {
      const int64_t k = axes_[d].num_shifts();
      dpsi.resize(k);
      axes_[d].DerivativeAt(points(n, static_cast<Eigen::Index>(d)), dpsi.data());
      double acc = 0;
      for (int64_t i = 0; i < k; ++i) acc += grad_features(n, offset + i) * dpsi[i];
      grad(n, static_cast<Eigen::Index>(d)) = acc;
      offset += k;
    }
  }
  return grad;
}

absl::StatusOr<ComplexShiftedEncoder> ComplexShiftedEncoder::Create(
    std::vector<ShiftedBasis1D> axes) {
  if (axes.empty()) return absl::InvalidArgumentError("ComplexShiftedEncoder: no axes");
  int64_t total = 1;
  for (const ShiftedBasis1D& a : axes) {
    if (a.num_shifts() > kMaxComplexFeatures / total) {
      return absl::InvalidArgumentError(
          "ComplexShiftedEncoder: prod K_d exceeds 2^26 features; use Factors() instead");
    }
    total *= a.num_shifts();
  }
  return ComplexShiftedEncoder(std::move(axes), total);
}

absl::StatusOr<RowMatrixXd> ComplexShiftedEncoder::Encode(const PointsRef& points) const {
  if (absl::Status s = ValidateFiniteMatrix(points, input_dim(), "points"); !s.ok()) return s;
  if (absl::Status s = CheckAxes(axes_, points); !s.ok()) return s;
  if (points.rows() > kMaxMaterialisedEntries / output_dim_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "ComplexShiftedEncoder: materialising ", points.rows(), " x ", output_dim_,
        " features exceeds 2^28 doubles; use Factors() for grids"));
  }
  const size_t dims = axes_.size();
  std::vector<std::vector<double>> per_axis(dims);
  std::vector<const double*> vecs(dims);
  std::vector<int64_t> sizes(dims);
  for (size_t d = 0; d < dims; ++d) {
    per_axis[d].resize(axes_[d].num_shifts());
    vecs[d] = per_axis[d].data();
    sizes[d] = axes_[d].num_shifts();
  }
  RowMatrixXd out(points.rows(), output_dim_);
  for (Eigen::Index n = 0; n < points.rows(); ++n) {
    for (size_t d = 0; d < dims; ++d) {
      axes_[d].EvaluateAt(points(n, static_cast<Eigen::Index>(d)), per_axis[d].data());
    }
    KroneckerInto(vecs, sizes, out.row(n).data());
  }
  return out;
}

absl::StatusOr<RowMatrixXd> ComplexShiftedEncoder::Backward(
    const PointsRef& points, const PointsRef& grad_features) const {
  if (absl::Status s = ValidateBackwardArgs(points, input_dim(), grad_features, output_dim_);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckAxes(axes_, points); !s.ok()) return s;
  const size_t dims = axes_.size();
  std::vector<std::vector<double>> values(dims), derivs(dims);
  std::vector<int64_t> sizes(dims);
  for (size_t d = 0; d < dims; ++d) {
    sizes[d] = axes_[d].num_shifts();
    values[d].resize(sizes[d]);
    derivs[d].resize(sizes[d]);
  }
  std::vector<double> kron(output_dim_);
  std::vector<const double*> vecs(dims);
  RowMatrixXd grad(points.rows(), input_dim());
  for (Eigen::Index n = 0; n < points.rows(); ++n) {
    for (size_t d = 0; d < dims; ++d) {
      const double x = points(n, static_cast<Eigen::Index>(d));
      axes_[d].EvaluateAt(x, values[d].data());
      axes_[d].DerivativeAt(x, derivs[d].data());
    }
    // Product rule: d/dx_d of prod_e psi(x_e) replaces factor d by its derivative.
    for (size_t d = 0; d < dims; ++d) {
      for (size_t e = 0; e < dims; ++e) vecs[e] = (e == d ? derivs[e] : values[e]).data();
      KroneckerInto(vecs, sizes, kron.data());
      double acc = 0;
      for (int64_t f = 0; f < output_dim_; ++f) acc += grad_features(n, f) * kron[f];
      grad(n, static_cast<Eigen::Index>(d)) = acc;
    }
  }
  return grad;
}

absl::StatusOr<std::vector<RowMatrixXd>> ComplexShiftedEncoder::Factors(
    const std::vector<std::vector<double>>& axis_coords) const {
  if (axis_coords.size() != axes_.size()) {
    return absl::InvalidArgumentError(absl::StrCat("ComplexShiftedEncoder::Factors: expected ",
                                                   axes_.size(), " coordinate lists, got ",
                                                   axis_coords.size()));
  }
  std::vector<RowMatrixXd> factors;
  factors.reserve(axes_.size());
  for (size_t d = 0; d < axes_.size(); ++d) {
    absl::StatusOr<RowMatrixXd> psi = axes_[d].Encode(axis_coords[d]);
    if (!psi.ok()) {
      return absl::Status(psi.status().code(),
                          absl::StrCat("axis ", d, ": ", psi.status().message()));
    }
    factors.push_back(*std::move(psi));
  }
  return factors;
}

}  // namespace encodings
}  // namespace gpe
#endif  // HWY_ONCE
