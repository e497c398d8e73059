#include "encodings/coordinate/fourier_features.h"

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "encodings/coordinate/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gpe {
namespace encodings {
namespace {

using ::gpe::encodings::testing::ExpectBackwardMatchesFiniteDifferences;
using ::gpe::encodings::testing::RandomUniform;

constexpr double kPi = 3.14159265358979323846;

TEST(FourierFeaturesTest, MatchesDefinitionInBothConventions) {
  RowMatrixXd b(2, 2);
  b << 1.5, -0.25, 0.0, 3.0;
  RowMatrixXd x(1, 2);
  x << 0.3, -0.7;
  for (auto convention : {FrequencyConvention::kTwoPi, FrequencyConvention::kAngular}) {
    auto ff = FourierFeatures::Create(b, convention);
    ASSERT_TRUE(ff.ok()) << ff.status();
    auto out = ff->Encode(x);
    ASSERT_TRUE(out.ok());
    const double scale = convention == FrequencyConvention::kTwoPi ? 2 * kPi : 1.0;
    for (int f = 0; f < 2; ++f) {
      const double angle = scale * (b(f, 0) * x(0, 0) + b(f, 1) * x(0, 1));
      // The encoder forms (2 pi b) . x, the test 2 pi (b . x): the angles (|angle| < 14)
      // differ by a few ulps of 14, ~4 * 1.8e-15, and so may cos and sin.
      EXPECT_NEAR((*out)(0, f), std::cos(angle), 1e-14);
      EXPECT_NEAR((*out)(0, 2 + f), std::sin(angle), 1e-14);
    }
  }
}

TEST(FourierFeaturesTest, GaussianFrequenciesHaveRequestedScale) {
  // 4096 x 2 samples of N(0, 3^2): the sample std's relative standard error is
  // 1/sqrt(2 * 8192) ~ 0.8%, so 4% is a 5-sigma band; the mean's standard error is
  // 3/sqrt(8192) ~ 0.033, so |mean| < 0.17 is also 5 sigma.
  auto ff = FourierFeatures::Gaussian(2, 4096, 3.0, FrequencyConvention::kTwoPi, 7);
  ASSERT_TRUE(ff.ok());
  const auto& b = ff->frequencies();
  const double mean = b.mean();
  const double var = (b.array() - mean).square().sum() / (b.size() - 1);
  EXPECT_NEAR(std::sqrt(var), 3.0, 0.12);
  EXPECT_NEAR(mean, 0.0, 0.17);
  EXPECT_TRUE(ff->angular_frequencies().isApprox(2 * kPi * b, 1e-15));
  // Same seed, same frequencies; a different seed, different ones.
  auto again = FourierFeatures::Gaussian(2, 4096, 3.0, FrequencyConvention::kTwoPi, 7);
  auto other = FourierFeatures::Gaussian(2, 4096, 3.0, FrequencyConvention::kTwoPi, 8);
  EXPECT_EQ(again->frequencies(), b);
  EXPECT_NE(other->frequencies(), b);
}

TEST(FourierFeaturesTest, TxTIsLimConventionWithoutTwoPi) {
  auto txt = FourierFeatures::TxT(16, 5.0, 3);
  ASSERT_TRUE(txt.ok());
  EXPECT_EQ(txt->input_dim(), 2);
  EXPECT_EQ(txt->output_dim(), 32);
  EXPECT_EQ(txt->convention(), FrequencyConvention::kAngular);
  EXPECT_EQ(txt->angular_frequencies(), txt->frequencies());
}

TEST(FourierFeaturesTest, SpacedFrequenciesFollowZhengEquations) {
  auto lin = FourierFeatures::LinearlySpaced(2, 4, 3.0);
  ASSERT_TRUE(lin.ok());
  // Eq. 50 with K = 4, 2^sigma = 8: (4 - i + 8 i) / 4 = 1, 2.75, 4.5, 6.25; axis 0 first.
  const std::vector<double> want_lin = {1.0, 2.75, 4.5, 6.25};
  ASSERT_EQ(lin->num_frequencies(), 8);
  for (int i = 0; i < 4; ++i) {
    EXPECT_DOUBLE_EQ(lin->frequencies()(i, 0), want_lin[i]);
    EXPECT_DOUBLE_EQ(lin->frequencies()(i, 1), 0.0);
    EXPECT_DOUBLE_EQ(lin->frequencies()(4 + i, 1), want_lin[i]);
    EXPECT_DOUBLE_EQ(lin->frequencies()(4 + i, 0), 0.0);
  }
  auto log = FourierFeatures::LogLinearlySpaced(1, 4, 4.0);
  ASSERT_TRUE(log.ok());
  // Eq. 51: 2^(4 i / 4) = 1, 2, 4, 8.
  for (int i = 0; i < 4; ++i) EXPECT_DOUBLE_EQ(log->frequencies()(i, 0), std::exp2(i));
  EXPECT_EQ(log->convention(), FrequencyConvention::kTwoPi);
}

TEST(FourierFeaturesTest, NerfOctavesAreExact) {
  auto nerf = FourierFeatures::Nerf(3, 10);
  ASSERT_TRUE(nerf.ok());
  EXPECT_EQ(nerf->output_dim(), 60);
  RowMatrixXd x(1, 3);
  x << 0.125, -0.5, 0.75;
  auto out = nerf->Encode(x);
  ASSERT_TRUE(out.ok());
  // Feature (axis 1, octave 3) is sin(2^3 pi * -0.5) = sin(-4 pi) = 0 up to the rounding
  // of pi (8 pi's rounding error 8 * 1.2e-16 times |x| = 0.5).
  EXPECT_NEAR((*out)(0, 30 + 13), 0.0, 1e-14);
  // cos(2^2 pi * 0.125) = cos(pi / 2) = 0, sin = 1.
  EXPECT_NEAR((*out)(0, 2), 0.0, 1e-15);
  EXPECT_NEAR((*out)(0, 30 + 2), 1.0, 1e-15);
}

// Every octave up to the 64th against the exact phase. x = M 2^-54 (a double in
// [1/4, 1/2)), so octave k's phase 2^(k-1) x turns has the exact fraction
// (M mod 2^(55-k)) / 2^(55-k), from integers; a correctly rounded feature is within
// 3e-16 of sin / cos of 2 pi times it (one rounding of 2 pi r, |2 pi r| <= pi, and of
// sin / cos; at a half turn, sin(+-pi) rounds to +-1.2e-16, either sign). With 2^k times a rounded pi the phase was off by 2^k x 1.2e-16 rad: 1e-6
// at k = 40, O(1) past 53; at x = 1/2 every octave from k = 2 on is exactly (1, 0).
TEST(FourierFeaturesTest, NerfOctavesAreCorrectlyRoundedAtEveryOctave) {
  auto nerf = FourierFeatures::Nerf(2, 64);
  ASSERT_TRUE(nerf.ok());
  RowMatrixXd x(1, 2);
  x << 0.3, 0.5;
  auto out = nerf->Encode(x);
  ASSERT_TRUE(out.ok());
  const int64_t f = 2 * 64;
  const int64_t m = static_cast<int64_t>(std::ldexp(0.3, 54));
  ASSERT_EQ(std::ldexp(static_cast<double>(m), -54), 0.3);
  for (int k = 0; k < 64; ++k) {
    double frac = 0.0;  // 2^(k-1) x mod 1, exact
    if (55 - k > 0) {
      const int64_t den = int64_t{1} << (55 - k);
      frac = static_cast<double>(m % den) / static_cast<double>(den);
    }
    const double angle = 2.0 * kPi * std::remainder(frac, 1.0);
    EXPECT_NEAR((*out)(0, k), std::cos(angle), 3e-16) << "octave " << k;
    EXPECT_NEAR((*out)(0, f + k), std::sin(angle), 3e-16) << "octave " << k;
    if (k >= 2) {
      EXPECT_EQ((*out)(0, 64 + k), 1.0) << "octave " << k;
      EXPECT_EQ((*out)(0, f + 64 + k), 0.0) << "octave " << k;
    }
  }
}

TEST(FourierFeaturesTest, FeaturesLieOnUnitCircles) {
  std::mt19937_64 rng(11);
  auto ff = FourierFeatures::Gaussian(3, 64, 10.0, FrequencyConvention::kTwoPi, 1);
  ASSERT_TRUE(ff.ok());
  auto out = ff->Encode(RandomUniform(50, 3, -1, 1, rng));
  ASSERT_TRUE(out.ok());
  const RowMatrixXd r2 = out->leftCols(64).array().square() + out->rightCols(64).array().square();
  // cos^2 + sin^2 = 1 to a few ulps.
  EXPECT_LT((r2.array() - 1.0).abs().maxCoeff(), 1e-15);
}

TEST(FourierFeaturesTest, BackwardMatchesFiniteDifferences) {
  std::mt19937_64 rng(5);
  for (auto convention : {FrequencyConvention::kTwoPi, FrequencyConvention::kAngular}) {
    auto ff = FourierFeatures::Gaussian(3, 32, 2.0, convention, 2);
    ASSERT_TRUE(ff.ok());
    ExpectBackwardMatchesFiniteDifferences(*ff, RandomUniform(8, 3, -1, 1, rng), 9);
  }
  auto nerf = FourierFeatures::Nerf(2, 6);
  ExpectBackwardMatchesFiniteDifferences(*nerf, RandomUniform(8, 2, -1, 1, rng), 10);
}

TEST(FourierFeaturesTest, RejectsBadInput) {
  EXPECT_FALSE(FourierFeatures::Gaussian(0, 4, 1.0, FrequencyConvention::kTwoPi, 1).ok());
  EXPECT_FALSE(FourierFeatures::Gaussian(2, 0, 1.0, FrequencyConvention::kTwoPi, 1).ok());
  EXPECT_FALSE(FourierFeatures::Gaussian(2, 4, 0.0, FrequencyConvention::kTwoPi, 1).ok());
  EXPECT_FALSE(FourierFeatures::Gaussian(2, 4, -1.0, FrequencyConvention::kTwoPi, 1).ok());
  EXPECT_FALSE(FourierFeatures::Gaussian(2, 4, std::numeric_limits<double>::quiet_NaN(),
                                         FrequencyConvention::kTwoPi, 1)
                   .ok());
  EXPECT_FALSE(FourierFeatures::Create(RowMatrixXd(0, 2), FrequencyConvention::kTwoPi).ok());
  RowMatrixXd inf_b(1, 1);
  inf_b << std::numeric_limits<double>::infinity();
  EXPECT_FALSE(FourierFeatures::Create(inf_b, FrequencyConvention::kAngular).ok());
  RowMatrixXd huge(1, 1);
  huge << 1e308;
  EXPECT_FALSE(FourierFeatures::Create(huge, FrequencyConvention::kTwoPi).ok());
  EXPECT_FALSE(FourierFeatures::Nerf(2, 0).ok());
  EXPECT_FALSE(FourierFeatures::LinearlySpaced(2, 0, 3.0).ok());
  EXPECT_FALSE(FourierFeatures::AxisAligned(2, {}, FrequencyConvention::kTwoPi).ok());
  // The frequency matrix is bounded (2^25 entries) before it is allocated: NeRF's 64
  // octaves on 1024 axes asked for a (2^16 x 2^10) matrix, half a GiB (an unseeded
  // coordinate_fuzzer run timed out in it); the Gaussian's F x D likewise.
  EXPECT_FALSE(FourierFeatures::Nerf(1024, 64).ok());
  EXPECT_FALSE(FourierFeatures::Gaussian(int64_t{1} << 20, 128, 1.0, FrequencyConvention::kTwoPi, 1).ok());
  EXPECT_TRUE(FourierFeatures::Nerf(3, 64).ok());

  auto ff = FourierFeatures::Gaussian(2, 4, 1.0, FrequencyConvention::kTwoPi, 1);
  ASSERT_TRUE(ff.ok());
  EXPECT_FALSE(ff->Encode(RowMatrixXd(0, 2)).ok());
  EXPECT_FALSE(ff->Encode(RowMatrixXd::Zero(3, 3)).ok());
  RowMatrixXd nan_points = RowMatrixXd::Zero(3, 2);
  nan_points(1, 1) = std::numeric_limits<double>::quiet_NaN();
  EXPECT_FALSE(ff->Encode(nan_points).ok());
  const RowMatrixXd good = RowMatrixXd::Zero(3, 2);
  EXPECT_FALSE(ff->Backward(good, RowMatrixXd::Zero(2, 8)).ok());
  // Finite frequencies and points whose phase w . x overflows: an error, not NaN features
  // (cos and sin of inf) with OK.
  RowMatrixXd big_w(1, 1), far(1, 1);
  big_w << 1e300;
  far << 1e10;
  auto steep = FourierFeatures::Create(big_w, FrequencyConvention::kAngular);
  ASSERT_TRUE(steep.ok());
  EXPECT_EQ(steep->Encode(far).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(steep->Backward(far, RowMatrixXd::Zero(1, 2)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(ff->Backward(good, RowMatrixXd::Zero(3, 7)).ok());
  RowMatrixXd inf_grad = RowMatrixXd::Zero(3, 8);
  inf_grad(0, 0) = std::numeric_limits<double>::infinity();
  EXPECT_FALSE(ff->Backward(good, inf_grad).ok());
  EXPECT_TRUE(ff->Backward(good, RowMatrixXd::Zero(3, 8)).ok());
}

}  // namespace
}  // namespace encodings
}  // namespace gpe
