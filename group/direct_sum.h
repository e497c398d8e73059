// Direct sums of representations: the representation of a product group (grids,
// sequences of trees, ...; Kogkalidis et al., sec. 3.3). For rho_1, ..., rho_m,
//   (rho_1 + ... + rho_m)(g_1, ..., g_m) = blockdiag(rho_1(g_1), ..., rho_m(g_m)),
// component i acting on coordinates [offset_i, offset_i + dim_i) of each vector, in
// the order given. A 2D grid with RoPE planes per axis is
// DirectSum<CommutingPlanes, CommutingPlanes> with elements (x, y).
//
// Each component type must provide
//   using Element; int64_t dim() const;
//   Eigen::MatrixXd or absl::StatusOr<Eigen::MatrixXd> Matrix(const Element&) const;
//   template <class T> absl::Status Apply(absl::Span<const Element>, const T*, int64_t,
//                                         T*, int64_t) const;
// as every representation in group/ does. Batch conventions are those of so_planes.h.
// A component whose Apply refuses some elements (a free-group word with a letter outside
// its generators) also provides
//   absl::Status ValidateElement(const Element&) const;
// DirectSum::Apply checks every element of every such component before any component
// writes, so a refused call leaves `out` as it was.
#ifndef GROUP_DIRECT_SUM_H_
#define GROUP_DIRECT_SUM_H_

#include <array>
#include <cstdint>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <Eigen/Dense>
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "group/batch.h"

namespace gpe {
namespace group {
namespace internal {

// Whether Rep has `absl::Status ValidateElement(const Rep::Element&) const`.
template <class Rep, class = void>
struct HasValidateElement : std::false_type {};
template <class Rep>
struct HasValidateElement<Rep, std::void_t<decltype(std::declval<const Rep&>().ValidateElement(
                                   std::declval<const typename Rep::Element&>()))>>
    : std::true_type {};

}  // namespace internal

template <class... Reps>
class DirectSum {
 public:
  static_assert(sizeof...(Reps) >= 1, "DirectSum needs at least one component");
  using Element = std::tuple<typename Reps::Element...>;

  explicit DirectSum(Reps... components) : components_(std::move(components)...) {
    int64_t offset = 0;
    ForEach([&](auto index) {
      constexpr size_t i = decltype(index)::value;
      offsets_[i] = offset;
      offset += std::get<i>(components_).dim();
    });
    dim_ = offset;
  }

  int64_t dim() const { return dim_; }
  template <size_t I>
  const auto& component() const {
    return std::get<I>(components_);
  }
  // First coordinate of component i.
  int64_t offset(size_t i) const { return offsets_[i]; }

  absl::StatusOr<Eigen::MatrixXd> Matrix(const Element& g) const {
    Eigen::MatrixXd m = Eigen::MatrixXd::Zero(dim_, dim_);
    absl::Status status = absl::OkStatus();
    ForEach([&](auto index) {
      constexpr size_t i = decltype(index)::value;
      if (!status.ok()) return;
      const auto& rep = std::get<i>(components_);
      absl::StatusOr<Eigen::MatrixXd> block = rep.Matrix(std::get<i>(g));
      if (!block.ok()) {
        status = block.status();
        return;
      }
      m.block(offsets_[i], offsets_[i], rep.dim(), rep.dim()) = *block;
    });
    if (!status.ok()) return status;
    return m;
  }

  template <class T>
  absl::Status Apply(absl::Span<const Element> elements, const T* in, int64_t in_stride, T* out,
                     int64_t out_stride) const {
    const int64_t n = static_cast<int64_t>(elements.size());
    if (absl::Status s = internal::ValidateBatch("DirectSum::Apply", n, dim_, in, in_stride, out,
                                                 out_stride, sizeof(T));
        !s.ok()) {
      return s;
    }
    if (n == 0) return absl::OkStatus();
    absl::Status status = absl::OkStatus();
    // Every element of every component is checked before any component writes: the
    // first component's columns were written before a later one refused its element.
    ForEach([&](auto index) {
      constexpr size_t i = decltype(index)::value;
      using Component = std::tuple_element_t<i, std::tuple<Reps...>>;
      if constexpr (internal::HasValidateElement<Component>::value) {
        for (int64_t j = 0; j < n && status.ok(); ++j) {
          status = std::get<i>(components_).ValidateElement(std::get<i>(elements[j]));
          if (!status.ok()) {
            status = absl::Status(status.code(), absl::StrCat("DirectSum::Apply: element ", j,
                                                              ", component ", i, ": ",
                                                              status.message()));
          }
        }
      }
    });
    if (!status.ok()) return status;
    ForEach([&](auto index) {
      constexpr size_t i = decltype(index)::value;
      if (!status.ok()) return;
      using Component = std::tuple_element_t<i, std::tuple<Reps...>>;
      std::vector<typename Component::Element> parts;
      parts.reserve(elements.size());
      for (const Element& e : elements) parts.push_back(std::get<i>(e));
      // Components act on disjoint column ranges, so in == out stays safe.
      status = std::get<i>(components_).template Apply<T>(
          parts, in + offsets_[i], in_stride, out + offsets_[i], out_stride);
    });
    return status;
  }

 private:
  template <class F>
  static void ForEach(F&& f) {
    ForEachImpl(std::forward<F>(f), std::index_sequence_for<Reps...>{});
  }
  template <class F, size_t... I>
  static void ForEachImpl(F&& f, std::index_sequence<I...>) {
    (f(std::integral_constant<size_t, I>{}), ...);
  }

  std::tuple<Reps...> components_;
  std::array<int64_t, sizeof...(Reps)> offsets_{};
  int64_t dim_ = 0;
};

}  // namespace group
}  // namespace gpe

#endif  // GROUP_DIRECT_SUM_H_
