#include "attention/cpu/backward.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <tuple>
#include <type_traits>
#include <vector>

#include "attention/cpu/element_rows.h"
#include "attention/cpu/kernels.h"
#include "attention/cpu/kernels_amx.h"
#include "attention/cpu/kernels_bf16.h"
#include "attention/cpu/nonfinite.h"
#include "attention/cpu/parallel_items.h"
#include "attention/cpu/tile_encodings.h"
#include "attention/cpu/workspace.h"
#include "encodings/sequence/relative.h"
#include "absl/strings/str_cat.h"
#include "hwy/aligned_allocator.h"

namespace gpe {
namespace attention {
namespace cpu {

namespace {

template <class T>
class Backward {
 public:
  Backward(const AttentionArgs& a, const Plan& p, const T* q, const T* k, const T* v,
           const T* o, const float* lse, const T* d_o, T* dk, T* dv,
           float* dq_acc, int64_t chunk_stride, const BiasGradientSink& sink, std::mutex* sink_mu,
           float* dk_rotated)
      : a_(a), mask_(KeyMask::Of(a)), p_(p), q_(q), k_(k), v_(v), o_(o), lse_(lse), do_(d_o), dk_(dk), dv_(dv),
        dq_acc_(dq_acc), chunk_stride_(chunk_stride), nq_(a.num_q_tokens()), sink_(sink),
        sink_mu_(sink_mu), dk_rot_(dk_rotated), dot_(BackwardDotProducts(p)) {}

  // Bound as the forward binds them (scores only but with Shaw key labels), so the
  // recomputed scores are the forward's; CpuBackwardExtras' dq_rotated / dk_rotated are
  // turned into the transform's own basis (GradientsToTransformBasis).
  absl::Status Prepare() {
    shaw_ = MakeShawTables(a_, p_);
    return PrepareEncodings(a_, p_.threads, &pq_, &pk_, &tq_, &tk_, /*scores_only=*/true);
  }

  // dL/daK and dL/daV (Shaw tables, [labels][d], zeroed by the caller; null to skip):
  // each item adds its rows' share under `mu`.
  void SetShawGradients(double* gak, double* gav, std::mutex* mu) {
    gak_ = gak;
    gav_ = gav;
    shaw_mu_ = mu;
  }

  const PreparedRowTransform* q_transform() const { return tq_.get(); }

  // Keys [it.k0, it.k1) of kv head it.g against every query of its group: their dK and
  // dV, the chunk's share of dQ', and (Shaw labels) the item's share of the tables'
  // gradients.
  absl::Status RunItem(const KeyItem& it, BackwardWorkspace& w) const {
    if (absl::Status st = LoadQueries(it, w); !st.ok()) return st;
    for (int64_t j0 = it.k0; j0 < it.k1; j0 += p_.bk) {
      if (absl::Status st = KeyBlockGradients(it, j0, w); !st.ok()) return st;
    }
    const int64_t lq = a_.q_end(it.b) - a_.q_begin(it.b);
    // A sequence without queries adds nothing to the tables' gradients; skipping it also
    // keeps ShawItemGradients from offsetting the label buffers, empty (data() NULL) when
    // no sequence has a query: UB that libFuzzer found (corpus/attention/
    // backward-shaw-no-queries-null-offset).
    if ((p_.nlk > 0 || p_.nlv > 0) && lq > 0) ShawItemGradients(it, lq, w);
    return absl::OkStatus();
  }

 private:
  // Keys [j0, j0 + nk) of an item's sequence (indices within it), as its query tiles
  // see them.
  struct KeyBlock {
    int64_t j0 = 0, nk = 0;
    int64_t panels = 0, ncols = 0;  // key panels, and score columns (padding masked)
    const int64_t* kpos = nullptr;
    int64_t kmin = 0, kmax = 0;
    bool sorted = false;  // key positions non-decreasing
    // The first query tile computed against this block and against the next one (causal
    // skips the tiles wholly before a block): where the prefetch goes at a wrap.
    int64_t first_r0 = 0, next_first_r0 = 0;
  };

  // Query rows [r0, r0 + nr) (tokens qb + r0 ..) of query head h, the group's head hi.
  struct QueryTile {
    int64_t hi = 0, h = 0, r0 = 0, nr = 0;
    const int64_t* qpos = nullptr;
    int64_t qmin = 0, qmax = 0;
    const float* qrows = nullptr;  // Qs and dO rows (stride group * Pitch())
    const float* drows = nullptr;
    // The bf16 dot products (dot_): the same rows rounded (stride group * Pitch()), and
    // transposed: the tile's row c of Qs^T at qt16 + c * bq, of dO^T at dt16 + c * bq.
    const uint16_t *q16 = nullptr, *d16 = nullptr, *qt16 = nullptr, *dt16 = nullptr;
  };

  int64_t Group() const { return a_.num_q_heads / a_.num_kv_heads; }
  // Floats per (token, head) row of Qs and dO: one pitch for both (head_dim and
  // value_dim() padded, whichever is wider), so a tile's rows of either are group *
  // Pitch() apart.
  int64_t Pitch() const { return std::max(p_.dp, p_.dvp); }

  // The item's dQ' rows of query head h from token t (stride dp).
  float* DqRows(const KeyItem& it, int64_t h, int64_t t) const {
    return dq_acc_ + it.chunk * chunk_stride_ + (h * nq_ + t) * p_.dp;
  }

  // The group's queries: q' scale log2(e) (Qs), dO, lse log2(e), D = rowsum(dO o), and
  // (Shaw labels) their label dot products, the per-label sums cleared.
  absl::Status LoadQueries(const KeyItem& it, BackwardWorkspace& w) const {
    const int64_t d = p_.d, dv = p_.dv, pitch = Pitch();
    const int64_t group = Group(), hq = a_.num_q_heads;
    const int64_t qb = a_.q_begin(it.b), lq = a_.q_end(it.b) - qb;
    const int64_t ld = group * pitch;  // row stride of one head in qs / dout
    const float scale = static_cast<float>(a_.scale());
    const float log2e = static_cast<float>(kLog2e);
    std::fill(w.qs.get(), w.qs.get() + lq * ld, 0.0f);
    std::fill(w.dout.get(), w.dout.get() + lq * ld, 0.0f);
    for (int64_t hi = 0; hi < group; ++hi) {
      const int64_t h = it.g * group + hi;
      for (int64_t r = 0; r < lq; ++r) {
        float* qrow = w.qs.get() + r * ld + hi * pitch;
        float* drow = w.dout.get() + r * ld + hi * pitch;
        const T* orow = o_ + a_.QOffset(a_.o, qb + r, h);
        LoadRow(q_ + a_.QOffset(a_.q, qb + r, h), qrow, d);
        LoadRow(do_ + a_.QOffset(a_.o, qb + r, h), drow, dv);
        float dsum = 0.0f;
        for (int64_t c = 0; c < dv; ++c) dsum += drow[c] * ToF(orow[c]);
        w.dsum[r * group + hi] = dsum;
        const float l = lse_[(qb + r) * hq + h];
        w.lse2[r * group + hi] = l * log2e;  // -inf stays -inf
      }
      if (tq_ != nullptr && lq > 0) {
        if (absl::Status st = tq_->Forward(qb, lq, w.qs.get() + hi * pitch, ld); !st.ok()) {
          return st;
        }
      }
    }
    const float qscale = scale * log2e;
    for (int64_t i = 0; i < lq * ld; ++i) w.qs[i] *= qscale;
    if (dot_) RoundQueries(lq, w);
    // Shaw labels: row r * group + hi of qs / dout is (token qb + r, head hi), stride
    // pitch.
    const int64_t nlk = p_.nlk, nlv = p_.nlv, ldl = p_.ldl;
    if (nlk > 0) {
      LabelDots(w.qs.get(), pitch, lq * group, d, shaw_.k, w.qlab.data(), ldl);
      std::fill(w.kmass.begin(), w.kmass.begin() + lq * group * nlk, 0.0f);
    }
    if (nlv > 0) {
      LabelDots(w.dout.get(), pitch, lq * group, dv, shaw_.v, w.dolab.data(), ldl);
      std::fill(w.pmass.begin(), w.pmass.begin() + lq * group * nlv, 0.0f);
    }
    // A forward on the dot products scored bf16-rounded rows; a backward in float (odd
    // block_q: BackwardDotProducts) scores the same rounded values against its lse.
    if (!dot_ && p_.bf16_dot) cpu::RoundToBf16InPlace(w.qs.get(), lq * ld);
    return absl::OkStatus();
  }

  // The bf16 dot products: Qs and dO rounded to bf16 as rows, and transposed tile by
  // tile: per head of the group, per query tile t, a [d or dv][bq] block (rows bq apart:
  // the products read a few of them at once), the column past a tile's odd last row zero
  // (workspace.h).
  void RoundQueries(int64_t lq, BackwardWorkspace& w) const {
    const int64_t pitch = Pitch(), group = Group(), ld = group * pitch, bq = p_.bq;
    const int64_t tiles = (lq + bq - 1) / bq;
    w.lqt = tiles * bq;
    cpu::RoundBf16Row(w.qs.get(), w.qs16.get(), lq * ld);
    cpu::RoundBf16Row(w.dout.get(), w.do16.get(), lq * ld);
    for (int64_t hi = 0; hi < group; ++hi) {
      for (const auto& [src, dst, n] :
           {std::make_tuple(w.qs16.get(), w.qst16.get() + hi * p_.d * w.lqt, p_.d),
            std::make_tuple(w.do16.get(), w.dot16.get() + hi * p_.dv * w.lqt, p_.dv)}) {
        for (int64_t t = 0; t < tiles; ++t) {
          const int64_t r0 = t * bq, nr = std::min(bq, lq - r0);
          uint16_t* block = dst + t * n * bq;
          for (int64_t c = 0; c < n; ++c) {  // the tile's rows stay in L1 across c
            const uint16_t* in = src + r0 * ld + hi * pitch + c;
            uint16_t* out = block + c * bq;
            for (int64_t r = 0; r < nr; ++r) out[r] = in[r * ld];
            if (nr % 2 != 0) out[nr] = 0;
          }
        }
      }
    }
  }

  // The first query tile (its first row) that a key block at positions [kmin, kmax]
  // computes: the mask (causal, window) skips the tiles wholly outside it.
  int64_t FirstTile(const KeyItem& it, int64_t kmin, int64_t kmax) const {
    const int64_t bq = p_.bq;
    const int64_t qb = a_.q_begin(it.b), lq = a_.q_end(it.b) - qb;
    if (mask_.none()) return 0;
    for (int64_t r0 = 0; r0 < lq; r0 += bq) {
      const int64_t* qpos = pq_.data() + qb + r0;
      const auto [lo, hi] = std::minmax_element(qpos, qpos + std::min(bq, lq - r0));
      if (!mask_.AllMasked(*lo, *hi, kmin, kmax)) return r0;
    }
    return 0;
  }

  KeyBlock MakeKeyBlock(const KeyItem& it, int64_t j0) const {
    const int64_t bk = p_.bk;
    KeyBlock kb;
    kb.j0 = j0;
    kb.nk = std::min(bk, it.k1 - j0);
    kb.panels = (kb.nk + kPanel - 1) / kPanel;
    kb.ncols = kb.panels * kPanel;
    kb.kpos = pk_.data() + a_.k_begin(it.b) + j0;
    kb.kmin = *std::min_element(kb.kpos, kb.kpos + kb.nk);
    kb.kmax = *std::max_element(kb.kpos, kb.kpos + kb.nk);
    kb.first_r0 = FirstTile(it, kb.kmin, kb.kmax);
    if (j0 + bk < it.k1) {
      const int64_t* next = kb.kpos + bk;
      const auto [lo, hi] = std::minmax_element(next, next + std::min(bk, it.k1 - j0 - bk));
      kb.next_first_r0 = FirstTile(it, *lo, *hi);
    }
    kb.sorted = std::is_sorted(kb.kpos, kb.kpos + kb.nk);
    return kb;
  }

  // Key rows (transformed, padded), their panels, and the value panels; dK' and dV
  // cleared.
  absl::Status LoadKeyBlock(const KeyItem& it, const KeyBlock& kb, BackwardWorkspace& w) const {
    const int64_t d = p_.d, dp = p_.dp, dv = p_.dv, dvp = p_.dvp, nk = kb.nk, j0 = kb.j0;
    const int64_t ks = a_.k_begin(it.b);
    for (int64_t j = 0; j < nk; ++j) {
      float* row = w.krows.get() + j * dp;
      LoadRow(k_ + a_.KOffset(a_.k, ks + j0 + j, it.g), row, d);
      std::fill(row + d, row + dp, 0.0f);
    }
    if (tk_ != nullptr) {
      if (absl::Status st = tk_->Forward(ks + j0, nk, w.krows.get(), dp); !st.ok()) return st;
    }
    // The float panels serve the float products only; the dot products pack their own
    // below (the careful path reads the key rows, not the panels).
    if (!dot_ && p_.bf16_dot) cpu::RoundToBf16InPlace(w.krows.get(), nk * dp);  // as qs
    if (!dot_) cpu::PackKeyPanels(w.krows.get(), nk, dp, d, w.kpanels.get());
    w.kv_finite = cpu::RowsAllFinite(w.krows.get(), nk, dp, d);
    if constexpr (std::is_same_v<T, float>) {
      const float* vrows = v_ + a_.KOffset(a_.v, ks + j0, it.g);
      cpu::PackKeyPanels(vrows, nk, a_.v.token, dv, w.vpanels.get());
      w.kv_finite = w.kv_finite && cpu::RowsAllFinite(vrows, nk, a_.v.token, dv);
    } else if (dot_) {  // the bf16 rows as they are (packed below)
      w.kv_finite = w.kv_finite && cpu::RowsAllFiniteBf16(
          reinterpret_cast<const uint16_t*>(v_ + a_.KOffset(a_.v, ks + j0, it.g)), nk,
          a_.v.token, dv);
    } else {  // widened through dv's buffer, which is cleared next
      for (int64_t j = 0; j < nk; ++j) {
        LoadRow(v_ + a_.KOffset(a_.v, ks + j0 + j, it.g), w.dv.get() + j * dvp, dv);
      }
      cpu::PackKeyPanels(w.dv.get(), nk, dvp, dv, w.vpanels.get());
      w.kv_finite = w.kv_finite && cpu::RowsAllFinite(w.dv.get(), nk, dvp, dv);
    }
    std::fill(w.dk.get(), w.dk.get() + nk * dp, 0.0f);
    std::fill(w.dv.get(), w.dv.get() + nk * dvp, 0.0f);
    if constexpr (std::is_same_v<T, BFloat16>) {
      if (dot_) {  // the keys rounded as the forward rounds them; the values as they are
        const int64_t bk = p_.bk;
        cpu::RoundBf16Row(w.krows.get(), w.krows16.get(), nk * dp);
        cpu::PackKeyPanelsBf16(w.krows16.get(), nk, dp, d, w.kpanels16.get());
        cpu::PackValuePairsBf16(w.krows16.get(), nk, dp, d, dp, w.kpairs16.get());
        cpu::PackKeyPanelsBf16(
            reinterpret_cast<const uint16_t*>(v_ + a_.KOffset(a_.v, ks + j0, it.g)), nk,
            a_.v.token, dv, w.vpanels16.get());
        std::fill(w.dkt.get(), w.dkt.get() + dp * bk, 0.0f);
        std::fill(w.dvt.get(), w.dvt.get() + dvp * bk, 0.0f);
      }
    }
    return absl::OkStatus();
  }

  // One key block of an item against every allowed query tile of the group, then its
  // dK and dV stored.
  absl::Status KeyBlockGradients(const KeyItem& it, int64_t j0, BackwardWorkspace& w) const {
    const int64_t pitch = Pitch(), bq = p_.bq;
    const int64_t group = Group();
    const int64_t qb = a_.q_begin(it.b), lq = a_.q_end(it.b) - qb;
    const int64_t ld = group * pitch;
    const KeyBlock kb = MakeKeyBlock(it, j0);
    if (absl::Status st = LoadKeyBlock(it, kb, w); !st.ok()) return st;
    for (int64_t hi = 0; hi < group; ++hi) {
      for (int64_t r0 = 0; r0 < lq; r0 += bq) {
        QueryTile qt;
        qt.hi = hi;
        qt.h = it.g * group + hi;
        qt.r0 = r0;
        qt.nr = std::min(bq, lq - r0);
        qt.qpos = pq_.data() + qb + r0;
        qt.qmin = *std::min_element(qt.qpos, qt.qpos + qt.nr);
        qt.qmax = *std::max_element(qt.qpos, qt.qpos + qt.nr);
        if (mask_.AllMasked(qt.qmin, qt.qmax, kb.kmin, kb.kmax)) continue;  // no allowed pair
        qt.qrows = w.qs.get() + r0 * ld + hi * pitch;
        qt.drows = w.dout.get() + r0 * ld + hi * pitch;
        if (dot_) {
          qt.q16 = w.qs16.get() + r0 * ld + hi * pitch;
          qt.d16 = w.do16.get() + r0 * ld + hi * pitch;
          qt.qt16 = w.qst16.get() + hi * p_.d * w.lqt + r0 * p_.d;
          qt.dt16 = w.dot16.get() + hi * p_.dv * w.lqt + r0 * p_.dv;
        }
        if (absl::Status st = TileGradients(it, kb, qt, w); !st.ok()) return st;
      }
    }
    return StoreKeyBlock(it, kb, w);
  }

  // The next tile's rows of Qs and dO (requested during S = Q K^T) and of dQ' (during
  // dP = dO V^T): next in KeyBlockGradients' order, or the first computed one of the
  // next head or key block. Read a tile later from cache rather than memory.
  void NextTileAhead(const KeyItem& it, const KeyBlock& kb, const QueryTile& qt,
                     const BackwardWorkspace& w, cpu::PrefetchRows* ahead_q,
                     cpu::PrefetchRows* ahead_dq) const {
    const int64_t d = p_.d, dp = p_.dp, pitch = Pitch(), bq = p_.bq;
    const int64_t group = Group();
    const int64_t qb = a_.q_begin(it.b), lq = a_.q_end(it.b) - qb;
    const int64_t ld = group * pitch;
    int64_t nhi = qt.hi, nr0 = qt.r0 + bq;
    if (nr0 >= lq) {
      nhi = qt.hi + 1 < group ? qt.hi + 1 : 0;
      nr0 = qt.hi + 1 < group ? kb.first_r0 : kb.next_first_r0;
    }
    const int64_t rows = std::min(bq, lq - nr0);
    ahead_q->num = 2;
    ahead_q->base[0] = w.qs.get() + nr0 * ld + nhi * pitch;
    ahead_q->base[1] = w.dout.get() + nr0 * ld + nhi * pitch;
    ahead_q->rows = rows;
    ahead_q->ld = ld;
    ahead_q->row_floats = std::max(d, p_.dv);
    ahead_dq->num = 1;
    ahead_dq->base[0] = DqRows(it, it.g * group + nhi, qb + nr0);
    ahead_dq->rows = rows;
    ahead_dq->ld = dp;
    ahead_dq->row_floats = d;
  }

  // One query tile against one key block: P recomputed (Probabilities), then dV += P^T dO,
  // dS (ScoreGradients), dQ' += dS K and dK' += dS^T Qs.
  absl::Status TileGradients(const KeyItem& it, const KeyBlock& kb, const QueryTile& qt,
                             BackwardWorkspace& w) const {
    const int64_t dp = p_.dp, dvp = p_.dvp, bk = p_.bk;
    const int64_t ld = Group() * Pitch();
    cpu::PrefetchRows ahead_q, ahead_dq;
    NextTileAhead(it, kb, qt, w, &ahead_q, &ahead_dq);
    if (absl::Status st = Probabilities(it, kb, qt, ahead_q, w); !st.ok()) return st;
    const bool careful = NeedsCare(kb, qt, w);
    const float* p = w.s.get();
    const float* ds = w.dp.get();
    float* dq = DqRows(it, qt.h, a_.q_begin(it.b) + qt.r0);
    if (careful) {  // masked entries and non-finite inputs: skip P = 0 (nonfinite.h)
      const int64_t d = p_.d, nk = kb.nk, nr = qt.nr;
      cpu::AccumulateSkippingZeros(p, 1, bk, p, 1, bk, nk, nr, qt.drows, ld, p_.dv, nullptr,
                                   w.dv.get(), dvp);
      if (absl::Status st = ScoreGradients(it, kb, qt, ahead_dq, w, careful); !st.ok()) return st;
      cpu::AccumulateSkippingZeros(ds, bk, 1, p, bk, 1, nr, nk, w.krows.get(), dp, d, nullptr,
                                   dq, dp);
      cpu::AccumulateSkippingZeros(ds, 1, bk, p, 1, bk, nk, nr, qt.qrows, ld, d, nullptr,
                                   w.dk.get(), dp);
      return absl::OkStatus();
    }
    if (dot_) return DotTileGradients(it, kb, qt, ahead_dq, w);
    // dV += P^T dO.
    cpu::AccumulateTileTAdd(p, bk, kb.nk, qt.nr, qt.drows, ld, dvp, w.dv.get(), dvp);
    if (absl::Status st = ScoreGradients(it, kb, qt, ahead_dq, w, careful); !st.ok()) return st;
    // dQ' += dS K (times scale at the end); dK' += dS^T Qs (Qs carries scale log2 e).
    cpu::AccumulateTileAdd(ds, bk, qt.nr, kb.nk, w.krows.get(), dp, dp, dq, dp);
    cpu::AccumulateTileTAdd(ds, bk, kb.nk, qt.nr, qt.qrows, ld, dp, w.dk.get(), dp);
    return absl::OkStatus();
  }

  // The bf16 products of the backward: on AMX tiles where the plan asks for them
  // (kernels_amx.h: the same packs, whole 16-row blocks and 32-element steps on the tiles,
  // the rest on the dot products), else on the dot products.
  void Score16(const uint16_t* q, int64_t ldq, int64_t mq, int64_t d, const uint16_t* panels,
               int64_t num_panels, float* s, int64_t lds) const {
    if (p_.amx) {
      cpu::ScoreTileAmx(q, ldq, mq, d, panels, num_panels, s, lds);
    } else {
      cpu::ScoreTileBf16(q, ldq, mq, d, panels, num_panels, s, lds);
    }
  }
  void Accumulate16(const uint16_t* p, int64_t ldp, int64_t mq, int64_t nk,
                    const uint16_t* pairs, int64_t dp, const float* alpha, float* o,
                    int64_t ldo) const {
    if (p_.amx) {
      cpu::AccumulateTileAmx(p, ldp, mq, nk, pairs, dp, alpha, o, ldo);
    } else {
      cpu::AccumulateTileBf16(p, ldp, mq, nk, pairs, dp, alpha, o, ldo);
    }
  }

  // TileGradients' products on the bf16 dot products (FlashAttention-2's backward with
  // P and dS rounded to bf16 as its GPU kernels round them; float accumulation):
  // dV^T += dO^T P, dQ' += dS K, dK'^T += Qs^T dS. The transposed sums go to dk and dv
  // in StoreKeyBlock.
  absl::Status DotTileGradients(const KeyItem& it, const KeyBlock& kb, const QueryTile& qt,
                                const cpu::PrefetchRows& ahead_dq, BackwardWorkspace& w) const {
    const int64_t d = p_.d, dp = p_.dp, dv = p_.dv, bk = p_.bk;
    const int64_t nr = qt.nr, nc = kb.ncols, bq = p_.bq;
    const float* ones = w.ones.get();
    cpu::RoundRowsBf16(w.s.get(), bk, nr, nc, w.p16.get(), bk);
    cpu::PackValuePairsBf16(w.p16.get(), nr, bk, nc, bk, w.ppairs16.get());
    Accumulate16(qt.dt16, bq, dv, nr, w.ppairs16.get(), bk, ones, w.dvt.get(), bk);
    if (absl::Status st = ScoreGradients(it, kb, qt, ahead_dq, w, /*careful=*/false); !st.ok()) {
      return st;
    }
    float* dq = DqRows(it, qt.h, a_.q_begin(it.b) + qt.r0);
    cpu::RoundRowsBf16(w.dp.get(), bk, nr, nc, w.ds16.get(), bk);
    Accumulate16(w.ds16.get(), bk, nr, kb.nk, w.kpairs16.get(), dp, ones, dq, dp);
    cpu::PackValuePairsBf16(w.ds16.get(), nr, bk, nc, bk, w.dspairs16.get());
    Accumulate16(qt.qt16, bq, d, nr, w.dspairs16.get(), bk, ones, w.dkt.get(), bk);
    return absl::OkStatus();
  }

  // Whether the tile takes the careful path (nonfinite.h): some operand (keys, values,
  // Qs, dO) is not finite, masks or not (an infinite q or k alone gives entries of P = 0),
  // or the tile may have masked entries (the causal future, biases, which may be -inf,
  // rows without an allowed key or NaN rows) and some row is a NaN row (its lse or
  // D = <dO, o> NaN: a NaN sink, bias or mask entry, or a score that overflowed, with
  // finite operands), so that 0 * x would carry a NaN to where a masked key must
  // contribute nothing (dS = P (dP - D) with P = 0 and D NaN).
  bool NeedsCare(const KeyBlock& kb, const QueryTile& qt, const BackwardWorkspace& w) const {
    // An infinite k (or q) gives scores of -inf, probability exactly 0, without any mask:
    // 0 * inf in dQ += dS K (and the others) made dq NaN where a mask that masked nothing
    // made it finite. Such keys contribute nothing, whatever the masks (as the reference).
    const int64_t ld0 = Group() * Pitch();
    if (!w.kv_finite || !cpu::RowsAllFinite(qt.qrows, qt.nr, ld0, p_.d) ||
        !cpu::RowsAllFinite(qt.drows, qt.nr, ld0, p_.dv)) {
      return true;
    }
    bool maybe_masked = cpu::MayHaveMaskedEntries(a_, qt.qmin, qt.qmax, kb.kmin, kb.kmax);
    for (int64_t r = 0; r < qt.nr && !maybe_masked; ++r) maybe_masked = !std::isfinite(w.shift[r]);
    if (!maybe_masked) return false;
    const int64_t group = Group();
    for (int64_t r = 0; r < qt.nr; ++r) {
      const int64_t row = (qt.r0 + r) * group + qt.hi;
      if (std::isnan(w.shift[r]) || !std::isfinite(w.dsum[row])) return true;
    }
    return false;  // finite inputs (checked above): a masked entry's P = 0 is harmless
  }

  // P = exp2(S - lse2) of the tile into w.s, S as the forward formed it (Shaw key labels,
  // locality factors (kept in w.loc for dS), the softcap (its derivative kept in w.capd),
  // biases, the mask (causal, window), padding at -inf);
  // and (Shaw value labels, for dL/daV) P's mass per label.
  absl::Status Probabilities(const KeyItem& it, const KeyBlock& kb, const QueryTile& qt,
                             const cpu::PrefetchRows& ahead_q, BackwardWorkspace& w) const {
    using encodings::sequence::ShawRelative;
    const int64_t d = p_.d, bk = p_.bk, nk = kb.nk, nr = qt.nr, r0 = qt.r0, hi = qt.hi;
    const int64_t group = Group(), ld = group * Pitch();
    const int64_t nlk = p_.nlk, nlv = p_.nlv, ldl = p_.ldl;
    const int64_t* kpos = kb.kpos;
    const int64_t* qpos = qt.qpos;
    const float log2e = static_cast<float>(kLog2e);
    const float kNegInf = -std::numeric_limits<float>::infinity();
    const encodings::sequence::AdditiveBias* bias =
        a_.biases.empty() ? nullptr : (a_.biases.size() == 1 ? a_.biases[0] : a_.biases[it.b]);
    float* s = w.s.get();
    if (dot_) {
      Score16(qt.q16, ld, nr, d, w.kpanels16.get(), kb.panels, s, bk);
    } else {
      cpu::ScoreTileAhead(qt.qrows, ld, nr, d, w.kpanels.get(), kb.panels, s, bk, ahead_q);
    }
    if (nlk > 0) {  // + <Qs_i, aK_r(i,j)>, as the forward
      for (int64_t r = 0; r < nr; ++r) {
        const float* ql = w.qlab.data() + ((r0 + r) * group + hi) * ldl;
        const int64_t one = BlockLabel(qpos[r], kb.kmin, kb.kmax, shaw_.k.kmax);
        for (int64_t j = 0; j < nk; ++j) {
          s[r * bk + j] +=
              ql[one >= 0 ? one : ShawRelative::LabelIndex(qpos[r], kpos[j], shaw_.k.kmax)];
        }
      }
    }
    if (a_.locality.has_value()) {
      for (int64_t r = 0; r < nr; ++r) {
        for (int64_t j = 0; j < nk; ++j) {
          auto f = encodings::sequence::LocalityFactor(Distance(qpos[r], kpos[j]), *a_.locality);
          if (!f.ok()) return f.status();
          w.loc[r * bk + j] = static_cast<float>(*f);
          s[r * bk + j] *= w.loc[r * bk + j];
        }
      }
    }
    if (a_.softcap.has_value()) {  // as the forward, keeping 1 - tanh^2 for dS
      cpu::SoftcapTile(s, bk, nr, nk, static_cast<float>(*a_.softcap * kLog2e), w.capd.get(), bk);
    }
    if (bias != nullptr) {  // as the forward: the same scores, bit for bit
      if (absl::Status st = AddBias(*bias, qt.h, qpos, nr, kpos, nk, log2e, s, bk, w.bias.get(),
                                    bk, &w.bias_scratch);
          !st.ok()) {
        return st;
      }
    }
    if (!a_.mask.empty()) {  // as the forward
      ApplyScoreMask(a_.mask, it.b, qt.h, 1, (qpos - pq_.data()) - a_.q_begin(it.b), nr,
                     (kpos - pk_.data()) - a_.k_begin(it.b), nk, s, bk);
    }
    if (mask_.AnyMasked(qt.qmin, qt.qmax, kb.kmin, kb.kmax)) {
      for (int64_t r = 0; r < nr; ++r) MaskRow(mask_, qpos[r], kpos, nk, kb.sorted, s + r * bk);
    }
    for (int64_t r = 0; r < nr; ++r) {
      std::fill(s + r * bk + nk, s + r * bk + kb.ncols, kNegInf);
      w.shift[r] = w.lse2[(r0 + r) * group + hi];
    }
    cpu::ExpTile(s, bk, nr, kb.ncols, w.shift.get());  // P
    if (nlv > 0 && gav_ != nullptr) {  // per-label P mass for dL/daV
      for (int64_t r = 0; r < nr; ++r) {
        float* pm = w.pmass.data() + ((r0 + r) * group + hi) * nlv;
        const int64_t one = BlockLabel(qpos[r], kb.kmin, kb.kmax, shaw_.v.kmax);
        if (one >= 0) {
          float sum = 0.0f;
          for (int64_t j = 0; j < nk; ++j) sum += s[r * bk + j];
          pm[one] += sum;
          continue;
        }
        for (int64_t j = 0; j < nk; ++j) {
          pm[ShawRelative::LabelIndex(qpos[r], kpos[j], shaw_.v.kmax)] += s[r * bk + j];
        }
      }
    }
    return absl::OkStatus();
  }

  // dS = P (dP - D) into w.dp (over dP: one tile less in L2; dP is not needed after),
  // with dP = dO V^T (+ Shaw value labels): the gradient of the natural-log score, given
  // to the bias sink, then times the locality factors; and (Shaw key labels) dS's mass
  // per label.
  absl::Status ScoreGradients(const KeyItem& it, const KeyBlock& kb, const QueryTile& qt,
                              const cpu::PrefetchRows& ahead_dq, BackwardWorkspace& w,
                              bool careful) const {
    using encodings::sequence::ShawRelative;
    const int64_t dv = p_.dv, bk = p_.bk, nk = kb.nk, nr = qt.nr, r0 = qt.r0, hi = qt.hi;
    const int64_t group = Group(), ld = group * Pitch();
    const int64_t nlk = p_.nlk, nlv = p_.nlv, ldl = p_.ldl;
    const int64_t* kpos = kb.kpos;
    const int64_t* qpos = qt.qpos;
    const float* s = w.s.get();
    float* dpt = w.dp.get();
    if (dot_) {
      Score16(qt.d16, ld, nr, dv, w.vpanels16.get(), kb.panels, dpt, bk);
    } else {
      cpu::ScoreTileAhead(qt.drows, ld, nr, dv, w.vpanels.get(), kb.panels, dpt, bk, ahead_dq);
    }
    if (nlv > 0) {  // dP_ij = <dO_i, v_j + aV_r(i,j)>
      for (int64_t r = 0; r < nr; ++r) {
        const float* dl = w.dolab.data() + ((r0 + r) * group + hi) * ldl;
        const int64_t one = BlockLabel(qpos[r], kb.kmin, kb.kmax, shaw_.v.kmax);
        for (int64_t j = 0; j < nk; ++j) {
          dpt[r * bk + j] +=
              dl[one >= 0 ? one : ShawRelative::LabelIndex(qpos[r], kpos[j], shaw_.v.kmax)];
        }
      }
    }
    float* ds = dpt;
    for (int64_t r = 0; r < nr; ++r) w.shift[r] = w.dsum[(r0 + r) * group + hi];
    cpu::SoftmaxGradTile(s, bk, ds, bk, nr, kb.ncols, w.shift.get());
    if (careful) {  // dS = 0 where P = 0, whatever dP holds (nonfinite.h)
      for (int64_t r = 0; r < nr; ++r) {
        for (int64_t j = 0; j < kb.ncols; ++j) {
          if (s[r * bk + j] == 0.0f) ds[r * bk + j] = 0.0f;
        }
      }
    }
    if (sink_) {
      std::vector<double>& g = w.grad;
      g.resize(static_cast<size_t>(nr * nk));
      for (int64_t r = 0; r < nr; ++r) {
        for (int64_t j = 0; j < nk; ++j) g[r * nk + j] = ds[r * bk + j];
      }
      std::lock_guard<std::mutex> lock(*sink_mu_);
      if (absl::Status st = sink_(it.b, qt.h, absl::MakeConstSpan(qpos, nr),
                                  absl::MakeConstSpan(kpos, nk), g.data(), nk);
          !st.ok()) {
        return st;
      }
    }
    if (a_.softcap.has_value()) {  // through c tanh(x / c): times 1 - tanh^2
      for (int64_t r = 0; r < nr; ++r) {
        for (int64_t j = 0; j < nk; ++j) ds[r * bk + j] *= w.capd[r * bk + j];
      }
    }
    if (a_.locality.has_value()) {
      for (int64_t r = 0; r < nr; ++r) {
        for (int64_t j = 0; j < nk; ++j) ds[r * bk + j] *= w.loc[r * bk + j];
      }
    }
    if (nlk > 0) {  // per-label dS mass: dQ' and dL/daK at the end of the item
      for (int64_t r = 0; r < nr; ++r) {
        float* km = w.kmass.data() + ((r0 + r) * group + hi) * nlk;
        const int64_t one = BlockLabel(qpos[r], kb.kmin, kb.kmax, shaw_.k.kmax);
        if (one >= 0) {
          float sum = 0.0f;
          for (int64_t j = 0; j < nk; ++j) sum += ds[r * bk + j];
          km[one] += sum;
          continue;
        }
        for (int64_t j = 0; j < nk; ++j) {
          km[ShawRelative::LabelIndex(qpos[r], kpos[j], shaw_.k.kmax)] += ds[r * bk + j];
        }
      }
    }
    return absl::OkStatus();
  }

  // dK = T^T (dK' / log2 e) (and dK' itself where asked for), dV as is, into the
  // tensors.
  absl::Status StoreKeyBlock(const KeyItem& it, const KeyBlock& kb, BackwardWorkspace& w) const {
    const int64_t d = p_.d, dp = p_.dp, nk = kb.nk, j0 = kb.j0;
    const int64_t ks = a_.k_begin(it.b);
    const float unscale = static_cast<float>(1.0 / kLog2e);
    if (dot_) {  // the dot products' transposed sums (DotTileGradients)
      const int64_t bk = p_.bk, dvp = p_.dvp;
      for (int64_t c = 0; c < d; ++c) {
        for (int64_t j = 0; j < nk; ++j) w.dk[j * dp + c] += w.dkt[c * bk + j];
      }
      for (int64_t c = 0; c < p_.dv; ++c) {
        for (int64_t j = 0; j < nk; ++j) w.dv[j * dvp + c] += w.dvt[c * bk + j];
      }
    }
    for (int64_t i = 0; i < nk * dp; ++i) w.dk[i] *= unscale;
    if (dk_rot_ != nullptr) {  // in the transform's own basis (scores-only bindings)
      std::vector<float> g(w.dk.get(), w.dk.get() + nk * dp);
      if (tk_ != nullptr) {
        if (absl::Status st = tk_->GradientsToTransformBasis(g.data(), nk, dp); !st.ok()) {
          return st;
        }
      }
      for (int64_t j = 0; j < nk; ++j) {
        std::memcpy(dk_rot_ + a_.KOffset(a_.k, ks + j0 + j, it.g), g.data() + j * dp,
                    static_cast<size_t>(d) * sizeof(float));
      }
    }
    if (tk_ != nullptr) {
      if (absl::Status st = tk_->Backward(ks + j0, nk, w.dk.get(), dp); !st.ok()) return st;
    }
    for (int64_t j = 0; j < nk; ++j) {
      if (dk_ != nullptr) StoreRow(w.dk.get() + j * dp, dk_ + a_.KOffset(a_.k, ks + j0 + j, it.g), d);
      if (dv_ != nullptr) {
        StoreRow(w.dv.get() + j * p_.dvp, dv_ + a_.KOffset(a_.v, ks + j0 + j, it.g), p_.dv);
      }
    }
    return absl::OkStatus();
  }

  // Shaw labels at the end of an item, from its rows' per-label sums (descriptor.h):
  // dQ'_i += sum_r M_ir aK_r (scaled with the rest of dQ' later), dL/daK_r +=
  // sum_i M_ir Qs_i / log2 e (= scale sum_i M_ir q'_i), dL/daV_r += sum_i P_ir dO_i.
  void ShawItemGradients(const KeyItem& it, int64_t lq, BackwardWorkspace& w) const {
    const int64_t d = p_.d, dp = p_.dp, dv = p_.dv, pitch = Pitch(), nlk = p_.nlk, nlv = p_.nlv;
    const int64_t group = a_.num_q_heads / a_.num_kv_heads;
    const int64_t qb = a_.q_begin(it.b);
    std::vector<double> gk(static_cast<size_t>(gak_ != nullptr ? nlk * d : 0), 0.0);
    std::vector<double> gv(static_cast<size_t>(gav_ != nullptr ? nlv * dv : 0), 0.0);
    const double unscale = 1.0 / kLog2e;
    // dQ'_i += sum_r M_ir aK_r, head by head (rows r * group + hi of kmass).
    for (int64_t hi = 0; hi < group && nlk > 0; ++hi) {
      float* dq = DqRows(it, it.g * group + hi, qb);
      AddLabelRows(w.kmass.data() + hi * nlk, group * nlk, lq, nlk, shaw_.k, dp,
                   w.lab_ones.data(), dq, dp);
    }
    for (int64_t r = 0; r < lq; ++r) {
      for (int64_t hi = 0; hi < group; ++hi) {
        const int64_t row = r * group + hi;
        if (!gk.empty()) {
          const float* km = w.kmass.data() + row * nlk;
          const float* qs = w.qs.get() + row * pitch;
          for (int64_t t = 0; t < nlk; ++t) {
            if (km[t] == 0.0f) continue;
            for (int64_t c = 0; c < d; ++c) gk[t * d + c] += unscale * km[t] * qs[c];
          }
        }
        if (!gv.empty()) {
          const float* pm = w.pmass.data() + row * nlv;
          const float* dout = w.dout.get() + row * pitch;
          for (int64_t t = 0; t < nlv; ++t) {
            if (pm[t] == 0.0f) continue;
            for (int64_t c = 0; c < dv; ++c) gv[t * dv + c] += double(pm[t]) * dout[c];
          }
        }
      }
    }
    if (gk.empty() && gv.empty()) return;
    std::lock_guard<std::mutex> lock(*shaw_mu_);
    for (size_t i = 0; i < gk.size(); ++i) gak_[i] += gk[i];
    for (size_t i = 0; i < gv.size(); ++i) gav_[i] += gv[i];
  }

  const AttentionArgs& a_;
  const KeyMask mask_;
  const Plan& p_;
  const T *q_, *k_, *v_, *o_;
  const float* lse_;
  const T* do_;
  T *dk_, *dv_;
  // dQ' partial sums, [chunk][q head][token][dp]: each head's rows contiguous, so a query
  // tile's rows are one stream (token-major rows of all heads would put them hq * dp
  // floats apart, a page or more, one TLB entry per row).
  float* dq_acc_;
  int64_t chunk_stride_;
  int64_t nq_;
  const BiasGradientSink& sink_;
  std::mutex* sink_mu_;
  float* dk_rot_;
  const bool dot_;  // products on the bf16 dot products (BackwardDotProducts)
  std::vector<int64_t> pq_, pk_;
  std::shared_ptr<const PreparedRowTransform> tq_, tk_;
  ShawTables shaw_;
  double *gak_ = nullptr, *gav_ = nullptr;
  std::mutex* shaw_mu_ = nullptr;
};

// A [chunks][q head][token][dp] dQ' accumulator of `floats` floats, zeroed by all
// threads (tens of MiB at long sequences: first touch and clearing in parallel rather
// than on the calling thread while the others wait). Null when it cannot be allocated.
hwy::AlignedFreeUniquePtr<float[]> ZeroedDqAccumulator(int threads, int64_t acc_floats) {
  hwy::AlignedFreeUniquePtr<float[]> dq_acc = hwy::AllocateAligned<float>(std::max<int64_t>(acc_floats, 1));
  if (dq_acc == nullptr) return dq_acc;
  constexpr int64_t kZeroBlock = int64_t{1} << 18;  // floats per parallel item (1 MiB)
  ParallelItems(threads, (acc_floats + kZeroBlock - 1) / kZeroBlock, [&](int64_t i, int) {
    const int64_t b = i * kZeroBlock;
    std::fill(dq_acc.get() + b, dq_acc.get() + std::min(acc_floats, b + kZeroBlock), 0.0f);
  });
  return dq_acc;
}

// dq (and dq_rotated) from the key chunks' dQ' partial sums in acc: their sum, times
// scale, then the transpose of the q transform tq, one q head per parallel item (each
// head's rows are contiguous in acc).
template <class T>
absl::Status FinishDq(const AttentionArgs& args, const Plan& plan, int64_t chunks,
                      int64_t chunk_stride, float* acc, const PreparedRowTransform* tq, T* dq,
                      float* dq_rotated) {
  const int64_t nq = args.num_q_tokens(), hq = args.num_q_heads, d = args.head_dim;
  const int64_t dp = plan.dp;
  const float scale = static_cast<float>(args.scale());
  const int64_t head = nq * dp;  // floats per head in one chunk
  struct NoWorkspace {};
  return RunItems<NoWorkspace>(
      plan.threads, hq, [] { return std::make_unique<NoWorkspace>(); },
      [&](int64_t h, NoWorkspace&) -> absl::Status {
        float* rows = acc + h * head;
        for (int64_t c = 1; c < chunks; ++c) {
          const float* part = acc + c * chunk_stride + h * head;
          for (int64_t i = 0; i < head; ++i) rows[i] += part[i];
        }
        for (int64_t i = 0; i < head; ++i) rows[i] *= scale;
        if (dq_rotated != nullptr) {  // in the transform's own basis (scores-only bindings)
          std::vector<float> g(rows, rows + nq * dp);
          if (tq != nullptr) {
            if (absl::Status st = tq->GradientsToTransformBasis(g.data(), nq, dp); !st.ok()) {
              return st;
            }
          }
          for (int64_t t = 0; t < nq; ++t) {
            std::memcpy(dq_rotated + args.QOffset(args.q, t, h), g.data() + t * dp,
                        static_cast<size_t>(d) * sizeof(float));
          }
        }
        if (dq == nullptr) return absl::OkStatus();
        if (tq != nullptr) {
          if (absl::Status st = tq->Backward(0, nq, rows, dp); !st.ok()) return st;
        }
        for (int64_t t = 0; t < nq; ++t) StoreRow(rows + t * dp, dq + args.QOffset(args.q, t, h), d);
        return absl::OkStatus();
      });
}

}  // namespace

template <class T>
absl::Status RunBackward(const AttentionArgs& args, const Plan& plan, const T* q, const T* k,
                         const T* v, const T* o, const float* lse, const T* d_o, T* dq, T* dk,
                         T* dv, const BiasGradientSink& bias_sink,
                         const CpuBackwardExtras& extras) {
  const int64_t nq = args.num_q_tokens(), hq = args.num_q_heads;
  const BackwardPlan bp = MakeKeyItems(args, plan);
  const int64_t chunk_stride = nq * hq * plan.dp;
  hwy::AlignedFreeUniquePtr<float[]> dq_acc =
      ZeroedDqAccumulator(plan.threads, std::max<int64_t>(bp.chunks, 1) * chunk_stride);
  if (dq_acc == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "attention backward: the dq accumulator of ", std::max<int64_t>(bp.chunks, 1),
        " key chunks x ", chunk_stride, " floats could not be allocated"));
  }
  std::mutex sink_mu, shaw_mu;
  Backward<T> bwd(args, plan, q, k, v, o, lse, d_o, dk, dv, dq_acc.get(), chunk_stride,
                  bias_sink, &sink_mu, extras.dk_rotated);
  if (absl::Status s = bwd.Prepare(); !s.ok()) return s;
  bwd.SetShawGradients(extras.shaw_key_table_grad, extras.shaw_value_table_grad, &shaw_mu);
  int64_t max_lq = 0;
  for (int64_t b = 0; b < args.num_sequences(); ++b) {
    max_lq = std::max(max_lq, args.q_end(b) - args.q_begin(b));
  }
  const int64_t group = hq / args.num_kv_heads;
  const int threads = static_cast<int>(
      std::min<int64_t>(plan.threads, std::max<int64_t>(static_cast<int64_t>(bp.items.size()), 1)));
  absl::Status first = RunItems<BackwardWorkspace>(
      threads, static_cast<int64_t>(bp.items.size()),
      [&] { return std::make_unique<BackwardWorkspace>(plan, max_lq, group); },
      [&](int64_t i, BackwardWorkspace& w) { return bwd.RunItem(bp.items[i], w); });
  if (!first.ok()) return first;
  // dK, dV: every key belongs to an item, so all are written (keys of sequences with no
  // queries get their zero gradients there too); dq from the chunks' partial sums.
  if ((dq != nullptr || extras.dq_rotated != nullptr) && nq > 0) {
    return FinishDq(args, plan, bp.chunks, chunk_stride, dq_acc.get(), bwd.q_transform(), dq,
                    extras.dq_rotated);
  }
  return absl::OkStatus();
}

template absl::Status RunBackward(const AttentionArgs& args, const Plan& plan, const float* q,
                                  const float* k, const float* v, const float* o, const float* lse,
                                  const float* d_o, float* dq, float* dk, float* dv,
                                  const BiasGradientSink& bias_sink,
                                  const CpuBackwardExtras& extras);
template absl::Status RunBackward(const AttentionArgs& args, const Plan& plan, const BFloat16* q,
                                  const BFloat16* k, const BFloat16* v, const BFloat16* o,
                                  const float* lse, const BFloat16* d_o, BFloat16* dq, BFloat16* dk,
                                  BFloat16* dv, const BiasGradientSink& bias_sink,
                                  const CpuBackwardExtras& extras);

}  // namespace cpu
}  // namespace attention
}  // namespace gpe
