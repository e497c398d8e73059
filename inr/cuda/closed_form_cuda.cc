#include "inr/cuda/closed_form_cuda.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cusolverDn.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "inr/cuda/closed_form_cuda_kernels.h"
#include "parallel/cuda/device_scope.h"

namespace gpe::inr::cuda {
namespace {

using ::gpe::parallel::cuda::DeviceScope;

#define GPE_CUDA_RETURN_IF_ERROR(expr)          \
  do {                                          \
    if (absl::Status _st = (expr); !_st.ok()) { \
      return _st;                               \
    }                                           \
  } while (0)

// cuBLAS and cuSOLVER take int sizes; the image check and the failure-path maxima take
// int element counts (cublasIdamax).
constexpr int64_t kMaxDim = INT_MAX;

// ---- Errors -----------------------------------------------------------------------------

absl::Status CudaStatus(cudaError_t e, const char* what) {
  return ::gpe::parallel::cuda::RuntimeStatus(e, what);
}

absl::Status CublasStatus(cublasStatus_t s, const char* what) {
  if (s == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  const std::string msg = absl::StrCat("cuBLAS: ", what, " failed: ", cublasGetStatusName(s), " (",
                                       cublasGetStatusString(s), ")");
  switch (s) {
    case CUBLAS_STATUS_ALLOC_FAILED:
      return absl::ResourceExhaustedError(msg);
    case CUBLAS_STATUS_NOT_INITIALIZED:
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return absl::FailedPreconditionError(msg);
    default:
      return absl::InternalError(msg);
  }
}

const char* CusolverName(cusolverStatus_t s) {
  switch (s) {
    case CUSOLVER_STATUS_SUCCESS:
      return "CUSOLVER_STATUS_SUCCESS";
    case CUSOLVER_STATUS_NOT_INITIALIZED:
      return "CUSOLVER_STATUS_NOT_INITIALIZED";
    case CUSOLVER_STATUS_ALLOC_FAILED:
      return "CUSOLVER_STATUS_ALLOC_FAILED";
    case CUSOLVER_STATUS_INVALID_VALUE:
      return "CUSOLVER_STATUS_INVALID_VALUE";
    case CUSOLVER_STATUS_ARCH_MISMATCH:
      return "CUSOLVER_STATUS_ARCH_MISMATCH";
    case CUSOLVER_STATUS_MAPPING_ERROR:
      return "CUSOLVER_STATUS_MAPPING_ERROR";
    case CUSOLVER_STATUS_EXECUTION_FAILED:
      return "CUSOLVER_STATUS_EXECUTION_FAILED";
    case CUSOLVER_STATUS_INTERNAL_ERROR:
      return "CUSOLVER_STATUS_INTERNAL_ERROR";
    case CUSOLVER_STATUS_MATRIX_TYPE_NOT_SUPPORTED:
      return "CUSOLVER_STATUS_MATRIX_TYPE_NOT_SUPPORTED";
    case CUSOLVER_STATUS_NOT_SUPPORTED:
      return "CUSOLVER_STATUS_NOT_SUPPORTED";
    case CUSOLVER_STATUS_ZERO_PIVOT:
      return "CUSOLVER_STATUS_ZERO_PIVOT";
    case CUSOLVER_STATUS_INVALID_LICENSE:
      return "CUSOLVER_STATUS_INVALID_LICENSE";
    case CUSOLVER_STATUS_INVALID_WORKSPACE:
      return "CUSOLVER_STATUS_INVALID_WORKSPACE";
    default:
      return "unknown cusolverStatus_t";
  }
}

absl::Status CusolverStatus(cusolverStatus_t s, const char* what) {
  if (s == CUSOLVER_STATUS_SUCCESS) return absl::OkStatus();
  const std::string msg = absl::StrCat("cuSOLVER: ", what, " failed: ", CusolverName(s), " (",
                                       static_cast<int>(s), ")");
  switch (s) {
    case CUSOLVER_STATUS_ALLOC_FAILED:
      return absl::ResourceExhaustedError(msg);
    case CUSOLVER_STATUS_NOT_INITIALIZED:
    case CUSOLVER_STATUS_ARCH_MISMATCH:
      return absl::FailedPreconditionError(msg);
    default:
      return absl::InternalError(msg);
  }
}

absl::Status KernelStatus(const std::string& error, const char* what) {
  if (error.empty()) return absl::OkStatus();
  return absl::InternalError(absl::StrCat("CUDA: kernel ", what, " failed: ", error));
}

// ---- Validation (the CPU path's rules and messages, closed_form.cc) ----------------------

absl::Status CheckLambda(double lambda) {
  if (!std::isfinite(lambda) || lambda < 0.0) {
    return absl::InvalidArgumentError(
        absl::StrCat("lambda (ridge) must be finite and >= 0; got ", lambda));
  }
  return absl::OkStatus();
}

absl::Status CheckSize(int64_t rows, int64_t cols, const char* what) {
  if (rows < 1 || cols < 1) {
    return absl::InvalidArgumentError(absl::StrCat(what, " is empty (", rows, " x ", cols, ")"));
  }
  if (rows > kMaxDim || cols > kMaxDim || rows > kMaxDim / cols) {
    return absl::OutOfRangeError(absl::StrCat(what, " is too large (", rows, " x ", cols,
                                              "): the GPU path takes at most INT_MAX entries"));
  }
  return absl::OkStatus();
}

absl::Status CheckHostMatrix(const MatrixRef& m, const char* what) {
  GPE_CUDA_RETURN_IF_ERROR(CheckSize(m.rows(), m.cols(), what));
  if (!m.allFinite())
    return absl::InvalidArgumentError(absl::StrCat(what, " has a non-finite entry"));
  return absl::OkStatus();
}

absl::Status CheckChannels(const MatrixRef& psi_y, const MatrixRef& psi_x,
                           const std::vector<RowMatrixXd>& channels) {
  if (channels.empty()) return absl::InvalidArgumentError("no channels to fit");
  for (size_t c = 0; c < channels.size(); ++c) {
    GPE_CUDA_RETURN_IF_ERROR(CheckSize(channels[c].rows(), channels[c].cols(), "image channel"));
    if (channels[c].rows() != psi_y.rows() || channels[c].cols() != psi_x.rows()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "channel ", c, " is ", channels[c].rows(), " x ", channels[c].cols(),
          "; the factors encode ", psi_y.rows(), " rows (y) and ", psi_x.rows(), " columns (x)"));
    }
  }
  return absl::OkStatus();
}

// ---- Device plumbing --------------------------------------------------------------------

// A device allocation that grows on demand (contents are lost when it grows).
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { Release(); }
  absl::Status Reserve(size_t bytes, const char* what) {
    if (bytes <= bytes_) return absl::OkStatus();
    Release();
    void* p = nullptr;
    const cudaError_t e = cudaMalloc(&p, bytes);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();  // an allocation failure is not sticky; clear it
      return absl::ResourceExhaustedError(absl::StrCat("CUDA: cudaMalloc of ", bytes, " bytes for ",
                                                       what, " failed: ", cudaGetErrorName(e), " (",
                                                       cudaGetErrorString(e), ")"));
    }
    p_ = p;
    bytes_ = bytes;
    return absl::OkStatus();
  }
  void Release() {
    if (p_ != nullptr) (void)cudaFree(p_);
    p_ = nullptr;
    bytes_ = 0;
  }
  template <class T>
  T* as() const {
    return static_cast<T*>(p_);
  }
  size_t bytes() const { return bytes_; }

 private:
  void* p_ = nullptr;
  size_t bytes_ = 0;
};

// The small values one sync reads back: [0] cuSOLVER's info, [1] the input's non-finite
// flag, [2] the output's.
constexpr int kInfo = 0, kFlagIn = 1, kFlagOut = 2, kNumInts = 3;

}  // namespace

int CudaDeviceCount(std::string* why) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    if (why != nullptr) *why = absl::StrCat(cudaGetErrorName(e), ": ", cudaGetErrorString(e));
    return 0;
  }
  if (count == 0 && why != nullptr) *why = "cudaGetDeviceCount returned 0 devices";
  return count;
}

struct SeparableFitterCuda::Impl {
  SeparableFitCudaOptions options;
  int device = 0;
  cudaStream_t stream = nullptr;
  bool own_stream = false;
  cublasHandle_t blas = nullptr;
  cusolverDnHandle_t solver = nullptr;

  int64_t ny = 0, nx = 0, ky = 0, kx = 0;
  bool ready = false;  // factors set and factored
  Contraction order = Contraction::kYFirst;

  DeviceBuffer psi_y, psi_x;      // double, n x K row-major (column-major Psi^T)
  DeviceBuffer psi_y_f, psi_x_f;  // float copies (float32_image_products)
  DeviceBuffer l_y, l_x;          // double K x K column-major; lower triangle: L
  DeviceBuffer diag;              // double, 2 max(K): diag(G) and diag(L)
  DeviceBuffer ints;              // int[kNumInts]
  DeviceBuffer work;              // potrf workspace
  DeviceBuffer t, t_f;            // the first GEMM's result (double; float)
  DeviceBuffer s_f;               // the demoted image (float32_image_products)
  DeviceBuffer s_host, w_host;    // the host API's image and W

  ~Impl() {
    if (solver != nullptr) (void)cusolverDnDestroy(solver);
    if (blas != nullptr) (void)cublasDestroy(blas);
    if (own_stream && stream != nullptr) (void)cudaStreamDestroy(stream);
    // The DeviceBuffers free themselves after this body (the owner made the device
    // current).
  }

  absl::Status Sync(const char* after) {
    const cudaError_t e = cudaStreamSynchronize(stream);
    if (e != cudaSuccess) {
      return CudaStatus(e, absl::StrCat("cudaStreamSynchronize after ", after).c_str());
    }
    return absl::OkStatus();
  }

  // max |x| over n contiguous doubles (n <= INT_MAX), for error messages only.
  absl::StatusOr<double> MaxAbs(const double* x, int64_t n) {
    int index = 0;  // 1-based
    GPE_CUDA_RETURN_IF_ERROR(
        CublasStatus(cublasIdamax(blas, static_cast<int>(n), x, 1, &index), "cublasIdamax"));
    if (index < 1) return 0.0;
    double v = 0.0;
    GPE_CUDA_RETURN_IF_ERROR(CudaStatus(
        cudaMemcpyAsync(&v, x + (index - 1), sizeof(double), cudaMemcpyDeviceToHost, stream),
        "cudaMemcpyAsync (max |x|)"));
    GPE_CUDA_RETURN_IF_ERROR(Sync("max |x|"));
    return std::abs(v);
  }

  absl::Status Factor(const double* psi, int64_t n, int64_t k, double* l, const char* name);
  absl::Status SetFactorsOnDevice(int64_t n_y, int64_t k_y, int64_t n_x, int64_t k_x);
  absl::Status Fit(const double* s, double* w);
  absl::Status OverflowError(const double* s);
};

// G = Psi^T Psi + lambda I and its Cholesky factor, for one axis; the CPU acceptance rule.
absl::Status SeparableFitterCuda::Impl::Factor(const double* psi, int64_t n, int64_t k, double* l,
                                               const char* name) {
  const int ik = static_cast<int>(k);
  int* ints_d = ints.as<int>();
  double* diag_g = diag.as<double>();
  double* diag_l = diag_g + k;
  GPE_CUDA_RETURN_IF_ERROR(
      CudaStatus(cudaMemsetAsync(ints_d, 0, kNumInts * sizeof(int), stream), "cudaMemsetAsync"));
  GPE_CUDA_RETURN_IF_ERROR(
      KernelStatus(LaunchFlagNonFinite(psi, n * k, ints_d + kFlagIn, stream), "FlagNonFinite"));
  // psi's bytes are the column-major K x n matrix Psi^T (ld K): G = (Psi^T)(Psi^T)^T,
  // i.e. syrk with op N. Only G's lower triangle is written and read; the upper one is
  // zeroed first so that no stale bytes (NaN patterns) sit beside it.
  GPE_CUDA_RETURN_IF_ERROR(
      CudaStatus(cudaMemsetAsync(l, 0, static_cast<size_t>(k * k) * sizeof(double), stream),
                 "cudaMemsetAsync (G)"));
  const double one = 1.0, zero = 0.0;
  GPE_CUDA_RETURN_IF_ERROR(
      CublasStatus(cublasDsyrk(blas, CUBLAS_FILL_MODE_LOWER, CUBLAS_OP_N, ik, static_cast<int>(n),
                               &one, psi, ik, &zero, l, ik),
                   "cublasDsyrk (G = Psi^T Psi)"));
  if (options.lambda != 0.0) {
    GPE_CUDA_RETURN_IF_ERROR(KernelStatus(LaunchAddToDiagonal(l, k, k, options.lambda, stream),
                                          "AddToDiagonal (G + lambda I)"));
  }
  GPE_CUDA_RETURN_IF_ERROR(
      CublasStatus(cublasDcopy(blas, ik, l, ik + 1, diag_g, 1), "cublasDcopy (diag G)"));
  int lwork = 0;
  GPE_CUDA_RETURN_IF_ERROR(
      CusolverStatus(cusolverDnDpotrf_bufferSize(solver, CUBLAS_FILL_MODE_LOWER, ik, l, ik, &lwork),
                     "cusolverDnDpotrf_bufferSize"));
  GPE_CUDA_RETURN_IF_ERROR(work.Reserve(static_cast<size_t>(std::max(lwork, 1)) * sizeof(double),
                                        "the Cholesky workspace"));
  GPE_CUDA_RETURN_IF_ERROR(
      CusolverStatus(cusolverDnDpotrf(solver, CUBLAS_FILL_MODE_LOWER, ik, l, ik, work.as<double>(),
                                      lwork, ints_d + kInfo),
                     "cusolverDnDpotrf (Cholesky of G)"));
  GPE_CUDA_RETURN_IF_ERROR(
      CublasStatus(cublasDcopy(blas, ik, l, ik + 1, diag_l, 1), "cublasDcopy (diag L)"));
  int host_ints[kNumInts] = {0, 0, 0};
  std::vector<double> host_diag(static_cast<size_t>(2 * k));
  GPE_CUDA_RETURN_IF_ERROR(CudaStatus(
      cudaMemcpyAsync(host_ints, ints_d, sizeof(host_ints), cudaMemcpyDeviceToHost, stream),
      "cudaMemcpyAsync (potrf info)"));
  GPE_CUDA_RETURN_IF_ERROR(
      CudaStatus(cudaMemcpyAsync(host_diag.data(), diag_g, host_diag.size() * sizeof(double),
                                 cudaMemcpyDeviceToHost, stream),
                 "cudaMemcpyAsync (Cholesky pivots)"));
  GPE_CUDA_RETURN_IF_ERROR(Sync("the Cholesky factorisation"));
  if (host_ints[kFlagIn] != 0) {
    return absl::InvalidArgumentError(absl::StrCat(name, " has a non-finite entry"));
  }
  const int info = host_ints[kInfo];
  if (info < 0) {
    return absl::InternalError(
        absl::StrCat("cuSOLVER: cusolverDnDpotrf rejected argument ", -info, " (K = ", k, ")"));
  }
  double max_diag = 0.0;
  for (int64_t i = 0; i < k; ++i) max_diag = std::max(max_diag, host_diag[i]);
  if (max_diag == 0.0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the encoding factor ", name, " is all zeros: no coordinate touches any basis function"));
  }
  // The CPU rule (closed_form.cc, FactorGram): diag(L)^2 above 1e3 eps of the largest
  // diagonal entry of G, i.e. cond(G) below ~4e12.
  double min_pivot = std::numeric_limits<double>::infinity();
  if (info == 0) {
    for (int64_t i = 0; i < k; ++i)
      min_pivot = std::min(min_pivot, host_diag[k + i] * host_diag[k + i]);
  }
  if (info != 0 || !(min_pivot >= 1e3 * std::numeric_limits<double>::epsilon() * max_diag)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the encoding factor ", name, " (", n, " coordinates x ", k,
        " basis functions) is rank deficient or too ill-conditioned for lambda = ", options.lambda,
        ": use a ridge lambda > 0, fewer shifts, or a wider basis (or the CPU path's rcond > 0)"));
  }
  return absl::OkStatus();
}

// psi_y and psi_x already hold the factors (device); sizes checked.
absl::Status SeparableFitterCuda::Impl::SetFactorsOnDevice(int64_t n_y, int64_t k_y, int64_t n_x,
                                                           int64_t k_x) {
  ready = false;
  const size_t kmax = static_cast<size_t>(std::max(k_y, k_x));
  GPE_CUDA_RETURN_IF_ERROR(l_y.Reserve(static_cast<size_t>(k_y * k_y) * sizeof(double), "G_y"));
  GPE_CUDA_RETURN_IF_ERROR(l_x.Reserve(static_cast<size_t>(k_x * k_x) * sizeof(double), "G_x"));
  GPE_CUDA_RETURN_IF_ERROR(diag.Reserve(2 * kmax * sizeof(double), "the Cholesky pivots"));
  GPE_CUDA_RETURN_IF_ERROR(ints.Reserve(kNumInts * sizeof(int), "status flags"));
  GPE_CUDA_RETURN_IF_ERROR(Factor(psi_y.as<double>(), n_y, k_y, l_y.as<double>(), "Psi_y"));
  GPE_CUDA_RETURN_IF_ERROR(Factor(psi_x.as<double>(), n_x, k_x, l_x.as<double>(), "Psi_x"));
  // GEMM order: y first costs 2 n_x K_y (n_y + K_x), x first 2 n_y K_x (n_x + K_y).
  order = options.contraction;
  if (order == Contraction::kAuto) {
    const double y_first = static_cast<double>(n_x) * k_y * (n_y + k_x);
    const double x_first = static_cast<double>(n_y) * k_x * (n_x + k_y);
    order = x_first < y_first ? Contraction::kXFirst : Contraction::kYFirst;
  }
  const int64_t t_size = order == Contraction::kYFirst ? n_x * k_y : n_y * k_x;
  GPE_CUDA_RETURN_IF_ERROR(
      t.Reserve(static_cast<size_t>(t_size) * sizeof(double), "the first product"));
  if (options.float32_image_products) {
    GPE_CUDA_RETURN_IF_ERROR(
        t_f.Reserve(static_cast<size_t>(t_size) * sizeof(float), "the first product (float32)"));
    GPE_CUDA_RETURN_IF_ERROR(
        s_f.Reserve(static_cast<size_t>(n_y * n_x) * sizeof(float), "the image (float32)"));
    // Only the factor of the first (image-sized) product is demoted.
    if (order == Contraction::kYFirst) {
      GPE_CUDA_RETURN_IF_ERROR(
          psi_y_f.Reserve(static_cast<size_t>(n_y * k_y) * sizeof(float), "Psi_y (float32)"));
      GPE_CUDA_RETURN_IF_ERROR(KernelStatus(
          LaunchDemoteToFloat(psi_y.as<double>(), psi_y_f.as<float>(), n_y * k_y, stream),
          "DemoteToFloat (Psi_y)"));
    } else {
      GPE_CUDA_RETURN_IF_ERROR(
          psi_x_f.Reserve(static_cast<size_t>(n_x * k_x) * sizeof(float), "Psi_x (float32)"));
      GPE_CUDA_RETURN_IF_ERROR(KernelStatus(
          LaunchDemoteToFloat(psi_x.as<double>(), psi_x_f.as<float>(), n_x * k_x, stream),
          "DemoteToFloat (Psi_x)"));
    }
    GPE_CUDA_RETURN_IF_ERROR(Sync("demoting the factors"));
  }
  ny = n_y;
  nx = n_x;
  ky = k_y;
  kx = k_x;
  ready = true;
  return absl::OkStatus();
}

// The failure path of a non-finite W from finite inputs: the CPU's messages
// (closed_form.cc, CheckWeightsFinite).
absl::Status SeparableFitterCuda::Impl::OverflowError(const double* s) {
  absl::StatusOr<double> max_s = MaxAbs(s, ny * nx);
  if (!max_s.ok()) return max_s.status();
  absl::StatusOr<double> max_y = MaxAbs(psi_y.as<double>(), ny * ky);
  if (!max_y.ok()) return max_y.status();
  absl::StatusOr<double> max_x = MaxAbs(psi_x.as<double>(), nx * kx);
  if (!max_x.ok()) return max_x.status();
  const std::string sizes = absl::StrCat("max |image| = ", *max_s, ", max |Psi_y| = ", *max_y,
                                         ", max |Psi_x| = ", *max_x);
  if (options.float32_image_products) {
    const double limit = std::numeric_limits<float>::max();
    // Only the image and the factor of the first product are float32.
    const bool y_first = order == Contraction::kYFirst;
    const double max_f = y_first ? *max_y : *max_x;
    const char* culprit = *max_s > limit ? "image channel has values beyond"
                          : max_f > limit
                              ? (y_first ? "Psi_y has values beyond" : "Psi_x has values beyond")
                              : "image channel times the factors overflows";
    const int64_t terms = y_first ? ny : nx;
    return absl::InvalidArgumentError(absl::StrCat(
        culprit, " float32's range (|x| <= ", limit, ") in the float32 image products (", sizes,
        "; the products sum ", terms,
        " terms psi * image): scale the image down or set float32_image_products = false"));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("image channel times the factors overflows float64's range (", sizes,
                   "): the weights W would be non-finite; scale the image down"));
}

absl::Status SeparableFitterCuda::Impl::Fit(const double* s, double* w) {
  if (!ready) {
    return absl::FailedPreconditionError(
        "no factors: call SetFactors or SetFactorsDevice (successfully) before fitting");
  }
  if (s == nullptr || w == nullptr) {
    return absl::InvalidArgumentError("FitDevice needs device pointers to the image and to W");
  }
  const int iny = static_cast<int>(ny), inx = static_cast<int>(nx);
  const int iky = static_cast<int>(ky), ikx = static_cast<int>(kx);
  const bool f32 = options.float32_image_products;
  int* ints_d = ints.as<int>();
  const double one = 1.0, zero = 0.0;
  const float onef = 1.0f, zerof = 0.0f;
  GPE_CUDA_RETURN_IF_ERROR(
      CudaStatus(cudaMemsetAsync(ints_d, 0, kNumInts * sizeof(int), stream), "cudaMemsetAsync"));
  GPE_CUDA_RETURN_IF_ERROR(KernelStatus(LaunchFlagNonFinite(s, ny * nx, ints_d + kFlagIn, stream),
                                        "FlagNonFinite (image)"));
  if (f32) {
    GPE_CUDA_RETURN_IF_ERROR(KernelStatus(LaunchDemoteToFloat(s, s_f.as<float>(), ny * nx, stream),
                                          "DemoteToFloat (image)"));
  }
  // Column-major views (see the header): Y = Psi_y^T (K_y x n_y, ld K_y),
  // X = Psi_x^T (K_x x n_x, ld K_x), S^T (n_x x n_y, ld n_x). The result w is the
  // column-major K_x x K_y matrix M^T = X S^T Y^T, then W^T in place.
  double* td = t.as<double>();
  if (order == Contraction::kYFirst) {
    // T = S^T Y^T = (Psi_y^T S)^T: n_x x K_y, ld n_x.
    if (f32) {
      GPE_CUDA_RETURN_IF_ERROR(CublasStatus(
          cublasSgemm(blas, CUBLAS_OP_N, CUBLAS_OP_T, inx, iky, iny, &onef, s_f.as<float>(), inx,
                      psi_y_f.as<float>(), iky, &zerof, t_f.as<float>(), inx),
          "cublasSgemm (Psi_y^T S, float32)"));
      GPE_CUDA_RETURN_IF_ERROR(
          KernelStatus(LaunchWidenToDouble(t_f.as<float>(), td, nx * ky, stream), "WidenToDouble"));
    } else {
      GPE_CUDA_RETURN_IF_ERROR(
          CublasStatus(cublasDgemm(blas, CUBLAS_OP_N, CUBLAS_OP_T, inx, iky, iny, &one, s, inx,
                                   psi_y.as<double>(), iky, &zero, td, inx),
                       "cublasDgemm (Psi_y^T S)"));
    }
    // M^T = X T: K_x x K_y, ld K_x.
    GPE_CUDA_RETURN_IF_ERROR(
        CublasStatus(cublasDgemm(blas, CUBLAS_OP_N, CUBLAS_OP_N, ikx, iky, inx, &one,
                                 psi_x.as<double>(), ikx, td, inx, &zero, w, ikx),
                     "cublasDgemm ((Psi_y^T S) Psi_x)"));
  } else {
    // T = X S^T = (S Psi_x)^T: K_x x n_y, ld K_x.
    if (f32) {
      GPE_CUDA_RETURN_IF_ERROR(CublasStatus(
          cublasSgemm(blas, CUBLAS_OP_N, CUBLAS_OP_N, ikx, iny, inx, &onef, psi_x_f.as<float>(),
                      ikx, s_f.as<float>(), inx, &zerof, t_f.as<float>(), ikx),
          "cublasSgemm (S Psi_x, float32)"));
      GPE_CUDA_RETURN_IF_ERROR(
          KernelStatus(LaunchWidenToDouble(t_f.as<float>(), td, kx * ny, stream), "WidenToDouble"));
    } else {
      GPE_CUDA_RETURN_IF_ERROR(
          CublasStatus(cublasDgemm(blas, CUBLAS_OP_N, CUBLAS_OP_N, ikx, iny, inx, &one,
                                   psi_x.as<double>(), ikx, s, inx, &zero, td, ikx),
                       "cublasDgemm (S Psi_x)"));
    }
    // M^T = T Y^T: K_x x K_y, ld K_x.
    GPE_CUDA_RETURN_IF_ERROR(
        CublasStatus(cublasDgemm(blas, CUBLAS_OP_N, CUBLAS_OP_T, ikx, iky, iny, &one, td, ikx,
                                 psi_y.as<double>(), iky, &zero, w, ikx),
                     "cublasDgemm (Psi_y^T (S Psi_x))"));
  }
  // W^T = G_x^-1 M^T G_y^-1 (G symmetric): potrs with L_x from the left, then from the
  // right X L_y^T = B and Y L_y = X, so Y = B L_y^-T L_y^-1 = B G_y^-1.
  GPE_CUDA_RETURN_IF_ERROR(
      CusolverStatus(cusolverDnDpotrs(solver, CUBLAS_FILL_MODE_LOWER, ikx, iky, l_x.as<double>(),
                                      ikx, w, ikx, ints_d + kInfo),
                     "cusolverDnDpotrs (G_x^-1 M^T)"));
  GPE_CUDA_RETURN_IF_ERROR(
      CublasStatus(cublasDtrsm(blas, CUBLAS_SIDE_RIGHT, CUBLAS_FILL_MODE_LOWER, CUBLAS_OP_T,
                               CUBLAS_DIAG_NON_UNIT, ikx, iky, &one, l_y.as<double>(), iky, w, ikx),
                   "cublasDtrsm (times L_y^-T)"));
  GPE_CUDA_RETURN_IF_ERROR(
      CublasStatus(cublasDtrsm(blas, CUBLAS_SIDE_RIGHT, CUBLAS_FILL_MODE_LOWER, CUBLAS_OP_N,
                               CUBLAS_DIAG_NON_UNIT, ikx, iky, &one, l_y.as<double>(), iky, w, ikx),
                   "cublasDtrsm (times L_y^-1)"));
  GPE_CUDA_RETURN_IF_ERROR(KernelStatus(LaunchFlagNonFinite(w, ky * kx, ints_d + kFlagOut, stream),
                                        "FlagNonFinite (W)"));
  int host_ints[kNumInts] = {0, 0, 0};
  GPE_CUDA_RETURN_IF_ERROR(CudaStatus(
      cudaMemcpyAsync(host_ints, ints_d, sizeof(host_ints), cudaMemcpyDeviceToHost, stream),
      "cudaMemcpyAsync (fit status)"));
  GPE_CUDA_RETURN_IF_ERROR(Sync("the fit"));
  if (host_ints[kFlagIn] != 0) {
    return absl::InvalidArgumentError("image channel has a non-finite entry");
  }
  if (host_ints[kInfo] != 0) {
    return absl::InternalError(
        absl::StrCat("cuSOLVER: cusolverDnDpotrs returned info ", host_ints[kInfo]));
  }
  if (host_ints[kFlagOut] != 0) return OverflowError(s);
  return absl::OkStatus();
}

SeparableFitterCuda::SeparableFitterCuda(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
SeparableFitterCuda::SeparableFitterCuda(SeparableFitterCuda&& other) noexcept = default;
SeparableFitterCuda& SeparableFitterCuda::operator=(SeparableFitterCuda&& other) noexcept {
  if (this != &other) {
    if (impl_ != nullptr) {
      DeviceScope scope;
      (void)scope.Enter(impl_->device);  // best effort: the handles belong to that device
      impl_.reset();
    }
    impl_ = std::move(other.impl_);
  }
  return *this;
}

SeparableFitterCuda::~SeparableFitterCuda() {
  if (impl_ == nullptr) return;
  DeviceScope scope;
  (void)scope.Enter(impl_->device);  // best effort: the handles belong to that device
  impl_.reset();
}

absl::StatusOr<SeparableFitterCuda> SeparableFitterCuda::Create(
    const SeparableFitCudaOptions& options) {
  GPE_CUDA_RETURN_IF_ERROR(CheckLambda(options.lambda));
  if (options.contraction != Contraction::kAuto && options.contraction != Contraction::kYFirst &&
      options.contraction != Contraction::kXFirst) {
    return absl::InvalidArgumentError("unknown Contraction value");
  }
  std::string why;
  const int count = CudaDeviceCount(&why);
  if (count == 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "no CUDA device (", why, "): the GPU closed-form fit cannot run on this machine"));
  }
  DeviceScope scope;  // declared before impl: a failed Create frees impl on its device
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  if (options.device < 0) {
    GPE_CUDA_RETURN_IF_ERROR(CudaStatus(cudaGetDevice(&impl->device), "cudaGetDevice"));
  } else if (options.device >= count) {
    return absl::InvalidArgumentError(
        absl::StrCat("device ", options.device, " does not exist (", count, " CUDA devices)"));
  } else {
    impl->device = options.device;
  }
  GPE_CUDA_RETURN_IF_ERROR(scope.Enter(impl->device));
  if (options.stream != nullptr) {
    impl->stream = static_cast<cudaStream_t>(options.stream);
  } else {
    GPE_CUDA_RETURN_IF_ERROR(CudaStatus(
        cudaStreamCreateWithFlags(&impl->stream, cudaStreamNonBlocking), "cudaStreamCreate"));
    impl->own_stream = true;
  }
  GPE_CUDA_RETURN_IF_ERROR(CublasStatus(cublasCreate(&impl->blas), "cublasCreate"));
  GPE_CUDA_RETURN_IF_ERROR(
      CublasStatus(cublasSetStream(impl->blas, impl->stream), "cublasSetStream"));
  GPE_CUDA_RETURN_IF_ERROR(CublasStatus(cublasSetPointerMode(impl->blas, CUBLAS_POINTER_MODE_HOST),
                                        "cublasSetPointerMode"));
  GPE_CUDA_RETURN_IF_ERROR(
      CublasStatus(cublasSetMathMode(impl->blas, CUBLAS_DEFAULT_MATH), "cublasSetMathMode"));
  GPE_CUDA_RETURN_IF_ERROR(CusolverStatus(cusolverDnCreate(&impl->solver), "cusolverDnCreate"));
  GPE_CUDA_RETURN_IF_ERROR(
      CusolverStatus(cusolverDnSetStream(impl->solver, impl->stream), "cusolverDnSetStream"));
  GPE_CUDA_RETURN_IF_ERROR(impl->ints.Reserve(kNumInts * sizeof(int), "status flags"));
  return SeparableFitterCuda(std::move(impl));
}

absl::Status SeparableFitterCuda::SetFactors(const MatrixRef& psi_y, const MatrixRef& psi_x) {
  Impl& m = *impl_;
  m.ready = false;
  GPE_CUDA_RETURN_IF_ERROR(CheckHostMatrix(psi_y, "encoding factor Psi_y"));
  GPE_CUDA_RETURN_IF_ERROR(CheckHostMatrix(psi_x, "encoding factor Psi_x"));
  DeviceScope scope;
  GPE_CUDA_RETURN_IF_ERROR(scope.Enter(m.device));
  // The host rows (stride outerStride) become contiguous device rows.
  GPE_CUDA_RETURN_IF_ERROR(
      m.psi_y.Reserve(static_cast<size_t>(psi_y.size()) * sizeof(double), "Psi_y"));
  GPE_CUDA_RETURN_IF_ERROR(
      m.psi_x.Reserve(static_cast<size_t>(psi_x.size()) * sizeof(double), "Psi_x"));
  GPE_CUDA_RETURN_IF_ERROR(CudaStatus(
      cudaMemcpy2DAsync(m.psi_y.as<double>(), psi_y.cols() * sizeof(double), psi_y.data(),
                        psi_y.outerStride() * sizeof(double), psi_y.cols() * sizeof(double),
                        psi_y.rows(), cudaMemcpyHostToDevice, m.stream),
      "cudaMemcpy2DAsync (Psi_y to the device)"));
  GPE_CUDA_RETURN_IF_ERROR(CudaStatus(
      cudaMemcpy2DAsync(m.psi_x.as<double>(), psi_x.cols() * sizeof(double), psi_x.data(),
                        psi_x.outerStride() * sizeof(double), psi_x.cols() * sizeof(double),
                        psi_x.rows(), cudaMemcpyHostToDevice, m.stream),
      "cudaMemcpy2DAsync (Psi_x to the device)"));
  return m.SetFactorsOnDevice(psi_y.rows(), psi_y.cols(), psi_x.rows(), psi_x.cols());
}

absl::Status SeparableFitterCuda::SetFactorsDevice(const double* psi_y, int64_t n_y, int64_t k_y,
                                                   const double* psi_x, int64_t n_x, int64_t k_x) {
  Impl& m = *impl_;
  m.ready = false;
  GPE_CUDA_RETURN_IF_ERROR(CheckSize(n_y, k_y, "encoding factor Psi_y"));
  GPE_CUDA_RETURN_IF_ERROR(CheckSize(n_x, k_x, "encoding factor Psi_x"));
  if (psi_y == nullptr || psi_x == nullptr) {
    return absl::InvalidArgumentError("SetFactorsDevice needs device pointers to both factors");
  }
  DeviceScope scope;
  GPE_CUDA_RETURN_IF_ERROR(scope.Enter(m.device));
  const size_t bytes_y = static_cast<size_t>(n_y * k_y) * sizeof(double);
  const size_t bytes_x = static_cast<size_t>(n_x * k_x) * sizeof(double);
  GPE_CUDA_RETURN_IF_ERROR(m.psi_y.Reserve(bytes_y, "Psi_y"));
  GPE_CUDA_RETURN_IF_ERROR(m.psi_x.Reserve(bytes_x, "Psi_x"));
  GPE_CUDA_RETURN_IF_ERROR(CudaStatus(
      cudaMemcpyAsync(m.psi_y.as<double>(), psi_y, bytes_y, cudaMemcpyDeviceToDevice, m.stream),
      "cudaMemcpyAsync (Psi_y, device to device)"));
  GPE_CUDA_RETURN_IF_ERROR(CudaStatus(
      cudaMemcpyAsync(m.psi_x.as<double>(), psi_x, bytes_x, cudaMemcpyDeviceToDevice, m.stream),
      "cudaMemcpyAsync (Psi_x, device to device)"));
  return m.SetFactorsOnDevice(n_y, k_y, n_x, k_x);
}

absl::Status SeparableFitterCuda::FitDevice(const double* s, double* w) {
  DeviceScope scope;
  GPE_CUDA_RETURN_IF_ERROR(scope.Enter(impl_->device));
  return impl_->Fit(s, w);
}

absl::StatusOr<RowMatrixXd> SeparableFitterCuda::Fit(const MatrixRef& s) {
  Impl& m = *impl_;
  if (!m.ready) return m.Fit(nullptr, nullptr);  // the "no factors" error
  GPE_CUDA_RETURN_IF_ERROR(CheckSize(s.rows(), s.cols(), "image channel"));
  if (s.rows() != m.ny || s.cols() != m.nx) {
    return absl::InvalidArgumentError(absl::StrCat("the image is ", s.rows(), " x ", s.cols(),
                                                   "; the factors encode ", m.ny, " rows (y) and ",
                                                   m.nx, " columns (x)"));
  }
  DeviceScope scope;
  GPE_CUDA_RETURN_IF_ERROR(scope.Enter(m.device));
  GPE_CUDA_RETURN_IF_ERROR(
      m.s_host.Reserve(static_cast<size_t>(m.ny * m.nx) * sizeof(double), "the image"));
  GPE_CUDA_RETURN_IF_ERROR(
      m.w_host.Reserve(static_cast<size_t>(m.ky * m.kx) * sizeof(double), "W"));
  GPE_CUDA_RETURN_IF_ERROR(
      CudaStatus(cudaMemcpy2DAsync(m.s_host.as<double>(), s.cols() * sizeof(double), s.data(),
                                   s.outerStride() * sizeof(double), s.cols() * sizeof(double),
                                   s.rows(), cudaMemcpyHostToDevice, m.stream),
                 "cudaMemcpy2DAsync (image to the device)"));
  GPE_CUDA_RETURN_IF_ERROR(m.Fit(m.s_host.as<double>(), m.w_host.as<double>()));
  RowMatrixXd w(m.ky, m.kx);  // row-major W = column-major W^T: the device bytes as they are
  GPE_CUDA_RETURN_IF_ERROR(
      CudaStatus(cudaMemcpyAsync(w.data(), m.w_host.as<double>(),
                                 static_cast<size_t>(w.size()) * sizeof(double),
                                 cudaMemcpyDeviceToHost, m.stream),
                 "cudaMemcpyAsync (W to the host)"));
  GPE_CUDA_RETURN_IF_ERROR(m.Sync("copying W to the host"));
  return w;
}

absl::StatusOr<std::vector<RowMatrixXd>> SeparableFitterCuda::Fit(
    const std::vector<RowMatrixXd>& channels) {
  if (channels.empty()) return absl::InvalidArgumentError("no channels to fit");
  std::vector<RowMatrixXd> weights;
  weights.reserve(channels.size());
  for (size_t c = 0; c < channels.size(); ++c) {
    absl::StatusOr<RowMatrixXd> w = Fit(channels[c]);
    if (!w.ok()) {
      if (channels.size() == 1) return w.status();
      return absl::Status(w.status().code(),
                          absl::StrCat("channel ", c, ": ", w.status().message()));
    }
    weights.push_back(*std::move(w));
  }
  return weights;
}

int64_t SeparableFitterCuda::ny() const { return impl_->ready ? impl_->ny : 0; }
int64_t SeparableFitterCuda::nx() const { return impl_->ready ? impl_->nx : 0; }
int64_t SeparableFitterCuda::ky() const { return impl_->ready ? impl_->ky : 0; }
int64_t SeparableFitterCuda::kx() const { return impl_->ready ? impl_->kx : 0; }
Contraction SeparableFitterCuda::contraction() const {
  return impl_->ready ? impl_->order : Contraction::kAuto;
}
void* SeparableFitterCuda::stream() const { return impl_->stream; }
int SeparableFitterCuda::device() const { return impl_->device; }

size_t SeparableFitterCuda::device_bytes() const {
  const Impl& m = *impl_;
  size_t total = 0;
  for (const DeviceBuffer* b : {&m.psi_y, &m.psi_x, &m.psi_y_f, &m.psi_x_f, &m.l_y, &m.l_x, &m.diag,
                                &m.ints, &m.work, &m.t, &m.t_f, &m.s_f, &m.s_host, &m.w_host}) {
    total += b->bytes();
  }
  return total;
}

absl::StatusOr<std::vector<RowMatrixXd>> FitSeparable2DCuda(
    const MatrixRef& psi_y, const MatrixRef& psi_x, const std::vector<RowMatrixXd>& channels,
    const SeparableFitCudaOptions& options) {
  // Everything that needs no GPU is checked first, in the CPU path's order.
  GPE_CUDA_RETURN_IF_ERROR(CheckChannels(psi_y, psi_x, channels));
  GPE_CUDA_RETURN_IF_ERROR(CheckHostMatrix(psi_y, "encoding factor Psi_y"));
  GPE_CUDA_RETURN_IF_ERROR(CheckHostMatrix(psi_x, "encoding factor Psi_x"));
  GPE_CUDA_RETURN_IF_ERROR(CheckLambda(options.lambda));
  absl::StatusOr<SeparableFitterCuda> fitter = SeparableFitterCuda::Create(options);
  if (!fitter.ok()) return fitter.status();
  GPE_CUDA_RETURN_IF_ERROR(fitter->SetFactors(psi_y, psi_x));
  return fitter->Fit(channels);
}

absl::StatusOr<RowMatrixXd> FitSeparable2DCuda(const MatrixRef& psi_y, const MatrixRef& psi_x,
                                               const MatrixRef& s,
                                               const SeparableFitCudaOptions& options) {
  GPE_CUDA_RETURN_IF_ERROR(CheckSize(s.rows(), s.cols(), "image channel"));
  if (s.rows() != psi_y.rows() || s.cols() != psi_x.rows()) {
    return absl::InvalidArgumentError(absl::StrCat("channel 0 is ", s.rows(), " x ", s.cols(),
                                                   "; the factors encode ", psi_y.rows(),
                                                   " rows (y) and ", psi_x.rows(), " columns (x)"));
  }
  GPE_CUDA_RETURN_IF_ERROR(CheckHostMatrix(psi_y, "encoding factor Psi_y"));
  GPE_CUDA_RETURN_IF_ERROR(CheckHostMatrix(psi_x, "encoding factor Psi_x"));
  GPE_CUDA_RETURN_IF_ERROR(CheckLambda(options.lambda));
  absl::StatusOr<SeparableFitterCuda> fitter = SeparableFitterCuda::Create(options);
  if (!fitter.ok()) return fitter.status();
  GPE_CUDA_RETURN_IF_ERROR(fitter->SetFactors(psi_y, psi_x));
  return fitter->Fit(s);
}

}  // namespace gpe::inr::cuda
