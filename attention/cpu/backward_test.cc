// CpuBackward (backward.cc) against the double reference with the flash-attention
// accuracy criterion (test_util.h) for dq, dk, dv and the Shaw tables' gradients:
// shapes below, at and above the tiles, GQA, varlen, KV caches, positions, transforms,
// biases, locality, Shaw labels; the bias-gradient sink against the reference's, and
// GRAPE-M generator gradients through the kernel against central differences.
#include "attention/cpu/cpu_attention.h"

#include <cmath>
#include <functional>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "attention/cpu/kernels_amx.h"
#include "attention/cpu/test_util.h"
#include "attention/descriptor.h"
#include "attention/reference.h"
#include "attention/test_util.h"
#include "encodings/sequence/algebraic.h"
#include "encodings/sequence/bias.h"
#include "encodings/sequence/grape_m.h"
#include "encodings/sequence/rope.h"
#include "gtest/gtest.h"

namespace gpe {
namespace attention {
namespace {

using encodings::sequence::AlgebraicSequence;
using encodings::sequence::AlibiBias;
using encodings::sequence::AlibiForm;
using encodings::sequence::GrapeMProduct;
using encodings::sequence::Rank2Generator;
using encodings::sequence::Rope;
using encodings::sequence::T5BucketConfig;
using encodings::sequence::T5RelativeBias;
using test::Bshd;
using test::CaseListOptions;
using test::CheckBackward;
using test::CheckBackwardBf16;
using test::Extent;
using test::ForEachShawCase;
using test::ForEachStructuredCase;
using test::MakeRope;
using test::RandomF;
using test::RandomUniform;
using test::Thd;

TEST(CpuBackward, ShapesBelowAtAndAboveTiles) {
  CpuAttentionOptions small;
  small.block_q = 16;
  small.block_k = 64;
  small.num_threads = 3;
  int seed = 200;
  for (int64_t d : {32, 80, 128}) {
    for (int64_t l : {1, 17, 64, 65, 130}) {
      for (bool causal : {false, true}) {
        AttentionArgs a = Bshd(1, l, l, 2, 1, d);
        a.causal = causal;
        CheckBackward(a, small, ++seed,
                      "d " + std::to_string(d) + " l " + std::to_string(l) + (causal ? " causal" : ""));
      }
    }
  }
  AttentionArgs a = Bshd(1, 150, 150, 2, 2, 64);
  a.causal = true;
  CheckBackward(a, {}, ++seed, "default tiles");
}

TEST(CpuBackward, GqaVarlenKvCacheAndPositions) {
  CpuAttentionOptions opt;
  opt.block_q = 8;
  opt.block_k = 64;
  opt.num_threads = 2;
  AttentionArgs a = Bshd(2, 21, 40, 6, 2, 40);
  a.causal = true;
  CheckBackward(a, opt, 300, "gqa 6/2 kv cache");
  const std::vector<int64_t> cu_q = {0, 0, 1, 20, 20, 57};
  const std::vector<int64_t> cu_k = {0, 3, 4, 40, 40, 77};
  AttentionArgs t = Thd(cu_q, cu_k, 4, 2, 48);
  t.causal = true;
  CheckBackward(t, opt, 301, "varlen");
  AttentionArgs e = Bshd(1, 9, 40, 2, 2, 32);
  e.causal = true;
  std::vector<int64_t> pk(40), pq = {-5, 100, 3, 17, 39, 0, 20, 21, 8};
  for (int64_t j = 0; j < 40; ++j) pk[j] = (j * 17) % 40;
  e.q_positions = pq;
  e.k_positions = pk;
  CheckBackward(e, opt, 302, "explicit positions");
}

TEST(CpuBackward, TransformsBiasesAndLocality) {
  CpuAttentionOptions opt;
  opt.block_q = 16;
  opt.block_k = 64;
  Rope rope = MakeRope(64, 48, group::PlanePairing::kInterleaved);
  RopeRowTransform tr(rope);
  AttentionArgs a = Bshd(1, 70, 70, 4, 2, 64);
  a.causal = true;
  a.q_transform = a.k_transform = &tr;
  CheckBackward(a, opt, 400, "rope partial");
  a.q_transform = a.k_transform = nullptr;
  auto alibi = AlibiBias::CreateStandard(4, AlibiForm::kCausal);
  ASSERT_TRUE(alibi.ok());
  a.biases = {&*alibi};
  a.locality = 0.98;
  CheckBackward(a, opt, 401, "alibi + locality");
}

// The algebraic sequence encoding inside the forward and the backward: the kernels bind
// it for scores only (RowTransform::PrepareForScores: R(p) Q'^T, one d x d product per
// row) where one object transforms q and k and no Shaw key labels read the rows; the
// double reference applies Q R(p) Q^T. Self-attention, a KV cache (query positions
// other than the keys'), and with Shaw labels (the whole form). Against the reference
// with CheckBackward's criterion.
TEST(CpuBackward, AlgebraicEncodingForScoresAndWhole) {
  CpuAttentionOptions opt;
  opt.block_q = 16;
  opt.block_k = 64;
  const int64_t d = 32;
  Eigen::MatrixXd skew = Eigen::MatrixXd::Random(d, d);
  skew = 0.2 * (skew - skew.transpose()).eval();
  auto alg = AlgebraicSequence::Create(skew);
  ASSERT_TRUE(alg.ok()) << alg.status();
  AlgebraicRowTransform tr(*alg);
  AttentionArgs a = Bshd(1, 70, 70, 4, 2, d);
  a.causal = true;
  a.q_transform = a.k_transform = &tr;
  CheckBackward(a, opt, 410, "algebraic, self-attention");
  AttentionArgs cache = Bshd(2, 5, 83, 4, 2, d);
  cache.causal = true;
  cache.q_transform = cache.k_transform = &tr;
  CheckBackward(cache, opt, 411, "algebraic, kv cache");
  uint64_t seed = 412;
  ForEachShawCase([&](const AttentionArgs& shaw, const std::string& what) {
    if (shaw.q_transform != nullptr || shaw.shaw_keys == nullptr) return;  // d 32 each
    AttentionArgs b = shaw;
    b.q_transform = b.k_transform = &tr;
    CheckBackward(b, opt, ++seed, "algebraic + " + what);
  });
}

TEST(CpuBackward, StructuredTransformsInsideTheKernel) {
  const CpuAttentionOptions opt = CaseListOptions();
  uint64_t seed = 600;
  ForEachStructuredCase([&](const AttentionArgs& a, const std::string& what) {
    CheckBackward(a, opt, ++seed, what);
  });
}

TEST(CpuBackward, ShawLabelsAndTableGradients) {
  const CpuAttentionOptions opt = CaseListOptions();
  uint64_t seed = 800;
  ForEachShawCase([&](const AttentionArgs& a, const std::string& what) {
    CheckBackward(a, opt, ++seed, what);
  });
}

// The bfloat16 backward on the bf16 dot products (backward.cc, DotTileGradients): tiles
// of 16 x 64 and the default 96 x 128, lengths below, at and above each (odd lengths
// leave a query pair or key pair half empty), GQA with a KV cache, packed sequences,
// RoPE, ALiBi, a softcap, a window, and an odd block_q (the widened path then).
CpuAttentionOptions DotProducts(CpuAttentionOptions opt) {
  opt.bf16_arithmetic = CpuAttentionOptions::Bf16Arithmetic::kDotProducts;
  return opt;
}

TEST(CpuBackwardBf16, DotProductsBelowAtAndAboveTiles) {
  const CpuAttentionOptions small = DotProducts(CaseListOptions());
  uint64_t seed = 1000;
  for (int64_t d : {32, 80, 128}) {
    for (int64_t l : {1, 5, 17, 64, 65, 130}) {
      for (bool causal : {false, true}) {
        AttentionArgs a = Bshd(1, l, l, 2, 1, d);
        a.causal = causal;
        CheckBackwardBf16(a, small, ++seed,
                          "d " + std::to_string(d) + " l " + std::to_string(l) +
                              (causal ? " causal" : ""));
      }
    }
  }
  CpuAttentionOptions defaults = DotProducts({});
  defaults.num_threads = 2;
  for (int64_t l : {95, 97, 200}) {
    for (bool causal : {false, true}) {
      AttentionArgs a = Bshd(1, l, l, 2, 2, 64);
      a.causal = causal;
      CheckBackwardBf16(a, defaults, ++seed,
                        "default tiles l " + std::to_string(l) + (causal ? " causal" : ""));
    }
  }
  CpuAttentionOptions odd = small;
  odd.block_q = 15;
  AttentionArgs a = Bshd(1, 40, 40, 2, 1, 32);
  a.causal = true;
  CheckBackwardBf16(a, odd, ++seed, "odd block_q");
}

// kAmxTiles: the backward's five products (S, dP, dV, dQ, dK) on AMX tiles, emulated here
// where the CPU has none (kernels_amx_test.cc holds the emulation to the instruction),
// against the double reference with the dot products' criterion (CheckBackwardBf16), on
// head dims whose pairs fill the tiles' 32-element steps (32, 64, 128) and one that does
// not (80: its scores on the dot products), lengths below, at and above the 16-row blocks,
// 32-key steps and 64-key panels, causal and not, default and 16 x 64 tiles.
TEST(CpuBackwardBf16, AmxTilesBelowAtAndAboveTiles) {
  CpuAttentionOptions small = DotProducts(CaseListOptions());
  small.bf16_arithmetic = CpuAttentionOptions::Bf16Arithmetic::kAmxTiles;
  CpuAttentionOptions defaults = DotProducts({});
  defaults.bf16_arithmetic = CpuAttentionOptions::Bf16Arithmetic::kAmxTiles;
  defaults.num_threads = 2;
  cpu::SetAmxEmulationForTest(true);
  const int64_t dots = cpu::AmxEmulatedDotsForTest();
  uint64_t seed = 1500;
  for (int64_t d : {32, 64, 128, 80}) {
    for (int64_t l : {17, 64, 130}) {
      for (bool causal : {false, true}) {
        AttentionArgs a = Bshd(1, l, l, 2, 1, d);
        a.causal = causal;
        const std::string what = "amx d " + std::to_string(d) + " l " + std::to_string(l) +
                                  (causal ? " causal" : "");
        CheckBackwardBf16(a, small, ++seed, what + " small tiles");
        CheckBackwardBf16(a, defaults, ++seed, what);
      }
    }
  }
  EXPECT_GT(cpu::AmxEmulatedDotsForTest(), dots) << "no tile ran";
  cpu::SetAmxEmulationForTest(false);
}

// The backward recomputes P = exp2(S - lse) from bf16-rounded rows against the forward's
// lse, so the forward must score the same rounded rows wherever it forms scores. Each row
// of that P then sums to 1: with dO = e_0 on one row and 0 elsewhere, sum_j dv[j][0] =
// sum_j P(row, j). Cases: 16 query rows (direct tiles: float products), the tail item of
// 100 rows (rows 96-99 direct), RoPE decoding (16 queries, 2048 keys: the tile step per
// kv head with rotated keys), block_q 15 (an odd tile: the backward's float products;
// its sums stay within the tolerance either way, its dq / dk / dv moved by 3e-2).
// q scaled by 16 (scores of O(10), where a rounding gap of 2^-9 relative shows as
// O(1e-2) in the sums: 0.005-0.03 before). Tolerance 4e-3: dv is rounded to bf16 on
// store, 2^-9 relative per key, at most 2e-3 in a sum of probabilities.
TEST(CpuBackwardBf16, ProbabilitiesOfTheRecomputedScoresSumToOne) {
  if (!CpuHasBf16DotProducts()) GTEST_SKIP() << "no AVX512_BF16 on this CPU";
  using encodings::sequence::BFloat16;
  Rope rope = MakeRope(32, 32, group::PlanePairing::kHalfSplit);
  RopeRowTransform tr(rope);
  struct Case {
    int64_t lq, lk, block_q;
    bool rope;
    std::vector<int64_t> rows;
  };
  const std::vector<Case> cases = {{16, 512, 0, false, {0, 15}},
                                   {100, 300, 0, false, {3, 97, 99}},
                                   {16, 2048, 0, true, {0, 7, 15}},
                                   {40, 512, 15, false, {0, 39}}};
  std::mt19937_64 rng(77);
  for (const Case& c : cases) {
    const int64_t d = 32;
    AttentionArgs a = Bshd(1, c.lq, c.lk, 1, 1, d);
    if (c.rope) a.q_transform = a.k_transform = &tr;
    CpuAttentionOptions opt = DotProducts({});
    opt.block_q = c.block_q;
    opt.num_threads = 2;
    auto bf = [](const std::vector<float>& x) {
      std::vector<BFloat16> y(x.size());
      for (size_t i = 0; i < x.size(); ++i) y[i] = encodings::sequence::ToBFloat16(x[i]);
      return y;
    };
    std::vector<float> qf = RandomF(c.lq * d, &rng);
    for (float& x : qf) x *= 16.0f;
    const std::vector<BFloat16> q = bf(qf), k = bf(RandomF(c.lk * d, &rng)),
                                v = bf(RandomF(c.lk * d, &rng));
    std::vector<BFloat16> o(q.size()), dq(q.size()), dk(k.size()), dv(v.size());
    std::vector<float> lse(c.lq);
    ASSERT_TRUE(CpuForward(a, q.data(), k.data(), v.data(), o.data(), lse.data(), opt).ok());
    for (int64_t row : c.rows) {
      std::vector<float> e(c.lq * d, 0.0f);
      e[row * d] = 1.0f;
      const std::vector<BFloat16> d_o = bf(e);
      ASSERT_TRUE(CpuBackward(a, q.data(), k.data(), v.data(), o.data(), lse.data(), d_o.data(),
                              dq.data(), dk.data(), dv.data(), nullptr, opt)
                      .ok());
      double sum = 0.0;
      for (int64_t j = 0; j < c.lk; ++j) sum += encodings::sequence::ToFloat(dv[j * d]);
      EXPECT_NEAR(sum, 1.0, 4e-3) << "lq " << c.lq << " lk " << c.lk << " block_q "
                                  << c.block_q << (c.rope ? " rope" : "") << " row " << row;
    }
  }
}

TEST(CpuBackwardBf16, DotProductsWithGqaPackingEncodingsAndMasks) {
  const CpuAttentionOptions opt = DotProducts(CaseListOptions());
  AttentionArgs g = Bshd(2, 21, 40, 6, 2, 40);
  g.causal = true;
  CheckBackwardBf16(g, opt, 1100, "gqa 6/2 kv cache");
  const std::vector<int64_t> cu_q = {0, 0, 1, 20, 20, 57};
  const std::vector<int64_t> cu_k = {0, 3, 4, 40, 40, 77};
  AttentionArgs t = Thd(cu_q, cu_k, 4, 2, 48);
  t.causal = true;
  CheckBackwardBf16(t, opt, 1101, "varlen");
  Rope rope = MakeRope(64, 48, group::PlanePairing::kInterleaved);
  RopeRowTransform tr(rope);
  AttentionArgs a = Bshd(1, 70, 70, 4, 2, 64);
  a.causal = true;
  a.q_transform = a.k_transform = &tr;
  CheckBackwardBf16(a, opt, 1102, "rope partial");
  a.q_transform = a.k_transform = nullptr;
  auto alibi = AlibiBias::CreateStandard(4, AlibiForm::kCausal);
  ASSERT_TRUE(alibi.ok());
  a.biases = {&*alibi};
  CheckBackwardBf16(a, opt, 1103, "alibi");
  a.biases = {};
  a.softcap = 5.0;
  CheckBackwardBf16(a, opt, 1104, "softcap");
  a.softcap.reset();
  a.causal = false;
  a.window_left = 20;
  a.window_right = 3;
  CheckBackwardBf16(a, opt, 1105, "window");
}

TEST(CpuBackwardBf16, DotProductsWithStructuredTransforms) {
  const CpuAttentionOptions opt = DotProducts(CaseListOptions());
  uint64_t seed = 1200;
  ForEachStructuredCase([&](const AttentionArgs& a, const std::string& what) {
    CheckBackwardBf16(a, opt, ++seed, what);
  });
}

TEST(CpuBackward, BiasGradientSinkMatchesReference) {
  // T5 table gradient through the sink equals the reference's.
  std::mt19937_64 rng(12);
  const int64_t hq = 2;
  T5BucketConfig cfg;
  cfg.num_buckets = 8;
  cfg.max_distance = 20;
  auto t5 = T5RelativeBias::Create(RandomUniform(8 * hq, &rng), hq, cfg);
  ASSERT_TRUE(t5.ok());
  AttentionArgs a = Bshd(2, 33, 33, hq, 1, 16);
  a.causal = true;
  a.biases = {&*t5};
  const size_t n = Extent(a, a.q, true), nk = Extent(a, a.k, false);
  std::vector<float> q = RandomF(n, &rng), k = RandomF(nk, &rng), v = RandomF(nk, &rng),
                     dout = RandomF(n, &rng);
  std::vector<double> g_cpu(8 * hq, 0.0), g_ref(8 * hq, 0.0);
  BiasGradientSink cpu_sink = [&](int64_t, int64_t head, absl::Span<const int64_t> qp,
                                  absl::Span<const int64_t> kp, const double* g, int64_t ld) {
    return t5->AccumulateTableGradient(head, qp, kp, g, ld, absl::MakeSpan(g_cpu));
  };
  BiasGradientSink ref_sink = [&](int64_t, int64_t head, absl::Span<const int64_t> qp,
                                  absl::Span<const int64_t> kp, const double* g, int64_t ld) {
    return t5->AccumulateTableGradient(head, qp, kp, g, ld, absl::MakeSpan(g_ref));
  };
  CpuAttentionOptions opt;
  opt.block_q = 8;
  opt.block_k = 64;
  ASSERT_TRUE(CpuBackward(a, q.data(), k.data(), v.data(), nullptr, nullptr, dout.data(), nullptr,
                          nullptr, nullptr, cpu_sink, opt)
                  .ok());
  std::vector<double> qd(q.begin(), q.end()), kd(k.begin(), k.end()), vd(v.begin(), v.end()),
      dod(dout.begin(), dout.end());
  ASSERT_TRUE(ReferenceBackward<double>(a, qd.data(), kd.data(), vd.data(), dod.data(), nullptr,
                                        nullptr, nullptr, ref_sink)
                  .ok());
  for (size_t i = 0; i < g_ref.size(); ++i) {
    // Sums of ~500 float products of O(1) values: 1e-4 absolute is ~100 float ulps.
    EXPECT_NEAR(g_cpu[i], g_ref[i], 1e-4) << i;
  }
  double total = 0;
  for (double x : g_ref) total += std::fabs(x);
  EXPECT_GT(total, 1e-3);  // the gradient is not trivially zero
}

// One gradient's rows (hq heads, bshd) against apply of the same rows, head by head.
void ExpectHeadsTurned(const std::vector<float>& g, const std::vector<float>& rot, int64_t l,
                       int64_t hq, int64_t d, const char* what,
                       const std::function<absl::Status(double*)>& apply) {
  for (int64_t h = 0; h < hq; ++h) {
    std::vector<double> want(static_cast<size_t>(l * d));
    for (int64_t t = 0; t < l; ++t) {
      for (int64_t c = 0; c < d; ++c) want[t * d + c] = g[(t * hq + h) * d + c];
    }
    ASSERT_TRUE(apply(want.data()).ok()) << what;
    double big = 0;
    for (double x : want) big = std::max(big, std::fabs(x));
    ASSERT_GT(big, 1e-3) << what;
    for (int64_t t = 0; t < l; ++t) {
      for (int64_t c = 0; c < d; ++c) {
        EXPECT_NEAR(rot[(t * hq + h) * d + c], want[t * d + c], 1e-5 * big)
            << what << " head " << h << " token " << t << " coordinate " << c;
      }
    }
  }
}

// CpuBackward of a (l tokens x hq heads x d, bshd, random q, k, v and d_o) with
// dq_rotated / dk_rotated, each against T(p) g for its gradient g (dq, dk): apply(rows)
// turns one head's l rows (stride d, double) by T(p). Within 1e-5 of the rows' largest
// entry (float sums of O(10) terms); rows in another basis are off by O(1) of it.
void ExpectRotatedGradients(const AttentionArgs& a, int64_t l, int64_t hq, int64_t d,
                            std::mt19937_64* rng,
                            const std::function<absl::Status(double*)>& apply) {
  const size_t n = Extent(a, a.q, true);
  std::vector<float> q = RandomF(n, rng), k = RandomF(n, rng), v = RandomF(n, rng),
                     w = RandomF(n, rng);
  std::vector<float> dq(n), dk(n), dv(n), dq_rot(n), dk_rot(n);
  CpuBackwardExtras extras;
  extras.dq_rotated = dq_rot.data();
  extras.dk_rotated = dk_rot.data();
  ASSERT_TRUE(CpuBackward(a, q.data(), k.data(), v.data(), nullptr, nullptr, w.data(),
                          dq.data(), dk.data(), dv.data(), nullptr, {}, extras)
                  .ok());
  for (int pass = 0; pass < 2; ++pass) {
    const std::vector<float>& g = pass == 0 ? dq : dk;
    const std::vector<float>& rot = pass == 0 ? dq_rot : dk_rot;
    const char* what = pass == 0 ? "dq" : "dk";
    ExpectHeadsTurned(g, rot, l, hq, d, what, apply);
  }
}

// dq_rotated / dk_rotated with the algebraic encoding, which the kernels bind for scores
// only (R(p) Q'^T): the extras must still be dL/d(T(p) q) for T(p) = Q R(p) Q^T, i.e.
// T(p) dq (dq = T(p)^T dq_rotated, T orthogonal), as AlgebraicSequence::Backward needs
// them. Checked against Apply of the returned dq and dk in double: float sums of O(10)
// terms, 1e-5 relative to the rows' largest entry (rows in another basis are off by
// O(1) of it).
TEST(CpuBackward, RotatedGradientsInTheTransformsOwnBasis) {
  std::mt19937_64 rng(78);
  const int64_t d = 16, l = 37, hq = 2;
  Eigen::MatrixXd skew = Eigen::MatrixXd::Random(d, d);
  skew = 0.4 * (skew - skew.transpose()).eval();
  auto alg = AlgebraicSequence::Create(skew);
  ASSERT_TRUE(alg.ok()) << alg.status();
  AlgebraicRowTransform tr(*alg);
  AttentionArgs a = Bshd(1, l, l, hq, hq, d);
  a.causal = true;
  a.q_transform = a.k_transform = &tr;
  std::vector<int64_t> pos(l);
  for (int64_t t = 0; t < l; ++t) pos[t] = t;
  ExpectRotatedGradients(a, l, hq, d, &rng, [&](double* rows) {
    return alg->Apply<double>(pos, rows, d, rows, d);
  });
}

// The same for a 2-D algebraic grid (one Schur block per axis, dims 8 and 7: the
// conversion runs block by block at each block's offset) on structured (row, column)
// coordinates, against the direct sum's Apply of dq and dk.
TEST(CpuBackward, RotatedGradientsOfAGridInItsOwnBasis) {
  std::mt19937_64 rng(79);
  const int64_t l = 29, hq = 2;
  auto skew = [&](int64_t m) {
    Eigen::MatrixXd a = Eigen::MatrixXd::Random(m, m);
    return Eigen::MatrixXd(0.4 * (a - a.transpose()));
  };
  auto g2 = encodings::sequence::MakeAlgebraicGrid2D(skew(8), skew(7));
  ASSERT_TRUE(g2.ok()) << g2.status();
  const int64_t d = g2->dim();
  AlgebraicGridRowTransform<encodings::sequence::AlgebraicGrid2D> tr(*g2);
  AttentionArgs a = Bshd(1, l, l, hq, hq, d);
  a.causal = true;
  std::vector<int64_t> rc(static_cast<size_t>(2 * l));
  std::vector<encodings::sequence::AlgebraicGrid2D::Element> el;
  for (int64_t t = 0; t < l; ++t) {
    rc[2 * t] = t / 6, rc[2 * t + 1] = t % 6;
    el.push_back({t / 6, t % 6});
  }
  a.q_transform = a.k_transform = &tr;
  a.q_structured.num_axes = a.k_structured.num_axes = 2;
  a.q_structured.coords = a.k_structured.coords = rc;
  ExpectRotatedGradients(a, l, hq, d, &rng, [&](double* rows) {
    return g2->Apply<double>(absl::MakeConstSpan(el), rows, d, rows, d);
  });
}

TEST(CpuBackward, GrapeMGeneratorGradientsThroughTheKernel) {
  // dL/d(a, b, omega) of learned GRAPE-M generators: dq', dk' from the kernel, then
  // GrapeMProduct::Backward on each side, against central differences of the double
  // reference's loss L = sum(w * o).
  std::mt19937_64 rng(77);
  const int64_t d = 8, l = 20, hq = 2;
  std::vector<Rank2Generator> gens = {
      Rank2Generator{RandomUniform(d, &rng), RandomUniform(d, &rng), 0.4},
      Rank2Generator{RandomUniform(d, &rng), RandomUniform(d, &rng), -0.9}};
  AttentionArgs a = Bshd(1, l, l, hq, hq, d);
  a.causal = true;
  const size_t n = Extent(a, a.q, true);
  std::vector<float> q = RandomF(n, &rng), k = RandomF(n, &rng), v = RandomF(n, &rng),
                     w = RandomF(n, &rng);
  auto prod = GrapeMProduct::Create(gens);
  ASSERT_TRUE(prod.ok());
  GrapeMRowTransform<GrapeMProduct> tr(*prod);
  a.q_transform = a.k_transform = &tr;
  std::vector<float> dq_rot(n), dk_rot(n);
  CpuBackwardExtras extras;
  extras.dq_rotated = dq_rot.data();
  extras.dk_rotated = dk_rot.data();
  ASSERT_TRUE(CpuBackward(a, q.data(), k.data(), v.data(), nullptr, nullptr, w.data(), nullptr,
                          nullptr, nullptr, nullptr, {}, extras)
                  .ok());
  std::vector<int64_t> pos(l);
  for (int64_t t = 0; t < l; ++t) pos[t] = t;
  // Rows of one head at a time (token-major with hq heads: stride hq * d).
  GrapeMProduct::Gradients total;
  for (int64_t h = 0; h < hq; ++h) {
    for (const auto* side : {&q, &k}) {
      const std::vector<float>& grad = side == &q ? dq_rot : dk_rot;
      GrapeMProduct::Gradients g;
      ASSERT_TRUE(prod->Backward(pos, side->data() + h * d, hq * d, grad.data() + h * d, hq * d,
                                 static_cast<float*>(nullptr), 0, &g)
                      .ok());
      if (total.generators.empty()) {
        total = g;
      } else {
        for (size_t i = 0; i < g.generators.size(); ++i) {
          for (int64_t e = 0; e < d; ++e) {
            total.generators[i].a[e] += g.generators[i].a[e];
            total.generators[i].b[e] += g.generators[i].b[e];
          }
          total.generators[i].omega += g.generators[i].omega;
        }
      }
    }
  }
  std::vector<double> qd(q.begin(), q.end()), kd(k.begin(), k.end()), vd(v.begin(), v.end());
  auto loss = [&](const std::vector<Rank2Generator>& gs) {
    auto p = GrapeMProduct::Create(gs);
    EXPECT_TRUE(p.ok());
    GrapeMRowTransform<GrapeMProduct> t(*p);
    AttentionArgs b = a;
    b.q_transform = b.k_transform = &t;
    std::vector<double> o(n);
    EXPECT_TRUE(ReferenceForward<double>(b, qd.data(), kd.data(), vd.data(), o.data()).ok());
    double s = 0;
    for (size_t i = 0; i < n; ++i) s += w[i] * o[i];
    return s;
  };
  // Central differences in double, step 1e-5: truncation and rounding ~1e-9; the kernel's
  // float32 gradients carry ~1e-6 relative error on sums of O(10) terms: 2e-4 absolute.
  const double hstep = 1e-5;
  for (size_t i = 0; i < gens.size(); ++i) {
    for (int64_t e = 0; e < d; e += 3) {
      auto plus = gens, minus = gens;
      plus[i].a[e] += hstep;
      minus[i].a[e] -= hstep;
      EXPECT_NEAR(total.generators[i].a[e], (loss(plus) - loss(minus)) / (2 * hstep), 2e-4)
          << "a " << i << " " << e;
      plus = gens;
      minus = gens;
      plus[i].b[e] += hstep;
      minus[i].b[e] -= hstep;
      EXPECT_NEAR(total.generators[i].b[e], (loss(plus) - loss(minus)) / (2 * hstep), 2e-4)
          << "b " << i << " " << e;
    }
    auto plus = gens, minus = gens;
    plus[i].omega += hstep;
    minus[i].omega -= hstep;
    EXPECT_NEAR(total.generators[i].omega, (loss(plus) - loss(minus)) / (2 * hstep), 2e-4)
        << "omega " << i;
  }
}

}  // namespace
}  // namespace attention
}  // namespace gpe
