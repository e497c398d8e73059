#include "group/batch.h"

#include <cstddef>
#include <cstdint>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace gpe {
namespace group {
namespace internal {
namespace {

// Bytes spanned by the batch, or -1 when that overflows.
int64_t ExtentBytes(int64_t n, int64_t dim, int64_t stride, size_t element_size) {
  const int64_t limit = std::numeric_limits<int64_t>::max() / static_cast<int64_t>(element_size);
  if (n > 1 && stride > (limit - dim) / (n - 1)) return -1;
  return ((n - 1) * stride + dim) * static_cast<int64_t>(element_size);
}

}  // namespace

absl::Status ValidateBatch(const char* who, int64_t n, int64_t dim, const void* in,
                           int64_t in_stride, const void* out, int64_t out_stride,
                           size_t element_size) {
  if (n < 0) return absl::InvalidArgumentError(absl::StrCat(who, ": negative batch size ", n));
  if (n == 0) return absl::OkStatus();
  if (in == nullptr || out == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(who, ": null input or output pointer"));
  }
  if (in_stride < 0 || out_stride < 0 || (n > 1 && (in_stride < dim || out_stride < dim))) {
    return absl::InvalidArgumentError(absl::StrCat(who, ": strides (", in_stride, ", ",
                                                   out_stride, ") must be >= dim ", dim));
  }
  const int64_t in_bytes = ExtentBytes(n, dim, in_stride, element_size);
  const int64_t out_bytes = ExtentBytes(n, dim, out_stride, element_size);
  if (in_bytes < 0 || out_bytes < 0) {
    return absl::InvalidArgumentError(absl::StrCat(who, ": batch extent overflows"));
  }
  if (in == out) {
    if (in_stride != out_stride) {
      return absl::InvalidArgumentError(
          absl::StrCat(who, ": in-place use needs equal input and output strides"));
    }
    return absl::OkStatus();
  }
  const uintptr_t a = reinterpret_cast<uintptr_t>(in);
  const uintptr_t b = reinterpret_cast<uintptr_t>(out);
  if (a < b + static_cast<uintptr_t>(out_bytes) && b < a + static_cast<uintptr_t>(in_bytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat(who, ": input and output overlap without being identical"));
  }
  return absl::OkStatus();
}

absl::Status ValidateBackwardBatch(const char* who, int64_t n, int64_t dim, const void* in,
                                   int64_t in_stride, const void* grad_out,
                                   int64_t grad_out_stride, const void* grad_in,
                                   int64_t grad_in_stride, size_t element_size) {
  absl::Status s = ValidateBatch(who, n, dim, in, in_stride, in, in_stride, element_size);
  if (s.ok()) {
    s = ValidateBatch(who, n, dim, grad_out, grad_out_stride, grad_out, grad_out_stride,
                      element_size);
  }
  if (s.ok() && grad_in != nullptr) {
    s = ValidateBatch(who, n, dim, grad_out, grad_out_stride, grad_in, grad_in_stride,
                      element_size);
  }
  if (s.ok() && grad_in != nullptr && n > 0) {
    // grad_in and in: disjoint. The parameter gradients read every row of in, and a row
    // of grad_in written over a row of in still to be read would change them silently.
    const int64_t in_bytes = ExtentBytes(n, dim, in_stride, element_size);
    const int64_t gi_bytes = ExtentBytes(n, dim, grad_in_stride, element_size);
    const uintptr_t a = reinterpret_cast<uintptr_t>(in);
    const uintptr_t b = reinterpret_cast<uintptr_t>(grad_in);
    if (a < b + static_cast<uintptr_t>(gi_bytes) && b < a + static_cast<uintptr_t>(in_bytes)) {
      return absl::InvalidArgumentError(
          absl::StrCat(who, ": grad_in overlaps in (the input rows the parameter gradients read)"));
    }
  }
  return s;
}

}  // namespace internal
}  // namespace group
}  // namespace gpe
