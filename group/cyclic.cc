#include "group/cyclic.h"

#include <cstdint>
#include <limits>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "group/angle.h"

namespace gpe {
namespace group {

absl::StatusOr<Integers::Element> Integers::Compose(Element a, Element b) const {
  Element sum;
  if (__builtin_add_overflow(a, b, &sum)) {
    return absl::OutOfRangeError(absl::StrCat("Integers::Compose: ", a, " + ", b,
                                              " overflows int64"));
  }
  return sum;
}

absl::StatusOr<Integers::Element> Integers::Inverse(Element a) const {
  if (a == std::numeric_limits<Element>::min()) {
    return absl::OutOfRangeError("Integers::Inverse: -INT64_MIN overflows int64");
  }
  return -a;
}

absl::StatusOr<CyclicGroup> CyclicGroup::Create(int64_t n) {
  if (n < 1) {
    return absl::InvalidArgumentError(absl::StrCat("CyclicGroup: order must be >= 1, got ", n));
  }
  return CyclicGroup(n);
}

absl::Status CyclicGroup::Validate(Element a) const {
  if (a < 0 || a >= n_) {
    return absl::InvalidArgumentError(
        absl::StrCat("CyclicGroup: ", a, " is not a residue in [0, ", n_, ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<CyclicGroup::Element> CyclicGroup::Compose(Element a, Element b) const {
  if (absl::Status s = Validate(a); !s.ok()) return s;
  if (absl::Status s = Validate(b); !s.ok()) return s;
  // a, b < n <= INT64_MAX, so a - (n - b) cannot overflow.
  return a >= n_ - b ? a - (n_ - b) : a + b;
}

absl::StatusOr<CyclicGroup::Element> CyclicGroup::Inverse(Element a) const {
  if (absl::Status s = Validate(a); !s.ok()) return s;
  return a == 0 ? 0 : n_ - a;
}

CyclicGroup::Element CyclicGroup::FromInteger(int64_t p) const { return FloorMod(p, n_); }

}  // namespace group
}  // namespace gpe
