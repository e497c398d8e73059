#include "encodings/sequence/algebraic.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <tuple>
#include <vector>

#include <Eigen/Dense>
#include "gtest/gtest.h"
#include "group/free_group.h"
#include "group/so_dense.h"

namespace gpe {
namespace encodings {
namespace sequence {
namespace {

Eigen::MatrixXd RandomMatrix(int64_t r, int64_t c, std::mt19937_64& rng) {
  std::normal_distribution<double> normal;
  Eigen::MatrixXd m(r, c);
  for (int64_t i = 0; i < r; ++i) {
    for (int64_t j = 0; j < c; ++j) m(i, j) = normal(rng);
  }
  return m;
}

Eigen::MatrixXd RandomSkew(int64_t d, double scale, std::mt19937_64& rng) {
  const Eigen::MatrixXd a = RandomMatrix(d, d, rng);
  return scale * 0.5 * (a - a.transpose());
}

Eigen::VectorXd RandomVec(int64_t d, std::mt19937_64& rng) { return RandomMatrix(d, 1, rng); }

// ---------------------------------------------------------------------------------
// Sequences
// ---------------------------------------------------------------------------------

TEST(AlgebraicSequenceTest, PowersAreExponentialsOfTheGenerator) {
  std::mt19937_64 rng(31);
  const Eigen::MatrixXd s = RandomSkew(7, 0.5, rng);
  auto seq = AlgebraicSequence::Create(s);
  ASSERT_TRUE(seq.ok()) << seq.status();
  auto w = group::SkewExp(s);
  ASSERT_TRUE(w.ok());
  for (int64_t p : {-5, -1, 0, 1, 2, 9}) {
    // W^p by explicit multiplication of W (|p| <= 9 products of an orthogonal matrix,
    // each ~1e-15), against the Schur route: 1e-13.
    Eigen::MatrixXd ref = Eigen::MatrixXd::Identity(7, 7);
    for (int64_t r = 0; r < std::abs(p); ++r) ref = ref * (p > 0 ? *w : w->transpose());
    EXPECT_LT((seq->Matrix(p) - ref).cwiseAbs().maxCoeff(), 1e-13) << p;
  }
}

TEST(AlgebraicSequenceTest, RelativityAndNormPreservationAtLargePositions) {
  std::mt19937_64 rng(32);
  const int64_t d = 8;
  auto seq = AlgebraicSequence::Create(RandomSkew(d, 1.0, rng));
  ASSERT_TRUE(seq.ok());
  const std::vector<int64_t> ps = {0, 3, -11, int64_t{1} << 31, -(int64_t{1} << 45), int64_t{1} << 50};
  for (int64_t i : ps) {
    for (int64_t j : ps) {
      const Eigen::VectorXd q = RandomVec(d, rng), k = RandomVec(d, rng);
      Eigen::VectorXd wq(d), wk(d), wd(d);
      const std::vector<int64_t> pi = {i}, pj = {j}, pd = {j - i};
      ASSERT_TRUE(seq->Apply<double>(pi, q.data(), d, wq.data(), d).ok());
      ASSERT_TRUE(seq->Apply<double>(pj, k.data(), d, wk.data(), d).ok());
      ASSERT_TRUE(seq->Apply<double>(pd, k.data(), d, wd.data(), d).ok());
      // Schur route: orthogonal to ~2e-15 at every p (so_dense.h), angles reduced
      // exactly; a d = 8 score of O(1) entries is then exact to ~1e-13. Powering a
      // rounded W instead would drift by ~1e-6 at 2^31 and fail.
      EXPECT_NEAR(wq.dot(wk), q.dot(wd), 1e-12) << i << " " << j;
      EXPECT_NEAR(wq.norm(), q.norm(), 1e-13 * q.norm());
    }
  }
}

TEST(AlgebraicSequenceTest, BackwardMatchesFiniteDifferences) {
  std::mt19937_64 rng(33);
  const int64_t d = 4, n = 5;
  const Eigen::MatrixXd a0 = 0.4 * RandomMatrix(d, d, rng);
  const std::vector<int64_t> ps = {2, -1, 0, 3, 2};  // repeated position 2
  const Eigen::MatrixXd x = RandomMatrix(n, d, rng).transpose();  // column j = x_j
  const Eigen::MatrixXd g = RandomMatrix(n, d, rng).transpose();
  auto loss_of = [&](const Eigen::MatrixXd& a, const Eigen::MatrixXd& xx) {
    auto seq = AlgebraicSequence::Create(a - a.transpose());
    EXPECT_TRUE(seq.ok());
    Eigen::MatrixXd y(d, n);
    EXPECT_TRUE(seq->Apply<double>(ps, xx.data(), d, y.data(), d).ok());
    return (y.array() * g.array()).sum();
  };
  auto seq = AlgebraicSequence::Create(a0 - a0.transpose());
  ASSERT_TRUE(seq.ok());
  Eigen::MatrixXd grad_s, grad_in(d, n);
  ASSERT_TRUE(seq->Backward<double>(ps, x.data(), d, g.data(), d, grad_in.data(), d, &grad_s).ok());
  const Eigen::MatrixXd grad_a = grad_s - grad_s.transpose();  // S = A - A^T
  // Central differences, h = 1e-5: truncation ~h^2 |l'''| with |p S| <~ 4 and O(1)
  // data is ~1e-9, rounding ~1e-16 |l| / h ~ 1e-10; 1e-6 relative to max(1, |grad|)
  // leaves room while a missing factor p or a transpose error is O(1).
  const double h = 1e-5;
  for (int64_t r = 0; r < d; ++r) {
    for (int64_t c = 0; c < d; ++c) {
      Eigen::MatrixXd ap = a0, am = a0;
      ap(r, c) += h;
      am(r, c) -= h;
      const double fd = (loss_of(ap, x) - loss_of(am, x)) / (2 * h);
      EXPECT_NEAR(grad_a(r, c), fd, 1e-6 * std::max(1.0, std::abs(fd))) << r << " " << c;
    }
  }
  for (int64_t i = 0; i < d * n; ++i) {
    Eigen::MatrixXd xp = x, xm = x;
    xp.data()[i] += h;
    xm.data()[i] -= h;
    const double fd = (loss_of(a0, xp) - loss_of(a0, xm)) / (2 * h);
    EXPECT_NEAR(grad_in.data()[i], fd, 1e-6 * std::max(1.0, std::abs(fd))) << i;
  }
  // grad_in may alias grad_out exactly.
  Eigen::MatrixXd g2 = g, unused;
  ASSERT_TRUE(seq->Backward<double>(ps, x.data(), d, g2.data(), d, g2.data(), d, &unused).ok());
  EXPECT_EQ(g2, grad_in);
  // Extreme positions: -INT64_MIN does not exist, so W^{-p} g goes through (W^p)^T;
  // compare with the dense transpose (both orthogonal to ~1e-15: 1e-13).
  const std::vector<int64_t> extreme = {std::numeric_limits<int64_t>::min(),
                                        std::numeric_limits<int64_t>::max()};
  const Eigen::MatrixXd xe = RandomMatrix(d, 2, rng), ge = RandomMatrix(d, 2, rng);
  Eigen::MatrixXd gie(d, 2), gse;
  ASSERT_TRUE(seq->Backward<double>(extreme, xe.data(), d, ge.data(), d, gie.data(), d, &gse).ok());
  for (int c = 0; c < 2; ++c) {
    const Eigen::VectorXd ref = seq->Matrix(extreme[c]).transpose() * ge.col(c);
    EXPECT_LT((gie.col(c) - ref).cwiseAbs().maxCoeff(), 1e-13) << extreme[c];
  }
  EXPECT_TRUE(gse.allFinite());
}

TEST(AlgebraicSequenceTest, SchurRouteGradientMatchesExpVjp) {
  // Independent route: group::ExpVjp (Pade on the 2d x 2d block matrix) per sample,
  // dl/dS = sum_j p_j ExpVjp(p_j S, g_j x_j^T). At |p S| <~ 50 its relative error is
  // ~1e-14 * 2^6; 1e-10 relative to the largest entry separates rounding from any
  // wrong divided difference or basis convention (O(1) relative errors).
  std::mt19937_64 rng(34);
  const int64_t d = 7;  // odd: one fixed direction (zero eigenvalue)
  const Eigen::MatrixXd s = RandomSkew(d, 0.7, rng);
  auto seq = AlgebraicSequence::Create(s);
  ASSERT_TRUE(seq.ok());
  const std::vector<int64_t> ps = {5, -7, 20, 1, 5};
  const int64_t n = static_cast<int64_t>(ps.size());
  const Eigen::MatrixXd x = RandomMatrix(d, n, rng), g = RandomMatrix(d, n, rng);
  Eigen::MatrixXd grad;
  ASSERT_TRUE(seq->Backward<double>(ps, x.data(), d, g.data(), d, nullptr, d, &grad).ok());
  Eigen::MatrixXd ref = Eigen::MatrixXd::Zero(d, d);
  for (int64_t j = 0; j < n; ++j) {
    const double p = static_cast<double>(ps[j]);
    auto v = group::ExpVjp(p * s, g.col(j) * x.col(j).transpose());
    ASSERT_TRUE(v.ok());
    ref += p * *v;
  }
  EXPECT_LT((grad - ref).cwiseAbs().maxCoeff(), 1e-10 * ref.cwiseAbs().maxCoeff());
}

TEST(AlgebraicSequenceTest, RejectsBadInput) {
  EXPECT_FALSE(AlgebraicSequence::Create(Eigen::MatrixXd(0, 0)).ok());
  EXPECT_FALSE(AlgebraicSequence::Create(Eigen::MatrixXd::Ones(3, 3)).ok());  // not skew
  EXPECT_FALSE(AlgebraicSequence::Create(Eigen::MatrixXd::Zero(2, 3)).ok());
  Eigen::MatrixXd nan_s = Eigen::MatrixXd::Zero(2, 2);
  nan_s(0, 1) = NAN;
  nan_s(1, 0) = NAN;
  EXPECT_FALSE(AlgebraicSequence::Create(nan_s).ok());
  auto seq = AlgebraicSequence::Create(Eigen::MatrixXd::Zero(2, 2));
  ASSERT_TRUE(seq.ok());
  std::vector<double> buf(4);
  const std::vector<int64_t> ps = {1, 2};
  EXPECT_FALSE(seq->Apply<double>(ps, buf.data(), 1, buf.data(), 1).ok());
  EXPECT_FALSE(seq->Backward<double>(ps, buf.data(), 2, buf.data(), 2, nullptr, 2, nullptr).ok());
  Eigen::MatrixXd gs;
  EXPECT_FALSE(seq->Backward<double>(ps, nullptr, 2, buf.data(), 2, nullptr, 2, &gs).ok());
}

// ---------------------------------------------------------------------------------
// Trees
// ---------------------------------------------------------------------------------

std::vector<Eigen::MatrixXd> RandomSkews(int k, int64_t d, std::mt19937_64& rng) {
  std::vector<Eigen::MatrixXd> s;
  for (int c = 0; c < k; ++c) s.push_back(RandomSkew(d, 0.8, rng));
  return s;
}

TEST(AlgebraicTreeTest, LevelByLevelTableMatchesPathProducts) {
  std::mt19937_64 rng(41);
  const int k = 3;
  const int64_t d = 5, depth = 4;
  const auto skews = RandomSkews(k, d, rng);
  auto tree = AlgebraicTree::Create(skews);
  ASSERT_TRUE(tree.ok()) << tree.status();
  std::vector<Eigen::MatrixXd> w;  // independent generator matrices
  for (const auto& s : skews) w.push_back(*group::SkewExp(s));
  auto table = tree->AllNodeMatrices(depth);
  ASSERT_TRUE(table.ok()) << table.status();
  ASSERT_EQ(table->size(), static_cast<size_t>(1 + 3 + 9 + 27 + 81));
  // Enumerate addresses in level order (depth, then lexicographic) and compare each
  // entry with the path product W_{c_1} ... W_{c_m} formed directly; <= 4 products of
  // orthogonal matrices, ~1e-15 each: 1e-13.
  int64_t index = 0;
  for (int64_t m = 0; m <= depth; ++m) {
    const int64_t count = static_cast<int64_t>(std::pow(k, m));
    for (int64_t code = 0; code < count; ++code) {
      std::vector<int64_t> address(m);
      int64_t rest = code;
      for (int64_t s = m - 1; s >= 0; --s) {
        address[s] = rest % k;
        rest /= k;
      }
      Eigen::MatrixXd ref = Eigen::MatrixXd::Identity(d, d);
      for (int64_t c : address) ref = ref * w[c];
      auto idx = tree->LevelOrderIndex(address);
      ASSERT_TRUE(idx.ok());
      EXPECT_EQ(*idx, index);
      EXPECT_LT(((*table)[index] - ref).cwiseAbs().maxCoeff(), 1e-13) << "node " << index;
      auto mat = tree->Matrix(address);
      ASSERT_TRUE(mat.ok());
      EXPECT_LT((*mat - ref).cwiseAbs().maxCoeff(), 1e-13);
      ++index;
    }
  }
}

double TreeScore(const AlgebraicTree& tree, const std::vector<int64_t>& g, const Eigen::VectorXd& q,
                 const std::vector<int64_t>& h, const Eigen::VectorXd& k) {
  const int64_t d = tree.dim();
  const std::vector<AlgebraicTree::Address> ag = {g}, ah = {h};
  Eigen::VectorXd rq(d), rk(d);
  EXPECT_TRUE(tree.Apply<double>(ag, q.data(), d, rq.data(), d).ok());
  EXPECT_TRUE(tree.Apply<double>(ah, k.data(), d, rk.data(), d).ok());
  return rq.dot(rk);
}

std::vector<int64_t> Concat(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  std::vector<int64_t> c = a;
  c.insert(c.end(), b.begin(), b.end());
  return c;
}

TEST(AlgebraicTreeTest, ScoresDependOnlyOnTheRelativePath) {
  std::mt19937_64 rng(42);
  const int k = 2;
  const int64_t d = 6;
  auto tree = AlgebraicTree::Create(RandomSkews(k, d, rng));
  ASSERT_TRUE(tree.ok());
  auto random_address = [&](int max_len) {
    std::vector<int64_t> a(rng() % (max_len + 1));
    for (int64_t& c : a) c = static_cast<int64_t>(rng() % k);
    return a;
  };
  for (int trial = 0; trial < 20; ++trial) {
    const std::vector<int64_t> g = random_address(4), h = random_address(4);
    const std::vector<int64_t> prefix = random_address(5);
    const Eigen::VectorXd q = RandomVec(d, rng), kv = RandomVec(d, rng);
    // <rho(g) q, rho(h) k> = <q, rho(g^-1 h) k> with the free group's relative path.
    auto wg = tree->Word(g), wh = tree->Word(h);
    ASSERT_TRUE(wg.ok() && wh.ok());
    auto rel = tree->representation().group().RelativePath(*wg, *wh);
    ASSERT_TRUE(rel.ok());
    auto rel_m = tree->representation().Matrix(*rel);
    ASSERT_TRUE(rel_m.ok());
    const double s = TreeScore(*tree, g, q, h, kv);
    // Orthogonal path products preserve norms (<rho(g) q, rho(g) q> = |q|^2).
    EXPECT_NEAR(TreeScore(*tree, g, q, g, q), q.squaredNorm(), 1e-12 * q.squaredNorm());
    // Path products of <= 9 orthogonal factors: ~1e-14 on an O(1) score.
    EXPECT_NEAR(s, q.dot(*rel_m * kv), 1e-12);
    // The pair (prefix g, prefix h) has the same relative path, so the same score.
    const std::vector<int64_t> g2 = Concat(prefix, g), h2 = Concat(prefix, h);
    auto wg2 = tree->Word(g2), wh2 = tree->Word(h2);
    ASSERT_TRUE(wg2.ok() && wh2.ok());
    auto rel2 = tree->representation().group().RelativePath(*wg2, *wh2);
    ASSERT_TRUE(rel2.ok());
    ASSERT_EQ(*rel2, *rel);
    EXPECT_NEAR(TreeScore(*tree, g2, q, h2, kv), s, 1e-12) << "trial " << trial;
  }
  // Non-commutativity is visible: sibling paths (0, 1) and (1, 0) give different
  // matrices (generic generators; differences are O(1), 1e-6 only excludes rounding).
  auto m01 = tree->Matrix({0, 1}), m10 = tree->Matrix({1, 0});
  ASSERT_TRUE(m01.ok() && m10.ok());
  EXPECT_GT((*m01 - *m10).cwiseAbs().maxCoeff(), 1e-6);
}

// Generators within ValidateSkew's tolerance but not exactly skew (|S| = 1000, S + S^T of
// 9e-10, inside 1e-12 max(1, |S|)): the sequence took them, the tree refused them (exp
// of the raw S was 2.3e-10 off orthogonal). Both take the skew part now: the tree's
// node matrices are orthogonal to 1e-12 (exp of an exactly skew S of norm ~1e3, scaling
// and squaring: ~1e-13).
TEST(AlgebraicTreeTest, NearlySkewGeneratorsAreTakenAsTheirSkewPart) {
  std::mt19937_64 rng(44);
  std::vector<Eigen::MatrixXd> skews = RandomSkews(2, 4, rng);
  for (Eigen::MatrixXd& s : skews) {
    s *= 1000.0 / s.cwiseAbs().maxCoeff();
    s(0, 1) += 9e-10;  // asymmetric part 4.5e-10
  }
  auto tree = AlgebraicTree::Create(skews);
  ASSERT_TRUE(tree.ok()) << tree.status();
  for (const std::vector<int64_t>& address : {std::vector<int64_t>{0}, {1, 0, 1}}) {
    const Eigen::MatrixXd w = *tree->Matrix(address);
    EXPECT_LT((w.transpose() * w - Eigen::MatrixXd::Identity(4, 4)).cwiseAbs().maxCoeff(), 1e-12);
  }
}

TEST(AlgebraicTreeTest, RejectsBadInput) {
  std::mt19937_64 rng(43);
  EXPECT_FALSE(AlgebraicTree::Create({}).ok());
  EXPECT_FALSE(AlgebraicTree::Create({RandomSkew(3, 1.0, rng), RandomSkew(4, 1.0, rng)}).ok());
  EXPECT_FALSE(AlgebraicTree::Create({Eigen::MatrixXd::Ones(3, 3)}).ok());
  auto tree = AlgebraicTree::Create(RandomSkews(2, 3, rng));
  ASSERT_TRUE(tree.ok());
  EXPECT_FALSE(tree->Matrix({0, 2}).ok());
  EXPECT_FALSE(tree->Matrix({-1}).ok());
  EXPECT_FALSE(tree->LevelOrderIndex({0, 5}).ok());
  EXPECT_EQ(tree->LevelOrderIndex(std::vector<int64_t>(70, 1)).status().code(),
            absl::StatusCode::kOutOfRange);
  // The deepest binary-tree nodes that fit: 63 zeros is index 2^63 - 1 (refused before,
  // by a check of the next level's size after the last step); one 1 more overflows.
  EXPECT_EQ(*tree->LevelOrderIndex(std::vector<int64_t>(63, 0)),
            std::numeric_limits<int64_t>::max());
  std::vector<int64_t> past(63, 0);
  past.back() = 1;
  EXPECT_EQ(tree->LevelOrderIndex(past).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_FALSE(tree->AllNodeMatrices(-1).ok());
  EXPECT_EQ(tree->AllNodeMatrices(40).status().code(), absl::StatusCode::kResourceExhausted);
  const std::vector<AlgebraicTree::Address> bad = {{0}, {3}};
  std::vector<double> buf(6);
  EXPECT_FALSE(tree->Apply<double>(bad, buf.data(), 3, buf.data(), 3).ok());
}

// ---------------------------------------------------------------------------------
// Grids, periodic domains, locality
// ---------------------------------------------------------------------------------

TEST(AlgebraicGridTest, ScoresAreSumsOfPerAxisRelativeTerms) {
  std::mt19937_64 rng(51);
  const int64_t dx = 4, dy = 6, d = dx + dy;
  const Eigen::MatrixXd sx = RandomSkew(dx, 1.0, rng), sy = RandomSkew(dy, 1.0, rng);
  auto grid = MakeAlgebraicGrid2D(sx, sy);
  ASSERT_TRUE(grid.ok()) << grid.status();
  auto hx = AlgebraicSequence::Create(sx), hy = AlgebraicSequence::Create(sy);
  ASSERT_TRUE(hx.ok() && hy.ok());
  using Pos = std::tuple<int64_t, int64_t>;
  for (int trial = 0; trial < 10; ++trial) {
    const Eigen::VectorXd q = RandomVec(d, rng), k = RandomVec(d, rng);
    std::uniform_int_distribution<int64_t> u(-1000, 1000);
    const Pos a{u(rng), u(rng)}, b{u(rng), u(rng)}, shift{u(rng), u(rng)};
    auto score = [&](const Pos& pa, const Pos& pb) {
      const std::vector<Pos> ea = {pa}, eb = {pb};
      Eigen::VectorXd rq(d), rk(d);
      EXPECT_TRUE(grid->Apply<double>(ea, q.data(), d, rq.data(), d).ok());
      EXPECT_TRUE(grid->Apply<double>(eb, k.data(), d, rk.data(), d).ok());
      return rq.dot(rk);
    };
    const int64_t ddx = std::get<0>(b) - std::get<0>(a), ddy = std::get<1>(b) - std::get<1>(a);
    // Per-axis relativity: <q_x, H^dx k_x> + <q_y, W^dy k_y>; Schur route exact to
    // ~1e-15 per entry, so 1e-12 on O(1) scores.
    const double expected = q.head(dx).dot(hx->Matrix(ddx) * k.head(dx)) +
                            q.tail(dy).dot(hy->Matrix(ddy) * k.tail(dy));
    EXPECT_NEAR(score(a, b), expected, 1e-12);
    const Pos a2{std::get<0>(a) + std::get<0>(shift), std::get<1>(a) + std::get<1>(shift)};
    const Pos b2{std::get<0>(b) + std::get<0>(shift), std::get<1>(b) + std::get<1>(shift)};
    EXPECT_NEAR(score(a2, b2), expected, 1e-12);
    // Shifting only one axis of one point changes that axis's term only.
    const Pos b3{std::get<0>(b) + 1, std::get<1>(b)};
    const double expected3 = q.head(dx).dot(hx->Matrix(ddx + 1) * k.head(dx)) +
                             q.tail(dy).dot(hy->Matrix(ddy) * k.tail(dy));
    EXPECT_NEAR(score(a, b3), expected3, 1e-12);
  }
  auto grid3 = MakeAlgebraicGrid3D(sx, sy, RandomSkew(2, 1.0, rng));
  ASSERT_TRUE(grid3.ok());
  EXPECT_EQ(grid3->dim(), d + 2);
  EXPECT_FALSE(MakeAlgebraicGrid2D(sx, Eigen::MatrixXd::Ones(3, 3)).ok());
  EXPECT_FALSE(MakeAlgebraicGrid2D(Eigen::MatrixXd(0, 0), sy).ok());
}

TEST(AlgebraicTreeTest, BackwardMatchesFiniteDifferences) {
  // Learned branch generators S_c = A_c - A_c^T of a ternary tree; a batch of nodes whose
  // paths repeat branches (so one generator gets several contributions per vector).
  std::mt19937_64 rng(61);
  const int64_t d = 4, k = 3;
  std::vector<Eigen::MatrixXd> a0;
  for (int64_t c = 0; c < k; ++c) a0.push_back(0.5 * RandomMatrix(d, d, rng));
  const std::vector<AlgebraicTree::Address> nodes = {
      {}, {0}, {2, 1}, {1, 1, 0}, {0, 2, 0, 2}, {2, 2, 2}};
  const int64_t n = static_cast<int64_t>(nodes.size());
  const Eigen::MatrixXd x = RandomMatrix(d, n, rng), g = RandomMatrix(d, n, rng);
  auto make = [&](const std::vector<Eigen::MatrixXd>& a) {
    std::vector<Eigen::MatrixXd> skews;
    for (const Eigen::MatrixXd& m : a) skews.push_back(m - m.transpose());
    return *AlgebraicTree::Create(skews);
  };
  auto loss_of = [&](const std::vector<Eigen::MatrixXd>& a, const Eigen::MatrixXd& xx) {
    Eigen::MatrixXd y(d, n);
    EXPECT_TRUE(make(a).Apply<double>(nodes, xx.data(), d, y.data(), d).ok());
    return (y.array() * g.array()).sum();
  };
  const AlgebraicTree tree = make(a0);
  std::vector<Eigen::MatrixXd> grad_s;
  Eigen::MatrixXd grad_in(d, n);
  ASSERT_TRUE(
      tree.Backward<double>(nodes, x.data(), d, g.data(), d, grad_in.data(), d, &grad_s).ok());
  ASSERT_EQ(grad_s.size(), static_cast<size_t>(k));
  // Central differences in double, h = 1e-5: truncation ~h^2 |l'''| ~ 1e-9 for paths of
  // <= 4 generators with |S| ~ 1 and O(1) data, rounding ~1e-16 |l| / h ~ 1e-10; 1e-6
  // relative to max(1, |grad|) (a missing transpose or a dropped step is O(1)).
  const double h = 1e-5;
  for (int64_t c = 0; c < k; ++c) {
    const Eigen::MatrixXd grad_a = grad_s[c] - grad_s[c].transpose();  // S = A - A^T
    for (int64_t r = 0; r < d; ++r) {
      for (int64_t col = 0; col < d; ++col) {
        std::vector<Eigen::MatrixXd> ap = a0, am = a0;
        ap[c](r, col) += h;
        am[c](r, col) -= h;
        const double fd = (loss_of(ap, x) - loss_of(am, x)) / (2 * h);
        EXPECT_NEAR(grad_a(r, col), fd, 1e-6 * std::max(1.0, std::abs(fd)))
            << "branch " << c << " entry " << r << "," << col;
      }
    }
  }
  for (int64_t i = 0; i < d * n; ++i) {
    Eigen::MatrixXd xp = x, xm = x;
    xp.data()[i] += h;
    xm.data()[i] -= h;
    const double fd = (loss_of(a0, xp) - loss_of(a0, xm)) / (2 * h);
    EXPECT_NEAR(grad_in.data()[i], fd, 1e-6 * std::max(1.0, std::abs(fd))) << i;
  }
  // grad_in may alias grad_out exactly; float rows give the same gradient to float
  // rounding of the inputs (|x|, |g| ~ 1, d = 4, depth <= 4: 1e-5 relative).
  Eigen::MatrixXd g2 = g;
  std::vector<Eigen::MatrixXd> unused;
  ASSERT_TRUE(tree.Backward<double>(nodes, x.data(), d, g2.data(), d, g2.data(), d, &unused).ok());
  EXPECT_EQ(g2, grad_in);
  const Eigen::MatrixXf xf = x.cast<float>(), gf = g.cast<float>();
  std::vector<Eigen::MatrixXd> grad_f;
  ASSERT_TRUE(tree.Backward<float>(nodes, xf.data(), d, gf.data(), d, nullptr, d, &grad_f).ok());
  for (int64_t c = 0; c < k; ++c) {
    EXPECT_LT((grad_f[c] - grad_s[c]).cwiseAbs().maxCoeff(),
              1e-5 * std::max(1.0, grad_s[c].cwiseAbs().maxCoeff()));
  }
  // A branch on no path gets an exact zero; bad addresses and null outputs are errors.
  const std::vector<AlgebraicTree::Address> only0 = {{0, 0}};
  ASSERT_TRUE(tree.Backward<double>(only0, x.data(), d, g.data(), d, nullptr, d, &unused).ok());
  EXPECT_TRUE(unused[1].isZero(0.0) && unused[2].isZero(0.0));
  EXPECT_FALSE(unused[0].isZero(0.0));
  const std::vector<AlgebraicTree::Address> bad = {{3}};
  EXPECT_FALSE(tree.Backward<double>(bad, x.data(), d, g.data(), d, nullptr, d, &unused).ok());
  EXPECT_FALSE(tree.Backward<double>(only0, x.data(), d, g.data(), d, nullptr, d, nullptr).ok());
  const std::vector<AlgebraicTree::Address> two = {{0}, {1}};  // a stride matters for 2 rows
  EXPECT_FALSE(tree.Backward<double>(two, x.data(), d - 1, g.data(), d, nullptr, d, &unused).ok());
}

TEST(AlgebraicGridTest, BackwardMatchesFiniteDifferences) {
  // A 3-axis grid (video: t, y, x) of per-axis learned generators; positions include
  // negative and repeated coordinates.
  std::mt19937_64 rng(62);
  const std::vector<int64_t> dims = {2, 3, 4};
  const int64_t d = 9, n = 4;
  std::vector<Eigen::MatrixXd> a0;
  for (int64_t da : dims) a0.push_back(0.5 * RandomMatrix(da, da, rng));
  const std::vector<int64_t> pos = {0, 1, 2, -1, 3, 0, 2, 2, -2, 1, 0, 1};  // n x 3
  const Eigen::MatrixXd x = RandomMatrix(d, n, rng), g = RandomMatrix(d, n, rng);
  auto axes_of = [&](const std::vector<Eigen::MatrixXd>& a) {
    std::vector<AlgebraicSequence> axes;
    for (const Eigen::MatrixXd& m : a) axes.push_back(*AlgebraicSequence::Create(m - m.transpose()));
    return axes;
  };
  // The forward through the grid representation itself (an independent code path).
  auto loss_of = [&](const std::vector<Eigen::MatrixXd>& a, const Eigen::MatrixXd& xx) {
    auto grid = MakeAlgebraicGrid3D(a[0] - a[0].transpose(), a[1] - a[1].transpose(),
                                    a[2] - a[2].transpose());
    EXPECT_TRUE(grid.ok());
    std::vector<std::tuple<int64_t, int64_t, int64_t>> e;
    for (int64_t j = 0; j < n; ++j) e.emplace_back(pos[3 * j], pos[3 * j + 1], pos[3 * j + 2]);
    Eigen::MatrixXd y(d, n);
    EXPECT_TRUE(grid->Apply<double>(e, xx.data(), d, y.data(), d).ok());
    return (y.array() * g.array()).sum();
  };
  const std::vector<AlgebraicSequence> axes = axes_of(a0);
  std::vector<Eigen::MatrixXd> grad_s;
  Eigen::MatrixXd grad_in(d, n);
  ASSERT_TRUE(AlgebraicGridBackward<double>(axes, pos, x.data(), d, g.data(), d, grad_in.data(),
                                            d, &grad_s)
                  .ok());
  ASSERT_EQ(grad_s.size(), 3u);
  // As for the tree: h = 1e-5, 1e-6 relative to max(1, |grad|).
  const double h = 1e-5;
  for (size_t a = 0; a < 3; ++a) {
    const Eigen::MatrixXd grad_a = grad_s[a] - grad_s[a].transpose();
    for (int64_t r = 0; r < dims[a]; ++r) {
      for (int64_t c = 0; c < dims[a]; ++c) {
        std::vector<Eigen::MatrixXd> ap = a0, am = a0;
        ap[a](r, c) += h;
        am[a](r, c) -= h;
        const double fd = (loss_of(ap, x) - loss_of(am, x)) / (2 * h);
        EXPECT_NEAR(grad_a(r, c), fd, 1e-6 * std::max(1.0, std::abs(fd))) << a << " " << r << c;
      }
    }
  }
  for (int64_t i = 0; i < d * n; ++i) {
    Eigen::MatrixXd xp = x, xm = x;
    xp.data()[i] += h;
    xm.data()[i] -= h;
    const double fd = (loss_of(a0, xp) - loss_of(a0, xm)) / (2 * h);
    EXPECT_NEAR(grad_in.data()[i], fd, 1e-6 * std::max(1.0, std::abs(fd))) << i;
  }
  Eigen::MatrixXd g2 = g;
  std::vector<Eigen::MatrixXd> unused;
  ASSERT_TRUE(AlgebraicGridBackward<double>(axes, pos, x.data(), d, g2.data(), d, g2.data(), d,
                                            &unused)
                  .ok());
  EXPECT_EQ(g2, grad_in);
  const std::vector<int64_t> short_pos = {0, 1};
  EXPECT_FALSE(AlgebraicGridBackward<double>(axes, short_pos, x.data(), d, g.data(), d, nullptr,
                                             d, &unused)
                   .ok());
  EXPECT_FALSE(AlgebraicGridBackward<double>({}, pos, x.data(), d, g.data(), d, nullptr, d,
                                             &unused)
                   .ok());
}

TEST(AlgebraicCompositionTest, SequenceOfTreesAndTreeOfGridsAreRelativePerComponent) {
  std::mt19937_64 rng(63);
  const int64_t ds = 4, dt = 3;
  const Eigen::MatrixXd s = RandomSkew(ds, 1.0, rng);
  const std::vector<Eigen::MatrixXd> branches = {RandomSkew(dt, 1.0, rng), RandomSkew(dt, 1.0, rng)};
  const AlgebraicSequenceOfTrees rep = *MakeAlgebraicSequenceOfTrees(s, branches);
  ASSERT_EQ(rep.dim(), ds + dt);
  const AlgebraicTree tree = *AlgebraicTree::Create(branches);
  const AlgebraicSequence seq = *AlgebraicSequence::Create(s);
  using E = AlgebraicSequenceOfTrees::Element;
  auto word = [&](std::vector<int64_t> address) { return *tree.Word(address); };
  const int64_t d = ds + dt;
  for (int trial = 0; trial < 5; ++trial) {
    const Eigen::VectorXd q = RandomVec(d, rng), k = RandomVec(d, rng);
    std::uniform_int_distribution<int64_t> u(-500, 500);
    const int64_t i = u(rng), j = u(rng), shift = u(rng);
    const std::vector<int64_t> a = {0, 1}, b = {1, 1, 0}, prefix = {1, 0, 0};
    auto score = [&](const E& ea, const E& eb) {
      const std::vector<E> va = {ea}, vb = {eb};
      Eigen::VectorXd rq(d), rk(d);
      EXPECT_TRUE(rep.Apply<double>(va, q.data(), d, rq.data(), d).ok());
      EXPECT_TRUE(rep.Apply<double>(vb, k.data(), d, rk.data(), d).ok());
      return rq.dot(rk);
    };
    // <q, blockdiag(W^(j-i), rho(a)^T rho(b)) k>: a sequence term on the offset and a
    // tree term on the path a^-1 b. Schur route and d <= 4 products: 1e-12.
    const double expected =
        q.head(ds).dot(seq.Matrix(j - i) * k.head(ds)) +
        q.tail(dt).dot(tree.Matrix(a)->transpose() * *tree.Matrix(b) * k.tail(dt));
    EXPECT_NEAR(score(E{i, word(a)}, E{j, word(b)}), expected, 1e-12);
    // A common sequence shift and a common tree prefix (rho(ca)^T rho(cb) =
    // rho(a)^T rho(b)) leave it unchanged.
    std::vector<int64_t> pa = prefix, pb = prefix;
    pa.insert(pa.end(), a.begin(), a.end());
    pb.insert(pb.end(), b.begin(), b.end());
    EXPECT_NEAR(score(E{i + shift, word(pa)}, E{j + shift, word(pb)}), expected, 1e-12);
    // Swapping the tree nodes changes the tree term (non-commutative paths): not vacuous.
    EXPECT_GT(std::abs(score(E{i, word(b)}, E{j, word(a)}) - expected), 1e-6);
  }
  // Tree of grids: blockdiag(rho(t), H^x, V^y); orthogonal, so norms are preserved.
  const AlgebraicTreeOfGrids tg =
      *MakeAlgebraicTreeOfGrids(branches, RandomSkew(2, 1.0, rng), RandomSkew(2, 1.0, rng));
  ASSERT_EQ(tg.dim(), dt + 4);
  const Eigen::VectorXd x = RandomVec(dt + 4, rng);
  Eigen::VectorXd y(dt + 4);
  const std::vector<AlgebraicTreeOfGrids::Element> e = {{word({1, 0}), 7, -3}};
  ASSERT_TRUE(tg.Apply<double>(e, x.data(), dt + 4, y.data(), dt + 4).ok());
  EXPECT_NEAR(y.norm(), x.norm(), 1e-13 * x.norm());
  EXPECT_FALSE(MakeAlgebraicSequenceOfTrees(s, {}).ok());
  EXPECT_FALSE(MakeAlgebraicTreeOfGrids(branches, Eigen::MatrixXd::Ones(2, 2), s).ok());
}

TEST(AlgebraicPeriodicTest, WrapsAroundExactly) {
  std::mt19937_64 rng(52);
  const int64_t d = 6, n = 6;  // benzene ring: W^6 = I (sec. 3.4.2)
  auto ring = MakeAlgebraicPeriodic(d, n, {1, 2, 5});
  ASSERT_TRUE(ring.ok()) << ring.status();
  // W^n = I: angles 2 pi m k / n from exact residues, so rounding only (1e-15).
  EXPECT_LT((ring->Matrix(n) - Eigen::MatrixXd::Identity(d, d)).cwiseAbs().maxCoeff(), 1e-15);
  const Eigen::VectorXd x = RandomVec(d, rng);
  for (int64_t p : {int64_t{0}, int64_t{1}, int64_t{-4}, int64_t{1} << 40}) {
    for (int64_t wraps : {int64_t{1}, int64_t{-3}, int64_t{1000001}}) {
      const std::vector<int64_t> a = {p}, b = {p + wraps * n};
      Eigen::VectorXd ya(d), yb(d);
      ASSERT_TRUE(ring->Apply<double>(a, x.data(), d, ya.data(), d).ok());
      ASSERT_TRUE(ring->Apply<double>(b, x.data(), d, yb.data(), d).ok());
      EXPECT_EQ(ya, yb) << p << " " << wraps;  // identical residues: bit for bit
      EXPECT_NEAR(ya.norm(), x.norm(), 1e-14 * x.norm());
    }
  }
  // Relativity modulo n: scores of (i, j) and (i, j + n) agree; (i, j + 1) differs.
  const Eigen::VectorXd q = RandomVec(d, rng);
  auto score = [&](int64_t i, int64_t j) {
    const std::vector<int64_t> pi = {i}, pj = {j};
    Eigen::VectorXd rq(d), rk(d);
    EXPECT_TRUE(ring->Apply<double>(pi, q.data(), d, rq.data(), d).ok());
    EXPECT_TRUE(ring->Apply<double>(pj, x.data(), d, rk.data(), d).ok());
    return rq.dot(rk);
  };
  EXPECT_NEAR(score(2, 5), score(2, 5 + n), 1e-14);
  EXPECT_NEAR(score(2, 5), score(-1, 2), 1e-13);
  EXPECT_FALSE(MakeAlgebraicPeriodic(5, 6, {1, 2}).ok());
  EXPECT_FALSE(MakeAlgebraicPeriodic(6, 0, {1, 2, 3}).ok());
  EXPECT_FALSE(MakeAlgebraicPeriodic(6, 6, {1, 2}).ok());
}

TEST(LocalityTest, FactorsMatchPowersAndTilesScale) {
  for (uint64_t dist : {uint64_t{0}, uint64_t{1}, uint64_t{7}, uint64_t{1000}}) {
    auto f = LocalityFactor(dist, 0.98);
    ASSERT_TRUE(f.ok());
    // exp(dist ln c) vs pow: both within a few ulps of c^dist (relative error of the
    // exponent argument, ~1e-16 * dist * |ln c|): 1e-13 relative.
    EXPECT_NEAR(*f, std::pow(0.98, static_cast<double>(dist)), 1e-13 * std::pow(0.98, dist));
  }
  EXPECT_EQ(*LocalityFactor(12345, 1.0), 1.0);
  EXPECT_EQ(*LocalityFactor(std::numeric_limits<uint64_t>::max(), 0.5), 0.0);  // underflow, no NaN
  {
    // A masked score (-inf) far away, where c^d underflows to 0: it stays -inf (c^d > 0),
    // not -inf * 0 = NaN; finite scores there become 0.
    std::vector<double> far = {-std::numeric_limits<double>::infinity(), 2.0};
    const std::vector<int64_t> q0 = {0}, k2 = {40000, 40001};
    ASSERT_TRUE(ApplyLocalityScaling<double>(q0, k2, 0.98, far.data(), 2).ok());
    EXPECT_EQ(far[0], -std::numeric_limits<double>::infinity());
    EXPECT_EQ(far[1], 0.0);
  }
  EXPECT_FALSE(LocalityFactor(1, 0.0).ok());
  EXPECT_FALSE(LocalityFactor(1, 1.5).ok());
  EXPECT_FALSE(LocalityFactor(1, NAN).ok());
  EXPECT_FALSE(LocalityFactor(1, -0.5).ok());

  const std::vector<int64_t> qp = {0, 5, std::numeric_limits<int64_t>::max()};
  const std::vector<int64_t> kp = {3, 5, -2, std::numeric_limits<int64_t>::min()};
  const int64_t stride = 6;
  std::vector<double> scores(qp.size() * stride), orig;
  std::mt19937_64 rng(53);
  for (double& s : scores) s = std::normal_distribution<double>()(rng);
  orig = scores;
  ASSERT_TRUE(ApplyLocalityScaling<double>(qp, kp, 0.9, scores.data(), stride).ok());
  for (size_t a = 0; a < qp.size(); ++a) {
    for (size_t b = 0; b < static_cast<size_t>(stride); ++b) {
      if (b >= kp.size()) {
        EXPECT_EQ(scores[a * stride + b], orig[a * stride + b]);  // padding untouched
        continue;
      }
      // Reference distance in long double (exact for these magnitudes up to 2^64).
      const long double dist = std::fabs(static_cast<long double>(qp[a]) - kp[b]);
      const double ref = orig[a * stride + b] * std::pow(0.9, static_cast<double>(dist));
      EXPECT_NEAR(scores[a * stride + b], ref, 1e-13 * std::abs(orig[a * stride + b]));
    }
  }
  std::vector<float> f(4, 1.0f);
  EXPECT_FALSE(ApplyLocalityScaling<float>(qp, kp, 0.9, f.data(), 2).ok());  // stride < keys
  EXPECT_FALSE(ApplyLocalityScaling<float>(qp, kp, 0.9, nullptr, 4).ok());
  EXPECT_FALSE(ApplyLocalityScaling<float>(qp, kp, 2.0, f.data(), 4).ok());
}

}  // namespace
}  // namespace sequence
}  // namespace encodings
}  // namespace gpe
