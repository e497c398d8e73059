// The worker pool: every slot of a job runs once (slot 0 on the caller), workers run
// slots concurrently, concurrent and nested jobs finish, Stop and destruction join the
// workers (after the slots in progress), and the shared pool joins its workers at exit
// and starts its own in a fork()ed child.
#include "parallel/worker_pool.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace gpe {
namespace parallel {
namespace {

// Waits until done() holds, for at most 20 s (a deadline, not a timing: it only keeps
// a failure from hanging the test); whether it holds.
template <class Done>
bool WaitFor(const Done& done) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!done() && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
  return done();
}

// Runs a job of `slots` slots; whether every slot ran exactly once and slot 0 on the
// calling thread.
bool EverySlotOnce(WorkerPool& pool, int slots) {
  std::vector<std::atomic<int>> runs(static_cast<size_t>(slots));
  std::atomic<bool> zero_on_caller{false};
  const std::thread::id caller = std::this_thread::get_id();
  pool.Run(slots, [&](int s) {
    ++runs[static_cast<size_t>(s)];
    if (s == 0) zero_on_caller = std::this_thread::get_id() == caller;
  });
  bool ok = zero_on_caller;
  for (const std::atomic<int>& r : runs) ok = ok && r == 1;
  return ok;
}

TEST(WorkerPool, RunsEverySlotOnceAndSlotZeroOnTheCaller) {
  WorkerPool pool;
  for (int slots : {1, 2, 3, 8, 33, 5}) EXPECT_TRUE(EverySlotOnce(pool, slots)) << slots;
  // Workers are kept between jobs: as many as the largest job needed (slots - 1).
  EXPECT_EQ(pool.NumWorkers(), 32);
}

// Whether the slots of a job run at once: every slot waits until all have started,
// which happens only if workers took slots 1.. while the caller ran slot 0.
bool SlotsRunConcurrently(WorkerPool& pool, int slots) {
  std::atomic<int> started{0}, met{0};
  pool.Run(slots, [&](int) {
    ++started;
    if (WaitFor([&] { return started == slots; })) ++met;
  });
  return met == slots;
}

TEST(WorkerPool, WorkersRunSlotsConcurrently) {
  WorkerPool pool;
  EXPECT_TRUE(SlotsRunConcurrently(pool, 4));
  EXPECT_TRUE(SlotsRunConcurrently(pool, 2));
}

TEST(WorkerPool, ConcurrentCallersEachGetEverySlotOnce) {
  WorkerPool pool;
  constexpr int kCallers = 4;
  std::vector<int> failures(kCallers, 0);
  std::vector<std::thread> callers;
  for (int t = 0; t < kCallers; ++t) {
    callers.emplace_back([&, t] {
      for (int round = 0; round < 50; ++round) {
        if (!EverySlotOnce(pool, 3 + round % 3)) ++failures[t];
      }
    });
  }
  for (std::thread& th : callers) th.join();
  for (int t = 0; t < kCallers; ++t) EXPECT_EQ(failures[t], 0) << "caller " << t;
}

TEST(WorkerPool, NestedJobsFinish) {
  // Jobs posted from inside slots, three deep, with every worker busy at times: the
  // callers run whatever no worker takes, so every level finishes.
  WorkerPool pool;
  std::atomic<int> leaves{0};
  pool.Run(4, [&](int) {
    pool.Run(4, [&](int) { pool.Run(3, [&](int) { ++leaves; }); });
  });
  EXPECT_EQ(leaves, 4 * 4 * 3);
}

TEST(WorkerPool, StopJoinsTheWorkersAndLaterJobsRunOnTheCaller) {
  WorkerPool pool;
  EXPECT_TRUE(EverySlotOnce(pool, 4));
  EXPECT_EQ(pool.NumWorkers(), 3);
  pool.Stop();
  EXPECT_EQ(pool.NumWorkers(), 0);
  const std::thread::id caller = std::this_thread::get_id();
  std::atomic<int> elsewhere{0};
  pool.Run(5, [&](int) {
    if (std::this_thread::get_id() != caller) ++elsewhere;
  });
  EXPECT_EQ(elsewhere, 0);
  EXPECT_TRUE(EverySlotOnce(pool, 5));
  EXPECT_EQ(pool.NumWorkers(), 0);  // none started again
  pool.Stop();                      // idempotent
}

TEST(WorkerPool, StopWaitsForTheSlotsInProgress) {
  // Slots 1 and 2 run on workers and are still running (they wait for `release`) when
  // Stop is called from another thread: Stop returns only after they finished.
  WorkerPool pool;
  std::atomic<int> started{0}, finished{0};
  std::atomic<bool> release{false};
  std::thread caller([&] {
    pool.Run(3, [&](int s) {
      ++started;
      if (s == 0) {  // held until the workers took slots 1 and 2
        WaitFor([&] { return started == 3; });
        return;
      }
      while (!release) std::this_thread::yield();
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      ++finished;
    });
  });
  ASSERT_TRUE(WaitFor([&] { return started == 3; }));  // both workers inside their slots
  std::thread stopper([&] { pool.Stop(); });
  release = true;
  stopper.join();
  EXPECT_EQ(finished, 2);
  caller.join();
  EXPECT_EQ(pool.NumWorkers(), 0);
}

// Counts threads that ran a slot and have since exited (thread_local destructors run
// when a thread ends, i.e. before join returns).
std::atomic<int> ended_workers{0};
struct EndMark {
  bool armed = false;
  ~EndMark() {
    if (armed) ++ended_workers;
  }
};

TEST(WorkerPool, DestroyingAPoolJoinsItsWorkers) {
  ended_workers = 0;
  std::atomic<int> started{0}, on_workers{0};
  {
    WorkerPool pool;
    const std::thread::id caller = std::this_thread::get_id();
    pool.Run(4, [&](int) {
      ++started;
      WaitFor([&] { return started == 4; });  // every slot on its own thread
      if (std::this_thread::get_id() == caller) return;
      thread_local EndMark mark;
      mark.armed = true;
      ++on_workers;
    });
  }
  EXPECT_EQ(on_workers, 3);
  EXPECT_EQ(ended_workers, 3);  // every worker has ended when the destructor returns
}

// Prints when the calling thread ends (its thread_local destructors run).
void ReportThreadEnd() {
  struct Report {
    ~Report() { std::fprintf(stderr, "worker ended\n"); }
  };
  thread_local Report report;
  static_cast<void>(report);
}

// Runs a slot on a worker of the shared pool (one that reports its end), then exit()s:
// 0 if the slot did run on a worker.
[[noreturn]] void RunOnASharedWorkerThenExit() {
  alarm(30);  // a hang fails the test (SIGALRM) rather than timing it out
  const std::thread::id caller = std::this_thread::get_id();
  std::atomic<bool> taken{false};
  std::atomic<bool> on_worker{false};
  WorkerPool::Shared().Run(2, [&](int s) {
    if (s == 0) {  // held until a worker took slot 1
      WaitFor([&] { return taken.load(); });
      return;
    }
    on_worker = std::this_thread::get_id() != caller;
    if (on_worker) ReportThreadEnd();
    taken = true;
  });
  std::exit(on_worker ? 0 : 1);
}

TEST(WorkerPool, ExitJoinsTheSharedPoolsWorkers) {
  // The worker ends before the process does (exit() joins it, so its thread_local
  // destructor prints); a detached worker would be killed silently.
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // a fresh process: a fresh shared pool
  EXPECT_EXIT(RunOnASharedWorkerThenExit(), testing::ExitedWithCode(0), "worker ended");
}

// In a fork()ed child: jobs on the shared pool, then exit(): 0 if every slot ran once
// and on workers of the child's own.
[[noreturn]] void UseTheSharedPoolThenExit() {
  alarm(30);  // a hang fails the test (SIGALRM) rather than timing it out
  WorkerPool& pool = WorkerPool::Shared();
  const bool ok = EverySlotOnce(pool, 4) && SlotsRunConcurrently(pool, 4) &&
                  pool.NumWorkers() == 3;
  std::exit(ok ? 0 : 1);
}

TEST(WorkerPool, ForkedChildStartsItsOwnWorkers) {
  // ThreadSanitizer cannot follow threads started in the child of a multi-threaded fork
  // ("starting new threads after multi-threaded fork is not supported").
#if defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "fork() with threads is outside what ThreadSanitizer supports";
#endif
  // The shared pool has workers here; a child of fork() has none of them. Its jobs still
  // run every slot once, on workers of its own, and it exits cleanly (joining them).
  ASSERT_TRUE(EverySlotOnce(WorkerPool::Shared(), 4));
  GTEST_FLAG_SET(death_test_style, "fast");  // fork() without exec
  EXPECT_EXIT(UseTheSharedPoolThenExit(), testing::ExitedWithCode(0), "");
  // The parent's pool is unchanged.
  EXPECT_TRUE(EverySlotOnce(WorkerPool::Shared(), 4));
}

}  // namespace
}  // namespace parallel
}  // namespace gpe
