#include "tools/gpe_tour.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <system_error>
#include <vector>

#include <Eigen/Dense>
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "encodings/coordinate/encoder.h"
#include "encodings/coordinate/fourier_features.h"
#include "encodings/coordinate/so2_bessel.h"
#include "gpe/gpe.h"
#include "inr/data.h"
#include "inr/mlp.h"
#include "measure/machine_limits.h"

namespace gpe {
namespace tools {

using measure::AvailableThreads;
using measure::FmaPeakGflops;

namespace {

namespace enc = gpe::encodings;
using inr::RowMatrixXd;

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// PSNR of values in [0, 1]: 10 log10(1 / MSE).
double Psnr(double mse) { return 10.0 * std::log10(1.0 / mse); }

}  // namespace

int RunMainMlpFits(const std::string& out_dir, bool quick) {
  const int64_t n = quick ? 32 : 128;
  const int64_t steps = quick ? 20 : 300;
  const inr::ImageMatrix image = inr::SyntheticImage(inr::SyntheticTask::kSpiral, n);
  const inr::Split split = inr::RegularGridSplit(n, n);
  const absl::StatusOr<RowMatrixXd> values = inr::ChannelsToValues({image});
  if (!values.ok()) {
    std::fprintf(stderr, "gpe: %s\n", std::string(values.status().message()).c_str());
    return 1;
  }
  // Pixel centres in [-1, 1]^2 (data.h's grid): the SO(2) encoding's radius is the
  // distance to the image centre, as in Lim et al.'s set-up.
  const RowMatrixXd coords = inr::GridCoordinates(n);

  struct Row {
    const char* name;
    std::unique_ptr<enc::CoordinateEncoder> encoder;  // nullptr: no encoding
    const RowMatrixXd* points;
    double learning_rate;
  };
  std::vector<Row> rows;
  rows.push_back({"none (x, y)", nullptr, &coords, 1e-3});
  // Appendix D.2: 16 frequencies alpha ~ N(0, c^2), c = 5 (gpe inr lim-table2's default).
  absl::StatusOr<enc::FourierFeatures> txt = enc::FourierFeatures::TxT(16, 5.0, 0);
  // Appendix D.2: m = 0, c ~ U[0, 25], k ~ U{1}, 16 terms (lim-table2's defaults).
  absl::StatusOr<enc::So2BesselEncoder> so2 = enc::So2BesselEncoder::Sample(
      16, 25.0, 2, 0, enc::So2BesselEncoder::Input::kCartesian, 0);
  if (!txt.ok() || !so2.ok()) {
    std::fprintf(stderr, "gpe: %s\n",
                 std::string((txt.ok() ? so2.status() : txt.status()).message()).c_str());
    return 1;
  }
  rows.push_back({"T x T Fourier (16 freq.)",
                  std::make_unique<enc::FourierFeatures>(*std::move(txt)), &coords, 1e-3});
  rows.push_back({"SO(2) Bessel (16 terms)",
                  std::make_unique<enc::So2BesselEncoder>(*std::move(so2)), &coords, 1e-3});

  std::printf("INR: Spiral image, %lldx%lld, the same [::2] training grid, an MLP (3 x 128, "
              "ReLU, %lld full-batch Adam steps) on each encoding\n\n",
              static_cast<long long>(n), static_cast<long long>(n),
              static_cast<long long>(steps));
  std::printf("| MLP input | features | train PSNR (dB) | test PSNR (dB) | fit time (s) | "
              "picture |\n|---|---|---|---|---|---|\n");
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  for (size_t r = 0; r < rows.size(); ++r) {
    inr::InrExperimentOptions options;
    options.hidden_width = 128;
    options.num_hidden_layers = 3;
    options.steps = steps;
    options.learning_rate = rows[r].learning_rate;
    options.seed = 0;
    options.predict_all = true;
    const auto start = std::chrono::steady_clock::now();
    const absl::StatusOr<inr::InrExperimentResult> result = inr::RunInrExperiment(
        rows[r].encoder.get(), *rows[r].points, *values, split, options);
    const double seconds = SecondsSince(start);
    if (!result.ok() || !result->test_mse.has_value() || !result->prediction.has_value()) {
      std::fprintf(stderr, "gpe: the MLP fit '%s' failed: %s\n", rows[r].name,
                   result.ok() ? "no test set" : std::string(result.status().message()).c_str());
      return 1;
    }
    inr::ImageMatrix recon(n, n);
    for (int64_t p = 0; p < n * n; ++p) recon(p / n, p % n) = (*result->prediction)(p, 0);
    const std::string png = absl::StrCat("spiral_mlp_", r, ".png");
    if (!inr::WritePng(out_dir + "/" + png, {recon}).ok()) {
      std::fprintf(stderr, "gpe: cannot write %s/%s\n", out_dir.c_str(), png.c_str());
      return 1;
    }
    const int64_t features = rows[r].encoder ? rows[r].encoder->output_dim() : 2;
    std::printf("| %s | %lld | %.2f | %.2f | %.2f | %s |\n", rows[r].name,
                static_cast<long long>(features), Psnr(result->train_mse),
                Psnr(*result->test_mse), seconds, png.c_str());
  }
  std::printf("\nThe closed form fits the complex encoding's linear layer exactly in "
              "milliseconds; the MLP rows are Lim et al.'s \"encoding + deep network\" "
              "set-up.\n");
  return 0;
}

namespace {

DLTensor Tensor(void* data, DLDataTypeCode code, int bits, std::vector<int64_t>* shape) {
  DLTensor t{};
  t.data = data;
  t.device.device_type = kDLCPU;
  t.device.device_id = 0;
  t.ndim = static_cast<int32_t>(shape->size());
  t.dtype.code = static_cast<uint8_t>(code);
  t.dtype.bits = static_cast<uint8_t>(bits);
  t.dtype.lanes = 1;
  t.shape = shape->data();
  t.strides = nullptr;  // compact row-major
  t.byte_offset = 0;
  return t;
}

// Owns a handle created through the C ABI.
template <class T, void (*Destroy)(T*)>
struct Handle {
  T* p = nullptr;
  ~Handle() {
    if (p != nullptr) Destroy(p);
  }
};

}  // namespace

int RunMainAttention(bool quick) {
  const int64_t heads = 8, d = 64, s = quick ? 256 : 2048;
  const int reps = quick ? 1 : 3;
  const int threads = AvailableThreads();
  const double peak = FmaPeakGflops(threads);

  std::mt19937_64 rng(7);
  std::normal_distribution<float> normal;
  std::vector<float> q(s * heads * d), k(q.size()), v(q.size()), o(q.size());
  for (float& x : q) x = normal(rng);
  for (float& x : k) x = normal(rng);
  for (float& x : v) x = normal(rng);
  std::vector<int64_t> shape = {1, s, heads, d};
  DLTensor tq = Tensor(q.data(), kDLFloat, 32, &shape), tk = Tensor(k.data(), kDLFloat, 32, &shape),
           tv = Tensor(v.data(), kDLFloat, 32, &shape), to = Tensor(o.data(), kDLFloat, 32, &shape);

  auto fail = [](const char* what) {
    std::fprintf(stderr, "gpe: %s: %s\n", what, gpe_last_error_message());
    return 1;
  };
  // ALiBi with Press et al.'s slopes for 8 heads.
  Handle<gpe_bias, gpe_bias_destroy> alibi;
  gpe_alibi_options alibi_options = GPE_ALIBI_OPTIONS_INIT;
  alibi_options.num_heads = heads;
  if (gpe_bias_create_alibi(&alibi_options, &alibi.p) != GPE_OK) return fail("ALiBi");
  // GRAPE-M with 8 learned (here random, non-commuting) rank-2 generators L = a b^T - b a^T
  // and frequencies omega (GRAPE, "Multiplicative GRAPE"): the general product path.
  const int64_t m = 8;
  std::vector<double> a(m * d), b(m * d), omega(m);
  std::normal_distribution<double> normal64;
  for (double& x : a) x = normal64(rng) / std::sqrt(static_cast<double>(d));
  for (double& x : b) x = normal64(rng) / std::sqrt(static_cast<double>(d));
  for (int64_t i = 0; i < m; ++i) omega[i] = std::pow(10000.0, -static_cast<double>(i) / m);
  Handle<gpe_grape_m, gpe_grape_m_destroy> grape;
  gpe_grape_m_options grape_options = GPE_GRAPE_M_OPTIONS_INIT;
  grape_options.dim = d;
  grape_options.num_generators = m;
  grape_options.a = a.data();
  grape_options.b = b.data();
  grape_options.omega = omega.data();
  if (gpe_grape_m_create(&grape_options, &grape.p) != GPE_OK) return fail("GRAPE-M");

  struct Variant {
    const char* name;
    gpe_attention_options options;
  };
  gpe_attention_options base = GPE_ATTENTION_OPTIONS_INIT;
  base.causal = 1;
  base.num_threads = threads;
  std::vector<Variant> variants = {{"no positional encoding", base},
                                   {"RoPE (d = 64, base 10000)", base},
                                   {"ALiBi (Press et al.'s slopes)", base},
                                   {"GRAPE-M (8 learned generators)", base}};
  variants[1].options.rope_dim = d;
  variants[2].options.bias = alibi.p;
  variants[3].options.grape_m = grape.p;

  // Causal, queries and keys both 0..s-1: s (s + 1) / 2 allowed pairs per head; 4 d flops
  // per pair (q.k and p.v, 2 flops per multiply-add).
  const double flops = 4.0 * d * heads * (static_cast<double>(s) * (s + 1) / 2);
  std::printf("Attention through the C ABI (gpe_attention_forward): float32, causal, batch 1, "
              "%lld heads, seq %lld, head_dim %lld, %d threads; FMA peak %.0f GFLOP/s "
              "measured now\n\n",
              static_cast<long long>(heads), static_cast<long long>(s),
              static_cast<long long>(d), threads, peak);
  std::printf("| encoding (inside the kernel) | time (ms) | GFLOP/s | of FMA peak | vs no "
              "encoding |\n|---|---|---|---|---|\n");
  double plain = 0;
  for (const Variant& variant : variants) {
    double best = 1e300;
    for (int r = 0; r < reps + 1; ++r) {  // the first run warms caches and page tables
      const auto start = std::chrono::steady_clock::now();
      if (gpe_attention_forward(&variant.options, &tq, &tk, &tv, &to, nullptr) != GPE_OK) {
        return fail(variant.name);
      }
      if (r > 0 || reps == 1) best = std::min(best, SecondsSince(start));
    }
    for (float x : o) {
      if (!std::isfinite(x)) {
        std::fprintf(stderr, "gpe: %s gave a non-finite output\n", variant.name);
        return 1;
      }
    }
    if (plain == 0) plain = best;
    std::printf("| %s | %.2f | %.1f | %.2f | %+.1f%% |\n", variant.name, best * 1e3,
                flops / best * 1e-9, flops / best * 1e-9 / peak, (best / plain - 1) * 100);
  }
  std::printf("\nFull comparison with PyTorch: ./bazelw run //tools:gpe -- bench\n");
  return 0;
}

}  // namespace tools
}  // namespace gpe
