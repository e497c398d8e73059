#include "measure/machine_limits.h"

#include <cmath>

#include "gtest/gtest.h"

namespace gpe {
namespace measure {
namespace {

// Only sanity: speed itself is a benchmark's business, not a test's. An FMA peak below
// 0.1 GFLOP/s or a triad below 0.01 GB/s would mean a broken measurement (wrong flop or
// byte count, a loop optimised away), not a slow machine.
TEST(MachineLimits, MeasuresPlausiblePositiveFigures) {
  const std::string isa = WidestVectorIsa();
  EXPECT_TRUE(isa == "avx512" || isa == "avx2" || isa == "sse2") << isa;
  EXPECT_GE(AvailableThreads(), 1);
  const double peak = FmaPeakGflops(1);
  EXPECT_TRUE(std::isfinite(peak));
  EXPECT_GT(peak, 0.1);
  const double triad = TriadBandwidthGBs(1, int64_t{4} << 20);
  EXPECT_TRUE(std::isfinite(triad));
  EXPECT_GT(triad, 0.01);
}

}  // namespace
}  // namespace measure
}  // namespace gpe
