// RoPE on NVIDIA GPUs: any rope.h encoding (every frequency schedule, interleaved or
// half-split pairing, partial rotary, axial / M-RoPE planes) applied to q and k in one
// launch, in place or out of place, forward or backward, float32 / bfloat16 / float16
// tensors with float32 arithmetic and angles reduced in double from int64 positions
// (rope_kernels.h). xPos is not supported on the GPU yet (Create says so).
//
// Streams: Apply only enqueues work on the caller's stream and never synchronises or
// allocates; Create uploads the frequencies once (cudaMalloc + a synchronous copy).
// Device pointers are checked with cudaPointerGetAttributes: host memory is refused
// with a clear error instead of faulting inside the kernel.
#ifndef ENCODINGS_SEQUENCE_CUDA_ROPE_CUDA_H_
#define ENCODINGS_SEQUENCE_CUDA_ROPE_CUDA_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "encodings/sequence/cuda/rope_kernels.h"
#include "encodings/sequence/rope.h"

namespace gpe::encodings::sequence::cuda {

class RopeCuda {
 public:
  static absl::StatusOr<RopeCuda> Create(const Rope& rope);
  RopeCuda(RopeCuda&& other) noexcept;
  RopeCuda& operator=(RopeCuda&& other) noexcept;
  RopeCuda(const RopeCuda&) = delete;
  RopeCuda& operator=(const RopeCuda&) = delete;
  ~RopeCuda();

  int64_t head_dim() const { return head_dim_; }
  int64_t rotary_dim() const { return rotary_dim_; }
  int num_axes() const { return num_axes_; }
  bool interleaved() const { return interleaved_; }
  float attention_factor() const { return attention_factor_; }
  // The frequencies in device memory (rotary_dim / 2 doubles), for kernels that apply
  // RoPE inside themselves (attention/cuda).
  const double* device_thetas() const { return thetas_; }

  // Rotates q, and k when non-null (same tokens), on `stream` (a cudaStream_t).
  // positions: device int64 [num_axes, num_tokens]. Each tensor is a [num_tokens, heads,
  // head_dim] view with head_dim contiguous (rope_kernels.h's RopeKernelTensor); out == in
  // for in place, otherwise the two must not overlap.
  absl::Status Apply(RopeDType dtype, int64_t num_tokens, const int64_t* positions,
                     const RopeKernelTensor& q, const RopeKernelTensor* k, bool backward,
                     void* stream) const;

 private:
  RopeCuda() = default;
  void Release();

  int64_t head_dim_ = 0, rotary_dim_ = 0;
  int num_axes_ = 1;
  bool interleaved_ = false;
  float attention_factor_ = 1.0f;
  double* thetas_ = nullptr;      // device
  int32_t* plane_axes_ = nullptr; // device; null for one axis
};

}  // namespace gpe::encodings::sequence::cuda

#endif  // ENCODINGS_SEQUENCE_CUDA_ROPE_CUDA_H_
