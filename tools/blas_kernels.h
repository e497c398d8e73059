// OpenBLAS's kernel selection for the `gpe` tool, made once at the start of main().
//
// OpenBLAS 0.3.21 (Debian 12) picks its kernels from the CPUID model number; under
// hypervisors that report a generic model it falls back to "Prescott" (SSE3) even on
// AVX-512 machines, running 3-6x below the machine's peak (Lim-sized MLP training on the
// development VM: Prescott ~41 s, Haswell ~20 s, SkylakeX ~13 s; inr/mlp_benchmark.cc).
// The library does not correct this: the choice is process-wide (the environment and
// OpenBLAS's dispatch table) and belongs to the program, not to a library that promises
// no global state. A program that wants it sets OPENBLAS_CORETYPE before it starts (see
// README.md); the gpe tool owns its process and makes the choice itself.
#ifndef TOOLS_BLAS_KERNELS_H_
#define TOOLS_BLAS_KERNELS_H_

namespace gpe {
namespace tools {

// Re-runs OpenBLAS's selection with the widest kernels the CPU executes, SkylakeX
// (AVX-512 F, BW, DQ, VL) or Haswell (AVX2 + FMA), when OpenBLAS fell back to a generic
// family (Prescott, Core2, Nehalem, Sandybridge, Katmai). Does nothing when
// OPENBLAS_CORETYPE is set (the user chose), when the fallback is not in force, or with a
// BLAS lacking OpenBLAS's dynamic-selection entry points. Leaves the environment as it
// found it, so the peers the tool starts (NumPy, PyTorch) make their own choice. Call it
// before the program starts threads (it sets the environment for a moment) and before its
// first BLAS call; only the first call acts.
void SelectBlasKernels();

}  // namespace tools
}  // namespace gpe

#endif  // TOOLS_BLAS_KERNELS_H_
