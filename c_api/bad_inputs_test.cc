// Keeps c_api/BAD_INPUTS.md true: every row of its table names a case below; the test
// feeds that bad input to the named entry point (through gpe.h only, on a fresh thread
// so the error message starts empty) and asserts the status in the row and a non-empty
// message. A case without a row, or a row without a case, fails too.
//
// Usage (Bazel passes it): bad_inputs_test <path to BAD_INPUTS.md>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/types.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "c_api/test_util.h"
#include "gpe/gpe.h"
#include "gtest/gtest.h"

namespace {

std::string g_table_path;  // argv[1]

// A compact CPU DLTensor over `data`; its shape is stored in `shapes` (a deque, so the
// addresses stay valid while the owner lives). The fixtures' Make members forward here.
DLTensor MakeTensor(std::deque<std::vector<int64_t>>* shapes, void* data, DLDataTypeCode code,
                    int bits, std::vector<int64_t> shape) {
  shapes->push_back(std::move(shape));
  return gpe::c_api_test::Tensor(data, code, bits, &shapes->back());
}


// Valid inputs for the 0.3.0 entry points (RoPE, biases, attention), a member of Fixture.
struct Fixture03 {
  std::deque<std::vector<int64_t>> shapes;
  // q and o [4 tokens, 2 heads, 8], k and v [4, 1, 8]: the packed (thd) layout.
  void UsePackedLayout() {
    shapes.push_back({4, 2, 8});
    shapes.push_back({4, 1, 8});
    q.ndim = o.ndim = k.ndim = v.ndim = 3;
    q.shape = o.shape = shapes[shapes.size() - 2].data();
    k.shape = v.shape = shapes.back().data();
  }
  DLTensor Make(void* data, DLDataTypeCode code, int bits, std::vector<int64_t> shape) {
    return MakeTensor(&shapes, data, code, bits, std::move(shape));
  }
  // Attention: batch 1, seq 4, 2 query heads over 1 kv head, head_dim 8 (float32).
  static constexpr int64_t kS = 4, kH = 2, kHk = 1, kD = 8;
  std::vector<float> qa, ka, va, oa, lsea, dqa;
  std::vector<double> xr, yr, slopes = {0.5, 0.25}, t5_table, fox_logits, ap_w, ap_u, tile;
  std::vector<int64_t> ids = {0, 1, 2, 3}, offsets = {2}, cu = {0, 2, 4}, bad_cu = {0, 3, 2},
                       tpos = {0, 1, 2, 3}, tq = {1, 3}, tk = {0, 1, 2};
  // One sink logit per query head (float32) and its gradient (float64), 0.9.0.
  std::vector<float> sinks = {0.5f, -1.0f};
  std::vector<double> d_sinks = {0.0, 0.0};
  DLTensor q, k, v, o, lse, dq, x, y, ids_t, offsets_t, cu_t, bad_cu_t, pos_t, tq_t, tk_t, tile_t,
      sinks_t, d_sinks_t;
  gpe_rope_options rope_opt = GPE_ROPE_OPTIONS_INIT;
  gpe_rope_tokens tokens = GPE_ROPE_TOKENS_INIT;
  gpe_alibi_options alibi_opt = GPE_ALIBI_OPTIONS_INIT;
  gpe_t5_options t5_opt = GPE_T5_OPTIONS_INIT;
  gpe_fox_options fox_opt = GPE_FOX_OPTIONS_INIT;
  gpe_grape_ap_options ap_opt = GPE_GRAPE_AP_OPTIONS_INIT;
  gpe_attention_options att = GPE_ATTENTION_OPTIONS_INIT;
  gpe_rope* rope = nullptr;
  gpe_bias* alibi = nullptr;
  gpe_bias* fox = nullptr;

  Fixture03() {
    const size_t nq = kS * kH * kD, nk = kS * kHk * kD;
    qa.assign(nq, 0.25f);
    ka.assign(nk, 0.5f);
    va.assign(nk, 1.0f);
    oa.assign(nq, 0.0f);
    dqa.assign(nq, 0.0f);
    lsea.assign(kS * kH, 0.0f);
    q = Make(qa.data(), kDLFloat, 32, {1, kS, kH, kD});
    k = Make(ka.data(), kDLFloat, 32, {1, kS, kHk, kD});
    v = Make(va.data(), kDLFloat, 32, {1, kS, kHk, kD});
    o = Make(oa.data(), kDLFloat, 32, {1, kS, kH, kD});
    dq = Make(dqa.data(), kDLFloat, 32, {1, kS, kH, kD});
    lse = Make(lsea.data(), kDLFloat, 32, {kS, kH});
    xr.assign(kS * kH * kD, 0.5);
    yr.assign(kS * kH * kD, 0.0);
    x = Make(xr.data(), kDLFloat, 64, {1, kS, kH, kD});
    y = Make(yr.data(), kDLFloat, 64, {1, kS, kH, kD});
    ids_t = Make(ids.data(), kDLInt, 64, {kS});
    offsets_t = Make(offsets.data(), kDLInt, 64, {1});
    cu_t = Make(cu.data(), kDLInt, 64, {3});
    bad_cu_t = Make(bad_cu.data(), kDLInt, 64, {3});
    pos_t = Make(tpos.data(), kDLInt, 64, {kS});
    tq_t = Make(tq.data(), kDLInt, 64, {2});
    tk_t = Make(tk.data(), kDLInt, 64, {3});
    tile.assign(2 * 3, 0.0);
    tile_t = Make(tile.data(), kDLFloat, 64, {2, 3});
    sinks_t = Make(sinks.data(), kDLFloat, 32, {kH});
    d_sinks_t = Make(d_sinks.data(), kDLFloat, 64, {kH});
    rope_opt.head_dim = kD;
    alibi_opt.num_heads = kH;
    t5_table.assign(32 * kH, 0.1);
    t5_opt.num_heads = kH;
    t5_opt.table = t5_table.data();
    fox_logits.assign(kS * kH, 1.0);
    fox_opt.length = kS;
    fox_opt.num_heads = kH;
    fox_opt.gate_logits = fox_logits.data();
    ap_w.assign(kS * kH, 0.1);
    ap_u.assign(kS * kH, 0.2);
    ap_opt.length = kS;
    ap_opt.num_heads = kH;
    ap_opt.w = ap_w.data();
    ap_opt.u = ap_u.data();
    EXPECT_EQ(gpe_rope_create(&rope_opt, &rope), GPE_OK) << gpe_last_error_message();
    EXPECT_EQ(gpe_bias_create_alibi(&alibi_opt, &alibi), GPE_OK) << gpe_last_error_message();
    EXPECT_EQ(gpe_bias_create_fox(&fox_opt, &fox), GPE_OK) << gpe_last_error_message();
  }
  ~Fixture03() {
    gpe_rope_destroy(rope);
    gpe_bias_destroy(alibi);
    gpe_bias_destroy(fox);
  }
  gpe_status RopeCreate() {
    gpe_rope* r = nullptr;
    const gpe_status s = gpe_rope_create(&rope_opt, &r);
    gpe_rope_destroy(r);
    return s;
  }
  gpe_status RopeForward() { return gpe_rope_forward(rope, &tokens, &x, &y); }
  template <class Options, class Create>
  gpe_status BiasCreate(const Options& options, Create create) {
    gpe_bias* b = nullptr;
    const gpe_status s = create(&options, &b);
    gpe_bias_destroy(b);
    return s;
  }
  gpe_status Forward() { return gpe_attention_forward(&att, &q, &k, &v, &o, &lse); }
  gpe_status Backward() {
    return gpe_attention_backward(&att, &q, &k, &v, &o, &lse, &o, &dq, nullptr, nullptr);
  }
  // The backward with parameter gradients `g` (o and lse recomputed).
  gpe_status BackwardParams(const gpe_attention_param_grads& g) {
    return gpe_attention_backward_with_parameters(&att, &q, &k, &v, nullptr, nullptr, &o, &dq,
                                                  nullptr, nullptr, &g);
  }
  // A forward with a gpe_rope handle made from rope_opt after `edit`.
  template <class Edit>
  gpe_status ForwardWithRope(Edit edit) {
    gpe_rope_options ro = rope_opt;
    edit(ro);
    gpe_rope* r = nullptr;
    if (gpe_rope_create(&ro, &r) != GPE_OK) return GPE_ERROR_INTERNAL;
    att.rope = r;
    const gpe_status s = Forward();
    gpe_rope_destroy(r);
    return s;
  }
};

// Valid attention inputs with structured positions and Shaw labels (one sequence of 4
// tokens, 1 head, head_dim 8): axial 2D RoPE from per-axis coordinates, Shaw tables
// with k = 1. Cases switch the encoding or corrupt one thing.
struct AttentionInputs {
  static constexpr int64_t kT = 4, kD = 8;
  std::deque<std::vector<int64_t>> shapes;
  std::vector<float> qkv = std::vector<float>(kT * kD, 0.5f), o = std::vector<float>(kT * kD);
  std::vector<int64_t> axes = {0, 0, 0, 1, 1, 0, 1, 1}, bad_axes = {0, 0, 0, 1, 1, 0, 1, 1, 2, 2, 2, 2};
  std::vector<int64_t> tree_off = {0, 0, 1, 2, 4}, tree_ch = {0, 1, 1, 0};
  std::vector<int64_t> sections = {1, 3};  // planes per axis: 4 = rope_dim / 2
  std::vector<double> grid = std::vector<double>(2 * 4 * 4, 0.0);
  std::vector<double> tree_skew = std::vector<double>(2 * kD * kD, 0.0);
  std::vector<double> table = std::vector<double>(3 * kD, 0.1), gtable = std::vector<double>(3 * kD);
  DLTensor q, out, t_axes, t_bad_axes, t_off, t_ch, t_sections, t_grid, t_tree, t_table, t_gtable;
  gpe_attention_options opt = GPE_ATTENTION_OPTIONS_INIT;

  DLTensor Make(void* data, DLDataTypeCode code, int bits, std::vector<int64_t> shape) {
    return MakeTensor(&shapes, data, code, bits, std::move(shape));
  }
  AttentionInputs() {
    q = Make(qkv.data(), kDLFloat, 32, {1, kT, 1, kD});
    out = Make(o.data(), kDLFloat, 32, {1, kT, 1, kD});
    t_axes = Make(axes.data(), kDLInt, 64, {kT, 2});
    t_bad_axes = Make(bad_axes.data(), kDLInt, 64, {kT, 3});
    t_off = Make(tree_off.data(), kDLInt, 64, {kT + 1});
    t_ch = Make(tree_ch.data(), kDLInt, 64, {4});
    t_sections = Make(sections.data(), kDLInt, 64, {2});
    t_grid = Make(grid.data(), kDLFloat, 64, {2, 4, 4});
    t_tree = Make(tree_skew.data(), kDLFloat, 64, {2, kD, kD});
    t_table = Make(table.data(), kDLFloat, 64, {3, kD});
    t_gtable = Make(gtable.data(), kDLFloat, 64, {3, kD});
    opt.rope_dim = kD;
    opt.rope_axes = 2;
    opt.q_axes = opt.k_axes = &t_axes;
    opt.shaw_max_distance = 1;
    opt.shaw_key_table = opt.shaw_value_table = &t_table;
  }
  // Switches to an algebraic tree (2 branches) with tree addresses.
  void UseTree() {
    opt.rope_dim = 0;
    opt.rope_axes = 0;
    opt.q_axes = opt.k_axes = nullptr;
    opt.algebraic_tree = &t_tree;
    opt.q_tree_offsets = opt.k_tree_offsets = &t_off;
    opt.q_tree_children = opt.k_tree_children = &t_ch;
  }
  gpe_status Forward() { return gpe_attention_forward(&opt, &q, &q, &q, &out, nullptr); }
  gpe_status BackwardV2(DLTensor* gk, DLTensor* gv) {
    return gpe_attention_backward_v2(&opt, &q, &q, &q, nullptr, nullptr, &q, &out, nullptr,
                                     nullptr, gk, gv);
  }
};

// Valid inputs for every entry point; each case corrupts one thing in a fresh copy.
struct Fixture {
  std::deque<std::vector<int64_t>> shapes;  // stable addresses for DLTensor::shape
  DLTensor Make(void* data, DLDataTypeCode code, int bits, std::vector<int64_t> shape) {
    return MakeTensor(&shapes, data, code, bits, std::move(shape));
  }
  DLTensor F64(std::vector<double>* v, std::vector<int64_t> shape) {
    return Make(v->data(), kDLFloat, 64, std::move(shape));
  }

  static constexpr int64_t kN = 4, kDim = 8, kRows = 16;
  std::vector<int64_t> pos_data = {0, 3, -5, 7};
  std::vector<double> x_data, out_data, mat_data, ab, omega = {0.3}, skew, table_data,
      grad_table_data, q_data, labels_data, scores_data, gq_data, gl_data, coords_data, psi_data,
      image_data, w_data, pred_data, ga_data, gb_data, go_data;
  DLTensor pos, x, out, mat, table, grad_table, q, labels, qpos, kpos, scores, gq, gl, coords, psi,
      image, w, pred, ga, gb, go;
  gpe_so_planes_options planes_opt = GPE_SO_PLANES_OPTIONS_INIT;
  gpe_so_rank2_options rank2_opt = GPE_SO_RANK2_OPTIONS_INIT;
  gpe_grape_m_options grape_opt = GPE_GRAPE_M_OPTIONS_INIT;
  gpe_algebraic_sequence_options alg_opt = GPE_ALGEBRAIC_SEQUENCE_OPTIONS_INIT;
  gpe_sinusoidal_options sin_opt = GPE_SINUSOIDAL_OPTIONS_INIT;
  gpe_shifted_basis_options shift_opt = GPE_SHIFTED_BASIS_OPTIONS_INIT;
  gpe_separable_fit_options fit_opt = GPE_SEPARABLE_FIT_OPTIONS_INIT;
  gpe_so_rep* rep = nullptr;
  gpe_grape_m* grape = nullptr;
  gpe_algebraic_sequence* alg = nullptr;
  gpe_learned_positions* learned = nullptr;
  gpe_so_rep* created = nullptr;  // receives handles a case should not have been given
  Fixture03 v3;                   // the 0.3.0 entry points' inputs
  AttentionInputs attn;           // structured positions and Shaw labels
  int64_t i64 = 0, j64 = 0;
  double f64 = 0.0;
  std::vector<int64_t> qpos_data = {0, 5}, kpos_data = {1, 2, 9};

  // -- Coordinate encoders, graph encodings, embedder analysis (src/coordinate/, analysis/) --
  // A Fourier handle (D = 2, F = 8), spherical harmonics (D = 3, F = 4), a polar SO(2)
  // handle (D = 2, F = 4); a 4-cycle graph; points [4, 2], features [4, 8].
  std::vector<double> pts_data = std::vector<double>(8, 0.3), feat_data = std::vector<double>(32, 0.0),
                      gfeat_data = std::vector<double>(32, 0.1), gpts_data = std::vector<double>(8, 0.0),
                      freq_data = {1.0, 2.0, 3.0, 4.0}, bx_data = {0.0, 1.0, 2.0},
                      bo_data = std::vector<double>(3, 0.0), lw_data = std::vector<double>(4, 1.0),
                      lvals_data = std::vector<double>(2, 0.0), lvecs_data = std::vector<double>(8, 0.0),
                      so2c_data = {1.0, 2.0}, cd_data = std::vector<double>(16, 0.0);
  std::vector<int64_t> ledges_data = {0, 1, 1, 2, 2, 3, 3, 0}, so2m_data = {0, 0}, so2k_data = {1, 2};
  DLTensor pts, feat, gfeat, gpts, freq, bx, bo, ledges, lw, lvals, lvecs, so2m, so2c, so2k, cd;
  gpe_fourier_features_options ff_opt = GPE_FOURIER_FEATURES_OPTIONS_INIT;
  gpe_so2_bessel_options so2_opt = GPE_SO2_BESSEL_OPTIONS_INIT;
  gpe_laplacian_options lap_opt = GPE_LAPLACIAN_OPTIONS_INIT;
  gpe_shifted_basis_options sh_axes[2] = {GPE_SHIFTED_BASIS_OPTIONS_INIT, GPE_SHIFTED_BASIS_OPTIONS_INIT};
  gpe_coordinate_encoder* fourier = nullptr;
  gpe_coordinate_encoder* harmonics = nullptr;
  gpe_coordinate_encoder* so2 = nullptr;
  gpe_coordinate_encoder* made = nullptr;  // receives handles a case should not have been given
  // INR 3D and blended fits: volume [5, 5, 5] over psi [5, 4]; a 1-D encoder (K = 4) on
  // the grid `coords` (0.1 .. 0.9), 3 scattered points inside it.
  std::vector<double> vol_data = std::vector<double>(125, 0.5), w3_data = std::vector<double>(64, 0.0),
                      bpts_data = {0.2, 0.3, 0.5, 0.5, 0.8, 0.7}, bvals_data = {1.0, 2.0, 3.0},
                      bw_data = std::vector<double>(16, 0.0), bout_data = std::vector<double>(3, 0.0);
  DLTensor vol, w3, bpts, bvals, bw, bout;
  gpe_blended_fit_options blend_opt = GPE_BLENDED_FIT_OPTIONS_INIT;
  gpe_coordinate_encoder* axis1 = nullptr;

  Fixture() {
    x_data.assign(kN * kDim, 0.5);
    out_data.assign(kN * kDim, 0.0);
    mat_data.assign(kDim * kDim, 0.0);
    ab.assign(2 * kDim, 0.0);
    ab[0] = 1.0;
    ab[kDim + 1] = 1.0;
    skew.assign(kDim * kDim, 0.0);
    skew[1] = 0.2;
    skew[kDim] = -0.2;
    table_data.assign(kRows * kDim, 0.25);
    grad_table_data.assign(kRows * kDim, 0.0);
    q_data.assign(2 * kDim, 1.0);
    labels_data.assign(3 * kDim, 1.0);
    scores_data.assign(2 * 3, 0.0);
    gq_data.assign(2 * kDim, 0.0);
    gl_data.assign(3 * kDim, 0.0);
    coords_data = {0.1, 0.3, 0.5, 0.7, 0.9};
    psi_data.assign(5 * 4, 0.0);
    image_data.assign(5 * 5, 0.5);
    w_data.assign(4 * 4, 0.0);
    pred_data.assign(5 * 5, 0.0);
    ga_data.assign(kDim, 0.0);
    gb_data.assign(kDim, 0.0);
    go_data.assign(1, 0.0);
    pos = Make(pos_data.data(), kDLInt, 64, {kN});
    x = F64(&x_data, {kN, kDim});
    out = F64(&out_data, {kN, kDim});
    mat = F64(&mat_data, {kDim, kDim});
    table = F64(&table_data, {kRows, kDim});
    grad_table = F64(&grad_table_data, {kRows, kDim});
    q = F64(&q_data, {2, kDim});
    labels = F64(&labels_data, {3, kDim});
    qpos = Make(qpos_data.data(), kDLInt, 64, {2});
    kpos = Make(kpos_data.data(), kDLInt, 64, {3});
    scores = F64(&scores_data, {2, 3});
    gq = F64(&gq_data, {2, kDim});
    gl = F64(&gl_data, {3, kDim});
    coords = F64(&coords_data, {5});
    psi = F64(&psi_data, {5, 4});
    image = F64(&image_data, {5, 5});
    w = F64(&w_data, {4, 4});
    pred = F64(&pred_data, {5, 5});
    ga = F64(&ga_data, {1, kDim});
    gb = F64(&gb_data, {1, kDim});
    go = F64(&go_data, {1});

    planes_opt.dim = kDim;
    rank2_opt.dim = kDim;
    rank2_opt.a = ab.data();
    rank2_opt.b = ab.data() + kDim;
    grape_opt.dim = kDim;
    grape_opt.a = ab.data();
    grape_opt.b = ab.data() + kDim;
    grape_opt.omega = omega.data();
    alg_opt.dim = kDim;
    alg_opt.skew = skew.data();
    shift_opt.num_shifts = 4;
    shift_opt.width = 0.3;
    fit_opt.lambda = 1e-3;
    Ok(gpe_so_rep_create_planes(&planes_opt, &rep));
    Ok(gpe_grape_m_create(&grape_opt, &grape));
    Ok(gpe_algebraic_sequence_create(&alg_opt, &alg));
    Ok(gpe_learned_positions_create(&table, &learned));
    Ok(gpe_shifted_basis_encode(&shift_opt, &coords, &psi));

    pts = F64(&pts_data, {4, 2});
    feat = F64(&feat_data, {4, 8});
    gfeat = F64(&gfeat_data, {4, 8});
    gpts = F64(&gpts_data, {4, 2});
    freq = F64(&freq_data, {2, 2});
    bx = F64(&bx_data, {3});
    bo = F64(&bo_data, {3});
    ledges = Make(ledges_data.data(), kDLInt, 64, {4, 2});
    lw = F64(&lw_data, {4});
    lvals = F64(&lvals_data, {2});
    lvecs = F64(&lvecs_data, {4, 2});
    so2m = Make(so2m_data.data(), kDLInt, 64, {2});
    so2c = F64(&so2c_data, {2});
    so2k = Make(so2k_data.data(), kDLInt, 64, {2});
    cd = F64(&cd_data, {4, 4});
    ff_opt.dim = 2;
    ff_opt.num_frequencies = 4;
    so2_opt.num_terms = 2;
    so2_opt.max_scale = 4.0;
    so2_opt.max_k = 3;
    so2_opt.polar = 1;
    for (gpe_shifted_basis_options& a : sh_axes) {
      a.num_shifts = 4;
      a.width = 0.3;
    }
    Ok(gpe_fourier_features_create(&ff_opt, &fourier));
    Ok(gpe_spherical_harmonics_create(1, &harmonics));
    Ok(gpe_so2_bessel_create_sampled(&so2_opt, &so2));
    vol = F64(&vol_data, {5, 5, 5});
    w3 = F64(&w3_data, {4, 4, 4});
    bpts = F64(&bpts_data, {3, 2});
    bvals = F64(&bvals_data, {3});
    bw = F64(&bw_data, {4, 4});
    bout = F64(&bout_data, {3});
    Ok(gpe_shifted_encoder_create(GPE_SHIFTED_SIMPLE, &shift_opt, 1, &axis1));
  }
  ~Fixture() {
    gpe_so_rep_destroy(rep);
    gpe_so_rep_destroy(created);
    gpe_grape_m_destroy(grape);
    gpe_algebraic_sequence_destroy(alg);
    gpe_learned_positions_destroy(learned);
    gpe_coordinate_encoder_destroy(fourier);
    gpe_coordinate_encoder_destroy(harmonics);
    gpe_coordinate_encoder_destroy(so2);
    gpe_coordinate_encoder_destroy(made);
    gpe_coordinate_encoder_destroy(axis1);
  }
  static void Ok(gpe_status s) { ASSERT_EQ(s, GPE_OK) << gpe_last_error_message(); }

  // The valid calls that cases corrupt.
  gpe_status Planes() { return gpe_so_rep_create_planes(&planes_opt, &created); }
  gpe_status Rank2() { return gpe_so_rep_create_rank2(&rank2_opt, &created); }
  gpe_status Apply() { return gpe_so_rep_apply(rep, &pos, &x, &out); }
  gpe_status Sin() { return gpe_sinusoidal_encode(&sin_opt, &pos, &out); }
  gpe_status GrapeCreate() {
    gpe_grape_m* g = nullptr;
    const gpe_status s = gpe_grape_m_create(&grape_opt, &g);
    gpe_grape_m_destroy(g);
    return s;
  }
  gpe_status GrapeBackward() {
    return gpe_grape_m_backward(grape, &pos, &x, &out, nullptr, &ga, &gb, &go);
  }
  gpe_status AlgCreate() {
    gpe_algebraic_sequence* a = nullptr;
    const gpe_status s = gpe_algebraic_sequence_create(&alg_opt, &a);
    gpe_algebraic_sequence_destroy(a);
    return s;
  }
  gpe_status Shaw() { return gpe_shaw_key_scores(&q, &labels, &qpos, &kpos, &scores); }
  gpe_status ShawBackward() {
    return gpe_shaw_key_scores_backward(&q, &labels, &qpos, &kpos, &scores, &gq, &gl);
  }
  gpe_status Shift() { return gpe_shifted_basis_encode(&shift_opt, &coords, &psi); }
  gpe_status Fit() { return gpe_inr_fit_separable_2d(&fit_opt, &psi, &psi, &image, &w); }
  gpe_status Predict() { return gpe_inr_predict_separable_2d(&psi, &psi, &w, &pred); }
  gpe_status Fit3D() { return gpe_inr_fit_separable_3d(&fit_opt, &psi, &psi, &psi, &vol, &w3); }
  gpe_status Blend() {
    return gpe_inr_fit_blended_2d(&blend_opt, axis1, axis1, &coords, &coords, &bpts, &bvals, &bw,
                                  nullptr, nullptr);
  }
  gpe_status FourierCreate() { return gpe_fourier_features_create(&ff_opt, &made); }
  gpe_status Encode() { return gpe_coordinate_encode(fourier, &pts, &feat); }
  gpe_status Backward() { return gpe_coordinate_backward(fourier, &pts, &gfeat, &gpts); }
  gpe_status So2Sampled() { return gpe_so2_bessel_create_sampled(&so2_opt, &made); }
  gpe_status So2Explicit() { return gpe_so2_bessel_create(&so2m, &so2c, &so2k, 0, &made); }
  gpe_status ShiftedEncoder() { return gpe_shifted_encoder_create(GPE_SHIFTED_COMPLEX, sh_axes, 2, &made); }
  gpe_status Laplacian() { return gpe_laplacian_eigenvectors(&lap_opt, 4, &ledges, &lw, &lvals, &lvecs); }
};

using Run = std::function<gpe_status(Fixture&)>;
struct Case {
  std::string entry;
  Run run;
};

const double kNaN = std::numeric_limits<double>::quiet_NaN();
const double kInf = std::numeric_limits<double>::infinity();
constexpr int64_t kHuge = int64_t{1} << 21;  // above kMaxDim = 2^20

// Cases of the 0.3.0 entry points (RoPE, additive biases, attention).
void AddCases03(const std::function<void(const char*, const char*, Run)>& add) {
  const char* e = "gpe_rope_create";
  add("rope_options_null", e, [](Fixture&) {
    gpe_rope* r = nullptr;  // not the fixture's handle: a failed create clears its out
    return gpe_rope_create(nullptr, &r);
  });
  add("rope_rotary_odd", e, [](Fixture& f) { f.v3.rope_opt.rotary_dim = 3; return f.v3.RopeCreate(); });
  add("rope_rotary_above_head_dim", e, [](Fixture& f) { f.v3.rope_opt.rotary_dim = 16; return f.v3.RopeCreate(); });
  add("rope_base_nan", e, [](Fixture& f) { f.v3.rope_opt.base = kNaN; return f.v3.RopeCreate(); });
  add("rope_schedule_unknown", e, [](Fixture& f) { f.v3.rope_opt.schedule = 42; return f.v3.RopeCreate(); });
  add("rope_yarn_beta_order", e, [](Fixture& f) {
    f.v3.rope_opt.schedule = GPE_ROPE_YARN;
    f.v3.rope_opt.factor = 4.0;
    f.v3.rope_opt.beta_fast = 1.0;
    f.v3.rope_opt.beta_slow = 32.0;
    return f.v3.RopeCreate();
  });
  add("rope_longrope_factor_count", e, [](Fixture& f) {
    static const double factors[3] = {1.0, 1.0, 1.0};  // rotary_dim / 2 = 4 are needed
    f.v3.rope_opt.schedule = GPE_ROPE_LONGROPE;
    f.v3.rope_opt.short_factor = factors;
    f.v3.rope_opt.short_factor_len = 3;
    f.v3.rope_opt.long_factor = factors;
    f.v3.rope_opt.long_factor_len = 3;
    return f.v3.RopeCreate();
  });
  add("rope_mrope_sections_sum", e, [](Fixture& f) {
    static const int64_t sections[2] = {1, 2};  // sum 3, rotary_dim / 2 = 4
    f.v3.rope_opt.axes = GPE_ROPE_AXES_MROPE;
    f.v3.rope_opt.mrope_sections = sections;
    f.v3.rope_opt.num_mrope_sections = 2;
    return f.v3.RopeCreate();
  });
  e = "gpe_rope_forward";
  add("rope_forward_ids_and_offsets", e, [](Fixture& f) {
    f.v3.tokens.position_ids = &f.v3.ids_t;
    f.v3.tokens.offsets = &f.v3.offsets_t;
    return f.v3.RopeForward();
  });
  add("rope_forward_ids_count", e, [](Fixture& f) {
    f.v3.tokens.position_ids = &f.v3.tk_t;  // 3 ids for 4 tokens
    return f.v3.RopeForward();
  });
  add("rope_forward_head_dim_mismatch", e, [](Fixture& f) {
    f.v3.shapes.push_back({1, 8, 2, 4});
    f.v3.x.shape = f.v3.y.shape = f.v3.shapes.back().data();  // head_dim 4, the encoding's 8
    return f.v3.RopeForward();
  });
  add("rope_forward_thd_without_cu_seqlens", e, [](Fixture& f) {
    f.v3.tokens.layout = GPE_ROPE_LAYOUT_THD;
    f.v3.shapes.push_back({4, 2, 8});
    f.v3.x.ndim = f.v3.y.ndim = 3;
    f.v3.x.shape = f.v3.y.shape = f.v3.shapes.back().data();
    return f.v3.RopeForward();
  });
  // A broadcast cu_seqlens (stride 0: 8 bytes describing 2^40 entries) is refused before
  // it is copied (issue 24: the copy tried to allocate 8 TiB).
  add("rope_forward_thd_cu_seqlens_broadcast", e, [](Fixture& f) {
    f.v3.tokens.layout = GPE_ROPE_LAYOUT_THD;
    f.v3.shapes.push_back({4, 2, 8});
    f.v3.x.ndim = f.v3.y.ndim = 3;
    f.v3.x.shape = f.v3.y.shape = f.v3.shapes.back().data();
    f.v3.shapes.push_back({int64_t{1} << 40});
    f.v3.cu_t.shape = f.v3.shapes.back().data();
    f.v3.shapes.push_back({0});
    f.v3.cu_t.strides = f.v3.shapes.back().data();
    f.v3.tokens.cu_seqlens = &f.v3.cu_t;
    return f.v3.RopeForward();
  });
  // Issue 24: float32 xPos scales past float32's range gave inf and NaN with GPE_OK.
  add("rope_forward_xpos_scale_overflows", e, [](Fixture& f) {
    f.v3.rope_opt.xpos = 1;
    gpe_rope* r = nullptr;
    if (gpe_rope_create(&f.v3.rope_opt, &r) != GPE_OK) return gpe_status{-1};
    f.v3.ids = {-50000, -50000, -50000, -50000};  // queries 50,000 before the centre
    f.v3.tokens.position_ids = &f.v3.ids_t;
    const gpe_status s = gpe_rope_forward(r, &f.v3.tokens, &f.v3.q, &f.v3.o);
    gpe_rope_destroy(r);
    return s;
  });
  add("rope_forward_dtype_mismatch", e, [](Fixture& f) {
    return gpe_rope_forward(f.v3.rope, &f.v3.tokens, &f.v3.x, &f.v3.o);  // float64 -> float32
  });
  e = "gpe_rope_table_create";
  // Found by the libFuzzer target: an empty `like` of 2^39 sequences was walked.
  add("rope_table_like_empty", e, [](Fixture& f) {
    f.v3.shapes.push_back({int64_t{1} << 39, 0, 2, 8});
    f.v3.x.shape = f.v3.shapes.back().data();
    gpe_rope_table* t = nullptr;
    const gpe_status s = gpe_rope_table_create(f.v3.rope, &f.v3.tokens, &f.v3.x, &t);
    gpe_rope_table_destroy(t);
    return s;
  });
  e = "gpe_bias_create_alibi";
  add("alibi_heads_0", e, [](Fixture& f) {
    f.v3.alibi_opt.num_heads = 0;
    return f.v3.BiasCreate(f.v3.alibi_opt, gpe_bias_create_alibi);
  });
  add("alibi_slope_nan", e, [](Fixture& f) {
    f.v3.slopes[1] = kNaN;
    f.v3.alibi_opt.slopes = f.v3.slopes.data();
    return f.v3.BiasCreate(f.v3.alibi_opt, gpe_bias_create_alibi);
  });
  add("alibi_form_unknown", e, [](Fixture& f) {
    f.v3.alibi_opt.form = 5;
    return f.v3.BiasCreate(f.v3.alibi_opt, gpe_bias_create_alibi);
  });
  e = "gpe_bias_create_t5";
  add("t5_buckets_1", e, [](Fixture& f) {
    f.v3.t5_opt.num_buckets = 1;
    return f.v3.BiasCreate(f.v3.t5_opt, gpe_bias_create_t5);
  });
  add("t5_table_null", e, [](Fixture& f) {
    f.v3.t5_opt.table = nullptr;
    return f.v3.BiasCreate(f.v3.t5_opt, gpe_bias_create_t5);
  });
  e = "gpe_bias_create_fox";
  add("fox_logit_inf", e, [](Fixture& f) {
    f.v3.fox_logits[3] = kInf;
    return f.v3.BiasCreate(f.v3.fox_opt, gpe_bias_create_fox);
  });
  add("fox_length_negative", e, [](Fixture& f) {
    f.v3.fox_opt.length = -1;
    return f.v3.BiasCreate(f.v3.fox_opt, gpe_bias_create_fox);
  });
  e = "gpe_bias_create_grape_ap";
  add("grape_ap_rank_0", e, [](Fixture& f) {
    f.v3.ap_opt.rank = 0;
    return f.v3.BiasCreate(f.v3.ap_opt, gpe_bias_create_grape_ap);
  });
  add("grape_ap_u_null", e, [](Fixture& f) {
    f.v3.ap_opt.u = nullptr;
    return f.v3.BiasCreate(f.v3.ap_opt, gpe_bias_create_grape_ap);
  });
  e = "gpe_bias_fill_tile";
  add("fill_tile_head_out_of_range", e, [](Fixture& f) {
    return gpe_bias_fill_tile(f.v3.alibi, 2, &f.v3.tq_t, &f.v3.tk_t, &f.v3.tile_t);
  });
  add("fill_tile_out_wrong_shape", e, [](Fixture& f) {
    return gpe_bias_fill_tile(f.v3.alibi, 0, &f.v3.tk_t, &f.v3.tk_t, &f.v3.tile_t);
  });
  add("fill_tile_fox_position_outside", e, [](Fixture& f) {
    f.v3.tq[1] = 4;  // FoX positions lie in [0, length = 4)
    return gpe_bias_fill_tile(f.v3.fox, 0, &f.v3.tq_t, &f.v3.tk_t, &f.v3.tile_t);
  });
  e = "gpe_attention_forward";
  add("attention_options_null", e, [](Fixture& f) {
    return gpe_attention_forward(nullptr, &f.v3.q, &f.v3.k, &f.v3.v, &f.v3.o, nullptr);
  });
  add("attention_heads_not_dividing", e, [](Fixture& f) {
    f.v3.shapes.push_back({1, 4, 3, 2});
    f.v3.shapes.push_back({1, 4, 2, 2});
    f.v3.q.shape = f.v3.o.shape = f.v3.shapes[f.v3.shapes.size() - 2].data();  // 3 heads x 2
    f.v3.k.shape = f.v3.v.shape = f.v3.shapes.back().data();                    // 2 kv heads
    return gpe_attention_forward(&f.v3.att, &f.v3.q, &f.v3.k, &f.v3.v, &f.v3.o, nullptr);
  });
  add("attention_head_dim_mismatch", e, [](Fixture& f) {
    f.v3.shapes.push_back({1, 8, 1, 4});
    f.v3.k.shape = f.v3.v.shape = f.v3.shapes.back().data();  // head_dim 4 against q's 8
    return f.v3.Forward();
  });
  add("attention_rope_dim_odd", e, [](Fixture& f) { f.v3.att.rope_dim = 3; return f.v3.Forward(); });
  add("attention_rope_dim_above_head_dim", e, [](Fixture& f) { f.v3.att.rope_dim = 10; return f.v3.Forward(); });
  add("attention_scale_nan", e, [](Fixture& f) { f.v3.att.softmax_scale = kNaN; return f.v3.Forward(); });
  add("attention_two_rotations", e, [](Fixture& f) {
    f.v3.att.rope_dim = 8;
    f.v3.att.grape_m = f.grape;
    return f.v3.Forward();
  });
  add("attention_one_position_tensor", e, [](Fixture& f) {
    f.v3.att.q_positions = &f.v3.pos_t;  // keys' positions missing
    return f.v3.Forward();
  });
  add("attention_cu_seqlens_decreasing", e, [](Fixture& f) {
    f.v3.UsePackedLayout();
    f.v3.att.cu_seqlens_q = &f.v3.bad_cu_t;
    f.v3.att.cu_seqlens_k = &f.v3.cu_t;
    return gpe_attention_forward(&f.v3.att, &f.v3.q, &f.v3.k, &f.v3.v, &f.v3.o, nullptr);
  });
  // A broadcast cu_seqlens (stride 0): 2^39 + 1 entries over one zero describe 2^39 empty
  // sequences in 8 bytes; refused before the entries are copied or walked.
  add("attention_cu_seqlens_broadcast", e, [](Fixture& f) {
    static const int64_t zero = 0;
    f.v3.shapes.push_back({0, 2, 8});
    f.v3.q.ndim = f.v3.o.ndim = f.v3.k.ndim = f.v3.v.ndim = 3;
    f.v3.q.shape = f.v3.o.shape = f.v3.k.shape = f.v3.v.shape = f.v3.shapes.back().data();
    f.v3.shapes.push_back({0});  // the stride
    f.v3.cu_t.strides = f.v3.shapes.back().data();
    f.v3.shapes.push_back({(int64_t{1} << 39) + 1});
    f.v3.cu_t.shape = f.v3.shapes.back().data();
    f.v3.cu_t.data = const_cast<int64_t*>(&zero);
    f.v3.att.cu_seqlens_q = f.v3.att.cu_seqlens_k = &f.v3.cu_t;
    return gpe_attention_forward(&f.v3.att, &f.v3.q, &f.v3.k, &f.v3.v, &f.v3.o, nullptr);
  });
  // Positions whose count differs from the tokens' (here a 2^39-entry broadcast for 4
  // tokens): refused before the entries are copied.
  add("attention_positions_count", e, [](Fixture& f) {
    f.v3.shapes.push_back({0});  // the stride
    f.v3.pos_t.strides = f.v3.shapes.back().data();
    f.v3.shapes.push_back({int64_t{1} << 39});
    f.v3.pos_t.shape = f.v3.shapes.back().data();
    f.v3.att.q_positions = f.v3.att.k_positions = &f.v3.pos_t;
    return f.v3.Forward();
  });
  add("attention_bias_heads_mismatch", e, [](Fixture& f) -> gpe_status {
    f.v3.alibi_opt.num_heads = 3;
    gpe_bias_destroy(f.v3.alibi);
    f.v3.alibi = nullptr;
    if (gpe_bias_create_alibi(&f.v3.alibi_opt, &f.v3.alibi) != GPE_OK) return GPE_ERROR_INTERNAL;
    f.v3.att.bias = f.v3.alibi;  // 3 bias heads, 2 query heads
    return f.v3.Forward();
  });
  // A value head size of its own (0.10.0): v may differ from k in its last dim only,
  // and o then ends in v's.
  add("attention_v_shape_beyond_head_size", e, [](Fixture& f) {
    f.v3.shapes.push_back({1, f.v3.kS - 1, f.v3.kHk, f.v3.kD});
    f.v3.v.shape = f.v3.shapes.back().data();
    return f.v3.Forward();
  });
  add("attention_o_without_value_head_size", e, [](Fixture& f) {
    f.v3.shapes.push_back({1, f.v3.kS, f.v3.kHk, f.v3.kD / 2});
    f.v3.v.shape = f.v3.shapes.back().data();  // o keeps head_dim
    return f.v3.Forward();
  });
  add("attention_lse_wrong_shape", e, [](Fixture& f) {
    f.v3.shapes.push_back({f.v3.kH, f.v3.kS});
    f.v3.lse.shape = f.v3.shapes.back().data();
    return f.v3.Forward();
  });
  // A Shaw value table of the wrong shape with the key table missing and a huge clip
  // distance: refused for its shape before the missing side's zeros (2^31 x head_dim
  // doubles) are allocated (an unseeded attention_fuzzer run ran out of memory there).
  add("attention_shaw_table_shape_huge_distance", e, [](Fixture& f) {
    f.v3.att.shaw_max_distance = int64_t{1} << 30;
    f.v3.att.shaw_value_table = &f.v3.tile_t;  // [2, 3], not [2^31 + 1, head_dim]
    return f.v3.Forward();
  });
  // 16-bit KV caches: k and v share a dtype; float16 only as a cache.
  add("attention_kv_dtypes_differ", e, [](Fixture& f) {
    f.v3.k.dtype = {kDLBfloat, 16, 1};
    f.v3.v.dtype = {kDLFloat, 16, 1};
    return f.v3.Forward();
  });
  add("attention_q_float16", e, [](Fixture& f) {
    f.v3.q.dtype = f.v3.k.dtype = f.v3.v.dtype = f.v3.o.dtype = {kDLFloat, 16, 1};
    return f.v3.Forward();
  });
  add("attention_float32_cache_for_bfloat16_q", e, [](Fixture& f) {
    f.v3.q.dtype = f.v3.o.dtype = {kDLBfloat, 16, 1};  // k, v float32: not a 16-bit cache
    return f.v3.Forward();
  });
  // 0.9.0: a gpe_rope handle, the sliding window, the softcap and the sinks.
  add("attention_rope_handle_with_rope_dim", e, [](Fixture& f) {
    f.v3.att.rope = f.v3.rope;
    f.v3.att.rope_dim = 8;
    return f.v3.Forward();
  });
  add("attention_rope_handle_head_dim", e, [](Fixture& f) {
    return f.v3.ForwardWithRope([](gpe_rope_options& o) { o.head_dim = 4; });
  });
  add("attention_rope_handle_with_rope_axes", e, [](Fixture& f) {
    f.v3.att.rope = f.v3.rope;
    f.v3.att.rope_axes = 2;
    return f.v3.Forward();
  });
  add("attention_rope_handle_multi_axis_without_axes", e, [](Fixture& f) {
    return f.v3.ForwardWithRope([](gpe_rope_options& o) {
      o.axes = GPE_ROPE_AXES_AXIAL;
      o.num_axes = 2;
    });
  });
  add("attention_window_flag_2", e, [](Fixture& f) { f.v3.att.window = 2; return f.v3.Forward(); });
  add("attention_window_bounds_without_flag", e, [](Fixture& f) {
    f.v3.att.window_left = 3;  // window is still 0: refused, not ignored
    return f.v3.Forward();
  });
  add("attention_window_left_below_minus_1", e, [](Fixture& f) {
    f.v3.att.window = 1;
    f.v3.att.window_left = -2;
    return f.v3.Forward();
  });
  add("attention_window_right_below_minus_1", e, [](Fixture& f) {
    f.v3.att.window = 1;
    f.v3.att.window_right = std::numeric_limits<int64_t>::min();
    return f.v3.Forward();
  });
  add("attention_softcap_nan", e, [](Fixture& f) { f.v3.att.softcap = kNaN; return f.v3.Forward(); });
  add("attention_softcap_inf", e, [](Fixture& f) { f.v3.att.softcap = kInf; return f.v3.Forward(); });
  add("attention_softcap_negative", e, [](Fixture& f) { f.v3.att.softcap = -30.0; return f.v3.Forward(); });
  add("attention_bf16_arithmetic_unknown", e, [](Fixture& f) {
    f.v3.att.bf16_arithmetic = 4;
    return f.v3.Forward();
  });
  add("attention_float32_arithmetic_negative", e, [](Fixture& f) {
    f.v3.att.float32_arithmetic = -1;
    return f.v3.Forward();
  });
  add("attention_sinks_float64", e, [](Fixture& f) {
    f.v3.att.sinks = &f.v3.d_sinks_t;  // float64 [2]: sinks are float32
    return f.v3.Forward();
  });
  add("attention_sinks_wrong_count", e, [](Fixture& f) {
    f.v3.shapes.push_back({1});
    f.v3.sinks_t.shape = f.v3.shapes.back().data();  // 1 logit for 2 query heads
    f.v3.att.sinks = &f.v3.sinks_t;
    return f.v3.Forward();
  });
  add("attention_sinks_2d", e, [](Fixture& f) {
    f.v3.shapes.push_back({1, 2});
    f.v3.sinks_t.ndim = 2;
    f.v3.sinks_t.shape = f.v3.shapes.back().data();
    f.v3.att.sinks = &f.v3.sinks_t;
    return f.v3.Forward();
  });
  // attn_mask, kv_lengths and block_table (0.9.0); the mask is [1, 2, 4, 4] when valid.
  add("attention_heads_zero", e, [](Fixture& f) {
    // Empty q with no heads: refused before positions sized by its tokens are copied.
    f.v3.shapes.push_back({1, 4, 0, 8});
    f.v3.q.shape = f.v3.shapes.back().data();
    f.v3.o.shape = f.v3.q.shape;
    return f.v3.Forward();
  });
  add("attention_head_dim_huge", e, [](Fixture& f) {
    // Empty tensors may name any head size: bounded before anything is sized by it.
    f.v3.shapes.push_back({1, 0, 2, 70000});
    f.v3.q.shape = f.v3.o.shape = f.v3.shapes.back().data();
    f.v3.shapes.push_back({1, 0, 1, 70000});
    f.v3.k.shape = f.v3.v.shape = f.v3.shapes.back().data();
    return f.v3.Forward();
  });
  add("attention_mask_float64", e, [](Fixture& f) {
    std::vector<double> m(2 * 4 * 4, 0.0);
    DLTensor t = f.v3.Make(m.data(), kDLFloat, 64, {1, 2, 4, 4});
    f.v3.att.attn_mask = &t;  // additive masks are float32
    return f.v3.Forward();
  });
  add("attention_mask_3d", e, [](Fixture& f) {
    std::vector<uint8_t> m(2 * 4 * 4, 1);
    DLTensor t = f.v3.Make(m.data(), kDLUInt, 8, {2, 4, 4});
    f.v3.att.attn_mask = &t;
    return f.v3.Forward();
  });
  add("attention_mask_key_extent", e, [](Fixture& f) {
    std::vector<uint8_t> m(2 * 4 * 5, 1);
    DLTensor t = f.v3.Make(m.data(), kDLUInt, 8, {1, 2, 4, 5});  // 5 keys for seq_k 4
    f.v3.att.attn_mask = &t;
    return f.v3.Forward();
  });
  add("attention_mask_overlaps_o", e, [](Fixture& f) {
    // The kernels read the mask while they write o: an additive mask over o's memory.
    DLTensor t = f.v3.Make(f.v3.oa.data(), kDLFloat, 32, {1, 2, 4, 4});
    f.v3.att.attn_mask = &t;
    return f.v3.Forward();
  });
  add("attention_mask_negative_stride", e, [](Fixture& f) {
    std::vector<float> m(4 * 4, 0.0f);
    DLTensor t = f.v3.Make(m.data() + 12, kDLFloat, 32, {1, 1, 4, 4});
    f.v3.shapes.push_back({0, 0, -4, 1});  // queries in reverse row order
    t.strides = f.v3.shapes.back().data();
    f.v3.att.attn_mask = &t;
    return f.v3.Forward();
  });
  add("attention_kv_lengths_above_seq_k", e, [](Fixture& f) {
    std::vector<int64_t> l = {5};
    DLTensor t = f.v3.Make(l.data(), kDLInt, 64, {1});
    f.v3.att.kv_lengths = &t;
    return f.v3.Forward();
  });
  add("attention_kv_lengths_wrong_count", e, [](Fixture& f) {
    std::vector<int64_t> l = {4, 4};
    DLTensor t = f.v3.Make(l.data(), kDLInt, 64, {2});  // batch is 1
    f.v3.att.kv_lengths = &t;
    return f.v3.Forward();
  });
  add("attention_block_table_page_outside_pool", e, [](Fixture& f) {
    std::vector<int64_t> b = {3};  // k is one page of 4 tokens
    DLTensor t = f.v3.Make(b.data(), kDLInt, 64, {1, 1});
    f.v3.att.block_table = &t;
    return f.v3.Forward();
  });
  add("attention_block_table_wrong_batch", e, [](Fixture& f) {
    std::vector<int64_t> b = {0, 0};
    DLTensor t = f.v3.Make(b.data(), kDLInt, 64, {2, 1});
    f.v3.att.block_table = &t;
    return f.v3.Forward();
  });
  add("attention_block_table_float64", e, [](Fixture& f) {
    std::vector<double> b = {0.0};
    DLTensor t = f.v3.Make(b.data(), kDLFloat, 64, {1, 1});
    f.v3.att.block_table = &t;
    return f.v3.Forward();
  });
  e = "gpe_attention_backward";
  add("attention_backward_paged", e, [](Fixture& f) {
    std::vector<int64_t> b = {0};
    DLTensor t = f.v3.Make(b.data(), kDLInt, 64, {1, 1});
    f.v3.att.block_table = &t;  // valid for the forward
    return f.v3.Backward();
  });
  e = "gpe_attention_backward_with_parameters";
  add("attention_params_d_sinks_without_sinks", e, [](Fixture& f) {
    gpe_attention_param_grads g = GPE_ATTENTION_PARAM_GRADS_INIT;
    g.d_sinks = &f.v3.d_sinks_t;
    return f.v3.BackwardParams(g);
  });
  add("attention_params_d_sinks_float32", e, [](Fixture& f) {
    f.v3.att.sinks = &f.v3.sinks_t;
    gpe_attention_param_grads g = GPE_ATTENTION_PARAM_GRADS_INIT;
    g.d_sinks = &f.v3.sinks_t;  // float32: the gradient is float64
    return f.v3.BackwardParams(g);
  });
  add("attention_params_d_sinks_wrong_count", e, [](Fixture& f) {
    f.v3.att.sinks = &f.v3.sinks_t;
    f.v3.shapes.push_back({3});
    f.v3.d_sinks_t.shape = f.v3.shapes.back().data();
    f.v3.d_sinks.resize(3);
    f.v3.d_sinks_t.data = f.v3.d_sinks.data();
    gpe_attention_param_grads g = GPE_ATTENTION_PARAM_GRADS_INIT;
    g.d_sinks = &f.v3.d_sinks_t;
    return f.v3.BackwardParams(g);
  });
  add("attention_params_d_sinks_overlaps_dq", e, [](Fixture& f) {
    f.v3.att.sinks = &f.v3.sinks_t;
    f.v3.d_sinks_t.data = f.v3.dqa.data();  // 16 bytes inside dq
    gpe_attention_param_grads g = GPE_ATTENTION_PARAM_GRADS_INIT;
    g.d_sinks = &f.v3.d_sinks_t;
    return f.v3.BackwardParams(g);
  });
  // The algebraic generators' gradients (0.10.0): each needs its option and its shape.
  add("attention_params_d_algebraic_without_algebraic", e, [](Fixture& f) {
    gpe_attention_param_grads g = GPE_ATTENTION_PARAM_GRADS_INIT;
    g.d_algebraic = &f.v3.tile_t;
    return f.v3.BackwardParams(g);
  });
  add("attention_params_d_algebraic_tree_without_tree", e, [](Fixture& f) {
    gpe_attention_param_grads g = GPE_ATTENTION_PARAM_GRADS_INIT;
    g.d_algebraic_tree = &f.v3.tile_t;
    return f.v3.BackwardParams(g);
  });
  add("attention_params_d_algebraic_grid_without_grid", e, [](Fixture& f) {
    gpe_attention_param_grads g = GPE_ATTENTION_PARAM_GRADS_INIT;
    g.d_algebraic_grid = &f.v3.tile_t;
    return f.v3.BackwardParams(g);
  });
  add("attention_params_d_algebraic_wrong_shape", e, [](Fixture& f) {
    std::vector<double> zero(f.v3.kD * f.v3.kD, 0.0);
    gpe_algebraic_sequence_options so = GPE_ALGEBRAIC_SEQUENCE_OPTIONS_INIT;
    so.dim = f.v3.kD;
    so.skew = zero.data();
    gpe_algebraic_sequence* seq = nullptr;
    EXPECT_EQ(gpe_algebraic_sequence_create(&so, &seq), GPE_OK) << gpe_last_error_message();
    f.v3.att.algebraic = seq;
    gpe_attention_param_grads g = GPE_ATTENTION_PARAM_GRADS_INIT;
    g.d_algebraic = &f.v3.tile_t;  // [2, 3]; the generator is [8, 8]
    const gpe_status st = f.v3.BackwardParams(g);
    gpe_algebraic_sequence_destroy(seq);
    return st;
  });
  add("attention_params_d_algebraic_without_dk", e, [](Fixture& f) {
    std::vector<double> zero(f.v3.kD * f.v3.kD, 0.0), grad(zero.size());
    gpe_algebraic_sequence_options so = GPE_ALGEBRAIC_SEQUENCE_OPTIONS_INIT;
    so.dim = f.v3.kD;
    so.skew = zero.data();
    gpe_algebraic_sequence* seq = nullptr;
    EXPECT_EQ(gpe_algebraic_sequence_create(&so, &seq), GPE_OK) << gpe_last_error_message();
    f.v3.att.algebraic = seq;
    DLTensor t = f.v3.Make(grad.data(), kDLFloat, 64, {f.v3.kD, f.v3.kD});
    gpe_attention_param_grads g = GPE_ATTENTION_PARAM_GRADS_INIT;
    g.d_algebraic = &t;
    const gpe_status st = f.v3.BackwardParams(g);  // dq only
    gpe_algebraic_sequence_destroy(seq);
    return st;
  });
  add("attention_params_d_algebraic_tree_wrong_shape", e, [](Fixture& f) {
    std::vector<double> skews(2 * f.v3.kD * f.v3.kD, 0.0);
    std::vector<int64_t> off = {0, 0, 0, 0, 1}, ch = {1};
    DLTensor ts = f.v3.Make(skews.data(), kDLFloat, 64, {2, f.v3.kD, f.v3.kD}),
             to = f.v3.Make(off.data(), kDLInt, 64, {5}), tc = f.v3.Make(ch.data(), kDLInt, 64, {1});
    f.v3.att.algebraic_tree = &ts;
    f.v3.att.q_tree_offsets = f.v3.att.k_tree_offsets = &to;
    f.v3.att.q_tree_children = f.v3.att.k_tree_children = &tc;
    gpe_attention_param_grads g = GPE_ATTENTION_PARAM_GRADS_INIT;
    g.d_algebraic_tree = &f.v3.tile_t;  // 2-D; the generators are [2, 8, 8]
    return f.v3.BackwardParams(g);
  });
  add("attention_params_d_algebraic_grid_wrong_shape", e, [](Fixture& f) {
    std::vector<double> skews(2 * 4 * 4, 0.0), grad(2 * 4 * 3);
    std::vector<int64_t> coords(2 * f.v3.kS, 1);
    DLTensor ts = f.v3.Make(skews.data(), kDLFloat, 64, {2, 4, 4}),
             tc = f.v3.Make(coords.data(), kDLInt, 64, {f.v3.kS, 2}),
             tg = f.v3.Make(grad.data(), kDLFloat, 64, {2, 4, 3});
    f.v3.att.algebraic_grid = &ts;
    f.v3.att.q_axes = f.v3.att.k_axes = &tc;
    gpe_attention_param_grads g = GPE_ATTENTION_PARAM_GRADS_INIT;
    g.d_algebraic_grid = &tg;
    return f.v3.BackwardParams(g);
  });
  add("attention_params_struct_size_small", e, [](Fixture& f) {
    gpe_attention_param_grads g = GPE_ATTENTION_PARAM_GRADS_INIT;
    g.struct_size = 8;
    return f.v3.BackwardParams(g);
  });
  add("attention_params_struct_size_torn", e, [](Fixture& f) {
    gpe_attention_param_grads g = GPE_ATTENTION_PARAM_GRADS_INIT;
    g.struct_size = offsetof(gpe_attention_param_grads, d_sinks) + 4;  // half of d_sinks
    g.d_sinks = &f.v3.o;
    return f.v3.BackwardParams(g);
  });
  add("attention_params_struct_size_newer", e, [](Fixture& f) {
    gpe_attention_param_grads g = GPE_ATTENTION_PARAM_GRADS_INIT;
    g.struct_size += 8;
    return f.v3.BackwardParams(g);
  });
  e = "gpe_attention_backward";
  add("attention_backward_kv_cache", e, [](Fixture& f) {
    f.v3.k.dtype = f.v3.v.dtype = {kDLBfloat, 16, 1};  // a cache: forward only
    return gpe_attention_backward(&f.v3.att, &f.v3.q, &f.v3.k, &f.v3.v, nullptr, nullptr,
                                  &f.v3.o, &f.v3.dq, nullptr, nullptr);
  });
  add("attention_backward_o_without_lse", e, [](Fixture& f) {
    return gpe_attention_backward(&f.v3.att, &f.v3.q, &f.v3.k, &f.v3.v, &f.v3.o, nullptr,
                                  &f.v3.o, &f.v3.dq, nullptr, nullptr);
  });
  e = "gpe_attention_backward_with_parameters";
  add("attention_params_without_bias", e, [](Fixture& f) {
    gpe_attention_param_grads g = GPE_ATTENTION_PARAM_GRADS_INIT;
    g.d_bias_a = &f.v3.tile_t;
    return gpe_attention_backward_with_parameters(&f.v3.att, &f.v3.q, &f.v3.k, &f.v3.v, nullptr,
                                                  nullptr, &f.v3.o, nullptr, nullptr, nullptr, &g);
  });
  add("attention_params_wrong_shape", e, [](Fixture& f) {
    f.v3.att.bias = f.v3.alibi;  // ALiBi's gradient is [num_heads] = [2], the tile is [2, 3]
    gpe_attention_param_grads g = GPE_ATTENTION_PARAM_GRADS_INIT;
    g.d_bias_a = &f.v3.tile_t;
    return gpe_attention_backward_with_parameters(&f.v3.att, &f.v3.q, &f.v3.k, &f.v3.v, nullptr,
                                                  nullptr, &f.v3.o, nullptr, nullptr, nullptr, &g);
  });
  add("attention_params_null", e, [](Fixture& f) {
    return gpe_attention_backward_with_parameters(&f.v3.att, &f.v3.q, &f.v3.k, &f.v3.v, nullptr,
                                                  nullptr, &f.v3.o, nullptr, nullptr, nullptr,
                                                  nullptr);
  });
  add("attention_params_grape_overlaps_q", e, [](Fixture& f) {
    // d_grape_omega 8 bytes into q's memory (not at its start): refused before anything
    // is written (it was accepted and written into q).
    f.v3.att.grape_m = f.grape;
    std::vector<float> dk(4 * 1 * 8);
    DLTensor tdk = f.v3.Make(dk.data(), kDLFloat, 32, {1, 4, 1, 8});
    DLTensor omega = f.v3.Make(f.v3.qa.data() + 2, kDLFloat, 64, {1});
    gpe_attention_param_grads g = GPE_ATTENTION_PARAM_GRADS_INIT;
    g.d_grape_omega = &omega;
    return gpe_attention_backward_with_parameters(&f.v3.att, &f.v3.q, &f.v3.k, &f.v3.v, nullptr,
                                                  nullptr, &f.v3.o, &f.v3.dq, &tdk, nullptr, &g);
  });
  add("attention_params_grape_without_grape_m", e, [](Fixture& f) {
    gpe_attention_param_grads g = GPE_ATTENTION_PARAM_GRADS_INIT;
    g.d_grape_omega = &f.v3.tile_t;
    return gpe_attention_backward_with_parameters(&f.v3.att, &f.v3.q, &f.v3.k, &f.v3.v, nullptr,
                                                  nullptr, &f.v3.o, &f.v3.dq, nullptr, nullptr, &g);
  });
  e = "gpe_attention_backward";
  add("attention_backward_dq_overlaps_q", e, [](Fixture& f) {
    return gpe_attention_backward(&f.v3.att, &f.v3.q, &f.v3.k, &f.v3.v, nullptr, nullptr,
                                  &f.v3.o, &f.v3.q, nullptr, nullptr);
  });
  add("attention_backward_dq_overlaps_lse", e, [](Fixture& f) {
    // The forward's lse, read while dq is written, inside dq's memory.
    DLTensor lse = f.v3.Make(f.v3.dqa.data(), kDLFloat, 32, {4, 2});
    return gpe_attention_backward(&f.v3.att, &f.v3.q, &f.v3.k, &f.v3.v, &f.v3.o, &lse, &f.v3.o,
                                  &f.v3.dq, nullptr, nullptr);
  });
}

// -- Sequence encodings: GRAPE-A, algebraic trees/grids/periodic/locality, Shaw values,
// Transformer-XL. Self-contained: each case builds its own small valid call.
using AddCase = std::function<void(const char*, const char*, Run)>;
struct SeqCall {
  std::vector<double> x = std::vector<double>(8, 0.5), lifted = std::vector<double>(12, 0.0),
                      skews = std::vector<double>(8, 0.0), table = std::vector<double>(6, 1.0),
                      p = std::vector<double>(6, 0.1), out = std::vector<double>(6, 0.0),
                      u = std::vector<double>(2, 0.0);
  std::vector<int64_t> pos = {0, 1}, kpos = {0, 1, 2}, addr = {0, -1, 1, 1}, dims = {2, 2},
                       mult = {1};
  gpe_grape_a_options ga = GPE_GRAPE_A_OPTIONS_INIT;
  gpe_algebraic_tree_options tree = GPE_ALGEBRAIC_TREE_OPTIONS_INIT;
  gpe_algebraic_grid_options grid = GPE_ALGEBRAIC_GRID_OPTIONS_INIT;
  gpe_algebraic_periodic_options periodic = GPE_ALGEBRAIC_PERIODIC_OPTIONS_INIT;
  gpe_transformer_xl_options txl = GPE_TRANSFORMER_XL_OPTIONS_INIT;
  SeqCall() {
    ga.num_heads = 2;
    ga.head_dim = 4;
    skews[1] = 0.3;
    skews[2] = -0.3;  // two 2 x 2 skew matrices (the second zero)
    tree.dim = 2;
    tree.num_branches = 2;
    tree.skews = skews.data();
    grid.dims = dims.data();
    grid.skews = skews.data();
    periodic.dim = 2;
    periodic.period = 4;
    periodic.multipliers = mult.data();
  }
};
gpe_status GrapeA(SeqCall& s) {
  gpe_bias* b = nullptr;
  const gpe_status st = gpe_bias_create_grape_a(&s.ga, &b);
  gpe_bias_destroy(b);
  return st;
}
// Runs `call` on a fresh GRAPE-A bias (or ALiBi when alibi is set).
gpe_status WithBias(bool alibi, const std::function<gpe_status(gpe_bias*)>& call) {
  SeqCall s;
  gpe_bias* b = nullptr;
  gpe_alibi_options ao = GPE_ALIBI_OPTIONS_INIT;
  ao.num_heads = 2;
  if ((alibi ? gpe_bias_create_alibi(&ao, &b) : gpe_bias_create_grape_a(&s.ga, &b)) != GPE_OK) {
    return -1;
  }
  const gpe_status st = call(b);
  gpe_bias_destroy(b);
  return st;
}
gpe_status TreeCall(SeqCall& s, const std::function<gpe_status(gpe_algebraic_tree*)>& call) {
  gpe_algebraic_tree* t = nullptr;
  if (const gpe_status st = gpe_algebraic_tree_create(&s.tree, &t); st != GPE_OK) return st;
  const gpe_status st = call(t);
  gpe_algebraic_tree_destroy(t);
  return st;
}

void SequenceCases(const AddCase& add) {
  const char* e = "gpe_bias_create_grape_a";
  add("grape_a_options_null", e, [](Fixture&) {
    gpe_bias* b = nullptr;
    return gpe_bias_create_grape_a(nullptr, &b);
  });
  add("grape_a_head_dim_0", e, [](Fixture&) { SeqCall s; s.ga.head_dim = 0; return GrapeA(s); });
  add("grape_a_path_unknown", e, [](Fixture&) { SeqCall s; s.ga.path = 5; return GrapeA(s); });
  add("grape_a_slopes_nan", e, [](Fixture&) {
    SeqCall s;
    const double slopes[2] = {0.5, kNaN};
    s.ga.slopes = slopes;
    return GrapeA(s);
  });
  add("grape_a_gated_with_slopes", e, [](Fixture&) {
    SeqCall s;
    const double slopes[2] = {0.5, 0.25};
    s.ga.slopes = slopes;
    s.ga.gated = 1;
    return GrapeA(s);
  });
  e = "gpe_bias_grape_a_lift";
  add("grape_a_lift_bias_null", e, [](Fixture& f) {
    return gpe_bias_grape_a_lift(nullptr, 0, GPE_GRAPE_A_QUERY, &f.qpos, &f.q, &f.q);
  });
  add("grape_a_lift_not_grape_a", e, [](Fixture& f) {
    return WithBias(true, [&](gpe_bias* b) {
      return gpe_bias_grape_a_lift(b, 0, GPE_GRAPE_A_QUERY, &f.qpos, &f.q, &f.gq);
    });
  });
  add("grape_a_lift_role_unknown", e, [](Fixture& f) {
    return WithBias(false, [&](gpe_bias* b) { return gpe_bias_grape_a_lift(b, 0, 3, &f.qpos, &f.q, &f.gq); });
  });
  add("grape_a_lift_out_wrong_width", e, [](Fixture& f) {
    SeqCall s;
    DLTensor x = f.F64(&s.x, {2, 4}), out = f.F64(&s.out, {2, 3});
    return WithBias(false, [&](gpe_bias* b) {
      return gpe_bias_grape_a_lift(b, 0, GPE_GRAPE_A_KEY, &f.qpos, &x, &out);
    });
  });
  e = "gpe_algebraic_tree_create";
  add("tree_skews_null", e, [](Fixture&) {
    SeqCall s;
    s.tree.skews = nullptr;
    return TreeCall(s, [](gpe_algebraic_tree*) { return GPE_OK; });
  });
  add("tree_not_skew", e, [](Fixture&) {
    SeqCall s;
    s.skews[2] = 0.3;
    return TreeCall(s, [](gpe_algebraic_tree*) { return GPE_OK; });
  });
  add("tree_branches_0", e, [](Fixture&) {
    SeqCall s;
    s.tree.num_branches = 0;
    return TreeCall(s, [](gpe_algebraic_tree*) { return GPE_OK; });
  });
  e = "gpe_algebraic_tree_apply";
  add("tree_address_out_of_range", e, [](Fixture& f) {
    SeqCall s;
    s.addr = {0, 2, 1, -1};
    DLTensor a = f.Make(s.addr.data(), kDLInt, 64, {2, 2}), x = f.F64(&s.x, {2, 2});
    return TreeCall(s, [&](gpe_algebraic_tree* t) { return gpe_algebraic_tree_apply(t, &a, &x, &x); });
  });
  add("tree_index_after_padding", e, [](Fixture& f) {
    SeqCall s;
    s.addr = {-1, 0, 1, 1};
    DLTensor a = f.Make(s.addr.data(), kDLInt, 64, {2, 2}), x = f.F64(&s.x, {2, 2});
    return TreeCall(s, [&](gpe_algebraic_tree* t) { return gpe_algebraic_tree_apply(t, &a, &x, &x); });
  });
  e = "gpe_algebraic_tree_node_matrices";
  add("tree_node_matrices_wrong_count", e, [](Fixture& f) {
    SeqCall s;
    DLTensor out = f.F64(&s.lifted, {2, 2, 2});  // depth 1 of a binary tree has 3 nodes
    return TreeCall(s, [&](gpe_algebraic_tree* t) { return gpe_algebraic_tree_node_matrices(t, 1, &out); });
  });
  e = "gpe_algebraic_tree_backward";
  add("tree_grad_skews_wrong_shape", e, [](Fixture& f) {
    SeqCall s;
    DLTensor a = f.Make(s.addr.data(), kDLInt, 64, {2, 2}), x = f.F64(&s.x, {2, 2}),
             g = f.F64(&s.lifted, {1, 2, 2});
    return TreeCall(s, [&](gpe_algebraic_tree* t) {
      return gpe_algebraic_tree_backward(t, &a, &x, &x, nullptr, &g);
    });
  });
  e = "gpe_algebraic_grid_create";
  add("grid_axes_9", e, [](Fixture&) {
    SeqCall s;
    s.grid.num_axes = 9;
    gpe_algebraic_grid* g = nullptr;
    return gpe_algebraic_grid_create(&s.grid, &g);
  });
  e = "gpe_algebraic_grid_apply";
  add("grid_positions_wrong_axes", e, [](Fixture& f) {
    SeqCall s;
    gpe_algebraic_grid* g = nullptr;
    if (gpe_algebraic_grid_create(&s.grid, &g) != GPE_OK) return -1;
    DLTensor p = f.Make(s.kpos.data(), kDLInt, 64, {1, 3}), x = f.F64(&s.x, {1, 4});
    const gpe_status st = gpe_algebraic_grid_apply(g, &p, &x, &x);
    gpe_algebraic_grid_destroy(g);
    return st;
  });
  e = "gpe_algebraic_periodic_apply";
  add("periodic_period_0", e, [](Fixture& f) {
    SeqCall s;
    s.periodic.period = 0;
    DLTensor p = f.Make(s.pos.data(), kDLInt, 64, {2}), x = f.F64(&s.x, {2, 2});
    return gpe_algebraic_periodic_apply(&s.periodic, &p, &x, &x);
  });
  add("periodic_dim_odd", e, [](Fixture& f) {
    SeqCall s;
    s.periodic.dim = 3;
    DLTensor p = f.Make(s.pos.data(), kDLInt, 64, {2}), x = f.F64(&s.x, {2, 3});
    return gpe_algebraic_periodic_apply(&s.periodic, &p, &x, &x);
  });
  e = "gpe_locality_scale";
  add("locality_c_above_1", e, [](Fixture& f) { return gpe_locality_scale(1.5, &f.qpos, &f.kpos, &f.scores); });
  add("locality_scores_wrong_shape", e, [](Fixture& f) {
    return gpe_locality_scale(0.98, &f.kpos, &f.qpos, &f.scores);
  });
  e = "gpe_shaw_value_output";
  add("shaw_value_table_even_rows", e, [](Fixture& f) {
    SeqCall s;
    DLTensor p = f.F64(&s.p, {2, 3}), t = f.F64(&s.table, {2, 3}), o = f.F64(&s.out, {2, 3});
    return gpe_shaw_value_output(&p, &t, &f.qpos, &f.kpos, &o);
  });
  add("shaw_value_out_wrong_shape", e, [](Fixture& f) {
    SeqCall s;
    DLTensor p = f.F64(&s.p, {2, 3}), t = f.F64(&s.table, {3, 2}), o = f.F64(&s.out, {3, 2});
    return gpe_shaw_value_output(&p, &t, &f.qpos, &f.kpos, &o);
  });
  e = "gpe_shaw_value_output_backward";
  add("shaw_value_backward_grad_out_wrong_shape", e, [](Fixture& f) {
    SeqCall s;
    DLTensor p = f.F64(&s.p, {2, 3}), t = f.F64(&s.table, {3, 2}), g = f.F64(&s.out, {3, 2});
    return gpe_shaw_value_output_backward(&p, &t, &f.qpos, &f.kpos, &g, nullptr, nullptr);
  });
  e = "gpe_rope_options_use_schedule";
  add("rope_use_schedule_unknown", e, [](Fixture&) {
    gpe_rope_options o = GPE_ROPE_OPTIONS_INIT;
    return gpe_rope_options_use_schedule(9, &o);
  });
  e = "gpe_transformer_xl_score_terms";
  add("txl_base_negative", e, [](Fixture& f) {
    SeqCall s;
    s.txl.base = -1.0;
    DLTensor q = f.F64(&s.x, {2, 2}), k = f.F64(&s.p, {3, 2}), w = f.F64(&s.lifted, {2, 2}),
             u = f.F64(&s.u, {2}), o = f.F64(&s.out, {2, 3});
    return gpe_transformer_xl_score_terms(&s.txl, &q, &k, &f.qpos, &f.kpos, &w, &u, &u, &o);
  });
  add("txl_u_wrong_length", e, [](Fixture& f) {
    SeqCall s;
    DLTensor q = f.F64(&s.x, {2, 2}), k = f.F64(&s.p, {3, 2}), w = f.F64(&s.lifted, {2, 2}),
             u = f.F64(&s.u, {1}), o = f.F64(&s.out, {2, 3});
    return gpe_transformer_xl_score_terms(&s.txl, &q, &k, &f.qpos, &f.kpos, &w, &u, &u, &o);
  });
  e = "gpe_transformer_xl_score_terms_backward";
  add("txl_backward_grad_terms_wrong_shape", e, [](Fixture& f) {
    SeqCall s;
    DLTensor q = f.F64(&s.x, {2, 2}), k = f.F64(&s.p, {3, 2}), w = f.F64(&s.lifted, {2, 2}),
             u = f.F64(&s.u, {2}), g = f.F64(&s.out, {3, 2});
    return gpe_transformer_xl_score_terms_backward(&s.txl, &q, &k, &f.qpos, &f.kpos, &w, &u, &u,
                                                   &g, nullptr, nullptr, nullptr, nullptr, nullptr);
  });
}

// -- INR training, data, metrics and image files (0.5.0). Self-contained: each case builds
// its own small valid call in an InrCall and corrupts one thing.
struct InrCall {
  std::deque<std::vector<int64_t>> shapes;
  DLTensor Make(void* data, DLDataTypeCode code, int bits, std::vector<int64_t> shape) {
    shapes.push_back(std::move(shape));
    DLTensor t;
    std::memset(&t, 0, sizeof t);
    t.data = data;
    t.device.device_type = kDLCPU;
    t.ndim = static_cast<int32_t>(shapes.back().size());
    t.dtype.code = static_cast<uint8_t>(code);
    t.dtype.bits = static_cast<uint8_t>(bits);
    t.dtype.lanes = 1;
    t.shape = shapes.back().data();
    return t;
  }
  DLTensor F64(std::vector<double>* v, std::vector<int64_t> shape) {
    return Make(v->data(), kDLFloat, 64, std::move(shape));
  }
  // MLP 2 -> 4 -> 1 (17 parameters) on 6 points, 2 steps.
  std::vector<double> x = {0.1, 0.2, 0.3, -0.4, 0.5, 0.6, -0.7, 0.8, 0.9, 0.0, -0.2, 0.4},
                      y = {1, 2, 3, 4, 5, 6}, params = std::vector<double>(17, 0.1),
                      loss = std::vector<double>(3, 0.0), pred = std::vector<double>(6, 0.0);
  std::vector<float> x32 = std::vector<float>(12, 0.5f);
  gpe_mlp_options mlp = GPE_MLP_OPTIONS_INIT;
  DLTensor tx, ty, tp, tl, tpred;
  // The MLP's validation set: 4 held-out points, one evaluation (3 steps, report_every 0).
  std::vector<double> vx = {0.3, -0.1, 0.2, 0.7, -0.5, 0.1, 0.0, 0.9}, vy = {2, 3, 1, 4},
                      vloss = std::vector<double>(1, 0.0);
  std::vector<int64_t> vsteps = std::vector<int64_t>(1, 0);
  gpe_mlp_validation val = GPE_MLP_VALIDATION_INIT;
  DLTensor tvx, tvy, tvs, tvl;
  // Linear Adam: Phi [6, 2] (x), Y [6, 1] (y), W [2, 1]; Psi_y [4, 2], Psi_x [3, 2],
  // image [4, 3], W [2, 2]; 3 steps.
  std::vector<double> w = std::vector<double>(4, 0.0), psi_y = {1, 0, 0, 1, 1, 1, 0.5, 0.2},
                      psi_x = {1, 0, 0, 1, 1, 1}, image = std::vector<double>(12, 0.5);
  gpe_linear_adam_options adam = GPE_LINEAR_ADAM_OPTIONS_INIT;
  DLTensor tw, tpy, tpx, timg, tw2;
  // Data: a 5 x 5 grid.
  std::vector<double> img = std::vector<double>(25, 0.0), field = std::vector<double>(50, 0.0),
                      grid = std::vector<double>(50, 0.0);
  std::vector<int64_t> idx = std::vector<int64_t>(25, 0);
  int64_t counts[3] = {0, 0, 0};
  int64_t count = 0;
  double value = 0.0;
  DLTensor timg5, tfield, tgrid, tidx;
  // Images: pixels [3, 4] in [0, 1]; paths in the test's temporary directory.
  std::vector<double> pixels = std::vector<double>(12, 0.25);
  DLTensor tpix;
  std::string dir;
  gpe_image* image_handle = nullptr;

  InrCall() {
    mlp.hidden_width = 4;
    mlp.num_hidden_layers = 1;
    mlp.steps = 3;
    adam.steps = 3;
    tx = F64(&x, {6, 2});
    ty = F64(&y, {6, 1});
    tp = F64(&params, {17});
    tl = F64(&loss, {3});
    tpred = F64(&pred, {6, 1});
    tvx = F64(&vx, {4, 2});
    tvy = F64(&vy, {4, 1});
    tvs = Make(vsteps.data(), kDLInt, 64, {1});
    tvl = F64(&vloss, {1});
    val.features = &tvx;
    val.targets = &tvy;
    val.steps = &tvs;
    val.loss = &tvl;
    tw = F64(&w, {2, 1});
    tpy = F64(&psi_y, {4, 2});
    tpx = F64(&psi_x, {3, 2});
    timg = F64(&image, {4, 3});
    tw2 = F64(&w, {2, 2});
    timg5 = F64(&img, {5, 5});
    tfield = F64(&field, {5, 5, 2});
    tgrid = F64(&grid, {25, 2});
    tidx = Make(idx.data(), kDLInt, 64, {25});
    tpix = F64(&pixels, {3, 4});
    const char* tmp = std::getenv("TEST_TMPDIR");
    dir = tmp != nullptr ? tmp : "/tmp";
  }
  ~InrCall() { gpe_image_destroy(image_handle); }
  gpe_status MlpFit() { return gpe_inr_mlp_fit(&mlp, &tx, &ty, nullptr, &tp, &tl, nullptr); }
  gpe_status MlpFitV2() {
    return gpe_inr_mlp_fit_v2(&mlp, &tx, &ty, nullptr, &tp, &tl, nullptr, &val);
  }
  gpe_status MlpPredict() { return gpe_inr_mlp_predict(&mlp, &tp, &tx, &tpred); }
  gpe_status Dense() { return gpe_inr_fit_dense_adam(&adam, &tx, &ty, &tw, &tl, nullptr); }
  gpe_status Separable() {
    return gpe_inr_fit_separable_adam_2d(&adam, &tpy, &tpx, &timg, &tw2, &tl, nullptr);
  }
  gpe_status Mse(const DLTensor& a, const DLTensor& b) { return gpe_inr_mse(&a, &b, &value); }
  // Writes `bytes` to a file named `name` in the temporary directory; returns its path.
  std::string File(const char* name, const std::string& bytes) {
    const std::string path = dir + "/" + name;
    std::ofstream(path, std::ios::binary) << bytes;
    return path;
  }
  gpe_status Read(const std::string& path) { return gpe_image_read(path.c_str(), 0, &image_handle); }
  gpe_status WritePng() { return gpe_image_write_png((dir + "/bad_inputs.png").c_str(), &tpix, 0.0, 1.0); }
};

void InrSolverCases(const AddCase& add) {
  const char* e = "gpe_inr_mlp_num_parameters";
  add("mlp_count_out_null", e, [](Fixture&) {
    InrCall s;
    return gpe_inr_mlp_num_parameters(&s.mlp, 2, 1, nullptr);
  });
  add("mlp_count_options_null", e, [](Fixture&) {
    InrCall s;
    return gpe_inr_mlp_num_parameters(nullptr, 2, 1, &s.count);
  });
  add("mlp_count_struct_size_newer", e, [](Fixture&) {
    InrCall s;
    s.mlp.struct_size += 8;
    return gpe_inr_mlp_num_parameters(&s.mlp, 2, 1, &s.count);
  });
  add("mlp_count_width_0", e, [](Fixture&) {
    InrCall s;
    s.mlp.hidden_width = 0;
    return gpe_inr_mlp_num_parameters(&s.mlp, 2, 1, &s.count);
  });
  add("mlp_count_layers_negative", e, [](Fixture&) {
    InrCall s;
    s.mlp.num_hidden_layers = -1;
    return gpe_inr_mlp_num_parameters(&s.mlp, 2, 1, &s.count);
  });
  add("mlp_count_too_many_parameters", e, [](Fixture&) {
    InrCall s;
    s.mlp.hidden_width = int64_t{1} << 24;
    s.mlp.num_hidden_layers = 2;
    return gpe_inr_mlp_num_parameters(&s.mlp, 2, 1, &s.count);
  });
  e = "gpe_inr_mlp_init";
  add("mlp_init_wrong_length", e, [](Fixture&) {
    InrCall s;
    DLTensor p = s.F64(&s.params, {16});
    return gpe_inr_mlp_init(&s.mlp, 2, 1, &p);
  });
  add("mlp_init_int64", e, [](Fixture&) {
    InrCall s;
    std::vector<int64_t> p(17);
    DLTensor t = s.Make(p.data(), kDLInt, 64, {17});
    return gpe_inr_mlp_init(&s.mlp, 2, 1, &t);
  });
  add("mlp_init_output_dim_0", e, [](Fixture&) {
    InrCall s;
    return gpe_inr_mlp_init(&s.mlp, 2, 0, &s.tp);
  });
  e = "gpe_inr_mlp_fit";
  add("mlp_fit_options_null", e, [](Fixture&) {
    InrCall s;
    return gpe_inr_mlp_fit(nullptr, &s.tx, &s.ty, nullptr, &s.tp, nullptr, nullptr);
  });
  add("mlp_fit_features_nan", e, [](Fixture&) { InrCall s; s.x[3] = kNaN; return s.MlpFit(); });
  add("mlp_fit_targets_inf", e, [](Fixture&) { InrCall s; s.y[0] = kInf; return s.MlpFit(); });
  add("mlp_fit_features_empty", e, [](Fixture&) {
    InrCall s;
    s.tx = s.F64(&s.x, {0, 2});
    s.ty = s.F64(&s.y, {0, 1});
    return s.MlpFit();
  });
  add("mlp_fit_rows_mismatch", e, [](Fixture&) { InrCall s; s.ty = s.F64(&s.y, {5, 1}); return s.MlpFit(); });
  add("mlp_fit_dtype_mismatch", e, [](Fixture&) {
    InrCall s;
    s.ty = s.Make(s.x32.data(), kDLFloat, 32, {6, 1});
    return s.MlpFit();
  });
  add("mlp_fit_parameters_wrong_length", e, [](Fixture&) {
    InrCall s;
    s.tp = s.F64(&s.params, {16});
    return s.MlpFit();
  });
  add("mlp_fit_parameters_overlap_targets", e, [](Fixture&) {
    InrCall s;
    s.params.assign(17 + 6, 0.1);
    s.tp = s.F64(&s.params, {17});
    s.ty = s.Make(s.params.data() + 17 - 1, kDLFloat, 64, {6, 1});
    return s.MlpFit();
  });
  add("mlp_fit_initial_nan", e, [](Fixture&) {
    InrCall s;
    std::vector<double> init(17, 0.1);
    init[5] = kNaN;
    DLTensor ti = s.F64(&init, {17});
    return gpe_inr_mlp_fit(&s.mlp, &s.tx, &s.ty, &ti, &s.tp, nullptr, nullptr);
  });
  add("mlp_fit_learning_rate_nan", e, [](Fixture&) { InrCall s; s.mlp.learning_rate = kNaN; return s.MlpFit(); });
  add("mlp_fit_beta2_1", e, [](Fixture&) { InrCall s; s.mlp.beta2 = 1.0; return s.MlpFit(); });
  add("mlp_fit_steps_negative", e, [](Fixture&) { InrCall s; s.mlp.steps = -1; return s.MlpFit(); });
  add("mlp_fit_report_every_negative", e, [](Fixture&) { InrCall s; s.mlp.report_every = -1; return s.MlpFit(); });
  add("mlp_fit_history_wrong_length", e, [](Fixture&) { InrCall s; s.tl = s.F64(&s.loss, {2}); return s.MlpFit(); });
  add("mlp_fit_diverges", e, [](Fixture&) {
    InrCall s;
    for (double& v : s.y) v = 1e200;  // squared errors overflow double
    return s.MlpFit();
  });
  add("mlp_fit_diverges_last_step", e, [](Fixture&) {
    InrCall s;  // one step of 1e300: the loss before it is finite, the one after is not
    s.mlp.steps = 1;
    s.mlp.learning_rate = 1e300;
    s.tl = s.F64(&s.loss, {1});
    return s.MlpFit();
  });
  e = "gpe_inr_mlp_num_evaluations";
  add("mlp_evals_out_null", e, [](Fixture&) {
    InrCall s;
    return gpe_inr_mlp_num_evaluations(&s.mlp, nullptr);
  });
  add("mlp_evals_options_null", e, [](Fixture&) {
    InrCall s;
    return gpe_inr_mlp_num_evaluations(nullptr, &s.count);
  });
  add("mlp_evals_struct_size_newer", e, [](Fixture&) {
    InrCall s;
    s.mlp.struct_size += 8;
    return gpe_inr_mlp_num_evaluations(&s.mlp, &s.count);
  });
  add("mlp_evals_steps_negative", e, [](Fixture&) {
    InrCall s;
    s.mlp.steps = -1;
    return gpe_inr_mlp_num_evaluations(&s.mlp, &s.count);
  });
  add("mlp_evals_report_every_negative", e, [](Fixture&) {
    InrCall s;
    s.mlp.report_every = -2;
    return gpe_inr_mlp_num_evaluations(&s.mlp, &s.count);
  });
  e = "gpe_inr_mlp_fit_v2";
  add("mlp_fit_v2_features_nan", e, [](Fixture&) { InrCall s; s.x[0] = kNaN; return s.MlpFitV2(); });
  add("mlp_fit_v2_validation_struct_size_small", e, [](Fixture&) {
    InrCall s;
    s.val.struct_size = 4;
    return s.MlpFitV2();
  });
  add("mlp_fit_v2_validation_struct_size_newer", e, [](Fixture&) {
    InrCall s;
    s.val.struct_size += 8;
    return s.MlpFitV2();
  });
  add("mlp_fit_v2_validation_targets_only", e, [](Fixture&) {
    InrCall s;
    s.val.features = nullptr;
    return s.MlpFitV2();
  });
  add("mlp_fit_v2_validation_features_only", e, [](Fixture&) {
    InrCall s;
    s.val.targets = nullptr;
    s.val.steps = s.val.loss = nullptr;
    return s.MlpFitV2();
  });
  add("mlp_fit_v2_validation_outputs_without_set", e, [](Fixture&) {
    InrCall s;
    s.val.features = s.val.targets = nullptr;
    return s.MlpFitV2();
  });
  add("mlp_fit_v2_validation_progress_without_set", e, [](Fixture&) {
    InrCall s;
    s.val.features = s.val.targets = nullptr;
    s.val.steps = s.val.loss = nullptr;
    s.val.progress = [](void*, int64_t, double, double) {};
    return s.MlpFitV2();
  });
  add("mlp_fit_v2_validation_empty", e, [](Fixture&) {
    InrCall s;
    s.tvx = s.F64(&s.vx, {0, 2});
    s.tvy = s.F64(&s.vy, {0, 1});
    return s.MlpFitV2();
  });
  add("mlp_fit_v2_validation_rows_mismatch", e, [](Fixture&) {
    InrCall s;
    s.tvy = s.F64(&s.vy, {3, 1});
    return s.MlpFitV2();
  });
  add("mlp_fit_v2_validation_features_width", e, [](Fixture&) {
    InrCall s;
    s.tvx = s.F64(&s.vx, {2, 4});
    s.tvy = s.F64(&s.vy, {2, 1});
    return s.MlpFitV2();
  });
  add("mlp_fit_v2_validation_targets_width", e, [](Fixture&) {
    InrCall s;
    s.tvy = s.F64(&s.vx, {4, 2});
    return s.MlpFitV2();
  });
  add("mlp_fit_v2_validation_dtype_mismatch", e, [](Fixture&) {
    InrCall s;
    s.tvx = s.Make(s.x32.data(), kDLFloat, 32, {4, 2});
    return s.MlpFitV2();
  });
  add("mlp_fit_v2_validation_features_nan", e, [](Fixture&) {
    InrCall s;
    s.vx[5] = kNaN;
    return s.MlpFitV2();
  });
  add("mlp_fit_v2_validation_targets_inf", e, [](Fixture&) {
    InrCall s;
    s.vy[2] = -kInf;
    return s.MlpFitV2();
  });
  add("mlp_fit_v2_validation_loss_wrong_length", e, [](Fixture&) {
    InrCall s;
    s.mlp.report_every = 1;  // 3 evaluations; loss has 1 entry
    s.val.steps = nullptr;
    return s.MlpFitV2();
  });
  add("mlp_fit_v2_validation_steps_float64", e, [](Fixture&) {
    InrCall s;
    s.tvs = s.F64(&s.vloss, {1});
    s.val.loss = nullptr;
    return s.MlpFitV2();
  });
  add("mlp_fit_v2_validation_loss_overlaps_parameters", e, [](Fixture&) {
    InrCall s;
    s.tvl = s.F64(&s.params, {1});
    return s.MlpFitV2();
  });
  add("mlp_fit_v2_validation_loss_overlaps_features", e, [](Fixture&) {
    InrCall s;
    s.tvl = s.F64(&s.vx, {1});
    return s.MlpFitV2();
  });
  add("mlp_fit_v2_validation_loss_self_overlap", e, [](Fixture&) {
    InrCall s;
    s.mlp.report_every = 1;  // 3 evaluations, all written to one element
    std::vector<int64_t> steps3(3);
    s.tvs = s.Make(steps3.data(), kDLInt, 64, {3});
    s.tvl = s.F64(&s.vloss, {3});
    static int64_t zero_stride = 0;
    s.tvl.strides = &zero_stride;
    return s.MlpFitV2();
  });
  add("mlp_fit_v2_validation_diverges", e, [](Fixture&) {
    InrCall s;
    for (double& v : s.y) v = 1e200;  // the training diverges; the curve is left unwritten
    return s.MlpFitV2();
  });
  e = "gpe_inr_mlp_predict";
  add("mlp_predict_options_null", e, [](Fixture&) {
    InrCall s;
    return gpe_inr_mlp_predict(nullptr, &s.tp, &s.tx, &s.tpred);
  });
  add("mlp_predict_parameters_nan", e, [](Fixture&) { InrCall s; s.params[0] = kNaN; return s.MlpPredict(); });
  add("mlp_predict_features_nan", e, [](Fixture&) { InrCall s; s.x[0] = kNaN; return s.MlpPredict(); });
  add("mlp_predict_features_broadcast", e, [](Fixture&) {
    // 2^27 broadcast rows: the batch's size is refused before its 1 GiB copy.
    InrCall s;
    s.tx = s.F64(&s.x, {int64_t{1} << 27, 2});
    s.shapes.push_back({0, 1});
    s.tx.strides = s.shapes.back().data();
    return s.MlpPredict();
  });
  add("mlp_predict_out_wrong_rows", e, [](Fixture&) { InrCall s; s.tpred = s.F64(&s.pred, {5, 1}); return s.MlpPredict(); });
  add("mlp_predict_parameters_wrong_length", e, [](Fixture&) {
    InrCall s;
    std::vector<double> out(12);
    s.tpred = s.F64(&out, {6, 2});  // output_dim 2: 22 parameters, 17 given
    return s.MlpPredict();
  });
  e = "gpe_inr_fit_dense_adam";
  add("dadam_options_null", e, [](Fixture&) {
    InrCall s;
    return gpe_inr_fit_dense_adam(nullptr, &s.tx, &s.ty, &s.tw, nullptr, nullptr);
  });
  add("dadam_struct_size_newer", e, [](Fixture&) { InrCall s; s.adam.struct_size += 8; return s.Dense(); });
  add("dadam_struct_size_small", e, [](Fixture&) { InrCall s; s.adam.struct_size = 8; return s.Dense(); });
  add("dadam_steps_0", e, [](Fixture&) { InrCall s; s.adam.steps = 0; return s.Dense(); });
  add("dadam_learning_rate_negative", e, [](Fixture&) { InrCall s; s.adam.learning_rate = -0.1; return s.Dense(); });
  add("dadam_final_learning_rate_inf", e, [](Fixture&) { InrCall s; s.adam.final_learning_rate = kInf; return s.Dense(); });
  add("dadam_beta1_1", e, [](Fixture&) { InrCall s; s.adam.beta1 = 1.0; return s.Dense(); });
  add("dadam_epsilon_nan", e, [](Fixture&) { InrCall s; s.adam.epsilon = kNaN; return s.Dense(); });
  add("dadam_epsilon_0", e, [](Fixture&) { InrCall s; s.adam.epsilon = 0.0; return s.Dense(); });
  add("dadam_features_inf", e, [](Fixture&) { InrCall s; s.x[2] = -kInf; return s.Dense(); });
  add("dadam_features_empty", e, [](Fixture&) {
    InrCall s;
    s.tx = s.F64(&s.x, {6, 0});
    return s.Dense();
  });
  add("dadam_rows_mismatch", e, [](Fixture&) { InrCall s; s.ty = s.F64(&s.y, {3, 2}); return s.Dense(); });
  add("dadam_w_wrong_shape", e, [](Fixture&) { InrCall s; s.tw = s.F64(&s.w, {1, 2}); return s.Dense(); });
  add("dadam_history_wrong_length", e, [](Fixture&) { InrCall s; s.tl = s.F64(&s.loss, {1}); return s.Dense(); });
  add("dadam_diverges", e, [](Fixture&) {
    InrCall s;
    for (double& v : s.y) v = 1e200;
    return s.Dense();
  });
  add("dadam_diverges_last_step", e, [](Fixture&) {
    InrCall s;  // one step of 1e300: the loss before it is finite, the one after is not
    s.adam.steps = 1;
    s.adam.learning_rate = s.adam.final_learning_rate = 1e300;
    s.tl = s.F64(&s.loss, {1});
    return s.Dense();
  });
  add("dadam_history_overlaps_w", e, [](Fixture&) {
    InrCall s;
    s.tl = s.F64(&s.w, {3});  // w is [2, 1] over the same doubles
    return s.Dense();
  });
  e = "gpe_inr_fit_separable_adam_2d";
  add("sadam_psi_y_nan", e, [](Fixture&) { InrCall s; s.psi_y[1] = kNaN; return s.Separable(); });
  add("sadam_image_wrong_shape", e, [](Fixture&) { InrCall s; s.timg = s.F64(&s.image, {3, 4}); return s.Separable(); });
  add("sadam_w_wrong_shape", e, [](Fixture&) { InrCall s; s.tw2 = s.F64(&s.w, {2, 1}); return s.Separable(); });
  add("sadam_history_overlaps_w", e, [](Fixture&) {
    InrCall s;
    s.tl = s.F64(&s.w, {3});  // w is [2, 2] over the same doubles
    return s.Separable();
  });
  add("sadam_psi_x_null", e, [](Fixture&) {
    InrCall s;
    return gpe_inr_fit_separable_adam_2d(&s.adam, &s.tpy, nullptr, &s.timg, &s.tw2, nullptr,
                                         nullptr);
  });
  e = "gpe_inr_synthetic_image";
  add("synth_task_unknown", e, [](Fixture&) { InrCall s; return gpe_inr_synthetic_image(2, 0, &s.timg5); });
  add("synth_out_not_square", e, [](Fixture&) {
    InrCall s;
    DLTensor t = s.F64(&s.img, {5, 4});
    return gpe_inr_synthetic_image(GPE_SYNTHETIC_RADIAL, 0, &t);
  });
  add("synth_out_empty", e, [](Fixture&) {
    InrCall s;
    DLTensor t = s.F64(&s.img, {0, 0});
    return gpe_inr_synthetic_image(GPE_SYNTHETIC_SPIRAL, 0, &t);
  });
  add("synth_out_float32", e, [](Fixture&) {
    InrCall s;
    DLTensor t = s.Make(s.x32.data(), kDLFloat, 32, {2, 2});
    return gpe_inr_synthetic_image(GPE_SYNTHETIC_SPIRAL, 0, &t);
  });
  add("synth_n_huge", e, [](Fixture&) {
    InrCall s;
    // Never written: the size is refused first.
    DLTensor t = s.F64(&s.img, {int64_t{1} << 16, int64_t{1} << 16});
    return gpe_inr_synthetic_image(GPE_SYNTHETIC_RADIAL, 0, &t);
  });
  e = "gpe_inr_synthetic_vector_field";
  add("field_task_unknown", e, [](Fixture&) { InrCall s; return gpe_inr_synthetic_vector_field(-1, &s.tfield); });
  add("field_out_three_channels", e, [](Fixture&) {
    InrCall s;
    DLTensor t = s.F64(&s.field, {4, 4, 3});
    return gpe_inr_synthetic_vector_field(GPE_SYNTHETIC_RADIAL, &t);
  });
  e = "gpe_inr_grid_coordinates";
  add("gridc_n_0", e, [](Fixture&) { InrCall s; return gpe_inr_grid_coordinates(0, &s.tgrid); });
  add("gridc_out_wrong_shape", e, [](Fixture&) { InrCall s; return gpe_inr_grid_coordinates(4, &s.tgrid); });
  e = "gpe_inr_random_split";
  add("rsplit_counts_null", e, [](Fixture&) { InrCall s; return gpe_inr_random_split(25, 0.05, 0.4, 0, &s.tidx, nullptr); });
  add("rsplit_fractions_above_1", e, [](Fixture&) { InrCall s; return gpe_inr_random_split(25, 0.7, 0.4, 0, &s.tidx, s.counts); });
  add("rsplit_fraction_nan", e, [](Fixture&) { InrCall s; return gpe_inr_random_split(25, kNaN, 0.4, 0, &s.tidx, s.counts); });
  add("rsplit_fraction_negative", e, [](Fixture&) { InrCall s; return gpe_inr_random_split(25, 0.1, -0.1, 0, &s.tidx, s.counts); });
  add("rsplit_num_points_negative", e, [](Fixture&) { InrCall s; return gpe_inr_random_split(-1, 0.1, 0.1, 0, &s.tidx, s.counts); });
  add("rsplit_indices_wrong_length", e, [](Fixture&) { InrCall s; return gpe_inr_random_split(24, 0.1, 0.1, 0, &s.tidx, s.counts); });
  add("rsplit_indices_float64", e, [](Fixture&) { InrCall s; return gpe_inr_random_split(25, 0.1, 0.1, 0, &s.tgrid, s.counts); });
  e = "gpe_inr_regular_grid_split";
  add("gsplit_rows_0", e, [](Fixture&) { InrCall s; return gpe_inr_regular_grid_split(0, 5, &s.tidx, s.counts); });
  add("gsplit_indices_wrong_length", e, [](Fixture&) { InrCall s; return gpe_inr_regular_grid_split(4, 5, &s.tidx, s.counts); });
  add("gsplit_counts_null", e, [](Fixture&) { InrCall s; return gpe_inr_regular_grid_split(5, 5, &s.tidx, nullptr); });
  e = "gpe_inr_mse";
  add("mse_out_null", e, [](Fixture&) { InrCall s; return gpe_inr_mse(&s.tx, &s.tx, nullptr); });
  add("mse_b_null", e, [](Fixture&) { InrCall s; return gpe_inr_mse(&s.tx, nullptr, &s.value); });
  add("mse_shape_mismatch", e, [](Fixture&) { InrCall s; DLTensor b = s.F64(&s.x, {2, 6}); return s.Mse(s.tx, b); });
  add("mse_ndim_mismatch", e, [](Fixture&) { InrCall s; DLTensor b = s.F64(&s.x, {12}); return s.Mse(s.tx, b); });
  add("mse_nan", e, [](Fixture&) {
    InrCall s;
    std::vector<double> b = s.x;
    s.x[7] = kNaN;
    return s.Mse(s.tx, s.F64(&b, {6, 2}));
  });
  add("mse_empty", e, [](Fixture&) { InrCall s; DLTensor a = s.F64(&s.x, {0, 2}); return s.Mse(a, a); });
  add("mse_four_dimensions", e, [](Fixture&) { InrCall s; DLTensor a = s.F64(&s.x, {1, 2, 3, 2}); return s.Mse(a, a); });
  add("mse_broadcast", e, [](Fixture&) {
    // One double standing for 2^27 entries: refused before a 1 GiB copy of each.
    InrCall s;
    DLTensor a = s.F64(&s.x, {int64_t{1} << 27});
    s.shapes.push_back({0});
    a.strides = s.shapes.back().data();
    return s.Mse(a, a);
  });
  e = "gpe_inr_psnr";
  add("psnr_peak_0", e, [](Fixture&) { InrCall s; return gpe_inr_psnr(&s.tx, &s.tx, 0.0, &s.value); });
  add("psnr_peak_inf", e, [](Fixture&) { InrCall s; return gpe_inr_psnr(&s.tx, &s.tx, kInf, &s.value); });
  add("psnr_b_inf", e, [](Fixture&) {
    InrCall s;
    std::vector<double> b = s.x;
    b[0] = kInf;
    DLTensor tb = s.F64(&b, {6, 2});
    return gpe_inr_psnr(&s.tx, &tb, 1.0, &s.value);
  });
  e = "gpe_image_read";
  add("img_read_out_null", e, [](Fixture&) { InrCall s; return gpe_image_read((s.dir + "/x.png").c_str(), 0, nullptr); });
  add("img_read_path_null", e, [](Fixture&) { InrCall s; return gpe_image_read(nullptr, 0, &s.image_handle); });
  add("img_read_path_empty", e, [](Fixture&) { InrCall s; return gpe_image_read("", 0, &s.image_handle); });
  add("img_read_missing_file", e, [](Fixture&) { InrCall s; return s.Read(s.dir + "/no_such_image.png"); });
  add("img_read_directory", e, [](Fixture&) { InrCall s; return s.Read(s.dir); });
  add("img_read_not_an_image", e, [](Fixture&) {
    InrCall s;
    return s.Read(s.File("not_an_image.txt", "plain text, not pixels\n"));
  });
  add("img_read_corrupt_png", e, [](Fixture&) {
    InrCall s;
    return s.Read(s.File("corrupt.png", std::string("\x89PNG\r\n\x1a\n", 8) + "garbage after the signature"));
  });
  add("img_read_truncated_png", e, [](Fixture&) {
    // A valid PNG cut after its header chunk: the pixel data is missing.
    InrCall s;
    if (s.WritePng() != GPE_OK) return gpe_status{-1};
    std::ifstream in(s.dir + "/bad_inputs.png", std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    return s.Read(s.File("truncated.png", bytes.substr(0, 40)));
  });
  add("img_read_declares_huge_png", e, [](Fixture&) {
    // A valid small PNG whose header (CRC fixed up) then claims 60000 x 60000 pixels:
    // refused from the file's size before anything that size is allocated.
    InrCall s;
    if (s.WritePng() != GPE_OK) return gpe_status{-1};
    std::ifstream in(s.dir + "/bad_inputs.png", std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (bytes.size() < 33 || bytes.substr(12, 4) != "IHDR") return gpe_status{-1};
    auto put32 = [&bytes](size_t at, uint32_t v) {
      for (int i = 0; i < 4; ++i) bytes[at + i] = static_cast<char>((v >> (24 - 8 * i)) & 0xff);
    };
    put32(16, 60000);
    put32(20, 60000);
    uint32_t c = 0xffffffffu;  // CRC-32 (ISO 3309) of the chunk type and data
    for (size_t i = 12; i < 29; ++i) {
      c ^= static_cast<unsigned char>(bytes[i]);
      for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xedb88320u & (0u - (c & 1u)));
    }
    put32(29, c ^ 0xffffffffu);
    return s.Read(s.File("huge.png", bytes));
  });
  add("img_read_corrupt_jpeg", e, [](Fixture&) {
    InrCall s;
    return s.Read(s.File("corrupt.jpg", std::string("\xff\xd8\xff\xe0", 4) + std::string(64, '\x01')));
  });
  e = "gpe_image_shape";
  add("img_shape_image_null", e, [](Fixture&) { InrCall s; return gpe_image_shape(nullptr, &s.count, nullptr, nullptr); });
  e = "gpe_image_pixels";
  add("img_pixels_image_null", e, [](Fixture&) {
    InrCall s;
    DLTensor t = s.F64(&s.pixels, {3, 4, 1});
    return gpe_image_pixels(nullptr, &t);
  });
  add("img_pixels_wrong_shape", e, [](Fixture&) {
    InrCall s;
    if (s.WritePng() != GPE_OK || s.Read(s.dir + "/bad_inputs.png") != GPE_OK) return gpe_status{-1};
    DLTensor t = s.F64(&s.pixels, {4, 3, 1});  // the PNG is [3, 4] and reads as RGB
    return gpe_image_pixels(s.image_handle, &t);
  });
  add("img_pixels_int64", e, [](Fixture&) {
    InrCall s;
    if (s.WritePng() != GPE_OK || s.Read(s.dir + "/bad_inputs.png") != GPE_OK) return gpe_status{-1};
    std::vector<int64_t> px(36);
    DLTensor t = s.Make(px.data(), kDLInt, 64, {3, 4, 3});
    return gpe_image_pixels(s.image_handle, &t);
  });
  e = "gpe_image_write_png";
  add("png_unwritable_path", e, [](Fixture&) {
    InrCall s;
    return gpe_image_write_png("/nonexistent-directory/out.png", &s.tpix, 0.0, 1.0);
  });
  add("png_path_null", e, [](Fixture&) { InrCall s; return gpe_image_write_png(nullptr, &s.tpix, 0.0, 1.0); });
  add("png_pixels_null", e, [](Fixture&) { InrCall s; return gpe_image_write_png((s.dir + "/p.png").c_str(), nullptr, 0.0, 1.0); });
  add("png_pixels_nan", e, [](Fixture&) { InrCall s; s.pixels[5] = kNaN; return s.WritePng(); });
  add("png_pixels_empty", e, [](Fixture&) { InrCall s; s.tpix = s.F64(&s.pixels, {0, 4}); return s.WritePng(); });
  add("png_two_channels", e, [](Fixture&) { InrCall s; s.tpix = s.F64(&s.pixels, {3, 2, 2}); return s.WritePng(); });
  add("png_one_dimension", e, [](Fixture&) { InrCall s; s.tpix = s.F64(&s.pixels, {12}); return s.WritePng(); });
  add("png_lo_equals_hi", e, [](Fixture&) {
    InrCall s;
    return gpe_image_write_png((s.dir + "/p.png").c_str(), &s.tpix, 1.0, 1.0);
  });
  // A target that is not a regular file is refused and left alone (issue 24: a fifo hung
  // the writer, a directory gave GPE_ERROR_INTERNAL).
  add("png_target_directory", e, [](Fixture&) {
    InrCall s;
    const std::string path = s.dir + "/bad_inputs_dir.png";
    mkdir(path.c_str(), 0700);
    return gpe_image_write_png(path.c_str(), &s.tpix, 0.0, 1.0);
  });
  // A write that fails part-way (here a 16-byte file-size limit, as a full disk would)
  // leaves the old file whole and no temporary file (issue 24: libpng removed the old
  // file and the call gave GPE_ERROR_INTERNAL); inr/data_test checks the bytes.
  add("png_write_fails_part_way", e, [](Fixture&) {
    InrCall s;
    const std::string path = s.dir + "/bad_inputs_limit.png";
    if (gpe_image_write_png(path.c_str(), &s.tpix, 0.0, 1.0) != GPE_OK) return gpe_status{-1};
    rlimit saved, limit;
    getrlimit(RLIMIT_FSIZE, &saved);
    limit = saved;
    limit.rlim_cur = 16;
    const sighandler_t handler = signal(SIGXFSZ, SIG_IGN);
    setrlimit(RLIMIT_FSIZE, &limit);
    s.pixels[0] = 1.0;  // different bytes from the file already there
    const gpe_status status = gpe_image_write_png(path.c_str(), &s.tpix, 0.0, 1.0);
    setrlimit(RLIMIT_FSIZE, &saved);
    signal(SIGXFSZ, handler);
    return status;
  });
  add("png_hi_nan", e, [](Fixture&) {
    InrCall s;
    return gpe_image_write_png((s.dir + "/p.png").c_str(), &s.tpix, 0.0, kNaN);
  });
  e = "gpe_image_write_jpeg";
  add("jpeg_quality_0", e, [](Fixture&) {
    InrCall s;
    return gpe_image_write_jpeg((s.dir + "/p.jpg").c_str(), &s.tpix, 0, 0.0, 1.0);
  });
  add("jpeg_unwritable_path", e, [](Fixture&) {
    InrCall s;
    return gpe_image_write_jpeg("/nonexistent-directory/out.jpg", &s.tpix, 90, 0.0, 1.0);
  });
  add("jpeg_target_fifo", e, [](Fixture&) {
    InrCall s;
    const std::string path = s.dir + "/bad_inputs_fifo.jpg";
    mkfifo(path.c_str(), 0600);
    return gpe_image_write_jpeg(path.c_str(), &s.tpix, 90, 0.0, 1.0);
  });
  add("jpeg_pixels_inf", e, [](Fixture&) {
    InrCall s;
    s.pixels[0] = kInf;
    return gpe_image_write_jpeg((s.dir + "/p.jpg").c_str(), &s.tpix, 90, 0.0, 1.0);
  });
}

// The INR cases corrupt valid calls: check that they are valid.
TEST(BadInputs, InrBaselinesAreValid) {
  InrCall s;
  EXPECT_EQ(gpe_inr_mlp_num_parameters(&s.mlp, 2, 1, &s.count), GPE_OK) << gpe_last_error_message();
  EXPECT_EQ(s.count, 17);
  EXPECT_EQ(gpe_inr_mlp_init(&s.mlp, 2, 1, &s.tp), GPE_OK) << gpe_last_error_message();
  EXPECT_EQ(s.MlpFit(), GPE_OK) << gpe_last_error_message();
  EXPECT_EQ(gpe_inr_mlp_num_evaluations(&s.mlp, &s.count), GPE_OK) << gpe_last_error_message();
  EXPECT_EQ(s.count, 1);
  EXPECT_EQ(s.MlpFitV2(), GPE_OK) << gpe_last_error_message();
  EXPECT_EQ(s.vsteps[0], 3);
  EXPECT_GT(s.vloss[0], 0.0);
  s.val.steps = s.val.loss = nullptr;  // the curve is optional
  EXPECT_EQ(s.MlpFitV2(), GPE_OK) << gpe_last_error_message();
  s.val.features = s.val.targets = nullptr;  // no validation set: gpe_inr_mlp_fit
  EXPECT_EQ(s.MlpFitV2(), GPE_OK) << gpe_last_error_message();
  EXPECT_EQ(gpe_inr_mlp_fit_v2(&s.mlp, &s.tx, &s.ty, nullptr, &s.tp, &s.tl, nullptr, nullptr), GPE_OK)
      << gpe_last_error_message();
  EXPECT_EQ(s.MlpPredict(), GPE_OK) << gpe_last_error_message();
  EXPECT_EQ(s.Dense(), GPE_OK) << gpe_last_error_message();
  EXPECT_EQ(s.Separable(), GPE_OK) << gpe_last_error_message();
  EXPECT_EQ(gpe_inr_synthetic_image(GPE_SYNTHETIC_RADIAL, 0, &s.timg5), GPE_OK);
  EXPECT_EQ(gpe_inr_synthetic_vector_field(GPE_SYNTHETIC_SPIRAL, &s.tfield), GPE_OK);
  EXPECT_EQ(gpe_inr_grid_coordinates(5, &s.tgrid), GPE_OK) << gpe_last_error_message();
  EXPECT_EQ(gpe_inr_random_split(25, 0.05, 0.4, 0, &s.tidx, s.counts), GPE_OK);
  EXPECT_EQ(gpe_inr_regular_grid_split(5, 5, &s.tidx, s.counts), GPE_OK);
  EXPECT_EQ(s.Mse(s.tx, s.tx), GPE_OK);
  EXPECT_EQ(gpe_inr_psnr(&s.tx, &s.tx, 1.0, &s.value), GPE_OK);
  EXPECT_EQ(s.WritePng(), GPE_OK) << gpe_last_error_message();
  EXPECT_EQ(s.Read(s.dir + "/bad_inputs.png"), GPE_OK) << gpe_last_error_message();
  DLTensor t = s.F64(&s.pixels, {3, 4, 1});
  std::vector<double> rgb(36);
  DLTensor trgb = s.F64(&rgb, {3, 4, 3});
  EXPECT_EQ(gpe_image_pixels(s.image_handle, &trgb), GPE_OK) << gpe_last_error_message();
  EXPECT_EQ(gpe_image_write_jpeg((s.dir + "/p.jpg").c_str(), &t, 90, 0.0, 1.0), GPE_OK)
      << gpe_last_error_message();
}

// Refusals of the RoPE tables, the thread pool and attention's options that the cases
// above do not reach: argument checks of the query entry points, option values and
// layouts, broadcast index tensors (each copied, and each sized by nothing in memory when
// q has no tokens), the released struct sizes, attention factors past the tensor type.
void RopePoolAndAttentionOptionCases(const AddCase& add) {
  const char* e = "gpe_set_thread_pool";
  add("thread_pool_parallel_for_null", e, [](Fixture&) {
    gpe_thread_pool p = GPE_THREAD_POOL_INIT;  // parallel_for NULL
    return gpe_set_thread_pool(&p);
  });
  add("thread_pool_num_threads_0", e, [](Fixture&) {
    gpe_thread_pool p = GPE_THREAD_POOL_INIT;
    p.parallel_for = [](void*, int64_t n, gpe_pool_task task, void* ctx) {
      for (int64_t i = 0; i < n; ++i) task(ctx, i);
    };
    p.num_threads = 0;  // refused before anything is installed
    return gpe_set_thread_pool(&p);
  });
  add("thread_pool_struct_size_newer", e, [](Fixture&) {
    gpe_thread_pool p = GPE_THREAD_POOL_INIT;
    p.struct_size += 8;
    return gpe_set_thread_pool(&p);
  });
  e = "gpe_thread_pool_num_threads";
  add("thread_pool_num_threads_out_null", e, [](Fixture&) { return gpe_thread_pool_num_threads(nullptr); });

  e = "gpe_rope_shape";
  add("rope_shape_handle_null", e, [](Fixture&) {
    int64_t d = 0, r = 0, a = 0;
    return gpe_rope_shape(nullptr, &d, &r, &a);
  });
  e = "gpe_rope_frequencies";
  add("rope_frequencies_wrong_count", e, [](Fixture& f) {
    double thetas[3];  // rotary_dim / 2 = 4 planes
    return gpe_rope_frequencies(f.v3.rope, thetas, 3, nullptr);
  });
  add("rope_frequencies_thetas_null", e, [](Fixture& f) {
    return gpe_rope_frequencies(f.v3.rope, nullptr, 4, nullptr);
  });
  add("rope_frequencies_handle_null", e, [](Fixture&) {
    double thetas[4];
    return gpe_rope_frequencies(nullptr, thetas, 4, nullptr);
  });
  e = "gpe_rope_backward";
  add("rope_backward_dtype_mismatch", e, [](Fixture& f) {
    return gpe_rope_backward(f.v3.rope, &f.v3.tokens, &f.v3.x, &f.v3.o);  // float64 -> float32
  });
  add("rope_backward_tokens_null", e, [](Fixture& f) {
    return gpe_rope_backward(f.v3.rope, nullptr, &f.v3.x, &f.v3.y);
  });
  // YaRN's attention factor past float32's range: the float32 table held inf (inf and
  // NaN outputs with GPE_OK where float64 gives finite values).
  e = "gpe_rope_forward";
  add("rope_forward_attention_factor_overflows", e, [](Fixture& f) -> gpe_status {
    gpe_rope_options o = f.v3.rope_opt;
    if (gpe_rope_options_use_schedule(GPE_ROPE_YARN, &o) != GPE_OK) return GPE_ERROR_INTERNAL;
    o.factor = 4.0;
    o.has_attention_factor = 1;
    o.attention_factor = 1e39;
    gpe_rope* r = nullptr;
    if (gpe_rope_create(&o, &r) != GPE_OK) return GPE_ERROR_INTERNAL;
    const gpe_status s = gpe_rope_forward(r, &f.v3.tokens, &f.v3.q, &f.v3.o);
    gpe_rope_destroy(r);
    return s;
  });
  e = "gpe_rope_table_create";
  // `like` is an input whose data is not read; a zero stride is refused for what it
  // describes (the tensors the table will rotate), by that name.
  add("rope_table_like_zero_stride", e, [](Fixture& f) {
    f.v3.shapes.push_back({64, 0, 8, 1});
    f.v3.q.strides = f.v3.shapes.back().data();  // every token on one row
    gpe_rope_table* t = nullptr;
    const gpe_status s = gpe_rope_table_create(f.v3.rope, &f.v3.tokens, &f.v3.q, &t);
    gpe_rope_table_destroy(t);
    return s;
  });
  e = "gpe_rope_table_forward";
  // A table applies to its own token numbering: [1, 4] sequences x tokens, not [2, 2].
  add("rope_table_forward_other_numbering", e, [](Fixture& f) -> gpe_status {
    gpe_rope_table* t = nullptr;
    if (gpe_rope_table_create(f.v3.rope, &f.v3.tokens, &f.v3.q, &t) != GPE_OK) {
      return GPE_ERROR_INTERNAL;
    }
    f.v3.shapes.push_back({2, 2, 2, 8});
    f.v3.o.shape = f.v3.q.shape = f.v3.shapes.back().data();
    const gpe_status s = gpe_rope_table_forward(t, &f.v3.q, &f.v3.o);
    gpe_rope_table_destroy(t);
    return s;
  });
  add("rope_table_forward_float64_on_float32_table", e, [](Fixture& f) -> gpe_status {
    gpe_rope_table* t = nullptr;
    if (gpe_rope_table_create(f.v3.rope, &f.v3.tokens, &f.v3.q, &t) != GPE_OK) {
      return GPE_ERROR_INTERNAL;
    }
    const gpe_status s = gpe_rope_table_forward(t, &f.v3.x, &f.v3.y);
    gpe_rope_table_destroy(t);
    return s;
  });
  e = "gpe_rope_table_backward";
  add("rope_table_backward_table_null", e, [](Fixture& f) {
    return gpe_rope_table_backward(nullptr, &f.v3.q, &f.v3.o);
  });

  e = "gpe_attention_forward";
  add("attention_causal_2", e, [](Fixture& f) { f.v3.att.causal = 2; return f.v3.Forward(); });
  add("attention_rope_pairing_unknown", e, [](Fixture& f) {
    f.v3.att.rope_dim = 8;
    f.v3.att.rope_pairing = 7;
    return f.v3.Forward();
  });
  add("attention_rope_sections_interleaved_2", e, [](Fixture& f) {
    f.v3.att.rope_sections_interleaved = 2;
    return f.v3.Forward();
  });
  add("attention_rope_handle_one_axis_with_q_axes", e, [](Fixture& f) {
    std::vector<int64_t> axes(4 * 2, 0);
    DLTensor t = f.v3.Make(axes.data(), kDLInt, 64, {4, 2});
    f.v3.att.rope = f.v3.rope;  // one axis: it reads the int64 positions
    f.v3.att.q_axes = f.v3.att.k_axes = &t;
    return f.v3.Forward();
  });
  add("attention_rope_handle_attention_factor_overflows", e, [](Fixture& f) {
    return f.v3.ForwardWithRope([](gpe_rope_options& o) {
      if (gpe_rope_options_use_schedule(GPE_ROPE_YARN, &o) != GPE_OK) o.schedule = -1;
      o.factor = 4.0;
      o.has_attention_factor = 1;
      o.attention_factor = 1e39;  // the float32 table would hold inf
    });
  });
  add("attention_head_dim_not_contiguous", e, [](Fixture& f) {
    f.v3.shapes.push_back({64, 16, 8, 2});  // q's elements every other float
    f.v3.q.strides = f.v3.shapes.back().data();
    return f.v3.Forward();
  });
  add("attention_negative_token_stride", e, [](Fixture& f) {
    f.v3.shapes.push_back({64, -16, 8, 1});  // tokens in reverse order
    f.v3.q.strides = f.v3.shapes.back().data();
    f.v3.q.data = f.v3.qa.data() + 48;
    return f.v3.Forward();
  });
  add("attention_o_float64_for_float32_q", e, [](Fixture& f) {
    return gpe_attention_forward(&f.v3.att, &f.v3.q, &f.v3.k, &f.v3.v, &f.v3.y, nullptr);
  });
  add("attention_softcap_above_bound", e, [](Fixture& f) {
    f.v3.att.softcap = 1e31;  // above 1e30 a cap is no cap (and past 1e37 the kernels broke)
    return f.v3.Forward();
  });
  // The released sizes only: 224 ends after 0.9.0's `window` (inside that release's
  // struct) and silently dropped the window's bounds.
  add("attention_struct_size_between_versions", e, [](Fixture& f) {
    f.v3.att.struct_size = static_cast<uint32_t>(offsetof(gpe_attention_options, window_left));
    return f.v3.Forward();
  });
  // Packed layout: an out-of-order cu_seqlens_q is named as such, not as a mask extent.
  add("attention_packed_mask_cu_seqlens_decreasing", e, [](Fixture& f) {
    static const int64_t cu_q[3] = {0, std::numeric_limits<int64_t>::max(), 4};
    f.v3.UsePackedLayout();
    f.v3.bad_cu_t.data = const_cast<int64_t*>(cu_q);
    f.v3.att.cu_seqlens_q = &f.v3.bad_cu_t;
    f.v3.att.cu_seqlens_k = &f.v3.cu_t;
    std::vector<uint8_t> m(2 * 2 * 2 * 2, 1);
    DLTensor t = f.v3.Make(m.data(), kDLUInt, 8, {2, 2, 2, 2});
    f.v3.att.attn_mask = &t;
    return gpe_attention_forward(&f.v3.att, &f.v3.q, &f.v3.k, &f.v3.v, &f.v3.o, nullptr);
  });
  add("attention_kv_lengths_with_cu_seqlens", e, [](Fixture& f) {
    f.v3.UsePackedLayout();
    f.v3.att.cu_seqlens_q = f.v3.att.cu_seqlens_k = &f.v3.cu_t;
    std::vector<int64_t> l = {2, 2};
    DLTensor t = f.v3.Make(l.data(), kDLInt, 64, {2});
    f.v3.att.kv_lengths = &t;
    return gpe_attention_forward(&f.v3.att, &f.v3.q, &f.v3.k, &f.v3.v, &f.v3.o, nullptr);
  });
  add("attention_block_table_with_cu_seqlens", e, [](Fixture& f) {
    f.v3.UsePackedLayout();
    f.v3.att.cu_seqlens_q = f.v3.att.cu_seqlens_k = &f.v3.cu_t;
    std::vector<int64_t> b = {0, 0};
    DLTensor t = f.v3.Make(b.data(), kDLInt, 64, {2, 1});
    f.v3.att.block_table = &t;
    return gpe_attention_forward(&f.v3.att, &f.v3.q, &f.v3.k, &f.v3.v, &f.v3.o, nullptr);
  });
  add("attention_block_table_page_size_0", e, [](Fixture& f) {
    f.v3.shapes.push_back({4, 0, 1, 8});  // 4 pages of no token
    f.v3.k.shape = f.v3.v.shape = f.v3.shapes.back().data();
    std::vector<int64_t> b = {0};
    DLTensor t = f.v3.Make(b.data(), kDLInt, 64, {1, 1});
    f.v3.att.block_table = &t;
    return f.v3.Forward();
  });
  // pages_per_sequence x page_size = 2^21 x 2^20 keys per sequence: refused before the
  // table (never read here) is copied.
  add("attention_block_table_capacity_huge", e, [](Fixture& f) {
    f.v3.shapes.push_back({1, int64_t{1} << 20, 1, 8});
    f.v3.k.shape = f.v3.v.shape = f.v3.shapes.back().data();
    DLTensor t = f.v3.Make(f.v3.ids.data(), kDLInt, 64, {1, int64_t{1} << 21});
    f.v3.att.block_table = &t;
    return f.v3.Forward();
  });
  // Broadcast or self-overlapping index tensors with q empty, past the 2^24 entries such
  // views may describe (smaller ones are copied): 2^24 + 1 heads or sequences (sinks,
  // kv_lengths: a few bytes for 64 and 128 MiB copies) and a [2^12 + 1, 2^12 + 1] block
  // table over 8193 entries (strides {1, 1}: a 128 MiB copy); refused before the copies.
  add("attention_sinks_broadcast", e, [](Fixture& f) {
    static const float zero = 0.0f;
    f.v3.shapes.push_back({1, 0, (int64_t{1} << 24) + 1, 8});
    f.v3.q.shape = f.v3.o.shape = f.v3.shapes.back().data();
    f.v3.shapes.push_back({1, 0, 1, 8});
    f.v3.k.shape = f.v3.v.shape = f.v3.shapes.back().data();
    DLTensor t = f.v3.Make(const_cast<float*>(&zero), kDLFloat, 32, {(int64_t{1} << 24) + 1});
    f.v3.shapes.push_back({0});
    t.strides = f.v3.shapes.back().data();
    f.v3.att.sinks = &t;
    return gpe_attention_forward(&f.v3.att, &f.v3.q, &f.v3.k, &f.v3.v, &f.v3.o, nullptr);
  });
  add("attention_kv_lengths_broadcast", e, [](Fixture& f) {
    static const int64_t zero = 0;
    f.v3.shapes.push_back({(int64_t{1} << 24) + 1, 0, 2, 8});
    f.v3.q.shape = f.v3.o.shape = f.v3.shapes.back().data();
    f.v3.shapes.push_back({(int64_t{1} << 24) + 1, 0, 1, 8});
    f.v3.k.shape = f.v3.v.shape = f.v3.shapes.back().data();
    DLTensor t = f.v3.Make(const_cast<int64_t*>(&zero), kDLInt, 64, {(int64_t{1} << 24) + 1});
    f.v3.shapes.push_back({0});
    t.strides = f.v3.shapes.back().data();
    f.v3.att.kv_lengths = &t;
    return gpe_attention_forward(&f.v3.att, &f.v3.q, &f.v3.k, &f.v3.v, &f.v3.o, nullptr);
  });
  add("attention_block_table_overlapping_strides", e, [](Fixture& f) {
    constexpr int64_t kN = (int64_t{1} << 12) + 1;
    f.v3.shapes.push_back({kN, 0, 2, 8});
    f.v3.q.shape = f.v3.o.shape = f.v3.shapes.back().data();
    f.v3.shapes.push_back({4, 1, 1, 8});  // 4 pages of one token
    f.v3.k.shape = f.v3.v.shape = f.v3.shapes.back().data();
    std::vector<int64_t> pages(2 * kN - 1, 0);
    DLTensor t = f.v3.Make(pages.data(), kDLInt, 64, {kN, kN});
    f.v3.shapes.push_back({1, 1});
    t.strides = f.v3.shapes.back().data();
    f.v3.att.block_table = &t;
    return gpe_attention_forward(&f.v3.att, &f.v3.q, &f.v3.k, &f.v3.v, &f.v3.o, nullptr);
  });
  e = "gpe_attention_backward_with_parameters";
  add("attention_params_struct_size_between_versions", e, [](Fixture& f) {
    gpe_attention_param_grads g = GPE_ATTENTION_PARAM_GRADS_INIT;
    g.struct_size = offsetof(gpe_attention_param_grads, d_algebraic_tree);  // 80: no release's
    return f.v3.BackwardParams(g);
  });
}

std::map<std::string, Case> Cases() {
  std::map<std::string, Case> c;
  auto add = [&](const char* id, const char* entry, Run run) {
    EXPECT_TRUE(c.emplace(id, Case{entry, std::move(run)}).second) << "duplicate case " << id;
  };
  // -- SO(n) representations --
  const char* e = "gpe_so_rep_create_planes";
  add("planes_out_null", e, [](Fixture& f) { return gpe_so_rep_create_planes(&f.planes_opt, nullptr); });
  add("planes_options_null", e, [](Fixture& f) { return gpe_so_rep_create_planes(nullptr, &f.created); });
  add("planes_struct_size_small", e, [](Fixture& f) { f.planes_opt.struct_size = 4; return f.Planes(); });
  add("planes_struct_size_newer", e, [](Fixture& f) {
    f.planes_opt.struct_size = sizeof(gpe_so_planes_options) + 8;
    return f.Planes();
  });
  add("planes_dim_1", e, [](Fixture& f) { f.planes_opt.dim = 1; return f.Planes(); });
  add("planes_dim_huge", e, [](Fixture& f) { f.planes_opt.dim = kHuge; return f.Planes(); });
  add("planes_rotary_odd", e, [](Fixture& f) { f.planes_opt.rotary_dim = 3; return f.Planes(); });
  add("planes_rotary_above_dim", e, [](Fixture& f) { f.planes_opt.rotary_dim = 10; return f.Planes(); });
  add("planes_pairing_unknown", e, [](Fixture& f) { f.planes_opt.pairing = 7; return f.Planes(); });
  add("planes_base_zero", e, [](Fixture& f) { f.planes_opt.base = 0.0; return f.Planes(); });
  add("planes_base_nan", e, [](Fixture& f) { f.planes_opt.base = kNaN; return f.Planes(); });
  add("planes_theta_inf", e, [](Fixture& f) {
    const double th[4] = {1, 0.5, kInf, 0.1};
    f.planes_opt.thetas = th;
    return f.Planes();
  });
  e = "gpe_so_rep_create_rank2";
  add("rank2_options_null", e, [](Fixture& f) { return gpe_so_rep_create_rank2(nullptr, &f.created); });
  add("rank2_struct_size_newer", e, [](Fixture& f) { f.rank2_opt.struct_size += 8; return f.Rank2(); });
  add("rank2_dim_1", e, [](Fixture& f) { f.rank2_opt.dim = 1; return f.Rank2(); });
  add("rank2_a_null", e, [](Fixture& f) { f.rank2_opt.a = nullptr; return f.Rank2(); });
  add("rank2_b_nan", e, [](Fixture& f) { f.ab[f.kDim + 2] = kNaN; return f.Rank2(); });
  add("rank2_omega_inf", e, [](Fixture& f) { f.rank2_opt.omega = kInf; return f.Rank2(); });
  // Finite inputs whose angle per position overflows (issue 24; NaN at every position,
  // 0 included, before): omega |a ^ b| = 1e308 * 2, and |a|^2 = 1e400.
  add("rank2_angle_overflows", e, [](Fixture& f) {
    f.ab[0] = 2.0;
    f.rank2_opt.omega = 1e308;
    return f.Rank2();
  });
  add("rank2_norm_overflows", e, [](Fixture& f) { f.ab[0] = 1e200; return f.Rank2(); });
  e = "gpe_so_rep_dim";
  add("so_dim_rep_null", e, [](Fixture& f) { return gpe_so_rep_dim(nullptr, &f.i64); });
  add("so_dim_out_null", e, [](Fixture& f) { return gpe_so_rep_dim(f.rep, nullptr); });
  // DLTensor checks, shared by every entry point that takes tensors (shown on x here).
  e = "gpe_so_rep_apply";
  add("apply_rep_null", e, [](Fixture& f) { return gpe_so_rep_apply(nullptr, &f.pos, &f.x, &f.out); });
  add("apply_x_null", e, [](Fixture& f) { return gpe_so_rep_apply(f.rep, &f.pos, nullptr, &f.out); });
  add("apply_x_on_gpu", e, [](Fixture& f) { f.x.device.device_type = kDLCUDA; return f.Apply(); });
  add("apply_x_vector_lanes", e, [](Fixture& f) { f.x.dtype.lanes = 4; return f.Apply(); });
  add("apply_x_unknown_dtype", e, [](Fixture& f) { f.x.dtype.bits = 24; return f.Apply(); });
  add("apply_x_int64", e, [](Fixture& f) { f.x.dtype.code = kDLInt; return f.Apply(); });
  add("apply_x_ndim_3", e, [](Fixture& f) { f.x.ndim = 3; return f.Apply(); });
  add("apply_x_shape_null", e, [](Fixture& f) { f.x.shape = nullptr; return f.Apply(); });
  add("apply_x_negative_size", e, [](Fixture& f) {
    f.shapes.push_back({-4, f.kDim});
    f.x.shape = f.shapes.back().data();
    return f.Apply();
  });
  add("apply_x_data_null", e, [](Fixture& f) { f.x.data = nullptr; return f.Apply(); });
  add("apply_x_too_many_elements", e, [](Fixture& f) {
    f.shapes.push_back({int64_t{1} << 40, int64_t{1} << 40});
    f.x.shape = f.shapes.back().data();
    return f.Apply();
  });
  add("apply_x_stride_out_of_range", e, [](Fixture& f) {
    f.shapes.push_back({std::numeric_limits<int64_t>::max() / 2, 1});
    f.x.strides = f.shapes.back().data();
    return f.Apply();
  });
  add("apply_x_misaligned", e, [](Fixture& f) { f.x.byte_offset = 3; return f.Apply(); });
  add("apply_x_byte_offset_out_of_range", e, [](Fixture& f) {
    f.x.byte_offset = uint64_t{1} << 63;
    return f.Apply();
  });
  add("apply_positions_float", e, [](Fixture& f) { f.pos.dtype.code = kDLFloat; return f.Apply(); });
  add("apply_x_wrong_dim", e, [](Fixture& f) {
    f.shapes.push_back({2, 16});
    f.x.shape = f.out.shape = f.shapes.back().data();
    return f.Apply();
  });
  add("apply_rows_mismatch", e, [](Fixture& f) {
    f.shapes.push_back({3, f.kDim});
    f.x.shape = f.out.shape = f.shapes.back().data();
    return f.Apply();
  });
  add("apply_out_dtype_mismatch", e, [](Fixture& f) { f.out.dtype.bits = 32; return f.Apply(); });
  add("apply_out_partial_overlap", e, [](Fixture& f) {
    f.shapes.push_back({2, f.kDim});
    f.x.shape = f.out.shape = f.shapes.back().data();
    f.pos.shape = f.shapes.back().data();
    f.out.data = f.x_data.data() + 1;
    return f.Apply();
  });
  // Issue 24: positions viewing out's memory gave a wrong result with GPE_OK (rows were
  // written over positions not yet read). An out that overlaps itself is refused too.
  add("apply_positions_overlap_out", e, [](Fixture& f) {
    f.pos.data = f.out_data.data();  // 4 int64 over out's first 4 doubles
    return f.Apply();
  });
  add("apply_out_zero_stride", e, [](Fixture& f) {
    f.shapes.push_back({0, 1});
    f.out.strides = f.shapes.back().data();
    return f.Apply();
  });
  e = "gpe_so_rep_matrix";
  add("so_matrix_rep_null", e, [](Fixture& f) { return gpe_so_rep_matrix(nullptr, 0, &f.mat); });
  add("so_matrix_out_wrong_shape", e, [](Fixture& f) { return gpe_so_rep_matrix(f.rep, 0, &f.x); });
  add("so_matrix_out_float32", e, [](Fixture& f) {
    f.mat.dtype.bits = 32;
    return gpe_so_rep_matrix(f.rep, 0, &f.mat);
  });
  // -- Sinusoidal --
  e = "gpe_sinusoidal_encode";
  add("sin_options_null", e, [](Fixture& f) { return gpe_sinusoidal_encode(nullptr, &f.pos, &f.out); });
  add("sin_struct_size_newer", e, [](Fixture& f) { f.sin_opt.struct_size += 8; return f.Sin(); });
  add("sin_base_negative", e, [](Fixture& f) { f.sin_opt.base = -2.0; return f.Sin(); });
  add("sin_out_dim_0", e, [](Fixture& f) {
    f.shapes.push_back({f.kN, 0});
    f.out.shape = f.shapes.back().data();
    return f.Sin();
  });
  add("sin_rows_mismatch", e, [](Fixture& f) {
    f.shapes.push_back({f.kN + 1, f.kDim});
    f.out.shape = f.shapes.back().data();
    return f.Sin();
  });
  add("sin_out_zero_stride", e, [](Fixture& f) {
    f.shapes.push_back({0, 1});
    f.out.strides = f.shapes.back().data();
    return f.Sin();
  });
  // -- Learned positions --
  e = "gpe_learned_positions_create";
  add("learned_out_null", e, [](Fixture& f) { return gpe_learned_positions_create(&f.table, nullptr); });
  add("learned_table_null", e, [](Fixture&) {
    gpe_learned_positions* t = nullptr;
    return gpe_learned_positions_create(nullptr, &t);
  });
  add("learned_table_broadcast", e, [](Fixture& f) {
    // One row standing for 2^33 (stride 0): refused before a 64 GiB copy.
    f.shapes.push_back({int64_t{1} << 33, f.kDim});
    f.table.shape = f.shapes.back().data();
    f.shapes.push_back({0, 1});
    f.table.strides = f.shapes.back().data();
    gpe_learned_positions* t = nullptr;
    const gpe_status s = gpe_learned_positions_create(&f.table, &t);
    gpe_learned_positions_destroy(t);
    return s;
  });
  add("learned_table_nan", e, [](Fixture& f) {
    f.table_data[5] = kNaN;
    gpe_learned_positions* t = nullptr;
    const gpe_status s = gpe_learned_positions_create(&f.table, &t);
    gpe_learned_positions_destroy(t);
    return s;
  });
  add("learned_table_no_rows", e, [](Fixture& f) {
    f.shapes.push_back({0, f.kDim});
    f.table.shape = f.shapes.back().data();
    gpe_learned_positions* t = nullptr;
    const gpe_status s = gpe_learned_positions_create(&f.table, &t);
    gpe_learned_positions_destroy(t);
    return s;
  });
  e = "gpe_learned_positions_shape";
  add("learned_shape_null", e, [](Fixture& f) { return gpe_learned_positions_shape(f.learned, nullptr, &f.j64); });
  e = "gpe_learned_positions_lookup";
  add("lookup_position_past_table", e, [](Fixture& f) {
    f.pos_data[2] = f.kRows;
    return gpe_learned_positions_lookup(f.learned, &f.pos, &f.out);
  });
  add("lookup_position_negative", e, [](Fixture& f) {
    f.pos_data[2] = -1;  // the fixture's -5 is already negative; -1 is the edge
    return gpe_learned_positions_lookup(f.learned, &f.pos, &f.out);
  });
  add("lookup_out_wrong_shape", e, [](Fixture& f) {
    f.pos_data = {0, 1, 2, 3};
    return gpe_learned_positions_lookup(f.learned, &f.pos, &f.mat);
  });
  e = "gpe_learned_positions_backward";
  add("learned_backward_grad_table_wrong_shape", e, [](Fixture& f) {
    f.pos_data = {0, 1, 2, 3};
    return gpe_learned_positions_backward(f.learned, &f.pos, &f.out, &f.mat);
  });
  add("learned_backward_overlap", e, [](Fixture& f) {
    f.pos_data = {0, 1, 2, 3};
    f.grad_table.data = f.out_data.data();
    f.shapes.push_back({f.kN, f.kDim});
    f.grad_table.shape = f.shapes.back().data();
    f.table_data.resize(f.kN * f.kDim);
    gpe_learned_positions* t = nullptr;
    f.table.shape = f.shapes.back().data();
    Fixture::Ok(gpe_learned_positions_create(&f.table, &t));
    const gpe_status s = gpe_learned_positions_backward(t, &f.pos, &f.out, &f.grad_table);
    gpe_learned_positions_destroy(t);
    return s;
  });
  add("learned_backward_position_past_table", e, [](Fixture& f) {
    f.pos_data = {0, 1, 99, 3};
    return gpe_learned_positions_backward(f.learned, &f.pos, &f.out, &f.grad_table);
  });
  // -- GRAPE-M --
  e = "gpe_grape_m_create";
  add("grape_struct_size_small", e, [](Fixture& f) { f.grape_opt.struct_size = 8; return f.GrapeCreate(); });
  add("grape_dim_1", e, [](Fixture& f) { f.grape_opt.dim = 1; return f.GrapeCreate(); });
  add("grape_num_generators_0", e, [](Fixture& f) { f.grape_opt.num_generators = 0; return f.GrapeCreate(); });
  add("grape_num_generators_huge", e, [](Fixture& f) {
    f.grape_opt.num_generators = std::numeric_limits<int64_t>::max() / 4;
    return f.GrapeCreate();
  });
  add("grape_omega_null", e, [](Fixture& f) { f.grape_opt.omega = nullptr; return f.GrapeCreate(); });
  add("grape_angle_overflows", e, [](Fixture& f) {
    f.ab[0] = 2.0;
    f.omega[0] = 1e308;
    return f.GrapeCreate();
  });
  add("grape_a_nan", e, [](Fixture& f) { f.ab[3] = kNaN; return f.GrapeCreate(); });
  e = "gpe_grape_m_shape";
  add("grape_shape_handle_null", e, [](Fixture& f) { return gpe_grape_m_shape(nullptr, &f.i64, &f.j64); });
  e = "gpe_grape_m_apply";
  add("grape_apply_wrong_dim", e, [](Fixture& f) {
    f.shapes.push_back({f.kN, 4});
    f.x.shape = f.out.shape = f.shapes.back().data();
    return gpe_grape_m_apply(f.grape, &f.pos, &f.x, &f.out);
  });
  add("grape_apply_positions_overlap_out", e, [](Fixture& f) {
    f.pos.data = f.out_data.data();
    return gpe_grape_m_apply(f.grape, &f.pos, &f.x, &f.out);
  });
  e = "gpe_grape_m_matrix";
  add("grape_matrix_wrong_shape", e, [](Fixture& f) { return gpe_grape_m_matrix(f.grape, 2, &f.x); });
  e = "gpe_grape_m_backward";
  add("grape_backward_grad_out_mismatch", e, [](Fixture& f) {
    f.shapes.push_back({f.kN - 1, f.kDim});
    f.out.shape = f.shapes.back().data();
    return f.GrapeBackward();
  });
  add("grape_backward_grad_a_wrong_shape", e, [](Fixture& f) {
    f.shapes.push_back({2, f.kDim});
    f.ga.shape = f.shapes.back().data();
    f.ga_data.resize(2 * f.kDim);
    f.ga.data = f.ga_data.data();
    return f.GrapeBackward();
  });
  add("grape_backward_grad_x_overlaps_x", e, [](Fixture& f) {
    return gpe_grape_m_backward(f.grape, &f.pos, &f.x, &f.out, &f.x, nullptr, nullptr, nullptr);
  });
  // -- Algebraic --
  e = "gpe_algebraic_sequence_create";
  add("alg_skew_null", e, [](Fixture& f) { f.alg_opt.skew = nullptr; return f.AlgCreate(); });
  add("alg_dim_0", e, [](Fixture& f) { f.alg_opt.dim = 0; return f.AlgCreate(); });
  add("alg_dim_huge", e, [](Fixture& f) { f.alg_opt.dim = kHuge; return f.AlgCreate(); });
  add("alg_not_skew", e, [](Fixture& f) { f.skew[f.kDim] = 0.2; return f.AlgCreate(); });
  add("alg_skew_inf", e, [](Fixture& f) { f.skew[3] = kInf; return f.AlgCreate(); });
  e = "gpe_algebraic_sequence_dim";
  add("alg_dim_out_null", e, [](Fixture& f) { return gpe_algebraic_sequence_dim(f.alg, nullptr); });
  e = "gpe_algebraic_sequence_apply";
  add("alg_apply_handle_null", e, [](Fixture& f) {
    return gpe_algebraic_sequence_apply(nullptr, &f.pos, &f.x, &f.out);
  });
  add("alg_apply_positions_overlap_out", e, [](Fixture& f) {
    f.pos.data = f.out_data.data();
    return gpe_algebraic_sequence_apply(f.alg, &f.pos, &f.x, &f.out);
  });
  e = "gpe_algebraic_sequence_matrix";
  add("alg_matrix_wrong_shape", e, [](Fixture& f) { return gpe_algebraic_sequence_matrix(f.alg, 1, &f.x); });
  e = "gpe_algebraic_sequence_backward";
  add("alg_backward_grad_skew_wrong_shape", e, [](Fixture& f) {
    return gpe_algebraic_sequence_backward(f.alg, &f.pos, &f.x, &f.out, nullptr, &f.x);
  });
  // -- Shaw relative scores --
  e = "gpe_shaw_key_scores";
  add("shaw_even_table_rows", e, [](Fixture& f) {
    f.shapes.push_back({2, f.kDim});
    f.labels.shape = f.shapes.back().data();
    return f.Shaw();
  });
  add("shaw_table_nan", e, [](Fixture& f) { f.labels_data[4] = kNaN; return f.Shaw(); });
  add("shaw_scores_wrong_shape", e, [](Fixture& f) {
    f.shapes.push_back({3, 2});
    f.scores.shape = f.shapes.back().data();
    return f.Shaw();
  });
  add("shaw_q_width_mismatch", e, [](Fixture& f) {
    f.shapes.push_back({2, 4});
    f.q.shape = f.shapes.back().data();
    return f.Shaw();
  });
  add("shaw_scores_overlap_q", e, [](Fixture& f) { f.scores.data = f.q_data.data(); return f.Shaw(); });
  e = "gpe_shaw_key_scores_backward";
  add("shaw_backward_grad_q_wrong_shape", e, [](Fixture& f) {
    f.shapes.push_back({3, f.kDim});
    f.gq.shape = f.shapes.back().data();
    f.gq_data.resize(3 * f.kDim);
    f.gq.data = f.gq_data.data();
    return f.ShawBackward();
  });
  add("shaw_backward_grad_table_overlaps_q", e, [](Fixture& f) {
    f.q_data.resize(3 * f.kDim);  // room for a [3, 8] grad_label_table starting at q
    f.q.data = f.q_data.data();
    f.gl.data = f.q_data.data();
    return gpe_shaw_key_scores_backward(&f.q, &f.labels, &f.qpos, &f.kpos, &f.scores, nullptr, &f.gl);
  });
  // -- Shifted basis, stable rank, INR --
  e = "gpe_shifted_basis_encode";
  add("shift_options_null", e, [](Fixture& f) { return gpe_shifted_basis_encode(nullptr, &f.coords, &f.psi); });
  add("shift_struct_size_newer", e, [](Fixture& f) { f.shift_opt.struct_size += 8; return f.Shift(); });
  add("shift_kind_unknown", e, [](Fixture& f) { f.shift_opt.kind = 9; return f.Shift(); });
  add("shift_num_shifts_0", e, [](Fixture& f) { f.shift_opt.num_shifts = 0; return f.Shift(); });
  add("shift_width_negative", e, [](Fixture& f) { f.shift_opt.width = -1.0; return f.Shift(); });
  add("shift_lo_not_below_hi", e, [](Fixture& f) { f.shift_opt.lo = 1.0; return f.Shift(); });
  add("shift_coords_nan", e, [](Fixture& f) { f.coords_data[2] = kNaN; return f.Shift(); });
  add("shift_out_wrong_shape", e, [](Fixture& f) {
    return gpe_shifted_basis_encode(&f.shift_opt, &f.coords, &f.image);
  });
  add("shift_out_overlaps_coords", e, [](Fixture& f) {
    f.shapes.push_back({1, 4});
    f.psi.shape = f.shapes.back().data();
    f.psi.data = f.coords_data.data();
    f.shapes.push_back({1});
    f.coords.shape = f.shapes.back().data();
    return f.Shift();
  });
  e = "gpe_stable_rank";
  add("stable_rank_out_null", e, [](Fixture& f) { return gpe_stable_rank(&f.psi, nullptr); });
  add("stable_rank_zero_matrix", e, [](Fixture& f) { return gpe_stable_rank(&f.w, &f.f64); });
  add("stable_rank_nan", e, [](Fixture& f) { f.psi_data[0] = kNaN; return gpe_stable_rank(&f.psi, &f.f64); });
  add("stable_rank_vector", e, [](Fixture& f) { return gpe_stable_rank(&f.coords, &f.f64); });
  add("stable_rank_broadcast", e, [](Fixture& f) {
    // One double standing for a [2^20, 2^20] matrix: refused before an 8 TiB copy.
    f.shapes.push_back({int64_t{1} << 20, int64_t{1} << 20});
    f.psi.shape = f.shapes.back().data();
    f.shapes.push_back({0, 0});
    f.psi.strides = f.shapes.back().data();
    return gpe_stable_rank(&f.psi, &f.f64);
  });
  e = "gpe_inr_fit_separable_2d";
  add("fit_options_null", e, [](Fixture& f) {
    return gpe_inr_fit_separable_2d(nullptr, &f.psi, &f.psi, &f.image, &f.w);
  });
  add("fit_struct_size_newer", e, [](Fixture& f) { f.fit_opt.struct_size += 8; return f.Fit(); });
  add("fit_lambda_negative", e, [](Fixture& f) { f.fit_opt.lambda = -1.0; return f.Fit(); });
  add("fit_rank_deficient", e, [](Fixture& f) {
    f.fit_opt.lambda = 0.0;
    for (int64_t i = 0; i < 5; ++i) f.psi_data[i * 4 + 3] = f.psi_data[i * 4 + 2];  // equal columns
    return f.Fit();
  });
  add("fit_image_wrong_shape", e, [](Fixture& f) {
    return gpe_inr_fit_separable_2d(&f.fit_opt, &f.psi, &f.psi, &f.w, &f.w);
  });
  add("fit_w_wrong_shape", e, [](Fixture& f) {
    return gpe_inr_fit_separable_2d(&f.fit_opt, &f.psi, &f.psi, &f.image, &f.pred);
  });
  e = "gpe_inr_predict_separable_2d";
  add("predict_psi_null", e, [](Fixture& f) { return gpe_inr_predict_separable_2d(nullptr, &f.psi, &f.w, &f.pred); });
  add("predict_w_wrong_shape", e, [](Fixture& f) {
    return gpe_inr_predict_separable_2d(&f.psi, &f.psi, &f.image, &f.pred);
  });
  add("predict_out_wrong_shape", e, [](Fixture& f) {
    return gpe_inr_predict_separable_2d(&f.psi, &f.psi, &f.w, &f.w);
  });
  AddCases03(add);
  RopePoolAndAttentionOptionCases(add);
  SequenceCases(add);
  InrSolverCases(add);
  // -- Attention: structured positions and Shaw labels --
  e = "gpe_attention_forward";
  add("attn_struct_size_small", e, [](Fixture& f) { f.attn.opt.struct_size = 16; return f.attn.Forward(); });
  add("attn_struct_size_torn", e, [](Fixture& f) {
    // Ends inside the pointer rope_sections (set): its low half alone would be read.
    f.attn.opt.struct_size = offsetof(gpe_attention_options, rope_sections) + 4;
    f.attn.opt.rope_sections = &f.attn.t_sections;
    return f.attn.Forward();
  });
  add("attn_struct_size_newer", e, [](Fixture& f) {
    f.attn.opt.struct_size = sizeof(gpe_attention_options) + 8;
    return f.attn.Forward();
  });
  add("attn_axes_one_side", e, [](Fixture& f) { f.attn.opt.k_axes = nullptr; return f.attn.Forward(); });
  add("attn_axes_count_differs", e, [](Fixture& f) { f.attn.opt.k_axes = &f.attn.t_bad_axes; return f.attn.Forward(); });
  add("attn_axes_not_rope_axes", e, [](Fixture& f) {
    f.attn.opt.q_axes = f.attn.opt.k_axes = &f.attn.t_bad_axes;
    return f.attn.Forward();
  });
  add("attn_rope_axes_out_of_range", e, [](Fixture& f) { f.attn.opt.rope_axes = 5; return f.attn.Forward(); });
  add("attn_rope_axes_without_rope_dim", e, [](Fixture& f) { f.attn.opt.rope_dim = 0; return f.attn.Forward(); });
  add("attn_mrope_sections_sum", e, [](Fixture& f) {
    f.attn.sections = {1, 2};  // 3 planes, rope_dim / 2 = 4
    f.attn.opt.rope_axes = 0;
    f.attn.opt.rope_sections = &f.attn.t_sections;
    return f.attn.Forward();
  });
  add("attn_structured_without_encoding", e, [](Fixture& f) {
    f.attn.opt.rope_dim = 0;
    f.attn.opt.rope_axes = 0;
    return f.attn.Forward();
  });
  add("attn_tree_partial", e, [](Fixture& f) {
    f.attn.UseTree();
    f.attn.opt.k_tree_children = nullptr;
    return f.attn.Forward();
  });
  add("attn_tree_offsets_decrease", e, [](Fixture& f) {
    f.attn.UseTree();
    f.attn.tree_off = {0, 2, 1, 2, 4};
    return f.attn.Forward();
  });
  add("attn_tree_child_out_of_range", e, [](Fixture& f) {
    f.attn.UseTree();
    f.attn.tree_ch = {0, 1, 2, 0};  // a binary tree has children 0 and 1
    return f.attn.Forward();
  });
  add("attn_tree_without_addresses", e, [](Fixture& f) {
    f.attn.UseTree();
    f.attn.opt.q_tree_offsets = f.attn.opt.k_tree_offsets = nullptr;
    f.attn.opt.q_tree_children = f.attn.opt.k_tree_children = nullptr;
    return f.attn.Forward();
  });
  add("attn_tree_skew_not_skew", e, [](Fixture& f) {
    f.attn.UseTree();
    f.attn.tree_skew[1] = 1.0;  // S[0][1] = 1, S[1][0] = 0
    return f.attn.Forward();
  });
  add("attn_two_encodings", e, [](Fixture& f) { f.attn.opt.algebraic_grid = &f.attn.t_grid; return f.attn.Forward(); });
  add("attn_grid_head_dim", e, [](Fixture& f) {
    f.attn.opt.rope_dim = 0;
    f.attn.opt.rope_axes = 0;
    f.attn.shapes.push_back({2, 2, 2});
    f.attn.t_grid.shape = f.attn.shapes.back().data();  // 2 axes x 2 != head_dim 8
    f.attn.opt.algebraic_grid = &f.attn.t_grid;
    return f.attn.Forward();
  });
  add("attn_shaw_distance_negative", e, [](Fixture& f) { f.attn.opt.shaw_max_distance = -1; return f.attn.Forward(); });
  add("attn_shaw_table_shape", e, [](Fixture& f) { f.attn.opt.shaw_max_distance = 2; return f.attn.Forward(); });
  add("attn_shaw_table_nan", e, [](Fixture& f) { f.attn.table[5] = kNaN; return f.attn.Forward(); });
  // A broadcast table (stride 0 over its 2^30 + 1 rows) would be copied into 64 GiB.
  add("attn_shaw_table_broadcast", e, [](Fixture& f) {
    f.attn.opt.shaw_max_distance = int64_t{1} << 29;
    f.attn.shapes.push_back({(int64_t{1} << 30) + 1, AttentionInputs::kD});
    f.attn.t_table.shape = f.attn.shapes.back().data();
    f.attn.shapes.push_back({0, 1});  // the strides
    f.attn.t_table.strides = f.attn.shapes.back().data();
    return f.attn.Forward();
  });
  e = "gpe_attention_backward_v2";
  add("attn_v2_table_grad_without_table", e, [](Fixture& f) {
    f.attn.opt.shaw_value_table = nullptr;
    return f.attn.BackwardV2(nullptr, &f.attn.t_gtable);
  });
  add("attn_v2_table_grad_shape", e, [](Fixture& f) {
    f.attn.shapes.push_back({2, AttentionInputs::kD});
    f.attn.t_gtable.shape = f.attn.shapes.back().data();
    return f.attn.BackwardV2(&f.attn.t_gtable, nullptr);
  });
  add("fit_rcond_negative", "gpe_inr_fit_separable_2d", [](Fixture& f) { f.fit_opt.rcond = -1e-3; return f.Fit(); });
  add("fit_rcond_one", "gpe_inr_fit_separable_2d", [](Fixture& f) { f.fit_opt.rcond = 1.0; return f.Fit(); });
  // Finite image values beyond float32's range (issue 24): the float32 products would
  // hold inf and W inf and NaN; refused instead of returned with GPE_OK.
  add("fit_float32_image_overflow", "gpe_inr_fit_separable_2d", [](Fixture& f) {
    for (int64_t i = 0; i < 5; ++i) f.psi_data[i * 4 + i % 4] = 1.0;
    f.image_data.assign(25, 1e39);
    f.fit_opt.float32_image_products = 1;
    return f.Fit();
  });
  e = "gpe_inr_condition_number";
  add("cond_out_null", e, [](Fixture& f) { return gpe_inr_condition_number(&f.psi, nullptr); });
  add("cond_psi_nan", e, [](Fixture& f) { f.psi_data[3] = kNaN; return gpe_inr_condition_number(&f.psi, &f.f64); });
  add("cond_psi_empty", e, [](Fixture& f) {
    f.shapes.push_back({0, 4});
    f.psi.shape = f.shapes.back().data();
    return gpe_inr_condition_number(&f.psi, &f.f64);
  });

  e = "gpe_inr_fit_separable_3d";
  add("fit3d_options_null", e, [](Fixture& f) {
    return gpe_inr_fit_separable_3d(nullptr, &f.psi, &f.psi, &f.psi, &f.vol, &f.w3);
  });
  add("fit3d_volume_2d", e, [](Fixture& f) {
    return gpe_inr_fit_separable_3d(&f.fit_opt, &f.psi, &f.psi, &f.psi, &f.image, &f.w3);
  });
  add("fit3d_volume_wrong_shape", e, [](Fixture& f) {
    f.shapes.push_back({5, 5, 4});
    f.vol.shape = f.shapes.back().data();
    return f.Fit3D();
  });
  add("fit3d_volume_nan", e, [](Fixture& f) { f.vol_data[17] = kNaN; return f.Fit3D(); });
  add("fit3d_rank_deficient", e, [](Fixture& f) {
    f.fit_opt.lambda = 0.0;
    for (int64_t i = 0; i < 5; ++i) f.psi_data[i * 4 + 3] = f.psi_data[i * 4 + 2];  // equal columns
    return f.Fit3D();
  });
  add("fit3d_w_wrong_shape", e, [](Fixture& f) {
    return gpe_inr_fit_separable_3d(&f.fit_opt, &f.psi, &f.psi, &f.psi, &f.vol, &f.vol);
  });
  e = "gpe_inr_predict_separable_3d";
  add("predict3d_w_wrong_shape", e, [](Fixture& f) {
    return gpe_inr_predict_separable_3d(&f.psi, &f.psi, &f.psi, &f.vol, &f.vol);
  });
  add("predict3d_out_wrong_shape", e, [](Fixture& f) {
    return gpe_inr_predict_separable_3d(&f.psi, &f.psi, &f.psi, &f.w3, &f.w3);
  });
  // Found by the libFuzzer target: the copy of an empty W walked its 2^39 index space.
  add("predict3d_w_empty_huge", e, [](Fixture& f) {
    f.shapes.push_back({int64_t{1} << 20, int64_t{1} << 19, 0});
    f.w3.shape = f.shapes.back().data();
    return gpe_inr_predict_separable_3d(&f.psi, &f.psi, &f.psi, &f.w3, &f.vol);
  });
  e = "gpe_inr_fit_blended_2d";
  add("blend_options_null", e, [](Fixture& f) {
    return gpe_inr_fit_blended_2d(nullptr, f.axis1, f.axis1, &f.coords, &f.coords, &f.bpts, &f.bvals,
                                  &f.bw, nullptr, nullptr);
  });
  add("blend_struct_size_newer", e, [](Fixture& f) { f.blend_opt.struct_size += 8; return f.Blend(); });
  add("blend_max_iterations_0", e, [](Fixture& f) { f.blend_opt.max_iterations = 0; return f.Blend(); });
  add("blend_lambda_negative", e, [](Fixture& f) { f.blend_opt.lambda = -1.0; return f.Blend(); });
  add("blend_encoder_null", e, [](Fixture& f) {
    return gpe_inr_fit_blended_2d(&f.blend_opt, nullptr, f.axis1, &f.coords, &f.coords, &f.bpts,
                                  &f.bvals, &f.bw, nullptr, nullptr);
  });
  add("blend_encoder_not_1d", e, [](Fixture& f) {
    return gpe_inr_fit_blended_2d(&f.blend_opt, f.axis1, f.fourier, &f.coords, &f.coords, &f.bpts,
                                  &f.bvals, &f.bw, nullptr, nullptr);
  });
  add("blend_grid_not_increasing", e, [](Fixture& f) { f.coords_data[3] = 0.2; return f.Blend(); });
  add("blend_grid_broadcast", e, [](Fixture& f) {
    // One double standing for 2^40 grid entries: refused before the copy.
    static int64_t zero_stride = 0;
    static int64_t huge[1] = {int64_t{1} << 40};
    DLTensor g = f.coords;
    g.shape = huge;
    g.strides = &zero_stride;
    return gpe_inr_fit_blended_2d(&f.blend_opt, f.axis1, f.axis1, &g, &f.coords, &f.bpts,
                                  &f.bvals, &f.bw, nullptr, nullptr);
  });
  add("blend_point_outside_grid", e, [](Fixture& f) { f.bpts_data[4] = 0.95; return f.Blend(); });
  add("blend_points_nan", e, [](Fixture& f) { f.bpts_data[1] = kNaN; return f.Blend(); });
  add("blend_points_wrong_width", e, [](Fixture& f) {
    return gpe_inr_fit_blended_2d(&f.blend_opt, f.axis1, f.axis1, &f.coords, &f.coords, &f.psi,
                                  &f.bvals, &f.bw, nullptr, nullptr);
  });
  add("blend_values_wrong_length", e, [](Fixture& f) {
    return gpe_inr_fit_blended_2d(&f.blend_opt, f.axis1, f.axis1, &f.coords, &f.coords, &f.bpts,
                                  &f.coords, &f.bw, nullptr, nullptr);
  });
  add("blend_w_wrong_shape", e, [](Fixture& f) {
    return gpe_inr_fit_blended_2d(&f.blend_opt, f.axis1, f.axis1, &f.coords, &f.coords, &f.bpts,
                                  &f.bvals, &f.image, nullptr, nullptr);
  });
  e = "gpe_inr_predict_blended_2d";
  add("pblend_w_wrong_shape", e, [](Fixture& f) {
    return gpe_inr_predict_blended_2d(f.axis1, f.axis1, &f.coords, &f.coords, &f.bpts, &f.image, &f.bout);
  });
  add("pblend_out_wrong_shape", e, [](Fixture& f) {
    return gpe_inr_predict_blended_2d(f.axis1, f.axis1, &f.coords, &f.coords, &f.bpts, &f.bw, &f.lvals);
  });

  // -- Coordinate encoders, graph encodings, embedder analysis (src/coordinate/, analysis/) --
  e = "gpe_fourier_features_create";
  add("ff_out_null", e, [](Fixture& f) { return gpe_fourier_features_create(&f.ff_opt, nullptr); });
  add("ff_options_null", e, [](Fixture& f) { return gpe_fourier_features_create(nullptr, &f.made); });
  add("ff_struct_size_newer", e, [](Fixture& f) { f.ff_opt.struct_size += 8; return f.FourierCreate(); });
  add("ff_kind_unknown", e, [](Fixture& f) { f.ff_opt.kind = 5; return f.FourierCreate(); });
  add("ff_num_frequencies_0", e, [](Fixture& f) { f.ff_opt.num_frequencies = 0; return f.FourierCreate(); });
  add("ff_dim_huge", e, [](Fixture& f) { f.ff_opt.dim = kHuge; return f.FourierCreate(); });
  add("ff_scale_nan", e, [](Fixture& f) { f.ff_opt.scale = kNaN; return f.FourierCreate(); });
  add("ff_gaussian_scale_0", e, [](Fixture& f) { f.ff_opt.scale = 0.0; return f.FourierCreate(); });
  add("ff_convention_unknown", e, [](Fixture& f) { f.ff_opt.convention = 2; return f.FourierCreate(); });
  add("ff_txt_dim_3", e, [](Fixture& f) {
    f.ff_opt.kind = GPE_FOURIER_TXT;
    f.ff_opt.dim = 3;
    return f.FourierCreate();
  });
  // Each size within its own limit, the [dim K, dim] frequency matrix 2^60 entries.
  add("ff_entries_huge", e, [](Fixture& f) {
    f.ff_opt.kind = GPE_FOURIER_LINEAR;
    f.ff_opt.dim = int64_t{1} << 20;
    f.ff_opt.num_frequencies = int64_t{1} << 20;
    return f.FourierCreate();
  });
  e = "gpe_fourier_features_create_from_frequencies";
  add("fff_frequencies_inf", e, [](Fixture& f) {
    f.freq_data[1] = kInf;
    return gpe_fourier_features_create_from_frequencies(&f.freq, GPE_FREQUENCY_TWO_PI, &f.made);
  });
  add("fff_frequencies_empty", e, [](Fixture& f) {
    f.shapes.push_back({0, 2});
    f.freq.shape = f.shapes.back().data();
    return gpe_fourier_features_create_from_frequencies(&f.freq, GPE_FREQUENCY_TWO_PI, &f.made);
  });
  add("fff_convention_unknown", e, [](Fixture& f) {
    return gpe_fourier_features_create_from_frequencies(&f.freq, -1, &f.made);
  });
  e = "gpe_fourier_features_angular_frequencies";
  add("ffw_not_fourier", e, [](Fixture& f) { return gpe_fourier_features_angular_frequencies(f.harmonics, &f.pts); });
  add("ffw_out_wrong_shape", e, [](Fixture& f) { return gpe_fourier_features_angular_frequencies(f.fourier, &f.feat); });
  e = "gpe_coordinate_encoder_dims";
  add("dims_encoder_null", e, [](Fixture& f) { return gpe_coordinate_encoder_dims(nullptr, &f.i64, &f.j64); });
  e = "gpe_coordinate_encode";
  add("encode_encoder_null", e, [](Fixture& f) { return gpe_coordinate_encode(nullptr, &f.pts, &f.feat); });
  add("encode_points_nan", e, [](Fixture& f) { f.pts_data[3] = kNaN; return f.Encode(); });
  add("encode_points_empty", e, [](Fixture& f) {
    f.shapes.push_back({0, 2});
    f.pts.shape = f.shapes.back().data();
    return f.Encode();
  });
  add("encode_points_wrong_width", e, [](Fixture& f) { return gpe_coordinate_encode(f.fourier, &f.cd, &f.feat); });
  add("encode_points_int64", e, [](Fixture& f) { return gpe_coordinate_encode(f.fourier, &f.ledges, &f.feat); });
  add("encode_features_wrong_shape", e, [](Fixture& f) { return gpe_coordinate_encode(f.fourier, &f.pts, &f.gpts); });
  add("encode_features_overlap_points", e, [](Fixture& f) {
    f.pts_data.resize(32, 0.3);
    f.pts.data = f.feat.data = f.pts_data.data();
    return f.Encode();
  });
  add("encode_harmonics_zero_direction", e, [](Fixture& f) {
    f.pts_data.assign(12, 0.0);  // [4, 3] zero vectors: no direction
    f.shapes.push_back({4, 3});
    f.pts.shape = f.shapes.back().data();
    f.pts.data = f.pts_data.data();
    return gpe_coordinate_encode(f.harmonics, &f.pts, &f.cd);
  });
  add("encode_so2_negative_radius", e, [](Fixture& f) {
    f.pts_data[2] = -0.5;  // point 1: (r, theta) = (-0.5, 0.3)
    return gpe_coordinate_encode(f.so2, &f.pts, &f.cd);
  });
  e = "gpe_coordinate_backward";
  add("backward_grad_wrong_shape", e, [](Fixture& f) {
    return gpe_coordinate_backward(f.fourier, &f.pts, &f.cd, &f.gpts);
  });
  add("backward_grad_nan", e, [](Fixture& f) { f.gfeat_data[5] = kNaN; return f.Backward(); });
  add("backward_grad_points_wrong_shape", e, [](Fixture& f) {
    return gpe_coordinate_backward(f.fourier, &f.pts, &f.gfeat, &f.lvals);
  });
  add("backward_grad_points_overlap_grad", e, [](Fixture& f) {
    f.gpts.data = f.gfeat_data.data();
    return f.Backward();
  });
  e = "gpe_so2_bessel_create_sampled";
  add("so2_options_null", e, [](Fixture& f) { return gpe_so2_bessel_create_sampled(nullptr, &f.made); });
  add("so2_struct_size_newer", e, [](Fixture& f) { f.so2_opt.struct_size += 8; return f.So2Sampled(); });
  add("so2_polar_2", e, [](Fixture& f) { f.so2_opt.polar = 2; return f.So2Sampled(); });
  add("so2_num_terms_0", e, [](Fixture& f) { f.so2_opt.num_terms = 0; return f.So2Sampled(); });
  add("so2_max_k_1", e, [](Fixture& f) { f.so2_opt.max_k = 1; return f.So2Sampled(); });
  add("so2_order_21", e, [](Fixture& f) { f.so2_opt.order_m = 21; return f.So2Sampled(); });
  add("so2_max_scale_inf", e, [](Fixture& f) { f.so2_opt.max_scale = kInf; return f.So2Sampled(); });
  e = "gpe_so2_bessel_create";
  add("so2e_lengths_differ", e, [](Fixture& f) { return gpe_so2_bessel_create(&f.so2m, &f.bx, &f.so2k, 0, &f.made); });
  add("so2e_scale_negative", e, [](Fixture& f) { f.so2c_data[1] = -1.0; return f.So2Explicit(); });
  add("so2e_order_negative", e, [](Fixture& f) { f.so2m_data[0] = -1; return f.So2Explicit(); });
  add("so2e_weight_huge", e, [](Fixture& f) { f.so2k_data[0] = int64_t{1} << 40; return f.So2Explicit(); });
  add("so2e_empty", e, [](Fixture& f) {
    f.shapes.push_back({0});
    f.so2m.shape = f.so2c.shape = f.so2k.shape = f.shapes.back().data();
    return f.So2Explicit();
  });
  add("so2e_orders_float", e, [](Fixture& f) { return gpe_so2_bessel_create(&f.so2c, &f.so2c, &f.so2k, 0, &f.made); });
  e = "gpe_so2_bessel_terms";
  add("so2t_not_so2", e, [](Fixture& f) { return gpe_so2_bessel_terms(f.fourier, &f.so2m, nullptr, nullptr); });
  add("so2t_wrong_shape", e, [](Fixture& f) { return gpe_so2_bessel_terms(f.so2, nullptr, &f.bx, nullptr); });
  e = "gpe_bessel_j";
  add("bessel_x_negative", e, [](Fixture& f) { f.bx_data[1] = -1.0; return gpe_bessel_j(0, &f.bx, &f.bo); });
  add("bessel_x_nan", e, [](Fixture& f) { f.bx_data[2] = kNaN; return gpe_bessel_j(0, &f.bx, &f.bo); });
  add("bessel_order_21", e, [](Fixture& f) { return gpe_bessel_j(21, &f.bx, &f.bo); });
  add("bessel_out_wrong_shape", e, [](Fixture& f) { return gpe_bessel_j(0, &f.bx, &f.lvals); });
  e = "gpe_shifted_encoder_create";
  add("shenc_out_null", e, [](Fixture& f) { return gpe_shifted_encoder_create(GPE_SHIFTED_SIMPLE, f.sh_axes, 2, nullptr); });
  add("shenc_form_unknown", e, [](Fixture& f) { return gpe_shifted_encoder_create(2, f.sh_axes, 2, &f.made); });
  add("shenc_axes_null", e, [](Fixture& f) { return gpe_shifted_encoder_create(GPE_SHIFTED_SIMPLE, nullptr, 2, &f.made); });
  add("shenc_num_axes_0", e, [](Fixture& f) { return gpe_shifted_encoder_create(GPE_SHIFTED_SIMPLE, f.sh_axes, 0, &f.made); });
  add("shenc_axis_width_negative", e, [](Fixture& f) { f.sh_axes[1].width = -0.3; return f.ShiftedEncoder(); });
  add("shenc_axis_kind_unknown", e, [](Fixture& f) { f.sh_axes[0].kind = 6; return f.ShiftedEncoder(); });
  add("shenc_axis_struct_size_small", e, [](Fixture& f) { f.sh_axes[1].struct_size = 8; return f.ShiftedEncoder(); });
  add("shenc_complex_too_many_features", e, [](Fixture& f) {
    for (gpe_shifted_basis_options& a : f.sh_axes) a.num_shifts = 1 << 14;  // 2^28 > 2^26
    return f.ShiftedEncoder();
  });
  e = "gpe_spherical_harmonics_create";
  add("sh_out_null", e, [](Fixture&) { return gpe_spherical_harmonics_create(2, nullptr); });
  add("sh_degree_65", e, [](Fixture& f) { return gpe_spherical_harmonics_create(65, &f.made); });
  add("sh_degree_negative", e, [](Fixture& f) { return gpe_spherical_harmonics_create(-1, &f.made); });
  e = "gpe_laplacian_eigenvectors";
  add("lap_options_null", e, [](Fixture& f) {
    return gpe_laplacian_eigenvectors(nullptr, 4, &f.ledges, &f.lw, &f.lvals, &f.lvecs);
  });
  add("lap_struct_size_newer", e, [](Fixture& f) { f.lap_opt.struct_size += 8; return f.Laplacian(); });
  add("lap_kind_unknown", e, [](Fixture& f) { f.lap_opt.kind = 2; return f.Laplacian(); });
  add("lap_num_nodes_0", e, [](Fixture& f) {
    return gpe_laplacian_eigenvectors(&f.lap_opt, 0, &f.ledges, &f.lw, &f.lvals, &f.lvecs);
  });
  add("lap_num_nodes_too_many", e, [](Fixture& f) {
    f.lvecs_data.assign(5000 * 2, 0.0);  // [5000, 2]: above the dense solver's 4096 nodes
    f.lvecs = f.F64(&f.lvecs_data, {5000, 2});
    return gpe_laplacian_eigenvectors(&f.lap_opt, 5000, &f.ledges, &f.lw, &f.lvals, &f.lvecs);
  });
  add("lap_edge_out_of_range", e, [](Fixture& f) { f.ledges_data[3] = 4; return f.Laplacian(); });
  add("lap_self_loop", e, [](Fixture& f) { f.ledges_data[1] = 0; return f.Laplacian(); });
  add("lap_weight_zero", e, [](Fixture& f) { f.lw_data[2] = 0.0; return f.Laplacian(); });
  add("lap_weight_nan", e, [](Fixture& f) { f.lw_data[2] = kNaN; return f.Laplacian(); });
  add("lap_weights_wrong_length", e, [](Fixture& f) {
    return gpe_laplacian_eigenvectors(&f.lap_opt, 4, &f.ledges, &f.bx, &f.lvals, &f.lvecs);
  });
  add("lap_edges_wrong_width", e, [](Fixture& f) {
    f.shapes.push_back({2, 4});
    f.ledges.shape = f.shapes.back().data();
    return f.Laplacian();
  });
  add("lap_eigenvalues_zero_stride", e, [](Fixture& f) {
    // Both eigenvalues into one element: refused before the solve writes anything.
    f.shapes.push_back({0});
    f.lvals.strides = f.shapes.back().data();
    return f.Laplacian();
  });
  add("lap_eigenvalues_empty", e, [](Fixture& f) {
    f.shapes.push_back({0});
    f.lvals.shape = f.shapes.back().data();
    return f.Laplacian();
  });
  add("lap_k_above_num_nodes", e, [](Fixture& f) {
    f.lap_opt.skip_first = 1;  // k = 4 pairs after skipping one needs 5 > 4 nodes
    return gpe_laplacian_eigenvectors(&f.lap_opt, 4, &f.ledges, nullptr, &f.lw, &f.cd);
  });
  add("lap_eigenvectors_wrong_shape", e, [](Fixture& f) {
    return gpe_laplacian_eigenvectors(&f.lap_opt, 4, &f.ledges, &f.lw, &f.lvals, &f.cd);
  });
  e = "gpe_embedded_distance_matrix";
  add("edm_spacing_0", e, [](Fixture& f) { return gpe_embedded_distance_matrix(&f.feat, 0.0, &f.cd); });
  add("edm_features_nan", e, [](Fixture& f) { f.feat_data[9] = kNaN; return gpe_embedded_distance_matrix(&f.feat, 1.0, &f.cd); });
  add("edm_out_wrong_shape", e, [](Fixture& f) { return gpe_embedded_distance_matrix(&f.feat, 1.0, &f.lvecs); });
  add("edm_features_empty", e, [](Fixture& f) {
    f.shapes.push_back({4, 0});
    f.feat.shape = f.shapes.back().data();
    return gpe_embedded_distance_matrix(&f.feat, 1.0, &f.cd);
  });
  e = "gpe_embedder_stable_rank";
  add("esr_out_null", e, [](Fixture&) { return gpe_embedder_stable_rank(GPE_EMBEDDER_GAUSSIAN, 0.1, 10, nullptr); });
  add("esr_embedder_unknown", e, [](Fixture& f) { return gpe_embedder_stable_rank(4, 0.1, 10, &f.f64); });
  add("esr_parameter_negative", e, [](Fixture& f) { return gpe_embedder_stable_rank(GPE_EMBEDDER_TRIANGLE, -0.1, 10, &f.f64); });
  add("esr_num_points_0", e, [](Fixture& f) { return gpe_embedder_stable_rank(GPE_EMBEDDER_RFF, 2.0, 0, &f.f64); });
  e = "gpe_embedder_distance";
  add("ed_out_null", e, [](Fixture&) { return gpe_embedder_distance(GPE_EMBEDDER_GAUSSIAN, 0.1, 0.0, nullptr); });
  add("ed_delta_nan", e, [](Fixture& f) { return gpe_embedder_distance(GPE_EMBEDDER_GAUSSIAN, 0.1, kNaN, &f.f64); });
  add("ed_width_0", e, [](Fixture& f) { return gpe_embedder_distance(GPE_EMBEDDER_RECTANGLE, 0.0, 0.1, &f.f64); });
  return c;
}

// The attention cases corrupt a valid call: check that it is valid.
TEST(BadInputs, AttentionBaselinesAreValid) {
  AttentionInputs a;
  EXPECT_EQ(a.Forward(), GPE_OK) << gpe_last_error_message();
  EXPECT_EQ(a.BackwardV2(&a.t_gtable, nullptr), GPE_OK) << gpe_last_error_message();
  AttentionInputs t;
  t.UseTree();
  EXPECT_EQ(t.Forward(), GPE_OK) << gpe_last_error_message();
  AttentionInputs g;
  g.opt.rope_dim = 0;
  g.opt.rope_axes = 0;
  g.opt.algebraic_grid = &g.t_grid;
  EXPECT_EQ(g.Forward(), GPE_OK) << gpe_last_error_message();
  AttentionInputs m;
  m.opt.rope_axes = 0;
  m.opt.rope_sections = &m.t_sections;
  EXPECT_EQ(m.Forward(), GPE_OK) << gpe_last_error_message();
}

// The 0.3.0 cases corrupt valid calls: check that they are valid.
TEST(BadInputs, Baselines03AreValid) {
  Fixture03 f;
  EXPECT_EQ(f.RopeCreate(), GPE_OK) << gpe_last_error_message();
  EXPECT_EQ(f.RopeForward(), GPE_OK) << gpe_last_error_message();
  EXPECT_EQ(f.BiasCreate(f.t5_opt, gpe_bias_create_t5), GPE_OK) << gpe_last_error_message();
  EXPECT_EQ(f.BiasCreate(f.ap_opt, gpe_bias_create_grape_ap), GPE_OK) << gpe_last_error_message();
  EXPECT_EQ(gpe_bias_fill_tile(f.fox, 0, &f.tq_t, &f.tk_t, &f.tile_t), GPE_OK)
      << gpe_last_error_message();
  EXPECT_EQ(f.Forward(), GPE_OK) << gpe_last_error_message();
  EXPECT_EQ(f.Backward(), GPE_OK) << gpe_last_error_message();
}

// Found by the libFuzzer target: RoPE of an empty batch of 2^39 sequences walked every
// sequence (minutes); it has nothing to rotate and must return at once. A regression
// shows as this test's timeout.
TEST(BadInputs, EmptyRopeBatchIsNotWalked) {
  Fixture03 f;
  f.shapes.push_back({int64_t{1} << 39, 0, 2, 8});
  f.x.shape = f.y.shape = f.shapes.back().data();
  EXPECT_EQ(f.RopeForward(), GPE_OK) << gpe_last_error_message();
  EXPECT_EQ(gpe_rope_backward(f.rope, &f.tokens, &f.x, &f.y), GPE_OK) << gpe_last_error_message();
}

struct Row {
  int line;
  std::string entry, id, status;
};

std::string Unquote(std::string s) {
  const size_t a = s.find_first_not_of(" `"), b = s.find_last_not_of(" `");
  return a == std::string::npos ? "" : s.substr(a, b - a + 1);
}

// Table rows: "| `entry` | `case` | description | `STATUS` |".
std::vector<Row> ReadTable(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "cannot read " << path;
  std::vector<Row> rows;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (line.rfind("| `gpe_", 0) != 0) continue;
    // Cells split at '|', except GitHub's escaped "\|" inside a message.
    std::vector<std::string> cells(1);
    for (size_t i = 1; i < line.size(); ++i) {
      if (line[i] == '\\' && i + 1 < line.size() && line[i + 1] == '|') {
        cells.back() += '|';
        ++i;
      } else if (line[i] == '|') {
        cells.emplace_back();
      } else {
        cells.back() += line[i];
      }
    }
    if (!cells.empty() && cells.back().empty()) cells.pop_back();
    EXPECT_GE(cells.size(), 4u) << path << ":" << n << ": expected 4 cells";
    if (cells.size() < 4) continue;
    rows.push_back({n, Unquote(cells[0]), Unquote(cells[1]), Unquote(cells[3])});
  }
  return rows;
}

TEST(BadInputs, EveryTableRowIsFedAndGivesItsStatus) {
  const std::map<std::string, Case> cases = Cases();
  const std::vector<Row> rows = ReadTable(g_table_path);
  ASSERT_GT(rows.size(), 50u) << "BAD_INPUTS.md's table looks truncated";
  std::set<std::string> seen;
  for (const Row& r : rows) {
    SCOPED_TRACE("BAD_INPUTS.md:" + std::to_string(r.line) + " " + r.id);
    EXPECT_TRUE(seen.insert(r.id).second) << "case listed twice";
    auto it = cases.find(r.id);
    if (it == cases.end()) {
      ADD_FAILURE() << "no case named " << r.id << " in bad_inputs_test.cc";
      continue;
    }
    EXPECT_EQ(it->second.entry, r.entry) << "the row names the wrong entry point";
    gpe_status got = -1;
    std::string message = "unset";
    // A fresh thread: its message is "" until this call fails.
    std::thread([&] {
      auto f = std::make_unique<Fixture>();
      got = it->second.run(*f);
      message = gpe_last_error_message();
    }).join();
    EXPECT_STREQ(gpe_status_name(got), r.status.c_str());
    EXPECT_FALSE(message.empty()) << "no error message";
  }
  for (const auto& [id, c] : cases) {
    EXPECT_TRUE(seen.count(id)) << "case " << id << " (" << c.entry << ") has no row in BAD_INPUTS.md";
  }
}

// Some refusals whose status was already right named the wrong thing: the message must
// name the field at fault.
TEST(BadInputs, MessagesNameTheFieldAtFault) {
  const std::map<std::string, Case> cases = Cases();
  const struct {
    const char* id;
    const char* want;
    const char* not_want;
  } checks[] = {
      // o's dtype (float64 for float32 q): the shapes alone were printed, equal.
      {"attention_o_float64_for_float32_q", "got float64 [1, 4, 2, 8]", nullptr},
      // cu_seqlens_q out of order reported as a mask extent of 2^63 - 1.
      {"attention_packed_mask_cu_seqlens_decreasing", "cu_seqlens_q must be non-decreasing",
       "attn_mask"},
      // `like` (never read) was called an output.
      {"rope_table_like_zero_stride", "like is not read", "outputs must not overlap"},
      {"attention_softcap_above_bound", "a larger cap is no cap", nullptr},
      {"attention_struct_size_between_versions", "104, 208, 256, 280, 288", nullptr},
      {"attention_params_struct_size_between_versions", "64, 72, 96", nullptr},
      {"attention_sinks_broadcast", "sinks has more than 2^24 entries", nullptr},
      {"attention_block_table_overlapping_strides", "block_table has more than 2^24 entries", nullptr},
      {"rope_forward_attention_factor_overflows", "attention factor", nullptr},
  };
  for (const auto& c : checks) {
    SCOPED_TRACE(c.id);
    auto it = cases.find(c.id);
    ASSERT_NE(it, cases.end());
    std::string message;
    std::thread([&] {
      auto f = std::make_unique<Fixture>();
      (void)it->second.run(*f);
      message = gpe_last_error_message();
    }).join();
    EXPECT_NE(message.find(c.want), std::string::npos) << message;
    if (c.not_want != nullptr) {
      EXPECT_EQ(message.find(c.not_want), std::string::npos) << message;
    }
  }
}

// Prints the observed table (to write or refresh BAD_INPUTS.md by hand).
TEST(BadInputs, PrintObserved) {
  if (std::getenv("GPE_PRINT_BAD_INPUTS") == nullptr) GTEST_SKIP() << "set GPE_PRINT_BAD_INPUTS=1";
  for (const auto& [id, c] : Cases()) {
    gpe_status got = -1;
    std::string message;
    std::thread([&] {
      auto f = std::make_unique<Fixture>();
      got = c.run(*f);
      message = gpe_last_error_message();
    }).join();
    std::printf("| `%s` | `%s` | %s | `%s` |\n", c.entry.c_str(), id.c_str(), message.c_str(),
                gpe_status_name(got));
  }
}

}  // namespace

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  if (argc > 1) g_table_path = argv[1];
  return RUN_ALL_TESTS();
}
