// Standalone RoPE on q and k on the GPU (the goal: >= 85% of the copy bandwidth measured
// in this binary, measure/cuda/gpu_limits.h), beside a copy kernel moving the same bytes.
// Times are medians of CUDA-event-timed launches on random data; bytes count every element
// of q and k read once and written once. Counters: rope_GBps, copy_GBps, of_copy.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "encodings/sequence/cuda/rope_cuda.h"
#include "measure/cuda/gpu_limits.h"

namespace gpe::encodings::sequence::cuda {
namespace {

namespace mc = ::gpe::measure::cuda;

// args: tokens, heads (q and k each), head_dim, dtype (0 f32, 1 bf16, 2 f16),
// interleaved (0/1).
void BM_RopeQk(benchmark::State& state) {
  std::string why;
  if (CudaDeviceCount(&why) == 0) {
    state.SkipWithError(("no CUDA device: " + why).c_str());
    return;
  }
  const int64_t tokens = state.range(0), heads = state.range(1), d = state.range(2);
  const RopeDType dtype = static_cast<RopeDType>(state.range(3));
  const int64_t esize = dtype == RopeDType::kFloat32 ? 4 : 2;
  RopeOptions o;
  o.head_dim = d;
  o.rotary_dim = d;
  o.pairing = state.range(4) != 0 ? PlanePairing::kInterleaved : PlanePairing::kHalfSplit;
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
  // Random bits (bf16 fill over the bytes: finite values for every dtype).
  (void)mc::LaunchFillRandomBf16(q, bytes / 2, 1, nullptr);
  (void)mc::LaunchFillRandomBf16(k, bytes / 2, 2, nullptr);
  (void)mc::LaunchFillRandomBf16(copy, bytes / 2, 3, nullptr);
  std::vector<int64_t> hpos(tokens);
  for (int64_t t = 0; t < tokens; ++t) hpos[t] = t;
  cudaMemcpy(pos, hpos.data(), tokens * sizeof(int64_t), cudaMemcpyHostToDevice);
  const RopeKernelTensor tq{q, q, heads, heads * d, d}, tk{k, k, heads, heads * d, d};
  double rope_s = 0, copy_s = 0;
  std::string err;
  for (auto _ : state) {
    // Forward then backward alternate, so the data stay bounded over the repetitions.
    bool backward = false;
    absl::StatusOr<double> r = mc::EventSeconds([&] {
      absl::Status s = gpu->Apply(dtype, tokens, pos, tq, &tk, backward, nullptr);
      if (!s.ok() && err.empty()) err = std::string(s.message());
      backward = !backward;
    });
    // The copy reads and writes the same 2 * bytes as RoPE on q and k.
    absl::StatusOr<double> c = mc::EventSeconds(
        [&] { (void)mc::LaunchCopy(copy, static_cast<char*>(copy) + bytes, bytes, nullptr); });
    if (!r.ok() || !c.ok() || !err.empty()) {
      state.SkipWithError((err + std::string(r.status().message()) +
                           std::string(c.status().message())).c_str());
      break;
    }
    rope_s = *r;
    copy_s = *c;
    state.SetIterationTime(rope_s);
  }
  if (rope_s > 0 && copy_s > 0) {
    const double moved = 4.0 * static_cast<double>(bytes);  // q, k: read + write
    state.counters["rope_GBps"] = moved / rope_s * 1e-9;
    state.counters["copy_GBps"] = 2.0 * static_cast<double>(bytes) / copy_s * 1e-9;
    state.counters["of_copy"] = (moved / rope_s) / (2.0 * static_cast<double>(bytes) / copy_s);
  }
  cudaFree(q);
  cudaFree(k);
  cudaFree(copy);
  cudaFree(pos);
}
BENCHMARK(BM_RopeQk)
    ->ArgNames({"tokens", "heads", "d", "dtype", "interleaved"})
    ->Args({4096, 32, 128, 1, 0})
    ->Args({4096, 32, 128, 1, 1})
    ->Args({4096, 32, 128, 0, 0})
    ->Args({4096, 32, 128, 2, 0})
    ->Args({65536, 8, 128, 1, 0})
    ->Args({65536, 8, 64, 1, 0})
    ->Iterations(3)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace gpe::encodings::sequence::cuda
