#include "encodings/sequence/grape_a.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include <Eigen/Dense>
#include "absl/types/span.h"
#include "encodings/sequence/bias.h"
#include "group/unipotent.h"
#include "gtest/gtest.h"

namespace gpe {
namespace encodings {
namespace sequence {
namespace {

using RowMatrix = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

RowMatrix RandomRows(int64_t rows, int64_t cols, std::mt19937_64& rng) {
  std::normal_distribution<double> normal;
  RowMatrix m(rows, cols);
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) m(i, j) = normal(rng);
  }
  return m;
}

std::vector<int64_t> RandomPositions(int64_t n, int64_t lo, int64_t hi, std::mt19937_64& rng) {
  std::uniform_int_distribution<int64_t> dist(lo, hi);
  std::vector<int64_t> p(n);
  for (int64_t& x : p) x = dist(rng);
  return p;
}

TEST(GrapeAGeneratorTest, IsSquareZeroAndCouplesTheTwoExtraSlots) {
  for (int64_t d : {1, 4, 9}) {
    const Eigen::MatrixXd a = GrapeAGenerator(d);
    EXPECT_TRUE(group::ValidateSquareZero(a).ok());
    EXPECT_EQ((a * a).cwiseAbs().maxCoeff(), 0.0);
    Eigen::VectorXd q = Eigen::VectorXd::Zero(d + 2), k = Eigen::VectorXd::Zero(d + 2);
    q(d) = 1.0;
    k(d + 1) = 1.0;
    EXPECT_EQ(q.dot(a * k), 1.0);  // <q~, A k~> = 1 for the homogeneous slots
  }
}

TEST(GrapeALiftTest, LiftedRowsAreTheUnipotentAction) {
  // Independent check: out = G(i)^-T [q; 1; 0] and G(j) [k; 0; 1] with G(p) = I + p m A,
  // the inverse taken numerically (exact here: I - p m A has small integer-ish entries).
  std::mt19937_64 rng(11);
  const int64_t d = 6, n = 9;
  const double m = 0.375;  // exact binary fraction: every product below is exact
  GrapeALift lift = *GrapeALift::Create(d, m);
  const RowMatrix q = RandomRows(n, d, rng);
  const std::vector<int64_t> pos = RandomPositions(n, -1000, 100000, rng);
  RowMatrix lq(n, d + 2), lk(n, d + 2);
  ASSERT_TRUE(lift.LiftQueries<double>(pos, q.data(), d, lq.data(), d + 2).ok());
  ASSERT_TRUE(lift.LiftKeys<double>(pos, q.data(), d, lk.data(), d + 2).ok());
  const Eigen::MatrixXd a = GrapeAGenerator(d);
  for (int64_t r = 0; r < n; ++r) {
    const Eigen::MatrixXd g =
        Eigen::MatrixXd::Identity(d + 2, d + 2) + static_cast<double>(pos[r]) * m * a;
    Eigen::VectorXd qh(d + 2), kh(d + 2);
    qh << q.row(r).transpose(), 1.0, 0.0;
    kh << q.row(r).transpose(), 0.0, 1.0;
    const Eigen::VectorXd expect_q = g.inverse().transpose() * qh;
    const Eigen::VectorXd expect_k = g * kh;
    // G has entries 0, 1 and p m (exact); its inverse I - p m A is exact too.
    EXPECT_EQ((lq.row(r).transpose() - expect_q).cwiseAbs().maxCoeff(), 0.0);
    EXPECT_EQ((lk.row(r).transpose() - expect_k).cwiseAbs().maxCoeff(), 0.0);
    EXPECT_EQ(lq(r, d + 1), -m * pos[r]);  // closed form [q; 1; -m i]
    EXPECT_EQ(lk(r, d), m * pos[r]);       // closed form [k; m j; 1]
  }
}

TEST(GrapeALiftTest, ScoresEqualDotPlusAlibiBias) {
  std::mt19937_64 rng(12);
  for (int64_t heads : {8, 12}) {  // powers of two and Press et al.'s interleaved slopes
    const AlibiBias alibi = *AlibiBias::CreateStandard(heads, AlibiForm::kCausal);
    for (int64_t h : {int64_t{0}, heads / 2, heads - 1}) {
      for (int64_t base : {int64_t{0}, int64_t{1} << 31}) {
        const int64_t d = 7, m = 5, n = 11;
        GrapeALift lift = *GrapeALift::FromAlibi(alibi, h, d);
        const RowMatrix q = RandomRows(m, d, rng), k = RandomRows(n, d, rng);
        // KV-cache style: queries after the keys, plus keys ahead of queries (masked by a
        // kernel, but the group law holds there too).
        const std::vector<int64_t> qp = RandomPositions(m, base + 500, base + 600, rng);
        const std::vector<int64_t> kp = RandomPositions(n, base, base + 700, rng);
        RowMatrix lq(m, d + 3), lk(n, d + 2);  // lq with a padded stride
        ASSERT_TRUE(lift.LiftQueries<double>(qp, q.data(), d, lq.data(), d + 3).ok());
        ASSERT_TRUE(lift.LiftKeys<double>(kp, k.data(), d, lk.data(), d + 2).ok());
        const Eigen::MatrixXd bias = *DenseBias(alibi, h, qp, kp);
        const double slope = alibi.slopes()[h];
        for (int64_t r = 0; r < m; ++r) {
          for (int64_t c = 0; c < n; ++c) {
            const double lifted = lq.row(r).head(d + 2).dot(lk.row(c));
            const double expected = q.row(r).dot(k.row(c)) + bias(r, c);
            // Rounding: a (d+2)-term dot with terms up to |q||k| and m |i|, m |j|; the
            // bound 16 eps (|q||k| + m (|i| + |j|)) covers the summation order difference.
            const double scale = q.row(r).norm() * k.row(c).norm() +
                                 slope * (std::abs(double(qp[r])) + std::abs(double(kp[c])));
            EXPECT_NEAR(lifted, expected, 16 * std::numeric_limits<double>::epsilon() * scale);
          }
        }
      }
    }
  }
}

TEST(GrapeALiftTest, BiasIsBitExactForPowerOfTwoSlopes) {
  // With q = k = 0 the lifted score is m j - m i; for slopes 2^-k and |positions| < 2^40
  // every product and the difference are exact, and so is AlibiBias's -m (i - j).
  std::mt19937_64 rng(13);
  const AlibiBias alibi = *AlibiBias::CreateStandard(8, AlibiForm::kCausal);
  const int64_t d = 3, n = 16;
  const RowMatrix zeros = RowMatrix::Zero(n, d);
  for (int64_t h = 0; h < 8; ++h) {
    GrapeALift lift = *GrapeALift::FromAlibi(alibi, h, d);
    const std::vector<int64_t> qp = RandomPositions(n, -(int64_t{1} << 39), int64_t{1} << 39, rng);
    const std::vector<int64_t> kp = RandomPositions(n, -(int64_t{1} << 39), int64_t{1} << 39, rng);
    RowMatrix lq(n, d + 2), lk(n, d + 2);
    ASSERT_TRUE(lift.LiftQueries<double>(qp, zeros.data(), d, lq.data(), d + 2).ok());
    ASSERT_TRUE(lift.LiftKeys<double>(kp, zeros.data(), d, lk.data(), d + 2).ok());
    const Eigen::MatrixXd bias = *DenseBias(alibi, h, qp, kp);
    const Eigen::MatrixXd lifted = lq * lk.transpose();
    EXPECT_EQ((lifted - bias).cwiseAbs().maxCoeff(), 0.0) << "head " << h;
  }
}

TEST(GrapeALiftTest, ScoresAreRelative) {
  // Shifting every position by s leaves lifted scores unchanged (to rounding of m s).
  std::mt19937_64 rng(14);
  const int64_t d = 4, n = 6;
  GrapeALift lift = *GrapeALift::Create(d, 0.3);
  const RowMatrix q = RandomRows(n, d, rng), k = RandomRows(n, d, rng);
  std::vector<int64_t> qp = RandomPositions(n, 0, 50, rng), kp = RandomPositions(n, 0, 50, rng);
  RowMatrix lq(n, d + 2), lk(n, d + 2), sq(n, d + 2), sk(n, d + 2);
  ASSERT_TRUE(lift.LiftQueries<double>(qp, q.data(), d, lq.data(), d + 2).ok());
  ASSERT_TRUE(lift.LiftKeys<double>(kp, k.data(), d, lk.data(), d + 2).ok());
  for (int64_t& p : qp) p += 12345;
  for (int64_t& p : kp) p += 12345;
  ASSERT_TRUE(lift.LiftQueries<double>(qp, q.data(), d, sq.data(), d + 2).ok());
  ASSERT_TRUE(lift.LiftKeys<double>(kp, k.data(), d, sk.data(), d + 2).ok());
  // Products up to 0.3 * 12400 ~ 4e3: rounding 4e3 * eps ~ 1e-12; allow 1e-11.
  EXPECT_LE((lq * lk.transpose() - sq * sk.transpose()).cwiseAbs().maxCoeff(), 1e-11);
  // A shift of the query alone changes them (the test can fail).
  EXPECT_GT((lq * lk.transpose() - sq * lk.transpose()).cwiseAbs().maxCoeff(), 1.0);
}

TEST(GrapeALiftTest, FloatLiftMatchesDouble) {
  std::mt19937_64 rng(15);
  const int64_t d = 5, n = 4;
  GrapeALift lift = *GrapeALift::Create(d, 0.0625);
  const RowMatrix q = RandomRows(n, d, rng);
  Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> qf = q.cast<float>(),
                                                                        out(n, d + 2);
  const std::vector<int64_t> pos = {0, 7, 1000, 99999};
  ASSERT_TRUE(lift.LiftQueries<float>(pos, qf.data(), d, out.data(), d + 2).ok());
  for (int64_t r = 0; r < n; ++r) {
    EXPECT_EQ(out(r, d), 1.0f);
    EXPECT_EQ(out(r, d + 1), static_cast<float>(-0.0625 * pos[r]));  // one rounding
  }
}

TEST(GrapeAGatedLiftTest, ReproducesFoxAndIsAPathProduct) {
  std::mt19937_64 rng(16);
  const int64_t heads = 2, length = 25, first = 40, d = 5;
  std::normal_distribution<double> normal(0.0, 2.0);
  std::vector<double> logits(length * heads);
  for (double& x : logits) x = normal(rng);
  const FoxBias fox = *FoxBias::Create(logits, length, heads, first);
  const Eigen::MatrixXd a = GrapeAGenerator(d);
  for (int64_t h = 0; h < heads; ++h) {
    GrapeAGatedLift lift = *GrapeAGatedLift::Create(&fox, h, d);
    const int64_t m = 6, n = 9;
    const RowMatrix q = RandomRows(m, d, rng), k = RandomRows(n, d, rng);
    const std::vector<int64_t> qp = RandomPositions(m, first + 10, first + length - 1, rng);
    const std::vector<int64_t> kp = RandomPositions(n, first, first + length - 1, rng);
    RowMatrix lq(m, d + 2), lk(n, d + 2);
    ASSERT_TRUE(lift.LiftQueries<double>(qp, q.data(), d, lq.data(), d + 2).ok());
    ASSERT_TRUE(lift.LiftKeys<double>(kp, k.data(), d, lk.data(), d + 2).ok());
    const Eigen::MatrixXd bias = *DenseBias(fox, h, qp, kp);
    const Eigen::MatrixXd expected = q * k.transpose() + bias;
    // Terms of size |c| <~ 50 and |q||k| ~ 5: dot rounding < 1e-12.
    EXPECT_LE((lq * lk.transpose() - expected).cwiseAbs().maxCoeff(), 1e-12);

    // Each lifted key is the ordered path product of unipotent steps exp(-ln f_l A) over
    // l = first .. j applied to [k; 0; 1]; each query the inverse transpose of its path.
    auto path = [&](int64_t pos) {
      std::vector<group::UnipotentStep> steps;
      for (int64_t t = 0; t <= pos - first; ++t) {
        steps.push_back({a, -LogSigmoid(logits[t * heads + h])});
      }
      return steps;
    };
    for (int64_t c = 0; c < n; ++c) {
      Eigen::VectorXd kh(d + 2);
      kh << k.row(c).transpose(), 0.0, 1.0;
      const Eigen::VectorXd expect = *group::UnipotentPathProduct(path(kp[c])) * kh;
      // The path product sums the same log gates in another order: 1e-12 on |c| <~ 50.
      EXPECT_LE((lk.row(c).transpose() - expect).cwiseAbs().maxCoeff(), 1e-12);
    }
    for (int64_t r = 0; r < m; ++r) {
      Eigen::VectorXd qh(d + 2);
      qh << q.row(r).transpose(), 1.0, 0.0;
      const Eigen::VectorXd expect = group::UnipotentPathInverse(path(qp[r]))->transpose() * qh;
      EXPECT_LE((lq.row(r).transpose() - expect).cwiseAbs().maxCoeff(), 1e-12);
    }
  }
}

TEST(GrapeALiftTest, BadInput) {
  EXPECT_FALSE(GrapeALift::Create(0, 0.5).ok());
  EXPECT_FALSE(GrapeALift::Create(4, std::nan("")).ok());
  EXPECT_FALSE(GrapeALift::Create(4, std::numeric_limits<double>::infinity()).ok());
  const AlibiBias sym = *AlibiBias::CreateStandard(4, AlibiForm::kSymmetric);
  EXPECT_FALSE(GrapeALift::FromAlibi(sym, 0, 4).ok());  // no lift for -m |i - j|
  const AlibiBias causal = *AlibiBias::CreateStandard(4, AlibiForm::kCausal);
  EXPECT_FALSE(GrapeALift::FromAlibi(causal, 4, 4).ok());
  GrapeALift lift = *GrapeALift::Create(4, 0.5);
  std::vector<double> in(8, 1.0), out(12);
  const std::vector<int64_t> pos = {1, 2};
  EXPECT_FALSE(lift.LiftQueries<double>(pos, in.data(), 3, out.data(), 6).ok());  // in stride
  EXPECT_FALSE(lift.LiftKeys<double>(pos, in.data(), 4, out.data(), 5).ok());     // out stride
  EXPECT_FALSE(lift.LiftKeys<double>(pos, nullptr, 4, out.data(), 6).ok());
  std::vector<double> shared(16);
  EXPECT_FALSE(lift.LiftKeys<double>(pos, shared.data(), 4, shared.data() + 2, 6).ok());
  EXPECT_TRUE(lift.LiftKeys<double>(pos, in.data(), 4, out.data(), 6).ok());

  const FoxBias fox = *FoxBias::Create(std::vector<double>(6, 0.0), 3, 2, 10);
  EXPECT_FALSE(GrapeAGatedLift::Create(nullptr, 0, 4).ok());
  EXPECT_FALSE(GrapeAGatedLift::Create(&fox, 2, 4).ok());
  EXPECT_FALSE(GrapeAGatedLift::Create(&fox, 0, 0).ok());
  GrapeAGatedLift gated = *GrapeAGatedLift::Create(&fox, 1, 4);
  EXPECT_FALSE(gated.LiftQueries<double>(pos, in.data(), 4, out.data(), 6).ok());  // range
  const std::vector<int64_t> ok_pos = {10, 12};
  EXPECT_TRUE(gated.LiftQueries<double>(ok_pos, in.data(), 4, out.data(), 6).ok());
}


// ---------------------------------------------------------------------------------
// GrapeABias: the tile interface, fast (closed-form) and general (lifted) paths.
// ---------------------------------------------------------------------------------

// Every tile of `bias` and `reference` in float and double for the given positions.
void ExpectTilesEqual(const AdditiveBias& bias, const AdditiveBias& reference, int64_t head,
                      const std::vector<int64_t>& qp, const std::vector<int64_t>& kp) {
  const int64_t m = qp.size(), n = kp.size(), ld = n + 3;  // padded rows
  std::vector<double> got(m * ld, -7.0), want(m * ld, -7.0);
  ASSERT_TRUE(bias.FillTile(head, qp, kp, got.data(), ld).ok());
  ASSERT_TRUE(reference.FillTile(head, qp, kp, want.data(), ld).ok());
  std::vector<float> got_f(m * ld, -7.0f), want_f(m * ld, -7.0f);
  ASSERT_TRUE(bias.FillTile(head, qp, kp, got_f.data(), ld).ok());
  ASSERT_TRUE(reference.FillTile(head, qp, kp, want_f.data(), ld).ok());
  for (int64_t i = 0; i < m * ld; ++i) {
    ASSERT_EQ(got[i], want[i]) << "entry " << i;
    ASSERT_EQ(got_f[i], want_f[i]) << "entry " << i;
  }
}

TEST(GrapeABiasTest, ClosedFormIsAlibiBitForBit) {
  // GRAPE-A's closed form is ALiBi's causal bias: the same double operations, so equal
  // bits (tolerance 0), for Press et al.'s slopes with power-of-two and other head counts.
  std::mt19937_64 rng(21);
  for (int64_t heads : {1, 8, 12, 5}) {
    const AlibiBias alibi = *AlibiBias::CreateStandard(heads, AlibiForm::kCausal);
    const std::vector<double> slopes(alibi.slopes().begin(), alibi.slopes().end());
    const GrapeABias grape = *GrapeABias::Create(slopes, 16, GrapeAPath::kClosedForm);
    EXPECT_TRUE(grape.causal());
    EXPECT_TRUE(grape.relative());
    EXPECT_FALSE(grape.needs_token_data());
    EXPECT_EQ(grape.num_heads(), heads);
    for (int64_t h = 0; h < heads; ++h) {
      ExpectTilesEqual(grape, alibi, h, RandomPositions(7, 0, 300, rng),
                       RandomPositions(11, 0, 300, rng));
      // Far positions (a KV cache at 10^12) and negative ones.
      ExpectTilesEqual(grape, alibi, h, RandomPositions(3, 1000000000000, 1000000000300, rng),
                       RandomPositions(5, 1000000000000, 1000000000300, rng));
      ExpectTilesEqual(grape, alibi, h, RandomPositions(4, -50, 50, rng),
                       RandomPositions(6, -50, 50, rng));
    }
  }
}

// Only the closed form claims to be relative (a tile by distance, FillDistances): the
// lifted path rounds m j - m i, which for a slope of 2^-0.5 and a query near 2^30 differs
// between the tile and the distance fill in float (-0.70710683 against -0.70710677).
TEST(GrapeABiasTest, OnlyTheClosedFormIsRelative) {
  const AlibiBias alibi = *AlibiBias::CreateStandard(12, AlibiForm::kCausal);
  const std::vector<double> slopes(alibi.slopes().begin(), alibi.slopes().end());
  const GrapeABias lifted = *GrapeABias::Create(slopes, 3, GrapeAPath::kLifted);
  const GrapeABias fast = *GrapeABias::Create(slopes, 3, GrapeAPath::kClosedForm);
  EXPECT_FALSE(lifted.relative());
  EXPECT_TRUE(fast.relative());
  float out[3];
  EXPECT_FALSE(lifted.FillDistances(0, -2, 3, out).ok());
  const int64_t q = (int64_t{1} << 30) + 12345;
  const std::vector<int64_t> keys = {q - 2, q - 1, q};
  float tile[3];
  ASSERT_TRUE(fast.FillTile(0, {q}, keys, tile, 3).ok());
  ASSERT_TRUE(fast.FillDistances(0, -2, 3, out).ok());
  for (int t = 0; t < 3; ++t) EXPECT_EQ(out[t], tile[t]) << t;
}

TEST(GrapeABiasTest, LiftedPathEqualsClosedForm) {
  std::mt19937_64 rng(22);
  // Power-of-two slopes (Press et al.'s for 8 heads): m j and m i are exact, so the
  // lifted rows' dot m j - m i equals -m (i - j) bit for bit (tolerance 0).
  {
    const AlibiBias alibi = *AlibiBias::CreateStandard(8, AlibiForm::kCausal);
    const std::vector<double> slopes(alibi.slopes().begin(), alibi.slopes().end());
    const GrapeABias lifted = *GrapeABias::Create(slopes, 6, GrapeAPath::kLifted);
    const GrapeABias fast = *GrapeABias::Create(slopes, 6, GrapeAPath::kClosedForm);
    for (int64_t h = 0; h < 8; ++h) {
      for (int64_t base : {int64_t{0}, int64_t{1} << 40}) {
        const std::vector<int64_t> qp = RandomPositions(9, base, base + 500, rng);
        const std::vector<int64_t> kp = RandomPositions(13, base, base + 500, rng);
        ExpectTilesEqual(lifted, fast, h, qp, kp);
        ExpectTilesEqual(lifted, alibi, h, qp, kp);
      }
    }
  }
  // Any slopes (12 heads: non-power-of-two slopes): the lift forms m j - m i, each
  // product rounded once, so |lifted - closed| <= eps m (|i| + |j|) + eps |result|;
  // allow twice that.
  {
    const AlibiBias alibi = *AlibiBias::CreateStandard(12, AlibiForm::kCausal);
    const std::vector<double> slopes(alibi.slopes().begin(), alibi.slopes().end());
    const GrapeABias lifted = *GrapeABias::Create(slopes, 3, GrapeAPath::kLifted);
    const double eps = std::numeric_limits<double>::epsilon();
    for (int64_t h = 0; h < 12; ++h) {
      const std::vector<int64_t> qp = RandomPositions(8, 100000, 200000, rng);
      const std::vector<int64_t> kp = RandomPositions(10, 100000, 200000, rng);
      const Eigen::MatrixXd got = *DenseBias(lifted, h, qp, kp);
      const Eigen::MatrixXd want = *DenseBias(alibi, h, qp, kp);
      const double m = slopes[h];
      for (int64_t r = 0; r < 8; ++r) {
        for (int64_t c = 0; c < 10; ++c) {
          const double bound = 2 * eps *
                               (m * (std::fabs(static_cast<double>(qp[r])) +
                                     std::fabs(static_cast<double>(kp[c]))) +
                                std::fabs(want(r, c)));
          EXPECT_NEAR(got(r, c), want(r, c), bound);
        }
      }
      // Not vacuous: another head's slope gives a different tile.
      EXPECT_GT((got - *DenseBias(alibi, (h + 1) % 12, qp, kp)).cwiseAbs().maxCoeff(), 1.0);
    }
  }
}

FoxBias RandomFox(int64_t heads, int64_t length, int64_t first, std::mt19937_64& rng) {
  std::normal_distribution<double> normal(0.0, 2.0);
  std::vector<double> logits(length * heads);
  for (double& x : logits) x = normal(rng);
  return *FoxBias::Create(logits, length, heads, first);
}

TEST(GrapeABiasTest, GatedIsFoxOnBothPaths) {
  // The closed form fills FoX's own tiles: tolerance 0. The gated lift's rows
  // [0; 1; c_i] and [0; -c_j; 1] dot to -c_j + c_i exactly (the other terms are exact
  // zeros) for the prefix sums rounded to one double each (FoxBias::PrefixSum), while
  // FoX's tiles take c_i - c_j in double-double (issue 24): the two agree to within half
  // an ulp of each prefix sum, 2^-52 max |c| (float tiles: one float rounding more).
  std::mt19937_64 rng(23);
  const int64_t heads = 3, length = 40, first = 1000;
  const FoxBias fox = RandomFox(heads, length, first, rng);
  for (GrapeAPath path : {GrapeAPath::kClosedForm, GrapeAPath::kLifted}) {
    const GrapeABias grape = *GrapeABias::CreateGated(fox, 4, path);
    EXPECT_TRUE(grape.gated());
    EXPECT_TRUE(grape.needs_token_data());
    EXPECT_FALSE(grape.relative());
    EXPECT_EQ(grape.num_heads(), heads);
    for (int64_t h = 0; h < heads; ++h) {
      const std::vector<int64_t> qp = RandomPositions(9, first, first + length - 1, rng),
                                 kp = RandomPositions(12, first, first + length - 1, rng);
      if (path == GrapeAPath::kClosedForm) {
        ExpectTilesEqual(grape, fox, h, qp, kp);
        continue;
      }
      double cmax = 0;
      for (int64_t t = 0; t < length; ++t) cmax = std::max(cmax, std::fabs(fox.PrefixSum(h, t)));
      const int64_t n = static_cast<int64_t>(kp.size());
      std::vector<double> got(qp.size() * n), want(qp.size() * n);
      std::vector<float> got_f(qp.size() * n), want_f(qp.size() * n);
      ASSERT_TRUE(grape.FillTile(h, qp, kp, got.data(), n).ok());
      ASSERT_TRUE(fox.FillTile(h, qp, kp, want.data(), n).ok());
      ASSERT_TRUE(grape.FillTile(h, qp, kp, got_f.data(), n).ok());
      ASSERT_TRUE(fox.FillTile(h, qp, kp, want_f.data(), n).ok());
      for (size_t i = 0; i < got.size(); ++i) {
        EXPECT_NEAR(got[i], want[i], 0x1p-52 * cmax) << "entry " << i;
        EXPECT_NEAR(got_f[i], want_f[i], 0x1p-52 * cmax + 0x1p-23 * std::fabs(want[i]))
            << "entry " << i;
      }
    }
    // Positions outside the gates' range are an error on both paths.
    std::vector<double> out(4);
    const std::vector<int64_t> bad = {first - 1, first};
    EXPECT_FALSE(grape.FillTile(0, bad, bad, out.data(), 2).ok());
  }
}

TEST(GrapeABiasTest, LiftedRowsScoreAsDotPlusBias) {
  // <lift_q(i), lift_k(j)> = <q, k> + b(i, j) for the bias's own rows (ALiBi-like and
  // gated). Terms: |q||k| ~ 5 and |b| ~ 50: rounding of a 6-term dot < 1e-12.
  std::mt19937_64 rng(24);
  const int64_t d = 4, first = 7, length = 30;
  const GrapeABias alibi_like = *GrapeABias::Create({0.3, 0.0625}, d);
  const GrapeABias gated = *GrapeABias::CreateGated(RandomFox(2, length, first, rng), d);
  for (const GrapeABias* bias : {&alibi_like, &gated}) {
    for (int64_t h = 0; h < 2; ++h) {
      const RowMatrix q = RandomRows(5, d, rng), k = RandomRows(6, d, rng);
      const std::vector<int64_t> qp = RandomPositions(5, first, first + length - 1, rng);
      const std::vector<int64_t> kp = RandomPositions(6, first, first + length - 1, rng);
      RowMatrix lq(5, d + 2), lk(6, d + 2);
      ASSERT_TRUE(bias->LiftQueries<double>(h, qp, q.data(), d, lq.data(), d + 2).ok());
      ASSERT_TRUE(bias->LiftKeys<double>(h, kp, k.data(), d, lk.data(), d + 2).ok());
      const Eigen::MatrixXd expected = q * k.transpose() + *DenseBias(*bias, h, qp, kp);
      EXPECT_LE((lq * lk.transpose() - expected).cwiseAbs().maxCoeff(), 1e-12);
    }
  }
}

TEST(GrapeABiasTest, GradientsMatchFiniteDifferences) {
  std::mt19937_64 rng(25);
  std::normal_distribution<double> normal;
  const int64_t m = 5, n = 7;
  // ALiBi-like: L = sum G(r, c) b(r, c) is linear in each slope, so a central
  // difference with step 1e-3 has no truncation error; rounding ~ eps |L| / 1e-3 < 1e-9.
  {
    const std::vector<double> slopes = {0.25, 0.1};
    const std::vector<int64_t> qp = RandomPositions(m, 0, 60, rng);
    const std::vector<int64_t> kp = RandomPositions(n, 0, 60, rng);
    RowMatrix g(m, n);
    for (int64_t i = 0; i < m * n; ++i) g.data()[i] = normal(rng);
    for (GrapeAPath path : {GrapeAPath::kClosedForm, GrapeAPath::kLifted}) {
      const GrapeABias bias = *GrapeABias::Create(slopes, 2, path);
      std::vector<double> grad(2, 0.0);
      for (int64_t h = 0; h < 2; ++h) {
        ASSERT_TRUE(bias.AccumulateSlopeGradient<double>(h, qp, kp, g.data(), n,
                                                         absl::MakeSpan(grad))
                        .ok());
      }
      for (int64_t h = 0; h < 2; ++h) {
        auto loss = [&](double delta) {
          std::vector<double> s = slopes;
          s[h] += delta;
          const GrapeABias b = *GrapeABias::Create(s, 2, path);
          return (g.array() * DenseBias(b, h, qp, kp)->array()).sum();
        };
        const double fd = (loss(1e-3) - loss(-1e-3)) / 2e-3;
        EXPECT_NEAR(grad[h], fd, 1e-9 * std::max(1.0, std::fabs(fd)));
      }
    }
  }
  // Gated: dL/dx through the prefix sums; smooth in x, step 1e-5: truncation
  // ~ 1e-10 |f'''|, rounding ~ eps |L| / 1e-5 ~ 1e-10; allow 1e-7.
  {
    const int64_t heads = 2, length = 12, first = 3;
    std::vector<double> logits(length * heads);
    for (double& x : logits) x = normal(rng);
    const std::vector<int64_t> qp = RandomPositions(m, first, first + length - 1, rng);
    const std::vector<int64_t> kp = RandomPositions(n, first, first + length - 1, rng);
    RowMatrix g(m, n);
    for (int64_t i = 0; i < m * n; ++i) g.data()[i] = normal(rng);
    const GrapeABias bias =
        *GrapeABias::CreateGated(*FoxBias::Create(logits, length, heads, first), 2);
    std::vector<double> prefix(length * heads, 0.0);
    for (int64_t h = 0; h < heads; ++h) {
      ASSERT_TRUE(bias.AccumulatePrefixGradient<double>(h, qp, kp, g.data(), n,
                                                        absl::MakeSpan(prefix))
                      .ok());
    }
    const std::vector<double> grad = *bias.LogitGradient(prefix);
    for (int64_t t = 0; t < length; ++t) {
      for (int64_t h = 0; h < heads; ++h) {
        auto loss = [&](double delta) {
          std::vector<double> x = logits;
          x[t * heads + h] += delta;
          const GrapeABias b = *GrapeABias::CreateGated(
              *FoxBias::Create(x, length, heads, first), 2, GrapeAPath::kLifted);
          double sum = 0.0;
          for (int64_t hh = 0; hh < heads; ++hh) {
            sum += (g.array() * DenseBias(b, hh, qp, kp)->array()).sum();
          }
          return sum;
        };
        const double fd = (loss(1e-5) - loss(-1e-5)) / 2e-5;
        EXPECT_NEAR(grad[t * heads + h], fd, 1e-7);
      }
    }
  }
}

TEST(GrapeABiasTest, BadInput) {
  EXPECT_FALSE(GrapeABias::Create({}, 4).ok());  // no heads
  EXPECT_FALSE(GrapeABias::Create({0.5, std::nan("")}, 4).ok());
  EXPECT_FALSE(GrapeABias::Create({0.5}, 0).ok());  // head_dim
  const FoxBias fox = *FoxBias::Create(std::vector<double>(6, 0.0), 3, 2, 10);
  EXPECT_FALSE(GrapeABias::CreateGated(fox, 0).ok());
  const GrapeABias alibi_like = *GrapeABias::Create({0.5, 0.25}, 4);
  const GrapeABias gated = *GrapeABias::CreateGated(fox, 4);
  const std::vector<int64_t> pos = {10, 11};
  std::vector<double> tile(4, 0.0), grad(6, 0.0), out(12);
  EXPECT_FALSE(alibi_like.FillTile(2, pos, pos, tile.data(), 2).ok());  // head
  EXPECT_FALSE(alibi_like.FillTile(0, pos, pos, tile.data(), 1).ok());  // ld < n
  EXPECT_FALSE(gated.AccumulateSlopeGradient<double>(0, pos, pos, tile.data(), 2,
                                                     absl::MakeSpan(grad))
                   .ok());
  EXPECT_FALSE(alibi_like.AccumulatePrefixGradient<double>(0, pos, pos, tile.data(), 2,
                                                           absl::MakeSpan(grad))
                   .ok());
  EXPECT_FALSE(alibi_like.LogitGradient(grad).ok());
  std::vector<double> in(8, 1.0);
  EXPECT_FALSE(alibi_like.LiftQueries<double>(2, pos, in.data(), 4, out.data(), 6).ok());  // head
  EXPECT_FALSE(alibi_like.LiftKeys<double>(0, pos, in.data(), 3, out.data(), 6).ok());  // stride
  EXPECT_TRUE(alibi_like.LiftKeys<double>(0, pos, in.data(), 4, out.data(), 6).ok());
  const std::vector<int64_t> far = {0, 1};
  EXPECT_FALSE(gated.LiftKeys<double>(0, far, in.data(), 4, out.data(), 6).ok());  // range
}

}  // namespace
}  // namespace sequence
}  // namespace encodings
}  // namespace gpe
