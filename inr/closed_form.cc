#include "inr/closed_form.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "inr/closed_form_kernels.h"
#include "parallel/thread_pool.h"

// LAPACK's Cholesky factorisation and solve (Fortran symbols in OpenBLAS).
extern "C" {
void dpotrf_(const char* uplo, const int* n, double* a, const int* lda, int* info);
void dpotri_(const char* uplo, const int* n, double* a, const int* lda, int* info);
void dpbtrf_(const char* uplo, const int* n, const int* kd, double* ab, const int* ldab, int* info);
// Reciprocal condition estimates (1-norm) from those factorisations.
void dpocon_(const char* uplo, const int* n, const double* a, const int* lda, const double* anorm,
             double* rcond, double* work, int* iwork, int* info);
void dpbcon_(const char* uplo, const int* n, const int* kd, const double* ab, const int* ldab,
             const double* anorm, double* rcond, double* work, int* iwork, int* info);

void dpotrs_(const char* uplo, const int* n, const int* nrhs, const double* a, const int* lda,
             double* b, const int* ldb, int* info);
}

namespace gpe {
namespace inr {
namespace {

// BLAS and LAPACK take int dimensions.
constexpr int64_t kMaxDim = std::numeric_limits<int>::max();

absl::Status CheckMatrix(const MatrixRef& m, const char* what) {
  if (m.rows() < 1 || m.cols() < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " is empty (", m.rows(), " x ", m.cols(), ")"));
  }
  if (m.rows() > kMaxDim || m.cols() > kMaxDim || m.size() > (int64_t{1} << 31)) {
    return absl::OutOfRangeError(
        absl::StrCat(what, " is too large (", m.rows(), " x ", m.cols(), ")"));
  }
  // A vector kernel: Eigen's allFinite() and plain loops run scalar in this SSE2 build.
  if (!internal::AllFinite(m.data(), m.rows(), m.cols(), m.outerStride())) {
    return absl::InvalidArgumentError(absl::StrCat(what, " has a non-finite entry"));
  }
  return absl::OkStatus();
}

absl::Status CheckRcond(double rcond) {
  if (!std::isfinite(rcond) || rcond < 0.0 || rcond >= 1.0) {
    return absl::InvalidArgumentError(
        absl::StrCat("rcond must be finite and in [0, 1); got ", rcond));
  }
  return absl::OkStatus();
}

absl::Status CheckLambda(double lambda) {
  if (!std::isfinite(lambda) || lambda < 0.0) {
    return absl::InvalidArgumentError(
        absl::StrCat("lambda (ridge) must be finite and >= 0; got ", lambda));
  }
  return absl::OkStatus();
}

// C = op(A) op(B), row-major, with leading dimensions in elements.
void Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const double* a,
          int64_t lda, const double* b, int64_t ldb, double* c, int64_t ldc) {
  cblas_dgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, static_cast<int>(m), static_cast<int>(n),
              static_cast<int>(k), 1.0, a, static_cast<int>(lda), b, static_cast<int>(ldb), 0.0,
              c, static_cast<int>(ldc));
}

bool SameMatrix(const MatrixRef& a, const MatrixRef& b) {
  if (a.rows() != b.rows() || a.cols() != b.cols()) return false;
  if (a.data() == b.data() && a.outerStride() == b.outerStride()) return true;
  return a == b;
}

absl::Status CheckTensor(const Tensor3& t, const char* what) {
  int64_t n = 1;
  for (int64_t d : t.dims) {
    if (d < 1 || d > kMaxDim) {
      return absl::InvalidArgumentError(absl::StrCat(what, " has a bad dimension ", d));
    }
    n *= d;
    if (n > (int64_t{1} << 31)) return absl::OutOfRangeError(absl::StrCat(what, " is too large"));
  }
  if (static_cast<int64_t>(t.data.size()) != n) {
    return absl::InvalidArgumentError(absl::StrCat(what, " holds ", t.data.size(),
                                                   " values; its dims need ", n));
  }
  for (double v : t.data) {
    if (!std::isfinite(v)) return absl::InvalidArgumentError(absl::StrCat(what, " has a non-finite entry"));
  }
  return absl::OkStatus();
}

}  // namespace

namespace {

// Entries below 2^-60 (~8.7e-19) of the largest become exact zeros. Each changes an
// entry of Psi^T Psi by less than 2^-60 max^2, so G moves by at most K 2^-60 max^2 in
// norm: below the rounding of G itself (eps ~2^-52 relative) for K < 256 and at its level
// beyond. In exchange a Gaussian basis becomes banded (width ~19 sigma instead of its
// full support), which the blocked products and band solves below exploit, and no
// subnormal products arise (x86 cores process those ~100x slower).
RowMatrixXd FlushTails(const MatrixRef& psi) {
  RowMatrixXd p = psi;
  const double floor = 0x1p-60 * p.cwiseAbs().maxCoeff();
  return (p.array().abs() < floor).select(0.0, p);
}

// InvalidArgument when the largest diagonal entry of Psi^T Psi + lambda I is +inf: a
// column of Psi whose squared norm passes float64's range (entries near 1.3e154 and
// beyond). Cholesky would accept the infinite pivots (its test is a_jj <= 0 only) and the
// solves would divide by them, returning W = 0 for a problem whose answer is finite.
// (Off the diagonal |G_ij| <= sqrt(G_ii G_jj): finite diagonals keep G finite.)
absl::Status CheckGramFinite(double max_diag, int64_t n, int64_t k) {
  if (std::isfinite(max_diag)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "the encoding factor's Gram matrix Psi^T Psi (", n, " coordinates x ", k,
      " basis functions) overflows float64's range (a column's squared norm beyond 1.8e308): "
      "scale the factor down"));
}

// The acceptance rule after a Cholesky factorisation that succeeded: LAPACK's estimate of
// the reciprocal 1-norm condition number (dpocon / dpbcon, O(k^2) / O(k kd)) of G must
// reach 1e3 eps / k. The 2-norm condition is at least the 1-norm one over k, so every G
// refused has cond_2(G) above ~4.5e12, where solutions lose all but ~1e-3 of the data's
// accuracy; the pivot test alone (diag(L)^2 against the largest diagonal) passed factors
// whose pivots do not reveal their condition (a Kahan-like factor: cond 2.6e16, pivot
// ratio 0.012, and a W worse than 0).
bool WellConditioned(double rcond, int64_t k) {
  return rcond >= 1e3 * std::numeric_limits<double>::epsilon() / static_cast<double>(k);
}

absl::Status IllConditioned(int64_t n, int64_t k, double lambda) {
  return absl::FailedPreconditionError(absl::StrCat(
      "the encoding factor (", n, " coordinates x ", k,
      " basis functions) is rank deficient or too ill-conditioned for lambda = ", lambda,
      ": use a ridge lambda > 0, rcond > 0 (truncated SVD), fewer shifts, or a wider basis"));
}

// Adds lambda I to the Gram matrix g (k x k; upper triangle in row-major, i.e. lower in
// column-major) and factors it in place (dpotrf, "L" in column-major terms).
absl::Status FactorGram(RowMatrixXd& g, double lambda, int64_t n) {
  const int k = static_cast<int>(g.rows());
  double max_diag = 0.0;
  for (int i = 0; i < k; ++i) {
    g(i, i) += lambda;
    max_diag = std::max(max_diag, g(i, i));
  }
  if (absl::Status s = CheckGramFinite(max_diag, n, k); !s.ok()) return s;
  if (max_diag == 0.0) {
    return absl::FailedPreconditionError(
        "the encoding factor is all zeros: no coordinate touches any basis function");
  }
  // The 1-norm of G (symmetric: the largest column sum of |G| from its lower triangle in
  // column-major terms, the upper in row-major), for the condition estimate.
  std::vector<double> col(static_cast<size_t>(k), 0.0);
  for (int i = 0; i < k; ++i) {
    for (int j = i; j < k; ++j) {
      col[i] += std::abs(g(i, j));
      if (j != i) col[j] += std::abs(g(i, j));
    }
  }
  const double anorm = *std::max_element(col.begin(), col.end());
  int info = 0;
  dpotrf_("L", &k, g.data(), &k, &info);
  // Cholesky succeeds on matrices whose condition number is near 1/eps yet yields
  // meaningless solutions there; require diag(L)^2 above 1e3 eps of the largest pivot,
  // i.e. cond(G) below ~4e12 (a relative residual loss of at most ~1e-3 of the data),
  // and the condition estimate (WellConditioned) for pivots that do not show it.
  double min_pivot = std::numeric_limits<double>::infinity();
  if (info == 0) {
    for (int i = 0; i < k; ++i) min_pivot = std::min(min_pivot, g(i, i) * g(i, i));
  }
  if (info != 0 || min_pivot < 1e3 * std::numeric_limits<double>::epsilon() * max_diag) {
    return IllConditioned(n, k, lambda);
  }
  double rcond = 0.0;
  std::vector<double> work(3 * static_cast<size_t>(k));
  std::vector<int> iwork(static_cast<size_t>(k));
  dpocon_("L", &k, g.data(), &k, &anorm, &rcond, work.data(), iwork.data(), &info);
  if (info != 0 || !WellConditioned(rcond, k)) return IllConditioned(n, k, lambda);
  return absl::OkStatus();
}

// A factor cut into blocks of rows, each with the window of columns where its nonzeros
// lie. Shifted bases are local (a few to a few dozen nonzeros per row), so products with
// the factor touch only these windows: Zheng et al.'s O(N K (N + K)) becomes
// O(N b (N + K)) for bandwidth b, with every block product still a BLAS-3 call. Each
// block's window is packed into its own row-major panel (rows x window), so the factor
// is never copied whole.
struct BlockedFactor {
  struct Block {
    int64_t r0, r1, c0, c1;
    int64_t offset;  // of the panel in `panels` (and `panels_f`)
  };
  int64_t n = 0, k = 0;
  std::vector<Block> blocks;
  std::vector<double> panels;
  std::vector<double> panels_t;  // each panel transposed (window x rows)
  std::vector<float> panels_f;   // the same as `panels` in float32 (float32_image_products)
  // G = Psi^T Psi + lambda I is banded with bandwidth kd (from the block windows). A narrow
  // band is solved through its band Cholesky factor (O(K^2 kd) per side); a wide one
  // through the explicit inverse (O(K^3), level 3), whichever costs less.
  int kd = 0;
  bool banded = false;
  RowMatrixXd band;     // banded: band Cholesky factor, column-major (kd + 1) x K
  RowMatrixXd inverse;  // dense: G^-1, upper triangle in row-major
};

// The band solves (4 K^2 kd flops per side, vectorised row operations) run at about a
// third of the dense route's level-3 rate (2 K^3 per side plus the inverse): band wins for
// kd < K / 6 (measured at K = 256 with kd from 2 to 60).
bool PreferBand(int64_t kd, int64_t k) { return 6 * kd < k; }

constexpr int64_t kRowBlock = 32;

absl::StatusOr<BlockedFactor> PrepareFactor(const MatrixRef& psi, double lambda,
                                            bool float_panels) {
  absl::Status s = CheckMatrix(psi, "encoding factor Psi");
  if (!s.ok()) return s;
  if (!(s = CheckLambda(lambda)).ok()) return s;
  BlockedFactor f;
  const int64_t n = psi.rows(), k = psi.cols(), ld = psi.outerStride();
  f.n = n;
  f.k = k;
  // The same flush as FlushTails: entries below 2^-60 of the largest count as zeros.
  const double floor = 0x1p-60 * internal::MaxAbs(psi.data(), n, k, ld);
  auto kept = [floor](double v) { return v != 0.0 && !(std::abs(v) < floor); };
  // kept(v) <=> |v| >= threshold (the smallest subnormal stands for v != 0 when the
  // floor underflows to 0).
  const double threshold = std::max(floor, std::numeric_limits<double>::denorm_min());
  int64_t total = 0;
  for (int64_t r0 = 0; r0 < n; r0 += kRowBlock) {
    const int64_t r1 = std::min(n, r0 + kRowBlock);
    int64_t c0 = k, c1 = 0;
    for (int64_t r = r0; r < r1; ++r) {
      int64_t lo, hi;
      internal::RowSpan(psi.data() + r * ld, k, threshold, &lo, &hi);
      // G(a, b) != 0 needs a row holding both a and b: G's bandwidth is the widest row span.
      if (lo < hi) f.kd = std::max<int>(f.kd, static_cast<int>(hi - lo - 1));
      c0 = std::min(c0, lo);
      c1 = std::max(c1, hi);
    }
    if (c0 < c1) {
      f.blocks.push_back({r0, r1, c0, c1, total});
      total += (r1 - r0) * (c1 - c0);
    }
  }
  f.panels.resize(static_cast<size_t>(total));
  for (const BlockedFactor::Block& b : f.blocks) {
    const int64_t w = b.c1 - b.c0;
    for (int64_t r = b.r0; r < b.r1; ++r) {
      const double* row = psi.data() + r * ld;
      double* dst = f.panels.data() + b.offset + (r - b.r0) * w;
      for (int64_t c = b.c0; c < b.c1; ++c) dst[c - b.c0] = kept(row[c]) ? row[c] : 0.0;
    }
  }
  f.panels_t.resize(f.panels.size());
  for (const BlockedFactor::Block& b : f.blocks) {
    internal::Transpose(f.panels.data() + b.offset, b.r1 - b.r0, b.c1 - b.c0, b.c1 - b.c0,
                        f.panels_t.data() + b.offset, b.r1 - b.r0);
  }
  if (float_panels) {
    f.panels_f.resize(f.panels.size());
    internal::DemoteToFloat(f.panels.data(), total, f.panels_f.data());
  }
  // G = Psi^T Psi, block by block on the windows (upper triangle, row-major).
  f.inverse = RowMatrixXd::Zero(k, k);
  for (const BlockedFactor::Block& b : f.blocks) {
    const int w = static_cast<int>(b.c1 - b.c0);
    cblas_dsyrk(CblasRowMajor, CblasUpper, CblasTrans, w, static_cast<int>(b.r1 - b.r0), 1.0,
                f.panels.data() + b.offset, w, 1.0, f.inverse.data() + b.c0 * k + b.c0,
                static_cast<int>(k));
  }
  f.banded = PreferBand(f.kd, k);
  if (f.banded) {
    // Band storage, column-major lower: AB(i - j, j) = G(i, j) for j <= i <= j + kd; G's
    // upper triangle in row-major is the same numbers (G symmetric).
    const int ldab = f.kd + 1;
    f.band = RowMatrixXd::Zero(k, ldab);  // k x ldab row-major == ldab x k column-major
    double max_diag = 0.0;
    for (int64_t j = 0; j < k; ++j) {
      for (int64_t i = j; i <= std::min<int64_t>(k - 1, j + f.kd); ++i) {
        f.band(j, i - j) = f.inverse(j, i) + (i == j ? lambda : 0.0);
      }
      max_diag = std::max(max_diag, f.band(j, 0));
    }
    if (absl::Status st = CheckGramFinite(max_diag, n, k); !st.ok()) return st;
    // G's 1-norm from the band (column sums of |G|, each off-diagonal entry twice).
    std::vector<double> col(static_cast<size_t>(k), 0.0);
    for (int64_t j = 0; j < k; ++j) {
      for (int64_t d = 0; d <= f.kd && j + d < k; ++d) {
        col[j] += std::abs(f.band(j, d));
        if (d != 0) col[j + d] += std::abs(f.band(j, d));
      }
    }
    const double anorm = *std::max_element(col.begin(), col.end());
    int info = 0;
    const int ik = static_cast<int>(k);
    if (max_diag > 0) dpbtrf_("L", &ik, &f.kd, f.band.data(), &ldab, &info);
    double min_pivot = std::numeric_limits<double>::infinity();
    for (int64_t j = 0; info == 0 && j < k; ++j) min_pivot = std::min(min_pivot, f.band(j, 0) * f.band(j, 0));
    // The same acceptance rules as FactorGram.
    if (max_diag == 0 || info != 0 ||
        min_pivot < 1e3 * std::numeric_limits<double>::epsilon() * max_diag) {
      return IllConditioned(n, k, lambda);
    }
    double rcond = 0.0;
    std::vector<double> work(3 * static_cast<size_t>(k));
    std::vector<int> iwork(static_cast<size_t>(k));
    dpbcon_("L", &ik, &f.kd, f.band.data(), &ldab, &anorm, &rcond, work.data(), iwork.data(),
            &info);
    if (info != 0 || !WellConditioned(rcond, k)) return IllConditioned(n, k, lambda);
    f.inverse.resize(0, 0);
    return f;
  }
  if (!(s = FactorGram(f.inverse, lambda, n)).ok()) return s;
  int info = 0;
  const int ik = static_cast<int>(k);
  dpotri_("L", &ik, f.inverse.data(), &ik, &info);
  if (info != 0) return absl::InternalError(absl::StrCat("dpotri failed with info ", info));
  return f;
}

// [begin, end) of part p when n items are cut into `parts` nearly equal pieces.
std::pair<int64_t, int64_t> Part(int64_t n, int parts, int p) {
  return {n * p / parts, n * (p + 1) / parts};
}

// Accumulation into rows [a, b) of an output whose rows [start, *covered) are already
// initialised: zero(lo, hi) fills a gap below a, then product(lo, hi, beta) adds into
// the initialised part (beta 1) and overwrites the new part (beta 0).
template <class Zero, class Product>
void IntoRows(int64_t a, int64_t b, int64_t* covered, Zero zero, Product product) {
  if (a > *covered) {
    zero(*covered, a);
    *covered = a;
  }
  const int64_t split = std::min(b, *covered);
  if (a < split) product(a, split, 1);
  if (split < b) product(std::max(a, split), b, 0);
  *covered = std::max(*covered, b);
}

// Share p of W = G_y^-1 (Psi_y^T S Psi_x) G_x^-1 (K_y x K_x, written to w), in two
// phases, each one parallel region (the regions' boundary is the barrier):
//  A. rows [k0, k1) of M = (Psi_y^T S) Psi_x, from the y blocks whose windows meet
//     those rows (M1 = Psi_y^T S rows [k0, k1), in T, then times Psi_x's blocks);
//  B. the same rows of T = M G_x^-1 (row-wise, so still this thread's own rows);
//  (end of the first region: every row of T is final)
//  C. columns [j0, j1) of W = G_y^-1 T (FitShareColumns).
template <class T>
void FitShareRows(const BlockedFactor& fy, const BlockedFactor& fx, const MatrixRef& s,
                  int parts, int p, RowMatrixXd* w) {
  const int64_t ky = fy.k, kx = fx.k, nx = s.cols();
  // (Plain variables, not a structured binding: lambdas below capture them, which C++17
  // allows only for variables.)
  const std::pair<int64_t, int64_t> k_range = Part(ky, parts, p);
  const int64_t k0 = k_range.first, k1 = k_range.second;
  const int64_t rows = k1 - k0;
  double* out = w->data();
  if (rows > 0) {
    // M1 rows [k0, k1) over Psi_y's blocks; the windows overlap, so each product
    // accumulates into rows an earlier block wrote and overwrites the rest (IntoRows),
    // sparing a zero fill of the whole buffer.
    std::unique_ptr<T[]> m1(new T[static_cast<size_t>(rows * nx)]);
    int64_t covered = k0;
    std::vector<float> s_panel;
    for (const BlockedFactor::Block& b : fy.blocks) {
      const int64_t c0 = std::max(b.c0, k0), c1 = std::min(b.c1, k1);
      if (c0 >= c1) continue;
      const int64_t wdt = b.c1 - b.c0, rb = b.r1 - b.r0;
      if constexpr (std::is_same_v<T, float>) {
        s_panel.resize(static_cast<size_t>(rb * nx));
        for (int64_t r = 0; r < rb; ++r) {
          internal::DemoteToFloat(s.data() + (b.r0 + r) * s.outerStride(), nx,
                                  s_panel.data() + r * nx);
        }
      }
      IntoRows(
          c0, c1, &covered,
          [&](int64_t z0, int64_t z1) {
            std::fill(m1.get() + (z0 - k0) * nx, m1.get() + (z1 - k0) * nx, T(0));
          },
          [&](int64_t p0, int64_t p1, int beta) {
            if constexpr (std::is_same_v<T, float>) {
              cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, static_cast<int>(p1 - p0),
                          static_cast<int>(nx), static_cast<int>(rb), 1.0f,
                          fy.panels_f.data() + b.offset + (p0 - b.c0), static_cast<int>(wdt),
                          s_panel.data(), static_cast<int>(nx), static_cast<float>(beta),
                          m1.get() + (p0 - k0) * nx, static_cast<int>(nx));
            } else {
              cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, static_cast<int>(p1 - p0),
                          static_cast<int>(nx), static_cast<int>(rb), 1.0,
                          fy.panels.data() + b.offset + (p0 - b.c0), static_cast<int>(wdt),
                          s.data() + b.r0 * s.outerStride(), static_cast<int>(s.outerStride()),
                          static_cast<double>(beta), m1.get() + (p0 - k0) * nx,
                          static_cast<int>(nx));
            }
          });
    }
    std::fill(m1.get() + (covered - k0) * nx, m1.get() + rows * nx, T(0));
    // These rows of M = M1 Psi_x, formed transposed: M^T(:, k0:k1) = Psi_x^T M1^T (K_x x
    // rows) over Psi_x's blocks (rows of Psi_x = columns of M1), the layout in which
    // G_x's solve runs along K_x with the rows as contiguous right-hand sides.
    std::vector<double> mt(static_cast<size_t>(kx * rows));
    covered = 0;
    // Both operands are laid out for a plain NN product (OpenBLAS's small-matrix TT
    // kernel ran at half the NN rate): the panel is stored transposed, and the block of
    // M1 is copied (float32: widened) transposed, rb x rows.
    std::vector<double> m1t;
    for (const BlockedFactor::Block& b : fx.blocks) {
      const int64_t rb = b.r1 - b.r0;
      m1t.resize(static_cast<size_t>(rb * rows));
      for (int64_t i = 0; i < rows; ++i) {
        const T* src = m1.get() + i * nx + b.r0;
        for (int64_t r = 0; r < rb; ++r) m1t[r * rows + i] = static_cast<double>(src[r]);
      }
      IntoRows(
          b.c0, b.c1, &covered,
          [&](int64_t z0, int64_t z1) {
            std::fill(mt.data() + z0 * rows, mt.data() + z1 * rows, 0.0);
          },
          [&](int64_t p0, int64_t p1, int beta) {
            cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(p1 - p0),
                        static_cast<int>(rows), static_cast<int>(rb), 1.0,
                        fx.panels_t.data() + b.offset + (p0 - b.c0) * rb, static_cast<int>(rb),
                        m1t.data(), static_cast<int>(rows), static_cast<double>(beta),
                        mt.data() + p0 * rows, static_cast<int>(rows));
          });
    }
    std::fill(mt.data() + covered * rows, mt.data() + kx * rows, 0.0);
    // T^T = G_x^-1 M^T on these columns (T = M G_x^-1, G symmetric).
    const double* tt = mt.data();
    std::vector<double> dense_out;
    if (fx.banded) {
      internal::BandCholeskySolve(fx.band.data(), kx, fx.kd, mt.data(), rows, 0, rows);
    } else {
      dense_out.resize(mt.size());
      cblas_dsymm(CblasRowMajor, CblasLeft, CblasUpper, static_cast<int>(kx),
                  static_cast<int>(rows), 1.0, fx.inverse.data(), static_cast<int>(kx), mt.data(),
                  static_cast<int>(rows), 0.0, dense_out.data(), static_cast<int>(rows));
      tt = dense_out.data();
    }
    // Rows [k0, k1) of T into the output, transposed back in 8 x 8 tiles.
    internal::Transpose(tt, kx, rows, rows, out + k0 * kx, kx);
  }
}

// Phase C of share p: W = G_y^-1 T on columns [j0, j1), in place.
void FitShareColumns(const BlockedFactor& fy, int parts, int p, RowMatrixXd* w) {
  const int64_t ky = fy.k, kx = w->cols();
  double* out = w->data();
  const std::pair<int64_t, int64_t> j_range = Part(kx, parts, p);
  const int64_t j0 = j_range.first, j1 = j_range.second;
  if (j1 <= j0) return;
  if (fy.banded) {
    internal::BandCholeskySolve(fy.band.data(), ky, fy.kd, out, kx, j0, j1);
    return;
  }
  RowMatrixXd t = Eigen::Map<const RowMatrixXd, 0, Eigen::OuterStride<>>(
      out + j0, ky, j1 - j0, Eigen::OuterStride<>(kx));
  cblas_dsymm(CblasRowMajor, CblasLeft, CblasUpper, static_cast<int>(ky),
              static_cast<int>(j1 - j0), 1.0, fy.inverse.data(), static_cast<int>(ky), t.data(),
              static_cast<int>(j1 - j0), 0.0, out + j0, static_cast<int>(kx));
}

// The number of shares FitChannel uses: `requested` when > 0, else up to 4 (the pool's
// thread count, parallel::DefaultThreads) once the image product is large enough to pay
// for a parallel region: K_y n_x >= 2^15.
int FitThreads(int requested, int64_t ky, int64_t nx) {
  if (requested > 0) return static_cast<int>(std::min<int64_t>(requested, std::max<int64_t>(ky, 1)));
  if (ky * nx < (int64_t{1} << 15)) return 1;
  return std::clamp(parallel::DefaultThreads(), 1, 4);
}

// W = G_y^-1 (Psi_y^T S Psi_x) G_x^-1 for one channel, in `threads` shares on the
// library pool.
RowMatrixXd FitChannel(const BlockedFactor& fy, const BlockedFactor& fx, const MatrixRef& s,
                       bool float32_products, int threads) {
  RowMatrixXd w(fy.k, fx.k);
  parallel::Run(threads, [&](int p) {
    if (float32_products) {
      FitShareRows<float>(fy, fx, s, threads, p, &w);
    } else {
      FitShareRows<double>(fy, fx, s, threads, p, &w);
    }
  });
  parallel::Run(threads, [&](int p) { FitShareColumns(fy, threads, p, &w); });
  return w;
}

}  // namespace

namespace {

// A^T = U diag(f(s)) V^T, f(s) = s / (s^2 + lambda) above rcond * s_max, else 0
// (closed_form.h, rank-revealing route). Inputs already validated, rcond > 0.
absl::StatusOr<RowMatrixXd> TruncatedPinvTransposed(const MatrixRef& psi, double lambda,
                                                    double rcond) {
  const Eigen::MatrixXd p = psi;
  Eigen::BDCSVD<Eigen::MatrixXd> svd(p, Eigen::ComputeThinU | Eigen::ComputeThinV);
  const Eigen::VectorXd& sv = svd.singularValues();  // descending
  if (sv.size() == 0 || !(sv[0] > 0.0)) {
    return absl::FailedPreconditionError(
        "the encoding factor is all zeros: no coordinate touches any basis function");
  }
  const double cut = rcond * sv[0];
  Eigen::VectorXd f = Eigen::VectorXd::Zero(sv.size());
  for (int64_t i = 0; i < sv.size(); ++i) {
    // s / (s^2 + lambda), as 1 / (s + lambda / s) from s = 1 on: s^2 would overflow past
    // ~1.3e154 and turn a finite 1 / s into 0.
    if (sv[i] > cut) f[i] = sv[i] >= 1.0 ? 1.0 / (sv[i] + lambda / sv[i]) : sv[i] / (sv[i] * sv[i] + lambda);
  }
  RowMatrixXd a_t = svd.matrixU() * f.asDiagonal() * svd.matrixV().transpose();
  return a_t;
}

}  // namespace

absl::StatusOr<double> ConditionNumber(const MatrixRef& psi) {
  if (absl::Status s = CheckMatrix(psi, "encoding factor Psi"); !s.ok()) return s;
  if (psi.cols() > psi.rows()) return std::numeric_limits<double>::infinity();
  const Eigen::MatrixXd p = psi;
  const Eigen::VectorXd sv = Eigen::BDCSVD<Eigen::MatrixXd>(p).singularValues();
  if (!(sv[sv.size() - 1] > 0.0)) return std::numeric_limits<double>::infinity();
  return sv[0] / sv[sv.size() - 1];
}

absl::StatusOr<RowMatrixXd> RidgePinvTransposed(const MatrixRef& psi, double lambda,
                                                double rcond) {
  absl::Status s = CheckMatrix(psi, "encoding factor Psi");
  if (!s.ok()) return s;
  if (!(s = CheckLambda(lambda)).ok()) return s;
  if (!(s = CheckRcond(rcond)).ok()) return s;
  if (rcond > 0.0) return TruncatedPinvTransposed(psi, lambda, rcond);
  const int n = static_cast<int>(psi.rows());
  const int k = static_cast<int>(psi.cols());
  const RowMatrixXd p = FlushTails(psi);
  RowMatrixXd g(k, k);
  cblas_dsyrk(CblasRowMajor, CblasUpper, CblasTrans, k, n, 1.0, p.data(), k, 0.0, g.data(), k);
  if (!(s = FactorGram(g, lambda, n)).ok()) return s;
  // A^T = Psi G^-1 with G^-1 formed from the Cholesky factor (dpotri): one BLAS-3 call
  // for the product, faster here than dpotrs with n right-hand sides.
  int info = 0;
  dpotri_("L", &k, g.data(), &k, &info);
  if (info != 0) return absl::InternalError(absl::StrCat("dpotri failed with info ", info));
  // Column-major lower = row-major upper triangle holds G^-1.
  RowMatrixXd a_t(n, k);
  cblas_dsymm(CblasRowMajor, CblasRight, CblasUpper, n, k, 1.0, g.data(), k, p.data(), k, 0.0,
              a_t.data(), k);
  return a_t;
}

namespace {

// Every input of FitSeparable2D was checked finite, so a non-finite W can only come from
// an intermediate that overflowed: with float32_image_products, Psi_y^T S in float32
// (|x| <= FLT_MAX ~3.4e38: an image or factor entry beyond it, or a sum of n_y products
// psi_y * s beyond it); otherwise float64's range (~1.8e308). Returned as an error naming
// the input instead of a W of inf and NaN. Checking W (K_y K_x values) is exact (no
// finite W is refused) and costs nothing next to the products; the maxima for the
// message are computed only on this failure path.
absl::Status CheckWeightsFinite(const MatrixRef& psi_y, const MatrixRef& psi_x,
                                const std::vector<RowMatrixXd>& channels,
                                const std::vector<RowMatrixXd>& weights, bool f32) {
  for (size_t c = 0; c < weights.size(); ++c) {
    const RowMatrixXd& w = weights[c];
    if (internal::AllFinite(w.data(), w.rows(), w.cols(), w.cols())) continue;
    const RowMatrixXd& s = channels[c];
    const double max_s = internal::MaxAbs(s.data(), s.rows(), s.cols(), s.outerStride());
    const double max_y =
        internal::MaxAbs(psi_y.data(), psi_y.rows(), psi_y.cols(), psi_y.outerStride());
    const double max_x =
        internal::MaxAbs(psi_x.data(), psi_x.rows(), psi_x.cols(), psi_x.outerStride());
    const std::string sizes =
        absl::StrCat("max |image| = ", max_s, ", max |Psi_y| = ", max_y, ", max |Psi_x| = ", max_x);
    if (f32) {
      const double limit = std::numeric_limits<float>::max();
      const char* culprit = max_s > limit   ? "image channel has values beyond"
                            : max_y > limit ? "Psi_y has values beyond"
                            : max_x > limit ? "Psi_x has values beyond"
                                            : "image channel times Psi_y overflows";
      return absl::InvalidArgumentError(absl::StrCat(
          culprit, " float32's range (|x| <= ", limit, ") in the float32 image products (",
          sizes, ", channel ", c, "; the products sum ", psi_y.rows(),
          " terms psi_y * image): scale the image down or set float32_image_products = 0"));
    }
    return absl::InvalidArgumentError(absl::StrCat(
        "image channel times the factors overflows float64's range (", sizes, ", channel ", c,
        "): the weights W would be non-finite; scale the image down"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<RowMatrixXd>> FitSeparable2D(const MatrixRef& psi_y,
                                                        const MatrixRef& psi_x,
                                                        const std::vector<RowMatrixXd>& channels,
                                                        double lambda) {
  SeparableFitOptions options;
  options.lambda = lambda;
  return FitSeparable2D(psi_y, psi_x, channels, options);
}

absl::StatusOr<std::vector<RowMatrixXd>> FitSeparable2D(const MatrixRef& psi_y,
                                                        const MatrixRef& psi_x,
                                                        const std::vector<RowMatrixXd>& channels,
                                                        const SeparableFitOptions& options) {
  const double lambda = options.lambda;
  if (channels.empty()) return absl::InvalidArgumentError("no channels to fit");
  if (absl::Status s = CheckRcond(options.rcond); !s.ok()) return s;
  if (options.num_threads < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_threads must be >= 0 (0: automatic); got ", options.num_threads));
  }
  for (size_t c = 0; c < channels.size(); ++c) {
    absl::Status s = CheckMatrix(channels[c], "image channel");
    if (!s.ok()) return s;
    if (channels[c].rows() != psi_y.rows() || channels[c].cols() != psi_x.rows()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "channel ", c, " is ", channels[c].rows(), " x ", channels[c].cols(),
          "; the factors encode ", psi_y.rows(), " rows (y) and ", psi_x.rows(),
          " columns (x)"));
    }
  }
  if (options.rcond > 0.0) {
    // Rank-revealing route: W = A_y S A_x^T from the truncated-SVD pseudo-inverses.
    absl::StatusOr<RowMatrixXd> ay_t = RidgePinvTransposed(psi_y, lambda, options.rcond);
    if (!ay_t.ok()) return ay_t.status();
    absl::StatusOr<RowMatrixXd> ax_t = SameMatrix(psi_y, psi_x)
                                           ? ay_t
                                           : RidgePinvTransposed(psi_x, lambda, options.rcond);
    if (!ax_t.ok()) return ax_t.status();
    std::vector<RowMatrixXd> weights;
    for (const RowMatrixXd& s : channels) {
      const int64_t ny = s.rows(), nx = s.cols(), ky = ay_t->cols(), kx = ax_t->cols();
      RowMatrixXd t(ky, nx);  // A_y S
      Gemm(true, false, ky, nx, ny, ay_t->data(), ky, s.data(), nx, t.data(), nx);
      RowMatrixXd w(ky, kx);  // (A_y S) A_x^T
      Gemm(false, false, ky, kx, nx, t.data(), nx, ax_t->data(), kx, w.data(), kx);
      weights.push_back(std::move(w));
    }
    if (absl::Status s = CheckWeightsFinite(psi_y, psi_x, channels, weights, false); !s.ok()) {
      return s;
    }
    return weights;
  }
  const bool f32 = options.float32_image_products;
  absl::StatusOr<BlockedFactor> fy = PrepareFactor(psi_y, lambda, f32);
  if (!fy.ok()) return fy.status();
  const bool shared = SameMatrix(psi_y, psi_x);
  absl::StatusOr<BlockedFactor> fx_own =
      shared ? absl::StatusOr<BlockedFactor>(BlockedFactor()) : PrepareFactor(psi_x, lambda, f32);
  if (!fx_own.ok()) return fx_own.status();
  const BlockedFactor& fx = shared ? *fy : *fx_own;
  std::vector<RowMatrixXd> weights;
  weights.reserve(channels.size());
  for (const RowMatrixXd& s : channels) {
    weights.push_back(
        FitChannel(*fy, fx, s, f32, FitThreads(options.num_threads, fy->k, s.cols())));
  }
  if (absl::Status s = CheckWeightsFinite(psi_y, psi_x, channels, weights, f32); !s.ok()) {
    return s;
  }
  return weights;
}

absl::StatusOr<RowMatrixXd> FitSeparable2D(const MatrixRef& psi_y, const MatrixRef& psi_x,
                                           const MatrixRef& s, double lambda) {
  absl::StatusOr<std::vector<RowMatrixXd>> w =
      FitSeparable2D(psi_y, psi_x, std::vector<RowMatrixXd>{RowMatrixXd(s)}, lambda);
  if (!w.ok()) return w.status();
  return std::move((*w)[0]);
}

absl::StatusOr<RowMatrixXd> PredictSeparable2D(const MatrixRef& psi_y, const MatrixRef& psi_x,
                                               const MatrixRef& w) {
  absl::Status s = CheckMatrix(psi_y, "Psi_y");
  if (s.ok()) s = CheckMatrix(psi_x, "Psi_x");
  if (s.ok()) s = CheckMatrix(w, "weights W");
  if (!s.ok()) return s;
  if (w.rows() != psi_y.cols() || w.cols() != psi_x.cols()) {
    return absl::InvalidArgumentError(absl::StrCat("W is ", w.rows(), " x ", w.cols(),
                                                   "; the factors need ", psi_y.cols(), " x ",
                                                   psi_x.cols()));
  }
  const int64_t ny = psi_y.rows(), nx = psi_x.rows(), ky = psi_y.cols(), kx = psi_x.cols();
  RowMatrixXd t(ny, kx);
  Gemm(false, false, ny, kx, ky, psi_y.data(), psi_y.outerStride(), w.data(), w.outerStride(),
       t.data(), kx);
  RowMatrixXd out(ny, nx);
  Gemm(false, true, ny, nx, kx, t.data(), kx, psi_x.data(), psi_x.outerStride(), out.data(), nx);
  return out;
}

namespace {

// OutOfRange unless every size ModeProducts hands to BLAS as an int (the merged modes
// n0 n1 and k1 k2, its products' row counts and leading dimensions) fits one. The
// tensors themselves stay within 2^31 elements (CheckTensor), but a prediction's output
// n0 n1 n2 is checked nowhere else: past INT_MAX the int would wrap, OpenBLAS would
// refuse the call and leave the zeroed output as the answer.
absl::Status CheckModeSizes(int64_t n0, int64_t n1, int64_t k1, int64_t k2, const char* what) {
  const __int128 limit = std::numeric_limits<int>::max();
  for (const __int128 v : {__int128{n0} * n1, __int128{k1} * k2}) {
    if (v > limit) {
      return absl::OutOfRangeError(absl::StrCat(
          what, ": the 3-D mode products need a merged size of ", static_cast<double>(v),
          " (", n0, " x ", n1, " or ", k1, " x ", k2, "), beyond BLAS's int (2^31 - 1)"));
    }
  }
  return absl::OkStatus();
}

// Y = X x_0 M_0 x_1 M_1 x_2 M_2 where each M_d is given transposed or not:
// `m[d]` is r_d x c_d and multiplies mode d of X (size c_d if !transposed[d]; the
// transposed use multiplies by m[d]^T, mode size r_d). Modes 2, 1, 0 in turn (scratch
// n0 n1 k2 + n0 k1 k2) or 0, 1, 2 (k0 n1 n2 + k0 k1 n2), whichever needs less scratch
// and fits BLAS's int: predicting one slice of a volume (n0 = 1) from K0 = 256 through
// modes 2, 1, 0 built K0 n1 n2 doubles (2 GiB for an 8 MiB result).
Tensor3 ModeProducts(const Tensor3& x, const std::array<const RowMatrixXd*, 3>& m,
                     bool transposed) {
  const int64_t n0 = x.dims[0], n1 = x.dims[1], n2 = x.dims[2];
  std::array<int64_t, 3> out_dims;
  for (int d = 0; d < 3; ++d) out_dims[d] = transposed ? m[d]->cols() : m[d]->rows();
  const int64_t k0 = out_dims[0], k1 = out_dims[1], k2 = out_dims[2];
  const __int128 scratch_210 = __int128{n0} * n1 * k2 + __int128{n0} * k1 * k2;
  const __int128 scratch_012 = __int128{k0} * n1 * n2 + __int128{k0} * k1 * n2;
  const __int128 limit = std::numeric_limits<int>::max();
  const bool fits_012 = __int128{n1} * n2 <= limit && __int128{k0} * k1 <= limit;
  if (fits_012 && scratch_012 < scratch_210) {
    // Mode 0: M_0 (k0 x n0) times (n0 x n1 n2).
    std::vector<double> y0(static_cast<size_t>(k0 * n1 * n2));
    Gemm(transposed, false, k0, n1 * n2, n0, m[0]->data(), m[0]->cols(), x.data.data(), n1 * n2,
         y0.data(), n1 * n2);
    // Mode 1: for each i0, M_1 (k1 x n1) times the (n1 x n2) slice.
    std::vector<double> y1(static_cast<size_t>(k0 * k1 * n2));
    for (int64_t i0 = 0; i0 < k0; ++i0) {
      Gemm(transposed, false, k1, n2, n1, m[1]->data(), m[1]->cols(), y0.data() + i0 * n1 * n2,
           n2, y1.data() + i0 * k1 * n2, n2);
    }
    // Mode 2: (k0 k1 x n2) times M_2^T (n2 x k2).
    Tensor3 y;
    y.dims = out_dims;
    y.data.resize(static_cast<size_t>(k0 * k1 * k2));
    Gemm(false, !transposed, k0 * k1, k2, n2, y1.data(), n2, m[2]->data(), m[2]->cols(),
         y.data.data(), k2);
    return y;
  }
  // Mode 2: (n0 n1 x n2) times M_2^T (n2 x k2), or times the stored (n2 x k2) when transposed.
  std::vector<double> x1(static_cast<size_t>(n0 * n1 * k2));
  Gemm(false, !transposed, n0 * n1, k2, n2, x.data.data(), n2, m[2]->data(), m[2]->cols(),
       x1.data(), k2);
  // Mode 1: for each i0, M_1 (k1 x n1) times the (n1 x k2) slice.
  std::vector<double> x2(static_cast<size_t>(n0 * k1 * k2));
  for (int64_t i0 = 0; i0 < n0; ++i0) {
    Gemm(transposed, false, k1, k2, n1, m[1]->data(), m[1]->cols(), x1.data() + i0 * n1 * k2, k2,
         x2.data() + i0 * k1 * k2, k2);
  }
  // Mode 0: M_0 (k0 x n0) times (n0 x k1 k2).
  Tensor3 y;
  y.dims = out_dims;
  y.data.resize(static_cast<size_t>(k0 * k1 * k2));
  Gemm(transposed, false, k0, k1 * k2, n0, m[0]->data(), m[0]->cols(), x2.data(), k1 * k2,
       y.data.data(), k1 * k2);
  return y;
}

}  // namespace

absl::StatusOr<Tensor3> FitSeparable3D(const std::array<RowMatrixXd, 3>& psi, const Tensor3& v,
                                       double lambda, double rcond) {
  absl::Status s = CheckTensor(v, "volume");
  if (!s.ok()) return s;
  std::array<RowMatrixXd, 3> a_t;
  for (int d = 0; d < 3; ++d) {
    if (psi[d].rows() != v.dims[d]) {
      return absl::InvalidArgumentError(absl::StrCat("Psi_", d, " encodes ", psi[d].rows(),
                                                     " coordinates; the volume has ", v.dims[d],
                                                     " along axis ", d));
    }
    absl::StatusOr<RowMatrixXd> a = RidgePinvTransposed(psi[d], lambda, rcond);
    if (!a.ok()) return a.status();
    a_t[d] = std::move(*a);
  }
  // Each A_d^T is n_d x K_d: multiply mode d by (A_d^T)^T.
  if (!(s = CheckModeSizes(v.dims[0], v.dims[1], a_t[1].cols(), a_t[2].cols(), "FitSeparable3D"))
           .ok()) {
    return s;
  }
  absl::StatusOr<Tensor3> w = ModeProducts(v, {&a_t[0], &a_t[1], &a_t[2]}, /*transposed=*/true);
  if (!w.ok()) return w.status();
  // Every input was checked finite: a non-finite W is an overflow of the products (as
  // FitSeparable2D's CheckWeightsFinite), refused rather than returned.
  if (!internal::AllFinite(w->data.data(), 1, static_cast<int64_t>(w->data.size()),
                           static_cast<int64_t>(w->data.size()))) {
    return absl::InvalidArgumentError(
        "the volume times the factors overflows float64's range: the weights W would be "
        "non-finite; scale the volume down");
  }
  return w;
}

absl::StatusOr<Tensor3> PredictSeparable3D(const std::array<RowMatrixXd, 3>& psi,
                                           const Tensor3& w) {
  absl::Status s = CheckTensor(w, "weights W");
  if (!s.ok()) return s;
  for (int d = 0; d < 3; ++d) {
    if (!(s = CheckMatrix(psi[d], "Psi")).ok()) return s;
    if (psi[d].cols() != w.dims[d]) {
      return absl::InvalidArgumentError(absl::StrCat("Psi_", d, " has ", psi[d].cols(),
                                                     " basis functions; W has ", w.dims[d],
                                                     " along axis ", d));
    }
  }
  if (!(s = CheckModeSizes(w.dims[0], w.dims[1], psi[1].rows(), psi[2].rows(),
                           "PredictSeparable3D"))
           .ok()) {
    return s;
  }
  const __int128 out = __int128{psi[0].rows()} * psi[1].rows() * psi[2].rows();
  if (out > (int64_t{1} << 31)) {
    return absl::OutOfRangeError(absl::StrCat(
        "PredictSeparable3D: the volume would hold ", static_cast<double>(out),
        " values (", psi[0].rows(), " x ", psi[1].rows(), " x ", psi[2].rows(),
        "); at most 2^31, as the volumes FitSeparable3D takes"));
  }
  return ModeProducts(w, {&psi[0], &psi[1], &psi[2]}, /*transposed=*/false);
}

namespace {

// mean((a - b)^2) as mantissa * 4^exponent: the differences scaled by 2^-exponent, the
// power of two of the largest (exact), so their squares stay in range. A difference
// that overflows gives an infinite mantissa; a == b gives 0.
struct ScaledMse {
  double mantissa;
  int exponent;
};
ScaledMse MseScaled(const MatrixRef& a, const MatrixRef& b) {
  const double dmax = (a - b).cwiseAbs().maxCoeff();
  if (dmax == 0.0 || !std::isfinite(dmax)) return {dmax == 0.0 ? 0.0 : dmax, 0};
  const int e = std::ilogb(dmax);
  double sum = 0.0;
  for (Eigen::Index i = 0; i < a.rows(); ++i) {
    for (Eigen::Index j = 0; j < a.cols(); ++j) {
      const double d = std::ldexp(a(i, j) - b(i, j), -e);
      sum += d * d;
    }
  }
  return {sum / static_cast<double>(a.size()), e};
}

}  // namespace

absl::StatusOr<double> MeanSquaredError(const MatrixRef& a, const MatrixRef& b) {
  if (a.rows() != b.rows() || a.cols() != b.cols() || a.size() == 0) {
    return absl::InvalidArgumentError(absl::StrCat("MSE needs two equal non-empty shapes; got ",
                                                   a.rows(), " x ", a.cols(), " and ", b.rows(),
                                                   " x ", b.cols()));
  }
  const ScaledMse m = MseScaled(a, b);
  return std::ldexp(m.mantissa, 2 * m.exponent);
}

absl::StatusOr<double> Psnr(const MatrixRef& a, const MatrixRef& b, double peak) {
  if (!std::isfinite(peak) || peak <= 0.0) {
    return absl::InvalidArgumentError(absl::StrCat("peak must be finite and > 0; got ", peak));
  }
  if (absl::Status s = MeanSquaredError(a, b).status(); !s.ok()) return s;
  // In logarithms, MSE = mantissa 4^exponent: neither peak^2 nor the squares of the
  // differences leave double's range on the way (peak = 1e200 gave inf, differences of
  // 1e-170 an MSE of 0 and +inf dB for a != b).
  const ScaledMse m = MseScaled(a, b);
  if (m.mantissa == 0.0) return std::numeric_limits<double>::infinity();  // a == b
  return 20.0 * std::log10(peak) -
         10.0 * (std::log10(m.mantissa) + 2.0 * m.exponent * std::log10(2.0));
}

}  // namespace inr
}  // namespace gpe
