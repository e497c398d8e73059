// Rotary position embeddings (RoPE) as today's models use them: frequency schedules
// (default, linear, dynamic NTK, YaRN, LongRoPE, Llama 3), interleaved and half-split
// pairings, partial rotary, bshd / sbhd / packed-varlen thd layouts, per-token position
// ids or per-sequence offsets, xPos scaling, axial 2D/3D RoPE and M-RoPE sections, and
// the backward pass.
//
// RoPE is the representation of Z by commuting plane rotations (group/so_planes.h;
// Multiplicative GRAPE on canonical planes, Zhang et al.; Su et al., RoFormer eq. 13-15).
// Conventions:
// - Plane i (i = 0 .. rotary_dim/2 - 1) pairs coordinates
//     kInterleaved: (2i, 2i + 1)        kHalfSplit: (i, i + rotary_dim / 2)
//   and rotates by a = p * theta_i (p an int64 position):
//     (x1, x2) -> (x1 cos a - x2 sin a,  x1 sin a + x2 cos a),
//   then both outputs are multiplied by the schedule's attention factor m (and, with
//   xPos, by the per-plane scale s_i(p)). Coordinates rotary_dim .. head_dim - 1 pass
//   through unchanged (not scaled).
// - Angles p * theta_i are reduced exactly mod 2 pi (group/angle.h) in double, for every
//   int64 p and every finite theta_i (after any schedule's scaling); cos/sin are taken
//   in double, multiplied by m (and s_i), and rounded once to the tensor's element type T
//   (float for BFloat16 / Float16) in a table with one row per distinct position. The
//   rotation itself runs in that type. A float32 result therefore has relative error
//   ~1e-7 at any position, relative to the rotation by the double-precision theta_i: the
//   frequencies are themselves doubles (base^(-2i/r) rounded), and that rounding, up to
//   |p| ulp(theta_i) / 2 radians, is part of the encoding, not an error of the reduction. Building a table costs ~0.2 us per
//   (position, plane) for the exact reduction: build it once per forward pass and reuse
//   it for q, k and every layer (Rope::MakeTable + Rope::Apply); Apply alone runs at
//   memory bandwidth (rope_benchmark).
// - Backward: y = m R(a) x, so dx = m R(-a) dy = (m R(a))^T dy (same table, sin negated).
//
// Tensors are row-major with explicit strides counted in elements; the innermost
// (head_dim) axis is contiguous. Layouts:
//   kBSHD: [batch, seq, heads, head_dim]     kSBHD: [seq, batch, heads, head_dim]
//   kTHD:  [total_tokens, heads, head_dim], sequences delimited by cu_seqlens
//          (batch + 1 entries, 0 = cu[0] <= cu[1] <= ... <= cu[batch] = total_tokens).
// Tokens are numbered t = b * seq + s for bshd/sbhd (whatever the memory order) and by
// their row for thd; per-token position ids follow that numbering.
#ifndef ENCODINGS_SEQUENCE_ROPE_H_
#define ENCODINGS_SEQUENCE_ROPE_H_

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "group/so_planes.h"

namespace gpe {
namespace encodings {
namespace sequence {

using group::PlanePairing;

// ---------------------------------------------------------------------------------
// Frequency schedules. Each returns rotary_dim / 2 frequencies (radians per position)
// and an attention factor that scales cos and sin. Definitions follow the published
// formulas (the papers cited at each schedule; Hugging Face transformers' RoPE utilities
// are the reference users compare against) but are computed in double.
// ---------------------------------------------------------------------------------
struct RopeFrequencies {
  std::vector<double> thetas;
  double attention_factor = 1.0;
};

// theta_i = base^(-2i/r) (Su et al., eq. 15). rotary_dim even >= 2; base finite > 1.
absl::StatusOr<RopeFrequencies> DefaultRopeFrequencies(int64_t rotary_dim,
                                                       double base = 10000.0);

// Position interpolation (Chen et al.): theta_i / factor. factor finite > 0.
absl::StatusOr<RopeFrequencies> LinearRopeFrequencies(int64_t rotary_dim, double base,
                                                      double factor);

// Dynamic NTK: when current_length L > max_position L0 the base becomes
// base * (factor L / L0 - (factor - 1))^(r / (r - 2)); otherwise default RoPE.
// rotary_dim >= 4 (the exponent needs r > 2), factor finite > 0, L0 >= 1, L >= 0.
absl::StatusOr<RopeFrequencies> DynamicNtkRopeFrequencies(int64_t rotary_dim, double base,
                                                          double factor,
                                                          int64_t max_position,
                                                          int64_t current_length);

// YaRN (Peng et al., sec. 3.2 "NTK-by-parts" ramp + sec. 3.4 attention temperature).
struct YarnOptions {
  double factor = 1.0;                    // finite >= 1
  int64_t original_max_position = 4096;   // L0 >= 1
  double beta_fast = 32.0;                // finite > beta_slow > 0
  double beta_slow = 1.0;
  std::optional<double> attention_factor;  // default 0.1 ln(factor) + 1
  // DeepSeek-V2/V3 style: with both set (finite > 0) and no attention_factor, the
  // factor is g(factor, mscale) / g(factor, mscale_all_dim), g(s, k) = 0.1 k ln s + 1.
  std::optional<double> mscale;
  std::optional<double> mscale_all_dim;
  // Floor/ceil low and high (the published default); false keeps them fractional
  // (Hugging Face's truncate=False, used by gpt-oss).
  bool truncate = true;
};
// corr(b) = r ln(L0 / (2 pi b)) / (2 ln base); low = max(floor(corr(beta_fast)), 0);
// high = min(ceil(corr(beta_slow)), r - 1) (+0.001 if equal);
// ramp_i = clamp((i - low) / (high - low), 0, 1);
// theta'_i = (theta_i / factor) ramp_i + theta_i (1 - ramp_i).
absl::StatusOr<RopeFrequencies> YarnRopeFrequencies(int64_t rotary_dim, double base,
                                                    const YarnOptions& options);

// LongRoPE (Ding et al.): theta'_i = 1 / (e_i base^(2i/r)), e = long_factor when the
// current length exceeds original_max_position, else short_factor (r/2 values each,
// finite > 0). Attention factor: given, or with s = max_position / L0,
// sqrt(1 + ln s / ln L0) if s > 1, else 1.
struct LongRopeOptions {
  std::vector<double> short_factor;
  std::vector<double> long_factor;
  int64_t original_max_position = 4096;  // L0 >= 2 (ln L0 > 0)
  int64_t max_position = 131072;         // >= 1
  std::optional<double> attention_factor;
};
absl::StatusOr<RopeFrequencies> LongRopeFrequencies(int64_t rotary_dim, double base,
                                                    const LongRopeOptions& options,
                                                    int64_t current_length);

// Llama 3 (Meta's llama3 rope_scaling): wavelength w_i = 2 pi / theta_i;
// w_i > L0 / low_freq_factor: theta_i / factor; w_i < L0 / high_freq_factor: theta_i;
// else (1 - t) theta_i / factor + t theta_i with t = (L0 / w_i - low) / (high - low).
struct Llama3Options {
  double factor = 8.0;             // finite > 0
  double low_freq_factor = 1.0;    // finite, 0 < low < high
  double high_freq_factor = 4.0;
  int64_t original_max_position = 8192;  // >= 1
};
absl::StatusOr<RopeFrequencies> Llama3RopeFrequencies(int64_t rotary_dim, double base,
                                                      const Llama3Options& options);

// Axial 2D/3D RoPE for vision transformers: the r/2 planes are split into num_axes
// contiguous blocks of m = r / (2 num_axes) planes; block k carries the default
// frequencies of a rotary dimension r / num_axes (theta_j = base^(-2j / (r/num_axes)),
// j < m) and rotates by axis k's coordinate. Pair with AxialPlaneAxes.
absl::StatusOr<RopeFrequencies> AxialRopeFrequencies(int64_t rotary_dim, int64_t num_axes,
                                                     double base = 10000.0);
// plane -> axis for axial RoPE: plane i belongs to axis i / (num_planes / num_axes).
// num_planes must be a positive multiple of num_axes.
absl::StatusOr<std::vector<int>> AxialPlaneAxes(int64_t num_planes, int64_t num_axes);
// plane -> axis for M-RoPE (Qwen2-VL): sections (e.g. {16, 24, 24}, summing to r/2) of
// contiguous planes for axes 0, 1, 2, ... With interleaved = true (Qwen3-VL) plane i
// goes to axis a > 0 when i % n == a and i < n * sections[a] (n = number of sections),
// and to axis 0 otherwise. num_planes >= 0 (rotary_dim / 2, where the caller knows it):
// the sections must sum to it, checked before anything is allocated; the sum is at most
// 2^29 either way (rotary_dim's bound).
absl::StatusOr<std::vector<int>> MRopePlaneAxes(absl::Span<const int64_t> sections,
                                                bool interleaved = false,
                                                int64_t num_planes = -1);

// ---------------------------------------------------------------------------------
// Tensors and positions.
// ---------------------------------------------------------------------------------
enum class RopeLayout { kBSHD, kSBHD, kTHD };

// Shape and strides (in elements) of a q or k tensor; head_dim is contiguous.
struct RopeTensor {
  RopeLayout layout = RopeLayout::kBSHD;
  int64_t batch = 0;     // sequences (thd: must equal cu_seqlens.size() - 1)
  int64_t seq_len = 0;   // bshd/sbhd: tokens per sequence; thd: total tokens
  int64_t heads = 0;
  int64_t head_dim = 0;
  int64_t batch_stride = 0;  // unused for thd
  int64_t seq_stride = 0;    // stride between tokens (thd: between rows)
  int64_t head_stride = 0;
  absl::Span<const int64_t> cu_seqlens;  // thd only

  int64_t num_tokens() const {
    return layout == RopeLayout::kTHD ? seq_len : batch * seq_len;
  }
  // Densely packed strides for the layout (thd: pass batch = cu_seqlens.size() - 1).
  static RopeTensor Contiguous(RopeLayout layout, int64_t batch, int64_t seq_len,
                               int64_t heads, int64_t head_dim,
                               absl::Span<const int64_t> cu_seqlens = {});
};

// Exactly one of ids / offsets may be non-empty; both empty means offsets of 0.
// - ids: num_axes * num_tokens int64, axis-major (ids[axis * num_tokens + t]), as
//   Qwen2-VL's [3, batch, seq] position_ids.
// - offsets: one per sequence, position = offsets[b] + (index of the token within its
//   sequence); single-axis encodings only (e.g. KV-cache continuation).
struct RopePositions {
  absl::Span<const int64_t> ids;
  absl::Span<const int64_t> offsets;
};

// xPos (Sun et al., "A Length-Extrapolatable Transformer", eq. 9-10): plane i of a
// query at position p is scaled by zeta_i^((p - centre) / B) and of a key by
// zeta_i^(-(p - centre) / B), zeta_i = (2i/r + gamma) / (1 + gamma). The common centre
// cancels in every q.k score (plane i gains zeta_i^((p_q - p_k) / B)). Scales are
// formed in double and stay inside float32's range while
// |p - centre| < 88 B / ln(1 / zeta_0) (~3.6e4 for B = 512, gamma = 0.4) on the side
// where they grow (queries before the centre, keys after it); float64 tables reach
// 709 B / ln(1 / zeta_0). A call that would store a scale beyond its table type's range
// (and give inf and NaN outputs) is refused with InvalidArgument naming the reach:
// pick the centre of the sequence or tile, as xPos implementations do. Outputs near
// that reach may still overflow for large inputs, as any float product does. The
// attention factor m (RopeFrequencies) is held to the same rule, xPos or not: a table
// whose m exceeds its type's largest finite value (a float table and YaRN's
// attention_factor 1e39 or an mscale of 1e300) is refused by MakeTable, and Apply on a
// 16-bit tensor refuses m past float16's 65504 (bfloat16's 3.39e38).
struct XposOptions {
  bool enabled = false;
  double gamma = 0.4;        // finite > 0
  double scale_base = 512.0;  // B, finite > 0
  int64_t centre = 0;
};

template <class T>
class RopeTable;

enum class RopeRole { kQuery, kKey };  // matters only for xPos

// 16-bit floats stored as their IEEE / bfloat16 bit patterns (DLPack kDLBfloat /
// kDLFloat with 16 bits). They are rotated in float32 with a float32 table and
// rounded to nearest even once on store.
struct BFloat16 {
  uint16_t bits;
};
struct Float16 {
  uint16_t bits;
};
float ToFloat(BFloat16 h);
float ToFloat(Float16 h);
BFloat16 ToBFloat16(float f);  // round to nearest even; NaN stays NaN
Float16 ToFloat16(float f);    // round to nearest even; overflow -> inf; subnormals kept

// The table element type for tensors of type T: float for 16-bit types, else T.
template <class T>
struct RopeComputeType {
  using type = T;
};
template <>
struct RopeComputeType<BFloat16> {
  using type = float;
};
template <>
struct RopeComputeType<Float16> {
  using type = float;
};
template <class T>
using RopeTableFor = RopeTable<typename RopeComputeType<T>::type>;

struct RopeOptions {
  int64_t head_dim = 0;
  int64_t rotary_dim = 0;  // even, 2 <= rotary_dim <= head_dim
  PlanePairing pairing = PlanePairing::kHalfSplit;
  // plane -> axis (r/2 entries in [0, num_axes)); empty means one axis.
  std::vector<int> plane_axes;
  int num_axes = 1;  // 1 .. 8
  XposOptions xpos;  // single-axis only
  int num_threads = 1;  // slots over tokens in Apply, on the library pool (1 .. 256)
};

// Per-distinct-position cos/sin rows in T (already multiplied by the attention factor
// and xPos scale). Built by Rope::MakeTable for one tensor shape, positions and role;
// reusable for every tensor with that token numbering (q and k of every layer): the same
// layout, batch and sequence length (thd: the same cu_seqlens), any heads and strides.
// Apply refuses another numbering with as many tokens (its positions would be wrong).
template <class T>
class RopeTable {
 public:
  int64_t num_tokens() const { return static_cast<int64_t>(row_of_token_.size()); }
  int64_t num_rows() const { return num_rows_; }

 private:
  friend class Rope;
  int64_t num_rows_ = 0;
  int64_t width_ = 0;                  // table entries per row
  // ln of the largest scale of any row: the attention factor, times the largest growing
  // xPos scale with xPos; -inf for a table without planes. Apply to a 16-bit tensor
  // refuses a table whose scale passes its type's range.
  double max_log_scale_ = -std::numeric_limits<double>::infinity();
  // The token numbering it was built for.
  RopeLayout layout_ = RopeLayout::kBSHD;
  int64_t batch_ = 0, seq_len_ = 0;
  std::vector<int64_t> cu_seqlens_;    // thd
  std::vector<int64_t> row_of_token_;  // token -> row
  std::vector<T> cos_, sin_;           // num_rows x width
};

class Rope {
 public:
  static absl::StatusOr<Rope> Create(RopeOptions options, RopeFrequencies frequencies);

  const RopeOptions& options() const { return options_; }
  absl::Span<const double> thetas() const { return freqs_.thetas; }
  double attention_factor() const { return freqs_.attention_factor; }

  // T is float or double. Validates the positions against the tensor's token count.
  // threads > 0 builds the table on that many slots of the library pool instead of
  // options().num_threads (the attention kernels pass their own thread count).
  template <class T>
  absl::StatusOr<RopeTable<T>> MakeTable(const RopeTensor& tensor,
                                         const RopePositions& positions,
                                         RopeRole role = RopeRole::kQuery,
                                         int threads = 0) const;

  // OK when `table` (RopeTable<float> or <double>) suits `tensor` as Apply requires: the
  // encoding's head_dim, the table's width, and the same token numbering (RopeTable).
  // Checks only; callers that must not write before a refusal call it first.
  template <class C>
  absl::Status CheckTable(const RopeTable<C>& table, const RopeTensor& tensor,
                          const char* who = "Rope::Apply") const;
  // CheckTable and, for 16-bit T, that the table's scales (the attention factor, times
  // xPos's) fit T's range: everything
  // Apply<T> checks before writing.
  template <class T>
  absl::Status CheckApply(const RopeTableFor<T>& table, const RopeTensor& tensor,
                          const char* who = "Rope::Apply") const;

  // out = m R(a) in (forward) or m R(-a) in (backward), row by row; in == out allowed
  // (fused in-place). in and out share `tensor`'s shape and strides. T is float,
  // double, BFloat16 or Float16 (whose table is RopeTable<float>).
  template <class T>
  absl::Status Apply(const RopeTableFor<T>& table, const RopeTensor& tensor, const T* in,
                     T* out) const;
  template <class T>
  absl::Status ApplyBackward(const RopeTableFor<T>& table, const RopeTensor& tensor,
                             const T* dy, T* dx) const;

  // Rows r = 0..count-1 (row r at rows + r * stride, head_dim wide) are tokens
  // first_token + r of the table's numbering, rotated in place: forward m R(a), or
  // m R(-a) when inverse. For kernels that rotate one tile of one head at a time with a
  // table built once (attention/). T is float or double.
  template <class T>
  absl::Status ApplyRows(const RopeTable<T>& table, int64_t first_token, int64_t count,
                         T* rows, int64_t stride, bool inverse) const;

  // One-shot conveniences (build the table, then apply).
  template <class T>
  absl::Status Forward(const RopeTensor& tensor, const RopePositions& positions,
                       const T* in, T* out, RopeRole role = RopeRole::kQuery) const;
  template <class T>
  absl::Status Backward(const RopeTensor& tensor, const RopePositions& positions,
                        const T* dy, T* dx, RopeRole role = RopeRole::kQuery) const;

 private:
  Rope(RopeOptions options, RopeFrequencies freqs)
      : options_(std::move(options)), freqs_(std::move(freqs)) {}
  template <class T, bool kInverse>
  absl::Status ApplyImpl(const RopeTableFor<T>& table, const RopeTensor& tensor, const T* in,
                         T* out) const;

  RopeOptions options_;
  RopeFrequencies freqs_;
};

// Validates a tensor description (sizes, strides that keep rows disjoint, cu_seqlens
// monotone from 0 to total tokens, no int64 overflow).
absl::Status ValidateRopeTensor(const RopeTensor& tensor);

}  // namespace sequence
}  // namespace encodings
}  // namespace gpe

#endif  // ENCODINGS_SEQUENCE_ROPE_H_
