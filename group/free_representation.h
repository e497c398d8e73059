// Orthogonal representations of the free group on k generators (trees; Kogkalidis et
// al., sec. 3.2): generator g maps to an orthogonal W_g, its inverse letter to W_g^T,
// and a word to the product in path order,
//   rho(g_1 g_2 ... g_m) = W_{g_1} W_{g_2} ... W_{g_m}
// (right-multiplication by each step's matrix, as Kogkalidis et al. build it), so
// rho(gh) = rho(g) rho(h) and rho(g^-1) = rho(g)^T. Relativity for trees reads
//   <rho(g) q, rho(h) k> = <q, rho(g^-1 h) k>.
//
// Words need not be reduced (a letter next to its inverse contributes W W^T = I up to
// rounding); letters must lie in +-1..k. Batch conventions are those of so_planes.h.
#ifndef GROUP_FREE_REPRESENTATION_H_
#define GROUP_FREE_REPRESENTATION_H_

#include <cstdint>
#include <utility>
#include <vector>

#include <Eigen/Dense>
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "group/free_group.h"

namespace gpe {
namespace group {

class FreeGroupRepresentation {
 public:
  using Element = FreeWord;

  // One d x d orthogonal matrix per generator (k >= 1, |W^T W - I|_max <= 1e-10).
  static absl::StatusOr<FreeGroupRepresentation> Create(std::vector<Eigen::MatrixXd> generators);
  // W_g = exp(S_g) for skew S_g (learned generators).
  static absl::StatusOr<FreeGroupRepresentation> CreateFromSkew(
      const std::vector<Eigen::MatrixXd>& skew_generators);

  const FreeGroup& group() const { return group_; }
  int64_t dim() const { return generators_[0].rows(); }
  int32_t num_generators() const { return group_.num_generators(); }
  // W_g for g in 1..k.
  const Eigen::MatrixXd& generator(int32_t g) const { return generators_[g - 1]; }

  absl::StatusOr<Eigen::MatrixXd> Matrix(const FreeWord& word) const;
  // OK when every letter of `word` is in +-1..k (what Matrix and Apply refuse otherwise).
  absl::Status ValidateElement(const FreeWord& word) const { return ValidateWord(word); }

  // out_j = rho(words[j]) in_j, O(|word| d^2) per vector; T is float or double
  // (arithmetic in double).
  template <class T>
  absl::Status Apply(absl::Span<const FreeWord> words, const T* in, int64_t in_stride, T* out,
                     int64_t out_stride) const;

 private:
  FreeGroupRepresentation(FreeGroup group, std::vector<Eigen::MatrixXd> generators)
      : group_(group), generators_(std::move(generators)) {}
  absl::Status ValidateWord(const FreeWord& word) const;
  FreeGroup group_;
  std::vector<Eigen::MatrixXd> generators_;
};

}  // namespace group
}  // namespace gpe

#endif  // GROUP_FREE_REPRESENTATION_H_
