// Algebraic orthogonal positional encodings (Kogkalidis, Bernardy, Garg, "Algebraic
// Positional Encodings"): a position is a group element (a path), its
// encoding an orthogonal matrix, applied to queries and keys alike so that
//   <rho(g) q, rho(h) k> = <q, rho(g^-1 h) k>     (sec. 3.1.3, 3.2.2)
// and the score depends only on the relative path. Every structure here is built on
// group/ and reaches attention as a row transform (docs/ARCHITECTURE.md, "Row transforms
// (multiplicative)"):
//
// - Sequences (sec. 3.1): W = exp(S) for a learned skew S, position p -> W^p = exp(p S),
//   applied through group::SchurRotation (angles p * phi_k reduced exactly), orthogonal
//   at any int64 p. Backward gives dl/dS through group::ExpVjp.
// - Trees (sec. 3.2): k-ary tree addresses are words of the free group on k generators
//   (group::FreeGroup::FromTreeAddress); generator c is W_c = exp(S_c) and a node's
//   matrix is the path product W_{c_1} ... W_{c_m} (group::FreeGroupRepresentation).
//   AllNodeMatrices builds every node of depth <= D one depth at a time (sec. 3.2.3).
// - Grids (sec. 3.3): direct sums over axes, blockdiag(H^x, W^y) (group/direct_sum.h);
//   the score splits into a sum of per-axis relative terms.
// - Periodic domains (sec. 3.4.2): W^n = I through group::CyclicPlanes (angles
//   2 pi m_k / n from exact integer residues).
// - Locality (sec. 4, "practical tricks"): the score of tokens p steps apart is scaled by
//   c^p (c = 0.98 in the paper). It multiplies the score and cannot be folded into q or
//   k separately, so it is a per-tile score factor (LocalityFactor, ApplyLocalityScaling).
//
// Batch conventions (row vectors of dim elements, strides in elements, in == out
// allowed) are those of group/so_planes.h; arithmetic is in double, outputs are rounded
// once to T (float or double).
#ifndef ENCODINGS_SEQUENCE_ALGEBRAIC_H_
#define ENCODINGS_SEQUENCE_ALGEBRAIC_H_

#include <cstdint>
#include <utility>
#include <vector>

#include <Eigen/Dense>
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "group/direct_sum.h"
#include "group/free_group.h"
#include "group/free_representation.h"
#include "group/so_dense.h"
#include "group/so_planes.h"

namespace gpe {
namespace encodings {
namespace sequence {

// ---------------------------------------------------------------------------------
// Sequences
// ---------------------------------------------------------------------------------

class AlgebraicSequence {
 public:
  using Element = int64_t;

  // skew: d x d (d >= 1), finite, skew-symmetric (group::ValidateSkew).
  static absl::StatusOr<AlgebraicSequence> Create(const Eigen::Ref<const Eigen::MatrixXd>& skew);

  int64_t dim() const { return skew_.rows(); }
  const Eigen::MatrixXd& skew() const { return skew_; }
  const group::SchurRotation& rotation() const { return rotation_; }

  // W^p = exp(p S), d x d.
  Eigen::MatrixXd Matrix(int64_t p) const { return rotation_.Matrix(p); }

  // out_j = W^{positions[j]} in_j.
  template <class T>
  absl::Status Apply(absl::Span<const int64_t> positions, const T* in, int64_t in_stride,
                     T* out, int64_t out_stride) const;

  // Backward of Apply for a loss l given dl/dout_j.
  // grad_skew (resized to d x d, overwritten) receives dl/dS, entrywise and unprojected:
  // dl/dS = sum_j p_j ExpVjp(p_j S, g_j x_j^T) (group/so_dense.h's convention). For the
  // skew parametrisation S = A - A^T the gradient in A is X - X^T, X = *grad_skew.
  // grad_in, if non-null, receives dl/din_j = W^{-p_j} g_j (may alias grad_out exactly).
  // The Frechet derivative is evaluated through the Schur route (the eigenbasis of S,
  // Daleckii-Krein divided differences of exp), with every e^{i p phi_k} from an
  // exactly reduced angle: finite and accurate at any int64 p, O(d^2) per vector plus
  // O(d^3) once. (group::ExpVjp on p S by scaling and squaring loses accuracy like
  // eps |p S| and overflows at extreme p; the tests compare the two at moderate p.)
  template <class T>
  absl::Status Backward(absl::Span<const int64_t> positions, const T* in, int64_t in_stride,
                        const T* grad_out, int64_t grad_out_stride, T* grad_in,
                        int64_t grad_in_stride, Eigen::MatrixXd* grad_skew) const;

 private:
  AlgebraicSequence(Eigen::MatrixXd skew, group::SchurRotation rotation)
      : skew_(std::move(skew)), rotation_(std::move(rotation)) {}
  Eigen::MatrixXd skew_;
  group::SchurRotation rotation_;
};

// ---------------------------------------------------------------------------------
// Trees
// ---------------------------------------------------------------------------------

class AlgebraicTree {
 public:
  using Address = std::vector<int64_t>;  // 0-based child indices from the root

  // One skew d x d generator per branch (k = skew_generators.size() >= 1): W_c = exp(S_c).
  static absl::StatusOr<AlgebraicTree> Create(const std::vector<Eigen::MatrixXd>& skew_generators);

  int32_t branching() const { return representation_.num_generators(); }
  int64_t dim() const { return representation_.dim(); }
  const group::FreeGroupRepresentation& representation() const { return representation_; }

  // The free-group word of a tree address (every index in [0, k)).
  absl::StatusOr<group::FreeWord> Word(absl::Span<const int64_t> address) const;
  // rho(address) = W_{c_1 + 1} ... W_{c_m + 1}.
  absl::StatusOr<Eigen::MatrixXd> Matrix(absl::Span<const int64_t> address) const;

  // out_j = rho(addresses[j]) in_j, O(depth d^2) per vector.
  template <class T>
  absl::Status Apply(absl::Span<const Address> addresses, const T* in, int64_t in_stride, T* out,
                     int64_t out_stride) const;

  // Matrices of every node of depth <= max_depth in level order (root first; within a
  // depth, addresses in lexicographic order, i.e. as base-k numbers), built one depth
  // at a time: level t + 1 is level t right-multiplied by each W_c (sec. 3.2.3), so the
  // whole table costs one d x d product per node. ResourceExhausted beyond 2^27 doubles.
  absl::StatusOr<std::vector<Eigen::MatrixXd>> AllNodeMatrices(int64_t max_depth) const;
  // The number of nodes of depth <= max_depth (AllNodeMatrices' length), with its
  // refusals (max_depth < 0; a table past 2^27 doubles), computing no matrix.
  absl::StatusOr<int64_t> NumNodes(int64_t max_depth) const;
  // Backward of Apply for a loss l given dl/dout_j (Kogkalidis et al. learn the branch
  // generators by gradient descent, sec. 3.2 and appendix). Node j's matrix is the path
  // product W_{c_1} ... W_{c_m}; with z_{m+1} = x_j, z_s = W_{c_s} z_{s+1} (so out_j = z_1)
  // and a_1 = g_j, a_{s+1} = W_{c_s}^T a_s, the gradient in W_c sums a_s z_{s+1}^T over the
  // steps s with c_s = c, over all vectors; dl/dS_c = ExpVjp(S_c, that sum)
  // (group/so_dense.h: entrywise, unprojected; for S = A - A^T, dl/dA = X - X^T). One
  // O(d^3) Frechet derivative per branch, O(depth d^2) per vector.
  // grad_skews is resized to branching() matrices (d x d, overwritten). grad_in, if
  // non-null, receives rho(address_j)^T g_j and may alias grad_out exactly.
  template <class T>
  absl::Status Backward(absl::Span<const Address> addresses, const T* in, int64_t in_stride,
                        const T* grad_out, int64_t grad_out_stride, T* grad_in,
                        int64_t grad_in_stride, std::vector<Eigen::MatrixXd>* grad_skews) const;

  // The index of an address in AllNodeMatrices' order: (k^m - 1) / (k - 1) + sum_s c_s
  // k^(m-1-s) for depth m (m for k = 1). OutOfRange if it does not fit in int64.
  absl::StatusOr<int64_t> LevelOrderIndex(absl::Span<const int64_t> address) const;

 private:
  AlgebraicTree(group::FreeGroupRepresentation representation, std::vector<Eigen::MatrixXd> skews)
      : representation_(std::move(representation)), skews_(std::move(skews)) {}
  group::FreeGroupRepresentation representation_;
  std::vector<Eigen::MatrixXd> skews_;  // S_c, for the backward pass
};

// ---------------------------------------------------------------------------------
// Grids and periodic domains
// ---------------------------------------------------------------------------------

// A 2D grid position (x, y) acts by blockdiag(H^x, W^y), H = exp(S_x) on the first
// dim(S_x) coordinates and W = exp(S_y) on the next dim(S_y) (sec. 3.3.2). Elements are
// std::tuple<int64_t, int64_t>.
using AlgebraicGrid2D = group::DirectSum<group::SchurRotation, group::SchurRotation>;
absl::StatusOr<AlgebraicGrid2D> MakeAlgebraicGrid2D(const Eigen::Ref<const Eigen::MatrixXd>& skew_x,
                                                    const Eigen::Ref<const Eigen::MatrixXd>& skew_y);
// Three axes (e.g. video: time, height, width).
using AlgebraicGrid3D =
    group::DirectSum<group::SchurRotation, group::SchurRotation, group::SchurRotation>;
absl::StatusOr<AlgebraicGrid3D> MakeAlgebraicGrid3D(const Eigen::Ref<const Eigen::MatrixXd>& skew_x,
                                                    const Eigen::Ref<const Eigen::MatrixXd>& skew_y,
                                                    const Eigen::Ref<const Eigen::MatrixXd>& skew_z);

// Backward of a grid's Apply (any number of axes): the grid acts on coordinates
// [offset_a, offset_a + dim_a) of each vector by axis a's W_a^{p_a} (offsets are the
// running sums of the axes' dims, as in MakeAlgebraicGrid2D/3D), so the backward is
// AlgebraicSequence::Backward on each block: grad_skews[a] = dl/dS_a (entrywise,
// unprojected), grad_in (optional, may alias grad_out exactly) = blockdiag(W_a^{-p_a}) g.
// positions: n x axes.size(), row-major (vector j's coordinate on axis a at
// positions[j * axes.size() + a]).
template <class T>
absl::Status AlgebraicGridBackward(absl::Span<const AlgebraicSequence> axes,
                                   absl::Span<const int64_t> positions, const T* in,
                                   int64_t in_stride, const T* grad_out, int64_t grad_out_stride,
                                   T* grad_in, int64_t grad_in_stride,
                                   std::vector<Eigen::MatrixXd>* grad_skews);

// Compositions (sec. 3.4.3): a product of the groups above is represented by the direct
// sum of their representations, so structures nest freely. A sequence of trees (token
// p of a sequence whose items are tree nodes t, e.g. a list of parse trees) acts by
// blockdiag(W^p, rho(t)); a tree of grids (a tree node t carrying an image position
// (x, y)) by blockdiag(rho(t), H^x, V^y). Scores split into a sequence (or grid) term
// that depends on the offset and a tree term that depends on the path t^-1 t'. Tree
// components take free-group words (AlgebraicTree::Word turns an address into one).
// Gradients are per block: AlgebraicSequence::Backward and AlgebraicTree::Backward on
// each component's coordinates (as AlgebraicGridBackward does for grids).
using AlgebraicSequenceOfTrees =
    group::DirectSum<group::SchurRotation, group::FreeGroupRepresentation>;
absl::StatusOr<AlgebraicSequenceOfTrees> MakeAlgebraicSequenceOfTrees(
    const Eigen::Ref<const Eigen::MatrixXd>& sequence_skew,
    const std::vector<Eigen::MatrixXd>& tree_skews);
using AlgebraicTreeOfGrids =
    group::DirectSum<group::FreeGroupRepresentation, group::SchurRotation, group::SchurRotation>;
absl::StatusOr<AlgebraicTreeOfGrids> MakeAlgebraicTreeOfGrids(
    const std::vector<Eigen::MatrixXd>& tree_skews, const Eigen::Ref<const Eigen::MatrixXd>& skew_x,
    const Eigen::Ref<const Eigen::MatrixXd>& skew_y);

// A periodic domain of period n (a ring of n sites): plane k (coordinates 2k, 2k + 1)
// rotates by 2 pi multipliers[k] p / n, so W^n = I and positions p and p + n encode
// identically (sec. 3.4.2). dim >= 2 even; multipliers.size() == dim / 2; n >= 1.
absl::StatusOr<group::CyclicPlanes> MakeAlgebraicPeriodic(int64_t dim, int64_t n,
                                                          std::vector<int64_t> multipliers);

// ---------------------------------------------------------------------------------
// Locality scaling
// ---------------------------------------------------------------------------------

// c^distance for c in (0, 1], any distance (computed as exp(distance ln c) in double;
// underflows to 0 for very distant tokens, never NaN). InvalidArgument for c outside
// (0, 1] or non-finite.
absl::StatusOr<double> LocalityFactor(uint64_t distance, double c);

// scores[a * stride + b] *= c^|query_positions[a] - key_positions[b]| for a tile of
// query_positions.size() x key_positions.size() scores (row-major, stride in elements,
// >= number of keys when there is more than one row). |i - j| is formed exactly in
// unsigned arithmetic (no int64 overflow). T is float or double.
template <class T>
absl::Status ApplyLocalityScaling(absl::Span<const int64_t> query_positions,
                                  absl::Span<const int64_t> key_positions, double c, T* scores,
                                  int64_t stride);

}  // namespace sequence
}  // namespace encodings
}  // namespace gpe

#endif  // ENCODINGS_SEQUENCE_ALGEBRAIC_H_
