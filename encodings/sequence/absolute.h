// Absolute positional encodings: added to the token inputs, never seen by attention
// kernels (docs/ARCHITECTURE.md, "Absolute encodings").
//
// Sinusoidal (Vaswani et al., sec. 3.5):
//   PE(p, 2i) = sin(p theta_i),  PE(p, 2i + 1) = cos(p theta_i),  theta_i = base^(-2i/d),
// base = 10000 by default. Column c uses frequency index i = floor(c / 2); an odd d
// ends with a sin column. Angles p * theta_i are reduced exactly (group/angle.h), so
// every int64 p gives a correctly rounded encoding; cos/sin are taken in double and
// rounded once to the output type.
//
// Learned table (Gehring et al.): a [max_positions, d] table of learned rows; position
// p reads row p, for 0 <= p < max_positions (anything else is an error, never clamped).
//
// Batch conventions: output rows of `dim` contiguous elements, row j starting at
// out + j * out_stride (stride in elements, >= dim when there is more than one row).
#ifndef ENCODINGS_SEQUENCE_ABSOLUTE_H_
#define ENCODINGS_SEQUENCE_ABSOLUTE_H_

#include <cstdint>
#include <utility>
#include <vector>

#include <Eigen/Dense>
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace gpe {
namespace encodings {
namespace sequence {

// Row-major dense matrices (the layout of every table and batch in this package).
template <class T>
using RowMatrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using RowMatrixXd = RowMatrix<double>;

inline constexpr double kSinusoidalDefaultBase = 10000.0;

// theta_i = base^(-2i/dim) for i = 0 .. ceil(dim/2) - 1. dim >= 1; base finite, > 0.
absl::StatusOr<std::vector<double>> SinusoidalFrequencies(int64_t dim,
                                                          double base = kSinusoidalDefaultBase);

// out[j, :] = PE(positions[j], :) (dim columns). T is float or double.
template <class T>
absl::Status SinusoidalEncoding(absl::Span<const int64_t> positions, int64_t dim, double base,
                                T* out, int64_t out_stride);

// The same as a [positions.size(), dim] row-major matrix.
template <class T>
absl::StatusOr<RowMatrix<T>> SinusoidalEncodingMatrix(absl::Span<const int64_t> positions,
                                                      int64_t dim,
                                                      double base = kSinusoidalDefaultBase);

// A learned absolute position table (parameters in double; lookups in float or double).
class LearnedPositionTable {
 public:
  // table: [max_positions, dim], both >= 1, every entry finite.
  static absl::StatusOr<LearnedPositionTable> Create(RowMatrixXd table);

  int64_t max_positions() const { return table_.rows(); }
  int64_t dim() const { return table_.cols(); }
  const RowMatrixXd& table() const { return table_; }
  // Replaces the parameters (same shape, finite), e.g. after an optimiser step.
  absl::Status SetTable(RowMatrixXd table);

  // out[j, :] = table[positions[j], :]. InvalidArgument (naming the first offending
  // index) when a position is outside [0, max_positions); nothing is written then.
  template <class T>
  absl::Status Lookup(absl::Span<const int64_t> positions, T* out, int64_t out_stride) const;

  // Backward of Lookup: grad_table[positions[j], :] += grad_out[j, :] for every j, so
  // repeated positions accumulate. grad_table must be [max_positions, dim]; it is not
  // cleared (gradients accumulate across calls). Positions are validated before
  // anything is written.
  template <class T>
  absl::Status Backward(absl::Span<const int64_t> positions, const T* grad_out,
                        int64_t grad_out_stride, RowMatrixXd* grad_table) const;

 private:
  explicit LearnedPositionTable(RowMatrixXd table) : table_(std::move(table)) {}
  RowMatrixXd table_;
};

}  // namespace sequence
}  // namespace encodings
}  // namespace gpe

#endif  // ENCODINGS_SEQUENCE_ABSOLUTE_H_
