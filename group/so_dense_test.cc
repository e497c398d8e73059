#include "group/so_dense.h"

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
using testing::RandomMatrix;
using testing::RandomPosition;
using testing::RandomSkew;
using testing::RandomVector;
using testing::RelativityError;

constexpr double kEps = 2.220446049250313e-16;

Eigen::MatrixXd RandomRotation(int64_t d, std::mt19937_64& rng) {
  Eigen::HouseholderQR<Eigen::MatrixXd> qr(RandomMatrix(d, d, rng));
  Eigen::MatrixXd q = qr.householderQ();
  if (q.determinant() < 0) q.col(0) *= -1.0;
  return q;
}

TEST(SkewExpTest, OrthogonalAndMatchesSchurRoute) {
  std::mt19937_64 rng(21);
  for (int trial = 0; trial < 20; ++trial) {
    const int64_t d = 1 + static_cast<int64_t>(rng() % 9);
    const Eigen::MatrixXd s = RandomSkew(d, 1.0, rng);
    const Eigen::MatrixXd w = *SkewExp(s);
    // |S| ~ 1-3: Pade exp is accurate to a few eps per entry, times d terms.
    EXPECT_LE(OrthogonalityError(w), 1e-14);
    EXPECT_NEAR(w.determinant(), 1.0, 1e-13);
    EXPECT_LE(MaxAbsDiff(w, SchurRotation::Create(s)->Matrix(1)), 1e-13);
  }
}

TEST(SchurRotationTest, ReconstructsGeneratorAndGroupLaws) {
  std::mt19937_64 rng(22);
  for (int trial = 0; trial < 10; ++trial) {
    const int64_t d = 2 + static_cast<int64_t>(rng() % 9);  // odd d: one fixed axis
    const Eigen::MatrixXd s = RandomSkew(d, 0.5, rng);
    const SchurRotation r = *SchurRotation::Create(s);
    EXPECT_EQ(r.num_planes(), d / 2);
    // Schur's backward error is ~d eps |S|.
    EXPECT_LE(MaxAbsDiff(r.Generator(), s), 1e-14 * d);
    EXPECT_LE(OrthogonalityError(r.basis()), 1e-14);
    for (int64_t p : {-5, 2, 9}) {
      EXPECT_LE(MaxAbsDiff(r.Matrix(p), *SkewExp(static_cast<double>(p) * s)), 1e-13);
    }
    for (int k = 0; k < 20; ++k) {
      const int64_t p = RandomPosition(61, rng), q = RandomPosition(61, rng);
      const Eigen::MatrixXd mp = r.Matrix(p);
      // Q R Q^T with Q orthogonal to ~d eps: every identity holds to ~d eps.
      EXPECT_LE(OrthogonalityError(mp), 1e-14 * d);
      EXPECT_LE(MaxAbsDiff(r.Matrix(-p), mp.transpose()), 1e-14 * d);
      EXPECT_LE(MaxAbsDiff(r.Matrix(p + q), mp * r.Matrix(q)), 2e-14 * d);
    }
  }
}

TEST(SchurRotationTest, ApplyMatchesMatrixAndRelativity) {
  std::mt19937_64 rng(23);
  const int64_t d = 7, n = 70, stride = 9;  // n > 64 crosses the internal block size
  const SchurRotation r = *SchurRotation::Create(RandomSkew(d, 1.0, rng));
  std::vector<int64_t> pos(n);
  for (int64_t& p : pos) p = RandomPosition(40, rng);
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
      EXPECT_NEAR(yf[j * stride + i], want(i), 3e-6);  // float32 in/out roundings
    }
  }
  for (int trial = 0; trial < 50; ++trial) {
    const int64_t i = RandomPosition(50, rng), j = RandomPosition(50, rng);
    const std::vector<double> q = RandomVector(d, rng), k = RandomVector(d, rng);
    EXPECT_NEAR(RelativityError(r, d, i, j, q, k), 0.0, 1e-13);
  }
}

TEST(OrthogonalLogTest, RoundTrips) {
  std::mt19937_64 rng(24);
  for (int trial = 0; trial < 20; ++trial) {
    const int64_t d = 2 + static_cast<int64_t>(rng() % 7);
    // Small S: every rotation angle is well inside (-pi, pi), so log(exp(S)) = S.
    const Eigen::MatrixXd s = RandomSkew(d, 0.3, rng);
    const Eigen::MatrixXd l = *OrthogonalLog(*SkewExp(s));
    EXPECT_LE(MaxAbsDiff(l, s), 1e-13) << d;
    EXPECT_LE(MaxAbsDiff(l, -l.transpose()), 0.0);
    // And exp(log(W)) = W for a random rotation (angles anywhere in (-pi, pi)).
    const Eigen::MatrixXd w = RandomRotation(d, rng);
    EXPECT_LE(MaxAbsDiff(*SkewExp(*OrthogonalLog(w)), w), 1e-12) << d;
  }
}

TEST(OrthogonalLogTest, EigenvalueMinusOneIsAStatus) {
  Eigen::MatrixXd half_turn = Eigen::MatrixXd::Identity(3, 3);
  half_turn(0, 0) = half_turn(1, 1) = -1.0;
  EXPECT_EQ(OrthogonalLog(half_turn).status().code(), absl::StatusCode::kFailedPrecondition);
  Eigen::MatrixXd reflection = Eigen::MatrixXd::Identity(3, 3);
  reflection(2, 2) = -1.0;
  EXPECT_EQ(OrthogonalLog(reflection).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(OrthogonalLog(2.0 * Eigen::MatrixXd::Identity(3, 3)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(OrthogonalLog(Eigen::MatrixXd::Identity(2, 3)).ok());
  EXPECT_LE(MaxAbsDiff(*OrthogonalLog(Eigen::MatrixXd::Identity(4, 4)), Eigen::MatrixXd::Zero(4, 4)),
            0.0);
}

TEST(MatrixPowerTest, SquaringMatchesProductsAndDriftsFromSchurRoute) {
  std::mt19937_64 rng(25);
  const int64_t d = 16;
  const SchurRotation r = *SchurRotation::Create(RandomSkew(d, 1.0, rng));
  const Eigen::MatrixXd w = r.Matrix(1);
  Eigen::MatrixXd direct = Eigen::MatrixXd::Identity(d, d);
  for (int64_t p = 0; p <= 20; ++p) {
    // p products accumulate ~p d eps.
    EXPECT_LE(MaxAbsDiff(*MatrixPowerBySquaring(w, p), direct), 1e-13) << p;
    EXPECT_LE(MaxAbsDiff(*MatrixPowerBySquaring(w, -p), direct.transpose()), 1e-13) << p;
    direct = direct * w;
  }
  // Drift: squaring a rounded W log2 p times moves W^p away from the exact exp(p S)
  // roughly like p * eps (measured: 9e-7 at p = 2^31, d = 16), while the Schur route
  // stays orthogonal at any p. The bound p * d * eps leaves ~10x headroom.
  for (int64_t p : {int64_t{1} << 10, int64_t{1} << 20, int64_t{1} << 31, -(int64_t{1} << 31) + 7}) {
    const Eigen::MatrixXd squared = *MatrixPowerBySquaring(w, p);
    const Eigen::MatrixXd schur = r.Matrix(p);
    const double bound = std::fabs(static_cast<double>(p)) * d * kEps;
    EXPECT_LE(MaxAbsDiff(squared, schur), bound) << p;
    EXPECT_LE(OrthogonalityError(squared), bound) << p;
    EXPECT_LE(OrthogonalityError(schur), 1e-13) << p;
    // The drift is real: at 2^31 squaring is visibly non-orthogonal (measured 1.7e-6).
    if (p == int64_t{1} << 31) {
      EXPECT_GT(OrthogonalityError(squared), 1e-9);
    }
  }
}

TEST(MatrixPowerTest, BadInput) {
  const Eigen::MatrixXd w = Eigen::MatrixXd::Identity(3, 3);
  EXPECT_FALSE(MatrixPowerBySquaring(w, (int64_t{1} << 31) + 1).ok());
  EXPECT_FALSE(MatrixPowerBySquaring(w, INT64_MIN).ok());
  EXPECT_FALSE(MatrixPowerBySquaring(2.0 * w, -1).ok());  // not orthogonal
  EXPECT_TRUE(MatrixPowerBySquaring(2.0 * w, 3).ok());    // positive powers of any W
  EXPECT_FALSE(MatrixPowerBySquaring(Eigen::MatrixXd::Zero(2, 3), 2).ok());
  EXPECT_FALSE(AllPowers(w, -1).ok());
  EXPECT_EQ(AllPowers(Eigen::MatrixXd::Identity(512, 512), 1000).status().code(),
            absl::StatusCode::kResourceExhausted);
}

TEST(AllPowersTest, DoublingMatchesDirectProducts) {
  std::mt19937_64 rng(26);
  const int64_t d = 6;
  const Eigen::MatrixXd w = *SkewExp(RandomSkew(d, 1.0, rng));
  for (int64_t max_power : {0, 1, 2, 5, 37, 64}) {
    const std::vector<Eigen::MatrixXd> all = *AllPowers(w, max_power);
    ASSERT_EQ(static_cast<int64_t>(all.size()), max_power + 1);
    Eigen::MatrixXd direct = Eigen::MatrixXd::Identity(d, d);
    for (int64_t p = 0; p <= max_power; ++p) {
      // Both routes accumulate <= 64 products of orthogonal matrices: ~64 d eps.
      EXPECT_LE(MaxAbsDiff(all[p], direct), 1e-13) << p;
      direct = direct * w;
    }
  }
}

TEST(ExpFrechetTest, MatchesFiniteDifferences) {
  std::mt19937_64 rng(27);
  for (int trial = 0; trial < 10; ++trial) {
    const int64_t d = 1 + static_cast<int64_t>(rng() % 6);
    // General (non-skew) S too: the Frechet derivative is for any square matrix.
    const Eigen::MatrixXd s = trial % 2 ? RandomSkew(d, 1.0, rng) : RandomMatrix(d, d, rng);
    const Eigen::MatrixXd e = RandomMatrix(d, d, rng);
    const Eigen::MatrixXd l = *ExpFrechet(s, e);
    const double h = 1e-5;
    const Eigen::MatrixXd sp = s + h * e, sm = s - h * e;
    const Eigen::MatrixXd fd = (Eigen::MatrixXd(sp.exp()) - Eigen::MatrixXd(sm.exp())) / (2 * h);
    // Central differences: h^2 |exp'''| ~1e-9 for |S| ~ 3, plus eps/h ~2e-11.
    EXPECT_LE(MaxAbsDiff(l, fd), 1e-7 * std::fmax(1.0, l.cwiseAbs().maxCoeff())) << trial;
    // Linearity in E, including the rescaling inside.
    EXPECT_LE(MaxAbsDiff(*ExpFrechet(s, 1e6 * e), 1e6 * l), 1e-12 * 1e6 * l.cwiseAbs().maxCoeff());
    // The adjoint: <G, L(S, E)> = <ExpVjp(S, G), E>.
    const Eigen::MatrixXd g = RandomMatrix(d, d, rng);
    const double lhs = (g.array() * l.array()).sum();
    const double rhs = (ExpVjp(s, g)->array() * e.array()).sum();
    EXPECT_NEAR(lhs, rhs, 1e-12 * std::fmax(1.0, std::fabs(lhs)));
  }
  EXPECT_LE(MaxAbsDiff(*ExpFrechet(Eigen::MatrixXd::Zero(2, 2), Eigen::MatrixXd::Zero(2, 2)),
                       Eigen::MatrixXd::Zero(2, 2)),
            0.0);
  // A tiny E (1e-308): L is linear in E, so L(S, 1e-308 E) = 1e-308 L(S, E) to rounding;
  // the rescaling quotient max(|S|, 1) / |E| overflowed to inf before (inf, then NaN).
  std::mt19937_64 rng2(28);
  const Eigen::MatrixXd s = RandomSkew(3, 1.0, rng2), e = RandomMatrix(3, 3, rng2);
  const Eigen::MatrixXd l = *ExpFrechet(s, e);
  absl::StatusOr<Eigen::MatrixXd> tiny = ExpFrechet(s, 1e-308 * e);
  ASSERT_TRUE(tiny.ok());
  EXPECT_TRUE(tiny->allFinite());
  EXPECT_LE(MaxAbsDiff(*tiny / 1e-308, l), 1e-12 * l.cwiseAbs().maxCoeff());
}

TEST(DenseInputTest, NonSkewAndMismatchedSizes) {
  Eigen::MatrixXd s = Eigen::MatrixXd::Zero(3, 3);
  s(0, 1) = 1.0;  // not skew
  EXPECT_EQ(SkewExp(s).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(SchurRotation::Create(s).ok());
  EXPECT_FALSE(SkewExp(Eigen::MatrixXd::Zero(2, 3)).ok());
  Eigen::MatrixXd nan = Eigen::MatrixXd::Zero(2, 2);
  nan(0, 1) = NAN;
  EXPECT_FALSE(SkewExp(nan).ok());
  EXPECT_FALSE(ExpFrechet(Eigen::MatrixXd::Zero(2, 2), Eigen::MatrixXd::Zero(3, 3)).ok());
  EXPECT_FALSE(ExpVjp(Eigen::MatrixXd::Zero(2, 3), Eigen::MatrixXd::Zero(2, 3)).ok());
  const SchurRotation r = *SchurRotation::Create(Eigen::MatrixXd::Zero(3, 3));
  std::vector<double> buf(9);
  const std::vector<int64_t> pos = {1, 2};
  EXPECT_FALSE(r.Apply<double>(pos, buf.data(), 2, buf.data(), 2).ok());
  EXPECT_TRUE(r.Apply<double>(pos, buf.data(), 3, buf.data(), 3).ok());
}

}  // namespace
}  // namespace group
}  // namespace gpe
