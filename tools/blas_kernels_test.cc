#include "tools/blas_kernels.h"

#include <cstdlib>
#include <string>

#include "gtest/gtest.h"

extern "C" {
char* openblas_get_corename(void) __attribute__((weak));
void gotoblas_dynamic_init(void) __attribute__((weak));
void gotoblas_dynamic_quit(void) __attribute__((weak));
}

namespace gpe {
namespace tools {
namespace {

bool HasDynamicSelection() {
  return openblas_get_corename != nullptr && gotoblas_dynamic_init != nullptr &&
         gotoblas_dynamic_quit != nullptr;
}

// The family SelectBlasKernels picks on this CPU ("" where it keeps the fallback).
std::string ExpectedChoice() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl")) {
    return "SkylakeX";
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
  return "";
}

// Puts OpenBLAS into the SSE3 fallback a hypervisor's generic CPU model causes.
void ForcePrescott() {
  setenv("OPENBLAS_CORETYPE", "Prescott", 1);
  gotoblas_dynamic_quit();
  gotoblas_dynamic_init();
  unsetenv("OPENBLAS_CORETYPE");
}

std::string CoreName() { return openblas_get_corename(); }

// Each case runs in a fresh process (SelectBlasKernels acts once per process).
class SelectBlasKernelsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    if (!HasDynamicSelection()) GTEST_SKIP() << "this BLAS has no dynamic kernel selection";
  }
};

TEST_F(SelectBlasKernelsTest, ReplacesTheGenericFallbackAndRestoresTheEnvironment) {
  const std::string want = ExpectedChoice();
  if (want.empty()) GTEST_SKIP() << "the CPU has neither AVX-512 nor AVX2 + FMA";
  EXPECT_EXIT(
      {
        ForcePrescott();
        if (CoreName() != "Prescott") std::_Exit(2);
        SelectBlasKernels();
        std::_Exit(CoreName() == want && std::getenv("OPENBLAS_CORETYPE") == nullptr ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST_F(SelectBlasKernelsTest, KeepsTheUsersChoice) {
  EXPECT_EXIT(
      {
        ForcePrescott();
        setenv("OPENBLAS_CORETYPE", "Prescott", 1);
        SelectBlasKernels();
        // The family and the user's variable both stay.
        const char* env = std::getenv("OPENBLAS_CORETYPE");
        std::_Exit(CoreName() == "Prescott" && env != nullptr && std::string(env) == "Prescott"
                       ? 0
                       : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST_F(SelectBlasKernelsTest, KeepsADetectedFamily) {
  const std::string want = ExpectedChoice();
  if (want.empty()) GTEST_SKIP() << "the CPU has neither AVX-512 nor AVX2 + FMA";
  EXPECT_EXIT(
      {
        // Haswell is not a fallback: a machine OpenBLAS detects keeps its own family.
        setenv("OPENBLAS_CORETYPE", "Haswell", 1);
        gotoblas_dynamic_quit();
        gotoblas_dynamic_init();
        unsetenv("OPENBLAS_CORETYPE");
        SelectBlasKernels();
        std::_Exit(CoreName() == "Haswell" ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace tools
}  // namespace gpe
