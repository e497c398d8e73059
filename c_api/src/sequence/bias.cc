// The C ABI's additive attention biases (gpe/bias.h): option
// structs and DLPack views validated here, then handed to encodings/sequence/bias.h.
// Every entry point runs under Guard.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "c_api/include/gpe/bias.h"
#include "c_api/src/common/checks.h"
#include "c_api/src/common/error.h"
#include "c_api/src/common/tensor_view.h"
#include "c_api/src/sequence/bias_handle.h"
#include "encodings/sequence/bias.h"
#include "encodings/sequence/grape_a.h"

using gpe::c_api::CheckCreate;
using gpe::c_api::CheckDisjoint;
using gpe::c_api::CheckFinite;
using gpe::c_api::CheckNoSelfOverlap;
using gpe::c_api::ContiguousPositions;
using gpe::c_api::DType;
using gpe::c_api::Guard;
using gpe::c_api::NamedView;
using gpe::c_api::RowsOf;
using gpe::c_api::ScatterRows;
using gpe::c_api::TensorView;
using gpe::c_api::ViewTensor;
using gpe::c_api::kF64;
using gpe::c_api::kFloat;
using gpe::c_api::kInt;
namespace seq = gpe::encodings::sequence;

namespace {

// n = a * b * c without int64 overflow, each factor >= 0, and n <= 2^40 (a parameter
// array the library copies).
absl::StatusOr<int64_t> Count(const char* what, int64_t a, int64_t b, int64_t c = 1) {
  const int64_t limit = int64_t{1} << 40;
  if (a < 0 || b < 0 || c < 0) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": sizes must be >= 0"));
  }
  // Multiply step by step, stopping past the limit: three int64 factors can overflow even
  // __int128 (found by c_api/fuzz/attention_fuzzer.cc).
  if (a == 0 || b == 0 || c == 0) return int64_t{0};
  __int128 n = a;
  for (const int64_t f : {b, c}) {
    n *= f;  // n <= 2^40 and f < 2^63: no overflow
    if (n > limit) return absl::OutOfRangeError(absl::StrCat(what, " has too many entries"));
  }
  if (n > limit) return absl::OutOfRangeError(absl::StrCat(what, " has too many entries"));
  return static_cast<int64_t>(n);
}

// `n` doubles from p (NULL only when n == 0), finite, copied.
absl::StatusOr<std::vector<double>> Params(const double* p, int64_t n, const char* name) {
  if (n > 0 && p == nullptr) return absl::InvalidArgumentError(absl::StrCat(name, " is NULL"));
  if (absl::Status s = CheckFinite(p, n, name); !s.ok()) return s;
  return std::vector<double>(p, p + n);
}

bool Compact(const TensorView& v) {
  int64_t s = 1;
  for (size_t d = v.shape.size(); d-- > 0;) {
    if (v.shape[d] > 1 && v.strides[d] != s) return false;
    s *= v.shape[d];
  }
  return true;
}

// A float64 parameter-gradient view as a contiguous row-major span: the view's memory
// when compact, else a gathered copy that Flush writes back.
class GradBuffer {
 public:
  explicit GradBuffer(const TensorView* v) : v_(v) {
    if (v_ == nullptr || Compact(*v_)) return;
    store_.resize(static_cast<size_t>(v_->numel()));
    Walk([&](size_t n, double& e) { store_[n] = e; });
  }
  absl::Span<double> span() {
    if (v_ == nullptr) return {};
    if (!store_.empty() || v_->numel() == 0) return absl::MakeSpan(store_);
    return absl::MakeSpan(v_->typed<double>(), static_cast<size_t>(v_->numel()));
  }
  void Flush() {
    if (v_ == nullptr || store_.empty()) return;
    Walk([&](size_t n, double& e) { e = store_[n]; });
  }

 private:
  template <class F>
  void Walk(F f) {
    const size_t nd = v_->shape.size();
    std::vector<int64_t> idx(nd, 0);
    double* base = v_->typed<double>();
    for (size_t n = 0; n < store_.size(); ++n) {
      int64_t off = 0;
      for (size_t d = 0; d < nd; ++d) off += idx[d] * v_->strides[d];
      f(n, base[off]);
      for (size_t d = nd; d-- > 0;) {
        if (++idx[d] < v_->shape[d]) break;
        idx[d] = 0;
      }
    }
  }
  const TensorView* v_;
  std::vector<double> store_;
};

// A float64 gradient of exactly `shape`.
absl::StatusOr<TensorView> ViewGrad(DLTensor* t, const char* name,
                                    const std::vector<int64_t>& shape) {
  absl::StatusOr<TensorView> v = ViewTensor(t, name, static_cast<int>(shape.size()), kF64);
  if (!v.ok()) return v.status();
  if (v->shape != shape) {
    std::string want;
    for (size_t i = 0; i < shape.size(); ++i) absl::StrAppend(&want, i ? ", " : "", shape[i]);
    std::string got;
    for (size_t i = 0; i < v->shape.size(); ++i) absl::StrAppend(&got, i ? ", " : "", v->shape[i]);
    return absl::InvalidArgumentError(
        absl::StrCat(name, " must be float64 [", want, "]; got [", got, "]"));
  }
  if (absl::Status s = CheckNoSelfOverlap(*v, name); !s.ok()) return s;
  return v;
}

struct TileViews {
  TensorView qp, kp, tile;
  std::vector<int64_t> qs, ks;
  absl::Span<const int64_t> q, k;
};

absl::StatusOr<TileViews> ViewTile(const gpe_bias* bias, int64_t head, const DLTensor* qp,
                                   const DLTensor* kp, const DLTensor* tile,
                                   const char* tile_name) {
  if (bias == nullptr) return absl::InvalidArgumentError("bias is NULL");
  const int64_t heads = bias->base().num_heads();
  if (head < 0 || head >= heads) {
    return absl::InvalidArgumentError(
        absl::StrCat("head ", head, " is outside [0, ", heads, ")"));
  }
  TileViews v;
  absl::StatusOr<TensorView> t = ViewTensor(qp, "q_positions", 1, kInt);
  if (!t.ok()) return t.status();
  v.qp = std::move(*t);
  t = ViewTensor(kp, "k_positions", 1, kInt);
  if (!t.ok()) return t.status();
  v.kp = std::move(*t);
  t = ViewTensor(tile, tile_name, 2, kFloat);
  if (!t.ok()) return t.status();
  v.tile = std::move(*t);
  if (v.tile.shape[0] != v.qp.shape[0] || v.tile.shape[1] != v.kp.shape[0]) {
    return absl::InvalidArgumentError(absl::StrCat(
        tile_name, " must have shape [", v.qp.shape[0], ", ", v.kp.shape[0],
        "] (q_positions, k_positions); got [", v.tile.shape[0], ", ", v.tile.shape[1], "]"));
  }
  v.q = ContiguousPositions(v.qp, &v.qs);
  v.k = ContiguousPositions(v.kp, &v.ks);
  return v;
}

template <class T>
absl::Status FillTyped(const seq::AdditiveBias& b, int64_t head, const TileViews& v) {
  if (v.tile.numel() == 0) return b.FillTile(head, v.q, v.k, static_cast<T*>(nullptr), v.kp.shape[0]);
  std::vector<T> buf;
  int64_t ld = 0;
  T* rows = RowsOf<T>(v.tile, /*gather=*/false, &buf, &ld);
  if (absl::Status s = b.FillTile(head, v.q, v.k, rows, ld); !s.ok()) return s;
  ScatterRows<T>(rows, v.tile);
  return absl::OkStatus();
}

template <class T>
absl::Status AccumulateTyped(const gpe_bias& bias, int64_t head, const TileViews& v,
                             absl::Span<double> ga, absl::Span<double> gb) {
  std::vector<T> buf;
  int64_t ld = v.kp.shape[0];
  const T* g = v.tile.numel() == 0 ? nullptr : RowsOf<T>(v.tile, /*gather=*/true, &buf, &ld);
  switch (bias.kind) {
    case GPE_BIAS_ALIBI: return bias.alibi->AccumulateSlopeGradient<T>(head, v.q, v.k, g, ld, ga);
    case GPE_BIAS_T5: return bias.t5->AccumulateTableGradient<T>(head, v.q, v.k, g, ld, ga);
    case GPE_BIAS_FOX: return bias.fox->AccumulatePrefixGradient<T>(head, v.q, v.k, g, ld, ga);
    case GPE_BIAS_GRAPE_A:
      return bias.grape_a->gated()
                 ? bias.grape_a->AccumulatePrefixGradient<T>(head, v.q, v.k, g, ld, ga)
                 : bias.grape_a->AccumulateSlopeGradient<T>(head, v.q, v.k, g, ld, ga);
    default: return bias.grape_ap->AccumulateGradient<T>(head, v.q, v.k, g, ld, ga, gb);
  }
}

}  // namespace

extern "C" {

gpe_status gpe_bias_create_alibi(const gpe_alibi_options* options, gpe_bias** out) {
  return Guard([&]() -> absl::Status {
    if (absl::Status s = CheckCreate(out, options, sizeof(gpe_alibi_options), "gpe_alibi_options");
        !s.ok()) {
      return s;
    }
    if (options->form != GPE_ALIBI_CAUSAL && options->form != GPE_ALIBI_SYMMETRIC) {
      return absl::InvalidArgumentError(
          absl::StrCat("form ", options->form, " is not GPE_ALIBI_CAUSAL or GPE_ALIBI_SYMMETRIC"));
    }
    if (options->num_heads < 1 || options->num_heads > (int64_t{1} << 20)) {
      return absl::InvalidArgumentError(
          absl::StrCat("num_heads must be in [1, 2^20]; got ", options->num_heads));
    }
    const seq::AlibiForm form =
        options->form == GPE_ALIBI_CAUSAL ? seq::AlibiForm::kCausal : seq::AlibiForm::kSymmetric;
    absl::StatusOr<seq::AlibiBias> b = absl::InternalError("unset");
    if (options->slopes == nullptr) {
      b = seq::AlibiBias::CreateStandard(options->num_heads, form);
    } else {
      absl::StatusOr<std::vector<double>> slopes =
          Params(options->slopes, options->num_heads, "slopes");
      if (!slopes.ok()) return slopes.status();
      b = seq::AlibiBias::Create(std::move(*slopes), form);
    }
    if (!b.ok()) return b.status();
    auto* h = new gpe_bias;
    h->kind = GPE_BIAS_ALIBI;
    h->alibi.emplace(std::move(*b));
    *out = h;
    return absl::OkStatus();
  });
}

gpe_status gpe_bias_create_t5(const gpe_t5_options* options, gpe_bias** out) {
  return Guard([&]() -> absl::Status {
    if (absl::Status s = CheckCreate(out, options, sizeof(gpe_t5_options), "gpe_t5_options");
        !s.ok()) {
      return s;
    }
    if (options->num_heads < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("num_heads must be >= 1; got ", options->num_heads));
    }
    seq::T5BucketConfig config;
    config.num_buckets = options->num_buckets;
    config.max_distance = options->max_distance;
    config.bidirectional = options->bidirectional != 0;
    if (absl::Status s = seq::ValidateT5BucketConfig(config); !s.ok()) return s;
    absl::StatusOr<int64_t> n = Count("table", options->num_buckets, options->num_heads);
    if (!n.ok()) return n.status();
    absl::StatusOr<std::vector<double>> table = Params(options->table, *n, "table");
    if (!table.ok()) return table.status();
    absl::StatusOr<seq::T5RelativeBias> b =
        seq::T5RelativeBias::Create(std::move(*table), options->num_heads, config);
    if (!b.ok()) return b.status();
    auto* h = new gpe_bias;
    h->kind = GPE_BIAS_T5;
    h->t5.emplace(std::move(*b));
    *out = h;
    return absl::OkStatus();
  });
}

gpe_status gpe_bias_create_fox(const gpe_fox_options* options, gpe_bias** out) {
  return Guard([&]() -> absl::Status {
    if (absl::Status s = CheckCreate(out, options, sizeof(gpe_fox_options), "gpe_fox_options");
        !s.ok()) {
      return s;
    }
    if (options->num_heads < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("num_heads must be >= 1; got ", options->num_heads));
    }
    absl::StatusOr<int64_t> n = Count("gate_logits", options->length, options->num_heads);
    if (!n.ok()) return n.status();
    absl::StatusOr<std::vector<double>> logits = Params(options->gate_logits, *n, "gate_logits");
    if (!logits.ok()) return logits.status();
    absl::StatusOr<seq::FoxBias> b = seq::FoxBias::Create(*logits, options->length,
                                                          options->num_heads,
                                                          options->first_position);
    if (!b.ok()) return b.status();
    auto* h = new gpe_bias;
    h->kind = GPE_BIAS_FOX;
    h->fox.emplace(std::move(*b));
    *out = h;
    return absl::OkStatus();
  });
}

gpe_status gpe_bias_create_grape_ap(const gpe_grape_ap_options* options, gpe_bias** out) {
  return Guard([&]() -> absl::Status {
    if (absl::Status s =
            CheckCreate(out, options, sizeof(gpe_grape_ap_options), "gpe_grape_ap_options");
        !s.ok()) {
      return s;
    }
    if (options->num_heads < 1 || options->rank < 1) {
      return absl::InvalidArgumentError(absl::StrCat("num_heads and rank must be >= 1; got ",
                                                     options->num_heads, " and ",
                                                     options->rank));
    }
    absl::StatusOr<int64_t> n = Count("w", options->length, options->num_heads, options->rank);
    if (!n.ok()) return n.status();
    absl::StatusOr<std::vector<double>> w = Params(options->w, *n, "w");
    if (!w.ok()) return w.status();
    absl::StatusOr<std::vector<double>> u = Params(options->u, *n, "u");
    if (!u.ok()) return u.status();
    absl::StatusOr<seq::GrapeApBias> b =
        seq::GrapeApBias::Create(std::move(*w), std::move(*u), options->length,
                                 options->num_heads, options->rank, options->first_position);
    if (!b.ok()) return b.status();
    auto* h = new gpe_bias;
    h->kind = GPE_BIAS_GRAPE_AP;
    h->grape_ap.emplace(std::move(*b));
    *out = h;
    return absl::OkStatus();
  });
}

void gpe_bias_destroy(gpe_bias* bias) { delete bias; }

gpe_status gpe_bias_info(const gpe_bias* bias, int32_t* kind, int64_t* num_heads,
                         int32_t* causal) {
  return Guard([&]() -> absl::Status {
    if (bias == nullptr) return absl::InvalidArgumentError("bias is NULL");
    if (kind != nullptr) *kind = bias->kind;
    if (num_heads != nullptr) *num_heads = bias->base().num_heads();
    if (causal != nullptr) *causal = bias->base().causal() ? 1 : 0;
    return absl::OkStatus();
  });
}

gpe_status gpe_bias_alibi_slopes(const gpe_bias* bias, double* slopes, int64_t num_slopes) {
  return Guard([&]() -> absl::Status {
    if (bias == nullptr) return absl::InvalidArgumentError("bias is NULL");
    const bool grape_a = bias->kind == GPE_BIAS_GRAPE_A && !bias->grape_a->gated();
    if (bias->kind != GPE_BIAS_ALIBI && !grape_a) {
      return absl::InvalidArgumentError(
          "gpe_bias_alibi_slopes needs an ALiBi or ALiBi-like (ungated) GRAPE-A bias");
    }
    absl::Span<const double> s = grape_a ? bias->grape_a->slopes() : bias->alibi->slopes();
    if (num_slopes != static_cast<int64_t>(s.size())) {
      return absl::InvalidArgumentError(absl::StrCat("num_slopes is ", num_slopes,
                                                     "; the bias has ", s.size(), " heads"));
    }
    if (slopes == nullptr) return absl::InvalidArgumentError("slopes is NULL");
    std::copy(s.begin(), s.end(), slopes);
    return absl::OkStatus();
  });
}

gpe_status gpe_bias_fill_tile(const gpe_bias* bias, int64_t head, const DLTensor* q_positions,
                              const DLTensor* k_positions, DLTensor* out) {
  return Guard([&]() -> absl::Status {
    absl::StatusOr<TileViews> v = ViewTile(bias, head, q_positions, k_positions, out, "out");
    if (!v.ok()) return v.status();
    if (absl::Status s = CheckNoSelfOverlap(v->tile, "out"); !s.ok()) return s;
    const NamedView views[] = {{&v->tile, "out"}, {&v->qp, "q_positions"}, {&v->kp, "k_positions"}};
    for (size_t i = 1; i < 3; ++i) {
      const NamedView pair[] = {views[0], views[i]};
      if (absl::Status s = CheckDisjoint(pair); !s.ok()) return s;
    }
    return v->tile.dtype == DType::kFloat32 ? FillTyped<float>(bias->base(), head, *v)
                                            : FillTyped<double>(bias->base(), head, *v);
  });
}

gpe_status gpe_bias_accumulate_gradient(const gpe_bias* bias, int64_t head,
                                        const DLTensor* q_positions,
                                        const DLTensor* k_positions, const DLTensor* grad_tile,
                                        DLTensor* grad_a, DLTensor* grad_b) {
  return Guard([&]() -> absl::Status {
    absl::StatusOr<TileViews> v =
        ViewTile(bias, head, q_positions, k_positions, grad_tile, "grad_tile");
    if (!v.ok()) return v.status();
    const int64_t heads = bias->base().num_heads();
    std::vector<int64_t> shape;
    switch (bias->kind) {
      case GPE_BIAS_ALIBI: shape = {heads}; break;
      case GPE_BIAS_T5: shape = {bias->t5->config().num_buckets, heads}; break;
      case GPE_BIAS_FOX: shape = {bias->fox->length(), heads}; break;
      case GPE_BIAS_GRAPE_A:
        if (bias->grape_a->gated()) {
          shape = {bias->grape_a->fox()->length(), heads};
        } else {
          shape = {heads};
        }
        break;
      default: shape = {bias->grape_ap->length(), heads, bias->grape_ap->rank()}; break;
    }
    if (grad_a == nullptr) return absl::InvalidArgumentError("grad_a is NULL");
    absl::StatusOr<TensorView> ga = ViewGrad(grad_a, "grad_a", shape);
    if (!ga.ok()) return ga.status();
    std::optional<TensorView> gb;
    if (bias->kind == GPE_BIAS_GRAPE_AP) {
      if (grad_b == nullptr) return absl::InvalidArgumentError("GRAPE-AP needs grad_b (dL/du)");
      absl::StatusOr<TensorView> g = ViewGrad(grad_b, "grad_b", shape);
      if (!g.ok()) return g.status();
      gb = std::move(*g);
    } else if (grad_b != nullptr) {
      return absl::InvalidArgumentError("grad_b is only for GRAPE-AP; pass NULL");
    }
    const NamedView views[] = {{&v->qp, "q_positions"},
                               {&v->kp, "k_positions"},
                               {&v->tile, "grad_tile"},
                               {&*ga, "grad_a"},
                               {gb ? &*gb : nullptr, "grad_b"}};
    for (size_t i = 3; i < 5; ++i) {
      for (size_t j = 0; j < i; ++j) {
        const NamedView pair[] = {views[j], views[i]};
        if (absl::Status s = CheckDisjoint(pair); !s.ok()) return s;
      }
    }
    GradBuffer ba(&*ga), bb(gb ? &*gb : nullptr);
    absl::Status s = v->tile.dtype == DType::kFloat32
                         ? AccumulateTyped<float>(*bias, head, *v, ba.span(), bb.span())
                         : AccumulateTyped<double>(*bias, head, *v, ba.span(), bb.span());
    if (!s.ok()) return s;
    ba.Flush();
    bb.Flush();
    return absl::OkStatus();
  });
}

gpe_status gpe_bias_fox_logit_gradient(const gpe_bias* bias, const DLTensor* grad_prefix,
                                       DLTensor* grad_logits) {
  return Guard([&]() -> absl::Status {
    if (bias == nullptr) return absl::InvalidArgumentError("bias is NULL");
    const bool gated_grape_a = bias->kind == GPE_BIAS_GRAPE_A && bias->grape_a->gated();
    if (bias->kind != GPE_BIAS_FOX && !gated_grape_a) {
      return absl::InvalidArgumentError(
          "gpe_bias_fox_logit_gradient needs a FoX or a gated GRAPE-A bias");
    }
    const seq::FoxBias& fox = gated_grape_a ? *bias->grape_a->fox() : *bias->fox;
    const std::vector<int64_t> shape = {fox.length(), fox.num_heads()};
    absl::StatusOr<TensorView> gp = ViewTensor(grad_prefix, "grad_prefix", 2, kF64);
    if (!gp.ok()) return gp.status();
    if (gp->shape != shape) {
      return absl::InvalidArgumentError(absl::StrCat("grad_prefix must be float64 [", shape[0],
                                                     ", ", shape[1], "] (length, num_heads)"));
    }
    if (grad_logits == nullptr) return absl::InvalidArgumentError("grad_logits is NULL");
    absl::StatusOr<TensorView> gl = ViewGrad(grad_logits, "grad_logits", shape);
    if (!gl.ok()) return gl.status();
    const NamedView pair[] = {{&*gp, "grad_prefix"}, {&*gl, "grad_logits"}};
    if (absl::Status s = CheckDisjoint(pair); !s.ok()) return s;
    std::vector<double> prefix(static_cast<size_t>(gp->numel()));
    const double* src = gp->typed<const double>();
    for (int64_t t = 0; t < shape[0]; ++t) {
      for (int64_t h = 0; h < shape[1]; ++h) {
        prefix[t * shape[1] + h] = src[t * gp->strides[0] + h * gp->strides[1]];
      }
    }
    absl::StatusOr<std::vector<double>> g = fox.LogitGradient(prefix);
    if (!g.ok()) return g.status();
    double* dst = gl->typed<double>();
    for (int64_t t = 0; t < shape[0]; ++t) {
      for (int64_t h = 0; h < shape[1]; ++h) {
        dst[t * gl->strides[0] + h * gl->strides[1]] = (*g)[t * shape[1] + h];
      }
    }
    return absl::OkStatus();
  });
}

// ---- GRAPE-A -------------------------------------------------------------------------

gpe_status gpe_bias_create_grape_a(const gpe_grape_a_options* options, gpe_bias** out) {
  return Guard([&]() -> absl::Status {
    if (absl::Status s =
            CheckCreate(out, options, sizeof(gpe_grape_a_options), "gpe_grape_a_options");
        !s.ok()) {
      return s;
    }
    if (options->path != GPE_GRAPE_A_CLOSED_FORM && options->path != GPE_GRAPE_A_LIFTED) {
      return absl::InvalidArgumentError(absl::StrCat(
          "path ", options->path, " is not GPE_GRAPE_A_CLOSED_FORM or GPE_GRAPE_A_LIFTED"));
    }
    if (options->num_heads < 1 || options->num_heads > (int64_t{1} << 20)) {
      return absl::InvalidArgumentError(
          absl::StrCat("num_heads must be in [1, 2^20]; got ", options->num_heads));
    }
    if (options->head_dim < 1 || options->head_dim > gpe::c_api::kMaxDim) {
      return absl::InvalidArgumentError(absl::StrCat(
          "head_dim must be in [1, ", gpe::c_api::kMaxDim, "]; got ", options->head_dim));
    }
    const seq::GrapeAPath path = options->path == GPE_GRAPE_A_LIFTED
                                     ? seq::GrapeAPath::kLifted
                                     : seq::GrapeAPath::kClosedForm;
    absl::StatusOr<seq::GrapeABias> b = absl::InternalError("unset");
    if (options->gated != 0) {
      if (options->slopes != nullptr) {
        return absl::InvalidArgumentError(
            "slopes must be NULL for the gated form (its clock is the gates' prefix sums)");
      }
      absl::StatusOr<int64_t> n = Count("gate_logits", options->length, options->num_heads);
      if (!n.ok()) return n.status();
      absl::StatusOr<std::vector<double>> logits =
          Params(options->gate_logits, *n, "gate_logits");
      if (!logits.ok()) return logits.status();
      absl::StatusOr<seq::FoxBias> fox = seq::FoxBias::Create(
          *logits, options->length, options->num_heads, options->first_position);
      if (!fox.ok()) return fox.status();
      b = seq::GrapeABias::CreateGated(*std::move(fox), options->head_dim, path);
    } else {
      if (options->gate_logits != nullptr || options->length != 0) {
        return absl::InvalidArgumentError(
            "gate_logits and length are for the gated form: set gated = 1, or pass NULL and 0");
      }
      std::vector<double> slopes;
      if (options->slopes == nullptr) {
        absl::StatusOr<std::vector<double>> standard = seq::AlibiSlopes(options->num_heads);
        if (!standard.ok()) return standard.status();
        slopes = *std::move(standard);
      } else {
        absl::StatusOr<std::vector<double>> given =
            Params(options->slopes, options->num_heads, "slopes");
        if (!given.ok()) return given.status();
        slopes = *std::move(given);
      }
      b = seq::GrapeABias::Create(std::move(slopes), options->head_dim, path);
    }
    if (!b.ok()) return b.status();
    auto* h = new gpe_bias;
    h->kind = GPE_BIAS_GRAPE_A;
    h->grape_a.emplace(std::move(*b));
    *out = h;
    return absl::OkStatus();
  });
}

gpe_status gpe_bias_grape_a_lift(const gpe_bias* bias, int64_t head, int32_t role,
                                 const DLTensor* positions, const DLTensor* x, DLTensor* out) {
  return Guard([&]() -> absl::Status {
    if (bias == nullptr) return absl::InvalidArgumentError("bias is NULL");
    if (bias->kind != GPE_BIAS_GRAPE_A) {
      return absl::InvalidArgumentError("gpe_bias_grape_a_lift needs a GRAPE-A bias");
    }
    const seq::GrapeABias& g = *bias->grape_a;
    if (head < 0 || head >= g.num_heads()) {
      return absl::InvalidArgumentError(
          absl::StrCat("head ", head, " is outside [0, ", g.num_heads(), ")"));
    }
    if (role != GPE_GRAPE_A_QUERY && role != GPE_GRAPE_A_KEY) {
      return absl::InvalidArgumentError(
          absl::StrCat("role ", role, " is not GPE_GRAPE_A_QUERY or GPE_GRAPE_A_KEY"));
    }
    absl::StatusOr<TensorView> p = ViewTensor(positions, "positions", 1, kInt);
    if (!p.ok()) return p.status();
    absl::StatusOr<TensorView> xv = ViewTensor(x, "x", 2, kFloat);
    if (!xv.ok()) return xv.status();
    absl::StatusOr<TensorView> ov = ViewTensor(out, "out", 2, kFloat);
    if (!ov.ok()) return ov.status();
    const int64_t n = p->shape[0], d = g.head_dim();
    if (xv->shape[0] != n || xv->shape[1] != d) {
      return absl::InvalidArgumentError(absl::StrCat("x must be [", n, ", ", d,
                                                     "] (positions, head_dim); got [",
                                                     xv->shape[0], ", ", xv->shape[1], "]"));
    }
    if (ov->dtype != xv->dtype || ov->shape[0] != n || ov->shape[1] != d + 2) {
      return absl::InvalidArgumentError(absl::StrCat(
          "out must have x's dtype and shape [", n, ", ", d + 2, "] (head_dim + 2); got [",
          ov->shape[0], ", ", ov->shape[1], "]"));
    }
    if (absl::Status s = CheckNoSelfOverlap(*ov, "out"); !s.ok()) return s;
    const NamedView views[] = {{&*ov, "out"}, {&*xv, "x"}, {&*p, "positions"}};
    for (size_t i = 1; i < 3; ++i) {
      const NamedView pair[] = {views[0], views[i]};
      if (absl::Status s = CheckDisjoint(pair); !s.ok()) return s;
    }
    std::vector<int64_t> ps;
    const absl::Span<const int64_t> pos = ContiguousPositions(*p, &ps);
    auto run = [&](auto tag) -> absl::Status {
      using T = decltype(tag);
      std::vector<T> xbuf, obuf;
      int64_t xs = d, os = d + 2;
      const T* xr = n == 0 ? nullptr : RowsOf<T>(*xv, /*gather=*/true, &xbuf, &xs);
      T* orow = n == 0 ? nullptr : RowsOf<T>(*ov, /*gather=*/false, &obuf, &os);
      absl::Status s = role == GPE_GRAPE_A_QUERY ? g.LiftQueries<T>(head, pos, xr, xs, orow, os)
                                                 : g.LiftKeys<T>(head, pos, xr, xs, orow, os);
      if (!s.ok()) return s;
      if (n > 0) ScatterRows<T>(orow, *ov);
      return absl::OkStatus();
    };
    return xv->dtype == DType::kFloat32 ? run(float{}) : run(double{});
  });
}

}  // extern "C"
