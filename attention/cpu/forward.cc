// The forward's query items: a chunk of query rows of one kv head (every query head of
// its group) against every key block their positions allow, key blocks packed into
// panels on first use and shared by the group (GQA).
#include "attention/cpu/forward.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <type_traits>
#include <vector>

#include "attention/cpu/element_rows.h"
#include "attention/cpu/kernels_bf16.h"
#include "attention/cpu/nonfinite.h"
#include "attention/cpu/parallel_items.h"
#include "attention/cpu/split_bf16.h"

namespace gpe {
namespace attention {
namespace cpu {

template <class T, class KV>
absl::Status Forward<T, KV>::RunItem(const Item& it, Workspace& w) const {
  const int64_t kb = a_.k_begin(it.b), lk = a_.k_end(it.b) - kb;
  const int64_t qbase = a_.q_begin(it.b);
  const int64_t blocks = (lk + p_.bk - 1) / p_.bk;
  std::fill(w.packed.begin(), w.packed.begin() + blocks, 0);
  if (!w.split.empty()) std::fill(w.split.begin(), w.split.begin() + blocks, 0);
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t j0 = kb + blk * p_.bk, j1 = std::min(kb + lk, j0 + p_.bk);
    w.kmin[blk] = *std::min_element(pk_.begin() + j0, pk_.begin() + j1);
    w.kmax[blk] = *std::max_element(pk_.begin() + j0, pk_.begin() + j1);
    w.ksorted[blk] = std::is_sorted(pk_.begin() + j0, pk_.begin() + j1);
  }
  const int64_t group = a_.num_q_heads / a_.num_kv_heads;
  const int64_t n = it.q1 - it.q0;
  // Few query rows against each key block (decoding): score from key rows in place
  // rather than packing panels that would be read only a few times.
  const bool direct = group * n <= kDirectRows;
  if (group * n <= p_.rows) {  // every head of the group in one pass over the keys
    return QueryRows(it, it.g * group, group, qbase + it.q0, n, kb, lk, direct, w);
  }
  for (int64_t h = it.g * group; h < (it.g + 1) * group; ++h) {
    for (int64_t r0 = it.q0; r0 < it.q1; r0 += p_.rows) {
      const int64_t mq = std::min(p_.rows, it.q1 - r0);
      if (absl::Status s = QueryRows(it, h, 1, qbase + r0, mq, kb, lk, direct, w); !s.ok()) {
        return s;
      }
    }
  }
  return absl::OkStatus();
}

// Rotates, transposes and copies key block blk of the item's sequence (kv head g).
template <class T, class KV>
absl::Status Forward<T, KV>::PackBlock(int64_t g, int64_t kb, int64_t lk, int64_t blk,
                                   Workspace& w) const {
  const int64_t j0 = blk * p_.bk, nk = std::min(p_.bk, lk - j0);
  const int64_t d = p_.d;
  if constexpr (std::is_same_v<T, BFloat16> && std::is_same_v<KV, BFloat16>) {
    if (p_.bf16_dot) {  // bf16 panels of (rotated, then rounded) keys and value pairs
      const int64_t deven = RoundUp(d, 2);
      uint16_t* panels16 = w.panels16.get() + blk * p_.bk * deven;
      if (tk_ != nullptr) {
        if (absl::Status s = LoadKeyRows(g, kb, j0, nk, w); !s.ok()) return s;
        uint16_t* rows16 = w.p16.get();  // bq x bk >= nk x d? use a temporary otherwise
        std::vector<uint16_t> tmp;
        if (p_.bq * p_.bk < nk * d) {
          tmp.resize(static_cast<size_t>(nk * d));
          rows16 = tmp.data();
        }
        cpu::RoundBf16Row(w.rows.get(), rows16, nk * d);
        cpu::PackKeyPanelsBf16(rows16, nk, d, d, panels16);
      } else {
        cpu::PackKeyPanelsBf16(reinterpret_cast<const uint16_t*>(k_ + a_.KOffset(a_.k, kb + j0, g)),
                               nk, a_.k.token, d, panels16);
      }
      const KV* vsrc = v_ + a_.KOffset(a_.v, kb + j0, g);
      cpu::PackValuePairsBf16(reinterpret_cast<const uint16_t*>(vsrc), nk, a_.v.token, p_.dv,
                              p_.dvp, w.pairs16.get() + j0 * p_.dvp);
      // Non-finite values: float copies too, for the careful accumulation (nonfinite.h).
      w.vfinite[blk] = cpu::RowsFinite(vsrc, nk, a_.v.token, p_.dv);
      if (!w.vfinite[blk]) CopyValues(g, kb, j0, nk, w);
      w.kfinite[blk] = 0;  // unused: the bf16 softmax never fuses the softcap
      w.packed[blk] = 1;
      return absl::OkStatus();
    }
  }
  float* panels = w.panels.get() + blk * p_.bk * d;
  if constexpr (std::is_same_v<KV, float>) {
    if (tk_ == nullptr) {
      // Key rows are (token, head) rows of k: consecutive tokens are a.k.token apart.
      cpu::PackKeyPanels(k_ + a_.KOffset(a_.k, kb + j0, g), nk, a_.k.token, d, panels);
    }
  }
  if (tk_ != nullptr || !std::is_same_v<KV, float>) {  // rows widened and / or transformed
    if (absl::Status s = LoadKeyRows(g, kb, j0, nk, w); !s.ok()) return s;
    cpu::PackKeyPanels(w.rows.get(), nk, d, d, panels);
  }
  CopyValues(g, kb, j0, nk, w);
  w.vfinite[blk] = cpu::RowsAllFinite(w.values.get() + j0 * p_.dvp, nk, p_.dvp, p_.dv);
  // The panels as packed (padding zeros included), while they are in cache: FusedCap.
  w.kfinite[blk] = cpu::RowsAllFinite(panels, 1, 0, RoundUp(nk, kPanel) * d);
  w.packed[blk] = 1;
  return absl::OkStatus();
}

template <class T, class KV>
absl::Status Forward<T, KV>::PackSplitBlock(int64_t g, int64_t kb, int64_t lk, int64_t blk,
                                            Workspace& w) const {
  if constexpr (std::is_same_v<T, float> && std::is_same_v<KV, float>) {
    const int64_t j0 = blk * p_.bk, nk = std::min(p_.bk, lk - j0);
    const int64_t d = p_.d, dv = p_.dv, dvp = p_.dvp;
    const SplitTerms terms = SplitTermsOf(p_.split_terms);
    const SplitWidths sw = SplitWidthsOf(p_);
    if (absl::Status s = LoadKeyRows(g, kb, j0, nk, w); !s.ok()) return s;
    const float* vsrc = v_ + a_.KOffset(a_.v, kb + j0, g);
    if (!SplitSafe(w.rows.get(), nk, d, d) || !SplitSafe(vsrc, nk, a_.v.token, dv)) {
      w.split[blk] = 2;
      return absl::OkStatus();
    }
    uint16_t* rows16 = w.split_rows.get();
    SplitRowsBf16(w.rows.get(), d, nk, d, p_.split_width, terms, /*left=*/false, rows16, sw.qk);
    PackKeyPanelsBf16(rows16, nk, sw.qk, sw.qk, w.panels16.get() + blk * p_.bk * sw.qk);
    // Value rows into parts (part i of key j at rows16 + (i nk + j) dv), then one segment
    // of value pairs per term, seg keys each: the keys in 32-key steps for the tiles,
    // pair rows past the block's keys zero.
    for (int64_t j = 0; j < nk; ++j) {
      uint16_t* part = rows16 + j * dv;
      SplitBf16Parts(vsrc + j * a_.v.token, dv, terms.parts, part, part + nk * dv,
                     terms.parts > 2 ? part + 2 * nk * dv : nullptr);
    }
    const int64_t seg = RoundUp(nk, 32);
    uint16_t* pairs = w.pairs16.get() + j0 * sw.v;
    for (int t = 0; t < terms.n; ++t) {
      uint16_t* sp = pairs + t * seg * dvp;
      PackValuePairsBf16(rows16 + terms.right[t] * nk * dv, nk, dv, dv, dvp, sp);
      std::fill(sp + RoundUp(nk, 2) * dvp, sp + seg * dvp, 0);
    }
    w.split[blk] = 1;
  }
  return absl::OkStatus();
}

// Query rows [t0, t0 + mq) (token indices) of heads [h0, h0 + nh) (nh * mq <= rows)
// against every allowed key block: key blocks outer, query tiles of up to bq rows of
// one head inner (one L2 load of each key block per pass, shared by the group's heads),
// online-softmax state per row. Buffer row hi * mq + r is head h0 + hi, token t0 + r.
template <class T, class KV>
absl::Status Forward<T, KV>::QueryRows(const Item& it, int64_t h0, int64_t nh, int64_t t0, int64_t mq,
                                   int64_t kb, int64_t lk, bool direct, Workspace& w) const {
  const int64_t bk = p_.bk, bq = p_.bq;
  if (absl::Status s = LoadQueries(h0, nh, t0, mq, (p_.bf16_dot || p_.split_terms > 0) && !direct, w);
      !s.ok()) {
    return s;
  }
  const int64_t* qpos = pq_.data() + t0;
  // One tile per head and bq rows: at most nh * mq <= rows of them, which is at most
  // kPassRows unless block_q is larger (rows = bq then, up to 4096, and a GQA group
  // that wide fills more): those go to the heap.
  QueryTile stack_tiles[kPassRows];
  std::vector<QueryTile> heap_tiles;
  QueryTile* tile = stack_tiles;
  if (const int64_t count = nh * ((mq + bq - 1) / bq); count > kPassRows) {
    heap_tiles.resize(static_cast<size_t>(count));
    tile = heap_tiles.data();
  }
  int64_t tiles = 0;
  for (int64_t hi = 0; hi < nh; ++hi) {
    for (int64_t r0 = 0; r0 < mq; r0 += bq) {
      const int64_t n = std::min(bq, mq - r0);
      tile[tiles++] = {h0 + hi, hi * mq + r0, n, *std::min_element(qpos + r0, qpos + r0 + n),
                       *std::max_element(qpos + r0, qpos + r0 + n)};
    }
  }
  int64_t qmin = std::numeric_limits<int64_t>::max(), qmax = std::numeric_limits<int64_t>::min();
  for (int64_t t = 0; t < tiles; ++t) {
    qmin = std::min(qmin, tile[t].pmin);
    qmax = std::max(qmax, tile[t].pmax);
  }
  const KeyMask mask = KeyMask::Of(a_);
  StartRows(nh * mq, w);
  const int64_t blocks = (lk + bk - 1) / bk;
  // With an additive bias, the key block at the queries' own positions first (the last
  // one starting at or before the earliest query: under a causal mask every row has keys
  // there), then the others in order: recency biases (ALiBi, FoX, GRAPE-A, T5's near
  // buckets) are largest there, so the rows' reference maxima are set once and later
  // blocks seldom move them (a move costs a horizontal maximum, an exponential and a
  // rescaling of l and o per row; walking up to the diagonal, steep heads moved them at
  // every block).
  int64_t first = 0;
  if (!a_.biases.empty()) {
    for (int64_t blk = 0; blk < blocks; ++blk) {
      if (w.kmin[blk] <= qmin) first = blk;
    }
  }
  for (int64_t step = 0; step < blocks; ++step) {
    const int64_t blk = step == 0 ? first : (step <= first ? step - 1 : step);
    if (mask.AllMasked(qmin, qmax, w.kmin[blk], w.kmax[blk])) continue;  // no allowed pair
    absl::StatusOr<KeyBlock> kblk = ItemKeyBlock(it, blk, kb, lk, direct, w);
    if (!kblk.ok()) return kblk.status();
    if (absl::Status st = BlockTiles(*kblk, tile, tiles, h0, nh, mq, qpos, direct, w); !st.ok()) {
      return st;
    }
  }
  StoreRows(h0, nh, t0, mq, w);
  return absl::OkStatus();
}

// Key block blk of the item as its tiles see it: key rows read in place or rotated
// (direct), else packed into panels on first use.
template <class T, class KV>
absl::StatusOr<typename Forward<T, KV>::KeyBlock> Forward<T, KV>::ItemKeyBlock(const Item& it, int64_t blk,
                                                                       int64_t kb, int64_t lk,
                                                                       bool direct,
                                                                       Workspace& w) const {
  const int64_t d = p_.d, dvp = p_.dvp, bk = p_.bk;
  const int64_t j0 = blk * bk, nk = std::min(bk, lk - j0);
  const int64_t* kpos = pk_.data() + kb + j0;
  const float* krows = nullptr;
  int64_t ldk = 0, ncols = 0;
  const float* panels = w.panels.get() + blk * bk * d;
  int64_t num_panels = 0;
  bool split = false;
  if (direct) {
    auto keys = DirectKeys(it.g, kb, j0, nk, w);
    if (!keys.ok()) return keys.status();
    krows = keys->first;
    ldk = keys->second;
    CopyValues(it.g, kb, j0, nk, w, /*in_place=*/true);
    ncols = RoundUp(nk, kVecPad);
  } else {
    if (p_.split_terms > 0 && w.q_split) {  // split keys and values, where they split
      if (w.split[blk] == 0) {
        if (absl::Status st = PackSplitBlock(it.g, kb, lk, blk, w); !st.ok()) return st;
      }
      split = w.split[blk] == 1;
    }
    if (!split && !w.packed[blk]) {
      if (absl::Status st = PackBlock(it.g, kb, lk, blk, w); !st.ok()) return st;
    }
    num_panels = (nk + kPanel - 1) / kPanel;
    ncols = num_panels * kPanel;
  }
  KeyBlock kblk;
  kblk.b = it.b;
  kblk.g = it.g;
  kblk.nk = nk;
  kblk.kpos = kpos;
  kblk.kmin = w.kmin[blk];
  kblk.kmax = w.kmax[blk];
  kblk.sorted = w.ksorted[blk];
  kblk.direct = direct;
  kblk.krows = krows;
  kblk.ldk = ldk;
  kblk.panels = panels;
  kblk.num_panels = num_panels;
  kblk.ncols = ncols;
  kblk.vals = w.values.get() + (direct ? 0 : j0 * dvp);  // as CopyValues placed them
  kblk.ldv = dvp;
  if constexpr (std::is_same_v<KV, float>) {
    if (direct && p_.direct_v) {
      kblk.vals = v_ + a_.KOffset(a_.v, kb + j0, it.g);
      kblk.ldv = a_.v.token;
    }
  }
  if (p_.bf16_dot && !direct) {
    kblk.panels16 = w.panels16.get() + blk * bk * RoundUp(d, 2);
    kblk.pairs16 = w.pairs16.get() + j0 * dvp;
  }
  if (split) {  // every key, value and query part finite (PackSplitBlock, LoadQueries)
    const SplitWidths sw = SplitWidthsOf(p_);
    kblk.split = true;
    kblk.panels16 = w.panels16.get() + blk * bk * sw.qk;
    kblk.pairs16 = w.pairs16.get() + j0 * sw.v;
    kblk.values_checked = true;
    kblk.values_finite = true;
    kblk.scores_finite_inputs = true;
    return kblk;
  }
  if (!direct) {
    kblk.values_checked = true;
    kblk.values_finite = w.vfinite[blk] != 0;
    kblk.scores_finite_inputs = w.kfinite[blk] != 0 && w.q_finite;
  }
  return kblk;
}

// The query tiles (QueryRows' buffer rows, positions qpos of its mq tokens) against one
// key block, those in its causal past only; in direct mode with one tile per head, every
// head in one TileStep.
template <class T, class KV>
absl::Status Forward<T, KV>::BlockTiles(const KeyBlock& kblk, const QueryTile* tile, int64_t tiles,
                                    int64_t h0, int64_t nh, int64_t mq, const int64_t* qpos,
                                    bool direct, Workspace& w) const {
  const int64_t d = p_.d, dvp = p_.dvp;
  const float* qb = w.qblk.get();
  const KeyMask mask = KeyMask::Of(a_);
  if (direct && tiles == nh) {  // one tile per head: every head in one TileStep
    int64_t pmin = tile[0].pmin, pmax = tile[0].pmax;
    for (int64_t t = 1; t < tiles; ++t) {
      pmin = std::min(pmin, tile[t].pmin);
      pmax = std::max(pmax, tile[t].pmax);
    }
    if (mask.AllMasked(pmin, pmax, kblk.kmin, kblk.kmax)) return absl::OkStatus();
    return TileStep(kblk, h0, nh, qb, qpos, mq, pmin, pmax, w.m.get(), w.l.get(), w.alpha.get(),
                    w.oacc.get(), w, nullptr, p_.nlk > 0 ? w.qlab.data() : nullptr,
                    p_.nlv > 0 ? w.vmass.data() : nullptr);
  }
  for (int64_t t = 0; t < tiles; ++t) {
    if (mask.AllMasked(tile[t].pmin, tile[t].pmax, kblk.kmin, kblk.kmax)) continue;
    const int64_t r0 = tile[t].row, h = tile[t].head;
    const int64_t* tpos = qpos + (r0 - (h - h0) * mq);
    const uint16_t* q16 = nullptr;
    if (kblk.split) {
      q16 = w.q16.get() + r0 * SplitWidthsOf(p_).qk;
    } else if (p_.bf16_dot && !direct) {
      q16 = w.q16.get() + r0 * RoundUp(d, 2);
    }
    if (absl::Status st = TileStep(
            kblk, h, 1, qb + r0 * d, tpos, tile[t].n, tile[t].pmin, tile[t].pmax, w.m.get() + r0,
            w.l.get() + r0 * kSumLanes, w.alpha.get() + r0, w.oacc.get() + r0 * dvp, w, q16,
            p_.nlk > 0 ? w.qlab.data() + r0 * p_.ldl : nullptr,
            p_.nlv > 0 ? w.vmass.data() + r0 * p_.nlv : nullptr);
        !st.ok()) {
      return st;
    }
  }
  return absl::OkStatus();
}

// QueryRows' rows done: Shaw value labels added, o = acc / l stored, and lse.
template <class T, class KV>
void Forward<T, KV>::StoreRows(int64_t h0, int64_t nh, int64_t t0, int64_t mq, Workspace& w) const {
  const int64_t dv = p_.dv, dvp = p_.dvp;
  const int64_t rows = nh * mq;
  const float kNegInf = -std::numeric_limits<float>::infinity();
  // Shaw value labels: o_i += sum_r (mass of row i on label r) aV_r (unnormalised).
  if (p_.nlv > 0) {
    AddLabelRows(w.vmass.data(), p_.nlv, rows, p_.nlv, shaw_.v, dvp, w.lab_ones.data(),
                 w.oacc.get(), dvp);
  }
  for (int64_t row = 0; row < rows; ++row) {
    const int64_t h = h0 + row / mq, r = row % mq;
    T* out = o_ + a_.QOffset(a_.o, t0 + r, h);
    float* acc = w.oacc.get() + row * dvp;
    float l = 0.0f;
    for (int64_t i = 0; i < kSumLanes; ++i) l += w.l[row * kSumLanes + i];
    // l is NaN when a score was NaN or +inf (kernels.h, SoftmaxTile): o and lse NaN.
    const float lse = FinishRow(w.m[row], l, a_.sinks.empty() ? kNegInf : a_.sinks[h], acc, dv);
    StoreRow(acc, out, dv);
    if (lse_ != nullptr) lse_[(t0 + r) * a_.num_q_heads + h] = lse;
  }
}

float FinishRow(float m, float l, float z, float* acc, int64_t d) {
  const float kNegInf = -std::numeric_limits<float>::infinity();
  if (std::isnan(z) || z == std::numeric_limits<float>::infinity()) {
    std::fill(acc, acc + d, std::numeric_limits<float>::quiet_NaN());
    return std::numeric_limits<float>::quiet_NaN();
  }
  if (z == kNegInf) {  // no sink: l = 0 is a row with no allowed key, o = 0, lse = -inf
    const bool empty = l == 0.0f;
    const float inv = empty ? 0.0f : 1.0f / l;
    for (int64_t c = 0; c < d; ++c) acc[c] *= inv;
    return empty ? kNegInf
                 : static_cast<float>((static_cast<double>(m) + std::log2(static_cast<double>(l))) *
                                      kLn2);
  }
  // In double: 2^(z2 - M) and l 2^(m - M) in (0, 1] and [0, l], L in (1, l + 1].
  const bool empty = l == 0.0f;
  if (empty) {
    for (int64_t c = 0; c < d; ++c) acc[c] *= 0.0f;
    return z;
  }
  const double z2 = static_cast<double>(z) * kLog2e;
  const double mm = std::max<double>(m, z2);
  const double keys = std::exp2(static_cast<double>(m) - mm);
  const double big_l = static_cast<double>(l) * keys + std::exp2(z2 - mm);
  const float f = static_cast<float>(keys / big_l);
  for (int64_t c = 0; c < d; ++c) acc[c] *= f;
  return static_cast<float>((mm + std::log2(big_l)) * kLn2);
}

template <class T, class KV>
absl::Status RunForwardItems(const Forward<T, KV>& fwd, const AttentionArgs& args, const Plan& plan) {
  const std::vector<Item> items = MakeItems(args, plan);
  const int threads = static_cast<int>(std::min<int64_t>(plan.threads, std::max<size_t>(items.size(), 1)));
  return RunItems<Workspace>(
      threads, static_cast<int64_t>(items.size()), [&] { return std::make_unique<Workspace>(plan); },
      [&](int64_t i, Workspace& w) { return fwd.RunItem(items[i], w); });
}

template absl::Status RunForwardItems(const Forward<float, float>& fwd,
                                      const AttentionArgs& args, const Plan& plan);
template absl::Status RunForwardItems(const Forward<BFloat16, BFloat16>& fwd,
                                      const AttentionArgs& args, const Plan& plan);
template absl::Status RunForwardItems(const Forward<float, BFloat16>& fwd,
                                      const AttentionArgs& args, const Plan& plan);
template absl::Status RunForwardItems(const Forward<float, Float16>& fwd,
                                      const AttentionArgs& args, const Plan& plan);
template absl::Status RunForwardItems(const Forward<BFloat16, Float16>& fwd,
                                      const AttentionArgs& args, const Plan& plan);

}  // namespace cpu
}  // namespace attention
}  // namespace gpe
