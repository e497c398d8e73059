// One call's forward pass: its inputs, the encodings prepared for them, and the step
// every driver repeats, one query tile against one key block (tile_step.cc). Two drivers
// run it: query items, each a chunk of query rows of one kv head against every allowed
// key block (forward.cc), and split-key decoding, each item a range of keys of every kv
// head (decode.cc). T (q and o) is float or encodings::sequence::BFloat16, KV (k and v)
// T, or a 16-bit KV cache: BFloat16 or Float16 (float arithmetic throughout).
#ifndef ATTENTION_CPU_FORWARD_H_
#define ATTENTION_CPU_FORWARD_H_

#include <cstdint>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "attention/cpu/kernels.h"
#include "attention/cpu/kernels_decode.h"
#include "attention/cpu/plan.h"
#include "attention/cpu/tile_encodings.h"
#include "attention/cpu/workspace.h"
#include "attention/descriptor.h"

namespace gpe {
namespace attention {
namespace cpu {

// The end of one row's online softmax: acc (d floats, the unnormalised o) scaled to o,
// and the row's lse (natural log) returned, from its base-2 state m (max) and l (sum of
// 2^(s - m); 0: no allowed key, NaN: a NaN row) and the head's sink logit z (natural
// units, -inf: no sink; descriptor.h, SINKS): in double, with z2 = z log2 e and
// M = max(m, z2),
//   L = l 2^(m - M) + 2^(z2 - M),  o = acc 2^(m - M) / L,  lse = (M + log2 L) ln 2.
// A row with no allowed key has o = 0 and lse = z exactly; a NaN or +inf z gives NaN.
float FinishRow(float m, float l, float z, float* acc, int64_t d);

template <class T, class KV = T>
class Forward {
 public:
  Forward(const AttentionArgs& a, const Plan& p, const T* q, const KV* k, const KV* v, T* o,
          float* lse)
      : a_(a), p_(p), q_(q), k_(k), v_(v), o_(o), lse_(lse) {}

  absl::Status Prepare() {
    shaw_ = MakeShawTables(a_, p_);
    // The transformed rows enter the scores only (PrepareEncodings checks Shaw labels).
    return PrepareEncodings(a_, p_.threads, &pq_, &pk_, &tq_, &tk_, /*scores_only=*/true);
  }

  // Query rows [it.q0, it.q1) of every query head of kv head it.g against every allowed
  // key block (forward.cc).
  absl::Status RunItem(const Item& it, Workspace& w) const;

  // Split-key decoding (decode.cc): key rows [k0, k1) of sequence b for every kv head,
  // so a thread streams one contiguous range of the KV cache (all heads of each token
  // are adjacent in bshd/thd); the unnormalised state (m, l, o) of every (token, head)
  // row goes to partial[(chunk, token, head)], combined by CombineDecode.
  absl::Status RunDecodeItem(int64_t b, int64_t k0, int64_t k1, int64_t chunk, float* partial,
                             Workspace& w) const;
  // Keys [first, end) of sequence b (indices within it) its queries may attend to
  // (decode.cc): the window's keys where the mask and the key order allow.
  std::pair<int64_t, int64_t> DecodeKeyRange(int64_t b) const;

  // What the decode kernels request ahead (cpu::PrefetchAhead) while they read block
  // [j0, j0 + nk) of a key or value tensor, of the rows [.., k1) of the sequence starting
  // at kb:
  //  - token-major caches (bshd/thd without padding: every kv head of a token, then the
  //    next token, one contiguous range): the bytes kDecodePrefetchBytes past the block;
  //  - head-major caches (each kv head's rows contiguous, heads further apart, e.g. bhsd):
  //    the next block's rows of every head, head after head (the kernels walk heads
  //    outermost there: see cpu::ScoreDecode);
  // empty otherwise.
  cpu::PrefetchAhead Ahead(const KV* x, const Strides& st, int64_t kb, int64_t j0, int64_t nk,
                           int64_t k1) const;

  // o and lse of every (token, head) from the chunks' states: M = max m_c,
  // l = sum l_c 2^(m_c - M), o = sum o_c 2^(m_c - M) / l (base-2 log domain).
  void CombineDecode(const float* partial, int64_t chunks) const;

 private:
  // One key block as the tiles see it.
  struct KeyBlock {
    int64_t b = 0, g = 0, nk = 0;
    const int64_t* kpos = nullptr;
    int64_t kmin = 0, kmax = 0;
    bool sorted = false;
    bool direct = false;             // scores from key rows (krows, ldk) or panels
    const float* krows = nullptr;
    int64_t ldk = 0;
    const float* panels = nullptr;
    int64_t num_panels = 0;
    int64_t ncols = 0;               // score columns (padding masked)
    const float* vals = nullptr;     // value rows of the block
    int64_t ldv = 0;
    const uint16_t* panels16 = nullptr;  // bf16 dot-product path (else null)
    const uint16_t* pairs16 = nullptr;
    // Split-bf16 float32 (split_bf16.h): panels16 and pairs16 hold the block's split
    // keys and values, and the products run on the tiles (kernels_amx.h).
    bool split = false;
    // Decoding on the bf16 dot products (decode.cc): probabilities rounded to bf16 after
    // the softmax, so the softcap is not fused into it (FusedCap).
    bool dot16 = false;
    // Packed blocks: whether vals holds only finite values (checked when packed); direct
    // blocks check on demand (TileStep, masked entries only).
    bool values_checked = false, values_finite = true;
    // Float key panels and the query rows all finite (packed blocks only): no score of
    // the tile is -inf before the masks, which FusedCap needs.
    bool scores_finite_inputs = false;
  };

  // Up to bq query rows of one head, and the range of their positions (causal skipping,
  // masks).
  struct QueryTile {
    int64_t head, row, n, pmin, pmax;  // row: first buffer row
  };

  // ---- Query items (forward.cc).

  // Rotates, transposes and copies key block blk of the item's sequence (kv head g).
  absl::Status PackBlock(int64_t g, int64_t kb, int64_t lk, int64_t blk, Workspace& w) const;
  // Split-bf16 float32 (plan.split_terms): key block blk's rows, transformed, and its
  // value rows split into bf16 parts and packed (w.split[blk] = 1), or, where a part
  // would not be finite, nothing packed (w.split[blk] = 2: the block takes PackBlock's
  // float path).
  absl::Status PackSplitBlock(int64_t g, int64_t kb, int64_t lk, int64_t blk,
                              Workspace& w) const;

  // Query rows [t0, t0 + mq) (token indices) of heads [h0, h0 + nh) (nh * mq <= rows)
  // against every allowed key block: key blocks outer, query tiles of up to bq rows of
  // one head inner (one L2 load of each key block per pass, shared by the group's heads),
  // online-softmax state per row. Buffer row hi * mq + r is head h0 + hi, token t0 + r.
  absl::Status QueryRows(const Item& it, int64_t h0, int64_t nh, int64_t t0, int64_t mq,
                         int64_t kb, int64_t lk, bool direct, Workspace& w) const;
  absl::StatusOr<KeyBlock> ItemKeyBlock(const Item& it, int64_t blk, int64_t kb, int64_t lk,
                                        bool direct, Workspace& w) const;
  absl::Status BlockTiles(const KeyBlock& kblk, const QueryTile* tile, int64_t tiles, int64_t h0,
                          int64_t nh, int64_t mq, const int64_t* qpos, bool direct,
                          Workspace& w) const;
  void StoreRows(int64_t h0, int64_t nh, int64_t t0, int64_t mq, Workspace& w) const;

  // ---- Split-key decoding (decode.cc).

  absl::Status TokenOrderBlock(KeyBlock kblk, int64_t j0, int64_t k1, const int64_t* qpos,
                               int64_t lq, int64_t qmin, int64_t qmax, Workspace& w) const;
  absl::Status DecodeBlockByHead(KeyBlock kblk, int64_t j0, const int64_t* qpos, int64_t lq,
                                 int64_t qmin, int64_t qmax, Workspace& w) const;
  void StoreDecodeState(int64_t t0, int64_t lq, int64_t chunk, float* partial,
                        const Workspace& w) const;

  // ---- The tile step and what both drivers do around it (tile_step.cc).

  // Query rows [t0, t0 + mq) of heads [h0, h0 + nh) into w.qblk (row hi * mq + r: head
  // h0 + hi, token t0 + r), transformed and scaled, with their Shaw label dot products
  // and, where round16 (the rows feed bf16 dot products), bf16 copies in w.q16.
  absl::Status LoadQueries(int64_t h0, int64_t nh, int64_t t0, int64_t mq, bool round16,
                           Workspace& w) const;

  // m = -inf, l = 0, o = 0 for rows [0, rows).
  void StartRows(int64_t rows, Workspace& w) const;

  // Values of keys [j0, j0 + nk) into the padded value buffer. Packed tiles always copy
  // (value rows of a bshd tensor are a page or more apart: strided rows in the P V loop
  // cost TLB misses on every tile); decoding reads them in place when it can (in_place).
  void CopyValues(int64_t g, int64_t kb, int64_t j0, int64_t nk, Workspace& w,
                  bool in_place = false) const;

  // Key rows [j0, j0 + nk) of sequence start kb, kv head g, into w.rows (nk x head_dim
  // floats; rows a token stride apart, fetched ahead), transformed where k has a
  // transform.
  absl::Status LoadKeyRows(int64_t g, int64_t kb, int64_t j0, int64_t nk, Workspace& w) const;
  // Key rows of block blk for direct scoring: in place (float, no transform) or rotated
  // into the rows buffer. Returns the rows and their stride.
  absl::StatusOr<std::pair<const float*, int64_t>> DirectKeys(int64_t g, int64_t kb,
                                                              int64_t j0, int64_t nk,
                                                              Workspace& w) const;

  // One query tile (nr tokens of each of the nh heads h .. h + nh - 1, row hi * nr + r
  // for head h + hi and token r: scaled rotated q rows, positions tpos of the nr tokens,
  // in [pmin, pmax]) against one key block: scores, locality, bias, mask, online softmax,
  // O += P V. Several heads share a tile only in direct (decoding) mode, where the heads
  // of a group then share every load of a key and value row. qlab / vmass (Shaw labels,
  // null without): the tile rows' key-label dot products and value-label probability
  // mass (p_.nlk / p_.nlv per row, in the tile's row order).
  absl::Status TileStep(const KeyBlock& kb, int64_t h, int64_t nh, const float* qrows,
                        const int64_t* tpos, int64_t nr, int64_t pmin, int64_t pmax, float* m,
                        float* l,
                        float* alpha, float* oacc, Workspace& w,
                        const uint16_t* q16 = nullptr, const float* qlab = nullptr,
                        float* vmass = nullptr) const;

  // The scores s (rows hi * nr + r as in TileStep, stride bk) of one key block made
  // final: locality factors, the softcap, additive biases (log2 e times), the mask
  // (KeyMask: causal, window) and -inf past the block's keys up to kb.ncols.
  // bias_in_scores: the score kernel started from the bias (TileStep), added here no more.
  absl::Status AdjustScores(const KeyBlock& kb, int64_t h, int64_t nh, const int64_t* tpos,
                            int64_t nr, int64_t pmin, int64_t pmax, float* s, Workspace& w,
                            bool bias_in_scores = false) const;

  // The additive bias of kb's sequence, or null.
  const encodings::sequence::AdditiveBias* BiasOf(const KeyBlock& kb) const {
    if (a_.biases.empty()) return nullptr;
    return a_.biases.size() == 1 ? a_.biases[0] : a_.biases[kb.b];
  }

  // Whether decoding (RunDecodeItem's token-order blocks: keys as stored, rows unpadded)
  // runs on the bf16 dot products: bf16 queries and cache where the plan chose them.
  bool DecodeOnDots() const {
    using encodings::sequence::BFloat16;
    if constexpr (std::is_same_v<T, BFloat16> && std::is_same_v<KV, BFloat16>) {
      return p_.bf16_dot && tk_ == nullptr && p_.d == p_.dp && p_.dv == p_.dvp;
    } else {
      return false;
    }
  }

  // The softcap (base 2) SoftmaxTile applies in its maxima pass for this block, or 0
  // where AdjustScores applies it: fused when nothing comes between the softcap and the
  // softmax (no bias, no additive mask), the float softmax runs (not the bf16 one), and
  // the block's keys and the tile's queries are finite. The fused cap runs after the
  // masks and keeps -inf as masked; a score of -inf from an infinite q or k must become
  // -c instead (c tanh(-inf / c)), which the unfused softcap, before the masks, gives.
  float FusedCap(const KeyBlock& kb) const {
    const bool fused = a_.softcap.has_value() && a_.biases.empty() &&
                       a_.mask.additive == nullptr && (kb.pairs16 == nullptr || kb.split) &&
                       !kb.dot16 &&
                       kb.scores_finite_inputs;
    return fused ? static_cast<float>(*a_.softcap * kLog2e) : 0.0f;
  }

  const AttentionArgs& a_;
  const Plan& p_;
  const T* q_;
  const KV *k_, *v_;
  T* o_;
  float* lse_;
  std::vector<int64_t> pq_, pk_;
  std::shared_ptr<const PreparedRowTransform> tq_, tk_;
  ShawTables shaw_;
};

// Runs every query item of the call on plan.threads threads (forward.cc).
template <class T, class KV>
absl::Status RunForwardItems(const Forward<T, KV>& fwd, const AttentionArgs& args, const Plan& plan);

}  // namespace cpu
}  // namespace attention
}  // namespace gpe

#endif  // ATTENTION_CPU_FORWARD_H_
