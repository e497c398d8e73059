// The C ABI's sequence encodings (gpe.h, "Sequence encodings"): validation of options
// and DLPack views, then adapters to encodings/sequence/ (absolute.h, grape_m.h,
// algebraic.h). Every entry point runs under Guard: failures become a status code plus
// the thread-local message, and no exception crosses the boundary.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <Eigen/Dense>
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "c_api/src/common/checks.h"
#include "c_api/src/common/error.h"
#include "c_api/include/gpe/gpe.h"
#include "c_api/src/sequence/handles.h"
#include "c_api/src/common/tensor_view.h"
#include "encodings/sequence/absolute.h"
#include "encodings/sequence/algebraic.h"
#include "encodings/sequence/grape_m.h"
#include "encodings/sequence/relative.h"

using gpe::c_api::CheckCreate;
using gpe::c_api::CheckDim;
using gpe::c_api::CheckDisjoint;
using gpe::c_api::CheckFinite;
using gpe::c_api::CheckNoSelfOverlap;
using gpe::c_api::CheckStructSize;
using gpe::c_api::ContiguousPositions;
using gpe::c_api::DType;
using gpe::c_api::Guard;
using gpe::c_api::NamedView;
using gpe::c_api::RowsOf;
using gpe::c_api::ScatterRows;
using gpe::c_api::TensorView;
using gpe::c_api::ViewTensor;
using gpe::c_api::kF64;
using gpe::c_api::kFloat;
using gpe::c_api::kInt;
namespace seq = gpe::encodings::sequence;


namespace {

std::string Shape(const TensorView& v) {
  std::string s = absl::StrCat(DTypeName(v.dtype), " [");
  for (size_t i = 0; i < v.shape.size(); ++i) absl::StrAppend(&s, i ? ", " : "", v.shape[i]);
  return absl::StrCat(s, "]");
}

// A float32/float64 [rows, dim] batch: one row per position (or per row of an index
// tensor), `dim` columns.
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

// A float32/float64 [N, dim] batch with one position per row of the 1-D view `p`.
absl::StatusOr<TensorView> ViewBatch(const DLTensor* t, const char* name, const TensorView& p,
                                     int64_t dim) {
  return ViewRows(t, name, p.shape[0], dim);
}

// `other` must have `like`'s dtype and shape.
absl::Status CheckLike(const TensorView& other, const char* name, const TensorView& like,
                       const char* like_name) {
  if (other.shape != like.shape || other.dtype != like.dtype) {
    return absl::InvalidArgumentError(absl::StrCat(name, " must match ", like_name, " (",
                                                   Shape(like), "); got ", Shape(other)));
  }
  return absl::OkStatus();
}

// A tensor of exactly `shape` (1-D or 2-D), named `name`, of an `allowed` dtype
// (float32/float64 unless given).
absl::StatusOr<TensorView> ViewShaped(const DLTensor* t, const char* name,
                                      const std::vector<int64_t>& shape,
                                      absl::Span<const DType> allowed = kFloat) {
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

// An optional output of exactly `shape`: *present says whether it was given (*out is
// untouched when t is NULL).
absl::Status ViewOptionalOut(DLTensor* t, const char* name, const std::vector<int64_t>& shape,
                             TensorView* out, bool* present,
                             absl::Span<const DType> allowed = kFloat) {
  *present = t != nullptr;
  if (t == nullptr) return absl::OkStatus();
  absl::StatusOr<TensorView> v = ViewShaped(t, name, shape, allowed);
  if (!v.ok()) return v.status();
  if (absl::Status s = CheckNoSelfOverlap(*v, name); !s.ok()) return s;
  *out = std::move(*v);
  return absl::OkStatus();
}

absl::Status CheckFiniteMatrix(const seq::RowMatrixXd& m, const char* name) {
  for (int64_t i = 0; i < m.rows(); ++i) {
    for (int64_t j = 0; j < m.cols(); ++j) {
      if (!std::isfinite(m(i, j))) {
        return absl::InvalidArgumentError(absl::StrCat(name, "[", i, ", ", j, "] is ", m(i, j),
                                                       "; values must be finite"));
      }
    }
  }
  return absl::OkStatus();
}

// An optional float64 output of exactly `shape`: *present is false (and *out untouched)
// when t is NULL.
absl::Status ViewParamGrad(DLTensor* t, const char* name, const std::vector<int64_t>& shape,
                           TensorView* out, bool* present) {
  return ViewOptionalOut(t, name, shape, out, present, kF64);
}

// Validated views of an apply call: positions [N], x and out [N, dim], same dtype and
// shape, out == x or disjoint.
struct ApplyViews {
  TensorView p, x, out;
};
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

// Validated views of a backward call: positions, x, grad_out, optional grad_x.
struct BackwardViews {
  TensorView p, x, grad_out, grad_x;
  bool has_grad_x = false;
};
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

// Checks `out` (one float32/float64 row per position of the int64 [N] view `p`) is
// disjoint from p and from itself, then writes fn(positions, rows, stride) into it.
template <class Fn>
absl::Status WritePositionRows(const TensorView& p, const TensorView& out, Fn fn) {
  if (gpe::c_api::Overlaps(p, out)) {
    return absl::InvalidArgumentError("out overlaps positions; pass disjoint memory");
  }
  if (absl::Status s = CheckNoSelfOverlap(out, "out"); !s.ok()) return s;
  if (p.shape[0] == 0) return absl::OkStatus();
  std::vector<int64_t> pstore;
  absl::Span<const int64_t> ps = ContiguousPositions(p, &pstore);
  return WriteRowsAny(out, /*gather=*/false,
                      [&](auto* rows, int64_t stride) { return fn(ps, rows, stride); });
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

// A dense matrix into a float64 [rows, cols] view.
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

template <class T>
double ReadAt(const TensorView& v, int64_t i, int64_t j) {
  return static_cast<double>(v.typed<const T>()[i * v.strides[0] + j * v.strides[1]]);
}

template <class T>
void AddRows(const seq::RowMatrixXd& acc, const std::vector<char>& touched, const TensorView& g) {
  T* dst = g.typed<T>();
  for (int64_t i = 0; i < acc.rows(); ++i) {
    if (!touched[i]) continue;
    for (int64_t j = 0; j < acc.cols(); ++j) {
      dst[i * g.strides[0] + j * g.strides[1]] += static_cast<T>(acc(i, j));
    }
  }
}

// A float32/float64 2-D view as a double row-major matrix.
seq::RowMatrixXd ReadMatrix(const TensorView& v) {
  seq::RowMatrixXd m(v.shape[0], v.shape[1]);
  for (int64_t i = 0; i < m.rows(); ++i) {
    for (int64_t j = 0; j < m.cols(); ++j) {
      m(i, j) = v.dtype == DType::kFloat32 ? ReadAt<float>(v, i, j) : ReadAt<double>(v, i, j);
    }
  }
  return m;
}

// Writes (or, with `add`, adds) `m` into a float32/float64 2-D view.
template <class T>
void StoreMatrixTyped(const seq::RowMatrixXd& m, const TensorView& v, bool add) {
  T* dst = v.typed<T>();
  for (int64_t i = 0; i < m.rows(); ++i) {
    for (int64_t j = 0; j < m.cols(); ++j) {
      T& e = dst[i * v.strides[0] + j * v.strides[1]];
      e = add ? static_cast<T>(static_cast<double>(e) + m(i, j)) : static_cast<T>(m(i, j));
    }
  }
}
void StoreMatrix(const seq::RowMatrixXd& m, const TensorView& v, bool add) {
  if (v.dtype == DType::kFloat32) {
    StoreMatrixTyped<float>(m, v, add);
  } else {
    StoreMatrixTyped<double>(m, v, add);
  }
}

// The views every Shaw call shares: query_positions and key_positions (int64 [N]) and
// label_table (float32/float64 [2k + 1, width], `width_name` in messages), into
// in->qp, in->kp, in->table and in->k.
template <class Inputs>
absl::Status ViewLabelTable(const DLTensor* label_table, const DLTensor* query_positions,
                            const DLTensor* key_positions, const char* width_name,
                            Inputs* in) {
  absl::StatusOr<TensorView> v = ViewTensor(query_positions, "query_positions", 1, kInt);
  if (!v.ok()) return v.status();
  in->qp = std::move(*v);
  v = ViewTensor(key_positions, "key_positions", 1, kInt);
  if (!v.ok()) return v.status();
  in->kp = std::move(*v);
  v = ViewTensor(label_table, "label_table", 2, kFloat);
  if (!v.ok()) return v.status();
  in->table = std::move(*v);
  const int64_t rows = in->table.shape[0];
  if (rows < 1 || rows % 2 == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "label_table must have an odd number 2k + 1 of rows; got ", Shape(in->table)));
  }
  if (absl::Status s = CheckDim(in->table.shape[1], width_name, 1); !s.ok()) return s;
  in->k = (rows - 1) / 2;
  return absl::OkStatus();
}

// Validated inputs of the Shaw key-score calls, and the ShawRelative built from them.
struct ShawInputs {
  TensorView q, table, qp, kp;
  int64_t k = 0;
};
absl::StatusOr<ShawInputs> ViewShaw(const DLTensor* q, const DLTensor* label_table,
                                    const DLTensor* query_positions,
                                    const DLTensor* key_positions) {
  ShawInputs in;
  if (absl::Status s = ViewLabelTable(label_table, query_positions, key_positions,
                                      "label_table's second size (d)", &in);
      !s.ok()) {
    return s;
  }
  absl::StatusOr<TensorView> v = ViewTensor(q, "q", 2, kFloat);
  if (!v.ok()) return v.status();
  in.q = std::move(*v);
  if (in.q.shape[0] != in.qp.shape[0] || in.q.shape[1] != in.table.shape[1]) {
    return absl::InvalidArgumentError(absl::StrCat(
        "q must have shape [", in.qp.shape[0], ", ", in.table.shape[1],
        "] (query_positions, label_table columns); got ", Shape(in.q)));
  }
  return in;
}

absl::StatusOr<seq::ShawRelative> MakeShaw(const ShawInputs& in) {
  seq::RowMatrixXd table = ReadMatrix(in.table);
  if (absl::Status s = CheckFiniteMatrix(table, "label_table"); !s.ok()) return s;
  // Only the key side is used here: the value table is a placeholder column.
  return seq::ShawRelative::Create(in.k, std::move(table),
                                   seq::RowMatrixXd::Zero(2 * in.k + 1, 1));
}

}  // namespace

extern "C" {

// ---- Sinusoidal --------------------------------------------------------------------

gpe_status gpe_sinusoidal_encode(const gpe_sinusoidal_options* options, const DLTensor* positions,
                                 DLTensor* out) {
  return Guard([&]() -> absl::Status {
    if (options == nullptr) return absl::InvalidArgumentError("options is NULL");
    if (absl::Status s = CheckStructSize(options->struct_size,
                                         offsetof(gpe_sinusoidal_options, base) + sizeof(double),
                                         sizeof(gpe_sinusoidal_options), "gpe_sinusoidal_options");
        !s.ok()) {
      return s;
    }
    if (!std::isfinite(options->base) || options->base <= 0.0) {
      return absl::InvalidArgumentError(
          absl::StrCat("base must be finite and > 0; got ", options->base));
    }
    absl::StatusOr<TensorView> p = ViewTensor(positions, "positions", 1, kInt);
    if (!p.ok()) return p.status();
    absl::StatusOr<TensorView> ov = ViewTensor(out, "out", 2, kFloat);
    if (!ov.ok()) return ov.status();
    const int64_t dim = ov->shape[1];
    if (absl::Status s = CheckDim(dim, "out's second size (dim)", 1); !s.ok()) return s;
    if (ov->shape[0] != p->shape[0]) {
      return absl::InvalidArgumentError(absl::StrCat("out has ", ov->shape[0],
                                                     " rows but positions has ", p->shape[0]));
    }
    return WritePositionRows(*p, *ov, [&](absl::Span<const int64_t> ps, auto* rows,
                                          int64_t stride) {
      using T = std::remove_pointer_t<decltype(rows)>;
      return seq::SinusoidalEncoding<T>(ps, dim, options->base, rows, stride);
    });
  });
}

// ---- Learned position table ----------------------------------------------------------

gpe_status gpe_learned_positions_create(const DLTensor* table, gpe_learned_positions** out) {
  return Guard([&]() -> absl::Status {
    if (out == nullptr) return absl::InvalidArgumentError("out is NULL");
    *out = nullptr;
    absl::StatusOr<TensorView> tv = ViewTensor(table, "table", 2, kFloat);
    if (!tv.ok()) return tv.status();
    if (tv->shape[0] < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("table must have at least one row (max_positions >= 1); got ",
                       Shape(*tv)));
    }
    if (absl::Status s = CheckDim(tv->shape[1], "table's second size (dim)", 1); !s.ok()) {
      return s;
    }
    seq::RowMatrixXd m(tv->shape[0], tv->shape[1]);
    for (int64_t i = 0; i < m.rows(); ++i) {
      for (int64_t j = 0; j < m.cols(); ++j) {
        const double v = tv->dtype == DType::kFloat32 ? ReadAt<float>(*tv, i, j)
                                                      : ReadAt<double>(*tv, i, j);
        if (!std::isfinite(v)) {
          return absl::InvalidArgumentError(
              absl::StrCat("table[", i, ", ", j, "] is ", v, "; values must be finite"));
        }
        m(i, j) = v;
      }
    }
    absl::StatusOr<seq::LearnedPositionTable> t = seq::LearnedPositionTable::Create(std::move(m));
    if (!t.ok()) return t.status();
    *out = new gpe_learned_positions{std::move(*t)};
    return absl::OkStatus();
  });
}

void gpe_learned_positions_destroy(gpe_learned_positions* table) { delete table; }

gpe_status gpe_learned_positions_shape(const gpe_learned_positions* table, int64_t* max_positions,
                                       int64_t* dim) {
  return Guard([&]() -> absl::Status {
    if (table == nullptr) return absl::InvalidArgumentError("table is NULL");
    if (max_positions == nullptr) return absl::InvalidArgumentError("max_positions is NULL");
    if (dim == nullptr) return absl::InvalidArgumentError("dim is NULL");
    *max_positions = table->impl.max_positions();
    *dim = table->impl.dim();
    return absl::OkStatus();
  });
}

gpe_status gpe_learned_positions_lookup(const gpe_learned_positions* table,
                                        const DLTensor* positions, DLTensor* out) {
  return Guard([&]() -> absl::Status {
    if (table == nullptr) return absl::InvalidArgumentError("table is NULL");
    absl::StatusOr<TensorView> p = ViewTensor(positions, "positions", 1, kInt);
    if (!p.ok()) return p.status();
    absl::StatusOr<TensorView> ov = ViewBatch(out, "out", *p, table->impl.dim());
    if (!ov.ok()) return ov.status();
    return WritePositionRows(*p, *ov, [&](absl::Span<const int64_t> ps, auto* rows,
                                          int64_t stride) {
      using T = std::remove_pointer_t<decltype(rows)>;
      return table->impl.Lookup<T>(ps, rows, stride);
    });
  });
}

gpe_status gpe_learned_positions_backward(const gpe_learned_positions* table,
                                          const DLTensor* positions, const DLTensor* grad_out,
                                          DLTensor* grad_table) {
  return Guard([&]() -> absl::Status {
    if (table == nullptr) return absl::InvalidArgumentError("table is NULL");
    const seq::LearnedPositionTable& t = table->impl;
    absl::StatusOr<TensorView> p = ViewTensor(positions, "positions", 1, kInt);
    if (!p.ok()) return p.status();
    absl::StatusOr<TensorView> gv = ViewBatch(grad_out, "grad_out", *p, t.dim());
    if (!gv.ok()) return gv.status();
    absl::StatusOr<TensorView> gt = ViewTensor(grad_table, "grad_table", 2, kFloat);
    if (!gt.ok()) return gt.status();
    if (gt->shape[0] != t.max_positions() || gt->shape[1] != t.dim()) {
      return absl::InvalidArgumentError(absl::StrCat("grad_table must have shape [",
                                                     t.max_positions(), ", ", t.dim(),
                                                     "]; got ", Shape(*gt)));
    }
    if (absl::Status s = CheckNoSelfOverlap(*gt, "grad_table"); !s.ok()) return s;
    const NamedView views[] = {{&*p, "positions"}, {&*gv, "grad_out"}, {&*gt, "grad_table"}};
    if (absl::Status s = CheckDisjoint(views); !s.ok()) return s;
    if (p->shape[0] == 0) return absl::OkStatus();
    std::vector<int64_t> pstore;
    absl::Span<const int64_t> ps = ContiguousPositions(*p, &pstore);
    // The library accumulates into a float64 table (validating every position first);
    // only the rows it touched are then added into the caller's grad_table.
    seq::RowMatrixXd acc = seq::RowMatrixXd::Zero(t.max_positions(), t.dim());
    auto run = [&](auto zero) -> absl::Status {
      using T = decltype(zero);
      std::vector<T> buf;
      int64_t stride = 0;
      const T* rows = RowsOf<T>(*gv, true, &buf, &stride);
      return t.Backward<T>(ps, rows, stride, &acc);
    };
    if (absl::Status s = gv->dtype == DType::kFloat32 ? run(0.0f) : run(0.0); !s.ok()) return s;
    std::vector<char> touched(static_cast<size_t>(t.max_positions()), 0);
    for (int64_t q : ps) touched[q] = 1;  // in range: Backward validated every position
    if (gt->dtype == DType::kFloat32) {
      AddRows<float>(acc, touched, *gt);
    } else {
      AddRows<double>(acc, touched, *gt);
    }
    return absl::OkStatus();
  });
}

// ---- GRAPE-M ---------------------------------------------------------------------------

gpe_status gpe_grape_m_create(const gpe_grape_m_options* options, gpe_grape_m** out) {
  return Guard([&]() -> absl::Status {
    if (absl::Status s =
            CheckCreate(out, options, offsetof(gpe_grape_m_options, omega) + sizeof(void*),
                        "gpe_grape_m_options");
        !s.ok()) {
      return s;
    }
    const gpe_grape_m_options& o = *options;
    if (absl::Status s = CheckDim(o.dim, "dim"); !s.ok()) return s;
    if (o.num_generators < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("num_generators must be >= 1; got ", o.num_generators));
    }
    // m * dim parameters each for a and b: bounded like a dense dim x dim matrix.
    if (o.num_generators > gpe::c_api::kMaxDim) {
      return absl::OutOfRangeError(absl::StrCat("num_generators is ", o.num_generators,
                                                "; at most ", gpe::c_api::kMaxDim,
                                                " is supported"));
    }
    if (o.a == nullptr) return absl::InvalidArgumentError("a is NULL");
    if (o.b == nullptr) return absl::InvalidArgumentError("b is NULL");
    if (o.omega == nullptr) return absl::InvalidArgumentError("omega is NULL");
    const int64_t m = o.num_generators, d = o.dim;
    if (absl::Status s = CheckFinite(o.a, m * d, "a"); !s.ok()) return s;
    if (absl::Status s = CheckFinite(o.b, m * d, "b"); !s.ok()) return s;
    if (absl::Status s = CheckFinite(o.omega, m, "omega"); !s.ok()) return s;
    std::vector<seq::Rank2Generator> gens(static_cast<size_t>(m));
    for (int64_t k = 0; k < m; ++k) {
      gens[k].a.assign(o.a + k * d, o.a + (k + 1) * d);
      gens[k].b.assign(o.b + k * d, o.b + (k + 1) * d);
      gens[k].omega = o.omega[k];
    }
    absl::StatusOr<seq::GrapeMProduct> g = seq::GrapeMProduct::Create(std::move(gens));
    if (!g.ok()) return g.status();
    *out = new gpe_grape_m{std::move(*g)};
    return absl::OkStatus();
  });
}

void gpe_grape_m_destroy(gpe_grape_m* grape) { delete grape; }

gpe_status gpe_grape_m_shape(const gpe_grape_m* grape, int64_t* dim, int64_t* num_generators) {
  return Guard([&]() -> absl::Status {
    if (grape == nullptr) return absl::InvalidArgumentError("grape is NULL");
    if (dim == nullptr) return absl::InvalidArgumentError("dim is NULL");
    if (num_generators == nullptr) return absl::InvalidArgumentError("num_generators is NULL");
    *dim = grape->impl.dim();
    *num_generators = grape->impl.num_generators();
    return absl::OkStatus();
  });
}

gpe_status gpe_grape_m_apply(const gpe_grape_m* grape, const DLTensor* positions,
                             const DLTensor* x, DLTensor* out) {
  return Guard([&]() -> absl::Status {
    if (grape == nullptr) return absl::InvalidArgumentError("grape is NULL");
    absl::StatusOr<ApplyViews> v = ViewApply(positions, x, out, grape->impl.dim());
    if (!v.ok()) return v.status();
    return ApplyAny(grape->impl, *v);
  });
}

gpe_status gpe_grape_m_matrix(const gpe_grape_m* grape, int64_t position, DLTensor* out) {
  return Guard([&]() -> absl::Status {
    if (grape == nullptr) return absl::InvalidArgumentError("grape is NULL");
    absl::StatusOr<TensorView> ov = ViewSquare(out, grape->impl.dim());
    if (!ov.ok()) return ov.status();
    WriteMatrix(grape->impl.Matrix(position), *ov);
    return absl::OkStatus();
  });
}

gpe_status gpe_grape_m_backward(const gpe_grape_m* grape, const DLTensor* positions,
                                const DLTensor* x, const DLTensor* grad_out, DLTensor* grad_x,
                                DLTensor* grad_a, DLTensor* grad_b, DLTensor* grad_omega) {
  return Guard([&]() -> absl::Status {
    if (grape == nullptr) return absl::InvalidArgumentError("grape is NULL");
    const int64_t d = grape->impl.dim(), m = grape->impl.num_generators();
    absl::StatusOr<BackwardViews> v = ViewBackward(positions, x, grad_out, grad_x, d);
    if (!v.ok()) return v.status();
    TensorView ga, gb, gw;
    bool has_a = false, has_b = false, has_w = false;
    if (absl::Status s = ViewParamGrad(grad_a, "grad_a", {m, d}, &ga, &has_a); !s.ok()) return s;
    if (absl::Status s = ViewParamGrad(grad_b, "grad_b", {m, d}, &gb, &has_b); !s.ok()) return s;
    if (absl::Status s = ViewParamGrad(grad_omega, "grad_omega", {m}, &gw, &has_w); !s.ok()) {
      return s;
    }
    const NamedView views[] = {{&v->p, "positions"},
                               {&v->x, "x"},
                               {&v->grad_out, "grad_out"},
                               {has_a ? &ga : nullptr, "grad_a"},
                               {has_b ? &gb : nullptr, "grad_b"},
                               {has_w ? &gw : nullptr, "grad_omega"},
                               {v->has_grad_x ? &v->grad_x : nullptr, "grad_x"}};
    // Parameter gradients must be disjoint from everything; the grad_x rules were
    // checked in ViewBackward (positions may alias nothing written either).
    for (size_t i = 3; i < 6; ++i) {
      for (size_t j = 0; j < 7; ++j) {
        if (j == i) continue;
        const NamedView pair[] = {views[j], views[i]};
        if (absl::Status s = CheckDisjoint(pair); !s.ok()) return s;
      }
    }
    seq::GrapeMProduct::Gradients grads;
    absl::Status s = v->x.dtype == DType::kFloat32
                         ? BackwardTyped<float>(grape->impl, *v, &grads)
                         : BackwardTyped<double>(grape->impl, *v, &grads);
    if (!s.ok()) return s;
    for (int64_t k = 0; k < m; ++k) {
      const auto& g = grads.generators[k];
      for (int64_t i = 0; i < d; ++i) {
        if (has_a) ga.typed<double>()[k * ga.strides[0] + i * ga.strides[1]] = g.a[i];
        if (has_b) gb.typed<double>()[k * gb.strides[0] + i * gb.strides[1]] = g.b[i];
      }
      if (has_w) gw.typed<double>()[k * gw.strides[0]] = g.omega;
    }
    return absl::OkStatus();
  });
}

// ---- Algebraic sequence ------------------------------------------------------------------

gpe_status gpe_algebraic_sequence_create(const gpe_algebraic_sequence_options* options,
                                         gpe_algebraic_sequence** out) {
  return Guard([&]() -> absl::Status {
    if (absl::Status s = CheckCreate(out, options,
                                     offsetof(gpe_algebraic_sequence_options, skew) + sizeof(void*),
                                     "gpe_algebraic_sequence_options");
        !s.ok()) {
      return s;
    }
    const gpe_algebraic_sequence_options& o = *options;
    // The Schur decomposition is O(dim^3): a far smaller bound than kMaxDim.
    constexpr int64_t kMaxSkewDim = 4096;
    if (absl::Status s = CheckDim(o.dim, "dim", 1); !s.ok()) return s;
    if (o.dim > kMaxSkewDim) {
      return absl::OutOfRangeError(
          absl::StrCat("dim is ", o.dim, "; at most ", kMaxSkewDim, " is supported"));
    }
    if (o.skew == nullptr) return absl::InvalidArgumentError("skew is NULL");
    const int64_t d = o.dim;
    if (absl::Status s = CheckFinite(o.skew, d * d, "skew"); !s.ok()) return s;
    Eigen::MatrixXd s(d, d);
    double max_abs = 0.0;
    for (int64_t i = 0; i < d; ++i) {
      for (int64_t j = 0; j < d; ++j) {
        s(i, j) = o.skew[i * d + j];
        max_abs = std::max(max_abs, std::abs(s(i, j)));
      }
    }
    // group::ValidateSkew's rule, restated here to name the offending entry.
    const double tol = 1e-12 * std::max(1.0, max_abs);
    for (int64_t i = 0; i < d; ++i) {
      for (int64_t j = i; j < d; ++j) {
        if (std::abs(s(i, j) + s(j, i)) > tol) {
          return absl::InvalidArgumentError(absl::StrCat(
              "skew is not skew-symmetric: skew[", i, ", ", j, "] + skew[", j, ", ", i,
              "] = ", s(i, j) + s(j, i), " (tolerance ", tol, ")"));
        }
      }
    }
    absl::StatusOr<seq::AlgebraicSequence> a = seq::AlgebraicSequence::Create(s);
    if (!a.ok()) return a.status();
    *out = new gpe_algebraic_sequence{std::move(*a)};
    return absl::OkStatus();
  });
}

void gpe_algebraic_sequence_destroy(gpe_algebraic_sequence* seq) { delete seq; }

gpe_status gpe_algebraic_sequence_dim(const gpe_algebraic_sequence* seq, int64_t* dim) {
  return Guard([&]() -> absl::Status {
    if (seq == nullptr) return absl::InvalidArgumentError("seq is NULL");
    if (dim == nullptr) return absl::InvalidArgumentError("dim is NULL");
    *dim = seq->impl.dim();
    return absl::OkStatus();
  });
}

gpe_status gpe_algebraic_sequence_apply(const gpe_algebraic_sequence* seq,
                                        const DLTensor* positions, const DLTensor* x,
                                        DLTensor* out) {
  return Guard([&]() -> absl::Status {
    if (seq == nullptr) return absl::InvalidArgumentError("seq is NULL");
    absl::StatusOr<ApplyViews> v = ViewApply(positions, x, out, seq->impl.dim());
    if (!v.ok()) return v.status();
    return ApplyAny(seq->impl, *v);
  });
}

gpe_status gpe_algebraic_sequence_matrix(const gpe_algebraic_sequence* seq, int64_t position,
                                         DLTensor* out) {
  return Guard([&]() -> absl::Status {
    if (seq == nullptr) return absl::InvalidArgumentError("seq is NULL");
    absl::StatusOr<TensorView> ov = ViewSquare(out, seq->impl.dim());
    if (!ov.ok()) return ov.status();
    WriteMatrix(seq->impl.Matrix(position), *ov);
    return absl::OkStatus();
  });
}

gpe_status gpe_algebraic_sequence_backward(const gpe_algebraic_sequence* seq,
                                           const DLTensor* positions, const DLTensor* x,
                                           const DLTensor* grad_out, DLTensor* grad_x,
                                           DLTensor* grad_skew) {
  return Guard([&]() -> absl::Status {
    if (seq == nullptr) return absl::InvalidArgumentError("seq is NULL");
    const int64_t d = seq->impl.dim();
    absl::StatusOr<BackwardViews> v = ViewBackward(positions, x, grad_out, grad_x, d);
    if (!v.ok()) return v.status();
    TensorView gs;
    bool has_s = false;
    if (absl::Status s = ViewParamGrad(grad_skew, "grad_skew", {d, d}, &gs, &has_s); !s.ok()) {
      return s;
    }
    if (has_s) {
      const NamedView views[] = {{&v->p, "positions"},
                                 {&v->x, "x"},
                                 {&v->grad_out, "grad_out"},
                                 {v->has_grad_x ? &v->grad_x : nullptr, "grad_x"}};
      for (const NamedView& other : views) {
        const NamedView pair[] = {other, {&gs, "grad_skew"}};
        if (absl::Status s = CheckDisjoint(pair); !s.ok()) return s;
      }
    }
    Eigen::MatrixXd g;
    absl::Status s = v->x.dtype == DType::kFloat32 ? BackwardTyped<float>(seq->impl, *v, &g)
                                                   : BackwardTyped<double>(seq->impl, *v, &g);
    if (!s.ok()) return s;
    if (has_s) WriteMatrix(g, gs);
    return absl::OkStatus();
  });
}

// ---- Shaw relative key scores --------------------------------------------------------

gpe_status gpe_shaw_key_scores(const DLTensor* q, const DLTensor* label_table,
                               const DLTensor* query_positions, const DLTensor* key_positions,
                               DLTensor* scores) {
  return Guard([&]() -> absl::Status {
    absl::StatusOr<ShawInputs> in = ViewShaw(q, label_table, query_positions, key_positions);
    if (!in.ok()) return in.status();
    absl::StatusOr<TensorView> sv = ViewTensor(scores, "scores", 2, kFloat);
    if (!sv.ok()) return sv.status();
    if (sv->shape[0] != in->qp.shape[0] || sv->shape[1] != in->kp.shape[0]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "scores must have shape [", in->qp.shape[0], ", ", in->kp.shape[0],
          "] (query_positions, key_positions); got ", Shape(*sv)));
    }
    if (absl::Status s = CheckNoSelfOverlap(*sv, "scores"); !s.ok()) return s;
    const NamedView views[] = {{&in->q, "q"},
                               {&in->table, "label_table"},
                               {&in->qp, "query_positions"},
                               {&in->kp, "key_positions"}};
    for (const NamedView& other : views) {
      const NamedView pair[] = {other, {&*sv, "scores"}};
      if (absl::Status s = CheckDisjoint(pair); !s.ok()) return s;
    }
    absl::StatusOr<seq::ShawRelative> shaw = MakeShaw(*in);
    if (!shaw.ok()) return shaw.status();
    std::vector<int64_t> qs, ks;
    absl::StatusOr<seq::RowMatrixXd> out = shaw->KeyScores(
        ReadMatrix(in->q), ContiguousPositions(in->qp, &qs), ContiguousPositions(in->kp, &ks));
    if (!out.ok()) return out.status();
    StoreMatrix(*out, *sv, /*add=*/false);
    return absl::OkStatus();
  });
}

gpe_status gpe_shaw_key_scores_backward(const DLTensor* q, const DLTensor* label_table,
                                        const DLTensor* query_positions,
                                        const DLTensor* key_positions,
                                        const DLTensor* grad_scores, DLTensor* grad_q,
                                        DLTensor* grad_label_table) {
  return Guard([&]() -> absl::Status {
    absl::StatusOr<ShawInputs> in = ViewShaw(q, label_table, query_positions, key_positions);
    if (!in.ok()) return in.status();
    absl::StatusOr<TensorView> gv = ViewTensor(grad_scores, "grad_scores", 2, kFloat);
    if (!gv.ok()) return gv.status();
    if (gv->shape[0] != in->qp.shape[0] || gv->shape[1] != in->kp.shape[0]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "grad_scores must have shape [", in->qp.shape[0], ", ", in->kp.shape[0],
          "] (query_positions, key_positions); got ", Shape(*gv)));
    }
    TensorView gq, gt;
    if (grad_q != nullptr) {
      absl::StatusOr<TensorView> v = ViewTensor(grad_q, "grad_q", 2, kFloat);
      if (!v.ok()) return v.status();
      if (v->shape != in->q.shape) {
        return absl::InvalidArgumentError(
            absl::StrCat("grad_q must have q's shape ", Shape(in->q), "; got ", Shape(*v)));
      }
      if (absl::Status s = CheckNoSelfOverlap(*v, "grad_q"); !s.ok()) return s;
      gq = std::move(*v);
    }
    if (grad_label_table != nullptr) {
      absl::StatusOr<TensorView> v = ViewTensor(grad_label_table, "grad_label_table", 2, kFloat);
      if (!v.ok()) return v.status();
      if (v->shape != in->table.shape) {
        return absl::InvalidArgumentError(absl::StrCat(
            "grad_label_table must have label_table's shape ", Shape(in->table), "; got ",
            Shape(*v)));
      }
      if (absl::Status s = CheckNoSelfOverlap(*v, "grad_label_table"); !s.ok()) return s;
      gt = std::move(*v);
    }
    const NamedView views[] = {{&in->q, "q"},
                               {&in->table, "label_table"},
                               {&in->qp, "query_positions"},
                               {&in->kp, "key_positions"},
                               {&*gv, "grad_scores"},
                               {grad_q != nullptr ? &gq : nullptr, "grad_q"},
                               {grad_label_table != nullptr ? &gt : nullptr, "grad_label_table"}};
    for (size_t i = 5; i < 7; ++i) {
      for (size_t j = 0; j < i; ++j) {
        const NamedView pair[] = {views[j], views[i]};
        if (absl::Status s = CheckDisjoint(pair); !s.ok()) return s;
      }
    }
    absl::StatusOr<seq::ShawRelative> shaw = MakeShaw(*in);
    if (!shaw.ok()) return shaw.status();
    std::vector<int64_t> qs, ks;
    seq::RowMatrixXd dq, dt;
    if (grad_label_table != nullptr) dt.setZero(in->table.shape[0], in->table.shape[1]);
    if (absl::Status s = shaw->KeyScoresBackward(
            ReadMatrix(in->q), ContiguousPositions(in->qp, &qs), ContiguousPositions(in->kp, &ks),
            ReadMatrix(*gv), grad_q != nullptr ? &dq : nullptr,
            grad_label_table != nullptr ? &dt : nullptr);
        !s.ok()) {
      return s;
    }
    if (grad_q != nullptr) StoreMatrix(dq, gq, /*add=*/false);
    if (grad_label_table != nullptr) StoreMatrix(dt, gt, /*add=*/true);
    return absl::OkStatus();
  });
}

}  // extern "C"

// ---- Algebraic trees, grids, periodic domains, locality --------------------------------

namespace {

constexpr int64_t kMaxAlgebraicDim = 4096;  // Schur / Frechet work is O(d^3)

// A d x d skew matrix from row-major doubles, named `name` in messages.
absl::StatusOr<Eigen::MatrixXd> ReadSkew(const double* p, int64_t d, const std::string& name) {
  if (absl::Status s = CheckFinite(p, d * d, name.c_str()); !s.ok()) return s;
  Eigen::MatrixXd m(d, d);
  double max_abs = 0.0;
  for (int64_t i = 0; i < d; ++i) {
    for (int64_t j = 0; j < d; ++j) {
      m(i, j) = p[i * d + j];
      max_abs = std::max(max_abs, std::abs(m(i, j)));
    }
  }
  const double tol = 1e-12 * std::max(1.0, max_abs);  // group::ValidateSkew's rule
  for (int64_t i = 0; i < d; ++i) {
    for (int64_t j = i; j < d; ++j) {
      if (std::abs(m(i, j) + m(j, i)) > tol) {
        return absl::InvalidArgumentError(absl::StrCat(
            name, " is not skew-symmetric: entry [", i, ", ", j, "] + [", j, ", ", i,
            "] = ", m(i, j) + m(j, i), " (tolerance ", tol, ")"));
      }
    }
  }
  return m;
}

// Validated views of an apply or backward call whose per-row index is a 2-D int64
// tensor [N, cols] (tree addresses, grid coordinates): x and out (or grad_out and
// grad_x) [N, dim] with the usual rules.
struct RowIndexViews {
  TensorView index{}, x{}, out{}, grad_out{};
  bool has_out = false;
};
absl::StatusOr<RowIndexViews> ViewRowIndex(const DLTensor* index, const char* index_name,
                                           int64_t cols, const DLTensor* x, int64_t dim) {
  RowIndexViews v{};
  absl::StatusOr<TensorView> iv = ViewTensor(index, index_name, 2, kInt);
  if (!iv.ok()) return iv.status();
  v.index = std::move(*iv);
  if (cols >= 0 && v.index.shape[1] != cols) {
    return absl::InvalidArgumentError(absl::StrCat(index_name, " must have ", cols,
                                                   " columns; got ", Shape(v.index)));
  }
  absl::StatusOr<TensorView> xv = ViewRows(x, "x", v.index.shape[0], dim);
  if (!xv.ok()) return xv.status();
  v.x = std::move(*xv);
  return v;
}

// The apply output: x's dtype and shape, x itself or disjoint from x and the index.
absl::Status ViewApplyOut(DLTensor* out, RowIndexViews* v, const char* index_name) {
  absl::StatusOr<TensorView> ov = ViewTensor(out, "out", 2, kFloat);
  if (!ov.ok()) return ov.status();
  if (absl::Status s = CheckLike(*ov, "out", v->x, "x"); !s.ok()) return s;
  if (absl::Status s = CheckNoSelfOverlap(*ov, "out"); !s.ok()) return s;
  if (!gpe::c_api::SameLayout(v->x, *ov) && gpe::c_api::Overlaps(v->x, *ov)) {
    return absl::InvalidArgumentError(
        "out overlaps x without being x itself: pass out = x for in place, or disjoint memory");
  }
  if (gpe::c_api::Overlaps(v->index, *ov)) {
    return absl::InvalidArgumentError(absl::StrCat("out overlaps ", index_name));
  }
  v->out = std::move(*ov);
  v->has_out = true;
  return absl::OkStatus();
}

// grad_out like x; grad_x (optional) like x, grad_out itself or disjoint from everything.
absl::Status ViewBackwardGrads(const DLTensor* grad_out, DLTensor* grad_x, RowIndexViews* v) {
  absl::StatusOr<TensorView> gv = ViewTensor(grad_out, "grad_out", 2, kFloat);
  if (!gv.ok()) return gv.status();
  if (absl::Status s = CheckLike(*gv, "grad_out", v->x, "x"); !s.ok()) return s;
  v->grad_out = std::move(*gv);
  if (grad_x == nullptr) return absl::OkStatus();
  absl::StatusOr<TensorView> gx = ViewTensor(grad_x, "grad_x", 2, kFloat);
  if (!gx.ok()) return gx.status();
  if (absl::Status s = CheckLike(*gx, "grad_x", v->x, "x"); !s.ok()) return s;
  if (absl::Status s = CheckNoSelfOverlap(*gx, "grad_x"); !s.ok()) return s;
  if (gpe::c_api::Overlaps(*gx, v->x) || gpe::c_api::Overlaps(*gx, v->index)) {
    return absl::InvalidArgumentError("grad_x overlaps x or the positions; pass disjoint memory");
  }
  if (!gpe::c_api::SameLayout(*gx, v->grad_out) && gpe::c_api::Overlaps(*gx, v->grad_out)) {
    return absl::InvalidArgumentError(
        "grad_x overlaps grad_out without being grad_out itself: pass grad_x = grad_out for "
        "in place, or disjoint memory");
  }
  v->out = std::move(*gx);  // the backward's output
  v->has_out = true;
  return absl::OkStatus();
}

int64_t IndexAt(const TensorView& v, int64_t r, int64_t c) {
  return v.typed<const int64_t>()[r * v.strides[0] + c * v.strides[1]];
}

// Tree addresses from int64 [N, L] rows padded with -1.
absl::StatusOr<std::vector<seq::AlgebraicTree::Address>> ReadAddresses(const TensorView& v,
                                                                       int64_t branches) {
  std::vector<seq::AlgebraicTree::Address> out(static_cast<size_t>(v.shape[0]));
  for (int64_t r = 0; r < v.shape[0]; ++r) {
    bool ended = false;
    for (int64_t c = 0; c < v.shape[1]; ++c) {
      const int64_t b = IndexAt(v, r, c);
      if (b == -1) {
        ended = true;
        continue;
      }
      if (ended || b < 0 || b >= branches) {
        return absl::InvalidArgumentError(absl::StrCat(
            "addresses[", r, ", ", c, "] = ", b, ": entries must be child indices in [0, ",
            branches, ") followed only by -1 padding"));
      }
      out[r].push_back(b);
    }
  }
  return out;
}

// Runs fn(in, in_stride, out, out_stride) on T rows of x (and writes v.out), or, for a
// backward, fn(in, in_stride, grad_out, grad_out_stride, grad_x, grad_x_stride).
template <class T, class Fn>
absl::Status ApplyRowsTyped(const RowIndexViews& v, Fn fn) {
  if (v.x.shape[0] == 0) return fn(static_cast<T*>(nullptr), int64_t{1}, static_cast<T*>(nullptr),
                                   int64_t{1});
  return OnRows<T>(v.x, v.out, fn);
}

template <class T, class Fn>
absl::Status BackwardRowsTyped(const RowIndexViews& v, Fn fn) {
  return OnBackwardRows<T>(v.x, v.grad_out, v.has_out ? &v.out : nullptr,
                           /*unset_stride=*/v.x.shape[1], fn);
}

// A float64 gradient of exactly `shape`, disjoint from every view of the call.
absl::Status ViewSkewGrad(DLTensor* t, std::vector<int64_t> shape, const RowIndexViews& v,
                          TensorView* out, bool* present) {
  if (absl::Status s = ViewParamGrad(t, "grad_skews", std::move(shape), out, present); !s.ok()) {
    return s;
  }
  if (!*present) return absl::OkStatus();
  const NamedView views[] = {{&v.index, "positions"},
                             {&v.x, "x"},
                             {&v.grad_out, "grad_out"},
                             {v.has_out ? &v.out : nullptr, "grad_x"}};
  for (const NamedView& other : views) {
    const NamedView pair[] = {other, {out, "grad_skews"}};
    if (absl::Status s = CheckDisjoint(pair); !s.ok()) return s;
  }
  return absl::OkStatus();
}

// Writes consecutive d x d matrices into a float64 view of any rank (row-major element
// order of the view).
void WriteFlat(const std::vector<Eigen::MatrixXd>& ms, const TensorView& v) {
  std::vector<double> flat;
  for (const Eigen::MatrixXd& m : ms) {
    for (int64_t i = 0; i < m.rows(); ++i) {
      for (int64_t j = 0; j < m.cols(); ++j) flat.push_back(m(i, j));
    }
  }
  const size_t nd = v.shape.size();
  std::vector<int64_t> idx(nd, 0);
  double* base = v.typed<double>();
  for (double value : flat) {
    int64_t off = 0;
    for (size_t d = 0; d < nd; ++d) off += idx[d] * v.strides[d];
    base[off] = value;
    for (size_t d = nd; d-- > 0;) {
      if (++idx[d] < v.shape[d]) break;
      idx[d] = 0;
    }
  }
}

}  // namespace

extern "C" {

gpe_status gpe_algebraic_tree_create(const gpe_algebraic_tree_options* options,
                                     gpe_algebraic_tree** out) {
  return Guard([&]() -> absl::Status {
    if (absl::Status s = CheckCreate(out, options, sizeof(gpe_algebraic_tree_options),
                                     "gpe_algebraic_tree_options");
        !s.ok()) {
      return s;
    }
    const gpe_algebraic_tree_options& o = *options;
    if (o.dim < 1 || o.dim > kMaxAlgebraicDim) {
      return absl::InvalidArgumentError(
          absl::StrCat("dim must be in [1, ", kMaxAlgebraicDim, "]; got ", o.dim));
    }
    if (o.num_branches < 1 || o.num_branches > 1024) {
      return absl::InvalidArgumentError(
          absl::StrCat("num_branches must be in [1, 1024]; got ", o.num_branches));
    }
    if (o.skews == nullptr) return absl::InvalidArgumentError("skews is NULL");
    std::vector<Eigen::MatrixXd> skews;
    for (int64_t c = 0; c < o.num_branches; ++c) {
      absl::StatusOr<Eigen::MatrixXd> m =
          ReadSkew(o.skews + c * o.dim * o.dim, o.dim, absl::StrCat("skews[", c, "]"));
      if (!m.ok()) return m.status();
      skews.push_back(*std::move(m));
    }
    absl::StatusOr<seq::AlgebraicTree> t = seq::AlgebraicTree::Create(skews);
    if (!t.ok()) return t.status();
    *out = new gpe_algebraic_tree{std::move(*t)};
    return absl::OkStatus();
  });
}

void gpe_algebraic_tree_destroy(gpe_algebraic_tree* tree) { delete tree; }

gpe_status gpe_algebraic_tree_shape(const gpe_algebraic_tree* tree, int64_t* dim,
                                    int64_t* num_branches) {
  return Guard([&]() -> absl::Status {
    if (tree == nullptr) return absl::InvalidArgumentError("tree is NULL");
    if (dim != nullptr) *dim = tree->impl.dim();
    if (num_branches != nullptr) *num_branches = tree->impl.branching();
    return absl::OkStatus();
  });
}

gpe_status gpe_algebraic_tree_apply(const gpe_algebraic_tree* tree, const DLTensor* addresses,
                                    const DLTensor* x, DLTensor* out) {
  return Guard([&]() -> absl::Status {
    if (tree == nullptr) return absl::InvalidArgumentError("tree is NULL");
    absl::StatusOr<RowIndexViews> v = ViewRowIndex(addresses, "addresses", -1, x, tree->impl.dim());
    if (!v.ok()) return v.status();
    if (absl::Status s = ViewApplyOut(out, &*v, "addresses"); !s.ok()) return s;
    absl::StatusOr<std::vector<seq::AlgebraicTree::Address>> a =
        ReadAddresses(v->index, tree->impl.branching());
    if (!a.ok()) return a.status();
    auto run = [&](auto tag) {
      using T = decltype(tag);
      return ApplyRowsTyped<T>(*v, [&](T* in, int64_t ist, T* dst, int64_t ost) {
        return tree->impl.Apply<T>(*a, in, ist, dst, ost);
      });
    };
    return v->x.dtype == DType::kFloat32 ? run(float{}) : run(double{});
  });
}

gpe_status gpe_algebraic_tree_matrix(const gpe_algebraic_tree* tree, const int64_t* address,
                                     int64_t depth, DLTensor* out) {
  return Guard([&]() -> absl::Status {
    if (tree == nullptr) return absl::InvalidArgumentError("tree is NULL");
    if (depth < 0 || depth > (int64_t{1} << 20)) {
      return absl::InvalidArgumentError(absl::StrCat("depth must be in [0, 2^20]; got ", depth));
    }
    if (depth > 0 && address == nullptr) return absl::InvalidArgumentError("address is NULL");
    absl::StatusOr<TensorView> ov = ViewSquare(out, tree->impl.dim());
    if (!ov.ok()) return ov.status();
    const seq::AlgebraicTree::Address a(address, address + depth);
    absl::StatusOr<Eigen::MatrixXd> m = tree->impl.Matrix(a);
    if (!m.ok()) return m.status();
    WriteMatrix(*m, *ov);
    return absl::OkStatus();
  });
}

gpe_status gpe_algebraic_tree_node_matrices(const gpe_algebraic_tree* tree, int64_t max_depth,
                                            DLTensor* out) {
  return Guard([&]() -> absl::Status {
    if (tree == nullptr) return absl::InvalidArgumentError("tree is NULL");
    absl::StatusOr<TensorView> ov = ViewTensor(out, "out", 3, kF64);
    if (!ov.ok()) return ov.status();
    if (absl::Status s = CheckNoSelfOverlap(*ov, "out"); !s.ok()) return s;
    // AllNodeMatrices checks max_depth and the 2^27-double limit before building.
    absl::StatusOr<std::vector<Eigen::MatrixXd>> all = tree->impl.AllNodeMatrices(max_depth);
    if (!all.ok()) return all.status();
    const int64_t d = tree->impl.dim(), count = static_cast<int64_t>(all->size());
    if (ov->shape != std::vector<int64_t>{count, d, d}) {
      return absl::InvalidArgumentError(absl::StrCat("out must have shape [", count, ", ", d, ", ",
                                                     d, "] (nodes of depth <= ", max_depth,
                                                     "); got ", Shape(*ov)));
    }
    WriteFlat(*all, *ov);
    return absl::OkStatus();
  });
}

gpe_status gpe_algebraic_tree_backward(const gpe_algebraic_tree* tree, const DLTensor* addresses,
                                       const DLTensor* x, const DLTensor* grad_out,
                                       DLTensor* grad_x, DLTensor* grad_skews) {
  return Guard([&]() -> absl::Status {
    if (tree == nullptr) return absl::InvalidArgumentError("tree is NULL");
    const int64_t d = tree->impl.dim(), k = tree->impl.branching();
    absl::StatusOr<RowIndexViews> v = ViewRowIndex(addresses, "addresses", -1, x, d);
    if (!v.ok()) return v.status();
    if (absl::Status s = ViewBackwardGrads(grad_out, grad_x, &*v); !s.ok()) return s;
    TensorView gs{};
    bool has_s = false;
    if (absl::Status s = ViewSkewGrad(grad_skews, {k, d, d}, *v, &gs, &has_s); !s.ok()) return s;
    absl::StatusOr<std::vector<seq::AlgebraicTree::Address>> a = ReadAddresses(v->index, k);
    if (!a.ok()) return a.status();
    std::vector<Eigen::MatrixXd> g;
    auto run = [&](auto tag) {
      using T = decltype(tag);
      return BackwardRowsTyped<T>(*v, [&](T* in, int64_t ist, T* go, int64_t gst, T* gx,
                                          int64_t gxst) {
        return tree->impl.Backward<T>(*a, in, ist, go, gst, gx, gxst, &g);
      });
    };
    absl::Status s = v->x.dtype == DType::kFloat32 ? run(float{}) : run(double{});
    if (!s.ok()) return s;
    if (has_s) WriteFlat(g, gs);
    return absl::OkStatus();
  });
}

gpe_status gpe_algebraic_grid_create(const gpe_algebraic_grid_options* options,
                                     gpe_algebraic_grid** out) {
  return Guard([&]() -> absl::Status {
    if (absl::Status s = CheckCreate(out, options, sizeof(gpe_algebraic_grid_options),
                                     "gpe_algebraic_grid_options");
        !s.ok()) {
      return s;
    }
    const gpe_algebraic_grid_options& o = *options;
    if (o.num_axes < 1 || o.num_axes > 8) {
      return absl::InvalidArgumentError(
          absl::StrCat("num_axes must be in [1, 8]; got ", o.num_axes));
    }
    if (o.dims == nullptr || o.skews == nullptr) {
      return absl::InvalidArgumentError("dims and skews must not be NULL");
    }
    std::vector<seq::AlgebraicSequence> axes;
    int64_t offset = 0;
    for (int64_t a = 0; a < o.num_axes; ++a) {
      const int64_t da = o.dims[a];
      if (da < 1 || da > kMaxAlgebraicDim) {
        return absl::InvalidArgumentError(
            absl::StrCat("dims[", a, "] must be in [1, ", kMaxAlgebraicDim, "]; got ", da));
      }
      absl::StatusOr<Eigen::MatrixXd> m =
          ReadSkew(o.skews + offset, da, absl::StrCat("skew of axis ", a));
      if (!m.ok()) return m.status();
      offset += da * da;
      absl::StatusOr<seq::AlgebraicSequence> s = seq::AlgebraicSequence::Create(*m);
      if (!s.ok()) return s.status();
      axes.push_back(*std::move(s));
    }
    *out = new gpe_algebraic_grid{std::move(axes)};
    return absl::OkStatus();
  });
}

void gpe_algebraic_grid_destroy(gpe_algebraic_grid* grid) { delete grid; }

gpe_status gpe_algebraic_grid_shape(const gpe_algebraic_grid* grid, int64_t* dim,
                                    int64_t* num_axes) {
  return Guard([&]() -> absl::Status {
    if (grid == nullptr) return absl::InvalidArgumentError("grid is NULL");
    if (dim != nullptr) *dim = grid->dim();
    if (num_axes != nullptr) *num_axes = static_cast<int64_t>(grid->axes.size());
    return absl::OkStatus();
  });
}

gpe_status gpe_algebraic_grid_apply(const gpe_algebraic_grid* grid, const DLTensor* positions,
                                    const DLTensor* x, DLTensor* out) {
  return Guard([&]() -> absl::Status {
    if (grid == nullptr) return absl::InvalidArgumentError("grid is NULL");
    const int64_t axes = static_cast<int64_t>(grid->axes.size());
    absl::StatusOr<RowIndexViews> v = ViewRowIndex(positions, "positions", axes, x, grid->dim());
    if (!v.ok()) return v.status();
    if (absl::Status s = ViewApplyOut(out, &*v, "positions"); !s.ok()) return s;
    const int64_t n = v->index.shape[0];
    auto run = [&](auto tag) {
      using T = decltype(tag);
      return ApplyRowsTyped<T>(*v, [&](T* in, int64_t ist, T* dst, int64_t ost) {
        // blockdiag(W_a^{p_a}): each axis transforms its own block of coordinates.
        std::vector<int64_t> p(static_cast<size_t>(n));
        int64_t offset = 0;
        for (int64_t a = 0; a < axes; ++a) {
          for (int64_t r = 0; r < n; ++r) p[r] = IndexAt(v->index, r, a);
          if (n > 0) {
            absl::Status s = grid->axes[a].Apply<T>(p, in + offset, ist, dst + offset, ost);
            if (!s.ok()) return s;
          }
          offset += grid->axes[a].dim();
        }
        return absl::OkStatus();
      });
    };
    return v->x.dtype == DType::kFloat32 ? run(float{}) : run(double{});
  });
}

gpe_status gpe_algebraic_grid_backward(const gpe_algebraic_grid* grid, const DLTensor* positions,
                                       const DLTensor* x, const DLTensor* grad_out,
                                       DLTensor* grad_x, DLTensor* grad_skews) {
  return Guard([&]() -> absl::Status {
    if (grid == nullptr) return absl::InvalidArgumentError("grid is NULL");
    const int64_t axes = static_cast<int64_t>(grid->axes.size());
    absl::StatusOr<RowIndexViews> v = ViewRowIndex(positions, "positions", axes, x, grid->dim());
    if (!v.ok()) return v.status();
    if (absl::Status s = ViewBackwardGrads(grad_out, grad_x, &*v); !s.ok()) return s;
    int64_t total = 0;
    for (const seq::AlgebraicSequence& a : grid->axes) total += a.dim() * a.dim();
    TensorView gs{};
    bool has_s = false;
    if (absl::Status s = ViewSkewGrad(grad_skews, {total}, *v, &gs, &has_s); !s.ok()) return s;
    const int64_t n = v->index.shape[0];
    std::vector<int64_t> p(static_cast<size_t>(n * axes));
    for (int64_t r = 0; r < n; ++r) {
      for (int64_t a = 0; a < axes; ++a) p[r * axes + a] = IndexAt(v->index, r, a);
    }
    std::vector<Eigen::MatrixXd> g;
    auto run = [&](auto tag) {
      using T = decltype(tag);
      return BackwardRowsTyped<T>(*v, [&](T* in, int64_t ist, T* go, int64_t gst, T* gx,
                                          int64_t gxst) {
        return seq::AlgebraicGridBackward<T>(grid->axes, p, in, ist, go, gst, gx, gxst, &g);
      });
    };
    absl::Status s = v->x.dtype == DType::kFloat32 ? run(float{}) : run(double{});
    if (!s.ok()) return s;
    if (has_s) WriteFlat(g, gs);
    return absl::OkStatus();
  });
}

gpe_status gpe_algebraic_periodic_apply(const gpe_algebraic_periodic_options* options,
                                        const DLTensor* positions, const DLTensor* x,
                                        DLTensor* out) {
  return Guard([&]() -> absl::Status {
    if (options == nullptr) return absl::InvalidArgumentError("options is NULL");
    if (absl::Status s = CheckStructSize(
            options->struct_size, sizeof(gpe_algebraic_periodic_options),
            sizeof(gpe_algebraic_periodic_options), "gpe_algebraic_periodic_options");
        !s.ok()) {
      return s;
    }
    const gpe_algebraic_periodic_options& o = *options;
    if (absl::Status s = CheckDim(o.dim, "dim", 2); !s.ok()) return s;
    if (o.dim % 2 != 0) {
      return absl::InvalidArgumentError(absl::StrCat("dim must be even; got ", o.dim));
    }
    if (o.period < 1) {
      return absl::InvalidArgumentError(absl::StrCat("period must be >= 1; got ", o.period));
    }
    if (o.multipliers == nullptr) return absl::InvalidArgumentError("multipliers is NULL");
    absl::StatusOr<gpe::group::CyclicPlanes> rep = seq::MakeAlgebraicPeriodic(
        o.dim, o.period, std::vector<int64_t>(o.multipliers, o.multipliers + o.dim / 2));
    if (!rep.ok()) return rep.status();
    absl::StatusOr<ApplyViews> v = ViewApply(positions, x, out, o.dim);
    if (!v.ok()) return v.status();
    return ApplyAny(*rep, *v);
  });
}

gpe_status gpe_locality_scale(double c, const DLTensor* q_positions, const DLTensor* k_positions,
                              DLTensor* scores) {
  return Guard([&]() -> absl::Status {
    if (!std::isfinite(c) || c <= 0.0 || c > 1.0) {
      return absl::InvalidArgumentError(absl::StrCat("c must be in (0, 1]; got ", c));
    }
    absl::StatusOr<TensorView> qp = ViewTensor(q_positions, "q_positions", 1, kInt);
    if (!qp.ok()) return qp.status();
    absl::StatusOr<TensorView> kp = ViewTensor(k_positions, "k_positions", 1, kInt);
    if (!kp.ok()) return kp.status();
    absl::StatusOr<TensorView> sv = ViewTensor(scores, "scores", 2, kFloat);
    if (!sv.ok()) return sv.status();
    if (sv->shape[0] != qp->shape[0] || sv->shape[1] != kp->shape[0]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "scores must have shape [", qp->shape[0], ", ", kp->shape[0],
          "] (q_positions, k_positions); got ", Shape(*sv)));
    }
    if (absl::Status s = CheckNoSelfOverlap(*sv, "scores"); !s.ok()) return s;
    const NamedView views[] = {{&*sv, "scores"}, {&*qp, "q_positions"}, {&*kp, "k_positions"}};
    for (size_t i = 1; i < 3; ++i) {
      const NamedView pair[] = {views[0], views[i]};
      if (absl::Status s = CheckDisjoint(pair); !s.ok()) return s;
    }
    if (sv->numel() == 0) return absl::OkStatus();
    std::vector<int64_t> qs, ks;
    const absl::Span<const int64_t> q = ContiguousPositions(*qp, &qs);
    const absl::Span<const int64_t> k = ContiguousPositions(*kp, &ks);
    return WriteRowsAny(*sv, /*gather=*/true, [&](auto* rows, int64_t ld) {
      using T = std::remove_pointer_t<decltype(rows)>;
      return seq::ApplyLocalityScaling<T>(q, k, c, rows, ld);
    });
  });
}

}  // extern "C"

// ---- Shaw value terms and Transformer-XL ----------------------------------------------

namespace {

// Every output disjoint from every input and from the other outputs.
absl::Status CheckOutputs(absl::Span<const NamedView> inputs, absl::Span<const NamedView> outputs) {
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (outputs[i].first == nullptr) continue;
    for (const NamedView& in : inputs) {
      const NamedView pair[] = {in, outputs[i]};
      if (absl::Status s = CheckDisjoint(pair); !s.ok()) return s;
    }
    for (size_t j = 0; j < i; ++j) {
      const NamedView pair[] = {outputs[j], outputs[i]};
      if (absl::Status s = CheckDisjoint(pair); !s.ok()) return s;
    }
  }
  return absl::OkStatus();
}

// A 1-D float view as a double vector.
Eigen::VectorXd ReadVector(const TensorView& v) {
  Eigen::VectorXd out(v.shape[0]);
  for (int64_t i = 0; i < v.shape[0]; ++i) {
    out[i] = v.dtype == DType::kFloat32
                 ? static_cast<double>(v.typed<const float>()[i * v.strides[0]])
                 : v.typed<const double>()[i * v.strides[0]];
  }
  return out;
}
void StoreVector(const Eigen::VectorXd& x, const TensorView& v) {
  for (int64_t i = 0; i < v.shape[0]; ++i) {
    if (v.dtype == DType::kFloat32) {
      v.typed<float>()[i * v.strides[0]] = static_cast<float>(x[i]);
    } else {
      v.typed<double>()[i * v.strides[0]] = x[i];
    }
  }
}

struct ShawValueInputs {
  TensorView p, table, qp, kp;
  int64_t k = 0;
};
absl::StatusOr<ShawValueInputs> ViewShawValue(const DLTensor* probabilities,
                                              const DLTensor* label_table,
                                              const DLTensor* query_positions,
                                              const DLTensor* key_positions) {
  ShawValueInputs in;
  if (absl::Status s = ViewLabelTable(label_table, query_positions, key_positions,
                                      "label_table's second size (dv)", &in);
      !s.ok()) {
    return s;
  }
  absl::StatusOr<TensorView> v =
      ViewShaped(probabilities, "probabilities", {in.qp.shape[0], in.kp.shape[0]});
  if (!v.ok()) return v.status();
  in.p = std::move(*v);
  return in;
}

absl::StatusOr<seq::ShawRelative> MakeShawValue(const ShawValueInputs& in) {
  seq::RowMatrixXd table = ReadMatrix(in.table);
  if (absl::Status s = CheckFiniteMatrix(table, "label_table"); !s.ok()) return s;
  // Only the value side is used here: the key table is a placeholder column.
  return seq::ShawRelative::Create(in.k, seq::RowMatrixXd::Zero(2 * in.k + 1, 1),
                                   std::move(table));
}

struct TxlInputs {
  TensorView q, k, qp, kp, w_r, u, v;
  seq::TransformerXLParams params;
};
absl::StatusOr<TxlInputs> ViewTxl(const gpe_transformer_xl_options* options, const DLTensor* q,
                                  const DLTensor* k, const DLTensor* query_positions,
                                  const DLTensor* key_positions, const DLTensor* w_r,
                                  const DLTensor* u, const DLTensor* v) {
  if (options == nullptr) return absl::InvalidArgumentError("options is NULL");
  if (absl::Status s = CheckStructSize(options->struct_size, sizeof(gpe_transformer_xl_options),
                                       sizeof(gpe_transformer_xl_options),
                                       "gpe_transformer_xl_options");
      !s.ok()) {
    return s;
  }
  if (!std::isfinite(options->base) || options->base <= 0.0) {
    return absl::InvalidArgumentError(
        absl::StrCat("base must be finite and > 0; got ", options->base));
  }
  TxlInputs in;
  absl::StatusOr<TensorView> t = ViewTensor(query_positions, "query_positions", 1, kInt);
  if (!t.ok()) return t.status();
  in.qp = std::move(*t);
  t = ViewTensor(key_positions, "key_positions", 1, kInt);
  if (!t.ok()) return t.status();
  in.kp = std::move(*t);
  t = ViewTensor(w_r, "w_r", 2, kFloat);
  if (!t.ok()) return t.status();
  in.w_r = std::move(*t);
  const int64_t d = in.w_r.shape[0];
  if (absl::Status s = CheckDim(d, "w_r's first size (d)", 1); !s.ok()) return s;
  if (absl::Status s = CheckDim(in.w_r.shape[1], "w_r's second size (d_r)", 1); !s.ok()) return s;
  t = ViewShaped(q, "q", {in.qp.shape[0], d});
  if (!t.ok()) return t.status();
  in.q = std::move(*t);
  t = ViewShaped(k, "k", {in.kp.shape[0], d});
  if (!t.ok()) return t.status();
  in.k = std::move(*t);
  t = ViewShaped(u, "u", {d});
  if (!t.ok()) return t.status();
  in.u = std::move(*t);
  t = ViewShaped(v, "v", {d});
  if (!t.ok()) return t.status();
  in.v = std::move(*t);
  in.params.w_r = ReadMatrix(in.w_r);
  in.params.u = ReadVector(in.u);
  in.params.v = ReadVector(in.v);
  in.params.base = options->base;
  if (absl::Status s = CheckFiniteMatrix(in.params.w_r, "w_r"); !s.ok()) return s;
  if (!in.params.u.allFinite() || !in.params.v.allFinite()) {
    return absl::InvalidArgumentError("u and v must be finite");
  }
  return in;
}

}  // namespace

extern "C" {

gpe_status gpe_shaw_value_output(const DLTensor* probabilities, const DLTensor* label_table,
                                 const DLTensor* query_positions, const DLTensor* key_positions,
                                 DLTensor* out) {
  return Guard([&]() -> absl::Status {
    absl::StatusOr<ShawValueInputs> in =
        ViewShawValue(probabilities, label_table, query_positions, key_positions);
    if (!in.ok()) return in.status();
    if (out == nullptr) return absl::InvalidArgumentError("out is NULL");
    TensorView ov{};
    bool present = false;
    if (absl::Status s = ViewOptionalOut(out, "out", {in->qp.shape[0], in->table.shape[1]}, &ov,
                                         &present);
        !s.ok()) {
      return s;
    }
    const NamedView inputs[] = {{&in->p, "probabilities"},
                                {&in->table, "label_table"},
                                {&in->qp, "query_positions"},
                                {&in->kp, "key_positions"}};
    const NamedView outputs[] = {{&ov, "out"}};
    if (absl::Status s = CheckOutputs(inputs, outputs); !s.ok()) return s;
    absl::StatusOr<seq::ShawRelative> shaw = MakeShawValue(*in);
    if (!shaw.ok()) return shaw.status();
    std::vector<int64_t> qs, ks;
    absl::StatusOr<seq::RowMatrixXd> r = shaw->ValueOutput(
        ReadMatrix(in->p), ContiguousPositions(in->qp, &qs), ContiguousPositions(in->kp, &ks));
    if (!r.ok()) return r.status();
    StoreMatrix(*r, ov, /*add=*/false);
    return absl::OkStatus();
  });
}

gpe_status gpe_shaw_value_output_backward(const DLTensor* probabilities,
                                          const DLTensor* label_table,
                                          const DLTensor* query_positions,
                                          const DLTensor* key_positions,
                                          const DLTensor* grad_out, DLTensor* grad_probabilities,
                                          DLTensor* grad_label_table) {
  return Guard([&]() -> absl::Status {
    absl::StatusOr<ShawValueInputs> in =
        ViewShawValue(probabilities, label_table, query_positions, key_positions);
    if (!in.ok()) return in.status();
    absl::StatusOr<TensorView> gv =
        ViewShaped(grad_out, "grad_out", {in->qp.shape[0], in->table.shape[1]});
    if (!gv.ok()) return gv.status();
    TensorView gp{}, gt{};
    bool has_p = false, has_t = false;
    if (absl::Status s = ViewOptionalOut(grad_probabilities, "grad_probabilities", in->p.shape,
                                         &gp, &has_p);
        !s.ok()) {
      return s;
    }
    if (absl::Status s = ViewOptionalOut(grad_label_table, "grad_label_table", in->table.shape,
                                         &gt, &has_t);
        !s.ok()) {
      return s;
    }
    const NamedView inputs[] = {{&in->p, "probabilities"},
                                {&in->table, "label_table"},
                                {&in->qp, "query_positions"},
                                {&in->kp, "key_positions"},
                                {&*gv, "grad_out"}};
    const NamedView outputs[] = {{has_p ? &gp : nullptr, "grad_probabilities"},
                                 {has_t ? &gt : nullptr, "grad_label_table"}};
    if (absl::Status s = CheckOutputs(inputs, outputs); !s.ok()) return s;
    absl::StatusOr<seq::ShawRelative> shaw = MakeShawValue(*in);
    if (!shaw.ok()) return shaw.status();
    std::vector<int64_t> qs, ks;
    seq::RowMatrixXd dp, dt;
    if (has_t) dt.setZero(in->table.shape[0], in->table.shape[1]);
    if (absl::Status s = shaw->ValueOutputBackward(
            ReadMatrix(in->p), ContiguousPositions(in->qp, &qs), ContiguousPositions(in->kp, &ks),
            ReadMatrix(*gv), has_p ? &dp : nullptr, has_t ? &dt : nullptr);
        !s.ok()) {
      return s;
    }
    if (has_p) StoreMatrix(dp, gp, /*add=*/false);
    if (has_t) StoreMatrix(dt, gt, /*add=*/true);
    return absl::OkStatus();
  });
}

gpe_status gpe_transformer_xl_score_terms(const gpe_transformer_xl_options* options,
                                          const DLTensor* q, const DLTensor* k,
                                          const DLTensor* query_positions,
                                          const DLTensor* key_positions, const DLTensor* w_r,
                                          const DLTensor* u, const DLTensor* v, DLTensor* terms) {
  return Guard([&]() -> absl::Status {
    absl::StatusOr<TxlInputs> in =
        ViewTxl(options, q, k, query_positions, key_positions, w_r, u, v);
    if (!in.ok()) return in.status();
    if (terms == nullptr) return absl::InvalidArgumentError("terms is NULL");
    TensorView tv{};
    bool present = false;
    if (absl::Status s = ViewOptionalOut(terms, "terms", {in->qp.shape[0], in->kp.shape[0]}, &tv,
                                         &present);
        !s.ok()) {
      return s;
    }
    const NamedView inputs[] = {{&in->q, "q"},   {&in->k, "k"},     {&in->qp, "query_positions"},
                                {&in->kp, "key_positions"},         {&in->w_r, "w_r"},
                                {&in->u, "u"},   {&in->v, "v"}};
    const NamedView outputs[] = {{&tv, "terms"}};
    if (absl::Status s = CheckOutputs(inputs, outputs); !s.ok()) return s;
    const seq::RowMatrixXd qm = ReadMatrix(in->q), km = ReadMatrix(in->k);
    if (absl::Status s = CheckFiniteMatrix(qm, "q"); !s.ok()) return s;
    if (absl::Status s = CheckFiniteMatrix(km, "k"); !s.ok()) return s;
    std::vector<int64_t> qs, ks;
    absl::StatusOr<seq::RowMatrixXd> r = seq::TransformerXLScoreTerms(
        qm, km, ContiguousPositions(in->qp, &qs), ContiguousPositions(in->kp, &ks), in->params);
    if (!r.ok()) return r.status();
    StoreMatrix(*r, tv, /*add=*/false);
    return absl::OkStatus();
  });
}

gpe_status gpe_transformer_xl_score_terms_backward(
    const gpe_transformer_xl_options* options, const DLTensor* q, const DLTensor* k,
    const DLTensor* query_positions, const DLTensor* key_positions, const DLTensor* w_r,
    const DLTensor* u, const DLTensor* v, const DLTensor* grad_terms, DLTensor* grad_q,
    DLTensor* grad_k, DLTensor* grad_w_r, DLTensor* grad_u, DLTensor* grad_v) {
  return Guard([&]() -> absl::Status {
    absl::StatusOr<TxlInputs> in =
        ViewTxl(options, q, k, query_positions, key_positions, w_r, u, v);
    if (!in.ok()) return in.status();
    absl::StatusOr<TensorView> gv =
        ViewShaped(grad_terms, "grad_terms", {in->qp.shape[0], in->kp.shape[0]});
    if (!gv.ok()) return gv.status();
    TensorView g[5] = {};
    bool has[5] = {};
    DLTensor* outs[5] = {grad_q, grad_k, grad_w_r, grad_u, grad_v};
    const char* names[5] = {"grad_q", "grad_k", "grad_w_r", "grad_u", "grad_v"};
    const TensorView* likes[5] = {&in->q, &in->k, &in->w_r, &in->u, &in->v};
    for (int i = 0; i < 5; ++i) {
      if (absl::Status s = ViewOptionalOut(outs[i], names[i], likes[i]->shape, &g[i], &has[i]);
          !s.ok()) {
        return s;
      }
    }
    const NamedView inputs[] = {{&in->q, "q"},   {&in->k, "k"},     {&in->qp, "query_positions"},
                                {&in->kp, "key_positions"},         {&in->w_r, "w_r"},
                                {&in->u, "u"},   {&in->v, "v"},     {&*gv, "grad_terms"}};
    NamedView outputs[5];
    for (int i = 0; i < 5; ++i) outputs[i] = {has[i] ? &g[i] : nullptr, names[i]};
    if (absl::Status s = CheckOutputs(inputs, outputs); !s.ok()) return s;
    const seq::RowMatrixXd qm = ReadMatrix(in->q), km = ReadMatrix(in->k);
    if (absl::Status s = CheckFiniteMatrix(qm, "q"); !s.ok()) return s;
    if (absl::Status s = CheckFiniteMatrix(km, "k"); !s.ok()) return s;
    std::vector<int64_t> qs, ks;
    seq::TransformerXLGradients grads;
    if (absl::Status s = seq::TransformerXLScoreTermsBackward(
            qm, km, ContiguousPositions(in->qp, &qs), ContiguousPositions(in->kp, &ks),
            in->params, ReadMatrix(*gv), &grads);
        !s.ok()) {
      return s;
    }
    if (has[0]) StoreMatrix(grads.q, g[0], /*add=*/false);
    if (has[1]) StoreMatrix(grads.k, g[1], /*add=*/false);
    if (has[2]) StoreMatrix(grads.w_r, g[2], /*add=*/false);
    if (has[3]) StoreVector(grads.u, g[3]);
    if (has[4]) StoreVector(grads.v, g[4]);
    return absl::OkStatus();
  });
}

}  // extern "C"
