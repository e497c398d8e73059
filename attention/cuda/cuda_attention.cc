#include "attention/cuda/cuda_attention.h"

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <tuple>

#include "absl/strings/str_cat.h"

namespace gpe::attention::cuda {
namespace {

absl::Status Bad(const std::string& m) { return absl::InvalidArgumentError(m); }

absl::Status CheckDevice(const void* p, const char* name) {
  if (p == nullptr) return Bad(absl::StrCat(name, " is null"));
  cudaPointerAttributes attr;
  const cudaError_t e = cudaPointerGetAttributes(&attr, p);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return Bad(absl::StrCat(name, " is not a CUDA pointer (", cudaGetErrorString(e), ")"));
  }
  if (attr.type != cudaMemoryTypeDevice && attr.type != cudaMemoryTypeManaged) {
    return Bad(absl::StrCat(name, " points to host memory; pass device memory"));
  }
  return absl::OkStatus();
}

}  // namespace

int64_t CudaAttentionWorkspaceBytes(const CudaAttentionArgs& a) {
  if (a.rope == nullptr || (a.dtype != CudaDType::kBFloat16 && a.dtype != CudaDType::kFloat16) ||
      a.kernel == CudaAttentionKernel::kSimt) {
    return 0;
  }
  const int64_t tokens = a.cu_seqlens_k != nullptr ? a.tokens_k : a.batch * a.seq_k;
  if (tokens <= 0 || a.heads_kv <= 0 || a.head_dim <= 0) return 0;
  return tokens * a.heads_kv * a.head_dim * 2;
}

namespace {

// Checks `a` and fills the kernels' arguments; *empty when there is nothing to compute
// (no sequences or no query rows).
absl::Status Prepare(const CudaAttentionArgs& a, AttentionKernelArgs* out, bool* empty) {
  *empty = false;
  if (a.heads_q < 1 || a.heads_kv < 1 || a.heads_q % a.heads_kv != 0) {
    return Bad(absl::StrCat("heads_q (", a.heads_q, ") must be a positive multiple of heads_kv (",
                            a.heads_kv, ")"));
  }
  if (a.heads_q > 65535) return Bad("heads_q must be at most 65535");
  if (a.head_dim < 1 || a.head_dim > kMaxHeadDim) {
    return Bad(absl::StrCat("head_dim must be in [1, ", kMaxHeadDim, "]; got ", a.head_dim));
  }
  if (!(std::isfinite(a.softmax_scale) && a.softmax_scale >= 0.0)) {
    return Bad("softmax_scale must be finite and >= 0 (0: 1 / sqrt(head_dim))");
  }
  if ((a.cu_seqlens_q == nullptr) != (a.cu_seqlens_k == nullptr)) {
    return Bad("give both cu_seqlens_q and cu_seqlens_k, or neither");
  }
  if ((a.q_positions == nullptr) != (a.k_positions == nullptr)) {
    return Bad("give both q_positions and k_positions, or neither");
  }
  const bool packed = a.cu_seqlens_q != nullptr;
  const int64_t seqs = packed ? a.num_seqs : a.batch;
  const int64_t rows = packed ? a.max_seq_q : a.seq_q;
  if (seqs < 0 || rows < 0 || (!packed && a.seq_k < 0)) return Bad("negative sizes");
  if (seqs > 65535) return Bad("at most 65535 sequences per call");
  if (a.dtype != CudaDType::kFloat32 && a.dtype != CudaDType::kBFloat16 &&
      a.dtype != CudaDType::kFloat16) {
    return Bad("dtype must be float32, bfloat16 or float16");
  }
  for (const CudaStrides* s : {&a.sq, &a.sk, &a.sv, &a.so}) {
    if (s->token < 0 || s->head < 0 || s->batch < 0) return Bad("strides must be >= 0");
  }
  AttentionKernelArgs& k = *out;
  k.dtype = a.dtype;
  k.num_seqs = seqs;
  k.seq_q = rows;
  k.seq_k = packed ? 0 : a.seq_k;
  k.cu_seqlens_q = a.cu_seqlens_q;
  k.cu_seqlens_k = a.cu_seqlens_k;
  k.heads_q = a.heads_q;
  k.heads_kv = a.heads_kv;
  k.head_dim = a.head_dim;
  k.q = a.q;
  k.k = a.k;
  k.v = a.v;
  k.o = a.o;
  k.lse = a.lse;
  k.sq = a.sq;
  k.sk = a.sk;
  k.sv = a.sv;
  k.so = a.so;
  k.causal = a.causal;
  k.scale = static_cast<float>(
      a.softmax_scale > 0.0 ? a.softmax_scale : 1.0 / std::sqrt(static_cast<double>(a.head_dim)));
  k.q_positions = a.q_positions;
  k.k_positions = a.k_positions;
  if (a.rope != nullptr) {
    if (a.rope->head_dim() != a.head_dim) {
      return Bad(absl::StrCat("the RoPE encoding's head_dim (", a.rope->head_dim(),
                              ") differs from the tensors' (", a.head_dim, ")"));
    }
    if (a.rope->num_axes() != 1)
      return Bad("multi-axis RoPE is not supported in the CUDA kernel yet");
    k.rope_dim = a.rope->rotary_dim();
    k.rope_interleaved = a.rope->interleaved();
    k.rope_attention_factor = a.rope->attention_factor();
    k.rope_thetas = a.rope->device_thetas();
  }
  k.mma_config = a.mma_config;
  k.alibi_slopes = a.alibi_slopes;
  k.alibi_symmetric = a.alibi_symmetric;
  if (seqs == 0 || rows == 0) {
    *empty = true;
    return absl::OkStatus();
  }
  for (const auto& [p, name] : {std::pair<const void*, const char*>{a.q, "q"}, {a.o, "o"}}) {
    if (absl::Status s = CheckDevice(p, name); !s.ok()) return s;
  }
  const bool any_keys = packed || a.seq_k > 0;
  if (any_keys) {
    for (const auto& [p, name] : {std::pair<const void*, const char*>{a.k, "k"}, {a.v, "v"}}) {
      if (absl::Status s = CheckDevice(p, name); !s.ok()) return s;
    }
  }
  for (const auto& [p, name] : {std::pair<const void*, const char*>{a.cu_seqlens_q, "cu_seqlens_q"},
                                {a.cu_seqlens_k, "cu_seqlens_k"},
                                {a.q_positions, "q_positions"},
                                {a.k_positions, "k_positions"},
                                {a.lse, "lse"},
                                {a.alibi_slopes, "alibi_slopes"}}) {
    if (p == nullptr) continue;
    if (absl::Status s = CheckDevice(p, name); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CudaAttentionForward(const CudaAttentionArgs& a, void* stream) {
  AttentionKernelArgs k;
  bool empty = false;
  if (absl::Status s = Prepare(a, &k, &empty); !s.ok() || empty) return s;
  const bool packed = a.cu_seqlens_q != nullptr;
  const std::string why_not_mma = MmaIneligibility(k);
  if (a.kernel == CudaAttentionKernel::kTensorCore && !why_not_mma.empty()) {
    return Bad(absl::StrCat("kernel = kTensorCore: ", why_not_mma));
  }
  const bool mma = a.kernel != CudaAttentionKernel::kSimt && why_not_mma.empty();
  // A padded call without keys has nothing to rotate (and o = 0, lse = -inf from the
  // attention itself); a packed one must say how many key tokens its workspace holds.
  const bool no_keys = !packed && a.seq_k == 0;
  if (mma && a.rope != nullptr && a.workspace != nullptr && !no_keys) {
    const int64_t need = CudaAttentionWorkspaceBytes(a);
    if (need <= 0) return Bad("packed batches with a RoPE workspace must give tokens_k > 0");
    if (a.workspace_bytes < need) {
      return Bad(absl::StrCat("workspace_bytes (", a.workspace_bytes, ") is below the ", need,
                              " bytes CudaAttentionWorkspaceBytes asks for"));
    }
    if (absl::Status s = CheckDevice(a.workspace, "workspace"); !s.ok()) return s;
    if (reinterpret_cast<uintptr_t>(a.workspace) % 16 != 0)
      return Bad("workspace must be 16-byte aligned");
    const std::string rot = LaunchRotateTokens(k, a.workspace, /*queries=*/false, stream);
    if (!rot.empty()) return absl::InternalError(absl::StrCat("CudaAttentionForward: ", rot));
    // The attention reads the rotated keys, dense [key tokens, heads_kv, head_dim].
    k.k = a.workspace;
    k.sk = CudaStrides{packed ? 0 : a.seq_k * a.heads_kv * a.head_dim, a.heads_kv * a.head_dim,
                       a.head_dim};
    k.k_prerotated = true;
  }
  const std::string err =
      mma ? LaunchAttentionForwardMma(k, stream) : LaunchAttentionForward(k, stream);
  if (!err.empty()) return absl::InternalError(absl::StrCat("CudaAttentionForward: ", err));
  return absl::OkStatus();
}

namespace {

// The backward's workspace, sections 256-byte aligned: row_dot, dq_accum, then with RoPE
// dk_accum, q_rot, k_rot. Returns the total; fills `bw`'s pointers when base is given.
int64_t BackwardLayout(const CudaAttentionBackwardArgs& b, char* base,
                       AttentionBackwardKernelArgs* bw) {
  const CudaAttentionArgs& a = b.forward;
  const bool packed = a.cu_seqlens_q != nullptr;
  const int64_t tq = packed ? b.tokens_q : a.batch * a.seq_q;
  const int64_t tk = packed ? b.tokens_k : a.batch * a.seq_k;
  const int64_t d = a.head_dim;
  int64_t off = 0;
  auto take = [&](int64_t bytes) {
    const int64_t at = off;
    off += (bytes + 255) / 256 * 256;
    return at;
  };
  const int64_t row_dot = take(tq * a.heads_q * 4), dq = take(tq * a.heads_q * d * 4);
  int64_t dk = -1, qr = -1, kr = -1;
  if (a.rope != nullptr) {
    dk = take(tk * a.heads_kv * d * 4);
    qr = take(tq * a.heads_q * d * 2);
    kr = take(tk * a.heads_kv * d * 2);
  }
  if (base != nullptr && bw != nullptr) {
    bw->row_dot = reinterpret_cast<float*>(base + row_dot);
    bw->dq_accum = reinterpret_cast<float*>(base + dq);
    if (a.rope != nullptr) {
      bw->dk_accum = reinterpret_cast<float*>(base + dk);
      bw->q_rot = base + qr;
      bw->k_rot = base + kr;
      bw->qk_rotated = true;
    }
  }
  return off;
}

// Zeros the rows [seqs, tokens, heads] of `dim` elements of `esize` bytes of a strided
// tensor (element strides), leaving whatever lies between them: one 2-D memset (rows a
// token stride apart) per (sequence, head), enqueued on `stream`.
absl::Status ZeroRows(void* base, int64_t seqs, int64_t tokens, int64_t heads, int64_t dim,
                      const CudaStrides& s, int64_t esize, void* stream) {
  if (tokens > 1 && s.token < dim) {
    return Bad(absl::StrCat("dk / dv: token stride ", s.token, " below head_dim ", dim,
                            " (rows would overlap)"));
  }
  const size_t width = static_cast<size_t>(dim * esize);
  const size_t pitch = tokens > 1 ? static_cast<size_t>(s.token * esize) : width;
  for (int64_t b = 0; b < seqs; ++b) {
    for (int64_t h = 0; h < heads; ++h) {
      char* p = static_cast<char*>(base) + (b * s.batch + h * s.head) * esize;
      const cudaError_t e = cudaMemset2DAsync(p, pitch, 0, width, static_cast<size_t>(tokens),
                                              static_cast<cudaStream_t>(stream));
      if (e != cudaSuccess) {
        cudaGetLastError();
        return absl::InternalError(
            absl::StrCat("CudaAttentionBackward: zeroing dk / dv: ", cudaGetErrorString(e)));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

int64_t CudaAttentionBackwardWorkspaceBytes(const CudaAttentionBackwardArgs& b) {
  return BackwardLayout(b, nullptr, nullptr);
}

absl::Status CudaAttentionBackward(const CudaAttentionBackwardArgs& b, void* stream) {
  const CudaAttentionArgs& a = b.forward;
  AttentionBackwardKernelArgs bw;
  bool empty = false;
  if (absl::Status s = Prepare(a, &bw.fwd, &empty); !s.ok()) return s;
  const std::string why = MmaIneligibility(bw.fwd);
  if (!why.empty()) return Bad(absl::StrCat("CudaAttentionBackward: ", why));
  const bool packed = a.cu_seqlens_q != nullptr;
  if (packed && (b.tokens_q < 0 || b.tokens_k < 0 || b.max_seq_k < 0)) {
    return Bad("packed batches give tokens_q, tokens_k and max_seq_k (>= 0)");
  }
  // The sizes the workspace and the launches are cut by must cover the sequences: with
  // tokens_q left 0 under max_seq_q > 0 the workspace sections collapsed onto each other
  // and dq was never written; with tokens_k > 0 but max_seq_k 0 no key block ran.
  if (packed && (b.tokens_q < a.max_seq_q || b.max_seq_k > b.tokens_k ||
                 (b.tokens_k > 0 && b.max_seq_k == 0))) {
    return Bad(absl::StrCat("packed batches need tokens_q >= max_seq_q, max_seq_k <= tokens_k "
                            "and max_seq_k >= 1 where tokens_k >= 1; got tokens_q ",
                            b.tokens_q, ", max_seq_q ", a.max_seq_q, ", tokens_k ",
                            b.tokens_k, ", max_seq_k ", b.max_seq_k));
  }
  if (empty) {
    // No query: dL/dk and dL/dv are zero (the reference's), written here since no key
    // block runs.
    const int64_t keys = packed ? b.tokens_k : a.seq_k, seqs = packed ? 1 : a.batch;
    if (keys <= 0 || seqs <= 0) return absl::OkStatus();
    for (const auto& [p, st, name] : {std::tuple<void*, const CudaStrides*, const char*>{
                                          b.dk, &a.sk, "dk"},
                                      {b.dv, &a.sv, "dv"}}) {
      if (absl::Status s = CheckDevice(p, name); !s.ok()) return s;
      if (absl::Status s = ZeroRows(p, seqs, keys, a.heads_kv, a.head_dim, *st, 2, stream);
          !s.ok()) {
        return s;
      }
    }
    return absl::OkStatus();
  }
  if (a.lse == nullptr) return Bad("the backward needs the forward's lse (forward.lse)");
  for (const auto& [p, name] : {std::pair<const void*, const char*>{b.d_o, "d_o"},
                                {b.dq, "dq"},
                                {b.dk, "dk"},
                                {b.dv, "dv"},
                                {b.workspace, "workspace"}}) {
    if (absl::Status s = CheckDevice(p, name); !s.ok()) return s;
  }
  const int64_t need = CudaAttentionBackwardWorkspaceBytes(b);
  if (b.workspace_bytes < need) {
    return Bad(absl::StrCat("workspace_bytes (", b.workspace_bytes, ") is below the ", need,
                            " bytes CudaAttentionBackwardWorkspaceBytes asks for"));
  }
  if (reinterpret_cast<uintptr_t>(b.workspace) % 16 != 0)
    return Bad("workspace must be 16-byte aligned");
  // As q, k, v and o (MmaIneligibility): d_o is read by 16-byte copies and the gradients
  // written in pairs; a misaligned one would fault and end the CUDA context.
  for (const void* p : {b.d_o, static_cast<const void*>(b.dq), static_cast<const void*>(b.dk),
                        static_cast<const void*>(b.dv)}) {
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) {
      return Bad("d_o, dq, dk and dv must be 16-byte aligned, as q, k, v and o");
    }
  }
  BackwardLayout(b, static_cast<char*>(b.workspace), &bw);
  bw.d_o = b.d_o;
  bw.lse = a.lse;
  bw.dq = b.dq;
  bw.dk = b.dk;
  bw.dv = b.dv;
  const int64_t tq = packed ? b.tokens_q : a.batch * a.seq_q;
  const int64_t tk = packed ? b.tokens_k : a.batch * a.seq_k;
  const int64_t max_k = packed ? b.max_seq_k : a.seq_k;
  const std::string err = LaunchAttentionBackwardMma(bw, max_k, tq, tk, stream);
  if (!err.empty()) return absl::InternalError(absl::StrCat("CudaAttentionBackward: ", err));
  return absl::OkStatus();
}

}  // namespace gpe::attention::cuda
