#include "attention/descriptor.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <mutex>
#include <numeric>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "build_defs/target_clones.h"
#include "group/angle.h"
#include "parallel/thread_pool.h"

namespace gpe {
namespace attention {
namespace {

using encodings::sequence::RopeLayout;
using encodings::sequence::RopePositions;
using encodings::sequence::RopeTensor;

absl::Status Bad(const std::string& msg) {
  return absl::InvalidArgumentError(absl::StrCat("attention: ", msg));
}

// a * b into *out, false on int64 overflow (a, b >= 0).
bool MulOk(int64_t a, int64_t b, int64_t* out) {
  if (a != 0 && b > std::numeric_limits<int64_t>::max() / a) return false;
  *out = a * b;
  return true;
}

// Checks that (batch, token, head) rows of `dim` contiguous elements with the given
// extents and strides never overlap and that the largest offset fits in int64.
// Sufficient rule: sorted by stride, each stride of a dim with extent > 1 is at least the
// span of all inner dims (so it is >= head_dim >= 1); strides of extent-1 dims only need
// to be >= 0.
absl::Status CheckTensor(const char* name, const Strides& s, bool has_batch, int64_t batch,
                         int64_t tokens, int64_t heads, int64_t dim) {
  std::vector<std::pair<int64_t, int64_t>> dims;  // (stride, extent)
  if (has_batch) {
    if (s.batch < 0) return Bad(absl::StrCat(name, ".batch stride must be >= 0, got ", s.batch));
    if (batch > 1) dims.emplace_back(s.batch, batch);
  }
  if (s.token < 0) return Bad(absl::StrCat(name, ".token stride must be >= 0, got ", s.token));
  if (s.head < 0) return Bad(absl::StrCat(name, ".head stride must be >= 0, got ", s.head));
  if (tokens > 1) dims.emplace_back(s.token, tokens);
  if (heads > 1) dims.emplace_back(s.head, heads);
  std::sort(dims.begin(), dims.end());
  int64_t span = dim;  // elements covered by the inner dims: max offset + 1
  for (const auto& [stride, extent] : dims) {
    if (stride < span) {
      return Bad(absl::StrCat(name, ": stride ", stride, " overlaps rows spanning ", span,
                              " elements (strides must keep distinct rows disjoint)"));
    }
    int64_t extra = 0;
    if (!MulOk(stride, extent - 1, &extra) || extra > std::numeric_limits<int64_t>::max() - span) {
      return Bad(absl::StrCat(name, ": largest offset overflows int64"));
    }
    span += extra;
  }
  return absl::OkStatus();
}

// A paged KV cache's geometry and the page ids every sequence reads (LAYOUTS).
absl::Status CheckPages(const AttentionArgs& a) {
  const PagedKv& p = a.pages;
  if (a.layout != Layout::kBSHD) return Bad("pages: a paged KV cache needs the bshd layout");
  if (p.page_size < 1) return Bad(absl::StrCat("pages.page_size must be >= 1, got ", p.page_size));
  if (a.seq_len_k % p.page_size != 0) {
    return Bad(absl::StrCat("pages: seq_len_k (", a.seq_len_k, ", each sequence's capacity) must be ",
                            "a multiple of page_size (", p.page_size, ")"));
  }
  if (p.num_pages < 0) return Bad(absl::StrCat("pages.num_pages must be >= 0, got ", p.num_pages));
  const int64_t per_seq = a.seq_len_k / p.page_size;
  int64_t entries = 0;
  if (!MulOk(a.batch, per_seq, &entries) || static_cast<int64_t>(p.block_table.size()) != entries) {
    return Bad(absl::StrCat("pages.block_table has ", p.block_table.size(), " entries, expected batch (",
                            a.batch, ") x pages per sequence (", per_seq, ")"));
  }
  // No pages, nothing to check: a batch of 2^40 empty sequences is not walked (it took
  // ~45 minutes here while the dense call returned at once).
  if (per_seq == 0) return absl::OkStatus();
  for (int64_t b = 0; b < a.batch; ++b) {
    const int64_t used = a.kv_lengths.empty() ? a.seq_len_k : a.kv_lengths[b];
    for (int64_t i = 0; i < (used + p.page_size - 1) / p.page_size; ++i) {
      const int64_t page = p.block_table[b * per_seq + i];
      if (page < 0 || page >= p.num_pages) {
        return Bad(absl::StrCat("pages.block_table[", b, "][", i, "] = ", page,
                                " is not a page id in [0, num_pages = ", p.num_pages, ")"));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status CheckCuSeqlens(const char* name, absl::Span<const int64_t> cu, int64_t total) {
  if (cu.empty()) return Bad(absl::StrCat(name, " must have batch + 1 >= 1 entries for thd"));
  if (cu[0] != 0) return Bad(absl::StrCat(name, "[0] must be 0, got ", cu[0]));
  for (size_t b = 1; b < cu.size(); ++b) {
    if (cu[b] < cu[b - 1]) {
      return Bad(absl::StrCat(name, " must be non-decreasing: entry ", b, " = ", cu[b], " < entry ",
                              b - 1, " = ", cu[b - 1]));
    }
  }
  if (cu.back() != total) {
    return Bad(
        absl::StrCat(name, " must end at the total token count ", total, ", got ", cu.back()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateCuSeqlens(const char* name, absl::Span<const int64_t> cu_seqlens,
                               int64_t total) {
  return CheckCuSeqlens(name, cu_seqlens, total);
}

namespace {

// PreparedRowTransform's Forward and Backward overloads for a bound transform whose float
// and double paths are one template: Derived defines (and befriends this class for)
//   template <class T>
//   absl::Status Run(int64_t first, int64_t count, T* rows, int64_t stride,
//                    bool backward) const;
template <class Derived>
class PreparedFromRun : public PreparedRowTransform {
 public:
  absl::Status Forward(int64_t first, int64_t count, float* rows,
                       int64_t stride) const final {
    return self().Run(first, count, rows, stride, /*backward=*/false);
  }
  absl::Status Forward(int64_t first, int64_t count, double* rows,
                       int64_t stride) const final {
    return self().Run(first, count, rows, stride, /*backward=*/false);
  }
  absl::Status Backward(int64_t first, int64_t count, float* rows,
                        int64_t stride) const final {
    return self().Run(first, count, rows, stride, /*backward=*/true);
  }
  absl::Status Backward(int64_t first, int64_t count, double* rows,
                        int64_t stride) const final {
    return self().Run(first, count, rows, stride, /*backward=*/true);
  }

 private:
  const Derived& self() const { return static_cast<const Derived&>(*this); }
};

// The default binding: no precomputation, sub-spans of the positions.
class UnpreparedRowTransform final : public PreparedFromRun<UnpreparedRowTransform> {
 public:
  UnpreparedRowTransform(const RowTransform& t, absl::Span<const int64_t> positions)
      : t_(t), positions_(positions) {}

 private:
  friend class PreparedFromRun<UnpreparedRowTransform>;
  template <class T>
  absl::Status Run(int64_t first, int64_t count, T* rows, int64_t stride, bool backward) const {
    absl::Status s = CheckRange(first, count);
    if (!s.ok()) return s;
    const absl::Span<const int64_t> positions = positions_.subspan(first, count);
    return backward ? t_.Backward(positions, rows, stride) : t_.Forward(positions, rows, stride);
  }
  absl::Status CheckRange(int64_t first, int64_t count) const {
    const int64_t n = static_cast<int64_t>(positions_.size());
    if (count < 0 || first < 0 || first > n - count) {
      return Bad(absl::StrCat("prepared transform: rows [", first, ", ", first, " + ", count,
                              ") outside its ", n, " positions"));
    }
    return absl::OkStatus();
  }
  const RowTransform& t_;
  absl::Span<const int64_t> positions_;
};

absl::Status CheckRows(const char* who, int64_t first, int64_t count, int64_t n) {
  if (count < 0 || first < 0 || first > n - count) {
    return Bad(absl::StrCat(who, ": rows [", first, ", ", first, " + ", count,
                            ") outside its ", n, " tokens"));
  }
  return absl::OkStatus();
}

// RoPE bound to tokens: the float table for the kernels; the double overloads rebuild a
// double table for the requested tokens from their ids (exact oracle arithmetic).
class PreparedRope final : public PreparedRowTransform {
 public:
  // `table` holds the float table, or why it could not be built (an attention factor or
  // xPos scale past float32's range): float rows then fail with that status, while
  // double rows, rotated in double without the table, run.
  PreparedRope(const RopeRowTransform& tr, const encodings::sequence::Rope& rope,
               absl::StatusOr<encodings::sequence::RopeTable<float>> table,
               std::vector<int64_t> ids, int64_t num_axes)
      : tr_(tr), rope_(rope), table_(std::move(table)), ids_(std::move(ids)), axes_(num_axes) {}
  absl::Status Forward(int64_t first, int64_t count, float* rows,
                       int64_t stride) const override {
    if (!table_.ok()) return table_.status();
    return rope_.ApplyRows(*table_, first, count, rows, stride, /*inverse=*/false);
  }
  absl::Status Backward(int64_t first, int64_t count, float* rows,
                        int64_t stride) const override {
    if (!table_.ok()) return table_.status();
    return rope_.ApplyRows(*table_, first, count, rows, stride, /*inverse=*/true);
  }
  absl::Status Forward(int64_t first, int64_t count, double* rows,
                       int64_t stride) const override {
    return RunDouble(first, count, rows, stride, false);
  }
  absl::Status Backward(int64_t first, int64_t count, double* rows,
                        int64_t stride) const override {
    return RunDouble(first, count, rows, stride, true);
  }

 private:
  absl::Status RunDouble(int64_t first, int64_t count, double* rows, int64_t stride,
                         bool backward) const {
    const int64_t n = static_cast<int64_t>(ids_.size()) / axes_;
    if (absl::Status s = CheckRows("prepared RoPE", first, count, n); !s.ok()) return s;
    std::vector<int64_t> sub(static_cast<size_t>(count * axes_));  // axis-major
    for (int64_t a = 0; a < axes_; ++a) {
      std::copy(ids_.begin() + a * n + first, ids_.begin() + a * n + first + count,
                sub.begin() + a * count);
    }
    return tr_.RunIds<double>(sub, count, rows, stride, backward);
  }
  const RopeRowTransform& tr_;
  const encodings::sequence::Rope& rope_;
  absl::StatusOr<encodings::sequence::RopeTable<float>> table_;
  std::vector<int64_t> ids_;  // axis-major, [num_axes][tokens]
  int64_t axes_;
};

// A representation bound to tokens by group element: Forward applies rho(g_t),
// Backward rho(g_t^-1) = rho(g_t)^T (orthogonal representations), both through the
// representation's own Apply (double arithmetic, rounded once to the row type).
template <class Rep>
class PreparedElements final : public PreparedFromRun<PreparedElements<Rep>> {
 public:
  using Element = typename Rep::Element;
  PreparedElements(const Rep& rep, std::vector<Element> elements, std::vector<Element> inverses)
      : rep_(rep), fwd_(std::move(elements)), inv_(std::move(inverses)) {}

 private:
  friend class PreparedFromRun<PreparedElements>;
  template <class T>
  absl::Status Run(int64_t first, int64_t count, T* rows, int64_t stride, bool backward) const {
    const std::vector<Element>& e = backward ? inv_ : fwd_;
    const int64_t n = static_cast<int64_t>(e.size());
    if (absl::Status s = CheckRows("prepared group elements", first, count, n); !s.ok()) {
      return s;
    }
    if (count == 0) return absl::OkStatus();
    return rep_.template Apply<T>(absl::MakeConstSpan(e).subspan(first, count), rows, stride,
                                  rows, stride);
  }
  const Rep& rep_;
  std::vector<Element> fwd_, inv_;
};

// A run of GRAPE-M commuting planes whose coordinates are consecutive: planes k0 + i,
// i < len, of the sorted order rotate coordinates (first + i, second + i) (RoPE's
// half-split layout is one run of d / 2 planes; any disjoint planes are runs of one).
struct PlaneRun {
  int64_t first, second, k0, len;
};

// a <- a c - b s, b <- a s + b c over n planes (backward: s negated, the transpose);
// a and b are disjoint ranges of one row. In blocks of 16 (one vector operation each at
// AVX-512 width: at -O2 GCC vectorises fixed-size blocks, not a loop of unknown length),
// then the rest one by one.
inline void RotatePlaneRunF32(float* __restrict a, float* __restrict b,
                              const float* __restrict c, const float* __restrict s, int64_t n,
                              bool backward) {
  constexpr int64_t kLanes = 16;
  const float sign = backward ? -1.0f : 1.0f;
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    float ta[kLanes], tb[kLanes];
    for (int64_t l = 0; l < kLanes; ++l) {
      const float x1 = a[i + l], x2 = b[i + l], sn = sign * s[i + l];
      ta[l] = x1 * c[i + l] - x2 * sn;
      tb[l] = x1 * sn + x2 * c[i + l];
    }
    for (int64_t l = 0; l < kLanes; ++l) a[i + l] = ta[l], b[i + l] = tb[l];
  }
  for (; i < n; ++i) {
    const float x1 = a[i], x2 = b[i], sn = sign * s[i];
    a[i] = x1 * c[i] - x2 * sn;
    b[i] = x1 * sn + x2 * c[i];
  }
}

// GRAPE-M's commuting planes on float rows (PreparedPlanes' float path), in float as
// RoPE's float rows: row r's table entry holds the cosines of its np planes (sorted
// order) then their sines, at cs + r * 2 * np. Cloned for AVX-512, AVX2 + FMA and the
// baseline, the best chosen when the library loads.
GPE_TARGET_CLONES("avx512f", GPE_CLONE_AVX2_FMA, "default") void PlanesRowsF32(
    float* rows, int64_t count, int64_t stride, const PlaneRun* runs, int64_t num_runs,
    int64_t np, const float* cs, bool backward) {
  for (int64_t r = 0; r < count; ++r) {
    float* x = rows + r * stride;
    const float* c = cs + r * 2 * np;
    for (int64_t i = 0; i < num_runs; ++i) {
      const PlaneRun& run = runs[i];
      RotatePlaneRunF32(x + run.first, x + run.second, c + run.k0, c + np + run.k0, run.len,
                        backward);
    }
  }
}

// The float table of PreparedPlanes: for token t and plane k of `order` (indices into
// `planes`), float(cos(ReducedAngle(p_t, omega))) at cs[t * 2 np + k] and the sine np
// further, bit for bit the rounding of the double path's values. Exact reduction and
// cos / sin cost tens of ns per entry (at d 128, 64 entries per token: more than the
// rotations themselves), so where p_t = p_{t-1} + 1 the pair steps from the previous
// token's by the angle-addition formula in double, re-anchored on the exact value every
// kAnchor tokens (each step adds at most ~1e-15 to the unit-norm pair: a stepped value
// lies within 2e-14 of the exact one), and is recomputed exactly where a float rounding
// boundary lies within 1e-13 of it (the scheme of RoPE's table, encodings/sequence/rope.cc).
std::vector<float> PlanesFloatTable(absl::Span<const encodings::sequence::CoordinatePlane> planes,
                                    absl::Span<const int64_t> order,
                                    absl::Span<const int64_t> positions) {
  constexpr int64_t kAnchor = 16;
  constexpr double kMargin = 1e-13;
  const int64_t n = static_cast<int64_t>(positions.size());
  const int64_t np = static_cast<int64_t>(order.size());
  std::vector<float> cs(static_cast<size_t>(n * 2 * np));
  std::vector<group::SinCos> step(static_cast<size_t>(np));
  auto exact = [&](int64_t p, int64_t k) {
    const double angle = group::ReducedAngle(p, planes[order[k]].omega);
    return group::SinCos{std::sin(angle), std::cos(angle)};
  };
  for (int64_t k = 0; k < np; ++k) step[k] = exact(1, k);
  auto same_float = [](double v) {
    return static_cast<float>(v - kMargin) == static_cast<float>(v + kMargin);
  };
  parallel::ParallelForChunks(PrepareThreads(), n, [&](int64_t t0, int64_t t1) {
    std::vector<group::SinCos> last(static_cast<size_t>(np));  // the previous token's
    int64_t since_anchor = kAnchor;
    for (int64_t t = t0; t < t1; ++t) {
      const bool stepped = t > t0 && since_anchor < kAnchor &&
                           positions[t - 1] < std::numeric_limits<int64_t>::max() &&
                           positions[t] == positions[t - 1] + 1;
      since_anchor = stepped ? since_anchor + 1 : 1;
      float* c = cs.data() + t * 2 * np;
      for (int64_t k = 0; k < np; ++k) {
        group::SinCos sc;
        if (stepped) {
          const group::SinCos& a = last[k];
          sc.cos = a.cos * step[k].cos - a.sin * step[k].sin;
          sc.sin = a.sin * step[k].cos + a.cos * step[k].sin;
        }
        if (!stepped || !same_float(sc.cos) || !same_float(sc.sin)) sc = exact(positions[t], k);
        last[k] = sc;
        c[k] = static_cast<float>(sc.cos);
        c[np + k] = static_cast<float>(sc.sin);
      }
    }
  });
  return cs;
}

// GRAPE-M's commuting planes bound to tokens. Float rows: a float table of (cos, sin) per
// token and plane (PlanesFloatTable), made here, and float arithmetic over runs of
// planes with consecutive coordinates (PlanesRowsF32). Double rows (the reference): the
// double table of the exact values, made on first use, and double arithmetic, as
// GrapeMCommutingPlanes::Apply.
class PreparedPlanes final : public PreparedFromRun<PreparedPlanes> {
 public:
  PreparedPlanes(std::vector<encodings::sequence::CoordinatePlane> planes,
                 std::vector<int64_t> positions)
      : planes_(std::move(planes)), positions_(std::move(positions)) {
    const int64_t np = static_cast<int64_t>(planes_.size());
    std::vector<int64_t> order(static_cast<size_t>(np));
    std::iota(order.begin(), order.end(), int64_t{0});
    std::sort(order.begin(), order.end(),
              [&](int64_t x, int64_t y) { return planes_[x].first < planes_[y].first; });
    for (int64_t k = 0; k < np; ++k) {
      const encodings::sequence::CoordinatePlane& p = planes_[order[k]];
      if (!runs_.empty()) {
        PlaneRun& last = runs_.back();
        if (p.first == last.first + last.len && p.second == last.second + last.len) {
          ++last.len;
          continue;
        }
      }
      runs_.push_back({p.first, p.second, k, 1});
    }
    csf_ = PlanesFloatTable(planes_, order, positions_);
  }

 private:
  friend class PreparedFromRun<PreparedPlanes>;
  template <class T>
  absl::Status Run(int64_t first, int64_t count, T* rows, int64_t stride, bool backward) const {
    const int64_t n = static_cast<int64_t>(positions_.size());
    if (count < 0 || first < 0 || first > n - count) {
      return Bad(absl::StrCat("prepared planes: rows [", first, ", ", first, " + ", count,
                              ") outside its ", n, " positions"));
    }
    const size_t np = planes_.size();
    if constexpr (std::is_same_v<T, float>) {
      PlanesRowsF32(rows, count, stride, runs_.data(), static_cast<int64_t>(runs_.size()),
                    static_cast<int64_t>(np), csf_.data() + static_cast<size_t>(first) * 2 * np,
                    backward);
      return absl::OkStatus();
    }
    std::call_once(double_once_, [this] { MakeDoubleTable(); });
    const double sign = backward ? -1.0 : 1.0;  // G^T = G(-p): sin changes sign
    for (int64_t r = 0; r < count; ++r) {
      T* x = rows + r * stride;
      const double* cs = cs_.data() + static_cast<size_t>(first + r) * 2 * np;
      for (size_t k = 0; k < np; ++k) {
        const double c = cs[2 * k], s = sign * cs[2 * k + 1];
        const double x1 = x[planes_[k].first], x2 = x[planes_[k].second];
        x[planes_[k].first] = static_cast<T>(x1 * c - x2 * s);
        x[planes_[k].second] = static_cast<T>(x1 * s + x2 * c);
      }
    }
    return absl::OkStatus();
  }
  void MakeDoubleTable() const {
    const size_t np = planes_.size();
    const int64_t n = static_cast<int64_t>(positions_.size());
    cs_.resize(static_cast<size_t>(n) * 2 * np);
    parallel::ParallelForChunks(PrepareThreads(), n, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        for (size_t k = 0; k < np; ++k) {
          // The same reduced angle and double cos/sin as GrapeMCommutingPlanes::Apply.
          const double angle = group::ReducedAngle(positions_[t], planes_[k].omega);
          cs_[(t * np + k) * 2] = std::cos(angle);
          cs_[(t * np + k) * 2 + 1] = std::sin(angle);
        }
      }
    });
  }
  std::vector<encodings::sequence::CoordinatePlane> planes_;
  std::vector<int64_t> positions_;
  std::vector<PlaneRun> runs_;  // the planes sorted by first coordinate, in runs
  std::vector<float> csf_;      // [position][cos of each sorted plane, then sin]
  mutable std::once_flag double_once_;
  mutable std::vector<double> cs_;  // [position][plane][cos, sin], made on first use
};

// Columns [32 s, 32 s + 32) of a d x d row-major matrix w, for each full slab s, as
// contiguous [slab][row][32] (RowsTimesMatrixF32's stream: 128 bytes per row of w).
std::vector<float> PackColumnSlabs(const std::vector<float>& w, int64_t d) {
  constexpr int64_t kCols = 32;
  const int64_t slabs = d / kCols;
  std::vector<float> out(static_cast<size_t>(slabs * d * kCols));
  for (int64_t sl = 0; sl < slabs; ++sl) {
    for (int64_t r = 0; r < d; ++r) {
      std::copy(w.begin() + r * d + sl * kCols, w.begin() + r * d + (sl + 1) * kCols,
                out.begin() + (sl * d + r) * kCols);
    }
  }
  return out;
}

// y[i * ldy + c] = sum_r x[i * ldx + r] w[r * d + c] for i < m, c < d: rows times a d x d
// matrix (row-major w; its full 32-column slabs also packed, PackColumnSlabs), in float,
// each sum in order of r. Slab by slab (16 KiB at d 128: it stays in L1 while every row
// passes), four rows at a time (eight 16-float accumulators, each load of the slab
// shared by the four rows), the rows past the last multiple of 4 one by one; the columns
// past the last slab from w, one by one. Cloned for AVX-512, AVX2 + FMA and the
// baseline, the best chosen when the library loads.
GPE_TARGET_CLONES("avx512f", GPE_CLONE_AVX2_FMA, "default") void RowsTimesMatrixF32(
    const float* x, int64_t ldx, int64_t m, int64_t d, const float* w, const float* slabs,
    float* y, int64_t ldy) {
  typedef float V16 __attribute__((vector_size(64), aligned(4)));
  constexpr int64_t kRowsAtOnce = 4, kCols = 32;
  int64_t c0 = 0;
  for (; c0 + kCols <= d; c0 += kCols) {
    const float* ws = slabs + (c0 / kCols) * d * kCols;
    int64_t i = 0;
    for (; i + kRowsAtOnce <= m; i += kRowsAtOnce) {
      // Named accumulators: an array indexed in a loop stayed in memory (GCC 12).
      V16 a00 = {}, a01 = {}, a10 = {}, a11 = {}, a20 = {}, a21 = {}, a30 = {}, a31 = {};
      const float* x0 = x + i * ldx;
      const float* x1 = x0 + ldx;
      const float* x2 = x1 + ldx;
      const float* x3 = x2 + ldx;
      for (int64_t r = 0; r < d; ++r) {
        V16 w0, w1;
        std::memcpy(&w0, ws + r * kCols, sizeof(V16));
        std::memcpy(&w1, ws + r * kCols + 16, sizeof(V16));
        a00 += x0[r] * w0, a01 += x0[r] * w1;
        a10 += x1[r] * w0, a11 += x1[r] * w1;
        a20 += x2[r] * w0, a21 += x2[r] * w1;
        a30 += x3[r] * w0, a31 += x3[r] * w1;
      }
      float* y0 = y + i * ldy + c0;
      std::memcpy(y0, &a00, sizeof(V16)), std::memcpy(y0 + 16, &a01, sizeof(V16));
      std::memcpy(y0 + ldy, &a10, sizeof(V16)), std::memcpy(y0 + ldy + 16, &a11, sizeof(V16));
      std::memcpy(y0 + 2 * ldy, &a20, sizeof(V16));
      std::memcpy(y0 + 2 * ldy + 16, &a21, sizeof(V16));
      std::memcpy(y0 + 3 * ldy, &a30, sizeof(V16));
      std::memcpy(y0 + 3 * ldy + 16, &a31, sizeof(V16));
    }
    for (; i < m; ++i) {
      V16 a0 = {}, a1 = {};
      const float* xi = x + i * ldx;
      for (int64_t r = 0; r < d; ++r) {
        V16 w0, w1;
        std::memcpy(&w0, ws + r * kCols, sizeof(V16));
        std::memcpy(&w1, ws + r * kCols + 16, sizeof(V16));
        a0 += xi[r] * w0, a1 += xi[r] * w1;
      }
      std::memcpy(y + i * ldy + c0, &a0, sizeof(V16));
      std::memcpy(y + i * ldy + c0 + 16, &a1, sizeof(V16));
    }
  }
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t c = c0; c < d; ++c) {
      float sum = 0.0f;
      for (int64_t r = 0; r < d; ++r) sum += x[i * ldx + r] * w[r * d + c];
      y[i * ldy + c] = sum;
    }
  }
}

// One real Schur form Q R(p) Q^T (group::SchurRotation: plane k of Q's columns 2k, 2k + 1
// turned by p phi_k) acting on coordinates [offset, offset + d) of each row, at its own
// per-token positions: Kogkalidis et al.'s sequence encoding is one such block, their
// grids one per axis (the direct sum's blocks). For float rows Q's columns are permuted
// so the planes lie as RoPE's half-split layout (plane k on coordinates k and np + k, the
// fixed columns after 2 np): Q' = Q P, with Q', Q'^T and their 32-column slabs in float
// (RowsTimesMatrixF32) and the planes' cos / sin per token from PlanesFloatTable.
struct SchurBlock {
  SchurBlock(const group::SchurRotation& rot, int64_t off, std::vector<int64_t> pos)
      : rotation(&rot), offset(off), d(rot.dim()), np(rot.num_planes()), positions(std::move(pos)) {
    const Eigen::MatrixXd& q = rot.basis();
    qp.resize(static_cast<size_t>(d * d));
    qpt.resize(qp.size());
    for (int64_t r = 0; r < d; ++r) {
      for (int64_t c = 0; c < d; ++c) {
        qp[r * d + c] = static_cast<float>(q(r, Perm(c)));   // Q'
        qpt[c * d + r] = static_cast<float>(q(r, Perm(c)));  // Q'^T
      }
    }
    qp_slabs = PackColumnSlabs(qp, d);
    qpt_slabs = PackColumnSlabs(qpt, d);
    std::vector<encodings::sequence::CoordinatePlane> planes;
    for (int64_t k = 0; k < np; ++k) planes.push_back({k, np + k, rot.plane_angles()[k]});
    std::vector<int64_t> order(static_cast<size_t>(np));
    std::iota(order.begin(), order.end(), int64_t{0});
    csf = PlanesFloatTable(planes, order, positions);
  }
  // The column of Q behind column c of Q'.
  int64_t Perm(int64_t c) const { return c < np ? 2 * c : c < 2 * np ? 2 * (c - np) + 1 : c; }
  void TurnPlanes(int64_t p, double sign, Eigen::VectorXd* y) const {
    for (int64_t k = 0; k < np; ++k) {
      const group::SinCos sc = group::SinCosOfMultiple(p, rotation->plane_angles()[k]);
      const double sn = sign * sc.sin, y1 = (*y)(2 * k), y2 = (*y)(2 * k + 1);
      (*y)(2 * k) = y1 * sc.cos - y2 * sn;
      (*y)(2 * k + 1) = y1 * sn + y2 * sc.cos;
    }
  }

  const group::SchurRotation* rotation;
  int64_t offset, d, np;
  std::vector<int64_t> positions;  // per token
  std::vector<float> qp, qpt;      // Q' and its transpose, row-major d x d
  std::vector<float> qp_slabs, qpt_slabs;  // their 32-column slabs (PackColumnSlabs)
  std::vector<float> csf;          // [token][cos of each plane, then sin]
};

// The algebraic encodings bound to tokens: blocks of Schur forms (SchurBlock). Float rows:
// per block y = Q'^T x, the planes turned (PlanesRowsF32, one run), x = Q' y, in float;
// Backward turns the planes back (Q R(-p) Q^T, the transpose). scores_only
// (RowTransform::PrepareForScores): R(p) Q'^T without the product by Q' (V the block
// diagonal of the Q'^T), Backward Q' R(p)^T, GradientsToTransformBasis Q'. Double rows:
// the whole form through `exact` (the encoding's own arithmetic, the reference's), the
// scores-only form in double per block (the planes' exact cos / sin).
class PreparedAlgebraic final : public PreparedFromRun<PreparedAlgebraic> {
 public:
  // make_exact(blocks) binds the double path (it may point into the blocks' positions,
  // which stay where they are: the blocks are not moved after this).
  template <class MakeExact>
  PreparedAlgebraic(std::vector<SchurBlock> blocks, int64_t tokens, bool scores_only,
                    MakeExact make_exact)
      : blocks_(std::move(blocks)), n_(tokens), scores_only_(scores_only) {
    exact_ = make_exact(blocks_);
  }

 private:
  friend class PreparedFromRun<PreparedAlgebraic>;
  template <class T>
  absl::Status Run(int64_t first, int64_t count, T* rows, int64_t stride, bool backward) const {
    if (count < 0 || first < 0 || first > n_ - count) {
      return Bad(absl::StrCat("prepared algebraic encoding: rows [", first, ", ", first, " + ",
                              count, ") outside its ", n_, " positions"));
    }
    if constexpr (!std::is_same_v<T, float>) {
      if (!scores_only_) {
        return backward ? exact_->Backward(first, count, rows, stride)
                        : exact_->Forward(first, count, rows, stride);
      }
      for (const SchurBlock& b : blocks_) RunScoresOnlyDouble(b, first, count, rows, stride, backward);
      return absl::OkStatus();
    } else {
      for (const SchurBlock& b : blocks_) RunFloat(b, first, count, rows, stride, backward);
      return absl::OkStatus();
    }
  }
  // Rows of the Schur coordinates at a time: they stay in L1 / L2 between the products.
  static constexpr int64_t kRows = 64;
  // This thread's kRows x d buffer for the Schur coordinates (the transforms run per tile:
  // no allocation per call).
  static float* Coordinates(int64_t d) {
    thread_local std::vector<float> y;
    if (y.size() < static_cast<size_t>(kRows * d)) y.resize(static_cast<size_t>(kRows * d));
    return y.data();
  }
  // x <- Q' x on m rows of block b (stride apart), through y.
  static void TimesQp(const SchurBlock& b, float* x, int64_t m, int64_t stride, float* y) {
    RowsTimesMatrixF32(x, stride, m, b.d, b.qpt.data(), b.qpt_slabs.data(), y, b.d);
    for (int64_t r = 0; r < m; ++r) {
      std::memcpy(x + r * stride, y + r * b.d, static_cast<size_t>(b.d) * sizeof(float));
    }
  }
  void RunFloat(const SchurBlock& b, int64_t first, int64_t count, float* rows, int64_t stride,
                bool backward) const {
    if (count == 0 || b.d == 0) return;
    float* y = Coordinates(b.d);
    const PlaneRun run{0, b.np, 0, b.np};
    for (int64_t r0 = 0; r0 < count; r0 += kRows) {
      const int64_t m = std::min(kRows, count - r0);
      float* x = rows + r0 * stride + b.offset;
      const float* cs = b.csf.data() + static_cast<size_t>(first + r0) * 2 * b.np;
      if (scores_only_ && backward) {  // Q' R^T g: the planes in place, then Q'
        if (b.np > 0) PlanesRowsF32(x, m, stride, &run, 1, b.np, cs, /*backward=*/true);
        TimesQp(b, x, m, stride, y);
        continue;
      }
      RowsTimesMatrixF32(x, stride, m, b.d, b.qp.data(), b.qp_slabs.data(), y, b.d);
      if (b.np > 0) PlanesRowsF32(y, m, b.d, &run, 1, b.np, cs, backward);
      if (scores_only_) {  // R Q'^T x: the Schur coordinates are the rows
        for (int64_t r = 0; r < m; ++r) {
          std::memcpy(x + r * stride, y + r * b.d, static_cast<size_t>(b.d) * sizeof(float));
        }
      } else {
        RowsTimesMatrixF32(y, b.d, m, b.d, b.qpt.data(), b.qpt_slabs.data(), x, stride);
      }
    }
  }
  // Scores-only bindings: y = Q'^T z per block, so dL/dz = Q' dL/dy.
  absl::Status GradientsToTransformBasis(float* rows, int64_t count,
                                         int64_t stride) const override {
    if (!scores_only_) return absl::OkStatus();
    for (const SchurBlock& b : blocks_) {
      if (b.d == 0) continue;
      float* y = Coordinates(b.d);
      for (int64_t r0 = 0; r0 < count; r0 += kRows) {
        TimesQp(b, rows + r0 * stride + b.offset, std::min(kRows, count - r0), stride, y);
      }
    }
    return absl::OkStatus();
  }
  // The scores-only form of one block on double rows: y = Q^T x, the planes (2k, 2k + 1)
  // turned by p phi_k (their exact cos / sin, as SchurRotation::Apply) in double, the
  // coordinates in Q''s order; backward the transpose.
  static void RunScoresOnlyDouble(const SchurBlock& b, int64_t first, int64_t count,
                                  double* rows, int64_t stride, bool backward) {
    const Eigen::MatrixXd& q = b.rotation->basis();
    Eigen::VectorXd x(b.d), y(b.d);
    for (int64_t t = 0; t < count; ++t) {
      double* row = rows + t * stride + b.offset;
      const int64_t p = b.positions[first + t];
      if (!backward) {
        for (int64_t i = 0; i < b.d; ++i) x(i) = row[i];
        y.noalias() = q.transpose() * x;
        b.TurnPlanes(p, 1.0, &y);
        for (int64_t c = 0; c < b.d; ++c) row[c] = y(b.Perm(c));
      } else {
        for (int64_t c = 0; c < b.d; ++c) y(b.Perm(c)) = row[c];
        b.TurnPlanes(p, -1.0, &y);
        x.noalias() = q * y;
        for (int64_t i = 0; i < b.d; ++i) row[i] = x(i);
      }
    }
  }
  std::vector<SchurBlock> blocks_;
  int64_t n_;
  bool scores_only_;
  std::unique_ptr<PreparedRowTransform> exact_;  // double rows, the whole form
};

}  // namespace

namespace {
thread_local int g_prepare_threads = 1;
}  // namespace

int PrepareThreads() { return g_prepare_threads; }
ScopedPrepareThreads::ScopedPrepareThreads(int threads) : previous_(g_prepare_threads) {
  g_prepare_threads = std::max(1, threads);
}
ScopedPrepareThreads::~ScopedPrepareThreads() { g_prepare_threads = previous_; }

absl::StatusOr<std::unique_ptr<PreparedRowTransform>> PrepareCommutingPlanes(
    const encodings::sequence::GrapeMCommutingPlanes& planes,
    absl::Span<const int64_t> positions) {
  const auto pl = planes.planes();
  return std::unique_ptr<PreparedRowTransform>(new PreparedPlanes(
      std::vector<encodings::sequence::CoordinatePlane>(pl.begin(), pl.end()),
      std::vector<int64_t>(positions.begin(), positions.end())));
}

namespace {

// z += cu u + cv v over d floats, in blocks of 16 (each block one vector operation at
// AVX-512 width: at -O2 GCC vectorises fixed-size blocks, not a loop of unknown length).
inline void AddTwoScaled(float* __restrict z, const float* __restrict u,
                         const float* __restrict v, float cu, float cv, int64_t d) {
  constexpr int64_t kLanes = 16;
  int64_t i = 0;
  for (; i + kLanes <= d; i += kLanes) {
    float t[kLanes];
    for (int64_t l = 0; l < kLanes; ++l) t[l] = z[i + l] + cu * u[i + l] + cv * v[i + l];
    for (int64_t l = 0; l < kLanes; ++l) z[i + l] = t[l];
  }
  for (; i < d; ++i) z[i] = z[i] + cu * u[i] + cv * v[i];
}

// GRAPE-M's rank-2 product on float rows (PreparedRank2Product's float path): for each
// of `count` rows (stride apart) and k = m - 1 .. 0 (backward: 0 .. m - 1 with the sines
// negated, the transpose), skipping degenerate factors (skip[k]), alpha = <u_k, z>,
// beta = <v_k, z>, z += ((c - 1) alpha + s beta) u_k + ((c - 1) beta - s alpha) v_k, as
// the double path, in float. Each dot product keeps 16 partial sums (one vector register
// at AVX-512 width) rather than one chain of d dependent additions; u_k and v_k are d
// floats at u + k * d, v + k * d; cs holds (cos, sin) per row and generator. Cloned for
// AVX-512, AVX2 + FMA and the baseline, the best chosen when the library loads.
GPE_TARGET_CLONES("avx512f", GPE_CLONE_AVX2_FMA, "default") void Rank2ProductRowsF32(
    float* rows, int64_t count, int64_t stride, int64_t d, int64_t m, const float* u,
    const float* v, const uint8_t* skip, const float* cs, bool backward) {
  constexpr int64_t kLanes = 16;
  // Generators outer, rows inner: a row's steps form one chain of dependent latencies
  // (dot products, their horizontal sums, the update the next generator reads), while
  // different rows are independent, so consecutive iterations of the inner loop overlap
  // in the reorder window (rows outer, the window held too little of the next row's chain
  // to hide this one's). The rows are re-read from L1 or L2 once per generator.
  for (int64_t step = 0; step < m; ++step) {
    const int64_t k = backward ? step : m - 1 - step;
    if (skip[k] != 0) continue;
    const float* uk = u + k * d;
    const float* vk = v + k * d;
    for (int64_t r = 0; r < count; ++r) {
      float* z = rows + r * stride;
      const float* row_cs = cs + r * 2 * m;
      const float c = row_cs[2 * k], sn = backward ? -row_cs[2 * k + 1] : row_cs[2 * k + 1];
      float a[kLanes] = {}, b[kLanes] = {};
      int64_t i = 0;
      for (; i + kLanes <= d; i += kLanes) {
        for (int64_t l = 0; l < kLanes; ++l) {
          a[l] += uk[i + l] * z[i + l];
          b[l] += vk[i + l] * z[i + l];
        }
      }
      for (int64_t l = 0; i < d; ++i, ++l) {  // the tail (d not a multiple of 16)
        a[l] += uk[i] * z[i];
        b[l] += vk[i] * z[i];
      }
      // Pairwise sums in loops of fixed length, which GCC turns into vector additions
      // (a loop over the width halving left them scalar, through the stack: about half
      // of this function's time).
      static_assert(kLanes == 16, "the sums below halve 16 lanes");
      for (int64_t l = 0; l < 8; ++l) a[l] += a[l + 8], b[l] += b[l + 8];
      for (int64_t l = 0; l < 4; ++l) a[l] += a[l + 4], b[l] += b[l + 4];
      for (int64_t l = 0; l < 2; ++l) a[l] += a[l + 2], b[l] += b[l + 2];
      a[0] += a[1];
      b[0] += b[1];
      const float cu = (c - 1.0f) * a[0] + sn * b[0];
      const float cv = (c - 1.0f) * b[0] - sn * a[0];
      AddTwoScaled(z, uk, vk, cu, cv, d);
    }
  }
}

class PreparedRank2Product final : public PreparedFromRun<PreparedRank2Product> {
 public:
  PreparedRank2Product(const encodings::sequence::GrapeMProduct& product,
                       std::vector<double> cos_sin, int64_t n)
      : e_(product), cs_(std::move(cos_sin)), n_(n) {
    // The float path's copies: u_k, v_k and every (cos, sin), rounded once.
    const int64_t m = e_.num_generators(), d = e_.dim();
    uf_.assign(static_cast<size_t>(m * d), 0.0f);
    vf_.assign(uf_.size(), 0.0f);
    skip_.assign(static_cast<size_t>(m), 1);
    for (int64_t k = 0; k < m; ++k) {
      const group::Rank2Rotation& f = e_.factor(k);
      if (f.degenerate()) continue;
      skip_[k] = 0;
      for (int64_t i = 0; i < d; ++i) {
        uf_[k * d + i] = static_cast<float>(f.u()[i]);
        vf_[k * d + i] = static_cast<float>(f.v()[i]);
      }
    }
    csf_.assign(cs_.begin(), cs_.end());
  }

 private:
  friend class PreparedFromRun<PreparedRank2Product>;
  // z <- G_k z with (c, s) for G_k(p) (s negated: G_k(p)^T), as Rank2Rotation::Apply's
  // RotateInPlane: alpha = <u, z>, beta = <v, z>, z += ((c - 1) alpha + s beta) u +
  // ((c - 1) beta - s alpha) v. The two dot products keep four partial sums each (eight
  // independent chains instead of two: this runs once per row, generator and call, and
  // one chain of d dependent additions made GRAPE-M's rows cost as much as a quarter of
  // the attention); the sums differ from Apply's in rounding only.
  void Rotate(int64_t k, double c, double s, double* z) const {
    const group::Rank2Rotation& f = e_.factor(k);
    if (f.degenerate()) return;  // the identity
    const double* u = f.u().data();
    const double* v = f.v().data();
    const size_t n = f.u().size();
    double a[4] = {0.0, 0.0, 0.0, 0.0}, b[4] = {0.0, 0.0, 0.0, 0.0};
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
      for (size_t l = 0; l < 4; ++l) {
        a[l] += u[i + l] * z[i + l];
        b[l] += v[i + l] * z[i + l];
      }
    }
    for (; i < n; ++i) {
      a[0] += u[i] * z[i];
      b[0] += v[i] * z[i];
    }
    const double alpha = (a[0] + a[1]) + (a[2] + a[3]);
    const double beta = (b[0] + b[1]) + (b[2] + b[3]);
    const double cu = (c - 1.0) * alpha + s * beta;
    const double cv = (c - 1.0) * beta - s * alpha;
    for (i = 0; i < n; ++i) z[i] = z[i] + cu * u[i] + cv * v[i];
  }
  template <class T>
  absl::Status Run(int64_t first, int64_t count, T* rows, int64_t stride, bool backward) const {
    if (count < 0 || first < 0 || first > n_ - count) {
      return Bad(absl::StrCat("prepared GRAPE-M product: rows [", first, ", ", first, " + ",
                              count, ") outside its ", n_, " positions"));
    }
    const int64_t m = e_.num_generators(), d = e_.dim();
    if constexpr (std::is_same_v<T, float>) {  // float rows: float arithmetic, vectorised
      Rank2ProductRowsF32(rows, count, stride, d, m, uf_.data(), vf_.data(), skip_.data(),
                          csf_.data() + static_cast<size_t>(first) * 2 * m, backward);
      return absl::OkStatus();
    }
    std::vector<double> z(static_cast<size_t>(d));
    for (int64_t r = 0; r < count; ++r) {
      T* x = rows + r * stride;
      for (int64_t i = 0; i < d; ++i) z[i] = static_cast<double>(x[i]);
      const double* cs = cs_.data() + static_cast<size_t>(first + r) * 2 * m;
      if (!backward) {  // G_0 G_1 ... G_{m-1} x, the last factor first (Apply's order)
        for (int64_t k = m - 1; k >= 0; --k) Rotate(k, cs[2 * k], cs[2 * k + 1], z.data());
      } else {  // the transpose: G_{m-1}^T ... G_0^T g
        for (int64_t k = 0; k < m; ++k) Rotate(k, cs[2 * k], -cs[2 * k + 1], z.data());
      }
      for (int64_t i = 0; i < d; ++i) x[i] = static_cast<T>(z[i]);
    }
    return absl::OkStatus();
  }
  const encodings::sequence::GrapeMProduct& e_;
  std::vector<double> cs_;  // [position][generator][cos, sin]
  int64_t n_;
  std::vector<float> uf_, vf_, csf_;  // float copies of u, v ([generator][d]) and cs_
  std::vector<uint8_t> skip_;         // degenerate factors (the identity)
};

}  // namespace

absl::StatusOr<std::unique_ptr<PreparedRowTransform>> PrepareRank2Product(
    const encodings::sequence::GrapeMProduct& product, absl::Span<const int64_t> positions) {
  const int64_t n = static_cast<int64_t>(positions.size()), m = product.num_generators();
  std::vector<double> cs(static_cast<size_t>(n * 2 * m));
  parallel::ParallelForChunks(PrepareThreads(), n, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      for (int64_t k = 0; k < m; ++k) {
        // The same reduced angle and cos / sin as Rank2Rotation::Apply.
        const group::SinCos sc =
            group::SinCosOfMultiple(positions[t], product.factor(k).frequency());
        cs[(t * m + k) * 2] = sc.cos;
        cs[(t * m + k) * 2 + 1] = sc.sin;
      }
    }
  });
  return std::unique_ptr<PreparedRowTransform>(
      new PreparedRank2Product(product, std::move(cs), n));
}

absl::StatusOr<std::unique_ptr<PreparedRowTransform>> RowTransform::Prepare(
    absl::Span<const int64_t> positions) const {
  return std::unique_ptr<PreparedRowTransform>(new UnpreparedRowTransform(*this, positions));
}

absl::StatusOr<std::unique_ptr<PreparedRowTransform>> RowTransform::PrepareStructured(
    const StructuredPositions& positions) const {
  if (positions.form() == StructuredPositions::Form::kAxes && positions.num_axes == 1) {
    return Prepare(positions.coords);
  }
  return Bad(absl::StrCat(
      "this transform acts on one int64 position per token; it cannot take ",
      positions.form() == StructuredPositions::Form::kTree
          ? std::string("tree addresses")
          : absl::StrCat(positions.num_axes, "-axis positions")));
}

namespace {

// The rows as a thd tensor of one sequence and one head (rope.h's layouts).
RopeTensor RowsAsRopeTensor(int64_t count, int64_t head_dim, int64_t stride,
                            const int64_t* cu) {
  RopeTensor t;
  t.layout = RopeLayout::kTHD;
  t.batch = 1;
  t.seq_len = count;
  t.heads = 1;
  t.head_dim = head_dim;
  t.seq_stride = stride;
  t.head_stride = head_dim;
  t.cu_seqlens = absl::MakeConstSpan(cu, 2);
  return t;
}

}  // namespace

absl::StatusOr<std::unique_ptr<PreparedRowTransform>> RopeRowTransform::Prepare(
    absl::Span<const int64_t> positions) const {
  if (rope_.options().num_axes != 1) {
    return Bad("RopeRowTransform: multi-axis RoPE takes structured positions (axes form), "
               "not one int64 per token");
  }
  StructuredPositions p;
  p.num_axes = 1;
  p.coords = positions;
  return PrepareStructured(p);
}

absl::StatusOr<std::unique_ptr<PreparedRowTransform>> RopeRowTransform::PrepareStructured(
    const StructuredPositions& positions) const {
  const int64_t axes = rope_.options().num_axes;
  if (positions.form() != StructuredPositions::Form::kAxes || positions.num_axes != axes) {
    return Bad(absl::StrCat("RopeRowTransform: this RoPE has ", axes,
                            " axes; give the axes form with num_axes = ", axes));
  }
  if (positions.coords.size() % static_cast<size_t>(axes) != 0) {
    return Bad("RopeRowTransform: coords size is not a multiple of num_axes");
  }
  const int64_t m = static_cast<int64_t>(positions.coords.size()) / axes;
  std::vector<int64_t> ids(positions.coords.size());  // axis-major, rope.h's order
  for (int64_t t = 0; t < m; ++t) {
    for (int64_t a = 0; a < axes; ++a) ids[a * m + t] = positions.coords[t * axes + a];
  }
  const int64_t cu[2] = {0, m};
  const int64_t d = rope_.options().head_dim;
  RopePositions p;
  p.ids = ids;
  const int threads = std::max(rope_.options().num_threads, PrepareThreads());
  absl::StatusOr<encodings::sequence::RopeTable<float>> table =
      rope_.MakeTable<float>(RowsAsRopeTensor(m, d, d, cu), p, role_, threads);
  if (!table.ok()) {
    // The call's element type is not known here, and a float64 call rotates in double
    // and never reads the float table: an attention factor (or xPos scale) that fits a
    // double table but not a float one is refused by float rows only (Forward / Backward
    // return the status), as gpe_rope_forward refuses it for float32 tensors only. Any
    // other error is the double table's too and is returned now.
    absl::StatusOr<encodings::sequence::RopeTable<double>> wide =
        rope_.MakeTable<double>(RowsAsRopeTensor(m, d, d, cu), p, role_, threads);
    if (!wide.ok()) return wide.status();
  }
  return std::unique_ptr<PreparedRowTransform>(
      new PreparedRope(*this, rope_, std::move(table), std::move(ids), axes));
}

template <class T>
absl::Status RopeRowTransform::RunIds(absl::Span<const int64_t> ids, int64_t count, T* rows,
                                      int64_t stride, bool backward) const {
  if (count == 0) return absl::OkStatus();
  if (rows == nullptr) return Bad("RopeRowTransform: rows is null");
  const int64_t cu[2] = {0, count};
  const RopeTensor t = RowsAsRopeTensor(count, rope_.options().head_dim, stride, cu);
  RopePositions p;
  p.ids = ids;
  return backward ? rope_.Backward<T>(t, p, rows, rows, role_)
                  : rope_.Forward<T>(t, p, rows, rows, role_);
}
template absl::Status RopeRowTransform::RunIds<float>(absl::Span<const int64_t>, int64_t,
                                                      float*, int64_t, bool) const;
template absl::Status RopeRowTransform::RunIds<double>(absl::Span<const int64_t>, int64_t,
                                                       double*, int64_t, bool) const;

template <class T>
absl::Status RopeRowTransform::Run(absl::Span<const int64_t> positions, T* rows, int64_t stride,
                                   bool backward) const {
  if (positions.empty()) return absl::OkStatus();
  if (rope_.options().num_axes != 1) {
    return Bad("RopeRowTransform: multi-axis RoPE takes structured positions (axes form), "
               "not one int64 per token");
  }
  return RunIds(positions, static_cast<int64_t>(positions.size()), rows, stride, backward);
}

template absl::Status RopeRowTransform::Run<float>(absl::Span<const int64_t>, float*, int64_t,
                                                   bool) const;
template absl::Status RopeRowTransform::Run<double>(absl::Span<const int64_t>, double*, int64_t,
                                                    bool) const;

template <class T>
absl::Status AlgebraicRowTransform::Run(absl::Span<const int64_t> positions, T* rows,
                                        int64_t stride, bool backward) const {
  if (!backward) return e_.Apply(positions, rows, stride, rows, stride);
  // The transpose: (W^p)^T = W^{-p}.
  std::vector<int64_t> neg(positions.size());
  for (size_t i = 0; i < positions.size(); ++i) {
    if (positions[i] == std::numeric_limits<int64_t>::min()) {
      return Bad("AlgebraicRowTransform::Backward: position INT64_MIN has no negation");
    }
    neg[i] = -positions[i];
  }
  return e_.Apply(absl::Span<const int64_t>(neg), rows, stride, rows, stride);
}
template absl::Status AlgebraicRowTransform::Run<float>(absl::Span<const int64_t>, float*,
                                                        int64_t, bool) const;
template absl::Status AlgebraicRowTransform::Run<double>(absl::Span<const int64_t>, double*,
                                                         int64_t, bool) const;

absl::StatusOr<std::unique_ptr<PreparedRowTransform>> AlgebraicRowTransform::Bind(
    absl::Span<const int64_t> positions, bool scores_only) const {
  for (int64_t p : positions) {  // as Run's backward (W^p)^T = W^{-p}
    if (p == std::numeric_limits<int64_t>::min()) {
      return Bad("AlgebraicRowTransform: position INT64_MIN has no negation");
    }
  }
  std::vector<SchurBlock> blocks;
  blocks.emplace_back(e_.rotation(), 0, std::vector<int64_t>(positions.begin(), positions.end()));
  return std::unique_ptr<PreparedRowTransform>(new PreparedAlgebraic(
      std::move(blocks), static_cast<int64_t>(positions.size()), scores_only,
      [this](const std::vector<SchurBlock>& b) {
        return std::unique_ptr<PreparedRowTransform>(
            new UnpreparedRowTransform(*this, b[0].positions));
      }));
}

absl::StatusOr<std::unique_ptr<PreparedRowTransform>> AlgebraicRowTransform::Prepare(
    absl::Span<const int64_t> positions) const {
  return Bind(positions, /*scores_only=*/false);
}

absl::StatusOr<std::unique_ptr<PreparedRowTransform>> AlgebraicRowTransform::PrepareForScores(
    absl::Span<const int64_t> positions) const {
  return Bind(positions, /*scores_only=*/true);
}

absl::Status StructuredOnlyRowTransform::Forward(absl::Span<const int64_t>, double*,
                                                 int64_t) const {
  return NeedsStructured();
}
absl::Status StructuredOnlyRowTransform::Forward(absl::Span<const int64_t>, float*,
                                                 int64_t) const {
  return NeedsStructured();
}
absl::Status StructuredOnlyRowTransform::Backward(absl::Span<const int64_t>, double*,
                                                  int64_t) const {
  return NeedsStructured();
}
absl::Status StructuredOnlyRowTransform::Backward(absl::Span<const int64_t>, float*,
                                                  int64_t) const {
  return NeedsStructured();
}
absl::StatusOr<std::unique_ptr<PreparedRowTransform>> StructuredOnlyRowTransform::Prepare(
    absl::Span<const int64_t>) const {
  return NeedsStructured();
}
absl::Status StructuredOnlyRowTransform::NeedsStructured() const {
  return Bad(absl::StrCat(who_, ": takes ", form_,
                          " (StructuredPositions, AttentionArgs::q_structured / k_structured), "
                          "not one int64 position per token"));
}

absl::StatusOr<std::unique_ptr<PreparedRowTransform>>
AlgebraicTreeRowTransform::PrepareStructured(const StructuredPositions& positions) const {
  if (positions.form() != StructuredPositions::Form::kTree) {
    return NeedsStructured();
  }
  const int64_t n = static_cast<int64_t>(positions.tree_offsets.size()) - 1;
  const group::FreeGroup& fg = tree_.representation().group();
  std::vector<group::FreeWord> words(static_cast<size_t>(std::max<int64_t>(n, 0)));
  std::vector<group::FreeWord> inverses(words.size());
  for (int64_t t = 0; t < n; ++t) {
    // The address's word (c_1 + 1, ..., c_m + 1) and its inverse (algebraic.h, free_group.h).
    absl::StatusOr<group::FreeWord> w = tree_.Word(positions.Address(t));
    if (!w.ok()) {
      return Bad(absl::StrCat("AlgebraicTreeRowTransform: address of token ", t, ": ",
                              w.status().message()));
    }
    absl::StatusOr<group::FreeWord> inv = fg.Inverse(*w);
    if (!inv.ok()) return inv.status();
    words[t] = *std::move(w);
    inverses[t] = *std::move(inv);
  }
  return std::unique_ptr<PreparedRowTransform>(new PreparedElements<group::FreeGroupRepresentation>(
      tree_.representation(), std::move(words), std::move(inverses)));
}

namespace {
template <class Element, size_t... I>
Element GridElement(absl::Span<const int64_t> c, bool negate, std::index_sequence<I...>) {
  return Element{(negate ? -c[I] : c[I])...};
}

// One SchurBlock per axis of a grid (group::DirectSum of SchurRotations), axis i at the
// direct sum's offset i with the tokens' coordinate i.
template <class Grid, size_t... I>
void AddGridBlocks(const Grid& grid, const StructuredPositions& positions, int64_t n,
                   std::vector<SchurBlock>* blocks, std::index_sequence<I...>) {
  constexpr size_t kAxes = sizeof...(I);
  auto axis = [&](size_t i) {
    std::vector<int64_t> p(static_cast<size_t>(n));
    for (int64_t t = 0; t < n; ++t) p[t] = positions.coords[t * kAxes + i];
    return p;
  };
  (blocks->emplace_back(grid.template component<I>(), grid.offset(I), axis(I)), ...);
}

}  // namespace

template <class Grid>
absl::StatusOr<std::unique_ptr<PreparedRowTransform>> AlgebraicGridRowTransform<Grid>::Bind(
    const StructuredPositions& positions, bool scores_only) const {
  if (positions.form() != StructuredPositions::Form::kAxes || positions.num_axes != kAxes) {
    return Bad(absl::StrCat("AlgebraicGridRowTransform: a ", kAxes,
                            "-axis grid takes the axes form with num_axes = ", kAxes));
  }
  using Element = typename Grid::Element;
  const int64_t n = static_cast<int64_t>(positions.coords.size()) / kAxes;
  std::vector<Element> elements, inverses;
  elements.reserve(static_cast<size_t>(n));
  inverses.reserve(static_cast<size_t>(n));
  for (int64_t t = 0; t < n; ++t) {
    absl::Span<const int64_t> c = positions.Coords(t);
    for (int64_t x : c) {
      if (x == std::numeric_limits<int64_t>::min()) {
        return Bad(absl::StrCat("AlgebraicGridRowTransform: token ", t,
                                " has coordinate INT64_MIN, which has no inverse"));
      }
    }
    if (scores_only) continue;  // the double rows take the blocks (no elements needed)
    // (x_1, .., x_n)^-1 = (-x_1, .., -x_n) in Z^n: W^{-x} = (W^x)^T (sec. 3.3).
    elements.push_back(GridElement<Element>(c, false, std::make_index_sequence<kAxes>{}));
    inverses.push_back(GridElement<Element>(c, true, std::make_index_sequence<kAxes>{}));
  }
  // Float rows through one Schur block per axis (its coordinate per token); double rows
  // of the whole form through the direct sum's own Apply (PreparedElements, the
  // reference's arithmetic).
  std::vector<SchurBlock> blocks;
  AddGridBlocks(grid_, positions, n, &blocks, std::make_index_sequence<kAxes>{});
  return std::unique_ptr<PreparedRowTransform>(new PreparedAlgebraic(
      std::move(blocks), n, scores_only,
      [&](const std::vector<SchurBlock>&) -> std::unique_ptr<PreparedRowTransform> {
        if (scores_only) return nullptr;
        return std::make_unique<PreparedElements<Grid>>(grid_, std::move(elements),
                                                        std::move(inverses));
      }));
}

template class AlgebraicGridRowTransform<encodings::sequence::AlgebraicGrid2D>;
template class AlgebraicGridRowTransform<encodings::sequence::AlgebraicGrid3D>;

absl::Status StructuredPositions::Validate(int64_t tokens, const char* name) const {
  switch (form()) {
    case Form::kNone:
      return Bad(absl::StrCat(name, " is empty"));
    case Form::kAxes: {
      if (num_axes < 1 || num_axes > 64) {
        return Bad(absl::StrCat(name, ".num_axes must be in [1, 64], got ", num_axes));
      }
      int64_t want = 0;
      if (!MulOk(tokens, num_axes, &want) || static_cast<int64_t>(coords.size()) != want) {
        return Bad(absl::StrCat(name, ".coords has ", coords.size(), " entries, expected tokens (",
                                tokens, ") x num_axes (", num_axes, ")"));
      }
      return absl::OkStatus();
    }
    case Form::kTree: {
      if (num_axes != 0 || !coords.empty()) {
        return Bad(absl::StrCat(name, ": give either coords (axes) or tree addresses, not both"));
      }
      if (static_cast<int64_t>(tree_offsets.size()) != tokens + 1) {
        return Bad(absl::StrCat(name, ".tree_offsets has ", tree_offsets.size(),
                                " entries, expected tokens + 1 = ", tokens + 1));
      }
      if (tree_offsets[0] != 0) {
        return Bad(absl::StrCat(name, ".tree_offsets[0] must be 0, got ", tree_offsets[0]));
      }
      for (int64_t t = 0; t < tokens; ++t) {
        if (tree_offsets[t + 1] < tree_offsets[t]) {
          return Bad(absl::StrCat(name, ".tree_offsets must be non-decreasing: entry ", t + 1,
                                  " = ", tree_offsets[t + 1], " < ", tree_offsets[t]));
        }
      }
      if (tree_offsets[tokens] != static_cast<int64_t>(tree_children.size())) {
        return Bad(absl::StrCat(name, ".tree_offsets must end at the number of children (",
                                tree_children.size(), "), got ", tree_offsets[tokens]));
      }
      for (size_t i = 0; i < tree_children.size(); ++i) {
        if (tree_children[i] < 0) {
          return Bad(absl::StrCat(name, ".tree_children[", i, "] = ", tree_children[i],
                                  " is negative (child indices are 0-based)"));
        }
      }
      return absl::OkStatus();
    }
  }
  return absl::OkStatus();
}

double AttentionArgs::scale() const {
  return softmax_scale.has_value() ? *softmax_scale
                                   : 1.0 / std::sqrt(static_cast<double>(head_dim));
}

int64_t AttentionArgs::num_sequences() const {
  if (layout == Layout::kBSHD) return batch;
  return cu_seqlens_q.empty() ? 0 : static_cast<int64_t>(cu_seqlens_q.size()) - 1;
}
int64_t AttentionArgs::num_q_tokens() const {
  return layout == Layout::kBSHD ? batch * seq_len_q : seq_len_q;
}
int64_t AttentionArgs::num_k_tokens() const {
  return layout == Layout::kBSHD ? batch * seq_len_k : seq_len_k;
}
int64_t AttentionArgs::q_begin(int64_t b) const {
  return layout == Layout::kBSHD ? b * seq_len_q : cu_seqlens_q[b];
}
int64_t AttentionArgs::q_end(int64_t b) const {
  return layout == Layout::kBSHD ? (b + 1) * seq_len_q : cu_seqlens_q[b + 1];
}
int64_t AttentionArgs::k_begin(int64_t b) const {
  return layout == Layout::kBSHD ? b * seq_len_k : cu_seqlens_k[b];
}
int64_t AttentionArgs::k_end(int64_t b) const {
  if (layout == Layout::kBSHD) {
    return b * seq_len_k + (kv_lengths.empty() ? seq_len_k : kv_lengths[b]);
  }
  return cu_seqlens_k[b + 1];
}

namespace {
int64_t OffsetIn(Layout layout, int64_t len, const Strides& s, int64_t token, int64_t head) {
  if (layout == Layout::kTHD) return token * s.token + head * s.head;
  return (token / len) * s.batch + (token % len) * s.token + head * s.head;
}
}  // namespace

int64_t AttentionArgs::QOffset(const Strides& s, int64_t token, int64_t head) const {
  return OffsetIn(layout, seq_len_q, s, token, head);
}
int64_t AttentionArgs::KOffset(const Strides& s, int64_t token, int64_t head) const {
  if (pages.enabled()) {  // bshd: token b * seq_len_k + t, t in page t / page_size of b
    const int64_t b = token / seq_len_k, t = token % seq_len_k;
    const int64_t page = pages.block_table[b * (seq_len_k / pages.page_size) + t / pages.page_size];
    return page * s.batch + (t % pages.page_size) * s.token + head * s.head;
  }
  return OffsetIn(layout, seq_len_k, s, token, head);
}

Strides ContiguousStrides(Layout layout, int64_t seq_len, int64_t heads, int64_t head_dim) {
  Strides s;
  s.head = head_dim;
  s.token = heads * head_dim;
  s.batch = layout == Layout::kBSHD ? seq_len * heads * head_dim : 0;
  return s;
}

KeyMask KeyMask::Of(const AttentionArgs& a) {
  KeyMask m;
  m.left = a.window_left;
  m.right = a.causal ? 0 : a.window_right;
  return m;
}

absl::Status ValidateAttention(const AttentionArgs& a) {
  if (a.num_q_heads < 1) return Bad(absl::StrCat("num_q_heads must be >= 1, got ", a.num_q_heads));
  if (a.num_kv_heads < 1) {
    return Bad(absl::StrCat("num_kv_heads must be >= 1, got ", a.num_kv_heads));
  }
  if (a.num_q_heads % a.num_kv_heads != 0) {
    return Bad(absl::StrCat("num_q_heads (", a.num_q_heads,
                            ") must be a multiple of num_kv_heads (", a.num_kv_heads,
                            ") for grouped-query attention"));
  }
  if (a.head_dim < 1) return Bad(absl::StrCat("head_dim must be >= 1, got ", a.head_dim));
  if (a.head_dim_v < 0) {
    return Bad(absl::StrCat("head_dim_v must be >= 0 (0: head_dim), got ", a.head_dim_v));
  }
  if (a.seq_len_q < 0 || a.seq_len_k < 0) {
    return Bad(absl::StrCat("sequence lengths must be >= 0, got seq_len_q = ", a.seq_len_q,
                            ", seq_len_k = ", a.seq_len_k));
  }
  const bool bshd = a.layout == Layout::kBSHD;
  if (bshd) {
    if (a.batch < 0) return Bad(absl::StrCat("batch must be >= 0, got ", a.batch));
    if (!a.cu_seqlens_q.empty() || !a.cu_seqlens_k.empty()) {
      return Bad("cu_seqlens_q / cu_seqlens_k are for the thd layout only");
    }
    int64_t n = 0;
    if (!MulOk(a.batch, a.seq_len_q, &n) || !MulOk(a.batch, a.seq_len_k, &n)) {
      return Bad("batch * seq_len overflows int64");
    }
    // Offset() divides by the per-sequence length.
    if (!a.kv_lengths.empty()) {
      if (static_cast<int64_t>(a.kv_lengths.size()) != a.batch) {
        return Bad(absl::StrCat("kv_lengths has ", a.kv_lengths.size(),
                                " entries, expected one per sequence (batch = ", a.batch, ")"));
      }
      for (size_t b = 0; b < a.kv_lengths.size(); ++b) {
        if (a.kv_lengths[b] < 0 || a.kv_lengths[b] > a.seq_len_k) {
          return Bad(absl::StrCat("kv_lengths[", b, "] = ", a.kv_lengths[b],
                                  " must lie in [0, seq_len_k = ", a.seq_len_k, "]"));
        }
      }
    }
  } else {
    if (!a.kv_lengths.empty()) {
      return Bad("kv_lengths is for the bshd layout (thd: cu_seqlens_k gives every length)");
    }
    if (a.cu_seqlens_q.size() != a.cu_seqlens_k.size()) {
      return Bad(absl::StrCat("cu_seqlens_q has ", a.cu_seqlens_q.size(),
                              " entries but cu_seqlens_k has ", a.cu_seqlens_k.size(),
                              " (both must be batch + 1)"));
    }
    if (absl::Status s = CheckCuSeqlens("cu_seqlens_q", a.cu_seqlens_q, a.seq_len_q); !s.ok()) {
      return s;
    }
    if (absl::Status s = CheckCuSeqlens("cu_seqlens_k", a.cu_seqlens_k, a.seq_len_k); !s.ok()) {
      return s;
    }
    if (a.batch != 0 && a.batch != a.num_sequences()) {
      return Bad(absl::StrCat("batch (", a.batch, ") disagrees with cu_seqlens (",
                              a.num_sequences(), " sequences); leave it 0 or set it equal"));
    }
  }
  const int64_t bq = bshd ? a.batch : 1;
  const int64_t tq = bshd ? a.seq_len_q : a.seq_len_q;
  const int64_t tk = a.seq_len_k;
  struct {
    const char* name;
    const Strides* s;
    int64_t tokens, heads;
  } tensors[] = {{"q", &a.q, tq, a.num_q_heads},
                 {"k", &a.k, tk, a.num_kv_heads},
                 {"v", &a.v, tk, a.num_kv_heads},
                 {"o", &a.o, tq, a.num_q_heads}};
  if (a.pages.enabled()) {
    if (absl::Status s = CheckPages(a); !s.ok()) return s;
  }
  for (const auto& t : tensors) {
    const bool kv = t.s == &a.k || t.s == &a.v;
    // A paged k and v are num_pages pages of page_size tokens (LAYOUTS).
    const int64_t batches = kv && a.pages.enabled() ? a.pages.num_pages : bq;
    const int64_t tokens = kv && a.pages.enabled() ? a.pages.page_size : t.tokens;
    const int64_t width = t.s == &a.v || t.s == &a.o ? a.value_dim() : a.head_dim;
    if (absl::Status s = CheckTensor(t.name, *t.s, bshd, batches, tokens, t.heads, width);
        !s.ok()) {
      return s;
    }
  }
  if (a.softmax_scale.has_value() && !std::isfinite(*a.softmax_scale)) {
    return Bad(absl::StrCat("softmax_scale must be finite, got ", *a.softmax_scale));
  }
  const int64_t nq = a.num_q_tokens(), nk = a.num_k_tokens();
  if (a.q_positions.empty() != a.k_positions.empty()) {
    return Bad("give both q_positions and k_positions, or neither (default positions)");
  }
  if (!a.q_positions.empty()) {
    if (static_cast<int64_t>(a.q_positions.size()) != nq) {
      return Bad(absl::StrCat("q_positions has ", a.q_positions.size(),
                              " entries, expected one per "
                              "query token (",
                              nq, ")"));
    }
    if (static_cast<int64_t>(a.k_positions.size()) != nk) {
      return Bad(absl::StrCat("k_positions has ", a.k_positions.size(),
                              " entries, expected one per "
                              "key token (",
                              nk, ")"));
    }
  }
  const RowTransform* tr[2] = {a.q_transform, a.k_transform};
  const char* tr_name[2] = {"q_transform", "k_transform"};
  for (int i = 0; i < 2; ++i) {
    if (tr[i] != nullptr && tr[i]->dim() != a.head_dim) {
      return Bad(absl::StrCat(tr_name[i], " acts on rows of ", tr[i]->dim(),
                              " elements but head_dim is ", a.head_dim));
    }
  }
  if (!a.biases.empty()) {
    if (a.biases.size() != 1 && static_cast<int64_t>(a.biases.size()) != a.num_sequences()) {
      return Bad(absl::StrCat("biases: give one shared bias or one per sequence (",
                              a.num_sequences(), "), got ", a.biases.size()));
    }
    for (size_t i = 0; i < a.biases.size(); ++i) {
      if (a.biases[i] == nullptr) return Bad(absl::StrCat("biases[", i, "] is null"));
      if (a.biases.size() == 1 && a.num_sequences() > 1 && a.biases[i]->needs_token_data()) {
        return Bad(
            absl::StrCat("biases[0] reads per-token data of one sequence (FoX, GRAPE-AP): "
                         "give one object per sequence (",
                         a.num_sequences(), ")"));
      }
      if (a.biases[i]->num_heads() != a.num_q_heads) {
        return Bad(absl::StrCat("biases[", i, "] has ", a.biases[i]->num_heads(),
                                " heads, expected num_q_heads = ", a.num_q_heads));
      }
    }
  }
  if (a.locality.has_value()) {
    const double c = *a.locality;
    if (!(std::isfinite(c) && c > 0.0 && c <= 1.0)) {
      return Bad(absl::StrCat("locality must lie in (0, 1], got ", c));
    }
  }
  if (a.q_structured.empty() != a.k_structured.empty()) {
    return Bad("give both q_structured and k_structured, or neither");
  }
  if (!a.q_structured.empty()) {
    if (absl::Status s = a.q_structured.Validate(nq, "q_structured"); !s.ok()) return s;
    if (absl::Status s = a.k_structured.Validate(nk, "k_structured"); !s.ok()) return s;
    if (a.q_transform == nullptr || a.k_transform == nullptr) {
      return Bad("q_structured / k_structured feed the row transforms: set q_transform and "
                 "k_transform");
    }
  }
  if (a.window_left < -1 || a.window_right < -1) {
    return Bad(absl::StrCat("window_left and window_right must be -1 (unbounded) or >= 0, got (",
                            a.window_left, ", ", a.window_right, ")"));
  }
  if (a.softcap.has_value() && !(std::isfinite(*a.softcap) && *a.softcap > 0.0)) {
    return Bad(absl::StrCat("softcap must be finite and > 0, got ", *a.softcap));
  }
  if (a.softcap.has_value() && *a.softcap > kMaxSoftcap) {
    return Bad(absl::StrCat("softcap must be at most ", kMaxSoftcap, ", got ", *a.softcap,
                            ": a larger cap is no cap (c tanh(x / c) = x to double precision); "
                            "leave it unset"));
  }
  if (!a.mask.empty()) {  // the largest mask offset fits in int64
    int64_t max_lq = 0, max_lk = 0;
    if (bshd) {
      max_lq = a.seq_len_q;
      max_lk = a.seq_len_k;
    } else {
      for (int64_t b = 0; b < a.num_sequences(); ++b) {
        max_lq = std::max(max_lq, a.q_end(b) - a.q_begin(b));
        max_lk = std::max(max_lk, a.k_end(b) - a.k_begin(b));
      }
    }
    const __int128 last = static_cast<__int128>(std::max<int64_t>(a.num_sequences() - 1, 0)) * a.mask.batch +
                          static_cast<__int128>(a.num_q_heads - 1) * a.mask.head +
                          static_cast<__int128>(std::max<int64_t>(max_lq - 1, 0)) * a.mask.query +
                          static_cast<__int128>(std::max<int64_t>(max_lk - 1, 0)) * a.mask.key;
    if (last > std::numeric_limits<int64_t>::max()) return Bad("mask: the largest offset overflows int64");
  }
  if (a.mask.additive != nullptr && a.mask.allowed != nullptr) {
    return Bad("mask: give the additive or the boolean mask, not both");
  }
  if (a.mask.batch < 0 || a.mask.head < 0 || a.mask.query < 0 || a.mask.key < 0) {
    return Bad(absl::StrCat("mask strides must be >= 0, got (", a.mask.batch, ", ", a.mask.head,
                            ", ", a.mask.query, ", ", a.mask.key, ")"));
  }
  if (!a.sinks.empty() && static_cast<int64_t>(a.sinks.size()) != a.num_q_heads) {
    return Bad(absl::StrCat("sinks has ", a.sinks.size(), " logits, expected one per query head (",
                            a.num_q_heads, ")"));
  }
  const encodings::sequence::ShawRelative* shaw[2] = {a.shaw_keys, a.shaw_values};
  const char* shaw_name[2] = {"shaw_keys (key_table)", "shaw_values (value_table)"};
  for (int i = 0; i < 2; ++i) {
    if (shaw[i] == nullptr) continue;
    const int64_t cols = i == 0 ? shaw[i]->key_table().cols() : shaw[i]->value_table().cols();
    const int64_t want = i == 0 ? a.head_dim : a.value_dim();
    if (cols != want) {
      return Bad(absl::StrCat(shaw_name[i], " has ", cols, " columns but ",
                              i == 0 ? "head_dim" : "the value head size", " is ", want));
    }
  }
  return absl::OkStatus();
}

absl::Status ZeroSinkGradient(const AttentionArgs& a, double* sink_grad) {
  if (sink_grad == nullptr) return absl::OkStatus();
  if (a.sinks.empty()) return Bad("a sink gradient was requested without sinks");
  std::fill_n(sink_grad, a.num_q_heads, 0.0);
  return absl::OkStatus();
}

absl::Status ZeroShawTableGradients(const AttentionArgs& a, double* key_table_grad,
                                    double* value_table_grad) {
  if ((key_table_grad != nullptr && a.shaw_keys == nullptr) ||
      (value_table_grad != nullptr && a.shaw_values == nullptr)) {
    return Bad("a Shaw table gradient was requested without its shaw_keys / shaw_values");
  }
  if (key_table_grad != nullptr) {
    std::fill_n(key_table_grad, a.shaw_keys->num_labels() * a.head_dim, 0.0);
  }
  if (value_table_grad != nullptr) {
    std::fill_n(value_table_grad, a.shaw_values->num_labels() * a.value_dim(), 0.0);
  }
  return absl::OkStatus();
}

absl::Status PrepareRowTransforms(const AttentionArgs& a, absl::Span<const int64_t> pq,
                                  absl::Span<const int64_t> pk,
                                  std::unique_ptr<PreparedRowTransform>* tq,
                                  std::unique_ptr<PreparedRowTransform>* tk, bool scores_only) {
  const bool structured = !a.q_structured.empty();
  scores_only = scores_only && a.q_transform == a.k_transform;
  const RowTransform* tr[2] = {a.q_transform, a.k_transform};
  const StructuredPositions* sp[2] = {&a.q_structured, &a.k_structured};
  absl::Span<const int64_t> ip[2] = {pq, pk};
  std::unique_ptr<PreparedRowTransform>* out[2] = {tq, tk};
  for (int i = 0; i < 2; ++i) {
    out[i]->reset();
    if (tr[i] == nullptr) continue;
    auto t = structured ? (scores_only ? tr[i]->PrepareStructuredForScores(*sp[i])
                                       : tr[i]->PrepareStructured(*sp[i]))
                        : (scores_only ? tr[i]->PrepareForScores(ip[i]) : tr[i]->Prepare(ip[i]));
    if (!t.ok()) return t.status();
    *out[i] = *std::move(t);
  }
  return absl::OkStatus();
}

std::vector<int64_t> EffectiveQPositions(const AttentionArgs& a) {
  if (!a.q_positions.empty()) return {a.q_positions.begin(), a.q_positions.end()};
  std::vector<int64_t> p(static_cast<size_t>(a.num_q_tokens()));
  for (int64_t b = 0; b < a.num_sequences(); ++b) {
    const int64_t q0 = a.q_begin(b), lq = a.q_end(b) - q0, lk = a.k_end(b) - a.k_begin(b);
    std::iota(p.begin() + q0, p.begin() + q0 + lq, lk - lq);
  }
  return p;
}

std::vector<int64_t> EffectiveKPositions(const AttentionArgs& a) {
  if (!a.k_positions.empty()) return {a.k_positions.begin(), a.k_positions.end()};
  std::vector<int64_t> p(static_cast<size_t>(a.num_k_tokens()));
  for (int64_t b = 0; b < a.num_sequences(); ++b) {
    // Bounds read once (the loop runs over every key of a decoding call's cache).
    const int64_t begin = a.k_begin(b), end = a.k_end(b);
    std::iota(p.begin() + begin, p.begin() + end, int64_t{0});
  }
  return p;
}

}  // namespace attention
}  // namespace gpe
