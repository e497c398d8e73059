#include "tools/bench_attention.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>

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

}  // namespace
}  // namespace tools
}  // namespace gpe
