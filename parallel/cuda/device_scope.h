// The CUDA device a host thread works on, made current for a scope: what the CUDA code
// of every layer above shares (inr/cuda's closed form, the C ABI's CUDA plugin). Header
// only; built wherever the CUDA toolkit is (the target is incompatible elsewhere).
#ifndef PARALLEL_CUDA_DEVICE_SCOPE_H_
#define PARALLEL_CUDA_DEVICE_SCOPE_H_

#include <cuda_runtime_api.h>

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace gpe::parallel::cuda {

// A CUDA runtime result as a status naming the call: OK; ResourceExhausted for memory;
// FailedPrecondition for no device, an old driver or a device that does not exist;
// Internal otherwise.
inline absl::Status RuntimeStatus(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return absl::OkStatus();
  const std::string msg = absl::StrCat("CUDA: ", what, " failed: ", cudaGetErrorName(e), " (",
                                       cudaGetErrorString(e), ")");
  switch (e) {
    case cudaErrorMemoryAllocation:
      return absl::ResourceExhaustedError(msg);
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorInvalidDevice:
      return absl::FailedPreconditionError(msg);
    default:
      return absl::InternalError(msg);
  }
}

// Makes `device` current for the scope's life (Enter) and the caller's device current
// again afterwards (only where it changed). A failure is RuntimeStatus's, with the
// runtime's last error cleared (so that a later launch check does not report it as its
// own).
class DeviceScope {
 public:
  DeviceScope() = default;
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;
  ~DeviceScope() {
    if (restore_) (void)cudaSetDevice(previous_);
  }
  absl::Status Enter(int device) {
    if (cudaError_t e = cudaGetDevice(&previous_); e != cudaSuccess) return Failed(e, "cudaGetDevice");
    if (previous_ == device) return absl::OkStatus();
    if (cudaError_t e = cudaSetDevice(device); e != cudaSuccess) return Failed(e, "cudaSetDevice");
    restore_ = true;
    return absl::OkStatus();
  }

 private:
  static absl::Status Failed(cudaError_t e, const char* call) {
    (void)cudaGetLastError();
    return RuntimeStatus(e, call);
  }

  int previous_ = 0;
  bool restore_ = false;
};

}  // namespace gpe::parallel::cuda

#endif  // PARALLEL_CUDA_DEVICE_SCOPE_H_
