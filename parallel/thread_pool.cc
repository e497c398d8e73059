#include "parallel/thread_pool.h"

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace gpe {
namespace parallel {
namespace {

// The built-in pool: workers started on demand (a region of s slots needs s - 1 of them,
// slot 0 running on the caller), parked on a condition variable between regions, joined
// by Shutdown. A region's slots are claimed from an atomic counter by the caller and the
// workers alike, so the caller finishes its own region even when every worker is busy
// (nested or concurrent regions cannot deadlock).
class BuiltInPool {
 public:
  ~BuiltInPool() { Shutdown(); }

  void Run(int slots, absl::FunctionRef<void(int)> fn) {
    auto job = std::make_shared<Job>(fn, slots);
    {
      std::lock_guard<std::mutex> lock(mu_);
      while (static_cast<int>(workers_.size()) < slots - 1) {
        workers_.emplace_back(&BuiltInPool::Loop, this);
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

  // Stops and joins every worker; idempotent. Called with no region running.
  void Shutdown() {
    std::vector<std::thread> workers;
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
      workers.swap(workers_);
    }
    cv_.notify_all();
    for (std::thread& t : workers) t.join();
  }

  int WorkerCount() {
    std::lock_guard<std::mutex> lock(mu_);
    return static_cast<int>(workers_.size());
  }

 private:
  struct Job {
    Job(absl::FunctionRef<void(int)> f, int n) : fn(f), slots(n) {}
    void Finish() {
      std::lock_guard<std::mutex> lock(mu);
      if (++done == slots - 1) cv.notify_all();
    }
    const absl::FunctionRef<void(int)> fn;
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
        cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;  // stop_ and nothing left to help with
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
  std::vector<std::thread> workers_;
  bool stop_ = false;
};

// The process's pools. The built-in pool lives behind a pointer so that a forked child,
// which inherits the pool's memory but none of its threads, can start afresh: the
// parent's object is abandoned there (joining threads that do not exist would hang).
struct Pools {
  std::mutex mu;
  BuiltInPool* built_in = nullptr;                 // created on first use
  std::shared_ptr<const ExternalPool> external;  // null: the built-in pool serves

  Pools() {
    pthread_atfork(
        [] { State().mu.lock(); }, [] { State().mu.unlock(); },
        [] {
          Pools& p = State();
          p.built_in = nullptr;  // the parent's workers do not exist here
          p.mu.unlock();
        });
  }
  // Library unload or process exit: the workers stop and are joined.
  ~Pools() { delete built_in; }

  static Pools& State() {
    static Pools pools;
    return pools;
  }
};

BuiltInPool& GetBuiltIn() {
  Pools& p = Pools::State();
  std::lock_guard<std::mutex> lock(p.mu);
  if (p.built_in == nullptr) p.built_in = new BuiltInPool();
  return *p.built_in;
}

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
  if (std::shared_ptr<const ExternalPool> ext = GetExternal()) {
    ext->parallel_for(ext->user_data, slots, &RunTask, &fn);
    return;
  }
  GetBuiltIn().Run(slots, fn);
}

void ParallelForChunks(int chunks, int64_t n, absl::FunctionRef<void(int64_t, int64_t)> fn) {
  const int64_t parts = std::max<int64_t>(1, std::min<int64_t>(chunks, n));
  Run(static_cast<int>(parts), [&](int k) { fn(n * k / parts, n * (k + 1) / parts); });
}

namespace internal {
int BuiltInWorkerCount() { return GetBuiltIn().WorkerCount(); }
}  // namespace internal

}  // namespace parallel
}  // namespace gpe
