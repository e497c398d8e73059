#include "tools/cuda_check/axpy.h"

#include <cuda_runtime.h>

namespace gpe::cuda_check {
namespace {

__global__ void AxpyKernel(float a, const float* x, float* y, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    y[i] = fmaf(a, x[i], y[i]);
  }
}

std::string ErrorText(cudaError_t e) {
  return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
}

}  // namespace

int DeviceCount(std::string* why) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    if (why != nullptr) *why = ErrorText(e);
    return 0;
  }
  if (count == 0 && why != nullptr) *why = "cudaGetDeviceCount returned 0 devices";
  return count;
}

std::string Axpy(float a, const float* x, float* y, int64_t n) {
  if (n < 0) return "n must be non-negative";
  if (n == 0) return "";
  float* dx = nullptr;
  float* dy = nullptr;
  const size_t bytes = static_cast<size_t>(n) * sizeof(float);
  cudaError_t e = cudaMalloc(&dx, bytes);
  if (e == cudaSuccess) e = cudaMalloc(&dy, bytes);
  if (e == cudaSuccess) e = cudaMemcpy(dx, x, bytes, cudaMemcpyHostToDevice);
  if (e == cudaSuccess) e = cudaMemcpy(dy, y, bytes, cudaMemcpyHostToDevice);
  if (e == cudaSuccess) {
    const int threads = 256;
    const int64_t blocks64 = (n + threads - 1) / threads;
    const int blocks = static_cast<int>(blocks64 < 4096 ? blocks64 : 4096);
    AxpyKernel<<<blocks, threads>>>(a, dx, dy, n);
    e = cudaGetLastError();
  }
  if (e == cudaSuccess) e = cudaMemcpy(y, dy, bytes, cudaMemcpyDeviceToHost);
  cudaFree(dx);
  cudaFree(dy);
  return e == cudaSuccess ? std::string() : ErrorText(e);
}

}  // namespace gpe::cuda_check
