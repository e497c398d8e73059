// The C ABI's SO(n) representations of the integers (gpe/so.h): options and DLPack views
// validated here, then handed to group/ through so_rep.h. Every entry point runs under
// Guard: failures become a status code plus the thread-local message, and no exception
// crosses the boundary (see common/error.h).
#include "c_api/include/gpe/so.h"

#include <cmath>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "c_api/src/common/checks.h"
#include "c_api/src/common/error.h"
#include "c_api/src/common/tensor_view.h"
#include "c_api/src/so/so_rep.h"

using gpe::c_api::Guard;
using gpe::c_api::TensorView;
using gpe::c_api::ViewTensor;
using gpe::c_api::kF64;
using gpe::c_api::kFloat;
using gpe::c_api::kInt;

// The opaque handle behind gpe_so_rep*.
struct gpe_so_rep {
  std::unique_ptr<gpe::c_api::SoRep> impl;
};

using gpe::c_api::CheckCreate;
using gpe::c_api::CheckDim;
using gpe::c_api::CheckFinite;

extern "C" {

gpe_status gpe_so_rep_create_planes(const gpe_so_planes_options* options, gpe_so_rep** out) {
  return Guard([&]() -> absl::Status {
    absl::Status s =
        CheckCreate(out, options, offsetof(gpe_so_planes_options, thetas) + sizeof(void*),
                    "gpe_so_planes_options");
    if (!s.ok()) return s;
    const gpe_so_planes_options& o = *options;
    if (!(s = CheckDim(o.dim, "dim")).ok()) return s;
    const int64_t rotary_dim = o.rotary_dim == 0 ? o.dim : o.rotary_dim;
    if (rotary_dim < 2 || rotary_dim > o.dim || rotary_dim % 2 != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "rotary_dim must be even with 2 <= rotary_dim <= dim (", o.dim, "); got ",
          o.rotary_dim));
    }
    if (o.pairing != GPE_PAIRING_INTERLEAVED && o.pairing != GPE_PAIRING_HALF_SPLIT) {
      return absl::InvalidArgumentError(absl::StrCat(
          "pairing must be GPE_PAIRING_INTERLEAVED (0) or GPE_PAIRING_HALF_SPLIT (1); got ",
          o.pairing));
    }
    std::vector<double> thetas(static_cast<size_t>(rotary_dim / 2));
    if (o.thetas != nullptr) {
      if (!(s = CheckFinite(o.thetas, rotary_dim / 2, "thetas")).ok()) return s;
      thetas.assign(o.thetas, o.thetas + rotary_dim / 2);
    } else {
      if (!std::isfinite(o.base) || o.base <= 0.0) {
        return absl::InvalidArgumentError(
            absl::StrCat("base must be finite and > 0; got ", o.base));
      }
      // RoFormer: theta_i = base^(-2i / r).
      for (int64_t i = 0; i < rotary_dim / 2; ++i) {
        thetas[i] = std::pow(o.base, -2.0 * static_cast<double>(i) /
                                         static_cast<double>(rotary_dim));
      }
    }
    absl::StatusOr<std::unique_ptr<gpe::c_api::SoRep>> rep = gpe::c_api::MakePlanesRep(
        o.dim, rotary_dim, std::move(thetas), o.pairing == GPE_PAIRING_HALF_SPLIT);
    if (!rep.ok()) return rep.status();
    *out = new gpe_so_rep{std::move(*rep)};
    return absl::OkStatus();
  });
}

gpe_status gpe_so_rep_create_rank2(const gpe_so_rank2_options* options, gpe_so_rep** out) {
  return Guard([&]() -> absl::Status {
    absl::Status s =
        CheckCreate(out, options, offsetof(gpe_so_rank2_options, omega) + sizeof(double),
                    "gpe_so_rank2_options");
    if (!s.ok()) return s;
    const gpe_so_rank2_options& o = *options;
    if (!(s = CheckDim(o.dim, "dim")).ok()) return s;
    if (o.a == nullptr || o.b == nullptr) {
      return absl::InvalidArgumentError(o.a == nullptr ? "a is NULL" : "b is NULL");
    }
    if (!(s = CheckFinite(o.a, o.dim, "a")).ok()) return s;
    if (!(s = CheckFinite(o.b, o.dim, "b")).ok()) return s;
    if (!std::isfinite(o.omega)) {
      return absl::InvalidArgumentError(absl::StrCat("omega must be finite; got ", o.omega));
    }
    absl::StatusOr<std::unique_ptr<gpe::c_api::SoRep>> rep = gpe::c_api::MakeRank2Rep(
        std::vector<double>(o.a, o.a + o.dim), std::vector<double>(o.b, o.b + o.dim), o.omega);
    if (!rep.ok()) return rep.status();
    *out = new gpe_so_rep{std::move(*rep)};
    return absl::OkStatus();
  });
}

void gpe_so_rep_destroy(gpe_so_rep* rep) { delete rep; }

gpe_status gpe_so_rep_dim(const gpe_so_rep* rep, int64_t* dim) {
  return Guard([&]() -> absl::Status {
    if (rep == nullptr) return absl::InvalidArgumentError("rep is NULL");
    if (dim == nullptr) return absl::InvalidArgumentError("dim is NULL");
    *dim = rep->impl->dim();
    return absl::OkStatus();
  });
}

gpe_status gpe_so_rep_apply(const gpe_so_rep* rep, const DLTensor* positions, const DLTensor* x,
                            DLTensor* out) {
  return Guard([&]() -> absl::Status {
    if (rep == nullptr) return absl::InvalidArgumentError("rep is NULL");
    absl::StatusOr<TensorView> p = ViewTensor(positions, "positions", 1, kInt);
    if (!p.ok()) return p.status();
    absl::StatusOr<TensorView> xv = ViewTensor(x, "x", 2, kFloat);
    if (!xv.ok()) return xv.status();
    absl::StatusOr<TensorView> ov = ViewTensor(out, "out", 2, kFloat);
    if (!ov.ok()) return ov.status();
    const int64_t dim = rep->impl->dim();
    if (xv->shape[1] != dim) {
      return absl::InvalidArgumentError(absl::StrCat(
          "x has shape [", xv->shape[0], ", ", xv->shape[1], "]; the representation acts on dim ",
          dim));
    }
    if (xv->shape[0] != p->shape[0]) {
      return absl::InvalidArgumentError(absl::StrCat("x has ", xv->shape[0],
                                                     " rows but positions has ", p->shape[0]));
    }
    if (ov->shape != xv->shape || ov->dtype != xv->dtype) {
      return absl::InvalidArgumentError(absl::StrCat(
          "out must match x (", DTypeName(xv->dtype), " [", xv->shape[0], ", ", xv->shape[1],
          "]); got ", DTypeName(ov->dtype), " [", ov->shape[0], ", ", ov->shape[1], "]"));
    }
    // The same checks as every other apply's (ViewApply, c_api/src/sequence/batch.cc):
    // out must not overlap itself or the positions it is computed from.
    if (absl::Status s = gpe::c_api::CheckNoSelfOverlap(*ov, "out"); !s.ok()) return s;
    if (!gpe::c_api::SameLayout(*xv, *ov) && gpe::c_api::Overlaps(*xv, *ov)) {
      return absl::InvalidArgumentError(
          "out overlaps x without being x itself: pass out = x for in place, or disjoint memory");
    }
    if (gpe::c_api::Overlaps(*p, *ov)) {
      return absl::InvalidArgumentError("out overlaps positions; pass disjoint memory");
    }
    return rep->impl->Apply(*p, *xv, *ov);
  });
}

gpe_status gpe_so_rep_matrix(const gpe_so_rep* rep, int64_t position, DLTensor* out) {
  return Guard([&]() -> absl::Status {
    if (rep == nullptr) return absl::InvalidArgumentError("rep is NULL");
    absl::StatusOr<TensorView> ov = ViewTensor(out, "out", 2, kF64);
    if (!ov.ok()) return ov.status();
    const int64_t dim = rep->impl->dim();
    if (ov->shape[0] != dim || ov->shape[1] != dim) {
      return absl::InvalidArgumentError(absl::StrCat("out must have shape [", dim, ", ", dim,
                                                     "]; got [", ov->shape[0], ", ",
                                                     ov->shape[1], "]"));
    }
    return rep->impl->Matrix(position, *ov);
  });
}

}  // extern "C"
