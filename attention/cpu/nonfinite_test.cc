// Non-finite inputs in the CPU kernels against the double reference (descriptor.h,
// "NON-FINITE VALUES"): NaN and infinite queries, keys and values, causal and not, on
// lengths below, at and above the tiles (block_q 16, block_k 64), the decoding path, the
// backward, float32 and bfloat16, every compiled instruction set. Before the rule, a NaN
// or +inf key was dropped (the row equal to attention without it), a NaN query row gave
// o = 0 and lse = -inf, a non-finite value in a masked key's row reached the rows of its
// tile, and the backward gave NaN dq with finite dk and dv.
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "attention/cpu/cpu_attention.h"
#include "attention/cpu/kernels.h"
#include "attention/cpu/test_util.h"
#include "attention/descriptor.h"
#include "attention/reference.h"
#include "attention/test_util.h"
#include "encodings/sequence/rope.h"
#include "gtest/gtest.h"
#include "hwy/targets.h"

namespace gpe {
namespace attention {
namespace {

using encodings::sequence::BFloat16;
using test::Bf;
using test::Bshd;
using test::Fl;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// Where the reference is finite the kernel must be finite and close; where it is not,
// the kernel must not be finite either (NaN against inf is allowed: a non-finite value
// times a probability that float rounds to 0 and double does not). tol: absolute, on
// outputs of size O(1) (averages of N(0, 1) values).
void ExpectSamePattern(const std::vector<double>& want, const std::vector<float>& got, double tol,
                       const std::string& what) {
  ASSERT_EQ(want.size(), got.size());
  int bad = 0;
  for (size_t i = 0; i < want.size() && bad < 5; ++i) {
    if (std::isfinite(want[i])) {
      if (!(std::abs(got[i] - want[i]) <= tol)) {
        ++bad;
        ADD_FAILURE() << what << " [" << i << "]: " << got[i] << " want " << want[i];
      }
    } else if (std::isfinite(got[i])) {
      ++bad;
      ADD_FAILURE() << what << " [" << i << "]: " << got[i] << " want non-finite " << want[i];
    }
  }
}

struct Inputs {
  std::vector<float> q, k, v;
};

Inputs Random(const AttentionArgs& a, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Inputs in;
  in.q = test::RandomF(test::Extent(a, a.q, true), &rng);
  in.k = test::RandomF(test::Extent(a, a.k, false), &rng);
  in.v = test::RandomF(test::Extent(a, a.v, false), &rng);
  return in;
}

std::vector<double> Widen(const std::vector<float>& x) { return {x.begin(), x.end()}; }

// The float64 reference's gradients of `a` at the inputs and d_o, widened.
struct RefGrads {
  std::vector<double> dq, dk, dv;
};
RefGrads ReferenceGrads(const AttentionArgs& a, const Inputs& in, const std::vector<float>& d_o) {
  const std::vector<double> q(in.q.begin(), in.q.end()), k(in.k.begin(), in.k.end()),
      v(in.v.begin(), in.v.end()), g(d_o.begin(), d_o.end());
  RefGrads r{std::vector<double>(q.size()), std::vector<double>(k.size()),
             std::vector<double>(v.size())};
  EXPECT_TRUE(ReferenceBackward<double>(a, q.data(), k.data(), v.data(), g.data(), r.dq.data(),
                                        r.dk.data(), r.dv.data())
                  .ok());
  return r;
}

// Tiles of 16 x 64 on 2 threads: the lengths below cross them.
CpuAttentionOptions SmallTiles() {
  CpuAttentionOptions opt;
  opt.block_q = 16;
  opt.block_k = 64;
  opt.num_threads = 2;
  return opt;
}

// The forward on every compiled target and element type against the reference.
void CheckForward(const AttentionArgs& a, const Inputs& in, const std::string& what) {
  const size_t no = test::Extent(a, a.o, true);
  const size_t nl = static_cast<size_t>(a.num_q_tokens() * a.num_q_heads);
  std::vector<double> qd = Widen(in.q), kd = Widen(in.k), vd = Widen(in.v);
  std::vector<double> o_ref(no), lse_ref(nl);
  ASSERT_TRUE(ReferenceForward<double>(a, qd.data(), kd.data(), vd.data(), o_ref.data(),
                                       lse_ref.data())
                  .ok());
  CpuAttentionOptions opt = SmallTiles();
  for (int64_t target : cpu::CompiledTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    const std::string at = what + " on " + hwy::TargetName(target);
    std::vector<float> o(no, 7.0f), lse(nl, 7.0f);
    ASSERT_TRUE(CpuForward(a, in.q.data(), in.k.data(), in.v.data(), o.data(), lse.data(), opt).ok());
    // float32 against double on d = 32 sums of O(1) terms: errors ~1e-6; 1e-4 leaves
    // room and still catches a dropped key (changes of O(1 / length)).
    ExpectSamePattern(o_ref, o, 1e-4, at + " o");
    ExpectSamePattern(lse_ref, lse, 1e-4, at + " lse");
  }
  hwy::SetSupportedTargetsForTest(0);
  // bfloat16: the inputs' bf16 roundings (exact, non-finite kept) against the reference
  // on those roundings; the output's rounding alone is 2^-9 relative, and the bf16 dot
  // products round q, k and P to bf16: 2e-2 absolute on O(1) outputs.
  std::vector<BFloat16> q16(in.q.size()), k16(in.k.size()), v16(in.v.size());
  std::vector<double> qr(in.q.size()), kr(in.k.size()), vr(in.v.size());
  for (size_t i = 0; i < in.q.size(); ++i) qr[i] = Fl(q16[i].bits = Bf(in.q[i]));
  for (size_t i = 0; i < in.k.size(); ++i) kr[i] = Fl(k16[i].bits = Bf(in.k[i]));
  for (size_t i = 0; i < in.v.size(); ++i) vr[i] = Fl(v16[i].bits = Bf(in.v[i]));
  ASSERT_TRUE(ReferenceForward<double>(a, qr.data(), kr.data(), vr.data(), o_ref.data(),
                                       lse_ref.data())
                  .ok());
  using Arith = CpuAttentionOptions::Bf16Arithmetic;
  for (Arith arith : {Arith::kWiden, Arith::kDotProducts}) {
    opt.bf16_arithmetic = arith;
    const std::string at = what + (arith == Arith::kWiden ? " bf16 widened" : " bf16 dot");
    std::vector<BFloat16> o16(no, BFloat16{Bf(7.0f)});
    std::vector<float> lse(nl, 7.0f);
    ASSERT_TRUE(CpuForward(a, q16.data(), k16.data(), v16.data(), o16.data(), lse.data(), opt).ok());
    std::vector<float> o(no);
    for (size_t i = 0; i < no; ++i) o[i] = Fl(o16[i].bits);
    ExpectSamePattern(o_ref, o, 2e-2, at + " o");
    ExpectSamePattern(lse_ref, lse, 2e-2, at + " lse");
  }
}

// Lengths below, at and above the 16 x 64 tiles; a poisoned token in the middle.
const int64_t kLengths[] = {5, 17, 64, 70, 130};

TEST(NonFinite, NaNOrInfiniteKeyReachesExactlyTheRowsThatSeeIt) {
  for (int64_t l : kLengths) {
    for (bool causal : {false, true}) {
      for (float bad : {kNaN, kInf, -kInf}) {
        AttentionArgs a = Bshd(1, l, l, 2, 1, 32);
        a.causal = causal;
        Inputs in = Random(a, static_cast<uint64_t>(l));
        const int64_t j = l / 2;
        in.k[static_cast<size_t>(j * a.k.token + 3)] = bad;
        CheckForward(a, in, "key " + std::to_string(bad) + " l " + std::to_string(l) +
                                (causal ? " causal" : ""));
      }
    }
  }
}

TEST(NonFinite, NaNQueryRowIsNaNNotEmpty) {
  for (int64_t l : kLengths) {
    for (bool causal : {false, true}) {
      AttentionArgs a = Bshd(1, l, l, 2, 2, 32);
      a.causal = causal;
      Inputs in = Random(a, static_cast<uint64_t>(l) + 100);
      // Every element of one query row NaN (no maximum sees it), and one element of
      // another.
      for (int64_t c = 0; c < 32; ++c) in.q[static_cast<size_t>((l - 1) * a.q.token + c)] = kNaN;
      in.q[static_cast<size_t>(a.q.head + 5)] = kNaN;
      CheckForward(a, in, "query l " + std::to_string(l) + (causal ? " causal" : ""));
    }
  }
}

TEST(NonFinite, MaskedValueRowContributesNothing) {
  for (int64_t l : kLengths) {
    for (bool causal : {false, true}) {
      for (float bad : {kNaN, kInf}) {
        AttentionArgs a = Bshd(1, l, l, 4, 2, 32);
        a.causal = causal;
        Inputs in = Random(a, static_cast<uint64_t>(l) + 200);
        const int64_t j = l / 2;
        in.v[static_cast<size_t>(j * a.v.token + a.v.head + 1)] = bad;
        CheckForward(a, in, "value " + std::to_string(bad) + " l " + std::to_string(l) +
                                (causal ? " causal" : ""));
      }
    }
  }
}

// Decoding: few queries against many keys (the split-key path), the last queries of a
// causal KV cache, so that the earlier queries mask the later keys.
TEST(NonFinite, DecodingPropagatesAndMasks) {
  for (int64_t lq : {1, 3}) {
    AttentionArgs a = Bshd(1, lq, 300, 4, 2, 32);
    a.causal = true;
    Inputs in = Random(a, static_cast<uint64_t>(lq) + 300);
    in.v[static_cast<size_t>(299 * a.v.token + 2)] = kInf;  // masked for all but the last query
    CheckForward(a, in, "decode value lq " + std::to_string(lq));
    in = Random(a, static_cast<uint64_t>(lq) + 400);
    in.k[static_cast<size_t>(150 * a.k.token + 2)] = kNaN;
    CheckForward(a, in, "decode key lq " + std::to_string(lq));
  }
}

// A finite logit beyond float's range after scaling reads as +inf, a NaN row: never as a
// row without allowed keys (before: o = 0, lse = -inf).
TEST(NonFinite, OverflowingScoreIsNaNNotEmpty) {
  AttentionArgs a = Bshd(1, 4, 4, 1, 1, 32);
  Inputs in = Random(a, 9);
  for (int64_t c = 0; c < 32; ++c) {
    in.q[static_cast<size_t>(c)] = 3e37f;
    in.k[static_cast<size_t>(c)] = 3e37f;
  }
  std::vector<float> o(in.q.size()), lse(4);
  ASSERT_TRUE(CpuForward(a, in.q.data(), in.k.data(), in.v.data(), o.data(), lse.data()).ok());
  EXPECT_TRUE(std::isnan(lse[0])) << lse[0];
  EXPECT_TRUE(std::isnan(o[0])) << o[0];
  EXPECT_TRUE(std::isfinite(lse[1]) && std::isfinite(o[a.q.token])) << lse[1];
}

// The backward against the reference's gradients: a NaN key, and an infinite value of a
// key that earlier (causal) rows mask, whose dq, and the other keys' dk, dv, stay finite.
// A score of -inf from an infinite key component (q . k = -inf, not a mask) under a
// softcap is c tanh(-inf / c) = -c, as in the reference and PyTorch: the key keeps a
// probability of about e^-c / sum. The softcap fused into the softmax (after the masks)
// took every -inf for a masked key and gave it probability 0; it now runs only where the
// block's keys and the tile's queries are finite.
TEST(NonFinite, SoftcapOfAnInfiniteScoreIsMinusTheCap) {
  for (bool causal : {false, true}) {
    AttentionArgs a = Bshd(1, 5, 5, 1, 1, 32);
    a.causal = causal;
    a.softcap = 1.5;
    Inputs in = Random(a, 950 + causal);
    for (int64_t r = 0; r < 5; ++r) in.q[static_cast<size_t>(r * 32 + 3)] = r % 2 ? 0.7f : -0.7f;
    in.k[static_cast<size_t>(2 * 32 + 3)] = -kInf;  // key 2: -inf for rows with q_3 > 0
    std::vector<double> o_ref(in.q.size()), lse_ref(5);
    std::vector<double> qd = Widen(in.q), kd = Widen(in.k), vd = Widen(in.v);
    ASSERT_TRUE(ReferenceForward<double>(a, qd.data(), kd.data(), vd.data(), o_ref.data(),
                                         lse_ref.data())
                    .ok());
    std::vector<float> o(in.q.size()), lse(5);
    ASSERT_TRUE(CpuForward(a, in.q.data(), in.k.data(), in.v.data(), o.data(), lse.data(),
                           SmallTiles())
                    .ok());
    // O(1) outputs over 5 keys: float error ~1e-6; 1e-4 absolute.
    ExpectSamePattern(o_ref, o, 1e-4, causal ? "causal o" : "o");
    ExpectSamePattern(lse_ref, lse, 1e-4, causal ? "causal lse" : "lse");
  }
}

// One key with an infinite component in both k and v, no mask: rows whose score for it is
// -inf give it probability exactly 0, and it contributes nothing there (descriptor.h:
// "a key of probability exactly 0"), as in the reference; rows that see it get inf / NaN.
// (Prefill tiles: packed blocks know their finiteness; direct ones and decoding look for
// a -inf score: DecodingZeroProbabilityKey... below.)
TEST(NonFinite, ZeroProbabilityKeyWithAnInfiniteValueContributesNothing) {
  // 64 query rows in items of 32 (block_q 32): packed key blocks, not direct ones.
  AttentionArgs a = Bshd(1, 64, 64, 1, 1, 32);
  Inputs in = Random(a, 960);
  for (int64_t r = 0; r < 64; ++r) in.q[static_cast<size_t>(r * 32 + 3)] = r % 2 ? 0.7f : -0.7f;
  in.k[static_cast<size_t>(2 * 32 + 3)] = -kInf;
  in.v[static_cast<size_t>(2 * 32 + 0)] = kInf;
  std::vector<double> o_ref(in.q.size()), lse_ref(64);
  std::vector<double> qd = Widen(in.q), kd = Widen(in.k), vd = Widen(in.v);
  ASSERT_TRUE(ReferenceForward<double>(a, qd.data(), kd.data(), vd.data(), o_ref.data(),
                                       lse_ref.data())
                  .ok());
  std::vector<float> o(in.q.size()), lse(64);
  CpuAttentionOptions opt = SmallTiles();
  opt.block_q = 32;
  ASSERT_TRUE(CpuForward(a, in.q.data(), in.k.data(), in.v.data(), o.data(), lse.data(), opt)
                  .ok());
  ExpectSamePattern(o_ref, o, 1e-4, "o");
}

// Decoding (split keys, 1100 keys, one query token) under the same rule: a key whose
// score is -inf from an infinite k contributes nothing, its infinite value included, read
// in token order (d 32) and through the tile step (d 24: padded rows). Before, with no
// mask in the call, 0 * inf made the rows of that kv head NaN (the packed prefill gave
// them finite). Then every key of kv head 0 at -inf: those rows have no allowed key,
// o = 0 and lse = -inf, not NaN.
TEST(NonFinite, DecodingZeroProbabilityKeyWithAnInfiniteValueContributesNothing) {
  for (int64_t d : {32, 24}) {
    for (bool all : {false, true}) {
      AttentionArgs a = Bshd(1, 1, 1100, 4, 2, d);
      Inputs in = Random(a, 970 + static_cast<uint64_t>(d) + all);
      for (int64_t h = 0; h < 4; ++h) in.q[static_cast<size_t>(h * d + 3)] = 0.7f;
      for (int64_t t = all ? 0 : 5; t < (all ? 1100 : 6); ++t) {
        in.k[static_cast<size_t>(t * a.k.token + 3)] = -kInf;  // kv head 0
      }
      in.v[static_cast<size_t>(5 * a.v.token + 1)] = kInf;
      CheckForward(a, in, "decode d " + std::to_string(d) + (all ? " every key" : " one key"));
    }
  }
}

// A NaN row from finite operands (a NaN entry of an additive score mask on an allowed
// key: that row's lse and D = <dO, o> are NaN): the keys the row may not see (its causal
// future) keep the gradient the other rows give them, as in the reference, where before
// dS = P (dP - D) with P = 0 and D NaN made them NaN (the tile took the careful path only
// for non-finite K, V, Qs or dO).
TEST(NonFinite, BackwardOfANaNRowFromFiniteOperands) {
  for (int64_t l : {17, 70}) {
    AttentionArgs a = Bshd(1, l, l, 1, 1, 32);
    a.causal = true;
    std::vector<float> add(static_cast<size_t>(l * l), 0.0f);
    const int64_t row = l / 2;
    add[static_cast<size_t>(row * l + 1)] = kNaN;  // key 1, allowed for row l / 2
    a.mask = {add.data(), nullptr, 0, 0, l, 1};
    Inputs in = Random(a, static_cast<uint64_t>(l) + 900);
    std::mt19937_64 rng(static_cast<uint64_t>(l) + 901);
    std::vector<float> d_o = test::RandomF(test::Extent(a, a.o, true), &rng);
    const RefGrads ref = ReferenceGrads(a, in, d_o);
    const auto& [dq_ref, dk_ref, dv_ref] = ref;
    for (const CpuAttentionOptions& opt : {SmallTiles(), CpuAttentionOptions{}}) {
      std::vector<float> dq(in.q.size()), dk(in.k.size()), dv(in.v.size());
      ASSERT_TRUE(CpuBackward(a, in.q.data(), in.k.data(), in.v.data(), nullptr, nullptr,
                              d_o.data(), dq.data(), dk.data(), dv.data(), nullptr, opt)
                      .ok());
      const std::string at = "l " + std::to_string(l) + " block_q " + std::to_string(opt.block_q);
      ExpectSamePattern(dq_ref, dq, 1e-3, at + " dq");
      ExpectSamePattern(dk_ref, dk, 1e-3, at + " dk");
      ExpectSamePattern(dv_ref, dv, 1e-3, at + " dv");
      // The last key is in the NaN row's causal future: finite.
      EXPECT_TRUE(std::isfinite(dk[static_cast<size_t>((l - 1) * 32)])) << at;
    }
  }
}

// A key whose k holds -inf where every q is positive has score -inf, probability exactly
// 0, for every query: it contributes nothing to o or to any gradient, with or without
// masks in the call. (The reference formed 0 * -inf = NaN in dq; the kernels gave NaN
// without masks and finite gradients with a mask that masked nothing, a causal mask or a
// wide window.) Every gradient is finite, key j's dk and dv are 0, and the kernels match
// the reference in each variant (1e-3 absolute, as below).
TEST(NonFinite, KeyOfProbabilityZeroFromAnInfiniteKContributesNothingToGradients) {
  const int64_t l = 70, j = 33;
  for (int variant : {0, 1, 2}) {  // no mask, causal, a window wider than the sequence
    AttentionArgs a = Bshd(1, l, l, 2, 1, 32);
    a.causal = variant == 1;
    if (variant == 2) a.window_left = a.window_right = 1000;
    Inputs in = Random(a, 900);
    for (int64_t t = 0; t < l; ++t) {
      for (int64_t h = 0; h < 2; ++h) {
        float& x = in.q[static_cast<size_t>(t * a.q.token + h * a.q.head)];
        x = std::abs(x) + 0.1f;
      }
    }
    in.k[static_cast<size_t>(j * a.k.token)] = -kInf;
    std::mt19937_64 rng(901);
    std::vector<float> d_o = test::RandomF(test::Extent(a, a.o, true), &rng);
    const RefGrads ref = ReferenceGrads(a, in, d_o);
    const auto& [dq_ref, dk_ref, dv_ref] = ref;
    const std::string at = "variant " + std::to_string(variant);
    for (double x : dq_ref) ASSERT_TRUE(std::isfinite(x)) << at << " reference dq";
    for (int64_t e = 0; e < 32; ++e) {
      EXPECT_EQ(dk_ref[static_cast<size_t>(j * a.k.token + e)], 0.0) << at;
      EXPECT_EQ(dv_ref[static_cast<size_t>(j * a.v.token + e)], 0.0) << at;
    }
    std::vector<float> dq(in.q.size()), dk(in.k.size()), dv(in.v.size());
    ASSERT_TRUE(CpuBackward(a, in.q.data(), in.k.data(), in.v.data(), nullptr, nullptr,
                            d_o.data(), dq.data(), dk.data(), dv.data(), nullptr, SmallTiles())
                    .ok());
    ExpectSamePattern(dq_ref, dq, 1e-3, at + " dq");
    ExpectSamePattern(dk_ref, dk, 1e-3, at + " dk");
    ExpectSamePattern(dv_ref, dv, 1e-3, at + " dv");
  }
}

TEST(NonFinite, BackwardFollowsTheRule) {
  for (int64_t l : {17, 70}) {
    for (int poison : {0, 1, 2}) {
      AttentionArgs a = Bshd(1, l, l, 2, 1, 32);
      a.causal = true;
      Inputs in = Random(a, static_cast<uint64_t>(l) + 500 + poison);
      std::mt19937_64 rng(static_cast<uint64_t>(l) + 600);
      std::vector<float> d_o = test::RandomF(test::Extent(a, a.o, true), &rng);
      const int64_t j = l / 2;
      if (poison == 0) in.k[static_cast<size_t>(j * a.k.token + 1)] = kNaN;
      if (poison == 1) in.v[static_cast<size_t>(j * a.v.token + 1)] = kInf;
      if (poison == 2) d_o[static_cast<size_t>(j * a.o.token + 1)] = kNaN;
      std::vector<double> qd = Widen(in.q), kd = Widen(in.k), vd = Widen(in.v), dod = Widen(d_o);
      std::vector<double> dq_ref(qd.size()), dk_ref(kd.size()), dv_ref(vd.size());
      ASSERT_TRUE(ReferenceBackward<double>(a, qd.data(), kd.data(), vd.data(), dod.data(),
                                            dq_ref.data(), dk_ref.data(), dv_ref.data())
                      .ok());
      const CpuAttentionOptions opt = SmallTiles();
      for (int64_t target : cpu::CompiledTargets()) {
        hwy::SetSupportedTargetsForTest(target);
        const std::string at = "poison " + std::to_string(poison) + " l " + std::to_string(l) +
                               " on " + hwy::TargetName(target);
        std::vector<float> dq(qd.size()), dk(kd.size()), dv(vd.size());
        ASSERT_TRUE(CpuBackward(a, in.q.data(), in.k.data(), in.v.data(), nullptr, nullptr,
                                d_o.data(), dq.data(), dk.data(), dv.data(), nullptr, opt)
                        .ok());
        // Gradients of O(1) inputs over <= 70 keys: float errors ~1e-5; 1e-3 absolute.
        ExpectSamePattern(dq_ref, dq, 1e-3, at + " dq");
        ExpectSamePattern(dk_ref, dk, 1e-3, at + " dk");
        ExpectSamePattern(dv_ref, dv, 1e-3, at + " dv");
      }
      hwy::SetSupportedTargetsForTest(0);
      // bfloat16, both paths, against the reference on the inputs' bf16 roundings
      // (non-finite values round to themselves): the same pattern, and 5e-2 absolute on
      // the finite gradients (up to ~10 here: the output's rounding, 2^-9 relative, and
      // the dot products' rounding of Qs, P and dS, each 2^-9 relative, in sums of <= 70
      // terms).
      auto round = [](const std::vector<float>& x, std::vector<BFloat16>* b,
                      std::vector<double>* r) {
        b->resize(x.size());
        r->resize(x.size());
        for (size_t i = 0; i < x.size(); ++i) (*r)[i] = Fl((*b)[i].bits = Bf(x[i]));
      };
      std::vector<BFloat16> q16, k16, v16, do16;
      round(in.q, &q16, &qd);
      round(in.k, &k16, &kd);
      round(in.v, &v16, &vd);
      round(d_o, &do16, &dod);
      ASSERT_TRUE(ReferenceBackward<double>(a, qd.data(), kd.data(), vd.data(), dod.data(),
                                            dq_ref.data(), dk_ref.data(), dv_ref.data())
                      .ok());
      using Arith = CpuAttentionOptions::Bf16Arithmetic;
      for (Arith arith : {Arith::kWiden, Arith::kDotProducts}) {
        if (arith == Arith::kDotProducts && !CpuHasBf16DotProducts()) continue;
        CpuAttentionOptions bopt = opt;
        bopt.bf16_arithmetic = arith;
        const std::string at = "poison " + std::to_string(poison) + " l " + std::to_string(l) +
                               (arith == Arith::kWiden ? " bf16 widened" : " bf16 dot");
        std::vector<BFloat16> dq16(qd.size()), dk16(kd.size()), dv16(vd.size());
        ASSERT_TRUE(CpuBackward(a, q16.data(), k16.data(), v16.data(), nullptr, nullptr,
                                do16.data(), dq16.data(), dk16.data(), dv16.data(), nullptr,
                                bopt)
                        .ok());
        auto widen = [](const std::vector<BFloat16>& x) {
          std::vector<float> y(x.size());
          for (size_t i = 0; i < x.size(); ++i) y[i] = Fl(x[i].bits);
          return y;
        };
        ExpectSamePattern(dq_ref, widen(dq16), 5e-2, at + " dq");
        ExpectSamePattern(dk_ref, widen(dk16), 5e-2, at + " dk");
        ExpectSamePattern(dv_ref, widen(dv16), 5e-2, at + " dv");
      }
    }
  }
}

}  // namespace
}  // namespace attention
}  // namespace gpe
