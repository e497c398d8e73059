// Relative positional encodings that add learned or sinusoidal terms to attention.
//
// Shaw et al. ("Self-Attention with Relative Position Representations", eqs. 3-4):
// labels clip(j - i, -k, k) for query position i and key position j, 2k + 1 learned
// vectors per table. On keys, the score of (i, j) gains q_i . aK_{clip(j-i)}; on values,
// output row i gains sum_j p_ij aV_{clip(j-i)}, p the attention probabilities. Table row
// r holds label r - k. Both are computed the way the attention kernels consume them
// (docs/ARCHITECTURE.md, "Tile biases (additive)" and "Output-side terms (Shaw values)"):
// q_i is dotted with the 2k + 1 key labels once per query row and the
// results gathered by label; on the value side the probability mass of each row is
// accumulated per label, then multiplied by the table.
//
// Transformer-XL (Dai et al., sec. 3.3): the score of query i and key j is
//   q_i^T k_j + q_i^T W_R R_{i-j} + u^T k_j + v^T W_R R_{i-j},
// R the sinusoidal encoding of the distance i - j. TransformerXLScoreTerms returns the
// last three terms (the content term q_i^T k_j is the attention kernel's). R uses
// absolute.h's interleaved layout (sin, cos per frequency); Dai et al.'s code
// concatenates all sines then all cosines, a fixed permutation of R's coordinates that
// W_R's columns absorb. This is a reference-level function: O(nq nk d) work, one
// W_R R product per distinct distance.
//
// Matrices are row-major (RowMatrixXd, absolute.h): q [nq, d], k [nk, d], probabilities
// and scores [nq, nk]; positions are int64 per row. Arithmetic in double.
#ifndef ENCODINGS_SEQUENCE_RELATIVE_H_
#define ENCODINGS_SEQUENCE_RELATIVE_H_

#include <cstdint>
#include <utility>

#include <Eigen/Dense>
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "encodings/sequence/absolute.h"

namespace gpe {
namespace encodings {
namespace sequence {

class ShawRelative {
 public:
  // max_distance k >= 0; key_table [2k + 1, d_k] and value_table [2k + 1, d_v], both
  // with at least one column and finite entries.
  static absl::StatusOr<ShawRelative> Create(int64_t max_distance, RowMatrixXd key_table,
                                             RowMatrixXd value_table);

  int64_t max_distance() const { return k_; }
  int64_t num_labels() const { return 2 * k_ + 1; }
  const RowMatrixXd& key_table() const { return key_table_; }
  const RowMatrixXd& value_table() const { return value_table_; }

  // Table row of (i, j): clip(j - i, -k, k) + k, exact for every int64 i, j (the
  // difference is formed without overflow). Requires k >= 0.
  static int64_t LabelIndex(int64_t query_position, int64_t key_position, int64_t max_distance);

  // scores[a, b] = q_a . aK[LabelIndex(qpos[a], kpos[b])]; q is [qpos.size(), d_k].
  absl::StatusOr<RowMatrixXd> KeyScores(const Eigen::Ref<const RowMatrixXd>& q,
                                        absl::Span<const int64_t> query_positions,
                                        absl::Span<const int64_t> key_positions) const;
  // Backward of KeyScores given grad_scores = dl/dscores [nq, nk]: *grad_q is
  // overwritten with dl/dq [nq, d_k]; dl/daK is ADDED to *grad_key_table ([2k+1, d_k]).
  // Either output may be null to skip it.
  absl::Status KeyScoresBackward(const Eigen::Ref<const RowMatrixXd>& q,
                                 absl::Span<const int64_t> query_positions,
                                 absl::Span<const int64_t> key_positions,
                                 const Eigen::Ref<const RowMatrixXd>& grad_scores,
                                 RowMatrixXd* grad_q, RowMatrixXd* grad_key_table) const;

  // out[a, :] = sum_b p[a, b] aV[LabelIndex(qpos[a], kpos[b])]; p is [nq, nk].
  absl::StatusOr<RowMatrixXd> ValueOutput(const Eigen::Ref<const RowMatrixXd>& probabilities,
                                          absl::Span<const int64_t> query_positions,
                                          absl::Span<const int64_t> key_positions) const;
  // Backward of ValueOutput given grad_out [nq, d_v]: *grad_probabilities is overwritten
  // with dl/dp [nq, nk]; dl/daV is ADDED to *grad_value_table. Either may be null.
  absl::Status ValueOutputBackward(const Eigen::Ref<const RowMatrixXd>& probabilities,
                                   absl::Span<const int64_t> query_positions,
                                   absl::Span<const int64_t> key_positions,
                                   const Eigen::Ref<const RowMatrixXd>& grad_out,
                                   RowMatrixXd* grad_probabilities,
                                   RowMatrixXd* grad_value_table) const;

 private:
  ShawRelative(int64_t k, RowMatrixXd key_table, RowMatrixXd value_table)
      : k_(k), key_table_(std::move(key_table)), value_table_(std::move(value_table)) {}
  int64_t k_;
  RowMatrixXd key_table_;
  RowMatrixXd value_table_;
};

// Inline: attention kernels gather labels per score element.
inline int64_t ShawRelative::LabelIndex(int64_t i, int64_t j, int64_t k) {
  // Shaw et al., eq. (3)-(4): clip(j - i, -k, k), shifted to a row index.
  const uint64_t uk = static_cast<uint64_t>(k);
  if (j >= i) {
    const uint64_t diff = static_cast<uint64_t>(j) - static_cast<uint64_t>(i);
    return k + static_cast<int64_t>(diff < uk ? diff : uk);
  }
  const uint64_t diff = static_cast<uint64_t>(i) - static_cast<uint64_t>(j);
  return k - static_cast<int64_t>(diff < uk ? diff : uk);
}

// Transformer-XL's learned parameters for one head.
struct TransformerXLParams {
  RowMatrixXd w_r;    // [d, d_r]: projects the d_r-dimensional sinusoid R into head space
  Eigen::VectorXd u;  // [d], global content bias
  Eigen::VectorXd v;  // [d], global position bias
  double base = kSinusoidalDefaultBase;  // of R's frequencies
};

// E[a, b] = q_a^T W_R R_{i_a - j_b} + u^T k_b + v^T W_R R_{i_a - j_b}, with q [nq, d],
// k [nk, d], i = query_positions, j = key_positions. InvalidArgument on shape mismatch or
// non-finite parameters; OutOfRange when some i - j does not fit in int64.
absl::StatusOr<RowMatrixXd> TransformerXLScoreTerms(const Eigen::Ref<const RowMatrixXd>& q,
                                                    const Eigen::Ref<const RowMatrixXd>& k,
                                                    absl::Span<const int64_t> query_positions,
                                                    absl::Span<const int64_t> key_positions,
                                                    const TransformerXLParams& params);

struct TransformerXLGradients {
  RowMatrixXd q;      // [nq, d]
  RowMatrixXd k;      // [nk, d]
  RowMatrixXd w_r;    // [d, d_r]
  Eigen::VectorXd u;  // [d]
  Eigen::VectorXd v;  // [d]
};
// Backward of TransformerXLScoreTerms given grad_terms = dl/dE [nq, nk]; *grads is
// overwritten.
absl::Status TransformerXLScoreTermsBackward(const Eigen::Ref<const RowMatrixXd>& q,
                                             const Eigen::Ref<const RowMatrixXd>& k,
                                             absl::Span<const int64_t> query_positions,
                                             absl::Span<const int64_t> key_positions,
                                             const TransformerXLParams& params,
                                             const Eigen::Ref<const RowMatrixXd>& grad_terms,
                                             TransformerXLGradients* grads);

}  // namespace sequence
}  // namespace encodings
}  // namespace gpe

#endif  // ENCODINGS_SEQUENCE_RELATIVE_H_
