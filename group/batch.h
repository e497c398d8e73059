// Argument checks shared by every representation's batched Apply (internal).
//
// A batch is n vectors of `dim` elements, vector j starting at ptr + j * stride
// (strides in elements). Output may alias input exactly (in == out, equal strides);
// any other overlap is rejected.
#ifndef GROUP_BATCH_H_
#define GROUP_BATCH_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"

namespace gpe {
namespace group {
namespace internal {

absl::Status ValidateBatch(const char* who, int64_t n, int64_t dim, const void* in,
                           int64_t in_stride, const void* out, int64_t out_stride,
                           size_t element_size);

// The arguments of a batched backward pass: `in` and `grad_out` readable batches, and
// `grad_in` (may be null) a batch that is grad_out itself or disjoint from it, and
// disjoint from `in`.
absl::Status ValidateBackwardBatch(const char* who, int64_t n, int64_t dim, const void* in,
                                   int64_t in_stride, const void* grad_out,
                                   int64_t grad_out_stride, const void* grad_in,
                                   int64_t grad_in_stride, size_t element_size);

}  // namespace internal
}  // namespace group
}  // namespace gpe

#endif  // GROUP_BATCH_H_
