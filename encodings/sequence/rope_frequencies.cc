// The frequency schedules of rope.h (RoFormer's base frequencies and the context
// extensions: linear interpolation, dynamic NTK, YaRN, LongRoPE, Llama 3; axial and
// M-RoPE plane assignments). The rotation itself is in rope.cc.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "encodings/sequence/rope.h"
#include "encodings/sequence/rope_checks.h"
#include "group/angle.h"

namespace gpe {
namespace encodings {
namespace sequence {
namespace {

using absl::InvalidArgumentError;
using absl::StrCat;
using rope_internal::CheckBase;
using rope_internal::CheckPositive;
using rope_internal::CheckRotaryDim;

// theta_i = base^(-2i/r) (RoFormer eq. 15).
std::vector<double> BaseThetas(int64_t rotary_dim, double base) {
  std::vector<double> t(rotary_dim / 2);
  for (int64_t i = 0; i < rotary_dim / 2; ++i) {
    t[i] = std::pow(base, -2.0 * static_cast<double>(i) / static_cast<double>(rotary_dim));
  }
  return t;
}

}  // namespace

// ---------------------------------------------------------------------------------
// Schedules.
// ---------------------------------------------------------------------------------
absl::StatusOr<RopeFrequencies> DefaultRopeFrequencies(int64_t rotary_dim, double base) {
  GPE_RETURN_IF_ERROR(CheckRotaryDim("DefaultRopeFrequencies", rotary_dim));
  GPE_RETURN_IF_ERROR(CheckBase("DefaultRopeFrequencies", base));
  return RopeFrequencies{BaseThetas(rotary_dim, base), 1.0};
}

absl::StatusOr<RopeFrequencies> LinearRopeFrequencies(int64_t rotary_dim, double base,
                                                      double factor) {
  const char* who = "LinearRopeFrequencies";
  GPE_RETURN_IF_ERROR(CheckRotaryDim(who, rotary_dim));
  GPE_RETURN_IF_ERROR(CheckBase(who, base));
  GPE_RETURN_IF_ERROR(CheckPositive(who, "factor", factor));
  RopeFrequencies f{BaseThetas(rotary_dim, base), 1.0};
  for (double& t : f.thetas) t /= factor;
  return f;
}

absl::StatusOr<RopeFrequencies> DynamicNtkRopeFrequencies(int64_t rotary_dim, double base,
                                                          double factor,
                                                          int64_t max_position,
                                                          int64_t current_length) {
  const char* who = "DynamicNtkRopeFrequencies";
  GPE_RETURN_IF_ERROR(CheckRotaryDim(who, rotary_dim));
  if (rotary_dim < 4) {
    return InvalidArgumentError(StrCat(who, ": rotary_dim must be >= 4 (exponent r/(r-2))"));
  }
  GPE_RETURN_IF_ERROR(CheckBase(who, base));
  GPE_RETURN_IF_ERROR(CheckPositive(who, "factor", factor));
  if (max_position < 1 || current_length < 0) {
    return InvalidArgumentError(StrCat(who, ": need max_position >= 1 and current_length >= 0, got ",
                                       max_position, ", ", current_length));
  }
  double new_base = base;
  if (current_length > max_position) {
    const double r = static_cast<double>(rotary_dim);
    const double ratio = factor * static_cast<double>(current_length) /
                             static_cast<double>(max_position) -
                         (factor - 1.0);
    new_base = base * std::pow(ratio, r / (r - 2.0));
    if (!std::isfinite(new_base) || !(new_base > 1.0)) {
      return InvalidArgumentError(StrCat(who, ": scaled base ", new_base, " is not finite and > 1"));
    }
  }
  return RopeFrequencies{BaseThetas(rotary_dim, new_base), 1.0};
}

absl::StatusOr<RopeFrequencies> YarnRopeFrequencies(int64_t rotary_dim, double base,
                                                    const YarnOptions& o) {
  const char* who = "YarnRopeFrequencies";
  GPE_RETURN_IF_ERROR(CheckRotaryDim(who, rotary_dim));
  GPE_RETURN_IF_ERROR(CheckBase(who, base));
  if (!std::isfinite(o.factor) || !(o.factor >= 1.0)) {
    return InvalidArgumentError(StrCat(who, ": factor must be finite and >= 1, got ", o.factor));
  }
  if (o.original_max_position < 1) {
    return InvalidArgumentError(
        StrCat(who, ": original_max_position must be >= 1, got ", o.original_max_position));
  }
  GPE_RETURN_IF_ERROR(CheckPositive(who, "beta_slow", o.beta_slow));
  GPE_RETURN_IF_ERROR(CheckPositive(who, "beta_fast", o.beta_fast));
  if (!(o.beta_fast > o.beta_slow)) {
    return InvalidArgumentError(StrCat(who, ": beta_fast (", o.beta_fast,
                                       ") must exceed beta_slow (", o.beta_slow, ")"));
  }
  if (o.attention_factor.has_value()) {
    GPE_RETURN_IF_ERROR(CheckPositive(who, "attention_factor", *o.attention_factor));
  }
  const double r = static_cast<double>(rotary_dim);
  const double l0 = static_cast<double>(o.original_max_position);
  // Plane index whose wavelength spans b rotations over L0 (YaRN eq. 17-18).
  auto corr = [&](double b) { return r * std::log(l0 / (group::kTwoPi * b)) / (2.0 * std::log(base)); };
  const double low =
      std::max(o.truncate ? std::floor(corr(o.beta_fast)) : corr(o.beta_fast), 0.0);
  double high = std::min(o.truncate ? std::ceil(corr(o.beta_slow)) : corr(o.beta_slow), r - 1.0);
  if (high == low) high += 0.001;
  // YaRN sec. 3.4: sqrt(1/t) = 0.1 ln s + 1 (s > 1).
  auto mscale = [&](double k) { return o.factor > 1.0 ? 0.1 * k * std::log(o.factor) + 1.0 : 1.0; };
  double attention = mscale(1.0);
  if (o.mscale.has_value() || o.mscale_all_dim.has_value()) {
    if (!o.mscale.has_value() || !o.mscale_all_dim.has_value()) {
      return InvalidArgumentError(StrCat(who, ": set both mscale and mscale_all_dim, or neither"));
    }
    GPE_RETURN_IF_ERROR(CheckPositive(who, "mscale", *o.mscale));
    GPE_RETURN_IF_ERROR(CheckPositive(who, "mscale_all_dim", *o.mscale_all_dim));
    attention = mscale(*o.mscale) / mscale(*o.mscale_all_dim);
  }
  RopeFrequencies f{BaseThetas(rotary_dim, base), o.attention_factor.value_or(attention)};
  for (int64_t i = 0; i < rotary_dim / 2; ++i) {
    const double ramp = std::clamp((static_cast<double>(i) - low) / (high - low), 0.0, 1.0);
    f.thetas[i] = f.thetas[i] / o.factor * ramp + f.thetas[i] * (1.0 - ramp);
  }
  return f;
}

absl::StatusOr<RopeFrequencies> LongRopeFrequencies(int64_t rotary_dim, double base,
                                                    const LongRopeOptions& o,
                                                    int64_t current_length) {
  const char* who = "LongRopeFrequencies";
  GPE_RETURN_IF_ERROR(CheckRotaryDim(who, rotary_dim));
  GPE_RETURN_IF_ERROR(CheckBase(who, base));
  const size_t planes = static_cast<size_t>(rotary_dim / 2);
  if (o.short_factor.size() != planes || o.long_factor.size() != planes) {
    return InvalidArgumentError(StrCat(who, ": short_factor and long_factor need ", planes,
                                       " values each, got ", o.short_factor.size(), " and ",
                                       o.long_factor.size()));
  }
  for (size_t i = 0; i < planes; ++i) {
    GPE_RETURN_IF_ERROR(CheckPositive(who, "short_factor", o.short_factor[i]));
    GPE_RETURN_IF_ERROR(CheckPositive(who, "long_factor", o.long_factor[i]));
  }
  if (o.original_max_position < 2 || o.max_position < 1 || current_length < 0) {
    return InvalidArgumentError(StrCat(
        who, ": need original_max_position >= 2, max_position >= 1, current_length >= 0; got ",
        o.original_max_position, ", ", o.max_position, ", ", current_length));
  }
  if (o.attention_factor.has_value()) {
    GPE_RETURN_IF_ERROR(CheckPositive(who, "attention_factor", *o.attention_factor));
  }
  const std::vector<double>& e =
      current_length > o.original_max_position ? o.long_factor : o.short_factor;
  RopeFrequencies f{BaseThetas(rotary_dim, base), 1.0};
  for (size_t i = 0; i < planes; ++i) f.thetas[i] /= e[i];
  if (o.attention_factor.has_value()) {
    f.attention_factor = *o.attention_factor;
  } else {
    const double l0 = static_cast<double>(o.original_max_position);
    const double s = static_cast<double>(o.max_position) / l0;
    f.attention_factor = s > 1.0 ? std::sqrt(1.0 + std::log(s) / std::log(l0)) : 1.0;
  }
  return f;
}

absl::StatusOr<RopeFrequencies> Llama3RopeFrequencies(int64_t rotary_dim, double base,
                                                      const Llama3Options& o) {
  const char* who = "Llama3RopeFrequencies";
  GPE_RETURN_IF_ERROR(CheckRotaryDim(who, rotary_dim));
  GPE_RETURN_IF_ERROR(CheckBase(who, base));
  GPE_RETURN_IF_ERROR(CheckPositive(who, "factor", o.factor));
  GPE_RETURN_IF_ERROR(CheckPositive(who, "low_freq_factor", o.low_freq_factor));
  GPE_RETURN_IF_ERROR(CheckPositive(who, "high_freq_factor", o.high_freq_factor));
  if (!(o.high_freq_factor > o.low_freq_factor)) {
    return InvalidArgumentError(StrCat(who, ": high_freq_factor (", o.high_freq_factor,
                                       ") must exceed low_freq_factor (", o.low_freq_factor, ")"));
  }
  if (o.original_max_position < 1) {
    return InvalidArgumentError(
        StrCat(who, ": original_max_position must be >= 1, got ", o.original_max_position));
  }
  const double l0 = static_cast<double>(o.original_max_position);
  const double low_wavelen = l0 / o.low_freq_factor;
  const double high_wavelen = l0 / o.high_freq_factor;
  RopeFrequencies f{BaseThetas(rotary_dim, base), 1.0};
  for (double& t : f.thetas) {
    const double w = group::kTwoPi / t;
    if (w > low_wavelen) {
      t /= o.factor;
    } else if (w >= high_wavelen) {
      const double smooth =
          (l0 / w - o.low_freq_factor) / (o.high_freq_factor - o.low_freq_factor);
      t = (1.0 - smooth) * t / o.factor + smooth * t;
    }
  }
  return f;
}

absl::StatusOr<RopeFrequencies> AxialRopeFrequencies(int64_t rotary_dim, int64_t num_axes,
                                                     double base) {
  const char* who = "AxialRopeFrequencies";
  GPE_RETURN_IF_ERROR(CheckRotaryDim(who, rotary_dim));
  GPE_RETURN_IF_ERROR(CheckBase(who, base));
  if (num_axes < 1 || (rotary_dim / 2) % num_axes != 0) {
    return InvalidArgumentError(StrCat(who, ": num_axes (", num_axes,
                                       ") must be >= 1 and divide rotary_dim / 2 (",
                                       rotary_dim / 2, ")"));
  }
  const int64_t m = rotary_dim / 2 / num_axes;
  const std::vector<double> block = BaseThetas(2 * m, base);
  RopeFrequencies f;
  for (int64_t k = 0; k < num_axes; ++k) f.thetas.insert(f.thetas.end(), block.begin(), block.end());
  return f;
}

absl::StatusOr<std::vector<int>> AxialPlaneAxes(int64_t num_planes, int64_t num_axes) {
  if (num_axes < 1 || num_axes > 8 || num_planes < 1 || num_planes % num_axes != 0) {
    return InvalidArgumentError(StrCat("AxialPlaneAxes: num_axes (", num_axes,
                                       ") must be in [1, 8] and divide num_planes (",
                                       num_planes, ")"));
  }
  std::vector<int> axes(num_planes);
  for (int64_t i = 0; i < num_planes; ++i) {
    axes[i] = static_cast<int>(i / (num_planes / num_axes));
  }
  return axes;
}

absl::StatusOr<std::vector<int>> MRopePlaneAxes(absl::Span<const int64_t> sections,
                                                bool interleaved, int64_t num_planes) {
  const int64_t n = static_cast<int64_t>(sections.size());
  if (n < 1 || n > 8) {
    return InvalidArgumentError(StrCat("MRopePlaneAxes: need 1 to 8 sections, got ", n));
  }
  int64_t total = 0;
  for (int64_t s : sections) {
    if (s < 0 || s > (int64_t{1} << 29)) {
      return InvalidArgumentError(StrCat("MRopePlaneAxes: section size ", s, " out of range"));
    }
    total += s;
  }
  if (total < 1) return InvalidArgumentError("MRopePlaneAxes: sections sum to 0");
  // Before the allocation: eight sections of 2^29 asked for 16 GiB (found by
  // attention_fuzzer through gpe_rope_create).
  if (total > (int64_t{1} << 29)) {
    return InvalidArgumentError(
        StrCat("MRopePlaneAxes: sections sum to ", total, " planes; at most 2^29 (rotary_dim <= 2^30)"));
  }
  if (num_planes >= 0 && total != num_planes) {
    return InvalidArgumentError(StrCat("MRopePlaneAxes: sections sum to ", total,
                                       " planes, but rotary_dim / 2 = ", num_planes));
  }
  std::vector<int> axes(total, 0);
  if (!interleaved) {
    int64_t i = 0;
    for (int64_t a = 0; a < n; ++a) {
      for (int64_t k = 0; k < sections[a]; ++k) axes[i++] = static_cast<int>(a);
    }
    return axes;
  }
  // Qwen3-VL: axes 1..n-1 take every n-th plane starting at their index, up to
  // n * sections[a]; the remaining planes belong to axis 0.
  std::vector<int64_t> count(n, 0);
  for (int64_t a = 1; a < n; ++a) {
    for (int64_t i = a; i < std::min(n * sections[a], total); i += n) {
      axes[i] = static_cast<int>(a);
      ++count[a];
    }
  }
  for (int64_t a = 1; a < n; ++a) {
    if (count[a] != sections[a]) {
      return InvalidArgumentError(StrCat("MRopePlaneAxes: interleaved section ", a, " of size ",
                                         sections[a], " does not fit in ", total, " planes"));
    }
  }
  return axes;
}

}  // namespace sequence
}  // namespace encodings
}  // namespace gpe
