// The tensor-core attention backward for bfloat16 / float16 (sm_80 and later), after
// FlashAttention-2's backward pass (Dao, "FlashAttention-2", Algorithm 2): the forward's
// log-sum-exp L_i and D_i = rowsum(dO_i o O_i) let every block recompute
//   P = exp(S - L),  dV += P^T dO,  dP = dO V^T,  dS = P o (dP - D),
//   dK += scale dS^T Q,  dQ += scale dS K
// for one block of keys (and one key/value head) over every query tile and every query
// head of its GQA group, keeping dK and dV in registers; dQ is summed across key blocks
// with float32 atomics (8-byte vector atomics on sm_90) into a workspace.
//
// Work per block (default): 8 warps, each 16 of the block's 128 keys, for S^T = K Q^T,
// dP^T = V dO^T, dV and dK (keys are the M dimension, so P^T and dS^T land in registers
// in the A-operand layout that dV = P^T dO and dK = dS^T Q need); dS^T also goes to
// shared memory, from which the warps take dQ = dS K in 16-row, feature-split slices
// (ldmatrix.trans reads the transpose). Query tiles of 64 rows; with RoPE the rotated q
// and k come from a workspace (rotated once per call) and the gradients are rotated back
// at the end: dq = R(-p) dq~, dk = R(-p) dk~ (R orthogonal). ALiBi and causal masks as in
// the forward.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "attention/cuda/attention_kernels.h"
#include "attention/cuda/mma_common.cuh"

namespace gpe::attention::cuda {
namespace {

using namespace ::gpe::attention::cuda::mma;  // mma_common.cuh

constexpr int kBq = 64;  // query rows per tile

// A configuration: warps per block (16 keys each: kBk = 16 kWarps keys per block). Config
// 0 (8 warps, 128 keys: half the dQ atomics of 64-key blocks) is the default; config 1
// (4 warps, 64 keys) stays for the benchmark (AttentionKernelArgs::mma_config). Measured
// on an H200 (bf16, b1 h16 s4096 d128, 2026-11-28): 173 / 135 TFLOP/s non-causal /
// causal against 159 / 130.
template <int kWarpsT>
struct BwdCfg {
  static constexpr int kWarps = kWarpsT;
  static constexpr int kBk = 16 * kWarpsT;
  static constexpr int kThreads = 32 * kWarpsT;
};

std::string Err(cudaError_t e) {
  return e == cudaSuccess ? std::string()
                          : std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
}

// Copies rows [0, nrows) of a [rows, D] view into a shared tile by cp.async (rows past
// nrows zero-filled); completion by CpAsyncWait + a barrier.
template <class T, int D>
__device__ __forceinline__ void LoadRows(T* tile, int ld, const T* src, int64_t row_stride,
                                         int nrows, int rows) {
  constexpr int kPer = 16 / static_cast<int>(sizeof(T));
  constexpr int kVecs = D / kPer;
  for (int idx = threadIdx.x; idx < rows * kVecs; idx += blockDim.x) {
    const int r = idx / kVecs, v = idx - r * kVecs;
    const bool valid = r < nrows;
    CpAsync16(tile + r * ld + v * kPer, valid ? src + r * row_stride + v * kPer : src, valid);
  }
}

// D_i = sum_c dO_ic O_ic (float32), one warp per (query token, head).
template <class T>
__global__ void RowDotKernel(AttentionBackwardKernelArgs b, int64_t rows) {
  const AttentionKernelArgs& a = b.fwd;
  const int64_t warp = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (warp >= rows) return;
  const int64_t tok = warp / a.heads_q, h = warp - tok * a.heads_q;
  // Token tok of the call: padded (batch tok / seq_q, row tok % seq_q) or the packed row.
  const bool packed = a.cu_seqlens_q != nullptr;
  const int64_t bi = packed ? 0 : tok / a.seq_q, r = packed ? tok : tok - bi * a.seq_q;
  const T* o = static_cast<const T*>(a.o) + bi * a.so.batch + r * a.so.token + h * a.so.head;
  const T* d_o = static_cast<const T*>(b.d_o) + bi * a.so.batch + r * a.so.token + h * a.so.head;
  float acc = 0.0f;
  for (int64_t c = lane; c < a.head_dim; c += 32) acc += ToF(o[c]) * ToF(d_o[c]);
  for (int off = 16; off > 0; off /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, off);
  if (lane == 0) b.row_dot[warp] = acc;
}

template <class T, int D, class C>
__global__ void __launch_bounds__(C::kThreads) BackwardKernel(AttentionBackwardKernelArgs bw) {
  constexpr int kBk = C::kBk;
  const AttentionKernelArgs& a = bw.fwd;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  constexpr int ld = D + kPad;
  constexpr int lds = kBq + kPad;  // dS^T rows: keys, columns: queries
  T* ks = reinterpret_cast<T*>(smem_raw);
  T* vs = ks + kBk * ld;
  T* qs = vs + kBk * ld;
  T* dos = qs + kBq * ld;
  T* dss = dos + kBq * ld;                                  // [kBk][lds]
  float* lse2 = reinterpret_cast<float*>(dss + kBk * lds);  // [kBq] L_i log2(e), +inf: no key
  float* dvals = lse2 + kBq;                                // [kBq]
  int64_t* qpos = reinterpret_cast<int64_t*>(dvals + kBq);  // [kBq]
  int64_t* kpos = qpos + kBq;                               // [kBk]

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t4 = lane % 4;
  const int mat = lane / 8, mr = lane % 8;
  const int64_t b = blockIdx.z, kvh = blockIdx.y;
  const int64_t group = a.heads_q / a.heads_kv;
  const bool packed = a.cu_seqlens_q != nullptr;
  int64_t q0 = 0, lq = a.seq_q, k0 = 0, lk = a.seq_k;
  if (packed) {
    q0 = a.cu_seqlens_q[b];
    lq = a.cu_seqlens_q[b + 1] - q0;
    k0 = a.cu_seqlens_k[b];
    lk = a.cu_seqlens_k[b + 1] - k0;
  }
  const int64_t j0 = static_cast<int64_t>(blockIdx.x) * kBk;
  if (j0 >= lk) return;  // whole block
  const int nk = static_cast<int>(lk - j0 < kBk ? lk - j0 : kBk);
  const int64_t ktok0 = (packed ? k0 : b * a.seq_k) + j0;  // call-wide index of key j0
  const int64_t qtok_seq = packed ? q0 : b * a.seq_q;      // call-wide index of query 0
  // Keys (rotated when bw.qk_rotated: dense [tokens, heads, D] in the workspace) and values.
  const T* ksrc = bw.qk_rotated
                      ? static_cast<const T*>(bw.k_rot) + (ktok0 * a.heads_kv + kvh) * D
                      : static_cast<const T*>(a.k) +
                            (packed ? (k0 + j0) * a.sk.token : b * a.sk.batch + j0 * a.sk.token) +
                            kvh * a.sk.head;
  const int64_t kstride = bw.qk_rotated ? a.heads_kv * D : a.sk.token;
  const T* vsrc = static_cast<const T*>(a.v) +
                  (packed ? (k0 + j0) * a.sv.token : b * a.sv.batch + j0 * a.sv.token) +
                  kvh * a.sv.head;
  for (int j = threadIdx.x; j < kBk; j += blockDim.x) {
    kpos[j] = j >= nk ? 0 : a.k_positions != nullptr ? a.k_positions[ktok0 + j] : j0 + j;
  }
  LoadRows<T, D>(ks, ld, ksrc, kstride, nk, kBk);
  LoadRows<T, D>(vs, ld, vsrc, a.sv.token, nk, kBk);
  CpAsyncCommit();

  float dk[D / 8][4], dv[D / 8][4];
#pragma unroll
  for (int n = 0; n < D / 8; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) dk[n][e] = dv[n][e] = 0.0f;
  }
  const float scale2 = a.scale * kLog2eMma;
  // Query tiles before the first one that can see key j0 are skipped when causal with
  // the default positions (query row r has position lk - lq + r).
  int64_t first_tile = 0;
  if (a.causal && a.q_positions == nullptr) {
    const int64_t first_row = j0 - (lk - lq);
    first_tile = first_row > 0 ? first_row / kBq : 0;
  }
  const int krow = warp * 16;  // this warp's keys within the block

  for (int64_t hh = 0; hh < group; ++hh) {
    const int64_t h = kvh * group + hh;
    const float slope2 = a.alibi_slopes != nullptr ? a.alibi_slopes[h] * kLog2eMma : 0.0f;
    for (int64_t i0 = first_tile * kBq; i0 < lq; i0 += kBq) {
      const int nq = static_cast<int>(lq - i0 < kBq ? lq - i0 : kBq);
      const int64_t qtok0 = qtok_seq + i0;
      __syncthreads();  // the previous tile's Q, dO and dS are no longer read
      const T* qsrc = bw.qk_rotated
                          ? static_cast<const T*>(bw.q_rot) + (qtok0 * a.heads_q + h) * D
                          : static_cast<const T*>(a.q) +
                                (packed ? qtok0 * a.sq.token : b * a.sq.batch + i0 * a.sq.token) +
                                h * a.sq.head;
      const int64_t qstride = bw.qk_rotated ? a.heads_q * D : a.sq.token;
      const T* dosrc = static_cast<const T*>(bw.d_o) +
                       (packed ? qtok0 * a.so.token : b * a.so.batch + i0 * a.so.token) +
                       h * a.so.head;
      LoadRows<T, D>(qs, ld, qsrc, qstride, nq, kBq);
      LoadRows<T, D>(dos, ld, dosrc, a.so.token, nq, kBq);
      CpAsyncCommit();
      for (int r = threadIdx.x; r < kBq; r += blockDim.x) {
        const bool in = r < nq;
        const float l = in ? bw.lse[(qtok0 + r) * a.heads_q + h] : INFINITY;
        lse2[r] = (!in || l == -INFINITY) ? INFINITY : l * kLog2eMma;  // rows with no key: P = 0
        dvals[r] = in ? bw.row_dot[(qtok0 + r) * a.heads_q + h] : 0.0f;
        qpos[r] = !in ? 0 : a.q_positions != nullptr ? a.q_positions[qtok0 + r] : lk - lq + i0 + r;
      }
      CpAsyncWait<0>();
      __syncthreads();
      // S^T = K Q^T and dP^T = V dO^T for this warp's 16 keys and the 64 queries.
      float s[kBq / 8][4], dp[kBq / 8][4];
#pragma unroll
      for (int n = 0; n < kBq / 8; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) s[n][e] = dp[n][e] = 0.0f;
      }
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        uint32_t ka[4], va[4];
        LdMatrixX4(ka, ks + (krow + (mat & 1) * 8 + mr) * ld + kk * 16 + (mat >> 1) * 8);
        LdMatrixX4(va, vs + (krow + (mat & 1) * 8 + mr) * ld + kk * 16 + (mat >> 1) * 8);
#pragma unroll
        for (int n = 0; n < kBq / 8; n += 2) {
          // B = Q^T / dO^T: rows (queries) 8n.. of the [query][feature] tiles, plain.
          uint32_t qb[4], ob[4];
          LdMatrixX4(qb, qs + (n * 8 + (mat >> 1) * 8 + mr) * ld + kk * 16 + (mat & 1) * 8);
          LdMatrixX4(ob, dos + (n * 8 + (mat >> 1) * 8 + mr) * ld + kk * 16 + (mat & 1) * 8);
          Mma<T>(s[n], ka, qb[0], qb[1]);
          Mma<T>(s[n + 1], ka, qb[2], qb[3]);
          Mma<T>(dp[n], va, ob[0], ob[1]);
          Mma<T>(dp[n + 1], va, ob[2], ob[3]);
        }
      }
      // P^T and dS^T = P^T o (dP^T - D) in place: element (key krow + g (+8), query
      // 8n + 2t (+1)).
      const bool need_mask =
          nk < kBk || nq < kBq ||
          (a.causal && (a.q_positions != nullptr || j0 + kBk - 1 > lk - lq + i0));
#pragma unroll
      for (int n = 0; n < kBq / 8; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int kj = krow + g + 8 * (e >> 1);
          const int qi = n * 8 + 2 * t4 + (e & 1);
          float v = s[n][e] * scale2;
          if (a.alibi_slopes != nullptr) {
            const float dist = static_cast<float>(qpos[qi] - kpos[kj]);
            v -= slope2 * (a.alibi_symmetric ? fabsf(dist) : dist);
          }
          // Masked entries and keys of probability 0 take no part (descriptor.h,
          // NON-FINITE VALUES): P = dS = 0 there even in a NaN row (lse NaN, D NaN), so
          // NaN reaches only the row's allowed keys, as in the reference.
          const bool masked =
              need_mask && (kj >= nk || qi >= nq || (a.causal && kpos[kj] > qpos[qi]));
          const float p = masked ? 0.0f : Exp2(v - lse2[qi]);
          s[n][e] = p;
          dp[n][e] = p == 0.0f ? 0.0f : p * (dp[n][e] - dvals[qi]);
        }
      }
      // dV += P^T dO and dK += dS^T Q: A from registers (k-chunk c = queries 16c..),
      // B = dO / Q as [query][feature] tiles read transposed.
#pragma unroll
      for (int c = 0; c < kBq / 16; ++c) {
        uint32_t pa[4], da[4];
        pa[0] = Pack<T>(s[2 * c][0], s[2 * c][1]);
        pa[1] = Pack<T>(s[2 * c][2], s[2 * c][3]);
        pa[2] = Pack<T>(s[2 * c + 1][0], s[2 * c + 1][1]);
        pa[3] = Pack<T>(s[2 * c + 1][2], s[2 * c + 1][3]);
        da[0] = Pack<T>(dp[2 * c][0], dp[2 * c][1]);
        da[1] = Pack<T>(dp[2 * c][2], dp[2 * c][3]);
        da[2] = Pack<T>(dp[2 * c + 1][0], dp[2 * c + 1][1]);
        da[3] = Pack<T>(dp[2 * c + 1][2], dp[2 * c + 1][3]);
        // dS^T to shared memory for dQ: rows krow + g (+8), columns 16c + 2t (+1, +8, +9).
        T* drow = dss + (krow + g) * lds + c * 16 + 2 * t4;
        *reinterpret_cast<uint32_t*>(drow) = da[0];
        *reinterpret_cast<uint32_t*>(drow + 8 * lds) = da[1];
        *reinterpret_cast<uint32_t*>(drow + 8) = da[2];
        *reinterpret_cast<uint32_t*>(drow + 8 * lds + 8) = da[3];
#pragma unroll
        for (int n = 0; n < D / 8; n += 2) {
          uint32_t ob[4], qb[4];
          LdMatrixX4Trans(ob, dos + (c * 16 + (mat & 1) * 8 + mr) * ld + (n + (mat >> 1)) * 8);
          LdMatrixX4Trans(qb, qs + (c * 16 + (mat & 1) * 8 + mr) * ld + (n + (mat >> 1)) * 8);
          Mma<T>(dv[n], pa, ob[0], ob[1]);
          Mma<T>(dv[n + 1], pa, ob[2], ob[3]);
          Mma<T>(dk[n], da, qb[0], qb[1]);
          Mma<T>(dk[n + 1], da, qb[2], qb[3]);
        }
      }
      __syncthreads();  // dS^T complete
      // dQ~ rows 16 (warp % 4) .. + 15 of the tile, features split among the warps with
      // that row group, += scale dS K: A = dS (queries x keys) read transposed from dS^T,
      // B = K as a [key][feature] tile read transposed; 32 features at a time, added to
      // the float32 workspace.
      const int qrow = (warp % 4) * 16;
      constexpr int kSplit = C::kWarps / 4, kFeat = D / kSplit;
      static_assert(kFeat % 32 == 0, "each warp's dQ features come in 32s");
#pragma unroll
      for (int f0 = (warp / 4) * kFeat; f0 < (warp / 4 + 1) * kFeat; f0 += 32) {
        float acc[4][4];
#pragma unroll
        for (int n = 0; n < 4; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
#pragma unroll
        for (int c = 0; c < kBk / 16; ++c) {
          uint32_t sa[4];
          // matrices: (queries 0-7, keys 0-7), (queries 8-15, keys 0-7), (0-7, 8-15),
          // (8-15, 8-15) of the block, stored as [key][query].
          LdMatrixX4Trans(sa, dss + (c * 16 + (mat >> 1) * 8 + mr) * lds + qrow + (mat & 1) * 8);
#pragma unroll
          for (int n = 0; n < 4; n += 2) {
            uint32_t kb[4];
            LdMatrixX4Trans(kb,
                            ks + (c * 16 + (mat & 1) * 8 + mr) * ld + f0 + (n + (mat >> 1)) * 8);
            Mma<T>(acc[n], sa, kb[0], kb[1]);
            Mma<T>(acc[n + 1], sa, kb[2], kb[3]);
          }
        }
#pragma unroll
        for (int n = 0; n < 4; ++n) {
#pragma unroll
          for (int hf = 0; hf < 2; ++hf) {
            const int r = qrow + g + 8 * hf;
            if (r >= nq) continue;
            float* dst = bw.dq_accum + ((qtok0 + r) * a.heads_q + h) * D + f0 + n * 8 + 2 * t4;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
            // One 8-byte vector atomic (sm_90) for the two neighbouring features.
            atomicAdd(reinterpret_cast<float2*>(dst),
                      make_float2(acc[n][2 * hf] * a.scale, acc[n][2 * hf + 1] * a.scale));
#else
            atomicAdd(dst, acc[n][2 * hf] * a.scale);
            atomicAdd(dst + 1, acc[n][2 * hf + 1] * a.scale);
#endif
          }
        }
      }
    }
  }
  // A sequence with keys but no queries ran no tile: its K / V copy is still in flight.
  CpAsyncWait<0>();
  // dV to its output; dK (times the scale) to its output, or rotated back later from the
  // float32 workspace when RoPE is on.
#pragma unroll
  for (int hf = 0; hf < 2; ++hf) {
    const int j = krow + g + 8 * hf;
    if (j >= nk) continue;
    const int64_t tok = ktok0 + j;  // call-wide key token
    T* dvrow = static_cast<T*>(bw.dv) +
               (packed ? tok * a.sv.token : b * a.sv.batch + (j0 + j) * a.sv.token) +
               kvh * a.sv.head;
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
      *reinterpret_cast<uint32_t*>(dvrow + n * 8 + 2 * t4) =
          Pack<T>(dv[n][2 * hf], dv[n][2 * hf + 1]);
    }
    if (a.rope_dim > 0) {
      float* dkrow = bw.dk_accum + (tok * a.heads_kv + kvh) * D;
#pragma unroll
      for (int n = 0; n < D / 8; ++n) {
        dkrow[n * 8 + 2 * t4] = dk[n][2 * hf] * a.scale;
        dkrow[n * 8 + 2 * t4 + 1] = dk[n][2 * hf + 1] * a.scale;
      }
    } else {
      T* dkrow = static_cast<T*>(bw.dk) +
                 (packed ? tok * a.sk.token : b * a.sk.batch + (j0 + j) * a.sk.token) +
                 kvh * a.sk.head;
#pragma unroll
      for (int n = 0; n < D / 8; ++n) {
        *reinterpret_cast<uint32_t*>(dkrow + n * 8 + 2 * t4) =
            Pack<T>(dk[n][2 * hf] * a.scale, dk[n][2 * hf + 1] * a.scale);
      }
    }
  }
}

// Writes dq (and dk when RoPE is on) from the float32 workspaces: rotated back by
// R(-p) when RoPE is on, rounded once to T. One thread per (token, head, plane or
// feature); `is_key` picks k's positions, heads and strides.
template <class T>
__global__ void FinishKernel(AttentionBackwardKernelArgs bw, bool is_key, int64_t tokens) {
  const AttentionKernelArgs& a = bw.fwd;
  const int64_t heads = is_key ? a.heads_kv : a.heads_q, d = a.head_dim;
  const int64_t half = a.rope_dim / 2, rest = d - a.rope_dim;
  const int64_t per_token = heads * (half + rest);
  const float* src = is_key ? bw.dk_accum : bw.dq_accum;
  T* out = static_cast<T*>(is_key ? bw.dk : bw.dq);
  const CudaStrides st = is_key ? a.sk : a.sq;
  const int64_t* posv = is_key ? a.k_positions : a.q_positions;
  const int64_t* cu = is_key ? a.cu_seqlens_k : a.cu_seqlens_q;
  const int64_t seq_len = is_key ? a.seq_k : a.seq_q;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       idx < tokens * per_token; idx += stride) {
    const int64_t tok = idx / per_token, rem = idx - tok * per_token;
    const int64_t h = rem / (half + rest), w = rem - h * (half + rest);
    // The token's batch and row (padded) and its default position.
    int64_t bi = 0, r = tok, pos = 0;
    if (cu == nullptr) {
      bi = tok / seq_len;
      r = tok - bi * seq_len;
    }
    if (posv != nullptr) {
      pos = posv[tok];
    } else if (a.rope_dim > 0) {
      // Default positions: keys 0 .. lk - 1, queries the last lq of them.
      int64_t s0 = 0, lq = a.seq_q, lk = a.seq_k, seq = bi;
      if (cu != nullptr) {  // the packed token's sequence, by binary search
        int64_t lo = 0, hi = a.num_seqs;
        while (hi - lo > 1) {
          const int64_t mid = (lo + hi) / 2;
          if (cu[mid] <= tok)
            lo = mid;
          else
            hi = mid;
        }
        seq = lo;
        s0 = cu[seq];
        lq = a.cu_seqlens_q[seq + 1] - a.cu_seqlens_q[seq];
        lk = a.cu_seqlens_k[seq + 1] - a.cu_seqlens_k[seq];
      }
      const int64_t row = cu != nullptr ? tok - s0 : r;
      pos = is_key ? row : lk - lq + row;
    }
    const float* x = src + (tok * heads + h) * d;
    T* y = out + (cu != nullptr ? tok * st.token : bi * st.batch + r * st.token) + h * st.head;
    if (w >= half) {
      const int64_t c = a.rope_dim + (w - half);
      y[c] = FromF<T>(x[c]);
      continue;
    }
    const int64_t c1 = a.rope_interleaved ? 2 * w : w;
    const int64_t c2 = a.rope_interleaved ? 2 * w + 1 : w + half;
    float sn, cn;
    sincosf(ReducedAngle(pos, a.rope_thetas[w]), &sn, &cn);
    cn *= a.rope_attention_factor;
    sn *= a.rope_attention_factor;
    const float x1 = x[c1], x2 = x[c2];
    // The forward maps x to m R(a) x; its transpose is m R(-a).
    y[c1] = FromF<T>(x1 * cn + x2 * sn);
    y[c2] = FromF<T>(-x1 * sn + x2 * cn);
  }
}

template <class T, int D, class C>
std::string LaunchBwd(const AttentionBackwardKernelArgs& bw, int64_t max_seq_k, int64_t tokens_q,
                      int64_t tokens_k, cudaStream_t s) {
  constexpr int kBk = C::kBk;
  const AttentionKernelArgs& a = bw.fwd;
  std::string e;
  const int64_t rows = tokens_q * a.heads_q;
  if (rows > 0) {
    RowDotKernel<T><<<static_cast<unsigned>((rows * 32 + 255) / 256), 256, 0, s>>>(bw, rows);
    if (!(e = Err(cudaGetLastError())).empty()) return e;
  }
  if (a.rope_dim > 0) {  // q~ and k~ into the workspace
    if (!(e = LaunchRotateTokens(a, bw.q_rot, true, s)).empty()) return e;
    if (!(e = LaunchRotateTokens(a, bw.k_rot, false, s)).empty()) return e;
  }
  if (!(e = Err(cudaMemsetAsync(bw.dq_accum, 0, tokens_q * a.heads_q * D * sizeof(float), s)))
           .empty())
    return e;
  constexpr int ld = D + kPad, lds = kBq + kPad;
  const size_t shared = static_cast<size_t>(2 * kBk + 2 * kBq) * ld * sizeof(T) +
                        kBk * lds * sizeof(T) + 2 * kBq * sizeof(float) +
                        (kBq + kBk) * sizeof(int64_t);
  if (!(e = Err(cudaFuncSetAttribute(BackwardKernel<T, D, C>,
                                     cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(shared))))
           .empty()) {
    return e;
  }
  const dim3 grid(static_cast<unsigned>((max_seq_k + kBk - 1) / kBk),
                  static_cast<unsigned>(a.heads_kv), static_cast<unsigned>(a.num_seqs));
  if (max_seq_k > 0) {
    BackwardKernel<T, D, C><<<grid, C::kThreads, shared, s>>>(bw);
    if (!(e = Err(cudaGetLastError())).empty()) return e;
  }
  const int64_t fin_q = tokens_q * a.heads_q * (a.rope_dim / 2 + D - a.rope_dim);
  if (fin_q > 0) {
    FinishKernel<T>
        <<<static_cast<unsigned>(std::min<int64_t>((fin_q + 255) / 256, 65535)), 256, 0, s>>>(
            bw, false, tokens_q);
    if (!(e = Err(cudaGetLastError())).empty()) return e;
  }
  const int64_t fin_k = tokens_k * a.heads_kv * (a.rope_dim / 2 + D - a.rope_dim);
  if (a.rope_dim > 0 && fin_k > 0) {
    FinishKernel<T>
        <<<static_cast<unsigned>(std::min<int64_t>((fin_k + 255) / 256, 65535)), 256, 0, s>>>(
            bw, true, tokens_k);
    if (!(e = Err(cudaGetLastError())).empty()) return e;
  }
  return "";
}

}  // namespace

std::string LaunchAttentionBackwardMma(const AttentionBackwardKernelArgs& bw, int64_t max_seq_k,
                                       int64_t tokens_q, int64_t tokens_k, void* stream) {
  const AttentionKernelArgs& a = bw.fwd;
  if (a.num_seqs == 0) return "";
  if (std::string why = MmaIneligibility(a); !why.empty()) return why;
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  const bool bf16 = a.dtype == CudaDType::kBFloat16;
  const bool wide = a.mma_config != 1;
  if (a.head_dim == 64) {
    if (wide) {
      return bf16 ? LaunchBwd<__nv_bfloat16, 64, BwdCfg<8>>(bw, max_seq_k, tokens_q, tokens_k, s)
                  : LaunchBwd<__half, 64, BwdCfg<8>>(bw, max_seq_k, tokens_q, tokens_k, s);
    }
    return bf16 ? LaunchBwd<__nv_bfloat16, 64, BwdCfg<4>>(bw, max_seq_k, tokens_q, tokens_k, s)
                : LaunchBwd<__half, 64, BwdCfg<4>>(bw, max_seq_k, tokens_q, tokens_k, s);
  }
  if (wide) {
    return bf16 ? LaunchBwd<__nv_bfloat16, 128, BwdCfg<8>>(bw, max_seq_k, tokens_q, tokens_k, s)
                : LaunchBwd<__half, 128, BwdCfg<8>>(bw, max_seq_k, tokens_q, tokens_k, s);
  }
  return bf16 ? LaunchBwd<__nv_bfloat16, 128, BwdCfg<4>>(bw, max_seq_k, tokens_q, tokens_k, s)
              : LaunchBwd<__half, 128, BwdCfg<4>>(bw, max_seq_k, tokens_q, tokens_k, s);
}

}  // namespace gpe::attention::cuda
