// Distance preservation of an embedder (Zheng et al. section 3.3): the embedded
// similarity of two coordinates
//   D(x1, x2) = int psi(t, x1) psi(t, x2) dt  ~=  s * sum_i psi(t_i, x1) psi(t_i, x2)
// (eq. 6), where s is the spacing of the samples t_i. For a shifted basis psi(t - x) it
// depends on delta = x1 - x2 only, and an ideal embedder makes it a monotone function of
// |delta| (eq. 5). The sampled form is what EmbeddedDistance computes from two feature
// vectors; pass s = ShiftedBasis1D::spacing() to compare with the integrals below, or
// s = 1 for the plain inner product (Prop. 3's RFF form, sum_j cos 2 pi b_j delta).
//
// Closed forms of the integral over the whole line, delta = x1 - x2:
//   Gaussian, std sigma:    sqrt(pi) sigma exp(-delta^2 / (4 sigma^2))        (eq. 24)
//   rectangle, width w:     w tri(delta / w) = max(w - |delta|, 0)            (eq. 34)
//   triangle, support w:    (w / 2) C(2 |delta| / w), C the autocorrelation of
//                           tri: C(u) = 2/3 - u^2 + u^3 / 2 on [0, 1],
//                           (2 - u)^3 / 6 on [1, 2], 0 beyond.
//     Zheng et al.'s eq. 39, (1/4) w^2 max(1 - |delta| / w, 0)^2, is not this integral:
//     at delta = 0 it gives w^2 / 4, while int tri(2u / w)^2 du = w / 3 (and its
//     support is |delta| < w, as here). GroupPE uses the integral.
//   RFF, b ~ N(0, sigma^2), per frequency (the sampled inner product divided by F):
//                           E[cos 2 pi b delta] = exp(-2 pi^2 sigma^2 delta^2)
//     (eq. 29 integrates the unnormalised weight exp(-xi^2 / (2 sigma^2)) instead, which
//     multiplies this by sqrt(2 pi) sigma.)
#ifndef ENCODINGS_ANALYSIS_DISTANCE_PRESERVATION_H_
#define ENCODINGS_ANALYSIS_DISTANCE_PRESERVATION_H_

#include <Eigen/Dense>

#include "absl/status/statusor.h"

namespace gpe {
namespace encodings {

// s * psi1 . psi2 (eq. 6). Vectors of equal, non-zero length; finite; s finite, > 0.
// Where s psi1 . psi2 leaves the normal range in double, it is computed again with each
// vector and s scaled by powers of two, so a result inside the double range is returned
// (e.g. s = 1e-300 against features of 1e200: 2e100, not inf); one outside it is
// OutOfRange. The same for the matrix below, entry by entry.
absl::StatusOr<double> EmbeddedDistance(const Eigen::Ref<const Eigen::VectorXd>& psi1,
                                        const Eigen::Ref<const Eigen::VectorXd>& psi2,
                                        double sample_spacing = 1.0);

// s * Psi Psi^T for a feature matrix with one row per point: entry (i, j) is D(x_i, x_j).
absl::StatusOr<Eigen::MatrixXd> EmbeddedDistanceMatrix(
    const Eigen::Ref<const Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic,
                                         Eigen::RowMajor>>& features,
    double sample_spacing = 1.0);

// The closed forms above; parameters finite and > 0, delta finite.
absl::StatusOr<double> GaussianEmbedderDistance(double sigma, double delta);
absl::StatusOr<double> RectangleEmbedderDistance(double width, double delta);
absl::StatusOr<double> TriangleEmbedderDistance(double width, double delta);
absl::StatusOr<double> RffExpectedDistance(double sigma, double delta);

}  // namespace encodings
}  // namespace gpe

#endif  // ENCODINGS_ANALYSIS_DISTANCE_PRESERVATION_H_
