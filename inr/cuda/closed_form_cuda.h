// The closed-form separable least-squares fit of inr/closed_form.h on NVIDIA GPUs
// (cuBLAS and cuSOLVER, float64). Zheng et al., "Trading Positional Complexity vs.
// Deepness in Coordinate Networks", sec. 5, eq. 10: for a Kronecker encoding followed by
// one linear layer, the image S (n_y x n_x) is predicted as S_hat = Psi_y W Psi_x^T, and
// the least-squares weights are
//   W = G_y^-1 (Psi_y^T S Psi_x) G_x^-1,   G = Psi^T Psi + lambda I   (per axis),
// the same W, shapes and conventions as the CPU FitSeparable2D (closed_form.h): Psi_y is
// n_y x K_y, Psi_x n_x x K_x, W K_y x K_x, every matrix row-major (RowMatrixXd); lambda is
// a ridge on each factor, not on the Kronecker system.
//
// Method, per fit (one stream, in this order):
//   1. per axis, once per factor pair (SetFactors): G = Psi^T Psi (cublasDsyrk), + lambda I,
//      Cholesky G = L L^T (cusolverDnDpotrf), kept on the device;
//   2. per image (FitDevice): M = Psi_y^T S Psi_x by two GEMMs (cublasDgemm; with
//      float32_image_products the image-sized one in float32, cublasSgemm, and its
//      K x n result widened to float64 before the second);
//   3. W^T = G_x^-1 M^T by cusolverDnDpotrs (left side), then times G_y^-1 from the right
//      by two triangular solves with L_y (cublasDtrsm: X L_y^T = B, then Y L_y = X).
// The GEMM order is the cheaper of S's two contractions (Contraction::kAuto):
//   y first: (Psi_y^T S) Psi_x, 2 n_x K_y (n_y + K_x) flops;
//   x first: Psi_y^T (S Psi_x), 2 n_y K_x (n_x + K_y) flops;
// both give the same W up to rounding. The Gram matrices, Cholesky factors and solves are
// float64 whatever the options. cuBLAS runs in CUBLAS_DEFAULT_MATH (IEEE float64, and
// float32 without TF32 tensor cores; FP64 emulation is not enabled).
//
// Layout. cuBLAS and cuSOLVER are column-major; the host API is row-major. A row-major
// r x c matrix is, byte for byte, the column-major c x r matrix of its transpose, so no
// data is ever transposed: the device holds Psi_y as the column-major K_y x n_y matrix
// Psi_y^T (leading dimension K_y), Psi_x as Psi_x^T (K_x x n_x, ld K_x), S as S^T (n_x x
// n_y, ld n_x), and the fit computes the column-major K_x x K_y matrix
//   W^T = G_x^-1 (Psi_x^T S^T Psi_y) G_y^-1,
// which is row-major W. Device pointers of the lower-level API follow the same rule: pass
// the row-major arrays, contiguous (row stride = number of columns). Host matrices may
// have any row stride (Eigen::Ref); they are copied row by row (cudaMemcpy2D).
//
// Acceptance of the Gram matrices is the CPU rule: a factor whose G is not numerically
// positive definite (potrf info > 0, or min diag(L)^2 < 1e3 eps max diag(G), i.e.
// cond(G) above ~4e12), or that is all zeros with lambda = 0, is FailedPrecondition. The
// truncated-SVD route (SeparableFitOptions::rcond > 0) has no GPU counterpart.
//
// Validation: as the CPU: every matrix non-empty (InvalidArgument), at most INT_MAX rows,
// columns and entries (OutOfRange: cuBLAS takes int sizes), finite (InvalidArgument;
// the image is checked on the device, in the same pass as the fit), shapes that match,
// lambda finite and >= 0. A W that came out non-finite from finite inputs (an overflow,
// in float32 with float32_image_products) is InvalidArgument naming the culprit, as the
// CPU path does; W's contents are then unspecified.
//
// Streams and synchronisation. A fitter runs every call on one stream: its own
// (non-blocking, created by Create) or the caller's (options.stream, not owned). Each
// call of SetFactors*, FitDevice and Fit ends with a cudaStreamSynchronize on it: the
// FailedPrecondition / InvalidArgument checks read a few values back, so a call returns
// only once its results are final. Work the caller enqueued earlier on the same stream
// runs first; on another stream, the caller orders it (events). A fitter is not thread
// safe; use one per thread (they may share a device). Calls set the fitter's device
// current for their duration and restore the caller's afterwards.
//
// Device memory held by a fitter (8-byte doubles, 4-byte floats), once factors are set:
//   8 (n_y K_y + n_x K_x + K_y^2 + K_x^2 + T) + cuSOLVER's potrf workspace (~K^2 doubles),
//   T = n_x K_y (y first) or n_y K_x (x first);
//   plus 4 (n K + n_y n_x + T) with float32_image_products (n K: the first-contracted
//   factor, demoted once per SetFactors);
//   plus 8 (n_y n_x + K_y K_x) for the host API's image and W buffers (from the first Fit).
// At n = 4096, K = 256: ~27 MB for the device API, ~161 MB with the host API's buffers
// (the image alone 134 MB), ~237 MB with float32 products too. cuBLAS and cuSOLVER keep
// their own workspaces per handle (a few MiB). device_bytes() reports the fitter's own.
//
// Cost, per image: the two GEMMs (2 n^2 K + 2 n K^2 flops at n_y = n_x = n, K_y = K_x = K)
// dominate; the solves add 3 K^3 flops (K = 256: 0.05 GFLOP), one pass over the image
// checks it finite, and float32_image_products adds one pass that demotes it. The host
// API adds the transfers: S up (8 n_y n_x bytes from pageable memory) and W down.
#ifndef INR_CUDA_CLOSED_FORM_CUDA_H_
#define INR_CUDA_CLOSED_FORM_CUDA_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "inr/closed_form.h"

namespace gpe::inr::cuda {

// Which side of S the first (image-sized) GEMM contracts.
enum class Contraction {
  kAuto,    // the cheaper (ties: y first, as the CPU path)
  kYFirst,  // T = Psi_y^T S (K_y x n_x), then M = T Psi_x
  kXFirst,  // T = S Psi_x (n_y x K_x), then M = Psi_y^T T
};

struct SeparableFitCudaOptions {
  double lambda = 0.0;  // ridge on each factor, finite, >= 0
  // The image-sized GEMM in float32 (cublasSgemm on the demoted image and factor; the
  // CPU option of the same name, closed_form.h): relative error of W ~1e-6 cond(G),
  // float32's range limits |image|, |Psi| and the sums of n products to <= FLT_MAX
  // ~3.4e38 (past it: InvalidArgument naming the culprit, never a non-finite W).
  bool float32_image_products = false;
  Contraction contraction = Contraction::kAuto;
  int device = -1;         // CUDA device ordinal; -1: the caller's current device at Create
  void* stream = nullptr;  // a cudaStream_t to run on (not owned); null: the fitter's own
};

// CUDA devices visible to this process (0 without GPU or driver; `why` then says why).
int CudaDeviceCount(std::string* why);

// A fitter holds cuBLAS and cuSOLVER handles, a stream, and the factored Gram matrices of
// one factor pair, so several images (or channels) fitted with the same factors share
// the factorisations. Move-only; a moved-from fitter may only be destroyed or assigned to.
class SeparableFitterCuda {
 public:
  // FailedPrecondition without a CUDA device; InvalidArgument for bad options.
  static absl::StatusOr<SeparableFitterCuda> Create(const SeparableFitCudaOptions& options);

  SeparableFitterCuda(SeparableFitterCuda&& other) noexcept;
  SeparableFitterCuda& operator=(SeparableFitterCuda&& other) noexcept;
  ~SeparableFitterCuda();

  // Uploads the factors (host, row-major, any row stride) and factors their Gram
  // matrices. Replaces earlier factors; after a failure the fitter holds none (FitDevice
  // and Fit return FailedPrecondition until a SetFactors* succeeds).
  absl::Status SetFactors(const MatrixRef& psi_y, const MatrixRef& psi_x);
  // The same from device memory: psi_y n_y x K_y and psi_x n_x x K_x, row-major and
  // contiguous. They are copied (the caller may free them after the call).
  absl::Status SetFactorsDevice(const double* psi_y, int64_t n_y, int64_t k_y, const double* psi_x,
                                int64_t n_x, int64_t k_x);

  // W (K_y x K_x, row-major, contiguous, device) of the image s (n_y x n_x, row-major,
  // contiguous, device, float64), with the factors set last. s and w must not overlap.
  absl::Status FitDevice(const double* s, double* w);
  // The host API: uploads the image, fits, returns W (host).
  absl::StatusOr<RowMatrixXd> Fit(const MatrixRef& s);
  absl::StatusOr<std::vector<RowMatrixXd>> Fit(const std::vector<RowMatrixXd>& channels);

  // The factors' sizes (0 before SetFactors*).
  int64_t ny() const;
  int64_t nx() const;
  int64_t ky() const;
  int64_t kx() const;
  // The GEMM order in use (kYFirst or kXFirst once factors are set).
  Contraction contraction() const;
  // The stream every call runs on (a cudaStream_t).
  void* stream() const;
  int device() const;
  // Device bytes held by the fitter's own buffers (not cuBLAS's workspace).
  size_t device_bytes() const;

 private:
  struct Impl;
  explicit SeparableFitterCuda(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// One-shot fits: validate (before touching the GPU, so bad inputs are InvalidArgument
// also where no GPU exists), create a fitter, set the factors, fit. W for one channel,
// or one W per channel (the factorisations shared), as the CPU FitSeparable2D.
absl::StatusOr<RowMatrixXd> FitSeparable2DCuda(const MatrixRef& psi_y, const MatrixRef& psi_x,
                                               const MatrixRef& s,
                                               const SeparableFitCudaOptions& options);
absl::StatusOr<std::vector<RowMatrixXd>> FitSeparable2DCuda(
    const MatrixRef& psi_y, const MatrixRef& psi_x, const std::vector<RowMatrixXd>& channels,
    const SeparableFitCudaOptions& options);

}  // namespace gpe::inr::cuda

#endif  // INR_CUDA_CLOSED_FORM_CUDA_H_
