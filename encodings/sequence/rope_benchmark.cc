// RoPE apply bandwidth beside a STREAM-style triad (McCalpin), so the GB/s columns
// compare directly:
//   ./bazelw run -c opt //encodings/sequence:rope_benchmark -- --benchmark_min_time=0.2
// Triad a = b + q c moves 3 arrays (2 read, 1 written; write-allocate traffic not
// counted, as in STREAM). RoPE in place reads and writes the tensor once: 2 x bytes.
// The cos/sin table (one row per position, reused across heads) is not counted.
// Times are wall-clock (UseRealTime) so the threaded rows compare fairly.
#include <cstdint>
#include <random>
#include <thread>
#include <vector>

#include "benchmark/benchmark.h"
#include "encodings/sequence/rope.h"

namespace gpe {
namespace encodings {
namespace sequence {
namespace {

void Triad(float* __restrict a, const float* __restrict b, const float* __restrict c,
           float q, int64_t begin, int64_t end) {
  for (int64_t i = begin; i < end; ++i) a[i] = b[i] + q * c[i];
}

// args: elements per array, threads.
void BM_StreamTriad(benchmark::State& state) {
  const int64_t n = state.range(0);
  const int64_t threads = state.range(1);
  std::vector<float> a(n, 0.0f), b(n, 1.0f), c(n, 2.0f);
  for (auto _ : state) {
    std::vector<std::thread> pool;
    for (int64_t k = 1; k < threads; ++k) {
      pool.emplace_back(Triad, a.data(), b.data(), c.data(), 3.0f, n * k / threads,
                        n * (k + 1) / threads);
    }
    Triad(a.data(), b.data(), c.data(), 3.0f, 0, n / threads);
    for (std::thread& t : pool) t.join();
    benchmark::DoNotOptimize(a.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * 3 * n * static_cast<int64_t>(sizeof(float)));
}
// 3 x 64 MiB arrays, the size of the 4096 x 32 x 128 tensor below, and 3 x 256 MiB
// (beyond the 260 MiB L3 of some server parts) for the 16384-token tensor.
BENCHMARK(BM_StreamTriad)
    ->Args({int64_t{16} << 20, 1})
    ->Args({int64_t{16} << 20, 2})
    ->Args({int64_t{64} << 20, 1})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

struct Case {
  Rope rope;
  RopeTensor tensor;
  std::vector<int64_t> offsets;
  std::vector<float> x;
};

Case MakeCase(int64_t b, int64_t s, int64_t h, int64_t d, PlanePairing pairing, int threads) {
  RopeOptions o;
  o.head_dim = d;
  o.rotary_dim = d;
  o.pairing = pairing;
  o.num_threads = threads;
  Case c{*Rope::Create(o, *DefaultRopeFrequencies(d, 500000.0)),
         RopeTensor::Contiguous(RopeLayout::kBSHD, b, s, h, d), std::vector<int64_t>(b, 0), {}};
  std::mt19937_64 rng(1);
  std::normal_distribution<float> normal;
  c.x.resize(b * s * h * d);
  for (float& v : c.x) v = normal(rng);
  for (int64_t k = 0; k < b; ++k) c.offsets[k] = 1000 * k;
  return c;
}

// args: batch, seq, heads, head_dim, pairing (0 half-split, 1 interleaved), threads.
void BM_RopeApplyInPlace(benchmark::State& state) {
  const PlanePairing pairing = state.range(4) ? PlanePairing::kInterleaved : PlanePairing::kHalfSplit;
  Case c = MakeCase(state.range(0), state.range(1), state.range(2), state.range(3), pairing,
                    static_cast<int>(state.range(5)));
  const RopeTable<float> table = *c.rope.MakeTable<float>(c.tensor, {{}, c.offsets});
  for (auto _ : state) {
    benchmark::DoNotOptimize(c.rope.Apply<float>(table, c.tensor, c.x.data(), c.x.data()).ok());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * 2 * static_cast<int64_t>(c.x.size() * sizeof(float)));
}

// Table construction included (exact angle reduction + sincos per position and plane).
void BM_RopeForwardOneShot(benchmark::State& state) {
  const PlanePairing pairing = state.range(4) ? PlanePairing::kInterleaved : PlanePairing::kHalfSplit;
  Case c = MakeCase(state.range(0), state.range(1), state.range(2), state.range(3), pairing,
                    static_cast<int>(state.range(5)));
  for (auto _ : state) {
    benchmark::DoNotOptimize(
        c.rope.Forward<float>(c.tensor, {{}, c.offsets}, c.x.data(), c.x.data()).ok());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * 2 * static_cast<int64_t>(c.x.size() * sizeof(float)));
}

// 4096 x 32 x 128 float32 = 64 MiB.
BENCHMARK(BM_RopeApplyInPlace)
    ->Args({1, 4096, 32, 128, 0, 1})
    ->Args({1, 4096, 32, 128, 1, 1})
    ->Args({1, 4096, 32, 128, 0, 2})
    ->Args({1, 4096, 32, 128, 1, 2})
    ->Args({1, 16384, 32, 128, 0, 1})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_RopeForwardOneShot)
    ->Args({1, 4096, 32, 128, 0, 1})
    ->Args({1, 4096, 32, 128, 0, 2})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace sequence
}  // namespace encodings
}  // namespace gpe
