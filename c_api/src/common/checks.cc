#include "c_api/src/common/checks.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "c_api/include/gpe/common.h"
#include "c_api/src/common/error.h"

namespace gpe::c_api {

absl::Status CheckStructSize(uint32_t struct_size, size_t min_size, size_t size,
                             const char* name) {
  if (struct_size < min_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, ".struct_size is ", struct_size, "; set it to sizeof(", name,
        ") (use the _INIT macro)"));
  }
  if (struct_size > size) {
    return VersionMismatchError(absl::StrCat(
        name, ".struct_size is ", struct_size, " but this library (", gpe_version_string(),
        ") knows ", size, " bytes: the header is newer than the library"));
  }
  return absl::OkStatus();
}

absl::Status CheckReleasedSize(uint32_t struct_size, absl::Span<const size_t> released,
                               const char* name) {
  for (size_t size : released) {
    if (struct_size == size) return absl::OkStatus();
  }
  if (!released.empty() && struct_size > released.back()) return absl::OkStatus();
  std::string sizes;
  for (size_t i = 0; i < released.size(); ++i) {
    absl::StrAppend(&sizes, i == 0 ? "" : ", ", released[i]);
  }
  return absl::InvalidArgumentError(absl::StrCat(
      name, ".struct_size is ", struct_size, ", the size of no version of the struct (",
      sizes, " bytes, the last this library's): set it to sizeof(", name,
      ") (use the _INIT macro)"));
}

absl::Status CheckDim(int64_t dim, const char* name, int64_t min_dim) {
  if (dim < min_dim) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, " must be >= ", min_dim, "; got ", dim));
  }
  if (dim > kMaxDim) {
    return absl::OutOfRangeError(absl::StrCat(name, " is ", dim, "; at most ", kMaxDim,
                                              " is supported"));
  }
  return absl::OkStatus();
}

absl::Status CheckFinite(const double* v, int64_t n, const char* name) {
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(v[i])) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, "[", i, "] is ", v[i], "; values must be finite"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckDisjoint(absl::Span<const NamedView> views) {
  for (size_t i = 0; i < views.size(); ++i) {
    for (size_t j = i + 1; j < views.size(); ++j) {
      if (views[i].first == nullptr || views[j].first == nullptr) continue;
      if (Overlaps(*views[i].first, *views[j].first)) {
        return absl::InvalidArgumentError(absl::StrCat(views[i].second, " and ", views[j].second,
                                                       " overlap; pass disjoint memory"));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status CheckMaterialised(const TensorView& v, const char* name) {
  for (size_t i = 0; i < v.shape.size(); ++i) {
    if (v.shape[i] > 1 && v.strides[i] == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, " repeats entries (stride 0 in dimension ", i, ", of size ",
                       v.shape[i], "); pass it materialised (contiguous)"));
    }
  }
  return absl::OkStatus();
}

namespace {
// Whether some two indices of `v` (elements > 0) reach one element by CheckNoSelfOverlap's
// sufficient test.
bool MayRepeat(const TensorView& v) {
  std::vector<std::pair<int64_t, int64_t>> dims;  // (|stride|, size) with size > 1
  for (size_t i = 0; i < v.shape.size(); ++i) {
    if (v.shape[i] > 1) dims.emplace_back(v.strides[i] < 0 ? -v.strides[i] : v.strides[i], v.shape[i]);
  }
  std::sort(dims.begin(), dims.end());
  int64_t reach = 0;  // largest offset reachable with the smaller dimensions
  for (const auto& [stride, size] : dims) {
    if (stride <= reach) return true;
    reach += stride * (size - 1);  // bounded: ViewTensor checked the extent
  }
  return false;
}

// v's entry count, saturated at kMaxBroadcastCopy + 1 (no overflow); 0 for an empty view.
int64_t EntriesUpToCopyBound(const TensorView& v) {
  int64_t entries = 1;
  for (int64_t n : v.shape) {
    if (n == 0) return 0;
    entries = entries > kMaxBroadcastCopy / n ? kMaxBroadcastCopy + 1 : entries * n;
  }
  return entries;
}

}  // namespace

absl::Status CheckDistinctEntries(const TensorView& v, const char* name) {
  if (EntriesUpToCopyBound(v) > kMaxBroadcastCopy && MayRepeat(v)) {
    std::string strides;
    for (size_t i = 0; i < v.strides.size(); ++i) {
      absl::StrAppend(&strides, i == 0 ? "" : ", ", v.strides[i]);
    }
    return absl::InvalidArgumentError(absl::StrCat(
        name, " has more than 2^24 entries under strides [", strides, "] that may map "
        "distinct indices to one element (a broadcast or overlapping view), which this "
        "call would copy; pass it materialised (contiguous)"));
  }
  return absl::OkStatus();
}

absl::Status CheckBroadcastCopy(const TensorView& v, const char* name) {
  bool broadcast = false;
  for (size_t i = 0; i < v.shape.size(); ++i) {
    if (v.shape[i] > 1 && v.strides[i] == 0) broadcast = true;
  }
  if (broadcast && EntriesUpToCopyBound(v) > kMaxBroadcastCopy) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, " is a broadcast view (a zero stride) of more than 2^24 entries, which this "
        "call would copy; pass it materialised (contiguous)"));
  }
  return absl::OkStatus();
}

absl::Status CheckNoSelfOverlap(const TensorView& v, const char* name) {
  if (v.numel() == 0 || !MayRepeat(v)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      name, " has strides under which distinct indices share an element (e.g. a zero "
            "stride); outputs must not overlap themselves"));
}

absl::Span<const int64_t> ContiguousPositions(const TensorView& p, std::vector<int64_t>* storage) {
  const int64_t n = p.shape[0];
  const int64_t* data = p.typed<const int64_t>();
  if (n <= 1 || p.strides[0] == 1) return absl::MakeConstSpan(data, static_cast<size_t>(n));
  storage->resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) (*storage)[i] = data[i * p.strides[0]];
  return *storage;
}

bool DirectRows(const TensorView& v) {
  const bool unit_cols = v.shape[1] <= 1 || v.strides[1] == 1;
  const bool rows_apart = v.shape[0] <= 1 || v.strides[0] >= v.shape[1];
  return unit_cols && rows_apart;
}

}  // namespace gpe::c_api
