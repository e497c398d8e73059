// Unipotent representations in GL(d) (GRAPE-A): nilpotent generators with A^2 = 0.
//
// exp(t A) = I + t A exactly when A^2 = 0 (Additive GRAPE's G(n) = I + n omega A,
// Zhang et al.).
// Position p acts by G(p) = I + p omega A on column vectors; G(p)^-1 = G(-p). Vectors
// are lifted to homogeneous coordinates [x; 1] so a translation becomes linear
// (A = [[0, u], [0, 0]] translates x by p omega u).
//
// Path products (GRAPE-AP): a path is a sequence of steps (A_l, t_l); its matrix is
// exp(t_1 A_1) exp(t_2 A_2) ... exp(t_m A_m), in path order (the same right-multiplying
// convention as free-group words). When every product A_l A_m vanishes it collapses to
// I + sum_l t_l A_l, which is what makes the additive bias cheap.
#ifndef GROUP_UNIPOTENT_H_
#define GROUP_UNIPOTENT_H_

#include <cstdint>
#include <utility>
#include <vector>

#include <Eigen/Dense>
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace gpe {
namespace group {

// OK when A is square, finite and |A^2|_max <= tol * |A|_max^2 (relative: A's scale, and
// omega's, cancel; A = 0 passes).
absl::Status ValidateSquareZero(const Eigen::Ref<const Eigen::MatrixXd>& a, double tol = 1e-12);

// [x; 1].
Eigen::VectorXd HomogeneousLift(const Eigen::Ref<const Eigen::VectorXd>& x);

class UnipotentRepresentation {
 public:
  using Element = int64_t;

  // A square with A^2 = 0 (ValidateSquareZero), omega finite.
  static absl::StatusOr<UnipotentRepresentation> Create(const Eigen::Ref<const Eigen::MatrixXd>& a,
                                                        double omega);

  int64_t dim() const { return a_.rows(); }
  const Eigen::MatrixXd& generator() const { return a_; }
  double omega() const { return omega_; }

  // I + p omega A.
  Eigen::MatrixXd Matrix(int64_t p) const;

  // out_j = (I + p_j omega A) in_j; T is float or double (arithmetic in double).
  template <class T>
  absl::Status Apply(absl::Span<const int64_t> positions, const T* in, int64_t in_stride,
                     T* out, int64_t out_stride) const;

 private:
  UnipotentRepresentation(Eigen::MatrixXd a, double omega) : a_(std::move(a)), omega_(omega) {}
  Eigen::MatrixXd a_;
  double omega_;
};

struct UnipotentStep {
  Eigen::MatrixXd generator;  // A_l, A_l^2 = 0
  double t;                   // t_l
};

// exp(t_1 A_1) ... exp(t_m A_m). The path must be non-empty (its size comes from the
// generators), all generators of one size, square to zero, and every t finite.
absl::StatusOr<Eigen::MatrixXd> UnipotentPathProduct(absl::Span<const UnipotentStep> path);
// The inverse of the path product: exp(-t_m A_m) ... exp(-t_1 A_1).
absl::StatusOr<Eigen::MatrixXd> UnipotentPathInverse(absl::Span<const UnipotentStep> path);

}  // namespace group
}  // namespace gpe

#endif  // GROUP_UNIPOTENT_H_
