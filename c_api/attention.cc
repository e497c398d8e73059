// The C ABI's attention (gpe.h, "Attention"): DLPack views and options validated here,
// then attention/cpu's CpuForward / CpuBackward (float32, bfloat16) or the exact
// ReferenceForward / ReferenceBackward<double> (float64) with the encoding built from the
// options (RoPE, GRAPE-M or algebraic rotations; any gpe_bias). Every entry point runs under Guard.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "attention/cpu/cpu_attention.h"
#include "attention/descriptor.h"
#include "attention/reference.h"
#include "c_api/checks.h"
#include "c_api/error.h"
#include "c_api/include/gpe/gpe.h"
#include "c_api/sequence_handles.h"
#include "c_api/tensor_view.h"
#include "encodings/sequence/bias.h"
#include "encodings/sequence/rope.h"

using gpe::c_api::CheckDisjoint;
using gpe::c_api::CheckStructSize;
using gpe::c_api::ContiguousPositions;
using gpe::c_api::DType;
using gpe::c_api::Guard;
using gpe::c_api::NamedView;
using gpe::c_api::TensorView;
using gpe::c_api::ViewTensor;
namespace att = gpe::attention;
namespace seq = gpe::encodings::sequence;

namespace {

constexpr DType kAttnTypes[] = {DType::kFloat32, DType::kBFloat16, DType::kFloat64};
constexpr DType kInt[] = {DType::kInt64};
constexpr DType kF32[] = {DType::kFloat32};
constexpr DType kF64[] = {DType::kFloat64};

absl::Status Bad(const std::string& msg) { return absl::InvalidArgumentError(msg); }

std::string ShapeOf(const TensorView& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.shape.size(); ++i) absl::StrAppend(&s, i ? ", " : "", v.shape[i]);
  return s + "]";
}

// Everything one call needs, owning the encodings and position copies it points to.
struct Call {
  att::AttentionArgs args;
  DType dtype = DType::kFloat32;
  TensorView q, k, v;
  std::vector<int64_t> cu_q, cu_k, pos_q, pos_k;
  std::optional<seq::Rope> rope;
  std::unique_ptr<att::RowTransform> transform;
};

// A q-side or k-side tensor of the layout: its view and strides.
absl::StatusOr<TensorView> View(const DLTensor* t, const char* name, bool packed) {
  if (t == nullptr) return Bad(absl::StrCat(name, " is NULL"));
  absl::StatusOr<TensorView> v = ViewTensor(t, name, packed ? 3 : 4, kAttnTypes);
  if (!v.ok()) return v.status();
  if (v->numel() == 0) {
    // An empty tensor has no layout (NumPy and PyTorch may give it any strides): take the
    // compact row-major one, so an empty sequence or key shard is never rejected for it.
    int64_t stride = 1;
    for (size_t i = v->shape.size(); i-- > 0;) {
      v->strides[i] = stride;
      stride *= std::max<int64_t>(v->shape[i], 1);
    }
    return v;
  }
  if (v->shape.back() > 1 && v->strides.back() != 1) {
    return Bad(absl::StrCat(name, ": head_dim must be contiguous (stride 1), got stride ",
                            v->strides.back()));
  }
  return v;
}

att::Strides StridesOf(const TensorView& v, bool packed) {
  att::Strides s;
  if (packed) {
    s.token = v.strides[0];
    s.head = v.strides[1];
  } else {
    s.batch = v.strides[0];
    s.token = v.strides[1];
    s.head = v.strides[2];
  }
  return s;
}

absl::Status CheckSameLayout(const TensorView& a, const char* an, const TensorView& b,
                             const char* bn) {
  if (a.dtype != b.dtype) {
    return Bad(absl::StrCat(an, " is ", gpe::c_api::DTypeName(a.dtype), " but ", bn, " is ",
                            gpe::c_api::DTypeName(b.dtype)));
  }
  if (a.shape != b.shape) {
    return Bad(absl::StrCat(an, " has shape ", ShapeOf(a), ", ", bn, " has ", ShapeOf(b)));
  }
  if (a.strides != b.strides) {
    return Bad(absl::StrCat(an, " must have the strides of ", bn));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int64_t>> Int64Vector(const DLTensor* t, const char* name) {
  absl::StatusOr<TensorView> v = ViewTensor(t, name, 1, kInt);
  if (!v.ok()) return v.status();
  std::vector<int64_t> storage;
  absl::Span<const int64_t> s = ContiguousPositions(*v, &storage);
  return std::vector<int64_t>(s.begin(), s.end());
}

// Options and q, k, v into `c`.
absl::Status Prepare(const gpe_attention_options* options, const DLTensor* q, const DLTensor* k,
                     const DLTensor* v, Call* c) {
  if (options == nullptr) return Bad("options is NULL");
  if (absl::Status s = CheckStructSize(options->struct_size, sizeof(gpe_attention_options),
                                       sizeof(gpe_attention_options), "gpe_attention_options");
      !s.ok()) {
    return s;
  }
  const gpe_attention_options& o = *options;
  if (o.causal != 0 && o.causal != 1) return Bad("causal must be 0 or 1");
  if (!std::isfinite(o.softmax_scale) || o.softmax_scale < 0) {
    return Bad(absl::StrCat("softmax_scale must be finite and >= 0 (0: default), got ",
                            o.softmax_scale));
  }
  if (o.num_threads < 0 || o.num_threads > 1024) {
    return Bad(absl::StrCat("num_threads must be in [0, 1024], got ", o.num_threads));
  }
  if ((o.cu_seqlens_q == nullptr) != (o.cu_seqlens_k == nullptr)) {
    return Bad("give both cu_seqlens_q and cu_seqlens_k (packed layout) or neither");
  }
  if ((o.q_positions == nullptr) != (o.k_positions == nullptr)) {
    return Bad("give both q_positions and k_positions or neither");
  }
  const bool packed = o.cu_seqlens_q != nullptr;
  absl::StatusOr<TensorView> qv = View(q, "q", packed);
  if (!qv.ok()) return qv.status();
  absl::StatusOr<TensorView> kv = View(k, "k", packed);
  if (!kv.ok()) return kv.status();
  absl::StatusOr<TensorView> vv = View(v, "v", packed);
  if (!vv.ok()) return vv.status();
  c->q = *qv;
  c->k = *kv;
  c->v = *vv;
  c->dtype = qv->dtype;
  if (kv->dtype != c->dtype || vv->dtype != c->dtype) {
    return Bad("q, k and v must have one dtype (float32, bfloat16 or float64)");
  }
  if (kv->shape != vv->shape) {
    return Bad(absl::StrCat("k has shape ", ShapeOf(*kv), ", v has ", ShapeOf(*vv)));
  }
  const size_t n = qv->shape.size();
  if (kv->shape[n - 1] != qv->shape[n - 1]) {
    return Bad(absl::StrCat("head_dim differs: q ", ShapeOf(*qv), ", k ", ShapeOf(*kv)));
  }
  att::AttentionArgs& a = c->args;
  a.layout = packed ? att::Layout::kTHD : att::Layout::kBSHD;
  if (packed) {
    absl::StatusOr<std::vector<int64_t>> cq = Int64Vector(o.cu_seqlens_q, "cu_seqlens_q");
    if (!cq.ok()) return cq.status();
    absl::StatusOr<std::vector<int64_t>> ck = Int64Vector(o.cu_seqlens_k, "cu_seqlens_k");
    if (!ck.ok()) return ck.status();
    c->cu_q = *std::move(cq);
    c->cu_k = *std::move(ck);
    if (c->cu_q.size() != c->cu_k.size()) {
      return Bad(absl::StrCat("cu_seqlens_q has ", c->cu_q.size(), " entries, cu_seqlens_k ",
                              c->cu_k.size()));
    }
    a.cu_seqlens_q = c->cu_q;
    a.cu_seqlens_k = c->cu_k;
    a.batch = static_cast<int64_t>(c->cu_q.size()) - 1;
    a.seq_len_q = qv->shape[0];
    a.seq_len_k = kv->shape[0];
    a.num_q_heads = qv->shape[1];
    a.num_kv_heads = kv->shape[1];
    a.head_dim = qv->shape[2];
  } else {
    if (kv->shape[0] != qv->shape[0]) {
      return Bad(absl::StrCat("batch differs: q ", ShapeOf(*qv), ", k ", ShapeOf(*kv)));
    }
    a.batch = qv->shape[0];
    a.seq_len_q = qv->shape[1];
    a.seq_len_k = kv->shape[1];
    a.num_q_heads = qv->shape[2];
    a.num_kv_heads = kv->shape[2];
    a.head_dim = qv->shape[3];
  }
  if (a.head_dim < 1) return Bad("head_dim must be >= 1");
  a.q = StridesOf(*qv, packed);
  a.k = StridesOf(*kv, packed);
  a.v = StridesOf(*vv, packed);
  a.causal = o.causal == 1;
  if (o.softmax_scale > 0) a.softmax_scale = o.softmax_scale;
  if (o.q_positions != nullptr) {
    absl::StatusOr<std::vector<int64_t>> pq = Int64Vector(o.q_positions, "q_positions");
    if (!pq.ok()) return pq.status();
    absl::StatusOr<std::vector<int64_t>> pk = Int64Vector(o.k_positions, "k_positions");
    if (!pk.ok()) return pk.status();
    c->pos_q = *std::move(pq);
    c->pos_k = *std::move(pk);
    // With no query or no key tokens every row is empty whatever the positions; the
    // descriptor reads an empty list as "default", so drop both rather than reject an
    // empty shard's (correctly) empty positions.
    const bool no_rows = (c->pos_q.empty() && a.num_q_tokens() == 0) ||
                         (c->pos_k.empty() && a.num_k_tokens() == 0);
    if (!no_rows) {
      a.q_positions = c->pos_q;
      a.k_positions = c->pos_k;
    }
  }
  const int encodings =
      (o.rope_dim != 0) + (o.grape_m != nullptr) + (o.algebraic != nullptr);
  if (encodings > 1) return Bad("at most one of rope_dim, grape_m and algebraic may be set");
  if (o.rope_dim != 0) {
    if (o.rope_pairing != GPE_PAIRING_INTERLEAVED && o.rope_pairing != GPE_PAIRING_HALF_SPLIT) {
      return Bad(absl::StrCat("rope_pairing must be GPE_PAIRING_*, got ", o.rope_pairing));
    }
    absl::StatusOr<seq::RopeFrequencies> f = seq::DefaultRopeFrequencies(o.rope_dim, o.rope_base);
    if (!f.ok()) return f.status();
    seq::RopeOptions ro;
    ro.head_dim = a.head_dim;
    ro.rotary_dim = o.rope_dim;
    ro.pairing = o.rope_pairing == GPE_PAIRING_INTERLEAVED ? gpe::group::PlanePairing::kInterleaved
                                                           : gpe::group::PlanePairing::kHalfSplit;
    absl::StatusOr<seq::Rope> rope = seq::Rope::Create(ro, *std::move(f));
    if (!rope.ok()) return rope.status();
    c->rope.emplace(*std::move(rope));
    c->transform = std::make_unique<att::RopeRowTransform>(*c->rope);
  } else if (o.grape_m != nullptr) {
    c->transform =
        std::make_unique<att::GrapeMRowTransform<seq::GrapeMProduct>>(o.grape_m->impl);
  } else if (o.algebraic != nullptr) {
    c->transform = std::make_unique<att::AlgebraicRowTransform>(o.algebraic->impl);
  }
  a.q_transform = a.k_transform = c->transform.get();
  if (o.bias != nullptr) a.biases = {&o.bias->base()};
  return absl::OkStatus();
}

// lse: [tokens_q, heads_q], compact row-major; float64 when q is float64, else float32.
// Returns the view (data null when `t` is null).
absl::StatusOr<TensorView> LseOf(const DLTensor* t, const att::AttentionArgs& a, DType dtype) {
  if (t == nullptr) return TensorView{};
  const bool f64 = dtype == DType::kFloat64;
  absl::StatusOr<TensorView> v = ViewTensor(t, "lse", 2, f64 ? absl::Span<const DType>(kF64)
                                                               : absl::Span<const DType>(kF32));
  if (!v.ok()) {
    return Bad(absl::StrCat(v.status().message(), " (lse is ", f64 ? "float64" : "float32",
                            " for ", gpe::c_api::DTypeName(dtype), " q, k, v)"));
  }
  if (v->shape[0] != a.num_q_tokens() || v->shape[1] != a.num_q_heads) {
    return Bad(absl::StrCat("lse must be [", a.num_q_tokens(), ", ", a.num_q_heads, "], got ",
                            ShapeOf(*v)));
  }
  if (v->numel() > 1 && (v->strides[1] != 1 || v->strides[0] != a.num_q_heads)) {
    return Bad("lse must be compact row-major");
  }
  return v;
}

absl::StatusOr<TensorView> OutputLike(const DLTensor* t, const char* name, const TensorView& like,
                                      const char* like_name, bool packed) {
  absl::StatusOr<TensorView> v = View(t, name, packed);
  if (!v.ok()) return v.status();
  if (v->dtype != like.dtype || v->shape != like.shape) {
    return Bad(absl::StrCat(name, " must have the dtype and shape of ", like_name, " ",
                            ShapeOf(like), ", got ", ShapeOf(*v)));
  }
  return v;
}

using BF = seq::BFloat16;

// Inputs may share memory (q = k = v is fine); each output must be disjoint from every
// input and every other output. Null entries are skipped.
absl::Status CheckOutputs(absl::Span<const NamedView> outputs, absl::Span<const NamedView> inputs) {
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (outputs[i].first == nullptr) continue;
    for (const NamedView& in : inputs) {
      const NamedView pair[] = {outputs[i], in};
      if (absl::Status s = CheckDisjoint(pair); !s.ok()) return s;
    }
    for (size_t j = i + 1; j < outputs.size(); ++j) {
      const NamedView pair[] = {outputs[i], outputs[j]};
      if (absl::Status s = CheckDisjoint(pair); !s.ok()) return s;
    }
  }
  return absl::OkStatus();
}

}  // namespace

gpe_status gpe_attention_forward(const gpe_attention_options* options, const DLTensor* q,
                                 const DLTensor* k, const DLTensor* v, DLTensor* o,
                                 DLTensor* lse) {
  return Guard([&]() -> absl::Status {
    Call c;
    if (absl::Status s = Prepare(options, q, k, v, &c); !s.ok()) return s;
    const bool packed = c.args.layout == att::Layout::kTHD;
    absl::StatusOr<TensorView> ov = OutputLike(o, "o", c.q, "q", packed);
    if (!ov.ok()) return ov.status();
    c.args.o = StridesOf(*ov, packed);
    absl::StatusOr<TensorView> lv = LseOf(lse, c.args, c.dtype);
    if (!lv.ok()) return lv.status();
    if (absl::Status s = att::ValidateAttention(c.args); !s.ok()) return s;
    const NamedView ins[] = {{&c.q, "q"}, {&c.k, "k"}, {&c.v, "v"}};
    const NamedView outs[] = {{&*ov, "o"}, {lse != nullptr ? &*lv : nullptr, "lse"}};
    if (absl::Status s = CheckOutputs(outs, ins); !s.ok()) return s;
    if (c.dtype == DType::kFloat64) {
      // The exact oracle (reference.h): double throughout, single-threaded.
      return att::ReferenceForward(c.args, c.q.typed<const double>(), c.k.typed<const double>(),
                                   c.v.typed<const double>(), ov->typed<double>(),
                                   lv->typed<double>());
    }
    att::CpuAttentionOptions opt;
    opt.num_threads = options->num_threads;
    if (c.dtype == DType::kFloat32) {
      return att::CpuForward(c.args, c.q.typed<const float>(), c.k.typed<const float>(),
                             c.v.typed<const float>(), ov->typed<float>(), lv->typed<float>(),
                             opt);
    }
    return att::CpuForward(c.args, c.q.typed<const BF>(), c.k.typed<const BF>(),
                           c.v.typed<const BF>(), ov->typed<BF>(), lv->typed<float>(), opt);
  });
}

gpe_status gpe_attention_backward(const gpe_attention_options* options, const DLTensor* q,
                                  const DLTensor* k, const DLTensor* v, const DLTensor* o,
                                  const DLTensor* lse, const DLTensor* d_o, DLTensor* dq,
                                  DLTensor* dk, DLTensor* dv) {
  return Guard([&]() -> absl::Status {
    Call c;
    if (absl::Status s = Prepare(options, q, k, v, &c); !s.ok()) return s;
    const bool packed = c.args.layout == att::Layout::kTHD;
    if ((o == nullptr) != (lse == nullptr)) {
      return Bad("give both o and lse from the forward, or neither (recomputed)");
    }
    absl::StatusOr<TensorView> gv = OutputLike(d_o, "d_o", c.q, "q", packed);
    if (!gv.ok()) return gv.status();
    c.args.o = StridesOf(*gv, packed);  // o and d_o share these strides
    TensorView ov;
    if (o != nullptr) {
      absl::StatusOr<TensorView> t = OutputLike(o, "o", c.q, "q", packed);
      if (!t.ok()) return t.status();
      if (t->strides != gv->strides) return Bad("o and d_o must have the same strides");
      ov = *t;
    }
    absl::StatusOr<TensorView> lv = LseOf(lse, c.args, c.dtype);
    if (!lv.ok()) return lv.status();
    if (absl::Status s = att::ValidateAttention(c.args); !s.ok()) return s;
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
                             {o != nullptr ? &ov : nullptr, "o"}};
    const NamedView outs[] = {{dq != nullptr ? &dqv : nullptr, "dq"},
                              {dk != nullptr ? &dkv : nullptr, "dk"},
                              {dv != nullptr ? &dvv : nullptr, "dv"}};
    if (absl::Status s = CheckOutputs(outs, ins); !s.ok()) return s;
    if (c.dtype == DType::kFloat64) {
      // The exact oracle recomputes the forward itself: o and lse, checked above, are unused.
      return att::ReferenceBackward(c.args, c.q.typed<const double>(), c.k.typed<const double>(),
                                    c.v.typed<const double>(), gv->typed<const double>(),
                                    dq ? dqv.typed<double>() : nullptr,
                                    dk ? dkv.typed<double>() : nullptr,
                                    dv ? dvv.typed<double>() : nullptr);
    }
    const float* l = lv->typed<const float>();
    att::CpuAttentionOptions opt;
    opt.num_threads = options->num_threads;
    if (c.dtype == DType::kFloat32) {
      return att::CpuBackward(c.args, c.q.typed<const float>(), c.k.typed<const float>(),
                              c.v.typed<const float>(),
                              o != nullptr ? ov.typed<const float>() : nullptr, l,
                              gv->typed<const float>(), dq ? dqv.typed<float>() : nullptr,
                              dk ? dkv.typed<float>() : nullptr, dv ? dvv.typed<float>() : nullptr,
                              nullptr, opt);
    }
    return att::CpuBackward(c.args, c.q.typed<const BF>(), c.k.typed<const BF>(),
                            c.v.typed<const BF>(), o != nullptr ? ov.typed<const BF>() : nullptr,
                            l, gv->typed<const BF>(), dq ? dqv.typed<BF>() : nullptr,
                            dk ? dkv.typed<BF>() : nullptr, dv ? dvv.typed<BF>() : nullptr,
                            nullptr, opt);
  });
}
