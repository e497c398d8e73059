// The copy and fill kernels behind gpu_limits.h (compiled by nvcc; no Abseil here).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "measure/cuda/gpu_limits_kernels.h"

namespace gpe::measure::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void CopyKernel(const uint4* __restrict__ in, uint4* __restrict__ out, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    out[i] = in[i];
  }
}

// splitmix64 of (seed, index): independent uniform values without a generator state.
__device__ uint64_t Mix(uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

__global__ void FillKernel(__nv_bfloat16* data, int64_t n, uint64_t seed) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const uint64_t r = Mix(seed * 0x100000001b3ULL + static_cast<uint64_t>(i));
    const float u = static_cast<float>(r >> 40) * (1.0f / 16777216.0f);  // [0, 1)
    data[i] = __float2bfloat16_rn(2.0f * u - 1.0f);
  }
}

int Blocks(int64_t work) {
  int64_t b = (work + kThreads - 1) / kThreads;
  return static_cast<int>(b < 1 ? 1 : (b > 65536 ? 65536 : b));
}

std::string Error() {
  const cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? std::string()
                          : std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
}

}  // namespace

std::string LaunchCopy(const void* in, void* out, int64_t bytes, void* stream) {
  if (bytes % 16 != 0) return "LaunchCopy: bytes must be a multiple of 16";
  const int64_t n = bytes / 16;
  if (n == 0) return "";
  CopyKernel<<<Blocks(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<const uint4*>(in), static_cast<uint4*>(out), n);
  return Error();
}

std::string LaunchFillRandomBf16(void* data, int64_t n, uint64_t seed, void* stream) {
  if (n == 0) return "";
  FillKernel<<<Blocks(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<__nv_bfloat16*>(data), n, seed);
  return Error();
}

}  // namespace gpe::measure::cuda
