#include "c_api/src/attention/parameter_gradients.h"

#include <cstdint>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "attention/descriptor.h"
#include "c_api/include/gpe/attention.h"
#include "c_api/src/attention/call.h"
#include "c_api/src/common/tensor_view.h"
#include "c_api/src/sequence/bias_handle.h"
#include "encodings/sequence/bias.h"
#include "encodings/sequence/grape_m.h"
#include "encodings/sequence/relative.h"
#include "encodings/sequence/rope.h"

namespace gpe::c_api::attn {
namespace {

// Positions the kernels use (descriptor.h, POSITIONS): explicit ones, else keys 0..len_k-1
// and queries the last len_q of them, per sequence, in token order.
std::vector<int64_t> EffectivePositions(const att::AttentionArgs& a, bool query) {
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
    const TensorView& x = query ? c.q : c.k;
    const TensorView& dx = query ? dqv : dkv;
    const att::Strides xs = query ? a.q : a.k, dxs = StridesOf(dx, packed);
    const int64_t tokens = query ? a.num_q_tokens() : a.num_k_tokens();
    const int64_t heads = query ? a.num_q_heads : a.num_kv_heads;
    const int64_t n = tokens * heads;
    if (n == 0) continue;  // before EffectivePositions, which walks every sequence
    const std::vector<int64_t> pos = EffectivePositions(a, query);
    std::vector<double> in(static_cast<size_t>(n * d)), g(in.size()), gr(in.size());
    std::vector<int64_t> p(static_cast<size_t>(n));
    for (int64_t t = 0; t < tokens; ++t) {
      for (int64_t h = 0; h < heads; ++h) {
        const int64_t r = t * heads + h;
        p[r] = pos[t];
        LoadRow(x, c.dtype, xs, a, query, t, h, in.data() + r * d);
        LoadRow(dx, c.dtype, dxs, a, query, t, h, g.data() + r * d);
      }
    }
    if (absl::Status s = grape.Apply<double>(p, g.data(), d, gr.data(), d); !s.ok()) return s;
    seq::GrapeMProduct::Gradients part;
    if (absl::Status s = grape.Backward<double>(p, in.data(), d, gr.data(), d, nullptr, 0, &part);
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
  for (auto [t, name, src, rows] :
       {std::tuple<DLTensor*, const char*, const std::vector<double>*, int64_t>{pg.d_grape_a, "d_grape_a", &ga, m},
        {pg.d_grape_b, "d_grape_b", &gb, m}, {pg.d_grape_omega, "d_grape_omega", &gw, 0}}) {
    if (t == nullptr) continue;
    const std::vector<int64_t> shape = rows > 0 ? std::vector<int64_t>{m, d} : std::vector<int64_t>{m};
    absl::StatusOr<TensorView> v = ViewTensor(t, name, static_cast<int>(shape.size()), kF64);
    if (!v.ok()) return v.status();
    if (v->shape != shape) {
      return Bad(absl::StrCat(name, " must be float64 ", rows > 0 ? absl::StrCat("[", m, ", ", d, "]")
                                                                  : absl::StrCat("[", m, "]"),
                              "; got ", ShapeString(*v)));
    }
    double* dst = v->typed<double>();
    for (int64_t i = 0; i < static_cast<int64_t>(src->size()); ++i) {
      const int64_t off = rows > 0 ? (i / d) * v->strides[0] + (i % d) * v->strides[1] : i * v->strides[0];
      dst[off] = (*src)[i];
    }
  }
  return absl::OkStatus();
}

}  // namespace gpe::c_api::attn
