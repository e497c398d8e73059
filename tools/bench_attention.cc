#include "tools/bench_attention.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <system_error>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "attention/cpu/cpu_attention.h"
#include "attention/descriptor.h"
#include "encodings/sequence/rope.h"
#include "inr/data.h"
#include "measure/machine_limits.h"
#include "measure/timing.h"
#include "tools/bench_harness.h"

namespace gpe {
namespace tools {

using measure::BestSeconds;
using measure::FmaPeakGflops;
using measure::LargeFloats;
using measure::TriadBandwidthGBs;

double AttentionPairs(int64_t sq, int64_t sk, bool causal) {
  const double q = static_cast<double>(sq), k = static_cast<double>(sk);
  if (!causal) return q * k;
  // Query i (0-based) sees max(0, min(sk, sk - sq + i + 1)) keys; sum over i in closed form.
  const int64_t first_seeing = std::max<int64_t>(0, sq - sk);  // first i with >= 1 key
  const double n = static_cast<double>(sq - first_seeing);
  const double first = static_cast<double>(sk - sq + first_seeing + 1);
  return n * first + 0.5 * n * (n - 1.0);
}

namespace {

namespace att = gpe::attention;
namespace seq = gpe::encodings::sequence;

std::string Mib(double bytes) { return absl::StrFormat("%.1f MiB", bytes / (1 << 20)); }

// One attention problem in bshd layout with random inputs (normal, seed 1).
struct Problem {
  att::AttentionArgs args;
  // q, k and v in 2 MiB pages placed as the triad's arrays (LargeFloats, FillLikeTriad):
  // decoding streams k and v, and its fraction of the triad compares like memory.
  LargeFloats q, k, v;
  std::vector<float> o;
  int64_t b = 1, hq = 1, hkv = 1, sq = 1, sk = 1, d = 1;
  bool causal = false;

  double Flops() const {
    return 4.0 * static_cast<double>(d) * AttentionPairs(sq, sk, causal) *
           static_cast<double>(b * hq);
  }
  double KvBytes() const { return 2.0 * sizeof(float) * static_cast<double>(b * sk * hkv * d); }
  // The peer's case string (attention_torch.py), kind "sdpa", "rope_sdpa", ...
  std::string PeerCase(const std::string& kind, const std::string& dtype = "float32") const {
    return absl::StrFormat("%s,b=%d,hq=%d,hkv=%d,sq=%d,sk=%d,d=%d,causal=%d,dtype=%s", kind, b,
                           hq, hkv, sq, sk, d, causal ? 1 : 0, dtype);
  }
  std::string Shape() const {
    std::string s = absl::StrFormat("b%d h%d", b, hq);
    if (hkv != hq) s = absl::StrFormat("b%d h%d/%d", b, hq, hkv);
    if (sq == sk) return absl::StrFormat("%s s%d d%d", s, sq, d);
    return absl::StrFormat("%s q%d kv%d d%d", s, sq, sk, d);
  }
};

// The inputs' pages are first touched by `threads` threads in the triad's chunks
// (FillLikeTriad), then filled with the random values.
std::unique_ptr<Problem> MakeProblem(int threads, int64_t b, int64_t hq, int64_t hkv, int64_t sq,
                                     int64_t sk, int64_t d, bool causal) {
  auto p = std::make_unique<Problem>();
  p->b = b, p->hq = hq, p->hkv = hkv, p->sq = sq, p->sk = sk, p->d = d, p->causal = causal;
  att::AttentionArgs& a = p->args;
  a.batch = b;
  a.seq_len_q = sq;
  a.seq_len_k = sk;
  a.num_q_heads = hq;
  a.num_kv_heads = hkv;
  a.head_dim = d;
  a.q = a.o = att::ContiguousStrides(att::Layout::kBSHD, sq, hq, d);
  a.k = a.v = att::ContiguousStrides(att::Layout::kBSHD, sk, hkv, d);
  a.causal = causal;
  std::mt19937_64 rng(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  p->q = LargeFloats(b * sq * hq * d);
  p->o.resize(static_cast<size_t>(p->q.size()));
  p->k = LargeFloats(b * sk * hkv * d);
  p->v = LargeFloats(b * sk * hkv * d);
  for (LargeFloats* x : {&p->q, &p->k, &p->v}) measure::FillLikeTriad(x, 0.0f, threads);
  for (float& x : p->q) x = normal(rng);
  for (float& x : p->k) x = normal(rng);
  for (float& x : p->v) x = normal(rng);
  return p;
}

absl::StatusOr<double> TimeForward(Problem& p, int threads, int reps) {
  att::CpuAttentionOptions opt;
  opt.num_threads = threads;
  return WarmThenBestSeconds(reps, [&] {
    return att::CpuForward(p.args, p.q.data(), p.k.data(), p.v.data(), p.o.data(), nullptr, opt);
  });
}

// k and v rounded to bfloat16 in place, their bit patterns in the first halves (element
// i's 2 bytes land before element i is read): TimeForwardBf16Cache's inputs.
void RoundKvToBf16(Problem& p) {
  for (LargeFloats* x : {&p.k, &p.v}) {
    uint16_t* bits = reinterpret_cast<uint16_t*>(x->data());
    for (int64_t i = 0; i < x->size(); ++i) bits[i] = seq::ToBFloat16((*x)[i]).bits;
  }
}

// As TimeForward with k and v holding bfloat16 bit patterns in their first halves.
absl::StatusOr<double> TimeForwardBf16Cache(Problem& p, int threads, int reps) {
  att::CpuAttentionOptions opt;
  opt.num_threads = threads;
  const auto* k = reinterpret_cast<const seq::BFloat16*>(p.k.data());
  const auto* v = reinterpret_cast<const seq::BFloat16*>(p.v.data());
  return WarmThenBestSeconds(reps, [&] {
    return att::CpuForward(p.args, p.q.data(), k, v, p.o.data(), nullptr, opt);
  });
}

// As TimeForwardBf16Cache with bfloat16 queries and output too (a bf16 model: decoding
// runs on the bf16 dot products where the CPU has faster ones).
absl::StatusOr<double> TimeForwardBf16All(Problem& p, int threads, int reps) {
  att::CpuAttentionOptions opt;
  opt.num_threads = threads;
  const auto* k = reinterpret_cast<const seq::BFloat16*>(p.k.data());
  const auto* v = reinterpret_cast<const seq::BFloat16*>(p.v.data());
  std::vector<seq::BFloat16> q(static_cast<size_t>(p.q.size())), o(q.size());
  for (size_t i = 0; i < q.size(); ++i) q[i] = seq::ToBFloat16(p.q[i]);
  return WarmThenBestSeconds(reps, [&] {
    return att::CpuForward(p.args, q.data(), k, v, o.data(), nullptr, opt);
  });
}

// RoPE applied in place to q and k (s x h x d float32 each, bshd) with one shared table.
absl::StatusOr<double> RopeQkSeconds(int64_t s, int64_t h, int64_t d, int threads, int reps) {
  seq::RopeOptions o;
  o.head_dim = d;
  o.rotary_dim = d;
  o.num_threads = threads;
  absl::StatusOr<seq::RopeFrequencies> freqs = seq::DefaultRopeFrequencies(d, 10000.0);
  if (!freqs.ok()) return freqs.status();
  absl::StatusOr<seq::Rope> rope = seq::Rope::Create(o, *freqs);
  if (!rope.ok()) return rope.status();
  const seq::RopeTensor tensor = seq::RopeTensor::Contiguous(seq::RopeLayout::kBSHD, 1, s, h, d);
  // In 2 MiB pages, as the triad's arrays (LargeFloats): a bandwidth ratio of like memory.
  LargeFloats q(s * h * d), k(s * h * d);
  measure::FillLikeTriad(&q, 0.5f, threads);  // placed on the NUMA nodes as the triad's
  measure::FillLikeTriad(&k, -0.25f, threads);
  const std::vector<int64_t> offsets = {0};
  // One table for q and k (same positions), built once, as a model reuses it per layer.
  absl::StatusOr<seq::RopeTable<float>> table = rope->MakeTable<float>(tensor, {{}, offsets});
  if (!table.ok()) return table.status();
  return BestSecondsOk(reps + 1, [&] {
    absl::Status status = rope->Apply<float>(*table, tensor, q.data(), q.data());
    status.Update(rope->Apply<float>(*table, tensor, k.data(), k.data()));
    return status;
  });
}

// ---- The table's cells ----

void Row(const std::string& workload, const std::string& ours, const std::string& peer,
         const std::string& ratio, const std::string& limit, const std::string& memory) {
  std::printf("| %s | %s | %s | %s | %s | %s |\n", workload.c_str(), ours.c_str(), peer.c_str(),
              ratio.c_str(), limit.c_str(), memory.c_str());
  std::fflush(stdout);
}

std::string Ratio(double peer_sec, double our_sec) {
  return std::isfinite(peer_sec) ? absl::StrFormat("%.2fx", peer_sec / our_sec) : "";
}

// Peer cell for a timed attention case: time, GFLOP/s, fraction of peak.
std::string PeerCell(const TorchPeer& peer, const std::string& line, double flops, double peak,
                     const std::string& what) {
  const double sec = JsonNumber(line, "seconds");
  if (!std::isfinite(sec)) return peer.Why(line);
  return absl::StrFormat("%s %.1f ms, %.1f GFLOP/s (%.0f%% of peak)", what, sec * 1e3,
                         flops / sec * 1e-9, 100.0 * flops / sec * 1e-9 / peak);
}

// The cells of a timed attention row: GroupPE's time and GFLOP/s, the peer's cell
// (PeerCell, `what`), the throughput ratio and the fraction of `peak` (`peak_name`).
struct FlopsCells {
  std::string ours, peer, ratio, limit;
};
FlopsCells AttentionCells(const TorchPeer& peer, const std::string& line, double sec,
                          double flops, double peak, const std::string& what,
                          const std::string& peak_name = "FMA peak") {
  const double gflops = flops / sec * 1e-9;
  return {absl::StrFormat("%.1f ms, %.1f GFLOP/s", sec * 1e3, gflops),
          PeerCell(peer, line, flops, peak, what), Ratio(JsonNumber(line, "seconds"), sec),
          absl::StrFormat("%.0f%% of %s", 100.0 * gflops / peak, peak_name)};
}

// ---- The sweeps ----

struct SweepPoint {
  int64_t s = 0;
  bool causal = false;
  double ours_sec = 0, peer_sec = 0;
};

struct RopePoint {
  int64_t s = 0;
  double bytes = 0, ours_gbs = 0, peer_gbs = 0;
};

std::string JsonValue(double v) {
  return std::isfinite(v) ? absl::StrFormat("%.6g", v) : std::string("null");
}

absl::Status Prefixed(const absl::Status& s) {
  return absl::Status(s.code(), absl::StrCat("attention bench: ", s.message()));
}

// One `gpe bench` attention run. Each workload step measures GroupPE and the peer and
// keeps its row for the end, where the rows are printed against the best limits of the
// whole run; then the sweeps, bench.json and the plots.
class AttentionBench {
 public:
  explicit AttentionBench(const AttentionBenchOptions& o)
      : o_(o),
        q_(o.quick),
        reps_(q_ ? 2 : 3),
        rounds_(q_ ? 1 : 3),
        heads_(q_ ? 4 : 16),
        seq_len_(q_ ? 256 : 4096),
        head_dim_(q_ ? 64 : 128),
        peer_(o.peers, o.python, o.peers_dir, o.threads),
        peak_(o.fma_peak_gflops),
        triad_(o.triad_gbs) {}

  absl::Status Run() {
    for (absl::Status (AttentionBench::*step)() :
         {&AttentionBench::BenchForward, &AttentionBench::BenchBackwardAndBf16,
          &AttentionBench::BenchDecodeBshd, &AttentionBench::BenchDecodeBhsd,
          &AttentionBench::BenchDecodeBf16Cache,
          &AttentionBench::BenchDecodePaged, &AttentionBench::BenchDecodePagedBf16,
          &AttentionBench::BenchDecodeBatched,
          &AttentionBench::BenchEngineFeatures,
          &AttentionBench::BenchMemory, &AttentionBench::BenchScaling,
          &AttentionBench::BenchRope}) {
      if (absl::Status s = (this->*step)(); !s.ok()) return Prefixed(s);
    }
    Progress("sweeps for the plots");
    absl::StatusOr<std::vector<SweepPoint>> sweep = MeasureAttentionSweep();
    if (!sweep.ok()) return Prefixed(sweep.status());
    MeasureFinalLimits();
    PrintRows();
    PrintAttentionSweep(*sweep);
    absl::StatusOr<std::vector<RopePoint>> rope_sweep = MeasureRopeSweep();
    if (!rope_sweep.ok()) return Prefixed(rope_sweep.status());
    absl::StatusOr<std::string> json_path = WriteBenchJson(*sweep, *rope_sweep);
    if (!json_path.ok()) return json_path.status();
    std::printf("\nWrote %s\n%s", json_path->c_str(), DrawPlots(*json_path).c_str());
    return absl::OkStatus();
  }

 private:
  static void Progress(const std::string& what) {
    std::fprintf(stderr, "gpe bench: %s\n", what.c_str());
  }

  // The limits again before every workload and at the end: on a machine shared with other
  // work they measure low at times (one of two cores taken halves the FMA peak), and a low
  // limit would flatter every fraction. The rows are printed at the end, against the best
  // limits of the whole run. --quick measures them once, at the end (a smoke run, not a
  // measurement).
  void MeasureLimits() {
    if (q_) return;
    peak_ = std::max(peak_, FmaPeakGflops(o_.threads));
    bf16_peak_ = std::max(bf16_peak_, measure::Bf16DotPeakGflops(o_.threads));
    amx_peak_ = std::max(amx_peak_, measure::AmxBf16PeakGflops(o_.threads));
    triad_ = std::max(triad_, TriadBandwidthGBs(o_.threads, int64_t{256} << 20));
  }

  void MeasureFinalLimits() {
    MeasureLimits();
    if (q_) {
      peak_ = std::max(peak_, FmaPeakGflops(o_.threads));
      bf16_peak_ = std::max(bf16_peak_, measure::Bf16DotPeakGflops(o_.threads));
      amx_peak_ = std::max(amx_peak_, measure::AmxBf16PeakGflops(o_.threads));
      triad_ = std::max(triad_, TriadBandwidthGBs(o_.threads, int64_t{16} << 20));
    }
  }

  // Forward, float32, non-causal and causal; then the same with RoPE inside the kernel.
  absl::Status BenchForward() {
    const int64_t h = heads_, s = seq_len_, d = head_dim_;
    absl::StatusOr<seq::RopeFrequencies> freqs = seq::DefaultRopeFrequencies(d, 10000.0);
    if (!freqs.ok()) return freqs.status();
    seq::RopeOptions ro;
    ro.head_dim = d;
    ro.rotary_dim = d;
    absl::StatusOr<seq::Rope> rope = seq::Rope::Create(ro, *freqs);
    if (!rope.ok()) return rope.status();
    const att::RopeRowTransform rope_rows(*rope);
    for (const bool with_rope : {false, true}) {
      for (const bool causal : {false, true}) {
        std::unique_ptr<Problem> p = MakeProblem(o_.threads, 1, h, h, s, s, d, causal);
        if (with_rope) p->args.q_transform = p->args.k_transform = &rope_rows;
        const std::string name = absl::StrFormat("attention fwd f32 %s%s%s", p->Shape(),
                                                 causal ? " causal" : "",
                                                 with_rope ? ", RoPE in kernel" : "");
        Progress(name);
        MeasureLimits();
        absl::StatusOr<Compared> c = BackToBack(
            rounds_, [&] { return Single(TimeForward(*p, o_.threads, reps_)); },
            [&] { return peer_.Run({p->PeerCase(with_rope ? "rope_sdpa" : "sdpa")}, reps_); });
        if (!c.ok()) return c.status();
        absl::StatusOr<int64_t> ws = att::CpuForwardWorkspaceBytes(p->args, {o_.threads, 0, 0});
        if (!ws.ok()) return ws.status();
        const double sec = c->ours[0], flops = p->Flops();
        const std::string line = c->peer[0], workspace = Mib(*ws);
        rows_.push_back([=] {
          const FlopsCells cells = AttentionCells(peer_, line, sec, flops, peak_,
                                                  with_rope ? "rotate-half + SDPA" : "SDPA");
          Row(name, cells.ours, cells.peer, cells.ratio, cells.limit, workspace);
        });
      }
    }
    return absl::OkStatus();
  }

  // The backward, float32 then bfloat16, and the bfloat16 forward, non-causal and causal
  // (one problem each).
  absl::Status BenchBackwardAndBf16() {
    for (bool causal : {false, true}) {
      std::unique_ptr<Problem> p =
          MakeProblem(o_.threads, 1, heads_, heads_, seq_len_, seq_len_, head_dim_, causal);
      if (absl::Status s = BenchBackward(*p); !s.ok()) return s;
      if (absl::Status s = BenchBf16(*p); !s.ok()) return s;
    }
    return absl::OkStatus();
  }

  static std::string CausalSuffix(const Problem& p) { return p.causal ? " causal" : ""; }

  // Backward (FlashAttention-2's, from the forward's o and lse), GroupPE then PyTorch.
  absl::Status BenchBackward(Problem& p) {
    const std::string name =
        absl::StrFormat("attention bwd f32 %s%s (flops 2.5x fwd)", p.Shape(), CausalSuffix(p));
    Progress(name);
    MeasureLimits();
    std::vector<float> lse(static_cast<size_t>(p.sq * p.hq)), d_o(p.q.size());
    std::vector<float> dq(p.q.size()), dk(p.k.size()), dv(p.v.size());
    {
      std::mt19937_64 rng(2);
      std::normal_distribution<float> normal(0.0f, 1.0f);
      for (float& x : d_o) x = normal(rng);
    }
    att::CpuAttentionOptions opt;
    opt.num_threads = o_.threads;
    absl::Status st = att::CpuForward(p.args, p.q.data(), p.k.data(), p.v.data(), p.o.data(),
                                      lse.data(), opt);
    if (!st.ok()) return st;
    absl::StatusOr<Compared> c = BackToBack(
        rounds_,
        [&] {
          return Single(BestSecondsOk(reps_, [&] {
            return att::CpuBackward(p.args, p.q.data(), p.k.data(), p.v.data(), p.o.data(),
                                    lse.data(), d_o.data(), dq.data(), dk.data(), dv.data(),
                                    nullptr, opt);
          }));
        },
        [&] { return peer_.Run({p.PeerCase("sdpa_backward")}, reps_); });
    if (!c.ok()) return c.status();
    const double sec = c->ours[0], flops = p.Flops();
    const std::string line = c->peer[0];
    rows_.push_back([=] {
      const FlopsCells cells = AttentionCells(peer_, line, sec, 2.5 * flops, peak_, "SDPA bwd");
      Row(name, cells.ours, cells.peer, cells.ratio, cells.limit, "");
    });
    return absl::OkStatus();
  }

  // bfloat16 in and out, float32 accumulation, forward then backward; GroupPE with the
  // bf16 dot products (vdpbf16ps) where the CPU runs them faster than float FMAs, else
  // widened to float32. Each row names the path it took and gives its fraction of the
  // best bf16 limit of this CPU (the dot-product peak, or the FMA peak without it).
  absl::Status BenchBf16(const Problem& p) {
    const std::string shape = p.Shape() + CausalSuffix(p);
    const std::string fwd_name = absl::StrFormat("attention fwd bf16 %s", shape);
    const std::string bwd_name = absl::StrFormat("attention bwd bf16 %s (flops 2.5x fwd)", shape);
    Progress(fwd_name + ", then the backward");
    MeasureLimits();
    std::vector<seq::BFloat16> qb(p.q.size()), kb(p.k.size()), vb(p.v.size()), ob(p.o.size());
    std::vector<seq::BFloat16> gb(p.o.size()), dq(p.q.size()), dk(p.k.size()), dv(p.v.size());
    for (size_t i = 0; i < qb.size(); ++i) qb[i] = seq::ToBFloat16(p.q[i]);
    for (size_t i = 0; i < kb.size(); ++i) kb[i] = seq::ToBFloat16(p.k[i]);
    for (size_t i = 0; i < vb.size(); ++i) vb[i] = seq::ToBFloat16(p.v[i]);
    {
      std::mt19937_64 rng(3);
      std::normal_distribution<float> normal(0.0f, 1.0f);
      for (seq::BFloat16& x : gb) x = seq::ToBFloat16(normal(rng));
    }
    std::vector<float> lse(static_cast<size_t>(p.sq * p.hq));
    // The default (kAuto): the dot products where this CPU runs them faster than FMAs.
    att::CpuAttentionOptions opt;
    opt.num_threads = o_.threads;
    const std::string fwd_case = p.PeerCase("sdpa", "bfloat16");
    const std::string bwd_case = p.PeerCase("sdpa_backward", "bfloat16");
    Bf16PeerSetup setup;
    if (peer_.enabled()) {
      int probe_status = -1;
      const std::string probe = peer_.RunOne(fwd_case, 1, "", &probe_status);
      setup = Bf16PeerSetupAfterProbe(probe, probe_status);
    }
    const std::string peer_env = setup.env, note = setup.note;
    absl::StatusOr<Compared> fwd = BackToBack(
        rounds_,
        [&] {
          return Single(WarmThenBestSeconds(reps_, [&] {
            return att::CpuForward(p.args, qb.data(), kb.data(), vb.data(), ob.data(),
                                   lse.data(), opt);
          }));
        },
        [&] { return peer_.Run({fwd_case}, reps_, peer_env); });
    if (!fwd.ok()) return fwd.status();
    absl::StatusOr<Compared> bwd = BackToBack(
        rounds_,
        [&] {
          return Single(BestSecondsOk(reps_, [&] {
            return att::CpuBackward(p.args, qb.data(), kb.data(), vb.data(), ob.data(),
                                    lse.data(), gb.data(), dq.data(), dk.data(), dv.data(),
                                    nullptr, opt);
          }));
        },
        [&] { return peer_.Run({bwd_case}, reps_, peer_env); });
    if (!bwd.ok()) return bwd.status();
    const bool dot = att::CpuBf16AutoUsesDotProducts();
    const std::string how = dot ? "bf16 dot products"
                            : att::CpuHasBf16DotProducts()
                                ? "widened to f32: dot products not faster here"
                                : "widened to f32: no bf16 dot products";
    const double flops = p.Flops();
    for (const auto& [name, c, mult, what] :
         {std::make_tuple(fwd_name, *fwd, 1.0, std::string("SDPA bf16")),
          std::make_tuple(bwd_name, *bwd, 2.5, std::string("SDPA bf16 bwd"))}) {
      const double sec = c.ours[0];
      const std::string line = c.peer[0];
      rows_.push_back([=, name = name, what = what, mult = mult] {
        // The bf16 limit: the dot-product peak where the CPU has the instruction (the
        // widened path is then measured against a limit it does not use, as it should
        // be: the CPU could do better), else the FMA peak.
        const auto [limit, limit_name] = Bf16Limit();
        const FlopsCells cells =
            AttentionCells(peer_, line, sec, mult * flops, limit, what, limit_name);
        Row(name, absl::StrCat(cells.ours, " (", how, ")"), cells.peer + note, cells.ratio,
            cells.limit, "");
      });
    }
    // Where the CPU has usable AMX tiles, the opt-in forward on them (kAmxTiles) beside
    // the same peer, its fraction against the best bf16 limit (Bf16Limit: the AMX peak).
    if (att::CpuAmxUsable()) {
      att::CpuAttentionOptions amx = opt;
      amx.bf16_arithmetic = att::CpuAttentionOptions::Bf16Arithmetic::kAmxTiles;
      absl::StatusOr<Compared> tiles = BackToBack(
          rounds_,
          [&] {
            return Single(WarmThenBestSeconds(reps_, [&] {
              return att::CpuForward(p.args, qb.data(), kb.data(), vb.data(), ob.data(),
                                     lse.data(), amx);
            }));
          },
          [&] { return peer_.Run({fwd_case}, reps_, peer_env); });
      if (!tiles.ok()) return tiles.status();
      const double sec = tiles->ours[0];
      const std::string line = tiles->peer[0];
      rows_.push_back([=] {
        const auto [limit, limit_name] = Bf16Limit();
        const FlopsCells cells =
            AttentionCells(peer_, line, sec, flops, limit, "SDPA bf16", limit_name);
        Row(fwd_name, absl::StrCat(cells.ours, " (AMX tiles, opt-in kAmxTiles)"),
            cells.peer + note, cells.ratio, cells.limit, "");
      });
    }
    return absl::OkStatus();
  }

  // Decode: one query against a long KV cache; reading K and V is the whole cost. The
  // cache as bshd (every kv head of a token adjacent) and as bhsd (each head's rows
  // adjacent: PyTorch's layout, the peer's own).
  absl::Status BenchDecodeBshd() { return BenchDecode(/*bhsd=*/false); }
  absl::Status BenchDecodeBhsd() { return BenchDecode(/*bhsd=*/true); }
  // A bfloat16 KV cache read by float32 queries (half the bytes; widened in registers)
  // against the peer's bfloat16 decoding, which reads the same bytes.
  absl::Status BenchDecodeBf16Cache() { return BenchDecode(/*bhsd=*/false, /*bf16_cache=*/true); }
  absl::Status BenchDecode(bool bhsd, bool bf16_cache = false) {
    const int64_t d = head_dim_;
    std::unique_ptr<Problem> p = MakeProblem(o_.threads, 1, q_ ? 8 : 32, q_ ? 2 : 8, 1, q_ ? 2048 : 32768,
                                             d, false);
    if (bhsd) p->args.k = p->args.v = att::Strides{p->hkv * p->sk * d, d, p->sk * d};
    if (bf16_cache) RoundKvToBf16(*p);
    const int decode_reps = q_ ? reps_ : 10;
    const std::string name =
        bf16_cache ? absl::StrFormat("decode f32 q, bf16 cache %s (GQA, bshd cache)", p->Shape())
                   : absl::StrFormat("decode f32 %s (GQA, %s cache)", p->Shape(),
                                     bhsd ? "bhsd" : "bshd");
    const double kv_bytes = p->KvBytes() / (bf16_cache ? 2.0 : 1.0);
    Progress(name);
    MeasureLimits();
    TriadBeside beside(o_.threads, q_);
    absl::StatusOr<Compared> c = BackToBack(
        q_ ? rounds_ : 7,
        [&]() -> absl::StatusOr<std::vector<double>> {
          triad_ = std::max(triad_, beside.Measure());
          absl::StatusOr<double> t = bf16_cache ? TimeForwardBf16Cache(*p, o_.threads, decode_reps)
                                                : TimeForward(*p, o_.threads, decode_reps);
          if (t.ok()) triad_ = std::max(triad_, beside.Add(kv_bytes / *t * 1e-9));
          return Single(t);
        },
        [&] {
          return peer_.Run({p->PeerCase("sdpa", bf16_cache ? "bfloat16" : "float32")},
                           decode_reps);
        });
    if (!c.ok()) return c.status();
    absl::StatusOr<int64_t> ws = att::CpuForwardWorkspaceBytes(p->args, {o_.threads, 0, 0});
    if (!ws.ok()) return ws.status();
    const double sec = c->ours[0], gbs = kv_bytes / sec * 1e-9;
    const double peer_sec = JsonNumber(c->peer[0], "seconds");
    const std::string line = c->peer[0], workspace = Mib(*ws);
    rows_.push_back([=] {
      Row(name, absl::StrFormat("%.2f ms, %.1f GB/s of K and V", sec * 1e3, gbs),
          std::isfinite(peer_sec)
              ? absl::StrFormat("SDPA %.2f ms, %.1f GB/s (%.0f%% of triad)", peer_sec * 1e3,
                                kv_bytes / peer_sec * 1e-9,
                                100.0 * kv_bytes / peer_sec * 1e-9 / triad_)
              : peer_.Why(line),
          Ratio(peer_sec, sec), beside.Cell(gbs, triad_), workspace);
    });
    return absl::OkStatus();
  }

  // Decoding as engines run it, against the triad counting the K and V bytes read (no
  // peer: SDPA has no paged cache and no per-sequence lengths): one sequence in a paged
  // bfloat16 cache (pages of 64 tokens in shuffled order, vLLM's block table), and 16
  // sequences of mixed lengths (1024 to 8191 tokens; a bshd cache of capacity 8192)
  // decoded in one call (kv_lengths), float32; the paged row again with bfloat16 queries
  // (a bf16 model, on the bf16 dot products where the CPU has faster ones).
  absl::Status BenchDecodePaged() { return BenchDecodeEngine(/*paged=*/true); }
  absl::Status BenchDecodePagedBf16() { return BenchDecodeEngine(/*paged=*/true, /*bf16_q=*/true); }
  absl::Status BenchDecodeBatched() { return BenchDecodeEngine(/*paged=*/false); }
  absl::Status BenchDecodeEngine(bool paged, bool bf16_q = false) {
    const int64_t d = head_dim_, page = q_ ? 16 : 64;
    const int64_t batch = paged ? 1 : (q_ ? 4 : 16), cap = paged ? (q_ ? 2048 : 32768) : (q_ ? 512 : 8192);
    std::unique_ptr<Problem> p = MakeProblem(o_.threads, batch, q_ ? 8 : 32, q_ ? 2 : 8, 1, cap, d, false);
    std::vector<int64_t> lengths(static_cast<size_t>(batch));
    int64_t used = 0;
    for (int64_t b = 0; b < batch; ++b) {
      lengths[b] = paged ? cap : cap / 8 + (b * 7919) % (cap - cap / 8);
      used += lengths[b];
    }
    p->args.kv_lengths = lengths;
    std::vector<int64_t> table;
    if (paged) {
      table.resize(static_cast<size_t>(cap / page));
      for (size_t i = 0; i < table.size(); ++i) table[i] = static_cast<int64_t>(i);
      std::shuffle(table.begin(), table.end(), std::mt19937_64(5));
      p->args.pages = {table, page, cap / page};
      p->args.k = p->args.v = att::Strides{page * p->hkv * d, p->hkv * d, d};
      RoundKvToBf16(*p);
    }
    const double kv_bytes = 2.0 * static_cast<double>(used * p->hkv * d) * (paged ? 2.0 : 4.0);
    const std::string name =
        paged ? absl::StrFormat("decode %s q, paged bf16 cache %s (GQA, pages of %d in shuffled order)",
                                bf16_q ? "bf16" : "f32", p->Shape(), page)
              : absl::StrFormat("decode f32 b%d h%d/%d, %d sequences of %d-%d keys in one call (GQA)",
                                batch, p->hq, p->hkv, batch, cap / 8, cap - 1);
    const int decode_reps = q_ ? reps_ : 10;
    Progress(name);
    MeasureLimits();
    TriadBeside beside(o_.threads, q_);
    double best = 1e300;
    for (int round = 0; round < (q_ ? rounds_ : 7); ++round) {
      triad_ = std::max(triad_, beside.Measure());
      absl::StatusOr<double> t = !paged  ? TimeForward(*p, o_.threads, decode_reps)
                                 : bf16_q ? TimeForwardBf16All(*p, o_.threads, decode_reps)
                                          : TimeForwardBf16Cache(*p, o_.threads, decode_reps);
      if (!t.ok()) return t.status();
      triad_ = std::max(triad_, beside.Add(kv_bytes / *t * 1e-9));
      best = std::min(best, *t);
    }
    absl::StatusOr<int64_t> ws = att::CpuForwardWorkspaceBytes(p->args, {o_.threads, 0, 0});
    if (!ws.ok()) return ws.status();
    const double gbs = kv_bytes / best * 1e-9;
    const std::string workspace = Mib(*ws);
    rows_.push_back([=] {
      Row(name, absl::StrFormat("%.2f ms, %.1f GB/s of K and V", best * 1e3, gbs), "", "",
          beside.Cell(gbs, triad_), workspace);
    });
    return absl::OkStatus();
  }

  // Memory at a long sequence: the workspace stays O(s x d); s x s scores never exist.
  absl::Status BenchMemory() {
    const int64_t sl = q_ ? 4096 : 65536, d = head_dim_;
    std::unique_ptr<Problem> p = MakeProblem(o_.threads, 1, 1, 1, sl, sl, d, true);
    const std::string name = absl::StrFormat("memory: attention fwd f32 %s causal", p->Shape());
    Progress(name);
    MeasureLimits();
    absl::StatusOr<int64_t> ws = att::CpuForwardWorkspaceBytes(p->args, {o_.threads, 0, 0});
    if (!ws.ok()) return ws.status();
    absl::Status status;
    double sec = 0;
    const int64_t growth = PeakRssGrowth([&] {
      sec = BestSeconds(1, [&] {
        status = att::CpuForward(p->args, p->q.data(), p->k.data(), p->v.data(), p->o.data(),
                                 nullptr, {o_.threads, 0, 0});
      });
    });
    if (!status.ok()) return status;
    const double scores = 4.0 * static_cast<double>(sl) * static_cast<double>(sl);
    const double gflops = p->Flops() / sec * 1e-9;
    const std::string memory =
        absl::StrFormat("%s = %.1f floats per token x d; peak RSS +%s", Mib(*ws),
                        static_cast<double>(*ws) / 4.0 / static_cast<double>(sl * d),
                        growth >= 0 ? Mib(static_cast<double>(growth)) : "n/a");
    rows_.push_back([=] {
      Row(name, absl::StrFormat("%.2f s, %.1f GFLOP/s", sec, gflops),
          absl::StrFormat("s x s float scores would take %s", Mib(scores)), "",
          absl::StrFormat("%.0f%% of FMA peak", 100.0 * gflops / peak_), memory);
    });
    return absl::OkStatus();
  }

  // GroupPE's forward on two problems, alternated (ours[0], ours[1]), no peer.
  absl::StatusOr<Compared> OursTwice(Problem& first, Problem& second) {
    return BackToBack(
        rounds_,
        [&]() -> absl::StatusOr<std::vector<double>> {
          absl::StatusOr<double> a = TimeForward(first, o_.threads, reps_);
          if (!a.ok()) return a.status();
          absl::StatusOr<double> b = TimeForward(second, o_.threads, reps_);
          if (!b.ok()) return b.status();
          return std::vector<double>{*a, *b};
        },
        [] { return std::vector<std::string>{}; });
  }

  // What inference engines add, against the same kernel without it, alternated
  // (descriptor.h, WINDOW, SOFTCAP AND SINKS): a causal sliding window of w keys over s
  // tokens against s / w sequences of w keys (the same allowed pairs, without a window:
  // the cost of w keys per query; target <= 1.2x); the softcap (Gemma 2's 50) and a sink
  // per head on the causal forward (target <= 5% each).
  absl::Status BenchEngineFeatures() {
    const int64_t w = q_ ? 128 : 1024, sl = q_ ? 1024 : 16384, h = q_ ? 4 : 8, d = head_dim_;
    {
      std::unique_ptr<Problem> win = MakeProblem(o_.threads, 1, h, h, sl, sl, d, true);
      win->args.window_left = w - 1;
      std::unique_ptr<Problem> dense = MakeProblem(o_.threads, sl / w, h, h, w, w, d, false);
      const std::string name =
          absl::StrFormat("attention fwd f32 %s causal, window %d vs %d keys per query",
                          win->Shape(), w, w);
      Progress(name);
      MeasureLimits();
      absl::StatusOr<Compared> c = OursTwice(*win, *dense);
      if (!c.ok()) return c.status();
      const double tw = c->ours[0], td = c->ours[1];
      const double flops = 4.0 * double(d) * double(h) * (double(sl) * w - 0.5 * double(w) * (w - 1));
      rows_.push_back([=] {
        Row(name, absl::StrFormat("%.1f ms vs %.1f ms: %.2fx the dense time", tw * 1e3, td * 1e3, tw / td),
            "", "", absl::StrFormat("%.0f%% of FMA peak", 100.0 * flops / tw * 1e-9 / peak_), "");
      });
    }
    const std::vector<float> sinks(static_cast<size_t>(heads_), 0.5f);
    for (const int feature : {0, 1}) {
      std::unique_ptr<Problem> with = MakeProblem(o_.threads, 1, heads_, heads_, seq_len_, seq_len_, d, true);
      std::unique_ptr<Problem> without = MakeProblem(o_.threads, 1, heads_, heads_, seq_len_, seq_len_, d, true);
      if (feature == 0) with->args.softcap = 50.0;
      if (feature == 1) with->args.sinks = sinks;
      const std::string name = absl::StrFormat("attention fwd f32 %s causal, %s vs none",
                                               with->Shape(), feature == 0 ? "softcap" : "sinks");
      Progress(name);
      MeasureLimits();
      absl::StatusOr<Compared> c = OursTwice(*with, *without);
      if (!c.ok()) return c.status();
      const double ta = c->ours[0], tb = c->ours[1];
      rows_.push_back([=] {
        Row(name, absl::StrFormat("%.1f ms vs %.1f ms: %+.1f%%", ta * 1e3, tb * 1e3, 100.0 * (ta / tb - 1.0)),
            "", "", "", "");
      });
    }
    return absl::OkStatus();
  }

  // Scaling: every thread against one, alternated.
  absl::Status BenchScaling() {
    const int64_t sl = q_ ? 256 : 2048;
    std::unique_ptr<Problem> p = MakeProblem(o_.threads, 1, heads_, heads_, sl, sl, head_dim_, false);
    const std::string name =
        absl::StrFormat("scaling: attention fwd f32 %s, %d threads vs 1", p->Shape(), o_.threads);
    Progress(name);
    absl::StatusOr<Compared> c = BackToBack(
        rounds_,
        [&]() -> absl::StatusOr<std::vector<double>> {
          absl::StatusOr<double> all = TimeForward(*p, o_.threads, reps_);
          if (!all.ok()) return all.status();
          absl::StatusOr<double> one = TimeForward(*p, 1, reps_);
          if (!one.ok()) return one.status();
          return std::vector<double>{*all, *one};
        },
        [] { return std::vector<std::string>{}; });
    if (!c.ok()) return c.status();
    const double all = c->ours[0], one = c->ours[1];
    const int threads = o_.threads;
    rows_.push_back([=] {
      Row(name, absl::StrFormat("%.1f ms vs %.1f ms: %.2fx", all * 1e3, one * 1e3, one / all),
          "", "", absl::StrFormat("%.0f%% of ideal", 100.0 * one / all / threads), "");
    });
    return absl::OkStatus();
  }

  // RoPE on q and k, against PyTorch eager and torch.compile.
  absl::Status BenchRope() {
    const int64_t rs = q_ ? 256 : 4096, rh = q_ ? 8 : 32, rd = 128;
    const double bytes = 2.0 * 2.0 * sizeof(float) * static_cast<double>(rs * rh * rd);
    const std::string base = absl::StrFormat("rope,s=%d,h=%d,d=%d", rs, rh, rd);
    const std::string name = absl::StrFormat("RoPE on q and k, %d x %d x %d f32 each", rs, rh, rd);
    Progress(name);
    MeasureLimits();
    TriadBeside beside(o_.threads, q_);
    // Seven rounds, as decode: the host's bandwidth swings within seconds, and the median of
    // the paired ratios is what the row reports.
    absl::StatusOr<Compared> c = BackToBack(
        q_ ? rounds_ : 7,
        [&]() -> absl::StatusOr<std::vector<double>> {
          triad_ = std::max(triad_, beside.Measure());
          absl::StatusOr<double> t = RopeQkSeconds(rs, rh, rd, o_.threads, reps_);
          if (t.ok()) triad_ = std::max(triad_, beside.Add(bytes / *t * 1e-9));
          return Single(t);
        },
        [&] { return peer_.Run({base, base + ",compile=1"}, reps_); });
    if (!c.ok()) return c.status();
    const double sec = c->ours[0], gbs = bytes / sec * 1e-9;
    for (int k = 0; k < 2; ++k) {
      const std::string line = c->peer[k];
      rows_.push_back([=] {
        const double ps = JsonNumber(line, "seconds");
        Row(name, absl::StrFormat("%.2f ms, %.1f GB/s", sec * 1e3, gbs),
            std::isfinite(ps) ? absl::StrFormat("%s %.2f ms, %.1f GB/s (%.0f%% of triad)",
                                                k == 0 ? "eager" : "torch.compile", ps * 1e3,
                                                bytes / ps * 1e-9,
                                                100.0 * bytes / ps * 1e-9 / triad_)
                              : (k == 0 ? "eager: " : "torch.compile: ") + peer_.Why(line),
            Ratio(ps, sec), beside.Cell(gbs, triad_), "");
      });
    }
    return absl::OkStatus();
  }

  // The best bfloat16 limit this CPU has (issue 20): the AMX tiles' peak where they are
  // usable, else the dot products' (vdpbf16ps), else the float32 FMA peak; and its name.
  std::pair<double, const char*> Bf16Limit() const {
    if (amx_peak_ > 0 && amx_peak_ >= bf16_peak_) return {amx_peak_, "the AMX bf16 peak"};
    if (bf16_peak_ > 0) return {bf16_peak_, "the bf16 dot peak"};
    return {peak_, "the f32 FMA peak"};
  }

  // The limits' rows, then every workload's row, against the best limits of the run.
  void PrintRows() const {
    Row("float32 FMA peak, best in this run", absl::StrFormat("%.1f GFLOP/s", peak_), "", "",
        "1.00", "");
    Row("bfloat16 dot-product peak (vdpbf16ps), best in this run",
        bf16_peak_ > 0 ? absl::StrFormat("%.1f GFLOP/s (%.2fx the FMA peak)", bf16_peak_,
                                         bf16_peak_ / peak_)
                       : std::string("no AVX512_BF16"),
        "", "", bf16_peak_ > 0 ? "1.00" : "", "");
    Row("bfloat16 AMX tile peak (TDPBF16PS), best in this run",
        amx_peak_ > 0 ? absl::StrFormat("%.1f GFLOP/s (%.2fx the FMA peak)", amx_peak_,
                                        amx_peak_ / peak_)
                      : std::string("no usable AMX-BF16"),
        "", "", amx_peak_ > 0 ? "1.00" : "", "");
    const int nodes = measure::NumaNodeCount();
    Row("triad bandwidth, best in this run",
        absl::StrFormat("%.1f GB/s (%d NUMA node%s)", triad_, nodes, nodes == 1 ? "" : "s"), "",
        "", "1.00", "");
    // The paths the rows below took: the attention kernels' instruction set (Highway's
    // run-time choice) and the bfloat16 arithmetic.
    Row("paths chosen at run time",
        absl::StrCat("f32 kernels: ", att::CpuAttentionIsa(), "; bf16: ",
                     att::CpuBf16AutoUsesDotProducts() ? "vdpbf16ps dot products"
                                                       : "widened to f32 (no faster bf16 dots)"),
        "", "", "", "");
    for (const std::function<void()>& row : rows_) row();
  }

  int64_t SweepHeads() const { return q_ ? 2 : 4; }

  // Forward time against sequence length, non-causal then causal (attention_vs_seqlen.png).
  absl::StatusOr<std::vector<SweepPoint>> MeasureAttentionSweep() {
    const std::vector<int64_t> lengths =
        q_ ? std::vector<int64_t>{64, 128, 256}
           : std::vector<int64_t>{512, 1024, 2048, 4096, 8192, 16384};
    std::vector<std::string> cases;
    std::vector<std::unique_ptr<Problem>> problems;
    for (const bool causal : {false, true}) {
      for (const int64_t sl : lengths) {
        problems.push_back(MakeProblem(o_.threads, 1, SweepHeads(), SweepHeads(), sl, sl, head_dim_, causal));
        cases.push_back(problems.back()->PeerCase("sdpa"));
      }
    }
    absl::StatusOr<Compared> c = BackToBack(
        q_ ? 1 : 2,
        [&]() -> absl::StatusOr<std::vector<double>> {
          std::vector<double> t;
          for (const std::unique_ptr<Problem>& p : problems) {
            absl::StatusOr<double> sec = TimeForward(*p, o_.threads, p->sq >= 8192 ? 1 : reps_);
            if (!sec.ok()) return sec.status();
            t.push_back(*sec);
          }
          return t;
        },
        [&] { return peer_.Run(cases, 2); });
    if (!c.ok()) return c.status();
    std::vector<SweepPoint> sweep;
    for (size_t i = 0; i < problems.size(); ++i) {
      sweep.push_back({problems[i]->sq, problems[i]->causal, c->ours[i],
                       JsonNumber(c->peer[i], "seconds")});
    }
    return sweep;
  }

  void PrintAttentionSweep(const std::vector<SweepPoint>& sweep) const {
    std::printf("\nAttention forward f32, b1 h%lld d%lld, time against sequence length:\n\n",
                static_cast<long long>(SweepHeads()), static_cast<long long>(head_dim_));
    std::printf("| s | causal | GroupPE (ms) | PyTorch SDPA (ms) | GroupPE / SDPA |\n");
    std::printf("|---|---|---|---|---|\n");
    for (const SweepPoint& pt : sweep) {
      std::printf("| %lld | %s | %.2f | %s | %s |\n", static_cast<long long>(pt.s),
                  pt.causal ? "yes" : "no", pt.ours_sec * 1e3,
                  std::isfinite(pt.peer_sec) ? absl::StrFormat("%.2f", pt.peer_sec * 1e3).c_str()
                                             : "-",
                  Ratio(pt.peer_sec, pt.ours_sec).c_str());
    }
  }

  // RoPE bandwidth against sequence length (rope_bandwidth.png).
  absl::StatusOr<std::vector<RopePoint>> MeasureRopeSweep() {
    std::vector<std::string> cases;
    std::vector<int64_t> lengths;
    for (int64_t rs = q_ ? 16 : 256; rs <= (q_ ? 256 : 16384); rs *= 4) {
      lengths.push_back(rs);
      cases.push_back(absl::StrFormat("rope,s=%d,h=32,d=128", rs));
    }
    // Cheap: more rounds and repetitions than the attention sweep.
    absl::StatusOr<Compared> c = BackToBack(
        q_ ? 1 : 3,
        [&]() -> absl::StatusOr<std::vector<double>> {
          std::vector<double> t;
          for (const int64_t rs : lengths) {
            absl::StatusOr<double> sec = RopeQkSeconds(rs, 32, 128, o_.threads, q_ ? reps_ : 5);
            if (!sec.ok()) return sec.status();
            t.push_back(*sec);
          }
          return t;
        },
        [&] { return peer_.Run(cases, q_ ? reps_ : 5); });
    if (!c.ok()) return c.status();
    std::vector<RopePoint> rope_sweep;
    for (size_t i = 0; i < lengths.size(); ++i) {
      const double bytes = 2.0 * 2.0 * sizeof(float) * static_cast<double>(lengths[i] * 32 * 128);
      rope_sweep.push_back({lengths[i], bytes, bytes / c->ours[i] * 1e-9,
                            bytes / JsonNumber(c->peer[i], "seconds") * 1e-9});
    }
    return rope_sweep;
  }

  // <out_dir>/bench.json (docs/measured/bench.json's format); returns its path.
  absl::StatusOr<std::string> WriteBenchJson(const std::vector<SweepPoint>& sweep,
                                             const std::vector<RopePoint>& rope_sweep) const {
    const std::string json_path = o_.out_dir + "/bench.json";
    std::ostringstream out;
    out << "{\"threads\": " << o_.threads << ", \"fma_peak_gflops\": " << JsonValue(peak_)
        << ", \"triad_gbs\": " << JsonValue(triad_) << ", \"isa\": \""
        << att::CpuAttentionIsa() << "\",\n \"attention_sweep\": [";
    for (size_t i = 0; i < sweep.size(); ++i) {
      out << (i ? ",\n  " : "\n  ") << "{\"s\": " << sweep[i].s
          << ", \"causal\": " << (sweep[i].causal ? "true" : "false")
          << ", \"heads\": " << SweepHeads() << ", \"head_dim\": " << head_dim_
          << ", \"grouppe_s\": " << JsonValue(sweep[i].ours_sec)
          << ", \"torch_s\": " << JsonValue(sweep[i].peer_sec) << "}";
    }
    out << "],\n \"rope_sweep\": [";
    for (size_t i = 0; i < rope_sweep.size(); ++i) {
      out << (i ? ",\n  " : "\n  ") << "{\"s\": " << rope_sweep[i].s
          << ", \"bytes\": " << JsonValue(rope_sweep[i].bytes)
          << ", \"grouppe_gbs\": " << JsonValue(rope_sweep[i].ours_gbs)
          << ", \"torch_eager_gbs\": " << JsonValue(rope_sweep[i].peer_gbs) << "}";
    }
    out << "]}\n";
    // All or nothing: a failed write leaves the previous bench.json whole.
    if (absl::Status s = inr::WriteTextFile(json_path, out.str()); !s.ok()) return s;
    return json_path;
  }

  // tools/peers/plot_bench.py's report on drawing the plots from bench.json (or why not).
  std::string DrawPlots(const std::string& json_path) const {
    return tools::DrawPlots(o_.python, o_.peers_dir, json_path, o_.out_dir);
  }

  const AttentionBenchOptions& o_;
  const bool q_;  // --quick
  const int reps_, rounds_;
  // The forward's shape (b1, heads_ x seq_len_ x head_dim_), shared by most workloads.
  const int64_t heads_, seq_len_, head_dim_;
  const TorchPeer peer_;
  double peak_, triad_;  // the best limits measured so far in this run
  double bf16_peak_ = 0;  // vdpbf16ps (Bf16DotPeakGflops), 0 without the instruction
  double amx_peak_ = 0;   // TDPBF16PS (AmxBf16PeakGflops), 0 without usable tiles
  std::vector<std::function<void()>> rows_;  // printed at the end, against peak_ and triad_
};

}  // namespace

Bf16PeerSetup Bf16PeerSetupAfterProbe(const std::string& line, int wait_status) {
  if (!line.empty()) return {};
  if (DiedOfSignal(wait_status, SIGILL)) {
    // The same kernels capped at AVX-512 BF16 still use the bf16 dot-product instructions.
    return {"ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16",
            " (oneDNN capped at AVX512_CORE_BF16: AMX raised SIGILL)"};
  }
  return {"", absl::StrCat(" (the bf16 probe run: ", DescribeExit(wait_status), ")")};
}

std::string DrawPlots(const std::string& python, const std::string& peers_dir,
                      const std::string& json_path, const std::string& out_dir) {
  if (!IsExecutable(python)) {
    return "plot_bench: no plots (no interpreter at " + python + "; run tools/setup_peers.sh)\n";
  }
  std::string plot_out;
  FILE* pipe = popen(absl::StrCat(kPeerTimeout, ShellQuote(python), " ",
                                  ShellQuote(peers_dir + "/plot_bench.py"), " ",
                                  ShellQuote(json_path), " ", ShellQuote(out_dir), " 2>&1")
                         .c_str(),
                     "r");
  if (pipe == nullptr) {
    return absl::StrCat("plot_bench: no plots (cannot start ", python, ": ",
                        std::strerror(errno), ")\n");
  }
  char buffer[1024];
  size_t got;
  while ((got = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0) plot_out.append(buffer, got);
  const int status = pclose(pipe);
  if (status != 0 && plot_out.find("plot_bench:") == std::string::npos) {
    if (!plot_out.empty() && plot_out.back() != '\n') plot_out += '\n';
    absl::StrAppend(&plot_out, "plot_bench: no plots (", python, " ", peers_dir,
                    "/plot_bench.py: ", DescribeExit(status), ")\n");
  }
  return plot_out;
}

AttentionBenchOptions AttentionBenchDefaults(const std::string& out_dir) {
  AttentionBenchOptions o;
  const char* ws = std::getenv("BUILD_WORKSPACE_DIRECTORY");
  const std::string root = ws != nullptr ? ws : ".";
  const char* py = std::getenv("GPE_PEER_PYTHON");
  o.python = py != nullptr ? py : root + "/.venv/bin/python3";
  o.peers_dir = root + "/tools/peers";
  o.out_dir = out_dir;
  return o;
}

absl::Status RunAttentionBench(const AttentionBenchOptions& options) {
  const AttentionBenchOptions& o = options;
  if (o.threads < 1 || !(o.fma_peak_gflops > 0) || !(o.triad_gbs > 0)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "attention bench: threads (%d), FMA peak (%g) and triad (%g) must be positive",
        o.threads, o.fma_peak_gflops, o.triad_gbs));
  }
  std::error_code ec;
  std::filesystem::create_directories(o.out_dir, ec);
  if (ec) {
    return absl::InvalidArgumentError(
        absl::StrCat("attention bench: cannot create '", o.out_dir, "': ", ec.message()));
  }
  return AttentionBench(o).Run();
}

}  // namespace tools
}  // namespace gpe
