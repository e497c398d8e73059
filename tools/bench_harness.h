// How `gpe bench` measures a GroupPE workload beside a peer: best-of-n timing that keeps
// the first error, GroupPE and the peer run back to back over rounds, the triad measured
// beside bandwidth-bound runs, the growth of peak RSS, and the PyTorch peer as a child
// process (tools/peers/attention_torch.py) that answers one JSON line per case.
#ifndef TOOLS_BENCH_HARNESS_H_
#define TOOLS_BENCH_HARNESS_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "measure/timing.h"

namespace gpe {
namespace tools {

// reps >= 1, else InvalidArgument (what BestSecondsOk and WarmThenBestSeconds check
// before running anything).
absl::Status CheckReps(int reps);

// The best of `reps` timed runs of call() (an absl::Status); its first error instead.
// reps < 1: InvalidArgument, call() not run.
template <class Call>
absl::StatusOr<double> BestSecondsOk(int reps, Call call) {
  if (absl::Status s = CheckReps(reps); !s.ok()) return s;
  absl::Status status;
  const double sec = measure::BestSeconds(reps, [&] { status.Update(call()); });
  if (!status.ok()) return status;
  return sec;
}

// One untimed run of call() (warm-up; its error is returned), then BestSecondsOk.
// reps < 1: InvalidArgument, call() not run.
template <class Call>
absl::StatusOr<double> WarmThenBestSeconds(int reps, Call call) {
  if (absl::Status s = CheckReps(reps); !s.ok()) return s;
  if (absl::Status status = call(); !status.ok()) return status;
  return BestSecondsOk(reps, call);
}

// One measurement as a list (what BackToBack's GroupPE side returns).
absl::StatusOr<std::vector<double>> Single(const absl::StatusOr<double>& seconds);

// A field of /proc/self/status in bytes (VmRSS, VmHWM); -1 where unavailable.
int64_t ProcStatusBytes(const std::string& field);

// Growth of the peak resident set while fn runs (bytes), measured by resetting the peak
// to the current RSS (Linux clear_refs "5") first; -1 where the kernel does not allow it.
int64_t PeakRssGrowth(const std::function<void()>& fn);

// A number after "key": in a one-line JSON object; NaN when absent or not a number.
double JsonNumber(const std::string& json, const std::string& key);

// The string after "key": in a one-line JSON object ("" when absent; escapes are kept).
std::string JsonString(const std::string& json, const std::string& key);

// s as one word for /bin/sh (single-quoted; an embedded ' as '\''): paths with spaces or
// shell characters reach the peers as they are.
std::string ShellQuote(const std::string& s);
// What a peer's command line starts with: coreutils' timeout ends a peer that hangs (a
// stuck compile, a dead lock), so `gpe bench` reports it as failed instead of waiting.
inline constexpr const char* kPeerTimeout = "timeout --kill-after=10 900 ";

// The command that runs a NumPy peer (python script args..., each word quoted) on
// `threads` threads, as the PyTorch peer gets its thread count: OMP_NUM_THREADS,
// OPENBLAS_NUM_THREADS and MKL_NUM_THREADS (whichever BLAS NumPy was built on) set to
// `threads` in its environment; under kPeerTimeout, its stderr discarded.
std::string NumpyPeerCommand(const std::string& python, const std::string& script,
                             const std::vector<std::string>& args, int threads);

// Whether `program` would run: a path (with a '/') to an executable regular file, or a
// name found so on $PATH.
bool IsExecutable(const std::string& program);

// Whether a peer run as "/bin/sh -c 'timeout ... PEER'" died of `signal`, from pclose's
// wait status: killed by it, or exit status 128 + signal (how sh, and timeout where it
// does not re-raise the signal, report a child's death by a signal).
bool DiedOfSignal(int wait_status, int signal);

// How such a peer ended, in words: "exit status 3", "timed out", "killed by
// signal 9 (Killed: out of memory?)", ...
std::string DescribeExit(int wait_status);

// The PyTorch peer, run as a child process: one JSON line per case, in order. Lines are
// empty where the child died before printing them (e.g. a crash inside torch).
// The peer's stdout as one line per case, in the order of `cases`: each line that is a
// JSON object with a "case" field goes to the first still-empty slot of that case; lines
// of anything else (a library's log on stdout, e.g. ONEDNN_VERBOSE) are dropped, and a
// case without an answer stays empty. (By position, one extra line shifted every later
// answer to the wrong case.)
std::vector<std::string> PlaceByCase(const std::string& out, const std::vector<std::string>& cases);

class TorchPeer {
 public:
  // enabled: false under --no-peers (every line empty, Why says so); python: the
  // interpreter; peers_dir: the directory of attention_torch.py; threads: its thread count.
  TorchPeer(bool enabled, std::string python, std::string peers_dir, int threads);

  // The lines for `cases` (attention_torch.py's case strings), each the best of `reps`
  // runs; `env` ("NAME=value ...") prefixes the command. *wait_status (where given): how
  // the peer ended (pclose's status; -1 where it was not run or popen failed).
  std::vector<std::string> Run(const std::vector<std::string>& cases, int reps,
                               const std::string& env = "", int* wait_status = nullptr) const;
  std::string RunOne(const std::string& c, int reps, const std::string& env = "",
                     int* wait_status = nullptr) const;

  bool enabled() const { return enabled_; }

  // What the peer column says when the line has no time.
  std::string Why(const std::string& line) const;

 private:
  bool enabled_;
  std::string python_, peers_dir_;
  int threads_;
};

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
    const std::function<std::vector<std::string>()>& peer);

// Bandwidth-bound rows: the triad measured just before and just after each round's GroupPE
// run as well, since the memory bandwidth a shared host leaves swings by 1.5-2x within
// seconds (30 to 67 GB/s here); the row gives, besides the fraction of the run's best
// triad, the median over rounds of GB/s over the larger of the two triads beside it.
class TriadBeside {
 public:
  TriadBeside(int threads, bool quick) : threads_(threads), quick_(quick) {}
  // Measures the triad now (before a round); returns it.
  double Measure();
  // Measures the triad again after the round just run, which read `gbs`; the round's
  // ratio is gbs over the larger triad (also on stderr, with the progress lines). Returns
  // the triad measured after.
  double Add(double gbs);
  // The row's cell: gbs as a fraction of best_triad, then the median ratio over rounds.
  std::string Cell(double gbs, double best_triad) const;

 private:
  double Triad() const;

  int threads_;
  bool quick_;
  double before_ = 0.0;
  std::vector<double> ratios_;
};

}  // namespace tools
}  // namespace gpe

#endif  // TOOLS_BENCH_HARNESS_H_
