// The CUDA attention forward on the shape (bf16, b1 h16 s4096 d128, causal or not,
// no encoding / RoPE / ALiBi inside the kernel; the tensor-core kernel, and the SIMT one
// once for scale), reported beside the cuBLAS bf16 GEMM rate
// measured in this binary (measure/cuda/gpu_limits.h). Flops count the two products
// (4 d per allowed query-key pair: s(s+1)/2 pairs per head when causal). Inputs are
// random in [-1, 1); times are medians of CUDA-event-timed launches.
// Counters: TFLOPs, gemm_TFLOPs, of_gemm.
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "attention/cuda/cuda_attention.h"
#include "benchmark/benchmark.h"
#include "encodings/sequence/cuda/rope_cuda.h"
#include "encodings/sequence/rope.h"
#include "measure/cuda/gpu_limits.h"

namespace gpe::attention::cuda {
namespace {

namespace mc = ::gpe::measure::cuda;
namespace seq = ::gpe::encodings::sequence;

// The GEMM ceiling, measured once per process (0 when it failed).
double GemmTflops() {
  static const double rate = [] {
    absl::StatusOr<double> r = mc::Bf16GemmTflops(8192);
    return r.ok() ? *r : 0.0;
  }();
  return rate;
}

// kRope rotates the keys once per call into a workspace; kRopeInKernel once per query
// block inside the kernel (no workspace).
enum Encoding : int { kNone = 0, kRope = 1, kAlibi = 2, kRopeInKernel = 3 };

// args: seq, heads, head_dim, causal (0/1), encoding (Encoding), kernel
// (CudaAttentionKernel: 0 auto = tensor cores for these shapes, 1 SIMT).
void BM_Forward(benchmark::State& state) {
  std::string why;
  if (seq::cuda::CudaDeviceCount(&why) == 0) {
    state.SkipWithError(("no CUDA device: " + why).c_str());
    return;
  }
  const int64_t s = state.range(0), h = state.range(1), d = state.range(2);
  const bool causal = state.range(3) != 0;
  const int enc = static_cast<int>(state.range(4));
  const int64_t elems = s * h * d;
  void *q = nullptr, *k = nullptr, *v = nullptr, *o = nullptr;
  float* slopes = nullptr;
  for (void** p : {&q, &k, &v, &o}) cudaMalloc(p, elems * 2);
  cudaMalloc(reinterpret_cast<void**>(&slopes), h * sizeof(float));
  (void)mc::LaunchFillRandomBf16(q, elems, 1, nullptr);
  (void)mc::LaunchFillRandomBf16(k, elems, 2, nullptr);
  (void)mc::LaunchFillRandomBf16(v, elems, 3, nullptr);
  std::vector<float> hs(h);
  for (int64_t i = 0; i < h; ++i) hs[i] = std::exp2(-8.0 * (i + 1) / h);  // Press et al.
  cudaMemcpy(slopes, hs.data(), h * sizeof(float), cudaMemcpyHostToDevice);
  seq::RopeOptions ro;
  ro.head_dim = d;
  ro.rotary_dim = d;
  absl::StatusOr<seq::Rope> rope = seq::Rope::Create(ro, *seq::DefaultRopeFrequencies(d, 10000.0));
  absl::StatusOr<seq::cuda::RopeCuda> grope = seq::cuda::RopeCuda::Create(*rope);
  if (!grope.ok()) {
    state.SkipWithError(std::string(grope.status().message()).c_str());
    return;
  }
  CudaAttentionArgs a;
  a.dtype = CudaDType::kBFloat16;
  a.batch = 1;
  a.seq_q = a.seq_k = s;
  a.heads_q = a.heads_kv = h;
  a.head_dim = d;
  a.q = q;
  a.k = k;
  a.v = v;
  a.o = o;
  a.sq = a.sk = a.sv = a.so = CudaStrides{s * h * d, h * d, d};
  a.causal = causal;
  if (enc == kRope || enc == kRopeInKernel) a.rope = &*grope;
  if (enc == kAlibi) a.alibi_slopes = slopes;
  a.kernel = static_cast<CudaAttentionKernel>(state.range(5));
  a.mma_config = static_cast<int>(state.range(6));
  void* work = nullptr;
  if (enc == kRope && CudaAttentionWorkspaceBytes(a) > 0) {
    a.workspace_bytes = CudaAttentionWorkspaceBytes(a);
    cudaMalloc(&work, a.workspace_bytes);
    a.workspace = work;
  }
  std::string err;
  double sec = 0;
  for (auto _ : state) {
    absl::StatusOr<double> t = mc::EventSeconds(
        [&] {
          absl::Status st = CudaAttentionForward(a, nullptr);
          if (!st.ok() && err.empty()) err = std::string(st.message());
        },
        5);
    if (!t.ok() || !err.empty()) {
      state.SkipWithError((err + std::string(t.status().message())).c_str());
      break;
    }
    sec = *t;
    state.SetIterationTime(sec);
  }
  if (sec > 0) {
    const double pairs = causal ? 0.5 * s * (s + 1.0) : static_cast<double>(s) * s;
    const double tflops = 4.0 * d * h * pairs / sec * 1e-12;
    state.counters["TFLOPs"] = tflops;
    state.counters["gemm_TFLOPs"] = GemmTflops();
    if (GemmTflops() > 0) state.counters["of_gemm"] = tflops / GemmTflops();
  }
  for (void* p : {q, k, v, o, work}) cudaFree(p);
  cudaFree(slopes);
}
BENCHMARK(BM_Forward)
    ->ArgNames({"s", "h", "d", "causal", "enc", "kernel", "cfg"})
    ->Args({4096, 16, 128, 0, kNone, 0, 0})
    ->Args({4096, 16, 128, 1, kNone, 0, 0})
    ->Args({4096, 16, 128, 1, kRope, 0, 0})
    ->Args({4096, 16, 128, 1, kRopeInKernel, 0, 0})
    ->Args({4096, 16, 128, 1, kAlibi, 0, 0})
    ->Args({4096, 16, 64, 0, kNone, 0, 0})
    ->Args({4096, 16, 64, 1, kNone, 0, 0})
    ->Args({4096, 16, 128, 1, kNone, 1, 0})
    // The alternative tensor-core configurations (attention_mma.cu's Cfg1, Cfg2).
    ->Args({4096, 16, 128, 0, kNone, 0, 1})
    ->Args({4096, 16, 128, 1, kNone, 0, 1})
    ->Args({4096, 16, 64, 0, kNone, 0, 1})
    ->Args({4096, 16, 128, 0, kNone, 0, 2})
    ->Args({4096, 16, 128, 1, kNone, 0, 2})
    ->Args({4096, 16, 64, 0, kNone, 0, 2})
    ->Iterations(1)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

// The backward (CudaAttentionBackward) on the same shapes; flops count 2.5x the forward's
// (the five products of FlashAttention-2's backward against the forward's two), as the
// PyTorch peer does. args: seq, heads, head_dim, causal, encoding (kNone / kRope).
void BM_Backward(benchmark::State& state) {
  std::string why;
  if (seq::cuda::CudaDeviceCount(&why) == 0) {
    state.SkipWithError(("no CUDA device: " + why).c_str());
    return;
  }
  const int64_t s = state.range(0), h = state.range(1), d = state.range(2);
  const bool causal = state.range(3) != 0;
  const int enc = static_cast<int>(state.range(4));
  const int64_t elems = s * h * d;
  void *q = nullptr, *k = nullptr, *v = nullptr, *o = nullptr, *d_o = nullptr, *dq = nullptr,
       *dk = nullptr, *dv = nullptr, *work = nullptr;
  float* lse = nullptr;
  for (void** p : {&q, &k, &v, &o, &d_o, &dq, &dk, &dv}) cudaMalloc(p, elems * 2);
  cudaMalloc(reinterpret_cast<void**>(&lse), s * h * sizeof(float));
  (void)mc::LaunchFillRandomBf16(q, elems, 1, nullptr);
  (void)mc::LaunchFillRandomBf16(k, elems, 2, nullptr);
  (void)mc::LaunchFillRandomBf16(v, elems, 3, nullptr);
  (void)mc::LaunchFillRandomBf16(d_o, elems, 4, nullptr);
  seq::RopeOptions ro;
  ro.head_dim = d;
  ro.rotary_dim = d;
  absl::StatusOr<seq::Rope> rope = seq::Rope::Create(ro, *seq::DefaultRopeFrequencies(d, 10000.0));
  absl::StatusOr<seq::cuda::RopeCuda> grope = seq::cuda::RopeCuda::Create(*rope);
  if (!grope.ok()) {
    state.SkipWithError(std::string(grope.status().message()).c_str());
    return;
  }
  CudaAttentionBackwardArgs b;
  CudaAttentionArgs& a = b.forward;
  a.dtype = CudaDType::kBFloat16;
  a.batch = 1;
  a.seq_q = a.seq_k = s;
  a.heads_q = a.heads_kv = h;
  a.head_dim = d;
  a.q = q;
  a.k = k;
  a.v = v;
  a.o = o;
  a.lse = lse;
  a.sq = a.sk = a.sv = a.so = CudaStrides{s * h * d, h * d, d};
  a.causal = causal;
  if (enc == kRope) a.rope = &*grope;
  a.mma_config = static_cast<int>(state.range(5));
  b.d_o = d_o;
  b.dq = dq;
  b.dk = dk;
  b.dv = dv;
  b.workspace_bytes = CudaAttentionBackwardWorkspaceBytes(b);
  cudaMalloc(&work, b.workspace_bytes);
  b.workspace = work;
  std::string err;
  if (absl::Status st = CudaAttentionForward(a, nullptr); !st.ok()) err = std::string(st.message());
  double sec = 0;
  for (auto _ : state) {
    absl::StatusOr<double> t = mc::EventSeconds(
        [&] {
          absl::Status st = CudaAttentionBackward(b, nullptr);
          if (!st.ok() && err.empty()) err = std::string(st.message());
        },
        5);
    if (!t.ok() || !err.empty()) {
      state.SkipWithError((err + std::string(t.status().message())).c_str());
      break;
    }
    sec = *t;
    state.SetIterationTime(sec);
  }
  if (sec > 0) {
    const double pairs = causal ? 0.5 * s * (s + 1.0) : static_cast<double>(s) * s;
    const double tflops = 2.5 * 4.0 * d * h * pairs / sec * 1e-12;
    state.counters["TFLOPs"] = tflops;
    state.counters["gemm_TFLOPs"] = GemmTflops();
    if (GemmTflops() > 0) state.counters["of_gemm"] = tflops / GemmTflops();
  }
  for (void* p : {q, k, v, o, d_o, dq, dk, dv, work}) cudaFree(p);
  cudaFree(lse);
}
BENCHMARK(BM_Backward)
    ->ArgNames({"s", "h", "d", "causal", "enc", "cfg"})
    ->Args({4096, 16, 128, 0, kNone, 0})
    ->Args({4096, 16, 128, 1, kNone, 0})
    ->Args({4096, 16, 128, 1, kRope, 0})
    ->Args({4096, 16, 64, 1, kNone, 0})
    ->Args({4096, 16, 128, 0, kNone, 1})
    ->Args({4096, 16, 128, 1, kNone, 1})
    ->Args({4096, 16, 64, 1, kNone, 1})
    ->Iterations(1)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace gpe::attention::cuda
