// The GPU closed-form fit (closed_form_cuda.h) against the CPU FitSeparable2D
// (closed_form.h), which closed_form_test.cc checks against the full Kronecker
// least-squares system. Tests that need a GPU skip with a message where none is present;
// the input checks that run before any GPU work run everywhere.
//
// Tolerances. Every comparison is the Frobenius relative difference |W_gpu - W_cpu| /
// |W_cpu|. The factors are random Gaussian n x K with n >= 8K, so cond(Psi) <= ~2.5 and
// cond(G) = cond(Psi)^2 <= ~6 for lambda = 0 (asserted per case: cond(G) < 12). A layout
// or transposition mistake gives a difference of order 1, far above every bound below.
//  - float64: both paths are backward stable; they differ by rounding in summation order
//    and solve method, bounded by ~cond(G_y) cond(G_x) n eps = 144 * 600 * 1.1e-16 ~1e-11
//    (observed ~1e-15 to 1e-14 on CPUs for such cases): tolerance 1e-10.
//  - float32 image products: the image and one factor are rounded to float32 (2^-24
//    relative) and the image-sized product is summed in float32, so M's relative error
//    is ~sqrt(n) 2^-24 typically, n 2^-24 = 3.6e-5 at worst for n = 600; the solves
//    amplify it by at most cond(G_y) cond(G_x) <= 144: worst ~5e-3, typical ~2e-5.
//    Tolerance 1e-3 (a float64 reference, not the CPU's own float32 path, so the bound is
//    the float32 error itself).
#include "inr/cuda/closed_form_cuda.h"

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "inr/closed_form.h"

namespace gpe::inr::cuda {
namespace {

#define SKIP_WITHOUT_GPU()                                                                \
  do {                                                                                    \
    std::string why;                                                                      \
    if (CudaDeviceCount(&why) == 0) {                                                     \
      GTEST_SKIP() << "no CUDA device (" << why << "): the GPU closed-form fit (cuBLAS, " \
                   << "cuSOLVER) is built but cannot run on this machine";                \
    }                                                                                     \
  } while (0)

constexpr double kTolFloat64 = 1e-10;
constexpr double kTolFloat32 = 1e-3;

RowMatrixXd RandomNormal(int64_t rows, int64_t cols, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal;
  RowMatrixXd m(rows, cols);
  for (int64_t i = 0; i < m.size(); ++i) m.data()[i] = normal(rng);
  return m;
}

RowMatrixXd RandomImage(int64_t rows, int64_t cols, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  RowMatrixXd m(rows, cols);
  for (int64_t i = 0; i < m.size(); ++i) m.data()[i] = uniform(rng);
  return m;
}

double RelDiff(const RowMatrixXd& a, const RowMatrixXd& b) {
  EXPECT_EQ(a.rows(), b.rows());
  EXPECT_EQ(a.cols(), b.cols());
  if (a.rows() != b.rows() || a.cols() != b.cols()) return std::numeric_limits<double>::infinity();
  return (a - b).norm() / b.norm();
}

const char* Name(Contraction c) {
  switch (c) {
    case Contraction::kAuto:
      return "auto";
    case Contraction::kYFirst:
      return "y-first";
    case Contraction::kXFirst:
      return "x-first";
  }
  return "?";
}

struct Shape {
  int64_t ny, nx, ky, kx;
};

// Non-square images, K_y != K_x, both GEMM orders' preferred shapes (96 x 40 with
// K = 12 x 5 prefers x first, its transpose y first), odd sizes, and one above cuSOLVER's
// and cuBLAS's small-matrix paths (K = 72 x 64).
const Shape kShapes[] = {{64, 64, 8, 8}, {96, 40, 12, 5},   {40, 96, 5, 12},
                         {33, 17, 4, 2}, {128, 80, 16, 10}, {600, 520, 72, 64}};

TEST(FitSeparable2DCuda, MatchesTheCpuFitInFloat64AndFloat32) {
  SKIP_WITHOUT_GPU();
  uint64_t seed = 1;
  for (const Shape& sh : kShapes) {
    const RowMatrixXd psi_y = RandomNormal(sh.ny, sh.ky, seed++);
    const RowMatrixXd psi_x = RandomNormal(sh.nx, sh.kx, seed++);
    const RowMatrixXd s = RandomImage(sh.ny, sh.nx, seed++);
    // The tolerances assume well-conditioned factors (see the top of the file).
    const double cond_y = *ConditionNumber(psi_y), cond_x = *ConditionNumber(psi_x);
    ASSERT_LT(cond_y * cond_y, 12.0) << "ny " << sh.ny << " ky " << sh.ky;
    ASSERT_LT(cond_x * cond_x, 12.0) << "nx " << sh.nx << " kx " << sh.kx;
    for (double lambda : {0.0, 0.5}) {
      const absl::StatusOr<RowMatrixXd> cpu = FitSeparable2D(psi_y, psi_x, s, lambda);
      ASSERT_TRUE(cpu.ok()) << cpu.status();
      for (Contraction order : {Contraction::kAuto, Contraction::kYFirst, Contraction::kXFirst}) {
        for (bool f32 : {false, true}) {
          SeparableFitCudaOptions o;
          o.lambda = lambda;
          o.contraction = order;
          o.float32_image_products = f32;
          const absl::StatusOr<RowMatrixXd> gpu = FitSeparable2DCuda(psi_y, psi_x, s, o);
          ASSERT_TRUE(gpu.ok()) << gpu.status();
          ASSERT_EQ(gpu->rows(), sh.ky);
          ASSERT_EQ(gpu->cols(), sh.kx);
          EXPECT_LT(RelDiff(*gpu, *cpu), f32 ? kTolFloat32 : kTolFloat64)
              << sh.ny << " x " << sh.nx << " image, K " << sh.ky << " x " << sh.kx << ", lambda "
              << lambda << ", " << Name(order) << (f32 ? ", float32" : "");
        }
      }
    }
  }
}

// The order kAuto picks: the cheaper contraction (y first on ties).
TEST(SeparableFitterCuda, AutoPicksTheCheaperContraction) {
  SKIP_WITHOUT_GPU();
  absl::StatusOr<SeparableFitterCuda> f = SeparableFitterCuda::Create({});
  ASSERT_TRUE(f.ok()) << f.status();
  // 96 x 40, K 12 x 5: y first 2 * 40 * 12 * (96 + 5), x first 2 * 96 * 5 * (40 + 12).
  ASSERT_TRUE(f->SetFactors(RandomNormal(96, 12, 1), RandomNormal(40, 5, 2)).ok());
  EXPECT_EQ(f->contraction(), Contraction::kXFirst);
  ASSERT_TRUE(f->SetFactors(RandomNormal(40, 5, 3), RandomNormal(96, 12, 4)).ok());
  EXPECT_EQ(f->contraction(), Contraction::kYFirst);
  ASSERT_TRUE(f->SetFactors(RandomNormal(64, 8, 5), RandomNormal(64, 8, 6)).ok());
  EXPECT_EQ(f->contraction(), Contraction::kYFirst);
  EXPECT_EQ(f->ny(), 64);
  EXPECT_EQ(f->kx(), 8);
  EXPECT_GT(f->device_bytes(), 0u);
}

// Several channels share one factorisation; each matches the CPU's multi-channel fit.
TEST(FitSeparable2DCuda, ChannelsMatchTheCpu) {
  SKIP_WITHOUT_GPU();
  const RowMatrixXd psi_y = RandomNormal(80, 10, 11), psi_x = RandomNormal(72, 9, 12);
  const std::vector<RowMatrixXd> channels = {RandomImage(80, 72, 13), RandomImage(80, 72, 14),
                                             RandomImage(80, 72, 15)};
  SeparableFitOptions cpu_options;
  cpu_options.lambda = 1e-3;
  const absl::StatusOr<std::vector<RowMatrixXd>> cpu =
      FitSeparable2D(psi_y, psi_x, channels, cpu_options);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  SeparableFitCudaOptions o;
  o.lambda = 1e-3;
  const absl::StatusOr<std::vector<RowMatrixXd>> gpu =
      FitSeparable2DCuda(psi_y, psi_x, channels, o);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  ASSERT_EQ(gpu->size(), 3u);
  for (size_t c = 0; c < 3; ++c) EXPECT_LT(RelDiff((*gpu)[c], (*cpu)[c]), kTolFloat64) << c;
}

// Host matrices with a row stride larger than their width (blocks of larger matrices).
TEST(FitSeparable2DCuda, StridedHostMatrices) {
  SKIP_WITHOUT_GPU();
  const RowMatrixXd big_y = RandomNormal(70, 20, 21), big_x = RandomNormal(60, 15, 22);
  const RowMatrixXd big_s = RandomImage(70, 90, 23);
  const MatrixRef psi_y = big_y.block(3, 2, 64, 8);
  const MatrixRef psi_x = big_x.block(1, 4, 56, 7);
  const MatrixRef s = big_s.block(3, 10, 64, 56);
  ASSERT_NE(psi_y.outerStride(), psi_y.cols());
  ASSERT_NE(s.outerStride(), s.cols());
  const absl::StatusOr<RowMatrixXd> cpu =
      FitSeparable2D(RowMatrixXd(psi_y), RowMatrixXd(psi_x), RowMatrixXd(s), 0.0);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  const absl::StatusOr<RowMatrixXd> gpu = FitSeparable2DCuda(psi_y, psi_x, s, {});
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  EXPECT_LT(RelDiff(*gpu, *cpu), kTolFloat64);
}

// The device-pointer API on data the caller keeps on the GPU gives the host API's W, and
// the fitter's stream may be the caller's.
TEST(SeparableFitterCuda, DevicePointersMatchTheHostApi) {
  SKIP_WITHOUT_GPU();
  const int64_t ny = 48, nx = 40, ky = 6, kx = 5;
  const RowMatrixXd psi_y = RandomNormal(ny, ky, 31), psi_x = RandomNormal(nx, kx, 32);
  const RowMatrixXd s = RandomImage(ny, nx, 33);
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  SeparableFitCudaOptions o;
  o.lambda = 0.25;
  o.stream = stream;
  absl::StatusOr<SeparableFitterCuda> f = SeparableFitterCuda::Create(o);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->stream(), static_cast<void*>(stream));
  double *d_py = nullptr, *d_px = nullptr, *d_s = nullptr, *d_w = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&d_py), psi_y.size() * sizeof(double)),
            cudaSuccess);
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&d_px), psi_x.size() * sizeof(double)),
            cudaSuccess);
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&d_s), s.size() * sizeof(double)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&d_w), ky * kx * sizeof(double)), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(d_py, psi_y.data(), psi_y.size() * sizeof(double), cudaMemcpyHostToDevice),
            cudaSuccess);
  ASSERT_EQ(cudaMemcpy(d_px, psi_x.data(), psi_x.size() * sizeof(double), cudaMemcpyHostToDevice),
            cudaSuccess);
  ASSERT_EQ(cudaMemcpy(d_s, s.data(), s.size() * sizeof(double), cudaMemcpyHostToDevice),
            cudaSuccess);

  // Fitting before the factors are set is an error, not garbage.
  EXPECT_EQ(f->FitDevice(d_s, d_w).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(f->SetFactorsDevice(nullptr, ny, ky, d_px, nx, kx).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(f->SetFactorsDevice(d_py, 0, ky, d_px, nx, kx).code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(f->SetFactorsDevice(d_py, ny, ky, d_px, nx, kx).ok());
  EXPECT_EQ(f->FitDevice(nullptr, d_w).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(f->FitDevice(d_s, d_w).ok());
  RowMatrixXd w_dev(ky, kx);
  ASSERT_EQ(cudaMemcpy(w_dev.data(), d_w, ky * kx * sizeof(double), cudaMemcpyDeviceToHost),
            cudaSuccess);

  const absl::StatusOr<RowMatrixXd> w_host = f->Fit(s);
  ASSERT_TRUE(w_host.ok()) << w_host.status();
  // The same cuBLAS calls on the same data: equal up to the library's run-to-run
  // rounding (identical in practice).
  EXPECT_LT(RelDiff(w_dev, *w_host), 1e-13);
  const absl::StatusOr<RowMatrixXd> cpu = FitSeparable2D(psi_y, psi_x, s, 0.25);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  EXPECT_LT(RelDiff(w_dev, *cpu), kTolFloat64);

  // A non-finite factor in device memory is found on the device.
  const double nan = std::numeric_limits<double>::quiet_NaN();
  ASSERT_EQ(cudaMemcpy(d_px + 7, &nan, sizeof(double), cudaMemcpyHostToDevice), cudaSuccess);
  const absl::Status bad = f->SetFactorsDevice(d_py, ny, ky, d_px, nx, kx);
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument) << bad;
  EXPECT_NE(bad.message().find("Psi_x"), std::string::npos) << bad;
  // ... and a failed SetFactors leaves no factors behind.
  EXPECT_EQ(f->FitDevice(d_s, d_w).code(), absl::StatusCode::kFailedPrecondition);

  cudaFree(d_py);
  cudaFree(d_px);
  cudaFree(d_s);
  cudaFree(d_w);
  // The fitter must not outlive a caller stream it runs on.
  *f = std::move(*SeparableFitterCuda::Create({}));
  cudaStreamDestroy(stream);
}

// Rank-deficient factors: FailedPrecondition with lambda = 0 on both paths; a ridge makes
// them solvable, and then the paths agree.
TEST(FitSeparable2DCuda, RankDeficientFactorIsFailedPrecondition) {
  SKIP_WITHOUT_GPU();
  RowMatrixXd psi_y = RandomNormal(64, 8, 41);
  RowMatrixXd psi_x = RandomNormal(56, 7, 42);
  psi_x.col(3) = psi_x.col(1);  // duplicated basis function: G_x singular
  const RowMatrixXd s = RandomImage(64, 56, 43);
  for (bool f32 : {false, true}) {
    SeparableFitCudaOptions o;
    o.float32_image_products = f32;
    const absl::StatusOr<RowMatrixXd> gpu = FitSeparable2DCuda(psi_y, psi_x, s, o);
    EXPECT_EQ(gpu.status().code(), absl::StatusCode::kFailedPrecondition) << gpu.status();
    EXPECT_NE(gpu.status().message().find("Psi_x"), std::string::npos) << gpu.status();
  }
  EXPECT_EQ(FitSeparable2D(psi_y, psi_x, s, 0.0).status().code(),
            absl::StatusCode::kFailedPrecondition);
  // With a ridge: G = Psi^T Psi + 0.1 I has cond ~ (|Psi|^2 + 0.1) / 0.1 ~ 1e3, so the
  // float64 bound grows by ~1e3 / 12: 1e-10 still holds with margin (~1e-12).
  SeparableFitCudaOptions ridge;
  ridge.lambda = 0.1;
  const absl::StatusOr<RowMatrixXd> gpu = FitSeparable2DCuda(psi_y, psi_x, s, ridge);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  const absl::StatusOr<RowMatrixXd> cpu = FitSeparable2D(psi_y, psi_x, s, 0.1);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  EXPECT_LT(RelDiff(*gpu, *cpu), kTolFloat64);

  // More basis functions than coordinates (K > n): rank deficient.
  const absl::StatusOr<RowMatrixXd> wide =
      FitSeparable2DCuda(RandomNormal(5, 8, 44), RandomNormal(6, 3, 45), RandomImage(5, 6, 46), {});
  EXPECT_EQ(wide.status().code(), absl::StatusCode::kFailedPrecondition) << wide.status();
  EXPECT_NE(wide.status().message().find("Psi_y"), std::string::npos) << wide.status();

  // Nearly dependent columns (cond(G) ~1e18, past the 4e12 acceptance rule), whether or
  // not the Cholesky factorisation itself breaks down.
  RowMatrixXd near = RandomNormal(64, 8, 47);
  near.col(5) = near.col(2) + 1e-9 * RandomNormal(64, 1, 48);
  const RowMatrixXd square = RandomImage(64, 64, 49);
  const absl::StatusOr<RowMatrixXd> ill = FitSeparable2DCuda(near, psi_y, square, {});
  EXPECT_EQ(ill.status().code(), absl::StatusCode::kFailedPrecondition) << ill.status();
  EXPECT_EQ(FitSeparable2D(near, psi_y, square, 0.0).status().code(),
            absl::StatusCode::kFailedPrecondition);

  // An all-zero factor, lambda = 0.
  const absl::StatusOr<RowMatrixXd> zero =
      FitSeparable2DCuda(RowMatrixXd::Zero(64, 8), psi_x, s, {});
  EXPECT_EQ(zero.status().code(), absl::StatusCode::kFailedPrecondition) << zero.status();
}

// Non-finite images and overflowing products: InvalidArgument, never a non-finite W.
TEST(FitSeparable2DCuda, NonFiniteImageAndOverflowAreInvalidArgument) {
  SKIP_WITHOUT_GPU();
  const RowMatrixXd psi_y = RandomNormal(40, 5, 51), psi_x = RandomNormal(48, 6, 52);
  RowMatrixXd s = RandomImage(40, 48, 53);
  for (bool f32 : {false, true}) {
    SeparableFitCudaOptions o;
    o.float32_image_products = f32;
    for (double bad :
         {std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity()}) {
      RowMatrixXd t = s;
      t(17, 23) = bad;
      const absl::StatusOr<RowMatrixXd> w = FitSeparable2DCuda(psi_y, psi_x, t, o);
      EXPECT_EQ(w.status().code(), absl::StatusCode::kInvalidArgument) << w.status();
      EXPECT_NE(w.status().message().find("non-finite"), std::string::npos) << w.status();
    }
  }
  // Finite in float64, beyond float32's range: an error naming float32.
  RowMatrixXd big = s;
  big(3, 4) = 1e39;
  SeparableFitCudaOptions o32;
  o32.float32_image_products = true;
  const absl::StatusOr<RowMatrixXd> w32 = FitSeparable2DCuda(psi_y, psi_x, big, o32);
  EXPECT_EQ(w32.status().code(), absl::StatusCode::kInvalidArgument) << w32.status();
  EXPECT_NE(w32.status().message().find("float32"), std::string::npos) << w32.status();
  // ... which float64 fits.
  EXPECT_TRUE(FitSeparable2DCuda(psi_y, psi_x, big, {}).ok());
  // Overflowing float64's range: 1e305 times sums of ~|psi| |psi| ~ 1e3..1e4 terms.
  RowMatrixXd huge = RowMatrixXd::Constant(40, 48, 1.5e307);
  const absl::StatusOr<RowMatrixXd> w64 =
      FitSeparable2DCuda(psi_y * 100.0, psi_x * 100.0, huge, {});
  EXPECT_EQ(w64.status().code(), absl::StatusCode::kInvalidArgument) << w64.status();
  EXPECT_NE(w64.status().message().find("float64"), std::string::npos) << w64.status();
}

// The checks that precede any GPU work: these run (and pass) without a GPU.
TEST(FitSeparable2DCuda, BadInputsAreInvalidArgumentWithoutTouchingTheGpu) {
  const RowMatrixXd psi_y = RandomNormal(40, 5, 61), psi_x = RandomNormal(48, 6, 62);
  const RowMatrixXd s = RandomImage(40, 48, 63);
  const auto code = [](const absl::StatusOr<RowMatrixXd>& w) { return w.status().code(); };
  SeparableFitCudaOptions o;
  o.lambda = -1.0;
  EXPECT_EQ(code(FitSeparable2DCuda(psi_y, psi_x, s, o)), absl::StatusCode::kInvalidArgument);
  o.lambda = std::numeric_limits<double>::quiet_NaN();
  EXPECT_EQ(code(FitSeparable2DCuda(psi_y, psi_x, s, o)), absl::StatusCode::kInvalidArgument);
  o.lambda = std::numeric_limits<double>::infinity();
  EXPECT_EQ(code(FitSeparable2DCuda(psi_y, psi_x, s, o)), absl::StatusCode::kInvalidArgument);
  // Shapes: the image against the factors, and empty matrices.
  EXPECT_EQ(code(FitSeparable2DCuda(psi_y, psi_x, s.transpose(), {})),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code(FitSeparable2DCuda(psi_y, psi_x, RowMatrixXd(0, 0), {})),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code(FitSeparable2DCuda(RowMatrixXd(40, 0), psi_x, s, {})),
            absl::StatusCode::kInvalidArgument);
  // Non-finite factors (found on the host).
  RowMatrixXd bad_y = psi_y;
  bad_y(2, 3) = std::numeric_limits<double>::infinity();
  const absl::StatusOr<RowMatrixXd> w = FitSeparable2DCuda(bad_y, psi_x, s, {});
  EXPECT_EQ(w.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(w.status().message().find("Psi_y"), std::string::npos) << w.status();
  RowMatrixXd bad_x = psi_x;
  bad_x(0, 0) = std::numeric_limits<double>::quiet_NaN();
  EXPECT_EQ(code(FitSeparable2DCuda(psi_y, bad_x, s, {})), absl::StatusCode::kInvalidArgument);
  // Channels: none, or one of the wrong shape.
  EXPECT_EQ(FitSeparable2DCuda(psi_y, psi_x, std::vector<RowMatrixXd>{}, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(FitSeparable2DCuda(psi_y, psi_x, std::vector<RowMatrixXd>{s, s.leftCols(47)}, {})
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

// Without a GPU, creating a fitter is FailedPrecondition with the reason (the one test
// that only runs where no GPU is present).
TEST(SeparableFitterCuda, CreateWithoutGpuIsFailedPrecondition) {
  std::string why;
  if (CudaDeviceCount(&why) > 0) GTEST_SKIP() << "a CUDA device is present";
  const absl::StatusOr<SeparableFitterCuda> f = SeparableFitterCuda::Create({});
  EXPECT_EQ(f.status().code(), absl::StatusCode::kFailedPrecondition) << f.status();
  const absl::StatusOr<RowMatrixXd> w = FitSeparable2DCuda(
      RandomNormal(40, 5, 71), RandomNormal(48, 6, 72), RandomImage(40, 48, 73), {});
  EXPECT_EQ(w.status().code(), absl::StatusCode::kFailedPrecondition) << w.status();
}

TEST(SeparableFitterCuda, BadOptionsAreInvalidArgument) {
  SKIP_WITHOUT_GPU();
  SeparableFitCudaOptions o;
  o.lambda = -0.5;
  EXPECT_EQ(SeparableFitterCuda::Create(o).status().code(), absl::StatusCode::kInvalidArgument);
  o.lambda = 0.0;
  o.device = 1 << 20;
  EXPECT_EQ(SeparableFitterCuda::Create(o).status().code(), absl::StatusCode::kInvalidArgument);
  // A fitter's host Fit checks the image's shape against the factors.
  absl::StatusOr<SeparableFitterCuda> f = SeparableFitterCuda::Create({});
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->Fit(RandomImage(4, 4, 1)).status().code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(f->SetFactors(RandomNormal(40, 5, 2), RandomNormal(48, 6, 3)).ok());
  EXPECT_EQ(f->Fit(RandomImage(48, 40, 4)).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(f->Fit(RandomImage(40, 48, 5)).ok());
}

}  // namespace
}  // namespace gpe::inr::cuda
