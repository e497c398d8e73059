// Additive relative biases for attention: ALiBi, T5 buckets, FoX, GRAPE-AP.
//
// THE TILE-BIAS INTERFACE (what attention kernels consume; docs/ARCHITECTURE.md,
// "Tile biases (additive)")
// ------------------------------------------------------------------------------------
// An additive bias adds b_h(i, j) to the score of query i and key j in head h. Kernels
// never materialise the s x s matrix: they ask an `AdditiveBias` for one tile at a time,
//
//   FillTile(h, q_positions[0..m), k_positions[0..n), out, ld)
//     out[r * ld + c] = b_h(q_positions[r], k_positions[c]),  r < m, c < n,
//
// with `ld` the row stride of `out` in elements (ld >= n), out float or double (values
// are formed in double and rounded once; FoX's float tiles whose keys all precede or all
// follow the queries are the rounded sum of two rounded parts, within 2 ulp: FoxBias). Positions are explicit int64 per-token ids,
// global (the query's absolute position under a KV cache, the token's global index in a
// shard), so a tile of a cached or sharded sequence is bit-identical to the same tile of
// the whole sequence. They need not be sorted or contiguous; m = 0 or n = 0 is a no-op.
// Every pairwise difference q - k must fit in int64.
//
// Masking is the kernel's job, never the bias's. Causal biases (ALiBi causal, FoX,
// GRAPE-AP) return a finite value above the diagonal (j > i) too: the same closed form
// continued (ALiBi: -m (i - j) > 0; FoX: c_i - c_j; GRAPE-AP: the signed path sum), so
// the group law holds on the whole tile; the kernel applies -inf (or skips the tile)
// where j > i. `causal()` says whether the bias is only meaningful for j <= i.
//
// Two kinds of biases:
//  - position-only (ALiBi, T5): b_h(i, j) depends on j - i alone (`relative()` is true,
//    so a kernel may cache one value per diagonal of a tile);
//  - content-dependent (FoX, GRAPE-AP; `needs_token_data()` is true): built from
//    per-token inputs for one sequence whose tokens carry the positions
//    [first_position, first_position + length). Positions outside that range are an
//    error. Variable-length batches build one object per sequence (prefix sums restart
//    at each sequence's first token), which is also how a KV cache keeps exact values:
//    FoxBias::Append extends the sequence token by token.
// Thread safety: FillTile and the Accumulate*Gradient calls are const and read-only on
// the object (gradients go to caller buffers), so tiles may be filled concurrently.
//
// Backward passes are tiled the same way: given dL/db for a tile (same layout as
// FillTile's output), each learnable bias accumulates (+=) into caller-owned gradient
// buffers, in double. Summing over all tiles gives the full gradient.
//
// Conventions per bias (i = query position, j = key position):
//  - ALiBi (Press et al.): causal b = -m_h (i - j); symmetric b = -m_h |i - j|.
//  - T5 (Raffel et al.): b = table[bucket(j - i), h], table row-major [bucket, head].
//  - FoX (Lin et al.): f_t = sigmoid(x_t) per head, c_t = sum_{l = first..t} ln f_l,
//    b = c_i - c_j = sum_{l = j+1..i} ln f_l for j <= i.
//  - GRAPE-AP (Zhang et al., "Group Representational Position Encoding", path-integral
//    additive GRAPE): b(t, j) = sum_{l = j+1..t} psi(t, l). See GrapeApBias.
#ifndef ENCODINGS_SEQUENCE_BIAS_H_
#define ENCODINGS_SEQUENCE_BIAS_H_

#include <cstdint>
#include <utility>
#include <vector>

#include <Eigen/Dense>
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace gpe {
namespace encodings {
namespace sequence {

class AdditiveBias {
 public:
  virtual ~AdditiveBias() = default;

  virtual int64_t num_heads() const = 0;
  // True when the bias reads per-token data (gates, vectors) beyond positions.
  virtual bool needs_token_data() const = 0;
  // True when b_h(i, j) depends on j - i only.
  virtual bool relative() const = 0;
  // True when only j <= i is meaningful (the kernel masks j > i).
  virtual bool causal() const = 0;

  // out[r * ld + c] = b_head(q_positions[r], k_positions[c]). Errors: head outside
  // [0, num_heads), ld < n, out null with m, n > 0, overflowing q - k, positions outside
  // the token data's range.
  absl::Status FillTile(int64_t head, absl::Span<const int64_t> q_positions,
                        absl::Span<const int64_t> k_positions, float* out, int64_t ld) const;
  absl::Status FillTile(int64_t head, absl::Span<const int64_t> q_positions,
                        absl::Span<const int64_t> k_positions, double* out, int64_t ld) const;

  // Relative biases (relative() true): out[t] = b_head(i, i + first_distance + t) for
  // t < width, the bias at key-minus-query distance first_distance + t (any i): the
  // nr + nk - 1 values of a Toeplitz tile, without position lists and with O(1) checks.
  // Bit for bit what FillTile gives at those distances. Errors: a bias that is not
  // relative, head outside [0, num_heads), width < 0, out null with width > 0, a distance
  // (or its negation) outside int64.
  absl::Status FillDistances(int64_t head, int64_t first_distance, int64_t width,
                             float* out) const;

  // Separable float tiles: where this tile is b(i, j) = u_i + w_j, with FillTile's float
  // tile exactly fl(u_i + w_j) (FoX's tiles whose keys all precede or all follow the
  // queries), writes u to row_part[0..m), w to col_part[0..n) and returns true; returns
  // false, writing nothing, elsewhere (the default). A kernel then adds u_i + w_j to its
  // scores without forming the tile. Errors as FillTile's (where a bias has separable
  // tiles; the default checks nothing: it forms none).
  virtual absl::StatusOr<bool> SeparableTile(int64_t /*head*/,
                                             absl::Span<const int64_t> /*q_positions*/,
                                             absl::Span<const int64_t> /*k_positions*/,
                                             float* /*row_part*/, float* /*col_part*/) const {
    return false;
  }

 protected:
  // Called after the shared checks; out points at an m x n tile with row stride ld.
  virtual absl::Status DoFillTile(int64_t head, absl::Span<const int64_t> q,
                                  absl::Span<const int64_t> k, float* out, int64_t ld) const = 0;
  virtual absl::Status DoFillTile(int64_t head, absl::Span<const int64_t> q,
                                  absl::Span<const int64_t> k, double* out, int64_t ld) const = 0;
  // Called after FillDistances's checks; the default fills one row through DoFillTile
  // (query 0 against keys at the distances).
  virtual absl::Status DoFillDistances(int64_t head, int64_t first_distance, int64_t width,
                                       float* out) const;
};

// AdditiveBias's two DoFillTile overloads for a bias whose float and double tiles come
// from one template: Derived defines (and befriends this class for)
//   template <class T>
//   absl::Status Fill(int64_t head, absl::Span<const int64_t> q, absl::Span<const int64_t> k,
//                     T* out, int64_t ld) const;
// Instantiated where Derived's Fill is defined: bias.cc for the biases of this file,
// grape_a.cc for GrapeABias.
template <class Derived>
class AdditiveBiasFromFill : public AdditiveBias {
 protected:
  absl::Status DoFillTile(int64_t head, absl::Span<const int64_t> q, absl::Span<const int64_t> k,
                          float* out, int64_t ld) const final;
  absl::Status DoFillTile(int64_t head, absl::Span<const int64_t> q, absl::Span<const int64_t> k,
                          double* out, int64_t ld) const final;
};

template <class Derived>
absl::Status AdditiveBiasFromFill<Derived>::DoFillTile(int64_t head, absl::Span<const int64_t> q,
                                                       absl::Span<const int64_t> k, float* out,
                                                       int64_t ld) const {
  return static_cast<const Derived&>(*this).Fill(head, q, k, out, ld);
}
template <class Derived>
absl::Status AdditiveBiasFromFill<Derived>::DoFillTile(int64_t head, absl::Span<const int64_t> q,
                                                       absl::Span<const int64_t> k, double* out,
                                                       int64_t ld) const {
  return static_cast<const Derived&>(*this).Fill(head, q, k, out, ld);
}

// Reference for tests: the full |q| x |k| matrix of one head (a single FillTile in double).
absl::StatusOr<Eigen::MatrixXd> DenseBias(const AdditiveBias& bias, int64_t head,
                                          absl::Span<const int64_t> q_positions,
                                          absl::Span<const int64_t> k_positions);

// ---------------------------------------------------------------------------------
// ALiBi (Press et al., "Train Short, Test Long").
// ---------------------------------------------------------------------------------

// Slopes m_1..m_n for n >= 1 heads: n a power of two gives m_h = 2^(-8h/n); otherwise,
// with c = 2^floor(log2 n), the c slopes of c heads followed by the 1st, 3rd, 5th, ...
// slopes of the 2c-head sequence (n - c of them).
absl::StatusOr<std::vector<double>> AlibiSlopes(int64_t num_heads);

enum class AlibiForm {
  kCausal,     // -m_h (i - j): the one-parameter group action GRAPE-A reproduces
  kSymmetric,  // -m_h |i - j|: bidirectional, not a group action
};

class AlibiBias final : public AdditiveBiasFromFill<AlibiBias> {
 public:
  // One finite slope per head (at least one head).
  static absl::StatusOr<AlibiBias> Create(std::vector<double> slopes, AlibiForm form);
  // Press et al.'s slopes for num_heads heads.
  static absl::StatusOr<AlibiBias> CreateStandard(int64_t num_heads, AlibiForm form);

  int64_t num_heads() const override { return static_cast<int64_t>(slopes_.size()); }
  bool needs_token_data() const override { return false; }
  bool relative() const override { return true; }
  bool causal() const override { return form_ == AlibiForm::kCausal; }
  absl::Span<const double> slopes() const { return slopes_; }
  AlibiForm form() const { return form_; }

  // Learned slopes (e.g. GRAPE-A's omega): grad_slopes[head] += sum over the tile of
  // dL/db * db/dm, db/dm = -(i - j) (causal) or -|i - j| (symmetric). grad_slopes has
  // num_heads entries; grad_tile is m x n with row stride ld.
  template <class T>
  absl::Status AccumulateSlopeGradient(int64_t head, absl::Span<const int64_t> q_positions,
                                       absl::Span<const int64_t> k_positions, const T* grad_tile,
                                       int64_t ld, absl::Span<double> grad_slopes) const;

 private:
  AlibiBias(std::vector<double> slopes, AlibiForm form) : slopes_(std::move(slopes)), form_(form) {}
  friend class AdditiveBiasFromFill<AlibiBias>;
  absl::Status DoFillDistances(int64_t head, int64_t first_distance, int64_t width,
                               float* out) const override;
  template <class T>
  absl::Status Fill(int64_t head, absl::Span<const int64_t> q, absl::Span<const int64_t> k,
                    T* out, int64_t ld) const;
  std::vector<double> slopes_;
  AlibiForm form_;
};

// ---------------------------------------------------------------------------------
// T5 relative buckets (Raffel et al., "Exploring the Limits of Transfer Learning").
// rel = j - i (key minus query).
// ---------------------------------------------------------------------------------

struct T5BucketConfig {
  int64_t num_buckets = 32;    // >= 2 (>= 4 when bidirectional: each half needs 2)
  // > max_exact = nb / 2 (nb: num_buckets, halved when bidirectional); distances at or
  // beyond it share the last bucket.
  int64_t max_distance = 128;
  bool bidirectional = true;   // false: causal (keys after the query all land in bucket 0)
};

absl::Status ValidateT5BucketConfig(const T5BucketConfig& config);

// Bucket of rel = j - i in [0, num_buckets). Bidirectional: buckets [0, nb/2) for rel <= 0
// and [nb/2, nb) for rel > 0, nb halved before the rule below; causal: n = max(-rel, 0).
// With n = |rel| (or max(-rel, 0)) and max_exact = nb / 2: n < max_exact -> n; otherwise
// min(max_exact + floor(ln(n / max_exact) / ln(max_distance / max_exact) *
// (nb - max_exact)), nb - 1). Evaluated in double. Assumes a valid config.
int64_t T5Bucket(int64_t rel, const T5BucketConfig& config);

class T5RelativeBias final : public AdditiveBiasFromFill<T5RelativeBias> {
 public:
  // table: num_buckets x num_heads, row-major ([bucket, head]), finite.
  static absl::StatusOr<T5RelativeBias> Create(std::vector<double> table, int64_t num_heads,
                                               T5BucketConfig config = {});

  int64_t num_heads() const override { return num_heads_; }
  bool needs_token_data() const override { return false; }
  bool relative() const override { return true; }
  bool causal() const override { return !config_.bidirectional; }
  const T5BucketConfig& config() const { return config_; }
  absl::Span<const double> table() const { return table_; }

  // grad_table[bucket * num_heads + head] += sum over the tile of dL/db for the pairs in
  // that bucket. grad_tile is m x n with row stride ld; grad_table has num_buckets *
  // num_heads entries.
  template <class T>
  absl::Status AccumulateTableGradient(int64_t head, absl::Span<const int64_t> q_positions,
                                       absl::Span<const int64_t> k_positions, const T* grad_tile,
                                       int64_t ld, absl::Span<double> grad_table) const;

 private:
  T5RelativeBias(std::vector<double> table, int64_t num_heads, T5BucketConfig config)
      : table_(std::move(table)), num_heads_(num_heads), config_(config) {}
  friend class AdditiveBiasFromFill<T5RelativeBias>;
  template <class T>
  absl::Status Fill(int64_t head, absl::Span<const int64_t> q, absl::Span<const int64_t> k,
                    T* out, int64_t ld) const;
  std::vector<double> table_;
  int64_t num_heads_;
  T5BucketConfig config_;
};

// ---------------------------------------------------------------------------------
// FoX, the Forgetting Transformer (Lin et al.).
// ---------------------------------------------------------------------------------

// ln sigmoid(x), stable for any finite x (no exp overflow, no log(0)).
double LogSigmoid(double x);

class FoxBias final : public AdditiveBiasFromFill<FoxBias> {
 public:
  // gate_logits: length x num_heads, row-major (token-major, as a projection w^T x_t + b
  // produces them), all finite; token t has position first_position + t. Prefix sums
  // c_t = sum_{l <= t} ln sigmoid(x_l) are formed once with LogSigmoid, compensated
  // (Neumaier) and kept as a double-double (hi + lo), so c_i - c_j keeps ~1e-16 relative
  // accuracy of |c_i - c_j| itself, not of |c|: after one very negative logit (-1e16,
  // where ulp(c) = 2) the later gates still count in every difference between later
  // tokens.
  static absl::StatusOr<FoxBias> Create(absl::Span<const double> gate_logits, int64_t length,
                                        int64_t num_heads, int64_t first_position = 0);

  int64_t num_heads() const override { return num_heads_; }
  bool needs_token_data() const override { return true; }
  bool relative() const override { return false; }
  bool causal() const override { return true; }
  int64_t length() const { return length_; }
  int64_t first_position() const { return first_; }
  // c_t for head h (t a token index in [0, length)), rounded to one double (hi + lo); the
  // tiles use both parts.
  double PrefixSum(int64_t head, int64_t t) const { return c_[head][t]; }

  // Tiles whose keys all precede (or all follow) the queries -- every tile of a causal
  // attention but the diagonal ones -- split at an anchor a between them (the keys' last,
  // or first, position): u_i = c_i - c_a, w_j = c_a - c_j, each in double-double and
  // rounded to float. ln f <= 0 makes c non-increasing, so both parts have D_ij's sign
  // and at most its magnitude: no cancellation, fl(u_i + w_j) within 2 ulp of D_ij (one
  // rounding of the exact difference gives 1/2), whatever the gates. FillTile's float
  // tile is that sum there; other tiles (interleaved positions, where the parts could
  // cancel) are not separable and FillTile rounds each entry's difference once.
  absl::StatusOr<bool> SeparableTile(int64_t head, absl::Span<const int64_t> q_positions,
                                     absl::Span<const int64_t> k_positions, float* row_part,
                                     float* col_part) const override;

  // Decoding with a KV cache: appends tokens (k x num_heads logits, row-major, finite)
  // at positions first_position + length onwards. The prefix sums continue where they
  // stopped, so the result is bit-identical to creating the longer sequence at once.
  // Not thread-safe with concurrent FillTile calls.
  absl::Status Append(absl::Span<const double> gate_logits);

  // Tiled backward, first stage: grad_prefix[t * num_heads + head] += dL/dc_t from this
  // tile (row i adds its row sum to c_i, column j subtracts its column sum from c_j).
  // grad_prefix has length * num_heads entries.
  template <class T>
  absl::Status AccumulatePrefixGradient(int64_t head, absl::Span<const int64_t> q_positions,
                                        absl::Span<const int64_t> k_positions, const T* grad_tile,
                                        int64_t ld, absl::Span<double> grad_prefix) const;
  // Second stage, once after all tiles: dL/dx_l = sigmoid(-x_l) * sum_{t >= l} dL/dc_t
  // (d ln sigmoid(x) / dx = sigmoid(-x)). Returns length x num_heads, row-major.
  absl::StatusOr<std::vector<double>> LogitGradient(absl::Span<const double> grad_prefix) const;

 private:
  FoxBias() = default;
  absl::Status CheckPositions(absl::Span<const int64_t> q, absl::Span<const int64_t> k) const;
  // SeparableTile's anchor (a token index), or -1 where the positions interleave (or a
  // list is empty); from the positions' extremes, or from the positions.
  int64_t Anchor(int64_t qmin, int64_t qmax, int64_t kmin, int64_t kmax) const;
  int64_t Anchor(absl::Span<const int64_t> q, absl::Span<const int64_t> k) const;
  // c_t - c_u for head h (token indices) in double-double, rounded to float.
  float DifferenceF32(int64_t head, int64_t t, int64_t u) const {
    const double* c = c_[head].data();
    const double* c_lo = c_lo_[head].data();
    return static_cast<float>((c[t] - c[u]) + (c_lo[t] - c_lo[u]));
  }
  friend class AdditiveBiasFromFill<FoxBias>;
  template <class T>
  absl::Status Fill(int64_t head, absl::Span<const int64_t> q, absl::Span<const int64_t> k,
                    T* out, int64_t ld) const;
  std::vector<double> logits_;      // length x num_heads
  // Per head, per token (the tiles read a head's keys contiguously): c_t rounded, and
  // c_t - c_ exactly.
  std::vector<std::vector<double>> c_, c_lo_;
  std::vector<double> sum_, comp_;  // per head: compensated running sum state
  int64_t length_ = 0;
  int64_t num_heads_ = 0;
  int64_t first_ = 0;
};

// ---------------------------------------------------------------------------------
// GRAPE-AP, path-integral additive GRAPE (Zhang et al., "Group Representational Position
// Encoding", arXiv 2512.07805): b_h(t, j) = sum_{l = j+1..t} psi_h(t, l).
// ---------------------------------------------------------------------------------
// psi is a content-dependent log-gate; GroupPE's documented choice is a rank-r bilinear
// one,
//   psi_h(t, l) = -softplus(<w_{t,h}, u_{l,h}>) = ln sigmoid(-<w_{t,h}, u_{l,h}>) <= 0,
// with a query-side vector w_t and a key-side vector u_l (r entries each, per head): a
// forget gate on step l that the query t may modulate. When w_t is the same for every t
// it depends on l alone and b is a difference of prefix sums: with r = 1, w = 1 and
// u_l = -x_l it is exactly FoX with gate logits x_l (tested).
// Since psi depends on the query, each query row t is a running sum P_t(l) = sum of
// psi(t, l') over l' up to l, and b(t, j) = P_t(t) - P_t(j); the same formula for j > t
// gives the signed path sum -sum_{l = t+1..j} psi(t, l) (masked by the kernel). Memory
// is linear (one running sum per row, over the positions the tile's row spans); work per
// row is O((max(t, k_max) - min(t, k_min)) r). A kernel that walks key tiles from the
// diagonal leftwards can carry P_t across tiles; this reference-grade FillTile does not.
class GrapeApBias final : public AdditiveBiasFromFill<GrapeApBias> {
 public:
  // w, u: length x num_heads x rank, row-major, finite; token t has position
  // first_position + t.
  static absl::StatusOr<GrapeApBias> Create(std::vector<double> w, std::vector<double> u,
                                            int64_t length, int64_t num_heads, int64_t rank,
                                            int64_t first_position = 0);

  int64_t num_heads() const override { return num_heads_; }
  bool needs_token_data() const override { return true; }
  bool relative() const override { return false; }
  bool causal() const override { return true; }
  int64_t length() const { return length_; }
  int64_t rank() const { return rank_; }
  int64_t first_position() const { return first_; }
  // psi_h(t, l) for token indices t, l in [0, length).
  double Psi(int64_t head, int64_t t, int64_t l) const;

  // grad_w, grad_u (length x num_heads x rank each) += dL/dw, dL/du from this tile.
  template <class T>
  absl::Status AccumulateGradient(int64_t head, absl::Span<const int64_t> q_positions,
                                  absl::Span<const int64_t> k_positions, const T* grad_tile,
                                  int64_t ld, absl::Span<double> grad_w,
                                  absl::Span<double> grad_u) const;

 private:
  GrapeApBias() = default;
  absl::Status CheckPositions(absl::Span<const int64_t> q, absl::Span<const int64_t> k) const;
  double Dot(int64_t head, int64_t t, int64_t l) const;
  friend class AdditiveBiasFromFill<GrapeApBias>;
  template <class T>
  absl::Status Fill(int64_t head, absl::Span<const int64_t> q, absl::Span<const int64_t> k,
                    T* out, int64_t ld) const;
  std::vector<double> w_, u_;
  int64_t length_ = 0;
  int64_t num_heads_ = 0;
  int64_t rank_ = 0;
  int64_t first_ = 0;
};

extern template class AdditiveBiasFromFill<AlibiBias>;
extern template class AdditiveBiasFromFill<T5RelativeBias>;
extern template class AdditiveBiasFromFill<FoxBias>;
extern template class AdditiveBiasFromFill<GrapeApBias>;

}  // namespace sequence
}  // namespace encodings
}  // namespace gpe

#endif  // ENCODINGS_SEQUENCE_BIAS_H_
