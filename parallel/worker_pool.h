// Worker threads shared by every call of the library, started on first need and kept (a
// call costs a wake-up instead of a thread start: calls of a few milliseconds, such as
// decoding steps, spent a noticeable part of their time creating threads).
//
// A call posts a job of `slots` slot indices; the caller runs slot 0, then claims
// whatever slots no worker has taken and runs them itself, so a job finishes even when
// every worker is busy (concurrent callers, or a call made from inside another call's
// slot): no deadlock, and no limit on concurrent callers.
//
// Lifetime of the shared pool: its workers are stopped and joined when the process exits
// or the library is unloaded (a function-local static's destructor), once the slots they
// are running finish. The pool object itself is never destroyed, so a call made later (a
// static destructor, a thread still running) finds it and runs every slot on its own
// thread. In a child of fork() the parent's workers do not exist: the pool sets them
// aside (never joined) with what they held and starts the child's own when needed.
#ifndef GPE_PARALLEL_WORKER_POOL_H_
#define GPE_PARALLEL_WORKER_POOL_H_

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace gpe {
namespace parallel {

class WorkerPool {
 public:
  // The pool every call shares.
  static WorkerPool& Shared();

  WorkerPool();
  // Stop()s; no Run may be in progress.
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // Runs fn(slot) for slot in [0, slots), slot 0 on the calling thread; returns when all
  // are done. Starts workers as needed, up to slots - 1 in all; once stopped, runs every
  // slot on the calling thread.
  void Run(int slots, const std::function<void(int)>& fn);

  // Stops the workers and joins them once the slots they are running finish (a worker
  // calling Stop, e.g. through exit() inside a slot, joins the others). Run works after,
  // on the calling thread alone. Idempotent.
  void Stop();

  // Workers started and not stopped.
  int NumWorkers();

 private:
  struct Job;

  void Remove(const Job* job);
  void Loop();

  // fork() handlers of the shared pool (pthread_atfork): the pool's lock is held across
  // fork() so that the child inherits consistent state.
  static void BeforeFork();
  static void AfterForkInParent();
  static void AfterForkInChild();

  std::mutex mu_;
  // Replaced in a fork()ed child (see AfterForkInChild), hence a pointer.
  std::unique_ptr<std::condition_variable> cv_;
  std::deque<std::shared_ptr<Job>> queue_;  // guarded by mu_
  std::vector<std::thread> workers_;        // guarded by mu_
  bool stopped_ = false;                    // guarded by mu_
  // What a fork()ed child inherits from its parent's pool and may neither join, notify
  // nor destroy: the parent's workers, its callers' jobs, and the condition variable the
  // workers waited on (glibc's would wait for those waiters forever). Guarded by mu_.
  struct Inherited {
    std::vector<std::thread> workers;
    std::deque<std::shared_ptr<Job>> jobs;
    std::vector<std::unique_ptr<std::condition_variable>> cvs;
  };
  Inherited inherited_;
};

}  // namespace parallel
}  // namespace gpe

#endif  // GPE_PARALLEL_WORKER_POOL_H_
