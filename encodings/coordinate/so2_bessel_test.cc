#include "encodings/coordinate/so2_bessel.h"

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "encodings/coordinate/test_util.h"
#include "group/angle.h"
#include "gtest/gtest.h"

namespace gpe {
namespace encodings {
namespace {

using ::gpe::encodings::testing::ExpectBackwardMatchesFiniteDifferences;
using ::gpe::encodings::testing::RandomUniform;

constexpr double kPi = 3.14159265358979323846;

double Jv(int m, double x) {
  auto v = BesselJ(m, x);
  EXPECT_TRUE(v.ok()) << v.status();
  return v.ok() ? *v : std::numeric_limits<double>::quiet_NaN();
}

// Bessel's integral J_m(x) = (1 / 2pi) int_0^{2pi} cos(m t - x sin t) dt by the trapezoid
// rule: the integrand is periodic and entire, so the error falls like J_{M-m}(x), i.e.
// below 1e-16 once M exceeds x + m by a margin of ~ 10 x^(1/3) + 40 (M = 4096 for
// x <= 2100, m <= 20). Independent of std::cyl_bessel_j.
double BesselIntegral(int m, double x) {
  const int M = 4096;
  double sum = 0;
  for (int j = 0; j < M; ++j) {
    const double t = 2 * kPi * j / M;
    sum += std::cos(m * t - x * std::sin(t));
  }
  return sum / M;
}

TEST(BesselJTest, MatchesTabulatedValuesAndZeros) {
  // Abramowitz & Stegun, tables 9.1 and 9.5 (values to 15-16 digits).
  EXPECT_NEAR(Jv(0, 1.0), 0.7651976865579666, 1e-15);
  EXPECT_NEAR(Jv(1, 1.0), 0.4400505857449335, 1e-15);
  EXPECT_NEAR(Jv(0, 10.0), -0.2459357644513483, 1e-15);
  EXPECT_NEAR(Jv(1, 10.0), 0.04347274616886144, 1e-15);
  EXPECT_NEAR(Jv(0, 0.0), 1.0, 0.0);
  EXPECT_NEAR(Jv(3, 0.0), 0.0, 0.0);
  // Zeros j_{0,1..3} and j_{1,1..2}: |J| there is bounded by |J'| * (rounding of the
  // zero, ~1e-16 * 9) plus the function's own error.
  for (double z : {2.404825557695773, 5.520078110286311, 8.653727912911013}) {
    EXPECT_NEAR(Jv(0, z), 0.0, 1e-15) << z;
  }
  for (double z : {3.831705970207512, 7.015586669815619}) EXPECT_NEAR(Jv(1, z), 0.0, 1e-15) << z;
}

TEST(BesselJTest, MatchesIntegralRepresentation) {
  // Straddles libstdc++'s three regimes: series (x^2 < 10 (m + 1)), Steed's continued
  // fractions (up to x = 1000), and Hankel's asymptotic expansion (x > 1000). The oracle's
  // rounding (~1e-16 * x per term, averaging over M terms) stays below 1e-14 here.
  // Tolerances: 1e-14 for x <= 100 (the range SO(2) encodings use: c <= 50, r <= 1.5).
  // Beyond, Steed's method in libstdc++ 12 loses digits: at x = 999 its J_0 is off by
  // 2.4e-13 absolute (checked against mpmath at 30 digits, which agrees with this oracle
  // to 1e-16), so 5e-13 is the documented accuracy for 100 < x <= 2000.
  for (int m : {0, 1, 2, 5, 10, 20}) {
    for (double x : {0.01, 0.5, 1.0, 3.7, 9.9, 25.0, 80.0, 100.0}) {
      EXPECT_NEAR(Jv(m, x), BesselIntegral(m, x), 1e-14) << "m=" << m << " x=" << x;
    }
    for (double x : {400.0, 999.0, 1000.5, 1500.0, 2000.0}) {
      EXPECT_NEAR(Jv(m, x), BesselIntegral(m, x), 5e-13) << "m=" << m << " x=" << x;
    }
  }
}

// Large arguments, where J comes from Hankel's expansion with an exactly reduced phase,
// against mpmath's besselj at 600 bits (values rounded to 17 digits, computed once for
// this test). Tolerance: 2e-15 of the amplitude envelope sqrt(2 / (pi x)) plus a few ulps
// of the value: the expansion is summed to 1e-18 and the phase is exact to an ulp of an
// angle in [-pi, pi]. libstdc++'s own expansion formed the phase from x rounded in double:
// at 1e16 its J_0 was -5.0e-9 against 8.66e-10, at 1e12 off by 2e-6 of the amplitude. It
// still serves x < 1e4 (9999.5 below): there the phase error is up to x 2^-52 radians.
TEST(BesselJTest, LargeArgumentsKeepTheirPhase) {
  struct Row {
    double x;
    double j[5];  // orders 0, 1, 7, 20 (and 21, which the derivative of order 20 reads)
  };
  const Row rows[] = {
      {9999.5, {-0.0044787274031284248, 0.0066032722001328394, -0.0065925037061721333,
                -0.0046099039718294028, 0.0065031449856053376}},
      {10000.0, {-0.0070961603533888015, 0.0036474507555295803, -0.0036304094796513991,
                 -0.0071676996068597712, 0.0034904649430624614}},
      {123456.789, {-0.0015205971298614324, -0.0016865424230045781, 0.001686837995219395,
                    -0.0015178629569086801, -0.0016892494478792665}},
      {1e8, {3.2060295340412081e-05, 7.3063911815518545e-05, -7.3063919509987332e-05,
             3.2060149212524967e-05, 7.3063982347991487e-05}},
      {1e12, {1.0167125050040682e-07, -7.9138026838504408e-07, 7.9138026838260399e-07,
              1.0167125065868287e-07, -7.9138026836267638e-07}},
      {3.3e14, {-2.2548799882075439e-08, 3.7692206744026267e-08, -3.7692206744024626e-08,
                -2.2548799882098283e-08, 3.7692206744011232e-08}},
      {1e16, {8.6614276809216768e-10, 7.9316942668032647e-09, -7.9316942668032664e-09,
              8.6614276809200907e-10, 7.9316942668032829e-09}},
      {1e17, {-2.4087235483673831e-09, 7.511648229358563e-10, -7.5116482293585568e-10,
              -2.4087235483673848e-09, 7.5116482293585102e-10}},
      {1e300, {-7.8606730627240931e-151, -1.3681360450342481e-151, 1.3681360450342481e-151,
               -7.8606730627240931e-151, -1.3681360450342481e-151}},
  };
  const int orders[] = {0, 1, 7, 20};
  for (const Row& row : rows) {
    const double envelope = std::sqrt(2.0 / (kPi * row.x));
    const double phase = row.x < 1e4 ? row.x * 0x1p-52 : 2e-15;
    for (int i = 0; i < 4; ++i) {
      EXPECT_NEAR(Jv(orders[i], row.x), row.j[i], phase * envelope + 4e-16 * std::fabs(row.j[i]))
          << "m=" << orders[i] << " x=" << row.x;
    }
    // J_20' = (J_19 - J_21) / 2 = J_20 (20 / x) - J_21: the derivative reads order 21.
    auto d = BesselJDerivative(20, row.x);
    ASSERT_TRUE(d.ok());
    EXPECT_NEAR(*d, 20.0 / row.x * row.j[3] - row.j[4], 2 * phase * envelope) << row.x;
  }
}

TEST(BesselJTest, SatisfiesRecurrenceAndSmallArgumentSeries) {
  for (int m = 1; m < 20; ++m) {
    for (double x : {0.3, 2.0, 7.5, 33.0, 1200.0}) {
      // J_{m-1} + J_{m+1} = (2m / x) J_m; terms are <= 1, so cancellation keeps the
      // residual at a few ulps of the largest, scaled by 2m/x for small x.
      const double lhs = Jv(m - 1, x) + Jv(m + 1, x);
      const double rhs = 2.0 * m / x * Jv(m, x);
      EXPECT_NEAR(lhs, rhs, 1e-13 * (1 + 2.0 * m / x)) << m << " " << x;
    }
  }
  // J_m(x) = sum_k (-1)^k (x/2)^(2k+m) / (k! (k+m)!); 30 terms converge for x <= 2.
  // Relative 1e-14: pow, tgamma and the library's own series each carry a few ulps.
  for (int m : {0, 1, 4, 9}) {
    for (double x : {0.001, 0.2, 1.0, 2.0}) {
      double term = std::pow(x / 2, m) / std::tgamma(m + 1.0);
      double sum = 0;
      for (int k = 0; k < 30; ++k) {
        sum += term;
        term *= -(x / 2) * (x / 2) / ((k + 1.0) * (k + 1.0 + m));
      }
      EXPECT_NEAR(Jv(m, x), sum, 1e-14 * std::abs(sum)) << m << " " << x;
    }
  }
}

TEST(BesselJTest, DerivativeMatchesFiniteDifferences) {
  for (int m : {0, 1, 3, 20}) {
    for (double x : {0.7, 4.0, 30.0, 1300.0}) {
      const double h = 1e-5;
      const double fd = (Jv(m, x + h) - Jv(m, x - h)) / (2 * h);
      auto d = BesselJDerivative(m, x);
      ASSERT_TRUE(d.ok());
      // Truncation h^2 |J'''| / 6 < 2e-11, rounding 1e-16 / h = 1e-11.
      EXPECT_NEAR(*d, fd, 1e-9) << m << " " << x;
    }
  }
}

TEST(BesselJTest, RejectsBadArguments) {
  EXPECT_FALSE(BesselJ(-1, 1.0).ok());
  EXPECT_FALSE(BesselJ(21, 1.0).ok());
  EXPECT_FALSE(BesselJ(0, -0.5).ok());
  EXPECT_FALSE(BesselJ(0, std::numeric_limits<double>::infinity()).ok());
  EXPECT_FALSE(BesselJ(0, std::numeric_limits<double>::quiet_NaN()).ok());
  EXPECT_FALSE(BesselJDerivative(0, -1.0).ok());
}

So2BesselEncoder Make(std::vector<So2BesselEncoder::Term> terms, So2BesselEncoder::Input in) {
  auto e = So2BesselEncoder::Create(std::move(terms), in);
  EXPECT_TRUE(e.ok()) << e.status();
  return *e;
}

TEST(So2BesselEncoderTest, MatchesDefinition) {
  const So2BesselEncoder cart = Make({{0, 25.0, 1}, {2, 3.5, 3}}, So2BesselEncoder::Input::kCartesian);
  const So2BesselEncoder polar = Make({{0, 25.0, 1}, {2, 3.5, 3}}, So2BesselEncoder::Input::kPolar);
  RowMatrixXd xy(1, 2), rt(1, 2);
  xy << -0.3, 0.4;  // r = 0.5, theta = atan2(0.4, -0.3)
  const double theta = std::atan2(0.4, -0.3);
  rt << 0.5, theta;
  auto a = cart.Encode(xy);
  auto b = polar.Encode(rt);
  ASSERT_TRUE(a.ok() && b.ok());
  const double want[4] = {Jv(0, 12.5) * std::cos(theta), Jv(2, 1.75) * std::cos(3 * theta),
                          Jv(0, 12.5) * std::sin(theta), Jv(2, 1.75) * std::sin(3 * theta)};
  for (int f = 0; f < 4; ++f) {
    // hypot(-0.3, 0.4) = 0.5 within an ulp; J's slope <= 1 times c = 25: ~3e-15.
    EXPECT_NEAR((*a)(0, f), want[f], 1e-14);
    EXPECT_NEAR((*b)(0, f), want[f], 1e-14);
  }
}

TEST(So2BesselEncoderTest, SampleFollowsLimDistribution) {
  auto e = So2BesselEncoder::Sample(2000, 25.0, 4, 0, So2BesselEncoder::Input::kCartesian, 3);
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->output_dim(), 4000);
  int seen[4] = {0, 0, 0, 0};
  double sum_c = 0;
  for (const auto& t : e->terms()) {
    EXPECT_EQ(t.order_m, 0);
    EXPECT_GE(t.radial_scale, 0.0);
    EXPECT_LE(t.radial_scale, 25.0);
    ASSERT_GE(t.angular_k, 1);
    ASSERT_LE(t.angular_k, 3);
    ++seen[t.angular_k];
    sum_c += t.radial_scale;
  }
  // k uniform on {1, 2, 3}: each count ~ 667 +- 21 (binomial sd); 560..773 is 5 sd.
  for (int k = 1; k <= 3; ++k) {
    EXPECT_GT(seen[k], 560);
    EXPECT_LT(seen[k], 773);
  }
  // mean of U[0, 25] is 12.5 with standard error 25 / sqrt(12 * 2000) = 0.16.
  EXPECT_NEAR(sum_c / 2000, 12.5, 0.8);
}

TEST(So2BesselEncoderTest, RotationActsByTheIrrepOfWeightK) {
  // Rotating the point by alpha multiplies feature j by e^{i k_j alpha}: the encoding is
  // SO(2)-equivariant, and the modulus of each complex feature is rotation-invariant.
  auto e = So2BesselEncoder::Sample(16, 25.0, 8, 1, So2BesselEncoder::Input::kCartesian, 9);
  ASSERT_TRUE(e.ok());
  std::mt19937_64 rng(4);
  const RowMatrixXd p = RandomUniform(20, 2, -1, 1, rng);
  const double alpha = 0.731;
  RowMatrixXd q(20, 2);
  for (int n = 0; n < 20; ++n) {
    q(n, 0) = std::cos(alpha) * p(n, 0) - std::sin(alpha) * p(n, 1);
    q(n, 1) = std::sin(alpha) * p(n, 0) + std::cos(alpha) * p(n, 1);
  }
  auto fp = e->Encode(p);
  auto fq = e->Encode(q);
  ASSERT_TRUE(fp.ok() && fq.ok());
  for (int n = 0; n < 20; ++n) {
    for (int j = 0; j < 16; ++j) {
      const double k = e->terms()[j].angular_k;
      const double re = (*fp)(n, j), im = (*fp)(n, 16 + j);
      const double want_re = std::cos(k * alpha) * re - std::sin(k * alpha) * im;
      const double want_im = std::sin(k * alpha) * re + std::cos(k * alpha) * im;
      // The rotated point's radius and angle differ from the exact ones by a few ulps;
      // features move by at most c * ulp + k * ulp ~ 1e-14.
      EXPECT_NEAR((*fq)(n, j), want_re, 1e-13);
      EXPECT_NEAR((*fq)(n, 16 + j), want_im, 1e-13);
    }
  }
}

TEST(So2BesselEncoderTest, BackwardMatchesFiniteDifferences) {
  std::mt19937_64 rng(6);
  for (int m : {0, 1, 3}) {
    auto cart = So2BesselEncoder::Sample(12, 10.0, 5, m, So2BesselEncoder::Input::kCartesian, m);
    auto polar = So2BesselEncoder::Sample(12, 10.0, 5, m, So2BesselEncoder::Input::kPolar, m);
    ASSERT_TRUE(cart.ok() && polar.ok());
    ExpectBackwardMatchesFiniteDifferences(*cart, RandomUniform(10, 2, -1, 1, rng), 1);
    RowMatrixXd rt = RandomUniform(10, 2, 0.05, 1, rng);
    rt.col(1) = RandomUniform(10, 1, -4, 4, rng);
    ExpectBackwardMatchesFiniteDifferences(*polar, rt, 2);
  }
}

// The origin written with signed zeros is the origin: atan2 gave theta = pi or -pi for
// (-0, +-0), features 2 apart from (0, 0)'s (cos(k pi) = -1 against 1), while Backward
// took theta = 0 there. Every spelling encodes as (0, 0), bit for bit.
TEST(So2BesselEncoderTest, SignedZerosAtTheOriginEncodeAsTheOrigin) {
  const So2BesselEncoder e = Make({{0, 1.0, 1}, {1, 2.0, 3}}, So2BesselEncoder::Input::kCartesian);
  RowMatrixXd zero = RowMatrixXd::Zero(1, 2), signed_zeros(3, 2);
  signed_zeros << -0.0, 0.0, -0.0, -0.0, 0.0, -0.0;
  auto want = e.Encode(zero);
  auto got = e.Encode(signed_zeros);
  ASSERT_TRUE(want.ok() && got.ok());
  EXPECT_EQ((*want)(0, 0), 1.0);  // J_0(0) cos(0)
  for (int r = 0; r < 3; ++r) EXPECT_EQ(got->row(r), want->row(0)) << r;
}

// Polar angles far from 0: k theta is formed exactly and reduced (it was rounded in
// double first: at theta = 1e9 + 0.1 and k = 2^20 - 3, one ulp of the product is 1e-2
// rad). Reference: theta = hi + lo with hi a multiple of 1/2 (at most 33 significant
// bits below 2^32, so k hi, 20 bits more, is exact in double and std::sin / std::cos
// reduce it exactly) and |lo| <= 1/4 (k lo rounded once: 2^18 x 1.1e-16 = 3e-11);
// 1e-10 holds, the old error (1e-2 at 1e9) does not.
TEST(So2BesselEncoderTest, PolarAnglesFarFromZeroAreReducedExactly) {
  const int k = (1 << 20) - 3;
  const So2BesselEncoder e = Make({{0, 0.0, k}}, So2BesselEncoder::Input::kPolar);
  for (double theta : {1e6 + 0.1, 1e9 + 0.1, -3e9 - 0.7}) {
    RowMatrixXd p(1, 2);
    p << 1.0, theta;
    auto f = e.Encode(p);
    ASSERT_TRUE(f.ok());
    const double hi = std::round(theta * 2.0) / 2.0, lo = theta - hi;
    const double a = k * hi, b = k * lo;
    const double c = std::cos(a) * std::cos(b) - std::sin(a) * std::sin(b);
    const double s = std::sin(a) * std::cos(b) + std::cos(a) * std::sin(b);
    EXPECT_NEAR((*f)(0, 0), c, 1e-10) << theta;  // J_0(0) = 1
    EXPECT_NEAR((*f)(0, 1), s, 1e-10) << theta;
  }
}

TEST(So2BesselEncoderTest, OriginGradientIsExactWhereTheFeatureIsSmooth) {
  // J_1(c r) e^{i theta} = (c / 2)(x + i y) + O(r^3) and J_2(c r) e^{2 i theta} =
  // (c^2 / 8)(x + i y)^2 + O(r^4) are smooth at 0: central differences through the
  // origin are exact up to O(h^2), and must agree with the convention there.
  const So2BesselEncoder e =
      Make({{1, 3.0, 1}, {2, 3.0, 2}, {1, 2.0, -1}}, So2BesselEncoder::Input::kCartesian);
  ExpectBackwardMatchesFiniteDifferences(e, RowMatrixXd::Zero(1, 2), 5);
  std::mt19937_64 rng(1);
  auto g = e.Backward(RowMatrixXd::Zero(1, 2), testing::RandomNormal(1, 6, rng));
  ASSERT_TRUE(g.ok());
  EXPECT_TRUE(g->allFinite());
}

TEST(So2BesselEncoderTest, RejectsBadInput) {
  using Input = So2BesselEncoder::Input;
  EXPECT_FALSE(So2BesselEncoder::Create({}, Input::kCartesian).ok());
  EXPECT_FALSE(So2BesselEncoder::Create({{-1, 1.0, 1}}, Input::kCartesian).ok());
  EXPECT_FALSE(So2BesselEncoder::Create({{21, 1.0, 1}}, Input::kCartesian).ok());
  EXPECT_FALSE(So2BesselEncoder::Create({{0, -1.0, 1}}, Input::kCartesian).ok());
  EXPECT_FALSE(So2BesselEncoder::Create({{0, std::numeric_limits<double>::quiet_NaN(), 1}},
                                        Input::kCartesian)
                   .ok());
  EXPECT_FALSE(So2BesselEncoder::Sample(16, 25.0, 1, 0, Input::kCartesian, 1).ok());
  EXPECT_FALSE(So2BesselEncoder::Sample(16, 0.0, 4, 0, Input::kCartesian, 1).ok());
  EXPECT_FALSE(So2BesselEncoder::Sample(0, 25.0, 4, 0, Input::kCartesian, 1).ok());
  EXPECT_FALSE(So2BesselEncoder::Sample(16, 25.0, 4, 30, Input::kCartesian, 1).ok());

  const So2BesselEncoder polar = Make({{0, 2.0, 1}}, Input::kPolar);
  RowMatrixXd neg(1, 2);
  neg << -0.1, 0.3;
  EXPECT_FALSE(polar.Encode(neg).ok());
  EXPECT_FALSE(polar.Backward(neg, RowMatrixXd::Zero(1, 2)).ok());
  // k theta past double's range (k = 2, theta = 1e308) is reduced exactly: finite
  // features, those of group::SinCosOfMultiple (tested in group/), not an error.
  const So2BesselEncoder turns = Make({{0, 1.0, 2}}, Input::kPolar);
  RowMatrixXd wound(1, 2);
  wound << 1.0, 1e308;
  auto wf = turns.Encode(wound);
  ASSERT_TRUE(wf.ok()) << wf.status();
  const group::SinCos sc = group::SinCosOfMultiple(2, 1e308);
  EXPECT_EQ((*wf)(0, 0), Jv(0, 1.0) * sc.cos);
  EXPECT_EQ((*wf)(0, 1), Jv(0, 1.0) * sc.sin);
  EXPECT_TRUE(turns.Backward(wound, RowMatrixXd::Ones(1, 2))->allFinite());
  const So2BesselEncoder cart = Make({{0, 1e200, 1}}, Input::kCartesian);
  RowMatrixXd far(1, 2);
  far << 1e200, 0.0;
  EXPECT_FALSE(cart.Encode(far).ok());
  EXPECT_FALSE(cart.Encode(RowMatrixXd::Zero(0, 2)).ok());
  EXPECT_FALSE(cart.Encode(RowMatrixXd::Zero(2, 3)).ok());
  RowMatrixXd nan = RowMatrixXd::Zero(1, 2);
  nan(0, 1) = std::numeric_limits<double>::quiet_NaN();
  EXPECT_FALSE(cart.Encode(nan).ok());
  EXPECT_FALSE(cart.Backward(RowMatrixXd::Zero(1, 2), RowMatrixXd::Zero(1, 3)).ok());
}

}  // namespace
}  // namespace encodings
}  // namespace gpe
