#include "group/so_rank2.h"

#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include <Eigen/Dense>
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "group/angle.h"
#include "group/batch.h"

namespace gpe {
namespace group {
namespace {

template <class T>
double Dot(const std::vector<double>& a, const T* x) {
  double s = 0.0;
  const size_t n = a.size();
  for (size_t i = 0; i < n; ++i) s += a[i] * static_cast<double>(x[i]);
  return s;
}

double Dot(const std::vector<double>& a, const std::vector<double>& b) {
  return Dot(a, b.data());
}

// Series below this |theta| (terms beyond theta^4 are < 1e-19 relative there).
constexpr double kSeriesTheta = 1e-3;

// out = x + (cos t - 1)(u u^T + v v^T) x + sin t (u v^T - v u^T) x, one vector.
template <class T>
void RotateInPlane(const std::vector<double>& u, const std::vector<double>& v, double c,
                   double s, const T* in, T* out) {
  const double alpha = Dot(u, in), beta = Dot(v, in);
  const double cu = (c - 1.0) * alpha + s * beta;
  const double cv = (c - 1.0) * beta - s * alpha;
  const size_t n = u.size();
  for (size_t i = 0; i < n; ++i) {
    out[i] = static_cast<T>(static_cast<double>(in[i]) + cu * u[i] + cv * v[i]);
  }
}

}  // namespace

absl::StatusOr<Rank2Rotation> Rank2Rotation::Create(std::vector<double> a,
                                                    std::vector<double> b, double omega) {
  if (a.size() != b.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("Rank2Rotation: a has ", a.size(), " entries, b has ", b.size()));
  }
  if (a.size() < 2) {
    return absl::InvalidArgumentError("Rank2Rotation: dimension must be >= 2");
  }
  if (!std::isfinite(omega)) return absl::InvalidArgumentError("Rank2Rotation: omega is not finite");
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i]) || !std::isfinite(b[i])) {
      return absl::InvalidArgumentError(
          absl::StrCat("Rank2Rotation: a or b is not finite at ", i));
    }
  }
  Rank2Rotation r;
  r.omega_ = omega;
  const double norm_a = std::sqrt(Dot(a, a));
  const double norm_b = std::sqrt(Dot(b, b));
  if (norm_a > 0.0 && norm_b > 0.0) {
    // Gram-Schmidt with one re-orthogonalisation pass: s0 = |a| |b - (u.b) u| is
    // accurate even when a and b are nearly parallel, unlike |a|^2|b|^2 - (a.b)^2.
    std::vector<double> u(a.size()), w(b);
    for (size_t i = 0; i < a.size(); ++i) u[i] = a[i] / norm_a;
    for (int pass = 0; pass < 2; ++pass) {
      const double proj = Dot(u, w);
      for (size_t i = 0; i < w.size(); ++i) w[i] -= proj * u[i];
    }
    const double norm_w = std::sqrt(Dot(w, w));
    if (norm_w > 1e-15 * norm_b) {
      for (double& x : w) x /= norm_w;
      r.u_ = std::move(u);
      r.v_ = std::move(w);
      r.s0_ = norm_a * norm_w;
      r.phi_ = omega * r.s0_;
    }
  }
  // The angle per position must be a number: a finite omega times a finite |a ^ b| can
  // still overflow (a = (2, 0), b = (0, 1), omega = 1e308), and every position, 0
  // included, would then rotate by NaN.
  if (!std::isfinite(norm_a) || !std::isfinite(norm_b) || !std::isfinite(r.s0_) ||
      !std::isfinite(r.phi_)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Rank2Rotation: the angle per position omega |a ^ b| overflows (omega = ", omega,
        ", |a| = ", norm_a, ", |b| = ", norm_b, "); scale a, b or omega down"));
  }
  r.a_ = std::move(a);
  r.b_ = std::move(b);
  return r;
}

Eigen::MatrixXd Rank2Rotation::Generator() const {
  const Eigen::Map<const Eigen::VectorXd> a(a_.data(), dim()), b(b_.data(), dim());
  return omega_ * (a * b.transpose() - b * a.transpose());
}

Eigen::MatrixXd Rank2Rotation::Matrix(int64_t p) const {
  Eigen::MatrixXd m = Eigen::MatrixXd::Identity(dim(), dim());
  if (degenerate()) return m;
  const Eigen::Map<const Eigen::VectorXd> u(u_.data(), dim()), v(v_.data(), dim());
  const SinCos sc = SinCosOfMultiple(p, phi_);
  m += (sc.cos - 1.0) * (u * u.transpose() + v * v.transpose()) +
       sc.sin * (u * v.transpose() - v * u.transpose());
  return m;
}

template <class T>
absl::Status Rank2Rotation::Apply(absl::Span<const int64_t> positions, const T* in,
                                  int64_t in_stride, T* out, int64_t out_stride) const {
  const int64_t n = static_cast<int64_t>(positions.size());
  if (absl::Status s = internal::ValidateBatch("Rank2Rotation::Apply", n, dim(), in, in_stride,
                                               out, out_stride, sizeof(T));
      !s.ok()) {
    return s;
  }
  for (int64_t j = 0; j < n; ++j) {
    const T* x = in + j * in_stride;
    T* y = out + j * out_stride;
    if (degenerate()) {
      if (x != y) {
        for (int64_t i = 0; i < dim(); ++i) y[i] = x[i];
      }
      continue;
    }
    const SinCos sc = SinCosOfMultiple(positions[j], phi_);
    RotateInPlane(u_, v_, sc.cos, sc.sin, x, y);
  }
  return absl::OkStatus();
}

template <class T>
absl::Status Rank2Rotation::Backward(absl::Span<const int64_t> positions, const T* in,
                                     int64_t in_stride, const T* grad_out,
                                     int64_t grad_out_stride, T* grad_in,
                                     int64_t grad_in_stride, Gradients* grads) const {
  const int64_t n = static_cast<int64_t>(positions.size());
  const int64_t d = dim();
  if (grads == nullptr) return absl::InvalidArgumentError("Rank2Rotation::Backward: null grads");
  // Inputs and upstream gradients are only read, so they may overlap each other.
  if (absl::Status s = internal::ValidateBatch("Rank2Rotation::Backward", n, d, in, in_stride,
                                               in, in_stride, sizeof(T));
      !s.ok()) {
    return s;
  }
  if (absl::Status s = internal::ValidateBatch("Rank2Rotation::Backward", n, d, grad_out,
                                               grad_out_stride, grad_out, grad_out_stride,
                                               sizeof(T));
      !s.ok()) {
    return s;
  }
  if (grad_in != nullptr) {
    if (absl::Status s = internal::ValidateBatch("Rank2Rotation::Backward", n, d, grad_out,
                                                 grad_out_stride, grad_in, grad_in_stride,
                                                 sizeof(T));
        !s.ok()) {
      return s;
    }
  }
  grads->a.assign(d, 0.0);
  grads->b.assign(d, 0.0);
  grads->omega = 0.0;

  const std::vector<double>& a = a_;
  const std::vector<double>& b = b_;
  const double na = Dot(a, a), nb = Dot(b, b), c = Dot(a, b);
  const double q = s0_ * s0_;  // = na nb - c^2, but from the accurate s0
  // dq/da = 2 (nb a - c b), dq/db = 2 (na b - c a).
  std::vector<double> dq_da(d), dq_db(d);
  for (int64_t i = 0; i < d; ++i) {
    dq_da[i] = 2.0 * (nb * a[i] - c * b[i]);
    dq_db[i] = 2.0 * (na * b[i] - c * a[i]);
  }

  // l = g.out = g.x + A P1 + B P2 with A = sin(th)/s0, B = (1 - cos th)/s0^2,
  // th = p omega s0, P1 = g.L x, P2 = g.L^2 x (closed form above, expanded).
  for (int64_t j = 0; j < n; ++j) {
    const T* x = in + j * in_stride;
    const T* g = grad_out + j * grad_out_stride;
    const int64_t p = positions[j];
    const double t = static_cast<double>(p) * omega_;   // p omega
    const double th_raw = static_cast<double>(p) * phi_;  // unreduced, for the factors
    const double th = ReducedAngle(p, phi_);             // reduced, for sin/cos
    const double sn = std::sin(th), cs = std::cos(th);
    double A, B, dA_dq, dB_dq;
    if (std::fabs(th_raw) < kSeriesTheta) {
      // Taylor series in th^2 = t^2 q (exact limits at q = 0).
      const double t2 = th_raw * th_raw;
      A = t * (1.0 - t2 / 6.0 + t2 * t2 / 120.0);
      B = t * t * (0.5 - t2 / 24.0 + t2 * t2 / 720.0);
      dA_dq = t * t * t * (-1.0 / 6.0 + t2 / 60.0 - t2 * t2 / 1680.0);
      dB_dq = t * t * t * t * (-1.0 / 24.0 + t2 / 360.0 - t2 * t2 / 13440.0);
    } else {
      const double one_minus_cos = 2.0 * std::sin(0.5 * th) * std::sin(0.5 * th);
      A = sn / s0_;
      B = one_minus_cos / q;
      dA_dq = (th_raw * cs - sn) / (2.0 * q * s0_);
      dB_dq = (th_raw * sn - 2.0 * one_minus_cos) / (2.0 * q * q);
    }
    const double alpha = Dot(a, x), beta = Dot(b, x);
    const double ga = Dot(a, g), gb = Dot(b, g);
    const double P1 = ga * beta - gb * alpha;
    const double P2 = ga * (c * beta - nb * alpha) - gb * (na * beta - c * alpha);
    const double dq_coef = dA_dq * P1 + dB_dq * P2;
    // d/domega: dA = p cos(th), dB = p A.
    grads->omega += static_cast<double>(p) * (cs * P1 + A * P2);
    for (int64_t i = 0; i < d; ++i) {
      const double xi = static_cast<double>(x[i]), gi = static_cast<double>(g[i]);
      const double dP1_da = gi * beta - xi * gb;
      const double dP1_db = xi * ga - gi * alpha;
      const double dP2_da = gi * (c * beta - nb * alpha) + ga * beta * b[i] - ga * nb * xi -
                            2.0 * gb * beta * a[i] + gb * alpha * b[i] + gb * c * xi;
      const double dP2_db = ga * beta * a[i] + ga * c * xi - 2.0 * ga * alpha * b[i] -
                            gi * na * beta - gb * na * xi + gi * c * alpha + gb * alpha * a[i];
      grads->a[i] += dq_coef * dq_da[i] + A * dP1_da + B * dP2_da;
      grads->b[i] += dq_coef * dq_db[i] + A * dP1_db + B * dP2_db;
    }
  }
  if (grad_in != nullptr) {
    // G(p)^T = G(-p); negate positions without overflow by transposing the action.
    for (int64_t j = 0; j < n; ++j) {
      const T* g = grad_out + j * grad_out_stride;
      T* gx = grad_in + j * grad_in_stride;
      if (degenerate()) {
        if (g != gx) {
          for (int64_t i = 0; i < d; ++i) gx[i] = g[i];
        }
        continue;
      }
      const SinCos sc = SinCosOfMultiple(positions[j], phi_);
      RotateInPlane(u_, v_, sc.cos, -sc.sin, g, gx);
    }
  }
  return absl::OkStatus();
}

template absl::Status Rank2Rotation::Apply<float>(absl::Span<const int64_t>, const float*,
                                                  int64_t, float*, int64_t) const;
template absl::Status Rank2Rotation::Apply<double>(absl::Span<const int64_t>, const double*,
                                                   int64_t, double*, int64_t) const;
template absl::Status Rank2Rotation::Backward<float>(absl::Span<const int64_t>, const float*,
                                                     int64_t, const float*, int64_t, float*,
                                                     int64_t, Gradients*) const;
template absl::Status Rank2Rotation::Backward<double>(absl::Span<const int64_t>,
                                                      const double*, int64_t, const double*,
                                                      int64_t, double*, int64_t,
                                                      Gradients*) const;

}  // namespace group
}  // namespace gpe
