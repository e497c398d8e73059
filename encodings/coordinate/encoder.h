// Shared vocabulary of encodings/coordinate/: the row-major feature matrix type, the
// CoordinateEncoder interface every point encoding implements, and input validation.
//
// Conventions (all encodings in this package):
// - Points are a row-major N x D matrix, one row per point. Features are a row-major
//   N x F matrix, one row per point, in double.
// - Encode() is the forward map. Backward() is the vector-Jacobian product with respect
//   to the input coordinates: given G = dL/dFeatures (N x F) it returns dL/dPoints
//   (N x D), row i being sum_f G(i, f) * d feature_f(x_i) / d x_i.
// - Bad input (no points, wrong width, NaN/Inf, mismatched gradient shape) returns a
//   non-OK status, never a crash or a silent wrong answer.
#ifndef ENCODINGS_COORDINATE_ENCODER_H_
#define ENCODINGS_COORDINATE_ENCODER_H_

#include <cstdint>

#include <Eigen/Dense>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace gpe {
namespace encodings {

using RowMatrixXd = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using PointsRef = Eigen::Ref<const RowMatrixXd>;

// A map from points in R^D to features in R^F, with its input-coordinate VJP.
class CoordinateEncoder {
 public:
  virtual ~CoordinateEncoder() = default;

  virtual int64_t input_dim() const = 0;
  virtual int64_t output_dim() const = 0;

  // points: N x input_dim(), N >= 1, all finite. Returns N x output_dim().
  virtual absl::StatusOr<RowMatrixXd> Encode(const PointsRef& points) const = 0;

  // points: as for Encode; grad_features: N x output_dim(), finite. Returns N x input_dim().
  virtual absl::StatusOr<RowMatrixXd> Backward(const PointsRef& points,
                                               const PointsRef& grad_features) const = 0;
};

// The identity encoding x -> x (the "no positional encoding" baseline of Lim et al.).
class IdentityEncoder final : public CoordinateEncoder {
 public:
  static absl::StatusOr<IdentityEncoder> Create(int64_t dim);

  int64_t input_dim() const override { return dim_; }
  int64_t output_dim() const override { return dim_; }
  absl::StatusOr<RowMatrixXd> Encode(const PointsRef& points) const override;
  absl::StatusOr<RowMatrixXd> Backward(const PointsRef& points,
                                       const PointsRef& grad_features) const override;

 private:
  explicit IdentityEncoder(int64_t dim) : dim_(dim) {}
  int64_t dim_;
};

// OK iff `m` has at least one row, exactly `cols` columns (cols < 0: any) and only
// finite entries. `what` names the argument in the error message.
absl::Status ValidateFiniteMatrix(const PointsRef& m, int64_t cols, absl::string_view what);

// Checks the (points, grad_features) pair of a Backward call.
absl::Status ValidateBackwardArgs(const PointsRef& points, int64_t input_dim,
                                  const PointsRef& grad_features, int64_t output_dim);

}  // namespace encodings
}  // namespace gpe

#endif  // ENCODINGS_COORDINATE_ENCODER_H_
