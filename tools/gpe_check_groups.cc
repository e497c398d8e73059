#include "tools/gpe_check_groups.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <Eigen/Dense>
#include "group/free_group.h"
#include "group/free_representation.h"
#include "group/so_dense.h"
#include "group/so_planes.h"
#include "group/so_rank2.h"
#include "group/unipotent.h"

namespace gpe {
namespace tools {
namespace {

// The larger of two deviations, NaN if either is (std::max would drop a NaN trial and a
// law that gave NaN everywhere would print "ok").
double Worse(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<double>::quiet_NaN();
  return std::max(a, b);
}

using Eigen::MatrixXd;
using Eigen::VectorXd;

// One law's outcome: the worst value measured over all trials and the bound it must
// respect (at most `bound`; at least `bound` for separation laws).
struct LawResult {
  std::string representation;
  std::string law;
  double worst = 0.0;
  double bound = 0.0;
  std::string error;  // a status failure while checking, if any
  bool at_least = false;
  bool ok() const { return error.empty() && (at_least ? worst >= bound : worst <= bound); }
};

double MaxAbs(const MatrixXd& m) { return m.cwiseAbs().maxCoeff(); }

// The laws of a representation rho of Z: rho(0) = I, rho(p + q) = rho(p) rho(q),
// rho(-p) = rho(p)^-1, and, for orthogonal rho, rho(p)^T rho(p) = I and relativity
// <rho(i) q, rho(j) k> = <q, rho(j - i) k>.
void CheckIntegerRepresentation(const std::string& name,
                                const std::function<MatrixXd(int64_t)>& rho, int64_t dim,
                                bool orthogonal, double tol, int trials, std::mt19937_64& rng,
                                std::vector<LawResult>* out) {
  // Positions up to 2^31 either way; sums stay in int64.
  std::uniform_int_distribution<int64_t> pos(-(int64_t{1} << 31), int64_t{1} << 31);
  std::normal_distribution<double> normal;
  LawResult identity{name, "rho(0) = I", 0, tol, ""};
  LawResult hom{name, "rho(p+q) = rho(p) rho(q)", 0, tol, ""};
  LawResult inv{name, "rho(-p) rho(p) = I", 0, tol, ""};
  LawResult orth{name, "rho(p)^T rho(p) = I", 0, tol, ""};
  LawResult rel{name, "<rho(i)q, rho(j)k> = <q, rho(j-i)k>", 0, tol, ""};
  const MatrixXd id = MatrixXd::Identity(dim, dim);
  identity.worst = MaxAbs(rho(0) - id);
  for (int t = 0; t < trials; ++t) {
    const int64_t p = pos(rng), q = pos(rng);
    const MatrixXd rp = rho(p), rq = rho(q);
    hom.worst = Worse(hom.worst, MaxAbs(rho(p + q) - rp * rq));
    inv.worst = Worse(inv.worst, MaxAbs(rho(-p) * rp - id));
    if (orthogonal) {
      orth.worst = Worse(orth.worst, MaxAbs(rp.transpose() * rp - id));
      VectorXd a(dim), b(dim);
      for (int64_t i = 0; i < dim; ++i) {
        a[i] = normal(rng);
        b[i] = normal(rng);
      }
      const double lhs = (rp * a).dot(rq * b);
      const double rhs = a.dot(rho(q - p) * b);
      rel.worst = Worse(rel.worst, std::abs(lhs - rhs) / (a.norm() * b.norm()));
    }
  }
  out->push_back(identity);
  out->push_back(hom);
  out->push_back(inv);
  if (orthogonal) {
    out->push_back(orth);
    out->push_back(rel);
  }
}

MatrixXd RandomSkew(int64_t d, double scale, std::mt19937_64& rng) {
  std::normal_distribution<double> normal(0.0, scale);
  MatrixXd a(d, d);
  for (int64_t i = 0; i < d; ++i) {
    for (int64_t j = 0; j < d; ++j) a(i, j) = normal(rng);
  }
  return a - a.transpose();
}

// Each product of O(1)-entry orthogonal matrices of size d rounds by ~d eps; 1e-11
// leaves a wide margin at d <= 64 yet catches any unreduced angle (~1e-7 at 2^31).
constexpr double kTol = 1e-11;

// RoPE: commuting planes, theta_i = 10000^(-2i/d), half-split pairing.
void CheckRopePlanes(int trials, std::mt19937_64& rng, std::vector<LawResult>* results) {
  const int64_t d = 64;
  std::vector<double> thetas(d / 2);
  for (int64_t i = 0; i < d / 2; ++i) thetas[i] = std::pow(10000.0, -2.0 * i / d);
  auto rep = group::CommutingPlanes::Create(d, d, thetas, group::PlanePairing::kHalfSplit);
  if (!rep.ok()) {
    results->push_back({"RoPE planes (d=64)", "create", 0, kTol, rep.status().ToString()});
    return;
  }
  CheckIntegerRepresentation(
      "RoPE planes (d=64)", [&](int64_t p) { return rep->Matrix(p); }, d, true, kTol, trials,
      rng, results);
}

// GRAPE-M: one rank-2 generator on random a, b.
void CheckRank2Rotation(int trials, std::mt19937_64& rng, std::vector<LawResult>* results) {
  const int64_t d = 32;
  std::normal_distribution<double> normal;
  std::vector<double> a(d), b(d);
  for (int64_t i = 0; i < d; ++i) {
    a[i] = normal(rng);
    b[i] = normal(rng);
  }
  auto rep = group::Rank2Rotation::Create(a, b, 0.01);
  if (!rep.ok()) {
    results->push_back({"rank-2 exp (d=32)", "create", 0, kTol, rep.status().ToString()});
    return;
  }
  CheckIntegerRepresentation(
      "rank-2 exp (d=32)", [&](int64_t p) { return rep->Matrix(p); }, d, true, kTol, trials,
      rng, results);
}

// A learned W = exp(S), S dense skew: powers through the real Schur form.
void CheckSchurRotation(int trials, std::mt19937_64& rng, std::vector<LawResult>* results) {
  const int64_t d = 16;
  auto rep = group::SchurRotation::Create(RandomSkew(d, 0.3, rng));
  if (!rep.ok()) {
    results->push_back({"dense exp(pS) (d=16)", "create", 0, kTol, rep.status().ToString()});
    return;
  }
  CheckIntegerRepresentation(
      "dense exp(pS) (d=16)", [&](int64_t p) { return rep->Matrix(p); }, d, true, kTol, trials,
      rng, results);
}

// Z_n: rho(n) = I and rho(p + n) = rho(p).
void CheckCyclicPlanes(int trials, std::mt19937_64& rng, std::vector<LawResult>* results) {
  const int64_t d = 8, n = 12;
  auto rep = group::CyclicPlanes::Create(d, d, n, {1, 2, 3, 5}, group::PlanePairing::kInterleaved);
  LawResult period{"Z_12 planes (d=8)", "rho(n) = I, rho(p+n) = rho(p)", 0, 1e-14, ""};
  if (!rep.ok()) {
    period.error = rep.status().ToString();
  } else {
    period.worst = MaxAbs(rep->Matrix(n) - MatrixXd::Identity(d, d));
    std::uniform_int_distribution<int64_t> pos(-(int64_t{1} << 40), int64_t{1} << 40);
    for (int t = 0; t < trials; ++t) {
      const int64_t p = pos(rng);
      period.worst = Worse(period.worst, MaxAbs(rep->Matrix(p + n) - rep->Matrix(p)));
    }
    CheckIntegerRepresentation(
        "Z_12 planes (d=8)", [&](int64_t p) { return rep->Matrix(p); }, d, true, kTol, trials,
        rng, results);
  }
  results->push_back(period);
}

// GL unipotent (GRAPE-A): A^2 = 0, rho(p) = I + p omega A. Entries grow like |p|, so the
// tolerance is relative to the largest entry compared (|p| <= 2^32 -> eps * 2^32).
void CheckUnipotent(int trials, std::mt19937_64& rng, std::vector<LawResult>* results) {
  const int64_t d = 6;
  std::normal_distribution<double> normal;
  MatrixXd a = MatrixXd::Zero(d, d);
  for (int64_t i = 0; i < d - 1; ++i) a(i, d - 1) = normal(rng);  // e_last column: A^2 = 0
  auto rep = group::UnipotentRepresentation::Create(a, 0.5);
  if (!rep.ok()) {
    results->push_back({"unipotent I+pA (d=6)", "create", 0, 0, rep.status().ToString()});
    return;
  }
  CheckIntegerRepresentation(
      "unipotent I+pA (d=6)", [&](int64_t p) { return rep->Matrix(p); }, d, false, 1e-5, trials,
      rng, results);
}

// Free group on 2 generators (binary trees): rho(gh) = rho(g) rho(h), and the group
// does not commute (rho(ab) != rho(ba) for generic generators).
void CheckFreeGroup(int trials, std::mt19937_64& rng, std::vector<LawResult>* results) {
  const int64_t d = 8;
  auto rep = group::FreeGroupRepresentation::CreateFromSkew(
      {RandomSkew(d, 0.5, rng), RandomSkew(d, 0.5, rng)});
  LawResult hom{"free group F_2 (d=8)", "rho(gh) = rho(g) rho(h)", 0, kTol, ""};
  LawResult noncomm{"free group F_2 (d=8)", "|rho(ab) - rho(ba)| > 0", 0, 1e-3, "", true};
  if (!rep.ok()) {
    hom.error = rep.status().ToString();
  } else {
    const group::FreeGroup& g = rep->group();
    std::uniform_int_distribution<int> letter(0, 3);
    std::uniform_int_distribution<int> length(0, 12);
    auto random_word = [&]() {
      std::vector<int32_t> w;
      const int n = length(rng);
      for (int i = 0; i < n; ++i) {
        const int l = letter(rng);
        w.push_back(l < 2 ? l + 1 : -(l - 1));
      }
      return *g.Reduce(w);
    };
    for (int t = 0; t < trials; ++t) {
      const group::FreeWord u = random_word(), v = random_word();
      auto uv = g.Compose(u, v);
      auto mu = rep->Matrix(u), mv = rep->Matrix(v);
      if (!uv.ok() || !mu.ok() || !mv.ok()) {
        hom.error = "compose/matrix failed";
        break;
      }
      auto muv = rep->Matrix(*uv);
      if (!muv.ok()) {
        hom.error = muv.status().ToString();
        break;
      }
      hom.worst = Worse(hom.worst, MaxAbs(*muv - *mu * *mv));
    }
    auto ab = rep->Matrix({1, 2}), ba = rep->Matrix({2, 1});
    if (ab.ok() && ba.ok()) {
      noncomm.worst = MaxAbs(*ab - *ba);
    } else {
      noncomm.error = (ab.ok() ? ba : ab).status().ToString();
    }
  }
  results->push_back(hom);
  results->push_back(noncomm);
}

// Every representation's laws, in this order, from one random stream.
std::vector<LawResult> CheckGroups(uint64_t seed, int trials) {
  std::mt19937_64 rng(seed);
  std::vector<LawResult> results;
  CheckRopePlanes(trials, rng, &results);
  CheckRank2Rotation(trials, rng, &results);
  CheckSchurRotation(trials, rng, &results);
  CheckCyclicPlanes(trials, rng, &results);
  CheckUnipotent(trials, rng, &results);
  CheckFreeGroup(trials, rng, &results);
  return results;
}

}  // namespace

int RunCheckGroups(uint64_t seed, int trials) {
  std::printf("Group laws on random elements (seed %llu, %d trials per law)\n\n",
              static_cast<unsigned long long>(seed), trials);
  std::printf("| representation | law | worst over trials | bound | result |\n");
  std::printf("|---|---|---|---|---|\n");
  int failures = 0;
  for (const LawResult& r : CheckGroups(seed, trials)) {
    if (!r.ok()) ++failures;
    if (!r.error.empty()) {
      std::printf("| %s | %s | error: %s | | FAIL |\n", r.representation.c_str(), r.law.c_str(),
                  r.error.c_str());
    } else {
      std::printf("| %s | %s | %.3g | %s %.0e | %s |\n", r.representation.c_str(),
                  r.law.c_str(), r.worst, r.at_least ? ">=" : "<=", r.bound,
                  r.ok() ? "ok" : "FAIL");
    }
  }
  std::printf("\n%s\n", failures == 0 ? "All group laws hold." : "Some group laws FAILED.");
  return failures == 0 ? 0 : 1;
}

}  // namespace tools
}  // namespace gpe
