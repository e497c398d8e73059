// gpe_attention_options.rope (a gpe_rope handle inside the kernel) through gpe.h only:
// for every kind of schedule the fused call equals gpe_rope_forward applied to q (query
// role) and k (key role) followed by attention without an encoding, forward and
// backward (the backward's dq, dk mapped back through gpe_rope_backward), in float32 and
// float64, padded and packed layouts, and a multi-axis (M-RoPE) handle with q_axes.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "c_api/include/gpe/gpe.h"
#include "c_api/test_util.h"
#include "gtest/gtest.h"

namespace {

using gpe::c_api_test::HasMessage;
using gpe::c_api_test::Bits;
using gpe::c_api_test::Draw;
using gpe::c_api_test::Tensor;

using RopePtr = std::unique_ptr<gpe_rope, void (*)(gpe_rope*)>;

RopePtr MakeRope(const gpe_rope_options& o) {
  gpe_rope* r = nullptr;
  EXPECT_EQ(gpe_rope_create(&o, &r), GPE_OK) << gpe_last_error_message();
  return RopePtr(r, gpe_rope_destroy);
}

// The schedules under test, each a gpe_rope_options for head_dim d. Parameters are
// chosen so that each one changes the frequencies at these short lengths (positions
// < 32): Llama 3 and YaRN with an original context of 16, YaRN's attention factor
// 0.1 ln 4 + 1 = 1.139 (scores carry its square), xPos with a short scale base so that
// q's and k's scales differ by several percent.
struct Schedule {
  std::string name;
  gpe_rope_options options;
};

std::vector<Schedule> Schedules(int64_t d) {
  std::vector<Schedule> out;
  auto add = [&](const char* name, int32_t schedule, auto tweak) {
    gpe_rope_options o = GPE_ROPE_OPTIONS_INIT;
    o.head_dim = d;
    EXPECT_EQ(gpe_rope_options_use_schedule(schedule, &o), GPE_OK) << gpe_last_error_message();
    tweak(o);
    out.push_back({name, o});
  };
  add("default", GPE_ROPE_DEFAULT, [](gpe_rope_options&) {});
  add("llama3", GPE_ROPE_LLAMA3, [](gpe_rope_options& o) {
    o.base = 500000.0;
    o.original_max_position = 16;
  });
  add("yarn", GPE_ROPE_YARN, [](gpe_rope_options& o) {
    o.factor = 4.0;
    o.original_max_position = 16;
  });
  add("xpos", GPE_ROPE_DEFAULT, [](gpe_rope_options& o) {
    o.xpos = 1;
    o.xpos_scale_base = 16.0;
    o.xpos_centre = 12;
  });
  add("linear partial interleaved", GPE_ROPE_LINEAR, [&](gpe_rope_options& o) {
    o.factor = 2.0;
    o.rotary_dim = d / 2;
    o.pairing = GPE_PAIRING_INTERLEAVED;
  });
  add("dynamic ntk", GPE_ROPE_DYNAMIC_NTK, [](gpe_rope_options& o) {
    o.factor = 2.0;
    o.original_max_position = 8;
    o.current_length = 24;
  });
  return out;
}

// One attention problem: q [tokens_q, hq, d] and k, v [tokens_k, hk, d] seen as bshd
// [batch, s, h, d] (padded) or as thd with cu_seqlens (packed); rope_ids are the
// positions gpe_rope_forward rotates each token by (int64 [axes, tokens]).
struct Problem {
  bool packed = false;
  int64_t batch = 2, sq = 5, sk = 9, hq = 4, hk = 2, d = 16;
  std::vector<int64_t> cu_q, cu_k;          // packed
  std::vector<int64_t> q_ids, k_ids;        // [axes, tokens]
  std::vector<int64_t> q_axes, k_axes;      // [tokens, axes] (multi-axis only)
  int64_t axes = 1;
  int64_t tq() const { return packed ? cu_q.back() : batch * sq; }
  int64_t tk() const { return packed ? cu_k.back() : batch * sk; }
  std::vector<int64_t> QShape() const {
    return packed ? std::vector<int64_t>{tq(), hq, d} : std::vector<int64_t>{batch, sq, hq, d};
  }
  std::vector<int64_t> KShape() const {
    return packed ? std::vector<int64_t>{tk(), hk, d} : std::vector<int64_t>{batch, sk, hk, d};
  }
};

// Padded: the default positions (keys 0..sk-1, queries the last sq of them), which the
// fused call derives itself. Packed: three sequences (one with no queries) at explicit
// positions, passed to both sides.
Problem Padded() {
  Problem p;
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t t = 0; t < p.sq; ++t) p.q_ids.push_back(p.sk - p.sq + t);
  }
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t t = 0; t < p.sk; ++t) p.k_ids.push_back(t);
  }
  return p;
}

Problem Packed() {
  Problem p;
  p.packed = true;
  p.cu_q = {0, 3, 3, 7};
  p.cu_k = {0, 6, 8, 13};
  p.q_ids = {3, 4, 5, 20, 21, 22, 23};
  p.k_ids = {0, 1, 2, 3, 4, 5, 7, 9, 17, 19, 21, 22, 23};
  return p;
}

// M-RoPE over `axes` axes (Qwen2-VL's contiguous sections: 3, (t, h, w)): per-token
// coordinates.
Problem MultiAxis(int64_t axes = 3) {
  Problem p;
  p.axes = axes;
  std::mt19937_64 rng(7);
  const int64_t nq = p.batch * p.sq, nk = p.batch * p.sk;
  p.q_axes.resize(nq * axes);
  p.k_axes.resize(nk * axes);
  for (int64_t& c : p.q_axes) c = static_cast<int64_t>(rng() % 12);
  for (int64_t& c : p.k_axes) c = static_cast<int64_t>(rng() % 12);
  // rope ids are axis-major [axes, tokens].
  p.q_ids.resize(nq * axes);
  p.k_ids.resize(nk * axes);
  for (int64_t t = 0; t < nq; ++t) {
    for (int64_t a = 0; a < axes; ++a) p.q_ids[a * nq + t] = p.q_axes[t * axes + a];
  }
  for (int64_t t = 0; t < nk; ++t) {
    for (int64_t a = 0; a < axes; ++a) p.k_ids[a * nk + t] = p.k_axes[t * axes + a];
  }
  return p;
}

// The attention options of `p` (causal), the tensors they point to kept in `keep`.
struct Options {
  gpe_attention_options o = GPE_ATTENTION_OPTIONS_INIT;
  std::vector<std::vector<int64_t>> shapes;
  std::vector<DLTensor> tensors;
  std::vector<int64_t> qpos, kpos;
  Options(const Problem& p, const gpe_rope* rope) {
    shapes.reserve(8);
    tensors.reserve(8);
    o.causal = 1;
    o.rope = rope;
    auto ints = [&](const std::vector<int64_t>& v, std::vector<int64_t> shape) {
      shapes.push_back(std::move(shape));
      tensors.push_back(Tensor(v.data(), kDLInt, 64, &shapes.back()));
      return &tensors.back();
    };
    if (p.packed) {
      o.cu_seqlens_q = ints(p.cu_q, {static_cast<int64_t>(p.cu_q.size())});
      o.cu_seqlens_k = ints(p.cu_k, {static_cast<int64_t>(p.cu_k.size())});
      qpos = p.q_ids;
      kpos = p.k_ids;
      o.q_positions = ints(qpos, {p.tq()});
      o.k_positions = ints(kpos, {p.tk()});
    }
    if (p.axes > 1) {
      o.q_axes = ints(p.q_axes, {p.tq(), p.axes});
      o.k_axes = ints(p.k_axes, {p.tk(), p.axes});
    }
  }
};

// gpe_rope_forward (or _backward) in place of x, the problem's q (query) or k tensor,
// with its position ids, in the query or key role (by default the tensor's own).
template <class T>
void ApplyRope(const gpe_rope* rope, const Problem& p, bool query, bool backward,
               std::vector<T>* x, int32_t role = -1) {
  std::vector<int64_t> shape = query ? p.QShape() : p.KShape();
  const std::vector<int64_t>& ids = query ? p.q_ids : p.k_ids;
  std::vector<int64_t> id_shape = p.axes > 1
      ? std::vector<int64_t>{p.axes, query ? p.tq() : p.tk()}
      : std::vector<int64_t>{query ? p.tq() : p.tk()};
  const std::vector<int64_t>& cu = query ? p.cu_q : p.cu_k;
  std::vector<int64_t> cu_shape = {static_cast<int64_t>(cu.size())};
  DLTensor tx = Tensor(x->data(), kDLFloat, Bits<T>(), &shape);
  DLTensor tid = Tensor(ids.data(), kDLInt, 64, &id_shape);
  DLTensor tcu = Tensor(cu.data(), kDLInt, 64, &cu_shape);
  gpe_rope_tokens tok = GPE_ROPE_TOKENS_INIT;
  tok.layout = p.packed ? GPE_ROPE_LAYOUT_THD : GPE_ROPE_LAYOUT_BSHD;
  tok.role = role >= 0 ? role : (query ? GPE_ROPE_QUERY : GPE_ROPE_KEY);
  tok.position_ids = &tid;
  tok.cu_seqlens = p.packed ? &tcu : nullptr;
  const gpe_status s = backward ? gpe_rope_backward(rope, &tok, &tx, &tx)
                                : gpe_rope_forward(rope, &tok, &tx, &tx);
  ASSERT_EQ(s, GPE_OK) << gpe_last_error_message();
}

template <class T>
struct Result {
  std::vector<T> o, lse, dq, dk, dv;
};

// Forward (o, lse) and backward (dq, dk, dv of L = sum(w * o)) with `opt`.
template <class T>
Result<T> RunBoth(const Problem& p, const gpe_attention_options& opt, const std::vector<T>& q,
              const std::vector<T>& k, const std::vector<T>& v, const std::vector<T>& w) {
  Result<T> r;
  r.o.resize(q.size());
  r.lse.resize(p.tq() * p.hq);
  r.dq.resize(q.size());
  r.dk.resize(k.size());
  r.dv.resize(v.size());
  std::vector<int64_t> qs = p.QShape(), ks = p.KShape(), ls = {p.tq(), p.hq};
  constexpr int b = Bits<T>();
  DLTensor tq = Tensor(q.data(), kDLFloat, b, &qs), tk = Tensor(k.data(), kDLFloat, b, &ks),
           tv = Tensor(v.data(), kDLFloat, b, &ks), to = Tensor(r.o.data(), kDLFloat, b, &qs),
           tl = Tensor(r.lse.data(), kDLFloat, b, &ls), tw = Tensor(w.data(), kDLFloat, b, &qs),
           tdq = Tensor(r.dq.data(), kDLFloat, b, &qs), tdk = Tensor(r.dk.data(), kDLFloat, b, &ks),
           tdv = Tensor(r.dv.data(), kDLFloat, b, &ks);
  EXPECT_EQ(gpe_attention_forward(&opt, &tq, &tk, &tv, &to, &tl), GPE_OK)
      << gpe_last_error_message();
  EXPECT_EQ(gpe_attention_backward(&opt, &tq, &tk, &tv, &to, &tl, &tw, &tdq, &tdk, &tdv), GPE_OK)
      << gpe_last_error_message();
  return r;
}

// The fused call against the two-step one, for one problem and dtype; `tol` bounds the
// difference of every output and gradient.
template <class T>
void ExpectFusedEqualsSeparate(const Problem& p, const gpe_rope_options& ro, double tol,
                               const std::string& what) {
  SCOPED_TRACE(what);
  RopePtr rope = MakeRope(ro);
  ASSERT_NE(rope, nullptr);
  const std::vector<T> q = Draw<T>(p.tq() * p.hq * p.d, 1), k = Draw<T>(p.tk() * p.hk * p.d, 2),
                       v = Draw<T>(p.tk() * p.hk * p.d, 3), w = Draw<T>(q.size(), 4);
  Options fused(p, rope.get());
  const Result<T> got = RunBoth(p, fused.o, q, k, v, w);
  // Two steps: q' = R_q q, k' = R_k k by gpe_rope_forward; attention of q', k' without an
  // encoding; dq = R_q^T dq', dk = R_k^T dk' by gpe_rope_backward.
  std::vector<T> qr = q, kr = k;
  ApplyRope(rope.get(), p, true, false, &qr);
  ApplyRope(rope.get(), p, false, false, &kr);
  Options plain(p, nullptr);
  plain.o.q_axes = plain.o.k_axes = nullptr;  // nothing reads coordinates without a RoPE
  Result<T> want = RunBoth(p, plain.o, qr, kr, v, w);
  ApplyRope(rope.get(), p, true, true, &want.dq);
  ApplyRope(rope.get(), p, false, true, &want.dk);
  const std::pair<const char*, std::pair<const std::vector<T>*, const std::vector<T>*>> all[] = {
      {"o", {&got.o, &want.o}},    {"lse", {&got.lse, &want.lse}}, {"dq", {&got.dq, &want.dq}},
      {"dk", {&got.dk, &want.dk}}, {"dv", {&got.dv, &want.dv}}};
  for (const auto& [name, pair] : all) {
    ASSERT_EQ(pair.first->size(), pair.second->size()) << name;
    for (size_t i = 0; i < pair.first->size(); ++i) {
      ASSERT_NEAR((*pair.first)[i], (*pair.second)[i], tol) << name << " " << i;
    }
  }
}

// Tolerances. float64: both sides rotate in double from the same double table and run
// the exact reference; only the order of roundings differs (~1e-15 on these O(1)
// outputs, ~1e-14 on gradients), 1e-12 fails for any float32 step or wrong term.
// float32: the fused kernel rotates tiles with rope.h's float table and the two-step path
// rotates the tensors with the same table, then both run the float32 kernels: each side
// ~1e-6 (16-term dots, <= 13-term sums, scores up to ~10 with YaRN's m^2 and xPos);
// 5e-5 is far below what a wrong role (xPos: scales differ by >= 5%), a missing
// attention factor (m^2 = 1.30) or a wrong angle changes (>= 1e-2).
constexpr double kTol64 = 1e-12, kTol32 = 5e-5;

TEST(AttentionRopeHandle, EverySchedulePaddedAndPackedEqualsRopeThenAttention) {
  for (const Schedule& s : Schedules(16)) {
    for (const bool packed : {false, true}) {
      const Problem p = packed ? Packed() : Padded();
      const std::string what = s.name + (packed ? " packed" : " padded");
      ExpectFusedEqualsSeparate<double>(p, s.options, kTol64, what + " float64");
      ExpectFusedEqualsSeparate<float>(p, s.options, kTol32, what + " float32");
    }
  }
}

TEST(AttentionRopeHandle, MultiAxisHandleReadsAxesCoordinates) {
  gpe_rope_options o = GPE_ROPE_OPTIONS_INIT;
  o.head_dim = 16;
  const int64_t sections[] = {2, 3, 3};  // 8 planes = rotary_dim / 2
  o.axes = GPE_ROPE_AXES_MROPE;
  o.mrope_sections = sections;
  o.num_mrope_sections = 3;
  ExpectFusedEqualsSeparate<double>(MultiAxis(), o, kTol64, "mrope float64");
  ExpectFusedEqualsSeparate<float>(MultiAxis(), o, kTol32, "mrope float32");
  // Four axes (rope.h takes up to 8; attention capped q_axes at 3 columns before).
  const int64_t four[] = {2, 2, 2, 2};
  o.mrope_sections = four;
  o.num_mrope_sections = 4;
  ExpectFusedEqualsSeparate<double>(MultiAxis(4), o, kTol64, "mrope 4 axes float64");
}

TEST(AttentionRopeHandle, ScheduleParametersReachTheKernel) {
  // The test above can fail: YaRN's attention factor is not 1 here, xPos's query and key
  // scales differ, and the fused results differ from rope_dim's default RoPE.
  const std::vector<Schedule> all = Schedules(16);
  RopePtr yarn = MakeRope(all[2].options);
  double m = 0.0;
  std::vector<double> thetas(8);
  ASSERT_EQ(gpe_rope_frequencies(yarn.get(), thetas.data(), 8, &m), GPE_OK);
  EXPECT_GT(m, 1.1);
  const Problem p = Padded();
  const std::vector<float> q = Draw<float>(p.tq() * p.hq * p.d, 1),
                           k = Draw<float>(p.tk() * p.hk * p.d, 2),
                           v = Draw<float>(p.tk() * p.hk * p.d, 3), w = Draw<float>(q.size(), 4);
  Options base(p, nullptr);
  base.o.rope_dim = 16;
  const Result<float> plain = RunBoth(p, base.o, q, k, v, w);
  for (size_t i : {size_t{2}, size_t{3}}) {  // yarn, xpos
    RopePtr r = MakeRope(all[i].options);
    Options fused(p, r.get());
    const Result<float> got = RunBoth(p, fused.o, q, k, v, w);
    double diff = 0.0;
    for (size_t j = 0; j < got.o.size(); ++j) diff = std::max<double>(diff, std::abs(got.o[j] - plain.o[j]));
    EXPECT_GT(diff, 1e-2) << all[i].name;
  }
  // xPos with the query role on both sides is a different encoding: rotating k in the
  // query role (the two-step call with the wrong role) moves the outputs.
  RopePtr xpos = MakeRope(all[3].options);
  Options fused(p, xpos.get());
  const Result<float> got = RunBoth(p, fused.o, q, k, v, w);
  std::vector<float> qr = q, kr = k;
  ApplyRope(xpos.get(), p, true, false, &qr);
  ApplyRope(xpos.get(), p, false, false, &kr, GPE_ROPE_QUERY);  // the wrong role
  Options none(p, nullptr);
  const Result<float> wrong = RunBoth(p, none.o, qr, kr, v, w);
  double diff = 0.0;
  for (size_t j = 0; j < got.o.size(); ++j) diff = std::max<double>(diff, std::abs(got.o[j] - wrong.o[j]));
  EXPECT_GT(diff, 1e-3);
}

TEST(AttentionRopeHandle, BackwardWithParametersTakesTheHandle) {
  const Problem p = Padded();
  RopePtr rope = MakeRope(Schedules(16)[3].options);  // xPos: q and k roles differ
  const std::vector<float> q = Draw<float>(p.tq() * p.hq * p.d, 5),
                           k = Draw<float>(p.tk() * p.hk * p.d, 6),
                           v = Draw<float>(p.tk() * p.hk * p.d, 7), w = Draw<float>(q.size(), 8);
  Options opt(p, rope.get());
  const Result<float> r = RunBoth(p, opt.o, q, k, v, w);
  std::vector<float> dq(q.size()), dk(k.size()), dv(v.size());
  std::vector<int64_t> qs = p.QShape(), ks = p.KShape();
  DLTensor tq = Tensor(q.data(), kDLFloat, 32, &qs), tk = Tensor(k.data(), kDLFloat, 32, &ks),
           tv = Tensor(v.data(), kDLFloat, 32, &ks), tw = Tensor(w.data(), kDLFloat, 32, &qs),
           tdq = Tensor(dq.data(), kDLFloat, 32, &qs), tdk = Tensor(dk.data(), kDLFloat, 32, &ks),
           tdv = Tensor(dv.data(), kDLFloat, 32, &ks);
  gpe_attention_param_grads g = GPE_ATTENTION_PARAM_GRADS_INIT;
  ASSERT_EQ(gpe_attention_backward_with_parameters(&opt.o, &tq, &tk, &tv, nullptr, nullptr, &tw,
                                                   &tdq, &tdk, &tdv, &g),
            GPE_OK)
      << gpe_last_error_message();
  // The same kernels, o and lse recomputed instead of passed: float32 reassociation only
  // (<= 1e-6 here); 1e-5 catches a handle ignored on this path (>= 1e-2).
  for (size_t i = 0; i < dq.size(); ++i) ASSERT_NEAR(dq[i], r.dq[i], 1e-5) << i;
  for (size_t i = 0; i < dk.size(); ++i) ASSERT_NEAR(dk[i], r.dk[i], 1e-5) << i;
}

TEST(AttentionRopeHandle, RefusesConflictingOptions) {
  const Problem p = Padded();
  gpe_rope_options ro = GPE_ROPE_OPTIONS_INIT;
  ro.head_dim = 16;
  RopePtr rope = MakeRope(ro);
  ro.head_dim = 8;
  RopePtr narrow = MakeRope(ro);
  const std::vector<float> q = Draw<float>(p.tq() * p.hq * p.d, 1),
                           k = Draw<float>(p.tk() * p.hk * p.d, 2);
  std::vector<float> o(q.size());
  std::vector<int64_t> qs = p.QShape(), ks = p.KShape();
  DLTensor tq = Tensor(q.data(), kDLFloat, 32, &qs), tk = Tensor(k.data(), kDLFloat, 32, &ks),
           to = Tensor(o.data(), kDLFloat, 32, &qs);
  Options opt(p, rope.get());
  opt.o.rope_dim = 16;
  EXPECT_EQ(gpe_attention_forward(&opt.o, &tq, &tk, &tk, &to, nullptr), GPE_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(HasMessage("rope_dim")) << gpe_last_error_message();
  Options wrong_dim(p, narrow.get());
  EXPECT_EQ(gpe_attention_forward(&wrong_dim.o, &tq, &tk, &tk, &to, nullptr),
            GPE_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(HasMessage("head_dim")) << gpe_last_error_message();
  // A multi-axis handle without per-axis coordinates.
  gpe_rope_options mo = GPE_ROPE_OPTIONS_INIT;
  mo.head_dim = 16;
  mo.axes = GPE_ROPE_AXES_AXIAL;
  mo.num_axes = 2;
  RopePtr axial = MakeRope(mo);
  Options no_axes(p, axial.get());
  EXPECT_EQ(gpe_attention_forward(&no_axes.o, &tq, &tk, &tk, &to, nullptr),
            GPE_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(HasMessage("q_axes")) << gpe_last_error_message();
}

}  // namespace
