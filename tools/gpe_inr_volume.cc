#include "tools/gpe_inr_volume.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "encodings/coordinate/shifted_basis.h"
#include "inr/blended.h"
#include "inr/closed_form.h"
#include "inr/data.h"
#include "tools/gpe_inr_common.h"

namespace gpe {
namespace tools {
namespace {

namespace enc = gpe::encodings;
using inr::ImageMatrix;
using inr::RowMatrixXd;

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

struct VolumeConfig {
  int64_t n = 64;
  double fraction = 0.25;
  long long seed = 1;
  std::string out;
};

// Fills *cfg from args; returns the exit code when the command ends here (--help, bad args).
std::optional<int> ParseVolumeArgs(const std::vector<std::string>& args, VolumeConfig* cfg) {
  const char* cmd = "volume";
  bool size_given = false, quick = false;
  cfg->out = DefaultOut("volume");
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    // An empty value (--out "") is none: it fell back to a default without a word.
    const bool has_value = i + 1 < args.size() && !args[i + 1].empty();
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
      cfg->n = v;
      size_given = true;
    } else if (a == "--fraction" && has_value) {
      if (!ParseDouble(args[++i], 1e-9, 1.0, &cfg->fraction)) {
        return BadArgs(cmd, "--fraction takes a number in (0, 1]", kVolumeUsage);
      }
    } else if (a == "--seed" && has_value) {
      if (!ParseInt(args[++i], 0, INT64_MAX, &cfg->seed)) {
        return BadArgs(cmd, "--seed takes a non-negative integer", kVolumeUsage);
      }
    } else if (a == "--out" && has_value) {
      cfg->out = UserPath(args[++i]);
    } else {
      return BadArgs(cmd, absl::StrCat("unknown or incomplete option '", a, "'"), kVolumeUsage);
    }
  }
  if (quick && !size_given) cfg->n = 12;
  return std::nullopt;
}

// |sin(15 sqrt(r))| on the n^3 grid: row-major (z, y, x) voxels, as closed_form.h's
// Tensor3 with dims {n_z, n_y, n_x}.
inr::Tensor3 RadialVolume(int64_t n, const std::vector<double>& axis) {
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
  return volume;
}

// PSNR (peak 1) from a summed squared error over `count` voxels.
double VolumePsnr(double se, int64_t count) {
  return se == 0 ? INFINITY : 10 * std::log10(static_cast<double>(count) / se);
}

// The mid-z slice of an n^3 volume as <out>/<name>.png.
absl::Status WriteMidZSlice(const std::string& out, const std::string& name, int64_t n,
                            const std::vector<double>& data) {
  ImageMatrix m(n, n);
  const int64_t z = n / 2;
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t k = 0; k < n; ++k) m(j, k) = data[(z * n + j) * n + k];
  }
  return inr::WritePng(absl::StrCat(out, "/", name, ".png"), {m});
}

// Closed form on the [::2]^3 grid (Zheng et al. eq. 18, mode-n products) with `basis` on
// every axis; prints its row, writes closed_form_midz.png.
absl::Status FitVolumeClosedForm(const VolumeConfig& cfg, const inr::Tensor3& volume,
                                 const std::vector<double>& axis,
                                 const enc::ShiftedBasis1D& basis) {
  const int64_t n = cfg.n, half = n / 2;
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
  absl::StatusOr<RowMatrixXd> psi_train = basis.Encode(train_axis);
  absl::StatusOr<RowMatrixXd> psi_full = basis.Encode(axis);
  if (!psi_train.ok() || !psi_full.ok()) {
    return psi_train.ok() ? psi_full.status() : psi_train.status();
  }
  absl::StatusOr<inr::Tensor3> w =
      inr::FitSeparable3D({*psi_train, *psi_train, *psi_train}, train, 1e-6);
  if (!w.ok()) return w.status();
  absl::StatusOr<inr::Tensor3> recon =
      inr::PredictSeparable3D({*psi_full, *psi_full, *psi_full}, *w);
  if (!recon.ok()) return recon.status();
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
              static_cast<long long>(half * half * half), VolumePsnr(se, count), seconds);
  std::fflush(stdout);
  return WriteMidZSlice(cfg.out, "closed_form_midz", n, recon->data);
}

// Blended fit of random voxels (each with probability cfg.fraction), one z-slice at a time
// (the 2D fit of blended.h); prints its row, writes blended_midz.png.
absl::Status FitVolumeBlended(const VolumeConfig& cfg, const inr::Tensor3& volume,
                              const std::vector<double>& axis) {
  const int64_t n = cfg.n;
  const auto start = std::chrono::steady_clock::now();
  std::mt19937_64 rng(static_cast<uint64_t>(cfg.seed));
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  std::vector<char> sampled(volume.data.size(), 0);
  std::vector<double> recon(volume.data.size(), 0.0);
  // K = size / 4 per axis: a slice's random voxels (size^2 / 4 at 25%) then outnumber
  // the K^2 weights four to one; K = size / 2 would leave as many weights as samples,
  // which random positions leave ill-posed.
  const int64_t kb = std::max<int64_t>(2, n / 4);
  absl::StatusOr<enc::ShiftedBasis1D> blend_basis = enc::ShiftedBasis1D::Create(
      enc::ShiftedBasisKind::kGaussian, kb, 2.0 / static_cast<double>(kb), -1.0, 1.0);
  if (!blend_basis.ok()) return blend_basis.status();
  const inr::AxisEncoder encoder = [&](absl::Span<const double> c) {
    return blend_basis->Encode(c);
  };
  absl::StatusOr<RowMatrixXd> psi = blend_basis->Encode(axis);
  if (!psi.ok()) return psi.status();
  inr::BlendedFitOptions options;
  int64_t samples = 0;
  for (int64_t i = 0; i < n; ++i) {
    std::vector<double> px, py, values;
    for (int64_t j = 0; j < n; ++j) {
      for (int64_t k = 0; k < n; ++k) {
        if (uniform(rng) >= cfg.fraction) continue;
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
    if (!fit.ok()) return fit.status();
    absl::StatusOr<RowMatrixXd> slice = inr::PredictSeparable2D(*psi, *psi, fit->weights);
    if (!slice.ok()) return slice.status();
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
              static_cast<long long>(kb), options.lambda, 100 * cfg.fraction,
              static_cast<long long>(samples), count > 0 ? VolumePsnr(se, count) : INFINITY,
              seconds);
  return WriteMidZSlice(cfg.out, "blended_midz", n, recon);
}

}  // namespace

int RunVolume(const std::vector<std::string>& args) {
  const char* cmd = "volume";
  VolumeConfig cfg;
  if (std::optional<int> exit_code = ParseVolumeArgs(args, &cfg)) return *exit_code;
  if (absl::Status s = MakeDir(cfg.out); !s.ok()) return Fail(cmd, s);
  const int64_t n = cfg.n, kk = n / 2;
  const std::vector<double> axis = inr::GridAxis(n);
  const inr::Tensor3 volume = RadialVolume(n, axis);
  absl::StatusOr<enc::ShiftedBasis1D> basis = enc::ShiftedBasis1D::Create(
      enc::ShiftedBasisKind::kGaussian, kk, 2.0 / static_cast<double>(kk), -1.0, 1.0);
  if (!basis.ok()) return Fail(cmd, basis.status());
  if (absl::Status s = WriteMidZSlice(cfg.out, "truth_midz", n, volume.data); !s.ok()) {
    return Fail(cmd, s);
  }
  std::printf("Volume |sin(15 sqrt(r))| on a %lld^3 grid over [-1, 1]^3, Gaussian embedder "
              "K = %lld per axis\n\n| method | samples | test PSNR (dB) | time (s) |\n"
              "|---|---|---|---|\n",
              static_cast<long long>(n), static_cast<long long>(kk));
  std::fflush(stdout);
  if (absl::Status s = FitVolumeClosedForm(cfg, volume, axis, *basis); !s.ok()) {
    return Fail(cmd, s);
  }
  if (absl::Status s = FitVolumeBlended(cfg, volume, axis); !s.ok()) return Fail(cmd, s);
  std::printf("\nMid-z slices: %s/{truth,closed_form,blended}_midz.png\n", cfg.out.c_str());
  return 0;
}

}  // namespace tools
}  // namespace gpe
