#include "attention/cpu/cpu_attention.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <thread>
#include <type_traits>
#include <utility>
#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif
#include <vector>

#include "absl/strings/str_cat.h"
#include "attention/cpu/kernels.h"
#include "attention/cpu/kernels_bf16.h"
#include "encodings/sequence/algebraic.h"
#include "encodings/sequence/relative.h"
#include "hwy/aligned_allocator.h"

namespace gpe {
namespace attention {
namespace {

using cpu::kPanel;
using cpu::kSumLanes;
using cpu::kVecPad;

constexpr int64_t kDefaultBlockQ = 96;
constexpr int64_t kDefaultBlockK = 128;
constexpr int64_t kMaxBlock = 4096;
// Query rows that share one pass over the key blocks: each key/value block is loaded
// into L2 once per kPassRows rows rather than once per query tile.
constexpr int64_t kPassRows = 384;
// At most this many query rows (heads of a group x tokens) per item: scores from key
// rows in place instead of packed panels (decoding).
constexpr int64_t kDirectRows = 16;
// Decoding shapes split the keys across threads (RunDecode) from this many keys on.
constexpr int64_t kDecodeMinKeys = 1024;
// Bytes of key and value rows (every kv head) in one decoding block.
constexpr int64_t kDecodeBlockBytes = int64_t{256} << 10;
// Decoding's software prefetch distance (cpu::PrefetchAhead): the key and value streams
// are requested this many bytes ahead of the block being read.
// 16 to 128 KiB measured alike (process CPU time 30% below no prefetching).
constexpr int64_t kDecodePrefetchBytes = int64_t{32} << 10;
constexpr double kLog2e = 1.4426950408889634;
constexpr double kLn2 = 0.6931471805599453;

absl::Status Bad(const std::string& msg) {
  return absl::InvalidArgumentError(absl::StrCat("CpuForward: ", msg));
}

int64_t RoundUp(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

using encodings::sequence::BFloat16;

// Element conversions at the kernel's edges: inputs widened to float once, outputs
// rounded once (bfloat16: to nearest even, rope.h's ToBFloat16).
inline float ToF(float x) { return x; }
inline float ToF(BFloat16 x) {
  const uint32_t u = static_cast<uint32_t>(x.bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}
template <class T>
void LoadRow(const T* src, float* dst, int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
  } else {  // bf16 bits shifted up, 16 lanes at a time where the CPU has AVX-512
    cpu::WidenBf16Row(reinterpret_cast<const uint16_t*>(src), dst, n);
  }
}
template <class T>
void StoreRow(const float* src, T* dst, int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
  } else {  // ToBFloat16's rounding, 16 lanes at a time where the CPU has AVX-512
    cpu::RoundBf16Row(src, reinterpret_cast<uint16_t*>(dst), n);
  }
}


uint64_t Distance(int64_t a, int64_t b) {
  return a >= b ? static_cast<uint64_t>(a) - static_cast<uint64_t>(b)
                : static_cast<uint64_t>(b) - static_cast<uint64_t>(a);
}

// Scratch for FillBias.
struct BiasScratch {
  std::vector<int64_t> keys;
  std::vector<float> diagonal;
};

bool Consecutive(const int64_t* p, int64_t n) {
  for (int64_t i = 1; i < n; ++i) {
    if (p[i] != p[0] + i) return false;
  }
  return true;
}

// out[r * ld + c] = b_head(qpos[r], kpos[c]), r < nr, c < nk. A relative bias of
// positions only (ALiBi, T5) on consecutive query and key positions is a Toeplitz tile,
// b(q0 + r, k0 + c) = g(k0 - q0 + c - r): one FillTile row of the nr + nk - 1 distinct
// differences (query q0 against keys k0 - (nr - 1) + t), copied shifted into each row.
absl::Status FillBias(const encodings::sequence::AdditiveBias& bias, int64_t head,
                      const int64_t* qpos, int64_t nr, const int64_t* kpos, int64_t nk,
                      float* out, int64_t ld, BiasScratch* scratch) {
  if (bias.relative() && !bias.needs_token_data() && nr > 1 && Consecutive(qpos, nr) &&
      Consecutive(kpos, nk) && kpos[0] >= std::numeric_limits<int64_t>::min() + nr) {
    const int64_t width = nr + nk - 1;
    scratch->keys.resize(static_cast<size_t>(width));
    scratch->diagonal.resize(static_cast<size_t>(width));
    for (int64_t t = 0; t < width; ++t) scratch->keys[t] = kpos[0] - (nr - 1) + t;
    if (absl::Status s = bias.FillTile(head, absl::MakeConstSpan(qpos, 1), scratch->keys,
                                       scratch->diagonal.data(), width);
        !s.ok()) {
      return s;
    }
    for (int64_t r = 0; r < nr; ++r) {
      std::memcpy(out + r * ld, scratch->diagonal.data() + (nr - 1 - r),
                  static_cast<size_t>(nk) * sizeof(float));
    }
    return absl::OkStatus();
  }
  return bias.FillTile(head, absl::MakeConstSpan(qpos, nr), absl::MakeConstSpan(kpos, nk), out,
                       ld);
}

struct Plan {
  int threads = 1;
  int64_t bq = 0, bk = 0;  // bk a multiple of kPanel
  int64_t rows = 0;        // query rows per pass over the keys: a multiple of bq
  int64_t d = 0, dp = 0;   // head_dim and its padding to kVecPad
  int64_t max_lk = 0;      // longest key sequence
  bool direct_v = false;   // decoding reads value rows in place (d == dp): no copy
  bool bf16_dot = false;   // bfloat16 inputs on a CPU with AVX512_BF16: kernels_bf16.h
  int64_t nlk = 0, nlv = 0;  // Shaw key / value labels (2k + 1 each, 0 without)
  int64_t tile_rows = 0;   // rows of one score tile beyond bq (decoding: every head)
  int64_t ldl = 0;           // row stride of label dot products: whole key panels
};

absl::StatusOr<Plan> MakePlan(const AttentionArgs& a, const CpuAttentionOptions& opt,
                              bool float_inputs = true) {
  if (opt.num_threads < 0 || opt.num_threads > 1024) {
    return Bad(absl::StrCat("num_threads must be in [0, 1024], got ", opt.num_threads));
  }
  if (opt.block_q < 0 || opt.block_q > kMaxBlock) {
    return Bad(absl::StrCat("block_q must be in [0, ", kMaxBlock, "], got ", opt.block_q));
  }
  if (opt.block_k < 0 || opt.block_k > kMaxBlock) {
    return Bad(absl::StrCat("block_k must be in [0, ", kMaxBlock, "], got ", opt.block_k));
  }
  Plan p;
  p.threads = opt.num_threads > 0
                  ? opt.num_threads
                  : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  p.bq = opt.block_q > 0 ? opt.block_q : kDefaultBlockQ;
  p.rows = p.bq * std::max<int64_t>(1, kPassRows / p.bq);
  p.bk = RoundUp(opt.block_k > 0 ? opt.block_k : kDefaultBlockK, kPanel);
  p.d = a.head_dim;
  p.dp = RoundUp(a.head_dim, kVecPad);
  p.direct_v = float_inputs && p.dp == p.d;
  if (!float_inputs) {
    using A = CpuAttentionOptions::Bf16Arithmetic;
    const bool dot = opt.bf16_arithmetic == A::kDotProducts ||
                     (opt.bf16_arithmetic == A::kAuto && cpu::Bf16DotProductsFaster());
    p.bf16_dot = dot && cpu::HasBf16DotProduct();
  }
  for (int64_t b = 0; b < a.num_sequences(); ++b) {
    p.max_lk = std::max(p.max_lk, a.k_end(b) - a.k_begin(b));
  }
  p.nlk = a.shaw_keys != nullptr ? a.shaw_keys->num_labels() : 0;
  p.nlv = a.shaw_values != nullptr ? a.shaw_values->num_labels() : 0;
  p.ldl = RoundUp(std::max(p.nlk, p.nlv), kPanel);
  return p;
}

// Shaw et al.'s tables (descriptor.h, SHAW LABELS) in float: rows [labels][d] (scalar
// parts), key panels (label dot products by ScoreTile) and rows padded to dp (label mass
// times the table by AccumulateTile); kmax the clip distance.
struct ShawTable {
  std::vector<float> rows;
  hwy::AlignedFreeUniquePtr<float[]> panels, padded;
  int64_t num_panels = 0, kmax = 0;
};
struct ShawTables {
  ShawTable k, v;
};
ShawTables MakeShawTables(const AttentionArgs& a, const Plan& p) {
  ShawTables t;
  const int64_t d = a.head_dim;
  auto make = [&](const encodings::sequence::RowMatrixXd& m, int64_t kmax, ShawTable* out) {
    const int64_t n = m.rows();
    out->kmax = kmax;
    out->rows.resize(static_cast<size_t>(n * d));
    for (int64_t r = 0; r < n; ++r) {
      for (int64_t c = 0; c < d; ++c) out->rows[r * d + c] = static_cast<float>(m(r, c));
    }
    out->num_panels = (n + kPanel - 1) / kPanel;
    out->panels = hwy::AllocateAligned<float>(out->num_panels * kPanel * d);
    cpu::PackKeyPanels(out->rows.data(), n, d, d, out->panels.get());
    out->padded = hwy::AllocateAligned<float>(n * p.dp);
    for (int64_t r = 0; r < n; ++r) {
      float* row = out->padded.get() + r * p.dp;
      std::copy(out->rows.begin() + r * d, out->rows.begin() + (r + 1) * d, row);
      std::fill(row + d, row + p.dp, 0.0f);
    }
  };
  if (a.shaw_keys != nullptr) make(a.shaw_keys->key_table(), a.shaw_keys->max_distance(), &t.k);
  if (a.shaw_values != nullptr) {
    make(a.shaw_values->value_table(), a.shaw_values->max_distance(), &t.v);
  }
  return t;
}

// The Shaw label every key of a block shares for query position p (block keys in
// [kmin, kmax]), or -1 when they span several: LabelIndex is non-decreasing in the key
// position, so equal labels at both ends mean one label. Far from the diagonal (all but
// O(k) keys of a row) a whole block has one label, gathered as one per-row constant.
inline int64_t BlockLabel(int64_t p, int64_t kmin, int64_t kmax, int64_t max_distance) {
  const int64_t lo = encodings::sequence::ShawRelative::LabelIndex(p, kmin, max_distance);
  return lo == encodings::sequence::ShawRelative::LabelIndex(p, kmax, max_distance) ? lo : -1;
}

// out[i * ldl + r] = <rows_i, table_r> for i < n (rows of width d, stride ld) and every
// label r (columns past the labels hold zeros' products): each row's 2k + 1 label dot
// products at once (Shaw et al. eq. 4's q_i . aK), by the score kernel.
void LabelDots(const float* rows, int64_t ld, int64_t n, int64_t d, const ShawTable& table,
               float* out, int64_t ldl) {
  if (n > 0) cpu::ScoreTile(rows, ld, n, d, table.panels.get(), table.num_panels, out, ldl);
}

// o[i * ldo + :] = o + sum_r mass[i * lm + r] table_r for i < n: label mass times the
// table, by the P V kernel (ones: n ones, the kernel's rescale factors).
void AddLabelRows(const float* mass, int64_t lm, int64_t n, int64_t nl, const ShawTable& table,
                  int64_t dp, const float* ones, float* o, int64_t ldo) {
  if (n > 0) cpu::AccumulateTile(mass, lm, n, nl, table.padded.get(), dp, dp, ones, o, ldo);
}

// One unit of parallel work: query rows [q0, q1) (indices within sequence b) of every
// query head of kv head g.
struct Item {
  int64_t b, g, q0, q1;
  double cost;
};

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

// Flush-to-zero and denormals-are-zero for the calling thread while alive (x86 MXCSR):
// probabilities and rescaled accumulators that underflow would otherwise turn into
// subnormals, each costing a microcode assist per FMA. Results change only below
// float's smallest normal (1e-38), far under every tolerance. Restored on exit.
class FlushDenormals {
 public:
  FlushDenormals() {
#if defined(__x86_64__) || defined(__i386__)
    saved_ = _mm_getcsr();
    _mm_setcsr(saved_ | 0x8040u);  // FTZ (bit 15) | DAZ (bit 6)
#endif
  }
  ~FlushDenormals() {
#if defined(__x86_64__) || defined(__i386__)
    _mm_setcsr(saved_);
#endif
  }
  FlushDenormals(const FlushDenormals&) = delete;
  FlushDenormals& operator=(const FlushDenormals&) = delete;

 private:
  unsigned saved_ = 0;
};

// Worker threads shared by every call of this library, started on first need and kept
// (a call costs a wake-up instead of a thread start: calls of a few milliseconds, such as
// decoding steps, spent a noticeable part of their time creating threads). A call posts
// a job of `slots` slot indices; the caller runs slot 0, then claims whatever slots no
// worker has taken and runs them itself, so a job finishes even when every worker is
// busy (concurrent callers, or a call made from inside another call's slot): no
// deadlock, and no limit on concurrent callers.
class WorkerPool {
 public:
  static WorkerPool& Get() {
    static WorkerPool* pool = new WorkerPool();  // never destroyed: workers outlive main
    return *pool;
  }

  // Runs fn(slot) for slot in [0, slots), slot 0 on the calling thread; returns when all
  // are done.
  void Run(int slots, const std::function<void(int)>& fn) {
    if (slots <= 1) {
      fn(0);
      return;
    }
    auto job = std::make_shared<Job>(fn, slots);
    {
      std::lock_guard<std::mutex> lock(mu_);
      while (workers_ < slots - 1) {
        std::thread(&WorkerPool::Loop, this).detach();
        ++workers_;
      }
      queue_.push_back(job);
    }
    cv_.notify_all();
    fn(0);
    for (int slot = job->next.fetch_add(1); slot < slots; slot = job->next.fetch_add(1)) {
      fn(slot);
      job->Finish();
    }
    Remove(job.get());
    std::unique_lock<std::mutex> lock(job->mu);
    job->cv.wait(lock, [&] { return job->done == slots - 1; });
  }

 private:
  struct Job {
    Job(const std::function<void(int)>& f, int n) : fn(f), slots(n) {}
    void Finish() {
      std::lock_guard<std::mutex> lock(mu);
      if (++done == slots - 1) cv.notify_all();
    }
    const std::function<void(int)>& fn;
    const int slots;
    std::atomic<int> next{1};
    std::mutex mu;
    std::condition_variable cv;
    int done = 0;  // slots 1.. finished (guarded by mu)
  };

  void Remove(const Job* job) {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = queue_.begin(); it != queue_.end(); ++it) {
      if (it->get() == job) {
        queue_.erase(it);
        return;
      }
    }
  }

  void Loop() {
    for (;;) {
      std::shared_ptr<Job> job;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return !queue_.empty(); });
        job = queue_.front();
      }
      const int slot = job->next.fetch_add(1);
      if (slot >= job->slots) {  // every slot taken: off the queue
        Remove(job.get());
        continue;
      }
      job->fn(slot);
      job->Finish();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> queue_;
  int workers_ = 0;
};

// Runs fn(item_index, thread_index) for every item on `threads` threads (the caller is
// thread 0), items taken in order from a shared counter.
template <class Fn>
void ParallelItems(int threads, int64_t n, const Fn& fn) {
  const int t = static_cast<int>(std::min<int64_t>(threads, n));
  std::atomic<int64_t> next{0};
  WorkerPool::Get().Run(std::max(t, 1), [&](int tid) {
    FlushDenormals ftz;
    for (int64_t i = next.fetch_add(1); i < n; i = next.fetch_add(1)) fn(i, tid);
  });
}

// Runs run(i, workspace) for items [0, n) on up to `threads` threads, each thread with its
// own workspace made by make() on first use; stops taking items after the first error,
// which is returned.
template <class W, class Make, class Run>
absl::Status RunItems(int threads, int64_t n, const Make& make, const Run& run) {
  const int t = static_cast<int>(std::min<int64_t>(threads, std::max<int64_t>(n, 1)));
  std::vector<std::unique_ptr<W>> ws(static_cast<size_t>(t));
  std::mutex mu;
  absl::Status first = absl::OkStatus();
  std::atomic<bool> failed{false};
  ParallelItems(t, n, [&](int64_t i, int tid) {
    if (failed.load(std::memory_order_relaxed)) return;
    if (ws[tid] == nullptr) ws[tid] = make();
    absl::Status st = run(i, *ws[tid]);
    if (!st.ok()) {
      std::lock_guard<std::mutex> lock(mu);
      if (first.ok()) first = st;
      failed = true;
    }
  });
  return first;
}

// The positions actually used and the q and k transforms bound to them (once per call,
// shared by every thread); checks the locality factor once (per-pair factors come from
// the same function as the reference).
absl::Status PrepareEncodings(const AttentionArgs& a, std::vector<int64_t>* pq,
                              std::vector<int64_t>* pk,
                              std::unique_ptr<PreparedRowTransform>* tq,
                              std::unique_ptr<PreparedRowTransform>* tk) {
  *pq = EffectiveQPositions(a);
  *pk = EffectiveKPositions(a);
  // Int64 or structured positions (descriptor.h): either way tiles index tokens.
  if (absl::Status s = PrepareRowTransforms(a, *pq, *pk, tq, tk); !s.ok()) return s;
  if (a.locality.has_value()) {
    auto f = encodings::sequence::LocalityFactor(0, *a.locality);
    if (!f.ok()) return f.status();
  }
  return absl::OkStatus();
}

// Rows of one score tile: a query tile, or every head of a group in direct mode.
int64_t TileRows(const Plan& p) { return std::max({p.bq, kDirectRows, p.tile_rows}); }

// Per-thread buffers (aligned for the kernels' vector loads).
struct Workspace {
  hwy::AlignedFreeUniquePtr<float[]> panels, values, rows, qblk, s, bias, oacc, m, l, alpha;
  // Shaw labels per query row: key-label dot products (stride ldl) and value-label
  // probability mass (stride nlv); ones for the accumulation.
  std::vector<float> qlab, vmass, lab_ones;
  // The bf16 dot-product path's packed keys, value pairs, query rows and probabilities.
  hwy::AlignedFreeUniquePtr<uint16_t[]> panels16, pairs16, q16, p16;
  std::vector<char> packed;
  std::vector<int64_t> kmin, kmax;
  std::vector<char> ksorted;  // key positions non-decreasing within the block
  BiasScratch bias_scratch;

  static int64_t Floats(const Plan& p) {
    const int64_t blocks = (p.max_lk + p.bk - 1) / p.bk;
    // (bf16 buffers counted in floats: two bf16 per float.)
    const int64_t bf16 = p.bf16_dot ? (blocks * p.bk * (RoundUp(p.d, 2) + p.dp) +
                                       p.rows * RoundUp(p.d, 2) + p.bq * p.bk + 1) / 2
                                    : 0;
    return blocks * p.bk * p.d + blocks * p.bk * p.dp + p.bk * p.d + p.rows * p.d +
           2 * TileRows(p) * p.bk + p.rows * p.dp + (2 + kSumLanes) * p.rows + bf16 +
           p.rows * ((p.nlk > 0 ? p.ldl : 0) + (p.nlv > 0 ? p.nlv + 1 : 0));
  }

  explicit Workspace(const Plan& p) {
    const int64_t blocks = (p.max_lk + p.bk - 1) / p.bk;
    auto alloc = [](int64_t n) { return hwy::AllocateAligned<float>(std::max<int64_t>(n, 1)); };
    panels = alloc(blocks * p.bk * p.d);
    values = alloc(blocks * p.bk * p.dp);
    rows = alloc(p.bk * p.d);
    qblk = alloc(p.rows * p.d);
    s = alloc(TileRows(p) * p.bk);
    bias = alloc(TileRows(p) * p.bk);
    oacc = alloc(p.rows * p.dp);
    m = alloc(p.rows);
    l = alloc(p.rows * kSumLanes);
    alpha = alloc(p.rows);
    packed.resize(static_cast<size_t>(blocks));
    kmin.resize(static_cast<size_t>(blocks));
    kmax.resize(static_cast<size_t>(blocks));
    ksorted.resize(static_cast<size_t>(blocks));
    qlab.resize(static_cast<size_t>(p.nlk > 0 ? p.rows * p.ldl : 0));
    vmass.resize(static_cast<size_t>(p.rows * p.nlv));
    lab_ones.assign(static_cast<size_t>(p.nlv > 0 ? p.rows : 0), 1.0f);
    auto alloc16 = [](int64_t n) {
      return hwy::AllocateAligned<uint16_t>(std::max<int64_t>(n, 1));
    };
    if (p.bf16_dot) {
      const int64_t deven = RoundUp(p.d, 2);
      panels16 = alloc16(blocks * p.bk * deven);
      pairs16 = alloc16(blocks * p.bk * p.dp);
      q16 = alloc16(p.rows * deven);
      p16 = alloc16(p.bq * p.bk);
    }
  }
};

template <class T>
class Forward {
 public:
  Forward(const AttentionArgs& a, const Plan& p, const T* q, const T* k, const T* v, T* o,
          float* lse)
      : a_(a), p_(p), q_(q), k_(k), v_(v), o_(o), lse_(lse) {}

  absl::Status Prepare() {
    shaw_ = MakeShawTables(a_, p_);
    return PrepareEncodings(a_, &pq_, &pk_, &tq_, &tk_);
  }

  absl::Status RunItem(const Item& it, Workspace& w) const {
    const int64_t kb = a_.k_begin(it.b), lk = a_.k_end(it.b) - kb;
    const int64_t qbase = a_.q_begin(it.b);
    const int64_t blocks = (lk + p_.bk - 1) / p_.bk;
    std::fill(w.packed.begin(), w.packed.begin() + blocks, 0);
    for (int64_t blk = 0; blk < blocks; ++blk) {
      const int64_t j0 = kb + blk * p_.bk, j1 = std::min(kb + lk, j0 + p_.bk);
      w.kmin[blk] = *std::min_element(pk_.begin() + j0, pk_.begin() + j1);
      w.kmax[blk] = *std::max_element(pk_.begin() + j0, pk_.begin() + j1);
      w.ksorted[blk] = std::is_sorted(pk_.begin() + j0, pk_.begin() + j1);
    }
    const int64_t group = a_.num_q_heads / a_.num_kv_heads;
    const int64_t n = it.q1 - it.q0;
    // Few query rows against each key block (decoding): score from key rows in place
    // rather than packing panels that would be read only a few times.
    const bool direct = group * n <= kDirectRows;
    if (group * n <= p_.rows) {  // every head of the group in one pass over the keys
      return QueryRows(it, it.g * group, group, qbase + it.q0, n, kb, lk, direct, w);
    }
    for (int64_t h = it.g * group; h < (it.g + 1) * group; ++h) {
      for (int64_t r0 = it.q0; r0 < it.q1; r0 += p_.rows) {
        const int64_t mq = std::min(p_.rows, it.q1 - r0);
        if (absl::Status s = QueryRows(it, h, 1, qbase + r0, mq, kb, lk, direct, w); !s.ok()) {
          return s;
        }
      }
    }
    return absl::OkStatus();
  }

 private:
  // Rotates, transposes and copies key block blk of the item's sequence (kv head g).
  absl::Status PackBlock(int64_t g, int64_t kb, int64_t lk, int64_t blk, Workspace& w) const {
    const int64_t j0 = blk * p_.bk, nk = std::min(p_.bk, lk - j0);
    const int64_t d = p_.d;
    if constexpr (std::is_same_v<T, BFloat16>) {
      if (p_.bf16_dot) {  // bf16 panels of (rotated, then rounded) keys and value pairs
        const int64_t deven = RoundUp(d, 2);
        uint16_t* panels16 = w.panels16.get() + blk * p_.bk * deven;
        if (tk_ != nullptr) {
          for (int64_t j = 0; j < nk; ++j) {
            LoadRow(k_ + a_.KOffset(a_.k, kb + j0 + j, g), w.rows.get() + j * d, d);
          }
          if (absl::Status s = tk_->Forward(kb + j0, nk, w.rows.get(), d); !s.ok()) return s;
          uint16_t* rows16 = w.p16.get();  // bq x bk >= nk x d? use a temporary otherwise
          std::vector<uint16_t> tmp;
          if (p_.bq * p_.bk < nk * d) {
            tmp.resize(static_cast<size_t>(nk * d));
            rows16 = tmp.data();
          }
          cpu::RoundBf16Row(w.rows.get(), rows16, nk * d);
          cpu::PackKeyPanelsBf16(rows16, nk, d, d, panels16);
        } else {
          cpu::PackKeyPanelsBf16(reinterpret_cast<const uint16_t*>(k_ + a_.KOffset(a_.k, kb + j0, g)),
                                 nk, a_.k.token, d, panels16);
        }
        cpu::PackValuePairsBf16(reinterpret_cast<const uint16_t*>(v_ + a_.KOffset(a_.v, kb + j0, g)),
                                nk, a_.v.token, d, p_.dp, w.pairs16.get() + j0 * p_.dp);
        w.packed[blk] = 1;
        return absl::OkStatus();
      }
    }
    float* panels = w.panels.get() + blk * p_.bk * d;
    if (tk_ != nullptr) {
      for (int64_t j = 0; j < nk; ++j) {
        LoadRow(k_ + a_.KOffset(a_.k, kb + j0 + j, g), w.rows.get() + j * d, d);
      }
      if (absl::Status s = tk_->Forward(kb + j0, nk, w.rows.get(), d); !s.ok()) return s;
      cpu::PackKeyPanels(w.rows.get(), nk, d, d, panels);
    } else if constexpr (std::is_same_v<T, float>) {
      // Key rows are (token, head) rows of k: consecutive tokens are a.k.token apart.
      cpu::PackKeyPanels(k_ + a_.KOffset(a_.k, kb + j0, g), nk, a_.k.token, d, panels);
    } else {
      for (int64_t j = 0; j < nk; ++j) {
        LoadRow(k_ + a_.KOffset(a_.k, kb + j0 + j, g), w.rows.get() + j * d, d);
      }
      cpu::PackKeyPanels(w.rows.get(), nk, d, d, panels);
    }
    CopyValues(g, kb, j0, nk, w);
    w.packed[blk] = 1;
    return absl::OkStatus();
  }

  // Values of keys [j0, j0 + nk) into the padded value buffer. Packed tiles always copy
  // (value rows of a bshd tensor are a page or more apart: strided rows in the P V loop
  // cost TLB misses on every tile); decoding reads them in place when it can (in_place).
  void CopyValues(int64_t g, int64_t kb, int64_t j0, int64_t nk, Workspace& w,
                  bool in_place = false) const {
    if (in_place && p_.direct_v) return;
    float* vals = w.values.get() + j0 * p_.dp;
    constexpr int64_t kAhead = 8;  // value rows are a token stride apart: fetch ahead
    for (int64_t j = 0; j < nk; ++j) {
      if (j + kAhead < nk) {
        const char* ahead = reinterpret_cast<const char*>(v_ + a_.KOffset(a_.v, kb + j0 + j + kAhead, g));
        for (int64_t b = 0; b < p_.d * static_cast<int64_t>(sizeof(T)); b += 64) {
          __builtin_prefetch(ahead + b);
        }
      }
      float* row = vals + j * p_.dp;
      LoadRow(v_ + a_.KOffset(a_.v, kb + j0 + j, g), row, p_.d);
      std::fill(row + p_.d, row + p_.dp, 0.0f);
    }
  }

  // Key rows of block blk for direct scoring: in place (float, no transform) or rotated
  // into the rows buffer. Returns the rows and their stride.
  absl::StatusOr<std::pair<const float*, int64_t>> DirectKeys(int64_t g, int64_t kb,
                                                              int64_t j0, int64_t nk,
                                                              Workspace& w) const {
    const int64_t d = p_.d;
    if constexpr (std::is_same_v<T, float>) {
      if (tk_ == nullptr) return std::make_pair(k_ + a_.KOffset(a_.k, kb + j0, g), a_.k.token);
    }
    for (int64_t j = 0; j < nk; ++j) {
      LoadRow(k_ + a_.KOffset(a_.k, kb + j0 + j, g), w.rows.get() + j * d, d);
    }
    if (tk_ != nullptr) {
      if (absl::Status s = tk_->Forward(kb + j0, nk, w.rows.get(), d); !s.ok()) return s;
    }
    return std::make_pair(static_cast<const float*>(w.rows.get()), d);
  }

  // (Public: RunDecode drives these two.)
 public:
  // Decoding (split-KV, "flash decoding"): key rows [k0, k1) of sequence b for every kv
  // head, so a thread streams one contiguous range of the KV cache (all heads of each
  // token are adjacent in bshd/thd); the unnormalised state (m, l, o) of every (token,
  // head) row goes to partial[(chunk, token, head)], combined by CombineDecode.
  absl::Status RunDecodeItem(int64_t b, int64_t k0, int64_t k1, int64_t chunk, float* partial,
                             Workspace& w) const {
    const int64_t d = p_.d, dp = p_.dp, bk = p_.bk;
    const int64_t hq = a_.num_q_heads, group = hq / a_.num_kv_heads;
    const int64_t t0 = a_.q_begin(b), lq = a_.q_end(b) - t0, kb = a_.k_begin(b);
    const int64_t rows = hq * lq;  // row h * lq + r: head h, token t0 + r
    float* qb = w.qblk.get();
    for (int64_t h = 0; h < hq; ++h) {
      float* qh = qb + h * lq * d;
      for (int64_t r = 0; r < lq; ++r) LoadRow(q_ + a_.QOffset(a_.q, t0 + r, h), qh + r * d, d);
      if (tq_ != nullptr) {
        if (absl::Status s = tq_->Forward(t0, lq, qh, d); !s.ok()) return s;
      }
    }
    const float qscale = static_cast<float>(a_.scale() * kLog2e);
    for (int64_t i = 0; i < rows * d; ++i) qb[i] *= qscale;
    const int64_t* qpos = pq_.data() + t0;
    const int64_t qmin = *std::min_element(qpos, qpos + lq);
    const int64_t qmax = *std::max_element(qpos, qpos + lq);
    const float kNegInf = -std::numeric_limits<float>::infinity();
    std::fill(w.m.get(), w.m.get() + rows, kNegInf);
    std::fill(w.l.get(), w.l.get() + rows * kSumLanes, 0.0f);
    std::fill(w.oacc.get(), w.oacc.get() + rows * dp, 0.0f);
    // Blocks of db tokens (keys and values of every kv head about kDecodeBlockBytes):
    // the score tile of every head for one block stays in L1/L2 between the scores, the
    // softmax and P V.
    const int64_t hkv = a_.num_kv_heads;
    const int64_t row_bytes = 2 * hkv * d * static_cast<int64_t>(sizeof(T));
    const int64_t db = std::clamp<int64_t>(kDecodeBlockBytes / row_bytes / kVecPad * kVecPad,
                                           kVecPad, bk);
    for (int64_t j0 = k0; j0 < k1; j0 += db) {
      const int64_t nk = std::min(db, k1 - j0);
      KeyBlock kblk;
      kblk.b = b;
      kblk.nk = nk;
      kblk.kpos = pk_.data() + kb + j0;
      kblk.kmin = *std::min_element(kblk.kpos, kblk.kpos + nk);
      kblk.kmax = *std::max_element(kblk.kpos, kblk.kpos + nk);
      if (a_.causal && kblk.kmin > qmax) continue;
      kblk.sorted = std::is_sorted(kblk.kpos, kblk.kpos + nk);
      kblk.direct = true;
      kblk.ncols = RoundUp(nk, kVecPad);
      if constexpr (std::is_same_v<T, float>) {
        if (tk_ == nullptr && p_.direct_v) {
          // Keys and values as stored: scores of every kv head in token order (one
          // stream through the block's keys, which the hardware prefetchers follow),
          // then per kv head the masks and P V (value rows requested a few ahead).
          // Software prefetching of the keys and of the values during the scores was
          // measured slower: it filled the miss buffers the demand loads needed.
          float* s = w.s.get();
          const float* kblock = k_ + a_.KOffset(a_.k, kb + j0, 0);
          const float* vblock = v_ + a_.KOffset(a_.v, kb + j0, 0);
          const int64_t gr = group * lq;  // rows per kv head
          cpu::ScoreDecode(qb, d, gr, hkv, d, kblock, a_.k.token, a_.k.head, nk, s, bk,
                           Ahead(k_, a_.k, kb, j0, nk, k1));
          for (int64_t g = 0; g < hkv; ++g) {
            kblk.g = g;
            if (absl::Status st =
                    AdjustScores(kblk, g * group, group, qpos, lq, qmin, s + g * gr * bk, w);
                !st.ok()) {
              return st;
            }
          }
          cpu::SoftmaxTile(s, bk, rows, kblk.ncols, w.m.get(), w.l.get(), w.alpha.get());
          cpu::AccumulateDecode(s, bk, gr, hkv, nk, vblock, a_.v.token, a_.v.head, dp,
                                w.alpha.get(), w.oacc.get(), dp, Ahead(v_, a_.v, kb, j0, nk, k1));
          continue;
        }
      }
      for (int64_t g = 0; g < hkv; ++g) {
        kblk.g = g;
        auto keys = DirectKeys(g, kb, j0, nk, w);
        if (!keys.ok()) return keys.status();
        kblk.krows = keys->first;
        kblk.ldk = keys->second;
        CopyValues(g, kb, j0, nk, w, /*in_place=*/true);
        kblk.vals = w.values.get() + j0 * dp;
        if constexpr (std::is_same_v<T, float>) {
          if (p_.direct_v) kblk.vals = v_ + a_.KOffset(a_.v, kb + j0, g);
        }
        kblk.ldv = p_.direct_v ? a_.v.token : dp;
        // Every head of the group in one tile (rows g * group * lq ..): one pass over
        // the block's key and value rows.
        const int64_t r0 = g * group * lq;
        if (absl::Status st = TileStep(kblk, g * group, group, qb + r0 * d, qpos, lq, qmin,
                                       w.m.get() + r0, w.l.get() + r0 * kSumLanes,
                                       w.alpha.get() + r0, w.oacc.get() + r0 * dp, w);
            !st.ok()) {
          return st;
        }
      }
    }
    const int64_t nq = a_.num_q_tokens(), stride = dp + 2;
    for (int64_t h = 0; h < hq; ++h) {
      for (int64_t r = 0; r < lq; ++r) {
        const int64_t row = h * lq + r;
        float* out = partial + ((chunk * nq + t0 + r) * hq + h) * stride;
        float l = 0.0f;
        for (int64_t i = 0; i < kSumLanes; ++i) l += w.l[row * kSumLanes + i];
        out[0] = w.m[row];
        out[1] = l;
        std::memcpy(out + 2, w.oacc.get() + row * dp, static_cast<size_t>(dp) * sizeof(float));
      }
    }
    return absl::OkStatus();
  }

  // What the decode kernels request ahead (cpu::PrefetchAhead) while they read block
  // [j0, j0 + nk) of a key or value tensor, of the rows [.., k1) of the sequence starting
  // at kb:
  //  - token-major caches (bshd/thd without padding: every kv head of a token, then the
  //    next token, one contiguous range): the bytes kDecodePrefetchBytes past the block;
  //  - head-major caches (each kv head's rows contiguous, heads further apart, e.g. bhsd):
  //    the next block's rows of every head, head after head (the kernels walk heads
  //    outermost there: see cpu::ScoreDecode);
  // empty otherwise.
  cpu::PrefetchAhead Ahead(const T* x, const Strides& st, int64_t kb, int64_t j0, int64_t nk,
                           int64_t k1) const {
    const int64_t hkv = a_.num_kv_heads, d = p_.d, row = hkv * d;
    const int64_t size = static_cast<int64_t>(sizeof(T));
    if (st.head == d && st.token == row) {
      const char* end = reinterpret_cast<const char*>(x + a_.KOffset(st, kb + k1 - 1, 0) + row);
      const char* first = reinterpret_cast<const char*>(x + a_.KOffset(st, kb + j0, 0));
      const int64_t bytes = nk * row * size;
      if (end - first <= kDecodePrefetchBytes) return {};
      first += kDecodePrefetchBytes;
      return {first, std::min<int64_t>(bytes, end - first)};
    }
    if (st.token == d && st.head > d && j0 + nk < k1) {
      const int64_t next = std::min(nk, k1 - j0 - nk);
      return {x + a_.KOffset(st, kb + j0 + nk, 0), next * d * size, hkv, st.head * size};
    }
    return {};
  }

  // o and lse of every (token, head) from the chunks' states: M = max m_c,
  // l = sum l_c 2^(m_c - M), o = sum o_c 2^(m_c - M) / l (base-2 log domain).
  void CombineDecode(const float* partial, int64_t chunks) const {
    const int64_t hq = a_.num_q_heads, nq = a_.num_q_tokens(), d = p_.d, dp = p_.dp;
    const int64_t stride = dp + 2;
    const float kNegInf = -std::numeric_limits<float>::infinity();
    std::vector<float> acc(static_cast<size_t>(d));
    for (int64_t t = 0; t < nq; ++t) {
      for (int64_t h = 0; h < hq; ++h) {
        float mx = kNegInf;
        for (int64_t c = 0; c < chunks; ++c) {
          const float* st = partial + ((c * nq + t) * hq + h) * stride;
          if (st[1] > 0.0f) mx = std::max(mx, st[0]);
        }
        std::fill(acc.begin(), acc.end(), 0.0f);
        float l = 0.0f;
        if (mx != kNegInf) {
          for (int64_t c = 0; c < chunks; ++c) {
            const float* st = partial + ((c * nq + t) * hq + h) * stride;
            if (!(st[1] > 0.0f)) continue;
            const float f = std::exp2(st[0] - mx);
            l += f * st[1];
            for (int64_t e = 0; e < d; ++e) acc[e] += f * st[2 + e];
          }
        }
        const float inv = l > 0.0f ? 1.0f / l : 0.0f;
        for (int64_t e = 0; e < d; ++e) acc[e] *= inv;
        StoreRow(acc.data(), o_ + a_.QOffset(a_.o, t, h), d);
        if (lse_ != nullptr) {
          lse_[t * hq + h] =
              l > 0.0f ? static_cast<float>((static_cast<double>(mx) + std::log2(static_cast<double>(l))) * kLn2)
                       : kNegInf;
        }
      }
    }
  }


 private:
  // One key block as the tiles see it.
  struct KeyBlock {
    int64_t b = 0, g = 0, nk = 0;
    const int64_t* kpos = nullptr;
    int64_t kmin = 0, kmax = 0;
    bool sorted = false;
    bool direct = false;             // scores from key rows (krows, ldk) or panels
    const float* krows = nullptr;
    int64_t ldk = 0;
    const float* panels = nullptr;
    int64_t num_panels = 0;
    int64_t ncols = 0;               // score columns (padding masked)
    const float* vals = nullptr;     // value rows of the block
    int64_t ldv = 0;
    const uint16_t* panels16 = nullptr;  // bf16 dot-product path (else null)
    const uint16_t* pairs16 = nullptr;
  };

  // One query tile (nr tokens of each of the nh heads h .. h + nh - 1, row hi * nr + r
  // for head h + hi and token r: scaled rotated q rows, positions tpos of the nr tokens,
  // smallest pmin) against one key block: scores, locality, bias, mask, online softmax,
  // O += P V. Several heads share a tile only in direct (decoding) mode, where the heads
  // of a group then share every load of a key and value row. qlab / vmass (Shaw labels,
  // null without): the tile rows' key-label dot products and value-label probability
  // mass (p_.nlk / p_.nlv per row, in the tile's row order).
  absl::Status TileStep(const KeyBlock& kb, int64_t h, int64_t nh, const float* qrows,
                        const int64_t* tpos, int64_t nr, int64_t pmin, float* m, float* l,
                        float* alpha, float* oacc, Workspace& w,
                        const uint16_t* q16 = nullptr, const float* qlab = nullptr,
                        float* vmass = nullptr) const {
    const int64_t d = p_.d, dp = p_.dp, bk = p_.bk, nk = kb.nk;
    const int64_t rows = nh * nr;
    float* s = w.s.get();
    if (kb.panels16 != nullptr) {
      cpu::ScoreTileBf16(q16, RoundUp(d, 2), rows, d, kb.panels16, kb.num_panels, s, bk);
    } else if (kb.direct) {
      cpu::ScoreDirect(qrows, d, rows, d, kb.krows, kb.ldk, nk, s, bk);
    } else {
      cpu::ScoreTile(qrows, d, rows, d, kb.panels, kb.num_panels, s, bk);
    }
    if (qlab != nullptr) {  // + <q'_i, aK_r(i,j)> (q rows carry scale log2 e), gathered
      for (int64_t r = 0; r < rows; ++r) {
        float* sr = s + r * bk;
        const float* ql = qlab + r * p_.ldl;
        const int64_t one = BlockLabel(tpos[r % nr], kb.kmin, kb.kmax, shaw_.k.kmax);
        if (one >= 0) {
          const float c = ql[one];
          for (int64_t j = 0; j < nk; ++j) sr[j] += c;
          continue;
        }
        for (int64_t j = 0; j < nk; ++j) {
          sr[j] += ql[encodings::sequence::ShawRelative::LabelIndex(tpos[r % nr], kb.kpos[j],
                                                                   shaw_.k.kmax)];
        }
      }
    }
    if (absl::Status st = AdjustScores(kb, h, nh, tpos, nr, pmin, s, w); !st.ok()) return st;
    if (kb.pairs16 != nullptr) {  // softmax with the probabilities rounded to bf16 in one pass
      cpu::SoftmaxRoundTileBf16(s, bk, rows, kb.ncols, m, l, alpha, w.p16.get(), bk,
                                /*keep_float=*/vmass != nullptr);
    } else {
      cpu::SoftmaxTile(s, bk, rows, kb.ncols, m, l, alpha);
    }
    if (vmass != nullptr) {  // per-label probability mass, rescaled like o (alpha)
      const int64_t nl = p_.nlv;
      for (int64_t r = 0; r < rows; ++r) {
        float* vm = vmass + r * nl;
        const float* pr = s + r * bk;
        for (int64_t t = 0; t < nl; ++t) vm[t] *= alpha[r];
        const int64_t one = BlockLabel(tpos[r % nr], kb.kmin, kb.kmax, shaw_.v.kmax);
        if (one >= 0) {
          float sum = 0.0f;
          for (int64_t j = 0; j < nk; ++j) sum += pr[j];
          vm[one] += sum;
          continue;
        }
        for (int64_t j = 0; j < nk; ++j) {
          vm[encodings::sequence::ShawRelative::LabelIndex(tpos[r % nr], kb.kpos[j], shaw_.v.kmax)] +=
              pr[j];
        }
      }
    }
    if (kb.pairs16 != nullptr) {  // bf16 probabilities (above) for the dot products
      cpu::AccumulateTileBf16(w.p16.get(), bk, rows, nk, kb.pairs16, dp, alpha, oacc, dp);
    } else {
      cpu::AccumulateTile(s, bk, rows, nk, kb.vals, kb.ldv, dp, alpha, oacc, dp);
    }
    return absl::OkStatus();
  }

  // The scores s (rows hi * nr + r as in TileStep, stride bk) of one key block made
  // final: locality factors, additive biases (log2 e times), the causal mask and -inf
  // past the block's keys up to kb.ncols.
  absl::Status AdjustScores(const KeyBlock& kb, int64_t h, int64_t nh, const int64_t* tpos,
                            int64_t nr, int64_t pmin, float* s, Workspace& w) const {
    const int64_t bk = p_.bk, nk = kb.nk;
    const int64_t rows = nh * nr;
    const float kNegInf = -std::numeric_limits<float>::infinity();
    if (a_.locality.has_value()) {
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t j = 0; j < nk; ++j) {
          auto f = encodings::sequence::LocalityFactor(Distance(tpos[r % nr], kb.kpos[j]),
                                                       *a_.locality);
          if (!f.ok()) return f.status();
          s[r * bk + j] *= static_cast<float>(*f);
        }
      }
    }
    const encodings::sequence::AdditiveBias* bias =
        a_.biases.empty() ? nullptr : (a_.biases.size() == 1 ? a_.biases[0] : a_.biases[kb.b]);
    if (bias != nullptr) {
      float* bt = w.bias.get();
      const float c = static_cast<float>(kLog2e);
      for (int64_t hi = 0; hi < nh; ++hi) {
        if (absl::Status st =
                FillBias(*bias, h + hi, tpos, nr, kb.kpos, nk, bt, bk, &w.bias_scratch);
            !st.ok()) {
          return st;
        }
        for (int64_t r = 0; r < nr; ++r) {
          float* sr = s + (hi * nr + r) * bk;
          const float* br = bt + r * bk;
          for (int64_t j = 0; j < nk; ++j) sr[j] += c * br[j];
        }
      }
    }
    if (a_.causal && kb.kmax > pmin) {  // some pair in the future
      for (int64_t r = 0; r < rows; ++r) {
        float* sr = s + r * bk;
        const int64_t pos = tpos[r % nr];
        if (kb.sorted) {  // the future is a suffix of the block
          const int64_t first = std::upper_bound(kb.kpos, kb.kpos + nk, pos) - kb.kpos;
          std::fill(sr + first, sr + nk, kNegInf);
        } else {
          for (int64_t j = 0; j < nk; ++j) {
            if (kb.kpos[j] > pos) sr[j] = kNegInf;
          }
        }
      }
    }
    if (nk < kb.ncols) {
      for (int64_t r = 0; r < rows; ++r) std::fill(s + r * bk + nk, s + r * bk + kb.ncols, kNegInf);
    }
    return absl::OkStatus();
  }

  // Query rows [t0, t0 + mq) (token indices) of heads [h0, h0 + nh) (nh * mq <= rows)
  // against every allowed key block: key blocks outer, query tiles of up to bq rows of
  // one head inner (one L2 load of each key block per pass, shared by the group's heads),
  // online-softmax state per row. Buffer row hi * mq + r is head h0 + hi, token t0 + r.
  absl::Status QueryRows(const Item& it, int64_t h0, int64_t nh, int64_t t0, int64_t mq,
                         int64_t kb, int64_t lk, bool direct, Workspace& w) const {
    const int64_t d = p_.d, dp = p_.dp, bk = p_.bk, bq = p_.bq;
    const int64_t rows = nh * mq;
    float* qb = w.qblk.get();
    for (int64_t hi = 0; hi < nh; ++hi) {
      float* qh = qb + hi * mq * d;
      for (int64_t r = 0; r < mq; ++r) LoadRow(q_ + a_.QOffset(a_.q, t0 + r, h0 + hi), qh + r * d, d);
      if (tq_ != nullptr) {
        if (absl::Status s = tq_->Forward(t0, mq, qh, d); !s.ok()) return s;
      }
    }
    const float qscale = static_cast<float>(a_.scale() * kLog2e);
    for (int64_t i = 0; i < rows * d; ++i) qb[i] *= qscale;
    if (p_.nlk > 0) LabelDots(qb, d, rows, d, shaw_.k, w.qlab.data(), p_.ldl);
    std::fill(w.vmass.begin(), w.vmass.end(), 0.0f);
    if (p_.bf16_dot && !direct) {  // rows rounded to bf16, padded to even length
      const int64_t deven = RoundUp(d, 2);
      for (int64_t r = 0; r < rows; ++r) {
        uint16_t* out = w.q16.get() + r * deven;
        cpu::RoundBf16Row(qb + r * d, out, d);
        if (deven > d) out[d] = 0;
      }
    }
    const int64_t* qpos = pq_.data() + t0;
    // Tiles: up to bq rows of one head; their position ranges (causal skipping, masks).
    struct Tile {
      int64_t head, row, n, pmin, pmax;  // row: first buffer row; positions of its tokens
    };
    Tile tile[kPassRows];
    int64_t tiles = 0;
    for (int64_t hi = 0; hi < nh; ++hi) {
      for (int64_t r0 = 0; r0 < mq; r0 += bq) {
        const int64_t n = std::min(bq, mq - r0);
        tile[tiles++] = {h0 + hi, hi * mq + r0, n, *std::min_element(qpos + r0, qpos + r0 + n),
                         *std::max_element(qpos + r0, qpos + r0 + n)};
      }
    }
    int64_t qmax = std::numeric_limits<int64_t>::min();
    for (int64_t t = 0; t < tiles; ++t) qmax = std::max(qmax, tile[t].pmax);
    const float kNegInf = -std::numeric_limits<float>::infinity();
    std::fill(w.m.get(), w.m.get() + rows, kNegInf);
    std::fill(w.l.get(), w.l.get() + rows * kSumLanes, 0.0f);
    std::fill(w.oacc.get(), w.oacc.get() + rows * dp, 0.0f);
    const int64_t blocks = (lk + bk - 1) / bk;
    for (int64_t blk = 0; blk < blocks; ++blk) {
      if (a_.causal && w.kmin[blk] > qmax) continue;  // entirely in every row's future
      const int64_t j0 = blk * bk, nk = std::min(bk, lk - j0);
      const int64_t* kpos = pk_.data() + kb + j0;
      const float* krows = nullptr;
      int64_t ldk = 0, ncols = 0;
      const float* panels = w.panels.get() + blk * bk * d;
      int64_t num_panels = 0;
      if (direct) {
        auto keys = DirectKeys(it.g, kb, j0, nk, w);
        if (!keys.ok()) return keys.status();
        krows = keys->first;
        ldk = keys->second;
        CopyValues(it.g, kb, j0, nk, w, /*in_place=*/true);
        ncols = RoundUp(nk, kVecPad);
      } else {
        if (!w.packed[blk]) {
          if (absl::Status st = PackBlock(it.g, kb, lk, blk, w); !st.ok()) return st;
        }
        num_panels = (nk + kPanel - 1) / kPanel;
        ncols = num_panels * kPanel;
      }
      KeyBlock kblk;
      kblk.b = it.b;
      kblk.g = it.g;
      kblk.nk = nk;
      kblk.kpos = kpos;
      kblk.kmin = w.kmin[blk];
      kblk.kmax = w.kmax[blk];
      kblk.sorted = w.ksorted[blk];
      kblk.direct = direct;
      kblk.krows = krows;
      kblk.ldk = ldk;
      kblk.panels = panels;
      kblk.num_panels = num_panels;
      kblk.ncols = ncols;
      kblk.vals = w.values.get() + j0 * dp;
      kblk.ldv = dp;
      if constexpr (std::is_same_v<T, float>) {
        if (direct && p_.direct_v) {
          kblk.vals = v_ + a_.KOffset(a_.v, kb + j0, it.g);
          kblk.ldv = a_.v.token;
        }
      }
      if (p_.bf16_dot && !direct) {
        kblk.panels16 = w.panels16.get() + blk * bk * RoundUp(d, 2);
        kblk.pairs16 = w.pairs16.get() + j0 * dp;
      }
      if (direct && tiles == nh) {  // one tile per head: every head in one TileStep
        int64_t pmin = tile[0].pmin, pmax = tile[0].pmax;
        for (int64_t t = 1; t < tiles; ++t) {
          pmin = std::min(pmin, tile[t].pmin);
          pmax = std::max(pmax, tile[t].pmax);
        }
        if (a_.causal && kblk.kmin > pmax) continue;
        if (absl::Status st = TileStep(kblk, h0, nh, qb, qpos, mq, pmin, w.m.get(), w.l.get(),
                                       w.alpha.get(), w.oacc.get(), w, nullptr,
                                       p_.nlk > 0 ? w.qlab.data() : nullptr,
                                       p_.nlv > 0 ? w.vmass.data() : nullptr);
            !st.ok()) {
          return st;
        }
        continue;
      }
      for (int64_t t = 0; t < tiles; ++t) {
        if (a_.causal && kblk.kmin > tile[t].pmax) continue;
        const int64_t r0 = tile[t].row, h = tile[t].head;
        const int64_t* tpos = qpos + (r0 - (h - h0) * mq);
        const uint16_t* q16 = p_.bf16_dot && !direct ? w.q16.get() + r0 * RoundUp(d, 2) : nullptr;
        if (absl::Status st = TileStep(
                kblk, h, 1, qb + r0 * d, tpos, tile[t].n, tile[t].pmin, w.m.get() + r0,
                w.l.get() + r0 * kSumLanes, w.alpha.get() + r0, w.oacc.get() + r0 * dp, w, q16,
                p_.nlk > 0 ? w.qlab.data() + r0 * p_.ldl : nullptr,
                p_.nlv > 0 ? w.vmass.data() + r0 * p_.nlv : nullptr);
            !st.ok()) {
          return st;
        }
      }
    }
    // Shaw value labels: o_i += sum_r (mass of row i on label r) aV_r (unnormalised).
    if (p_.nlv > 0) {
      AddLabelRows(w.vmass.data(), p_.nlv, rows, p_.nlv, shaw_.v, dp, w.lab_ones.data(),
                   w.oacc.get(), dp);
    }
    for (int64_t row = 0; row < rows; ++row) {
      const int64_t h = h0 + row / mq, r = row % mq;
      T* out = o_ + a_.QOffset(a_.o, t0 + r, h);
      float* acc = w.oacc.get() + row * dp;
      float l = 0.0f;
      for (int64_t i = 0; i < kSumLanes; ++i) l += w.l[row * kSumLanes + i];
      const float inv = l > 0.0f ? 1.0f / l : 0.0f;  // no allowed key: o = 0
      for (int64_t c = 0; c < d; ++c) acc[c] *= inv;
      StoreRow(acc, out, d);
      if (lse_ != nullptr) {
        lse_[(t0 + r) * a_.num_q_heads + h] =
            l > 0.0f ? static_cast<float>((static_cast<double>(w.m[row]) + std::log2(static_cast<double>(l))) * kLn2)
                     : kNegInf;
      }
    }
    return absl::OkStatus();
  }

  const AttentionArgs& a_;
  const Plan& p_;
  const T *q_, *k_, *v_;
  T* o_;
  float* lse_;
  std::vector<int64_t> pq_, pk_;
  std::unique_ptr<PreparedRowTransform> tq_, tk_;
  ShawTables shaw_;
};


// ---------------------------------------------------------------------------------
// Backward (FlashAttention-2's, Dao 2023, Alg. 2): per key block, recompute S and
// P = exp2(S - lse2) for every allowed query tile, then dV += P^T dO, dP = dO V^T,
// dS = P (dP - D) with D = rowsum(dO o), dK += dS^T Q, dQ += dS K.

// Items of the backward: key rows [k0, k1) of sequence b, kv head g.
struct KeyItem {
  int64_t b, g, k0, k1, chunk;
  double cost;
};

struct BackwardPlan {
  std::vector<KeyItem> items;
  int64_t chunks = 1;  // key chunks per (sequence, kv head): dq partial sums kept apart
};

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

struct BackwardWorkspace {
  // Per item: the sequence's queries of the group, transformed and scaled (Qs), dO, the
  // base-2 log-sum-exp and D, each [lq][group][.]; per key block: key rows, key and value
  // panels, dK and dV accumulators; per tile: S/P, dP (then dS in place), bias, locality.
  hwy::AlignedFreeUniquePtr<float[]> qs, dout, lse2, dsum, krows, kpanels, vpanels, dk, dv,
      s, dp, bias, loc, shift;
  std::vector<double> grad;  // bias-gradient tile for the sink
  BiasScratch bias_scratch;
  // Shaw labels per query row of the item ([lq][group][labels]): key-label dots of Qs and
  // value-label dots of dO (stride ldl), the per-label sums of dS (keys) and P (values).
  std::vector<float> qlab, dolab, kmass, pmass, lab_ones;

  static int64_t Floats(const Plan& p, int64_t max_lq, int64_t group) {
    const int64_t qn = max_lq * group;
    return 2 * qn * p.dp + 2 * qn + 3 * p.bk * p.dp + 2 * p.bk * p.d + 4 * p.bq * p.bk +
           std::max(p.bq, p.bk) + qn * (2 * p.ldl + p.nlk + p.nlv) + (p.nlk > 0 ? max_lq : 0);
  }

  BackwardWorkspace(const Plan& p, int64_t max_lq, int64_t group) {
    auto alloc = [](int64_t n) { return hwy::AllocateAligned<float>(std::max<int64_t>(n, 1)); };
    const int64_t qn = max_lq * group;
    qs = alloc(qn * p.dp);
    dout = alloc(qn * p.dp);
    lse2 = alloc(qn);
    dsum = alloc(qn);
    krows = alloc(p.bk * p.dp);
    kpanels = alloc(p.bk * p.d);
    vpanels = alloc(p.bk * p.d);
    dk = alloc(p.bk * p.dp);
    dv = alloc(p.bk * p.dp);
    s = alloc(p.bq * p.bk);
    dp = alloc(p.bq * p.bk);
    bias = alloc(p.bq * p.bk);
    loc = alloc(p.bq * p.bk);
    const int64_t m = std::max(p.bq, p.bk);
    shift = alloc(m);
    qlab.resize(static_cast<size_t>(p.nlk > 0 ? qn * p.ldl : 0));
    kmass.resize(static_cast<size_t>(qn * p.nlk));
    dolab.resize(static_cast<size_t>(p.nlv > 0 ? qn * p.ldl : 0));
    pmass.resize(static_cast<size_t>(qn * p.nlv));
    lab_ones.assign(static_cast<size_t>(p.nlk > 0 ? max_lq : 0), 1.0f);
  }
};

template <class T>
class Backward {
 public:
  Backward(const AttentionArgs& a, const Plan& p, const T* q, const T* k, const T* v,
           const T* o, const float* lse, const T* d_o, T* dk, T* dv,
           float* dq_acc, int64_t chunk_stride, const BiasGradientSink& sink, std::mutex* sink_mu,
           float* dk_rotated)
      : a_(a), p_(p), q_(q), k_(k), v_(v), o_(o), lse_(lse), do_(d_o), dk_(dk), dv_(dv),
        dq_acc_(dq_acc), chunk_stride_(chunk_stride), nq_(a.num_q_tokens()), sink_(sink),
        sink_mu_(sink_mu), dk_rot_(dk_rotated) {}

  absl::Status Prepare() {
    shaw_ = MakeShawTables(a_, p_);
    return PrepareEncodings(a_, &pq_, &pk_, &tq_, &tk_);
  }

  // dL/daK and dL/daV (Shaw tables, [labels][d], zeroed by the caller; null to skip):
  // each item adds its rows' share under `mu`.
  void SetShawGradients(double* gak, double* gav, std::mutex* mu) {
    gak_ = gak;
    gav_ = gav;
    shaw_mu_ = mu;
  }

  const PreparedRowTransform* q_transform() const { return tq_.get(); }

  absl::Status RunItem(const KeyItem& it, BackwardWorkspace& w) const {
    const int64_t d = p_.d, dp = p_.dp, bk = p_.bk, bq = p_.bq;
    const int64_t group = a_.num_q_heads / a_.num_kv_heads, hq = a_.num_q_heads;
    const int64_t qb = a_.q_begin(it.b), lq = a_.q_end(it.b) - qb;
    const int64_t kb = a_.k_begin(it.b);
    const int64_t ld = group * dp;  // row stride of one head in qs / dout
    const float scale = static_cast<float>(a_.scale());
    const float log2e = static_cast<float>(kLog2e);
    // The group's queries: q' scale log2(e), dO, lse log2(e), D = rowsum(dO o).
    std::fill(w.qs.get(), w.qs.get() + lq * ld, 0.0f);
    std::fill(w.dout.get(), w.dout.get() + lq * ld, 0.0f);
    for (int64_t hi = 0; hi < group; ++hi) {
      const int64_t h = it.g * group + hi;
      for (int64_t r = 0; r < lq; ++r) {
        float* qrow = w.qs.get() + r * ld + hi * dp;
        float* drow = w.dout.get() + r * ld + hi * dp;
        const T* orow = o_ + a_.QOffset(a_.o, qb + r, h);
        LoadRow(q_ + a_.QOffset(a_.q, qb + r, h), qrow, d);
        LoadRow(do_ + a_.QOffset(a_.o, qb + r, h), drow, d);
        float dsum = 0.0f;
        for (int64_t c = 0; c < d; ++c) dsum += drow[c] * ToF(orow[c]);
        w.dsum[r * group + hi] = dsum;
        const float l = lse_[(qb + r) * hq + h];
        w.lse2[r * group + hi] = l * log2e;  // -inf stays -inf
      }
      if (tq_ != nullptr && lq > 0) {
        if (absl::Status st = tq_->Forward(qb, lq, w.qs.get() + hi * dp, ld); !st.ok()) return st;
      }
    }
    const float qscale = scale * log2e;
    for (int64_t i = 0; i < lq * ld; ++i) w.qs[i] *= qscale;
    // Shaw labels: row r * group + hi of qs / dout is (token qb + r, head hi), stride dp.
    const int64_t nlk = p_.nlk, nlv = p_.nlv, ldl = p_.ldl;
    if (nlk > 0) {
      LabelDots(w.qs.get(), dp, lq * group, d, shaw_.k, w.qlab.data(), ldl);
      std::fill(w.kmass.begin(), w.kmass.begin() + lq * group * nlk, 0.0f);
    }
    if (nlv > 0) {
      LabelDots(w.dout.get(), dp, lq * group, d, shaw_.v, w.dolab.data(), ldl);
      std::fill(w.pmass.begin(), w.pmass.begin() + lq * group * nlv, 0.0f);
    }
    using encodings::sequence::ShawRelative;
    const encodings::sequence::AdditiveBias* bias =
        a_.biases.empty() ? nullptr : (a_.biases.size() == 1 ? a_.biases[0] : a_.biases[it.b]);
    const float kNegInf = -std::numeric_limits<float>::infinity();
    // The first query tile a key block with smallest position kmin computes (causal
    // skips the tiles wholly before it): where the next tile's prefetch goes at a wrap.
    auto first_tile = [&](int64_t kmin) -> int64_t {
      if (!a_.causal) return 0;
      for (int64_t r0 = 0; r0 < lq; r0 += bq) {
        const int64_t* qpos = pq_.data() + qb + r0;
        if (*std::max_element(qpos, qpos + std::min(bq, lq - r0)) >= kmin) return r0;
      }
      return 0;
    };
    for (int64_t j0 = it.k0; j0 < it.k1; j0 += bk) {
      const int64_t nk = std::min(bk, it.k1 - j0);
      const int64_t panels = (nk + kPanel - 1) / kPanel, ncols = panels * kPanel;
      const int64_t* kpos = pk_.data() + kb + j0;
      const int64_t kmin = *std::min_element(kpos, kpos + nk);
      const int64_t kmax = *std::max_element(kpos, kpos + nk);
      const int64_t first_r0 = first_tile(kmin);
      int64_t next_first_r0 = 0;
      if (j0 + bk < it.k1) {
        const int64_t* next = kpos + bk;
        next_first_r0 = first_tile(*std::min_element(next, next + std::min(bk, it.k1 - j0 - bk)));
      }
      const bool ksorted = std::is_sorted(kpos, kpos + nk);
      // Key rows (transformed, padded), their panels, and the value panels.
      for (int64_t j = 0; j < nk; ++j) {
        float* row = w.krows.get() + j * dp;
        LoadRow(k_ + a_.KOffset(a_.k, kb + j0 + j, it.g), row, d);
        std::fill(row + d, row + dp, 0.0f);
      }
      if (tk_ != nullptr) {
        if (absl::Status st = tk_->Forward(kb + j0, nk, w.krows.get(), dp); !st.ok()) return st;
      }
      cpu::PackKeyPanels(w.krows.get(), nk, dp, d, w.kpanels.get());
      if constexpr (std::is_same_v<T, float>) {
        cpu::PackKeyPanels(v_ + a_.KOffset(a_.v, kb + j0, it.g), nk, a_.v.token, d,
                           w.vpanels.get());
      } else {  // widened through dv's buffer, which is cleared next
        for (int64_t j = 0; j < nk; ++j) {
          LoadRow(v_ + a_.KOffset(a_.v, kb + j0 + j, it.g), w.dv.get() + j * dp, d);
        }
        cpu::PackKeyPanels(w.dv.get(), nk, dp, d, w.vpanels.get());
      }
      std::fill(w.dk.get(), w.dk.get() + nk * dp, 0.0f);
      std::fill(w.dv.get(), w.dv.get() + nk * dp, 0.0f);
      for (int64_t hi = 0; hi < group; ++hi) {
        const int64_t h = it.g * group + hi;
        for (int64_t r0 = 0; r0 < lq; r0 += bq) {
          const int64_t nr = std::min(bq, lq - r0);
          const int64_t* qpos = pq_.data() + qb + r0;
          const int64_t qmin = *std::min_element(qpos, qpos + nr);
          const int64_t qmax = *std::max_element(qpos, qpos + nr);
          if (a_.causal && kmin > qmax) continue;  // the whole tile is in the future
          const float* qrows = w.qs.get() + r0 * ld + hi * dp;
          const float* drows = w.dout.get() + r0 * ld + hi * dp;
          // The next tile's rows of Qs and dO (requested during S = Q K^T) and of dQ'
          // (during dP = dO V^T): next in this loop's order, or the first computed one of
          // the next head or key block. Read a tile later from cache rather than memory.
          cpu::PrefetchRows ahead_q, ahead_dq;
          {
            int64_t nhi = hi, nr0 = r0 + bq;
            if (nr0 >= lq) {
              nhi = hi + 1 < group ? hi + 1 : 0;
              nr0 = hi + 1 < group ? first_r0 : next_first_r0;
            }
            const int64_t rows = std::min(bq, lq - nr0);
            ahead_q.num = 2;
            ahead_q.base[0] = w.qs.get() + nr0 * ld + nhi * dp;
            ahead_q.base[1] = w.dout.get() + nr0 * ld + nhi * dp;
            ahead_q.rows = rows;
            ahead_q.ld = ld;
            ahead_q.row_floats = d;
            ahead_dq.num = 1;
            ahead_dq.base[0] = dq_acc_ + it.chunk * chunk_stride_ + ((it.g * group + nhi) * nq_ + qb + nr0) * dp;
            ahead_dq.rows = rows;
            ahead_dq.ld = dp;
            ahead_dq.row_floats = d;
          }
          float* s = w.s.get();
          cpu::ScoreTileAhead(qrows, ld, nr, d, w.kpanels.get(), panels, s, bk, ahead_q);
          if (nlk > 0) {  // + <Qs_i, aK_r(i,j)>, as the forward
            for (int64_t r = 0; r < nr; ++r) {
              const float* ql = w.qlab.data() + ((r0 + r) * group + hi) * ldl;
              const int64_t one = BlockLabel(qpos[r], kmin, kmax, shaw_.k.kmax);
              for (int64_t j = 0; j < nk; ++j) {
                s[r * bk + j] +=
                    ql[one >= 0 ? one : ShawRelative::LabelIndex(qpos[r], kpos[j], shaw_.k.kmax)];
              }
            }
          }
          if (a_.locality.has_value()) {
            for (int64_t r = 0; r < nr; ++r) {
              for (int64_t j = 0; j < nk; ++j) {
                auto f = encodings::sequence::LocalityFactor(Distance(qpos[r], kpos[j]), *a_.locality);
                if (!f.ok()) return f.status();
                w.loc[r * bk + j] = static_cast<float>(*f);
                s[r * bk + j] *= w.loc[r * bk + j];
              }
            }
          }
          if (bias != nullptr) {
            if (absl::Status st =
                    FillBias(*bias, h, qpos, nr, kpos, nk, w.bias.get(), bk, &w.bias_scratch);
                !st.ok()) {
              return st;
            }
            for (int64_t r = 0; r < nr; ++r) {
              for (int64_t j = 0; j < nk; ++j) s[r * bk + j] += log2e * w.bias[r * bk + j];
            }
          }
          if (a_.causal && kmax > qmin) {
            for (int64_t r = 0; r < nr; ++r) {
              float* sr = s + r * bk;
              if (ksorted) {
                const int64_t first = std::upper_bound(kpos, kpos + nk, qpos[r]) - kpos;
                std::fill(sr + first, sr + nk, kNegInf);
              } else {
                for (int64_t j = 0; j < nk; ++j) {
                  if (kpos[j] > qpos[r]) sr[j] = kNegInf;
                }
              }
            }
          }
          for (int64_t r = 0; r < nr; ++r) {
            std::fill(s + r * bk + nk, s + r * bk + ncols, kNegInf);
            w.shift[r] = w.lse2[(r0 + r) * group + hi];
          }
          cpu::ExpTile(s, bk, nr, ncols, w.shift.get());  // P
          if (nlv > 0 && gav_ != nullptr) {  // per-label P mass for dL/daV
            for (int64_t r = 0; r < nr; ++r) {
              float* pm = w.pmass.data() + ((r0 + r) * group + hi) * nlv;
              const int64_t one = BlockLabel(qpos[r], kmin, kmax, shaw_.v.kmax);
              if (one >= 0) {
                float sum = 0.0f;
                for (int64_t j = 0; j < nk; ++j) sum += s[r * bk + j];
                pm[one] += sum;
                continue;
              }
              for (int64_t j = 0; j < nk; ++j) {
                pm[ShawRelative::LabelIndex(qpos[r], kpos[j], shaw_.v.kmax)] += s[r * bk + j];
              }
            }
          }
          // dV += P^T dO.
          cpu::AccumulateTileTAdd(s, bk, nk, nr, drows, ld, dp, w.dv.get(), dp);
          // dP = dO V^T; dS = P (dP - D) (the gradient of the natural-log score).
          float* dpt = w.dp.get();
          cpu::ScoreTileAhead(drows, ld, nr, d, w.vpanels.get(), panels, dpt, bk, ahead_dq);
          if (nlv > 0) {  // dP_ij = <dO_i, v_j + aV_r(i,j)>
            for (int64_t r = 0; r < nr; ++r) {
              const float* dl = w.dolab.data() + ((r0 + r) * group + hi) * ldl;
              const int64_t one = BlockLabel(qpos[r], kmin, kmax, shaw_.v.kmax);
              for (int64_t j = 0; j < nk; ++j) {
                dpt[r * bk + j] +=
                    dl[one >= 0 ? one : ShawRelative::LabelIndex(qpos[r], kpos[j], shaw_.v.kmax)];
              }
            }
          }
          // dS over dP's buffer (one tile less in L2; dP is not needed after).
          float* ds = dpt;
          for (int64_t r = 0; r < nr; ++r) w.shift[r] = w.dsum[(r0 + r) * group + hi];
          cpu::SoftmaxGradTile(s, bk, ds, bk, nr, ncols, w.shift.get());
          if (sink_) {
            std::vector<double>& g = w.grad;
            g.resize(static_cast<size_t>(nr * nk));
            for (int64_t r = 0; r < nr; ++r) {
              for (int64_t j = 0; j < nk; ++j) g[r * nk + j] = ds[r * bk + j];
            }
            std::lock_guard<std::mutex> lock(*sink_mu_);
            if (absl::Status st = sink_(it.b, h, absl::MakeConstSpan(qpos, nr),
                                        absl::MakeConstSpan(kpos, nk), g.data(), nk);
                !st.ok()) {
              return st;
            }
          }
          if (a_.locality.has_value()) {
            for (int64_t r = 0; r < nr; ++r) {
              for (int64_t j = 0; j < nk; ++j) ds[r * bk + j] *= w.loc[r * bk + j];
            }
          }
          if (nlk > 0) {  // per-label dS mass: dQ' and dL/daK at the end of the item
            for (int64_t r = 0; r < nr; ++r) {
              float* km = w.kmass.data() + ((r0 + r) * group + hi) * nlk;
              const int64_t one = BlockLabel(qpos[r], kmin, kmax, shaw_.k.kmax);
              if (one >= 0) {
                float sum = 0.0f;
                for (int64_t j = 0; j < nk; ++j) sum += ds[r * bk + j];
                km[one] += sum;
                continue;
              }
              for (int64_t j = 0; j < nk; ++j) {
                km[ShawRelative::LabelIndex(qpos[r], kpos[j], shaw_.k.kmax)] += ds[r * bk + j];
              }
            }
          }
          // dQ' += dS K (times scale at the end); dK' += dS^T Qs (Qs carries scale log2 e).
          float* dq = dq_acc_ + it.chunk * chunk_stride_ + (h * nq_ + qb + r0) * dp;
          cpu::AccumulateTileAdd(ds, bk, nr, nk, w.krows.get(), dp, dp, dq, dp);
          cpu::AccumulateTileTAdd(ds, bk, nk, nr, qrows, ld, dp, w.dk.get(), dp);
        }
      }
      // dK = T^T (dK' / log2 e), dV as is.
      const float unscale = static_cast<float>(1.0 / kLog2e);
      for (int64_t i = 0; i < nk * dp; ++i) w.dk[i] *= unscale;
      if (dk_rot_ != nullptr) {
        for (int64_t j = 0; j < nk; ++j) {
          std::memcpy(dk_rot_ + a_.KOffset(a_.k, kb + j0 + j, it.g), w.dk.get() + j * dp,
                      static_cast<size_t>(d) * sizeof(float));
        }
      }
      if (tk_ != nullptr) {
        if (absl::Status st = tk_->Backward(kb + j0, nk, w.dk.get(), dp); !st.ok()) return st;
      }
      for (int64_t j = 0; j < nk; ++j) {
        if (dk_ != nullptr) StoreRow(w.dk.get() + j * dp, dk_ + a_.KOffset(a_.k, kb + j0 + j, it.g), d);
        if (dv_ != nullptr) StoreRow(w.dv.get() + j * dp, dv_ + a_.KOffset(a_.v, kb + j0 + j, it.g), d);
      }
    }
    if (nlk > 0 || nlv > 0) ShawItemGradients(it, lq, w);
    return absl::OkStatus();
  }

 private:
  // Shaw labels at the end of an item, from its rows' per-label sums (descriptor.h):
  // dQ'_i += sum_r M_ir aK_r (scaled with the rest of dQ' later), dL/daK_r +=
  // sum_i M_ir Qs_i / log2 e (= scale sum_i M_ir q'_i), dL/daV_r += sum_i P_ir dO_i.
  void ShawItemGradients(const KeyItem& it, int64_t lq, BackwardWorkspace& w) const {
    const int64_t d = p_.d, dp = p_.dp, nlk = p_.nlk, nlv = p_.nlv;
    const int64_t group = a_.num_q_heads / a_.num_kv_heads;
    const int64_t qb = a_.q_begin(it.b);
    std::vector<double> gk(static_cast<size_t>(gak_ != nullptr ? nlk * d : 0), 0.0);
    std::vector<double> gv(static_cast<size_t>(gav_ != nullptr ? nlv * d : 0), 0.0);
    const double unscale = 1.0 / kLog2e;
    // dQ'_i += sum_r M_ir aK_r, head by head (rows r * group + hi of kmass).
    for (int64_t hi = 0; hi < group && nlk > 0; ++hi) {
      float* dq = dq_acc_ + it.chunk * chunk_stride_ + ((it.g * group + hi) * nq_ + qb) * dp;
      AddLabelRows(w.kmass.data() + hi * nlk, group * nlk, lq, nlk, shaw_.k, dp,
                   w.lab_ones.data(), dq, dp);
    }
    for (int64_t r = 0; r < lq; ++r) {
      for (int64_t hi = 0; hi < group; ++hi) {
        const int64_t row = r * group + hi;
        if (!gk.empty()) {
          const float* km = w.kmass.data() + row * nlk;
          const float* qs = w.qs.get() + row * dp;
          for (int64_t t = 0; t < nlk; ++t) {
            if (km[t] == 0.0f) continue;
            for (int64_t c = 0; c < d; ++c) gk[t * d + c] += unscale * km[t] * qs[c];
          }
        }
        if (!gv.empty()) {
          const float* pm = w.pmass.data() + row * nlv;
          const float* dout = w.dout.get() + row * dp;
          for (int64_t t = 0; t < nlv; ++t) {
            if (pm[t] == 0.0f) continue;
            for (int64_t c = 0; c < d; ++c) gv[t * d + c] += double(pm[t]) * dout[c];
          }
        }
      }
    }
    if (gk.empty() && gv.empty()) return;
    std::lock_guard<std::mutex> lock(*shaw_mu_);
    for (size_t i = 0; i < gk.size(); ++i) gak_[i] += gk[i];
    for (size_t i = 0; i < gv.size(); ++i) gav_[i] += gv[i];
  }

 public:

 private:
  const AttentionArgs& a_;
  const Plan& p_;
  const T *q_, *k_, *v_, *o_;
  const float* lse_;
  const T* do_;
  T *dk_, *dv_;
  // dQ' partial sums, [chunk][q head][token][dp]: each head's rows contiguous, so a query
  // tile's rows are one stream (token-major rows of all heads would put them hq * dp
  // floats apart, a page or more, one TLB entry per row).
  float* dq_acc_;
  int64_t chunk_stride_;
  int64_t nq_;
  const BiasGradientSink& sink_;
  std::mutex* sink_mu_;
  float* dk_rot_;
  std::vector<int64_t> pq_, pk_;
  std::unique_ptr<PreparedRowTransform> tq_, tk_;
  ShawTables shaw_;
  double *gak_ = nullptr, *gav_ = nullptr;
  std::mutex* shaw_mu_ = nullptr;
};

template <class T>
absl::Status RunDecode(const Forward<T>& fwd, const AttentionArgs& args, const Plan& plan,
                       int64_t total_k) {
  // Chunks of about total_k / (4 threads) keys (whole key blocks), per sequence.
  const int64_t chunk = std::max(plan.bk, RoundUp(total_k / (4 * plan.threads) + 1, plan.bk));
  struct DecodeItem {
    int64_t b, k0, k1, chunk;
  };
  std::vector<DecodeItem> items;
  int64_t chunks = 1;
  for (int64_t b = 0; b < args.num_sequences(); ++b) {
    if (args.q_end(b) == args.q_begin(b)) continue;
    const int64_t lk = args.k_end(b) - args.k_begin(b);
    int64_t c = 0;
    for (int64_t k0 = 0; k0 < lk; k0 += chunk, ++c) {
      items.push_back({b, k0, std::min(lk, k0 + chunk), c});
    }
    chunks = std::max(chunks, c);
  }
  const int64_t nq = args.num_q_tokens(), hq = args.num_q_heads, stride = plan.dp + 2;
  // Unused states (sequences with fewer chunks, or no keys) keep l = 0: no contribution.
  std::vector<float> partial(static_cast<size_t>(chunks * nq * hq * stride), 0.0f);
  const int threads =
      static_cast<int>(std::min<int64_t>(plan.threads, std::max<size_t>(items.size(), 1)));
  Plan wplan = plan;
  int64_t max_lq = 0;
  for (int64_t b = 0; b < args.num_sequences(); ++b) {
    max_lq = std::max(max_lq, args.q_end(b) - args.q_begin(b));
  }
  wplan.rows = std::max(plan.rows, hq * max_lq);
  wplan.tile_rows = hq * max_lq;
  absl::Status first = RunItems<Workspace>(
      threads, static_cast<int64_t>(items.size()),
      [&] { return std::make_unique<Workspace>(wplan); },
      [&](int64_t i, Workspace& w) {
        const DecodeItem& it = items[i];
        return fwd.RunDecodeItem(it.b, it.k0, it.k1, it.chunk, partial.data(), w);
      });
  if (!first.ok()) return first;
  fwd.CombineDecode(partial.data(), chunks);
  return absl::OkStatus();
}

template <class T>
absl::Status ForwardImpl(const AttentionArgs& args, const T* q, const T* k, const T* v, T* o,
                         float* lse, const CpuAttentionOptions& options) {
  if (absl::Status s = ValidateAttention(args); !s.ok()) return s;
  // No query and no key token (e.g. a bshd batch of 2^39 empty sequences): nothing to
  // write; returned before the plan's loops over the sequences, which nothing else bounds.
  if (args.num_q_tokens() == 0 && args.num_k_tokens() == 0) return absl::OkStatus();
  absl::StatusOr<Plan> plan = MakePlan(args, options, std::is_same_v<T, float>);
  if (!plan.ok()) return plan.status();
  if (args.num_q_tokens() > 0 && (q == nullptr || o == nullptr)) {
    return Bad("null q or o tensor");
  }
  if (args.num_k_tokens() > 0 && (k == nullptr || v == nullptr)) {
    return Bad("null k or v tensor");
  }
  Forward<T> fwd(args, *plan, q, k, v, o, lse);
  if (absl::Status s = fwd.Prepare(); !s.ok()) return s;
  // Decoding shapes (few query rows per kv head, long KV caches): split the keys.
  int64_t max_lq = 0, total_k = 0;
  for (int64_t b = 0; b < args.num_sequences(); ++b) {
    max_lq = std::max(max_lq, args.q_end(b) - args.q_begin(b));
    total_k += args.k_end(b) - args.k_begin(b);
  }
  const int64_t group = args.num_q_heads / args.num_kv_heads;
  // (Shaw labels keep per-row label sums the split-KV states do not carry.)
  if (max_lq * group <= kDirectRows && plan->max_lk >= kDecodeMinKeys && plan->nlk == 0 &&
      plan->nlv == 0) {
    return RunDecode(fwd, args, *plan, total_k);
  }
  const std::vector<Item> items = MakeItems(args, *plan);
  const int threads = static_cast<int>(std::min<int64_t>(plan->threads, std::max<size_t>(items.size(), 1)));
  return RunItems<Workspace>(
      threads, static_cast<int64_t>(items.size()), [&] { return std::make_unique<Workspace>(*plan); },
      [&](int64_t i, Workspace& w) { return fwd.RunItem(items[i], w); });
}

template <class T>
absl::Status BackwardImpl(const AttentionArgs& args, const T* q, const T* k, const T* v,
                          const T* o, const float* lse, const T* d_o, T* dq, T* dk, T* dv,
                          const BiasGradientSink& bias_sink, const CpuAttentionOptions& options,
                          const CpuBackwardExtras& extras = {}) {
  if (absl::Status s = ValidateAttention(args); !s.ok()) return s;
  // No query and no key token: only the requested Shaw table gradients (zero) to write;
  // returned before the plan's loops over the sequences, as in ForwardImpl.
  if (args.num_q_tokens() == 0 && args.num_k_tokens() == 0) {
    if ((o == nullptr) != (lse == nullptr)) {
      return Bad("give both o and lse from the forward, or neither (recomputed)");
    }
    for (auto [grad, table] : {std::pair{extras.shaw_key_table_grad, args.shaw_keys},
                               std::pair{extras.shaw_value_table_grad, args.shaw_values}}) {
      if (grad == nullptr) continue;
      if (table == nullptr) {
        return Bad("a Shaw table gradient was requested without its shaw_keys / shaw_values");
      }
      std::fill_n(grad, table->num_labels() * args.head_dim, 0.0);
    }
    return absl::OkStatus();
  }
  absl::StatusOr<Plan> plan = MakePlan(args, options, std::is_same_v<T, float>);
  if (!plan.ok()) return plan.status();
  const int64_t nq = args.num_q_tokens(), nkt = args.num_k_tokens();
  if (nq > 0 && (q == nullptr || d_o == nullptr)) return Bad("null q or d_o tensor");
  if (nkt > 0 && (k == nullptr || v == nullptr)) return Bad("null k or v tensor");
  if ((extras.shaw_key_table_grad != nullptr && args.shaw_keys == nullptr) ||
      (extras.shaw_value_table_grad != nullptr && args.shaw_values == nullptr)) {
    return Bad("a Shaw table gradient was requested without its shaw_keys / shaw_values");
  }
  // Table gradients start at zero (items add to them).
  if (extras.shaw_key_table_grad != nullptr) {
    std::fill_n(extras.shaw_key_table_grad, plan->nlk * args.head_dim, 0.0);
  }
  if (extras.shaw_value_table_grad != nullptr) {
    std::fill_n(extras.shaw_value_table_grad, plan->nlv * args.head_dim, 0.0);
  }
  if ((o == nullptr) != (lse == nullptr)) {
    return Bad("give both o and lse from the forward, or neither (recomputed)");
  }
  const int64_t hq = args.num_q_heads, d = args.head_dim;
  // Without the forward's o and lse, recompute them (one forward pass).
  std::vector<T> o_own;
  std::vector<float> lse_own;
  if (o == nullptr && nq > 0) {
    AttentionArgs fa = args;
    fa.o = fa.layout == Layout::kBSHD ? ContiguousStrides(Layout::kBSHD, args.seq_len_q, hq, d)
                                      : ContiguousStrides(Layout::kTHD, 0, hq, d);
    o_own.resize(static_cast<size_t>(nq * hq * d));
    lse_own.resize(static_cast<size_t>(nq * hq));
    if (absl::Status s = ForwardImpl<T>(fa, q, k, v, o_own.data(), lse_own.data(), options);
        !s.ok()) {
      return s;
    }
  }
  BackwardPlan bp = MakeKeyItems(args, *plan);
  const int64_t dp = plan->dp;
  const int64_t chunk_stride = nq * hq * dp;
  // Zeroed by all threads (tens of MiB at long sequences: first touch and clearing in
  // parallel rather than on the calling thread while the others wait).
  const int64_t acc_floats = std::max<int64_t>(bp.chunks, 1) * chunk_stride;
  hwy::AlignedFreeUniquePtr<float[]> dq_acc = hwy::AllocateAligned<float>(std::max<int64_t>(acc_floats, 1));
  {
    constexpr int64_t kZeroBlock = int64_t{1} << 18;  // floats per parallel item (1 MiB)
    ParallelItems(plan->threads, (acc_floats + kZeroBlock - 1) / kZeroBlock, [&](int64_t i, int) {
      const int64_t b = i * kZeroBlock;
      std::fill(dq_acc.get() + b, dq_acc.get() + std::min(acc_floats, b + kZeroBlock), 0.0f);
    });
  }
  // o for the backward: the caller's (strides args.o) or the recomputed one re-laid out
  // with args.o's strides into a buffer of the same extent.
  std::vector<T> o_strided;
  const T* o_use = o;
  const float* lse_use = lse;
  if (o == nullptr && nq > 0) {
    int64_t extent = 0;
    for (int64_t t = 0; t < nq; ++t) {
      for (int64_t h = 0; h < hq; ++h) extent = std::max(extent, args.QOffset(args.o, t, h) + d);
    }
    o_strided.assign(static_cast<size_t>(extent), T{});
    for (int64_t t = 0; t < nq; ++t) {
      for (int64_t h = 0; h < hq; ++h) {
        std::copy(o_own.data() + (t * hq + h) * d, o_own.data() + (t * hq + h + 1) * d,
                  o_strided.data() + args.QOffset(args.o, t, h));
      }
    }
    o_use = o_strided.data();
    lse_use = lse_own.data();
  }
  std::mutex sink_mu, shaw_mu;
  Backward<T> bwd(args, *plan, q, k, v, o_use, lse_use, d_o, dk, dv, dq_acc.get(), chunk_stride,
               bias_sink, &sink_mu, extras.dk_rotated);
  if (absl::Status s = bwd.Prepare(); !s.ok()) return s;
  bwd.SetShawGradients(extras.shaw_key_table_grad, extras.shaw_value_table_grad, &shaw_mu);
  int64_t max_lq = 0;
  for (int64_t b = 0; b < args.num_sequences(); ++b) {
    max_lq = std::max(max_lq, args.q_end(b) - args.q_begin(b));
  }
  const int64_t group = hq / args.num_kv_heads;
  const int threads = static_cast<int>(
      std::min<int64_t>(plan->threads, std::max<int64_t>(static_cast<int64_t>(bp.items.size()), 1)));
  absl::Status first = RunItems<BackwardWorkspace>(
      threads, static_cast<int64_t>(bp.items.size()),
      [&] { return std::make_unique<BackwardWorkspace>(*plan, max_lq, group); },
      [&](int64_t i, BackwardWorkspace& w) { return bwd.RunItem(bp.items[i], w); });
  if (!first.ok()) return first;
  // dK, dV of keys no item covered do not exist (every key belongs to an item); dq:
  // sum the chunks' partial sums, times scale, then the transpose of the q transform,
  // one q head per parallel item (each head's rows are contiguous in dq_acc).
  if ((dq != nullptr || extras.dq_rotated != nullptr) && nq > 0) {
    float* acc = dq_acc.get();
    const float scale = static_cast<float>(args.scale());
    const PreparedRowTransform* tq = bwd.q_transform();
    const int64_t head = nq * dp;  // floats per head in one chunk
    struct NoWorkspace {};
    return RunItems<NoWorkspace>(
        plan->threads, hq, [] { return std::make_unique<NoWorkspace>(); },
        [&](int64_t h, NoWorkspace&) -> absl::Status {
          float* rows = acc + h * head;
          for (int64_t c = 1; c < bp.chunks; ++c) {
            const float* part = acc + c * chunk_stride + h * head;
            for (int64_t i = 0; i < head; ++i) rows[i] += part[i];
          }
          for (int64_t i = 0; i < head; ++i) rows[i] *= scale;
          if (extras.dq_rotated != nullptr) {
            for (int64_t t = 0; t < nq; ++t) {
              std::memcpy(extras.dq_rotated + args.QOffset(args.q, t, h), rows + t * dp,
                          static_cast<size_t>(d) * sizeof(float));
            }
          }
          if (dq == nullptr) return absl::OkStatus();
          if (tq != nullptr) {
            if (absl::Status st = tq->Backward(0, nq, rows, dp); !st.ok()) return st;
          }
          for (int64_t t = 0; t < nq; ++t) StoreRow(rows + t * dp, dq + args.QOffset(args.q, t, h), d);
          return absl::OkStatus();
        });
  }
  // Keys of sequences with no queries still get their (zero) gradients: items cover
  // every key, so nothing else to do.
  return absl::OkStatus();
}


}  // namespace

absl::Status CpuForward(const AttentionArgs& args, const float* q, const float* k, const float* v,
                        float* o, float* lse, const CpuAttentionOptions& options) {
  return ForwardImpl<float>(args, q, k, v, o, lse, options);
}
absl::Status CpuForward(const AttentionArgs& args, const BFloat16* q, const BFloat16* k,
                        const BFloat16* v, BFloat16* o, float* lse,
                        const CpuAttentionOptions& options) {
  return ForwardImpl<BFloat16>(args, q, k, v, o, lse, options);
}
absl::Status CpuBackward(const AttentionArgs& args, const float* q, const float* k,
                         const float* v, const float* o, const float* lse, const float* d_o,
                         float* dq, float* dk, float* dv, const BiasGradientSink& bias_sink,
                         const CpuAttentionOptions& options) {
  return BackwardImpl<float>(args, q, k, v, o, lse, d_o, dq, dk, dv, bias_sink, options);
}
absl::Status CpuBackward(const AttentionArgs& args, const float* q, const float* k,
                         const float* v, const float* o, const float* lse, const float* d_o,
                         float* dq, float* dk, float* dv, const BiasGradientSink& bias_sink,
                         const CpuAttentionOptions& options, const CpuBackwardExtras& extras) {
  return BackwardImpl<float>(args, q, k, v, o, lse, d_o, dq, dk, dv, bias_sink, options, extras);
}
absl::Status CpuBackward(const AttentionArgs& args, const BFloat16* q, const BFloat16* k,
                         const BFloat16* v, const BFloat16* o, const float* lse,
                         const BFloat16* d_o, BFloat16* dq, BFloat16* dk, BFloat16* dv,
                         const BiasGradientSink& bias_sink, const CpuAttentionOptions& options) {
  return BackwardImpl<BFloat16>(args, q, k, v, o, lse, d_o, dq, dk, dv, bias_sink, options);
}

absl::StatusOr<int64_t> CpuForwardWorkspaceBytes(const AttentionArgs& args,
                                                 const CpuAttentionOptions& options) {
  if (absl::Status s = ValidateAttention(args); !s.ok()) return s;
  if (args.num_q_tokens() == 0 && args.num_k_tokens() == 0) return int64_t{0};  // as ForwardImpl
  absl::StatusOr<Plan> plan = MakePlan(args, options);
  if (!plan.ok()) return plan.status();
  const int64_t items = static_cast<int64_t>(MakeItems(args, *plan).size());
  const int64_t threads = std::min<int64_t>(plan->threads, std::max<int64_t>(items, 1));
  int64_t bytes = threads * Workspace::Floats(*plan) * static_cast<int64_t>(sizeof(float));
  bytes += static_cast<int64_t>(sizeof(int64_t)) * (args.num_q_tokens() + args.num_k_tokens());
  const int64_t table = 2 * args.head_dim * static_cast<int64_t>(sizeof(float));
  if (args.q_transform != nullptr) bytes += table * args.num_q_tokens();
  if (args.k_transform != nullptr) bytes += table * args.num_k_tokens();
  return bytes;
}

bool CpuHasBf16DotProducts() { return cpu::HasBf16DotProduct(); }
bool CpuBf16AutoUsesDotProducts() {
  return cpu::HasBf16DotProduct() && cpu::Bf16DotProductsFaster();
}

std::string CpuAttentionIsa() { return cpu::KernelTargetName(); }

}  // namespace attention
}  // namespace gpe
