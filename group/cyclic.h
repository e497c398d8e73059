// The integers Z (positions in a sequence) and the cyclic groups Z_n (periodic
// domains), as group values.
//
// Every group in group/ has the same shape, so ProductGroup can combine them:
//   using Element = ...;
//   Element Identity() const;
//   absl::StatusOr<Element> Compose(const Element& a, const Element& b) const;
//   absl::StatusOr<Element> Inverse(const Element& a) const;
//   bool Equal(const Element& a, const Element& b) const;
//   absl::Status Validate(const Element& a) const;   // is `a` an element?
// Compose and Inverse validate their arguments and return a status instead of
// producing a non-element (overflow in Z, an out-of-range residue in Z_n, ...).
#ifndef GROUP_CYCLIC_H_
#define GROUP_CYCLIC_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace gpe {
namespace group {

// (Z, +) on int64. Results outside int64 are reported as OutOfRange, never wrapped.
class Integers {
 public:
  using Element = int64_t;

  Element Identity() const { return 0; }
  absl::StatusOr<Element> Compose(Element a, Element b) const;
  // -INT64_MIN is not an int64: OutOfRange.
  absl::StatusOr<Element> Inverse(Element a) const;
  bool Equal(Element a, Element b) const { return a == b; }
  absl::Status Validate(Element) const { return absl::OkStatus(); }
};

// (Z_n, + mod n), elements are the residues 0 .. n-1.
class CyclicGroup {
 public:
  using Element = int64_t;

  // n >= 1 (Z_1 is the trivial group).
  static absl::StatusOr<CyclicGroup> Create(int64_t n);

  int64_t order() const { return n_; }
  Element Identity() const { return 0; }
  absl::StatusOr<Element> Compose(Element a, Element b) const;
  absl::StatusOr<Element> Inverse(Element a) const;
  bool Equal(Element a, Element b) const { return a == b; }
  absl::Status Validate(Element a) const;
  // The image of an integer under Z -> Z_n (floor modulus, so -1 maps to n - 1).
  Element FromInteger(int64_t p) const;

 private:
  explicit CyclicGroup(int64_t n) : n_(n) {}
  int64_t n_;
};

}  // namespace group
}  // namespace gpe

#endif  // GROUP_CYCLIC_H_
