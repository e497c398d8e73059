// One Lim-sized training run (appendix D.2): Radial image on a 256 x 256 grid, 5% random
// training pixels (3277), 40% validation, T x T encoding with 16 frequencies (32
// features, c = 3), MLP 32 -> 3 x 128 -> 1, 500 full-batch Adam steps at lr 1e-3.
// Prints the wall time (encoding, training and evaluation on all 65536 points) and the
// MSEs, and the OpenBLAS kernel in use. Not a test.
//
// Measured on the 2-core development VM (shared, load ~5), OPENBLAS_NUM_THREADS=1, per
// kernel family (OPENBLAS_CORETYPE): Prescott (OpenBLAS's fallback on this VM) ~41 s,
// Haswell ~20 s, SkylakeX ~13 s. The library keeps whatever family OpenBLAS chose; where
// it printed a fallback, run this with OPENBLAS_CORETYPE set (README.md).

#include <chrono>
#include <cstdio>

#include "encodings/coordinate/fourier_features.h"
#include "inr/blas.h"
#include "inr/data.h"
#include "inr/mlp.h"

int main() {
  using gpe::inr::RowMatrixXd;
  const int64_t n = 256;
  const RowMatrixXd coords = gpe::inr::GridCoordinates(n);
  auto values = gpe::inr::ChannelsToValues(
      {gpe::inr::SyntheticImage(gpe::inr::SyntheticTask::kRadial, n)});
  auto split = gpe::inr::RandomSplit(n * n, 0.05, 0.40, 0);
  auto txt = gpe::encodings::FourierFeatures::TxT(16, 3.0, 0);
  if (!values.ok() || !split.ok() || !txt.ok()) {
    std::fprintf(stderr, "set-up failed\n");
    return 1;
  }
  gpe::inr::InrExperimentOptions options;  // 3 x 128, 500 steps
  options.learning_rate = 1e-3;
  const auto start = std::chrono::steady_clock::now();
  auto result = gpe::inr::RunInrExperiment(&*txt, coords, *values, *split, options);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!result.ok()) {
    std::fprintf(stderr, "%s\n", result.status().ToString().c_str());
    return 1;
  }
  std::printf("OpenBLAS kernel: %s\n", gpe::inr::BlasCoreName().c_str());
  std::printf("train points %zu, 500 steps: %.2f s (encode + train + evaluate)\n",
              split->train.size(), seconds);
  std::printf("MSE train %.5f validation %.5f test %.5f\n", result->train_mse,
              *result->validation_mse, *result->test_mse);
  return 0;
}
