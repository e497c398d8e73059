// Commuting plane rotations in SO(d): RoPE and the Z_n (periodic) encoding.
//
// The generator is a sum of rank-2 generators on disjoint coordinate planes,
// S = sum_i theta_i L_i (RoPE as Multiplicative GRAPE, Zhang et al.), so
// G(p) = exp(p S) is a product of
// independent 2x2 rotations and costs O(d) per vector.
//
// Conventions (shared with the C ABI):
// - Vectors are rows of `dim` contiguous elements; vector j of a batch starts at
//   ptr + j * stride (stride in elements, >= dim when the batch has > 1 vector).
// - Only the first rotary_dim coordinates rotate (rotary_dim even, <= dim); the rest
//   pass through unchanged. Plane i pairs coordinates
//     kInterleaved: (2i, 2i + 1)          kHalfSplit: (i, i + rotary_dim / 2).
// - Rotation of the pair (x1, x2) by angle a = p * theta_i (counter-clockwise):
//     (x1 cos a - x2 sin a,  x1 sin a + x2 cos a),
//   i.e. the 2x2 block [[cos a, -sin a], [sin a, cos a]] = exp(a J), J = [[0,-1],[1,0]].
// - Angles are formed by exact reduction in double (angle.h), cos/sin in double,
//   the products in double, rounded once to T. Apply allows in == out.
#ifndef GROUP_SO_PLANES_H_
#define GROUP_SO_PLANES_H_

#include <cstdint>
#include <utility>
#include <vector>

#include <Eigen/Dense>
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace gpe {
namespace group {

enum class PlanePairing {
  kInterleaved,  // (2i, 2i+1): Su et al.'s original layout, GPT-J
  kHalfSplit,    // (i, i + r/2): GPT-NeoX / Llama layout
};

// Which coordinates rotate and how they pair; validated once, shared by both classes.
class PlaneLayout {
 public:
  // rotary_dim even, 0 < rotary_dim <= dim.
  static absl::StatusOr<PlaneLayout> Create(int64_t dim, int64_t rotary_dim,
                                            PlanePairing pairing);
  int64_t dim() const { return dim_; }
  int64_t rotary_dim() const { return rotary_dim_; }
  int64_t num_planes() const { return rotary_dim_ / 2; }
  PlanePairing pairing() const { return pairing_; }
  int64_t first(int64_t plane) const {
    return pairing_ == PlanePairing::kInterleaved ? 2 * plane : plane;
  }
  int64_t second(int64_t plane) const {
    return pairing_ == PlanePairing::kInterleaved ? 2 * plane + 1 : plane + rotary_dim_ / 2;
  }

 private:
  PlaneLayout(int64_t dim, int64_t rotary_dim, PlanePairing pairing)
      : dim_(dim), rotary_dim_(rotary_dim), pairing_(pairing) {}
  int64_t dim_;
  int64_t rotary_dim_;
  PlanePairing pairing_;
};

// RoPE as a representation of Z: plane i rotates by p * thetas[i].
class CommutingPlanes {
 public:
  using Element = int64_t;  // position

  // thetas.size() == rotary_dim / 2, every theta finite (radians per position).
  static absl::StatusOr<CommutingPlanes> Create(int64_t dim, int64_t rotary_dim,
                                                std::vector<double> thetas,
                                                PlanePairing pairing);

  int64_t dim() const { return layout_.dim(); }
  const PlaneLayout& layout() const { return layout_; }
  absl::Span<const double> thetas() const { return thetas_; }

  // The skew generator S (dim x dim) with Matrix(p) = exp(p S).
  Eigen::MatrixXd Generator() const;
  // rho(p), dim x dim.
  Eigen::MatrixXd Matrix(int64_t p) const;

  // out_j = rho(positions[j]) in_j for j < positions.size(); T is float or double.
  template <class T>
  absl::Status Apply(absl::Span<const int64_t> positions, const T* in, int64_t in_stride,
                     T* out, int64_t out_stride) const;

 private:
  CommutingPlanes(PlaneLayout layout, std::vector<double> thetas)
      : layout_(layout), thetas_(std::move(thetas)) {}
  PlaneLayout layout_;
  std::vector<double> thetas_;
};

// A representation of Z_n (periodic positions): plane i rotates by
// 2 pi * multipliers[i] * p / n, computed from the exact residue of multipliers[i] * p
// mod n, so rho(p + n) == rho(p) bit for bit and rho(n) = I to rounding.
// Kogkalidis et al., sec. 3.4: periodic domains need W^n = I. Any int64 p is
// accepted (Z -> Z_n is applied first).
class CyclicPlanes {
 public:
  using Element = int64_t;

  // n >= 1, multipliers.size() == rotary_dim / 2.
  static absl::StatusOr<CyclicPlanes> Create(int64_t dim, int64_t rotary_dim, int64_t n,
                                             std::vector<int64_t> multipliers,
                                             PlanePairing pairing);

  int64_t dim() const { return layout_.dim(); }
  int64_t order() const { return n_; }
  const PlaneLayout& layout() const { return layout_; }
  absl::Span<const int64_t> multipliers() const { return multipliers_; }

  Eigen::MatrixXd Generator() const;  // exp(n S) = I
  Eigen::MatrixXd Matrix(int64_t p) const;
  template <class T>
  absl::Status Apply(absl::Span<const int64_t> positions, const T* in, int64_t in_stride,
                     T* out, int64_t out_stride) const;

 private:
  CyclicPlanes(PlaneLayout layout, int64_t n, std::vector<int64_t> multipliers)
      : layout_(layout), n_(n), multipliers_(std::move(multipliers)) {}
  PlaneLayout layout_;
  int64_t n_;
  std::vector<int64_t> multipliers_;
};

}  // namespace group
}  // namespace gpe

#endif  // GROUP_SO_PLANES_H_
