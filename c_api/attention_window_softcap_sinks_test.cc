// gpe_attention_options' sliding window, logit softcap and sinks (0.9.0) through gpe.h
// only, against an oracle written here from the formulas (attention/descriptor.h, "WINDOW,
// SOFTCAP AND SINKS"): forward o and lse, backward dq, dk, dv and the sinks' gradient,
// float64 (the exact reference) and float32 (the kernels), padded with the KV-cache
// positions and packed at explicit positions with rows left empty by the window; a
// float16 KV cache; the struct versions (a zeroed struct, 0.8.0's size, 0.4.0's
// gpe_attention_param_grads).
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "c_api/include/gpe/gpe.h"
#include "c_api/test_util.h"
#include "gtest/gtest.h"

namespace {

using gpe::c_api_test::Bits;
using gpe::c_api_test::Draw;
using gpe::c_api_test::Tensor;

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// One configuration of the new options (and the older ones they combine with).
struct Config {
  std::string name;
  bool causal = false;
  bool window = false;
  int64_t left = -1, right = -1;
  double softcap = 0.0;  // 0: none
  bool sinks = false;
  bool alibi = false;  // causal ALiBi, Press et al.'s slopes: added after the softcap
};

std::vector<Config> Configs() {
  std::vector<Config> c(8);
  c[0] = {"mistral window (causal, left 3)", true, true, 3, -1};
  c[1] = {"two-sided window (2, 1)", false, true, 2, 1};
  c[2] = {"diagonal window (0, 0)", false, true, 0, 0};
  c[3] = {"softcap 5, causal", true, false, -1, -1, 5.0};
  c[4] = {"sinks, causal", true, false, -1, -1, 0.0, true};
  c[5] = {"sinks, no mask", false, false, -1, -1, 0.0, true};
  c[6] = {"window + softcap + sinks + alibi", true, true, 5, -1, 20.0, true, true};
  c[7] = {"right-only window (-1, 2), softcap 3", false, true, -1, 2, 3.0};
  return c;
}

// A problem: padded [batch, s, h, d] with the default positions, or packed [tokens, h, d]
// with explicit positions (gaps leave some rows without keys in a window).
struct Problem {
  bool packed = false;
  int64_t batch = 2, sq = 7, sk = 11, hq = 4, hk = 2, d = 16;
  std::vector<int64_t> cu_q, cu_k, qpos, kpos;  // packed: explicit
  int64_t tq() const { return packed ? cu_q.back() : batch * sq; }
  int64_t tk() const { return packed ? cu_k.back() : batch * sk; }
  int64_t nseq() const { return packed ? static_cast<int64_t>(cu_q.size()) - 1 : batch; }
  int64_t q0(int64_t b) const { return packed ? cu_q[b] : b * sq; }
  int64_t q1(int64_t b) const { return packed ? cu_q[b + 1] : (b + 1) * sq; }
  int64_t k0(int64_t b) const { return packed ? cu_k[b] : b * sk; }
  int64_t k1(int64_t b) const { return packed ? cu_k[b + 1] : (b + 1) * sk; }
  int64_t QPos(int64_t t) const {
    if (packed) return qpos[t];
    return sk - sq + t % sq;  // the last sq of the keys' positions
  }
  int64_t KPos(int64_t t) const { return packed ? kpos[t] : t % sk; }
  std::vector<int64_t> QShape() const {
    return packed ? std::vector<int64_t>{tq(), hq, d} : std::vector<int64_t>{batch, sq, hq, d};
  }
  std::vector<int64_t> KShape() const {
    return packed ? std::vector<int64_t>{tk(), hk, d} : std::vector<int64_t>{batch, sk, hk, d};
  }
};

Problem Padded() { return Problem{}; }

Problem Packed() {
  Problem p;
  p.packed = true;
  p.cu_q = {0, 3, 3, 8};
  p.cu_k = {0, 6, 8, 14};
  // Sequence 2's query at 40 sees no key in any window (its keys lie at <= 23).
  p.qpos = {3, 4, 5, 20, 21, 22, 23, 40};
  p.kpos = {0, 1, 2, 3, 4, 5, 7, 9, 17, 18, 19, 21, 22, 23};
  return p;
}

bool Allowed(const Config& c, int64_t pq, int64_t pk) {
  if (c.causal && pk > pq) return false;
  if (!c.window) return true;
  if (c.left >= 0 && pk < pq - c.left) return false;
  if (c.right >= 0 && pk > pq + c.right) return false;
  return true;
}

// Outputs of one call (and, from the backward, the gradients; sink_grad float64).
template <class T>
struct Out {
  std::vector<T> o, lse, dq, dk, dv;
  std::vector<double> sink_grad;
};

// The formulas in double: x = scale q.k, s = cap(x) + bias, Z = sum e^s (+ e^z),
// o = sum e^s v / Z, lse = ln Z; backward through p = e^{s - lse}: dS = p (dP - D),
// dx = dS (1 - tanh^2(x / c)) with a softcap, dz_h = -sum_i e^{z_h - lse_i} D_i.
Out<double> Oracle(const Problem& p, const Config& c, const std::vector<double>& q,
                   const std::vector<double>& k, const std::vector<double>& v,
                   const std::vector<double>& w, const std::vector<float>& z) {
  const int64_t d = p.d, hq = p.hq, hk = p.hk;
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  Out<double> r;
  r.o.assign(q.size(), 0.0);
  r.lse.assign(p.tq() * hq, 0.0);
  r.dq.assign(q.size(), 0.0);
  r.dk.assign(k.size(), 0.0);
  r.dv.assign(v.size(), 0.0);
  r.sink_grad.assign(hq, 0.0);
  auto qrow = [&](int64_t t, int64_t h) { return &q[(t * hq + h) * d]; };
  auto krow = [&](const std::vector<double>& x, int64_t t, int64_t g) { return &x[(t * hk + g) * d]; };
  for (int64_t b = 0; b < p.nseq(); ++b) {
    for (int64_t h = 0; h < hq; ++h) {
      const int64_t g = h / (hq / hk);
      const double slope = std::pow(2.0, -8.0 * (h + 1) / hq);
      for (int64_t i = p.q0(b); i < p.q1(b); ++i) {
        const int64_t pq = p.QPos(i);
        std::vector<int64_t> keys;
        std::vector<double> x, s;
        for (int64_t j = p.k0(b); j < p.k1(b); ++j) {
          if (!Allowed(c, pq, p.KPos(j))) continue;
          double dot = 0.0;
          for (int64_t e = 0; e < d; ++e) dot += qrow(i, h)[e] * krow(k, j, g)[e];
          const double xi = scale * dot;
          double si = c.softcap > 0 ? c.softcap * std::tanh(xi / c.softcap) : xi;
          if (c.alibi) si -= slope * static_cast<double>(pq - p.KPos(j));
          keys.push_back(j);
          x.push_back(xi);
          s.push_back(si);
        }
        double m = c.sinks ? static_cast<double>(z[h]) : kNegInf;
        for (double si : s) m = std::max(m, si);
        double zsum = c.sinks ? std::exp(z[h] - m) : 0.0;
        for (double si : s) zsum += std::exp(si - m);
        const double lse = keys.empty() && !c.sinks ? kNegInf : m + std::log(zsum);
        r.lse[i * hq + h] = lse;
        double* o = &r.o[(i * hq + h) * d];
        std::vector<double> pr(keys.size());
        for (size_t n = 0; n < keys.size(); ++n) {
          pr[n] = std::exp(s[n] - lse);
          for (int64_t e = 0; e < d; ++e) o[e] += pr[n] * krow(v, keys[n], g)[e];
        }
        const double* dO = &w[(i * hq + h) * d];
        double dsum = 0.0;
        for (int64_t e = 0; e < d; ++e) dsum += dO[e] * o[e];
        if (c.sinks) r.sink_grad[h] -= std::exp(z[h] - lse) * dsum;
        for (size_t n = 0; n < keys.size(); ++n) {
          const int64_t j = keys[n];
          double dp = 0.0;
          for (int64_t e = 0; e < d; ++e) dp += dO[e] * krow(v, j, g)[e];
          double dx = pr[n] * (dp - dsum);
          if (c.softcap > 0) {
            const double t = std::tanh(x[n] / c.softcap);
            dx *= 1.0 - t * t;
          }
          for (int64_t e = 0; e < d; ++e) {
            r.dq[(i * hq + h) * d + e] += scale * dx * krow(k, j, g)[e];
            r.dk[(j * hk + g) * d + e] += scale * dx * qrow(i, h)[e];
            r.dv[(j * hk + g) * d + e] += pr[n] * dO[e];
          }
        }
      }
    }
  }
  return r;
}

// The C options for (p, c), with the tensors they point to.
struct Options {
  gpe_attention_options o = GPE_ATTENTION_OPTIONS_INIT;
  std::vector<std::vector<int64_t>> shapes;
  std::vector<DLTensor> tensors;
  gpe_bias* alibi = nullptr;
  Options(const Problem& p, const Config& c, const std::vector<float>& z) {
    shapes.reserve(8);
    tensors.reserve(8);
    auto add = [&](const void* data, DLDataTypeCode code, int bits, std::vector<int64_t> shape) {
      shapes.push_back(std::move(shape));
      tensors.push_back(Tensor(data, code, bits, &shapes.back()));
      return &tensors.back();
    };
    o.causal = c.causal ? 1 : 0;
    if (c.window) {
      o.window = 1;
      o.window_left = c.left;
      o.window_right = c.right;
    }
    o.softcap = c.softcap;
    if (c.sinks) o.sinks = add(z.data(), kDLFloat, 32, {p.hq});
    if (c.alibi) {
      gpe_alibi_options ao = GPE_ALIBI_OPTIONS_INIT;
      ao.num_heads = p.hq;
      EXPECT_EQ(gpe_bias_create_alibi(&ao, &alibi), GPE_OK) << gpe_last_error_message();
      o.bias = alibi;
    }
    if (p.packed) {
      o.cu_seqlens_q = add(p.cu_q.data(), kDLInt, 64, {static_cast<int64_t>(p.cu_q.size())});
      o.cu_seqlens_k = add(p.cu_k.data(), kDLInt, 64, {static_cast<int64_t>(p.cu_k.size())});
      o.q_positions = add(p.qpos.data(), kDLInt, 64, {p.tq()});
      o.k_positions = add(p.kpos.data(), kDLInt, 64, {p.tk()});
    }
  }
  ~Options() { gpe_bias_destroy(alibi); }
};

// Forward, then backward_with_parameters (o, lse given) with d_sinks when there are sinks.
template <class T>
Out<T> Call(const Problem& p, const gpe_attention_options& opt, const std::vector<T>& q,
            const std::vector<T>& k, const std::vector<T>& v, const std::vector<T>& w) {
  Out<T> r;
  r.o.resize(q.size());
  r.lse.resize(p.tq() * p.hq);
  r.dq.resize(q.size());
  r.dk.resize(k.size());
  r.dv.resize(v.size());
  r.sink_grad.assign(p.hq, 0.0);
  std::vector<int64_t> qs = p.QShape(), ks = p.KShape(), ls = {p.tq(), p.hq}, gs = {p.hq};
  constexpr int b = Bits<T>();
  DLTensor tq = Tensor(q.data(), kDLFloat, b, &qs), tk = Tensor(k.data(), kDLFloat, b, &ks),
           tv = Tensor(v.data(), kDLFloat, b, &ks), to = Tensor(r.o.data(), kDLFloat, b, &qs),
           tl = Tensor(r.lse.data(), kDLFloat, b, &ls), tw = Tensor(w.data(), kDLFloat, b, &qs),
           tdq = Tensor(r.dq.data(), kDLFloat, b, &qs), tdk = Tensor(r.dk.data(), kDLFloat, b, &ks),
           tdv = Tensor(r.dv.data(), kDLFloat, b, &ks),
           tgs = Tensor(r.sink_grad.data(), kDLFloat, 64, &gs);
  EXPECT_EQ(gpe_attention_forward(&opt, &tq, &tk, &tv, &to, &tl), GPE_OK)
      << gpe_last_error_message();
  gpe_attention_param_grads g = GPE_ATTENTION_PARAM_GRADS_INIT;
  if (opt.sinks != nullptr) g.d_sinks = &tgs;
  EXPECT_EQ(gpe_attention_backward_with_parameters(&opt, &tq, &tk, &tv, &to, &tl, &tw, &tdq, &tdk,
                                                   &tdv, &g),
            GPE_OK)
      << gpe_last_error_message();
  return r;
}

template <class T>
void ExpectNear(const std::vector<T>& got, const std::vector<double>& want, double tol,
                const char* name) {
  ASSERT_EQ(got.size(), want.size()) << name;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isinf(want[i])) {
      ASSERT_EQ(static_cast<double>(got[i]), want[i]) << name << " " << i;
    } else {
      ASSERT_NEAR(static_cast<double>(got[i]), want[i], tol) << name << " " << i;
    }
  }
}

// Tolerances. float64: the reference against the oracle, both double, differing in the
// order of roundings only (~1e-15 on these O(1) outputs, ~1e-13 on gradients); 1e-11
// fails for any float32 arithmetic or any wrong term. float32: the kernels' float32
// scores (up to |x| ~ 10 with q drawn at scale 2) and sums carry ~1e-6 relative error
// each; 5e-5 on o and lse and 2e-4 on the gradients and the sinks' gradient (sums of
// <= 14 and <= 2 x 8 terms of O(1)) leave that margin, while a window off by one key, a
// cap applied after the bias or a sink left out of the denominator moves them by >= 1e-2.
constexpr double kTol64 = 1e-11, kTol32 = 5e-5, kTol32Grad = 2e-4;

template <class T>
void CheckConfig(const Problem& p, const Config& c, double tol, double grad_tol) {
  SCOPED_TRACE(c.name + (p.packed ? " packed " : " padded ") + (Bits<T>() == 64 ? "f64" : "f32"));
  // float-representable inputs, so both dtypes and the oracle see the same values.
  const std::vector<float> qf = Draw<float>(p.tq() * p.hq * p.d, 1, 2.0),
                           kf = Draw<float>(p.tk() * p.hk * p.d, 2, 1.0),
                           vf = Draw<float>(p.tk() * p.hk * p.d, 3, 1.0),
                           wf = Draw<float>(p.tq() * p.hq * p.d, 4, 1.0);
  // Sink logits of both signs, one large enough to take most of its rows' mass.
  const std::vector<float> z = {0.5f, -2.0f, 3.0f, 1.25f};
  ASSERT_EQ(static_cast<int64_t>(z.size()), p.hq);
  const std::vector<double> qd(qf.begin(), qf.end()), kd(kf.begin(), kf.end()),
      vd(vf.begin(), vf.end()), wd(wf.begin(), wf.end());
  const Out<double> want = Oracle(p, c, qd, kd, vd, wd, z);
  Options opt(p, c, z);
  const std::vector<T> q(qf.begin(), qf.end()), k(kf.begin(), kf.end()), v(vf.begin(), vf.end()),
      w(wf.begin(), wf.end());
  const Out<T> got = Call<T>(p, opt.o, q, k, v, w);
  ExpectNear(got.o, want.o, tol, "o");
  ExpectNear(got.lse, want.lse, tol, "lse");
  ExpectNear(got.dq, want.dq, grad_tol, "dq");
  ExpectNear(got.dk, want.dk, grad_tol, "dk");
  ExpectNear(got.dv, want.dv, grad_tol, "dv");
  if (c.sinks) ExpectNear(got.sink_grad, want.sink_grad, grad_tol, "d_sinks");
}

TEST(AttentionWindowSoftcapSinks, PaddedMatchesOracle) {
  for (const Config& c : Configs()) {
    CheckConfig<double>(Padded(), c, kTol64, kTol64);
    CheckConfig<float>(Padded(), c, kTol32, kTol32Grad);
  }
}

// The largest cap (attention/descriptor.h's kMaxSoftcap, 1e30; a larger one is no cap):
// the float32 kernels give the oracle's o, lse and gradients there, as float64 does;
// above it every dtype refuses the call (the float kernels gave every score 0 from ~1e37
// and NaN rows from 2.4e38 with GPE_OK).
TEST(AttentionWindowSoftcapSinks, SoftcapAtItsBoundIsExactAndAboveIsRefused) {
  Config c{"softcap 1e30 (the bound), causal", true, false, -1, -1, 1e30};
  CheckConfig<double>(Padded(), c, kTol64, kTol64);
  CheckConfig<float>(Padded(), c, kTol32, kTol32Grad);
  const Problem p = Padded();
  for (double cap : {std::nextafter(1e30, 2e30), 1e37, 2.4e38}) {
    c.softcap = cap;
    const std::vector<float> z(p.hq, 0.0f);
    Options opt(p, c, z);
    std::vector<float> q(p.tq() * p.hq * p.d, 0.5f), k(p.tk() * p.hk * p.d, 0.25f), o(q.size());
    std::vector<int64_t> qs = p.QShape(), ks = p.KShape();
    DLTensor tq = Tensor(q.data(), kDLFloat, 32, &qs), tk = Tensor(k.data(), kDLFloat, 32, &ks),
             to = Tensor(o.data(), kDLFloat, 32, &qs);
    EXPECT_EQ(gpe_attention_forward(&opt.o, &tq, &tk, &tk, &to, nullptr),
              GPE_ERROR_INVALID_ARGUMENT)
        << cap;
    EXPECT_NE(std::string(gpe_last_error_message()).find("softcap must be at most 1e+30"),
              std::string::npos)
        << gpe_last_error_message();
  }
}

TEST(AttentionWindowSoftcapSinks, PackedWithEmptyRowsMatchesOracle) {
  for (const Config& c : Configs()) {
    CheckConfig<double>(Packed(), c, kTol64, kTol64);
    CheckConfig<float>(Packed(), c, kTol32, kTol32Grad);
  }
}

TEST(AttentionWindowSoftcapSinks, OracleSeesEveryOption) {
  // The comparisons above can fail: each option changes the oracle's outputs by far more
  // than the tolerances (the same inputs without the option).
  const Problem p = Padded();
  const std::vector<float> qf = Draw<float>(p.tq() * p.hq * p.d, 1, 2.0),
                           kf = Draw<float>(p.tk() * p.hk * p.d, 2, 1.0),
                           vf = Draw<float>(p.tk() * p.hk * p.d, 3, 1.0);
  const std::vector<double> q(qf.begin(), qf.end()), k(kf.begin(), kf.end()),
      v(vf.begin(), vf.end()), w(q.size(), 1.0);
  const std::vector<float> z = {0.5f, -2.0f, 3.0f, 1.25f};
  Config plain{"plain", true};
  const Out<double> base = Oracle(p, plain, q, k, v, w, z);
  for (const Config& c : {Configs()[0], Configs()[3], Configs()[4]}) {
    const Out<double> other = Oracle(p, c, q, k, v, w, z);
    double diff = 0.0;
    for (size_t i = 0; i < base.o.size(); ++i) diff = std::max(diff, std::abs(base.o[i] - other.o[i]));
    EXPECT_GT(diff, 1e-2) << c.name;
  }
}

TEST(AttentionWindowSoftcapSinks, Float16KvCacheTakesTheOptions) {
  // float32 q against a float16 KV cache equals the float32 call on the widened cache
  // (attention.h): the same float32 kernels, summation order aside (1e-5 on O(1) outputs;
  // a dropped option moves them by >= 1e-2).
  const Problem p = Padded();
  const Config c = Configs()[6];
  const std::vector<float> z = {0.5f, -2.0f, 3.0f, 1.25f};
  const std::vector<float> q = Draw<float>(p.tq() * p.hq * p.d, 5, 2.0);
  std::vector<float> k = Draw<float>(p.tk() * p.hk * p.d, 6, 1.0),
                     v = Draw<float>(p.tk() * p.hk * p.d, 7, 1.0);
  // Values on float16's grid (multiples of 2^-8 in [-4, 4]): the widening is exact.
  for (std::vector<float>* x : {&k, &v}) {
    for (float& e : *x) e = std::round(std::clamp(e, -4.0f, 4.0f) * 256.0f) / 256.0f;
  }
  auto to_half = [](float f) {  // exact for the values above
    if (f == 0.0f) return uint16_t{0};
    const uint16_t sign = f < 0 ? 0x8000 : 0;
    f = std::abs(f);
    int e = 0;
    const float m = std::frexp(f, &e);  // f = m 2^e, m in [0.5, 1)
    if (e - 1 < -14) {  // subnormal: f / 2^-24
      return static_cast<uint16_t>(sign | static_cast<uint16_t>(f * 16777216.0f));
    }
    const uint16_t exp = static_cast<uint16_t>(e - 1 + 15);
    const uint16_t frac = static_cast<uint16_t>((m * 2.0f - 1.0f) * 1024.0f);
    return static_cast<uint16_t>(sign | (exp << 10) | frac);
  };
  std::vector<uint16_t> kh(k.size()), vh(v.size());
  for (size_t i = 0; i < k.size(); ++i) kh[i] = to_half(k[i]);
  for (size_t i = 0; i < v.size(); ++i) vh[i] = to_half(v[i]);
  Options opt(p, c, z);
  std::vector<float> o32(q.size()), o16(q.size());
  std::vector<int64_t> qs = p.QShape(), ks = p.KShape();
  DLTensor tq = Tensor(q.data(), kDLFloat, 32, &qs), tk = Tensor(k.data(), kDLFloat, 32, &ks),
           tv = Tensor(v.data(), kDLFloat, 32, &ks), tkh = Tensor(kh.data(), kDLFloat, 16, &ks),
           tvh = Tensor(vh.data(), kDLFloat, 16, &ks), to32 = Tensor(o32.data(), kDLFloat, 32, &qs),
           to16 = Tensor(o16.data(), kDLFloat, 32, &qs);
  ASSERT_EQ(gpe_attention_forward(&opt.o, &tq, &tk, &tv, &to32, nullptr), GPE_OK)
      << gpe_last_error_message();
  ASSERT_EQ(gpe_attention_forward(&opt.o, &tq, &tkh, &tvh, &to16, nullptr), GPE_OK)
      << gpe_last_error_message();
  for (size_t i = 0; i < o32.size(); ++i) ASSERT_NEAR(o16[i], o32[i], 1e-5) << i;
  Options none(p, Config{"plain", true}, z);
  std::vector<float> o_plain(q.size());
  DLTensor top = Tensor(o_plain.data(), kDLFloat, 32, &qs);
  ASSERT_EQ(gpe_attention_forward(&none.o, &tq, &tkh, &tvh, &top, nullptr), GPE_OK);
  double diff = 0.0;
  for (size_t i = 0; i < o16.size(); ++i) diff = std::max<double>(diff, std::abs(o16[i] - o_plain[i]));
  EXPECT_GT(diff, 1e-2);
}

TEST(AttentionWindowSoftcapSinks, OlderAndZeroedStructsMeanNone) {
  // A zeroed struct (memset, struct_size set) and 0.8.0's size (the fields beyond it not
  // read, whatever the caller's memory holds there) give what GPE_ATTENTION_OPTIONS_INIT
  // gives: bit-identical outputs (the same call).
  const Problem p = Padded();
  const std::vector<float> q = Draw<float>(p.tq() * p.hq * p.d, 8, 1.0),
                           k = Draw<float>(p.tk() * p.hk * p.d, 9, 1.0);
  std::vector<float> want(q.size()), got(q.size());
  std::vector<int64_t> qs = p.QShape(), ks = p.KShape();
  DLTensor tq = Tensor(q.data(), kDLFloat, 32, &qs), tk = Tensor(k.data(), kDLFloat, 32, &ks),
           tw = Tensor(want.data(), kDLFloat, 32, &qs), tg = Tensor(got.data(), kDLFloat, 32, &qs);
  gpe_attention_options init = GPE_ATTENTION_OPTIONS_INIT;
  init.causal = 1;
  ASSERT_EQ(gpe_attention_forward(&init, &tq, &tk, &tk, &tw, nullptr), GPE_OK);
  gpe_attention_options zeroed;
  std::memset(&zeroed, 0, sizeof zeroed);
  zeroed.struct_size = sizeof zeroed;
  zeroed.causal = 1;
  zeroed.rope_base = 10000.0;
  ASSERT_EQ(gpe_attention_forward(&zeroed, &tq, &tk, &tk, &tg, nullptr), GPE_OK)
      << gpe_last_error_message();
  EXPECT_EQ(got, want);
  gpe_attention_options old = init;
  old.struct_size = offsetof(gpe_attention_options, rope);
  old.window = 7;  // beyond 0.8.0's struct: not read
  old.softcap = -1.0;
  ASSERT_EQ(gpe_attention_forward(&old, &tq, &tk, &tk, &tg, nullptr), GPE_OK)
      << gpe_last_error_message();
  EXPECT_EQ(got, want);
  // gpe_attention_param_grads of 0.4.0 (no d_sinks) is still accepted.
  std::vector<float> dq(q.size());
  DLTensor tdq = Tensor(dq.data(), kDLFloat, 32, &qs);
  gpe_attention_param_grads g = GPE_ATTENTION_PARAM_GRADS_INIT;
  g.struct_size = offsetof(gpe_attention_param_grads, d_sinks);
  EXPECT_EQ(gpe_attention_backward_with_parameters(&init, &tq, &tk, &tk, nullptr, nullptr, &tq,
                                                   &tdq, nullptr, nullptr, &g),
            GPE_OK)
      << gpe_last_error_message();
}

TEST(AttentionWindowSoftcapSinks, Bfloat16GivesTheSinkGradientOfFloat32) {
  // The sinks' gradient is formed in double from o, lse and dL/do: a bfloat16 call and a
  // float32 call on the widened tensors (the same o, lse and dL/do values) agree exactly.
  const Problem p = Padded();
  std::vector<uint16_t> x(p.tq() * p.hq * p.d), kv(p.tk() * p.hk * p.d), dq(x.size()),
      o(x.size());
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<uint16_t>(0x3F00 + (i * 37) % 160);
  for (size_t i = 0; i < kv.size(); ++i) kv[i] = static_cast<uint16_t>(0x3E80 + (i * 53) % 200);
  std::vector<float> z = {0.5f, -2.0f, 3.0f, 1.25f}, lse(p.tq() * p.hq);
  std::vector<double> gs(p.hq, 9.0), gs32(p.hq, 9.0);
  std::vector<int64_t> qs = p.QShape(), ks = p.KShape(), ls = {p.tq(), p.hq}, hs = {p.hq};
  DLTensor tq = Tensor(x.data(), kDLBfloat, 16, &qs), tk = Tensor(kv.data(), kDLBfloat, 16, &ks),
           to = Tensor(o.data(), kDLBfloat, 16, &qs), tl = Tensor(lse.data(), kDLFloat, 32, &ls),
           tdq = Tensor(dq.data(), kDLBfloat, 16, &qs), tgs = Tensor(gs.data(), kDLFloat, 64, &hs);
  Options opt(p, Configs()[6], z);
  ASSERT_EQ(gpe_attention_forward(&opt.o, &tq, &tk, &tk, &to, &tl), GPE_OK)
      << gpe_last_error_message();
  gpe_attention_param_grads g = GPE_ATTENTION_PARAM_GRADS_INIT;
  g.d_sinks = &tgs;
  ASSERT_EQ(gpe_attention_backward_with_parameters(&opt.o, &tq, &tk, &tk, &to, &tl, &tq, &tdq,
                                                   nullptr, nullptr, &g),
            GPE_OK)
      << gpe_last_error_message();
  auto widen = [](const std::vector<uint16_t>& b) {
    std::vector<float> f(b.size());
    for (size_t i = 0; i < b.size(); ++i) {
      const uint32_t bits = static_cast<uint32_t>(b[i]) << 16;
      std::memcpy(&f[i], &bits, sizeof(float));
    }
    return f;
  };
  std::vector<float> xf = widen(x), kvf = widen(kv), of = widen(o), dqf(xf.size());
  DLTensor fq = Tensor(xf.data(), kDLFloat, 32, &qs), fk = Tensor(kvf.data(), kDLFloat, 32, &ks),
           fo = Tensor(of.data(), kDLFloat, 32, &qs), fdq = Tensor(dqf.data(), kDLFloat, 32, &qs),
           fgs = Tensor(gs32.data(), kDLFloat, 64, &hs);
  g.d_sinks = &fgs;
  ASSERT_EQ(gpe_attention_backward_with_parameters(&opt.o, &fq, &fk, &fk, &fo, &tl, &fq, &fdq,
                                                   nullptr, nullptr, &g),
            GPE_OK)
      << gpe_last_error_message();
  for (int64_t h = 0; h < p.hq; ++h) {
    EXPECT_EQ(gs[h], gs32[h]) << h;
    EXPECT_NE(gs[h], 0.0) << h;  // every head has rows that see its sink
  }
}

}  // namespace
