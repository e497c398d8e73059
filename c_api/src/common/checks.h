// Argument checks shared by the C ABI's entry points, and the batch helpers that hand
// validated [N, dim] views to group/ and encodings/ code.
#ifndef GPE_C_API_SRC_COMMON_CHECKS_H_
#define GPE_C_API_SRC_COMMON_CHECKS_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "c_api/src/common/tensor_view.h"

namespace gpe::c_api {

// Largest vector length accepted: keeps dim * dim * 8 bytes (a dense matrix) and all
// index arithmetic far from int64 overflow.
inline constexpr int64_t kMaxDim = int64_t{1} << 20;

// An option struct's leading struct_size field: at least the first released version's
// size (`min_size`), at most this library's (`size`); VERSION_MISMATCH when larger.
absl::Status CheckStructSize(uint32_t struct_size, size_t min_size, size_t size,
                             const char* name);
// The caller's versioned struct copied into *out: CheckStructSize, then struct_size a
// multiple of alignof(T) (each version's sizeof is one, and a size between two would end
// inside a pointer, which copying struct_size bytes would tear into a wild non-NULL
// one), then its first struct_size bytes over a zeroed T: fields past an older caller's
// struct read as 0 / NULL.
template <class T>
absl::Status CopyVersioned(const T& in, size_t min_size, const char* name, T* out) {
  if (absl::Status s = CheckStructSize(in.struct_size, min_size, sizeof(T), name); !s.ok()) {
    return s;
  }
  if (in.struct_size % alignof(T) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, ".struct_size is ", in.struct_size, ": not a multiple of ", alignof(T),
        ", so not the size of any version of the struct; set it to sizeof(", name,
        ") (use the _INIT macro)"));
  }
  std::memset(out, 0, sizeof(T));
  std::memcpy(out, &in, in.struct_size);
  return absl::OkStatus();
}

// A versioned struct's struct_size that CopyVersioned accepted, checked against the sizes
// the struct had at each release (`released`, ascending, the library's own last): a size
// between two of them (a multiple of 8 ending after one field of a later version) is no
// version's and would silently drop the fields past it, so it is InvalidArgument listing
// the accepted sizes. Sizes above the library's stay CheckStructSize's VERSION_MISMATCH.
absl::Status CheckReleasedSize(uint32_t struct_size, absl::Span<const size_t> released,
                               const char* name);

// What every gpe_*_create checks first, in this order: `out` non-null (then *out set to
// NULL), `options` non-null, and options->struct_size by CheckStructSize against
// [min_size, sizeof(Options)].
template <class Options, class Out>
absl::Status CheckCreate(Out** out, const Options* options, size_t min_size, const char* name) {
  if (out == nullptr) return absl::InvalidArgumentError("out is NULL");
  *out = nullptr;
  if (options == nullptr) return absl::InvalidArgumentError("options is NULL");
  return CheckStructSize(options->struct_size, min_size, sizeof(Options), name);
}
// min_dim <= dim <= kMaxDim (OutOfRange above).
absl::Status CheckDim(int64_t dim, const char* name, int64_t min_dim = 2);
// Every v[i] finite; the message names name[i].
absl::Status CheckFinite(const double* v, int64_t n, const char* name);

// A named view, for the pairwise checks below.
using NamedView = std::pair<const TensorView*, const char*>;
// InvalidArgument when two of `views` (null entries skipped) share memory.
absl::Status CheckDisjoint(absl::Span<const NamedView> views);

// InvalidArgument when the output view `v` maps two indices to one element (e.g. a
// zero stride). The test is the usual sufficient one: sorted by |stride|, each
// dimension's stride clears the whole extent of the smaller ones.
absl::Status CheckNoSelfOverlap(const TensorView& v, const char* name);

// A tensor a call copies whose size nothing else bounds (skew generators, Shaw tables,
// cu_seqlens, tree children) must be materialised: a zero stride over more than one entry
// (a broadcast view) would let a few bytes describe 2^39 entries, whose copy and walk
// would exhaust memory or time. InvalidArgument naming it otherwise.
absl::Status CheckMaterialised(const TensorView& v, const char* name);
// For inputs a call copies whose sizes a call with no query token leaves unbounded
// (sinks, kv_lengths, block_table): a view that may map two indices to one element (a
// zero stride, or e.g. [B, P] with strides {1, 1}: B + P - 1 elements describing B x P;
// CheckNoSelfOverlap's sufficient test, sorted by |stride|, each clearing the smaller
// ones' extent) is copied up to kMaxBroadcastCopy entries, as CheckBroadcastCopy allows
// broadcasts (0.9.0 copied such small views), and refused above: InvalidArgument naming
// it.
absl::Status CheckDistinctEntries(const TensorView& v, const char* name);

// Entries a call may copy out of a broadcast input (a zero stride over more than one
// entry) before refusing it: 2^24 (128 MiB of float64). Below it a broadcast input is a
// convenience and its copy cheap; above it a few bytes would describe a copy bounded
// only by the per-dimension limits (2^20 x 2^20 entries), exhausting memory or time.
inline constexpr int64_t kMaxBroadcastCopy = int64_t{1} << 24;
// InvalidArgument naming `name` when `v` is broadcast and has more than
// kMaxBroadcastCopy entries; a materialised input of any size passes (its copy is
// bounded by memory the caller already holds).
absl::Status CheckBroadcastCopy(const TensorView& v, const char* name);

// Positions [N] as a contiguous span: the tensor's own memory when it is compact,
// otherwise a gathered copy in `storage`.
absl::Span<const int64_t> ContiguousPositions(const TensorView& p, std::vector<int64_t>* storage);

// True when the rows of a [N, dim] view can be passed as (pointer, row stride in
// elements) to group/ and encodings/ batch code: unit column stride and, for more than
// one row, a row stride >= dim.
bool DirectRows(const TensorView& v);

// A [N, dim] view as (pointer, row stride): the view's own memory when DirectRows,
// otherwise a compact row-major copy in `storage` (gathered when `gather`).
template <class T>
T* RowsOf(const TensorView& v, bool gather, std::vector<T>* storage, int64_t* stride) {
  if (DirectRows(v)) {
    *stride = v.shape[0] > 1 ? v.strides[0] : v.shape[1];
    return v.typed<T>();
  }
  const int64_t n = v.shape[0], dim = v.shape[1];
  storage->assign(static_cast<size_t>(n * dim), T(0));
  if (gather) {
    const T* src = v.typed<const T>();
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < dim; ++j) {
        (*storage)[i * dim + j] = src[i * v.strides[0] + j * v.strides[1]];
      }
    }
  }
  *stride = dim;
  return storage->data();
}

// Copies a compact [N, dim] buffer back into `v` (a no-op when `rows` is v's memory).
template <class T>
void ScatterRows(const T* rows, const TensorView& v) {
  if (rows == v.typed<const T>() && DirectRows(v)) return;
  const int64_t n = v.shape[0], dim = v.shape[1];
  T* dst = v.typed<T>();
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < dim; ++j) dst[i * v.strides[0] + j * v.strides[1]] = rows[i * dim + j];
  }
}

}  // namespace gpe::c_api

#endif  // GPE_C_API_SRC_COMMON_CHECKS_H_
