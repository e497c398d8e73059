#include "parallel/worker_pool.h"

#include <pthread.h>

#include <atomic>

namespace gpe {
namespace parallel {
namespace {

WorkerPool* shared_pool = nullptr;  // set once, by WorkerPool::Shared

}  // namespace

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
  // Never destroyed, so that a call made during static destruction finds a live pool; its
  // workers are joined by `joiner`, destroyed at exit or when the library is unloaded
  // (which also unregisters the fork handlers).
  static WorkerPool* const pool = [] {
    shared_pool = new WorkerPool();
    pthread_atfork(&WorkerPool::BeforeFork, &WorkerPool::AfterForkInParent,
                   &WorkerPool::AfterForkInChild);
    return shared_pool;
  }();
  static struct Joiner {
    ~Joiner() { pool->Stop(); }
  } joiner;
  return *pool;
}

WorkerPool::WorkerPool() : cv_(std::make_unique<std::condition_variable>()) {}

WorkerPool::~WorkerPool() { Stop(); }

void WorkerPool::Run(int slots, const std::function<void(int)>& fn) {
  if (slots <= 1) {
    fn(0);
    return;
  }
  auto job = std::make_shared<Job>(fn, slots);
  std::condition_variable* posted = nullptr;  // where the job was posted (not if stopped)
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!stopped_) {
      while (static_cast<int>(workers_.size()) < slots - 1) {
        workers_.emplace_back(&WorkerPool::Loop, this);
      }
      queue_.push_back(job);
      posted = cv_.get();
    }
  }
  if (posted != nullptr) posted->notify_all();
  fn(0);
  for (int slot = job->next.fetch_add(1); slot < slots; slot = job->next.fetch_add(1)) {
    fn(slot);
    job->Finish();
  }
  if (posted != nullptr) Remove(job.get());
  std::unique_lock<std::mutex> lock(job->mu);
  job->cv.wait(lock, [&] { return job->done == slots - 1; });
}

void WorkerPool::Stop() {
  std::vector<std::thread> workers;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopped_ = true;
    workers.swap(workers_);
    cv_->notify_all();
  }
  for (std::thread& t : workers) {
    if (t.get_id() == std::this_thread::get_id()) {
      t.detach();  // exit() from inside a slot: a thread cannot join itself
    } else {
      t.join();
    }
  }
}

int WorkerPool::NumWorkers() {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(workers_.size());
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
      cv_->wait(lock, [&] { return stopped_ || !queue_.empty(); });
      if (stopped_) return;  // the jobs' callers run the slots left
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

void WorkerPool::BeforeFork() { shared_pool->mu_.lock(); }

void WorkerPool::AfterForkInParent() { shared_pool->mu_.unlock(); }

void WorkerPool::AfterForkInChild() {
  // The child's only thread holds the lock (taken before fork()); the parent's workers,
  // the jobs of its callers and the condition variable they waited on are set aside.
  WorkerPool& p = *shared_pool;
  for (std::thread& t : p.workers_) p.inherited_.workers.push_back(std::move(t));
  p.workers_.clear();
  for (std::shared_ptr<Job>& job : p.queue_) p.inherited_.jobs.push_back(std::move(job));
  p.queue_.clear();
  p.inherited_.cvs.push_back(std::move(p.cv_));
  p.cv_ = std::make_unique<std::condition_variable>();
  p.mu_.unlock();
}

}  // namespace parallel
}  // namespace gpe
