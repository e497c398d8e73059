// The C ABI's GRAPE-M products of rank-2 generators (gpe/sequence.h), validated here and
// handed to encodings/sequence/grape_m.h. Every entry point runs under Guard.
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "c_api/include/gpe/sequence.h"
#include "c_api/src/common/checks.h"
#include "c_api/src/common/error.h"
#include "c_api/src/common/tensor_view.h"
#include "c_api/src/sequence/batch.h"
#include "c_api/src/sequence/handles.h"
#include "encodings/sequence/grape_m.h"

using gpe::c_api::ApplyAny;
using gpe::c_api::ApplyViews;
using gpe::c_api::BackwardTyped;
using gpe::c_api::BackwardViews;
using gpe::c_api::CheckCreate;
using gpe::c_api::CheckDim;
using gpe::c_api::CheckDisjoint;
using gpe::c_api::CheckFinite;
using gpe::c_api::DType;
using gpe::c_api::Guard;
using gpe::c_api::NamedView;
using gpe::c_api::TensorView;
using gpe::c_api::ViewApply;
using gpe::c_api::ViewBackward;
using gpe::c_api::ViewParamGrad;
using gpe::c_api::ViewSquare;
using gpe::c_api::WriteMatrix;
namespace seq = gpe::encodings::sequence;

extern "C" {

// ---- GRAPE-M ---------------------------------------------------------------------------

gpe_status gpe_grape_m_create(const gpe_grape_m_options* options, gpe_grape_m** out) {
  return Guard([&]() -> absl::Status {
    if (absl::Status s =
            CheckCreate(out, options, offsetof(gpe_grape_m_options, omega) + sizeof(void*),
                        "gpe_grape_m_options");
        !s.ok()) {
      return s;
    }
    const gpe_grape_m_options& o = *options;
    if (absl::Status s = CheckDim(o.dim, "dim"); !s.ok()) return s;
    if (o.num_generators < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("num_generators must be >= 1; got ", o.num_generators));
    }
    // m * dim parameters each for a and b: bounded like a dense dim x dim matrix.
    if (o.num_generators > gpe::c_api::kMaxDim) {
      return absl::OutOfRangeError(absl::StrCat("num_generators is ", o.num_generators,
                                                "; at most ", gpe::c_api::kMaxDim,
                                                " is supported"));
    }
    if (o.a == nullptr) return absl::InvalidArgumentError("a is NULL");
    if (o.b == nullptr) return absl::InvalidArgumentError("b is NULL");
    if (o.omega == nullptr) return absl::InvalidArgumentError("omega is NULL");
    const int64_t m = o.num_generators, d = o.dim;
    if (absl::Status s = CheckFinite(o.a, m * d, "a"); !s.ok()) return s;
    if (absl::Status s = CheckFinite(o.b, m * d, "b"); !s.ok()) return s;
    if (absl::Status s = CheckFinite(o.omega, m, "omega"); !s.ok()) return s;
    std::vector<seq::Rank2Generator> gens(static_cast<size_t>(m));
    for (int64_t k = 0; k < m; ++k) {
      gens[k].a.assign(o.a + k * d, o.a + (k + 1) * d);
      gens[k].b.assign(o.b + k * d, o.b + (k + 1) * d);
      gens[k].omega = o.omega[k];
    }
    absl::StatusOr<seq::GrapeMProduct> g = seq::GrapeMProduct::Create(std::move(gens));
    if (!g.ok()) return g.status();
    *out = new gpe_grape_m{std::move(*g)};
    return absl::OkStatus();
  });
}

void gpe_grape_m_destroy(gpe_grape_m* grape) { delete grape; }

gpe_status gpe_grape_m_shape(const gpe_grape_m* grape, int64_t* dim, int64_t* num_generators) {
  return Guard([&]() -> absl::Status {
    if (grape == nullptr) return absl::InvalidArgumentError("grape is NULL");
    if (dim == nullptr) return absl::InvalidArgumentError("dim is NULL");
    if (num_generators == nullptr) return absl::InvalidArgumentError("num_generators is NULL");
    *dim = grape->impl.dim();
    *num_generators = grape->impl.num_generators();
    return absl::OkStatus();
  });
}

gpe_status gpe_grape_m_apply(const gpe_grape_m* grape, const DLTensor* positions,
                             const DLTensor* x, DLTensor* out) {
  return Guard([&]() -> absl::Status {
    if (grape == nullptr) return absl::InvalidArgumentError("grape is NULL");
    absl::StatusOr<ApplyViews> v = ViewApply(positions, x, out, grape->impl.dim());
    if (!v.ok()) return v.status();
    return ApplyAny(grape->impl, *v);
  });
}

gpe_status gpe_grape_m_matrix(const gpe_grape_m* grape, int64_t position, DLTensor* out) {
  return Guard([&]() -> absl::Status {
    if (grape == nullptr) return absl::InvalidArgumentError("grape is NULL");
    absl::StatusOr<TensorView> ov = ViewSquare(out, grape->impl.dim());
    if (!ov.ok()) return ov.status();
    WriteMatrix(grape->impl.Matrix(position), *ov);
    return absl::OkStatus();
  });
}

gpe_status gpe_grape_m_backward(const gpe_grape_m* grape, const DLTensor* positions,
                                const DLTensor* x, const DLTensor* grad_out, DLTensor* grad_x,
                                DLTensor* grad_a, DLTensor* grad_b, DLTensor* grad_omega) {
  return Guard([&]() -> absl::Status {
    if (grape == nullptr) return absl::InvalidArgumentError("grape is NULL");
    const int64_t d = grape->impl.dim(), m = grape->impl.num_generators();
    absl::StatusOr<BackwardViews> v = ViewBackward(positions, x, grad_out, grad_x, d);
    if (!v.ok()) return v.status();
    TensorView ga, gb, gw;
    bool has_a = false, has_b = false, has_w = false;
    if (absl::Status s = ViewParamGrad(grad_a, "grad_a", {m, d}, &ga, &has_a); !s.ok()) return s;
    if (absl::Status s = ViewParamGrad(grad_b, "grad_b", {m, d}, &gb, &has_b); !s.ok()) return s;
    if (absl::Status s = ViewParamGrad(grad_omega, "grad_omega", {m}, &gw, &has_w); !s.ok()) {
      return s;
    }
    const NamedView views[] = {{&v->p, "positions"},
                               {&v->x, "x"},
                               {&v->grad_out, "grad_out"},
                               {has_a ? &ga : nullptr, "grad_a"},
                               {has_b ? &gb : nullptr, "grad_b"},
                               {has_w ? &gw : nullptr, "grad_omega"},
                               {v->has_grad_x ? &v->grad_x : nullptr, "grad_x"}};
    // Parameter gradients must be disjoint from everything; the grad_x rules were
    // checked in ViewBackward (positions may alias nothing written either).
    for (size_t i = 3; i < 6; ++i) {
      for (size_t j = 0; j < 7; ++j) {
        if (j == i) continue;
        const NamedView pair[] = {views[j], views[i]};
        if (absl::Status s = CheckDisjoint(pair); !s.ok()) return s;
      }
    }
    seq::GrapeMProduct::Gradients grads;
    absl::Status s = v->x.dtype == DType::kFloat32
                         ? BackwardTyped<float>(grape->impl, *v, &grads)
                         : BackwardTyped<double>(grape->impl, *v, &grads);
    if (!s.ok()) return s;
    for (int64_t k = 0; k < m; ++k) {
      const auto& g = grads.generators[k];
      for (int64_t i = 0; i < d; ++i) {
        if (has_a) ga.typed<double>()[k * ga.strides[0] + i * ga.strides[1]] = g.a[i];
        if (has_b) gb.typed<double>()[k * gb.strides[0] + i * gb.strides[1]] = g.b[i];
      }
      if (has_w) gw.typed<double>()[k * gw.strides[0]] = g.omega;
    }
    return absl::OkStatus();
  });
}

}  // extern "C"
