// The tensor-core attention forward for bfloat16 / float16 (sm_80 and later): a
// FlashAttention-2-style kernel (Dao, "FlashAttention-2", Algorithm 1: the query block
// stays on chip, key/value tiles stream through shared memory, online softmax with one
// rescale per tile) on warp-level mma.sync m16n8k16 with float32 accumulation.
//
// Block (default configuration, Cfg0 below): 8 warps, kBr = 128 query rows (16 per warp)
// of one head of one sequence; key and value tiles of kBc = 64 rows, double
// buffered: cp.async brings tile j + 1 while tile j is multiplied. Shared memory holds
// the Q tile and two K and V stages as 16-bit values, rows padded by 8 elements (16
// bytes) so that the ldmatrix row addresses hit distinct banks. Encodings inside:
//   - RoPE: the query tile once per block, rotated in float32 from the 16-bit inputs and
//     rounded once back to 16 bits (angles reduced in double,
//     encodings/sequence/cuda/reduced_angle.cuh); the keys either once per call into a
//     workspace (LaunchRotateTokens, then k_prerotated) or, without one, each key tile after
//     it lands (once per query block: the slower path);
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
#include "attention/cuda/mma_common.cuh"
#include "encodings/sequence/cuda/reduced_angle.cuh"

namespace gpe::attention::cuda {
namespace {

using namespace ::gpe::attention::cuda::mma;  // mma_common.cuh

// A kernel configuration: warps per block, m16 tiles per warp (query rows 16 kMTiles
// per warp, kBr per block), keys per tile, and the blocks per SM the register budget is
// cut for. Config 0 (8 warps x 16 rows, 64-key tiles) is the default; the others exist
// for the benchmark (AttentionKernelArgs::mma_config). Measured on an H200 (bf16, b1 h16
// s4096 d128, 2026-11-28): 8 warps x 16 rows 217 TFLOP/s non-causal / 138 causal; 4 x 32
// rows (64-key tiles) 201 / 128, spilling at d128; 4 x 32 rows with 32-key tiles 196 /
// 123. More warps hide more latency (2 warps per scheduler left the tensor pipe at 31%).
template <int kWarps, int kMT, int kBcT, int kMinBlocks>
struct Cfg {
  static constexpr int kMTiles = kMT;
  static constexpr int kRowsPerWarp = 16 * kMT;
  static constexpr int kBr = kWarps * kRowsPerWarp;
  static constexpr int kBc = kBcT;
  static constexpr int kThreadsMma = kWarps * 32;
  static constexpr int kBlocksPerSm = kMinBlocks;
};
using Cfg0 = Cfg<8, 1, 64, 2>;
using Cfg1 = Cfg<4, 2, 64, 1>;
using Cfg2 = Cfg<4, 2, 32, 1>;

// Starts the copy of `rows_total` rows of a [rows, D] view (row r at src + r * row_stride)
// into a shared tile; rows >= nrows are zero-filled, so out-of-range keys and queries hold
// finite zeros (their scores are masked anyway). Completion: CpAsyncWait + a barrier.
template <class T, int D>
__device__ __forceinline__ void LoadTileAsync(T* tile, const T* src, int64_t row_stride, int nrows,
                                              int rows_total) {
  constexpr int kVecs = D * static_cast<int>(sizeof(T)) / 16;  // 16-byte vectors per row
  constexpr int kPerVec = 16 / static_cast<int>(sizeof(T));
  for (int idx = threadIdx.x; idx < rows_total * kVecs; idx += blockDim.x) {
    const int r = idx / kVecs, v = idx - r * kVecs;
    const bool valid = r < nrows;
    CpAsync16(tile + r * (D + kPad) + v * kPerVec, valid ? src + r * row_stride + v * kPerVec : src,
              valid);
  }
}

template <class T, int D, class C>
__global__ void __launch_bounds__(C::kThreadsMma, C::kBlocksPerSm)
    MmaForwardKernel(AttentionKernelArgs a) {
  constexpr int kBr = C::kBr, kBc = C::kBc, kRowsPerWarp = C::kRowsPerWarp, kMTiles = C::kMTiles;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  constexpr int ld = D + kPad;
  T* qs = reinterpret_cast<T*>(smem_raw);
  T* ks = qs + kBr * ld;      // two stages of [kBc][ld]
  T* vs = ks + 2 * kBc * ld;  // two stages
  int64_t* qpos = reinterpret_cast<int64_t*>(vs + 2 * kBc * ld);
  int64_t* kpos = qpos + kBr;  // two stages of kBc

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t4 = lane % 4;
  const int mat = lane / 8, mr = lane % 8;  // ldmatrix: this lane's matrix and row
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
  const T* qsrc = static_cast<const T*>(a.q) +
                  (packed ? qtok0 * a.sq.token : b * a.sq.batch + r0 * a.sq.token) + h * a.sq.head;
  const T* ksrc =
      static_cast<const T*>(a.k) + (packed ? k0 * a.sk.token : b * a.sk.batch) + kvh * a.sk.head;
  const T* vsrc =
      static_cast<const T*>(a.v) + (packed ? k0 * a.sv.token : b * a.sv.batch) + kvh * a.sv.head;

  // Keys past the block's last query position are masked for every row when causal with
  // the default positions: those tiles are never loaded.
  int64_t kend = lk;
  if (a.causal && a.q_positions == nullptr) {
    const int64_t last = lk - lq + r0 + nq - 1;  // the block's largest query position
    kend = last + 1 < lk ? (last + 1 > 0 ? last + 1 : 0) : lk;
  }
  const int64_t ntiles = (kend + kBc - 1) / kBc;
  // Starts tile `it`'s K, V and key positions into stage it % 2.
  auto prefetch = [&](int64_t it) {
    const int st = static_cast<int>(it & 1);
    const int64_t j0 = it * kBc;
    const int nk = static_cast<int>(lk - j0 < kBc ? lk - j0 : kBc);
    for (int j = threadIdx.x; j < kBc; j += blockDim.x) {
      kpos[st * kBc + j] = j >= nk                    ? 0
                           : a.k_positions != nullptr ? a.k_positions[ktok0 + j0 + j]
                                                      : j0 + j;
    }
    LoadTileAsync<T, D>(ks + st * kBc * ld, ksrc + j0 * a.sk.token, a.sk.token, nk, kBc);
    LoadTileAsync<T, D>(vs + st * kBc * ld, vsrc + j0 * a.sv.token, a.sv.token, nk, kBc);
    CpAsyncCommit();
  };

  // Query positions: explicit, else the last lq of 0 .. lk - 1.
  for (int r = threadIdx.x; r < kBr; r += blockDim.x) {
    qpos[r] = r >= nq ? 0 : a.q_positions != nullptr ? a.q_positions[qtok0 + r] : lk - lq + r0 + r;
  }
  LoadTileAsync<T, D>(qs, qsrc, a.sq.token, nq, kBr);
  CpAsyncCommit();
  if (ntiles > 0) {
    prefetch(0);
    CpAsyncWait<1>();  // the query tile has landed (tile 0 may still be in flight)
  } else {
    CpAsyncWait<0>();  // the query tile is the only group: wait for it (RoPE reads it)
  }
  __syncthreads();
  if (a.rope_dim > 0) {
    RotateTile(qs, nq, ld, a, [&](int r) { return qpos[r]; });
    __syncthreads();
  }

  // This thread's rows: m-tile mt, half hf (0: row g, 1: row g + 8) of the warp's 32;
  // their positions are read from shared memory where needed (registers are short).
  const int64_t* prow = qpos + warp * kRowsPerWarp + g;  // + mt * 16 + 8 * hf
  const float scale2 = a.scale * kLog2eMma;              // scores in base 2
  const float slope2 = a.alibi_slopes != nullptr ? a.alibi_slopes[h] * kLog2eMma : 0.0f;

  float o[kMTiles][D / 8][4];
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
    for (int n = 0; n < D / 8; ++n) o[mt][n][0] = o[mt][n][1] = o[mt][n][2] = o[mt][n][3] = 0.0f;
  }
  float m[kMTiles][2], l[kMTiles][2];
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
    m[mt][0] = m[mt][1] = -INFINITY;
    l[mt][0] = l[mt][1] = 0.0f;
  }
  const T* qwarp = qs + (warp * kRowsPerWarp) * ld;

  for (int64_t it = 0; it < ntiles; ++it) {
    const int st = static_cast<int>(it & 1);
    const int64_t j0 = it * kBc;
    const int nk = static_cast<int>(lk - j0 < kBc ? lk - j0 : kBc);
    if (it + 1 < ntiles) {
      prefetch(it + 1);  // its stage was released by the barrier that ended iteration it - 1
      CpAsyncWait<1>();
    } else {
      CpAsyncWait<0>();
    }
    __syncthreads();  // tile it (and its positions) visible to every warp
    const T* kt = ks + st * kBc * ld;
    const T* vt = vs + st * kBc * ld;
    const int64_t* kp = kpos + st * kBc;
    if (a.rope_dim > 0 && !a.k_prerotated) {
      RotateTile(const_cast<T*>(kt), nk, ld, a, [&](int r) { return kp[r]; });
      __syncthreads();
    }
    // S = Q K^T: per m-tile, 8 n-tiles of 8 keys; K fragments by ldmatrix, each shared by
    // the warp's two m-tiles.
    float s[kMTiles][kBc / 8][4];
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
      for (int n = 0; n < kBc / 8; ++n)
        s[mt][n][0] = s[mt][n][1] = s[mt][n][2] = s[mt][n][3] = 0.0f;
    }
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t qa[kMTiles][4];
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
        // matrices: rows 0-7 / 8-15 of the m-tile, features kk16 + 0-7 / + 8-15.
        LdMatrixX4(qa[mt], qwarp + (mt * 16 + (mat & 1) * 8 + mr) * ld + kk * 16 + (mat >> 1) * 8);
      }
#pragma unroll
      for (int n = 0; n < kBc / 8; n += 2) {
        // matrices: keys 8n + 0-7 features kk16 + 0-7 / + 8-15, then keys 8(n + 1) + 0-7.
        uint32_t kb[4];
        LdMatrixX4(kb, kt + (n * 8 + (mat >> 1) * 8 + mr) * ld + kk * 16 + (mat & 1) * 8);
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) {
          Mma<T>(s[mt][n], qa[mt], kb[0], kb[1]);
          Mma<T>(s[mt][n + 1], qa[mt], kb[2], kb[3]);
        }
      }
    }
    // Scale, bias, mask (only where the tile needs it), online softmax per row.
    const bool need_mask =
        nk < kBc || (a.causal && (a.q_positions != nullptr || j0 + kBc - 1 > lk - lq + r0));
    // With the default positions p_i - p_j = dbase + (row - j) for the block's local row
    // and the tile's local key: integer arithmetic in registers instead of two int64
    // reads from shared memory per score, exact while |dbase| < 2^23 (|row - j| < 256;
    // the float of the integer is then the same float as of p_i - p_j).
    const int64_t dbase = lk - lq + r0 - j0;
    const bool local_pos =
        a.q_positions == nullptr && dbase > -(int64_t{1} << 23) && dbase < (int64_t{1} << 23);
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) {
      float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
      for (int n = 0; n < kBc / 8; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          float v = s[mt][n][e] * scale2;
          const int j = n * 8 + 2 * t4 + (e & 1);
          const int rl = warp * kRowsPerWarp + mt * 16 + g + 8 * (e >> 1);  // block-local row
          if (a.alibi_slopes != nullptr) {
            const float dist = local_pos ? static_cast<float>(static_cast<int>(dbase) + rl - j)
                                         : static_cast<float>(prow[mt * 16 + 8 * (e >> 1)] - kp[j]);
            v -= slope2 * (a.alibi_symmetric ? fabsf(dist) : dist);
          }
          // Only tiles that need a mask evaluate it (run 8 of the GPU check: evaluating
          // it for every score cost the unmasked forward ~20%).
          if (need_mask &&
              (j >= nk || (a.causal && (local_pos ? j - rl > static_cast<int>(dbase)
                                                  : kp[j] > prow[mt * 16 + 8 * (e >> 1)])))) {
            v = -INFINITY;
          }
          s[mt][n][e] = v;
          mx[e >> 1] = fmaxf(mx[e >> 1], v);
        }
      }
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        mx[hf] = fmaxf(mx[hf], __shfl_xor_sync(0xffffffffu, mx[hf], 1));
        mx[hf] = fmaxf(mx[hf], __shfl_xor_sync(0xffffffffu, mx[hf], 2));
        const float mnew = fmaxf(m[mt][hf], mx[hf]);
        // A row with no allowed key so far keeps m = -inf: exponents use 0 instead, so
        // every p is exp2(-inf) = 0 and nothing becomes NaN.
        const float base = mnew == -INFINITY ? 0.0f : mnew;
        const float corr = Exp2(m[mt][hf] - base);
        m[mt][hf] = mnew;
        l[mt][hf] *= corr;
#pragma unroll
        for (int n = 0; n < D / 8; ++n) {
          o[mt][n][2 * hf] *= corr;
          o[mt][n][2 * hf + 1] *= corr;
        }
        float sum = 0.0f;
#pragma unroll
        for (int n = 0; n < kBc / 8; ++n) {
          const float p0 = Exp2(s[mt][n][2 * hf] - base), p1 = Exp2(s[mt][n][2 * hf + 1] - base);
          s[mt][n][2 * hf] = p0;
          s[mt][n][2 * hf + 1] = p1;
          sum += p0 + p1;
        }
        l[mt][hf] += sum;
      }
    }
    // O += P V: P (rounded to 16 bits) as A fragments, k-chunk c of 16 keys = n-tiles 2c
    // and 2c + 1; V fragments by ldmatrix.trans, two 8-feature n-tiles per load, shared by
    // the warp's two m-tiles.
#pragma unroll
    for (int c = 0; c < kBc / 16; ++c) {
      uint32_t pa[kMTiles][4];
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
        pa[mt][0] = Pack<T>(s[mt][2 * c][0], s[mt][2 * c][1]);
        pa[mt][1] = Pack<T>(s[mt][2 * c][2], s[mt][2 * c][3]);
        pa[mt][2] = Pack<T>(s[mt][2 * c + 1][0], s[mt][2 * c + 1][1]);
        pa[mt][3] = Pack<T>(s[mt][2 * c + 1][2], s[mt][2 * c + 1][3]);
      }
#pragma unroll
      for (int n = 0; n < D / 8; n += 2) {
        // matrices: keys 16c + 0-7 / + 8-15 at features 8n, then the same at 8(n + 1).
        uint32_t vb[4];
        LdMatrixX4Trans(vb, vt + (c * 16 + (mat & 1) * 8 + mr) * ld + (n + (mat >> 1)) * 8);
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) {
          Mma<T>(o[mt][n], pa[mt], vb[0], vb[1]);
          Mma<T>(o[mt][n + 1], pa[mt], vb[2], vb[3]);
        }
      }
    }
    __syncthreads();  // every warp is done with stage st: the next prefetch may refill it
  }
  // Row sums over the quad, then normalise and store.
  T* out = static_cast<T*>(a.o) + (packed ? qtok0 * a.so.token : b * a.so.batch + r0 * a.so.token) +
           h * a.so.head;
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      float lsum = l[mt][hf];
      lsum += __shfl_xor_sync(0xffffffffu, lsum, 1);
      lsum += __shfl_xor_sync(0xffffffffu, lsum, 2);
      const int row = warp * kRowsPerWarp + mt * 16 + g + 8 * hf;
      const float inv = lsum > 0.0f ? 1.0f / lsum : 0.0f;
      if (row < nq) {
#pragma unroll
        for (int n = 0; n < D / 8; ++n) {
          *reinterpret_cast<uint32_t*>(out + row * a.so.token + n * 8 + 2 * t4) =
              Pack<T>(o[mt][n][2 * hf] * inv, o[mt][n][2 * hf + 1] * inv);
        }
        if (a.lse != nullptr && t4 == 0) {
          // A NaN row (a NaN or +inf score: l is NaN) has lse NaN, as the reference;
          // -inf is for rows with no allowed key (l = 0).
          a.lse[(qtok0 + row) * a.heads_q + h] =
              lsum > 0.0f ? (m[mt][hf] + log2f(lsum)) * kLn2Mma : (lsum == lsum ? -INFINITY : lsum);
        }
      }
    }
  }
}

// R(p) x for every query (queries) or key token of the call into `out`, dense [tokens,
// heads, head_dim]: one thread per (token, head, plane) of one sequence (blockIdx.y),
// grid-stride; features past rope_dim are copied. Positions as in the attention kernel.
template <class T>
__global__ void RotateTokensKernel(AttentionKernelArgs a, T* out, bool queries) {
  const int64_t b = blockIdx.y;
  const bool packed = a.cu_seqlens_q != nullptr;
  const int64_t* cu = queries ? a.cu_seqlens_q : a.cu_seqlens_k;
  const int64_t seq = queries ? a.seq_q : a.seq_k;
  const int64_t t0 = packed ? cu[b] : 0;
  const int64_t len = packed ? cu[b + 1] - t0 : seq;
  const int64_t lq = packed ? a.cu_seqlens_q[b + 1] - a.cu_seqlens_q[b] : a.seq_q;
  const int64_t lk = packed ? a.cu_seqlens_k[b + 1] - a.cu_seqlens_k[b] : a.seq_k;
  const int64_t tok0 = packed ? t0 : b * seq;
  const CudaStrides st = queries ? a.sq : a.sk;
  const int64_t heads = queries ? a.heads_q : a.heads_kv;
  const int64_t* posv = queries ? a.q_positions : a.k_positions;
  const T* src =
      static_cast<const T*>(queries ? a.q : a.k) + (packed ? t0 * st.token : b * st.batch);
  const int64_t d = a.head_dim, half = a.rope_dim / 2, rest = d - a.rope_dim;
  const int64_t per_token = heads * (half + rest);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       idx < len * per_token; idx += stride) {
    const int64_t j = idx / per_token, rem = idx - j * per_token;
    const int64_t hh = rem / (half + rest), w = rem - hh * (half + rest);
    const T* x = src + j * st.token + hh * st.head;
    T* y = out + ((tok0 + j) * heads + hh) * d;
    if (w >= half) {  // a feature past the rotary ones
      const int64_t c = a.rope_dim + (w - half);
      y[c] = x[c];
      continue;
    }
    // Default positions: keys 0 .. lk - 1, queries the last lq of them.
    const int64_t p = posv != nullptr ? posv[tok0 + j] : queries ? lk - lq + j : j;
    float sn, cn;
    sincosf(ReducedAngle(p, a.rope_thetas[w]), &sn, &cn);
    cn *= a.rope_attention_factor;
    sn *= a.rope_attention_factor;
    const int64_t c1 = a.rope_interleaved ? 2 * w : w;
    const int64_t c2 = a.rope_interleaved ? 2 * w + 1 : w + half;
    const float x1 = ToF(x[c1]), x2 = ToF(x[c2]);
    y[c1] = FromF<T>(x1 * cn - x2 * sn);
    y[c2] = FromF<T>(x1 * sn + x2 * cn);
  }
}

template <class T, int D, class C>
std::string LaunchCfg(const AttentionKernelArgs& args, cudaStream_t s) {
  constexpr int kBr = C::kBr, kBc = C::kBc;
  constexpr int ld = D + kPad;
  const size_t shared =
      static_cast<size_t>(kBr + 4 * kBc) * ld * sizeof(T) + (kBr + 2 * kBc) * sizeof(int64_t);
  cudaError_t e =
      cudaFuncSetAttribute(MmaForwardKernel<T, D, C>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           static_cast<int>(shared));
  if (e != cudaSuccess) return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
  const dim3 grid(static_cast<unsigned>((args.seq_q + kBr - 1) / kBr),
                  static_cast<unsigned>(args.heads_q), static_cast<unsigned>(args.num_seqs));
  MmaForwardKernel<T, D, C><<<grid, C::kThreadsMma, shared, s>>>(args);
  e = cudaGetLastError();
  return e == cudaSuccess ? std::string()
                          : std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
}

template <class T, int D>
std::string Launch(const AttentionKernelArgs& args, cudaStream_t s) {
  switch (args.mma_config) {
    case 1:
      return LaunchCfg<T, D, Cfg1>(args, s);
    case 2:
      return LaunchCfg<T, D, Cfg2>(args, s);
    default:
      return LaunchCfg<T, D, Cfg0>(args, s);
  }
}

}  // namespace

std::string MmaIneligibility(const AttentionKernelArgs& a) {
  if (a.dtype != CudaDType::kBFloat16 && a.dtype != CudaDType::kFloat16) {
    return "the tensor-core kernel takes bfloat16 or float16 (float32 runs on the SIMT kernel)";
  }
  if (a.head_dim != 64 && a.head_dim != 128)
    return "the tensor-core kernel takes head_dim 64 or 128";
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

std::string LaunchRotateTokens(const AttentionKernelArgs& args, void* out, bool queries,
                               void* stream) {
  if (args.num_seqs == 0) return "";
  if (args.dtype != CudaDType::kBFloat16 && args.dtype != CudaDType::kFloat16) {
    return "LaunchRotateTokens takes bfloat16 or float16";
  }
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  const dim3 grid(512, static_cast<unsigned>(args.num_seqs));
  if (args.dtype == CudaDType::kBFloat16) {
    RotateTokensKernel<__nv_bfloat16>
        <<<grid, 256, 0, s>>>(args, static_cast<__nv_bfloat16*>(out), queries);
  } else {
    RotateTokensKernel<__half><<<grid, 256, 0, s>>>(args, static_cast<__half*>(out), queries);
  }
  const cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? std::string()
                          : std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
}

std::string LaunchAttentionForwardMma(const AttentionKernelArgs& args, void* stream) {
  if (args.num_seqs == 0 || args.seq_q == 0) return "";
  if (std::string why = MmaIneligibility(args); !why.empty()) return why;
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  const bool bf16 = args.dtype == CudaDType::kBFloat16;
  if (args.head_dim == 64)
    return bf16 ? Launch<__nv_bfloat16, 64>(args, s) : Launch<__half, 64>(args, s);
  return bf16 ? Launch<__nv_bfloat16, 128>(args, s) : Launch<__half, 128>(args, s);
}

}  // namespace gpe::attention::cuda
