// A SIMT flash-style forward: exact (float32 accumulation, online softmax in base 2),
// linear memory, with RoPE and ALiBi applied inside the kernel. One warp per query row,
// four rows of one head per block; key and value tiles of kBk rows are staged in shared
// memory (rotated there once per block) and shared by the block's rows. It does not use
// tensor cores yet: it is the correct baseline the tensor-core kernels will be tested
// against on GPU machines.
#include "attention/cuda/attention_kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>

#include "encodings/sequence/cuda/reduced_angle.cuh"

namespace gpe::attention::cuda {
namespace {

constexpr int kWarps = 4;      // query rows per block
constexpr int kBk = 16;        // keys per shared tile
constexpr int kMaxPerLane = kMaxHeadDim / 32;
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

std::string ErrorText(cudaError_t e) {
  return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
}

__device__ __forceinline__ float Load(const float* p) { return *p; }
__device__ __forceinline__ float Load(const __nv_bfloat16* p) { return __bfloat162float(*p); }
__device__ __forceinline__ float Load(const __half* p) { return __half2float(*p); }
__device__ __forceinline__ void Store(float* p, float v) { *p = v; }
__device__ __forceinline__ void Store(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }
__device__ __forceinline__ void Store(__half* p, float v) { *p = __float2half_rn(v); }

// ReducedAngle: encodings/sequence/cuda/reduced_angle.cuh.
using ::gpe::encodings::sequence::cuda::ReducedAngle;

// Rotates the rope_dim leading features of `rows` rows of stride `ld` (shared memory)
// at positions pos(row), threads [t0, t0 + nt) of the block sharing the work.
template <class PosFn>
__device__ void RotateRows(float* rows, int64_t nrows, int64_t ld, const AttentionKernelArgs& a,
                           PosFn pos, int t0, int nt) {
  const int64_t half = a.rope_dim / 2;
  for (int64_t idx = threadIdx.x - t0; idx < nrows * half; idx += nt) {
    const int64_t r = idx / half, i = idx - r * half;
    float s, c;
    sincosf(ReducedAngle(pos(r), a.rope_thetas[i]), &s, &c);
    c *= a.rope_attention_factor;
    s *= a.rope_attention_factor;
    const int64_t c1 = a.rope_interleaved ? 2 * i : i;
    const int64_t c2 = a.rope_interleaved ? 2 * i + 1 : i + half;
    float* x = rows + r * ld;
    const float x1 = x[c1], x2 = x[c2];
    x[c1] = x1 * c - x2 * s;
    x[c2] = x1 * s + x2 * c;
  }
}

template <class T>
__global__ void __launch_bounds__(kWarps * 32) ForwardKernel(AttentionKernelArgs a) {
  extern __shared__ float smem[];
  const int64_t d = a.head_dim;
  float* kt = smem;                 // [kBk][d]
  float* vt = kt + kBk * d;         // [kBk][d]
  float* qs = vt + kBk * d;         // [kWarps][d]
  int64_t* kpos = reinterpret_cast<int64_t*>(qs + kWarps * d);  // [kBk]

  const int64_t b = blockIdx.z, h = blockIdx.y;
  const int64_t g = h / (a.heads_q / a.heads_kv);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  int64_t q0 = 0, lq = a.seq_q, k0 = 0, lk = a.seq_k;
  if (a.cu_seqlens_q != nullptr) {
    q0 = a.cu_seqlens_q[b];
    lq = a.cu_seqlens_q[b + 1] - q0;
    k0 = a.cu_seqlens_k[b];
    lk = a.cu_seqlens_k[b + 1] - k0;
  }
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarps + warp;  // within the sequence
  const bool active = row < lq;
  // Tokens: qtok / ktok0 + j number the query and key tokens of the whole call (lse
  // rows, position arrays); within the tensors a padded sequence is reached through the
  // batch stride and its own token index, a packed one through its packed row alone.
  const bool packed = a.cu_seqlens_q != nullptr;
  const int64_t qtok = packed ? q0 + row : b * a.seq_q + row;
  const int64_t ktok0 = packed ? k0 : b * a.seq_k;
  const int64_t q_off = packed ? qtok * a.sq.token : b * a.sq.batch + row * a.sq.token;
  const int64_t o_off = packed ? qtok * a.so.token : b * a.so.batch + row * a.so.token;
  const int64_t kv_first = packed ? k0 : 0;  // the sequence's first row in k and v
  const int64_t k_off = packed ? 0 : b * a.sk.batch;
  const int64_t v_off = packed ? 0 : b * a.sv.batch;
  // Positions: explicit, else keys 0..lk-1 and queries the last lq of them.
  const int64_t pi = !active ? 0 : a.q_positions != nullptr ? a.q_positions[qtok] : lk - lq + row;

  // The warp's query row, rotated and scaled by scale * log2(e) (base-2 softmax).
  float* qrow = qs + warp * d;
  if (active) {
    const T* src = static_cast<const T*>(a.q) + q_off + h * a.sq.head;
    for (int64_t c = lane; c < d; c += 32) qrow[c] = Load(src + c);
  }
  __syncwarp();
  if (active && a.rope_dim > 0) {
    RotateRows(qrow, 1, d, a, [&](int64_t) { return pi; }, warp * 32, 32);
  }
  __syncwarp();
  float qreg[kMaxPerLane];
  const float qscale = a.scale * kLog2e;
#pragma unroll
  for (int e = 0; e < kMaxPerLane; ++e) {
    const int64_t c = lane + 32 * e;
    qreg[e] = (active && c < d) ? qrow[c] * qscale : 0.0f;
  }
  const float slope = a.alibi_slopes != nullptr ? a.alibi_slopes[h] * kLog2e : 0.0f;

  float m = -INFINITY, l = 0.0f, acc[kMaxPerLane];
#pragma unroll
  for (int e = 0; e < kMaxPerLane; ++e) acc[e] = 0.0f;

  for (int64_t j0 = 0; j0 < lk; j0 += kBk) {
    const int64_t nk = lk - j0 < kBk ? lk - j0 : kBk;
    __syncthreads();  // the previous tile is no longer read
    for (int64_t idx = threadIdx.x; idx < nk; idx += blockDim.x) {
      const int64_t kt_tok = ktok0 + j0 + idx;
      kpos[idx] = a.k_positions != nullptr ? a.k_positions[kt_tok] : j0 + idx;
    }
    for (int64_t idx = threadIdx.x; idx < nk * d; idx += blockDim.x) {
      const int64_t j = idx / d, c = idx - j * d;
      const int64_t row_kv = kv_first + j0 + j;
      kt[idx] = Load(static_cast<const T*>(a.k) + k_off + row_kv * a.sk.token + g * a.sk.head + c);
      vt[idx] = Load(static_cast<const T*>(a.v) + v_off + row_kv * a.sv.token + g * a.sv.head + c);
    }
    __syncthreads();
    if (a.rope_dim > 0) {
      RotateRows(kt, nk, d, a, [&](int64_t r) { return kpos[r]; }, 0, blockDim.x);
      __syncthreads();
    }
    if (!active) continue;  // (no early exit: the block's barriers need every thread)
    for (int64_t j = 0; j < nk; ++j) {
      const int64_t pj = kpos[j];
      if (a.causal && pj > pi) continue;
      float part = 0.0f;
#pragma unroll
      for (int e = 0; e < kMaxPerLane; ++e) {
        const int64_t c = lane + 32 * e;
        if (c < d) part += qreg[e] * kt[j * d + c];
      }
#pragma unroll
      for (int off = 16; off > 0; off /= 2) part += __shfl_xor_sync(0xffffffffu, part, off);
      float s = part;
      if (a.alibi_slopes != nullptr) {
        const float dist = static_cast<float>(pi - pj);
        s -= slope * (a.alibi_symmetric ? fabsf(dist) : dist);
      }
      const float mnew = fmaxf(m, s);
      // While every score so far is -inf the reference is 0, not -inf (-inf - -inf would
      // make the row NaN where the reference gives those keys probability 0); a NaN or
      // +inf score still makes it NaN.
      const float base = mnew == -INFINITY ? 0.0f : mnew;
      const float corr = exp2f(m - base);  // 0 on the first allowed key (m = -inf)
      const float p = exp2f(s - base);
      l = l * corr + p;
#pragma unroll
      for (int e = 0; e < kMaxPerLane; ++e) {
        const int64_t c = lane + 32 * e;
        // A key of probability 0 contributes nothing, whatever its value row holds.
        if (c < d) acc[e] = acc[e] * corr + (p == 0.0f ? 0.0f : p * vt[j * d + c]);
      }
      m = mnew;
    }
  }
  if (!active) return;
  T* dst = static_cast<T*>(a.o) + o_off + h * a.so.head;
  const float inv = l > 0.0f ? 1.0f / l : 0.0f;
#pragma unroll
  for (int e = 0; e < kMaxPerLane; ++e) {
    const int64_t c = lane + 32 * e;
    if (c < d) Store(dst + c, acc[e] * inv);
  }
  if (a.lse != nullptr && lane == 0) {
    // NaN rows (l NaN) keep NaN; -inf only for rows with no allowed key.
    a.lse[qtok * a.heads_q + h] = l > 0.0f ? (m + log2f(l)) * kLn2 : (l == l ? -INFINITY : l);
  }
}

}  // namespace

std::string LaunchAttentionForward(const AttentionKernelArgs& args, void* stream) {
  if (args.num_seqs == 0 || args.seq_q == 0) return "";
  const dim3 grid(static_cast<unsigned>((args.seq_q + kWarps - 1) / kWarps),
                  static_cast<unsigned>(args.heads_q), static_cast<unsigned>(args.num_seqs));
  const size_t shared = (2 * kBk + kWarps) * args.head_dim * sizeof(float) + kBk * sizeof(int64_t);
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  switch (args.dtype) {
    case CudaDType::kFloat32:
      ForwardKernel<float><<<grid, kWarps * 32, shared, s>>>(args);
      break;
    case CudaDType::kBFloat16:
      ForwardKernel<__nv_bfloat16><<<grid, kWarps * 32, shared, s>>>(args);
      break;
    case CudaDType::kFloat16:
      ForwardKernel<__half><<<grid, kWarps * 32, shared, s>>>(args);
      break;
  }
  const cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? std::string() : ErrorText(e);
}

}  // namespace gpe::attention::cuda
