// Rank-2 rotations in SO(d) (GRAPE-M with one rank-2 generator), applied in O(d).
//
// Generator L = a b^T - b a^T (Zhang et al., GRAPE's L(a, b)); position p acts by
// G(p) = exp(p omega L). With s0 = sqrt(|a|^2 |b|^2 - (a.b)^2) (the norm of a wedge b),
// L^2 = -s0^2 on span{a, b}, and the Rodrigues-type closed form
//   exp(p omega L) = I + (sin s / s) p omega L + ((1 - cos s) / s^2) (p omega L)^2,
//   s = |p omega| s0
// rotates span{a, b} by the angle theta = p * phi, phi = omega * s0, and fixes its
// orthogonal complement. With u = a/|a| and v the unit vector along b's component
// orthogonal to a, the rotation moves u toward -v:
//   G(p) x = x + (cos theta - 1)(u u^T + v v^T) x + sin theta (u v^T - v u^T) x.
// theta is reduced exactly in double (angle.h), so G(p) is orthogonal at any int64 p.
//
// Degenerate generators (a = 0, b = 0, or b's component orthogonal to a below 1e-15 of
// |b|, a plane that double a and b do not determine beyond rounding) are taken as L = 0
// whatever omega: G(p) = I and Generator() = 0. (An exactly given b at 5e-16 of a's
// direction under omega = 1e14 would rotate by 0.05 rad per position; such a generator
// is below what this representation resolves.)
//
// Batch conventions (row vectors, strides in elements, in == out allowed) are those
// of so_planes.h.
#ifndef GROUP_SO_RANK2_H_
#define GROUP_SO_RANK2_H_

#include <cstdint>
#include <vector>

#include <Eigen/Dense>
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace gpe {
namespace group {

class Rank2Rotation {
 public:
  using Element = int64_t;

  // a and b of equal size d >= 2, finite; omega finite; |a|^2, |b|^2 and the angle per
  // position phi = omega |a ^ b| within double's range (InvalidArgument otherwise).
  static absl::StatusOr<Rank2Rotation> Create(std::vector<double> a, std::vector<double> b,
                                              double omega);

  int64_t dim() const { return static_cast<int64_t>(a_.size()); }
  absl::Span<const double> a() const { return a_; }
  absl::Span<const double> b() const { return b_; }
  double omega() const { return omega_; }
  // s0 = |a ^ b| and the angle per unit position, phi = omega * s0.
  double plane_norm() const { return s0_; }
  double frequency() const { return phi_; }
  bool degenerate() const { return s0_ == 0.0; }
  // The orthonormal basis (u, v) of span{a, b} the rotation turns (empty when degenerate):
  // G(p) x = x + ((c - 1)(u.x) + s (v.x)) u + ((c - 1)(v.x) - s (u.x)) v, (c, s) the
  // cos and sin of p frequency() (SinCosOfMultiple).
  absl::Span<const double> u() const { return u_; }
  absl::Span<const double> v() const { return v_; }

  // omega * L, dim x dim.
  Eigen::MatrixXd Generator() const;
  // G(p), dim x dim.
  Eigen::MatrixXd Matrix(int64_t p) const;

  // out_j = G(positions[j]) in_j; T is float or double (arithmetic in double).
  template <class T>
  absl::Status Apply(absl::Span<const int64_t> positions, const T* in, int64_t in_stride,
                     T* out, int64_t out_stride) const;

  // Gradients of a scalar loss l through out_j = G(p_j) in_j, given dl/dout_j.
  struct Gradients {
    std::vector<double> a;  // dl/da, summed over the batch
    std::vector<double> b;  // dl/db, summed over the batch
    double omega = 0.0;     // dl/domega, summed over the batch
  };
  // Vector-Jacobian product. Overwrites *grads. If grad_in is non-null it receives
  // dl/din_j = G(p_j)^T grad_out_j (may alias grad_out exactly). Derivatives are
  // taken through the closed form in (a, b, omega); they are exact (finite) at
  // a parallel to b as well, where L = 0 but its derivative is not.
  template <class T>
  absl::Status Backward(absl::Span<const int64_t> positions, const T* in, int64_t in_stride,
                        const T* grad_out, int64_t grad_out_stride, T* grad_in,
                        int64_t grad_in_stride, Gradients* grads) const;

 private:
  Rank2Rotation() = default;
  std::vector<double> a_, b_;
  double omega_ = 0.0;
  // Orthonormal basis of span{a, b} (empty when degenerate).
  std::vector<double> u_, v_;
  double s0_ = 0.0;
  double phi_ = 0.0;
};

}  // namespace group
}  // namespace gpe

#endif  // GROUP_SO_RANK2_H_
