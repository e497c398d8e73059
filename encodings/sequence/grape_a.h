// GRAPE-A: additive biases as unipotent actions on lifted queries and keys (Zhang et al.,
// "Group Representational Position Encoding", arXiv 2512.07805, Additive GRAPE).
//
// Lift: d-dimensional rows go to d + 2 dimensions (two extra slots, indices d and d+1):
//   q~ = [q; 1; 0],   k~ = [k; 0; 1],   so <q~, k~> = <q, k>.
// Generator A = E_{d, d+1} ((d+2) x (d+2), a single 1 in row d, column d+1); A^2 = 0, so
// G(p) = exp(p m A) = I + p m A (group/unipotent.h), and <q~, A k~> = 1.
// A query at position i is transformed by G(i)^-T and a key at j by G(j), giving
//   <G(i)^-T q~, G(j) k~> = q~^T G(j - i) k~ = <q, k> + m (j - i) = <q, k> - m (i - j),
// ALiBi's causal bias with Press et al.'s sign (bias.h). In closed form the lifted
// rows are [q; 1; -m i] and [k; m j; 1]. Two extra dimensions are needed because a
// single homogeneous slot would have to carry both the constant 1 of q~ and of k~
// (adding 1 to every score) and be the source and target of A (not nilpotent). The
// symmetric form -m |i - j| is not a one-parameter group action and has no such lift.
//
// Content-gated case (FoX): replace the clock m * p by the prefix sum c_t of log forget
// gates. The key at j is transformed by the ordered path product of unipotent steps
// exp(-ln f_l A), l = first..j (= I - c_j A, since A^2 = 0), the query by the inverse
// transpose of its own path product: rows [q; 1; c_i] and [k; -c_j; 1], score
// <q, k> + c_i - c_j, FoX's bias (GRAPE-AP with a cost that depends on l alone).
//
// Layout: rows of `head_dim` (input) and `head_dim + 2` (output) elements, row stride in
// elements, T float or double (formed in double, rounded once). Cost: the ALiBi lift
// applies group/unipotent.h's dense representation, O((d+2)^2) per row; it is an
// equivalence construction (and a way to run ALiBi through a plain dot-product kernel),
// not the fast path: attention kernels take GrapeABias (below), whose tiles are filled
// in closed form. Precision: the lifted score forms m j - m i as a difference of two
// products, so its error grows like eps * m * |i| (compared with eps * m * |i - j| for
// AlibiBias); with power-of-two slopes and |positions| < 2^53 every term is exact in
// double.
#ifndef ENCODINGS_SEQUENCE_GRAPE_A_H_
#define ENCODINGS_SEQUENCE_GRAPE_A_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include <Eigen/Dense>
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "encodings/sequence/bias.h"
#include "group/unipotent.h"

namespace gpe {
namespace encodings {
namespace sequence {

// A = E_{d, d+1}, (d+2) x (d+2). head_dim >= 1.
Eigen::MatrixXd GrapeAGenerator(int64_t head_dim);

// One head of ALiBi as a unipotent lift.
class GrapeALift {
 public:
  // head_dim >= 1, slope finite.
  static absl::StatusOr<GrapeALift> Create(int64_t head_dim, double slope);
  // The causal ALiBi bias's slope for `head` (errors on the symmetric form).
  static absl::StatusOr<GrapeALift> FromAlibi(const AlibiBias& alibi, int64_t head,
                                              int64_t head_dim);

  int64_t head_dim() const { return head_dim_; }
  int64_t lifted_dim() const { return head_dim_ + 2; }
  double slope() const { return slope_; }

  // out_r = G(i_r)^-T [q_r; 1; 0] = [q_r; 1; -m i_r].
  template <class T>
  absl::Status LiftQueries(absl::Span<const int64_t> positions, const T* q, int64_t q_stride,
                           T* out, int64_t out_stride) const;
  // out_r = G(j_r) [k_r; 0; 1] = [k_r; m j_r; 1].
  template <class T>
  absl::Status LiftKeys(absl::Span<const int64_t> positions, const T* k, int64_t k_stride, T* out,
                        int64_t out_stride) const;

 private:
  GrapeALift(int64_t head_dim, double slope, group::UnipotentRepresentation query_rep,
             group::UnipotentRepresentation key_rep)
      : head_dim_(head_dim),
        slope_(slope),
        query_rep_(std::move(query_rep)),
        key_rep_(std::move(key_rep)) {}
  int64_t head_dim_;
  double slope_;
  group::UnipotentRepresentation query_rep_;  // generator A^T, omega -m: G(i)^-T
  group::UnipotentRepresentation key_rep_;    // generator A, omega m: G(j)
};

// FoX (one head of a FoxBias) as the content-gated unipotent lift. The lifted rows carry
// the prefix sums rounded to one double each (FoxBias::PrefixSum), so their dot product
// is c_i - c_j to within half an ulp of |c_i| and of |c_j|; FoxBias's own tiles (and
// GrapeABias's closed form) take the difference in double-double, exact to ~1e-16 of
// |c_i - c_j| however large |c| grows (issue 24).
class GrapeAGatedLift {
 public:
  // fox must outlive the lift. head in [0, fox.num_heads()), head_dim >= 1.
  static absl::StatusOr<GrapeAGatedLift> Create(const FoxBias* fox, int64_t head, int64_t head_dim);

  int64_t head_dim() const { return head_dim_; }
  int64_t lifted_dim() const { return head_dim_ + 2; }

  // out_r = [q_r; 1; c_{i_r}]. Positions must lie in the FoX sequence's range.
  template <class T>
  absl::Status LiftQueries(absl::Span<const int64_t> positions, const T* q, int64_t q_stride,
                           T* out, int64_t out_stride) const;
  // out_r = [k_r; -c_{j_r}; 1].
  template <class T>
  absl::Status LiftKeys(absl::Span<const int64_t> positions, const T* k, int64_t k_stride, T* out,
                        int64_t out_stride) const;

 private:
  GrapeAGatedLift(const FoxBias* fox, int64_t head, int64_t head_dim)
      : fox_(fox), head_(head), head_dim_(head_dim) {}
  template <class T>
  absl::Status Lift(bool query, absl::Span<const int64_t> positions, const T* in, int64_t in_stride,
                    T* out, int64_t out_stride) const;
  const FoxBias* fox_;
  int64_t head_;
  int64_t head_dim_;
};


// ---------------------------------------------------------------------------------
// GRAPE-A as an additive bias (what attention kernels consume: bias.h's tile interface).
// ---------------------------------------------------------------------------------
// The lifted score <G(i)^-T q~, G(j) k~> is <q, k> plus a term that does not depend on q
// or k (A touches only the two homogeneous slots): the bias b_h(i, j). Two ways to fill
// a tile, chosen at creation:
//  - kLifted (the general path): build the lifted rows of zero content at every tile
//    position through the dense unipotent representation (GrapeALift /
//    GrapeAGatedLift above) and take their (d+2)-term dot products. O((m + n) d^2 + m n d)
//    per m x n tile; the definition, kept as the oracle.
//  - kClosedForm (the fast path): the lift is ALiBi-like (the generator is E_{d, d+1}),
//    so the dot product collapses to m_h (j - i) = -m_h (i - j), formed exactly as
//    AlibiBias forms it (one rounding of the int64 difference, one product), or, gated,
//    to c_i - c_j read from FoxBias's prefix sums. O(1) per score, no lifted rows.
// Both paths give the same values: bit for bit for power-of-two slopes (the lifted dot
// adds exact zeros around the same terms), otherwise within the lift's rounding of
// m j - m i (eps m max(|i|, |j|)); gated, within 2^-52 max |c| (the lifted rows carry the
// prefix sums rounded to one double each, the closed form subtracts them in
// double-double, as FoxBias does); tested.
enum class GrapeAPath {
  kClosedForm,  // fast path: closed form, no lifted rows
  kLifted,      // general path: lifted rows and their dot products
};

class GrapeABias final : public AdditiveBiasFromFill<GrapeABias> {
 public:
  // ALiBi-like GRAPE-A: one finite slope (GRAPE's omega_h) per head, at least one head;
  // head_dim (>= 1) is the content dimension d of the lift (rows of d + 2 elements).
  // With slopes m_h it equals causal AlibiBias with the same slopes.
  static absl::StatusOr<GrapeABias> Create(std::vector<double> slopes, int64_t head_dim,
                                           GrapeAPath path = GrapeAPath::kClosedForm);
  // The content-gated case: the clock m p replaced by FoX's prefix sums c_t (equals fox).
  static absl::StatusOr<GrapeABias> CreateGated(FoxBias fox, int64_t head_dim,
                                                GrapeAPath path = GrapeAPath::kClosedForm);

  int64_t num_heads() const override;
  bool needs_token_data() const override { return gated(); }
  // The clock's closed form -m (i - j) is a function of i - j; the lifted path's dot
  // product rounds m j - m i, whose error grows with |i| (it is the slow reference), so
  // it does not claim to be relative (no tile by distance from it).
  bool relative() const override { return !gated() && path_ == GrapeAPath::kClosedForm; }
  bool causal() const override { return true; }

  bool gated() const { return fox_ != nullptr; }
  GrapeAPath path() const { return path_; }
  int64_t head_dim() const { return head_dim_; }
  int64_t lifted_dim() const { return head_dim_ + 2; }
  // ALiBi-like only (empty when gated).
  absl::Span<const double> slopes() const {
    return alibi_ ? alibi_->slopes() : absl::Span<const double>();
  }
  // Gated only (null otherwise).
  const FoxBias* fox() const { return fox_.get(); }

  // The lifted rows of `head` (query: G(i)^-T [q; 1; 0]; key: G(j) [k; 0; 1]), through
  // the lifts above: in has head_dim columns, out head_dim + 2; strides in elements.
  template <class T>
  absl::Status LiftQueries(int64_t head, absl::Span<const int64_t> positions, const T* q,
                           int64_t q_stride, T* out, int64_t out_stride) const;
  template <class T>
  absl::Status LiftKeys(int64_t head, absl::Span<const int64_t> positions, const T* k,
                        int64_t k_stride, T* out, int64_t out_stride) const;

  // ALiBi-like: grad_slopes[head] += sum over the tile of dL/db * (j - i) (db/dm_h).
  template <class T>
  absl::Status AccumulateSlopeGradient(int64_t head, absl::Span<const int64_t> q_positions,
                                       absl::Span<const int64_t> k_positions, const T* grad_tile,
                                       int64_t ld, absl::Span<double> grad_slopes) const;
  // Gated: FoxBias::AccumulatePrefixGradient and LogitGradient of the underlying gates.
  template <class T>
  absl::Status AccumulatePrefixGradient(int64_t head, absl::Span<const int64_t> q_positions,
                                        absl::Span<const int64_t> k_positions, const T* grad_tile,
                                        int64_t ld, absl::Span<double> grad_prefix) const;
  absl::StatusOr<std::vector<double>> LogitGradient(absl::Span<const double> grad_prefix) const;

 private:
  friend class AdditiveBiasFromFill<GrapeABias>;
  GrapeABias(std::optional<AlibiBias> alibi, std::shared_ptr<const FoxBias> fox,
             int64_t head_dim, GrapeAPath path)
      : alibi_(std::move(alibi)), fox_(std::move(fox)), head_dim_(head_dim), path_(path) {}
  template <class T>
  absl::Status Fill(int64_t head, absl::Span<const int64_t> q, absl::Span<const int64_t> k,
                    T* out, int64_t ld) const;
  template <class T>
  absl::Status FillLifted(int64_t head, absl::Span<const int64_t> q, absl::Span<const int64_t> k,
                          T* out, int64_t ld) const;
  // ALiBi-like: the closed form is causal ALiBi's with the same slopes (fast path and
  // slope gradients delegate to it).
  std::optional<AlibiBias> alibi_;
  // Gated: shared so that GrapeAGatedLift's pointer stays valid when the bias is moved.
  std::shared_ptr<const FoxBias> fox_;
  int64_t head_dim_;
  GrapeAPath path_;
};

extern template class AdditiveBiasFromFill<GrapeABias>;

}  // namespace sequence
}  // namespace encodings
}  // namespace gpe

#endif  // ENCODINGS_SEQUENCE_GRAPE_A_H_
