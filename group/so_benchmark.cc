// Apply cost of the three SO(d) routes on a batch of float32 vectors:
// rank-2 closed form (O(d)), commuting planes / RoPE (O(d)), dense Schur (O(d^2)).
//   ./bazelw run //group:so_benchmark
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include <Eigen/Dense>
#include "benchmark/benchmark.h"
#include "group/so_dense.h"
#include "group/so_planes.h"
#include "group/so_rank2.h"

namespace gpe {
namespace group {
namespace {

constexpr int64_t kBatch = 128;

struct Batch {
  std::vector<int64_t> positions;
  std::vector<float> x;
};

Batch MakeBatch(int64_t d) {
  std::mt19937_64 rng(1);
  std::normal_distribution<float> normal;
  Batch b;
  for (int64_t j = 0; j < kBatch; ++j) b.positions.push_back(static_cast<int64_t>(rng() % 1000000));
  b.x.resize(kBatch * d);
  for (float& v : b.x) v = normal(rng);
  return b;
}

void SetCounters(benchmark::State& state, int64_t d) {
  state.SetItemsProcessed(state.iterations() * kBatch);
  state.SetBytesProcessed(state.iterations() * kBatch * d * 2 * static_cast<int64_t>(sizeof(float)));
}

void BM_Rank2Apply(benchmark::State& state) {
  const int64_t d = state.range(0);
  std::mt19937_64 rng(2);
  std::normal_distribution<double> normal;
  std::vector<double> a(d), b(d);
  for (int64_t i = 0; i < d; ++i) {
    a[i] = normal(rng);
    b[i] = normal(rng);
  }
  const Rank2Rotation rho = *Rank2Rotation::Create(a, b, 0.01);
  Batch batch = MakeBatch(d);
  for (auto _ : state) {
    benchmark::DoNotOptimize(
        rho.Apply<float>(batch.positions, batch.x.data(), d, batch.x.data(), d).ok());
    benchmark::ClobberMemory();
  }
  SetCounters(state, d);
}

void BM_CommutingPlanesApply(benchmark::State& state) {
  const int64_t d = state.range(0);
  std::vector<double> thetas(d / 2);
  for (int64_t i = 0; i < d / 2; ++i) thetas[i] = std::pow(10000.0, -2.0 * i / d);
  const CommutingPlanes rho = *CommutingPlanes::Create(d, d, thetas, PlanePairing::kHalfSplit);
  Batch batch = MakeBatch(d);
  for (auto _ : state) {
    benchmark::DoNotOptimize(
        rho.Apply<float>(batch.positions, batch.x.data(), d, batch.x.data(), d).ok());
    benchmark::ClobberMemory();
  }
  SetCounters(state, d);
}

void BM_SchurApply(benchmark::State& state) {
  const int64_t d = state.range(0);
  std::mt19937_64 rng(3);
  std::normal_distribution<double> normal;
  Eigen::MatrixXd m(d, d);
  for (int64_t i = 0; i < d; ++i) {
    for (int64_t j = 0; j < d; ++j) m(i, j) = normal(rng);
  }
  const SchurRotation rho = *SchurRotation::Create(0.5 * (m - m.transpose()) / std::sqrt(d));
  Batch batch = MakeBatch(d);
  for (auto _ : state) {
    benchmark::DoNotOptimize(
        rho.Apply<float>(batch.positions, batch.x.data(), d, batch.x.data(), d).ok());
    benchmark::ClobberMemory();
  }
  SetCounters(state, d);
}

BENCHMARK(BM_Rank2Apply)->RangeMultiplier(2)->Range(64, 1024);
BENCHMARK(BM_CommutingPlanesApply)->RangeMultiplier(2)->Range(64, 1024);
BENCHMARK(BM_SchurApply)->RangeMultiplier(2)->Range(64, 1024)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace group
}  // namespace gpe
