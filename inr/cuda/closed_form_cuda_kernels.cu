// Element-wise kernels of the GPU closed-form fit (closed_form_cuda_kernels.h): grid-stride
// loops over int64 indices, 256 threads a block, at most 4096 blocks a launch.
#include <cuda_runtime.h>

#include <cfloat>
#include <cstdint>
#include <string>

#include "inr/cuda/closed_form_cuda_kernels.h"

namespace gpe::inr::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 4096;

unsigned int Blocks(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned int>(b < kMaxBlocks ? b : kMaxBlocks);
}

std::string LaunchError() {
  const cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess) return "";
  return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
}

__global__ void DemoteKernel(const double* in, float* out, int64_t n) {
  const int64_t step = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    out[i] = __double2float_rn(in[i]);
  }
}

__global__ void WidenKernel(const float* in, double* out, int64_t n) {
  const int64_t step = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    out[i] = static_cast<double>(in[i]);
  }
}

__global__ void AddToDiagonalKernel(double* a, int64_t k, int64_t ld, double value) {
  const int64_t step = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < k; i += step) {
    a[i * (ld + 1)] += value;
  }
}

__global__ void FlagNonFiniteKernel(const double* x, int64_t n, int* flag) {
  const int64_t step = static_cast<int64_t>(blockDim.x) * gridDim.x;
  bool bad = false;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    // False for NaN (every comparison with NaN is false) and for +-inf.
    bad |= !(fabs(x[i]) <= DBL_MAX);
  }
  if (bad) *flag = 1;  // every writer stores the same value: no atomic needed
}

}  // namespace

std::string LaunchDemoteToFloat(const double* in, float* out, int64_t n, void* stream) {
  if (n <= 0) return "";
  DemoteKernel<<<Blocks(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(in, out, n);
  return LaunchError();
}

std::string LaunchWidenToDouble(const float* in, double* out, int64_t n, void* stream) {
  if (n <= 0) return "";
  WidenKernel<<<Blocks(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(in, out, n);
  return LaunchError();
}

std::string LaunchAddToDiagonal(double* a, int64_t k, int64_t ld, double value, void* stream) {
  if (k <= 0) return "";
  AddToDiagonalKernel<<<Blocks(k), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(a, k, ld,
                                                                                     value);
  return LaunchError();
}

std::string LaunchFlagNonFinite(const double* x, int64_t n, int* flag, void* stream) {
  if (n <= 0) return "";
  FlagNonFiniteKernel<<<Blocks(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(x, n, flag);
  return LaunchError();
}

}  // namespace gpe::inr::cuda
