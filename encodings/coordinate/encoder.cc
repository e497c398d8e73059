#include "encodings/coordinate/encoder.h"

#include <cmath>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace gpe {
namespace encodings {

absl::Status ValidateFiniteMatrix(const PointsRef& m, int64_t cols, absl::string_view what) {
  if (m.rows() < 1) return absl::InvalidArgumentError(absl::StrCat(what, ": no rows"));
  if (cols >= 0 && m.cols() != cols) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": expected ", cols, " columns, got ", m.cols()));
  }
  if (m.cols() < 1) return absl::InvalidArgumentError(absl::StrCat(what, ": no columns"));
  for (Eigen::Index i = 0; i < m.rows(); ++i) {
    for (Eigen::Index j = 0; j < m.cols(); ++j) {
      if (!std::isfinite(m(i, j))) {
        return absl::InvalidArgumentError(
            absl::StrCat(what, ": non-finite value ", m(i, j), " at (", i, ", ", j, ")"));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateBackwardArgs(const PointsRef& points, int64_t input_dim,
                                  const PointsRef& grad_features, int64_t output_dim) {
  if (absl::Status s = ValidateFiniteMatrix(points, input_dim, "points"); !s.ok()) return s;
  if (absl::Status s = ValidateFiniteMatrix(grad_features, output_dim, "grad_features");
      !s.ok()) {
    return s;
  }
  if (grad_features.rows() != points.rows()) {
    return absl::InvalidArgumentError(absl::StrCat("grad_features has ", grad_features.rows(),
                                                   " rows, points has ", points.rows()));
  }
  return absl::OkStatus();
}

absl::StatusOr<IdentityEncoder> IdentityEncoder::Create(int64_t dim) {
  if (dim < 1) {
    return absl::InvalidArgumentError(absl::StrCat("IdentityEncoder: dim must be >= 1, got ", dim));
  }
  return IdentityEncoder(dim);
}

absl::StatusOr<RowMatrixXd> IdentityEncoder::Encode(const PointsRef& points) const {
  if (absl::Status s = ValidateFiniteMatrix(points, dim_, "points"); !s.ok()) return s;
  return RowMatrixXd(points);
}

absl::StatusOr<RowMatrixXd> IdentityEncoder::Backward(const PointsRef& points,
                                                      const PointsRef& grad_features) const {
  if (absl::Status s = ValidateBackwardArgs(points, dim_, grad_features, dim_); !s.ok()) return s;
  return RowMatrixXd(grad_features);
}

}  // namespace encodings
}  // namespace gpe
