#include "tools/gpe_inr.h"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <Eigen/Dense>
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "encodings/coordinate/encoder.h"
#include "encodings/coordinate/fourier_features.h"
#include "encodings/coordinate/shifted_basis.h"
#include "encodings/coordinate/so2_bessel.h"
#include "inr/blended.h"
#include "inr/closed_form.h"
#include "inr/data.h"
#include "inr/linear_gd.h"
#include "inr/mlp.h"

namespace gpe {
namespace tools {
namespace {

namespace enc = gpe::encodings;
using inr::ImageMatrix;
using inr::RowMatrixXd;

constexpr char kInrUsage[] =
    "usage: gpe inr COMMAND [options]\n"
    "\n"
    "commands:\n"
    "  lim-table2     Lim et al.'s Table 2: an MLP (3 x 128, ReLU, 500 full-batch Adam\n"
    "                 steps) on 5% random pixels of a 256 x 256 grid with no encoding,\n"
    "                 T x T and SO(2) encodings; test MSE mean and std over seeds, for\n"
    "                 the Radial and Spiral images and vector fields (and Cameraman and\n"
    "                 Retina when given). Writes table2.md and PNGs.\n"
    "  zheng-table1   Zheng et al.'s Table 1: simple embedder + MLP (Adam) vs complex\n"
    "                 (Kronecker) embedder + linear layer by Adam vs in closed form, on\n"
    "                 the [::2] grid of size x size images; test PSNR and time. Images\n"
    "                 are the files given (PNG or JPEG), else the analytic Radial and\n"
    "                 Spiral images. Writes table1.md and PNGs.\n"
    "  volume         an analytic volume fitted by the complex embedder in closed form\n"
    "                 (3D mode-n products) and, slice by slice, by the blended fit of\n"
    "                 random samples; PSNR and time.\n"
    "\n"
    "Run 'gpe inr COMMAND --help' for a command's options.\n";

constexpr char kLimUsage[] =
    "usage: gpe inr lim-table2 [options]\n"
    "  --seeds N          independent runs per cell (default 10, 1..100)\n"
    "  --cameraman FILE   the Cameraman image (PNG or JPEG; read as grayscale)\n"
    "  --retina FILE      the Retina image (PNG or JPEG; read as grayscale)\n"
    "  --size N           grid size (default 256, 8..1024)\n"
    "  --steps N          Adam steps (default 500, 1..100000)\n"
    "  --tasks LIST       comma-separated subset of cameraman, retina, radial_image,\n"
    "                     spiral_image, radial_field, spiral_field (default: all)\n"
    "  --txt-scale X      T x T scale c without --search (default 5)\n"
    "  --so2-scale X      SO(2) maximum scale C without --search (default 25)\n"
    "  --so2-k N          SO(2) maximum weight K without --search (default 2)\n"
    "  --lr X             learning rate of the encoded MLPs without --search (default 1e-3)\n"
    "  --search           choose scales and learning rates on the validation set of\n"
    "                     seed 0 (a reduced version of Lim et al.'s grid) first\n"
    "  --out DIR          where to write (default <workspace>/gpe_out/lim_table2)\n"
    "  --quick            tiny sizes (24 x 24 grid, width 16, 30 steps, 2 seeds)\n"
    "  --help             this text\n"
    "Without --search: none lr 5e-3; T x T c = 5, lr 1e-3; SO(2) C = 25, K = 2, lr 1e-3\n"
    "(16 frequencies / terms, 32 features), changed by the options above.\n";

constexpr char kZhengUsage[] =
    "usage: gpe inr zheng-table1 [FILE...] [options]\n"
    "  FILE...            natural images (PNG or JPEG), resampled to size x size;\n"
    "                     none: the analytic Radial and Spiral images\n"
    "  --size N           image size (default 512, 16..2048, even)\n"
    "  --gray             convert colour images to grayscale (default: per channel)\n"
    "  --gd-steps N       Adam steps of the complex + linear layer fit (default 2000)\n"
    "  --mlp-steps N      Adam steps of the simple + MLP baseline (default 100; Zheng et\n"
    "                     al. train 2000 epochs, ~2 s a step at 512 x 512 on 2 cores)\n"
    "  --no-mlp           skip the simple + MLP rows\n"
    "  --lambda X         ridge of the closed form (default 0: rank deficiency is\n"
    "                     reported, as the paper's missing LogF entry)\n"
    "  --rcond X          closed-form factors the exact solve refuses (rank deficient)\n"
    "                     are fitted through their SVD, singular values below X s_max\n"
    "                     dropped (default 1e-6; 0: report them as failures)\n"
    "  --out DIR          where to write (default <workspace>/gpe_out/zheng_table1)\n"
    "  --quick            tiny sizes (32 x 32, 40 GD steps, 5 MLP steps of width 32)\n"
    "  --help             this text\n";

constexpr char kVolumeUsage[] =
    "usage: gpe inr volume [options]\n"
    "  --size N           volume size per axis (default 64, 8..256, even)\n"
    "  --fraction X       random voxels for the blended fit (default 0.25, in (0, 1])\n"
    "  --seed N           the random voxels' seed (default 1)\n"
    "  --out DIR          where to write (default <workspace>/gpe_out/volume)\n"
    "  --quick            a 12^3 volume\n"
    "  --help             this text\n"
    "The volume is |sin(15 sqrt(r))| with r = |(x, y, z)| over [-1, 1]^3 (Lim et al.'s\n"
    "Radial image, eq. 30, in 3D). The closed form trains on the [::2]^3 grid with a\n"
    "complex Gaussian embedder (K = size / 2 per axis, mode-n products); the blended fit\n"
    "trains on random voxels, one z-slice at a time (FitBlended2D; K = size / 4 per axis).\n"
    "PSNR on the voxels not trained on; mid-z slices written as PNGs.\n";

// Under `bazel run` the working directory is the runfiles tree: relative paths the user
// typed are resolved against BUILD_WORKING_DIRECTORY (the shell's directory), and the
// default output goes to <workspace>/gpe_out/<name>, as the other gpe commands do.
std::string UserPath(const std::string& path) {
  const char* cwd = std::getenv("BUILD_WORKING_DIRECTORY");
  if (cwd == nullptr || path.empty() || std::filesystem::path(path).is_absolute()) return path;
  return (std::filesystem::path(cwd) / path).string();
}

std::string DefaultOut(const char* name) {
  const char* ws = std::getenv("BUILD_WORKSPACE_DIRECTORY");
  return absl::StrCat(ws != nullptr ? ws : ".", "/gpe_out/", name);
}

bool ParseInt(const std::string& s, long long lo, long long hi, long long* out) {
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (errno != 0 || end == s.c_str() || *end != '\0' || v < lo || v > hi) return false;
  *out = v;
  return true;
}

bool ParseDouble(const std::string& s, double lo, double hi, double* out) {
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(s.c_str(), &end);
  if (errno != 0 || end == s.c_str() || *end != '\0' || !std::isfinite(v) || v < lo || v > hi) {
    return false;
  }
  *out = v;
  return true;
}

int BadArgs(const char* command, const std::string& message, const char* usage) {
  std::fprintf(stderr, "gpe inr %s: %s\n\n%s", command, message.c_str(), usage);
  return 2;
}

int Fail(const char* command, const absl::Status& status) {
  std::fprintf(stderr, "gpe inr %s: %s\n", command, std::string(status.message()).c_str());
  return 1;
}

struct MeanStd {
  double mean = 0, std = 0;
};
// Sample mean and (n - 1) standard deviation (0 for one value).
MeanStd Summarise(const std::vector<double>& v) {
  MeanStd r;
  if (v.empty()) return r;
  for (double x : v) r.mean += x;
  r.mean /= static_cast<double>(v.size());
  if (v.size() > 1) {
    for (double x : v) r.std += (x - r.mean) * (x - r.mean);
    r.std = std::sqrt(r.std / static_cast<double>(v.size() - 1));
  }
  return r;
}

double Seconds(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

absl::Status MakeDir(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return absl::UnavailableError(absl::StrCat("cannot create ", dir, ": ", ec.message()));
  return absl::OkStatus();
}

absl::Status WriteText(const std::string& path, const std::string& text) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) return absl::UnavailableError(absl::StrCat("cannot write ", path));
  const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  if (std::fclose(f) != 0 || !ok) return absl::UnavailableError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

// An image channel resampled to n x n: block means when the size is a multiple of n
// (e.g. 512 -> 256), nearest pixel centres otherwise.
ImageMatrix ResampleSquare(const ImageMatrix& c, int64_t n) {
  if (c.rows() == n && c.cols() == n) return c;
  ImageMatrix out(n, n);
  if (c.rows() % n == 0 && c.cols() % n == 0) {
    const int64_t br = c.rows() / n, bc = c.cols() / n;
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < n; ++j) out(i, j) = c.block(i * br, j * bc, br, bc).mean();
    }
    return out;
  }
  for (int64_t i = 0; i < n; ++i) {
    const int64_t si = std::min<int64_t>(c.rows() - 1, (2 * i + 1) * c.rows() / (2 * n));
    for (int64_t j = 0; j < n; ++j) {
      const int64_t sj = std::min<int64_t>(c.cols() - 1, (2 * j + 1) * c.cols() / (2 * n));
      out(i, j) = c(si, sj);
    }
  }
  return out;
}

// ---------------------------------------------------------------------------------------
// Lim et al., Table 2 (section 5, appendix D).

enum class LimEncoding { kNone, kTxT, kSo2 };
const char* LimEncodingName(LimEncoding e) {
  switch (e) {
    case LimEncoding::kNone: return "None";
    case LimEncoding::kTxT: return "T x T";
    case LimEncoding::kSo2: return "SO(2)";
  }
  return "?";
}

struct LimHyper {
  double scale = 0;  // T x T: c; SO(2): C
  int k = 2;         // SO(2): K
  double lr = 1e-3;
  std::string Describe(LimEncoding e) const {
    switch (e) {
      case LimEncoding::kNone: return absl::StrFormat("lr %g", lr);
      case LimEncoding::kTxT: return absl::StrFormat("c %g, lr %g", scale, lr);
      case LimEncoding::kSo2: return absl::StrFormat("C %g, K %d, lr %g", scale, k, lr);
    }
    return "";
  }
};

struct LimTask {
  std::string name;    // column title
  std::string stem;    // file-name stem
  bool vector_field = false;
  std::vector<ImageMatrix> channels;  // 1 (image) or 2 (v_x, v_y)
};

// Lim et al.'s published Table 2, for the side-by-side table (their column order).
struct PaperCell {
  const char* task;
  double mean[3], std[3];  // None, T x T, SO(2)
};
constexpr PaperCell kLimPaper[] = {
    {"Cameraman", {.0249, .0209, .0238}, {.0017, .0013, .0021}},
    {"Retina", {.0040, .0044, .0024}, {.0004, .0008, .0003}},
    {"Radial image", {.0572, .0041, .0024}, {.0144, .0011, .0014}},
    {"Spiral image", {.0071, .0021, .0015}, {.0033, .0007, .0004}},
    {"Radial field", {.01099, .00072, .00050}, {.00431, .00047, .00019}},
    {"Spiral field", {.00075, .00055, .00027}, {.00018, .00048, .00010}},
};

absl::StatusOr<std::unique_ptr<enc::CoordinateEncoder>> MakeLimEncoder(LimEncoding e,
                                                                       const LimHyper& h,
                                                                       uint64_t seed) {
  if (e == LimEncoding::kTxT) {
    // Appendix D.2: 16 frequencies alpha ~ N(0, c^2), 32 features.
    absl::StatusOr<enc::FourierFeatures> f = enc::FourierFeatures::TxT(16, h.scale, seed);
    if (!f.ok()) return f.status();
    return std::unique_ptr<enc::CoordinateEncoder>(new enc::FourierFeatures(*std::move(f)));
  }
  if (e == LimEncoding::kSo2) {
    // Appendix D.2: m = 0, c ~ U[0, C], k ~ U{1, ..., K - 1}, 16 terms, 32 features.
    absl::StatusOr<enc::So2BesselEncoder> s = enc::So2BesselEncoder::Sample(
        16, h.scale, h.k, 0, enc::So2BesselEncoder::Input::kCartesian, seed);
    if (!s.ok()) return s.status();
    return std::unique_ptr<enc::CoordinateEncoder>(new enc::So2BesselEncoder(*std::move(s)));
  }
  return std::unique_ptr<enc::CoordinateEncoder>();
}

struct LimConfig {
  int64_t n = 256, steps = 500, width = 128;
  int seeds = 10;
  bool search = false;
  std::string out;
};

struct LimRun {
  double validation_mse = 0, test_mse = 0, seconds = 0;
  std::optional<RowMatrixXd> prediction;
};

absl::StatusOr<LimRun> RunLim(const LimTask& task, LimEncoding e, const LimHyper& h,
                              const LimConfig& cfg, int seed, bool predict) {
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<inr::Split> split =
      inr::RandomSplit(cfg.n * cfg.n, 0.05, 0.40, 1000 + static_cast<uint64_t>(seed));
  if (!split.ok()) return split.status();
  absl::StatusOr<std::unique_ptr<enc::CoordinateEncoder>> encoder =
      MakeLimEncoder(e, h, static_cast<uint64_t>(seed));
  if (!encoder.ok()) return encoder.status();
  absl::StatusOr<RowMatrixXd> values = inr::ChannelsToValues(task.channels);
  if (!values.ok()) return values.status();
  inr::InrExperimentOptions options;
  options.hidden_width = cfg.width;
  options.num_hidden_layers = 3;
  options.steps = cfg.steps;
  options.learning_rate = h.lr;
  options.seed = static_cast<uint64_t>(seed);
  options.predict_all = predict;
  absl::StatusOr<inr::InrExperimentResult> r = inr::RunInrExperiment(
      encoder->get(), inr::GridCoordinates(cfg.n), *values, *split, options);
  if (!r.ok()) return r.status();
  LimRun run;
  run.validation_mse = r->validation_mse.value_or(0);
  run.test_mse = r->test_mse.value_or(0);
  run.prediction = std::move(r->prediction);
  run.seconds = Seconds(start);
  return run;
}

// The reconstruction (N x C, row-major pixels) as PNG channels: images in [0, 1];
// vector fields as (v_x, v_y, 0) with [-1, 1] mapped to 0..255.
absl::Status WriteLimPng(const std::string& path, const RowMatrixXd& values, int64_t n,
                         bool vector_field) {
  std::vector<RowMatrixXd> channels;
  for (int64_t c = 0; c < values.cols(); ++c) {
    RowMatrixXd m(n, n);
    for (int64_t p = 0; p < n * n; ++p) m(p / n, p % n) = values(p, c);
    channels.push_back(std::move(m));
  }
  if (!vector_field) return inr::WritePng(path, channels, 0.0, 1.0);
  channels.push_back(RowMatrixXd::Zero(n, n));
  return inr::WritePng(path, channels, -1.0, 1.0);
}

int RunLimTable2(const std::vector<std::string>& args) {
  const char* cmd = "lim-table2";
  LimConfig cfg;
  std::string cameraman, retina, out = DefaultOut("lim_table2"), task_list;
  // Fixed hyperparameters (papers/README.md: Lim et al.'s search settles near these).
  LimHyper fixed[] = {{0, 2, 5e-3}, {5, 2, 1e-3}, {25, 2, 1e-3}};
  bool quick = false, seeds_given = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    const bool has_value = i + 1 < args.size();
    long long v = 0;
    if (a == "--help" || a == "-h") {
      std::fputs(kLimUsage, stdout);
      return 0;
    } else if (a == "--quick") {
      quick = true;
    } else if (a == "--search") {
      cfg.search = true;
    } else if (a == "--seeds" && has_value) {
      if (!ParseInt(args[++i], 1, 100, &v)) return BadArgs(cmd, "--seeds takes 1..100", kLimUsage);
      cfg.seeds = static_cast<int>(v);
      seeds_given = true;
    } else if (a == "--size" && has_value) {
      if (!ParseInt(args[++i], 8, 1024, &v)) return BadArgs(cmd, "--size takes 8..1024", kLimUsage);
      cfg.n = v;
    } else if (a == "--steps" && has_value) {
      if (!ParseInt(args[++i], 1, 100000, &v)) {
        return BadArgs(cmd, "--steps takes 1..100000", kLimUsage);
      }
      cfg.steps = v;
    } else if (a == "--tasks" && has_value) {
      task_list = args[++i];
    } else if ((a == "--txt-scale" || a == "--so2-scale" || a == "--lr") && has_value) {
      double x = 0;
      if (!ParseDouble(args[++i], 1e-9, 1e4, &x)) {
        return BadArgs(cmd, absl::StrCat(a, " takes a number in (0, 1e4]"), kLimUsage);
      }
      if (a == "--txt-scale") fixed[1].scale = x;
      if (a == "--so2-scale") fixed[2].scale = x;
      if (a == "--lr") fixed[1].lr = fixed[2].lr = x;
    } else if (a == "--so2-k" && has_value) {
      if (!ParseInt(args[++i], 2, 1000, &v)) return BadArgs(cmd, "--so2-k takes 2..1000", kLimUsage);
      fixed[2].k = static_cast<int>(v);
    } else if (a == "--cameraman" && has_value) {
      cameraman = UserPath(args[++i]);
    } else if (a == "--retina" && has_value) {
      retina = UserPath(args[++i]);
    } else if (a == "--out" && has_value) {
      out = UserPath(args[++i]);
    } else {
      return BadArgs(cmd, absl::StrCat("unknown or incomplete option '", a, "'"), kLimUsage);
    }
  }
  if (quick) {
    cfg.n = 24;
    cfg.steps = 30;
    cfg.width = 16;
    if (!seeds_given) cfg.seeds = 2;
  }
  cfg.out = out;

  std::vector<LimTask> tasks;
  for (const auto& [name, stem, path] :
       {std::tuple<const char*, const char*, std::string>{"Cameraman", "cameraman", cameraman},
        {"Retina", "retina", retina}}) {
    if (path.empty()) continue;
    absl::StatusOr<inr::Image> image = inr::ReadImage(path, /*grayscale=*/true);
    if (!image.ok()) return Fail(cmd, image.status());
    tasks.push_back({name, stem, false, {ResampleSquare(image->channels[0], cfg.n)}});
  }
  using inr::SyntheticTask;
  tasks.push_back({"Radial image", "radial_image", false,
                   {inr::SyntheticImage(SyntheticTask::kRadial, cfg.n)}});
  tasks.push_back({"Spiral image", "spiral_image", false,
                   {inr::SyntheticImage(SyntheticTask::kSpiral, cfg.n)}});
  tasks.push_back({"Radial field", "radial_field", true,
                   inr::SyntheticVectorField(SyntheticTask::kRadial, cfg.n)});
  tasks.push_back({"Spiral field", "spiral_field", true,
                   inr::SyntheticVectorField(SyntheticTask::kSpiral, cfg.n)});
  if (!task_list.empty()) {
    const std::vector<std::string> wanted = absl::StrSplit(task_list, ',');
    for (const std::string& w : wanted) {
      if (std::none_of(tasks.begin(), tasks.end(), [&](const LimTask& t) { return t.stem == w; })) {
        return BadArgs(cmd, absl::StrCat("--tasks: no task '", w,
                                         "' (cameraman and retina need their files)"),
                       kLimUsage);
      }
    }
    tasks.erase(std::remove_if(tasks.begin(), tasks.end(),
                               [&](const LimTask& t) {
                                 return std::find(wanted.begin(), wanted.end(), t.stem) ==
                                        wanted.end();
                               }),
                tasks.end());
  }
  if (absl::Status s = MakeDir(cfg.out); !s.ok()) return Fail(cmd, s);

  const LimEncoding encodings[] = {LimEncoding::kNone, LimEncoding::kTxT, LimEncoding::kSo2};
  std::printf("Lim et al. Table 2 on a %lldx%lld grid: 5%% train / 40%% validation / rest test, "
              "MLP %lld x 3 hidden, %lld full-batch Adam steps, %d seed(s), %zu task(s)\n",
              static_cast<long long>(cfg.n), static_cast<long long>(cfg.n),
              static_cast<long long>(cfg.width), static_cast<long long>(cfg.steps), cfg.seeds,
              tasks.size());
  std::fflush(stdout);

  // results[task][encoding] = test MSEs over seeds.
  std::vector<std::vector<std::vector<double>>> results(
      tasks.size(), std::vector<std::vector<double>>(3));
  std::vector<std::vector<LimHyper>> chosen(tasks.size());
  const auto all_start = std::chrono::steady_clock::now();
  for (size_t t = 0; t < tasks.size(); ++t) {
    const LimTask& task = tasks[t];
    for (absl::Status s : {WriteLimPng(absl::StrCat(cfg.out, "/", task.stem, "_truth.png"),
                                       *inr::ChannelsToValues(task.channels), cfg.n,
                                       task.vector_field)}) {
      if (!s.ok()) return Fail(cmd, s);
    }
    for (int e = 0; e < 3; ++e) {
      LimHyper h = fixed[e];
      if (cfg.search) {
        // A reduced version of appendix D.2's grid, scored on seed 0's validation set.
        std::vector<LimHyper> candidates;
        const double lrs[] = {1e-3, 1e-2};
        if (encodings[e] == LimEncoding::kNone) {
          for (double lr : {1e-3, 5e-3, 1e-2, 5e-2}) candidates.push_back({0, 2, lr});
        } else if (encodings[e] == LimEncoding::kTxT) {
          for (double c : {1.0, 3.0, 5.0, 10.0}) {
            for (double lr : lrs) candidates.push_back({c, 2, lr});
          }
        } else {
          for (auto [c, k] : {std::pair<double, int>{5, 2}, {25, 2}, {25, 4}, {50, 2}}) {
            for (double lr : lrs) candidates.push_back({c, k, lr});
          }
        }
        double best = INFINITY;
        for (const LimHyper& cand : candidates) {
          absl::StatusOr<LimRun> run = RunLim(task, encodings[e], cand, cfg, 0, false);
          if (!run.ok()) continue;  // a diverging learning rate is simply not chosen
          std::printf("  search %s / %s (%s): validation MSE %.5f\n", task.name.c_str(),
                      LimEncodingName(encodings[e]), cand.Describe(encodings[e]).c_str(),
                      run->validation_mse);
          std::fflush(stdout);
          if (run->validation_mse < best) {
            best = run->validation_mse;
            h = cand;
          }
        }
      }
      chosen[t].push_back(h);
      for (int seed = 0; seed < cfg.seeds; ++seed) {
        absl::StatusOr<LimRun> run = RunLim(task, encodings[e], h, cfg, seed, seed == 0);
        if (!run.ok()) return Fail(cmd, run.status());
        results[t][e].push_back(run->test_mse);
        std::printf("[%.0f s] %s / %s (%s) seed %d: test MSE %.5f (%.1f s)\n",
                    Seconds(all_start), task.name.c_str(), LimEncodingName(encodings[e]),
                    h.Describe(encodings[e]).c_str(), seed, run->test_mse, run->seconds);
        std::fflush(stdout);
        if (run->prediction.has_value()) {
          const std::string png = absl::StrCat(cfg.out, "/", task.stem, "_",
                                               e == 0 ? "none" : e == 1 ? "txt" : "so2", ".png");
          if (absl::Status s = WriteLimPng(png, *run->prediction, cfg.n, task.vector_field);
              !s.ok()) {
            return Fail(cmd, s);
          }
        }
      }
    }
  }

  // The markdown table, ours and the paper's.
  std::string md = absl::StrFormat(
      "# Lim et al. Table 2, reproduced by `gpe inr lim-table2`\n\n"
      "Test MSE (mean +- sample std over %d seed(s); each seed draws its own split, encoding "
      "and initialisation). %lldx%lld grid over [-1, 1]^2, 5%% train / 40%% validation / rest "
      "test, MLP with 3 hidden layers of width %lld, %lld full-batch Adam steps. MSE is the "
      "mean over all entries (for vector fields, over both components).\n\n",
      cfg.seeds, static_cast<long long>(cfg.n), static_cast<long long>(cfg.n),
      static_cast<long long>(cfg.width), static_cast<long long>(cfg.steps));
  auto header = [&]() {
    std::string h = "| MSE |";
    std::string rule = "|---|";
    for (const LimTask& task : tasks) {
      absl::StrAppend(&h, " ", task.name, " |");
      absl::StrAppend(&rule, "---|");
    }
    return absl::StrCat(h, "\n", rule, "\n");
  };
  absl::StrAppend(&md, "## Measured\n\n", header());
  for (int e = 0; e < 3; ++e) {
    absl::StrAppend(&md, "| ", LimEncodingName(encodings[e]), " |");
    for (size_t t = 0; t < tasks.size(); ++t) {
      const MeanStd m = Summarise(results[t][e]);
      absl::StrAppend(&md, absl::StrFormat(" %.5f +- %.5f |", m.mean, m.std));
    }
    absl::StrAppend(&md, "\n");
  }
  absl::StrAppend(&md, "\nHyperparameters", cfg.search ? " (chosen on seed 0's validation set)" : "",
                  ":\n\n", header());
  for (int e = 0; e < 3; ++e) {
    absl::StrAppend(&md, "| ", LimEncodingName(encodings[e]), " |");
    for (size_t t = 0; t < tasks.size(); ++t) {
      absl::StrAppend(&md, " ", chosen[t][e].Describe(encodings[e]), " |");
    }
    absl::StrAppend(&md, "\n");
  }
  absl::StrAppend(&md, "\n## Lim et al. (published, 10 seeds)\n\n", header());
  for (int e = 0; e < 3; ++e) {
    absl::StrAppend(&md, "| ", LimEncodingName(encodings[e]), " |");
    for (const LimTask& task : tasks) {
      for (const PaperCell& p : kLimPaper) {
        if (task.name == p.task) absl::StrAppend(&md, absl::StrFormat(" %g +- %g |", p.mean[e], p.std[e]));
      }
    }
    absl::StrAppend(&md, "\n");
  }
  absl::StrAppend(&md, "\nPictures (seed 0): <task>_truth.png, <task>_{none,txt,so2}.png; vector "
                  "fields as (v_x, v_y, 0) with [-1, 1] mapped to 0..255.\n");
  if (absl::Status s = WriteText(cfg.out + "/table2.md", md); !s.ok()) return Fail(cmd, s);
  std::printf("\n%s\nWrote %s/table2.md (%.0f s in all)\n", md.c_str(), cfg.out.c_str(),
              Seconds(all_start));
  return 0;
}

// ---------------------------------------------------------------------------------------
// Zheng et al., Table 1 (section 6.2): separable coordinates, train on the [::2] x [::2]
// grid, test on the other pixels.

struct AxisEncoding {
  std::string name;
  // Encodes 1D coordinates in [-1, 1] into K features (n x K).
  std::function<absl::StatusOr<RowMatrixXd>(const std::vector<double>&)> encode;
};

// The five 1D encoders of Table 1 with K features per axis over [-1, 1]. Widths follow
// `gpe inr-image` (Gaussian sigma = one shift spacing, triangle support = two); the
// frequency encoders use K / 2 frequencies (cos and sin) up to half the training grid's
// Nyquist rate (K / 8 cycles per unit for K / 2 samples per unit: 2^sigma = K / 8). At
// the Nyquist rate itself (2^sigma = K / 4) LinF's factor is full rank (cond ~4e4 at
// 512 x 512) but its highest sines nearly vanish on the training grid and not between
// it, so the exact fit interpolates through weights that explode off the grid (test
// PSNR -155 dB measured); at half the rate the frequency factors are rank deficient, as
// Zheng et al. report (section 6.2, Fig. 9), and the closed form needs --rcond.
std::vector<AxisEncoding> ZhengEncodings(int64_t k) {
  std::vector<AxisEncoding> out;
  for (auto [name, kind, spacings] :
       {std::tuple<const char*, enc::ShiftedBasisKind, double>{"Gau", enc::ShiftedBasisKind::kGaussian, 1.0},
        {"Tri", enc::ShiftedBasisKind::kTriangle, 2.0}}) {
    const double width = spacings * 2.0 / static_cast<double>(k);
    out.push_back({name, [kind = kind, width, k](const std::vector<double>& x)
                             -> absl::StatusOr<RowMatrixXd> {
                     absl::StatusOr<enc::ShiftedBasis1D> b =
                         enc::ShiftedBasis1D::Create(kind, k, width, -1.0, 1.0);
                     if (!b.ok()) return b.status();
                     return b->Encode(x);
                   }});
  }
  const double sigma = std::log2(std::max(1.0, static_cast<double>(k) / 8.0));
  const int64_t f = std::max<int64_t>(1, k / 2);
  auto fourier = [](absl::StatusOr<enc::FourierFeatures> ff) {
    return [ff = std::move(ff)](const std::vector<double>& x) -> absl::StatusOr<RowMatrixXd> {
      if (!ff.ok()) return ff.status();
      const RowMatrixXd points = Eigen::Map<const Eigen::VectorXd>(x.data(), x.size());
      return ff->Encode(points);
    };
  };
  out.push_back({"LinF", fourier(enc::FourierFeatures::LinearlySpaced(1, f, sigma))});
  out.push_back({"LogF", fourier(enc::FourierFeatures::LogLinearlySpaced(1, f, sigma))});
  out.push_back({"RFF", fourier(enc::FourierFeatures::Gaussian(
                            1, f, std::exp2(sigma) / 3.0, enc::FrequencyConvention::kTwoPi, 7))});
  return out;
}

struct ZhengImage {
  std::string name;
  std::vector<ImageMatrix> channels;  // n x n each
};

// PSNR (peak 1) over the pixels off the [::2] x [::2] training grid, all channels.
double TestPsnr(const std::vector<ImageMatrix>& truth, const std::vector<RowMatrixXd>& recon) {
  double se = 0;
  int64_t count = 0;
  for (size_t c = 0; c < truth.size(); ++c) {
    for (int64_t i = 0; i < truth[c].rows(); ++i) {
      for (int64_t j = 0; j < truth[c].cols(); ++j) {
        if (i % 2 == 0 && j % 2 == 0) continue;
        const double e = recon[c](i, j) - truth[c](i, j);
        se += e * e;
        ++count;
      }
    }
  }
  return se == 0 ? INFINITY : 10 * std::log10(static_cast<double>(count) / se);
}

struct ZhengCell {
  std::vector<double> psnr, seconds;
  int64_t params = 0;
  std::string note;  // why a fit failed
};

int RunZhengTable1(const std::vector<std::string>& args) {
  const char* cmd = "zheng-table1";
  int64_t n = 512, gd_steps = 2000, mlp_steps = 100, mlp_width = 256;
  bool gray = false, quick = false, mlp = true;
  bool size_given = false, gd_given = false, mlp_given = false;
  double lambda = 0, rcond = 1e-6;
  std::string out = DefaultOut("zheng_table1");
  std::vector<std::string> files;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    const bool has_value = i + 1 < args.size();
    long long v = 0;
    if (a == "--help" || a == "-h") {
      std::fputs(kZhengUsage, stdout);
      return 0;
    } else if (a == "--quick") {
      quick = true;
    } else if (a == "--gray") {
      gray = true;
    } else if (a == "--no-mlp") {
      mlp = false;
    } else if (a == "--size" && has_value) {
      if (!ParseInt(args[++i], 16, 2048, &v) || v % 2 != 0) {
        return BadArgs(cmd, "--size takes an even number in 16..2048", kZhengUsage);
      }
      n = v;
      size_given = true;
    } else if (a == "--gd-steps" && has_value) {
      if (!ParseInt(args[++i], 1, 1000000, &v)) {
        return BadArgs(cmd, "--gd-steps takes 1..1000000", kZhengUsage);
      }
      gd_steps = v;
      gd_given = true;
    } else if (a == "--mlp-steps" && has_value) {
      if (!ParseInt(args[++i], 1, 1000000, &v)) {
        return BadArgs(cmd, "--mlp-steps takes 1..1000000", kZhengUsage);
      }
      mlp_steps = v;
      mlp_given = true;
    } else if (a == "--lambda" && has_value) {
      if (!ParseDouble(args[++i], 0, 1e6, &lambda)) {
        return BadArgs(cmd, "--lambda takes a finite number in [0, 1e6]", kZhengUsage);
      }
    } else if (a == "--rcond" && has_value) {
      if (!ParseDouble(args[++i], 0, 0.999, &rcond)) {
        return BadArgs(cmd, "--rcond takes a finite number in [0, 0.999]", kZhengUsage);
      }
    } else if (a == "--out" && has_value) {
      out = UserPath(args[++i]);
    } else if (!a.empty() && a[0] != '-') {
      files.push_back(UserPath(a));
    } else {
      return BadArgs(cmd, absl::StrCat("unknown or incomplete option '", a, "'"), kZhengUsage);
    }
  }
  if (quick) {
    if (!size_given) n = 32;
    if (!gd_given) gd_steps = 40;
    if (!mlp_given) mlp_steps = 5;
    mlp_width = 32;
  }
  std::vector<ZhengImage> images;
  for (const std::string& path : files) {
    absl::StatusOr<inr::Image> image = inr::ReadImage(path, gray);
    if (!image.ok()) return Fail(cmd, image.status());
    ZhengImage z{std::filesystem::path(path).stem().string(), {}};
    for (const ImageMatrix& c : image->channels) z.channels.push_back(ResampleSquare(c, n));
    images.push_back(std::move(z));
  }
  if (files.empty()) {
    images.push_back({"radial", {inr::SyntheticImage(inr::SyntheticTask::kRadial, n)}});
    images.push_back({"spiral", {inr::SyntheticImage(inr::SyntheticTask::kSpiral, n)}});
  }
  if (absl::Status s = MakeDir(out); !s.ok()) return Fail(cmd, s);

  const int64_t half = n / 2;
  const int64_t k = std::min<int64_t>(256, half);  // K per axis (Zheng: 256)
  const std::vector<double> axis = inr::GridAxis(n);
  std::vector<double> train_axis;
  for (int64_t i = 0; i < n; i += 2) train_axis.push_back(axis[i]);
  const std::vector<AxisEncoding> encodings = ZhengEncodings(k);
  const char* methods[] = {"simple + MLP (Adam)", "complex + linear (Adam)",
                           "complex + linear (closed form)"};
  // cells[method][encoding]
  std::vector<std::vector<ZhengCell>> cells(3, std::vector<ZhengCell>(encodings.size()));
  // cond(Psi) of each encoding's training factor (the same for every image): how much
  // the exact closed form can amplify data errors, per factor (closed_form.h).
  std::vector<double> conditions(encodings.size(), 0.0);
  std::printf("Zheng et al. Table 1: %zu image(s) of %lldx%lld, train on the [::2] grid "
              "(%lldx%lld), K = %lld per axis; MLP %lld steps (4 x %lld hidden), GD %lld steps\n",
              images.size(), static_cast<long long>(n), static_cast<long long>(n),
              static_cast<long long>(half), static_cast<long long>(half),
              static_cast<long long>(k), static_cast<long long>(mlp ? mlp_steps : 0),
              static_cast<long long>(mlp_width), static_cast<long long>(gd_steps));
  std::fflush(stdout);
  const auto all_start = std::chrono::steady_clock::now();
  for (size_t im = 0; im < images.size(); ++im) {
    const ZhengImage& image = images[im];
    const int64_t channels = static_cast<int64_t>(image.channels.size());
    if (absl::Status s = inr::WritePng(absl::StrCat(out, "/", image.name, "_truth.png"),
                                       image.channels);
        !s.ok()) {
      return Fail(cmd, s);
    }
    std::vector<RowMatrixXd> train;
    for (const ImageMatrix& c : image.channels) {
      RowMatrixXd t(half, half);
      for (int64_t i = 0; i < half; ++i) {
        for (int64_t j = 0; j < half; ++j) t(i, j) = c(2 * i, 2 * j);
      }
      train.push_back(std::move(t));
    }
    for (size_t e = 0; e < encodings.size(); ++e) {
      const AxisEncoding& ae = encodings[e];
      absl::StatusOr<RowMatrixXd> psi_train = ae.encode(train_axis);
      absl::StatusOr<RowMatrixXd> psi_full = ae.encode(axis);
      if (!psi_train.ok()) return Fail(cmd, psi_train.status());
      if (!psi_full.ok()) return Fail(cmd, psi_full.status());
      const int64_t kk = psi_train->cols();
      if (im == 0) {
        absl::StatusOr<double> c = inr::ConditionNumber(*psi_train);
        if (!c.ok()) return Fail(cmd, c.status());
        conditions[e] = *c;
        std::printf("  %s: training factor %lld x %lld, cond(Psi) = %.3g\n", ae.name.c_str(),
                    static_cast<long long>(psi_train->rows()), static_cast<long long>(kk), *c);
        std::fflush(stdout);
      }
      for (int m = 0; m < 3; ++m) {
        if (m == 0 && !mlp) continue;
        ZhengCell& cell = cells[m][e];
        const auto start = std::chrono::steady_clock::now();
        std::vector<RowMatrixXd> recon;
        absl::Status status;
        if (m == 0) {
          // Simple embedding (eq. 16): [psi(x), psi(y)] per pixel, then the MLP.
          auto features = [&](const RowMatrixXd& psi) {
            const int64_t side = psi.rows();
            inr::RowMatrix<float> f(side * side, 2 * kk);
            for (int64_t i = 0; i < side; ++i) {
              for (int64_t j = 0; j < side; ++j) {
                f.row(i * side + j) << psi.row(j).cast<float>(), psi.row(i).cast<float>();
              }
            }
            return f;
          };
          const inr::RowMatrix<float> x_train = features(*psi_train);
          inr::RowMatrix<float> y_train(half * half, channels);
          for (int64_t c = 0; c < channels; ++c) {
            y_train.col(c) = Eigen::Map<const Eigen::VectorXd>(train[c].data(), half * half)
                                 .cast<float>();
          }
          inr::MlpShape shape{2 * kk, mlp_width, 4, channels};
          absl::StatusOr<inr::Mlp> net = inr::Mlp::Create(shape, 0);
          if (!net.ok()) return Fail(cmd, net.status());
          inr::TrainOptions train_options;
          train_options.steps = mlp_steps;
          train_options.adam.learning_rate = 1e-3;
          train_options.eval_every = std::max<int64_t>(1, mlp_steps / 4);
          train_options.progress = [&](const inr::TrainProgress& p) {
            std::printf("    %s / %s: MLP step %lld, train MSE %.5f\n", image.name.c_str(),
                        ae.name.c_str(), static_cast<long long>(p.step), p.train_loss);
            std::fflush(stdout);
          };
          absl::StatusOr<inr::TrainHistory> h =
              inr::TrainFullBatch<float>(&*net, x_train, y_train, train_options);
          status = h.status();
          if (h.ok()) {
            cell.params = net->num_parameters();
            absl::StatusOr<inr::RowMatrix<float>> pred =
                inr::Predict<float>(*net, features(*psi_full));
            if (!pred.ok()) return Fail(cmd, pred.status());
            for (int64_t c = 0; c < channels; ++c) {
              RowMatrixXd r(n, n);
              for (int64_t p = 0; p < n * n; ++p) r(p / n, p % n) = (*pred)(p, c);
              recon.push_back(std::move(r));
            }
          }
        } else {
          std::vector<RowMatrixXd> w;
          if (m == 1) {
            inr::LinearAdamOptions gd;
            gd.steps = gd_steps;
            gd.learning_rate = 1e-2;
            gd.final_learning_rate = 1e-4;
            for (int64_t c = 0; c < channels && status.ok(); ++c) {
              absl::StatusOr<inr::LinearAdamFit> fit =
                  inr::FitSeparableAdam2D(*psi_train, *psi_train, train[c], gd);
              status = fit.status();
              if (fit.ok()) w.push_back(std::move(fit->weights));
            }
          } else {
            // The exact (Cholesky) route first; a factor it refuses as rank deficient is
            // fitted through the truncated-SVD pseudo-inverse when --rcond > 0, and the
            // cell says so.
            inr::SeparableFitOptions options;
            options.lambda = lambda;
            absl::StatusOr<std::vector<RowMatrixXd>> fit =
                inr::FitSeparable2D(*psi_train, *psi_train, train, options);
            if (fit.status().code() == absl::StatusCode::kFailedPrecondition && rcond > 0) {
              options.rcond = rcond;
              fit = inr::FitSeparable2D(*psi_train, *psi_train, train, options);
              cell.note = absl::StrFormat("pinv, rcond %g", rcond);
            }
            status = fit.status();
            if (fit.ok()) w = *std::move(fit);
          }
          if (status.ok()) {
            cell.params = kk * kk * channels;
            for (const RowMatrixXd& wc : w) {
              absl::StatusOr<RowMatrixXd> r = inr::PredictSeparable2D(*psi_full, *psi_full, wc);
              if (!r.ok()) return Fail(cmd, r.status());
              recon.push_back(*std::move(r));
            }
          }
        }
        const double seconds = Seconds(start);
        if (!status.ok()) {
          cell.note = std::string(status.message());
          std::printf("[%.0f s] %s / %s / %s: failed: %s\n", Seconds(all_start),
                      image.name.c_str(), methods[m], ae.name.c_str(), cell.note.c_str());
          std::fflush(stdout);
          continue;
        }
        const double psnr = TestPsnr(image.channels, recon);
        cell.psnr.push_back(psnr);
        cell.seconds.push_back(seconds);
        std::printf("[%.0f s] %s / %s / %s: test PSNR %.2f dB, %.3f s%s\n", Seconds(all_start),
                    image.name.c_str(), methods[m], ae.name.c_str(), psnr, seconds,
                    cell.note.empty() ? "" : (" (" + cell.note + ")").c_str());
        std::fflush(stdout);
        if (im == 0) {
          const std::string png = absl::StrCat(out, "/", image.name, "_",
                                               m == 0 ? "simple_mlp" : m == 1 ? "complex_gd"
                                                                              : "complex_closed",
                                               "_", ae.name, ".png");
          if (absl::Status s = inr::WritePng(png, recon); !s.ok()) return Fail(cmd, s);
        }
      }
    }
  }

  std::string md = absl::StrFormat(
      "# Zheng et al. Table 1, reproduced by `gpe inr zheng-table1`\n\n"
      "%zu image(s) (%s), %lldx%lld, %s; trained on the [::2] x [::2] grid, PSNR (peak 1) on "
      "the other pixels, mean +- sample std over images. K = %lld per axis over [-1, 1]. "
      "Simple + MLP: 4 hidden layers of width %lld, %lld full-batch Adam steps at lr 1e-3 "
      "(Zheng et al.: 2000 epochs). Complex + linear (Adam): %lld steps, lr 1e-2 decayed to "
      "1e-4. Closed form: ridge %g per factor, exact solve; factors it refuses as rank "
      "deficient are marked (pinv) and use the truncated-SVD pseudo-inverse, rcond %g. "
      "Time: wall seconds "
      "per image, this machine. cond(Psi): the training factor's s_max / s_min; the exact "
      "closed form (ridge = rcond = 0) amplifies data errors by up to its square, so a large "
      "value means the fit interpolates the training pixels with weights that explode between "
      "them (the test PSNR then reports that, not a solver fault).\n\n"
      "| method | encoding | PSNR (dB) | params | time (s) | cond(Psi) |\n"
      "|---|---|---|---|---|---|\n",
      images.size(), files.empty() ? "analytic Radial and Spiral" : "given files",
      static_cast<long long>(n), static_cast<long long>(n),
      images[0].channels.size() == 1 ? "grayscale" : "per channel", static_cast<long long>(k),
      static_cast<long long>(mlp_width), static_cast<long long>(mlp_steps),
      static_cast<long long>(gd_steps), lambda, rcond);
  for (int m = 0; m < 3; ++m) {
    if (m == 0 && !mlp) continue;
    for (size_t e = 0; e < encodings.size(); ++e) {
      const ZhengCell& cell = cells[m][e];
      if (cell.psnr.empty()) {
        absl::StrAppend(&md, "| ", methods[m], " | ", encodings[e].name, " | — (", cell.note,
                        ") | — | — | ", absl::StrFormat("%.3g", conditions[e]), " |\n");
        continue;
      }
      const MeanStd p = Summarise(cell.psnr), t = Summarise(cell.seconds);
      absl::StrAppend(&md, absl::StrFormat("| %s | %s%s | %.2f +- %.2f | %lld | %.3f | %.3g |\n",
                                           methods[m], encodings[e].name,
                                           cell.note.empty() ? "" : " (" + cell.note + ")",
                                           p.mean, p.std,
                                           static_cast<long long>(cell.params), t.mean,
                                           conditions[e]));
    }
  }
  absl::StrAppend(&md, "\nPictures (first image): <image>_truth.png, "
                  "<image>_{simple_mlp,complex_gd,complex_closed}_<encoding>.png.\n");
  if (absl::Status s = WriteText(out + "/table1.md", md); !s.ok()) return Fail(cmd, s);
  std::printf("\n%s\nWrote %s/table1.md (%.0f s in all)\n", md.c_str(), out.c_str(),
              Seconds(all_start));
  return 0;
}

// ---------------------------------------------------------------------------------------
// A volume: closed form 3D (separable samples) vs the blended fit (random samples).

int RunVolume(const std::vector<std::string>& args) {
  const char* cmd = "volume";
  int64_t n = 64;
  double fraction = 0.25;
  long long seed = 1;
  bool size_given = false, quick = false;
  std::string out = DefaultOut("volume");
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    const bool has_value = i + 1 < args.size();
    long long v = 0;
    if (a == "--help" || a == "-h") {
      std::fputs(kVolumeUsage, stdout);
      return 0;
    } else if (a == "--quick") {
      quick = true;
    } else if (a == "--size" && has_value) {
      if (!ParseInt(args[++i], 8, 256, &v) || v % 2 != 0) {
        return BadArgs(cmd, "--size takes an even number in 8..256", kVolumeUsage);
      }
      n = v;
      size_given = true;
    } else if (a == "--fraction" && has_value) {
      if (!ParseDouble(args[++i], 1e-9, 1.0, &fraction)) {
        return BadArgs(cmd, "--fraction takes a number in (0, 1]", kVolumeUsage);
      }
    } else if (a == "--seed" && has_value) {
      if (!ParseInt(args[++i], 0, INT64_MAX, &seed)) {
        return BadArgs(cmd, "--seed takes a non-negative integer", kVolumeUsage);
      }
    } else if (a == "--out" && has_value) {
      out = UserPath(args[++i]);
    } else {
      return BadArgs(cmd, absl::StrCat("unknown or incomplete option '", a, "'"), kVolumeUsage);
    }
  }
  if (quick && !size_given) n = 12;
  if (absl::Status s = MakeDir(out); !s.ok()) return Fail(cmd, s);
  const std::vector<double> axis = inr::GridAxis(n);
  // Row-major (z, y, x) voxels, as closed_form.h's Tensor3 with dims {n_z, n_y, n_x}.
  inr::Tensor3 volume;
  volume.dims = {n, n, n};
  volume.data.resize(static_cast<size_t>(n * n * n));
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      for (int64_t k = 0; k < n; ++k) {
        const double r = std::sqrt(axis[i] * axis[i] + axis[j] * axis[j] + axis[k] * axis[k]);
        volume.data[(i * n + j) * n + k] = std::abs(std::sin(15 * std::sqrt(r)));
      }
    }
  }
  const int64_t half = n / 2, kk = half;
  absl::StatusOr<enc::ShiftedBasis1D> basis = enc::ShiftedBasis1D::Create(
      enc::ShiftedBasisKind::kGaussian, kk, 2.0 / static_cast<double>(kk), -1.0, 1.0);
  if (!basis.ok()) return Fail(cmd, basis.status());
  auto psnr_of = [](double se, int64_t count) {
    return se == 0 ? INFINITY : 10 * std::log10(static_cast<double>(count) / se);
  };
  auto write_slice = [&](const std::string& name, const std::vector<double>& data) {
    ImageMatrix m(n, n);
    const int64_t z = n / 2;
    for (int64_t j = 0; j < n; ++j) {
      for (int64_t k = 0; k < n; ++k) m(j, k) = data[(z * n + j) * n + k];
    }
    return inr::WritePng(absl::StrCat(out, "/", name, ".png"), {m});
  };
  if (absl::Status s = write_slice("truth_midz", volume.data); !s.ok()) return Fail(cmd, s);
  std::printf("Volume |sin(15 sqrt(r))| on a %lld^3 grid over [-1, 1]^3, Gaussian embedder "
              "K = %lld per axis\n\n| method | samples | test PSNR (dB) | time (s) |\n"
              "|---|---|---|---|\n",
              static_cast<long long>(n), static_cast<long long>(kk));
  std::fflush(stdout);

  // Closed form on the [::2]^3 grid (Zheng et al. eq. 18, mode-n products).
  {
    const auto start = std::chrono::steady_clock::now();
    std::vector<double> train_axis;
    for (int64_t i = 0; i < n; i += 2) train_axis.push_back(axis[i]);
    inr::Tensor3 train;
    train.dims = {half, half, half};
    train.data.resize(static_cast<size_t>(half * half * half));
    for (int64_t i = 0; i < half; ++i) {
      for (int64_t j = 0; j < half; ++j) {
        for (int64_t k = 0; k < half; ++k) {
          train.data[(i * half + j) * half + k] = volume.data[((2 * i) * n + 2 * j) * n + 2 * k];
        }
      }
    }
    absl::StatusOr<RowMatrixXd> psi_train = basis->Encode(train_axis);
    absl::StatusOr<RowMatrixXd> psi_full = basis->Encode(axis);
    if (!psi_train.ok() || !psi_full.ok()) {
      return Fail(cmd, psi_train.ok() ? psi_full.status() : psi_train.status());
    }
    absl::StatusOr<inr::Tensor3> w =
        inr::FitSeparable3D({*psi_train, *psi_train, *psi_train}, train, 1e-6);
    if (!w.ok()) return Fail(cmd, w.status());
    absl::StatusOr<inr::Tensor3> recon =
        inr::PredictSeparable3D({*psi_full, *psi_full, *psi_full}, *w);
    if (!recon.ok()) return Fail(cmd, recon.status());
    const double seconds = Seconds(start);
    double se = 0;
    int64_t count = 0;
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        for (int64_t k = 0; k < n; ++k) {
          if (i % 2 == 0 && j % 2 == 0 && k % 2 == 0) continue;
          const size_t p = static_cast<size_t>((i * n + j) * n + k);
          se += (recon->data[p] - volume.data[p]) * (recon->data[p] - volume.data[p]);
          ++count;
        }
      }
    }
    std::printf("| closed form 3D (ridge 1e-6) | [::2]^3 grid, %lld | %.2f | %.3f |\n",
                static_cast<long long>(half * half * half), psnr_of(se, count), seconds);
    std::fflush(stdout);
    if (absl::Status s = write_slice("closed_form_midz", recon->data); !s.ok()) return Fail(cmd, s);
  }

  // Blended fit of random voxels, one z-slice at a time (the 2D fit of blended.h).
  {
    const auto start = std::chrono::steady_clock::now();
    std::mt19937_64 rng(static_cast<uint64_t>(seed));
    std::uniform_real_distribution<double> uniform(0.0, 1.0);
    std::vector<char> sampled(volume.data.size(), 0);
    std::vector<double> recon(volume.data.size(), 0.0);
    // K = size / 4 per axis: a slice's random voxels (size^2 / 4 at 25%) then outnumber
    // the K^2 weights four to one; K = size / 2 would leave as many weights as samples,
    // which random positions leave ill-posed.
    const int64_t kb = std::max<int64_t>(2, n / 4);
    absl::StatusOr<enc::ShiftedBasis1D> blend_basis = enc::ShiftedBasis1D::Create(
        enc::ShiftedBasisKind::kGaussian, kb, 2.0 / static_cast<double>(kb), -1.0, 1.0);
    if (!blend_basis.ok()) return Fail(cmd, blend_basis.status());
    const inr::AxisEncoder encoder = [&](absl::Span<const double> c) {
      return blend_basis->Encode(c);
    };
    absl::StatusOr<RowMatrixXd> psi = blend_basis->Encode(axis);
    if (!psi.ok()) return Fail(cmd, psi.status());
    inr::BlendedFitOptions options;
    int64_t samples = 0;
    for (int64_t i = 0; i < n; ++i) {
      std::vector<double> px, py, values;
      for (int64_t j = 0; j < n; ++j) {
        for (int64_t k = 0; k < n; ++k) {
          if (uniform(rng) >= fraction) continue;
          sampled[(i * n + j) * n + k] = 1;
          px.push_back(axis[k]);
          py.push_back(axis[j]);
          values.push_back(volume.data[(i * n + j) * n + k]);
        }
      }
      if (values.empty()) continue;  // an empty slice predicts 0
      samples += static_cast<int64_t>(values.size());
      absl::StatusOr<inr::BlendedFit> fit =
          inr::FitBlended2D(encoder, encoder, axis, axis, px, py, values, options);
      if (!fit.ok()) return Fail(cmd, fit.status());
      absl::StatusOr<RowMatrixXd> slice = inr::PredictSeparable2D(*psi, *psi, fit->weights);
      if (!slice.ok()) return Fail(cmd, slice.status());
      for (int64_t j = 0; j < n; ++j) {
        for (int64_t k = 0; k < n; ++k) recon[(i * n + j) * n + k] = (*slice)(j, k);
      }
      if ((i + 1) % std::max<int64_t>(1, n / 4) == 0) {
        std::fprintf(stderr, "  blended: %lld of %lld slices (%.1f s)\n",
                     static_cast<long long>(i + 1), static_cast<long long>(n), Seconds(start));
      }
    }
    const double seconds = Seconds(start);
    double se = 0;
    int64_t count = 0;
    for (size_t p = 0; p < recon.size(); ++p) {
      if (sampled[p]) continue;
      se += (recon[p] - volume.data[p]) * (recon[p] - volume.data[p]);
      ++count;
    }
    std::printf("| blended, per z-slice (K = %lld, ridge %g, CGLS) | random %.0f%%, %lld | %.2f "
                "| %.3f |\n",
                static_cast<long long>(kb), options.lambda, 100 * fraction, static_cast<long long>(samples),
                count > 0 ? psnr_of(se, count) : INFINITY, seconds);
    if (absl::Status s = write_slice("blended_midz", recon); !s.ok()) return Fail(cmd, s);
  }
  std::printf("\nMid-z slices: %s/{truth,closed_form,blended}_midz.png\n", out.c_str());
  return 0;
}

}  // namespace

int RunInrCommand(const std::vector<std::string>& args) {
  if (args.empty()) {
    std::fprintf(stderr, "gpe inr: give a command\n\n%s", kInrUsage);
    return 2;
  }
  const std::string& command = args[0];
  const std::vector<std::string> rest(args.begin() + 1, args.end());
  if (command == "--help" || command == "-h" || command == "help") {
    std::fputs(kInrUsage, stdout);
    return 0;
  }
  if (command == "lim-table2") return RunLimTable2(rest);
  if (command == "zheng-table1") return RunZhengTable1(rest);
  if (command == "volume") return RunVolume(rest);
  std::fprintf(stderr, "gpe inr: unknown command '%s'\n\n%s", command.c_str(), kInrUsage);
  return 2;
}

}  // namespace tools
}  // namespace gpe
