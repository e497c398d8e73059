#include "tools/gpe_separable_fits.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "encodings/coordinate/shifted_basis.h"
#include "inr/closed_form.h"
#include "inr/data.h"

namespace gpe {
namespace tools {
namespace {

namespace enc = gpe::encodings;
using inr::ImageMatrix;
using inr::RowMatrixXd;

// The image's axes over [-1, 1], the [::2] training axes and the training pixels.
struct TrainingGrid {
  std::vector<double> axis_y, axis_x, train_y, train_x;
  std::vector<RowMatrixXd> train;  // per channel, on the [::2] x [::2] grid
};

TrainingGrid MakeTrainingGrid(const inr::Image& image) {
  TrainingGrid g;
  g.axis_y = inr::GridAxis(image.rows());
  g.axis_x = inr::GridAxis(image.cols());
  for (int64_t i = 0; i < image.rows(); i += 2) g.train_y.push_back(g.axis_y[i]);
  for (int64_t j = 0; j < image.cols(); j += 2) g.train_x.push_back(g.axis_x[j]);
  for (const ImageMatrix& c : image.channels) {
    RowMatrixXd t(g.train_y.size(), g.train_x.size());
    for (int64_t i = 0; i < t.rows(); ++i) {
      for (int64_t j = 0; j < t.cols(); ++j) t(i, j) = c(2 * i, 2 * j);
    }
    g.train.push_back(std::move(t));
  }
  return g;
}

// One row of the table: a shifted basis with k shifts per axis, its width in shift
// spacings.
struct BasisConfig {
  const char* name;
  enc::ShiftedBasisKind kind;
  int64_t k;
  double width_in_spacings;
};

// Fits, predicts and scores one configuration; prints its row (or why the fit failed) and
// writes <name>_<config>_k<K>.png. Errors: a basis that cannot be made.
absl::Status FitAndReport(const BasisConfig& c, const TrainingGrid& g, const inr::Image& image,
                          const std::string& name, const std::string& out_dir) {
  inr::SeparableFitOptions fit_options;
  fit_options.lambda = 1e-6;
  fit_options.float32_image_products = true;
  const double width = c.width_in_spacings * 2.0 / static_cast<double>(c.k);
  absl::StatusOr<enc::ShiftedBasis1D> basis =
      enc::ShiftedBasis1D::Create(c.kind, c.k, width, -1.0, 1.0);
  if (!basis.ok()) return basis.status();
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<RowMatrixXd> psi_y = basis->Encode(g.train_y);
  absl::StatusOr<RowMatrixXd> psi_x = basis->Encode(g.train_x);
  absl::StatusOr<std::vector<RowMatrixXd>> w =
      psi_y.ok() && psi_x.ok() ? inr::FitSeparable2D(*psi_y, *psi_x, g.train, fit_options)
                               : absl::StatusOr<std::vector<RowMatrixXd>>(
                                     psi_y.ok() ? psi_x.status() : psi_y.status());
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  if (!w.ok()) {
    std::printf("| %s | %lld | %.1f | fit failed: %s | | | |\n", c.name,
                static_cast<long long>(c.k), c.width_in_spacings,
                std::string(w.status().message()).c_str());
    return absl::OkStatus();
  }
  absl::StatusOr<RowMatrixXd> full_y = basis->Encode(g.axis_y);
  if (!full_y.ok()) return full_y.status();
  absl::StatusOr<RowMatrixXd> full_x = basis->Encode(g.axis_x);
  if (!full_x.ok()) return full_x.status();
  std::vector<ImageMatrix> recon;
  double train_se = 0, test_se = 0;
  int64_t train_count = 0, test_count = 0;
  for (size_t ch = 0; ch < image.channels.size(); ++ch) {
    absl::StatusOr<ImageMatrix> r = inr::PredictSeparable2D(*full_y, *full_x, (*w)[ch]);
    if (!r.ok()) return r.status();
    recon.push_back(*std::move(r));
    for (int64_t i = 0; i < image.rows(); ++i) {
      for (int64_t j = 0; j < image.cols(); ++j) {
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
  // A reconstruction that cannot be written fails the command (exit 1), as the truth PNG
  // and every other output do; it used to show "(not written)" in the table and exit 0.
  if (absl::Status s = inr::WritePng(out_dir + "/" + png, recon); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("cannot write ", out_dir, "/", png, ": ",
                                               s.message()));
  }
  std::printf("| %s | %lld | %.1f | %.2f | %.2f | %.2f | %s |\n", c.name,
              static_cast<long long>(c.k), c.width_in_spacings,
              10 * std::log10(train_count / train_se), 10 * std::log10(test_count / test_se), ms,
              png.c_str());
  return absl::OkStatus();
}

// The table for one image; `title` heads it and `name` prefixes the PNGs.
int RunSeparableFits(const std::string& title, const std::string& name, const inr::Image& image,
                     const std::string& out_dir) {
  const int64_t rows = image.rows(), cols = image.cols();
  if (rows < 4 || cols < 4) {
    std::fprintf(stderr, "gpe: the image is %lldx%lld; at least 4x4 is needed\n",
                 static_cast<long long>(rows), static_cast<long long>(cols));
    return 1;
  }
  const TrainingGrid g = MakeTrainingGrid(image);
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  if (ec || !inr::WritePng(out_dir + "/" + name + "_truth.png", image.channels).ok()) {
    std::fprintf(stderr, "gpe: cannot write to %s\n", out_dir.c_str());
    return 1;
  }
  // K per axis: half and all of the training samples along the shorter axis (at most 256).
  const int64_t m = std::min<int64_t>(
      256, static_cast<int64_t>(std::min(g.train_y.size(), g.train_x.size())));
  const BasisConfig configs[] = {
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
  for (const BasisConfig& c : configs) {
    if (absl::Status s = FitAndReport(c, g, image, name, out_dir); !s.ok()) {
      std::fprintf(stderr, "gpe: %s\n", std::string(s.message()).c_str());
      return 1;
    }
  }
  std::printf("\nPictures are in %s\n", out_dir.c_str());
  return 0;
}

}  // namespace

int RunInrSpiral(const std::string& out_dir) {
  inr::Image image;
  image.channels.push_back(inr::SyntheticImage(inr::SyntheticTask::kSpiral, 256));
  return RunSeparableFits("Spiral image (Lim et al. D.1)", "spiral", image, out_dir);
}

int RunInrImage(const std::string& path, bool gray, const std::string& out_dir) {
  absl::StatusOr<inr::Image> image = inr::ReadPng(path, gray);
  if (!image.ok()) {
    std::fprintf(stderr, "gpe: %s\n", std::string(image.status().message()).c_str());
    return 1;
  }
  const std::string stem = std::filesystem::path(path).stem().string();
  return RunSeparableFits(path, stem.empty() ? "image" : stem, *image, out_dir);
}

}  // namespace tools
}  // namespace gpe
