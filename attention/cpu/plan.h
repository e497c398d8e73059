// How one call of the CPU attention is cut into work: the plan (tile sizes, padding,
// threads, which kernels), the items threads take from a shared counter (forward: query
// rows of one kv head; backward: keys of one kv head), most expensive first.
#ifndef ATTENTION_CPU_PLAN_H_
#define ATTENTION_CPU_PLAN_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "attention/cpu/cpu_attention.h"
#include "attention/descriptor.h"

namespace gpe {
namespace attention {
namespace cpu {

// Query rows that share one pass over the key blocks: each key/value block is loaded
// into L2 once per kPassRows rows rather than once per query tile.
constexpr int64_t kPassRows = 384;
// Windows narrower than this many keys take key blocks of one panel (MakePlan).
constexpr int64_t kWindowSmallKeys = 4096;
// At most this many query rows (heads of a group x tokens) per item: scores from key
// rows in place instead of packed panels (decoding).
constexpr int64_t kDirectRows = 16;
// Decoding shapes split the keys across threads (RunDecode) from this many keys on.
constexpr int64_t kDecodeMinKeys = 1024;
// Scores live in the base-2 log domain (kernels.h): q carries softmax_scale * log2(e).
constexpr double kLog2e = 1.4426950408889634;
constexpr double kLn2 = 0.6931471805599453;

// InvalidArgumentError with the entry points' prefix.
absl::Status Bad(const std::string& msg);

inline int64_t RoundUp(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

struct Plan {
  int threads = 1;
  int64_t bq = 0, bk = 0;  // bk a multiple of kPanel
  int64_t rows = 0;        // query rows per pass over the keys: a multiple of bq
  int64_t d = 0, dp = 0;   // head_dim (q, k) and its padding to kVecPad
  int64_t dv = 0, dvp = 0;  // value_dim() (v, o; descriptor.h) and its padding
  int64_t max_lk = 0;      // longest key sequence
  bool direct_v = false;   // decoding reads value rows in place (dv == dvp): no copy
  bool amx = false;        // bf16_dot with the forward's products on AMX tiles (kernels_amx.h)
  bool bf16_dot = false;   // bfloat16 inputs on a CPU with AVX512_BF16: kernels_bf16.h
  // float32 inputs with Float32Arithmetic's split modes on usable tiles: products per
  // float product (6 or 3; 0: float32 FMAs), and the width of one part's segment of a
  // split query or key row (head_dim rounded up to 32: whole tile steps). split_bf16.h.
  int split_terms = 0;
  int64_t split_width = 0;
  int64_t nlk = 0, nlv = 0;  // Shaw key / value labels (2k + 1 each, 0 without)
  int64_t tile_rows = 0;   // rows of one score tile beyond bq (decoding: every head)
  int64_t ldl = 0;           // row stride of label dot products: whole key panels
};

// The plan for these arguments and options; rejects options out of range. float_kv: k
// and v are float32 (decoding may read value rows in place); bf16_all: q, k, v and o
// are all bfloat16 (the bf16 dot products may serve them).
absl::StatusOr<Plan> MakePlan(const AttentionArgs& a, const CpuAttentionOptions& opt,
                              bool float_kv = true, bool bf16_all = false);

// Rows of one score tile: a query tile, or every head of a group in direct mode.
int64_t TileRows(const Plan& p);

// One unit of parallel work: query rows [q0, q1) (indices within sequence b) of every
// query head of kv head g.
struct Item {
  int64_t b, g, q0, q1;
  double cost;
};

// The forward's items, most expensive first (about four per thread).
std::vector<Item> MakeItems(const AttentionArgs& a, const Plan& p);

// Items of the backward: key rows [k0, k1) of sequence b, kv head g.
struct KeyItem {
  int64_t b, g, k0, k1, chunk;
  double cost;
};

struct BackwardPlan {
  std::vector<KeyItem> items;
  int64_t chunks = 1;  // key chunks per (sequence, kv head): dq partial sums kept apart
};

// The backward's items, most expensive first (about four per thread).
BackwardPlan MakeKeyItems(const AttentionArgs& a, const Plan& p);

}  // namespace cpu
}  // namespace attention
}  // namespace gpe

#endif  // ATTENTION_CPU_PLAN_H_
