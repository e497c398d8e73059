#include "encodings/sequence/grape_m.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <vector>

#include <Eigen/Dense>
#include "gtest/gtest.h"
#include "group/so_dense.h"
#include "group/so_planes.h"

namespace gpe {
namespace encodings {
namespace sequence {
namespace {

std::vector<double> RandomVector(int64_t n, std::mt19937_64& rng) {
  std::normal_distribution<double> normal;
  std::vector<double> v(static_cast<size_t>(n));
  for (double& x : v) x = normal(rng);
  return v;
}

std::vector<double> RopeThetas(int64_t planes, double base) {
  std::vector<double> t(static_cast<size_t>(planes));
  for (int64_t i = 0; i < planes; ++i) t[i] = std::pow(base, -2.0 * i / (2.0 * planes));
  return t;
}

// L(a, b) = a b^T - b a^T, dense, for the independent references below.
Eigen::MatrixXd DenseL(const std::vector<double>& a, const std::vector<double>& b) {
  const Eigen::Map<const Eigen::VectorXd> va(a.data(), a.size()), vb(b.data(), b.size());
  return va * vb.transpose() - vb * va.transpose();
}

std::vector<int64_t> SomePositions(std::mt19937_64& rng, int count) {
  std::vector<int64_t> ps = {0, 1, -1, 7, int64_t{1} << 31, -(int64_t{1} << 40),
                             INT64_MAX, INT64_MIN};
  for (int r = 0; r < count; ++r) {
    const int bits = static_cast<int>(rng() % 63);
    const int64_t p = bits == 0 ? 0 : static_cast<int64_t>(rng() >> (64 - bits));
    ps.push_back(rng() % 2 ? -p : p);
  }
  return ps;
}

// ---------------------------------------------------------------------------------
// Commuting planes
// ---------------------------------------------------------------------------------

template <class T>
void ExpectRopeBitIdentical(group::PlanePairing pairing, int64_t dim, int64_t rotary_dim) {
  std::mt19937_64 rng(11);
  auto rope = group::CommutingPlanes::Create(dim, rotary_dim, RopeThetas(rotary_dim / 2, 10000.0),
                                             pairing);
  ASSERT_TRUE(rope.ok()) << rope.status();
  auto grape = GrapeMCommutingPlanes::FromRoPE(*rope);
  ASSERT_TRUE(grape.ok()) << grape.status();
  // Runs of equal positions (the heads of one token: Apply reuses cos/sin within a run)
  // and returns to earlier positions, so a stale reuse would show.
  std::vector<int64_t> ps;
  for (int64_t p : SomePositions(rng, 40)) ps.insert(ps.end(), 1 + rng() % 3, p);
  ps.insert(ps.end(), {5, 5, 7, 5, 7, 7});
  std::vector<T> x(ps.size() * dim), y_rope(x.size()), y_grape(x.size());
  for (T& v : x) v = static_cast<T>(std::normal_distribution<double>()(rng));
  ASSERT_TRUE(rope->Apply<T>(ps, x.data(), dim, y_rope.data(), dim).ok());
  ASSERT_TRUE(grape->Apply<T>(ps, x.data(), dim, y_grape.data(), dim).ok());
  // Exact equality: the canonical GRAPE-M choice IS RoPE (004, L_RoPE), computed with the
  // same reduced angles and the same double arithmetic.
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(y_rope[i], y_grape[i]) << "element " << i;
  for (int64_t p : {int64_t{0}, int64_t{3}, int64_t{1} << 33}) {
    EXPECT_EQ(rope->Matrix(p), grape->Matrix(p)) << p;
  }
  EXPECT_EQ(rope->Generator(), grape->Generator());
}

TEST(GrapeMCommutingPlanesTest, ReproducesRopeExactly) {
  ExpectRopeBitIdentical<double>(group::PlanePairing::kInterleaved, 16, 16);
  ExpectRopeBitIdentical<float>(group::PlanePairing::kInterleaved, 16, 16);
  ExpectRopeBitIdentical<double>(group::PlanePairing::kHalfSplit, 12, 8);
  ExpectRopeBitIdentical<float>(group::PlanePairing::kHalfSplit, 64, 64);
  ExpectRopeBitIdentical<float>(group::PlanePairing::kInterleaved, 10, 6);
}

TEST(GrapeMCommutingPlanesTest, RopeInSummaryCoordinatesThroughRank2Rotations) {
  // Written with GRAPE's L(a, b): RoPE's plane i is a = e_{2i+1}, b = e_{2i},
  // omega = theta_i; the general rank-2 closed form (a different formula) agrees to
  // rounding. Swapping a and b reverses the rotation: RoPE at -p.
  const int64_t dim = 8;
  const std::vector<double> thetas = RopeThetas(dim / 2, 10000.0);
  std::vector<Rank2Generator> rope_gens, swapped;
  for (int64_t i = 0; i < dim / 2; ++i) {
    std::vector<double> e0(dim, 0.0), e1(dim, 0.0);
    e0[2 * i] = 1.0;
    e1[2 * i + 1] = 1.0;
    rope_gens.push_back({e1, e0, thetas[i]});
    swapped.push_back({e0, e1, thetas[i]});
  }
  auto prod = GrapeMProduct::Create(rope_gens);
  auto prod_swapped = GrapeMProduct::Create(swapped);
  auto rope = group::CommutingPlanes::Create(dim, dim, thetas, group::PlanePairing::kInterleaved);
  ASSERT_TRUE(prod.ok() && prod_swapped.ok() && rope.ok());
  for (int64_t p : {int64_t{0}, int64_t{5}, int64_t{-1234567}, int64_t{1} << 45}) {
    // Both routes reduce p * theta exactly and round cos/sin once; they differ only in
    // how the 2x2 entries are assembled (a few ulps), hence 1e-14.
    EXPECT_LT((prod->Matrix(p) - rope->Matrix(p)).cwiseAbs().maxCoeff(), 1e-14) << p;
    if (p != INT64_MIN) {
      EXPECT_LT((prod_swapped->Matrix(p) - rope->Matrix(-p)).cwiseAbs().maxCoeff(), 1e-14) << p;
    }
  }
}

TEST(GrapeMCommutingPlanesTest, HomomorphismRelativityAndGenerator) {
  std::mt19937_64 rng(12);
  const int64_t dim = 9;  // coordinate 4 and 8 are in no plane
  auto g = GrapeMCommutingPlanes::Create(dim, {{0, 5, 0.7}, {3, 1, -1.3}, {2, 6, 0.01}, {7, 4, 2.5}});
  ASSERT_TRUE(g.ok()) << g.status();
  // exp(n S) through Eigen's Pade exp, an independent route, for small n (|n S| <= 7.5:
  // relative error ~1e-14).
  for (int64_t n : {-3, -1, 0, 1, 2, 3}) {
    auto e = group::SkewExp(static_cast<double>(n) * g->Generator());
    ASSERT_TRUE(e.ok());
    EXPECT_LT((*e - g->Matrix(n)).cwiseAbs().maxCoeff(), 1e-13) << n;
  }
  // Relativity: <G(i) q, G(j) k> = <q, G(j - i) k> at large positions. Each side is
  // a sum of d products of O(1) terms computed to ~1e-16 relative, so 1e-12 is ample.
  const std::vector<int64_t> is = {0, 5, int64_t{1} << 40, -(int64_t{1} << 35)};
  for (int64_t i : is) {
    for (int64_t j : is) {
      const std::vector<double> q = RandomVector(dim, rng), k = RandomVector(dim, rng);
      std::vector<double> gq(dim), gk(dim), gd(dim);
      const std::vector<int64_t> pi = {i}, pj = {j}, pd = {j - i};
      ASSERT_TRUE(g->Apply<double>(pi, q.data(), dim, gq.data(), dim).ok());
      ASSERT_TRUE(g->Apply<double>(pj, k.data(), dim, gk.data(), dim).ok());
      ASSERT_TRUE(g->Apply<double>(pd, k.data(), dim, gd.data(), dim).ok());
      double lhs = 0, rhs = 0;
      for (int64_t c = 0; c < dim; ++c) {
        lhs += gq[c] * gk[c];
        rhs += q[c] * gd[c];
      }
      EXPECT_NEAR(lhs, rhs, 1e-12) << i << " " << j;
    }
  }
}

// Central differences of L = sum_j g_j . out_j in double. With |p| <= 4, omega ~ 1 and
// h = 1e-5, truncation is ~h^2 |L'''| / 6 ~ 1e-10 * 4^3 and rounding ~1e-16 |L| / h ~ 1e-10,
// so 1e-6 relative to max(1, |grad|) passes any correct gradient while an error of a
// single term (order 1) fails.
constexpr double kFdStep = 1e-5;
constexpr double kFdTol = 1e-6;

double CentralDifference(const std::function<double(double)>& loss) {
  return (loss(kFdStep) - loss(-kFdStep)) / (2 * kFdStep);
}

TEST(GrapeMCommutingPlanesTest, BackwardMatchesFiniteDifferences) {
  std::mt19937_64 rng(13);
  const int64_t dim = 7, n = 5;
  std::vector<CoordinatePlane> planes = {{0, 3, 0.9}, {5, 1, -0.4}, {2, 6, 1.7}};
  const std::vector<int64_t> ps = {0, 1, -2, 3, -4};
  const std::vector<double> x = RandomVector(n * dim, rng), g = RandomVector(n * dim, rng);
  auto loss_of = [&](const std::vector<CoordinatePlane>& pl, const std::vector<double>& xx) {
    auto enc = GrapeMCommutingPlanes::Create(dim, pl);
    EXPECT_TRUE(enc.ok());
    std::vector<double> y(n * dim);
    EXPECT_TRUE(enc->Apply<double>(ps, xx.data(), dim, y.data(), dim).ok());
    double l = 0;
    for (size_t i = 0; i < y.size(); ++i) l += g[i] * y[i];
    return l;
  };
  auto enc = GrapeMCommutingPlanes::Create(dim, planes);
  ASSERT_TRUE(enc.ok());
  std::vector<double> grad_omega, grad_in(n * dim);
  ASSERT_TRUE(enc->Backward<double>(ps, x.data(), dim, g.data(), dim, grad_in.data(), dim,
                                    &grad_omega)
                  .ok());
  for (size_t k = 0; k < planes.size(); ++k) {
    const double fd = CentralDifference([&](double h) {
      auto pl = planes;
      pl[k].omega += h;
      return loss_of(pl, x);
    });
    EXPECT_NEAR(grad_omega[k], fd, kFdTol * std::max(1.0, std::abs(fd))) << "omega " << k;
  }
  for (size_t i = 0; i < x.size(); ++i) {
    const double fd = CentralDifference([&](double h) {
      auto xx = x;
      xx[i] += h;
      return loss_of(planes, xx);
    });
    EXPECT_NEAR(grad_in[i], fd, kFdTol * std::max(1.0, std::abs(fd))) << "x " << i;
  }
  // In-place grad_in == grad_out gives the same result.
  std::vector<double> g_inplace = g, unused;
  ASSERT_TRUE(enc->Backward<double>(ps, x.data(), dim, g_inplace.data(), dim, g_inplace.data(),
                                    dim, &unused)
                  .ok());
  for (size_t i = 0; i < g.size(); ++i) EXPECT_EQ(g_inplace[i], grad_in[i]);
}

TEST(GrapeMCommutingPlanesTest, RejectsBadInput) {
  EXPECT_FALSE(GrapeMCommutingPlanes::Create(1, {}).ok());
  EXPECT_FALSE(GrapeMCommutingPlanes::Create(4, {{0, 4, 1.0}}).ok());
  EXPECT_FALSE(GrapeMCommutingPlanes::Create(4, {{-1, 2, 1.0}}).ok());
  EXPECT_FALSE(GrapeMCommutingPlanes::Create(4, {{1, 1, 1.0}}).ok());
  EXPECT_FALSE(GrapeMCommutingPlanes::Create(4, {{0, 1, 1.0}, {1, 2, 1.0}}).ok());
  EXPECT_FALSE(GrapeMCommutingPlanes::Create(4, {{0, 1, NAN}}).ok());
  EXPECT_FALSE(GrapeMCommutingPlanes::Create(4, {{0, 1, INFINITY}}).ok());
  auto g = GrapeMCommutingPlanes::Create(4, {{0, 1, 1.0}});
  ASSERT_TRUE(g.ok());
  std::vector<double> buf(16);
  const std::vector<int64_t> ps = {1, 2};
  EXPECT_FALSE(g->Apply<double>(ps, nullptr, 4, buf.data(), 4).ok());
  EXPECT_FALSE(g->Apply<double>(ps, buf.data(), 3, buf.data() + 8, 4).ok());
  EXPECT_FALSE(g->Apply<double>(ps, buf.data(), 4, buf.data() + 2, 4).ok());  // overlap
  EXPECT_FALSE(g->Apply<double>(ps, buf.data(), 4, buf.data(), 5).ok());
  EXPECT_TRUE(g->Apply<double>(ps, buf.data(), 4, buf.data(), 4).ok());  // in place
  EXPECT_FALSE(g->Backward<double>(ps, buf.data(), 4, buf.data(), 4, nullptr, 4, nullptr).ok());
  // grad_in over in (one row on): row 0's input gradient would overwrite row 1's input
  // before the generator gradient reads it (a wrong gradient with OK before).
  std::vector<double> in = {1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0}, grad_out = {1, 0, 0, 0, 1, 0, 0, 0};
  std::vector<double> grad_omega;
  const absl::Status overlap =
      g->Backward<double>(ps, in.data(), 4, grad_out.data(), 4, in.data() + 4, 4, &grad_omega);
  EXPECT_EQ(overlap.code(), absl::StatusCode::kInvalidArgument) << overlap;
  EXPECT_FALSE(
      g->Backward<double>(ps, in.data(), 4, grad_out.data(), 4, in.data(), 4, &grad_omega).ok());
  std::vector<double> grad_in(8);
  EXPECT_TRUE(
      g->Backward<double>(ps, in.data(), 4, grad_out.data(), 4, grad_in.data(), 4, &grad_omega).ok());
}

// ---------------------------------------------------------------------------------
// Non-commuting products
// ---------------------------------------------------------------------------------

std::vector<Rank2Generator> RandomGenerators(int64_t m, int64_t dim, double omega_scale,
                                             std::mt19937_64& rng) {
  std::vector<Rank2Generator> gens;
  std::normal_distribution<double> normal;
  for (int64_t k = 0; k < m; ++k) {
    gens.push_back({RandomVector(dim, rng), RandomVector(dim, rng), omega_scale * normal(rng)});
  }
  return gens;
}

TEST(GrapeMProductTest, MatchesDenseProductOfExponentials) {
  std::mt19937_64 rng(21);
  const int64_t dim = 6;
  const auto gens = RandomGenerators(3, dim, 0.3, rng);
  auto prod = GrapeMProduct::Create(gens);
  ASSERT_TRUE(prod.ok()) << prod.status();
  for (int64_t n : {-4, -1, 0, 1, 3}) {
    // Independent reference: prod_k expm(n omega_k L_k) with Eigen's Pade exp (~1e-14
    // for these norms, |n omega L| <~ 30), so 1e-11 bounds the product of 3 such.
    Eigen::MatrixXd ref = Eigen::MatrixXd::Identity(dim, dim);
    for (const auto& g : gens) {
      auto e = group::SkewExp(static_cast<double>(n) * g.omega * DenseL(g.a, g.b));
      ASSERT_TRUE(e.ok());
      ref = ref * *e;
    }
    EXPECT_LT((prod->Matrix(n) - ref).cwiseAbs().maxCoeff(), 1e-11) << n;
    // Apply agrees with the matrix (both in double, O(m d) vs dense: ~1e-15).
    const std::vector<double> x = RandomVector(dim, rng);
    std::vector<double> y(dim);
    const std::vector<int64_t> pn = {n};
    ASSERT_TRUE(prod->Apply<double>(pn, x.data(), dim, y.data(), dim).ok());
    const Eigen::VectorXd ym = prod->Matrix(n) * Eigen::Map<const Eigen::VectorXd>(x.data(), dim);
    for (int64_t i = 0; i < dim; ++i) EXPECT_NEAR(y[i], ym[i], 1e-13);
  }
}

TEST(GrapeMProductTest, PreservesNormsAtAnyPosition) {
  std::mt19937_64 rng(22);
  const int64_t dim = 16;
  auto prod = GrapeMProduct::Create(RandomGenerators(5, dim, 1.0, rng));
  ASSERT_TRUE(prod.ok());
  const std::vector<int64_t> ps = SomePositions(rng, 30);
  const std::vector<double> x = RandomVector(ps.size() * dim, rng);
  std::vector<double> y(x.size());
  std::vector<float> xf(x.begin(), x.end()), yf(x.size());
  ASSERT_TRUE(prod->Apply<double>(ps, x.data(), dim, y.data(), dim).ok());
  ASSERT_TRUE(prod->Apply<float>(ps, xf.data(), dim, yf.data(), dim).ok());
  for (size_t j = 0; j < ps.size(); ++j) {
    double nx = 0, ny = 0;
    for (int64_t i = 0; i < dim; ++i) {
      nx += x[j * dim + i] * x[j * dim + i];
      ny += y[j * dim + i] * y[j * dim + i];
      // float path: same double arithmetic, input and output rounded to float
      // (2 * 6e-8 relative of entries of size <~ |x| ~ 4).
      EXPECT_NEAR(yf[j * dim + i], y[j * dim + i], 4e-6 * std::sqrt(nx + 1.0) + 1e-6);
    }
    // Five orthogonal factors, each exact to ~1e-15 relative (angles reduced exactly).
    EXPECT_NEAR(std::sqrt(ny), std::sqrt(nx), 1e-13 * std::sqrt(nx)) << "p " << ps[j];
  }
}

double Score(const GrapeMProduct& g, int64_t i, const std::vector<double>& q, int64_t j,
             const std::vector<double>& k) {
  const int64_t d = g.dim();
  std::vector<double> gq(d), gk(d);
  const std::vector<int64_t> pi = {i}, pj = {j};
  EXPECT_TRUE(g.Apply<double>(pi, q.data(), d, gq.data(), d).ok());
  EXPECT_TRUE(g.Apply<double>(pj, k.data(), d, gk.data(), d).ok());
  double s = 0;
  for (int64_t c = 0; c < d; ++c) s += gq[c] * gk[c];
  return s;
}

TEST(GrapeMProductTest, SingleGeneratorIsRelative) {
  std::mt19937_64 rng(23);
  const int64_t dim = 10;
  auto g = GrapeMProduct::Create(RandomGenerators(1, dim, 0.8, rng));
  ASSERT_TRUE(g.ok());
  const std::vector<double> q = RandomVector(dim, rng), k = RandomVector(dim, rng);
  // Scores of pairs with the same offset j - i agree: one-parameter subgroup, angles
  // reduced exactly, so ~1e-14 relative to |q| |k| ~ 10 at any offset and position.
  for (int64_t off : {int64_t{0}, int64_t{3}, int64_t{-17}, int64_t{1} << 20}) {
    const double base = Score(*g, 0, q, off, k);
    for (int64_t i : {int64_t{5}, int64_t{-1000}, int64_t{1} << 41}) {
      EXPECT_NEAR(Score(*g, i, q, i + off, k), base, 1e-12) << off << " " << i;
    }
  }
}

TEST(GrapeMProductTest, DisjointPlanesCommuteButGenericProductsAreNotHomomorphisms) {
  std::mt19937_64 rng(24);
  const int64_t dim = 8;
  // Generators supported on disjoint coordinate blocks commute: G is a homomorphism.
  std::vector<Rank2Generator> disjoint;
  for (int64_t blk = 0; blk < 2; ++blk) {
    std::vector<double> a(dim, 0.0), b(dim, 0.0);
    for (int64_t i = 0; i < 4; ++i) {
      a[4 * blk + i] = std::normal_distribution<double>()(rng);
      b[4 * blk + i] = std::normal_distribution<double>()(rng);
    }
    disjoint.push_back({a, b, 0.6});
  }
  auto commuting = GrapeMProduct::Create(disjoint);
  ASSERT_TRUE(commuting.ok());
  // ~1e-15 per product entry for orthogonal factors of size O(1).
  EXPECT_LT((commuting->Matrix(3) * commuting->Matrix(4) - commuting->Matrix(7))
                .cwiseAbs()
                .maxCoeff(),
            1e-13);
  // Generic generators share coordinates and do not commute: G(1) G(1) != G(2). The
  // defect is O(omega^2 |[L_1, L_2]|), here O(0.1) or more; 1e-3 only guards against
  // an accidental (coincidental) commuting draw. This is the documented limitation.
  auto generic = GrapeMProduct::Create(RandomGenerators(2, dim, 0.5, rng));
  ASSERT_TRUE(generic.ok());
  EXPECT_GT((generic->Matrix(1) * generic->Matrix(1) - generic->Matrix(2)).cwiseAbs().maxCoeff(),
            1e-3);
}

TEST(GrapeMProductTest, BackwardMatchesFiniteDifferences) {
  std::mt19937_64 rng(25);
  const int64_t dim = 5, n = 4, m = 3;
  const auto gens = RandomGenerators(m, dim, 0.4, rng);
  const std::vector<int64_t> ps = {1, -2, 3, 0};
  const std::vector<double> x = RandomVector(n * dim, rng), g = RandomVector(n * dim, rng);
  auto loss_of = [&](const std::vector<Rank2Generator>& gg, const std::vector<double>& xx) {
    auto enc = GrapeMProduct::Create(gg);
    EXPECT_TRUE(enc.ok());
    std::vector<double> y(n * dim);
    EXPECT_TRUE(enc->Apply<double>(ps, xx.data(), dim, y.data(), dim).ok());
    double l = 0;
    for (size_t i = 0; i < y.size(); ++i) l += g[i] * y[i];
    return l;
  };
  auto enc = GrapeMProduct::Create(gens);
  ASSERT_TRUE(enc.ok());
  GrapeMProduct::Gradients grads;
  std::vector<double> grad_in(n * dim);
  ASSERT_TRUE(
      enc->Backward<double>(ps, x.data(), dim, g.data(), dim, grad_in.data(), dim, &grads).ok());
  ASSERT_EQ(grads.generators.size(), static_cast<size_t>(m));
  for (int64_t k = 0; k < m; ++k) {
    for (int64_t i = 0; i < dim; ++i) {
      const double fda = CentralDifference([&](double h) {
        auto gg = gens;
        gg[k].a[i] += h;
        return loss_of(gg, x);
      });
      EXPECT_NEAR(grads.generators[k].a[i], fda, kFdTol * std::max(1.0, std::abs(fda)))
          << "a " << k << " " << i;
      const double fdb = CentralDifference([&](double h) {
        auto gg = gens;
        gg[k].b[i] += h;
        return loss_of(gg, x);
      });
      EXPECT_NEAR(grads.generators[k].b[i], fdb, kFdTol * std::max(1.0, std::abs(fdb)))
          << "b " << k << " " << i;
    }
    const double fdw = CentralDifference([&](double h) {
      auto gg = gens;
      gg[k].omega += h;
      return loss_of(gg, x);
    });
    EXPECT_NEAR(grads.generators[k].omega, fdw, kFdTol * std::max(1.0, std::abs(fdw)))
        << "omega " << k;
  }
  for (size_t i = 0; i < x.size(); ++i) {
    const double fd = CentralDifference([&](double h) {
      auto xx = x;
      xx[i] += h;
      return loss_of(gens, xx);
    });
    EXPECT_NEAR(grad_in[i], fd, kFdTol * std::max(1.0, std::abs(fd))) << "x " << i;
  }
}

TEST(GrapeMProductTest, RejectsBadInput) {
  EXPECT_FALSE(GrapeMProduct::Create({}).ok());
  EXPECT_FALSE(GrapeMProduct::Create({{{1.0}, {0.0}, 1.0}}).ok());  // d = 1
  EXPECT_FALSE(GrapeMProduct::Create({{{1.0, 0.0}, {0.0, 1.0, 0.0}, 1.0}}).ok());
  EXPECT_FALSE(GrapeMProduct::Create({{{1.0, 0.0}, {0.0, 1.0}, 1.0},
                                      {{1.0, 0.0, 0.0}, {0.0, 1.0, 0.0}, 1.0}})
                   .ok());
  EXPECT_FALSE(GrapeMProduct::Create({{{1.0, NAN}, {0.0, 1.0}, 1.0}}).ok());
  EXPECT_FALSE(GrapeMProduct::Create({{{1.0, 0.0}, {0.0, 1.0}, INFINITY}}).ok());
  auto g = GrapeMProduct::Create({{{1.0, 0.0}, {0.0, 1.0}, 1.0}});
  ASSERT_TRUE(g.ok());
  std::vector<double> buf(8);
  const std::vector<int64_t> ps = {1, 2};
  EXPECT_FALSE(g->Apply<double>(ps, buf.data(), 1, buf.data() + 4, 2).ok());
  EXPECT_FALSE(g->Apply<double>(ps, nullptr, 2, buf.data(), 2).ok());
  EXPECT_FALSE(g->Backward<double>(ps, buf.data(), 2, buf.data(), 2, nullptr, 2, nullptr).ok());
}

}  // namespace
}  // namespace sequence
}  // namespace encodings
}  // namespace gpe
