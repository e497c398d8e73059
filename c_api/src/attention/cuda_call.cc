#include "c_api/src/attention/cuda_call.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "attention/descriptor.h"
#include "c_api/cuda/plugin.h"
#include "c_api/include/gpe/attention.h"
#include "c_api/include/gpe/bias.h"
#include "c_api/src/attention/call.h"
#include "c_api/src/common/checks.h"
#include "c_api/src/common/cuda_plugin.h"
#include "c_api/src/common/tensor_view.h"
#include "c_api/src/sequence/bias_handle.h"
#include "c_api/src/sequence/rope_handle.h"
#include "dlpack/dlpack.h"
#include "encodings/sequence/bias.h"

namespace gpe::c_api::attn {
namespace {

namespace plug = ::gpe::c_api::cuda_plugin;

struct Named {
  const DLTensor* t;
  const char* name;
};

// Every given tensor on q's CUDA device.
absl::Status OneDevice(absl::Span<const Named> tensors, int32_t* device) {
  const DLTensor* q = tensors[0].t;
  *device = q->device.device_id;
  for (const Named& n : tensors) {
    if (n.t == nullptr) continue;
    if (DeviceType(n.t) != kDLCUDA || n.t->device.device_id != *device) {
      return Bad(absl::StrCat("q is on CUDA device ", *device, " but ", n.name,
                              " is on DLPack device type ", DeviceType(n.t), ", id ",
                              n.t->device.device_id,
                              ": every tensor of a call is on one device (index arrays "
                              "may also be on the CPU)"));
    }
  }
  return absl::OkStatus();
}

bool SameDType(const DLTensor* a, const DLTensor* b) {
  return a->dtype.code == b->dtype.code && a->dtype.bits == b->dtype.bits &&
         a->dtype.lanes == b->dtype.lanes;
}

absl::Status NotOnCuda(absl::string_view what) {
  return absl::UnimplementedError(absl::StrCat(
      what, " is not available for tensors on a CUDA device yet (the CUDA kernels take "
            "causal masks, GQA, padded and packed batches, positions, RoPE and ALiBi); run "
            "this call on CPU tensors"));
}

// The options the CUDA kernels lack, refused by name.
absl::Status SupportedOnCuda(const gpe_attention_options& o) {
  // Out-of-range values are bad input on any device (before "not on CUDA").
  if (absl::Status s = CheckArithmetic(o); !s.ok()) return s;
  const struct {
    bool set;
    const char* name;
  } unsupported[] = {
      {o.grape_m != nullptr, "grape_m (GRAPE-M)"},
      {o.algebraic != nullptr, "algebraic"},
      {o.algebraic_tree != nullptr, "algebraic_tree"},
      {o.algebraic_grid != nullptr, "algebraic_grid"},
      {o.rope_axes > 1, "rope_axes (axial RoPE)"},
      {o.rope_sections != nullptr, "rope_sections (M-RoPE)"},
      {o.q_axes != nullptr || o.k_axes != nullptr, "q_axes / k_axes"},
      {o.q_tree_offsets != nullptr || o.q_tree_children != nullptr ||
           o.k_tree_offsets != nullptr || o.k_tree_children != nullptr,
       "tree addresses"},
      {o.shaw_key_table != nullptr || o.shaw_value_table != nullptr, "Shaw tables"},
      {o.window != 0, "window"},
      {o.softcap != 0.0, "softcap"},
      {o.sinks != nullptr, "sinks"},
      {o.attn_mask != nullptr, "attn_mask"},
      {o.kv_lengths != nullptr, "kv_lengths"},
      {o.block_table != nullptr, "block_table (a paged KV cache)"},
      {o.bf16_arithmetic != GPE_BF16_ARITHMETIC_AUTO, "bf16_arithmetic (the CPU kernels')"},
      {o.float32_arithmetic != GPE_FLOAT32_ARITHMETIC_EXACT,
       "float32_arithmetic (the CPU kernels')"},
  };
  for (const auto& u : unsupported) {
    if (u.set) return NotOnCuda(u.name);
  }
  if (o.rope != nullptr && o.rope->impl.options().xpos.enabled) {
    return NotOnCuda("a gpe_rope with xPos");
  }
  if (o.rope != nullptr && o.rope->impl.options().num_axes != 1) {
    return NotOnCuda("a multi-axis gpe_rope (axial RoPE, M-RoPE)");
  }
  if (o.bias != nullptr && o.bias->kind != GPE_BIAS_ALIBI) {
    return NotOnCuda("a bias other than ALiBi (T5, FoX, GRAPE-A, GRAPE-AP)");
  }
  return absl::OkStatus();
}

plug::CallStrides CallStridesOf(const att::Strides& s) { return {s.batch, s.token, s.head}; }

// What forward and backward share: the devices, the options, the float tensors' dtypes,
// the index arrays on the host, Prepare over the host descriptions, and the call's
// fields from it. `floats`: q, k, v first, then the other float tensors given.
struct CudaPrepared {
  gpe_attention_options options;
  Call call;
  HostIndex index[4];
  DLTensor qh, kh, vh;
  plug::CudaCall cuda;
  std::vector<double> slopes;
};

absl::Status PrepareCuda(const gpe_attention_options* options, absl::Span<const Named> floats,
                         const DLTensor* lse, CudaPrepared* p) {
  if (options == nullptr) return Bad("options is NULL");
  for (const Named& n : floats.subspan(0, 3)) {
    if (n.t == nullptr) return Bad(absl::StrCat(n.name, " is NULL"));
  }
  if (absl::Status s = CopyOptions(*options, &p->options); !s.ok()) return s;
  gpe_attention_options& o = p->options;
  int32_t device = 0;
  std::vector<Named> all(floats.begin(), floats.end());
  all.push_back({lse, "lse"});
  if (absl::Status s = OneDevice(all, &device); !s.ok()) return s;
  const DLTensor* q = floats[0].t;
  if (!SameDType(floats[1].t, q) && SameDType(floats[1].t, floats[2].t) &&
      floats[1].t->dtype.bits == 16 && q->dtype.bits >= 16) {
    return NotOnCuda("a 16-bit KV cache under queries of another dtype");
  }
  for (const Named& n : floats) {
    if (n.t != nullptr && !SameDType(n.t, q)) {
      return Bad(absl::StrCat(n.name, " and q differ in dtype: on a CUDA device q, k, v, o and "
                              "the gradients take one dtype (float32, bfloat16 or float16)"));
    }
  }
  if (absl::Status s = SupportedOnCuda(o); !s.ok()) return s;
  const char* index_names[] = {"q_positions", "k_positions", "cu_seqlens_q", "cu_seqlens_k"};
  const DLTensor** index_slots[] = {&o.q_positions, &o.k_positions, &o.cu_seqlens_q,
                                    &o.cu_seqlens_k};
  for (int i = 0; i < 4; ++i) {
    if (absl::Status s =
            IndexOnHost(index_slots[i], index_names[i], device, o.cuda_stream, &p->index[i]);
        !s.ok()) {
      return s;
    }
  }
  p->qh = HostDescription(floats[0].t, true);
  p->kh = HostDescription(floats[1].t, true);
  p->vh = HostDescription(floats[2].t, true);
  Call& c = p->call;
  if (absl::Status s = Prepare(&o, &p->qh, &p->kh, &p->vh, &c); !s.ok()) return s;
  if (c.dtype == DType::kFloat64) {
    return absl::UnimplementedError(
        "float64 tensors on a CUDA device: float64 runs the exact reference, on the CPU only");
  }
  // After the float64 refusal: a float64 q is refused for its dtype, not told of
  // float32's range.
  if (o.rope != nullptr) {
    if (absl::Status s = gpe::c_api::CheckAttentionFactorFits(o.rope->impl, q->dtype); !s.ok()) {
      return s;
    }
  }
  const att::AttentionArgs& a = c.args;
  if (a.value_dim() != a.head_dim) {
    return NotOnCuda("a value head size different from head_dim");
  }
  plug::CudaCall& cc = p->cuda;
  cc.device = device;
  cc.dtype = IsFloat16(q)                    ? plug::CudaCallDType::kFloat16
             : c.dtype == DType::kBFloat16 ? plug::CudaCallDType::kBFloat16
                                           : plug::CudaCallDType::kFloat32;
  cc.heads_q = a.num_q_heads;
  cc.heads_kv = a.num_kv_heads;
  cc.head_dim = a.head_dim;
  cc.tokens_q = a.num_q_tokens();
  cc.tokens_k = a.num_k_tokens();
  if (a.layout == att::Layout::kTHD) {
    cc.cu_seqlens_q = c.cu_q.data();
    cc.cu_seqlens_k = c.cu_k.data();
    cc.num_seqs = a.batch;
  } else {
    cc.batch = a.batch;
    cc.seq_q = a.seq_len_q;
    cc.seq_k = a.seq_len_k;
  }
  cc.q = c.q.data;
  cc.k = c.k.data;
  cc.v = c.v.data;
  cc.sq = CallStridesOf(a.q);
  cc.sk = CallStridesOf(a.k);
  cc.sv = CallStridesOf(a.v);
  cc.causal = a.causal;
  cc.softmax_scale = o.softmax_scale;
  if (!a.q_positions.empty()) {
    cc.q_positions = a.q_positions.data();
    cc.k_positions = a.k_positions.data();
  }
  if (o.rope != nullptr) {
    cc.rope = &o.rope->impl;
  } else if (c.rope.has_value()) {
    cc.rope = &*c.rope;
  }
  if (o.bias != nullptr) {
    const encodings::sequence::AlibiBias& alibi = *o.bias->alibi;
    if (alibi.num_heads() != a.num_q_heads) {
      return Bad(absl::StrCat("the ALiBi bias has ", alibi.num_heads(), " heads, q has ",
                              a.num_q_heads));
    }
    p->slopes.assign(alibi.slopes().begin(), alibi.slopes().end());
    cc.alibi_slopes = p->slopes.data();
    cc.alibi_symmetric = alibi.form() == encodings::sequence::AlibiForm::kSymmetric;
  }
  cc.stream = o.cuda_stream;
  return absl::OkStatus();
}

absl::Status RunOnPlugin(const plug::CudaCall& call, bool backward) {
  absl::StatusOr<const plug::PluginTable*> plugin = CudaPlugin();
  if (!plugin.ok()) return plugin.status();
  char message[1024] = "";
  const int code = (*plugin)->attention(&call, backward ? 1 : 0, message, sizeof message);
  return FromPlugin(code, message);
}

}  // namespace

bool OnCuda(const DLTensor* q) { return OnCudaDevice(q); }

absl::Status CudaForward(const gpe_attention_options* options, const DLTensor* q,
                         const DLTensor* k, const DLTensor* v, DLTensor* o, DLTensor* lse) {
  CudaPrepared p;
  const Named floats[] = {{q, "q"}, {k, "k"}, {v, "v"}, {o, "o"}};
  if (absl::Status s = PrepareCuda(options, floats, lse, &p); !s.ok()) return s;
  Call& c = p.call;
  const bool packed = c.args.layout == att::Layout::kTHD;
  if (o == nullptr) return Bad("o is NULL");
  const DLTensor oh = HostDescription(o, true);
  absl::StatusOr<TensorView> ov = OutputLike(&oh, "o", c.OutputShape(), "q", packed);
  if (!ov.ok()) return ov.status();
  DLTensor lh;
  if (lse != nullptr) lh = HostDescription(lse, true);
  absl::StatusOr<TensorView> lv = LseOf(lse != nullptr ? &lh : nullptr, c.args, c.dtype);
  if (!lv.ok()) return lv.status();
  const NamedView ins[] = {{&c.q, "q"}, {&c.k, "k"}, {&c.v, "v"}};
  const NamedView outs[] = {{&*ov, "o"}, {lse != nullptr ? &*lv : nullptr, "lse"}};
  if (absl::Status s = CheckOutputs(outs, ins); !s.ok()) return s;
  c.args.o = StridesOf(*ov, packed);
  // What the CPU kernels check before they run (cu_seqlens against the tokens, strides
  // that keep rows apart, positions' sizes, the bias's heads): host data only.
  if (absl::Status s = att::ValidateAttention(c.args); !s.ok()) return s;
  p.cuda.o = ov->data;
  p.cuda.so = CallStridesOf(c.args.o);
  p.cuda.lse = static_cast<float*>(lv->data);
  return RunOnPlugin(p.cuda, /*backward=*/false);
}

absl::Status CudaBackward(const gpe_attention_options* options, const DLTensor* q,
                          const DLTensor* k, const DLTensor* v, const DLTensor* o,
                          const DLTensor* lse, const DLTensor* d_o, DLTensor* dq, DLTensor* dk,
                          DLTensor* dv, bool parameter_grads) {
  CudaPrepared p;
  const Named floats[] = {{q, "q"},     {k, "k"},   {v, "v"},   {o, "o"},
                          {d_o, "d_o"}, {dq, "dq"}, {dk, "dk"}, {dv, "dv"}};
  if (absl::Status s = PrepareCuda(options, floats, lse, &p); !s.ok()) return s;
  if (parameter_grads) {
    return NotOnCuda("the gradients of an encoding's parameters");
  }
  Call& c = p.call;
  if (p.cuda.dtype == plug::CudaCallDType::kFloat32) {
    return NotOnCuda("the backward in float32 (it takes bfloat16 or float16)");
  }
  if (c.args.head_dim != 64 && c.args.head_dim != 128) {
    return NotOnCuda(
        absl::StrCat("the backward with head_dim ", c.args.head_dim, " (it takes 64 or 128)"));
  }
  const bool packed = c.args.layout == att::Layout::kTHD;
  if ((o == nullptr) != (lse == nullptr)) {
    return Bad("give both o and lse from the forward, or neither (recomputed)");
  }
  if (d_o == nullptr) return Bad("d_o is NULL");
  const TensorView o_shape = c.OutputShape();
  const DLTensor gh = HostDescription(d_o, true);
  absl::StatusOr<TensorView> gv = OutputLike(&gh, "d_o", o_shape, "q", packed);
  if (!gv.ok()) return gv.status();
  TensorView ov;
  DLTensor oh, lh;
  if (o != nullptr) {
    oh = HostDescription(o, true);
    absl::StatusOr<TensorView> t = OutputLike(&oh, "o", o_shape, "q", packed);
    if (!t.ok()) return t.status();
    if (!SameStrides(*t, *gv)) {
      return Bad("o and d_o must have the same strides (on dimensions of size above 1)");
    }
    ov = *t;
    lh = HostDescription(lse, true);
  }
  absl::StatusOr<TensorView> lv = LseOf(lse != nullptr ? &lh : nullptr, c.args, c.dtype);
  if (!lv.ok()) return lv.status();
  TensorView views[3];
  DLTensor hosts[3];
  struct Out {
    DLTensor* t;
    const char* name;
    const TensorView* like;
  } grads[] = {{dq, "dq", &c.q}, {dk, "dk", &c.k}, {dv, "dv", &c.v}};
  for (int i = 0; i < 3; ++i) {
    if (grads[i].t == nullptr) continue;
    hosts[i] = HostDescription(grads[i].t, true);
    absl::StatusOr<TensorView> t = View(&hosts[i], grads[i].name, packed);
    if (!t.ok()) return t.status();
    const char* like_name = i == 0 ? "q" : i == 1 ? "k" : "v";
    if (absl::Status s = CheckSameLayout(*t, grads[i].name, *grads[i].like, like_name);
        !s.ok()) {
      return s;
    }
    views[i] = *t;
  }
  const NamedView ins[] = {{&c.q, "q"},
                           {&c.k, "k"},
                           {&c.v, "v"},
                           {&*gv, "d_o"},
                           {o != nullptr ? &ov : nullptr, "o"},
                           {lse != nullptr ? &*lv : nullptr, "lse"}};
  const NamedView outs[] = {{dq != nullptr ? &views[0] : nullptr, "dq"},
                            {dk != nullptr ? &views[1] : nullptr, "dk"},
                            {dv != nullptr ? &views[2] : nullptr, "dv"}};
  if (absl::Status s = CheckOutputs(outs, ins); !s.ok()) return s;
  c.args.o = StridesOf(*gv, packed);  // o and d_o share these
  if (absl::Status s = att::ValidateAttention(c.args); !s.ok()) return s;
  plug::CudaCall& cc = p.cuda;
  cc.so = CallStridesOf(c.args.o);
  cc.d_o = gv->data;
  cc.o = o != nullptr ? ov.data : nullptr;
  cc.lse = lse != nullptr ? static_cast<float*>(lv->data) : nullptr;
  cc.dq = dq != nullptr ? views[0].data : nullptr;
  cc.dk = dk != nullptr ? views[1].data : nullptr;
  cc.dv = dv != nullptr ? views[2].data : nullptr;
  if (cc.dq == nullptr && cc.dk == nullptr && cc.dv == nullptr) return absl::OkStatus();
  return RunOnPlugin(cc, /*backward=*/true);
}

}  // namespace gpe::c_api::attn
