#include "tools/gpe_inr_zheng_table1.h"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <new>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <Eigen/Dense>
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "encodings/coordinate/fourier_features.h"
#include "encodings/coordinate/shifted_basis.h"
#include "inr/closed_form.h"
#include "inr/data.h"
#include "inr/linear_gd.h"
#include "inr/mlp.h"
#include "tools/gpe_inr_common.h"

namespace gpe {
namespace tools {
namespace {

namespace enc = gpe::encodings;
using inr::ImageMatrix;
using inr::RowMatrixXd;

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


// Table 1's methods, in its row order, with the stems of their pictures.
constexpr int kSimpleMlp = 0, kComplexAdam = 1, kComplexClosedForm = 2;
constexpr const char* kMethods[] = {"simple + MLP (Adam)", "complex + linear (Adam)",
                                    "complex + linear (closed form)"};
constexpr const char* kMethodStems[] = {"simple_mlp", "complex_gd", "complex_closed"};

struct ZhengConfig {
  int64_t n = 512, gd_steps = 2000, mlp_steps = 100, mlp_width = 256;
  bool gray = false, mlp = true;
  double lambda = 0, rcond = 1e-6;
  std::string out;
  std::vector<std::string> files;
};

// Fills *cfg from args; returns the exit code when the command ends here (--help, bad args).
std::optional<int> ParseZhengArgs(const std::vector<std::string>& args, ZhengConfig* cfg) {
  const char* cmd = "zheng-table1";
  bool quick = false, size_given = false, gd_given = false, mlp_given = false;
  cfg->out = DefaultOut("zheng_table1");
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    // An empty value (--out "") is none: it fell back to a default without a word.
    const bool has_value = i + 1 < args.size() && !args[i + 1].empty();
    long long v = 0;
    if (a == "--help" || a == "-h") {
      std::fputs(kZhengUsage, stdout);
      return 0;
    } else if (a == "--quick") {
      quick = true;
    } else if (a == "--gray") {
      cfg->gray = true;
    } else if (a == "--no-mlp") {
      cfg->mlp = false;
    } else if (a == "--size" && has_value) {
      if (!ParseInt(args[++i], 16, 2048, &v) || v % 2 != 0) {
        return BadArgs(cmd, "--size takes an even number in 16..2048", kZhengUsage);
      }
      cfg->n = v;
      size_given = true;
    } else if (a == "--gd-steps" && has_value) {
      if (!ParseInt(args[++i], 1, 1000000, &v)) {
        return BadArgs(cmd, "--gd-steps takes 1..1000000", kZhengUsage);
      }
      cfg->gd_steps = v;
      gd_given = true;
    } else if (a == "--mlp-steps" && has_value) {
      if (!ParseInt(args[++i], 1, 1000000, &v)) {
        return BadArgs(cmd, "--mlp-steps takes 1..1000000", kZhengUsage);
      }
      cfg->mlp_steps = v;
      mlp_given = true;
    } else if (a == "--lambda" && has_value) {
      if (!ParseDouble(args[++i], 0, 1e6, &cfg->lambda)) {
        return BadArgs(cmd, "--lambda takes a finite number in [0, 1e6]", kZhengUsage);
      }
    } else if (a == "--rcond" && has_value) {
      if (!ParseDouble(args[++i], 0, 0.999, &cfg->rcond)) {
        return BadArgs(cmd, "--rcond takes a finite number in [0, 0.999]", kZhengUsage);
      }
    } else if (a == "--out" && has_value) {
      cfg->out = UserPath(args[++i]);
    } else if (!a.empty() && a[0] != '-') {
      cfg->files.push_back(UserPath(a));
    } else {
      return BadArgs(cmd, absl::StrCat("unknown or incomplete option '", a, "'"), kZhengUsage);
    }
  }
  if (quick) {
    if (!size_given) cfg->n = 32;
    if (!gd_given) cfg->gd_steps = 40;
    if (!mlp_given) cfg->mlp_steps = 5;
    cfg->mlp_width = 32;
  }
  return std::nullopt;
}

// The files given, resampled to n x n (named by their stems), else the analytic Radial
// and Spiral images.
absl::StatusOr<std::vector<ZhengImage>> LoadZhengImages(const ZhengConfig& cfg) {
  std::vector<ZhengImage> images;
  for (const std::string& path : cfg.files) {
    absl::StatusOr<inr::Image> image = inr::ReadImage(path, cfg.gray);
    if (!image.ok()) return image.status();
    ZhengImage z{std::filesystem::path(path).stem().string(), {}};
    for (const ImageMatrix& c : image->channels) z.channels.push_back(ResampleSquare(c, cfg.n));
    images.push_back(std::move(z));
  }
  if (cfg.files.empty()) {
    images.push_back({"radial", {inr::SyntheticImage(inr::SyntheticTask::kRadial, cfg.n)}});
    images.push_back({"spiral", {inr::SyntheticImage(inr::SyntheticTask::kSpiral, cfg.n)}});
  }
  return images;
}

// The training pixels: each channel on the [::2] x [::2] grid (half x half).
std::vector<RowMatrixXd> TrainingPixels(const ZhengImage& image, int64_t half) {
  std::vector<RowMatrixXd> train;
  for (const ImageMatrix& c : image.channels) {
    RowMatrixXd t(half, half);
    for (int64_t i = 0; i < half; ++i) {
      for (int64_t j = 0; j < half; ++j) t(i, j) = c(2 * i, 2 * j);
    }
    train.push_back(std::move(t));
  }
  return train;
}

// One encoding's per-axis factors on the training axis and on the full axis.
struct Factors {
  RowMatrixXd train, full;
};
absl::StatusOr<Factors> EncodeFactors(const AxisEncoding& ae, const std::vector<double>& train_axis,
                                      const std::vector<double>& axis) {
  absl::StatusOr<RowMatrixXd> psi_train = ae.encode(train_axis);
  absl::StatusOr<RowMatrixXd> psi_full = ae.encode(axis);
  if (!psi_train.ok()) return psi_train.status();
  if (!psi_full.ok()) return psi_full.status();
  return Factors{*std::move(psi_train), *std::move(psi_full)};
}

// A method's fit of one image: its reconstruction (n x n per channel), or in fit_status
// why the fit failed (the cell shows it and the run goes on). The outer status is an
// error that ends the command.
struct Fit {
  absl::Status fit_status;
  std::vector<RowMatrixXd> recon;
};

// The simple embedding (eq. 16): [psi(x), psi(y)] per pixel of the side x side grid.
inr::RowMatrix<float> SimpleEmbedding(const RowMatrixXd& psi) {
  const int64_t side = psi.rows(), kk = psi.cols();
  inr::RowMatrix<float> f(side * side, 2 * kk);
  for (int64_t i = 0; i < side; ++i) {
    for (int64_t j = 0; j < side; ++j) {
      f.row(i * side + j) << psi.row(j).cast<float>(), psi.row(i).cast<float>();
    }
  }
  return f;
}

// Simple embedding + MLP (4 hidden ReLU layers, full-batch Adam at lr 1e-3).
absl::StatusOr<Fit> FitSimpleMlp(const ZhengConfig& cfg, const ZhengImage& image,
                                 const AxisEncoding& ae, const Factors& psi,
                                 const std::vector<RowMatrixXd>& train, ZhengCell* cell) {
  const int64_t n = cfg.n, half = n / 2, kk = psi.train.cols();
  const int64_t channels = static_cast<int64_t>(image.channels.size());
  const inr::RowMatrix<float> x_train = SimpleEmbedding(psi.train);
  inr::RowMatrix<float> y_train(half * half, channels);
  for (int64_t c = 0; c < channels; ++c) {
    y_train.col(c) =
        Eigen::Map<const Eigen::VectorXd>(train[c].data(), half * half).cast<float>();
  }
  inr::MlpShape shape{2 * kk, cfg.mlp_width, 4, channels};
  absl::StatusOr<inr::Mlp> net = inr::Mlp::Create(shape, 0);
  if (!net.ok()) return net.status();
  inr::TrainOptions train_options;
  train_options.steps = cfg.mlp_steps;
  train_options.adam.learning_rate = 1e-3;
  train_options.eval_every = std::max<int64_t>(1, cfg.mlp_steps / 4);
  train_options.progress = [&](const inr::TrainProgress& p) {
    std::printf("    %s / %s: MLP step %lld, train MSE %.5f\n", image.name.c_str(),
                ae.name.c_str(), static_cast<long long>(p.step), p.train_loss);
    std::fflush(stdout);
  };
  absl::StatusOr<inr::TrainHistory> h =
      inr::TrainFullBatch<float>(&*net, x_train, y_train, train_options);
  Fit fit;
  fit.fit_status = h.status();
  if (!h.ok()) return fit;
  cell->params = net->num_parameters();
  absl::StatusOr<inr::RowMatrix<float>> pred = inr::Predict<float>(*net, SimpleEmbedding(psi.full));
  if (!pred.ok()) return pred.status();
  for (int64_t c = 0; c < channels; ++c) {
    RowMatrixXd r(n, n);
    for (int64_t p = 0; p < n * n; ++p) r(p / n, p % n) = (*pred)(p, c);
    fit.recon.push_back(std::move(r));
  }
  return fit;
}

// The complex embedder's linear layer by Adam (lr 1e-2 decayed to 1e-4), per channel.
absl::StatusOr<std::vector<RowMatrixXd>> FitComplexByAdam(const ZhengConfig& cfg,
                                                          const RowMatrixXd& psi_train,
                                                          const std::vector<RowMatrixXd>& train) {
  inr::LinearAdamOptions gd;
  gd.steps = cfg.gd_steps;
  gd.learning_rate = 1e-2;
  gd.final_learning_rate = 1e-4;
  std::vector<RowMatrixXd> w;
  for (const RowMatrixXd& channel : train) {
    absl::StatusOr<inr::LinearAdamFit> fit =
        inr::FitSeparableAdam2D(psi_train, psi_train, channel, gd);
    if (!fit.ok()) return fit.status();
    w.push_back(std::move(fit->weights));
  }
  return w;
}

// The complex embedder's linear layer in closed form: the exact (Cholesky) route first; a
// factor it refuses as rank deficient is fitted through the truncated-SVD pseudo-inverse
// when --rcond > 0, and *note says so.
absl::StatusOr<std::vector<RowMatrixXd>> FitComplexClosedForm(
    const ZhengConfig& cfg, const RowMatrixXd& psi_train, const std::vector<RowMatrixXd>& train,
    std::string* note) {
  inr::SeparableFitOptions options;
  options.lambda = cfg.lambda;
  absl::StatusOr<std::vector<RowMatrixXd>> fit =
      inr::FitSeparable2D(psi_train, psi_train, train, options);
  if (fit.status().code() == absl::StatusCode::kFailedPrecondition && cfg.rcond > 0) {
    options.rcond = cfg.rcond;
    fit = inr::FitSeparable2D(psi_train, psi_train, train, options);
    *note = absl::StrFormat("pinv, rcond %g", cfg.rcond);
  }
  return fit;
}

// Complex embedding + linear layer (method kComplexAdam or kComplexClosedForm): the
// weights, then the prediction on the full grid.
absl::StatusOr<Fit> FitComplexLinear(int method, const ZhengConfig& cfg, const Factors& psi,
                                     const std::vector<RowMatrixXd>& train, ZhengCell* cell) {
  absl::StatusOr<std::vector<RowMatrixXd>> w =
      method == kComplexAdam ? FitComplexByAdam(cfg, psi.train, train)
                             : FitComplexClosedForm(cfg, psi.train, train, &cell->note);
  Fit fit;
  fit.fit_status = w.status();
  if (!w.ok()) return fit;
  const int64_t kk = psi.train.cols();
  cell->params = kk * kk * static_cast<int64_t>(train.size());
  for (const RowMatrixXd& wc : *w) {
    absl::StatusOr<RowMatrixXd> r = inr::PredictSeparable2D(psi.full, psi.full, wc);
    if (!r.ok()) return r.status();
    fit.recon.push_back(*std::move(r));
  }
  return fit;
}

// One image's fit by one method under one encoding, timed: adds the test PSNR and the
// time to *cell (or records why the fit failed), prints a progress line and, for the
// first image, writes <image>_<method>_<encoding>.png.
absl::Status RunZhengCell(const ZhengConfig& cfg, const ZhengImage& image, bool first_image,
                          int method, const AxisEncoding& ae, const Factors& psi,
                          const std::vector<RowMatrixXd>& train,
                          std::chrono::steady_clock::time_point all_start, ZhengCell* cell) {
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<Fit> fit;
  try {
    fit = method == kSimpleMlp ? FitSimpleMlp(cfg, image, ae, psi, train, cell)
                               : FitComplexLinear(method, cfg, psi, train, cell);
  } catch (const std::bad_alloc&) {
    // Past what RunZhengTable1's estimate foresaw (ZhengMlpBytes): a failed cell, not an
    // abort that loses the rest of the table.
    fit = Fit{absl::ResourceExhaustedError(absl::StrFormat(
                  "out of memory at %lldx%lld (a smaller --size%s)",
                  static_cast<long long>(cfg.n), static_cast<long long>(cfg.n),
                  method == kSimpleMlp ? " or --no-mlp" : "")),
              {}};
  }
  if (!fit.ok()) return fit.status();
  const double seconds = Seconds(start);
  if (!fit->fit_status.ok()) {
    cell->note = std::string(fit->fit_status.message());
    std::printf("[%.0f s] %s / %s / %s: failed: %s\n", Seconds(all_start), image.name.c_str(),
                kMethods[method], ae.name.c_str(), cell->note.c_str());
    std::fflush(stdout);
    return absl::OkStatus();
  }
  const double psnr = TestPsnr(image.channels, fit->recon);
  cell->psnr.push_back(psnr);
  cell->seconds.push_back(seconds);
  std::printf("[%.0f s] %s / %s / %s: test PSNR %.2f dB, %.3f s%s\n", Seconds(all_start),
              image.name.c_str(), kMethods[method], ae.name.c_str(), psnr, seconds,
              cell->note.empty() ? "" : (" (" + cell->note + ")").c_str());
  std::fflush(stdout);
  if (!first_image) return absl::OkStatus();
  const std::string png =
      absl::StrCat(cfg.out, "/", image.name, "_", kMethodStems[method], "_", ae.name, ".png");
  return inr::WritePng(png, fit->recon);
}

// table1.md: one row per (method, encoding), PSNR mean +- std over the images, parameters,
// time and the training factor's condition number. cells[method][encoding].
std::string ZhengMarkdown(const ZhengConfig& cfg, const std::vector<ZhengImage>& images,
                          int64_t k, const std::vector<AxisEncoding>& encodings,
                          const std::vector<std::vector<ZhengCell>>& cells,
                          const std::vector<double>& conditions) {
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
      images.size(), cfg.files.empty() ? "analytic Radial and Spiral" : "given files",
      static_cast<long long>(cfg.n), static_cast<long long>(cfg.n),
      images[0].channels.size() == 1 ? "grayscale" : "per channel", static_cast<long long>(k),
      static_cast<long long>(cfg.mlp_width), static_cast<long long>(cfg.mlp_steps),
      static_cast<long long>(cfg.gd_steps), cfg.lambda, cfg.rcond);
  for (int m = 0; m < 3; ++m) {
    if (m == kSimpleMlp && !cfg.mlp) continue;
    for (size_t e = 0; e < encodings.size(); ++e) {
      const ZhengCell& cell = cells[m][e];
      if (cell.psnr.empty()) {
        absl::StrAppend(&md, "| ", kMethods[m], " | ", encodings[e].name, " | — (", cell.note,
                        ") | — | — | ", absl::StrFormat("%.3g", conditions[e]), " |\n");
        continue;
      }
      const MeanStd p = Summarise(cell.psnr), t = Summarise(cell.seconds);
      absl::StrAppend(&md, absl::StrFormat("| %s | %s%s | %.2f +- %.2f | %lld | %.3f | %.3g |\n",
                                           kMethods[m], encodings[e].name,
                                           cell.note.empty() ? "" : " (" + cell.note + ")",
                                           p.mean, p.std,
                                           static_cast<long long>(cell.params), t.mean,
                                           conditions[e]));
    }
  }
  absl::StrAppend(&md, "\nPictures (first image): <image>_truth.png, "
                  "<image>_{simple_mlp,complex_gd,complex_closed}_<encoding>.png.\n");
  return md;
}

// The kernel's view of this process: a "Field:   N kB" line of /proc/<file> in bytes; -1
// where absent.
int64_t ProcKilobytes(const char* file, const std::string& field) {
  std::FILE* f = std::fopen(file, "r");
  if (f == nullptr) return -1;
  char line[256];
  int64_t bytes = -1;
  while (std::fgets(line, sizeof(line), f) != nullptr) {
    if (std::strncmp(line, field.c_str(), field.size()) == 0 && line[field.size()] == ':') {
      bytes = std::strtoll(line + field.size() + 1, nullptr, 10) * 1024;
      break;
    }
  }
  std::fclose(f);
  return bytes;
}

std::string Gib(int64_t bytes) {
  return absl::StrFormat("%.1f GiB", static_cast<double>(bytes) / (int64_t{1} << 30));
}

}  // namespace

int64_t ZhengMlpBytes(int64_t n, int64_t k, int64_t width, int64_t channels) {
  constexpr int64_t kFloat = sizeof(float), kLayers = 4;
  const int64_t half = n / 2, train_rows = half * half, pixels = n * n, inputs = 2 * k;
  // TrainFullBatch: the embedding and the forward cache's copy of it (MLP::Forward keeps
  // its input), the targets (and its copy, the gradient of the output and the
  // prediction), the cached activations of every hidden layer and the backward pass's two
  // gradient buffers; after the last step a forward pass of its own (another set of
  // activations) while the step's cache is still alive.
  const int64_t training =
      kFloat * train_rows * (2 * inputs + 4 * channels + (2 * kLayers + 2) * width);
  // Predict on every pixel: its embedding and the forward's copy of it, the activations
  // of every hidden layer (a forward pass keeps them), beside the training embedding and
  // targets; the reconstruction in double.
  const int64_t prediction = kFloat * train_rows * (inputs + channels) +
                             kFloat * pixels * (2 * inputs + kLayers * width + channels) +
                             int64_t{8} * pixels * channels;
  return std::max(training, prediction);
}

namespace {

// The first line of `path` as an integer; -1 where it is missing or not a number ("max").
int64_t FileInteger(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "r");
  if (f == nullptr) return -1;
  char line[64] = {};
  const bool read = std::fgets(line, sizeof(line), f) != nullptr;
  std::fclose(f);
  if (!read) return -1;
  char* end = nullptr;
  const long long v = std::strtoll(line, &end, 10);
  return end == line ? -1 : static_cast<int64_t>(v);
}

}  // namespace

int64_t CgroupMemoryRoomBytes(const std::string& proc_cgroup, const std::string& root) {
  std::FILE* f = std::fopen(proc_cgroup.c_str(), "r");
  if (f == nullptr) return -1;
  std::string v2, v1;
  char line[4096];
  while (std::fgets(line, sizeof(line), f) != nullptr) {
    std::string s(line);
    while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
    const size_t a = s.find(':'), b = a == std::string::npos ? a : s.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string controllers = s.substr(a + 1, b - a - 1), path = s.substr(b + 1);
    if (s.compare(0, a, "0") == 0 && controllers.empty()) v2 = path;
    if (("," + controllers + ",").find(",memory,") != std::string::npos) v1 = path;
  }
  std::fclose(f);
  // A limit this large is none (v1 writes 2^63 rounded down to a page).
  constexpr int64_t kUnlimited = int64_t{1} << 60;
  auto room = [&](const std::string& dir, const char* limit_file, const char* usage_file) {
    const int64_t limit = FileInteger(dir + "/" + limit_file);
    if (limit < 0 || limit >= kUnlimited) return int64_t{-1};
    return std::max<int64_t>(0, limit - std::max<int64_t>(0, FileInteger(dir + "/" + usage_file)));
  };
  if (!v2.empty()) {
    const int64_t r = room(root + v2, "memory.max", "memory.current");
    if (r >= 0) return r;
  }
  if (!v1.empty()) return room(root + "/memory" + v1, "memory.limit_in_bytes", "memory.usage_in_bytes");
  return -1;
}

int64_t AvailableMemoryBytes() {
  int64_t available = ProcKilobytes("/proc/meminfo", "MemAvailable");
  auto at_most = [&](int64_t bytes) {
    if (bytes >= 0) available = available < 0 ? bytes : std::min(available, bytes);
  };
  at_most(CgroupMemoryRoomBytes());
  struct rlimit limit;
  if (getrlimit(RLIMIT_AS, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY) {
    const int64_t mapped = ProcKilobytes("/proc/self/status", "VmSize");
    at_most(std::max<int64_t>(0, static_cast<int64_t>(limit.rlim_cur) - std::max<int64_t>(0, mapped)));
  }
  if (getrlimit(RLIMIT_DATA, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY) {
    at_most(static_cast<int64_t>(limit.rlim_cur));
  }
  return available;
}

int RunZhengTable1(const std::vector<std::string>& args) {
  const char* cmd = "zheng-table1";
  ZhengConfig cfg;
  if (std::optional<int> exit_code = ParseZhengArgs(args, &cfg)) return *exit_code;
  absl::StatusOr<std::vector<ZhengImage>> images = LoadZhengImages(cfg);
  if (!images.ok()) return Fail(cmd, images.status());

  const int64_t n = cfg.n, half = n / 2;
  const int64_t k = std::min<int64_t>(256, half);  // K per axis (Zheng: 256)
  if (cfg.mlp) {
    // The simple + MLP rows hold the embedding of every pixel (n^2 x 2K floats: 8 GiB at
    // 2048 x 2048) and the activations of every layer: refused up front where they cannot
    // fit, instead of failing hours into the run (or aborting).
    int64_t channels = 1;
    for (const ZhengImage& image : *images) {
      channels = std::max<int64_t>(channels, static_cast<int64_t>(image.channels.size()));
    }
    const int64_t need = ZhengMlpBytes(n, k, cfg.mlp_width, channels);
    const int64_t available = AvailableMemoryBytes();
    if (available >= 0 && need > available) {
      return Fail(cmd, absl::ResourceExhaustedError(absl::StrFormat(
                           "the simple + MLP rows at %lldx%lld need about %s, more than the %s "
                           "this process may use; pass --no-mlp (the other rows need far "
                           "less) or a smaller --size",
                           static_cast<long long>(n), static_cast<long long>(n), Gib(need),
                           Gib(available))));
    }
  }
  if (absl::Status s = MakeDir(cfg.out); !s.ok()) return Fail(cmd, s);
  const std::vector<double> axis = inr::GridAxis(n);
  std::vector<double> train_axis;
  for (int64_t i = 0; i < n; i += 2) train_axis.push_back(axis[i]);
  const std::vector<AxisEncoding> encodings = ZhengEncodings(k);
  // cells[method][encoding]
  std::vector<std::vector<ZhengCell>> cells(3, std::vector<ZhengCell>(encodings.size()));
  // cond(Psi) of each encoding's training factor (the same for every image): how much
  // the exact closed form can amplify data errors, per factor (closed_form.h).
  std::vector<double> conditions(encodings.size(), 0.0);
  std::printf("Zheng et al. Table 1: %zu image(s) of %lldx%lld, train on the [::2] grid "
              "(%lldx%lld), K = %lld per axis; MLP %lld steps (4 x %lld hidden), GD %lld steps\n",
              images->size(), static_cast<long long>(n), static_cast<long long>(n),
              static_cast<long long>(half), static_cast<long long>(half),
              static_cast<long long>(k), static_cast<long long>(cfg.mlp ? cfg.mlp_steps : 0),
              static_cast<long long>(cfg.mlp_width), static_cast<long long>(cfg.gd_steps));
  std::fflush(stdout);
  const auto all_start = std::chrono::steady_clock::now();
  for (size_t im = 0; im < images->size(); ++im) {
    const ZhengImage& image = (*images)[im];
    if (absl::Status s = inr::WritePng(absl::StrCat(cfg.out, "/", image.name, "_truth.png"),
                                       image.channels);
        !s.ok()) {
      return Fail(cmd, s);
    }
    const std::vector<RowMatrixXd> train = TrainingPixels(image, half);
    for (size_t e = 0; e < encodings.size(); ++e) {
      const AxisEncoding& ae = encodings[e];
      absl::StatusOr<Factors> psi = EncodeFactors(ae, train_axis, axis);
      if (!psi.ok()) return Fail(cmd, psi.status());
      if (im == 0) {
        absl::StatusOr<double> c = inr::ConditionNumber(psi->train);
        if (!c.ok()) return Fail(cmd, c.status());
        conditions[e] = *c;
        std::printf("  %s: training factor %lld x %lld, cond(Psi) = %.3g\n", ae.name.c_str(),
                    static_cast<long long>(psi->train.rows()),
                    static_cast<long long>(psi->train.cols()), *c);
        std::fflush(stdout);
      }
      for (int m = 0; m < 3; ++m) {
        if (m == kSimpleMlp && !cfg.mlp) continue;
        if (absl::Status s =
                RunZhengCell(cfg, image, im == 0, m, ae, *psi, train, all_start, &cells[m][e]);
            !s.ok()) {
          return Fail(cmd, s);
        }
      }
    }
  }

  const std::string md = ZhengMarkdown(cfg, *images, k, encodings, cells, conditions);
  if (absl::Status s = WriteText(cfg.out + "/table1.md", md); !s.ok()) return Fail(cmd, s);
  std::printf("\n%s\nWrote %s/table1.md (%.0f s in all)\n", md.c_str(), cfg.out.c_str(),
              Seconds(all_start));
  return 0;
}

}  // namespace tools
}  // namespace gpe
