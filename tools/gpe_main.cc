// gpe: GroupPE's command-line tool.
//
//   gpe [--quick]       the main job: version, the group laws on random elements, INR fits
//                       of the Spiral image in closed form and by an MLP (PNGs in gpe_out/),
//                       and a short attention benchmark with RoPE, ALiBi and GRAPE-M
//   gpe version         the library version (header and shared library agree)
//   gpe check-groups [--seed N] [--trials N]
//                       the group laws of every representation, on random elements
//   gpe --help
#include <algorithm>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <chrono>
#include <filesystem>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <Eigen/Dense>
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "gpe/gpe.h"
#include "group/free_group.h"
#include "group/free_representation.h"
#include "group/so_dense.h"
#include "group/so_planes.h"
#include "group/so_rank2.h"
#include "group/unipotent.h"
#include "encodings/coordinate/shifted_basis.h"
#include "inr/closed_form.h"
#include "inr/data.h"
#include "encodings/sequence/rope.h"
#include "inr/blended.h"
#include "tools/gpe_inr.h"
#include "tools/gpe_tour.h"
#include "tools/bench_attention.h"
#include "measure/machine_limits.h"
#include "measure/timing.h"

namespace {

using gpe::measure::BestSeconds;

using Eigen::MatrixXd;
using Eigen::VectorXd;

constexpr char kUsage[] =
    "usage: gpe [command] [options]\n"
    "\n"
    "commands:\n"
    "  (none)          the main job: version, group laws, fits of the Spiral image\n"
    "                  (closed form and MLP), a short attention benchmark (RoPE, ALiBi,\n"
    "                  GRAPE-M inside the kernel); PNGs in gpe_out/\n"
    "                    --quick      small sizes (seconds)\n"
    "  version         the library version\n"
    "  check-groups    check the group laws of every representation on random elements\n"
    "                    --seed N     random seed (default 1)\n"
    "                    --trials N   random elements per law (default 20, 1..100000)\n"
    "  inr-spiral      fit Lim et al.'s Spiral image in closed form with shifted-basis\n"
    "                  encodings; prints PSNR and time, writes PNGs\n"
    "                    --out DIR    where to write (default <workspace>/gpe_out)\n"
    "  inr-image FILE  the same closed-form fits on a PNG image (per colour channel)\n"
    "                    --gray       convert to grayscale first\n"
    "                    --out DIR    where to write (default <workspace>/gpe_out)\n"
    "  inr COMMAND     the papers' INR experiments: lim-table2, zheng-table1, volume\n"
    "                  ('gpe inr --help')\n"
    "  bench           GroupPE's workloads beside the machine's limits and the peers\n"
    "                  (NumPy from .venv; tools/peers/), measured in one run\n"
    "                    --quick      tiny sizes (a smoke run)\n"
    "                    --no-peers   skip the peers\n"
    "  machine         measure this machine's float32 FMA peak and triad bandwidth\n"
    "                  (1 thread and all threads): the figures benchmarks divide by\n"
    "  help, --help    this text\n";

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
    hom.worst = std::max(hom.worst, MaxAbs(rho(p + q) - rp * rq));
    inv.worst = std::max(inv.worst, MaxAbs(rho(-p) * rp - id));
    if (orthogonal) {
      orth.worst = std::max(orth.worst, MaxAbs(rp.transpose() * rp - id));
      VectorXd a(dim), b(dim);
      for (int64_t i = 0; i < dim; ++i) {
        a[i] = normal(rng);
        b[i] = normal(rng);
      }
      const double lhs = (rp * a).dot(rq * b);
      const double rhs = a.dot(rho(q - p) * b);
      rel.worst = std::max(rel.worst, std::abs(lhs - rhs) / (a.norm() * b.norm()));
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

std::vector<LawResult> CheckGroups(uint64_t seed, int trials) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal;
  std::vector<LawResult> results;
  // Each product of O(1)-entry orthogonal matrices of size d rounds by ~d eps; 1e-11
  // leaves a wide margin at d <= 64 yet catches any unreduced angle (~1e-7 at 2^31).
  constexpr double kTol = 1e-11;

  // RoPE: commuting planes, theta_i = 10000^(-2i/d), half-split pairing.
  {
    const int64_t d = 64;
    std::vector<double> thetas(d / 2);
    for (int64_t i = 0; i < d / 2; ++i) thetas[i] = std::pow(10000.0, -2.0 * i / d);
    auto rep = gpe::group::CommutingPlanes::Create(d, d, thetas,
                                                   gpe::group::PlanePairing::kHalfSplit);
    if (!rep.ok()) {
      results.push_back({"RoPE planes (d=64)", "create", 0, kTol, rep.status().ToString()});
    } else {
      CheckIntegerRepresentation(
          "RoPE planes (d=64)", [&](int64_t p) { return rep->Matrix(p); }, d, true, kTol,
          trials, rng, &results);
    }
  }
  // GRAPE-M: one rank-2 generator on random a, b.
  {
    const int64_t d = 32;
    std::vector<double> a(d), b(d);
    for (int64_t i = 0; i < d; ++i) {
      a[i] = normal(rng);
      b[i] = normal(rng);
    }
    auto rep = gpe::group::Rank2Rotation::Create(a, b, 0.01);
    if (!rep.ok()) {
      results.push_back({"rank-2 exp (d=32)", "create", 0, kTol, rep.status().ToString()});
    } else {
      CheckIntegerRepresentation(
          "rank-2 exp (d=32)", [&](int64_t p) { return rep->Matrix(p); }, d, true, kTol,
          trials, rng, &results);
    }
  }
  // A learned W = exp(S), S dense skew: powers through the real Schur form.
  {
    const int64_t d = 16;
    auto rep = gpe::group::SchurRotation::Create(RandomSkew(d, 0.3, rng));
    if (!rep.ok()) {
      results.push_back({"dense exp(pS) (d=16)", "create", 0, kTol, rep.status().ToString()});
    } else {
      CheckIntegerRepresentation(
          "dense exp(pS) (d=16)", [&](int64_t p) { return rep->Matrix(p); }, d, true, kTol,
          trials, rng, &results);
    }
  }
  // Z_n: rho(n) = I and rho(p + n) = rho(p).
  {
    const int64_t d = 8, n = 12;
    auto rep = gpe::group::CyclicPlanes::Create(d, d, n, {1, 2, 3, 5},
                                                gpe::group::PlanePairing::kInterleaved);
    LawResult period{"Z_12 planes (d=8)", "rho(n) = I, rho(p+n) = rho(p)", 0, 1e-14, ""};
    if (!rep.ok()) {
      period.error = rep.status().ToString();
    } else {
      period.worst = MaxAbs(rep->Matrix(n) - MatrixXd::Identity(d, d));
      std::uniform_int_distribution<int64_t> pos(-(int64_t{1} << 40), int64_t{1} << 40);
      for (int t = 0; t < trials; ++t) {
        const int64_t p = pos(rng);
        period.worst = std::max(period.worst, MaxAbs(rep->Matrix(p + n) - rep->Matrix(p)));
      }
      CheckIntegerRepresentation(
          "Z_12 planes (d=8)", [&](int64_t p) { return rep->Matrix(p); }, d, true, kTol, trials,
          rng, &results);
    }
    results.push_back(period);
  }
  // GL unipotent (GRAPE-A): A^2 = 0, rho(p) = I + p omega A. Entries grow like |p|, so the
  // tolerance is relative to the largest entry compared (|p| <= 2^32 -> eps * 2^32).
  {
    const int64_t d = 6;
    MatrixXd a = MatrixXd::Zero(d, d);
    for (int64_t i = 0; i < d - 1; ++i) a(i, d - 1) = normal(rng);  // e_last column: A^2 = 0
    auto rep = gpe::group::UnipotentRepresentation::Create(a, 0.5);
    if (!rep.ok()) {
      results.push_back({"unipotent I+pA (d=6)", "create", 0, 0, rep.status().ToString()});
    } else {
      CheckIntegerRepresentation(
          "unipotent I+pA (d=6)", [&](int64_t p) { return rep->Matrix(p); }, d, false, 1e-5,
          trials, rng, &results);
    }
  }
  // Free group on 2 generators (binary trees): rho(gh) = rho(g) rho(h), and the group
  // does not commute (rho(ab) != rho(ba) for generic generators).
  {
    const int64_t d = 8;
    auto rep = gpe::group::FreeGroupRepresentation::CreateFromSkew(
        {RandomSkew(d, 0.5, rng), RandomSkew(d, 0.5, rng)});
    LawResult hom{"free group F_2 (d=8)", "rho(gh) = rho(g) rho(h)", 0, kTol, ""};
    LawResult noncomm{"free group F_2 (d=8)", "|rho(ab) - rho(ba)| > 0", 0, 1e-3, "", true};
    if (!rep.ok()) {
      hom.error = rep.status().ToString();
    } else {
      const gpe::group::FreeGroup& g = rep->group();
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
        const gpe::group::FreeWord u = random_word(), v = random_word();
        auto uv = g.Compose(u, v);
        auto mu = rep->Matrix(u), mv = rep->Matrix(v);
        if (!uv.ok() || !mu.ok() || !mv.ok()) {
          hom.error = "compose/matrix failed";
          break;
        }
        auto muv = rep->Matrix(*uv);
        hom.worst = std::max(hom.worst, MaxAbs(*muv - *mu * *mv));
      }
      auto ab = rep->Matrix({1, 2}), ba = rep->Matrix({2, 1});
      noncomm.worst = MaxAbs(*ab - *ba);
    }
    results.push_back(hom);
    results.push_back(noncomm);
  }
  return results;
}

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

int RunVersion() {
  std::printf("GroupPE %s (header %d.%d.%d)\n", gpe_version_string(), GPE_VERSION_MAJOR,
              GPE_VERSION_MINOR, GPE_VERSION_PATCH);
  if (gpe_version() != GPE_VERSION_NUMBER) {
    std::fprintf(stderr, "gpe: library version %d does not match the header's %d\n",
                 gpe_version(), GPE_VERSION_NUMBER);
    return 1;
  }
  return 0;
}

int RunMachine() {
  namespace m = gpe::measure;
  const int all = m::AvailableThreads();
  std::printf("Widest vector ISA: %s, %d hardware threads\n\n", m::WidestVectorIsa().c_str(), all);
  std::printf("| measure | 1 thread | %d threads |\n|---|---|---|\n", all);
  std::printf("| float32 FMA peak (GFLOP/s) | %.1f | %.1f |\n", m::FmaPeakGflops(1),
              m::FmaPeakGflops(all));
  std::printf("| triad bandwidth (GB/s) | %.1f | %.1f |\n", m::TriadBandwidthGBs(1),
              m::TriadBandwidthGBs(all));
  return 0;
}

// Where the tool writes its pictures: --out DIR, else <workspace>/gpe_out under
// `bazel run`, else ./gpe_out.
std::string OutputDir(const std::string& flag_value) {
  if (!flag_value.empty()) return flag_value;
  const char* ws = std::getenv("BUILD_WORKSPACE_DIRECTORY");
  return std::string(ws != nullptr ? ws : ".") + "/gpe_out";
}

// Zheng et al.'s separable set-up (Table 1): a complex (Kronecker) shifted-basis encoding
// and one linear layer solved in closed form per channel, trained on the [::2] x [::2]
// grid and tested on the other three quarters of the pixels. `name` prefixes the PNGs.
int RunSeparableFits(const std::string& title, const std::string& name,
                     const gpe::inr::Image& image, const std::string& out_dir) {
  namespace enc = gpe::encodings;
  namespace inr = gpe::inr;
  const int64_t rows = image.rows(), cols = image.cols();
  if (rows < 4 || cols < 4) {
    std::fprintf(stderr, "gpe: the image is %lldx%lld; at least 4x4 is needed\n",
                 static_cast<long long>(rows), static_cast<long long>(cols));
    return 1;
  }
  const std::vector<double> axis_y = inr::GridAxis(rows), axis_x = inr::GridAxis(cols);
  std::vector<double> train_y, train_x;
  for (int64_t i = 0; i < rows; i += 2) train_y.push_back(axis_y[i]);
  for (int64_t j = 0; j < cols; j += 2) train_x.push_back(axis_x[j]);
  std::vector<inr::RowMatrixXd> train;
  for (const inr::ImageMatrix& c : image.channels) {
    inr::RowMatrixXd t(train_y.size(), train_x.size());
    for (int64_t i = 0; i < t.rows(); ++i) {
      for (int64_t j = 0; j < t.cols(); ++j) t(i, j) = c(2 * i, 2 * j);
    }
    train.push_back(std::move(t));
  }
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  if (ec || !inr::WritePng(out_dir + "/" + name + "_truth.png", image.channels).ok()) {
    std::fprintf(stderr, "gpe: cannot write to %s\n", out_dir.c_str());
    return 1;
  }
  // K per axis: half and all of the training samples along the shorter axis (at most 256).
  const int64_t m = std::min<int64_t>(
      256, static_cast<int64_t>(std::min(train_y.size(), train_x.size())));
  struct Config {
    const char* name;
    enc::ShiftedBasisKind kind;
    int64_t k;
    double width_in_spacings;
  };
  const Config configs[] = {
      {"gaussian", enc::ShiftedBasisKind::kGaussian, m / 2, 1.0},
      {"gaussian", enc::ShiftedBasisKind::kGaussian, m, 1.0},
      {"triangle", enc::ShiftedBasisKind::kTriangle, m / 2, 2.0},
      {"triangle", enc::ShiftedBasisKind::kTriangle, m, 2.0},
  };
  std::printf("INR: %s, %lldx%lld, %zu channel(s); train on the [::2] grid, closed-form complex "
              "encoding (Zheng et al. eq. 10), ridge 1e-6, float32 image products\n\n",
              title.c_str(), static_cast<long long>(rows), static_cast<long long>(cols),
              image.channels.size());
  std::printf("| encoding | K per axis | width (spacings) | train PSNR (dB) | test PSNR (dB) | "
              "fit time (ms) | picture |\n|---|---|---|---|---|---|---|\n");
  inr::SeparableFitOptions fit_options;
  fit_options.lambda = 1e-6;
  fit_options.float32_image_products = true;
  for (const Config& c : configs) {
    const double width = c.width_in_spacings * 2.0 / static_cast<double>(c.k);
    absl::StatusOr<enc::ShiftedBasis1D> basis =
        enc::ShiftedBasis1D::Create(c.kind, c.k, width, -1.0, 1.0);
    if (!basis.ok()) {
      std::fprintf(stderr, "gpe: %s\n", std::string(basis.status().message()).c_str());
      return 1;
    }
    const auto start = std::chrono::steady_clock::now();
    absl::StatusOr<inr::RowMatrixXd> psi_y = basis->Encode(train_y);
    absl::StatusOr<inr::RowMatrixXd> psi_x = basis->Encode(train_x);
    absl::StatusOr<std::vector<inr::RowMatrixXd>> w =
        psi_y.ok() && psi_x.ok() ? inr::FitSeparable2D(*psi_y, *psi_x, train, fit_options)
                                 : absl::StatusOr<std::vector<inr::RowMatrixXd>>(
                                       psi_y.ok() ? psi_x.status() : psi_y.status());
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    if (!w.ok()) {
      std::printf("| %s | %lld | %.1f | fit failed: %s | | | |\n", c.name,
                  static_cast<long long>(c.k), c.width_in_spacings,
                  std::string(w.status().message()).c_str());
      continue;
    }
    const inr::RowMatrixXd full_y = *basis->Encode(axis_y), full_x = *basis->Encode(axis_x);
    std::vector<inr::ImageMatrix> recon;
    double train_se = 0, test_se = 0;
    int64_t train_count = 0, test_count = 0;
    for (size_t ch = 0; ch < image.channels.size(); ++ch) {
      recon.push_back(*inr::PredictSeparable2D(full_y, full_x, (*w)[ch]));
      for (int64_t i = 0; i < rows; ++i) {
        for (int64_t j = 0; j < cols; ++j) {
          const double e = recon[ch](i, j) - image.channels[ch](i, j);
          if (i % 2 == 0 && j % 2 == 0) {
            train_se += e * e;
            ++train_count;
          } else {
            test_se += e * e;
            ++test_count;
          }
        }
      }
    }
    const std::string png = absl::StrCat(name, "_", c.name, "_k", c.k, ".png");
    const bool wrote = inr::WritePng(out_dir + "/" + png, recon).ok();
    std::printf("| %s | %lld | %.1f | %.2f | %.2f | %.2f | %s |\n", c.name,
                static_cast<long long>(c.k), c.width_in_spacings,
                10 * std::log10(train_count / train_se), 10 * std::log10(test_count / test_se), ms,
                wrote ? png.c_str() : "(not written)");
  }
  std::printf("\nPictures are in %s\n", out_dir.c_str());
  return 0;
}

int RunInrSpiral(const std::string& out_dir) {
  gpe::inr::Image image;
  image.channels.push_back(gpe::inr::SyntheticImage(gpe::inr::SyntheticTask::kSpiral, 256));
  return RunSeparableFits("Spiral image (Lim et al. D.1)", "spiral", image, out_dir);
}

int RunInrImage(const std::string& path, bool gray, const std::string& out_dir) {
  absl::StatusOr<gpe::inr::Image> image = gpe::inr::ReadPng(path, gray);
  if (!image.ok()) {
    std::fprintf(stderr, "gpe: %s\n", std::string(image.status().message()).c_str());
    return 1;
  }
  const std::string stem = std::filesystem::path(path).stem().string();
  return RunSeparableFits(path, stem.empty() ? "image" : stem, *image, out_dir);
}

// Runs a command and returns its standard output ("" on failure).
std::string Capture(const std::string& command) {
  std::string out;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return out;
  char buffer[4096];
  size_t got;
  while ((got = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0) out.append(buffer, got);
  if (pclose(pipe) != 0) return "";
  return out;
}

// A number after "key": in a one-line JSON object (enough for the peers' output).
double JsonNumber(const std::string& json, const std::string& key) {
  const size_t at = json.find("\"" + key + "\":");
  if (at == std::string::npos) return std::nan("");
  return std::strtod(json.c_str() + at + key.size() + 3, nullptr);
}

// `gpe bench`: GroupPE's workloads beside the machine's limits and, where installed, the
// peers users would pick instead, all measured in this one run (timings differ between
// machines; only ratios taken together compare).
int RunBench(bool quick, bool peers) {
  namespace t = gpe::tools;
  namespace m = gpe::measure;
  namespace seq = gpe::encodings::sequence;
  namespace inr = gpe::inr;
  namespace enc = gpe::encodings;
  const int threads = m::AvailableThreads();
  const int reps = quick ? 2 : 5;
  std::printf("gpe bench%s: %d threads, widest ISA %s\n\n", quick ? " --quick" : "", threads,
              m::WidestVectorIsa().c_str());
  const double peak = m::FmaPeakGflops(threads);
  const double triad = m::TriadBandwidthGBs(threads, quick ? (int64_t{16} << 20) : (int64_t{256} << 20));
  std::printf("| workload | GroupPE | peer | GroupPE / peer | of machine limit | extra memory |\n");
  std::printf("|---|---|---|---|---|---|\n");
  std::printf("| float32 FMA peak | %.1f GFLOP/s | | | 1.00 |\n", peak);
  std::printf("| triad bandwidth | %.1f GB/s | | | 1.00 |\n", triad);

  // RoPE applied in place to q-shaped float32 tensors (seq x heads x head_dim).
  {
    const int64_t s = quick ? 256 : 16384, h = quick ? 8 : 32, d = 128;
    seq::RopeOptions o;
    o.head_dim = d;
    o.rotary_dim = d;
    o.num_threads = threads;
    absl::StatusOr<seq::RopeFrequencies> freqs = seq::DefaultRopeFrequencies(d, 10000.0);
    absl::StatusOr<seq::Rope> rope =
        freqs.ok() ? seq::Rope::Create(o, *freqs) : absl::StatusOr<seq::Rope>(freqs.status());
    if (!rope.ok()) {
      std::fprintf(stderr, "gpe bench: %s\n", std::string(rope.status().message()).c_str());
      return 1;
    }
    const seq::RopeTensor tensor = seq::RopeTensor::Contiguous(seq::RopeLayout::kBSHD, 1, s, h, d);
    m::LargeFloats x(s * h * d);  // 2 MiB pages, as the triad's arrays
    std::fill(x.begin(), x.end(), 0.5f);
    const std::vector<int64_t> offsets = {0};
    absl::StatusOr<seq::RopeTable<float>> table = rope->MakeTable<float>(tensor, {{}, offsets});
    if (!table.ok()) {
      std::fprintf(stderr, "gpe bench: %s\n", std::string(table.status().message()).c_str());
      return 1;
    }
    const double sec = BestSeconds(reps, [&] { (void)rope->Apply<float>(*table, tensor, x.data(), x.data()); });
    const double gbs = 2.0 * static_cast<double>(x.size()) * sizeof(float) / sec * 1e-9;
    std::printf("| RoPE in place, %lld x %lld x %lld float32 | %.1f GB/s | | | %.2f of triad |\n",
                static_cast<long long>(s), static_cast<long long>(h), static_cast<long long>(d),
                gbs, gbs / triad);
  }

  // Zheng et al.'s closed form: n x n image, K Gaussian shifts per axis.
  {
    const int64_t n = quick ? 64 : 512, k = quick ? 32 : 256;
    const double sigma = 1.0 / static_cast<double>(k), lambda = 1e-6;
    inr::ImageMatrix image = inr::SyntheticImage(inr::SyntheticTask::kSpiral, n);
    std::vector<double> coords(n);
    for (int64_t i = 0; i < n; ++i) coords[i] = (i + 0.5) / static_cast<double>(n);
    const enc::ShiftedBasis1D basis =
        *enc::ShiftedBasis1D::Create(enc::ShiftedBasisKind::kGaussian, k, sigma, 0.0, 1.0);
    inr::SeparableFitOptions options;
    options.lambda = lambda;
    options.float32_image_products = true;
    const std::vector<inr::RowMatrixXd> channels = {image};
    std::vector<inr::RowMatrixXd> w;
    const double sec = BestSeconds(reps, [&] {
      const inr::RowMatrixXd psi = *basis.Encode(coords);
      w = *inr::FitSeparable2D(psi, psi, channels, options);
    });
    const inr::RowMatrixXd psi = *basis.Encode(coords);
    const double psnr = *inr::Psnr(*inr::PredictSeparable2D(psi, psi, w[0]), image);
    std::string peer = "not run", ratio = "";
    if (peers) {
      const char* ws = std::getenv("BUILD_WORKSPACE_DIRECTORY");
      const std::string root = ws != nullptr ? ws : ".";
      const char* py = std::getenv("GPE_PEER_PYTHON");
      const std::string python = py != nullptr ? py : root + "/.venv/bin/python3";
      const std::string raw = (std::filesystem::temp_directory_path() / "gpe_bench_image.f64").string();
      if (FILE* f = std::fopen(raw.c_str(), "wb")) {
        std::fwrite(image.data(), sizeof(double), static_cast<size_t>(image.size()), f);
        std::fclose(f);
      }
      const std::string json = Capture(absl::StrCat(
          python, " ", root, "/tools/peers/inr_closed_form.py ", raw, " ", n, " ", k, " ",
          absl::StrFormat("%.17g", sigma), " ", absl::StrFormat("%.17g", lambda), " ", reps,
          " 2>/dev/null"));
      const double peer_sec = JsonNumber(json, "seconds"), peer_psnr = JsonNumber(json, "psnr_db");
      if (std::isfinite(peer_sec)) {
        peer = absl::StrFormat("NumPy %.2f ms, %.2f dB", peer_sec * 1e3, peer_psnr);
        ratio = absl::StrFormat("%.1fx faster, PSNR %+.3f dB", peer_sec / sec, psnr - peer_psnr);
      } else {
        peer = "NumPy unavailable (run ./bazelw once to make .venv)";
      }
    }
    std::printf("| INR closed form, %lldx%lld, K = %lld Gaussian | %.2f ms, %.2f dB | %s | %s | |\n",
                static_cast<long long>(n), static_cast<long long>(n), static_cast<long long>(k),
                sec * 1e3, psnr, peer.c_str(), ratio.c_str());
  }

  // Zheng et al.'s blended fit of 25% random pixels on a virtual grid.
  {
    const int64_t n = quick ? 64 : 512, g = quick ? 32 : 128;
    const inr::ImageMatrix image = inr::SyntheticImage(inr::SyntheticTask::kSpiral, n);
    std::mt19937_64 rng(1);
    std::vector<double> px, py, vals;
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        if (rng() % 4 != 0) continue;
        px.push_back((j + 0.5) / n);
        py.push_back((i + 0.5) / n);
        vals.push_back(image(i, j));
      }
    }
    std::vector<double> grid(g);
    for (int64_t i = 0; i < g; ++i) grid[i] = static_cast<double>(i) / (g - 1);
    const enc::ShiftedBasis1D basis = *enc::ShiftedBasis1D::Create(
        enc::ShiftedBasisKind::kGaussian, g, 1.0 / g, 0.0, 1.0 + 1.0 / g);
    const inr::AxisEncoder e = [&](absl::Span<const double> c) { return basis.Encode(c); };
    inr::BlendedFitOptions options;
    options.lambda = 1e-4;
    options.tolerance = 1e-4;
    int iterations = 0;
    const double sec = BestSeconds(quick ? 1 : 2, [&] {
      iterations = inr::FitBlended2D(e, e, grid, grid, px, py, vals, options)->iterations;
    });
    std::printf("| INR blended fit, 25%% of %lldx%lld, %lld^2 virtual grid | %.0f ms, %d iterations | | | |\n",
                static_cast<long long>(n), static_cast<long long>(n), static_cast<long long>(g),
                sec * 1e3, iterations);
  }

  // Attention and RoPE against PyTorch, then the sweeps and plots (tools/bench_attention.h).
  t::AttentionBenchOptions attention = t::AttentionBenchDefaults(OutputDir(""));
  attention.quick = quick;
  attention.peers = peers;
  attention.threads = threads;
  attention.fma_peak_gflops = peak;
  attention.triad_gbs = triad;
  if (const absl::Status s = t::RunAttentionBench(attention); !s.ok()) {
    std::fprintf(stderr, "gpe bench: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  return 0;
}

bool ParseInt(const char* s, long long lo, long long hi, long long* out) {
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(s, &end, 10);
  if (errno != 0 || end == s || *end != '\0' || v < lo || v > hi) return false;
  *out = v;
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string command = argc > 1 ? argv[1] : "";
  if (command == "help" || command == "--help" || command == "-h") {
    std::fputs(kUsage, stdout);
    return 0;
  }
  if (command.empty() || command == "--quick") {
    if (argc > 2) {
      std::fprintf(stderr, "gpe: unexpected argument '%s'\n\n%s", argv[2], kUsage);
      return 2;
    }
    const bool quick = command == "--quick";
    if (RunVersion() != 0) return 1;
    std::printf("\n");
    if (RunCheckGroups(1, 20) != 0) return 1;
    std::printf("\n");
    if (RunInrSpiral(OutputDir("")) != 0) return 1;
    std::printf("\n");
    if (gpe::tools::RunMainMlpFits(OutputDir(""), quick) != 0) return 1;
    std::printf("\n");
    return gpe::tools::RunMainAttention(quick);
  }
  if (command == "inr") {
    return gpe::tools::RunInrCommand(std::vector<std::string>(argv + 2, argv + argc));
  }
  if (command == "inr-image") {
    std::string out, path;
    bool gray = false;
    for (int i = 2; i < argc; ++i) {
      const std::string flag = argv[i];
      if (flag == "--out" && i + 1 < argc) {
        out = argv[++i];
      } else if (flag == "--gray") {
        gray = true;
      } else if (!flag.empty() && flag[0] != '-' && path.empty()) {
        path = flag;
      } else {
        std::fprintf(stderr, "gpe inr-image: unknown or incomplete option '%s'\n\n%s",
                     flag.c_str(), kUsage);
        return 2;
      }
    }
    if (path.empty()) {
      std::fprintf(stderr, "gpe inr-image: give a PNG file\n\n%s", kUsage);
      return 2;
    }
    return RunInrImage(path, gray, OutputDir(out));
  }
  if (command == "inr-spiral") {
    std::string out;
    for (int i = 2; i < argc; ++i) {
      if (std::string(argv[i]) == "--out" && i + 1 < argc) {
        out = argv[++i];
      } else {
        std::fprintf(stderr, "gpe inr-spiral: unknown or incomplete option '%s'\n\n%s", argv[i],
                     kUsage);
        return 2;
      }
    }
    return RunInrSpiral(OutputDir(out));
  }
  if (command == "version") return RunVersion();
  if (command == "machine") return RunMachine();
  if (command == "bench") {
    bool quick = false, peers = true;
    for (int i = 2; i < argc; ++i) {
      const std::string flag = argv[i];
      if (flag == "--quick") {
        quick = true;
      } else if (flag == "--no-peers") {
        peers = false;
      } else {
        std::fprintf(stderr, "gpe bench: unknown option '%s'\n\n%s", flag.c_str(), kUsage);
        return 2;
      }
    }
    return RunBench(quick, peers);
  }
  if (command == "check-groups") {
    long long seed = 1, trials = 20;
    for (int i = 2; i < argc; ++i) {
      const std::string flag = argv[i];
      if ((flag == "--seed" || flag == "--trials") && i + 1 < argc) {
        const bool ok = flag == "--seed" ? ParseInt(argv[i + 1], 0, INT64_MAX, &seed)
                                         : ParseInt(argv[i + 1], 1, 100000, &trials);
        if (!ok) {
          std::fprintf(stderr, "gpe check-groups: bad value for %s: '%s'\n", flag.c_str(),
                       argv[i + 1]);
          return 2;
        }
        ++i;
      } else {
        std::fprintf(stderr, "gpe check-groups: unknown or incomplete option '%s'\n\n%s",
                     flag.c_str(), kUsage);
        return 2;
      }
    }
    return RunCheckGroups(static_cast<uint64_t>(seed), static_cast<int>(trials));
  }
  std::fprintf(stderr, "gpe: unknown command '%s'\n\n%s", command.c_str(), kUsage);
  return 2;
}
