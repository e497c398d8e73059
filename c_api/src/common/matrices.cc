#include "c_api/src/common/matrices.h"

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "c_api/src/common/checks.h"
#include "c_api/src/common/tensor_view.h"

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
  if (absl::Status s = CheckBroadcastCopy(*v, name); !s.ok()) return s;
  RowMatrix<double> m = CopyMatrix<double>(*v);
  if (checked && !m.allFinite()) {
    return absl::InvalidArgumentError(absl::StrCat(name, " has a non-finite entry"));
  }
  return m;
}

absl::Status CheckOutputShape(const DLTensor* t, const char* name, int64_t rows, int64_t cols) {
  absl::StatusOr<TensorView> v = ViewTensor(t, name, 2, kF64);
  if (!v.ok()) return v.status();
  if (v->shape[0] != rows || v->shape[1] != cols) {
    return absl::InvalidArgumentError(absl::StrCat(name, " must have shape [", rows, ", ", cols,
                                                   "]; got [", v->shape[0], ", ", v->shape[1],
                                                   "]"));
  }
  return gpe::c_api::CheckNoSelfOverlap(*v, name);
}

std::string ShapeString(const TensorView& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.shape.size(); ++i) absl::StrAppend(&s, i ? ", " : "", v.shape[i]);
  return s + "]";
}

absl::StatusOr<TensorView> OutputMatrix(DLTensor* t, const char* name, int64_t rows, int64_t cols,
                                        const TensorView* input, const char* input_name) {
  absl::StatusOr<TensorView> v = ViewTensor(t, name, 2, kF64);
  if (!v.ok()) return v.status();
  if (v->shape[0] != rows || v->shape[1] != cols) {
    return absl::InvalidArgumentError(absl::StrCat(name, " must have shape [", rows, ", ", cols,
                                                   "]; got ", ShapeString(*v)));
  }
  if (absl::Status s = gpe::c_api::CheckNoSelfOverlap(*v, name); !s.ok()) return s;
  if (input != nullptr && gpe::c_api::Overlaps(*input, *v)) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, " overlaps ", input_name, "; pass disjoint memory"));
  }
  return v;
}

void WriteMatrix(const RowMatrix<double>& m, const TensorView& v) {
  double* dst = v.typed<double>();
  for (int64_t i = 0; i < m.rows(); ++i) {
    for (int64_t j = 0; j < m.cols(); ++j) dst[i * v.strides[0] + j * v.strides[1]] = m(i, j);
  }
}

}  // namespace gpe::c_api
