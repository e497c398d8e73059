"""Library handle, errors and version (internal)."""

from __future__ import annotations

import ctypes
import threading
from typing import Any, Optional, Tuple

from gpe import _ffi

_lib: Optional[ctypes.CDLL] = None


def lib() -> ctypes.CDLL:
    global _lib
    if _lib is None:
        _lib = _ffi.load_library()
    return _lib


class GpeError(RuntimeError):
    """A GroupPE call failed. `status` is the gpe_status name, str() the message."""

    def __init__(self, status: str, message: str) -> None:
        super().__init__(message)
        self.status: str = status


# The first exception of an application thread pool's batch (gpe.thread_pool) on this
# thread, which the C library cannot carry: check() raises it after the call that ran the
# batch (the library calls parallel_for on the thread that made the call).
_pool_errors = threading.local()


def defer_pool_error(error: BaseException) -> None:
    if getattr(_pool_errors, "error", None) is None:
        _pool_errors.error = error


_close_lock = threading.Lock()


def take_handle(obj: Any) -> Optional[ctypes.c_void_p]:
    """obj._handle swapped for NULL under a lock, the old one returned (None where it was
    already closed): two threads closing one object free its handle once (a check then
    destroy then clear freed it twice)."""
    with _close_lock:
        handle = obj._handle
        if not handle:
            return None
        obj._handle = ctypes.c_void_p()
        return handle


def check(code: int) -> None:
    """Raises a thread pool's deferred exception (see above), else GpeError for a failed
    status."""
    error = getattr(_pool_errors, "error", None)
    if error is not None:
        _pool_errors.error = None
        raise error
    if code != 0:
        l = lib()
        raise GpeError(l.gpe_status_name(code).decode(), l.gpe_last_error_message().decode())


def version() -> Tuple[int, int, int]:
    """(major, minor, patch) of the loaded library."""
    v = lib().gpe_version()
    return (v // 10000, (v // 100) % 100, v % 100)


def version_string() -> str:
    return lib().gpe_version_string().decode()


def live_handle(obj: Any, name: str) -> ctypes.c_void_p:
    """obj's library handle for a call that takes it as an argument: a closed one (NULL)
    would read as "none" there (no encoding, no bias, no RoPE), so it is refused."""
    if not obj._handle:
        raise ValueError("%s (%s) is closed" % (name, type(obj).__name__))
    return obj._handle


def rebuild_recipe(obj: Any, recipe: Optional[Tuple[Any, Tuple[Any, ...]]]) -> Any:
    """__reduce__ of an object owning a library handle: `recipe`, the (callable, args)
    that builds an equal object with a handle of its own (copying the handle would have
    both copies free it, and a ctypes pointer cannot be pickled). ValueError when the
    handle is closed; TypeError when the object has no recipe."""
    if not obj._handle:
        raise ValueError("%s is closed; a closed handle cannot be copied" % type(obj).__name__)
    if recipe is None:
        raise TypeError("%s owns a library handle and cannot be copied or pickled; "
                        "create another one" % type(obj).__name__)
    return recipe
