#include "inr/blas.h"

#include <string>

// OpenBLAS's report of its kernel family (DYNAMIC_ARCH builds); weak so that a BLAS
// without it still links.
extern "C" {
char* openblas_get_corename(void) __attribute__((weak));
}

namespace gpe {
namespace inr {

std::string BlasCoreName() {
  return openblas_get_corename != nullptr ? std::string(openblas_get_corename()) : "unknown";
}

}  // namespace inr
}  // namespace gpe
