#include "inr/blended.h"

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include <Eigen/Dense>
#include "encodings/coordinate/shifted_basis.h"
#include "gtest/gtest.h"

namespace gpe {
namespace inr {
namespace {

using encodings::ShiftedBasis1D;
using encodings::ShiftedBasisKind;

AxisEncoder Encoder(const ShiftedBasis1D& b) {
  return [b](absl::Span<const double> x) { return b.Encode(x); };
}

std::vector<double> Linspace(double lo, double hi, int n) {
  std::vector<double> v(n);
  for (int i = 0; i < n; ++i) v[i] = lo + (hi - lo) * i / (n - 1);
  return v;
}

TEST(BlendAxis, GridPointsGetUnitWeightsAndWeightsSolveEq44) {
  const ShiftedBasis1D basis = *ShiftedBasis1D::Create(ShiftedBasisKind::kGaussian, 16, 0.08);
  const std::vector<double> grid = Linspace(0.0, 1.0, 9);
  const std::vector<double> coords = {0.0, 0.125, 0.3, 0.61, 1.0};
  absl::StatusOr<AxisBlend> b = BlendAxis(Encoder(basis), grid, coords);
  ASSERT_TRUE(b.ok()) << b.status();
  // On a grid point the least-squares weights are exactly (1, 0) or (0, 1): the
  // 2 x 2 solve reproduces them to rounding (cond of the Gram ~10 here).
  EXPECT_NEAR(b->w0[0], 1.0, 1e-12);
  EXPECT_NEAR(b->w1[0], 0.0, 1e-12);
  EXPECT_NEAR(b->w0[1] + b->w1[1], 1.0, 1e-12);
  EXPECT_EQ(b->cell[4], 7);
  EXPECT_NEAR(b->w1[4], 1.0, 1e-12);
  // Off-grid: the residual Psi(x) - w0 Psi(g_i) - w1 Psi(g_{i+1}) is orthogonal to both
  // corners (normal equations of eq. 43).
  const RowMatrixXd e = *basis.Encode(coords);
  const RowMatrixXd g = *basis.Encode(grid);
  for (int q : {2, 3}) {
    const int64_t i = b->cell[q];
    const Eigen::RowVectorXd res = e.row(q) - b->w0[q] * g.row(i) - b->w1[q] * g.row(i + 1);
    EXPECT_NEAR(res.dot(g.row(i)), 0.0, 1e-12);
    EXPECT_NEAR(res.dot(g.row(i + 1)), 0.0, 1e-12);
  }
  EXPECT_FALSE(BlendAxis(Encoder(basis), grid, {1.5}).ok());
  EXPECT_FALSE(BlendAxis(Encoder(basis), {0.0, 0.0, 1.0}, {0.5}).ok());
  EXPECT_FALSE(BlendAxis(Encoder(basis), {0.0}, {0.0}).ok());
}

// CGLS converges to the ridge least-squares solution of the explicit system
// A = B (Psi_y (x) Psi_x), formed densely here on a small problem.
TEST(FitBlended2D, MatchesDenseRidgeLeastSquares) {
  std::mt19937_64 rng(21);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  const ShiftedBasis1D bx = *ShiftedBasis1D::Create(ShiftedBasisKind::kGaussian, 7, 0.12);
  const ShiftedBasis1D by = *ShiftedBasis1D::Create(ShiftedBasisKind::kTriangle, 6, 0.8);
  const std::vector<double> gx = Linspace(0.0, 1.0, 11), gy = Linspace(0.0, 1.0, 9);
  const int p = 300;
  std::vector<double> px(p), py(p), s(p);
  for (int q = 0; q < p; ++q) {
    px[q] = u(rng);
    py[q] = u(rng);
    s[q] = std::sin(6 * px[q]) * std::cos(4 * py[q]);
  }
  BlendedFitOptions options;
  options.lambda = 1e-3;
  options.tolerance = 1e-12;
  options.max_iterations = 2000;
  absl::StatusOr<BlendedFit> fit = FitBlended2D(Encoder(bx), Encoder(by), gx, gy, px, py, s, options);
  ASSERT_TRUE(fit.ok()) << fit.status();

  const AxisBlend ax = *BlendAxis(Encoder(bx), gx, px), ay = *BlendAxis(Encoder(by), gy, py);
  const RowMatrixXd fx = *bx.Encode(gx), fy = *by.Encode(gy);
  const int kx = 7, ky = 6;
  Eigen::MatrixXd a = Eigen::MatrixXd::Zero(p, kx * ky);
  for (int q = 0; q < p; ++q) {
    for (int b = 0; b < 2; ++b) {
      for (int c = 0; c < 2; ++c) {
        const double wt = (b ? ay.w1[q] : ay.w0[q]) * (c ? ax.w1[q] : ax.w0[q]);
        const int64_t j = ay.cell[q] + b, i = ax.cell[q] + c;
        for (int r = 0; r < ky; ++r) {
          for (int t = 0; t < kx; ++t) a(q, r * kx + t) += wt * fy(j, r) * fx(i, t);
        }
      }
    }
  }
  // The ridge acts on the virtual-grid values: lambda |Psi_y W Psi_x^T|^2, i.e.
  // lambda vec(W)^T (G_y (x) G_x) vec(W) with G = Psi^T Psi.
  const Eigen::MatrixXd gx_gram = fx.transpose() * fx, gy_gram = fy.transpose() * fy;
  Eigen::MatrixXd normal = a.transpose() * a;
  for (int r = 0; r < ky; ++r) {
    for (int t = 0; t < kx; ++t) {
      for (int r2 = 0; r2 < ky; ++r2) {
        for (int t2 = 0; t2 < kx; ++t2) {
          normal(r * kx + t, r2 * kx + t2) += options.lambda * gy_gram(r, r2) * gx_gram(t, t2);
        }
      }
    }
  }
  const Eigen::VectorXd oracle =
      normal.ldlt().solve(a.transpose() * Eigen::Map<const Eigen::VectorXd>(s.data(), p));
  double err = 0;
  for (int r = 0; r < ky; ++r) {
    for (int t = 0; t < kx; ++t) err = std::max(err, std::abs(fit->weights(r, t) - oracle[r * kx + t]));
  }
  // CGLS stopped at a 1e-12 relative gradient of the preconditioned system; mapping back
  // through L^-T (cond ~1e3 here) and the oracle's own LDLT leave ~1e-9 relative: 1e-6
  // has margin and still fails on any ordering or regulariser mismatch.
  EXPECT_LT(err, 1e-6 * oracle.cwiseAbs().maxCoeff()) << "iterations " << fit->iterations;
  // Predictions through the public function equal A w.
  const std::vector<double> pred =
      *PredictBlended2D(Encoder(bx), Encoder(by), gx, gy, px, py, fit->weights);
  Eigen::VectorXd w(kx * ky);
  for (int r = 0; r < ky; ++r) {
    for (int t = 0; t < kx; ++t) w[r * kx + t] = fit->weights(r, t);
  }
  const Eigen::VectorXd want = a * w;
  for (int q = 0; q < p; q += 37) EXPECT_NEAR(pred[q], want[q], 1e-12);
}

// The fit is linear in the values: values scaled by 2^k (k = 500, -500: |A^T s|^2 of
// 2^1000 overflowed, and the fit returned OK with W = 0 after no iteration) give the
// weights and residual scaled by 2^k, bit for bit (the fit scales by a power of two
// internally, exactly, and runs the same iterations).
TEST(FitBlended2D, ScaledValuesGiveScaledWeights) {
  std::mt19937_64 rng(22);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  const ShiftedBasis1D b = *ShiftedBasis1D::Create(ShiftedBasisKind::kGaussian, 8, 0.15);
  const std::vector<double> g = Linspace(0.0, 1.0, 12);
  const int p = 200;
  std::vector<double> px(p), py(p), s(p);
  for (int q = 0; q < p; ++q) {
    px[q] = u(rng);
    py[q] = u(rng);
    s[q] = std::sin(5 * px[q]) + py[q];
  }
  BlendedFitOptions options;
  options.lambda = 1e-4;
  const BlendedFit ref = *FitBlended2D(Encoder(b), Encoder(b), g, g, px, py, s, options);
  ASSERT_GT(ref.iterations, 0);
  for (int k : {500, -500, 1000}) {
    std::vector<double> sk(p);
    for (int q = 0; q < p; ++q) sk[q] = std::ldexp(s[q], k);
    absl::StatusOr<BlendedFit> fit = FitBlended2D(Encoder(b), Encoder(b), g, g, px, py, sk, options);
    ASSERT_TRUE(fit.ok()) << k << ": " << fit.status();
    EXPECT_EQ(fit->iterations, ref.iterations) << k;
    EXPECT_EQ(fit->rms_residual, std::ldexp(ref.rms_residual, k)) << k;
    for (int64_t i = 0; i < ref.weights.size(); ++i) {
      ASSERT_EQ(fit->weights.data()[i], std::ldexp(ref.weights.data()[i], k)) << k << " " << i;
    }
  }
}

TEST(FitBlended2D, RejectsBadInput) {
  const ShiftedBasis1D b = *ShiftedBasis1D::Create(ShiftedBasisKind::kGaussian, 5, 0.2);
  const std::vector<double> g = Linspace(0, 1, 5);
  BlendedFitOptions o;
  EXPECT_FALSE(FitBlended2D(Encoder(b), Encoder(b), g, g, {0.5}, {0.5, 0.1}, {1.0}, o).ok());
  EXPECT_FALSE(FitBlended2D(Encoder(b), Encoder(b), g, g, {0.5}, {0.5}, {NAN}, o).ok());
  EXPECT_FALSE(FitBlended2D(Encoder(b), Encoder(b), g, g, {}, {}, {}, o).ok());
  EXPECT_FALSE(FitBlended2D(Encoder(b), Encoder(b), g, g, {2.0}, {0.5}, {1.0}, o).ok());
  // The tolerance: finite and >= 0 (0 runs max_iterations; an infinite one would stop
  // before the first step and return W = 0).
  for (double tol : {-1e-6, double(INFINITY), double(NAN)}) {
    BlendedFitOptions t;
    t.tolerance = tol;
    EXPECT_EQ(FitBlended2D(Encoder(b), Encoder(b), g, g, {0.5}, {0.5}, {1.0}, t).status().code(),
              absl::StatusCode::kInvalidArgument)
        << tol;
  }
  BlendedFitOptions zero;
  zero.tolerance = 0.0;
  zero.max_iterations = 3;
  EXPECT_TRUE(FitBlended2D(Encoder(b), Encoder(b), g, g, {0.5}, {0.5}, {1.0}, zero).ok());
  o.lambda = -1;
  EXPECT_FALSE(FitBlended2D(Encoder(b), Encoder(b), g, g, {0.5}, {0.5}, {1.0}, o).ok());
  EXPECT_FALSE(FitBlended2D(AxisEncoder(), Encoder(b), g, g, {0.5}, {0.5}, {1.0}, BlendedFitOptions()).ok());
}

// Non-finite weights, and finite values whose fit leaves double's range, give a clear
// InvalidArgument: before, the blended operator dereferenced PredictSeparable2D's refusal
// and the process aborted ("Attempting to fetch value instead of handling error").
TEST(PredictBlended2D, NonFiniteWeightsAreRefusedNotACrash) {
  const ShiftedBasis1D b = *ShiftedBasis1D::Create(ShiftedBasisKind::kGaussian, 5, 0.2);
  const std::vector<double> g = Linspace(0, 1, 5);
  for (double bad : {NAN, INFINITY}) {
    RowMatrixXd w = RowMatrixXd::Ones(5, 5);
    w(2, 3) = bad;
    absl::StatusOr<std::vector<double>> f =
        PredictBlended2D(Encoder(b), Encoder(b), g, g, {0.5, 0.25}, {0.5, 0.75}, w);
    ASSERT_FALSE(f.ok());
    EXPECT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(f.status().message().find("non-finite"), std::string::npos) << f.status().message();
  }
  BlendedFitOptions o;
  absl::StatusOr<BlendedFit> fit =
      FitBlended2D(Encoder(b), Encoder(b), g, g, {0.5, 0.1}, {0.5, 0.9}, {1e308, -1e308}, o);
  if (!fit.ok()) {
    EXPECT_EQ(fit.status().code(), absl::StatusCode::kInvalidArgument) << fit.status().message();
  }
}

}  // namespace
}  // namespace inr
}  // namespace gpe
