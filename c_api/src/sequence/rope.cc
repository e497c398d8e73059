// The C ABI's RoPE (gpe/rope.h): option structs and DLPack views validated here,
// then handed to encodings/sequence/rope.h. Every entry point runs under Guard.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "c_api/include/gpe/rope.h"
#include "c_api/src/common/checks.h"
#include "c_api/src/common/cuda_plugin.h"
#include "c_api/src/common/error.h"
#include "c_api/src/common/tensor_view.h"
#include "c_api/src/sequence/rope_handle.h"
#include "encodings/sequence/rope.h"

using gpe::c_api::CheckCreate;
using gpe::c_api::CheckDim;
using gpe::c_api::CheckMaterialised;
using gpe::c_api::CheckNoSelfOverlap;
using gpe::c_api::CheckStructSize;
using gpe::c_api::DType;
using gpe::c_api::DTypeName;
using gpe::c_api::Guard;
using gpe::c_api::TensorView;
using gpe::c_api::ViewTensor;
using gpe::c_api::kInt;
namespace seq = gpe::encodings::sequence;

// A cos/sin table for one token numbering, with its own copy of the encoding.
struct gpe_rope_table {
  gpe_rope rope;
  int32_t layout;
  std::vector<int64_t> cu_seqlens;  // thd only
  std::optional<seq::RopeTable<float>> f32;
  std::optional<seq::RopeTable<double>> f64;
};

namespace {

constexpr DType kRopeTypes[] = {DType::kFloat32, DType::kFloat64, DType::kBFloat16,
                                DType::kFloat16};

// A pointer + length list of doubles (LongRoPE's factors), copied.
absl::StatusOr<std::vector<double>> DoubleList(const double* p, int64_t n, const char* name) {
  if (n < 0) return absl::InvalidArgumentError(absl::StrCat(name, "_len is negative: ", n));
  if (n > gpe::c_api::kMaxDim) {
    return absl::OutOfRangeError(absl::StrCat(name, "_len is ", n, "; too large"));
  }
  if (n > 0 && p == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(name, " is NULL but ", name, "_len is ", n));
  }
  return std::vector<double>(p, p + n);
}

absl::StatusOr<seq::RopeFrequencies> Frequencies(const gpe_rope_options& o, int64_t r) {
  switch (o.schedule) {
    case GPE_ROPE_DEFAULT:
      return seq::DefaultRopeFrequencies(r, o.base);
    case GPE_ROPE_LINEAR:
      return seq::LinearRopeFrequencies(r, o.base, o.factor);
    case GPE_ROPE_DYNAMIC_NTK:
      return seq::DynamicNtkRopeFrequencies(r, o.base, o.factor, o.original_max_position,
                                            o.current_length);
    case GPE_ROPE_YARN: {
      seq::YarnOptions y;
      y.factor = o.factor;
      y.original_max_position = o.original_max_position;
      y.beta_fast = o.beta_fast;
      y.beta_slow = o.beta_slow;
      y.truncate = o.yarn_truncate != 0;
      if (o.has_attention_factor) y.attention_factor = o.attention_factor;
      if (o.has_mscale) {
        y.mscale = o.mscale;
        y.mscale_all_dim = o.mscale_all_dim;
      }
      return seq::YarnRopeFrequencies(r, o.base, y);
    }
    case GPE_ROPE_LONGROPE: {
      seq::LongRopeOptions l;
      absl::StatusOr<std::vector<double>> s =
          DoubleList(o.short_factor, o.short_factor_len, "short_factor");
      if (!s.ok()) return s.status();
      absl::StatusOr<std::vector<double>> lf =
          DoubleList(o.long_factor, o.long_factor_len, "long_factor");
      if (!lf.ok()) return lf.status();
      l.short_factor = std::move(*s);
      l.long_factor = std::move(*lf);
      l.original_max_position = o.original_max_position;
      l.max_position = o.max_position;
      if (o.has_attention_factor) l.attention_factor = o.attention_factor;
      return seq::LongRopeFrequencies(r, o.base, l, o.current_length);
    }
    case GPE_ROPE_LLAMA3: {
      seq::Llama3Options l;
      l.factor = o.factor;
      l.low_freq_factor = o.low_freq_factor;
      l.high_freq_factor = o.high_freq_factor;
      l.original_max_position = o.original_max_position;
      return seq::Llama3RopeFrequencies(r, o.base, l);
    }
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("schedule ", o.schedule, " is not a GPE_ROPE_* schedule (0 .. 5)"));
  }
}

absl::StatusOr<seq::Rope> MakeRope(const gpe_rope_options& o) {
  if (absl::Status s = CheckDim(o.head_dim, "head_dim", 2); !s.ok()) return s;
  const int64_t r = o.rotary_dim == 0 ? o.head_dim : o.rotary_dim;
  if (r < 2 || r % 2 != 0 || r > o.head_dim) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rotary_dim must be even with 2 <= rotary_dim <= head_dim (", o.head_dim,
        "), or 0 for head_dim; got ", o.rotary_dim));
  }
  if (o.pairing != GPE_PAIRING_INTERLEAVED && o.pairing != GPE_PAIRING_HALF_SPLIT) {
    return absl::InvalidArgumentError(
        absl::StrCat("pairing ", o.pairing, " is not a GPE_PAIRING_* value"));
  }
  seq::RopeOptions ro;
  ro.head_dim = o.head_dim;
  ro.rotary_dim = r;
  ro.pairing = o.pairing == GPE_PAIRING_INTERLEAVED ? seq::PlanePairing::kInterleaved
                                                    : seq::PlanePairing::kHalfSplit;
  ro.num_threads = o.num_threads;
  ro.xpos.enabled = o.xpos != 0;
  ro.xpos.gamma = o.xpos_gamma;
  ro.xpos.scale_base = o.xpos_scale_base;
  ro.xpos.centre = o.xpos_centre;
  absl::StatusOr<seq::RopeFrequencies> f;
  switch (o.axes) {
    case GPE_ROPE_AXES_SINGLE:
      f = Frequencies(o, r);
      break;
    case GPE_ROPE_AXES_AXIAL: {
      if (o.schedule != GPE_ROPE_DEFAULT) {
        return absl::InvalidArgumentError(
            "axial RoPE (GPE_ROPE_AXES_AXIAL) takes the GPE_ROPE_DEFAULT schedule only");
      }
      if (o.num_axes < 2 || o.num_axes > 8) {
        return absl::InvalidArgumentError(
            absl::StrCat("axial RoPE needs num_axes in [2, 8]; got ", o.num_axes));
      }
      f = seq::AxialRopeFrequencies(r, o.num_axes, o.base);
      if (!f.ok()) return f.status();
      absl::StatusOr<std::vector<int>> axes = seq::AxialPlaneAxes(r / 2, o.num_axes);
      if (!axes.ok()) return axes.status();
      ro.plane_axes = std::move(*axes);
      ro.num_axes = o.num_axes;
      break;
    }
    case GPE_ROPE_AXES_MROPE:
    case GPE_ROPE_AXES_MROPE_INTERLEAVED: {
      if (o.num_mrope_sections < 1 || o.num_mrope_sections > 8) {
        return absl::InvalidArgumentError(absl::StrCat(
            "M-RoPE needs 1 to 8 mrope_sections; got num_mrope_sections = ",
            o.num_mrope_sections));
      }
      if (o.mrope_sections == nullptr) return absl::InvalidArgumentError("mrope_sections is NULL");
      std::vector<int64_t> sections(o.mrope_sections, o.mrope_sections + o.num_mrope_sections);
      absl::StatusOr<std::vector<int>> axes =
          seq::MRopePlaneAxes(sections, o.axes == GPE_ROPE_AXES_MROPE_INTERLEAVED, r / 2);
      if (!axes.ok()) return axes.status();
      ro.plane_axes = std::move(*axes);
      ro.num_axes = static_cast<int>(o.num_mrope_sections);
      f = Frequencies(o, r);
      break;
    }
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("axes ", o.axes, " is not a GPE_ROPE_AXES_* value (0 .. 3)"));
  }
  if (!f.ok()) return f.status();
  return seq::Rope::Create(std::move(ro), std::move(*f));
}

// A contiguous int64 copy of an N-d int64 view, row-major.
std::vector<int64_t> Gather(const TensorView& v) {
  std::vector<int64_t> out(static_cast<size_t>(v.numel()));
  const int64_t* src = v.typed<const int64_t>();
  std::vector<int64_t> idx(v.shape.size(), 0);
  for (size_t n = 0; n < out.size(); ++n) {
    int64_t off = 0;
    for (size_t d = 0; d < idx.size(); ++d) off += idx[d] * v.strides[d];
    out[n] = src[off];
    for (size_t d = idx.size(); d-- > 0;) {
      if (++idx[d] < v.shape[d]) break;
      idx[d] = 0;
    }
  }
  return out;
}

// A validated call: the tensor description, positions and the views.
// gpe_rope_tokens of the first release ends at cu_seqlens (0.10.0 appended cuda_stream).
constexpr size_t kRopeTokensV1Size = offsetof(gpe_rope_tokens, cuda_stream);

struct RopeCall {
  seq::RopeTensor tensor;
  std::vector<int64_t> ids, offsets, cu;
  seq::RopeRole role = seq::RopeRole::kQuery;
  int32_t layout = GPE_ROPE_LAYOUT_BSHD;
  TensorView x, out;
};

seq::RopeTensor Describe(const TensorView& v, int32_t layout) {
  seq::RopeTensor t;
  if (layout == GPE_ROPE_LAYOUT_THD) {
    t.layout = seq::RopeLayout::kTHD;
    t.seq_len = v.shape[0];
    t.heads = v.shape[1];
    t.head_dim = v.shape[2];
    t.seq_stride = v.strides[0];
    t.head_stride = v.strides[1];
    return t;
  }
  const bool bshd = layout == GPE_ROPE_LAYOUT_BSHD;
  t.layout = bshd ? seq::RopeLayout::kBSHD : seq::RopeLayout::kSBHD;
  t.batch = v.shape[bshd ? 0 : 1];
  t.seq_len = v.shape[bshd ? 1 : 0];
  t.batch_stride = v.strides[bshd ? 0 : 1];
  t.seq_stride = v.strides[bshd ? 1 : 0];
  t.heads = v.shape[2];
  t.head_stride = v.strides[2];
  t.head_dim = v.shape[3];
  return t;
}

// shape_only: x == out is gpe_rope_table_create's `like`, whose data is never read.
absl::StatusOr<RopeCall> ViewRopeCall(const gpe_rope* rope, const gpe_rope_tokens* tokens,
                                      const DLTensor* x, DLTensor* out, const char* x_name,
                                      const char* out_name, bool shape_only = false) {
  if (rope == nullptr) return absl::InvalidArgumentError("rope is NULL");
  if (tokens == nullptr) return absl::InvalidArgumentError("tokens is NULL");
  // The caller's struct (0.3.0's, before cuda_stream, included); cuda_stream is read by
  // RunCuda, which passes its own copy.
  gpe_rope_tokens versioned;
  if (absl::Status s = gpe::c_api::CopyVersioned(*tokens, kRopeTokensV1Size, "gpe_rope_tokens",
                                                 &versioned);
      !s.ok()) {
    return s;
  }
  tokens = &versioned;
  const int32_t layout = tokens->layout;
  if (layout != GPE_ROPE_LAYOUT_BSHD && layout != GPE_ROPE_LAYOUT_SBHD &&
      layout != GPE_ROPE_LAYOUT_THD) {
    return absl::InvalidArgumentError(
        absl::StrCat("tokens.layout ", layout, " is not a GPE_ROPE_LAYOUT_* value"));
  }
  if (tokens->role != GPE_ROPE_QUERY && tokens->role != GPE_ROPE_KEY) {
    return absl::InvalidArgumentError(
        absl::StrCat("tokens.role ", tokens->role, " is not GPE_ROPE_QUERY or GPE_ROPE_KEY"));
  }
  const bool thd = layout == GPE_ROPE_LAYOUT_THD;
  const int ndim = thd ? 3 : 4;
  RopeCall c;
  c.layout = layout;
  c.role = tokens->role == GPE_ROPE_KEY ? seq::RopeRole::kKey : seq::RopeRole::kQuery;
  absl::StatusOr<TensorView> xv = ViewTensor(x, x_name, ndim, kRopeTypes);
  if (!xv.ok()) return xv.status();
  c.x = std::move(*xv);
  absl::StatusOr<TensorView> ov = ViewTensor(out, out_name, ndim, kRopeTypes);
  if (!ov.ok()) return ov.status();
  c.out = std::move(*ov);
  if (c.out.dtype != c.x.dtype || c.out.shape != c.x.shape) {
    return absl::InvalidArgumentError(absl::StrCat(out_name, " must have ", x_name,
                                                   "'s dtype and shape"));
  }
  const int64_t head_dim = c.x.shape[ndim - 1];
  if (head_dim != rope->impl.options().head_dim) {
    return absl::InvalidArgumentError(absl::StrCat(x_name, "'s last size is ", head_dim,
                                                   "; the encoding's head_dim is ",
                                                   rope->impl.options().head_dim));
  }
  if (c.x.strides[ndim - 1] != 1 || c.out.strides[ndim - 1] != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        x_name, " and ", out_name, " need a contiguous head_dim axis (stride 1)"));
  }
  if (shape_only) {
    // gpe_rope_table_create's `like`, an input whose data is never read: it describes the
    // tensors the table will rotate, which, outputs of those calls, must not overlap
    // themselves (and a broadcast `like` would describe tokens no memory backs).
    if (absl::Status s = CheckNoSelfOverlap(c.out, out_name); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          x_name, " has strides under which distinct indices share an element (e.g. a zero "
          "stride); ", x_name, " is not read, but it describes the tensors the table will "
          "rotate, which may not repeat elements: pass a tensor of their shape and strides"));
    }
  } else if (absl::Status s = CheckNoSelfOverlap(c.out, out_name); !s.ok()) {
    return s;
  }
  if (!gpe::c_api::SameLayout(c.x, c.out) && gpe::c_api::Overlaps(c.x, c.out)) {
    return absl::InvalidArgumentError(absl::StrCat(
        out_name, " overlaps ", x_name, " without being it: pass the same tensor for in "
        "place, or disjoint memory"));
  }
  c.tensor = Describe(c.x, layout);
  if (thd) {
    if (tokens->cu_seqlens == nullptr) {
      return absl::InvalidArgumentError("the thd layout needs tokens.cu_seqlens");
    }
    absl::StatusOr<TensorView> cv = ViewTensor(tokens->cu_seqlens, "cu_seqlens", 1, kInt);
    if (!cv.ok()) return cv.status();
    if (cv->shape[0] < 1) {
      return absl::InvalidArgumentError("cu_seqlens needs batch + 1 >= 1 entries; got 0");
    }
    // Copied before the checks of its entries: its size must be backed by memory.
    if (absl::Status s = CheckMaterialised(*cv, "cu_seqlens"); !s.ok()) return s;
    c.cu = Gather(*cv);
    c.tensor.batch = cv->shape[0] - 1;
    c.tensor.cu_seqlens = c.cu;
  } else if (tokens->cu_seqlens != nullptr) {
    return absl::InvalidArgumentError("tokens.cu_seqlens is only for the thd layout; pass NULL");
  }
  if (tokens->position_ids != nullptr && tokens->offsets != nullptr) {
    return absl::InvalidArgumentError("give tokens.position_ids or tokens.offsets, not both");
  }
  const int64_t n = c.tensor.num_tokens();
  const int64_t axes = rope->impl.options().num_axes;
  if (tokens->position_ids != nullptr) {
    const int pdim = tokens->position_ids->ndim;
    if (pdim != 1 && pdim != 2) {
      return absl::InvalidArgumentError(absl::StrCat(
          "position_ids must be [num_tokens] or [num_axes, num_tokens]; got ", pdim,
          " dimensions"));
    }
    absl::StatusOr<TensorView> pv = ViewTensor(tokens->position_ids, "position_ids", pdim, kInt);
    if (!pv.ok()) return pv.status();
    const int64_t got_axes = pdim == 1 ? 1 : pv->shape[0];
    const int64_t got_n = pv->shape[pdim - 1];
    if (got_axes != axes || got_n != n) {
      return absl::InvalidArgumentError(absl::StrCat(
          "position_ids has ", got_axes, " axes x ", got_n, " tokens; the tensor has ", n,
          " tokens and the encoding ", axes, " axes"));
    }
    c.ids = Gather(*pv);
  } else if (tokens->offsets != nullptr) {
    absl::StatusOr<TensorView> fv = ViewTensor(tokens->offsets, "offsets", 1, kInt);
    if (!fv.ok()) return fv.status();
    if (fv->shape[0] != c.tensor.batch) {
      return absl::InvalidArgumentError(absl::StrCat("offsets has ", fv->shape[0],
                                                     " entries for ", c.tensor.batch,
                                                     " sequences"));
    }
    c.offsets = Gather(*fv);
  }
  return c;
}

// Copies x into out row by row (head_dim contiguous in both), for out-of-place calls
// whose strides differ: the rotation then runs in place on out.
void CopyRows(const TensorView& x, const TensorView& out) {
  const size_t nd = x.shape.size();
  if (nd < 2) return;  // rope tensors have 3 or 4 dimensions
  const int64_t row_bytes = x.shape[nd - 1] * x.element_size();
  int64_t rows = 1;
  for (size_t d = 0; d + 1 < nd; ++d) rows *= x.shape[d];
  std::vector<int64_t> idx(nd - 1, 0);
  for (int64_t r = 0; r < rows; ++r) {
    int64_t xo = 0, oo = 0;
    for (size_t d = 0; d + 1 < nd; ++d) {
      xo += idx[d] * x.strides[d];
      oo += idx[d] * out.strides[d];
    }
    std::memcpy(static_cast<char*>(out.data) + oo * out.element_size(),
                static_cast<const char*>(x.data) + xo * x.element_size(),
                static_cast<size_t>(row_bytes));
    for (size_t d = nd - 1; d-- > 0;) {
      if (++idx[d] < x.shape[d]) break;
      idx[d] = 0;
    }
  }
}

template <class T>
absl::Status RunTyped(const seq::Rope& rope, const RopeCall& c, bool backward,
                      const seq::RopeTableFor<T>* table) {
  const seq::RopePositions pos{c.ids, c.offsets};
  const T* in = c.x.typed<const T>();
  T* out = c.out.typed<T>();
  seq::RopeTensor tensor = c.tensor;
  using C = typename seq::RopeComputeType<T>::type;
  std::optional<seq::RopeTable<C>> own;  // built here when out is written before the rotation
  if (!gpe::c_api::SameStrides(c.x, c.out)) {
    // Everything that can refuse the call runs before out is written (the copy below):
    // both descriptions, and the table (positions, offsets, xPos range) or its fit.
    seq::RopeTensor out_tensor = Describe(c.out, c.layout);
    out_tensor.batch = c.tensor.batch;
    out_tensor.cu_seqlens = c.tensor.cu_seqlens;
    if (absl::Status s = seq::ValidateRopeTensor(tensor); !s.ok()) return s;
    if (absl::Status s = seq::ValidateRopeTensor(out_tensor); !s.ok()) return s;
    if (c.x.numel() == 0) return absl::OkStatus();
    if (table == nullptr) {
      absl::StatusOr<seq::RopeTable<C>> t = rope.MakeTable<C>(tensor, pos, c.role);
      if (!t.ok()) return t.status();
      own = *std::move(t);
      table = &*own;
    }
    if (absl::Status s = rope.CheckApply<T>(*table, out_tensor); !s.ok()) return s;
    CopyRows(c.x, c.out);
    tensor = out_tensor;
    in = out;
  }
  // Nothing to rotate; an empty batch of up to 2^40 sequences is not walked.
  if (c.x.numel() == 0) return absl::OkStatus();
  if (table != nullptr) {
    return backward ? rope.ApplyBackward<T>(*table, tensor, in, out)
                    : rope.Apply<T>(*table, tensor, in, out);
  }
  return backward ? rope.Backward<T>(tensor, pos, in, out, c.role)
                  : rope.Forward<T>(tensor, pos, in, out, c.role);
}

// Dispatches on the dtype; with a table, its element type must suit the dtype.
absl::Status RunAny(const seq::Rope& rope, const RopeCall& c, bool backward,
                    const seq::RopeTable<float>* tf, const seq::RopeTable<double>* td,
                    bool with_table) {
  const bool f64 = c.x.dtype == DType::kFloat64;
  if (with_table && (f64 ? td == nullptr : tf == nullptr)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the table was built for ", f64 ? "float32/bfloat16/float16" : "float64",
        " tensors; this tensor is ", DTypeName(c.x.dtype)));
  }
  switch (c.x.dtype) {
    case DType::kFloat32: return RunTyped<float>(rope, c, backward, tf);
    case DType::kFloat64: return RunTyped<double>(rope, c, backward, td);
    case DType::kBFloat16: return RunTyped<seq::BFloat16>(rope, c, backward, tf);
    case DType::kFloat16: return RunTyped<seq::Float16>(rope, c, backward, tf);
    default: return absl::InternalError("unexpected dtype");
  }
}

// RoPE on tensors on a CUDA device (gpe/rope.h): the call described on the host and
// checked by ViewRopeCall (shapes, strides, positions; no element is read), then handed
// to the CUDA plugin as segments of evenly strided tokens (the whole tensor, or one
// sequence per segment where a padded batch's sequences are not one token stride apart),
// with every token's positions computed here (token t = b * seq + s, or the packed row).
absl::Status RunCuda(const gpe_rope* rope, const gpe_rope_tokens* tokens, const DLTensor* x,
                     DLTensor* out, bool backward) {
  const char* x_name = backward ? "dy" : "x";
  const char* out_name = backward ? "dx" : "out";
  if (rope == nullptr) return absl::InvalidArgumentError("rope is NULL");
  if (tokens == nullptr) return absl::InvalidArgumentError("tokens is NULL");
  if (out == nullptr) return absl::InvalidArgumentError(absl::StrCat(out_name, " is NULL"));
  gpe_rope_tokens tk;
  if (absl::Status s =
          gpe::c_api::CopyVersioned(*tokens, kRopeTokensV1Size, "gpe_rope_tokens", &tk);
      !s.ok()) {
    return s;
  }
  const int32_t device = x->device.device_id;
  if (!gpe::c_api::OnCudaDevice(out) || out->device.device_id != device) {
    return absl::InvalidArgumentError(absl::StrCat(
        x_name, " is on CUDA device ", device, " but ", out_name, " is on DLPack device type ",
        gpe::c_api::DeviceType(out), ", id ", out->device.device_id, ": one device"));
  }
  if (x->dtype.code == kDLFloat && x->dtype.bits == 64) {
    return absl::UnimplementedError(
        "float64 tensors on a CUDA device: RoPE on the GPU takes float32, bfloat16, float16");
  }
  if (rope->impl.options().xpos.enabled) {
    return absl::UnimplementedError("xPos is not available for tensors on a CUDA device yet");
  }
  if (absl::Status s = gpe::c_api::CheckAttentionFactorFits(rope->impl, x->dtype); !s.ok()) {
    return s;
  }
  gpe::c_api::HostIndex keep[3];
  const DLTensor** slots[] = {&tk.position_ids, &tk.offsets, &tk.cu_seqlens};
  const char* names[] = {"position_ids", "offsets", "cu_seqlens"};
  for (int i = 0; i < 3; ++i) {
    if (absl::Status s = gpe::c_api::IndexOnHost(slots[i], names[i], device, tk.cuda_stream,
                                                 &keep[i]);
        !s.ok()) {
      return s;
    }
  }
  const DLTensor xh = gpe::c_api::HostDescription(x, false);
  DLTensor oh = gpe::c_api::HostDescription(out, false);
  absl::StatusOr<RopeCall> view = ViewRopeCall(rope, &tk, &xh, &oh, x_name, out_name);
  if (!view.ok()) return view.status();
  const RopeCall& c = *view;
  if (!gpe::c_api::SameStrides(c.x, c.out)) {
    return absl::UnimplementedError(absl::StrCat(
        "on a CUDA device ", out_name, " is ", x_name, " (in place) or has its strides"));
  }
  const seq::RopeTensor& t = c.tensor;
  if (absl::Status s = seq::ValidateRopeTensor(t); !s.ok()) return s;
  if (c.x.numel() == 0) return absl::OkStatus();
  const int64_t n = t.num_tokens(), axes = rope->impl.options().num_axes;
  const int64_t esize = c.x.element_size();
  const bool thd = t.layout == seq::RopeLayout::kTHD;
  // As the CPU (Rope::MakeTable): several axes need explicit ids, and offset positions
  // must stay within int64.
  if (axes != 1 && c.ids.empty()) {
    return absl::InvalidArgumentError(
        "multi-axis RoPE needs explicit position ids (tokens.position_ids [num_axes, tokens])");
  }
  // Token i's position on `axis`: its id, else its sequence's offset plus its index in it.
  auto position = [&](int64_t axis, int64_t i, int64_t* p) -> absl::Status {
    if (!c.ids.empty()) {
      *p = c.ids[axis * n + i];
      return absl::OkStatus();
    }
    int64_t b = 0, within = 0;
    if (thd) {
      b = std::upper_bound(c.cu.begin(), c.cu.end(), i) - c.cu.begin() - 1;
      within = i - c.cu[b];
    } else {
      b = i / t.seq_len;
      within = i % t.seq_len;
    }
    if (__builtin_add_overflow(c.offsets.empty() ? 0 : c.offsets[b], within, p)) {
      return absl::OutOfRangeError(absl::StrCat("offsets[", b, "] + ", within,
                                                " overflows int64"));
    }
    return absl::OkStatus();
  };
  // Segments of tokens one stride apart, rows in memory order, and for row j of segment g
  // the token (t = b * seq + s, or the packed row) whose position it takes:
  //  - one segment in token order: thd, one sequence, or sequences one token stride apart;
  //  - one segment in memory order s * batch + b: sbhd as PyTorch lays it out (and any
  //    layout whose tokens are batch sequences' strides apart), or one token per sequence;
  //  - else one segment per sequence.
  const int64_t bsz = thd ? 1 : t.batch, len = t.seq_len;
  const bool token_order = thd || bsz <= 1 || t.batch_stride == len * t.seq_stride;
  const bool memory_order =
      !token_order && (len == 1 || t.seq_stride == bsz * t.batch_stride);
  int64_t nseg = 1, per = n, stride = t.seq_stride;
  if (memory_order) {
    stride = t.batch_stride;
  } else if (!token_order) {
    nseg = bsz;
    per = len;
  }
  // A segment of one row: any stride addresses it; the kernel wants a positive one.
  if (per <= 1) stride = std::max<int64_t>(stride, 1);
  auto token = [&](int64_t g, int64_t j) {
    if (memory_order) return (j % bsz) * len + j / bsz;  // row j = s * batch + b
    return g * per + j;
  };
  std::vector<gpe::c_api::cuda_plugin::RopeSegment> segments;
  std::vector<int64_t> positions;
  positions.reserve(static_cast<size_t>(axes * n));
  for (int64_t g = 0; g < nseg; ++g) {
    const int64_t offset = nseg == 1 ? 0 : g * t.batch_stride * esize;
    segments.push_back({static_cast<const char*>(c.x.data) + offset,
                        static_cast<char*>(c.out.data) + offset, per});
    for (int64_t a = 0; a < axes; ++a) {
      for (int64_t j = 0; j < per; ++j) {
        int64_t p = 0;
        if (absl::Status st = position(a, token(g, j), &p); !st.ok()) return st;
        positions.push_back(p);
      }
    }
  }
  gpe::c_api::cuda_plugin::CudaRopeCall call;
  call.device = device;
  call.dtype = c.x.dtype == DType::kFloat32    ? gpe::c_api::cuda_plugin::CudaCallDType::kFloat32
               : c.x.dtype == DType::kBFloat16 ? gpe::c_api::cuda_plugin::CudaCallDType::kBFloat16
                                               : gpe::c_api::cuda_plugin::CudaCallDType::kFloat16;
  call.rope = &rope->impl;
  call.backward = backward;
  call.heads = t.heads;
  call.token_stride = stride;
  call.head_stride = t.head_stride;
  call.segments = segments.data();
  call.num_segments = static_cast<int64_t>(segments.size());
  call.positions = positions.data();
  call.num_positions = static_cast<int64_t>(positions.size());
  call.stream = tk.cuda_stream;
  absl::StatusOr<const gpe::c_api::cuda_plugin::PluginTable*> plugin = gpe::c_api::CudaPlugin();
  if (!plugin.ok()) return plugin.status();
  char message[1024] = "";
  return gpe::c_api::FromPlugin((*plugin)->rope(&call, message, sizeof message), message);
}

gpe_status Run(const gpe_rope* rope, const gpe_rope_tokens* tokens, const DLTensor* x,
               DLTensor* out, bool backward) {
  return Guard([&]() -> absl::Status {
    if (gpe::c_api::OnCudaDevice(x)) return RunCuda(rope, tokens, x, out, backward);
    absl::StatusOr<RopeCall> c = ViewRopeCall(rope, tokens, x, out, backward ? "dy" : "x",
                                              backward ? "dx" : "out");
    if (!c.ok()) return c.status();
    return RunAny(rope->impl, *c, backward, nullptr, nullptr, /*with_table=*/false);
  });
}

gpe_status RunTable(const gpe_rope_table* table, const DLTensor* x, DLTensor* out,
                    bool backward) {
  return Guard([&]() -> absl::Status {
    if (table == nullptr) return absl::InvalidArgumentError("table is NULL");
    gpe_rope_tokens tok = GPE_ROPE_TOKENS_INIT;
    tok.layout = table->layout;
    std::vector<int64_t> cu_shape = {static_cast<int64_t>(table->cu_seqlens.size())};
    DLTensor cu;
    std::memset(&cu, 0, sizeof cu);
    if (table->layout == GPE_ROPE_LAYOUT_THD) {
      cu.data = const_cast<int64_t*>(table->cu_seqlens.data());
      cu.device.device_type = kDLCPU;
      cu.ndim = 1;
      cu.dtype.code = kDLInt;
      cu.dtype.bits = 64;
      cu.dtype.lanes = 1;
      cu.shape = cu_shape.data();
      tok.cu_seqlens = &cu;
    }
    absl::StatusOr<RopeCall> c = ViewRopeCall(&table->rope, &tok, x, out,
                                              backward ? "dy" : "x", backward ? "dx" : "out");
    if (!c.ok()) return c.status();
    return RunAny(table->rope.impl, *c, backward, table->f32 ? &*table->f32 : nullptr,
                  table->f64 ? &*table->f64 : nullptr, /*with_table=*/true);
  });
}

}  // namespace

extern "C" {

gpe_status gpe_rope_create(const gpe_rope_options* options, gpe_rope** out) {
  return Guard([&]() -> absl::Status {
    if (absl::Status s = CheckCreate(out, options, sizeof(gpe_rope_options), "gpe_rope_options");
        !s.ok()) {
      return s;
    }
    absl::StatusOr<seq::Rope> rope = MakeRope(*options);
    if (!rope.ok()) return rope.status();
    *out = new gpe_rope{std::move(*rope)};
    return absl::OkStatus();
  });
}

void gpe_rope_destroy(gpe_rope* rope) { delete rope; }

gpe_status gpe_rope_shape(const gpe_rope* rope, int64_t* head_dim, int64_t* rotary_dim,
                          int64_t* num_axes) {
  return Guard([&]() -> absl::Status {
    if (rope == nullptr) return absl::InvalidArgumentError("rope is NULL");
    const seq::RopeOptions& o = rope->impl.options();
    if (head_dim != nullptr) *head_dim = o.head_dim;
    if (rotary_dim != nullptr) *rotary_dim = o.rotary_dim;
    if (num_axes != nullptr) *num_axes = o.num_axes;
    return absl::OkStatus();
  });
}

gpe_status gpe_rope_frequencies(const gpe_rope* rope, double* thetas, int64_t num_thetas,
                                double* attention_factor) {
  return Guard([&]() -> absl::Status {
    if (rope == nullptr) return absl::InvalidArgumentError("rope is NULL");
    absl::Span<const double> t = rope->impl.thetas();
    if (num_thetas != static_cast<int64_t>(t.size())) {
      return absl::InvalidArgumentError(absl::StrCat("num_thetas is ", num_thetas,
                                                     "; the encoding has rotary_dim / 2 = ",
                                                     t.size(), " planes"));
    }
    if (thetas == nullptr) return absl::InvalidArgumentError("thetas is NULL");
    std::copy(t.begin(), t.end(), thetas);
    if (attention_factor != nullptr) *attention_factor = rope->impl.attention_factor();
    return absl::OkStatus();
  });
}

gpe_status gpe_rope_forward(const gpe_rope* rope, const gpe_rope_tokens* tokens,
                            const DLTensor* x, DLTensor* out) {
  return Run(rope, tokens, x, out, /*backward=*/false);
}

gpe_status gpe_rope_backward(const gpe_rope* rope, const gpe_rope_tokens* tokens,
                             const DLTensor* dy, DLTensor* dx) {
  return Run(rope, tokens, dy, dx, /*backward=*/true);
}

gpe_status gpe_rope_table_create(const gpe_rope* rope, const gpe_rope_tokens* tokens,
                                 const DLTensor* like, gpe_rope_table** out) {
  return Guard([&]() -> absl::Status {
    if (out == nullptr) return absl::InvalidArgumentError("out is NULL");
    *out = nullptr;
    // `like` only describes the shape: viewed as input and output of an in-place call.
    absl::StatusOr<RopeCall> c =
        ViewRopeCall(rope, tokens, like, const_cast<DLTensor*>(like), "like", "like",
                     /*shape_only=*/true);
    if (!c.ok()) return c.status();
    // An empty `like` has no token to tabulate (and up to 2^40 empty sequences to walk).
    if (c->x.numel() == 0) {
      return absl::InvalidArgumentError("like has no elements: a table needs at least one token");
    }
    auto table = std::make_unique<gpe_rope_table>(gpe_rope_table{rope->impl, c->layout, c->cu,
                                                                 std::nullopt, std::nullopt});
    seq::RopeTensor tensor = c->tensor;
    tensor.cu_seqlens = table->cu_seqlens;
    const seq::RopePositions pos{c->ids, c->offsets};
    if (c->x.dtype == DType::kFloat64) {
      absl::StatusOr<seq::RopeTable<double>> t =
          table->rope.impl.MakeTable<double>(tensor, pos, c->role);
      if (!t.ok()) return t.status();
      table->f64.emplace(std::move(*t));
    } else {
      absl::StatusOr<seq::RopeTable<float>> t =
          table->rope.impl.MakeTable<float>(tensor, pos, c->role);
      if (!t.ok()) return t.status();
      table->f32.emplace(std::move(*t));
    }
    *out = table.release();
    return absl::OkStatus();
  });
}

void gpe_rope_table_destroy(gpe_rope_table* table) { delete table; }

gpe_status gpe_rope_table_forward(const gpe_rope_table* table, const DLTensor* x, DLTensor* out) {
  return RunTable(table, x, out, /*backward=*/false);
}

gpe_status gpe_rope_table_backward(const gpe_rope_table* table, const DLTensor* dy,
                                   DLTensor* dx) {
  return RunTable(table, dy, dx, /*backward=*/true);
}

}  // extern "C"

// ---- Published schedule defaults -------------------------------------------------------

extern "C" {

gpe_status gpe_rope_options_use_schedule(int32_t schedule, gpe_rope_options* options) {
  return Guard([&]() -> absl::Status {
    if (options == nullptr) return absl::InvalidArgumentError("options is NULL");
    if (absl::Status s = CheckStructSize(options->struct_size, sizeof(gpe_rope_options),
                                         sizeof(gpe_rope_options), "gpe_rope_options");
        !s.ok()) {
      return s;
    }
    gpe_rope_options& o = *options;
    // The defaults of encodings/sequence/rope.h's option structs, which carry the values
    // the models publish.
    switch (schedule) {
      case GPE_ROPE_DEFAULT:
      case GPE_ROPE_LINEAR:
      case GPE_ROPE_DYNAMIC_NTK:
        o.factor = 1.0;  // no published default: the user's context extension
        o.original_max_position = 4096;
        break;
      case GPE_ROPE_YARN: {
        const seq::YarnOptions y;  // Peng et al.: beta_fast 32, beta_slow 1, truncation
        o.factor = y.factor;
        o.original_max_position = y.original_max_position;
        o.beta_fast = y.beta_fast;
        o.beta_slow = y.beta_slow;
        o.yarn_truncate = y.truncate ? 1 : 0;
        o.has_mscale = 0;
        o.has_attention_factor = 0;
        break;
      }
      case GPE_ROPE_LONGROPE: {
        const seq::LongRopeOptions l;  // Phi-3-128k: L0 = 4096, 131072 positions
        o.original_max_position = l.original_max_position;
        o.max_position = l.max_position;
        o.has_attention_factor = 0;
        break;
      }
      case GPE_ROPE_LLAMA3: {
        const seq::Llama3Options l;  // Llama 3.1: factor 8, low 1, high 4, L0 = 8192
        o.factor = l.factor;
        o.low_freq_factor = l.low_freq_factor;
        o.high_freq_factor = l.high_freq_factor;
        o.original_max_position = l.original_max_position;
        break;
      }
      default:
        return absl::InvalidArgumentError(
            absl::StrCat("schedule ", schedule, " is not one of GPE_ROPE_* (0..5)"));
    }
    o.schedule = schedule;
    return absl::OkStatus();
  });
}

}  // extern "C"
