#include "encodings/coordinate/spherical_harmonics.h"

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "encodings/coordinate/test_util.h"
#include "gtest/gtest.h"

namespace gpe {
namespace encodings {
namespace {

using ::gpe::encodings::testing::ExpectBackwardMatchesFiniteDifferences;
using ::gpe::encodings::testing::RandomNormal;

constexpr double kPi = 3.14159265358979323846;

// Gauss-Legendre nodes and weights on [-1, 1] (Newton on P_n from the Chebyshev guess);
// exact for polynomials of degree <= 2n - 1.
void GaussLegendre(int n, std::vector<double>* nodes, std::vector<double>* weights) {
  nodes->resize(n);
  weights->resize(n);
  for (int i = 0; i < n; ++i) {
    double z = std::cos(kPi * (i + 0.75) / (n + 0.5));
    double dp = 0;
    for (int it = 0; it < 100; ++it) {
      double p0 = 1, p1 = z;
      for (int k = 2; k <= n; ++k) {
        const double p2 = ((2 * k - 1) * z * p1 - (k - 1) * p0) / k;
        p0 = p1;
        p1 = p2;
      }
      if (n == 1) p0 = 1;
      dp = n * (z * p1 - p0) / (z * z - 1);
      const double dz = p1 / dp;
      z -= dz;
      if (std::abs(dz) < 1e-16) break;
    }
    (*nodes)[i] = z;
    (*weights)[i] = 2 / ((1 - z * z) * dp * dp);
  }
}

TEST(SphericalHarmonicsTest, OrthonormalUnderExactQuadrature) {
  // Products Y_lm Y_l'm' with l, l' <= L are polynomials of degree <= 2L in z = cos theta
  // times trigonometric polynomials of degree <= 2L in phi: L + 1 Gauss-Legendre nodes
  // and 2L + 1 equispaced azimuths integrate them exactly, so the Gram matrix equals the
  // identity to rounding (~1e-15 times the number of terms; 1e-12 tolerance).
  const int L = 12;
  auto sh = SphericalHarmonicsEncoder::Create(L);
  ASSERT_TRUE(sh.ok());
  std::vector<double> z, w;
  GaussLegendre(L + 1, &z, &w);
  const int nphi = 2 * L + 1;
  RowMatrixXd angles((L + 1) * nphi, 2);
  Eigen::VectorXd weight((L + 1) * nphi);
  for (int i = 0; i <= L; ++i) {
    for (int j = 0; j < nphi; ++j) {
      angles.row(i * nphi + j) << std::acos(z[i]), 2 * kPi * j / nphi;
      weight(i * nphi + j) = w[i] * 2 * kPi / nphi;
    }
  }
  auto y = sh->EncodeAngles(angles);
  ASSERT_TRUE(y.ok());
  const Eigen::MatrixXd gram = y->transpose() * weight.asDiagonal() * (*y);
  const int64_t f = sh->output_dim();
  EXPECT_LT((gram - Eigen::MatrixXd::Identity(f, f)).cwiseAbs().maxCoeff(), 1e-12);
}

TEST(SphericalHarmonicsTest, MatchesStdSphLegendre) {
  // std::sph_legendre(l, m, theta) = Y_l^m(theta, 0) with the Condon-Shortley phase, so
  // the real harmonics here are sqrt(2) (-1)^m sph_legendre * cos/sin(m phi) for m > 0.
  // Independent implementations in double: agreement to 1e-13 for l <= 20.
  auto sh = SphericalHarmonicsEncoder::Create(20);
  ASSERT_TRUE(sh.ok());
  RowMatrixXd angles(4, 2);
  angles << 0.3, 1.1, 1.2, -2.0, 2.9, 0.4, 0.0, 0.7;
  auto y = sh->EncodeAngles(angles);
  ASSERT_TRUE(y.ok());
  for (int n = 0; n < 4; ++n) {
    const double theta = angles(n, 0), phi = angles(n, 1);
    for (int l = 0; l <= 20; ++l) {
      EXPECT_NEAR((*y)(n, SphericalHarmonicsEncoder::Index(l, 0)), std::sph_legendre(l, 0, theta),
                  1e-13);
      for (int m = 1; m <= l; ++m) {
        const double p = std::sqrt(2.0) * (m % 2 ? -1 : 1) * std::sph_legendre(l, m, theta);
        EXPECT_NEAR((*y)(n, SphericalHarmonicsEncoder::Index(l, m)), p * std::cos(m * phi), 1e-13)
            << l << " " << m;
        EXPECT_NEAR((*y)(n, SphericalHarmonicsEncoder::Index(l, -m)), p * std::sin(m * phi), 1e-13)
            << l << " " << m;
      }
    }
  }
}

TEST(SphericalHarmonicsTest, AdditionTheoremAndScaleInvariance) {
  // sum_m Y_lm(u) Y_lm(v) = (2l + 1) / (4 pi) P_l(u . v): rotation invariance of each
  // degree, checked with std::legendre as the independent side. Values are O(l);
  // rounding ~1e-15 * (2l + 1) terms: 1e-12.
  const int L = 16;
  auto sh = SphericalHarmonicsEncoder::Create(L);
  ASSERT_TRUE(sh.ok());
  std::mt19937_64 rng(21);
  const RowMatrixXd a = RandomNormal(6, 3, rng), b = RandomNormal(6, 3, rng);
  auto ya = sh->Encode(a);
  auto yb = sh->Encode(b);
  auto ya_scaled = sh->Encode(7.5 * a);
  ASSERT_TRUE(ya.ok() && yb.ok() && ya_scaled.ok());
  for (int n = 0; n < 6; ++n) {
    const double cosang = a.row(n).normalized().dot(b.row(n).normalized());
    for (int l = 0; l <= L; ++l) {
      double sum = 0;
      for (int m = -l; m <= l; ++m) {
        sum += (*ya)(n, SphericalHarmonicsEncoder::Index(l, m)) *
               (*yb)(n, SphericalHarmonicsEncoder::Index(l, m));
      }
      EXPECT_NEAR(sum, (2 * l + 1) / (4 * kPi) * std::legendre(l, cosang), 1e-12) << l;
    }
  }
  // Only the direction matters (normalising 7.5 v rounds differently: a few ulps).
  EXPECT_LT((*ya - *ya_scaled).cwiseAbs().maxCoeff(), 1e-13);
  // ... also for vectors whose squares leave double's range (1e-162 and 1e-200: the
  // squares underflow; 1e160: they overflow): the norm is taken scaled, so the direction
  // is the same to a few ulps (unscaled, 3e-162 x gave |u| = 1.006, Y_64,64 47% off, and
  // 1e-200 x was refused as having no direction).
  for (double scale : {1e-162, 1e-200, 1e160}) {
    auto y_tiny = sh->Encode(scale * a);
    ASSERT_TRUE(y_tiny.ok()) << scale << " " << y_tiny.status();
    EXPECT_LT((*ya - *y_tiny).cwiseAbs().maxCoeff(), 1e-12) << scale;
  }
}

TEST(SphericalHarmonicsTest, BackwardMatchesFiniteDifferencesIncludingPoles) {
  auto sh = SphericalHarmonicsEncoder::Create(8);
  ASSERT_TRUE(sh.ok());
  std::mt19937_64 rng(4);
  RowMatrixXd pts = RandomNormal(8, 3, rng);
  pts.row(0) << 0, 0, 2.0;   // north pole: theta-phi charts are singular, the
  pts.row(1) << 0, 0, -0.5;  // polynomial form is not
  ExpectBackwardMatchesFiniteDifferences(*sh, pts, 3);
  // The gradient is tangent to the sphere: radial scaling does not change features.
  auto g = sh->Backward(pts, RandomNormal(8, sh->output_dim(), rng));
  ASSERT_TRUE(g.ok());
  for (int n = 0; n < 8; ++n) EXPECT_NEAR(g->row(n).dot(pts.row(n)), 0.0, 1e-12);
}

TEST(SphericalHarmonicsTest, RejectsBadInput) {
  EXPECT_FALSE(SphericalHarmonicsEncoder::Create(-1).ok());
  EXPECT_FALSE(SphericalHarmonicsEncoder::Create(65).ok());
  auto sh = SphericalHarmonicsEncoder::Create(3);
  ASSERT_TRUE(sh.ok());
  EXPECT_EQ(sh->output_dim(), 16);
  EXPECT_FALSE(sh->Encode(RowMatrixXd::Zero(1, 3)).ok());
  EXPECT_FALSE(sh->Encode(RowMatrixXd::Ones(1, 2)).ok());
  EXPECT_FALSE(sh->Encode(RowMatrixXd(0, 3)).ok());
  RowMatrixXd nan = RowMatrixXd::Ones(1, 3);
  nan(0, 2) = std::numeric_limits<double>::quiet_NaN();
  EXPECT_FALSE(sh->Encode(nan).ok());
  // A huge vector has a direction (its norm is taken scaled): encoded as the unit one.
  RowMatrixXd huge = RowMatrixXd::Constant(1, 3, 1e200);
  auto far = sh->Encode(huge), unit = sh->Encode(RowMatrixXd::Ones(1, 3));
  ASSERT_TRUE(far.ok() && unit.ok());
  EXPECT_LT((*far - *unit).cwiseAbs().maxCoeff(), 1e-14);
  EXPECT_FALSE(sh->Backward(RowMatrixXd::Ones(1, 3), RowMatrixXd::Zero(1, 15)).ok());
  EXPECT_FALSE(sh->EncodeAngles(RowMatrixXd::Ones(1, 3)).ok());
}

}  // namespace
}  // namespace encodings
}  // namespace gpe
