#include "tools/bench_harness.h"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "measure/machine_limits.h"

namespace gpe {
namespace tools {

absl::Status CheckReps(int reps) {
  if (reps >= 1) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("timing: repetitions must be >= 1, got ", reps, " (no run, no time)"));
}

absl::StatusOr<std::vector<double>> Single(const absl::StatusOr<double>& seconds) {
  if (!seconds.ok()) return seconds.status();
  return std::vector<double>{*seconds};
}

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

int64_t PeakRssGrowth(const std::function<void()>& fn) {
  {
    std::ofstream reset("/proc/self/clear_refs");
    reset << "5";
    reset.flush();  // the write happens here: checked before it, a refusal went unseen
    if (!reset) return -1;
  }
  const int64_t before = ProcStatusBytes("VmRSS");
  fn();
  const int64_t peak = ProcStatusBytes("VmHWM");
  return before < 0 || peak < 0 ? -1 : std::max<int64_t>(0, peak - before);
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

std::string ShellQuote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

std::string NumpyPeerCommand(const std::string& python, const std::string& script,
                             const std::vector<std::string>& args, int threads) {
  std::string command = absl::StrFormat("OMP_NUM_THREADS=%d OPENBLAS_NUM_THREADS=%d "
                                        "MKL_NUM_THREADS=%d %s%s %s",
                                        threads, threads, threads, kPeerTimeout,
                                        ShellQuote(python), ShellQuote(script));
  for (const std::string& a : args) absl::StrAppend(&command, " ", ShellQuote(a));
  return command + " 2>/dev/null";
}

bool IsExecutable(const std::string& program) {
  auto runs = [](const std::string& path) {
    struct stat st;
    return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(path.c_str(), X_OK) == 0;
  };
  if (program.empty()) return false;
  if (program.find('/') != std::string::npos) return runs(program);
  const char* path = std::getenv("PATH");
  for (absl::string_view dir : absl::StrSplit(path != nullptr ? path : "", ':')) {
    if (runs(absl::StrCat(dir.empty() ? "." : dir, "/", program))) return true;
  }
  return false;
}

bool DiedOfSignal(int wait_status, int signal) {
  if (wait_status == -1) return false;
  if (WIFSIGNALED(wait_status)) return WTERMSIG(wait_status) == signal;
  return WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 128 + signal;
}

std::string DescribeExit(int wait_status) {
  if (wait_status == -1) return "not run";
  auto signal_words = [](int sig) {
    const char* name = strsignal(sig);
    return absl::StrCat("killed by signal ", sig, " (", name != nullptr ? name : "unknown",
                        sig == SIGKILL ? ": out of memory?" : "", ")");
  };
  if (WIFSIGNALED(wait_status)) return signal_words(WTERMSIG(wait_status));
  if (!WIFEXITED(wait_status)) return absl::StrCat("wait status ", wait_status);
  const int code = WEXITSTATUS(wait_status);
  // kPeerTimeout's timeout: 124 when it ended the peer, 125-127 when it could not run it.
  if (code == 124) return "timed out";
  if (code == 126) return "exit status 126 (not executable)";
  if (code == 127) return "exit status 127 (not found)";
  if (code > 128 && code < 128 + 65) return signal_words(code - 128);
  return absl::StrCat("exit status ", code);
}

TorchPeer::TorchPeer(bool enabled, std::string python, std::string peers_dir, int threads)
    : enabled_(enabled),
      python_(std::move(python)),
      peers_dir_(std::move(peers_dir)),
      threads_(threads) {}

std::vector<std::string> TorchPeer::Run(const std::vector<std::string>& cases, int reps,
                                        const std::string& env, int* wait_status) const {
  std::vector<std::string> lines(cases.size());
  if (wait_status != nullptr) *wait_status = -1;
  if (!enabled_ || cases.empty()) return lines;
  std::string command =
      absl::StrCat(env, env.empty() ? "" : " ", kPeerTimeout, ShellQuote(python_), " ",
                   ShellQuote(peers_dir_ + "/attention_torch.py"), " ", threads_, " ", reps);
  for (const std::string& c : cases) absl::StrAppend(&command, " ", ShellQuote(c));
  absl::StrAppend(&command, " 2>/dev/null");
  std::string out;
  if (FILE* pipe = popen(command.c_str(), "r")) {
    char buffer[4096];
    size_t got;
    while ((got = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0) out.append(buffer, got);
    const int status = pclose(pipe);
    if (wait_status != nullptr) *wait_status = status;
  }
  return PlaceByCase(out, cases);
}

std::vector<std::string> PlaceByCase(const std::string& out, const std::vector<std::string>& cases) {
  std::vector<std::string> lines(cases.size());
  for (absl::string_view view : absl::StrSplit(out, '\n', absl::SkipEmpty())) {
    const std::string line(view);
    if (line.empty() || line.front() != '{') continue;
    const std::string c = JsonString(line, "case");
    if (c.empty()) continue;
    for (size_t i = 0; i < cases.size(); ++i) {
      if (lines[i].empty() && cases[i] == c) {
        lines[i] = line;
        break;
      }
    }
  }
  return lines;
}

std::string TorchPeer::RunOne(const std::string& c, int reps, const std::string& env,
                              int* wait_status) const {
  return Run({c}, reps, env, wait_status)[0];
}

std::string TorchPeer::Why(const std::string& line) const {
  if (!enabled_) return "not run (--no-peers)";
  if (line.empty()) return "PyTorch died or is missing (tools/setup_peers.sh)";
  std::string why = JsonString(line, "error");
  if (why.empty()) why = JsonString(line, "skipped");
  if (why.rfind("no torch", 0) == 0) return "PyTorch not installed (tools/setup_peers.sh)";
  return "PyTorch: " + why;
}

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

double TriadBeside::Measure() {
  before_ = Triad();
  return before_;
}

double TriadBeside::Add(double gbs) {
  const double after = Triad(), beside = std::max(before_, after);
  ratios_.push_back(gbs / beside);
  std::fprintf(stderr,
               "gpe bench:   round %d: triad %.1f GB/s, then %.1f GB/s, then triad %.1f GB/s "
               "(%.0f%% of the larger)\n",
               static_cast<int>(ratios_.size()), before_, gbs, after, 100.0 * gbs / beside);
  return after;
}

std::string TriadBeside::Cell(double gbs, double best_triad) const {
  std::vector<double> r = ratios_;
  std::sort(r.begin(), r.end());
  if (r.empty()) return absl::StrFormat("%.0f%% of triad", 100.0 * gbs / best_triad);
  return absl::StrFormat(
      "%.0f%% of triad; %.0f%% of the triad measured beside it (median of %d rounds, %.0f-%.0f%%)",
      100.0 * gbs / best_triad, 100.0 * r[r.size() / 2], static_cast<int>(r.size()),
      100.0 * r.front(), 100.0 * r.back());
}

double TriadBeside::Triad() const {
  return measure::TriadBandwidthGBs(threads_,
                                    quick_ ? (int64_t{16} << 20) : (int64_t{256} << 20));
}

}  // namespace tools
}  // namespace gpe
