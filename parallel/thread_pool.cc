#include "parallel/thread_pool.h"

#include <pthread.h>

#include <algorithm>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "parallel/worker_pool.h"

namespace gpe {
namespace parallel {
namespace {

// The application's pool, when one is installed. Its lock is held across fork() so that a
// child never inherits it locked by a thread that does not exist there.
struct Pools {
  std::mutex mu;
  std::shared_ptr<const ExternalPool> external;  // null: the built-in pool serves

  Pools() {
    pthread_atfork([] { State().mu.lock(); }, [] { State().mu.unlock(); },
                   [] { State().mu.unlock(); });
  }

  static Pools& State() {
    static Pools* pools = new Pools();  // never destroyed: calls may come during exit
    return *pools;
  }
};

std::shared_ptr<const ExternalPool> GetExternal() {
  Pools& p = Pools::State();
  std::lock_guard<std::mutex> lock(p.mu);
  return p.external;
}

void RunTask(void* ctx, int64_t i) {
  (*static_cast<absl::FunctionRef<void(int)>*>(ctx))(static_cast<int>(i));
}

}  // namespace

void SetExternalPool(const ExternalPool* pool) {
  std::shared_ptr<const ExternalPool> copy;
  if (pool != nullptr) copy = std::make_shared<const ExternalPool>(*pool);
  Pools& p = Pools::State();
  std::lock_guard<std::mutex> lock(p.mu);
  p.external = std::move(copy);
}

bool HasExternalPool() { return GetExternal() != nullptr; }

int DefaultThreads() {
  if (std::shared_ptr<const ExternalPool> ext = GetExternal()) {
    return std::max(ext->num_threads, 1);
  }
  return std::max(static_cast<int>(std::thread::hardware_concurrency()), 1);
}

void Run(int slots, absl::FunctionRef<void(int)> fn) {
  if (slots <= 1) {
    fn(0);
    return;
  }
  // Each slot catches what it throws: an exception leaving a worker's slot would end the
  // process (std::terminate), one leaving the caller's slot 0 would return from the
  // region while workers still ran the job (use after free), and one crossing an
  // application pool's parallel_for would unwind C frames. The first is rethrown below,
  // once every slot has finished.
  std::mutex mu;
  std::exception_ptr first;
  auto guarded = [&](int slot) {
    try {
      fn(slot);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu);
      if (!first) first = std::current_exception();
    }
  };
  absl::FunctionRef<void(int)> task = guarded;
  if (std::shared_ptr<const ExternalPool> ext = GetExternal()) {
    ext->parallel_for(ext->user_data, slots, &RunTask, &task);
  } else {
    WorkerPool::Shared().Run(slots, [&guarded](int slot) { guarded(slot); });
  }
  if (first) std::rethrow_exception(first);
}

void ParallelForChunks(int chunks, int64_t n, absl::FunctionRef<void(int64_t, int64_t)> fn) {
  const int64_t parts = std::max<int64_t>(1, std::min<int64_t>(chunks, n));
  Run(static_cast<int>(parts), [&](int k) { fn(n * k / parts, n * (k + 1) / parts); });
}

namespace internal {
int BuiltInWorkerCount() { return WorkerPool::Shared().NumWorkers(); }
}  // namespace internal

}  // namespace parallel
}  // namespace gpe
