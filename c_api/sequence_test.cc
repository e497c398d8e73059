// Tests of the C ABI's sequence encodings through gpe.h only: results against direct
// formulas (independent loops and a Taylor-series matrix exponential), backward passes
// against central finite differences in double, and bad input rejected with a code and
// a message.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "c_api/test_util.h"
#include "gpe/gpe.h"
#include "gtest/gtest.h"

namespace {

using gpe::c_api_test::CentralDifference;
using gpe::c_api_test::Random;
using gpe::c_api_test::Tensor;

using Matrix = std::vector<double>;  // row-major d x d

Matrix MatMul(const Matrix& a, const Matrix& b, int64_t d) {
  Matrix c(d * d, 0.0);
  for (int64_t i = 0; i < d; ++i) {
    for (int64_t k = 0; k < d; ++k) {
      for (int64_t j = 0; j < d; ++j) c[i * d + j] += a[i * d + k] * b[k * d + j];
    }
  }
  return c;
}

// exp(M) by scaling and squaring with a 30-term Taylor series: independent of the
// library's closed forms and Schur route. For |M| <= ~100 the error is ~1e-13 relative
// (rounding amplified by at most 2^8 squarings of orthogonal-ish matrices).
Matrix ExpReference(Matrix m, int64_t d) {
  double norm = 0.0;
  for (double x : m) norm = std::max(norm, std::abs(x) * d);
  int squarings = 0;
  while (norm > 0.25) {
    norm /= 2;
    ++squarings;
  }
  for (double& x : m) x = std::ldexp(x, -squarings);
  Matrix result(d * d, 0.0), term(d * d, 0.0);
  for (int64_t i = 0; i < d; ++i) result[i * d + i] = term[i * d + i] = 1.0;
  for (int k = 1; k <= 30; ++k) {
    term = MatMul(term, m, d);
    for (double& x : term) x /= k;
    for (int64_t i = 0; i < d * d; ++i) result[i] += term[i];
  }
  for (int s = 0; s < squarings; ++s) result = MatMul(result, result, d);
  return result;
}

// exp(p omega (a b^T - b a^T)).
Matrix Rank2Reference(const double* a, const double* b, double omega, int64_t p, int64_t d) {
  Matrix m(d * d);
  for (int64_t i = 0; i < d; ++i) {
    for (int64_t j = 0; j < d; ++j) {
      m[i * d + j] = static_cast<double>(p) * omega * (a[i] * b[j] - b[i] * a[j]);
    }
  }
  return ExpReference(m, d);
}

std::vector<double> MatVec(const Matrix& m, const double* x, int64_t d) {
  std::vector<double> y(d, 0.0);
  for (int64_t i = 0; i < d; ++i) {
    for (int64_t j = 0; j < d; ++j) y[i] += m[i * d + j] * x[j];
  }
  return y;
}

// ---- Sinusoidal ---------------------------------------------------------------------

std::vector<double> Sinusoidal(const std::vector<int64_t>& pos, int64_t dim, double base,
                               gpe_status* status) {
  std::vector<double> out(pos.size() * dim);
  std::vector<int64_t> ps{static_cast<int64_t>(pos.size())};
  std::vector<int64_t> os{static_cast<int64_t>(pos.size()), dim};
  DLTensor tp = Tensor(const_cast<int64_t*>(pos.data()), kDLInt, 64, &ps);
  DLTensor to = Tensor(out.data(), kDLFloat, 64, &os);
  gpe_sinusoidal_options o = GPE_SINUSOIDAL_OPTIONS_INIT;
  o.base = base;
  *status = gpe_sinusoidal_encode(&o, &tp, &to);
  return out;
}

TEST(Sinusoidal, MatchesVaswaniFormulaAtModeratePositions) {
  const std::vector<int64_t> pos = {0, 1, 2, 7, -3, 100, 9999};
  for (int64_t dim : {1, 2, 7, 16}) {
    for (double base : {10000.0, 500.0}) {
      gpe_status st;
      std::vector<double> out = Sinusoidal(pos, dim, base, &st);
      ASSERT_EQ(st, GPE_OK) << gpe_last_error_message();
      for (size_t n = 0; n < pos.size(); ++n) {
        for (int64_t c = 0; c < dim; ++c) {
          // Vaswani et al. sec. 3.5 in long double. |p| < 1e4 and theta off by ~1 ulp
          // between pow and the library's exp/log: angle error <= 1e4 * 2e-16 ~ 2e-12.
          const long double theta = std::pow(static_cast<long double>(base),
                                             -2.0L * static_cast<long double>(c / 2) / dim);
          const long double a = static_cast<long double>(pos[n]) * theta;
          const double want = static_cast<double>(c % 2 == 0 ? std::sin(a) : std::cos(a));
          EXPECT_NEAR(out[n * dim + c], want, 1e-11) << "p=" << pos[n] << " c=" << c;
        }
      }
    }
  }
}

TEST(Sinusoidal, AngleAdditionHoldsAtLargePositions) {
  // PE(p + q) from PE(p) and PE(q) by the angle-addition formulas. The library reduces
  // p * theta exactly, so this holds to rounding (~1e-15) even at p ~ 2^31; a naive
  // double product p * theta would miss it by ~ulp(2^31) ~ 5e-7 rad.
  const int64_t dim = 12;
  const int64_t big = (int64_t{1} << 31) + 12345;
  const std::vector<int64_t> pos = {big, 7, big + 7, -big, -big + 7};
  gpe_status st;
  std::vector<double> e = Sinusoidal(pos, dim, 10000.0, &st);
  ASSERT_EQ(st, GPE_OK) << gpe_last_error_message();
  for (int pair = 0; pair < 2; ++pair) {
    const double* p = &e[(pair * 3) * dim];
    const double* q = &e[1 * dim];
    const double* pq = &e[(pair * 3 + (pair == 0 ? 2 : 1)) * dim];
    for (int64_t i = 0; i < dim / 2; ++i) {
      const double sp = p[2 * i], cp = p[2 * i + 1], sq = q[2 * i], cq = q[2 * i + 1];
      EXPECT_NEAR(pq[2 * i], sp * cq + cp * sq, 1e-14) << "i=" << i;
      EXPECT_NEAR(pq[2 * i + 1], cp * cq - sp * sq, 1e-14) << "i=" << i;
    }
  }
}

TEST(Sinusoidal, Float32StridedOutput) {
  const std::vector<int64_t> pos = {3, -8, 40};
  std::vector<float> storage(3 * 10, -1.0f);
  std::vector<int64_t> ps{3}, os{3, 5}, ost{1, 3};  // column-major [3, 5] view
  DLTensor tp = Tensor(const_cast<int64_t*>(pos.data()), kDLInt, 64, &ps);
  DLTensor to = Tensor(storage.data(), kDLFloat, 32, &os, &ost);
  gpe_sinusoidal_options o = GPE_SINUSOIDAL_OPTIONS_INIT;
  ASSERT_EQ(gpe_sinusoidal_encode(&o, &tp, &to), GPE_OK) << gpe_last_error_message();
  gpe_status st;
  std::vector<double> want = Sinusoidal(pos, 5, 10000.0, &st);
  ASSERT_EQ(st, GPE_OK);
  for (int n = 0; n < 3; ++n) {
    for (int c = 0; c < 5; ++c) {
      // One float32 rounding of a value in [-1, 1].
      EXPECT_NEAR(storage[n + 3 * c], want[n * 5 + c], 6e-8);
    }
  }
  for (int i = 15; i < 30; ++i) EXPECT_EQ(storage[i], -1.0f);  // untouched beyond the view
}

TEST(Sinusoidal, BadInputRejected) {
  gpe_status st;
  Sinusoidal({1, 2}, 4, 0.0, &st);
  EXPECT_EQ(st, GPE_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(gpe_last_error_message()).find("base"), std::string::npos);
  Sinusoidal({1, 2}, 4, NAN, &st);
  EXPECT_EQ(st, GPE_ERROR_INVALID_ARGUMENT);
  Sinusoidal({1, 2}, 0, 10000.0, &st);
  EXPECT_EQ(st, GPE_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(gpe_last_error_message()).find("dim"), std::string::npos);

  std::vector<int64_t> pos = {1, 2}, ps{2}, os{3, 4};
  std::vector<double> out(12);
  DLTensor tp = Tensor(pos.data(), kDLInt, 64, &ps);
  DLTensor to = Tensor(out.data(), kDLFloat, 64, &os);
  gpe_sinusoidal_options o = GPE_SINUSOIDAL_OPTIONS_INIT;
  EXPECT_EQ(gpe_sinusoidal_encode(&o, &tp, &to), GPE_ERROR_INVALID_ARGUMENT);  // 2 vs 3 rows
  EXPECT_NE(std::string(gpe_last_error_message()).find("rows"), std::string::npos);
  EXPECT_EQ(gpe_sinusoidal_encode(nullptr, &tp, &to), GPE_ERROR_INVALID_ARGUMENT);
  o.struct_size = 0;
  EXPECT_EQ(gpe_sinusoidal_encode(&o, &tp, &to), GPE_ERROR_INVALID_ARGUMENT);
  o.struct_size = sizeof o + 8;
  EXPECT_EQ(gpe_sinusoidal_encode(&o, &tp, &to), GPE_ERROR_VERSION_MISMATCH);
  o.struct_size = sizeof o;
  os = {2, 4};
  DLTensor tp32 = Tensor(pos.data(), kDLInt, 32, &ps);
  EXPECT_EQ(gpe_sinusoidal_encode(&o, &tp32, &to), GPE_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(gpe_last_error_message()).find("positions"), std::string::npos);
  EXPECT_EQ(gpe_sinusoidal_encode(&o, &tp, nullptr), GPE_ERROR_INVALID_ARGUMENT);
  // An output whose rows alias (row stride 0) is rejected, not silently overwritten.
  std::vector<int64_t> zero_rows{0, 1};
  DLTensor tz = Tensor(out.data(), kDLFloat, 64, &os, &zero_rows);
  EXPECT_EQ(gpe_sinusoidal_encode(&o, &tp, &tz), GPE_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(gpe_last_error_message()).find("overlap themselves"), std::string::npos);
}

// ---- Learned positions ----------------------------------------------------------------

TEST(LearnedPositions, LookupAndBackwardMatchLoops) {
  std::mt19937_64 rng(1);
  const int64_t rows = 6, dim = 3;
  std::vector<double> table = Random(&rng, rows * dim);
  std::vector<int64_t> ts{rows, dim};
  DLTensor tt = Tensor(table.data(), kDLFloat, 64, &ts);
  gpe_learned_positions* h = nullptr;
  ASSERT_EQ(gpe_learned_positions_create(&tt, &h), GPE_OK) << gpe_last_error_message();
  int64_t r = 0, d = 0;
  ASSERT_EQ(gpe_learned_positions_shape(h, &r, &d), GPE_OK);
  EXPECT_EQ(r, rows);
  EXPECT_EQ(d, dim);
  const std::vector<double> original = table;
  table[0] = 1e300;  // the handle holds a copy

  std::vector<int64_t> pos = {5, 0, 2, 5, 5}, ps{5}, os{5, dim};
  std::vector<double> out(5 * dim);
  DLTensor tp = Tensor(pos.data(), kDLInt, 64, &ps);
  DLTensor to = Tensor(out.data(), kDLFloat, 64, &os);
  ASSERT_EQ(gpe_learned_positions_lookup(h, &tp, &to), GPE_OK) << gpe_last_error_message();
  for (int n = 0; n < 5; ++n) {
    for (int c = 0; c < dim; ++c) {
      EXPECT_EQ(out[n * dim + c], original[pos[n] * dim + c]);  // a copy: exact
    }
  }

  // Backward into a float32 gradient table that already holds values: accumulates.
  std::vector<double> g = Random(&rng, 5 * dim);
  std::vector<float> grad_table(rows * dim, 0.5f);
  DLTensor tg = Tensor(g.data(), kDLFloat, 64, &os);
  DLTensor tgt = Tensor(grad_table.data(), kDLFloat, 32, &ts);
  ASSERT_EQ(gpe_learned_positions_backward(h, &tp, &tg, &tgt), GPE_OK) << gpe_last_error_message();
  std::vector<double> want(rows * dim, 0.5);
  for (int n = 0; n < 5; ++n) {
    for (int c = 0; c < dim; ++c) want[pos[n] * dim + c] += g[n * dim + c];
  }
  for (int i = 0; i < rows * dim; ++i) {
    // The sum is formed in double and rounded once to float32 (values <= ~5).
    EXPECT_NEAR(grad_table[i], want[i], 5 * 6e-8) << i;
  }
  gpe_learned_positions_destroy(h);
  gpe_learned_positions_destroy(nullptr);
}

TEST(LearnedPositions, BadInputRejected) {
  std::vector<double> table = {1, 2, 3, 4, NAN, 6};
  std::vector<int64_t> ts{3, 2};
  DLTensor tt = Tensor(table.data(), kDLFloat, 64, &ts);
  gpe_learned_positions* h = nullptr;
  EXPECT_EQ(gpe_learned_positions_create(&tt, &h), GPE_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(gpe_last_error_message()).find("table[2, 0]"), std::string::npos);
  EXPECT_EQ(h, nullptr);
  table[4] = 5;
  EXPECT_EQ(gpe_learned_positions_create(&tt, nullptr), GPE_ERROR_INVALID_ARGUMENT);
  ASSERT_EQ(gpe_learned_positions_create(&tt, &h), GPE_OK);

  std::vector<int64_t> pos = {0, 3}, ps{2}, os{2, 2};
  std::vector<double> out(4, -7.0);
  DLTensor tp = Tensor(pos.data(), kDLInt, 64, &ps);
  DLTensor to = Tensor(out.data(), kDLFloat, 64, &os);
  EXPECT_EQ(gpe_learned_positions_lookup(h, &tp, &to), GPE_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(gpe_last_error_message()).find("3"), std::string::npos);
  pos[1] = -1;
  std::vector<double> grad_table(6, 0.0);
  DLTensor tgt = Tensor(grad_table.data(), kDLFloat, 64, &ts);
  EXPECT_EQ(gpe_learned_positions_backward(h, &tp, &to, &tgt), GPE_ERROR_INVALID_ARGUMENT);
  for (double v : grad_table) EXPECT_EQ(v, 0.0);  // nothing written on failure
  pos[1] = 1;
  std::vector<int64_t> bad{3, 3};
  DLTensor tbad = Tensor(grad_table.data(), kDLFloat, 64, &bad);
  EXPECT_EQ(gpe_learned_positions_backward(h, &tp, &to, &tbad), GPE_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(gpe_last_error_message()).find("grad_table"), std::string::npos);
  // grad_out and grad_table sharing memory.
  DLTensor talias = Tensor(grad_table.data(), kDLFloat, 64, &os);
  EXPECT_EQ(gpe_learned_positions_backward(h, &tp, &talias, &tgt), GPE_ERROR_INVALID_ARGUMENT);
  std::vector<int64_t> wide{2, 3};
  std::vector<double> out6(6);
  DLTensor tw = Tensor(out6.data(), kDLFloat, 64, &wide);
  EXPECT_EQ(gpe_learned_positions_lookup(h, &tp, &tw), GPE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(gpe_learned_positions_lookup(nullptr, &tp, &to), GPE_ERROR_INVALID_ARGUMENT);
  gpe_learned_positions_destroy(h);
}

// ---- GRAPE-M ---------------------------------------------------------------------------

struct GrapeParams {
  int64_t dim, m;
  std::vector<double> a, b, omega;
};

gpe_grape_m* MakeGrape(const GrapeParams& g) {
  gpe_grape_m_options o = GPE_GRAPE_M_OPTIONS_INIT;
  o.dim = g.dim;
  o.num_generators = g.m;
  o.a = g.a.data();
  o.b = g.b.data();
  o.omega = g.omega.data();
  gpe_grape_m* h = nullptr;
  EXPECT_EQ(gpe_grape_m_create(&o, &h), GPE_OK) << gpe_last_error_message();
  return h;
}

GrapeParams RandomGrape(std::mt19937_64* rng, int64_t dim, int64_t m) {
  return {dim, m, Random(rng, m * dim), Random(rng, m * dim), Random(rng, m, 0.3)};
}

// G(p) = G_1(p) ... G_m(p) from the Taylor reference.
Matrix GrapeReference(const GrapeParams& g, int64_t p) {
  Matrix r(g.dim * g.dim, 0.0);
  for (int64_t i = 0; i < g.dim; ++i) r[i * g.dim + i] = 1.0;
  for (int64_t k = 0; k < g.m; ++k) {
    r = MatMul(r, Rank2Reference(&g.a[k * g.dim], &g.b[k * g.dim], g.omega[k], p, g.dim), g.dim);
  }
  return r;
}

// apply(h, positions, x, out) on float64 rows [N, dim] through the C ABI (expecting
// GPE_OK): out.
template <class Handle>
std::vector<double> ApplyRows(gpe_status (*apply)(const Handle*, const DLTensor*,
                                                  const DLTensor*, DLTensor*),
                              const Handle* h, const std::vector<int64_t>& pos,
                              const std::vector<double>& x, int64_t dim) {
  std::vector<double> out(x.size());
  std::vector<int64_t> ps{static_cast<int64_t>(pos.size())}, xs{ps[0], dim};
  DLTensor tp = Tensor(pos.data(), kDLInt, 64, &ps);
  DLTensor tx = Tensor(x.data(), kDLFloat, 64, &xs);
  DLTensor to = Tensor(out.data(), kDLFloat, 64, &xs);
  EXPECT_EQ(apply(h, &tp, &tx, &to), GPE_OK) << gpe_last_error_message();
  return out;
}

std::vector<double> GrapeApply(const gpe_grape_m* h, const std::vector<int64_t>& pos,
                               const std::vector<double>& x, int64_t dim) {
  return ApplyRows(gpe_grape_m_apply, h, pos, x, dim);
}

TEST(GrapeM, MatrixAndApplyMatchTaylorReference) {
  std::mt19937_64 rng(2);
  const GrapeParams g = RandomGrape(&rng, 6, 3);
  gpe_grape_m* h = MakeGrape(g);
  int64_t d = 0, m = 0;
  ASSERT_EQ(gpe_grape_m_shape(h, &d, &m), GPE_OK);
  EXPECT_EQ(d, 6);
  EXPECT_EQ(m, 3);
  const std::vector<int64_t> pos = {0, 1, -2, 5, 13};
  std::vector<double> x = Random(&rng, pos.size() * 6);
  std::vector<double> y = GrapeApply(h, pos, x, 6);
  for (size_t n = 0; n < pos.size(); ++n) {
    const Matrix want = GrapeReference(g, pos[n]);
    Matrix got(36);
    std::vector<int64_t> ms{6, 6};
    DLTensor tm = Tensor(got.data(), kDLFloat, 64, &ms);
    ASSERT_EQ(gpe_grape_m_matrix(h, pos[n], &tm), GPE_OK) << gpe_last_error_message();
    // Taylor reference: ~1e-13 for |p omega L| up to ~30 here; 1e-10 leaves margin.
    for (int i = 0; i < 36; ++i) EXPECT_NEAR(got[i], want[i], 1e-10) << "p=" << pos[n];
    // Orthogonal: G G^T = I to rounding.
    for (int i = 0; i < 6; ++i) {
      for (int j = 0; j < 6; ++j) {
        double s = 0;
        for (int k = 0; k < 6; ++k) s += got[i * 6 + k] * got[j * 6 + k];
        EXPECT_NEAR(s, i == j ? 1.0 : 0.0, 1e-12);
      }
    }
    const std::vector<double> wy = MatVec(want, &x[n * 6], 6);
    for (int i = 0; i < 6; ++i) EXPECT_NEAR(y[n * 6 + i], wy[i], 1e-10);
  }
  gpe_grape_m_destroy(h);
}

TEST(GrapeM, SingleGeneratorIsRelative) {
  // m = 1: a homomorphism of Z, so <G(i) q, G(j) k> = <q, G(j - i) k>.
  std::mt19937_64 rng(3);
  const GrapeParams g = RandomGrape(&rng, 5, 1);
  gpe_grape_m* h = MakeGrape(g);
  const std::vector<double> q = Random(&rng, 5), k = Random(&rng, 5);
  for (auto [i, j] : {std::pair<int64_t, int64_t>{3, 10}, {-40, 7}, {1000, 1003}}) {
    const std::vector<double> gq = GrapeApply(h, {i}, q, 5), gk = GrapeApply(h, {j}, k, 5);
    const std::vector<double> rk = GrapeApply(h, {j - i}, k, 5);
    double lhs = 0, rhs = 0;
    for (int c = 0; c < 5; ++c) {
      lhs += gq[c] * gk[c];
      rhs += q[c] * rk[c];
    }
    // O(1) dot products of rotated O(1) vectors: rounding ~1e-15 per term.
    EXPECT_NEAR(lhs, rhs, 1e-12) << i << " " << j;
  }
  gpe_grape_m_destroy(h);
}

TEST(GrapeM, InPlaceStridedFloat32) {
  std::mt19937_64 rng(4);
  const GrapeParams g = RandomGrape(&rng, 4, 2);
  gpe_grape_m* h = MakeGrape(g);
  const std::vector<int64_t> pos = {2, -1, 7};
  std::vector<double> x = Random(&rng, 12);
  std::vector<double> want = GrapeApply(h, pos, x, 4);
  std::vector<float> col(12);  // column-major [3, 4]
  for (int n = 0; n < 3; ++n) {
    for (int c = 0; c < 4; ++c) col[n + 3 * c] = static_cast<float>(x[n * 4 + c]);
  }
  std::vector<int64_t> ps{3}, xs{3, 4}, st{1, 3};
  DLTensor tp = Tensor(const_cast<int64_t*>(pos.data()), kDLInt, 64, &ps);
  DLTensor tx = Tensor(col.data(), kDLFloat, 32, &xs, &st);
  ASSERT_EQ(gpe_grape_m_apply(h, &tp, &tx, &tx), GPE_OK) << gpe_last_error_message();
  for (int n = 0; n < 3; ++n) {
    for (int c = 0; c < 4; ++c) {
      // float32 input rounding (|x| <= ~4, 2^-24 relative) carried through an orthogonal
      // map, plus one output rounding: well below 1e-5.
      EXPECT_NEAR(col[n + 3 * c], want[n * 4 + c], 1e-5);
    }
  }
  gpe_grape_m_destroy(h);
}

// L = sum_n w_n . G(p_n) x_n through the C API, for finite differences.
double GrapeLoss(const GrapeParams& g, const std::vector<int64_t>& pos,
                 const std::vector<double>& x, const std::vector<double>& w) {
  gpe_grape_m* h = MakeGrape(g);
  const std::vector<double> y = GrapeApply(h, pos, x, g.dim);
  gpe_grape_m_destroy(h);
  double l = 0;
  for (size_t i = 0; i < y.size(); ++i) l += w[i] * y[i];
  return l;
}

TEST(GrapeM, BackwardMatchesFiniteDifferences) {
  std::mt19937_64 rng(5);
  const int64_t dim = 5, m = 2;
  const GrapeParams g = RandomGrape(&rng, dim, m);
  const std::vector<int64_t> pos = {1, -3, 4, 2};
  const std::vector<double> x = Random(&rng, 4 * dim), w = Random(&rng, 4 * dim);
  gpe_grape_m* h = MakeGrape(g);
  std::vector<double> gx(4 * dim), ga(m * dim), gb(m * dim), gw(m);
  std::vector<int64_t> ps{4}, xs{4, dim}, as{m, dim}, ws{m};
  DLTensor tp = Tensor(const_cast<int64_t*>(pos.data()), kDLInt, 64, &ps);
  DLTensor tx = Tensor(const_cast<double*>(x.data()), kDLFloat, 64, &xs);
  DLTensor tg = Tensor(const_cast<double*>(w.data()), kDLFloat, 64, &xs);
  DLTensor tgx = Tensor(gx.data(), kDLFloat, 64, &xs);
  DLTensor tga = Tensor(ga.data(), kDLFloat, 64, &as);
  DLTensor tgb = Tensor(gb.data(), kDLFloat, 64, &as);
  DLTensor tgw = Tensor(gw.data(), kDLFloat, 64, &ws);
  ASSERT_EQ(gpe_grape_m_backward(h, &tp, &tx, &tg, &tgx, &tga, &tgb, &tgw), GPE_OK)
      << gpe_last_error_message();
  // Central differences with h = 1e-5: truncation h^2 |L'''| ~ 1e-10 * |p|^3 ~ 1e-8,
  // rounding eps |L| / h ~ 1e-10. Tolerance 1e-6 (relative to max(1, |grad|)).
  const double step = 1e-5;
  auto check = [&](std::vector<double>* param, const std::vector<double>& grad,
                   const char* name, auto loss) {
    for (size_t i = 0; i < param->size(); ++i) {
      const double fd = CentralDifference(param, i, step, loss);
      EXPECT_NEAR(grad[i], fd, 1e-6 * std::max(1.0, std::abs(fd))) << name << "[" << i << "]";
    }
  };
  GrapeParams gp = g;
  std::vector<double> xp = x;
  auto loss = [&] { return GrapeLoss(gp, pos, xp, w); };
  check(&gp.a, ga, "a", loss);
  check(&gp.b, gb, "b", loss);
  check(&gp.omega, gw, "omega", loss);
  check(&xp, gx, "x", loss);

  // grad_x may be grad_out itself; NULL outputs are skipped.
  std::vector<double> inplace = w;
  DLTensor tin = Tensor(inplace.data(), kDLFloat, 64, &xs);
  ASSERT_EQ(gpe_grape_m_backward(h, &tp, &tx, &tin, &tin, nullptr, nullptr, nullptr), GPE_OK)
      << gpe_last_error_message();
  for (size_t i = 0; i < gx.size(); ++i) EXPECT_NEAR(inplace[i], gx[i], 1e-14);
  gpe_grape_m_destroy(h);
}

TEST(GrapeM, BadInputRejected) {
  std::mt19937_64 rng(6);
  GrapeParams g = RandomGrape(&rng, 4, 2);
  gpe_grape_m_options o = GPE_GRAPE_M_OPTIONS_INIT;
  o.dim = 4;
  o.num_generators = 2;
  o.a = g.a.data();
  o.b = g.b.data();
  o.omega = g.omega.data();
  gpe_grape_m* h = nullptr;
  auto expect_error = [&](gpe_status want, const char* fragment) {
    EXPECT_EQ(gpe_grape_m_create(&o, &h), want) << fragment;
    EXPECT_NE(std::string(gpe_last_error_message()).find(fragment), std::string::npos)
        << gpe_last_error_message();
    EXPECT_EQ(h, nullptr);
  };
  g.a[5] = INFINITY;
  expect_error(GPE_ERROR_INVALID_ARGUMENT, "a[5]");
  g.a[5] = 0.0;
  g.omega[1] = NAN;
  expect_error(GPE_ERROR_INVALID_ARGUMENT, "omega[1]");
  g.omega[1] = 0.1;
  o.num_generators = 0;
  expect_error(GPE_ERROR_INVALID_ARGUMENT, "num_generators");
  o.num_generators = 2;
  o.dim = 1;
  expect_error(GPE_ERROR_INVALID_ARGUMENT, "dim");
  o.dim = 4;
  o.b = nullptr;
  expect_error(GPE_ERROR_INVALID_ARGUMENT, "b is NULL");
  o.b = g.b.data();
  o.struct_size = sizeof o + 16;
  expect_error(GPE_ERROR_VERSION_MISMATCH, "newer");
  o.struct_size = 3;
  expect_error(GPE_ERROR_INVALID_ARGUMENT, "struct_size");
  o.struct_size = sizeof o;
  EXPECT_EQ(gpe_grape_m_create(nullptr, &h), GPE_ERROR_INVALID_ARGUMENT);
  ASSERT_EQ(gpe_grape_m_create(&o, &h), GPE_OK) << gpe_last_error_message();

  std::vector<int64_t> pos = {1, 2}, ps{2}, xs{2, 4}, bad{2, 3}, as{2, 4}, ws{3};
  std::vector<double> x(8, 1.0), go(8, 1.0), gx(8), ga(8), gw(3);
  std::vector<float> x32(8);
  DLTensor tp = Tensor(pos.data(), kDLInt, 64, &ps);
  DLTensor tx = Tensor(x.data(), kDLFloat, 64, &xs);
  DLTensor tx3 = Tensor(x.data(), kDLFloat, 64, &bad);
  DLTensor t32 = Tensor(x32.data(), kDLFloat, 32, &xs);
  DLTensor tgo = Tensor(go.data(), kDLFloat, 64, &xs);
  DLTensor tgx = Tensor(gx.data(), kDLFloat, 64, &xs);
  DLTensor tga = Tensor(ga.data(), kDLFloat, 64, &as);
  DLTensor tgw = Tensor(gw.data(), kDLFloat, 64, &ws);
  DLTensor tout = Tensor(gx.data(), kDLFloat, 64, &xs);
  EXPECT_EQ(gpe_grape_m_apply(h, &tp, &tx3, &tx3), GPE_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(gpe_last_error_message()).find("dim 4"), std::string::npos);
  EXPECT_EQ(gpe_grape_m_apply(h, &tp, &tx, &t32), GPE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(gpe_grape_m_apply(nullptr, &tp, &tx, &tout), GPE_ERROR_INVALID_ARGUMENT);
  // Overlapping but not identical out.
  std::vector<int64_t> shifted_shape{2, 4};
  std::vector<double> big(12);
  DLTensor ta = Tensor(big.data(), kDLFloat, 64, &shifted_shape);
  DLTensor tb = Tensor(big.data() + 2, kDLFloat, 64, &shifted_shape);
  EXPECT_EQ(gpe_grape_m_apply(h, &tp, &ta, &tb), GPE_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(gpe_last_error_message()).find("overlaps"), std::string::npos);
  // Interleaved rows (row stride 2 < dim 4 with unit columns) alias each other.
  std::vector<int64_t> interleaved{2, 1};
  DLTensor ti = Tensor(big.data(), kDLFloat, 64, &shifted_shape, &interleaved);
  EXPECT_EQ(gpe_grape_m_apply(h, &tp, &tx, &ti), GPE_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(gpe_last_error_message()).find("overlap themselves"), std::string::npos);
  // Backward: wrong grad_omega shape, grad_x = x, grad_a overlapping grad_x, dtype mix.
  EXPECT_EQ(gpe_grape_m_backward(h, &tp, &tx, &tgo, &tgx, &tga, nullptr, &tgw),
            GPE_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(gpe_last_error_message()).find("grad_omega"), std::string::npos);
  EXPECT_EQ(gpe_grape_m_backward(h, &tp, &tx, &tgo, &tx, nullptr, nullptr, nullptr),
            GPE_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(gpe_last_error_message()).find("grad_x"), std::string::npos);
  DLTensor tga_alias = Tensor(gx.data(), kDLFloat, 64, &as);
  EXPECT_EQ(gpe_grape_m_backward(h, &tp, &tx, &tgo, &tgx, &tga_alias, nullptr, nullptr),
            GPE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(gpe_grape_m_backward(h, &tp, &tx, &t32, nullptr, nullptr, nullptr, nullptr),
            GPE_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(gpe_last_error_message()).find("grad_out"), std::string::npos);
  std::vector<int64_t> ms{3, 4};
  DLTensor tm = Tensor(big.data(), kDLFloat, 64, &ms);
  EXPECT_EQ(gpe_grape_m_matrix(h, 3, &tm), GPE_ERROR_INVALID_ARGUMENT);
  gpe_grape_m_destroy(h);
  gpe_grape_m_destroy(nullptr);
}

// ---- Algebraic sequence -------------------------------------------------------------------

gpe_algebraic_sequence* MakeAlgebraic(const Matrix& s, int64_t d, gpe_status* status = nullptr) {
  gpe_algebraic_sequence_options o = GPE_ALGEBRAIC_SEQUENCE_OPTIONS_INIT;
  o.dim = d;
  o.skew = s.data();
  gpe_algebraic_sequence* h = nullptr;
  const gpe_status st = gpe_algebraic_sequence_create(&o, &h);
  if (status != nullptr) {
    *status = st;
  } else {
    EXPECT_EQ(st, GPE_OK) << gpe_last_error_message();
  }
  return h;
}

// S = A - A^T.
Matrix SkewOf(const std::vector<double>& a, int64_t d) {
  Matrix s(d * d);
  for (int64_t i = 0; i < d; ++i) {
    for (int64_t j = 0; j < d; ++j) s[i * d + j] = a[i * d + j] - a[j * d + i];
  }
  return s;
}

std::vector<double> AlgebraicApply(const gpe_algebraic_sequence* h,
                                   const std::vector<int64_t>& pos, const std::vector<double>& x,
                                   int64_t d) {
  return ApplyRows(gpe_algebraic_sequence_apply, h, pos, x, d);
}

TEST(AlgebraicSequence, PowersMatchTaylorReferenceAndCompose) {
  std::mt19937_64 rng(7);
  const int64_t d = 5;
  const Matrix s = SkewOf(Random(&rng, d * d, 0.4), d);
  gpe_algebraic_sequence* h = MakeAlgebraic(s, d);
  int64_t dim = 0;
  ASSERT_EQ(gpe_algebraic_sequence_dim(h, &dim), GPE_OK);
  EXPECT_EQ(dim, d);
  std::vector<int64_t> ms{d, d};
  auto matrix = [&](int64_t p) {
    Matrix m(d * d);
    DLTensor tm = Tensor(m.data(), kDLFloat, 64, &ms);
    EXPECT_EQ(gpe_algebraic_sequence_matrix(h, p, &tm), GPE_OK) << gpe_last_error_message();
    return m;
  };
  for (int64_t p : {0, 1, -1, 3, 12}) {
    Matrix ps = s;
    for (double& v : ps) v *= static_cast<double>(p);
    const Matrix want = ExpReference(ps, d);
    const Matrix got = matrix(p);
    // Taylor reference accurate to ~1e-13 for |p S| <= ~30; the Schur route to ~1e-14.
    for (int i = 0; i < d * d; ++i) EXPECT_NEAR(got[i], want[i], 1e-10) << "p=" << p;
  }
  // W^p W^q = W^(p+q), including far positions (exactly reduced angles): errors are
  // rounding in the products of orthogonal matrices, ~d eps.
  const int64_t far = int64_t{1} << 40;
  const Matrix lhs = MatMul(matrix(far), matrix(-far + 9), d);
  const Matrix rhs = matrix(9);
  for (int i = 0; i < d * d; ++i) EXPECT_NEAR(lhs[i], rhs[i], 1e-9);
  // apply == matrix @ x.
  const std::vector<int64_t> pos = {4, -7};
  const std::vector<double> x = Random(&rng, 2 * d);
  const std::vector<double> y = AlgebraicApply(h, pos, x, d);
  for (int n = 0; n < 2; ++n) {
    const std::vector<double> want = MatVec(matrix(pos[n]), &x[n * d], d);
    for (int i = 0; i < d; ++i) EXPECT_NEAR(y[n * d + i], want[i], 1e-13);
  }
  gpe_algebraic_sequence_destroy(h);
}

TEST(AlgebraicSequence, BackwardMatchesFiniteDifferences) {
  std::mt19937_64 rng(8);
  const int64_t d = 4;
  std::vector<double> a = Random(&rng, d * d, 0.3);
  const std::vector<int64_t> pos = {1, -2, 3};
  std::vector<double> x = Random(&rng, 3 * d);
  const std::vector<double> w = Random(&rng, 3 * d);
  gpe_algebraic_sequence* h = MakeAlgebraic(SkewOf(a, d), d);
  std::vector<double> gx(3 * d), gs(d * d);
  std::vector<int64_t> ps{3}, xs{3, d}, ss{d, d};
  DLTensor tp = Tensor(const_cast<int64_t*>(pos.data()), kDLInt, 64, &ps);
  DLTensor tx = Tensor(x.data(), kDLFloat, 64, &xs);
  DLTensor tg = Tensor(const_cast<double*>(w.data()), kDLFloat, 64, &xs);
  DLTensor tgx = Tensor(gx.data(), kDLFloat, 64, &xs);
  DLTensor tgs = Tensor(gs.data(), kDLFloat, 64, &ss);
  ASSERT_EQ(gpe_algebraic_sequence_backward(h, &tp, &tx, &tg, &tgx, &tgs), GPE_OK)
      << gpe_last_error_message();
  gpe_algebraic_sequence_destroy(h);
  auto loss = [&] {
    gpe_algebraic_sequence* hh = MakeAlgebraic(SkewOf(a, d), d);
    const std::vector<double> y = AlgebraicApply(hh, pos, x, d);
    gpe_algebraic_sequence_destroy(hh);
    double l = 0;
    for (size_t i = 0; i < y.size(); ++i) l += w[i] * y[i];
    return l;
  };
  // S = A - A^T, so dL/dA = X - X^T with X = grad_skew (unprojected). Central
  // differences, h = 1e-5: truncation ~1e-10 |p|^3, rounding ~1e-11; tolerance 1e-7.
  const double step = 1e-5;
  auto fd = [&](std::vector<double>* v, size_t i) { return CentralDifference(v, i, step, loss); };
  for (int64_t i = 0; i < d; ++i) {
    for (int64_t j = 0; j < d; ++j) {
      const double want = fd(&a, i * d + j);
      EXPECT_NEAR(gs[i * d + j] - gs[j * d + i], want, 1e-7) << i << "," << j;
    }
  }
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(gx[i], fd(&x, i), 1e-7) << "x" << i;
}

TEST(AlgebraicSequence, BadInputRejected) {
  const int64_t d = 3;
  Matrix s = {0, 1, 2, -1, 0, 3, -2, -3, 0};
  gpe_status st;
  s[5] = 3.5;  // S[1,2] + S[2,1] = 0.5
  EXPECT_EQ(MakeAlgebraic(s, d, &st), nullptr);
  EXPECT_EQ(st, GPE_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(gpe_last_error_message()).find("skew[1, 2]"), std::string::npos)
      << gpe_last_error_message();
  s[5] = 3.0;
  s[0] = NAN;
  EXPECT_EQ(MakeAlgebraic(s, d, &st), nullptr);
  EXPECT_EQ(st, GPE_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(gpe_last_error_message()).find("skew[0]"), std::string::npos);
  s[0] = 0.0;
  EXPECT_EQ(MakeAlgebraic(s, 0, &st), nullptr);
  EXPECT_EQ(st, GPE_ERROR_INVALID_ARGUMENT);
  gpe_algebraic_sequence_options o = GPE_ALGEBRAIC_SEQUENCE_OPTIONS_INIT;
  o.dim = d;
  gpe_algebraic_sequence* h = nullptr;
  EXPECT_EQ(gpe_algebraic_sequence_create(&o, &h), GPE_ERROR_INVALID_ARGUMENT);  // skew NULL
  EXPECT_NE(std::string(gpe_last_error_message()).find("skew is NULL"), std::string::npos);
  h = MakeAlgebraic(s, d);
  ASSERT_NE(h, nullptr);
  std::vector<int64_t> ps{2}, xs{2, d}, bad{d, d + 1};
  std::vector<int64_t> pos = {1, 2};
  std::vector<double> x(6, 1.0), g(6, 1.0), gs(12);
  DLTensor tp = Tensor(pos.data(), kDLInt, 64, &ps);
  DLTensor tx = Tensor(x.data(), kDLFloat, 64, &xs);
  DLTensor tg = Tensor(g.data(), kDLFloat, 64, &xs);
  DLTensor tgs = Tensor(gs.data(), kDLFloat, 64, &bad);
  EXPECT_EQ(gpe_algebraic_sequence_backward(h, &tp, &tx, &tg, nullptr, &tgs),
            GPE_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(gpe_last_error_message()).find("grad_skew"), std::string::npos);
  DLTensor tm = Tensor(gs.data(), kDLFloat, 64, &bad);
  EXPECT_EQ(gpe_algebraic_sequence_matrix(h, 1, &tm), GPE_ERROR_INVALID_ARGUMENT);
  std::vector<int64_t> ps3{3};
  DLTensor tp3 = Tensor(gs.data(), kDLInt, 64, &ps3);
  EXPECT_EQ(gpe_algebraic_sequence_apply(h, &tp3, &tx, &tx), GPE_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(gpe_last_error_message()).find("rows"), std::string::npos);
  gpe_algebraic_sequence_destroy(h);
  gpe_algebraic_sequence_destroy(nullptr);
}

// ---- Shaw relative key scores -----------------------------------------------------------

// Shaw et al.: label clip(j - i, -k, k), table row label + k. j - i in __int128 (exact).
int64_t ShawRow(int64_t i, int64_t j, int64_t k) {
  const __int128 diff = static_cast<__int128>(j) - static_cast<__int128>(i);
  const __int128 clipped = diff < -k ? -k : (diff > k ? k : diff);
  return static_cast<int64_t>(clipped) + k;
}

struct ShawCase {
  int64_t k = 3, d = 4;
  std::vector<int64_t> qp = {0, 5, std::numeric_limits<int64_t>::min(), 7};
  std::vector<int64_t> kp = {0, 1, 2, 9, std::numeric_limits<int64_t>::max()};
  std::vector<double> q, table;
};

std::vector<double> ShawScores(const ShawCase& c, gpe_status* st) {
  const int64_t lq = c.qp.size(), lk = c.kp.size();
  std::vector<double> scores(lq * lk);
  std::vector<int64_t> qs{lq, c.d}, ts{2 * c.k + 1, c.d}, qps{lq}, kps{lk}, ss{lq, lk};
  DLTensor tq = Tensor(const_cast<double*>(c.q.data()), kDLFloat, 64, &qs);
  DLTensor tt = Tensor(const_cast<double*>(c.table.data()), kDLFloat, 64, &ts);
  DLTensor tqp = Tensor(const_cast<int64_t*>(c.qp.data()), kDLInt, 64, &qps);
  DLTensor tkp = Tensor(const_cast<int64_t*>(c.kp.data()), kDLInt, 64, &kps);
  DLTensor tsc = Tensor(scores.data(), kDLFloat, 64, &ss);
  *st = gpe_shaw_key_scores(&tq, &tt, &tqp, &tkp, &tsc);
  return scores;
}

TEST(ShawKeyScores, MatchesDirectLoopIncludingExtremePositions) {
  std::mt19937_64 rng(9);
  ShawCase c;
  c.q = Random(&rng, c.qp.size() * c.d);
  c.table = Random(&rng, (2 * c.k + 1) * c.d);
  gpe_status st;
  const std::vector<double> got = ShawScores(c, &st);
  ASSERT_EQ(st, GPE_OK) << gpe_last_error_message();
  for (size_t a = 0; a < c.qp.size(); ++a) {
    for (size_t b = 0; b < c.kp.size(); ++b) {
      const int64_t r = ShawRow(c.qp[a], c.kp[b], c.k);
      double want = 0;
      for (int64_t i = 0; i < c.d; ++i) want += c.q[a * c.d + i] * c.table[r * c.d + i];
      // Same d-term dot product, possibly summed in another order: ~d eps.
      EXPECT_NEAR(got[a * c.kp.size() + b], want, 1e-14) << a << "," << b;
    }
  }
  // Relativity: shifting every position by the same amount leaves the scores unchanged
  // (away from int64 overflow).
  ShawCase shifted = c;
  shifted.qp = {100, 105, -1000, 107};
  shifted.kp = {100, 101, 102, 109, 5000};
  ShawCase base = c;
  base.qp = {0, 5, -1100, 7};
  base.kp = {0, 1, 2, 9, 4900};
  const std::vector<double> s1 = ShawScores(shifted, &st), s0 = ShawScores(base, &st);
  ASSERT_EQ(st, GPE_OK);
  for (size_t i = 0; i < s0.size(); ++i) EXPECT_EQ(s0[i], s1[i]);
}

TEST(ShawKeyScores, BackwardMatchesLoopAndFiniteDifferences) {
  std::mt19937_64 rng(10);
  ShawCase c;
  c.q = Random(&rng, c.qp.size() * c.d);
  c.table = Random(&rng, (2 * c.k + 1) * c.d);
  const int64_t lq = c.qp.size(), lk = c.kp.size(), rows = 2 * c.k + 1;
  const std::vector<double> w = Random(&rng, lq * lk);
  std::vector<double> gq(lq * c.d, 99.0), gt(rows * c.d, 0.5);
  std::vector<int64_t> qs{lq, c.d}, ts{rows, c.d}, qps{lq}, kps{lk}, ss{lq, lk};
  DLTensor tq = Tensor(c.q.data(), kDLFloat, 64, &qs);
  DLTensor tt = Tensor(c.table.data(), kDLFloat, 64, &ts);
  DLTensor tqp = Tensor(c.qp.data(), kDLInt, 64, &qps);
  DLTensor tkp = Tensor(c.kp.data(), kDLInt, 64, &kps);
  DLTensor tw = Tensor(const_cast<double*>(w.data()), kDLFloat, 64, &ss);
  DLTensor tgq = Tensor(gq.data(), kDLFloat, 64, &qs);
  DLTensor tgt = Tensor(gt.data(), kDLFloat, 64, &ts);
  ASSERT_EQ(gpe_shaw_key_scores_backward(&tq, &tt, &tqp, &tkp, &tw, &tgq, &tgt), GPE_OK)
      << gpe_last_error_message();
  // Direct loops: dL/dq[a] = sum_b w[a,b] table[row(a,b)], dL/dtable[r] = sum w q[a].
  std::vector<double> want_q(lq * c.d, 0.0), want_t(rows * c.d, 0.5);  // table accumulates
  for (int64_t a = 0; a < lq; ++a) {
    for (int64_t b = 0; b < lk; ++b) {
      const int64_t r = ShawRow(c.qp[a], c.kp[b], c.k);
      for (int64_t i = 0; i < c.d; ++i) {
        want_q[a * c.d + i] += w[a * lk + b] * c.table[r * c.d + i];
        want_t[r * c.d + i] += w[a * lk + b] * c.q[a * c.d + i];
      }
    }
  }
  // Sums of <= Lk O(1) products in another order: ~1e-15.
  for (size_t i = 0; i < gq.size(); ++i) EXPECT_NEAR(gq[i], want_q[i], 1e-13) << i;
  for (size_t i = 0; i < gt.size(); ++i) EXPECT_NEAR(gt[i], want_t[i], 1e-13) << i;
  // Central differences (the loss is linear, so only rounding ~eps |L| / h ~ 1e-10).
  auto loss = [&] {
    gpe_status st;
    const std::vector<double> s = ShawScores(c, &st);
    EXPECT_EQ(st, GPE_OK);
    double l = 0;
    for (size_t i = 0; i < s.size(); ++i) l += w[i] * s[i];
    return l;
  };
  const double h = 1e-5;
  for (std::vector<double>* param : {&c.q, &c.table}) {
    for (size_t i = 0; i < param->size(); ++i) {
      const double want = param == &c.q ? gq[i] : gt[i] - 0.5;
      EXPECT_NEAR(CentralDifference(param, i, h, loss), want, 1e-8) << i;
    }
  }
}

TEST(ShawKeyScores, BadInputRejected) {
  ShawCase c;
  c.q.assign(c.qp.size() * c.d, 1.0);
  c.table.assign((2 * c.k + 1) * c.d, 1.0);
  gpe_status st;
  c.table[3] = NAN;
  ShawScores(c, &st);
  EXPECT_EQ(st, GPE_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(gpe_last_error_message()).find("label_table[0, 3]"), std::string::npos)
      << gpe_last_error_message();
  c.table[3] = 1.0;
  c.k = 2;  // a [5, d] view of the first rows: valid
  ShawScores(c, &st);
  EXPECT_EQ(st, GPE_OK) << gpe_last_error_message();
  std::vector<int64_t> qs{4, 4}, ts{4, 4}, qps{4}, kps{5}, ss{4, 5};
  std::vector<double> scores(20);
  DLTensor tq = Tensor(c.q.data(), kDLFloat, 64, &qs);
  DLTensor tt = Tensor(c.table.data(), kDLFloat, 64, &ts);
  DLTensor tqp = Tensor(c.qp.data(), kDLInt, 64, &qps);
  DLTensor tkp = Tensor(c.kp.data(), kDLInt, 64, &kps);
  DLTensor tsc = Tensor(scores.data(), kDLFloat, 64, &ss);
  EXPECT_EQ(gpe_shaw_key_scores(&tq, &tt, &tqp, &tkp, &tsc), GPE_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(gpe_last_error_message()).find("odd"), std::string::npos);
  ts = {5, 4};
  std::vector<int64_t> wrong{4, 4};
  DLTensor tbad = Tensor(scores.data(), kDLFloat, 64, &wrong);
  EXPECT_EQ(gpe_shaw_key_scores(&tq, &tt, &tqp, &tkp, &tbad), GPE_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(gpe_last_error_message()).find("scores"), std::string::npos);
  qs = {4, 3};
  EXPECT_EQ(gpe_shaw_key_scores(&tq, &tt, &tqp, &tkp, &tsc), GPE_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(gpe_last_error_message()).find("q must have shape"), std::string::npos);
  qs = {4, 4};
  DLTensor talias = Tensor(c.q.data(), kDLFloat, 64, &ss);  // scores over q
  EXPECT_EQ(gpe_shaw_key_scores(&tq, &tt, &tqp, &tkp, &talias), GPE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(gpe_shaw_key_scores(&tq, &tt, nullptr, &tkp, &tsc), GPE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(gpe_shaw_key_scores_backward(&tq, &tt, &tqp, &tkp, &tsc, &tq, nullptr),
            GPE_ERROR_INVALID_ARGUMENT);  // grad_q = q
  EXPECT_EQ(gpe_shaw_key_scores_backward(&tq, &tt, &tqp, &tkp, &tsc, nullptr, nullptr), GPE_OK);
}

TEST(EmptyBatches, AreAcceptedWithNullData) {
  // N = 0 rows: data may be NULL; parameter gradients of an empty sum are zero.
  std::vector<int64_t> ps{0}, xs{0, 4}, as{1, 4}, ws{1}, ts{3, 4}, ss{0, 0};
  DLTensor tp = Tensor(nullptr, kDLInt, 64, &ps);
  DLTensor tx = Tensor(nullptr, kDLFloat, 32, &xs);
  gpe_sinusoidal_options so = GPE_SINUSOIDAL_OPTIONS_INIT;
  EXPECT_EQ(gpe_sinusoidal_encode(&so, &tp, &tx), GPE_OK) << gpe_last_error_message();

  std::vector<double> a = {1, 0, 0, 0}, b = {0, 1, 0, 0}, omega = {0.5};
  gpe_grape_m* h = MakeGrape({4, 1, a, b, omega});
  std::vector<double> ga(4, 7.0), gb(4, 7.0), gw(1, 7.0);
  DLTensor tga = Tensor(ga.data(), kDLFloat, 64, &as);
  DLTensor tgb = Tensor(gb.data(), kDLFloat, 64, &as);
  DLTensor tgw = Tensor(gw.data(), kDLFloat, 64, &ws);
  EXPECT_EQ(gpe_grape_m_apply(h, &tp, &tx, &tx), GPE_OK) << gpe_last_error_message();
  EXPECT_EQ(gpe_grape_m_backward(h, &tp, &tx, &tx, nullptr, &tga, &tgb, &tgw), GPE_OK)
      << gpe_last_error_message();
  for (int i = 0; i < 4; ++i) EXPECT_EQ(ga[i] + gb[i], 0.0);
  EXPECT_EQ(gw[0], 0.0);
  gpe_grape_m_destroy(h);

  std::vector<double> table(12, 1.0), grad_table(12, 0.0);
  DLTensor tt = Tensor(table.data(), kDLFloat, 64, &ts);
  DLTensor tgt = Tensor(grad_table.data(), kDLFloat, 64, &ts);
  gpe_learned_positions* lp = nullptr;
  ASSERT_EQ(gpe_learned_positions_create(&tt, &lp), GPE_OK);
  EXPECT_EQ(gpe_learned_positions_lookup(lp, &tp, &tx), GPE_OK) << gpe_last_error_message();
  EXPECT_EQ(gpe_learned_positions_backward(lp, &tp, &tx, &tgt), GPE_OK);
  gpe_learned_positions_destroy(lp);

  std::vector<double> skew = {0, 1, 0, 0, -1, 0, 0, 0, 0, 0, 0, 2, 0, 0, -2, 0};
  gpe_algebraic_sequence* seq = MakeAlgebraic(skew, 4);
  std::vector<double> gs(16, 7.0);
  std::vector<int64_t> gss{4, 4};
  DLTensor tgs = Tensor(gs.data(), kDLFloat, 64, &gss);
  EXPECT_EQ(gpe_algebraic_sequence_apply(seq, &tp, &tx, &tx), GPE_OK);
  EXPECT_EQ(gpe_algebraic_sequence_backward(seq, &tp, &tx, &tx, nullptr, &tgs), GPE_OK)
      << gpe_last_error_message();
  for (double v : gs) EXPECT_EQ(v, 0.0);
  gpe_algebraic_sequence_destroy(seq);

  std::vector<int64_t> qs{0, 4}, shaw_ts{3, 4};
  DLTensor tq = Tensor(nullptr, kDLFloat, 64, &qs);
  DLTensor tsc = Tensor(nullptr, kDLFloat, 64, &ss);
  EXPECT_EQ(gpe_shaw_key_scores(&tq, &tt, &tp, &tp, &tsc), GPE_OK) << gpe_last_error_message();
}

TEST(GrapeM, Float32StridedBackwardMatchesFloat64) {
  std::mt19937_64 rng(11);
  const int64_t dim = 4, m = 2, n = 3;
  const GrapeParams g = RandomGrape(&rng, dim, m);
  gpe_grape_m* h = MakeGrape(g);
  const std::vector<int64_t> pos = {2, -5, 1};
  const std::vector<double> x = Random(&rng, n * dim), w = Random(&rng, n * dim);
  std::vector<int64_t> ps{n}, xs{n, dim}, as{m, dim}, ws{m}, col{1, n};
  DLTensor tp = Tensor(const_cast<int64_t*>(pos.data()), kDLInt, 64, &ps);
  // float64 compact reference.
  std::vector<double> gx(n * dim), ga(m * dim), gb(m * dim), gw(m);
  DLTensor tx = Tensor(const_cast<double*>(x.data()), kDLFloat, 64, &xs);
  DLTensor tg = Tensor(const_cast<double*>(w.data()), kDLFloat, 64, &xs);
  DLTensor tgx = Tensor(gx.data(), kDLFloat, 64, &xs);
  DLTensor tga = Tensor(ga.data(), kDLFloat, 64, &as);
  DLTensor tgb = Tensor(gb.data(), kDLFloat, 64, &as);
  DLTensor tgw = Tensor(gw.data(), kDLFloat, 64, &ws);
  ASSERT_EQ(gpe_grape_m_backward(h, &tp, &tx, &tg, &tgx, &tga, &tgb, &tgw), GPE_OK);
  // float32, column-major x, grad_out and grad_x (buffered path).
  std::vector<float> x32(n * dim), w32(n * dim), gx32(n * dim);
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t c = 0; c < dim; ++c) {
      x32[r + n * c] = static_cast<float>(x[r * dim + c]);
      w32[r + n * c] = static_cast<float>(w[r * dim + c]);
    }
  }
  std::vector<double> ga2(m * dim), gb2(m * dim), gw2(m);
  DLTensor tx32 = Tensor(x32.data(), kDLFloat, 32, &xs, &col);
  DLTensor tg32 = Tensor(w32.data(), kDLFloat, 32, &xs, &col);
  DLTensor tgx32 = Tensor(gx32.data(), kDLFloat, 32, &xs, &col);
  DLTensor tga2 = Tensor(ga2.data(), kDLFloat, 64, &as);
  DLTensor tgb2 = Tensor(gb2.data(), kDLFloat, 64, &as);
  DLTensor tgw2 = Tensor(gw2.data(), kDLFloat, 64, &ws);
  ASSERT_EQ(gpe_grape_m_backward(h, &tp, &tx32, &tg32, &tgx32, &tga2, &tgb2, &tgw2), GPE_OK)
      << gpe_last_error_message();
  // Inputs rounded to float32 (relative 6e-8) feed O(10)-sized gradients (|p| <= 5,
  // |a|, |b| ~ 2): differences ~1e-6; 1e-4 leaves margin while catching a layout mix-up.
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t c = 0; c < dim; ++c) EXPECT_NEAR(gx32[r + n * c], gx[r * dim + c], 1e-4);
  }
  for (int64_t i = 0; i < m * dim; ++i) {
    EXPECT_NEAR(ga2[i], ga[i], 1e-4 * std::max(1.0, std::abs(ga[i])));
    EXPECT_NEAR(gb2[i], gb[i], 1e-4 * std::max(1.0, std::abs(gb[i])));
  }
  for (int64_t k = 0; k < m; ++k) EXPECT_NEAR(gw2[k], gw[k], 1e-4 * std::max(1.0, std::abs(gw[k])));
  gpe_grape_m_destroy(h);
}

// ---- Algebraic trees, grids, periodic domains, locality -------------------------------

Matrix RandomSkewMatrix(std::mt19937_64* rng, int64_t d, double scale) {
  return SkewOf(Random(rng, d * d, scale), d);
}

struct TreeFixture {
  int64_t d = 3, k = 2;
  std::vector<double> skews;
  gpe_algebraic_tree* tree = nullptr;
  explicit TreeFixture(std::mt19937_64* rng) {
    for (int64_t c = 0; c < k; ++c) {
      Matrix s = RandomSkewMatrix(rng, d, 0.5);
      skews.insert(skews.end(), s.begin(), s.end());
    }
    Make();
  }
  void Make() {
    gpe_algebraic_tree_destroy(tree);
    tree = nullptr;
    gpe_algebraic_tree_options o = GPE_ALGEBRAIC_TREE_OPTIONS_INIT;
    o.dim = d;
    o.num_branches = k;
    o.skews = skews.data();
    EXPECT_EQ(gpe_algebraic_tree_create(&o, &tree), GPE_OK) << gpe_last_error_message();
  }
  ~TreeFixture() { gpe_algebraic_tree_destroy(tree); }
  // W_{c_1} ... W_{c_m} from the Taylor reference.
  Matrix Reference(const std::vector<int64_t>& address) const {
    Matrix m(d * d, 0.0);
    for (int64_t i = 0; i < d; ++i) m[i * d + i] = 1.0;
    for (int64_t c : address) {
      Matrix s(skews.begin() + c * d * d, skews.begin() + (c + 1) * d * d);
      m = MatMul(m, ExpReference(s, d), d);
    }
    return m;
  }
};

TEST(AlgebraicTree, ApplyAndMatrixMatchPathProductsOfExponentials) {
  std::mt19937_64 rng(71);
  TreeFixture f(&rng);
  // Addresses padded with -1: the root, depth 1, 2 and 4 nodes.
  std::vector<int64_t> addr = {-1, -1, -1, -1, 1, -1, -1, -1, 0, 1, -1, -1, 1, 1, 0, 1};
  const int64_t n = 4, L = 4, d = f.d;
  const std::vector<std::vector<int64_t>> paths = {{}, {1}, {0, 1}, {1, 1, 0, 1}};
  std::vector<double> x = Random(&rng, n * d), out(n * d);
  std::vector<int64_t> sa = {n, L}, sx = {n, d};
  DLTensor ta = Tensor(addr.data(), kDLInt, 64, &sa), tx = Tensor(x.data(), kDLFloat, 64, &sx),
           to = Tensor(out.data(), kDLFloat, 64, &sx);
  ASSERT_EQ(gpe_algebraic_tree_apply(f.tree, &ta, &tx, &to), GPE_OK) << gpe_last_error_message();
  for (int64_t r = 0; r < n; ++r) {
    const Matrix m = f.Reference(paths[r]);
    const std::vector<double> want = MatVec(m, x.data() + r * d, d);
    // Taylor reference ~1e-13 per factor; depth <= 4.
    for (int64_t i = 0; i < d; ++i) EXPECT_NEAR(out[r * d + i], want[i], 1e-12) << r << " " << i;
    Matrix got(d * d);
    std::vector<int64_t> sm = {d, d};
    DLTensor tm = Tensor(got.data(), kDLFloat, 64, &sm);
    ASSERT_EQ(gpe_algebraic_tree_matrix(f.tree, paths[r].data(),
                                        static_cast<int64_t>(paths[r].size()), &tm),
              GPE_OK);
    for (int64_t i = 0; i < d * d; ++i) EXPECT_NEAR(got[i], m[i], 1e-12);
  }
  // Free-group relativity: <rho(a) q, rho(b) k> = <q, rho(a)^T rho(b) k> for a = (0, 1)
  // and b = (1, 1, 0, 1) (rows 2 and 3): the path a^-1 b, not b - a.
  const Matrix ma = f.Reference(paths[2]), mb = f.Reference(paths[3]);
  Matrix rel(d * d, 0.0);
  for (int64_t i = 0; i < d; ++i) {
    for (int64_t j = 0; j < d; ++j) {
      for (int64_t t = 0; t < d; ++t) rel[i * d + j] += ma[t * d + i] * mb[t * d + j];
    }
  }
  const std::vector<double> rk = MatVec(rel, x.data() + 3 * d, d);
  double lhs = 0.0, rhs = 0.0;
  for (int64_t i = 0; i < d; ++i) {
    lhs += out[2 * d + i] * out[3 * d + i];
    rhs += x[2 * d + i] * rk[i];
  }
  EXPECT_NEAR(lhs, rhs, 1e-12);
  // float32, in place.
  std::vector<float> xf(x.begin(), x.end());
  DLTensor txf = Tensor(xf.data(), kDLFloat, 32, &sx);
  ASSERT_EQ(gpe_algebraic_tree_apply(f.tree, &ta, &txf, &txf), GPE_OK);
  for (int64_t i = 0; i < n * d; ++i) EXPECT_NEAR(xf[i], out[i], 1e-6);  // float rounding
}

TEST(AlgebraicTree, NodeMatricesAreLevelOrderPathProducts) {
  std::mt19937_64 rng(77);
  TreeFixture f(&rng);
  const int64_t d = f.d, count = 1 + 2 + 4 + 8;  // binary tree, depth <= 3
  std::vector<double> all(count * d * d);
  std::vector<int64_t> shape = {count, d, d};
  DLTensor t = Tensor(all.data(), kDLFloat, 64, &shape);
  ASSERT_EQ(gpe_algebraic_tree_node_matrices(f.tree, 3, &t), GPE_OK) << gpe_last_error_message();
  int64_t n = 0;
  for (int64_t depth = 0; depth <= 3; ++depth) {
    for (int64_t code = 0; code < (int64_t{1} << depth); ++code, ++n) {
      std::vector<int64_t> path(depth);
      for (int64_t s = 0; s < depth; ++s) path[s] = (code >> (depth - 1 - s)) & 1;  // base-k digits
      const Matrix want = f.Reference(path);
      // Taylor reference ~1e-13 per factor, depth <= 3.
      for (int64_t i = 0; i < d * d; ++i) EXPECT_NEAR(all[n * d * d + i], want[i], 1e-12) << n;
    }
  }
  std::vector<int64_t> wrong = {count - 1, d, d};
  DLTensor tw = Tensor(all.data(), kDLFloat, 64, &wrong);
  EXPECT_EQ(gpe_algebraic_tree_node_matrices(f.tree, 3, &tw), GPE_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(gpe_last_error_message()).find("[15, 3, 3]"), std::string::npos);
  EXPECT_NE(gpe_algebraic_tree_node_matrices(f.tree, -1, &t), GPE_OK);
  EXPECT_NE(gpe_algebraic_tree_node_matrices(f.tree, 40, &t), GPE_OK);  // 2^41 nodes
}

TEST(AlgebraicTree, BackwardMatchesFiniteDifferences) {
  std::mt19937_64 rng(72);
  TreeFixture f(&rng);
  const int64_t n = 3, L = 3, d = f.d, k = f.k;
  std::vector<int64_t> addr = {0, 1, 1, 1, -1, -1, 0, 0, -1};
  std::vector<double> x = Random(&rng, n * d), g = Random(&rng, n * d), gx(n * d),
                      gs(k * d * d, 7.0);
  std::vector<int64_t> sa = {n, L}, sx = {n, d}, ss = {k, d, d};
  DLTensor ta = Tensor(addr.data(), kDLInt, 64, &sa), tx = Tensor(x.data(), kDLFloat, 64, &sx),
           tg = Tensor(g.data(), kDLFloat, 64, &sx), tgx = Tensor(gx.data(), kDLFloat, 64, &sx),
           tgs = Tensor(gs.data(), kDLFloat, 64, &ss);
  ASSERT_EQ(gpe_algebraic_tree_backward(f.tree, &ta, &tx, &tg, &tgx, &tgs), GPE_OK)
      << gpe_last_error_message();
  auto loss = [&](const std::vector<double>& xx) {
    std::vector<double> y(n * d);
    std::vector<double> xc = xx;
    DLTensor txx = Tensor(xc.data(), kDLFloat, 64, &sx), ty = Tensor(y.data(), kDLFloat, 64, &sx);
    EXPECT_EQ(gpe_algebraic_tree_apply(f.tree, &ta, &txx, &ty), GPE_OK);
    double l = 0.0;
    for (int64_t i = 0; i < n * d; ++i) l += g[i] * y[i];
    return l;
  };
  // Central differences, h = 1e-5: truncation ~1e-10, rounding ~1e-11: 1e-7.
  const double h = 1e-5;
  for (int64_t i = 0; i < n * d; ++i) {
    EXPECT_NEAR(gx[i], CentralDifference(&x, i, h, [&] { return loss(x); }), 1e-7) << "x " << i;
  }
  // dL/dS entrywise (S perturbed as a free matrix: exp is defined for any S, and the
  // gradient is unprojected). The handle is rebuilt from perturbed skews, so perturb
  // symmetrically and compare with the projected gradient X - X^T.
  const std::vector<double> s0 = f.skews;
  for (int64_t c = 0; c < k; ++c) {
    for (int64_t i = 0; i < d; ++i) {
      for (int64_t j = i + 1; j < d; ++j) {
        auto at = [&](double delta) {
          f.skews = s0;
          f.skews[c * d * d + i * d + j] += delta;
          f.skews[c * d * d + j * d + i] -= delta;
          f.Make();
          return loss(x);
        };
        const double fd = (at(h) - at(-h)) / (2 * h);
        const double got = gs[c * d * d + i * d + j] - gs[c * d * d + j * d + i];
        EXPECT_NEAR(got, fd, 1e-7) << "branch " << c << " " << i << "," << j;
      }
    }
  }
}

TEST(AlgebraicTree, BadInputRejected) {
  std::mt19937_64 rng(73);
  TreeFixture f(&rng);
  gpe_algebraic_tree* t = nullptr;
  gpe_algebraic_tree_options o = GPE_ALGEBRAIC_TREE_OPTIONS_INIT;
  o.dim = 3;
  o.num_branches = 2;
  o.skews = f.skews.data();
  gpe_algebraic_tree_options bad = o;
  bad.skews = nullptr;
  EXPECT_EQ(gpe_algebraic_tree_create(&bad, &t), GPE_ERROR_INVALID_ARGUMENT);
  bad = o;
  bad.num_branches = 0;
  EXPECT_EQ(gpe_algebraic_tree_create(&bad, &t), GPE_ERROR_INVALID_ARGUMENT);
  std::vector<double> not_skew = f.skews;
  not_skew[1] += 0.5;
  bad.num_branches = 2;
  bad.skews = not_skew.data();
  EXPECT_EQ(gpe_algebraic_tree_create(&bad, &t), GPE_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(gpe_last_error_message()).find("skew"), std::string::npos);
  EXPECT_EQ(t, nullptr);
  std::vector<double> x(6, 1.0), out(6);
  std::vector<int64_t> sa = {2, 2}, sx = {2, 3};
  DLTensor tx = Tensor(x.data(), kDLFloat, 64, &sx), to = Tensor(out.data(), kDLFloat, 64, &sx);
  for (std::vector<int64_t> addr : {std::vector<int64_t>{0, 2, 0, -1},    // branch 2 of 2
                                    std::vector<int64_t>{-1, 0, 1, 1},    // index after -1
                                    std::vector<int64_t>{0, -2, 1, 1}}) {  // negative
    DLTensor ta = Tensor(addr.data(), kDLInt, 64, &sa);
    EXPECT_EQ(gpe_algebraic_tree_apply(f.tree, &ta, &tx, &to), GPE_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(gpe_last_error_message()).find("addresses"), std::string::npos);
  }
  std::vector<int64_t> addr = {0, 1, 1, -1};
  DLTensor ta = Tensor(addr.data(), kDLInt, 64, &sa);
  std::vector<double> gs(9);
  std::vector<int64_t> ss = {1, 3, 3};  // num_branches is 2
  DLTensor tgs = Tensor(gs.data(), kDLFloat, 64, &ss);
  EXPECT_EQ(gpe_algebraic_tree_backward(f.tree, &ta, &tx, &tx, nullptr, &tgs),
            GPE_ERROR_INVALID_ARGUMENT);
  const int64_t bad_address[] = {3};
  std::vector<double> m(9);
  std::vector<int64_t> sm = {3, 3};
  DLTensor tm = Tensor(m.data(), kDLFloat, 64, &sm);
  EXPECT_NE(gpe_algebraic_tree_matrix(f.tree, bad_address, 1, &tm), GPE_OK);
  EXPECT_EQ(gpe_algebraic_tree_matrix(f.tree, nullptr, 1, &tm), GPE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(gpe_algebraic_tree_apply(f.tree, &ta, &tx, &tx), GPE_OK);  // in place is fine
}

TEST(AlgebraicGrid, ApplyIsBlockDiagonalAndBackwardMatchesFiniteDifferences) {
  std::mt19937_64 rng(74);
  const std::vector<int64_t> dims = {2, 3};
  const int64_t d = 5, n = 3;
  std::vector<double> skews;
  for (int64_t da : dims) {
    Matrix s = RandomSkewMatrix(&rng, da, 0.5);
    skews.insert(skews.end(), s.begin(), s.end());
  }
  auto make = [&](const std::vector<double>& sk) {
    gpe_algebraic_grid_options o = GPE_ALGEBRAIC_GRID_OPTIONS_INIT;
    o.num_axes = 2;
    o.dims = dims.data();
    o.skews = sk.data();
    gpe_algebraic_grid* g = nullptr;
    EXPECT_EQ(gpe_algebraic_grid_create(&o, &g), GPE_OK) << gpe_last_error_message();
    return g;
  };
  gpe_algebraic_grid* grid = make(skews);
  int64_t dim = 0, axes = 0;
  ASSERT_EQ(gpe_algebraic_grid_shape(grid, &dim, &axes), GPE_OK);
  EXPECT_EQ(dim, d);
  EXPECT_EQ(axes, 2);
  std::vector<int64_t> pos = {3, -2, 0, 5, -7, 1};  // [n, 2]
  std::vector<double> x = Random(&rng, n * d), out(n * d);
  std::vector<int64_t> sp = {n, 2}, sx = {n, d};
  DLTensor tp = Tensor(pos.data(), kDLInt, 64, &sp), tx = Tensor(x.data(), kDLFloat, 64, &sx),
           to = Tensor(out.data(), kDLFloat, 64, &sx);
  ASSERT_EQ(gpe_algebraic_grid_apply(grid, &tp, &tx, &to), GPE_OK) << gpe_last_error_message();
  for (int64_t r = 0; r < n; ++r) {
    int64_t off = 0, soff = 0;
    for (int64_t a = 0; a < 2; ++a) {
      const int64_t da = dims[a];
      Matrix s(skews.begin() + soff, skews.begin() + soff + da * da);
      for (double& v : s) v *= static_cast<double>(pos[r * 2 + a]);
      const std::vector<double> want = MatVec(ExpReference(s, da), x.data() + r * d + off, da);
      // Taylor reference ~1e-13 relative at |p S| <~ 10.
      for (int64_t i = 0; i < da; ++i) EXPECT_NEAR(out[r * d + off + i], want[i], 1e-11);
      off += da;
      soff += da * da;
    }
  }
  std::vector<double> g = Random(&rng, n * d), gx(n * d), gs(13);
  std::vector<int64_t> ss = {13};
  DLTensor tg = Tensor(g.data(), kDLFloat, 64, &sx), tgx = Tensor(gx.data(), kDLFloat, 64, &sx),
           tgs = Tensor(gs.data(), kDLFloat, 64, &ss);
  ASSERT_EQ(gpe_algebraic_grid_backward(grid, &tp, &tx, &tg, &tgx, &tgs), GPE_OK)
      << gpe_last_error_message();
  auto loss = [&](gpe_algebraic_grid* gr, std::vector<double> xx) {
    std::vector<double> y(n * d);
    DLTensor txx = Tensor(xx.data(), kDLFloat, 64, &sx), ty = Tensor(y.data(), kDLFloat, 64, &sx);
    EXPECT_EQ(gpe_algebraic_grid_apply(gr, &tp, &txx, &ty), GPE_OK);
    double l = 0.0;
    for (int64_t i = 0; i < n * d; ++i) l += g[i] * y[i];
    return l;
  };
  // h = 1e-5 with |p S| <~ 10: truncation ~1e-8 relative; tolerance 1e-6 max(1, |fd|).
  const double h = 1e-5;
  for (int64_t i = 0; i < n * d; ++i) {
    const double fd = CentralDifference(&x, i, h, [&] { return loss(grid, x); });
    EXPECT_NEAR(gx[i], fd, 1e-6 * std::max(1.0, std::abs(fd)));
  }
  int64_t soff = 0;
  for (int64_t a = 0; a < 2; ++a) {
    const int64_t da = dims[a];
    for (int64_t i = 0; i < da; ++i) {
      for (int64_t j = i + 1; j < da; ++j) {
        auto at = [&](double delta) {
          std::vector<double> sk = skews;
          sk[soff + i * da + j] += delta;
          sk[soff + j * da + i] -= delta;
          gpe_algebraic_grid* gr = make(sk);
          const double l = loss(gr, x);
          gpe_algebraic_grid_destroy(gr);
          return l;
        };
        const double fd = (at(h) - at(-h)) / (2 * h);
        const double got = gs[soff + i * da + j] - gs[soff + j * da + i];
        EXPECT_NEAR(got, fd, 1e-6 * std::max(1.0, std::abs(fd))) << a << " " << i << j;
      }
    }
    soff += da * da;
  }
  // Bad input: positions with the wrong number of axes; gradient of the wrong size.
  std::vector<int64_t> sp3 = {1, 3};
  DLTensor tp3 = Tensor(pos.data(), kDLInt, 64, &sp3);
  std::vector<int64_t> sx1 = {1, d};
  DLTensor tx1 = Tensor(x.data(), kDLFloat, 64, &sx1), to1 = Tensor(out.data(), kDLFloat, 64, &sx1);
  EXPECT_EQ(gpe_algebraic_grid_apply(grid, &tp3, &tx1, &to1), GPE_ERROR_INVALID_ARGUMENT);
  std::vector<int64_t> ss12 = {12};
  DLTensor tgs12 = Tensor(gs.data(), kDLFloat, 64, &ss12);
  EXPECT_EQ(gpe_algebraic_grid_backward(grid, &tp, &tx, &tg, nullptr, &tgs12),
            GPE_ERROR_INVALID_ARGUMENT);
  gpe_algebraic_grid_options bad = GPE_ALGEBRAIC_GRID_OPTIONS_INIT;
  bad.num_axes = 9;
  bad.dims = dims.data();
  bad.skews = skews.data();
  gpe_algebraic_grid* none = nullptr;
  EXPECT_EQ(gpe_algebraic_grid_create(&bad, &none), GPE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(none, nullptr);
  gpe_algebraic_grid_destroy(grid);
}

TEST(AlgebraicPeriodic, WrapsAroundAndMatchesPlaneRotations) {
  std::mt19937_64 rng(75);
  const int64_t d = 4, n = 7, period = 12;
  const std::vector<int64_t> mult = {1, 5};
  gpe_algebraic_periodic_options o = GPE_ALGEBRAIC_PERIODIC_OPTIONS_INIT;
  o.dim = d;
  o.period = period;
  o.multipliers = mult.data();
  std::vector<int64_t> pos = {0, 1, 5, 12, 13, -11, 1000000000001};
  std::vector<double> x(n * d), out(n * d);
  const std::vector<double> one = Random(&rng, d);
  for (int64_t r = 0; r < n; ++r) std::copy(one.begin(), one.end(), x.begin() + r * d);
  std::vector<int64_t> sp = {n}, sx = {n, d};
  DLTensor tp = Tensor(pos.data(), kDLInt, 64, &sp), tx = Tensor(x.data(), kDLFloat, 64, &sx),
           to = Tensor(out.data(), kDLFloat, 64, &sx);
  ASSERT_EQ(gpe_algebraic_periodic_apply(&o, &tp, &tx, &to), GPE_OK) << gpe_last_error_message();
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t k = 0; k < d / 2; ++k) {
      // Plane k rotates by 2 pi m_k p / n; the residue m_k p mod n keeps it exact.
      const int64_t res = ((mult[k] * (pos[r] % period)) % period + period) % period;
      const double a = 2.0 * M_PI * static_cast<double>(res) / period;
      const double x1 = x[r * d + 2 * k], x2 = x[r * d + 2 * k + 1];
      EXPECT_NEAR(out[r * d + 2 * k], x1 * std::cos(a) - x2 * std::sin(a), 1e-14);
      EXPECT_NEAR(out[r * d + 2 * k + 1], x1 * std::sin(a) + x2 * std::cos(a), 1e-14);
    }
  }
  // Positions equal mod the period encode identically (bit for bit): 0 and 12, 1 and 13,
  // 1 and -11, 5 and 10^12 + 1 (10^12 = 4 mod 12).
  for (auto [a, b] : {std::pair<int, int>{0, 3}, {1, 4}, {1, 5}, {2, 6}}) {
    for (int64_t i = 0; i < d; ++i) EXPECT_EQ(out[a * d + i], out[b * d + i]) << a << " " << b;
  }
  gpe_algebraic_periodic_options bad = o;
  bad.period = 0;
  EXPECT_EQ(gpe_algebraic_periodic_apply(&bad, &tp, &tx, &to), GPE_ERROR_INVALID_ARGUMENT);
  bad = o;
  bad.dim = 5;
  EXPECT_EQ(gpe_algebraic_periodic_apply(&bad, &tp, &tx, &to), GPE_ERROR_INVALID_ARGUMENT);
  bad = o;
  bad.multipliers = nullptr;
  EXPECT_EQ(gpe_algebraic_periodic_apply(&bad, &tp, &tx, &to), GPE_ERROR_INVALID_ARGUMENT);
}

TEST(Locality, ScalesScoresByPowersOfC) {
  std::vector<int64_t> q = {0, 10, 1000000000000}, k = {0, 3, 10, 999999999990};
  std::vector<double> scores(12), want(12);
  std::mt19937_64 rng(76);
  scores = Random(&rng, 12);
  for (int64_t r = 0; r < 3; ++r) {
    for (int64_t c = 0; c < 4; ++c) {
      const double dist = std::fabs(static_cast<double>(q[r] - k[c]));
      want[r * 4 + c] = scores[r * 4 + c] * std::pow(0.98, dist);
    }
  }
  std::vector<int64_t> sq = {3}, sk = {4}, ss = {3, 4};
  DLTensor tq = Tensor(q.data(), kDLInt, 64, &sq), tk = Tensor(k.data(), kDLInt, 64, &sk),
           ts = Tensor(scores.data(), kDLFloat, 64, &ss);
  ASSERT_EQ(gpe_locality_scale(0.98, &tq, &tk, &ts), GPE_OK) << gpe_last_error_message();
  // exp(dist ln c) against pow: a few ulps of a value <= |score|; tiny values underflow
  // alike.
  for (int64_t i = 0; i < 12; ++i) EXPECT_NEAR(scores[i], want[i], 1e-14 * std::fabs(want[i]) + 1e-300);
  EXPECT_EQ(gpe_locality_scale(1.5, &tq, &tk, &ts), GPE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(gpe_locality_scale(std::nan(""), &tq, &tk, &ts), GPE_ERROR_INVALID_ARGUMENT);
  std::vector<int64_t> ss_bad = {4, 3};
  DLTensor tbad = Tensor(scores.data(), kDLFloat, 64, &ss_bad);
  EXPECT_EQ(gpe_locality_scale(0.98, &tq, &tk, &tbad), GPE_ERROR_INVALID_ARGUMENT);
}

// ---- Shaw value terms and Transformer-XL ---------------------------------------------

int64_t ShawLabel(int64_t i, int64_t j, int64_t k) {
  return std::min(std::max(j - i, -k), k) + k;
}

TEST(ShawValueOutput, MatchesDirectLoopAndBackwardMatchesFiniteDifferences) {
  std::mt19937_64 rng(81);
  const int64_t lq = 3, lk = 5, k = 2, dv = 3;
  std::vector<int64_t> qp = {0, 4, 1000000000000}, kp = {0, 1, 3, 7, 999999999999};
  std::vector<double> p = Random(&rng, lq * lk), table = Random(&rng, (2 * k + 1) * dv),
                      out(lq * dv);
  std::vector<int64_t> sq = {lq}, sk = {lk}, sp = {lq, lk}, st = {2 * k + 1, dv}, so = {lq, dv};
  DLTensor tqp = Tensor(qp.data(), kDLInt, 64, &sq), tkp = Tensor(kp.data(), kDLInt, 64, &sk),
           tp = Tensor(p.data(), kDLFloat, 64, &sp), tt = Tensor(table.data(), kDLFloat, 64, &st),
           to = Tensor(out.data(), kDLFloat, 64, &so);
  ASSERT_EQ(gpe_shaw_value_output(&tp, &tt, &tqp, &tkp, &to), GPE_OK) << gpe_last_error_message();
  auto reference = [&](const std::vector<double>& pp, const std::vector<double>& tab) {
    std::vector<double> r(lq * dv, 0.0);
    for (int64_t a = 0; a < lq; ++a) {
      for (int64_t b = 0; b < lk; ++b) {
        const int64_t label = ShawLabel(qp[a], kp[b], k);
        for (int64_t c = 0; c < dv; ++c) r[a * dv + c] += pp[a * lk + b] * tab[label * dv + c];
      }
    }
    return r;
  };
  const std::vector<double> want = reference(p, table);
  for (int64_t i = 0; i < lq * dv; ++i) EXPECT_NEAR(out[i], want[i], 1e-14);  // 5-term sums
  std::vector<double> g = Random(&rng, lq * dv), gp(lq * lk), gt(table.size(), 1.0);
  DLTensor tg = Tensor(g.data(), kDLFloat, 64, &so), tgp = Tensor(gp.data(), kDLFloat, 64, &sp),
           tgt = Tensor(gt.data(), kDLFloat, 64, &st);
  ASSERT_EQ(gpe_shaw_value_output_backward(&tp, &tt, &tqp, &tkp, &tg, &tgp, &tgt), GPE_OK)
      << gpe_last_error_message();
  auto loss = [&](const std::vector<double>& pp, const std::vector<double>& tab) {
    const std::vector<double> r = reference(pp, tab);
    double l = 0.0;
    for (int64_t i = 0; i < lq * dv; ++i) l += g[i] * r[i];
    return l;
  };
  // Bilinear in (p, table): central differences are exact up to rounding (1e-10).
  const double h = 1e-4;
  for (size_t i = 0; i < p.size(); ++i) {
    EXPECT_NEAR(gp[i], CentralDifference(&p, i, h, [&] { return loss(p, table); }), 1e-10);
  }
  for (size_t i = 0; i < table.size(); ++i) {
    // grad_label_table was 1.0 before: the gradient is ADDED.
    EXPECT_NEAR(gt[i] - 1.0, CentralDifference(&table, i, h, [&] { return loss(p, table); }),
                1e-10);
  }
  // Bad input: an even number of label rows; out with the wrong shape; out aliasing p.
  std::vector<int64_t> st_even = {4, dv};
  DLTensor teven = Tensor(table.data(), kDLFloat, 64, &st_even);
  EXPECT_EQ(gpe_shaw_value_output(&tp, &teven, &tqp, &tkp, &to), GPE_ERROR_INVALID_ARGUMENT);
  std::vector<int64_t> so_bad = {lq, dv + 1};
  std::vector<double> big(lq * (dv + 1));
  DLTensor tbad = Tensor(big.data(), kDLFloat, 64, &so_bad);
  EXPECT_EQ(gpe_shaw_value_output(&tp, &tt, &tqp, &tkp, &tbad), GPE_ERROR_INVALID_ARGUMENT);
  DLTensor alias = Tensor(p.data(), kDLFloat, 64, &so);
  EXPECT_EQ(gpe_shaw_value_output(&tp, &tt, &tqp, &tkp, &alias), GPE_ERROR_INVALID_ARGUMENT);
  table[0] = std::nan("");
  EXPECT_EQ(gpe_shaw_value_output(&tp, &tt, &tqp, &tkp, &to), GPE_ERROR_INVALID_ARGUMENT);
}

TEST(TransformerXL, MatchesDaiFormulaAndBackwardMatchesFiniteDifferences) {
  std::mt19937_64 rng(82);
  const int64_t lq = 3, lk = 4, d = 3, dr = 4;
  std::vector<int64_t> qp = {5, 9, 12}, kp = {0, 5, 9, 11};
  std::vector<double> q = Random(&rng, lq * d), k = Random(&rng, lk * d),
                      wr = Random(&rng, d * dr), u = Random(&rng, d), v = Random(&rng, d),
                      terms(lq * lk);
  std::vector<int64_t> sq = {lq}, sk = {lk}, sqm = {lq, d}, skm = {lk, d}, sw = {d, dr},
                       su = {d}, st = {lq, lk};
  gpe_transformer_xl_options o = GPE_TRANSFORMER_XL_OPTIONS_INIT;
  auto call = [&](std::vector<double>& qq, std::vector<double>& kk, std::vector<double>& ww,
                  std::vector<double>& uu, std::vector<double>& vv, std::vector<double>* out) {
    DLTensor tqp = Tensor(qp.data(), kDLInt, 64, &sq), tkp = Tensor(kp.data(), kDLInt, 64, &sk),
             tq = Tensor(qq.data(), kDLFloat, 64, &sqm), tk = Tensor(kk.data(), kDLFloat, 64, &skm),
             tw = Tensor(ww.data(), kDLFloat, 64, &sw), tu = Tensor(uu.data(), kDLFloat, 64, &su),
             tv = Tensor(vv.data(), kDLFloat, 64, &su), to = Tensor(out->data(), kDLFloat, 64, &st);
    return gpe_transformer_xl_score_terms(&o, &tq, &tk, &tqp, &tkp, &tw, &tu, &tv, &to);
  };
  ASSERT_EQ(call(q, k, wr, u, v, &terms), GPE_OK) << gpe_last_error_message();
  // Dai et al., sec. 3.3: q^T W_R R_{i-j} + u^T k_j + v^T W_R R_{i-j}, with R_t[2m] =
  // sin(t theta_m), R_t[2m+1] = cos(t theta_m), theta_m = 10000^(-2m/d_r); |t| <= 12 so
  // plain sin/cos are exact to an ulp.
  for (int64_t a = 0; a < lq; ++a) {
    for (int64_t b = 0; b < lk; ++b) {
      const double t = static_cast<double>(qp[a] - kp[b]);
      std::vector<double> r(dr), wrr(d, 0.0);
      for (int64_t m = 0; m < dr / 2; ++m) {
        const double theta = std::pow(10000.0, -2.0 * m / dr);
        r[2 * m] = std::sin(t * theta);
        r[2 * m + 1] = std::cos(t * theta);
      }
      for (int64_t i = 0; i < d; ++i) {
        for (int64_t j = 0; j < dr; ++j) wrr[i] += wr[i * dr + j] * r[j];
      }
      double want = 0.0;
      for (int64_t i = 0; i < d; ++i) {
        want += q[a * d + i] * wrr[i] + u[i] * k[b * d + i] + v[i] * wrr[i];
      }
      EXPECT_NEAR(terms[a * lk + b], want, 1e-13) << a << " " << b;
    }
  }
  // Backward: every gradient against central differences (the terms are bilinear in
  // (q or v, W_R) and linear in u, k: h = 1e-4 leaves only rounding, 1e-9).
  std::vector<double> g = Random(&rng, lq * lk);
  std::vector<double> gq(q.size()), gk(k.size()), gw(wr.size()), gu(d), gvv(d);
  {
    DLTensor tqp = Tensor(qp.data(), kDLInt, 64, &sq), tkp = Tensor(kp.data(), kDLInt, 64, &sk),
             tq = Tensor(q.data(), kDLFloat, 64, &sqm), tk = Tensor(k.data(), kDLFloat, 64, &skm),
             tw = Tensor(wr.data(), kDLFloat, 64, &sw), tu = Tensor(u.data(), kDLFloat, 64, &su),
             tv = Tensor(v.data(), kDLFloat, 64, &su), tg = Tensor(g.data(), kDLFloat, 64, &st),
             tgq = Tensor(gq.data(), kDLFloat, 64, &sqm), tgk = Tensor(gk.data(), kDLFloat, 64, &skm),
             tgw = Tensor(gw.data(), kDLFloat, 64, &sw), tgu = Tensor(gu.data(), kDLFloat, 64, &su),
             tgv = Tensor(gvv.data(), kDLFloat, 64, &su);
    ASSERT_EQ(gpe_transformer_xl_score_terms_backward(&o, &tq, &tk, &tqp, &tkp, &tw, &tu, &tv, &tg,
                                                      &tgq, &tgk, &tgw, &tgu, &tgv),
              GPE_OK)
        << gpe_last_error_message();
  }
  auto loss = [&]() {
    std::vector<double> out(lq * lk);
    EXPECT_EQ(call(q, k, wr, u, v, &out), GPE_OK);
    double l = 0.0;
    for (int64_t i = 0; i < lq * lk; ++i) l += g[i] * out[i];
    return l;
  };
  const double h = 1e-4;
  auto check = [&](std::vector<double>* param, const std::vector<double>& grad, const char* name) {
    for (size_t i = 0; i < param->size(); ++i) {
      EXPECT_NEAR(grad[i], CentralDifference(param, i, h, loss), 1e-9) << name << " " << i;
    }
  };
  check(&q, gq, "q");
  check(&k, gk, "k");
  check(&wr, gw, "w_r");
  check(&u, gu, "u");
  check(&v, gvv, "v");
  // Bad input: base <= 0, u of the wrong length, non-finite W_R.
  gpe_transformer_xl_options bad = o;
  bad.base = 0.0;
  std::swap(o, bad);
  EXPECT_EQ(call(q, k, wr, u, v, &terms), GPE_ERROR_INVALID_ARGUMENT);
  std::swap(o, bad);
  std::vector<int64_t> su_bad = {d + 1};
  std::vector<double> u_long(d + 1, 0.0);
  {
    DLTensor tqp = Tensor(qp.data(), kDLInt, 64, &sq), tkp = Tensor(kp.data(), kDLInt, 64, &sk),
             tq = Tensor(q.data(), kDLFloat, 64, &sqm), tk = Tensor(k.data(), kDLFloat, 64, &skm),
             tw = Tensor(wr.data(), kDLFloat, 64, &sw), tu = Tensor(u_long.data(), kDLFloat, 64, &su_bad),
             tv = Tensor(v.data(), kDLFloat, 64, &su), to = Tensor(terms.data(), kDLFloat, 64, &st);
    EXPECT_EQ(gpe_transformer_xl_score_terms(&o, &tq, &tk, &tqp, &tkp, &tw, &tu, &tv, &to),
              GPE_ERROR_INVALID_ARGUMENT);
  }
  wr[0] = std::numeric_limits<double>::infinity();
  EXPECT_EQ(call(q, k, wr, u, v, &terms), GPE_ERROR_INVALID_ARGUMENT);
}

}  // namespace
