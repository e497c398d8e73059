"""The thread pool every threaded computation of the library runs on (gpe/thread_pool.h,
since C ABI 0.8.0): the library's built-in pool, or the application's own.

Attention forward, backward and decoding, RoPE with num_threads > 1 and the closed-form
INR fits split their parallel work into batches of independent tasks. By default a pool
built into libgpe runs them on worker threads of its own. An application that owns its
threads installs its own with set_thread_pool(parallel_for, num_threads); from then on
the library starts no threads of its own. set_thread_pool(None) restores the built-in
pool. The setting is process-wide (every thread, every later call) and thread-safe.

parallel_for(n, run) is called with the GIL held, on the thread that made the library
call; it must see to run(i) being called for every i in [0, n), on any threads, and
should return once those calls have returned. run(i) calls the library's task through
ctypes, which releases the GIL while the task runs, so tasks on different threads run
in parallel. For example, over a concurrent.futures.ThreadPoolExecutor:

    executor = concurrent.futures.ThreadPoolExecutor(4)
    gpe.set_thread_pool(lambda n, run: list(executor.map(run, range(n))), num_threads=4)

The library must see every task run exactly once, and its task context must not be
used after the batch returns; the wrapper guarantees both whatever parallel_for does:
- run(i) for an i outside [0, n) raises IndexError, for an i already run RuntimeError,
  and once the batch has returned RuntimeError; none of them runs a task;
- when parallel_for returns or raises, the tasks it has not run are run on the calling
  thread, and the batch waits for the calls of run still in progress before it returns
  to the library;
- an exception cannot cross the C library (ctypes would print and ignore it, and the
  call would go on as if nothing happened). Instead, the first exception raised by
  parallel_for, or by run for a misuse while the batch is open (even one parallel_for
  caught), is kept and raised by the gpe call that made the batch, once the library has
  returned: that call's results are complete (every task ran), but it raises instead of
  returning them. (A run(i) after the batch returned can only raise in its own caller.)

The C library may still be running a batch on a pool after set_thread_pool replaced it
(each parallel region runs on the pool installed when the region starts, so a call in
flight may use the old pool for some regions and the new one for later ones), so every
pool installed, with its ctypes callback, is kept alive until the process exits.
"""

from __future__ import annotations

import contextlib
import ctypes
import operator
import signal
import threading
from typing import Any, Callable, List, Optional, Tuple

from gpe import _core, _ffi
from gpe._core import check, lib

# Every pool ever installed: (struct, ctypes callback, Python callable). Never emptied:
# the library may still be calling any of them.
_INSTALLED: List[Tuple[Any, Any, Callable[..., Any]]] = []
_INSTALL_LOCK = threading.Lock()


class _Batch:
    """One parallel_for call of the library: n tasks of (task, task_ctx)."""

    def __init__(self, n, task, task_ctx):
        self.n, self.task, self.task_ctx = n, task, task_ctx
        self.claimed = bytearray(n)
        self.running = 0  # calls of the task in progress
        self.closed = False  # set when the batch returns to the library
        self.error = None  # the first exception, raised after the library returns
        self.cond = threading.Condition()

    def run(self, i):
        """Runs task i; see the module docstring for the misuses it refuses."""
        i = operator.index(i)
        with self.cond:
            if self.closed:  # too late for the gpe call to raise it
                raise RuntimeError("gpe thread pool: run(%d) after the batch returned" % i)
            if not 0 <= i < self.n:
                misuse = IndexError("gpe thread pool: run(%d) outside [0, %d)" % (i, self.n))
            elif self.claimed[i]:
                misuse = RuntimeError("gpe thread pool: run(%d) called twice" % i)
            else:
                misuse = None
                self.claimed[i] = 1
                self.running += 1
            if misuse is not None:
                if self.error is None:
                    self.error = misuse
                raise misuse
        try:
            self.task(self.task_ctx, i)  # a C call: ctypes releases the GIL
        finally:
            with self.cond:
                self.running -= 1
                self.cond.notify_all()

    def finish(self):
        """Runs the tasks never run here, waits for those still running, and closes. On
        the main thread, Ctrl-C (SIGINT) is held back meanwhile and raised by the gpe call
        once the library returns: raised here, between two tasks or in the wait, it left
        the C callback (printed and ignored), skipping the remaining tasks, and the
        library could return while other threads still ran tasks on its context."""
        with _interrupts_held(self):
            self._finish()

    def _finish(self):
        with self.cond:
            self.closed = True
            rest = [i for i in range(self.n) if not self.claimed[i]]
            for i in rest:
                self.claimed[i] = 1
        for i in rest:
            self.task(self.task_ctx, i)
        with self.cond:
            while self.running:
                self.cond.wait()


@contextlib.contextmanager
def _interrupts_held(batch):
    """SIGINT recorded instead of raised for the block (on the main thread, where Python
    runs signal handlers, and where the handler is Python's); then the batch's error, a
    KeyboardInterrupt, unless it has one."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    got = []
    try:
        old = signal.getsignal(signal.SIGINT)
        if not callable(old) and old not in (signal.SIG_DFL, signal.SIG_IGN):
            raise ValueError("a handler installed outside Python")
        signal.signal(signal.SIGINT, lambda signum, frame: got.append(signum))
    except (ValueError, TypeError, OSError):
        yield  # not settable here (embedded interpreter, a C handler): as before
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)
        if got and old is not signal.SIG_IGN:
            with batch.cond:
                if batch.error is None:
                    batch.error = KeyboardInterrupt()


def _c_parallel_for(parallel_for):
    """The gpe_thread_pool.parallel_for that hands batches to parallel_for(n, run)."""

    def call(_user_data, n, task, task_ctx):
        batch = _Batch(n, task, task_ctx)
        try:
            parallel_for(n, batch.run)
        except BaseException as e:  # raised by the gpe call once the library returns
            with batch.cond:
                if batch.error is None:
                    batch.error = e
        finally:
            batch.finish()
            if batch.error is not None:
                _core.defer_pool_error(batch.error)

    return _ffi.PoolParallelFor(call)


def set_thread_pool(parallel_for: Optional[Callable[[int, Callable[[int], None]], object]] = None,
                    num_threads: Optional[int] = None) -> None:
    """Installs the application's pool for every later call of the process, or restores
    the built-in pool (parallel_for None, num_threads omitted).

    parallel_for(n, run): run(i) for every i in [0, n) (see the module docstring).
    num_threads: the parallelism the library plans for where a call asks for every
    thread (attention's threads=0, the fits' automatic count), 1 .. 1024; required with
    a pool. Raises GpeError (GPE_ERROR_INVALID_ARGUMENT) outside that range, leaving the
    pool in use unchanged. Calls already running finish on the pool they started with."""
    if parallel_for is None:
        if num_threads is not None:
            raise TypeError("num_threads goes with a parallel_for; None restores the built-in "
                            "pool")
        check(lib().gpe_set_thread_pool(None))
        return
    if not callable(parallel_for):
        raise TypeError("parallel_for must be callable: parallel_for(n, run)")
    if num_threads is None:
        raise TypeError("set_thread_pool(parallel_for) needs num_threads (1 .. 1024)")
    num_threads = operator.index(num_threads)
    if not -2**31 <= num_threads < 2**31:  # the library's own check, for an int32_t
        raise _core.GpeError("GPE_ERROR_INVALID_ARGUMENT",
                             "gpe_thread_pool.num_threads must be in [1, 1024]; got %d"
                             % num_threads)
    pool = _ffi.ThreadPool()
    pool.num_threads = num_threads
    callback = _c_parallel_for(parallel_for)
    pool.parallel_for = callback
    with _INSTALL_LOCK:
        status = lib().gpe_set_thread_pool(ctypes.byref(pool))
        if status == 0:
            _INSTALLED.append((pool, callback, parallel_for))
    check(status)


def thread_pool_num_threads() -> int:
    """The thread count a call that asks for every thread uses now: the installed pool's
    num_threads, else the hardware's thread count."""
    n = ctypes.c_int32()
    check(lib().gpe_thread_pool_num_threads(ctypes.byref(n)))
    return n.value
