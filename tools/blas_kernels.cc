#include "tools/blas_kernels.h"

#include <cstdlib>
#include <mutex>
#include <string>

// OpenBLAS's run-time kernel selection (DYNAMIC_ARCH builds); weak so that a BLAS without
// them still links.
extern "C" {
char* openblas_get_corename(void) __attribute__((weak));
void gotoblas_dynamic_init(void) __attribute__((weak));
void gotoblas_dynamic_quit(void) __attribute__((weak));
}

namespace gpe {
namespace tools {

void SelectBlasKernels() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (openblas_get_corename == nullptr || gotoblas_dynamic_init == nullptr ||
        gotoblas_dynamic_quit == nullptr || std::getenv("OPENBLAS_CORETYPE") != nullptr) {
      return;
    }
    const std::string core = openblas_get_corename();
    const bool generic = core == "Prescott" || core == "Core2" || core == "Nehalem" ||
                         core == "Sandybridge" || core == "Katmai";
    if (!generic) return;
    __builtin_cpu_init();
    const char* choice = nullptr;
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl")) {
      choice = "SkylakeX";
    } else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
      choice = "Haswell";
    }
    if (choice == nullptr) return;
    // The selection reads the environment; set it for the call only.
    setenv("OPENBLAS_CORETYPE", choice, /*overwrite=*/0);
    gotoblas_dynamic_quit();
    gotoblas_dynamic_init();
    unsetenv("OPENBLAS_CORETYPE");
  });
}

}  // namespace tools
}  // namespace gpe
