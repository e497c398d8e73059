// 16-bit KV caches (cpu_attention.h): float32 or bfloat16 queries against bfloat16 or
// float16 keys and values, against the double reference on the widened cache, on the
// decoding path (few queries, keys split across threads: lengths below, at and above the
// 64-key blocks and the split), the query-item path (prefill, causal, GQA), with RoPE and
// value rows of their own size, on every compiled instruction set.
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <type_traits>
#include <utility>
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
using encodings::sequence::Float16;
using encodings::sequence::ToBFloat16;
using encodings::sequence::ToFloat;
using encodings::sequence::ToFloat16;

template <class KV>
KV Round(float x) {
  if constexpr (std::is_same_v<KV, BFloat16>) {
    return ToBFloat16(x);
  } else {
    return ToFloat16(x);
  }
}

// max |got - want| over o, where want is the double reference on the same (widened)
// cache and, for a bfloat16 q, the same bf16-rounded q.
template <class Q, class KV>
void Check(const AttentionArgs& a, uint64_t seed, double tol, const std::string& what) {
  std::mt19937_64 rng(seed);
  const size_t nq = test::Extent(a, a.q, true), nk = test::Extent(a, a.k, false);
  const size_t nv = test::Extent(a, a.v, false);
  std::vector<float> qf = test::RandomF(nq, &rng), kf = test::RandomF(nk, &rng),
                     vf = test::RandomF(nv, &rng);
  std::vector<Q> q(nq);
  std::vector<KV> k(nk), v(nv);
  std::vector<double> qd(nq), kd(nk), vd(nv);
  for (size_t i = 0; i < nq; ++i) {
    if constexpr (std::is_same_v<Q, float>) {
      q[i] = qf[i];
      qd[i] = qf[i];
    } else {
      q[i] = ToBFloat16(qf[i]);
      qd[i] = ToFloat(q[i]);
    }
  }
  for (size_t i = 0; i < nk; ++i) {
    k[i] = Round<KV>(kf[i]);
    kd[i] = ToFloat(k[i]);
  }
  for (size_t i = 0; i < nv; ++i) {
    v[i] = Round<KV>(vf[i]);
    vd[i] = ToFloat(v[i]);
  }
  const size_t no = test::Extent(a, a.o, true);
  const size_t nl = static_cast<size_t>(a.num_q_tokens() * a.num_q_heads);
  std::vector<double> want(no), want_lse(nl);
  ASSERT_TRUE(
      ReferenceForward<double>(a, qd.data(), kd.data(), vd.data(), want.data(), want_lse.data()).ok());
  CpuAttentionOptions opt;
  opt.block_k = 64;
  opt.num_threads = 3;
  // bfloat16 q and cache: the widening path (float arithmetic), and where the CPU has
  // them the bf16 dot products, which round the scaled q and the probabilities to bf16:
  // scores off by 2^-9 of |q . k| scale ~ 1 (lse ~ 5e-3) and o by a few such roundings:
  // 2e-2 for both, still far below a misread cache's O(0.1).
  using Arith = CpuAttentionOptions::Bf16Arithmetic;
  constexpr bool kBf16All = std::is_same_v<Q, BFloat16> && std::is_same_v<KV, BFloat16>;
  std::vector<Arith> ariths = {Arith::kWiden};
  if (kBf16All && CpuHasBf16DotProducts()) ariths.push_back(Arith::kDotProducts);
  for (Arith arith : ariths) {
    opt.bf16_arithmetic = arith;
    const bool dot = arith == Arith::kDotProducts;
    const double otol = dot ? std::max(tol, 2e-2) : tol, ltol = dot ? 2e-2 : 1e-4;
    for (int64_t target : cpu::CompiledTargets()) {
      hwy::SetSupportedTargetsForTest(target);
      std::vector<Q> o(no);
      std::vector<float> lse(nl);
      ASSERT_TRUE(CpuForward(a, q.data(), k.data(), v.data(), o.data(), lse.data(), opt).ok())
          << what;
      double err = 0.0, lerr = 0.0;
      for (size_t i = 0; i < no; ++i) {
        double got;
        if constexpr (std::is_same_v<Q, float>) {
          got = o[i];
        } else {
          got = ToFloat(o[i]);
        }
        err = std::max(err, std::abs(got - want[i]));
      }
      for (size_t i = 0; i < nl; ++i) lerr = std::max(lerr, std::abs(lse[i] - want_lse[i]));
      const std::string at =
          what + (dot ? " bf16 dot" : "") + " on " + hwy::TargetName(target);
      EXPECT_LE(err, otol) << at;
      EXPECT_LE(lerr, ltol) << at << " lse";
    }
    hwy::SetSupportedTargetsForTest(0);
  }
}

// float32 arithmetic on O(1) outputs (averages of N(0, 1) values over <= 1100 keys):
// errors ~1e-6 against double; 2e-5 leaves room and is far below what a misread cache
// gives (a bf16 pattern read as half, or a shifted row: O(0.1) and more). A bfloat16
// output adds its rounding, 2^-9 of |o| <= ~3: 8e-3.
constexpr double kTolF32 = 2e-5, kTolBf16Out = 8e-3;

template <class Q, class KV>
void CheckShapes(double tol, const std::string& name) {
  uint64_t seed = 1;
  for (int64_t lk : {1, 63, 64, 65, 300, 1100}) {  // decoding: one query, MQA and GQA
    for (auto [hq, hkv] : {std::pair<int64_t, int64_t>{4, 1}, {4, 2}}) {
      AttentionArgs a = test::Bshd(2, 1, lk, hq, hkv, 32);
      a.causal = true;
      Check<Q, KV>(a, ++seed, tol, name + " decode lk " + std::to_string(lk));
    }
  }
  {  // the last 3 queries of a causal cache: earlier queries mask the last keys
    AttentionArgs a = test::Bshd(1, 3, 700, 4, 2, 80);
    a.causal = true;
    Check<Q, KV>(a, ++seed, tol, name + " decode 3 queries d 80");
  }
  for (int64_t l : {17, 70}) {  // query items: prefill
    AttentionArgs a = test::Bshd(1, l, l, 4, 2, 32);
    a.causal = true;
    Check<Q, KV>(a, ++seed, tol, name + " prefill l " + std::to_string(l));
  }
  {  // a sliding window, the softcap and sinks: the split covers the window's keys only
    const std::vector<float> sinks = {0.5f, -1.0f, 2.0f, 0.0f};
    AttentionArgs a = test::Bshd(2, 1, 1100, 4, 2, 32);
    a.causal = true;
    a.window_left = 200;
    a.softcap = 1.5;
    a.sinks = sinks;
    Check<Q, KV>(a, ++seed, tol, name + " decode window softcap sinks");
  }
  // A value head size of its own (DeepSeek's 192/128: rows read in place in token
  // order; 40/24: padded rows, copied), decoding and prefill.
  for (auto [d, dv] : {std::pair<int64_t, int64_t>{192, 128}, {40, 24}}) {
    for (int64_t lq : {1, 70}) {
      AttentionArgs a = test::WithValueDim(test::Bshd(1, lq, lq == 1 ? 1100 : 70, 4, 2, d), dv);
      a.causal = true;
      Check<Q, KV>(a, ++seed, tol,
                   name + " d " + std::to_string(d) + " dv " + std::to_string(dv) + " lq " +
                       std::to_string(lq));
    }
  }
  {  // RoPE on the (widened) keys inside the kernel
    encodings::sequence::Rope rope = test::MakeRope(32, 32, group::PlanePairing::kHalfSplit);
    AttentionArgs a = test::Bshd(1, 2, 500, 4, 2, 32);
    a.causal = true;
    RopeRowTransform tq(rope), tk(rope, encodings::sequence::RopeRole::kKey);
    a.q_transform = &tq;
    a.k_transform = &tk;
    Check<Q, KV>(a, ++seed, tol, name + " decode RoPE");
  }
}

TEST(KvCache, Float32QueriesBFloat16Cache) { CheckShapes<float, BFloat16>(kTolF32, "f32/bf16"); }
TEST(KvCache, Float32QueriesFloat16Cache) { CheckShapes<float, Float16>(kTolF32, "f32/f16"); }
TEST(KvCache, BFloat16QueriesBFloat16Cache) {
  CheckShapes<BFloat16, BFloat16>(kTolBf16Out, "bf16/bf16");
}
TEST(KvCache, BFloat16QueriesFloat16Cache) {
  CheckShapes<BFloat16, Float16>(kTolBf16Out, "bf16/f16");
}

}  // namespace
}  // namespace attention
}  // namespace gpe
