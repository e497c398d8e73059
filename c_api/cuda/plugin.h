// The CUDA plugin of the C ABI: libgpe_cuda.so (plugin.cc), which libgpe.so loads with
// dlopen the first time an attention call passes tensors on a CUDA device
// (c_api/src/attention/cuda_call.cc). libgpe.so itself links no CUDA library, so it loads
// on machines without the CUDA runtime; the plugin links the CUDA kernels
// (attention/cuda) and the runtime. Both sides are built from one source tree: the call
// below crosses the boundary as a C++ struct, and kPluginAbi (checked at load) refuses a
// plugin of another layout. Internal to c_api: not part of the public ABI.
#ifndef GPE_C_API_CUDA_PLUGIN_H_
#define GPE_C_API_CUDA_PLUGIN_H_

#include <cstddef>
#include <cstdint>

#include "encodings/sequence/rope.h"

namespace gpe::c_api::cuda_plugin {

// Changed whenever CudaCall's layout or meaning changes.
constexpr uint32_t kPluginAbi = 2;

enum class CudaCallDType : int32_t { kFloat32 = 0, kBFloat16 = 1, kFloat16 = 2 };

// Element strides: element (token t of sequence b, head h, feature c) at
// b * batch + t * token + h * head + c (packed: t the packed row, batch unused).
struct CallStrides {
  int64_t batch = 0, token = 0, head = 0;
};

// One validated attention call (the C ABI has checked shapes, dtypes, strides, positions
// and the encodings; gpe/attention.h's semantics). Tensors are device pointers on
// `device`; the index arrays, the RoPE and the ALiBi slopes are host data that the
// plugin uploads on `stream` for the call.
struct CudaCall {
  uint32_t abi = kPluginAbi;
  int32_t device = 0;
  CudaCallDType dtype = CudaCallDType::kFloat32;
  // Padded: batch sequences of seq_q queries and seq_k keys. Packed: cu_seqlens_q / _k
  // (host, num_seqs + 1 entries each).
  int64_t batch = 0, seq_q = 0, seq_k = 0;
  const int64_t* cu_seqlens_q = nullptr;
  const int64_t* cu_seqlens_k = nullptr;
  int64_t num_seqs = 0;
  int64_t tokens_q = 0, tokens_k = 0;  // the call's query and key tokens
  int64_t heads_q = 0, heads_kv = 0, head_dim = 0;
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* o = nullptr;      // forward: required; backward: the forward's o, or null
  float* lse = nullptr;   // [tokens_q, heads_q]; backward: with o, or null (recomputed)
  CallStrides sq, sk, sv, so;
  bool causal = false;
  double softmax_scale = 0.0;  // 0: 1 / sqrt(head_dim)
  const int64_t* q_positions = nullptr;  // host [tokens_q] / [tokens_k], both or neither
  const int64_t* k_positions = nullptr;
  const encodings::sequence::Rope* rope = nullptr;  // one axis, no xPos
  const double* alibi_slopes = nullptr;             // host [heads_q]
  bool alibi_symmetric = false;
  void* stream = nullptr;  // cudaStream_t; null: the legacy default stream
  // Backward: dL/do with o's strides (so); gradients with the strides of q, k, v (null:
  // not wanted).
  const void* d_o = nullptr;
  void* dq = nullptr;
  void* dk = nullptr;
  void* dv = nullptr;
};

// Runs the call (backward != 0: the backward) on the stream. Returns an absl::StatusCode
// (0: OK); otherwise the message, NUL-terminated and cut to message_size bytes.
using AttentionFn = int (*)(const CudaCall* call, int backward, char* message,
                            size_t message_size);

// Copies `bytes` from device memory on `device` to host memory `dst`, in order after the
// work on `stream` and waiting for it (index arrays the C ABI reads on the host). Returns
// as AttentionFn.
using CopyToHostFn = int (*)(int32_t device, const void* src, size_t bytes, void* dst,
                             void* stream, char* message, size_t message_size);

// RoPE (gpe/rope.h) on tensors on `device`: every segment's rows [tokens, heads,
// head_dim] (element strides token_stride, head_stride, shared by the segments; out == in
// in place) rotated by `rope` at the segment's positions, forward or backward (the
// transpose). positions: host, segment after segment, each [num_axes, tokens] axis-major.
struct RopeSegment {
  const void* in = nullptr;
  void* out = nullptr;
  int64_t tokens = 0;
};

struct CudaRopeCall {
  uint32_t abi = kPluginAbi;
  int32_t device = 0;
  CudaCallDType dtype = CudaCallDType::kFloat32;
  const encodings::sequence::Rope* rope = nullptr;  // no xPos
  bool backward = false;
  int64_t heads = 0, token_stride = 0, head_stride = 0;
  const RopeSegment* segments = nullptr;
  int64_t num_segments = 0;
  const int64_t* positions = nullptr;
  int64_t num_positions = 0;  // entries of `positions`
  void* stream = nullptr;     // cudaStream_t; null: the legacy default stream
};

// As AttentionFn.
using RopeFn = int (*)(const CudaRopeCall* call, char* message, size_t message_size);

struct PluginTable {
  uint32_t abi = kPluginAbi;
  AttentionFn attention = nullptr;
  CopyToHostFn copy_to_host = nullptr;
  RopeFn rope = nullptr;
};

// The one symbol libgpe_cuda.so exports (its version script).
constexpr char kPluginEntry[] = "gpe_cuda_plugin_v1";
using PluginEntryFn = const PluginTable* (*)();

}  // namespace gpe::c_api::cuda_plugin

#endif  // GPE_C_API_CUDA_PLUGIN_H_
