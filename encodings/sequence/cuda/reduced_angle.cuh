// Device helper shared by the CUDA RoPE kernels (rope_kernels.cu) and the attention
// kernels that rotate inside the kernel (attention/cuda/attention_kernels.cu,
// attention_mma.cu). Compiled for the device by nvcc; a plain C++ compiler gets the same
// arithmetic as an inline host function, which reduced_angle_test.cc checks against the
// CPU's group::ReducedAngle on any machine.
#ifndef ENCODINGS_SEQUENCE_CUDA_REDUCED_ANGLE_CUH_
#define ENCODINGS_SEQUENCE_CUDA_REDUCED_ANGLE_CUH_

#include <math.h>

#include <cstdint>

#if defined(__CUDACC__)
#define GPE_ANGLE_FN __host__ __device__ __forceinline__
#else
#define GPE_ANGLE_FN inline
#endif

namespace gpe {
namespace encodings {
namespace sequence {
namespace cuda {

// x - k 2 pi for k = rint(x / 2 pi), with a two-part 2 pi (hi: the double nearest 2 pi;
// lo: the remainder), each product by fma, accurate to ~k 2^-105 absolute. |result| <=
// pi + a few ulps while |x| < ~2^54; beyond, x / 2 pi rounds and k may be off by up to
// ~|x| 2^-56, leaving a result of up to that many times 2 pi (~2^12 at |x| ~ 2^65):
// callers reduce the sum once more (ReducedAngle below).
GPE_ANGLE_FN double ReduceTwoPi(double x) {
  constexpr double kTwoPiHi = 6.283185307179586232;
  constexpr double kTwoPiLo = 2.4492935982947063945e-16;
  constexpr double kInvTwoPi = 0.15915494309189534561;
  const double k = rint(x * kInvTwoPi);
  const double r = fma(-k, kTwoPiHi, x);
  return fma(-k, kTwoPiLo, r);
}

// a = p * theta reduced to [-pi, pi] (RoFormer, Su et al. eq. 13's angle m theta_i, taken
// mod 2 pi), from the integer position, never a rounded one: p = p_hi 2^32 + p_lo with
// both parts exact in double (31 and 32 bits; a double p would round past 2^53, 2^53 + 1
// to 2^53, and the angle by theta with it), each product split exactly by fma into its
// double and its error, the four terms reduced mod 2 pi one by one and their sum once
// more. Float-accurate (the reductions add ~2^-44 at |p theta| ~ 2^63) for every int64
// position; for |p| < 2^32 the p_hi terms are exact zeros.
GPE_ANGLE_FN float ReducedAngle(int64_t p, double theta) {
  const double p_hi = static_cast<double>(p >> 32) * 4294967296.0;
  const double p_lo = static_cast<double>(static_cast<uint32_t>(p & 0xffffffff));
  const double a_hi = p_hi * theta;
  const double e_hi = fma(p_hi, theta, -a_hi);  // p_hi theta = a_hi + e_hi exactly
  const double a_lo = p_lo * theta;
  const double e_lo = fma(p_lo, theta, -a_lo);
  const double r = ReduceTwoPi(a_hi) + ReduceTwoPi(e_hi) + ReduceTwoPi(a_lo) + e_lo;
  return static_cast<float>(ReduceTwoPi(r));
}

}  // namespace cuda
}  // namespace sequence
}  // namespace encodings
}  // namespace gpe

#undef GPE_ANGLE_FN

#endif  // ENCODINGS_SEQUENCE_CUDA_REDUCED_ANGLE_CUH_
