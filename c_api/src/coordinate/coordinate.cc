// The C ABI's coordinate encodings (gpe/coordinate.h): Zheng et al.'s shifted bases, and
// one opaque handle over encodings/coordinate/'s CoordinateEncoder implementations, plus
// the free functions of encodings/coordinate/laplacian_eigenvectors.h. Every entry point
// runs under Guard.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <Eigen/Dense>
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "c_api/include/gpe/coordinate.h"
#include "c_api/src/common/checks.h"
#include "c_api/src/common/error.h"
#include "c_api/src/common/matrices.h"
#include "c_api/src/common/tensor_view.h"
#include "c_api/src/coordinate/encoder_handle.h"
#include "encodings/coordinate/encoder.h"
#include "encodings/coordinate/fourier_features.h"
#include "encodings/coordinate/laplacian_eigenvectors.h"
#include "encodings/coordinate/shifted_basis.h"
#include "encodings/coordinate/so2_bessel.h"
#include "encodings/coordinate/spherical_harmonics.h"

namespace enc = gpe::encodings;
using gpe::c_api::CheckStructSize;
using gpe::c_api::CopyMatrix;
using gpe::c_api::DType;
using gpe::c_api::Guard;
using gpe::c_api::OutputMatrix;
using gpe::c_api::ShapeString;
using gpe::c_api::TensorView;
using gpe::c_api::ViewTensor;
using gpe::c_api::WriteMatrix;

namespace {

using RowMatrixXd = enc::RowMatrixXd;
const DType kF64[] = {DType::kFloat64};
const DType kI64[] = {DType::kInt64};
// Entries of a Fourier-feature handle's frequency matrix (512 MiB of float64).
constexpr int64_t kMaxFrequencyEntries = int64_t{1} << 26;

// Points [N, D] of a handle: N >= 1, D the encoder's input width (finiteness and the
// encoder's own domain, e.g. non-zero directions, are checked by the encoder).
absl::StatusOr<TensorView> ViewPoints(const gpe_coordinate_encoder& e, const DLTensor* points) {
  absl::StatusOr<TensorView> v = ViewTensor(points, "points", 2, kF64);
  if (!v.ok()) return v.status();
  if (v->shape[0] < 1) {
    return absl::InvalidArgumentError("points is empty (N = 0); pass at least one point");
  }
  if (v->shape[1] != e.impl->input_dim()) {
    return absl::InvalidArgumentError(absl::StrCat("points must have shape [N, ",
                                                   e.impl->input_dim(), "] for this encoder; got ",
                                                   ShapeString(*v)));
  }
  return v;
}

absl::Status CheckOut(gpe_coordinate_encoder** out) {
  if (out == nullptr) return absl::InvalidArgumentError("out is NULL");
  *out = nullptr;
  return absl::OkStatus();
}

template <class T>
gpe_coordinate_encoder* NewHandle(T encoder) {
  auto* h = new gpe_coordinate_encoder;
  auto owned = std::make_unique<T>(std::move(encoder));
  if constexpr (std::is_same_v<T, enc::FourierFeatures>) h->fourier = owned.get();
  if constexpr (std::is_same_v<T, enc::So2BesselEncoder>) h->so2 = owned.get();
  h->impl = std::move(owned);
  return h;
}

absl::Status CheckConvention(int32_t convention) {
  if (convention != GPE_FREQUENCY_TWO_PI && convention != GPE_FREQUENCY_ANGULAR) {
    return absl::InvalidArgumentError(absl::StrCat(
        "convention must be GPE_FREQUENCY_TWO_PI (0) or GPE_FREQUENCY_ANGULAR (1); got ",
        convention));
  }
  return absl::OkStatus();
}

enc::FrequencyConvention Convention(int32_t c) {
  return c == GPE_FREQUENCY_ANGULAR ? enc::FrequencyConvention::kAngular
                                    : enc::FrequencyConvention::kTwoPi;
}

// A 1-D tensor of `dtype` with T entries copied out (int64 or float64).
template <class T>
absl::StatusOr<std::vector<T>> ReadVector(const DLTensor* t, const char* name,
                                          absl::Span<const DType> dtype) {
  absl::StatusOr<TensorView> v = ViewTensor(t, name, 1, dtype);
  if (!v.ok()) return v.status();
  if (absl::Status s = gpe::c_api::CheckBroadcastCopy(*v, name); !s.ok()) return s;
  std::vector<T> out(static_cast<size_t>(v->shape[0]));
  for (int64_t i = 0; i < v->shape[0]; ++i) out[i] = v->typed<const T>()[i * v->strides[0]];
  return out;
}

}  // namespace

extern "C" {

gpe_status gpe_shifted_basis_encode(const gpe_shifted_basis_options* options,
                                    const DLTensor* coords, DLTensor* out) {
  return Guard([&]() -> absl::Status {
    if (options == nullptr) return absl::InvalidArgumentError("options is NULL");
    if (absl::Status s = CheckStructSize(options->struct_size,
                                         offsetof(gpe_shifted_basis_options, hi) + sizeof(double),
                                         sizeof(gpe_shifted_basis_options),
                                         "gpe_shifted_basis_options");
        !s.ok()) {
      return s;
    }
    const gpe_shifted_basis_options& o = *options;
    if (o.kind < GPE_SHIFTED_GAUSSIAN || o.kind > GPE_SHIFTED_SQUARE) {
      return absl::InvalidArgumentError(
          absl::StrCat("kind must be one of GPE_SHIFTED_* (0..5); got ", o.kind));
    }
    if (o.num_shifts < 1 || o.num_shifts > gpe::c_api::kMaxDim) {
      return absl::InvalidArgumentError(
          absl::StrCat("num_shifts must be in 1..", gpe::c_api::kMaxDim, "; got ", o.num_shifts));
    }
    absl::StatusOr<gpe::encodings::ShiftedBasis1D> basis = gpe::encodings::ShiftedBasis1D::Create(
        static_cast<gpe::encodings::ShiftedBasisKind>(o.kind), o.num_shifts, o.width, o.lo, o.hi);
    if (!basis.ok()) return basis.status();
    absl::StatusOr<TensorView> c = ViewTensor(coords, "coords", 1, kF64);
    if (!c.ok()) return c.status();
    std::vector<double> x(static_cast<size_t>(c->shape[0]));
    for (int64_t i = 0; i < c->shape[0]; ++i) x[i] = c->typed<const double>()[i * c->strides[0]];
    for (size_t i = 0; i < x.size(); ++i) {
      if (!std::isfinite(x[i])) {
        return absl::InvalidArgumentError(absl::StrCat("coords[", i, "] is not finite"));
      }
    }
    absl::StatusOr<TensorView> ov = ViewTensor(out, "out", 2, kF64);
    if (!ov.ok()) return ov.status();
    if (gpe::c_api::Overlaps(*c, *ov)) return absl::InvalidArgumentError("out overlaps coords");
    if (x.empty()) {
      if (ov->shape[0] != 0 || ov->shape[1] != o.num_shifts) {
        return absl::InvalidArgumentError("out must have shape [0, num_shifts]");
      }
      return absl::OkStatus();
    }
    absl::StatusOr<RowMatrixXd> e = basis->Encode(x);
    if (!e.ok()) return e.status();
    return WriteMatrix(*e, out, "out");
  });
}

void gpe_coordinate_encoder_destroy(gpe_coordinate_encoder* encoder) { delete encoder; }

gpe_status gpe_coordinate_encoder_dims(const gpe_coordinate_encoder* encoder, int64_t* input_dim,
                                       int64_t* output_dim) {
  return Guard([&]() -> absl::Status {
    if (encoder == nullptr) return absl::InvalidArgumentError("encoder is NULL");
    if (input_dim != nullptr) *input_dim = encoder->impl->input_dim();
    if (output_dim != nullptr) *output_dim = encoder->impl->output_dim();
    return absl::OkStatus();
  });
}

gpe_status gpe_coordinate_encode(const gpe_coordinate_encoder* encoder, const DLTensor* points,
                                 DLTensor* features) {
  return Guard([&]() -> absl::Status {
    if (encoder == nullptr) return absl::InvalidArgumentError("encoder is NULL");
    absl::StatusOr<TensorView> p = ViewPoints(*encoder, points);
    if (!p.ok()) return p.status();
    absl::StatusOr<TensorView> o =
        OutputMatrix(features, "features", p->shape[0], encoder->impl->output_dim(), &*p, "points");
    if (!o.ok()) return o.status();
    absl::StatusOr<RowMatrixXd> f = encoder->impl->Encode(CopyMatrix<double>(*p));
    if (!f.ok()) return f.status();
    WriteMatrix(*f, *o);
    return absl::OkStatus();
  });
}

gpe_status gpe_coordinate_backward(const gpe_coordinate_encoder* encoder, const DLTensor* points,
                                   const DLTensor* grad_features, DLTensor* grad_points) {
  return Guard([&]() -> absl::Status {
    if (encoder == nullptr) return absl::InvalidArgumentError("encoder is NULL");
    absl::StatusOr<TensorView> p = ViewPoints(*encoder, points);
    if (!p.ok()) return p.status();
    absl::StatusOr<TensorView> g = ViewTensor(grad_features, "grad_features", 2, kF64);
    if (!g.ok()) return g.status();
    if (g->shape[0] != p->shape[0] || g->shape[1] != encoder->impl->output_dim()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "grad_features must have shape [", p->shape[0], ", ", encoder->impl->output_dim(),
          "] (points' N, the encoder's F); got ", ShapeString(*g)));
    }
    absl::StatusOr<TensorView> o = OutputMatrix(grad_points, "grad_points", p->shape[0],
                                                p->shape[1], &*p, "points");
    if (!o.ok()) return o.status();
    if (gpe::c_api::Overlaps(*g, *o)) {
      return absl::InvalidArgumentError("grad_points overlaps grad_features; pass disjoint memory");
    }
    absl::StatusOr<RowMatrixXd> d = encoder->impl->Backward(CopyMatrix<double>(*p), CopyMatrix<double>(*g));
    if (!d.ok()) return d.status();
    WriteMatrix(*d, *o);
    return absl::OkStatus();
  });
}

gpe_status gpe_fourier_features_create(const gpe_fourier_features_options* options,
                                       gpe_coordinate_encoder** out) {
  return Guard([&]() -> absl::Status {
    if (absl::Status s = CheckOut(out); !s.ok()) return s;
    if (options == nullptr) return absl::InvalidArgumentError("options is NULL");
    if (absl::Status s = CheckStructSize(options->struct_size,
                                         offsetof(gpe_fourier_features_options, seed) +
                                             sizeof(uint64_t),
                                         sizeof(gpe_fourier_features_options),
                                         "gpe_fourier_features_options");
        !s.ok()) {
      return s;
    }
    const gpe_fourier_features_options& o = *options;
    if (absl::Status s = gpe::c_api::CheckDim(o.dim, "dim", 1); !s.ok()) return s;
    if (absl::Status s = gpe::c_api::CheckDim(o.num_frequencies, "num_frequencies", 1); !s.ok()) {
      return s;
    }
    if (!std::isfinite(o.scale)) {
      return absl::InvalidArgumentError(absl::StrCat("scale must be finite; got ", o.scale));
    }
    // The frequency matrix is [K, D] (GAUSSIAN, TXT) or [D K, D] (one block of K rows per
    // axis): bound its entries before it is allocated (dim, K <= 2^20 keep this exact).
    const bool per_axis = o.kind == GPE_FOURIER_LINEAR || o.kind == GPE_FOURIER_LOG_LINEAR ||
                          o.kind == GPE_FOURIER_NERF;
    const int64_t rows = per_axis ? o.dim * o.num_frequencies : o.num_frequencies;
    if (rows * o.dim > kMaxFrequencyEntries) {
      return absl::OutOfRangeError(absl::StrCat(
          "the frequency matrix would have ", rows, " x ", o.dim,
          " entries (dim = ", o.dim, ", num_frequencies = ", o.num_frequencies,
          "); at most 2^26 are allowed"));
    }
    absl::StatusOr<enc::FourierFeatures> f = absl::InvalidArgumentError("unset");
    switch (o.kind) {
      case GPE_FOURIER_GAUSSIAN:
        if (absl::Status s = CheckConvention(o.convention); !s.ok()) return s;
        f = enc::FourierFeatures::Gaussian(o.dim, o.num_frequencies, o.scale,
                                           Convention(o.convention), o.seed);
        break;
      case GPE_FOURIER_LINEAR:
        f = enc::FourierFeatures::LinearlySpaced(o.dim, o.num_frequencies, o.scale);
        break;
      case GPE_FOURIER_LOG_LINEAR:
        f = enc::FourierFeatures::LogLinearlySpaced(o.dim, o.num_frequencies, o.scale);
        break;
      case GPE_FOURIER_NERF:
        f = enc::FourierFeatures::Nerf(o.dim, o.num_frequencies);
        break;
      case GPE_FOURIER_TXT:
        if (o.dim != 2) {
          return absl::InvalidArgumentError(
              absl::StrCat("GPE_FOURIER_TXT encodes 2-D points: dim must be 2; got ", o.dim));
        }
        f = enc::FourierFeatures::TxT(o.num_frequencies, o.scale, o.seed);
        break;
      default:
        return absl::InvalidArgumentError(
            absl::StrCat("kind must be one of GPE_FOURIER_* (0..4); got ", o.kind));
    }
    if (!f.ok()) return f.status();
    *out = NewHandle(*std::move(f));
    return absl::OkStatus();
  });
}

gpe_status gpe_fourier_features_create_from_frequencies(const DLTensor* frequencies,
                                                        int32_t convention,
                                                        gpe_coordinate_encoder** out) {
  return Guard([&]() -> absl::Status {
    if (absl::Status s = CheckOut(out); !s.ok()) return s;
    if (absl::Status s = CheckConvention(convention); !s.ok()) return s;
    absl::StatusOr<TensorView> v = ViewTensor(frequencies, "frequencies", 2, kF64);
    if (!v.ok()) return v.status();
    if (v->shape[0] < 1 || v->shape[1] < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("frequencies must be [F, D] with F, D >= 1; got ", ShapeString(*v)));
    }
    if (v->shape[0] > gpe::c_api::kMaxDim || v->shape[1] > gpe::c_api::kMaxDim) {
      return absl::OutOfRangeError(absl::StrCat("frequencies is too large: ", ShapeString(*v)));
    }
    if (absl::Status s = gpe::c_api::CheckBroadcastCopy(*v, "frequencies"); !s.ok()) return s;
    absl::StatusOr<enc::FourierFeatures> f =
        enc::FourierFeatures::Create(CopyMatrix<double>(*v), Convention(convention));
    if (!f.ok()) return f.status();
    *out = NewHandle(*std::move(f));
    return absl::OkStatus();
  });
}

gpe_status gpe_fourier_features_angular_frequencies(const gpe_coordinate_encoder* encoder,
                                                    DLTensor* out) {
  return Guard([&]() -> absl::Status {
    if (encoder == nullptr) return absl::InvalidArgumentError("encoder is NULL");
    if (encoder->fourier == nullptr) {
      return absl::InvalidArgumentError("encoder is not a Fourier-feature encoder");
    }
    const RowMatrixXd& w = encoder->fourier->angular_frequencies();
    absl::StatusOr<TensorView> o = OutputMatrix(out, "out", w.rows(), w.cols(), nullptr, nullptr);
    if (!o.ok()) return o.status();
    WriteMatrix(w, *o);
    return absl::OkStatus();
  });
}

gpe_status gpe_so2_bessel_create_sampled(const gpe_so2_bessel_options* options,
                                         gpe_coordinate_encoder** out) {
  return Guard([&]() -> absl::Status {
    if (absl::Status s = CheckOut(out); !s.ok()) return s;
    if (options == nullptr) return absl::InvalidArgumentError("options is NULL");
    if (absl::Status s = CheckStructSize(
            options->struct_size, offsetof(gpe_so2_bessel_options, seed) + sizeof(uint64_t),
            sizeof(gpe_so2_bessel_options), "gpe_so2_bessel_options");
        !s.ok()) {
      return s;
    }
    const gpe_so2_bessel_options& o = *options;
    if (o.polar != 0 && o.polar != 1) {
      return absl::InvalidArgumentError(absl::StrCat("polar must be 0 or 1; got ", o.polar));
    }
    if (absl::Status s = gpe::c_api::CheckDim(o.num_terms, "num_terms", 1); !s.ok()) return s;
    absl::StatusOr<enc::So2BesselEncoder> e = enc::So2BesselEncoder::Sample(
        o.num_terms, o.max_scale, o.max_k, o.order_m,
        o.polar ? enc::So2BesselEncoder::Input::kPolar : enc::So2BesselEncoder::Input::kCartesian,
        o.seed);
    if (!e.ok()) return e.status();
    *out = NewHandle(*std::move(e));
    return absl::OkStatus();
  });
}

gpe_status gpe_so2_bessel_create(const DLTensor* orders, const DLTensor* scales,
                                 const DLTensor* weights, int32_t polar,
                                 gpe_coordinate_encoder** out) {
  return Guard([&]() -> absl::Status {
    if (absl::Status s = CheckOut(out); !s.ok()) return s;
    if (polar != 0 && polar != 1) {
      return absl::InvalidArgumentError(absl::StrCat("polar must be 0 or 1; got ", polar));
    }
    absl::StatusOr<std::vector<int64_t>> m = ReadVector<int64_t>(orders, "orders", kI64);
    if (!m.ok()) return m.status();
    absl::StatusOr<std::vector<double>> c = ReadVector<double>(scales, "scales", kF64);
    if (!c.ok()) return c.status();
    absl::StatusOr<std::vector<int64_t>> k = ReadVector<int64_t>(weights, "weights", kI64);
    if (!k.ok()) return k.status();
    if (m->empty()) return absl::InvalidArgumentError("orders is empty: pass at least one term");
    if (c->size() != m->size() || k->size() != m->size()) {
      return absl::InvalidArgumentError(absl::StrCat("orders, scales and weights must have one "
                                                     "length; got ", m->size(), ", ", c->size(),
                                                     " and ", k->size()));
    }
    std::vector<enc::So2BesselEncoder::Term> terms(m->size());
    for (size_t i = 0; i < terms.size(); ++i) {
      // Range checks before narrowing to int (the encoder checks the exact limits).
      if ((*m)[i] < 0 || (*m)[i] > 20) {
        return absl::InvalidArgumentError(
            absl::StrCat("orders[", i, "] must be in 0..20; got ", (*m)[i]));
      }
      if ((*k)[i] < -(int64_t{1} << 20) || (*k)[i] > (int64_t{1} << 20)) {
        return absl::InvalidArgumentError(
            absl::StrCat("weights[", i, "] must satisfy abs(k) <= 2^20; got ", (*k)[i]));
      }
      terms[i] = {static_cast<int>((*m)[i]), (*c)[i], static_cast<int>((*k)[i])};
    }
    absl::StatusOr<enc::So2BesselEncoder> e = enc::So2BesselEncoder::Create(
        std::move(terms),
        polar ? enc::So2BesselEncoder::Input::kPolar : enc::So2BesselEncoder::Input::kCartesian);
    if (!e.ok()) return e.status();
    *out = NewHandle(*std::move(e));
    return absl::OkStatus();
  });
}

gpe_status gpe_so2_bessel_terms(const gpe_coordinate_encoder* encoder, DLTensor* orders,
                                DLTensor* scales, DLTensor* weights) {
  return Guard([&]() -> absl::Status {
    if (encoder == nullptr) return absl::InvalidArgumentError("encoder is NULL");
    if (encoder->so2 == nullptr) {
      return absl::InvalidArgumentError("encoder is not an SO(2) Bessel encoder");
    }
    const auto& terms = encoder->so2->terms();
    const int64_t t = static_cast<int64_t>(terms.size());
    auto view = [&](DLTensor* x, const char* name,
                    absl::Span<const DType> dtype) -> absl::StatusOr<TensorView> {
      absl::StatusOr<TensorView> v = ViewTensor(x, name, 1, dtype);
      if (!v.ok()) return v.status();
      if (v->shape[0] != t) {
        return absl::InvalidArgumentError(
            absl::StrCat(name, " must have shape [", t, "]; got ", ShapeString(*v)));
      }
      return v;
    };
    // Every output viewed and checked before any is written: a bad third output leaves
    // the first two untouched.
    std::optional<TensorView> ov, sv, wv;
    for (auto [x, name, dtype, slot] :
         {std::tuple{orders, "orders", absl::Span<const DType>(kI64), &ov},
          std::tuple{scales, "scales", absl::Span<const DType>(kF64), &sv},
          std::tuple{weights, "weights", absl::Span<const DType>(kI64), &wv}}) {
      if (x == nullptr) continue;
      absl::StatusOr<TensorView> v = view(x, name, dtype);
      if (!v.ok()) return v.status();
      if (absl::Status s = gpe::c_api::CheckNoSelfOverlap(*v, name); !s.ok()) return s;
      slot->emplace(*std::move(v));
    }
    if (absl::Status s = gpe::c_api::CheckDisjoint({{ov ? &*ov : nullptr, "orders"},
                                                    {sv ? &*sv : nullptr, "scales"},
                                                    {wv ? &*wv : nullptr, "weights"}});
        !s.ok()) {
      return s;
    }
    for (int64_t i = 0; i < t; ++i) {
      if (ov) ov->typed<int64_t>()[i * ov->strides[0]] = terms[i].order_m;
      if (sv) sv->typed<double>()[i * sv->strides[0]] = terms[i].radial_scale;
      if (wv) wv->typed<int64_t>()[i * wv->strides[0]] = terms[i].angular_k;
    }
    return absl::OkStatus();
  });
}

gpe_status gpe_bessel_j(int32_t order, const DLTensor* x, DLTensor* out) {
  return Guard([&]() -> absl::Status {
    absl::StatusOr<TensorView> xv = ViewTensor(x, "x", 1, kF64);
    if (!xv.ok()) return xv.status();
    absl::StatusOr<TensorView> ov = ViewTensor(out, "out", 1, kF64);
    if (!ov.ok()) return ov.status();
    if (ov->shape[0] != xv->shape[0]) {
      return absl::InvalidArgumentError(absl::StrCat("out must have shape [", xv->shape[0],
                                                     "] (like x); got ", ShapeString(*ov)));
    }
    if (absl::Status s = gpe::c_api::CheckNoSelfOverlap(*ov, "out"); !s.ok()) return s;
    // Computed fully before writing, so out may alias x exactly (in place).
    std::vector<double> values(static_cast<size_t>(xv->shape[0]));
    for (int64_t i = 0; i < xv->shape[0]; ++i) {
      const double xi = xv->typed<const double>()[i * xv->strides[0]];
      if (!std::isfinite(xi) || xi < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("x[", i, "] is ", xi, "; J_m takes finite x >= 0 here"));
      }
      absl::StatusOr<double> j = enc::BesselJ(order, xi);
      if (!j.ok()) return j.status();
      values[i] = *j;
    }
    for (int64_t i = 0; i < ov->shape[0]; ++i) ov->typed<double>()[i * ov->strides[0]] = values[i];
    return absl::OkStatus();
  });
}

gpe_status gpe_shifted_encoder_create(int32_t form, const gpe_shifted_basis_options* axes,
                                      int64_t num_axes, gpe_coordinate_encoder** out) {
  return Guard([&]() -> absl::Status {
    if (absl::Status s = CheckOut(out); !s.ok()) return s;
    if (form != GPE_SHIFTED_SIMPLE && form != GPE_SHIFTED_COMPLEX) {
      return absl::InvalidArgumentError(absl::StrCat(
          "form must be GPE_SHIFTED_SIMPLE (0) or GPE_SHIFTED_COMPLEX (1); got ", form));
    }
    if (axes == nullptr) return absl::InvalidArgumentError("axes is NULL");
    if (num_axes < 1 || num_axes > 16) {
      return absl::InvalidArgumentError(absl::StrCat("num_axes must be in 1..16; got ", num_axes));
    }
    std::vector<enc::ShiftedBasis1D> bases;
    for (int64_t d = 0; d < num_axes; ++d) {
      const gpe_shifted_basis_options& o = axes[d];
      const std::string name = absl::StrCat("axes[", d, "]");
      if (absl::Status s = CheckStructSize(o.struct_size,
                                           offsetof(gpe_shifted_basis_options, hi) + sizeof(double),
                                           sizeof(gpe_shifted_basis_options), name.c_str());
          !s.ok()) {
        return s;
      }
      if (o.kind < GPE_SHIFTED_GAUSSIAN || o.kind > GPE_SHIFTED_SQUARE) {
        return absl::InvalidArgumentError(
            absl::StrCat(name, ".kind must be one of GPE_SHIFTED_* (0..5); got ", o.kind));
      }
      if (o.num_shifts < 1 || o.num_shifts > gpe::c_api::kMaxDim) {
        return absl::InvalidArgumentError(absl::StrCat(name, ".num_shifts must be in 1..",
                                                       gpe::c_api::kMaxDim, "; got ", o.num_shifts));
      }
      absl::StatusOr<enc::ShiftedBasis1D> b = enc::ShiftedBasis1D::Create(
          static_cast<enc::ShiftedBasisKind>(o.kind), o.num_shifts, o.width, o.lo, o.hi);
      if (!b.ok()) return absl::Status(b.status().code(), absl::StrCat(name, ": ", b.status().message()));
      bases.push_back(*std::move(b));
    }
    if (form == GPE_SHIFTED_SIMPLE) {
      absl::StatusOr<enc::SimpleShiftedEncoder> e = enc::SimpleShiftedEncoder::Create(std::move(bases));
      if (!e.ok()) return e.status();
      *out = NewHandle(*std::move(e));
    } else {
      absl::StatusOr<enc::ComplexShiftedEncoder> e =
          enc::ComplexShiftedEncoder::Create(std::move(bases));
      if (!e.ok()) return e.status();
      *out = NewHandle(*std::move(e));
    }
    return absl::OkStatus();
  });
}

gpe_status gpe_spherical_harmonics_create(int32_t max_degree, gpe_coordinate_encoder** out) {
  return Guard([&]() -> absl::Status {
    if (absl::Status s = CheckOut(out); !s.ok()) return s;
    absl::StatusOr<enc::SphericalHarmonicsEncoder> e =
        enc::SphericalHarmonicsEncoder::Create(max_degree);
    if (!e.ok()) return e.status();
    *out = NewHandle(*std::move(e));
    return absl::OkStatus();
  });
}

gpe_status gpe_laplacian_eigenvectors(const gpe_laplacian_options* options, int64_t num_nodes,
                                      const DLTensor* edges, const DLTensor* weights,
                                      DLTensor* eigenvalues, DLTensor* eigenvectors) {
  return Guard([&]() -> absl::Status {
    if (options == nullptr) return absl::InvalidArgumentError("options is NULL");
    if (absl::Status s = CheckStructSize(options->struct_size,
                                         offsetof(gpe_laplacian_options, skip_first) +
                                             sizeof(int32_t),
                                         sizeof(gpe_laplacian_options), "gpe_laplacian_options");
        !s.ok()) {
      return s;
    }
    const gpe_laplacian_options& o = *options;
    if (o.kind != GPE_LAPLACIAN_COMBINATORIAL && o.kind != GPE_LAPLACIAN_SYMMETRIC) {
      return absl::InvalidArgumentError(
          absl::StrCat("kind must be one of GPE_LAPLACIAN_* (0..1); got ", o.kind));
    }
    if (num_nodes < 1) {
      return absl::InvalidArgumentError(absl::StrCat("num_nodes must be >= 1; got ", num_nodes));
    }
    absl::StatusOr<TensorView> ev = ViewTensor(edges, "edges", 2, kI64);
    if (!ev.ok()) return ev.status();
    if (ev->shape[1] != 2) {
      return absl::InvalidArgumentError(
          absl::StrCat("edges must have shape [E, 2]; got ", ShapeString(*ev)));
    }
    if (absl::Status s = gpe::c_api::CheckBroadcastCopy(*ev, "edges"); !s.ok()) return s;
    const int64_t num_edges = ev->shape[0];
    std::vector<double> w(static_cast<size_t>(num_edges), 1.0);
    if (weights != nullptr) {
      absl::StatusOr<std::vector<double>> wv = ReadVector<double>(weights, "weights", kF64);
      if (!wv.ok()) return wv.status();
      if (static_cast<int64_t>(wv->size()) != num_edges) {
        return absl::InvalidArgumentError(absl::StrCat(
            "weights must have shape [", num_edges, "] (one per edge); got [", wv->size(), "]"));
      }
      w = *std::move(wv);
    }
    std::vector<enc::GraphEdge> list(static_cast<size_t>(num_edges));
    for (int64_t i = 0; i < num_edges; ++i) {
      const int64_t* row = ev->typed<const int64_t>() + i * ev->strides[0];
      list[i] = {row[0], row[ev->strides[1]], w[i]};
    }
    absl::StatusOr<TensorView> val = ViewTensor(eigenvalues, "eigenvalues", 1, kF64);
    if (!val.ok()) return val.status();
    const int64_t k = val->shape[0];
    if (k < 1) return absl::InvalidArgumentError("eigenvalues is empty: ask for k >= 1 pairs");
    if (absl::Status s = gpe::c_api::CheckNoSelfOverlap(*val, "eigenvalues"); !s.ok()) return s;
    absl::StatusOr<TensorView> vec =
        OutputMatrix(eigenvectors, "eigenvectors", num_nodes, k, nullptr, nullptr);
    if (!vec.ok()) return vec.status();
    if (absl::Status s = gpe::c_api::CheckDisjoint(
            {{&*ev, "edges"}, {&*val, "eigenvalues"}, {&*vec, "eigenvectors"}});
        !s.ok()) {
      return s;
    }
    enc::LaplacianEncodingOptions lo;
    lo.kind = o.kind == GPE_LAPLACIAN_SYMMETRIC ? enc::LaplacianKind::kSymmetric
                                                : enc::LaplacianKind::kCombinatorial;
    lo.skip_first = o.skip_first != 0;
    absl::StatusOr<enc::LaplacianEigenpairs> pairs =
        enc::LaplacianEigenvectorEncoding(num_nodes, list, k, lo);
    if (!pairs.ok()) return pairs.status();
    for (int64_t i = 0; i < k; ++i) val->typed<double>()[i * val->strides[0]] = pairs->eigenvalues[i];
    WriteMatrix(pairs->eigenvectors, *vec);
    return absl::OkStatus();
  });
}

}  // extern "C"
