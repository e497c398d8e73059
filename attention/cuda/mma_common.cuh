// Device helpers shared by the tensor-core attention kernels (attention_mma.cu forward,
// attention_mma_bwd.cu backward): 16-bit conversions, mma.sync m16n8k16, ldmatrix,
// cp.async, the SFU exp2, and RoPE on a shared tile. CUDA only; include from .cu files.
//
// Fragment layouts (PTX ISA, "Matrix Fragments for mma.m16n8k16"), g = lane / 4,
// t = lane % 4: A (16 x 16, row) a0 = (g, 2t..2t+1), a1 = (g + 8, 2t..), a2 = (g,
// 2t + 8..), a3 = (g + 8, 2t + 8..); B (16 x 8, col) b0 = (k 2t..2t+1, n g), b1 = (k 2t +
// 8.., n g); C (16 x 8) c0, c1 = (g, 2t..2t+1), c2, c3 = (g + 8, 2t..2t+1). An accumulator
// pair of n-tiles (2c, 2c + 1) of a 16 x 16 block is, rounded to 16 bits, the A fragment
// of that block: a0 = C(2c)[0..1], a1 = C(2c)[2..3], a2 = C(2c + 1)[0..1],
// a3 = C(2c + 1)[2..3].
#ifndef ATTENTION_CUDA_MMA_COMMON_CUH_
#define ATTENTION_CUDA_MMA_COMMON_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "attention/cuda/attention_kernels.h"
#include "encodings/sequence/cuda/reduced_angle.cuh"

namespace gpe::attention::cuda {
namespace mma {

constexpr int kPad = 8;  // elements of padding per shared row
constexpr float kLog2eMma = 1.4426950408889634f;
constexpr float kLn2Mma = 0.6931471805599453f;

using ::gpe::encodings::sequence::cuda::ReducedAngle;

template <class T>
__device__ __forceinline__ float ToF(T x);
template <>
__device__ __forceinline__ float ToF<__nv_bfloat16>(__nv_bfloat16 x) {
  return __bfloat162float(x);
}
template <>
__device__ __forceinline__ float ToF<__half>(__half x) {
  return __half2float(x);
}

template <class T>
__device__ __forceinline__ T FromF(float x);
template <>
__device__ __forceinline__ __nv_bfloat16 FromF<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}
template <>
__device__ __forceinline__ __half FromF<__half>(float x) {
  return __float2half_rn(x);
}

// Two floats rounded to 16 bits and packed, the first in the low half (the element with
// the lower column index, as the fragments expect): one cvt.rn.{bf16x2,f16x2}.f32.
template <class T>
__device__ __forceinline__ uint32_t Pack(float lo, float hi) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);  // .x = lo: the low half
    return *reinterpret_cast<const uint32_t*>(&v);
  } else {
    const __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  }
}

// 2^x by the special-function unit (relative error ~2^-22; exp2(-inf) = 0).
__device__ __forceinline__ float Exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// c += a b on one m16n8k16 tile, float32 accumulators.
template <class T>
__device__ __forceinline__ void Mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                    uint32_t b1) {
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

// Four 8 x 8 16-bit matrices from shared memory (ldmatrix): lane l gives the address of
// row l % 8 of matrix l / 8. Plain: register i holds, for matrix i, the elements (g, 2t)
// and (g, 2t + 1) of the stored matrix (an A fragment's quarter, or a B fragment of a
// row-major [n][k] tile). Transposed: (2t, g) and (2t + 1, g) (a B fragment of a
// row-major [k][n] tile).
__device__ __forceinline__ void LdMatrixX4(uint32_t (&r)[4], const void* row_addr) {
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(row_addr));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void LdMatrixX4Trans(uint32_t (&r)[4], const void* row_addr) {
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(row_addr));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// 16 bytes global -> shared without passing through registers (cp.async, sm_80+); with
// `valid` false the 16 shared bytes are zero-filled and the source is not read.
__device__ __forceinline__ void CpAsync16(void* smem, const void* gmem, bool valid) {
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(addr), "l"(gmem),
               "r"(src_bytes));
}
__device__ __forceinline__ void CpAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

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

}  // namespace mma
}  // namespace gpe::attention::cuda

#endif  // ATTENTION_CUDA_MMA_COMMON_CUH_
