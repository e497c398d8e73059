// Validated [N, dim] batches of the C ABI's sequence encodings (absolute.cc, grape_m.cc,
// algebraic.cc, relative.cc): views of positions, rows and outputs with the shape and
// overlap rules of gpe/sequence.h, and the helpers that hand their rows to
// encodings/sequence/ (through compact buffers when strided). Internal to c_api.
#ifndef GPE_C_API_SRC_SEQUENCE_BATCH_H_
#define GPE_C_API_SRC_SEQUENCE_BATCH_H_

#include <cstdint>
#include <string>
#include <vector>

#include <Eigen/Dense>
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "c_api/src/common/checks.h"
#include "c_api/src/common/tensor_view.h"
#include "dlpack/dlpack.h"

namespace gpe::c_api {

// A view's dtype and shape for messages, e.g. "float32 [2, 3]".
std::string Shape(const TensorView& v);

// A float32/float64 [rows, dim] batch: one row per position (or per row of an index
// tensor), `dim` columns.
absl::StatusOr<TensorView> ViewRows(const DLTensor* t, const char* name, int64_t rows,
                                    int64_t dim);

// A float32/float64 [N, dim] batch with one position per row of the 1-D view `p`.
absl::StatusOr<TensorView> ViewBatch(const DLTensor* t, const char* name, const TensorView& p,
                                     int64_t dim);

// `other` must have `like`'s dtype and shape.
absl::Status CheckLike(const TensorView& other, const char* name, const TensorView& like,
                       const char* like_name);

// A tensor of exactly `shape` (1-D or 2-D), named `name`, of an `allowed` dtype
// (float32/float64 unless given).
absl::StatusOr<TensorView> ViewShaped(const DLTensor* t, const char* name,
                                      const std::vector<int64_t>& shape,
                                      absl::Span<const DType> allowed = kFloat);

// An optional output of exactly `shape`: *present says whether it was given (*out is
// untouched when t is NULL).
absl::Status ViewOptionalOut(DLTensor* t, const char* name, const std::vector<int64_t>& shape,
                             TensorView* out, bool* present,
                             absl::Span<const DType> allowed = kFloat);

// An optional float64 output of exactly `shape`: *present is false (and *out untouched)
// when t is NULL.
absl::Status ViewParamGrad(DLTensor* t, const char* name, const std::vector<int64_t>& shape,
                           TensorView* out, bool* present);

// Validated views of an apply call: positions [N], x and out [N, dim], same dtype and
// shape, out == x or disjoint.
struct ApplyViews {
  TensorView p, x, out;
};
absl::StatusOr<ApplyViews> ViewApply(const DLTensor* positions, const DLTensor* x, DLTensor* out,
                                     int64_t dim);

// Validated views of a backward call: positions, x, grad_out, optional grad_x.
struct BackwardViews {
  TensorView p, x, grad_out, grad_x;
  bool has_grad_x = false;
};
absl::StatusOr<BackwardViews> ViewBackward(const DLTensor* positions, const DLTensor* x,
                                           const DLTensor* grad_out, DLTensor* grad_x,
                                           int64_t dim);

// A dense matrix into a float64 [rows, cols] view.
void WriteMatrix(const Eigen::MatrixXd& m, const TensorView& out);

// out: float64 [dim, dim], free of self-overlap.
absl::StatusOr<TensorView> ViewSquare(DLTensor* out, int64_t dim);

// Runs fn(rows, stride) on the float32/float64 [N, dim] view `v` as T rows (a compact
// buffer when strided, filled from v when `gather`), then writes the rows back into v.
template <class Fn>
absl::Status WriteRowsAny(const TensorView& v, bool gather, Fn fn) {
  auto run = [&](auto zero) -> absl::Status {
    using T = decltype(zero);
    std::vector<T> buf;
    int64_t stride = 0;
    T* rows = RowsOf<T>(v, gather, &buf, &stride);
    if (absl::Status s = fn(rows, stride); !s.ok()) return s;
    ScatterRows<T>(rows, v);
    return absl::OkStatus();
  };
  return v.dtype == DType::kFloat32 ? run(0.0f) : run(0.0);
}

// Runs fn(in, in_stride, out, out_stride) on T rows of `x` and `out` (compact buffers
// for strided views; out == x in place), then writes the rows back into `out`.
template <class T, class Fn>
absl::Status OnRows(const TensorView& x, const TensorView& out, Fn fn) {
  std::vector<T> xs, os;
  int64_t xst = 0, ost = 0;
  T* in = RowsOf<T>(x, /*gather=*/true, &xs, &xst);
  T* dst = nullptr;
  if (gpe::c_api::SameLayout(x, out)) {
    dst = in;
    ost = xst;
  } else {
    dst = RowsOf<T>(out, /*gather=*/false, &os, &ost);
  }
  if (absl::Status s = fn(in, xst, dst, ost); !s.ok()) return s;
  ScatterRows<T>(dst, out);
  return absl::OkStatus();
}

// Runs fn(in, in_stride, grad_out, grad_out_stride, grad_x, grad_x_stride) on T rows of
// `x` and `grad_out` and, when `grad_x` is given, of *grad_x (grad_x == grad_out in
// place), then writes grad_x back. Pointers are null when there are no rows; strides
// not set from a view are `unset_stride`.
template <class T, class Fn>
absl::Status OnBackwardRows(const TensorView& x, const TensorView& grad_out,
                            const TensorView* grad_x, int64_t unset_stride, Fn fn) {
  const bool empty = x.shape[0] == 0;
  std::vector<T> xs, gs, gxs;
  int64_t xst = unset_stride, gst = unset_stride, gxst = unset_stride;
  T* in = empty ? nullptr : RowsOf<T>(x, true, &xs, &xst);
  T* go = empty ? nullptr : RowsOf<T>(grad_out, true, &gs, &gst);
  T* gx = nullptr;
  if (grad_x != nullptr && !empty) {
    if (gpe::c_api::SameLayout(*grad_x, grad_out)) {
      gx = go;
      gxst = gst;
    } else {
      gx = RowsOf<T>(*grad_x, false, &gxs, &gxst);
    }
  }
  if (absl::Status s = fn(in, xst, go, gst, gx, gxst); !s.ok()) return s;
  if (gx != nullptr) ScatterRows<T>(gx, *grad_x);
  return absl::OkStatus();
}

// out = rep(positions) x for any Rep with Apply<T>(positions, in, in_stride, out,
// out_stride) (strided views go through compact buffers).
template <class T, class Rep>
absl::Status ApplyTyped(const Rep& rep, const ApplyViews& v) {
  if (v.x.shape[0] == 0) return absl::OkStatus();
  std::vector<int64_t> pstore;
  absl::Span<const int64_t> p = ContiguousPositions(v.p, &pstore);
  return OnRows<T>(v.x, v.out, [&](T* in, int64_t xst, T* dst, int64_t ost) {
    return rep.template Apply<T>(p, in, xst, dst, ost);
  });
}

template <class Rep>
absl::Status ApplyAny(const Rep& rep, const ApplyViews& v) {
  return v.x.dtype == DType::kFloat32 ? ApplyTyped<float>(rep, v) : ApplyTyped<double>(rep, v);
}

// Calls rep.Backward<T>(positions, in, in_stride, grad_out, grad_out_stride, grad_in,
// grad_in_stride, grads) on the (possibly buffered) rows of `v`.
template <class T, class Rep, class Grads>
absl::Status BackwardTyped(const Rep& rep, const BackwardViews& v, Grads* grads) {
  std::vector<int64_t> pstore;
  absl::Span<const int64_t> p = ContiguousPositions(v.p, &pstore);
  return OnBackwardRows<T>(
      v.x, v.grad_out, v.has_grad_x ? &v.grad_x : nullptr, /*unset_stride=*/0,
      [&](T* in, int64_t xst, T* go, int64_t gst, T* gx, int64_t gxst) {
        return rep.template Backward<T>(p, in, xst, go, gst, gx, gxst, grads);
      });
}

template <class T>
double ReadAt(const TensorView& v, int64_t i, int64_t j) {
  return static_cast<double>(v.typed<const T>()[i * v.strides[0] + j * v.strides[1]]);
}

}  // namespace gpe::c_api

#endif  // GPE_C_API_SRC_SEQUENCE_BATCH_H_
