// `gpe bench`'s attention and RoPE part: GroupPE's CPU attention (attention/cpu) and RoPE
// (encodings/sequence/rope.h) beside PyTorch on the same shapes and thread count, in the
// same run, as ratios and as fractions of the machine's limits (machine_limits.h).
//
// Rows it prints (markdown, the columns of `gpe bench`'s table: workload | GroupPE | peer |
// GroupPE / peer | of machine limit | extra memory):
//   - attention forward, float32, b1 h16 s4096 d128, non-causal and causal, against
//     torch SDPA; with RoPE inside the kernel against rotate-half RoPE then SDPA;
//   - attention backward (float32 and bfloat16) and the bfloat16 forward, against PyTorch's
//     on the same shapes;
//   - decode: 1 query, KV cache 32768, GQA 32 query heads over 8 KV heads, d128, as a
//     fraction of triad bandwidth for reading K and V once;
//   - engine features against the same kernel without them: a causal sliding window of
//     1024 keys over s16384 against 16 sequences of 1024 (the same pairs, no window), and
//     the logit softcap and per-head sinks on the causal forward;
//   - memory: s = 65536 causal, CpuForwardWorkspaceBytes and the measured growth of the
//     process's peak RSS, against the s x s score matrix a naive kernel would form;
//   - scaling: every thread against 1 thread;
//   - RoPE on q and k (4096 x 32 x 128 float32) against PyTorch eager and torch.compile.
// Then two sweeps, written to <out_dir>/bench.json and drawn by tools/peers/plot_bench.py
// (matplotlib) as attention_vs_seqlen.png and rope_bandwidth.png. How each row is measured
// (back to back with the peer, the triad beside it) is tools/bench_harness.h.
//
// Conventions: time is the best wall time of N runs (the machine is shared and noisy);
// "GroupPE / peer" is a throughput ratio (peer time / GroupPE time, > 1: GroupPE faster).
// Attention flops count 4 d per allowed (query, key) pair and query head (q.k and p.v, 2
// flops per multiply-add); the backward counts 2.5 times the forward's (Dao 2023's
// convention). RoPE bandwidth counts each element read once and written once.
#ifndef TOOLS_BENCH_ATTENTION_H_
#define TOOLS_BENCH_ATTENTION_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace gpe {
namespace tools {

struct AttentionBenchOptions {
  bool quick = false;         // tiny sizes, about a minute in all
  bool peers = true;          // run the PyTorch peers (when the interpreter has torch)
  int threads = 1;            // GroupPE's and the peers' thread count
  double fma_peak_gflops = 0; // FmaPeakGflops(threads), > 0
  double triad_gbs = 0;       // TriadBandwidthGBs(threads), > 0
  std::string python;         // interpreter with the peers installed (tools/setup_peers.sh)
  std::string peers_dir;      // directory of attention_torch.py and plot_bench.py
  std::string out_dir;        // where bench.json and the PNGs go (created if missing)
};

// Options with python, peers_dir and out_dir filled as `gpe bench` uses them: the
// interpreter $GPE_PEER_PYTHON, else <workspace>/.venv/bin/python3 (workspace:
// $BUILD_WORKSPACE_DIRECTORY under `bazel run`, else "."); peers_dir <workspace>/tools/peers.
AttentionBenchOptions AttentionBenchDefaults(const std::string& out_dir);

// Runs and prints the rows and sweeps above. Errors: bad options, a GroupPE call that
// fails, an output directory that cannot be written. A peer that is missing or fails
// only shows as such in its row.
absl::Status RunAttentionBench(const AttentionBenchOptions& options);

// The bfloat16 rows' PyTorch environment after a probe run of the peer that printed
// `line` and ended with `wait_status` (pclose's): oneDNN's AMX path dies with SIGILL on
// VMs that list AMX but do not enable it, so a probe that printed nothing and died of
// SIGILL (DiedOfSignal) has the rows rerun the peer with oneDNN capped at
// AVX512_CORE_BF16 (`env`), and `note` says so. Any other failure (a timeout, the
// out-of-memory killer, a crash) sets no cap: `note` says how the probe ended.
struct Bf16PeerSetup {
  std::string env;   // "NAME=value" prefixing the peer's command, or ""
  std::string note;  // appended to the rows' peer cells, or ""
};
Bf16PeerSetup Bf16PeerSetupAfterProbe(const std::string& line, int wait_status);

// Runs <peers_dir>/plot_bench.py under `python` on json_path, drawing into out_dir, and
// returns what to print: the script's own report, or why there are no plots. "no
// interpreter" only where `python` does not run (IsExecutable); a run that failed
// without a "plot_bench:" line of its own keeps its output, followed by how it ended.
std::string DrawPlots(const std::string& python, const std::string& peers_dir,
                      const std::string& json_path, const std::string& out_dir);

// Allowed (query, key) pairs of one head of one sequence: sq * sk without a mask; causal
// with the queries the last sq of the sk positions (descriptor.h's KV-cache default), so
// query i sees sk - sq + i + 1 keys (none below zero). sq, sk >= 0.
double AttentionPairs(int64_t sq, int64_t sk, bool causal);

}  // namespace tools
}  // namespace gpe

#endif  // TOOLS_BENCH_ATTENTION_H_
