// A call's items run on the library pool (parallel/thread_pool.h): items taken in order from a shared
// counter, each thread in the flush-to-zero mode the kernels want and with its own
// workspace.
#ifndef ATTENTION_CPU_PARALLEL_ITEMS_H_
#define ATTENTION_CPU_PARALLEL_ITEMS_H_

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <type_traits>
#include <utility>
#include <vector>
#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

#include "absl/status/status.h"
#include "parallel/thread_pool.h"

namespace gpe {
namespace attention {
namespace cpu {

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

// Runs fn(item_index, thread_index) for every item on `threads` threads (the caller is
// thread 0), items taken in order from a shared counter.
template <class Fn>
void ParallelItems(int threads, int64_t n, const Fn& fn) {
  const int t = static_cast<int>(std::min<int64_t>(threads, n));
  std::atomic<int64_t> next{0};
  parallel::Run(std::max(t, 1), [&](int tid) {
    FlushDenormals ftz;
    for (int64_t i = next.fetch_add(1); i < n; i = next.fetch_add(1)) fn(i, tid);
  });
}

// Whether a workspace's buffers were all allocated (its `allocated` member; true for
// workspaces without one).
template <class W, class = void>
struct HasAllocatedFlag : std::false_type {};
template <class W>
struct HasAllocatedFlag<W, std::void_t<decltype(std::declval<const W&>().allocated)>>
    : std::true_type {};

// Runs run(i, workspace) for items [0, n) on up to `threads` threads, each thread with its
// own workspace made by make() on first use; stops taking items after the first error,
// which is returned (ResourceExhausted when a workspace's buffers could not be
// allocated).
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
    absl::Status st = absl::OkStatus();
    if constexpr (HasAllocatedFlag<W>::value) {
      if (!ws[tid]->allocated) {
        st = absl::ResourceExhaustedError(
            "attention: a thread's workspace could not be allocated (CpuForwardWorkspaceBytes "
            "gives the forward's size)");
      }
    }
    if (st.ok()) st = run(i, *ws[tid]);
    if (!st.ok()) {
      std::lock_guard<std::mutex> lock(mu);
      if (first.ok()) first = st;
      failed = true;
    }
  });
  return first;
}

}  // namespace cpu
}  // namespace attention
}  // namespace gpe

#endif  // ATTENTION_CPU_PARALLEL_ITEMS_H_
