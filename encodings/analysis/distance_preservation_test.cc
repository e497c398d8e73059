#include "encodings/analysis/distance_preservation.h"

#include <cmath>
#include <limits>
#include <vector>

#include "encodings/coordinate/fourier_features.h"
#include "encodings/coordinate/shifted_basis.h"
#include "gtest/gtest.h"

namespace gpe {
namespace encodings {
namespace {

constexpr double kPi = 3.14159265358979323846;

// D(x1, x2) from the sampled embedder (eq. 6) with the shifts covering [lo, hi].
double SampledDistance(const ShiftedBasis1D& b, double x1, double x2) {
  auto psi = b.Encode(std::vector<double>{x1, x2});
  EXPECT_TRUE(psi.ok());
  auto d = EmbeddedDistance(psi->row(0).transpose(), psi->row(1).transpose(), b.spacing());
  EXPECT_TRUE(d.ok());
  return *d;
}

TEST(DistancePreservationTest, GaussianMatchesEq24) {
  // Shifts cover [-1, 2] with spacing 3/2048 = sigma / 34: a Riemann sum of a smooth
  // Gaussian with that spacing errs by ~exp(-2 pi^2 (sigma / s)^2), nothing at double
  // precision, and the tails outside [-1, 2] are exp(-1 / (2 sigma^2)) ~ 0. What remains
  // is rounding in 2048 products: 1e-13 relative.
  auto b = ShiftedBasis1D::Create(ShiftedBasisKind::kGaussian, 2048, 0.05, -1.0, 2.0);
  ASSERT_TRUE(b.ok());
  for (double delta : {0.0, 0.01, 0.05, 0.1, 0.2, 0.3}) {
    const double want = *GaussianEmbedderDistance(0.05, delta);
    EXPECT_NEAR(SampledDistance(*b, 0.4, 0.4 + delta), want, 1e-13 * std::max(want, 1e-3))
        << delta;
  }
  // sqrt(pi) sigma exp(-delta^2 / (4 sigma^2)): a Gaussian in delta with std sqrt(2) sigma.
  EXPECT_NEAR(*GaussianEmbedderDistance(0.05, 0.1), std::sqrt(kPi) * 0.05 * std::exp(-1.0),
              1e-16);
}

TEST(DistancePreservationTest, TriangleMatchesAutocorrelationNotEq39) {
  // Spacing 3/3000 = w / 100: a Riemann sum of the piecewise-cubic autocorrelation errs
  // by O(s^2 / w^2) relative (the kinks), 1e-4; tolerance 1e-3 of D(0) = w / 3.
  const double w = 0.1;
  auto b = ShiftedBasis1D::Create(ShiftedBasisKind::kTriangle, 3000, w, -1.0, 2.0);
  ASSERT_TRUE(b.ok());
  const double d0 = *TriangleEmbedderDistance(w, 0.0);
  EXPECT_NEAR(d0, w / 3, 1e-16);
  for (double delta : {0.0, 0.01, 0.03, 0.05, 0.08, 0.12}) {
    EXPECT_NEAR(SampledDistance(*b, 0.4, 0.4 + delta), *TriangleEmbedderDistance(w, delta),
                1e-3 * d0)
        << delta;
  }
  // Zheng et al.'s eq. 39 would give w^2 / 4 = 0.0025 at delta = 0; the integral is w / 3.
  EXPECT_GT(std::abs(SampledDistance(*b, 0.4, 0.4) - 0.25 * w * w), 0.03);
}

TEST(DistancePreservationTest, RectangleMatchesEq34) {
  // The rectangle's jumps make the Riemann sum exact only to about one spacing per
  // edge: |error| <= 2 s = 2e-3 with s = 3/3000.
  auto b = ShiftedBasis1D::Create(ShiftedBasisKind::kRectangle, 3000, 0.2, -1.0, 2.0);
  ASSERT_TRUE(b.ok());
  for (double delta : {0.0, 0.05, 0.13, 0.19, 0.25}) {
    EXPECT_NEAR(SampledDistance(*b, 0.4, 0.4 + delta), *RectangleEmbedderDistance(0.2, delta),
                2e-3)
        << delta;
  }
}

TEST(DistancePreservationTest, SquareWaveIsLinearInDistance) {
  // Section 4: the square embedder preserves distance perfectly: over one period P,
  // int sgn sin(w (t - x1)) sgn sin(w (t - x2)) dt = P (1 - 4 |delta| / P) for
  // |delta| <= P / 2. One period sampled with K = 4000: the sign flips are located to a
  // spacing, |error| <= 2 s = 5e-4 * P... here P = 1 and s = 1/4000.
  auto b = ShiftedBasis1D::Create(ShiftedBasisKind::kSquare, 4000, 1.0, 0.0, 1.0);
  ASSERT_TRUE(b.ok());
  for (double delta : {0.0, 0.1, 0.2, 0.3, 0.45}) {
    EXPECT_NEAR(SampledDistance(*b, 0.3, 0.3 + delta), 1 - 4 * delta, 1e-3) << delta;
  }
}

TEST(DistancePreservationTest, RffInnerProductMatchesCharacteristicFunction) {
  // Prop. 3: gamma(x1) . gamma(x2) = sum_j cos 2 pi b_j delta; divided by F it is a mean
  // of F bounded variables, so it concentrates at exp(-2 pi^2 sigma^2 delta^2) with
  // standard deviation <= 1 / sqrt(2F) = 0.005 for F = 20000; tolerance 0.03 (6 sd).
  auto rff = FourierFeatures::Gaussian(1, 20000, 3.0, FrequencyConvention::kTwoPi, 17);
  ASSERT_TRUE(rff.ok());
  for (double delta : {0.0, 0.02, 0.05, 0.1, 0.2}) {
    RowMatrixXd pts(2, 1);
    pts << 0.25, 0.25 + delta;
    auto g = rff->Encode(pts);
    ASSERT_TRUE(g.ok());
    const double d = *EmbeddedDistance(g->row(0).transpose(), g->row(1).transpose()) / 20000;
    EXPECT_NEAR(d, *RffExpectedDistance(3.0, delta), 0.03) << delta;
  }
}

TEST(DistancePreservationTest, DistanceMatrixIsScaledGram) {
  RowMatrixXd f(3, 2);
  f << 1, 2, 3, 4, -1, 0.5;
  auto m = EmbeddedDistanceMatrix(f, 0.5);
  ASSERT_TRUE(m.ok());
  EXPECT_DOUBLE_EQ((*m)(0, 1), 0.5 * (3 + 8));
  EXPECT_DOUBLE_EQ((*m)(2, 2), 0.5 * 1.25);
  EXPECT_DOUBLE_EQ((*m)(1, 2), (*m)(2, 1));
}

// Products past the double range where the result is inside it: s = 2^-1000 against
// features of 2^600 (and 2^-600 beside them). Every term is a power of two, so the sums
// are exact: the expected values hold to the last bit.
TEST(DistancePreservationTest, DistancesOfExtremeFeaturesStayInRange) {
  const double big = std::ldexp(1.0, 600), small = std::ldexp(1.0, -600), s = std::ldexp(1.0, -1000);
  RowMatrixXd f(3, 2);
  f << big, big, small, 0, big, small;
  auto m = EmbeddedDistanceMatrix(f, s);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ((*m)(0, 0), std::ldexp(1.0, 201));          // 2^-1000 (2^1200 + 2^1200)
  EXPECT_EQ((*m)(0, 2), std::ldexp(1.0, 200));          // 2^-1000 (2^1200 + 2^0): 2^0 lost to rounding
  EXPECT_EQ((*m)(1, 1), 0.0);                           // 2^-2200: below the double range
  EXPECT_EQ((*m)(1, 0), std::ldexp(1.0, -1000));        // 2^-1000 (2^0 + 0), normal
  EXPECT_EQ((*m)(1, 2), std::ldexp(1.0, -1000));
  // A single pair: 2^-1000 (2^600 2^600) = 2^200 (was inf).
  Eigen::VectorXd a(1);
  a << big;
  auto d = EmbeddedDistance(a, a, s);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(*d, std::ldexp(1.0, 200));
  // A result past the range is an error, not inf: 1 * (2^600)^2 = 2^1200.
  EXPECT_EQ(EmbeddedDistance(a, a, 1.0).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(EmbeddedDistanceMatrix(f, 1.0).status().code(), absl::StatusCode::kOutOfRange);
  // Small features under a large spacing: 2^1000 (2^-600)^2 = 2^-200 (the plain product
  // underflowed to 0 first).
  Eigen::VectorXd t(1);
  t << small;
  EXPECT_EQ(*EmbeddedDistance(t, t, std::ldexp(1.0, 1000)), std::ldexp(1.0, -200));
  // A product that is subnormal, not 0, has lost bits a large spacing would lift back
  // into range: a = 1.2345678901234567e-160 (a^2 ~ 1.5e-320, 2^-1064: 10 bits left) under
  // s = 1e300 was 3.0483850e-20 against 3.0483158e-20 (2e-5 relative). Rescaled, it is
  // s a a within 2 roundings of the exact value, computed here as (s a) a with s a normal.
  Eigen::VectorXd u(1);
  u << 1.2345678901234567e-160;
  const double want = (1e300 * u(0)) * u(0);
  EXPECT_NEAR(*EmbeddedDistance(u, u, 1e300), want, 4e-16 * want);
  RowMatrixXd uu(2, 1);
  uu << u(0), u(0);
  EXPECT_NEAR((*EmbeddedDistanceMatrix(uu, 1e300))(0, 1), want, 4e-16 * want);
}

TEST(DistancePreservationTest, RejectsBadInput) {
  const Eigen::VectorXd a = Eigen::VectorXd::Ones(3);
  EXPECT_FALSE(EmbeddedDistance(a, Eigen::VectorXd::Ones(2)).ok());
  EXPECT_FALSE(EmbeddedDistance(Eigen::VectorXd(0), Eigen::VectorXd(0)).ok());
  EXPECT_FALSE(EmbeddedDistance(a, a, 0.0).ok());
  EXPECT_FALSE(EmbeddedDistance(a, a, std::numeric_limits<double>::quiet_NaN()).ok());
  Eigen::VectorXd inf = a;
  inf(1) = std::numeric_limits<double>::infinity();
  EXPECT_FALSE(EmbeddedDistance(a, inf).ok());
  EXPECT_FALSE(EmbeddedDistanceMatrix(RowMatrixXd(0, 2)).ok());
  EXPECT_FALSE(EmbeddedDistanceMatrix(RowMatrixXd::Ones(2, 2), -1.0).ok());
  // Extreme widths whose squares leave double (delta^2 / sigma^2 was inf / inf or 0 / 0,
  // sigma^2 delta^2 0 * inf): the ratio or product is moderate, the result exact to
  // rounding. Gaussian: r = delta / (2 sigma) = 0.5, e^-0.25 (a few ulp: 1e-15 relative).
  EXPECT_NEAR(*GaussianEmbedderDistance(1e200, 1e200) / (std::sqrt(kPi) * 1e200),
              std::exp(-0.25), 1e-15);
  EXPECT_NEAR(*GaussianEmbedderDistance(1e-200, 1e-200) / (std::sqrt(kPi) * 1e-200),
              std::exp(-0.25), 1e-15);
  EXPECT_EQ(*GaussianEmbedderDistance(1e-200, 0.0), std::sqrt(kPi) * 1e-200);
  // RFF: pi sigma delta = pi 1e-2, so exp(-2 pi^2 1e-4).
  EXPECT_NEAR(*RffExpectedDistance(1e-200, 1e198), std::exp(-2 * kPi * kPi * 1e-4), 1e-15);
  EXPECT_EQ(*RffExpectedDistance(1e-200, 1e300), 0.0);  // the far tail: exp(-2e200 pi^2)
  EXPECT_FALSE(GaussianEmbedderDistance(0.0, 0.1).ok());
  EXPECT_FALSE(TriangleEmbedderDistance(0.1, std::numeric_limits<double>::infinity()).ok());
  EXPECT_FALSE(RectangleEmbedderDistance(-1.0, 0.1).ok());
  EXPECT_FALSE(RffExpectedDistance(std::numeric_limits<double>::quiet_NaN(), 0.1).ok());
}

}  // namespace
}  // namespace encodings
}  // namespace gpe
