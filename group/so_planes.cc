#include "group/so_planes.h"

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

// Rotates the planes of one vector given per-plane angles. Reads both coordinates of a
// pair before writing, so in == out is safe.
template <class T>
void RotateVector(const PlaneLayout& layout, const double* angles, double* cos_buf,
                  double* sin_buf, const T* in, T* out) {
  const int64_t planes = layout.num_planes();
  for (int64_t i = 0; i < planes; ++i) {
    cos_buf[i] = std::cos(angles[i]);
    sin_buf[i] = std::sin(angles[i]);
  }
  for (int64_t i = 0; i < planes; ++i) {
    const int64_t i1 = layout.first(i), i2 = layout.second(i);
    const double x1 = static_cast<double>(in[i1]);
    const double x2 = static_cast<double>(in[i2]);
    out[i1] = static_cast<T>(x1 * cos_buf[i] - x2 * sin_buf[i]);
    out[i2] = static_cast<T>(x1 * sin_buf[i] + x2 * cos_buf[i]);
  }
  if (in != out) {
    for (int64_t c = layout.rotary_dim(); c < layout.dim(); ++c) out[c] = in[c];
  }
}

// Shared batch loop; angle_of(p, angles) fills one angle per plane.
template <class T, class AngleFn>
absl::Status ApplyPlanes(const char* who, const PlaneLayout& layout,
                         absl::Span<const int64_t> positions, const T* in, int64_t in_stride,
                         T* out, int64_t out_stride, AngleFn angle_of) {
  const int64_t n = static_cast<int64_t>(positions.size());
  if (absl::Status s = internal::ValidateBatch(who, n, layout.dim(), in, in_stride, out,
                                               out_stride, sizeof(T));
      !s.ok()) {
    return s;
  }
  std::vector<double> buf(3 * static_cast<size_t>(layout.num_planes()));
  double* angles = buf.data();
  double* cos_buf = angles + layout.num_planes();
  double* sin_buf = cos_buf + layout.num_planes();
  for (int64_t j = 0; j < n; ++j) {
    angle_of(positions[j], angles);
    RotateVector(layout, angles, cos_buf, sin_buf, in + j * in_stride, out + j * out_stride);
  }
  return absl::OkStatus();
}

template <class AngleFn>
Eigen::MatrixXd PlaneMatrix(const PlaneLayout& layout, AngleFn angle_of_plane) {
  Eigen::MatrixXd m = Eigen::MatrixXd::Identity(layout.dim(), layout.dim());
  for (int64_t i = 0; i < layout.num_planes(); ++i) {
    const double a = angle_of_plane(i);
    const int64_t i1 = layout.first(i), i2 = layout.second(i);
    m(i1, i1) = std::cos(a);
    m(i1, i2) = -std::sin(a);
    m(i2, i1) = std::sin(a);
    m(i2, i2) = std::cos(a);
  }
  return m;
}

// Block generator: S(i1, i2) = -w, S(i2, i1) = w, so exp(p S) rotates (x1, x2) by p w.
template <class FreqFn>
Eigen::MatrixXd PlaneGenerator(const PlaneLayout& layout, FreqFn freq_of_plane) {
  Eigen::MatrixXd s = Eigen::MatrixXd::Zero(layout.dim(), layout.dim());
  for (int64_t i = 0; i < layout.num_planes(); ++i) {
    const double w = freq_of_plane(i);
    s(layout.first(i), layout.second(i)) = -w;
    s(layout.second(i), layout.first(i)) = w;
  }
  return s;
}

}  // namespace

absl::StatusOr<PlaneLayout> PlaneLayout::Create(int64_t dim, int64_t rotary_dim,
                                                PlanePairing pairing) {
  if (dim < 1) return absl::InvalidArgumentError(absl::StrCat("dim must be >= 1, got ", dim));
  if (rotary_dim < 2 || rotary_dim % 2 != 0 || rotary_dim > dim) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rotary_dim must be even, >= 2 and <= dim (", dim, "), got ", rotary_dim));
  }
  if (pairing != PlanePairing::kInterleaved && pairing != PlanePairing::kHalfSplit) {
    return absl::InvalidArgumentError("unknown plane pairing");
  }
  return PlaneLayout(dim, rotary_dim, pairing);
}

absl::StatusOr<CommutingPlanes> CommutingPlanes::Create(int64_t dim, int64_t rotary_dim,
                                                        std::vector<double> thetas,
                                                        PlanePairing pairing) {
  absl::StatusOr<PlaneLayout> layout = PlaneLayout::Create(dim, rotary_dim, pairing);
  if (!layout.ok()) return layout.status();
  if (static_cast<int64_t>(thetas.size()) != layout->num_planes()) {
    return absl::InvalidArgumentError(absl::StrCat("CommutingPlanes: ", thetas.size(),
                                                   " thetas for ", layout->num_planes(),
                                                   " planes"));
  }
  for (size_t i = 0; i < thetas.size(); ++i) {
    if (!std::isfinite(thetas[i])) {
      return absl::InvalidArgumentError(
          absl::StrCat("CommutingPlanes: theta[", i, "] is not finite"));
    }
  }
  return CommutingPlanes(*layout, std::move(thetas));
}

Eigen::MatrixXd CommutingPlanes::Generator() const {
  return PlaneGenerator(layout_, [&](int64_t i) { return thetas_[i]; });
}

Eigen::MatrixXd CommutingPlanes::Matrix(int64_t p) const {
  return PlaneMatrix(layout_, [&](int64_t i) { return ReducedAngle(p, thetas_[i]); });
}

template <class T>
absl::Status CommutingPlanes::Apply(absl::Span<const int64_t> positions, const T* in,
                                    int64_t in_stride, T* out, int64_t out_stride) const {
  return ApplyPlanes("CommutingPlanes::Apply", layout_, positions, in, in_stride, out,
                     out_stride, [&](int64_t p, double* angles) {
                       for (size_t i = 0; i < thetas_.size(); ++i) {
                         angles[i] = ReducedAngle(p, thetas_[i]);
                       }
                     });
}

template absl::Status CommutingPlanes::Apply<float>(absl::Span<const int64_t>, const float*,
                                                    int64_t, float*, int64_t) const;
template absl::Status CommutingPlanes::Apply<double>(absl::Span<const int64_t>, const double*,
                                                     int64_t, double*, int64_t) const;

absl::StatusOr<CyclicPlanes> CyclicPlanes::Create(int64_t dim, int64_t rotary_dim, int64_t n,
                                                  std::vector<int64_t> multipliers,
                                                  PlanePairing pairing) {
  absl::StatusOr<PlaneLayout> layout = PlaneLayout::Create(dim, rotary_dim, pairing);
  if (!layout.ok()) return layout.status();
  if (n < 1) return absl::InvalidArgumentError(absl::StrCat("CyclicPlanes: n must be >= 1, got ", n));
  if (static_cast<int64_t>(multipliers.size()) != layout->num_planes()) {
    return absl::InvalidArgumentError(absl::StrCat("CyclicPlanes: ", multipliers.size(),
                                                   " multipliers for ", layout->num_planes(),
                                                   " planes"));
  }
  return CyclicPlanes(*layout, n, std::move(multipliers));
}

Eigen::MatrixXd CyclicPlanes::Generator() const {
  return PlaneGenerator(layout_, [&](int64_t i) { return CyclicAngle(1, multipliers_[i], n_); });
}

Eigen::MatrixXd CyclicPlanes::Matrix(int64_t p) const {
  return PlaneMatrix(layout_, [&](int64_t i) { return CyclicAngle(p, multipliers_[i], n_); });
}

template <class T>
absl::Status CyclicPlanes::Apply(absl::Span<const int64_t> positions, const T* in,
                                 int64_t in_stride, T* out, int64_t out_stride) const {
  return ApplyPlanes("CyclicPlanes::Apply", layout_, positions, in, in_stride, out,
                     out_stride, [&](int64_t p, double* angles) {
                       for (size_t i = 0; i < multipliers_.size(); ++i) {
                         angles[i] = CyclicAngle(p, multipliers_[i], n_);
                       }
                     });
}

template absl::Status CyclicPlanes::Apply<float>(absl::Span<const int64_t>, const float*,
                                                 int64_t, float*, int64_t) const;
template absl::Status CyclicPlanes::Apply<double>(absl::Span<const int64_t>, const double*,
                                                  int64_t, double*, int64_t) const;

}  // namespace group
}  // namespace gpe
