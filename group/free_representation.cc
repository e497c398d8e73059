#include "group/free_representation.h"

#include <cstdint>
#include <utility>
#include <vector>

#include <Eigen/Dense>
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "group/batch.h"
#include "group/free_group.h"
#include "group/so_dense.h"

namespace gpe {
namespace group {

absl::StatusOr<FreeGroupRepresentation> FreeGroupRepresentation::Create(
    std::vector<Eigen::MatrixXd> generators) {
  if (generators.empty()) {
    return absl::InvalidArgumentError("FreeGroupRepresentation: need at least one generator");
  }
  if (generators.size() > static_cast<size_t>(INT32_MAX)) {
    return absl::InvalidArgumentError("FreeGroupRepresentation: too many generators");
  }
  for (size_t g = 0; g < generators.size(); ++g) {
    if (generators[g].rows() != generators[0].rows() || generators[g].cols() != generators[0].cols()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "FreeGroupRepresentation: generator ", g + 1, " is ", generators[g].rows(), "x",
          generators[g].cols(), ", generator 1 is ", generators[0].rows(), "x",
          generators[0].cols()));
    }
    if (absl::Status s = ValidateOrthogonal(generators[g]); !s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("FreeGroupRepresentation: generator ", g + 1, ": ", s.message()));
    }
  }
  absl::StatusOr<FreeGroup> group = FreeGroup::Create(static_cast<int32_t>(generators.size()));
  if (!group.ok()) return group.status();
  return FreeGroupRepresentation(*group, std::move(generators));
}

absl::StatusOr<FreeGroupRepresentation> FreeGroupRepresentation::CreateFromSkew(
    const std::vector<Eigen::MatrixXd>& skew_generators) {
  std::vector<Eigen::MatrixXd> generators;
  generators.reserve(skew_generators.size());
  for (size_t g = 0; g < skew_generators.size(); ++g) {
    absl::StatusOr<Eigen::MatrixXd> w = SkewExp(skew_generators[g]);
    if (!w.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("FreeGroupRepresentation: generator ",
                                                     g + 1, ": ", w.status().message()));
    }
    generators.push_back(*std::move(w));
  }
  return Create(std::move(generators));
}

absl::Status FreeGroupRepresentation::ValidateWord(const FreeWord& word) const {
  const int32_t k = num_generators();
  for (size_t i = 0; i < word.size(); ++i) {
    if (word[i] == 0 || word[i] > k || word[i] < -k) {
      return absl::InvalidArgumentError(absl::StrCat(
          "FreeGroupRepresentation: letter ", word[i], " at ", i, " is not in +-1..", k));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Eigen::MatrixXd> FreeGroupRepresentation::Matrix(const FreeWord& word) const {
  if (absl::Status s = ValidateWord(word); !s.ok()) return s;
  Eigen::MatrixXd m = Eigen::MatrixXd::Identity(dim(), dim());
  for (int32_t g : word) {
    if (g > 0) {
      m = m * generator(g);
    } else {
      m = m * generator(-g).transpose();
    }
  }
  return m;
}

template <class T>
absl::Status FreeGroupRepresentation::Apply(absl::Span<const FreeWord> words, const T* in,
                                            int64_t in_stride, T* out, int64_t out_stride) const {
  const int64_t n = static_cast<int64_t>(words.size());
  const int64_t d = dim();
  if (absl::Status s = internal::ValidateBatch("FreeGroupRepresentation::Apply", n, d, in,
                                               in_stride, out, out_stride, sizeof(T));
      !s.ok()) {
    return s;
  }
  for (const FreeWord& word : words) {
    if (absl::Status s = ValidateWord(word); !s.ok()) return s;
  }
  std::vector<double> buf(2 * static_cast<size_t>(d));
  for (int64_t j = 0; j < n; ++j) {
    // Two fixed buffers, swapped by pointer; maps are never resized (this also keeps
    // GCC 12's -Wuse-after-free false positive inside Eigen quiet).
    double* cur = buf.data();
    double* next = buf.data() + d;
    const T* src = in + j * in_stride;
    for (int64_t i = 0; i < d; ++i) cur[i] = static_cast<double>(src[i]);
    // W_{g1} (W_{g2} (... (W_{gm} x))): the last letter acts first.
    const FreeWord& word = words[j];
    for (auto it = word.rbegin(); it != word.rend(); ++it) {
      const Eigen::Map<const Eigen::VectorXd> x(cur, d);
      Eigen::Map<Eigen::VectorXd> y(next, d);
      if (*it > 0) {
        y.noalias() = generator(*it) * x;
      } else {
        y.noalias() = generator(-*it).transpose() * x;
      }
      std::swap(cur, next);
    }
    T* dst = out + j * out_stride;
    for (int64_t i = 0; i < d; ++i) dst[i] = static_cast<T>(cur[i]);
  }
  return absl::OkStatus();
}

template absl::Status FreeGroupRepresentation::Apply<float>(absl::Span<const FreeWord>,
                                                            const float*, int64_t, float*,
                                                            int64_t) const;
template absl::Status FreeGroupRepresentation::Apply<double>(absl::Span<const FreeWord>,
                                                             const double*, int64_t, double*,
                                                             int64_t) const;

}  // namespace group
}  // namespace gpe
