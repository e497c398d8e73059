// Element-wise device kernels of the GPU closed-form fit (closed_form_cuda.h): plain C++
// (no CUDA or Abseil headers), so the host code and tests compile with the host compiler
// alone. Every array is device memory, contiguous; n may be 0 (nothing is launched).
// Each launch is enqueued on `stream` (a cudaStream_t; null: the legacy default stream)
// and returns "" or the CUDA runtime's error text for the launch.
#ifndef INR_CUDA_CLOSED_FORM_CUDA_KERNELS_H_
#define INR_CUDA_CLOSED_FORM_CUDA_KERNELS_H_

#include <cstdint>
#include <string>

namespace gpe::inr::cuda {

// out[i] = (float)in[i], round to nearest (|in| beyond float32's range becomes +-inf).
std::string LaunchDemoteToFloat(const double* in, float* out, int64_t n, void* stream);

// out[i] = (double)in[i] (exact).
std::string LaunchWidenToDouble(const float* in, double* out, int64_t n, void* stream);

// a[i * (ld + 1)] += value for i in [0, k): adds value * I to the leading k x k block of
// a column-major matrix with leading dimension ld >= k.
std::string LaunchAddToDiagonal(double* a, int64_t k, int64_t ld, double value, void* stream);

// *flag = 1 when some x[i] is NaN or +-inf; *flag is left as it was otherwise (the
// caller clears it first).
std::string LaunchFlagNonFinite(const double* x, int64_t n, int* flag, void* stream);

}  // namespace gpe::inr::cuda

#endif  // INR_CUDA_CLOSED_FORM_CUDA_KERNELS_H_
