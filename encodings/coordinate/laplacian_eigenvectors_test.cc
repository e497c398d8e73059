#include "encodings/coordinate/laplacian_eigenvectors.h"

#include <cmath>
#include <limits>
#include <vector>

#include "gtest/gtest.h"

namespace gpe {
namespace encodings {
namespace {

constexpr double kPi = 3.14159265358979323846;

std::vector<GraphEdge> Cycle(int n) {
  std::vector<GraphEdge> e;
  for (int i = 0; i < n; ++i) e.push_back({i, (i + 1) % n, 1.0});
  return e;
}

std::vector<GraphEdge> Path(int n) {
  std::vector<GraphEdge> e;
  for (int i = 0; i + 1 < n; ++i) e.push_back({i, i + 1, 1.0});
  return e;
}

TEST(GraphLaplacianTest, AssemblesCombinatorialAndSymmetric) {
  // Path 0 - 1 - 2 with weights 2 and 0.5, plus a duplicate of the first edge.
  const std::vector<GraphEdge> e = {{0, 1, 2.0}, {1, 2, 0.5}, {1, 0, 1.0}};
  auto l = GraphLaplacian(4, e, LaplacianKind::kCombinatorial);
  ASSERT_TRUE(l.ok());
  Eigen::MatrixXd want(4, 4);
  want << 3, -3, 0, 0, -3, 3.5, -0.5, 0, 0, -0.5, 0.5, 0, 0, 0, 0, 0;
  EXPECT_EQ(Eigen::MatrixXd(*l), want);
  auto s = GraphLaplacian(4, e, LaplacianKind::kSymmetric);
  ASSERT_TRUE(s.ok());
  const Eigen::MatrixXd sd(*s);
  EXPECT_DOUBLE_EQ(sd(0, 0), 1.0);
  EXPECT_DOUBLE_EQ(sd(0, 1), -3.0 / std::sqrt(3.0 * 3.5));
  EXPECT_DOUBLE_EQ(sd(3, 3), 0.0);  // isolated node
}

TEST(LaplacianEncodingTest, CycleEigenvaluesAndEigenspaces) {
  // Cycle C_n: eigenvalues 2 - 2 cos(2 pi j / n), each j and n - j sharing the
  // eigenspace spanned by cos(2 pi j i / n), sin(2 pi j i / n). Since that basis is only
  // defined up to rotation, compare subspaces: the projection of the closed-form vectors
  // onto the returned pair must preserve their norm. Dense symmetric eigensolvers give
  // eigenvalues to ~n eps ||L|| and, with the pair's gap to its neighbours >= 0.05,
  // subspaces to ~1e-13; 1e-10 leaves room.
  const int n = 24;
  LaplacianEncodingOptions opt;
  auto enc = LaplacianEigenvectorEncoding(n, Cycle(n), 9, opt);
  ASSERT_TRUE(enc.ok()) << enc.status();
  EXPECT_NEAR(enc->eigenvalues(0), 0.0, 1e-12);
  for (int j = 1; j <= 4; ++j) {
    const double lambda = 2 - 2 * std::cos(2 * kPi * j / n);
    EXPECT_NEAR(enc->eigenvalues(2 * j - 1), lambda, 1e-12);
    EXPECT_NEAR(enc->eigenvalues(2 * j), lambda, 1e-12);
    const Eigen::MatrixXd basis = enc->eigenvectors.middleCols(2 * j - 1, 2);
    for (int trig = 0; trig < 2; ++trig) {
      Eigen::VectorXd v(n);
      for (int i = 0; i < n; ++i) {
        v(i) = trig ? std::sin(2 * kPi * j * i / n) : std::cos(2 * kPi * j * i / n);
      }
      v.normalize();
      EXPECT_NEAR((basis.transpose() * v).norm(), 1.0, 1e-10) << j;
    }
  }
  // Orthonormal columns.
  const Eigen::MatrixXd gram = enc->eigenvectors.transpose() * enc->eigenvectors;
  EXPECT_LT((gram - Eigen::MatrixXd::Identity(9, 9)).cwiseAbs().maxCoeff(), 1e-12);
}

TEST(LaplacianEncodingTest, PathEigenvectorsMatchClosedFormWithSignConvention) {
  // Path P_n: simple eigenvalues 2 - 2 cos(pi j / n), eigenvectors cos(pi j (i + 1/2) / n).
  // Each is determined up to sign; after the documented sign rule (largest-magnitude
  // entry positive, first among ties) they must match entrywise; the rule is applied to
  // the closed form here (e.g. j = 4: |v| peaks at i = 7 and 22, cos(pi) = cos(3 pi) =
  // -1, so v is negated). Eigenvector error ~ eps / gap ~ 1e-13 (gaps >= 0.02).
  const int n = 30;
  LaplacianEncodingOptions opt;
  opt.skip_first = true;
  auto enc = LaplacianEigenvectorEncoding(n, Path(n), 5, opt);
  ASSERT_TRUE(enc.ok());
  for (int j = 1; j <= 5; ++j) {
    EXPECT_NEAR(enc->eigenvalues(j - 1), 2 - 2 * std::cos(kPi * j / n), 1e-12);
    Eigen::VectorXd v(n);
    for (int i = 0; i < n; ++i) v(i) = std::cos(kPi * j * (i + 0.5) / n);
    v.normalize();
    const double top = v.cwiseAbs().maxCoeff();
    for (int i = 0; i < n; ++i) {
      if (std::abs(v(i)) >= top * (1 - 1e-9)) {
        if (v(i) < 0) v = -v;
        break;
      }
    }
    EXPECT_LT((enc->eigenvectors.col(j - 1) - v).cwiseAbs().maxCoeff(), 1e-10) << j;
  }
}

TEST(LaplacianEncodingTest, SymmetricLaplacianOfRegularGraphIsScaledCombinatorial) {
  // On the 2-regular cycle, I - A / 2 = L / 2: eigenvalues halve.
  LaplacianEncodingOptions opt;
  opt.kind = LaplacianKind::kSymmetric;
  auto enc = LaplacianEigenvectorEncoding(10, Cycle(10), 3, opt);
  ASSERT_TRUE(enc.ok());
  EXPECT_NEAR(enc->eigenvalues(1), 1 - std::cos(2 * kPi / 10), 1e-12);
}

TEST(LaplacianEncodingTest, RejectsBadInput) {
  EXPECT_FALSE(GraphLaplacian(0, {}, LaplacianKind::kCombinatorial).ok());
  EXPECT_FALSE(GraphLaplacian(3, std::vector<GraphEdge>{{0, 3, 1}}, LaplacianKind::kCombinatorial).ok());
  EXPECT_FALSE(GraphLaplacian(3, std::vector<GraphEdge>{{-1, 2, 1}}, LaplacianKind::kCombinatorial).ok());
  EXPECT_FALSE(GraphLaplacian(3, std::vector<GraphEdge>{{1, 1, 1}}, LaplacianKind::kCombinatorial).ok());
  EXPECT_FALSE(GraphLaplacian(3, std::vector<GraphEdge>{{0, 1, 0}}, LaplacianKind::kCombinatorial).ok());
  EXPECT_FALSE(GraphLaplacian(3, std::vector<GraphEdge>{{0, 1, std::numeric_limits<double>::quiet_NaN()}},
                              LaplacianKind::kCombinatorial)
                   .ok());
  EXPECT_FALSE(GraphLaplacian(3, std::vector<GraphEdge>{{0, 1, 1e308}, {0, 2, 1e308}},
                              LaplacianKind::kCombinatorial)
                   .ok());
  EXPECT_FALSE(LaplacianEigenvectorEncoding(5, Path(5), 0).ok());
  EXPECT_FALSE(LaplacianEigenvectorEncoding(5, Path(5), 6).ok());
  LaplacianEncodingOptions skip;
  skip.skip_first = true;
  EXPECT_FALSE(LaplacianEigenvectorEncoding(5, Path(5), 5, skip).ok());
  EXPECT_TRUE(LaplacianEigenvectorEncoding(5, Path(5), 4, skip).ok());
  EXPECT_EQ(LaplacianEigenvectorEncoding(5000, Path(5000), 4).status().code(),
            absl::StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace encodings
}  // namespace gpe
