// Keeps c_api/BAD_INPUTS.md true: every row of its table names a case below; the test
// feeds that bad input to the named entry point (through gpe.h only, on a fresh thread
// so the error message starts empty) and asserts the status in the row and a non-empty
// message. A case without a row, or a row without a case, fails too.
//
// Usage (Bazel passes it): bad_inputs_test <path to BAD_INPUTS.md>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "gpe/gpe.h"
#include "gtest/gtest.h"

namespace {

std::string g_table_path;  // argv[1]

// Valid inputs for every entry point; each case corrupts one thing in a fresh copy.
struct Fixture {
  std::deque<std::vector<int64_t>> shapes;  // stable addresses for DLTensor::shape
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
  int64_t i64 = 0, j64 = 0;
  double f64 = 0.0;
  std::vector<int64_t> qpos_data = {0, 5}, kpos_data = {1, 2, 9};

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
  }
  ~Fixture() {
    gpe_so_rep_destroy(rep);
    gpe_so_rep_destroy(created);
    gpe_grape_m_destroy(grape);
    gpe_algebraic_sequence_destroy(alg);
    gpe_learned_positions_destroy(learned);
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
};

using Run = std::function<gpe_status(Fixture&)>;
struct Case {
  std::string entry;
  Run run;
};

const double kNaN = std::numeric_limits<double>::quiet_NaN();
const double kInf = std::numeric_limits<double>::infinity();
constexpr int64_t kHuge = int64_t{1} << 21;  // above kMaxDim = 2^20

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
  add("grape_a_nan", e, [](Fixture& f) { f.ab[3] = kNaN; return f.GrapeCreate(); });
  e = "gpe_grape_m_shape";
  add("grape_shape_handle_null", e, [](Fixture& f) { return gpe_grape_m_shape(nullptr, &f.i64, &f.j64); });
  e = "gpe_grape_m_apply";
  add("grape_apply_wrong_dim", e, [](Fixture& f) {
    f.shapes.push_back({f.kN, 4});
    f.x.shape = f.out.shape = f.shapes.back().data();
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
  SequenceCases(add);
  return c;
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
    std::vector<std::string> cells;
    std::stringstream ss(line.substr(1));
    for (std::string cell; std::getline(ss, cell, '|');) cells.push_back(cell);
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
