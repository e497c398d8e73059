// The GPU closed-form fit (closed_form_cuda.h) of n x n images, n = 512 .. 4096, with
// K = 256 Gaussian shifted-basis functions per axis (Zheng et al., Table 1's encoding,
// width one spacing, lambda = 1e-6; inr_benchmark.cc's set-up and test image, scaled up).
//
// BM_FitCuda/n/f32 (f32: float32_image_products) times FitDevice on data already on the
// GPU with CUDA events around each fit (the call ends with a stream synchronisation, so
// the events bracket the whole fit: image check, GEMMs, solves, W check). Counters:
//   gpu_ms           mean fit time (the reported time, manual);
//   images_per_s     1 / gpu_ms;
//   fit_GFLOPs       the two GEMMs' dense flops (2 n^2 K + 2 n K^2) / fit time;
//   gemm_GFLOPs      the same flops / the time of the same two cuBLAS GEMMs alone (cublas
//                    Dgemm, or Sgemm + Dgemm with f32), by events over 20 repetitions:
//                    what cuBLAS achieves on these shapes;
//   host_ms          the host API (Fit: pageable upload of the image, fit, download of W),
//                    wall clock, best of 5;
//   cpu_ms, speedup  n <= 1024 only: the CPU FitSeparable2D (closed_form.h, same options,
//                    automatic threads), wall clock, best of 3, and cpu_ms / gpu_ms;
//   rel_diff_cpu     n <= 1024 only: |W_gpu - W_cpu|_F / |W_cpu|_F;
//   PSNR_dB          of the GPU fit's prediction (computed on the CPU) against the image;
//   device_MB        the fitter's device buffers.
// BM_FitCpu/n/f32 (n = 512, 1024) is the CPU fit alone, for the same table.
// Run on a GPU machine:
//   ./bazelw run //inr/cuda:closed_form_cuda_benchmark -- --benchmark_counters_tabular=true
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <Eigen/Dense>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "benchmark/benchmark.h"
#include "encodings/coordinate/shifted_basis.h"
#include "inr/closed_form.h"
#include "inr/cuda/closed_form_cuda.h"

namespace gpe::inr::cuda {
namespace {

using encodings::ShiftedBasis1D;
using encodings::ShiftedBasisKind;

constexpr int64_t kK = 256;
constexpr double kLambda = 1e-6;

// inr_benchmark.cc's test image: rings, a ramp and a disc.
RowMatrixXd TestImage(int64_t n) {
  RowMatrixXd s(n, n);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      const double y = (i + 0.5) / n - 0.5, x = (j + 0.5) / n - 0.5;
      const double r = std::sqrt(x * x + y * y);
      s(i, j) = 0.5 + 0.25 * std::sin(40 * r) * std::exp(-3 * r) + 0.2 * x +
                ((x - 0.2) * (x - 0.2) + (y + 0.1) * (y + 0.1) < 0.01 ? 0.2 : 0.0);
    }
  }
  return s;
}

RowMatrixXd Factor(int64_t n) {
  std::vector<double> coords(n);
  for (int64_t i = 0; i < n; ++i) coords[i] = (i + 0.5) / n;
  const ShiftedBasis1D basis =
      *ShiftedBasis1D::Create(ShiftedBasisKind::kGaussian, kK, 1.0 / static_cast<double>(kK));
  return *basis.Encode(coords);
}

double Seconds(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// The per-size measurements besides the timed loop, made once per (n, f32) (Google
// Benchmark calls the function several times while it picks the iteration count).
struct Extras {
  double gemm_s = 0, host_s = 0, cpu_s = 0, rel_diff = -1, psnr = 0;
};
std::map<std::pair<int64_t, bool>, Extras>& ExtrasCache() {
  static auto* cache = new std::map<std::pair<int64_t, bool>, Extras>;
  return *cache;
}

// Seconds per repetition of the two image GEMMs alone (y first, as the fit picks for
// square images), by CUDA events over 20 repetitions after one warm-up.
double GemmSeconds(int64_t n, bool f32, const double* psi, const double* s,
                   const RowMatrixXd& host_psi, const RowMatrixXd& host_s, void* stream) {
  cublasHandle_t h = nullptr;
  if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) return -1;
  cublasSetStream(h, static_cast<cudaStream_t>(stream));
  double *t = nullptr, *m = nullptr;
  float *sf = nullptr, *pf = nullptr, *tf = nullptr;
  bool ok = cudaMalloc(reinterpret_cast<void**>(&t), n * kK * sizeof(double)) == cudaSuccess &&
            cudaMalloc(reinterpret_cast<void**>(&m), kK * kK * sizeof(double)) == cudaSuccess;
  if (ok && f32) {
    ok = cudaMalloc(reinterpret_cast<void**>(&sf), n * n * sizeof(float)) == cudaSuccess &&
         cudaMalloc(reinterpret_cast<void**>(&pf), n * kK * sizeof(float)) == cudaSuccess &&
         cudaMalloc(reinterpret_cast<void**>(&tf), n * kK * sizeof(float)) == cudaSuccess &&
         // The fit's own operands, demoted (GEMMs on zeros run faster than on data).
         cudaMemcpy(sf, Eigen::MatrixXf(host_s.cast<float>().transpose()).data(),
                    n * n * sizeof(float), cudaMemcpyHostToDevice) == cudaSuccess &&
         cudaMemcpy(pf, Eigen::MatrixXf(host_psi.cast<float>().transpose()).data(),
                    n * kK * sizeof(float), cudaMemcpyHostToDevice) == cudaSuccess;
  }
  if (!ok) {
    cudaFree(t);
    cudaFree(m);
    cudaFree(sf);
    cudaFree(pf);
    cudaFree(tf);
    cublasDestroy(h);
    return -1;
  }
  const int in = static_cast<int>(n), ik = static_cast<int>(kK);
  const double one = 1, zero = 0;
  const float onef = 1, zerof = 0;
  auto run = [&] {
    if (f32) {
      cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_T, in, ik, in, &onef, sf, in, pf, ik, &zerof, tf, in);
    } else {
      cublasDgemm(h, CUBLAS_OP_N, CUBLAS_OP_T, in, ik, in, &one, s, in, psi, ik, &zero, t, in);
    }
    cublasDgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, ik, ik, in, &one, psi, ik, t, in, &zero, m, ik);
  };
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  run();
  constexpr int kReps = 20;
  cudaEventRecord(start, static_cast<cudaStream_t>(stream));
  for (int i = 0; i < kReps; ++i) run();
  cudaEventRecord(stop, static_cast<cudaStream_t>(stream));
  cudaEventSynchronize(stop);
  float ms = 0;
  ok = cudaEventElapsedTime(&ms, start, stop) == cudaSuccess;
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaFree(t);
  cudaFree(m);
  cudaFree(sf);
  cudaFree(pf);
  cudaFree(tf);
  cublasDestroy(h);
  return ok ? ms * 1e-3 / kReps : -1;
}

void BM_FitCuda(benchmark::State& state) {
  std::string why;
  if (CudaDeviceCount(&why) == 0) {
    state.SkipWithError(("no CUDA device: " + why).c_str());
    return;
  }
  const int64_t n = state.range(0);
  const bool f32 = state.range(1) != 0;
  const RowMatrixXd psi = Factor(n);
  const RowMatrixXd image = TestImage(n);
  SeparableFitCudaOptions options;
  options.lambda = kLambda;
  options.float32_image_products = f32;
  absl::StatusOr<SeparableFitterCuda> fitter = SeparableFitterCuda::Create(options);
  absl::Status st = fitter.ok() ? fitter->SetFactors(psi, psi) : fitter.status();
  if (!st.ok()) {
    state.SkipWithError(std::string(st.message()).c_str());
    return;
  }
  cudaStream_t stream = static_cast<cudaStream_t>(fitter->stream());
  double *d_s = nullptr, *d_w = nullptr, *d_psi = nullptr;
  if (cudaMalloc(reinterpret_cast<void**>(&d_s), n * n * sizeof(double)) != cudaSuccess ||
      cudaMalloc(reinterpret_cast<void**>(&d_w), kK * kK * sizeof(double)) != cudaSuccess ||
      cudaMalloc(reinterpret_cast<void**>(&d_psi), n * kK * sizeof(double)) != cudaSuccess ||
      cudaMemcpy(d_s, image.data(), n * n * sizeof(double), cudaMemcpyHostToDevice) !=
          cudaSuccess ||
      cudaMemcpy(d_psi, psi.data(), n * kK * sizeof(double), cudaMemcpyHostToDevice) !=
          cudaSuccess) {
    state.SkipWithError("cudaMalloc or cudaMemcpy failed");
    cudaFree(d_s);
    cudaFree(d_w);
    cudaFree(d_psi);
    return;
  }
  st = fitter->FitDevice(d_s, d_w);  // warm-up (cuBLAS picks and loads its kernels)
  if (!st.ok()) {
    state.SkipWithError(std::string(st.message()).c_str());
    cudaFree(d_s);
    cudaFree(d_w);
    cudaFree(d_psi);
    return;
  }
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  double total = 0;
  int64_t fits = 0;
  for (auto _ : state) {
    cudaEventRecord(start, stream);
    st = fitter->FitDevice(d_s, d_w);
    cudaEventRecord(stop, stream);
    cudaEventSynchronize(stop);
    if (!st.ok()) {
      state.SkipWithError(std::string(st.message()).c_str());
      break;
    }
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    state.SetIterationTime(ms * 1e-3);
    total += ms * 1e-3;
    ++fits;
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);

  const std::pair<int64_t, bool> key(n, f32);
  auto found = ExtrasCache().find(key);
  if (found == ExtrasCache().end() && st.ok()) {
    Extras e;
    e.gemm_s = GemmSeconds(n, f32, d_psi, d_s, psi, image, stream);
    RowMatrixXd w_gpu;
    e.host_s = 1e30;
    for (int r = 0; r < 5; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      absl::StatusOr<RowMatrixXd> w = fitter->Fit(image);
      const auto t1 = std::chrono::steady_clock::now();
      if (!w.ok()) break;
      e.host_s = std::min(e.host_s, Seconds(t0, t1));
      w_gpu = *std::move(w);
    }
    if (w_gpu.size() > 0) {
      absl::StatusOr<RowMatrixXd> pred = PredictSeparable2D(psi, psi, w_gpu);
      if (pred.ok()) e.psnr = *Psnr(*pred, image);
    }
    if (n <= 1024 && w_gpu.size() > 0) {
      SeparableFitOptions cpu_options;
      cpu_options.lambda = kLambda;
      cpu_options.float32_image_products = f32;
      const std::vector<RowMatrixXd> channels = {image};
      e.cpu_s = 1e30;
      for (int r = 0; r < 3; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        absl::StatusOr<std::vector<RowMatrixXd>> w =
            FitSeparable2D(psi, psi, channels, cpu_options);
        const auto t1 = std::chrono::steady_clock::now();
        if (!w.ok()) break;
        e.cpu_s = std::min(e.cpu_s, Seconds(t0, t1));
        e.rel_diff = ((*w)[0] - w_gpu).norm() / (*w)[0].norm();
      }
    }
    found = ExtrasCache().emplace(key, e).first;
  }
  cudaFree(d_s);
  cudaFree(d_w);
  cudaFree(d_psi);
  if (fits == 0 || found == ExtrasCache().end()) return;
  const Extras& e = found->second;
  const double gpu_s = total / static_cast<double>(fits);
  const double flops = 2.0 * n * n * kK + 2.0 * n * kK * kK;
  state.counters["gpu_ms"] = gpu_s * 1e3;
  state.counters["images_per_s"] = 1.0 / gpu_s;
  state.counters["fit_GFLOPs"] = flops / gpu_s * 1e-9;
  if (e.gemm_s > 0) state.counters["gemm_GFLOPs"] = flops / e.gemm_s * 1e-9;
  if (e.host_s < 1e30) state.counters["host_ms"] = e.host_s * 1e3;
  if (n <= 1024 && e.cpu_s > 0 && e.cpu_s < 1e30) {
    state.counters["cpu_ms"] = e.cpu_s * 1e3;
    state.counters["speedup"] = e.cpu_s / gpu_s;
    state.counters["rel_diff_cpu"] = e.rel_diff;
  }
  state.counters["PSNR_dB"] = e.psnr;
  state.counters["device_MB"] = static_cast<double>(fitter->device_bytes()) / 1e6;
}
BENCHMARK(BM_FitCuda)
    ->Args({512, 0})
    ->Args({512, 1})
    ->Args({1024, 0})
    ->Args({1024, 1})
    ->Args({2048, 0})
    ->Args({2048, 1})
    ->Args({4096, 0})
    ->Args({4096, 1})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

// The CPU fit alone (closed_form.h), same set-up, for 512^2 and 1024^2.
void BM_FitCpu(benchmark::State& state) {
  const int64_t n = state.range(0);
  const RowMatrixXd psi = Factor(n);
  const std::vector<RowMatrixXd> channels = {TestImage(n)};
  SeparableFitOptions options;
  options.lambda = kLambda;
  options.float32_image_products = state.range(1) != 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (auto _ : state) {
    absl::StatusOr<std::vector<RowMatrixXd>> w = FitSeparable2D(psi, psi, channels, options);
    if (!w.ok()) {
      state.SkipWithError(std::string(w.status().message()).c_str());
      return;
    }
    benchmark::DoNotOptimize((*w)[0].data());
  }
  const double seconds = Seconds(t0, std::chrono::steady_clock::now());
  if (seconds > 0) {
    state.counters["images_per_s"] = static_cast<double>(state.iterations()) / seconds;
  }
}
BENCHMARK(BM_FitCpu)
    ->Args({512, 0})
    ->Args({512, 1})
    ->Args({1024, 0})
    ->Args({1024, 1})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace gpe::inr::cuda
