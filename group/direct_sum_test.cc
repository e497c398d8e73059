#include "group/direct_sum.h"

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include <Eigen/Dense>
#include "gtest/gtest.h"
#include "group/cyclic.h"
#include "group/free_group.h"
#include "group/free_representation.h"
#include "group/product.h"
#include "group/so_dense.h"
#include "group/so_planes.h"
#include "group/test_util.h"

namespace gpe {
namespace group {
namespace {

using testing::MaxAbsDiff;
using testing::OrthogonalityError;
using testing::RandomPosition;
using testing::RandomSkew;
using testing::RandomVector;

using Grid = DirectSum<CommutingPlanes, CommutingPlanes>;

Grid MakeGrid() {
  // x-planes on the first 6 coordinates, y-planes (with 2 pass-through) on the next 6.
  return Grid(*CommutingPlanes::Create(6, 6, {1.0, 0.1, 0.01}, PlanePairing::kHalfSplit),
              *CommutingPlanes::Create(6, 4, {0.7, 0.07}, PlanePairing::kInterleaved));
}

TEST(DirectSumTest, GridIsBlockDiagonalHomomorphism) {
  const Grid rho = MakeGrid();
  const ProductGroup<Integers, Integers> grid{Integers(), Integers()};
  EXPECT_EQ(rho.dim(), 12);
  EXPECT_EQ(rho.offset(1), 6);
  std::mt19937_64 rng(51);
  for (int trial = 0; trial < 100; ++trial) {
    const Grid::Element g{RandomPosition(50, rng), RandomPosition(50, rng)};
    const Grid::Element h{RandomPosition(50, rng), RandomPosition(50, rng)};
    const Eigen::MatrixXd rg = *rho.Matrix(g);
    // Off-diagonal blocks are exactly zero.
    EXPECT_EQ(rg.topRightCorner(6, 6), Eigen::MatrixXd::Zero(6, 6));
    EXPECT_EQ(rg.bottomLeftCorner(6, 6), Eigen::MatrixXd::Zero(6, 6));
    EXPECT_EQ(rg.topLeftCorner(6, 6), rho.component<0>().Matrix(std::get<0>(g)));
    // Same tolerance as the component tests (2 terms per entry, ~1 ulp each).
    EXPECT_LE(MaxAbsDiff(*rho.Matrix(*grid.Compose(g, h)), rg * *rho.Matrix(h)), 4e-15);
    EXPECT_LE(MaxAbsDiff(*rho.Matrix(*grid.Inverse(g)), rg.transpose()), 4e-15);
    EXPECT_LE(OrthogonalityError(rg), 4e-15);
  }
}

TEST(DirectSumTest, GridApplyAndRelativity) {
  const Grid rho = MakeGrid();
  const ProductGroup<Integers, Integers> grid{Integers(), Integers()};
  std::mt19937_64 rng(52);
  const int64_t d = 12, n = 9, stride = 13;
  std::vector<Grid::Element> elems;
  for (int64_t j = 0; j < n; ++j) elems.emplace_back(RandomPosition(40, rng), RandomPosition(40, rng));
  const std::vector<double> x = RandomVector(n * stride, rng);
  std::vector<double> y(n * stride), z = x;
  ASSERT_TRUE(rho.Apply<double>(elems, x.data(), stride, y.data(), stride).ok());
  ASSERT_TRUE(rho.Apply<double>(elems, z.data(), stride, z.data(), stride).ok());
  for (int64_t j = 0; j < n; ++j) {
    const Eigen::VectorXd want =
        *rho.Matrix(elems[j]) * Eigen::Map<const Eigen::VectorXd>(x.data() + j * stride, d);
    for (int64_t i = 0; i < d; ++i) {
      EXPECT_NEAR(y[j * stride + i], want(i), 1e-14);
      EXPECT_EQ(z[j * stride + i], y[j * stride + i]);
    }
  }
  for (int trial = 0; trial < 100; ++trial) {
    const Grid::Element a{RandomPosition(40, rng), RandomPosition(40, rng)};
    const Grid::Element b{RandomPosition(40, rng), RandomPosition(40, rng)};
    const Grid::Element rel = *grid.Compose(*grid.Inverse(a), b);
    const std::vector<double> q = RandomVector(d, rng), k = RandomVector(d, rng);
    std::vector<double> qa(d), kb(d), krel(d);
    ASSERT_TRUE(rho.Apply<double>({&a, 1}, q.data(), d, qa.data(), d).ok());
    ASSERT_TRUE(rho.Apply<double>({&b, 1}, k.data(), d, kb.data(), d).ok());
    ASSERT_TRUE(rho.Apply<double>({&rel, 1}, k.data(), d, krel.data(), d).ok());
    double lhs = 0, rhs = 0;
    for (int64_t c = 0; c < d; ++c) {
      lhs += qa[c] * kb[c];
      rhs += q[c] * krel[c];
    }
    EXPECT_NEAR(lhs, rhs, 1e-13);
  }
}

TEST(DirectSumTest, PeriodicTimesTreeIsNonCommutative) {
  std::mt19937_64 rng(53);
  using Rep = DirectSum<CyclicPlanes, FreeGroupRepresentation>;
  const Rep rho(*CyclicPlanes::Create(4, 4, 12, {1, 5}, PlanePairing::kInterleaved),
                *FreeGroupRepresentation::CreateFromSkew({RandomSkew(5, 1.0, rng), RandomSkew(5, 1.0, rng)}));
  const ProductGroup<CyclicGroup, FreeGroup> g{*CyclicGroup::Create(12), *FreeGroup::Create(2)};
  const Rep::Element a{3, {1, -2}};
  const Rep::Element b{11, {2, 2}};
  const Rep::Element ab = *g.Compose(a, b);
  EXPECT_LE(MaxAbsDiff(*rho.Matrix(ab), *rho.Matrix(a) * *rho.Matrix(b)), 1e-13);
  EXPECT_GT(MaxAbsDiff(*rho.Matrix(ab), *rho.Matrix(*g.Compose(b, a))), 1e-3);
  // Component errors surface as statuses.
  EXPECT_FALSE(rho.Matrix(Rep::Element{1, {3}}).ok());
  std::vector<double> buf(9);
  const std::vector<Rep::Element> bad = {Rep::Element{1, {-3}}};
  EXPECT_FALSE(rho.Apply<double>(bad, buf.data(), 9, buf.data(), 9).ok());
  const std::vector<Rep::Element> good = {a, b};
  EXPECT_FALSE(rho.Apply<double>(good, buf.data(), 8, buf.data(), 8).ok());  // stride < dim
}

// A word the free group refuses, in the second element of a batch, leaves the whole
// output as it was: the cyclic component's columns [0, 4) of every row were written
// before the tree component refused its word.
TEST(DirectSumTest, RefusedElementWritesNothing) {
  std::mt19937_64 rng(54);
  using Rep = DirectSum<CyclicPlanes, FreeGroupRepresentation>;
  const Rep rho(*CyclicPlanes::Create(4, 4, 12, {1, 5}, PlanePairing::kInterleaved),
                *FreeGroupRepresentation::CreateFromSkew({RandomSkew(5, 1.0, rng)}));
  std::normal_distribution<double> normal;
  std::vector<double> in(2 * 9), out(2 * 9);
  for (double& v : in) v = normal(rng);
  for (double& v : out) v = normal(rng);
  const std::vector<double> before = out;
  const std::vector<Rep::Element> bad = {Rep::Element{3, {1}}, Rep::Element{5, {1, 2}}};
  const absl::Status s = rho.Apply<double>(bad, in.data(), 9, out.data(), 9);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("element 1"), std::string::npos) << s;
  EXPECT_EQ(out, before);
  // In place too.
  std::vector<double> inplace = in;
  EXPECT_FALSE(rho.Apply<double>(bad, inplace.data(), 9, inplace.data(), 9).ok());
  EXPECT_EQ(inplace, in);
}

}  // namespace
}  // namespace group
}  // namespace gpe
