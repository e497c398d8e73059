// What the C ABI's entry points share for tensors on a CUDA device: the CUDA plugin
// (c_api/cuda/plugin.h), loaded with dlopen on first use; the DLPack device of a tensor;
// host descriptions of device tensors for the CPU's checks (which read shapes, strides
// and addresses, never elements); index arrays brought to the host. Internal to c_api.
#ifndef GPE_C_API_SRC_COMMON_CUDA_PLUGIN_H_
#define GPE_C_API_SRC_COMMON_CUDA_PLUGIN_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "c_api/cuda/plugin.h"
#include "dlpack/dlpack.h"

namespace gpe::c_api {

// The DLPack device type as the int32 on the wire (a C or ctypes caller may pass a value
// outside the C++ enum's range).
int32_t DeviceType(const DLTensor* t);

// True when t is a tensor on a CUDA device.
bool OnCudaDevice(const DLTensor* t);

// True when t's elements are IEEE float16.
bool IsFloat16(const DLTensor* t);

// The plugin: $GPE_CUDA_PLUGIN, else libgpe_cuda.so beside the object this code is linked
// into (libgpe.so, or a program that links GroupPE statically). Loaded once; a failed
// load (GPE_ERROR_UNSUPPORTED, saying where it looked and how to get one) is retried by
// the next call.
absl::StatusOr<const cuda_plugin::PluginTable*> CudaPlugin();

// An absl::Status from a plugin entry's code and message.
absl::Status FromPlugin(int code, const char* message);

// t described on the CPU for the CPU's checks. float16_as_bfloat16: float16 described as
// bfloat16, its size's other type (for checks that take float16 only as a KV cache).
DLTensor HostDescription(const DLTensor* t, bool float16_as_bfloat16);

// An index array (positions, offsets, cu_seqlens) on the host: *slot as given when on the
// CPU; else its bytes copied from `device` (waiting for `stream`) into `keep`, and *slot
// pointed at keep->t. Refuses an array on another device.
struct HostIndex {
  DLTensor t;
  std::vector<unsigned char> bytes;
};
absl::Status IndexOnHost(const DLTensor** slot, const char* name, int32_t device, void* stream,
                         HostIndex* keep);

}  // namespace gpe::c_api

#endif  // GPE_C_API_SRC_COMMON_CUDA_PLUGIN_H_
