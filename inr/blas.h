// OpenBLAS's kernel selection, made right once per process before the first BLAS call.
//
// OpenBLAS 0.3.21 (Debian 12) picks its kernels from the CPUID model number; under
// hypervisors that report a generic model it falls back to "Prescott" (SSE3) even on
// AVX-512 machines, running 3-6x below the machine's peak. EnsureBlasKernels() re-runs
// the selection once with the widest kernels the CPU executes: SkylakeX (AVX-512 F, BW,
// DQ, VL) or Haswell (AVX2 + FMA). It does nothing when OPENBLAS_CORETYPE is set (the
// user chose), when the fallback is not in force, or with a BLAS lacking OpenBLAS's
// dynamic-selection entry points. Every solver in inr/ calls it before its first BLAS
// call; it is cheap after the first time.
#ifndef INR_BLAS_H_
#define INR_BLAS_H_

#include <string>

namespace gpe {
namespace inr {

void EnsureBlasKernels();

// The kernel family OpenBLAS runs ("SkylakeX", "Haswell", ...; "unknown" without OpenBLAS's
// entry points), for benchmark reports.
std::string BlasCoreName();

}  // namespace inr
}  // namespace gpe

#endif  // INR_BLAS_H_
