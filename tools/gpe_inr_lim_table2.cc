#include "tools/gpe_inr_lim_table2.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "encodings/coordinate/encoder.h"
#include "encodings/coordinate/fourier_features.h"
#include "encodings/coordinate/so2_bessel.h"
#include "inr/data.h"
#include "inr/mlp.h"
#include "tools/gpe_inr_common.h"

namespace gpe {
namespace tools {
namespace {

namespace enc = gpe::encodings;
using inr::ImageMatrix;
using inr::RowMatrixXd;

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


constexpr LimEncoding kLimEncodings[] = {LimEncoding::kNone, LimEncoding::kTxT,
                                         LimEncoding::kSo2};
const char* LimEncodingStem(LimEncoding e) {
  return e == LimEncoding::kNone ? "none" : e == LimEncoding::kTxT ? "txt" : "so2";
}

// The command line: the run's sizes, the images given, the task subset and the fixed
// hyperparameters per encoding (kLimEncodings' order).
struct LimArgs {
  LimConfig cfg;
  std::string cameraman, retina, task_list;
  // Fixed hyperparameters (Lim et al.'s hyperparameter search settles near these on most tasks).
  LimHyper fixed[3] = {{0, 2, 5e-3}, {5, 2, 1e-3}, {25, 2, 1e-3}};
};

// Fills *a from args; returns the exit code when the command ends here (--help, bad args).
std::optional<int> ParseLimArgs(const std::vector<std::string>& args, LimArgs* a) {
  const char* cmd = "lim-table2";
  LimConfig& cfg = a->cfg;
  std::string out = DefaultOut("lim_table2");
  bool quick = false, seeds_given = false, size_given = false, steps_given = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    // An empty value (--out "") is none: it fell back to a default without a word.
    const bool has_value = i + 1 < args.size() && !args[i + 1].empty();
    long long v = 0;
    if (arg == "--help" || arg == "-h") {
      std::fputs(kLimUsage, stdout);
      return 0;
    } else if (arg == "--quick") {
      quick = true;
    } else if (arg == "--search") {
      cfg.search = true;
    } else if (arg == "--seeds" && has_value) {
      if (!ParseInt(args[++i], 1, 100, &v)) return BadArgs(cmd, "--seeds takes 1..100", kLimUsage);
      cfg.seeds = static_cast<int>(v);
      seeds_given = true;
    } else if (arg == "--size" && has_value) {
      if (!ParseInt(args[++i], 8, 1024, &v)) return BadArgs(cmd, "--size takes 8..1024", kLimUsage);
      cfg.n = v;
      size_given = true;
    } else if (arg == "--steps" && has_value) {
      if (!ParseInt(args[++i], 1, 100000, &v)) {
        return BadArgs(cmd, "--steps takes 1..100000", kLimUsage);
      }
      cfg.steps = v;
      steps_given = true;
    } else if (arg == "--tasks" && has_value) {
      a->task_list = args[++i];
    } else if ((arg == "--txt-scale" || arg == "--so2-scale" || arg == "--lr") && has_value) {
      double x = 0;
      if (!ParseDouble(args[++i], 1e-9, 1e4, &x)) {
        return BadArgs(cmd, absl::StrCat(arg, " takes a number in (0, 1e4]"), kLimUsage);
      }
      if (arg == "--txt-scale") a->fixed[1].scale = x;
      if (arg == "--so2-scale") a->fixed[2].scale = x;
      if (arg == "--lr") a->fixed[1].lr = a->fixed[2].lr = x;
    } else if (arg == "--so2-k" && has_value) {
      if (!ParseInt(args[++i], 2, 1000, &v)) return BadArgs(cmd, "--so2-k takes 2..1000", kLimUsage);
      a->fixed[2].k = static_cast<int>(v);
    } else if (arg == "--cameraman" && has_value) {
      a->cameraman = UserPath(args[++i]);
    } else if (arg == "--retina" && has_value) {
      a->retina = UserPath(args[++i]);
    } else if (arg == "--out" && has_value) {
      out = UserPath(args[++i]);
    } else {
      return BadArgs(cmd, absl::StrCat("unknown or incomplete option '", arg, "'"), kLimUsage);
    }
  }
  if (quick) {  // the quick defaults; what the command line gave explicitly stays
    if (!size_given) cfg.n = 24;
    if (!steps_given) cfg.steps = 30;
    cfg.width = 16;
    if (!seeds_given) cfg.seeds = 2;
  }
  cfg.out = out;
  return std::nullopt;
}

// Table 2's tasks in the paper's column order: Cameraman and Retina when their files are
// given (read as grayscale, resampled to n x n), then the analytic images and fields.
absl::StatusOr<std::vector<LimTask>> LoadLimTasks(const LimArgs& a) {
  const int64_t n = a.cfg.n;
  std::vector<LimTask> tasks;
  for (const auto& [name, stem, path] :
       {std::tuple<const char*, const char*, std::string>{"Cameraman", "cameraman", a.cameraman},
        {"Retina", "retina", a.retina}}) {
    if (path.empty()) continue;
    absl::StatusOr<inr::Image> image = inr::ReadImage(path, /*grayscale=*/true);
    if (!image.ok()) return image.status();
    tasks.push_back({name, stem, false, {ResampleSquare(image->channels[0], n)}});
  }
  using inr::SyntheticTask;
  tasks.push_back({"Radial image", "radial_image", false,
                   {inr::SyntheticImage(SyntheticTask::kRadial, n)}});
  tasks.push_back({"Spiral image", "spiral_image", false,
                   {inr::SyntheticImage(SyntheticTask::kSpiral, n)}});
  tasks.push_back({"Radial field", "radial_field", true,
                   inr::SyntheticVectorField(SyntheticTask::kRadial, n)});
  tasks.push_back({"Spiral field", "spiral_field", true,
                   inr::SyntheticVectorField(SyntheticTask::kSpiral, n)});
  return tasks;
}

// Keeps the tasks named in task_list (comma-separated stems; empty: all). An unknown name
// is InvalidArgument.
absl::Status SelectLimTasks(const std::string& task_list, std::vector<LimTask>* tasks) {
  if (task_list.empty()) return absl::OkStatus();
  const std::vector<std::string> wanted = absl::StrSplit(task_list, ',');
  for (const std::string& w : wanted) {
    if (std::none_of(tasks->begin(), tasks->end(), [&](const LimTask& t) { return t.stem == w; })) {
      return absl::InvalidArgumentError(
          absl::StrCat("--tasks: no task '", w, "' (cameraman and retina need their files)"));
    }
  }
  tasks->erase(std::remove_if(tasks->begin(), tasks->end(),
                              [&](const LimTask& t) {
                                return std::find(wanted.begin(), wanted.end(), t.stem) ==
                                       wanted.end();
                              }),
               tasks->end());
  return absl::OkStatus();
}

// --search: a reduced version of appendix D.2's grid, scored on seed 0's validation set;
// returns the best candidate (`fallback` when every candidate fails).
LimHyper SearchLimHyper(const LimTask& task, LimEncoding e, const LimConfig& cfg,
                        const LimHyper& fallback) {
  std::vector<LimHyper> candidates;
  const double lrs[] = {1e-3, 1e-2};
  if (e == LimEncoding::kNone) {
    for (double lr : {1e-3, 5e-3, 1e-2, 5e-2}) candidates.push_back({0, 2, lr});
  } else if (e == LimEncoding::kTxT) {
    for (double c : {1.0, 3.0, 5.0, 10.0}) {
      for (double lr : lrs) candidates.push_back({c, 2, lr});
    }
  } else {
    for (auto [c, k] : {std::pair<double, int>{5, 2}, {25, 2}, {25, 4}, {50, 2}}) {
      for (double lr : lrs) candidates.push_back({c, k, lr});
    }
  }
  LimHyper h = fallback;
  double best = INFINITY;
  for (const LimHyper& cand : candidates) {
    absl::StatusOr<LimRun> run = RunLim(task, e, cand, cfg, 0, false);
    if (!run.ok()) continue;  // a diverging learning rate is simply not chosen
    std::printf("  search %s / %s (%s): validation MSE %.5f\n", task.name.c_str(),
                LimEncodingName(e), cand.Describe(e).c_str(), run->validation_mse);
    std::fflush(stdout);
    if (run->validation_mse < best) {
      best = run->validation_mse;
      h = cand;
    }
  }
  return h;
}

// Every seed of one (task, encoding) cell: appends the test MSEs to *test_mses, prints
// progress, writes seed 0's reconstruction as <task>_<encoding>.png.
absl::Status RunLimSeeds(const LimTask& task, LimEncoding e, const LimHyper& h,
                         const LimConfig& cfg, std::chrono::steady_clock::time_point all_start,
                         std::vector<double>* test_mses) {
  for (int seed = 0; seed < cfg.seeds; ++seed) {
    absl::StatusOr<LimRun> run = RunLim(task, e, h, cfg, seed, seed == 0);
    if (!run.ok()) return run.status();
    test_mses->push_back(run->test_mse);
    std::printf("[%.0f s] %s / %s (%s) seed %d: test MSE %.5f (%.1f s)\n", Seconds(all_start),
                task.name.c_str(), LimEncodingName(e), h.Describe(e).c_str(), seed,
                run->test_mse, run->seconds);
    std::fflush(stdout);
    if (run->prediction.has_value()) {
      const std::string png = absl::StrCat(cfg.out, "/", task.stem, "_", LimEncodingStem(e), ".png");
      if (absl::Status s = WriteLimPng(png, *run->prediction, cfg.n, task.vector_field); !s.ok()) {
        return s;
      }
    }
  }
  return absl::OkStatus();
}

// table2.md: the measured test MSEs, the hyperparameters used and Lim et al.'s published
// figures, one column per task. results[task][encoding]: test MSEs over seeds;
// chosen[task][encoding]: the hyperparameters.
std::string LimMarkdown(const LimConfig& cfg, const std::vector<LimTask>& tasks,
                        const std::vector<std::vector<std::vector<double>>>& results,
                        const std::vector<std::vector<LimHyper>>& chosen) {
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
    absl::StrAppend(&md, "| ", LimEncodingName(kLimEncodings[e]), " |");
    for (size_t t = 0; t < tasks.size(); ++t) {
      const MeanStd m = Summarise(results[t][e]);
      absl::StrAppend(&md, absl::StrFormat(" %.5f +- %.5f |", m.mean, m.std));
    }
    absl::StrAppend(&md, "\n");
  }
  absl::StrAppend(&md, "\nHyperparameters", cfg.search ? " (chosen on seed 0's validation set)" : "",
                  ":\n\n", header());
  for (int e = 0; e < 3; ++e) {
    absl::StrAppend(&md, "| ", LimEncodingName(kLimEncodings[e]), " |");
    for (size_t t = 0; t < tasks.size(); ++t) {
      absl::StrAppend(&md, " ", chosen[t][e].Describe(kLimEncodings[e]), " |");
    }
    absl::StrAppend(&md, "\n");
  }
  absl::StrAppend(&md, "\n## Lim et al. (published, 10 seeds)\n\n", header());
  for (int e = 0; e < 3; ++e) {
    absl::StrAppend(&md, "| ", LimEncodingName(kLimEncodings[e]), " |");
    for (const LimTask& task : tasks) {
      for (const PaperCell& p : kLimPaper) {
        if (task.name == p.task) absl::StrAppend(&md, absl::StrFormat(" %g +- %g |", p.mean[e], p.std[e]));
      }
    }
    absl::StrAppend(&md, "\n");
  }
  absl::StrAppend(&md, "\nPictures (seed 0): <task>_truth.png, <task>_{none,txt,so2}.png; vector "
                  "fields as (v_x, v_y, 0) with [-1, 1] mapped to 0..255.\n");
  return md;
}

}  // namespace

int RunLimTable2(const std::vector<std::string>& args) {
  const char* cmd = "lim-table2";
  LimArgs a;
  if (std::optional<int> exit_code = ParseLimArgs(args, &a)) return *exit_code;
  const LimConfig& cfg = a.cfg;
  absl::StatusOr<std::vector<LimTask>> loaded = LoadLimTasks(a);
  if (!loaded.ok()) return Fail(cmd, loaded.status());
  std::vector<LimTask>& tasks = *loaded;
  if (absl::Status s = SelectLimTasks(a.task_list, &tasks); !s.ok()) {
    return BadArgs(cmd, std::string(s.message()), kLimUsage);
  }
  if (absl::Status s = MakeDir(cfg.out); !s.ok()) return Fail(cmd, s);

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
    if (absl::Status s = WriteLimPng(absl::StrCat(cfg.out, "/", task.stem, "_truth.png"),
                                     *inr::ChannelsToValues(task.channels), cfg.n,
                                     task.vector_field);
        !s.ok()) {
      return Fail(cmd, s);
    }
    for (int e = 0; e < 3; ++e) {
      const LimHyper h =
          cfg.search ? SearchLimHyper(task, kLimEncodings[e], cfg, a.fixed[e]) : a.fixed[e];
      chosen[t].push_back(h);
      if (absl::Status s = RunLimSeeds(task, kLimEncodings[e], h, cfg, all_start, &results[t][e]);
          !s.ok()) {
        return Fail(cmd, s);
      }
    }
  }

  const std::string md = LimMarkdown(cfg, tasks, results, chosen);
  if (absl::Status s = WriteText(cfg.out + "/table2.md", md); !s.ok()) return Fail(cmd, s);
  std::printf("\n%s\nWrote %s/table2.md (%.0f s in all)\n", md.c_str(), cfg.out.c_str(),
              Seconds(all_start));
  return 0;
}

}  // namespace tools
}  // namespace gpe
