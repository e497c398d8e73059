// Matrices read from and written to DLPack views for the C ABI's coordinate, analysis
// and INR entry points: a validated [rows, cols] view copied into a compact row-major
// Eigen matrix, with optional content checks, and a matrix written into a checked
// output view.
#ifndef GPE_C_API_SRC_COMMON_MATRICES_H_
#define GPE_C_API_SRC_COMMON_MATRICES_H_

#include <cstdint>
#include <initializer_list>
#include <string>

#include <Eigen/Dense>
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "c_api/src/common/checks.h"
#include "c_api/src/common/tensor_view.h"
#include "dlpack/dlpack.h"

namespace gpe::c_api {

template <typename Scalar>
using RowMatrix = Eigen::Matrix<Scalar, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// A validated [rows, cols] view of dtype Scalar (any strides) copied into a compact
// matrix. An empty matrix may still have billions of rows (e.g. [2^33, 0]): no row loop
// then.
template <typename Scalar>
RowMatrix<Scalar> CopyMatrix(const TensorView& v) {
  RowMatrix<Scalar> m(v.shape[0], v.shape[1]);
  if (m.size() == 0) return m;
  const Scalar* src = v.typed<const Scalar>();
  for (int64_t i = 0; i < m.rows(); ++i) {
    for (int64_t j = 0; j < m.cols(); ++j) m(i, j) = src[i * v.strides[0] + j * v.strides[1]];
  }
  return m;
}

// What ReadFloat64Matrix requires of the entries beyond ViewTensor's checks.
enum class MatrixContents {
  kAny,             // any shape (empty included), any values
  kFiniteNonEmpty,  // >= 1 row and column, every entry finite
};

// A float64 [rows, cols] input (named `name` in messages) as a compact row-major matrix.
// kFiniteNonEmpty refuses "NAME is empty ([r, c]); it needs >= 1 row and column" and
// "NAME has a non-finite entry" (GPE_ERROR_INVALID_ARGUMENT).
absl::StatusOr<RowMatrix<double>> ReadFloat64Matrix(const DLTensor* t, const char* name,
                                                    MatrixContents contents);

// Writes m into a [rows, cols] output view of dtype Scalar, checking shape and overlap
// with `inputs`.
template <typename Scalar>
absl::Status WriteMatrix(const RowMatrix<Scalar>& m, DLTensor* t, const char* name,
                         std::initializer_list<const TensorView*> inputs = {}) {
  const DType dt = sizeof(Scalar) == 4 ? DType::kFloat32 : DType::kFloat64;
  const DType allowed[] = {dt};
  absl::StatusOr<TensorView> v = ViewTensor(t, name, 2, allowed);
  if (!v.ok()) return v.status();
  if (v->shape[0] != m.rows() || v->shape[1] != m.cols()) {
    return absl::InvalidArgumentError(absl::StrCat(name, " must have shape [", m.rows(), ", ",
                                                   m.cols(), "]; got [", v->shape[0], ", ",
                                                   v->shape[1], "]"));
  }
  if (absl::Status s = CheckNoSelfOverlap(*v, name); !s.ok()) return s;
  for (const TensorView* in : inputs) {
    if (in != nullptr && Overlaps(*in, *v)) {
      return absl::InvalidArgumentError(absl::StrCat(name, " overlaps an input"));
    }
  }
  if (m.size() == 0) return absl::OkStatus();
  Scalar* dst = v->typed<Scalar>();
  for (int64_t i = 0; i < m.rows(); ++i) {
    for (int64_t j = 0; j < m.cols(); ++j) dst[i * v->strides[0] + j * v->strides[1]] = m(i, j);
  }
  return absl::OkStatus();
}

// A float64 [rows, cols] output of exactly that shape, free of self-overlap: checked
// before a long computation (a fit), so a wrong output fails at once.
absl::Status CheckOutputShape(const DLTensor* t, const char* name, int64_t rows, int64_t cols);

// A view's shape for messages, e.g. "[2, 3]".
std::string ShapeString(const TensorView& v);

// A float64 [rows, cols] output view of exactly the given shape, free of self-overlap
// and of overlap with `input` (when given).
absl::StatusOr<TensorView> OutputMatrix(DLTensor* t, const char* name, int64_t rows, int64_t cols,
                                        const TensorView* input, const char* input_name);

// Writes m into a float64 view of m's shape (checked by the caller: OutputMatrix).
void WriteMatrix(const RowMatrix<double>& m, const TensorView& v);

}  // namespace gpe::c_api

#endif  // GPE_C_API_SRC_COMMON_MATRICES_H_
