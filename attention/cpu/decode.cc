#include "attention/cpu/decode.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <type_traits>
#include <vector>

#include "attention/cpu/element_rows.h"
#include "attention/cpu/kernels.h"
#include "attention/cpu/kernels_decode.h"
#include "attention/cpu/nonfinite.h"
#include "attention/cpu/parallel_items.h"

namespace gpe {
namespace attention {
namespace cpu {

using encodings::sequence::Float16;

namespace {

// Bytes of key and value rows (every kv head) in one decoding block.
constexpr int64_t kDecodeBlockBytes = int64_t{256} << 10;
// Decoding's software prefetch distance (cpu::PrefetchAhead): the key and value streams
// are requested this many bytes ahead of the block being read.
// 16 to 128 KiB measured alike (process CPU time 30% below no prefetching).
constexpr int64_t kDecodePrefetchBytes = int64_t{32} << 10;

}  // namespace

// Decoding (split-KV, "flash decoding"): key rows [k0, k1) of sequence b for every kv
// head, so a thread streams one contiguous range of the KV cache (all heads of each
// token are adjacent in bshd/thd); the unnormalised state (m, l, o) of every (token,
// head) row goes to partial[(chunk, token, head)], combined by CombineDecode.
template <class T, class KV>
absl::Status Forward<T, KV>::RunDecodeItem(int64_t b, int64_t k0, int64_t k1, int64_t chunk,
                                       float* partial, Workspace& w) const {
  const int64_t d = p_.d, bk = p_.bk;
  const int64_t hq = a_.num_q_heads;
  const int64_t t0 = a_.q_begin(b), lq = a_.q_end(b) - t0, kb = a_.k_begin(b);
  // Row h * lq + r: head h, token t0 + r.
  // (bf16 copies for decoding on the dot products, as the prefill's tiles have them)
  if (absl::Status s = LoadQueries(0, hq, t0, lq, DecodeOnDots(), w); !s.ok()) return s;
  const int64_t* qpos = pq_.data() + t0;
  const int64_t qmin = *std::min_element(qpos, qpos + lq);
  const int64_t qmax = *std::max_element(qpos, qpos + lq);
  StartRows(hq * lq, w);
  // Blocks of db tokens (keys and values of every kv head about kDecodeBlockBytes):
  // the score tile of every head for one block stays in L1/L2 between the scores, the
  // softmax and P V.
  const int64_t hkv = a_.num_kv_heads;
  const int64_t row_bytes = hkv * (d + p_.dv) * static_cast<int64_t>(sizeof(KV));
  const int64_t db = std::clamp<int64_t>(kDecodeBlockBytes / row_bytes / kVecPad * kVecPad,
                                         kVecPad, bk);
  const int64_t page = a_.pages.page_size;
  for (int64_t j0 = k0, nk = 0; j0 < k1; j0 += nk) {
    nk = std::min(db, k1 - j0);
    // A paged cache: a block never leaves its page (rows a token stride apart inside it).
    if (page > 0) nk = std::min(nk, page - j0 % page);
    KeyBlock kblk;
    kblk.b = b;
    kblk.nk = nk;
    kblk.kpos = pk_.data() + kb + j0;
    kblk.kmin = *std::min_element(kblk.kpos, kblk.kpos + nk);
    kblk.kmax = *std::max_element(kblk.kpos, kblk.kpos + nk);
    if (KeyMask::Of(a_).AllMasked(qmin, qmax, kblk.kmin, kblk.kmax)) continue;
    kblk.sorted = std::is_sorted(kblk.kpos, kblk.kpos + nk);
    kblk.direct = true;
    kblk.ncols = RoundUp(nk, kVecPad);
    // Keys as stored and rows unpadded (d == dp, dv == dvp): read in place, in token
    // order (a 16-bit cache widened in registers).
    if (tk_ == nullptr && p_.d == p_.dp && p_.dv == p_.dvp) {
      if (absl::Status st = TokenOrderBlock(kblk, j0, k1, qpos, lq, qmin, qmax, w); !st.ok()) {
        return st;
      }
      continue;
    }
    if (absl::Status st = DecodeBlockByHead(kblk, j0, qpos, lq, qmin, qmax, w); !st.ok()) {
      return st;
    }
  }
  StoreDecodeState(t0, lq, chunk, partial, w);
  return absl::OkStatus();
}

// Keys and values as stored (float, no key transform, value rows unpadded): scores of
// every kv head in token order (one stream through the block's keys, which the hardware
// prefetchers follow), then per kv head the masks and P V (value rows requested a few
// ahead). Software prefetching of the keys and of the values during the scores was
// measured slower: it filled the miss buffers the demand loads needed.
template <class T, class KV>
absl::Status Forward<T, KV>::TokenOrderBlock(KeyBlock kblk, int64_t j0, int64_t k1,
                                         const int64_t* qpos, int64_t lq, int64_t qmin,
                                         int64_t qmax, Workspace& w) const {
  const int64_t d = p_.d, dv = p_.dv, dvp = p_.dvp, bk = p_.bk, nk = kblk.nk;
  const int64_t hq = a_.num_q_heads, group = hq / a_.num_kv_heads, hkv = a_.num_kv_heads;
  const int64_t kb = a_.k_begin(kblk.b);
  const int64_t rows = hq * lq;
  const float* qb = w.qblk.get();
  float* s = w.s.get();
  const KV* kblock = k_ + a_.KOffset(a_.k, kb + j0, 0);
  const KV* vblock = v_ + a_.KOffset(a_.v, kb + j0, 0);
  const int64_t gr = group * lq;  // rows per kv head
  const bool dot = DecodeOnDots();
  kblk.dot16 = dot;
  if constexpr (std::is_same_v<KV, float>) {
    cpu::ScoreDecode(qb, d, gr, hkv, d, kblock, a_.k.token, a_.k.head, nk, s, bk,
                     Ahead(k_, a_.k, kb, j0, nk, k1));
  } else if (dot) {
    cpu::ScoreDecodeBf16(w.q16.get(), RoundUp(d, 2), gr, hkv, d,
                         reinterpret_cast<const uint16_t*>(kblock), a_.k.token, a_.k.head, nk, s,
                         bk, Ahead(k_, a_.k, kb, j0, nk, k1));
  } else {
    cpu::ScoreDecode16(qb, d, gr, hkv, d, reinterpret_cast<const uint16_t*>(kblock), a_.k.token,
                       a_.k.head, nk, s, bk, std::is_same_v<KV, Float16>,
                       Ahead(k_, a_.k, kb, j0, nk, k1));
  }
  for (int64_t g = 0; g < hkv; ++g) {
    kblk.g = g;
    if (absl::Status st =
            AdjustScores(kblk, g * group, group, qpos, lq, qmin, qmax, s + g * gr * bk, w);
        !st.ok()) {
      return st;
    }
  }
  // Masked entries, and -inf scores from an infinite q or k: a non-finite value row must
  // not reach them (nonfinite.h).
  bool finite = true;
  if (cpu::MayHaveMaskedEntries(a_, qmin, qmax, kblk.kmin, kblk.kmax) ||
      cpu::HasNegInfScore(s, bk, rows, nk)) {
    for (int64_t g = 0; g < hkv && finite; ++g) {
      finite = cpu::RowsFinite(v_ + a_.KOffset(a_.v, kb + j0, g), nk, a_.v.token, dv);
    }
  }
  if (dot && finite) {  // probabilities rounded to bf16 in the softmax's pass, P V on dots
    cpu::SoftmaxRoundTileBf16(s, bk, rows, kblk.ncols, w.m.get(), w.l.get(), w.alpha.get(),
                              w.p16.get(), bk, /*keep_float=*/false);
    cpu::AccumulateDecodeBf16(w.p16.get(), bk, gr, hkv, nk,
                              reinterpret_cast<const uint16_t*>(vblock), a_.v.token, a_.v.head,
                              dv, dvp, w.alpha.get(), w.oacc.get(), dvp,
                              Ahead(v_, a_.v, kb, j0, nk, k1));
    return absl::OkStatus();
  }
  cpu::SoftmaxTile(s, bk, rows, kblk.ncols, w.m.get(), w.l.get(), w.alpha.get(), FusedCap(kblk));
  if (!finite) {
    for (int64_t g = 0; g < hkv; ++g) {
      const int64_t r0 = g * gr;
      float* vals = w.values.get();  // the head's value rows widened (rare path)
      for (int64_t j = 0; j < nk; ++j) {
        LoadRow(v_ + a_.KOffset(a_.v, kb + j0 + j, g), vals + j * dvp, dv);
      }
      cpu::AccumulateSkippingZeros(s + r0 * bk, bk, 1, s + r0 * bk, bk, 1, gr, nk, vals, dvp,
                                   dv, w.alpha.get() + r0, w.oacc.get() + r0 * dvp, dvp);
    }
    return absl::OkStatus();
  }
  if constexpr (std::is_same_v<KV, float>) {
    cpu::AccumulateDecode(s, bk, gr, hkv, nk, vblock, a_.v.token, a_.v.head, dvp, w.alpha.get(),
                          w.oacc.get(), dvp, Ahead(v_, a_.v, kb, j0, nk, k1));
  } else {
    cpu::AccumulateDecode16(s, bk, gr, hkv, nk, reinterpret_cast<const uint16_t*>(vblock),
                            a_.v.token, a_.v.head, dvp, w.alpha.get(), w.oacc.get(), dvp,
                            std::is_same_v<KV, Float16>, Ahead(v_, a_.v, kb, j0, nk, k1));
  }
  return absl::OkStatus();
}

// The block kv head by kv head, every query head of the group in one tile (rows
// g * group * lq ..): one pass over the block's key and value rows per kv head.
template <class T, class KV>
absl::Status Forward<T, KV>::DecodeBlockByHead(KeyBlock kblk, int64_t j0, const int64_t* qpos,
                                           int64_t lq, int64_t qmin, int64_t qmax,
                                           Workspace& w) const {
  const int64_t d = p_.d, dvp = p_.dvp, nk = kblk.nk;
  const int64_t group = a_.num_q_heads / a_.num_kv_heads, hkv = a_.num_kv_heads;
  const int64_t kb = a_.k_begin(kblk.b);
  const float* qb = w.qblk.get();
  for (int64_t g = 0; g < hkv; ++g) {
    kblk.g = g;
    auto keys = DirectKeys(g, kb, j0, nk, w);
    if (!keys.ok()) return keys.status();
    kblk.krows = keys->first;
    kblk.ldk = keys->second;
    CopyValues(g, kb, j0, nk, w, /*in_place=*/true);
    kblk.vals = w.values.get();  // CopyValues' direct rows
    if constexpr (std::is_same_v<KV, float>) {
      if (p_.direct_v) kblk.vals = v_ + a_.KOffset(a_.v, kb + j0, g);
    }
    kblk.ldv = p_.direct_v ? a_.v.token : dvp;
    const int64_t r0 = g * group * lq;
    if (absl::Status st = TileStep(kblk, g * group, group, qb + r0 * d, qpos, lq, qmin, qmax,
                                   w.m.get() + r0, w.l.get() + r0 * kSumLanes,
                                   w.alpha.get() + r0, w.oacc.get() + r0 * dvp, w);
        !st.ok()) {
      return st;
    }
  }
  return absl::OkStatus();
}

// Keys [first, end) of sequence b (indices within it) that its queries may attend to:
// with a mask (causal, window) and keys in position order, those not wholly outside
// every query's interval (two binary searches); else every key.
template <class T, class KV>
std::pair<int64_t, int64_t> Forward<T, KV>::DecodeKeyRange(int64_t b) const {
  const int64_t kb = a_.k_begin(b), lk = a_.k_end(b) - kb;
  const KeyMask mask = KeyMask::Of(a_);
  const int64_t* kpos = pk_.data() + kb;
  const int64_t q0 = a_.q_begin(b), q1 = a_.q_end(b);
  if (mask.none() || q0 == q1 || !std::is_sorted(kpos, kpos + lk)) return {0, lk};
  const auto [lo, hi] = std::minmax_element(pq_.data() + q0, pq_.data() + q1);
  const int64_t qmin = *lo, qmax = *hi;
  const int64_t* first = std::partition_point(
      kpos, kpos + lk, [&](int64_t k) { return k < qmin && !mask.Allowed(qmin, k); });
  const int64_t* end = std::partition_point(
      first, kpos + lk, [&](int64_t k) { return !(k > qmax && !mask.Allowed(qmax, k)); });
  return {first - kpos, end - kpos};
}

// The item's state of every (head, token) row, (m, l, o), to partial[(chunk, token,
// head)].
template <class T, class KV>
void Forward<T, KV>::StoreDecodeState(int64_t t0, int64_t lq, int64_t chunk, float* partial,
                                  const Workspace& w) const {
  const int64_t dvp = p_.dvp, hq = a_.num_q_heads;
  const int64_t nq = a_.num_q_tokens(), stride = dvp + 2;
  for (int64_t h = 0; h < hq; ++h) {
    for (int64_t r = 0; r < lq; ++r) {
      const int64_t row = h * lq + r;
      float* out = partial + ((chunk * nq + t0 + r) * hq + h) * stride;
      float l = 0.0f;
      for (int64_t i = 0; i < kSumLanes; ++i) l += w.l[row * kSumLanes + i];
      out[0] = w.m[row];
      out[1] = l;
      std::memcpy(out + 2, w.oacc.get() + row * dvp, static_cast<size_t>(dvp) * sizeof(float));
    }
  }
}

// What the decode kernels request ahead (cpu::PrefetchAhead) while they read block
// [j0, j0 + nk) of a key or value tensor, of the rows [.., k1) of the sequence starting
// at kb:
//  - token-major caches (bshd/thd without padding: every kv head of a token, then the
//    next token, one contiguous range): the bytes kDecodePrefetchBytes past the block;
//  - head-major caches (each kv head's rows contiguous, heads further apart, e.g. bhsd):
//    the next block's rows of every head, head after head (the kernels walk heads
//    outermost there: see cpu::ScoreDecode);
// empty otherwise.
template <class T, class KV>
cpu::PrefetchAhead Forward<T, KV>::Ahead(const KV* x, const Strides& st, int64_t kb, int64_t j0,
                                     int64_t nk, int64_t k1) const {
  // Row width of the tensor read: head_dim for keys, value_dim() for values.
  const int64_t hkv = a_.num_kv_heads, d = &st == &a_.v ? p_.dv : p_.d, row = hkv * d;
  const int64_t size = static_cast<int64_t>(sizeof(KV));
  if (a_.pages.enabled()) {  // the next block of the sequence, in whatever page it lies
    const int64_t page = a_.pages.page_size, j1 = j0 + nk;
    if (st.head != d || st.token != row || j1 >= k1) return {};
    const int64_t next = std::min({nk, k1 - j1, page - j1 % page});
    return {x + a_.KOffset(st, kb + j1, 0), next * row * size};
  }
  if (st.head == d && st.token == row) {
    const char* end = reinterpret_cast<const char*>(x + a_.KOffset(st, kb + k1 - 1, 0) + row);
    const char* first = reinterpret_cast<const char*>(x + a_.KOffset(st, kb + j0, 0));
    const int64_t bytes = nk * row * size;
    if (end - first <= kDecodePrefetchBytes) return {};
    first += kDecodePrefetchBytes;
    return {first, std::min<int64_t>(bytes, end - first)};
  }
  if (st.token == d && st.head > d && j0 + nk < k1) {
    const int64_t next = std::min(nk, k1 - j0 - nk);
    return {x + a_.KOffset(st, kb + j0 + nk, 0), next * d * size, hkv, st.head * size};
  }
  return {};
}

// o and lse of every (token, head) from the chunks' states: M = max m_c,
// l = sum l_c 2^(m_c - M), o = sum o_c 2^(m_c - M) / l (base-2 log domain).
template <class T, class KV>
void Forward<T, KV>::CombineDecode(const float* partial, int64_t chunks) const {
  const int64_t hq = a_.num_q_heads, nq = a_.num_q_tokens(), d = p_.dv, dvp = p_.dvp;
  const int64_t stride = dvp + 2;
  const float kNegInf = -std::numeric_limits<float>::infinity();
  std::vector<float> acc(static_cast<size_t>(d));
  for (int64_t t = 0; t < nq; ++t) {
    for (int64_t h = 0; h < hq; ++h) {
      float mx = kNegInf;
      bool nan = false;  // a chunk with a NaN or +inf score (NaN l): the row is NaN
      for (int64_t c = 0; c < chunks; ++c) {
        const float* st = partial + ((c * nq + t) * hq + h) * stride;
        if (std::isnan(st[1])) nan = true;
        if (st[1] > 0.0f) mx = std::max(mx, st[0]);
      }
      std::fill(acc.begin(), acc.end(), 0.0f);
      float l = 0.0f;
      if (nan) {
        l = std::numeric_limits<float>::quiet_NaN();
        std::fill(acc.begin(), acc.end(), l);
      } else if (mx != kNegInf) {
        for (int64_t c = 0; c < chunks; ++c) {
          const float* st = partial + ((c * nq + t) * hq + h) * stride;
          if (!(st[1] > 0.0f)) continue;
          const float f = std::exp2(st[0] - mx);
          l += f * st[1];
          for (int64_t e = 0; e < d; ++e) acc[e] += f * st[2 + e];
        }
      }
      const float lse = FinishRow(mx, l, a_.sinks.empty() ? kNegInf : a_.sinks[h], acc.data(), d);
      StoreRow(acc.data(), o_ + a_.QOffset(a_.o, t, h), d);
      if (lse_ != nullptr) lse_[t * hq + h] = lse;
    }
  }
}

namespace {
int64_t MaxQueryLength(const AttentionArgs& args) {
  int64_t max_lq = 0;
  for (int64_t b = 0; b < args.num_sequences(); ++b) {
    max_lq = std::max(max_lq, args.q_end(b) - args.q_begin(b));
  }
  return max_lq;
}
}  // namespace

bool IsDecodeShape(const AttentionArgs& args, const Plan& plan) {
  const int64_t group = args.num_q_heads / args.num_kv_heads;
  return MaxQueryLength(args) * group <= kDirectRows && plan.max_lk >= kDecodeMinKeys &&
         plan.nlk == 0 && plan.nlv == 0;
}

Plan DecodeWorkspacePlan(const AttentionArgs& args, const Plan& plan) {
  Plan wplan = plan;
  const int64_t rows = args.num_q_heads * MaxQueryLength(args);
  wplan.rows = std::max(plan.rows, rows);
  wplan.tile_rows = rows;
  return wplan;
}

template <class T, class KV>
absl::Status RunDecode(const Forward<T, KV>& fwd, const AttentionArgs& args, const Plan& plan) {
  std::vector<std::pair<int64_t, int64_t>> range(static_cast<size_t>(args.num_sequences()));
  int64_t total_k = 0;
  for (int64_t b = 0; b < args.num_sequences(); ++b) {
    if (args.q_end(b) == args.q_begin(b)) continue;
    range[b] = fwd.DecodeKeyRange(b);
    total_k += range[b].second - range[b].first;
  }
  // Chunks of about total_k / (4 threads) keys (whole key blocks), per sequence.
  const int64_t chunk = std::max(plan.bk, RoundUp(total_k / (4 * plan.threads) + 1, plan.bk));
  struct DecodeItem {
    int64_t b, k0, k1, chunk;
  };
  std::vector<DecodeItem> items;
  int64_t chunks = 1;
  for (int64_t b = 0; b < args.num_sequences(); ++b) {
    if (args.q_end(b) == args.q_begin(b)) continue;
    const auto [first, end] = range[b];
    int64_t c = 0;
    for (int64_t k0 = first; k0 < end; k0 += chunk, ++c) {
      items.push_back({b, k0, std::min(end, k0 + chunk), c});
    }
    chunks = std::max(chunks, c);
  }
  // Longest items first (items are taken in order from a shared counter): a batch of
  // sequences of mixed lengths otherwise may end on one long item running alone (the
  // decode of 16 sequences of 1024-8191 keys in one call: 3% of the call on one thread).
  std::stable_sort(items.begin(), items.end(), [](const DecodeItem& x, const DecodeItem& y) {
    return x.k1 - x.k0 > y.k1 - y.k0;
  });
  const int64_t nq = args.num_q_tokens(), hq = args.num_q_heads, stride = plan.dvp + 2;
  // Unused states (sequences with fewer chunks, or no keys) keep l = 0: no contribution.
  std::vector<float> partial(static_cast<size_t>(chunks * nq * hq * stride), 0.0f);
  const int threads =
      static_cast<int>(std::min<int64_t>(plan.threads, std::max<size_t>(items.size(), 1)));
  const Plan wplan = DecodeWorkspacePlan(args, plan);
  absl::Status first = RunItems<Workspace>(
      threads, static_cast<int64_t>(items.size()),
      [&] { return std::make_unique<Workspace>(wplan, /*decode=*/true); },
      [&](int64_t i, Workspace& w) {
        const DecodeItem& it = items[i];
        return fwd.RunDecodeItem(it.b, it.k0, it.k1, it.chunk, partial.data(), w);
      });
  if (!first.ok()) return first;
  fwd.CombineDecode(partial.data(), chunks);
  return absl::OkStatus();
}

template absl::Status RunDecode(const Forward<float, float>& fwd, const AttentionArgs& args,
                                const Plan& plan);
template absl::Status RunDecode(const Forward<BFloat16, BFloat16>& fwd, const AttentionArgs& args,
                                const Plan& plan);
template absl::Status RunDecode(const Forward<float, BFloat16>& fwd, const AttentionArgs& args,
                                const Plan& plan);
template absl::Status RunDecode(const Forward<float, Float16>& fwd, const AttentionArgs& args,
                                const Plan& plan);
template absl::Status RunDecode(const Forward<BFloat16, Float16>& fwd, const AttentionArgs& args,
                                const Plan& plan);

}  // namespace cpu
}  // namespace attention
}  // namespace gpe
