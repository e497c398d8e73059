#include "group/free_group.h"

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"

namespace gpe {
namespace group {
namespace {

// Appends letters to a reduced word, cancelling against its tail (a stack).
void AppendReduced(absl::Span<const int32_t> letters, FreeWord* word) {
  for (int32_t g : letters) {
    if (!word->empty() && word->back() == -g) {
      word->pop_back();
    } else {
      word->push_back(g);
    }
  }
}

}  // namespace

absl::StatusOr<FreeGroup> FreeGroup::Create(int32_t num_generators) {
  if (num_generators < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("FreeGroup: need at least one generator, got ", num_generators));
  }
  return FreeGroup(num_generators);
}

absl::Status FreeGroup::ValidateLetters(absl::Span<const int32_t> letters) const {
  for (size_t i = 0; i < letters.size(); ++i) {
    const int32_t g = letters[i];
    if (g == 0 || g > k_ || g < -k_) {
      return absl::InvalidArgumentError(absl::StrCat("FreeGroup: letter ", g, " at ", i,
                                                     " is not in +-1..", k_));
    }
  }
  return absl::OkStatus();
}

absl::Status FreeGroup::Validate(const Element& a) const {
  if (absl::Status s = ValidateLetters(a); !s.ok()) return s;
  for (size_t i = 1; i < a.size(); ++i) {
    if (a[i] == -a[i - 1]) {
      return absl::InvalidArgumentError(
          absl::StrCat("FreeGroup: word is not reduced at position ", i));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<FreeGroup::Element> FreeGroup::Reduce(absl::Span<const int32_t> letters) const {
  if (absl::Status s = ValidateLetters(letters); !s.ok()) return s;
  FreeWord word;
  word.reserve(letters.size());
  AppendReduced(letters, &word);
  return word;
}

absl::StatusOr<FreeGroup::Element> FreeGroup::Compose(const Element& a,
                                                      const Element& b) const {
  if (absl::Status s = Validate(a); !s.ok()) return s;
  if (absl::Status s = Validate(b); !s.ok()) return s;
  FreeWord word = a;
  AppendReduced(b, &word);
  return word;
}

absl::StatusOr<FreeGroup::Element> FreeGroup::Inverse(const Element& a) const {
  if (absl::Status s = Validate(a); !s.ok()) return s;
  FreeWord word(a.rbegin(), a.rend());
  for (int32_t& g : word) g = -g;
  return word;
}

absl::StatusOr<FreeGroup::Element> FreeGroup::FromTreeAddress(
    absl::Span<const int64_t> child_indices) const {
  FreeWord word;
  word.reserve(child_indices.size());
  for (size_t i = 0; i < child_indices.size(); ++i) {
    const int64_t c = child_indices[i];
    if (c < 0 || c >= k_) {
      return absl::InvalidArgumentError(absl::StrCat(
          "FreeGroup: child index ", c, " at depth ", i, " is not in [0, ", k_, ")"));
    }
    word.push_back(static_cast<int32_t>(c + 1));
  }
  return word;  // only positive letters: already reduced
}

absl::StatusOr<FreeGroup::Element> FreeGroup::RelativePath(const Element& g,
                                                           const Element& h) const {
  absl::StatusOr<Element> g_inv = Inverse(g);
  if (!g_inv.ok()) return g_inv.status();
  return Compose(*g_inv, h);
}

}  // namespace group
}  // namespace gpe
