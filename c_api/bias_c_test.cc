// Tests of gpe_bias_* (gpe.h, "Additive attention biases"): tiles equal the C++ API
// (encodings/sequence/bias.h) exactly, including strided outputs; ALiBi and FoX against
// their closed forms; every parameter gradient against central finite differences of
// L = sum(G .* tile) in double through the C ABI; bad input returns a status and a
// message.
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "encodings/sequence/bias.h"
#include "c_api/test_util.h"
#include "gpe/gpe.h"
#include "gtest/gtest.h"

namespace {

using gpe::c_api_test::CentralDifference;
using gpe::c_api_test::HasMessage;
using gpe::c_api_test::Random;
using gpe::c_api_test::Tensor;

namespace seq = gpe::encodings::sequence;

// A tile of positions for one call (q and k as int64 vectors) and its double output.
struct Tile {
  std::vector<int64_t> q, k, qshape, kshape, oshape;
  std::vector<double> out;
  DLTensor tq, tk, to;
  Tile(std::vector<int64_t> qp, std::vector<int64_t> kp) : q(std::move(qp)), k(std::move(kp)) {
    qshape = {static_cast<int64_t>(q.size())};
    kshape = {static_cast<int64_t>(k.size())};
    oshape = {qshape[0], kshape[0]};
    out.assign(q.size() * k.size(), 0.0);
    tq = Tensor(q.data(), kDLInt, 64, &qshape);
    tk = Tensor(k.data(), kDLInt, 64, &kshape);
    to = Tensor(out.data(), kDLFloat, 64, &oshape);
  }
};

std::vector<double> Fill(const gpe_bias* b, int64_t head, Tile* t) {
  EXPECT_EQ(gpe_bias_fill_tile(b, head, &t->tq, &t->tk, &t->to), GPE_OK)
      << gpe_last_error_message();
  return t->out;
}

TEST(BiasC, AlibiStandardSlopesAndClosedForm) {
  // Press et al.: 2^(-8h/n) for n = 8; for n = 12, the 8 slopes of 8 heads then the
  // odd-indexed (1st, 3rd, ...) slopes of 16 heads, 2^(-(2k + 1) / 2) for k < 4.
  for (int64_t n : {8, 12}) {
    gpe_alibi_options o = GPE_ALIBI_OPTIONS_INIT;
    o.num_heads = n;
    gpe_bias* b = nullptr;
    ASSERT_EQ(gpe_bias_create_alibi(&o, &b), GPE_OK) << gpe_last_error_message();
    std::vector<double> slopes(n);
    ASSERT_EQ(gpe_bias_alibi_slopes(b, slopes.data(), n), GPE_OK);
    for (int64_t h = 0; h < 8; ++h) EXPECT_DOUBLE_EQ(slopes[h], std::exp2(-(h + 1.0)));
    for (int64_t h = 8; h < n; ++h) {
      EXPECT_DOUBLE_EQ(slopes[h], std::exp2(-(2.0 * (h - 8) + 1.0) / 2.0));  // 4 ulps: pow vs exp2
    }
    int32_t kind = -1, causal = -1;
    int64_t heads = 0;
    ASSERT_EQ(gpe_bias_info(b, &kind, &heads, &causal), GPE_OK);
    EXPECT_EQ(kind, GPE_BIAS_ALIBI);
    EXPECT_EQ(heads, n);
    EXPECT_EQ(causal, 1);
    Tile t({0, 5, 1000000007}, {0, 3, 5, 999999990});
    const std::vector<double> v = Fill(b, n - 1, &t);
    for (size_t r = 0; r < 3; ++r) {
      for (size_t c = 0; c < 4; ++c) {
        // -m (i - j): one rounding of an exact integer difference times m (4 ulps).
        EXPECT_DOUBLE_EQ(v[r * 4 + c], -slopes[n - 1] * static_cast<double>(t.q[r] - t.k[c]));
      }
    }
    gpe_bias_destroy(b);
  }
}

// Each kind's tiles equal the C++ object's, for float32 and float64 outputs, with a
// transposed (column-major) output view.
TEST(BiasC, TilesEqualCppApiForEveryKind) {
  std::mt19937_64 rng(3);
  const int64_t heads = 3, len = 9, rank = 2, first = 100;
  std::vector<double> slopes = {0.5, 0.125, 0.03};
  std::vector<double> table = Random(&rng, 8 * heads);
  std::vector<double> logits = Random(&rng, len * heads, 3.0);
  std::vector<double> w = Random(&rng, len * heads * rank), u = Random(&rng, w.size());

  gpe_alibi_options ao = GPE_ALIBI_OPTIONS_INIT;
  ao.num_heads = heads;
  ao.slopes = slopes.data();
  ao.form = GPE_ALIBI_SYMMETRIC;
  gpe_t5_options to = GPE_T5_OPTIONS_INIT;
  to.num_heads = heads;
  to.num_buckets = 8;
  to.max_distance = 20;
  to.table = table.data();
  gpe_fox_options fo = GPE_FOX_OPTIONS_INIT;
  fo.length = len;
  fo.num_heads = heads;
  fo.first_position = first;
  fo.gate_logits = logits.data();
  gpe_grape_ap_options go = GPE_GRAPE_AP_OPTIONS_INIT;
  go.length = len;
  go.num_heads = heads;
  go.rank = rank;
  go.first_position = first;
  go.w = w.data();
  go.u = u.data();
  gpe_bias *alibi = nullptr, *t5 = nullptr, *fox = nullptr, *ap = nullptr;
  ASSERT_EQ(gpe_bias_create_alibi(&ao, &alibi), GPE_OK);
  ASSERT_EQ(gpe_bias_create_t5(&to, &t5), GPE_OK) << gpe_last_error_message();
  ASSERT_EQ(gpe_bias_create_fox(&fo, &fox), GPE_OK) << gpe_last_error_message();
  ASSERT_EQ(gpe_bias_create_grape_ap(&go, &ap), GPE_OK) << gpe_last_error_message();
  seq::T5BucketConfig config;
  config.num_buckets = 8;
  config.max_distance = 20;
  const seq::AlibiBias calibi = *seq::AlibiBias::Create(slopes, seq::AlibiForm::kSymmetric);
  const seq::T5RelativeBias ct5 = *seq::T5RelativeBias::Create(table, heads, config);
  const seq::FoxBias cfox = *seq::FoxBias::Create(logits, len, heads, first);
  const seq::GrapeApBias cap = *seq::GrapeApBias::Create(w, u, len, heads, rank, first);
  const std::vector<std::pair<const gpe_bias*, const seq::AdditiveBias*>> pairs = {
      {alibi, &calibi}, {t5, &ct5}, {fox, &cfox}, {ap, &cap}};
  std::vector<int64_t> q = {108, 100, 104, 105}, k = {101, 108, 100, 103, 106};
  std::vector<int64_t> qshape = {4}, kshape = {5}, oshape = {4, 5}, colmajor = {1, 4};
  DLTensor tq = Tensor(q.data(), kDLInt, 64, &qshape);
  DLTensor tk = Tensor(k.data(), kDLInt, 64, &kshape);
  for (const auto& [cb, cpp] : pairs) {
    for (int64_t h = 0; h < heads; ++h) {
      std::vector<double> want(20);
      ASSERT_TRUE(cpp->FillTile(h, q, k, want.data(), 5).ok());
      std::vector<double> got(20);
      DLTensor tcol = Tensor(got.data(), kDLFloat, 64, &oshape, &colmajor);
      ASSERT_EQ(gpe_bias_fill_tile(cb, h, &tq, &tk, &tcol), GPE_OK) << gpe_last_error_message();
      for (int64_t r = 0; r < 4; ++r) {
        for (int64_t c = 0; c < 5; ++c) EXPECT_EQ(got[r + 4 * c], want[r * 5 + c]);
      }
      std::vector<float> wantf(20), gotf(20);
      ASSERT_TRUE(cpp->FillTile(h, q, k, wantf.data(), 5).ok());
      DLTensor tf = Tensor(gotf.data(), kDLFloat, 32, &oshape);
      ASSERT_EQ(gpe_bias_fill_tile(cb, h, &tq, &tk, &tf), GPE_OK);
      EXPECT_EQ(gotf, wantf);
    }
  }
  // FoX is c_i - c_j with c_t the prefix sum of ln sigmoid(x) (Lin et al.): tolerance
  // 1e-13 for |c| ~ 10 (a straightforward double loop, rounding only).
  for (int64_t h = 0; h < heads; ++h) {
    std::vector<double> c(len);
    double acc = 0.0;
    for (int64_t t = 0; t < len; ++t) {
      acc += -std::log1p(std::exp(-logits[t * heads + h]));
      c[t] = acc;
    }
    Tile tile(q, k);
    const std::vector<double> v = Fill(fox, h, &tile);
    for (int64_t r = 0; r < 4; ++r) {
      for (int64_t cc = 0; cc < 5; ++cc) {
        EXPECT_NEAR(v[r * 5 + cc], c[q[r] - first] - c[k[cc] - first], 1e-13);
      }
    }
  }
  for (gpe_bias* b : {alibi, t5, fox, ap}) gpe_bias_destroy(b);
  gpe_bias_destroy(nullptr);
}

// dL/dparam for L = sum over two tiles of G .* tile, against central differences of L
// recomputed through gpe_bias_create + gpe_bias_fill_tile with one parameter moved by
// +-h. ALiBi and T5 are linear in their parameters (exact up to rounding, ~1e-12);
// FoX and GRAPE-AP are smooth with |second derivative| = O(1) per term, so the central
// difference's truncation error is ~h^2 * |L'''| ~ 1e-10 with h = 1e-5, plus rounding
// ~1e-16 * |L| / h ~ 1e-10. Tolerance 1e-7 relative to max(1, |grad|).
void CheckGradient(const std::function<gpe_bias*(const std::vector<double>&)>& make,
                   std::vector<double> params, std::vector<int64_t> grad_shape, bool two) {
  std::mt19937_64 rng(11);
  const std::vector<std::vector<int64_t>> qs = {{0, 3, 5, 6}, {7, 2}};
  const std::vector<std::vector<int64_t>> ks = {{0, 1, 4, 6, 2}, {7, 1, 0}};
  const int64_t head = 1;
  std::vector<std::vector<double>> gs;
  for (size_t t = 0; t < qs.size(); ++t) gs.push_back(Random(&rng, qs[t].size() * ks[t].size()));
  auto loss = [&](const std::vector<double>& p) {
    gpe_bias* b = make(p);
    double l = 0.0;
    for (size_t t = 0; t < qs.size(); ++t) {
      Tile tile(qs[t], ks[t]);
      const std::vector<double> v = Fill(b, head, &tile);
      for (size_t i = 0; i < v.size(); ++i) l += gs[t][i] * v[i];
    }
    gpe_bias_destroy(b);
    return l;
  };
  const size_t n = params.size() / (two ? 2 : 1);
  std::vector<double> ga(n, 0.0), gb(n, 0.0);
  gpe_bias* b = make(params);
  for (size_t t = 0; t < qs.size(); ++t) {
    Tile tile(qs[t], ks[t]);
    std::vector<int64_t> gshape = grad_shape;
    DLTensor tg = Tensor(gs[t].data(), kDLFloat, 64, &tile.oshape);
    DLTensor ta = Tensor(ga.data(), kDLFloat, 64, &gshape);
    DLTensor tb = Tensor(gb.data(), kDLFloat, 64, &gshape);
    ASSERT_EQ(gpe_bias_accumulate_gradient(b, head, &tile.tq, &tile.tk, &tg, &ta,
                                           two ? &tb : nullptr),
              GPE_OK)
        << gpe_last_error_message();
  }
  int32_t kind = 0;
  ASSERT_EQ(gpe_bias_info(b, &kind, nullptr, nullptr), GPE_OK);
  std::vector<double> grad = ga;
  if (kind == GPE_BIAS_FOX) {
    std::vector<int64_t> gshape = grad_shape;
    DLTensor tp = Tensor(ga.data(), kDLFloat, 64, &gshape);
    DLTensor tl = Tensor(grad.data(), kDLFloat, 64, &gshape);
    ASSERT_EQ(gpe_bias_fox_logit_gradient(b, &tp, &tl), GPE_OK) << gpe_last_error_message();
  }
  if (two) grad.insert(grad.end(), gb.begin(), gb.end());
  gpe_bias_destroy(b);
  const double h = 1e-5;
  bool any_nonzero = false;
  for (size_t i = 0; i < params.size(); ++i) {
    const double fd = CentralDifference(&params, i, h, [&] { return loss(params); });
    EXPECT_NEAR(grad[i], fd, 1e-7 * std::max(1.0, std::abs(fd))) << "param " << i;
    any_nonzero = any_nonzero || std::abs(fd) > 1e-3;
  }
  EXPECT_TRUE(any_nonzero) << "the check would pass with a zero gradient";
}

TEST(BiasC, GradientsMatchCentralDifferences) {
  std::mt19937_64 rng(13);
  const int64_t heads = 2, len = 8, rank = 2;
  CheckGradient(
      [](const std::vector<double>& p) {
        gpe_alibi_options o = GPE_ALIBI_OPTIONS_INIT;
        o.num_heads = 2;
        o.slopes = p.data();
        gpe_bias* b = nullptr;
        EXPECT_EQ(gpe_bias_create_alibi(&o, &b), GPE_OK);
        return b;
      },
      {0.25, 0.5}, {heads}, false);
  CheckGradient(
      [](const std::vector<double>& p) {
        gpe_t5_options o = GPE_T5_OPTIONS_INIT;
        o.num_heads = 2;
        o.num_buckets = 6;
        o.max_distance = 5;
        o.table = p.data();
        gpe_bias* b = nullptr;
        EXPECT_EQ(gpe_bias_create_t5(&o, &b), GPE_OK) << gpe_last_error_message();
        return b;
      },
      Random(&rng, 6 * heads), {6, heads}, false);
  CheckGradient(
      [](const std::vector<double>& p) {
        gpe_fox_options o = GPE_FOX_OPTIONS_INIT;
        o.length = 8;
        o.num_heads = 2;
        o.gate_logits = p.data();
        gpe_bias* b = nullptr;
        EXPECT_EQ(gpe_bias_create_fox(&o, &b), GPE_OK);
        return b;
      },
      Random(&rng, len * heads, 2.0), {len, heads}, false);
  CheckGradient(
      [](const std::vector<double>& p) {
        gpe_grape_ap_options o = GPE_GRAPE_AP_OPTIONS_INIT;
        o.length = 8;
        o.num_heads = 2;
        o.rank = 2;
        o.w = p.data();
        o.u = p.data() + 8 * 2 * 2;
        gpe_bias* b = nullptr;
        EXPECT_EQ(gpe_bias_create_grape_ap(&o, &b), GPE_OK);
        return b;
      },
      Random(&rng, 2 * len * heads * rank), {len, heads, rank}, true);
}

TEST(BiasC, BadInputRejected) {
  gpe_bias* b = reinterpret_cast<gpe_bias*>(1);
  EXPECT_EQ(gpe_bias_create_alibi(nullptr, &b), GPE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(b, nullptr);
  gpe_alibi_options ao = GPE_ALIBI_OPTIONS_INIT;
  EXPECT_EQ(gpe_bias_create_alibi(&ao, &b), GPE_ERROR_INVALID_ARGUMENT);  // 0 heads
  EXPECT_TRUE(HasMessage("num_heads"));
  ao.num_heads = 2;
  ao.form = 5;
  EXPECT_EQ(gpe_bias_create_alibi(&ao, &b), GPE_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(HasMessage("form"));
  ao.form = GPE_ALIBI_CAUSAL;
  std::vector<double> nan_slopes = {0.5, std::nan("")};
  ao.slopes = nan_slopes.data();
  EXPECT_EQ(gpe_bias_create_alibi(&ao, &b), GPE_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(HasMessage("finite"));
  ao.slopes = nullptr;
  ao.struct_size += 4;
  EXPECT_EQ(gpe_bias_create_alibi(&ao, &b), GPE_ERROR_VERSION_MISMATCH);
  ao.struct_size = sizeof ao;
  EXPECT_EQ(gpe_bias_create_alibi(&ao, nullptr), GPE_ERROR_INVALID_ARGUMENT);

  gpe_t5_options to = GPE_T5_OPTIONS_INIT;
  to.num_heads = 2;
  EXPECT_EQ(gpe_bias_create_t5(&to, &b), GPE_ERROR_INVALID_ARGUMENT);  // NULL table
  EXPECT_TRUE(HasMessage("table is NULL"));
  std::vector<double> table(64, 0.1);
  to.table = table.data();
  to.num_buckets = 3;  // bidirectional needs >= 4
  EXPECT_EQ(gpe_bias_create_t5(&to, &b), GPE_ERROR_INVALID_ARGUMENT);
  to.num_buckets = 32;
  to.max_distance = 0;
  EXPECT_EQ(gpe_bias_create_t5(&to, &b), GPE_ERROR_INVALID_ARGUMENT);
  to.max_distance = 128;
  table[7] = std::numeric_limits<double>::infinity();
  EXPECT_EQ(gpe_bias_create_t5(&to, &b), GPE_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(HasMessage("table[7]"));
  to.num_heads = int64_t{1} << 40;  // the table size overflows the limit
  EXPECT_EQ(gpe_bias_create_t5(&to, &b), GPE_ERROR_OUT_OF_RANGE);

  std::vector<double> logits = {0.1, std::nan(""), 0.3, 0.4};
  gpe_fox_options fo = GPE_FOX_OPTIONS_INIT;
  fo.length = 2;
  fo.num_heads = 2;
  fo.gate_logits = logits.data();
  EXPECT_EQ(gpe_bias_create_fox(&fo, &b), GPE_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(HasMessage("gate_logits[1]"));
  fo.length = -1;
  EXPECT_EQ(gpe_bias_create_fox(&fo, &b), GPE_ERROR_INVALID_ARGUMENT);
  logits[1] = 0.2;
  fo.length = 2;
  fo.first_position = 10;
  gpe_bias* fox = nullptr;
  ASSERT_EQ(gpe_bias_create_fox(&fo, &fox), GPE_OK);

  gpe_grape_ap_options go = GPE_GRAPE_AP_OPTIONS_INIT;
  go.length = 2;
  go.num_heads = 1;
  go.rank = 0;
  EXPECT_EQ(gpe_bias_create_grape_ap(&go, &b), GPE_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(HasMessage("rank"));
  go.rank = 1;
  go.w = logits.data();
  EXPECT_EQ(gpe_bias_create_grape_ap(&go, &b), GPE_ERROR_INVALID_ARGUMENT);  // u NULL
  EXPECT_TRUE(HasMessage("u is NULL"));

  // Tiles: positions outside FoX's range, head out of range, wrong out shape, overlap.
  Tile t({10, 11}, {10, 12});
  EXPECT_EQ(gpe_bias_fill_tile(fox, 0, &t.tq, &t.tk, &t.to), GPE_ERROR_INVALID_ARGUMENT);
  t.k[1] = 11;
  EXPECT_EQ(gpe_bias_fill_tile(fox, 0, &t.tq, &t.tk, &t.to), GPE_OK);
  EXPECT_EQ(gpe_bias_fill_tile(fox, 2, &t.tq, &t.tk, &t.to), GPE_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(HasMessage("head 2"));
  EXPECT_EQ(gpe_bias_fill_tile(fox, -1, &t.tq, &t.tk, &t.to), GPE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(gpe_bias_fill_tile(nullptr, 0, &t.tq, &t.tk, &t.to), GPE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(gpe_bias_fill_tile(fox, 0, nullptr, &t.tk, &t.to), GPE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(gpe_bias_fill_tile(fox, 0, &t.tq, &t.tk, nullptr), GPE_ERROR_INVALID_ARGUMENT);
  std::vector<int64_t> wrong = {2, 3};
  DLTensor tw = Tensor(t.out.data(), kDLFloat, 64, &wrong);
  EXPECT_EQ(gpe_bias_fill_tile(fox, 0, &t.tq, &t.tk, &tw), GPE_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(HasMessage("shape"));
  std::vector<int64_t> zero_rows = {0, 1};
  DLTensor tz = Tensor(t.out.data(), kDLFloat, 64, &t.oshape, &zero_rows);
  EXPECT_EQ(gpe_bias_fill_tile(fox, 0, &t.tq, &t.tk, &tz), GPE_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(HasMessage("overlap"));
  // out [2, 2] over the second q position (one buffer holds both; nothing is written).
  std::vector<int64_t> shared = {10, 11, 0, 0, 0}, two = {2};
  DLTensor tq2 = Tensor(shared.data(), kDLInt, 64, &two);
  DLTensor tov = Tensor(shared.data() + 1, kDLFloat, 64, &t.oshape);
  EXPECT_EQ(gpe_bias_fill_tile(fox, 0, &tq2, &t.tk, &tov), GPE_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(HasMessage("overlap")) << gpe_last_error_message();
  std::vector<int64_t> big = {std::numeric_limits<int64_t>::max()}, bshape = {1};
  DLTensor tbig = Tensor(big.data(), kDLInt, 64, &bshape);
  ao.form = GPE_ALIBI_CAUSAL;
  gpe_bias* alibi = nullptr;
  ASSERT_EQ(gpe_bias_create_alibi(&ao, &alibi), GPE_OK);
  std::vector<int64_t> neg = {-5}, oshape = {1, 1};
  double one_out = 0.0;
  DLTensor tneg = Tensor(neg.data(), kDLInt, 64, &bshape);
  DLTensor t11 = Tensor(&one_out, kDLFloat, 64, &oshape);
  EXPECT_EQ(gpe_bias_fill_tile(alibi, 0, &tbig, &tneg, &t11), GPE_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(HasMessage("overflow")) << gpe_last_error_message();

  // Gradients: wrong shapes, grad_b on a non-GRAPE-AP bias, FoX-only call.
  std::vector<double> grad_tile(4, 1.0), ga(4, 0.0), gwrong(6, 0.0);
  std::vector<int64_t> gshape = {2, 2}, g3 = {2, 3};
  DLTensor tg = Tensor(grad_tile.data(), kDLFloat, 64, &t.oshape);
  DLTensor tga = Tensor(ga.data(), kDLFloat, 64, &gshape);
  DLTensor tgw = Tensor(gwrong.data(), kDLFloat, 64, &g3);
  EXPECT_EQ(gpe_bias_accumulate_gradient(fox, 0, &t.tq, &t.tk, &tg, &tga, nullptr), GPE_OK);
  EXPECT_EQ(gpe_bias_accumulate_gradient(fox, 0, &t.tq, &t.tk, &tg, &tgw, nullptr),
            GPE_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(HasMessage("grad_a must be float64 [2, 2]"));
  EXPECT_EQ(gpe_bias_accumulate_gradient(fox, 0, &t.tq, &t.tk, &tg, &tga, &tga),
            GPE_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(HasMessage("only for GRAPE-AP"));
  EXPECT_EQ(gpe_bias_accumulate_gradient(fox, 0, &t.tq, &t.tk, &tg, nullptr, nullptr),
            GPE_ERROR_INVALID_ARGUMENT);
  DLTensor tga_over = Tensor(grad_tile.data(), kDLFloat, 64, &gshape);  // grad_a == grad_tile
  EXPECT_EQ(gpe_bias_accumulate_gradient(fox, 0, &t.tq, &t.tk, &tg, &tga_over, nullptr),
            GPE_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(HasMessage("overlap"));
  std::vector<int64_t> s1 = {2};
  std::vector<double> gs(2, 0.0);
  DLTensor tgs = Tensor(gs.data(), kDLFloat, 64, &s1);
  EXPECT_EQ(gpe_bias_fox_logit_gradient(alibi, &tga, &tga), GPE_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(HasMessage("FoX"));
  EXPECT_EQ(gpe_bias_fox_logit_gradient(fox, &tgs, &tga), GPE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(gpe_bias_fox_logit_gradient(fox, &tga, &tga), GPE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(gpe_bias_alibi_slopes(fox, gs.data(), 2), GPE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(gpe_bias_alibi_slopes(alibi, gs.data(), 3), GPE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(gpe_bias_info(nullptr, nullptr, nullptr, nullptr), GPE_ERROR_INVALID_ARGUMENT);
  gpe_bias_destroy(alibi);
  gpe_bias_destroy(fox);
}

// ---- GRAPE-A ------------------------------------------------------------------------

gpe_bias* MakeAlibi(int64_t heads, const double* slopes) {
  gpe_alibi_options o = GPE_ALIBI_OPTIONS_INIT;
  o.num_heads = heads;
  o.slopes = slopes;
  gpe_bias* b = nullptr;
  EXPECT_EQ(gpe_bias_create_alibi(&o, &b), GPE_OK) << gpe_last_error_message();
  return b;
}

gpe_bias* MakeGrapeA(int64_t heads, int64_t head_dim, int32_t path, const double* slopes) {
  gpe_grape_a_options o = GPE_GRAPE_A_OPTIONS_INIT;
  o.num_heads = heads;
  o.head_dim = head_dim;
  o.path = path;
  o.slopes = slopes;
  gpe_bias* b = nullptr;
  EXPECT_EQ(gpe_bias_create_grape_a(&o, &b), GPE_OK) << gpe_last_error_message();
  return b;
}

gpe_bias* MakeGatedGrapeA(int64_t heads, int64_t head_dim, int32_t path,
                          std::vector<double>* logits, int64_t first) {
  gpe_grape_a_options o = GPE_GRAPE_A_OPTIONS_INIT;
  o.num_heads = heads;
  o.head_dim = head_dim;
  o.path = path;
  o.gated = 1;
  o.length = static_cast<int64_t>(logits->size()) / heads;
  o.first_position = first;
  o.gate_logits = logits->data();
  gpe_bias* b = nullptr;
  EXPECT_EQ(gpe_bias_create_grape_a(&o, &b), GPE_OK) << gpe_last_error_message();
  return b;
}

TEST(BiasC, GrapeAEqualsAlibiExactly) {
  // Tolerance 0. The closed form is ALiBi's arithmetic for any slopes (Press et al.'s
  // for 12 heads here, not powers of two); the lifted path's m j - m i is exact for the
  // power-of-two slopes of 8 heads, so it is ALiBi's value too.
  for (int64_t heads : {12, 8}) {
    gpe_bias* alibi = MakeAlibi(heads, nullptr);
    for (int32_t path : {GPE_GRAPE_A_CLOSED_FORM, GPE_GRAPE_A_LIFTED}) {
      if (heads == 12 && path == GPE_GRAPE_A_LIFTED) continue;  // covered by the next test
      gpe_bias* grape = MakeGrapeA(heads, 8, path, nullptr);
      int32_t kind = -1, causal = -1;
      int64_t n = 0;
      ASSERT_EQ(gpe_bias_info(grape, &kind, &n, &causal), GPE_OK);
      EXPECT_EQ(kind, GPE_BIAS_GRAPE_A);
      EXPECT_EQ(n, heads);
      EXPECT_EQ(causal, 1);
      std::vector<double> s_alibi(heads), s_grape(heads);
      ASSERT_EQ(gpe_bias_alibi_slopes(alibi, s_alibi.data(), heads), GPE_OK);
      ASSERT_EQ(gpe_bias_alibi_slopes(grape, s_grape.data(), heads), GPE_OK);
      EXPECT_EQ(s_alibi, s_grape);
      for (int64_t h = 0; h < heads; ++h) {
        Tile a({0, 5, 17, 1000000007}, {0, 3, 5, 999999990, 1000000100});
        Tile g({0, 5, 17, 1000000007}, {0, 3, 5, 999999990, 1000000100});
        EXPECT_EQ(Fill(grape, h, &g), Fill(alibi, h, &a)) << "head " << h << " path " << path;
      }
      gpe_bias_destroy(grape);
    }
    gpe_bias_destroy(alibi);
  }
}

TEST(BiasC, GrapeALiftedPathMatchesClosedFormForAnySlopes) {
  // Non-power-of-two slopes: the lift rounds m j and m i once each, so the paths differ
  // by at most eps m (|i| + |j|) + eps |b|; twice that is allowed.
  const std::vector<double> slopes = {0.3, 1.0 / 3.0, 2.7};
  gpe_bias* fast = MakeGrapeA(3, 5, GPE_GRAPE_A_CLOSED_FORM, slopes.data());
  gpe_bias* lifted = MakeGrapeA(3, 5, GPE_GRAPE_A_LIFTED, slopes.data());
  const double eps = std::numeric_limits<double>::epsilon();
  for (int64_t h = 0; h < 3; ++h) {
    Tile a({10, 20000, 123457}, {0, 19999, 123456, 7});
    Tile b({10, 20000, 123457}, {0, 19999, 123456, 7});
    const std::vector<double> va = Fill(fast, h, &a), vb = Fill(lifted, h, &b);
    for (size_t r = 0; r < 3; ++r) {
      for (size_t c = 0; c < 4; ++c) {
        const double bound = 2 * eps *
                             (slopes[h] * (std::fabs(static_cast<double>(a.q[r])) +
                                           std::fabs(static_cast<double>(a.k[c]))) +
                              std::fabs(va[r * 4 + c]));
        EXPECT_NEAR(vb[r * 4 + c], va[r * 4 + c], bound);
        EXPECT_EQ(va[r * 4 + c], -slopes[h] * static_cast<double>(a.q[r] - a.k[c]));
      }
    }
  }
  gpe_bias_destroy(fast);
  gpe_bias_destroy(lifted);
}

TEST(BiasC, GatedGrapeAEqualsFoxExactly) {
  // The closed form fills FoX's own tiles: tolerance 0. The lift's rows [0; 1; c_i],
  // [0; -c_j; 1] dot to c_i - c_j of the prefix sums rounded to one double each, while
  // FoX's tiles take that difference in double-double (issue 24): they agree to within
  // half an ulp of each prefix sum, 2^-53 (|c_i| + |c_j|) <= 2^-52 max |c|.
  std::mt19937_64 rng(31);
  const int64_t heads = 2, len = 11, first = 50;
  std::vector<double> logits = Random(&rng, len * heads, 2.0);
  gpe_fox_options fo = GPE_FOX_OPTIONS_INIT;
  fo.length = len;
  fo.num_heads = heads;
  fo.first_position = first;
  fo.gate_logits = logits.data();
  gpe_bias* fox = nullptr;
  ASSERT_EQ(gpe_bias_create_fox(&fo, &fox), GPE_OK);
  for (int32_t path : {GPE_GRAPE_A_CLOSED_FORM, GPE_GRAPE_A_LIFTED}) {
    gpe_bias* grape = MakeGatedGrapeA(heads, 3, path, &logits, first);
    for (int64_t h = 0; h < heads; ++h) {
      Tile a({50, 55, 60}, {50, 51, 58, 60});
      Tile b({50, 55, 60}, {50, 51, 58, 60});
      const std::vector<double> got = Fill(grape, h, &a), want = Fill(fox, h, &b);
      if (path == GPE_GRAPE_A_CLOSED_FORM) {
        EXPECT_EQ(got, want);
      } else {
        double cmax = 0;  // max |c| <= sum of |ln sigmoid(x_l)| <= sum of |x_l| + ln 2
        for (int64_t l = 0; l < len; ++l) cmax += std::fabs(logits[l * heads + h]) + 0.7;
        for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 0x1p-52 * cmax);
      }
    }
    // Slopes belong to the ungated form only.
    std::vector<double> s(heads);
    EXPECT_EQ(gpe_bias_alibi_slopes(grape, s.data(), heads), GPE_ERROR_INVALID_ARGUMENT);
    gpe_bias_destroy(grape);
  }
  gpe_bias_destroy(fox);
}

TEST(BiasC, GrapeALiftRowsScoreAsDotPlusBias) {
  // <lift_q(i), lift_k(j)> = <q, k> + b(i, j) through gpe_bias_grape_a_lift (float64,
  // and float32 with one rounding per stored entry), for both forms.
  std::mt19937_64 rng(32);
  const int64_t d = 4, first = 3, len = 20;
  std::vector<double> slopes = {0.25, 0.7};
  std::vector<double> logits = Random(&rng, len * 2, 2.0);
  gpe_bias* forms[] = {MakeGrapeA(2, d, GPE_GRAPE_A_CLOSED_FORM, slopes.data()),
                       MakeGatedGrapeA(2, d, GPE_GRAPE_A_CLOSED_FORM, &logits, first)};
  for (gpe_bias* b : forms) {
    for (int64_t h = 0; h < 2; ++h) {
      std::vector<int64_t> qp = {4, 9, 20}, kp = {3, 4, 15, 22};
      std::vector<double> q = Random(&rng, 3 * d), k = Random(&rng, 4 * d);
      std::vector<double> lq(3 * (d + 2)), lk(4 * (d + 2));
      std::vector<int64_t> sqp = {3}, skp = {4}, sq = {3, d}, sk = {4, d}, slq = {3, d + 2},
                           slk = {4, d + 2};
      DLTensor tqp = Tensor(qp.data(), kDLInt, 64, &sqp), tkp = Tensor(kp.data(), kDLInt, 64, &skp);
      DLTensor tq = Tensor(q.data(), kDLFloat, 64, &sq), tk = Tensor(k.data(), kDLFloat, 64, &sk);
      DLTensor tlq = Tensor(lq.data(), kDLFloat, 64, &slq),
               tlk = Tensor(lk.data(), kDLFloat, 64, &slk);
      ASSERT_EQ(gpe_bias_grape_a_lift(b, h, GPE_GRAPE_A_QUERY, &tqp, &tq, &tlq), GPE_OK)
          << gpe_last_error_message();
      ASSERT_EQ(gpe_bias_grape_a_lift(b, h, GPE_GRAPE_A_KEY, &tkp, &tk, &tlk), GPE_OK)
          << gpe_last_error_message();
      Tile t(qp, kp);
      const std::vector<double> bias = Fill(b, h, &t);
      for (int64_t r = 0; r < 3; ++r) {
        for (int64_t c = 0; c < 4; ++c) {
          double lifted = 0.0, dot = 0.0;
          for (int64_t e = 0; e < d + 2; ++e) lifted += lq[r * (d + 2) + e] * lk[c * (d + 2) + e];
          for (int64_t e = 0; e < d; ++e) dot += q[r * d + e] * k[c * d + e];
          // Terms |q||k| ~ 4, |b| ~ 20: a 6-term dot rounds below 1e-13.
          EXPECT_NEAR(lifted, dot + bias[r * 4 + c], 1e-12);
        }
      }
      // float32 rows: each stored entry is the double value rounded once.
      std::vector<float> qf(q.begin(), q.end()), lqf(3 * (d + 2));
      DLTensor tqf = Tensor(qf.data(), kDLFloat, 32, &sq), tlqf = Tensor(lqf.data(), kDLFloat, 32, &slq);
      ASSERT_EQ(gpe_bias_grape_a_lift(b, h, GPE_GRAPE_A_QUERY, &tqp, &tqf, &tlqf), GPE_OK);
      for (size_t e = 0; e < lqf.size(); ++e) EXPECT_EQ(lqf[e], static_cast<float>(lq[e]));
    }
  }
  for (gpe_bias* b : forms) gpe_bias_destroy(b);
}

TEST(BiasC, GrapeAGradientsMatchFiniteDifferences) {
  std::mt19937_64 rng(33);
  std::vector<int64_t> qp = {2, 6, 9}, kp = {1, 2, 5, 9, 11};
  std::vector<double> g = Random(&rng, 15);
  std::vector<int64_t> gshape = {3, 5};
  DLTensor tg = Tensor(g.data(), kDLFloat, 64, &gshape);
  auto loss = [&](gpe_bias* b, int64_t heads) {
    double sum = 0.0;
    for (int64_t h = 0; h < heads; ++h) {
      Tile t(qp, kp);
      const std::vector<double> v = Fill(b, h, &t);
      for (size_t e = 0; e < v.size(); ++e) sum += g[e] * v[e];
    }
    return sum;
  };
  // Slopes: L is linear in each slope, so the central difference (step 1e-3) has no
  // truncation error; rounding ~ eps |L| / 1e-3 ~ 1e-12. Tolerance 1e-9.
  std::vector<double> slopes = {0.4, 0.15};
  for (int32_t path : {GPE_GRAPE_A_CLOSED_FORM, GPE_GRAPE_A_LIFTED}) {
    gpe_bias* b = MakeGrapeA(2, 2, path, slopes.data());
    std::vector<double> grad(2, 0.0);
    std::vector<int64_t> sg = {2};
    DLTensor tgrad = Tensor(grad.data(), kDLFloat, 64, &sg);
    for (int64_t h = 0; h < 2; ++h) {
      Tile t(qp, kp);
      ASSERT_EQ(gpe_bias_accumulate_gradient(b, h, &t.tq, &t.tk, &tg, &tgrad, nullptr), GPE_OK)
          << gpe_last_error_message();
    }
    gpe_bias_destroy(b);
    for (int64_t h = 0; h < 2; ++h) {
      std::vector<double> sp = slopes, sm = slopes;
      sp[h] += 1e-3;
      sm[h] -= 1e-3;
      gpe_bias *bp = MakeGrapeA(2, 2, path, sp.data()), *bm = MakeGrapeA(2, 2, path, sm.data());
      EXPECT_NEAR(grad[h], (loss(bp, 2) - loss(bm, 2)) / 2e-3, 1e-9);
      gpe_bias_destroy(bp);
      gpe_bias_destroy(bm);
    }
  }
  // Gated: dL/dc per tile, then dL/dx; smooth, step 1e-5: error ~ 1e-10; tolerance 1e-7.
  const int64_t heads = 2, len = 12, first = 1;
  std::vector<double> logits = Random(&rng, len * heads);
  gpe_bias* b = MakeGatedGrapeA(heads, 2, GPE_GRAPE_A_LIFTED, &logits, first);
  std::vector<double> prefix(len * heads, 0.0), grad(len * heads, 0.0);
  std::vector<int64_t> sp = {len, heads};
  DLTensor tprefix = Tensor(prefix.data(), kDLFloat, 64, &sp);
  DLTensor tgrad = Tensor(grad.data(), kDLFloat, 64, &sp);
  for (int64_t h = 0; h < heads; ++h) {
    Tile t(qp, kp);
    ASSERT_EQ(gpe_bias_accumulate_gradient(b, h, &t.tq, &t.tk, &tg, &tprefix, nullptr), GPE_OK)
        << gpe_last_error_message();
  }
  ASSERT_EQ(gpe_bias_fox_logit_gradient(b, &tprefix, &tgrad), GPE_OK) << gpe_last_error_message();
  gpe_bias_destroy(b);
  for (size_t e = 0; e < logits.size(); ++e) {
    std::vector<double> xp = logits, xm = logits;
    xp[e] += 1e-5;
    xm[e] -= 1e-5;
    gpe_bias* bp = MakeGatedGrapeA(heads, 2, GPE_GRAPE_A_CLOSED_FORM, &xp, first);
    gpe_bias* bm = MakeGatedGrapeA(heads, 2, GPE_GRAPE_A_CLOSED_FORM, &xm, first);
    EXPECT_NEAR(grad[e], (loss(bp, heads) - loss(bm, heads)) / 2e-5, 1e-7) << "logit " << e;
    gpe_bias_destroy(bp);
    gpe_bias_destroy(bm);
  }
}

TEST(BiasC, GrapeABadInput) {
  gpe_bias* b = nullptr;
  gpe_grape_a_options o = GPE_GRAPE_A_OPTIONS_INIT;
  o.num_heads = 2;
  o.head_dim = 4;
  EXPECT_EQ(gpe_bias_create_grape_a(nullptr, &b), GPE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(gpe_bias_create_grape_a(&o, nullptr), GPE_ERROR_INVALID_ARGUMENT);
  gpe_grape_a_options bad = o;
  bad.struct_size += 8;
  EXPECT_EQ(gpe_bias_create_grape_a(&bad, &b), GPE_ERROR_VERSION_MISMATCH);
  bad = o;
  bad.path = 7;
  EXPECT_EQ(gpe_bias_create_grape_a(&bad, &b), GPE_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(HasMessage("path"));
  bad = o;
  bad.num_heads = 0;
  EXPECT_EQ(gpe_bias_create_grape_a(&bad, &b), GPE_ERROR_INVALID_ARGUMENT);
  bad = o;
  bad.head_dim = 0;
  EXPECT_EQ(gpe_bias_create_grape_a(&bad, &b), GPE_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(HasMessage("head_dim"));
  std::vector<double> slopes = {0.5, std::numeric_limits<double>::infinity()};
  bad = o;
  bad.slopes = slopes.data();
  EXPECT_EQ(gpe_bias_create_grape_a(&bad, &b), GPE_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(HasMessage("slopes"));
  std::vector<double> logits = {0.1, 0.2, std::nan(""), 0.4};
  bad = o;
  bad.gated = 1;
  bad.length = 2;
  bad.gate_logits = logits.data();
  EXPECT_EQ(gpe_bias_create_grape_a(&bad, &b), GPE_ERROR_INVALID_ARGUMENT);  // NaN gate
  logits[2] = 0.3;
  bad.slopes = slopes.data();
  EXPECT_EQ(gpe_bias_create_grape_a(&bad, &b), GPE_ERROR_INVALID_ARGUMENT);  // slopes + gated
  bad = o;
  bad.gate_logits = logits.data();
  bad.length = 2;
  EXPECT_EQ(gpe_bias_create_grape_a(&bad, &b), GPE_ERROR_INVALID_ARGUMENT);  // gates, gated = 0
  EXPECT_EQ(b, nullptr);

  ASSERT_EQ(gpe_bias_create_grape_a(&o, &b), GPE_OK);
  std::vector<int64_t> pos = {0, 1};
  std::vector<double> x(8, 1.0), lifted(12, 0.0), small(8, 0.0);
  std::vector<int64_t> sp = {2}, sx = {2, 4}, sl = {2, 6}, ss = {2, 4};
  DLTensor tp = Tensor(pos.data(), kDLInt, 64, &sp), tx = Tensor(x.data(), kDLFloat, 64, &sx);
  DLTensor tl = Tensor(lifted.data(), kDLFloat, 64, &sl);
  DLTensor ts = Tensor(small.data(), kDLFloat, 64, &ss);
  EXPECT_EQ(gpe_bias_grape_a_lift(nullptr, 0, GPE_GRAPE_A_QUERY, &tp, &tx, &tl),
            GPE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(gpe_bias_grape_a_lift(b, 2, GPE_GRAPE_A_QUERY, &tp, &tx, &tl),
            GPE_ERROR_INVALID_ARGUMENT);  // head
  EXPECT_EQ(gpe_bias_grape_a_lift(b, 0, 5, &tp, &tx, &tl), GPE_ERROR_INVALID_ARGUMENT);  // role
  EXPECT_EQ(gpe_bias_grape_a_lift(b, 0, GPE_GRAPE_A_KEY, &tp, &tx, &ts),
            GPE_ERROR_INVALID_ARGUMENT);  // out has head_dim, not head_dim + 2 columns
  EXPECT_TRUE(HasMessage("head_dim + 2"));
  EXPECT_EQ(gpe_bias_grape_a_lift(b, 0, GPE_GRAPE_A_KEY, &tp, &tl, &tl),
            GPE_ERROR_INVALID_ARGUMENT);  // x with the wrong width
  std::vector<int64_t> s_alias = {2, 4};
  DLTensor alias = Tensor(lifted.data(), kDLFloat, 64, &s_alias);
  EXPECT_EQ(gpe_bias_grape_a_lift(b, 0, GPE_GRAPE_A_KEY, &tp, &alias, &tl),
            GPE_ERROR_INVALID_ARGUMENT);  // x overlaps out
  EXPECT_EQ(gpe_bias_grape_a_lift(b, 0, GPE_GRAPE_A_KEY, &tp, &tx, &tl), GPE_OK);
  // The lift of another bias kind is refused.
  gpe_bias* alibi = MakeAlibi(2, nullptr);
  EXPECT_EQ(gpe_bias_grape_a_lift(alibi, 0, GPE_GRAPE_A_KEY, &tp, &tx, &tl),
            GPE_ERROR_INVALID_ARGUMENT);
  // Gradient buffers of the wrong shape; the FoX logit gradient on the ungated form.
  std::vector<double> tile(4, 1.0), grad(3, 0.0);
  std::vector<int64_t> st = {2, 2}, sg = {3};
  DLTensor tt = Tensor(tile.data(), kDLFloat, 64, &st), tgr = Tensor(grad.data(), kDLFloat, 64, &sg);
  EXPECT_EQ(gpe_bias_accumulate_gradient(b, 0, &tp, &tp, &tt, &tgr, nullptr),
            GPE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(gpe_bias_fox_logit_gradient(b, &tt, &tt), GPE_ERROR_INVALID_ARGUMENT);
  gpe_bias_destroy(alibi);
  gpe_bias_destroy(b);
  // Gated: positions outside the gates' range.
  std::vector<double> ok_logits = {0.1, 0.2, 0.3, 0.4};
  gpe_bias* gated = MakeGatedGrapeA(2, 4, GPE_GRAPE_A_LIFTED, &ok_logits, 10);
  EXPECT_EQ(gpe_bias_grape_a_lift(gated, 0, GPE_GRAPE_A_KEY, &tp, &tx, &tl),
            GPE_ERROR_INVALID_ARGUMENT);
  Tile t({0}, {10});
  EXPECT_EQ(gpe_bias_fill_tile(gated, 0, &t.tq, &t.tk, &t.to), GPE_ERROR_INVALID_ARGUMENT);
  gpe_bias_destroy(gated);
}

TEST(BiasC, GrapeAInsideAttentionEqualsAlibi) {
  // The kernel consumes GRAPE-A through the same tile interface: with ALiBi-like slopes
  // its attention output equals ALiBi's bit for bit (identical bias tiles), and the gated
  // form equals FoX's.
  std::mt19937_64 rng(34);
  const int64_t s = 9, h = 2, d = 8;
  std::vector<float> q(s * h * d), k(s * h * d), v(s * h * d);
  std::normal_distribution<float> normal;
  for (auto* a : {&q, &k, &v}) {
    for (float& x : *a) x = normal(rng);
  }
  std::vector<int64_t> shape = {1, s, h, d};
  DLTensor tq = Tensor(q.data(), kDLFloat, 32, &shape), tk = Tensor(k.data(), kDLFloat, 32, &shape),
           tv = Tensor(v.data(), kDLFloat, 32, &shape);
  auto run = [&](const gpe_bias* b) {
    std::vector<float> o(s * h * d, -1.0f);
    DLTensor to = Tensor(o.data(), kDLFloat, 32, &shape);
    gpe_attention_options opt = GPE_ATTENTION_OPTIONS_INIT;
    opt.causal = 1;
    opt.num_threads = 1;
    opt.bias = b;
    EXPECT_EQ(gpe_attention_forward(&opt, &tq, &tk, &tv, &to, nullptr), GPE_OK)
        << gpe_last_error_message();
    return o;
  };
  gpe_bias* alibi = MakeAlibi(h, nullptr);
  gpe_bias* grape = MakeGrapeA(h, d, GPE_GRAPE_A_CLOSED_FORM, nullptr);
  const std::vector<float> oa = run(alibi), og = run(grape);
  EXPECT_EQ(oa, og);
  std::vector<float> none = run(nullptr);
  EXPECT_NE(oa, none);  // the bias matters
  gpe_bias_destroy(alibi);
  gpe_bias_destroy(grape);
  std::vector<double> logits = Random(&rng, s * h, 2.0);
  gpe_fox_options fo = GPE_FOX_OPTIONS_INIT;
  fo.length = s;
  fo.num_heads = h;
  fo.gate_logits = logits.data();
  gpe_bias* fox = nullptr;
  ASSERT_EQ(gpe_bias_create_fox(&fo, &fox), GPE_OK);
  gpe_bias* gated = MakeGatedGrapeA(h, d, GPE_GRAPE_A_LIFTED, &logits, 0);
  EXPECT_EQ(run(fox), run(gated));
  gpe_bias_destroy(fox);
  gpe_bias_destroy(gated);
}

}  // namespace
