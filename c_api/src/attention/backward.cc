// The C ABI's attention backward (gpe/attention.h): the tensors and options checked
// (call.h), then attention/cpu's CpuBackward (float32, bfloat16) or the exact
// ReferenceBackward<double> (float64), which check the call itself, with the encoding
// parameters' gradients (parameter_gradients.h). Every entry point runs under Guard.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "attention/cpu/cpu_attention.h"
#include "attention/descriptor.h"
#include "attention/reference.h"
#include "c_api/include/gpe/attention.h"
#include "c_api/src/attention/call.h"
#include "c_api/src/attention/cuda_call.h"
#include "c_api/src/attention/parameter_gradients.h"
#include "c_api/src/common/checks.h"
#include "c_api/src/common/error.h"
#include "c_api/src/common/matrices.h"
#include "c_api/src/common/tensor_view.h"
#include "c_api/src/sequence/handles.h"
#include "dlpack/dlpack.h"

using gpe::c_api::CheckStructSize;
using gpe::c_api::DType;
using gpe::c_api::Guard;
using gpe::c_api::NamedView;
using gpe::c_api::TensorView;
using gpe::c_api::attn::Call;
using gpe::c_api::attn::CheckOutputs;
using gpe::c_api::attn::LseOf;
using gpe::c_api::attn::OutputLike;
using gpe::c_api::attn::Prepare;
using gpe::c_api::attn::StridesOf;
using gpe::c_api::attn::Bad;
using gpe::c_api::attn::AlgebraicParameterGrads;
using gpe::c_api::attn::BiasParameterGrads;
using gpe::c_api::attn::CheckSameLayout;
using gpe::c_api::attn::GrapeMParameterGrads;
using gpe::c_api::attn::TableGradient;
using gpe::c_api::attn::View;
using gpe::c_api::kF64;
using gpe::c_api::ShapeString;
using gpe::c_api::ViewTensor;
using BF = gpe::c_api::attn::BF;
namespace att = gpe::attention;

namespace {

// gpe_attention_param_grads of 0.4.0 ends at d_shaw_value_table; d_sinks (0.9.0) and the
// algebraic generators' gradients (0.10.0) are read only when struct_size covers them.
constexpr size_t kParamGradsV1Size = offsetof(gpe_attention_param_grads, d_sinks);
// Its size at each release: 0.4.0 to 0.8.0, 0.9.0 (d_sinks), 0.10.0 (this library's).
constexpr size_t kParamGradsReleasedSizes[] = {
    kParamGradsV1Size, offsetof(gpe_attention_param_grads, d_algebraic),
    sizeof(gpe_attention_param_grads)};

// The sinks' gradient dL/dz: float64 [heads_q] (any stride) for a call with sinks,
// computed into `values` and copied out by Finish. Data null when not asked.
struct SinkGradient {
  TensorView view;
  std::vector<double> values;

  absl::Status Init(DLTensor* t, const Call& c) {
    if (t == nullptr) return absl::OkStatus();
    if (!c.has_sinks()) return Bad("d_sinks is given but options->sinks is NULL");
    absl::StatusOr<TensorView> v = ViewTensor(t, "d_sinks", 1, kF64);
    if (!v.ok()) return v.status();
    if (v->shape[0] != c.args.num_q_heads) {
      return Bad(absl::StrCat("d_sinks must be float64 [heads_q] = [", c.args.num_q_heads,
                              "], got ", ShapeString(*v)));
    }
    view = *v;
    values.assign(static_cast<size_t>(c.args.num_q_heads), 0.0);
    return absl::OkStatus();
  }
  double* data() { return view.data != nullptr ? values.data() : nullptr; }
  void Finish() {
    if (view.data == nullptr) return;
    double* dst = view.typed<double>();
    for (size_t h = 0; h < values.size(); ++h) dst[h * view.strides[0]] = values[h];
  }
};

absl::Status BackwardImpl(const gpe_attention_options* options, const DLTensor* q,
                          const DLTensor* k, const DLTensor* v, const DLTensor* o,
                          const DLTensor* lse, const DLTensor* d_o, DLTensor* dq, DLTensor* dk,
                          DLTensor* dv, DLTensor* d_shaw_key_table, DLTensor* d_shaw_value_table,
                          DLTensor* d_bias_a = nullptr, DLTensor* d_bias_b = nullptr,
                          const gpe_attention_param_grads* pgrads = nullptr) {
  {
    Call c;
    if (absl::Status s = Prepare(options, q, k, v, &c); !s.ok()) return s;
    if (c.paged()) {
      return Bad("block_table: a paged KV cache is for the forward (inference) only; the "
                 "backward takes contiguous k and v ([batch, seq_k, heads_kv, head_dim], "
                 "kv_lengths for sequences of different lengths)");
    }
    if (c.kv_dtype != c.dtype) {
      return Bad(absl::StrCat("q is ", gpe::c_api::DTypeName(c.dtype), " but k and v are ",
                              gpe::c_api::DTypeName(c.kv_dtype),
                              ": 16-bit KV caches are forward only; the backward takes one "
                              "dtype for q, k and v"));
    }
    const bool packed = c.args.layout == att::Layout::kTHD;
    if ((o == nullptr) != (lse == nullptr)) {
      return Bad("give both o and lse from the forward, or neither (recomputed)");
    }
    const TensorView o_shape = c.OutputShape();
    absl::StatusOr<TensorView> gv = OutputLike(d_o, "d_o", o_shape, "q with v's head size", packed);
    if (!gv.ok()) return gv.status();
    c.args.o = StridesOf(*gv, packed);  // o and d_o share these strides
    TensorView ov;
    if (o != nullptr) {
      absl::StatusOr<TensorView> t = OutputLike(o, "o", o_shape, "q with v's head size", packed);
      if (!t.ok()) return t.status();
      if (!gpe::c_api::SameStrides(*t, *gv)) {
        return Bad("o and d_o must have the same strides (on dimensions of size above 1)");
      }
      ov = *t;
    }
    absl::StatusOr<TensorView> lv = LseOf(lse, c.args, c.dtype);
    if (!lv.ok()) return lv.status();
    // Gradients take the strides of their inputs.
    TensorView dqv, dkv, dvv;
    struct Out {
      DLTensor* t;
      const char* name;
      const TensorView* like;
      const char* like_name;
      TensorView* view;
    } grads[] = {{dq, "dq", &c.q, "q", &dqv}, {dk, "dk", &c.k, "k", &dkv}, {dv, "dv", &c.v, "v", &dvv}};
    for (const Out& out : grads) {
      if (out.t == nullptr) continue;
      absl::StatusOr<TensorView> t = View(out.t, out.name, packed);
      if (!t.ok()) return t.status();
      if (absl::Status s = CheckSameLayout(*t, out.name, *out.like, out.like_name); !s.ok()) {
        return s;
      }
      *out.view = *t;
    }
    const NamedView ins[] = {{&c.q, "q"}, {&c.k, "k"}, {&c.v, "v"}, {&*gv, "d_o"},
                             {o != nullptr ? &ov : nullptr, "o"},
                             {lse != nullptr ? &*lv : nullptr, "lse"},
                             {c.mask.data != nullptr ? &c.mask : nullptr, "attn_mask"}};
    absl::StatusOr<TensorView> gak =
        TableGradient(d_shaw_key_table, "d_shaw_key_table", c.args.shaw_keys, c.args.head_dim);
    if (!gak.ok()) return gak.status();
    absl::StatusOr<TensorView> gav =
        TableGradient(d_shaw_value_table, "d_shaw_value_table", c.args.shaw_values,
                      c.args.value_dim());
    if (!gav.ok()) return gav.status();
    BiasParameterGrads pg;
    if (absl::Status s = pg.Init(options->bias, d_bias_a, d_bias_b); !s.ok()) return s;
    SinkGradient sink_grad;
    if (absl::Status s = sink_grad.Init(pgrads != nullptr ? pgrads->d_sinks : nullptr, c);
        !s.ok()) {
      return s;
    }
    const NamedView outs[] = {{dq != nullptr ? &dqv : nullptr, "dq"},
                              {dk != nullptr ? &dkv : nullptr, "dk"},
                              {dv != nullptr ? &dvv : nullptr, "dv"},
                              {gak->data != nullptr ? &*gak : nullptr, "d_shaw_key_table"},
                              {gav->data != nullptr ? &*gav : nullptr, "d_shaw_value_table"},
                              {pg.va.data != nullptr ? &pg.va : nullptr, "d_bias_a"},
                              {pg.vb.data != nullptr ? &pg.vb : nullptr, "d_bias_b"},
                              {sink_grad.view.data != nullptr ? &sink_grad.view : nullptr,
                               "d_sinks"}};
    const att::BiasGradientSink sink = pg.Sink();
    const bool grape_grads = pgrads != nullptr && (pgrads->d_grape_a != nullptr ||
                                                   pgrads->d_grape_b != nullptr ||
                                                   pgrads->d_grape_omega != nullptr);
    if (grape_grads) {
      if (options->grape_m == nullptr) {
        return Bad("d_grape_a / d_grape_b / d_grape_omega are given but options->grape_m is NULL");
      }
      if (dq == nullptr || dk == nullptr) {
        return Bad("GRAPE-M generator gradients are formed from dq and dk: pass both");
      }
    }
    // Every parameter-gradient output viewed, shaped and checked now, before anything is
    // written: a wrong shape found after the kernels left the other outputs written, and
    // overlaps are checked as for every other output (byte_offset and partial overlap
    // included), against the inputs and the other outputs.
    std::vector<TensorView> param_views;
    std::vector<const char*> param_names;
    auto view_param = [&](const DLTensor* t, const char* name,
                          const std::vector<int64_t>& shape) -> absl::Status {
      if (t == nullptr) return absl::OkStatus();
      absl::StatusOr<TensorView> view = ViewTensor(t, name, static_cast<int>(shape.size()), kF64);
      if (!view.ok()) return view.status();
      if (view->shape != shape) {
        TensorView want;
        want.shape = shape;
        return Bad(absl::StrCat(name, " must be float64 ", ShapeString(want), ", got ",
                                ShapeString(*view)));
      }
      if (absl::Status s = gpe::c_api::CheckNoSelfOverlap(*view, name); !s.ok()) return s;
      param_views.push_back(*std::move(view));
      param_names.push_back(name);
      return absl::OkStatus();
    };
    if (grape_grads) {
      const int64_t m = options->grape_m->impl.num_generators(), d = c.args.head_dim;
      for (auto [t, name, shape] :
           {std::tuple{pgrads->d_grape_a, "d_grape_a", std::vector<int64_t>{m, d}},
            std::tuple{pgrads->d_grape_b, "d_grape_b", std::vector<int64_t>{m, d}},
            std::tuple{pgrads->d_grape_omega, "d_grape_omega", std::vector<int64_t>{m}}}) {
        if (absl::Status s = view_param(t, name, shape); !s.ok()) return s;
      }
    }
    // The algebraic generators' gradients (0.10.0), each for its own option.
    bool algebraic_grads = false;
    if (pgrads != nullptr) {
      const struct {
        const DLTensor* grad;
        const char* name;
        bool has_option;
        const char* option;
      } wanted[] = {
          {pgrads->d_algebraic, "d_algebraic", options->algebraic != nullptr, "algebraic"},
          {pgrads->d_algebraic_tree, "d_algebraic_tree", c.tree.has_value(), "algebraic_tree"},
          {pgrads->d_algebraic_grid, "d_algebraic_grid", !c.grid_skews.empty(),
           "algebraic_grid"}};
      for (const auto& w : wanted) {
        if (w.grad == nullptr) continue;
        if (!w.has_option) {
          return Bad(absl::StrCat(w.name, " is given but options->", w.option, " is NULL"));
        }
        algebraic_grads = true;
        // Checked before the kernels run: float64 of the generators' shape.
        const int64_t d = c.args.head_dim;
        const std::vector<int64_t> shape =
            w.grad == pgrads->d_algebraic        ? std::vector<int64_t>{d, d}
            : w.grad == pgrads->d_algebraic_tree ? std::vector<int64_t>{c.tree->branching(), d, d}
                                                 : std::vector<int64_t>{
                                                       static_cast<int64_t>(c.grid_skews.size()),
                                                       c.grid_skews[0].rows(),
                                                       c.grid_skews[0].rows()};
        if (absl::Status s = view_param(w.grad, w.name, shape); !s.ok()) return s;
      }
      if (algebraic_grads && (dq == nullptr || dk == nullptr)) {
        return Bad("the algebraic generators' gradients are formed from dq and dk: pass both");
      }
    }
    auto finish = [&]() -> absl::Status {
      if (absl::Status st = pg.Finish(); !st.ok()) return st;
      sink_grad.Finish();
      if (algebraic_grads) {
        if (absl::Status st =
                AlgebraicParameterGrads(c, *options, packed, dqv, dkv, *pgrads);
            !st.ok()) {
          return st;
        }
      }
      if (!grape_grads) return absl::OkStatus();
      return GrapeMParameterGrads(c, options->grape_m->impl, packed, dqv, dkv, *pgrads);
    };
    std::vector<NamedView> all_outs(std::begin(outs), std::end(outs));
    for (size_t i = 0; i < param_views.size(); ++i) {
      all_outs.push_back({&param_views[i], param_names[i]});
    }
    if (absl::Status s = CheckOutputs(all_outs, ins); !s.ok()) return s;
    // The backwards check the call (ValidateAttention) and the Shaw table gradients, and
    // return at once on an empty call with those gradients zero; finish() then gives the
    // bias's and GRAPE-M's (zero, from their zeroed accumulators).
    if (c.dtype == DType::kFloat64) {
      // The exact oracle recomputes the forward itself: o and lse, checked above, are unused.
      att::ReferenceBackwardExtras rex;
      rex.shaw_key_table_grad = gak->typed<double>();
      rex.shaw_value_table_grad = gav->typed<double>();
      rex.sink_grad = sink_grad.data();
      const absl::Status ref = att::ReferenceBackward(c.args, c.q.typed<const double>(), c.k.typed<const double>(),
                                    c.v.typed<const double>(), gv->typed<const double>(),
                                    dq ? dqv.typed<double>() : nullptr,
                                    dk ? dkv.typed<double>() : nullptr,
                                    dv ? dvv.typed<double>() : nullptr, sink, rex);
      if (absl::Status st = ref; !st.ok()) return st;
      return finish();
    }
    const float* l = lv->typed<const float>();
    const att::CpuAttentionOptions& opt = c.cpu;  // num_threads and the arithmetic
    if (c.dtype == DType::kFloat32) {
      att::CpuBackwardExtras ex;
      ex.shaw_key_table_grad = gak->typed<double>();
      ex.shaw_value_table_grad = gav->typed<double>();
      ex.sink_grad = sink_grad.data();
      if (absl::Status st = att::CpuBackward(
              c.args, c.q.typed<const float>(), c.k.typed<const float>(),
              c.v.typed<const float>(), o != nullptr ? ov.typed<const float>() : nullptr, l,
              gv->typed<const float>(), dq ? dqv.typed<float>() : nullptr,
              dk ? dkv.typed<float>() : nullptr, dv ? dvv.typed<float>() : nullptr, sink, opt, ex);
          !st.ok()) {
        return st;
      }
      return finish();
    }
    att::CpuBackwardExtras ex;  // bfloat16: the same gradients, float arithmetic inside
    ex.shaw_key_table_grad = gak->typed<double>();
    ex.shaw_value_table_grad = gav->typed<double>();
    ex.sink_grad = sink_grad.data();
    if (absl::Status st = att::CpuBackward(
            c.args, c.q.typed<const BF>(), c.k.typed<const BF>(), c.v.typed<const BF>(),
            o != nullptr ? ov.typed<const BF>() : nullptr, l, gv->typed<const BF>(),
            dq ? dqv.typed<BF>() : nullptr, dk ? dkv.typed<BF>() : nullptr,
            dv ? dvv.typed<BF>() : nullptr, sink, opt, ex);
        !st.ok()) {
      return st;
    }
    return finish();
  }
}

}  // namespace

gpe_status gpe_attention_backward(const gpe_attention_options* options, const DLTensor* q,
                                  const DLTensor* k, const DLTensor* v, const DLTensor* o,
                                  const DLTensor* lse, const DLTensor* d_o, DLTensor* dq,
                                  DLTensor* dk, DLTensor* dv) {
  return Guard([&]() -> absl::Status {
    if (gpe::c_api::attn::OnCuda(q)) {
      return gpe::c_api::attn::CudaBackward(options, q, k, v, o, lse, d_o, dq, dk, dv, false);
    }
    return BackwardImpl(options, q, k, v, o, lse, d_o, dq, dk, dv, nullptr, nullptr);
  });
}

gpe_status gpe_attention_backward_v2(const gpe_attention_options* options, const DLTensor* q,
                                     const DLTensor* k, const DLTensor* v, const DLTensor* o,
                                     const DLTensor* lse, const DLTensor* d_o, DLTensor* dq,
                                     DLTensor* dk, DLTensor* dv, DLTensor* d_shaw_key_table,
                                     DLTensor* d_shaw_value_table) {
  return Guard([&]() -> absl::Status {
    if (gpe::c_api::attn::OnCuda(q)) {
      return gpe::c_api::attn::CudaBackward(
          options, q, k, v, o, lse, d_o, dq, dk, dv,
          d_shaw_key_table != nullptr || d_shaw_value_table != nullptr);
    }
    return BackwardImpl(options, q, k, v, o, lse, d_o, dq, dk, dv, d_shaw_key_table,
                        d_shaw_value_table);
  });
}

gpe_status gpe_attention_backward_with_parameters(
    const gpe_attention_options* options, const DLTensor* q, const DLTensor* k,
    const DLTensor* v, const DLTensor* o, const DLTensor* lse, const DLTensor* d_o,
    DLTensor* dq, DLTensor* dk, DLTensor* dv, const gpe_attention_param_grads* grads) {
  return Guard([&]() -> absl::Status {
    if (grads == nullptr) return Bad("grads is NULL (use GPE_ATTENTION_PARAM_GRADS_INIT)");
    // The caller's struct (0.4.0's shorter one included), later fields NULL.
    gpe_attention_param_grads g;
    if (absl::Status s = gpe::c_api::CopyVersioned(*grads, kParamGradsV1Size,
                                                   "gpe_attention_param_grads", &g);
        !s.ok()) {
      return s;
    }
    if (absl::Status s = gpe::c_api::CheckReleasedSize(grads->struct_size, kParamGradsReleasedSizes,
                                                       "gpe_attention_param_grads");
        !s.ok()) {
      return s;
    }
    if (gpe::c_api::attn::OnCuda(q)) {
      const DLTensor* const wanted[] = {g.d_bias_a,         g.d_bias_b,        g.d_grape_a,
                                        g.d_grape_b,        g.d_grape_omega,   g.d_shaw_key_table,
                                        g.d_shaw_value_table, g.d_sinks,       g.d_algebraic,
                                        g.d_algebraic_tree, g.d_algebraic_grid};
      bool any = false;
      for (const DLTensor* t : wanted) any = any || t != nullptr;
      return gpe::c_api::attn::CudaBackward(options, q, k, v, o, lse, d_o, dq, dk, dv, any);
    }
    return BackwardImpl(options, q, k, v, o, lse, d_o, dq, dk, dv, g.d_shaw_key_table,
                        g.d_shaw_value_table, g.d_bias_a, g.d_bias_b, &g);
  });
}
