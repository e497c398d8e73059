#include "attention/cpu/plan.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "attention/cpu/kernels.h"
#include "attention/cpu/kernels_amx.h"
#include "attention/cpu/kernels_bf16.h"
#include "parallel/thread_pool.h"

namespace gpe {
namespace attention {
namespace cpu {
namespace {

constexpr int64_t kDefaultBlockQ = 96;
constexpr int64_t kDefaultBlockK = 128;
constexpr int64_t kMaxBlock = 4096;

}  // namespace

absl::Status Bad(const std::string& msg) {
  return absl::InvalidArgumentError(absl::StrCat("CpuForward: ", msg));
}

absl::StatusOr<Plan> MakePlan(const AttentionArgs& a, const CpuAttentionOptions& opt,
                              bool float_kv, bool bf16_all) {
  if (absl::Status s = ValidateCpuAttentionOptions(opt); !s.ok()) return s;
  Plan p;
  p.threads = opt.num_threads > 0
                  ? opt.num_threads
                  : parallel::DefaultThreads();
  p.bq = opt.block_q > 0 ? opt.block_q : kDefaultBlockQ;
  // A sliding window also computes about block_q keys per row beyond its own (the
  // triangle at the window's edges): 64-row query tiles with one-panel key blocks
  // (below) measured 1.10-1.14x attention over the window's keys against 1.18-1.24x
  // with 96 (BM_CpuWindow, window 1024 of 16384, 2 threads, Zen 5, three rounds each).
  if (opt.block_q == 0 && a.window_left >= 0 && a.window_left < kWindowSmallKeys) {
    p.bq = std::min<int64_t>(p.bq, 64);
  }
  p.rows = p.bq * std::max<int64_t>(1, kPassRows / p.bq);
  p.bk = RoundUp(opt.block_k > 0 ? opt.block_k : kDefaultBlockK, kPanel);
  // A sliding window computes about (block_q + block_k) keys per row beyond its own
  // (the partly masked blocks at both ends): one-panel key blocks halve that part.
  if (opt.block_k == 0 && a.window_left >= 0 && a.window_left < kWindowSmallKeys) p.bk = kPanel;
  p.d = a.head_dim;
  p.dp = RoundUp(a.head_dim, kVecPad);
  p.dv = a.value_dim();
  p.dvp = RoundUp(p.dv, kVecPad);
  p.direct_v = float_kv && p.dvp == p.dv;
  if (bf16_all) {
    using A = CpuAttentionOptions::Bf16Arithmetic;
    const bool dot = opt.bf16_arithmetic == A::kDotProducts ||
                     opt.bf16_arithmetic == A::kAmxTiles ||
                     (opt.bf16_arithmetic == A::kAuto && cpu::Bf16DotProductsFaster());
    p.bf16_dot = dot && cpu::HasBf16DotProduct();
    p.amx = p.bf16_dot && opt.bf16_arithmetic == A::kAmxTiles && cpu::AmxUsable();
  }
  if (float_kv && !bf16_all) {
    using F = CpuAttentionOptions::Float32Arithmetic;
    if (opt.float32_arithmetic != F::kExact && cpu::HasBf16DotProduct() && cpu::AmxUsable()) {
      p.split_terms = opt.float32_arithmetic == F::kSplitBf16x6 ? 6 : 3;
      p.split_width = RoundUp(p.d, 32);
    }
  }
  for (int64_t b = 0; b < a.num_sequences(); ++b) {
    p.max_lk = std::max(p.max_lk, a.k_end(b) - a.k_begin(b));
  }
  p.nlk = a.shaw_keys != nullptr ? a.shaw_keys->num_labels() : 0;
  p.nlv = a.shaw_values != nullptr ? a.shaw_values->num_labels() : 0;
  p.ldl = RoundUp(std::max(p.nlk, p.nlv), kPanel);
  return p;
}

int64_t TileRows(const Plan& p) { return std::max({p.bq, kDirectRows, p.tile_rows}); }

std::vector<Item> MakeItems(const AttentionArgs& a, const Plan& p) {
  int64_t base = 0, max_lq = 0;
  for (int64_t b = 0; b < a.num_sequences(); ++b) {
    const int64_t lq = a.q_end(b) - a.q_begin(b);
    if (lq > 0) base += a.num_kv_heads;
    max_lq = std::max(max_lq, lq);
  }
  std::vector<Item> items;
  if (base == 0) return items;
  // About four items per thread (load balance), each at least one query tile.
  const int64_t want = 4 * static_cast<int64_t>(p.threads);
  const int64_t per_seq = std::max<int64_t>(1, (want + base - 1) / base);
  const int64_t chunk = std::max(p.bq, RoundUp((max_lq + per_seq - 1) / per_seq, p.bq));
  const int64_t group = a.num_q_heads / a.num_kv_heads;
  for (int64_t b = 0; b < a.num_sequences(); ++b) {
    const int64_t lq = a.q_end(b) - a.q_begin(b), lk = a.k_end(b) - a.k_begin(b);
    for (int64_t g = 0; g < a.num_kv_heads; ++g) {
      for (int64_t q0 = 0; q0 < lq; q0 += chunk) {
        const int64_t q1 = std::min(lq, q0 + chunk);
        // Keys a causal chunk sees with the default positions (an estimate otherwise).
        const double keys =
            a.causal ? static_cast<double>(std::clamp<int64_t>(q1 + lk - lq, 1, std::max<int64_t>(lk, 1)))
                     : static_cast<double>(std::max<int64_t>(lk, 1));
        items.push_back({b, g, q0, q1, static_cast<double>((q1 - q0) * group) * keys});
      }
    }
  }
  std::stable_sort(items.begin(), items.end(),
                   [](const Item& x, const Item& y) { return x.cost > y.cost; });
  return items;
}

BackwardPlan MakeKeyItems(const AttentionArgs& a, const Plan& p) {
  BackwardPlan bp;
  int64_t base = 0, max_lk = 0;
  for (int64_t b = 0; b < a.num_sequences(); ++b) {
    const int64_t lk = a.k_end(b) - a.k_begin(b);
    if (lk > 0) base += a.num_kv_heads;
    max_lk = std::max(max_lk, lk);
  }
  if (base == 0) return bp;
  const int64_t want = 4 * static_cast<int64_t>(p.threads);
  const int64_t per_seq = std::max<int64_t>(1, (want + base - 1) / base);
  const int64_t chunk = std::max(p.bk, RoundUp((max_lk + per_seq - 1) / per_seq, p.bk));
  bp.chunks = (max_lk + chunk - 1) / chunk;
  for (int64_t b = 0; b < a.num_sequences(); ++b) {
    const int64_t lq = a.q_end(b) - a.q_begin(b), lk = a.k_end(b) - a.k_begin(b);
    for (int64_t g = 0; g < a.num_kv_heads; ++g) {
      for (int64_t c = 0, k0 = 0; k0 < lk; ++c, k0 += chunk) {
        const int64_t k1 = std::min(lk, k0 + chunk);
        bp.items.push_back({b, g, k0, k1, c, static_cast<double>((k1 - k0) * std::max<int64_t>(lq, 1))});
      }
    }
  }
  std::stable_sort(bp.items.begin(), bp.items.end(),
                   [](const KeyItem& x, const KeyItem& y) { return x.cost > y.cost; });
  return bp;
}

}  // namespace cpu

absl::Status ValidateCpuAttentionOptions(const CpuAttentionOptions& opt) {
  if (opt.num_threads < 0 || opt.num_threads > 1024) {
    return cpu::Bad(absl::StrCat("num_threads must be in [0, 1024], got ", opt.num_threads));
  }
  if (opt.block_q < 0 || opt.block_q > cpu::kMaxBlock) {
    return cpu::Bad(
        absl::StrCat("block_q must be in [0, ", cpu::kMaxBlock, "], got ", opt.block_q));
  }
  if (opt.block_k < 0 || opt.block_k > cpu::kMaxBlock) {
    return cpu::Bad(
        absl::StrCat("block_k must be in [0, ", cpu::kMaxBlock, "], got ", opt.block_k));
  }
  using A = CpuAttentionOptions::Bf16Arithmetic;
  using F = CpuAttentionOptions::Float32Arithmetic;
  if (const int b = static_cast<int>(opt.bf16_arithmetic);
      b < static_cast<int>(A::kAuto) || b > static_cast<int>(A::kAmxTiles)) {
    return cpu::Bad(absl::StrCat("bf16_arithmetic is not one of Bf16Arithmetic's values: ", b));
  }
  if (const int f = static_cast<int>(opt.float32_arithmetic);
      f < static_cast<int>(F::kExact) || f > static_cast<int>(F::kSplitBf16x3)) {
    return cpu::Bad(
        absl::StrCat("float32_arithmetic is not one of Float32Arithmetic's values: ", f));
  }
  return absl::OkStatus();
}

}  // namespace attention
}  // namespace gpe
