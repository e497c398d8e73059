#include "inr/linear_gd.h"

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include <Eigen/Dense>
#include "encodings/coordinate/shifted_basis.h"
#include "gtest/gtest.h"
#include "inr/closed_form.h"

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

RowMatrixXd GaussianFactor(int64_t n, int64_t k, double sigma) {
  std::vector<double> x(n);
  for (int64_t i = 0; i < n; ++i) x[i] = (i + 0.5) / static_cast<double>(n);
  return *ShiftedBasis1D::Create(ShiftedBasisKind::kGaussian, k, sigma)->Encode(x);
}

// Central differences of `loss` at w against the analytic gradient, every entry. The
// losses are quadratic in W, so the central difference has no truncation error; what is
// left is rounding, ~1e-16 |L| / h = 1e-10 for |L| ~ 1 and h = 1e-6: 1e-7 has margin.
template <typename LossFn>
void ExpectGradientMatchesFiniteDifferences(const RowMatrixXd& w, const RowMatrixXd& grad,
                                            const LossFn& loss) {
  const double h = 1e-6;
  ASSERT_EQ(grad.rows(), w.rows());
  ASSERT_EQ(grad.cols(), w.cols());
  for (int64_t i = 0; i < w.rows(); ++i) {
    for (int64_t j = 0; j < w.cols(); ++j) {
      RowMatrixXd plus = w, minus = w;
      plus(i, j) += h;
      minus(i, j) -= h;
      const double fd = (loss(plus) - loss(minus)) / (2 * h);
      EXPECT_NEAR(grad(i, j), fd, 1e-7) << "entry (" << i << ", " << j << ")";
    }
  }
}

TEST(LinearGdTest, SeparableGradientMatchesCentralDifferences) {
  std::mt19937_64 rng(11);
  for (int trial = 0; trial < 3; ++trial) {
    const RowMatrixXd psi_y = Random(7, 4, rng), psi_x = Random(5, 3, rng);
    const RowMatrixXd s = Random(7, 5, rng), w = Random(4, 3, rng);
    RowMatrixXd grad;
    ASSERT_TRUE(SeparableLinearLoss(psi_y, psi_x, s, w, &grad).ok());
    ExpectGradientMatchesFiniteDifferences(w, grad, [&](const RowMatrixXd& v) {
      return *SeparableLinearLoss(psi_y, psi_x, s, v);
    });
  }
}

TEST(LinearGdTest, SeparableLossEqualsTheKroneckerModel) {
  // Independent reference: the materialised Kronecker model vec(S_hat) = (Psi_y (x) Psi_x)
  // vec(W) with row-major vec. Agreement to 1e-12 (sums of ~10 O(1) products).
  std::mt19937_64 rng(12);
  const RowMatrixXd psi_y = Random(6, 3, rng), psi_x = Random(4, 2, rng);
  const RowMatrixXd s = Random(6, 4, rng), w = Random(3, 2, rng);
  double reference = 0;
  for (int64_t i = 0; i < 6; ++i) {
    for (int64_t j = 0; j < 4; ++j) {
      double pred = 0;
      for (int64_t a = 0; a < 3; ++a) {
        for (int64_t b = 0; b < 2; ++b) pred += psi_y(i, a) * psi_x(j, b) * w(a, b);
      }
      reference += (pred - s(i, j)) * (pred - s(i, j)) / 24.0;
    }
  }
  EXPECT_NEAR(*SeparableLinearLoss(psi_y, psi_x, s, w), reference, 1e-12);
}

TEST(LinearGdTest, DenseGradientMatchesCentralDifferences) {
  std::mt19937_64 rng(13);
  const RowMatrixXd phi = Random(9, 4, rng), y = Random(9, 2, rng), w = Random(4, 2, rng);
  RowMatrixXd grad;
  ASSERT_TRUE(DenseLinearLoss(phi, y, w, &grad).ok());
  ExpectGradientMatchesFiniteDifferences(
      w, grad, [&](const RowMatrixXd& v) { return *DenseLinearLoss(phi, y, v); });
}

TEST(LinearGdTest, SeparableAdamConvergesToTheClosedForm) {
  // A full-rank Gaussian encoding (K = 6 shifts, sigma = 0.1, on 16 grid points per
  // axis) of a random image: the least-squares W is unique and FitSeparable2D computes it
  // at lambda = 0. Adam from 0 with the rate decayed 0.05 -> 1e-4 over 3000 steps.
  std::mt19937_64 rng(14);
  const RowMatrixXd psi_y = GaussianFactor(16, 6, 0.1), psi_x = GaussianFactor(16, 5, 0.12);
  const RowMatrixXd s = Random(16, 16, rng);
  const RowMatrixXd closed = *FitSeparable2D(psi_y, psi_x, s, 0.0);
  LinearAdamOptions options;
  options.steps = 3000;
  options.learning_rate = 0.05;
  options.final_learning_rate = 1e-4;
  absl::StatusOr<LinearAdamFit> fit = FitSeparableAdam2D(psi_y, psi_x, s, options);
  ASSERT_TRUE(fit.ok()) << fit.status();
  ASSERT_EQ(fit->loss.size(), 3000u);
  const double optimum = *SeparableLinearLoss(psi_y, psi_x, s, closed);
  // The loss is within 1e-6 (relative) of the least-squares optimum, and W within 1e-3
  // of the minimiser relative to |W| (the Gram matrices here have condition numbers
  // ~1e2, so a 1e-6 loss excess bounds the weight error near 1e-3 |W|).
  EXPECT_LE(fit->final_loss, optimum * (1 + 1e-6));
  EXPECT_GE(fit->final_loss, optimum * (1 - 1e-12));  // nothing beats the minimiser
  EXPECT_LE((fit->weights - closed).norm(), 1e-3 * closed.norm());
  EXPECT_LT(fit->final_loss, fit->loss.front());
}

TEST(LinearGdTest, DenseAdamConvergesToLeastSquares) {
  // Reference: Eigen's column-pivoting QR least-squares solution of Phi W = Y.
  std::mt19937_64 rng(15);
  const RowMatrixXd phi = Random(40, 5, rng), y = Random(40, 2, rng);
  const Eigen::MatrixXd reference = Eigen::MatrixXd(phi).colPivHouseholderQr().solve(
      Eigen::MatrixXd(y));
  LinearAdamOptions options;
  options.steps = 3000;
  options.learning_rate = 0.05;
  options.final_learning_rate = 1e-4;
  absl::StatusOr<LinearAdamFit> fit = FitDenseAdam(phi, y, options);
  ASSERT_TRUE(fit.ok()) << fit.status();
  // Random Gaussian Phi (40 x 5) is well conditioned (cond ~ 2): 1e-4 relative.
  EXPECT_LE((Eigen::MatrixXd(fit->weights) - reference).norm(), 1e-4 * reference.norm());
}

TEST(LinearGdTest, ProgressIsReportedEveryStepsApart) {
  std::mt19937_64 rng(16);
  const RowMatrixXd phi = Random(10, 3, rng), y = Random(10, 1, rng);
  LinearAdamOptions options;
  options.steps = 10;
  options.report_every = 4;
  std::vector<int64_t> steps;
  options.progress = [&](int64_t step, double) { steps.push_back(step); };
  ASSERT_TRUE(FitDenseAdam(phi, y, options).ok());
  EXPECT_EQ(steps, (std::vector<int64_t>{4, 8}));
}

TEST(LinearGdTest, BadInputIsRefused) {
  std::mt19937_64 rng(17);
  const RowMatrixXd psi_y = Random(6, 3, rng), psi_x = Random(5, 2, rng);
  const RowMatrixXd s = Random(6, 5, rng);
  LinearAdamOptions options;
  options.steps = 5;
  EXPECT_FALSE(FitSeparableAdam2D(psi_y, psi_x, Random(5, 6, rng), options).ok());
  EXPECT_FALSE(FitSeparableAdam2D(psi_y, RowMatrixXd(0, 2), s, options).ok());
  RowMatrixXd bad = s;
  bad(2, 3) = std::numeric_limits<double>::quiet_NaN();
  EXPECT_FALSE(FitSeparableAdam2D(psi_y, psi_x, bad, options).ok());
  EXPECT_FALSE(SeparableLinearLoss(psi_y, psi_x, s, Random(2, 3, rng)).ok());
  EXPECT_FALSE(DenseLinearLoss(psi_y, Random(5, 1, rng), Random(3, 1, rng)).ok());
  LinearAdamOptions zero_steps = options;
  zero_steps.steps = 0;
  EXPECT_FALSE(FitSeparableAdam2D(psi_y, psi_x, s, zero_steps).ok());
  LinearAdamOptions bad_rate = options;
  bad_rate.final_learning_rate = std::numeric_limits<double>::infinity();
  EXPECT_FALSE(FitDenseAdam(psi_y, Random(6, 1, rng), bad_rate).ok());
  bad_rate.final_learning_rate = -1;
  EXPECT_FALSE(FitDenseAdam(psi_y, Random(6, 1, rng), bad_rate).ok());
  // Divergence is reported, not returned: a huge rate on a badly scaled problem.
  LinearAdamOptions huge = options;
  huge.learning_rate = huge.final_learning_rate = 1e300;
  huge.steps = 50;
  EXPECT_FALSE(FitDenseAdam(1e200 * psi_y, Random(6, 1, rng), huge).ok());
  // ... also when only the last update diverges: one step of 1e300 on features of 1
  // gives weights near 1e300 and a final loss of inf (the loss before it was finite).
  huge.steps = 1;
  absl::StatusOr<LinearAdamFit> last =
      FitDenseAdam(RowMatrixXd::Ones(6, 3), RowMatrixXd::Ones(6, 1), huge);
  EXPECT_EQ(last.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(std::string(last.status().message()).find("after the last step"), std::string::npos)
      << last.status();
}

}  // namespace
}  // namespace inr
}  // namespace gpe
