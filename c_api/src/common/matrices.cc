#include "c_api/src/common/matrices.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace gpe::c_api {

absl::StatusOr<RowMatrix<double>> ReadFloat64Matrix(const DLTensor* t, const char* name,
                                                    MatrixContents contents) {
  absl::StatusOr<TensorView> v = ViewTensor(t, name, 2, kF64);
  if (!v.ok()) return v.status();
  const bool checked = contents == MatrixContents::kFiniteNonEmpty;
  if (checked && (v->shape[0] < 1 || v->shape[1] < 1)) {
    return absl::InvalidArgumentError(absl::StrCat(name, " is empty ([", v->shape[0], ", ",
                                                   v->shape[1],
                                                   "]); it needs >= 1 row and column"));
  }
  RowMatrix<double> m = CopyMatrix<double>(*v);
  if (checked && !m.allFinite()) {
    return absl::InvalidArgumentError(absl::StrCat(name, " has a non-finite entry"));
  }
  return m;
}

}  // namespace gpe::c_api
