// The attention API shared by every implementation (reference.h, cpu/; cuda/ follows the
// same semantics with its own argument struct). docs/ARCHITECTURE.md, "attention/" and
// "How encodings meet attention".
//
// WHAT IS COMPUTED
// ----------------
// For every sequence b, query token i of b, query head h (kv head g = h / (Hq / Hkv)):
//   q'_i = Tq(pos_q(i)) q_{i,h}          (RowTransform, multiplicative descriptor; or
//   k'_j = Tk(pos_k(j)) k_{j,g}           the token's STRUCTURED POSITIONS, see below)
//   s_ij = a(i, j) * scale * <q'_i, k'_j> + b_h(pos_q(i), pos_k(j))   (+ SHAW LABELS)
//   a(i, j) = c^|pos_q(i) - pos_k(j)|    (locality scaling, Kogkalidis et al. sec. 4; 1 if off)
//   b_h   from an encodings::sequence::AdditiveBias tile (bias.h: THE additive descriptor)
//   o_{i,h} = sum_j softmax_j(s_ij) v_{j,g}   over the keys j of sequence b that are allowed
//   lse_{i,h} = ln sum_j exp(s_ij)            (optional output)
// Causal masking uses the explicit positions: key j is allowed iff pos_k(j) <= pos_q(i).
// A sliding window (WINDOW, SOFTCAP AND SINKS below) narrows the allowed keys further,
// a logit softcap bounds the q.k part of s_ij, and attention sinks add one logit per
// head to every row's softmax denominator.
// With a KV cache the queries are the LAST tokens of the sequence: give their absolute
// positions (or leave positions empty, see below) and decoding a single query at
// position L-1 against L cached keys equals the last row of full causal attention.
// A query row with no allowed key (empty key sequence, or every key masked) has o = 0,
// lse = -inf, and contributes no gradient. Masking is the kernel's job, never the
// bias's (bias.h): causal biases return finite values above the diagonal.
//
// NON-FINITE VALUES (every implementation, every element type; docs/ARCHITECTURE.md,
// "Non-finite values in attention")
//  - A NaN score s_ij of an allowed key (a NaN in q, k or a bias; inf * 0 in the dot
//    product) or a +inf score makes row i NaN: o and lse NaN, as PyTorch's softmax.
//    The backward then gives NaN to dq of the row and to dk, dv of its allowed keys whose
//    score is not -inf.
//  - A -inf score (a -inf bias, an infinite q or k) gives its key probability 0, in a
//    NaN row too. A row whose every score is -inf is a row with no allowed key (o = 0,
//    lse = -inf).
//  - A masked key (causal future, other sequence) and a key of probability exactly 0
//    contribute nothing, whatever its k and v hold (0 * inf is not formed), to o and to
//    every gradient, with or without masks in the call; a non-finite
//    value row of a key with probability > 0 reaches the row's o (inf or NaN).
//  - Scores are formed in float with the scale folded into q (cpu/: times log2 e); a
//    finite logit whose scaled score exceeds float's range is +inf there (a NaN row),
//    as PyTorch's float32 q k^T overflows first for head_dim >= 3.
//
// WINDOW, SOFTCAP AND SINKS (what inference engines use; flash-attn's window_size and
// softcap, gpt-oss's sinks)
// ---------------------------------------------------------------------------------
//  - Sliding window (window_left, window_right; -1 is unbounded on that side): key j is
//    allowed for query i only if pos_q(i) - window_left <= pos_k(j) <= pos_q(i) +
//    window_right, on top of the causal rule (causal with window_left = W - 1 is
//    Mistral's window of W tokens; flash-attn's window_size = (left, right) with the same
//    meaning). Compared in exact integer arithmetic for any int64 positions. Key tiles
//    wholly outside every row's window are skipped: the cost follows the window.
//  - Logit softcap c > 0 (Gemma 2, Team Gemma 2024, sec. 2): the q.k part of the score
//    becomes c * tanh(x / c), x = a(i, j) * scale * <q'_i, k'_j (+ aK)>, and the bias
//    is added after it:  s_ij = c tanh(x_ij / c) + b_h(i, j). (flash-attn and ggml cap
//    the scaled product the same way, before ALiBi or the mask.) The backward multiplies
//    dL/ds by 1 - tanh^2(x / c). c is at most kMaxSoftcap (1e30): a larger cap is no cap
//    (c tanh(x / c) = x within double's rounding for every |x| < 1e22; leave it unset),
//    and past ~1e37 the float kernels' 1 / c and c log2(e) leave float's normal range
//    (every score 0, or NaN rows, from 2.4e38), so every implementation refuses it.
//  - Sinks: one logit z_h per query head (natural units; OpenAI's gpt-oss, a learned
//    "sink" per head; StreamingLLM's role without a token) joins every row's softmax
//    denominator and attends to nothing:
//      o_i = sum_j e^{s_ij} v_j / (e^{z_h} + sum_j e^{s_ij}),  lse_i = ln(e^{z_h} + sum_j e^{s_ij}).
//    A row with no allowed key has o = 0 and lse = z_h. A NaN or +inf z_h makes its rows
//    NaN (the softmax over [s_i, z_h] would be NaN); -inf is no sink. With lse given
//    back to the backward, the probabilities exp(s_ij - lse_i) already hold the sink's
//    share, and dL/dz_h = -sum_i exp(z_h - lse_i) <dL/do_i, o_i> (rows of head h).
//
// SCORE MASK (PyTorch SDPA's attn_mask)
// ---------------------------------------
// A dense mask over (sequence b, query head h, query i, key j), i and j counted within
// the sequence (0 .. len_q(b) - 1, 0 .. len_k(b) - 1), at element
//   b * batch + h * head + i * query + j * key   (strides in elements; 0 broadcasts),
// either additive (float, natural units: s_ij += mask, after the softcap and the bias;
// -inf masks the key) or boolean (uint8: 0 masks the key, nonzero allows it, as SDPA's
// True = "takes part"). Masked entries are masked keys in every sense above (nothing
// from their k and v reaches the row). The mask has no gradient. A row whose every key
// is masked has o = 0 and lse = -inf (its sink's logit), as PyTorch 2.15's SDPA gives
// (older versions' math path gave NaN). Tiles read the mask in place: O(len_q len_k) bytes per head, the price of a dense
// mask; windows and causal masks are cheaper as such.
//
// LAYOUTS (strides in elements; head_dim is always contiguous, stride 1)
// ---------------------------------------------------------------------
//  - kBSHD: q is [batch, seq_len_q, num_q_heads, head_dim], k and v are
//    [batch, seq_len_k, num_kv_heads, head_dim], o like q. element (b, t, h, d) is at
//    b * batch_stride + t * token_stride + h * head_stride + d.
//    kv_lengths (bshd only; empty or one entry per sequence, 0 <= kv_lengths[b] <=
//    seq_len_k): sequence b's keys are only its first kv_lengths[b] tokens (a batch of
//    KV caches of different lengths in one tensor, flash-attn's cache_seqlens; also a
//    key padding mask). The rest of each cache is never read; the backward's dk and dv
//    are zero there. Default positions and len_k(b) below use kv_lengths[b].
//    Paged KV caches (vLLM's and FlashInfer's block tables; bshd only, `pages`): k and v
//    are [num_pages, page_size, num_kv_heads, head_dim] with k.batch / v.batch the PAGE
//    stride, and sequence b's key token t lives in page
//    block_table[b * pages_per_sequence + t / page_size] at slot t % page_size, where
//    seq_len_k = pages_per_sequence * page_size is each sequence's capacity (kv_lengths
//    its use). Pages may be shared between sequences and in any order; entries of pages
//    past a sequence's length are not read (any value). Forward only: the backward
//    refuses a paged cache.
//  - kTHD (packed variable-length): q is [total_q, num_q_heads, head_dim] with sequence b
//    occupying tokens [cu_seqlens_q[b], cu_seqlens_q[b+1]); k, v likewise with
//    cu_seqlens_k. batch = cu_seqlens_q.size() - 1 = cu_seqlens_k.size() - 1; both start
//    at 0, are non-decreasing (empty sequences allowed) and end at total_q / total_k.
//    element (t, h, d) is at t * token_stride + h * head_stride + d (batch_stride unused).
// AttentionArgs holds spans and pointers only (cu_seqlens, positions, transforms,
// biases): the caller keeps them alive for the duration of each call.
// Token numbering ("token index") is b * seq_len + t for bshd and the packed row for thd;
// positions, lse and bias per-sequence objects are indexed by it.
// Gradients (dq, dk, dv) use the strides of q, k, v; do uses the strides of o.
// VALUE HEAD SIZE: v, o, dv and do rows hold value_dim() = head_dim_v (when > 0)
// components, q and k rows head_dim; everything above holds with head_dim read as
// value_dim() for v and o. The encodings act on q and k only; Shaw's value table has
// value_dim() columns. The default scale stays 1 / sqrt(head_dim) (the dot products'
// size), as in PyTorch's SDPA for E != Ev.
// Element types are each implementation's: the reference takes float32 and float64 (which
// the tests' finite differences use); cpu/ takes float32 and bfloat16 (rope.h's
// BFloat16), with float accumulation.
//
// POSITIONS
// ---------
// q_positions: one int64 per query token (token index order), k_positions: one per key
// token. Both empty means the default: key t of sequence b has position t and query t has
// position (len_k(b) - len_q(b)) + t, i.e. queries are the last len_q(b) positions (the
// KV-cache convention; equal lengths give pos_q = pos_k = t). Exactly one empty is an
// error. Positions are global ids (KV caches and shards stay exact).
//
// STRUCTURED POSITIONS (token-indexed transforms)
// -----------------------------------------------
// A multiplicative encoding whose group element is not one int64 (axial 2D/3D RoPE and
// M-RoPE: one coordinate per axis; algebraic grids: Z^n; algebraic trees: a free-group
// word) reads q_structured / k_structured instead of the int64 positions. Both empty
// (the default) or both set; when set, each needs its transform (q_transform /
// k_transform non-null). Forms (StructuredPositions):
//  - axes: [tokens, num_axes] int64 row-major, coords[t * num_axes + a] is token t's
//    coordinate on axis a (e.g. M-RoPE's (temporal, height, width), a grid's (x, y)).
//  - tree: token t's address, the 0-based child indices from the root, is
//    tree_children[tree_offsets[t] .. tree_offsets[t + 1]) (CSR; tree_offsets has
//    tokens + 1 entries, starts at 0, is non-decreasing and ends at the children count).
// The int64 positions (explicit or default) keep ordering the tokens: causal masks,
// biases, locality and Shaw labels use them, never the structured ones (M-RoPE masks by
// token order). Every transform is bound to its positions once per call
// (PrepareRowTransforms below): RowTransform::Prepare for int64 positions,
// RowTransform::PrepareStructured for structured ones; the result, a
// PreparedRowTransform, indexes TOKENS (first, count) in both cases, so the kernels and
// the reference run the same code whatever the position type.
//
// SHAW LABELS (Shaw et al., "Self-Attention with Relative Position Representations",
// eq. 3-4; relative.h)
// ------------------------------------------------------------------------------------
// With label r(i, j) = clip(pos_k(j) - pos_q(i), -k, k) (table row r + k) and tables of
// 2k + 1 rows of head_dim, shared by every head as in the paper:
//   keys (shaw_keys):     s_ij = a(i, j) * scale * <q'_i, k'_j + aK_r(i,j)> + b_h
//   values (shaw_values): o_i  = sum_j p_ij (v_j + aV_r(i,j))
// q' is the transformed query. Implementations keep memory linear: q'_i is dotted with
// the 2k + 1 key labels once per row and the results gathered by label; the probability
// mass of each row is accumulated per label (2k + 1 sums per row), then multiplied by
// aV. Backward also gives dL/daK and dL/daV (the tables' gradients).
//
// DESCRIPTORS
// -----------
//  - RowTransform (multiplicative, "transform these rows at these positions"): an
//    orthogonal (or scaled, xPos) map applied in place to head_dim-wide rows. q and k
//    take separate transforms (they differ for xPos); the same object may serve both.
//    Its Backward applies the transpose (the maps are linear in the row), turning
//    dL/dq' into dL/dq. Adapters: RopeRowTransform, GrapeMRowTransform<...>.
//  - AdditiveBias (bias.h): either one object for every sequence (position-only biases:
//    ALiBi, T5) or one per sequence (content-dependent: FoX, GRAPE-AP, whose token data
//    belongs to one sequence; sharing one across several sequences is rejected). num_heads() must
//    equal num_q_heads (bias head = q head).
//  - locality: c in (0, 1] multiplies the q.k part of the score by c^|i - j|.
//  - Shaw key and value labels: SHAW LABELS above.
#ifndef ATTENTION_DESCRIPTOR_H_
#define ATTENTION_DESCRIPTOR_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <tuple>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "encodings/sequence/algebraic.h"
#include "encodings/sequence/bias.h"
#include "encodings/sequence/grape_m.h"
#include "encodings/sequence/relative.h"
#include "encodings/sequence/rope.h"

namespace gpe {
namespace attention {

// Threads a transform's Prepare may use for its per-position tables (RoPE's cos / sin,
// GRAPE-M's angles): 1, unless a ScopedPrepareThreads lives on the calling thread. The
// CPU attention sets its own thread count around its Prepare calls, so that a table
// built once per call is not built on one thread while the others wait.
int PrepareThreads();
class ScopedPrepareThreads {
 public:
  explicit ScopedPrepareThreads(int threads);
  ~ScopedPrepareThreads();
  ScopedPrepareThreads(const ScopedPrepareThreads&) = delete;
  ScopedPrepareThreads& operator=(const ScopedPrepareThreads&) = delete;

 private:
  int previous_;
};

// A RowTransform bound to the positions of a list of tokens (int64 positions or
// structured ones), with whatever per-position state it can share (RoPE's cos/sin table)
// computed once. Kernels prepare q's and k's transforms once per call and then rotate
// tile after tile, for every head and from every thread, without recomputing angles.
// Thread-safe. Rows are indexed by TOKEN (position in the list it was bound to).
// The float overloads may use float tables (the kernels); the double overloads compute
// in double throughout (the reference's oracle path).
class PreparedRowTransform {
 public:
  virtual ~PreparedRowTransform() = default;
  // Rows r = 0..count-1 (rows + r * stride) are tokens first + r, transformed in place.
  virtual absl::Status Forward(int64_t first, int64_t count, float* rows,
                               int64_t stride) const = 0;
  virtual absl::Status Forward(int64_t first, int64_t count, double* rows,
                               int64_t stride) const = 0;
  // The transpose, as RowTransform::Backward.
  virtual absl::Status Backward(int64_t first, int64_t count, float* rows,
                                int64_t stride) const = 0;
  virtual absl::Status Backward(int64_t first, int64_t count, double* rows,
                                int64_t stride) const = 0;
  // Gradients with respect to this binding's rows (V T_p x for a binding of
  // RowTransform::PrepareForScores) as gradients with respect to T_p x: multiplied by
  // V^T, in place; count rows, stride apart. The identity for every binding that is T_p
  // itself (the default).
  virtual absl::Status GradientsToTransformBasis(float* /*rows*/, int64_t /*count*/,
                                                 int64_t /*stride*/) const {
    return absl::OkStatus();
  }
};

// Per-token structured positions (STRUCTURED POSITIONS above): exactly one form set.
struct StructuredPositions {
  int64_t num_axes = 0;                     // axes form: >= 1
  absl::Span<const int64_t> coords;         // [tokens, num_axes] row-major
  absl::Span<const int64_t> tree_offsets;   // tree form: tokens + 1 entries
  absl::Span<const int64_t> tree_children;  // concatenated addresses

  enum class Form { kNone, kAxes, kTree };
  Form form() const {
    if (!tree_offsets.empty() || !tree_children.empty()) return Form::kTree;
    return (num_axes != 0 || !coords.empty()) ? Form::kAxes : Form::kNone;
  }
  bool empty() const { return form() == Form::kNone; }
  // Checks the form's sizes and invariants for `tokens` tokens (name in messages).
  absl::Status Validate(int64_t tokens, const char* name) const;
  // Token t's coordinates (axes form) or address (tree form); Validate first.
  absl::Span<const int64_t> Coords(int64_t t) const {
    return coords.subspan(static_cast<size_t>(t * num_axes), static_cast<size_t>(num_axes));
  }
  absl::Span<const int64_t> Address(int64_t t) const {
    return tree_children.subspan(static_cast<size_t>(tree_offsets[t]),
                                 static_cast<size_t>(tree_offsets[t + 1] - tree_offsets[t]));
  }
};

// "Transform these rows, at these positions", in place: rows[r * stride + d], d < dim(),
// becomes (rho(positions[r]) row_r)_d. Const and thread-safe (kernels call it per tile).
class RowTransform {
 public:
  virtual ~RowTransform() = default;
  virtual int64_t dim() const = 0;
  virtual absl::Status Forward(absl::Span<const int64_t> positions, double* rows,
                               int64_t stride) const = 0;
  virtual absl::Status Forward(absl::Span<const int64_t> positions, float* rows,
                               int64_t stride) const = 0;
  // rows <- rho(positions[r])^T rows: dL/d(input row) from dL/d(output row).
  virtual absl::Status Backward(absl::Span<const int64_t> positions, double* rows,
                                int64_t stride) const = 0;
  virtual absl::Status Backward(absl::Span<const int64_t> positions, float* rows,
                                int64_t stride) const = 0;
  // Binds the transform to `positions` (which must outlive the result). The default
  // precomputes nothing and forwards sub-spans of `positions` to Forward/Backward;
  // transforms with shareable per-position state override it.
  virtual absl::StatusOr<std::unique_ptr<PreparedRowTransform>> Prepare(
      absl::Span<const int64_t> positions) const;
  // Binds the transform for scores only: where the transformed q and k rows of a call
  // enter nothing but the inner products <T_i q, T_j k> (no Shaw key labels; gradients
  // with respect to the transformed rows handed out only through
  // PreparedRowTransform::GradientsToTransformBasis) and this one object transforms both,
  // the binding may be V T_p for any orthogonal V independent of the position: the
  // scores, and the gradients through its Backward, are T_p's. The default is Prepare;
  // AlgebraicRowTransform drops its Schur basis' second product so.
  virtual absl::StatusOr<std::unique_ptr<PreparedRowTransform>> PrepareForScores(
      absl::Span<const int64_t> positions) const {
    return Prepare(positions);
  }
  // Binds the transform to structured positions (validated by the caller; the spans must
  // outlive the result). The default accepts the axes form with one axis (as Prepare of
  // its coordinates) and rejects everything else; multi-axis and tree transforms
  // override it.
  virtual absl::StatusOr<std::unique_ptr<PreparedRowTransform>> PrepareStructured(
      const StructuredPositions& positions) const;
  // PrepareStructured for scores only, as PrepareForScores (the default is
  // PrepareStructured; algebraic grids drop their blocks' second products).
  virtual absl::StatusOr<std::unique_ptr<PreparedRowTransform>> PrepareStructuredForScores(
      const StructuredPositions& positions) const {
    return PrepareStructured(positions);
  }
};

// RowTransform's Forward and Backward overloads for a transform whose float and double
// paths are one template: Derived defines (and befriends this class for)
//   template <class T>
//   absl::Status Run(absl::Span<const int64_t> positions, T* rows, int64_t stride,
//                    bool backward) const;
// with backward applying the transpose.
template <class Derived>
class RowTransformFromRun : public RowTransform {
 public:
  absl::Status Forward(absl::Span<const int64_t> positions, double* rows,
                       int64_t stride) const final {
    return self().Run(positions, rows, stride, /*backward=*/false);
  }
  absl::Status Forward(absl::Span<const int64_t> positions, float* rows,
                       int64_t stride) const final {
    return self().Run(positions, rows, stride, /*backward=*/false);
  }
  absl::Status Backward(absl::Span<const int64_t> positions, double* rows,
                        int64_t stride) const final {
    return self().Run(positions, rows, stride, /*backward=*/true);
  }
  absl::Status Backward(absl::Span<const int64_t> positions, float* rows,
                        int64_t stride) const final {
    return self().Run(positions, rows, stride, /*backward=*/true);
  }

 private:
  const Derived& self() const { return static_cast<const Derived&>(*this); }
};

// A RowTransform that takes structured positions only: Forward, Backward and Prepare of
// int64 positions return InvalidArgument naming the transform (`who`) and the `form` of
// StructuredPositions it takes; the derived class overrides PrepareStructured.
class StructuredOnlyRowTransform : public RowTransform {
 public:
  absl::Status Forward(absl::Span<const int64_t> positions, double* rows,
                       int64_t stride) const final;
  absl::Status Forward(absl::Span<const int64_t> positions, float* rows,
                       int64_t stride) const final;
  absl::Status Backward(absl::Span<const int64_t> positions, double* rows,
                        int64_t stride) const final;
  absl::Status Backward(absl::Span<const int64_t> positions, float* rows,
                        int64_t stride) const final;
  absl::StatusOr<std::unique_ptr<PreparedRowTransform>> Prepare(
      absl::Span<const int64_t> positions) const final;

 protected:
  StructuredOnlyRowTransform(const char* who, const char* form) : who_(who), form_(form) {}
  // The InvalidArgument above, also for structured positions of the wrong form.
  absl::Status NeedsStructured() const;

 private:
  const char* who_;
  const char* form_;
};

// RoPE (rope.h) as a RowTransform: one axis (num_axes == 1), role picks xPos's sign.
// Holds a reference: `rope` must outlive the adapter.
class RopeRowTransform final : public RowTransformFromRun<RopeRowTransform> {
 public:
  explicit RopeRowTransform(
      const encodings::sequence::Rope& rope,
      encodings::sequence::RopeRole role = encodings::sequence::RopeRole::kQuery)
      : rope_(rope), role_(role) {}
  int64_t dim() const override { return rope_.options().head_dim; }
  // Builds rope.h's float cos/sin table for the positions once (O(#positions x
  // rotary_dim) memory); tiles are then rotated by table lookups. Single-axis only.
  absl::StatusOr<std::unique_ptr<PreparedRowTransform>> Prepare(
      absl::Span<const int64_t> positions) const override;
  // Multi-axis RoPE (axial 2D/3D, M-RoPE sections: rope.h's plane_axes) from the axes
  // form with num_axes equal to the Rope's: plane i rotates by the coordinate of axis
  // plane_axes[i] (rope.h), through the same float table as Prepare.
  absl::StatusOr<std::unique_ptr<PreparedRowTransform>> PrepareStructured(
      const StructuredPositions& positions) const override;

  // Rows r < count rotated by token r's position ids, axis-major
  // (ids[axis * count + r], rope.h's RopePositions::ids), in T arithmetic with a table in
  // T: the double overloads of the prepared forms use it.
  template <class T>
  absl::Status RunIds(absl::Span<const int64_t> ids, int64_t count, T* rows, int64_t stride,
                      bool backward) const;

 private:
  friend class RowTransformFromRun<RopeRowTransform>;
  template <class T>
  absl::Status Run(absl::Span<const int64_t> positions, T* rows, int64_t stride,
                   bool backward) const;
  const encodings::sequence::Rope& rope_;
  encodings::sequence::RopeRole role_;
};

// GRAPE-M (grape_m.h) as a RowTransform: E is GrapeMCommutingPlanes or GrapeMProduct.
// Backward is G(p)^T through E::Backward (parameter gradients are discarded here; learned
// generators take their gradients from E::Backward directly). `encoding` must outlive it.
// Commuting planes bound to positions: float rows rotated in float from a float table of
// every (position, plane) cos / sin computed once (bit for bit the rounding of the exact
// values: exact reduction, group/angle.h), runs of planes with consecutive coordinates
// vectorised (within a few float roundings of GrapeMCommutingPlanes::Apply); double rows
// with Apply's double table and arithmetic, bit-identical to it.
absl::StatusOr<std::unique_ptr<PreparedRowTransform>> PrepareCommutingPlanes(
    const encodings::sequence::GrapeMCommutingPlanes& planes,
    absl::Span<const int64_t> positions);
// GRAPE-M's product of rank-2 rotations bound to positions: the cos and sin of every
// (position, generator) computed once (GrapeMProduct::Apply computes them per row on
// every call, i.e. per head and per pass), then the same double arithmetic as Apply, so
// the forward equals Apply bit for bit; the backward applies the transposes in reverse.
absl::StatusOr<std::unique_ptr<PreparedRowTransform>> PrepareRank2Product(
    const encodings::sequence::GrapeMProduct& product, absl::Span<const int64_t> positions);

template <class E>
class GrapeMRowTransform final : public RowTransformFromRun<GrapeMRowTransform<E>> {
 public:
  explicit GrapeMRowTransform(const E& encoding) : e_(encoding) {}
  int64_t dim() const override { return e_.dim(); }
  absl::StatusOr<std::unique_ptr<PreparedRowTransform>> Prepare(
      absl::Span<const int64_t> positions) const override {
    if constexpr (std::is_same_v<E, encodings::sequence::GrapeMCommutingPlanes>) {
      return PrepareCommutingPlanes(e_, positions);
    } else if constexpr (std::is_same_v<E, encodings::sequence::GrapeMProduct>) {
      return PrepareRank2Product(e_, positions);
    } else {
      return RowTransform::Prepare(positions);
    }
  }

 private:
  friend class RowTransformFromRun<GrapeMRowTransform>;
  template <class T>
  absl::Status Run(absl::Span<const int64_t> positions, T* rows, int64_t stride,
                   bool backward) const;
  const E& e_;
};

// Kogkalidis et al.'s sequence encoding W^p = exp(p S) (algebraic.h) as a RowTransform.
// Backward applies (W^p)^T = W^{-p} (S skew), so positions must not be INT64_MIN.
// `encoding` must outlive the adapter; dL/dS comes from AlgebraicSequence::Backward.
class AlgebraicRowTransform final : public RowTransformFromRun<AlgebraicRowTransform> {
 public:
  explicit AlgebraicRowTransform(const encodings::sequence::AlgebraicSequence& encoding)
      : e_(encoding) {}
  int64_t dim() const override { return e_.dim(); }
  // Bound to tokens (descriptor.cc, PreparedAlgebraic): on float rows the Schur form's
  // two d x d products and its planes in float (the planes' cos / sin per token computed
  // once, bit for bit their exact values' rounding), about 1e-6 relative off the double
  // Apply (sums of d products in float); double rows through Apply itself.
  absl::StatusOr<std::unique_ptr<PreparedRowTransform>> Prepare(
      absl::Span<const int64_t> positions) const override;
  // R(p) Q'^T only (RowTransform::PrepareForScores, V = Q'^T): one d x d product per
  // float row; double rows the same form in double.
  absl::StatusOr<std::unique_ptr<PreparedRowTransform>> PrepareForScores(
      absl::Span<const int64_t> positions) const override;

 private:
  absl::StatusOr<std::unique_ptr<PreparedRowTransform>> Bind(absl::Span<const int64_t> positions,
                                                             bool scores_only) const;
  friend class RowTransformFromRun<AlgebraicRowTransform>;
  template <class T>
  absl::Status Run(absl::Span<const int64_t> positions, T* rows, int64_t stride,
                   bool backward) const;
  const encodings::sequence::AlgebraicSequence& e_;
};

// Kogkalidis et al.'s tree encoding (algebraic.h, sec. 3.2) as a transform of tree
// addresses (the tree form of StructuredPositions): token t's row becomes
// rho(a_t) row, rho(a_t) = W_{c_1 + 1} ... W_{c_m + 1} the path product in
// group::FreeGroupRepresentation's order, and Backward applies rho(a_t)^T = rho(a_t^-1).
// Relativity: <rho(a_i) q, rho(a_j) k> = <q, rho(a_i^-1 a_j) k>, the path from node i to
// node j. O(depth d^2) per row. int64 positions are rejected (InvalidArgument).
// `tree` must outlive the adapter; dL/dS_c come from the tree's own backward.
class AlgebraicTreeRowTransform final : public StructuredOnlyRowTransform {
 public:
  explicit AlgebraicTreeRowTransform(const encodings::sequence::AlgebraicTree& tree)
      : StructuredOnlyRowTransform("AlgebraicTreeRowTransform", "tree addresses"),
        tree_(tree) {}
  int64_t dim() const override { return tree_.dim(); }
  // The tree form only: every child index in [0, branching()).
  absl::StatusOr<std::unique_ptr<PreparedRowTransform>> PrepareStructured(
      const StructuredPositions& positions) const override;

 private:
  const encodings::sequence::AlgebraicTree& tree_;
};

// Kogkalidis et al.'s grid encodings (algebraic.h, sec. 3.3): a token at (x_1, .., x_n)
// acts by blockdiag(W_1^{x_1}, ..., W_n^{x_n}) (group::DirectSum of SchurRotations), so
// scores depend on (x_j - x_i) per axis only. Grid is AlgebraicGrid2D or
// AlgebraicGrid3D and reads the axes form with num_axes 2 or 3; Backward applies
// W^{-x} (coordinates must not be INT64_MIN). int64 positions are rejected. `grid`
// must outlive the adapter.
template <class Grid>
class AlgebraicGridRowTransform final : public StructuredOnlyRowTransform {
 public:
  static constexpr int64_t kAxes = std::tuple_size<typename Grid::Element>::value;
  explicit AlgebraicGridRowTransform(const Grid& grid)
      : StructuredOnlyRowTransform("AlgebraicGridRowTransform", "per-axis coordinates"),
        grid_(grid) {}
  int64_t dim() const override { return grid_.dim(); }
  // Float rows through one Schur block per axis in float (descriptor.cc, SchurBlock), the
  // scores-only form dropping each block's product by Q'; double rows through the direct
  // sum's Apply.
  absl::StatusOr<std::unique_ptr<PreparedRowTransform>> PrepareStructured(
      const StructuredPositions& positions) const override {
    return Bind(positions, /*scores_only=*/false);
  }
  absl::StatusOr<std::unique_ptr<PreparedRowTransform>> PrepareStructuredForScores(
      const StructuredPositions& positions) const override {
    return Bind(positions, /*scores_only=*/true);
  }

 private:
  absl::StatusOr<std::unique_ptr<PreparedRowTransform>> Bind(const StructuredPositions& positions,
                                                             bool scores_only) const;
  const Grid& grid_;
};
extern template class AlgebraicGridRowTransform<encodings::sequence::AlgebraicGrid2D>;
extern template class AlgebraicGridRowTransform<encodings::sequence::AlgebraicGrid3D>;

enum class Layout { kBSHD, kTHD };

// Paged KV cache (LAYOUTS): page_size 0 is no paging.
struct PagedKv {
  absl::Span<const int64_t> block_table;  // [batch, pages_per_sequence] row-major page ids
  int64_t page_size = 0;                  // tokens per page
  int64_t num_pages = 0;                  // pages in k and v
  bool enabled() const { return page_size > 0; }
};

// SCORE MASK above: at most one of additive / allowed set.
struct ScoreMask {
  const float* additive = nullptr;
  const uint8_t* allowed = nullptr;
  int64_t batch = 0, head = 0, query = 0, key = 1;  // strides in elements, >= 0
  bool empty() const { return additive == nullptr && allowed == nullptr; }
  int64_t Offset(int64_t b, int64_t h, int64_t i, int64_t j) const {
    return b * batch + h * head + i * query + j * key;
  }
};

// Strides in elements of one tensor (head_dim contiguous).
struct Strides {
  int64_t batch = 0;  // bshd only
  int64_t token = 0;
  int64_t head = 0;
};

struct AttentionArgs {
  Layout layout = Layout::kBSHD;
  int64_t batch = 0;         // bshd; thd: derived, must equal cu_seqlens_q.size() - 1
  int64_t seq_len_q = 0;     // bshd: per sequence; thd: total_q
  int64_t seq_len_k = 0;     // bshd: per sequence; thd: total_k
  int64_t num_q_heads = 0;   // >= 1, multiple of num_kv_heads (GQA; MQA: num_kv_heads 1)
  int64_t num_kv_heads = 0;  // >= 1
  int64_t head_dim = 0;      // >= 1: the size of q and k rows (the scores' dot products)
  // The size of v and o rows (VALUE HEAD SIZE); 0: head_dim. DeepSeek-V2/V3's MLA heads
  // score with 192 components (128 + 64 rotary) and carry 128-component values.
  int64_t head_dim_v = 0;
  absl::Span<const int64_t> cu_seqlens_q;  // thd only
  absl::Span<const int64_t> cu_seqlens_k;  // thd only
  absl::Span<const int64_t> kv_lengths;    // bshd only: keys used per sequence (LAYOUTS)
  PagedKv pages;                           // bshd only: a paged KV cache (LAYOUTS)
  Strides q, k, v, o;
  bool causal = false;
  // Default 1 / sqrt(head_dim); must be finite.
  std::optional<double> softmax_scale;
  absl::Span<const int64_t> q_positions;  // see POSITIONS
  absl::Span<const int64_t> k_positions;
  const RowTransform* q_transform = nullptr;  // optional; dim() == head_dim
  const RowTransform* k_transform = nullptr;
  // Empty, one shared bias, or one per sequence (size batch). Non-null entries.
  std::vector<const encodings::sequence::AdditiveBias*> biases;
  std::optional<double> locality;  // c in (0, 1]
  // Structured positions for the transforms (STRUCTURED POSITIONS): both empty or both
  // set (then q_transform / k_transform must be set); one entry per query / key token.
  StructuredPositions q_structured;
  StructuredPositions k_structured;
  // Shaw labels (SHAW LABELS): key labels from shaw_keys->key_table(), value labels from
  // shaw_values->value_table() (the same object may serve both; the key table's width
  // must equal head_dim, the value table's value_dim()).
  const encodings::sequence::ShawRelative* shaw_keys = nullptr;
  const encodings::sequence::ShawRelative* shaw_values = nullptr;
  // WINDOW, SOFTCAP AND SINKS above. Window bounds -1 (unbounded) or >= 0; softcap
  // finite, > 0 and at most kMaxSoftcap; sinks empty or one logit per query head.
  int64_t window_left = -1;
  int64_t window_right = -1;
  std::optional<double> softcap;
  absl::Span<const float> sinks;
  ScoreMask mask;  // SCORE MASK above

  double scale() const;           // the effective softmax scale
  int64_t value_dim() const { return head_dim_v > 0 ? head_dim_v : head_dim; }
  int64_t num_sequences() const;  // batch (thd: cu_seqlens_q.size() - 1, 0 if empty)
  int64_t num_q_tokens() const;
  int64_t num_k_tokens() const;
  // No query and no key token: every output holds zero elements. Every implementation
  // (reference, CPU; the C ABI relies on it) returns at once on such a call, after
  // ValidateAttention and before any loop over the sequences, whose count an empty batch
  // does not bound (a bshd batch of 2^39 empty sequences would take minutes to walk).
  bool empty() const { return num_q_tokens() == 0 && num_k_tokens() == 0; }
  // Token ranges of sequence b (token indices, see LAYOUTS).
  int64_t q_begin(int64_t b) const;
  int64_t q_end(int64_t b) const;
  int64_t k_begin(int64_t b) const;
  int64_t k_end(int64_t b) const;
  // Element offset of (token, head) in a query-side tensor (q, o, dq, do) or a key-side
  // tensor (k, v, dk, dv) with strides s.
  int64_t QOffset(const Strides& s, int64_t token, int64_t head) const;
  int64_t KOffset(const Strides& s, int64_t token, int64_t head) const;
};

// Receives dL/db for one tile of sequence `sequence`, query head `head`: grad[r * ld + c]
// for the query positions q_positions[r] and key positions k_positions[c] (masked pairs
// carry 0). Hand it to the bias's Accumulate*Gradient (bias.h) with the same arguments.
// The reference calls it once per (query token, head) with a 1 x len_k tile; the CPU
// kernels once per (query tile, key tile, head), from one thread at a time.
using BiasGradientSink = std::function<absl::Status(
    int64_t sequence, int64_t head, absl::Span<const int64_t> q_positions,
    absl::Span<const int64_t> k_positions, const double* grad, int64_t ld)>;

// Which (query position, key position) pairs are allowed: the causal rule and the
// sliding window (WINDOW, SOFTCAP AND SINKS) as one interval of pos_k - pos_q,
// [-left, right] with -1 for an open side (causal closes the right side at 0). Exact for
// every int64 position (differences taken in uint64). Every implementation masks with it.
struct KeyMask {
  int64_t left = -1;
  int64_t right = -1;
  static KeyMask Of(const AttentionArgs& args);
  bool none() const { return left < 0 && right < 0; }
  bool Allowed(int64_t pq, int64_t pk) const {
    if (pk < pq) {
      return left < 0 ||
             static_cast<uint64_t>(pq) - static_cast<uint64_t>(pk) <= static_cast<uint64_t>(left);
    }
    return right < 0 ||
           static_cast<uint64_t>(pk) - static_cast<uint64_t>(pq) <= static_cast<uint64_t>(right);
  }
  // Whether every pair of query positions in [qmin, qmax] and key positions in
  // [kmin, kmax] is masked (a tile to skip) ...
  bool AllMasked(int64_t qmin, int64_t qmax, int64_t kmin, int64_t kmax) const {
    return (kmax < qmin && !Allowed(qmin, kmax)) || (kmin > qmax && !Allowed(qmax, kmin));
  }
  // ... and whether some pair may be masked (a tile that needs the mask applied).
  bool AnyMasked(int64_t qmin, int64_t qmax, int64_t kmin, int64_t kmax) const {
    return !Allowed(qmax, kmin) || !Allowed(qmin, kmax);
  }
};

// The largest logit softcap (WINDOW, SOFTCAP AND SINKS): c tanh(x / c) differs from x by
// a relative x^2 / (3 c^2), below double's rounding for |x| < 1e22 at c = 1e30, so a
// larger cap is no cap; the float kernels are exact to float's rounding up to it (their
// 1 / c and c log2(e) stay normal floats), not beyond ~1e37.
inline constexpr double kMaxSoftcap = 1e30;

// Dense strides for the layout: bshd [batch, seq_len, heads, head_dim]; thd
// [total, heads, head_dim].
Strides ContiguousStrides(Layout layout, int64_t seq_len, int64_t heads, int64_t head_dim);

// Every check an implementation relies on; InvalidArgument with a message naming the
// field otherwise. Checked: sizes >= 0 (heads, head_dim >= 1), Hq % Hkv == 0, strides
// >= 0 and (for dims of extent > 1) large enough that distinct (token, head) rows do
// not overlap, no int64 overflow in the largest offset, thd cu_seqlens (sizes, start 0,
// non-decreasing, end at total), bshd cu_seqlens empty, finite scale, positions sizes, transform
// dims, bias head counts and the number of bias objects, locality in (0, 1], window bounds,
// softcap in (0, kMaxSoftcap], sink count and the score mask's extent.
absl::Status ValidateAttention(const AttentionArgs& args);

// The thd check of one cu_seqlens list that ValidateAttention makes (batch + 1 >= 1
// entries, starting at 0, non-decreasing, ending at `total`), for callers that read the
// lists before (the C ABI sizes the score mask by the longest sequence). `name` names
// the list in the message.
absl::Status ValidateCuSeqlens(const char* name, absl::Span<const int64_t> cu_seqlens,
                               int64_t total);

// The backward's Shaw table gradients (dL/daK, dL/daV; num_labels x head_dim, row-major;
// either may be null to skip): InvalidArgument when one is requested without its table
// (shaw_keys / shaw_values), else each requested one set to zero, where every backward
// then adds to it (zero is also the answer of an empty call or of rows with no allowed
// key). The one check and initialisation the reference and CPU backwards share.
absl::Status ZeroShawTableGradients(const AttentionArgs& args, double* key_table_grad,
                                    double* value_table_grad);

// The backward's sink gradient dL/dz (num_q_heads doubles; null to skip): InvalidArgument
// when requested without args.sinks, else set to zero (every backward then adds to it).
absl::Status ZeroSinkGradient(const AttentionArgs& args, double* sink_grad);

// Positions actually used (explicit ones, or the documented default), one per token.
std::vector<int64_t> EffectiveQPositions(const AttentionArgs& args);
std::vector<int64_t> EffectiveKPositions(const AttentionArgs& args);

// Binds args' q and k transforms to the positions every implementation uses: the
// structured ones when set, else the effective int64 positions pq / pk (which must
// outlive the results). Null outputs where there is no transform. ValidateAttention first.
// scores_only: the caller uses the rows for scores only (RowTransform::PrepareForScores /
// PrepareStructuredForScores), taken where one transform object serves q and k.
absl::Status PrepareRowTransforms(const AttentionArgs& args, absl::Span<const int64_t> pq,
                                  absl::Span<const int64_t> pk,
                                  std::unique_ptr<PreparedRowTransform>* q_transform,
                                  std::unique_ptr<PreparedRowTransform>* k_transform,
                                  bool scores_only = false);

// ---------------------------------------------------------------------------------
template <class E>
template <class T>
absl::Status GrapeMRowTransform<E>::Run(absl::Span<const int64_t> positions, T* rows,
                                        int64_t stride, bool backward) const {
  if (!backward) return e_.Apply(positions, rows, stride, rows, stride);
  // E::Backward needs the forward input only for parameter gradients, which are dropped:
  // a zero input keeps it well defined; grad_in aliases grad_out exactly (allowed).
  const int64_t d = e_.dim();
  std::vector<T> zeros(static_cast<size_t>(positions.size() * d), T(0));
  if constexpr (std::is_same_v<E, encodings::sequence::GrapeMCommutingPlanes>) {
    std::vector<double> g;
    return e_.Backward(positions, zeros.data(), d, rows, stride, rows, stride, &g);
  } else {
    typename E::Gradients g;
    return e_.Backward(positions, zeros.data(), d, rows, stride, rows, stride, &g);
  }
}

}  // namespace attention
}  // namespace gpe

#endif  // ATTENTION_DESCRIPTOR_H_
