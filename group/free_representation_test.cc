#include "group/free_representation.h"

#include <cstdint>
#include <random>
#include <vector>

#include <Eigen/Dense>
#include "gtest/gtest.h"
#include "group/free_group.h"
#include "group/so_dense.h"
#include "group/test_util.h"

namespace gpe {
namespace group {
namespace {

using testing::MaxAbsDiff;
using testing::OrthogonalityError;
using testing::RandomSkew;
using testing::RandomVector;

FreeWord RandomWord(const FreeGroup& f, int max_len, std::mt19937_64& rng) {
  std::vector<int32_t> letters(rng() % (max_len + 1));
  for (int32_t& g : letters) {
    g = 1 + static_cast<int32_t>(rng() % f.num_generators());
    if (rng() % 2) g = -g;
  }
  return *f.Reduce(letters);
}

FreeGroupRepresentation RandomRep(int64_t d, int k, std::mt19937_64& rng) {
  std::vector<Eigen::MatrixXd> skew;
  for (int g = 0; g < k; ++g) skew.push_back(RandomSkew(d, 1.0, rng));
  return *FreeGroupRepresentation::CreateFromSkew(skew);
}

// Words of length <= 16 multiply <= 32 orthogonal matrices: each product adds ~d eps
// of error, so 32 * 8 * 2.2e-16 ~ 6e-14; 1e-13 bounds every identity below.
constexpr double kWordTol = 1e-13;

TEST(FreeGroupRepresentationTest, HomomorphismInverseOrthogonality) {
  std::mt19937_64 rng(41);
  const FreeGroupRepresentation rho = RandomRep(8, 3, rng);
  const FreeGroup& f = rho.group();
  for (int trial = 0; trial < 100; ++trial) {
    const FreeWord g = RandomWord(f, 8, rng), h = RandomWord(f, 8, rng);
    const Eigen::MatrixXd rg = *rho.Matrix(g);
    EXPECT_LE(MaxAbsDiff(*rho.Matrix(*f.Compose(g, h)), rg * *rho.Matrix(h)), kWordTol);
    EXPECT_LE(MaxAbsDiff(*rho.Matrix(*f.Inverse(g)), rg.transpose()), kWordTol);
    EXPECT_LE(OrthogonalityError(rg), kWordTol);
  }
  // Path order: rho([1, 2]) = W1 W2, and an unreduced word equals its reduction.
  EXPECT_LE(MaxAbsDiff(*rho.Matrix({1, 2}), rho.generator(1) * rho.generator(2)), 1e-15);
  EXPECT_LE(MaxAbsDiff(*rho.Matrix({1, 3, -3, 2}), *rho.Matrix({1, 2})), kWordTol);
  EXPECT_EQ(*rho.Matrix({}), Eigen::MatrixXd::Identity(8, 8));
}

TEST(FreeGroupRepresentationTest, WordsDoNotCommute) {
  std::mt19937_64 rng(42);
  const FreeGroupRepresentation rho = RandomRep(6, 2, rng);
  // Random generators do not commute: the difference is O(1), far above rounding.
  EXPECT_GT(MaxAbsDiff(*rho.Matrix({1, 2}), *rho.Matrix({2, 1})), 1e-3);
}

TEST(FreeGroupRepresentationTest, TreeRelativityAndApply) {
  std::mt19937_64 rng(43);
  const int64_t d = 6;
  const FreeGroupRepresentation rho = RandomRep(d, 2, rng);
  const FreeGroup& f = rho.group();
  for (int trial = 0; trial < 100; ++trial) {
    // Random nodes of a binary tree of depth <= 7.
    std::vector<int64_t> ag(rng() % 8), ah(rng() % 8);
    for (int64_t& c : ag) c = static_cast<int64_t>(rng() % 2);
    for (int64_t& c : ah) c = static_cast<int64_t>(rng() % 2);
    const FreeWord g = *f.FromTreeAddress(ag), h = *f.FromTreeAddress(ah);
    const FreeWord rel = *f.RelativePath(g, h);
    const std::vector<double> q = RandomVector(d, rng), k = RandomVector(d, rng);
    std::vector<double> qg(d), kh(d), krel(d);
    ASSERT_TRUE(rho.Apply<double>({&g, 1}, q.data(), d, qg.data(), d).ok());
    ASSERT_TRUE(rho.Apply<double>({&h, 1}, k.data(), d, kh.data(), d).ok());
    ASSERT_TRUE(rho.Apply<double>({&rel, 1}, k.data(), d, krel.data(), d).ok());
    double lhs = 0, rhs = 0;
    for (int64_t c = 0; c < d; ++c) {
      lhs += qg[c] * kh[c];
      rhs += q[c] * krel[c];
    }
    // <rho(g) q, rho(h) k> = <q, rho(g^-1 h) k>; |q||k| ~ 6, kWordTol per entry.
    EXPECT_NEAR(lhs, rhs, 1e-12);
  }
  const int64_t n = 5, stride = 7;
  std::vector<FreeWord> words;
  for (int64_t j = 0; j < n; ++j) words.push_back(RandomWord(f, 6, rng));
  const std::vector<double> x = RandomVector(n * stride, rng);
  std::vector<double> y(n * stride), z = x;
  std::vector<float> xf(x.begin(), x.end()), yf(n * stride);
  ASSERT_TRUE(rho.Apply<double>(words, x.data(), stride, y.data(), stride).ok());
  ASSERT_TRUE(rho.Apply<double>(words, z.data(), stride, z.data(), stride).ok());
  ASSERT_TRUE(rho.Apply<float>(words, xf.data(), stride, yf.data(), stride).ok());
  for (int64_t j = 0; j < n; ++j) {
    const Eigen::VectorXd want =
        *rho.Matrix(words[j]) * Eigen::Map<const Eigen::VectorXd>(x.data() + j * stride, d);
    for (int64_t i = 0; i < d; ++i) {
      EXPECT_NEAR(y[j * stride + i], want(i), kWordTol * 10);
      EXPECT_EQ(z[j * stride + i], y[j * stride + i]);
      EXPECT_NEAR(yf[j * stride + i], want(i), 3e-6);  // float32 in/out roundings
    }
  }
}

TEST(FreeGroupRepresentationTest, BadInput) {
  EXPECT_FALSE(FreeGroupRepresentation::Create({}).ok());
  EXPECT_FALSE(FreeGroupRepresentation::Create({2.0 * Eigen::MatrixXd::Identity(3, 3)}).ok());
  EXPECT_FALSE(FreeGroupRepresentation::Create(
                   {Eigen::MatrixXd::Identity(3, 3), Eigen::MatrixXd::Identity(4, 4)})
                   .ok());
  EXPECT_FALSE(FreeGroupRepresentation::CreateFromSkew({Eigen::MatrixXd::Ones(3, 3)}).ok());
  const FreeGroupRepresentation rho = *FreeGroupRepresentation::Create(
      {Eigen::MatrixXd::Identity(3, 3), Eigen::MatrixXd::Identity(3, 3)});
  EXPECT_FALSE(rho.Matrix({1, 3}).ok());  // generator index out of range
  EXPECT_FALSE(rho.Matrix({0}).ok());
  std::vector<double> buf(6);
  const std::vector<FreeWord> words = {{1}, {-3}};
  EXPECT_FALSE(rho.Apply<double>(words, buf.data(), 3, buf.data(), 3).ok());
  const std::vector<FreeWord> good = {{1}, {-2}};
  EXPECT_FALSE(rho.Apply<double>(good, buf.data(), 2, buf.data(), 2).ok());
  EXPECT_TRUE(rho.Apply<double>(good, buf.data(), 3, buf.data(), 3).ok());
}

}  // namespace
}  // namespace group
}  // namespace gpe
