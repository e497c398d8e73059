// Multiplicative GRAPE (GRAPE-M; Zhang et al., "Group Representational Position
// Encoding", arXiv 2512.07805): position n acts on queries and keys by
// G(n) = exp(n omega L) in SO(d), with rank-2 skew generators L(a, b) = a b^T - b a^T
// (group/so_rank2.h for the closed form).
//
// Two families:
//
// 1. GrapeMCommutingPlanes: rank-2 generators on disjoint coordinate planes,
//    L_RoPE = sum_k omega_k L_k (GRAPE's form of RoPE). Because the planes are disjoint
//    the L_k commute and G(n) = prod_k exp(n omega_k L_k) exactly: a homomorphism of Z,
//    so <G(i) q, G(j) k> = <q, G(j - i) k>. Applied in O(d).
//    Sign convention. L(a, b) rotates a toward -b (exp(t L(a, b)) a = cos t a - sin t b
//    for orthonormal a, b), whereas RoPE's block exp(t J), J = [[0, -1], [1, 0]], rotates
//    e_first toward +e_second. A plane {first, second, omega} here therefore means the
//    generator omega L(e_second, e_first) = omega (e_second e_first^T - e_first e_second^T),
//    which is exactly RoPE's block: with first = 2i, second = 2i + 1, omega = theta_i
//    the encoding equals group::CommutingPlanes bit for bit (FromRoPE, and the test).
//    Written in GRAPE's L(a, b), RoPE is a = e_{2i+1}, b = e_{2i}, omega = theta_i
//    (equivalently a = e_{2i}, b = e_{2i+1}, omega = -theta_i).
//
// 2. GrapeMProduct: learned, generally non-commuting rank-2 generators (a_k, b_k, omega_k),
//    G(n) = G_1(n) G_2(n) ... G_m(n), G_k(n) = exp(n omega_k L(a_k, b_k)), applied in
//    O(m d) per vector (G_m first). Each factor is orthogonal, so G(n) is orthogonal and
//    preserves norms. But when the L_k do not commute, G(n) G(n') != G(n + n') in
//    general: the product is NOT a group homomorphism of Z, and the score
//    <G(i) q, G(j) k> is not a function of j - i alone. This is the GRAPE paper's
//    treatment of non-commuting generators (a richer, learned coupling across planes at
//    the cost of exact relativity); exact relativity holds for m = 1, or when the planes
//    of all generators are mutually orthogonal. If exact relativity is required with
//    non-commuting planes, use a single generator S = sum_k omega_k L_k through
//    group::SchurRotation (exp(n S), O(d^2)).
//
// Batch conventions (row vectors of dim elements, strides in elements, in == out
// allowed) are those of group/so_planes.h. Arithmetic is in double; outputs are
// rounded once to T (float or double).
#ifndef ENCODINGS_SEQUENCE_GRAPE_M_H_
#define ENCODINGS_SEQUENCE_GRAPE_M_H_

#include <cstdint>
#include <utility>
#include <vector>

#include <Eigen/Dense>
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "group/so_planes.h"
#include "group/so_rank2.h"

namespace gpe {
namespace encodings {
namespace sequence {

// One commuting plane: rotates coordinate `first` toward `second` by n * omega.
struct CoordinatePlane {
  int64_t first = 0;
  int64_t second = 0;
  double omega = 0.0;
};

class GrapeMCommutingPlanes {
 public:
  using Element = int64_t;

  // dim >= 2; every plane's coordinates in [0, dim), first != second, no coordinate used
  // by two planes (disjointness is what makes the generators commute); omega finite.
  // Coordinates in no plane pass through unchanged.
  static absl::StatusOr<GrapeMCommutingPlanes> Create(int64_t dim,
                                                      std::vector<CoordinatePlane> planes);
  // The canonical choice that reproduces RoPE: plane i is (layout.first(i),
  // layout.second(i), thetas[i]).
  static absl::StatusOr<GrapeMCommutingPlanes> FromRoPE(const group::CommutingPlanes& rope);

  int64_t dim() const { return dim_; }
  absl::Span<const CoordinatePlane> planes() const { return planes_; }

  // sum_k omega_k L(e_second, e_first) and G(n) = exp(n * that), dim x dim.
  Eigen::MatrixXd Generator() const;
  Eigen::MatrixXd Matrix(int64_t n) const;

  // out_j = G(positions[j]) in_j.
  template <class T>
  absl::Status Apply(absl::Span<const int64_t> positions, const T* in, int64_t in_stride,
                     T* out, int64_t out_stride) const;

  // Backward of Apply for a loss l, given dl/dout_j. grad_omega (resized to
  // planes().size(), overwritten) receives dl/domega_k summed over the batch; grad_in, if
  // non-null, receives dl/din_j = G(p_j)^T grad_out_j (may alias grad_out exactly).
  // dl/domega_k = sum_j p_j (g_second y_first - g_first y_second), y = out_j.
  template <class T>
  absl::Status Backward(absl::Span<const int64_t> positions, const T* in, int64_t in_stride,
                        const T* grad_out, int64_t grad_out_stride, T* grad_in,
                        int64_t grad_in_stride, std::vector<double>* grad_omega) const;

 private:
  GrapeMCommutingPlanes(int64_t dim, std::vector<CoordinatePlane> planes)
      : dim_(dim), planes_(std::move(planes)) {}
  int64_t dim_;
  std::vector<CoordinatePlane> planes_;
};

// A learned rank-2 generator omega * L(a, b).
struct Rank2Generator {
  std::vector<double> a;
  std::vector<double> b;
  double omega = 0.0;
};

class GrapeMProduct {
 public:
  using Element = int64_t;

  // At least one generator; all a_k, b_k of one size d >= 2, finite; omega_k finite.
  static absl::StatusOr<GrapeMProduct> Create(std::vector<Rank2Generator> generators);

  int64_t dim() const { return factors_[0].dim(); }
  int64_t num_generators() const { return static_cast<int64_t>(factors_.size()); }
  // G_k as a group::Rank2Rotation (k = 0 is the leftmost factor G_1).
  const group::Rank2Rotation& factor(int64_t k) const { return factors_[k]; }

  // G(n) = G_1(n) ... G_m(n), dim x dim.
  Eigen::MatrixXd Matrix(int64_t n) const;

  // out_j = G(positions[j]) in_j, O(m d) per vector.
  template <class T>
  absl::Status Apply(absl::Span<const int64_t> positions, const T* in, int64_t in_stride,
                     T* out, int64_t out_stride) const;

  // Backward of Apply: grads->generators[k] receives dl/da_k, dl/db_k, dl/domega_k
  // (summed over the batch; overwritten), and grad_in, if non-null, dl/din_j (may alias
  // grad_out exactly). The chain runs through the product: with z_{m+1} = x and
  // z_k = G_k z_{k+1}, the upstream gradient of factor k is G_{k-1}^T ... G_1^T g, and
  // each factor's parameter gradients come from group::Rank2Rotation::Backward at its own
  // input z_{k+1}. Memory O(m n d) doubles for the stored intermediates.
  struct Gradients {
    std::vector<group::Rank2Rotation::Gradients> generators;
  };
  template <class T>
  absl::Status Backward(absl::Span<const int64_t> positions, const T* in, int64_t in_stride,
                        const T* grad_out, int64_t grad_out_stride, T* grad_in,
                        int64_t grad_in_stride, Gradients* grads) const;

 private:
  explicit GrapeMProduct(std::vector<group::Rank2Rotation> factors)
      : factors_(std::move(factors)) {}
  std::vector<group::Rank2Rotation> factors_;
};

}  // namespace sequence
}  // namespace encodings
}  // namespace gpe

#endif  // ENCODINGS_SEQUENCE_GRAPE_M_H_
