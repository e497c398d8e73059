#include "parallel/thread_pool.h"

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <new>
#include <set>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace gpe {
namespace parallel {
namespace {

// Every slot of a region runs exactly once, whatever the slot count (below, at and above
// the hardware's thread count).
TEST(ThreadPool, RunsEverySlotOnce) {
  for (int slots : {0, 1, 2, 3, 7, 16, 33}) {
    std::vector<std::atomic<int>> hits(std::max(slots, 1));
    parallel::Run(slots, [&](int s) { hits[s].fetch_add(1); });
    for (int s = 0; s < std::max(slots, 1); ++s) EXPECT_EQ(hits[s].load(), 1) << slots << " " << s;
  }
}

// Workers are started on demand and reused: a region of s slots needs s - 1 of them, and
// later regions start none while enough exist.
TEST(ThreadPool, StartsWorkersOnDemandAndReusesThem) {
  parallel::Run(5, [](int) {});
  const int after_five = internal::BuiltInWorkerCount();
  EXPECT_GE(after_five, 4);
  parallel::Run(3, [](int) {});
  parallel::Run(5, [](int) {});
  EXPECT_EQ(internal::BuiltInWorkerCount(), after_five);
}

// A region started from inside a slot (nested) and regions started from several threads
// at once all finish: the caller claims unclaimed slots itself.
TEST(ThreadPool, NestedAndConcurrentRegionsFinish) {
  std::atomic<int64_t> sum{0};
  parallel::Run(4, [&](int outer) {
    parallel::Run(4, [&](int inner) { sum.fetch_add(outer * 4 + inner); });
  });
  EXPECT_EQ(sum.load(), 120);  // 0 + 1 + ... + 15

  std::atomic<int64_t> total{0};
  std::vector<std::thread> callers;
  for (int c = 0; c < 4; ++c) {
    callers.emplace_back([&] {
      for (int r = 0; r < 50; ++r) parallel::Run(3, [&](int s) { total.fetch_add(s + 1); });
    });
  }
  for (std::thread& t : callers) t.join();
  EXPECT_EQ(total.load(), 4 * 50 * 6);
}

// Chunks partition [0, n) into contiguous pieces n k / c .. n (k + 1) / c, clamped to
// [1, n] chunks.
TEST(ThreadPool, ParallelForChunksPartitionsTheRange) {
  for (int chunks : {1, 3, 8}) {
    for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{5}, int64_t{1000}}) {
      std::mutex mu;
      std::set<std::pair<int64_t, int64_t>> pieces;
      ParallelForChunks(chunks, n, [&](int64_t b, int64_t e) {
        std::lock_guard<std::mutex> lock(mu);
        pieces.insert({b, e});
      });
      int64_t next = 0;
      for (const auto& [b, e] : pieces) {
        EXPECT_EQ(b, next);
        EXPECT_LE(b, e);
        next = e;
      }
      EXPECT_EQ(next, n);
      const int64_t expected = std::max<int64_t>(1, std::min<int64_t>(chunks, n));
      EXPECT_EQ(static_cast<int64_t>(pieces.size()), expected) << chunks << " " << n;
    }
  }
}

// An application's pool that runs a region's tasks on the calling thread, last index
// first (the least helpful order a pool may choose), counting regions and tasks.
struct SerialPool {
  std::atomic<int> regions{0};
  std::atomic<int64_t> tasks{0};
  static void ParallelFor(void* self, int64_t n, void (*task)(void*, int64_t), void* ctx) {
    auto* p = static_cast<SerialPool*>(self);
    p->regions.fetch_add(1);
    for (int64_t i = n - 1; i >= 0; --i) {
      p->tasks.fetch_add(1);
      task(ctx, i);
    }
  }
};

TEST(ThreadPool, ExternalPoolServesEveryRegionUntilReset) {
  SerialPool serial;
  ExternalPool pool;
  pool.user_data = &serial;
  pool.num_threads = 6;
  pool.parallel_for = &SerialPool::ParallelFor;
  SetExternalPool(&pool);
  EXPECT_TRUE(HasExternalPool());
  EXPECT_EQ(DefaultThreads(), 6);
  std::vector<int> order;
  parallel::Run(4, [&](int s) { order.push_back(s); });  // serial: no lock needed
  EXPECT_EQ(order, (std::vector<int>{3, 2, 1, 0}));
  parallel::Run(1, [](int) {});  // one slot runs inline, without a region
  EXPECT_EQ(serial.regions.load(), 1);
  EXPECT_EQ(serial.tasks.load(), 4);

  SetExternalPool(nullptr);
  EXPECT_FALSE(HasExternalPool());
  parallel::Run(4, [](int) {});
  EXPECT_EQ(serial.regions.load(), 1);  // the built-in pool served that one
  EXPECT_GE(DefaultThreads(), 1);
}

// A slot that throws (as a failed allocation does): every other slot still runs, Run
// rethrows the first exception on the caller's thread after the region has finished, and
// the pool serves the next region; the same through an application's pool, whose C
// frames the exception never crosses. (Before, a throwing worker slot ended the process
// and a throwing slot 0 left workers running a finished job.)
TEST(ThreadPool, AThrowingSlotIsRethrownAfterTheRegion) {
  for (bool external : {false, true}) {
    SerialPool serial;
    ExternalPool pool;
    pool.user_data = &serial;
    pool.num_threads = 4;
    pool.parallel_for = &SerialPool::ParallelFor;
    if (external) SetExternalPool(&pool);
    for (int thrower : {0, 2}) {
      std::atomic<int> ran{0};
      EXPECT_THROW(parallel::Run(4,
                                 [&](int s) {
                                   ran.fetch_add(1);
                                   if (s == thrower) throw std::bad_alloc();
                                 }),
                   std::bad_alloc)
          << external << " " << thrower;
      EXPECT_EQ(ran.load(), 4) << external << " " << thrower;
    }
    std::atomic<int> after{0};
    parallel::Run(4, [&](int) { after.fetch_add(1); });
    EXPECT_EQ(after.load(), 4);
    SetExternalPool(nullptr);
  }
}

// A forked child inherits none of the parent's workers: its regions must still finish
// (the pool starts afresh there), and its exit must join the child's workers, not wait
// for the parent's. Run as a plain fork so a hang shows as the test's timeout.
TEST(ThreadPool, ForkedChildRunsRegionsAndExitsCleanly) {
  // ThreadSanitizer cannot follow threads started in the child of a multi-threaded fork
  // ("starting new threads after multi-threaded fork is not supported").
#if defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "fork() with threads is outside what ThreadSanitizer supports";
#endif
  parallel::Run(4, [](int) {});  // the parent has workers now
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    std::atomic<int> hits{0};
    parallel::Run(4, [&](int) { hits.fetch_add(1); });
    std::exit(hits.load() == 4 ? 0 : 3);  // static destructors: workers joined
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

}  // namespace
}  // namespace parallel
}  // namespace gpe
