// Closed-form fit of a 512 x 512 image with K = 256 shifts per axis (Zheng et al.,
// Table 1 set-up: complex encoding + one linear layer, solved in closed form). Trains on
// the full grid; reports flop rate and the fit's PSNR as counters.
#include <cmath>
#include <random>
#include <vector>

#include "benchmark/benchmark.h"
#include "encodings/coordinate/shifted_basis.h"
#include "inr/blended.h"
#include "inr/closed_form.h"

namespace gpe {
namespace inr {
namespace {

using encodings::ShiftedBasis1D;
using encodings::ShiftedBasisKind;

// A smooth test image with edges: rings, a ramp and a disc.
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

void BM_ClosedForm512(benchmark::State& state, ShiftedBasisKind kind, double width_in_spacings,
                      bool float32_products, int num_threads = 0) {
  const int64_t n = 512, k = state.range(0);
  std::vector<double> coords(n);
  for (int64_t i = 0; i < n; ++i) coords[i] = (i + 0.5) / n;
  const ShiftedBasis1D basis =
      *ShiftedBasis1D::Create(kind, k, width_in_spacings / static_cast<double>(k));
  const RowMatrixXd image = TestImage(n);
  SeparableFitOptions options;
  options.lambda = 1e-6;
  options.float32_image_products = float32_products;
  options.num_threads = num_threads;  // 0: automatic (up to 4, the hardware's count)
  const std::vector<RowMatrixXd> channels = {image};
  RowMatrixXd last;
  for (auto _ : state) {
    // Encoding the axes is part of the fit (the paper's timings include it).
    const RowMatrixXd psi = *basis.Encode(coords);
    absl::StatusOr<std::vector<RowMatrixXd>> w = FitSeparable2D(psi, psi, channels, options);
    if (!w.ok()) {
      state.SkipWithError(std::string(w.status().message()).c_str());
      return;
    }
    benchmark::DoNotOptimize((*w)[0].data());
    last = std::move((*w)[0]);
  }
  const RowMatrixXd psi = *basis.Encode(coords);
  const double psnr = *Psnr(*PredictSeparable2D(psi, psi, last), image);
  state.counters["PSNR_dB"] = psnr;
  // The fit exploits the bases' bandwidth, so its flop count depends on the basis; the
  // figure to compare is the time itself, beside NumPy's dense solve (`gpe bench`).
}

BENCHMARK_CAPTURE(BM_ClosedForm512, gaussian_fp64, ShiftedBasisKind::kGaussian, 1.0, false)
    ->Arg(256)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_ClosedForm512, gaussian_mixed, ShiftedBasisKind::kGaussian, 1.0, true)
    ->Arg(256)->Unit(benchmark::kMillisecond)->UseRealTime();
// The same on one thread, for the parallel speed-up.
BENCHMARK_CAPTURE(BM_ClosedForm512, gaussian_mixed_1thread, ShiftedBasisKind::kGaussian, 1.0,
                  true, 1)
    ->Arg(256)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_ClosedForm512, triangle_fp64, ShiftedBasisKind::kTriangle, 2.0, false)
    ->Arg(256)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_ClosedForm512, triangle_mixed, ShiftedBasisKind::kTriangle, 2.0, true)
    ->Arg(256)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace inr
}  // namespace gpe

namespace gpe {
namespace inr {
namespace {

// The parts of the fit (0: encode, 1: ridge pseudo-inverse, 2: the two image GEMMs).
void BM_Part(benchmark::State& state) {
  const int64_t n = 512, k = 256;
  std::vector<double> coords(n);
  for (int64_t i = 0; i < n; ++i) coords[i] = (i + 0.5) / n;
  const ShiftedBasis1D basis = *ShiftedBasis1D::Create(ShiftedBasisKind::kGaussian, k, 1.0 / k);
  const RowMatrixXd image = TestImage(n);
  const RowMatrixXd psi = *basis.Encode(coords);
  const RowMatrixXd a_t = *RidgePinvTransposed(psi, 1e-6);
  const RowMatrixXd w = *FitSeparable2D(psi, psi, image, 1e-6);
  for (auto _ : state) {
    switch (state.range(0)) {
      case 0: benchmark::DoNotOptimize(basis.Encode(coords)->data()); break;
      case 1: benchmark::DoNotOptimize(RidgePinvTransposed(psi, 1e-6)->data()); break;
      case 2:  // the same two GEMM shapes as W = A S A^T
        benchmark::DoNotOptimize(PredictSeparable2D(a_t, a_t, w)->data());
        break;
    }
  }
}
BENCHMARK(BM_Part)->DenseRange(0, 2)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace inr
}  // namespace gpe

namespace gpe {
namespace inr {
namespace {

// Zheng et al. Table 2 set-up: 25% of the 512 x 512 pixels at random, a virtual grid of
// range(0) x range(0) points with K = range(0) Gaussian shifts per axis, CGLS to a 1e-4
// relative gradient; PSNR on the held-out 75%.
void BM_Blended512(benchmark::State& state) {
  const int64_t n = 512, g = state.range(0);
  const RowMatrixXd image = TestImage(n);
  std::mt19937_64 rng(1);
  std::vector<double> px, py, s, tx, ty, ts;
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      const bool train = rng() % 4 == 0;
      (train ? px : tx).push_back((j + 0.5) / n);
      (train ? py : ty).push_back((i + 0.5) / n);
      (train ? s : ts).push_back(image(i, j));
    }
  }
  std::vector<double> grid(g);
  for (int64_t i = 0; i < g; ++i) grid[i] = static_cast<double>(i) / (g - 1);
  const ShiftedBasis1D basis =
      *ShiftedBasis1D::Create(ShiftedBasisKind::kGaussian, g, 1.0 / g, 0.0, 1.0 + 1.0 / g);
  const AxisEncoder enc = [&](absl::Span<const double> x) { return basis.Encode(x); };
  BlendedFitOptions options;
  options.lambda = 1e-4;
  options.tolerance = 1e-4;
  int iterations = 0;
  double psnr = 0;
  for (auto _ : state) {
    absl::StatusOr<BlendedFit> fit = FitBlended2D(enc, enc, grid, grid, px, py, s, options);
    if (!fit.ok()) {
      state.SkipWithError(std::string(fit.status().message()).c_str());
      return;
    }
    iterations = fit->iterations;
    state.PauseTiming();
    const std::vector<double> pred = *PredictBlended2D(enc, enc, grid, grid, tx, ty, fit->weights);
    double se = 0;
    for (size_t q = 0; q < pred.size(); ++q) se += (pred[q] - ts[q]) * (pred[q] - ts[q]);
    psnr = 10 * std::log10(pred.size() / se);
    state.ResumeTiming();
  }
  state.counters["iterations"] = iterations;
  state.counters["test_PSNR_dB"] = psnr;
}
BENCHMARK(BM_Blended512)->Arg(128)->Arg(256)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(1);

}  // namespace
}  // namespace inr
}  // namespace gpe
