// Rows in and out of the kernels' float buffers: float32 tensors copied, bfloat16 ones
// widened on load and rounded on store, float16 ones (KV caches: loaded only) widened.
#ifndef ATTENTION_CPU_ELEMENT_ROWS_H_
#define ATTENTION_CPU_ELEMENT_ROWS_H_

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "attention/cpu/kernels.h"
#include "attention/cpu/kernels_bf16.h"
#include "encodings/sequence/rope.h"

namespace gpe {
namespace attention {
namespace cpu {

using encodings::sequence::BFloat16;
using encodings::sequence::Float16;

// Element conversions at the kernel's edges: inputs widened to float once, outputs
// rounded once (bfloat16: to nearest even, rope.h's ToBFloat16).
inline float ToF(float x) { return x; }
inline float ToF(BFloat16 x) {
  const uint32_t u = static_cast<uint32_t>(x.bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}
inline float ToF(Float16 x) { return encodings::sequence::ToFloat(x); }
template <class T>
inline void LoadRow(const T* src, float* dst, int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
  } else if constexpr (std::is_same_v<T, Float16>) {  // KV caches only: F16C where present
    cpu::WidenF16Row(reinterpret_cast<const uint16_t*>(src), dst, n);
  } else {  // bf16 bits shifted up, 16 lanes at a time where the CPU has AVX-512
    cpu::WidenBf16Row(reinterpret_cast<const uint16_t*>(src), dst, n);
  }
}
// Requests the row of n elements at src into the caches (rows a token stride apart sit
// in different pages, which the hardware prefetchers do not cross: loops over such rows
// request a few rows ahead).
template <class T>
inline void PrefetchRow(const T* src, int64_t n) {
  const char* p = reinterpret_cast<const char*>(src);
  for (int64_t b = 0; b < n * static_cast<int64_t>(sizeof(T)); b += 64) __builtin_prefetch(p + b);
}
template <class T>
inline void StoreRow(const float* src, T* dst, int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
  } else {  // ToBFloat16's rounding, 16 lanes at a time where the CPU has AVX-512
    cpu::RoundBf16Row(src, reinterpret_cast<uint16_t*>(dst), n);
  }
}

}  // namespace cpu
}  // namespace attention
}  // namespace gpe

#endif  // ATTENTION_CPU_ELEMENT_ROWS_H_
