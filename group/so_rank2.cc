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
  // Degenerate generators are L = 0 (header), as Matrix(p) = I treats them.
  if (degenerate()) return Eigen::MatrixXd::Zero(dim(), dim());
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

  // l = g.out = g.x + A g^T W x + B g^T W^2 x for W = a b^T - b a^T (rank-2 skew,
  // W = s0 (u v^T - v u^T)), A = sin(th)/s0, B = (1 - cos th)/s0^2, th = p omega s0. With
  // G = dl/dW (W taken as a free matrix; s0^2 = |W|_F^2 / 2 carries A and B):
  //   G = A g x^T + B (g (Wx)^T + (W^T g) x^T) + kappa W,
  //   kappa = dA/dq g^T W x + dB/dq g^T W^2 x  (q = s0^2),
  // and dl/da = (G - G^T) b, dl/db = -(G - G^T) a. Every product with W is taken in the
  // orthonormal frame (W y = s0 (u (v.y) - v (u.y)); u.a = |a|, v.a = 0, v.b = s0 / |a|
  // exactly), never as nb a - c b or na nb - c^2: for nearly parallel a and b those
  // cancel (a relative error of eps / angle^2), and s0^2 may overflow where s0 does not.
  const std::vector<double>& a = a_;
  const std::vector<double>& b = b_;
  const bool flat = degenerate();
  const double norm_a = std::sqrt(Dot(a, a));
  const double ua = norm_a, va = 0.0;
  const double ub = flat ? 0.0 : Dot(u_, b), vb = flat ? 0.0 : s0_ / norm_a;
  const double inv = flat ? 0.0 : 1.0 / s0_;
  for (int64_t j = 0; j < n; ++j) {
    const T* x = in + j * in_stride;
    const T* g = grad_out + j * grad_out_stride;
    const int64_t p = positions[j];
    const double t = static_cast<double>(p) * omega_;   // p omega
    const double th_raw = static_cast<double>(p) * phi_;  // unreduced, for the factors
    const double th = ReducedAngle(p, phi_);             // reduced, for sin/cos
    const double sn = std::sin(th), cs = std::cos(th);
    // In the frame: x_u, x_v, g_u, g_v; g^T W x = s0 p1, g^T W^2 x = -s0^2 p2.
    double xu = 0, xv = 0, gu = 0, gv = 0;
    if (!flat) {
      xu = Dot(u_, x), xv = Dot(v_, x), gu = Dot(u_, g), gv = Dot(v_, g);
    }
    const double p1 = gu * xv - gv * xu, p2 = gu * xu + gv * xv;
    // The coefficients of dl/da = cA [g (x.b) - x (g.b)] + cB [...W x, W^T g...] + cK W^ b,
    // with W x = s0 wx, W^T g = s0 wg and W y = s0 W^ y (W^ = u v^T - v u^T): cA = A,
    // cB = B s0, cK = 2 kappa s0.
    double cA, cB, cK, a_s0sq;  // a_s0sq = A s0^2 (for d/domega)
    if (std::fabs(th_raw) < kSeriesTheta) {
      // Taylor series in th^2 = t^2 q (exact limits at q = 0).
      const double t2 = th_raw * th_raw;
      const double A = t * (1.0 - t2 / 6.0 + t2 * t2 / 120.0);
      const double B = t * t * (0.5 - t2 / 24.0 + t2 * t2 / 720.0);
      const double dA_dq = t * t * t * (-1.0 / 6.0 + t2 / 60.0 - t2 * t2 / 1680.0);
      const double dB_dq = t * t * t * t * (-1.0 / 24.0 + t2 / 360.0 - t2 * t2 / 13440.0);
      cA = A;
      cB = B * s0_;
      cK = 2.0 * s0_ * s0_ * (dA_dq * p1 - dB_dq * s0_ * p2);
      a_s0sq = A * s0_ * s0_;
    } else {
      // A = sn / s0, B s0 = (1 - cos th) / s0, and 2 kappa s0 =
      // [(th cos th - sin th) p1 - (th sin th - 2 (1 - cos th)) p2] / s0.
      const double omc = 2.0 * std::sin(0.5 * th) * std::sin(0.5 * th);
      cA = sn * inv;
      cB = omc * inv;
      cK = ((th_raw * cs - sn) * p1 - (th_raw * sn - 2.0 * omc) * p2) * inv;
      a_s0sq = sn * s0_;
    }
    // d/domega: dA = p cos(th) (times g^T W x = s0 p1), dB = p A (times -s0^2 p2).
    grads->omega += static_cast<double>(p) * (cs * s0_ * p1 - a_s0sq * p2);
    const double xb = Dot(b, x), gb = Dot(b, g), xa = Dot(a, x), ga = Dot(a, g);
    // (W^ x).y = x_v (u.y) - x_u (v.y); (W^ g)^T... with wg = W^T g / s0 = v g_u - u g_v.
    const double wx_b = xv * ub - xu * vb, wg_b = gu * vb - gv * ub;
    const double wx_a = xv * ua - xu * va, wg_a = gu * va - gv * ua;
    for (int64_t i = 0; i < d; ++i) {
      const double xi = static_cast<double>(x[i]), gi = static_cast<double>(g[i]);
      const double ui = flat ? 0.0 : u_[i], vi = flat ? 0.0 : v_[i];
      const double wxi = ui * xv - vi * xu;  // (W^ x)_i
      const double wgi = vi * gu - ui * gv;  // (W^T g)_i / s0
      // (G - G^T) y / (scale) for y = b and y = a.
      const double gb_i = cA * (gi * xb - xi * gb) +
                          cB * (gi * wx_b - wxi * gb + wgi * xb - xi * wg_b) +
                          cK * (ui * vb - vi * ub);
      const double ga_i = cA * (gi * xa - xi * ga) +
                          cB * (gi * wx_a - wxi * ga + wgi * xa - xi * wg_a) +
                          cK * (ui * va - vi * ua);
      grads->a[i] += gb_i;
      grads->b[i] -= ga_i;
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
