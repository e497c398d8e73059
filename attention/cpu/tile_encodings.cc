#include "attention/cpu/tile_encodings.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "attention/cpu/kernels.h"

namespace gpe {
namespace attention {
namespace cpu {
namespace {

// p[i] == p[0] + i for every i < n; false where p[0] + n - 1 would pass INT64_MAX (no
// signed overflow, and no run that wraps around).
bool Consecutive(const int64_t* p, int64_t n) {
  if (n > 1 && p[0] > std::numeric_limits<int64_t>::max() - (n - 1)) return false;
  for (int64_t i = 1; i < n; ++i) {
    if (p[i] != p[0] + i) return false;
  }
  return true;
}

}  // namespace

absl::Status PrepareEncodings(const AttentionArgs& a, int threads, std::vector<int64_t>* pq,
                              std::vector<int64_t>* pk,
                              std::shared_ptr<const PreparedRowTransform>* tq,
                              std::shared_ptr<const PreparedRowTransform>* tk,
                              bool scores_only) {
  const ScopedPrepareThreads prepare_threads(threads);  // the tables on every thread
  scores_only = scores_only && a.shaw_keys == nullptr;
  *pq = EffectiveQPositions(a);
  *pk = EffectiveKPositions(a);
  if (a.q_transform != nullptr && a.q_transform == a.k_transform && a.q_structured.empty() &&
      a.k_structured.empty() && *pq == *pk) {
    absl::StatusOr<std::unique_ptr<PreparedRowTransform>> t =
        scores_only ? a.q_transform->PrepareForScores(*pq) : a.q_transform->Prepare(*pq);
    if (!t.ok()) return t.status();
    *tq = std::shared_ptr<const PreparedRowTransform>(*std::move(t));
    *tk = *tq;
  } else {
    // Int64 or structured positions (descriptor.h): either way tiles index tokens.
    std::unique_ptr<PreparedRowTransform> uq, uk;
    if (absl::Status s = PrepareRowTransforms(a, *pq, *pk, &uq, &uk, scores_only); !s.ok()) {
      return s;
    }
    *tq = std::move(uq);
    *tk = std::move(uk);
  }
  if (a.locality.has_value()) {
    auto f = encodings::sequence::LocalityFactor(0, *a.locality);
    if (!f.ok()) return f.status();
  }
  return absl::OkStatus();
}

// out[r * ld + c] = b_head(qpos[r], kpos[c]), r < nr, c < nk. A relative bias of
// positions only (ALiBi, T5) on consecutive query and key positions is a Toeplitz tile,
// b(q0 + r, k0 + c) = g(k0 - q0 + c - r): one FillTile row of the nr + nk - 1 distinct
// differences (query q0 against keys k0 - (nr - 1) + t), copied shifted into each row.
namespace {

// A relative bias of positions only (ALiBi, T5) on consecutive query and key positions is
// a Toeplitz tile: its nr + nk - 1 distinct values (query q0 against keys k0 - (nr - 1)
// + t) into scratch->diagonal, row r starting at offset nr - 1 - r. False when the tile
// is not one, or its distances are refused (the tile path's FillTile then reports why).
bool ToeplitzDiagonal(const encodings::sequence::AdditiveBias& bias,
                                      int64_t head, const int64_t* qpos, int64_t nr,
                                      const int64_t* kpos, int64_t nk, BiasScratch* scratch) {
  if (!(bias.relative() && !bias.needs_token_data() && nr > 1 && Consecutive(qpos, nr) &&
        Consecutive(kpos, nk) && kpos[0] >= std::numeric_limits<int64_t>::min() + nr)) {
    return false;
  }
  const int64_t width = nr + nk - 1;
  int64_t first;  // distances first + t = kpos[0] - (nr - 1) + t - qpos[0]
  if (__builtin_sub_overflow(kpos[0] - (nr - 1), qpos[0], &first)) return false;
  scratch->diagonal.resize(static_cast<size_t>(width));
  return bias.FillDistances(head, first, width, scratch->diagonal.data()).ok();
}

// The bias tile of nr x nk scores for reading, columns [0, ncols) (ncols >= nk): a
// Toeplitz tile's diagonals (*ld = -1, row r from offset nr - 1 - r; no tile formed), else
// the tile formed in `tile` (*ld = ldt). Columns past nk hold finite values (the next
// diagonals' or zeros).
absl::StatusOr<const float*> ViewBiasTile(const encodings::sequence::AdditiveBias& bias,
                                          int64_t head, const int64_t* qpos, int64_t nr,
                                          const int64_t* kpos, int64_t nk, int64_t ncols,
                                          float* tile, int64_t ldt, BiasScratch* scratch,
                                          int64_t* ld) {
  if (ToeplitzDiagonal(bias, head, qpos, nr, kpos, nk, scratch)) {
    // Row r reads [nr - 1 - r, nr - 1 - r + ncols): the differences, then zeros.
    scratch->diagonal.resize(static_cast<size_t>(nr - 1 + ncols));
    std::fill(scratch->diagonal.begin() + (nr + nk - 1), scratch->diagonal.end(), 0.0f);
    *ld = -1;
    return static_cast<const float*>(scratch->diagonal.data() + (nr - 1));
  }
  if (absl::Status st = bias.FillTile(head, absl::MakeConstSpan(qpos, nr),
                                      absl::MakeConstSpan(kpos, nk), tile, ldt);
      !st.ok()) {
    return st;
  }
  for (int64_t r = 0; r < nr; ++r) std::fill(tile + r * ldt + nk, tile + r * ldt + ncols, 0.0f);
  *ld = ldt;
  return static_cast<const float*>(tile);
}

}  // namespace

absl::Status AddBias(const encodings::sequence::AdditiveBias& bias, int64_t head,
                     const int64_t* qpos, int64_t nr, const int64_t* kpos, int64_t nk,
                     float scale, float* s, int64_t lds, float* tile, int64_t ldt,
                     BiasScratch* scratch) {
  // Separable tiles (FoX's off-diagonal ones): u_i + w_j added straight to the scores, as
  // the tile FillTile would form and AddScaledTile add (the same bits), without forming it.
  scratch->row_part.resize(static_cast<size_t>(nr));
  scratch->col_part.resize(static_cast<size_t>(nk));
  absl::StatusOr<bool> separable =
      bias.SeparableTile(head, absl::MakeConstSpan(qpos, nr), absl::MakeConstSpan(kpos, nk),
                         scratch->row_part.data(), scratch->col_part.data());
  if (!separable.ok()) return separable.status();
  if (*separable) {
    AddSeparableTile(s, lds, scratch->row_part.data(), scratch->col_part.data(), nr, nk, scale);
    return absl::OkStatus();
  }
  int64_t ld = 0;
  absl::StatusOr<const float*> t =
      ViewBiasTile(bias, head, qpos, nr, kpos, nk, /*ncols=*/nk, tile, ldt, scratch, &ld);
  if (!t.ok()) return t.status();
  AddScaledTile(s, lds, *t, ld, nr, nk, scale);
  return absl::OkStatus();
}

absl::StatusOr<const float*> BiasTileForScores(const encodings::sequence::AdditiveBias& bias,
                                               int64_t head, const int64_t* qpos, int64_t nr,
                                               const int64_t* kpos, int64_t nk, int64_t ncols,
                                               float* tile, int64_t ldt, BiasScratch* scratch,
                                               int64_t* ld) {
  if (!bias.relative() || bias.needs_token_data()) return nullptr;
  return ViewBiasTile(bias, head, qpos, nr, kpos, nk, ncols, tile, ldt, scratch, ld);
}

ShawTables MakeShawTables(const AttentionArgs& a, const Plan& p) {
  ShawTables t;
  // Key tables have head_dim columns, value tables value_dim() (descriptor.h).
  auto make = [&](const encodings::sequence::RowMatrixXd& m, int64_t kmax, int64_t d, int64_t dp,
                  ShawTable* out) {
    const int64_t n = m.rows();
    out->kmax = kmax;
    out->rows.resize(static_cast<size_t>(n * d));
    for (int64_t r = 0; r < n; ++r) {
      for (int64_t c = 0; c < d; ++c) out->rows[r * d + c] = static_cast<float>(m(r, c));
    }
    out->num_panels = (n + kPanel - 1) / kPanel;
    out->panels = hwy::AllocateAligned<float>(out->num_panels * kPanel * d);
    cpu::PackKeyPanels(out->rows.data(), n, d, d, out->panels.get());
    out->padded = hwy::AllocateAligned<float>(n * dp);
    for (int64_t r = 0; r < n; ++r) {
      float* row = out->padded.get() + r * dp;
      std::copy(out->rows.begin() + r * d, out->rows.begin() + (r + 1) * d, row);
      std::fill(row + d, row + dp, 0.0f);
    }
  };
  if (a.shaw_keys != nullptr) {
    make(a.shaw_keys->key_table(), a.shaw_keys->max_distance(), p.d, p.dp, &t.k);
  }
  if (a.shaw_values != nullptr) {
    make(a.shaw_values->value_table(), a.shaw_values->max_distance(), p.dv, p.dvp, &t.v);
  }
  return t;
}

void ApplyScoreMask(const ScoreMask& mask, int64_t b, int64_t h, int64_t nh, int64_t i0,
                    int64_t nr, int64_t j0, int64_t nk, float* s, int64_t lds) {
  const float kNegInf = -std::numeric_limits<float>::infinity();
  const float log2e = static_cast<float>(kLog2e);
  for (int64_t hi = 0; hi < nh; ++hi) {
    for (int64_t r = 0; r < nr; ++r) {
      float* sr = s + (hi * nr + r) * lds;
      const int64_t at = mask.Offset(b, h + hi, i0 + r, j0);
      if (mask.additive != nullptr) {
        const float* mr = mask.additive + at;
        for (int64_t j = 0; j < nk; ++j) sr[j] += log2e * mr[j * mask.key];
      } else {
        const uint8_t* mr = mask.allowed + at;
        for (int64_t j = 0; j < nk; ++j) {
          if (mr[j * mask.key] == 0) sr[j] = kNegInf;
        }
      }
    }
  }
}

}  // namespace cpu
}  // namespace attention
}  // namespace gpe
