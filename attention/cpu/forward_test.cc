// CpuForward's query items (forward.cc, tile_step.cc) against the double reference
// (reference.h) with the flash-attention accuracy criterion (test_util.h): shapes
// below, at and above the tiles, GQA and KV caches, varlen, explicit positions, row
// transforms, biases, locality and Shaw labels inside the kernel, every compiled
// instruction set.
#include "attention/cpu/cpu_attention.h"

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "attention/cpu/kernels.h"
#include "attention/cpu/test_util.h"
#include "attention/descriptor.h"
#include "attention/test_util.h"
#include "encodings/sequence/algebraic.h"
#include "encodings/sequence/bias.h"
#include "encodings/sequence/grape_m.h"
#include "encodings/sequence/rope.h"
#include "gtest/gtest.h"
#include "hwy/targets.h"

namespace gpe {
namespace attention {
namespace {

using encodings::sequence::AlgebraicSequence;
using encodings::sequence::AlibiBias;
using encodings::sequence::AlibiForm;
using encodings::sequence::FoxBias;
using encodings::sequence::GrapeMProduct;
using encodings::sequence::Rank2Generator;
using encodings::sequence::Rope;
using encodings::sequence::T5BucketConfig;
using encodings::sequence::T5RelativeBias;
using test::Bshd;
using test::CaseListOptions;
using test::CheckAgainstReference;
using test::ForEachShawCase;
using test::ForEachStructuredCase;
using test::MakeRope;
using test::RandomF;
using test::RandomUniform;
using test::Thd;

using encodings::sequence::CoordinatePlane;
using encodings::sequence::GrapeMCommutingPlanes;

// sum_c u[c] v[c] in double.
template <class A, class B>
double RowDot(const A* u, const B* v, int64_t d) {
  double sum = 0;
  for (int64_t c = 0; c < d; ++c) sum += double(u[c]) * double(v[c]);
  return sum;
}

// A scores-only binding's rows of x (dz double, fz float; n tokens of d) have the whole
// form's (full) inner products between every pair of tokens: double rows within 1e-12 d
// of O(d) sums, float rows within 3 d 2^-24 ||x_i|| ||x_j||.
void ExpectWholeFormInnerProducts(const std::vector<float>& x, const std::vector<double>& full,
                                  const std::vector<double>& dz, const std::vector<float>& fz,
                                  int64_t n, int64_t d, const std::string& what) {
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      const double want = RowDot(full.data() + i * d, full.data() + j * d, d);
      EXPECT_NEAR(RowDot(dz.data() + i * d, dz.data() + j * d, d), want, 1e-12 * d)
          << what << " " << i << " " << j;
      const double bound = 3.0 * d * 0x1p-24 *
                           std::sqrt(RowDot(x.data() + i * d, x.data() + i * d, d) *
                                     RowDot(x.data() + j * d, x.data() + j * d, d));
      EXPECT_NEAR(RowDot(fz.data() + i * d, fz.data() + j * d, d), want, bound)
          << what << " " << i << " " << j;
    }
  }
}

// GRAPE-M commuting planes on float rows x (d per token, at positions pos) through a
// prepared transform: the rows rotated in float with the cosines and sines rounded to
// float, against the plain Apply's double arithmetic rounded once. Plane (f, s) gives
// y_f = x_f c - x_s s in float: c and s each within 2^-24 relative, two products and a
// difference each rounded (2^-24), so |error| <= ~4 2^-24 (|x_f| + |x_s|), plus Apply's
// own rounding, 2^-25 |y_f| <= 2^-25 (|x_f| + |x_s|): 3e-7 (|x_f| + |x_s|) is checked
// (a wrong sine, cosine, plane or row is off by O(|x|)). Backward after Forward gives x
// back within twice that (G^T G = I). Coordinates on no plane stay bit for bit.
void ExpectPlanesFloatRows(const GrapeMRowTransform<GrapeMCommutingPlanes>& tr,
                           const std::vector<CoordinatePlane>& planes, int64_t d,
                           const std::vector<int64_t>& pos, const std::vector<float>& x,
                           const std::string& what) {
  const int64_t n = static_cast<int64_t>(pos.size());
  std::vector<double> want(x.begin(), x.end());
  ASSERT_TRUE(tr.Forward(pos, want.data(), d).ok()) << what;
  auto prepared = tr.Prepare(pos);
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  std::vector<float> y = x;
  ASSERT_TRUE((*prepared)->Forward(0, n, y.data(), d).ok()) << what;
  std::vector<bool> on_plane(static_cast<size_t>(d), false);
  for (const CoordinatePlane& p : planes) on_plane[p.first] = on_plane[p.second] = true;
  for (int64_t t = 0; t < n; ++t) {
    const float* xr = x.data() + t * d;
    for (const CoordinatePlane& p : planes) {
      const double tol = 3e-7 * (std::fabs(xr[p.first]) + std::fabs(xr[p.second]));
      for (int64_t c : {p.first, p.second}) {
        EXPECT_NEAR(y[t * d + c], want[t * d + c], tol)
            << what << ": token " << t << " (position " << pos[t] << "), coordinate " << c;
      }
    }
    for (int64_t c = 0; c < d; ++c) {
      if (!on_plane[c]) {
        EXPECT_EQ(y[t * d + c], xr[c]) << what << ": coordinate " << c;
      }
    }
  }
  ASSERT_TRUE((*prepared)->Backward(0, n, y.data(), d).ok()) << what;
  for (int64_t t = 0; t < n; ++t) {
    const float* xr = x.data() + t * d;
    for (const CoordinatePlane& p : planes) {
      const double tol = 6e-7 * (std::fabs(xr[p.first]) + std::fabs(xr[p.second]));
      EXPECT_NEAR(y[t * d + p.first], xr[p.first], tol) << what << ": backward, token " << t;
      EXPECT_NEAR(y[t * d + p.second], xr[p.second], tol) << what << ": backward, token " << t;
    }
  }
}

TEST(CpuForward, ShapesBelowAtAndAboveTiles) {
  // Small tiles (16 x 32) so that short sequences cross several of them; head_dim 32 to
  // 256 including ones that are not multiples of the vector width.
  CpuAttentionOptions small;
  small.block_q = 16;
  small.block_k = 32;
  small.num_threads = 3;
  int seed = 0;
  for (int64_t d : {32, 80, 128, 256}) {
    for (int64_t l : {1, 15, 16, 17, 33, 64, 71}) {
      for (bool causal : {false, true}) {
        AttentionArgs a = Bshd(2, l, l, 2, 2, d);
        a.causal = causal;
        CheckAgainstReference(a, small, ++seed,
                              "d " + std::to_string(d) + " l " + std::to_string(l) +
                                  (causal ? " causal" : ""));
      }
    }
  }
  // The default tiles (96 x 128) with lengths around them.
  for (int64_t l : {95, 96, 97, 129, 200}) {
    AttentionArgs a = Bshd(1, l, l, 2, 1, 64);
    a.causal = (l % 2) == 1;
    CheckAgainstReference(a, {}, ++seed, "default tiles l " + std::to_string(l));
  }
}

TEST(CpuForward, GqaMqaKvCacheAndStrides) {
  CpuAttentionOptions opt;
  opt.block_q = 8;
  opt.block_k = 32;
  for (auto [hq, hkv] : {std::pair<int64_t, int64_t>{4, 4}, {4, 2}, {8, 2}, {6, 1}}) {
    AttentionArgs a = Bshd(2, 21, 21, hq, hkv, 40);
    a.causal = true;
    CheckAgainstReference(a, opt, 10 + hq * 10 + hkv, "gqa " + std::to_string(hq) + "/" + std::to_string(hkv));
  }
  // KV cache: 3 queries at the end of 50 keys (default positions), and one decode token.
  for (int64_t lq : {1, 3}) {
    AttentionArgs a = Bshd(2, lq, 50, 4, 2, 64);
    a.causal = true;
    CheckAgainstReference(a, opt, 40 + lq, "kv cache lq " + std::to_string(lq));
  }
  // Decoding (few query rows per key block: scores from key rows in place) with RoPE,
  // ALiBi and a head_dim that is not a multiple of the vector width.
  {
    Rope rope = MakeRope(40, 40, group::PlanePairing::kHalfSplit);
    RopeRowTransform tr(rope);
    auto alibi = AlibiBias::CreateStandard(8, AlibiForm::kCausal);
    ASSERT_TRUE(alibi.ok());
    for (int64_t lq : {1, 2}) {
      AttentionArgs dec = Bshd(2, lq, 300, 8, 2, 40);
      dec.causal = true;
      dec.q_transform = dec.k_transform = &tr;
      dec.biases = {&*alibi};
      CheckAgainstReference(dec, opt, 45 + lq, "decode lq " + std::to_string(lq));
    }
  }
  // Padded, non-contiguous strides on every tensor.
  AttentionArgs a = Bshd(2, 19, 23, 4, 2, 24);
  a.q = a.o = Strides{19 * (4 * (24 + 3) + 5) + 11, 4 * (24 + 3) + 5, 24 + 3};
  a.k = a.v = Strides{23 * (2 * (24 + 1) + 7) + 2, 2 * (24 + 1) + 7, 24 + 1};
  a.softmax_scale = 0.3;
  CheckAgainstReference(a, opt, 50, "strided");
  // block_q above the pass size (384 rows) and a GQA group wider than it: one pass takes
  // the whole group, one tile per head (400 tiles; they overflowed a 384-entry array).
  CpuAttentionOptions wide;
  wide.block_q = 400;
  AttentionArgs g = Bshd(1, 1, 100, 400, 1, 16);
  CheckAgainstReference(g, wide, 51, "block_q 400, 400 heads on one kv head");
}

TEST(CpuForward, VarlenWithEmptyAndSingleTokenSequences) {
  CpuAttentionOptions opt;
  opt.block_q = 8;
  opt.block_k = 32;
  opt.num_threads = 2;
  const std::vector<int64_t> cu_q = {0, 0, 1, 20, 20, 57};
  const std::vector<int64_t> cu_k = {0, 3, 4, 40, 40, 77};
  for (bool causal : {false, true}) {
    AttentionArgs a = Thd(cu_q, cu_k, 4, 2, 48);
    a.causal = causal;
    CheckAgainstReference(a, opt, causal ? 61 : 60, causal ? "varlen causal" : "varlen");
  }
}

// Positions up to INT64_MAX with a relative bias (ALiBi's tiles come by distance where
// the positions run consecutively, which is checked first): queries ascending, keys
// descending from INT64_MAX (the check once formed INT64_MAX + 1).
TEST(CpuForward, PositionsUpToInt64Max) {
  AttentionArgs a = Bshd(1, 20, 20, 2, 2, 16);
  a.causal = true;
  std::vector<int64_t> pos(20), rev(20);
  for (int64_t j = 0; j < 20; ++j) {
    pos[j] = std::numeric_limits<int64_t>::max() - 19 + j;
    rev[j] = std::numeric_limits<int64_t>::max() - j;
  }
  a.q_positions = pos;
  a.k_positions = rev;
  auto alibi = AlibiBias::CreateStandard(2, AlibiForm::kCausal);
  ASSERT_TRUE(alibi.ok());
  a.biases = {&*alibi};
  CpuAttentionOptions opt;
  opt.block_q = 8;
  opt.block_k = 64;
  CheckAgainstReference(a, opt, 71, "positions up to INT64_MAX");
}

TEST(CpuForward, ExplicitPositionsMaskRowsWithNoKey) {
  // Shuffled positions: causal masks by position, not index; query 0 sees no key.
  AttentionArgs a = Bshd(1, 9, 40, 2, 2, 32);
  a.causal = true;
  std::vector<int64_t> pk(40), pq = {-5, 100, 3, 17, 39, 0, 20, 21, 8};
  for (int64_t j = 0; j < 40; ++j) pk[j] = (j * 17) % 40;
  a.q_positions = pq;
  a.k_positions = pk;
  CpuAttentionOptions opt;
  opt.block_q = 4;
  opt.block_k = 32;
  CheckAgainstReference(a, opt, 70, "explicit positions");
}

TEST(CpuForward, RowTransformsInsideTheKernel) {
  CpuAttentionOptions opt;
  opt.block_q = 16;
  opt.block_k = 32;
  int seed = 80;
  for (auto pairing : {group::PlanePairing::kHalfSplit, group::PlanePairing::kInterleaved}) {
    for (int64_t rot : {64, 32}) {  // full and partial rotary
      Rope rope = MakeRope(64, rot, pairing);
      RopeRowTransform tr(rope);
      AttentionArgs a = Bshd(1, 50, 50, 4, 2, 64);
      a.causal = true;
      a.q_transform = a.k_transform = &tr;
      // Positions near 2^31 (angles reduced exactly in the prepared table).
      std::vector<int64_t> pos(50);
      for (int64_t t = 0; t < 50; ++t) pos[t] = (int64_t{1} << 31) - 60 + t;
      a.q_positions = a.k_positions = pos;
      CheckAgainstReference(a, opt, ++seed, "rope rot " + std::to_string(rot));
    }
  }
  {
    // GRAPE-M commuting planes (learned frequencies on arbitrary disjoint planes) through
    // its prepared tables: double rows equal the plain Apply bit for bit (the same exact
    // angles and arithmetic); float rows are rotated in float (ExpectPlanesFloatRows).
    std::vector<encodings::sequence::CoordinatePlane> planes = {{0, 5, 0.3}, {2, 7, -1.1},
                                                                {9, 1, 0.02}, {12, 15, 2.5}};
    auto cp = encodings::sequence::GrapeMCommutingPlanes::Create(16, planes);
    ASSERT_TRUE(cp.ok()) << cp.status();
    GrapeMRowTransform<encodings::sequence::GrapeMCommutingPlanes> ct(*cp);
    std::vector<int64_t> pos = {0, 5, -3, int64_t{1} << 31, 77};
    std::mt19937_64 r2(3);
    std::vector<float> x = RandomF(pos.size() * 16, &r2);
    auto prepared = ct.Prepare(pos);
    ASSERT_TRUE(prepared.ok());
    std::vector<double> cy(x.begin(), x.end()), cz = cy;
    ASSERT_TRUE(ct.Forward(pos, cy.data(), 16).ok());
    ASSERT_TRUE((*prepared)->Forward(0, 5, cz.data(), 16).ok());
    EXPECT_EQ(cy, cz);
    ExpectPlanesFloatRows(ct, planes, 16, pos, x, "four scattered planes");
    // GRAPE-M's product of rank-2 rotations (one generator degenerate: a parallel to b)
    // through its prepared table (angles once per call): on double rows the plain Apply's
    // arithmetic up to the order of the dot products' sums (1e-13); on float rows float
    // arithmetic (vectorised), within 1e-5 of Apply's double-then-rounded rows: each of
    // the 4 rotations rounds sums of 16 O(1) products (~1e-6 each).
    std::mt19937_64 r3(4);
    std::vector<Rank2Generator> gens;
    for (int g = 0; g < 4; ++g) {
      std::vector<double> a(16), b(16);
      for (int i = 0; i < 16; ++i) {
        a[i] = std::normal_distribution<double>()(r3);
        b[i] = g == 2 ? 2.0 * a[i] : std::normal_distribution<double>()(r3);
      }
      gens.push_back({a, b, 0.1 * (g + 1)});
    }
    auto prod = GrapeMProduct::Create(gens);
    ASSERT_TRUE(prod.ok()) << prod.status();
    GrapeMRowTransform<GrapeMProduct> pt(*prod);
    std::vector<float> py = x, pz = x;
    ASSERT_TRUE(pt.Forward(pos, py.data(), 16).ok());
    auto pprep = pt.Prepare(pos);
    ASSERT_TRUE(pprep.ok());
    ASSERT_TRUE((*pprep)->Forward(0, 5, pz.data(), 16).ok());
    for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(pz[i], py[i], 1e-5) << i;
    EXPECT_NE(pz, x);  // (the rows did move)
    std::vector<double> dx(x.begin(), x.end()), dy = dx, dz = dx;
    ASSERT_TRUE(pt.Forward(pos, dy.data(), 16).ok());
    ASSERT_TRUE((*pprep)->Forward(0, 5, dz.data(), 16).ok());
    for (size_t i = 0; i < dx.size(); ++i) EXPECT_NEAR(dz[i], dy[i], 1e-13) << i;
    ASSERT_TRUE((*pprep)->Backward(0, 5, pz.data(), 16).ok());
    for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(pz[i], x[i], 1e-5);  // G^T G = I
    AttentionArgs ca = Bshd(1, 40, 40, 2, 2, 16);
    ca.causal = true;
    ca.q_transform = ca.k_transform = &ct;
    CheckAgainstReference(ca, opt, 89, "grape-m commuting planes");
  }
  std::mt19937_64 rng(9);
  const int64_t d = 16;
  auto prod =
      GrapeMProduct::Create({Rank2Generator{RandomUniform(d, &rng), RandomUniform(d, &rng), 0.3},
                             Rank2Generator{RandomUniform(d, &rng), RandomUniform(d, &rng), -0.7}});
  ASSERT_TRUE(prod.ok()) << prod.status();
  GrapeMRowTransform<GrapeMProduct> gm(*prod);
  AttentionArgs a = Bshd(2, 30, 30, 2, 2, d);
  a.causal = true;
  a.q_transform = a.k_transform = &gm;
  CheckAgainstReference(a, opt, 90, "grape-m product");
  Eigen::MatrixXd skew = Eigen::MatrixXd::Random(d, d);
  skew = 0.1 * (skew - skew.transpose()).eval();
  auto alg = AlgebraicSequence::Create(skew);
  ASSERT_TRUE(alg.ok()) << alg.status();
  AlgebraicRowTransform at(*alg);
  a.q_transform = a.k_transform = &at;
  a.causal = false;
  CheckAgainstReference(a, opt, 91, "algebraic");
}

// GRAPE-M commuting planes on float rows, for the layouts the float path treats apart
// (descriptor.cc, PreparedPlanes): planes with consecutive coordinates in one run
// (RoPE's half-split layout, d / 2 planes), interleaved pairs (runs of one), runs broken
// in the middle, scattered planes and a coordinate on no plane; each against the double
// Apply (ExpectPlanesFloatRows). The float table steps from token to token where the
// positions are consecutive (PlanesFloatTable) and must still be the exact values'
// rounding bit for bit: every row rotated by a transform prepared for all the tokens
// equals the row rotated by one prepared for its token alone (a table computed exactly),
// over runs of consecutive positions longer than the anchor interval (16), near 2^31,
// negative, and with gaps, on 1 and 3 threads.
TEST(PreparedPlanes, FloatRowsAndTheSteppedTableEveryLayout) {
  const int64_t d = 64;
  std::vector<int64_t> pos;
  for (int64_t t = 0; t < 45; ++t) pos.push_back(t);
  for (int64_t t = 0; t < 40; ++t) pos.push_back((int64_t{1} << 31) - 20 + t);
  for (int64_t t = 0; t < 20; ++t) pos.push_back(-70 + t);
  for (int64_t t = 0; t < 10; ++t) pos.push_back(1000 + 3 * t);  // not consecutive
  pos.push_back(5);
  const int64_t n = static_cast<int64_t>(pos.size());
  Rope rope = MakeRope(d, d, group::PlanePairing::kHalfSplit);
  std::vector<CoordinatePlane> half, interleaved, broken, scattered;
  for (int64_t i = 0; i < d / 2; ++i) {
    const double w = rope.thetas()[i] * (i % 3 == 0 ? 1.0 : 1.7);  // learned-looking
    half.push_back({i, i + d / 2, w});
    interleaved.push_back({2 * i, 2 * i + 1, w});
    if (i != 9 && i != 20) broken.push_back({i, i + d / 2, w});  // runs 0-8, 10-19, 21-31
  }
  broken.push_back({9, 20 + d / 2, 2.5});  // and a plane across the runs' gaps
  for (int64_t i = 0; i < 7; ++i) scattered.push_back({(5 * i + 3) % d, (5 * i + 40) % d, 0.3 * i - 1.0});
  std::mt19937_64 rng(12);
  const std::vector<float> x = RandomF(static_cast<size_t>(n * d), &rng);
  for (const auto& [what, planes] :
       std::vector<std::pair<std::string, std::vector<CoordinatePlane>>>{
           {"half-split run", half}, {"interleaved", interleaved},
           {"broken runs", broken}, {"scattered", scattered}}) {
    auto cp = GrapeMCommutingPlanes::Create(d, planes);
    ASSERT_TRUE(cp.ok()) << cp.status();
    GrapeMRowTransform<GrapeMCommutingPlanes> tr(*cp);
    ExpectPlanesFloatRows(tr, planes, d, pos, x, what);
    std::vector<float> one = x;  // each token prepared alone: the exact table
    for (int64_t t = 0; t < n; ++t) {
      auto p1 = tr.Prepare(absl::MakeConstSpan(pos).subspan(t, 1));
      ASSERT_TRUE(p1.ok()) << p1.status();
      ASSERT_TRUE((*p1)->Forward(0, 1, one.data() + t * d, d).ok());
    }
    for (int threads : {1, 3}) {
      const ScopedPrepareThreads scope(threads);
      auto all = tr.Prepare(pos);
      ASSERT_TRUE(all.ok()) << all.status();
      std::vector<float> y = x;
      ASSERT_TRUE((*all)->Forward(0, n, y.data(), d).ok());
      for (int64_t t = 0; t < n; ++t) {
        for (int64_t c = 0; c < d; ++c) {
          ASSERT_EQ(y[t * d + c], one[t * d + c])
              << what << ", " << threads << " threads: token " << t << " (position " << pos[t]
              << "), coordinate " << c;
        }
      }
      // Rows from the middle of the table (an offset into it) as well.
      std::vector<float> part(x.begin() + 50 * d, x.begin() + 60 * d);
      ASSERT_TRUE((*all)->Forward(50, 10, part.data(), d).ok());
      EXPECT_TRUE(std::equal(part.begin(), part.end(), one.begin() + 50 * d)) << what;
    }
  }
}

// The algebraic sequence encoding bound to tokens (descriptor.cc, PreparedAlgebraic): on
// float rows Q'^T, the planes and Q' in float, against the double Apply. Each output is
// two sums of d float products of O(|x|) terms with an orthogonal matrix (each within
// d 2^-24 ||x||_2 by Cauchy-Schwarz) and a plane rotation between (a few 2^-24): 3 d
// 2^-24 ||x||_2 per element is checked (a wrong plane, angle, sign or permutation moves
// outputs by O(|x|)). Dimensions around the products' 32-column and 4-row blocks (d 7:
// an odd one with a fixed coordinate, 32, 45, 64), row counts around the 64-row block
// and the 4-row one, consecutive and gapped positions near 2^31, an offset into the
// table; Backward after Forward gives x back within twice the bound; double rows equal
// Apply bit for bit; INT64_MIN (no transpose) is refused.
TEST(PreparedAlgebraic, FloatRowsWithinFloatRoundingOfApply) {
  for (int64_t d : {7, 32, 45, 64}) {
    std::mt19937_64 rng(40 + d);
    Eigen::MatrixXd skew = Eigen::MatrixXd::Random(d, d);
    skew = 0.3 * (skew - skew.transpose()).eval();
    auto alg = AlgebraicSequence::Create(skew);
    ASSERT_TRUE(alg.ok()) << alg.status();
    AlgebraicRowTransform tr(*alg);
    for (int64_t n : {1, 5, 64, 67, 131}) {
      std::vector<int64_t> pos(static_cast<size_t>(n));
      for (int64_t t = 0; t < n; ++t) {
        pos[t] = t < n / 2 ? (int64_t{1} << 31) - 40 + t : -5 + 2 * t;
      }
      const std::vector<float> x = RandomF(static_cast<size_t>(n * d), &rng);
      auto prepared = tr.Prepare(pos);
      ASSERT_TRUE(prepared.ok()) << prepared.status();
      std::vector<double> want(x.begin(), x.end()), dz = want;
      ASSERT_TRUE(alg->Apply<double>(pos, want.data(), d, want.data(), d).ok());
      ASSERT_TRUE((*prepared)->Forward(0, n, dz.data(), d).ok());
      EXPECT_EQ(dz, want) << d << " " << n;  // double rows: Apply itself
      std::vector<float> y = x;
      ASSERT_TRUE((*prepared)->Forward(0, n, y.data(), d).ok());
      for (int64_t t = 0; t < n; ++t) {
        double norm = 0;
        for (int64_t c = 0; c < d; ++c) norm += double(x[t * d + c]) * x[t * d + c];
        const double tol = 3.0 * d * 0x1p-24 * std::sqrt(norm);
        for (int64_t c = 0; c < d; ++c) {
          ASSERT_NEAR(y[t * d + c], want[t * d + c], tol)
              << "d " << d << ", " << n << " rows: token " << t << ", coordinate " << c;
        }
        if (t >= 3) {  // rows from an offset into the table
          std::vector<float> one(x.begin() + t * d, x.begin() + (t + 1) * d);
          ASSERT_TRUE((*prepared)->Forward(t, 1, one.data(), d).ok());
          EXPECT_TRUE(std::equal(one.begin(), one.end(), y.begin() + t * d)) << d << " " << t;
        }
      }
      ASSERT_TRUE((*prepared)->Backward(0, n, y.data(), d).ok());
      for (int64_t t = 0; t < n; ++t) {
        double norm = 0;
        for (int64_t c = 0; c < d; ++c) norm += double(x[t * d + c]) * x[t * d + c];
        for (int64_t c = 0; c < d; ++c) {
          ASSERT_NEAR(y[t * d + c], x[t * d + c], 6.0 * d * 0x1p-24 * std::sqrt(norm))
              << "backward, d " << d << ", token " << t;
        }
      }
    }
    const std::vector<int64_t> bad = {0, std::numeric_limits<int64_t>::min()};
    EXPECT_FALSE(tr.Prepare(bad).ok());
    EXPECT_FALSE(tr.PrepareForScores(bad).ok());
    // Bound for scores only (R(p) Q'^T): every inner product of two transformed rows is
    // Apply's (double rows within 1e-12 of O(d) sums; float rows within 3 d 2^-24 of
    // ||x|| ||y|| per product), Backward inverts Forward, and the rows themselves differ
    // from Apply's (another basis).
    const std::vector<int64_t> pos = {0, 1, 2, 3, 40, (int64_t{1} << 31) - 1, -9};
    const int64_t n = static_cast<int64_t>(pos.size());
    const std::vector<float> x = RandomF(static_cast<size_t>(n * d), &rng);
    auto scores = tr.PrepareForScores(pos);
    ASSERT_TRUE(scores.ok()) << scores.status();
    std::vector<double> full(x.begin(), x.end()), dz = full;
    ASSERT_TRUE(alg->Apply<double>(pos, full.data(), d, full.data(), d).ok());
    ASSERT_TRUE((*scores)->Forward(0, n, dz.data(), d).ok());
    std::vector<float> fz = x;
    ASSERT_TRUE((*scores)->Forward(0, n, fz.data(), d).ok());
    ExpectWholeFormInnerProducts(x, full, dz, fz, n, d, "d " + std::to_string(d));
    if (d > 7) {
      EXPECT_GT(std::fabs(dz[1] - full[1]), 1e-6);  // another basis
    }
    ASSERT_TRUE((*scores)->Backward(0, n, dz.data(), d).ok());
    for (int64_t i = 0; i < n * d; ++i) EXPECT_NEAR(dz[i], x[i], 1e-12) << d << " " << i;
    ASSERT_TRUE((*scores)->Backward(0, n, fz.data(), d).ok());
    for (int64_t i = 0; i < n * d; ++i) {
      const double norm = std::sqrt(RowDot(x.data() + (i / d) * d, x.data() + (i / d) * d, d));
      EXPECT_NEAR(fz[i], x[i], 6.0 * d * 0x1p-24 * norm) << d << " " << i;
    }
  }
}

// Kogkalidis et al.'s grids bound to per-axis coordinates: float rows through one Schur
// block per axis (descriptor.cc, SchurBlock) in float, double rows through the direct
// sum's own Apply. 2-D (dims 8 + 45) and 3-D (6 + 7 + 32) grids, coordinates up to 2^31
// and negative, 1 to 67 tokens: float rows within 3 d_axis 2^-24 ||x_axis|| of the
// double rows per axis block (as the sequence's bound), Backward inverts, double rows
// equal MakeAlgebraicGrid's Apply bit for bit.
TEST(PreparedAlgebraic, GridBlocksPerAxis) {
  std::mt19937_64 rng(61);
  auto skew = [&](int64_t d) {
    Eigen::MatrixXd m = Eigen::MatrixXd::Random(d, d);
    return Eigen::MatrixXd(0.3 * (m - m.transpose()));
  };
  auto g2 = encodings::sequence::MakeAlgebraicGrid2D(skew(8), skew(45));
  auto g3 = encodings::sequence::MakeAlgebraicGrid3D(skew(6), skew(7), skew(32));
  ASSERT_TRUE(g2.ok() && g3.ok());
  AlgebraicGridRowTransform<encodings::sequence::AlgebraicGrid2D> t2(*g2);
  AlgebraicGridRowTransform<encodings::sequence::AlgebraicGrid3D> t3(*g3);
  struct Case {
    const RowTransform* tr;
    std::vector<int64_t> dims;
  };
  for (const Case& c : {Case{&t2, {8, 45}}, Case{&t3, {6, 7, 32}}}) {
    const int64_t axes = static_cast<int64_t>(c.dims.size());
    int64_t d = 0;
    for (int64_t x : c.dims) d += x;
    for (int64_t n : {1, 5, 67}) {
      std::vector<int64_t> coords(static_cast<size_t>(n * axes));
      for (int64_t t = 0; t < n; ++t) {
        for (int64_t a = 0; a < axes; ++a) {
          coords[t * axes + a] = a == 0 ? (int64_t{1} << 31) - t : (t * (a + 2)) % 11 - 5;
        }
      }
      StructuredPositions sp;
      sp.num_axes = axes;
      sp.coords = coords;
      auto prepared = c.tr->PrepareStructured(sp);
      ASSERT_TRUE(prepared.ok()) << prepared.status();
      const std::vector<float> x = RandomF(static_cast<size_t>(n * d), &rng);
      std::vector<double> want(x.begin(), x.end());
      ASSERT_TRUE((*prepared)->Forward(0, n, want.data(), d).ok());
      if (axes == 2) {  // the double rows are the direct sum's Apply
        std::vector<encodings::sequence::AlgebraicGrid2D::Element> el;
        for (int64_t t = 0; t < n; ++t) el.push_back({coords[2 * t], coords[2 * t + 1]});
        std::vector<double> apply(x.begin(), x.end());
        ASSERT_TRUE(g2->Apply<double>(absl::MakeConstSpan(el), apply.data(), d, apply.data(), d).ok());
        EXPECT_EQ(apply, want) << n;
      }
      std::vector<float> y = x;
      ASSERT_TRUE((*prepared)->Forward(0, n, y.data(), d).ok());
      for (int back = 0; back < 2; ++back) {
        if (back) {
          ASSERT_TRUE((*prepared)->Backward(0, n, y.data(), d).ok());
        }
        for (int64_t t = 0; t < n; ++t) {
          for (int64_t a = 0, off = 0; a < axes; off += c.dims[a], ++a) {
            double norm = 0;
            for (int64_t i = off; i < off + c.dims[a]; ++i) norm += double(x[t * d + i]) * x[t * d + i];
            const double tol = (back ? 6.0 : 3.0) * c.dims[a] * 0x1p-24 * std::sqrt(norm);
            for (int64_t i = off; i < off + c.dims[a]; ++i) {
              ASSERT_NEAR(y[t * d + i], back ? double(x[t * d + i]) : want[t * d + i], tol)
                  << axes << "-D, " << n << " tokens, token " << t << ", coordinate " << i
                  << (back ? " (backward)" : "");
            }
          }
        }
      }
      // Bound for scores only: inner products of two tokens' rows are the whole form's
      // (double rows within 1e-12 d, float within 3 d 2^-24 ||x_i|| ||x_j||).
      auto scores = c.tr->PrepareStructuredForScores(sp);
      ASSERT_TRUE(scores.ok()) << scores.status();
      std::vector<double> dz(x.begin(), x.end());
      std::vector<float> fz = x;
      ASSERT_TRUE((*scores)->Forward(0, n, dz.data(), d).ok());
      ASSERT_TRUE((*scores)->Forward(0, n, fz.data(), d).ok());
      ExpectWholeFormInnerProducts(x, want, dz, fz, n, d, std::to_string(axes) + "-D");
      double moved = 0;  // another basis than the whole form's
      for (int64_t i = 0; i < n * d; ++i) moved = std::max(moved, std::fabs(dz[i] - want[i]));
      EXPECT_GT(moved, 1e-3) << axes;
      for (int64_t t = 0; t < n; ++t) {  // one row from an offset into the tables
        std::vector<float> one(x.begin() + t * d, x.begin() + (t + 1) * d);
        ASSERT_TRUE((*scores)->Forward(t, 1, one.data(), d).ok());
        EXPECT_TRUE(std::equal(one.begin(), one.end(), fz.begin() + t * d)) << axes << " " << t;
        std::vector<double> done(x.begin() + t * d, x.begin() + (t + 1) * d);
        ASSERT_TRUE((*scores)->Forward(t, 1, done.data(), d).ok());
        EXPECT_TRUE(std::equal(done.begin(), done.end(), dz.begin() + t * d)) << axes << " " << t;
      }
      ASSERT_TRUE((*scores)->Backward(0, n, dz.data(), d).ok());
      ASSERT_TRUE((*scores)->Backward(0, n, fz.data(), d).ok());
      for (int64_t t = 0; t < n; ++t) {
        const double norm = std::sqrt(RowDot(x.data() + t * d, x.data() + t * d, d));
        for (int64_t i = 0; i < d; ++i) {
          EXPECT_NEAR(dz[t * d + i], x[t * d + i], 1e-12 * d * norm) << axes << " backward";
          EXPECT_NEAR(fz[t * d + i], x[t * d + i], 6.0 * d * 0x1p-24 * norm) << axes << " backward";
        }
      }
    }
  }
}

// ScopedPrepareThreads (descriptor.h) nests and restores; a transform prepared on 1 and
// on 3 threads rotates rows identically (each table entry is the same arithmetic,
// whichever thread computes it): RoPE, GRAPE-M planes and GRAPE-M's rank-2 product.
TEST(PrepareThreads, ScopedAndTablesIndependentOfTheThreadCount) {
  EXPECT_EQ(PrepareThreads(), 1);
  {
    const ScopedPrepareThreads three(3);
    EXPECT_EQ(PrepareThreads(), 3);
    {
      const ScopedPrepareThreads none(0);  // at least 1
      EXPECT_EQ(PrepareThreads(), 1);
    }
    EXPECT_EQ(PrepareThreads(), 3);
  }
  EXPECT_EQ(PrepareThreads(), 1);
  const int64_t d = 16, n = 301;
  std::vector<int64_t> pos(n);
  for (int64_t t = 0; t < n; ++t) pos[t] = 7 * t - 40;
  Rope rope = MakeRope(d, d, group::PlanePairing::kHalfSplit);
  RopeRowTransform rt(rope);
  std::vector<encodings::sequence::CoordinatePlane> planes = {{0, 5, 0.3}, {2, 7, -1.1}};
  auto cp = encodings::sequence::GrapeMCommutingPlanes::Create(d, planes);
  ASSERT_TRUE(cp.ok()) << cp.status();
  GrapeMRowTransform<encodings::sequence::GrapeMCommutingPlanes> ct(*cp);
  std::mt19937_64 rng(5);
  std::vector<Rank2Generator> gens;
  for (int g = 0; g < 3; ++g) gens.push_back({RandomUniform(d, &rng), RandomUniform(d, &rng), 0.2 * (g + 1)});
  auto prod = GrapeMProduct::Create(gens);
  ASSERT_TRUE(prod.ok()) << prod.status();
  GrapeMRowTransform<GrapeMProduct> pt(*prod);
  const std::vector<float> x = RandomF(static_cast<size_t>(n * d), &rng);
  for (const RowTransform* tr : std::initializer_list<const RowTransform*>{&rt, &ct, &pt}) {
    std::vector<std::vector<float>> out;
    for (int threads : {1, 3}) {
      const ScopedPrepareThreads scope(threads);
      auto prepared = tr->Prepare(pos);
      ASSERT_TRUE(prepared.ok()) << prepared.status();
      std::vector<float> y = x;
      ASSERT_TRUE((*prepared)->Forward(0, n, y.data(), d).ok());
      out.push_back(y);
    }
    EXPECT_EQ(out[0], out[1]);
    EXPECT_NE(out[0], x);
  }
}

TEST(CpuForward, BiasesAndLocalityOnTheFly) {
  CpuAttentionOptions opt;
  opt.block_q = 16;
  opt.block_k = 32;
  const int64_t hq = 4, d = 32;
  auto alibi = AlibiBias::CreateStandard(hq, AlibiForm::kCausal);
  ASSERT_TRUE(alibi.ok());
  AttentionArgs a = Bshd(2, 45, 45, hq, 2, d);
  a.causal = true;
  a.biases = {&*alibi};
  CheckAgainstReference(a, opt, 100, "alibi");
  auto sym = AlibiBias::CreateStandard(hq, AlibiForm::kSymmetric);
  ASSERT_TRUE(sym.ok());
  a.causal = false;
  a.biases = {&*sym};
  CheckAgainstReference(a, opt, 101, "alibi symmetric");
  std::mt19937_64 rng(11);
  T5BucketConfig cfg;
  cfg.num_buckets = 8;
  cfg.max_distance = 20;
  auto t5 = T5RelativeBias::Create(RandomUniform(8 * hq, &rng), hq, cfg);
  ASSERT_TRUE(t5.ok()) << t5.status();
  a.biases = {&*t5};
  a.locality = 0.97;
  CheckAgainstReference(a, opt, 102, "t5 + locality");
  a.locality.reset();
  // FoX: one bias per sequence (content-dependent log forget gates).
  std::vector<double> logits = RandomUniform(45 * hq, &rng);
  for (double& x : logits) x = 3.0 * x + 1.0;
  auto f0 = FoxBias::Create(absl::MakeConstSpan(logits), 45, hq);
  auto f1 = FoxBias::Create(absl::MakeConstSpan(logits), 45, hq);
  ASSERT_TRUE(f0.ok() && f1.ok());
  a.causal = true;
  a.biases = {&*f0, &*f1};
  CheckAgainstReference(a, opt, 103, "fox");
}

TEST(CpuForward, EveryCompiledInstructionSetAgrees) {
  // One binary, several code paths: run each target this CPU supports (AVX-512, AVX2,
  // the portable baseline) through the same checks.
  AttentionArgs a = Bshd(1, 37, 37, 2, 1, 72);
  a.causal = true;
  CpuAttentionOptions opt;
  opt.block_q = 16;
  opt.block_k = 32;
  int runs = 0;
  for (int64_t target : cpu::CompiledTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    EXPECT_EQ(CpuAttentionIsa(), hwy::TargetName(target));
    CheckAgainstReference(a, opt, 120 + runs, std::string("target ") + hwy::TargetName(target));
    ++runs;
  }
  hwy::SetSupportedTargetsForTest(0);
  EXPECT_GE(runs, 2) << "expected the AVX2 path and the baseline at least";
}

TEST(CpuForward, StructuredTransformsInsideTheKernel) {
  const CpuAttentionOptions opt = CaseListOptions();
  uint64_t seed = 500;
  ForEachStructuredCase([&](const AttentionArgs& a, const std::string& what) {
    CheckAgainstReference(a, opt, ++seed, what);
  });
}

TEST(CpuForward, ShawLabelsInsideTheKernel) {
  const CpuAttentionOptions opt = CaseListOptions();
  uint64_t seed = 700;
  ForEachShawCase([&](const AttentionArgs& a, const std::string& what) {
    CheckAgainstReference(a, opt, ++seed, what);
  });
}

}  // namespace
}  // namespace attention
}  // namespace gpe
