#include "tools/bench_attention.h"

#include <sys/stat.h>

#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <string>
#include <utility>

#include "gtest/gtest.h"

namespace gpe {
namespace tools {
namespace {

// Straightforward count: key j (position j) is allowed for query i (position sk - sq + i)
// iff j <= sk - sq + i, as descriptor.h's default positions and causal rule say.
double CountPairs(int64_t sq, int64_t sk, bool causal) {
  double n = 0;
  for (int64_t i = 0; i < sq; ++i) {
    for (int64_t j = 0; j < sk; ++j) n += (!causal || j <= sk - sq + i) ? 1 : 0;
  }
  return n;
}

TEST(AttentionPairsTest, MatchesCountingOnRandomShapes) {
  std::mt19937_64 rng(3);
  for (int trial = 0; trial < 300; ++trial) {
    const int64_t sq = static_cast<int64_t>(rng() % 70), sk = static_cast<int64_t>(rng() % 70);
    for (const bool causal : {false, true}) {
      // Both are exact integers far below 2^53: equality, no tolerance.
      EXPECT_EQ(AttentionPairs(sq, sk, causal), CountPairs(sq, sk, causal))
          << "sq " << sq << " sk " << sk << " causal " << causal;
    }
  }
  // The causal square: s (s + 1) / 2.
  EXPECT_EQ(AttentionPairs(4096, 4096, true), 4096.0 * 4097.0 / 2.0);
}

TEST(RunAttentionBenchTest, RejectsBadOptions) {
  AttentionBenchOptions o = AttentionBenchDefaults(::testing::TempDir() + "/bench");
  o.peers = false;
  o.quick = true;
  o.fma_peak_gflops = 100;
  o.triad_gbs = 10;
  o.threads = 0;
  EXPECT_EQ(RunAttentionBench(o).code(), absl::StatusCode::kInvalidArgument);
  o.threads = 1;
  o.triad_gbs = 0;
  EXPECT_EQ(RunAttentionBench(o).code(), absl::StatusCode::kInvalidArgument);
  o.triad_gbs = std::nan("");
  EXPECT_EQ(RunAttentionBench(o).code(), absl::StatusCode::kInvalidArgument);
  // An output directory below a regular file cannot be created.
  const std::string file = ::testing::TempDir() + "/not_a_dir";
  std::FILE* f = std::fopen(file.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fclose(f);
  o.triad_gbs = 10;
  o.out_dir = file + "/bench";
  const absl::Status s = RunAttentionBench(o);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("cannot create"), absl::string_view::npos) << s;
}

TEST(AttentionBenchDefaultsTest, UsesTheEnvironment) {
  ASSERT_EQ(setenv("GPE_PEER_PYTHON", "/opt/py/bin/python3", 1), 0);
  ASSERT_EQ(setenv("BUILD_WORKSPACE_DIRECTORY", "/src/gpe", 1), 0);
  const AttentionBenchOptions o = AttentionBenchDefaults("/tmp/x");
  EXPECT_EQ(o.python, "/opt/py/bin/python3");
  EXPECT_EQ(o.peers_dir, "/src/gpe/tools/peers");
  EXPECT_EQ(o.out_dir, "/tmp/x");
  ASSERT_EQ(unsetenv("GPE_PEER_PYTHON"), 0);
  EXPECT_EQ(AttentionBenchDefaults("").python, "/src/gpe/.venv/bin/python3");
}

// The oneDNN cap only where the probe died of SIGILL (as the signal, or as exit status
// 128 + 4 through sh and timeout); a timeout, the out-of-memory killer or a segfault set no
// cap and say what happened instead of blaming AMX.
TEST(Bf16PeerSetupTest, CapsOneDnnOnlyAfterSigill) {
  for (const int sigill : {SIGILL, (128 + SIGILL) << 8}) {
    const Bf16PeerSetup s = Bf16PeerSetupAfterProbe("", sigill);
    EXPECT_EQ(s.env, "ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16") << sigill;
    EXPECT_NE(s.note.find("AMX raised SIGILL"), std::string::npos) << s.note;
  }
  for (const auto& [status, words] : {std::pair<int, const char*>{124 << 8, "timed out"},
                                      {SIGKILL, "signal 9"},
                                      {(128 + SIGKILL) << 8, "signal 9"},
                                      {SIGSEGV, "signal 11"},
                                      {1 << 8, "exit status 1"}}) {
    const Bf16PeerSetup s = Bf16PeerSetupAfterProbe("", status);
    EXPECT_EQ(s.env, "") << status;
    EXPECT_EQ(s.note.find("SIGILL"), std::string::npos) << s.note;
    EXPECT_NE(s.note.find(words), std::string::npos) << s.note;
  }
  // A probe that answered: nothing to change.
  const Bf16PeerSetup ok = Bf16PeerSetupAfterProbe(R"({"case": "sdpa", "seconds": 0.1})", 0);
  EXPECT_EQ(ok.env, "");
  EXPECT_EQ(ok.note, "");
}

std::string WriteScript(const std::string& name, const std::string& body) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path) << "#!/bin/sh\n" << body << "\n";
  EXPECT_EQ(chmod(path.c_str(), 0755), 0);
  return path;
}

// "no interpreter" only where there is none; an interpreter that fails keeps its output
// and says how it ended; the script's own report passes through.
TEST(DrawPlotsTest, ReportsWhatHappened) {
  const std::string dir = ::testing::TempDir();
  const std::string missing = dir + "/no_such_python";
  EXPECT_NE(DrawPlots(missing, dir, dir + "/bench.json", dir).find("no interpreter at " + missing),
            std::string::npos);
  const std::string broken =
      WriteScript("broken_python", "echo 'Traceback: ImportError: libpng.so.16' >&2; exit 3");
  const std::string failed = DrawPlots(broken, dir, dir + "/bench.json", dir);
  EXPECT_EQ(failed.find("no interpreter"), std::string::npos) << failed;
  EXPECT_NE(failed.find("ImportError: libpng.so.16"), std::string::npos) << failed;
  EXPECT_NE(failed.find("exit status 3"), std::string::npos) << failed;
  EXPECT_NE(failed.find("plot_bench: "), std::string::npos) << failed;
  const std::string skipping =
      WriteScript("skipping_python", "echo 'plot_bench: skipped (no matplotlib)'");
  EXPECT_EQ(DrawPlots(skipping, dir, dir + "/bench.json", dir),
            "plot_bench: skipped (no matplotlib)\n");
}

}  // namespace
}  // namespace tools
}  // namespace gpe
