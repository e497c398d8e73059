#include "inr/closed_form.h"

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include <Eigen/Dense>
#include "encodings/coordinate/shifted_basis.h"
#include "gtest/gtest.h"

namespace gpe {
namespace inr {
namespace {

using encodings::ShiftedBasis1D;
using encodings::ShiftedBasisKind;

RowMatrixXd Random(int64_t r, int64_t c, std::mt19937_64& rng) {
  std::normal_distribution<double> normal;
  RowMatrixXd m(r, c);
  for (int64_t i = 0; i < r; ++i) {
    for (int64_t j = 0; j < c; ++j) m(i, j) = normal(rng);
  }
  return m;
}

std::vector<double> Grid(int64_t n) {
  std::vector<double> x(n);
  for (int64_t i = 0; i < n; ++i) x[i] = (i + 0.5) / n;
  return x;
}

RowMatrixXd GaussianFactor(int64_t n, int64_t k, double sigma) {
  return *ShiftedBasis1D::Create(ShiftedBasisKind::kGaussian, k, sigma)->Encode(Grid(n));
}

// Oracle: the pseudo-inverse with ridge by Eigen's LDLT of the normal equations, then
// the explicit Kronecker system solved by Eigen's QR on small sizes.
RowMatrixXd OraclePinv(const RowMatrixXd& psi, double lambda) {
  Eigen::MatrixXd g = psi.transpose() * psi;
  g.diagonal().array() += lambda;
  return g.ldlt().solve(psi.transpose());  // K x n
}

// Noise-free data in the model's range: W is recovered exactly (lambda = 0) and equals
// the least-squares solution of the materialised Kronecker system.
TEST(ClosedForm, RecoversWeightsAndMatchesKroneckerLeastSquares) {
  std::mt19937_64 rng(3);
  const int64_t ny = 23, nx = 17, ky = 9, kx = 6;
  const RowMatrixXd psi_y = GaussianFactor(ny, ky, 0.08), psi_x = GaussianFactor(nx, kx, 0.1);
  const RowMatrixXd w_true = Random(ky, kx, rng);
  const RowMatrixXd s = psi_y * w_true * psi_x.transpose();
  absl::StatusOr<RowMatrixXd> w = FitSeparable2D(psi_y, psi_x, s, 0.0);
  ASSERT_TRUE(w.ok()) << w.status();
  // cond(Psi) here is ~1e2, so the recovered weights carry ~cond^2 eps ~ 1e-12 relative
  // error; 1e-8 leaves room and still fails on any transposition or ordering slip.
  EXPECT_LT((*w - w_true).norm() / w_true.norm(), 1e-8);

  // Noisy data: compare with least squares on the Kronecker system (row-major vec(S),
  // features psi_y (x) psi_x, i.e. vec(W) row-major).
  const RowMatrixXd noisy = s + 0.1 * Random(ny, nx, rng);
  Eigen::MatrixXd kron(ny * nx, ky * kx);
  for (int64_t i = 0; i < ny; ++i) {
    for (int64_t j = 0; j < nx; ++j) {
      for (int64_t a = 0; a < ky; ++a) {
        for (int64_t b = 0; b < kx; ++b) kron(i * nx + j, a * kx + b) = psi_y(i, a) * psi_x(j, b);
      }
    }
  }
  Eigen::VectorXd rhs(ny * nx);
  for (int64_t i = 0; i < ny; ++i) {
    for (int64_t j = 0; j < nx; ++j) rhs[i * nx + j] = noisy(i, j);
  }
  const Eigen::VectorXd oracle = kron.colPivHouseholderQr().solve(rhs);
  w = FitSeparable2D(psi_y, psi_x, noisy, 0.0);
  ASSERT_TRUE(w.ok()) << w.status();
  double worst = 0;
  for (int64_t a = 0; a < ky; ++a) {
    for (int64_t b = 0; b < kx; ++b) worst = std::max(worst, std::abs((*w)(a, b) - oracle[a * kx + b]));
  }
  EXPECT_LT(worst, 1e-8 * oracle.cwiseAbs().maxCoeff());
}

// With ridge, the result equals A_y S A_x^T computed by an independent route.
TEST(ClosedForm, RidgeMatchesIndependentFormulaAndSharesFactors) {
  std::mt19937_64 rng(5);
  const int64_t n = 31, k = 12;
  const RowMatrixXd psi = GaussianFactor(n, k, 0.05);
  const double lambda = 1e-3;
  std::vector<RowMatrixXd> channels = {Random(n, n, rng), Random(n, n, rng), Random(n, n, rng)};
  absl::StatusOr<std::vector<RowMatrixXd>> w = FitSeparable2D(psi, psi, channels, lambda);
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_EQ(w->size(), 3u);
  const RowMatrixXd a = OraclePinv(psi, lambda);
  for (int c = 0; c < 3; ++c) {
    const RowMatrixXd want = a * channels[c] * a.transpose();
    // Both routes solve a system with cond ~1e4: 1e-9 relative is ~1e3 eps * cond.
    EXPECT_LT(((*w)[c] - want).norm() / want.norm(), 1e-9) << "channel " << c;
  }
}

// The mixed-precision option rounds S and A to float32 (2^-24 relative) before the two
// image products; with cond(Psi) ~ 1e2 and n ~ 40-term sums the weights move by
// ~1e-6 relative, so 1e-4 bounds it with margin while any layout slip gives O(1).
TEST(ClosedForm, Float32ImageProductsStayCloseToFloat64) {
  std::mt19937_64 rng(13);
  const RowMatrixXd psi_y = GaussianFactor(41, 12, 0.06), psi_x = GaussianFactor(37, 10, 0.07);
  const std::vector<RowMatrixXd> s = {Random(41, 37, rng)};
  SeparableFitOptions options;
  options.lambda = 1e-4;
  absl::StatusOr<std::vector<RowMatrixXd>> w64 = FitSeparable2D(psi_y, psi_x, s, options);
  options.float32_image_products = true;
  absl::StatusOr<std::vector<RowMatrixXd>> w32 = FitSeparable2D(psi_y, psi_x, s, options);
  ASSERT_TRUE(w64.ok() && w32.ok());
  EXPECT_LT(((*w32)[0] - (*w64)[0]).norm() / (*w64)[0].norm(), 1e-4);
  EXPECT_GT(((*w32)[0] - (*w64)[0]).norm(), 0.0);  // it really took the float32 route
}

// The fit split over threads (rows of M = Psi_y^T S Psi_x and of M G_x^-1 per thread,
// then columns of W) against one thread. Two Gaussian pairs: sigma = half a spacing
// (Psi_y's rows span <= 10 shifts after the 2^-60 flush, so kd <= 9 < K_y / 6 takes the
// band solves; Psi_x, K = 40, is too narrow for them and takes the dense inverse) and
// sigma = 3 spacings (kd ~ 55: dense on both sides); both routes of the image product;
// thread counts that do not divide K (uneven shares, more threads than rows). The band
// route computes each entry of W by the same operations in the same order whatever the
// split (up to BLAS picking other kernels for narrower products): 1e-12 relative. The
// dense route multiplies by an explicit G^-1 whose entries exceed W's by ~cond(G)
// (~1e5 here), and BLAS sums those products in a blocking that depends on the share's
// width, so the split moves W by ~eps cond(G) (measured up to 8e-11): 1e-9. A missed or
// doubled share gives O(1) in both. The single-thread fit is also
// checked against the oracle (cond(G) ~ 1e2 here: 1e-9 is ~1e5 eps * cond).
TEST(ClosedForm, ThreadCountsGiveTheSameWeights) {
  std::mt19937_64 rng(21);
  for (double spacings : {0.5, 3.0}) {
    const int64_t ny = 150, nx = 97, ky = 128, kx = 40;
    const RowMatrixXd psi_y = GaussianFactor(ny, ky, spacings / ky);
    const RowMatrixXd psi_x = GaussianFactor(nx, kx, spacings / kx);
    const std::vector<RowMatrixXd> s = {Random(ny, nx, rng), Random(ny, nx, rng)};
    for (bool f32 : {false, true}) {
      SeparableFitOptions options;
      options.lambda = 1e-3;
      options.float32_image_products = f32;
      options.num_threads = 1;
      absl::StatusOr<std::vector<RowMatrixXd>> one = FitSeparable2D(psi_y, psi_x, s, options);
      ASSERT_TRUE(one.ok()) << one.status();
      if (!f32) {
        const RowMatrixXd ay = OraclePinv(psi_y, options.lambda);
        const RowMatrixXd ax = OraclePinv(psi_x, options.lambda);
        for (int c = 0; c < 2; ++c) {
          const RowMatrixXd want = ay * s[c] * ax.transpose();
          EXPECT_LT(((*one)[c] - want).norm() / want.norm(), 1e-9) << spacings;
        }
      }
      for (int threads : {2, 3, 5, 200}) {
        options.num_threads = threads;
        absl::StatusOr<std::vector<RowMatrixXd>> many = FitSeparable2D(psi_y, psi_x, s, options);
        ASSERT_TRUE(many.ok()) << many.status();
        for (int c = 0; c < 2; ++c) {
          EXPECT_LT(((*many)[c] - (*one)[c]).norm() / (*one)[c].norm(),
                    spacings < 1 ? 1e-12 : 1e-9)
              << "spacings " << spacings << " f32 " << f32 << " threads " << threads;
        }
      }
    }
  }
  SeparableFitOptions bad;
  bad.num_threads = -1;
  const RowMatrixXd psi = GaussianFactor(8, 4, 0.2);
  EXPECT_EQ(FitSeparable2D(psi, psi, {RowMatrixXd::Ones(8, 8)}, bad).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ClosedForm, PredictIsTheKroneckerModel) {
  std::mt19937_64 rng(7);
  const RowMatrixXd psi_y = Random(8, 3, rng), psi_x = Random(5, 4, rng), w = Random(3, 4, rng);
  absl::StatusOr<RowMatrixXd> s = PredictSeparable2D(psi_y, psi_x, w);
  ASSERT_TRUE(s.ok()) << s.status();
  for (int64_t i = 0; i < 8; ++i) {
    for (int64_t j = 0; j < 5; ++j) {
      double want = 0;
      for (int64_t a = 0; a < 3; ++a) {
        for (int64_t b = 0; b < 4; ++b) want += psi_y(i, a) * w(a, b) * psi_x(j, b);
      }
      EXPECT_NEAR((*s)(i, j), want, 1e-12);  // 12 products of O(1) terms
    }
  }
}

TEST(ClosedForm, Volume3DRecoversWeightsAndRoundTrips) {
  std::mt19937_64 rng(9);
  std::array<RowMatrixXd, 3> psi = {GaussianFactor(11, 4, 0.15), GaussianFactor(9, 5, 0.12),
                                    GaussianFactor(13, 3, 0.2)};
  Tensor3 w_true;
  w_true.dims = {4, 5, 3};
  std::normal_distribution<double> normal;
  for (int i = 0; i < 60; ++i) w_true.data.push_back(normal(rng));
  absl::StatusOr<Tensor3> v = PredictSeparable3D(psi, w_true);
  ASSERT_TRUE(v.ok()) << v.status();
  ASSERT_EQ(v->dims, (std::array<int64_t, 3>{11, 9, 13}));
  // Spot-check the forward model element by element.
  for (int64_t i : {0, 5, 10}) {
    for (int64_t j : {0, 8}) {
      for (int64_t l : {0, 7, 12}) {
        double want = 0;
        for (int a = 0; a < 4; ++a) {
          for (int b = 0; b < 5; ++b) {
            for (int c = 0; c < 3; ++c) {
              want += w_true.data[(a * 5 + b) * 3 + c] * psi[0](i, a) * psi[1](j, b) * psi[2](l, c);
            }
          }
        }
        EXPECT_NEAR(v->data[(i * 9 + j) * 13 + l], want, 1e-12);
      }
    }
  }
  absl::StatusOr<Tensor3> w = FitSeparable3D(psi, *v, 0.0);
  ASSERT_TRUE(w.ok()) << w.status();
  double err = 0, norm = 0;
  for (size_t i = 0; i < w->data.size(); ++i) {
    err += std::pow(w->data[i] - w_true.data[i], 2);
    norm += w_true.data[i] * w_true.data[i];
  }
  EXPECT_LT(std::sqrt(err / norm), 1e-8);  // as in the 2D case: cond^2 eps with margin
}

// A factor whose Cholesky pivots do not reveal its condition: Psi = Q R with Q (300 x 70)
// orthonormal and R Kahan's upper-triangular matrix (c = 0.25, s = sqrt(1 - c^2): R_ii =
// s^i, R_ij = -c s^i for j > i). G = R^T R has pivots R_ii^2 down to s^138 = 0.012 of the
// largest, which passed the pivot test, yet cond(G) = cond(R)^2 ~ 2.6e16: the fit
// returned OK with a W worse than 0. The condition estimate refuses it, with the message
// of a singular factor; a well-conditioned factor of the same size still passes.
TEST(ClosedForm, IllConditionedFactorsWithBenignPivotsAreRefused) {
  const int n = 300, k = 70;
  std::mt19937_64 rng(7);
  std::normal_distribution<double> normal;
  Eigen::MatrixXd a(n, k);
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < k; ++j) a(i, j) = normal(rng);
  }
  const Eigen::MatrixXd q = Eigen::HouseholderQR<Eigen::MatrixXd>(a).householderQ() *
                            Eigen::MatrixXd::Identity(n, k);
  const double c = 0.25, s = std::sqrt(1 - c * c);
  Eigen::MatrixXd r = Eigen::MatrixXd::Zero(k, k);
  for (int i = 0; i < k; ++i) {
    const double si = std::pow(s, i);
    r(i, i) = si;
    for (int j = i + 1; j < k; ++j) r(i, j) = -c * si;
  }
  const RowMatrixXd psi = q * r;
  const RowMatrixXd image = RowMatrixXd::Ones(n, n);
  absl::StatusOr<RowMatrixXd> w = FitSeparable2D(psi, psi, image, 0.0);
  EXPECT_EQ(w.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(RidgePinvTransposed(psi, 0.0).status().code(), absl::StatusCode::kFailedPrecondition);
  // Q itself (cond 1) is fine, and a ridge makes the Kahan factor well posed.
  EXPECT_TRUE(FitSeparable2D(RowMatrixXd(q), RowMatrixXd(q), image, 0.0).ok());
  EXPECT_TRUE(FitSeparable2D(psi, psi, image, 1e-3).ok());
}

TEST(ClosedForm, SingularAndBadInputsAreReported) {
  // More shifts than coordinates: Psi^T Psi is singular without ridge.
  const RowMatrixXd wide = GaussianFactor(6, 10, 0.05);
  const RowMatrixXd s = RowMatrixXd::Ones(6, 6);
  absl::StatusOr<RowMatrixXd> w = FitSeparable2D(wide, wide, s, 0.0);
  EXPECT_EQ(w.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(std::string(w.status().message()).find("rank deficient"), std::string::npos);
  // A ridge makes the same problem well posed.
  EXPECT_TRUE(FitSeparable2D(wide, wide, s, 1e-2).ok());

  const RowMatrixXd psi = GaussianFactor(6, 3, 0.2);
  EXPECT_EQ(FitSeparable2D(psi, psi, RowMatrixXd::Ones(5, 6), 0.0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(FitSeparable2D(psi, psi, s, -1.0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(FitSeparable2D(psi, psi, s, NAN).status().code(), absl::StatusCode::kInvalidArgument);
  RowMatrixXd bad = s;
  bad(2, 3) = NAN;
  EXPECT_EQ(FitSeparable2D(psi, psi, bad, 0.0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(FitSeparable2D(psi, psi, std::vector<RowMatrixXd>{}, 0.0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(FitSeparable2D(psi, psi, RowMatrixXd(0, 0), 0.0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RidgePinvTransposed(RowMatrixXd::Zero(4, 3), 0.0).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(PredictSeparable2D(psi, psi, RowMatrixXd::Ones(2, 3)).status().code(),
            absl::StatusCode::kInvalidArgument);
  Tensor3 t;
  t.dims = {2, 2, 2};
  t.data.assign(7, 0.0);
  std::array<RowMatrixXd, 3> f = {psi, psi, psi};
  EXPECT_EQ(FitSeparable3D(f, t, 0.0).status().code(), absl::StatusCode::kInvalidArgument);
}

// A factor whose Gram matrix Psi^T Psi passes float64's range (entries 1e155: squares
// 1e310) is an error on the Cholesky routes (dense and banded), not a W of zeros: the
// factorisation would accept infinite pivots and the solves divide by them. The exact W
// (S / 1e155 for Psi_y = 1e155 I) is finite, and the rank-revealing route computes it
// (s / (s^2 + lambda) as 1 / (s + lambda / s)): within 1e-12 relative, a few roundings.
TEST(ClosedForm, FactorsWhoseGramOverflowsAreReportedNotZeroed) {
  std::mt19937_64 rng(21);
  const RowMatrixXd s = Random(4, 4, rng);
  const RowMatrixXd one = RowMatrixXd::Identity(4, 4);
  const RowMatrixXd diagonal = 1e155 * RowMatrixXd::Identity(4, 4);  // banded (kd = 0)
  const RowMatrixXd dense = 1e155 * (Random(4, 4, rng) + 4.0 * one);
  for (const RowMatrixXd* big : {&diagonal, &dense}) {
    absl::StatusOr<RowMatrixXd> w = FitSeparable2D(*big, one, s, 0.0);
    ASSERT_EQ(w.status().code(), absl::StatusCode::kInvalidArgument) << w.status();
    EXPECT_NE(std::string(w.status().message()).find("overflows"), std::string::npos);
    EXPECT_EQ(FitSeparable2D(one, *big, s, 1e-3).status().code(),
              absl::StatusCode::kInvalidArgument);
    Tensor3 t;
    t.dims = {4, 4, 4};
    t.data.assign(64, 1.0);
    const std::array<RowMatrixXd, 3> f = {one, *big, one};
    EXPECT_EQ(FitSeparable3D(f, t, 0.0).status().code(), absl::StatusCode::kInvalidArgument);
  }
  SeparableFitOptions o;
  o.rcond = 1e-12;
  absl::StatusOr<std::vector<RowMatrixXd>> w =
      FitSeparable2D(diagonal, one, std::vector<RowMatrixXd>{s}, o);
  ASSERT_TRUE(w.ok()) << w.status();
  for (int64_t i = 0; i < 4; ++i) {
    for (int64_t j = 0; j < 4; ++j) {
      EXPECT_NEAR((*w)[0](i, j), s(i, j) * 1e-155, 1e-12 * std::fabs(s(i, j)) * 1e-155);
    }
  }
}

// Sizes the 3-D mode products would hand BLAS past its int are OutOfRange, before any
// allocation: a prediction of 1 x 46341 x 46341 values (2^31 + 37,885) from factors of
// one column, and merged modes past 2^31 - 1.
TEST(ClosedForm, Volume3DSizesPastBlasIntAreRefused) {
  const RowMatrixXd one = RowMatrixXd::Ones(1, 1), tall = RowMatrixXd::Ones(46341, 1);
  Tensor3 w;
  w.dims = {1, 1, 1};
  w.data.assign(1, 1.0);
  absl::StatusOr<Tensor3> v = PredictSeparable3D({one, tall, tall}, w);
  EXPECT_EQ(v.status().code(), absl::StatusCode::kOutOfRange) << v.status();
  v = PredictSeparable3D({tall, tall, one}, w);
  EXPECT_EQ(v.status().code(), absl::StatusCode::kOutOfRange) << v.status();
  // At the edge of what fits: 1 x 2 x 3 from the same shapes is fine.
  v = PredictSeparable3D({one, RowMatrixXd::Ones(2, 1), RowMatrixXd::Ones(3, 1)}, w);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->data, std::vector<double>(6, 1.0));
}

// Independent oracle for the rank-revealing route: the minimum-norm least-squares
// solution of the materialised Kronecker system, by Eigen's complete orthogonal
// decomposition (a different factorisation from the BDCSVD the solver uses).
Eigen::VectorXd MinNormKronecker(const RowMatrixXd& psi_y, const RowMatrixXd& psi_x,
                                 const RowMatrixXd& s) {
  const int64_t ny = psi_y.rows(), nx = psi_x.rows(), ky = psi_y.cols(), kx = psi_x.cols();
  Eigen::MatrixXd kron(ny * nx, ky * kx);
  Eigen::VectorXd rhs(ny * nx);
  for (int64_t i = 0; i < ny; ++i) {
    for (int64_t j = 0; j < nx; ++j) {
      rhs[i * nx + j] = s(i, j);
      for (int64_t a = 0; a < ky; ++a) {
        for (int64_t b = 0; b < kx; ++b) kron(i * nx + j, a * kx + b) = psi_y(i, a) * psi_x(j, b);
      }
    }
  }
  return kron.completeOrthogonalDecomposition().solve(rhs);
}

TEST(ClosedForm, RcondRouteGivesTheMinimumNormSolutionOfRankDeficientFactors) {
  std::mt19937_64 rng(11);
  // Rank deficient in two ways: more shifts than coordinates (psi_y: 6 x 10, rank 6) and
  // an exactly repeated column (psi_x: column 4 = column 1, rank 4 of 5).
  const RowMatrixXd psi_y = GaussianFactor(6, 10, 0.08);
  RowMatrixXd psi_x = GaussianFactor(9, 5, 0.12);
  psi_x.col(4) = psi_x.col(1);
  const RowMatrixXd s = Random(6, 9, rng);
  SeparableFitOptions cholesky;
  EXPECT_EQ(FitSeparable2D(psi_y, psi_x, {s}, cholesky).status().code(),
            absl::StatusCode::kFailedPrecondition);
  SeparableFitOptions svd;
  svd.rcond = 1e-10;
  absl::StatusOr<std::vector<RowMatrixXd>> w = FitSeparable2D(psi_y, psi_x, {s}, svd);
  ASSERT_TRUE(w.ok()) << w.status();
  const Eigen::VectorXd oracle = MinNormKronecker(psi_y, psi_x, s);
  double worst = 0;
  for (int64_t a = 0; a < 10; ++a) {
    for (int64_t b = 0; b < 5; ++b) worst = std::max(worst, std::abs((*w)[0](a, b) - oracle[a * 5 + b]));
  }
  // Kept singular values are >= ~1e-3 s_max here (the dropped ones are exact zeros, at
  // rounding level ~1e-16 s_max, far below rcond): both routes agree to ~cond eps, 1e-9
  // with margin; a solver that kept a rounding-level direction would be off by ~1e12.
  EXPECT_LT(worst, 1e-9 * oracle.cwiseAbs().maxCoeff());
  EXPECT_EQ(*ConditionNumber(psi_y), std::numeric_limits<double>::infinity());  // K > n
  EXPECT_GT(*ConditionNumber(psi_x), 1e12);  // a repeated column: s_min at rounding level
  EXPECT_EQ(FitSeparable2D(psi_y, psi_x, {s}, SeparableFitOptions{0.0, false, 1.0}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(FitSeparable2D(psi_y, psi_x, {s}, SeparableFitOptions{0.0, false, NAN}).status().code(),
            absl::StatusCode::kInvalidArgument);
  // The 3D route takes the same rcond.
  Tensor3 v;
  v.dims = {6, 9, 9};
  v.data.assign(6 * 9 * 9, 0.5);
  EXPECT_EQ(FitSeparable3D({psi_y, psi_x, psi_x}, v, 0.0).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(FitSeparable3D({psi_y, psi_x, psi_x}, v, 0.0, 1e-10).ok());
}

// Fourier features at linearly spaced frequencies up to the training grid's Nyquist rate
// (Zheng et al.'s LinF, eq. 50, as `gpe inr zheng-table1` sets it up): numerically
// full rank but ill-conditioned. The exact (lambda = rcond = 0) minimiser interpolates
// the samples through weights that explode between them; the report is the condition
// number, and rcond bounds the weights: |W|_F <= |S|_F / (rcond s_max)^2.
TEST(ClosedForm, IllConditionedFourierFactorIsReportedAndRcondBoundsTheWeights) {
  const int64_t n = 64, f = 32;  // n coordinates, 2f = n features: square factor
  RowMatrixXd psi(n, 2 * f);
  for (int64_t j = 0; j < n; ++j) {
    const double x = -1.0 + (2.0 * j + 1.0) / n;  // spacing 2 / n: Nyquist n / 4 cycles
    for (int64_t i = 0; i < f; ++i) {
      const double b = ((f - i) + i * (n / 4.0)) / f;  // eq. 50 with 2^sigma = n / 4
      psi(j, i) = std::cos(2 * M_PI * b * x);
      psi(j, f + i) = std::sin(2 * M_PI * b * x);
    }
  }
  const double cond = *ConditionNumber(psi);
  const Eigen::VectorXd sv = Eigen::BDCSVD<Eigen::MatrixXd>(Eigen::MatrixXd(psi)).singularValues();
  // Independent: Eigen's JacobiSVD (one-sided Jacobi, not divide and conquer); the two
  // agree to ~cond eps relative, 1e-6 with margin.
  const Eigen::VectorXd jsv = Eigen::JacobiSVD<Eigen::MatrixXd>(Eigen::MatrixXd(psi)).singularValues();
  EXPECT_NEAR(cond, jsv[0] / jsv[jsv.size() - 1], 1e-6 * cond);
  EXPECT_GT(cond, 1e2);  // ill-conditioned compared with a Gaussian basis (~1e2 at K = n)
  std::mt19937_64 rng(5);
  const RowMatrixXd s = RowMatrixXd::Ones(n, n) + 0.01 * Random(n, n, rng);
  const double rcond = 1e-1;
  SeparableFitOptions o;
  o.rcond = rcond;
  absl::StatusOr<std::vector<RowMatrixXd>> w = FitSeparable2D(psi, psi, {s}, o);
  ASSERT_TRUE(w.ok()) << w.status();
  const double bound = s.norm() / std::pow(rcond * sv[0], 2);
  EXPECT_LE((*w)[0].norm(), bound * (1 + 1e-12));
  // And the bound is the point: the exact minimiser's weights exceed it (it keeps the
  // directions below rcond, amplified by up to cond^2).
  absl::StatusOr<RowMatrixXd> exact = FitSeparable2D(psi, psi, s, 0.0);
  if (exact.ok()) {
    EXPECT_GT(exact->norm(), (*w)[0].norm());
  }
}

TEST(Metrics, MseAndPsnr) {
  RowMatrixXd a = RowMatrixXd::Zero(2, 2), b = RowMatrixXd::Zero(2, 2);
  b(0, 0) = 0.2;  // MSE = 0.04 / 4 = 0.01 -> PSNR = 20 dB at peak 1
  EXPECT_DOUBLE_EQ(*MeanSquaredError(a, b), 0.01);
  EXPECT_NEAR(*Psnr(a, b), 20.0, 1e-12);
  EXPECT_NEAR(*Psnr(a, b, 255.0), 20.0 + 20.0 * std::log10(255.0), 1e-12);
  EXPECT_TRUE(std::isinf(*Psnr(a, a)));
  EXPECT_FALSE(Psnr(a, RowMatrixXd::Zero(2, 3)).ok());
  EXPECT_FALSE(Psnr(a, b, 0.0).ok());
  // Far from 1: peak^2 overflowed (1e200: inf dB) or underflowed (1e-200: -inf), and
  // differences of 1e-170 squared to 0 (+inf dB for a != b). In logarithms, these are
  // 20 log10(peak) + 20 (the MSE 0.01 scaled by 1e-340: 20 + 3400 dB); 1e-9 of a few
  // thousand dB is the rounding of the logarithms.
  EXPECT_NEAR(*Psnr(a, b, 1e200), 20.0 + 4000.0, 1e-9);
  EXPECT_NEAR(*Psnr(a, b, 1e-200), 20.0 - 4000.0, 1e-9);
  RowMatrixXd tiny = b * 1e-170;
  EXPECT_NEAR(*Psnr(a, tiny), 20.0 + 3400.0, 1e-9);
  // An MSE of 1e-322 is subnormal (20 units of the last place): in logarithms the PSNR
  // keeps every bit (it was 0.2 dB off).
  EXPECT_NEAR(*Psnr(a, RowMatrixXd(b * 1e-160)), 20.0 + 3200.0, 1e-9);
  RowMatrixXd huge = b * 1e150;  // differences of 2e149: squares 4e298 stay in range
  EXPECT_NEAR(*MeanSquaredError(a, huge) / 1e298, 1.0, 1e-15);
}

// Predictions through either order of the mode products (the one with less scratch:
// modes 0, 1, 2 for one slice n0 = 1 from K0 = 6; 2, 1, 0 for n = 9 x 2 x 2) equal the
// triple sum (a few roundings on O(1) values: 1e-12).
TEST(ClosedForm3D, PredictionsEqualTheTripleSumInEitherModeOrder) {
  std::mt19937_64 rng(3);
  std::normal_distribution<double> normal;
  for (const auto& [k, n] : {std::pair{std::array<int64_t, 3>{6, 3, 4}, std::array<int64_t, 3>{1, 5, 7}},
                             std::pair{std::array<int64_t, 3>{2, 3, 4}, std::array<int64_t, 3>{9, 2, 2}}}) {
    Tensor3 w;
    w.dims = k;
    w.data.resize(static_cast<size_t>(k[0] * k[1] * k[2]));
    for (double& x : w.data) x = normal(rng);
    std::array<RowMatrixXd, 3> psi;
    for (int d = 0; d < 3; ++d) {
      psi[d] = RowMatrixXd(n[d], k[d]);
      for (int64_t i = 0; i < psi[d].size(); ++i) psi[d].data()[i] = normal(rng);
    }
    absl::StatusOr<Tensor3> v = PredictSeparable3D(psi, w);
    ASSERT_TRUE(v.ok()) << v.status();
    ASSERT_EQ(v->dims, n);
    for (int64_t i = 0; i < n[0]; ++i) {
      for (int64_t j = 0; j < n[1]; ++j) {
        for (int64_t l = 0; l < n[2]; ++l) {
          double want = 0;
          for (int64_t a = 0; a < k[0]; ++a) {
            for (int64_t b = 0; b < k[1]; ++b) {
              for (int64_t c = 0; c < k[2]; ++c) {
                want += w.data[(a * k[1] + b) * k[2] + c] * psi[0](i, a) * psi[1](j, b) * psi[2](l, c);
              }
            }
          }
          EXPECT_NEAR(v->data[(i * n[1] + j) * n[2] + l], want, 1e-12);
        }
      }
    }
  }
}

// The 3-D fit of finite inputs whose products overflow is refused, as the 2-D fit's:
// a W with NaN or inf was returned with OK.
TEST(ClosedForm3D, OverflowingWeightsAreRefused) {
  std::array<RowMatrixXd, 3> psi;
  for (int d = 0; d < 3; ++d) psi[d] = 0.01 * GaussianFactor(8, 6, 0.2);
  Tensor3 v;
  v.dims = {8, 8, 8};
  v.data.assign(512, 1e306);
  for (double rcond : {0.0, 1e-6}) {
    absl::StatusOr<Tensor3> w = FitSeparable3D(psi, v, 0.0, rcond);
    EXPECT_EQ(w.status().code(), absl::StatusCode::kInvalidArgument) << rcond;
  }
}

}  // namespace
}  // namespace inr
}  // namespace gpe
