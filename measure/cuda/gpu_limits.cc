#include "measure/cuda/gpu_limits.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"

namespace gpe::measure::cuda {
namespace {

absl::Status CudaError(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return absl::OkStatus();
  cudaGetLastError();  // clear a sticky launch error so later calls report their own
  return absl::InternalError(
      absl::StrCat(what, ": ", cudaGetErrorName(e), ": ", cudaGetErrorString(e)));
}

absl::Status KernelError(const std::string& e, const char* what) {
  return e.empty() ? absl::OkStatus() : absl::InternalError(absl::StrCat(what, ": ", e));
}

// Device memory freed on scope exit.
struct DeviceBuffer {
  void* p = nullptr;
  ~DeviceBuffer() { cudaFree(p); }
};

struct Events {
  cudaEvent_t start = nullptr, stop = nullptr;
  ~Events() {
    if (start != nullptr) cudaEventDestroy(start);
    if (stop != nullptr) cudaEventDestroy(stop);
  }
};

// The median of v (not empty): the middle element of an odd count, the mean of the two
// middle ones of an even count (nth_element's upper middle alone is no median).
double MedianOf(std::vector<double> v) {
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + mid, v.end());
  const double upper = v[mid];
  if (v.size() % 2 == 1) return upper;
  const double lower = *std::max_element(v.begin(), v.begin() + mid);
  return 0.5 * (lower + upper);
}

}  // namespace

absl::StatusOr<double> EventSecondsImpl(void (*call)(void*), void* ctx, int reps) {
  if (reps < 1) return absl::InvalidArgumentError("reps must be >= 1");
  Events ev;
  if (absl::Status s = CudaError(cudaEventCreate(&ev.start), "cudaEventCreate"); !s.ok()) return s;
  if (absl::Status s = CudaError(cudaEventCreate(&ev.stop), "cudaEventCreate"); !s.ok()) return s;
  call(ctx);  // warm-up: module load, handle set-up, caches
  if (absl::Status s = CudaError(cudaDeviceSynchronize(), "warm-up"); !s.ok()) return s;
  std::vector<double> ms(reps);
  for (int i = 0; i < reps; ++i) {
    if (absl::Status s = CudaError(cudaEventRecord(ev.start), "cudaEventRecord"); !s.ok()) return s;
    call(ctx);
    if (absl::Status s = CudaError(cudaEventRecord(ev.stop), "cudaEventRecord"); !s.ok()) return s;
    if (absl::Status s = CudaError(cudaEventSynchronize(ev.stop), "timed call"); !s.ok()) return s;
    float elapsed = 0;
    if (absl::Status s = CudaError(cudaEventElapsedTime(&elapsed, ev.start, ev.stop),
                                   "cudaEventElapsedTime");
        !s.ok()) {
      return s;
    }
    ms[i] = elapsed;
  }
  return MedianOf(ms) * 1e-3;
}

absl::StatusOr<GpuDevice> CurrentDevice() {
  int dev = 0;
  if (absl::Status s = CudaError(cudaGetDevice(&dev), "cudaGetDevice"); !s.ok()) return s;
  cudaDeviceProp p;
  if (absl::Status s = CudaError(cudaGetDeviceProperties(&p, dev), "cudaGetDeviceProperties");
      !s.ok()) {
    return s;
  }
  GpuDevice d;
  d.name = p.name;
  d.sm_count = p.multiProcessorCount;
  d.major = p.major;
  d.minor = p.minor;
  d.l2_bytes = p.l2CacheSize;
  d.global_bytes = static_cast<int64_t>(p.totalGlobalMem);
  return d;
}

absl::StatusOr<double> CopyBandwidthGBps(int64_t bytes) {
  if (bytes <= 0 || bytes % 16 != 0) {
    return absl::InvalidArgumentError("bytes must be a positive multiple of 16");
  }
  DeviceBuffer in, out;
  if (absl::Status s = CudaError(cudaMalloc(&in.p, bytes), "cudaMalloc"); !s.ok()) return s;
  if (absl::Status s = CudaError(cudaMalloc(&out.p, bytes), "cudaMalloc"); !s.ok()) return s;
  if (absl::Status s = KernelError(LaunchFillRandomBf16(in.p, bytes / 2, 1, nullptr), "fill");
      !s.ok()) {
    return s;
  }
  std::string err;
  absl::StatusOr<double> sec = EventSeconds([&] {
    const std::string e = LaunchCopy(in.p, out.p, bytes, nullptr);
    if (err.empty()) err = e;
  });
  if (!sec.ok()) return sec.status();
  if (absl::Status s = KernelError(err, "copy"); !s.ok()) return s;
  return 2.0 * static_cast<double>(bytes) / *sec * 1e-9;
}

absl::StatusOr<double> Bf16GemmTflops(int64_t n) {
  if (n < 16 || n % 16 != 0) return absl::InvalidArgumentError("n must be a multiple of 16");
  const int64_t bytes = n * n * 2;
  DeviceBuffer a, b, c;
  for (DeviceBuffer* m : {&a, &b, &c}) {
    if (absl::Status s = CudaError(cudaMalloc(&m->p, bytes), "cudaMalloc"); !s.ok()) return s;
  }
  for (auto [m, seed] : {std::pair<DeviceBuffer*, uint64_t>{&a, 2}, {&b, 3}, {&c, 4}}) {
    if (absl::Status s = KernelError(LaunchFillRandomBf16(m->p, n * n, seed, nullptr), "fill");
        !s.ok()) {
      return s;
    }
  }
  cublasHandle_t h = nullptr;
  if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) return absl::InternalError("cublasCreate failed");
  const float alpha = 1.0f, beta = 0.0f;
  const int ni = static_cast<int>(n);
  cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
  absl::StatusOr<double> sec = EventSeconds(
      [&] {
        const cublasStatus_t r = cublasGemmEx(
            h, CUBLAS_OP_N, CUBLAS_OP_N, ni, ni, ni, &alpha, a.p, CUDA_R_16BF, ni, b.p, CUDA_R_16BF,
            ni, &beta, c.p, CUDA_R_16BF, ni, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
        if (st == CUBLAS_STATUS_SUCCESS) st = r;
      },
      10);
  cublasDestroy(h);
  if (!sec.ok()) return sec.status();
  if (st != CUBLAS_STATUS_SUCCESS) {
    return absl::InternalError(absl::StrCat("cublasGemmEx: ", cublasGetStatusString(st)));
  }
  const double nn = static_cast<double>(n);
  return 2.0 * nn * nn * nn / *sec * 1e-12;
}

}  // namespace gpe::measure::cuda
