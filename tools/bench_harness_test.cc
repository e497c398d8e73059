#include "tools/bench_harness.h"

#include <cmath>
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

}  // namespace
}  // namespace tools
}  // namespace gpe
