#include "group/angle.h"

#include <quadmath.h>

#include <cmath>
#include <cstdint>
#include <random>

#include "gtest/gtest.h"

namespace gpe {
namespace group {
namespace {

// 2 pi as a sum of two binary128 numbers (226 bits), for the oracle below.
const __float128 kTwoPiHiQ = strtoflt128("0x1.921fb54442d18469898cc51701b8p+2", nullptr);
const __float128 kTwoPiLoQ = strtoflt128("0x1.cd129024e088a67cc74020bbea64p-113", nullptr);

// Oracle: p * theta mod 2 pi in binary128. p is split into two 32-bit halves so each
// partial product (<= 85 bits) is exact in binary128's 113-bit significand; each is
// reduced with an exact fmaq two-product against the 226-bit 2 pi. Its error is about
// 2^-110 absolute, ~2^57 times smaller than one ulp of the double result.
__float128 ReduceQ(__float128 t) {
  const __float128 k = nearbyintq(t / kTwoPiHiQ);
  const __float128 h = k * kTwoPiHiQ;
  const __float128 l = fmaq(k, kTwoPiHiQ, -h);
  return ((t - h) - l) - k * kTwoPiLoQ;
}

double OracleAngle(int64_t p, double theta) {
  const __float128 hi = static_cast<__float128>(p >> 32) * static_cast<__float128>(4294967296.0);
  const __float128 lo = static_cast<__float128>(static_cast<uint32_t>(p & 0xffffffff));
  __float128 r = ReduceQ(hi * theta) + ReduceQ(lo * theta);
  r = ReduceQ(r);
  return static_cast<double>(r);
}

// Distance on the circle, so that +pi and -pi count as equal.
double CircleDistance(double a, double b) {
  double d = std::fabs(a - b);
  return std::fmin(d, 2 * kPi - d);
}

// One ulp at pi is 4.4e-16; the contract is 1 ulp of the result plus 2^-90.
constexpr double kAngleTol = 4.5e-16;

TEST(ReducedAngleTest, MatchesQuadOracleForLargePositions) {
  std::mt19937_64 rng(1234);
  std::uniform_int_distribution<int> bits(0, 62);
  std::uniform_real_distribution<double> unit(-1.0, 1.0);
  for (int trial = 0; trial < 2000; ++trial) {
    const int b = bits(rng);
    int64_t p = static_cast<int64_t>(rng() >> (63 - b));
    if (trial % 2) p = -p;
    // Frequencies from RoPE's range (1e-4 .. 1) and beyond (up to 2^20).
    const double theta = unit(rng) * std::pow(2.0, (trial % 34) - 13);
    const double r = ReducedAngle(p, theta);
    ASSERT_LE(r, kPi);
    ASSERT_GE(r, -kPi);
    ASSERT_LE(CircleDistance(r, OracleAngle(p, theta)), kAngleTol)
        << "p=" << p << " theta=" << theta;
  }
}

TEST(ReducedAngleTest, ExtremePositions) {
  const int64_t ps[] = {INT64_MAX, INT64_MIN, INT64_MIN + 1, int64_t{1} << 62,
                        -(int64_t{1} << 62), int64_t{1} << 53, (int64_t{1} << 53) + 1};
  const double thetas[] = {1.0, 1e-4, 0.5, kTwoPi, kPi, 3.0e5, 1.0 / 3.0};
  for (int64_t p : ps) {
    for (double theta : thetas) {
      EXPECT_LE(CircleDistance(ReducedAngle(p, theta), OracleAngle(p, theta)), kAngleTol)
          << "p=" << p << " theta=" << theta;
    }
  }
}

TEST(ReducedAngleTest, NaiveDoubleProductIsWrongWhereReductionIsRight) {
  // Guards the test's power: at p = 2^62 the naive double product p * theta keeps no
  // correct bits of the angle, so an implementation that formed it would fail above.
  const int64_t p = (int64_t{1} << 62) + 12345;
  const double theta = 0.7;
  const double naive = std::remainder(static_cast<double>(p) * theta, kTwoPi);
  EXPECT_GT(CircleDistance(naive, OracleAngle(p, theta)), 1e-3);
  EXPECT_LE(CircleDistance(ReducedAngle(p, theta), OracleAngle(p, theta)), kAngleTol);
}

TEST(ReducedAngleTest, SmallCases) {
  EXPECT_EQ(ReducedAngle(0, 1.0), 0.0);
  EXPECT_EQ(ReducedAngle(5, 0.0), 0.0);
  EXPECT_DOUBLE_EQ(ReducedAngle(1, 1.0), 1.0);
  EXPECT_DOUBLE_EQ(ReducedAngle(-3, 0.5), -1.5);
  // 4 rad wraps to 4 - 2 pi.
  EXPECT_NEAR(ReducedAngle(4, 1.0), 4.0 - kTwoPi, 1e-15);
  EXPECT_TRUE(std::isnan(ReducedAngle(3, NAN)));
  EXPECT_TRUE(std::isnan(ReducedAngle(3, INFINITY)));
  // A finite theta whose product with p overflows double is still an exact real number:
  // it is reduced (it gave NaN before the Payne-Hanek path).
  EXPECT_TRUE(std::isfinite(ReducedAngle(INT64_MAX, 1e300)));
}

// Beyond |p theta| = 2^100 binary128 cannot serve as the oracle: these expected angles
// were computed with mpmath at 4,000 bits (the exact product of the int64 and the double,
// minus the nearest multiple of 2 pi), a computation independent of the library's table
// of 1/(2 pi) bits. Tolerance: the contract, 1 ulp of the result plus 2^-90 (kAngleTol).
// Before the Payne-Hanek path (issue 24), products well past 2^100 came out as exactly
// +-pi (the Cody-Waite multiple k of 2 pi outgrew its 212-bit 2 pi and was clamped):
// (3, 1e300) gave -pi for -0.268, (-123456789012345, 1e20) -pi for -2.546; products past
// double's range gave NaN; the law below failed at theta = 4e118.
//
//   import mpmath; mpmath.mp.prec = 4000
//   x = mpmath.mpf(p) * mpmath.mpf(theta); r = x - 2*mpmath.pi*mpmath.nint(x/(2*mpmath.pi))
TEST(ReducedAngleTest, ExactBeyondTwoToTheHundred) {
  struct Case {
    int64_t p;
    double theta, expected;
  };
  const Case cases[] = {
    {INT64_MAX, 0x1.0000000000000p+40, 0x1.0f4724ffad779p-1},
    {INT64_MAX, 0x1.0000000000001p+37, 0x1.46b0479f01d90p+1},
    {INT64_MAX, 0x1.fffffffffffffp+36, -0x1.91735dabf1c2dp-1},
    {int64_t{3}, 0x1.7e43c8800759cp+996, -0x1.12dfe054a4296p-2},
    {INT64_MAX, 0x1.7e43c8800759cp+996, 0x1.02e2ae4d40422p+1},
    {INT64_MIN, 0x1.fffffffffffffp+1023, -0x1.b98713f0ffbeep+0},
    {INT64_MAX, -0x1.fffffffffffffp+1023, 0x1.6973267686dd7p+0},
    {int64_t{-123456789012345}, 0x1.5af1d78b58c40p+66, -0x1.45e168637f7b3p+1},
    {int64_t{1}, 0x1.0000000000000p+200, -0x1.523368f8e348fp+1},
    {int64_t{1}, 0x1.93e5939a08ceap+99, 0x1.90edee187c331p+1},
    {int64_t{4611686018427400249}, 0x1.6666666666666p+69, 0x1.7b6c6e38ec9a1p+1},
    {int64_t{1000003}, 0x1.fe185ca57c517p+78, 0x1.d88e3e9f210b1p-1},
  };
  for (const Case& c : cases) {
    const double r = ReducedAngle(c.p, c.theta);
    EXPECT_LE(CircleDistance(r, c.expected), kAngleTol)
        << "p=" << c.p << " theta=" << c.theta << " got " << r << " want " << c.expected;
    EXPECT_LE(std::fabs(r), kPi);
  }
}

// Negative positions with products between 2^79 and 2^100 (a small |p| times a frequency
// of 2^46 or more): the two's-complement halves of p cancelled and the angle came back as
// +-pi. p theta = -((-p) theta), so ReducedAngle(-p, theta) is -ReducedAngle(p, theta)
// (bit for bit: every step is sign-symmetric), and both match the oracle on |p| within
// the contract.
TEST(ReducedAngleTest, NegativePositionsBelowTwoToTheHundred) {
  std::mt19937_64 rng(79);
  std::uniform_real_distribution<double> unit(0.5, 1.0);
  for (int64_t p : {int64_t{1}, int64_t{3}, int64_t{1000003}, int64_t{2147483647},
                    int64_t{4294967297}}) {
    for (int trial = 0; trial < 200; ++trial) {
      // |p theta| in (2^79, 2^100): theta = u 2^e with e chosen for that band.
      const int lp = static_cast<int>(std::floor(std::log2(static_cast<double>(p))));
      const int e = 80 + static_cast<int>(rng() % 19) - lp;
      const double theta = std::ldexp(unit(rng), e) * (trial % 2 ? -1.0 : 1.0);
      const double pos = ReducedAngle(p, theta), neg = ReducedAngle(-p, theta);
      ASSERT_LE(CircleDistance(pos, OracleAngle(p, theta)), kAngleTol)
          << "p=" << p << " theta=" << theta;
      if (std::fabs(pos) < kPi) {
        ASSERT_EQ(neg, -pos) << "p=" << -p << " theta=" << theta;
      } else {
        ASSERT_LE(CircleDistance(neg, -pos), kAngleTol);
      }
    }
  }
  EXPECT_LE(CircleDistance(ReducedAngle(-1, 6.955926452205024e23), 1.244177442575278), 1e-15);
}

// Relations the exact product obeys, over random inputs spanning every exponent a finite
// theta can have: (2p) theta == p (2 theta) exactly, and the homomorphism
// angle(p) + angle(q) == angle(p + q) mod 2 pi. Each angle is within kAngleTol of the
// exact one, so the first holds to 2 kAngleTol and the second to 3 kAngleTol plus the
// wrap's error (std::remainder by fl(2 pi), 2.4e-16 off 2 pi): 4 kAngleTol for both.
TEST(ReducedAngleTest, LargeProductsObeyTheGroupLaw) {
  std::mt19937_64 rng(99);
  std::uniform_real_distribution<double> unit(0.5, 1.0);
  std::uniform_int_distribution<int> exponent(-40, 960);
  for (int trial = 0; trial < 3000; ++trial) {
    const double theta = (trial % 2 ? -1.0 : 1.0) * std::ldexp(unit(rng), exponent(rng));
    const int64_t p = static_cast<int64_t>(rng() >> 2) - (int64_t{1} << 61);  // |2p| < 2^63
    const int64_t q = static_cast<int64_t>(rng() >> 2) - (int64_t{1} << 61);
    ASSERT_LE(CircleDistance(ReducedAngle(2 * p, theta), ReducedAngle(p, 2 * theta)),
              4 * kAngleTol)
        << "p=" << p << " theta=" << theta;
    const double sum = std::remainder(ReducedAngle(p, theta) + ReducedAngle(q, theta), 2 * kPi);
    ASSERT_LE(CircleDistance(sum, ReducedAngle(p + q, theta)), 4 * kAngleTol)
        << "p=" << p << " q=" << q << " theta=" << theta;
  }
}

TEST(ReducedAngleTest, SinCosMatchesAngle) {
  const SinCos sc = SinCosOfMultiple(int64_t{1} << 40, 0.01);
  const double a = OracleAngle(int64_t{1} << 40, 0.01);
  EXPECT_NEAR(sc.sin, std::sin(a), 1e-15);
  EXPECT_NEAR(sc.cos, std::cos(a), 1e-15);
}

TEST(CyclicAngleTest, PeriodicAndExact) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    const int64_t n = 1 + static_cast<int64_t>(rng() % 1000);
    const int64_t k = static_cast<int64_t>(rng() % 50) - 25;
    const int64_t p = static_cast<int64_t>(rng() >> 2) - (int64_t{1} << 61);
    const double a = CyclicAngle(p, k, n);
    // Bit-identical under a shift by n: the residue is exact integer arithmetic.
    EXPECT_EQ(a, CyclicAngle(p + n, k, n));
    EXPECT_EQ(a, CyclicAngle(p - 3 * n, k, n));
    EXPECT_LE(std::fabs(a), kPi);
    // Against the direct formula on the small residue (one or two roundings).
    const double m = static_cast<double>(FloorMod(FloorMod(p, n) * FloorMod(k, n), n));
    EXPECT_LE(CircleDistance(a, kTwoPi * m / static_cast<double>(n)), 1e-15);
  }
  EXPECT_TRUE(std::isnan(CyclicAngle(1, 1, 0)));
}

TEST(FloorModTest, Negative) {
  EXPECT_EQ(FloorMod(-1, 5), 4);
  EXPECT_EQ(FloorMod(-10, 5), 0);
  EXPECT_EQ(FloorMod(INT64_MIN, 7), ((INT64_MIN % 7) + 7) % 7);
  EXPECT_EQ(FloorMod(12, 5), 2);
}

}  // namespace
}  // namespace group
}  // namespace gpe
