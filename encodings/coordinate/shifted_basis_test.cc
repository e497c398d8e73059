#include "encodings/coordinate/shifted_basis.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "encodings/coordinate/test_util.h"
#include "gtest/gtest.h"
#include "hwy/targets.h"

namespace gpe {
namespace encodings {
namespace {

using ::gpe::encodings::testing::ExpectBackwardMatchesFiniteDifferences;
using ::gpe::encodings::testing::RandomNormal;
using ::gpe::encodings::testing::RandomUniform;

constexpr double kPi = 3.14159265358979323846;

ShiftedBasis1D Basis(ShiftedBasisKind kind, int64_t k, double w, double lo = 0, double hi = 1) {
  auto b = ShiftedBasis1D::Create(kind, k, w, lo, hi);
  EXPECT_TRUE(b.ok()) << b.status();
  return *b;
}

std::vector<double> Linspace(double lo, double hi, int n) {
  std::vector<double> v(n);
  for (int i = 0; i < n; ++i) v[i] = lo + (hi - lo) * i / (n - 1);
  return v;
}

TEST(ShiftedBasis1DTest, ShiftsAreEquallySpacedFromLo) {
  const ShiftedBasis1D b = Basis(ShiftedBasisKind::kGaussian, 4, 0.1, -1.0, 1.0);
  EXPECT_DOUBLE_EQ(b.spacing(), 0.5);
  EXPECT_DOUBLE_EQ(b.shift(0), -1.0);
  EXPECT_DOUBLE_EQ(b.shift(3), 0.5);
}

TEST(ShiftedBasis1DTest, ValuesFollowZhengDefinitions) {
  // K = 4 on [0, 1]: shifts 0, 0.25, 0.5, 0.75; x = 0.3.
  const std::vector<double> x = {0.3};
  const double u[4] = {0.3, 0.05, -0.2, -0.45};  // x - t_i
  auto gauss = Basis(ShiftedBasisKind::kGaussian, 4, 0.1).Encode(x);
  auto tri = Basis(ShiftedBasisKind::kTriangle, 4, 0.5).Encode(x);
  auto rect = Basis(ShiftedBasisKind::kRectangle, 4, 0.5).Encode(x);
  auto sine = Basis(ShiftedBasisKind::kSine, 4, 0.8).Encode(x);
  auto square = Basis(ShiftedBasisKind::kSquare, 4, 0.8).Encode(x);
  ASSERT_TRUE(gauss.ok() && tri.ok() && rect.ok() && sine.ok() && square.ok());
  for (int i = 0; i < 4; ++i) {
    // One exp / sin of a double argument each: 1e-15 absolute (values <= 1).
    EXPECT_NEAR((*gauss)(0, i), std::exp(-u[i] * u[i] / (2 * 0.01)), 1e-15);
    EXPECT_NEAR((*tri)(0, i), std::max(1 - std::abs(u[i]) / 0.25, 0.0), 1e-15);
    EXPECT_EQ((*rect)(0, i), std::abs(u[i]) < 0.25 ? 1.0 : 0.0);
    const double s = std::sin(2 * kPi * (-u[i]) / 0.8);
    EXPECT_NEAR((*sine)(0, i), s, 1e-15);
    EXPECT_EQ((*square)(0, i), s > 0 ? 1.0 : -1.0);
  }
  // Explicit numbers, independent of the formulas above: tri(0.05 / 0.25) = 0.8,
  // exp(-0.3^2 / 0.02) = exp(-4.5).
  EXPECT_NEAR((*tri)(0, 1), 0.8, 1e-15);
  EXPECT_NEAR((*tri)(0, 2), 0.2, 1e-15);
  EXPECT_NEAR((*gauss)(0, 0), 0.011108996538242306, 1e-15);
  // rect at exactly half the width is 1/2: x = 0.5, w = 0.5, shift 0.25 and 0.75.
  auto edge = Basis(ShiftedBasisKind::kRectangle, 4, 0.5).Encode(std::vector<double>{0.5});
  EXPECT_EQ((*edge)(0, 1), 0.5);
  EXPECT_EQ((*edge)(0, 2), 1.0);
  EXPECT_EQ((*edge)(0, 3), 0.5);
}

TEST(ShiftedBasis1DTest, EncodeToMatchesEncodeAndChecksShape) {
  // The windowed kernels (Gaussian, triangle) must equal a direct evaluation of every
  // shift, including exact zeros outside the window, at points inside and outside the
  // domain; the Gaussian's window edge (exp underflowing to 0 at 38.6 sigma) is crossed
  // here because sigma = 0.01 and the shifts span 100 sigma.
  for (auto kind : {ShiftedBasisKind::kGaussian, ShiftedBasisKind::kTriangle}) {
    const ShiftedBasis1D b = Basis(kind, 64, 0.01);
    const std::vector<double> xs = {-0.5, -0.001, 0.0, 0.2371, 0.5, 0.999, 1.0, 1.3};
    RowMatrixXd out(xs.size(), 64);
    ASSERT_TRUE(b.EncodeTo(xs, out).ok());
    for (size_t j = 0; j < xs.size(); ++j) {
      for (int i = 0; i < 64; ++i) {
        const double u = xs[j] - b.shift(i);
        const double want = kind == ShiftedBasisKind::kGaussian
                                ? std::exp(-u * u / (2 * 0.01 * 0.01))
                                : std::max(1 - std::abs(u) / 0.005, 0.0);
        // Zeros must be exact (the window); elsewhere the exponent y (|y| <= 745) is
        // formed with a different rounding order here: relative error ~|y| * 2 eps.
        if (want == 0) {
          EXPECT_EQ(out(j, i), 0.0) << j << " " << i;
        } else {
          EXPECT_NEAR(out(j, i), want, 1e-12 * want) << j << " " << i;
        }
      }
    }
    RowMatrixXd wrong(xs.size(), 63);
    EXPECT_FALSE(b.EncodeTo(xs, wrong).ok());
  }
}

// Distance in units in the last place between two non-negative doubles (adjacent
// doubles differ by 1; +0 and the smallest subnormal by 1).
int64_t UlpDistance(double a, double b) {
  int64_t ia, ib;
  std::memcpy(&ia, &a, sizeof(a));
  std::memcpy(&ib, &b, sizeof(b));
  return ia > ib ? ia - ib : ib - ia;
}

// The vectorised Gaussian window against std::exp on the same arguments: at most 1 ulp
// apart (Highway documents its double Exp to 1 ulp; the arguments are formed by the same
// operations, so nothing else differs), over ranges whose lengths straddle the vector
// widths (2, 4, 8 lanes) and whose arguments run from 0 down through the subnormal
// results (-708 .. -745) to exact zeros, where the kernel must agree exactly. Entries
// outside [first, last) are not written.
TEST(ShiftedBasis1DTest, VectorGaussianIsWithinOneUlpOfStdExp) {
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  int64_t worst = 0, tail_hits = 0;
  for (int trial = 0; trial < 400; ++trial) {
    const int64_t k = 1 + static_cast<int64_t>(u(rng) * 90);
    const double lo = -1.0 + u(rng), spacing = (0.5 + u(rng)) / static_cast<double>(k);
    const double sigma = spacing * (0.2 + 3 * u(rng));
    const double c = -0.5 / (sigma * sigma);
    const double x = lo + (u(rng) * 1.2 - 0.1) * spacing * static_cast<double>(k);
    const int64_t first = static_cast<int64_t>(u(rng) * static_cast<double>(k));
    const int64_t last = first + static_cast<int64_t>(u(rng) * static_cast<double>(k - first + 1));
    std::vector<double> want(static_cast<size_t>(k), -1.0), got(static_cast<size_t>(k), -1.0);
    internal::GaussianWindowReference(x, lo, spacing, c, first, last, want.data());
    internal::GaussianWindow(x, lo, spacing, c, first, last, got.data());
    for (int64_t i = 0; i < k; ++i) {
      if (i < first || i >= last) {
        ASSERT_EQ(got[i], -1.0) << "wrote outside the window at " << i;
        continue;
      }
      const int64_t ulps = UlpDistance(got[i], want[i]);
      worst = std::max(worst, ulps);
      ASSERT_LE(ulps, 1) << "x=" << x << " i=" << i << " got " << got[i] << " want " << want[i];
      if (want[i] < 0x1p-1021) {  // the std::exp tail: exact
        ASSERT_EQ(got[i], want[i]);
        ++tail_hits;
      }
    }
  }
  EXPECT_GT(tail_hits, 0);  // the trials reached the far tail (c u^2 < -708)
  std::vector<double> tail(4);
  internal::GaussianWindow(0.0, 0.0, 1.0, -1.0, 0, 4, tail.data());  // exp(-i^2)
  EXPECT_EQ(tail[0], 1.0);
  EXPECT_LE(UlpDistance(tail[2], std::exp(-4.0)), 1);
  RecordProperty("worst_ulps", static_cast<int>(worst));
}

// A NaN coordinate gives NaN features on every compiled Highway target, the dispatched
// one and the fallbacks (EMU128 is what a CPU without AVX2 runs): non-finite inputs
// propagate, as std::exp's do. EMU128's Exp converts its argument to int32 in C++, which
// is undefined for NaN; the sanitizer run runs this test under UBSan (options_fuzzer
// found it there). 19 values: below, at and above every vector width (2, 4, 8 doubles).
TEST(ShiftedBasis1DTest, NanCoordinateGivesNanOnEveryTarget) {
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    std::vector<double> got(19, 0.0);
    internal::GaussianWindow(std::nan(""), -1.0, 0.25, -3.0, 0, 19, got.data());
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_TRUE(std::isnan(got[i])) << hwy::TargetName(target) << " value " << i;
    }
  }
  hwy::SetSupportedTargetsForTest(0);
}

TEST(ShiftedBasis1DTest, ImpulseIsOneHotAtNearestShift) {
  const ShiftedBasis1D b = Basis(ShiftedBasisKind::kImpulse, 4, 1.0);
  auto psi = b.Encode(std::vector<double>{0.0, 0.1, 0.13, 0.74, 0.9, -0.2, 1.2});
  ASSERT_TRUE(psi.ok());
  const int want[7] = {0, 0, 1, 3, -1 /* 0.9 rounds to shift 4: outside */, -1, -1};
  for (int j = 0; j < 7; ++j) {
    for (int i = 0; i < 4; ++i) EXPECT_EQ((*psi)(j, i), i == want[j] ? 1.0 : 0.0) << j;
  }
}

TEST(ShiftedBasis1DTest, DerivativesMatchFiniteDifferences) {
  std::mt19937_64 rng(3);
  for (auto kind : {ShiftedBasisKind::kGaussian, ShiftedBasisKind::kTriangle,
                    ShiftedBasisKind::kSine, ShiftedBasisKind::kRectangle,
                    ShiftedBasisKind::kSquare, ShiftedBasisKind::kImpulse}) {
    auto enc = SimpleShiftedEncoder::Create({Basis(kind, 8, 0.3)});
    ASSERT_TRUE(enc.ok());
    // Random points almost surely avoid the kinks/jumps within h = 1e-5 (24 kink
    // positions, 10 points: chance ~ 0.5% per seed; this seed is clear of them).
    ExpectBackwardMatchesFiniteDifferences(*enc, RandomUniform(10, 1, 0, 1, rng), 4);
  }
}

// Far coordinates: the sine and square bases' phases (t - x) / w are reduced in turns
// (exact for the rounded quotient): at x = 1e6 + 0.25 with width 1 and shifts t_i = i / 4
// (exact), (t_i - x) / w = i / 4 - 1e6 - 0.25 turns to the rounding of x (ulp(1e6) =
// 1.2e-10), so the features are sin(2 pi (i - 1) / 4) within 1e-9 (the old rounded 2 pi
// times a phase of 6e6 rad was off by 1e-9 too: the test's point is the limits below).
// A phase past double's range (width 1e-3, x = 1e306: 1e309 turns) is an error, not NaN
// features; one in range but past 2 pi / w's (x = 1e305: 1e308 turns, 6e308 rad, which
// gave NaN) is an integer number of turns in double: sin 0 = 0.
// The Gaussian's derivative far out (u / w^2 overflowing where exp has underflowed) is
// 0, not inf times 0 = NaN.
TEST(ShiftedBasis1DTest, FarCoordinatesGiveFiniteFeaturesOrAnError) {
  const ShiftedBasis1D sine = Basis(ShiftedBasisKind::kSine, 4, 1.0, 0.0, 1.0);
  auto f = sine.Encode(std::vector<double>{1e6 + 0.25});
  ASSERT_TRUE(f.ok()) << f.status();
  for (int i = 0; i < 4; ++i) EXPECT_NEAR((*f)(0, i), std::sin(2 * kPi * (i - 1) / 4.0), 1e-9) << i;
  for (ShiftedBasisKind kind : {ShiftedBasisKind::kSine, ShiftedBasisKind::kSquare}) {
    const ShiftedBasis1D narrow = Basis(kind, 4, 1e-3);
    EXPECT_EQ(narrow.Encode(std::vector<double>{1e306}).status().code(),
              absl::StatusCode::kInvalidArgument);
    EXPECT_FALSE(narrow.EncodeDerivative(std::vector<double>{-1.7e308}).ok());
    auto simple = SimpleShiftedEncoder::Create({narrow});
    auto complex = ComplexShiftedEncoder::Create({narrow});
    ASSERT_TRUE(simple.ok() && complex.ok());
    RowMatrixXd far(1, 1);
    far << 1e306;
    EXPECT_FALSE(simple->Encode(far).ok());
    EXPECT_FALSE(simple->Backward(far, RowMatrixXd::Ones(1, 4)).ok());
    EXPECT_FALSE(complex->Encode(far).ok());
    EXPECT_FALSE(complex->Backward(far, RowMatrixXd::Ones(1, 4)).ok());
    auto ok = narrow.Encode(std::vector<double>{1e305});
    ASSERT_TRUE(ok.ok());
    for (int i = 0; i < 4; ++i) EXPECT_EQ((*ok)(0, i), 0.0);
  }
  for (double w : {1e-3, 1e-150}) {
    const ShiftedBasis1D g = Basis(ShiftedBasisKind::kGaussian, 4, w);
    for (double x : {1.7e308, 1e9, -1e200}) {
      auto d = g.EncodeDerivative(std::vector<double>{x});
      ASSERT_TRUE(d.ok());
      for (int i = 0; i < 4; ++i) EXPECT_EQ((*d)(0, i), 0.0) << w << " " << x;
    }
  }
}

TEST(SimpleShiftedEncoderTest, ConcatenatesAxes) {
  auto enc = SimpleShiftedEncoder::Create({Basis(ShiftedBasisKind::kGaussian, 5, 0.1),
                                           Basis(ShiftedBasisKind::kTriangle, 3, 0.4, -1, 1)});
  ASSERT_TRUE(enc.ok());
  EXPECT_EQ(enc->output_dim(), 8);
  std::mt19937_64 rng(1);
  const RowMatrixXd p = RandomUniform(6, 2, -1, 1, rng);
  auto out = enc->Encode(p);
  ASSERT_TRUE(out.ok());
  for (int n = 0; n < 6; ++n) {
    auto a = enc->axes()[0].Encode(std::vector<double>{p(n, 0)});
    auto b = enc->axes()[1].Encode(std::vector<double>{p(n, 1)});
    EXPECT_EQ(out->row(n).head(5), a->row(0));
    EXPECT_EQ(out->row(n).tail(3), b->row(0));
  }
  ExpectBackwardMatchesFiniteDifferences(*enc, p, 2);
}

TEST(ComplexShiftedEncoderTest, MaterialisedFeaturesMatchFactorForm2D) {
  // Zheng et al. eq. 10: features(x_j, y_i) . vec(W) = (Psi_y W Psi_x^T)(i, j), with the
  // feature order and the row-major W documented in the header.
  auto enc = ComplexShiftedEncoder::Create({Basis(ShiftedBasisKind::kGaussian, 6, 0.15),
                                            Basis(ShiftedBasisKind::kTriangle, 4, 0.5)});
  ASSERT_TRUE(enc.ok());
  ASSERT_EQ(enc->output_dim(), 24);
  const std::vector<double> xs = Linspace(0, 1, 7), ys = Linspace(0, 1, 5);
  auto factors = enc->Factors({xs, ys});
  ASSERT_TRUE(factors.ok());
  const RowMatrixXd& psi_x = (*factors)[0];
  const RowMatrixXd& psi_y = (*factors)[1];
  std::mt19937_64 rng(2);
  const RowMatrixXd w = RandomNormal(4, 6, rng);  // K_y x K_x
  const RowMatrixXd image = psi_y * w * psi_x.transpose();
  const Eigen::Map<const Eigen::VectorXd> vec_w(w.data(), w.size());
  RowMatrixXd points(35, 2);
  for (int i = 0; i < 5; ++i) {
    for (int j = 0; j < 7; ++j) points.row(i * 7 + j) << xs[j], ys[i];
  }
  auto features = enc->Encode(points);
  ASSERT_TRUE(features.ok());
  const Eigen::VectorXd pred = *features * vec_w;
  // Both sides sum 24 products of O(1) terms: agreement to ~1e-15 * 24 * |w|.
  for (int i = 0; i < 5; ++i) {
    for (int j = 0; j < 7; ++j) EXPECT_NEAR(pred(i * 7 + j), image(i, j), 1e-13);
  }
}

TEST(ComplexShiftedEncoderTest, MaterialisedFeaturesMatchModeProducts3D) {
  // Eq. 18: vec(W)^T Psi(x) = W x_1 psi(x_0) x_2 psi(x_1) x_3 psi(x_2).
  auto enc = ComplexShiftedEncoder::Create({Basis(ShiftedBasisKind::kGaussian, 3, 0.2),
                                            Basis(ShiftedBasisKind::kSine, 4, 0.7),
                                            Basis(ShiftedBasisKind::kTriangle, 5, 0.6)});
  ASSERT_TRUE(enc.ok());
  ASSERT_EQ(enc->output_dim(), 60);
  std::mt19937_64 rng(8);
  const RowMatrixXd p = RandomUniform(9, 3, 0, 1, rng);
  const Eigen::VectorXd w = RandomNormal(60, 1, rng);  // W[k2][k1][k0], k0 fastest
  auto features = enc->Encode(p);
  ASSERT_TRUE(features.ok());
  for (int n = 0; n < 9; ++n) {
    auto a = enc->axes()[0].Encode(std::vector<double>{p(n, 0)});
    auto b = enc->axes()[1].Encode(std::vector<double>{p(n, 1)});
    auto c = enc->axes()[2].Encode(std::vector<double>{p(n, 2)});
    double want = 0;
    for (int k2 = 0; k2 < 5; ++k2) {
      for (int k1 = 0; k1 < 4; ++k1) {
        for (int k0 = 0; k0 < 3; ++k0) {
          want += w(k0 + 3 * (k1 + 4 * k2)) * (*a)(0, k0) * (*b)(0, k1) * (*c)(0, k2);
        }
      }
    }
    EXPECT_NEAR(features->row(n).dot(w), want, 1e-13);
  }
  ExpectBackwardMatchesFiniteDifferences(*enc, p, 3);
}

TEST(ComplexShiftedEncoderTest, KroneckerRankIsProductOfRanks) {
  // Eq. 9: on a 12 x 10 grid with K = 6 and 5 Gaussians (each factor full column rank),
  // the materialised 120 x 30 feature matrix has rank 30 = 6 * 5, while the simple
  // encoding of the same points has rank at most 6 + 5 = 11.
  const ShiftedBasis1D bx = Basis(ShiftedBasisKind::kGaussian, 6, 0.1);
  const ShiftedBasis1D by = Basis(ShiftedBasisKind::kGaussian, 5, 0.1);
  auto complex = ComplexShiftedEncoder::Create({bx, by});
  auto simple = SimpleShiftedEncoder::Create({bx, by});
  const std::vector<double> xs = Linspace(0, 1, 12), ys = Linspace(0, 1, 10);
  RowMatrixXd points(120, 2);
  for (int i = 0; i < 10; ++i) {
    for (int j = 0; j < 12; ++j) points.row(i * 12 + j) << xs[j], ys[i];
  }
  auto fc = complex->Encode(points);
  auto fs = simple->Encode(points);
  ASSERT_TRUE(fc.ok() && fs.ok());
  // Rank with a relative threshold of 1e-10: the factors' smallest singular values are
  // ~1e-3 of the largest, so the Kronecker's are ~1e-6, far above the threshold.
  Eigen::JacobiSVD<Eigen::MatrixXd> svd_c(*fc), svd_s(*fs);
  svd_c.setThreshold(1e-10);
  svd_s.setThreshold(1e-10);
  EXPECT_EQ(svd_c.rank(), 30);
  EXPECT_LE(svd_s.rank(), 11);
}

TEST(ComplexShiftedEncoderTest, RejectsBadInput) {
  // A spacing below double's normal range (here 0: 2^24 shifts over [0, 1e-317]) and
  // widths whose kernels' constants leave double's range: refused at creation. (The zero
  // spacing made the shift window NaN and its int64 cast undefined: a write at INT64_MIN.)
  EXPECT_FALSE(ShiftedBasis1D::Create(ShiftedBasisKind::kTriangle, int64_t{1} << 24, 1.0, 0.0,
                                      1e-317)
                   .ok());
  EXPECT_FALSE(ShiftedBasis1D::Create(ShiftedBasisKind::kGaussian, 4, 1e-160).ok());
  EXPECT_FALSE(ShiftedBasis1D::Create(ShiftedBasisKind::kGaussian, 4, 1e160).ok());
  EXPECT_FALSE(ShiftedBasis1D::Create(ShiftedBasisKind::kSine, 4, 1e-308).ok());
  EXPECT_TRUE(ShiftedBasis1D::Create(ShiftedBasisKind::kGaussian, 4, 1e-150).ok());
  EXPECT_FALSE(ShiftedBasis1D::Create(ShiftedBasisKind::kGaussian, 0, 0.1).ok());
  EXPECT_FALSE(ShiftedBasis1D::Create(ShiftedBasisKind::kGaussian, 4, 0.0).ok());
  EXPECT_FALSE(ShiftedBasis1D::Create(ShiftedBasisKind::kTriangle, 4, -1.0).ok());
  EXPECT_FALSE(
      ShiftedBasis1D::Create(ShiftedBasisKind::kSine, 4, std::numeric_limits<double>::infinity())
          .ok());
  EXPECT_FALSE(ShiftedBasis1D::Create(ShiftedBasisKind::kGaussian, 4, 0.1, 1.0, 1.0).ok());
  EXPECT_FALSE(ShiftedBasis1D::Create(ShiftedBasisKind::kGaussian, 4, 0.1, 2.0, 1.0).ok());
  EXPECT_FALSE(ShiftedBasis1D::Create(ShiftedBasisKind::kGaussian, 4, 0.1, -1e308, 1e308).ok());
  EXPECT_TRUE(ShiftedBasis1D::Create(ShiftedBasisKind::kImpulse, 4, 0.0).ok());
  EXPECT_FALSE(SimpleShiftedEncoder::Create({}).ok());
  EXPECT_FALSE(ComplexShiftedEncoder::Create({}).ok());
  const ShiftedBasis1D big = Basis(ShiftedBasisKind::kGaussian, 4096, 0.01);
  EXPECT_FALSE(ComplexShiftedEncoder::Create({big, big, big}).ok());

  const ShiftedBasis1D b = Basis(ShiftedBasisKind::kGaussian, 4, 0.1);
  EXPECT_FALSE(b.Encode(std::vector<double>{}).ok());
  EXPECT_FALSE(b.Encode(std::vector<double>{0.1, std::numeric_limits<double>::quiet_NaN()}).ok());
  auto enc = ComplexShiftedEncoder::Create({b, b});
  ASSERT_TRUE(enc.ok());
  EXPECT_FALSE(enc->Factors({{0.1}}).ok());
  EXPECT_FALSE(enc->Factors({{0.1}, {}}).ok());
  EXPECT_FALSE(enc->Encode(RowMatrixXd::Zero(2, 3)).ok());
  RowMatrixXd inf = RowMatrixXd::Zero(2, 2);
  inf(1, 0) = std::numeric_limits<double>::infinity();
  EXPECT_FALSE(enc->Encode(inf).ok());
  EXPECT_FALSE(enc->Backward(RowMatrixXd::Zero(2, 2), RowMatrixXd::Zero(2, 15)).ok());
  auto huge = ComplexShiftedEncoder::Create({Basis(ShiftedBasisKind::kGaussian, 4096, 0.01),
                                             Basis(ShiftedBasisKind::kGaussian, 4096, 0.01)});
  ASSERT_TRUE(huge.ok());
  EXPECT_EQ(huge->Encode(RowMatrixXd::Zero(100, 2)).status().code(),
            absl::StatusCode::kResourceExhausted);
}

}  // namespace
}  // namespace encodings
}  // namespace gpe
