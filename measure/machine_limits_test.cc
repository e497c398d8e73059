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

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif
#else
constexpr bool kSanitized = false;
#endif

// The bf16 dot-product peak: 0 exactly where the CPU lacks vdpbf16ps, else positive and
// between 0.25 and 8 times the FMA peak (one instruction does twice an FMA's flops; known
// CPUs issue it at half to the full FMA rate: ratios of about 1 to 2). Under the
// sanitizers (-O1, instrumented) the two loops slow down unequally: positive only.
TEST(MachineLimits, Bf16DotPeakIsZeroWithoutTheInstructionElsePlausible) {
  const double bf16 = Bf16DotPeakGflops(1);
  if (!HasBf16DotProductInstruction()) {
    EXPECT_EQ(bf16, 0.0);
    GTEST_SKIP() << "this CPU has no AVX512_BF16: only the zero was checked";
  }
  EXPECT_TRUE(std::isfinite(bf16));
  EXPECT_GT(bf16, 0.1);
  if (kSanitized) return;
  const double fma = FmaPeakGflops(1);
  EXPECT_GT(bf16, 0.25 * fma);
  EXPECT_LT(bf16, 8.0 * fma);
}

}  // namespace
}  // namespace measure
}  // namespace gpe
