#include "tools/bench_harness.h"

#include <cmath>
#include <cstdio>
#include <string>

#include "gtest/gtest.h"

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

}  // namespace
}  // namespace tools
}  // namespace gpe
