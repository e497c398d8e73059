// The CUDA RoPE kernel's launch interface: plain C++ (no CUDA or Abseil headers), so the
// wrapper (rope_cuda.h) and tests compile with the host compiler alone.
//
// One launch rotates q and, optionally, k (the same tokens and positions) in place or out
// of place, forward (R(a)) or backward (R(-a)), with the attention factor m applied to
// the rotated features (rope.h's convention; features rotary_dim .. head_dim - 1 pass
// through unscaled). Plane i pairs (2i, 2i + 1) when interleaved, else (i, i + r/2), and
// turns (x1, x2) into (x1 cos a - x2 sin a, x1 sin a + x2 cos a), a = p * theta_i.
//
// Angles: p (int64, |p| < 2^53) times theta_i (double) is formed exactly as a double
// product plus its fma error term, reduced modulo 2 pi in double (Cody-Waite with a
// two-part 2 pi), and only then rounded to float32 for sincosf: positions up to 2^31 keep
// float32 accuracy. Positions are never read from a low-precision tensor.
#ifndef ENCODINGS_SEQUENCE_CUDA_ROPE_KERNELS_H_
#define ENCODINGS_SEQUENCE_CUDA_ROPE_KERNELS_H_

#include <cstdint>
#include <string>

namespace gpe::encodings::sequence::cuda {

enum class RopeDType : int { kFloat32 = 0, kBFloat16 = 1, kFloat16 = 2 };

// A [tokens, heads, head_dim] view (bshd and sbhd flatten to it through the strides):
// element (t, h, c) at data[t * token_stride + h * head_stride + c], in elements.
struct RopeKernelTensor {
  const void* in = nullptr;  // device memory
  void* out = nullptr;       // device memory; == in for in place, else disjoint
  int64_t heads = 0;
  int64_t token_stride = 0;
  int64_t head_stride = 0;
};

struct RopeKernelArgs {
  RopeDType dtype = RopeDType::kFloat32;
  int64_t num_tokens = 0;
  int64_t head_dim = 0;
  int64_t rotary_dim = 0;  // even, <= head_dim, <= kMaxRotaryDim
  bool interleaved = false;
  bool backward = false;
  float attention_factor = 1.0f;
  int num_axes = 1;
  const double* thetas = nullptr;      // device, rotary_dim / 2 values
  const int32_t* plane_axes = nullptr; // device, rotary_dim / 2 values; null: axis 0
  const int64_t* positions = nullptr;  // device, [num_axes, num_tokens]
  RopeKernelTensor tensors[2];
  int num_tensors = 1;                 // 1 (q) or 2 (q and k)
};

constexpr int64_t kMaxRotaryDim = 2048;  // the kernel keeps cos/sin of a token in shared memory

// Enqueues the kernel on `stream` (a cudaStream_t; null: the default stream). Returns ""
// or the CUDA runtime's error text. Arguments are assumed checked (rope_cuda.h does).
std::string LaunchRope(const RopeKernelArgs& args, void* stream);

// CUDA devices visible to this process (0 without GPU or driver; `why` says why).
int CudaDeviceCount(std::string* why);

}  // namespace gpe::encodings::sequence::cuda

#endif  // ENCODINGS_SEQUENCE_CUDA_ROPE_KERNELS_H_
