"""SO(n) representations of the integers: RoPE planes and rank-2 GRAPE-M rotations."""

from __future__ import annotations

import ctypes
from typing import Any, Literal, Optional, Type, TypeVar

import numpy as np
import numpy.typing as npt

from gpe import _ffi
from gpe._core import check, close_handle, hold, lib, rebuild_recipe

INTERLEAVED = 0
HALF_SPLIT = 1
_PAIRINGS = {"interleaved": INTERLEAVED, "half_split": HALF_SPLIT}
_S = TypeVar("_S", bound="SoRepresentation")


def _doubles(values, name):
    arr = np.ascontiguousarray(values, dtype=np.float64)
    if arr.ndim != 1:
        raise ValueError("%s must be one-dimensional" % name)
    return arr, arr.ctypes.data_as(ctypes.POINTER(ctypes.c_double))


class SoRepresentation:
    """rho(p) = exp(p S) in SO(dim) for skew S, applied to batches of vectors.

    Make one with `planes(...)` (commuting 2x2 rotations: RoPE) or `rank2(...)`
    (GRAPE-M's exp(p omega (a b^T - b a^T))). Copies and pickles are built afresh from
    the same arguments (each with its own handle).
    """

    # (callable, args) rebuilding this representation; set by planes() and rank2().
    _recipe: Optional[Any] = None

    def __init__(self, handle: Optional[int]) -> None:
        self._handle = ctypes.c_void_p(handle)

    @classmethod
    def planes(cls: Type[_S], dim: int, rotary_dim: int = 0, base: float = 10000.0,
               thetas: Optional[npt.ArrayLike] = None,
               pairing: Literal["interleaved", "half_split"] = "interleaved") -> _S:
        """RoPE: rotary_dim / 2 planes with frequencies `thetas` (default base^(-2i/r))."""
        if pairing not in _PAIRINGS:
            raise ValueError("pairing must be one of %s" % sorted(_PAIRINGS))
        opts = _ffi.SoPlanesOptions()
        opts.struct_size = ctypes.sizeof(opts)
        opts.pairing = _PAIRINGS[pairing]
        opts.dim = dim
        opts.rotary_dim = rotary_dim
        opts.base = base
        keep = None
        if thetas is not None:
            keep, opts.thetas = _doubles(thetas, "thetas")
            expected = (rotary_dim or dim) // 2
            if keep.size != expected:
                raise ValueError("thetas must hold rotary_dim / 2 = %d values" % expected)
        out = ctypes.c_void_p()
        check(lib().gpe_so_rep_create_planes(ctypes.byref(opts), ctypes.byref(out)))
        rep = cls(out.value)
        rep._recipe = (cls.planes, (dim, rotary_dim, base, None if keep is None else keep.copy(),
                                    pairing))
        return rep

    @classmethod
    def rank2(cls: Type[_S], a: npt.ArrayLike, b: npt.ArrayLike, omega: float = 1.0) -> _S:
        """GRAPE-M rank-2 rotation exp(p omega (a b^T - b a^T))."""
        a_arr, a_ptr = _doubles(a, "a")
        b_arr, b_ptr = _doubles(b, "b")
        if a_arr.size != b_arr.size:
            raise ValueError("a and b must have the same length")
        opts = _ffi.SoRank2Options()
        opts.struct_size = ctypes.sizeof(opts)
        opts.dim = a_arr.size
        opts.a = a_ptr
        opts.b = b_ptr
        opts.omega = omega
        out = ctypes.c_void_p()
        check(lib().gpe_so_rep_create_rank2(ctypes.byref(opts), ctypes.byref(out)))
        rep = cls(out.value)
        rep._recipe = (cls.rank2, (a_arr.copy(), b_arr.copy(), omega))
        return rep

    def close(self) -> None:
        """Frees the library handle (idempotent, also from several threads at once; also
        done when garbage-collected). Calls on this object running on other threads keep
        it until the last of them returns; later calls raise ValueError."""
        close_handle(self, lambda h: lib().gpe_so_rep_destroy(h))

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown
            pass

    def __reduce__(self) -> Any:
        return rebuild_recipe(self, self._recipe)

    def __enter__(self: _S) -> _S:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def dim(self) -> int:
        d = ctypes.c_int64()
        with hold(self) as h:
            check(lib().gpe_so_rep_dim(h, ctypes.byref(d)))
        return d.value

    def apply(self, positions: npt.ArrayLike, x: npt.ArrayLike,
              out: Optional[npt.NDArray[Any]] = None) -> npt.NDArray[Any]:
        """out[n] = rho(positions[n]) x[n] for x of shape [N, dim], float32 or float64.

        `out=x` rotates in place. Without `out`, a new array of x's dtype is returned.
        Inputs are passed without copies (any strides)."""
        positions = _ffi.int64_array(positions, "positions")
        x = _ffi.array_arg(x, "x")
        if out is None:
            out = np.empty(x.shape, dtype=x.dtype)
        tp, kp = _ffi.as_dltensor(positions, output=False)
        tx, kx = _ffi.as_dltensor(x, output=False)
        to, ko = _ffi.as_dltensor(out, output=True)
        with hold(self) as h:
            check(lib().gpe_so_rep_apply(h, ctypes.byref(tp), ctypes.byref(tx),
                                         ctypes.byref(to)))
        del kp, kx, ko
        return out

    def matrix(self, position: int) -> npt.NDArray[np.float64]:
        """The dense float64 matrix rho(position)."""
        d = self.dim
        out = np.empty((d, d), dtype=np.float64)
        t, keep = _ffi.as_dltensor(out, output=True)
        with hold(self) as h:
            check(lib().gpe_so_rep_matrix(h, _ffi.checked_int(position, "position"),
                                          ctypes.byref(t)))
        del keep
        return out
