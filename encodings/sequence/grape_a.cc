#include "encodings/sequence/grape_a.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include <Eigen/Dense>
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "encodings/sequence/bias.h"
#include "group/unipotent.h"

namespace gpe {
namespace encodings {
namespace sequence {
namespace {

constexpr int64_t kMaxHeadDim = int64_t{1} << 16;

absl::Status CheckHeadDim(const char* who, int64_t head_dim) {
  if (head_dim < 1 || head_dim > kMaxHeadDim) {
    return absl::InvalidArgumentError(
        absl::StrCat(who, ": head_dim must be in [1, ", kMaxHeadDim, "], got ", head_dim));
  }
  return absl::OkStatus();
}

// n rows of d elements in, d + 2 out; strides in elements; in and out must not overlap.
template <class T>
absl::Status CheckRows(const char* who, int64_t n, int64_t d, const T* in, int64_t in_stride,
                       const T* out, int64_t out_stride) {
  if (n == 0) return absl::OkStatus();
  if (in == nullptr || out == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(who, ": null input or output"));
  }
  if (in_stride < d || out_stride < d + 2) {
    return absl::InvalidArgumentError(absl::StrCat(who, ": strides ", in_stride, " (input) and ",
                                                   out_stride, " (output) must be at least ", d,
                                                   " and ", d + 2));
  }
  const T* in_end = in + (n - 1) * in_stride + d;
  const T* out_end = out + (n - 1) * out_stride + d + 2;
  if (in < out_end && out < in_end) {
    return absl::InvalidArgumentError(absl::StrCat(who, ": input and output overlap"));
  }
  return absl::OkStatus();
}

}  // namespace

Eigen::MatrixXd GrapeAGenerator(int64_t head_dim) {
  Eigen::MatrixXd a = Eigen::MatrixXd::Zero(head_dim + 2, head_dim + 2);
  a(head_dim, head_dim + 1) = 1.0;
  return a;
}

absl::StatusOr<GrapeALift> GrapeALift::Create(int64_t head_dim, double slope) {
  if (absl::Status s = CheckHeadDim("GrapeALift", head_dim); !s.ok()) return s;
  if (!std::isfinite(slope)) return absl::InvalidArgumentError("GrapeALift: slope is not finite");
  const Eigen::MatrixXd a = GrapeAGenerator(head_dim);
  // Keys: G(j) = I + j m A. Queries: G(i)^-T = (I - i m A)^T = I + i (-m) A^T.
  absl::StatusOr<group::UnipotentRepresentation> key_rep =
      group::UnipotentRepresentation::Create(a, slope);
  if (!key_rep.ok()) return key_rep.status();
  absl::StatusOr<group::UnipotentRepresentation> query_rep =
      group::UnipotentRepresentation::Create(a.transpose(), -slope);
  if (!query_rep.ok()) return query_rep.status();
  return GrapeALift(head_dim, slope, *std::move(query_rep), *std::move(key_rep));
}

absl::StatusOr<GrapeALift> GrapeALift::FromAlibi(const AlibiBias& alibi, int64_t head,
                                                 int64_t head_dim) {
  if (alibi.form() != AlibiForm::kCausal) {
    return absl::InvalidArgumentError(
        "GrapeALift: only causal ALiBi is a one-parameter unipotent action; symmetric "
        "-m |i - j| has no lift");
  }
  if (head < 0 || head >= alibi.num_heads()) {
    return absl::InvalidArgumentError(
        absl::StrCat("GrapeALift: head ", head, " outside [0, ", alibi.num_heads(), ")"));
  }
  return Create(head_dim, alibi.slopes()[head]);
}

template <class T>
absl::Status GrapeALift::LiftQueries(absl::Span<const int64_t> positions, const T* q,
                                     int64_t q_stride, T* out, int64_t out_stride) const {
  const int64_t n = static_cast<int64_t>(positions.size()), d = head_dim_;
  if (absl::Status s = CheckRows("GrapeALift::LiftQueries", n, d, q, q_stride, out, out_stride);
      !s.ok()) {
    return s;
  }
  for (int64_t r = 0; r < n; ++r) {  // homogeneous lift [q; 1; 0]
    for (int64_t c = 0; c < d; ++c) out[r * out_stride + c] = q[r * q_stride + c];
    out[r * out_stride + d] = T(1);
    out[r * out_stride + d + 1] = T(0);
  }
  return query_rep_.Apply(positions, out, out_stride, out, out_stride);
}

template <class T>
absl::Status GrapeALift::LiftKeys(absl::Span<const int64_t> positions, const T* k, int64_t k_stride,
                                  T* out, int64_t out_stride) const {
  const int64_t n = static_cast<int64_t>(positions.size()), d = head_dim_;
  if (absl::Status s = CheckRows("GrapeALift::LiftKeys", n, d, k, k_stride, out, out_stride);
      !s.ok()) {
    return s;
  }
  for (int64_t r = 0; r < n; ++r) {  // homogeneous lift [k; 0; 1]
    for (int64_t c = 0; c < d; ++c) out[r * out_stride + c] = k[r * k_stride + c];
    out[r * out_stride + d] = T(0);
    out[r * out_stride + d + 1] = T(1);
  }
  return key_rep_.Apply(positions, out, out_stride, out, out_stride);
}

template absl::Status GrapeALift::LiftQueries<float>(absl::Span<const int64_t>, const float*,
                                                     int64_t, float*, int64_t) const;
template absl::Status GrapeALift::LiftQueries<double>(absl::Span<const int64_t>, const double*,
                                                      int64_t, double*, int64_t) const;
template absl::Status GrapeALift::LiftKeys<float>(absl::Span<const int64_t>, const float*, int64_t,
                                                  float*, int64_t) const;
template absl::Status GrapeALift::LiftKeys<double>(absl::Span<const int64_t>, const double*,
                                                   int64_t, double*, int64_t) const;

absl::StatusOr<GrapeAGatedLift> GrapeAGatedLift::Create(const FoxBias* fox, int64_t head,
                                                        int64_t head_dim) {
  if (fox == nullptr) return absl::InvalidArgumentError("GrapeAGatedLift: null FoxBias");
  if (absl::Status s = CheckHeadDim("GrapeAGatedLift", head_dim); !s.ok()) return s;
  if (head < 0 || head >= fox->num_heads()) {
    return absl::InvalidArgumentError(
        absl::StrCat("GrapeAGatedLift: head ", head, " outside [0, ", fox->num_heads(), ")"));
  }
  return GrapeAGatedLift(fox, head, head_dim);
}

template <class T>
absl::Status GrapeAGatedLift::Lift(bool query, absl::Span<const int64_t> positions, const T* in,
                                   int64_t in_stride, T* out, int64_t out_stride) const {
  const int64_t n = static_cast<int64_t>(positions.size()), d = head_dim_;
  if (absl::Status s = CheckRows("GrapeAGatedLift", n, d, in, in_stride, out, out_stride);
      !s.ok()) {
    return s;
  }
  const int64_t first = fox_->first_position(), length = fox_->length();
  for (int64_t p : positions) {
    if (p < first || p >= first + length) {
      return absl::InvalidArgumentError(absl::StrCat("GrapeAGatedLift: position ", p, " outside [",
                                                     first, ", ", first + length, ")"));
    }
  }
  for (int64_t r = 0; r < n; ++r) {
    const double c = fox_->PrefixSum(head_, positions[r] - first);
    T* row = out + r * out_stride;
    for (int64_t i = 0; i < d; ++i) row[i] = in[r * in_stride + i];
    // Query: (I - c_i A)^-T [q; 1; 0] = [q; 1; c_i]. Key: (I - c_j A) [k; 0; 1] = [k; -c_j; 1].
    row[d] = query ? T(1) : static_cast<T>(-c);
    row[d + 1] = query ? static_cast<T>(c) : T(1);
  }
  return absl::OkStatus();
}

template <class T>
absl::Status GrapeAGatedLift::LiftQueries(absl::Span<const int64_t> positions, const T* q,
                                          int64_t q_stride, T* out, int64_t out_stride) const {
  return Lift(true, positions, q, q_stride, out, out_stride);
}

template <class T>
absl::Status GrapeAGatedLift::LiftKeys(absl::Span<const int64_t> positions, const T* k,
                                       int64_t k_stride, T* out, int64_t out_stride) const {
  return Lift(false, positions, k, k_stride, out, out_stride);
}

template absl::Status GrapeAGatedLift::LiftQueries<float>(absl::Span<const int64_t>, const float*,
                                                          int64_t, float*, int64_t) const;
template absl::Status GrapeAGatedLift::LiftQueries<double>(absl::Span<const int64_t>, const double*,
                                                           int64_t, double*, int64_t) const;
template absl::Status GrapeAGatedLift::LiftKeys<float>(absl::Span<const int64_t>, const float*,
                                                       int64_t, float*, int64_t) const;
template absl::Status GrapeAGatedLift::LiftKeys<double>(absl::Span<const int64_t>, const double*,
                                                        int64_t, double*, int64_t) const;


// ---------------------------------------------------------------------------------
// GrapeABias
// ---------------------------------------------------------------------------------

absl::StatusOr<GrapeABias> GrapeABias::Create(std::vector<double> slopes, int64_t head_dim,
                                              GrapeAPath path) {
  if (absl::Status s = CheckHeadDim("GrapeABias", head_dim); !s.ok()) return s;
  // AlibiBias::Create checks the slopes (at least one head, all finite).
  absl::StatusOr<AlibiBias> alibi = AlibiBias::Create(std::move(slopes), AlibiForm::kCausal);
  if (!alibi.ok()) return alibi.status();
  return GrapeABias(*std::move(alibi), nullptr, head_dim, path);
}

absl::StatusOr<GrapeABias> GrapeABias::CreateGated(FoxBias fox, int64_t head_dim,
                                                   GrapeAPath path) {
  if (absl::Status s = CheckHeadDim("GrapeABias", head_dim); !s.ok()) return s;
  return GrapeABias(std::nullopt, std::make_shared<const FoxBias>(std::move(fox)), head_dim,
                    path);
}

int64_t GrapeABias::num_heads() const {
  return gated() ? fox_->num_heads() : alibi_->num_heads();
}

template <class T>
absl::Status GrapeABias::LiftQueries(int64_t head, absl::Span<const int64_t> positions,
                                     const T* q, int64_t q_stride, T* out,
                                     int64_t out_stride) const {
  if (gated()) {
    absl::StatusOr<GrapeAGatedLift> lift = GrapeAGatedLift::Create(fox_.get(), head, head_dim_);
    if (!lift.ok()) return lift.status();
    return lift->LiftQueries(positions, q, q_stride, out, out_stride);
  }
  absl::StatusOr<GrapeALift> lift = GrapeALift::FromAlibi(*alibi_, head, head_dim_);
  if (!lift.ok()) return lift.status();
  return lift->LiftQueries(positions, q, q_stride, out, out_stride);
}

template <class T>
absl::Status GrapeABias::LiftKeys(int64_t head, absl::Span<const int64_t> positions, const T* k,
                                  int64_t k_stride, T* out, int64_t out_stride) const {
  if (gated()) {
    absl::StatusOr<GrapeAGatedLift> lift = GrapeAGatedLift::Create(fox_.get(), head, head_dim_);
    if (!lift.ok()) return lift.status();
    return lift->LiftKeys(positions, k, k_stride, out, out_stride);
  }
  absl::StatusOr<GrapeALift> lift = GrapeALift::FromAlibi(*alibi_, head, head_dim_);
  if (!lift.ok()) return lift.status();
  return lift->LiftKeys(positions, k, k_stride, out, out_stride);
}

template <class T>
absl::Status GrapeABias::FillLifted(int64_t head, absl::Span<const int64_t> q,
                                    absl::Span<const int64_t> k, T* out, int64_t ld) const {
  // The general path: lifted rows of zero content, [0; 1; 0] at each query position and
  // [0; 0; 1] at each key position, moved by the unipotent action; the bias is their
  // (d+2)-term dot product (the content part contributes <0, 0> = 0).
  const int64_t w = lifted_dim();
  const int64_t d = head_dim_;
  const std::vector<double> zeros(std::max(q.size(), k.size()) * static_cast<size_t>(d), 0.0);
  std::vector<double> lq(q.size() * static_cast<size_t>(w)), lk(k.size() * static_cast<size_t>(w));
  if (absl::Status s = LiftQueries<double>(head, q, zeros.data(), d, lq.data(), w); !s.ok()) {
    return s;
  }
  if (absl::Status s = LiftKeys<double>(head, k, zeros.data(), d, lk.data(), w); !s.ok()) {
    return s;
  }
  for (size_t r = 0; r < q.size(); ++r) {
    const double* qr = lq.data() + r * w;
    T* row = out + static_cast<int64_t>(r) * ld;
    for (size_t c = 0; c < k.size(); ++c) {
      const double* kc = lk.data() + c * w;
      double dot = 0.0;
      for (int64_t e = 0; e < w; ++e) dot += qr[e] * kc[e];
      row[c] = static_cast<T>(dot);
    }
  }
  return absl::OkStatus();
}

template <class T>
absl::Status GrapeABias::Fill(int64_t head, absl::Span<const int64_t> q,
                              absl::Span<const int64_t> k, T* out, int64_t ld) const {
  if (path_ == GrapeAPath::kLifted) return FillLifted(head, q, k, out, ld);
  // The fast path: GRAPE-A's closed forms, -m (i - j) (ALiBi) or c_i - c_j (FoX).
  if (gated()) return fox_->FillTile(head, q, k, out, ld);
  return alibi_->FillTile(head, q, k, out, ld);
}

template class AdditiveBiasFromFill<GrapeABias>;

template <class T>
absl::Status GrapeABias::AccumulateSlopeGradient(int64_t head,
                                                 absl::Span<const int64_t> q_positions,
                                                 absl::Span<const int64_t> k_positions,
                                                 const T* grad_tile, int64_t ld,
                                                 absl::Span<double> grad_slopes) const {
  if (gated()) {
    return absl::InvalidArgumentError(
        "GrapeABias::AccumulateSlopeGradient: the gated form has no slopes (use "
        "AccumulatePrefixGradient)");
  }
  // b = m (j - i) on both paths, so db/dm = j - i: causal ALiBi's.
  return alibi_->AccumulateSlopeGradient(head, q_positions, k_positions, grad_tile, ld,
                                         grad_slopes);
}

template <class T>
absl::Status GrapeABias::AccumulatePrefixGradient(int64_t head,
                                                  absl::Span<const int64_t> q_positions,
                                                  absl::Span<const int64_t> k_positions,
                                                  const T* grad_tile, int64_t ld,
                                                  absl::Span<double> grad_prefix) const {
  if (!gated()) {
    return absl::InvalidArgumentError(
        "GrapeABias::AccumulatePrefixGradient: only the gated form has prefix sums");
  }
  return fox_->AccumulatePrefixGradient(head, q_positions, k_positions, grad_tile, ld,
                                        grad_prefix);
}

absl::StatusOr<std::vector<double>> GrapeABias::LogitGradient(
    absl::Span<const double> grad_prefix) const {
  if (!gated()) {
    return absl::InvalidArgumentError(
        "GrapeABias::LogitGradient: only the gated form has gate logits");
  }
  return fox_->LogitGradient(grad_prefix);
}

#define GPE_GRAPE_A_BIAS_INSTANTIATE(T)                                                        \
  template absl::Status GrapeABias::LiftQueries<T>(int64_t, absl::Span<const int64_t>,         \
                                                   const T*, int64_t, T*, int64_t) const;      \
  template absl::Status GrapeABias::LiftKeys<T>(int64_t, absl::Span<const int64_t>, const T*,  \
                                                int64_t, T*, int64_t) const;                   \
  template absl::Status GrapeABias::AccumulateSlopeGradient<T>(                                \
      int64_t, absl::Span<const int64_t>, absl::Span<const int64_t>, const T*, int64_t,        \
      absl::Span<double>) const;                                                               \
  template absl::Status GrapeABias::AccumulatePrefixGradient<T>(                               \
      int64_t, absl::Span<const int64_t>, absl::Span<const int64_t>, const T*, int64_t,        \
      absl::Span<double>) const;
GPE_GRAPE_A_BIAS_INSTANTIATE(float)
GPE_GRAPE_A_BIAS_INSTANTIATE(double)
#undef GPE_GRAPE_A_BIAS_INSTANTIATE

}  // namespace sequence
}  // namespace encodings
}  // namespace gpe
