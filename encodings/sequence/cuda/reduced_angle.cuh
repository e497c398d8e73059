// Device helper shared by the CUDA RoPE kernels (rope_kernels.cu) and the attention
// kernels that rotate inside the kernel (attention/cuda/attention_kernels.cu). CUDA only;
// include from .cu files.
#ifndef ENCODINGS_SEQUENCE_CUDA_REDUCED_ANGLE_CUH_
#define ENCODINGS_SEQUENCE_CUDA_REDUCED_ANGLE_CUH_

#include <cstdint>

namespace gpe {
namespace encodings {
namespace sequence {
namespace cuda {

// a = p * theta reduced to [-pi, pi] (RoFormer, Su et al. eq. 13's angle m theta_i, taken
// mod 2 pi): the double product, its exact error by fma, and a two-part 2 pi (hi: the
// double nearest 2 pi; lo: the remainder) so that a - k 2 pi keeps the product's accuracy
// for |p| up to 2^31 and beyond. The angle is formed from the integer position, never
// from a 16-bit one.
__device__ __forceinline__ float ReducedAngle(int64_t p, double theta) {
  const double pd = static_cast<double>(p);
  const double a = pd * theta;
  const double err = fma(pd, theta, -a);  // pd * theta = a + err exactly
  constexpr double kTwoPiHi = 6.283185307179586232;
  constexpr double kTwoPiLo = 2.4492935982947063945e-16;
  constexpr double kInvTwoPi = 0.15915494309189534561;
  const double k = rint(a * kInvTwoPi);
  double r = fma(-k, kTwoPiHi, a);
  r = fma(-k, kTwoPiLo, r);
  return static_cast<float>(r + err);
}

}  // namespace cuda
}  // namespace sequence
}  // namespace encodings
}  // namespace gpe

#endif  // ENCODINGS_SEQUENCE_CUDA_REDUCED_ANGLE_CUH_
