// Attention forward on NVIDIA GPUs with the positional encoding inside the kernel:
// RoPE (any rope.h encoding through RopeCuda, encodings/sequence/cuda/rope_cuda.h) and
// ALiBi, causal or not, GQA / MQA, padded or packed (cu_seqlens) batches, KV-cache
// positions, float32 / bfloat16 / float16 tensors with float32 accumulation.
// Semantics are attention/descriptor.h's (positions default to keys 0..len_k-1 and
// queries the last len_q of them; causal iff p_j <= p_i; rows with no allowed key give
// o = 0 and lse = -inf).
//
// Two kernels: a tensor-core FlashAttention-2-style forward for bfloat16 / float16
// (attention_mma.cu, mma.sync with float32 accumulation; P rounded to 16 bits before P V)
// and a SIMT flash-style forward for every dtype and head_dim (attention_kernels.cu,
// float32 throughout). CudaAttentionArgs::kernel chooses. The backward
// (CudaAttentionBackward) runs on tensor cores only.
//
// Streams: CudaAttentionForward only enqueues on the caller's stream; it allocates
// nothing and never synchronises. Device pointers are checked to be device memory.
#ifndef ATTENTION_CUDA_CUDA_ATTENTION_H_
#define ATTENTION_CUDA_CUDA_ATTENTION_H_

#include <cstdint>

#include "absl/status/status.h"
#include "attention/cuda/attention_kernels.h"
#include "encodings/sequence/cuda/rope_cuda.h"

namespace gpe::attention::cuda {

// Which kernel runs: kAuto takes the tensor-core kernel where it applies (bfloat16 /
// float16, head_dim 64 or 128, 16-byte-aligned tensors and strides; see
// attention_kernels.h) and the SIMT kernel otherwise; kTensorCore refuses, with the
// reason, arguments it cannot take; kSimt always runs the SIMT kernel (the reference the
// tensor-core kernel is tested against, with the double CPU reference).
enum class CudaAttentionKernel : int { kAuto = 0, kSimt = 1, kTensorCore = 2 };

struct CudaAttentionArgs {
  CudaAttentionKernel kernel = CudaAttentionKernel::kAuto;
  // Tensor-core kernel configuration, for tuning benchmarks: 0 (the default) is the
  // tuned one; others are alternatives kept for re-measuring on new GPUs.
  int mma_config = 0;
  CudaDType dtype = CudaDType::kFloat32;
  // Padded: batch sequences of seq_q queries and seq_k keys. Packed: num_seqs =
  // cu_seqlens size - 1 (device arrays, both given, [num_seqs + 1], from 0,
  // non-decreasing; the caller also gives max_seq_q, the longest query sequence).
  int64_t batch = 0, seq_q = 0, seq_k = 0;
  const int64_t* cu_seqlens_q = nullptr;
  const int64_t* cu_seqlens_k = nullptr;
  int64_t num_seqs = 0, max_seq_q = 0;
  int64_t heads_q = 0, heads_kv = 0, head_dim = 0;  // head_dim <= kMaxHeadDim
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* o = nullptr;
  float* lse = nullptr;  // optional, [tokens_q, heads_q]
  CudaStrides sq, sk, sv, so;
  bool causal = false;
  double softmax_scale = 0.0;            // 0: 1 / sqrt(head_dim)
  const int64_t* q_positions = nullptr;  // optional device arrays (both or neither)
  const int64_t* k_positions = nullptr;
  const encodings::sequence::cuda::RopeCuda* rope = nullptr;  // optional; rotary_dim <= head_dim
  const float* alibi_slopes = nullptr;                        // optional device [heads_q]
  bool alibi_symmetric = false;
  // Optional device scratch (16-byte aligned) for RoPE on the tensor-core kernel: with
  // at least CudaAttentionWorkspaceBytes(args) bytes the keys are rotated once per call
  // into it (one pass over k) instead of once per 128-query block inside the kernel.
  // Packed batches also give tokens_k, the total number of key tokens
  // (cu_seqlens_k[num_seqs]).
  void* workspace = nullptr;
  int64_t workspace_bytes = 0;
  int64_t tokens_k = 0;
};

// Bytes of workspace that lets the tensor-core kernel rotate the keys once per call: key
// tokens x heads_kv x head_dim x 2 when RoPE is on and the tensor-core kernel takes the
// call, else 0. (Packed: needs tokens_k.)
int64_t CudaAttentionWorkspaceBytes(const CudaAttentionArgs& args);

absl::Status CudaAttentionForward(const CudaAttentionArgs& args, void* stream);

// The backward on the tensor-core kernel (bfloat16 / float16, head_dim 64 or 128; after
// FlashAttention-2's backward): given dL/do, writes dL/dq, dL/dk, dL/dv with respect to
// the inputs before RoPE (dq and dk rotated back). `forward` holds the forward's
// arguments with o its output and lse its log-sum-exp (both required; the lse the
// forward wrote). d_o has o's strides; dq, dk and dv those of q, k and v. ALiBi slopes
// are constants (no gradient). workspace: 16-byte-aligned device memory of at least
// CudaAttentionBackwardWorkspaceBytes bytes (float32 accumulators for dq, and for dk
// with RoPE, plus the rotated q and k). Packed batches give tokens_q, tokens_k (the
// call's query and key tokens) and max_seq_k. Enqueues on `stream`; allocates nothing.
struct CudaAttentionBackwardArgs {
  CudaAttentionArgs forward;
  const void* d_o = nullptr;
  void* dq = nullptr;
  void* dk = nullptr;
  void* dv = nullptr;
  void* workspace = nullptr;
  int64_t workspace_bytes = 0;
  int64_t tokens_q = 0, tokens_k = 0, max_seq_k = 0;  // packed batches only
};

int64_t CudaAttentionBackwardWorkspaceBytes(const CudaAttentionBackwardArgs& args);
absl::Status CudaAttentionBackward(const CudaAttentionBackwardArgs& args, void* stream);

}  // namespace gpe::attention::cuda

#endif  // ATTENTION_CUDA_CUDA_ATTENTION_H_
