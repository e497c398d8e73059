// Closed-form least squares for coordinate networks on separable grids (Zheng et al.,
// "Trading Positional Complexity vs. Deepness in Coordinate Networks", sec. 5, eq. 10).
//
// A complex (Kronecker) encoding followed by one linear layer predicts, on the grid
// y_0..y_{n_y-1} x x_0..x_{n_x-1}, the image
//   S_hat = Psi_y W Psi_x^T                                  (rows = y, columns = x)
// with Psi_y (n_y x K_y) and Psi_x (n_x x K_x) the per-axis encodings
// (ComplexShiftedEncoder::Factors) and W (K_y x K_x) the layer's weights read row-major
// (the feature order of shifted_basis.h). The least-squares W is never found through the
// n_y n_x x K_y K_x Kronecker system: with A = (Psi^T Psi + lambda I)^-1 Psi^T per axis,
//   W = A_y S A_x^T,
// which for lambda = 0 and full column rank factors is exactly pinv(Psi_y) S pinv(Psi_x)^T,
// the minimiser of |Psi_y W Psi_x^T - S|_F. Regularisation choice: ridge lambda on each
// factor (lambda = 0 is plain least squares); this is not ridge on the full Kronecker
// system (Zheng et al. leave the regularisation open). 3D volumes use mode-n
// products.
//
// FitSeparable2D computes W = G_y^-1 (Psi_y^T S Psi_x) G_x^-1, G = Psi^T Psi + lambda I,
// and exploits the locality of shifted bases: the factors are cut into row blocks with
// their nonzero column windows (products cost O(n b (n + K)) for bandwidth b instead of
// O(n K (n + K))), and a narrow G is solved through its band Cholesky factor. Dense
// factors (Fourier features) take the same path with full windows.
//
// Arithmetic is float64 through OpenBLAS (BLAS-3 and LAPACK's Cholesky). A factor whose
// regularised Gram matrix is not numerically positive definite (rank deficient with
// lambda = 0, e.g. K > n) is reported as FailedPrecondition, never returned as garbage.
//
// Rank-revealing route (rcond > 0): each factor's pseudo-inverse comes from its thin SVD
// Psi = U diag(s) V^T (Eigen's BDCSVD, float64), A^T = U diag(f(s_i)) V^T with
//   f(s) = s / (s^2 + lambda)  for s > rcond * s_max,  0 otherwise
// (truncated SVD combined with the same ridge; lambda = 0 gives NumPy's pinv(Psi, rcond)).
// It accepts rank-deficient factors and is stable for any conditioning, at O(n K^2) per
// factor (~10x the Cholesky route at K = 256). Directions below rcond are dropped,
// which is the right call when the data carry noise (8-bit images: ~2^-9 relative) that
// those directions would amplify by s_max / s_i.
//
// Why a well-posed solve can still predict garbage off the grid: with lambda = rcond = 0
// W is the exact minimiser, and for an encoding whose factor has a large condition
// number (e.g. Fourier features with frequencies at the training grid's Nyquist rate,
// cond(Psi) ~ 4e4) the minimiser interpolates through basis combinations that are tiny
// on the samples and huge between them. ConditionNumber() reports cond(Psi) so callers
// (`gpe inr zheng-table1`) can show it; rcond or lambda trade that amplification away.
#ifndef INR_CLOSED_FORM_H_
#define INR_CLOSED_FORM_H_

#include <array>
#include <cstdint>
#include <vector>

#include <Eigen/Dense>
#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace gpe {
namespace inr {

using RowMatrixXd = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MatrixRef = Eigen::Ref<const RowMatrixXd>;

// The ridge pseudo-inverse of one factor, stored transposed: returns A^T (n x K) with
// A = (Psi^T Psi + lambda I)^-1 Psi^T. psi: n x K, finite, n, K >= 1; lambda >= 0 finite.
// rcond in [0, 1): 0 is the Cholesky route (refuses singular factors), > 0 the truncated
// SVD route described above.
absl::StatusOr<RowMatrixXd> RidgePinvTransposed(const MatrixRef& psi, double lambda,
                                                double rcond = 0.0);

// The 2-norm condition number s_max / s_min of a factor (n x K, finite, n, K >= 1) from
// its singular values (BDCSVD); +inf when s_min = 0 or K > n (rank deficient).
absl::StatusOr<double> ConditionNumber(const MatrixRef& psi);

struct SeparableFitOptions {
  double lambda = 0.0;  // ridge on each factor, finite, >= 0
  // Form the image-sized product Psi_y^T S in float32 (twice the throughput; the Gram
  // factorisations and solves stay float64). Relative error of W ~1e-6 cond(G), far below
  // 8-bit image quantisation; the benchmark checks PSNR is unchanged. The float32 sums
  // of n_y products psi_y * s must stay within |x| <= FLT_MAX ~3.4e38 (sufficient:
  // n_y max|Psi_y| max|S| <= 3.4e38); past it FitSeparable2D returns InvalidArgument
  // naming the image instead of a non-finite W. Values below FLT_MIN ~1.2e-38 lose
  // precision (subnormals, then zero).
  bool float32_image_products = false;
  // 0: Cholesky route (singular factors are errors). In (0, 1): truncated SVD
  // pseudo-inverse dropping singular values below rcond * s_max (see above).
  double rcond = 0.0;
  // Shares of the Cholesky route's products and solves, run on the library pool
  // (parallel/thread_pool.h): 0 picks up to 4 (the pool's thread count) for images with
  // K_y n_x >= 2^15, one below; n > 0 uses n (at most K_y). Every count gives the same W
  // up to rounding (each share owns whole rows, then whole columns, of the result).
  int num_threads = 0;
};

// W = A_y S A_x^T for one channel. s: n_y x n_x. Every input must be finite; finite
// inputs whose products overflow (float32 or float64, see float32_image_products) are
// InvalidArgument: a W holding inf or NaN is never returned.
absl::StatusOr<RowMatrixXd> FitSeparable2D(const MatrixRef& psi_y, const MatrixRef& psi_x,
                                           const MatrixRef& s, double lambda);
// The same for several channels (RGB), sharing the factorisations.
absl::StatusOr<std::vector<RowMatrixXd>> FitSeparable2D(const MatrixRef& psi_y,
                                                        const MatrixRef& psi_x,
                                                        const std::vector<RowMatrixXd>& channels,
                                                        double lambda);
absl::StatusOr<std::vector<RowMatrixXd>> FitSeparable2D(const MatrixRef& psi_y,
                                                        const MatrixRef& psi_x,
                                                        const std::vector<RowMatrixXd>& channels,
                                                        const SeparableFitOptions& options);
// S_hat = Psi_y W Psi_x^T.
absl::StatusOr<RowMatrixXd> PredictSeparable2D(const MatrixRef& psi_y, const MatrixRef& psi_x,
                                               const MatrixRef& w);

// A dense 3-tensor, row-major: element (i, j, k) at data[(i * dims[1] + j) * dims[2] + k].
struct Tensor3 {
  std::array<int64_t, 3> dims = {0, 0, 0};
  std::vector<double> data;
};

// Volumes: W = V x_0 A_0 x_1 A_1 x_2 A_2 (mode-n products), psi[d]: n_d x K_d,
// v.dims == {n_0, n_1, n_2}. Returns a K_0 x K_1 x K_2 tensor. Non-finite inputs are
// refused, and so is a W that overflows (InvalidArgument): a W with an inf or NaN is
// never returned.
absl::StatusOr<Tensor3> FitSeparable3D(const std::array<RowMatrixXd, 3>& psi, const Tensor3& v,
                                       double lambda, double rcond = 0.0);
// V_hat = W x_0 Psi_0 x_1 Psi_1 x_2 Psi_2.
absl::StatusOr<Tensor3> PredictSeparable3D(const std::array<RowMatrixXd, 3>& psi,
                                           const Tensor3& w);

// Mean squared error over all entries (sizes must match, at least one entry), the
// differences scaled by a power of two first (no spurious underflow of their squares;
// inf only when the MSE itself is past double's range).
absl::StatusOr<double> MeanSquaredError(const MatrixRef& a, const MatrixRef& b);
// PSNR = 10 log10(peak^2 / MSE) in dB, formed in logarithms (no overflow of peak^2 or
// underflow of the MSE); +inf exactly when a == b. peak > 0, finite.
absl::StatusOr<double> Psnr(const MatrixRef& a, const MatrixRef& b, double peak = 1.0);

}  // namespace inr
}  // namespace gpe

#endif  // INR_CLOSED_FORM_H_
