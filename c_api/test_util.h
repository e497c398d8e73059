// Helpers shared by the C ABI's C++ tests (testonly): DLPack descriptions of test
// buffers, normal draws, central differences, and a look at the thread's last error message.
#ifndef GPE_C_API_TEST_UTIL_H_
#define GPE_C_API_TEST_UTIL_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <random>
#include <vector>

#include "gpe/gpe.h"

namespace gpe::c_api_test {

// A CPU DLTensor over `data` (not owned) with `shape` and, when given, `strides` (in
// elements; NULL means compact row-major). `shape` and `strides` must outlive the
// tensor, and `data` may be const only where the callee reads it.
DLTensor Tensor(const void* data, DLDataTypeCode code, int bits, std::vector<int64_t>* shape,
                std::vector<int64_t>* strides = nullptr);

// n draws of N(0, scale^2) from `rng`.
std::vector<double> Random(std::mt19937_64* rng, size_t n, double scale = 1.0);

// n draws of N(0, scale^2) from a generator seeded with `seed` (Random's values), as T.
template <class T>
std::vector<T> Draw(size_t n, uint64_t seed, double scale = 1.0) {
  std::mt19937_64 rng(seed);
  const std::vector<double> x = Random(&rng, n, scale);
  std::vector<T> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<T>(x[i]);
  return out;
}

// DLPack's bit width of an element type.
template <class T>
constexpr int Bits() {
  return 8 * static_cast<int>(sizeof(T));
}

// The central difference (loss at p + h e_i - loss at p - h e_i) / (2 h) in the entry
// (*param)[i], which is restored exactly afterwards; `loss` reads *param.
double CentralDifference(std::vector<double>* param, size_t i, double h,
                         const std::function<double()>& loss);

// True when gpe_last_error_message() contains `part`.
bool HasMessage(const char* part);

}  // namespace gpe::c_api_test

#endif  // GPE_C_API_TEST_UTIL_H_
