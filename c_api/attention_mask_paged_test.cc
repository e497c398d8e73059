// gpe_attention_options' attn_mask, kv_lengths and block_table (0.9.0) through gpe.h only:
// against an oracle written here from the formulas (attention/descriptor.h, "SCORE MASK"
// and "LAYOUTS"), forward o and lse and backward dq, dk, dv, float64 (the exact reference)
// and float32 (the kernels); against the same call written another way (an additive -inf
// mask and the boolean one, bool and uint8, a strided mask and its compact copy,
// kv_lengths and the packed layout of the keys used, a paged cache with shuffled pages
// and the same keys contiguous, float32 and 16-bit KV caches); the struct size before
// these fields; the packed layout's mask indexed within each sequence.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "c_api/include/gpe/gpe.h"
#include "c_api/test_util.h"
#include "gtest/gtest.h"

namespace {

using gpe::c_api_test::HasMessage;
using gpe::c_api_test::Bits;
using gpe::c_api_test::Draw;
using gpe::c_api_test::Tensor;

constexpr double kNegInf = -std::numeric_limits<double>::infinity();
constexpr auto kDLBoolCode = static_cast<DLDataTypeCode>(6);  // DLPack 0.8's kDLBool

// Padded [batch, s, heads, d] problem, compact.
constexpr int64_t kB = 2, kSq = 5, kSk = 12, kHq = 4, kHk = 2, kD = 8;

// The mask of the tests, [kB, kHq, kSq, kSk] compact: additive values (some -inf) and
// whether each key is allowed (additive != -inf). Every row keeps at least one key.
struct Mask {
  std::vector<float> add;
  std::vector<uint8_t> allowed;
  Mask() {
    std::mt19937_64 rng(7);
    std::uniform_real_distribution<double> u(0.0, 1.0);
    add.resize(kB * kHq * kSq * kSk);
    allowed.resize(add.size());
    for (size_t n = 0; n < add.size(); ++n) {
      const bool keep = n % kSk == 0 || u(rng) > 0.35;
      add[n] = keep ? static_cast<float>(u(rng) * 2.0 - 1.0) : -INFINITY;
      allowed[n] = keep ? 1 : 0;
    }
  }
  size_t At(int64_t b, int64_t h, int64_t i, int64_t j) const {
    return static_cast<size_t>(((b * kHq + h) * kSq + i) * kSk + j);
  }
};

struct Out {
  std::vector<double> o, lse, dq, dk, dv;
};

// The formulas in double: s = scale q.k + mask (additive: the value; boolean: 0 or
// masked), keys j < len[b] only, o = sum e^s v / Z, lse = ln Z; backward through
// p = e^{s - lse}: dS = p (dP - D).
Out Oracle(const std::vector<double>& q, const std::vector<double>& k,
           const std::vector<double>& v, const std::vector<double>& w, const Mask& m,
           bool additive, const std::vector<int64_t>& len) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(kD));
  Out r;
  r.o.assign(q.size(), 0.0);
  r.lse.assign(kB * kSq * kHq, 0.0);
  r.dq.assign(q.size(), 0.0);
  r.dk.assign(k.size(), 0.0);
  r.dv.assign(v.size(), 0.0);
  auto qi = [](int64_t b, int64_t i, int64_t h) { return ((b * kSq + i) * kHq + h) * kD; };
  auto ki = [](int64_t b, int64_t j, int64_t g) { return ((b * kSk + j) * kHk + g) * kD; };
  for (int64_t b = 0; b < kB; ++b) {
    for (int64_t h = 0; h < kHq; ++h) {
      const int64_t g = h / (kHq / kHk);
      for (int64_t i = 0; i < kSq; ++i) {
        std::vector<int64_t> keys;
        std::vector<double> s;
        for (int64_t j = 0; j < len[b]; ++j) {
          if (!m.allowed[m.At(b, h, i, j)]) continue;
          double dot = 0.0;
          for (int64_t e = 0; e < kD; ++e) dot += q[qi(b, i, h) + e] * k[ki(b, j, g) + e];
          keys.push_back(j);
          s.push_back(scale * dot + (additive ? m.add[m.At(b, h, i, j)] : 0.0));
        }
        double mx = kNegInf;
        for (double x : s) mx = std::max(mx, x);
        double z = 0.0;
        for (double x : s) z += std::exp(x - mx);
        const double lse = keys.empty() ? kNegInf : mx + std::log(z);
        r.lse[(b * kSq + i) * kHq + h] = lse;
        double* o = &r.o[qi(b, i, h)];
        std::vector<double> p(keys.size());
        for (size_t n = 0; n < keys.size(); ++n) {
          p[n] = std::exp(s[n] - lse);
          for (int64_t e = 0; e < kD; ++e) o[e] += p[n] * v[ki(b, keys[n], g) + e];
        }
        const double* dO = &w[qi(b, i, h)];
        double dsum = 0.0;
        for (int64_t e = 0; e < kD; ++e) dsum += dO[e] * o[e];
        for (size_t n = 0; n < keys.size(); ++n) {
          const int64_t j = keys[n];
          double dp = 0.0;
          for (int64_t e = 0; e < kD; ++e) dp += dO[e] * v[ki(b, j, g) + e];
          const double ds = p[n] * (dp - dsum);
          for (int64_t e = 0; e < kD; ++e) {
            r.dq[qi(b, i, h) + e] += scale * ds * k[ki(b, j, g) + e];
            r.dk[ki(b, j, g) + e] += scale * ds * q[qi(b, i, h) + e];
            r.dv[ki(b, j, g) + e] += p[n] * dO[e];
          }
        }
      }
    }
  }
  return r;
}

// Forward (o, lse) then backward (dq, dk, dv) of a padded compact call.
template <class T>
Out Call(const gpe_attention_options& opt, const std::vector<T>& q, const std::vector<T>& k,
        const std::vector<T>& v, const std::vector<T>& w) {
  std::vector<T> o(q.size()), lse(kB * kSq * kHq), dq(q.size()), dk(k.size()), dv(v.size());
  std::vector<int64_t> qs = {kB, kSq, kHq, kD}, ks = {kB, kSk, kHk, kD}, ls = {kB * kSq, kHq};
  constexpr int b = Bits<T>();
  DLTensor tq = Tensor(q.data(), kDLFloat, b, &qs), tk = Tensor(k.data(), kDLFloat, b, &ks),
           tv = Tensor(v.data(), kDLFloat, b, &ks), to = Tensor(o.data(), kDLFloat, b, &qs),
           tl = Tensor(lse.data(), kDLFloat, b, &ls), tw = Tensor(w.data(), kDLFloat, b, &qs),
           tdq = Tensor(dq.data(), kDLFloat, b, &qs), tdk = Tensor(dk.data(), kDLFloat, b, &ks),
           tdv = Tensor(dv.data(), kDLFloat, b, &ks);
  EXPECT_EQ(gpe_attention_forward(&opt, &tq, &tk, &tv, &to, &tl), GPE_OK)
      << gpe_last_error_message();
  EXPECT_EQ(gpe_attention_backward(&opt, &tq, &tk, &tv, &to, &tl, &tw, &tdq, &tdk, &tdv), GPE_OK)
      << gpe_last_error_message();
  auto d = [](const std::vector<T>& x) { return std::vector<double>(x.begin(), x.end()); };
  return {d(o), d(lse), d(dq), d(dk), d(dv)};
}

void ExpectNear(const std::vector<double>& got, const std::vector<double>& want, double tol,
                const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t n = 0; n < got.size(); ++n) {
    if (std::isinf(want[n])) {
      EXPECT_EQ(got[n], want[n]) << what << "[" << n << "]";
    } else {
      EXPECT_NEAR(got[n], want[n], tol * (1.0 + std::abs(want[n]))) << what << "[" << n << "]";
    }
  }
}

void ExpectOut(const Out& got, const Out& want, double tol) {
  ExpectNear(got.o, want.o, tol, "o");
  ExpectNear(got.lse, want.lse, tol, "lse");
  ExpectNear(got.dq, want.dq, tol, "dq");
  ExpectNear(got.dk, want.dk, tol, "dk");
  ExpectNear(got.dv, want.dv, tol, "dv");
}

// Every mask kind, with kv_lengths, against the oracle. Tolerances: float64 runs the exact
// reference (1e-12 relative: a different summation order only); float32 runs the tiled
// kernels with float accumulation over at most 12 keys of O(1) terms (2e-5 relative).
TEST(AttentionMaskC, MatchesOracleEveryKind) {
  const Mask m;
  const std::vector<int64_t> full = {kSk, kSk}, lens = {7, kSk};
  const auto q = Draw<double>(kB * kSq * kHq * kD, 1), k = Draw<double>(kB * kSk * kHk * kD, 2),
             v = Draw<double>(kB * kSk * kHk * kD, 3), w = Draw<double>(q.size(), 4);
  const std::vector<float> qf(q.begin(), q.end()), kf(k.begin(), k.end()), vf(v.begin(), v.end()),
      wf(w.begin(), w.end());
  std::vector<int64_t> ms = {kB, kHq, kSq, kSk}, ls = {kB};
  for (int kind = 0; kind < 3; ++kind) {  // additive float32, bool, uint8
    for (bool use_lens : {false, true}) {
      SCOPED_TRACE(testing::Message() << "kind " << kind << " kv_lengths " << use_lens);
      const std::vector<int64_t>& len = use_lens ? lens : full;
      DLTensor mt = kind == 0 ? Tensor(m.add.data(), kDLFloat, 32, &ms)
                              : Tensor(m.allowed.data(), kind == 1 ? kDLBoolCode : kDLUInt, 8, &ms);
      DLTensor lt = Tensor(len.data(), kDLInt, 64, &ls);
      gpe_attention_options opt = GPE_ATTENTION_OPTIONS_INIT;
      opt.attn_mask = &mt;
      if (use_lens) opt.kv_lengths = &lt;
      const Out want = Oracle(q, k, v, w, m, kind == 0, len);
      ExpectOut(Call<double>(opt, q, k, v, w), want, 1e-12);
      ExpectOut(Call<float>(opt, qf, kf, vf, wf), want, 2e-5);
    }
  }
}

// The packed layout indexes the mask within each sequence: [sequences, heads_q, max_lq,
// max_lk]. Sequences of 5 and 3 queries over 12 and 7 keys (no causal mask: each query row
// stands alone) against the oracle's padded rows with kv_lengths {12, 7}; tolerances as
// above.
TEST(AttentionMaskC, PackedIndexesWithinSequences) {
  const Mask m;
  const std::vector<int64_t> lens = {kSk, 7}, lq = {kSq, 3};
  const auto q = Draw<double>(kB * kSq * kHq * kD, 51), k = Draw<double>(kB * kSk * kHk * kD, 52),
             v = Draw<double>(kB * kSk * kHk * kD, 53), w = Draw<double>(q.size(), 54);
  const Out want = Oracle(q, k, v, w, m, true, lens);
  std::vector<double> qp, kp, vp;
  for (int64_t b = 0; b < kB; ++b) {
    qp.insert(qp.end(), q.begin() + b * kSq * kHq * kD, q.begin() + (b * kSq + lq[b]) * kHq * kD);
    kp.insert(kp.end(), k.begin() + b * kSk * kHk * kD, k.begin() + (b * kSk + lens[b]) * kHk * kD);
    vp.insert(vp.end(), v.begin() + b * kSk * kHk * kD, v.begin() + (b * kSk + lens[b]) * kHk * kD);
  }
  std::vector<int64_t> cu_q = {0, lq[0], lq[0] + lq[1]}, cu_k = {0, lens[0], lens[0] + lens[1]};
  std::vector<int64_t> cs = {3}, ms = {kB, kHq, kSq, kSk}, qs = {cu_q.back(), kHq, kD},
                       ks = {cu_k.back(), kHk, kD};
  DLTensor tcq = Tensor(cu_q.data(), kDLInt, 64, &cs), tck = Tensor(cu_k.data(), kDLInt, 64, &cs),
           tm = Tensor(m.add.data(), kDLFloat, 32, &ms);
  gpe_attention_options opt = GPE_ATTENTION_OPTIONS_INIT;
  opt.cu_seqlens_q = &tcq;
  opt.cu_seqlens_k = &tck;
  opt.attn_mask = &tm;
  for (int bits : {64, 32}) {
    SCOPED_TRACE(bits);
    std::vector<double> o64(qp.size());
    std::vector<float> qf(qp.begin(), qp.end()), kf(kp.begin(), kp.end()), vf(vp.begin(), vp.end()),
        of(qp.size());
    DLTensor tq = bits == 64 ? Tensor(qp.data(), kDLFloat, 64, &qs) : Tensor(qf.data(), kDLFloat, 32, &qs);
    DLTensor tk = bits == 64 ? Tensor(kp.data(), kDLFloat, 64, &ks) : Tensor(kf.data(), kDLFloat, 32, &ks);
    DLTensor tv = bits == 64 ? Tensor(vp.data(), kDLFloat, 64, &ks) : Tensor(vf.data(), kDLFloat, 32, &ks);
    DLTensor to = bits == 64 ? Tensor(o64.data(), kDLFloat, 64, &qs) : Tensor(of.data(), kDLFloat, 32, &qs);
    ASSERT_EQ(gpe_attention_forward(&opt, &tq, &tk, &tv, &to, nullptr), GPE_OK)
        << gpe_last_error_message();
    const double tol = bits == 64 ? 1e-12 : 2e-5;
    size_t at = 0;
    for (int64_t b = 0; b < kB; ++b) {
      for (int64_t n = 0; n < lq[b] * kHq * kD; ++n, ++at) {
        const double x = want.o[static_cast<size_t>(b * kSq * kHq * kD + n)];
        const double y = bits == 64 ? o64[at] : of[at];
        EXPECT_NEAR(y, x, tol * (1 + std::abs(x))) << b << " " << n;
      }
    }
  }
  // A mask sized for the padded call's 12 keys in sequence 1 is fine (max_lk is 12); one
  // of 13 keys is refused.
  std::vector<int64_t> bad = {kB, kHq, kSq, kSk + 1};
  std::vector<float> big(kB * kHq * kSq * (kSk + 1), 0.0f);
  DLTensor tb = Tensor(big.data(), kDLFloat, 32, &bad);
  opt.attn_mask = &tb;
  std::vector<double> o(qp.size());
  DLTensor tq = Tensor(qp.data(), kDLFloat, 64, &qs), tk = Tensor(kp.data(), kDLFloat, 64, &ks),
           to = Tensor(o.data(), kDLFloat, 64, &qs);
  EXPECT_EQ(gpe_attention_forward(&opt, &tq, &tk, &tk, &to, nullptr), GPE_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(HasMessage("max_lk")) << gpe_last_error_message();
}

// Broadcast dimensions (size 1, any stride) and a strided mask read as their compact
// equivalents, bit for bit (the same values reach the same kernels); an additive mask of
// 0 / -inf equals the boolean one to float rounding (1e-6: the kernels may skip the
// addition of 0 on one path).
TEST(AttentionMaskC, BroadcastStridedAndBooleanEquivalents) {
  const Mask m;
  const auto q = Draw<float>(kB * kSq * kHq * kD, 11), k = Draw<float>(kB * kSk * kHk * kD, 12),
             v = Draw<float>(kB * kSk * kHk * kD, 13), w = Draw<float>(q.size(), 14);
  // One [1, 1, kSq, kSk] slice (batch 0, head 0) broadcast, and its expansion.
  std::vector<float> expanded(m.add.size());
  for (int64_t b = 0; b < kB; ++b)
    for (int64_t h = 0; h < kHq; ++h)
      for (int64_t i = 0; i < kSq; ++i)
        for (int64_t j = 0; j < kSk; ++j) expanded[m.At(b, h, i, j)] = m.add[m.At(0, 0, i, j)];
  std::vector<int64_t> s11 = {1, 1, kSq, kSk}, s11_strides = {12345, 999, kSk, 1};
  std::vector<int64_t> full = {kB, kHq, kSq, kSk}, zero_strides = {0, 0, kSk, 1};
  DLTensor small = Tensor(m.add.data(), kDLFloat, 32, &s11, &s11_strides);
  DLTensor zeros = Tensor(m.add.data(), kDLFloat, 32, &full, &zero_strides);
  DLTensor dense = Tensor(expanded.data(), kDLFloat, 32, &full);
  gpe_attention_options a = GPE_ATTENTION_OPTIONS_INIT, b = a, c = a;
  a.attn_mask = &small;
  b.attn_mask = &zeros;
  c.attn_mask = &dense;
  const Out ra = Call<float>(a, q, k, v, w), rb = Call<float>(b, q, k, v, w),
            rc = Call<float>(c, q, k, v, w);
  ExpectOut(ra, rc, 0.0);
  ExpectOut(rb, rc, 0.0);
  // A transposed buffer [kB, kHq, kSk, kSq] read through strides (query, key swapped).
  std::vector<float> t(m.add.size());
  for (int64_t bb = 0; bb < kB; ++bb)
    for (int64_t h = 0; h < kHq; ++h)
      for (int64_t i = 0; i < kSq; ++i)
        for (int64_t j = 0; j < kSk; ++j)
          t[((bb * kHq + h) * kSk + j) * kSq + i] = m.add[m.At(bb, h, i, j)];
  std::vector<int64_t> t_strides = {kHq * kSk * kSq, kSk * kSq, 1, kSq};
  DLTensor strided = Tensor(t.data(), kDLFloat, 32, &full, &t_strides);
  DLTensor compact = Tensor(m.add.data(), kDLFloat, 32, &full);
  a.attn_mask = &strided;
  c.attn_mask = &compact;
  ExpectOut(Call<float>(a, q, k, v, w), Call<float>(c, q, k, v, w), 0.0);
  // -inf additive (0 elsewhere) against bool and uint8.
  std::vector<float> ninf(m.add.size());
  for (size_t n = 0; n < ninf.size(); ++n) ninf[n] = m.allowed[n] ? 0.0f : -INFINITY;
  DLTensor ta = Tensor(ninf.data(), kDLFloat, 32, &full);
  DLTensor tb = Tensor(m.allowed.data(), kDLBoolCode, 8, &full);
  DLTensor tu = Tensor(m.allowed.data(), kDLUInt, 8, &full);
  a.attn_mask = &ta;
  b.attn_mask = &tb;
  c.attn_mask = &tu;
  const Out xa = Call<float>(a, q, k, v, w), xb = Call<float>(b, q, k, v, w),
            xc = Call<float>(c, q, k, v, w);
  ExpectOut(xa, xb, 1e-6);
  ExpectOut(xb, xc, 0.0);
}

// kv_lengths with a causal mask (default positions: each sequence's queries are the last
// kSq of its kv_lengths[b] keys) equals the packed layout holding only the keys used.
// 1e-6 relative: the padded and packed calls tile the same keys differently (float32).
TEST(AttentionKvLengthsC, MatchesPackedKeys) {
  const std::vector<int64_t> lens = {7, 10};
  const auto q = Draw<float>(kB * kSq * kHq * kD, 21), k = Draw<float>(kB * kSk * kHk * kD, 22),
             v = Draw<float>(kB * kSk * kHk * kD, 23), w = Draw<float>(q.size(), 24);
  std::vector<float> kp, vp;
  for (int64_t b = 0; b < kB; ++b) {
    const size_t from = static_cast<size_t>(b * kSk * kHk * kD);
    kp.insert(kp.end(), k.begin() + from, k.begin() + from + lens[b] * kHk * kD);
    vp.insert(vp.end(), v.begin() + from, v.begin() + from + lens[b] * kHk * kD);
  }
  std::vector<int64_t> cu_q = {0, kSq, 2 * kSq}, cu_k = {0, lens[0], lens[0] + lens[1]};
  std::vector<int64_t> qs = {kB, kSq, kHq, kD}, ks = {kB, kSk, kHk, kD}, ls = {kB},
                       pq = {kB * kSq, kHq, kD}, pk = {cu_k.back(), kHk, kD}, cs = {3};
  std::vector<float> o1(q.size()), o2(q.size()), dk1(k.size()), dk2(kp.size()), dq1(q.size()),
      dq2(q.size()), dv1(k.size()), dv2(kp.size());
  gpe_attention_options a = GPE_ATTENTION_OPTIONS_INIT, p = a;
  a.causal = p.causal = 1;
  DLTensor tl = Tensor(lens.data(), kDLInt, 64, &ls);
  a.kv_lengths = &tl;
  DLTensor tcq = Tensor(cu_q.data(), kDLInt, 64, &cs), tck = Tensor(cu_k.data(), kDLInt, 64, &cs);
  p.cu_seqlens_q = &tcq;
  p.cu_seqlens_k = &tck;
  DLTensor q1 = Tensor(q.data(), kDLFloat, 32, &qs), k1 = Tensor(k.data(), kDLFloat, 32, &ks),
           v1 = Tensor(v.data(), kDLFloat, 32, &ks), w1 = Tensor(w.data(), kDLFloat, 32, &qs),
           to1 = Tensor(o1.data(), kDLFloat, 32, &qs), tdq1 = Tensor(dq1.data(), kDLFloat, 32, &qs),
           tdk1 = Tensor(dk1.data(), kDLFloat, 32, &ks), tdv1 = Tensor(dv1.data(), kDLFloat, 32, &ks);
  DLTensor q2 = Tensor(q.data(), kDLFloat, 32, &pq), k2 = Tensor(kp.data(), kDLFloat, 32, &pk),
           v2 = Tensor(vp.data(), kDLFloat, 32, &pk), w2 = Tensor(w.data(), kDLFloat, 32, &pq),
           to2 = Tensor(o2.data(), kDLFloat, 32, &pq), tdq2 = Tensor(dq2.data(), kDLFloat, 32, &pq),
           tdk2 = Tensor(dk2.data(), kDLFloat, 32, &pk), tdv2 = Tensor(dv2.data(), kDLFloat, 32, &pk);
  ASSERT_EQ(gpe_attention_forward(&a, &q1, &k1, &v1, &to1, nullptr), GPE_OK)
      << gpe_last_error_message();
  ASSERT_EQ(gpe_attention_forward(&p, &q2, &k2, &v2, &to2, nullptr), GPE_OK)
      << gpe_last_error_message();
  ASSERT_EQ(gpe_attention_backward(&a, &q1, &k1, &v1, nullptr, nullptr, &w1, &tdq1, &tdk1, &tdv1),
            GPE_OK)
      << gpe_last_error_message();
  ASSERT_EQ(gpe_attention_backward(&p, &q2, &k2, &v2, nullptr, nullptr, &w2, &tdq2, &tdk2, &tdv2),
            GPE_OK)
      << gpe_last_error_message();
  for (size_t n = 0; n < o1.size(); ++n) {
    EXPECT_NEAR(o1[n], o2[n], 1e-6 * (1 + std::abs(o2[n]))) << n;
    EXPECT_NEAR(dq1[n], dq2[n], 1e-6 * (1 + std::abs(dq2[n]))) << n;
  }
  size_t at = 0;
  for (int64_t b = 0; b < kB; ++b) {
    for (int64_t j = 0; j < kSk; ++j) {
      for (int64_t e = 0; e < kHk * kD; ++e) {
        const size_t n = static_cast<size_t>((b * kSk + j) * kHk * kD + e);
        if (j < lens[b]) {
          EXPECT_NEAR(dk1[n], dk2[at], 1e-6 * (1 + std::abs(dk2[at]))) << n;
          EXPECT_NEAR(dv1[n], dv2[at], 1e-6 * (1 + std::abs(dv2[at]))) << n;
          ++at;
        } else {  // keys past kv_lengths: never read, zero gradient
          EXPECT_EQ(dk1[n], 0.0f) << n;
          EXPECT_EQ(dv1[n], 0.0f) << n;
        }
      }
    }
  }
}

// A paged cache: the keys of a contiguous [kB, kSk, kHk, kD] cache cut into pages of 4
// tokens, stored shuffled among unused pages of NaN in a pool, with kv_lengths; the
// forward equals the contiguous one with the same kv_lengths (1e-6 relative: the paged
// and contiguous calls may take different kernels; float32 arithmetic either way), for
// float64, float32 and bfloat16 / float16 KV caches; the backward refuses it.
template <class KV>
void PagedCase(int q_bits, int kv_code, int kv_bits, const std::vector<KV>& k,
               const std::vector<KV>& v, KV nan) {
  constexpr int64_t kPage = 4, kPerSeq = kSk / kPage, kPool = 9;
  const std::vector<int64_t> lens = {7, kSk};
  const std::vector<int64_t> table = {5, 0, 8, 3, 7, 1};  // [kB, kPerSeq]; 8 unused by seq 0
  std::vector<KV> kpool(kPool * kPage * kHk * kD, nan), vpool(kpool.size(), nan);
  const int64_t row = kPage * kHk * kD;
  for (int64_t b = 0; b < kB; ++b) {
    for (int64_t i = 0; i < kPerSeq; ++i) {
      if (i * kPage >= lens[b]) continue;  // unused pages keep NaN (and table entry 8)
      const int64_t page = table[b * kPerSeq + i];
      std::copy_n(k.begin() + (b * kPerSeq + i) * row, row, kpool.begin() + page * row);
      std::copy_n(v.begin() + (b * kPerSeq + i) * row, row, vpool.begin() + page * row);
    }
  }
  const auto q64 = Draw<double>(kB * kSq * kHq * kD, 31);
  std::vector<float> qf(q64.begin(), q64.end());
  std::vector<double> o1(q64.size()), o2(q64.size());
  std::vector<float> of1(q64.size()), of2(q64.size());
  std::vector<int64_t> qs = {kB, kSq, kHq, kD}, ks = {kB, kSk, kHk, kD},
                       ps = {kPool, kPage, kHk, kD}, ls = {kB}, ts = {kB, kPerSeq};
  const void* qd = q_bits == 64 ? static_cast<const void*>(q64.data()) : qf.data();
  void* od1 = q_bits == 64 ? static_cast<void*>(o1.data()) : of1.data();
  void* od2 = q_bits == 64 ? static_cast<void*>(o2.data()) : of2.data();
  const auto kc = static_cast<DLDataTypeCode>(kv_code);
  DLTensor tq = Tensor(qd, kDLFloat, q_bits, &qs), to1 = Tensor(od1, kDLFloat, q_bits, &qs),
           to2 = Tensor(od2, kDLFloat, q_bits, &qs), tk = Tensor(k.data(), kc, kv_bits, &ks),
           tv = Tensor(v.data(), kc, kv_bits, &ks), tkp = Tensor(kpool.data(), kc, kv_bits, &ps),
           tvp = Tensor(vpool.data(), kc, kv_bits, &ps), tl = Tensor(lens.data(), kDLInt, 64, &ls),
           tt = Tensor(table.data(), kDLInt, 64, &ts);
  for (int causal : {0, 1}) {
    gpe_attention_options a = GPE_ATTENTION_OPTIONS_INIT, p = a;
    a.causal = p.causal = causal;
    a.kv_lengths = p.kv_lengths = &tl;
    p.block_table = &tt;
    ASSERT_EQ(gpe_attention_forward(&a, &tq, &tk, &tv, &to1, nullptr), GPE_OK)
        << gpe_last_error_message();
    ASSERT_EQ(gpe_attention_forward(&p, &tq, &tkp, &tvp, &to2, nullptr), GPE_OK)
        << gpe_last_error_message();
    for (size_t n = 0; n < o1.size(); ++n) {
      const double x = q_bits == 64 ? o1[n] : of1[n], y = q_bits == 64 ? o2[n] : of2[n];
      ASSERT_FALSE(std::isnan(y)) << n;
      EXPECT_NEAR(y, x, 1e-6 * (1 + std::abs(x))) << n;
    }
    if (q_bits == kv_bits) {
      EXPECT_EQ(gpe_attention_backward(&p, &tq, &tkp, &tvp, nullptr, nullptr, &to1, &to2, nullptr,
                                       nullptr),
                GPE_ERROR_INVALID_ARGUMENT);
      EXPECT_TRUE(HasMessage("paged KV cache is for the forward")) << gpe_last_error_message();
    }
  }
}

// A small broadcast kv_lengths (one int64 under stride 0 for the batch) is copied and
// used as the explicit list, bit for bit (0.9.0 took any strides; only views describing
// more than 2^24 entries are refused, bad_inputs_test).
TEST(AttentionKvLengthsC, SmallBroadcastEqualsTheExplicitList) {
  const auto q = Draw<float>(kB * kSq * kHq * kD, 31), k = Draw<float>(kB * kSk * kHk * kD, 32),
             v = Draw<float>(kB * kSk * kHk * kD, 33);
  const std::vector<int64_t> one = {9}, both = {9, 9};
  std::vector<int64_t> qs = {kB, kSq, kHq, kD}, ks = {kB, kSk, kHk, kD}, ls = {kB}, zero = {0};
  std::vector<float> o1(q.size()), o2(q.size());
  DLTensor q1 = Tensor(q.data(), kDLFloat, 32, &qs), k1 = Tensor(k.data(), kDLFloat, 32, &ks),
           v1 = Tensor(v.data(), kDLFloat, 32, &ks), to1 = Tensor(o1.data(), kDLFloat, 32, &qs),
           to2 = Tensor(o2.data(), kDLFloat, 32, &qs);
  DLTensor broadcast = Tensor(const_cast<int64_t*>(one.data()), kDLInt, 64, &ls);
  broadcast.strides = zero.data();
  DLTensor explicit_list = Tensor(const_cast<int64_t*>(both.data()), kDLInt, 64, &ls);
  gpe_attention_options a = GPE_ATTENTION_OPTIONS_INIT, b = a;
  a.kv_lengths = &broadcast;
  b.kv_lengths = &explicit_list;
  ASSERT_EQ(gpe_attention_forward(&a, &q1, &k1, &v1, &to1, nullptr), GPE_OK)
      << gpe_last_error_message();
  ASSERT_EQ(gpe_attention_forward(&b, &q1, &k1, &v1, &to2, nullptr), GPE_OK)
      << gpe_last_error_message();
  EXPECT_EQ(o1, o2);
}

TEST(AttentionPagedC, MatchesContiguousFloat64AndFloat32) {
  const auto k = Draw<double>(kB * kSk * kHk * kD, 32), v = Draw<double>(k.size(), 33);
  PagedCase<double>(64, kDLFloat, 64, k, v, NAN);
  const std::vector<float> kf(k.begin(), k.end()), vf(v.begin(), v.end());
  PagedCase<float>(32, kDLFloat, 32, kf, vf, NAN);
}

TEST(AttentionPagedC, MatchesContiguous16BitKvCaches) {
  std::mt19937_64 rng(34);
  std::uniform_int_distribution<int> frac(0, 127), ex(125, 128), sign(0, 1);
  std::vector<uint16_t> kb(kB * kSk * kHk * kD), vb(kb.size()), kh(kb.size()), vh(kb.size());
  for (size_t n = 0; n < kb.size(); ++n) {
    // bfloat16: sign, exponent 125..128 (values in [1/4, 4)), 7 fraction bits.
    kb[n] = static_cast<uint16_t>(sign(rng) << 15 | ex(rng) << 7 | frac(rng));
    vb[n] = static_cast<uint16_t>(sign(rng) << 15 | ex(rng) << 7 | frac(rng));
    // float16: exponent 13..16 (the same range), 10 fraction bits.
    kh[n] = static_cast<uint16_t>(sign(rng) << 15 | (ex(rng) - 112) << 10 | frac(rng) << 3);
    vh[n] = static_cast<uint16_t>(sign(rng) << 15 | (ex(rng) - 112) << 10 | frac(rng) << 3);
  }
  PagedCase<uint16_t>(32, kDLBfloat, 16, kb, vb, 0x7FC0);  // bfloat16 NaN
  PagedCase<uint16_t>(32, kDLFloat, 16, kh, vh, 0x7E00);   // float16 NaN
}

// A struct of a size before attn_mask (0.8.0's, ending at shaw_value_table; the only
// sizes accepted are the released ones) never reads the new fields: a pointer left past
// its end is ignored.
TEST(AttentionMaskC, OlderStructSizeIgnoresNewFields) {
  const auto q = Draw<float>(kB * kSq * kHq * kD, 41), k = Draw<float>(kB * kSk * kHk * kD, 42),
             v = Draw<float>(kB * kSk * kHk * kD, 43), w = Draw<float>(q.size(), 44);
  gpe_attention_options plain = GPE_ATTENTION_OPTIONS_INIT, old = plain;
  old.struct_size = static_cast<uint32_t>(offsetof(gpe_attention_options, rope));
  const DLTensor* garbage = reinterpret_cast<const DLTensor*>(uintptr_t{8});
  old.attn_mask = garbage;
  old.kv_lengths = garbage;
  old.block_table = garbage;
  ExpectOut(Call<float>(old, q, k, v, w), Call<float>(plain, q, k, v, w), 0.0);
  // 0.9.0's first build ended at sinks (attn_mask was appended within that version), and
  // bindings of it passed that size: accepted, the fields past it ignored.
  gpe_attention_options first = plain;
  first.struct_size = static_cast<uint32_t>(offsetof(gpe_attention_options, attn_mask));
  first.attn_mask = garbage;
  first.kv_lengths = garbage;
  first.block_table = garbage;
  ExpectOut(Call<float>(first, q, k, v, w), Call<float>(plain, q, k, v, w), 0.0);
}

}  // namespace
