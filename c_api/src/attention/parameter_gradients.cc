#include "c_api/src/attention/parameter_gradients.h"

#include <cstdint>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <Eigen/Dense>
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "attention/descriptor.h"
#include "c_api/include/gpe/attention.h"
#include "c_api/src/attention/call.h"
#include "c_api/src/common/tensor_view.h"
#include "c_api/src/sequence/bias_handle.h"
#include "c_api/src/sequence/handles.h"
#include "encodings/sequence/algebraic.h"
#include "encodings/sequence/bias.h"
#include "encodings/sequence/grape_m.h"
#include "encodings/sequence/relative.h"
#include "encodings/sequence/rope.h"

namespace gpe::c_api::attn {
namespace {

// Positions the kernels use (descriptor.h, POSITIONS): one-axis structured coordinates
// (q_axes / k_axes of one column: the transforms were bound to them, RowTransform::
// PrepareStructured), else explicit ones, else keys 0..len_k-1 and queries the last len_q
// of them, per sequence, in token order.
std::vector<int64_t> EffectivePositions(const att::AttentionArgs& a, bool query) {
  const att::StructuredPositions& sp = query ? a.q_structured : a.k_structured;
  if (sp.form() == att::StructuredPositions::Form::kAxes && sp.num_axes == 1) {
    return std::vector<int64_t>(sp.coords.begin(), sp.coords.end());
  }
  const absl::Span<const int64_t> given = query ? a.q_positions : a.k_positions;
  if (!given.empty()) return std::vector<int64_t>(given.begin(), given.end());
  std::vector<int64_t> out(static_cast<size_t>(query ? a.num_q_tokens() : a.num_k_tokens()));
  for (int64_t b = 0; b < a.num_sequences(); ++b) {
    const int64_t lq = a.q_end(b) - a.q_begin(b), lk = a.k_end(b) - a.k_begin(b);
    const int64_t t0 = query ? a.q_begin(b) : a.k_begin(b);
    const int64_t n = query ? lq : lk;
    for (int64_t t = 0; t < n; ++t) out[t0 + t] = query ? lk - lq + t : t;
  }
  return out;
}

// Row (token, head) of a tensor of `dtype` with strides s, widened to double.
void LoadRow(const TensorView& v, DType dtype, const att::Strides& s, const att::AttentionArgs& a,
             bool query, int64_t token, int64_t head, double* out) {
  const int64_t off = query ? a.QOffset(s, token, head) : a.KOffset(s, token, head);
  for (int64_t c = 0; c < a.head_dim; ++c) {
    switch (dtype) {
      case DType::kFloat64: out[c] = v.typed<const double>()[off + c]; break;
      case DType::kFloat32: out[c] = v.typed<const float>()[off + c]; break;
      default: out[c] = seq::ToFloat(v.typed<const seq::BFloat16>()[off + c]); break;
    }
  }
}

// One side (q or k) of a call as rows r = token * heads + head (token order): the
// encoding's inputs x and the loss's gradients dx w.r.t. them (the kernels' dq or dk,
// before the encoding), widened to double, head_dim apart. Key tokens past their sequence's
// kv_lengths are never read (descriptor.h, LAYOUTS): their rows stay 0 (dk is 0 there, and
// 0 times the NaN of an unwritten cache slot made every generator gradient NaN).
struct SideRows {
  int64_t heads = 0;
  int64_t rows = 0;
  std::vector<double> x, dx;
  int64_t token(int64_t r) const { return r / heads; }
};

SideRows LoadSide(const Call& c, bool packed, bool query, const TensorView& dxv) {
  const att::AttentionArgs& a = c.args;
  const int64_t d = a.head_dim;
  SideRows out;
  out.heads = query ? a.num_q_heads : a.num_kv_heads;
  out.rows = (query ? a.num_q_tokens() : a.num_k_tokens()) * out.heads;
  out.x.resize(static_cast<size_t>(out.rows * d));
  out.dx.resize(out.x.size());
  const att::Strides xs = query ? a.q : a.k, dxs = StridesOf(dxv, packed);
  for (int64_t r = 0; r < out.rows; ++r) {
    if (!query && !a.kv_lengths.empty()) {
      const int64_t t = out.token(r), b = t / a.seq_len_k;
      if (t >= a.k_end(b)) continue;
    }
    LoadRow(query ? c.q : c.k, c.dtype, xs, a, query, out.token(r), r % out.heads,
            out.x.data() + r * d);
    LoadRow(dxv, c.dtype, dxs, a, query, out.token(r), r % out.heads, out.dx.data() + r * d);
  }
  return out;
}

// A gradient output: float64 with `shape` (any strides), filled from `src` in row-major
// order. Skipped when `t` is null.
absl::Status WriteGradient(DLTensor* t, const char* name, const std::vector<int64_t>& shape,
                           const std::vector<double>& src) {
  if (t == nullptr) return absl::OkStatus();
  absl::StatusOr<TensorView> v = ViewTensor(t, name, static_cast<int>(shape.size()), kF64);
  if (!v.ok()) return v.status();
  if (v->shape != shape) {
    std::string want;
    for (int64_t e : shape) absl::StrAppend(&want, want.empty() ? "" : ", ", e);
    return Bad(absl::StrCat(name, " must be float64 [", want, "]; got ", ShapeString(*v)));
  }
  double* dst = v->typed<double>();
  for (int64_t i = 0; i < static_cast<int64_t>(src.size()); ++i) {
    int64_t off = 0, rem = i;
    for (int64_t e = static_cast<int64_t>(shape.size()) - 1; e >= 0; --e) {
      off += (rem % shape[e]) * v->strides[e];
      rem /= shape[e];
    }
    dst[off] = src[i];
  }
  return absl::OkStatus();
}

// Adds the matrices `part` (each m x m) to `sum` ([count, m, m] row-major).
void AddMatrices(const std::vector<Eigen::MatrixXd>& part, std::vector<double>* sum) {
  int64_t i = 0;
  for (const Eigen::MatrixXd& g : part) {
    for (int64_t r = 0; r < g.rows(); ++r) {
      for (int64_t col = 0; col < g.cols(); ++col) (*sum)[i++] += g(r, col);
    }
  }
}

}  // namespace

absl::StatusOr<TensorView> TableGradient(const DLTensor* t, const char* name,
                                         const seq::ShawRelative* table, int64_t cols) {
  if (t == nullptr) return TensorView{};
  if (table == nullptr) {
    return Bad(absl::StrCat(name, " is given but its table (", name + 2, ") is not"));
  }
  absl::StatusOr<TensorView> v = ViewTensor(t, name, 2, kF64);
  if (!v.ok()) return v.status();
  if (v->shape[0] != table->num_labels() || v->shape[1] != cols) {
    return Bad(absl::StrCat(name, " must be [", table->num_labels(), ", ", cols, "], got ",
                            ShapeString(*v)));
  }
  if (v->numel() > 1 && (v->strides[1] != 1 || v->strides[0] != cols)) {
    return Bad(absl::StrCat(name, " must be compact row-major"));
  }
  return v;
}

absl::Status BiasParameterGrads::Init(const gpe_bias* handle, DLTensor* da, DLTensor* db) {
  if (da == nullptr && db == nullptr) return absl::OkStatus();
  if (handle == nullptr) return Bad("d_bias_a / d_bias_b are given but options->bias is NULL");
  bias = handle;
  const int64_t heads = bias->base().num_heads();
  switch (bias->kind) {
    case GPE_BIAS_ALIBI: shape = {heads}; break;
    case GPE_BIAS_T5: shape = {bias->t5->config().num_buckets, heads}; break;
    case GPE_BIAS_FOX: shape = {bias->fox->length(), heads}; break;
    case GPE_BIAS_GRAPE_A:
      shape = bias->grape_a->gated() ? std::vector<int64_t>{bias->grape_a->fox()->length(), heads}
                                     : std::vector<int64_t>{heads};
      break;
    default: shape = {bias->grape_ap->length(), heads, bias->grape_ap->rank()}; break;
  }
  if (db != nullptr && bias->kind != GPE_BIAS_GRAPE_AP) {
    return Bad("d_bias_b is only for GRAPE-AP (dL/du); pass NULL");
  }
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  a.assign(static_cast<size_t>(n), 0.0);
  if (bias->kind == GPE_BIAS_GRAPE_AP) b.assign(static_cast<size_t>(n), 0.0);
  for (auto [t, name, view] : {std::tuple<DLTensor*, const char*, TensorView*>{da, "d_bias_a", &va},
                               {db, "d_bias_b", &vb}}) {
    if (t == nullptr) continue;
    absl::StatusOr<TensorView> v = ViewTensor(t, name, static_cast<int>(shape.size()), kF64);
    if (!v.ok()) return v.status();
    if (v->shape != shape) {
      std::string want;
      for (int64_t d : shape) absl::StrAppend(&want, want.empty() ? "" : ", ", d);
      return Bad(absl::StrCat(name, " must be float64 [", want, "] for this bias; got ",
                              ShapeString(*v)));
    }
    *view = *v;
  }
  return absl::OkStatus();
}

att::BiasGradientSink BiasParameterGrads::Sink() {
  if (!wanted()) return nullptr;
  return [this](int64_t, int64_t head, absl::Span<const int64_t> qp,
                absl::Span<const int64_t> kp, const double* g, int64_t ld) -> absl::Status {
    absl::Span<double> ga(a), gb(b);
    switch (bias->kind) {
      case GPE_BIAS_ALIBI: return bias->alibi->AccumulateSlopeGradient<double>(head, qp, kp, g, ld, ga);
      case GPE_BIAS_T5: return bias->t5->AccumulateTableGradient<double>(head, qp, kp, g, ld, ga);
      case GPE_BIAS_FOX: return bias->fox->AccumulatePrefixGradient<double>(head, qp, kp, g, ld, ga);
      case GPE_BIAS_GRAPE_A:
        return bias->grape_a->gated()
                   ? bias->grape_a->AccumulatePrefixGradient<double>(head, qp, kp, g, ld, ga)
                   : bias->grape_a->AccumulateSlopeGradient<double>(head, qp, kp, g, ld, ga);
      default: return bias->grape_ap->AccumulateGradient<double>(head, qp, kp, g, ld, ga, gb);
    }
  };
}

absl::Status BiasParameterGrads::Finish() {
  if (!wanted()) return absl::OkStatus();
  const bool gated = bias->kind == GPE_BIAS_FOX ||
                     (bias->kind == GPE_BIAS_GRAPE_A && bias->grape_a->gated());
  if (gated) {
    const seq::FoxBias& fox = bias->kind == GPE_BIAS_FOX ? *bias->fox : *bias->grape_a->fox();
    absl::StatusOr<std::vector<double>> g = fox.LogitGradient(a);
    if (!g.ok()) return g.status();
    a = *std::move(g);
  }
  for (auto [src, view] : {std::pair<const std::vector<double>*, TensorView*>{&a, &va}, {&b, &vb}}) {
    if (view->data == nullptr) continue;
    double* dst = view->typed<double>();
    const int64_t n = static_cast<int64_t>(src->size());
    for (int64_t i = 0; i < n; ++i) {
      int64_t off = 0, rem = i;
      for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
        off += (rem % shape[d]) * view->strides[d];
        rem /= shape[d];
      }
      dst[off] = (*src)[i];
    }
  }
  return absl::OkStatus();
}

absl::Status GrapeMParameterGrads(const Call& c, const seq::GrapeMProduct& grape, bool packed,
                                  const TensorView& dqv, const TensorView& dkv,
                                  const gpe_attention_param_grads& pg) {
  const att::AttentionArgs& a = c.args;
  const int64_t d = a.head_dim, m = grape.num_generators();
  std::vector<double> ga(static_cast<size_t>(m * d), 0.0), gb(ga.size(), 0.0),
      gw(static_cast<size_t>(m), 0.0);
  for (const bool query : {true, false}) {
    const SideRows side = LoadSide(c, packed, query, query ? dqv : dkv);
    const int64_t n = side.rows;
    if (n == 0) continue;  // before EffectivePositions, which walks every sequence
    const std::vector<int64_t> pos = EffectivePositions(a, query);
    std::vector<int64_t> p(static_cast<size_t>(n));
    for (int64_t r = 0; r < n; ++r) p[r] = pos[side.token(r)];
    std::vector<double> gr(side.dx.size());
    if (absl::Status s = grape.Apply<double>(p, side.dx.data(), d, gr.data(), d); !s.ok()) {
      return s;
    }
    seq::GrapeMProduct::Gradients part;
    if (absl::Status s =
            grape.Backward<double>(p, side.x.data(), d, gr.data(), d, nullptr, 0, &part);
        !s.ok()) {
      return s;
    }
    for (int64_t k = 0; k < m; ++k) {
      for (int64_t c2 = 0; c2 < d; ++c2) {
        ga[k * d + c2] += part.generators[k].a[c2];
        gb[k * d + c2] += part.generators[k].b[c2];
      }
      gw[k] += part.generators[k].omega;
    }
  }
  if (absl::Status s = WriteGradient(pg.d_grape_a, "d_grape_a", {m, d}, ga); !s.ok()) return s;
  if (absl::Status s = WriteGradient(pg.d_grape_b, "d_grape_b", {m, d}, gb); !s.ok()) return s;
  return WriteGradient(pg.d_grape_omega, "d_grape_omega", {m}, gw);
}

absl::Status AlgebraicParameterGrads(const Call& c, const gpe_attention_options& o, bool packed,
                                     const TensorView& dqv, const TensorView& dkv,
                                     const gpe_attention_param_grads& pg) {
  const att::AttentionArgs& a = c.args;
  const int64_t d = a.head_dim;
  // Which encoding, and the shape of its generators' gradient.
  std::vector<int64_t> shape;
  std::vector<seq::AlgebraicSequence> grid_axes;
  if (pg.d_algebraic != nullptr) {
    shape = {d, d};
  } else if (pg.d_algebraic_tree != nullptr) {
    shape = {c.tree->branching(), d, d};
  } else {
    const int64_t m = c.grid_skews[0].rows();
    shape = {static_cast<int64_t>(c.grid_skews.size()), m, m};
    for (const Eigen::MatrixXd& s : c.grid_skews) {
      absl::StatusOr<seq::AlgebraicSequence> axis = seq::AlgebraicSequence::Create(s);
      if (!axis.ok()) return axis.status();
      grid_axes.push_back(*std::move(axis));
    }
  }
  std::vector<double> sum(static_cast<size_t>(shape[0] * shape[1] * (shape.size() > 2 ? shape[2] : 1)),
                          0.0);
  for (const bool query : {true, false}) {
    SideRows side = LoadSide(c, packed, query, query ? dqv : dkv);
    const int64_t n = side.rows;
    if (n == 0) continue;  // before EffectivePositions, which walks every sequence
    double* g = side.dx.data();
    std::vector<Eigen::MatrixXd> part;
    if (pg.d_algebraic != nullptr) {
      // Sequences (sec. 3.1): W^p = exp(p S) at the kernels' int64 positions.
      const std::vector<int64_t> pos = EffectivePositions(a, query);
      std::vector<int64_t> p(static_cast<size_t>(n));
      for (int64_t r = 0; r < n; ++r) p[r] = pos[side.token(r)];
      const seq::AlgebraicSequence& e = o.algebraic->impl;
      if (absl::Status s = e.Apply<double>(p, g, d, g, d); !s.ok()) return s;
      part.emplace_back();
      if (absl::Status s = e.Backward<double>(p, side.x.data(), d, g, d, nullptr, 0, &part[0]);
          !s.ok()) {
        return s;
      }
    } else if (pg.d_algebraic_tree != nullptr) {
      // Trees (sec. 3.2): rho(address) the path product of the branch generators.
      const att::StructuredPositions& sp = query ? a.q_structured : a.k_structured;
      std::vector<seq::AlgebraicTree::Address> addr(static_cast<size_t>(n));
      for (int64_t r = 0; r < n; ++r) {
        const absl::Span<const int64_t> t = sp.Address(side.token(r));
        addr[r].assign(t.begin(), t.end());
      }
      if (absl::Status s = c.tree->Apply<double>(addr, g, d, g, d); !s.ok()) return s;
      if (absl::Status s = c.tree->Backward<double>(addr, side.x.data(), d, g, d, nullptr, 0, &part);
          !s.ok()) {
        return s;
      }
    } else {
      // Grids (sec. 3.3): blockdiag over the axes of W_a^{x_a}, one sequence per block.
      const att::StructuredPositions& sp = query ? a.q_structured : a.k_structured;
      const int64_t axes = static_cast<int64_t>(grid_axes.size()), m = shape[1];
      std::vector<int64_t> coords(static_cast<size_t>(n * axes)), axis_pos(static_cast<size_t>(n));
      for (int64_t r = 0; r < n; ++r) {
        const absl::Span<const int64_t> x = sp.Coords(side.token(r));
        for (int64_t ax = 0; ax < axes; ++ax) coords[r * axes + ax] = x[ax];
      }
      for (int64_t ax = 0; ax < axes; ++ax) {
        for (int64_t r = 0; r < n; ++r) axis_pos[r] = coords[r * axes + ax];
        if (absl::Status s = grid_axes[ax].Apply<double>(axis_pos, g + ax * m, d, g + ax * m, d);
            !s.ok()) {
          return s;
        }
      }
      if (absl::Status s = seq::AlgebraicGridBackward<double>(grid_axes, coords, side.x.data(), d,
                                                              g, d, nullptr, 0, &part);
          !s.ok()) {
        return s;
      }
    }
    AddMatrices(part, &sum);
  }
  if (pg.d_algebraic != nullptr) return WriteGradient(pg.d_algebraic, "d_algebraic", shape, sum);
  if (pg.d_algebraic_tree != nullptr) {
    return WriteGradient(pg.d_algebraic_tree, "d_algebraic_tree", shape, sum);
  }
  return WriteGradient(pg.d_algebraic_grid, "d_algebraic_grid", shape, sum);
}

}  // namespace gpe::c_api::attn
