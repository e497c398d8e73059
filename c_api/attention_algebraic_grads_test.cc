// The algebraic encodings' generator gradients through
// gpe_attention_backward_with_parameters (0.10.0: d_algebraic, d_algebraic_tree,
// d_algebraic_grid), through gpe.h only, for Kogkalidis et al.'s sequences (sec. 3.1),
// trees (sec. 3.2) and grids (sec. 3.3), padded (bshd) and packed (thd), with GQA:
//  - against central differences of L = <d_o, o> (float64, the exact reference) in the
//    skew directions S_ij += h, S_ji -= h, whose derivative is X_ij - X_ji for the
//    entrywise gradient X;
//  - entrywise (the symmetric part included) against the same gradient composed from
//    other entry points: q' = rho(p) q and k' = rho(p) k by gpe_algebraic_*_apply,
//    attention without an encoding for dL/dq' and dL/dk', and the encoding's own
//    gpe_algebraic_*_backward on each;
//  - float32 (the tiled kernels) against float64.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "c_api/include/gpe/gpe.h"
#include "c_api/test_util.h"
#include "gtest/gtest.h"

namespace {

using gpe::c_api_test::Draw;
using gpe::c_api_test::HasMessage;
using gpe::c_api_test::Tensor;

enum class Kind { kSequence, kTree, kGrid };

// One problem: heads 4 over 2 (GQA), head_dim 6; padded batch 2 x (4 queries, 6 keys) or
// packed sequences of (3, 4) and (2, 5) tokens; causal.
struct Problem {
  Kind kind;
  bool packed;
  int64_t hq = 4, hk = 2, d = 6;
  int64_t batch = 2, sq = 4, sk = 6;
  std::vector<int64_t> cu_q = {0, 3, 5}, cu_k = {0, 4, 9};
  int64_t tq() const { return packed ? cu_q.back() : batch * sq; }
  int64_t tk() const { return packed ? cu_k.back() : batch * sk; }
  std::vector<int64_t> QShape() const {
    return packed ? std::vector<int64_t>{tq(), hq, d} : std::vector<int64_t>{batch, sq, hq, d};
  }
  std::vector<int64_t> KShape() const {
    return packed ? std::vector<int64_t>{tk(), hk, d} : std::vector<int64_t>{batch, sk, hk, d};
  }
  // The generators' shape: [d, d]; [2 branches, d, d]; [axes, m, m] (2 axes of 3 padded,
  // 3 axes of 2 packed).
  std::vector<int64_t> GradShape() const {
    if (kind == Kind::kSequence) return {d, d};
    if (kind == Kind::kTree) return {2, d, d};
    return packed ? std::vector<int64_t>{3, 2, 2} : std::vector<int64_t>{2, 3, 3};
  }
  // The kernels' default positions (gpe/attention.h): keys 0.., queries the last of them.
  std::vector<int64_t> Positions(bool query) const {
    std::vector<int64_t> out;
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t lq = packed ? cu_q[b + 1] - cu_q[b] : sq, lk = packed ? cu_k[b + 1] - cu_k[b] : sk;
      for (int64_t t = 0; t < (query ? lq : lk); ++t) out.push_back(query ? lk - lq + t : t);
    }
    return out;
  }
};

size_t Count(const std::vector<int64_t>& shape) {
  size_t n = 1;
  for (int64_t e : shape) n *= static_cast<size_t>(e);
  return n;
}

// Random skew matrices [count, m, m] (entries N(0, 0.3^2) above the diagonal).
std::vector<double> RandomSkews(const std::vector<int64_t>& shape, uint64_t seed) {
  const int64_t count = shape.size() == 2 ? 1 : shape[0], m = shape.back();
  const std::vector<double> r = Draw<double>(Count(shape), seed, 0.3);
  std::vector<double> s(r.size(), 0.0);
  for (int64_t c = 0; c < count; ++c) {
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = i + 1; j < m; ++j) {
        s[(c * m + i) * m + j] = r[(c * m + i) * m + j];
        s[(c * m + j) * m + i] = -r[(c * m + i) * m + j];
      }
    }
  }
  return s;
}

// Everything a call needs besides q, k, v: the skews, the structured positions, the
// handle of a sequence encoding, and options pointing at them.
struct Encoding {
  const Problem& p;
  std::vector<double> skews;
  std::vector<int64_t> skew_shape, q_off, q_ch, k_off, k_ch, q_axes, k_axes, cu_q, cu_k;
  std::vector<int64_t> q_off_s, q_ch_s, k_off_s, k_ch_s, q_axes_s, k_axes_s, cu_s;
  DLTensor t_skews, t_q_off, t_q_ch, t_k_off, t_k_ch, t_q_axes, t_k_axes, t_cu_q, t_cu_k;
  std::unique_ptr<gpe_algebraic_sequence, void (*)(gpe_algebraic_sequence*)> sequence{
      nullptr, gpe_algebraic_sequence_destroy};

  Encoding(const Problem& problem, uint64_t seed) : p(problem) {
    skew_shape = p.GradShape();
    skews = RandomSkews(skew_shape, seed);
    std::mt19937_64 rng(seed + 1);
    // Tree addresses of depth 0..3 in a binary tree; grid coordinates in [-3, 3].
    const int64_t axes = p.kind == Kind::kGrid ? skew_shape[0] : 0;
    for (auto [off, ch, coords, n] : {std::tuple{&q_off, &q_ch, &q_axes, p.tq()},
                                      std::tuple{&k_off, &k_ch, &k_axes, p.tk()}}) {
      off->push_back(0);
      for (int64_t t = 0; t < n; ++t) {
        for (uint64_t depth = rng() % 4; depth > 0; --depth) {
          ch->push_back(static_cast<int64_t>(rng() % 2));
        }
        off->push_back(static_cast<int64_t>(ch->size()));
        for (int64_t a = 0; a < axes; ++a) coords->push_back(static_cast<int64_t>(rng() % 7) - 3);
      }
    }
    cu_q = p.cu_q;
    cu_k = p.cu_k;
    q_off_s = {p.tq() + 1};
    k_off_s = {p.tk() + 1};
    q_ch_s = {static_cast<int64_t>(q_ch.size())};
    k_ch_s = {static_cast<int64_t>(k_ch.size())};
    q_axes_s = {p.tq(), axes};
    k_axes_s = {p.tk(), axes};
    cu_s = {p.batch + 1};
    t_q_off = Tensor(q_off.data(), kDLInt, 64, &q_off_s);
    t_k_off = Tensor(k_off.data(), kDLInt, 64, &k_off_s);
    t_q_ch = Tensor(q_ch.data(), kDLInt, 64, &q_ch_s);
    t_k_ch = Tensor(k_ch.data(), kDLInt, 64, &k_ch_s);
    t_q_axes = Tensor(q_axes.data(), kDLInt, 64, &q_axes_s);
    t_k_axes = Tensor(k_axes.data(), kDLInt, 64, &k_axes_s);
    t_cu_q = Tensor(cu_q.data(), kDLInt, 64, &cu_s);
    t_cu_k = Tensor(cu_k.data(), kDLInt, 64, &cu_s);
  }

  // Options for the current skews (a sequence handle is rebuilt from them).
  gpe_attention_options Options() {
    gpe_attention_options o = GPE_ATTENTION_OPTIONS_INIT;
    o.causal = 1;
    if (p.packed) {
      o.cu_seqlens_q = &t_cu_q;
      o.cu_seqlens_k = &t_cu_k;
    }
    t_skews = Tensor(skews.data(), kDLFloat, 64, &skew_shape);
    if (p.kind == Kind::kSequence) {
      gpe_algebraic_sequence_options so = GPE_ALGEBRAIC_SEQUENCE_OPTIONS_INIT;
      so.dim = p.d;
      so.skew = skews.data();
      gpe_algebraic_sequence* s = nullptr;
      EXPECT_EQ(gpe_algebraic_sequence_create(&so, &s), GPE_OK) << gpe_last_error_message();
      sequence.reset(s);
      o.algebraic = s;
    } else if (p.kind == Kind::kTree) {
      o.algebraic_tree = &t_skews;
      o.q_tree_offsets = &t_q_off;
      o.q_tree_children = &t_q_ch;
      o.k_tree_offsets = &t_k_off;
      o.k_tree_children = &t_k_ch;
    } else {
      o.algebraic_grid = &t_skews;
      o.q_axes = &t_q_axes;
      o.k_axes = &t_k_axes;
    }
    return o;
  }
  DLTensor** GradField(gpe_attention_param_grads* g) const {
    return p.kind == Kind::kSequence ? &g->d_algebraic
           : p.kind == Kind::kTree   ? &g->d_algebraic_tree
                                     : &g->d_algebraic_grid;
  }

  // rho(p_r) x_r (or its backward, dL/dS into grad_skews) for the rows of a q-side
  // (query) or k-side tensor, through the encoding's own entry points.
  void Rows(bool query, int64_t heads, std::vector<double>* x, const std::vector<double>* grad_out,
            std::vector<double>* grad_skews) const {
    const int64_t tokens = query ? p.tq() : p.tk(), n = tokens * heads;
    std::vector<int64_t> xs = {n, p.d};
    DLTensor tx = Tensor(x->data(), kDLFloat, 64, &xs);
    DLTensor tg = grad_out ? Tensor(grad_out->data(), kDLFloat, 64, &xs) : DLTensor{};
    std::vector<double> gsk(grad_skews ? grad_skews->size() : 0);
    std::vector<int64_t> gsk_shape = skew_shape;
    if (p.kind == Kind::kGrid) gsk_shape = {static_cast<int64_t>(gsk.size())};
    DLTensor tgs = Tensor(gsk.data(), kDLFloat, 64, &gsk_shape);
    if (p.kind == Kind::kSequence) {
      const std::vector<int64_t> pos = p.Positions(query);
      std::vector<int64_t> rp, ps = {n};
      for (int64_t r = 0; r < n; ++r) rp.push_back(pos[r / heads]);
      DLTensor tp = Tensor(rp.data(), kDLInt, 64, &ps);
      gpe_algebraic_sequence_options so = GPE_ALGEBRAIC_SEQUENCE_OPTIONS_INIT;
      so.dim = p.d;
      so.skew = skews.data();
      gpe_algebraic_sequence* s = nullptr;
      ASSERT_EQ(gpe_algebraic_sequence_create(&so, &s), GPE_OK) << gpe_last_error_message();
      if (grad_out == nullptr) {
        EXPECT_EQ(gpe_algebraic_sequence_apply(s, &tp, &tx, &tx), GPE_OK) << gpe_last_error_message();
      } else {
        EXPECT_EQ(gpe_algebraic_sequence_backward(s, &tp, &tx, &tg, nullptr, &tgs), GPE_OK)
            << gpe_last_error_message();
      }
      gpe_algebraic_sequence_destroy(s);
    } else if (p.kind == Kind::kTree) {
      const std::vector<int64_t>& off = query ? q_off : k_off;
      const std::vector<int64_t>& ch = query ? q_ch : k_ch;
      std::vector<int64_t> addr(static_cast<size_t>(n * 3), -1), as = {n, 3};
      for (int64_t r = 0; r < n; ++r) {
        const int64_t t = r / heads;
        for (int64_t e = off[t]; e < off[t + 1]; ++e) addr[r * 3 + (e - off[t])] = ch[e];
      }
      DLTensor ta = Tensor(addr.data(), kDLInt, 64, &as);
      gpe_algebraic_tree_options to = GPE_ALGEBRAIC_TREE_OPTIONS_INIT;
      to.dim = p.d;
      to.num_branches = 2;
      to.skews = skews.data();
      gpe_algebraic_tree* tr = nullptr;
      ASSERT_EQ(gpe_algebraic_tree_create(&to, &tr), GPE_OK) << gpe_last_error_message();
      if (grad_out == nullptr) {
        EXPECT_EQ(gpe_algebraic_tree_apply(tr, &ta, &tx, &tx), GPE_OK) << gpe_last_error_message();
      } else {
        EXPECT_EQ(gpe_algebraic_tree_backward(tr, &ta, &tx, &tg, nullptr, &tgs), GPE_OK)
            << gpe_last_error_message();
      }
      gpe_algebraic_tree_destroy(tr);
    } else {
      const int64_t axes = skew_shape[0];
      const std::vector<int64_t>& coords = query ? q_axes : k_axes;
      std::vector<int64_t> rc, cs = {n, axes}, dims(static_cast<size_t>(axes), skew_shape[1]);
      for (int64_t r = 0; r < n; ++r) {
        for (int64_t a = 0; a < axes; ++a) rc.push_back(coords[(r / heads) * axes + a]);
      }
      DLTensor tc = Tensor(rc.data(), kDLInt, 64, &cs);
      gpe_algebraic_grid_options go = GPE_ALGEBRAIC_GRID_OPTIONS_INIT;
      go.num_axes = axes;
      go.dims = dims.data();
      go.skews = skews.data();  // [axes, m, m] row-major is S_1, S_2, ... as the handle reads
      gpe_algebraic_grid* g = nullptr;
      ASSERT_EQ(gpe_algebraic_grid_create(&go, &g), GPE_OK) << gpe_last_error_message();
      if (grad_out == nullptr) {
        EXPECT_EQ(gpe_algebraic_grid_apply(g, &tc, &tx, &tx), GPE_OK) << gpe_last_error_message();
      } else {
        EXPECT_EQ(gpe_algebraic_grid_backward(g, &tc, &tx, &tg, nullptr, &tgs), GPE_OK)
            << gpe_last_error_message();
      }
      gpe_algebraic_grid_destroy(g);
    }
    if (grad_skews != nullptr) {
      for (size_t i = 0; i < gsk.size(); ++i) (*grad_skews)[i] += gsk[i];
    }
  }
};

struct Data {
  std::vector<double> q, k, v, g;
  std::vector<int64_t> qs, ks;
  DLTensor tq, tk, tv, tg;
  explicit Data(const Problem& p, uint64_t seed) : qs(p.QShape()), ks(p.KShape()) {
    q = Draw<double>(Count(qs), seed);
    k = Draw<double>(Count(ks), seed + 1);
    v = Draw<double>(Count(ks), seed + 2);
    g = Draw<double>(Count(qs), seed + 3);
    tq = Tensor(q.data(), kDLFloat, 64, &qs);
    tk = Tensor(k.data(), kDLFloat, 64, &ks);
    tv = Tensor(v.data(), kDLFloat, 64, &ks);
    tg = Tensor(g.data(), kDLFloat, 64, &qs);
  }
};

// L = <d_o, o> at the encoding's current skews.
double Loss(Encoding* e, Data* x) {
  gpe_attention_options o = e->Options();
  std::vector<double> out(x->q.size());
  DLTensor to = Tensor(out.data(), kDLFloat, 64, &x->qs);
  EXPECT_EQ(gpe_attention_forward(&o, &x->tq, &x->tk, &x->tv, &to, nullptr), GPE_OK)
      << gpe_last_error_message();
  double l = 0;
  for (size_t i = 0; i < out.size(); ++i) l += out[i] * x->g[i];
  return l;
}

// The generators' gradient from gpe_attention_backward_with_parameters in float64.
std::vector<double> Analytic(Encoding* e, Data* x) {
  gpe_attention_options o = e->Options();
  std::vector<double> dq(x->q.size()), dk(x->k.size()), grad(Count(e->skew_shape), -7.0);
  DLTensor tdq = Tensor(dq.data(), kDLFloat, 64, &x->qs), tdk = Tensor(dk.data(), kDLFloat, 64, &x->ks),
           tgr = Tensor(grad.data(), kDLFloat, 64, &e->skew_shape);
  gpe_attention_param_grads pg = GPE_ATTENTION_PARAM_GRADS_INIT;
  *e->GradField(&pg) = &tgr;
  EXPECT_EQ(gpe_attention_backward_with_parameters(&o, &x->tq, &x->tk, &x->tv, nullptr, nullptr,
                                                   &x->tg, &tdq, &tdk, nullptr, &pg),
            GPE_OK)
      << gpe_last_error_message();
  return grad;
}

class AlgebraicGrads : public testing::TestWithParam<std::tuple<Kind, bool>> {};

// Central differences: step 1e-6 on O(1) losses gives rounding ~1e-16 / 1e-6 = 1e-10, and
// truncation h^2 / 6 |L'''| with |L'''| growing like |p|^3 <= 6^3 (positions and tree
// depths are small): ~4e-11; so 1e-7 absolute. The composition is the same float64
// arithmetic in another order: 1e-10 relative to the largest entry.
TEST_P(AlgebraicGrads, MatchFiniteDifferencesAndTheEncodingsOwnBackward) {
  Problem p{std::get<0>(GetParam()), std::get<1>(GetParam())};
  Encoding e(p, 200 + 10 * static_cast<uint64_t>(p.kind) + p.packed);
  Data x(p, 300);
  const std::vector<double> got = Analytic(&e, &x);
  const std::vector<int64_t>& shape = e.skew_shape;
  const int64_t count = shape.size() == 2 ? 1 : shape[0], m = shape.back();
  double largest = 0;
  for (double gv : got) largest = std::max(largest, std::abs(gv));
  ASSERT_GT(largest, 1e-3);  // a vanishing gradient would pass everything below
  const double h = 1e-6;
  for (int64_t c = 0; c < count; ++c) {
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = i + 1; j < m; ++j) {
        const size_t ij = (c * m + i) * m + j, ji = (c * m + j) * m + i;
        const double keep_ij = e.skews[ij], keep_ji = e.skews[ji];
        e.skews[ij] = keep_ij + h;
        e.skews[ji] = keep_ji - h;
        const double lp = Loss(&e, &x);
        e.skews[ij] = keep_ij - h;
        e.skews[ji] = keep_ji + h;
        const double lm = Loss(&e, &x);
        e.skews[ij] = keep_ij;
        e.skews[ji] = keep_ji;
        EXPECT_NEAR(got[ij] - got[ji], (lp - lm) / (2 * h), 1e-7)
            << "generator " << c << " (" << i << ", " << j << ")";
      }
    }
  }
  // The composition: encode q and k, attention without an encoding, the encodings' own
  // backwards on dL/dq' and dL/dk'.
  std::vector<double> qe = x.q, ke = x.k;
  e.Rows(true, p.hq, &qe, nullptr, nullptr);
  e.Rows(false, p.hk, &ke, nullptr, nullptr);
  gpe_attention_options plain = GPE_ATTENTION_OPTIONS_INIT;
  plain.causal = 1;
  if (p.packed) {
    plain.cu_seqlens_q = &e.t_cu_q;
    plain.cu_seqlens_k = &e.t_cu_k;
  }
  std::vector<double> dqe(qe.size()), dke(ke.size()), want(got.size(), 0.0);
  DLTensor tq = Tensor(qe.data(), kDLFloat, 64, &x.qs), tk = Tensor(ke.data(), kDLFloat, 64, &x.ks),
           tdq = Tensor(dqe.data(), kDLFloat, 64, &x.qs), tdk = Tensor(dke.data(), kDLFloat, 64, &x.ks);
  ASSERT_EQ(gpe_attention_backward(&plain, &tq, &tk, &x.tv, nullptr, nullptr, &x.tg, &tdq, &tdk,
                                   nullptr),
            GPE_OK)
      << gpe_last_error_message();
  e.Rows(true, p.hq, &x.q, &dqe, &want);
  e.Rows(false, p.hk, &x.k, &dke, &want);
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], 1e-10 * largest) << "entry " << i;
  }
  // float32 (the tiled kernels; the gradient formed in double from float32 dq and dk):
  // float32 rounding of O(1) terms summed over ~100 rows, 1e-4 relative to the largest.
  std::vector<float> qf(x.q.begin(), x.q.end()), kf(x.k.begin(), x.k.end()),
      vf(x.v.begin(), x.v.end()), gf(x.g.begin(), x.g.end()), dqf(qf.size()), dkf(kf.size());
  DLTensor fq = Tensor(qf.data(), kDLFloat, 32, &x.qs), fk = Tensor(kf.data(), kDLFloat, 32, &x.ks),
           fv = Tensor(vf.data(), kDLFloat, 32, &x.ks), fg = Tensor(gf.data(), kDLFloat, 32, &x.qs),
           fdq = Tensor(dqf.data(), kDLFloat, 32, &x.qs), fdk = Tensor(dkf.data(), kDLFloat, 32, &x.ks);
  std::vector<double> got32(got.size(), -7.0);
  DLTensor tg32 = Tensor(got32.data(), kDLFloat, 64, &e.skew_shape);
  gpe_attention_options o = e.Options();
  gpe_attention_param_grads pg = GPE_ATTENTION_PARAM_GRADS_INIT;
  *e.GradField(&pg) = &tg32;
  ASSERT_EQ(gpe_attention_backward_with_parameters(&o, &fq, &fk, &fv, nullptr, nullptr, &fg, &fdq,
                                                   &fdk, nullptr, &pg),
            GPE_OK)
      << gpe_last_error_message();
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got32[i], got[i], 1e-4 * largest) << "entry " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(
    SequenceTreeGrid, AlgebraicGrads,
    testing::Combine(testing::Values(Kind::kSequence, Kind::kTree, Kind::kGrid), testing::Bool()),
    [](const testing::TestParamInfo<std::tuple<Kind, bool>>& param) {
      const Kind k = std::get<0>(param.param);
      return std::string(k == Kind::kSequence ? "Sequence" : k == Kind::kTree ? "Tree" : "Grid") +
             (std::get<1>(param.param) ? "Packed" : "Padded");
    });

// Asked without the matching option, or without dk: clear errors naming the field; a
// 0.9.0 struct (ending at d_sinks) does not read the new fields.
TEST(AlgebraicGradsErrors, NeedTheirOptionAndDqDk) {
  Problem p{Kind::kTree, false};
  Encoding e(p, 7);
  Data x(p, 8);
  std::vector<double> dq(x.q.size()), dk(x.k.size()), grad(Count(e.skew_shape));
  DLTensor tdq = Tensor(dq.data(), kDLFloat, 64, &x.qs), tdk = Tensor(dk.data(), kDLFloat, 64, &x.ks),
           tgr = Tensor(grad.data(), kDLFloat, 64, &e.skew_shape);
  gpe_attention_options o = e.Options();  // a tree
  for (int which = 0; which < 2; ++which) {
    gpe_attention_param_grads pg = GPE_ATTENTION_PARAM_GRADS_INIT;
    (which == 0 ? pg.d_algebraic : pg.d_algebraic_grid) = &tgr;
    EXPECT_EQ(gpe_attention_backward_with_parameters(&o, &x.tq, &x.tk, &x.tv, nullptr, nullptr,
                                                     &x.tg, &tdq, &tdk, nullptr, &pg),
              GPE_ERROR_INVALID_ARGUMENT);
    EXPECT_TRUE(HasMessage(which == 0 ? "d_algebraic is given but options->algebraic is NULL"
                                      : "d_algebraic_grid is given but options->algebraic_grid"))
        << gpe_last_error_message();
  }
  gpe_attention_param_grads pg = GPE_ATTENTION_PARAM_GRADS_INIT;
  pg.d_algebraic_tree = &tgr;
  EXPECT_EQ(gpe_attention_backward_with_parameters(&o, &x.tq, &x.tk, &x.tv, nullptr, nullptr,
                                                   &x.tg, &tdq, nullptr, nullptr, &pg),
            GPE_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(HasMessage("formed from dq and dk")) << gpe_last_error_message();
  // 0.9.0's struct: d_algebraic_tree lies beyond it and is not read (grad keeps its values).
  std::fill(grad.begin(), grad.end(), -7.0);
  pg.struct_size = offsetof(gpe_attention_param_grads, d_algebraic);
  EXPECT_EQ(gpe_attention_backward_with_parameters(&o, &x.tq, &x.tk, &x.tv, nullptr, nullptr,
                                                   &x.tg, &tdq, nullptr, nullptr, &pg),
            GPE_OK)
      << gpe_last_error_message();
  EXPECT_EQ(grad[0], -7.0);
}

}  // namespace
