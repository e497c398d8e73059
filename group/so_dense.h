// General SO(d): exp and log, the real-Schur route to exp(p S) at any position,
// dense powers W^p by squaring, all powers W^0..W^P by doubling, and the Frechet
// derivative of exp for learned generators.
//
// Matrices are Eigen::MatrixXd (column-major inside Eigen); batched vectors follow
// so_planes.h (rows of `dim` elements, strides in elements, in == out allowed).
//
// Which route to use. A learned W = exp(S) applied at position p should go through
// SchurRotation: S = Q blockdiag(phi_k J) Q^T once, then p * phi_k reduced exactly in
// double, so exp(p S) = Q R(p phi_k) Q^T is orthogonal to ~1e-15 at every int64 p.
// MatrixPowerBySquaring multiplies a rounded W log2|p| times: its orthogonality defect
// and its distance from exp(p S) both grow roughly linearly in |p| (measured for a
// random d = 16 generator: ~5e-13 at p = 2^10, ~5e-10 at 2^20, ~1e-6 at 2^31, against
// ~2e-15 for the Schur route at every p), which is why the conventions store
// generators, never powered matrices.
#ifndef GROUP_SO_DENSE_H_
#define GROUP_SO_DENSE_H_

#include <cstdint>
#include <utility>
#include <vector>

#include <Eigen/Dense>
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace gpe {
namespace group {

// OK when s is square, finite and |s + s^T|_max <= tol * max(1, |s|_max).
absl::Status ValidateSkew(const Eigen::Ref<const Eigen::MatrixXd>& s, double tol = 1e-12);
// OK when w is square, finite and |w^T w - I|_max <= tol.
absl::Status ValidateOrthogonal(const Eigen::Ref<const Eigen::MatrixXd>& w, double tol = 1e-10);

// exp(S) for skew S (its skew part (S - S^T) / 2, exactly skew, once ValidateSkew passed),
// via Eigen's Pade scaling-and-squaring (MatrixFunctions). Relative
// error ~ eps * 2^s where s ~ log2 |S|_1 squarings: ~1e-15 for |S| ~ 1, ~1e-13 at 100.
// For large multiples p S use SchurRotation instead.
absl::StatusOr<Eigen::MatrixXd> SkewExp(const Eigen::Ref<const Eigen::MatrixXd>& s);

// Principal logarithm of a rotation: the skew L with exp(L) = W and every rotation
// angle in (-pi, pi). FailedPrecondition when W has eigenvalue -1 (angle within 1e-9 of
// pi, which includes every det W = -1): no unique real principal logarithm exists.
// InvalidArgument when W is not orthogonal (tolerance 1e-10).
absl::StatusOr<Eigen::MatrixXd> OrthogonalLog(const Eigen::Ref<const Eigen::MatrixXd>& w);

// exp(p S) through the real Schur form of a skew S.
class SchurRotation {
 public:
  using Element = int64_t;

  // S square, skew (ValidateSkew's default tolerance), d >= 1.
  static absl::StatusOr<SchurRotation> Create(const Eigen::Ref<const Eigen::MatrixXd>& s);

  int64_t dim() const { return q_.rows(); }
  // Columns 2k and 2k+1 of basis() span plane k, rotated by p * plane_angles()[k]
  // (from column 2k toward column 2k+1); the remaining columns are fixed.
  const Eigen::MatrixXd& basis() const { return q_; }
  absl::Span<const double> plane_angles() const { return phi_; }
  int64_t num_planes() const { return static_cast<int64_t>(phi_.size()); }

  // Q blockdiag(phi_k J) Q^T: equals S to ~1e-14 |S|.
  Eigen::MatrixXd Generator() const;
  Eigen::MatrixXd Matrix(int64_t p) const;

  // out_j = exp(p_j S) in_j. O(d^2) per vector, arithmetic in double; vectors are
  // processed in blocks so the two basis changes are matrix-matrix products.
  template <class T>
  absl::Status Apply(absl::Span<const int64_t> positions, const T* in, int64_t in_stride,
                     T* out, int64_t out_stride) const;

 private:
  SchurRotation(Eigen::MatrixXd q, std::vector<double> phi)
      : q_(std::move(q)), phi_(std::move(phi)) {}
  Eigen::MatrixXd q_;
  std::vector<double> phi_;
};

// W^p by repeated squaring (O(log |p|) products), |p| <= 2^31. Negative p needs W
// orthogonal (W^-1 = W^T); p = 0 gives I. See the drift note at the top.
absl::StatusOr<Eigen::MatrixXd> MatrixPowerBySquaring(const Eigen::Ref<const Eigen::MatrixXd>& w,
                                                      int64_t p);

// W^0, W^1, ..., W^max_power by log-depth doubling (Kogkalidis et al., sec. 3.1): round
// r computes W^(2^r) and then W^(2^r + i) = W^(2^r) W^i for all i < 2^r at once, so the
// dependency depth is ceil(log2 P) products. ResourceExhausted when the result would
// exceed 2^27 doubles (1 GiB).
absl::StatusOr<std::vector<Eigen::MatrixXd>> AllPowers(const Eigen::Ref<const Eigen::MatrixXd>& w,
                                                       int64_t max_power);

// Frechet derivative of exp at S in direction E: L(S, E) = d/dt exp(S + t E) at t = 0,
// the upper-right block of exp([[S, E], [0, S]]) (Higham, Functions of Matrices, 3.2).
// S, E square of equal size (S need not be skew).
absl::StatusOr<Eigen::MatrixXd> ExpFrechet(const Eigen::Ref<const Eigen::MatrixXd>& s,
                                           const Eigen::Ref<const Eigen::MatrixXd>& e);

// Vector-Jacobian product of exp: for a loss l with upstream gradient G = dl/d exp(S),
// returns dl/dS = L(S^T, G) (entrywise, unprojected). For a skew parametrisation
// S = A - A^T the gradient with respect to A is X - X^T, X the returned matrix.
absl::StatusOr<Eigen::MatrixXd> ExpVjp(const Eigen::Ref<const Eigen::MatrixXd>& s,
                                       const Eigen::Ref<const Eigen::MatrixXd>& upstream);

}  // namespace group
}  // namespace gpe

#endif  // GROUP_SO_DENSE_H_
