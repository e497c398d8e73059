// The C ABI's algebraic positional encodings (gpe/algebraic.h; Kogkalidis et al.):
// sequences, trees, grids, periodic domains and locality scaling, validated here and
// handed to encodings/sequence/algebraic.h. Every entry point runs under Guard.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <Eigen/Dense>
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "c_api/include/gpe/algebraic.h"
#include "c_api/src/common/checks.h"
#include "c_api/src/common/error.h"
#include "c_api/src/common/tensor_view.h"
#include "c_api/src/sequence/batch.h"
#include "c_api/src/sequence/handles.h"
#include "encodings/sequence/algebraic.h"

using gpe::c_api::ApplyAny;
using gpe::c_api::ApplyViews;
using gpe::c_api::BackwardTyped;
using gpe::c_api::BackwardViews;
using gpe::c_api::CheckCreate;
using gpe::c_api::CheckDim;
using gpe::c_api::CheckDisjoint;
using gpe::c_api::CheckFinite;
using gpe::c_api::CheckLike;
using gpe::c_api::CheckNoSelfOverlap;
using gpe::c_api::CheckStructSize;
using gpe::c_api::ContiguousPositions;
using gpe::c_api::DType;
using gpe::c_api::Guard;
using gpe::c_api::NamedView;
using gpe::c_api::OnBackwardRows;
using gpe::c_api::OnRows;
using gpe::c_api::Shape;
using gpe::c_api::TensorView;
using gpe::c_api::ViewApply;
using gpe::c_api::ViewBackward;
using gpe::c_api::ViewParamGrad;
using gpe::c_api::ViewRows;
using gpe::c_api::ViewSquare;
using gpe::c_api::ViewTensor;
using gpe::c_api::WriteMatrix;
using gpe::c_api::WriteRowsAny;
using gpe::c_api::kF64;
using gpe::c_api::kFloat;
using gpe::c_api::kInt;
namespace seq = gpe::encodings::sequence;

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
  // Walked entry by entry (tree addresses up to their -1 ends): a broadcast view may not
  // stand for more entries than memory holds.
  if (absl::Status s = gpe::c_api::CheckMaterialised(*iv, index_name); !s.ok()) return s;
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

// ---- Algebraic trees, grids, periodic domains, locality --------------------------------

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
    // out's shape from the node count first, so a wrong one is refused before up to
    // 2^27 doubles are built.
    absl::StatusOr<int64_t> count = tree->impl.NumNodes(max_depth);
    if (!count.ok()) return count.status();
    const int64_t d = tree->impl.dim();
    if (ov->shape != std::vector<int64_t>{*count, d, d}) {
      return absl::InvalidArgumentError(absl::StrCat("out must have shape [", *count, ", ", d,
                                                     ", ", d, "] (nodes of depth <= ", max_depth,
                                                     "); got ", Shape(*ov)));
    }
    absl::StatusOr<std::vector<Eigen::MatrixXd>> all = tree->impl.AllNodeMatrices(max_depth);
    if (!all.ok()) return all.status();
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
