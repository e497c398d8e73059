#include "encodings/sequence/relative.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <vector>

#include <Eigen/Dense>
#include "gtest/gtest.h"

namespace gpe {
namespace encodings {
namespace sequence {
namespace {

RowMatrixXd RandomRows(int64_t r, int64_t c, std::mt19937_64& rng) {
  std::normal_distribution<double> normal;
  RowMatrixXd m(r, c);
  for (int64_t i = 0; i < r; ++i) {
    for (int64_t j = 0; j < c; ++j) m(i, j) = normal(rng);
  }
  return m;
}

// Reference clip from the formula, in long double (exact for |j - i| < 2^64).
int64_t RefLabel(int64_t i, int64_t j, int64_t k) {
  const long double diff = static_cast<long double>(j) - static_cast<long double>(i);
  const long double c = std::max<long double>(-k, std::min<long double>(k, diff));
  return static_cast<int64_t>(c) + k;
}

// Central differences in double: every map here is linear (Shaw) or bilinear (TXL) in
// the perturbed variable, so the quotient is exact up to rounding, ~1e-16 |l| / h with
// h = 1e-4 and |l| <~ 100: 1e-10; 1e-7 relative to max(1, |grad|) is a wide margin
// while a wrong label or a missing term is O(1).
constexpr double kH = 1e-4;
constexpr double kTol = 1e-7;

void ExpectGradientMatches(const RowMatrixXd& analytic, RowMatrixXd x,
                           const std::function<double(const RowMatrixXd&)>& loss,
                           const char* what) {
  ASSERT_EQ(analytic.rows(), x.rows());
  ASSERT_EQ(analytic.cols(), x.cols());
  for (int64_t i = 0; i < x.rows(); ++i) {
    for (int64_t j = 0; j < x.cols(); ++j) {
      const double x0 = x(i, j);
      x(i, j) = x0 + kH;
      const double lp = loss(x);
      x(i, j) = x0 - kH;
      const double lm = loss(x);
      x(i, j) = x0;
      const double fd = (lp - lm) / (2 * kH);
      EXPECT_NEAR(analytic(i, j), fd, kTol * std::max(1.0, std::abs(fd)))
          << what << " (" << i << ", " << j << ")";
    }
  }
}

TEST(ShawRelativeTest, LabelIndexIsClippedOffset) {
  const int64_t big = std::numeric_limits<int64_t>::max(), small = std::numeric_limits<int64_t>::min();
  const std::vector<int64_t> ps = {0, 1, -1, 3, -7, 100, big, small, big - 2, small + 5};
  for (int64_t k : {0, 1, 3, 16}) {
    for (int64_t i : ps) {
      for (int64_t j : ps) {
        EXPECT_EQ(ShawRelative::LabelIndex(i, j, k), RefLabel(i, j, k)) << i << " " << j << " " << k;
      }
    }
  }
}

struct ShawCase {
  int64_t k, nq, nk, d, dv;
};

class ShawRelativeCases : public ::testing::TestWithParam<ShawCase> {};

TEST_P(ShawRelativeCases, ForwardMatchesReferenceAndIsRelative) {
  const ShawCase c = GetParam();
  std::mt19937_64 rng(61 + c.k + c.nk);
  auto shaw = ShawRelative::Create(c.k, RandomRows(2 * c.k + 1, c.d, rng),
                                   RandomRows(2 * c.k + 1, c.dv, rng));
  ASSERT_TRUE(shaw.ok()) << shaw.status();
  std::uniform_int_distribution<int64_t> pos(-20, 20);
  std::vector<int64_t> qp(c.nq), kp(c.nk);
  for (auto& p : qp) p = pos(rng);
  for (auto& p : kp) p = pos(rng);
  const RowMatrixXd q = RandomRows(c.nq, c.d, rng);
  const RowMatrixXd p = RandomRows(c.nq, c.nk, rng).cwiseAbs();
  auto scores = shaw->KeyScores(q, qp, kp);
  auto out = shaw->ValueOutput(p, qp, kp);
  ASSERT_TRUE(scores.ok() && out.ok());
  // Reference loops straight from Shaw et al. (eq. 3 and 4). Same sums in a different
  // order: ~1e-15 relative; 1e-12 absolute on O(10) values.
  for (int64_t a = 0; a < c.nq; ++a) {
    Eigen::VectorXd o = Eigen::VectorXd::Zero(c.dv);
    for (int64_t b = 0; b < c.nk; ++b) {
      const int64_t r = RefLabel(qp[a], kp[b], c.k);
      double s = 0;
      for (int64_t t = 0; t < c.d; ++t) s += q(a, t) * shaw->key_table()(r, t);
      EXPECT_NEAR((*scores)(a, b), s, 1e-12);
      for (int64_t t = 0; t < c.dv; ++t) o[t] += p(a, b) * shaw->value_table()(r, t);
    }
    for (int64_t t = 0; t < c.dv; ++t) EXPECT_NEAR((*out)(a, t), o[t], 1e-12);
  }
  // Relativity: shifting every position by the same amount changes nothing (bit for
  // bit: the labels are identical).
  std::vector<int64_t> qs = qp, ks = kp;
  for (auto& x : qs) x += int64_t{1} << 50;
  for (auto& x : ks) x += int64_t{1} << 50;
  auto scores2 = shaw->KeyScores(q, qs, ks);
  auto out2 = shaw->ValueOutput(p, qs, ks);
  ASSERT_TRUE(scores2.ok() && out2.ok());
  EXPECT_EQ(*scores2, *scores);
  EXPECT_EQ(*out2, *out);
}

TEST_P(ShawRelativeCases, BackwardMatchesFiniteDifferences) {
  const ShawCase c = GetParam();
  std::mt19937_64 rng(71 + c.k + c.nk);
  const RowMatrixXd key_table = RandomRows(2 * c.k + 1, c.d, rng);
  const RowMatrixXd value_table = RandomRows(2 * c.k + 1, c.dv, rng);
  auto shaw = ShawRelative::Create(c.k, key_table, value_table);
  ASSERT_TRUE(shaw.ok());
  std::uniform_int_distribution<int64_t> pos(-10, 10);
  std::vector<int64_t> qp(c.nq), kp(c.nk);
  for (auto& p : qp) p = pos(rng);
  for (auto& p : kp) p = pos(rng);
  const RowMatrixXd q = RandomRows(c.nq, c.d, rng);
  const RowMatrixXd p = RandomRows(c.nq, c.nk, rng);
  const RowMatrixXd gs = RandomRows(c.nq, c.nk, rng);
  const RowMatrixXd go = RandomRows(c.nq, c.dv, rng);

  RowMatrixXd grad_q, grad_kt = RowMatrixXd::Zero(2 * c.k + 1, c.d);
  ASSERT_TRUE(shaw->KeyScoresBackward(q, qp, kp, gs, &grad_q, &grad_kt).ok());
  ExpectGradientMatches(grad_q, q, [&](const RowMatrixXd& x) {
    return (shaw->KeyScores(x, qp, kp)->array() * gs.array()).sum();
  }, "dq");
  ExpectGradientMatches(grad_kt, key_table, [&](const RowMatrixXd& t) {
    auto s2 = ShawRelative::Create(c.k, t, value_table);
    return (s2->KeyScores(q, qp, kp)->array() * gs.array()).sum();
  }, "daK");

  RowMatrixXd grad_p, grad_vt = RowMatrixXd::Zero(2 * c.k + 1, c.dv);
  ASSERT_TRUE(shaw->ValueOutputBackward(p, qp, kp, go, &grad_p, &grad_vt).ok());
  ExpectGradientMatches(grad_p, p, [&](const RowMatrixXd& x) {
    return (shaw->ValueOutput(x, qp, kp)->array() * go.array()).sum();
  }, "dp");
  ExpectGradientMatches(grad_vt, value_table, [&](const RowMatrixXd& t) {
    auto s2 = ShawRelative::Create(c.k, key_table, t);
    return (s2->ValueOutput(p, qp, kp)->array() * go.array()).sum();
  }, "daV");

  // Table gradients accumulate across calls.
  ASSERT_TRUE(shaw->KeyScoresBackward(q, qp, kp, gs, nullptr, &grad_kt).ok());
  RowMatrixXd once = RowMatrixXd::Zero(2 * c.k + 1, c.d);
  ASSERT_TRUE(shaw->KeyScoresBackward(q, qp, kp, gs, nullptr, &once).ok());
  EXPECT_LT((grad_kt - 2.0 * once).cwiseAbs().maxCoeff(), 1e-12);
}

// Both code paths: fewer keys than labels (direct dots) and more (per-label gather).
INSTANTIATE_TEST_SUITE_P(Shapes, ShawRelativeCases,
                         ::testing::Values(ShawCase{0, 3, 4, 2, 3}, ShawCase{2, 5, 7, 4, 3},
                                           ShawCase{8, 4, 5, 3, 2}, ShawCase{3, 6, 20, 5, 5}));

TEST(ShawRelativeTest, RejectsBadInput) {
  std::mt19937_64 rng(81);
  EXPECT_FALSE(ShawRelative::Create(-1, RandomRows(1, 2, rng), RandomRows(1, 2, rng)).ok());
  EXPECT_FALSE(ShawRelative::Create(2, RandomRows(4, 2, rng), RandomRows(5, 2, rng)).ok());
  EXPECT_FALSE(ShawRelative::Create(2, RandomRows(5, 2, rng), RandomRows(5, 0, rng)).ok());
  RowMatrixXd nan_t = RandomRows(5, 2, rng);
  nan_t(3, 1) = NAN;
  EXPECT_FALSE(ShawRelative::Create(2, nan_t, RandomRows(5, 2, rng)).ok());
  auto shaw = ShawRelative::Create(2, RandomRows(5, 3, rng), RandomRows(5, 2, rng));
  ASSERT_TRUE(shaw.ok());
  const std::vector<int64_t> qp = {0, 1}, kp = {0, 1, 2};
  EXPECT_FALSE(shaw->KeyScores(RandomRows(2, 4, rng), qp, kp).ok());
  EXPECT_FALSE(shaw->KeyScores(RandomRows(3, 3, rng), qp, kp).ok());
  EXPECT_FALSE(shaw->ValueOutput(RandomRows(2, 2, rng), qp, kp).ok());
  RowMatrixXd wrong = RowMatrixXd::Zero(4, 3), gq;
  EXPECT_FALSE(shaw->KeyScoresBackward(RandomRows(2, 3, rng), qp, kp, RandomRows(2, 3, rng), &gq,
                                       &wrong)
                   .ok());
  EXPECT_FALSE(shaw->KeyScoresBackward(RandomRows(2, 3, rng), qp, kp, RandomRows(3, 2, rng), &gq,
                                       nullptr)
                   .ok());
  EXPECT_FALSE(shaw->ValueOutputBackward(RandomRows(2, 3, rng), qp, kp, RandomRows(2, 3, rng),
                                         nullptr, nullptr)
                   .ok());
}

// ---------------------------------------------------------------------------------
// Transformer-XL
// ---------------------------------------------------------------------------------

TransformerXLParams RandomTxl(int64_t d, int64_t dr, std::mt19937_64& rng) {
  TransformerXLParams p;
  p.w_r = RandomRows(d, dr, rng);
  p.u = RandomRows(d, 1, rng);
  p.v = RandomRows(d, 1, rng);
  return p;
}

TEST(TransformerXLTest, MatchesReferenceFormulaAndIsRelative) {
  std::mt19937_64 rng(91);
  const int64_t d = 5, dr = 8, nq = 4, nk = 6;
  const TransformerXLParams params = RandomTxl(d, dr, rng);
  const RowMatrixXd q = RandomRows(nq, d, rng), k = RandomRows(nk, d, rng);
  const std::vector<int64_t> qp = {10, 11, 12, 40}, kp = {0, 3, 10, 11, 12, 50};
  auto e = TransformerXLScoreTerms(q, k, qp, kp, params);
  ASSERT_TRUE(e.ok()) << e.status();
  for (int64_t a = 0; a < nq; ++a) {
    for (int64_t b = 0; b < nk; ++b) {
      // R_{i-j} from Vaswani's formula directly (|i - j| <= 50: the double angle is
      // accurate to ~1e-14), then the three terms as written by Dai et al.
      Eigen::VectorXd r(dr);
      for (int64_t c = 0; c < dr; ++c) {
        const double angle = static_cast<double>(qp[a] - kp[b]) / std::pow(10000.0, 2.0 * (c / 2) / dr);
        r[c] = c % 2 == 0 ? std::sin(angle) : std::cos(angle);
      }
      const Eigen::VectorXd wr = params.w_r * r;
      const double ref = q.row(a).dot(wr) + params.u.dot(k.row(b)) + params.v.dot(wr);
      // O(d dr) products of O(1) terms, ~1e-13 absolute.
      EXPECT_NEAR((*e)(a, b), ref, 1e-12) << a << " " << b;
    }
  }
  // Relativity of the position terms: shifting all positions together (here by 2^40,
  // with exact angle reduction) leaves every term unchanged to rounding.
  std::vector<int64_t> qs = qp, ks = kp;
  for (auto& x : qs) x += int64_t{1} << 40;
  for (auto& x : ks) x += int64_t{1} << 40;
  auto e2 = TransformerXLScoreTerms(q, k, qs, ks, params);
  ASSERT_TRUE(e2.ok());
  EXPECT_EQ(*e2, *e);  // same distances, same R: bit for bit
}

TEST(TransformerXLTest, BackwardMatchesFiniteDifferences) {
  std::mt19937_64 rng(92);
  const int64_t d = 4, dr = 6, nq = 3, nk = 5;
  const TransformerXLParams params = RandomTxl(d, dr, rng);
  const RowMatrixXd q = RandomRows(nq, d, rng), k = RandomRows(nk, d, rng);
  const std::vector<int64_t> qp = {2, 5, 9}, kp = {0, 1, 5, 9, 12};
  const RowMatrixXd g = RandomRows(nq, nk, rng);
  TransformerXLGradients grads;
  ASSERT_TRUE(TransformerXLScoreTermsBackward(q, k, qp, kp, params, g, &grads).ok());
  auto loss = [&](const RowMatrixXd& qq, const RowMatrixXd& kk, const TransformerXLParams& pp) {
    auto e = TransformerXLScoreTerms(qq, kk, qp, kp, pp);
    EXPECT_TRUE(e.ok());
    return (e->array() * g.array()).sum();
  };
  ExpectGradientMatches(grads.q, q, [&](const RowMatrixXd& x) { return loss(x, k, params); }, "dq");
  ExpectGradientMatches(grads.k, k, [&](const RowMatrixXd& x) { return loss(q, x, params); }, "dk");
  ExpectGradientMatches(grads.w_r, params.w_r, [&](const RowMatrixXd& x) {
    TransformerXLParams p2 = params;
    p2.w_r = x;
    return loss(q, k, p2);
  }, "dW_R");
  ExpectGradientMatches(RowMatrixXd(grads.u.transpose()), RowMatrixXd(params.u.transpose()),
                        [&](const RowMatrixXd& x) {
                          TransformerXLParams p2 = params;
                          p2.u = x.row(0).transpose();
                          return loss(q, k, p2);
                        },
                        "du");
  ExpectGradientMatches(RowMatrixXd(grads.v.transpose()), RowMatrixXd(params.v.transpose()),
                        [&](const RowMatrixXd& x) {
                          TransformerXLParams p2 = params;
                          p2.v = x.row(0).transpose();
                          return loss(q, k, p2);
                        },
                        "dv");
}

// A NaN in q (or an inf in k) reaches dW_R (du) through the zero entries of the upstream
// gradient too, as PyTorch's autograd gives 0 * NaN = NaN: a zero g_ab is skipped only
// when q_a and k_b are finite. dq and dk stay finite (they multiply g by the finite
// parameters).
TEST(TransformerXLTest, NonFiniteInputsReachTheGradientsThroughZeroUpstream) {
  std::mt19937_64 rng(94);
  const TransformerXLParams params = RandomTxl(3, 4, rng);
  RowMatrixXd q = RandomRows(2, 3, rng), k = RandomRows(2, 3, rng);
  const std::vector<int64_t> ps = {0, 1};
  const RowMatrixXd zero = RowMatrixXd::Zero(2, 2);
  q(0, 1) = NAN;
  TransformerXLGradients grads;
  ASSERT_TRUE(TransformerXLScoreTermsBackward(q, k, ps, ps, params, zero, &grads).ok());
  EXPECT_TRUE(grads.w_r.array().isNaN().any());
  EXPECT_TRUE(grads.u.allFinite());
  EXPECT_TRUE(grads.q.allFinite() && grads.k.allFinite());
  q(0, 1) = 0.5;
  k(1, 2) = INFINITY;
  ASSERT_TRUE(TransformerXLScoreTermsBackward(q, k, ps, ps, params, zero, &grads).ok());
  EXPECT_TRUE(grads.u.array().isNaN().any());
  EXPECT_TRUE(grads.w_r.allFinite());
  // Finite inputs and a zero upstream gradient: every gradient exactly 0.
  k(1, 2) = 0.25;
  ASSERT_TRUE(TransformerXLScoreTermsBackward(q, k, ps, ps, params, zero, &grads).ok());
  EXPECT_EQ(grads.w_r.cwiseAbs().maxCoeff() + grads.u.cwiseAbs().maxCoeff(), 0.0);
}

TEST(TransformerXLTest, RejectsBadInput) {
  std::mt19937_64 rng(93);
  TransformerXLParams params = RandomTxl(3, 4, rng);
  const RowMatrixXd q = RandomRows(2, 3, rng), k = RandomRows(2, 3, rng);
  const std::vector<int64_t> ps = {0, 1};
  EXPECT_TRUE(TransformerXLScoreTerms(q, k, ps, ps, params).ok());
  EXPECT_FALSE(TransformerXLScoreTerms(RandomRows(2, 4, rng), k, ps, ps, params).ok());
  EXPECT_FALSE(TransformerXLScoreTerms(q, RandomRows(3, 3, rng), ps, ps, params).ok());
  const std::vector<int64_t> extreme = {std::numeric_limits<int64_t>::max(), 0};
  const std::vector<int64_t> neg = {-2, 0};
  EXPECT_EQ(TransformerXLScoreTerms(q, k, extreme, neg, params).status().code(),
            absl::StatusCode::kOutOfRange);
  TransformerXLParams bad = params;
  bad.u = Eigen::VectorXd::Zero(2);
  EXPECT_FALSE(TransformerXLScoreTerms(q, k, ps, ps, bad).ok());
  bad = params;
  bad.v[1] = NAN;
  EXPECT_FALSE(TransformerXLScoreTerms(q, k, ps, ps, bad).ok());
  bad = params;
  bad.base = -1.0;
  EXPECT_FALSE(TransformerXLScoreTerms(q, k, ps, ps, bad).ok());
  TransformerXLGradients grads;
  EXPECT_FALSE(TransformerXLScoreTermsBackward(q, k, ps, ps, params, RandomRows(3, 2, rng), &grads).ok());
  EXPECT_FALSE(TransformerXLScoreTermsBackward(q, k, ps, ps, params, RandomRows(2, 2, rng), nullptr).ok());
}

}  // namespace
}  // namespace sequence
}  // namespace encodings
}  // namespace gpe
