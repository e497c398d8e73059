#include "c_api/src/common/cuda_plugin.h"

#include <dlfcn.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "c_api/cuda/plugin.h"
#include "c_api/src/common/tensor_view.h"
#include "dlpack/dlpack.h"

namespace gpe::c_api {
namespace {

namespace plug = ::gpe::c_api::cuda_plugin;

std::string PluginPath() {
  if (const char* env = std::getenv("GPE_CUDA_PLUGIN"); env != nullptr && env[0] != '\0') {
    return env;
  }
  Dl_info info;
  if (dladdr(reinterpret_cast<void*>(&CudaPlugin), &info) != 0 && info.dli_fname != nullptr) {
    const std::string self = info.dli_fname;
    const size_t slash = self.rfind('/');
    if (slash != std::string::npos) return self.substr(0, slash + 1) + "libgpe_cuda.so";
  }
  return "libgpe_cuda.so";
}

}  // namespace

int32_t DeviceType(const DLTensor* t) {
  int32_t type;
  std::memcpy(&type, &t->device.device_type, sizeof type);
  return type;
}

bool OnCudaDevice(const DLTensor* t) { return t != nullptr && DeviceType(t) == kDLCUDA; }

bool IsFloat16(const DLTensor* t) {
  return t->dtype.code == kDLFloat && t->dtype.bits == 16 && t->dtype.lanes == 1;
}

absl::StatusOr<const plug::PluginTable*> CudaPlugin() {
  static std::mutex* mu = new std::mutex;
  static const plug::PluginTable* loaded = nullptr;
  std::lock_guard<std::mutex> lock(*mu);
  if (loaded != nullptr) return loaded;
  const std::string path = PluginPath();
  const std::string why = absl::StrCat(
      "tensors on a CUDA device run through libgpe_cuda.so, GroupPE's CUDA plugin (built "
      "where the CUDA toolkit is: bazel build //c_api:libgpe_cuda.so; set GPE_CUDA_PLUGIN "
      "to its path or put it beside libgpe.so); loading ",
      path, " failed: ");
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* err = dlerror();
    return absl::UnimplementedError(absl::StrCat(why, err != nullptr ? err : "unknown error"));
  }
  auto entry = reinterpret_cast<plug::PluginEntryFn>(dlsym(handle, plug::kPluginEntry));
  const plug::PluginTable* table = entry != nullptr ? entry() : nullptr;
  if (table == nullptr || table->abi != plug::kPluginAbi || table->attention == nullptr ||
      table->copy_to_host == nullptr || table->rope == nullptr) {
    dlclose(handle);
    return absl::UnimplementedError(
        absl::StrCat(why, "it is not the plugin of this build of libgpe (entry ",
                     plug::kPluginEntry, " missing or of another ABI)"));
  }
  loaded = table;
  return loaded;
}

absl::Status FromPlugin(int code, const char* message) {
  if (code == 0) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(code), message);
}

DLTensor HostDescription(const DLTensor* t, bool float16_as_bfloat16) {
  DLTensor h = *t;
  h.device.device_type = kDLCPU;
  h.device.device_id = 0;
  if (float16_as_bfloat16 && IsFloat16(t)) h.dtype.code = kDLBfloat;
  return h;
}

absl::Status IndexOnHost(const DLTensor** slot, const char* name, int32_t device, void* stream,
                         HostIndex* keep) {
  const DLTensor* t = *slot;
  if (t == nullptr || DeviceType(t) == kDLCPU) return absl::OkStatus();
  if (DeviceType(t) != kDLCUDA || t->device.device_id != device) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, " is on DLPack device type ", DeviceType(t), ", id ", t->device.device_id,
        "; index arrays lie on the CPU or on the tensors' CUDA device (", device, ")"));
  }
  if (t->ndim != 1 && t->ndim != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, " must have 1 or 2 dimensions, got ", t->ndim));
  }
  keep->t = HostDescription(t, false);
  absl::StatusOr<TensorView> v = ViewTensor(&keep->t, name, t->ndim, kInt);
  if (!v.ok()) return v.status();
  if (v->numel() > 0) {
    absl::StatusOr<const plug::PluginTable*> plugin = CudaPlugin();
    if (!plugin.ok()) return plugin.status();
    keep->bytes.resize(v->hi() - v->lo());
    char message[512] = "";
    const int code = (*plugin)->copy_to_host(device, reinterpret_cast<const void*>(v->lo()),
                                             keep->bytes.size(), keep->bytes.data(), stream,
                                             message, sizeof message);
    if (code != 0) return FromPlugin(code, message);
    keep->t.data = keep->bytes.data();
    keep->t.byte_offset = reinterpret_cast<uintptr_t>(v->data) - v->lo();
  }
  *slot = &keep->t;
  return absl::OkStatus();
}

}  // namespace gpe::c_api
