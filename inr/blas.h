// Which kernels OpenBLAS runs, for benchmark reports. The library only reads it: OpenBLAS's
// kernel selection is process-wide, so the program chooses it (OPENBLAS_CORETYPE before
// the process starts; README.md), never a solver in inr/.
#ifndef INR_BLAS_H_
#define INR_BLAS_H_

#include <string>

namespace gpe {
namespace inr {

// The kernel family OpenBLAS runs ("SkylakeX", "Haswell", ...; "unknown" without OpenBLAS's
// entry points).
std::string BlasCoreName();

}  // namespace inr
}  // namespace gpe

#endif  // INR_BLAS_H_
