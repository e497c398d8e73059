// Standalone RoPE on q and k on the GPU (the goal: bf16 (1, 4096, 32 heads, 128) at
// >= 85% of the GPU's memory bandwidth), beside a copy kernel of the same bytes in the
// same binary. Times come from CUDA events around 20 launches; bytes count every element
// of q and k read once and written once.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "encodings/sequence/cuda/rope_cuda.h"

namespace gpe::encodings::sequence::cuda {
namespace {

constexpr int kLaunches = 20;

// Seconds per launch of fn, by CUDA events (fn enqueues one launch).
template <class Fn>
double EventSeconds(Fn fn) {
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  fn();  // warm-up
  cudaEventRecord(start);
  for (int i = 0; i < kLaunches; ++i) fn();
  cudaEventRecord(stop);
  cudaEventSynchronize(stop);
  float ms = 0;
  cudaEventElapsedTime(&ms, start, stop);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return ms * 1e-3 / kLaunches;
}

// args: tokens, heads (q and k each), head_dim, dtype (0 f32, 1 bf16).
void BM_RopeQk(benchmark::State& state) {
  std::string why;
  if (CudaDeviceCount(&why) == 0) {
    state.SkipWithError(("no CUDA device: " + why).c_str());
    return;
  }
  const int64_t tokens = state.range(0), heads = state.range(1), d = state.range(2);
  const RopeDType dtype = state.range(3) == 0 ? RopeDType::kFloat32 : RopeDType::kBFloat16;
  const int64_t esize = dtype == RopeDType::kFloat32 ? 4 : 2;
  RopeOptions o;
  o.head_dim = d;
  o.rotary_dim = d;
  absl::StatusOr<Rope> rope = Rope::Create(o, *DefaultRopeFrequencies(d, 10000.0));
  absl::StatusOr<RopeCuda> gpu = RopeCuda::Create(*rope);
  if (!gpu.ok()) {
    state.SkipWithError(std::string(gpu.status().message()).c_str());
    return;
  }
  const int64_t elems = tokens * heads * d, bytes = elems * esize;
  void *q = nullptr, *k = nullptr, *copy = nullptr;
  int64_t* pos = nullptr;
  cudaMalloc(&q, bytes);
  cudaMalloc(&k, bytes);
  cudaMalloc(&copy, 2 * bytes);
  cudaMalloc(reinterpret_cast<void**>(&pos), tokens * sizeof(int64_t));
  cudaMemset(q, 0, bytes);
  cudaMemset(k, 0, bytes);
  std::vector<int64_t> hpos(tokens);
  for (int64_t t = 0; t < tokens; ++t) hpos[t] = t;
  cudaMemcpy(pos, hpos.data(), tokens * sizeof(int64_t), cudaMemcpyHostToDevice);
  const RopeKernelTensor tq{q, q, heads, heads * d, d}, tk{k, k, heads, heads * d, d};
  double rope_s = 0, copy_s = 0;
  for (auto _ : state) {
    rope_s = EventSeconds([&] { (void)gpu->Apply(dtype, tokens, pos, tq, &tk, false, nullptr); });
    // The copy reads and writes the same 2 * bytes as RoPE on q and k.
    copy_s = EventSeconds([&] { (void)LaunchCopy(copy, static_cast<char*>(copy) + bytes, bytes, nullptr); });
    state.SetIterationTime(rope_s);
  }
  const double moved = 4.0 * static_cast<double>(bytes);  // q, k: read + write
  state.counters["rope_GBps"] = moved / rope_s * 1e-9;
  state.counters["copy_GBps"] = 2.0 * static_cast<double>(bytes) / copy_s * 1e-9;
  state.counters["of_copy"] = (moved / rope_s) / (2.0 * static_cast<double>(bytes) / copy_s);
  cudaFree(q);
  cudaFree(k);
  cudaFree(copy);
  cudaFree(pos);
}
BENCHMARK(BM_RopeQk)
    ->Args({4096, 32, 128, 1})
    ->Args({4096, 32, 128, 0})
    ->Args({65536, 8, 128, 1})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace gpe::encodings::sequence::cuda
