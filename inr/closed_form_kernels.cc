// Highway per-target implementations of closed_form_kernels.h (compiled once per
// instruction set; HWY_DYNAMIC_DISPATCH picks the widest the CPU runs).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "inr/closed_form_kernels.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "inr/closed_form_kernels.h"

HWY_BEFORE_NAMESPACE();
namespace gpe {
namespace inr {
namespace internal {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DD = hn::ScalableTag<double>;

// Forward then backward substitution over V (1 or 8) vectors of columns starting at
// column c. The accumulators are named variables: GCC keeps an array of vectors indexed
// in a loop on the stack, turning each FMA into a load-FMA-store chain.
template <int V>
HWY_INLINE void SolveChunk(const double* HWY_RESTRICT band, int64_t k, int64_t kd,
                           double* HWY_RESTRICT b, int64_t ldb, int64_t c) {
  static_assert(V == 1 || V == 8, "chunks of 1 or 8 vectors");
  const DD d;
  const int64_t n = static_cast<int64_t>(hn::Lanes(d)), ld = kd + 1;
  using Vec = hn::Vec<DD>;
  Vec a0, a1, a2, a3, a4, a5, a6, a7;
  auto load = [&](const double* HWY_RESTRICT row) {
    a0 = hn::LoadU(d, row);
    if constexpr (V == 8) {
      a1 = hn::LoadU(d, row + n);
      a2 = hn::LoadU(d, row + 2 * n);
      a3 = hn::LoadU(d, row + 3 * n);
      a4 = hn::LoadU(d, row + 4 * n);
      a5 = hn::LoadU(d, row + 5 * n);
      a6 = hn::LoadU(d, row + 6 * n);
      a7 = hn::LoadU(d, row + 7 * n);
    }
  };
  // a -= l * row
  auto update = [&](Vec l, const double* HWY_RESTRICT row) {
    a0 = hn::NegMulAdd(l, hn::LoadU(d, row), a0);
    if constexpr (V == 8) {
      a1 = hn::NegMulAdd(l, hn::LoadU(d, row + n), a1);
      a2 = hn::NegMulAdd(l, hn::LoadU(d, row + 2 * n), a2);
      a3 = hn::NegMulAdd(l, hn::LoadU(d, row + 3 * n), a3);
      a4 = hn::NegMulAdd(l, hn::LoadU(d, row + 4 * n), a4);
      a5 = hn::NegMulAdd(l, hn::LoadU(d, row + 5 * n), a5);
      a6 = hn::NegMulAdd(l, hn::LoadU(d, row + 6 * n), a6);
      a7 = hn::NegMulAdd(l, hn::LoadU(d, row + 7 * n), a7);
    }
  };
  auto store = [&](Vec inv, double* HWY_RESTRICT row) {
    hn::StoreU(hn::Mul(a0, inv), d, row);
    if constexpr (V == 8) {
      hn::StoreU(hn::Mul(a1, inv), d, row + n);
      hn::StoreU(hn::Mul(a2, inv), d, row + 2 * n);
      hn::StoreU(hn::Mul(a3, inv), d, row + 3 * n);
      hn::StoreU(hn::Mul(a4, inv), d, row + 4 * n);
      hn::StoreU(hn::Mul(a5, inv), d, row + 5 * n);
      hn::StoreU(hn::Mul(a6, inv), d, row + 6 * n);
      hn::StoreU(hn::Mul(a7, inv), d, row + 7 * n);
    }
  };
  // L Y = B: y_i = (b_i - sum_{i-kd <= j < i} L(i, j) y_j) / L(i, i).
  for (int64_t i = 0; i < k; ++i) {
    load(b + i * ldb + c);
    for (int64_t j = std::max<int64_t>(0, i - kd); j < i; ++j) {
      update(hn::Set(d, band[j * ld + (i - j)]), b + j * ldb + c);
    }
    store(hn::Set(d, 1.0 / band[i * ld]), b + i * ldb + c);
  }
  // L^T X = Y: x_j = (y_j - sum_{j < i <= j+kd} L(i, j) x_i) / L(j, j).
  for (int64_t j = k - 1; j >= 0; --j) {
    load(b + j * ldb + c);
    const int64_t last = std::min(k - 1, j + kd);
    for (int64_t i = j + 1; i <= last; ++i) update(hn::Set(d, band[j * ld + (i - j)]), b + i * ldb + c);
    store(hn::Set(d, 1.0 / band[j * ld]), b + j * ldb + c);
  }
}

void BandCholeskySolveImpl(const double* band, int64_t k, int64_t kd, double* b, int64_t ldb,
                           int64_t c0, int64_t c1) {
  const int64_t n = static_cast<int64_t>(hn::Lanes(DD()));
  // 8 independent accumulators cover the FMA latency (4 cycles, 2 per cycle): with
  // AVX-512 a chunk is 64 columns (a 512-byte slice of kd + 1 rows stays in L1), with
  // AVX2 32. Narrower remainders take 1 vector at a time, then scalar columns.
  // A chunk's rows are copied into a contiguous k x 8n buffer first when they lie far
  // apart: with rows 2 KiB or more apart the kd + 1 rows in flight map to the same few
  // L1 sets (8 ways) and evict one another.
  int64_t c = c0;
  if (c + 8 * n <= c1 && ldb >= 256) {
    thread_local std::vector<double> packed;
    const int64_t w = 8 * n;
    packed.resize(static_cast<size_t>(k * w));
    for (; c + w <= c1; c += w) {
      for (int64_t i = 0; i < k; ++i) std::copy_n(b + i * ldb + c, w, packed.data() + i * w);
      SolveChunk<8>(band, k, kd, packed.data(), w, 0);
      for (int64_t i = 0; i < k; ++i) std::copy_n(packed.data() + i * w, w, b + i * ldb + c);
    }
  }
  for (; c + 8 * n <= c1; c += 8 * n) SolveChunk<8>(band, k, kd, b, ldb, c);
  for (; c + n <= c1; c += n) SolveChunk<1>(band, k, kd, b, ldb, c);
  if (c < c1) BandCholeskySolveReference(band, k, kd, b, ldb, c, c1);
}

template <typename T>
bool AllFiniteT(const T* data, int64_t rows, int64_t cols, int64_t ld) {
  const hn::ScalableTag<T> d;
  const int64_t n = static_cast<int64_t>(hn::Lanes(d));
  // x - x is 0 for finite x and NaN for +-inf and NaN; the NaNs survive the sums. Row by
  // row, whatever the leading dimension (a column walk of a row-major block misses the
  // cache on every element).
  auto acc0 = hn::Zero(d), acc1 = hn::Zero(d);
  T tail = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const T* HWY_RESTRICT row = data + r * ld;
    int64_t j = 0;
    for (; j + 2 * n <= cols; j += 2 * n) {
      const auto a = hn::LoadU(d, row + j), b = hn::LoadU(d, row + j + n);
      acc0 = hn::Add(acc0, hn::Sub(a, a));
      acc1 = hn::Add(acc1, hn::Sub(b, b));
    }
    for (; j < cols; ++j) tail += row[j] - row[j];
  }
  return hn::AllTrue(d, hn::Eq(hn::Add(acc0, acc1), hn::Zero(d))) && tail == T(0);
}

bool AllFiniteImpl(const double* data, int64_t rows, int64_t cols, int64_t ld) {
  return AllFiniteT(data, rows, cols, ld);
}
bool AllFiniteFloatImpl(const float* data, int64_t rows, int64_t cols, int64_t ld) {
  return AllFiniteT(data, rows, cols, ld);
}

double MaxAbsImpl(const double* data, int64_t rows, int64_t cols, int64_t ld) {
  const DD d;
  const int64_t n = static_cast<int64_t>(hn::Lanes(d));
  auto acc0 = hn::Zero(d), acc1 = hn::Zero(d);
  double tail = 0.0;
  for (int64_t r = 0; r < rows; ++r) {
    const double* HWY_RESTRICT row = data + r * ld;
    int64_t j = 0;
    for (; j + 2 * n <= cols; j += 2 * n) {
      acc0 = hn::Max(acc0, hn::Abs(hn::LoadU(d, row + j)));
      acc1 = hn::Max(acc1, hn::Abs(hn::LoadU(d, row + j + n)));
    }
    for (; j < cols; ++j) tail = std::max(tail, std::abs(row[j]));
  }
  return std::max(tail, hn::GetLane(hn::MaxOfLanes(d, hn::Max(acc0, acc1))));
}

void RowSpanImpl(const double* row, int64_t k, double threshold, int64_t* lo, int64_t* hi) {
  const DD d;
  const int64_t n = static_cast<int64_t>(hn::Lanes(d));
  const auto t = hn::Set(d, threshold);
  int64_t first = k;
  int64_t c = 0;
  for (; c + n <= k; c += n) {
    const intptr_t q = hn::FindFirstTrue(d, hn::Ge(hn::Abs(hn::LoadU(d, row + c)), t));
    if (q >= 0) {
      first = c + q;
      break;
    }
  }
  if (first == k) {
    for (; c < k; ++c) {
      if (std::abs(row[c]) >= threshold) {
        first = c;
        break;
      }
    }
  }
  if (first == k) {
    *lo = k;
    *hi = 0;
    return;
  }
  // From the right: scalar over the ragged end, then whole vectors down to `first`.
  int64_t e = k;
  for (; e > first && (e - first) % n != 0; --e) {
    if (std::abs(row[e - 1]) >= threshold) {
      *lo = first;
      *hi = e;
      return;
    }
  }
  for (; e - n >= first; e -= n) {
    if (!hn::AllFalse(d, hn::Ge(hn::Abs(hn::LoadU(d, row + e - n)), t))) {
      for (int64_t q = e; q > e - n; --q) {
        if (std::abs(row[q - 1]) >= threshold) {
          *lo = first;
          *hi = q;
          return;
        }
      }
    }
  }
  *lo = first;
  *hi = first + 1;  // not reached: row[first] itself passes
}

void DemoteToFloatImpl(const double* src, int64_t n, float* dst) {
  const DD d;
  const hn::Rebind<float, DD> df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) hn::StoreU(hn::DemoteTo(df, hn::LoadU(d, src + i)), df, dst + i);
  for (; i < n; ++i) dst[i] = static_cast<float>(src[i]);
}

}  // namespace HWY_NAMESPACE
}  // namespace internal
}  // namespace inr
}  // namespace gpe
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace gpe {
namespace inr {
namespace internal {

HWY_EXPORT(BandCholeskySolveImpl);
HWY_EXPORT(AllFiniteImpl);
HWY_EXPORT(AllFiniteFloatImpl);
HWY_EXPORT(DemoteToFloatImpl);
HWY_EXPORT(MaxAbsImpl);
HWY_EXPORT(RowSpanImpl);

double MaxAbs(const double* data, int64_t rows, int64_t cols, int64_t ld) {
  return HWY_DYNAMIC_DISPATCH(MaxAbsImpl)(data, rows, cols, ld);
}

double MaxAbsReference(const double* data, int64_t rows, int64_t cols, int64_t ld) {
  double m = 0.0;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < cols; ++j) m = std::max(m, std::abs(data[r * ld + j]));
  }
  return m;
}

void RowSpan(const double* row, int64_t k, double threshold, int64_t* lo, int64_t* hi) {
  HWY_DYNAMIC_DISPATCH(RowSpanImpl)(row, k, threshold, lo, hi);
}

void RowSpanReference(const double* row, int64_t k, double threshold, int64_t* lo, int64_t* hi) {
  *lo = k;
  *hi = 0;
  for (int64_t c = 0; c < k; ++c) {
    if (std::abs(row[c]) >= threshold) {
      if (*lo == k) *lo = c;
      *hi = c + 1;
    }
  }
}

void BandCholeskySolve(const double* band, int64_t k, int64_t kd, double* b, int64_t ldb,
                       int64_t c0, int64_t c1) {
  HWY_DYNAMIC_DISPATCH(BandCholeskySolveImpl)(band, k, kd, b, ldb, c0, c1);
}

void BandCholeskySolveReference(const double* band, int64_t k, int64_t kd, double* b,
                                int64_t ldb, int64_t c0, int64_t c1) {
  const int64_t ld = kd + 1;
  // L Y = B: row j is final once divided by L(j, j); then it updates the rows below.
  for (int64_t j = 0; j < k; ++j) {
    double* bj = b + j * ldb;
    const double inv = 1.0 / band[j * ld];
    for (int64_t c = c0; c < c1; ++c) bj[c] *= inv;
    for (int64_t i = j + 1; i <= std::min(k - 1, j + kd); ++i) {
      double* bi = b + i * ldb;
      const double l = band[j * ld + (i - j)];
      for (int64_t c = c0; c < c1; ++c) bi[c] -= l * bj[c];
    }
  }
  // L^T X = Y, from the last row up.
  for (int64_t j = k - 1; j >= 0; --j) {
    double* bj = b + j * ldb;
    for (int64_t i = j + 1; i <= std::min(k - 1, j + kd); ++i) {
      const double* bi = b + i * ldb;
      const double l = band[j * ld + (i - j)];
      for (int64_t c = c0; c < c1; ++c) bj[c] -= l * bi[c];
    }
    const double inv = 1.0 / band[j * ld];
    for (int64_t c = c0; c < c1; ++c) bj[c] *= inv;
  }
}

namespace {
template <typename T>
bool AllFiniteLoops(const T* data, int64_t rows, int64_t cols, int64_t ld) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < cols; ++j) {
      if (!std::isfinite(data[r * ld + j])) return false;
    }
  }
  return true;
}
}  // namespace

bool AllFinite(const double* data, int64_t rows, int64_t cols, int64_t ld) {
  return HWY_DYNAMIC_DISPATCH(AllFiniteImpl)(data, rows, cols, ld);
}
bool AllFiniteReference(const double* data, int64_t rows, int64_t cols, int64_t ld) {
  return AllFiniteLoops(data, rows, cols, ld);
}
bool AllFinite(const float* data, int64_t rows, int64_t cols, int64_t ld) {
  return HWY_DYNAMIC_DISPATCH(AllFiniteFloatImpl)(data, rows, cols, ld);
}
bool AllFiniteReference(const float* data, int64_t rows, int64_t cols, int64_t ld) {
  return AllFiniteLoops(data, rows, cols, ld);
}

void Transpose(const double* src, int64_t rows, int64_t cols, int64_t lds, double* dst,
               int64_t ldd) {
  constexpr int64_t kTile = 8;
  for (int64_t i0 = 0; i0 < rows; i0 += kTile) {
    const int64_t i1 = std::min(rows, i0 + kTile);
    for (int64_t j0 = 0; j0 < cols; j0 += kTile) {
      const int64_t j1 = std::min(cols, j0 + kTile);
      for (int64_t j = j0; j < j1; ++j) {
        for (int64_t i = i0; i < i1; ++i) dst[j * ldd + i] = src[i * lds + j];
      }
    }
  }
}

void DemoteToFloat(const double* src, int64_t n, float* dst) {
  HWY_DYNAMIC_DISPATCH(DemoteToFloatImpl)(src, n, dst);
}

}  // namespace internal
}  // namespace inr
}  // namespace gpe
#endif  // HWY_ONCE
