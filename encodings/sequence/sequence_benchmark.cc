// GRAPE-M and the algebraic encodings applied to (b, s, h, d) float32 tensors, reported
// as GB/s beside a STREAM-style triad (McCalpin) measured in the same binary
// (measure/machine_limits.h), and the FMA peak for the O(d^2) encodings:
//   ./bazelw run -c opt //encodings/sequence:sequence_benchmark -- --benchmark_min_time=0.2
// Each row of the tensor (one token of one head, d contiguous floats) is transformed at
// its token's position (s index; every head of a token shares it), out of place into a
// second tensor, so an iteration reads and writes the tensor once: 2 x bytes (positions,
// 8 bytes per row, are not counted). RoPE's own rows live in rope_benchmark.
// These encodings form their rotations per row from exactly reduced angles (GRAPE-M),
// a dense d x d product (algebraic sequence/grid: O(d^2) per row, compute-bound by
// design, see frac_of_fma_peak) or a path product (trees: O(depth d^2)).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <map>
#include <random>
#include <tuple>
#include <vector>

#include <Eigen/Dense>
#include "benchmark/benchmark.h"
#include "encodings/sequence/algebraic.h"
#include "encodings/sequence/grape_m.h"
#include "group/so_planes.h"
#include "measure/machine_limits.h"

namespace gpe {
namespace encodings {
namespace sequence {
namespace {

double TriadGBs() {
  // The best of five measurements (each a best of a few repetitions), as rope_benchmark.
  static const double triad = [] {
    double best = 0;
    for (int r = 0; r < 5; ++r) best = std::max(best, measure::TriadBandwidthGBs(1));
    return best;
  }();
  return triad;
}
double FmaPeakGflops() {
  static const double peak = measure::FmaPeakGflops(1);
  return peak;
}

// GB/s of 2 x tensor bytes per iteration, the triad beside it and the fraction of it;
// flops_per_row > 0 adds the arithmetic rate as a fraction of the FMA peak.
// The fastest iteration of the last benchmark loop (Loop below), in seconds.
double g_best_seconds = 0;

void SetCounters(benchmark::State& state, int64_t rows, int64_t d, double flops_per_row) {
  const int64_t bytes = 2 * rows * d * static_cast<int64_t>(sizeof(float));
  state.counters["best_frac_of_triad"] = static_cast<double>(bytes) * 1e-9 / g_best_seconds / TriadGBs();
  state.SetBytesProcessed(state.iterations() * bytes);
  state.counters["triad_GB/s"] = TriadGBs();
  state.counters["frac_of_triad"] = benchmark::Counter(
      static_cast<double>(bytes) * 1e-9 / TriadGBs(), benchmark::Counter::kIsIterationInvariantRate);
  if (flops_per_row > 0) {
    state.counters["fma_peak_GFLOP/s"] = FmaPeakGflops();
    state.counters["frac_of_fma_peak"] =
        benchmark::Counter(rows * flops_per_row * 1e-9 / FmaPeakGflops(),
                           benchmark::Counter::kIsIterationInvariantRate);
  }
}

// A (b, s, h, d) tensor as b*s*h rows with the positions of their tokens.
struct Batch {
  int64_t rows, d;
  std::vector<int64_t> positions;
  std::vector<float> x, out;
};

Batch MakeBatch(int64_t b, int64_t s, int64_t h, int64_t d) {
  Batch t{b * s * h, d, {}, {}, {}};
  t.positions.reserve(t.rows);
  for (int64_t bi = 0; bi < b; ++bi) {
    for (int64_t si = 0; si < s; ++si) {
      for (int64_t hi = 0; hi < h; ++hi) t.positions.push_back(1000 * bi + si);
    }
  }
  std::mt19937_64 rng(1);
  std::normal_distribution<float> normal;
  t.x.resize(t.rows * d);
  for (float& v : t.x) v = normal(rng);
  t.out.resize(t.x.size());
  return t;
}

Eigen::MatrixXd RandomSkew(int64_t d, std::mt19937_64& rng) {
  std::normal_distribution<double> normal(0.0, 0.1);
  Eigen::MatrixXd a(d, d);
  for (int64_t i = 0; i < d * d; ++i) a.data()[i] = normal(rng);
  return a - a.transpose();
}

// The fastest iteration's bandwidth beside the triad's (itself a best of several
// repetitions): on a shared machine the best of each is what the machine can do.

template <class Body>
void Loop(benchmark::State& state, Body body) {
  double best = 1e300;
  for (auto _ : state) {
    const auto start = std::chrono::steady_clock::now();
    body();
    benchmark::ClobberMemory();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  g_best_seconds = best;
}

template <class Rep>
void Run(benchmark::State& state, const Rep& rep, Batch& t) {
  Loop(state, [&] {
    benchmark::DoNotOptimize(
        rep.template Apply<float>(t.positions, t.x.data(), t.d, t.out.data(), t.d).ok());
  });
}

// args: batch, seq, heads, head_dim.
void BM_GrapeMCommutingPlanes(benchmark::State& state) {
  Batch t = MakeBatch(state.range(0), state.range(1), state.range(2), state.range(3));
  std::vector<double> thetas(t.d / 2);  // RoPE's default, base^(-2i/d) (Su et al., eq. 15)
  for (int64_t i = 0; i < t.d / 2; ++i) thetas[i] = std::pow(10000.0, -2.0 * i / t.d);
  const GrapeMCommutingPlanes rep = *GrapeMCommutingPlanes::FromRoPE(
      *group::CommutingPlanes::Create(t.d, t.d, thetas, group::PlanePairing::kHalfSplit));
  Run(state, rep, t);
  SetCounters(state, t.rows, t.d, 0);
}

// args: batch, seq, heads, head_dim, number of rank-2 generators.
void BM_GrapeMProduct(benchmark::State& state) {
  Batch t = MakeBatch(state.range(0), state.range(1), state.range(2), state.range(3));
  std::mt19937_64 rng(2);
  std::normal_distribution<double> normal;
  std::vector<Rank2Generator> gens(static_cast<size_t>(state.range(4)));
  for (Rank2Generator& g : gens) {
    g.a.resize(t.d);
    g.b.resize(t.d);
    for (double& v : g.a) v = normal(rng);
    for (double& v : g.b) v = normal(rng);
    g.omega = 0.01;
  }
  const GrapeMProduct rep = *GrapeMProduct::Create(gens);
  Run(state, rep, t);
  SetCounters(state, t.rows, t.d, 0);
}

// args: batch, seq, heads, head_dim. W^p x through the real Schur form: two d x d
// basis changes per row (4 d^2 flops) plus the plane rotations.
void BM_AlgebraicSequence(benchmark::State& state) {
  Batch t = MakeBatch(state.range(0), state.range(1), state.range(2), state.range(3));
  std::mt19937_64 rng(3);
  const AlgebraicSequence rep = *AlgebraicSequence::Create(RandomSkew(t.d, rng));
  Run(state, rep, t);
  SetCounters(state, t.rows, t.d, 4.0 * t.d * t.d);
}

// args: batch, seq, heads, head_dim: a 2D grid, seq = side^2 tokens in raster order,
// half the dimensions per axis.
void BM_AlgebraicGrid2D(benchmark::State& state) {
  Batch t = MakeBatch(state.range(0), state.range(1), state.range(2), state.range(3));
  std::mt19937_64 rng(4);
  const AlgebraicGrid2D rep =
      *MakeAlgebraicGrid2D(RandomSkew(t.d / 2, rng), RandomSkew(t.d - t.d / 2, rng));
  int64_t side = 1;
  while (side * side < state.range(1)) ++side;
  std::vector<std::tuple<int64_t, int64_t>> cells;
  cells.reserve(t.rows);
  for (int64_t p : t.positions) cells.emplace_back(p / side, p % side);
  Loop(state, [&] {
    benchmark::DoNotOptimize(rep.Apply<float>(cells, t.x.data(), t.d, t.out.data(), t.d).ok());
  });
  // Two blocks of (d/2)^2 per basis change: half the sequence's flops.
  SetCounters(state, t.rows, t.d, 2.0 * t.d * t.d);
}

// args: batch, seq, heads, head_dim, depth: tokens are nodes of a binary tree at the
// given depth (addresses from the token index), O(depth d^2) per row.
void BM_AlgebraicTree(benchmark::State& state) {
  Batch t = MakeBatch(state.range(0), state.range(1), state.range(2), state.range(3));
  const int64_t depth = state.range(4);
  std::mt19937_64 rng(5);
  const AlgebraicTree rep = *AlgebraicTree::Create({RandomSkew(t.d, rng), RandomSkew(t.d, rng)});
  std::vector<AlgebraicTree::Address> nodes;
  nodes.reserve(t.rows);
  for (int64_t p : t.positions) {
    AlgebraicTree::Address a(depth);
    for (int64_t s = 0; s < depth; ++s) a[s] = (p >> s) & 1;
    nodes.push_back(std::move(a));
  }
  Loop(state, [&] {
    benchmark::DoNotOptimize(rep.Apply<float>(nodes, t.x.data(), t.d, t.out.data(), t.d).ok());
  });
  SetCounters(state, t.rows, t.d, 2.0 * depth * t.d * t.d);
}

// args: batch, seq, heads, head_dim: a periodic domain of period 64 (plane rotations by
// exact residues), O(d) per row like RoPE.
void BM_AlgebraicPeriodic(benchmark::State& state) {
  Batch t = MakeBatch(state.range(0), state.range(1), state.range(2), state.range(3));
  std::vector<int64_t> multipliers(t.d / 2);
  for (int64_t i = 0; i < t.d / 2; ++i) multipliers[i] = i + 1;
  const group::CyclicPlanes rep = *MakeAlgebraicPeriodic(t.d, 64, multipliers);
  Run(state, rep, t);
  SetCounters(state, t.rows, t.d, 0);
}

BENCHMARK(BM_GrapeMCommutingPlanes)->Args({1, 4096, 32, 128})->Unit(benchmark::kMillisecond);
BENCHMARK(BM_GrapeMProduct)->Args({1, 1024, 32, 128, 4})->Unit(benchmark::kMillisecond);
BENCHMARK(BM_AlgebraicSequence)->Args({1, 1024, 32, 64})->Unit(benchmark::kMillisecond);
BENCHMARK(BM_AlgebraicGrid2D)->Args({1, 1024, 32, 64})->Unit(benchmark::kMillisecond);
BENCHMARK(BM_AlgebraicTree)->Args({1, 256, 32, 64, 4})->Unit(benchmark::kMillisecond);
BENCHMARK(BM_AlgebraicPeriodic)->Args({1, 4096, 32, 128})->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace sequence
}  // namespace encodings
}  // namespace gpe
