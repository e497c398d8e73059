// The encodings as the tiles meet them, prepared once per call and shared by every
// thread: the positions and the row transforms bound to them, additive-bias tiles, and
// Shaw et al.'s relative-label tables (descriptor.h, SHAW LABELS).
#ifndef ATTENTION_CPU_TILE_ENCODINGS_H_
#define ATTENTION_CPU_TILE_ENCODINGS_H_

#include <algorithm>
#include <cstdint>
#include <limits>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "attention/cpu/kernels.h"
#include "attention/cpu/plan.h"
#include "attention/descriptor.h"
#include "encodings/sequence/bias.h"
#include "encodings/sequence/relative.h"
#include "hwy/aligned_allocator.h"

namespace gpe {
namespace attention {
namespace cpu {

// The positions actually used and the q and k transforms bound to them (once per call,
// shared by every thread); checks the locality factor once (per-pair factors come from
// the same function as the reference). Self-attention with one transform object for q
// and k and the same positions (the default) prepares it once: tk is tq (RoPE's exact
// cos / sin table is most of a transform's cost, O(positions x rotary_dim)), on
// `threads` threads (ScopedPrepareThreads). scores_only: the kernel uses the transformed
// rows for scores only (RowTransform::PrepareForScores; not with Shaw key labels or
// transformed rows handed out), where one transform object serves q and k.
absl::Status PrepareEncodings(const AttentionArgs& a, int threads, std::vector<int64_t>* pq,
                              std::vector<int64_t>* pk,
                              std::shared_ptr<const PreparedRowTransform>* tq,
                              std::shared_ptr<const PreparedRowTransform>* tk,
                              bool scores_only = false);

// |a - b| without overflow (the locality factor's distance).
inline uint64_t Distance(int64_t a, int64_t b) {
  return a >= b ? static_cast<uint64_t>(a) - static_cast<uint64_t>(b)
                : static_cast<uint64_t>(b) - static_cast<uint64_t>(a);
}

// -inf into sr[j], j < nk, for every key whose position kpos[j] the mask refuses to a
// query at position pq. sorted (kpos non-decreasing): the allowed keys are one run,
// found by two binary searches; else key by key.
inline void MaskRow(const KeyMask& mask, int64_t pq, const int64_t* kpos, int64_t nk,
                    bool sorted, float* sr) {
  const float kNegInf = -std::numeric_limits<float>::infinity();
  if (sorted) {
    const int64_t* lo = std::partition_point(
        kpos, kpos + nk, [&](int64_t k) { return k < pq && !mask.Allowed(pq, k); });
    const int64_t* hi = std::partition_point(
        lo, kpos + nk, [&](int64_t k) { return k <= pq || mask.Allowed(pq, k); });
    std::fill(sr, sr + (lo - kpos), kNegInf);
    std::fill(sr + (hi - kpos), sr + nk, kNegInf);
    return;
  }
  for (int64_t j = 0; j < nk; ++j) {
    if (!mask.Allowed(pq, kpos[j])) sr[j] = kNegInf;
  }
}

// The score mask on a tile (descriptor.h, SCORE MASK): rows hi * nr + r (head h + hi,
// the sequence's query i0 + r) and columns j (its key j0 + j), j < nk, stride lds:
// + log2(e) times the additive mask, or -inf where the boolean mask is 0.
void ApplyScoreMask(const ScoreMask& mask, int64_t b, int64_t h, int64_t nh, int64_t i0,
                    int64_t nr, int64_t j0, int64_t nk, float* s, int64_t lds);

// Scratch for AddBias.
struct BiasScratch {
  std::vector<float> diagonal;
  std::vector<float> row_part, col_part;  // separable tiles (AdditiveBias::SeparableTile)
};

// s[r * lds + c] += scale * b_head(qpos[r], kpos[c]) for r < nr, c < nk (scores gaining
// the bias in the base-2 domain, scale = log2 e), product rounded before the sum. The
// Toeplitz tile of a relative bias of positions only (ALiBi, T5) on consecutive query
// and key positions is added straight from its nr + nk - 1 differences, row r from
// offset nr - 1 - r, without forming the tile; otherwise the tile goes through `tile`
// (stride ldt).
absl::Status AddBias(const encodings::sequence::AdditiveBias& bias, int64_t head,
                     const int64_t* qpos, int64_t nr, const int64_t* kpos, int64_t nk,
                     float scale, float* s, int64_t lds, float* tile, int64_t ldt,
                     BiasScratch* scratch);

// AddBias's tile for the score kernels to start from (ScoreTileBf16's init, times
// scale there), for relative biases of positions only (ALiBi, T5: the others, FoX's
// separable tiles among them, return null and go through AddBias): the Toeplitz tile's
// diagonals (*ld = -1, row r from offset nr - 1 - r) or the tile formed in `tile`
// (*ld = ldt); read for columns [0, ncols) (ncols >= nk: the kernels' whole panels),
// finite past nk (the next diagonals' values, then zeros: AdjustScores sets those
// scores to -inf).
absl::StatusOr<const float*> BiasTileForScores(const encodings::sequence::AdditiveBias& bias,
                                               int64_t head, const int64_t* qpos, int64_t nr,
                                               const int64_t* kpos, int64_t nk, int64_t ncols,
                                               float* tile, int64_t ldt, BiasScratch* scratch,
                                               int64_t* ld);

// Shaw et al.'s tables (descriptor.h, SHAW LABELS) in float: rows [labels][d] (scalar
// parts), key panels (label dot products by ScoreTile) and rows padded to dp (label mass
// times the table by AccumulateTile); kmax the clip distance. d and dp are the plan's d,
// dp for the key table and dv, dvp for the value table (VALUE HEAD SIZE).
struct ShawTable {
  std::vector<float> rows;
  hwy::AlignedFreeUniquePtr<float[]> panels, padded;
  int64_t num_panels = 0, kmax = 0;
};
struct ShawTables {
  ShawTable k, v;
};
ShawTables MakeShawTables(const AttentionArgs& a, const Plan& p);

// The Shaw label every key of a block shares for query position p (block keys in
// [kmin, kmax]), or -1 when they span several: LabelIndex is non-decreasing in the key
// position, so equal labels at both ends mean one label. Far from the diagonal (all but
// O(k) keys of a row) a whole block has one label, gathered as one per-row constant.
inline int64_t BlockLabel(int64_t p, int64_t kmin, int64_t kmax, int64_t max_distance) {
  const int64_t lo = encodings::sequence::ShawRelative::LabelIndex(p, kmin, max_distance);
  return lo == encodings::sequence::ShawRelative::LabelIndex(p, kmax, max_distance) ? lo : -1;
}

// out[i * ldl + r] = <rows_i, table_r> for i < n (rows of width d, stride ld) and every
// label r (columns past the labels hold zeros' products): each row's 2k + 1 label dot
// products at once (Shaw et al. eq. 4's q_i . aK), by the score kernel.
inline void LabelDots(const float* rows, int64_t ld, int64_t n, int64_t d, const ShawTable& table,
               float* out, int64_t ldl) {
  if (n > 0) cpu::ScoreTile(rows, ld, n, d, table.panels.get(), table.num_panels, out, ldl);
}

// o[i * ldo + :] = o + sum_r mass[i * lm + r] table_r for i < n: label mass times the
// table, by the P V kernel (ones: n ones, the kernel's rescale factors).
inline void AddLabelRows(const float* mass, int64_t lm, int64_t n, int64_t nl, const ShawTable& table,
                  int64_t dp, const float* ones, float* o, int64_t ldo) {
  if (n > 0) cpu::AccumulateTile(mass, lm, n, nl, table.padded.get(), dp, dp, ones, o, ldo);
}

}  // namespace cpu
}  // namespace attention
}  // namespace gpe

#endif  // ATTENTION_CPU_TILE_ENCODINGS_H_
