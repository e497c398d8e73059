// A value head size of its own (descriptor.h, VALUE HEAD SIZE: v and o rows of
// head_dim_v, q and k rows of head_dim; DeepSeek-V2/V3's 192/128): the CPU forward,
// decoding and backward against the double reference with the 2x-naive-float32
// criterion (test_util.h), on shapes below, at and above the tiles (block_q 16, block_k
// 64), value rows narrower and wider than the key rows, padded (not a multiple of the
// vector width) and not, with every path's features (GQA, causal, RoPE on part of the
// head, Shaw value labels, window, softcap, sinks, packed batches), on every compiled
// instruction set; and bfloat16 inputs against the reference on the rounded inputs.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "attention/cpu/cpu_attention.h"
#include "attention/cpu/kernels.h"
#include "attention/cpu/test_util.h"
#include "attention/descriptor.h"
#include "attention/reference.h"
#include "attention/test_util.h"
#include "encodings/sequence/relative.h"
#include "encodings/sequence/rope.h"
#include "gtest/gtest.h"
#include "hwy/targets.h"

namespace gpe {
namespace attention {
namespace {

using encodings::sequence::BFloat16;
using encodings::sequence::ToBFloat16;
using encodings::sequence::ToFloat;
using test::Bshd;
using test::Thd;
using test::WithValueDim;

// (head_dim, head_dim_v): DeepSeek's 192/128; wider values; both padded to the vector
// width (40 -> 48, 24 -> 32); values of one vector.
const std::pair<int64_t, int64_t> kDims[] = {{192, 128}, {32, 48}, {40, 24}, {16, 8}};

std::string Name(int64_t d, int64_t dv, const std::string& what) {
  return what + " d " + std::to_string(d) + " dv " + std::to_string(dv);
}

// Forward and backward of one case on every compiled instruction set.
void CheckEveryTarget(const AttentionArgs& a, uint64_t seed, const std::string& what,
                      bool backward = true) {
  const CpuAttentionOptions opt = test::CaseListOptions();
  for (int64_t target : cpu::CompiledTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    const std::string name = what + " on " + hwy::TargetName(target);
    test::CheckAgainstReference(a, opt, seed, name);
    if (backward) test::CheckBackward(a, opt, seed + 1, name);
  }
  hwy::SetSupportedTargetsForTest(0);
}

TEST(ValueHeadSize, ShapesBelowAtAndAboveTiles) {
  uint64_t seed = 100;
  for (auto [d, dv] : kDims) {
    // (length, causal): below block_q, at block_q, at block_k, above both.
    for (auto [l, causal] : {std::pair<int64_t, bool>{5, false}, {16, true}, {64, false}, {100, true}}) {
      AttentionArgs a = WithValueDim(Bshd(2, l, l, 4, 2, d), dv);
      a.causal = causal;
      CheckEveryTarget(a, ++seed, Name(d, dv, "l " + std::to_string(l)), /*backward=*/l <= 64);
    }
  }
}

TEST(ValueHeadSize, DecodingSplitsKeysAndReadsTheCacheInPlace) {
  uint64_t seed = 200;
  for (auto [d, dv] : kDims) {
    // One query and 3 queries against 1100 keys: the split-KV path; (192, 128) and
    // (16, 8) read unpadded rows in place (token order), the padded ones through copies.
    for (int64_t lq : {1, 3}) {
      AttentionArgs a = WithValueDim(Bshd(2, lq, 1100, 8, 2, d), dv);
      a.causal = true;
      CheckEveryTarget(a, ++seed, Name(d, dv, "decode lq " + std::to_string(lq)),
                       /*backward=*/false);
    }
  }
}

TEST(ValueHeadSize, EncodingsWindowSoftcapSinksAndPackedBatches) {
  std::mt19937_64 rng(7);
  uint64_t seed = 300;
  const std::vector<float> sinks = {0.5f, -1.0f, 2.0f, 0.0f};
  for (auto [d, dv] : kDims) {
    // RoPE on part of q and k (the first half of the head; DeepSeek rotates 64 of 192),
    // the other components and every value component untouched.
    encodings::sequence::Rope rope = test::MakeRope(d, d / 2 / 2 * 2, group::PlanePairing::kHalfSplit);
    RopeRowTransform rtr(rope);
    AttentionArgs a = WithValueDim(Bshd(1, 70, 70, 4, 2, d), dv);
    a.causal = true;
    a.q_transform = a.k_transform = &rtr;
    a.window_left = 20;
    a.softcap = 2.0;
    a.sinks = sinks;
    CheckEveryTarget(a, ++seed, Name(d, dv, "rope window softcap sinks"));
    // Shaw value labels: a value table of dv columns (and a key table of d).
    encodings::sequence::ShawRelative keys = test::MakeShaw(3, d, &rng);
    encodings::sequence::ShawRelative values = test::MakeShaw(3, dv, &rng);
    AttentionArgs s = WithValueDim(Bshd(1, 40, 70, 4, 2, d), dv);
    s.shaw_keys = &keys;
    s.shaw_values = &values;
    CheckEveryTarget(s, ++seed, Name(d, dv, "shaw"));
    // A packed batch with an empty and a one-token sequence, and the decoding shape of it.
    const std::vector<int64_t> cu_q = {0, 30, 30, 31, 100}, cu_k = {0, 30, 45, 46, 115};
    AttentionArgs t = WithValueDim(Thd(cu_q, cu_k, 4, 1, d), dv);
    t.causal = true;
    CheckEveryTarget(t, ++seed, Name(d, dv, "thd"));
  }
}

// bfloat16 q, k, v and o (widened to float32, or the bf16 dot products where the CPU
// has them) against the double reference on the rounded inputs: o rounded to bf16
// (2^-9 relative of |o| <~ 3: 8e-3); dq, dk, dv rounded too and summed in float32 over
// <= 100 keys of O(1) terms: 2e-2 of the gradient's scale.
TEST(ValueHeadSize, BFloat16ForwardAndBackward) {
  uint64_t seed = 400;
  for (auto [d, dv] : kDims) {
    for (int64_t l : {17, 100}) {
      AttentionArgs a = WithValueDim(Bshd(1, l, l, 4, 2, d), dv);
      a.causal = true;
      std::mt19937_64 rng(++seed);
      const size_t nq = test::Extent(a, a.q, true), nk = test::Extent(a, a.k, false);
      const size_t nv = test::Extent(a, a.v, false), no = test::Extent(a, a.o, true);
      auto draw = [&](size_t n, std::vector<BFloat16>* x, std::vector<double>* xd) {
        const std::vector<float> f = test::RandomF(n, &rng);
        x->resize(n);
        xd->resize(n);
        for (size_t i = 0; i < n; ++i) {
          (*x)[i] = ToBFloat16(f[i]);
          (*xd)[i] = ToFloat((*x)[i]);
        }
      };
      std::vector<BFloat16> q, k, v, dout;
      std::vector<double> qd, kd, vd, dod;
      draw(nq, &q, &qd);
      draw(nk, &k, &kd);
      draw(nv, &v, &vd);
      draw(no, &dout, &dod);
      std::vector<double> want(no), gq(nq), gk(nk), gv(nv);
      ASSERT_TRUE(ReferenceForward<double>(a, qd.data(), kd.data(), vd.data(), want.data()).ok());
      ASSERT_TRUE(ReferenceBackward<double>(a, qd.data(), kd.data(), vd.data(), dod.data(),
                                            gq.data(), gk.data(), gv.data())
                      .ok());
      auto scale = [](const std::vector<double>& g) {
        double m = 1.0;
        for (double x : g) m = std::max(m, std::fabs(x));
        return m;
      };
      auto err = [](const std::vector<BFloat16>& x, const std::vector<double>& y) {
        double e = 0.0;
        for (size_t i = 0; i < y.size(); ++i) e = std::max(e, std::fabs(ToFloat(x[i]) - y[i]));
        return e;
      };
      const std::string what = Name(d, dv, "bf16 l " + std::to_string(l));
      for (auto arith : {CpuAttentionOptions::Bf16Arithmetic::kWiden,
                         CpuAttentionOptions::Bf16Arithmetic::kDotProducts}) {
        CpuAttentionOptions opt = test::CaseListOptions();
        opt.bf16_arithmetic = arith;
        std::vector<BFloat16> o(no), dq(nq), dk(nk), dv_(nv);
        std::vector<float> lse(a.num_q_tokens() * a.num_q_heads);
        ASSERT_TRUE(CpuForward(a, q.data(), k.data(), v.data(), o.data(), lse.data(), opt).ok());
        // The output's rounding, 2^-9 of |o| < 4: 8e-3; the dot products also round the
        // scaled q and the probabilities to bf16 (a few more such roundings): 2e-2.
        const bool dot = arith == CpuAttentionOptions::Bf16Arithmetic::kDotProducts;
        EXPECT_LE(err(o, want), dot ? 2e-2 : 8e-3) << what;
        ASSERT_TRUE(CpuBackward(a, q.data(), k.data(), v.data(), o.data(), lse.data(),
                                dout.data(), dq.data(), dk.data(), dv_.data(), nullptr, opt)
                        .ok());
        EXPECT_LE(err(dq, gq), 2e-2 * scale(gq)) << what << " dq";
        EXPECT_LE(err(dk, gk), 2e-2 * scale(gk)) << what << " dk";
        EXPECT_LE(err(dv_, gv), 2e-2 * scale(gv)) << what << " dv";
      }
    }
  }
}

// A paged cache with its own value head size: every sequence's forward equals the dense
// one's (the same kernels on the same rows, gathered or read through the block table).
TEST(ValueHeadSize, PagedCacheEqualsDense) {
  const int64_t d = 192, dv = 128, hkv = 2, hq = 8, page = 16, pages_per_seq = 5;
  const int64_t batch = 2, lk = page * pages_per_seq;
  std::mt19937_64 rng(9);
  AttentionArgs dense = WithValueDim(Bshd(batch, 1, lk, hq, hkv, d), dv);
  dense.causal = true;
  const std::vector<int64_t> kv_lengths = {lk, 37};
  dense.kv_lengths = kv_lengths;
  const size_t nq = test::Extent(dense, dense.q, true), nk = test::Extent(dense, dense.k, false);
  const size_t nv = test::Extent(dense, dense.v, false), no = test::Extent(dense, dense.o, true);
  const std::vector<float> q = test::RandomF(nq, &rng), k = test::RandomF(nk, &rng),
                           v = test::RandomF(nv, &rng);
  // Pages in reverse order: sequence b's page p is physical page (pages - 1) - (b * 5 + p).
  const int64_t num_pages = batch * pages_per_seq;
  std::vector<int64_t> table(num_pages);
  for (int64_t i = 0; i < num_pages; ++i) table[i] = num_pages - 1 - i;
  std::vector<float> kp(num_pages * page * hkv * d), vp(num_pages * page * hkv * dv);
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t t = 0; t < lk; ++t) {
      const int64_t phys = table[b * pages_per_seq + t / page], slot = t % page;
      for (int64_t g = 0; g < hkv; ++g) {
        std::copy_n(k.data() + dense.KOffset(dense.k, b * lk + t, g), d,
                    kp.data() + ((phys * page + slot) * hkv + g) * d);
        std::copy_n(v.data() + dense.KOffset(dense.v, b * lk + t, g), dv,
                    vp.data() + ((phys * page + slot) * hkv + g) * dv);
      }
    }
  }
  AttentionArgs paged = dense;
  paged.pages.block_table = table;
  paged.pages.page_size = page;
  paged.pages.num_pages = num_pages;
  paged.k = ContiguousStrides(Layout::kBSHD, page, hkv, d);
  paged.v = ContiguousStrides(Layout::kBSHD, page, hkv, dv);
  const CpuAttentionOptions opt = test::CaseListOptions();
  std::vector<float> o_dense(no), o_paged(no), l_dense(batch * hq), l_paged(batch * hq);
  ASSERT_TRUE(CpuForward(dense, q.data(), k.data(), v.data(), o_dense.data(), l_dense.data(), opt).ok());
  ASSERT_TRUE(CpuForward(paged, q.data(), kp.data(), vp.data(), o_paged.data(), l_paged.data(), opt).ok());
  // Blocks split at page boundaries sum in another order: float rounding, 1e-5 on O(1).
  for (size_t i = 0; i < no; ++i) EXPECT_NEAR(o_paged[i], o_dense[i], 1e-5) << i;
  for (size_t i = 0; i < l_dense.size(); ++i) EXPECT_NEAR(l_paged[i], l_dense[i], 1e-5) << i;
}

}  // namespace
}  // namespace attention
}  // namespace gpe
