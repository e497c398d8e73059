// The tensor-core attention forward for bfloat16 / float16 (sm_80 and later): a
// FlashAttention-2-style kernel (Dao, "FlashAttention-2", Algorithm 1: the query block
// stays on chip, key/value tiles stream through shared memory, online softmax with one
// rescale per tile) on warp-level mma.sync m16n8k16 with float32 accumulation.
//
// Block: 4 warps, kBr = 64 query rows (16 per warp) of one head of one sequence; key and
// value tiles of kBc = 64 rows. Shared memory holds Q, K and V tiles as 16-bit values,
// rows padded by 8 elements (16 bytes) so that the fragment loads below hit 32 distinct
// banks. Encodings inside the kernel:
//   - RoPE: the query tile once per block, each key tile after it lands, rotated in
//     float32 from the 16-bit inputs and rounded once back to 16 bits (angles reduced in
//     double, encodings/sequence/cuda/reduced_angle.cuh);
//   - ALiBi: -slope_h (p_i - p_j) (or |p_i - p_j|) added to the float32 scores;
//   - causal masking by positions (p_j <= p_i); with the default positions the tiles
//     entirely past the block's last query are never loaded.
// P is rounded to 16 bits before P V (as FlashAttention does); the softmax statistics
// and both accumulators stay float32.
//
// Fragment layouts (PTX ISA, "Matrix Fragments for mma.m16n8k16"), g = lane / 4,
// t = lane % 4: A (16 x 16, row) a0 = (g, 2t..2t+1), a1 = (g + 8, 2t..), a2 = (g,
// 2t + 8..), a3 = (g + 8, 2t + 8..); B (16 x 8, col) b0 = (k 2t..2t+1, n g), b1 = (k 2t +
// 8.., n g); C (16 x 8) c0, c1 = (g, 2t..2t+1), c2, c3 = (g + 8, 2t..2t+1).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>

#include "attention/cuda/attention_kernels.h"
#include "encodings/sequence/cuda/reduced_angle.cuh"

namespace gpe::attention::cuda {
namespace {

constexpr int kBr = 64;        // query rows per block
constexpr int kBc = 64;        // keys per tile
constexpr int kWarpsMma = 4;   // 16 query rows each
constexpr int kThreadsMma = kWarpsMma * 32;
constexpr int kPad = 8;        // elements of padding per shared row
constexpr float kLog2eMma = 1.4426950408889634f;
constexpr float kLn2Mma = 0.6931471805599453f;

using ::gpe::encodings::sequence::cuda::ReducedAngle;

template <class T>
__device__ __forceinline__ float ToF(T x);
template <>
__device__ __forceinline__ float ToF<__nv_bfloat16>(__nv_bfloat16 x) { return __bfloat162float(x); }
template <>
__device__ __forceinline__ float ToF<__half>(__half x) { return __half2float(x); }

template <class T>
__device__ __forceinline__ T FromF(float x);
template <>
__device__ __forceinline__ __nv_bfloat16 FromF<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }
template <>
__device__ __forceinline__ __half FromF<__half>(float x) { return __float2half_rn(x); }

// Two floats rounded to 16 bits and packed, the first in the low half (the element with
// the lower column index, as the fragments expect).
template <class T>
__device__ __forceinline__ uint32_t Pack(float lo, float hi) {
  T l = FromF<T>(lo), h = FromF<T>(hi);
  const uint16_t lb = *reinterpret_cast<uint16_t*>(&l), hb = *reinterpret_cast<uint16_t*>(&h);
  return static_cast<uint32_t>(lb) | (static_cast<uint32_t>(hb) << 16);
}

// c += a b on one m16n8k16 tile, float32 accumulators.
template <class T>
__device__ __forceinline__ void Mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// Four 8 x 8 16-bit matrices from shared memory, transposed (ldmatrix .trans): lane l
// gives the address of row l % 8 of matrix l / 8; register i receives, for matrix i, the
// elements (2t, g) and (2t + 1, g) of the stored matrix: a B fragment of a row-major
// [k][n] tile.
__device__ __forceinline__ void LdMatrixX4Trans(uint32_t (&r)[4], const void* row_addr) {
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(row_addr));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

__device__ __forceinline__ uint32_t Lds32(const void* p) { return *static_cast<const uint32_t*>(p); }

// Rotates rows [0, nrows) of a shared tile (row stride ld) in place: plane i of row r by
// angle pos(r) theta_i, both features times the attention factor.
template <class T, class PosFn>
__device__ void RotateTile(T* tile, int nrows, int ld, const AttentionKernelArgs& a, PosFn pos) {
  const int half = static_cast<int>(a.rope_dim / 2);
  for (int idx = threadIdx.x; idx < nrows * half; idx += blockDim.x) {
    const int r = idx / half, i = idx - r * half;
    float s, c;
    sincosf(ReducedAngle(pos(r), a.rope_thetas[i]), &s, &c);
    c *= a.rope_attention_factor;
    s *= a.rope_attention_factor;
    const int c1 = a.rope_interleaved ? 2 * i : i;
    const int c2 = a.rope_interleaved ? 2 * i + 1 : i + half;
    T* x = tile + r * ld;
    const float x1 = ToF(x[c1]), x2 = ToF(x[c2]);
    x[c1] = FromF<T>(x1 * c - x2 * s);
    x[c2] = FromF<T>(x1 * s + x2 * c);
  }
}

// Copies rows [0, nrows) of a [rows, D] view (row r at src + r * row_stride) into a
// shared tile with 16-byte vectors; rows nrows .. kBc - 1 are zero-filled so that
// out-of-range keys contribute finite zeros (their scores are masked anyway).
template <class T, int D>
__device__ void LoadTile(T* tile, const T* src, int64_t row_stride, int nrows, int rows_total) {
  constexpr int kVecs = D * static_cast<int>(sizeof(T)) / 16;  // 16-byte vectors per row
  for (int idx = threadIdx.x; idx < rows_total * kVecs; idx += blockDim.x) {
    const int r = idx / kVecs, v = idx - r * kVecs;
    uint4 val = make_uint4(0, 0, 0, 0);
    if (r < nrows) val = *reinterpret_cast<const uint4*>(src + r * row_stride + v * (16 / sizeof(T)));
    *reinterpret_cast<uint4*>(tile + r * (D + kPad) + v * (16 / sizeof(T))) = val;
  }
}

template <class T, int D>
__global__ void __launch_bounds__(kThreadsMma) MmaForwardKernel(AttentionKernelArgs a) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  constexpr int ld = D + kPad;
  T* qs = reinterpret_cast<T*>(smem_raw);
  T* ks = qs + kBr * ld;
  T* vs = ks + kBc * ld;
  int64_t* qpos = reinterpret_cast<int64_t*>(vs + kBc * ld);
  int64_t* kpos = qpos + kBr;

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t4 = lane % 4;
  const int64_t b = blockIdx.z, h = blockIdx.y;
  const int64_t kvh = h / (a.heads_q / a.heads_kv);
  const bool packed = a.cu_seqlens_q != nullptr;
  int64_t q0 = 0, lq = a.seq_q, k0 = 0, lk = a.seq_k;
  if (packed) {
    q0 = a.cu_seqlens_q[b];
    lq = a.cu_seqlens_q[b + 1] - q0;
    k0 = a.cu_seqlens_k[b];
    lk = a.cu_seqlens_k[b + 1] - k0;
  }
  // Heaviest (last, under a causal mask) query blocks first.
  const int64_t qblock = static_cast<int64_t>(gridDim.x) - 1 - blockIdx.x;
  const int64_t r0 = qblock * kBr;  // first query row of the block within the sequence
  if (r0 >= lq) return;             // the whole block exits: no barrier is skipped by half
  const int nq = static_cast<int>(lq - r0 < kBr ? lq - r0 : kBr);
  const int64_t qtok0 = packed ? q0 + r0 : b * a.seq_q + r0;  // call-wide token index
  const int64_t ktok0 = packed ? k0 : b * a.seq_k;
  const T* qsrc = static_cast<const T*>(a.q) + (packed ? qtok0 * a.sq.token : b * a.sq.batch + r0 * a.sq.token) + h * a.sq.head;
  const T* ksrc = static_cast<const T*>(a.k) + (packed ? k0 * a.sk.token : b * a.sk.batch) + kvh * a.sk.head;
  const T* vsrc = static_cast<const T*>(a.v) + (packed ? k0 * a.sv.token : b * a.sv.batch) + kvh * a.sv.head;

  // Query positions: explicit, else the last lq of 0 .. lk - 1.
  for (int r = threadIdx.x; r < kBr; r += blockDim.x) {
    qpos[r] = r >= nq ? 0 : a.q_positions != nullptr ? a.q_positions[qtok0 + r] : lk - lq + r0 + r;
  }
  LoadTile<T, D>(qs, qsrc, a.sq.token, nq, kBr);
  __syncthreads();
  if (a.rope_dim > 0) {
    RotateTile(qs, nq, ld, a, [&](int r) { return qpos[r]; });
    __syncthreads();
  }
  // This warp's query fragments, all D / 16 k-chunks, kept in registers.
  uint32_t qf[D / 16][4];
  {
    const T* base = qs + (warp * 16) * ld;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      qf[kk][0] = Lds32(base + g * ld + kk * 16 + 2 * t4);
      qf[kk][1] = Lds32(base + (g + 8) * ld + kk * 16 + 2 * t4);
      qf[kk][2] = Lds32(base + g * ld + kk * 16 + 8 + 2 * t4);
      qf[kk][3] = Lds32(base + (g + 8) * ld + kk * 16 + 8 + 2 * t4);
    }
  }
  // This thread's two rows (g and g + 8 of the warp's 16) and their positions.
  const int row_a = warp * 16 + g, row_b = row_a + 8;
  const int64_t pa = qpos[row_a], pb = qpos[row_b];
  const float scale2 = a.scale * kLog2eMma;  // scores in base 2
  const float slope2 = a.alibi_slopes != nullptr ? a.alibi_slopes[h] * kLog2eMma : 0.0f;

  float o[D / 8][4];
#pragma unroll
  for (int n = 0; n < D / 8; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
  float m_a = -INFINITY, m_b = -INFINITY, l_a = 0.0f, l_b = 0.0f;

  // Keys past the block's last query position are masked for every row when causal with
  // the default positions: those tiles are skipped.
  int64_t kend = lk;
  if (a.causal && a.q_positions == nullptr) {
    const int64_t last = lk - lq + r0 + nq - 1;  // the block's largest query position
    kend = last + 1 < lk ? (last + 1 > 0 ? last + 1 : 0) : lk;
  }
  for (int64_t j0 = 0; j0 < kend; j0 += kBc) {
    const int nk = static_cast<int>(lk - j0 < kBc ? lk - j0 : kBc);
    __syncthreads();  // every warp is done with the previous K and V tiles
    for (int j = threadIdx.x; j < kBc; j += blockDim.x) {
      kpos[j] = j >= nk ? 0 : a.k_positions != nullptr ? a.k_positions[ktok0 + j0 + j] : j0 + j;
    }
    LoadTile<T, D>(ks, ksrc + j0 * a.sk.token, a.sk.token, nk, kBc);
    LoadTile<T, D>(vs, vsrc + j0 * a.sv.token, a.sv.token, nk, kBc);
    __syncthreads();
    if (a.rope_dim > 0) {
      RotateTile(ks, nk, ld, a, [&](int r) { return kpos[r]; });
      __syncthreads();
    }
    // S = Q K^T for this warp's 16 rows and the tile's 64 keys: 8 n-tiles of 8 keys.
    float s[kBc / 8][4];
#pragma unroll
    for (int n = 0; n < kBc / 8; ++n) {
      s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
      const T* krow = ks + (n * 8 + g) * ld + 2 * t4;
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        Mma<T>(s[n], qf[kk], Lds32(krow + kk * 16), Lds32(krow + kk * 16 + 8));
      }
    }
    // Scale, bias, mask; row maxima over this thread's 16 entries per row, then the quad.
    float mx_a = -INFINITY, mx_b = -INFINITY;
#pragma unroll
    for (int n = 0; n < kBc / 8; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int j = n * 8 + 2 * t4 + (e & 1);
        const int64_t pi = e < 2 ? pa : pb;
        const int64_t pj = kpos[j];
        float v = s[n][e] * scale2;
        if (a.alibi_slopes != nullptr) {
          const float dist = static_cast<float>(pi - pj);
          v -= slope2 * (a.alibi_symmetric ? fabsf(dist) : dist);
        }
        if (j >= nk || (a.causal && pj > pi)) v = -INFINITY;
        s[n][e] = v;
        if (e < 2) mx_a = fmaxf(mx_a, v); else mx_b = fmaxf(mx_b, v);
      }
    }
#pragma unroll
    for (int off = 1; off < 4; off *= 2) {
      mx_a = fmaxf(mx_a, __shfl_xor_sync(0xffffffffu, mx_a, off));
      mx_b = fmaxf(mx_b, __shfl_xor_sync(0xffffffffu, mx_b, off));
    }
    const float mn_a = fmaxf(m_a, mx_a), mn_b = fmaxf(m_b, mx_b);
    // A row with no allowed key so far keeps m = -inf: exponents use 0 instead, so every
    // p is exp2(-inf) = 0 and nothing becomes NaN.
    const float base_a = mn_a == -INFINITY ? 0.0f : mn_a;
    const float base_b = mn_b == -INFINITY ? 0.0f : mn_b;
    const float corr_a = exp2f(m_a - base_a), corr_b = exp2f(m_b - base_b);
    m_a = mn_a;
    m_b = mn_b;
    l_a *= corr_a;
    l_b *= corr_b;
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
      o[n][0] *= corr_a;
      o[n][1] *= corr_a;
      o[n][2] *= corr_b;
      o[n][3] *= corr_b;
    }
    // P (rounded to 16 bits) as A fragments: k-chunk c of 16 keys = n-tiles 2c, 2c + 1.
    uint32_t pf[kBc / 16][4];
#pragma unroll
    for (int c = 0; c < kBc / 16; ++c) {
      float p[2][4];
#pragma unroll
      for (int hlf = 0; hlf < 2; ++hlf) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          p[hlf][e] = exp2f(s[2 * c + hlf][e] - (e < 2 ? base_a : base_b));
        }
        l_a += p[hlf][0] + p[hlf][1];
        l_b += p[hlf][2] + p[hlf][3];
      }
      pf[c][0] = Pack<T>(p[0][0], p[0][1]);
      pf[c][1] = Pack<T>(p[0][2], p[0][3]);
      pf[c][2] = Pack<T>(p[1][0], p[1][1]);
      pf[c][3] = Pack<T>(p[1][2], p[1][3]);
    }
    // O += P V: V tile rows are keys (k), columns features (n); ldmatrix.trans gives the B
    // fragments of two 8-feature n-tiles at once.
#pragma unroll
    for (int c = 0; c < kBc / 16; ++c) {
#pragma unroll
      for (int n = 0; n < D / 8; n += 2) {
        // lanes 0-7: keys 16c + 0..7, features 8n..; 8-15: keys 16c + 8..15, same
        // features; 16-23 and 24-31: the same keys, features 8(n + 1)...
        const int mat = lane / 8, r = lane % 8;
        const T* addr = vs + (c * 16 + (mat & 1) * 8 + r) * ld + (n + (mat >> 1)) * 8;
        uint32_t bv[4];
        LdMatrixX4Trans(bv, addr);
        Mma<T>(o[n], pf[c], bv[0], bv[1]);
        Mma<T>(o[n + 1], pf[c], bv[2], bv[3]);
      }
    }
  }
  // Row sums over the quad, then normalise and store rows g and g + 8.
#pragma unroll
  for (int off = 1; off < 4; off *= 2) {
    l_a += __shfl_xor_sync(0xffffffffu, l_a, off);
    l_b += __shfl_xor_sync(0xffffffffu, l_b, off);
  }
  const float inv_a = l_a > 0.0f ? 1.0f / l_a : 0.0f, inv_b = l_b > 0.0f ? 1.0f / l_b : 0.0f;
  T* out = static_cast<T*>(a.o) + (packed ? qtok0 * a.so.token : b * a.so.batch + r0 * a.so.token) + h * a.so.head;
#pragma unroll
  for (int n = 0; n < D / 8; ++n) {
    const int col = n * 8 + 2 * t4;
    if (row_a < nq) {
      *reinterpret_cast<uint32_t*>(out + row_a * a.so.token + col) = Pack<T>(o[n][0] * inv_a, o[n][1] * inv_a);
    }
    if (row_b < nq) {
      *reinterpret_cast<uint32_t*>(out + row_b * a.so.token + col) = Pack<T>(o[n][2] * inv_b, o[n][3] * inv_b);
    }
  }
  if (a.lse != nullptr && t4 == 0) {
    if (row_a < nq) a.lse[(qtok0 + row_a) * a.heads_q + h] = l_a > 0.0f ? (m_a + log2f(l_a)) * kLn2Mma : -INFINITY;
    if (row_b < nq) a.lse[(qtok0 + row_b) * a.heads_q + h] = l_b > 0.0f ? (m_b + log2f(l_b)) * kLn2Mma : -INFINITY;
  }
}

template <class T, int D>
std::string Launch(const AttentionKernelArgs& args, cudaStream_t s) {
  constexpr int ld = D + kPad;
  const size_t shared = static_cast<size_t>(kBr + 2 * kBc) * ld * sizeof(T) + (kBr + kBc) * sizeof(int64_t);
  cudaError_t e = cudaFuncSetAttribute(MmaForwardKernel<T, D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(shared));
  if (e != cudaSuccess) return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
  const dim3 grid(static_cast<unsigned>((args.seq_q + kBr - 1) / kBr), static_cast<unsigned>(args.heads_q),
                  static_cast<unsigned>(args.num_seqs));
  MmaForwardKernel<T, D><<<grid, kThreadsMma, shared, s>>>(args);
  e = cudaGetLastError();
  return e == cudaSuccess ? std::string() : std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
}

}  // namespace

std::string MmaIneligibility(const AttentionKernelArgs& a) {
  if (a.dtype != CudaDType::kBFloat16 && a.dtype != CudaDType::kFloat16) {
    return "the tensor-core kernel takes bfloat16 or float16 (float32 runs on the SIMT kernel)";
  }
  if (a.head_dim != 64 && a.head_dim != 128) return "the tensor-core kernel takes head_dim 64 or 128";
  const void* const tensors[] = {a.q, a.k, a.v, a.o};
  for (const void* p : tensors) {
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return "q, k, v and o must be 16-byte aligned";
  }
  const CudaStrides* const strides[] = {&a.sq, &a.sk, &a.sv, &a.so};
  for (const CudaStrides* st : strides) {
    if (st->token % 8 != 0 || st->head % 8 != 0 || st->batch % 8 != 0) {
      return "strides must be multiples of 8 elements (16 bytes)";
    }
  }
  return "";
}

std::string LaunchAttentionForwardMma(const AttentionKernelArgs& args, void* stream) {
  if (args.num_seqs == 0 || args.seq_q == 0) return "";
  if (std::string why = MmaIneligibility(args); !why.empty()) return why;
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  const bool bf16 = args.dtype == CudaDType::kBFloat16;
  if (args.head_dim == 64) return bf16 ? Launch<__nv_bfloat16, 64>(args, s) : Launch<__half, 64>(args, s);
  return bf16 ? Launch<__nv_bfloat16, 128>(args, s) : Launch<__half, 128>(args, s);
}

}  // namespace gpe::attention::cuda
