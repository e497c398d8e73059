// gpe_attention_forward / _backward through gpe.h only, against an independent oracle
// written here from the formulas (RoPE of Su et al. eq. 34 half-split, ALiBi slopes of
// Press et al. for a power of two, softmax in double), plus the bad-input table.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <random>
#include <vector>

#include "c_api/include/gpe/gpe.h"
#include "c_api/test_util.h"
#include "gtest/gtest.h"

namespace {

using gpe::c_api_test::CentralDifference;
using gpe::c_api_test::Tensor;

// An ALiBi bias handle with Press et al.'s slopes, destroyed with the pointer.
using BiasPtr = std::unique_ptr<gpe_bias, void (*)(gpe_bias*)>;
BiasPtr MakeAlibi(int64_t heads, int32_t form) {
  gpe_alibi_options ao = GPE_ALIBI_OPTIONS_INIT;
  ao.num_heads = heads;
  ao.form = form;
  gpe_bias* b = nullptr;
  EXPECT_EQ(gpe_bias_create_alibi(&ao, &b), GPE_OK) << gpe_last_error_message();
  return BiasPtr(b, gpe_bias_destroy);
}

std::vector<float> Random(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> u(0.0f, 1.0f);
  std::vector<float> x(n);
  for (float& e : x) e = u(rng);
  return x;
}

// bshd [1, s, h, d] causal attention with half-split RoPE (base 10000) on all d dims
// and causal ALiBi (slopes 2^(-8 i / h), i = 1..h), in double.
std::vector<double> Oracle(const std::vector<float>& q, const std::vector<float>& k,
                           const std::vector<float>& v, int64_t s, int64_t hq, int64_t hkv,
                           int64_t d, bool rope, bool alibi) {
  auto rot = [&](const float* x, int64_t p) {
    std::vector<double> y(x, x + d);
    if (!rope) return y;
    for (int64_t i = 0; i < d / 2; ++i) {
      const double th = std::pow(10000.0, -2.0 * i / d) * p;
      const double c = std::cos(th), sn = std::sin(th);
      y[i] = x[i] * c - x[i + d / 2] * sn;
      y[i + d / 2] = x[i] * sn + x[i + d / 2] * c;
    }
    return y;
  };
  std::vector<double> o(s * hq * d, 0.0);
  for (int64_t h = 0; h < hq; ++h) {
    const int64_t g = h / (hq / hkv);
    const double slope = std::pow(2.0, -8.0 * (h + 1) / hq);
    for (int64_t i = 0; i < s; ++i) {
      std::vector<double> qi = rot(&q[(i * hq + h) * d], i), sc(i + 1);
      double m = -1e300;
      for (int64_t j = 0; j <= i; ++j) {
        std::vector<double> kj = rot(&k[(j * hkv + g) * d], j);
        double dot = 0;
        for (int64_t e = 0; e < d; ++e) dot += qi[e] * kj[e];
        sc[j] = dot / std::sqrt(double(d)) - (alibi ? slope * (i - j) : 0.0);
        m = std::max(m, sc[j]);
      }
      double z = 0;
      for (int64_t j = 0; j <= i; ++j) z += std::exp(sc[j] - m);
      for (int64_t j = 0; j <= i; ++j) {
        const double p = std::exp(sc[j] - m) / z;
        for (int64_t e = 0; e < d; ++e) o[(i * hq + h) * d + e] += p * v[(j * hkv + g) * d + e];
      }
    }
  }
  return o;
}

TEST(AttentionAbi, ForwardMatchesOracleWithRopeAndAlibi) {
  const int64_t s = 37, hq = 4, hkv = 2, d = 32;
  std::vector<float> q = Random(s * hq * d, 1), k = Random(s * hkv * d, 2), v = Random(s * hkv * d, 3);
  std::vector<float> o(q.size()), lse(s * hq);
  std::vector<int64_t> qs = {1, s, hq, d}, ks = {1, s, hkv, d}, ls = {s, hq};
  DLTensor tq = Tensor(q.data(), kDLFloat, 32, &qs), tk = Tensor(k.data(), kDLFloat, 32, &ks),
           tv = Tensor(v.data(), kDLFloat, 32, &ks), to = Tensor(o.data(), kDLFloat, 32, &qs),
           tl = Tensor(lse.data(), kDLFloat, 32, &ls);
  gpe_alibi_options ao = GPE_ALIBI_OPTIONS_INIT;
  ao.num_heads = hq;
  gpe_bias* alibi = nullptr;
  ASSERT_EQ(gpe_bias_create_alibi(&ao, &alibi), GPE_OK) << gpe_last_error_message();
  gpe_attention_options opt = GPE_ATTENTION_OPTIONS_INIT;
  opt.causal = 1;
  opt.rope_dim = d;
  opt.bias = alibi;
  const gpe_status st = gpe_attention_forward(&opt, &tq, &tk, &tv, &to, &tl);
  gpe_bias_destroy(alibi);
  ASSERT_EQ(st, GPE_OK) << gpe_last_error_message();
  std::vector<double> want = Oracle(q, k, v, s, hq, hkv, d, true, true);
  // float32 kernel against a double oracle on O(1) outputs: 1e-5 covers float rounding of
  // 32-term dot products and 37-term sums with a wide margin; a wrong angle, slope or
  // mask moves outputs by >= 1e-2.
  for (size_t i = 0; i < o.size(); ++i) ASSERT_NEAR(o[i], want[i], 1e-5) << i;
  for (float x : lse) EXPECT_TRUE(std::isfinite(x));
}

TEST(AttentionAbi, PackedBfloat16AndBackward) {
  // The same sequence packed (thd) with an empty one before it: equal outputs.
  const int64_t s = 20, h = 2, d = 16;
  std::vector<float> q = Random(s * h * d, 4), k = Random(s * h * d, 5), v = Random(s * h * d, 6);
  std::vector<float> o1(q.size()), o2(q.size());
  std::vector<int64_t> b4 = {1, s, h, d}, t3 = {s, h, d}, cu_shape = {3};
  std::vector<int64_t> cu = {0, 0, s};
  gpe_attention_options opt = GPE_ATTENTION_OPTIONS_INIT;
  opt.causal = 1;
  DLTensor tq = Tensor(q.data(), kDLFloat, 32, &b4), tk = Tensor(k.data(), kDLFloat, 32, &b4),
           tv = Tensor(v.data(), kDLFloat, 32, &b4), to = Tensor(o1.data(), kDLFloat, 32, &b4);
  ASSERT_EQ(gpe_attention_forward(&opt, &tq, &tk, &tv, &to, nullptr), GPE_OK) << gpe_last_error_message();
  DLTensor cuq = Tensor(cu.data(), kDLInt, 64, &cu_shape);
  opt.cu_seqlens_q = &cuq;
  opt.cu_seqlens_k = &cuq;
  DLTensor pq = Tensor(q.data(), kDLFloat, 32, &t3), pk = Tensor(k.data(), kDLFloat, 32, &t3),
           pv = Tensor(v.data(), kDLFloat, 32, &t3), po = Tensor(o2.data(), kDLFloat, 32, &t3);
  ASSERT_EQ(gpe_attention_forward(&opt, &pq, &pk, &pv, &po, nullptr), GPE_OK) << gpe_last_error_message();
  EXPECT_EQ(o1, o2);  // same kernels, same tiles: bit-identical
  // bfloat16 storage: inputs rounded to bf16, outputs within bf16 rounding of float's.
  auto to_bf = [](const std::vector<float>& x) {
    std::vector<uint16_t> y(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      uint32_t u;
      std::memcpy(&u, &x[i], 4);
      y[i] = static_cast<uint16_t>((u + 0x7FFF + ((u >> 16) & 1)) >> 16);
    }
    return y;
  };
  std::vector<uint16_t> qb = to_bf(q), kb = to_bf(k), vb = to_bf(v), ob(q.size());
  DLTensor bq = Tensor(qb.data(), kDLBfloat, 16, &t3), bk = Tensor(kb.data(), kDLBfloat, 16, &t3),
           bv = Tensor(vb.data(), kDLBfloat, 16, &t3), bo = Tensor(ob.data(), kDLBfloat, 16, &t3);
  ASSERT_EQ(gpe_attention_forward(&opt, &bq, &bk, &bv, &bo, nullptr), GPE_OK) << gpe_last_error_message();
  for (size_t i = 0; i < ob.size(); ++i) {
    uint32_t u = uint32_t(ob[i]) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    // bf16 inputs (2^-9 relative each) and output rounding: 2e-2 absolute on O(1) values.
    ASSERT_NEAR(f, o2[i], 2e-2) << i;
  }
  // Backward: finite difference of L = sum(w * o) in float along a random direction of q
  // agrees with <dq, direction> (float32: step 1e-2, tolerance 2e-2 relative).
  std::vector<float> w = Random(q.size(), 7), dq(q.size()), dk(k.size()), dv(v.size());
  DLTensor tw = Tensor(w.data(), kDLFloat, 32, &t3), tdq = Tensor(dq.data(), kDLFloat, 32, &t3),
           tdk = Tensor(dk.data(), kDLFloat, 32, &t3), tdv = Tensor(dv.data(), kDLFloat, 32, &t3);
  ASSERT_EQ(gpe_attention_backward(&opt, &pq, &pk, &pv, nullptr, nullptr, &tw, &tdq, &tdk, &tdv),
            GPE_OK)
      << gpe_last_error_message();
  std::vector<float> dir = Random(q.size(), 8), qp = q, qm = q, op(q.size()), om(q.size());
  const float eps = 1e-2f;
  for (size_t i = 0; i < q.size(); ++i) {
    qp[i] += eps * dir[i];
    qm[i] -= eps * dir[i];
  }
  DLTensor tqp = Tensor(qp.data(), kDLFloat, 32, &t3), tqm = Tensor(qm.data(), kDLFloat, 32, &t3),
           top = Tensor(op.data(), kDLFloat, 32, &t3), tom = Tensor(om.data(), kDLFloat, 32, &t3);
  ASSERT_EQ(gpe_attention_forward(&opt, &tqp, &pk, &pv, &top, nullptr), GPE_OK);
  ASSERT_EQ(gpe_attention_forward(&opt, &tqm, &pk, &pv, &tom, nullptr), GPE_OK);
  double fd = 0, an = 0;
  for (size_t i = 0; i < q.size(); ++i) {
    fd += double(w[i]) * (op[i] - om[i]) / (2 * eps);
    an += double(dq[i]) * dir[i];
  }
  EXPECT_NEAR(fd, an, 2e-2 * std::max(1.0, std::fabs(an)));
}

// 16-bit KV caches: float32 q against bfloat16 and float16 k, v (and bfloat16 q against
// float16) equal the float32 call on the same values; values are multiples of 1/32 below
// 4 in magnitude (7 significant bits), exact in bfloat16, float16 and float32, so only
// the kernels' summation order differs (float32 on d = 16 over 40 keys: 1e-5 absolute;
// bfloat16 output: its rounding, 2^-9 of |o| < 4, 8e-3). The backward refuses a cache.
TEST(AttentionAbi, SixteenBitKvCacheForward) {
  const int64_t sq = 3, sk = 40, hq = 4, hkv = 2, d = 16;
  auto grid = [](std::vector<float> x) {
    for (float& e : x) e = std::round(std::clamp(e, -3.8f, 3.8f) * 32.0f) / 32.0f;
    return x;
  };
  std::vector<float> q = grid(Random(sq * hq * d, 11)), k = grid(Random(sk * hkv * d, 12)),
                     v = grid(Random(sk * hkv * d, 13));
  auto bits16 = [](const std::vector<float>& x, bool half) {
    std::vector<uint16_t> y(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      uint32_t u;
      std::memcpy(&u, &x[i], 4);
      if (!half) {
        y[i] = static_cast<uint16_t>(u >> 16);  // exact: the low half is zero
      } else if ((u & 0x7fffffffu) == 0) {
        y[i] = static_cast<uint16_t>(u >> 16);
      } else {  // a normal half: rebias 127 -> 15, top 10 mantissa bits (the rest zero)
        const uint32_t e = ((u >> 23) & 0xff) - 112;
        y[i] = static_cast<uint16_t>(((u >> 16) & 0x8000u) | (e << 10) | ((u >> 13) & 0x3ffu));
      }
    }
    return y;
  };
  std::vector<int64_t> qs = {1, sq, hq, d}, ks = {1, sk, hkv, d};
  gpe_attention_options opt = GPE_ATTENTION_OPTIONS_INIT;
  opt.causal = 1;
  std::vector<float> want(q.size()), got(q.size());
  DLTensor tq = Tensor(q.data(), kDLFloat, 32, &qs), tk = Tensor(k.data(), kDLFloat, 32, &ks),
           tv = Tensor(v.data(), kDLFloat, 32, &ks), to = Tensor(want.data(), kDLFloat, 32, &qs);
  ASSERT_EQ(gpe_attention_forward(&opt, &tq, &tk, &tv, &to, nullptr), GPE_OK)
      << gpe_last_error_message();
  for (bool half : {false, true}) {
    std::vector<uint16_t> k16 = bits16(k, half), v16 = bits16(v, half);
    const DLDataTypeCode code = half ? kDLFloat : kDLBfloat;
    DLTensor ck = Tensor(k16.data(), code, 16, &ks), cv = Tensor(v16.data(), code, 16, &ks),
             go = Tensor(got.data(), kDLFloat, 32, &qs);
    ASSERT_EQ(gpe_attention_forward(&opt, &tq, &ck, &cv, &go, nullptr), GPE_OK)
        << gpe_last_error_message();
    for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-5) << half << " " << i;
    std::vector<float> dq(q.size()), dk(k.size()), dv(v.size());
    DLTensor tdq = Tensor(dq.data(), kDLFloat, 32, &qs), tdk = Tensor(dk.data(), kDLFloat, 32, &ks),
             tdv = Tensor(dv.data(), kDLFloat, 32, &ks);
    EXPECT_EQ(gpe_attention_backward(&opt, &tq, &ck, &cv, nullptr, nullptr, &to, &tdq, &tdk, &tdv),
              GPE_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(std::strstr(gpe_last_error_message(), "forward only"), nullptr)
        << gpe_last_error_message();
  }
  // bfloat16 q (exact: 7 significant bits) and o against a float16 cache.
  std::vector<uint16_t> qb = bits16(q, false), ob(q.size()), kh = bits16(k, true),
                        vh = bits16(v, true);
  DLTensor bq = Tensor(qb.data(), kDLBfloat, 16, &qs), bo = Tensor(ob.data(), kDLBfloat, 16, &qs),
           hk = Tensor(kh.data(), kDLFloat, 16, &ks), hv = Tensor(vh.data(), kDLFloat, 16, &ks);
  ASSERT_EQ(gpe_attention_forward(&opt, &bq, &hk, &hv, &bo, nullptr), GPE_OK)
      << gpe_last_error_message();
  for (size_t i = 0; i < ob.size(); ++i) {
    uint32_t u = uint32_t(ob[i]) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    ASSERT_NEAR(f, want[i], 8e-3) << i;
  }
  // Refused: float16 q; k and v of different dtypes; float32 k, v for bfloat16 q (not a
  // 16-bit cache).
  std::vector<uint16_t> qh = bits16(q, true), oh(q.size());
  DLTensor hq16 = Tensor(qh.data(), kDLFloat, 16, &qs), ho = Tensor(oh.data(), kDLFloat, 16, &qs);
  EXPECT_EQ(gpe_attention_forward(&opt, &hq16, &hk, &hv, &ho, nullptr), GPE_ERROR_INVALID_ARGUMENT);
  std::vector<uint16_t> kb = bits16(k, false);
  DLTensor bk = Tensor(kb.data(), kDLBfloat, 16, &ks);
  EXPECT_EQ(gpe_attention_forward(&opt, &tq, &bk, &hv, &to, nullptr), GPE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(gpe_attention_forward(&opt, &bq, &tk, &tv, &bo, nullptr), GPE_ERROR_INVALID_ARGUMENT);
}

// float64 runs the exact reference: against the double oracle to rounding, its lse against
// the float32 kernel's, and its backward against central differences of its own forward.
TEST(AttentionAbi, Float64IsExactWithGradients) {
  const int64_t s = 19, hq = 4, hkv = 2, d = 16;
  const std::vector<float> qf = Random(s * hq * d, 11), kf = Random(s * hkv * d, 12),
                           vf = Random(s * hkv * d, 13);
  std::vector<double> q(qf.begin(), qf.end()), k(kf.begin(), kf.end()), v(vf.begin(), vf.end());
  std::vector<double> o(q.size()), lse(s * hq);
  std::vector<int64_t> qs = {1, s, hq, d}, ks = {1, s, hkv, d}, ls = {s, hq};
  DLTensor tq = Tensor(q.data(), kDLFloat, 64, &qs), tk = Tensor(k.data(), kDLFloat, 64, &ks),
           tv = Tensor(v.data(), kDLFloat, 64, &ks), to = Tensor(o.data(), kDLFloat, 64, &qs),
           tl = Tensor(lse.data(), kDLFloat, 64, &ls);
  gpe_attention_options opt = GPE_ATTENTION_OPTIONS_INIT;
  opt.causal = 1;
  opt.rope_dim = d;
  BiasPtr alibi = MakeAlibi(hq, GPE_ALIBI_CAUSAL);
  opt.bias = alibi.get();
  ASSERT_EQ(gpe_attention_forward(&opt, &tq, &tk, &tv, &to, &tl), GPE_OK)
      << gpe_last_error_message();
  const std::vector<double> want = Oracle(qf, kf, vf, s, hq, hkv, d, true, true);
  // Both in double from the same float-representable inputs: only the order of double
  // roundings differs (~1e-15 on O(1) values); 1e-12 fails for any float32 arithmetic.
  for (size_t i = 0; i < o.size(); ++i) ASSERT_NEAR(o[i], want[i], 1e-12) << i;
  // lse against the float32 kernel's (float32 rounding of O(10) values: 1e-4).
  std::vector<float> o32(q.size()), lse32(s * hq);
  DLTensor fq = Tensor(const_cast<float*>(qf.data()), kDLFloat, 32, &qs),
           fk = Tensor(const_cast<float*>(kf.data()), kDLFloat, 32, &ks),
           fv = Tensor(const_cast<float*>(vf.data()), kDLFloat, 32, &ks),
           fo = Tensor(o32.data(), kDLFloat, 32, &qs), fl = Tensor(lse32.data(), kDLFloat, 32, &ls);
  ASSERT_EQ(gpe_attention_forward(&opt, &fq, &fk, &fv, &fo, &fl), GPE_OK)
      << gpe_last_error_message();
  for (size_t i = 0; i < lse.size(); ++i) ASSERT_NEAR(lse[i], lse32[i], 1e-4) << i;

  // Backward of L = sum(w * o) along random directions of q, k and v: central differences
  // with step 1e-5 have truncation error ~1e-10 and rounding ~1e-11 on O(1) gradients, so
  // 1e-7 relative separates them from any wrong term (>= 1e-3).
  std::vector<double> w(q.size()), dq(q.size()), dk(k.size()), dv(v.size());
  {
    const std::vector<float> wf = Random(q.size(), 14);
    w.assign(wf.begin(), wf.end());
  }
  DLTensor tw = Tensor(w.data(), kDLFloat, 64, &qs), tdq = Tensor(dq.data(), kDLFloat, 64, &qs),
           tdk = Tensor(dk.data(), kDLFloat, 64, &ks), tdv = Tensor(dv.data(), kDLFloat, 64, &ks);
  ASSERT_EQ(gpe_attention_backward(&opt, &tq, &tk, &tv, &to, &tl, &tw, &tdq, &tdk, &tdv), GPE_OK)
      << gpe_last_error_message();
  auto loss = [&](const std::vector<double>& q_, const std::vector<double>& k_,
                  const std::vector<double>& v_) {
    std::vector<double> out(q_.size());
    DLTensor a = Tensor(const_cast<double*>(q_.data()), kDLFloat, 64, &qs),
             b = Tensor(const_cast<double*>(k_.data()), kDLFloat, 64, &ks),
             c = Tensor(const_cast<double*>(v_.data()), kDLFloat, 64, &ks),
             r = Tensor(out.data(), kDLFloat, 64, &qs);
    EXPECT_EQ(gpe_attention_forward(&opt, &a, &b, &c, &r, nullptr), GPE_OK);
    double l = 0;
    for (size_t i = 0; i < out.size(); ++i) l += w[i] * out[i];
    return l;
  };
  const double eps = 1e-5;
  for (int which = 0; which < 3; ++which) {
    const std::vector<double>& x = which == 0 ? q : which == 1 ? k : v;
    const std::vector<double>& g = which == 0 ? dq : which == 1 ? dk : dv;
    const std::vector<float> dirf = Random(x.size(), 20 + which);
    std::vector<double> xp = x, xm = x;
    double an = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      xp[i] += eps * dirf[i];
      xm[i] -= eps * dirf[i];
      an += g[i] * dirf[i];
    }
    const double fd = which == 0   ? (loss(xp, k, v) - loss(xm, k, v)) / (2 * eps)
                      : which == 1 ? (loss(q, xp, v) - loss(q, xm, v)) / (2 * eps)
                                   : (loss(q, k, xp) - loss(q, k, xm)) / (2 * eps);
    EXPECT_NEAR(fd, an, 1e-7 * std::max(1.0, std::fabs(an))) << which;
  }

  // Packed, explicit positions (a shard of keys at global positions 100..): float64 equals
  // the float32 kernel to float rounding (1e-5), so every option reaches the reference.
  std::vector<int64_t> t3q = {s, hq, d}, t3k = {s, hkv, d}, cu_shape = {3}, cu = {0, 7, s},
                       p_shape = {s}, pos(s);
  for (int64_t i = 0; i < s; ++i) pos[i] = 100 + 3 * i;
  DLTensor tcu = Tensor(cu.data(), kDLInt, 64, &cu_shape), tp = Tensor(pos.data(), kDLInt, 64, &p_shape);
  gpe_attention_options po = opt;
  po.cu_seqlens_q = po.cu_seqlens_k = &tcu;
  po.q_positions = po.k_positions = &tp;
  BiasPtr symmetric = MakeAlibi(hq, GPE_ALIBI_SYMMETRIC);
  po.bias = symmetric.get();
  DLTensor pq = Tensor(q.data(), kDLFloat, 64, &t3q), pk = Tensor(k.data(), kDLFloat, 64, &t3k),
           pv = Tensor(v.data(), kDLFloat, 64, &t3k), pov = Tensor(o.data(), kDLFloat, 64, &t3q);
  DLTensor gq = Tensor(const_cast<float*>(qf.data()), kDLFloat, 32, &t3q),
           gk = Tensor(const_cast<float*>(kf.data()), kDLFloat, 32, &t3k),
           gv = Tensor(const_cast<float*>(vf.data()), kDLFloat, 32, &t3k),
           go = Tensor(o32.data(), kDLFloat, 32, &t3q);
  ASSERT_EQ(gpe_attention_forward(&po, &pq, &pk, &pv, &pov, nullptr), GPE_OK)
      << gpe_last_error_message();
  ASSERT_EQ(gpe_attention_forward(&po, &gq, &gk, &gv, &go, nullptr), GPE_OK)
      << gpe_last_error_message();
  for (size_t i = 0; i < o.size(); ++i) ASSERT_NEAR(o[i], o32[i], 1e-5) << i;

  // A float32 lse with float64 tensors, and mixed dtypes, are rejected with a message.
  std::vector<float> lse_bad(s * hq);
  DLTensor tlb = Tensor(lse_bad.data(), kDLFloat, 32, &ls);
  EXPECT_EQ(gpe_attention_forward(&opt, &tq, &tk, &tv, &to, &tlb), GPE_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::strstr(gpe_last_error_message(), "lse"), nullptr) << gpe_last_error_message();
  EXPECT_EQ(gpe_attention_forward(&opt, &tq, &fk, &fv, &to, nullptr), GPE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(gpe_attention_forward(&opt, &tq, &tk, &tv, &fo, nullptr), GPE_ERROR_INVALID_ARGUMENT);
}

// ---- Structured positions and Shaw labels through gpe.h ------------------------------

// One sequence [s, h, d], in double: M-RoPE with half-split pairs (i, i + d/2),
// theta_i = base^(-2i/d), plane i rotated by the coordinate of its section's axis
// (Qwen2-VL: contiguous sections), then Shaw et al.'s labels r = clip(j - i, -k, k) on
// keys (scale q . aK_r added to the score) and values (p_ij aV_r added to o_i); causal.
std::vector<double> MRopeShawOracle(const std::vector<float>& q, const std::vector<float>& k,
                                    const std::vector<float>& v, int64_t s, int64_t hq,
                                    int64_t hkv, int64_t d, const std::vector<int64_t>& sections,
                                    const std::vector<int64_t>& coords, int64_t kmax,
                                    const std::vector<double>& ak, const std::vector<double>& av) {
  const int64_t axes = static_cast<int64_t>(sections.size());
  std::vector<int64_t> axis_of;
  for (int64_t a = 0; a < axes; ++a) axis_of.insert(axis_of.end(), sections[a], a);
  auto rot = [&](const float* x, int64_t t) {
    std::vector<double> y(x, x + d);
    for (int64_t i = 0; i < d / 2; ++i) {
      const double th = std::pow(10000.0, -2.0 * i / d) * coords[t * axes + axis_of[i]];
      const double c = std::cos(th), sn = std::sin(th);
      y[i] = x[i] * c - x[i + d / 2] * sn;
      y[i + d / 2] = x[i] * sn + x[i + d / 2] * c;
    }
    return y;
  };
  auto label = [&](int64_t i, int64_t j) { return std::clamp<int64_t>(j - i, -kmax, kmax) + kmax; };
  std::vector<double> o(s * hq * d, 0.0);
  for (int64_t h = 0; h < hq; ++h) {
    const int64_t g = h / (hq / hkv);
    for (int64_t i = 0; i < s; ++i) {
      std::vector<double> qi = rot(&q[(i * hq + h) * d], i), sc(i + 1);
      double m = -1e300;
      for (int64_t j = 0; j <= i; ++j) {
        std::vector<double> kj = rot(&k[(j * hkv + g) * d], j);
        double dot = 0;
        for (int64_t e = 0; e < d; ++e) dot += qi[e] * (kj[e] + ak[label(i, j) * d + e]);
        sc[j] = dot / std::sqrt(double(d));
        m = std::max(m, sc[j]);
      }
      double z = 0;
      for (int64_t j = 0; j <= i; ++j) z += std::exp(sc[j] - m);
      for (int64_t j = 0; j <= i; ++j) {
        const double p = std::exp(sc[j] - m) / z;
        for (int64_t e = 0; e < d; ++e) {
          o[(i * hq + h) * d + e] += p * (v[(j * hkv + g) * d + e] + av[label(i, j) * d + e]);
        }
      }
    }
  }
  return o;
}

TEST(AttentionAbi, MRopeSectionsAndShawLabelsMatchOracle) {
  const int64_t s = 29, hq = 4, hkv = 2, d = 16, kmax = 3;
  std::vector<float> q = Random(s * hq * d, 31), k = Random(s * hkv * d, 32), v = Random(s * hkv * d, 33);
  std::vector<int64_t> sections = {2, 3, 3}, coords(s * 3);
  std::mt19937_64 rng(34);
  for (int64_t& c : coords) c = static_cast<int64_t>(rng() % 41) - 20;
  std::vector<double> ak(7 * d), av(7 * d);
  {
    const std::vector<float> a = Random(ak.size(), 35), b = Random(av.size(), 36);
    ak.assign(a.begin(), a.end());
    av.assign(b.begin(), b.end());
  }
  std::vector<float> o(q.size());
  std::vector<int64_t> qs = {1, s, hq, d}, ks = {1, s, hkv, d}, cs = {s, 3}, ss = {3},
                       ts = {2 * kmax + 1, d};
  DLTensor tq = Tensor(q.data(), kDLFloat, 32, &qs), tk = Tensor(k.data(), kDLFloat, 32, &ks),
           tv = Tensor(v.data(), kDLFloat, 32, &ks), to = Tensor(o.data(), kDLFloat, 32, &qs),
           tc = Tensor(coords.data(), kDLInt, 64, &cs), tsec = Tensor(sections.data(), kDLInt, 64, &ss),
           tak = Tensor(ak.data(), kDLFloat, 64, &ts), tav = Tensor(av.data(), kDLFloat, 64, &ts);
  gpe_attention_options opt = GPE_ATTENTION_OPTIONS_INIT;
  opt.causal = 1;
  opt.rope_dim = d;
  opt.rope_sections = &tsec;
  opt.q_axes = opt.k_axes = &tc;
  opt.shaw_max_distance = kmax;
  opt.shaw_key_table = &tak;
  opt.shaw_value_table = &tav;
  ASSERT_EQ(gpe_attention_forward(&opt, &tq, &tk, &tv, &to, nullptr), GPE_OK)
      << gpe_last_error_message();
  const std::vector<double> want = MRopeShawOracle(q, k, v, s, hq, hkv, d, sections, coords, kmax, ak, av);
  // float32 kernel against a double oracle, O(1) outputs of 16-term dots and 29-term
  // sums: 2e-5 covers float rounding; a wrong axis, label or section moves them >= 1e-2.
  for (size_t i = 0; i < o.size(); ++i) ASSERT_NEAR(o[i], want[i], 2e-5) << i;
  // The same call from a caller built against the first header (struct_size ending at
  // cu_seqlens_k): the new fields are ignored, whatever they hold, and the result is
  // plain causal attention.
  gpe_attention_options old = opt;
  old.struct_size = static_cast<uint32_t>(offsetof(gpe_attention_options, rope_axes));
  old.rope_dim = 0;
  old.shaw_max_distance = -7;  // invalid if read
  std::vector<float> o_old(q.size());
  DLTensor too = Tensor(o_old.data(), kDLFloat, 32, &qs);
  ASSERT_EQ(gpe_attention_forward(&old, &tq, &tk, &tv, &too, nullptr), GPE_OK)
      << gpe_last_error_message();
  const std::vector<double> plain = Oracle(q, k, v, s, hq, hkv, d, false, false);
  for (size_t i = 0; i < o.size(); ++i) ASSERT_NEAR(o_old[i], plain[i], 1e-5) << i;
}

// float64 through gpe_attention_backward_v2: dq, dk, dv and both Shaw tables' gradients
// against central differences of L = sum(w * o); float32 table gradients agree.
TEST(AttentionAbi, ShawTableGradientsMatchFiniteDifferences) {
  const int64_t s = 11, hq = 2, hkv = 1, d = 8, kmax = 2, nl = 2 * kmax + 1;
  const std::vector<float> qf = Random(s * hq * d, 41), kf = Random(s * hkv * d, 42),
                           vf = Random(s * hkv * d, 43), wf = Random(s * hq * d, 44);
  std::vector<double> q(qf.begin(), qf.end()), k(kf.begin(), kf.end()), v(vf.begin(), vf.end()),
      w(wf.begin(), wf.end());
  std::vector<double> ak(nl * d), av(nl * d);
  {
    const std::vector<float> a = Random(ak.size(), 45), b = Random(av.size(), 46);
    ak.assign(a.begin(), a.end());
    av.assign(b.begin(), b.end());
  }
  std::vector<int64_t> qs = {1, s, hq, d}, ks = {1, s, hkv, d}, ts = {nl, d};
  gpe_attention_options opt = GPE_ATTENTION_OPTIONS_INIT;
  opt.causal = 1;
  opt.rope_dim = d;
  opt.shaw_max_distance = kmax;
  DLTensor tak = Tensor(ak.data(), kDLFloat, 64, &ts), tav = Tensor(av.data(), kDLFloat, 64, &ts);
  opt.shaw_key_table = &tak;
  opt.shaw_value_table = &tav;
  auto loss = [&]() {
    std::vector<double> out(q.size());
    DLTensor a = Tensor(q.data(), kDLFloat, 64, &qs), b = Tensor(k.data(), kDLFloat, 64, &ks),
             c = Tensor(v.data(), kDLFloat, 64, &ks), r = Tensor(out.data(), kDLFloat, 64, &qs);
    EXPECT_EQ(gpe_attention_forward(&opt, &a, &b, &c, &r, nullptr), GPE_OK);
    double l = 0;
    for (size_t i = 0; i < out.size(); ++i) l += w[i] * out[i];
    return l;
  };
  std::vector<double> dq(q.size()), dk(k.size()), dv(v.size()), gak(nl * d), gav(nl * d);
  DLTensor tq = Tensor(q.data(), kDLFloat, 64, &qs), tk = Tensor(k.data(), kDLFloat, 64, &ks),
           tv = Tensor(v.data(), kDLFloat, 64, &ks), tw = Tensor(w.data(), kDLFloat, 64, &qs),
           tdq = Tensor(dq.data(), kDLFloat, 64, &qs), tdk = Tensor(dk.data(), kDLFloat, 64, &ks),
           tdv = Tensor(dv.data(), kDLFloat, 64, &ks), tgk = Tensor(gak.data(), kDLFloat, 64, &ts),
           tgv = Tensor(gav.data(), kDLFloat, 64, &ts);
  ASSERT_EQ(gpe_attention_backward_v2(&opt, &tq, &tk, &tv, nullptr, nullptr, &tw, &tdq, &tdk,
                                      &tdv, &tgk, &tgv),
            GPE_OK)
      << gpe_last_error_message();
  // Central differences, step 1e-5: truncation ~1e-10, rounding ~1e-11 on O(1) values.
  const double eps = 1e-5;
  struct Item {
    std::vector<double>* x;
    const std::vector<double>* g;
    const char* name;
  } items[] = {{&q, &dq, "q"}, {&k, &dk, "k"}, {&v, &dv, "v"}, {&ak, &gak, "aK"}, {&av, &gav, "aV"}};
  for (const Item& it : items) {
    for (size_t i = 0; i < it.x->size(); ++i) {
      const double x0 = (*it.x)[i];
      (*it.x)[i] = x0 + eps;
      const double lp = loss();
      (*it.x)[i] = x0 - eps;
      const double lm = loss();
      (*it.x)[i] = x0;
      ASSERT_NEAR((*it.g)[i], (lp - lm) / (2 * eps), 1e-8) << it.name << " " << i;
    }
  }
  // float32 inputs: the kernel's table gradients (float per item, summed in double) agree
  // with the double ones to float rounding of O(1) sums over 22 rows (1e-4).
  std::vector<float> dq32(q.size()), dk32(k.size()), dv32(v.size()), w32(wf);
  std::vector<double> gak32(nl * d), gav32(nl * d);
  DLTensor fq = Tensor(const_cast<float*>(qf.data()), kDLFloat, 32, &qs),
           fk = Tensor(const_cast<float*>(kf.data()), kDLFloat, 32, &ks),
           fv = Tensor(const_cast<float*>(vf.data()), kDLFloat, 32, &ks),
           fw = Tensor(w32.data(), kDLFloat, 32, &qs), fdq = Tensor(dq32.data(), kDLFloat, 32, &qs),
           fdk = Tensor(dk32.data(), kDLFloat, 32, &ks), fdv = Tensor(dv32.data(), kDLFloat, 32, &ks),
           fgk = Tensor(gak32.data(), kDLFloat, 64, &ts), fgv = Tensor(gav32.data(), kDLFloat, 64, &ts);
  ASSERT_EQ(gpe_attention_backward_v2(&opt, &fq, &fk, &fv, nullptr, nullptr, &fw, &fdq, &fdk,
                                      &fdv, &fgk, &fgv),
            GPE_OK)
      << gpe_last_error_message();
  for (int64_t i = 0; i < nl * d; ++i) {
    EXPECT_NEAR(gak32[i], gak[i], 1e-4) << i;
    EXPECT_NEAR(gav32[i], gav[i], 1e-4) << i;
  }
}

// Algebraic trees (tree addresses) and grids (per-axis coordinates) through gpe.h: the
// float32 kernel equals the float64 reference path (itself checked against relativity
// and the group laws in attention/reference_test) to float rounding.
TEST(AttentionAbi, AlgebraicTreeAndGridFloat32EqualsFloat64) {
  const int64_t s = 23, hq = 2, hkv = 2, d = 8;
  const std::vector<float> qf = Random(s * hq * d, 51), kf = Random(s * hkv * d, 52),
                           vf = Random(s * hkv * d, 53);
  std::vector<double> q(qf.begin(), qf.end()), k(kf.begin(), kf.end()), v(vf.begin(), vf.end());
  std::vector<int64_t> qs = {1, s, hq, d}, ks = {1, s, hkv, d};
  // Two skew generators for a binary tree, and two 4 x 4 axes for a 2D grid.
  std::vector<double> tree(2 * d * d, 0.0), grid(2 * 4 * 4, 0.0);
  const std::vector<float> r = Random(tree.size(), 54);
  for (int64_t c = 0; c < 2; ++c) {
    for (int64_t i = 0; i < d; ++i) {
      for (int64_t j = 0; j < i; ++j) {
        tree[(c * d + i) * d + j] = 0.4 * r[(c * d + i) * d + j];
        tree[(c * d + j) * d + i] = -0.4 * r[(c * d + i) * d + j];
      }
    }
  }
  for (int64_t a = 0; a < 2; ++a) {
    for (int64_t i = 0; i < 4; ++i) {
      for (int64_t j = 0; j < i; ++j) {
        grid[(a * 4 + i) * 4 + j] = 0.5 * r[a * 16 + i * 4 + j];
        grid[(a * 4 + j) * 4 + i] = -0.5 * r[a * 16 + i * 4 + j];
      }
    }
  }
  std::vector<int64_t> off = {0}, ch, coords;
  std::mt19937_64 rng(55);
  for (int64_t t = 0; t < s; ++t) {
    for (uint64_t depth = rng() % 5; depth > 0; --depth) ch.push_back(static_cast<int64_t>(rng() % 2));
    off.push_back(static_cast<int64_t>(ch.size()));
    coords.push_back(static_cast<int64_t>(rng() % 9) - 4);
    coords.push_back(static_cast<int64_t>(rng() % 9) - 4);
  }
  std::vector<int64_t> tree_shape = {2, d, d}, grid_shape = {2, 4, 4}, off_shape = {s + 1},
                       ch_shape = {static_cast<int64_t>(ch.size())}, c_shape = {s, 2};
  DLTensor ttree = Tensor(tree.data(), kDLFloat, 64, &tree_shape),
           tgrid = Tensor(grid.data(), kDLFloat, 64, &grid_shape),
           toff = Tensor(off.data(), kDLInt, 64, &off_shape),
           tch = Tensor(ch.data(), kDLInt, 64, &ch_shape),
           tc = Tensor(coords.data(), kDLInt, 64, &c_shape);
  for (int which = 0; which < 2; ++which) {
    gpe_attention_options opt = GPE_ATTENTION_OPTIONS_INIT;
    opt.causal = which;
    if (which == 0) {
      opt.algebraic_tree = &ttree;
      opt.q_tree_offsets = opt.k_tree_offsets = &toff;
      opt.q_tree_children = opt.k_tree_children = &tch;
    } else {
      opt.algebraic_grid = &tgrid;
      opt.q_axes = opt.k_axes = &tc;
    }
    std::vector<double> o(q.size());
    std::vector<float> o32(q.size());
    DLTensor dq_ = Tensor(q.data(), kDLFloat, 64, &qs), dk_ = Tensor(k.data(), kDLFloat, 64, &ks),
             dv_ = Tensor(v.data(), kDLFloat, 64, &ks), do_ = Tensor(o.data(), kDLFloat, 64, &qs),
             fq = Tensor(const_cast<float*>(qf.data()), kDLFloat, 32, &qs),
             fk = Tensor(const_cast<float*>(kf.data()), kDLFloat, 32, &ks),
             fv = Tensor(const_cast<float*>(vf.data()), kDLFloat, 32, &ks),
             fo = Tensor(o32.data(), kDLFloat, 32, &qs);
    ASSERT_EQ(gpe_attention_forward(&opt, &dq_, &dk_, &dv_, &do_, nullptr), GPE_OK)
        << gpe_last_error_message();
    ASSERT_EQ(gpe_attention_forward(&opt, &fq, &fk, &fv, &fo, nullptr), GPE_OK)
        << gpe_last_error_message();
    // float32 rounding of O(1) values from 8-term rotations and 23-term sums: 1e-5.
    for (size_t i = 0; i < o.size(); ++i) ASSERT_NEAR(o[i], o32[i], 1e-5) << which << " " << i;
  }
}

// An empty key shard (any strides, as NumPy gives zero-size arrays strides 0): every row
// has no allowed key, so o = 0 and lse = -inf, in both precisions; its backward is dq = 0.
// The bias's parameter gradients through gpe_attention_backward_with_parameters, in
// float64 (the exact reference) against central differences of L = <d_o, o> with the
// bias rebuilt from perturbed parameters: ALiBi slopes, T5 table, FoX gate logits,
// GRAPE-AP's w and u. Step 1e-6: truncation ~1e-12, rounding ~1e-16 / 1e-6 = 1e-10, so
// 1e-7 absolute (gradients are O(1)). float32 (the tiled kernel, gradients summed over
// tiles in double from float tiles) agrees with float64 to 2e-3 relative to the largest.
TEST(AttentionAbi, BiasParameterGradientsMatchFiniteDifferences) {
  const int64_t s = 7, h = 2, d = 8, rank = 2;
  std::vector<int64_t> shape = {1, s, h, d};
  const std::vector<float> qf = Random(s * h * d, 71), kf = Random(s * h * d, 72),
                           vf = Random(s * h * d, 73), gf = Random(s * h * d, 74);
  std::vector<double> q(qf.begin(), qf.end()), k(kf.begin(), kf.end()), v(vf.begin(), vf.end()),
      g(gf.begin(), gf.end());
  std::mt19937_64 rng(75);
  std::normal_distribution<double> normal;
  auto params = [&](int64_t n) {
    std::vector<double> p(n);
    for (double& x : p) x = 0.5 * normal(rng);
    return p;
  };
  // Each kind: its parameter vectors and a factory from them.
  struct Kind {
    const char* name;
    std::vector<std::vector<double>> p;  // a (and b for GRAPE-AP)
    std::function<gpe_bias*(const std::vector<std::vector<double>>&)> make;
  };
  std::vector<Kind> kinds;
  kinds.push_back({"alibi", {params(h)}, [&](const auto& p) {
                     gpe_alibi_options o = GPE_ALIBI_OPTIONS_INIT;
                     o.num_heads = h;
                     o.slopes = p[0].data();
                     gpe_bias* b = nullptr;
                     EXPECT_EQ(gpe_bias_create_alibi(&o, &b), GPE_OK) << gpe_last_error_message();
                     return b;
                   }});
  kinds.push_back({"t5", {params(8 * h)}, [&](const auto& p) {
                     gpe_t5_options o = GPE_T5_OPTIONS_INIT;
                     o.num_heads = h;
                     o.num_buckets = 8;
                     o.max_distance = 6;
                     o.table = p[0].data();
                     gpe_bias* b = nullptr;
                     EXPECT_EQ(gpe_bias_create_t5(&o, &b), GPE_OK) << gpe_last_error_message();
                     return b;
                   }});
  kinds.push_back({"fox", {params(s * h)}, [&](const auto& p) {
                     gpe_fox_options o = GPE_FOX_OPTIONS_INIT;
                     o.length = s;
                     o.num_heads = h;
                     o.gate_logits = p[0].data();
                     gpe_bias* b = nullptr;
                     EXPECT_EQ(gpe_bias_create_fox(&o, &b), GPE_OK) << gpe_last_error_message();
                     return b;
                   }});
  kinds.push_back({"grape_ap", {params(s * h * rank), params(s * h * rank)}, [&](const auto& p) {
                     gpe_grape_ap_options o = GPE_GRAPE_AP_OPTIONS_INIT;
                     o.length = s;
                     o.num_heads = h;
                     o.rank = rank;
                     o.w = p[0].data();
                     o.u = p[1].data();
                     gpe_bias* b = nullptr;
                     EXPECT_EQ(gpe_bias_create_grape_ap(&o, &b), GPE_OK) << gpe_last_error_message();
                     return b;
                   }});
  DLTensor tq = Tensor(q.data(), kDLFloat, 64, &shape), tk = Tensor(k.data(), kDLFloat, 64, &shape),
           tv = Tensor(v.data(), kDLFloat, 64, &shape), tg = Tensor(g.data(), kDLFloat, 64, &shape);
  for (Kind& kind : kinds) {
    SCOPED_TRACE(kind.name);
    auto loss = [&](const std::vector<std::vector<double>>& p) {
      BiasPtr b(kind.make(p), gpe_bias_destroy);
      gpe_attention_options o = GPE_ATTENTION_OPTIONS_INIT;
      o.causal = 1;
      o.bias = b.get();
      std::vector<double> out(q.size());
      DLTensor to = Tensor(out.data(), kDLFloat, 64, &shape);
      EXPECT_EQ(gpe_attention_forward(&o, &tq, &tk, &tv, &to, nullptr), GPE_OK)
          << gpe_last_error_message();
      double l = 0;
      for (size_t i = 0; i < out.size(); ++i) l += out[i] * g[i];
      return l;
    };
    BiasPtr b(kind.make(kind.p), gpe_bias_destroy);
    gpe_attention_options o = GPE_ATTENTION_OPTIONS_INIT;
    o.causal = 1;
    o.bias = b.get();
    std::vector<std::vector<int64_t>> gshapes;
    for (size_t which = 0; which < kind.p.size(); ++which) {
      gshapes.push_back(std::strcmp(kind.name, "alibi") == 0 ? std::vector<int64_t>{h}
                        : std::strcmp(kind.name, "t5") == 0 ? std::vector<int64_t>{8, h}
                        : std::strcmp(kind.name, "fox") == 0 ? std::vector<int64_t>{s, h}
                                                             : std::vector<int64_t>{s, h, rank});
    }
    // The bias parameters' gradients (float64, first filled with `fill`) from the
    // backward on (q_t, k_t, v_t, g_t).
    auto param_grads = [&](DLTensor* q_t, DLTensor* k_t, DLTensor* v_t, DLTensor* g_t, double fill,
                           std::vector<std::vector<double>>* grads) {
      for (const auto& p : kind.p) grads->emplace_back(p.size(), fill);
      DLTensor ga = Tensor((*grads)[0].data(), kDLFloat, 64, &gshapes[0]);
      DLTensor gb =
          grads->size() > 1 ? Tensor((*grads)[1].data(), kDLFloat, 64, &gshapes[1]) : DLTensor{};
      gpe_attention_param_grads pg = GPE_ATTENTION_PARAM_GRADS_INIT;
      pg.d_bias_a = &ga;
      pg.d_bias_b = grads->size() > 1 ? &gb : nullptr;
      return gpe_attention_backward_with_parameters(&o, q_t, k_t, v_t, nullptr, nullptr, g_t,
                                                    nullptr, nullptr, nullptr, &pg);
    };
    std::vector<std::vector<double>> grads;
    ASSERT_EQ(param_grads(&tq, &tk, &tv, &tg, -7.0 /* overwritten */, &grads), GPE_OK)
        << gpe_last_error_message();
    for (size_t which = 0; which < kind.p.size(); ++which) {
      for (size_t i = 0; i < kind.p[which].size(); ++i) {
        auto p = kind.p;
        p[which][i] += 1e-6;
        const double up = loss(p);
        p[which][i] -= 2e-6;
        const double down = loss(p);
        EXPECT_NEAR(grads[which][i], (up - down) / 2e-6, 1e-7) << "param " << which << "[" << i << "]";
      }
    }
    // float32 kernel against the float64 gradients.
    std::vector<float> q32(qf), k32(kf), v32(vf), g32(gf);
    DLTensor fq = Tensor(q32.data(), kDLFloat, 32, &shape), fk = Tensor(k32.data(), kDLFloat, 32, &shape),
             fv = Tensor(v32.data(), kDLFloat, 32, &shape), fg = Tensor(g32.data(), kDLFloat, 32, &shape);
    std::vector<std::vector<double>> g32s;
    ASSERT_EQ(param_grads(&fq, &fk, &fv, &fg, 0.0, &g32s), GPE_OK) << gpe_last_error_message();
    for (size_t which = 0; which < grads.size(); ++which) {
      double scale = 1e-30;
      for (double x : grads[which]) scale = std::max(scale, std::abs(x));
      for (size_t i = 0; i < grads[which].size(); ++i) {
        EXPECT_NEAR(g32s[which][i], grads[which][i], 2e-3 * scale) << "float32 " << which << "[" << i << "]";
      }
    }
  }
  // Bad input: a gradient without a bias, a wrong shape, d_bias_b for ALiBi, no struct.
  gpe_attention_options o = GPE_ATTENTION_OPTIONS_INIT;
  std::vector<double> buf(64);
  std::vector<int64_t> hs = {h}, wrong = {h + 1};
  DLTensor th = Tensor(buf.data(), kDLFloat, 64, &hs), tw = Tensor(buf.data(), kDLFloat, 64, &wrong);
  gpe_attention_param_grads bad = GPE_ATTENTION_PARAM_GRADS_INIT;
  bad.d_bias_a = &th;
  EXPECT_EQ(gpe_attention_backward_with_parameters(&o, &tq, &tk, &tv, nullptr, nullptr, &tg, nullptr,
                                                   nullptr, nullptr, &bad),
            GPE_ERROR_INVALID_ARGUMENT);
  BiasPtr alibi = MakeAlibi(h, GPE_ALIBI_CAUSAL);
  o.bias = alibi.get();
  bad.d_bias_a = &tw;
  EXPECT_EQ(gpe_attention_backward_with_parameters(&o, &tq, &tk, &tv, nullptr, nullptr, &tg, nullptr,
                                                   nullptr, nullptr, &bad),
            GPE_ERROR_INVALID_ARGUMENT);
  bad.d_bias_a = bad.d_bias_b = &th;
  EXPECT_EQ(gpe_attention_backward_with_parameters(&o, &tq, &tk, &tv, nullptr, nullptr, &tg, nullptr,
                                                   nullptr, nullptr, &bad),
            GPE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(gpe_attention_backward_with_parameters(&o, &tq, &tk, &tv, nullptr, nullptr, &tg, nullptr,
                                                   nullptr, nullptr, nullptr),
            GPE_ERROR_INVALID_ARGUMENT);
}

// GRAPE-M generator gradients through gpe_attention_backward_with_parameters: float64
// (exact reference) against central differences of L = <d_o, o> with the generators
// rebuilt from perturbed (a, b, omega); step 1e-6, tolerance 1e-7 as above. GQA 4/2,
// causal, KV-cache positions (5 queries over 9 keys).
TEST(AttentionAbi, GrapeMGeneratorGradientsMatchFiniteDifferences) {
  const int64_t sq = 5, sk = 9, hq = 4, hkv = 2, d = 6, m = 2;
  std::vector<int64_t> qs = {1, sq, hq, d}, ks = {1, sk, hkv, d};
  auto widen = [](const std::vector<float>& x) { return std::vector<double>(x.begin(), x.end()); };
  std::vector<double> q = widen(Random(sq * hq * d, 81)), k = widen(Random(sk * hkv * d, 82)),
                      v = widen(Random(sk * hkv * d, 83)), g = widen(Random(sq * hq * d, 84));
  std::vector<double> a = widen(Random(m * d, 85)), b = widen(Random(m * d, 86)), w = {0.7, -0.4};
  DLTensor tq = Tensor(q.data(), kDLFloat, 64, &qs), tk = Tensor(k.data(), kDLFloat, 64, &ks),
           tv = Tensor(v.data(), kDLFloat, 64, &ks), tg = Tensor(g.data(), kDLFloat, 64, &qs);
  auto make = [&](const std::vector<double>& pa, const std::vector<double>& pb,
                  const std::vector<double>& pw) {
    gpe_grape_m_options go = GPE_GRAPE_M_OPTIONS_INIT;
    go.dim = d;
    go.num_generators = m;
    go.a = pa.data();
    go.b = pb.data();
    go.omega = pw.data();
    gpe_grape_m* gm = nullptr;
    EXPECT_EQ(gpe_grape_m_create(&go, &gm), GPE_OK) << gpe_last_error_message();
    return std::unique_ptr<gpe_grape_m, void (*)(gpe_grape_m*)>(gm, gpe_grape_m_destroy);
  };
  auto loss = [&](const std::vector<double>& pa, const std::vector<double>& pb,
                  const std::vector<double>& pw) {
    auto gm = make(pa, pb, pw);
    gpe_attention_options o = GPE_ATTENTION_OPTIONS_INIT;
    o.causal = 1;
    o.grape_m = gm.get();
    std::vector<double> out(q.size());
    DLTensor to = Tensor(out.data(), kDLFloat, 64, &qs);
    EXPECT_EQ(gpe_attention_forward(&o, &tq, &tk, &tv, &to, nullptr), GPE_OK) << gpe_last_error_message();
    double l = 0;
    for (size_t i = 0; i < out.size(); ++i) l += out[i] * g[i];
    return l;
  };
  auto gm = make(a, b, w);
  gpe_attention_options o = GPE_ATTENTION_OPTIONS_INIT;
  o.causal = 1;
  o.grape_m = gm.get();
  std::vector<double> dq(q.size()), dk(k.size()), ga(m * d, -7.0), gb(m * d, -7.0), gw(m, -7.0);
  std::vector<int64_t> gs = {m, d}, ws = {m};
  DLTensor tdq = Tensor(dq.data(), kDLFloat, 64, &qs), tdk = Tensor(dk.data(), kDLFloat, 64, &ks);
  DLTensor tga = Tensor(ga.data(), kDLFloat, 64, &gs), tgb = Tensor(gb.data(), kDLFloat, 64, &gs),
           tgw = Tensor(gw.data(), kDLFloat, 64, &ws);
  gpe_attention_param_grads pg = GPE_ATTENTION_PARAM_GRADS_INIT;
  pg.d_grape_a = &tga;
  pg.d_grape_b = &tgb;
  pg.d_grape_omega = &tgw;
  ASSERT_EQ(gpe_attention_backward_with_parameters(&o, &tq, &tk, &tv, nullptr, nullptr, &tg, &tdq,
                                                   &tdk, nullptr, &pg),
            GPE_OK)
      << gpe_last_error_message();
  for (int which = 0; which < 3; ++which) {
    std::vector<double>& p = which == 0 ? a : which == 1 ? b : w;
    const std::vector<double>& got = which == 0 ? ga : which == 1 ? gb : gw;
    for (size_t i = 0; i < p.size(); ++i) {
      EXPECT_NEAR(got[i], CentralDifference(&p, i, 1e-6, [&] { return loss(a, b, w); }), 1e-7)
          << "parameter " << which << "[" << i << "]";
    }
  }
  // Without dk the generator gradients cannot be formed: a clear error.
  EXPECT_EQ(gpe_attention_backward_with_parameters(&o, &tq, &tk, &tv, nullptr, nullptr, &tg, &tdq,
                                                   nullptr, nullptr, &pg),
            GPE_ERROR_INVALID_ARGUMENT);
  // One-axis coordinates (q_axes / k_axes [tokens, 1]) are the positions the generators
  // act at, for the kernels and for these gradients alike: the same gradients as the
  // same positions given as q_positions / k_positions (the gradients used the default
  // positions before). The positions are chosen so that the causal mask, which reads the
  // int64 positions (the defaults in the axes form), is the same in both forms.
  std::vector<int64_t> qp = {30, 31, 32, 40, 41}, kp = {0, 5, 9, 12, 30, 31, 32, 40, 41};
  std::vector<int64_t> qp_shape = {sq}, kp_shape = {sk}, qa_shape = {sq, 1}, ka_shape = {sk, 1};
  DLTensor tqp = Tensor(qp.data(), kDLInt, 64, &qp_shape), tkp = Tensor(kp.data(), kDLInt, 64, &kp_shape);
  DLTensor tqa = Tensor(qp.data(), kDLInt, 64, &qa_shape), tka = Tensor(kp.data(), kDLInt, 64, &ka_shape);
  std::vector<double> ga1(m * d), gb1(m * d), gw1(m), ga2(m * d), gb2(m * d), gw2(m);
  for (int form = 0; form < 2; ++form) {
    gpe_attention_options of = o;
    if (form == 0) {
      of.q_positions = &tqp;
      of.k_positions = &tkp;
    } else {
      of.q_axes = &tqa;
      of.k_axes = &tka;
    }
    std::vector<double>& pa = form == 0 ? ga1 : ga2;
    std::vector<double>& pb = form == 0 ? gb1 : gb2;
    std::vector<double>& pw = form == 0 ? gw1 : gw2;
    DLTensor fa = Tensor(pa.data(), kDLFloat, 64, &gs), fb = Tensor(pb.data(), kDLFloat, 64, &gs),
             fw = Tensor(pw.data(), kDLFloat, 64, &ws);
    gpe_attention_param_grads pf = GPE_ATTENTION_PARAM_GRADS_INIT;
    pf.d_grape_a = &fa;
    pf.d_grape_b = &fb;
    pf.d_grape_omega = &fw;
    ASSERT_EQ(gpe_attention_backward_with_parameters(&of, &tq, &tk, &tv, nullptr, nullptr, &tg,
                                                     &tdq, &tdk, nullptr, &pf),
              GPE_OK)
        << form << ": " << gpe_last_error_message();
  }
  // Two runs of the same float64 arithmetic on the same positions: 1e-12 relative.
  for (int i = 0; i < m * d; ++i) {
    EXPECT_NEAR(ga2[i], ga1[i], 1e-12 * (1 + std::fabs(ga1[i]))) << i;
    EXPECT_NEAR(gb2[i], gb1[i], 1e-12 * (1 + std::fabs(gb1[i]))) << i;
  }
  for (int i = 0; i < m; ++i) EXPECT_NEAR(gw2[i], gw1[i], 1e-12 * (1 + std::fabs(gw1[i]))) << i;
}

TEST(AttentionAbi, EmptyKeysGiveEmptyRows) {
  const int64_t s = 3, h = 2, d = 8;
  std::vector<int64_t> qs = {1, s, h, d}, ks = {1, 0, h, d}, zero = {0, 0, 0, 0}, ls = {s, h};
  for (int bits : {32, 64}) {
    std::vector<double> q(s * h * d, 0.25), o(s * h * d, 9.0), lse(s * h, 9.0), dq(s * h * d, 9.0);
    std::vector<float> qf(q.begin(), q.end()), of(o.begin(), o.end()), lf(lse.begin(), lse.end()),
        dqf(dq.begin(), dq.end());
    void* qp = bits == 64 ? static_cast<void*>(q.data()) : qf.data();
    void* op = bits == 64 ? static_cast<void*>(o.data()) : of.data();
    void* lp = bits == 64 ? static_cast<void*>(lse.data()) : lf.data();
    void* dqp = bits == 64 ? static_cast<void*>(dq.data()) : dqf.data();
    DLTensor tq = Tensor(qp, kDLFloat, bits, &qs), tk = Tensor(nullptr, kDLFloat, bits, &ks, &zero),
             to = Tensor(op, kDLFloat, bits, &qs), tl = Tensor(lp, kDLFloat, bits, &ls),
             tdq = Tensor(dqp, kDLFloat, bits, &qs);
    gpe_attention_options opt = GPE_ATTENTION_OPTIONS_INIT;
    opt.rope_dim = d;
    ASSERT_EQ(gpe_attention_forward(&opt, &tq, &tk, &tk, &to, &tl), GPE_OK) << gpe_last_error_message();
    ASSERT_EQ(gpe_attention_backward(&opt, &tq, &tk, &tk, nullptr, nullptr, &tq, &tdq, nullptr, nullptr),
              GPE_OK)
        << gpe_last_error_message();
    for (int64_t i = 0; i < s * h * d; ++i) {
      EXPECT_EQ(bits == 64 ? o[i] : of[i], 0.0) << bits;
      EXPECT_EQ(bits == 64 ? dq[i] : dqf[i], 0.0) << bits;
    }
    for (int64_t i = 0; i < s * h; ++i) {
      EXPECT_EQ(bits == 64 ? lse[i] : lf[i], -std::numeric_limits<double>::infinity()) << bits;
    }
  }
}

// A dimension of size 1 is never stepped along, so its stride is the caller's to choose
// (PyTorch gives one tensor's size-1 dimensions strides that another's copy does not
// share): o, d_o and the gradients that differ from their partners (d_o, q, k, v) only
// there are taken, and every result equals the compact call's bit for bit (one kernel,
// the same offsets: tolerance 0). Batch 1 and one KV head: k, v, dk and dv differ on two
// dimensions. A stride that differs on a dimension of size above 1 is still refused.
TEST(AttentionAbi, StridesOfSizeOneDimensionsAreFree) {
  const int64_t s = 5, hq = 2, hkv = 1, d = 8;
  const std::vector<float> q = Random(s * hq * d, 31), k = Random(s * hkv * d, 32),
                           v = Random(s * hkv * d, 33), g = Random(s * hq * d, 34);
  std::vector<int64_t> qs = {1, s, hq, d}, ks = {1, s, hkv, d}, ls = {s, hq};
  // The same elements, other strides on the size-1 dimensions.
  std::vector<int64_t> q_odd = {12345, hq * d, d, 1}, q_zero = {0, hq * d, d, 1},
                       k_odd = {7, hkv * d, 999, 1};
  gpe_attention_options opt = GPE_ATTENTION_OPTIONS_INIT;
  opt.causal = 1;
  opt.rope_dim = d;
  struct Out {
    std::vector<float> o, lse, dq, dk, dv;
  };
  auto run = [&](bool odd) {
    Out r{std::vector<float>(q.size()), std::vector<float>(s * hq), std::vector<float>(q.size()),
          std::vector<float>(k.size()), std::vector<float>(v.size())};
    DLTensor tq = Tensor(q.data(), kDLFloat, 32, &qs), tk = Tensor(k.data(), kDLFloat, 32, &ks),
             tv = Tensor(v.data(), kDLFloat, 32, &ks), tg = Tensor(g.data(), kDLFloat, 32, &qs),
             to = Tensor(r.o.data(), kDLFloat, 32, &qs, odd ? &q_odd : nullptr),
             tl = Tensor(r.lse.data(), kDLFloat, 32, &ls),
             tdq = Tensor(r.dq.data(), kDLFloat, 32, &qs, odd ? &q_zero : nullptr),
             tdk = Tensor(r.dk.data(), kDLFloat, 32, &ks, odd ? &k_odd : nullptr),
             tdv = Tensor(r.dv.data(), kDLFloat, 32, &ks, odd ? &k_odd : nullptr);
    EXPECT_EQ(gpe_attention_forward(&opt, &tq, &tk, &tv, &to, &tl), GPE_OK) << gpe_last_error_message();
    EXPECT_EQ(gpe_attention_backward(&opt, &tq, &tk, &tv, &to, &tl, &tg, &tdq, &tdk, &tdv), GPE_OK)
        << gpe_last_error_message();
    return r;
  };
  const Out want = run(false), got = run(true);
  for (auto [a, b] : {std::pair{&want.o, &got.o}, {&want.lse, &got.lse}, {&want.dq, &got.dq},
                      {&want.dk, &got.dk}, {&want.dv, &got.dv}}) {
    ASSERT_EQ(a->size(), b->size());
    EXPECT_EQ(std::memcmp(a->data(), b->data(), a->size() * sizeof(float)), 0);
  }
  double norm = 0;  // the gradients are not all zero: the comparison compares something
  for (float x : want.dk) norm += double(x) * x;
  EXPECT_GT(norm, 1e-6);
  // A token stride of its own on o (padded rows): refused against d_o's.
  std::vector<float> padded(s * hq * 2 * d), dq(q.size());
  std::vector<int64_t> q_padded = {s * hq * 2 * d, hq * 2 * d, 2 * d, 1};
  DLTensor tq = Tensor(q.data(), kDLFloat, 32, &qs), tk = Tensor(k.data(), kDLFloat, 32, &ks),
           tv = Tensor(v.data(), kDLFloat, 32, &ks), tg = Tensor(g.data(), kDLFloat, 32, &qs),
           to = Tensor(padded.data(), kDLFloat, 32, &qs, &q_padded),
           tl = Tensor(want.lse.data(), kDLFloat, 32, &ls), tdq = Tensor(dq.data(), kDLFloat, 32, &qs);
  EXPECT_EQ(gpe_attention_backward(&opt, &tq, &tk, &tv, &to, &tl, &tg, &tdq, nullptr, nullptr),
            GPE_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(gpe::c_api_test::HasMessage("o and d_o must have the same strides"))
      << gpe_last_error_message();
}

// A batch of 2^39 sequences, every one empty (bshd [2^39, 0, h, d], data NULL): nothing to
// compute or write, so every entry point returns GPE_OK at once instead of walking the
// batch (the attention fuzzer found the float64 reference spending minutes on such a
// call). Covered: forward and backward (o / lse given or recomputed) in float32, bfloat16
// and float64, with RoPE, explicit (empty) positions, causal ALiBi, an algebraic grid over
// (empty) per-axis positions, Shaw tables, and the parameter gradients of
// gpe_attention_backward_with_parameters (bias and GRAPE-M), which must come back zero: no
// query means no loss term depends on them. Each call is timed: walking 2^39 sequences
// takes minutes even at one nanosecond each, so 20 s separates the two outcomes by far.
TEST(AttentionAbi, HugeBatchOfEmptySequencesReturnsAtOnce) {
  const int64_t batch = int64_t{1} << 39, h = 2, d = 4, kmax = 2;
  std::vector<int64_t> qs = {batch, 0, h, d}, ls = {0, h}, ps = {0}, axs = {0, 2};
  std::vector<int64_t> tab_shape = {2 * kmax + 1, d}, gs = {1, d}, ws = {1}, slope_shape = {h};
  auto timed = [](const char* what, const std::function<gpe_status()>& call) {
    const auto t0 = std::chrono::steady_clock::now();
    const gpe_status st = call();
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_EQ(st, GPE_OK) << what << ": " << gpe_last_error_message();
    EXPECT_LT(secs, 20.0) << what;
  };
  BiasPtr alibi = MakeAlibi(h, GPE_ALIBI_CAUSAL);
  const std::vector<double> ga0 = {0.3, -0.2, 0.1, 0.4}, gb0 = {-0.1, 0.5, 0.2, 0.3}, gw0 = {0.7};
  gpe_grape_m_options go = GPE_GRAPE_M_OPTIONS_INIT;
  go.dim = d;
  go.num_generators = 1;
  go.a = ga0.data();
  go.b = gb0.data();
  go.omega = gw0.data();
  gpe_grape_m* gm_raw = nullptr;
  ASSERT_EQ(gpe_grape_m_create(&go, &gm_raw), GPE_OK) << gpe_last_error_message();
  std::unique_ptr<gpe_grape_m, void (*)(gpe_grape_m*)> gm(gm_raw, gpe_grape_m_destroy);
  // Two 2x2 skew generators (axes * m = 2 * 2 = head_dim) for the algebraic grid.
  std::vector<double> skew = {0, 0.5, -0.5, 0, 0, -0.3, 0.3, 0};
  std::vector<int64_t> skew_shape = {2, 2, 2};
  DLTensor tskew = Tensor(skew.data(), kDLFloat, 64, &skew_shape);
  std::vector<double> key_table(5 * d, 0.25), value_table(5 * d, -0.5);
  DLTensor tkt = Tensor(key_table.data(), kDLFloat, 64, &tab_shape),
           tvt = Tensor(value_table.data(), kDLFloat, 64, &tab_shape);
  DLTensor tpos = Tensor(nullptr, kDLInt, 64, &ps), taxes = Tensor(nullptr, kDLInt, 64, &axs);
  struct Dt {
    DLDataTypeCode code;
    int bits;
    int lse_bits;
  };
  for (const Dt dt : {Dt{kDLFloat, 32, 32}, Dt{kDLBfloat, 16, 32}, Dt{kDLFloat, 64, 64}}) {
    SCOPED_TRACE(dt.bits == 64 ? "float64" : dt.bits == 32 ? "float32" : "bfloat16");
    DLTensor x = Tensor(nullptr, dt.code, dt.bits, &qs);
    DLTensor o = x, g = x, dq = x, dk = x, dv = x;  // distinct structs, all empty
    DLTensor lse = Tensor(nullptr, kDLFloat, dt.lse_bits, &ls);
    std::vector<gpe_attention_options> variants;
    gpe_attention_options base = GPE_ATTENTION_OPTIONS_INIT;
    variants.push_back(base);
    gpe_attention_options rope = base;
    rope.rope_dim = d;
    rope.causal = 1;
    rope.bias = alibi.get();
    rope.q_positions = rope.k_positions = &tpos;
    variants.push_back(rope);
    gpe_attention_options grid = base;
    grid.algebraic_grid = &tskew;
    grid.q_axes = grid.k_axes = &taxes;
    variants.push_back(grid);
    gpe_attention_options shaw = base;
    shaw.shaw_max_distance = kmax;
    shaw.shaw_key_table = &tkt;
    shaw.shaw_value_table = &tvt;
    variants.push_back(shaw);
    for (size_t i = 0; i < variants.size(); ++i) {
      SCOPED_TRACE(i);
      const gpe_attention_options& opt = variants[i];
      timed("forward", [&] { return gpe_attention_forward(&opt, &x, &x, &x, &o, &lse); });
      timed("backward (recomputed o)", [&] {
        return gpe_attention_backward(&opt, &x, &x, &x, nullptr, nullptr, &g, &dq, &dk, &dv);
      });
      timed("backward (given o, lse)", [&] {
        return gpe_attention_backward(&opt, &x, &x, &x, &o, &lse, &g, &dq, &dk, &dv);
      });
    }
    // Parameter gradients: prefilled with 9, overwritten with 0.
    std::vector<double> gkt(5 * d, 9.0), gvt(5 * d, 9.0), gslope(h, 9.0), gga(d, 9.0),
        ggb(d, 9.0), ggw(1, 9.0);
    DLTensor tgkt = Tensor(gkt.data(), kDLFloat, 64, &tab_shape),
             tgvt = Tensor(gvt.data(), kDLFloat, 64, &tab_shape),
             tslope = Tensor(gslope.data(), kDLFloat, 64, &slope_shape),
             tga = Tensor(gga.data(), kDLFloat, 64, &gs), tgb = Tensor(ggb.data(), kDLFloat, 64, &gs),
             tgw = Tensor(ggw.data(), kDLFloat, 64, &ws);
    timed("backward_v2 (Shaw gradients)", [&] {
      return gpe_attention_backward_v2(&variants[3], &x, &x, &x, nullptr, nullptr, &g, &dq, &dk,
                                       &dv, &tgkt, &tgvt);
    });
    for (size_t j = 0; j < gkt.size(); ++j) {
      EXPECT_EQ(gkt[j], 0.0) << j;
      EXPECT_EQ(gvt[j], 0.0) << j;
    }
    gpe_attention_options params = base;
    params.bias = alibi.get();
    params.grape_m = gm.get();
    gpe_attention_param_grads pg = GPE_ATTENTION_PARAM_GRADS_INIT;
    pg.d_bias_a = &tslope;
    pg.d_grape_a = &tga;
    pg.d_grape_b = &tgb;
    pg.d_grape_omega = &tgw;
    timed("backward_with_parameters", [&] {
      return gpe_attention_backward_with_parameters(&params, &x, &x, &x, nullptr, nullptr, &g,
                                                    &dq, &dk, &dv, &pg);
    });
    for (double e : gslope) EXPECT_EQ(e, 0.0);
    for (size_t j = 0; j < gga.size(); ++j) {
      EXPECT_EQ(gga[j], 0.0) << j;
      EXPECT_EQ(ggb[j], 0.0) << j;
    }
    EXPECT_EQ(ggw[0], 0.0);
  }
  // A paged cache of no pages (k, v [0 pages, page_size 1, h, d], block_table [batch, 0]):
  // the page check walked the 2^39 sequences (~45 minutes) before the empty call returned.
  std::vector<int64_t> pages = {0, 1, h, d}, table_shape = {batch, 0};
  DLTensor x = Tensor(nullptr, kDLFloat, 32, &qs), o = x;
  DLTensor kp = Tensor(nullptr, kDLFloat, 32, &pages);
  DLTensor lse = Tensor(nullptr, kDLFloat, 32, &ls);
  DLTensor table = Tensor(nullptr, kDLInt, 64, &table_shape);
  gpe_attention_options paged = GPE_ATTENTION_OPTIONS_INIT;
  paged.block_table = &table;
  timed("paged forward", [&] { return gpe_attention_forward(&paged, &x, &kp, &kp, &o, &lse); });
}

TEST(AttentionAbi, RejectsBadInput) {
  const int64_t s = 8, h = 2, d = 8;
  std::vector<float> x(s * h * d, 0.5f), o(s * h * d);
  std::vector<int64_t> b4 = {1, s, h, d}, b4h3 = {1, s, 3, d}, bad_d = {1, s, h, 6};
  DLTensor tq = Tensor(x.data(), kDLFloat, 32, &b4), to = Tensor(o.data(), kDLFloat, 32, &b4);
  gpe_attention_options opt = GPE_ATTENTION_OPTIONS_INIT;
  ASSERT_EQ(gpe_attention_forward(&opt, &tq, &tq, &tq, &to, nullptr), GPE_OK);
  auto fails = [&](const gpe_attention_options& op, const DLTensor* q, const DLTensor* k,
                   const DLTensor* v, DLTensor* out, const char* what) {
    const gpe_status st = gpe_attention_forward(&op, q, k, v, out, nullptr);
    EXPECT_NE(st, GPE_OK) << what;
    EXPECT_GT(std::strlen(gpe_last_error_message()), 0u) << what;
  };
  DLTensor tq3 = Tensor(x.data(), kDLFloat, 32, &b4h3);
  fails(opt, &tq3, &tq, &tq, &to, "heads_q not a multiple of heads_kv");
  DLTensor tbd = Tensor(x.data(), kDLFloat, 32, &bad_d);
  fails(opt, &tq, &tbd, &tbd, &to, "head_dim mismatch");
  fails(opt, &tq, &tq, &tq, &tq, "o aliases q");
  fails(opt, nullptr, &tq, &tq, &to, "null q");
  gpe_attention_options b = opt;
  b.rope_dim = 3;
  fails(b, &tq, &tq, &tq, &to, "odd rope_dim");
  b = opt;
  b.rope_dim = 16;
  fails(b, &tq, &tq, &tq, &to, "rope_dim > head_dim");
  b = opt;
  b.softmax_scale = std::numeric_limits<double>::quiet_NaN();
  fails(b, &tq, &tq, &tq, &to, "NaN scale");
  b = opt;
  b.causal = 2;
  fails(b, &tq, &tq, &tq, &to, "causal not 0/1");
  {
    gpe_alibi_options ao = GPE_ALIBI_OPTIONS_INIT;
    ao.num_heads = 3;  // the attention has 2 query heads
    gpe_bias* alibi = nullptr;
    ASSERT_EQ(gpe_bias_create_alibi(&ao, &alibi), GPE_OK);
    b = opt;
    b.bias = alibi;
    fails(b, &tq, &tq, &tq, &to, "bias head count differs from heads_q");
    gpe_bias_destroy(alibi);
  }
  b = opt;
  b.struct_size = sizeof(gpe_attention_options) + 8;
  EXPECT_EQ(gpe_attention_forward(&b, &tq, &tq, &tq, &to, nullptr), GPE_ERROR_VERSION_MISMATCH);
  // Packed layout with non-monotonic cumulative lengths, and only one of the pair.
  std::vector<int64_t> t3 = {s, h, d}, cu_shape = {3}, cu = {0, 5, 3};
  DLTensor pq = Tensor(x.data(), kDLFloat, 32, &t3), po = Tensor(o.data(), kDLFloat, 32, &t3);
  DLTensor tcu = Tensor(cu.data(), kDLInt, 64, &cu_shape);
  b = opt;
  b.cu_seqlens_q = b.cu_seqlens_k = &tcu;
  fails(b, &pq, &pq, &pq, &po, "non-monotonic cu_seqlens");
  b.cu_seqlens_k = nullptr;
  fails(b, &pq, &pq, &pq, &po, "cu_seqlens_q without cu_seqlens_k");
  // A float16 tensor is not accepted.
  std::vector<uint16_t> half(s * h * d);
  DLTensor th = Tensor(half.data(), kDLFloat, 16, &b4);
  fails(opt, &th, &th, &th, &to, "float16");
}

}  // namespace
