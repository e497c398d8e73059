// Complex (Kronecker) encodings for non-separable samples: the blending matrix of Zheng et
// al. (sec. 5, eq. 13; appendix B.2, eqs. 43-49) and an iterative ridge least-squares fit.
//
// The model evaluates a virtual separable grid g^y_0 < ... < g^y_{M-1} (rows) by
// g^x_0 < ... < g^x_{N-1} (columns) exactly as the separable closed form does,
// V = Psi(g^y) W Psi(g^x)^T, and reaches a scattered point q = (q_x, q_y) in the cell
// [g^x_i, g^x_{i+1}] x [g^y_j, g^y_{j+1}] through 2^D = 4 blending weights:
//   f(q) = sum_{a, b in {0,1}} alpha_a(q_x) beta_b(q_y) V(j + b, i + a),
// where (alpha_0, alpha_1) is the least-squares fit Psi(q_x) ~ alpha_0 Psi(g_i) +
// alpha_1 Psi(g_{i+1}) (eq. 44, computed from the encoder's own vectors, so it is exact
// for any 1D encoder, not only shift-invariant ones), and likewise beta for y. B is the
// P x MN sparse matrix of those weights; it is never stored densely.
//
// The fit minimises |B (Psi_y (x) Psi_x) vec(W) - s|^2 + lambda |Psi_y W Psi_x^T|_F^2:
// the ridge acts on the model's values at the virtual grid (which keeps cells without
// samples near zero rather than W small), a choice of ours; Zheng et al. do not state
// one. It runs CGLS (conjugate gradients on the normal equations, damped form) on the
// problem preconditioned by orthonormalised factors (see blended.cc), each iteration two
// applications of the separable operator and of B: O(P + N K (N + K)) work.
#ifndef INR_BLENDED_H_
#define INR_BLENDED_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "inr/closed_form.h"

namespace gpe {
namespace inr {

// A 1D encoder: coordinates (n) to features (n x K), e.g. ShiftedBasis1D::Encode.
using AxisEncoder = std::function<absl::StatusOr<RowMatrixXd>(absl::Span<const double>)>;

// One axis's blending: point p lies in cell[p] (between grid[cell] and grid[cell + 1])
// with weights w0[p] on grid[cell] and w1[p] on grid[cell + 1].
struct AxisBlend {
  std::vector<int64_t> cell;
  std::vector<double> w0, w1;
};

// grid: >= 2 strictly increasing finite coordinates; coords finite and inside
// [grid.front(), grid.back()]. Fails when the two corner encodings are linearly dependent
// (the 2 x 2 Gram matrix of eq. 45 is singular).
absl::StatusOr<AxisBlend> BlendAxis(const AxisEncoder& encoder, absl::Span<const double> grid,
                                    absl::Span<const double> coords);

struct BlendedFitOptions {
  double lambda = 1e-6;        // ridge on the virtual-grid values, finite, >= 0
  int max_iterations = 500;    // >= 1
  double tolerance = 1e-6;     // stop when |grad| <= tolerance |grad_0|
  // Called every 25 iterations with (iteration, relative gradient norm); may be empty.
  std::function<void(int, double)> progress;
};

struct BlendedFit {
  RowMatrixXd weights;         // K_y x K_x
  int iterations = 0;
  double relative_gradient = 0;  // of the preconditioned normal equations, at exit
  double rms_residual = 0;       // sqrt(mean (f(q_p) - s_p)^2) over the samples
};

// points_x, points_y, values: P >= 1 samples. grid_x / grid_y as for BlendAxis.
absl::StatusOr<BlendedFit> FitBlended2D(const AxisEncoder& encoder_x, const AxisEncoder& encoder_y,
                                        absl::Span<const double> grid_x,
                                        absl::Span<const double> grid_y,
                                        absl::Span<const double> points_x,
                                        absl::Span<const double> points_y,
                                        absl::Span<const double> values,
                                        const BlendedFitOptions& options);

// f at scattered points for weights W (through the same blending).
absl::StatusOr<std::vector<double>> PredictBlended2D(
    const AxisEncoder& encoder_x, const AxisEncoder& encoder_y, absl::Span<const double> grid_x,
    absl::Span<const double> grid_y, absl::Span<const double> points_x,
    absl::Span<const double> points_y, const MatrixRef& weights);

}  // namespace inr
}  // namespace gpe

#endif  // INR_BLENDED_H_
