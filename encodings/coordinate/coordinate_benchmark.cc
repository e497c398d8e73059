// Encoding throughput for the INR workloads (Zheng et al. Table 1 sizes; Lim et al.
// appendix D sizes). Run: ./bazelw run -c opt //encodings/coordinate:coordinate_benchmark
#include <cstdint>
#include <random>
#include <vector>

#include "benchmark/benchmark.h"
#include "encodings/coordinate/fourier_features.h"
#include "encodings/coordinate/shifted_basis.h"
#include "encodings/coordinate/so2_bessel.h"

namespace gpe {
namespace encodings {
namespace {

std::vector<double> Grid(int n) {
  std::vector<double> v(n);
  for (int i = 0; i < n; ++i) v[i] = (i + 0.5) / n;
  return v;
}

RowMatrixXd RandomPoints(int64_t n, int dim) {
  std::mt19937_64 rng(1);
  std::uniform_real_distribution<double> u(-1, 1);
  RowMatrixXd p(n, dim);
  for (int64_t i = 0; i < n; ++i) {
    for (int d = 0; d < dim; ++d) p(i, d) = u(rng);
  }
  return p;
}

// Complex (Kronecker) encoding of an N x N grid in factor form: two N x K matrices.
void BM_ShiftedFactors(benchmark::State& state, ShiftedBasisKind kind, double width) {
  const int n = static_cast<int>(state.range(0));
  const int k = static_cast<int>(state.range(1));
  auto axis = ShiftedBasis1D::Create(kind, k, width);
  auto enc = ComplexShiftedEncoder::Create({*axis, *axis});
  const std::vector<std::vector<double>> coords = {Grid(n), Grid(n)};
  for (auto _ : state) {
    auto factors = enc->Factors(coords);
    benchmark::DoNotOptimize(factors->data());
  }
  state.SetItemsProcessed(state.iterations() * 2 * n * k);
}
BENCHMARK_CAPTURE(BM_ShiftedFactors, gaussian, ShiftedBasisKind::kGaussian, 0.005)
    ->Args({512, 256})
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_ShiftedFactors, triangle, ShiftedBasisKind::kTriangle, 0.01)
    ->Args({512, 256})
    ->Unit(benchmark::kMicrosecond);

// The same into preallocated factor buffers (no allocation or page faults per call).
void BM_ShiftedFactorsInto(benchmark::State& state, ShiftedBasisKind kind, double width) {
  const int n = static_cast<int>(state.range(0));
  const int k = static_cast<int>(state.range(1));
  auto axis = ShiftedBasis1D::Create(kind, k, width);
  const std::vector<double> coords = Grid(n);
  RowMatrixXd psi_x(n, k), psi_y(n, k);
  for (auto _ : state) {
    benchmark::DoNotOptimize(axis->EncodeTo(coords, psi_x).ok());
    benchmark::DoNotOptimize(axis->EncodeTo(coords, psi_y).ok());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * 2 * n * k);
}
BENCHMARK_CAPTURE(BM_ShiftedFactorsInto, gaussian, ShiftedBasisKind::kGaussian, 0.005)
    ->Args({512, 256})
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_ShiftedFactorsInto, triangle, ShiftedBasisKind::kTriangle, 0.01)
    ->Args({512, 256})
    ->Unit(benchmark::kMicrosecond);

void BM_RffEncode(benchmark::State& state) {
  const int64_t n = state.range(0);
  const int64_t f = state.range(1);
  auto rff = FourierFeatures::Gaussian(2, f, 10.0, FrequencyConvention::kTwoPi, 1);
  const RowMatrixXd points = RandomPoints(n, 2);
  for (auto _ : state) {
    auto out = rff->Encode(points);
    benchmark::DoNotOptimize(out->data());
  }
  state.SetItemsProcessed(state.iterations() * n * 2 * f);
}
BENCHMARK(BM_RffEncode)->Args({100000, 256})->Unit(benchmark::kMillisecond);

void BM_RffBackward(benchmark::State& state) {
  const int64_t n = state.range(0);
  const int64_t f = state.range(1);
  auto rff = FourierFeatures::Gaussian(2, f, 10.0, FrequencyConvention::kTwoPi, 1);
  const RowMatrixXd points = RandomPoints(n, 2);
  const RowMatrixXd grad = RowMatrixXd::Ones(n, 2 * f);
  for (auto _ : state) {
    auto out = rff->Backward(points, grad);
    benchmark::DoNotOptimize(out->data());
  }
  state.SetItemsProcessed(state.iterations() * n * 2 * f);
}
BENCHMARK(BM_RffBackward)->Args({100000, 256})->Unit(benchmark::kMillisecond);

// Lim et al.'s setting: 16 SO(2) terms (32 features) on a 256 x 256 grid.
void BM_So2BesselEncode(benchmark::State& state) {
  const int64_t n = state.range(0);
  auto enc =
      So2BesselEncoder::Sample(16, 25.0, 2, 0, So2BesselEncoder::Input::kCartesian, 1);
  const RowMatrixXd points = RandomPoints(n, 2);
  for (auto _ : state) {
    auto out = enc->Encode(points);
    benchmark::DoNotOptimize(out->data());
  }
  state.SetItemsProcessed(state.iterations() * n * 32);
}
BENCHMARK(BM_So2BesselEncode)->Arg(256 * 256)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace encodings
}  // namespace gpe
