#include "tools/bench_attention.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <system_error>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "attention/cpu/cpu_attention.h"
#include "attention/descriptor.h"
#include "encodings/sequence/rope.h"
#include "measure/machine_limits.h"
#include "measure/timing.h"

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

double JsonNumber(const std::string& json, const std::string& key) {
  const std::string needle = "\"" + key + "\":";
  const size_t at = json.find(needle);
  if (at == std::string::npos) return std::nan("");
  const char* start = json.c_str() + at + needle.size();
  char* end = nullptr;
  const double v = std::strtod(start, &end);
  return end == start ? std::nan("") : v;
}

std::string JsonString(const std::string& json, const std::string& key) {
  const std::string needle = "\"" + key + "\": \"";
  size_t at = json.find(needle);
  size_t skip = needle.size();
  if (at == std::string::npos) {
    at = json.find("\"" + key + "\":\"");
    skip = key.size() + 4;
  }
  if (at == std::string::npos) return "";
  std::string out;
  for (size_t i = at + skip; i < json.size() && json[i] != '"'; ++i) {
    if (json[i] == '\\' && i + 1 < json.size()) out += json[i++];
    out += json[i];
  }
  return out;
}

namespace {

namespace att = gpe::attention;
namespace seq = gpe::encodings::sequence;

// The best of `reps` timed runs of call() (an absl::Status); its first error instead.
template <class Call>
absl::StatusOr<double> BestSecondsOk(int reps, Call call) {
  absl::Status status;
  const double sec = BestSeconds(reps, [&] { status.Update(call()); });
  if (!status.ok()) return status;
  return sec;
}

// One untimed run of call() (warm-up; its error is returned), then BestSecondsOk.
template <class Call>
absl::StatusOr<double> WarmThenBestSeconds(int reps, Call call) {
  if (absl::Status status = call(); !status.ok()) return status;
  return BestSecondsOk(reps, call);
}

// One measurement as a list (what BackToBack's GroupPE side returns).
absl::StatusOr<std::vector<double>> Single(const absl::StatusOr<double>& seconds) {
  if (!seconds.ok()) return seconds.status();
  return std::vector<double>{*seconds};
}

// A field of /proc/self/status in bytes (VmRSS, VmHWM); -1 where unavailable.
int64_t ProcStatusBytes(const std::string& field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field + ":", 0) == 0) {
      return std::strtoll(line.c_str() + field.size() + 1, nullptr, 10) * 1024;
    }
  }
  return -1;
}

// Growth of the peak resident set while fn runs (bytes), measured by resetting the peak
// to the current RSS (Linux clear_refs "5") first; -1 where the kernel does not allow it.
template <class Fn>
int64_t PeakRssGrowth(Fn fn) {
  {
    std::ofstream reset("/proc/self/clear_refs");
    reset << "5";
    if (!reset) return -1;
  }
  const int64_t before = ProcStatusBytes("VmRSS");
  fn();
  const int64_t peak = ProcStatusBytes("VmHWM");
  return before < 0 || peak < 0 ? -1 : std::max<int64_t>(0, peak - before);
}

std::string Mib(double bytes) { return absl::StrFormat("%.1f MiB", bytes / (1 << 20)); }

// One attention problem in bshd layout with random inputs (normal, seed 1).
struct Problem {
  att::AttentionArgs args;
  std::vector<float> q, o;
  LargeFloats k, v;  // 2 MiB pages (as the triad's arrays): decoding streams them
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

std::unique_ptr<Problem> MakeProblem(int64_t b, int64_t hq, int64_t hkv, int64_t sq, int64_t sk,
                                     int64_t d, bool causal) {
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
  p->q.resize(static_cast<size_t>(b * sq * hq * d));
  p->o.resize(p->q.size());
  p->k = LargeFloats(b * sk * hkv * d);
  p->v = LargeFloats(b * sk * hkv * d);
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

// The PyTorch peer, run as a child process: one JSON line per case, in order. Lines are
// empty where the child died before printing them (e.g. a crash inside torch).
class TorchPeer {
 public:
  explicit TorchPeer(const AttentionBenchOptions& o) : o_(o) {}

  std::vector<std::string> Run(const std::vector<std::string>& cases, int reps,
                               const std::string& env = "") const {
    std::vector<std::string> lines(cases.size());
    if (!o_.peers || cases.empty()) return lines;
    std::string command = absl::StrCat(env, env.empty() ? "" : " ", o_.python, " ",
                                       o_.peers_dir, "/attention_torch.py ", o_.threads, " ", reps);
    for (const std::string& c : cases) absl::StrAppend(&command, " '", c, "'");
    absl::StrAppend(&command, " 2>/dev/null");
    std::string out;
    if (FILE* pipe = popen(command.c_str(), "r")) {
      char buffer[4096];
      size_t got;
      while ((got = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0) out.append(buffer, got);
      pclose(pipe);
    }
    size_t i = 0;
    for (absl::string_view line : absl::StrSplit(out, '\n', absl::SkipEmpty())) {
      if (i < lines.size()) lines[i++] = std::string(line);
    }
    return lines;
  }

  std::string RunOne(const std::string& c, int reps, const std::string& env = "") const {
    return Run({c}, reps, env)[0];
  }

  // What the peer column says when the line has no time.
  std::string Why(const std::string& line) const {
    if (!o_.peers) return "not run (--no-peers)";
    if (line.empty()) return "PyTorch died or is missing (tools/setup_peers.sh)";
    std::string why = JsonString(line, "error");
    if (why.empty()) why = JsonString(line, "skipped");
    if (why.rfind("no torch", 0) == 0) return "PyTorch not installed (tools/setup_peers.sh)";
    return "PyTorch: " + why;
  }

 private:
  const AttentionBenchOptions& o_;
};

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
  std::fill(q.begin(), q.end(), 0.5f);
  std::fill(k.begin(), k.end(), -0.25f);
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

// GroupPE then the peer, back to back, `rounds` times; keeps the best time of each over
// the rounds (for the peer, per case the line with the least "seconds"), so that a burst
// of load from other processes hits both or is outlasted. A peer with no time in the first
// round (missing, failing) is not asked again.
struct Compared {
  std::vector<double> ours;       // best seconds per GroupPE measurement
  std::vector<std::string> peer;  // per peer case, its best line
};

absl::StatusOr<Compared> BackToBack(
    int rounds, const std::function<absl::StatusOr<std::vector<double>>()>& ours,
    const std::function<std::vector<std::string>()>& peer) {
  Compared c;
  bool peer_timed = true;
  for (int r = 0; r < rounds; ++r) {
    absl::StatusOr<std::vector<double>> t = ours();
    if (!t.ok()) return t.status();
    if (c.ours.empty()) c.ours = *t;
    for (size_t i = 0; i < t->size() && i < c.ours.size(); ++i) {
      c.ours[i] = std::min(c.ours[i], (*t)[i]);
    }
    if (!peer_timed) continue;
    const std::vector<std::string> lines = peer();
    if (c.peer.empty()) c.peer = lines;
    peer_timed = false;
    for (size_t i = 0; i < lines.size() && i < c.peer.size(); ++i) {
      const double now = JsonNumber(lines[i], "seconds"), best = JsonNumber(c.peer[i], "seconds");
      if (std::isfinite(now) && !(best <= now)) c.peer[i] = lines[i];
      peer_timed = peer_timed || std::isfinite(now);
    }
  }
  return c;
}

// Bandwidth-bound rows: the triad measured just before and just after each round's GroupPE
// run as well, since the memory bandwidth a shared host leaves swings by 1.5-2x within
// seconds (30 to 67 GB/s here); the row gives, besides the fraction of the run's best
// triad, the median over rounds of GB/s over the larger of the two triads beside it.
class TriadBeside {
 public:
  TriadBeside(int threads, bool quick) : threads_(threads), quick_(quick) {}
  // Measures the triad now (before a round); returns it.
  double Measure() {
    before_ = Triad();
    return before_;
  }
  // Measures the triad again after the round just run, which read `gbs`; the round's
  // ratio is gbs over the larger triad (also on stderr, with the progress lines). Returns
  // the triad measured after.
  double Add(double gbs) {
    const double after = Triad(), beside = std::max(before_, after);
    ratios_.push_back(gbs / beside);
    std::fprintf(stderr,
                 "gpe bench:   round %d: triad %.1f GB/s, then %.1f GB/s, then triad %.1f GB/s "
                 "(%.0f%% of the larger)\n",
                 static_cast<int>(ratios_.size()), before_, gbs, after, 100.0 * gbs / beside);
    return after;
  }
  std::string Cell(double gbs, double best_triad) const {
    std::vector<double> r = ratios_;
    std::sort(r.begin(), r.end());
    if (r.empty()) return absl::StrFormat("%.0f%% of triad", 100.0 * gbs / best_triad);
    return absl::StrFormat(
        "%.0f%% of triad; %.0f%% of the triad measured beside it (median of %d rounds, %.0f-%.0f%%)",
        100.0 * gbs / best_triad, 100.0 * r[r.size() / 2], static_cast<int>(r.size()),
        100.0 * r.front(), 100.0 * r.back());
  }

 private:
  double Triad() const {
    return TriadBandwidthGBs(threads_, quick_ ? (int64_t{16} << 20) : (int64_t{256} << 20));
  }

  int threads_;
  bool quick_;
  double before_ = 0.0;
  std::vector<double> ratios_;
};

}  // namespace

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
  const bool q = o.quick;
  const int reps = q ? 2 : 3, rounds = q ? 1 : 3;
  const TorchPeer peer(o);
  auto fail = [](const absl::Status& s) {
    return absl::Status(s.code(), absl::StrCat("attention bench: ", s.message()));
  };

  // The limits again before every workload and at the end: on a machine shared with other
  // work they measure low at times (one of two cores taken halves the FMA peak), and a low
  // limit would flatter every fraction. The rows are printed at the end, against the best
  // limits of the whole run.
  // --quick measures them once, at the end (a smoke run, not a measurement).
  double peak = o.fma_peak_gflops, triad = o.triad_gbs;
  auto measure_limits = [&] {
    if (q) return;
    peak = std::max(peak, FmaPeakGflops(o.threads));
    triad = std::max(triad, TriadBandwidthGBs(o.threads, q ? (int64_t{16} << 20)
                                                           : (int64_t{256} << 20)));
  };
  std::vector<std::function<void()>> rows;
  auto progress = [](const std::string& what) {
    std::fprintf(stderr, "gpe bench: %s\n", what.c_str());
  };

  // Forward, the shape, non-causal and causal; then the same with RoPE in the kernel.
  const int64_t h = q ? 4 : 16, s = q ? 256 : 4096, d = q ? 64 : 128;
  absl::StatusOr<seq::RopeFrequencies> freqs = seq::DefaultRopeFrequencies(d, 10000.0);
  if (!freqs.ok()) return fail(freqs.status());
  seq::RopeOptions ro;
  ro.head_dim = d;
  ro.rotary_dim = d;
  absl::StatusOr<seq::Rope> rope = seq::Rope::Create(ro, *freqs);
  if (!rope.ok()) return fail(rope.status());
  const att::RopeRowTransform rope_rows(*rope);
  for (const bool with_rope : {false, true}) {
    for (const bool causal : {false, true}) {
      std::unique_ptr<Problem> p = MakeProblem(1, h, h, s, s, d, causal);
      if (with_rope) p->args.q_transform = p->args.k_transform = &rope_rows;
      const std::string name = absl::StrFormat("attention fwd f32 %s%s%s", p->Shape(),
                                               causal ? " causal" : "",
                                               with_rope ? ", RoPE in kernel" : "");
      progress(name);
      measure_limits();
      absl::StatusOr<Compared> c = BackToBack(
          rounds, [&] { return Single(TimeForward(*p, o.threads, reps)); },
          [&] { return peer.Run({p->PeerCase(with_rope ? "rope_sdpa" : "sdpa")}, reps); });
      if (!c.ok()) return fail(c.status());
      absl::StatusOr<int64_t> ws = att::CpuForwardWorkspaceBytes(p->args, {o.threads, 0, 0});
      if (!ws.ok()) return fail(ws.status());
      const double sec = c->ours[0], flops = p->Flops();
      const std::string line = c->peer[0], workspace = Mib(*ws);
      rows.push_back([=, &peer, &peak] {
        const FlopsCells cells = AttentionCells(peer, line, sec, flops, peak,
                                                with_rope ? "rotate-half + SDPA" : "SDPA");
        Row(name, cells.ours, cells.peer, cells.ratio, cells.limit, workspace);
      });
    }
  }

  // Backward (FlashAttention-2's, from the forward's o and lse) and the bfloat16 forward,
  // each GroupPE then PyTorch back to back.
  {
    std::unique_ptr<Problem> p = MakeProblem(1, h, h, s, s, d, false);
    const std::string shape = p->Shape();
    const double flops = p->Flops();
    const std::string bwd_name = absl::StrFormat("attention bwd f32 %s (flops 2.5x fwd)", shape);
    progress(bwd_name);
    measure_limits();
    std::vector<float> lse(static_cast<size_t>(p->sq * p->hq)), d_o(p->q.size());
    std::vector<float> dq(p->q.size()), dk(p->k.size()), dv(p->v.size());
    {
      std::mt19937_64 rng(2);
      std::normal_distribution<float> normal(0.0f, 1.0f);
      for (float& x : d_o) x = normal(rng);
    }
    att::CpuAttentionOptions opt;
    opt.num_threads = o.threads;
    absl::Status st = att::CpuForward(p->args, p->q.data(), p->k.data(), p->v.data(),
                                      p->o.data(), lse.data(), opt);
    if (!st.ok()) return fail(st);
    absl::StatusOr<Compared> c = BackToBack(
        rounds,
        [&] {
          return Single(BestSecondsOk(reps, [&] {
            return att::CpuBackward(p->args, p->q.data(), p->k.data(), p->v.data(), p->o.data(),
                                    lse.data(), d_o.data(), dq.data(), dk.data(), dv.data(),
                                    nullptr, opt);
          }));
        },
        [&] { return peer.Run({p->PeerCase("sdpa_backward")}, reps); });
    if (!c.ok()) return fail(c.status());
    {
      const double sec = c->ours[0];
      const std::string line = c->peer[0];
      rows.push_back([=, &peer, &peak] {
        const FlopsCells cells = AttentionCells(peer, line, sec, 2.5 * flops, peak, "SDPA bwd");
        Row(bwd_name, cells.ours, cells.peer, cells.ratio, cells.limit, "");
      });
    }

    // bfloat16 in and out, float32 accumulation; GroupPE with the bf16 dot products
    // (vdpbf16ps) where the CPU has them, else widened to float32.
    const std::string bf_name = absl::StrFormat("attention fwd bf16 %s", shape);
    progress(bf_name);
    measure_limits();
    std::vector<seq::BFloat16> qb(p->q.size()), kb(p->k.size()), vb(p->v.size()), ob(p->o.size());
    for (size_t i = 0; i < qb.size(); ++i) qb[i] = seq::ToBFloat16(p->q[i]);
    for (size_t i = 0; i < kb.size(); ++i) kb[i] = seq::ToBFloat16(p->k[i]);
    for (size_t i = 0; i < vb.size(); ++i) vb[i] = seq::ToBFloat16(p->v[i]);
    att::CpuAttentionOptions bopt = opt;
    // The default (kAuto): the dot products where this CPU runs them faster than FMAs.
    const std::string bf16_case = p->PeerCase("sdpa", "bfloat16");
    std::string peer_env, note;
    if (o.peers && peer.RunOne(bf16_case, 1).empty()) {
      // oneDNN's AMX path dies with SIGILL on VMs that list AMX but do not enable it: the
      // same kernels capped at AVX-512 BF16 still use the bf16 dot-product instructions.
      peer_env = "ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16";
      note = " (oneDNN capped at AVX512_CORE_BF16: AMX raised SIGILL)";
    }
    absl::StatusOr<Compared> cb = BackToBack(
        rounds,
        [&] {
          return Single(WarmThenBestSeconds(reps, [&] {
            return att::CpuForward(p->args, qb.data(), kb.data(), vb.data(), ob.data(), nullptr,
                                   bopt);
          }));
        },
        [&] { return peer.Run({bf16_case}, reps, peer_env); });
    if (!cb.ok()) return fail(cb.status());
    const double sec = cb->ours[0];
    const std::string bf = cb->peer[0];
    const std::string how = att::CpuBf16AutoUsesDotProducts() ? "bf16 dot products"
                            : att::CpuHasBf16DotProducts() ? "widened to f32: dot products not faster here"
                                                           : "widened to f32: no bf16 dot products";
    rows.push_back([=, &peer, &peak] {
      const FlopsCells cells =
          AttentionCells(peer, bf, sec, flops, peak, "SDPA bf16", "the f32 FMA peak");
      Row(bf_name, absl::StrCat(cells.ours, " (", how, ")"), cells.peer + note, cells.ratio,
          cells.limit, "");
    });
  }

  // Decode: one query against a long KV cache; reading K and V is the whole cost. The
  // cache as bshd (every kv head of a token adjacent) and as bhsd (each head's rows
  // adjacent: PyTorch's layout, the peer's own).
  for (const bool bhsd : {false, true}) {
    std::unique_ptr<Problem> p = MakeProblem(1, q ? 8 : 32, q ? 2 : 8, 1, q ? 2048 : 32768,
                                             d, false);
    if (bhsd) p->args.k = p->args.v = att::Strides{p->hkv * p->sk * d, d, p->sk * d};
    const int decode_reps = q ? reps : 10;
    const std::string name =
        absl::StrFormat("decode f32 %s (GQA, %s cache)", p->Shape(), bhsd ? "bhsd" : "bshd");
    const double kv_bytes = p->KvBytes();
    progress(name);
    measure_limits();
    TriadBeside beside(o.threads, q);
    absl::StatusOr<Compared> c = BackToBack(
        q ? rounds : 7,
        [&]() -> absl::StatusOr<std::vector<double>> {
          triad = std::max(triad, beside.Measure());
          absl::StatusOr<double> t = TimeForward(*p, o.threads, decode_reps);
          if (t.ok()) triad = std::max(triad, beside.Add(kv_bytes / *t * 1e-9));
          return Single(t);
        },
        [&] { return peer.Run({p->PeerCase("sdpa")}, decode_reps); });
    if (!c.ok()) return fail(c.status());
    absl::StatusOr<int64_t> ws = att::CpuForwardWorkspaceBytes(p->args, {o.threads, 0, 0});
    if (!ws.ok()) return fail(ws.status());
    const double sec = c->ours[0], gbs = kv_bytes / sec * 1e-9;
    const double peer_sec = JsonNumber(c->peer[0], "seconds");
    const std::string line = c->peer[0], workspace = Mib(*ws);
    rows.push_back([=, &peer, &triad] {
      Row(name, absl::StrFormat("%.2f ms, %.1f GB/s of K and V", sec * 1e3, gbs),
          std::isfinite(peer_sec)
              ? absl::StrFormat("SDPA %.2f ms, %.1f GB/s (%.0f%% of triad)", peer_sec * 1e3,
                                kv_bytes / peer_sec * 1e-9,
                                100.0 * kv_bytes / peer_sec * 1e-9 / triad)
              : peer.Why(line),
          Ratio(peer_sec, sec), beside.Cell(gbs, triad), workspace);
    });
  }

  // Memory at a long sequence: the workspace stays O(s x d); s x s scores never exist.
  {
    const int64_t sl = q ? 4096 : 65536;
    std::unique_ptr<Problem> p = MakeProblem(1, 1, 1, sl, sl, d, true);
    const std::string name = absl::StrFormat("memory: attention fwd f32 %s causal", p->Shape());
    progress(name);
    measure_limits();
    absl::StatusOr<int64_t> ws = att::CpuForwardWorkspaceBytes(p->args, {o.threads, 0, 0});
    if (!ws.ok()) return fail(ws.status());
    absl::Status status;
    double sec = 0;
    const int64_t growth = PeakRssGrowth([&] {
      sec = BestSeconds(1, [&] {
        status = att::CpuForward(p->args, p->q.data(), p->k.data(), p->v.data(), p->o.data(),
                                 nullptr, {o.threads, 0, 0});
      });
    });
    if (!status.ok()) return fail(status);
    const double scores = 4.0 * static_cast<double>(sl) * static_cast<double>(sl);
    const double gflops = p->Flops() / sec * 1e-9;
    const std::string memory =
        absl::StrFormat("%s = %.1f floats per token x d; peak RSS +%s", Mib(*ws),
                        static_cast<double>(*ws) / 4.0 / static_cast<double>(sl * d),
                        growth >= 0 ? Mib(static_cast<double>(growth)) : "n/a");
    rows.push_back([=, &peak] {
      Row(name, absl::StrFormat("%.2f s, %.1f GFLOP/s", sec, gflops),
          absl::StrFormat("s x s float scores would take %s", Mib(scores)), "",
          absl::StrFormat("%.0f%% of FMA peak", 100.0 * gflops / peak), memory);
    });
  }

  // Scaling: every thread against one, alternated.
  {
    std::unique_ptr<Problem> p = MakeProblem(1, h, h, q ? 256 : 2048, q ? 256 : 2048, d, false);
    const std::string name =
        absl::StrFormat("scaling: attention fwd f32 %s, %d threads vs 1", p->Shape(), o.threads);
    progress(name);
    absl::StatusOr<Compared> c = BackToBack(
        rounds,
        [&]() -> absl::StatusOr<std::vector<double>> {
          absl::StatusOr<double> all = TimeForward(*p, o.threads, reps);
          if (!all.ok()) return all.status();
          absl::StatusOr<double> one = TimeForward(*p, 1, reps);
          if (!one.ok()) return one.status();
          return std::vector<double>{*all, *one};
        },
        [] { return std::vector<std::string>{}; });
    if (!c.ok()) return fail(c.status());
    const double all = c->ours[0], one = c->ours[1];
    rows.push_back([=] {
      Row(name, absl::StrFormat("%.1f ms vs %.1f ms: %.2fx", all * 1e3, one * 1e3, one / all),
          "", "", absl::StrFormat("%.0f%% of ideal", 100.0 * one / all / o.threads), "");
    });
  }

  // RoPE on q and k.
  {
    const int64_t rs = q ? 256 : 4096, rh = q ? 8 : 32, rd = 128;
    const double bytes = 2.0 * 2.0 * sizeof(float) * static_cast<double>(rs * rh * rd);
    const std::string base = absl::StrFormat("rope,s=%d,h=%d,d=%d", rs, rh, rd);
    const std::string name = absl::StrFormat("RoPE on q and k, %d x %d x %d f32 each", rs, rh, rd);
    progress(name);
    measure_limits();
    TriadBeside beside(o.threads, q);
    // Seven rounds, as decode: the host's bandwidth swings within seconds, and the median of
    // the paired ratios is what the row reports.
    absl::StatusOr<Compared> c = BackToBack(
        q ? rounds : 7,
        [&]() -> absl::StatusOr<std::vector<double>> {
          triad = std::max(triad, beside.Measure());
          absl::StatusOr<double> t = RopeQkSeconds(rs, rh, rd, o.threads, reps);
          if (t.ok()) triad = std::max(triad, beside.Add(bytes / *t * 1e-9));
          return Single(t);
        },
        [&] { return peer.Run({base, base + ",compile=1"}, reps); });
    if (!c.ok()) return fail(c.status());
    const double sec = c->ours[0], gbs = bytes / sec * 1e-9;
    for (int k = 0; k < 2; ++k) {
      const std::string line = c->peer[k];
      rows.push_back([=, &peer, &triad] {
        const double ps = JsonNumber(line, "seconds");
        Row(name, absl::StrFormat("%.2f ms, %.1f GB/s", sec * 1e3, gbs),
            std::isfinite(ps) ? absl::StrFormat("%s %.2f ms, %.1f GB/s (%.0f%% of triad)",
                                                k == 0 ? "eager" : "torch.compile", ps * 1e3,
                                                bytes / ps * 1e-9,
                                                100.0 * bytes / ps * 1e-9 / triad)
                              : (k == 0 ? "eager: " : "torch.compile: ") + peer.Why(line),
            Ratio(ps, sec), beside.Cell(gbs, triad), "");
      });
    }
  }

  // Sweeps for the plots.
  progress("sweeps for the plots");
  const int64_t sweep_heads = q ? 2 : 4;
  std::vector<SweepPoint> sweep;
  {
    const std::vector<int64_t> lengths =
        q ? std::vector<int64_t>{64, 128, 256}
          : std::vector<int64_t>{512, 1024, 2048, 4096, 8192, 16384};
    std::vector<std::string> cases;
    std::vector<std::unique_ptr<Problem>> problems;
    for (const bool causal : {false, true}) {
      for (const int64_t sl : lengths) {
        problems.push_back(MakeProblem(1, sweep_heads, sweep_heads, sl, sl, d, causal));
        cases.push_back(problems.back()->PeerCase("sdpa"));
      }
    }
    absl::StatusOr<Compared> c = BackToBack(
        q ? 1 : 2,
        [&]() -> absl::StatusOr<std::vector<double>> {
          std::vector<double> t;
          for (const std::unique_ptr<Problem>& p : problems) {
            absl::StatusOr<double> sec = TimeForward(*p, o.threads, p->sq >= 8192 ? 1 : reps);
            if (!sec.ok()) return sec.status();
            t.push_back(*sec);
          }
          return t;
        },
        [&] { return peer.Run(cases, 2); });
    if (!c.ok()) return fail(c.status());
    // The table's rows, against the best limits of the run.
    measure_limits();
    if (q) {
      peak = std::max(peak, FmaPeakGflops(o.threads));
      triad = std::max(triad, TriadBandwidthGBs(o.threads, int64_t{16} << 20));
    }
    Row("float32 FMA peak, best in this run", absl::StrFormat("%.1f GFLOP/s", peak), "", "",
        "1.00", "");
    Row("triad bandwidth, best in this run", absl::StrFormat("%.1f GB/s", triad), "", "", "1.00",
        "");
    for (const std::function<void()>& row : rows) row();
    std::printf("\nAttention forward f32, b1 h%lld d%lld, time against sequence length:\n\n",
                static_cast<long long>(sweep_heads), static_cast<long long>(d));
    std::printf("| s | causal | GroupPE (ms) | PyTorch SDPA (ms) | GroupPE / SDPA |\n");
    std::printf("|---|---|---|---|---|\n");
    for (size_t i = 0; i < problems.size(); ++i) {
      sweep.push_back({problems[i]->sq, problems[i]->causal, c->ours[i],
                       JsonNumber(c->peer[i], "seconds")});
      const SweepPoint& pt = sweep.back();
      std::printf("| %lld | %s | %.2f | %s | %s |\n", static_cast<long long>(pt.s),
                  pt.causal ? "yes" : "no", pt.ours_sec * 1e3,
                  std::isfinite(pt.peer_sec) ? absl::StrFormat("%.2f", pt.peer_sec * 1e3).c_str()
                                             : "-",
                  Ratio(pt.peer_sec, pt.ours_sec).c_str());
    }
  }
  std::vector<RopePoint> rope_sweep;
  {
    std::vector<std::string> cases;
    std::vector<int64_t> lengths;
    for (int64_t rs = q ? 16 : 256; rs <= (q ? 256 : 16384); rs *= 4) {
      lengths.push_back(rs);
      cases.push_back(absl::StrFormat("rope,s=%d,h=32,d=128", rs));
    }
    // Cheap: more rounds and repetitions than the attention sweep.
    absl::StatusOr<Compared> c = BackToBack(
        q ? 1 : 3,
        [&]() -> absl::StatusOr<std::vector<double>> {
          std::vector<double> t;
          for (const int64_t rs : lengths) {
            absl::StatusOr<double> sec = RopeQkSeconds(rs, 32, 128, o.threads, q ? reps : 5);
            if (!sec.ok()) return sec.status();
            t.push_back(*sec);
          }
          return t;
        },
        [&] { return peer.Run(cases, q ? reps : 5); });
    if (!c.ok()) return fail(c.status());
    for (size_t i = 0; i < lengths.size(); ++i) {
      const double bytes = 2.0 * 2.0 * sizeof(float) * static_cast<double>(lengths[i] * 32 * 128);
      rope_sweep.push_back({lengths[i], bytes, bytes / c->ours[i] * 1e-9,
                            bytes / JsonNumber(c->peer[i], "seconds") * 1e-9});
    }
  }

  // bench.json, then the plots.
  const std::string json_path = o.out_dir + "/bench.json";
  {
    std::ofstream out(json_path);
    out << "{\"threads\": " << o.threads << ", \"fma_peak_gflops\": " << JsonValue(peak)
        << ", \"triad_gbs\": " << JsonValue(triad) << ", \"isa\": \""
        << att::CpuAttentionIsa() << "\",\n \"attention_sweep\": [";
    for (size_t i = 0; i < sweep.size(); ++i) {
      out << (i ? ",\n  " : "\n  ") << "{\"s\": " << sweep[i].s
          << ", \"causal\": " << (sweep[i].causal ? "true" : "false")
          << ", \"heads\": " << sweep_heads << ", \"head_dim\": " << d
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
    if (!out) return absl::InternalError(absl::StrCat("attention bench: cannot write ", json_path));
  }
  std::string plot_out;
  if (FILE* pipe = popen(absl::StrCat(o.python, " ", o.peers_dir, "/plot_bench.py ", json_path,
                                      " ", o.out_dir, " 2>&1")
                             .c_str(),
                         "r")) {
    char buffer[1024];
    size_t got;
    while ((got = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0) plot_out.append(buffer, got);
    if (pclose(pipe) != 0 && plot_out.find("plot_bench:") == std::string::npos) {
      plot_out = "plot_bench: no plots (no interpreter at " + o.python +
                 "; run tools/setup_peers.sh)\n";
    }
  }
  std::printf("\nWrote %s\n%s", json_path.c_str(), plot_out.c_str());
  return absl::OkStatus();
}

}  // namespace tools
}  // namespace gpe
