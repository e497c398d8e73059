// CpuForward throughput as a fraction of the machine's float32 FMA peak, measured by the
// same binary (measure/machine_limits.h), and its extra memory. Flops: 4 * d per allowed
// (query, key) pair and head (q.k and p.v, 2 flops per multiply-add); causal counts the
// allowed pairs only, s (s + 1) / 2 per head.
//
// Arguments: batch, heads, seq, head_dim, causal, encoding, threads, where encoding is
// 0 none, 1 RoPE (half-split, base 10000), 2 ALiBi (causal form when causal, else
// symmetric), 3 FoX (per-token gates; meant for causal attention), 4 GRAPE-M
// commuting planes (RoPE's thetas as learned frequencies), 5 softcap, 6 sinks, 7 GRAPE-M's
// product of 8 rank-2 generators.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <memory>
#include <random>
#include <vector>

#include "attention/cpu/cpu_attention.h"
#include "attention/cpu/kernels.h"
#include "attention/cpu/kernels_decode.h"
#include "attention/cpu/split_bf16.h"
#include "attention/descriptor.h"
#include "benchmark/benchmark.h"
#include "hwy/aligned_allocator.h"
#include "encodings/sequence/algebraic.h"
#include "encodings/sequence/bias.h"
#include "encodings/sequence/grape_m.h"
#include "encodings/sequence/relative.h"
#include "encodings/sequence/rope.h"
#include "measure/machine_limits.h"

namespace gpe {
namespace attention {
namespace {

using encodings::sequence::AlibiBias;
using encodings::sequence::AlibiForm;
using encodings::sequence::FoxBias;
using encodings::sequence::Rope;
using encodings::sequence::RopeOptions;

double PeakGflops(int threads) {
  static std::map<int, double>* cache = new std::map<int, double>();
  auto it = cache->find(threads);
  if (it == cache->end()) it = cache->emplace(threads, measure::FmaPeakGflops(threads)).first;
  return it->second;
}

// The bf16 dot-product peak (vdpbf16ps) on `threads` threads, 0 without the instruction.
double Bf16PeakGflops(int threads) {
  static std::map<int, double>* cache = new std::map<int, double>();
  auto it = cache->find(threads);
  if (it == cache->end()) it = cache->emplace(threads, measure::Bf16DotPeakGflops(threads)).first;
  return it->second;
}

// Self-attention in bshd layout: b sequences of s tokens, h query and key/value heads of d.
AttentionArgs SelfAttention(int64_t b, int64_t s, int64_t h, int64_t d, bool causal) {
  AttentionArgs a;
  a.batch = b;
  a.seq_len_q = a.seq_len_k = s;
  a.num_q_heads = a.num_kv_heads = h;
  a.head_dim = d;
  a.q = a.o = a.k = a.v = ContiguousStrides(Layout::kBSHD, s, h, d);
  a.causal = causal;
  return a;
}

// N(0, 1) floats from one seeded stream: the order of the draws is part of each input.
class NormalStream {
 public:
  explicit NormalStream(uint64_t seed) : rng_(seed) {}
  float operator()() { return n_(rng_); }
  // Fills the vectors in turn.
  void Fill(std::initializer_list<std::vector<float>*> vectors) {
    for (std::vector<float>* v : vectors) {
      for (float& x : *v) x = (*this)();
    }
  }

 private:
  std::mt19937_64 rng_;
  std::normal_distribution<float> n_{0.0f, 1.0f};
};

// RoPE options rotating the whole head of d (rotary_dim = head_dim).
RopeOptions WholeHeadRope(int64_t d) {
  RopeOptions ro;
  ro.head_dim = d;
  ro.rotary_dim = d;
  return ro;
}

// A Rope with `options` and the default frequencies (base 10000).
absl::StatusOr<Rope> CreateRope(const RopeOptions& options) {
  return Rope::Create(options,
                      *encodings::sequence::DefaultRopeFrequencies(options.head_dim, 10000.0));
}

// (query, key) pairs a head of one sequence of s tokens computes.
double AllowedPairs(int64_t s, bool causal) {
  return causal ? 0.5 * double(s) * double(s + 1) : double(s) * double(s);
}

// The timed loop: call() (an absl::Status) once per iteration, `out` kept alive. False,
// the benchmark skipped with the error, when a call fails.
template <class Call>
bool TimeCalls(benchmark::State& state, const void* out, Call call) {
  for (auto _ : state) {
    absl::Status st = call();
    if (!st.ok()) {
      state.SkipWithError(st.ToString().c_str());
      return false;
    }
    benchmark::DoNotOptimize(out);
  }
  return true;
}

// GFLOP/s, the FMA peak on `threads` threads and the fraction of it (counter `fraction`).
void SetFlopCounters(benchmark::State& state, double flops, int threads,
                     const char* fraction = "frac_of_peak") {
  const double peak = PeakGflops(threads);
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["peak_GFLOP/s"] = peak;
  state.counters[fraction] =
      benchmark::Counter(flops * 1e-9 / peak, benchmark::Counter::kIsIterationInvariantRate);
}

// SetFlopCounters' with the fp32 peak's fraction, plus the fraction of the bf16
// dot-product peak where the CPU has the instruction: the bf16 rows' own limit.
void SetBf16FlopCounters(benchmark::State& state, double flops, int threads) {
  SetFlopCounters(state, flops, threads, "frac_of_fp32_peak");
  const double bf16 = Bf16PeakGflops(threads);
  if (bf16 > 0) {
    state.counters["frac_of_bf16_peak"] =
        benchmark::Counter(flops * 1e-9 / bf16, benchmark::Counter::kIsIterationInvariantRate);
  }
}

void BM_CpuForward(benchmark::State& state) {
  const int64_t b = state.range(0), h = state.range(1), s = state.range(2), d = state.range(3);
  const bool causal = state.range(4) != 0;
  const int encoding = static_cast<int>(state.range(5));
  const int threads = static_cast<int>(state.range(6));
  AttentionArgs a = SelfAttention(b, s, h, d, causal);
  NormalStream n(1);
  const size_t total = static_cast<size_t>(b * s * h * d);
  std::vector<float> q(total), k(total), v(total), o(total);
  n.Fill({&q, &k, &v});
  auto rope = CreateRope(WholeHeadRope(d));
  std::unique_ptr<RopeRowTransform> rope_tr;
  std::vector<double> planes_theta;
  std::vector<encodings::sequence::CoordinatePlane> planes;
  for (int64_t i = 0; i < d / 2; ++i) {
    planes.push_back({i, i + d / 2, rope->thetas()[i]});
  }
  auto gm = encodings::sequence::GrapeMCommutingPlanes::Create(d, planes);
  std::unique_ptr<GrapeMRowTransform<encodings::sequence::GrapeMCommutingPlanes>> gm_tr;
  // ALiBi's causal form under a causal mask, its symmetric form without one (the causal
  // form continued past the diagonal grows without bound: no model uses it unmasked).
  auto alibi = AlibiBias::CreateStandard(h, causal ? AlibiForm::kCausal : AlibiForm::kSymmetric);
  std::vector<double> gates(static_cast<size_t>(s * h));
  for (double& x : gates) x = 2.0 + n();
  std::vector<FoxBias> fox;
  if (encoding == 1) {
    rope_tr = std::make_unique<RopeRowTransform>(*rope);
    a.q_transform = a.k_transform = rope_tr.get();
  } else if (encoding == 2) {
    a.biases = {&*alibi};
  } else if (encoding == 3) {
    for (int64_t i = 0; i < b; ++i) fox.push_back(*FoxBias::Create(gates, s, h));
    for (const FoxBias& f : fox) a.biases.push_back(&f);
  } else if (encoding == 4) {
    gm_tr = std::make_unique<GrapeMRowTransform<encodings::sequence::GrapeMCommutingPlanes>>(*gm);
    a.q_transform = a.k_transform = gm_tr.get();
  }
  // 7: GRAPE-M's general product of 8 learned (here random, non-commuting) rank-2
  // generators (GRAPE, "Multiplicative GRAPE"), as `gpe`'s tour runs it.
  std::unique_ptr<encodings::sequence::GrapeMProduct> product;
  std::unique_ptr<GrapeMRowTransform<encodings::sequence::GrapeMProduct>> product_tr;
  if (encoding == 7) {
    std::vector<encodings::sequence::Rank2Generator> gens;
    std::mt19937_64 rng(8);
    std::normal_distribution<double> normal(0.0, 1.0 / std::sqrt(static_cast<double>(d)));
    for (int64_t g = 0; g < 8; ++g) {
      std::vector<double> u(static_cast<size_t>(d)), w(static_cast<size_t>(d));
      for (double& x : u) x = normal(rng);
      for (double& x : w) x = normal(rng);
      gens.push_back({u, w, std::pow(10000.0, -static_cast<double>(g) / 8.0)});
    }
    product = std::make_unique<encodings::sequence::GrapeMProduct>(
        *encodings::sequence::GrapeMProduct::Create(gens));
    product_tr =
        std::make_unique<GrapeMRowTransform<encodings::sequence::GrapeMProduct>>(*product);
    a.q_transform = a.k_transform = product_tr.get();
  }
  // 8: an algebraic sequence encoding (Kogkalidis et al.: rho(p) = exp(p S), S a learned
  // d x d skew matrix, here random): a dense rotation of every row.
  std::unique_ptr<encodings::sequence::AlgebraicSequence> algebraic;
  std::unique_ptr<AlgebraicRowTransform> algebraic_tr;
  if (encoding == 8) {
    std::mt19937_64 rng(9);
    std::normal_distribution<double> normal(0.0, 0.05);
    Eigen::MatrixXd skew(d, d);
    for (int64_t i = 0; i < d * d; ++i) skew.data()[i] = normal(rng);
    skew = (skew - skew.transpose()).eval();
    algebraic = std::make_unique<encodings::sequence::AlgebraicSequence>(
        *encodings::sequence::AlgebraicSequence::Create(skew));
    algebraic_tr = std::make_unique<AlgebraicRowTransform>(*algebraic);
    a.q_transform = a.k_transform = algebraic_tr.get();
  }
  // 5: Gemma 2's logit softcap (50, its attention value); 6: a sink logit per head.
  const std::vector<float> sinks(static_cast<size_t>(h), 0.5f);
  if (encoding == 5) a.softcap = 50.0;
  if (encoding == 6) a.sinks = sinks;
  CpuAttentionOptions opt;
  opt.num_threads = threads;
  if (!TimeCalls(state, o.data(), [&] {
        return CpuForward(a, q.data(), k.data(), v.data(), o.data(), nullptr, opt);
      })) {
    return;
  }
  SetFlopCounters(state, 4.0 * double(d) * AllowedPairs(s, causal) * double(b * h), threads);
  state.counters["extra_MiB"] = double(*CpuForwardWorkspaceBytes(a, opt)) / (1 << 20);
  state.SetLabel(CpuAttentionIsa());
}

// float32 with both products on AMX tiles as sums of bf16 products (Float32Arithmetic:
// split 6 or 3 terms; 0: float32 FMAs, the row to compare with), b1 h16 s4096 d128, with
// and without RoPE. Counters: the float32 rate and its fraction of the FMA peak, and the
// tiles' share, the bf16 products (terms x the float32 flops) as a fraction of the AMX
// bf16 peak measured in this process. Split rows skip where CpuAmxUsable() is false
// (there the modes are float32 FMAs exactly).
void BM_CpuForwardSplit(benchmark::State& state) {
  const bool causal = state.range(0) != 0;
  const int terms = static_cast<int>(state.range(1));
  const int threads = static_cast<int>(state.range(2));
  if (terms != 0 && !CpuAmxUsable()) {
    state.SkipWithError("no usable AMX tiles on this CPU");
    return;
  }
  const int64_t s = 4096, h = 16, d = 128;
  AttentionArgs a = SelfAttention(1, s, h, d, causal);
  NormalStream n(1);
  const size_t total = static_cast<size_t>(s * h * d);
  std::vector<float> q(total), k(total), v(total), o(total);
  n.Fill({&q, &k, &v});
  auto rope = CreateRope(WholeHeadRope(d));
  RopeRowTransform rope_tr(*rope);
  if (state.range(3) != 0) a.q_transform = a.k_transform = &rope_tr;
  CpuAttentionOptions opt;
  opt.num_threads = threads;
  using F = CpuAttentionOptions::Float32Arithmetic;
  opt.float32_arithmetic = terms == 6 ? F::kSplitBf16x6 : terms == 3 ? F::kSplitBf16x3 : F::kExact;
  if (!TimeCalls(state, o.data(), [&] {
        return CpuForward(a, q.data(), k.data(), v.data(), o.data(), nullptr, opt);
      })) {
    return;
  }
  const double flops = 4.0 * double(d) * AllowedPairs(s, causal) * double(h);
  SetFlopCounters(state, flops, threads);
  if (terms != 0) {
    const double amx = measure::AmxBf16PeakGflops(threads);
    if (amx > 0) {
      state.counters["tiles_frac_of_amx_peak"] = benchmark::Counter(
          terms * flops * 1e-9 / amx, benchmark::Counter::kIsIterationInvariantRate);
    }
  }
}

// The split modes' elementwise part per key block: a 96 x 128 probability tile into the
// concatenated bf16 parts the P V product takes (split_bf16.h), one thread; counter
// ps_per_score. Beside it, the tiles' products per score: terms x 2 x 128 (head_dim)
// bf16 flops for P V, as many for the scores.
void BM_SplitRows(benchmark::State& state) {
  const int64_t rows = 96, n = 128;
  const int terms = static_cast<int>(state.range(0));
  const cpu::SplitTerms t = cpu::SplitTermsOf(terms);
  std::vector<float> p(static_cast<size_t>(rows * n));
  NormalStream rnd(3);
  rnd.Fill({&p});
  for (float& x : p) x = std::fabs(x) / 4.0f;  // probabilities' range
  std::vector<uint16_t> out(static_cast<size_t>(rows * terms * n));
  for (auto _ : state) {
    cpu::SplitRowsBf16(p.data(), n, rows, n, n, t, /*left=*/true, out.data(), terms * n);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.counters["ps_per_score"] = benchmark::Counter(
      double(rows * n) * 1e-12, benchmark::Counter::kIsIterationInvariantRate |
                                    benchmark::Counter::kInvert);
}

BENCHMARK(BM_SplitRows)->ArgName("terms")->Arg(6)->Arg(3);

BENCHMARK(BM_CpuForwardSplit)
    ->ArgNames({"causal", "terms", "threads", "rope"})
    ->ArgsProduct({{0, 1}, {0, 6, 3}, {2}, {0, 1}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MeasureProcessCPUTime();

// The tile sizes (CpuAttentionOptions::block_q, block_k) at b1 h16 s4096 d128, 2 threads,
// float32 (bf16 0) or bfloat16 on the dot products (bf16 1): the data for choosing the
// defaults per CPU (MakePlan: 96 x 128). Rows: bq, bk, causal, bf16.
void BM_CpuForwardBlocks(benchmark::State& state) {
  const int64_t s = 4096, h = 16, d = 128;
  const bool causal = state.range(2) != 0, bf16 = state.range(3) != 0;
  const AttentionArgs a = SelfAttention(1, s, h, d, causal);
  CpuAttentionOptions opt;
  opt.num_threads = 2;
  opt.block_q = state.range(0);
  opt.block_k = state.range(1);
  opt.bf16_arithmetic = CpuAttentionOptions::Bf16Arithmetic::kDotProducts;
  NormalStream n(6);
  const size_t total = static_cast<size_t>(s * h * d);
  std::vector<float> q(total), k(total), v(total), o(total);
  n.Fill({&q, &k, &v});
  const double flops = 4.0 * double(d) * AllowedPairs(s, causal) * double(h);
  if (!bf16) {
    if (!TimeCalls(state, o.data(), [&] {
          return CpuForward(a, q.data(), k.data(), v.data(), o.data(), nullptr, opt);
        })) {
      return;
    }
    SetFlopCounters(state, flops, 2);
    return;
  }
  std::vector<encodings::sequence::BFloat16> q16(total), k16(total), v16(total), o16(total);
  for (size_t i = 0; i < total; ++i) {
    q16[i] = encodings::sequence::ToBFloat16(q[i]);
    k16[i] = encodings::sequence::ToBFloat16(k[i]);
    v16[i] = encodings::sequence::ToBFloat16(v[i]);
  }
  if (!TimeCalls(state, o16.data(), [&] {
        return CpuForward(a, q16.data(), k16.data(), v16.data(), o16.data(), nullptr, opt);
      })) {
    return;
  }
  SetBf16FlopCounters(state, flops, 2);
}

BENCHMARK(BM_CpuForwardBlocks)
    ->ArgNames({"bq", "bk", "causal", "bf16"})
    ->ArgsProduct({{48, 96, 192}, {64, 128, 256}, {0, 1}, {0, 1}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MeasureProcessCPUTime();

// Backward (given o and lse) at the same shapes: flops counted as 2.5x the forward's
// (five products of the same size instead of two), as FlashAttention-2 counts them.
void BM_CpuBackward(benchmark::State& state) {
  const int64_t s = state.range(0), h = 16, d = 128;
  const bool causal = state.range(1) != 0;
  const int threads = static_cast<int>(state.range(2));
  const AttentionArgs a = SelfAttention(1, s, h, d, causal);
  NormalStream n(2);
  const size_t total = static_cast<size_t>(s * h * d);
  std::vector<float> q(total), k(total), v(total), o(total), g(total), dq(total), dk(total),
      dv(total), lse(static_cast<size_t>(s * h));
  n.Fill({&q, &k, &v, &g});
  CpuAttentionOptions opt;
  opt.num_threads = threads;
  if (!CpuForward(a, q.data(), k.data(), v.data(), o.data(), lse.data(), opt).ok()) {
    state.SkipWithError("forward failed");
    return;
  }
  if (!TimeCalls(state, dq.data(), [&] {
        return CpuBackward(a, q.data(), k.data(), v.data(), o.data(), lse.data(), g.data(),
                           dq.data(), dk.data(), dv.data(), nullptr, opt);
      })) {
    return;
  }
  SetFlopCounters(state, 2.5 * 4.0 * double(d) * AllowedPairs(s, causal) * double(h), threads);
  state.SetLabel(CpuAttentionIsa());
}

BENCHMARK(BM_CpuBackward)
    ->ArgNames({"s", "causal", "threads"})
    ->ArgsProduct({{2048, 4096}, {0, 1}, {2}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MeasureProcessCPUTime();

// The bfloat16 benchmarks' problem: b1 h16 s d128 self-attention from the arguments
// (s, causal, dot, threads, enc: dot 1 uses the CPU's bf16 dot products where it has
// them, 2 the forward's products on AMX tiles (skipped where CpuAmxUsable() is false), 0
// widens to float32; enc as BM_CpuForward's: 0 none, 1 RoPE inside the kernel,
// half-split, base 10000, 2 ALiBi (causal form when causal, else symmetric), 3 FoX,
// 5 softcap 50), random bf16 q, k, v and dL/do, and the options.
struct Bf16Problem {
  static constexpr int64_t kHeads = 16, kDim = 128;
  int64_t s;
  bool causal;
  int threads;
  AttentionArgs a;
  Rope rope;
  RopeRowTransform rope_tr;
  std::vector<encodings::sequence::BFloat16> q, k, v, g;
  CpuAttentionOptions opt;
  std::unique_ptr<AlibiBias> alibi;
  std::unique_ptr<FoxBias> fox;

  explicit Bf16Problem(const benchmark::State& state, uint64_t seed)
      : s(state.range(0)),
        causal(state.range(1) != 0),
        threads(static_cast<int>(state.range(3))),
        a(SelfAttention(1, s, kHeads, kDim, causal)),
        rope(*CreateRope(WholeHeadRope(kDim))),
        rope_tr(rope) {
    const int64_t enc = state.range(4);
    if (enc == 1) a.q_transform = a.k_transform = &rope_tr;
    NormalStream n(seed);
    if (enc == 2) {
      alibi = std::make_unique<AlibiBias>(*AlibiBias::CreateStandard(
          kHeads, causal ? AlibiForm::kCausal : AlibiForm::kSymmetric));
      a.biases = {alibi.get()};
    } else if (enc == 3) {
      std::vector<double> gates(static_cast<size_t>(s * kHeads));
      for (double& x : gates) x = 2.0 + n();
      fox = std::make_unique<FoxBias>(*FoxBias::Create(gates, s, kHeads));
      a.biases = {fox.get()};
    } else if (enc == 5) {
      a.softcap = 50.0;
    }
    for (auto* t : {&q, &k, &v, &g}) {
      t->resize(static_cast<size_t>(s * kHeads * kDim));
      for (auto& x : *t) x = encodings::sequence::ToBFloat16(n());
    }
    opt.num_threads = threads;
    using A = CpuAttentionOptions::Bf16Arithmetic;
    opt.bf16_arithmetic = state.range(2) == 2 ? A::kAmxTiles
                          : state.range(2) != 0 ? A::kDotProducts
                                                : A::kWiden;
  }
  double ForwardFlops() const { return 4.0 * double(kDim) * AllowedPairs(s, causal) * double(kHeads); }
};

// bfloat16 inputs and outputs (float accumulation) at the README's benchmark shape (b1
// h16 s4096 d128), arguments as Bf16Problem's.
void BM_CpuForwardBf16(benchmark::State& state) {
  if (state.range(2) == 2 && !CpuAmxUsable()) {
    state.SkipWithError("no usable AMX tiles on this CPU");
    return;
  }
  Bf16Problem p(state, 4);
  std::vector<encodings::sequence::BFloat16> o(p.q.size());
  if (!TimeCalls(state, o.data(), [&] {
        return CpuForward(p.a, p.q.data(), p.k.data(), p.v.data(), o.data(), nullptr, p.opt);
      })) {
    return;
  }
  SetBf16FlopCounters(state, p.ForwardFlops(), p.threads);
}

BENCHMARK(BM_CpuForwardBf16)
    ->ArgNames({"s", "causal", "dot", "threads", "enc"})
    ->ArgsProduct({{4096}, {0, 1}, {1, 0}, {2}, {0, 1}})
    ->ArgsProduct({{4096}, {0, 1}, {1}, {2}, {2, 5}})  // ALiBi and the softcap
    ->Args({4096, 1, 1, 2, 3})                       // FoX: causal only (BM_CpuForward)
    ->ArgsProduct({{4096}, {0, 1}, {2}, {2}, {0, 1}})  // dot 2: AMX tiles (skipped without)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MeasureProcessCPUTime();

// The bfloat16 backward (given o and lse) at the same shape, flops as BM_CpuBackward's;
// arguments as Bf16Problem's (dot 1: the five products on the bf16 dot products).
void BM_CpuBackwardBf16(benchmark::State& state) {
  Bf16Problem p(state, 5);
  std::vector<encodings::sequence::BFloat16> o(p.q.size()), dq(o.size()), dk(o.size()),
      dv(o.size());
  std::vector<float> lse(static_cast<size_t>(p.s * Bf16Problem::kHeads));
  if (!CpuForward(p.a, p.q.data(), p.k.data(), p.v.data(), o.data(), lse.data(), p.opt).ok()) {
    state.SkipWithError("forward failed");
    return;
  }
  if (!TimeCalls(state, dq.data(), [&] {
        return CpuBackward(p.a, p.q.data(), p.k.data(), p.v.data(), o.data(), lse.data(),
                           p.g.data(), dq.data(), dk.data(), dv.data(), nullptr, p.opt);
      })) {
    return;
  }
  SetBf16FlopCounters(state, 2.5 * p.ForwardFlops(), p.threads);
}

BENCHMARK(BM_CpuBackwardBf16)
    ->ArgNames({"s", "causal", "dot", "threads", "enc"})
    ->ArgsProduct({{4096}, {0, 1}, {1, 0}, {2}, {0, 1}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MeasureProcessCPUTime();

double TriadGBs(int threads) {
  static std::map<int, double>* cache = new std::map<int, double>();
  auto it = cache->find(threads);
  if (it == cache->end()) it = cache->emplace(threads, measure::TriadBandwidthGBs(threads)).first;
  return it->second;
}

// Decoding: one query token per sequence against a KV cache of `cache` tokens, GQA
// 32 query heads over 8 kv heads, d = 128, default positions (queries last). Bound by
// reading K and V once: reported as a fraction of the triad bandwidth, in the bytes the
// cache holds (kv: 0 float32; 1 bfloat16, 2 float16: half the bytes, widened as tiles
// load).
// A causal sliding window of w keys over s tokens (mode 0) against the same work without
// a window: s / w sequences of w tokens, each query seeing all w keys (mode 1; as many
// (query, key) pairs as the window allows, up to the first w rows). The time ratio of
// mode 0 to mode 1 is the window's cost over attention on w keys (target: <= 1.2);
// GFLOP/s counts the allowed pairs of each.
void BM_CpuWindow(benchmark::State& state) {
  const int64_t s = state.range(0), w = state.range(1), h = 8, d = 128;
  const bool dense = state.range(2) != 0;
  const int threads = static_cast<int>(state.range(3));
  AttentionArgs a = dense ? SelfAttention(s / w, w, h, d, false) : SelfAttention(1, s, h, d, true);
  if (!dense) a.window_left = w - 1;
  NormalStream n(4);
  const size_t total = static_cast<size_t>(s * h * d);
  std::vector<float> q(total), k(total), v(total), o(total);
  n.Fill({&q, &k, &v});
  CpuAttentionOptions opt;
  opt.num_threads = threads;
  if (!TimeCalls(state, o.data(), [&] {
        return CpuForward(a, q.data(), k.data(), v.data(), o.data(), nullptr, opt);
      })) {
    return;
  }
  const double pairs = dense ? double(s) * double(w) : double(s) * double(w) - 0.5 * double(w) * double(w - 1);
  SetFlopCounters(state, 4.0 * double(d) * pairs * double(h), threads);
}
BENCHMARK(BM_CpuWindow)
    ->ArgNames({"s", "window", "dense", "threads"})
    ->ArgsProduct({{16384}, {1024}, {0, 1}, {2}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MeasureProcessCPUTime();

// GB/s of `bytes` read per iteration, the triad on `threads` threads and the fraction.
void SetTriadCounters(benchmark::State& state, double bytes, int threads) {
  const double triad = TriadGBs(threads);
  state.counters["GB/s"] = benchmark::Counter(bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["triad_GB/s"] = triad;
  state.counters["frac_of_triad"] =
      benchmark::Counter(bytes * 1e-9 / triad, benchmark::Counter::kIsIterationInvariantRate);
}

// One query token per sequence against a bshd KV cache of `cap` tokens (decoding).
AttentionArgs DecodeArgs(int64_t batch, int64_t cap, int64_t hq, int64_t hkv, int64_t d) {
  AttentionArgs a;
  a.batch = batch;
  a.seq_len_q = 1;
  a.seq_len_k = cap;
  a.num_q_heads = hq;
  a.num_kv_heads = hkv;
  a.head_dim = d;
  a.q = a.o = ContiguousStrides(Layout::kBSHD, 1, hq, d);
  a.k = a.v = ContiguousStrides(Layout::kBSHD, cap, hkv, d);
  a.causal = true;
  return a;
}

// Fills k (base) and v (n elements further) with U(-1, 1) in the cache's type (kv: 0
// float32, 1 bfloat16, 2 float16, 3 bfloat16 with bfloat16 queries and output; a 16-bit
// cache in the first half of the floats) and times CpuForward on them.
bool FillAndTimeDecode(benchmark::State& state, const AttentionArgs& a, int kv, float* base,
                       int64_t n, const std::vector<float>& q, std::vector<float>* o,
                       int threads) {
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  CpuAttentionOptions opt;
  opt.num_threads = threads;
  float* out = o->data();
  if (kv == 0) {
    for (int64_t i = 0; i < 2 * n; ++i) base[i] = u(rng);
    return TimeCalls(state, out, [&] { return CpuForward(a, q.data(), base, base + n, out, nullptr, opt); });
  }
  uint16_t* bits = reinterpret_cast<uint16_t*>(base);
  for (int64_t i = 0; i < 2 * n; ++i) {
    bits[i] = kv != 2 ? encodings::sequence::ToBFloat16(u(rng)).bits
                      : encodings::sequence::ToFloat16(u(rng)).bits;
  }
  if (kv == 1) {
    const auto* k = reinterpret_cast<const encodings::sequence::BFloat16*>(bits);
    return TimeCalls(state, out, [&] { return CpuForward(a, q.data(), k, k + n, out, nullptr, opt); });
  }
  if (kv == 3) {  // a bf16 model: bf16 q and o too (the bf16 dot products where faster)
    const auto* k = reinterpret_cast<const encodings::sequence::BFloat16*>(bits);
    std::vector<encodings::sequence::BFloat16> q16(q.size()), o16(q.size());
    for (size_t i = 0; i < q.size(); ++i) q16[i] = encodings::sequence::ToBFloat16(q[i]);
    return TimeCalls(state, o16.data(), [&] {
      return CpuForward(a, q16.data(), k, k + n, o16.data(), nullptr, opt);
    });
  }
  const auto* k = reinterpret_cast<const encodings::sequence::Float16*>(bits);
  return TimeCalls(state, out, [&] { return CpuForward(a, q.data(), k, k + n, out, nullptr, opt); });
}

void BM_CpuDecode(benchmark::State& state) {
  const int64_t cache = state.range(0), hq = 32, hkv = 8, d = 128;
  const int threads = static_cast<int>(state.range(1));
  const int kv = static_cast<int>(state.range(4));
  AttentionArgs a = DecodeArgs(1, cache, hq, hkv, d);
  // bhsd: each kv head's cache contiguous (PyTorch's layout), as strides.
  if (state.range(3) != 0) a.k = a.v = Strides{hkv * cache * d, d, cache * d};
  a.causal = true;
  std::vector<float> q(static_cast<size_t>(hq * d), 0.5f), o(q.size());
  // huge: the cache in 2 MiB pages (measure::LargeFloats, as the triad's arrays), else in
  // whatever pages std::vector gets. A 16-bit cache takes half the floats.
  const bool huge = state.range(2) != 0;
  const int64_t n = cache * hkv * d;
  const int64_t floats = kv == 0 ? 2 * n : n;
  std::vector<float> plain(huge ? 0 : static_cast<size_t>(floats));
  measure::LargeFloats large(huge ? floats : 0);
  float* base = huge ? large.data() : plain.data();
  const bool ok = FillAndTimeDecode(state, a, kv, base, n, q, &o, threads);
  if (!ok) return;
  const double bytes = 2.0 * double(n) * (kv == 0 ? 4.0 : 2.0);
  SetTriadCounters(state, bytes, threads);
}

// Decoding as engines batch it, as a fraction of the triad counting the K and V bytes
// read: mode 0, one sequence of 32768 tokens in a paged cache (pages of 64 tokens in
// shuffled order, vLLM's block table); mode 1, 16 sequences of mixed lengths (1024 to
// 8191 tokens) in one call over a bshd cache of capacity 8192 (kv_lengths). GQA 32/8,
// d 128; kv: 0 float32, 1 bfloat16, 2 float16.
void BM_CpuDecodeEngine(benchmark::State& state) {
  const int mode = static_cast<int>(state.range(0));
  const int kv = static_cast<int>(state.range(1));
  const int threads = static_cast<int>(state.range(2));
  const int64_t hq = 32, hkv = 8, d = 128, page = 64;
  const int64_t batch = mode == 0 ? 1 : 16, cap = mode == 0 ? 32768 : 8192;
  std::vector<int64_t> lengths(static_cast<size_t>(batch));
  int64_t used = 0;
  for (int64_t b = 0; b < batch; ++b) {
    lengths[b] = mode == 0 ? cap : 1024 + (b * 7919) % 7168;
    used += lengths[b];
  }
  AttentionArgs a = DecodeArgs(batch, cap, hq, hkv, d);
  a.kv_lengths = lengths;
  std::vector<int64_t> table;
  if (mode == 0) {
    table.resize(static_cast<size_t>(cap / page));
    for (size_t i = 0; i < table.size(); ++i) table[i] = static_cast<int64_t>(i);
    std::shuffle(table.begin(), table.end(), std::mt19937_64(5));
    a.pages = {table, page, cap / page};
    a.k = a.v = Strides{page * hkv * d, hkv * d, d};
  }
  const int64_t n = batch * cap * hkv * d;
  std::vector<float> q(static_cast<size_t>(batch * hq * d), 0.5f), o(q.size());
  measure::LargeFloats large(kv == 0 ? 2 * n : n);
  const bool ok = FillAndTimeDecode(state, a, kv, large.data(), n, q, &o, threads);
  if (!ok) return;
  const double bytes = 2.0 * double(used * hkv * d) * (kv == 0 ? 4.0 : 2.0);
  SetTriadCounters(state, bytes, threads);
}
BENCHMARK(BM_CpuDecodeEngine)
    ->ArgNames({"batched", "kv", "threads"})
    ->ArgsProduct({{0, 1}, {0, 1, 2, 3}, {2}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MeasureProcessCPUTime();

// Decoding with a value head size of its own (DeepSeek-V2/V3's heads without MLA's
// weight absorption: keys of 192, values of 128; 16 heads, MHA), one query against a
// cache of 8192 tokens, as a fraction of the triad counting the K and V bytes read; kv:
// 0 float32, 1 bfloat16.
void BM_CpuDecodeValueDim(benchmark::State& state) {
  const int64_t cap = 8192, h = 16, d = 192, dv = 128;
  const int kv = static_cast<int>(state.range(0));
  const int threads = static_cast<int>(state.range(1));
  AttentionArgs a = DecodeArgs(1, cap, h, h, d);
  a.head_dim_v = dv;
  a.v = ContiguousStrides(Layout::kBSHD, cap, h, dv);
  a.o = ContiguousStrides(Layout::kBSHD, 1, h, dv);
  // k then v in one buffer: FillAndTimeDecode places v n elements after k, n = k's size
  // (v's dv < d elements fit in that span).
  const int64_t n = cap * h * d;
  std::vector<float> q(static_cast<size_t>(h * d), 0.5f), o(static_cast<size_t>(h * dv));
  measure::LargeFloats large(kv == 0 ? 2 * n : n);
  if (!FillAndTimeDecode(state, a, kv, large.data(), n, q, &o, threads)) return;
  const double bytes = double(cap * h * (d + dv)) * (kv == 0 ? 4.0 : 2.0);
  SetTriadCounters(state, bytes, threads);
}
BENCHMARK(BM_CpuDecodeValueDim)
    ->ArgNames({"kv", "threads"})
    ->ArgsProduct({{0, 1}, {2}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MeasureProcessCPUTime();

// The decode kernels alone on one thread: scores and P V of 8 kv heads x 4 query rows
// over blocks of 32 tokens (d 128), over a KV cache of `tokens` tokens (32: the block stays
// in L1/L2; 32768: streamed from memory). Isolates the kernels' rate from the memory's.
// prefetch: 1 requests the cache 32 KiB ahead (cpu::PrefetchAhead), as RunDecode does.
// kv: the cache's type, 0 float32, 1 bfloat16, 2 float16 (GB/s counts the bytes read).
void BM_DecodeKernels(benchmark::State& state) {
  const int64_t tokens = state.range(0), hkv = 8, rows = 4, d = 128, nk = 32, bk = 128;
  const int kv = static_cast<int>(state.range(3));
  const int64_t elem = kv == 0 ? 4 : 2;
  std::vector<float> k(static_cast<size_t>(tokens * hkv * d)), v(k.size());
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (float& x : k) x = u(rng);
  for (float& x : v) x = u(rng);
  std::vector<uint16_t> k16(kv == 0 ? 0 : k.size()), v16(k16.size());
  for (size_t i = 0; i < k16.size(); ++i) {
    k16[i] = kv == 1 ? encodings::sequence::ToBFloat16(k[i]).bits : encodings::sequence::ToFloat16(k[i]).bits;
    v16[i] = kv == 1 ? encodings::sequence::ToBFloat16(v[i]).bits : encodings::sequence::ToFloat16(v[i]).bits;
  }
  std::vector<float> q(static_cast<size_t>(hkv * rows * d), 0.01f), s(static_cast<size_t>(hkv * rows * bk));
  std::vector<float> o(static_cast<size_t>(hkv * rows * d)), alpha(static_cast<size_t>(hkv * rows), 1.0f);
  const int which = static_cast<int>(state.range(1));
  const bool prefetch = state.range(2) != 0;
  const int64_t row = hkv * d, ahead = (int64_t{32} << 10) / elem;
  auto range = [&](const void* base, int64_t j0) {
    const int64_t first = j0 * row + ahead, end = tokens * row;
    if (!prefetch || first >= end) return cpu::PrefetchAhead{};
    return cpu::PrefetchAhead{static_cast<const char*>(base) + first * elem,
                              std::min(nk * row, end - first) * elem};
  };
  for (auto _ : state) {
    for (int64_t j0 = 0; j0 < tokens; j0 += nk) {
      const int64_t at = j0 * hkv * d;
      if (kv == 0) {
        if (which & 1) cpu::ScoreDecode(q.data(), d, rows, hkv, d, k.data() + at, hkv * d, d, nk, s.data(), bk, range(k.data(), j0));
        if (which & 2) cpu::AccumulateDecode(s.data(), bk, rows, hkv, nk, v.data() + at, hkv * d, d, d, alpha.data(), o.data(), d, range(v.data(), j0));
      } else {
        if (which & 1) cpu::ScoreDecode16(q.data(), d, rows, hkv, d, k16.data() + at, hkv * d, d, nk, s.data(), bk, kv == 2, range(k16.data(), j0));
        if (which & 2) cpu::AccumulateDecode16(s.data(), bk, rows, hkv, nk, v16.data() + at, hkv * d, d, d, alpha.data(), o.data(), d, kv == 2, range(v16.data(), j0));
      }
    }
    benchmark::DoNotOptimize(o.data());
  }
  const double bytes = (((which & 1) ? 1.0 : 0.0) + ((which & 2) ? 1.0 : 0.0)) * double(k.size()) * double(elem);
  state.counters["GB/s"] = benchmark::Counter(bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_DecodeKernels)
    ->ArgNames({"tokens", "which", "prefetch", "kv"})
    ->ArgsProduct({{32, 32768}, {1, 2, 3}, {0, 1}, {0}})
    ->ArgsProduct({{32, 32768}, {1, 2, 3}, {0, 1}, {1, 2}})
    ->UseRealTime()
    ->MeasureProcessCPUTime();

BENCHMARK(BM_CpuDecode)
    ->ArgNames({"cache", "threads", "huge", "bhsd", "kv"})
    ->Args({32768, 2, 1, 0, 0})
    ->Args({32768, 2, 1, 1, 0})
    ->Args({32768, 2, 0, 0, 0})
    ->Args({32768, 1, 1, 0, 0})
    ->Args({4096, 2, 1, 0, 0})  // a short cache: a call of ~1 ms, where per-call costs show
    ->Args({32768, 2, 1, 0, 1})  // bfloat16 and float16 caches
    ->Args({32768, 2, 1, 0, 2})
    ->Args({32768, 2, 1, 0, 3})  // a bf16 model: bf16 queries too (bf16 dot products)
    ->Args({32768, 1, 1, 0, 1})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MeasureProcessCPUTime();

// The shape (b1 h16 s4096 d128) on 2 threads, every encoding, causal and not;
// then smaller sequences and 1 thread for scaling.
BENCHMARK(BM_CpuForward)
    ->ArgNames({"b", "h", "s", "d", "causal", "enc", "threads"})
    ->ArgsProduct({{1}, {16}, {4096}, {128}, {0, 1}, {0, 1, 2, 4, 5, 6, 7, 8}, {2}})
    // FoX causal only: without the mask its bias c_i - c_j grows without bound past the
    // diagonal (each later key block moves every row's maximum); no model uses it so.
    ->Args({1, 16, 4096, 128, 1, 3, 2})
    ->Args({1, 16, 4096, 128, 0, 0, 1})
    ->Args({1, 16, 1024, 128, 0, 0, 2})
    ->Args({1, 16, 2048, 128, 0, 0, 2})
    ->Args({1, 16, 2048, 64, 0, 0, 2})
    // The encodings' overhead on one thread (where the other core is busy, the ratios to
    // enc 0 still hold): none, RoPE, ALiBi, GRAPE-M planes; causal and not.
    ->ArgsProduct({{1}, {8}, {2048}, {128}, {0, 1}, {0, 1, 2, 4}, {1}})
    // `gpe`'s tour (b1 h8 s2048 d64 causal): per-row and per-score costs weigh twice
    // what they do at d128 and s4096.
    ->ArgsProduct({{1}, {8}, {2048}, {64}, {1}, {0, 1, 2, 3, 7}, {2}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MeasureProcessCPUTime();

// Structured positions and Shaw labels against their plain counterparts in one run
// (b1 h16 d128, causal): enc 0 none, 1 RoPE (int64 positions), 2 M-RoPE sections
// [16, 24, 24] from per-token (t, h, w) coordinates (the token-indexed path), 3 Shaw
// key and value labels with k = 16 (33 labels), 4 an algebraic 2-D grid. The ratios 2 / 1, 3 / 0 and 4 / 0 are the
// costs of the structured path and of the labels; flops count q.k and p.v only.
void BM_CpuForwardPositions(benchmark::State& state) {
  const int64_t s = state.range(0), h = 16, d = 128;
  const int encoding = static_cast<int>(state.range(1));
  const int threads = static_cast<int>(state.range(2));
  AttentionArgs a = SelfAttention(1, s, h, d, /*causal=*/true);
  NormalStream n(3);
  const size_t total = static_cast<size_t>(s * h * d);
  std::vector<float> q(total), k(total), v(total), o(total);
  n.Fill({&q, &k, &v});
  auto rope = CreateRope(WholeHeadRope(d));
  RopeOptions mo = WholeHeadRope(d);
  mo.num_axes = 3;
  mo.plane_axes = *encodings::sequence::MRopePlaneAxes({16, 24, 24});
  auto mrope = CreateRope(mo);
  RopeRowTransform rope_tr(*rope), mrope_tr(*mrope);
  // A 32 x 32 image grid per frame: (frame, row, column) of each token.
  std::vector<int64_t> coords(static_cast<size_t>(3 * s));
  for (int64_t t = 0; t < s; ++t) {
    coords[3 * t] = t / 1024;
    coords[3 * t + 1] = (t / 32) % 32;
    coords[3 * t + 2] = t % 32;
  }
  const int64_t kmax = 16, nl = 2 * kmax + 1;
  encodings::sequence::RowMatrixXd table(nl, d);
  for (int64_t i = 0; i < nl * d; ++i) table.data()[i] = 0.1 * n();
  auto shaw = encodings::sequence::ShawRelative::Create(kmax, table, table);
  if (encoding == 1) {
    a.q_transform = a.k_transform = &rope_tr;
  } else if (encoding == 2) {
    a.q_transform = a.k_transform = &mrope_tr;
    a.q_structured.num_axes = a.k_structured.num_axes = 3;
    a.q_structured.coords = a.k_structured.coords = coords;
  } else if (encoding == 3) {
    a.shaw_keys = a.shaw_values = &*shaw;
  }
  // 4: Kogkalidis et al.'s 2-D grid (two 64 x 64 skew generators, random) on each token's
  // (row, column) of a 32-column image.
  std::unique_ptr<encodings::sequence::AlgebraicGrid2D> grid;
  std::unique_ptr<AlgebraicGridRowTransform<encodings::sequence::AlgebraicGrid2D>> grid_tr;
  std::vector<int64_t> rc(static_cast<size_t>(2 * s));
  if (encoding == 4) {
    std::mt19937_64 rng(10);
    std::normal_distribution<double> normal(0.0, 0.05);
    auto skew = [&] {
      Eigen::MatrixXd m(d / 2, d / 2);
      for (int64_t i = 0; i < m.size(); ++i) m.data()[i] = normal(rng);
      return Eigen::MatrixXd(m - m.transpose());
    };
    grid = std::make_unique<encodings::sequence::AlgebraicGrid2D>(
        *encodings::sequence::MakeAlgebraicGrid2D(skew(), skew()));
    grid_tr = std::make_unique<AlgebraicGridRowTransform<encodings::sequence::AlgebraicGrid2D>>(*grid);
    for (int64_t t = 0; t < s; ++t) rc[2 * t] = t / 32, rc[2 * t + 1] = t % 32;
    a.q_transform = a.k_transform = grid_tr.get();
    a.q_structured.num_axes = a.k_structured.num_axes = 2;
    a.q_structured.coords = a.k_structured.coords = rc;
  }
  CpuAttentionOptions opt;
  opt.num_threads = threads;
  if (!TimeCalls(state, o.data(), [&] {
        return CpuForward(a, q.data(), k.data(), v.data(), o.data(), nullptr, opt);
      })) {
    return;
  }
  SetFlopCounters(state, 4.0 * double(d) * AllowedPairs(s, true) * double(h), threads);
  state.counters["extra_MiB"] = double(*CpuForwardWorkspaceBytes(a, opt)) / (1 << 20);
  state.SetLabel(CpuAttentionIsa());
}

BENCHMARK(BM_CpuForwardPositions)
    ->ArgNames({"s", "enc", "threads"})
    ->ArgsProduct({{2048}, {0, 1, 2, 3, 4}, {2}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MeasureProcessCPUTime();

// Where the forward's time goes: its three tile kernels alone on one thread, on a tile
// that stays in L1/L2 (bq query rows against bk keys of head_dim d, the default tiles
// 96 x 128 and d 128): 1 ScoreTile (S = Q K^T on packed panels), 2 SoftmaxTile (the
// online softmax: max, exp2, sum; alpha = 1 after the first call, as most tiles),
// 4 AccumulateTile (O += P V), 7 all three in sequence, as a tile step; + 8: the softmax
// with Gemma 2's softcap (50) fused (the softcap's own cost: 10 against 2); 16 the softcap's
// pass of its own (SoftcapTile, as the bf16 forward and the backward apply it; on the same
// tile each time, whose scores stay in the cap's polynomial range). GFLOP/s counts
// 2 d flops per (row, key) for each product; frac_of_peak is against one thread's FMA
// peak; ns_per_score is the time per (row, key) pair (the softmax's figure).
void BM_TileKernels(benchmark::State& state) {
  const int64_t bq = state.range(0), bk = state.range(1), d = state.range(2);
  const int which = static_cast<int>(state.range(3));
  const float cap = (which & 8) ? static_cast<float>(50.0 * 1.4426950408889634) : 0.0f;
  NormalStream n(5);
  std::vector<float> q(static_cast<size_t>(bq * d)), keys(static_cast<size_t>(bk * d)),
      vals(static_cast<size_t>(bk * d));
  n.Fill({&q, &keys, &vals});
  for (float& x : q) x *= 0.1f;
  auto panels = hwy::AllocateAligned<float>(static_cast<size_t>(bk * d));
  cpu::PackKeyPanels(keys.data(), bk, d, d, panels.get());
  // Values, scores and outputs 64-byte aligned, as the forward's workspace holds them.
  auto aligned = [](const std::vector<float>& x) {
    auto a = hwy::AllocateAligned<float>(x.size());
    std::copy(x.begin(), x.end(), a.get());
    return a;
  };
  auto vals_a = aligned(vals);
  auto s_a = aligned(std::vector<float>(static_cast<size_t>(bq * bk)));
  auto o_a = aligned(std::vector<float>(static_cast<size_t>(bq * d), 0.0f));
  float* sp = s_a.get();
  float* op = o_a.get();
  std::vector<float> m(static_cast<size_t>(bq), 0.0f), alpha(static_cast<size_t>(bq), 1.0f);
  std::vector<float> l(static_cast<size_t>(bq * cpu::kSumLanes), 0.0f);
  cpu::ScoreTile(q.data(), d, bq, d, panels.get(), bk / cpu::kPanel, sp, bk);
  const std::vector<float> scores(sp, sp + bq * bk);
  for (auto _ : state) {
    if (which & 1) cpu::ScoreTile(q.data(), d, bq, d, panels.get(), bk / cpu::kPanel, sp, bk);
    if (which & 2) {
      if (!(which & 1)) std::copy(scores.begin(), scores.end(), sp);
      cpu::SoftmaxTile(sp, bk, bq, bk, m.data(), l.data(), alpha.data(), cap);
    }
    if (which & 16) cpu::SoftcapTile(sp, bk, bq, bk, static_cast<float>(50.0 * 1.4426950408889634), nullptr, 0);
    if (which & 4) cpu::AccumulateTile(sp, bk, bq, bk, vals_a.get(), d, d, alpha.data(), op, d);
    benchmark::DoNotOptimize(op);
    benchmark::DoNotOptimize(sp);
  }
  const double products = ((which & 1) ? 1.0 : 0.0) + ((which & 4) ? 1.0 : 0.0);
  if (products > 0) SetFlopCounters(state, products * 2.0 * double(d) * double(bq * bk), 1);
  state.counters["ns_per_score"] = benchmark::Counter(
      double(bq * bk), benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
  state.SetLabel(CpuAttentionIsa());
}
BENCHMARK(BM_TileKernels)
    ->ArgNames({"bq", "bk", "d", "which"})
    ->ArgsProduct({{96}, {128}, {128}, {1, 2, 4, 7, 10, 15, 16}})
    ->Args({48, 128, 128, 7})
    ->Args({96, 256, 128, 7})
    ->Args({96, 128, 64, 7})
    ->UseRealTime();

}  // namespace
}  // namespace attention
}  // namespace gpe
