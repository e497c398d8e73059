"""Tests of gpe.set_thread_pool (C ABI 0.8.0): the threaded calls (attention forward,
RoPE with num_threads > 1) run their tasks on an application's pool over a
concurrent.futures.ThreadPoolExecutor, each task once, with the built-in pool's bits;
bad pools are refused; None restores the built-in pool; an exception in the pool, or a
pool that skips, repeats or invents tasks or returns early, still gets every task run
once, and the exception is raised by the gpe call. Run by `bazel test`."""

import concurrent.futures
import threading
import unittest

import sanitizer_preload
from gpe import _ffi

sanitizer_preload.reexec_if_needed(next((str(p) for p in _ffi._candidates() if p.is_file()), None))

import numpy as np  # noqa: E402

import gpe  # noqa: E402

RNG = np.random.default_rng(20261127)
# Attention on [1, 200, 4, 32] queries over 2 kv heads (float32: the optimised kernels),
# and RoPE on [2, 300, 4, 64]: big enough for both to make parallel regions.
Q = RNG.uniform(-0.5, 0.5, (1, 200, 4, 32)).astype(np.float32)
K = RNG.uniform(-0.5, 0.5, (1, 200, 2, 32)).astype(np.float32)
V = RNG.uniform(-0.5, 0.5, (1, 200, 2, 32)).astype(np.float32)
X = RNG.uniform(-1.0, 1.0, (2, 300, 4, 64)).astype(np.float32)


def attention(threads=3, out=None):
    # An explicit thread count: the same split of the work on either pool.
    return gpe.attention(Q, K, V, threads=threads, out=out)


def rope(out=None):
    return gpe.Rope(64, num_threads=4).forward(X, out=out)


def workload(threads=3):
    return [attention(threads), rope()]


class ExecutorPool:
    """parallel_for over a ThreadPoolExecutor, recording each batch's indices and the
    threads that ran them."""

    def __init__(self, workers=3):
        self.executor = concurrent.futures.ThreadPoolExecutor(workers)
        self.batches = []  # [(n, [indices run])]
        self.threads = set()
        self.lock = threading.Lock()

    def __call__(self, n, run):
        ran = []

        def one(i):
            with self.lock:
                ran.append(i)
                self.threads.add(threading.get_ident())
            run(i)

        list(self.executor.map(one, range(n)))  # waits for all; raises the first error
        self.batches.append((n, ran))


class ThreadPoolTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        gpe.set_thread_pool(None)
        cls.built_in_threads = gpe.thread_pool_num_threads()
        cls.reference = workload()

    def tearDown(self):
        gpe.set_thread_pool(None)

    def assertSameBits(self, got, want, what=""):
        self.assertEqual(len(got), len(want))
        for g, w in zip(got, want):
            self.assertEqual(g.shape, w.shape, what)
            self.assertEqual(g.dtype, w.dtype, what)
            self.assertTrue(g.tobytes() == w.tobytes(), "%s: not the built-in pool's bits" % what)

    def test_built_in_pool(self):
        self.assertGreaterEqual(self.built_in_threads, 1)
        self.assertSameBits(workload(), self.reference, "built-in pool, again")

    def test_executor_pool_runs_every_task_once_with_the_built_in_bits(self):
        pool = ExecutorPool(3)
        gpe.set_thread_pool(pool, num_threads=3)
        self.assertEqual(gpe.thread_pool_num_threads(), 3)
        self.assertSameBits(workload(), self.reference, "executor pool")
        self.assertGreaterEqual(len(pool.batches), 2)  # attention and RoPE
        for n, ran in pool.batches:
            self.assertGreaterEqual(n, 2)
            self.assertEqual(sorted(ran), list(range(n)))
        self.assertNotIn(threading.get_ident(), pool.threads)  # the executor's threads ran them
        # threads=0 plans for the installed pool's num_threads, 3: the same split.
        batches = len(pool.batches)
        self.assertSameBits([attention(threads=0)], self.reference[:1], "threads=0")
        self.assertGreater(len(pool.batches), batches)

    def test_bad_pools_are_refused_and_leave_the_current_pool(self):
        pool = ExecutorPool(2)
        for bad in (0, -1, 1025, 2000, 2**40):
            with self.assertRaises(gpe.GpeError) as e:
                gpe.set_thread_pool(pool, num_threads=bad)
            self.assertEqual(e.exception.status, "GPE_ERROR_INVALID_ARGUMENT")
            self.assertIn("num_threads", str(e.exception))
            self.assertEqual(gpe.thread_pool_num_threads(), self.built_in_threads)
        with self.assertRaises(TypeError):
            gpe.set_thread_pool(pool)  # num_threads is required with a pool
        with self.assertRaises(TypeError):
            gpe.set_thread_pool(42, num_threads=2)
        with self.assertRaises(TypeError):
            gpe.set_thread_pool(None, num_threads=2)
        self.assertSameBits(workload(), self.reference, "after refused pools")
        self.assertEqual(pool.batches, [])
        # With a pool installed, a refused one leaves it in place.
        gpe.set_thread_pool(pool, num_threads=2)
        with self.assertRaises(gpe.GpeError):
            gpe.set_thread_pool(ExecutorPool(2), num_threads=0)
        self.assertEqual(gpe.thread_pool_num_threads(), 2)
        self.assertSameBits(workload(), self.reference, "the installed pool")
        self.assertGreaterEqual(len(pool.batches), 2)

    def test_none_restores_the_built_in_pool(self):
        pool = ExecutorPool(2)
        gpe.set_thread_pool(pool, num_threads=1024)
        self.assertEqual(gpe.thread_pool_num_threads(), 1024)
        self.assertSameBits(workload(), self.reference, "1024-thread pool")
        batches = len(pool.batches)
        self.assertGreaterEqual(batches, 2)
        gpe.set_thread_pool(None)
        self.assertEqual(gpe.thread_pool_num_threads(), self.built_in_threads)
        self.assertSameBits(workload(), self.reference, "restored")
        self.assertEqual(len(pool.batches), batches)
        gpe.set_thread_pool()  # twice is harmless
        self.assertEqual(gpe.thread_pool_num_threads(), self.built_in_threads)

    def test_serial_pool(self):
        # Every task on the calling thread, in reverse: correct, only slower.
        gpe.set_thread_pool(lambda n, run: [run(i) for i in reversed(range(n))], num_threads=3)
        self.assertSameBits(workload(), self.reference, "serial pool")

    def test_an_exception_in_the_pool_is_raised_by_the_call_with_complete_results(self):
        calls = []

        def failing(n, run):
            calls.append(n)
            run(0)
            raise ValueError("pool failure on purpose")

        gpe.set_thread_pool(failing, num_threads=3)
        # The library cannot carry the exception: the wrapper runs tasks 1 .. n-1 itself,
        # and the call raises once the library has returned, its outputs complete.
        out = np.full_like(Q, np.nan)
        with self.assertRaisesRegex(ValueError, "pool failure on purpose"):
            attention(out=out)
        self.assertSameBits([out], self.reference[:1], "attention out= after the exception")
        y = np.full_like(X, np.nan)
        with self.assertRaisesRegex(ValueError, "pool failure on purpose"):
            rope(out=y)
        self.assertSameBits([y], self.reference[1:], "RoPE out= after the exception")
        self.assertGreaterEqual(len(calls), 2)
        # Nothing is left pending: a call that makes no batch does not raise.
        gpe.set_thread_pool(None)
        self.assertSameBits(workload(), self.reference, "restored after the exception")

    def test_an_exception_in_a_worker_is_raised_by_the_call(self):
        executor = concurrent.futures.ThreadPoolExecutor(3)

        def one(run, i):
            if i == 1:
                raise KeyError("worker failure on purpose")
            run(i)

        gpe.set_thread_pool(lambda n, run: list(executor.map(lambda i: one(run, i), range(n))),
                            num_threads=3)
        out = np.full_like(Q, np.nan)
        with self.assertRaisesRegex(KeyError, "worker failure on purpose"):
            attention(out=out)
        self.assertSameBits([out], self.reference[:1], "after a worker's exception")

    def test_misuses_of_run_are_refused_and_raised(self):
        def twice(n, run):
            for i in range(n):
                run(i)
            try:
                run(0)  # caught here, raised by the gpe call all the same
            except RuntimeError:
                pass

        gpe.set_thread_pool(twice, num_threads=3)
        out = np.full_like(Q, np.nan)
        with self.assertRaisesRegex(RuntimeError, r"run\(0\) called twice"):
            attention(out=out)
        self.assertSameBits([out], self.reference[:1], "a repeated index")

        gpe.set_thread_pool(lambda n, run: run(n), num_threads=3)
        out = np.full_like(Q, np.nan)
        with self.assertRaisesRegex(IndexError, r"outside \[0, "):
            attention(out=out)
        self.assertSameBits([out], self.reference[:1], "an index out of range")

        gpe.set_thread_pool(lambda n, run: run(0.5), num_threads=3)
        with self.assertRaises(TypeError):
            attention()

    def test_skipped_tasks_run_on_the_calling_thread(self):
        # Runs only the even indices: the wrapper runs the rest when parallel_for returns.
        gpe.set_thread_pool(lambda n, run: [run(i) for i in range(0, n, 2)], num_threads=3)
        self.assertSameBits(workload(), self.reference, "a pool that skips tasks")

    def test_a_pool_that_returns_early_is_waited_for(self):
        # Submits every task and returns without waiting: the batch runs what was not
        # started and waits for the rest before the library sees it return.
        executor = concurrent.futures.ThreadPoolExecutor(3)
        started = threading.Event()

        def slow(run, i):
            started.set()
            run(i)

        def fire_and_forget(n, run):
            for i in range(n):
                executor.submit(slow, run, i)
            started.wait()

        gpe.set_thread_pool(fire_and_forget, num_threads=3)
        for _ in range(5):
            self.assertSameBits(workload(), self.reference, "a pool that returns early")
        executor.shutdown(wait=True)


class CloseDuringCallTest(unittest.TestCase):
    """close() on one thread while another thread's call runs on the object freed its
    handle under the call (a read of freed memory). A call now holds the handles it
    passes: close() returns at once, marks the object closed, and the last call on it
    frees the handle when it returns. An application pool that blocks until released
    keeps the call surely in flight while close() runs. Both ways a handle reaches the
    library: as the object of a method (Rope.forward) and as an option (gpe.attention's
    rope=). The results equal an open handle's bit for bit (the same kernel and split);
    afterwards the handle is freed (no use left, nothing pending) and a new call raises
    ValueError."""

    def tearDown(self):
        gpe.set_thread_pool(None)

    def check_close_during(self, call, rope):
        want = call()
        entered, go = threading.Event(), threading.Event()

        def blocking_pool(n, run):
            entered.set()
            go.wait(30)
            for i in range(n):
                run(i)

        gpe.set_thread_pool(blocking_pool, num_threads=4)
        result = {}
        t = threading.Thread(target=lambda: result.setdefault("y", call()))
        t.start()
        self.assertTrue(entered.wait(30), "the call did not reach the pool")
        self.assertEqual(rope._gpe_uses, 1)
        rope.close()  # returns at once: the running call holds the handle
        self.assertFalse(rope._handle)
        self.assertIsNotNone(rope._gpe_pending)
        go.set()
        t.join(30)
        self.assertFalse(t.is_alive())
        self.assertEqual(result["y"].tobytes(), want.tobytes())
        self.assertEqual(rope._gpe_uses, 0)
        self.assertIsNone(rope._gpe_pending)
        with self.assertRaisesRegex(ValueError, "closed"):
            call()

    def test_method_call(self):
        rope = gpe.Rope(64, num_threads=4)
        self.check_close_during(lambda: rope.forward(X), rope)

    def test_option_of_attention(self):
        rope = gpe.Rope(32)
        self.check_close_during(lambda: gpe.attention(Q, K, V, threads=3, rope=rope), rope)

    def test_a_collection_inside_a_held_section_does_not_deadlock(self):
        # The "is closed" error was built while the (non-reentrant) lock was held: a
        # garbage collection there ran a cyclic Rope's __del__, whose close() waited for
        # the same lock forever. Collections are forced at every allocation count.
        import gc
        from gpe._core import hold
        closed = gpe.Rope(64)
        closed.close()

        class Cycle:
            pass

        for n in range(1, 200):
            gc.collect()
            c = Cycle()
            c.me, c.rope = c, gpe.Rope(64)
            del c
            gc.set_threshold(n)
            try:
                with self.assertRaises(ValueError):
                    with hold(closed):
                        pass
            finally:
                gc.set_threshold(700)


class InterruptDuringBatchTest(unittest.TestCase):
    """Ctrl-C while the calling thread runs a batch's leftover tasks (an application pool
    that ran none): the KeyboardInterrupt left the C callback (printed, ignored), the
    rest of the tasks never ran and the call returned as if it had succeeded. Now every
    task runs and the call raises KeyboardInterrupt once the library returns. The signal
    comes 2 ms into the pool call, while the ~0.1 s of tasks run on the calling thread."""

    def tearDown(self):
        gpe.set_thread_pool(None)

    def test_every_task_runs_and_the_interrupt_is_raised_after(self):
        import os
        import signal
        x = RNG.uniform(-1.0, 1.0, (1, 32768, 8, 128)).astype(np.float32)
        rope = gpe.Rope(128, num_threads=4)
        want = rope.forward(x)

        def lazy_pool(n, run):
            threading.Timer(0.002, os.kill, (os.getpid(), signal.SIGINT)).start()

        gpe.set_thread_pool(lazy_pool, num_threads=4)
        out = np.zeros_like(x)
        with self.assertRaises(KeyboardInterrupt):
            rope.forward(x, out=out)
        gpe.set_thread_pool(None)
        self.assertEqual(out.tobytes(), want.tobytes())


if __name__ == "__main__":
    unittest.main()
