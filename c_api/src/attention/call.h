// An attention call of the C ABI (gpe/attention.h) validated into attention/'s
// AttentionArgs (call.cc): the options, q, k and v, and the encoding they describe, with
// the checks of outputs that the forward (forward.cc) and the backward (backward.cc)
// share. Internal to c_api.
#ifndef GPE_C_API_SRC_ATTENTION_CALL_H_
#define GPE_C_API_SRC_ATTENTION_CALL_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <Eigen/Dense>
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "attention/cpu/cpu_attention.h"
#include "attention/descriptor.h"
#include "c_api/include/gpe/attention.h"
#include "c_api/src/common/checks.h"
#include "c_api/src/common/matrices.h"
#include "c_api/src/common/tensor_view.h"
#include "dlpack/dlpack.h"
#include "encodings/sequence/algebraic.h"
#include "encodings/sequence/relative.h"
#include "encodings/sequence/rope.h"

namespace gpe::c_api::attn {

namespace att = ::gpe::attention;
namespace seq = ::gpe::encodings::sequence;

// The options struct of the first release ends at cu_seqlens_k; later fields are read
// only when struct_size covers them (zero / NULL otherwise: 0.4.0's structured positions
// and Shaw tables, 0.9.0's rope handle, window, softcap, sinks, attn_mask, kv_lengths
// and block_table, 0.10.0's cuda_stream, bf16_arithmetic and float32_arithmetic).
inline constexpr size_t kAttentionOptionsV1Size = offsetof(gpe_attention_options, rope_axes);
// The struct's size at each release (CHANGELOG.md): 0.3.0 (to cu_seqlens_k), 0.4.0 to
// 0.8.0 (to shaw_value_table), 0.9.0 (to block_table; its first build ended at sinks,
// before attn_mask was appended within the same version, and bindings of it passed that
// size), 0.10.0 (its builds before the arithmetic fields ended at cuda_stream; then
// float32_arithmetic, this library's). Any other size up to the last is refused
// (CheckReleasedSize).
inline constexpr size_t kAttentionOptionsReleasedSizes[] = {
    kAttentionOptionsV1Size, offsetof(gpe_attention_options, rope),
    offsetof(gpe_attention_options, attn_mask), offsetof(gpe_attention_options, cuda_stream),
    offsetof(gpe_attention_options, bf16_arithmetic), sizeof(gpe_attention_options)};

// The caller's options (a released version's struct, later fields zero / NULL) into *out:
// CopyVersioned, then CheckReleasedSize.
absl::Status CopyOptions(const gpe_attention_options& in, gpe_attention_options* out);

// InvalidArgument with `msg`.
absl::Status Bad(const std::string& msg);

// bf16_arithmetic and float32_arithmetic are GPE_BF16_ARITHMETIC_* / GPE_FLOAT32_ARITHMETIC_*
// values (InvalidArgument naming the field otherwise).
absl::Status CheckArithmetic(const gpe_attention_options& o);

// Everything one call needs, owning the encodings and position copies it points to
// (the encodings are declared before the transforms that refer to them).
struct Call {
  att::AttentionArgs args;
  // The CPU kernels' options: num_threads and the arithmetic ("CPU ARITHMETIC"), checked.
  att::CpuAttentionOptions cpu;
  DType dtype = DType::kFloat32;     // q's (and o's, and the gradients')
  DType kv_dtype = DType::kFloat32;  // k's and v's: dtype, or a 16-bit KV cache's
  TensorView q, k, v;
  // attn_mask, read in place by the kernels (no data: none given): outputs may not
  // overlap it.
  TensorView mask;
  std::vector<int64_t> cu_q, cu_k, pos_q, pos_k;
  std::vector<int64_t> axes_q, axes_k, tree_off_q, tree_ch_q, tree_off_k, tree_ch_k;
  std::vector<float> sinks;  // options->sinks, compact
  std::vector<int64_t> kv_lengths, block_table;  // options->kv_lengths / block_table, compact
  std::optional<seq::Rope> rope;
  std::optional<seq::AlgebraicTree> tree;
  std::optional<seq::AlgebraicGrid2D> grid2;
  std::optional<seq::AlgebraicGrid3D> grid3;
  std::vector<Eigen::MatrixXd> grid_skews;  // options->algebraic_grid's S_a, for gradients
  std::optional<seq::ShawRelative> shaw;
  // q's transform, and k's when it differs (a gpe_rope handle's key role: xPos); null
  // key_transform means `transform` serves k too.
  std::unique_ptr<att::RowTransform> transform;
  std::unique_ptr<att::RowTransform> key_transform;
  bool has_sinks() const { return !args.sinks.empty(); }
  // The shape (and dtype) of o and d_o: q's with v's head size last.
  TensorView OutputShape() const;
  bool paged() const { return args.pages.enabled(); }
};

using BF = seq::BFloat16;
using F16 = seq::Float16;

// Options and q, k, v into `c`.
absl::Status Prepare(const gpe_attention_options* options, const DLTensor* q, const DLTensor* k,
                     const DLTensor* v, Call* c);

// A q-side or k-side tensor of the layout: its view and strides.
absl::StatusOr<TensorView> View(const DLTensor* t, const char* name, bool packed);

// The strides of a q-side or k-side view (padded: batch, token, head; packed: token,
// head).
att::Strides StridesOf(const TensorView& v, bool packed);

// `a` (named `an`) must have the dtype, shape and strides of `b` (named `bn`).
absl::Status CheckSameLayout(const TensorView& a, const char* an, const TensorView& b,
                             const char* bn);

// lse: [tokens_q, heads_q], compact row-major; float64 when q is float64, else float32.
// Returns the view (data null when `t` is null).
absl::StatusOr<TensorView> LseOf(const DLTensor* t, const att::AttentionArgs& a, DType dtype);

// An output of the layout (o, d_o) with the dtype and shape of `like`.
absl::StatusOr<TensorView> OutputLike(const DLTensor* t, const char* name, const TensorView& like,
                                      const char* like_name, bool packed);

// Inputs may share memory (q = k = v is fine); each output must be disjoint from every
// input and every other output. Null entries are skipped.
absl::Status CheckOutputs(absl::Span<const NamedView> outputs, absl::Span<const NamedView> inputs);

}  // namespace gpe::c_api::attn

#endif  // GPE_C_API_SRC_ATTENTION_CALL_H_
