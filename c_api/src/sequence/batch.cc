#include "c_api/src/sequence/batch.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <Eigen/Dense>
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "c_api/src/common/checks.h"
#include "c_api/src/common/tensor_view.h"

namespace gpe::c_api {

std::string Shape(const TensorView& v) {
  std::string s = absl::StrCat(DTypeName(v.dtype), " [");
  for (size_t i = 0; i < v.shape.size(); ++i) absl::StrAppend(&s, i ? ", " : "", v.shape[i]);
  return absl::StrCat(s, "]");
}

absl::StatusOr<TensorView> ViewRows(const DLTensor* t, const char* name, int64_t rows,
                                    int64_t dim) {
  absl::StatusOr<TensorView> v = ViewTensor(t, name, 2, kFloat);
  if (!v.ok()) return v.status();
  if (v->shape[1] != dim) {
    return absl::InvalidArgumentError(absl::StrCat(name, " has shape [", v->shape[0], ", ",
                                                   v->shape[1], "]; the encoding acts on dim ",
                                                   dim));
  }
  if (v->shape[0] != rows) {
    return absl::InvalidArgumentError(absl::StrCat(name, " has ", v->shape[0],
                                                   " rows but positions has ", rows));
  }
  return v;
}

absl::StatusOr<TensorView> ViewBatch(const DLTensor* t, const char* name, const TensorView& p,
                                     int64_t dim) {
  return ViewRows(t, name, p.shape[0], dim);
}

absl::Status CheckLike(const TensorView& other, const char* name, const TensorView& like,
                       const char* like_name) {
  if (other.shape != like.shape || other.dtype != like.dtype) {
    return absl::InvalidArgumentError(absl::StrCat(name, " must match ", like_name, " (",
                                                   Shape(like), "); got ", Shape(other)));
  }
  return absl::OkStatus();
}

absl::StatusOr<TensorView> ViewShaped(const DLTensor* t, const char* name,
                                      const std::vector<int64_t>& shape,
                                      absl::Span<const DType> allowed) {
  absl::StatusOr<TensorView> v = ViewTensor(t, name, static_cast<int>(shape.size()), allowed);
  if (!v.ok()) return v.status();
  if (v->shape != shape) {
    TensorView want = *v;
    want.shape = shape;
    return absl::InvalidArgumentError(
        absl::StrCat(name, " must have shape ", Shape(want), "; got ", Shape(*v)));
  }
  return v;
}

absl::Status ViewOptionalOut(DLTensor* t, const char* name, const std::vector<int64_t>& shape,
                             TensorView* out, bool* present,
                             absl::Span<const DType> allowed) {
  *present = t != nullptr;
  if (t == nullptr) return absl::OkStatus();
  absl::StatusOr<TensorView> v = ViewShaped(t, name, shape, allowed);
  if (!v.ok()) return v.status();
  if (absl::Status s = CheckNoSelfOverlap(*v, name); !s.ok()) return s;
  *out = std::move(*v);
  return absl::OkStatus();
}

absl::Status ViewParamGrad(DLTensor* t, const char* name, const std::vector<int64_t>& shape,
                           TensorView* out, bool* present) {
  return ViewOptionalOut(t, name, shape, out, present, kF64);
}

absl::StatusOr<ApplyViews> ViewApply(const DLTensor* positions, const DLTensor* x, DLTensor* out,
                                     int64_t dim) {
  absl::StatusOr<TensorView> p = ViewTensor(positions, "positions", 1, kInt);
  if (!p.ok()) return p.status();
  absl::StatusOr<TensorView> xv = ViewBatch(x, "x", *p, dim);
  if (!xv.ok()) return xv.status();
  absl::StatusOr<TensorView> ov = ViewTensor(out, "out", 2, kFloat);
  if (!ov.ok()) return ov.status();
  if (absl::Status s = CheckLike(*ov, "out", *xv, "x"); !s.ok()) return s;
  if (absl::Status s = CheckNoSelfOverlap(*ov, "out"); !s.ok()) return s;
  if (!gpe::c_api::SameLayout(*xv, *ov) && gpe::c_api::Overlaps(*xv, *ov)) {
    return absl::InvalidArgumentError(
        "out overlaps x without being x itself: pass out = x for in place, or disjoint memory");
  }
  if (gpe::c_api::Overlaps(*p, *ov)) {
    return absl::InvalidArgumentError("out overlaps positions; pass disjoint memory");
  }
  return ApplyViews{std::move(*p), std::move(*xv), std::move(*ov)};
}

absl::StatusOr<BackwardViews> ViewBackward(const DLTensor* positions, const DLTensor* x,
                                           const DLTensor* grad_out, DLTensor* grad_x,
                                           int64_t dim) {
  BackwardViews v;
  absl::StatusOr<TensorView> p = ViewTensor(positions, "positions", 1, kInt);
  if (!p.ok()) return p.status();
  v.p = std::move(*p);
  absl::StatusOr<TensorView> xv = ViewBatch(x, "x", v.p, dim);
  if (!xv.ok()) return xv.status();
  v.x = std::move(*xv);
  absl::StatusOr<TensorView> gv = ViewTensor(grad_out, "grad_out", 2, kFloat);
  if (!gv.ok()) return gv.status();
  v.grad_out = std::move(*gv);
  if (absl::Status s = CheckLike(v.grad_out, "grad_out", v.x, "x"); !s.ok()) return s;
  if (grad_x != nullptr) {
    absl::StatusOr<TensorView> gx = ViewTensor(grad_x, "grad_x", 2, kFloat);
    if (!gx.ok()) return gx.status();
    v.grad_x = std::move(*gx);
    v.has_grad_x = true;
    if (absl::Status s = CheckLike(v.grad_x, "grad_x", v.x, "x"); !s.ok()) return s;
    if (absl::Status s = CheckNoSelfOverlap(v.grad_x, "grad_x"); !s.ok()) return s;
    if (gpe::c_api::Overlaps(v.grad_x, v.x) || gpe::c_api::Overlaps(v.grad_x, v.p)) {
      return absl::InvalidArgumentError(
          "grad_x overlaps x or positions; pass disjoint memory");
    }
    if (!gpe::c_api::SameLayout(v.grad_x, v.grad_out) &&
        gpe::c_api::Overlaps(v.grad_x, v.grad_out)) {
      return absl::InvalidArgumentError(
          "grad_x overlaps grad_out without being grad_out itself: pass grad_x = grad_out "
          "for in place, or disjoint memory");
    }
  }
  return v;
}

void WriteMatrix(const Eigen::MatrixXd& m, const TensorView& out) {
  double* dst = out.typed<double>();
  for (int64_t i = 0; i < m.rows(); ++i) {
    for (int64_t j = 0; j < m.cols(); ++j) dst[i * out.strides[0] + j * out.strides[1]] = m(i, j);
  }
}

absl::StatusOr<TensorView> ViewSquare(DLTensor* out, int64_t dim) {
  absl::StatusOr<TensorView> ov = ViewTensor(out, "out", 2, kF64);
  if (!ov.ok()) return ov.status();
  if (ov->shape[0] != dim || ov->shape[1] != dim) {
    return absl::InvalidArgumentError(absl::StrCat("out must have shape [", dim, ", ", dim,
                                                   "]; got [", ov->shape[0], ", ",
                                                   ov->shape[1], "]"));
  }
  if (absl::Status s = CheckNoSelfOverlap(*ov, "out"); !s.ok()) return s;
  return ov;
}

}  // namespace gpe::c_api
