// The C ABI's version (gpe/common.h): the numbers the library was built with.
#include "c_api/include/gpe/common.h"

extern "C" {

int gpe_version(void) { return GPE_VERSION_NUMBER; }

const char* gpe_version_string(void) {
#define GPE_STR2(x) #x
#define GPE_STR(x) GPE_STR2(x)
  return GPE_STR(GPE_VERSION_MAJOR) "." GPE_STR(GPE_VERSION_MINOR) "." GPE_STR(
      GPE_VERSION_PATCH);
#undef GPE_STR
#undef GPE_STR2
}

}  // extern "C"
