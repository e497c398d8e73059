// The GPU's limits, measured in the running binary, so every CUDA benchmark reports its
// figures as ratios to them (docs/ARCHITECTURE.md, "Benchmarks"):
//   - copy bandwidth: a plain 16-byte-per-thread copy kernel over a buffer far larger than
//     L2, bytes read plus bytes written over the kernel's time (CUDA events);
//   - dense bfloat16 matrix rate: cuBLAS GemmEx, bf16 operands, float32 accumulation
//     (CUBLAS_COMPUTE_32F), n x n x n on random data (zeros run faster and would flatter
//     the ceiling), 2 n^3 flops over the median of timed products.
// Plain C++ interface: the kernels live in gpu_limits.cu. Every function returns an error
// status instead of a number when there is no device or a CUDA / cuBLAS call fails.
#ifndef MEASURE_CUDA_GPU_LIMITS_H_
#define MEASURE_CUDA_GPU_LIMITS_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "measure/cuda/gpu_limits_kernels.h"

namespace gpe::measure::cuda {

// Seconds per call of fn (which enqueues work on the default stream), by CUDA events: one
// warm-up call, then the median of `reps` timed calls.
template <class Fn>
absl::StatusOr<double> EventSeconds(Fn fn, int reps = 20);

struct GpuDevice {
  std::string name;
  int sm_count = 0;
  int major = 0, minor = 0;
  int64_t l2_bytes = 0, global_bytes = 0;
};
absl::StatusOr<GpuDevice> CurrentDevice();

// Device-to-device copy bandwidth in GB/s (read + write), `bytes` per direction.
absl::StatusOr<double> CopyBandwidthGBps(int64_t bytes = int64_t{1} << 30);

// cuBLAS bf16 n x n x n GEMM rate in TFLOP/s (float32 accumulation).
absl::StatusOr<double> Bf16GemmTflops(int64_t n = 8192);

// Implementation detail of EventSeconds (type-erased so the header needs no CUDA).
absl::StatusOr<double> EventSecondsImpl(void (*call)(void*), void* ctx, int reps);

template <class Fn>
absl::StatusOr<double> EventSeconds(Fn fn, int reps) {
  return EventSecondsImpl([](void* c) { (*static_cast<Fn*>(c))(); }, &fn, reps);
}

}  // namespace gpe::measure::cuda

#endif  // MEASURE_CUDA_GPU_LIMITS_H_
