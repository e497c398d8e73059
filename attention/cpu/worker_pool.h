// Worker threads shared by every call of the library, started on first need and kept (a
// call costs a wake-up instead of a thread start: calls of a few milliseconds, such as
// decoding steps, spent a noticeable part of their time creating threads).
//
// A call posts a job of `slots` slot indices; the caller runs slot 0, then claims
// whatever slots no worker has taken and runs them itself, so a job finishes even when
// every worker is busy (concurrent callers, or a call made from inside another call's
// slot): no deadlock, and no limit on concurrent callers.
#ifndef ATTENTION_CPU_WORKER_POOL_H_
#define ATTENTION_CPU_WORKER_POOL_H_

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>

namespace gpe {
namespace attention {
namespace cpu {

class WorkerPool {
 public:
  // The pool every call shares.
  static WorkerPool& Shared();

  WorkerPool() = default;
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // Runs fn(slot) for slot in [0, slots), slot 0 on the calling thread; returns when all
  // are done. Starts workers as needed, up to slots - 1 in all.
  void Run(int slots, const std::function<void(int)>& fn);

 private:
  struct Job;

  void Remove(const Job* job);
  void Loop();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> queue_;
  int workers_ = 0;
};

}  // namespace cpu
}  // namespace attention
}  // namespace gpe

#endif  // ATTENTION_CPU_WORKER_POOL_H_
