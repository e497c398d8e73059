// The entry points of cpu_attention.h: arguments checked and empty calls returned at
// once, then the dispatch: split-key decoding (decode.cc) for decoding shapes, query items
// (forward.cc) otherwise; the backward (backward.cc) once o and lse are at hand,
// recomputed by one forward pass when not given.
#include "attention/cpu/cpu_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <utility>
#include <vector>

#include "attention/cpu/backward.h"
#include "attention/cpu/decode.h"
#include "attention/cpu/element_rows.h"
#include "attention/cpu/forward.h"
#include "attention/cpu/kernels.h"
#include "attention/cpu/kernels_amx.h"
#include "attention/cpu/kernels_bf16.h"
#include "attention/cpu/plan.h"
#include "attention/cpu/workspace.h"

namespace gpe {
namespace attention {
namespace cpu {
namespace {

template <class T, class KV = T>
absl::Status ForwardImpl(const AttentionArgs& args, const T* q, const KV* k, const KV* v, T* o,
                         float* lse, const CpuAttentionOptions& options);
template <class T, class KV>
absl::Status GatheredPages(const AttentionArgs& args, const T* q, const KV* k, const KV* v, T* o,
                           float* lse, const CpuAttentionOptions& options);

template <class T, class KV>
absl::Status ForwardImpl(const AttentionArgs& args, const T* q, const KV* k, const KV* v, T* o,
                         float* lse, const CpuAttentionOptions& options) {
  if (absl::Status s = ValidateAttention(args); !s.ok()) return s;
  if (args.empty()) return absl::OkStatus();  // nothing to write (AttentionArgs::empty)
  absl::StatusOr<Plan> plan =
      MakePlan(args, options, std::is_same_v<KV, float>,
               std::is_same_v<T, encodings::sequence::BFloat16> &&
                   std::is_same_v<KV, encodings::sequence::BFloat16>);
  if (!plan.ok()) return plan.status();
  if (args.num_q_tokens() > 0 && (q == nullptr || o == nullptr)) {
    return Bad("null q or o tensor");
  }
  if (args.num_k_tokens() > 0 && (k == nullptr || v == nullptr)) {
    return Bad("null k or v tensor");
  }
  // Decoding shapes (few query rows per kv head, long KV caches): split the keys.
  const bool decode = IsDecodeShape(args, *plan);
  if (!decode && args.pages.enabled()) return GatheredPages(args, q, k, v, o, lse, options);
  Forward<T, KV> fwd(args, *plan, q, k, v, o, lse);
  if (absl::Status s = fwd.Prepare(); !s.ok()) return s;
  if (decode) return RunDecode(fwd, args, *plan);
  return RunForwardItems(fwd, args, *plan);
}

// A paged cache outside the decoding path (a prefill or a chunk of it against the
// cache): each sequence's used keys and values gathered into one dense bshd cache, then
// the dense forward. With kv_lengths the dense cache holds max_b kv_lengths[b] keys per
// sequence, not the block table's capacity (tables sized for the longest context made a
// 32-token prefill gather 16384 pages: 0.5 GB and 0.56 s), explicit key positions
// renumbered with it; structured key positions (per key token of the capacity) keep the
// capacity.
template <class T, class KV>
absl::Status GatheredPages(const AttentionArgs& args, const T* q, const KV* k, const KV* v, T* o,
                           float* lse, const CpuAttentionOptions& options) {
  const int64_t hkv = args.num_kv_heads, d = args.head_dim, dv = args.value_dim();
  const int64_t batch = args.num_sequences();
  int64_t cap = args.seq_len_k;
  if (!args.kv_lengths.empty() && args.k_structured.empty()) {
    cap = 1;  // not 0: a dense cache of no keys per sequence has no valid strides
    for (int64_t used : args.kv_lengths) cap = std::max(cap, used);
  }
  AttentionArgs dense = args;
  // A block table of no pages and no kv_lengths: no key in any sequence. The dense cache
  // keeps one key slot per sequence (strides that do not overlap) that kv_lengths of 0
  // leaves unused.
  std::vector<int64_t> no_keys;
  if (cap == 0 && args.k_structured.empty()) {
    no_keys.assign(static_cast<size_t>(batch), 0);
    dense.kv_lengths = no_keys;
    cap = 1;
  }
  dense.pages = {};
  dense.seq_len_k = cap;
  dense.k = ContiguousStrides(Layout::kBSHD, cap, hkv, d);
  dense.v = ContiguousStrides(Layout::kBSHD, cap, hkv, dv);
  std::vector<int64_t> kpos;
  if (!args.k_positions.empty() && cap != args.seq_len_k) {
    kpos.resize(static_cast<size_t>(batch * cap));
    for (int64_t b = 0; b < batch; ++b) {
      std::copy_n(args.k_positions.begin() + b * args.seq_len_k, cap, kpos.begin() + b * cap);
    }
    dense.k_positions = kpos;
  }
  std::vector<KV> kd(static_cast<size_t>(batch * cap * hkv * d), KV{});
  std::vector<KV> vd(static_cast<size_t>(batch * cap * hkv * dv), KV{});
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t from = args.k_begin(b), to = dense.k_begin(b);
    for (int64_t s = 0; s < args.k_end(b) - from; ++s) {
      for (int64_t g = 0; g < hkv; ++g) {
        std::copy_n(k + args.KOffset(args.k, from + s, g), d,
                    kd.data() + dense.KOffset(dense.k, to + s, g));
        std::copy_n(v + args.KOffset(args.v, from + s, g), dv,
                    vd.data() + dense.KOffset(dense.v, to + s, g));
      }
    }
  }
  return ForwardImpl<T, KV>(dense, q, kd.data(), vd.data(), o, lse, options);
}

// o and lse by one forward pass, for a backward given neither: o laid out with args.o's
// strides (where the backward reads it) in a buffer of the same extent.
template <class T>
absl::Status RecomputeOutputs(const AttentionArgs& args, const T* q, const T* k, const T* v,
                              const CpuAttentionOptions& options, std::vector<T>* o_strided,
                              std::vector<float>* lse_own) {
  const int64_t nq = args.num_q_tokens(), hq = args.num_q_heads, d = args.value_dim();
  std::vector<T> o_own;
  AttentionArgs fa = args;
  fa.o = fa.layout == Layout::kBSHD ? ContiguousStrides(Layout::kBSHD, args.seq_len_q, hq, d)
                                    : ContiguousStrides(Layout::kTHD, 0, hq, d);
  o_own.resize(static_cast<size_t>(nq * hq * d));
  lse_own->resize(static_cast<size_t>(nq * hq));
  if (absl::Status s = ForwardImpl<T>(fa, q, k, v, o_own.data(), lse_own->data(), options);
      !s.ok()) {
    return s;
  }
  int64_t extent = 0;
  for (int64_t t = 0; t < nq; ++t) {
    for (int64_t h = 0; h < hq; ++h) extent = std::max(extent, args.QOffset(args.o, t, h) + d);
  }
  o_strided->assign(static_cast<size_t>(extent), T{});
  for (int64_t t = 0; t < nq; ++t) {
    for (int64_t h = 0; h < hq; ++h) {
      std::copy(o_own.data() + (t * hq + h) * d, o_own.data() + (t * hq + h + 1) * d,
                o_strided->data() + args.QOffset(args.o, t, h));
    }
  }
  return absl::OkStatus();
}

// dL/dz_h = -sum_i p_sink(i) D_i with p_sink(i) = exp(z_h - lse_i) and D_i = <do_i, o_i>
// over the rows i of head h (descriptor.h, SINKS), added to grad in double. A -inf sink
// takes no share (and no gradient).
template <class T>
void SinkGradient(const AttentionArgs& args, const T* o, const float* lse, const T* d_o,
                  double* grad) {
  const int64_t nq = args.num_q_tokens(), hq = args.num_q_heads, d = args.value_dim();
  for (int64_t t = 0; t < nq; ++t) {
    for (int64_t h = 0; h < hq; ++h) {
      const double z = args.sinks[h];
      if (z == -std::numeric_limits<double>::infinity()) continue;
      const int64_t at = args.QOffset(args.o, t, h);
      double dsum = 0.0;
      for (int64_t c = 0; c < d; ++c) {
        dsum += static_cast<double>(ToF(d_o[at + c])) * static_cast<double>(ToF(o[at + c]));
      }
      grad[h] -= std::exp(z - static_cast<double>(lse[t * hq + h])) * dsum;
    }
  }
}

template <class T>
absl::Status BackwardImpl(const AttentionArgs& args, const T* q, const T* k, const T* v,
                          const T* o, const float* lse, const T* d_o, T* dq, T* dk, T* dv,
                          const BiasGradientSink& bias_sink, const CpuAttentionOptions& options,
                          const CpuBackwardExtras& extras = {}) {
  if (absl::Status s = ValidateAttention(args); !s.ok()) return s;
  if ((o == nullptr) != (lse == nullptr)) {
    return Bad("give both o and lse from the forward, or neither (recomputed)");
  }
  if (args.pages.enabled()) return Bad("a paged KV cache is for the forward (inference) only");
  // Table gradients start at zero (items add to them; an empty call leaves them so).
  if (absl::Status s = ZeroShawTableGradients(args, extras.shaw_key_table_grad,
                                              extras.shaw_value_table_grad);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = ZeroSinkGradient(args, extras.sink_grad); !s.ok()) return s;
  if (args.empty()) return absl::OkStatus();  // nothing else to write (AttentionArgs::empty)
  absl::StatusOr<Plan> plan = MakePlan(args, options, std::is_same_v<T, float>,
                                       std::is_same_v<T, encodings::sequence::BFloat16>);
  if (!plan.ok()) return plan.status();
  const int64_t nq = args.num_q_tokens(), nkt = args.num_k_tokens();
  if (nq > 0 && (q == nullptr || d_o == nullptr)) return Bad("null q or d_o tensor");
  if (nkt > 0 && (k == nullptr || v == nullptr)) return Bad("null k or v tensor");
  // Without the forward's o and lse, recompute them (one forward pass).
  std::vector<T> o_strided;
  std::vector<float> lse_own;
  const T* o_use = o;
  const float* lse_use = lse;
  if (o == nullptr && nq > 0) {
    if (absl::Status s = RecomputeOutputs(args, q, k, v, options, &o_strided, &lse_own);
        !s.ok()) {
      return s;
    }
    o_use = o_strided.data();
    lse_use = lse_own.data();
  }
  if (extras.sink_grad != nullptr) SinkGradient(args, o_use, lse_use, d_o, extras.sink_grad);
  if (absl::Status s =
          RunBackward(args, *plan, q, k, v, o_use, lse_use, d_o, dq, dk, dv, bias_sink, extras);
      !s.ok()) {
    return s;
  }
  // Cache rows past kv_lengths[b] belong to no sequence: their gradients are zero.
  for (int64_t b = 0; b < args.num_sequences() && !args.kv_lengths.empty(); ++b) {
    for (int64_t t = args.k_end(b); t < (b + 1) * args.seq_len_k; ++t) {
      for (int64_t g = 0; g < args.num_kv_heads; ++g) {
        const int64_t d = args.head_dim;
        if (dk != nullptr) std::fill_n(dk + args.KOffset(args.k, t, g), d, T{});
        if (dv != nullptr) std::fill_n(dv + args.KOffset(args.v, t, g), args.value_dim(), T{});
        if (extras.dk_rotated != nullptr) std::fill_n(extras.dk_rotated + args.KOffset(args.k, t, g), d, 0.0f);
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace cpu

using encodings::sequence::BFloat16;
using encodings::sequence::Float16;

absl::Status CpuForward(const AttentionArgs& args, const float* q, const float* k, const float* v,
                        float* o, float* lse, const CpuAttentionOptions& options) {
  return cpu::ForwardImpl<float>(args, q, k, v, o, lse, options);
}
absl::Status CpuForward(const AttentionArgs& args, const BFloat16* q, const BFloat16* k,
                        const BFloat16* v, BFloat16* o, float* lse,
                        const CpuAttentionOptions& options) {
  return cpu::ForwardImpl<BFloat16>(args, q, k, v, o, lse, options);
}
absl::Status CpuForward(const AttentionArgs& args, const float* q, const BFloat16* k,
                        const BFloat16* v, float* o, float* lse,
                        const CpuAttentionOptions& options) {
  return cpu::ForwardImpl<float, BFloat16>(args, q, k, v, o, lse, options);
}
absl::Status CpuForward(const AttentionArgs& args, const float* q, const Float16* k,
                        const Float16* v, float* o, float* lse,
                        const CpuAttentionOptions& options) {
  return cpu::ForwardImpl<float, Float16>(args, q, k, v, o, lse, options);
}
absl::Status CpuForward(const AttentionArgs& args, const BFloat16* q, const Float16* k,
                        const Float16* v, BFloat16* o, float* lse,
                        const CpuAttentionOptions& options) {
  return cpu::ForwardImpl<BFloat16, Float16>(args, q, k, v, o, lse, options);
}
absl::Status CpuBackward(const AttentionArgs& args, const float* q, const float* k,
                         const float* v, const float* o, const float* lse, const float* d_o,
                         float* dq, float* dk, float* dv, const BiasGradientSink& bias_sink,
                         const CpuAttentionOptions& options) {
  return cpu::BackwardImpl<float>(args, q, k, v, o, lse, d_o, dq, dk, dv, bias_sink, options);
}
absl::Status CpuBackward(const AttentionArgs& args, const float* q, const float* k,
                         const float* v, const float* o, const float* lse, const float* d_o,
                         float* dq, float* dk, float* dv, const BiasGradientSink& bias_sink,
                         const CpuAttentionOptions& options, const CpuBackwardExtras& extras) {
  return cpu::BackwardImpl<float>(args, q, k, v, o, lse, d_o, dq, dk, dv, bias_sink, options, extras);
}
absl::Status CpuBackward(const AttentionArgs& args, const BFloat16* q, const BFloat16* k,
                         const BFloat16* v, const BFloat16* o, const float* lse,
                         const BFloat16* d_o, BFloat16* dq, BFloat16* dk, BFloat16* dv,
                         const BiasGradientSink& bias_sink, const CpuAttentionOptions& options) {
  return cpu::BackwardImpl<BFloat16>(args, q, k, v, o, lse, d_o, dq, dk, dv, bias_sink, options);
}
absl::Status CpuBackward(const AttentionArgs& args, const BFloat16* q, const BFloat16* k,
                         const BFloat16* v, const BFloat16* o, const float* lse,
                         const BFloat16* d_o, BFloat16* dq, BFloat16* dk, BFloat16* dv,
                         const BiasGradientSink& bias_sink, const CpuAttentionOptions& options,
                         const CpuBackwardExtras& extras) {
  return cpu::BackwardImpl<BFloat16>(args, q, k, v, o, lse, d_o, dq, dk, dv, bias_sink, options,
                                     extras);
}

absl::StatusOr<int64_t> CpuForwardWorkspaceBytes(const AttentionArgs& args,
                                                 const CpuAttentionOptions& options) {
  if (absl::Status s = ValidateAttention(args); !s.ok()) return s;
  if (args.empty()) return int64_t{0};  // as ForwardImpl
  absl::StatusOr<cpu::Plan> plan = cpu::MakePlan(args, options);
  if (!plan.ok()) return plan.status();
  int64_t bytes;
  if (cpu::IsDecodeShape(args, *plan)) {  // RunDecode: workspaces without packed panels
    bytes = plan->threads * cpu::Workspace::Floats(cpu::DecodeWorkspacePlan(args, *plan),
                                                   /*decode=*/true) *
            static_cast<int64_t>(sizeof(float));
  } else {
    const int64_t items = static_cast<int64_t>(cpu::MakeItems(args, *plan).size());
    const int64_t threads = std::min<int64_t>(plan->threads, std::max<int64_t>(items, 1));
    bytes = threads * cpu::Workspace::Floats(*plan) * static_cast<int64_t>(sizeof(float));
  }
  bytes += static_cast<int64_t>(sizeof(int64_t)) * (args.num_q_tokens() + args.num_k_tokens());
  const int64_t table = 2 * args.head_dim * static_cast<int64_t>(sizeof(float));
  if (args.q_transform != nullptr) bytes += table * args.num_q_tokens();
  if (args.k_transform != nullptr) bytes += table * args.num_k_tokens();
  return bytes;
}

bool CpuHasBf16DotProducts() { return cpu::HasBf16DotProduct(); }
bool CpuAmxUsable() { return cpu::HasBf16DotProduct() && cpu::AmxUsable(); }
bool CpuBf16AutoUsesDotProducts() {
  return cpu::HasBf16DotProduct() && cpu::Bf16DotProductsFaster();
}

std::string CpuAttentionIsa() { return cpu::KernelTargetName(); }

}  // namespace attention
}  // namespace gpe
