#include "group/so_planes.h"

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include <Eigen/Dense>
#include <unsupported/Eigen/MatrixFunctions>
#include "gtest/gtest.h"
#include "group/angle.h"
#include "group/test_util.h"

namespace gpe {
namespace group {
namespace {

using testing::MaxAbsDiff;
using testing::OrthogonalityError;
using testing::RandomPosition;
using testing::RandomVector;
using testing::RelativityError;

// Entries of rho(p) are cos/sin of a correctly reduced angle: each is within ~2 ulp
// (2.2e-16) of the exact value. A product of two such matrices has 2 terms per entry,
// so group identities hold to ~1e-15; 4e-15 leaves headroom for the sum of errors.
constexpr double kMatrixTol = 4e-15;

std::vector<double> RopeThetas(int64_t planes, double base) {
  std::vector<double> t(planes);
  for (int64_t i = 0; i < planes; ++i) t[i] = std::pow(base, -2.0 * i / (2.0 * planes));
  return t;
}

class CommutingPlanesTest : public ::testing::TestWithParam<PlanePairing> {};

TEST_P(CommutingPlanesTest, HomomorphismInverseOrthogonality) {
  const CommutingPlanes rho = *CommutingPlanes::Create(10, 8, RopeThetas(4, 10000.0), GetParam());
  std::mt19937_64 rng(5);
  for (int trial = 0; trial < 100; ++trial) {
    // Up to 2^52 each, so p + q cannot overflow. A naive double product p * theta
    // would be off by ~0.5 rad here and fail every check below.
    const int64_t p = RandomPosition(52, rng), q = RandomPosition(52, rng);
    const Eigen::MatrixXd mp = rho.Matrix(p), mq = rho.Matrix(q);
    EXPECT_LE(MaxAbsDiff(rho.Matrix(p + q), mp * mq), kMatrixTol) << p << " " << q;
    EXPECT_LE(MaxAbsDiff(rho.Matrix(-p), mp.transpose()), kMatrixTol);
    EXPECT_LE(OrthogonalityError(mp), kMatrixTol);
  }
  EXPECT_LE(MaxAbsDiff(rho.Matrix(0), Eigen::MatrixXd::Identity(10, 10)), 0.0);
}

TEST_P(CommutingPlanesTest, EqualsExpOfBlockGenerator) {
  const CommutingPlanes rho = *CommutingPlanes::Create(9, 6, {0.3, -1.1, 0.05}, GetParam());
  const Eigen::MatrixXd s = rho.Generator();
  EXPECT_LE(MaxAbsDiff(s, -s.transpose()), 0.0);
  for (int64_t p : {-37, -1, 1, 2, 15, 100}) {
    // Eigen's Pade exp of p S (norm <= 110) squares ~7 times: error ~2^7 eps ~3e-14.
    const Eigen::MatrixXd e = (static_cast<double>(p) * s).exp();
    EXPECT_LE(MaxAbsDiff(rho.Matrix(p), e), 1e-12) << p;
  }
}

TEST_P(CommutingPlanesTest, ApplyMatchesMatrixWithStridesAndInPlace) {
  const int64_t dim = 12, rotary = 8, n = 7, stride = 15;
  const CommutingPlanes rho = *CommutingPlanes::Create(dim, rotary, RopeThetas(4, 500.0), GetParam());
  std::mt19937_64 rng(6);
  std::vector<int64_t> pos(n);
  for (int64_t& p : pos) p = RandomPosition(40, rng);
  const std::vector<double> x = RandomVector(n * stride, rng);
  std::vector<double> out(n * stride, -7.0);
  ASSERT_TRUE(rho.Apply<double>(pos, x.data(), stride, out.data(), stride).ok());
  std::vector<double> inplace = x;
  ASSERT_TRUE(rho.Apply<double>(pos, inplace.data(), stride, inplace.data(), stride).ok());
  for (int64_t j = 0; j < n; ++j) {
    const Eigen::VectorXd xj = Eigen::Map<const Eigen::VectorXd>(x.data() + j * stride, dim);
    const Eigen::VectorXd want = rho.Matrix(pos[j]) * xj;
    for (int64_t c = 0; c < dim; ++c) {
      EXPECT_NEAR(out[j * stride + c], want(c), 1e-14);
      EXPECT_EQ(inplace[j * stride + c], out[j * stride + c]);
    }
    // Pass-through coordinates are copied exactly; padding is untouched.
    for (int64_t c = rotary; c < dim; ++c) EXPECT_EQ(out[j * stride + c], x[j * stride + c]);
    for (int64_t c = dim; c < stride; ++c) EXPECT_EQ(out[j * stride + c], -7.0);
  }
}

TEST_P(CommutingPlanesTest, RelativityOfScores) {
  const int64_t dim = 16;
  const CommutingPlanes rho = *CommutingPlanes::Create(dim, dim, RopeThetas(8, 10000.0), GetParam());
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 100; ++trial) {
    const int64_t i = RandomPosition(50, rng), j = RandomPosition(50, rng);
    const std::vector<double> q = RandomVector(dim, rng), k = RandomVector(dim, rng);
    // |q| |k| ~ 16; each rotated vector carries ~1e-16 relative error per coordinate.
    EXPECT_NEAR(RelativityError(rho, dim, i, j, q, k), 0.0, 1e-13) << i << " " << j;
  }
}

INSTANTIATE_TEST_SUITE_P(Pairings, CommutingPlanesTest,
                         ::testing::Values(PlanePairing::kInterleaved, PlanePairing::kHalfSplit));

TEST(CommutingPlanesFloatTest, Float32AtLargePositionMatchesDouble) {
  const int64_t dim = 64, n = 4;
  const std::vector<double> thetas = RopeThetas(32, 10000.0);
  const CommutingPlanes rho = *CommutingPlanes::Create(dim, dim, thetas, PlanePairing::kHalfSplit);
  std::mt19937_64 rng(8);
  const std::vector<int64_t> pos = {int64_t{1} << 24, (int64_t{1} << 24) + 1, 1000003, -(int64_t{1} << 24)};
  const std::vector<double> xd = RandomVector(n * dim, rng);
  std::vector<float> xf(xd.begin(), xd.end());
  const std::vector<double> xd_rounded(xf.begin(), xf.end());
  std::vector<double> ref(n * dim);
  std::vector<float> outf(n * dim);
  ASSERT_TRUE(rho.Apply<double>(pos, xd_rounded.data(), dim, ref.data(), dim).ok());
  ASSERT_TRUE(rho.Apply<float>(pos, xf.data(), dim, outf.data(), dim).ok());
  double naive_worst = 0;
  for (int64_t j = 0; j < n; ++j) {
    double err = 0, norm = 0, naive_err = 0;
    for (int64_t c = 0; c < dim; ++c) {
      err = std::fmax(err, std::fabs(outf[j * dim + c] - ref[j * dim + c]));
      norm = std::fmax(norm, std::fabs(ref[j * dim + c]));
    }
    // Only the final rounding to float32 (6e-8 relative) separates the two.
    EXPECT_LE(err, 1e-6 * norm) << pos[j];
    // Guard: a float32 angle p * theta (what the conventions forbid) is off by ~1 rad.
    for (int64_t i = 0; i < 32; ++i) {
      const float a = static_cast<float>(pos[j]) * static_cast<float>(thetas[i]);
      naive_err = std::fmax(naive_err, std::fabs(std::remainder(
                                           static_cast<double>(a) - ReducedAngle(pos[j], thetas[i]),
                                           kTwoPi)));
    }
    naive_worst = std::fmax(naive_worst, naive_err);
  }
  EXPECT_GT(naive_worst, 1e-2);
}

TEST(CommutingPlanesInputTest, BadInput) {
  EXPECT_FALSE(CommutingPlanes::Create(8, 7, {1, 1, 1}, PlanePairing::kInterleaved).ok());
  EXPECT_FALSE(CommutingPlanes::Create(8, 10, {1, 1, 1, 1, 1}, PlanePairing::kInterleaved).ok());
  EXPECT_FALSE(CommutingPlanes::Create(8, 0, {}, PlanePairing::kInterleaved).ok());
  EXPECT_FALSE(CommutingPlanes::Create(0, 0, {}, PlanePairing::kInterleaved).ok());
  EXPECT_FALSE(CommutingPlanes::Create(8, 8, {1, 1, 1}, PlanePairing::kInterleaved).ok());
  EXPECT_FALSE(CommutingPlanes::Create(4, 4, {1, NAN}, PlanePairing::kHalfSplit).ok());
  EXPECT_FALSE(CommutingPlanes::Create(4, 4, {1, 1}, static_cast<PlanePairing>(7)).ok());
  const CommutingPlanes rho = *CommutingPlanes::Create(4, 4, {1, 2}, PlanePairing::kHalfSplit);
  std::vector<double> buf(16);
  const std::vector<int64_t> pos = {1, 2, 3};
  EXPECT_FALSE(rho.Apply<double>(pos, buf.data(), 3, buf.data(), 3).ok());      // stride < dim
  EXPECT_FALSE(rho.Apply<double>(pos, nullptr, 4, buf.data(), 4).ok());         // null
  EXPECT_FALSE(rho.Apply<double>(pos, buf.data(), 4, buf.data() + 2, 4).ok());  // overlap
  EXPECT_FALSE(rho.Apply<double>(pos, buf.data(), 4, buf.data(), 5).ok());      // in-place, strides differ
  EXPECT_TRUE(rho.Apply<double>(pos, buf.data(), 4, buf.data(), 4).ok());
  EXPECT_TRUE(rho.Apply<double>({}, nullptr, 0, nullptr, 0).ok());  // empty batch
}

TEST(CyclicPlanesTest, PeriodicHomomorphism) {
  const int64_t n = 6;  // benzene: W^6 = I (Kogkalidis et al., sec. 3.4)
  const CyclicPlanes rho = *CyclicPlanes::Create(7, 6, n, {1, 2, -5}, PlanePairing::kInterleaved);
  const Eigen::MatrixXd id = Eigen::MatrixXd::Identity(7, 7);
  EXPECT_LE(MaxAbsDiff(rho.Matrix(n), id), 0.0);  // exact residue 0
  // Powers of rho(1) return to I after n steps, to rounding (6 products, ~1e-15).
  Eigen::MatrixXd w = id;
  for (int64_t s = 0; s < n; ++s) w = w * rho.Matrix(1);
  EXPECT_LE(MaxAbsDiff(w, id), 2e-15);
  // exp(n S) = I: Eigen's Pade exp of a norm-~30 matrix, error ~2^5 eps.
  EXPECT_LE(MaxAbsDiff((static_cast<double>(n) * rho.Generator()).exp(), id), 1e-13);
  std::mt19937_64 rng(9);
  for (int trial = 0; trial < 100; ++trial) {
    const int64_t p = RandomPosition(60, rng), q = RandomPosition(60, rng);
    EXPECT_EQ(rho.Matrix(p), rho.Matrix(p + n));  // bit-identical
    EXPECT_LE(MaxAbsDiff(rho.Matrix(p + q), rho.Matrix(p) * rho.Matrix(q)), kMatrixTol);
    EXPECT_LE(MaxAbsDiff(rho.Matrix(-p), rho.Matrix(p).transpose()), kMatrixTol);
  }
  std::vector<double> x = RandomVector(7, rng), y(7), z(7);
  const int64_t p0 = 4, p1 = 4 + 1000 * n;
  ASSERT_TRUE(rho.Apply<double>({&p0, 1}, x.data(), 7, y.data(), 7).ok());
  ASSERT_TRUE(rho.Apply<double>({&p1, 1}, x.data(), 7, z.data(), 7).ok());
  EXPECT_EQ(y, z);
  EXPECT_FALSE(CyclicPlanes::Create(4, 4, 0, {1, 1}, PlanePairing::kInterleaved).ok());
  EXPECT_FALSE(CyclicPlanes::Create(4, 4, 5, {1}, PlanePairing::kInterleaved).ok());
  EXPECT_FALSE(CyclicPlanes::Create(4, 3, 5, {1}, PlanePairing::kInterleaved).ok());
}

}  // namespace
}  // namespace group
}  // namespace gpe
