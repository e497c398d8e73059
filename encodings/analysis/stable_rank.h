// Stable rank of an embedding matrix (Rudelson & Vershynin; Zheng et al. section 4):
//   srank(A) = ||A||_F^2 / ||A||_2^2 = sum_i s_i^2 / s_1^2,
// a rank surrogate that does not need a singular-value threshold. 1 <= srank <= rank(A).
// Zheng et al. use it to quantify an embedder's capacity to memorise (Prop. 1).
//
// Closed forms for embedders sampled densely on [0, 1] (Zheng et al. appendix A, the
// results of its derivations, eqs. 23-38); N is the number of embedded points:
//   Gaussian, std sigma              min(N, 1 / (2 sqrt(pi) sigma))   (Prop. 2, eq. 23)
//   RFF [cos 2 pi b x, sin 2 pi b x],
//     b ~ N(0, sigma^2)              min(N, sqrt(2 pi) sigma)          (Prop. 3, eq. 26)
//   rectangle of width w             min(N, 1 / w)                     (Prop. 4, eq. 33)
//   triangle of support width w      min(N, 4 / (3 w))                 (Prop. 5, eq. 38)
// They are limits (dense samples, circulant approximation); a finite, non-periodic
// sample differs by boundary and discretisation terms (see the tests for sizes).
#ifndef ENCODINGS_ANALYSIS_STABLE_RANK_H_
#define ENCODINGS_ANALYSIS_STABLE_RANK_H_

#include <cstdint>

#include <Eigen/Dense>

#include "absl/status/statusor.h"

namespace gpe {
namespace encodings {

// ||A||_F^2 / ||A||_2^2 for a finite, non-zero matrix with at least one entry.
// ||A||_2^2 is the largest eigenvalue of the Gram matrix of A's smaller side, computed
// with Eigen's dense self-adjoint solver: O(mn min(m, n) + min(m, n)^3) time, so meant
// for min(m, n) up to a few thousand; larger inputs get InvalidArgument.
absl::StatusOr<double> StableRank(
    const Eigen::Ref<const Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic,
                                         Eigen::RowMajor>>& a);

// The closed forms above (parameters must be finite and > 0; num_points >= 1).
absl::StatusOr<double> GaussianEmbedderStableRank(double sigma, int64_t num_points);
absl::StatusOr<double> RffStableRank(double sigma, int64_t num_points);
absl::StatusOr<double> RectangleEmbedderStableRank(double width, int64_t num_points);
absl::StatusOr<double> TriangleEmbedderStableRank(double width, int64_t num_points);

}  // namespace encodings
}  // namespace gpe

#endif  // ENCODINGS_ANALYSIS_STABLE_RANK_H_
