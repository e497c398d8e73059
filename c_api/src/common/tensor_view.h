// Validation of DLPack tensors passed through the C ABI.
#ifndef GPE_C_API_SRC_COMMON_TENSOR_VIEW_H_
#define GPE_C_API_SRC_COMMON_TENSOR_VIEW_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "dlpack/dlpack.h"

namespace gpe::c_api {

// kUInt8 and kBool (DLPack's kDLUInt / kDLBool of 8 bits) are boolean masks only.
enum class DType { kFloat32, kFloat64, kInt64, kBFloat16, kFloat16, kUInt8, kBool };

const char* DTypeName(DType dtype);

// The dtype lists most entry points pass to ViewTensor: int64 (positions, indices),
// float32 or float64 (activations), float64 (parameters and their gradients).
inline constexpr DType kInt[] = {DType::kInt64};
inline constexpr DType kFloat[] = {DType::kFloat32, DType::kFloat64};
inline constexpr DType kF64[] = {DType::kFloat64};

// A validated CPU tensor: shape and strides in elements (strides filled in for
// compact row-major tensors), data pointer already offset by byte_offset.
struct TensorView {
  DType dtype;
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;
  void* data = nullptr;

  int64_t numel() const;
  int64_t element_size() const;
  // The byte range [lo, hi) the tensor's elements occupy (empty when numel() == 0).
  uintptr_t lo() const;
  uintptr_t hi() const;
  template <typename T>
  T* typed() const { return static_cast<T*>(data); }
};

// Checks `t` (named `name` in messages): non-null, on the CPU, one of `allowed`
// dtypes (single lane), `ndim` dimensions, non-negative sizes, non-null data when it
// holds elements, and byte extents that fit in the address space.
absl::StatusOr<TensorView> ViewTensor(const DLTensor* t, const char* name, int ndim,
                                      absl::Span<const DType> allowed);

// True when a and b have one shape and reach each element by the same offset: their
// strides agree on every dimension of size above 1 (a size-1 dimension's stride is never
// multiplied by anything but 0, so the callers that index both by one set of strides may
// take either; PyTorch and NumPy give such dimensions strides of their own choosing), and
// always where the tensors are empty.
bool SameStrides(const TensorView& a, const TensorView& b);
// True when a and b describe the same elements in the same order.
bool SameLayout(const TensorView& a, const TensorView& b);
// True when the byte ranges of a and b intersect.
bool Overlaps(const TensorView& a, const TensorView& b);

}  // namespace gpe::c_api

#endif  // GPE_C_API_SRC_COMMON_TENSOR_VIEW_H_
