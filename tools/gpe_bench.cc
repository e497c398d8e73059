#include "tools/gpe_bench.h"

#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <system_error>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/types/span.h"
#include "encodings/coordinate/shifted_basis.h"
#include "encodings/sequence/rope.h"
#include "inr/blended.h"
#include "inr/closed_form.h"
#include "inr/data.h"
#include "measure/machine_limits.h"
#include "measure/timing.h"
#include "tools/bench_attention.h"
#include "tools/bench_harness.h"

namespace gpe {
namespace tools {
namespace {

namespace enc = gpe::encodings;
namespace seq = gpe::encodings::sequence;
using measure::BestSeconds;

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

// RoPE applied in place to q-shaped float32 tensors (seq x heads x head_dim), as a
// fraction of the triad.
absl::Status BenchRopeInPlace(bool quick, int threads, int reps, double triad) {
  const int64_t s = quick ? 256 : 16384, h = quick ? 8 : 32, d = 128;
  seq::RopeOptions o;
  o.head_dim = d;
  o.rotary_dim = d;
  o.num_threads = threads;
  absl::StatusOr<seq::RopeFrequencies> freqs = seq::DefaultRopeFrequencies(d, 10000.0);
  absl::StatusOr<seq::Rope> rope =
      freqs.ok() ? seq::Rope::Create(o, *freqs) : absl::StatusOr<seq::Rope>(freqs.status());
  if (!rope.ok()) return rope.status();
  const seq::RopeTensor tensor = seq::RopeTensor::Contiguous(seq::RopeLayout::kBSHD, 1, s, h, d);
  // 2 MiB pages placed on the NUMA nodes as the triad's arrays are (FillLikeTriad).
  measure::LargeFloats x(s * h * d);
  measure::FillLikeTriad(&x, 0.5f, threads);
  const std::vector<int64_t> offsets = {0};
  absl::StatusOr<seq::RopeTable<float>> table = rope->MakeTable<float>(tensor, {{}, offsets});
  if (!table.ok()) return table.status();
  absl::StatusOr<double> timed = BestSecondsOk(
      reps, [&] { return rope->Apply<float>(*table, tensor, x.data(), x.data()); });
  if (!timed.ok()) return timed.status();  // a failing call is not timed as a fast one
  const double sec = *timed;
  const double gbs = 2.0 * static_cast<double>(x.size()) * sizeof(float) / sec * 1e-9;
  // Against the larger of the run's first triad and one measured right after (as the
  // attention rows' TriadBeside): a host whose bandwidth dipped at the start flattered
  // this row.
  const double beside = std::max(
      triad, measure::TriadBandwidthGBs(threads, quick ? (int64_t{16} << 20) : (int64_t{256} << 20)));
  std::printf("| RoPE in place, %lld x %lld x %lld float32 | %.1f GB/s | | | %.2f of triad |\n",
              static_cast<long long>(s), static_cast<long long>(h), static_cast<long long>(d),
              gbs, gbs / beside);
  return absl::OkStatus();
}

// NumPy's closed form of the same fit (tools/peers/inr_closed_form.py) on `threads`
// threads (NumpyPeerCommand): its one-line JSON ("seconds", "psnr_db"), "" when the
// interpreter or NumPy is missing.
std::string NumpyClosedForm(const inr::ImageMatrix& image, int64_t n, int64_t k, double sigma,
                            double lambda, int reps, int threads) {
  // The interpreter and the peers' directory the attention peers use.
  const AttentionBenchOptions where = AttentionBenchDefaults("");
  // A file of its own (mkstemp: no other run's or user's file read instead), in the temp
  // directory (TMPDIR where it exists, else /tmp), removed after the peer ran.
  std::error_code ec;
  std::filesystem::path dir = std::filesystem::temp_directory_path(ec);
  if (ec) dir = "/tmp";
  std::string name = (dir / "gpe_bench_image.XXXXXX").string();
  const int fd = mkstemp(name.data());
  if (fd < 0) return "";
  const size_t bytes = sizeof(double) * static_cast<size_t>(image.size());
  const bool written = write(fd, image.data(), bytes) == static_cast<ssize_t>(bytes);
  close(fd);
  std::string out;
  if (written) {
    out = Capture(NumpyPeerCommand(
        where.python, where.peers_dir + "/inr_closed_form.py",
        {name, absl::StrCat(n), absl::StrCat(k), absl::StrFormat("%.17g", sigma),
         absl::StrFormat("%.17g", lambda), absl::StrCat(reps)},
        threads));
  }
  std::remove(name.c_str());
  return out;
}

// Zheng et al.'s closed form: n x n image, K Gaussian shifts per axis, beside NumPy on the
// same thread count. GroupPE forms the image products in float32
// (float32_image_products), NumPy all in float64: the row says so on each side.
// Every step's status is returned (a failure exits 1 with its message, not an abort).
absl::Status BenchInrClosedForm(bool quick, bool peers, int reps, int threads) {
  const int64_t n = quick ? 64 : 512, k = quick ? 32 : 256;
  const double sigma = 1.0 / static_cast<double>(k), lambda = 1e-6;
  inr::ImageMatrix image = inr::SyntheticImage(inr::SyntheticTask::kSpiral, n);
  std::vector<double> coords(n);
  for (int64_t i = 0; i < n; ++i) coords[i] = (i + 0.5) / static_cast<double>(n);
  absl::StatusOr<enc::ShiftedBasis1D> basis =
      enc::ShiftedBasis1D::Create(enc::ShiftedBasisKind::kGaussian, k, sigma, 0.0, 1.0);
  if (!basis.ok()) return basis.status();
  inr::SeparableFitOptions options;
  options.lambda = lambda;
  options.float32_image_products = true;
  options.num_threads = threads;  // the peer's count (NumPy's BLAS threads)
  const std::vector<inr::RowMatrixXd> channels = {image};
  std::vector<inr::RowMatrixXd> w;
  absl::StatusOr<double> timed = BestSecondsOk(reps, [&]() -> absl::Status {
    absl::StatusOr<inr::RowMatrixXd> psi = basis->Encode(coords);
    if (!psi.ok()) return psi.status();
    absl::StatusOr<std::vector<inr::RowMatrixXd>> fit =
        inr::FitSeparable2D(*psi, *psi, channels, options);
    if (!fit.ok()) return fit.status();
    w = *std::move(fit);
    return absl::OkStatus();
  });
  if (!timed.ok()) return timed.status();
  const double sec = *timed;
  absl::StatusOr<inr::RowMatrixXd> psi = basis->Encode(coords);
  if (!psi.ok()) return psi.status();
  absl::StatusOr<inr::RowMatrixXd> recon = inr::PredictSeparable2D(*psi, *psi, w[0]);
  if (!recon.ok()) return recon.status();
  absl::StatusOr<double> psnr_or = inr::Psnr(*recon, image);
  if (!psnr_or.ok()) return psnr_or.status();
  const double psnr = *psnr_or;
  std::string peer = "not run", ratio = "";
  if (peers) {
    const std::string json = NumpyClosedForm(image, n, k, sigma, lambda, reps, threads);
    const double peer_sec = JsonNumber(json, "seconds"), peer_psnr = JsonNumber(json, "psnr_db");
    if (std::isfinite(peer_sec)) {
      peer = absl::StrFormat("NumPy float64, %d thread%s: %.2f ms, %.2f dB", threads,
                             threads == 1 ? "" : "s", peer_sec * 1e3, peer_psnr);
      ratio = absl::StrFormat("%.1fx faster, PSNR %+.3f dB", peer_sec / sec, psnr - peer_psnr);
    } else {
      peer = "NumPy unavailable (run ./bazelw once to make .venv)";
    }
  }
  std::printf("| INR closed form, %lldx%lld, K = %lld Gaussian | %.2f ms, %.2f dB "
              "(float32 image products) | %s | %s | |\n",
              static_cast<long long>(n), static_cast<long long>(n), static_cast<long long>(k),
              sec * 1e3, psnr, peer.c_str(), ratio.c_str());
  return absl::OkStatus();
}

// Zheng et al.'s blended fit of 25% random pixels on a virtual grid.
absl::Status BenchInrBlended(bool quick) {
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
  absl::StatusOr<enc::ShiftedBasis1D> basis = enc::ShiftedBasis1D::Create(
      enc::ShiftedBasisKind::kGaussian, g, 1.0 / g, 0.0, 1.0 + 1.0 / g);
  if (!basis.ok()) return basis.status();
  const inr::AxisEncoder e = [&](absl::Span<const double> c) { return basis->Encode(c); };
  inr::BlendedFitOptions options;
  options.lambda = 1e-4;
  options.tolerance = 1e-4;
  int iterations = 0;
  absl::StatusOr<double> timed = BestSecondsOk(quick ? 1 : 2, [&]() -> absl::Status {
    absl::StatusOr<inr::BlendedFit> fit = inr::FitBlended2D(e, e, grid, grid, px, py, vals, options);
    if (!fit.ok()) return fit.status();
    iterations = fit->iterations;
    return absl::OkStatus();
  });
  if (!timed.ok()) return timed.status();
  std::printf("| INR blended fit, 25%% of %lldx%lld, %lld^2 virtual grid | %.0f ms, %d iterations | | | |\n",
              static_cast<long long>(n), static_cast<long long>(n), static_cast<long long>(g),
              *timed * 1e3, iterations);
  return absl::OkStatus();
}

}  // namespace

int RunBench(bool quick, bool peers, const std::string& out_dir) {
  const int threads = measure::AvailableThreads();
  const int reps = quick ? 2 : 5;
  const int nodes = measure::NumaNodeCount();
  std::printf("gpe bench%s: %d threads, widest ISA %s, %d NUMA node%s\n\n",
              quick ? " --quick" : "", threads, measure::WidestVectorIsa().c_str(), nodes,
              nodes == 1 ? "" : "s");
  const double peak = measure::FmaPeakGflops(threads);
  const double triad =
      measure::TriadBandwidthGBs(threads, quick ? (int64_t{16} << 20) : (int64_t{256} << 20));
  std::printf("| workload | GroupPE | peer | GroupPE / peer | of machine limit | extra memory |\n");
  std::printf("|---|---|---|---|---|---|\n");
  std::printf("| float32 FMA peak | %.1f GFLOP/s | | | 1.00 |\n", peak);
  std::printf("| triad bandwidth | %.1f GB/s (%d NUMA node%s) | | | 1.00 |\n", triad, nodes,
              nodes == 1 ? "" : "s");

  absl::Status first = BenchRopeInPlace(quick, threads, reps, triad);
  if (first.ok()) first = BenchInrClosedForm(quick, peers, reps, threads);
  if (first.ok()) first = BenchInrBlended(quick);
  if (!first.ok()) {
    std::fprintf(stderr, "gpe bench: %s\n", std::string(first.message()).c_str());
    return 1;
  }

  // Attention and RoPE against PyTorch, then the sweeps and plots (tools/bench_attention.h).
  AttentionBenchOptions attention = AttentionBenchDefaults(out_dir);
  attention.quick = quick;
  attention.peers = peers;
  attention.threads = threads;
  attention.fma_peak_gflops = peak;
  attention.triad_gbs = triad;
  if (const absl::Status s = RunAttentionBench(attention); !s.ok()) {
    std::fprintf(stderr, "gpe bench: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  return 0;
}

}  // namespace tools
}  // namespace gpe
