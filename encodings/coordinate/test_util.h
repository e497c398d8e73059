// Helpers shared by the coordinate encodings' tests (testonly).
#ifndef ENCODINGS_COORDINATE_TEST_UTIL_H_
#define ENCODINGS_COORDINATE_TEST_UTIL_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>

#include "encodings/coordinate/encoder.h"
#include "gtest/gtest.h"

namespace gpe {
namespace encodings {
namespace testing {

inline RowMatrixXd RandomUniform(int64_t rows, int64_t cols, double lo, double hi,
                                 std::mt19937_64& rng) {
  std::uniform_real_distribution<double> u(lo, hi);
  RowMatrixXd m(rows, cols);
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) m(i, j) = u(rng);
  }
  return m;
}

inline RowMatrixXd RandomNormal(int64_t rows, int64_t cols, std::mt19937_64& rng) {
  std::normal_distribution<double> n;
  RowMatrixXd m(rows, cols);
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) m(i, j) = n(rng);
  }
  return m;
}

// Compares encoder.Backward(points, G) with central differences of
// L(x) = sum(G .* Encode(x)), coordinate by coordinate, in double.
// Central differences with step h have truncation error ~ h^2 |L'''| / 6 and rounding
// error ~ eps |L| / h; h = 1e-5 balances them near 1e-10 relative to the feature scale,
// so `tolerance` (relative to max(1, |gradient|)) of 1e-6 leaves a wide margin while
// any wrong term in a gradient (errors of order 1) fails.
inline void ExpectBackwardMatchesFiniteDifferences(const CoordinateEncoder& encoder,
                                                   const RowMatrixXd& points, uint64_t seed,
                                                   double h = 1e-5, double tolerance = 1e-6) {
  std::mt19937_64 rng(seed);
  const RowMatrixXd g = RandomNormal(points.rows(), encoder.output_dim(), rng);
  auto grad = encoder.Backward(points, g);
  ASSERT_TRUE(grad.ok()) << grad.status();
  ASSERT_EQ(grad->rows(), points.rows());
  ASSERT_EQ(grad->cols(), points.cols());
  for (int64_t i = 0; i < points.rows(); ++i) {
    for (int64_t d = 0; d < points.cols(); ++d) {
      RowMatrixXd plus = points.row(i);
      RowMatrixXd minus = points.row(i);
      plus(0, d) += h;
      minus(0, d) -= h;
      auto fp = encoder.Encode(plus);
      auto fm = encoder.Encode(minus);
      ASSERT_TRUE(fp.ok() && fm.ok());
      const double numeric =
          (fp->row(0).dot(g.row(i)) - fm->row(0).dot(g.row(i))) / (2 * h);
      const double analytic = (*grad)(i, d);
      EXPECT_NEAR(analytic, numeric, tolerance * std::max(1.0, std::abs(numeric)))
          << "point " << i << " coordinate " << d;
    }
  }
}

}  // namespace testing
}  // namespace encodings
}  // namespace gpe

#endif  // ENCODINGS_COORDINATE_TEST_UTIL_H_
