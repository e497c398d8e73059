// The limit probes compute what they claim: the copy kernel copies every byte (sizes
// below, at and above one 16-byte vector per thread of a block), the fill draws values in
// [-1, 1) that are not all equal, and the two rates are positive and finite. Skips with a
// message where no GPU is present.
#include "measure/cuda/gpu_limits.h"

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace gpe::measure::cuda {
namespace {

bool HaveGpu(std::string* why) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    *why = cudaGetErrorString(e);
    return false;
  }
  if (n == 0) *why = "no devices";
  return n > 0;
}

#define SKIP_WITHOUT_GPU()                                                \
  do {                                                                    \
    std::string why;                                                      \
    if (!HaveGpu(&why)) GTEST_SKIP() << "no CUDA device (" << why << ")"; \
  } while (0)

TEST(GpuLimits, CopyCopiesEveryByte) {
  SKIP_WITHOUT_GPU();
  for (int64_t bytes : {16, 4080, 4096, 4112, 1 << 20, (1 << 20) + 48}) {
    std::vector<uint8_t> h(bytes), back(bytes, 0xAB);
    for (int64_t i = 0; i < bytes; ++i) h[i] = static_cast<uint8_t>(i * 131 + 7);
    void *in = nullptr, *out = nullptr;
    ASSERT_EQ(cudaMalloc(&in, bytes), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&out, bytes), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(in, h.data(), bytes, cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(cudaMemset(out, 0xAB, bytes), cudaSuccess);  // poison
    EXPECT_EQ(LaunchCopy(in, out, bytes, nullptr), "");
    ASSERT_EQ(cudaMemcpy(back.data(), out, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(std::memcmp(h.data(), back.data(), bytes), 0) << bytes << " bytes";
    cudaFree(in);
    cudaFree(out);
  }
  EXPECT_NE(LaunchCopy(nullptr, nullptr, 17, nullptr), "");  // not a multiple of 16
}

TEST(GpuLimits, FillIsUniformInRange) {
  SKIP_WITHOUT_GPU();
  const int64_t n = 1 << 16;
  void* d = nullptr;
  ASSERT_EQ(cudaMalloc(&d, n * 2), cudaSuccess);
  ASSERT_EQ(LaunchFillRandomBf16(d, n, 5, nullptr), "");
  std::vector<__nv_bfloat16> h(n);
  ASSERT_EQ(cudaMemcpy(h.data(), d, n * 2, cudaMemcpyDeviceToHost), cudaSuccess);
  cudaFree(d);
  double sum = 0, lo = 2, hi = -2;
  for (const __nv_bfloat16& x : h) {
    const double v = __bfloat162float(x);
    sum += v;
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  EXPECT_GE(lo, -1.0);
  EXPECT_LE(hi, 1.0);  // bf16 rounding may reach 1.0 exactly
  EXPECT_LT(lo, -0.99);
  EXPECT_GT(hi, 0.99);
  // Mean of 65,536 uniforms on [-1, 1): standard error 0.0023; 0.02 is over 8 sigma.
  EXPECT_NEAR(sum / n, 0.0, 0.02);
}

TEST(GpuLimits, RatesArePositive) {
  SKIP_WITHOUT_GPU();
  absl::StatusOr<double> copy = CopyBandwidthGBps(int64_t{1} << 26);
  ASSERT_TRUE(copy.ok()) << copy.status();
  EXPECT_TRUE(std::isfinite(*copy) && *copy > 1.0) << *copy;
  absl::StatusOr<double> gemm = Bf16GemmTflops(1024);
  ASSERT_TRUE(gemm.ok()) << gemm.status();
  EXPECT_TRUE(std::isfinite(*gemm) && *gemm > 0.1) << *gemm;
  EXPECT_FALSE(Bf16GemmTflops(100).ok());  // not a multiple of 16
}

}  // namespace
}  // namespace gpe::measure::cuda
