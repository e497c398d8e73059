// Argument checks shared by rope.cc and rope_frequencies.cc (private to //encodings/sequence:rope):
// InvalidArgument with the caller's name and the field otherwise.
#ifndef ENCODINGS_SEQUENCE_ROPE_CHECKS_H_
#define ENCODINGS_SEQUENCE_ROPE_CHECKS_H_

#include <cmath>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace gpe {
namespace encodings {
namespace sequence {
namespace rope_internal {

inline absl::Status CheckRotaryDim(const char* who, int64_t rotary_dim) {
  if (rotary_dim < 2 || rotary_dim % 2 != 0 || rotary_dim > (int64_t{1} << 30)) {
    return absl::InvalidArgumentError(
        absl::StrCat(who, ": rotary_dim must be even and in [2, 2^30], got ", rotary_dim));
  }
  return absl::OkStatus();
}

inline absl::Status CheckBase(const char* who, double base) {
  if (!std::isfinite(base) || !(base > 1.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat(who, ": base must be finite and > 1, got ", base));
  }
  return absl::OkStatus();
}

inline absl::Status CheckPositive(const char* who, const char* name, double v) {
  if (!std::isfinite(v) || !(v > 0.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat(who, ": ", name, " must be finite and > 0, got ", v));
  }
  return absl::OkStatus();
}

}  // namespace rope_internal
}  // namespace sequence
}  // namespace encodings
}  // namespace gpe

#define GPE_RETURN_IF_ERROR(expr)             \
  do {                                        \
    if (absl::Status s_ = (expr); !s_.ok()) { \
      return s_;                              \
    }                                         \
  } while (0)

#endif  // ENCODINGS_SEQUENCE_ROPE_CHECKS_H_
