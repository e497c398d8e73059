// RoPE's rotation (rope.h): tensor layouts, the Rope object and its cos/sin tables, and
// the rotation of q and k rows (float, double, bfloat16, float16; forward and backward).
// The frequency schedules are in rope_frequencies.cc.
#include "encodings/sequence/rope.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <numeric>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "encodings/sequence/rope_checks.h"
#include "group/angle.h"
#include "parallel/thread_pool.h"

namespace gpe {
namespace encodings {
namespace sequence {
namespace {

using absl::InvalidArgumentError;
using absl::StrCat;
using rope_internal::CheckPositive;

// x with the fewest significant digits that read back as x: an attention factor just past
// a range is then told apart from the range's bound (65504.0001, not 65504).
std::string Exact(double x) {
  char buf[32];
  for (int digits = 6; digits < 17; ++digits) {
    std::snprintf(buf, sizeof buf, "%.*g", digits, x);
    if (std::strtod(buf, nullptr) == x) return buf;
  }
  std::snprintf(buf, sizeof buf, "%.17g", x);
  return buf;
}

}  // namespace

// ---------------------------------------------------------------------------------
// Tensors.
// ---------------------------------------------------------------------------------
RopeTensor RopeTensor::Contiguous(RopeLayout layout, int64_t batch, int64_t seq_len,
                                  int64_t heads, int64_t head_dim,
                                  absl::Span<const int64_t> cu_seqlens) {
  RopeTensor t;
  t.layout = layout;
  t.batch = batch;
  t.seq_len = seq_len;
  t.heads = heads;
  t.head_dim = head_dim;
  t.head_stride = head_dim;
  t.cu_seqlens = cu_seqlens;
  switch (layout) {
    case RopeLayout::kBSHD:
      t.seq_stride = heads * head_dim;
      t.batch_stride = seq_len * heads * head_dim;
      break;
    case RopeLayout::kSBHD:
      t.batch_stride = heads * head_dim;
      t.seq_stride = batch * heads * head_dim;
      break;
    case RopeLayout::kTHD:
      t.seq_stride = heads * head_dim;
      t.batch_stride = 0;
      break;
  }
  return t;
}

namespace {

// Elements spanned by the tensor (last element + 1), or an error. Rows are disjoint
// when, ordering the axes by stride, each stride is at least the span of the inner axes.
absl::StatusOr<int64_t> TensorSpan(const RopeTensor& t) {
  const char* who = "RopeTensor";
  if (t.layout != RopeLayout::kBSHD && t.layout != RopeLayout::kSBHD &&
      t.layout != RopeLayout::kTHD) {
    return InvalidArgumentError(StrCat(who, ": unknown layout"));
  }
  if (t.batch < 0 || t.seq_len < 0 || t.heads < 0 || t.head_dim < 1) {
    return InvalidArgumentError(StrCat(who, ": need batch, seq_len, heads >= 0 and head_dim >= 1; got [",
                                       t.batch, ", ", t.seq_len, ", ", t.heads, ", ",
                                       t.head_dim, "]"));
  }
  const bool thd = t.layout == RopeLayout::kTHD;
  if (thd) {
    if (static_cast<int64_t>(t.cu_seqlens.size()) != t.batch + 1) {
      return InvalidArgumentError(StrCat(who, ": thd needs batch + 1 = ", t.batch + 1,
                                         " cu_seqlens, got ", t.cu_seqlens.size()));
    }
    if (t.cu_seqlens[0] != 0 || t.cu_seqlens[t.batch] != t.seq_len) {
      return InvalidArgumentError(StrCat(who, ": cu_seqlens must start at 0 and end at total tokens ",
                                         t.seq_len));
    }
    for (int64_t b = 0; b < t.batch; ++b) {
      if (t.cu_seqlens[b + 1] < t.cu_seqlens[b]) {
        return InvalidArgumentError(
            StrCat(who, ": cu_seqlens decreases at index ", b + 1, " (not monotone)"));
      }
    }
  } else if (!t.cu_seqlens.empty()) {
    return InvalidArgumentError(StrCat(who, ": cu_seqlens is only for the thd layout"));
  }
  struct Axis {
    int64_t stride, extent;
  };
  std::vector<Axis> axes;
  if (!thd) axes.push_back({t.batch_stride, t.batch});
  axes.push_back({t.seq_stride, t.seq_len});
  axes.push_back({t.head_stride, t.heads});
  for (const Axis& a : axes) {
    if (a.extent > 1 && a.stride < 1) {
      return InvalidArgumentError(StrCat(who, ": strides must be >= 1"));
    }
  }
  // The token count (bshd / sbhd: batch x seq_len) bounded before an empty tensor (no
  // heads) returns: tables are made per token whatever the heads (Rope::MakeTable), and
  // num_tokens() must not overflow.
  if (!thd && static_cast<__int128>(t.batch) * t.seq_len > (static_cast<__int128>(1) << 40)) {
    return InvalidArgumentError(StrCat(who, ": batch x seq_len = ", t.batch, " x ", t.seq_len,
                                       " tokens; at most 2^40"));
  }
  if ((!thd && t.batch == 0) || t.seq_len == 0 || t.heads == 0) return int64_t{0};
  std::sort(axes.begin(), axes.end(), [](const Axis& a, const Axis& b) { return a.stride < b.stride; });
  __int128 span = t.head_dim;
  for (const Axis& a : axes) {
    if (a.extent <= 1) continue;
    if (static_cast<__int128>(a.stride) < span) {
      return InvalidArgumentError(StrCat(who, ": strides (batch ", t.batch_stride, ", seq ",
                                         t.seq_stride, ", head ", t.head_stride,
                                         ") make rows overlap"));
    }
    span += static_cast<__int128>(a.extent - 1) * a.stride;
    if (span > (static_cast<__int128>(1) << 60)) {
      return InvalidArgumentError(StrCat(who, ": tensor extent overflows"));
    }
  }
  return static_cast<int64_t>(span);
}

}  // namespace

absl::Status ValidateRopeTensor(const RopeTensor& tensor) { return TensorSpan(tensor).status(); }

// ---------------------------------------------------------------------------------
// Rope.
// ---------------------------------------------------------------------------------
absl::StatusOr<Rope> Rope::Create(RopeOptions o, RopeFrequencies f) {
  const char* who = "Rope::Create";
  absl::StatusOr<group::PlaneLayout> layout =
      group::PlaneLayout::Create(o.head_dim, o.rotary_dim, o.pairing);
  if (!layout.ok()) return layout.status();
  const int64_t planes = layout->num_planes();
  if (static_cast<int64_t>(f.thetas.size()) != planes) {
    return InvalidArgumentError(
        StrCat(who, ": ", f.thetas.size(), " thetas for ", planes, " planes"));
  }
  for (size_t i = 0; i < f.thetas.size(); ++i) {
    if (!std::isfinite(f.thetas[i])) {
      return InvalidArgumentError(StrCat(who, ": theta[", i, "] is not finite"));
    }
  }
  GPE_RETURN_IF_ERROR(CheckPositive(who, "attention_factor", f.attention_factor));
  if (o.num_axes < 1 || o.num_axes > 8) {
    return InvalidArgumentError(StrCat(who, ": num_axes must be in [1, 8], got ", o.num_axes));
  }
  if (o.plane_axes.empty()) {
    if (o.num_axes != 1) {
      return InvalidArgumentError(StrCat(who, ": num_axes > 1 needs plane_axes"));
    }
    o.plane_axes.assign(planes, 0);
  }
  if (static_cast<int64_t>(o.plane_axes.size()) != planes) {
    return InvalidArgumentError(StrCat(who, ": plane_axes has ", o.plane_axes.size(),
                                       " entries for ", planes, " planes"));
  }
  for (int a : o.plane_axes) {
    if (a < 0 || a >= o.num_axes) {
      return InvalidArgumentError(StrCat(who, ": plane axis ", a, " outside [0, ", o.num_axes, ")"));
    }
  }
  if (o.xpos.enabled) {
    if (o.num_axes != 1) return InvalidArgumentError(StrCat(who, ": xPos needs a single axis"));
    GPE_RETURN_IF_ERROR(CheckPositive(who, "xpos.gamma", o.xpos.gamma));
    GPE_RETURN_IF_ERROR(CheckPositive(who, "xpos.scale_base", o.xpos.scale_base));
  }
  if (o.num_threads < 1 || o.num_threads > 256) {
    return InvalidArgumentError(StrCat(who, ": num_threads must be in [1, 256], got ", o.num_threads));
  }
  return Rope(std::move(o), std::move(f));
}

template <class T>
absl::StatusOr<RopeTable<T>> Rope::MakeTable(const RopeTensor& tensor,
                                             const RopePositions& positions,
                                             RopeRole role, int threads) const {
  const char* who = "Rope::MakeTable";
  GPE_RETURN_IF_ERROR(TensorSpan(tensor).status());
  const int64_t n = tensor.num_tokens();
  const int64_t axes = options_.num_axes;
  const int64_t batch = tensor.batch;
  if (!positions.ids.empty() && !positions.offsets.empty()) {
    return InvalidArgumentError(StrCat(who, ": give position ids or offsets, not both"));
  }
  // Key of token t on axis a.
  std::vector<int64_t> keys(static_cast<size_t>(n * axes));
  if (!positions.ids.empty()) {
    if (static_cast<int64_t>(positions.ids.size()) != n * axes) {
      return InvalidArgumentError(StrCat(who, ": ", positions.ids.size(), " position ids for ",
                                         n, " tokens x ", axes, " axes"));
    }
    for (int64_t t = 0; t < n; ++t) {
      for (int64_t a = 0; a < axes; ++a) keys[t * axes + a] = positions.ids[a * n + t];
    }
  } else {
    if (axes != 1) {
      return InvalidArgumentError(StrCat(who, ": multi-axis RoPE needs explicit position ids"));
    }
    if (!positions.offsets.empty() && static_cast<int64_t>(positions.offsets.size()) != batch) {
      return InvalidArgumentError(StrCat(who, ": ", positions.offsets.size(),
                                         " offsets for ", batch, " sequences"));
    }
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t begin = tensor.layout == RopeLayout::kTHD ? tensor.cu_seqlens[b] : b * tensor.seq_len;
      const int64_t len = tensor.layout == RopeLayout::kTHD ? tensor.cu_seqlens[b + 1] - begin
                                                             : tensor.seq_len;
      const int64_t off = positions.offsets.empty() ? 0 : positions.offsets[b];
      int64_t last = 0;
      if (len > 0 && __builtin_add_overflow(off, len - 1, &last)) {
        return InvalidArgumentError(StrCat(who, ": offset ", off, " + sequence length overflows int64"));
      }
      for (int64_t s = 0; s < len; ++s) keys[begin + s] = off + s;
    }
  }
  // Distinct keys -> rows, in ascending key order (the table's fill steps from row to
  // row by angle addition where keys grow by one).
  RopeTable<T> table;
  table.row_of_token_.resize(n);
  std::vector<int64_t> row_token;  // a representative token per row
  // One axis whose keys span less than 4 n (default positions, a KV cache's tokens):
  // buckets by key, O(n), instead of sorting n tokens (a decode call's block table of
  // 10M token slots spent most of its time in the sort).
  int64_t kmin = 0, kmax = 0;
  if (axes == 1 && n > 0) {
    const auto [lo, hi] = std::minmax_element(keys.begin(), keys.end());
    kmin = *lo;
    kmax = *hi;
  }
  const uint64_t span = static_cast<uint64_t>(kmax) - static_cast<uint64_t>(kmin);
  if (axes == 1 && n > 0 && span < 4 * static_cast<uint64_t>(n)) {
    std::vector<int64_t> slot(static_cast<size_t>(span) + 1, -1);  // key - kmin -> a token
    for (int64_t t = 0; t < n; ++t) slot[static_cast<uint64_t>(keys[t]) - static_cast<uint64_t>(kmin)] = t;
    for (int64_t& s : slot) {
      if (s < 0) continue;
      row_token.push_back(s);
      s = static_cast<int64_t>(row_token.size()) - 1;  // the slot now holds its row
    }
    for (int64_t t = 0; t < n; ++t) {
      table.row_of_token_[t] = slot[static_cast<uint64_t>(keys[t]) - static_cast<uint64_t>(kmin)];
    }
  } else {
    std::vector<int64_t> order(n);
    std::iota(order.begin(), order.end(), int64_t{0});
    auto less = [&](int64_t x, int64_t y) {
      return std::lexicographical_compare(keys.begin() + x * axes, keys.begin() + (x + 1) * axes,
                                          keys.begin() + y * axes, keys.begin() + (y + 1) * axes);
    };
    auto equal = [&](int64_t x, int64_t y) {
      return std::equal(keys.begin() + x * axes, keys.begin() + (x + 1) * axes,
                        keys.begin() + y * axes);
    };
    std::sort(order.begin(), order.end(), less);
    for (int64_t k = 0; k < n; ++k) {
      if (k == 0 || !equal(order[k - 1], order[k])) row_token.push_back(order[k]);
      table.row_of_token_[order[k]] = static_cast<int64_t>(row_token.size()) - 1;
    }
  }
  table.layout_ = tensor.layout;
  table.batch_ = tensor.batch;
  table.seq_len_ = tensor.seq_len;
  if (tensor.layout == RopeLayout::kTHD) {
    table.cu_seqlens_.assign(tensor.cu_seqlens.begin(), tensor.cu_seqlens.end());
  }
  const int64_t planes = options_.rotary_dim / 2;
  const bool interleaved = options_.pairing == PlanePairing::kInterleaved;
  table.num_rows_ = static_cast<int64_t>(row_token.size());
  table.width_ = interleaved ? 2 * planes : planes;
  table.cos_.resize(static_cast<size_t>(table.num_rows_ * table.width_));
  table.sin_.resize(table.cos_.size());
  // xPos: log zeta_i, sign +1 for queries, -1 for keys (Sun et al. eq. 9-10).
  std::vector<double> log_zeta(planes, 0.0);
  if (options_.xpos.enabled) {
    for (int64_t i = 0; i < planes; ++i) {
      log_zeta[i] = std::log((2.0 * static_cast<double>(i) / static_cast<double>(options_.rotary_dim) +
                              options_.xpos.gamma) /
                             (1.0 + options_.xpos.gamma));
    }
  }
  const double role_sign = role == RopeRole::kQuery ? 1.0 : -1.0;
  const double m = freqs_.attention_factor;
  // xPos scales grow as zeta_0^(-|p - centre| / B) on one side of the centre (queries
  // before it, keys after it; zeta_i < 1, and plane 0 has the smallest). Past the table
  // type's range they would be stored as inf and give inf and NaN outputs: refuse the
  // call instead, naming the position and the range that fits (issue 24).
  // p - centre exactly (in 128 bits), then rounded once: converting p and the centre to
  // double first would lose the offset itself past 2^53 (positions 2^60 + 100 and 2^60
  // round to one double), and the scales depend on the offset only.
  auto xpos_rel = [this](int64_t p) {
    return static_cast<double>(static_cast<__int128>(p) - options_.xpos.centre) /
           options_.xpos.scale_base;
  };
  const double log_max = std::log(static_cast<double>(std::numeric_limits<T>::max()));
  // The attention factor alone (YaRN's, LongRoPE's, any positive finite double) scales
  // every entry: past T's range (a float table and m = 1e39) the table would hold inf
  // and give inf and NaN outputs where a double table gives finite ones. With xPos, the
  // rows whose scale shrinks stay below m, those whose scale grows are checked below.
  // Compared exactly (entries |m cos|, |m sin| <= m fit while m is at most T's largest
  // value), not through logs, which would refuse m within rounding of the bound.
  if (planes > 0) {
    if (m > static_cast<double>(std::numeric_limits<T>::max())) {
      return InvalidArgumentError(StrCat(
          "Rope::MakeTable: the attention factor ", Exact(m), " exceeds the ",
          sizeof(T) == 4 ? "float32" : "float64", " table's largest value ",
          Exact(static_cast<double>(std::numeric_limits<T>::max())),
          ": the table's entries m cos and m sin would be infinite; give a smaller "
          "attention_factor (or mscale)"));
    }
    table.max_log_scale_ = std::log(m);
  }
  if (options_.xpos.enabled && planes > 0) {
    for (const int64_t token : row_token) {
      const int64_t p = keys[token * axes];
      const double rel = xpos_rel(p);
      const double log_scale = std::log(m) + role_sign * rel * log_zeta[0];
      table.max_log_scale_ = std::max(table.max_log_scale_, log_scale);
      if (!(log_scale < log_max)) {
        const double reach = (log_max - std::log(m)) * options_.xpos.scale_base / -log_zeta[0];
        return InvalidArgumentError(StrCat(
            "Rope::MakeTable: the xPos scale of a ", role == RopeRole::kQuery ? "query" : "key",
            " at position ", p, " (centre ", options_.xpos.centre, ") is e^", log_scale,
            ", beyond the ", sizeof(T) == 4 ? "float32" : "float64",
            " table's range: xPos scales stay finite while the position is at most ",
            static_cast<int64_t>(reach), " ", role == RopeRole::kQuery ? "before" : "after",
            " the centre; set xpos.centre near the positions in use"));
      }
    }
  }
  // Exact reduction + sincos costs tens of ns per (row, plane): rows are split over
  // threads, and a float table of one-axis positions without xPos steps from row to row
  // when the position grows by one: (cos, sin)((p + 1) theta) from (cos, sin)(p theta) by
  // the angle-addition formula in double, re-anchored on the exact value every kAnchor
  // rows. Each step adds at most ~8e-16 to the (unit-norm) pair, so a stepped value is
  // within 2e-14 of the exact one; where a float rounding boundary lies within 1e-13 (times
  // the attention factor) of it, the entry is recomputed exactly. The float table is
  // therefore the exact one, bit for bit, at a fraction of the cost.
  constexpr int64_t kAnchor = 16;
  const bool stepping = std::is_same_v<T, float> && !options_.xpos.enabled && axes == 1;
  std::vector<group::SinCos> step(static_cast<size_t>(stepping ? planes : 0));
  for (int64_t i = 0; i < static_cast<int64_t>(step.size()); ++i) {
    step[i] = group::SinCosOfMultiple(1, freqs_.thetas[i]);
  }
  const double margin = 1e-13 * std::max(1.0, std::fabs(m));
  auto same_float = [margin](double v) {
    return static_cast<float>(v - margin) == static_cast<float>(v + margin);
  };
  auto fill = [&](int64_t row_begin, int64_t row_end) {
  std::vector<group::SinCos> last(static_cast<size_t>(planes));  // the previous row's
  int64_t last_position = 0, since_anchor = kAnchor;
  for (int64_t row = row_begin; row < row_end; ++row) {
    const int64_t* key = keys.data() + row_token[row] * axes;
    T* c = table.cos_.data() + row * table.width_;
    T* s = table.sin_.data() + row * table.width_;
    const double rel = options_.xpos.enabled ? xpos_rel(key[0]) : 0.0;
    const bool stepped = stepping && since_anchor < kAnchor && row > row_begin &&
                         key[0] > std::numeric_limits<int64_t>::min() &&
                         key[0] - 1 == last_position;
    since_anchor = stepped ? since_anchor + 1 : 1;
    last_position = key[0];
    for (int64_t i = 0; i < planes; ++i) {
      group::SinCos sc;
      double cv = 0.0, sv = 0.0;
      if (stepped) {
        const group::SinCos& a = last[i];
        sc.cos = a.cos * step[i].cos - a.sin * step[i].sin;
        sc.sin = a.sin * step[i].cos + a.cos * step[i].sin;
        cv = m * sc.cos;
        sv = m * sc.sin;
      }
      if (!stepped || !same_float(cv) || !same_float(sv)) {
        sc = group::SinCosOfMultiple(key[options_.plane_axes[i]], freqs_.thetas[i]);
        const double scale =
            options_.xpos.enabled ? m * std::exp(role_sign * rel * log_zeta[i]) : m;
        cv = scale * sc.cos;
        sv = scale * sc.sin;
      }
      last[i] = sc;
      if (interleaved) {
        // Expanded so the kernel is y = x * cos + swap_pairs(x) * sin.
        c[2 * i] = static_cast<T>(cv);
        c[2 * i + 1] = static_cast<T>(cv);
        s[2 * i] = static_cast<T>(-sv);
        s[2 * i + 1] = static_cast<T>(sv);
      } else {
        c[i] = static_cast<T>(cv);
        s[i] = static_cast<T>(sv);
      }
    }
  }
  };
  parallel::ParallelForChunks(threads > 0 ? threads : options_.num_threads, table.num_rows_,
                              fill);
  return table;
}

namespace {

// Rotation kernels: plain loops over contiguous rows that GCC vectorises at -O3.
// kSign = +1 rotates by a, -1 by -a. Separate in-place variants keep __restrict valid.
template <class T, int kSign>
void HalfSplitOut(const T* __restrict x1, const T* __restrict x2, T* __restrict y1,
                  T* __restrict y2, const T* __restrict c, const T* __restrict s, int64_t h) {
  for (int64_t i = 0; i < h; ++i) {
    const T a = x1[i], b = x2[i];
    const T sn = static_cast<T>(kSign) * s[i];
    y1[i] = a * c[i] - b * sn;
    y2[i] = a * sn + b * c[i];
  }
}

template <class T, int kSign>
void HalfSplitInPlace(T* __restrict x1, T* __restrict x2, const T* __restrict c,
                      const T* __restrict s, int64_t h) {
  for (int64_t i = 0; i < h; ++i) {
    const T a = x1[i], b = x2[i];
    const T sn = static_cast<T>(kSign) * s[i];
    x1[i] = a * c[i] - b * sn;
    x2[i] = a * sn + b * c[i];
  }
}

// c, s expanded: c[2i] = c[2i+1] = cos, s[2i] = -sin, s[2i+1] = sin.
template <class T, int kSign>
void InterleavedOut(const T* __restrict x, T* __restrict y, const T* __restrict c,
                    const T* __restrict s, int64_t planes) {
  for (int64_t i = 0; i < planes; ++i) {
    const T a = x[2 * i], b = x[2 * i + 1];
    y[2 * i] = a * c[2 * i] + b * (static_cast<T>(kSign) * s[2 * i]);
    y[2 * i + 1] = b * c[2 * i + 1] + a * (static_cast<T>(kSign) * s[2 * i + 1]);
  }
}

template <class T, int kSign>
void InterleavedInPlace(T* __restrict x, const T* __restrict c, const T* __restrict s,
                        int64_t planes) {
  for (int64_t i = 0; i < planes; ++i) {
    const T a = x[2 * i], b = x[2 * i + 1];
    x[2 * i] = a * c[2 * i] + b * (static_cast<T>(kSign) * s[2 * i]);
    x[2 * i + 1] = b * c[2 * i + 1] + a * (static_cast<T>(kSign) * s[2 * i + 1]);
  }
}

template <class T, int kSign>
void RotateRow(bool interleaved, int64_t rotary_dim, int64_t head_dim, const T* in, T* out,
               const T* c, const T* s) {
  const int64_t h = rotary_dim / 2;
  if (in == out) {
    if (interleaved) {
      InterleavedInPlace<T, kSign>(out, c, s, h);
    } else {
      HalfSplitInPlace<T, kSign>(out, out + h, c, s, h);
    }
    return;
  }
  if (interleaved) {
    InterleavedOut<T, kSign>(in, out, c, s, h);
  } else {
    HalfSplitOut<T, kSign>(in, in + h, out, out + h, c, s, h);
  }
  std::copy(in + rotary_dim, in + head_dim, out + rotary_dim);
}

}  // namespace

float ToFloat(BFloat16 h) {
  const uint32_t u = static_cast<uint32_t>(h.bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

BFloat16 ToBFloat16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return BFloat16{static_cast<uint16_t>((u >> 16) | 0x0040u)};
  u += 0x7FFFu + ((u >> 16) & 1u);  // round to nearest even
  return BFloat16{static_cast<uint16_t>(u >> 16)};
}

float ToFloat(Float16 h) {
  const uint32_t sign = static_cast<uint32_t>(h.bits & 0x8000u) << 16;
  const uint32_t e = (h.bits >> 10) & 0x1Fu, m = h.bits & 0x3FFu;
  uint32_t u;
  if (e == 0) {
    // Zero or subnormal: m * 2^-24, exact in float.
    const float v = std::ldexp(static_cast<float>(m), -24);
    std::memcpy(&u, &v, sizeof(u));
    u |= sign;
  } else if (e == 31) {
    u = sign | 0x7F800000u | (m << 13);
  } else {
    u = sign | ((e + 112u) << 23) | (m << 13);
  }
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

Float16 ToFloat16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, sizeof(x));
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  x &= 0x7FFFFFFFu;
  if (x >= 0x7F800000u) return Float16{static_cast<uint16_t>(sign | (x > 0x7F800000u ? 0x7E00u : 0x7C00u))};
  if (x >= 0x477FF000u) return Float16{static_cast<uint16_t>(sign | 0x7C00u)};  // >= 65520
  if (x < 0x38800000u) {  // below 2^-14: subnormal result
    if (x < 0x33000000u) return Float16{sign};  // <= 2^-25 rounds to 0 (ties to even)
    const uint32_t e = x >> 23, m = (x & 0x7FFFFFu) | 0x800000u;
    const uint32_t shift = 126u - e;  // value = m 2^(e-150) = (m >> shift) 2^-24
    uint32_t r = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (r & 1u))) ++r;
    return Float16{static_cast<uint16_t>(sign | r)};
  }
  uint32_t h = (((x >> 23) - 112u) << 10) | ((x & 0x7FFFFFu) >> 13);
  const uint32_t rem = x & 0x1FFFu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // carries into the exponent
  return Float16{static_cast<uint16_t>(sign | h)};
}

namespace {

// One 16-bit head vector: widen to float, rotate in float, round once on store.
// Pass-through coordinates are copied bit for bit.
template <class H, int kSign>
void RotateRow16(bool interleaved, int64_t rotary_dim, int64_t head_dim, const H* in, H* out,
                 const float* c, const float* s, float* buf) {
  for (int64_t k = 0; k < rotary_dim; ++k) buf[k] = ToFloat(in[k]);
  RotateRow<float, kSign>(interleaved, rotary_dim, rotary_dim, buf, buf, c, s);
  if constexpr (std::is_same_v<H, BFloat16>) {
    for (int64_t k = 0; k < rotary_dim; ++k) out[k] = ToBFloat16(buf[k]);
  } else {
    for (int64_t k = 0; k < rotary_dim; ++k) out[k] = ToFloat16(buf[k]);
  }
  if (in != out) std::copy(in + rotary_dim, in + head_dim, out + rotary_dim);
}

}  // namespace

template <class C>
absl::Status Rope::CheckTable(const RopeTable<C>& table, const RopeTensor& tensor,
                              const char* who) const {
  if (absl::Status s = TensorSpan(tensor).status(); !s.ok()) return s;
  if (tensor.head_dim != options_.head_dim) {
    return InvalidArgumentError(StrCat(who, ": tensor head_dim ", tensor.head_dim,
                                       " != encoding head_dim ", options_.head_dim));
  }
  const int64_t n = tensor.num_tokens();
  const bool interleaved = options_.pairing == PlanePairing::kInterleaved;
  const int64_t width = interleaved ? options_.rotary_dim : options_.rotary_dim / 2;
  if (table.num_tokens() != n || table.width_ != width) {
    return InvalidArgumentError(StrCat(who, ": table built for ", table.num_tokens(),
                                       " tokens and width ", table.width_, ", tensor has ", n,
                                       " tokens and needs width ", width));
  }
  // The same token numbering, not only as many tokens: a [2, 4] table on a [4, 2] tensor
  // rotated token t by the position of the other shape's token t.
  const bool same_numbering =
      table.layout_ == tensor.layout && table.batch_ == tensor.batch &&
      table.seq_len_ == tensor.seq_len &&
      (tensor.layout != RopeLayout::kTHD ||
       std::equal(table.cu_seqlens_.begin(), table.cu_seqlens_.end(), tensor.cu_seqlens.begin(),
                  tensor.cu_seqlens.end()));
  if (!same_numbering) {
    return InvalidArgumentError(StrCat(
        who, ": the table was built for another token numbering (layout, batch ", table.batch_,
        ", sequence length ", table.seq_len_,
        table.layout_ == RopeLayout::kTHD ? ", cu_seqlens" : "", "; the tensor has batch ",
        tensor.batch, ", sequence length ", tensor.seq_len,
        "): build one for this shape"));
  }
  return absl::OkStatus();
}

template absl::Status Rope::CheckTable<float>(const RopeTable<float>&, const RopeTensor&,
                                              const char*) const;
template absl::Status Rope::CheckTable<double>(const RopeTable<double>&, const RopeTensor&,
                                               const char*) const;

template <class T>
absl::Status Rope::CheckApply(const RopeTableFor<T>& table, const RopeTensor& tensor,
                              const char* who) const {
  if (absl::Status s = CheckTable(table, tensor, who); !s.ok()) return s;
  // A 16-bit tensor's range is narrower than the float table's: an xPos scale past it
  // (float16: 65504 = e^11.09, reached 8 times nearer the centre than float32's e^88.7)
  // gave inf outputs for O(1) inputs. Refused as MakeTable refuses scales past the
  // table's own range.
  // The attention factor alike: its table entries must fit the tensor's type as they fit
  // the table's (MakeTable).
  if constexpr (std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>) {
    constexpr bool kF16 = std::is_same_v<T, Float16>;
    const double largest = kF16 ? 65504.0 : 0x1.fep127;
    const double log_max = std::log(largest);
    const bool planes = table.max_log_scale_ != -std::numeric_limits<double>::infinity();
    // Refused only past the largest value: m = 65504 gives float16 entries up to 65504.
    if (planes && freqs_.attention_factor > largest) {
      return InvalidArgumentError(StrCat(
          who, ": the attention factor of this table is ", Exact(freqs_.attention_factor),
          ", above ", kF16 ? "float16" : "bfloat16", "'s largest value ", Exact(largest),
          ": the rotated tensor's entries would be infinite; give a smaller "
          "attention_factor (or mscale)"));
    }
    if (options_.xpos.enabled && table.max_log_scale_ > log_max) {
      return InvalidArgumentError(StrCat(
          who, ": an xPos scale of this table (times the attention factor) is e^",
          table.max_log_scale_, ", beyond ", kF16 ? "float16" : "bfloat16", "'s range (e^",
          log_max, "); set xpos.centre near the positions in use"));
    }
  }
  return absl::OkStatus();
}

template absl::Status Rope::CheckApply<float>(const RopeTableFor<float>&, const RopeTensor&,
                                              const char*) const;
template absl::Status Rope::CheckApply<double>(const RopeTableFor<double>&, const RopeTensor&,
                                               const char*) const;
template absl::Status Rope::CheckApply<BFloat16>(const RopeTableFor<BFloat16>&,
                                                 const RopeTensor&, const char*) const;
template absl::Status Rope::CheckApply<Float16>(const RopeTableFor<Float16>&, const RopeTensor&,
                                                const char*) const;

template <class T, bool kInverse>
absl::Status Rope::ApplyImpl(const RopeTableFor<T>& table, const RopeTensor& tensor, const T* in,
                             T* out) const {
  const char* who = kInverse ? "Rope::ApplyBackward" : "Rope::Apply";
  if (absl::Status s = CheckApply<T>(table, tensor, who); !s.ok()) return s;
  absl::StatusOr<int64_t> span = TensorSpan(tensor);
  if (!span.ok()) return span.status();
  const int64_t n = tensor.num_tokens();
  const bool interleaved = options_.pairing == PlanePairing::kInterleaved;
  const int64_t width = table.width_;  // CheckTable: the encoding's
  if (*span == 0) return absl::OkStatus();
  if (in == nullptr || out == nullptr) {
    return InvalidArgumentError(StrCat(who, ": null input or output"));
  }
  if (in != out) {
    const uintptr_t a = reinterpret_cast<uintptr_t>(in), b = reinterpret_cast<uintptr_t>(out);
    const uintptr_t bytes = static_cast<uintptr_t>(*span) * sizeof(T);
    if (a < b + bytes && b < a + bytes) {
      return InvalidArgumentError(StrCat(who, ": input and output overlap without being identical"));
    }
  }
  const int64_t rotary_dim = options_.rotary_dim, head_dim = options_.head_dim;
  const bool thd = tensor.layout == RopeLayout::kTHD;
  using C = typename RopeComputeType<T>::type;
  constexpr bool kHalf = !std::is_same_v<T, C>;
  auto run = [&](int64_t t_begin, int64_t t_end) {
    constexpr int kSign = kInverse ? -1 : 1;
    std::vector<float> buf(kHalf ? rotary_dim : 0);
    for (int64_t t = t_begin; t < t_end; ++t) {
      const int64_t base = thd ? t * tensor.seq_stride
                               : (t / tensor.seq_len) * tensor.batch_stride +
                                     (t % tensor.seq_len) * tensor.seq_stride;
      const int64_t row = table.row_of_token_[t];
      const C* c = table.cos_.data() + row * width;
      const C* s = table.sin_.data() + row * width;
      for (int64_t hd = 0; hd < tensor.heads; ++hd) {
        const int64_t off = base + hd * tensor.head_stride;
        if constexpr (kHalf) {
          RotateRow16<T, kSign>(interleaved, rotary_dim, head_dim, in + off, out + off, c, s,
                                buf.data());
        } else {
          RotateRow<T, kSign>(interleaved, rotary_dim, head_dim, in + off, out + off, c, s);
        }
      }
    }
  };
  parallel::ParallelForChunks(options_.num_threads, n, run);
  return absl::OkStatus();
}

template <class T>
absl::Status Rope::Apply(const RopeTableFor<T>& table, const RopeTensor& tensor, const T* in,
                         T* out) const {
  return ApplyImpl<T, false>(table, tensor, in, out);
}

template <class T>
absl::Status Rope::ApplyBackward(const RopeTableFor<T>& table, const RopeTensor& tensor,
                                 const T* dy, T* dx) const {
  return ApplyImpl<T, true>(table, tensor, dy, dx);
}

template <class T>
absl::Status Rope::ApplyRows(const RopeTable<T>& table, int64_t first_token, int64_t count,
                             T* rows, int64_t stride, bool inverse) const {
  const bool interleaved = options_.pairing == PlanePairing::kInterleaved;
  const int64_t width = interleaved ? options_.rotary_dim : options_.rotary_dim / 2;
  const int64_t head_dim = options_.head_dim;
  if (table.width_ != width) {
    return InvalidArgumentError(
        StrCat("Rope::ApplyRows: table width ", table.width_, " != ", width));
  }
  if (count < 0 || first_token < 0 || first_token > table.num_tokens() - count) {
    return InvalidArgumentError(StrCat("Rope::ApplyRows: tokens [", first_token, ", ",
                                       first_token, " + ", count, ") outside the table's ",
                                       table.num_tokens(), " tokens"));
  }
  if (count == 0) return absl::OkStatus();
  if (rows == nullptr) return InvalidArgumentError("Rope::ApplyRows: rows is null");
  if (count > 1 && stride < head_dim) {
    return InvalidArgumentError(
        StrCat("Rope::ApplyRows: stride ", stride, " < head_dim ", head_dim));
  }
  for (int64_t r = 0; r < count; ++r) {
    const int64_t row = table.row_of_token_[first_token + r];
    const T* c = table.cos_.data() + row * width;
    const T* s = table.sin_.data() + row * width;
    T* x = rows + r * stride;
    if (inverse) {
      RotateRow<T, -1>(interleaved, options_.rotary_dim, head_dim, x, x, c, s);
    } else {
      RotateRow<T, 1>(interleaved, options_.rotary_dim, head_dim, x, x, c, s);
    }
  }
  return absl::OkStatus();
}

template absl::Status Rope::ApplyRows<float>(const RopeTable<float>&, int64_t, int64_t, float*,
                                             int64_t, bool) const;
template absl::Status Rope::ApplyRows<double>(const RopeTable<double>&, int64_t, int64_t,
                                              double*, int64_t, bool) const;

template <class T>
absl::Status Rope::Forward(const RopeTensor& tensor, const RopePositions& positions,
                           const T* in, T* out, RopeRole role) const {
  using C = typename RopeComputeType<T>::type;
  absl::StatusOr<RopeTable<C>> table = MakeTable<C>(tensor, positions, role);
  if (!table.ok()) return table.status();
  return Apply<T>(*table, tensor, in, out);
}

template <class T>
absl::Status Rope::Backward(const RopeTensor& tensor, const RopePositions& positions,
                            const T* dy, T* dx, RopeRole role) const {
  using C = typename RopeComputeType<T>::type;
  absl::StatusOr<RopeTable<C>> table = MakeTable<C>(tensor, positions, role);
  if (!table.ok()) return table.status();
  return ApplyBackward<T>(*table, tensor, dy, dx);
}

template absl::StatusOr<RopeTable<float>> Rope::MakeTable<float>(const RopeTensor&,
                                                                 const RopePositions&,
                                                                 RopeRole, int) const;
template absl::StatusOr<RopeTable<double>> Rope::MakeTable<double>(const RopeTensor&,
                                                                   const RopePositions&,
                                                                   RopeRole, int) const;

#define GPE_ROPE_INSTANTIATE(T)                                                             \
  template absl::Status Rope::Apply<T>(const RopeTableFor<T>&, const RopeTensor&, const T*,  \
                                       T*) const;                                           \
  template absl::Status Rope::ApplyBackward<T>(const RopeTableFor<T>&, const RopeTensor&,   \
                                               const T*, T*) const;                         \
  template absl::Status Rope::Forward<T>(const RopeTensor&, const RopePositions&, const T*,  \
                                         T*, RopeRole) const;                               \
  template absl::Status Rope::Backward<T>(const RopeTensor&, const RopePositions&, const T*, \
                                          T*, RopeRole) const;

GPE_ROPE_INSTANTIATE(float)
GPE_ROPE_INSTANTIATE(double)
GPE_ROPE_INSTANTIATE(BFloat16)
GPE_ROPE_INSTANTIATE(Float16)

#undef GPE_ROPE_INSTANTIATE
#undef GPE_RETURN_IF_ERROR

}  // namespace sequence
}  // namespace encodings
}  // namespace gpe
