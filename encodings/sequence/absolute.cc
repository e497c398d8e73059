#include "encodings/sequence/absolute.h"

#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "group/angle.h"

namespace gpe {
namespace encodings {
namespace sequence {
namespace {

// Checks a batch of n rows of dim elements at ptr with the given stride.
absl::Status ValidateRows(const char* who, int64_t n, int64_t dim, const void* ptr,
                          int64_t stride) {
  if (n == 0) return absl::OkStatus();
  if (ptr == nullptr) return absl::InvalidArgumentError(absl::StrCat(who, ": null pointer"));
  if (stride < 0 || (n > 1 && stride < dim)) {
    return absl::InvalidArgumentError(
        absl::StrCat(who, ": stride ", stride, " must be >= dim ", dim));
  }
  return absl::OkStatus();
}

absl::Status ValidateTable(const RowMatrixXd& table) {
  if (table.rows() < 1 || table.cols() < 1) {
    return absl::InvalidArgumentError(absl::StrCat("LearnedPositionTable: table must be at least 1 x 1, got ",
                                                   table.rows(), " x ", table.cols()));
  }
  if (!table.allFinite()) {
    return absl::InvalidArgumentError("LearnedPositionTable: table has non-finite entries");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<double>> SinusoidalFrequencies(int64_t dim, double base) {
  if (dim < 1) {
    return absl::InvalidArgumentError(absl::StrCat("SinusoidalFrequencies: dim must be >= 1, got ", dim));
  }
  if (dim > (int64_t{1} << 31)) {  // (dim + 1) / 2 frequencies are allocated
    return absl::OutOfRangeError(
        absl::StrCat("SinusoidalFrequencies: dim must be at most 2^31, got ", dim));
  }
  if (!std::isfinite(base) || base <= 0.0) {
    return absl::InvalidArgumentError(
        absl::StrCat("SinusoidalFrequencies: base must be finite and > 0, got ", base));
  }
  std::vector<double> thetas(static_cast<size_t>((dim + 1) / 2));
  const double log_base = std::log(base);
  for (size_t i = 0; i < thetas.size(); ++i) {
    // Vaswani et al., sec. 3.5: 1 / base^(2i/d).
    thetas[i] = std::exp(-2.0 * static_cast<double>(i) / static_cast<double>(dim) * log_base);
  }
  return thetas;
}

template <class T>
absl::Status SinusoidalEncoding(absl::Span<const int64_t> positions, int64_t dim, double base,
                                T* out, int64_t out_stride) {
  absl::StatusOr<std::vector<double>> thetas = SinusoidalFrequencies(dim, base);
  if (!thetas.ok()) return thetas.status();
  const int64_t n = static_cast<int64_t>(positions.size());
  if (absl::Status s = ValidateRows("SinusoidalEncoding", n, dim, out, out_stride); !s.ok()) {
    return s;
  }
  for (int64_t j = 0; j < n; ++j) {
    T* row = out + j * out_stride;
    for (int64_t c = 0; c < dim; ++c) {
      const double angle = group::ReducedAngle(positions[j], (*thetas)[c / 2]);
      row[c] = static_cast<T>(c % 2 == 0 ? std::sin(angle) : std::cos(angle));
    }
  }
  return absl::OkStatus();
}

template <class T>
absl::StatusOr<RowMatrix<T>> SinusoidalEncodingMatrix(absl::Span<const int64_t> positions,
                                                      int64_t dim, double base) {
  if (dim < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("SinusoidalEncodingMatrix: dim must be >= 1, got ", dim));
  }
  RowMatrix<T> m(static_cast<int64_t>(positions.size()), dim);
  if (absl::Status s = SinusoidalEncoding<T>(positions, dim, base, m.data(), dim); !s.ok()) {
    return s;
  }
  return m;
}

template absl::Status SinusoidalEncoding<float>(absl::Span<const int64_t>, int64_t, double,
                                                float*, int64_t);
template absl::Status SinusoidalEncoding<double>(absl::Span<const int64_t>, int64_t, double,
                                                 double*, int64_t);
template absl::StatusOr<RowMatrix<float>> SinusoidalEncodingMatrix<float>(
    absl::Span<const int64_t>, int64_t, double);
template absl::StatusOr<RowMatrix<double>> SinusoidalEncodingMatrix<double>(
    absl::Span<const int64_t>, int64_t, double);

absl::StatusOr<LearnedPositionTable> LearnedPositionTable::Create(RowMatrixXd table) {
  if (absl::Status s = ValidateTable(table); !s.ok()) return s;
  return LearnedPositionTable(std::move(table));
}

absl::Status LearnedPositionTable::SetTable(RowMatrixXd table) {
  if (absl::Status s = ValidateTable(table); !s.ok()) return s;
  if (table.rows() != table_.rows() || table.cols() != table_.cols()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "LearnedPositionTable::SetTable: shape ", table.rows(), " x ", table.cols(),
        " differs from ", table_.rows(), " x ", table_.cols()));
  }
  table_ = std::move(table);
  return absl::OkStatus();
}

namespace {
absl::Status ValidatePositions(const char* who, absl::Span<const int64_t> positions,
                               int64_t max_positions) {
  for (size_t j = 0; j < positions.size(); ++j) {
    if (positions[j] < 0 || positions[j] >= max_positions) {
      return absl::InvalidArgumentError(absl::StrCat(who, ": position ", positions[j],
                                                     " at index ", j, " is outside [0, ",
                                                     max_positions, ")"));
    }
  }
  return absl::OkStatus();
}
}  // namespace

template <class T>
absl::Status LearnedPositionTable::Lookup(absl::Span<const int64_t> positions, T* out,
                                          int64_t out_stride) const {
  const int64_t n = static_cast<int64_t>(positions.size());
  if (absl::Status s = ValidateRows("LearnedPositionTable::Lookup", n, dim(), out, out_stride);
      !s.ok()) {
    return s;
  }
  if (absl::Status s =
          ValidatePositions("LearnedPositionTable::Lookup", positions, max_positions());
      !s.ok()) {
    return s;
  }
  for (int64_t j = 0; j < n; ++j) {
    const double* src = table_.data() + positions[j] * dim();
    T* row = out + j * out_stride;
    for (int64_t c = 0; c < dim(); ++c) row[c] = static_cast<T>(src[c]);
  }
  return absl::OkStatus();
}

template <class T>
absl::Status LearnedPositionTable::Backward(absl::Span<const int64_t> positions,
                                            const T* grad_out, int64_t grad_out_stride,
                                            RowMatrixXd* grad_table) const {
  const char* who = "LearnedPositionTable::Backward";
  if (grad_table == nullptr) return absl::InvalidArgumentError(absl::StrCat(who, ": null grad_table"));
  if (grad_table->rows() != max_positions() || grad_table->cols() != dim()) {
    return absl::InvalidArgumentError(absl::StrCat(who, ": grad_table is ", grad_table->rows(),
                                                   " x ", grad_table->cols(), ", expected ",
                                                   max_positions(), " x ", dim()));
  }
  const int64_t n = static_cast<int64_t>(positions.size());
  if (absl::Status s = ValidateRows(who, n, dim(), grad_out, grad_out_stride); !s.ok()) return s;
  if (absl::Status s = ValidatePositions(who, positions, max_positions()); !s.ok()) return s;
  for (int64_t j = 0; j < n; ++j) {
    double* dst = grad_table->data() + positions[j] * dim();
    const T* g = grad_out + j * grad_out_stride;
    for (int64_t c = 0; c < dim(); ++c) dst[c] += static_cast<double>(g[c]);
  }
  return absl::OkStatus();
}

template absl::Status LearnedPositionTable::Lookup<float>(absl::Span<const int64_t>, float*,
                                                          int64_t) const;
template absl::Status LearnedPositionTable::Lookup<double>(absl::Span<const int64_t>, double*,
                                                           int64_t) const;
template absl::Status LearnedPositionTable::Backward<float>(absl::Span<const int64_t>,
                                                            const float*, int64_t,
                                                            RowMatrixXd*) const;
template absl::Status LearnedPositionTable::Backward<double>(absl::Span<const int64_t>,
                                                             const double*, int64_t,
                                                             RowMatrixXd*) const;

}  // namespace sequence
}  // namespace encodings
}  // namespace gpe
