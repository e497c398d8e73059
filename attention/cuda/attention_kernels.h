// The CUDA attention forward kernel's launch interface: plain C++ (no CUDA or Abseil
// headers). cuda_attention.h checks the arguments and documents the semantics, which are
// attention/descriptor.h's: s_ij = scale <R(p_i) q_i, R(p_j) k_j> + b_h(p_i, p_j),
// o_i = sum_j softmax_j(s_ij) v_j, lse_i = ln sum_j exp(s_ij), causal iff p_j <= p_i.
#ifndef ATTENTION_CUDA_ATTENTION_KERNELS_H_
#define ATTENTION_CUDA_ATTENTION_KERNELS_H_

#include <cstdint>
#include <string>

namespace gpe::attention::cuda {

enum class CudaDType : int { kFloat32 = 0, kBFloat16 = 1, kFloat16 = 2 };

constexpr int64_t kMaxHeadDim = 256;

// Element (token t of sequence b, head h, feature c) of a tensor is at
// b * batch + t * token + h * head + c (elements); with cu_seqlens the token index is the
// packed row and batch is unused.
struct CudaStrides {
  int64_t batch = 0, token = 0, head = 0;
};

struct AttentionKernelArgs {
  CudaDType dtype = CudaDType::kFloat32;
  int64_t num_seqs = 0;
  int64_t seq_q = 0, seq_k = 0;  // padded layout; the longest sequence with cu_seqlens
  const int64_t* cu_seqlens_q = nullptr;  // device [num_seqs + 1] or null (padded)
  const int64_t* cu_seqlens_k = nullptr;
  int64_t heads_q = 0, heads_kv = 0, head_dim = 0;
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* o = nullptr;
  float* lse = nullptr;  // device [tokens_q, heads_q] or null
  CudaStrides sq, sk, sv, so;
  bool causal = false;
  float scale = 0.0f;  // > 0
  const int64_t* q_positions = nullptr;  // device, one per query token, or null (default)
  const int64_t* k_positions = nullptr;
  // RoPE inside the kernel (rope_dim 0: off): plane i rotates (2i, 2i + 1) or
  // (i, i + rope_dim / 2) by p theta_i; both rotated features times attention_factor.
  int64_t rope_dim = 0;
  bool rope_interleaved = false;
  float rope_attention_factor = 1.0f;
  const double* rope_thetas = nullptr;  // device, rope_dim / 2
  // k already rotated (LaunchRotateTokens into a workspace): RoPE is applied to q only.
  bool k_prerotated = false;
  // The tensor-core kernels' configuration: 0 the default; others for the benchmark
  // (attention_mma.cu's Cfg list, attention_mma_bwd.cu's BwdCfg list).
  int mma_config = 0;
  // ALiBi (Press et al.) inside the kernel: b_h = -slope_h (p_i - p_j), or -slope_h
  // |p_i - p_j| when symmetric. null: no bias.
  const float* alibi_slopes = nullptr;  // device, heads_q
  bool alibi_symmetric = false;
};

// Enqueues the SIMT forward (attention_kernels.cu: any dtype and head_dim <= kMaxHeadDim)
// on `stream` (a cudaStream_t). Returns "" or the runtime's error.
std::string LaunchAttentionForward(const AttentionKernelArgs& args, void* stream);

// The tensor-core forward (attention_mma.cu: bfloat16 / float16, mma.sync on sm_80+).
// MmaIneligibility says why it cannot take `args` ("" when it can): dtype bfloat16 or
// float16, head_dim 64 or 128, q / k / v / o 16-byte aligned and every stride a multiple
// of 8 elements. LaunchAttentionForwardMma enqueues it; "" or the error.
std::string MmaIneligibility(const AttentionKernelArgs& args);
// Writes R(p) x (RoPE with args' rope fields and positions) for every query (queries)
// or key token of the call into `out`, dense [tokens, heads, head_dim] of args.dtype
// (padded: token b * seq + j; packed: the packed row). The tensor-core forward reads the
// rotated keys with k_prerotated (one pass over k instead of one rotation per query
// block); the backward reads both.
std::string LaunchRotateTokens(const AttentionKernelArgs& args, void* out, bool queries,
                               void* stream);
std::string LaunchAttentionForwardMma(const AttentionKernelArgs& args, void* stream);

// The tensor-core backward (attention_mma_bwd.cu). fwd: the forward's arguments, with o
// its output (d_o shares o's strides, dq / dk / dv those of q / k / v) and lse its
// log-sum-exp. Workspaces (device, float32 unless said): row_dot [tokens_q, heads_q];
// dq_accum [tokens_q, heads_q, head_dim]; with RoPE also dk_accum [tokens_k, heads_kv,
// head_dim] and q_rot / k_rot (fwd.dtype) dense [tokens, heads, head_dim], and
// qk_rotated = true (RoPE requires it).
struct AttentionBackwardKernelArgs {
  AttentionKernelArgs fwd;
  const void* d_o = nullptr;
  const float* lse = nullptr;
  void* dq = nullptr;
  void* dk = nullptr;
  void* dv = nullptr;
  float* row_dot = nullptr;
  float* dq_accum = nullptr;
  float* dk_accum = nullptr;
  void* q_rot = nullptr;
  void* k_rot = nullptr;
  bool qk_rotated = false;
};
// max_seq_k: the longest key sequence; tokens_q / tokens_k: the call's query and key
// tokens. Enqueues on `stream`; "" or the error.
std::string LaunchAttentionBackwardMma(const AttentionBackwardKernelArgs& args, int64_t max_seq_k,
                                       int64_t tokens_q, int64_t tokens_k, void* stream);

}  // namespace gpe::attention::cuda

#endif  // ATTENTION_CUDA_ATTENTION_KERNELS_H_
