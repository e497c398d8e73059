#include "attention/merge.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"

namespace gpe {
namespace attention {

template <class T>
absl::Status MergeAttention(int64_t rows, int64_t head_dim, absl::Span<const T* const> o_parts,
                            absl::Span<const T* const> lse_parts, T* o, T* lse) {
  if (rows < 0) return absl::InvalidArgumentError(absl::StrCat("rows must be >= 0, got ", rows));
  if (head_dim < 1) {
    return absl::InvalidArgumentError(absl::StrCat("head_dim must be >= 1, got ", head_dim));
  }
  if (o_parts.empty() || o_parts.size() != lse_parts.size()) {
    return absl::InvalidArgumentError(absl::StrCat("need as many o parts as lse parts (>= 1), got ",
                                                   o_parts.size(), " and ", lse_parts.size()));
  }
  if (rows == 0) return absl::OkStatus();
  if (o == nullptr || lse == nullptr) return absl::InvalidArgumentError("o and lse must be non-null");
  for (size_t i = 0; i < o_parts.size(); ++i) {
    if (o_parts[i] == nullptr || lse_parts[i] == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("part ", i, " has a null o or lse"));
    }
    for (int64_t r = 0; r < rows; ++r) {
      const T l = lse_parts[i][r];
      if (l == std::numeric_limits<T>::infinity()) {
        return absl::InvalidArgumentError(
            absl::StrCat("lse of part ", i, ", row ", r, " is ", static_cast<double>(l),
                         "; it must be finite, -inf or NaN"));
      }
    }
  }
  const size_t n = o_parts.size();
  std::vector<double> row(static_cast<size_t>(head_dim));
  std::vector<double> w(n);
  for (int64_t r = 0; r < rows; ++r) {
    double m = -std::numeric_limits<double>::infinity();
    bool nan = false;
    for (size_t i = 0; i < n; ++i) {
      nan = nan || std::isnan(lse_parts[i][r]);
      m = std::max(m, static_cast<double>(lse_parts[i][r]));
    }
    if (nan) {  // a part's row saw NaN scores: the whole row is NaN
      std::fill(o + r * head_dim, o + (r + 1) * head_dim, std::numeric_limits<T>::quiet_NaN());
      lse[r] = std::numeric_limits<T>::quiet_NaN();
      continue;
    }
    std::fill(row.begin(), row.end(), 0.0);
    double out_lse = m;
    if (m != -std::numeric_limits<double>::infinity()) {
      double z = 0;
      for (size_t i = 0; i < n; ++i) {
        w[i] = std::exp(static_cast<double>(lse_parts[i][r]) - m);  // 0 for -inf parts
        z += w[i];
      }
      out_lse = m + std::log(z);
      for (size_t i = 0; i < n; ++i) {
        if (w[i] == 0) continue;  // also skips o_i of empty rows (0 by convention, any value)
        const double c = w[i] / z;
        const T* oi = o_parts[i] + r * head_dim;
        for (int64_t d = 0; d < head_dim; ++d) row[d] += c * static_cast<double>(oi[d]);
      }
    }
    T* orow = o + r * head_dim;
    for (int64_t d = 0; d < head_dim; ++d) orow[d] = static_cast<T>(row[d]);
    lse[r] = static_cast<T>(out_lse);
  }
  return absl::OkStatus();
}

template absl::Status MergeAttention<float>(int64_t, int64_t, absl::Span<const float* const>,
                                            absl::Span<const float* const>, float*, float*);
template absl::Status MergeAttention<double>(int64_t, int64_t, absl::Span<const double* const>,
                                             absl::Span<const double* const>, double*, double*);

}  // namespace attention
}  // namespace gpe
