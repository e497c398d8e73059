#include "group/so_rank2.h"

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include <Eigen/Dense>
#include <unsupported/Eigen/MatrixFunctions>
#include "gtest/gtest.h"
#include "group/test_util.h"

namespace gpe {
namespace group {
namespace {

using testing::MaxAbsDiff;
using testing::OrthogonalityError;
using testing::RandomPosition;
using testing::RandomVector;
using testing::RelativityError;

TEST(Rank2RotationTest, ClosedFormEqualsGeneralExp) {
  std::mt19937_64 rng(11);
  for (int trial = 0; trial < 30; ++trial) {
    const int64_t d = 2 + static_cast<int64_t>(rng() % 9);
    const Rank2Rotation r = *Rank2Rotation::Create(RandomVector(d, rng), RandomVector(d, rng), 0.2);
    for (int64_t p : {-9, -1, 0, 1, 3, 20}) {
      const Eigen::MatrixXd e = (static_cast<double>(p) * r.Generator()).exp();
      // |p omega L| <= ~60: Pade scaling-and-squaring loses ~2^6 eps relative.
      EXPECT_LE(MaxAbsDiff(r.Matrix(p), e), 1e-12) << "d=" << d << " p=" << p;
    }
  }
}

TEST(Rank2RotationTest, GroupLawsAtLargePositions) {
  std::mt19937_64 rng(12);
  const Rank2Rotation r = *Rank2Rotation::Create(RandomVector(6, rng), RandomVector(6, rng), 0.37);
  for (int trial = 0; trial < 100; ++trial) {
    const int64_t p = RandomPosition(52, rng), q = RandomPosition(52, rng);
    const Eigen::MatrixXd mp = r.Matrix(p);
    // Entries are sums of ~4 terms each carrying ~1 ulp: 1e-14 bounds them.
    EXPECT_LE(MaxAbsDiff(r.Matrix(p + q), mp * r.Matrix(q)), 1e-14);
    EXPECT_LE(MaxAbsDiff(r.Matrix(-p), mp.transpose()), 1e-14);
    EXPECT_LE(OrthogonalityError(mp), 1e-14);
  }
}

TEST(Rank2RotationTest, ApplyMatchesMatrixAndRelativity) {
  std::mt19937_64 rng(13);
  const int64_t d = 9, n = 6, stride = 11;
  const Rank2Rotation r = *Rank2Rotation::Create(RandomVector(d, rng), RandomVector(d, rng), -0.8);
  std::vector<int64_t> pos(n);
  for (int64_t& p : pos) p = RandomPosition(45, rng);
  const std::vector<double> x = RandomVector(n * stride, rng);
  std::vector<double> y(n * stride), z = x;
  std::vector<float> xf(x.begin(), x.end()), yf(n * stride);
  ASSERT_TRUE(r.Apply<double>(pos, x.data(), stride, y.data(), stride).ok());
  ASSERT_TRUE(r.Apply<double>(pos, z.data(), stride, z.data(), stride).ok());
  ASSERT_TRUE(r.Apply<float>(pos, xf.data(), stride, yf.data(), stride).ok());
  for (int64_t j = 0; j < n; ++j) {
    const Eigen::VectorXd want =
        r.Matrix(pos[j]) * Eigen::Map<const Eigen::VectorXd>(x.data() + j * stride, d);
    for (int64_t i = 0; i < d; ++i) {
      EXPECT_NEAR(y[j * stride + i], want(i), 1e-13);
      EXPECT_EQ(z[j * stride + i], y[j * stride + i]);
      // float32 in and out, double inside: input and output roundings, |x| ~ 3.
      EXPECT_NEAR(yf[j * stride + i], want(i), 3e-6);
    }
  }
  for (int trial = 0; trial < 100; ++trial) {
    const int64_t i = RandomPosition(50, rng), j = RandomPosition(50, rng);
    const std::vector<double> q = RandomVector(d, rng), k = RandomVector(d, rng);
    EXPECT_NEAR(RelativityError(r, d, i, j, q, k), 0.0, 1e-13);
  }
}

TEST(Rank2RotationTest, DegenerateGeneratorsAreIdentity) {
  const std::vector<double> a = {1.0, -2.0, 0.5};
  const std::vector<double> twice_a = {2.0, -4.0, 1.0};
  const Rank2Rotation parallel = *Rank2Rotation::Create(a, twice_a, 1.3);
  const Rank2Rotation zero = *Rank2Rotation::Create({0, 0, 0}, a, 1.3);
  EXPECT_TRUE(parallel.degenerate());
  EXPECT_TRUE(zero.degenerate());
  const int64_t p = int64_t{1} << 40;
  EXPECT_EQ(parallel.Matrix(p), Eigen::MatrixXd::Identity(3, 3));
  std::vector<double> x = {0.3, 0.1, -0.7}, y(3);
  ASSERT_TRUE(parallel.Apply<double>({&p, 1}, x.data(), 3, y.data(), 3).ok());
  EXPECT_EQ(x, y);
  // Nearly parallel but well above rounding: still a proper rotation.
  const Rank2Rotation near = *Rank2Rotation::Create(a, {2.0, -4.0, 1.0 + 1e-9}, 1.3);
  EXPECT_FALSE(near.degenerate());
  EXPECT_LE(OrthogonalityError(near.Matrix(p)), 1e-14);
}

// Scalar loss l = sum_j g_j . G(p_j) x_j for finite differences.
double Loss(const std::vector<double>& a, const std::vector<double>& b, double omega,
            const std::vector<int64_t>& pos, const std::vector<double>& x,
            const std::vector<double>& g) {
  const int64_t d = static_cast<int64_t>(a.size());
  const Rank2Rotation r = *Rank2Rotation::Create(a, b, omega);
  std::vector<double> y(x.size());
  EXPECT_TRUE(r.Apply<double>(pos, x.data(), d, y.data(), d).ok());
  double l = 0;
  for (size_t i = 0; i < y.size(); ++i) l += g[i] * y[i];
  return l;
}

void CheckGradients(const std::vector<double>& a, const std::vector<double>& b, double omega,
                    const std::vector<int64_t>& pos, std::mt19937_64& rng) {
  const int64_t d = static_cast<int64_t>(a.size()), n = static_cast<int64_t>(pos.size());
  const std::vector<double> x = RandomVector(n * d, rng), g = RandomVector(n * d, rng);
  const Rank2Rotation r = *Rank2Rotation::Create(a, b, omega);
  Rank2Rotation::Gradients grads;
  std::vector<double> gx(n * d);
  ASSERT_TRUE(r.Backward<double>(pos, x.data(), d, g.data(), d, gx.data(), d, &grads).ok());
  // Central differences: truncation ~h^2 |l'''| ~1e-10, cancellation ~eps |l| / h ~1e-9
  // for |l| ~ 10, so 1e-6 relative to max(1, |grad|) cannot pass a wrong formula.
  const double h = 1e-5;
  auto tol = [](double v) { return 1e-6 * std::fmax(1.0, std::fabs(v)); };
  for (int64_t i = 0; i < d; ++i) {
    std::vector<double> ap = a, am = a, bp = b, bm = b;
    ap[i] += h;
    am[i] -= h;
    bp[i] += h;
    bm[i] -= h;
    const double fa = (Loss(ap, b, omega, pos, x, g) - Loss(am, b, omega, pos, x, g)) / (2 * h);
    const double fb = (Loss(a, bp, omega, pos, x, g) - Loss(a, bm, omega, pos, x, g)) / (2 * h);
    EXPECT_NEAR(grads.a[i], fa, tol(fa)) << "a[" << i << "]";
    EXPECT_NEAR(grads.b[i], fb, tol(fb)) << "b[" << i << "]";
  }
  const double hw = 1e-7 * std::fmax(1.0, std::fabs(omega));
  const double fw =
      (Loss(a, b, omega + hw, pos, x, g) - Loss(a, b, omega - hw, pos, x, g)) / (2 * hw);
  EXPECT_NEAR(grads.omega, fw, tol(fw));
  // dl/dx = G(p)^T g, exactly linear.
  for (int64_t j = 0; j < n; ++j) {
    const Eigen::VectorXd want =
        r.Matrix(pos[j]).transpose() * Eigen::Map<const Eigen::VectorXd>(g.data() + j * d, d);
    for (int64_t i = 0; i < d; ++i) EXPECT_NEAR(gx[j * d + i], want(i), 1e-13);
  }
}

TEST(Rank2RotationTest, BackwardMatchesFiniteDifferences) {
  std::mt19937_64 rng(14);
  for (int trial = 0; trial < 10; ++trial) {
    const int64_t d = 2 + static_cast<int64_t>(rng() % 6);
    CheckGradients(RandomVector(d, rng), RandomVector(d, rng), 0.3, {-7, 0, 1, 4, 11}, rng);
  }
}

TEST(Rank2RotationTest, BackwardSmallAngleSeriesBranch) {
  std::mt19937_64 rng(15);
  // |p omega s0| < 1e-3 for every position: only the series branch runs.
  CheckGradients(RandomVector(5, rng), RandomVector(5, rng), 2e-5, {-3, 1, 2, 5}, rng);
}

TEST(Rank2RotationTest, BackwardAtParallelGenerator) {
  std::mt19937_64 rng(16);
  // L = 0 here, yet dl/da and dl/db are not zero; the q = 0 limits give them.
  const std::vector<double> a = {0.5, -1.0, 2.0, 0.25};
  const std::vector<double> b = {-1.0, 2.0, -4.0, -0.5};
  CheckGradients(a, b, 0.7, {-2, 1, 3}, rng);
}

// Nearly parallel a and b (angle 1e-8 and ~5e-7) at a turn of about a radian: the
// gradients, up to 5e6 here, against mpmath (60 digits: expm of the dense generator and
// numerical derivatives, computed once for this test). The frame form keeps them to
// ~1e-9 relative to the largest; the expanded form (nb a - c b, na nb - c^2) had
// cancellations of eps / angle^2, 4% off at angle 1e-8.
TEST(Rank2RotationTest, BackwardOfNearlyParallelGeneratorsIsAccurate) {
  struct Case {
    std::vector<double> a, b, x, g;
    double omega;
    int64_t p;
    std::vector<double> da, db;
    double domega;
  };
  const std::vector<Case> cases = {
      {{1.0, 0.0, 0.0}, {1.0, 1e-8, 0.0}, {0.3, -0.7, 0.5}, {0.2, 0.4, -0.6}, 1.0, 100000000,
       {0.04464501713202091, -4464501.7132020909, 4940069.6834536674},
       {0.0, 4464501.7132020909, -4940069.4615542352}, 0.04464501713202091},
      {{0.6, -0.3, 0.8, 0.1}, {0.6 + 3e-7, -0.3 - 2e-7, 0.8 + 1e-7, 0.1 + 4e-7},
       {0.1, 0.9, -0.4, 0.3}, {-0.5, 0.2, 0.7, 0.1}, 0.5, 1000000,
       {95129.276917852154, -152653.56673219638, -119533.09327177758, -72471.796804165071},
       {-95129.264248433354, 152653.58806397796, 119533.06818020616, 72471.804240884614},
       -0.036254936751665671},
  };
  for (const Case& c : cases) {
    auto r = Rank2Rotation::Create(c.a, c.b, c.omega);
    ASSERT_TRUE(r.ok());
    Rank2Rotation::Gradients grads;
    const std::vector<int64_t> ps = {c.p};
    ASSERT_TRUE(r->Backward<double>(ps, c.x.data(), 0, c.g.data(), 0, nullptr, 0, &grads).ok());
    double scale = 0;
    for (double v : c.da) scale = std::max(scale, std::fabs(v));
    for (size_t i = 0; i < c.a.size(); ++i) {
      EXPECT_NEAR(grads.a[i], c.da[i], 1e-9 * scale) << "da " << i;
      EXPECT_NEAR(grads.b[i], c.db[i], 1e-9 * scale) << "db " << i;
    }
    EXPECT_NEAR(grads.omega, c.domega, 1e-9 * std::fabs(c.domega) + 1e-15);
  }
  // Entries near 1e80 with omega 1e-160 (th = 1): s0^2 = 1e160 is fine, q^2 in the
  // expanded form overflowed and every gradient came out NaN; all finite now.
  auto big = Rank2Rotation::Create({1e80, 0.0}, {0.0, 1e80}, 1e-160);
  ASSERT_TRUE(big.ok());
  Rank2Rotation::Gradients grads;
  const std::vector<double> x = {0.3, 0.4}, g = {0.5, -0.2};
  const std::vector<int64_t> one = {1};
  ASSERT_TRUE(big->Backward<double>(one, x.data(), 0, g.data(), 0, nullptr, 0, &grads).ok());
  for (double v : grads.a) EXPECT_TRUE(std::isfinite(v));
  for (double v : grads.b) EXPECT_TRUE(std::isfinite(v));
  EXPECT_TRUE(std::isfinite(grads.omega));
}

TEST(Rank2RotationTest, BadInput) {
  EXPECT_FALSE(Rank2Rotation::Create({1, 2, 3}, {1, 2}, 1.0).ok());
  EXPECT_FALSE(Rank2Rotation::Create({1}, {2}, 1.0).ok());
  EXPECT_FALSE(Rank2Rotation::Create({1, 2}, {2, 1}, INFINITY).ok());
  EXPECT_FALSE(Rank2Rotation::Create({1, NAN}, {2, 1}, 1.0).ok());
  // Finite inputs whose angle per position overflows: omega |a ^ b| = 2e308, and |a|^2
  // beyond double's range. The largest omega that fits is accepted.
  EXPECT_FALSE(Rank2Rotation::Create({2, 0}, {0, 1}, 1e308).ok());
  EXPECT_FALSE(Rank2Rotation::Create({1e200, 0}, {0, 1}, 1.0).ok());
  EXPECT_TRUE(Rank2Rotation::Create({1, 0}, {0, 1}, 1e308).ok());
  const Rank2Rotation r = *Rank2Rotation::Create({1, 0}, {0, 1}, 1.0);
  std::vector<double> buf(8);
  const std::vector<int64_t> pos = {1, 2};
  EXPECT_FALSE(r.Apply<double>(pos, buf.data(), 1, buf.data(), 1).ok());
  EXPECT_FALSE(r.Apply<double>(pos, buf.data(), 2, buf.data() + 1, 2).ok());
  Rank2Rotation::Gradients grads;
  EXPECT_FALSE(r.Backward<double>(pos, buf.data(), 2, buf.data(), 2, nullptr, 0, nullptr).ok());
  EXPECT_FALSE(r.Backward<double>(pos, nullptr, 2, buf.data(), 2, nullptr, 0, &grads).ok());
  EXPECT_TRUE(r.Backward<double>(pos, buf.data(), 2, buf.data(), 2, nullptr, 0, &grads).ok());
}

}  // namespace
}  // namespace group
}  // namespace gpe
