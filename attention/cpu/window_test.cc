// Sliding windows, Gemma 2's logit softcap and per-head sinks (descriptor.h, WINDOW,
// SOFTCAP AND SINKS) in the CPU kernels against the double reference: the query-item
// forward and the backward on shapes below, at and above the tiles (block_q 16, block_k
// 64), causal and not, GQA, windows narrower than, equal to and wider than a tile, with
// RoPE and ALiBi; the split-key decoding path (one or three queries against 1100 keys,
// where only the window's keys are split over the threads); unsorted explicit positions;
// positions near 2^62; and the sink's gradient.
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "attention/cpu/cpu_attention.h"
#include "attention/cpu/test_util.h"
#include "attention/descriptor.h"
#include "attention/reference.h"
#include "attention/test_util.h"
#include "encodings/sequence/bias.h"
#include "encodings/sequence/rope.h"
#include "gtest/gtest.h"

namespace gpe {
namespace attention {
namespace {

struct Features {
  int64_t left, right;
  double softcap;  // 0: none
  bool sinks;
  std::string Name() const {
    return "window (" + std::to_string(left) + ", " + std::to_string(right) + ")" +
           (softcap > 0 ? " softcap " + std::to_string(softcap) : "") + (sinks ? " sinks" : "");
  }
};

// Sink logits around the scores' scale: some rows give the sink most of their mass.
const std::vector<float>& Sinks() {
  static const std::vector<float> z = {0.7f, -1.5f, 2.5f, -std::numeric_limits<float>::infinity()};
  return z;
}

void Apply(const Features& f, AttentionArgs* a) {
  a->window_left = f.left;
  a->window_right = f.right;
  if (f.softcap > 0) a->softcap = f.softcap;
  if (f.sinks) a->sinks = Sinks();
}

// Windows: the diagonal alone, narrower than a query tile, about one key tile, wider than
// every sequence, one-sided right, two-sided; with and without softcap and sinks.
std::vector<Features> FeatureList() {
  return {{0, -1, 0, false},  {5, -1, 1.0, true}, {64, -1, 0, true},  {70, 3, 2.0, false},
          {-1, 3, 1.0, true}, {3, 3, 0, false},   {100, 100, 1.0, true}, {-1, -1, 1.0, true}};
}

TEST(WindowSoftcapSinks, ForwardAndBackwardMatchTheReference) {
  const CpuAttentionOptions opt = test::CaseListOptions();
  uint64_t seed = 100;
  for (const Features& f : FeatureList()) {
    for (int64_t l : {10, 64, 150}) {
      for (bool causal : {false, true}) {
        AttentionArgs a = test::Bshd(2, l, l, 4, 2, 32);
        a.causal = causal;
        Apply(f, &a);
        const std::string what =
            f.Name() + " l " + std::to_string(l) + (causal ? " causal" : "");
        test::CheckAgainstReference(a, opt, ++seed, what);
        test::CheckBackward(a, opt, ++seed, what);
      }
    }
  }
}

TEST(WindowSoftcapSinks, WithRopeAlibiAndVarlen) {
  const CpuAttentionOptions opt = test::CaseListOptions();
  encodings::sequence::Rope rope = test::MakeRope(32, 32, group::PlanePairing::kHalfSplit);
  RopeRowTransform tr(rope);
  auto alibi = encodings::sequence::AlibiBias::CreateStandard(4, encodings::sequence::AlibiForm::kCausal);
  ASSERT_TRUE(alibi.ok());
  const std::vector<int64_t> cu_q = {0, 70, 71, 200}, cu_k = {0, 70, 300, 429};
  uint64_t seed = 200;
  for (const Features& f : FeatureList()) {
    AttentionArgs a = test::Thd(cu_q, cu_k, 4, 1, 32);
    a.causal = true;
    a.q_transform = a.k_transform = &tr;
    a.biases = {&*alibi};
    Apply(f, &a);
    test::CheckAgainstReference(a, opt, ++seed, f.Name() + " rope alibi varlen");
    test::CheckBackward(a, opt, ++seed, f.Name() + " rope alibi varlen");
  }
}

// Default tiles: a narrow window takes one-panel key blocks (plan.cc); a wide one the
// default blocks.
TEST(WindowSoftcapSinks, DefaultTiles) {
  CpuAttentionOptions opt;
  opt.num_threads = 2;
  uint64_t seed = 250;
  for (int64_t left : {50, 5000}) {
    AttentionArgs a = test::Bshd(1, 300, 300, 4, 2, 32);
    a.causal = true;
    a.window_left = left;
    test::CheckAgainstReference(a, opt, ++seed, "window " + std::to_string(left));
    test::CheckBackward(a, opt, ++seed, "window " + std::to_string(left));
  }
}

// Few queries against a long cache: the split-key path, whose items cover only the keys
// the window allows.
TEST(WindowSoftcapSinks, DecodingSplitsOnlyTheWindow) {
  const CpuAttentionOptions opt = test::CaseListOptions();
  uint64_t seed = 300;
  for (const Features& f : {Features{300, -1, 0, false}, Features{300, -1, 1.0, true},
                            Features{63, -1, 0, true}, Features{0, -1, 1.0, true},
                            Features{-1, -1, 0, true}}) {
    for (int64_t lq : {1, 3}) {
      AttentionArgs a = test::Bshd(2, lq, 1100, 4, 1, 32);
      a.causal = true;
      Apply(f, &a);
      test::CheckAgainstReference(a, opt, ++seed, f.Name() + " decode lq " + std::to_string(lq));
    }
  }
}

// Explicit positions: unsorted keys (the masks' key-by-key path) and positions near 2^62
// (differences beyond int32 and near int64's end: exact uint64 arithmetic).
TEST(WindowSoftcapSinks, ExplicitPositions) {
  const CpuAttentionOptions opt = test::CaseListOptions();
  std::mt19937_64 rng(5);
  for (int64_t shift : {int64_t{0}, int64_t{1} << 62, std::numeric_limits<int64_t>::max() - 400}) {
    for (bool shuffled : {false, true}) {
      for (int64_t lq : {1, 40}) {
        const int64_t lk = lq == 1 ? 1100 : 130;
        AttentionArgs a = test::Bshd(1, lq, lk, 4, 2, 16);
        std::vector<int64_t> pq(lq), pk(lk);
        for (int64_t t = 0; t < lk; ++t) pk[t] = shift - lk + t;
        if (shuffled) std::shuffle(pk.begin(), pk.end(), rng);
        for (int64_t t = 0; t < lq; ++t) pq[t] = shift - lq + t;
        a.q_positions = pq;
        a.k_positions = pk;
        a.causal = true;
        Apply(Features{37, -1, 1.0, true}, &a);
        const std::string what = "shift " + std::to_string(shift) + (shuffled ? " shuffled" : "") +
                                 " lq " + std::to_string(lq);
        test::CheckAgainstReference(a, opt, 400 + lq, what);
        if (lq > 1) test::CheckBackward(a, opt, 500 + lq, what);
      }
    }
  }
}

// Windows and sinks change which keys a row sees and its denominator: a row whose window
// holds no key (keys only in the future of its window) has o = 0 and lse = its sink.
TEST(WindowSoftcapSinks, RowsWithNoKeyInTheirWindow) {
  AttentionArgs a = test::Bshd(1, 2, 3, 4, 4, 8);
  const std::vector<int64_t> pq = {0, 10}, pk = {20, 21, 22};  // every key after the queries
  a.q_positions = pq;
  a.k_positions = pk;
  a.window_left = 2;
  a.window_right = 5;  // query 0 sees nothing, query 10 nothing: 20 - 10 > 5
  a.sinks = Sinks();
  std::vector<float> q(2 * 4 * 8, 1.0f), k(3 * 4 * 8, 1.0f), v(3 * 4 * 8, 1.0f), o(q.size(), 7.0f),
      lse(2 * 4);
  ASSERT_TRUE(CpuForward(a, q.data(), k.data(), v.data(), o.data(), lse.data()).ok());
  for (float x : o) EXPECT_EQ(x, 0.0f);
  for (int64_t t = 0; t < 2; ++t) {
    for (int64_t h = 0; h < 4; ++h) EXPECT_EQ(lse[t * 4 + h], Sinks()[h]) << t << " " << h;
  }
}

// A NaN or +inf sink makes its head's rows NaN (o and lse), other heads untouched; the
// forward and the decoding path.
TEST(WindowSoftcapSinks, NonFiniteSinksMakeTheirRowsNaN) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const std::vector<float> sinks = {nan, inf, -inf, 1.0f};
  for (int64_t lk : {5, 1100}) {
    AttentionArgs a = test::Bshd(1, 1, lk, 4, 2, 16);
    a.causal = true;
    a.sinks = sinks;
    std::mt19937_64 rng(9);
    std::vector<float> q = test::RandomF(4 * 16, &rng), k = test::RandomF(lk * 2 * 16, &rng),
                       v = test::RandomF(lk * 2 * 16, &rng), o(4 * 16), lse(4);
    ASSERT_TRUE(CpuForward(a, q.data(), k.data(), v.data(), o.data(), lse.data()).ok());
    for (int64_t h = 0; h < 4; ++h) {
      EXPECT_EQ(std::isnan(lse[h]), h < 2) << "lk " << lk << " head " << h;
      for (int64_t e = 0; e < 16; ++e) EXPECT_EQ(std::isnan(o[h * 16 + e]), h < 2) << h;
    }
  }
}

// A bshd batch of KV caches of different lengths (kv_lengths): decoding (split keys),
// prefill and the backward of a key-padded batch, with a window and sinks on some.
TEST(KvLengths, MatchTheReference) {
  const CpuAttentionOptions opt = test::CaseListOptions();
  const std::vector<int64_t> lengths = {1100, 0, 63, 700};
  for (bool window : {false, true}) {
    AttentionArgs a = test::Bshd(4, 1, 1100, 4, 1, 32);
    a.causal = true;
    a.kv_lengths = lengths;
    if (window) Apply(Features{100, -1, 1.0, true}, &a);
    test::CheckAgainstReference(a, opt, 600 + window, std::string("decode") + (window ? " window" : ""));
  }
  const std::vector<int64_t> padded = {70, 30, 0};
  for (bool causal : {false, true}) {
    AttentionArgs a = test::Bshd(3, 70, 70, 4, 2, 32);
    a.causal = causal;
    a.kv_lengths = padded;
    test::CheckAgainstReference(a, opt, 610 + causal, "padded batch");
    test::CheckBackward(a, opt, 620 + causal, "padded batch");
  }
}

// SDPA's attn_mask: additive (random, some -inf) and boolean (40% masked), per head or
// broadcast over the batch and heads, a key-padding form (query stride 0), with causal,
// a window and sinks; query items, decoding, varlen and the backward.
TEST(ScoreMask, MatchesTheReference) {
  const CpuAttentionOptions opt = test::CaseListOptions();
  std::mt19937_64 rng(21);
  const int64_t hq = 4, max_l = 1100;
  std::vector<float> add(static_cast<size_t>(3 * hq * 150 * 150));  // up to 3 sequences
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  for (float& x : add) x = u(rng);
  for (size_t i = 0; i < add.size(); i += 7) add[i] = -std::numeric_limits<float>::infinity();
  std::vector<uint8_t> allow(static_cast<size_t>(2 * hq * 150 * max_l));
  std::bernoulli_distribution keep(0.6);
  for (uint8_t& x : allow) x = keep(rng) ? 1 : 0;
  uint64_t seed = 700;
  for (int form = 0; form < 4; ++form) {
    for (int64_t l : {10, 64, 150}) {
      for (bool causal : {false, true}) {
        AttentionArgs a = test::Bshd(2, l, l, hq, 2, 32);
        a.causal = causal;
        if (form == 0) {  // additive, per sequence and head
          a.mask = {add.data(), nullptr, hq * l * l, l * l, l, 1};
        } else if (form == 1) {  // boolean, broadcast over the batch and heads
          a.mask = {nullptr, allow.data(), 0, 0, l, 1};
        } else if (form == 2) {  // boolean key padding: one row per sequence
          a.mask = {nullptr, allow.data(), l, 0, 0, 1};
        } else {  // additive with a window and sinks
          a.mask = {add.data(), nullptr, 0, l * l, l, 1};
          Apply(Features{20, -1, 1.0, true}, &a);
        }
        const std::string what = "form " + std::to_string(form) + " l " + std::to_string(l) +
                                 (causal ? " causal" : "");
        test::CheckAgainstReference(a, opt, ++seed, what);
        test::CheckBackward(a, opt, ++seed, what);
      }
    }
  }
  // Decoding: one and three queries against 1100 keys (split keys), and varlen.
  for (int64_t lq : {1, 3}) {
    AttentionArgs a = test::Bshd(2, lq, max_l, hq, 1, 32);
    a.causal = true;
    a.mask = {nullptr, allow.data(), hq * lq * max_l, lq * max_l, max_l, 1};
    test::CheckAgainstReference(a, opt, ++seed, "decode lq " + std::to_string(lq));
  }
  const std::vector<int64_t> cu_q = {0, 70, 71, 150}, cu_k = {0, 70, 140, 150};
  AttentionArgs a = test::Thd(cu_q, cu_k, hq, 2, 32);
  a.causal = true;
  a.mask = {add.data(), nullptr, hq * 150 * 150, 150 * 150, 150, 1};
  test::CheckAgainstReference(a, opt, ++seed, "varlen");
  test::CheckBackward(a, opt, ++seed, "varlen");
}

}  // namespace
}  // namespace attention
}  // namespace gpe
