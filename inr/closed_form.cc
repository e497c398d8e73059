#include "inr/closed_form.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

// LAPACK's Cholesky factorisation and solve (Fortran symbols in OpenBLAS).
extern "C" {
void dpotrf_(const char* uplo, const int* n, double* a, const int* lda, int* info);
void dpotri_(const char* uplo, const int* n, double* a, const int* lda, int* info);
// OpenBLAS's run-time kernel selection (DYNAMIC_ARCH builds); weak so that a BLAS without
// them still links.
char* openblas_get_corename(void) __attribute__((weak));
void gotoblas_dynamic_init(void) __attribute__((weak));
void gotoblas_dynamic_quit(void) __attribute__((weak));
}

namespace gpe {
namespace inr {
namespace {

// OpenBLAS 0.3.21 (Debian 12) picks its kernels from the CPUID model number; under
// hypervisors that report a generic model it falls back to "Prescott" (SSE3) even on
// AVX-512 machines, running several times below the machine's peak. When the user has
// not chosen (OPENBLAS_CORETYPE unset) and the fallback is in force on a CPU with AVX2
// and FMA, re-run the selection once with the Haswell kernels (AVX2 + FMA), which every
// such CPU executes correctly. Done before the first BLAS call of the solvers.
void EnsureBlasKernels() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (openblas_get_corename == nullptr || gotoblas_dynamic_init == nullptr ||
        gotoblas_dynamic_quit == nullptr || std::getenv("OPENBLAS_CORETYPE") != nullptr) {
      return;
    }
    const std::string core = openblas_get_corename();
    const bool generic = core == "Prescott" || core == "Core2" || core == "Nehalem" ||
                         core == "Sandybridge" || core == "Katmai";
    __builtin_cpu_init();
    if (!generic || !__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) return;
    setenv("OPENBLAS_CORETYPE", "Haswell", /*overwrite=*/0);
    gotoblas_dynamic_quit();
    gotoblas_dynamic_init();
    unsetenv("OPENBLAS_CORETYPE");
  });
}

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
  if (!m.allFinite()) {
    return absl::InvalidArgumentError(absl::StrCat(what, " has a non-finite entry"));
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
  EnsureBlasKernels();
  cblas_dgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, static_cast<int>(m), static_cast<int>(n),
              static_cast<int>(k), 1.0, a, static_cast<int>(lda), b, static_cast<int>(ldb), 0.0,
              c, static_cast<int>(ldc));
}

// The float32 form of ApplyPinvs.
RowMatrixXd ApplyPinvsFloat32(const RowMatrixXd& ay_t, const RowMatrixXd& ax_t,
                              const MatrixRef& s) {
  using RowMatrixXf = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const int ny = static_cast<int>(s.rows()), nx = static_cast<int>(s.cols());
  const int ky = static_cast<int>(ay_t.cols()), kx = static_cast<int>(ax_t.cols());
  const RowMatrixXf sf = s.cast<float>();
  const RowMatrixXf ax = ax_t.cast<float>();
  const RowMatrixXf ay = &ay_t == &ax_t ? ax : RowMatrixXf(ay_t.cast<float>());
  RowMatrixXf t(ny, kx);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, ny, kx, nx, 1.0f, sf.data(), nx,
              ax.data(), kx, 0.0f, t.data(), kx);
  RowMatrixXf w(ky, kx);
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, ky, kx, ny, 1.0f, ay.data(), ky, t.data(),
              kx, 0.0f, w.data(), kx);
  return w.cast<double>();
}

bool SameMatrix(const MatrixRef& a, const MatrixRef& b) {
  if (a.rows() != b.rows() || a.cols() != b.cols()) return false;
  if (a.data() == b.data() && a.outerStride() == b.outerStride()) return true;
  return a == b;
}

// W = A_y S A_x^T from the transposed pseudo-inverses (n_y x K_y, n_x x K_x).
RowMatrixXd ApplyPinvs(const RowMatrixXd& ay_t, const RowMatrixXd& ax_t, const MatrixRef& s) {
  const int64_t ny = s.rows(), nx = s.cols(), ky = ay_t.cols(), kx = ax_t.cols();
  RowMatrixXd t(ny, kx);  // S A_x^T
  Gemm(false, false, ny, kx, nx, s.data(), s.outerStride(), ax_t.data(), kx, t.data(), kx);
  RowMatrixXd w(ky, kx);  // A_y (S A_x^T)
  Gemm(true, false, ky, kx, ny, ay_t.data(), ky, t.data(), kx, w.data(), kx);
  return w;
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

absl::StatusOr<RowMatrixXd> RidgePinvTransposed(const MatrixRef& psi, double lambda) {
  absl::Status s = CheckMatrix(psi, "encoding factor Psi");
  if (!s.ok()) return s;
  if (!(s = CheckLambda(lambda)).ok()) return s;
  EnsureBlasKernels();
  const int n = static_cast<int>(psi.rows());
  const int k = static_cast<int>(psi.cols());
  // Entries below 1e-150 of the largest become exact zeros: products of two of them are
  // subnormal, which x86 cores process ~100x slower (a Gaussian basis has thousands of
  // such tails), and dropping them changes G by under 1e-300 relative.
  RowMatrixXd p = psi;
  const double floor = 1e-150 * p.cwiseAbs().maxCoeff();
  p = (p.array().abs() < floor).select(0.0, p);
  // G = Psi^T Psi + lambda I (upper triangle in row-major = lower in column-major).
  RowMatrixXd g(k, k);
  cblas_dsyrk(CblasRowMajor, CblasUpper, CblasTrans, k, n, 1.0, p.data(), k, 0.0, g.data(), k);
  double max_diag = 0.0;
  for (int i = 0; i < k; ++i) {
    g(i, i) += lambda;
    max_diag = std::max(max_diag, g(i, i));
  }
  if (max_diag == 0.0) {
    return absl::FailedPreconditionError(
        "the encoding factor is all zeros: no coordinate touches any basis function");
  }
  int info = 0;
  dpotrf_("L", &k, g.data(), &k, &info);
  // Cholesky succeeds on matrices whose condition number is near 1/eps yet yields
  // meaningless solutions there; require diag(L)^2 above 1e3 eps of the largest pivot,
  // i.e. cond(G) below ~4e12 (a relative residual loss of at most ~1e-3 of the data).
  double min_pivot = std::numeric_limits<double>::infinity();
  if (info == 0) {
    for (int i = 0; i < k; ++i) min_pivot = std::min(min_pivot, g(i, i) * g(i, i));
  }
  if (info != 0 || min_pivot < 1e3 * std::numeric_limits<double>::epsilon() * max_diag) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the encoding factor (", n, " coordinates x ", k,
        " basis functions) is rank deficient or too ill-conditioned for lambda = ", lambda,
        ": use a ridge lambda > 0, fewer shifts, or a wider basis"));
  }
  // A^T = Psi G^-1 with G^-1 formed from the Cholesky factor (dpotri): the product is
  // one BLAS-3 call, several times faster here than dpotrs with n right-hand sides, and
  // as accurate at the condition numbers admitted above.
  dpotri_("L", &k, g.data(), &k, &info);
  if (info != 0) return absl::InternalError(absl::StrCat("dpotri failed with info ", info));
  // Column-major lower = row-major upper triangle holds G^-1.
  RowMatrixXd a_t(n, k);
  cblas_dsymm(CblasRowMajor, CblasRight, CblasUpper, n, k, 1.0, g.data(), k, p.data(), k, 0.0,
              a_t.data(), k);
  return a_t;
}

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
  absl::StatusOr<RowMatrixXd> ay_t = RidgePinvTransposed(psi_y, lambda);
  if (!ay_t.ok()) return ay_t.status();
  const bool shared = SameMatrix(psi_y, psi_x);
  absl::StatusOr<RowMatrixXd> ax_t = shared ? ay_t : RidgePinvTransposed(psi_x, lambda);
  if (!ax_t.ok()) return ax_t.status();
  const RowMatrixXd& ax = shared ? *ay_t : *ax_t;
  std::vector<RowMatrixXd> weights;
  weights.reserve(channels.size());
  for (const RowMatrixXd& s : channels) {
    weights.push_back(options.float32_image_products ? ApplyPinvsFloat32(*ay_t, ax, s)
                                                     : ApplyPinvs(*ay_t, ax, s));
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

// Y = X x_0 M_0 x_1 M_1 x_2 M_2 where each M_d is given transposed or not:
// `m[d]` is r_d x c_d and multiplies mode d of X (size c_d if !transposed[d]; the
// transposed use multiplies by m[d]^T, mode size r_d).
Tensor3 ModeProducts(const Tensor3& x, const std::array<const RowMatrixXd*, 3>& m,
                     bool transposed) {
  const int64_t n0 = x.dims[0], n1 = x.dims[1], n2 = x.dims[2];
  std::array<int64_t, 3> out_dims;
  for (int d = 0; d < 3; ++d) out_dims[d] = transposed ? m[d]->cols() : m[d]->rows();
  const int64_t k0 = out_dims[0], k1 = out_dims[1], k2 = out_dims[2];
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
                                       double lambda) {
  absl::Status s = CheckTensor(v, "volume");
  if (!s.ok()) return s;
  std::array<RowMatrixXd, 3> a_t;
  for (int d = 0; d < 3; ++d) {
    if (psi[d].rows() != v.dims[d]) {
      return absl::InvalidArgumentError(absl::StrCat("Psi_", d, " encodes ", psi[d].rows(),
                                                     " coordinates; the volume has ", v.dims[d],
                                                     " along axis ", d));
    }
    absl::StatusOr<RowMatrixXd> a = RidgePinvTransposed(psi[d], lambda);
    if (!a.ok()) return a.status();
    a_t[d] = std::move(*a);
  }
  // Each A_d^T is n_d x K_d: multiply mode d by (A_d^T)^T.
  return ModeProducts(v, {&a_t[0], &a_t[1], &a_t[2]}, /*transposed=*/true);
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
  return ModeProducts(w, {&psi[0], &psi[1], &psi[2]}, /*transposed=*/false);
}

absl::StatusOr<double> MeanSquaredError(const MatrixRef& a, const MatrixRef& b) {
  if (a.rows() != b.rows() || a.cols() != b.cols() || a.size() == 0) {
    return absl::InvalidArgumentError(absl::StrCat("MSE needs two equal non-empty shapes; got ",
                                                   a.rows(), " x ", a.cols(), " and ", b.rows(),
                                                   " x ", b.cols()));
  }
  return (a - b).squaredNorm() / static_cast<double>(a.size());
}

absl::StatusOr<double> Psnr(const MatrixRef& a, const MatrixRef& b, double peak) {
  if (!std::isfinite(peak) || peak <= 0.0) {
    return absl::InvalidArgumentError(absl::StrCat("peak must be finite and > 0; got ", peak));
  }
  absl::StatusOr<double> mse = MeanSquaredError(a, b);
  if (!mse.ok()) return mse.status();
  if (*mse == 0.0) return std::numeric_limits<double>::infinity();
  return 10.0 * std::log10(peak * peak / *mse);
}

}  // namespace inr
}  // namespace gpe
