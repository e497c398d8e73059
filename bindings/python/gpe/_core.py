"""Library handle, errors and version (internal)."""

from __future__ import annotations

import ctypes
import threading
from typing import Any, Callable, Optional, Tuple

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


# Guards every object's _handle, _gpe_uses and _gpe_pending (held briefly: never across
# a library call). Reentrant: a garbage collection inside a held section may run another
# object's __del__, whose close() takes it again on the same thread (a plain Lock
# deadlocked there).
_close_lock = threading.RLock()


def close_handle(obj: Any, destroy: Callable[[ctypes.c_void_p], Any]) -> None:
    """Frees obj's library handle with `destroy`, once: obj._handle becomes NULL under a
    lock, so two threads closing one object free it once (a check then destroy then clear
    freed it twice). While calls on obj are running on other threads (inside hold()), the
    last of them to finish frees it instead: close() never frees what a call is reading."""
    with _close_lock:
        handle = obj._handle
        if not handle:
            return
        obj._handle = ctypes.c_void_p()
        if getattr(obj, "_gpe_uses", 0) > 0:
            obj._gpe_pending = (destroy, handle)
            return
    destroy(handle)


class hold:
    """`with hold(obj, "name") as h:` obj's library handle h for a call that passes it to
    the library: ValueError when obj is closed (a NULL handle would read as "none" in
    options: no encoding, no bias, no RoPE), and a close() on another thread meanwhile
    leaves it to this block's end (close_handle)."""

    __slots__ = ("_obj", "_name")

    def __init__(self, obj: Any, name: Optional[str] = None) -> None:
        self._obj = obj
        self._name = name

    def __enter__(self) -> ctypes.c_void_p:
        obj = self._obj
        with _close_lock:
            handle = obj._handle
            if handle:
                obj._gpe_uses = getattr(obj, "_gpe_uses", 0) + 1
                return handle
        what = type(obj).__name__  # the error built outside the lock
        raise ValueError("%s (%s) is closed" % (self._name, what) if self._name
                         else "%s is closed" % what)

    def __exit__(self, *exc: object) -> None:
        release(self._obj)


def release(obj: Any) -> None:
    """Ends one use that hold() began; frees a handle closed meanwhile when this was the
    last."""
    with _close_lock:
        obj._gpe_uses -= 1
        pending = getattr(obj, "_gpe_pending", None) if obj._gpe_uses == 0 else None
        if pending is not None:
            obj._gpe_pending = None
    if pending is not None:
        pending[0](pending[1])


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


class _Use:
    """One use of obj (begun by hold()), ended when this token is collected: the end of
    the call whose keep-alive list holds it."""

    __slots__ = ("_obj",)

    def __init__(self, obj: Any) -> None:
        self._obj = obj

    def __del__(self) -> None:
        try:
            release(self._obj)
        except Exception:  # interpreter shutdown
            pass


def live_handle(obj: Any, name: str, keep: list) -> ctypes.c_void_p:
    """obj's library handle for a call that takes it as an argument (an option), held as
    hold() holds it until `keep`, the call's keep-alive list, is collected: a closed one
    (NULL) would read as "none" there (no encoding, no bias, no RoPE), so it is refused."""
    handle = hold(obj, name).__enter__()
    keep.append(_Use(obj))
    return handle


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
