// The free group on k generators: paths in k-ary trees (Kogkalidis et al., sec. 3.2).
//
// Elements are reduced words. Letter g in 1..k is the generator "descend to child
// g - 1"; letter -g is its inverse ("ascend from child g - 1"). A word is reduced when
// no letter is next to its own inverse. Compose concatenates and cancels at the
// junction; Inverse reverses the word and negates every letter. The group is not
// commutative for k >= 2: [1, 2] (child 0, then child 1) differs from [2, 1].
//
// Tree addresses are paths of 0-based child indices from the root; the address
// (c_1, ..., c_m) is the word (c_1 + 1, ..., c_m + 1). The relative path from node g
// to node h is g^-1 h (up from g to the root, then down to h; the reduced word goes
// up only to the common ancestor).
#ifndef GROUP_FREE_GROUP_H_
#define GROUP_FREE_GROUP_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace gpe {
namespace group {

using FreeWord = std::vector<int32_t>;

class FreeGroup {
 public:
  using Element = FreeWord;

  // k >= 1 generators (k = 1 is Z written in unary).
  static absl::StatusOr<FreeGroup> Create(int32_t num_generators);

  int32_t num_generators() const { return k_; }

  Element Identity() const { return {}; }
  absl::StatusOr<Element> Compose(const Element& a, const Element& b) const;
  absl::StatusOr<Element> Inverse(const Element& a) const;
  bool Equal(const Element& a, const Element& b) const { return a == b; }
  // OK when every letter is in +-1..k and the word is reduced.
  absl::Status Validate(const Element& a) const;

  // Reduces any word whose letters are in +-1..k (free cancellation).
  absl::StatusOr<Element> Reduce(absl::Span<const int32_t> letters) const;
  // Tree address (0-based child indices from the root) -> word.
  absl::StatusOr<Element> FromTreeAddress(absl::Span<const int64_t> child_indices) const;
  // g^-1 h: the path from node g to node h.
  absl::StatusOr<Element> RelativePath(const Element& g, const Element& h) const;

 private:
  explicit FreeGroup(int32_t k) : k_(k) {}
  absl::Status ValidateLetters(absl::Span<const int32_t> letters) const;
  int32_t k_;
};

}  // namespace group
}  // namespace gpe

#endif  // GROUP_FREE_GROUP_H_
