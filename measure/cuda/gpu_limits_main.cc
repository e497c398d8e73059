// Prints the GPU's name and measured limits, one "key: value" line each; exit 1 with the
// reason when there is no device or a measurement fails.
#include <cstdio>

#include "measure/cuda/gpu_limits.h"

int main() {
  using namespace gpe::measure::cuda;
  absl::StatusOr<GpuDevice> dev = CurrentDevice();
  if (!dev.ok()) {
    std::fprintf(stderr, "gpu_limits: %s\n", std::string(dev.status().message()).c_str());
    return 1;
  }
  std::printf("device: %s (sm_%d%d, %d SMs, L2 %lld MiB, %lld GiB)\n", dev->name.c_str(),
              dev->major, dev->minor, dev->sm_count, static_cast<long long>(dev->l2_bytes >> 20),
              static_cast<long long>(dev->global_bytes >> 30));
  absl::StatusOr<double> copy = CopyBandwidthGBps();
  absl::StatusOr<double> gemm = Bf16GemmTflops();
  if (!copy.ok() || !gemm.ok()) {
    std::fprintf(stderr, "gpu_limits: %s %s\n", std::string(copy.status().message()).c_str(),
                 std::string(gemm.status().message()).c_str());
    return 1;
  }
  std::printf("copy_GBps: %.1f\nbf16_gemm_TFLOPs: %.1f\n", *copy, *gemm);
  return 0;
}
