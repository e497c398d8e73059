// The forward's tile step, one query tile against one key block (scores, encodings,
// mask, online softmax, O += P V), and what both drivers do around it: query rows
// loaded and scaled, the rows' softmax state started, key and value rows read.
#include "attention/cpu/forward.h"

#include <algorithm>
#include <limits>
#include <type_traits>

#include "attention/cpu/element_rows.h"
#include "attention/cpu/kernels_amx.h"
#include "attention/cpu/kernels_bf16.h"
#include "attention/cpu/kernels_decode.h"
#include "attention/cpu/nonfinite.h"
#include "attention/cpu/split_bf16.h"
#include "encodings/sequence/relative.h"

namespace gpe {
namespace attention {
namespace cpu {

// Query rows [t0, t0 + mq) (token indices) of heads [h0, h0 + nh) into w.qblk (buffer
// row hi * mq + r: head h0 + hi, token t0 + r): transformed, times softmax_scale *
// log2(e); with Shaw key labels, their label dot products; and (round16: the packed
// tiles' or decoding's bf16 dot products) rounded to bf16.
template <class T, class KV>
absl::Status Forward<T, KV>::LoadQueries(int64_t h0, int64_t nh, int64_t t0, int64_t mq,
                                     bool round16, Workspace& w) const {
  const int64_t d = p_.d;
  const int64_t rows = nh * mq;
  float* qb = w.qblk.get();
  for (int64_t hi = 0; hi < nh; ++hi) {
    float* qh = qb + hi * mq * d;
    for (int64_t r = 0; r < mq; ++r) {  // rows a token stride apart: fetched ahead
      if (r + kPrefetchRows < mq) {
        PrefetchRow(q_ + a_.QOffset(a_.q, t0 + r + kPrefetchRows, h0 + hi), d);
      }
      LoadRow(q_ + a_.QOffset(a_.q, t0 + r, h0 + hi), qh + r * d, d);
    }
    if (tq_ != nullptr) {
      if (absl::Status s = tq_->Forward(t0, mq, qh, d); !s.ok()) return s;
    }
  }
  const float qscale = static_cast<float>(a_.scale() * kLog2e);
  for (int64_t i = 0; i < rows * d; ++i) qb[i] *= qscale;
  w.q_finite = cpu::RowsAllFinite(qb, 1, 0, rows * d);  // FusedCap
  if (p_.nlk > 0) LabelDots(qb, d, rows, d, shaw_.k, w.qlab.data(), p_.ldl);
  std::fill(w.vmass.begin(), w.vmass.end(), 0.0f);
  // On the bf16 dot products the scores are of bf16-rounded rows wherever they are
  // formed: direct tiles (few query rows, decoding through the tile step) score the
  // float rows, rounded here as the packed tiles' q16 are, so the backward, which
  // recomputes every score from rounded rows against this lse, sees the same ones.
  if (p_.bf16_dot) cpu::RoundToBf16InPlace(qb, rows * d);
  if (round16 && p_.split_terms > 0) {  // split-bf16 float32: the rows' parts, if they split
    w.q_split = cpu::SplitSafe(qb, rows, d, d);
    if (w.q_split) {
      const SplitWidths sw = SplitWidthsOf(p_);
      cpu::SplitRowsBf16(qb, d, rows, d, p_.split_width, cpu::SplitTermsOf(p_.split_terms),
                         /*left=*/true, w.q16.get(), sw.qk);
    }
  } else if (round16) {  // rows rounded to bf16, padded to even length
    const int64_t deven = RoundUp(d, 2);
    for (int64_t r = 0; r < rows; ++r) {
      uint16_t* out = w.q16.get() + r * deven;
      cpu::RoundBf16Row(qb + r * d, out, d);
      if (deven > d) out[d] = 0;
    }
  }
  return absl::OkStatus();
}

// The online-softmax state of `rows` rows before their first key block: m = -inf,
// l = 0, o = 0.
template <class T, class KV>
void Forward<T, KV>::StartRows(int64_t rows, Workspace& w) const {
  const float kNegInf = -std::numeric_limits<float>::infinity();
  std::fill(w.m.get(), w.m.get() + rows, kNegInf);
  std::fill(w.l.get(), w.l.get() + rows * kSumLanes, 0.0f);
  std::fill(w.oacc.get(), w.oacc.get() + rows * p_.dvp, 0.0f);
}

// Values of keys [j0, j0 + nk) into the padded value buffer: packed tiles at row j0 (kept
// for the item's later tiles), direct ones (in_place: decoding and few query rows, one
// block used at a time) at its start. Packed tiles always copy (value rows of a bshd
// tensor are a page or more apart: strided rows in the P V loop cost TLB misses on every
// tile); direct ones read them in place when they can (p_.direct_v).
template <class T, class KV>
void Forward<T, KV>::CopyValues(int64_t g, int64_t kb, int64_t j0, int64_t nk, Workspace& w,
                            bool in_place) const {
  if (in_place && p_.direct_v) return;
  float* vals = w.values.get() + (in_place ? 0 : j0 * p_.dvp);
  for (int64_t j = 0; j < nk; ++j) {  // value rows a token stride apart: fetched ahead
    if (j + kPrefetchRows < nk) PrefetchRow(v_ + a_.KOffset(a_.v, kb + j0 + j + kPrefetchRows, g), p_.dv);
    float* row = vals + j * p_.dvp;
    LoadRow(v_ + a_.KOffset(a_.v, kb + j0 + j, g), row, p_.dv);
    std::fill(row + p_.dv, row + p_.dvp, 0.0f);
  }
}

// Key rows of block blk for direct scoring: in place (float, no transform) or rotated
// into the rows buffer. Returns the rows and their stride.
template <class T, class KV>
absl::StatusOr<std::pair<const float*, int64_t>> Forward<T, KV>::DirectKeys(int64_t g, int64_t kb,
                                                                        int64_t j0, int64_t nk,
                                                                        Workspace& w) const {
  const int64_t d = p_.d;
  if constexpr (std::is_same_v<KV, float>) {
    if (tk_ == nullptr) return std::make_pair(k_ + a_.KOffset(a_.k, kb + j0, g), a_.k.token);
  }
  if (absl::Status s = LoadKeyRows(g, kb, j0, nk, w); !s.ok()) return s;
  // Transformed keys rounded as the packed tiles' panels are (LoadQueries).
  if (tk_ != nullptr && p_.bf16_dot) cpu::RoundToBf16InPlace(w.rows.get(), nk * d);
  return std::make_pair(static_cast<const float*>(w.rows.get()), d);
}

template <class T, class KV>
absl::Status Forward<T, KV>::LoadKeyRows(int64_t g, int64_t kb, int64_t j0, int64_t nk,
                                         Workspace& w) const {
  const int64_t d = p_.d;
  for (int64_t j = 0; j < nk; ++j) {  // rows a token stride apart: fetched ahead
    if (j + kPrefetchRows < nk) {
      PrefetchRow(k_ + a_.KOffset(a_.k, kb + j0 + j + kPrefetchRows, g), d);
    }
    LoadRow(k_ + a_.KOffset(a_.k, kb + j0 + j, g), w.rows.get() + j * d, d);
  }
  if (tk_ == nullptr) return absl::OkStatus();
  return tk_->Forward(kb + j0, nk, w.rows.get(), d);
}

// One query tile (nr tokens of each of the nh heads h .. h + nh - 1, row hi * nr + r
// for head h + hi and token r: scaled rotated q rows, positions tpos of the nr tokens,
// smallest pmin) against one key block: scores, locality, bias, mask, online softmax,
// O += P V. Several heads share a tile only in direct (decoding) mode, where the heads
// of a group then share every load of a key and value row. qlab / vmass (Shaw labels,
// null without): the tile rows' key-label dot products and value-label probability
// mass (p_.nlk / p_.nlv per row, in the tile's row order).
template <class T, class KV>
absl::Status Forward<T, KV>::TileStep(const KeyBlock& kb, int64_t h, int64_t nh, const float* qrows,
                                  const int64_t* tpos, int64_t nr, int64_t pmin, int64_t pmax,
                                  float* m, float* l,
                                  float* alpha, float* oacc, Workspace& w, const uint16_t* q16,
                                  const float* qlab, float* vmass) const {
  const int64_t d = p_.d, dv = p_.dv, dvp = p_.dvp, bk = p_.bk, nk = kb.nk;
  const int64_t rows = nh * nr;
  float* s = w.s.get();
  bool bias_in_scores = false;  // the bias already added by the score kernel
  if (kb.split) {  // one bf16 product of the concatenated parts (split_bf16.h)
    const int64_t width = SplitWidthsOf(p_).qk;
    cpu::ScoreTileAmx(q16, width, rows, width, kb.panels16, kb.num_panels, s, bk);
  } else if (kb.panels16 != nullptr) {
    if (p_.amx) {
      cpu::ScoreTileAmx(q16, RoundUp(d, 2), rows, d, kb.panels16, kb.num_panels, s, bk);
    } else {
      // A relative bias of positions only (ALiBi, T5), where it comes right after the
      // products (no Shaw labels, locality or softcap before it in AdjustScores), is the
      // sums' starting value: no pass of its own over the tile (on the dot products the
      // tile's products are fast enough that one showed: +6.8% for ALiBi on a 16-head
      // s 4096 non-causal forward on Zen 5).
      const encodings::sequence::AdditiveBias* bias = BiasOf(kb);
      const float* init = nullptr;
      int64_t ldi = 0;
      if (bias != nullptr && nh == 1 && qlab == nullptr && !a_.locality.has_value() &&
          !a_.softcap.has_value()) {
        absl::StatusOr<const float*> t =
            BiasTileForScores(*bias, h, tpos, nr, kb.kpos, nk, kb.num_panels * kPanel,
                              w.bias.get(), bk, &w.bias_scratch, &ldi);
        if (!t.ok()) return t.status();
        init = *t;
        bias_in_scores = init != nullptr;
      }
      cpu::ScoreTileBf16(q16, RoundUp(d, 2), rows, d, kb.panels16, kb.num_panels, s, bk, init,
                         ldi, static_cast<float>(kLog2e));
    }
  } else if (kb.direct) {
    cpu::ScoreDirect(qrows, d, rows, d, kb.krows, kb.ldk, nk, s, bk);
  } else {
    cpu::ScoreTile(qrows, d, rows, d, kb.panels, kb.num_panels, s, bk);
  }
  if (qlab != nullptr) {  // + <q'_i, aK_r(i,j)> (q rows carry scale log2 e), gathered
    for (int64_t r = 0; r < rows; ++r) {
      float* sr = s + r * bk;
      const float* ql = qlab + r * p_.ldl;
      const int64_t one = BlockLabel(tpos[r % nr], kb.kmin, kb.kmax, shaw_.k.kmax);
      if (one >= 0) {
        const float c = ql[one];
        for (int64_t j = 0; j < nk; ++j) sr[j] += c;
        continue;
      }
      for (int64_t j = 0; j < nk; ++j) {
        sr[j] += ql[encodings::sequence::ShawRelative::LabelIndex(tpos[r % nr], kb.kpos[j],
                                                                 shaw_.k.kmax)];
      }
    }
  }
  if (absl::Status st = AdjustScores(kb, h, nh, tpos, nr, pmin, pmax, s, w, bias_in_scores);
      !st.ok()) {
    return st;
  }
  // Masked entries (the causal future, -inf biases) with non-finite values: P V skips
  // them (nonfinite.h), as a masked key contributes nothing. So does a key whose score is
  // -inf from an infinite q or k (probability exactly 0): packed blocks know whether
  // their keys and queries are finite; direct ones (decoding) look for a -inf score in
  // the tile (one vector pass over it in L1) and check their values only when one is
  // there (a scan of every block's values would be a second pass over V).
  bool careful = false;
  if (cpu::MayHaveMaskedEntries(a_, pmin, pmax, kb.kmin, kb.kmax)) {
    careful = !(kb.values_checked ? kb.values_finite : cpu::RowsAllFinite(kb.vals, nk, kb.ldv, dv));
  } else if (kb.values_checked && !kb.direct) {
    careful = !kb.values_finite && !kb.scores_finite_inputs;
  } else if (kb.direct) {
    careful = cpu::HasNegInfScore(s, bk, rows, nk) &&
              !(kb.values_checked ? kb.values_finite
                                  : cpu::RowsAllFinite(kb.vals, nk, kb.ldv, dv));
  }
  if (kb.pairs16 != nullptr && !kb.split) {  // probabilities rounded to bf16 in the pass
    cpu::SoftmaxRoundTileBf16(s, bk, rows, kb.ncols, m, l, alpha, w.p16.get(), bk,
                              /*keep_float=*/vmass != nullptr || careful);
  } else {
    cpu::SoftmaxTile(s, bk, rows, kb.ncols, m, l, alpha, FusedCap(kb));
  }
  if (vmass != nullptr) {  // per-label probability mass, rescaled like o (alpha)
    const int64_t nl = p_.nlv;
    for (int64_t r = 0; r < rows; ++r) {
      float* vm = vmass + r * nl;
      const float* pr = s + r * bk;
      for (int64_t t = 0; t < nl; ++t) vm[t] *= alpha[r];
      const int64_t one = BlockLabel(tpos[r % nr], kb.kmin, kb.kmax, shaw_.v.kmax);
      if (one >= 0) {
        float sum = 0.0f;
        for (int64_t j = 0; j < nk; ++j) sum += pr[j];
        vm[one] += sum;
        continue;
      }
      for (int64_t j = 0; j < nk; ++j) {
        vm[encodings::sequence::ShawRelative::LabelIndex(tpos[r % nr], kb.kpos[j], shaw_.v.kmax)] +=
            pr[j];
      }
    }
  }
  if (kb.split) {  // split blocks' values are finite: never careful
    // The probability rows' parts, one segment per term of the block's keys in 32-key
    // steps (the columns from nk on hold the softmax's zeros), against the value pairs'
    // segments (PackSplitBlock).
    const SplitWidths sw = SplitWidthsOf(p_);
    const cpu::SplitTerms terms = cpu::SplitTermsOf(p_.split_terms);
    const int64_t seg = RoundUp(nk, 32);
    cpu::SplitRowsBf16(s, bk, rows, seg, seg, terms, /*left=*/true, w.p16.get(), sw.p);
    cpu::AccumulateTileAmx(w.p16.get(), sw.p, rows, terms.n * seg, kb.pairs16, dvp, alpha, oacc,
                           dvp);
  } else if (careful) {
    cpu::AccumulateSkippingZeros(s, bk, 1, s, bk, 1, rows, nk, kb.vals, kb.ldv, dv, alpha, oacc,
                                 dvp);
  } else if (kb.pairs16 != nullptr) {  // bf16 probabilities (above) for the dot products
    if (p_.amx) {
      cpu::AccumulateTileAmx(w.p16.get(), bk, rows, nk, kb.pairs16, dvp, alpha, oacc, dvp);
    } else {
      cpu::AccumulateTileBf16(w.p16.get(), bk, rows, nk, kb.pairs16, dvp, alpha, oacc, dvp);
    }
  } else {
    cpu::AccumulateTile(s, bk, rows, nk, kb.vals, kb.ldv, dvp, alpha, oacc, dvp);
  }
  return absl::OkStatus();
}

// The scores s (rows hi * nr + r as in TileStep, stride bk) of one key block made
// final: locality factors, the softcap, additive biases (log2 e times), the mask
// (KeyMask: causal, window) and -inf past the block's keys up to kb.ncols.
template <class T, class KV>
absl::Status Forward<T, KV>::AdjustScores(const KeyBlock& kb, int64_t h, int64_t nh,
                                      const int64_t* tpos, int64_t nr, int64_t pmin,
                                      int64_t pmax, float* s, Workspace& w,
                                      bool bias_in_scores) const {
  const int64_t bk = p_.bk, nk = kb.nk;
  const int64_t rows = nh * nr;
  const float kNegInf = -std::numeric_limits<float>::infinity();
  if (a_.locality.has_value()) {
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t j = 0; j < nk; ++j) {
        auto f = encodings::sequence::LocalityFactor(Distance(tpos[r % nr], kb.kpos[j]),
                                                     *a_.locality);
        if (!f.ok()) return f.status();
        s[r * bk + j] *= static_cast<float>(*f);
      }
    }
  }
  if (a_.softcap.has_value() && FusedCap(kb) == 0.0f) {  // c tanh(x / c), base 2 (SOFTCAP)
    cpu::SoftcapTile(s, bk, rows, nk, static_cast<float>(*a_.softcap * kLog2e), nullptr, 0);
  }
  const encodings::sequence::AdditiveBias* bias = bias_in_scores ? nullptr : BiasOf(kb);
  if (bias != nullptr) {  // s += log2(e) b, tile by tile (AddBias: Toeplitz tiles direct)
    const float c = static_cast<float>(kLog2e);
    for (int64_t hi = 0; hi < nh; ++hi) {
      if (absl::Status st = AddBias(*bias, h + hi, tpos, nr, kb.kpos, nk, c, s + hi * nr * bk, bk,
                                    w.bias.get(), bk, &w.bias_scratch);
          !st.ok()) {
        return st;
      }
    }
  }
  if (!a_.mask.empty()) {  // SDPA's attn_mask, indexed by token within the sequence
    const int64_t i0 = (tpos - pq_.data()) - a_.q_begin(kb.b);
    const int64_t j0 = (kb.kpos - pk_.data()) - a_.k_begin(kb.b);
    ApplyScoreMask(a_.mask, kb.b, h, nh, i0, nr, j0, nk, s, bk);
  }
  const KeyMask mask = KeyMask::Of(a_);
  if (mask.AnyMasked(pmin, pmax, kb.kmin, kb.kmax)) {  // some pair outside causal/window
    for (int64_t r = 0; r < rows; ++r) {
      MaskRow(mask, tpos[r % nr], kb.kpos, nk, kb.sorted, s + r * bk);
    }
  }
  if (nk < kb.ncols) {
    for (int64_t r = 0; r < rows; ++r) std::fill(s + r * bk + nk, s + r * bk + kb.ncols, kNegInf);
  }
  return absl::OkStatus();
}

template class Forward<float, float>;
template class Forward<BFloat16, BFloat16>;
template class Forward<float, BFloat16>;
template class Forward<float, Float16>;
template class Forward<BFloat16, Float16>;

}  // namespace cpu
}  // namespace attention
}  // namespace gpe
