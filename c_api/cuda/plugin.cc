// libgpe_cuda.so: plugin.h's call on attention/cuda's kernels. Per call it uploads the
// host index arrays and ALiBi slopes and takes its workspaces with stream-ordered
// allocations (cudaMallocAsync / cudaFreeAsync on the caller's stream: nothing waits on
// the host); the RoPE frequencies are uploaded once per (device, encoding) and kept.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "attention/cuda/cuda_attention.h"
#include "c_api/cuda/plugin.h"
#include "encodings/sequence/cuda/rope_cuda.h"
#include "encodings/sequence/rope.h"
#include "parallel/cuda/device_scope.h"

namespace gpe::c_api::cuda_plugin {
namespace {

namespace acu = ::gpe::attention::cuda;
namespace seq = ::gpe::encodings::sequence;
using seq::cuda::RopeCuda;
using ::gpe::parallel::cuda::DeviceScope;

// A failed runtime call also leaves the runtime's last error set, which the kernels'
// launch checks (cudaGetLastError) would report as the next call's: cleared here.
absl::Status CudaFailed(cudaError_t e, const char* what) {
  cudaGetLastError();
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorName(e), " (",
                                          cudaGetErrorString(e), ")"));
}

// Device memory taken and given back in stream order on one stream.
class StreamBuffer {
 public:
  explicit StreamBuffer(cudaStream_t stream) : stream_(stream) {}
  StreamBuffer(const StreamBuffer&) = delete;
  StreamBuffer& operator=(const StreamBuffer&) = delete;
  ~StreamBuffer() {
    if (p_ != nullptr) cudaFreeAsync(p_, stream_);
  }
  // 256-byte aligned (cudaMallocAsync's guarantee), at least one byte.
  absl::Status Allocate(size_t bytes, const char* what) {
    const cudaError_t e = cudaMallocAsync(&p_, std::max<size_t>(bytes, 1), stream_);
    if (e == cudaErrorMemoryAllocation) {
      cudaGetLastError();  // as CudaFailed
      p_ = nullptr;
      return absl::ResourceExhaustedError(
          absl::StrCat(what, ": ", bytes, " bytes of device memory not available"));
    }
    if (e != cudaSuccess) {
      p_ = nullptr;
      return CudaFailed(e, what);
    }
    return absl::OkStatus();
  }
  absl::Status Upload(const void* host, size_t bytes, const char* what) {
    if (absl::Status s = Allocate(bytes, what); !s.ok()) return s;
    if (bytes == 0) return absl::OkStatus();
    // From pageable memory: the copy is staged before cudaMemcpyAsync returns, so the
    // host array may go once the call returns.
    const cudaError_t e = cudaMemcpyAsync(p_, host, bytes, cudaMemcpyHostToDevice, stream_);
    return e == cudaSuccess ? absl::OkStatus() : CudaFailed(e, what);
  }
  void* get() const { return p_; }

 private:
  cudaStream_t stream_;
  void* p_ = nullptr;
};

// The device frequencies of the RoPEs a process has used, per device: uploaded once
// (RopeCuda::Create copies synchronously), the latest 64 kept (the cache itself is never
// destroyed: the runtime may be gone when static destructors run). Matched by value, not by address, so
// a freed and reallocated handle cannot hit a stale entry.
struct RopeKey {
  int device;
  int64_t head_dim, rotary_dim;
  int num_axes;
  bool interleaved;
  float attention_factor;
  std::vector<double> thetas;
  std::vector<int> plane_axes;
  bool operator==(const RopeKey& o) const {
    return device == o.device && head_dim == o.head_dim && rotary_dim == o.rotary_dim &&
           num_axes == o.num_axes && interleaved == o.interleaved &&
           attention_factor == o.attention_factor && thetas == o.thetas &&
           plane_axes == o.plane_axes;
  }
};

absl::StatusOr<const RopeCuda*> CachedRope(const seq::Rope& rope, int device) {
  static std::mutex* mu = new std::mutex;
  static auto* cache = new std::vector<std::pair<RopeKey, std::unique_ptr<RopeCuda>>>;
  const seq::RopeOptions& o = rope.options();
  RopeKey key{device,
              o.head_dim,
              o.rotary_dim,
              o.num_axes,
              o.pairing == group::PlanePairing::kInterleaved,
              static_cast<float>(rope.attention_factor()),
              std::vector<double>(rope.thetas().begin(), rope.thetas().end()),
              std::vector<int>(o.plane_axes.begin(), o.plane_axes.end())};
  // Before the lookup: an xPos encoding must not match a plain one of the same planes.
  if (o.xpos.enabled) {
    return absl::UnimplementedError("xPos is not available for tensors on a CUDA device yet");
  }
  std::lock_guard<std::mutex> lock(*mu);
  for (const auto& [k, r] : *cache) {
    if (k == key) return r.get();
  }
  absl::StatusOr<RopeCuda> r = RopeCuda::Create(rope);
  if (!r.ok()) {
    cudaGetLastError();
    return r.status();
  }
  // Create copies with cudaMemcpy from pageable memory, which may return before the data
  // lands, on the legacy stream, which a non-blocking caller's stream does not follow:
  // wait for it once, here, before any kernel reads the frequencies.
  if (const cudaError_t e = cudaStreamSynchronize(cudaStreamLegacy); e != cudaSuccess) {
    return CudaFailed(e, "uploading the RoPE frequencies");
  }
  // Bounded: a schedule whose frequencies follow the length (dynamic NTK, LongRoPE) makes
  // a new entry per length. The oldest goes first; cudaFree waits for the device, so no
  // kernel still reads it.
  constexpr size_t kMaxCachedRopes = 64;
  if (cache->size() >= kMaxCachedRopes) cache->erase(cache->begin());
  cache->emplace_back(std::move(key), std::make_unique<RopeCuda>(*std::move(r)));
  return cache->back().second.get();
}

// Elements a strided [outer..., heads, dim] tensor spans (max offset + 1).
int64_t Extent(int64_t seqs, int64_t tokens, int64_t heads, int64_t dim, const CallStrides& s) {
  if (seqs == 0 || tokens == 0 || heads == 0 || dim == 0) return 0;
  return (seqs - 1) * s.batch + (tokens - 1) * s.token + (heads - 1) * s.head + dim;
}

int64_t ElementBytes(CudaCallDType t) { return t == CudaCallDType::kFloat32 ? 4 : 2; }

// The status as plugin.h returns it: its code, and its message into `message`.
int Report(const absl::Status& s, char* message, size_t message_size) {
  if (!s.ok() && message != nullptr && message_size > 0) {
    const size_t n = std::min(message_size - 1, s.message().size());
    std::memcpy(message, s.message().data(), n);
    message[n] = '\0';
  }
  return static_cast<int>(s.code());
}

// The forward of `a` on the stream, with the workspace that lets the tensor-core kernel
// rotate the keys once (RoPE) taken for the call.
absl::Status Forward(acu::CudaAttentionArgs a, cudaStream_t stream) {
  StreamBuffer work(stream);
  const int64_t bytes = acu::CudaAttentionWorkspaceBytes(a);
  if (bytes > 0) {
    if (absl::Status s = work.Allocate(static_cast<size_t>(bytes), "workspace"); !s.ok()) {
      return s;
    }
    a.workspace = work.get();
    a.workspace_bytes = bytes;
  }
  return acu::CudaAttentionForward(a, stream);
}

// OK when `device` is one this process can use.
absl::Status UsableDevice(int device) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    cudaGetLastError();
    return absl::UnimplementedError(absl::StrCat(
        "no usable CUDA device for tensors on CUDA device ", device, " (",
        e != cudaSuccess ? cudaGetErrorString(e) : "no devices", ")"));
  }
  if (device < 0 || device >= count) {
    return absl::InvalidArgumentError(
        absl::StrCat("the tensors are on CUDA device ", device, "; this process sees ", count));
  }
  return absl::OkStatus();
}


absl::Status Run(const CudaCall& c, bool backward) {
  if (absl::Status s = UsableDevice(c.device); !s.ok()) return s;
  DeviceScope scope;
  if (absl::Status s = scope.Enter(c.device); !s.ok()) return s;
  cudaStream_t stream = static_cast<cudaStream_t>(c.stream);

  acu::CudaAttentionArgs a;
  a.dtype = static_cast<acu::CudaDType>(c.dtype);
  a.heads_q = c.heads_q;
  a.heads_kv = c.heads_kv;
  a.head_dim = c.head_dim;
  a.q = c.q;
  a.k = c.k;
  a.v = c.v;
  a.o = c.o;
  a.lse = c.lse;
  a.sq = {c.sq.batch, c.sq.token, c.sq.head};
  a.sk = {c.sk.batch, c.sk.token, c.sk.head};
  a.sv = {c.sv.batch, c.sv.token, c.sv.head};
  a.so = {c.so.batch, c.so.token, c.so.head};
  a.causal = c.causal;
  a.softmax_scale = c.softmax_scale;
  a.alibi_symmetric = c.alibi_symmetric;
  const bool packed = c.cu_seqlens_q != nullptr;
  int64_t max_seq_k = c.seq_k;
  StreamBuffer cu_q(stream), cu_k(stream), pos_q(stream), pos_k(stream), slopes(stream);
  const size_t i64 = sizeof(int64_t);
  if (packed) {
    a.num_seqs = c.num_seqs;
    a.max_seq_q = 0;
    max_seq_k = 0;
    for (int64_t s = 0; s < c.num_seqs; ++s) {
      a.max_seq_q = std::max(a.max_seq_q, c.cu_seqlens_q[s + 1] - c.cu_seqlens_q[s]);
      max_seq_k = std::max(max_seq_k, c.cu_seqlens_k[s + 1] - c.cu_seqlens_k[s]);
    }
    const size_t n = static_cast<size_t>(c.num_seqs + 1) * i64;
    if (absl::Status s = cu_q.Upload(c.cu_seqlens_q, n, "cu_seqlens_q"); !s.ok()) return s;
    if (absl::Status s = cu_k.Upload(c.cu_seqlens_k, n, "cu_seqlens_k"); !s.ok()) return s;
    a.cu_seqlens_q = static_cast<const int64_t*>(cu_q.get());
    a.cu_seqlens_k = static_cast<const int64_t*>(cu_k.get());
    a.tokens_k = c.tokens_k;
  } else {
    a.batch = c.batch;
    a.seq_q = c.seq_q;
    a.seq_k = c.seq_k;
  }
  if (c.q_positions != nullptr) {
    if (absl::Status s = pos_q.Upload(c.q_positions, c.tokens_q * i64, "q_positions"); !s.ok()) {
      return s;
    }
    if (absl::Status s = pos_k.Upload(c.k_positions, c.tokens_k * i64, "k_positions"); !s.ok()) {
      return s;
    }
    a.q_positions = static_cast<const int64_t*>(pos_q.get());
    a.k_positions = static_cast<const int64_t*>(pos_k.get());
  }
  if (c.alibi_slopes != nullptr) {
    const std::vector<float> f(c.alibi_slopes, c.alibi_slopes + c.heads_q);
    if (absl::Status s = slopes.Upload(f.data(), f.size() * sizeof(float), "alibi_slopes");
        !s.ok()) {
      return s;
    }
    a.alibi_slopes = static_cast<const float*>(slopes.get());
  }
  if (c.tokens_k == 0) {
    // No key anywhere: every row gets o = 0, lse = -inf without reading k or v, whose
    // data may be null (an empty tensor's); the kernels check them to be device memory.
    a.k = c.q;
    a.v = c.q;
  }
  if (c.rope != nullptr) {
    absl::StatusOr<const RopeCuda*> r = CachedRope(*c.rope, c.device);
    if (!r.ok()) return r.status();
    a.rope = *r;
  }
  if (!backward) return Forward(a, stream);
  // The backward: the forward's o and lse, recomputed when not given; gradients not
  // wanted go to scratch with the strides of their inputs.
  const int64_t seqs = packed ? 1 : c.batch;
  const int64_t rows_q = packed ? c.tokens_q : c.seq_q, rows_k = packed ? c.tokens_k : c.seq_k;
  const int64_t esize = ElementBytes(c.dtype);
  StreamBuffer o_scratch(stream), lse_scratch(stream), dq(stream), dk(stream), dv(stream);
  if (c.o == nullptr) {
    // o takes d_o's strides (so), as the backward reads them for both.
    const int64_t n = Extent(seqs, rows_q, c.heads_q, c.head_dim, c.so);
    if (absl::Status s = o_scratch.Allocate(n * esize, "o"); !s.ok()) return s;
    if (absl::Status s = lse_scratch.Allocate(c.tokens_q * c.heads_q * sizeof(float), "lse");
        !s.ok()) {
      return s;
    }
    a.o = o_scratch.get();
    a.lse = static_cast<float*>(lse_scratch.get());
    if (absl::Status s = Forward(a, stream); !s.ok()) return s;
  }
  acu::CudaAttentionBackwardArgs b;
  b.forward = a;
  b.d_o = c.d_o;
  b.dq = c.dq;
  b.dk = c.dk;
  b.dv = c.dv;
  struct Grad {
    void** out;
    StreamBuffer* scratch;
    int64_t rows, heads;
    const CallStrides* strides;
    const char* name;
  } grads[] = {{&b.dq, &dq, rows_q, c.heads_q, &c.sq, "dq"},
               {&b.dk, &dk, rows_k, c.heads_kv, &c.sk, "dk"},
               {&b.dv, &dv, rows_k, c.heads_kv, &c.sv, "dv"}};
  for (Grad& g : grads) {
    if (*g.out != nullptr) continue;
    const int64_t n = Extent(seqs, g.rows, g.heads, c.head_dim, *g.strides);
    if (absl::Status s = g.scratch->Allocate(n * esize, g.name); !s.ok()) return s;
    *g.out = g.scratch->get();
  }
  if (packed) {
    b.tokens_q = c.tokens_q;
    b.tokens_k = c.tokens_k;
    b.max_seq_k = max_seq_k;
  }
  StreamBuffer work(stream);
  const int64_t bytes = acu::CudaAttentionBackwardWorkspaceBytes(b);
  if (absl::Status s = work.Allocate(static_cast<size_t>(std::max<int64_t>(bytes, 0)),
                                     "workspace");
      !s.ok()) {
    return s;
  }
  b.workspace = work.get();
  b.workspace_bytes = bytes;
  return acu::CudaAttentionBackward(b, stream);
}

int Attention(const CudaCall* call, int backward, char* message, size_t message_size) {
  if (call == nullptr || call->abi != kPluginAbi) {
    return Report(absl::InternalError("libgpe_cuda.so: a call of another plugin ABI"), message,
                  message_size);
  }
  return Report(Run(*call, backward != 0), message, message_size);
}

absl::Status RunRope(const CudaRopeCall& c) {
  if (absl::Status s = UsableDevice(c.device); !s.ok()) return s;
  DeviceScope scope;
  if (absl::Status s = scope.Enter(c.device); !s.ok()) return s;
  cudaStream_t stream = static_cast<cudaStream_t>(c.stream);
  absl::StatusOr<const RopeCuda*> rope = CachedRope(*c.rope, c.device);
  if (!rope.ok()) return rope.status();
  StreamBuffer positions(stream);
  if (absl::Status s = positions.Upload(c.positions, c.num_positions * sizeof(int64_t),
                                        "positions");
      !s.ok()) {
    return s;
  }
  const auto* pos = static_cast<const int64_t*>(positions.get());
  const int64_t axes = (*rope)->num_axes();
  for (int64_t g = 0; g < c.num_segments; ++g) {
    const RopeSegment& seg = c.segments[g];
    seq::cuda::RopeKernelTensor t;
    t.in = seg.in;
    t.out = seg.out;
    t.heads = c.heads;
    t.token_stride = c.token_stride;
    t.head_stride = c.head_stride;
    if (seg.tokens > 0) {
      if (absl::Status s = (*rope)->Apply(static_cast<seq::cuda::RopeDType>(c.dtype), seg.tokens,
                                          pos, t, nullptr, c.backward, stream);
          !s.ok()) {
        cudaGetLastError();
        return s;
      }
    }
    pos += axes * seg.tokens;
  }
  return absl::OkStatus();
}

int Rope(const CudaRopeCall* call, char* message, size_t message_size) {
  if (call == nullptr || call->abi != kPluginAbi || call->rope == nullptr) {
    return Report(absl::InternalError("libgpe_cuda.so: a RoPE call of another plugin ABI"),
                  message, message_size);
  }
  return Report(RunRope(*call), message, message_size);
}

int CopyToHost(int32_t device, const void* src, size_t bytes, void* dst, void* stream,
               char* message, size_t message_size) {
  DeviceScope scope;
  absl::Status s = UsableDevice(device);
  if (s.ok()) s = scope.Enter(device);
  if (s.ok() && bytes > 0) {
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost,
                                    static_cast<cudaStream_t>(stream));
    if (e == cudaSuccess) e = cudaStreamSynchronize(static_cast<cudaStream_t>(stream));
    if (e != cudaSuccess) s = CudaFailed(e, "copying an index array to the host");
  }
  return Report(s, message, message_size);
}

}  // namespace
}  // namespace gpe::c_api::cuda_plugin

extern "C" __attribute__((visibility("default"))) const gpe::c_api::cuda_plugin::PluginTable*
gpe_cuda_plugin_v1() {
  static const gpe::c_api::cuda_plugin::PluginTable table{gpe::c_api::cuda_plugin::kPluginAbi,
                                                          &gpe::c_api::cuda_plugin::Attention,
                                                          &gpe::c_api::cuda_plugin::CopyToHost,
                                                          &gpe::c_api::cuda_plugin::Rope};
  return &table;
}
