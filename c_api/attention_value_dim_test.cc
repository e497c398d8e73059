// A value head size of its own through gpe.h (since 0.10.0): v, o, d_o and dv end in
// head_dim_v, q, k, dq and dk in head_dim. The float64 call (the exact reference) equals
// the call with the narrower side zero-padded (an identity: zero value columns give zero
// output columns, zero q and k components keep every dot product, the scale given
// explicitly); float32 (the kernels) matches float64; Shaw value tables take head_dim_v
// columns; bad shapes are refused with a message.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "c_api/include/gpe/gpe.h"
#include "c_api/test_util.h"
#include "gtest/gtest.h"

namespace {

using gpe::c_api_test::Bits;
using gpe::c_api_test::Draw;
using gpe::c_api_test::HasMessage;
using gpe::c_api_test::Tensor;

constexpr int64_t kBatch = 2, kSq = 5, kSk = 9, kHq = 4, kHk = 2, kShawK = 2;

// Rows of width n into rows of width w (zeros after).
template <class T>
std::vector<T> Pad(const std::vector<T>& x, int64_t n, int64_t w) {
  std::vector<T> y(x.size() / n * w, T(0));
  for (size_t r = 0; r < x.size() / n; ++r) std::copy_n(x.begin() + r * n, n, y.begin() + r * w);
  return y;
}

template <class T>
struct Result {
  std::vector<T> o, lse, dq, dk, dv;
  std::vector<double> dav;  // d_shaw_value_table
};

// Forward and backward of one problem (q, k [.., d], v, w [.., dv]), causal, GQA, sinks and
// a Shaw value table of dv columns.
template <class T>
Result<T> Call(int64_t d, int64_t dv, const std::vector<T>& q, const std::vector<T>& k,
              const std::vector<T>& v, const std::vector<T>& w, const std::vector<double>& table,
              const std::vector<float>& sinks) {
  constexpr DLDataTypeCode kF = kDLFloat;
  std::vector<int64_t> qs = {kBatch, kSq, kHq, d}, ks = {kBatch, kSk, kHk, d},
                       vs = {kBatch, kSk, kHk, dv}, os = {kBatch, kSq, kHq, dv},
                       ls = {kBatch * kSq, kHq}, ts = {2 * kShawK + 1, dv}, zs = {kHq};
  Result<T> r;
  r.o.assign(kBatch * kSq * kHq * dv, T(0));
  r.lse.assign(kBatch * kSq * kHq, T(0));
  r.dq.assign(q.size(), T(0));
  r.dk.assign(k.size(), T(0));
  r.dv.assign(v.size(), T(0));
  r.dav.assign(table.size(), 0.0);
  DLTensor tq = Tensor(q.data(), kF, Bits<T>(), &qs), tk = Tensor(k.data(), kF, Bits<T>(), &ks),
           tv = Tensor(v.data(), kF, Bits<T>(), &vs), to = Tensor(r.o.data(), kF, Bits<T>(), &os),
           tl = Tensor(r.lse.data(), kF, Bits<T>(), &ls), tw = Tensor(w.data(), kF, Bits<T>(), &os),
           tdq = Tensor(r.dq.data(), kF, Bits<T>(), &qs),
           tdk = Tensor(r.dk.data(), kF, Bits<T>(), &ks),
           tdv = Tensor(r.dv.data(), kF, Bits<T>(), &vs),
           tt = Tensor(table.data(), kF, 64, &ts), tdt = Tensor(r.dav.data(), kF, 64, &ts),
           tz = Tensor(sinks.data(), kF, 32, &zs);
  gpe_attention_options opt = GPE_ATTENTION_OPTIONS_INIT;
  opt.causal = 1;
  opt.softmax_scale = 0.4;
  opt.shaw_max_distance = kShawK;
  opt.shaw_value_table = &tt;
  opt.sinks = &tz;
  EXPECT_EQ(gpe_attention_forward(&opt, &tq, &tk, &tv, &to, &tl), GPE_OK)
      << gpe_last_error_message();
  EXPECT_EQ(gpe_attention_backward_v2(&opt, &tq, &tk, &tv, &to, &tl, &tw, &tdq, &tdk, &tdv,
                                      nullptr, &tdt),
            GPE_OK)
      << gpe_last_error_message();
  return r;
}

TEST(AttentionValueDim, Float64EqualsZeroPaddedCallAndFloat32MatchesIt) {
  for (auto [d, dv] : {std::pair<int64_t, int64_t>{24, 16}, {8, 20}}) {
    SCOPED_TRACE(testing::Message() << "d " << d << " dv " << dv);
    const int64_t w = std::max(d, dv);
    const std::vector<double> q = Draw<double>(kBatch * kSq * kHq * d, 1),
                              k = Draw<double>(kBatch * kSk * kHk * d, 2),
                              v = Draw<double>(kBatch * kSk * kHk * dv, 3),
                              g = Draw<double>(kBatch * kSq * kHq * dv, 4),
                              table = Draw<double>((2 * kShawK + 1) * dv, 5, 0.5);
    const std::vector<float> sinks = {0.3f, -1.0f, 0.0f, 2.0f};
    const Result<double> got = Call<double>(d, dv, q, k, v, g, table, sinks);
    const Result<double> pad = Call<double>(w, w, Pad(q, d, w), Pad(k, d, w), Pad(v, dv, w),
                                           Pad(g, dv, w), Pad(table, dv, w), sinks);
    // The same arithmetic up to additions of zeros: 1e-13 on O(1) values.
    auto expect_padded = [&](const std::vector<double>& x, int64_t n, const std::vector<double>& y,
                             const char* what) {
      ASSERT_EQ(x.size() / n * w, y.size()) << what;
      for (size_t r = 0; r < x.size() / n; ++r) {
        for (int64_t e = 0; e < w; ++e) {
          EXPECT_NEAR(y[r * w + e], e < n ? x[r * n + e] : 0.0, 1e-13) << what << r << " " << e;
        }
      }
    };
    expect_padded(got.o, dv, pad.o, "o ");
    expect_padded(got.dq, d, pad.dq, "dq ");
    expect_padded(got.dk, d, pad.dk, "dk ");
    expect_padded(got.dv, dv, pad.dv, "dv ");
    expect_padded(got.dav, dv, pad.dav, "daV ");
    for (size_t i = 0; i < got.lse.size(); ++i) EXPECT_NEAR(got.lse[i], pad.lse[i], 1e-13);
    // float32 kernels against the float64 reference on the same (float-rounded) values:
    // sums of <= 9 keys of O(1) terms in float32, 1e-4 absolute.
    auto to_f = [](const std::vector<double>& x) { return std::vector<float>(x.begin(), x.end()); };
    const Result<float> f = Call<float>(d, dv, to_f(q), to_f(k), to_f(v), to_f(g), table, sinks);
    auto expect_near = [](const std::vector<float>& x, const std::vector<double>& y, const char* what) {
      ASSERT_EQ(x.size(), y.size()) << what;
      for (size_t i = 0; i < y.size(); ++i) EXPECT_NEAR(x[i], y[i], 1e-4) << what << i;
    };
    expect_near(f.o, got.o, "o ");
    expect_near(f.lse, got.lse, "lse ");
    expect_near(f.dq, got.dq, "dq ");
    expect_near(f.dk, got.dk, "dk ");
    expect_near(f.dv, got.dv, "dv ");
    for (size_t i = 0; i < got.dav.size(); ++i) EXPECT_NEAR(f.dav[i], got.dav[i], 1e-4) << i;
  }
}

TEST(AttentionValueDim, RefusesMismatchedShapes) {
  const int64_t d = 8, dv = 4;
  std::vector<float> q(kBatch * kSq * kHq * d), k(kBatch * kSk * kHk * d), v(kBatch * kSk * kHk * dv),
      o(kBatch * kSq * kHq * d);
  std::vector<int64_t> qs = {kBatch, kSq, kHq, d}, ks = {kBatch, kSk, kHk, d},
                       vs = {kBatch, kSk, kHk, dv}, vbad = {kBatch, kSk - 1, kHk, dv},
                       os_bad = {kBatch, kSq, kHq, d}, os = {kBatch, kSq, kHq, dv},
                       ts_bad = {2 * kShawK + 1, d};
  DLTensor tq = Tensor(q.data(), kDLFloat, 32, &qs), tk = Tensor(k.data(), kDLFloat, 32, &ks),
           tv = Tensor(v.data(), kDLFloat, 32, &vs), tvb = Tensor(v.data(), kDLFloat, 32, &vbad),
           tob = Tensor(o.data(), kDLFloat, 32, &os_bad), to = Tensor(o.data(), kDLFloat, 32, &os);
  std::vector<double> table((2 * kShawK + 1) * d, 0.1);
  DLTensor ttb = Tensor(table.data(), kDLFloat, 64, &ts_bad);
  gpe_attention_options opt = GPE_ATTENTION_OPTIONS_INIT;
  EXPECT_EQ(gpe_attention_forward(&opt, &tq, &tk, &tvb, &to, nullptr), GPE_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(HasMessage("they may differ only in the last dim")) << gpe_last_error_message();
  EXPECT_EQ(gpe_attention_forward(&opt, &tq, &tk, &tv, &tob, nullptr), GPE_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(HasMessage("q with v's head size")) << gpe_last_error_message();
  opt.shaw_max_distance = kShawK;
  opt.shaw_value_table = &ttb;
  EXPECT_EQ(gpe_attention_forward(&opt, &tq, &tk, &tv, &to, nullptr), GPE_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(HasMessage("head_dim_v] = [5, 4]")) << gpe_last_error_message();
}

}  // namespace
