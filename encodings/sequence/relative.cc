#include "encodings/sequence/relative.h"

#include <cstdint>
#include <unordered_map>
#include <utility>
#include <vector>

#include <Eigen/Dense>
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "encodings/sequence/absolute.h"

namespace gpe {
namespace encodings {
namespace sequence {
namespace {

absl::Status CheckShape(const char* who, const char* what, int64_t rows, int64_t cols,
                        int64_t want_rows, int64_t want_cols) {
  if (rows != want_rows || cols != want_cols) {
    return absl::InvalidArgumentError(absl::StrCat(who, ": ", what, " is ", rows, " x ", cols,
                                                   ", expected ", want_rows, " x ", want_cols));
  }
  return absl::OkStatus();
}

absl::Status ValidateTable(const char* what, const RowMatrixXd& t, int64_t labels) {
  if (t.rows() != labels || t.cols() < 1) {
    return absl::InvalidArgumentError(absl::StrCat("ShawRelative: ", what, " is ", t.rows(), " x ",
                                                   t.cols(), ", expected ", labels,
                                                   " x d with d >= 1"));
  }
  if (!t.allFinite()) {
    return absl::InvalidArgumentError(absl::StrCat("ShawRelative: ", what, " has non-finite entries"));
  }
  return absl::OkStatus();
}

}  // namespace

// ----------------------------------------------------------------------------------
// Shaw et al.
// ----------------------------------------------------------------------------------

absl::StatusOr<ShawRelative> ShawRelative::Create(int64_t max_distance, RowMatrixXd key_table,
                                                  RowMatrixXd value_table) {
  // 2k + 1 rows must be representable; a table that large could not be allocated anyway.
  if (max_distance < 0 || max_distance > (int64_t{1} << 40)) {
    return absl::InvalidArgumentError(
        absl::StrCat("ShawRelative: max_distance must be in [0, 2^40], got ", max_distance));
  }
  const int64_t labels = 2 * max_distance + 1;
  if (absl::Status s = ValidateTable("key_table", key_table, labels); !s.ok()) return s;
  if (absl::Status s = ValidateTable("value_table", value_table, labels); !s.ok()) return s;
  return ShawRelative(max_distance, std::move(key_table), std::move(value_table));
}

absl::StatusOr<RowMatrixXd> ShawRelative::KeyScores(const Eigen::Ref<const RowMatrixXd>& q,
                                                    absl::Span<const int64_t> query_positions,
                                                    absl::Span<const int64_t> key_positions) const {
  const int64_t nq = static_cast<int64_t>(query_positions.size());
  const int64_t nk = static_cast<int64_t>(key_positions.size());
  if (absl::Status s = CheckShape("ShawRelative::KeyScores", "q", q.rows(), q.cols(), nq,
                                  key_table_.cols());
      !s.ok()) {
    return s;
  }
  RowMatrixXd scores(nq, nk);
  const bool per_label = num_labels() <= nk;
  Eigen::VectorXd t(per_label ? num_labels() : 0);
  for (int64_t a = 0; a < nq; ++a) {
    if (per_label) {
      // q_a against every label once, then gathered (the kernels' form).
      t.noalias() = key_table_ * q.row(a).transpose();
      for (int64_t b = 0; b < nk; ++b) {
        scores(a, b) = t[LabelIndex(query_positions[a], key_positions[b], k_)];
      }
    } else {
      for (int64_t b = 0; b < nk; ++b) {
        scores(a, b) = q.row(a).dot(key_table_.row(LabelIndex(query_positions[a], key_positions[b], k_)));
      }
    }
  }
  return scores;
}

absl::Status ShawRelative::KeyScoresBackward(const Eigen::Ref<const RowMatrixXd>& q,
                                             absl::Span<const int64_t> query_positions,
                                             absl::Span<const int64_t> key_positions,
                                             const Eigen::Ref<const RowMatrixXd>& grad_scores,
                                             RowMatrixXd* grad_q,
                                             RowMatrixXd* grad_key_table) const {
  const char* who = "ShawRelative::KeyScoresBackward";
  const int64_t nq = static_cast<int64_t>(query_positions.size());
  const int64_t nk = static_cast<int64_t>(key_positions.size());
  const int64_t d = key_table_.cols();
  if (absl::Status s = CheckShape(who, "q", q.rows(), q.cols(), nq, d); !s.ok()) return s;
  if (absl::Status s = CheckShape(who, "grad_scores", grad_scores.rows(), grad_scores.cols(), nq, nk);
      !s.ok()) {
    return s;
  }
  if (grad_key_table != nullptr) {
    if (absl::Status s = CheckShape(who, "grad_key_table", grad_key_table->rows(),
                                    grad_key_table->cols(), num_labels(), d);
        !s.ok()) {
      return s;
    }
  }
  if (grad_q != nullptr) grad_q->setZero(nq, d);
  // Per row, the upstream mass of each label: c_r = sum_{b: label = r} G[a, b].
  std::unordered_map<int64_t, double> mass;
  for (int64_t a = 0; a < nq; ++a) {
    mass.clear();
    for (int64_t b = 0; b < nk; ++b) {
      mass[LabelIndex(query_positions[a], key_positions[b], k_)] += grad_scores(a, b);
    }
    for (const auto& [r, c] : mass) {
      if (grad_q != nullptr) grad_q->row(a) += c * key_table_.row(r);
      if (grad_key_table != nullptr) grad_key_table->row(r) += c * q.row(a);
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<RowMatrixXd> ShawRelative::ValueOutput(
    const Eigen::Ref<const RowMatrixXd>& probabilities, absl::Span<const int64_t> query_positions,
    absl::Span<const int64_t> key_positions) const {
  const int64_t nq = static_cast<int64_t>(query_positions.size());
  const int64_t nk = static_cast<int64_t>(key_positions.size());
  if (absl::Status s = CheckShape("ShawRelative::ValueOutput", "probabilities",
                                  probabilities.rows(), probabilities.cols(), nq, nk);
      !s.ok()) {
    return s;
  }
  RowMatrixXd out = RowMatrixXd::Zero(nq, value_table_.cols());
  std::unordered_map<int64_t, double> mass;
  for (int64_t a = 0; a < nq; ++a) {
    // Probability mass of row a on each label, then o_a = sum_r m_r aV_r.
    mass.clear();
    for (int64_t b = 0; b < nk; ++b) {
      mass[LabelIndex(query_positions[a], key_positions[b], k_)] += probabilities(a, b);
    }
    for (const auto& [r, m] : mass) out.row(a) += m * value_table_.row(r);
  }
  return out;
}

absl::Status ShawRelative::ValueOutputBackward(const Eigen::Ref<const RowMatrixXd>& probabilities,
                                               absl::Span<const int64_t> query_positions,
                                               absl::Span<const int64_t> key_positions,
                                               const Eigen::Ref<const RowMatrixXd>& grad_out,
                                               RowMatrixXd* grad_probabilities,
                                               RowMatrixXd* grad_value_table) const {
  const char* who = "ShawRelative::ValueOutputBackward";
  const int64_t nq = static_cast<int64_t>(query_positions.size());
  const int64_t nk = static_cast<int64_t>(key_positions.size());
  const int64_t dv = value_table_.cols();
  if (absl::Status s = CheckShape(who, "probabilities", probabilities.rows(), probabilities.cols(), nq, nk);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckShape(who, "grad_out", grad_out.rows(), grad_out.cols(), nq, dv); !s.ok()) {
    return s;
  }
  if (grad_value_table != nullptr) {
    if (absl::Status s = CheckShape(who, "grad_value_table", grad_value_table->rows(),
                                    grad_value_table->cols(), num_labels(), dv);
        !s.ok()) {
      return s;
    }
  }
  if (grad_probabilities != nullptr) grad_probabilities->resize(nq, nk);
  const bool per_label = num_labels() <= nk;
  Eigen::VectorXd t(per_label ? num_labels() : 0);
  std::unordered_map<int64_t, double> mass;
  for (int64_t a = 0; a < nq; ++a) {
    if (grad_probabilities != nullptr) {
      // dl/dp[a, b] = G_a . aV[label(a, b)].
      if (per_label) t.noalias() = value_table_ * grad_out.row(a).transpose();
      for (int64_t b = 0; b < nk; ++b) {
        const int64_t r = LabelIndex(query_positions[a], key_positions[b], k_);
        (*grad_probabilities)(a, b) = per_label ? t[r] : grad_out.row(a).dot(value_table_.row(r));
      }
    }
    if (grad_value_table != nullptr) {
      mass.clear();
      for (int64_t b = 0; b < nk; ++b) {
        mass[LabelIndex(query_positions[a], key_positions[b], k_)] += probabilities(a, b);
      }
      for (const auto& [r, m] : mass) grad_value_table->row(r) += m * grad_out.row(a);
    }
  }
  return absl::OkStatus();
}

// ----------------------------------------------------------------------------------
// Transformer-XL
// ----------------------------------------------------------------------------------

namespace {

// W_R R_{i_a - j_b} for every distinct distance, keyed by the distance.
struct ProjectedDistances {
  std::unordered_map<int64_t, std::pair<Eigen::VectorXd, Eigen::VectorXd>> by_distance;  // (R, W_R R)
};

absl::Status ValidateTxl(const char* who, const Eigen::Ref<const RowMatrixXd>& q,
                         const Eigen::Ref<const RowMatrixXd>& k, int64_t nq, int64_t nk,
                         const TransformerXLParams& params) {
  const int64_t d = params.w_r.rows();
  if (d < 1 || params.w_r.cols() < 1) {
    return absl::InvalidArgumentError(absl::StrCat(who, ": w_r must be at least 1 x 1, got ",
                                                   params.w_r.rows(), " x ", params.w_r.cols()));
  }
  if (params.u.size() != d || params.v.size() != d) {
    return absl::InvalidArgumentError(absl::StrCat(who, ": u and v must have ", d,
                                                   " entries, got ", params.u.size(), " and ",
                                                   params.v.size()));
  }
  if (!params.w_r.allFinite() || !params.u.allFinite() || !params.v.allFinite()) {
    return absl::InvalidArgumentError(absl::StrCat(who, ": non-finite parameters"));
  }
  if (absl::Status s = CheckShape(who, "q", q.rows(), q.cols(), nq, d); !s.ok()) return s;
  if (absl::Status s = CheckShape(who, "k", k.rows(), k.cols(), nk, d); !s.ok()) return s;
  return absl::OkStatus();
}

absl::StatusOr<ProjectedDistances> ProjectDistances(const char* who,
                                                    absl::Span<const int64_t> query_positions,
                                                    absl::Span<const int64_t> key_positions,
                                                    const TransformerXLParams& params) {
  ProjectedDistances out;
  const int64_t dr = params.w_r.cols();
  for (int64_t i : query_positions) {
    for (int64_t j : key_positions) {
      int64_t dist;
      if (__builtin_sub_overflow(i, j, &dist)) {
        return absl::OutOfRangeError(
            absl::StrCat(who, ": distance ", i, " - ", j, " does not fit in int64"));
      }
      if (out.by_distance.count(dist)) continue;
      Eigen::VectorXd r(dr);
      const int64_t one[1] = {dist};
      if (absl::Status s = SinusoidalEncoding<double>(one, dr, params.base, r.data(), dr); !s.ok()) {
        return s;
      }
      Eigen::VectorXd wr = params.w_r * r;
      out.by_distance.emplace(dist, std::make_pair(std::move(r), std::move(wr)));
    }
  }
  return out;
}

}  // namespace

absl::StatusOr<RowMatrixXd> TransformerXLScoreTerms(const Eigen::Ref<const RowMatrixXd>& q,
                                                    const Eigen::Ref<const RowMatrixXd>& k,
                                                    absl::Span<const int64_t> query_positions,
                                                    absl::Span<const int64_t> key_positions,
                                                    const TransformerXLParams& params) {
  const char* who = "TransformerXLScoreTerms";
  const int64_t nq = static_cast<int64_t>(query_positions.size());
  const int64_t nk = static_cast<int64_t>(key_positions.size());
  if (absl::Status s = ValidateTxl(who, q, k, nq, nk, params); !s.ok()) return s;
  absl::StatusOr<ProjectedDistances> proj =
      ProjectDistances(who, query_positions, key_positions, params);
  if (!proj.ok()) return proj.status();
  const Eigen::VectorXd uk = k * params.u;  // u^T k_b, one per key
  RowMatrixXd e(nq, nk);
  for (int64_t a = 0; a < nq; ++a) {
    const Eigen::VectorXd qv = q.row(a).transpose() + params.v;
    for (int64_t b = 0; b < nk; ++b) {
      const Eigen::VectorXd& wr =
          proj->by_distance.at(query_positions[a] - key_positions[b]).second;
      // Dai et al., eq. in sec. 3.3, terms (b) + (c) + (d): (q_i + v)^T W_R R_{i-j} + u^T k_j.
      e(a, b) = qv.dot(wr) + uk[b];
    }
  }
  return e;
}

absl::Status TransformerXLScoreTermsBackward(const Eigen::Ref<const RowMatrixXd>& q,
                                             const Eigen::Ref<const RowMatrixXd>& k,
                                             absl::Span<const int64_t> query_positions,
                                             absl::Span<const int64_t> key_positions,
                                             const TransformerXLParams& params,
                                             const Eigen::Ref<const RowMatrixXd>& grad_terms,
                                             TransformerXLGradients* grads) {
  const char* who = "TransformerXLScoreTermsBackward";
  const int64_t nq = static_cast<int64_t>(query_positions.size());
  const int64_t nk = static_cast<int64_t>(key_positions.size());
  if (grads == nullptr) return absl::InvalidArgumentError(absl::StrCat(who, ": null grads"));
  if (absl::Status s = ValidateTxl(who, q, k, nq, nk, params); !s.ok()) return s;
  if (absl::Status s = CheckShape(who, "grad_terms", grad_terms.rows(), grad_terms.cols(), nq, nk);
      !s.ok()) {
    return s;
  }
  absl::StatusOr<ProjectedDistances> proj =
      ProjectDistances(who, query_positions, key_positions, params);
  if (!proj.ok()) return proj.status();
  const int64_t d = params.w_r.rows(), dr = params.w_r.cols();
  grads->q.setZero(nq, d);
  grads->k.setZero(nk, d);
  grads->w_r.setZero(d, dr);
  grads->u.setZero(d);
  grads->v.setZero(d);
  // E_ab = (q_a + v)^T W_R R_ab + u^T k_b, differentiated term by term. A zero g_ab adds
  // nothing, and is skipped, unless q_a or k_b holds a NaN or inf: then 0 times it is NaN
  // in dW_R or du, as PyTorch's autograd would give (the parameters are finite).
  std::vector<char> q_finite(static_cast<size_t>(nq)), k_finite(static_cast<size_t>(nk));
  for (int64_t a = 0; a < nq; ++a) q_finite[a] = q.row(a).allFinite();
  for (int64_t b = 0; b < nk; ++b) k_finite[b] = k.row(b).allFinite();
  for (int64_t a = 0; a < nq; ++a) {
    const Eigen::VectorXd qv = q.row(a).transpose() + params.v;
    for (int64_t b = 0; b < nk; ++b) {
      const double g = grad_terms(a, b);
      if (g == 0.0 && q_finite[a] && k_finite[b]) continue;
      const auto& [r, wr] = proj->by_distance.at(query_positions[a] - key_positions[b]);
      grads->q.row(a) += g * wr.transpose();
      grads->v += g * wr;
      grads->w_r.noalias() += (g * qv) * r.transpose();
      grads->u += g * k.row(b).transpose();
      grads->k.row(b) += g * params.u.transpose();
    }
  }
  return absl::OkStatus();
}

}  // namespace sequence
}  // namespace encodings
}  // namespace gpe
