#include "inr/closed_form_kernels.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace gpe {
namespace inr {
namespace internal {
namespace {

// A random band Cholesky factor of a well-conditioned SPD matrix: a dominant diagonal in
// [2, 3) and off-diagonal entries in [-0.5, 0.5) / kd, so |L^-1| stays O(1).
std::vector<double> RandomBand(int64_t k, int64_t kd, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<double> band(static_cast<size_t>(k * (kd + 1)));
  for (int64_t j = 0; j < k; ++j) {
    band[j * (kd + 1)] = 2.0 + u(rng);
    for (int64_t i = 1; i <= kd; ++i) band[j * (kd + 1) + i] = (u(rng) - 0.5) / kd;
  }
  return band;
}

// The vector solve against the row-operation reference on column counts below, at and
// above the chunk widths (8 vectors: 64 columns with AVX-512, 32 with AVX2, 16 baseline;
// 1 vector: 8, 4, 2) and on column sub-ranges, with rows close together and far apart
// (the latter are solved in a packed copy). Both compute the same substitutions, the
// vector one with fused multiply-adds and another summation order: with |L^-1| = O(1)
// the results agree to a few ulp times k, so 1e-13 relative to max |X| is a bound with
// ~10x margin, and a wrong index or a missed row shows up at O(1).
TEST(BandCholeskySolveTest, MatchesReference) {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  for (int64_t k : {1, 5, 37, 64}) {
    for (int64_t kd : {0, 1, 3, 9}) {
      if (kd >= k) continue;
      const std::vector<double> band = RandomBand(k, kd, rng);
      for (int64_t cols : {1, 3, 8, 17, 32, 33, 64, 70, 129}) {
        for (int64_t c0 : {int64_t{0}, cols / 3}) {
          // Rows 2 KiB or more apart take the packed path.
          const int64_t ldb = cols + (c0 == 0 ? 5 : 300);
          std::vector<double> b(static_cast<size_t>(k * ldb));
          for (double& v : b) v = u(rng);
          std::vector<double> want = b, got = b;
          BandCholeskySolveReference(band.data(), k, kd, want.data(), ldb, c0, cols);
          BandCholeskySolve(band.data(), k, kd, got.data(), ldb, c0, cols);
          double scale = 0.0;
          for (double v : want) scale = std::max(scale, std::abs(v));
          for (int64_t i = 0; i < k; ++i) {
            for (int64_t c = 0; c < ldb; ++c) {
              const size_t q = static_cast<size_t>(i * ldb + c);
              if (c < c0 || c >= cols) {
                // Columns outside [c0, c1) are left untouched, bit for bit.
                ASSERT_EQ(got[q], b[q]) << "k=" << k << " kd=" << kd << " col " << c;
              } else {
                ASSERT_NEAR(got[q], want[q], 1e-13 * scale)
                    << "k=" << k << " kd=" << kd << " cols=" << cols << " (" << i << ", " << c << ")";
              }
            }
          }
        }
      }
    }
  }
}

// The reference really solves G X = B: multiply back with G = L L^T (assembled densely)
// and compare with B. Residual bound: cond(G) = O(1) here, so 1e-12 of max |B| is ~100x
// above the rounding of k-term sums.
TEST(BandCholeskySolveTest, ReferenceSolvesTheSystem) {
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  const int64_t k = 23, kd = 4, cols = 6;
  const std::vector<double> band = RandomBand(k, kd, rng);
  std::vector<double> l(static_cast<size_t>(k * k), 0.0);
  for (int64_t j = 0; j < k; ++j) {
    for (int64_t i = j; i <= std::min(k - 1, j + kd); ++i) l[i * k + j] = band[j * (kd + 1) + i - j];
  }
  std::vector<double> b(static_cast<size_t>(k * cols));
  for (double& v : b) v = u(rng);
  std::vector<double> x = b;
  BandCholeskySolveReference(band.data(), k, kd, x.data(), cols, 0, cols);
  for (int64_t i = 0; i < k; ++i) {
    for (int64_t c = 0; c < cols; ++c) {
      double g_x = 0.0;  // (L L^T x)_i
      for (int64_t m = 0; m < k; ++m) {
        double lt_x = 0.0;
        for (int64_t r = 0; r < k; ++r) lt_x += l[r * k + m] * x[r * cols + c];
        g_x += l[i * k + m] * lt_x;
      }
      EXPECT_NEAR(g_x, b[i * cols + c], 1e-12);
    }
  }
}

// Exact predicate: every position of a non-finite value (inf, -inf, NaN) in blocks whose
// widths straddle the vector widths is found, and entries outside the block are ignored.
template <typename T>
void CheckFindsEveryNonFiniteEntry() {
  const T bad[] = {std::numeric_limits<T>::infinity(), -std::numeric_limits<T>::infinity(),
                   std::numeric_limits<T>::quiet_NaN()};
  for (int64_t cols : {1, 7, 8, 15, 16, 17, 31, 32, 33, 40}) {
    const int64_t rows = 3, ld = cols + 2;
    // The largest finite value: x - x must stay 0 where x + x would overflow.
    std::vector<T> m(static_cast<size_t>(rows * ld), std::numeric_limits<T>::max());
    for (int64_t r = 0; r < rows; ++r) m[r * ld + cols] = bad[2];  // outside the block
    ASSERT_TRUE(AllFinite(m.data(), rows, cols, ld));
    ASSERT_TRUE(AllFiniteReference(m.data(), rows, cols, ld));
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        for (T v : bad) {
          std::vector<T> t = m;
          t[r * ld + c] = v;
          EXPECT_FALSE(AllFinite(t.data(), rows, cols, ld)) << r << ", " << c << ": " << v;
          EXPECT_FALSE(AllFiniteReference(t.data(), rows, cols, ld));
        }
      }
    }
  }
}

TEST(AllFiniteTest, FindsEveryNonFiniteEntryDouble) { CheckFindsEveryNonFiniteEntry<double>(); }
TEST(AllFiniteTest, FindsEveryNonFiniteEntryFloat) { CheckFindsEveryNonFiniteEntry<float>(); }

// MaxAbs and RowSpan are exact (comparisons only): equal to their references on random
// sparse rows of every length around the vector widths, with kept entries placed at the
// ends, inside and nowhere, and with subnormal entries against the smallest threshold.
TEST(RowScanTest, MaxAbsAndRowSpanMatchReferences) {
  std::mt19937_64 rng(9);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  for (int64_t k = 1; k <= 40; ++k) {
    for (int trial = 0; trial < 30; ++trial) {
      std::vector<double> row(static_cast<size_t>(k), 0.0);
      const double density = trial % 3 == 0 ? 0.0 : u(rng);
      for (double& v : row) {
        if (u(rng) < density) v = (u(rng) < 0.5 ? -1 : 1) * std::ldexp(u(rng), -static_cast<int>(u(rng) * 1100));
      }
      if (trial % 5 == 1) row[0] = -0.75;
      if (trial % 5 == 2) row[k - 1] = 0.5;
      EXPECT_EQ(MaxAbs(row.data(), 1, k, k), MaxAbsReference(row.data(), 1, k, k));
      for (double threshold : {std::numeric_limits<double>::denorm_min(), 1e-300, 0x1p-60, 0.3}) {
        int64_t lo, hi, want_lo, want_hi;
        RowSpan(row.data(), k, threshold, &lo, &hi);
        RowSpanReference(row.data(), k, threshold, &want_lo, &want_hi);
        ASSERT_EQ(lo, want_lo) << "k=" << k << " trial " << trial << " threshold " << threshold;
        ASSERT_EQ(hi, want_hi) << "k=" << k << " trial " << trial << " threshold " << threshold;
      }
    }
  }
  // A block with a leading dimension: the padding is not read into the maximum.
  const std::vector<double> m = {1, -3, 99, 2, 0.5, -99};
  EXPECT_EQ(MaxAbs(m.data(), 2, 2, 3), 3.0);
  EXPECT_EQ(MaxAbs(m.data(), 0, 2, 3), 0.0);
}

// Transpose of tiles and ragged edges (sizes around the 8 x 8 tile) with padded leading
// dimensions: an exact copy, and the padding is left alone.
TEST(TransposeTest, MatchesElementwise) {
  for (int64_t rows : {1, 7, 8, 9, 20}) {
    for (int64_t cols : {1, 8, 13}) {
      const int64_t lds = cols + 3, ldd = rows + 2;
      std::vector<double> src(static_cast<size_t>(rows * lds));
      for (size_t q = 0; q < src.size(); ++q) src[q] = static_cast<double>(q) + 0.5;
      std::vector<double> dst(static_cast<size_t>(cols * ldd), -1.0);
      Transpose(src.data(), rows, cols, lds, dst.data(), ldd);
      for (int64_t j = 0; j < cols; ++j) {
        for (int64_t i = 0; i < ldd; ++i) {
          EXPECT_EQ(dst[j * ldd + i], i < rows ? src[i * lds + j] : -1.0) << i << ", " << j;
        }
      }
    }
  }
}

// Conversion to float rounds to nearest, as static_cast does: identical results.
TEST(DemoteToFloatTest, MatchesStaticCast) {
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<double> u(-1e3, 1e3);
  for (int64_t n : {0, 1, 7, 8, 33}) {
    std::vector<double> src(static_cast<size_t>(n));
    for (double& v : src) v = u(rng);
    std::vector<float> dst(static_cast<size_t>(n) + 1, -7.0f);
    DemoteToFloat(src.data(), n, dst.data());
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(dst[i], static_cast<float>(src[i]));
    EXPECT_EQ(dst[n], -7.0f);  // nothing written past n
  }
}

}  // namespace
}  // namespace internal
}  // namespace inr
}  // namespace gpe
