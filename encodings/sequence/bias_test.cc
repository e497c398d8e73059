#include "encodings/sequence/bias.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include <Eigen/Dense>
#include "gtest/gtest.h"

namespace gpe {
namespace encodings {
namespace sequence {
namespace {

using Matrix = Eigen::MatrixXd;

std::vector<double> RandomNormal(int64_t n, std::mt19937_64& rng, double scale = 1.0) {
  std::normal_distribution<double> normal(0.0, scale);
  std::vector<double> v(n);
  for (double& x : v) x = normal(rng);
  return v;
}

// Tile geometries: sizes that are multiples of nothing, KV-cache style (queries after
// all keys), interleaved, and shuffled positions.
struct Tile {
  std::vector<int64_t> q, k;
};

std::vector<Tile> RandomTiles(int64_t first, int64_t length, std::mt19937_64& rng) {
  std::vector<Tile> tiles;
  auto range = [](int64_t a, int64_t n) {
    std::vector<int64_t> v(n);
    std::iota(v.begin(), v.end(), a);
    return v;
  };
  // Square diagonal tile.
  tiles.push_back({range(first + 3, 7), range(first + 3, 7)});
  // KV cache: 3 new queries at the end, 13 cached keys before them.
  tiles.push_back({range(first + length - 3, 3), range(first + length - 16, 13)});
  // Off-diagonal rectangles, both orientations.
  tiles.push_back({range(first + 20, 5), range(first + 1, 11)});
  tiles.push_back({range(first + 2, 9), range(first + 17, 6)});
  // Random (unsorted, repeated) positions.
  std::uniform_int_distribution<int64_t> pos(first, first + length - 1);
  Tile t;
  for (int i = 0; i < 6; ++i) t.q.push_back(pos(rng));
  for (int i = 0; i < 10; ++i) t.k.push_back(pos(rng));
  tiles.push_back(t);
  // Single element.
  tiles.push_back({{first + length - 1}, {first}});
  return tiles;
}

// Fills through the float and double entry points with ld > n and checks the padding
// is left untouched.
template <class T>
Matrix FillViaTile(const AdditiveBias& bias, int64_t head, const Tile& t) {
  const int64_t m = t.q.size(), n = t.k.size(), ld = n + 3;
  const T sentinel = static_cast<T>(12345.0);
  std::vector<T> buf(m * ld, sentinel);
  EXPECT_TRUE(bias.FillTile(head, t.q, t.k, buf.data(), ld).ok());
  Matrix out(m, n);
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t c = 0; c < n; ++c) out(r, c) = static_cast<double>(buf[r * ld + c]);
    for (int64_t c = n; c < ld; ++c) EXPECT_EQ(buf[r * ld + c], sentinel);
  }
  return out;
}

double MaxAbs(const Matrix& a) { return a.size() == 0 ? 0.0 : a.cwiseAbs().maxCoeff(); }

// ------------------------------------- ALiBi ---------------------------------------

TEST(AlibiSlopesTest, PowersOfTwoAndInterleavedRule) {
  // Independent reference: n = 2^k gives 2^(-8h/n); otherwise with c = 2^floor(log2 n),
  // the e-th extra slope (e = 0, 1, ...) is the (2e+1)-th of 2c heads: 2^(-8(2e+1)/(2c)).
  for (int64_t n = 1; n <= 70; ++n) {
    absl::StatusOr<std::vector<double>> slopes = AlibiSlopes(n);
    ASSERT_TRUE(slopes.ok());
    ASSERT_EQ(static_cast<int64_t>(slopes->size()), n);
    const int64_t c = int64_t{1} << static_cast<int>(std::floor(std::log2(n)));
    for (int64_t h = 0; h < n; ++h) {
      const double expected = h < c ? std::pow(2.0, -8.0 * (h + 1) / c)
                                    : std::pow(2.0, -8.0 * (2 * (h - c) + 1) / (2.0 * c));
      // exp2 and pow of the same exact exponent agree to an ulp or two.
      EXPECT_NEAR((*slopes)[h], expected, 4e-16 * expected) << "n=" << n << " h=" << h;
    }
  }
  // Press et al.'s 8-head slopes are 1/2 .. 1/256 exactly.
  std::vector<double> s8 = *AlibiSlopes(8);
  for (int h = 0; h < 8; ++h) EXPECT_EQ(s8[h], std::ldexp(1.0, -(h + 1)));
  EXPECT_FALSE(AlibiSlopes(0).ok());
  EXPECT_FALSE(AlibiSlopes(-3).ok());
}

TEST(AlibiBiasTest, TilesMatchReferenceLoops) {
  std::mt19937_64 rng(1);
  for (AlibiForm form : {AlibiForm::kCausal, AlibiForm::kSymmetric}) {
    absl::StatusOr<AlibiBias> alibi = AlibiBias::CreateStandard(12, form);
    ASSERT_TRUE(alibi.ok());
    EXPECT_EQ(alibi->causal(), form == AlibiForm::kCausal);
    for (int64_t first : {int64_t{0}, int64_t{1} << 31, int64_t{-977}}) {
      for (const Tile& t : RandomTiles(first, 40, rng)) {
        for (int64_t h : {0, 5, 11}) {
          Matrix ref(t.q.size(), t.k.size());
          const double m = alibi->slopes()[h];
          for (size_t r = 0; r < t.q.size(); ++r) {
            for (size_t c = 0; c < t.k.size(); ++c) {
              const double d = static_cast<double>(t.q[r]) - static_cast<double>(t.k[c]);
              ref(r, c) = form == AlibiForm::kCausal ? -m * d : -m * std::abs(d);
            }
          }
          // Double: both sides form -m * (i - j) from the same exact difference.
          EXPECT_EQ(MaxAbs(FillViaTile<double>(*alibi, h, t) - ref), 0.0);
          // Float: one rounding of the double value (relative 2^-24).
          const Matrix f = FillViaTile<float>(*alibi, h, t);
          EXPECT_LE(MaxAbs(f - ref), 6e-8 * std::max(1.0, MaxAbs(ref)));
          absl::StatusOr<Matrix> dense = DenseBias(*alibi, h, t.q, t.k);
          ASSERT_TRUE(dense.ok());
          EXPECT_EQ(MaxAbs(*dense - ref), 0.0);
        }
      }
    }
  }
}

TEST(AlibiBiasTest, CausalSignFollowsPressEtAl) {
  absl::StatusOr<AlibiBias> alibi = AlibiBias::Create({0.5}, AlibiForm::kCausal);
  ASSERT_TRUE(alibi.ok());
  double b = 0;
  // Query at 10, key at 4: -0.5 * 6 = -3 (older keys are penalised).
  ASSERT_TRUE(alibi->FillTile(0, std::vector<int64_t>{10}, std::vector<int64_t>{4}, &b, 1).ok());
  EXPECT_EQ(b, -3.0);
}

// Shifts every position by s: a relative bias gives a bitwise-identical tile.
void ExpectRelative(const AdditiveBias& bias, std::mt19937_64& rng) {
  ASSERT_TRUE(bias.relative());
  std::uniform_int_distribution<int64_t> shift(-(int64_t{1} << 40), int64_t{1} << 40);
  for (const Tile& t : RandomTiles(100, 60, rng)) {
    Tile moved = t;
    const int64_t s = shift(rng);
    for (int64_t& p : moved.q) p += s;
    for (int64_t& p : moved.k) p += s;
    for (int64_t h = 0; h < bias.num_heads(); ++h) {
      EXPECT_EQ(MaxAbs(*DenseBias(bias, h, t.q, t.k) - *DenseBias(bias, h, moved.q, moved.k)), 0.0);
    }
  }
}

TEST(AlibiBiasTest, DependsOnlyOnOffset) {
  std::mt19937_64 rng(2);
  ExpectRelative(*AlibiBias::CreateStandard(6, AlibiForm::kCausal), rng);
  ExpectRelative(*AlibiBias::CreateStandard(5, AlibiForm::kSymmetric), rng);
}

TEST(AlibiBiasTest, BadInput) {
  EXPECT_FALSE(AlibiBias::Create({}, AlibiForm::kCausal).ok());
  EXPECT_FALSE(AlibiBias::Create({0.5, std::nan("")}, AlibiForm::kCausal).ok());
  EXPECT_FALSE(
      AlibiBias::Create({std::numeric_limits<double>::infinity()}, AlibiForm::kCausal).ok());
  EXPECT_FALSE(AlibiBias::CreateStandard(0, AlibiForm::kCausal).ok());
  AlibiBias alibi = *AlibiBias::CreateStandard(4, AlibiForm::kCausal);
  std::vector<int64_t> q = {1, 2}, k = {0, 1, 2};
  std::vector<float> out(6);
  EXPECT_FALSE(alibi.FillTile(4, q, k, out.data(), 3).ok());   // head out of range
  EXPECT_FALSE(alibi.FillTile(-1, q, k, out.data(), 3).ok());  // negative head
  EXPECT_FALSE(alibi.FillTile(0, q, k, out.data(), 2).ok());   // ld < n
  EXPECT_FALSE(alibi.FillTile(0, q, k, static_cast<float*>(nullptr), 3).ok());
  // i - j overflows int64.
  std::vector<int64_t> far_q = {std::numeric_limits<int64_t>::max()};
  std::vector<int64_t> far_k = {-5};
  EXPECT_FALSE(alibi.FillTile(0, far_q, far_k, out.data(), 1).ok());
  // q - k = -2^63 fits but k - q = 2^63 does not (T5 and FoX take k - q): refused for
  // every bias (UBSan found T5's overflow from an unseeded attention_fuzzer run).
  std::vector<int64_t> low_q = {std::numeric_limits<int64_t>::min() + 5};
  std::vector<int64_t> high_k = {5};
  EXPECT_FALSE(alibi.FillTile(0, low_q, high_k, out.data(), 1).ok());
  T5RelativeBias t5 = *T5RelativeBias::Create(std::vector<double>(32, 0.5), 1, T5BucketConfig{});
  EXPECT_FALSE(t5.FillTile(0, low_q, high_k, out.data(), 1).ok());
  // Empty tiles are a no-op, even with a null buffer.
  EXPECT_TRUE(alibi.FillTile(0, {}, k, static_cast<float*>(nullptr), 3).ok());
}

TEST(AlibiBiasTest, SlopeGradientMatchesFiniteDifferences) {
  std::mt19937_64 rng(18);
  for (AlibiForm form : {AlibiForm::kCausal, AlibiForm::kSymmetric}) {
    const std::vector<double> slopes = RandomNormal(3, rng, 0.3);
    const std::vector<Tile> tiles = RandomTiles(50, 40, rng);
    std::vector<std::vector<Matrix>> g(tiles.size());
    for (size_t i = 0; i < tiles.size(); ++i) {
      for (int64_t h = 0; h < 3; ++h) {
        g[i].push_back(Matrix::Random(tiles[i].q.size(), tiles[i].k.size()));
      }
    }
    auto loss = [&](const std::vector<double>& s) {
      AlibiBias b = *AlibiBias::Create(s, form);
      double l = 0;
      for (size_t i = 0; i < tiles.size(); ++i) {
        for (int64_t h = 0; h < 3; ++h) {
          l += (g[i][h].array() * DenseBias(b, h, tiles[i].q, tiles[i].k)->array()).sum();
        }
      }
      return l;
    };
    AlibiBias alibi = *AlibiBias::Create(slopes, form);
    std::vector<double> grad(3, 0.0);
    for (size_t i = 0; i < tiles.size(); ++i) {
      for (int64_t h = 0; h < 3; ++h) {
        Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> gr = g[i][h];
        ASSERT_TRUE(alibi
                        .AccumulateSlopeGradient(h, tiles[i].q, tiles[i].k, gr.data(), gr.cols(),
                                                 absl::MakeSpan(grad))
                        .ok());
      }
    }
    const double eps = 1e-4;
    for (int64_t h = 0; h < 3; ++h) {
      std::vector<double> plus = slopes, minus = slopes;
      plus[h] += eps;
      minus[h] -= eps;
      // L is linear in the slopes: only the rounding of L (|L| <~ 1e3, ~1e-13) / eps.
      EXPECT_NEAR(grad[h], (loss(plus) - loss(minus)) / (2 * eps), 1e-7) << "head " << h;
    }
    std::vector<double> short_grad(2);
    EXPECT_FALSE(alibi
                     .AccumulateSlopeGradient(0, tiles[0].q, tiles[0].k, g[0][0].data(),
                                              tiles[0].k.size(), absl::MakeSpan(short_grad))
                     .ok());
  }
}

// A kernel fills sub-tiles of one big buffer through row strides: stitching every block
// of a partition must reproduce the single dense fill. ALiBi and T5 compute each entry
// from the same numbers either way (tolerance 0); GRAPE-AP's running sums start at each
// block's leftmost position, so entries differ by summation order (~1e-15 in double) and
// may round to the neighbouring float; FoX's float tiles add two parts split at an anchor
// chosen per tile (2 ulp of the entry, FloatTilesRoundEachEntryOnce): tolerance one float
// ulp of the largest entry for both.
void ExpectTilesStitch(const AdditiveBias& bias, int64_t first, int64_t length, bool exact = true) {
  std::vector<int64_t> pos(length);
  std::iota(pos.begin(), pos.end(), first);
  for (int64_t h = 0; h < bias.num_heads(); ++h) {
    const Matrix dense = *DenseBias(bias, h, pos, pos);
    std::vector<float> buf(length * length, -1.0f);
    const int64_t bm = 7, bn = 5;  // block sizes that divide nothing
    for (int64_t r0 = 0; r0 < length; r0 += bm) {
      for (int64_t c0 = 0; c0 < length; c0 += bn) {
        const int64_t m = std::min(bm, length - r0), n = std::min(bn, length - c0);
        ASSERT_TRUE(bias.FillTile(h, absl::MakeConstSpan(pos).subspan(r0, m),
                                  absl::MakeConstSpan(pos).subspan(c0, n),
                                  buf.data() + r0 * length + c0, length)
                        .ok());
      }
    }
    const double tol = exact ? 0.0 : 1.2e-7 * std::max(1.0, MaxAbs(dense));
    for (int64_t r = 0; r < length; ++r) {
      for (int64_t c = 0; c < length; ++c) {
        EXPECT_LE(std::abs(buf[r * length + c] - static_cast<float>(dense(r, c))), tol);
      }
    }
  }
}

// FillDistances: the bias at key-minus-query distances first .. first + width - 1, bit for
// bit FillTile's row for a query at any position against keys at those distances from it
// (ALiBi's own loop; T5 through the default, one DoFillTile row), near int64's ends too;
// O(1) refusals.
TEST(AdditiveBiasTest, FillDistancesIsFillTilesRow) {
  std::mt19937_64 rng(45);
  const AlibiBias causal = *AlibiBias::CreateStandard(3, AlibiForm::kCausal);
  const AlibiBias symmetric = *AlibiBias::CreateStandard(3, AlibiForm::kSymmetric);
  const T5RelativeBias t5 = *T5RelativeBias::Create(RandomNormal(32 * 3, rng), 3, {});
  const int64_t kMax = std::numeric_limits<int64_t>::max();
  struct Case {
    int64_t q, first, width;
  };
  const std::vector<Case> cases = {{0, -10, 21}, {1000, -300, 50}, {-7, 5, 1},
                                   {kMax - 40, -100, 141}, {std::numeric_limits<int64_t>::min() + 200, -100, 60}};
  for (const AdditiveBias* b : {static_cast<const AdditiveBias*>(&causal),
                                static_cast<const AdditiveBias*>(&symmetric),
                                static_cast<const AdditiveBias*>(&t5)}) {
    for (const Case& c : cases) {
      for (int64_t h = 0; h < 3; ++h) {
        std::vector<int64_t> keys(static_cast<size_t>(c.width));
        for (int64_t t = 0; t < c.width; ++t) keys[t] = c.q + c.first + t;
        std::vector<float> want(keys.size()), got(keys.size(), -7.0f);
        ASSERT_TRUE(b->FillTile(h, {c.q}, keys, want.data(), c.width).ok());
        ASSERT_TRUE(b->FillDistances(h, c.first, c.width, got.data()).ok());
        EXPECT_EQ(got, want) << "q " << c.q << " first " << c.first;
      }
    }
  }
  float out[4];
  const FoxBias fox = *FoxBias::Create(RandomNormal(8, rng), 8, 1);
  EXPECT_FALSE(fox.FillDistances(0, 0, 4, out).ok());           // not relative
  EXPECT_FALSE(causal.FillDistances(3, 0, 4, out).ok());        // head
  EXPECT_FALSE(causal.FillDistances(0, 0, -1, out).ok());       // width
  EXPECT_FALSE(causal.FillDistances(0, 0, 4, nullptr).ok());    // null
  EXPECT_FALSE(causal.FillDistances(0, kMax - 2, 4, out).ok());  // past int64
  EXPECT_FALSE(causal.FillDistances(0, std::numeric_limits<int64_t>::min(), 4, out).ok());
  EXPECT_TRUE(causal.FillDistances(0, kMax - 3, 4, out).ok());
  EXPECT_TRUE(causal.FillDistances(0, 0, 0, nullptr).ok());     // nothing to fill
}

TEST(AdditiveBiasTest, BlockedFillsStitchIntoTheDenseMatrix) {
  std::mt19937_64 rng(19);
  ExpectTilesStitch(*AlibiBias::CreateStandard(3, AlibiForm::kCausal), 1 << 20, 23);
  ExpectTilesStitch(*T5RelativeBias::Create(RandomNormal(64, rng), 2, {}), -9, 31);
  ExpectTilesStitch(*FoxBias::Create(RandomNormal(2 * 26, rng), 26, 2, 4), 4, 26,
                    /*exact=*/false);
  ExpectTilesStitch(
      *GrapeApBias::Create(RandomNormal(24 * 2, rng), RandomNormal(24 * 2, rng), 24, 1, 2, 0), 0,
      24, /*exact=*/false);
}

// --------------------------------------- T5 ----------------------------------------

// Independent bucket rule: a distance n >= max_exact lands in bucket max_exact + (the
// number of k in 1 .. nb - max_exact - 1 with n >= max_exact * r^(k / (nb - max_exact)),
// r = max_distance / max_exact), i.e. the logarithmic thresholds counted one by one.
int64_t ReferenceBucket(int64_t rel, int64_t num_buckets, int64_t max_distance, bool bidi) {
  int64_t nb = num_buckets, base = 0;
  double n;
  if (bidi) {
    nb /= 2;
    base = rel > 0 ? nb : 0;
    n = std::abs(static_cast<double>(rel));
  } else {
    n = std::max(-static_cast<double>(rel), 0.0);
  }
  const int64_t max_exact = nb / 2;
  if (n < max_exact) return base + static_cast<int64_t>(n);
  const double ratio = static_cast<double>(max_distance) / max_exact;
  int64_t count = 0;
  for (int64_t k = 1; k < nb - max_exact; ++k) {
    const double threshold = max_exact * std::pow(ratio, static_cast<double>(k) / (nb - max_exact));
    // Thresholds that are integers in exact arithmetic (e.g. 16 = 8 * 16^(2/8)) can land
    // an ulp below; n is an integer, so compare against the rounded threshold there.
    const double rounded = std::round(threshold);
    const double t = std::abs(threshold - rounded) < 1e-9 * threshold ? rounded : threshold;
    if (n >= t) ++count;
  }
  return base + max_exact + count;
}

TEST(T5BucketTest, MatchesIndependentRuleAndKnownValues) {
  T5BucketConfig bidi;  // 32 buckets, max distance 128, bidirectional
  EXPECT_EQ(T5Bucket(0, bidi), 0);
  EXPECT_EQ(T5Bucket(-1, bidi), 1);
  EXPECT_EQ(T5Bucket(1, bidi), 17);
  EXPECT_EQ(T5Bucket(-7, bidi), 7);
  EXPECT_EQ(T5Bucket(-8, bidi), 8);    // first logarithmic bucket
  EXPECT_EQ(T5Bucket(-16, bidi), 10);  // 8 + floor(ln 2 / ln 16 * 8) = 10
  EXPECT_EQ(T5Bucket(-127, bidi), 15);
  EXPECT_EQ(T5Bucket(-128, bidi), 15);  // capped at nb - 1
  EXPECT_EQ(T5Bucket(1000000, bidi), 31);
  EXPECT_EQ(T5Bucket(std::numeric_limits<int64_t>::min(), bidi), 15);
  EXPECT_EQ(T5Bucket(std::numeric_limits<int64_t>::max(), bidi), 31);
  T5BucketConfig causal{32, 128, false};
  EXPECT_EQ(T5Bucket(5, causal), 0);  // future keys all share bucket 0
  EXPECT_EQ(T5Bucket(-5, causal), 5);
  EXPECT_EQ(T5Bucket(-16, causal), 16);
  EXPECT_EQ(T5Bucket(-1000, causal), 31);

  for (T5BucketConfig cfg :
       {T5BucketConfig{32, 128, true}, T5BucketConfig{32, 128, false}, T5BucketConfig{7, 20, false},
        T5BucketConfig{10, 9, true}, T5BucketConfig{4, 3, true}, T5BucketConfig{2, 5, false}}) {
    ASSERT_TRUE(ValidateT5BucketConfig(cfg).ok());
    int64_t previous = -1;
    for (int64_t rel = -600; rel <= 600; ++rel) {
      const int64_t b = T5Bucket(rel, cfg);
      EXPECT_EQ(b, ReferenceBucket(rel, cfg.num_buckets, cfg.max_distance, cfg.bidirectional))
          << "rel=" << rel << " nb=" << cfg.num_buckets;
      EXPECT_GE(b, 0);
      EXPECT_LT(b, cfg.num_buckets);
      // Distance buckets never decrease as the key moves further back.
      if (rel <= 0 && previous >= 0) {
        EXPECT_LE(b, previous);
      }
      if (rel <= 0) previous = b;
    }
  }
}

TEST(T5RelativeBiasTest, TilesMatchTableLookupAndAreRelative) {
  std::mt19937_64 rng(3);
  for (bool bidi : {true, false}) {
    T5BucketConfig cfg{32, 128, bidi};
    const int64_t heads = 3;
    std::vector<double> table = RandomNormal(32 * heads, rng);
    absl::StatusOr<T5RelativeBias> t5 = T5RelativeBias::Create(table, heads, cfg);
    ASSERT_TRUE(t5.ok());
    for (const Tile& t : RandomTiles(-50, 300, rng)) {
      for (int64_t h = 0; h < heads; ++h) {
        Matrix ref(t.q.size(), t.k.size());
        for (size_t r = 0; r < t.q.size(); ++r) {
          for (size_t c = 0; c < t.k.size(); ++c) {
            ref(r, c) = table[ReferenceBucket(t.k[c] - t.q[r], 32, 128, bidi) * heads + h];
          }
        }
        // Table entries are copied: exact in double, one rounding in float.
        EXPECT_EQ(MaxAbs(FillViaTile<double>(*t5, h, t) - ref), 0.0);
        EXPECT_LE(MaxAbs(FillViaTile<float>(*t5, h, t) - ref), 6e-8 * MaxAbs(ref));
      }
    }
    ExpectRelative(*t5, rng);
  }
}

TEST(T5RelativeBiasTest, TableGradientMatchesFiniteDifferences) {
  std::mt19937_64 rng(4);
  const int64_t heads = 2, nb = 12;
  T5BucketConfig cfg{nb, 30, true};
  std::vector<double> table = RandomNormal(nb * heads, rng);
  // L = sum over tiles and heads of <G, b>, G random; tiles overlap on purpose.
  const std::vector<Tile> tiles = RandomTiles(0, 80, rng);
  std::vector<std::vector<Matrix>> g(tiles.size());
  for (size_t i = 0; i < tiles.size(); ++i) {
    for (int64_t h = 0; h < heads; ++h) {
      g[i].push_back(Matrix::Random(tiles[i].q.size(), tiles[i].k.size()));
    }
  }
  auto loss = [&](const std::vector<double>& tab) {
    T5RelativeBias b = *T5RelativeBias::Create(tab, heads, cfg);
    double l = 0;
    for (size_t i = 0; i < tiles.size(); ++i) {
      for (int64_t h = 0; h < heads; ++h) {
        l += (g[i][h].array() * DenseBias(b, h, tiles[i].q, tiles[i].k)->array()).sum();
      }
    }
    return l;
  };
  T5RelativeBias t5 = *T5RelativeBias::Create(table, heads, cfg);
  std::vector<double> grad(nb * heads, 0.0);
  for (size_t i = 0; i < tiles.size(); ++i) {
    for (int64_t h = 0; h < heads; ++h) {
      // Row-major copy of G for the tiled call.
      Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> gr = g[i][h];
      ASSERT_TRUE(t5.AccumulateTableGradient(h, tiles[i].q, tiles[i].k, gr.data(), gr.cols(),
                                             absl::MakeSpan(grad))
                      .ok());
    }
  }
  const double eps = 1e-4;
  for (int64_t e = 0; e < nb * heads; ++e) {
    std::vector<double> plus = table, minus = table;
    plus[e] += eps;
    minus[e] -= eps;
    // L is linear in the table: the central difference is exact up to rounding of L
    // (|L| <~ 100, so ~1e-14 / 1e-4 = 1e-10).
    EXPECT_NEAR(grad[e], (loss(plus) - loss(minus)) / (2 * eps), 1e-8) << "entry " << e;
  }
}

TEST(T5RelativeBiasTest, BadInput) {
  std::vector<double> table(32 * 2, 0.1);
  EXPECT_FALSE(T5RelativeBias::Create(table, 0, {}).ok());              // zero heads
  EXPECT_FALSE(T5RelativeBias::Create(table, 3, {}).ok());              // size mismatch
  EXPECT_FALSE(T5RelativeBias::Create({0.0}, 1, {1, 10, false}).ok());  // < 2 buckets
  EXPECT_FALSE(ValidateT5BucketConfig({3, 10, true}).ok());             // bidirectional needs 4
  EXPECT_FALSE(ValidateT5BucketConfig({32, 8, true}).ok());             // max_distance <= max_exact
  EXPECT_FALSE(ValidateT5BucketConfig({32, -1, false}).ok());
  std::vector<double> bad = table;
  bad[7] = std::numeric_limits<double>::infinity();
  EXPECT_FALSE(T5RelativeBias::Create(bad, 2, {}).ok());
  T5RelativeBias t5 = *T5RelativeBias::Create(table, 2, {});
  std::vector<double> grad(5), tile(4, 1.0);
  std::vector<int64_t> q = {0, 1}, k = {0, 1};
  EXPECT_FALSE(t5.AccumulateTableGradient(0, q, k, tile.data(), 2, absl::MakeSpan(grad)).ok());
  grad.resize(64);
  EXPECT_FALSE(t5.AccumulateTableGradient(2, q, k, tile.data(), 2, absl::MakeSpan(grad)).ok());
  EXPECT_TRUE(t5.AccumulateTableGradient(1, q, k, tile.data(), 2, absl::MakeSpan(grad)).ok());
}

// --------------------------------------- FoX ---------------------------------------

// Straight from Lin et al.: D_ij = sum_{l = j+1..i} ln f_l, f = 1 / (1 + e^-x); for
// j > i the continued form -sum_{l = i+1..j} ln f_l.
double FoxReference(const std::vector<double>& logits, int64_t heads, int64_t h, int64_t i,
                    int64_t j) {
  double s = 0;
  for (int64_t l = std::min(i, j) + 1; l <= std::max(i, j); ++l) {
    s += std::log(1.0 / (1.0 + std::exp(-logits[l * heads + h])));
  }
  return j <= i ? s : -s;
}

TEST(LogSigmoidTest, StableAndAccurate) {
  for (double x : {-3.0, -0.5, 0.0, 0.25, 2.0, 8.0}) {
    // Direct formula is accurate for moderate x; relative 1e-15.
    const double direct = std::log(1.0 / (1.0 + std::exp(-x)));
    EXPECT_NEAR(LogSigmoid(x), direct, 1e-15 * std::max(1.0, std::abs(direct)));
  }
  EXPECT_EQ(LogSigmoid(-1000.0), -1000.0);                 // log1p(e^-1000) underflows to 0
  EXPECT_NEAR(LogSigmoid(40.0), -std::exp(-40.0), 1e-30);  // ln(1 - e^-40) ~ -e^-40
  EXPECT_TRUE(std::isfinite(LogSigmoid(-1e300)));
}

TEST(FoxBiasTest, TilesMatchPrefixSumFormula) {
  std::mt19937_64 rng(5);
  const int64_t heads = 3, length = 70;
  const std::vector<double> logits = RandomNormal(length * heads, rng, 2.0);
  for (int64_t first : {int64_t{0}, int64_t{123456789012}, int64_t{-40}}) {
    absl::StatusOr<FoxBias> fox = FoxBias::Create(logits, length, heads, first);
    ASSERT_TRUE(fox.ok());
    EXPECT_TRUE(fox->needs_token_data());
    for (const Tile& t : RandomTiles(first, length, rng)) {
      for (int64_t h = 0; h < heads; ++h) {
        Matrix ref(t.q.size(), t.k.size());
        for (size_t r = 0; r < t.q.size(); ++r) {
          for (size_t c = 0; c < t.k.size(); ++c) {
            ref(r, c) = FoxReference(logits, heads, h, t.q[r] - first, t.k[c] - first);
          }
        }
        // Sums of <= 70 terms of size ~3: accumulated rounding stays below 1e-13.
        EXPECT_LE(MaxAbs(FillViaTile<double>(*fox, h, t) - ref), 1e-13);
        EXPECT_LE(MaxAbs(FillViaTile<float>(*fox, h, t) - ref), 1e-6 * std::max(1.0, MaxAbs(ref)));
      }
    }
  }
}

TEST(FoxBiasTest, ExtremeGatesStayFinite) {
  // A fully closed gate (x = -800) gives ln f = -800 exactly, an open one ~0, no inf/nan.
  const std::vector<double> logits = {3.0, -800.0, 800.0, 0.0};
  FoxBias fox = *FoxBias::Create(logits, 4, 1);
  const Matrix d = *DenseBias(fox, 0, {0, 1, 2, 3}, {0, 1, 2, 3});
  EXPECT_TRUE(d.allFinite());
  EXPECT_NEAR(d(3, 0), -800.0 + std::log(0.5), 1e-12);
  EXPECT_NEAR(d(2, 1), 0.0, 1e-300);
}

TEST(FoxBiasTest, LongSequenceKeepsLocalDifferencesAccurate) {
  // 2^17 tokens with ln f ~ -2: c_t reaches ~ -2.6e5. Prefix sums in float would lose
  // ~0.03 absolute; double prefix sums keep c_i - c_j within a few eps * |c| (~1e-10) of
  // the direct sum of the few gates between them.
  std::mt19937_64 rng(17);
  const int64_t length = int64_t{1} << 17;
  std::vector<double> logits = RandomNormal(length, rng, 0.5);
  for (double& x : logits) x -= 2.0;
  FoxBias fox = *FoxBias::Create(logits, length, 1);
  const double cmax = std::abs(fox.PrefixSum(0, length - 1));
  EXPECT_GT(cmax, 1e5);
  const std::vector<int64_t> q = {length - 1, length - 5, length / 2};
  const std::vector<int64_t> k = {length - 9, length - 5, length / 2 - 3};
  const Matrix d = *DenseBias(fox, 0, q, k);
  for (size_t r = 0; r < q.size(); ++r) {
    for (size_t c = 0; c < k.size(); ++c) {
      if (std::abs(q[r] - k[c]) > 20) continue;
      EXPECT_NEAR(d(r, c), FoxReference(logits, 1, 0, q[r], k[c]), 8e-16 * cmax);
    }
  }
}

// Issue 24: one very negative logit (-1e16: ln f = -1e16, where ulp(c) = 2) made every
// later c_t round to the grid of multiples of 2, so every bias between later tokens came
// out 0 or a multiple of 2 and their gates were lost. With c_t kept as a double-double
// the bias between later tokens is the sum of their own gates. Before the fix D(3, 2)
// here was 0 instead of -0.127 and D(4, 3) -4 instead of -3.05. Tolerance: the reference is a direct
// sum of at most 3 log-sigmoids (a few ulps of ~4); the double-double difference is
// within ~t ulp(|partial sums of the small gates|) of exact: 1e-14 covers both.
TEST(FoxBiasTest, OneHugeNegativeLogitKeepsLaterGates) {
  for (const double huge : {-1e16, -1e20, -1e300}) {
    const std::vector<double> logits = {1.0, huge, 1.0, 2.0, -3.0, 0.5};
    FoxBias fox = *FoxBias::Create(logits, 6, 1);
    const std::vector<int64_t> pos = {0, 1, 2, 3, 4, 5};
    const Matrix d = *DenseBias(fox, 0, pos, pos);
    for (int64_t i = 2; i < 6; ++i) {
      for (int64_t j = 1; j <= i; ++j) {
        EXPECT_NEAR(d(i, j), FoxReference(logits, 1, 0, i, j), 1e-14)
            << "huge=" << huge << " i=" << i << " j=" << j;
      }
    }
    // Across the huge gate the bias is that gate plus the rest, to double's precision.
    // (FoxReference's log(1 / (1 + e^-x)) overflows at x = huge, so that gate is added
    // as itself: ln sigmoid(x) = x to double precision there.)
    EXPECT_NEAR(d(5, 0), huge + FoxReference(logits, 1, 0, 5, 1), 4e-16 * std::abs(huge));
  }
}

// Long after a huge gate: 10^5 gates of logit 0 behind ln f = -1e16, then one of 15.
// The last difference is ln sigmoid(15) (-3.0590227e-7) to 1e-10 relative; with the
// running sum left frozen at its huge value, the later gates went uncompensated into the
// correction term and this came out 2e-5 off.
TEST(FoxBiasTest, HugeGateThenALongSequenceKeepsTheLastDifference) {
  std::vector<double> logits(100002, 0.0);
  logits[0] = -1e16;
  logits.back() = 15.0;
  const int64_t n = static_cast<int64_t>(logits.size());
  FoxBias fox = *FoxBias::Create(logits, n, 1);
  const std::vector<int64_t> q = {n - 1}, k = {n - 2};
  const Matrix d = *DenseBias(fox, 0, q, k);
  const double want = -std::log1p(std::exp(-15.0));
  EXPECT_NEAR(d(0, 0), want, 1e-10 * std::fabs(want));
}

// Float tiles whose keys all precede or all follow the queries are formed from two
// parts split at an anchor between them (FoxBias::Fill); the others per entry. Each float
// entry against the double tile, entry by entry, relative to the entry itself: 2 ulp
// (2^-23) for the anchored tiles (two rounded parts of one sign, then their rounded sum),
// 1/2 ulp for the per-entry ones (one rounding), plus float's smallest normal for entries
// that are 0. Gates include one huge closed gate (ln f = -1e16) inside a key block: a
// split at an anchor past it, with parts of opposite signs, would lose every other gate.
TEST(FoxBiasTest, FloatTilesRoundEachEntryOnce) {
  std::mt19937_64 rng(41);
  const int64_t length = 200;
  std::vector<double> logits = RandomNormal(length, rng, 3.0);
  logits[37] = -1e16;
  FoxBias fox = *FoxBias::Create(logits, length, 1, 1000);
  auto span = [](int64_t lo, int64_t n) {
    std::vector<int64_t> v(static_cast<size_t>(n));
    for (int64_t t = 0; t < n; ++t) v[t] = 1000 + lo + t;
    return v;
  };
  struct Case {
    std::vector<int64_t> q, k;
    double ulps;
  };
  const std::vector<Case> cases = {
      {span(64, 64), span(0, 64), 2.0},      // keys first (a causal off-diagonal tile)
      {span(150, 17), span(30, 40), 2.0},    // keys first, across the huge gate
      {span(0, 20), span(100, 33), 2.0},     // keys last
      {span(30, 16), span(30, 16), 0.5},     // the diagonal tile: interleaved
      {span(40, 10), span(20, 50), 0.5},     // keys on both sides
      {{1000 + 90, 1000 + 5}, {1000 + 5, 1000 + 90}, 0.5}};  // unsorted, interleaved
  for (const Case& c : cases) {
    const Tile t{c.q, c.k};
    const Matrix dbl = FillViaTile<double>(fox, 0, t);
    const Matrix flt = FillViaTile<float>(fox, 0, t);
    for (int64_t r = 0; r < dbl.rows(); ++r) {
      for (int64_t j = 0; j < dbl.cols(); ++j) {
        const double tol = c.ulps * std::ldexp(std::abs(dbl(r, j)), -23) + 1.2e-38;
        EXPECT_NEAR(flt(r, j), dbl(r, j), tol) << "q=" << c.q[r] << " k=" << c.k[j];
      }
    }
  }
}

// SeparableTile: true on the tiles FillTile splits at an anchor, with parts whose float
// sums are FillTile's float tile bit for bit (what lets a kernel skip forming it); false,
// writing nothing, on interleaved tiles; FillTile's errors. The other biases: false.
TEST(FoxBiasTest, SeparableTilesAreTheFloatTilesParts) {
  std::mt19937_64 rng(43);
  const int64_t length = 120, heads = 2, first = 500;
  FoxBias fox = *FoxBias::Create(RandomNormal(length * heads, rng, 3.0), length, heads, first);
  auto span = [&](int64_t lo, int64_t n) {
    std::vector<int64_t> v(static_cast<size_t>(n));
    for (int64_t t = 0; t < n; ++t) v[t] = first + lo + t;
    return v;
  };
  const std::vector<Tile> separable = {{span(64, 33), span(0, 64)},   // keys first
                                       {span(10, 7), span(17, 40)},   // keys last
                                       {span(50, 1), span(50, 1)}};   // one token
  for (const Tile& t : separable) {
    for (int64_t h = 0; h < heads; ++h) {
      std::vector<float> u(t.q.size(), -7.0f), w(t.k.size(), -7.0f);
      absl::StatusOr<bool> sep = fox.SeparableTile(h, t.q, t.k, u.data(), w.data());
      ASSERT_TRUE(sep.ok()) << sep.status();
      ASSERT_TRUE(*sep);
      std::vector<float> tile(t.q.size() * t.k.size());
      ASSERT_TRUE(fox.FillTile(h, t.q, t.k, tile.data(), static_cast<int64_t>(t.k.size())).ok());
      for (size_t r = 0; r < t.q.size(); ++r) {
        for (size_t c = 0; c < t.k.size(); ++c) {
          ASSERT_EQ(u[r] + w[c], tile[r * t.k.size() + c]) << "r=" << r << " c=" << c;
        }
      }
    }
  }
  std::vector<float> u(40, -7.0f), w(40, -7.0f);
  const Tile interleaved{span(30, 16), span(20, 20)};
  absl::StatusOr<bool> sep = fox.SeparableTile(0, interleaved.q, interleaved.k, u.data(), w.data());
  ASSERT_TRUE(sep.ok());
  EXPECT_FALSE(*sep);
  EXPECT_EQ(u, std::vector<float>(40, -7.0f));
  EXPECT_EQ(w, std::vector<float>(40, -7.0f));
  EXPECT_FALSE(fox.SeparableTile(2, span(64, 3), span(0, 3), u.data(), w.data()).ok());   // head
  EXPECT_FALSE(fox.SeparableTile(0, span(118, 3), span(0, 3), u.data(), w.data()).ok());  // range
  EXPECT_FALSE(fox.SeparableTile(0, span(64, 3), span(0, 3), nullptr, nullptr).ok());     // null
  // Position-only biases form no separable tiles (the kernels' Toeplitz path takes them).
  absl::StatusOr<AlibiBias> alibi = AlibiBias::CreateStandard(2, AlibiForm::kCausal);
  ASSERT_TRUE(alibi.ok());
  sep = alibi->SeparableTile(0, span(64, 3), span(0, 3), u.data(), w.data());
  ASSERT_TRUE(sep.ok());
  EXPECT_FALSE(*sep);
}

TEST(FoxBiasTest, LogitGradientMatchesFiniteDifferences) {
  std::mt19937_64 rng(6);
  const int64_t heads = 2, length = 30;
  const std::vector<double> logits = RandomNormal(length * heads, rng, 1.5);
  const std::vector<Tile> tiles = RandomTiles(7, length, rng);
  std::vector<std::vector<Matrix>> g(tiles.size());
  for (size_t i = 0; i < tiles.size(); ++i) {
    for (int64_t h = 0; h < heads; ++h) {
      g[i].push_back(Matrix::Random(tiles[i].q.size(), tiles[i].k.size()));
    }
  }
  auto loss = [&](const std::vector<double>& x) {
    FoxBias b = *FoxBias::Create(x, length, heads, 7);
    double l = 0;
    for (size_t i = 0; i < tiles.size(); ++i) {
      for (int64_t h = 0; h < heads; ++h) {
        l += (g[i][h].array() * DenseBias(b, h, tiles[i].q, tiles[i].k)->array()).sum();
      }
    }
    return l;
  };
  FoxBias fox = *FoxBias::Create(logits, length, heads, 7);
  std::vector<double> grad_c(length * heads, 0.0);
  for (size_t i = 0; i < tiles.size(); ++i) {
    for (int64_t h = 0; h < heads; ++h) {
      Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> gr =
          g[i][h].cast<float>();
      // Exercise the float path with the same values the loss uses (rounded to float).
      g[i][h] = gr.cast<double>();
      ASSERT_TRUE(fox.AccumulatePrefixGradient(h, tiles[i].q, tiles[i].k, gr.data(), gr.cols(),
                                               absl::MakeSpan(grad_c))
                      .ok());
    }
  }
  const std::vector<double> grad = *fox.LogitGradient(grad_c);
  const double eps = 1e-5;
  for (int64_t e = 0; e < length * heads; ++e) {
    std::vector<double> plus = logits, minus = logits;
    plus[e] += eps;
    minus[e] -= eps;
    // Central difference: truncation ~eps^2 |L'''| ~ 1e-10 * 100, rounding ~1e-15 * |L| /
    // eps ~ 1e-9; 1e-6 leaves room and still catches any wrong term (gradients are O(1)).
    EXPECT_NEAR(grad[e], (loss(plus) - loss(minus)) / (2 * eps), 1e-6) << "logit " << e;
  }
}

TEST(FoxBiasTest, VarlenRestartsPrefixSums) {
  // Two sequences packed back to back: one object per sequence gives each sequence's bias
  // from its own tokens only, equal to a standalone sequence at position 0.
  std::mt19937_64 rng(7);
  const std::vector<double> a = RandomNormal(10, rng), b = RandomNormal(6, rng);
  FoxBias second = *FoxBias::Create(b, 6, 1, /*first_position=*/10);
  FoxBias alone = *FoxBias::Create(b, 6, 1, 0);
  const Matrix d1 = *DenseBias(second, 0, {10, 12, 15}, {10, 11, 15});
  const Matrix d0 = *DenseBias(alone, 0, {0, 2, 5}, {0, 1, 5});
  EXPECT_EQ(MaxAbs(d1 - d0), 0.0);  // the same arithmetic on the same numbers
}

TEST(FoxBiasTest, AppendMatchesBuildingAtOnce) {
  // KV-cache decoding: 17 tokens, then 1, then 6 more, equals all 24 at once, bit for bit.
  std::mt19937_64 rng(20);
  const int64_t heads = 3;
  const std::vector<double> x = RandomNormal(24 * heads, rng, 2.0);
  const FoxBias whole = *FoxBias::Create(x, 24, heads, 100);
  FoxBias grown = *FoxBias::Create(absl::MakeConstSpan(x).subspan(0, 17 * heads), 17, heads, 100);
  ASSERT_TRUE(grown.Append(absl::MakeConstSpan(x).subspan(17 * heads, heads)).ok());
  ASSERT_TRUE(grown.Append(absl::MakeConstSpan(x).subspan(18 * heads)).ok());
  ASSERT_EQ(grown.length(), 24);
  std::vector<int64_t> pos(24);
  std::iota(pos.begin(), pos.end(), 100);
  for (int64_t h = 0; h < heads; ++h) {
    EXPECT_EQ(MaxAbs(*DenseBias(grown, h, pos, pos) - *DenseBias(whole, h, pos, pos)), 0.0);
  }
  EXPECT_FALSE(grown.Append(std::vector<double>(4, 0.0)).ok());  // not whole tokens
  EXPECT_FALSE(grown.Append({0.0, std::nan(""), 0.0}).ok());
  EXPECT_EQ(grown.length(), 24);  // failed appends change nothing
}

TEST(FoxBiasTest, BadInput) {
  std::vector<double> x(12, 0.5);
  EXPECT_FALSE(FoxBias::Create(x, 4, 0).ok());  // zero heads
  EXPECT_FALSE(FoxBias::Create(x, 5, 3).ok());  // mismatched length
  EXPECT_FALSE(FoxBias::Create(x, 0, 3).ok());
  EXPECT_FALSE(FoxBias::Create(x, 4, 3, std::numeric_limits<int64_t>::max() - 2).ok());
  x[3] = std::nan("");
  EXPECT_FALSE(FoxBias::Create(x, 4, 3).ok());
  x[3] = 0.0;
  FoxBias fox = *FoxBias::Create(x, 4, 3, 10);
  double out[4];
  EXPECT_FALSE(fox.FillTile(0, std::vector<int64_t>{9}, std::vector<int64_t>{10}, out, 1).ok());
  EXPECT_FALSE(fox.FillTile(0, std::vector<int64_t>{14}, std::vector<int64_t>{10}, out, 1).ok());
  EXPECT_FALSE(fox.FillTile(3, std::vector<int64_t>{12}, std::vector<int64_t>{10}, out, 1).ok());
  std::vector<double> gc(5);
  EXPECT_FALSE(fox.AccumulatePrefixGradient(0, std::vector<int64_t>{12}, std::vector<int64_t>{10},
                                            out, 1, absl::MakeSpan(gc))
                   .ok());
  EXPECT_FALSE(fox.LogitGradient(gc).ok());
}

// ------------------------------------- GRAPE-AP ------------------------------------

// Straight from the definition: b(t, j) = sum_{l = j+1..t} psi(t, l), psi = -softplus(w_t.u_l),
// continued as -sum_{l = t+1..j} psi(t, l) for j > t.
double GrapeApReference(const std::vector<double>& w, const std::vector<double>& u, int64_t heads,
                        int64_t rank, int64_t h, int64_t t, int64_t j) {
  double s = 0;
  for (int64_t l = std::min(t, j) + 1; l <= std::max(t, j); ++l) {
    double z = 0;
    for (int64_t r = 0; r < rank; ++r) {
      z += w[(t * heads + h) * rank + r] * u[(l * heads + h) * rank + r];
    }
    s += -std::log1p(std::exp(z));  // -softplus(z), |z| small here
  }
  return j <= t ? s : -s;
}

TEST(GrapeApBiasTest, TilesMatchPathSumDefinition) {
  std::mt19937_64 rng(8);
  const int64_t heads = 2, rank = 3, length = 50, first = 1000;
  const std::vector<double> w = RandomNormal(length * heads * rank, rng, 0.7);
  const std::vector<double> u = RandomNormal(length * heads * rank, rng, 0.7);
  GrapeApBias ap = *GrapeApBias::Create(w, u, length, heads, rank, first);
  for (const Tile& t : RandomTiles(first, length, rng)) {
    for (int64_t h = 0; h < heads; ++h) {
      Matrix ref(t.q.size(), t.k.size());
      for (size_t r = 0; r < t.q.size(); ++r) {
        for (size_t c = 0; c < t.k.size(); ++c) {
          ref(r, c) = GrapeApReference(w, u, heads, rank, h, t.q[r] - first, t.k[c] - first);
        }
      }
      // <= 50 terms of size ~1 summed in different orders: < 1e-13.
      EXPECT_LE(MaxAbs(FillViaTile<double>(ap, h, t) - ref), 1e-13);
      EXPECT_LE(MaxAbs(FillViaTile<float>(ap, h, t) - ref), 1e-6 * std::max(1.0, MaxAbs(ref)));
    }
  }
}

TEST(GrapeApBiasTest, QueryIndependentCostIsFox) {
  // r = 1, w_t = 1, u_l = -x_l: psi(t, l) = ln sigmoid(x_l), the FoX gate.
  std::mt19937_64 rng(9);
  const int64_t heads = 2, length = 40;
  const std::vector<double> x = RandomNormal(length * heads, rng, 2.0);
  std::vector<double> w(length * heads, 1.0), u(length * heads);
  for (size_t i = 0; i < u.size(); ++i) u[i] = -x[i];
  GrapeApBias ap = *GrapeApBias::Create(w, u, length, heads, 1, 5);
  FoxBias fox = *FoxBias::Create(x, length, heads, 5);
  for (const Tile& t : RandomTiles(5, length, rng)) {
    for (int64_t h = 0; h < heads; ++h) {
      // Same terms, different summation order (running sum vs prefix difference): 1e-13.
      EXPECT_LE(MaxAbs(*DenseBias(ap, h, t.q, t.k) - *DenseBias(fox, h, t.q, t.k)), 1e-13);
    }
  }
}

TEST(GrapeApBiasTest, GradientMatchesFiniteDifferences) {
  std::mt19937_64 rng(10);
  const int64_t heads = 2, rank = 2, length = 28, first = -3;
  const int64_t size = length * heads * rank;
  const std::vector<double> w = RandomNormal(size, rng, 0.8), u = RandomNormal(size, rng, 0.8);
  const std::vector<Tile> tiles = RandomTiles(first, length, rng);
  std::vector<std::vector<Matrix>> g(tiles.size());
  for (size_t i = 0; i < tiles.size(); ++i) {
    for (int64_t h = 0; h < heads; ++h) {
      g[i].push_back(Matrix::Random(tiles[i].q.size(), tiles[i].k.size()));
    }
  }
  auto loss = [&](const std::vector<double>& ww, const std::vector<double>& uu) {
    GrapeApBias b = *GrapeApBias::Create(ww, uu, length, heads, rank, first);
    double l = 0;
    for (size_t i = 0; i < tiles.size(); ++i) {
      for (int64_t h = 0; h < heads; ++h) {
        l += (g[i][h].array() * DenseBias(b, h, tiles[i].q, tiles[i].k)->array()).sum();
      }
    }
    return l;
  };
  GrapeApBias ap = *GrapeApBias::Create(w, u, length, heads, rank, first);
  std::vector<double> gw(size, 0.0), gu(size, 0.0);
  for (size_t i = 0; i < tiles.size(); ++i) {
    for (int64_t h = 0; h < heads; ++h) {
      Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> gr = g[i][h];
      ASSERT_TRUE(ap.AccumulateGradient(h, tiles[i].q, tiles[i].k, gr.data(), gr.cols(),
                                        absl::MakeSpan(gw), absl::MakeSpan(gu))
                      .ok());
    }
  }
  const double eps = 1e-5;
  // Same budget as FoX: O(eps^2) truncation plus O(1e-15 |L| / eps) rounding, << 1e-6.
  for (int64_t e = 0; e < size; ++e) {
    std::vector<double> plus = w, minus = w;
    plus[e] += eps;
    minus[e] -= eps;
    EXPECT_NEAR(gw[e], (loss(plus, u) - loss(minus, u)) / (2 * eps), 1e-6) << "w " << e;
    plus = u;
    minus = u;
    plus[e] += eps;
    minus[e] -= eps;
    EXPECT_NEAR(gu[e], (loss(w, plus) - loss(w, minus)) / (2 * eps), 1e-6) << "u " << e;
  }
}

TEST(GrapeApBiasTest, BadInput) {
  std::vector<double> v(2 * 3 * 4, 0.1);
  EXPECT_FALSE(GrapeApBias::Create(v, v, 2, 0, 4).ok());  // zero heads
  EXPECT_FALSE(GrapeApBias::Create(v, v, 3, 3, 4).ok());  // mismatched length
  EXPECT_FALSE(GrapeApBias::Create(v, v, 2, 3, 0).ok());  // zero rank
  EXPECT_FALSE(GrapeApBias::Create(v, std::vector<double>(5), 2, 3, 4).ok());
  std::vector<double> bad = v;
  bad[0] = std::numeric_limits<double>::infinity();
  EXPECT_FALSE(GrapeApBias::Create(bad, v, 2, 3, 4).ok());
  GrapeApBias ap = *GrapeApBias::Create(v, v, 2, 3, 4);
  double out[2];
  EXPECT_FALSE(ap.FillTile(0, std::vector<int64_t>{2}, std::vector<int64_t>{0}, out, 1).ok());
  std::vector<double> gw(24), gu(23);
  EXPECT_FALSE(ap.AccumulateGradient(0, std::vector<int64_t>{1}, std::vector<int64_t>{0}, out, 1,
                                     absl::MakeSpan(gw), absl::MakeSpan(gu))
                   .ok());
}

}  // namespace
}  // namespace sequence
}  // namespace encodings
}  // namespace gpe
