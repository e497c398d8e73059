// Tests of the reference attention oracle against a second, more direct implementation
// (full score matrix per head in long double from the published formulas), structural
// equivalences (GQA, varlen, KV cache, relativity) and central finite differences.
#include "attention/reference.h"

#include <Eigen/Dense>
#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "attention/descriptor.h"
#include "attention/test_util.h"
#include "encodings/sequence/algebraic.h"
#include "encodings/sequence/bias.h"
#include "encodings/sequence/grape_a.h"
#include "encodings/sequence/grape_m.h"
#include "encodings/sequence/relative.h"
#include "encodings/sequence/rope.h"
#include "gtest/gtest.h"

namespace gpe {
namespace attention {
namespace {

using encodings::sequence::AlgebraicSequence;
using encodings::sequence::AlibiBias;
using encodings::sequence::AlibiForm;
using encodings::sequence::CoordinatePlane;
using encodings::sequence::DefaultRopeFrequencies;
using encodings::sequence::FoxBias;
using encodings::sequence::GrapeALift;
using encodings::sequence::GrapeMCommutingPlanes;
using encodings::sequence::GrapeMProduct;
using encodings::sequence::Rank2Generator;
using encodings::sequence::Rope;
using encodings::sequence::RopeOptions;
using encodings::sequence::T5BucketConfig;
using encodings::sequence::T5RelativeBias;
using test::Bshd;
using test::MakeAxesRope;
using test::RandomSkew;
using test::RandomUniform;
using test::Thd;

// RoPE rotation matrix written from Su et al. eq. 15 (half-split pairs (i, i + r/2),
// theta_i = base^(-2i/r)), independent of rope.cc.
Eigen::MatrixXd RopeMatrix(int64_t d, int64_t r, double base, int64_t p) {
  Eigen::MatrixXd m = Eigen::MatrixXd::Identity(d, d);
  for (int64_t i = 0; i < r / 2; ++i) {
    const long double theta = std::pow(static_cast<long double>(base), -2.0L * i / r);
    const long double ang = std::fmod(static_cast<long double>(p) * theta, 2.0L * M_PIl);
    const double c = static_cast<double>(std::cos(ang)), s = static_cast<double>(std::sin(ang));
    m(i, i) = c;
    m(i, i + r / 2) = -s;
    m(i + r / 2, i) = s;
    m(i + r / 2, i + r / 2) = c;
  }
  return m;
}

// The direct oracle for ONE sequence: packed [tokens, heads, d] inputs, full lq x lk
// score matrix per head, softmax in long double.
struct DirectSpec {
  DirectSpec(int64_t q_heads, int64_t kv_heads, int64_t dim) : hq(q_heads), hkv(kv_heads), d(dim) {}
  int64_t hq, hkv, d;
  bool causal = false;
  double scale = 0;
  std::function<Eigen::MatrixXd(int64_t)> rq, rk;         // empty: identity
  std::function<double(int64_t, int64_t, int64_t)> bias;  // (head, pos_q, pos_k)
  double locality = 0;                                    // 0: off
  int64_t left = -1, right = -1;                          // window, -1 unbounded
  double softcap = 0;                                     // 0: off
  std::vector<double> sinks;                              // per head; empty: none
  // Written from the definitions (descriptor.h): causal, then |window| bounds.
  bool Masked(int64_t i, int64_t j) const {
    return (causal && j > i) || (left >= 0 && i - j > left) || (right >= 0 && j - i > right);
  }
};
std::vector<double> Direct(const DirectSpec& s, const std::vector<double>& q,
                           const std::vector<double>& k, const std::vector<double>& v,
                           const std::vector<int64_t>& pq, const std::vector<int64_t>& pk) {
  const int64_t lq = pq.size(), lk = pk.size(), d = s.d;
  std::vector<double> o(lq * s.hq * d, 0.0);
  for (int64_t h = 0; h < s.hq; ++h) {
    const int64_t g = h * s.hkv / s.hq;
    Eigen::MatrixXd qr(lq, d), kr(lk, d);
    for (int64_t i = 0; i < lq; ++i) {
      Eigen::VectorXd x = Eigen::Map<const Eigen::VectorXd>(&q[(i * s.hq + h) * d], d);
      qr.row(i) = (s.rq ? Eigen::VectorXd(s.rq(pq[i]) * x) : x).transpose();
    }
    for (int64_t j = 0; j < lk; ++j) {
      Eigen::VectorXd x = Eigen::Map<const Eigen::VectorXd>(&k[(j * s.hkv + g) * d], d);
      kr.row(j) = (s.rk ? Eigen::VectorXd(s.rk(pk[j]) * x) : x).transpose();
    }
    for (int64_t i = 0; i < lq; ++i) {
      std::vector<long double> sc(lk);
      long double m = -std::numeric_limits<long double>::infinity();
      for (int64_t j = 0; j < lk; ++j) {
        if (s.Masked(pq[i], pk[j])) continue;
        long double dot = 0;
        for (int64_t e = 0; e < d; ++e) dot += (long double)qr(i, e) * kr(j, e);
        long double a = s.locality > 0 ? std::pow((long double)s.locality,
                                                  (long double)std::llabs(pq[i] - pk[j]))
                                       : 1.0L;
        long double x = a * s.scale * dot;
        if (s.softcap > 0) x = s.softcap * std::tanh(x / s.softcap);  // Gemma 2
        sc[j] = x + (s.bias ? s.bias(h, pq[i], pk[j]) : 0.0);
        m = std::max(m, sc[j]);
      }
      if (std::isinf(m)) continue;
      // The sink's e^z joins the denominator only (gpt-oss).
      long double z = s.sinks.empty() ? 0.0L : std::exp((long double)s.sinks[h] - m);
      for (int64_t j = 0; j < lk; ++j) {
        if (s.Masked(pq[i], pk[j])) continue;
        z += std::exp(sc[j] - m);
      }
      for (int64_t e = 0; e < d; ++e) {
        long double acc = 0;
        for (int64_t j = 0; j < lk; ++j) {
          if (s.Masked(pq[i], pk[j])) continue;
          acc += std::exp(sc[j] - m) / z * v[(j * s.hkv + g) * d + e];
        }
        o[(i * s.hq + h) * d + e] = static_cast<double>(acc);
      }
    }
  }
  return o;
}

double MaxAbsDiff(const std::vector<double>& a, const std::vector<double>& b) {
  EXPECT_EQ(a.size(), b.size());
  double m = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}

Rope MakeRope(int64_t d, int64_t r) {
  RopeOptions opt;
  opt.head_dim = d;
  opt.rotary_dim = r;
  opt.pairing = group::PlanePairing::kHalfSplit;
  auto rope = Rope::Create(opt, *DefaultRopeFrequencies(r, 100.0));
  EXPECT_TRUE(rope.ok()) << rope.status();
  return *rope;
}

// All features at once (RoPE on 6 of 8 dims, ALiBi, locality, GQA, causal and not,
// padded non-contiguous strides) against the direct oracle.
TEST(ReferenceForward, MatchesDirectOracleWithAllDescriptors) {
  std::mt19937_64 rng(1);
  const int64_t batch = 2, lq = 5, lk = 7, hq = 4, hkv = 2, d = 8;
  Rope rope = MakeRope(d, 6);
  RopeRowTransform tr(rope);
  auto alibi = AlibiBias::CreateStandard(hq, AlibiForm::kCausal);
  ASSERT_TRUE(alibi.ok());
  for (bool causal : {false, true}) {
    AttentionArgs a = Bshd(batch, lq, lk, hq, hkv, d);
    // Padded strides: 3 spare elements per head row, 5 per token, 11 per sequence.
    a.q = a.o = Strides{lq * (hq * (d + 3) + 5) + 11, hq * (d + 3) + 5, d + 3};
    a.k = a.v = Strides{lk * (hkv * (d + 3) + 5) + 11, hkv * (d + 3) + 5, d + 3};
    a.causal = causal;
    a.q_transform = a.k_transform = &tr;
    a.biases = {&*alibi};
    a.locality = 0.9;
    std::vector<int64_t> pq, pk;
    for (int64_t b = 0; b < batch; ++b) {
      for (int64_t t = 0; t < lq; ++t) pq.push_back(100 * b + 2 + t);
      for (int64_t t = 0; t < lk; ++t) pk.push_back(100 * b + t);
    }
    a.q_positions = pq;
    a.k_positions = pk;
    const size_t nq = batch * a.q.batch, nk = batch * a.k.batch;
    std::vector<double> q = RandomUniform(nq, &rng), k = RandomUniform(nk, &rng),
                        v = RandomUniform(nk, &rng);
    std::vector<double> o(nq, 7.0), lse(batch * lq * hq);
    ASSERT_TRUE(
        ReferenceForward<double>(a, q.data(), k.data(), v.data(), o.data(), lse.data()).ok());
    DirectSpec s(hq, hkv, d);
    s.causal = causal;
    s.scale = 1.0 / std::sqrt(8.0);
    s.rq = s.rk = [&](int64_t p) { return RopeMatrix(d, 6, 100.0, p); };
    const std::vector<double> slopes(alibi->slopes().begin(), alibi->slopes().end());
    s.bias = [&](int64_t h, int64_t i, int64_t j) { return -slopes[h] * double(i - j); };
    s.locality = 0.9;
    for (int64_t b = 0; b < batch; ++b) {
      auto pack = [&](const std::vector<double>& x, const Strides& st, int64_t len, int64_t hh) {
        std::vector<double> out;
        for (int64_t t = 0; t < len; ++t)
          for (int64_t h = 0; h < hh; ++h)
            for (int64_t e = 0; e < d; ++e)
              out.push_back(x[b * st.batch + t * st.token + h * st.head + e]);
        return out;
      };
      std::vector<int64_t> pqb(pq.begin() + b * lq, pq.begin() + (b + 1) * lq);
      std::vector<int64_t> pkb(pk.begin() + b * lk, pk.begin() + (b + 1) * lk);
      std::vector<double> want =
          Direct(s, pack(q, a.q, lq, hq), pack(k, a.k, lk, hkv), pack(v, a.v, lk, hkv), pqb, pkb);
      // Both sides accumulate in >= double precision from the same inputs; the only
      // differences are summation order and cos/sin rounding (~1e-16 relative) on O(1)
      // values, so 1e-13 leaves ample margin while catching any formula error.
      EXPECT_LT(MaxAbsDiff(pack(o, a.o, lq, hq), want), 1e-13) << "causal " << causal;
    }
    // Padding between rows is never written.
    EXPECT_EQ(o[d], 7.0);
    for (double x : lse) EXPECT_TRUE(std::isfinite(x));
  }
}

// Sliding windows (left, right, both, with and without causal), Gemma 2's softcap and
// per-head sinks, with RoPE, ALiBi and GQA, against the direct oracle; the window
// compared for positions near the int64 extremes too.
TEST(ReferenceForward, WindowSoftcapAndSinksMatchDirectOracle) {
  std::mt19937_64 rng(11);
  const int64_t lq = 6, lk = 9, hq = 4, hkv = 2, d = 8;
  Rope rope = MakeRope(d, 8);
  RopeRowTransform tr(rope);
  auto alibi = AlibiBias::CreateStandard(hq, AlibiForm::kSymmetric);
  ASSERT_TRUE(alibi.ok());
  const std::vector<float> sinks = {0.5f, -1.0f, 2.0f, -std::numeric_limits<float>::infinity()};
  struct Case {
    bool causal;
    int64_t left, right;
    double softcap;
    bool sinks;
  };
  const Case cases[] = {{false, 2, -1, 0, false}, {false, -1, 1, 0, false}, {false, 1, 2, 0, false},
                        {true, 3, -1, 0, false},  {true, 0, -1, 0, false},  {true, 2, 5, 0, false},
                        {false, -1, -1, 0.8, false}, {true, -1, -1, 0, true},
                        {true, 2, -1, 0.8, true}, {false, 1, 1, 0.5, true}};
  for (const Case& c : cases) {
    AttentionArgs a = Bshd(1, lq, lk, hq, hkv, d);
    a.causal = c.causal;
    a.window_left = c.left;
    a.window_right = c.right;
    if (c.softcap > 0) a.softcap = c.softcap;
    if (c.sinks) a.sinks = sinks;
    a.q_transform = a.k_transform = &tr;
    a.biases = {&*alibi};
    const std::vector<double> q = RandomUniform(lq * hq * d, &rng, -3.0, 3.0),
                              k = RandomUniform(lk * hkv * d, &rng, -3.0, 3.0),
                              v = RandomUniform(lk * hkv * d, &rng);
    DirectSpec s(hq, hkv, d);
    s.causal = c.causal;
    s.left = c.left;
    s.right = c.right;
    s.softcap = c.softcap;
    if (c.sinks) s.sinks.assign(sinks.begin(), sinks.end());
    s.scale = 1.0 / std::sqrt(8.0);
    s.rq = s.rk = [&](int64_t p) { return RopeMatrix(d, 8, 100.0, p); };
    const std::vector<double> slopes(alibi->slopes().begin(), alibi->slopes().end());
    s.bias = [&](int64_t h, int64_t i, int64_t j) { return -slopes[h] * std::abs(double(i - j)); };
    // Queries the last lq of lk positions (the default), then the same around 2^62.
    for (int64_t shift : {int64_t{0}, int64_t{1} << 62}) {
      std::vector<int64_t> pq(lq), pk(lk);
      for (int64_t t = 0; t < lk; ++t) pk[t] = shift + t;
      for (int64_t t = 0; t < lq; ++t) pq[t] = shift + lk - lq + t;
      a.q_positions = pq;
      a.k_positions = pk;
      std::vector<double> o(q.size()), lse(lq * hq);
      ASSERT_TRUE(ReferenceForward<double>(a, q.data(), k.data(), v.data(), o.data(), lse.data()).ok());
      std::vector<int64_t> rel_q(lq), rel_k(lk);  // RoPE and ALiBi are relative
      for (int64_t t = 0; t < lq; ++t) rel_q[t] = pq[t] - shift;
      for (int64_t t = 0; t < lk; ++t) rel_k[t] = pk[t] - shift;
      if (shift != 0) {  // RoPE at 2^62 is another rotation: compare the mask alone there
        a.q_transform = a.k_transform = nullptr;
        a.biases.clear();
        std::vector<double> o2(q.size());
        ASSERT_TRUE(ReferenceForward<double>(a, q.data(), k.data(), v.data(), o2.data()).ok());
        a.q_positions = rel_q;
        a.k_positions = rel_k;
        std::vector<double> o3(q.size());
        ASSERT_TRUE(ReferenceForward<double>(a, q.data(), k.data(), v.data(), o3.data()).ok());
        // The same masks at both offsets: identical arithmetic, identical results.
        EXPECT_EQ(o2, o3) << "causal " << c.causal << " window " << c.left << "," << c.right;
        a.q_transform = a.k_transform = &tr;
        a.biases = {&*alibi};
        continue;
      }
      const std::vector<double> want = Direct(s, q, k, v, rel_q, rel_k);
      // As MatchesDirectOracleWithAllDescriptors: summation order and rounding only.
      EXPECT_LT(MaxAbsDiff(o, want), 1e-13)
          << "causal " << c.causal << " window " << c.left << "," << c.right << " cap "
          << c.softcap << " sinks " << c.sinks;
      // A row with no allowed key has lse = its head's sink (or -inf): none here is empty
      // (the window always holds the diagonal), so every lse is finite.
      for (double x : lse) EXPECT_TRUE(std::isfinite(x));
    }
  }
}

// SDPA's attn_mask: an additive mask broadcast over the batch, and a boolean mask per head
// (keys masked as -inf), against the direct oracle whose bias is the mask.
TEST(ReferenceForward, ScoreMasksMatchDirectOracle) {
  std::mt19937_64 rng(13);
  const int64_t batch = 2, l = 6, hq = 2, d = 4;
  const std::vector<double> add = RandomUniform(hq * l * l, &rng, -2.0, 2.0);
  std::vector<float> addf(add.begin(), add.end());
  std::vector<uint8_t> allow(batch * hq * l * l);
  std::bernoulli_distribution keep(0.6);
  for (uint8_t& x : allow) x = keep(rng) ? 1 : 0;
  for (bool boolean : {false, true}) {
    AttentionArgs a = Bshd(batch, l, l, hq, hq, d);
    if (boolean) {
      a.mask.allowed = allow.data();
      a.mask.batch = hq * l * l;
    } else {
      a.mask.additive = addf.data();  // batch stride 0: one mask for both sequences
    }
    a.mask.head = l * l;
    a.mask.query = l;
    const std::vector<double> q = RandomUniform(batch * l * hq * d, &rng),
                              k = RandomUniform(batch * l * hq * d, &rng),
                              v = RandomUniform(batch * l * hq * d, &rng);
    std::vector<double> o(q.size());
    ASSERT_TRUE(ReferenceForward<double>(a, q.data(), k.data(), v.data(), o.data()).ok());
    for (int64_t b = 0; b < batch; ++b) {
      DirectSpec s(hq, hq, d);
      s.scale = 0.5;
      s.bias = [&](int64_t h, int64_t i, int64_t j) -> double {
        if (!boolean) return double(addf[(h * l + i) * l + j]);
        return allow[((b * hq + h) * l + i) * l + j] ? 0.0 : -std::numeric_limits<double>::infinity();
      };
      const size_t n = l * hq * d;
      std::vector<double> qb(q.begin() + b * n, q.begin() + (b + 1) * n),
          kb(k.begin() + b * n, k.begin() + (b + 1) * n), vb(v.begin() + b * n, v.begin() + (b + 1) * n);
      std::vector<int64_t> pos(l);
      for (int64_t t = 0; t < l; ++t) pos[t] = t;
      const std::vector<double> want = Direct(s, qb, kb, vb, pos, pos);
      std::vector<double> got(o.begin() + b * n, o.begin() + (b + 1) * n);
      // As MatchesDirectOracleWithAllDescriptors (rows fully masked are 0 in both).
      EXPECT_LT(MaxAbsDiff(got, want), 1e-13) << "boolean " << boolean << " b " << b;
    }
  }
  AttentionArgs bad = Bshd(1, 2, 2, 1, 1, 4);
  bad.mask.additive = addf.data();
  bad.mask.allowed = allow.data();
  EXPECT_FALSE(ValidateAttention(bad).ok());
  bad.mask.allowed = nullptr;
  bad.mask.query = -1;
  EXPECT_FALSE(ValidateAttention(bad).ok());
  bad.mask.query = std::numeric_limits<int64_t>::max();
  EXPECT_FALSE(ValidateAttention(bad).ok());  // the offset of query 1 overflows
}

// Sinks: lse = ln(e^z + sum e^s) for a row, z for a row with no allowed key; NaN and +inf
// sinks make their head's rows NaN, -inf is no sink.
TEST(ReferenceForward, SinkEdgeCases) {
  const int64_t lq = 3, lk = 3, hq = 4, d = 2;
  AttentionArgs a = Bshd(1, lq, lk, hq, hq, d);
  const std::vector<int64_t> pq = {0, 1, 2}, pk = {1, 2, 3};  // query 0 sees no key
  a.q_positions = pq;
  a.k_positions = pk;
  a.causal = true;
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const std::vector<float> sinks = {0.25f, nan, inf, -inf};
  a.sinks = sinks;
  std::vector<double> q(lq * hq * d, 0.0), k(lk * hq * d, 0.0), v(lk * hq * d, 1.0);
  std::vector<double> o(q.size()), lse(lq * hq);
  ASSERT_TRUE(ReferenceForward<double>(a, q.data(), k.data(), v.data(), o.data(), lse.data()).ok());
  for (int64_t i = 0; i < lq; ++i) {
    // Head 0: scores 0 for the i allowed keys, so lse = ln(e^0.25 + i), o = i / (e^0.25 + i).
    const double den = std::exp(0.25) + double(i);
    EXPECT_NEAR(lse[i * hq + 0], std::log(den), 1e-15) << i;
    EXPECT_NEAR(o[(i * hq + 0) * d], double(i) / den, 1e-15) << i;
    for (int h : {1, 2}) {
      EXPECT_TRUE(std::isnan(lse[i * hq + h])) << i << " " << h;
      EXPECT_TRUE(std::isnan(o[(i * hq + h) * d])) << i << " " << h;
    }
    // Head 3: no sink; the empty row 0 has o = 0, lse = -inf.
    EXPECT_EQ(lse[i * hq + 3], i == 0 ? -inf : std::log(double(i))) << i;
    EXPECT_EQ(o[(i * hq + 3) * d], i == 0 ? 0.0 : 1.0) << i;
  }
}

// Float inputs go through the same double path and are rounded once on output.
TEST(ReferenceForward, FloatMatchesDouble) {
  std::mt19937_64 rng(2);
  AttentionArgs a = Bshd(1, 6, 6, 2, 1, 4);
  a.causal = true;
  std::vector<double> q = RandomUniform(24 * 2, &rng), k = RandomUniform(24, &rng),
                      v = RandomUniform(24, &rng);
  std::vector<float> qf(q.begin(), q.end()), kf(k.begin(), k.end()), vf(v.begin(), v.end());
  std::vector<double> o(48), qr(qf.begin(), qf.end()), kr(kf.begin(), kf.end()),
      vr(vf.begin(), vf.end());
  std::vector<float> of(48);
  ASSERT_TRUE(ReferenceForward<double>(a, qr.data(), kr.data(), vr.data(), o.data()).ok());
  ASSERT_TRUE(ReferenceForward<float>(a, qf.data(), kf.data(), vf.data(), of.data()).ok());
  // Same (float-rounded) inputs; the only difference is the final rounding to float:
  // |o| <= 1, so half an ulp is <= 6e-8.
  for (int i = 0; i < 48; ++i) EXPECT_NEAR(of[i], o[i], 6e-8);
}

// Grouped-query attention equals multi-head attention with each kv head repeated over
// its group of q heads; dk/dv of a shared head are the sums over the group.
TEST(ReferenceForward, GqaEqualsRepeatedKvHeads) {
  std::mt19937_64 rng(3);
  const int64_t l = 5, hq = 6, hkv = 2, d = 4, grp = hq / hkv;
  AttentionArgs g = Bshd(1, l, l, hq, hkv, d), m = Bshd(1, l, l, hq, hq, d);
  g.causal = m.causal = true;
  std::vector<double> q = RandomUniform(l * hq * d, &rng), k = RandomUniform(l * hkv * d, &rng),
                      v = RandomUniform(l * hkv * d, &rng), dout = RandomUniform(l * hq * d, &rng);
  std::vector<double> kr(l * hq * d), vr(l * hq * d);
  for (int64_t t = 0; t < l; ++t)
    for (int64_t h = 0; h < hq; ++h)
      for (int64_t e = 0; e < d; ++e) {
        kr[(t * hq + h) * d + e] = k[(t * hkv + h / grp) * d + e];
        vr[(t * hq + h) * d + e] = v[(t * hkv + h / grp) * d + e];
      }
  std::vector<double> og(l * hq * d), om(l * hq * d);
  ASSERT_TRUE(ReferenceForward<double>(g, q.data(), k.data(), v.data(), og.data()).ok());
  ASSERT_TRUE(ReferenceForward<double>(m, q.data(), kr.data(), vr.data(), om.data()).ok());
  // Identical arithmetic per (row, head): bit-identical.
  EXPECT_EQ(MaxAbsDiff(og, om), 0.0);
  std::vector<double> dqg(q.size()), dkg(k.size()), dvg(v.size()), dqm(q.size()), dkm(kr.size()),
      dvm(vr.size());
  ASSERT_TRUE(ReferenceBackward<double>(g, q.data(), k.data(), v.data(), dout.data(), dqg.data(),
                                        dkg.data(), dvg.data())
                  .ok());
  ASSERT_TRUE(ReferenceBackward<double>(m, q.data(), kr.data(), vr.data(), dout.data(), dqm.data(),
                                        dkm.data(), dvm.data())
                  .ok());
  EXPECT_LT(MaxAbsDiff(dqg, dqm), 1e-15);
  for (int64_t t = 0; t < l; ++t)
    for (int64_t g2 = 0; g2 < hkv; ++g2)
      for (int64_t e = 0; e < d; ++e) {
        double sk = 0, sv = 0;
        for (int64_t r = 0; r < grp; ++r) {
          sk += dkm[(t * hq + g2 * grp + r) * d + e];
          sv += dvm[(t * hq + g2 * grp + r) * d + e];
        }
        // Summation order differs (interleaved over rows vs per head): O(1e-16) values.
        EXPECT_NEAR(dkg[(t * hkv + g2) * d + e], sk, 1e-14);
        EXPECT_NEAR(dvg[(t * hkv + g2) * d + e], sv, 1e-14);
      }
}

// Packed varlen (with an empty query sequence, a length-1 sequence and a query sequence
// whose keys are empty) equals running every sequence on its own.
TEST(ReferenceForward, ThdVarlenEqualsSeparateSequences) {
  std::mt19937_64 rng(4);
  const int64_t hq = 2, hkv = 1, d = 4;
  const std::vector<int64_t> cu_q = {0, 3, 3, 4, 9, 11}, cu_k = {0, 4, 6, 7, 12, 12};
  Rope rope = MakeRope(d, 4);
  RopeRowTransform tr(rope);
  AttentionArgs a = Thd(cu_q, cu_k, hq, hkv, d);
  a.causal = true;
  a.q_transform = a.k_transform = &tr;
  std::vector<double> q = RandomUniform(11 * hq * d, &rng), k = RandomUniform(12 * hkv * d, &rng),
                      v = RandomUniform(12 * hkv * d, &rng), o(q.size(), 5.0), lse(11 * hq);
  ASSERT_TRUE(ReferenceForward<double>(a, q.data(), k.data(), v.data(), o.data(), lse.data()).ok());
  for (size_t b = 0; b + 1 < cu_q.size(); ++b) {
    const int64_t lq = cu_q[b + 1] - cu_q[b], lk = cu_k[b + 1] - cu_k[b];
    if (lq == 0) continue;
    AttentionArgs s = Bshd(1, lq, lk, hq, hkv, d);
    s.causal = true;
    s.q_transform = s.k_transform = &tr;
    std::vector<double> os(lq * hq * d);
    ASSERT_TRUE(ReferenceForward<double>(s, q.data() + cu_q[b] * hq * d,
                                         k.data() + cu_k[b] * hkv * d, v.data() + cu_k[b] * hkv * d,
                                         os.data())
                    .ok());
    std::vector<double> ot(o.begin() + cu_q[b] * hq * d, o.begin() + cu_q[b + 1] * hq * d);
    EXPECT_EQ(MaxAbsDiff(ot, os), 0.0) << "sequence " << b;  // same arithmetic
  }
  // The last sequence has no keys: zero output, lse = -inf.
  for (int64_t i = cu_q[4] * hq * d; i < 11 * hq * d; ++i) EXPECT_EQ(o[i], 0.0);
  EXPECT_TRUE(std::isinf(lse[10 * hq]) && lse[10 * hq] < 0);
}

// KV-cache decoding: one query at the last position against L cached keys equals the
// last row of full causal attention (default positions put the query last).
TEST(ReferenceForward, KvCacheDecodeEqualsLastRow) {
  std::mt19937_64 rng(5);
  const int64_t l = 9, hq = 4, hkv = 2, d = 8;
  Rope rope = MakeRope(d, 8);
  RopeRowTransform tr(rope);
  auto alibi = AlibiBias::CreateStandard(hq, AlibiForm::kCausal);
  ASSERT_TRUE(alibi.ok());
  AttentionArgs full = Bshd(1, l, l, hq, hkv, d), dec = Bshd(1, 1, l, hq, hkv, d);
  for (AttentionArgs* a : {&full, &dec}) {
    a->causal = true;
    a->q_transform = a->k_transform = &tr;
    a->biases = {&*alibi};
    a->locality = 0.95;
  }
  std::vector<double> q = RandomUniform(l * hq * d, &rng), k = RandomUniform(l * hkv * d, &rng),
                      v = RandomUniform(l * hkv * d, &rng), of(l * hq * d), od(hq * d);
  ASSERT_TRUE(ReferenceForward<double>(full, q.data(), k.data(), v.data(), of.data()).ok());
  ASSERT_TRUE(
      ReferenceForward<double>(dec, q.data() + (l - 1) * hq * d, k.data(), v.data(), od.data())
          .ok());
  std::vector<double> last(of.end() - hq * d, of.end());
  EXPECT_EQ(MaxAbsDiff(last, od), 0.0);  // same positions, same arithmetic: bit-identical
}

// kv_lengths: a bshd batch of caches of different lengths equals the packed (thd) batch
// of the keys each sequence uses, forward and backward; the unused cache rows get zero
// gradients and are never read (NaN there changes nothing).
TEST(ReferenceForward, KvLengthsEqualThePackedBatchOfTheUsedKeys) {
  std::mt19937_64 rng(6);
  const int64_t batch = 3, cap = 7, lq = 2, hq = 2, hkv = 1, d = 4;
  const std::vector<int64_t> used = {7, 0, 3};
  Rope rope = MakeRope(d, 4);
  RopeRowTransform tr(rope);
  AttentionArgs a = Bshd(batch, lq, cap, hq, hkv, d);
  a.kv_lengths = used;
  a.causal = true;
  a.q_transform = a.k_transform = &tr;
  std::vector<int64_t> cu_q = {0}, cu_k = {0};
  for (int64_t b = 0; b < batch; ++b) {
    cu_q.push_back(cu_q.back() + lq);
    cu_k.push_back(cu_k.back() + used[b]);
  }
  AttentionArgs p = Thd(cu_q, cu_k, hq, hkv, d);
  p.causal = true;
  p.q_transform = p.k_transform = &tr;
  std::vector<double> q = RandomUniform(batch * lq * hq * d, &rng),
                      k = RandomUniform(batch * cap * hkv * d, &rng),
                      v = RandomUniform(batch * cap * hkv * d, &rng), w = RandomUniform(q.size(), &rng);
  std::vector<double> kp, vp;
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t t = 0; t < cap; ++t) {
      for (int64_t e = 0; e < hkv * d; ++e) {
        const size_t at = (b * cap + t) * hkv * d + e;
        if (t < used[b]) {
          kp.push_back(k[at]);
          vp.push_back(v[at]);
        } else {
          k[at] = v[at] = std::numeric_limits<double>::quiet_NaN();  // never read
        }
      }
    }
  }
  std::vector<double> o(q.size()), op(q.size()), lse(batch * lq * hq), lsep(lse.size());
  ASSERT_TRUE(ReferenceForward<double>(a, q.data(), k.data(), v.data(), o.data(), lse.data()).ok());
  ASSERT_TRUE(ReferenceForward<double>(p, q.data(), kp.data(), vp.data(), op.data(), lsep.data()).ok());
  EXPECT_EQ(o, op);  // the same keys, positions and arithmetic: bit-identical
  EXPECT_EQ(lse, lsep);
  std::vector<double> dq(q.size()), dk(k.size(), 5.0), dv(v.size(), 5.0), dqp(q.size()),
      dkp(kp.size()), dvp(vp.size());
  ASSERT_TRUE(ReferenceBackward<double>(a, q.data(), k.data(), v.data(), w.data(), dq.data(),
                                        dk.data(), dv.data()).ok());
  ASSERT_TRUE(ReferenceBackward<double>(p, q.data(), kp.data(), vp.data(), w.data(), dqp.data(),
                                        dkp.data(), dvp.data()).ok());
  EXPECT_EQ(dq, dqp);
  size_t at_p = 0;
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t t = 0; t < cap; ++t) {
      for (int64_t e = 0; e < hkv * d; ++e) {
        const size_t at = (b * cap + t) * hkv * d + e;
        if (t < used[b]) {
          EXPECT_EQ(dk[at], dkp[at_p]);
          EXPECT_EQ(dv[at], dvp[at_p]);
          ++at_p;
        } else {
          EXPECT_EQ(dk[at], 0.0);
          EXPECT_EQ(dv[at], 0.0);
        }
      }
    }
  }
  AttentionArgs bad = a;
  const std::vector<int64_t> too_long = {7, 8, 0}, two = {1, 1};
  bad.kv_lengths = too_long;
  EXPECT_FALSE(ValidateAttention(bad).ok());
  bad.kv_lengths = two;
  EXPECT_FALSE(ValidateAttention(bad).ok());
  p.kv_lengths = used;
  EXPECT_FALSE(ValidateAttention(p).ok());  // thd has cu_seqlens_k
}

// Relativity: with RoPE (and ALiBi, locality) shifting every position by a constant,
// up to 2^31, leaves the outputs unchanged.
TEST(ReferenceForward, RopeRelativityUnderPositionShift) {
  std::mt19937_64 rng(6);
  const int64_t l = 6, hq = 2, d = 8;
  Rope rope = MakeRope(d, 8);
  RopeRowTransform tr(rope);
  auto alibi = AlibiBias::CreateStandard(hq, AlibiForm::kSymmetric);
  ASSERT_TRUE(alibi.ok());
  std::vector<double> q = RandomUniform(l * hq * d, &rng), k = RandomUniform(l * hq * d, &rng),
                      v = RandomUniform(l * hq * d, &rng);
  std::vector<double> ref;
  for (int64_t shift : {int64_t{0}, int64_t{1000003}, int64_t{1} << 31}) {
    AttentionArgs a = Bshd(1, l, l, hq, hq, d);
    a.q_transform = a.k_transform = &tr;
    a.biases = {&*alibi};
    a.locality = 0.9;
    std::vector<int64_t> p(l);
    for (int64_t t = 0; t < l; ++t) p[t] = shift + 3 * t;
    a.q_positions = a.k_positions = p;
    std::vector<double> o(l * hq * d);
    ASSERT_TRUE(ReferenceForward<double>(a, q.data(), k.data(), v.data(), o.data()).ok());
    if (ref.empty()) {
      ref = o;
    } else {
      // Angles p * theta are reduced exactly (group/angle.h), so cos/sin at shifted
      // positions differ only by their own rounding (~1e-16); scores are O(1) sums of 8
      // terms, so outputs agree to ~1e-15. 1e-13 fails for any phase error >= ~1e-13.
      EXPECT_LT(MaxAbsDiff(o, ref), 1e-13) << "shift " << shift;
    }
  }
}

// An attention factor past float32's range (YaRN's m = 1e39) fits a float64 call, which
// rotates in double: q and k carry m, so q / m and k / m give the scores of q and k under
// m = 1.
TEST(ReferenceForward, Float64TakesAnAttentionFactorPastFloat32) {
  std::mt19937_64 rng(61);
  const int64_t l = 5, hq = 2, d = 8;
  const double m = 1e39;
  Rope one = MakeRope(d, 8);
  auto freqs = DefaultRopeFrequencies(8, 100.0);
  ASSERT_TRUE(freqs.ok());
  freqs->attention_factor = m;
  RopeOptions opt = one.options();
  auto big = Rope::Create(opt, *freqs);
  ASSERT_TRUE(big.ok()) << big.status();
  RopeRowTransform t1(one), tm(*big);
  std::vector<double> q = RandomUniform(l * hq * d, &rng), k = RandomUniform(l * hq * d, &rng),
                      v = RandomUniform(l * hq * d, &rng);
  std::vector<double> qs(q), ks(k);
  for (double& x : qs) x /= m;
  for (double& x : ks) x /= m;
  std::vector<int64_t> p(l);
  for (int64_t t = 0; t < l; ++t) p[t] = 7 * t;
  AttentionArgs a = Bshd(1, l, l, hq, hq, d);
  a.q_positions = a.k_positions = p;
  a.q_transform = a.k_transform = &t1;
  std::vector<double> want(l * hq * d), got(l * hq * d);
  ASSERT_TRUE(ReferenceForward<double>(a, q.data(), k.data(), v.data(), want.data()).ok());
  a.q_transform = a.k_transform = &tm;
  absl::Status s = ReferenceForward<double>(a, qs.data(), ks.data(), v.data(), got.data());
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_LT(MaxAbsDiff(got, want), 1e-13);
  // Prepared for these positions, the transform rotates double rows and refuses float
  // rows (their table's entries would be infinite).
  auto prepared = tm.Prepare(p);
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  std::vector<double> row(qs.begin(), qs.begin() + d);
  EXPECT_TRUE((*prepared)->Forward(0, 1, row.data(), d).ok());
  std::vector<float> rowf(d, 1.0f);
  EXPECT_EQ((*prepared)->Forward(0, 1, rowf.data(), d).code(),
            absl::StatusCode::kInvalidArgument);
}

// GRAPE-M: commuting planes from RoPE give the same attention as RoPE; a non-commuting
// product matches the direct oracle with its explicit matrices G(n).
TEST(ReferenceForward, GrapeMTransforms) {
  std::mt19937_64 rng(7);
  const int64_t l = 5, hq = 2, d = 4;
  std::vector<double> q = RandomUniform(l * hq * d, &rng), k = RandomUniform(l * hq * d, &rng),
                      v = RandomUniform(l * hq * d, &rng);
  // Planes (i, i + 2) with RoPE's thetas = half-split RoPE of dim 4, base 100.
  auto planes =
      GrapeMCommutingPlanes::Create(d, {CoordinatePlane{0, 2, 1.0}, CoordinatePlane{1, 3, 0.1}});
  ASSERT_TRUE(planes.ok()) << planes.status();
  GrapeMRowTransform<GrapeMCommutingPlanes> gtr(*planes);
  Rope rope = MakeRope(d, 4);
  RopeRowTransform rtr(rope);
  AttentionArgs a = Bshd(1, l, l, hq, hq, d);
  a.causal = true;
  std::vector<double> og(q.size()), orp(q.size());
  a.q_transform = a.k_transform = &gtr;
  ASSERT_TRUE(ReferenceForward<double>(a, q.data(), k.data(), v.data(), og.data()).ok());
  a.q_transform = a.k_transform = &rtr;
  ASSERT_TRUE(ReferenceForward<double>(a, q.data(), k.data(), v.data(), orp.data()).ok());
  // Both rotate by the same exactly reduced angles; rounding differences only.
  EXPECT_LT(MaxAbsDiff(og, orp), 1e-14);

  auto prod =
      GrapeMProduct::Create({Rank2Generator{RandomUniform(d, &rng), RandomUniform(d, &rng), 0.3},
                             Rank2Generator{RandomUniform(d, &rng), RandomUniform(d, &rng), -0.7}});
  ASSERT_TRUE(prod.ok()) << prod.status();
  GrapeMRowTransform<GrapeMProduct> ptr(*prod);
  a.q_transform = a.k_transform = &ptr;
  std::vector<double> op(q.size());
  ASSERT_TRUE(ReferenceForward<double>(a, q.data(), k.data(), v.data(), op.data()).ok());
  DirectSpec s(hq, hq, d);
  s.causal = true;
  s.scale = 0.5;
  s.rq = s.rk = [&](int64_t p) { return prod->Matrix(p); };
  std::vector<int64_t> pos = {0, 1, 2, 3, 4};
  EXPECT_LT(MaxAbsDiff(op, Direct(s, q, k, v, pos, pos)), 1e-13);  // rounding only
}

// GRAPE-A == ALiBi through attention: ALiBi as an AdditiveBias tile equals plain
// attention on GRAPE-A's lifted rows [q; 1; -m i], [k; m j; 1] (v padded with zeros).
TEST(ReferenceForward, GrapeALiftEqualsAlibiBias) {
  std::mt19937_64 rng(11);
  const int64_t l = 7, h = 2, d = 4, dl = d + 2;
  auto alibi = AlibiBias::CreateStandard(h, AlibiForm::kCausal);
  ASSERT_TRUE(alibi.ok());
  std::vector<double> q = RandomUniform(l * h * d, &rng), k = RandomUniform(l * h * d, &rng),
                      v = RandomUniform(l * h * d, &rng);
  AttentionArgs a = Bshd(1, l, l, h, h, d);
  a.causal = true;
  a.softmax_scale = 1.0;  // the lift adds the bias to the raw dot product
  a.biases = {&*alibi};
  std::vector<double> o(q.size());
  ASSERT_TRUE(ReferenceForward<double>(a, q.data(), k.data(), v.data(), o.data()).ok());

  std::vector<int64_t> pos(l);
  for (int64_t t = 0; t < l; ++t) pos[t] = 1000 + t;  // non-zero origin
  a.q_positions = a.k_positions = pos;
  std::vector<double> o_shift(q.size());
  ASSERT_TRUE(ReferenceForward<double>(a, q.data(), k.data(), v.data(), o_shift.data()).ok());

  std::vector<double> ql(l * h * dl), kl(l * h * dl), vl(l * h * dl, 0.0), ol(l * h * dl);
  for (int64_t hh = 0; hh < h; ++hh) {
    auto lift = GrapeALift::FromAlibi(*alibi, hh, d);
    ASSERT_TRUE(lift.ok()) << lift.status();
    ASSERT_TRUE(
        lift->LiftQueries<double>(pos, q.data() + hh * d, h * d, ql.data() + hh * dl, h * dl).ok());
    ASSERT_TRUE(
        lift->LiftKeys<double>(pos, k.data() + hh * d, h * d, kl.data() + hh * dl, h * dl).ok());
  }
  for (int64_t t = 0; t < l * h; ++t)
    for (int64_t e = 0; e < d; ++e) vl[t * dl + e] = v[t * d + e];
  AttentionArgs b = Bshd(1, l, l, h, h, dl);
  b.causal = true;
  b.softmax_scale = 1.0;
  b.q_positions = b.k_positions = pos;
  ASSERT_TRUE(ReferenceForward<double>(b, ql.data(), kl.data(), vl.data(), ol.data()).ok());
  std::vector<double> ot(q.size());
  for (int64_t t = 0; t < l * h; ++t)
    for (int64_t e = 0; e < d; ++e) ot[t * d + e] = ol[t * dl + e];
  // The lift forms m j - m i as a difference of products ~1e3 * m (grape_a.h): error
  // ~1e-13 in the scores; the tile forms m (i - j) directly.
  EXPECT_LT(MaxAbsDiff(ot, o_shift), 1e-12);
  // ALiBi is relative: the shifted run equals the origin-0 run.
  EXPECT_LT(MaxAbsDiff(o, o_shift), 1e-13);
  for (int64_t t = 0; t < l * h; ++t)  // padded output columns stay exactly zero
    EXPECT_EQ(ol[t * dl + d], 0.0);
}

// Central finite differences of L = <w, o> in double for every element of q, k and v,
// with ALiBi, locality, GQA, varlen, causal or not, and row transforms: RoPE on q with
// GRAPE-M product on k, xPos (query and key roles), Kogkalidis et al.'s exp(p S).
// dq, dk, dv of L = <w, o> against central differences of the reference forward, every
// element of q, k and v perturbed in turn (restored after). h = 1e-5: truncation error
// ~h^2 |L'''| ~ 1e-10, rounding ~1e-16 / h ~ 1e-11; 1e-8 is far below the O(0.01..1)
// gradients, so any wrong term fails.
void ExpectCentralDifferences(const AttentionArgs& a, std::vector<double>* q,
                              std::vector<double>* k, std::vector<double>* v,
                              const std::vector<double>& w, const std::vector<double>& dq,
                              const std::vector<double>& dk, const std::vector<double>& dv,
                              const std::string& what) {
  auto loss = [&]() {
    std::vector<double> o(w.size());
    EXPECT_TRUE(ReferenceForward<double>(a, q->data(), k->data(), v->data(), o.data()).ok());
    double s = 0;
    for (size_t i = 0; i < o.size(); ++i) s += w[i] * o[i];
    return s;
  };
  const double h = 1e-5;
  for (auto [x, g] : {std::pair{q, &dq}, std::pair{k, &dk}, std::pair{v, &dv}}) {
    for (size_t i = 0; i < x->size(); ++i) {
      const double x0 = (*x)[i];
      (*x)[i] = x0 + h;
      const double lp = loss();
      (*x)[i] = x0 - h;
      const double lm = loss();
      (*x)[i] = x0;
      EXPECT_NEAR((*g)[i], (lp - lm) / (2 * h), 1e-8) << what << " i " << i;
    }
  }
}

TEST(ReferenceBackward, MatchesFiniteDifferences) {
  std::mt19937_64 rng(8);
  const int64_t hq = 4, hkv = 2, d = 4;
  const std::vector<int64_t> cu_q = {0, 2, 3, 6}, cu_k = {0, 3, 4, 7};
  Rope rope = MakeRope(d, 4);
  RopeRowTransform rtr(rope);
  auto prod =
      GrapeMProduct::Create({Rank2Generator{RandomUniform(d, &rng), RandomUniform(d, &rng), 0.4},
                             Rank2Generator{RandomUniform(d, &rng), RandomUniform(d, &rng), 0.9}});
  ASSERT_TRUE(prod.ok());
  GrapeMRowTransform<GrapeMProduct> ptr(*prod);
  auto alibi = AlibiBias::CreateStandard(hq, AlibiForm::kCausal);
  ASSERT_TRUE(alibi.ok());
  // xPos: q and k are scaled by zeta^(+-(p - centre) / B), not orthogonal.
  RopeOptions xopt;
  xopt.head_dim = d;
  xopt.rotary_dim = d;
  xopt.xpos.enabled = true;
  xopt.xpos.scale_base = 4.0;
  xopt.xpos.centre = 2;
  auto xpos = Rope::Create(xopt, *DefaultRopeFrequencies(d, 100.0));
  ASSERT_TRUE(xpos.ok()) << xpos.status();
  RopeRowTransform xq(*xpos, encodings::sequence::RopeRole::kQuery),
      xk(*xpos, encodings::sequence::RopeRole::kKey);
  Eigen::MatrixXd skew = Eigen::MatrixXd::Random(d, d);
  skew = (skew - skew.transpose()).eval();
  auto alg = AlgebraicSequence::Create(skew);
  ASSERT_TRUE(alg.ok()) << alg.status();
  AlgebraicRowTransform atr(*alg);
  for (int config = 0; config < 4; ++config) {
    const bool causal = config != 0;
    AttentionArgs a = Thd(cu_q, cu_k, hq, hkv, d);
    a.causal = causal;
    const RowTransform* qt[4] = {&rtr, &rtr, &xq, &atr};
    const RowTransform* kt[4] = {&ptr, &ptr, &xk, &atr};
    a.q_transform = qt[config];
    a.k_transform = kt[config];
    a.biases = {&*alibi};
    a.locality = 0.8;
    a.softmax_scale = 0.7;
    std::vector<double> q = RandomUniform(6 * hq * d, &rng), k = RandomUniform(7 * hkv * d, &rng),
                        v = RandomUniform(7 * hkv * d, &rng), w = RandomUniform(6 * hq * d, &rng);
    std::vector<double> dq(q.size()), dk(k.size()), dv(v.size());
    ASSERT_TRUE(ReferenceBackward<double>(a, q.data(), k.data(), v.data(), w.data(), dq.data(),
                                          dk.data(), dv.data())
                    .ok());
    ExpectCentralDifferences(a, &q, &k, &v, w, dq, dk, dv, "config " + std::to_string(config));
  }
}

// A key whose score is -inf (an infinite q component against a negative k one) in a row
// that another key makes NaN (+inf score): probability exactly 0, no gradient
// (descriptor.h, NON-FINITE VALUES: "in a NaN row too"), as the kernels give; the
// division by the row's NaN sum gave it 0 / NaN = NaN.
TEST(ReferenceBackward, MinusInfScoreInANaNRowHasNoGradient) {
  const double inf = std::numeric_limits<double>::infinity();
  AttentionArgs a = Bshd(1, 1, 2, 1, 1, 2);
  const std::vector<double> q = {inf, 1.0}, k = {1.0, 0.5, -1.0, 0.5}, v = {0.3, -0.2, 0.7, 0.1},
                            w = {1.0, -1.0};
  std::vector<double> o(2), lse(1), dq(2), dk(4), dv(4);
  ASSERT_TRUE(ReferenceForward<double>(a, q.data(), k.data(), v.data(), o.data(), lse.data()).ok());
  EXPECT_TRUE(std::isnan(lse[0]));
  ASSERT_TRUE(ReferenceBackward<double>(a, q.data(), k.data(), v.data(), w.data(), dq.data(),
                                        dk.data(), dv.data())
                  .ok());
  EXPECT_EQ(dk[2], 0.0);
  EXPECT_EQ(dk[3], 0.0);
  EXPECT_EQ(dv[2], 0.0);
  EXPECT_EQ(dv[3], 0.0);
  EXPECT_TRUE(std::isnan(dv[0])) << dv[0];  // the key that makes the row NaN
}

// A value head size of its own (descriptor.h, VALUE HEAD SIZE) against the same call
// with the narrower side zero-padded, an exact identity in double: v padded with zero
// columns gives o (and dv) padded with zeros; q and k padded with zero components keep
// every dot product (the scale given explicitly, as the default follows head_dim). The
// encodings stay on the unpadded side: RoPE and Shaw key labels when v is padded, Shaw
// value labels (a table of value_dim() columns), ALiBi and sinks on both.
TEST(ReferenceForward, ValueHeadSizeEqualsZeroPaddedCall) {
  std::mt19937_64 rng(31);
  const int64_t hq = 4, hkv = 2, lq = 5, lk = 7;
  auto alibi = AlibiBias::CreateStandard(hq, AlibiForm::kCausal);
  ASSERT_TRUE(alibi.ok());
  const std::vector<float> sinks = {0.2f, -0.5f, 1.0f, 0.0f};
  for (auto [d, dv] : {std::pair<int64_t, int64_t>{6, 3}, {3, 7}}) {
    SCOPED_TRACE(testing::Message() << "d " << d << " dv " << dv);
    const int64_t w = std::max(d, dv);  // the padded call's head_dim
    const int64_t kmax = 2, nl = 2 * kmax + 1;
    std::vector<double> tk = RandomUniform(nl * d, &rng), tv = RandomUniform(nl * dv, &rng);
    std::vector<double> tk_pad(nl * w, 0.0), tv_pad(nl * w, 0.0);
    for (int64_t r = 0; r < nl; ++r) {
      for (int64_t e = 0; e < d; ++e) tk_pad[r * w + e] = tk[r * d + e];
      for (int64_t e = 0; e < dv; ++e) tv_pad[r * w + e] = tv[r * dv + e];
    }
    using encodings::sequence::RowMatrixXd;
    auto shaw = encodings::sequence::ShawRelative::Create(
        kmax, Eigen::Map<RowMatrixXd>(tk.data(), nl, d), Eigen::Map<RowMatrixXd>(tv.data(), nl, dv));
    auto shaw_pad = encodings::sequence::ShawRelative::Create(
        kmax, Eigen::Map<RowMatrixXd>(tk_pad.data(), nl, w),
        Eigen::Map<RowMatrixXd>(tv_pad.data(), nl, w));
    ASSERT_TRUE(shaw.ok() && shaw_pad.ok());
    Rope rope = MakeRope(6, 6);  // used where d = 6
    RopeRowTransform rtr(rope);
    AttentionArgs a = test::WithValueDim(Bshd(2, lq, lk, hq, hkv, d), dv);
    AttentionArgs p = Bshd(2, lq, lk, hq, hkv, w);
    for (AttentionArgs* x : {&a, &p}) {
      x->causal = true;
      x->softmax_scale = 0.6;
      x->biases = {&*alibi};
      x->sinks = sinks;
    }
    a.shaw_keys = a.shaw_values = &*shaw;
    p.shaw_keys = p.shaw_values = &*shaw_pad;
    if (dv < d) a.q_transform = a.k_transform = p.q_transform = p.k_transform = &rtr;
    const int64_t nq = 2 * lq, nk = 2 * lk;
    std::vector<double> q = RandomUniform(nq * hq * d, &rng), k = RandomUniform(nk * hkv * d, &rng),
                        v = RandomUniform(nk * hkv * dv, &rng), g = RandomUniform(nq * hq * dv, &rng);
    // Row r of x (width n) into row r of width w, zeros after.
    auto pad = [w](const std::vector<double>& x, int64_t n) {
      std::vector<double> y(x.size() / n * w, 0.0);
      for (size_t r = 0; r < x.size() / n; ++r) {
        std::copy_n(x.begin() + r * n, n, y.begin() + r * w);
      }
      return y;
    };
    std::vector<double> o(nq * hq * dv), lse(nq * hq), o_pad(nq * hq * w), lse_pad(nq * hq);
    ASSERT_TRUE(ReferenceForward<double>(a, q.data(), k.data(), v.data(), o.data(), lse.data()).ok());
    const std::vector<double> qp = pad(q, d), kp = pad(k, d), vp = pad(v, dv), gp = pad(g, dv);
    ASSERT_TRUE(ReferenceForward<double>(p, qp.data(), kp.data(), vp.data(), o_pad.data(),
                                         lse_pad.data())
                    .ok());
    // Identical arithmetic up to the order of additions of zeros: 1e-14.
    for (size_t r = 0; r < o.size() / dv; ++r) {
      for (int64_t e = 0; e < w; ++e) {
        EXPECT_NEAR(o_pad[r * w + e], e < dv ? o[r * dv + e] : 0.0, 1e-14) << r << " " << e;
      }
    }
    for (size_t i = 0; i < lse.size(); ++i) EXPECT_NEAR(lse[i], lse_pad[i], 1e-14);
    std::vector<double> dq(q.size()), dk(k.size()), dvg(v.size()), dq_p(qp.size()),
        dk_p(kp.size()), dv_p(vp.size());
    std::vector<double> gak(nl * d), gav(nl * dv), gak_p(nl * w), gav_p(nl * w);
    ReferenceBackwardExtras ex, ex_p;
    ex.shaw_key_table_grad = gak.data();
    ex.shaw_value_table_grad = gav.data();
    ex_p.shaw_key_table_grad = gak_p.data();
    ex_p.shaw_value_table_grad = gav_p.data();
    ASSERT_TRUE(ReferenceBackward<double>(a, q.data(), k.data(), v.data(), g.data(), dq.data(),
                                          dk.data(), dvg.data(), nullptr, ex)
                    .ok());
    ASSERT_TRUE(ReferenceBackward<double>(p, qp.data(), kp.data(), vp.data(), gp.data(),
                                          dq_p.data(), dk_p.data(), dv_p.data(), nullptr, ex_p)
                    .ok());
    auto expect_padded = [&](const std::vector<double>& x, int64_t n, const std::vector<double>& y,
                             const char* what) {
      for (size_t r = 0; r < x.size() / n; ++r) {
        for (int64_t e = 0; e < n; ++e) {
          EXPECT_NEAR(y[r * w + e], x[r * n + e], 1e-13) << what << " " << r << " " << e;
        }
      }
    };
    expect_padded(dq, d, dq_p, "dq");
    expect_padded(dk, d, dk_p, "dk");
    expect_padded(dvg, dv, dv_p, "dv");
    expect_padded(gak, d, gak_p, "daK");
    expect_padded(gav, dv, gav_p, "daV");
  }
}

// A value head size of its own in the backward: dq, dk, dv against central differences,
// packed sequences, GQA, RoPE, window, softcap and sinks, dv wider and narrower than d.
TEST(ReferenceBackward, ValueHeadSizeMatchesFiniteDifferences) {
  std::mt19937_64 rng(41);
  const int64_t hq = 4, hkv = 2, d = 4;
  const std::vector<int64_t> cu_q = {0, 2, 3, 6}, cu_k = {0, 3, 4, 7};
  Rope rope = MakeRope(d, 4);
  RopeRowTransform rtr(rope);
  std::vector<float> sinks = {0.3f, -0.7f, 1.1f, -0.2f};
  for (int64_t dv : {2, 6}) {
    AttentionArgs a = test::WithValueDim(Thd(cu_q, cu_k, hq, hkv, d), dv);
    a.causal = true;
    a.window_left = 1;
    a.softcap = 1.5;
    a.sinks = sinks;
    a.q_transform = a.k_transform = &rtr;
    std::vector<double> q = RandomUniform(6 * hq * d, &rng), k = RandomUniform(7 * hkv * d, &rng),
                        v = RandomUniform(7 * hkv * dv, &rng), w = RandomUniform(6 * hq * dv, &rng);
    std::vector<double> dq(q.size()), dk(k.size()), dvg(v.size());
    ASSERT_TRUE(ReferenceBackward<double>(a, q.data(), k.data(), v.data(), w.data(), dq.data(),
                                          dk.data(), dvg.data())
                    .ok());
    ExpectCentralDifferences(a, &q, &k, &v, w, dq, dk, dvg, "dv " + std::to_string(dv));
  }
}

// Window, softcap and sinks in the backward: dq, dk, dv (through the softcap's
// 1 - tanh^2) and dL/dz of the sinks against central differences.
TEST(ReferenceBackward, WindowSoftcapAndSinksMatchFiniteDifferences) {
  std::mt19937_64 rng(12);
  const int64_t hq = 4, hkv = 2, d = 4;
  const std::vector<int64_t> cu_q = {0, 2, 3, 6}, cu_k = {0, 3, 4, 7};
  Rope rope = MakeRope(d, 4);
  RopeRowTransform rtr(rope);
  auto alibi = AlibiBias::CreateStandard(hq, AlibiForm::kCausal);
  ASSERT_TRUE(alibi.ok());
  for (int config = 0; config < 3; ++config) {
    AttentionArgs a = Thd(cu_q, cu_k, hq, hkv, d);
    a.causal = config != 1;
    a.window_left = config == 2 ? 0 : 1;  // config 2: a row sees its own key only
    a.window_right = config == 1 ? 1 : -1;
    a.softcap = config == 2 ? 0.6 : 1.5;
    std::vector<float> sinks = {0.3f, -0.7f, 1.1f, -0.2f};
    a.sinks = sinks;
    a.q_transform = a.k_transform = &rtr;
    a.biases = {&*alibi};
    std::vector<double> q = RandomUniform(6 * hq * d, &rng, -2.0, 2.0),
                        k = RandomUniform(7 * hkv * d, &rng, -2.0, 2.0),
                        v = RandomUniform(7 * hkv * d, &rng), w = RandomUniform(6 * hq * d, &rng);
    std::vector<double> dq(q.size()), dk(k.size()), dv(v.size()), dz(hq, 9.0);
    ReferenceBackwardExtras extras;
    extras.sink_grad = dz.data();
    ASSERT_TRUE(ReferenceBackward<double>(a, q.data(), k.data(), v.data(), w.data(), dq.data(),
                                          dk.data(), dv.data(), nullptr, extras)
                    .ok());
    ExpectCentralDifferences(a, &q, &k, &v, w, dq, dk, dv, "config " + std::to_string(config));
    auto loss = [&]() {
      std::vector<double> o(w.size());
      EXPECT_TRUE(ReferenceForward<double>(a, q.data(), k.data(), v.data(), o.data()).ok());
      double s = 0;
      for (size_t i = 0; i < o.size(); ++i) s += w[i] * o[i];
      return s;
    };
    // Sinks are float: steps of 2^-10 are exact in float; truncation ~h^2 ~ 1e-6 relative
    // to L''' = O(1), so 1e-5.
    for (int64_t hh = 0; hh < hq; ++hh) {
      const float z0 = sinks[hh], step = 1.0f / 1024;
      sinks[hh] = z0 + step;
      const double lp = loss();
      sinks[hh] = z0 - step;
      const double lm = loss();
      sinks[hh] = z0;
      EXPECT_NEAR(dz[hh], (lp - lm) / (2 * step), 1e-5) << "config " << config << " head " << hh;
    }
  }
  // A sink gradient without sinks is refused.
  AttentionArgs a = Thd(cu_q, cu_k, hq, hkv, d);
  std::vector<double> x(7 * hq * d), dz(hq);
  ReferenceBackwardExtras extras;
  extras.sink_grad = dz.data();
  EXPECT_FALSE(ReferenceBackward<double>(a, x.data(), x.data(), x.data(), x.data(), nullptr,
                                         nullptr, nullptr, nullptr, extras)
                   .ok());
}

// dL/dbias tiles through the sink into T5's table gradient, against finite differences
// of the table entries.
TEST(ReferenceBackward, BiasGradientSinkGivesT5TableGradient) {
  std::mt19937_64 rng(9);
  const int64_t l = 6, hq = 2, d = 4;
  T5BucketConfig cfg;
  cfg.num_buckets = 6;
  cfg.max_distance = 8;
  cfg.bidirectional = true;
  std::vector<double> table = RandomUniform(cfg.num_buckets * hq, &rng);
  std::vector<double> q = RandomUniform(l * hq * d, &rng), k = RandomUniform(l * hq * d, &rng),
                      v = RandomUniform(l * hq * d, &rng), w = RandomUniform(l * hq * d, &rng);
  auto run = [&](const std::vector<double>& tab, std::vector<double>* grad_table) {
    auto t5 = T5RelativeBias::Create(tab, hq, cfg);
    EXPECT_TRUE(t5.ok()) << t5.status();
    AttentionArgs a = Bshd(1, l, l, hq, hq, d);
    a.biases = {&*t5};
    std::vector<double> o(w.size());
    EXPECT_TRUE(ReferenceForward<double>(a, q.data(), k.data(), v.data(), o.data()).ok());
    if (grad_table != nullptr) {
      grad_table->assign(tab.size(), 0.0);
      BiasGradientSink sink = [&](int64_t, int64_t head, absl::Span<const int64_t> qp,
                                  absl::Span<const int64_t> kp, const double* g, int64_t ld) {
        return t5->AccumulateTableGradient(head, qp, kp, g, ld, absl::MakeSpan(*grad_table));
      };
      EXPECT_TRUE(ReferenceBackward<double>(a, q.data(), k.data(), v.data(), w.data(), nullptr,
                                            nullptr, nullptr, sink)
                      .ok());
    }
    double s = 0;
    for (size_t i = 0; i < o.size(); ++i) s += w[i] * o[i];
    return s;
  };
  std::vector<double> grad;
  run(table, &grad);
  double total = 0;
  const double h = 1e-5;
  for (size_t i = 0; i < table.size(); ++i) {
    std::vector<double> tp = table, tm = table;
    tp[i] += h;
    tm[i] -= h;
    // Same error budget as MatchesFiniteDifferences.
    EXPECT_NEAR(grad[i], (run(tp, nullptr) - run(tm, nullptr)) / (2 * h), 1e-8) << i;
    total += std::abs(grad[i]);
  }
  EXPECT_GT(total, 1e-3);  // the check is not vacuous
}

// FoX on a packed varlen batch, one FoxBias per sequence (prefix sums restart at each
// sequence): outputs against the direct oracle with b = sum_{l=j+1..i} ln sigmoid(x_l)
// written out, and the gate-logit gradient (sink -> AccumulatePrefixGradient ->
// LogitGradient) against central finite differences.
TEST(ReferenceBackward, FoxPerSequenceBiasAndLogitGradient) {
  std::mt19937_64 rng(10);
  const int64_t hq = 2, d = 4;
  const std::vector<int64_t> cu = {0, 4, 5, 9};
  const int64_t n = 9, nseq = 3;
  std::vector<double> q = RandomUniform(n * hq * d, &rng), k = RandomUniform(n * hq * d, &rng),
                      v = RandomUniform(n * hq * d, &rng), w = RandomUniform(n * hq * d, &rng);
  std::vector<double> logits = RandomUniform(n * hq, &rng, -2.0, 3.0);  // token-major [t, head]
  auto run = [&](const std::vector<double>& x, std::vector<double>* o_out,
                 std::vector<double>* grad_logits) {
    std::vector<FoxBias> fox;
    for (int64_t b = 0; b < nseq; ++b) {
      const int64_t len = cu[b + 1] - cu[b];
      auto f = FoxBias::Create(absl::MakeConstSpan(x.data() + cu[b] * hq, len * hq), len, hq);
      EXPECT_TRUE(f.ok()) << f.status();
      fox.push_back(*f);
    }
    AttentionArgs a = Thd(cu, cu, hq, hq, d);
    a.causal = true;
    for (const FoxBias& f : fox) a.biases.push_back(&f);
    std::vector<double> o(w.size());
    EXPECT_TRUE(ReferenceForward<double>(a, q.data(), k.data(), v.data(), o.data()).ok());
    if (o_out != nullptr) *o_out = o;
    if (grad_logits != nullptr) {
      std::vector<std::vector<double>> gp(nseq);
      for (int64_t b = 0; b < nseq; ++b) gp[b].assign((cu[b + 1] - cu[b]) * hq, 0.0);
      BiasGradientSink sink = [&](int64_t b, int64_t head, absl::Span<const int64_t> qp,
                                  absl::Span<const int64_t> kp, const double* g, int64_t ld) {
        return fox[b].AccumulatePrefixGradient(head, qp, kp, g, ld, absl::MakeSpan(gp[b]));
      };
      EXPECT_TRUE(ReferenceBackward<double>(a, q.data(), k.data(), v.data(), w.data(), nullptr,
                                            nullptr, nullptr, sink)
                      .ok());
      grad_logits->clear();
      for (int64_t b = 0; b < nseq; ++b) {
        auto gl = fox[b].LogitGradient(gp[b]);
        EXPECT_TRUE(gl.ok()) << gl.status();
        grad_logits->insert(grad_logits->end(), gl->begin(), gl->end());
      }
    }
    double s = 0;
    for (size_t i = 0; i < o.size(); ++i) s += w[i] * o[i];
    return s;
  };
  std::vector<double> o, grad;
  run(logits, &o, &grad);
  for (int64_t b = 0; b < nseq; ++b) {
    const int64_t len = cu[b + 1] - cu[b];
    DirectSpec s(hq, hq, d);
    s.causal = true;
    s.scale = 0.5;
    s.bias = [&](int64_t h, int64_t i, int64_t j) {
      double acc = 0;  // sum_{l = j+1..i} ln sigmoid(x_l), direct
      for (int64_t l = j + 1; l <= i; ++l) {
        acc -= std::log1p(std::exp(-logits[(cu[b] + l) * hq + h]));
      }
      return acc;
    };
    std::vector<int64_t> pos(len);
    for (int64_t t = 0; t < len; ++t) pos[t] = t;
    auto slice = [&](const std::vector<double>& x) {
      return std::vector<double>(x.begin() + cu[b] * hq * d, x.begin() + cu[b + 1] * hq * d);
    };
    // Prefix-sum differences vs the direct sums: ~1e-16 relative on O(1) biases.
    EXPECT_LT(MaxAbsDiff(slice(o), Direct(s, slice(q), slice(k), slice(v), pos, pos)), 1e-13);
  }
  const double h = 1e-5;
  double total = 0;
  for (size_t i = 0; i < logits.size(); ++i) {
    std::vector<double> xp = logits, xm = logits;
    xp[i] += h;
    xm[i] -= h;
    // Same error budget as MatchesFiniteDifferences.
    EXPECT_NEAR(grad[i], (run(xp, nullptr, nullptr) - run(xm, nullptr, nullptr)) / (2 * h), 1e-8)
        << i;
    total += std::abs(grad[i]);
  }
  EXPECT_GT(total, 1e-3);  // not vacuous
}

TEST(ValidateAttention, RejectsBadInputs) {
  const std::vector<int64_t> cu_ok = {0, 2, 4}, cu_bad = {0, 3, 2}, cu_short = {0, 4};
  auto expect_bad = [](const AttentionArgs& a, const char* what) {
    absl::Status s = ValidateAttention(a);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << what;
    EXPECT_NE(s.message().find(what), std::string::npos) << s.message();
  };
  EXPECT_TRUE(ValidateAttention(Bshd(2, 3, 4, 4, 2, 8)).ok());
  EXPECT_TRUE(ValidateAttention(Thd(cu_ok, cu_ok, 2, 1, 4)).ok());
  expect_bad(Bshd(2, 3, 4, 3, 2, 8), "multiple of num_kv_heads");
  expect_bad(Bshd(2, 3, 4, 0, 1, 8), "num_q_heads");
  expect_bad(Bshd(2, 3, 4, 2, 2, 0), "head_dim");
  expect_bad(Bshd(-1, 3, 4, 2, 2, 8), "batch");
  expect_bad(Bshd(1, -3, 4, 2, 2, 8), "sequence lengths");
  {
    AttentionArgs a = Thd(cu_ok, cu_ok, 2, 1, 4);
    a.cu_seqlens_k = cu_bad;
    expect_bad(a, "non-decreasing");
    a.cu_seqlens_k = cu_short;
    expect_bad(a, "cu_seqlens_q has 3 entries");
  }
  {
    AttentionArgs a = Thd(cu_ok, cu_ok, 2, 1, 4);
    a.seq_len_q = 5;
    expect_bad(a, "end at the total");
  }
  {
    AttentionArgs a = Bshd(1, 3, 3, 2, 2, 8);
    a.window_left = -2;
    expect_bad(a, "window_left and window_right");
    a.window_left = 0;
    a.window_right = -5;
    expect_bad(a, "window_left and window_right");
    a.window_right = 0;
    EXPECT_TRUE(ValidateAttention(a).ok());
    for (double c : {0.0, -1.0, std::numeric_limits<double>::infinity(),
                     std::numeric_limits<double>::quiet_NaN()}) {
      a.softcap = c;
      expect_bad(a, "softcap");
    }
    // Above kMaxSoftcap a cap is no cap, and the float kernels' 1 / c and c log2(e)
    // leave float's normal range (scores 0 from ~1e37, NaN rows from 2.4e38): refused
    // for every implementation; the bound itself is accepted.
    for (double c : {1.0000001e30, 1e37, 2.4e38, 1e308}) {
      a.softcap = c;
      expect_bad(a, "softcap must be at most 1e+30");
    }
    a.softcap = kMaxSoftcap;
    EXPECT_TRUE(ValidateAttention(a).ok());
    a.softcap.reset();
    const std::vector<float> three = {0.f, 1.f, 2.f};
    a.sinks = three;
    expect_bad(a, "sinks has 3 logits");
  }
  {  // a value head size of its own: v and o strides follow it, Shaw value tables too
    AttentionArgs a = Bshd(1, 3, 3, 2, 2, 8);
    a.head_dim_v = -1;
    expect_bad(a, "head_dim_v must be >= 0");
    a.head_dim_v = 16;  // v and o laid out for 8: rows of 16 overlap
    expect_bad(a, "overlaps");
    EXPECT_TRUE(ValidateAttention(test::WithValueDim(a, 16)).ok());
    EXPECT_TRUE(ValidateAttention(test::WithValueDim(a, 3)).ok());
    std::vector<double> t8(3 * 8, 0.1);
    using encodings::sequence::RowMatrixXd;
    auto shaw = encodings::sequence::ShawRelative::Create(
        1, Eigen::Map<RowMatrixXd>(t8.data(), 3, 8), Eigen::Map<RowMatrixXd>(t8.data(), 3, 8));
    ASSERT_TRUE(shaw.ok());
    AttentionArgs b = test::WithValueDim(a, 3);
    b.shaw_keys = &*shaw;
    EXPECT_TRUE(ValidateAttention(b).ok());
    b.shaw_values = &*shaw;
    expect_bad(b, "value_table) has 8 columns but the value head size is 3");
  }
  {
    AttentionArgs a = Bshd(1, 3, 3, 2, 2, 8);
    a.softmax_scale = std::numeric_limits<double>::quiet_NaN();
    expect_bad(a, "softmax_scale");
    a.softmax_scale = std::numeric_limits<double>::infinity();
    expect_bad(a, "softmax_scale");
  }
  {
    AttentionArgs a = Bshd(1, 3, 3, 2, 2, 8);
    a.q.head = 4;  // rows of 8 overlap
    expect_bad(a, "overlaps");
    a = Bshd(1, 3, 3, 2, 2, 8);
    a.k.token = -1;
    expect_bad(a, "k.token stride");
    a.k.token = 0;  // three tokens on one row
    expect_bad(a, "k: stride 0 overlaps");
  }
  {
    AttentionArgs a = Bshd(1, 3, 3, 2, 2, 8);
    const std::vector<int64_t> p3 = {0, 1, 2}, p2 = {0, 1};
    a.q_positions = p3;
    expect_bad(a, "or neither");
    a.k_positions = p2;
    expect_bad(a, "k_positions has 2");
  }
  {
    Rope rope = MakeRope(4, 4);
    RopeRowTransform tr(rope);
    AttentionArgs a = Bshd(1, 3, 3, 2, 2, 8);
    a.q_transform = &tr;
    expect_bad(a, "q_transform acts on rows of 4");
  }
  {
    auto alibi = AlibiBias::CreateStandard(3, AlibiForm::kCausal);
    ASSERT_TRUE(alibi.ok());
    AttentionArgs a = Bshd(2, 3, 3, 2, 2, 8);
    a.biases = {&*alibi};
    expect_bad(a, "has 3 heads");
    a.biases = {nullptr};
    expect_bad(a, "is null");
    a.biases = {nullptr, nullptr, nullptr};
    expect_bad(a, "one per sequence");
    std::vector<double> gates = {0.1, 0.2, 0.3, 0.4};
    auto fox = FoxBias::Create(gates, 2, 2);
    ASSERT_TRUE(fox.ok());
    a.biases = {&*fox};  // two sequences, one sequence's gates
    expect_bad(a, "reads per-token data");
  }
  {
    AttentionArgs a = Bshd(1, 3, 3, 2, 2, 8);
    a.locality = 1.5;
    expect_bad(a, "locality");
    a.locality = 0.0;
    expect_bad(a, "locality");
  }
  {
    // The entry points validate too, and reject null tensors instead of crashing.
    AttentionArgs a = Bshd(1, 3, 3, 3, 2, 8);
    std::vector<double> x(3 * 3 * 8);
    EXPECT_FALSE(ReferenceForward<double>(a, x.data(), x.data(), x.data(), x.data()).ok());
    a = Bshd(1, 3, 3, 2, 2, 8);
    EXPECT_FALSE(ReferenceForward<double>(a, nullptr, x.data(), x.data(), x.data()).ok());
    EXPECT_FALSE(ReferenceBackward<double>(a, x.data(), x.data(), x.data(), nullptr, x.data(),
                                           x.data(), x.data())
                     .ok());
  }
}


// ---- Structured positions: multi-axis RoPE, algebraic trees and grids ----------------

struct RefOut {
  std::vector<double> o, lse;
};
RefOut RefForward(const AttentionArgs& a, const std::vector<double>& q,
                  const std::vector<double>& k, const std::vector<double>& v) {
  RefOut r;
  r.o.assign(a.num_q_tokens() * a.num_q_heads * a.head_dim, 0.0);
  r.lse.assign(a.num_q_tokens() * a.num_q_heads, 0.0);
  absl::Status st = ReferenceForward<double>(a, q.data(), k.data(), v.data(), r.o.data(), r.lse.data());
  EXPECT_TRUE(st.ok()) << st;
  return r;
}

// Every token's coordinates plus a per-axis offset (a common group element).
std::vector<int64_t> Translated(const std::vector<int64_t>& coords, const std::vector<int64_t>& by) {
  std::vector<int64_t> out = coords;
  for (size_t i = 0; i < out.size(); ++i) out[i] += by[i % by.size()];
  return out;
}

// Runs the reference with the structured coordinates (axes form) cq / ck and checks
// that (1) translating every token by one per-axis offset leaves o and lse unchanged
// (scores depend only on x_j - x_i per axis) and (2) moving one key along any single
// axis changes o (every axis reaches the scores).
void CheckAxesRelativity(const RowTransform& tr, int64_t axes, int64_t d, uint64_t seed,
                         const std::string& what) {
  SCOPED_TRACE(what);
  std::mt19937_64 rng(seed);
  const int64_t lq = 5, lk = 8, hq = 2, hkv = 1;
  std::uniform_int_distribution<int64_t> coord(-40, 40);
  std::vector<int64_t> cq(lq * axes), ck(lk * axes);
  for (int64_t& c : cq) c = coord(rng);
  for (int64_t& c : ck) c = coord(rng);
  std::vector<double> q = RandomUniform(lq * hq * d, &rng), k = RandomUniform(lk * hkv * d, &rng),
                      v = RandomUniform(lk * hkv * d, &rng);
  AttentionArgs a = Bshd(1, lq, lk, hq, hkv, d);
  a.q_transform = a.k_transform = &tr;
  a.q_structured.num_axes = a.k_structured.num_axes = axes;
  a.q_structured.coords = cq;
  a.k_structured.coords = ck;
  const RefOut base = RefForward(a, q, k, v);
  // Offsets near 2^40 on some axes: angles are reduced exactly, so nothing drifts.
  const std::vector<int64_t> by = {(int64_t{1} << 40) + 3, -77, 123457}; 
  const std::vector<int64_t> tq = Translated(cq, std::vector<int64_t>(by.begin(), by.begin() + axes)),
                             tk = Translated(ck, std::vector<int64_t>(by.begin(), by.begin() + axes));
  a.q_structured.coords = tq;
  a.k_structured.coords = tk;
  const RefOut moved = RefForward(a, q, k, v);
  // Scores are O(1) sums of d products computed in double from exactly reduced angles:
  // translation changes them by rounding only (~1e-15), far below 1e-10.
  EXPECT_LT(MaxAbsDiff(base.o, moved.o), 1e-10);
  EXPECT_LT(MaxAbsDiff(base.lse, moved.lse), 1e-10);
  for (int64_t ax = 0; ax < axes; ++ax) {
    std::vector<int64_t> ck2 = ck;
    ck2[3 * axes + ax] += 1;  // key 3 one step along axis ax
    a.q_structured.coords = cq;
    a.k_structured.coords = ck2;
    EXPECT_GT(MaxAbsDiff(base.o, RefForward(a, q, k, v).o), 1e-6) << "axis " << ax << " ignored";
  }
}

TEST(StructuredPositions, AxialAndMRopeDependOnlyOnPerAxisDifferences) {
  const int64_t d = 24;  // 12 planes: 2 axes x 6, 3 axes x 4, M-RoPE sections
  {
    Rope rope = MakeAxesRope(d, 2, *encodings::sequence::AxialPlaneAxes(12, 2),
                             *encodings::sequence::AxialRopeFrequencies(d, 2, 100.0));
    RopeRowTransform tr(rope);
    CheckAxesRelativity(tr, 2, d, 1, "axial 2D");
  }
  {
    Rope rope = MakeAxesRope(d, 3, *encodings::sequence::AxialPlaneAxes(12, 3),
                             *encodings::sequence::AxialRopeFrequencies(d, 3, 100.0));
    RopeRowTransform tr(rope);
    CheckAxesRelativity(tr, 3, d, 2, "axial 3D");
  }
  for (bool interleaved : {false, true}) {
    const std::vector<int64_t> sections = interleaved ? std::vector<int64_t>{4, 4, 4}
                                                      : std::vector<int64_t>{2, 5, 5};
    Rope rope = MakeAxesRope(d, 3, *encodings::sequence::MRopePlaneAxes(sections, interleaved),
                             *DefaultRopeFrequencies(d, 100.0));
    RopeRowTransform tr(rope);
    CheckAxesRelativity(tr, 3, d, 3 + interleaved, interleaved ? "m-rope interleaved" : "m-rope");
    // Text tokens of Qwen2-VL: equal coordinates on every axis are 1-D RoPE at t.
    Rope one = MakeAxesRope(d, 1, {}, *DefaultRopeFrequencies(d, 100.0));
    RopeRowTransform tr1(one);
    std::mt19937_64 rng(7);
    const int64_t l = 6;
    std::vector<double> q = RandomUniform(l * d, &rng), k = RandomUniform(l * d, &rng),
                        v = RandomUniform(l * d, &rng);
    std::vector<int64_t> pos = {0, 3, 9, 10, 200, 1 << 20}, c3;
    for (int64_t p : pos) c3.insert(c3.end(), {p, p, p});
    AttentionArgs a = Bshd(1, l, l, 1, 1, d);
    a.causal = true;
    a.q_positions = a.k_positions = pos;
    a.q_transform = a.k_transform = &tr1;
    const RefOut flat = RefForward(a, q, k, v);
    a.q_transform = a.k_transform = &tr;
    a.q_structured.num_axes = a.k_structured.num_axes = 3;
    a.q_structured.coords = a.k_structured.coords = c3;
    // The same angles from the same reduction: identical up to summation order.
    EXPECT_LT(MaxAbsDiff(flat.o, RefForward(a, q, k, v).o), 1e-13);
  }
}

TEST(StructuredPositions, AlgebraicGridScoresDependOnlyOnPerAxisDifferences) {
  std::mt19937_64 rng(21);
  auto g2 = encodings::sequence::MakeAlgebraicGrid2D(RandomSkew(4, 0.7, &rng),
                                                     RandomSkew(5, 0.7, &rng));
  ASSERT_TRUE(g2.ok()) << g2.status();
  AlgebraicGridRowTransform<encodings::sequence::AlgebraicGrid2D> t2(*g2);
  CheckAxesRelativity(t2, 2, 9, 22, "grid 2D");
  auto g3 = encodings::sequence::MakeAlgebraicGrid3D(
      RandomSkew(4, 0.5, &rng), RandomSkew(2, 0.5, &rng), RandomSkew(4, 0.5, &rng));
  ASSERT_TRUE(g3.ok()) << g3.status();
  AlgebraicGridRowTransform<encodings::sequence::AlgebraicGrid3D> t3(*g3);
  CheckAxesRelativity(t3, 3, 10, 23, "grid 3D");
  // Transform level: <rho(x_i) q, rho(x_j) k> = <q, blockdiag(W_a^(x_j - x_i)) k>.
  std::vector<int64_t> cq = {3, -2, 0, 5}, ck = {-1, 7, 4, 4};  // two tokens each
  StructuredPositions sq, sk;
  sq.num_axes = sk.num_axes = 2;
  sq.coords = cq;
  sk.coords = ck;
  auto pq = t2.PrepareStructured(sq), pk = t2.PrepareStructured(sk);
  ASSERT_TRUE(pq.ok() && pk.ok());
  std::vector<double> q = RandomUniform(2 * 9, &rng), k = RandomUniform(2 * 9, &rng), qt = q,
                      kt = k;
  ASSERT_TRUE((*pq)->Forward(0, 2, qt.data(), 9).ok());
  ASSERT_TRUE((*pk)->Forward(0, 2, kt.data(), 9).ok());
  for (int i = 0; i < 2; ++i) {
    for (int j = 0; j < 2; ++j) {
      auto m = g2->Matrix({ck[2 * j] - cq[2 * i], ck[2 * j + 1] - cq[2 * i + 1]});
      ASSERT_TRUE(m.ok());
      const Eigen::Map<const Eigen::VectorXd> qi(&q[9 * i], 9), kj(&k[9 * j], 9),
          qti(&qt[9 * i], 9), ktj(&kt[9 * j], 9);
      // Orthogonal maps of O(1) vectors in double: 1e-12 covers the rounding.
      EXPECT_NEAR(qti.dot(ktj), qi.dot(*m * kj), 1e-12);
    }
  }
  // Backward is the transpose: G^T G x = x.
  ASSERT_TRUE((*pq)->Backward(0, 2, qt.data(), 9).ok());
  EXPECT_LT(MaxAbsDiff(qt, q), 1e-12);
}

TEST(StructuredPositions, AlgebraicTreeScoresDependOnlyOnTheRelativePath) {
  std::mt19937_64 rng(31);
  const int64_t d = 6;
  auto tree = encodings::sequence::AlgebraicTree::Create(
      {RandomSkew(d, 0.6, &rng), RandomSkew(d, 0.6, &rng), RandomSkew(d, 0.6, &rng)});
  ASSERT_TRUE(tree.ok()) << tree.status();
  AlgebraicTreeRowTransform tr(*tree);
  // Addresses (CSR): queries and keys at depths 0..4 of a ternary tree.
  const std::vector<std::vector<int64_t>> qa = {{}, {0}, {2, 1}, {0, 0, 2}, {1, 2, 0, 1}};
  const std::vector<std::vector<int64_t>> ka = {{1}, {}, {2, 1, 0}, {0, 0}, {2}, {1, 2, 0, 1}, {0, 1}};
  auto csr = [](const std::vector<std::vector<int64_t>>& addr, const std::vector<int64_t>& prefix,
                std::vector<int64_t>* off, std::vector<int64_t>* ch) {
    off->assign(1, 0);
    ch->clear();
    for (const auto& x : addr) {
      ch->insert(ch->end(), prefix.begin(), prefix.end());
      ch->insert(ch->end(), x.begin(), x.end());
      off->push_back(static_cast<int64_t>(ch->size()));
    }
  };
  std::vector<int64_t> qo, qc, ko, kc;
  csr(qa, {}, &qo, &qc);
  csr(ka, {}, &ko, &kc);
  StructuredPositions sq, sk;
  sq.tree_offsets = qo;
  sq.tree_children = qc;
  sk.tree_offsets = ko;
  sk.tree_children = kc;
  // Transform level: <rho(a_i) q, rho(a_j) k> = <q, rho(a_i^-1 a_j) k> (sec. 3.2.2).
  auto pq = tr.PrepareStructured(sq), pk = tr.PrepareStructured(sk);
  ASSERT_TRUE(pq.ok() && pk.ok()) << pq.status() << pk.status();
  std::vector<double> q = RandomUniform(5 * d, &rng), k = RandomUniform(7 * d, &rng), qt = q,
                      kt = k;
  ASSERT_TRUE((*pq)->Forward(0, 5, qt.data(), d).ok());
  ASSERT_TRUE((*pk)->Forward(0, 7, kt.data(), d).ok());
  const auto& fg = tree->representation().group();
  for (int i = 0; i < 5; ++i) {
    for (int j = 0; j < 7; ++j) {
      auto rel = fg.RelativePath(*tree->Word(qa[i]), *tree->Word(ka[j]));
      ASSERT_TRUE(rel.ok());
      auto m = tree->representation().Matrix(*rel);
      ASSERT_TRUE(m.ok());
      const Eigen::Map<const Eigen::VectorXd> qi(&q[d * i], d), kj(&k[d * j], d),
          qti(&qt[d * i], d), ktj(&kt[d * j], d);
      // Products of up to 8 orthogonal factors in double: rounding ~1e-15.
      EXPECT_NEAR(qti.dot(ktj), qi.dot(*m * kj), 1e-12) << i << " " << j;
    }
  }
  ASSERT_TRUE((*pq)->Backward(0, 5, qt.data(), d).ok());
  EXPECT_LT(MaxAbsDiff(qt, q), 1e-12);
  // Attention level: moving every node under one common prefix keeps every relative path
  // (x a_i)^-1 (x a_j) = a_i^-1 a_j, so o and lse are unchanged; moving one key is not.
  std::vector<double> qq = RandomUniform(5 * 2 * d, &rng), kk = RandomUniform(7 * d, &rng),
                      vv = RandomUniform(7 * d, &rng);
  AttentionArgs a = Bshd(1, 5, 7, 2, 1, d);
  a.causal = true;  // masks by the int64 positions (token order), not by the tree
  a.q_transform = a.k_transform = &tr;
  a.q_structured = sq;
  a.k_structured = sk;
  const RefOut base = RefForward(a, qq, kk, vv);
  std::vector<int64_t> qo2, qc2, ko2, kc2;
  csr(qa, {2, 0, 1}, &qo2, &qc2);
  csr(ka, {2, 0, 1}, &ko2, &kc2);
  a.q_structured.tree_offsets = qo2;
  a.q_structured.tree_children = qc2;
  a.k_structured.tree_offsets = ko2;
  a.k_structured.tree_children = kc2;
  const RefOut moved = RefForward(a, qq, kk, vv);
  EXPECT_LT(MaxAbsDiff(base.o, moved.o), 1e-10);
  EXPECT_LT(MaxAbsDiff(base.lse, moved.lse), 1e-10);
  std::vector<std::vector<int64_t>> ka3 = ka;
  ka3[0].push_back(1);
  std::vector<int64_t> ko3, kc3;
  csr(ka3, {}, &ko3, &kc3);
  a.q_structured = sq;
  a.k_structured.tree_offsets = ko3;
  a.k_structured.tree_children = kc3;
  EXPECT_GT(MaxAbsDiff(base.o, RefForward(a, qq, kk, vv).o), 1e-6);
}

TEST(StructuredPositions, RejectsMismatchedForms) {
  std::mt19937_64 rng(41);
  auto tree = encodings::sequence::AlgebraicTree::Create({RandomSkew(4, 0.5, &rng)});
  ASSERT_TRUE(tree.ok());
  AlgebraicTreeRowTransform tr(*tree);
  Rope rope = MakeRope(4, 4);
  RopeRowTransform rtr(rope);
  std::vector<double> x(3 * 4, 0.5), o(3 * 4);
  AttentionArgs a = Bshd(1, 3, 3, 1, 1, 4);
  auto run = [&]() {
    return ReferenceForward<double>(a, x.data(), x.data(), x.data(), o.data());
  };
  a.q_transform = a.k_transform = &tr;
  absl::Status st = run();  // a tree transform with int64 positions
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("tree addresses"), std::string::npos) << st;
  std::vector<int64_t> off = {0, 1, 1, 3}, ch = {0, 0, 0}, badch = {0, 1, 0};
  a.q_structured.tree_offsets = a.k_structured.tree_offsets = off;
  a.q_structured.tree_children = a.k_structured.tree_children = ch;
  EXPECT_TRUE(run().ok());
  a.k_structured.tree_children = badch;  // child 1 of a 1-ary tree
  EXPECT_FALSE(run().ok());
  a.k_structured.tree_children = ch;
  std::vector<int64_t> short_off = {0, 1, 3};
  a.k_structured.tree_offsets = short_off;
  st = run();
  EXPECT_NE(st.message().find("tree_offsets"), std::string::npos) << st;
  a.k_structured = StructuredPositions{};
  st = run();
  EXPECT_NE(st.message().find("both"), std::string::npos) << st;
  // 1-D RoPE given 2-axis coordinates; structured positions without a transform.
  std::vector<int64_t> c2 = {0, 0, 1, 1, 2, 2};
  a.q_transform = a.k_transform = &rtr;
  a.q_structured = a.k_structured = StructuredPositions{};
  a.q_structured.num_axes = a.k_structured.num_axes = 2;
  a.q_structured.coords = a.k_structured.coords = c2;
  EXPECT_FALSE(run().ok());
  a.q_transform = a.k_transform = nullptr;
  st = run();
  EXPECT_NE(st.message().find("q_transform"), std::string::npos) << st;
  std::vector<int64_t> c_short = {0, 0, 1};
  a.q_transform = a.k_transform = &rtr;
  a.q_structured.coords = c_short;
  st = run();
  EXPECT_NE(st.message().find("coords"), std::string::npos) << st;
}

// ---- Shaw et al. relative labels on keys and values ---------------------------------

encodings::sequence::RowMatrixXd Table(int64_t rows, int64_t cols, std::mt19937_64* rng) {
  std::vector<double> x = RandomUniform(rows * cols, rng);
  return Eigen::Map<encodings::sequence::RowMatrixXd>(x.data(), rows, cols);
}

TEST(ShawLabels, ForwardMatchesRelativeHOnMaterialisedProbabilities) {
  std::mt19937_64 rng(51);
  const int64_t d = 4, lq = 5, lk = 7, hq = 2, hkv = 1, kmax = 2;
  auto shaw = encodings::sequence::ShawRelative::Create(kmax, Table(2 * kmax + 1, d, &rng),
                                                        Table(2 * kmax + 1, d, &rng));
  ASSERT_TRUE(shaw.ok()) << shaw.status();
  const std::vector<int64_t> pq = {0, 2, 3, 9, -4}, pk = {1, 0, 2, 3, 4, 12, -6};
  for (bool causal : {false, true}) {
    AttentionArgs a = Bshd(1, lq, lk, hq, hkv, d);
    a.causal = causal;
    a.softmax_scale = 0.8;
    a.q_positions = pq;
    a.k_positions = pk;
    a.shaw_keys = a.shaw_values = &*shaw;
    std::vector<double> q = RandomUniform(lq * hq * d, &rng), k = RandomUniform(lk * d, &rng),
                        v = RandomUniform(lk * d, &rng);
    const RefOut got = RefForward(a, q, k, v);
    for (int64_t h = 0; h < hq; ++h) {
      encodings::sequence::RowMatrixXd Q(lq, d), K(lk, d), V(lk, d);
      for (int64_t i = 0; i < lq; ++i) for (int64_t e = 0; e < d; ++e) Q(i, e) = q[(i * hq + h) * d + e];
      for (int64_t j = 0; j < lk; ++j) for (int64_t e = 0; e < d; ++e) { K(j, e) = k[j * d + e]; V(j, e) = v[j * d + e]; }
      // Shaw eq. 4 then 3: e = scale (Q K^T + Q aK_r), softmax, o = P V + sum_j p aV_r.
      auto ks = shaw->KeyScores(Q, pq, pk);
      ASSERT_TRUE(ks.ok());
      encodings::sequence::RowMatrixXd S = 0.8 * (Q * K.transpose() + *ks), P(lq, lk);
      for (int64_t i = 0; i < lq; ++i) {
        double m = -1e300, z = 0;
        for (int64_t j = 0; j < lk; ++j) if (!causal || pk[j] <= pq[i]) m = std::max(m, S(i, j));
        for (int64_t j = 0; j < lk; ++j) { P(i, j) = (!causal || pk[j] <= pq[i]) ? std::exp(S(i, j) - m) : 0.0; z += P(i, j); }
        if (z > 0) P.row(i) /= z;
      }
      auto vo = shaw->ValueOutput(P, pq, pk);
      ASSERT_TRUE(vo.ok());
      encodings::sequence::RowMatrixXd O = P * V + *vo;
      for (int64_t i = 0; i < lq; ++i) {
        for (int64_t e = 0; e < d; ++e) {
          // Both in double from the same inputs: differences are rounding (~1e-16).
          EXPECT_NEAR(got.o[(i * hq + h) * d + e], O(i, e), 1e-13) << causal << " " << i;
        }
      }
    }
  }
}

TEST(ShawLabels, BackwardMatchesFiniteDifferencesIncludingTables) {
  std::mt19937_64 rng(52);
  const int64_t hq = 4, hkv = 2, d = 4, kmax = 2, nl = 2 * kmax + 1;
  const std::vector<int64_t> cu_q = {0, 3, 4, 8}, cu_k = {0, 4, 5, 10};
  Rope rope = MakeRope(d, 4);
  RopeRowTransform rtr(rope);
  encodings::sequence::RowMatrixXd tk = Table(nl, d, &rng), tv = Table(nl, d, &rng);
  for (int config = 0; config < 3; ++config) {
    AttentionArgs a = Thd(cu_q, cu_k, hq, hkv, d);
    a.causal = config != 0;
    a.softmax_scale = 0.7;
    if (config == 2) {
      a.q_transform = a.k_transform = &rtr;
      a.locality = 0.9;
    }
    auto make = [&]() {
      auto s = encodings::sequence::ShawRelative::Create(kmax, tk, tv);
      EXPECT_TRUE(s.ok());
      return *s;
    };
    encodings::sequence::ShawRelative shaw = make();
    a.shaw_keys = a.shaw_values = &shaw;
    std::vector<double> q = RandomUniform(8 * hq * d, &rng), k = RandomUniform(10 * hkv * d, &rng),
                        v = RandomUniform(10 * hkv * d, &rng), w = RandomUniform(8 * hq * d, &rng);
    std::vector<double> dq(q.size()), dk(k.size()), dv(v.size()), gk(nl * d), gv(nl * d);
    ReferenceBackwardExtras ex;
    ex.shaw_key_table_grad = gk.data();
    ex.shaw_value_table_grad = gv.data();
    ASSERT_TRUE(ReferenceBackward<double>(a, q.data(), k.data(), v.data(), w.data(), dq.data(),
                                          dk.data(), dv.data(), nullptr, ex)
                    .ok());
    auto loss = [&]() {
      encodings::sequence::ShawRelative s2 = make();  // the tables as they are now
      a.shaw_keys = a.shaw_values = &s2;
      std::vector<double> o(w.size());
      EXPECT_TRUE(ReferenceForward<double>(a, q.data(), k.data(), v.data(), o.data()).ok());
      a.shaw_keys = a.shaw_values = &shaw;
      double s = 0;
      for (size_t i = 0; i < o.size(); ++i) s += w[i] * o[i];
      return s;
    };
    // Central differences as in MatchesFiniteDifferences: h = 1e-5, error ~1e-10.
    const double h = 1e-5;
    auto fd = [&](double* x, double g, const char* name, size_t i) {
      const double x0 = *x;
      *x = x0 + h;
      const double lp = loss();
      *x = x0 - h;
      const double lm = loss();
      *x = x0;
      EXPECT_NEAR(g, (lp - lm) / (2 * h), 1e-8) << name << " config " << config << " i " << i;
    };
    for (size_t i = 0; i < q.size(); ++i) fd(&q[i], dq[i], "q", i);
    for (size_t i = 0; i < k.size(); ++i) fd(&k[i], dk[i], "k", i);
    for (size_t i = 0; i < v.size(); ++i) fd(&v[i], dv[i], "v", i);
    for (int64_t i = 0; i < nl * d; ++i) fd(tk.data() + i, gk[i], "aK", i);
    for (int64_t i = 0; i < nl * d; ++i) fd(tv.data() + i, gv[i], "aV", i);
  }
}

}  // namespace
}  // namespace attention
}  // namespace gpe
