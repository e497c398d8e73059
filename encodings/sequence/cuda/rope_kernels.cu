#include "encodings/sequence/cuda/rope_kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "encodings/sequence/cuda/reduced_angle.cuh"

namespace gpe::encodings::sequence::cuda {
namespace {

constexpr int kThreads = 256;

std::string ErrorText(cudaError_t e) {
  return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
}

template <class T>
__device__ __forceinline__ float Load(const T* p);
template <>
__device__ __forceinline__ float Load<float>(const float* p) { return *p; }
template <>
__device__ __forceinline__ float Load<__nv_bfloat16>(const __nv_bfloat16* p) {
  return __bfloat162float(*p);
}
template <>
__device__ __forceinline__ float Load<__half>(const __half* p) { return __half2float(*p); }

template <class T>
__device__ __forceinline__ void Store(T* p, float v);
template <>
__device__ __forceinline__ void Store<float>(float* p, float v) { *p = v; }
template <>
__device__ __forceinline__ void Store<__nv_bfloat16>(__nv_bfloat16* p, float v) {
  *p = __float2bfloat16_rn(v);  // one rounding, to nearest even
}
template <>
__device__ __forceinline__ void Store<__half>(__half* p, float v) { *p = __float2half_rn(v); }

// ReducedAngle: encodings/sequence/cuda/reduced_angle.cuh.
using ::gpe::encodings::sequence::cuda::ReducedAngle;

// One block per token (grid-stride): the token's cos and sin per plane go to shared
// memory once, then every head of q and k is rotated with them.
template <class T>
__global__ void RopeKernel(RopeKernelArgs a) {
  __shared__ float cs[kMaxRotaryDim];  // cos of plane i at i, sin at half + i
  const int64_t half = a.rotary_dim / 2;
  const int64_t pass = a.head_dim - a.rotary_dim;
  float* cosv = cs;
  float* sinv = cs + half;
  const float sign = a.backward ? -1.0f : 1.0f;
  for (int64_t t = blockIdx.x; t < a.num_tokens; t += gridDim.x) {
    for (int64_t i = threadIdx.x; i < half; i += blockDim.x) {
      const int axis = a.plane_axes != nullptr ? a.plane_axes[i] : 0;
      const float ang = ReducedAngle(a.positions[axis * a.num_tokens + t], a.thetas[i]);
      float s, c;
      sincosf(ang, &s, &c);
      cosv[i] = c * a.attention_factor;
      sinv[i] = sign * s * a.attention_factor;
    }
    __syncthreads();
    for (int n = 0; n < a.num_tensors; ++n) {
      const RopeKernelTensor& x = a.tensors[n];
      const T* in = static_cast<const T*>(x.in) + t * x.token_stride;
      T* out = static_cast<T*>(x.out) + t * x.token_stride;
      const int64_t pairs = x.heads * half;
      for (int64_t idx = threadIdx.x; idx < pairs; idx += blockDim.x) {
        const int64_t h = idx / half, i = idx - h * half;
        const int64_t c1 = a.interleaved ? 2 * i : i;
        const int64_t c2 = a.interleaved ? 2 * i + 1 : i + half;
        const T* src = in + h * x.head_stride;
        T* dst = out + h * x.head_stride;
        const float x1 = Load(src + c1), x2 = Load(src + c2);
        Store(dst + c1, x1 * cosv[i] - x2 * sinv[i]);
        Store(dst + c2, x1 * sinv[i] + x2 * cosv[i]);
      }
      if (x.out != x.in && pass > 0) {  // features past rotary_dim pass through
        const int64_t total = x.heads * pass;
        for (int64_t idx = threadIdx.x; idx < total; idx += blockDim.x) {
          const int64_t h = idx / pass, c = a.rotary_dim + (idx - h * pass);
          out[h * x.head_stride + c] = in[h * x.head_stride + c];
        }
      }
    }
    __syncthreads();  // cs is rewritten for the next token
  }
}

int Blocks(int64_t work, int64_t cap) {
  return static_cast<int>(work < 1 ? 1 : (work < cap ? work : cap));
}

}  // namespace

std::string LaunchRope(const RopeKernelArgs& args, void* stream) {
  if (args.num_tokens == 0) return "";
  const int blocks = Blocks(args.num_tokens, 1 << 20);
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  switch (args.dtype) {
    case RopeDType::kFloat32:
      RopeKernel<float><<<blocks, kThreads, 0, s>>>(args);
      break;
    case RopeDType::kBFloat16:
      RopeKernel<__nv_bfloat16><<<blocks, kThreads, 0, s>>>(args);
      break;
    case RopeDType::kFloat16:
      RopeKernel<__half><<<blocks, kThreads, 0, s>>>(args);
      break;
  }
  const cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? std::string() : ErrorText(e);
}

int CudaDeviceCount(std::string* why) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    if (why != nullptr) *why = ErrorText(e);
    return 0;
  }
  if (count == 0 && why != nullptr) *why = "cudaGetDeviceCount returned 0 devices";
  return count;
}

}  // namespace gpe::encodings::sequence::cuda
