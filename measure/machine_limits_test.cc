#include "measure/machine_limits.h"

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

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

// AMX: usable only where /proc/cpuinfo lists amx_bf16 and amx_tile (the kernel's view of
// CPUID, which also hides the flags when the OS does not save the tile state); the peak is
// 0 without, and positive (one TDPBF16PS is 16,384 flops) with.
TEST(MachineLimits, AmxOnlyWhereTheCpuHasIt) {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string text((std::istreambuf_iterator<char>(cpuinfo)), std::istreambuf_iterator<char>());
  const bool listed = text.find(" amx_bf16") != std::string::npos &&
                      text.find(" amx_tile") != std::string::npos;
  if (!listed) {
    EXPECT_FALSE(HasAmxBf16Tiles());
    EXPECT_EQ(AmxBf16PeakGflops(1), 0.0);
    return;
  }
  if (!HasAmxBf16Tiles()) GTEST_SKIP() << "amx_bf16 listed, but this process was refused the tiles";
  const double amx = AmxBf16PeakGflops(1);
  EXPECT_TRUE(std::isfinite(amx));
  EXPECT_GT(amx, 1.0);
}

// The triad's chunks cover [0, n) once, in order, one contiguous range per thread.
TEST(TriadChunkTest, CoversEveryElementOnceInOrder) {
  for (const int64_t n : {0, 1, 5, 1023, 4096, 4099}) {
    for (const int threads : {1, 2, 3, 7, 16}) {
      int64_t next = 0;
      for (int t = 0; t < threads; ++t) {
        int64_t lo = -1, hi = -1;
        TriadChunk(n, threads, t, &lo, &hi);
        ASSERT_LE(lo, hi) << n << " " << threads << " " << t;
        if (lo < hi) {
          EXPECT_EQ(lo, next) << n << " " << threads << " " << t;
          next = hi;
        }
      }
      EXPECT_EQ(next, n) << n << " " << threads;
    }
  }
}

// Every element written, whatever the split (sizes not a multiple of the thread count,
// more threads than elements, one thread, a thread count below 1).
TEST(FillLikeTriadTest, WritesEveryElement) {
  for (const int64_t n : {0, 1, 7, 1000, 4097, 3 << 20}) {
    for (const int threads : {-1, 1, 2, 3, 8}) {
      LargeFloats x(n);
      FillLikeTriad(&x, 1.5f, threads);
      int64_t wrong = 0;
      for (int64_t i = 0; i < n; ++i) wrong += x[i] != 1.5f;
      EXPECT_EQ(wrong, 0) << "n " << n << ", threads " << threads;
    }
  }
}

// node<N> directories only: not the files beside them ("possible", "online"), not a
// "node<N>" that is a file, not "node" or "nodeX"; 1 where there are none or no directory.
TEST(NumaNodeCountTest, CountsNodeDirectories) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(::testing::TempDir()) / "sys_node";
  fs::remove_all(dir);
  ASSERT_TRUE(fs::create_directories(dir));
  EXPECT_EQ(NumaNodeCount(dir.string()), 1);  // empty
  for (const char* d : {"node0", "node1", "node12", "node", "nodeX", "power"}) {
    ASSERT_TRUE(fs::create_directory(dir / d)) << d;
  }
  for (const char* f : {"possible", "online", "node3"}) std::ofstream(dir / f) << "0-1\n";
  EXPECT_EQ(NumaNodeCount(dir.string()), 3);
  // A memory-only node (empty cpulist) is not counted; one with CPUs is.
  std::ofstream(dir / "node0" / "cpulist") << "0-1\n";
  std::ofstream(dir / "node1" / "cpulist") << "\n";
  EXPECT_EQ(NumaNodeCount(dir.string()), 2);
  EXPECT_EQ(NumaNodeCount((dir / "missing").string()), 1);
  EXPECT_GE(NumaNodeCount(), 1);  // this host
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
