// The one thread pool every threaded GroupPE computation runs on: the attention kernels,
// RoPE's Apply, the closed-form INR fits. Built in (worker_pool.h: workers started on
// first use, joined when the library is unloaded or the process exits, started afresh in
// a forked child), or supplied by the application (an inference engine that owns its
// threads hands GroupPE a parallel-for callback).
//
// The work model is deliberately small, so any pool can serve it: a parallel region is
// `slots` independent tasks, fn(0) .. fn(slots - 1). Tasks may run concurrently on any
// threads or one after another on one thread, in any order; a task never waits for
// another (no barriers inside a region: a computation with phases runs one region per
// phase). Callers size per-slot scratch by `slots`, so two concurrent tasks never share
// scratch. See docs/ARCHITECTURE.md, "Threading".
#ifndef GPE_PARALLEL_THREAD_POOL_H_
#define GPE_PARALLEL_THREAD_POOL_H_

#include <cstdint>

#include "absl/functional/function_ref.h"

namespace gpe {
namespace parallel {

// An application's pool. parallel_for(user_data, n, task, task_ctx) must call
// task(task_ctx, i) exactly once for every i in [0, n) and return when all calls have
// returned; the calling thread may run some or all of them.
struct ExternalPool {
  void* user_data = nullptr;
  // The parallelism to plan for where a call asks for "every thread" (>= 1).
  int num_threads = 1;
  void (*parallel_for)(void* user_data, int64_t n, void (*task)(void* task_ctx, int64_t i),
                       void* task_ctx) = nullptr;
};

// Routes every later parallel region of the process through `pool` (copied), or back to
// the built-in pool when `pool` is null. Regions already running finish on the pool they
// started on, so the application keeps its pool alive until its GroupPE calls have
// returned. Thread-safe.
void SetExternalPool(const ExternalPool* pool);

// True while an external pool is installed.
bool HasExternalPool();

// The thread count a call that asks for "every thread" uses: the external pool's
// num_threads, else the hardware's thread count (at least 1).
int DefaultThreads();

// Runs fn(slot) for every slot in [0, slots) as one parallel region (see above) and
// returns when all have finished. slots <= 1 runs fn(0) inline. A slot that throws (a
// failed allocation) does not unwind through the pool: the other slots run to their end,
// then Run rethrows the first exception on the caller's thread (never through an
// application pool's C frames, never out of a worker thread).
void Run(int slots, absl::FunctionRef<void(int)> fn);

// Runs fn(begin, end) on `chunks` contiguous, nearly equal parts of [0, n) (chunk k is
// [n k / chunks, n (k + 1) / chunks)), one slot each; chunks is clamped to [1, n].
void ParallelForChunks(int chunks, int64_t n, absl::FunctionRef<void(int64_t, int64_t)> fn);

namespace internal {
// The built-in pool's current worker count (tests: workers are started lazily and
// reused, never more than the largest region needed).
int BuiltInWorkerCount();
}  // namespace internal

}  // namespace parallel
}  // namespace gpe

#endif  // GPE_PARALLEL_THREAD_POOL_H_
