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

// The vectorised kernel: each thread moves 16-byte vectors (V elements). A half-split
// rotation item is one vector from each half of the rotary features (V planes), an
// interleaved one a vector of V / 2 pairs; features past rotary_dim are copied as vectors
// when out of place. A block handles `group` tokens per step: their cos and sin go to
// shared memory first (one reduction per plane and token), then the block's threads take
// consecutive items, so a warp reads and writes contiguous 16-byte vectors.
// Preconditions (VectorEligible): 16-byte-aligned pointers and strides, head_dim and the
// rotation's chunking multiples of V.
template <class T>
struct alignas(16) Vec {
  static constexpr int kN = 16 / static_cast<int>(sizeof(T));
  T v[kN];
};

template <class T, bool kInterleaved>
__global__ void RopeVecKernel(RopeKernelArgs a, int group, int64_t items_per_token) {
  extern __shared__ float table[];  // [group][rotary_dim]: cos at i, sin at half + i
  constexpr int V = Vec<T>::kN;
  const int64_t r = a.rotary_dim, half = r / 2;
  const int64_t rot_items = kInterleaved ? r / V : half / V;  // per head
  const float sign = a.backward ? -1.0f : 1.0f;
  for (int64_t t0 = static_cast<int64_t>(blockIdx.x) * group; t0 < a.num_tokens;
       t0 += static_cast<int64_t>(gridDim.x) * group) {
    for (int64_t idx = threadIdx.x; idx < group * half; idx += blockDim.x) {
      const int64_t g = idx / half, i = idx - g * half, t = t0 + g;
      if (t >= a.num_tokens) continue;
      const int axis = a.plane_axes != nullptr ? a.plane_axes[i] : 0;
      float sn, cn;
      sincosf(ReducedAngle(a.positions[axis * a.num_tokens + t], a.thetas[i]), &sn, &cn);
      table[g * r + i] = cn * a.attention_factor;
      table[g * r + half + i] = sign * sn * a.attention_factor;
    }
    __syncthreads();
    for (int64_t idx = threadIdx.x; idx < group * items_per_token; idx += blockDim.x) {
      const int64_t g = idx / items_per_token, t = t0 + g;
      if (t >= a.num_tokens) continue;
      int64_t rem = idx - g * items_per_token;
      int n = 0;
      for (; n + 1 < a.num_tensors; ++n) {  // which tensor: items of q first, then k
        const RopeKernelTensor& x = a.tensors[n];
        const int64_t per_head = rot_items + (x.out != x.in ? (a.head_dim - r) / V : 0);
        if (rem < x.heads * per_head) break;
        rem -= x.heads * per_head;
      }
      const RopeKernelTensor& x = a.tensors[n];
      const int64_t per_head = rot_items + (x.out != x.in ? (a.head_dim - r) / V : 0);
      const int64_t h = rem / per_head, c = rem - h * per_head;
      const int64_t base = t * x.token_stride + h * x.head_stride;
      const T* in = static_cast<const T*>(x.in) + base;
      T* out = static_cast<T*>(x.out) + base;
      const float* cs = table + g * r;
      if (c >= rot_items) {  // pass-through vector (out of place only)
        const int64_t col = r + (c - rot_items) * V;
        *reinterpret_cast<Vec<T>*>(out + col) = *reinterpret_cast<const Vec<T>*>(in + col);
      } else if (kInterleaved) {
        const int64_t c0 = c * V;  // features c0 .. c0 + V: planes c0 / 2 ..
        Vec<T> v = *reinterpret_cast<const Vec<T>*>(in + c0);
#pragma unroll
        for (int e = 0; e < V / 2; ++e) {
          const int64_t i = c0 / 2 + e;
          const float x1 = Load(&v.v[2 * e]), x2 = Load(&v.v[2 * e + 1]);
          const float cn = cs[i], sn = cs[half + i];
          Store(&v.v[2 * e], x1 * cn - x2 * sn);
          Store(&v.v[2 * e + 1], x1 * sn + x2 * cn);
        }
        *reinterpret_cast<Vec<T>*>(out + c0) = v;
      } else {
        const int64_t i0 = c * V;  // planes i0 .. i0 + V: features i0.. and half + i0..
        Vec<T> v1 = *reinterpret_cast<const Vec<T>*>(in + i0);
        Vec<T> v2 = *reinterpret_cast<const Vec<T>*>(in + half + i0);
#pragma unroll
        for (int e = 0; e < V; ++e) {
          const float x1 = Load(&v1.v[e]), x2 = Load(&v2.v[e]);
          const float cn = cs[i0 + e], sn = cs[half + i0 + e];
          Store(&v1.v[e], x1 * cn - x2 * sn);
          Store(&v2.v[e], x1 * sn + x2 * cn);
        }
        *reinterpret_cast<Vec<T>*>(out + i0) = v1;
        *reinterpret_cast<Vec<T>*>(out + half + i0) = v2;
      }
    }
    __syncthreads();  // the table is rewritten for the next tokens
  }
}

// Whether the vectorised kernel applies: every pointer and stride 16-byte aligned, V
// dividing head_dim and the rotation's chunks (half-split: rotary_dim / 2; interleaved:
// rotary_dim).
bool VectorEligible(const RopeKernelArgs& a, int64_t esize) {
  const int64_t v = 16 / esize;
  if (a.head_dim % v != 0) return false;
  if (a.interleaved ? a.rotary_dim % v != 0 : (a.rotary_dim / 2) % v != 0) return false;
  for (int n = 0; n < a.num_tensors; ++n) {
    const RopeKernelTensor& x = a.tensors[n];
    if (reinterpret_cast<uintptr_t>(x.in) % 16 != 0 || reinterpret_cast<uintptr_t>(x.out) % 16 != 0) {
      return false;
    }
    if ((x.token_stride * esize) % 16 != 0 || (x.head_stride * esize) % 16 != 0) return false;
  }
  return true;
}

template <class T>
std::string LaunchVec(const RopeKernelArgs& a, cudaStream_t s) {
  constexpr int V = Vec<T>::kN;
  const int64_t rot_items = a.interleaved ? a.rotary_dim / V : a.rotary_dim / 2 / V;
  int64_t items = 0;
  for (int n = 0; n < a.num_tensors; ++n) {
    const RopeKernelTensor& x = a.tensors[n];
    items += x.heads * (rot_items + (x.out != x.in ? (a.head_dim - a.rotary_dim) / V : 0));
  }
  constexpr int kVecThreads = 256;
  // Tokens per step: about four items per thread (so the barrier and the angle phase are
  // spread over enough copies: with one item per thread, 65,536 tokens x 8 heads ran at
  // 0.82 of the copy bandwidth on an H200), the table within 32 KiB.
  const int64_t target = 4 * kVecThreads;
  int64_t group = items >= target ? 1 : (target + items - 1) / (items < 1 ? 1 : items);
  const int64_t table_cap = (32 << 10) / (a.rotary_dim * 4);
  if (group > table_cap) group = table_cap;
  if (group < 1) group = 1;
  const int64_t steps = (a.num_tokens + group - 1) / group;
  const int blocks = Blocks(steps, 1 << 20);
  const size_t shared = static_cast<size_t>(group * a.rotary_dim) * sizeof(float);
  if (a.interleaved) {
    RopeVecKernel<T, true><<<blocks, kVecThreads, shared, s>>>(a, static_cast<int>(group), items);
  } else {
    RopeVecKernel<T, false><<<blocks, kVecThreads, shared, s>>>(a, static_cast<int>(group), items);
  }
  const cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? std::string() : ErrorText(e);
}

}  // namespace

std::string LaunchRope(const RopeKernelArgs& args, void* stream) {
  if (args.num_tokens == 0) return "";
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  const int64_t esize = args.dtype == RopeDType::kFloat32 ? 4 : 2;
  if (VectorEligible(args, esize)) {
    switch (args.dtype) {
      case RopeDType::kFloat32:
        return LaunchVec<float>(args, s);
      case RopeDType::kBFloat16:
        return LaunchVec<__nv_bfloat16>(args, s);
      case RopeDType::kFloat16:
        return LaunchVec<__half>(args, s);
    }
  }
  const int blocks = Blocks(args.num_tokens, 1 << 20);
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
