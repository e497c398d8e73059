#include "c_api/src/common/tensor_view.h"

#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace gpe::c_api {
namespace {

bool FromDL(DLDataType t, DType* out) {
  if (t.lanes != 1) return false;
  if (t.code == kDLFloat && t.bits == 32) { *out = DType::kFloat32; return true; }
  if (t.code == kDLFloat && t.bits == 64) { *out = DType::kFloat64; return true; }
  if (t.code == kDLFloat && t.bits == 16) { *out = DType::kFloat16; return true; }
  if (t.code == kDLBfloat && t.bits == 16) { *out = DType::kBFloat16; return true; }
  if (t.code == kDLInt && t.bits == 64) { *out = DType::kInt64; return true; }
  if (t.code == kDLUInt && t.bits == 8) { *out = DType::kUInt8; return true; }
  // kDLBool (code 6 since DLPack 0.8; this header predates it): one byte per element.
  if (t.code == 6 && t.bits == 8) { *out = DType::kBool; return true; }
  return false;
}

int64_t SizeOf(DType d) {
  switch (d) {
    case DType::kFloat32: return 4;
    case DType::kFloat64: return 8;
    case DType::kInt64: return 8;
    case DType::kBFloat16: return 2;
    case DType::kFloat16: return 2;
    case DType::kUInt8: return 1;
    case DType::kBool: return 1;
  }
  return 0;
}

// The largest element offset (in elements, from data) reached on each side.
void Extent(const TensorView& v, int64_t* min_off, int64_t* max_off) {
  int64_t lo = 0, hi = 0;
  for (size_t i = 0; i < v.shape.size(); ++i) {
    const int64_t span = (v.shape[i] - 1) * v.strides[i];
    if (span < 0) lo += span; else hi += span;
  }
  *min_off = lo;
  *max_off = hi;
}

}  // namespace

const char* DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return "float32";
    case DType::kFloat64: return "float64";
    case DType::kInt64: return "int64";
    case DType::kBFloat16: return "bfloat16";
    case DType::kFloat16: return "float16";
    case DType::kUInt8: return "uint8";
    case DType::kBool: return "bool";
  }
  return "unknown";
}

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

int64_t TensorView::element_size() const { return SizeOf(dtype); }

uintptr_t TensorView::lo() const {
  int64_t a, b;
  Extent(*this, &a, &b);
  return reinterpret_cast<uintptr_t>(data) + a * element_size();
}

uintptr_t TensorView::hi() const {
  int64_t a, b;
  Extent(*this, &a, &b);
  return reinterpret_cast<uintptr_t>(data) + (b + 1) * element_size();
}

absl::StatusOr<TensorView> ViewTensor(const DLTensor* t, const char* name, int ndim,
                                      absl::Span<const DType> allowed) {
  if (t == nullptr) return absl::InvalidArgumentError(absl::StrCat(name, " is NULL"));
  // Read the device type as the int32 it is on the wire: a C or ctypes caller may pass a
  // value outside the C++ enum's range, which must not be loaded as DLDeviceType.
  static_assert(sizeof(t->device.device_type) == sizeof(int32_t), "DLPack 0.6 layout");
  int32_t device_type;
  std::memcpy(&device_type, &t->device.device_type, sizeof device_type);
  if (device_type != kDLCPU) {
    return absl::UnimplementedError(absl::StrCat(
        name, " must be on the CPU (DLPack device type kDLCPU = 1); got device type ",
        device_type));
  }
  TensorView v;
  std::vector<std::string> allowed_names;
  for (DType d : allowed) allowed_names.push_back(DTypeName(d));
  const std::string expected = absl::StrJoin(allowed_names, " or ");
  if (!FromDL(t->dtype, &v.dtype)) {
    // Vector lanes are a layout GroupPE does not take; any other dtype is a caller error.
    auto error = t->dtype.lanes != 1 ? absl::UnimplementedError : absl::InvalidArgumentError;
    return error(absl::StrCat(name, " has DLPack dtype (code ", static_cast<int>(t->dtype.code),
                              ", bits ", static_cast<int>(t->dtype.bits), ", lanes ",
                              t->dtype.lanes, "); expected ", expected));
  }
  bool ok = false;
  for (DType d : allowed) ok = ok || d == v.dtype;
  if (!ok) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, " has dtype ", DTypeName(v.dtype), "; expected ", expected));
  }
  if (t->ndim != ndim) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, " must have ", ndim, " dimensions; got ", t->ndim));
  }
  if (ndim > 0 && t->shape == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(name, "->shape is NULL"));
  }
  v.shape.assign(t->shape, t->shape + ndim);
  // Every size non-negative, and the element count representable.
  int64_t numel = 1;
  for (int i = 0; i < ndim; ++i) {
    if (v.shape[i] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, " has negative size ", v.shape[i], " in dimension ", i));
    }
    if (v.shape[i] != 0 && numel > std::numeric_limits<int64_t>::max() / 8 / v.shape[i]) {
      return absl::OutOfRangeError(absl::StrCat(name, " has too many elements"));
    }
    numel *= v.shape[i];
  }
  v.strides.resize(ndim);
  if (t->strides == nullptr) {
    int64_t s = 1;
    for (int i = ndim - 1; i >= 0; --i) {
      v.strides[i] = s;
      // Saturates: with a zero size elsewhere the other sizes are unbounded (no element
      // is ever addressed then), and the product must not overflow (found by fuzzing).
      if (__builtin_mul_overflow(s, v.shape[i] > 0 ? v.shape[i] : 1, &s)) {
        s = std::numeric_limits<int64_t>::max();
      }
    }
  } else {
    v.strides.assign(t->strides, t->strides + ndim);
  }
  if (numel > 0) {
    if (t->data == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(name, "->data is NULL"));
    }
    // The byte extent must not overflow: |stride| * (size - 1) summed, times the
    // element size, below 2^62.
    const int64_t limit = (int64_t{1} << 62) / 8;
    int64_t reach = 0;
    for (int i = 0; i < ndim; ++i) {
      // INT64_MIN has no negation: rejected before |stride| is formed (found by fuzzing).
      if (v.strides[i] == std::numeric_limits<int64_t>::min()) {
        return absl::OutOfRangeError(absl::StrCat(name, " has a stride out of range"));
      }
      const int64_t st = v.strides[i] < 0 ? -v.strides[i] : v.strides[i];
      if (v.shape[i] > 1 && st > limit / (v.shape[i] - 1)) {
        return absl::OutOfRangeError(absl::StrCat(name, " has a stride out of range"));
      }
      reach += st * (v.shape[i] - 1);
      if (reach > limit) return absl::OutOfRangeError(absl::StrCat(name, " spans too much memory"));
    }
  }
  // byte_offset is applied only to real memory (an empty tensor may have data NULL),
  // must keep the address arithmetic far from overflow, and must leave the first element
  // aligned to its size (DLPack's rule; unaligned loads are undefined behaviour in C++).
  if (t->byte_offset > static_cast<uint64_t>(int64_t{1} << 62)) {
    return absl::OutOfRangeError(
        absl::StrCat(name, "->byte_offset is ", t->byte_offset, "; out of range"));
  }
  if (t->data == nullptr) {
    v.data = nullptr;
    return v;
  }
  const uintptr_t address = reinterpret_cast<uintptr_t>(t->data) + t->byte_offset;
  if (numel > 0 && address % static_cast<uintptr_t>(v.element_size()) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, "->data + byte_offset is not aligned to its ", v.element_size(),
        "-byte elements"));
  }
  v.data = static_cast<char*>(t->data) + t->byte_offset;
  return v;
}

bool SameStrides(const TensorView& a, const TensorView& b) {
  if (a.shape != b.shape || a.strides.size() != a.shape.size() ||
      b.strides.size() != b.shape.size()) {
    return false;
  }
  if (a.numel() == 0) return true;
  for (size_t d = 0; d < a.shape.size(); ++d) {
    if (a.shape[d] > 1 && a.strides[d] != b.strides[d]) return false;
  }
  return true;
}

bool SameLayout(const TensorView& a, const TensorView& b) {
  return a.data == b.data && a.dtype == b.dtype && SameStrides(a, b);
}

bool Overlaps(const TensorView& a, const TensorView& b) {
  if (a.numel() == 0 || b.numel() == 0) return false;
  return a.lo() < b.hi() && b.lo() < a.hi();
}

}  // namespace gpe::c_api
