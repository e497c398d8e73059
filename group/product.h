// Direct products of groups: grids are Z x Z, a sequence of trees is Z x F_k, a
// periodic grid is Z_n x Z (Kogkalidis et al., sec. 3.3-3.4). Composition and
// inversion act componentwise: (x, y) (z, w) = (x z, y w).
//
// ProductGroup<G1, ..., Gm> is itself a group of the shape documented in cyclic.h,
// with Element = std::tuple<G1::Element, ..., Gm::Element>; the first failing
// component's status is returned.
#ifndef GROUP_PRODUCT_H_
#define GROUP_PRODUCT_H_

#include <tuple>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace gpe {
namespace group {

template <class... Groups>
class ProductGroup {
 public:
  static_assert(sizeof...(Groups) >= 1, "ProductGroup needs at least one factor");
  using Element = std::tuple<typename Groups::Element...>;
  static constexpr size_t kNumFactors = sizeof...(Groups);

  explicit ProductGroup(Groups... factors) : factors_(std::move(factors)...) {}

  template <size_t I>
  const auto& factor() const {
    return std::get<I>(factors_);
  }

  Element Identity() const { return IdentityImpl(std::index_sequence_for<Groups...>{}); }

  absl::StatusOr<Element> Compose(const Element& a, const Element& b) const {
    Element out;
    absl::Status status = absl::OkStatus();
    ForEach([&](auto index) {
      constexpr size_t i = decltype(index)::value;
      if (!status.ok()) return;
      auto c = std::get<i>(factors_).Compose(std::get<i>(a), std::get<i>(b));
      if (c.ok()) {
        std::get<i>(out) = *std::move(c);
      } else {
        status = c.status();
      }
    });
    if (!status.ok()) return status;
    return out;
  }

  absl::StatusOr<Element> Inverse(const Element& a) const {
    Element out;
    absl::Status status = absl::OkStatus();
    ForEach([&](auto index) {
      constexpr size_t i = decltype(index)::value;
      if (!status.ok()) return;
      auto c = std::get<i>(factors_).Inverse(std::get<i>(a));
      if (c.ok()) {
        std::get<i>(out) = *std::move(c);
      } else {
        status = c.status();
      }
    });
    if (!status.ok()) return status;
    return out;
  }

  bool Equal(const Element& a, const Element& b) const {
    bool equal = true;
    ForEach([&](auto index) {
      constexpr size_t i = decltype(index)::value;
      equal = equal && std::get<i>(factors_).Equal(std::get<i>(a), std::get<i>(b));
    });
    return equal;
  }

  absl::Status Validate(const Element& a) const {
    absl::Status status = absl::OkStatus();
    ForEach([&](auto index) {
      constexpr size_t i = decltype(index)::value;
      if (status.ok()) status = std::get<i>(factors_).Validate(std::get<i>(a));
    });
    return status;
  }

 private:
  template <size_t... I>
  Element IdentityImpl(std::index_sequence<I...>) const {
    return Element(std::get<I>(factors_).Identity()...);
  }

  template <class F>
  static void ForEach(F&& f) {
    ForEachImpl(std::forward<F>(f), std::index_sequence_for<Groups...>{});
  }
  template <class F, size_t... I>
  static void ForEachImpl(F&& f, std::index_sequence<I...>) {
    (f(std::integral_constant<size_t, I>{}), ...);
  }

  std::tuple<Groups...> factors_;
};

}  // namespace group
}  // namespace gpe

#endif  // GROUP_PRODUCT_H_
