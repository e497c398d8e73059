// Shifted-basis embedders (Zheng et al., "Trading Positional Complexity vs. Deepness in
// Coordinate Networks", sections 3-5): a 1D coordinate x becomes the samples
// psi(t_i - x) of one basis function at K equally spaced shifts t_i, and D-dimensional
// points combine the per-axis encodings either by concatenation ("simple", eq. 16) or by
// Kronecker / mode-n products ("complex", eq. 17).
//
// Shifts: t_i = lo + i (hi - lo) / K, i = 0 .. K-1, over the domain [lo, hi] (Zheng et
// al. eq. 3 with s = C / d, and eqs. 53-54 with t_i = i / K on [0, 1]).
//
// Basis functions, with `width` w (u = x - t_i):
//   kGaussian  exp(-u^2 / (2 w^2)), w = sigma (Prop. 2; the exponent is squared, erratum)
//   kTriangle  tri(u / (w / 2)) = max(1 - |u| / (w / 2), 0): support width w (Prop. 5;
//              note eq. 53 uses max(1 - |u| / d, 0), i.e. w = 2d)
//   kRectangle rect(u / w): 1 for |u| < w / 2, 1/2 at |u| = w / 2, else 0 (Prop. 4)
//   kImpulse   the sampled delta(t - x): one-hot at the nearest shift,
//              i* = floor((x - lo) / s + 1/2) with s = (hi - lo) / K (halfway ties go to
//              the upper shift); a zero row when i* is outside 0 .. K-1. `width` unused.
//   kSine      sin(2 pi (t_i - x) / w), w = period (section 4, f = 2 pi / w)
//   kSquare    sgn(sin(2 pi (t_i - x) / w)), sgn(0) = 0, w = period (section 4 uses 2 pi)
// Derivatives (Backward): analytic for kGaussian and kSine; for kTriangle the slope of
// the side containing u (0 at u = 0 and outside the support); rectangle, impulse and
// square are piecewise constant, so their gradient is 0 (the jumps' Dirac terms are
// dropped).
//
// Complex (Kronecker) feature order: for D axes with K_0 .. K_{D-1} shifts, feature
// f = k_0 + K_0 (k_1 + K_1 (k_2 + ...)) is psi_{k_0}(x_0) psi_{k_1}(x_1) ..., i.e. axis 0
// varies fastest: the row is psi(x_{D-1}) (x) ... (x) psi(x_0), Zheng et al.'s
// Psi(y) (x) Psi(x) (appendix B.1) for (x, y) points. For a 2D image stored row-major
// with rows = y (axis 1) and columns = x (axis 0), a weight matrix W (K_1 x K_0) read
// row-major is the weight vector, and the image on a separable grid is
// Psi_y W Psi_x^T (eq. 10, with the transposes its shapes need, rows = y).
#ifndef ENCODINGS_COORDINATE_SHIFTED_BASIS_H_
#define ENCODINGS_COORDINATE_SHIFTED_BASIS_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "encodings/coordinate/encoder.h"

namespace gpe {
namespace encodings {

enum class ShiftedBasisKind { kGaussian, kTriangle, kRectangle, kImpulse, kSine, kSquare };

// One axis: a basis function sampled at K equally spaced shifts over [lo, hi].
class ShiftedBasis1D {
 public:
  // num_shifts >= 1; width finite and > 0 (ignored for kImpulse); lo < hi, both finite.
  static absl::StatusOr<ShiftedBasis1D> Create(ShiftedBasisKind kind, int64_t num_shifts,
                                               double width, double lo = 0.0, double hi = 1.0);

  ShiftedBasisKind kind() const { return kind_; }
  int64_t num_shifts() const { return num_shifts_; }
  double width() const { return width_; }
  double lo() const { return lo_; }
  double hi() const { return hi_; }
  // s = (hi - lo) / K, the distance between neighbouring shifts.
  double spacing() const { return spacing_; }
  double shift(int64_t i) const { return lo_ + static_cast<double>(i) * spacing_; }

  // The factor matrix Psi (n x K) for n coordinates: Psi(j, i) = psi(t_i - x_j).
  // This is what the separable closed-form solver consumes. Coordinates must be finite
  // (they may lie outside [lo, hi]).
  absl::StatusOr<RowMatrixXd> Encode(absl::Span<const double> coords) const;
  // Encode into a caller-owned n x K row-major buffer (no allocation: solvers that
  // re-encode every iteration reuse one buffer). Fails on a shape mismatch.
  absl::Status EncodeTo(absl::Span<const double> coords, Eigen::Ref<RowMatrixXd> out) const;
  // d Psi(j, i) / d x_j, same shape (see the header comment for non-smooth bases).
  absl::StatusOr<RowMatrixXd> EncodeDerivative(absl::Span<const double> coords) const;

  // Unchecked single-coordinate kernels: write K values to `out` (x finite, and
  // CheckCoordinate(x) OK).
  void EvaluateAt(double x, double* out) const;
  void DerivativeAt(double x, double* out) const;
  // InvalidArgument when x is not finite, or (sine and square bases, whose phase is
  // (t_i - x) / w turns) when a phase leaves double's range: sin of it would be NaN.
  absl::Status CheckCoordinate(double x) const;
  // ValidateCoords (a non-empty span of finite values) and CheckCoordinate for each.
  absl::Status CheckCoordinates(absl::Span<const double> coords) const;

 private:
  ShiftedBasis1D(ShiftedBasisKind kind, int64_t num_shifts, double width, double lo, double hi)
      : kind_(kind),
        num_shifts_(num_shifts),
        width_(width),
        lo_(lo),
        hi_(hi),
        spacing_((hi - lo) / static_cast<double>(num_shifts)) {}

  // [first, last): a superset of the shift indices i with |x - t_i| <= reach.
  void ShiftWindow(double x, double reach, int64_t* first, int64_t* last) const;

  ShiftedBasisKind kind_;
  int64_t num_shifts_;
  double width_;
  double lo_;
  double hi_;
  double spacing_;
};

namespace internal {
// out[i] = exp(c (x - t_i)^2) with t_i = lo + i spacing, for first <= i < last (the
// Gaussian kernel of EvaluateAt): vectorised, within 1 ulp of the reference, which calls
// std::exp on the same argument.
void GaussianWindow(double x, double lo, double spacing, double c, int64_t first, int64_t last,
                    double* out);
void GaussianWindowReference(double x, double lo, double spacing, double c, int64_t first,
                             int64_t last, double* out);
}  // namespace internal

// Simple encoding (eq. 16): [psi(x_0), psi(x_1), ...], sum_d K_d features.
class SimpleShiftedEncoder final : public CoordinateEncoder {
 public:
  // One basis per axis (D = axes.size() >= 1).
  static absl::StatusOr<SimpleShiftedEncoder> Create(std::vector<ShiftedBasis1D> axes);

  const std::vector<ShiftedBasis1D>& axes() const { return axes_; }
  int64_t input_dim() const override { return static_cast<int64_t>(axes_.size()); }
  int64_t output_dim() const override { return output_dim_; }
  absl::StatusOr<RowMatrixXd> Encode(const PointsRef& points) const override;
  absl::StatusOr<RowMatrixXd> Backward(const PointsRef& points,
                                       const PointsRef& grad_features) const override;

 private:
  SimpleShiftedEncoder(std::vector<ShiftedBasis1D> axes, int64_t output_dim)
      : axes_(std::move(axes)), output_dim_(output_dim) {}
  std::vector<ShiftedBasis1D> axes_;
  int64_t output_dim_;
};

// Complex encoding (eq. 17): the Kronecker product of the per-axis encodings, prod_d K_d
// features in the order documented above. Encode() materialises it (N x prod K_d: for
// tests and small sizes); Factors() gives the per-axis matrices for separable grids,
// which is all the closed-form solver needs (it never forms the Kronecker product).
class ComplexShiftedEncoder final : public CoordinateEncoder {
 public:
  // D = axes.size() >= 1 (2D images and 3D volumes are the intended uses);
  // prod_d K_d <= 2^26.
  static absl::StatusOr<ComplexShiftedEncoder> Create(std::vector<ShiftedBasis1D> axes);

  const std::vector<ShiftedBasis1D>& axes() const { return axes_; }
  int64_t input_dim() const override { return static_cast<int64_t>(axes_.size()); }
  int64_t output_dim() const override { return output_dim_; }

  // Fails with ResourceExhausted when N x prod K_d exceeds 2^28 doubles (2 GiB).
  absl::StatusOr<RowMatrixXd> Encode(const PointsRef& points) const override;
  absl::StatusOr<RowMatrixXd> Backward(const PointsRef& points,
                                       const PointsRef& grad_features) const override;

  // For the separable grid axis_coords[0] x axis_coords[1] x ...: factor d is
  // axes()[d].Encode(axis_coords[d]) (n_d x K_d). The materialised feature of grid point
  // (j_0, j_1, ...) is then the Kronecker product of factor rows described above.
  absl::StatusOr<std::vector<RowMatrixXd>> Factors(
      const std::vector<std::vector<double>>& axis_coords) const;

 private:
  ComplexShiftedEncoder(std::vector<ShiftedBasis1D> axes, int64_t output_dim)
      : axes_(std::move(axes)), output_dim_(output_dim) {}
  std::vector<ShiftedBasis1D> axes_;
  int64_t output_dim_;
};

}  // namespace encodings
}  // namespace gpe

#endif  // ENCODINGS_COORDINATE_SHIFTED_BASIS_H_
