#include "group/unipotent.h"

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include <Eigen/Dense>
#include "gtest/gtest.h"
#include "group/test_util.h"

namespace gpe {
namespace group {
namespace {

using testing::MaxAbsDiff;
using testing::RandomMatrix;
using testing::RandomVector;

// A translation generator in homogeneous coordinates: [[0, u], [0, 0]].
Eigen::MatrixXd Translation(const Eigen::VectorXd& u) {
  const Eigen::Index d = u.size();
  Eigen::MatrixXd a = Eigen::MatrixXd::Zero(d + 1, d + 1);
  a.topRightCorner(d, 1) = u;
  return a;
}

// A random rank-r nilpotent generator: A = X Y^T with Y^T X = 0, so A^2 = 0.
Eigen::MatrixXd RandomSquareZero(int64_t d, std::mt19937_64& rng) {
  const Eigen::MatrixXd x = RandomMatrix(d, 1, rng);
  Eigen::MatrixXd y = RandomMatrix(d, 1, rng);
  y -= x * (x.col(0).dot(y.col(0)) / x.col(0).squaredNorm());
  return x * y.transpose();
}

TEST(UnipotentTest, GroupLawsAndApply) {
  std::mt19937_64 rng(31);
  const int64_t d = 6;
  const UnipotentRepresentation rho = *UnipotentRepresentation::Create(RandomSquareZero(d, rng), 0.01);
  const Eigen::MatrixXd id = Eigen::MatrixXd::Identity(d, d);
  for (int trial = 0; trial < 100; ++trial) {
    const int64_t p = static_cast<int64_t>(rng() % 2000001) - 1000000;
    const int64_t q = static_cast<int64_t>(rng() % 2000001) - 1000000;
    // (I + pA)(I + qA) = I + (p + q)A + pq A^2; A^2 is ~1e-16 |A|^2 after the
    // projection, times |p q omega^2| <= 1e8, and entries reach ~1e4: 1e-7 absolute
    // is ~1e-11 relative to the entries.
    EXPECT_LE(MaxAbsDiff(rho.Matrix(p + q), rho.Matrix(p) * rho.Matrix(q)), 1e-7);
    EXPECT_LE(MaxAbsDiff(rho.Matrix(-p) * rho.Matrix(p), id), 1e-7);
  }
  const int64_t n = 5, stride = 8;
  const std::vector<int64_t> pos = {-3, 0, 7, 100000, -(int64_t{1} << 40)};
  const std::vector<double> x = RandomVector(n * stride, rng);
  std::vector<double> y(n * stride), z = x;
  ASSERT_TRUE(rho.Apply<double>(pos, x.data(), stride, y.data(), stride).ok());
  ASSERT_TRUE(rho.Apply<double>(pos, z.data(), stride, z.data(), stride).ok());
  for (int64_t j = 0; j < n; ++j) {
    const Eigen::VectorXd want =
        rho.Matrix(pos[j]) * Eigen::Map<const Eigen::VectorXd>(x.data() + j * stride, d);
    for (int64_t i = 0; i < d; ++i) {
      EXPECT_NEAR(y[j * stride + i], want(i), 1e-12 * std::fmax(1.0, std::fabs(want(i))));
      EXPECT_EQ(z[j * stride + i], y[j * stride + i]);
    }
  }
}

TEST(UnipotentTest, HomogeneousLiftTranslates) {
  const Eigen::VectorXd u = (Eigen::VectorXd(3) << 1.0, -2.0, 0.5).finished();
  const UnipotentRepresentation rho = *UnipotentRepresentation::Create(Translation(u), 0.25);
  const Eigen::VectorXd x = (Eigen::VectorXd(3) << 3.0, 4.0, 5.0).finished();
  const Eigen::VectorXd lifted = HomogeneousLift(x);
  ASSERT_EQ(lifted.size(), 4);
  EXPECT_EQ(lifted(3), 1.0);
  const Eigen::VectorXd moved = rho.Matrix(8) * lifted;
  // 8 * 0.25 * u is exact in binary.
  EXPECT_EQ(moved.head(3), x + 2.0 * u);
  EXPECT_EQ(moved(3), 1.0);
}

TEST(UnipotentTest, PathProductCollapsesWhenProductsVanish) {
  std::mt19937_64 rng(32);
  const int64_t d = 4;
  for (int trial = 0; trial < 50; ++trial) {
    // Translations: A_l A_m = 0 for all l, m.
    std::vector<UnipotentStep> path;
    Eigen::MatrixXd sum = Eigen::MatrixXd::Identity(d + 1, d + 1);
    const int steps = 1 + static_cast<int>(rng() % 8);
    for (int l = 0; l < steps; ++l) {
      const double t = RandomVector(1, rng)[0];
      path.push_back({Translation(RandomMatrix(d, 1, rng).col(0)), t});
      sum += t * path.back().generator;
    }
    const Eigen::MatrixXd prod = *UnipotentPathProduct(path);
    // Each step adds t_l A_l and a product term that is exactly zero here.
    EXPECT_LE(MaxAbsDiff(prod, sum), 1e-14 * steps);
    EXPECT_LE(MaxAbsDiff(prod * *UnipotentPathInverse(path),
                         Eigen::MatrixXd::Identity(d + 1, d + 1)),
              1e-13);
  }
}

TEST(UnipotentTest, PathProductKeepsOrderWhenProductsDoNotVanish) {
  // A1 = E_01, A2 = E_12: both square to zero but A1 A2 = E_02 != 0.
  Eigen::MatrixXd a1 = Eigen::MatrixXd::Zero(3, 3), a2 = Eigen::MatrixXd::Zero(3, 3);
  a1(0, 1) = 1.0;
  a2(1, 2) = 1.0;
  const std::vector<UnipotentStep> path = {{a1, 2.0}, {a2, 3.0}};
  Eigen::MatrixXd want = Eigen::MatrixXd::Identity(3, 3) + 2.0 * a1 + 3.0 * a2;
  want(0, 2) = 6.0;  // t1 t2 A1 A2
  EXPECT_EQ(*UnipotentPathProduct(path), want);
  const std::vector<UnipotentStep> reversed = {{a2, 3.0}, {a1, 2.0}};
  EXPECT_EQ(*UnipotentPathProduct(reversed), Eigen::MatrixXd::Identity(3, 3) + 2.0 * a1 + 3.0 * a2);
  EXPECT_EQ(*UnipotentPathProduct(path) * *UnipotentPathInverse(path), Eigen::MatrixXd::Identity(3, 3));
  EXPECT_EQ(*UnipotentPathInverse(path) * *UnipotentPathProduct(path), Eigen::MatrixXd::Identity(3, 3));
}

TEST(UnipotentTest, BadInput) {
  EXPECT_FALSE(UnipotentRepresentation::Create(Eigen::MatrixXd::Identity(3, 3), 1.0).ok());
  Eigen::MatrixXd rot = Eigen::MatrixXd::Zero(2, 2);
  rot(0, 1) = -1.0;
  rot(1, 0) = 1.0;  // skew, not nilpotent: rot^2 = -I
  EXPECT_FALSE(UnipotentRepresentation::Create(rot, 1.0).ok());
  // The same rotation scaled to 1e-6 is no more nilpotent (A^2 = -1e-12 I, relative 1):
  // it passed an absolute 1e-12, and omega = 1e6 broke rho(1) rho(1) = rho(2) by -I.
  EXPECT_FALSE(UnipotentRepresentation::Create(1e-6 * rot, 1e6).ok());
  EXPECT_FALSE(ValidateSquareZero(1e-6 * rot).ok());
  Eigen::MatrixXd tiny = Eigen::MatrixXd::Zero(2, 2);
  tiny(0, 1) = 1e-6;  // nilpotent at any scale
  EXPECT_TRUE(ValidateSquareZero(tiny).ok());
  EXPECT_TRUE(ValidateSquareZero(Eigen::MatrixXd::Zero(2, 2)).ok());
  EXPECT_FALSE(UnipotentRepresentation::Create(Eigen::MatrixXd::Zero(2, 3), 1.0).ok());
  EXPECT_FALSE(UnipotentRepresentation::Create(Eigen::MatrixXd::Zero(2, 2), NAN).ok());
  Eigen::MatrixXd a = Eigen::MatrixXd::Zero(3, 3);
  a(0, 2) = 1.0;
  Eigen::MatrixXd b = Eigen::MatrixXd::Zero(4, 4);
  b(0, 3) = 1.0;
  EXPECT_FALSE(UnipotentPathProduct(std::vector<UnipotentStep>{{a, 1.0}, {b, 1.0}}).ok());
  EXPECT_FALSE(UnipotentPathProduct(std::vector<UnipotentStep>{{a, 1.0}, {rot, 1.0}}).ok());
  EXPECT_FALSE(UnipotentPathProduct(std::vector<UnipotentStep>{{a, INFINITY}}).ok());
  EXPECT_FALSE(UnipotentPathInverse(std::vector<UnipotentStep>{}).ok());
  const UnipotentRepresentation rho = *UnipotentRepresentation::Create(a, 1.0);
  std::vector<double> buf(6);
  const std::vector<int64_t> pos = {1, 2};
  EXPECT_FALSE(rho.Apply<double>(pos, buf.data(), 2, buf.data(), 2).ok());
}

}  // namespace
}  // namespace group
}  // namespace gpe
