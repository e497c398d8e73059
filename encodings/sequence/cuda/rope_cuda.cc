#include "encodings/sequence/cuda/rope_cuda.h"

#include <cuda_runtime_api.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace gpe::encodings::sequence::cuda {
namespace {

absl::Status CudaError(cudaError_t e, const char* what) {
  return absl::InternalError(
      absl::StrCat(what, ": ", cudaGetErrorName(e), ": ", cudaGetErrorString(e)));
}

// OK iff p is device (or managed) memory of the current context.
absl::Status CheckDevicePointer(const void* p, const char* name) {
  cudaPointerAttributes attr;
  const cudaError_t e = cudaPointerGetAttributes(&attr, p);
  if (e != cudaSuccess) {
    cudaGetLastError();  // clear the sticky-free error state of this query
    return absl::InvalidArgumentError(
        absl::StrCat(name, " is not a CUDA pointer (", cudaGetErrorString(e), ")"));
  }
  if (attr.type != cudaMemoryTypeDevice && attr.type != cudaMemoryTypeManaged) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, " points to host memory; pass device memory"));
  }
  return absl::OkStatus();
}

int64_t ElementBytes(RopeDType d) { return d == RopeDType::kFloat32 ? 4 : 2; }

absl::Status CheckTensor(const RopeKernelTensor& x, const char* name, int64_t tokens,
                         int64_t head_dim, RopeDType dtype) {
  if (x.heads < 0) return absl::InvalidArgumentError(absl::StrCat(name, ".heads is negative"));
  if (tokens == 0 || x.heads == 0) return absl::OkStatus();
  if (x.in == nullptr || x.out == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": null in or out"));
  }
  if (x.token_stride <= 0 || (x.heads > 1 && x.head_stride < head_dim)) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, ": token_stride must be > 0 and head_stride >= head_dim (", head_dim,
        ") with several heads; got ", x.token_stride, " and ", x.head_stride));
  }
  for (const void* p : {x.in, static_cast<const void*>(x.out)}) {
    if (absl::Status s = CheckDevicePointer(p, name); !s.ok()) return s;
  }
  if (x.out != x.in) {
    // Extents in bytes of the two views: disjoint or refused.
    const int64_t span = ((tokens - 1) * x.token_stride + (x.heads - 1) * x.head_stride +
                          head_dim) * ElementBytes(dtype);
    const char* a = static_cast<const char*>(x.in);
    const char* b = static_cast<const char*>(x.out);
    if (a < b + span && b < a + span) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, ": out overlaps in; pass out == in for in place"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<RopeCuda> RopeCuda::Create(const Rope& rope) {
  const RopeOptions& o = rope.options();
  if (o.xpos.enabled) {
    return absl::UnimplementedError("RopeCuda: xPos scaling is not supported on the GPU yet");
  }
  if (o.rotary_dim > kMaxRotaryDim) {
    return absl::OutOfRangeError(
        absl::StrCat("RopeCuda: rotary_dim ", o.rotary_dim, " exceeds ", kMaxRotaryDim));
  }
  RopeCuda r;
  r.head_dim_ = o.head_dim;
  r.rotary_dim_ = o.rotary_dim;
  r.num_axes_ = o.num_axes;
  r.interleaved_ = o.pairing == PlanePairing::kInterleaved;
  r.attention_factor_ = static_cast<float>(rope.attention_factor());
  const std::vector<double> thetas(rope.thetas().begin(), rope.thetas().end());
  cudaError_t e = cudaMalloc(reinterpret_cast<void**>(&r.thetas_), thetas.size() * sizeof(double));
  if (e != cudaSuccess) return CudaError(e, "RopeCuda: cudaMalloc");
  e = cudaMemcpy(r.thetas_, thetas.data(), thetas.size() * sizeof(double), cudaMemcpyHostToDevice);
  if (e != cudaSuccess) return CudaError(e, "RopeCuda: cudaMemcpy");
  if (!o.plane_axes.empty()) {
    const std::vector<int32_t> axes(o.plane_axes.begin(), o.plane_axes.end());
    e = cudaMalloc(reinterpret_cast<void**>(&r.plane_axes_), axes.size() * sizeof(int32_t));
    if (e != cudaSuccess) return CudaError(e, "RopeCuda: cudaMalloc");
    e = cudaMemcpy(r.plane_axes_, axes.data(), axes.size() * sizeof(int32_t),
                   cudaMemcpyHostToDevice);
    if (e != cudaSuccess) return CudaError(e, "RopeCuda: cudaMemcpy");
  }
  return r;
}

RopeCuda::RopeCuda(RopeCuda&& other) noexcept { *this = std::move(other); }

RopeCuda& RopeCuda::operator=(RopeCuda&& other) noexcept {
  if (this != &other) {
    Release();
    head_dim_ = other.head_dim_;
    rotary_dim_ = other.rotary_dim_;
    num_axes_ = other.num_axes_;
    interleaved_ = other.interleaved_;
    attention_factor_ = other.attention_factor_;
    thetas_ = std::exchange(other.thetas_, nullptr);
    plane_axes_ = std::exchange(other.plane_axes_, nullptr);
  }
  return *this;
}

RopeCuda::~RopeCuda() { Release(); }

void RopeCuda::Release() {
  if (thetas_ != nullptr) cudaFree(thetas_);
  if (plane_axes_ != nullptr) cudaFree(plane_axes_);
  thetas_ = nullptr;
  plane_axes_ = nullptr;
}

absl::Status RopeCuda::Apply(RopeDType dtype, int64_t num_tokens, const int64_t* positions,
                             const RopeKernelTensor& q, const RopeKernelTensor* k,
                             bool backward, void* stream) const {
  if (num_tokens < 0) return absl::InvalidArgumentError("num_tokens is negative");
  if (dtype != RopeDType::kFloat32 && dtype != RopeDType::kBFloat16 &&
      dtype != RopeDType::kFloat16) {
    return absl::InvalidArgumentError("dtype must be float32, bfloat16 or float16");
  }
  if (num_tokens > 0) {
    if (positions == nullptr) return absl::InvalidArgumentError("positions is null");
    if (absl::Status s = CheckDevicePointer(positions, "positions"); !s.ok()) return s;
  }
  if (absl::Status s = CheckTensor(q, "q", num_tokens, head_dim_, dtype); !s.ok()) return s;
  if (k != nullptr) {
    if (absl::Status s = CheckTensor(*k, "k", num_tokens, head_dim_, dtype); !s.ok()) return s;
  }
  RopeKernelArgs a;
  a.dtype = dtype;
  a.num_tokens = num_tokens;
  a.head_dim = head_dim_;
  a.rotary_dim = rotary_dim_;
  a.interleaved = interleaved_;
  a.backward = backward;
  a.attention_factor = attention_factor_;
  a.num_axes = num_axes_;
  a.thetas = thetas_;
  a.plane_axes = plane_axes_;
  a.positions = positions;
  a.tensors[0] = q;
  a.num_tensors = 1;
  if (k != nullptr) {
    a.tensors[1] = *k;
    a.num_tensors = 2;
  }
  const std::string err = LaunchRope(a, stream);
  if (!err.empty()) return absl::InternalError(absl::StrCat("RopeCuda: launch: ", err));
  return absl::OkStatus();
}

}  // namespace gpe::encodings::sequence::cuda
