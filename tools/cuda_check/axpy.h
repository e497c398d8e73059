#ifndef GPE_TOOLS_CUDA_CHECK_AXPY_H_
#define GPE_TOOLS_CUDA_CHECK_AXPY_H_

#include <cstdint>
#include <string>

namespace gpe::cuda_check {

// Number of CUDA devices visible to this process; 0 when there is no GPU or no
// driver. `why` receives the runtime's explanation when the count is 0.
int DeviceCount(std::string* why);

// y[i] = a * x[i] + y[i] for i < n, computed on device 0. Returns an empty string on
// success, otherwise the CUDA runtime's error text.
std::string Axpy(float a, const float* x, float* y, int64_t n);

}  // namespace gpe::cuda_check

#endif  // GPE_TOOLS_CUDA_CHECK_AXPY_H_
