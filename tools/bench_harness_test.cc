#include "tools/bench_harness.h"

#include <sys/stat.h>
#include <sys/wait.h>

#include <cmath>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "measure/timing.h"

namespace gpe {
namespace tools {
namespace {

TEST(JsonTest, ReadsThePeersLines) {
  const std::string line =
      R"({"seconds": 0.0125, "case": "sdpa,hq=4", "torch": "2.5.0", "n":-3e2, "bad": x})";
  EXPECT_EQ(JsonNumber(line, "seconds"), 0.0125);
  EXPECT_EQ(JsonNumber(line, "n"), -300.0);
  EXPECT_TRUE(std::isnan(JsonNumber(line, "missing")));
  EXPECT_TRUE(std::isnan(JsonNumber(line, "bad")));
  EXPECT_TRUE(std::isnan(JsonNumber("", "seconds")));
  EXPECT_EQ(JsonString(line, "case"), "sdpa,hq=4");
  EXPECT_EQ(JsonString(R"({"error":"a \"b\" c"})", "error"), R"(a \"b\" c)");
  EXPECT_EQ(JsonString(line, "missing"), "");
}

// Paths with spaces and quotes reach the peers as one word each: quoted for /bin/sh and
// read back by a shell exactly as given.
// Answers go to their cases by the "case" field, not by position: a log line on stdout
// (oneDNN's verbose mode writes there) shifted every later answer into the wrong column.
TEST(PlaceByCaseTest, AnswersFindTheirCasesWhateverElseIsPrinted) {
  const std::vector<std::string> cases = {"rope,s=256", "rope,s=256,compile=1", "sdpa", "lost"};
  const std::string out =
      "onednn_verbose,info,oneDNN v3.x\n"
      "{\"case\": \"rope,s=256,compile=1\", \"seconds\": 0.001}\n"
      "not json at all\n"
      "{\"case\": \"rope,s=256\", \"seconds\": 0.002}\n"
      "{\"case\": \"unknown\", \"seconds\": 9}\n"
      "{\"case\": \"sdpa\", \"error\": \"boom\"}\n";
  const std::vector<std::string> lines = PlaceByCase(out, cases);
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_DOUBLE_EQ(JsonNumber(lines[0], "seconds"), 0.002);
  EXPECT_DOUBLE_EQ(JsonNumber(lines[1], "seconds"), 0.001);
  EXPECT_EQ(JsonString(lines[2], "error"), "boom");
  EXPECT_TRUE(lines[3].empty());
  // The same case twice: answers in order.
  const std::vector<std::string> twice =
      PlaceByCase("{\"case\": \"a\", \"seconds\": 1}\n{\"case\": \"a\", \"seconds\": 2}\n",
                  {"a", "a"});
  EXPECT_DOUBLE_EQ(JsonNumber(twice[0], "seconds"), 1.0);
  EXPECT_DOUBLE_EQ(JsonNumber(twice[1], "seconds"), 2.0);
}

TEST(ShellQuoteTest, ShellReadsBackTheWord) {
  EXPECT_EQ(ShellQuote("plain"), "'plain'");
  EXPECT_EQ(ShellQuote("a b'c"), "'a b'\\''c'");
  const std::string word = "/tmp/dir with space/it's $HOME;`x`";
  const std::string cmd = "printf %s " + ShellQuote(word);
  FILE* pipe = popen(cmd.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  char buffer[256] = {};
  const size_t got = std::fread(buffer, 1, sizeof(buffer) - 1, pipe);
  pclose(pipe);
  EXPECT_EQ(std::string(buffer, got), word);
}

// No repetition, no time: an error (InvalidArgument) without running the call, not a
// sentinel time passed on as OK.
TEST(BestSecondsTest, RepsBelowOneAreAnError) {
  int calls = 0;
  auto call = [&] {
    ++calls;
    return absl::OkStatus();
  };
  for (const int reps : {0, -3}) {
    EXPECT_EQ(BestSecondsOk(reps, call).status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(WarmThenBestSeconds(reps, call).status().code(),
              absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(std::isnan(measure::BestSeconds(reps, [&] { ++calls; })));
  }
  EXPECT_EQ(calls, 0);
  const absl::StatusOr<double> two = WarmThenBestSeconds(2, call);
  ASSERT_TRUE(two.ok()) << two.status();
  EXPECT_GE(*two, 0.0);
  EXPECT_TRUE(std::isfinite(*two));
  EXPECT_EQ(calls, 3);  // the warm-up and two timed runs
}

// A shell script at dir/name, executable.
std::string WriteScript(const std::string& name, const std::string& body) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path) << "#!/bin/sh\n" << body << "\n";
  EXPECT_EQ(chmod(path.c_str(), 0755), 0);
  return path;
}

// pclose's status of a command run as the peers are (sh -c "timeout ... command").
int PeerWaitStatus(const std::string& command) {
  FILE* pipe = popen((kPeerTimeout + command + " 2>/dev/null").c_str(), "r");
  EXPECT_NE(pipe, nullptr);
  char buffer[256];
  while (std::fread(buffer, 1, sizeof(buffer), pipe) > 0) {
  }
  return pclose(pipe);
}

// A peer's death by SIGILL is told from other failures, whether sh and timeout report it
// as the signal or as exit status 128 + 4.
TEST(PeerExitTest, TellsSigillFromOtherFailures) {
  const int sigill = PeerWaitStatus("sh -c 'kill -ILL $$'");
  EXPECT_TRUE(DiedOfSignal(sigill, SIGILL)) << sigill;
  EXPECT_NE(DescribeExit(sigill).find("signal 4"), std::string::npos) << DescribeExit(sigill);
  const int segv = PeerWaitStatus("sh -c 'kill -SEGV $$'");
  EXPECT_FALSE(DiedOfSignal(segv, SIGILL)) << segv;
  EXPECT_TRUE(DiedOfSignal(segv, SIGSEGV)) << segv;
  const int three = PeerWaitStatus("sh -c 'exit 3'");
  EXPECT_FALSE(DiedOfSignal(three, SIGILL));
  EXPECT_EQ(DescribeExit(three), "exit status 3");
  // What sh reports for a child killed by SIGILL, and timeout's own "timed out" (124).
  EXPECT_TRUE(DiedOfSignal((128 + SIGILL) << 8, SIGILL));
  EXPECT_FALSE(DiedOfSignal(124 << 8, SIGILL));
  EXPECT_EQ(DescribeExit(124 << 8), "timed out");
  EXPECT_NE(DescribeExit(SIGKILL).find("out of memory?"), std::string::npos);
  EXPECT_FALSE(DiedOfSignal(-1, SIGILL));  // not run
  EXPECT_FALSE(DiedOfSignal(0, SIGILL));
}

// TorchPeer::Run hands back how the peer ended: here an interpreter that dies of SIGILL.
TEST(TorchPeerTest, ReportsHowThePeerEnded) {
  const std::string dir = ::testing::TempDir();
  const std::string python = WriteScript("sigill_python", "kill -ILL $$");
  const TorchPeer peer(true, python, dir, 1);
  int status = 0;
  EXPECT_EQ(peer.RunOne("sdpa", 1, "", &status), "");
  EXPECT_TRUE(DiedOfSignal(status, SIGILL)) << status;
  const TorchPeer off(false, python, dir, 1);
  EXPECT_EQ(off.RunOne("sdpa", 1, "", &status), "");
  EXPECT_EQ(status, -1);  // not run
}

// The NumPy peer runs on the thread count it is given: the BLAS variables set in its
// environment, its arguments one word each.
TEST(NumpyPeerCommandTest, PassesTheThreadCount) {
  const std::string python = WriteScript(
      "env_python",
      "echo \"$OMP_NUM_THREADS $OPENBLAS_NUM_THREADS $MKL_NUM_THREADS|$1|$2|$3\"");
  const std::string command =
      NumpyPeerCommand(python, "/peers/inr closed form.py", {"a b", "7"}, 3);
  FILE* pipe = popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  char buffer[256] = {};
  const size_t got = std::fread(buffer, 1, sizeof(buffer) - 1, pipe);
  EXPECT_EQ(pclose(pipe), 0);
  EXPECT_EQ(std::string(buffer, got), "3 3 3|/peers/inr closed form.py|a b|7\n");
}

TEST(IsExecutableTest, FindsProgramsAndRefusesTheRest) {
  EXPECT_TRUE(IsExecutable("/bin/sh"));
  EXPECT_TRUE(IsExecutable("sh"));  // on $PATH
  EXPECT_FALSE(IsExecutable(""));
  EXPECT_FALSE(IsExecutable(::testing::TempDir() + "/no_such_python"));
  EXPECT_FALSE(IsExecutable(::testing::TempDir()));  // a directory
  const std::string plain = ::testing::TempDir() + "/not_executable";
  std::ofstream(plain) << "#!/bin/sh\n";
  ASSERT_EQ(chmod(plain.c_str(), 0644), 0);
  EXPECT_FALSE(IsExecutable(plain));
}

}  // namespace
}  // namespace tools
}  // namespace gpe
