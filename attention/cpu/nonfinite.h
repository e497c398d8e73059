// The kernels' careful path for non-finite inputs (docs/ARCHITECTURE.md, "Non-finite
// values in attention"): a masked key contributes nothing to a row, whatever its key
// and value hold. The tile kernels multiply every probability by every value, and
// 0 * inf or 0 * NaN is NaN, so a tile that has masked entries (the causal diagonal,
// rows with no allowed key) and a non-finite operand is accumulated here instead,
// skipping the products whose probability is exactly zero. Scalar and slow on purpose:
// it runs only on such tiles, which finite inputs never produce.
#ifndef ATTENTION_CPU_NONFINITE_H_
#define ATTENTION_CPU_NONFINITE_H_

#include <cstdint>
#include <limits>
#include <type_traits>

#include "attention/cpu/element_rows.h"
#include "attention/cpu/kernels.h"
#include "attention/descriptor.h"

namespace gpe {
namespace attention {
namespace cpu {

// Whether a tile of keys at positions [kmin, kmax] against queries at [qmin, qmax] may
// hold masked entries (the causal future, outside the window, a score mask, or biases,
// which may be -inf): the tiles where a non-finite operand needs the careful path. Rows without any
// allowed key, or NaN rows, are the callers' to add.
inline bool MayHaveMaskedEntries(const AttentionArgs& a, int64_t qmin, int64_t qmax,
                                 int64_t kmin, int64_t kmax) {
  return KeyMask::Of(a).AnyMasked(qmin, qmax, kmin, kmax) || !a.biases.empty() ||
         !a.mask.empty();
}

// Whether a score tile (rows [0, rows), columns [0, cols), stride lds) holds a -inf: a
// probability exactly 0 from an infinite q or k where no mask or bias applies. One
// vector pass (RowsAllFinite) on finite tiles; the scalar search only on the others.
inline bool HasNegInfScore(const float* s, int64_t lds, int64_t rows, int64_t cols) {
  if (RowsAllFinite(s, rows, lds, cols)) return false;
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < cols; ++j) {
      if (s[r * lds + j] == kNegInf) return true;
    }
  }
  return false;
}

// Whether rows [0, rows) of x (stride ld) are finite in their first d elements
// (kernels.h's RowsAllFinite: one vector operation per vector of elements).
template <class T>
bool RowsFinite(const T* x, int64_t rows, int64_t ld, int64_t d) {
  if constexpr (std::is_same_v<T, float>) {
    return RowsAllFinite(x, rows, ld, d);
  } else if constexpr (std::is_same_v<T, Float16>) {
    return RowsAllFiniteF16(reinterpret_cast<const uint16_t*>(x), rows, ld, d);
  } else {
    return RowsAllFiniteBf16(reinterpret_cast<const uint16_t*>(x), rows, ld, d);
  }
}

// o_i <- alpha_i o_i + sum over j < nk of a(i, j) v_j, skipping the j with g(i, j) == 0,
// for output rows i < mi and columns c < d. a(i, j) = a[i * ai + j * aj] and g likewise
// (g: the probabilities, so that masked entries are skipped however a was formed);
// v_j = v + j * ldv; alpha null means 1. The forward's O = diag(alpha) O + P V (a = g = P)
// and the backward's dV += P^T dO, dQ' += dS K, dK' += dS^T Q (g = P).
inline void AccumulateSkippingZeros(const float* a, int64_t ai, int64_t aj, const float* g,
                                    int64_t gi, int64_t gj, int64_t mi, int64_t nk,
                                    const float* v, int64_t ldv, int64_t d, const float* alpha,
                                    float* o, int64_t ldo) {
  for (int64_t i = 0; i < mi; ++i) {
    float* oi = o + i * ldo;
    if (alpha != nullptr) {
      for (int64_t c = 0; c < d; ++c) oi[c] *= alpha[i];
    }
    for (int64_t j = 0; j < nk; ++j) {
      if (g[i * gi + j * gj] == 0.0f) continue;
      const float x = a[i * ai + j * aj];
      const float* vj = v + j * ldv;
      for (int64_t c = 0; c < d; ++c) oi[c] += x * vj[c];
    }
  }
}

}  // namespace cpu
}  // namespace attention
}  // namespace gpe

#endif  // ATTENTION_CPU_NONFINITE_H_
