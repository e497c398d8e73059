#include "attention/cpu/worker_pool.h"

#include <thread>

namespace gpe {
namespace attention {
namespace cpu {

struct WorkerPool::Job {
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

WorkerPool& WorkerPool::Shared() {
  static WorkerPool* pool = new WorkerPool();  // never destroyed: workers outlive main
  return *pool;
}

void WorkerPool::Run(int slots, const std::function<void(int)>& fn) {
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

void WorkerPool::Remove(const Job* job) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = queue_.begin(); it != queue_.end(); ++it) {
    if (it->get() == job) {
      queue_.erase(it);
      return;
    }
  }
}

void WorkerPool::Loop() {
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

}  // namespace cpu
}  // namespace attention
}  // namespace gpe
