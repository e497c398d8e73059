// The kernels behind gpu_limits.h: plain C++ declarations (no CUDA or Abseil headers), so
// nvcc compiles gpu_limits_kernels.cu without Abseil and host code calls it directly.
#ifndef MEASURE_CUDA_GPU_LIMITS_KERNELS_H_
#define MEASURE_CUDA_GPU_LIMITS_KERNELS_H_

#include <cstdint>
#include <string>

namespace gpe::measure::cuda {

// out[0 .. bytes) = in[0 .. bytes), enqueued on `stream` (a cudaStream_t; null: default).
// in and out are device memory, 16-byte aligned, bytes a multiple of 16. Returns "" or
// the CUDA runtime's error text.
std::string LaunchCopy(const void* in, void* out, int64_t bytes, void* stream);

// Fills n bfloat16 values (device memory) with uniform values in [-1, 1) drawn from
// `seed` (splitmix64 of seed and index), enqueued on `stream`. Returns "" or the error.
std::string LaunchFillRandomBf16(void* data, int64_t n, uint64_t seed, void* stream);

}  // namespace gpe::measure::cuda

#endif  // MEASURE_CUDA_GPU_LIMITS_KERNELS_H_
