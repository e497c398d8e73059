#include "encodings/sequence/grape_m.h"

#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include <Eigen/Dense>
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "group/batch.h"
#include "absl/types/span.h"
#include "group/angle.h"
#include "group/so_planes.h"
#include "group/so_rank2.h"

namespace gpe {
namespace encodings {
namespace sequence {
namespace {

using group::internal::ValidateBatch;

}  // namespace

// ----------------------------------------------------------------------------------
// GrapeMCommutingPlanes
// ----------------------------------------------------------------------------------

absl::StatusOr<GrapeMCommutingPlanes> GrapeMCommutingPlanes::Create(
    int64_t dim, std::vector<CoordinatePlane> planes) {
  if (dim < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("GrapeMCommutingPlanes: dim must be >= 2, got ", dim));
  }
  std::vector<bool> used(static_cast<size_t>(dim), false);
  for (size_t k = 0; k < planes.size(); ++k) {
    const CoordinatePlane& pl = planes[k];
    if (pl.first < 0 || pl.first >= dim || pl.second < 0 || pl.second >= dim) {
      return absl::InvalidArgumentError(absl::StrCat("GrapeMCommutingPlanes: plane ", k, " (",
                                                     pl.first, ", ", pl.second,
                                                     ") has a coordinate outside [0, ", dim, ")"));
    }
    if (pl.first == pl.second) {
      return absl::InvalidArgumentError(
          absl::StrCat("GrapeMCommutingPlanes: plane ", k, " uses coordinate ", pl.first, " twice"));
    }
    if (used[pl.first] || used[pl.second]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "GrapeMCommutingPlanes: plane ", k, " shares a coordinate with an earlier plane; "
          "commuting generators need disjoint planes"));
    }
    if (!std::isfinite(pl.omega)) {
      return absl::InvalidArgumentError(
          absl::StrCat("GrapeMCommutingPlanes: plane ", k, " has non-finite omega"));
    }
    used[pl.first] = used[pl.second] = true;
  }
  return GrapeMCommutingPlanes(dim, std::move(planes));
}

absl::StatusOr<GrapeMCommutingPlanes> GrapeMCommutingPlanes::FromRoPE(
    const group::CommutingPlanes& rope) {
  const group::PlaneLayout& layout = rope.layout();
  std::vector<CoordinatePlane> planes;
  planes.reserve(static_cast<size_t>(layout.num_planes()));
  for (int64_t i = 0; i < layout.num_planes(); ++i) {
    planes.push_back({layout.first(i), layout.second(i), rope.thetas()[i]});
  }
  return Create(layout.dim(), std::move(planes));
}

Eigen::MatrixXd GrapeMCommutingPlanes::Generator() const {
  Eigen::MatrixXd s = Eigen::MatrixXd::Zero(dim_, dim_);
  for (const CoordinatePlane& pl : planes_) {
    // omega L(e_second, e_first) = omega (e_second e_first^T - e_first e_second^T).
    s(pl.second, pl.first) = pl.omega;
    s(pl.first, pl.second) = -pl.omega;
  }
  return s;
}

Eigen::MatrixXd GrapeMCommutingPlanes::Matrix(int64_t n) const {
  Eigen::MatrixXd m = Eigen::MatrixXd::Identity(dim_, dim_);
  for (const CoordinatePlane& pl : planes_) {
    const double angle = group::ReducedAngle(n, pl.omega);
    const double c = std::cos(angle), s = std::sin(angle);
    m(pl.first, pl.first) = c;
    m(pl.first, pl.second) = -s;
    m(pl.second, pl.first) = s;
    m(pl.second, pl.second) = c;
  }
  return m;
}

template <class T>
absl::Status GrapeMCommutingPlanes::Apply(absl::Span<const int64_t> positions, const T* in,
                                          int64_t in_stride, T* out, int64_t out_stride) const {
  const int64_t n = static_cast<int64_t>(positions.size());
  if (absl::Status s = ValidateBatch("GrapeMCommutingPlanes::Apply", n, dim_, in, in_stride, out,
                                     out_stride, sizeof(T));
      !s.ok()) {
    return s;
  }
  std::vector<bool> in_plane(static_cast<size_t>(dim_), false);
  for (const CoordinatePlane& pl : planes_) in_plane[pl.first] = in_plane[pl.second] = true;
  std::vector<int64_t> pass;  // coordinates in no plane
  for (int64_t i = 0; i < dim_; ++i) {
    if (!in_plane[i]) pass.push_back(i);
  }
  // cos and sin of every plane's angle, recomputed only when the position changes: rows
  // of one token's heads (a (b, s, h, d) tensor) share a position, and forming an exactly
  // reduced angle costs far more than rotating a pair.
  const size_t m = planes_.size();
  std::vector<double> cs(2 * m);
  for (int64_t j = 0; j < n; ++j) {
    if (j == 0 || positions[j] != positions[j - 1]) {
      for (size_t k = 0; k < m; ++k) {
        // The same arithmetic as group::CommutingPlanes (exactly reduced angle, cos/sin
        // and products in double, one rounding to T), so RoPE is reproduced bit for bit.
        const double angle = group::ReducedAngle(positions[j], planes_[k].omega);
        cs[2 * k] = std::cos(angle);
        cs[2 * k + 1] = std::sin(angle);
      }
    }
    const T* x = in + j * in_stride;
    T* y = out + j * out_stride;
    for (size_t k = 0; k < m; ++k) {
      const CoordinatePlane& pl = planes_[k];
      const double c = cs[2 * k], s = cs[2 * k + 1];
      const double x1 = static_cast<double>(x[pl.first]);
      const double x2 = static_cast<double>(x[pl.second]);
      y[pl.first] = static_cast<T>(x1 * c - x2 * s);
      y[pl.second] = static_cast<T>(x1 * s + x2 * c);
    }
    if (x != y) {
      for (int64_t i : pass) y[i] = x[i];
    }
  }
  return absl::OkStatus();
}

template <class T>
absl::Status GrapeMCommutingPlanes::Backward(absl::Span<const int64_t> positions, const T* in,
                                             int64_t in_stride, const T* grad_out,
                                             int64_t grad_out_stride, T* grad_in,
                                             int64_t grad_in_stride,
                                             std::vector<double>* grad_omega) const {
  const char* who = "GrapeMCommutingPlanes::Backward";
  const int64_t n = static_cast<int64_t>(positions.size());
  if (grad_omega == nullptr) return absl::InvalidArgumentError(absl::StrCat(who, ": null grad_omega"));
  if (absl::Status s = group::internal::ValidateBackwardBatch(
          who, n, dim_, in, in_stride, grad_out, grad_out_stride, grad_in,
          grad_in_stride, sizeof(T));
      !s.ok()) {
    return s;
  }
  grad_omega->assign(planes_.size(), 0.0);
  std::vector<bool> in_plane(static_cast<size_t>(dim_), false);
  for (const CoordinatePlane& pl : planes_) in_plane[pl.first] = in_plane[pl.second] = true;
  for (int64_t j = 0; j < n; ++j) {
    const T* x = in + j * in_stride;
    const T* g = grad_out + j * grad_out_stride;
    T* gx = grad_in == nullptr ? nullptr : grad_in + j * grad_in_stride;
    const double p = static_cast<double>(positions[j]);
    for (size_t k = 0; k < planes_.size(); ++k) {
      const CoordinatePlane& pl = planes_[k];
      const double angle = group::ReducedAngle(positions[j], pl.omega);
      const double c = std::cos(angle), s = std::sin(angle);
      const double x1 = static_cast<double>(x[pl.first]);
      const double x2 = static_cast<double>(x[pl.second]);
      const double g1 = static_cast<double>(g[pl.first]);
      const double g2 = static_cast<double>(g[pl.second]);
      const double y1 = x1 * c - x2 * s, y2 = x1 * s + x2 * c;
      // d(y1, y2)/d angle = (-y2, y1); d angle / d omega = p.
      (*grad_omega)[k] += p * (g2 * y1 - g1 * y2);
      if (gx != nullptr) {
        gx[pl.first] = static_cast<T>(g1 * c + g2 * s);
        gx[pl.second] = static_cast<T>(-g1 * s + g2 * c);
      }
    }
    if (gx != nullptr && gx != g) {
      for (int64_t i = 0; i < dim_; ++i) {
        if (!in_plane[i]) gx[i] = g[i];
      }
    }
  }
  return absl::OkStatus();
}

template absl::Status GrapeMCommutingPlanes::Apply<float>(absl::Span<const int64_t>,
                                                          const float*, int64_t, float*,
                                                          int64_t) const;
template absl::Status GrapeMCommutingPlanes::Apply<double>(absl::Span<const int64_t>,
                                                           const double*, int64_t, double*,
                                                           int64_t) const;
template absl::Status GrapeMCommutingPlanes::Backward<float>(
    absl::Span<const int64_t>, const float*, int64_t, const float*, int64_t, float*, int64_t,
    std::vector<double>*) const;
template absl::Status GrapeMCommutingPlanes::Backward<double>(
    absl::Span<const int64_t>, const double*, int64_t, const double*, int64_t, double*, int64_t,
    std::vector<double>*) const;

// ----------------------------------------------------------------------------------
// GrapeMProduct
// ----------------------------------------------------------------------------------

absl::StatusOr<GrapeMProduct> GrapeMProduct::Create(std::vector<Rank2Generator> generators) {
  if (generators.empty()) {
    return absl::InvalidArgumentError("GrapeMProduct: at least one generator is required");
  }
  const size_t d = generators[0].a.size();
  std::vector<group::Rank2Rotation> factors;
  factors.reserve(generators.size());
  for (size_t k = 0; k < generators.size(); ++k) {
    Rank2Generator& g = generators[k];
    if (g.a.size() != d || g.b.size() != d) {
      return absl::InvalidArgumentError(absl::StrCat("GrapeMProduct: generator ", k,
                                                     " has vectors of sizes ", g.a.size(), ", ",
                                                     g.b.size(), "; expected ", d));
    }
    absl::StatusOr<group::Rank2Rotation> r =
        group::Rank2Rotation::Create(std::move(g.a), std::move(g.b), g.omega);
    if (!r.ok()) {
      return absl::Status(r.status().code(), absl::StrCat("GrapeMProduct: generator ", k, ": ",
                                                          r.status().message()));
    }
    factors.push_back(*std::move(r));
  }
  return GrapeMProduct(std::move(factors));
}

Eigen::MatrixXd GrapeMProduct::Matrix(int64_t n) const {
  Eigen::MatrixXd m = Eigen::MatrixXd::Identity(dim(), dim());
  for (const group::Rank2Rotation& f : factors_) m = m * f.Matrix(n);
  return m;
}

template <class T>
absl::Status GrapeMProduct::Apply(absl::Span<const int64_t> positions, const T* in,
                                  int64_t in_stride, T* out, int64_t out_stride) const {
  const int64_t n = static_cast<int64_t>(positions.size());
  const int64_t d = dim();
  if (absl::Status s = ValidateBatch("GrapeMProduct::Apply", n, d, in, in_stride, out,
                                     out_stride, sizeof(T));
      !s.ok()) {
    return s;
  }
  if (n == 0) return absl::OkStatus();
  // Intermediates stay in double; one rounding to T at the end.
  std::vector<double> z(static_cast<size_t>(n * d));
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t i = 0; i < d; ++i) z[j * d + i] = static_cast<double>(in[j * in_stride + i]);
  }
  for (int64_t k = num_generators() - 1; k >= 0; --k) {
    if (absl::Status s = factors_[k].Apply<double>(positions, z.data(), d, z.data(), d); !s.ok()) {
      return s;
    }
  }
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t i = 0; i < d; ++i) out[j * out_stride + i] = static_cast<T>(z[j * d + i]);
  }
  return absl::OkStatus();
}

template <class T>
absl::Status GrapeMProduct::Backward(absl::Span<const int64_t> positions, const T* in,
                                     int64_t in_stride, const T* grad_out,
                                     int64_t grad_out_stride, T* grad_in, int64_t grad_in_stride,
                                     Gradients* grads) const {
  const char* who = "GrapeMProduct::Backward";
  const int64_t n = static_cast<int64_t>(positions.size());
  const int64_t d = dim();
  const int64_t m = num_generators();
  if (grads == nullptr) return absl::InvalidArgumentError(absl::StrCat(who, ": null grads"));
  if (absl::Status s = group::internal::ValidateBackwardBatch(
          who, n, d, in, in_stride, grad_out, grad_out_stride, grad_in,
          grad_in_stride, sizeof(T));
      !s.ok()) {
    return s;
  }
  grads->generators.assign(static_cast<size_t>(m), group::Rank2Rotation::Gradients{});
  for (auto& g : grads->generators) {
    g.a.assign(d, 0.0);
    g.b.assign(d, 0.0);
  }
  if (n == 0) return absl::OkStatus();
  const size_t block = static_cast<size_t>(n * d);
  // inputs[k] is the input of factor k: inputs[m - 1] = x, inputs[k] = G_{k+1} inputs[k+1]
  // (0-based factors).
  std::vector<double> inputs(static_cast<size_t>(m) * block);
  double* last = inputs.data() + (m - 1) * block;
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t i = 0; i < d; ++i) last[j * d + i] = static_cast<double>(in[j * in_stride + i]);
  }
  for (int64_t k = m - 2; k >= 0; --k) {
    if (absl::Status s = factors_[k + 1].Apply<double>(positions, inputs.data() + (k + 1) * block,
                                                       d, inputs.data() + k * block, d);
        !s.ok()) {
      return s;
    }
  }
  std::vector<double> g(block);
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t i = 0; i < d; ++i) {
      g[j * d + i] = static_cast<double>(grad_out[j * grad_out_stride + i]);
    }
  }
  // Leftmost factor first: g becomes G_k^T g after factor k (in place, allowed by
  // Rank2Rotation::Backward).
  for (int64_t k = 0; k < m; ++k) {
    if (absl::Status s = factors_[k].Backward<double>(positions, inputs.data() + k * block, d,
                                                      g.data(), d, g.data(), d,
                                                      &grads->generators[k]);
        !s.ok()) {
      return s;
    }
  }
  if (grad_in != nullptr) {
    for (int64_t j = 0; j < n; ++j) {
      for (int64_t i = 0; i < d; ++i) {
        grad_in[j * grad_in_stride + i] = static_cast<T>(g[j * d + i]);
      }
    }
  }
  return absl::OkStatus();
}

template absl::Status GrapeMProduct::Apply<float>(absl::Span<const int64_t>, const float*,
                                                  int64_t, float*, int64_t) const;
template absl::Status GrapeMProduct::Apply<double>(absl::Span<const int64_t>, const double*,
                                                   int64_t, double*, int64_t) const;
template absl::Status GrapeMProduct::Backward<float>(absl::Span<const int64_t>, const float*,
                                                     int64_t, const float*, int64_t, float*,
                                                     int64_t, Gradients*) const;
template absl::Status GrapeMProduct::Backward<double>(absl::Span<const int64_t>, const double*,
                                                      int64_t, const double*, int64_t, double*,
                                                      int64_t, Gradients*) const;

}  // namespace sequence
}  // namespace encodings
}  // namespace gpe
