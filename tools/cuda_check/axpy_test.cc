#include "tools/cuda_check/axpy.h"

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace gpe::cuda_check {
namespace {

TEST(CudaAxpy, MatchesHostOrSkipsWithoutGpu) {
  std::string why;
  if (DeviceCount(&why) == 0) {
    GTEST_SKIP() << "no CUDA device available (" << why << "); the kernel was built "
                 << "for sm_80/sm_90 but cannot run here";
  }
  // Sizes below, at and above one block (256) and the grid cap (4096 blocks).
  for (int64_t n : {1, 255, 256, 257, 4096 * 256 + 3}) {
    std::vector<float> x(n), y(n), expect(n);
    for (int64_t i = 0; i < n; ++i) {
      x[i] = static_cast<float>(i % 97) * 0.25f;
      y[i] = static_cast<float>(i % 13) - 6.0f;
      expect[i] = std::fma(1.5f, x[i], y[i]);
    }
    ASSERT_EQ(Axpy(1.5f, x.data(), y.data(), n), "");
    // Both sides compute one correctly rounded fma in float32: bitwise equal.
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(y[i], expect[i]) << "n=" << n << " i=" << i;
  }
}

TEST(CudaAxpy, RejectsNegativeLength) {
  std::string why;
  if (DeviceCount(&why) == 0) GTEST_SKIP() << "no CUDA device available (" << why << ")";
  float v = 0;
  EXPECT_NE(Axpy(1.0f, &v, &v, -1), "");
}

}  // namespace
}  // namespace gpe::cuda_check
