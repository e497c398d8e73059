// An attention call of the C ABI validated into attention/'s AttentionArgs (call.h): the
// options (an older, shorter struct included), the q, k, v layout, the positions and the
// encoding they describe (RoPE in one or several axes, GRAPE-M, algebraic sequence / tree
// / grid rotations with int64 or structured positions; any gpe_bias; Shaw labels).
#include "c_api/src/attention/call.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <Eigen/Dense>
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "attention/cpu/cpu_attention.h"
#include "attention/descriptor.h"
#include "c_api/include/gpe/attention.h"
#include "c_api/src/common/checks.h"
#include "c_api/src/common/tensor_view.h"
#include "c_api/src/sequence/bias_handle.h"
#include "c_api/src/sequence/handles.h"
#include "c_api/src/sequence/rope_handle.h"
#include "encodings/sequence/algebraic.h"
#include "encodings/sequence/grape_m.h"
#include "encodings/sequence/relative.h"
#include "encodings/sequence/rope.h"

namespace gpe::c_api::attn {
namespace {

// float16 only as a KV cache (k and v of a forward with float32 or bfloat16 q).
constexpr DType kAttnTypes[] = {DType::kFloat32, DType::kBFloat16, DType::kFloat64,
                                DType::kFloat16};
constexpr DType kF32[] = {DType::kFloat32};
// attn_mask: additive float32, or boolean (bool or uint8: nonzero allows the key).
constexpr DType kMaskTypes[] = {DType::kFloat32, DType::kBool, DType::kUInt8};


// A row-major copy of a tensor of any strides (validated by ViewTensor).
template <class T>
std::vector<T> Compact(const TensorView& v) {
  const int64_t n = v.numel();
  std::vector<T> out(static_cast<size_t>(n));
  std::vector<int64_t> idx(v.shape.size(), 0);
  for (int64_t i = 0; i < n; ++i) {
    int64_t off = 0;
    for (size_t a = 0; a < idx.size(); ++a) off += idx[a] * v.strides[a];
    out[i] = v.typed<const T>()[off];
    for (size_t a = idx.size(); a-- > 0;) {
      if (++idx[a] < v.shape[a]) break;
      idx[a] = 0;
    }
  }
  return out;
}

// The largest head size (q / k and v) the C entry points take.
constexpr int64_t kMaxHeadDim = int64_t{1} << 16;

// Index tensors are copied before they are checked, so their sizes are bounded first by
// what the call's memory-backed tensors imply: `rows` (>= 0) is the leading size the
// tensor must have (one entry or row per token, ...), `max_cols` (>= 0) bounds the second
// dimension. A list whose length nothing bounds (rows < 0: cu_seqlens, tree children)
// must be materialised (CheckMaterialised).
absl::Status CheckIndexSizes(const TensorView& v, const char* name, int64_t rows,
                             int64_t max_cols) {
  if (rows >= 0 && v.shape[0] != rows) {
    return Bad(absl::StrCat(name, " has ", v.shape[0], " entries (rows), expected ", rows));
  }
  if (max_cols >= 0 && v.shape.size() > 1 && v.shape[1] > max_cols) {
    return Bad(absl::StrCat(name, " has ", v.shape[1], " columns, at most ", max_cols));
  }
  return rows < 0 ? CheckMaterialised(v, name) : absl::OkStatus();
}

// An int64 tensor of `ndim` dimensions as a row-major vector, with its view; sizes as
// CheckIndexSizes (-1: unbounded).
absl::StatusOr<TensorView> Int64Table(const DLTensor* t, const char* name, int ndim,
                                      std::vector<int64_t>* out, int64_t rows = -1,
                                      int64_t max_cols = -1) {
  absl::StatusOr<TensorView> v = ViewTensor(t, name, ndim, kInt);
  if (!v.ok()) return v.status();
  if (absl::Status s = CheckIndexSizes(*v, name, rows, max_cols); !s.ok()) return s;
  *out = Compact<int64_t>(*v);
  return v;
}

// float64 skew generators [count, m, m] as matrices.
absl::StatusOr<std::vector<Eigen::MatrixXd>> Skews(const DLTensor* t, const char* name) {
  absl::StatusOr<TensorView> v = ViewTensor(t, name, 3, kF64);
  if (!v.ok()) return v.status();
  if (v->shape[1] != v->shape[2] || v->shape[0] < 1 || v->shape[1] < 1) {
    return Bad(
        absl::StrCat(name, " must be [count >= 1, m, m] skew matrices, got ", ShapeString(*v)));
  }
  if (absl::Status s = CheckMaterialised(*v, name); !s.ok()) return s;
  const std::vector<double> x = Compact<double>(*v);
  const int64_t m = v->shape[1];
  std::vector<Eigen::MatrixXd> out;
  for (int64_t c = 0; c < v->shape[0]; ++c) {
    Eigen::MatrixXd s(m, m);
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < m; ++j) s(i, j) = x[(c * m + i) * m + j];
    }
    out.push_back(std::move(s));
  }
  return out;
}

// The structured positions, algebraic tree / grid, multi-axis RoPE and Shaw options
// (read from a struct at least kAttentionOptionsV1Size + the new fields long).
absl::Status PrepareStructured(const gpe_attention_options& o, Call* c, int* encodings) {
  att::AttentionArgs& a = c->args;
  // Structured positions: per-axis coordinates or tree addresses, for q and k alike.
  if ((o.q_axes == nullptr) != (o.k_axes == nullptr)) {
    return Bad("give both q_axes and k_axes or neither");
  }
  const int trees = (o.q_tree_offsets != nullptr) + (o.q_tree_children != nullptr) +
                    (o.k_tree_offsets != nullptr) + (o.k_tree_children != nullptr);
  if (trees != 0 && trees != 4) {
    return Bad("give all of q_tree_offsets, q_tree_children, k_tree_offsets and "
               "k_tree_children, or none");
  }
  if (o.q_axes != nullptr && trees != 0) {
    return Bad("give per-axis positions (q_axes, k_axes) or tree addresses, not both");
  }
  int64_t axes = 0;
  if (o.q_axes != nullptr) {
    // Up to 8 axes, as many as a gpe_rope handle takes (rope.h); each encoding then
    // requires its own count (axial / M-RoPE handles theirs, the grids 2 or 3).
    absl::StatusOr<TensorView> qa =
        Int64Table(o.q_axes, "q_axes", 2, &c->axes_q, a.num_q_tokens(), 8);
    if (!qa.ok()) return qa.status();
    absl::StatusOr<TensorView> ka =
        Int64Table(o.k_axes, "k_axes", 2, &c->axes_k, a.num_k_tokens(), 8);
    if (!ka.ok()) return ka.status();
    axes = qa->shape[1];
    if (ka->shape[1] != axes) {
      return Bad(absl::StrCat("q_axes has ", axes, " axes but k_axes has ", ka->shape[1]));
    }
    a.q_structured.num_axes = a.k_structured.num_axes = axes;
    a.q_structured.coords = c->axes_q;
    a.k_structured.coords = c->axes_k;
  }
  if (trees == 4) {
    for (auto [t, name, out, rows] :
         {std::tuple{o.q_tree_offsets, "q_tree_offsets", &c->tree_off_q, a.num_q_tokens() + 1},
          std::tuple{o.q_tree_children, "q_tree_children", &c->tree_ch_q, int64_t{-1}},
          std::tuple{o.k_tree_offsets, "k_tree_offsets", &c->tree_off_k, a.num_k_tokens() + 1},
          std::tuple{o.k_tree_children, "k_tree_children", &c->tree_ch_k, int64_t{-1}}}) {
      absl::StatusOr<TensorView> v = Int64Table(t, name, 1, out, rows);
      if (!v.ok()) return v.status();
    }
    a.q_structured.tree_offsets = c->tree_off_q;
    a.q_structured.tree_children = c->tree_ch_q;
    a.k_structured.tree_offsets = c->tree_off_k;
    a.k_structured.tree_children = c->tree_ch_k;
  }
  const bool structured = axes > 0 || trees == 4;
  // Multi-axis RoPE: axial (rope_axes) or M-RoPE (rope_sections).
  if (o.rope_axes < 0 || o.rope_axes > 3) {
    return Bad(absl::StrCat("rope_axes must be 0, 1, 2 or 3, got ", o.rope_axes));
  }
  if (o.rope_sections_interleaved != 0 && o.rope_sections_interleaved != 1) {
    return Bad("rope_sections_interleaved must be 0 or 1");
  }
  if ((o.rope_axes > 1 || o.rope_sections != nullptr) && o.rope != nullptr) {
    return Bad("rope_axes / rope_sections describe rope_dim's RoPE; a gpe_rope handle carries "
               "its own axes (gpe_rope_options.axes): leave them 0 / NULL");
  }
  if ((o.rope_axes > 1 || o.rope_sections != nullptr) && o.rope_dim == 0) {
    return Bad("rope_axes / rope_sections need rope_dim");
  }
  if (o.algebraic_tree != nullptr) ++*encodings;
  if (o.algebraic_grid != nullptr) ++*encodings;
  if (*encodings > 1) {
    return Bad("at most one of rope_dim, rope, grape_m, algebraic, algebraic_tree and "
               "algebraic_grid may be set");
  }
  if (o.rope != nullptr) {
    // The handle's axes: a multi-axis RoPE reads per-axis coordinates of its own count.
    const int64_t want = o.rope->impl.options().num_axes;
    if (want > 1 && axes != want) {
      return Bad(absl::StrCat("this gpe_rope has ", want, " axes: give q_axes / k_axes of "
                              "[tokens, ", want, "]"));
    }
    if (want == 1 && axes > 1) {
      return Bad(absl::StrCat("this gpe_rope has one axis (it reads the int64 positions) but "
                              "q_axes / k_axes have ", axes));
    }
  }
  if (o.rope_dim != 0 && (o.rope_axes > 1 || o.rope_sections != nullptr)) {
    std::vector<int64_t> sections;
    absl::StatusOr<seq::RopeFrequencies> f;
    absl::StatusOr<std::vector<int>> plane_axes;
    if (o.rope_sections != nullptr) {
      absl::StatusOr<TensorView> sv = Int64Table(o.rope_sections, "rope_sections", 1, &sections);
      if (!sv.ok()) return sv.status();
      if (o.rope_axes > 1 && o.rope_axes != static_cast<int32_t>(sections.size())) {
        return Bad(absl::StrCat("rope_axes (", o.rope_axes, ") disagrees with the ",
                                sections.size(), " rope_sections; leave it 0"));
      }
      f = seq::DefaultRopeFrequencies(o.rope_dim, o.rope_base);
      plane_axes = seq::MRopePlaneAxes(sections, o.rope_sections_interleaved == 1, o.rope_dim / 2);
    } else {
      f = seq::AxialRopeFrequencies(o.rope_dim, o.rope_axes, o.rope_base);
      plane_axes = seq::AxialPlaneAxes(o.rope_dim / 2, o.rope_axes);
    }
    if (!f.ok()) return f.status();
    if (!plane_axes.ok()) return plane_axes.status();
    const int64_t want = o.rope_sections != nullptr ? static_cast<int64_t>(sections.size())
                                                     : o.rope_axes;
    if (axes != want) {
      return Bad(absl::StrCat("multi-axis RoPE with ", want,
                              " axes needs q_axes / k_axes of [tokens, ", want, "]"));
    }
    seq::RopeOptions ro = c->rope->options();
    ro.num_axes = static_cast<int>(want);
    ro.plane_axes = *std::move(plane_axes);
    absl::StatusOr<seq::Rope> rope = seq::Rope::Create(ro, *std::move(f));
    if (!rope.ok()) return rope.status();
    c->transform.reset();
    c->rope.emplace(*std::move(rope));
    c->transform = std::make_unique<att::RopeRowTransform>(*c->rope);
  } else if (o.algebraic_tree != nullptr) {
    absl::StatusOr<std::vector<Eigen::MatrixXd>> s = Skews(o.algebraic_tree, "algebraic_tree");
    if (!s.ok()) return s.status();
    if ((*s)[0].rows() != a.head_dim) {
      return Bad(absl::StrCat("algebraic_tree generators are ", (*s)[0].rows(), " x ",
                              (*s)[0].rows(), " but head_dim is ", a.head_dim));
    }
    absl::StatusOr<seq::AlgebraicTree> t = seq::AlgebraicTree::Create(*s);
    if (!t.ok()) return t.status();
    if (trees != 4) return Bad("algebraic_tree needs tree addresses (q_tree_offsets, ...)");
    c->tree.emplace(*std::move(t));
    c->transform = std::make_unique<att::AlgebraicTreeRowTransform>(*c->tree);
  } else if (o.algebraic_grid != nullptr) {
    absl::StatusOr<std::vector<Eigen::MatrixXd>> s = Skews(o.algebraic_grid, "algebraic_grid");
    if (!s.ok()) return s.status();
    const int64_t n = static_cast<int64_t>(s->size()), m = (*s)[0].rows();
    if (n != 2 && n != 3) return Bad(absl::StrCat("algebraic_grid must have 2 or 3 axes, got ", n));
    if (n * m != a.head_dim) {
      return Bad(absl::StrCat("algebraic_grid has ", n, " axes of ", m, " but head_dim is ",
                              a.head_dim, " (axes * m must equal it)"));
    }
    if (axes != n) {
      return Bad(absl::StrCat("algebraic_grid with ", n, " axes needs q_axes / k_axes of [tokens, ",
                              n, "]"));
    }
    c->grid_skews = *s;
    if (n == 2) {
      auto g = seq::MakeAlgebraicGrid2D((*s)[0], (*s)[1]);
      if (!g.ok()) return g.status();
      c->grid2.emplace(*std::move(g));
      c->transform = std::make_unique<att::AlgebraicGridRowTransform<seq::AlgebraicGrid2D>>(*c->grid2);
    } else {
      auto g = seq::MakeAlgebraicGrid3D((*s)[0], (*s)[1], (*s)[2]);
      if (!g.ok()) return g.status();
      c->grid3.emplace(*std::move(g));
      c->transform = std::make_unique<att::AlgebraicGridRowTransform<seq::AlgebraicGrid3D>>(*c->grid3);
    }
  } else if (structured && c->transform == nullptr) {
    return Bad("q_axes / tree addresses feed an encoding: set rope_axes or rope_sections with "
               "rope_dim, algebraic_tree or algebraic_grid");
  }
  // Shaw et al.'s labels.
  if (o.shaw_key_table != nullptr || o.shaw_value_table != nullptr) {
    if (o.shaw_max_distance < 0 || o.shaw_max_distance > (int64_t{1} << 30)) {
      return Bad(absl::StrCat("shaw_max_distance must be in [0, 2^30], got ",
                              o.shaw_max_distance));
    }
    const int64_t rows = 2 * o.shaw_max_distance + 1;
    seq::RowMatrixXd tables[2];
    const DLTensor* src[2] = {o.shaw_key_table, o.shaw_value_table};
    const char* name[2] = {"shaw_key_table", "shaw_value_table"};
    // Key labels have head_dim columns, value labels v's head size.
    const int64_t cols[2] = {a.head_dim, a.value_dim()};
    const char* cols_name[2] = {"head_dim", "head_dim_v"};
    for (int i = 0; i < 2; ++i) {
      if (src[i] == nullptr) continue;  // the unused side, once the given one is checked
      absl::StatusOr<TensorView> v = ViewTensor(src[i], name[i], 2, kF64);
      if (!v.ok()) return v.status();
      if (v->shape[0] != rows || v->shape[1] != cols[i]) {
        return Bad(absl::StrCat(name[i], " must be [2 shaw_max_distance + 1, ", cols_name[i],
                                "] = [", rows, ", ", cols[i], "], got ", ShapeString(*v)));
      }
      if (absl::Status s = CheckMaterialised(*v, name[i]); !s.ok()) return s;
      const std::vector<double> x = Compact<double>(*v);
      tables[i] = Eigen::Map<const seq::RowMatrixXd>(x.data(), rows, cols[i]);
    }
    // The unused side, zeros of the given table's shape: allocated only now that a table
    // of that shape exists in memory (before, a huge shaw_max_distance with the key
    // table missing allocated its zeros ahead of the value table's check: 10 GB in an
    // unseeded attention_fuzzer run).
    for (int i = 0; i < 2; ++i) {
      if (src[i] == nullptr) tables[i] = seq::RowMatrixXd::Zero(rows, cols[i]);
    }
    absl::StatusOr<seq::ShawRelative> shaw =
        seq::ShawRelative::Create(o.shaw_max_distance, tables[0], tables[1]);
    if (!shaw.ok()) return shaw.status();
    c->shaw.emplace(*std::move(shaw));
    if (o.shaw_key_table != nullptr) a.shaw_keys = &*c->shaw;
    if (o.shaw_value_table != nullptr) a.shaw_values = &*c->shaw;
  }
  return absl::OkStatus();
}

// The sliding window, the logit softcap and the sinks (read from a struct of any
// accepted size: zero / NULL when it ends before them). args' head counts are set.
absl::Status PrepareWindowSoftcapSinks(const gpe_attention_options& o, Call* c) {
  att::AttentionArgs& a = c->args;
  if (o.window != 0 && o.window != 1) {
    return Bad(absl::StrCat("window must be 0 (none) or 1 (window_left / window_right apply), "
                            "got ", o.window));
  }
  const auto unset = [](int64_t bound) { return bound == 0 || bound == -1; };
  if (o.window == 0 && !(unset(o.window_left) && unset(o.window_right))) {
    return Bad(absl::StrCat("window_left / window_right are (", o.window_left, ", ",
                            o.window_right, ") but window is 0: set window = 1 to apply them"));
  }
  if (o.window == 1) {
    if (o.window_left < -1 || o.window_right < -1) {
      return Bad(absl::StrCat("window_left and window_right must be -1 (unbounded) or >= 0, "
                              "got (", o.window_left, ", ", o.window_right, ")"));
    }
    a.window_left = o.window_left;
    a.window_right = o.window_right;
  }
  if (o.softcap != 0.0) {
    if (!(std::isfinite(o.softcap) && o.softcap > 0.0)) {
      return Bad(absl::StrCat("softcap must be 0 (none) or finite and > 0, got ", o.softcap));
    }
    a.softcap = o.softcap;
  }
  if (o.sinks != nullptr) {
    absl::StatusOr<TensorView> v = ViewTensor(o.sinks, "sinks", 1, kF32);
    if (!v.ok()) {
      return Bad(absl::StrCat(v.status().message(), " (sinks: float32 [heads_q])"));
    }
    if (v->shape[0] != a.num_q_heads) {
      return Bad(absl::StrCat("sinks must be float32 [heads_q] = [", a.num_q_heads,
                              "], one logit per query head; got ", ShapeString(*v)));
    }
    // Copied: a broadcast view would let 4 bytes stand for heads_q logits, which a call
    // with no query token leaves unbounded (2^28 heads copied 1 GiB).
    if (absl::Status s = gpe::c_api::CheckDistinctEntries(*v, "sinks"); !s.ok()) return s;
    c->sinks = Compact<float>(*v);
    a.sinks = c->sinks;
  }
  return absl::OkStatus();
}

// An int64 vector's entries; `entries` as CheckIndexSizes's rows (-1: unbounded).
absl::StatusOr<std::vector<int64_t>> Int64Vector(const DLTensor* t, const char* name,
                                                 int64_t entries = -1) {
  absl::StatusOr<TensorView> v = ViewTensor(t, name, 1, kInt);
  if (!v.ok()) return v.status();
  if (absl::Status s = CheckIndexSizes(*v, name, entries, -1); !s.ok()) return s;
  std::vector<int64_t> storage;
  absl::Span<const int64_t> s = ContiguousPositions(*v, &storage);
  return std::vector<int64_t>(s.begin(), s.end());
}

// attn_mask (descriptor.h, SCORE MASK): 4-D over (sequence, query head, query, key),
// each dimension the call's extent or 1 (broadcast: stride 0), so every element the
// kernels read lies in the tensor. Needs the layout, batch and heads (and thd's
// cu_seqlens) in c->args.
absl::Status PrepareMask(const DLTensor* t, Call* c) {
  att::AttentionArgs& a = c->args;
  absl::StatusOr<TensorView> v = ViewTensor(t, "attn_mask", 4, kMaskTypes);
  if (!v.ok()) {
    return absl::Status(v.status().code(),
                        absl::StrCat(v.status().message(),
                                     " (attn_mask: float32 additive, or bool / uint8 with "
                                     "nonzero = the key takes part; 4-D)"));
  }
  int64_t max_lq = a.seq_len_q, max_lk = a.seq_len_k;
  if (a.layout == att::Layout::kTHD) {
    // The longest sequence's lengths (Prepare has checked cu_seqlens: ValidateCuSeqlens;
    // the subtractions are guarded all the same).
    max_lq = max_lk = 0;
    for (size_t b = 0; b + 1 < c->cu_q.size(); ++b) {
      int64_t dq = 0, dk = 0;
      if (!__builtin_sub_overflow(c->cu_q[b + 1], c->cu_q[b], &dq)) max_lq = std::max(max_lq, dq);
      if (!__builtin_sub_overflow(c->cu_k[b + 1], c->cu_k[b], &dk)) max_lk = std::max(max_lk, dk);
    }
  }
  const bool packed = a.layout == att::Layout::kTHD;
  const int64_t want[4] = {a.num_sequences(), a.num_q_heads, max_lq, max_lk};
  const char* dims[4] = {packed ? "sequences" : "batch", "heads_q",
                         packed ? "max_lq (the longest query sequence)" : "seq_q",
                         packed ? "max_lk (the longest key sequence)" : "seq_k"};
  for (int i = 0; i < 4; ++i) {
    if (v->shape[i] != want[i] && v->shape[i] != 1) {
      return Bad(absl::StrCat("attn_mask has shape ", ShapeString(*v), ": dimension ", i,
                              " must be ", dims[i], " = ", want[i], " or 1 (broadcast); the call's "
                              "extents are [", want[0], ", ", want[1], ", ", want[2], ", ",
                              want[3], "]"));
    }
  }
  int64_t strides[4];
  for (int i = 0; i < 4; ++i) {
    strides[i] = v->shape[i] == 1 ? 0 : v->strides[i];
    if (strides[i] < 0) {
      return Bad(absl::StrCat("attn_mask strides must be >= 0, got ", v->strides[i],
                              " in dimension ", i));
    }
  }
  if (v->numel() == 0) return absl::OkStatus();  // no (row, key) pair to mask
  c->mask = *v;
  att::ScoreMask& m = a.mask;
  if (v->dtype == DType::kFloat32) {
    m.additive = v->typed<const float>();
  } else {
    m.allowed = v->typed<const uint8_t>();
  }
  m.batch = strides[0];
  m.head = strides[1];
  m.query = strides[2];
  m.key = strides[3];
  return absl::OkStatus();
}

// kv_lengths and attn_mask (after the layout is known; block_table is read with the
// shapes in Prepare).
absl::Status PrepareMaskAndLengths(const gpe_attention_options& o, Call* c) {
  att::AttentionArgs& a = c->args;
  if (o.kv_lengths != nullptr) {
    if (a.layout == att::Layout::kTHD) {
      return Bad("kv_lengths is for the padded (bshd) layout; with cu_seqlens the packed "
                 "sequences already have their own lengths");
    }
    absl::StatusOr<TensorView> v = ViewTensor(o.kv_lengths, "kv_lengths", 1, kInt);
    if (!v.ok()) {
      return absl::Status(v.status().code(), absl::StrCat(v.status().message(),
                                                          " (kv_lengths: int64 [batch])"));
    }
    if (v->shape[0] != a.batch) {
      return Bad(absl::StrCat("kv_lengths must be int64 [batch] = [", a.batch, "], got ",
                              ShapeString(*v)));
    }
    // Copied: the batch of a call with no query token is bounded by nothing in memory.
    if (absl::Status s = gpe::c_api::CheckDistinctEntries(*v, "kv_lengths"); !s.ok()) return s;
    std::vector<int64_t> storage;
    absl::Span<const int64_t> s = ContiguousPositions(*v, &storage);
    c->kv_lengths.assign(s.begin(), s.end());
    for (size_t b = 0; b < c->kv_lengths.size(); ++b) {
      if (c->kv_lengths[b] < 0 || c->kv_lengths[b] > a.seq_len_k) {
        return Bad(absl::StrCat("kv_lengths[", b, "] = ", c->kv_lengths[b], " must lie in [0, ",
                                "seq_k = ", a.seq_len_k, "]"));
      }
    }
    a.kv_lengths = c->kv_lengths;
  }
  if (o.attn_mask != nullptr) return PrepareMask(o.attn_mask, c);
  return absl::OkStatus();
}

}  // namespace

absl::Status Bad(const std::string& msg) { return absl::InvalidArgumentError(msg); }

absl::Status CopyOptions(const gpe_attention_options& in, gpe_attention_options* out) {
  if (absl::Status s = gpe::c_api::CopyVersioned(in, kAttentionOptionsV1Size,
                                                 "gpe_attention_options", out);
      !s.ok()) {
    return s;
  }
  return gpe::c_api::CheckReleasedSize(in.struct_size, kAttentionOptionsReleasedSizes,
                                       "gpe_attention_options");
}

absl::StatusOr<TensorView> View(const DLTensor* t, const char* name, bool packed) {
  if (t == nullptr) return Bad(absl::StrCat(name, " is NULL"));
  absl::StatusOr<TensorView> v = ViewTensor(t, name, packed ? 3 : 4, kAttnTypes);
  if (!v.ok()) return v.status();
  if (v->numel() == 0) {
    // An empty tensor has no layout (NumPy and PyTorch may give it any strides): take the
    // compact row-major one, so an empty sequence or key shard is never rejected for it.
    // Sizes beyond 2^40 are refused even here: with a zero elsewhere they describe no
    // element, but a batch of 2^60 empty sequences would still be walked.
    for (size_t i = 0; i < v->shape.size(); ++i) {
      if (v->shape[i] > (int64_t{1} << 40)) {
        return absl::OutOfRangeError(absl::StrCat(name, " has size ", v->shape[i],
                                                  " in dimension ", i, "; at most 2^40"));
      }
    }
    int64_t stride = 1;
    for (size_t i = v->shape.size(); i-- > 0;) {
      v->strides[i] = stride;
      if (__builtin_mul_overflow(stride, std::max<int64_t>(v->shape[i], 1), &stride)) {
        stride = std::numeric_limits<int64_t>::max();
      }
    }
    return v;
  }
  if (v->shape.back() > 1 && v->strides.back() != 1) {
    return Bad(absl::StrCat(name, ": head_dim must be contiguous (stride 1), got stride ",
                            v->strides.back()));
  }
  return v;
}

att::Strides StridesOf(const TensorView& v, bool packed) {
  att::Strides s;
  if (packed) {
    s.token = v.strides[0];
    s.head = v.strides[1];
  } else {
    s.batch = v.strides[0];
    s.token = v.strides[1];
    s.head = v.strides[2];
  }
  return s;
}

absl::Status CheckSameLayout(const TensorView& a, const char* an, const TensorView& b,
                             const char* bn) {
  if (a.dtype != b.dtype) {
    return Bad(absl::StrCat(an, " is ", gpe::c_api::DTypeName(a.dtype), " but ", bn, " is ",
                            gpe::c_api::DTypeName(b.dtype)));
  }
  if (a.shape != b.shape) {
    return Bad(absl::StrCat(an, " has shape ", ShapeString(a), ", ", bn, " has ", ShapeString(b)));
  }
  if (!gpe::c_api::SameStrides(a, b)) {
    return Bad(absl::StrCat(an, " must have the strides of ", bn, " (on dimensions of size above 1)"));
  }
  return absl::OkStatus();
}

absl::Status CheckArithmetic(const gpe_attention_options& o) {
  if (o.bf16_arithmetic < GPE_BF16_ARITHMETIC_AUTO ||
      o.bf16_arithmetic > GPE_BF16_ARITHMETIC_AMX_TILES) {
    return Bad(absl::StrCat("bf16_arithmetic must be a GPE_BF16_ARITHMETIC_* value (0 to 3), got ",
                            o.bf16_arithmetic));
  }
  if (o.float32_arithmetic < GPE_FLOAT32_ARITHMETIC_EXACT ||
      o.float32_arithmetic > GPE_FLOAT32_ARITHMETIC_SPLIT_BF16X3) {
    return Bad(absl::StrCat(
        "float32_arithmetic must be a GPE_FLOAT32_ARITHMETIC_* value (0 to 2), got ",
        o.float32_arithmetic));
  }
  return absl::OkStatus();
}

absl::Status Prepare(const gpe_attention_options* options, const DLTensor* q, const DLTensor* k,
                     const DLTensor* v, Call* c) {
  if (options == nullptr) return Bad("options is NULL");
  // The caller's struct (an older, shorter one included), later fields zero / NULL.
  gpe_attention_options o;
  if (absl::Status s = CopyOptions(*options, &o); !s.ok()) return s;
  if (o.causal != 0 && o.causal != 1) return Bad("causal must be 0 or 1");
  if (!std::isfinite(o.softmax_scale) || o.softmax_scale < 0) {
    return Bad(absl::StrCat("softmax_scale must be finite and >= 0 (0: default), got ",
                            o.softmax_scale));
  }
  {
    using A = att::CpuAttentionOptions::Bf16Arithmetic;
    using F = att::CpuAttentionOptions::Float32Arithmetic;
    if (absl::Status s = CheckArithmetic(o); !s.ok()) return s;
    static constexpr A kBf16[] = {A::kAuto, A::kDotProducts, A::kWiden, A::kAmxTiles};
    static constexpr F kFloat32[] = {F::kExact, F::kSplitBf16x6, F::kSplitBf16x3};
    c->cpu.num_threads = o.num_threads;
    c->cpu.bf16_arithmetic = kBf16[o.bf16_arithmetic];
    c->cpu.float32_arithmetic = kFloat32[o.float32_arithmetic];
    if (absl::Status s = gpe::attention::ValidateCpuAttentionOptions(c->cpu); !s.ok()) {
      return s;
    }
  }
  if ((o.cu_seqlens_q == nullptr) != (o.cu_seqlens_k == nullptr)) {
    return Bad("give both cu_seqlens_q and cu_seqlens_k (packed layout) or neither");
  }
  if ((o.q_positions == nullptr) != (o.k_positions == nullptr)) {
    return Bad("give both q_positions and k_positions or neither");
  }
  const bool packed = o.cu_seqlens_q != nullptr;
  const bool paged = o.block_table != nullptr;
  if (paged && packed) {
    return Bad("block_table (a paged KV cache) needs the padded (bshd) layout, not cu_seqlens");
  }
  absl::StatusOr<TensorView> qv = View(q, "q", packed);
  if (!qv.ok()) return qv.status();
  absl::StatusOr<TensorView> kv = View(k, "k", packed);
  if (!kv.ok()) return kv.status();
  absl::StatusOr<TensorView> vv = View(v, "v", packed);
  if (!vv.ok()) return vv.status();
  c->q = *qv;
  c->k = *kv;
  c->v = *vv;
  c->dtype = qv->dtype;
  c->kv_dtype = kv->dtype;
  if (vv->dtype != kv->dtype) {
    return Bad(absl::StrCat("k is ", gpe::c_api::DTypeName(kv->dtype), " but v is ",
                            gpe::c_api::DTypeName(vv->dtype), "; they must have one dtype"));
  }
  // One dtype (float32, bfloat16 or float64), or a 16-bit KV cache of the forward: float32
  // q with bfloat16 or float16 k, v; bfloat16 q with float16 k, v (the forward checks
  // that it is one; the backward refuses any).
  const bool cache = (c->dtype == DType::kFloat32 &&
                      (c->kv_dtype == DType::kBFloat16 || c->kv_dtype == DType::kFloat16)) ||
                     (c->dtype == DType::kBFloat16 && c->kv_dtype == DType::kFloat16);
  if (c->kv_dtype != c->dtype && !cache) {
    return Bad(absl::StrCat(
        "q is ", gpe::c_api::DTypeName(c->dtype), " but k and v are ",
        gpe::c_api::DTypeName(c->kv_dtype),
        ": q, k and v take one dtype (float32, bfloat16 or float64), or k and v are a 16-bit "
        "KV cache (bfloat16 or float16 for float32 q, float16 for bfloat16 q)"));
  }
  if (c->dtype == DType::kFloat16) {
    return Bad("q is float16: float16 serves only as a KV cache (k and v) of float32 or "
               "bfloat16 queries");
  }
  const size_t n = qv->shape.size();
  // v may differ from k in its last dim only: the value head size (DeepSeek's 192/128).
  if (!std::equal(kv->shape.begin(), kv->shape.end() - 1, vv->shape.begin())) {
    return Bad(absl::StrCat("k has shape ", ShapeString(*kv), ", v has ", ShapeString(*vv),
                            "; they may differ only in the last dim (the value head size)"));
  }
  if (kv->shape[n - 1] != qv->shape[n - 1]) {
    return Bad(absl::StrCat("head_dim differs: q ", ShapeString(*qv), ", k ", ShapeString(*kv)));
  }
  att::AttentionArgs& a = c->args;
  a.layout = packed ? att::Layout::kTHD : att::Layout::kBSHD;
  if (packed) {
    absl::StatusOr<std::vector<int64_t>> cq = Int64Vector(o.cu_seqlens_q, "cu_seqlens_q");
    if (!cq.ok()) return cq.status();
    absl::StatusOr<std::vector<int64_t>> ck = Int64Vector(o.cu_seqlens_k, "cu_seqlens_k");
    if (!ck.ok()) return ck.status();
    c->cu_q = *std::move(cq);
    c->cu_k = *std::move(ck);
    if (c->cu_q.size() != c->cu_k.size()) {
      return Bad(absl::StrCat("cu_seqlens_q has ", c->cu_q.size(), " entries, cu_seqlens_k ",
                              c->cu_k.size()));
    }
    a.cu_seqlens_q = c->cu_q;
    a.cu_seqlens_k = c->cu_k;
    a.batch = static_cast<int64_t>(c->cu_q.size()) - 1;
    a.seq_len_q = qv->shape[0];
    a.seq_len_k = kv->shape[0];
    // Checked now, as ValidateAttention would: the score mask is sized by the longest
    // sequence, which a list out of order would misstate in the mask's message.
    if (absl::Status s = att::ValidateCuSeqlens("cu_seqlens_q", c->cu_q, a.seq_len_q); !s.ok()) {
      return s;
    }
    if (absl::Status s = att::ValidateCuSeqlens("cu_seqlens_k", c->cu_k, a.seq_len_k); !s.ok()) {
      return s;
    }
    a.num_q_heads = qv->shape[1];
    a.num_kv_heads = kv->shape[1];
    a.head_dim = qv->shape[2];
  } else if (paged) {
    // k and v are [num_pages, page_size, heads_kv, head_dim]; each sequence reads
    // block_table[b] (LAYOUTS), seq_k = pages_per_sequence * page_size.
    a.batch = qv->shape[0];
    a.seq_len_q = qv->shape[1];
    absl::StatusOr<TensorView> bt = ViewTensor(o.block_table, "block_table", 2, kInt);
    if (!bt.ok()) {
      return absl::Status(bt.status().code(),
                          absl::StrCat(bt.status().message(),
                                       " (block_table: int64 [batch, pages_per_sequence])"));
    }
    if (bt->shape[0] != a.batch) {
      return Bad(absl::StrCat("block_table must be int64 [batch = ", a.batch,
                              ", pages_per_sequence], got ", ShapeString(*bt)));
    }
    // Copied as batch x pages_per_sequence entries: broadcast or self-overlapping strides
    // (e.g. {1, 1}) would let a few bytes describe them.
    if (absl::Status s = gpe::c_api::CheckDistinctEntries(*bt, "block_table"); !s.ok()) return s;
    const int64_t page_size = kv->shape[1];
    if (page_size < 1) {
      return Bad(absl::StrCat("with block_table, k and v are [num_pages, page_size, heads_kv, "
                              "head_dim] with page_size >= 1; got k ", ShapeString(*kv)));
    }
    if (__builtin_mul_overflow(bt->shape[1], page_size, &a.seq_len_k) ||
        a.seq_len_k > (int64_t{1} << 40)) {
      return absl::OutOfRangeError(absl::StrCat(
          "block_table: pages_per_sequence (", bt->shape[1], ") x page_size (", page_size,
          ") keys per sequence; at most 2^40"));
    }
    c->block_table = Compact<int64_t>(*bt);
    a.pages.block_table = c->block_table;
    a.pages.page_size = page_size;
    a.pages.num_pages = kv->shape[0];
    a.num_q_heads = qv->shape[2];
    a.num_kv_heads = kv->shape[2];
    a.head_dim = qv->shape[3];
  } else {
    if (kv->shape[0] != qv->shape[0]) {
      return Bad(absl::StrCat("batch differs: q ", ShapeString(*qv), ", k ", ShapeString(*kv)));
    }
    a.batch = qv->shape[0];
    a.seq_len_q = qv->shape[1];
    a.seq_len_k = kv->shape[1];
    a.num_q_heads = qv->shape[2];
    a.num_kv_heads = kv->shape[2];
    a.head_dim = qv->shape[3];
  }
  if (a.head_dim < 1) return Bad("head_dim must be >= 1");
  a.head_dim_v = vv->shape[n - 1];
  if (a.head_dim_v < 1) return Bad("v's head size (its last dim) must be >= 1");
  // Before anything sized by them is copied or allocated (positions, axes, Shaw tables):
  // an empty q or k may carry any extents, so the heads and head sizes are checked here,
  // not left to the kernels' own validation.
  if (a.num_q_heads < 1 || a.num_kv_heads < 1) {
    return Bad(absl::StrCat("num_q_heads and num_kv_heads must be >= 1, got ", a.num_q_heads,
                            " and ", a.num_kv_heads));
  }
  if (a.head_dim > kMaxHeadDim || a.head_dim_v > kMaxHeadDim) {
    return absl::OutOfRangeError(absl::StrCat("head sizes are at most ", kMaxHeadDim, "; got ",
                                              a.head_dim, " (q, k) and ", a.head_dim_v, " (v)"));
  }
  if (absl::Status s = PrepareMaskAndLengths(o, c); !s.ok()) return s;
  a.q = StridesOf(*qv, packed);
  a.k = StridesOf(*kv, packed);
  a.v = StridesOf(*vv, packed);
  a.causal = o.causal == 1;
  if (o.softmax_scale > 0) a.softmax_scale = o.softmax_scale;
  if (o.q_positions != nullptr) {
    absl::StatusOr<std::vector<int64_t>> pq =
        Int64Vector(o.q_positions, "q_positions", a.num_q_tokens());
    if (!pq.ok()) return pq.status();
    absl::StatusOr<std::vector<int64_t>> pk =
        Int64Vector(o.k_positions, "k_positions", a.num_k_tokens());
    if (!pk.ok()) return pk.status();
    c->pos_q = *std::move(pq);
    c->pos_k = *std::move(pk);
    // With no query or no key tokens every row is empty whatever the positions; the
    // descriptor reads an empty list as "default", so drop both rather than reject an
    // empty shard's (correctly) empty positions.
    const bool no_rows = (c->pos_q.empty() && a.num_q_tokens() == 0) ||
                         (c->pos_k.empty() && a.num_k_tokens() == 0);
    if (!no_rows) {
      a.q_positions = c->pos_q;
      a.k_positions = c->pos_k;
    }
  }
  if (o.rope != nullptr && o.rope_dim != 0) {
    return Bad("give rope (a gpe_rope handle) or rope_dim, not both: the handle supersedes "
               "rope_dim / rope_base / rope_pairing");
  }
  int encodings = (o.rope_dim != 0) + (o.rope != nullptr) + (o.grape_m != nullptr) +
                  (o.algebraic != nullptr);
  if (encodings > 1) return Bad("at most one of rope_dim, rope, grape_m and algebraic may be set");
  if (absl::Status s = PrepareWindowSoftcapSinks(o, c); !s.ok()) return s;
  if (o.rope != nullptr) {
    // Each side exactly as gpe_rope_forward rotates it in its role (xPos: q and k scaled
    // inversely); the table carries the schedule's attention factor (descriptor.h's
    // RopeRowTransform over rope.h's tables).
    const seq::Rope& rope = o.rope->impl;
    if (rope.options().head_dim != a.head_dim) {
      return Bad(absl::StrCat("rope has head_dim ", rope.options().head_dim,
                              " but q and k have head_dim ", a.head_dim));
    }
    c->transform = std::make_unique<att::RopeRowTransform>(rope, seq::RopeRole::kQuery);
    c->key_transform = std::make_unique<att::RopeRowTransform>(rope, seq::RopeRole::kKey);
  } else if (o.rope_dim != 0) {
    if (o.rope_pairing != GPE_PAIRING_INTERLEAVED && o.rope_pairing != GPE_PAIRING_HALF_SPLIT) {
      return Bad(absl::StrCat("rope_pairing must be GPE_PAIRING_*, got ", o.rope_pairing));
    }
    absl::StatusOr<seq::RopeFrequencies> f = seq::DefaultRopeFrequencies(o.rope_dim, o.rope_base);
    if (!f.ok()) return f.status();
    seq::RopeOptions ro;
    ro.head_dim = a.head_dim;
    ro.rotary_dim = o.rope_dim;
    ro.pairing = o.rope_pairing == GPE_PAIRING_INTERLEAVED ? gpe::group::PlanePairing::kInterleaved
                                                           : gpe::group::PlanePairing::kHalfSplit;
    absl::StatusOr<seq::Rope> rope = seq::Rope::Create(ro, *std::move(f));
    if (!rope.ok()) return rope.status();
    c->rope.emplace(*std::move(rope));
    c->transform = std::make_unique<att::RopeRowTransform>(*c->rope);
  } else if (o.grape_m != nullptr) {
    c->transform =
        std::make_unique<att::GrapeMRowTransform<seq::GrapeMProduct>>(o.grape_m->impl);
  } else if (o.algebraic != nullptr) {
    c->transform = std::make_unique<att::AlgebraicRowTransform>(o.algebraic->impl);
  }
  if (absl::Status s = PrepareStructured(o, c, &encodings); !s.ok()) return s;
  a.q_transform = c->transform.get();
  a.k_transform = c->key_transform != nullptr ? c->key_transform.get() : c->transform.get();
  if (o.bias != nullptr) a.biases = {&o.bias->base()};
  return absl::OkStatus();
}

// lse: [tokens_q, heads_q], compact row-major; float64 when q is float64, else float32.
// Returns the view (data null when `t` is null).
absl::StatusOr<TensorView> LseOf(const DLTensor* t, const att::AttentionArgs& a, DType dtype) {
  if (t == nullptr) return TensorView{};
  const bool f64 = dtype == DType::kFloat64;
  absl::StatusOr<TensorView> v = ViewTensor(t, "lse", 2, f64 ? absl::Span<const DType>(kF64)
                                                               : absl::Span<const DType>(kF32));
  if (!v.ok()) {
    return Bad(absl::StrCat(v.status().message(), " (lse is ", f64 ? "float64" : "float32",
                            " for ", gpe::c_api::DTypeName(dtype), " q, k, v)"));
  }
  if (v->shape[0] != a.num_q_tokens() || v->shape[1] != a.num_q_heads) {
    return Bad(absl::StrCat("lse must be [", a.num_q_tokens(), ", ", a.num_q_heads, "], got ",
                            ShapeString(*v)));
  }
  if (v->numel() > 1 && (v->strides[1] != 1 || v->strides[0] != a.num_q_heads)) {
    return Bad("lse must be compact row-major");
  }
  return v;
}

TensorView Call::OutputShape() const {
  TensorView o = q;
  o.shape.back() = args.value_dim();
  return o;
}

absl::StatusOr<TensorView> OutputLike(const DLTensor* t, const char* name, const TensorView& like,
                                      const char* like_name, bool packed) {
  absl::StatusOr<TensorView> v = View(t, name, packed);
  if (!v.ok()) return v.status();
  if (v->dtype != like.dtype || v->shape != like.shape) {
    return Bad(absl::StrCat(name, " must have the dtype and shape of ", like_name, ", ",
                            gpe::c_api::DTypeName(like.dtype), " ", ShapeString(like), "; got ",
                            gpe::c_api::DTypeName(v->dtype), " ", ShapeString(*v)));
  }
  return v;
}

absl::Status CheckOutputs(absl::Span<const NamedView> outputs, absl::Span<const NamedView> inputs) {
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (outputs[i].first == nullptr) continue;
    for (const NamedView& in : inputs) {
      const NamedView pair[] = {outputs[i], in};
      if (absl::Status s = CheckDisjoint(pair); !s.ok()) return s;
    }
    for (size_t j = i + 1; j < outputs.size(); ++j) {
      const NamedView pair[] = {outputs[i], outputs[j]};
      if (absl::Status s = CheckDisjoint(pair); !s.ok()) return s;
    }
  }
  return absl::OkStatus();
}

}  // namespace gpe::c_api::attn
