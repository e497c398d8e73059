// The thread-safety guarantees of gpe.h's header comment, tested through gpe.h only:
// every entry-point family (SO(n) representations, sinusoidal, GRAPE-M, algebraic,
// learned positions, Shaw scores, shifted basis, stable rank, INR fit and predict, RoPE
// and its tables, the additive biases, attention forward and backward, coordinate
// encoders and their backward, Laplacian eigenvectors)
// called from 8 threads at once, sharing handles and read-only inputs, gives the same
// bits as one thread; and each thread's gpe_last_error_message stays its own.
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "c_api/test_util.h"
#include "gpe/gpe.h"
#include "gtest/gtest.h"

namespace {

using gpe::c_api_test::Tensor;

constexpr int kThreads = 8;

std::vector<double> Uniform(size_t n, double lo, double hi, std::mt19937_64* rng) {
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<double> v(n);
  for (double& x : v) x = u(*rng);
  return v;
}

// Read-only inputs and handles shared by every thread.
struct Shared {
  static constexpr int64_t kN = 33, kDim = 16, kM = 2, kAlgDim = 8, kLq = 5, kLk = 7, kK = 3;
  static constexpr int64_t kPix = 24, kShifts = 10;
  std::vector<int64_t> positions;
  std::vector<double> x64, ga, gb, gomega, skew, alg_x, table, q, labels, coords, image;
  std::vector<float> x32;
  std::vector<int64_t> qpos, kpos;
  gpe_so_rep* planes = nullptr;
  gpe_so_rep* rank2 = nullptr;
  gpe_grape_m* grape = nullptr;
  gpe_algebraic_sequence* alg = nullptr;
  gpe_learned_positions* learned = nullptr;
  // 0.3.0: RoPE (YaRN), ALiBi and FoX biases, attention inputs [1, kAs, kAh, kDim].
  static constexpr int64_t kAs = 37, kAh = 4, kAhk = 2;
  std::vector<float> aq, ak, av, ado;
  std::vector<double> fox_logits;
  gpe_rope* rope = nullptr;
  gpe_bias* alibi = nullptr;
  gpe_bias* fox = nullptr;

  Shared() {
    std::mt19937_64 rng(20261123);
    std::uniform_int_distribution<int64_t> pos(-1000000, 1000000);
    for (int64_t i = 0; i < kN; ++i) positions.push_back(pos(rng));
    x64 = Uniform(kN * kDim, -1, 1, &rng);
    x32.assign(x64.begin(), x64.end());
    ga = Uniform(kM * kDim, -1, 1, &rng);
    gb = Uniform(kM * kDim, -1, 1, &rng);
    gomega = Uniform(kM, -0.5, 0.5, &rng);
    std::vector<double> s = Uniform(kAlgDim * kAlgDim, -0.3, 0.3, &rng);
    skew.assign(kAlgDim * kAlgDim, 0.0);
    for (int64_t i = 0; i < kAlgDim; ++i) {
      for (int64_t j = 0; j < kAlgDim; ++j) skew[i * kAlgDim + j] = s[i * kAlgDim + j] - s[j * kAlgDim + i];
    }
    alg_x = Uniform(kN * kAlgDim, -1, 1, &rng);
    table = Uniform(64 * kDim, -1, 1, &rng);
    q = Uniform(kLq * kDim, -1, 1, &rng);
    labels = Uniform((2 * kK + 1) * kDim, -1, 1, &rng);
    for (int64_t i = 0; i < kLq; ++i) qpos.push_back(pos(rng));
    for (int64_t i = 0; i < kLk; ++i) kpos.push_back(qpos[i % kLq] + i - 3);
    coords = Uniform(kPix, 0, 1, &rng);
    image = Uniform(kPix * kPix, 0, 1, &rng);

    gpe_so_planes_options po = GPE_SO_PLANES_OPTIONS_INIT;
    po.dim = kDim;
    po.pairing = GPE_PAIRING_HALF_SPLIT;
    EXPECT_EQ(gpe_so_rep_create_planes(&po, &planes), GPE_OK) << gpe_last_error_message();
    gpe_so_rank2_options ro = GPE_SO_RANK2_OPTIONS_INIT;
    ro.dim = kDim;
    ro.a = ga.data();
    ro.b = gb.data();
    ro.omega = 0.37;
    EXPECT_EQ(gpe_so_rep_create_rank2(&ro, &rank2), GPE_OK) << gpe_last_error_message();
    gpe_grape_m_options go = GPE_GRAPE_M_OPTIONS_INIT;
    go.dim = kDim;
    go.num_generators = kM;
    go.a = ga.data();
    go.b = gb.data();
    go.omega = gomega.data();
    EXPECT_EQ(gpe_grape_m_create(&go, &grape), GPE_OK) << gpe_last_error_message();
    gpe_algebraic_sequence_options ao = GPE_ALGEBRAIC_SEQUENCE_OPTIONS_INIT;
    ao.dim = kAlgDim;
    ao.skew = skew.data();
    EXPECT_EQ(gpe_algebraic_sequence_create(&ao, &alg), GPE_OK) << gpe_last_error_message();
    std::vector<int64_t> ts = {64, kDim};
    DLTensor tt = Tensor(table.data(), kDLFloat, 64, &ts);
    EXPECT_EQ(gpe_learned_positions_create(&tt, &learned), GPE_OK) << gpe_last_error_message();

    for (auto* v : {&aq, &ado}) {
      const std::vector<double> d = Uniform(kAs * kAh * kDim, -1, 1, &rng);
      v->assign(d.begin(), d.end());
    }
    for (auto* v : {&ak, &av}) {
      const std::vector<double> d = Uniform(kAs * kAhk * kDim, -1, 1, &rng);
      v->assign(d.begin(), d.end());
    }
    fox_logits = Uniform(kAs * kAh, -2, 4, &rng);
    gpe_rope_options rop = GPE_ROPE_OPTIONS_INIT;
    rop.head_dim = kDim;
    rop.schedule = GPE_ROPE_YARN;
    rop.factor = 4.0;
    rop.original_max_position = 64;
    EXPECT_EQ(gpe_rope_create(&rop, &rope), GPE_OK) << gpe_last_error_message();
    gpe_alibi_options alo = GPE_ALIBI_OPTIONS_INIT;
    alo.num_heads = kAh;
    EXPECT_EQ(gpe_bias_create_alibi(&alo, &alibi), GPE_OK) << gpe_last_error_message();
    gpe_fox_options fo = GPE_FOX_OPTIONS_INIT;
    fo.length = kAs;
    fo.num_heads = kAh;
    fo.gate_logits = fox_logits.data();
    EXPECT_EQ(gpe_bias_create_fox(&fo, &fox), GPE_OK) << gpe_last_error_message();
    gpe_fourier_features_options ffo = GPE_FOURIER_FEATURES_OPTIONS_INIT;
    ffo.num_frequencies = 8;
    ffo.scale = 3.0;
    EXPECT_EQ(gpe_fourier_features_create(&ffo, &fourier), GPE_OK) << gpe_last_error_message();
  }
  gpe_coordinate_encoder* fourier = nullptr;  // shared by every thread (immutable handle)
  ~Shared() {
    gpe_rope_destroy(rope);
    gpe_bias_destroy(alibi);
    gpe_bias_destroy(fox);
    gpe_coordinate_encoder_destroy(fourier);
    gpe_so_rep_destroy(planes);
    gpe_so_rep_destroy(rank2);
    gpe_grape_m_destroy(grape);
    gpe_algebraic_sequence_destroy(alg);
    gpe_learned_positions_destroy(learned);
  }
};

// keep(p, n) appends the n bytes at p to *bytes.
auto KeepBytes(std::vector<uint8_t>* bytes) {
  return [bytes](const void* p, size_t n) {
    const uint8_t* b = static_cast<const uint8_t*>(p);
    bytes->insert(bytes->end(), b, b + n);
  };
}

// check(status) counts a status other than GPE_OK in *failures.
auto CountFailures(int* failures) {
  return [failures](gpe_status st) {
    if (st != GPE_OK) ++*failures;
  };
}

// Every family's calls once; returns all outputs as raw bytes, and counts failures.
std::vector<uint8_t> RunAll(const Shared& s, int* failures) {
  using S = Shared;
  std::vector<uint8_t> bytes;
  const auto keep = KeepBytes(&bytes);
  const auto check = CountFailures(failures);
  std::vector<int64_t> ps = {S::kN}, xs = {S::kN, S::kDim}, ms = {S::kDim, S::kDim};
  DLTensor tp = Tensor(s.positions.data(), kDLInt, 64, &ps);
  DLTensor tx64 = Tensor(s.x64.data(), kDLFloat, 64, &xs);
  DLTensor tx32 = Tensor(s.x32.data(), kDLFloat, 32, &xs);

  // SO(n): planes (float32 and float64), rank-2, matrices; a handle made on this thread.
  {
    std::vector<float> o32(S::kN * S::kDim);
    std::vector<double> o64(S::kN * S::kDim), mat(S::kDim * S::kDim);
    DLTensor t32 = Tensor(o32.data(), kDLFloat, 32, &xs), t64 = Tensor(o64.data(), kDLFloat, 64, &xs);
    DLTensor tm = Tensor(mat.data(), kDLFloat, 64, &ms);
    check(gpe_so_rep_apply(s.planes, &tp, &tx32, &t32));
    keep(o32.data(), o32.size() * sizeof(float));
    check(gpe_so_rep_apply(s.rank2, &tp, &tx64, &t64));
    keep(o64.data(), o64.size() * sizeof(double));
    check(gpe_so_rep_matrix(s.planes, 123456789, &tm));
    keep(mat.data(), mat.size() * sizeof(double));
    gpe_so_planes_options po = GPE_SO_PLANES_OPTIONS_INIT;
    po.dim = S::kDim;
    po.rotary_dim = 8;
    po.base = 500.0;
    gpe_so_rep* own = nullptr;
    check(gpe_so_rep_create_planes(&po, &own));
    check(gpe_so_rep_apply(own, &tp, &tx64, &t64));
    keep(o64.data(), o64.size() * sizeof(double));
    gpe_so_rep_destroy(own);
  }
  // Sinusoidal.
  {
    gpe_sinusoidal_options o = GPE_SINUSOIDAL_OPTIONS_INIT;
    std::vector<double> out(S::kN * S::kDim);
    DLTensor to = Tensor(out.data(), kDLFloat, 64, &xs);
    check(gpe_sinusoidal_encode(&o, &tp, &to));
    keep(out.data(), out.size() * sizeof(double));
  }
  // GRAPE-M: apply, matrix, backward.
  {
    std::vector<double> out(S::kN * S::kDim), gx(S::kN * S::kDim), mat(S::kDim * S::kDim);
    std::vector<double> gra(S::kM * S::kDim), grb(S::kM * S::kDim), gro(S::kM);
    std::vector<int64_t> gs = {S::kM, S::kDim}, os = {S::kM};
    DLTensor to = Tensor(out.data(), kDLFloat, 64, &xs), tgx = Tensor(gx.data(), kDLFloat, 64, &xs);
    DLTensor tm = Tensor(mat.data(), kDLFloat, 64, &ms);
    DLTensor ta = Tensor(gra.data(), kDLFloat, 64, &gs), tb = Tensor(grb.data(), kDLFloat, 64, &gs);
    DLTensor tw = Tensor(gro.data(), kDLFloat, 64, &os);
    check(gpe_grape_m_apply(s.grape, &tp, &tx64, &to));
    check(gpe_grape_m_matrix(s.grape, -77, &tm));
    // grad_out = out: the gradient of |out|^2 / 2.
    check(gpe_grape_m_backward(s.grape, &tp, &tx64, &to, &tgx, &ta, &tb, &tw));
    for (const auto* v : {&out, &mat, &gx, &gra, &grb, &gro}) keep(v->data(), v->size() * sizeof(double));
  }
  // Algebraic: apply, matrix, backward.
  {
    std::vector<int64_t> as = {S::kN, S::kAlgDim}, am = {S::kAlgDim, S::kAlgDim};
    std::vector<double> out(S::kN * S::kAlgDim), gx(S::kN * S::kAlgDim), mat(S::kAlgDim * S::kAlgDim),
        gs(S::kAlgDim * S::kAlgDim);
    std::vector<int64_t> small(S::kN);
    // Small positions keep W^p well inside double range for a random skew generator.
    for (int64_t i = 0; i < S::kN; ++i) small[i] = s.positions[i] % 50;
    DLTensor tsp = Tensor(small.data(), kDLInt, 64, &ps);
    DLTensor tx = Tensor(s.alg_x.data(), kDLFloat, 64, &as), to = Tensor(out.data(), kDLFloat, 64, &as);
    DLTensor tgx = Tensor(gx.data(), kDLFloat, 64, &as), tm = Tensor(mat.data(), kDLFloat, 64, &am);
    DLTensor tgs = Tensor(gs.data(), kDLFloat, 64, &am);
    check(gpe_algebraic_sequence_apply(s.alg, &tsp, &tx, &to));
    check(gpe_algebraic_sequence_matrix(s.alg, 9, &tm));
    check(gpe_algebraic_sequence_backward(s.alg, &tsp, &tx, &to, &tgx, &tgs));
    for (const auto* v : {&out, &mat, &gx, &gs}) keep(v->data(), v->size() * sizeof(double));
  }
  // Learned positions and Shaw scores.
  {
    std::vector<int64_t> small(S::kN);
    for (int64_t i = 0; i < S::kN; ++i) small[i] = (s.positions[i] % 64 + 64) % 64;
    DLTensor tsp = Tensor(small.data(), kDLInt, 64, &ps);
    std::vector<double> out(S::kN * S::kDim), gtab(64 * S::kDim, 0.0);
    std::vector<int64_t> ts = {64, S::kDim};
    DLTensor to = Tensor(out.data(), kDLFloat, 64, &xs), tg = Tensor(gtab.data(), kDLFloat, 64, &ts);
    check(gpe_learned_positions_lookup(s.learned, &tsp, &to));
    check(gpe_learned_positions_backward(s.learned, &tsp, &to, &tg));
    keep(out.data(), out.size() * sizeof(double));
    keep(gtab.data(), gtab.size() * sizeof(double));
    std::vector<int64_t> qs = {S::kLq, S::kDim}, ls = {2 * S::kK + 1, S::kDim}, qps = {S::kLq},
                         kps = {S::kLk}, ss = {S::kLq, S::kLk};
    std::vector<double> scores(S::kLq * S::kLk), gq(S::kLq * S::kDim), gl((2 * S::kK + 1) * S::kDim, 0.0);
    DLTensor tq = Tensor(s.q.data(), kDLFloat, 64, &qs), tl = Tensor(s.labels.data(), kDLFloat, 64, &ls);
    DLTensor tqp = Tensor(s.qpos.data(), kDLInt, 64, &qps), tkp = Tensor(s.kpos.data(), kDLInt, 64, &kps);
    DLTensor tsc = Tensor(scores.data(), kDLFloat, 64, &ss), tgq = Tensor(gq.data(), kDLFloat, 64, &qs);
    DLTensor tgl = Tensor(gl.data(), kDLFloat, 64, &ls);
    check(gpe_shaw_key_scores(&tq, &tl, &tqp, &tkp, &tsc));
    check(gpe_shaw_key_scores_backward(&tq, &tl, &tqp, &tkp, &tsc, &tgq, &tgl));
    for (const auto* v : {&scores, &gq, &gl}) keep(v->data(), v->size() * sizeof(double));
  }
  // Shifted basis, stable rank, INR fit and predict.
  {
    gpe_shifted_basis_options o = GPE_SHIFTED_BASIS_OPTIONS_INIT;
    o.num_shifts = S::kShifts;
    o.width = 0.15;
    std::vector<int64_t> cs = {S::kPix}, es = {S::kPix, S::kShifts}, is = {S::kPix, S::kPix},
                         ws = {S::kShifts, S::kShifts};
    std::vector<double> psi(S::kPix * S::kShifts), w(S::kShifts * S::kShifts), pred(S::kPix * S::kPix);
    DLTensor tc = Tensor(s.coords.data(), kDLFloat, 64, &cs), te = Tensor(psi.data(), kDLFloat, 64, &es);
    check(gpe_shifted_basis_encode(&o, &tc, &te));
    double rank = 0.0;
    check(gpe_stable_rank(&te, &rank));
    keep(&rank, sizeof rank);
    gpe_separable_fit_options fo = GPE_SEPARABLE_FIT_OPTIONS_INIT;
    fo.lambda = 1e-3;
    DLTensor ti = Tensor(s.image.data(), kDLFloat, 64, &is), tw = Tensor(w.data(), kDLFloat, 64, &ws);
    DLTensor tpred = Tensor(pred.data(), kDLFloat, 64, &is);
    check(gpe_inr_fit_separable_2d(&fo, &te, &te, &ti, &tw));
    check(gpe_inr_predict_separable_2d(&te, &te, &tw, &tpred));
    for (const auto* v : {&psi, &w, &pred}) keep(v->data(), v->size() * sizeof(double));
  }
  // RoPE: forward with offsets (float32, bshd), a table built here, and its backward.
  {
    std::vector<int64_t> qs = {1, S::kAs, S::kAh, S::kDim}, os = {1};
    const int64_t offset = 1000003;
    DLTensor tq = Tensor(s.aq.data(), kDLFloat, 32, &qs), toff = Tensor(&offset, kDLInt, 64, &os);
    std::vector<float> out(s.aq.size()), back(s.aq.size());
    DLTensor to = Tensor(out.data(), kDLFloat, 32, &qs), tb = Tensor(back.data(), kDLFloat, 32, &qs);
    gpe_rope_tokens tokens = GPE_ROPE_TOKENS_INIT;
    tokens.offsets = &toff;
    check(gpe_rope_forward(s.rope, &tokens, &tq, &to));
    gpe_rope_table* table = nullptr;
    check(gpe_rope_table_create(s.rope, &tokens, &tq, &table));
    check(gpe_rope_table_backward(table, &to, &tb));
    gpe_rope_table_destroy(table);
    for (const auto* v : {&out, &back}) keep(v->data(), v->size() * sizeof(float));
  }
  // Biases: ALiBi and FoX tiles and the FoX gradient.
  {
    std::vector<int64_t> qp = {36, 20, 5}, kp = {0, 5, 19, 36}, qs = {3}, ks = {4}, ts = {3, 4},
                         gs = {S::kAs, S::kAh};
    std::vector<double> tile(12), grad(S::kAs * S::kAh, 0.0), glog(S::kAs * S::kAh);
    DLTensor tqp = Tensor(qp.data(), kDLInt, 64, &qs), tkp = Tensor(kp.data(), kDLInt, 64, &ks);
    DLTensor tt = Tensor(tile.data(), kDLFloat, 64, &ts), tg = Tensor(grad.data(), kDLFloat, 64, &gs);
    DLTensor tl = Tensor(glog.data(), kDLFloat, 64, &gs);
    check(gpe_bias_fill_tile(s.alibi, 3, &tqp, &tkp, &tt));
    keep(tile.data(), tile.size() * sizeof(double));
    check(gpe_bias_fill_tile(s.fox, 1, &tqp, &tkp, &tt));
    keep(tile.data(), tile.size() * sizeof(double));
    check(gpe_bias_accumulate_gradient(s.fox, 1, &tqp, &tkp, &tt, &tg, nullptr));
    check(gpe_bias_fox_logit_gradient(s.fox, &tg, &tl));
    keep(glog.data(), glog.size() * sizeof(double));
  }
  // Attention (float32 kernels, 2 threads per call): RoPE + ALiBi causal, FoX, GRAPE-M;
  // the backward of the first.
  {
    std::vector<int64_t> qs = {1, S::kAs, S::kAh, S::kDim}, ks = {1, S::kAs, S::kAhk, S::kDim},
                         ls = {S::kAs, S::kAh};
    DLTensor tq = Tensor(s.aq.data(), kDLFloat, 32, &qs), tk = Tensor(s.ak.data(), kDLFloat, 32, &ks);
    DLTensor tv = Tensor(s.av.data(), kDLFloat, 32, &ks), tdo = Tensor(s.ado.data(), kDLFloat, 32, &qs);
    std::vector<float> o(s.aq.size()), lse(S::kAs * S::kAh), dq(s.aq.size()), dk(s.ak.size()),
        dv(s.av.size());
    DLTensor to = Tensor(o.data(), kDLFloat, 32, &qs), tl = Tensor(lse.data(), kDLFloat, 32, &ls);
    DLTensor tdq = Tensor(dq.data(), kDLFloat, 32, &qs), tdk = Tensor(dk.data(), kDLFloat, 32, &ks);
    DLTensor tdv = Tensor(dv.data(), kDLFloat, 32, &ks);
    gpe_attention_options a = GPE_ATTENTION_OPTIONS_INIT;
    a.num_threads = 2;
    a.causal = 1;
    a.rope_dim = S::kDim;
    a.bias = s.alibi;
    check(gpe_attention_forward(&a, &tq, &tk, &tv, &to, &tl));
    for (const auto* v : {&o, &lse}) keep(v->data(), v->size() * sizeof(float));
    check(gpe_attention_backward(&a, &tq, &tk, &tv, &to, &tl, &tdo, &tdq, &tdk, &tdv));
    for (const auto* v : {&dq, &dk, &dv}) keep(v->data(), v->size() * sizeof(float));
    a.rope_dim = 0;
    a.bias = s.fox;
    check(gpe_attention_forward(&a, &tq, &tk, &tv, &to, &tl));
    keep(o.data(), o.size() * sizeof(float));
    a.bias = nullptr;
    a.causal = 0;
    a.grape_m = s.grape;
    check(gpe_attention_forward(&a, &tq, &tk, &tv, &to, nullptr));
    keep(o.data(), o.size() * sizeof(float));
  }
  // Coordinate encoders (a shared Fourier handle, a spherical-harmonics handle made on
  // this thread), their backward, the Laplacian encoding and the blended fit.
  {
    std::vector<int64_t> ps2 = {S::kPix, 2}, fs = {S::kPix, 16}, ps3 = {S::kPix, 3},
                         hs = {S::kPix, 9};
    std::vector<double> pts(S::kPix * 3), feat(S::kPix * 16), gpts(S::kPix * 2), harm(S::kPix * 9);
    for (size_t i = 0; i < pts.size(); ++i) pts[i] = s.coords[i % S::kPix] - 0.3 * (i % 3);
    DLTensor tp2 = Tensor(pts.data(), kDLFloat, 64, &ps2), tf = Tensor(feat.data(), kDLFloat, 64, &fs);
    DLTensor tg = Tensor(gpts.data(), kDLFloat, 64, &ps2);
    check(gpe_coordinate_encode(s.fourier, &tp2, &tf));
    check(gpe_coordinate_backward(s.fourier, &tp2, &tf, &tg));
    gpe_coordinate_encoder* sh = nullptr;
    check(gpe_spherical_harmonics_create(2, &sh));
    DLTensor tp3 = Tensor(pts.data(), kDLFloat, 64, &ps3), th = Tensor(harm.data(), kDLFloat, 64, &hs);
    check(gpe_coordinate_encode(sh, &tp3, &th));
    gpe_coordinate_encoder_destroy(sh);
    std::vector<int64_t> edges = {0, 1, 1, 2, 2, 3, 3, 4, 4, 0, 0, 2}, es2 = {6, 2}, ks = {3},
                         vs = {5, 3};
    std::vector<double> vals(3), vecs(15);
    DLTensor te2 = Tensor(edges.data(), kDLInt, 64, &es2), tv = Tensor(vals.data(), kDLFloat, 64, &ks);
    DLTensor tvec = Tensor(vecs.data(), kDLFloat, 64, &vs);
    gpe_laplacian_options lo = GPE_LAPLACIAN_OPTIONS_INIT;
    check(gpe_laplacian_eigenvectors(&lo, 5, &te2, nullptr, &tv, &tvec));
    for (const auto* v : {&feat, &gpts, &harm, &vals, &vecs}) keep(v->data(), v->size() * sizeof(double));
  }
  return bytes;
}

// A simple reusable barrier (C++17 has no std::barrier): maximises overlap.
class Barrier {
 public:
  explicit Barrier(int n) : n_(n) {}
  void Wait() {
    const int gen = generation_.load();
    if (arrived_.fetch_add(1) + 1 == n_) {
      arrived_.store(0);
      generation_.fetch_add(1);
    } else {
      while (generation_.load() == gen) std::this_thread::yield();
    }
  }

 private:
  const int n_;
  std::atomic<int> arrived_{0};
  std::atomic<int> generation_{0};
};

// Runs run(thread, &failures) on kThreads threads at once, `rounds` times on each (every
// round starts on all threads together), and expects no failures and, every time, the
// bytes of `ref` (the single-threaded run).
void ExpectBitsOfOne(const std::vector<uint8_t>& ref, int rounds,
                     const std::function<std::vector<uint8_t>(int, int*)>& run) {
  std::vector<std::vector<std::vector<uint8_t>>> got(kThreads);
  std::vector<int> failures(kThreads, 0);
  Barrier barrier(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int r = 0; r < rounds; ++r) {
        barrier.Wait();
        got[t].push_back(run(t, &failures[t]));
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(failures[t], 0) << "thread " << t;
    for (int r = 0; r < rounds; ++r) {
      ASSERT_EQ(got[t][r].size(), ref.size());
      EXPECT_EQ(std::memcmp(got[t][r].data(), ref.data(), ref.size()), 0)
          << "thread " << t << " round " << r << " differs from the single-threaded run";
    }
  }
}

TEST(ThreadSafety, EightThreadsGiveTheBitsOfOne) {
  Shared shared;
  int ref_failures = 0;
  const std::vector<uint8_t> ref = RunAll(shared, &ref_failures);
  ASSERT_EQ(ref_failures, 0) << gpe_last_error_message();
  ASSERT_GT(ref.size(), 0u);

  // Bit-identical: no shared mutable state, and no work split that depends on timing.
  ExpectBitsOfOne(ref, /*rounds=*/3, [&](int, int* failures) { return RunAll(shared, failures); });
}

TEST(ThreadSafety, ErrorMessagesStayPerThread) {
  // Each thread fails with a message naming its own value, waits until every thread has
  // failed, then reads its message: it must be its own, unchanged by the others.
  Barrier barrier(kThreads);
  std::vector<std::string> before(kThreads), after(kThreads);
  std::vector<gpe_status> codes(kThreads, GPE_OK);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      after[t] = "unset";
      before[t] = gpe_last_error_message();  // a fresh thread has seen no failure
      gpe_so_planes_options o = GPE_SO_PLANES_OPTIONS_INIT;
      o.dim = -1000 - t;
      gpe_so_rep* rep = nullptr;
      codes[t] = gpe_so_rep_create_planes(&o, &rep);
      barrier.Wait();
      // Other threads now succeed; a success must not clear this thread's message.
      gpe_sinusoidal_options so = GPE_SINUSOIDAL_OPTIONS_INIT;
      std::vector<int64_t> ps = {1}, os = {1, 4};
      int64_t p = t;
      double out[4];
      DLTensor tp = Tensor(&p, kDLInt, 64, &ps), to = Tensor(out, kDLFloat, 64, &os);
      if (gpe_sinusoidal_encode(&so, &tp, &to) != GPE_OK) codes[t] = GPE_OK;  // flags a failure
      barrier.Wait();
      after[t] = gpe_last_error_message();
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(before[t], "") << "thread " << t;
    EXPECT_EQ(codes[t], GPE_ERROR_INVALID_ARGUMENT) << "thread " << t;
    EXPECT_NE(after[t].find(std::to_string(-1000 - t)), std::string::npos)
        << "thread " << t << " read \"" << after[t] << "\"";
  }
}

// 0.5.0: the INR trainers, data, metrics and image files. tag names this caller's own
// image files (each thread writes and reads back its own), so the bytes kept are the
// decoded pixels, identical for every caller.
std::vector<uint8_t> RunInr05(int tag, int* failures) {
  std::vector<uint8_t> bytes;
  const auto keep = KeepBytes(&bytes);
  const auto check = CountFailures(failures);
  constexpr int64_t kSide = 8, kPts = kSide * kSide;
  // Data: the Spiral image, the Radial vector field, the grid and both splits.
  std::vector<double> image(kPts), field(kPts * 2), coords(kPts * 2);
  std::vector<int64_t> is = {kSide, kSide}, fs = {kSide, kSide, 2}, cs = {kPts, 2}, ns = {kPts};
  DLTensor timg = Tensor(image.data(), kDLFloat, 64, &is), tfield = Tensor(field.data(), kDLFloat, 64, &fs);
  DLTensor tcoords = Tensor(coords.data(), kDLFloat, 64, &cs);
  check(gpe_inr_synthetic_image(GPE_SYNTHETIC_SPIRAL, 0, &timg));
  check(gpe_inr_synthetic_vector_field(GPE_SYNTHETIC_RADIAL, &tfield));
  check(gpe_inr_grid_coordinates(kSide, &tcoords));
  std::vector<int64_t> idx(kPts), counts(3);
  DLTensor tidx = Tensor(idx.data(), kDLInt, 64, &ns);
  check(gpe_inr_random_split(kPts, 0.25, 0.25, 77, &tidx, counts.data()));
  keep(idx.data(), idx.size() * sizeof(int64_t));
  keep(counts.data(), counts.size() * sizeof(int64_t));
  check(gpe_inr_regular_grid_split(kSide, kSide, &tidx, counts.data()));
  keep(idx.data(), idx.size() * sizeof(int64_t));
  keep(counts.data(), counts.size() * sizeof(int64_t));
  for (const auto* v : {&image, &field, &coords}) keep(v->data(), v->size() * sizeof(double));

  // The MLP (float64 and float32), seeded: init, fit on the Spiral values, predict.
  gpe_mlp_options mo = GPE_MLP_OPTIONS_INIT;
  mo.hidden_width = 16;
  mo.num_hidden_layers = 2;
  mo.steps = 20;
  mo.seed = 5;
  int64_t np = 0;
  check(gpe_inr_mlp_num_parameters(&mo, 2, 1, &np));
  if (np <= 0) {
    ++*failures;
    return bytes;
  }
  std::vector<int64_t> pshape = {np}, ys = {kPts, 1}, ls = {mo.steps};
  std::vector<double> p64(np), loss(mo.steps), pred64(kPts);
  DLTensor tp64 = Tensor(p64.data(), kDLFloat, 64, &pshape), ty = Tensor(image.data(), kDLFloat, 64, &ys);
  DLTensor tloss = Tensor(loss.data(), kDLFloat, 64, &ls), tpred = Tensor(pred64.data(), kDLFloat, 64, &ys);
  double final_loss = 0.0;
  check(gpe_inr_mlp_fit(&mo, &tcoords, &ty, nullptr, &tp64, &tloss, &final_loss));
  check(gpe_inr_mlp_predict(&mo, &tp64, &tcoords, &tpred));
  for (const auto* v : {&p64, &loss, &pred64}) keep(v->data(), v->size() * sizeof(double));
  keep(&final_loss, sizeof final_loss);
  // With a validation set (the Radial field's first channel as held-out targets on the
  // same grid), evaluated every 5 steps: 4 evaluations.
  mo.report_every = 5;
  int64_t evals = 0;
  check(gpe_inr_mlp_num_evaluations(&mo, &evals));
  if (evals != 4) ++*failures;
  std::vector<double> vtargets(kPts), vloss(4);
  for (int64_t i = 0; i < kPts; ++i) vtargets[i] = field[2 * i];
  std::vector<int64_t> vsteps(4), es = {4};
  DLTensor tvy = Tensor(vtargets.data(), kDLFloat, 64, &ys), tvs = Tensor(vsteps.data(), kDLInt, 64, &es),
           tvl = Tensor(vloss.data(), kDLFloat, 64, &es);
  gpe_mlp_validation val = GPE_MLP_VALIDATION_INIT;
  val.features = &tcoords;
  val.targets = &tvy;
  val.steps = &tvs;
  val.loss = &tvl;
  check(gpe_inr_mlp_fit_v2(&mo, &tcoords, &ty, nullptr, &tp64, nullptr, nullptr, &val));
  mo.report_every = 0;
  keep(vsteps.data(), vsteps.size() * sizeof(int64_t));
  keep(vloss.data(), vloss.size() * sizeof(double));
  std::vector<float> p32(np), c32(coords.begin(), coords.end()), y32(image.begin(), image.end()),
      pred32(kPts);
  DLTensor tp32 = Tensor(p32.data(), kDLFloat, 32, &pshape), tc32 = Tensor(c32.data(), kDLFloat, 32, &cs);
  DLTensor ty32 = Tensor(y32.data(), kDLFloat, 32, &ys), tpred32 = Tensor(pred32.data(), kDLFloat, 32, &ys);
  check(gpe_inr_mlp_init(&mo, 2, 1, &tp32));
  check(gpe_inr_mlp_fit(&mo, &tc32, &ty32, &tp32, &tp32, nullptr, &final_loss));
  check(gpe_inr_mlp_predict(&mo, &tp32, &tc32, &tpred32));
  for (const auto* v : {&p32, &pred32}) keep(v->data(), v->size() * sizeof(float));
  keep(&final_loss, sizeof final_loss);

  // The linear Adam fits: dense on the coordinates, separable on a shifted basis.
  gpe_linear_adam_options ao = GPE_LINEAR_ADAM_OPTIONS_INIT;
  ao.steps = 30;
  ao.final_learning_rate = 1e-3;
  std::vector<int64_t> wds = {2, 1};
  std::vector<double> wd(2), dloss(ao.steps);
  std::vector<int64_t> dls = {ao.steps};
  DLTensor twd = Tensor(wd.data(), kDLFloat, 64, &wds), tdl = Tensor(dloss.data(), kDLFloat, 64, &dls);
  check(gpe_inr_fit_dense_adam(&ao, &tcoords, &ty, &twd, &tdl, &final_loss));
  for (const auto* v : {&wd, &dloss}) keep(v->data(), v->size() * sizeof(double));
  keep(&final_loss, sizeof final_loss);
  gpe_shifted_basis_options so = GPE_SHIFTED_BASIS_OPTIONS_INIT;
  so.num_shifts = 5;
  so.width = 0.3;
  so.lo = -1.0;
  so.hi = 1.0;
  std::vector<double> axis(kSide), psi(kSide * 5), ws(25);
  for (int64_t j = 0; j < kSide; ++j) axis[j] = coords[2 * j];  // the x_j of row 0
  std::vector<int64_t> as = {kSide}, ps = {kSide, 5}, wss = {5, 5};
  DLTensor tax = Tensor(axis.data(), kDLFloat, 64, &as), tpsi = Tensor(psi.data(), kDLFloat, 64, &ps);
  DLTensor tws = Tensor(ws.data(), kDLFloat, 64, &wss);
  check(gpe_shifted_basis_encode(&so, &tax, &tpsi));
  check(gpe_inr_fit_separable_adam_2d(&ao, &tpsi, &tpsi, &timg, &tws, nullptr, &final_loss));
  keep(ws.data(), ws.size() * sizeof(double));
  keep(&final_loss, sizeof final_loss);

  // Metrics.
  double mse = 0.0, psnr = 0.0;
  DLTensor tp1 = Tensor(pred64.data(), kDLFloat, 64, &is);
  check(gpe_inr_mse(&timg, &tp1, &mse));
  check(gpe_inr_psnr(&timg, &tp1, 1.0, &psnr));
  keep(&mse, sizeof mse);
  keep(&psnr, sizeof psnr);

  // Image files: this caller's own PNG and JPEG, written and read back.
  const char* dir = std::getenv("TEST_TMPDIR");
  const std::string base = std::string(dir != nullptr ? dir : "/tmp") + "/gpe_thread_" +
                           std::to_string(tag);
  for (int jpeg = 0; jpeg < 2; ++jpeg) {
    const std::string path = base + (jpeg ? ".jpg" : ".png");
    check(jpeg ? gpe_image_write_jpeg(path.c_str(), &timg, 90, 0.0, 1.0)
               : gpe_image_write_png(path.c_str(), &timg, 0.0, 1.0));
    gpe_image* img = nullptr;
    check(gpe_image_read(path.c_str(), 1, &img));
    int64_t rows = 0, cols = 0, channels = 0;
    check(gpe_image_shape(img, &rows, &cols, &channels));
    std::vector<int64_t> shape = {rows, cols, channels};
    std::vector<double> px(static_cast<size_t>(rows * cols * channels));
    DLTensor tpx = Tensor(px.data(), kDLFloat, 64, &shape);
    check(gpe_image_pixels(img, &tpx));
    gpe_image_destroy(img);
    keep(shape.data(), shape.size() * sizeof(int64_t));
    keep(px.data(), px.size() * sizeof(double));
    std::remove(path.c_str());
  }
  return bytes;
}

TEST(ThreadSafety, Inr05EightThreadsGiveTheBitsOfOne) {
  int ref_failures = 0;
  const std::vector<uint8_t> ref = RunInr05(-1, &ref_failures);
  ASSERT_EQ(ref_failures, 0) << gpe_last_error_message();
  ASSERT_GT(ref.size(), 0u);
  // Bit-identical: the fits are seeded and single-threaded per call (OPENBLAS_NUM_THREADS=1).
  ExpectBitsOfOne(ref, /*rounds=*/2, RunInr05);
}

}  // namespace
