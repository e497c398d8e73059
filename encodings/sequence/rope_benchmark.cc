// RoPE apply bandwidth beside a STREAM-style triad (McCalpin) measured in the same
// binary, reported as frac_of_triad:
//   ./bazelw run //encodings/sequence:rope_benchmark -- --benchmark_min_time=0.2
// RoPE in place reads and writes the tensor once: 2 x bytes. A 64 MiB tensor fits in the
// last-level cache of large server parts, where the fraction can exceed 1; the 16384-token
// (256 MiB) case is the bandwidth-bound one.
// The cos/sin table (one row per position, reused across heads) is not counted.
// Times are wall-clock (UseRealTime) so the threaded rows compare fairly.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
#include <random>
#include <thread>
#include <vector>

#include "benchmark/benchmark.h"
#include "encodings/sequence/rope.h"
#include "measure/machine_limits.h"

namespace gpe {
namespace encodings {
namespace sequence {
namespace {

// The machine's triad bandwidth for `threads` threads, measured once per thread count
// in this binary (measure/machine_limits.h: 3 x 256 MiB arrays, beyond the last-level cache).
double TriadGBs(int threads) {
  static std::map<int, double>* cache = new std::map<int, double>();
  auto it = cache->find(threads);
  if (it == cache->end()) {
    // The best of five measurements (each itself a best of a few repetitions): on a
    // shared machine one measurement can land entirely inside another process's burst.
    double best = 0;
    for (int r = 0; r < 5; ++r) best = std::max(best, measure::TriadBandwidthGBs(threads));
    it = cache->emplace(threads, best).first;
  }
  return it->second;
}

// Bytes moved per iteration -> GB/s, the triad beside it, and the fraction of it.
void SetBandwidthCounters(benchmark::State& state, int64_t bytes, int threads) {
  state.SetBytesProcessed(state.iterations() * bytes);
  const double triad = TriadGBs(threads);
  state.counters["triad_GB/s"] = triad;
  state.counters["frac_of_triad"] =
      benchmark::Counter(static_cast<double>(bytes) * 1e-9 / triad,
                         benchmark::Counter::kIsIterationInvariantRate);
}

// The fastest iteration's bandwidth beside the triad's, which is also a best of several
// repetitions (measure/machine_limits.h): on a shared machine the mean of either is
// mostly a measure of the other processes, the best of each is what the machine can do.
class BestIteration {
 public:
  void Start() { start_ = std::chrono::steady_clock::now(); }
  void Stop() {
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    if (s < best_) best_ = s;
  }
  void SetCounters(benchmark::State& state, int64_t bytes, int threads) const {
    const double gbs = static_cast<double>(bytes) * 1e-9 / best_;
    state.counters["best_GB/s"] = gbs;
    state.counters["best_frac_of_triad"] = gbs / TriadGBs(threads);
  }

 private:
  std::chrono::steady_clock::time_point start_;
  double best_ = 1e300;
};

struct Case {
  Rope rope;
  RopeTensor tensor;
  std::vector<int64_t> offsets;
  measure::LargeFloats x;  // 2 MiB pages, as the triad's arrays (machine_limits.h)
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
  c.x = measure::LargeFloats(b * s * h * d);
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
  BestIteration best;
  for (auto _ : state) {
    best.Start();
    benchmark::DoNotOptimize(c.rope.Apply<float>(table, c.tensor, c.x.data(), c.x.data()).ok());
    benchmark::ClobberMemory();
    best.Stop();
  }
  const int64_t bytes = 2 * c.x.size() * static_cast<int64_t>(sizeof(float));
  SetBandwidthCounters(state, bytes, static_cast<int>(state.range(5)));
  best.SetCounters(state, bytes, static_cast<int>(state.range(5)));
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
  SetBandwidthCounters(state, 2 * c.x.size() * static_cast<int64_t>(sizeof(float)),
                       static_cast<int>(state.range(5)));
}

// q and k of one attention layer, rotated in place with one shared table (as a model's
// forward pass does): 2 tensors, each read and written once.
// args: batch, seq, heads, head_dim, pairing, threads.
void BM_RopeApplyQK(benchmark::State& state) {
  const PlanePairing pairing = state.range(4) ? PlanePairing::kInterleaved : PlanePairing::kHalfSplit;
  Case q = MakeCase(state.range(0), state.range(1), state.range(2), state.range(3), pairing,
                    static_cast<int>(state.range(5)));
  measure::LargeFloats k(q.x.size());
  std::copy(q.x.begin(), q.x.end(), k.begin());
  const RopeTable<float> table = *q.rope.MakeTable<float>(q.tensor, {{}, q.offsets});
  BestIteration best;
  for (auto _ : state) {
    best.Start();
    benchmark::DoNotOptimize(q.rope.Apply<float>(table, q.tensor, q.x.data(), q.x.data()).ok());
    benchmark::DoNotOptimize(q.rope.Apply<float>(table, q.tensor, k.data(), k.data()).ok());
    benchmark::ClobberMemory();
    best.Stop();
  }
  const int64_t bytes = 4 * q.x.size() * static_cast<int64_t>(sizeof(float));
  SetBandwidthCounters(state, bytes, static_cast<int>(state.range(5)));
  best.SetCounters(state, bytes, static_cast<int>(state.range(5)));
}

// The ceiling of RoPE's access pattern: the simplest in-place kernel, x = a x + b, over q
// and k split among the same threads as Apply splits tokens. In-place work moves the bytes
// it counts (no write-allocate read, which the triad's store costs but does not count), so
// on this kind of host both it and RoPE run above the triad; RoPE's best_GB/s over this
// row's says how close Apply is to what the pattern allows.
// args: batch, seq, heads, head_dim, (unused), threads.
void BM_InPlaceScaleQK(benchmark::State& state) {
  const int64_t n = state.range(0) * state.range(1) * state.range(2) * state.range(3);
  const int threads = static_cast<int>(state.range(5));
  measure::LargeFloats q(n), k(n);
  std::fill(q.begin(), q.end(), 0.5f);
  std::fill(k.begin(), k.end(), -0.25f);
  auto scale = [&](int t) {
    const int64_t lo = n * t / threads, hi = n * (t + 1) / threads;
    for (float* x : {q.data(), k.data()}) {
      float* __restrict p = x;
      for (int64_t i = lo; i < hi; ++i) p[i] = p[i] * 0.999f + 0.0001f;
    }
  };
  BestIteration best;
  for (auto _ : state) {
    best.Start();
    std::vector<std::thread> pool;
    for (int t = 1; t < threads; ++t) pool.emplace_back(scale, t);
    scale(0);
    for (std::thread& th : pool) th.join();
    benchmark::ClobberMemory();
    best.Stop();
  }
  const int64_t bytes = 4 * n * static_cast<int64_t>(sizeof(float));
  SetBandwidthCounters(state, bytes, threads);
  best.SetCounters(state, bytes, threads);
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
BENCHMARK(BM_RopeApplyQK)
    ->Args({1, 4096, 32, 128, 0, 1})
    ->Args({1, 4096, 32, 128, 0, 2})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_InPlaceScaleQK)
    ->Args({1, 4096, 32, 128, 0, 1})
    ->Args({1, 4096, 32, 128, 0, 2})
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
