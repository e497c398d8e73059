"""Sequence encodings of int64 token positions (gpe.h, "Sequence encodings").

- sinusoidal(): Vaswani et al.'s absolute encoding, exact angle reduction at any position.
- LearnedPositions: a learned absolute table, lookup and gradient accumulation.
- GrapeM: GRAPE-M, a product of rank-2 rotations exp(p omega_k (a_k b_k^T - b_k a_k^T)).
- AlgebraicSequence: Kogkalidis et al.'s W^p = exp(p S) for a learned skew S.
- shaw_key_scores(): Shaw et al.'s relative key term q_i . aK[clip(j - i, -k, k)].

Batches are NumPy arrays [N, dim] of float32 or float64 (any strides, passed without
copies); positions are integers [N]. Parameters and parameter gradients are float64.
"""

from __future__ import annotations

import ctypes
from typing import Any, List, Optional, Sequence, Tuple, TypeVar, Union

import numpy as np
import numpy.typing as npt

from gpe import _ffi
from gpe._core import check, close_handle, hold, lib, rebuild_recipe


def _positions(positions: Any, name: str = "positions") -> npt.NDArray[np.int64]:
    """Integer positions as int64 (gpe._ffi.int64_array: uint64 values >= 2^63 and
    non-integers refused rather than wrapped or truncated)."""
    return _ffi.int64_array(positions, name)


def _doubles(values: Any, name: str, ndim: int) -> Tuple[npt.NDArray[np.float64], Any]:
    arr = np.ascontiguousarray(values, dtype=np.float64)
    if arr.ndim != ndim:
        raise ValueError("%s must be %d-dimensional" % (name, ndim))
    return arr, arr.ctypes.data_as(ctypes.POINTER(ctypes.c_double))


class _Call:
    """Describes NumPy arrays as DLTensors for one call, keeping them alive."""

    def __init__(self):
        self._keep = []

    def __call__(self, array, output=False):
        if array is None:
            return None
        t, keep = _ffi.as_dltensor(array, output=output)
        self._keep.append((t, keep))
        return ctypes.byref(t)

    def out(self, array):
        """An array the library writes into (refused when read-only)."""
        return self(array, output=True)


def sinusoidal(positions: npt.ArrayLike, dim: int, base: float = 10000.0,
               dtype: npt.DTypeLike = np.float64,
               out: Optional[npt.NDArray[Any]] = None) -> npt.NDArray[Any]:
    """PE[n, 2i] = sin(p theta_i), PE[n, 2i + 1] = cos(p theta_i), theta_i = base^(-2i/dim).

    Returns an [N, dim] array of `dtype` (or fills `out`)."""
    positions = _positions(positions)
    if out is None:
        out = np.empty((positions.shape[0] if positions.ndim else 0, dim), dtype=dtype)
    opts = _ffi.SinusoidalOptions()
    opts.struct_size = ctypes.sizeof(opts)
    opts.base = base
    t = _Call()
    check(lib().gpe_sinusoidal_encode(ctypes.byref(opts), t(positions), t.out(out)))
    return out


def shaw_key_scores(q: npt.ArrayLike, label_table: npt.ArrayLike,
                    query_positions: npt.ArrayLike, key_positions: npt.ArrayLike,
                    out: Optional[npt.NDArray[np.float64]] = None) -> npt.NDArray[np.float64]:
    """scores[a, b] = q[a] . label_table[clip(kp[b] - qp[a], -k, k) + k], k = (rows - 1) / 2.

    q: [Lq, d]; label_table: [2k + 1, d]; returns float64 [Lq, Lk] (or fills `out`)."""
    qp = _positions(query_positions, "query_positions")
    kp = _positions(key_positions, "key_positions")
    q, label_table = np.asarray(q), np.asarray(label_table)
    if out is None:
        out = np.empty((qp.shape[0], kp.shape[0]), dtype=np.float64)
    t = _Call()
    check(lib().gpe_shaw_key_scores(t(q), t(label_table), t(qp), t(kp), t.out(out)))
    return out


def shaw_key_scores_backward(
        q: npt.ArrayLike, label_table: npt.ArrayLike, query_positions: npt.ArrayLike,
        key_positions: npt.ArrayLike, grad_scores: npt.ArrayLike,
        grad_label_table: Optional[npt.NDArray[np.float64]] = None
) -> Tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """Returns (grad_q, grad_label_table); dL/dlabel_table is added into grad_label_table
    (a new float64 zero array when None)."""
    qp = _positions(query_positions, "query_positions")
    kp = _positions(key_positions, "key_positions")
    q, label_table = np.asarray(q), np.asarray(label_table)
    grad_scores = np.asarray(grad_scores)
    grad_q = np.empty(q.shape, dtype=np.float64)
    if grad_label_table is None:
        grad_label_table = np.zeros(label_table.shape, dtype=np.float64)
    t = _Call()
    check(lib().gpe_shaw_key_scores_backward(t(q), t(label_table), t(qp), t(kp), t(grad_scores),
                                             t.out(grad_q), t.out(grad_label_table)))
    return grad_q, grad_label_table


_H = TypeVar("_H", bound="_Handle")


class _Handle:
    """A library handle. The handles are immutable, so copy.copy, copy.deepcopy and pickle
    build a new, equal handle from the arguments (the subclasses that set _recipe or
    override _copy_recipe); the others refuse with a TypeError."""

    # The library's destroy function for this handle type (set by each subclass).
    _destroy: Optional[str] = None
    # (callable, args) rebuilding this handle (private copies of array arguments).
    _recipe: Optional[Tuple[Any, Tuple[Any, ...]]] = None

    def __init__(self, handle: Optional[int]) -> None:
        self._handle = ctypes.c_void_p(handle)

    def close(self) -> None:
        """Frees the library handle (idempotent, also from several threads at once; also
        done when garbage-collected). Calls on this object running on other threads keep
        it until the last of them returns; later calls raise ValueError."""
        # _destroy is a str in every subclass that holds a handle.
        close_handle(self, lambda h: getattr(lib(), self._destroy)(h))  # type: ignore[arg-type]

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown
            pass

    def _copy_recipe(self) -> Optional[Tuple[Any, Tuple[Any, ...]]]:
        return self._recipe

    def __reduce__(self) -> Any:
        return rebuild_recipe(self, self._copy_recipe() if self._handle else None)

    def __enter__(self: _H) -> _H:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _apply(self, fn, positions, x, out):
        positions = _positions(positions)
        if not isinstance(x, np.ndarray):
            x = np.asarray(x)
        if out is None:
            out = np.empty(x.shape, dtype=x.dtype)
        t = _Call()
        with hold(self) as h:
            check(fn(h, t(positions), t(x), t.out(out)))
        return out

    def _matrix(self, fn, position, dim):
        out = np.empty((dim, dim), dtype=np.float64)
        t = _Call()
        with hold(self) as h:
            check(fn(h, _ffi.checked_int(position, "position"), t.out(out)))
        return out


class LearnedPositions(_Handle):
    """A learned [max_positions, dim] table (copied); position p reads row p."""

    _destroy = "gpe_learned_positions_destroy"

    def __init__(self, table: npt.ArrayLike) -> None:
        table = np.asarray(table)
        out = ctypes.c_void_p()
        t = _Call()
        check(lib().gpe_learned_positions_create(t(table), ctypes.byref(out)))
        super().__init__(out.value)

    def _copy_recipe(self) -> Optional[Tuple[Any, Tuple[Any, ...]]]:
        # The table read back (its stored float64 values), not kept twice.
        rows = self.shape[0]
        return (type(self), (self.lookup(np.arange(rows, dtype=np.int64)),))

    @property
    def shape(self) -> Tuple[int, int]:
        """(max_positions, dim)."""
        rows, dim = ctypes.c_int64(), ctypes.c_int64()
        with hold(self) as h:
            check(lib().gpe_learned_positions_shape(h, ctypes.byref(rows),
                                                    ctypes.byref(dim)))
        return (rows.value, dim.value)

    def lookup(self, positions: npt.ArrayLike, dtype: npt.DTypeLike = np.float64,
               out: Optional[npt.NDArray[Any]] = None) -> npt.NDArray[Any]:
        """out[n] = table[positions[n]]."""
        positions = _positions(positions)
        if out is None:
            out = np.empty((positions.shape[0], self.shape[1]), dtype=dtype)
        t = _Call()
        with hold(self) as h:
            check(lib().gpe_learned_positions_lookup(h, t(positions), t.out(out)))
        return out

    def backward(self, positions: npt.ArrayLike, grad_out: npt.ArrayLike,
                 grad_table: Optional[npt.NDArray[Any]] = None) -> npt.NDArray[Any]:
        """grad_table[positions[n]] += grad_out[n] (accumulates; a new float64 zero table
        when grad_table is None). Returns grad_table."""
        positions = _positions(positions)
        grad_out = np.asarray(grad_out)
        if grad_table is None:
            grad_table = np.zeros(self.shape, dtype=np.float64)
        t = _Call()
        with hold(self) as h:
            check(lib().gpe_learned_positions_backward(h, t(positions), t(grad_out),
                                                       t.out(grad_table)))
        return grad_table


class GrapeM(_Handle):
    """G(p) = G_1(p) ... G_m(p), G_k(p) = exp(p omega_k (a_k b_k^T - b_k a_k^T)).

    a, b: [m, dim]; omega: [m] (a 1-D a, b and scalar omega give m = 1)."""

    _destroy = "gpe_grape_m_destroy"

    def __init__(self, a: npt.ArrayLike, b: npt.ArrayLike, omega: npt.ArrayLike) -> None:
        a_arr, a_ptr = _doubles(np.atleast_2d(a), "a", 2)
        b_arr, b_ptr = _doubles(np.atleast_2d(b), "b", 2)
        w_arr, w_ptr = _doubles(np.atleast_1d(omega), "omega", 1)
        if a_arr.shape != b_arr.shape or w_arr.shape != (a_arr.shape[0],):
            raise ValueError("a and b must be [m, dim] and omega [m]; got %s, %s, %s"
                             % (a_arr.shape, b_arr.shape, w_arr.shape))
        opts = _ffi.GrapeMOptions()
        opts.struct_size = ctypes.sizeof(opts)
        opts.num_generators, opts.dim = a_arr.shape
        opts.a, opts.b, opts.omega = a_ptr, b_ptr, w_ptr
        out = ctypes.c_void_p()
        check(lib().gpe_grape_m_create(ctypes.byref(opts), ctypes.byref(out)))
        super().__init__(out.value)
        self._recipe = (type(self), (a_arr.copy(), b_arr.copy(), w_arr.copy()))

    @property
    def shape(self) -> Tuple[int, int]:
        """(num_generators, dim)."""
        d, m = ctypes.c_int64(), ctypes.c_int64()
        with hold(self) as h:
            check(lib().gpe_grape_m_shape(h, ctypes.byref(d), ctypes.byref(m)))
        return (m.value, d.value)

    @property
    def dim(self) -> int:
        return self.shape[1]

    def apply(self, positions: npt.ArrayLike, x: npt.ArrayLike,
              out: Optional[npt.NDArray[Any]] = None) -> npt.NDArray[Any]:
        """out[n] = G(positions[n]) x[n]; out=x works in place."""
        return self._apply(lib().gpe_grape_m_apply, positions, x, out)

    def matrix(self, position: int) -> npt.NDArray[np.float64]:
        return self._matrix(lib().gpe_grape_m_matrix, position, self.dim)

    def backward(self, positions: npt.ArrayLike, x: npt.ArrayLike, grad_out: npt.ArrayLike
                 ) -> Tuple[npt.NDArray[Any], npt.NDArray[np.float64], npt.NDArray[np.float64],
                            npt.NDArray[np.float64]]:
        """Returns (grad_x, grad_a, grad_b, grad_omega) for dL/d(apply(positions, x))."""
        positions = _positions(positions)
        x, grad_out = np.asarray(x), np.asarray(grad_out)
        m, d = self.shape
        grad_x = np.empty(x.shape, dtype=x.dtype)
        grad_a, grad_b = np.empty((m, d)), np.empty((m, d))
        grad_omega = np.empty(m)
        t = _Call()
        with hold(self) as h:
            check(lib().gpe_grape_m_backward(h, t(positions), t(x), t(grad_out),
                                             t.out(grad_x), t.out(grad_a), t.out(grad_b),
                                             t.out(grad_omega)))
        return grad_x, grad_a, grad_b, grad_omega


class AlgebraicSequence(_Handle):
    """W^p = exp(p S) for a skew-symmetric S [dim, dim] (Kogkalidis et al., sec. 3.1)."""

    _destroy = "gpe_algebraic_sequence_destroy"

    def __init__(self, skew: npt.ArrayLike) -> None:
        s_arr, s_ptr = _doubles(skew, "skew", 2)
        if s_arr.shape[0] != s_arr.shape[1]:
            raise ValueError("skew must be square; got %s" % (s_arr.shape,))
        opts = _ffi.AlgebraicSequenceOptions()
        opts.struct_size = ctypes.sizeof(opts)
        opts.dim = s_arr.shape[0]
        opts.skew = s_ptr
        out = ctypes.c_void_p()
        check(lib().gpe_algebraic_sequence_create(ctypes.byref(opts), ctypes.byref(out)))
        super().__init__(out.value)
        self._recipe = (type(self), (s_arr.copy(),))

    @property
    def dim(self) -> int:
        d = ctypes.c_int64()
        with hold(self) as h:
            check(lib().gpe_algebraic_sequence_dim(h, ctypes.byref(d)))
        return d.value

    def apply(self, positions: npt.ArrayLike, x: npt.ArrayLike,
              out: Optional[npt.NDArray[Any]] = None) -> npt.NDArray[Any]:
        """out[n] = W^positions[n] x[n]; out=x works in place."""
        return self._apply(lib().gpe_algebraic_sequence_apply, positions, x, out)

    def matrix(self, position: int) -> npt.NDArray[np.float64]:
        return self._matrix(lib().gpe_algebraic_sequence_matrix, position, self.dim)

    def backward(self, positions: npt.ArrayLike, x: npt.ArrayLike, grad_out: npt.ArrayLike
                 ) -> Tuple[npt.NDArray[Any], npt.NDArray[np.float64]]:
        """Returns (grad_x, grad_skew); grad_skew is dL/dS entrywise (unprojected)."""
        positions = _positions(positions)
        x, grad_out = np.asarray(x), np.asarray(grad_out)
        d = self.dim
        grad_x = np.empty(x.shape, dtype=x.dtype)
        grad_skew = np.empty((d, d))
        t = _Call()
        with hold(self) as h:
            check(lib().gpe_algebraic_sequence_backward(h, t(positions), t(x), t(grad_out),
                                                        t.out(grad_x), t.out(grad_skew)))
        return grad_x, grad_skew


# ---- Algebraic trees, grids, periodic domains, locality (Kogkalidis et al.) -----------


class AlgebraicTree(_Handle):
    """A k-ary tree: branch c acts by W_c = exp(S_c), node (c_1, ..., c_m) by
    W_{c_1} ... W_{c_m} (Kogkalidis et al., sec. 3.2). skews: [k, dim, dim], each skew."""

    _destroy = "gpe_algebraic_tree_destroy"

    def __init__(self, skews: npt.ArrayLike) -> None:
        arr, ptr = _doubles(skews, "skews", 3)
        if arr.shape[1] != arr.shape[2]:
            raise ValueError("skews must be [k, dim, dim]; got %s" % (arr.shape,))
        opts = _ffi.AlgebraicTreeOptions()
        opts.struct_size = ctypes.sizeof(opts)
        opts.num_branches, opts.dim = arr.shape[0], arr.shape[1]
        opts.skews = ptr
        out = ctypes.c_void_p()
        check(lib().gpe_algebraic_tree_create(ctypes.byref(opts), ctypes.byref(out)))
        super().__init__(out.value)
        self._recipe = (type(self), (arr.copy(),))
        self.dim: int = arr.shape[1]
        self.num_branches: int = arr.shape[0]

    @staticmethod
    def addresses(paths: Sequence[Sequence[int]]) -> npt.NDArray[np.int64]:
        """A list of child-index paths as the int64 [N, L] array the library reads
        (rows padded with -1)."""
        depth = max((len(p) for p in paths), default=0)
        out = np.full((len(paths), max(depth, 1)), -1, dtype=np.int64)
        for r, path in enumerate(paths):
            # Integers only (int64_array: floats and booleans were truncated by the
            # assignment), one path per row.
            row = _ffi.int64_array(path, "addresses[%d]" % r)
            if row.ndim != 1:
                raise ValueError("addresses[%d] must be a list of child indices" % r)
            out[r, :len(row)] = row
        return out

    def _index(self, addresses):
        if isinstance(addresses, np.ndarray) and addresses.ndim == 2:
            return _positions(addresses)
        return self.addresses(addresses)

    def apply(self, addresses: Union[Sequence[Sequence[int]], npt.NDArray[np.integer]],
              x: npt.ArrayLike,
              out: Optional[npt.NDArray[Any]] = None) -> npt.NDArray[Any]:
        """out[n] = rho(address n) x[n]; addresses: list of paths or int64 [N, L]."""
        a = self._index(addresses)
        x = np.asarray(x)
        if out is None:
            out = np.empty(x.shape, dtype=x.dtype)
        t = _Call()
        with hold(self) as h:
            check(lib().gpe_algebraic_tree_apply(h, t(a), t(x), t.out(out)))
        return out

    def matrix(self, path: npt.ArrayLike) -> npt.NDArray[np.float64]:
        path = np.ascontiguousarray(_ffi.int64_array(path, "path"))
        if path.ndim != 1:  # a 2-D path was read as its first entries
            raise ValueError("path must be one list of child indices; got shape %s"
                             % (path.shape,))
        out = np.empty((self.dim, self.dim))
        t = _Call()
        with hold(self) as h:
            check(lib().gpe_algebraic_tree_matrix(
                h, path.ctypes.data_as(ctypes.POINTER(ctypes.c_int64)), path.shape[0],
                t.out(out)))
        return out

    def node_matrices(self, max_depth: int) -> npt.NDArray[np.float64]:
        """Every node of depth <= max_depth, built one depth at a time, in level order
        (root first; within a depth, addresses as base-k numbers): [count, dim, dim]."""
        max_depth = _ffi.checked_int(max_depth, "max_depth")
        k = self.num_branches
        # 1 + k + ... + k^max_depth, refused once it passes any array's size (summing
        # term by term for a huge max_depth would never end).
        limit = np.iinfo(np.int64).max // max(self.dim * self.dim * 8, 1)
        if max_depth < 0:
            count = 0
        elif k == 1:
            count = max_depth + 1
        else:
            count, level = 0, 1
            for _ in range(max_depth + 1):
                count += level
                level *= k
                if count > limit:
                    break
        if count > limit:
            raise ValueError("max_depth %d gives more node matrices than an array can hold"
                             % max_depth)
        out = np.empty((count, self.dim, self.dim))
        t = _Call()
        with hold(self) as h:
            check(lib().gpe_algebraic_tree_node_matrices(h, max_depth, t.out(out)))
        return out

    def backward(self, addresses: Union[Sequence[Sequence[int]], npt.NDArray[np.integer]],
                 x: npt.ArrayLike, grad_out: npt.ArrayLike
                 ) -> Tuple[npt.NDArray[Any], npt.NDArray[np.float64]]:
        """Returns (grad_x, grad_skews [k, dim, dim]); dL/dS_c entrywise (unprojected)."""
        a = self._index(addresses)
        x, grad_out = np.asarray(x), np.asarray(grad_out)
        grad_x = np.empty(x.shape, dtype=x.dtype)
        grad_skews = np.empty((self.num_branches, self.dim, self.dim))
        t = _Call()
        with hold(self) as h:
            check(lib().gpe_algebraic_tree_backward(h, t(a), t(x), t(grad_out),
                                                    t.out(grad_x), t.out(grad_skews)))
        return grad_x, grad_skews


class AlgebraicGrid(_Handle):
    """A grid: point (p_1, ..., p_A) acts by blockdiag(exp(p_a S_a)) (Kogkalidis et al.,
    sec. 3.3). skews: a list of square skew matrices, one per axis."""

    _destroy = "gpe_algebraic_grid_destroy"

    def __init__(self, skews: Sequence[npt.ArrayLike]) -> None:
        mats = [np.ascontiguousarray(s, dtype=np.float64) for s in skews]
        for m in mats:
            if m.ndim != 2 or m.shape[0] != m.shape[1]:
                raise ValueError("each axis's skew must be square")
        self.dims: npt.NDArray[np.int64] = np.array([m.shape[0] for m in mats], dtype=np.int64)
        flat = np.ascontiguousarray(np.concatenate([m.ravel() for m in mats]))
        opts = _ffi.AlgebraicGridOptions()
        opts.struct_size = ctypes.sizeof(opts)
        opts.num_axes = len(mats)
        opts.dims = self.dims.ctypes.data_as(ctypes.POINTER(ctypes.c_int64))
        opts.skews = flat.ctypes.data_as(ctypes.POINTER(ctypes.c_double))
        out = ctypes.c_void_p()
        check(lib().gpe_algebraic_grid_create(ctypes.byref(opts), ctypes.byref(out)))
        super().__init__(out.value)
        self._recipe = (type(self), ([m.copy() for m in mats],))
        self.dim: int = int(self.dims.sum())

    def apply(self, positions: npt.ArrayLike, x: npt.ArrayLike,
              out: Optional[npt.NDArray[Any]] = None) -> npt.NDArray[Any]:
        """positions: int64 [N, num_axes]; out[n] = rho(positions[n]) x[n]."""
        p = _positions(positions)
        x = np.asarray(x)
        if out is None:
            out = np.empty(x.shape, dtype=x.dtype)
        t = _Call()
        with hold(self) as h:
            check(lib().gpe_algebraic_grid_apply(h, t(p), t(x), t.out(out)))
        return out

    def backward(self, positions: npt.ArrayLike, x: npt.ArrayLike, grad_out: npt.ArrayLike
                 ) -> Tuple[npt.NDArray[Any], List[npt.NDArray[np.float64]]]:
        """Returns (grad_x, [dL/dS_a per axis]) (entrywise, unprojected)."""
        p = _positions(positions)
        x, grad_out = np.asarray(x), np.asarray(grad_out)
        grad_x = np.empty(x.shape, dtype=x.dtype)
        flat = np.empty(int((self.dims ** 2).sum()))
        t = _Call()
        with hold(self) as h:
            check(lib().gpe_algebraic_grid_backward(h, t(p), t(x), t(grad_out),
                                                    t.out(grad_x), t.out(flat)))
        grads, off = [], 0
        for d in self.dims:
            grads.append(flat[off:off + d * d].reshape(d, d))
            off += d * d
        return grad_x, grads


def algebraic_periodic(positions: npt.ArrayLike, x: npt.ArrayLike, period: int,
                       multipliers: npt.ArrayLike,
                       out: Optional[npt.NDArray[Any]] = None) -> npt.NDArray[Any]:
    """Periodic domain (Kogkalidis et al., sec. 3.4.2): plane i of x [N, dim] rotates by
    2 pi multipliers[i] p / period (exact residues), so W^period = I. The backward pass is
    the same call at -p."""
    p = _positions(positions)
    x = np.asarray(x)
    if x.ndim != 2:  # (the multipliers' count message below named dim / 2 = 0)
        raise ValueError("x must be [N, dim]; got shape %s" % (x.shape,))
    mult = np.ascontiguousarray(_ffi.int64_array(multipliers, "multipliers"))
    if out is None:
        out = np.empty(x.shape, dtype=x.dtype)
    opts = _ffi.AlgebraicPeriodicOptions()
    opts.struct_size = ctypes.sizeof(opts)
    opts.dim = x.shape[1] if x.ndim == 2 else 0
    opts.period = period
    opts.multipliers = mult.ctypes.data_as(ctypes.POINTER(ctypes.c_int64))
    if mult.shape[0] != opts.dim // 2:
        raise ValueError("multipliers must have dim / 2 = %d entries" % (opts.dim // 2))
    t = _Call()
    check(lib().gpe_algebraic_periodic_apply(ctypes.byref(opts), t(p), t(x), t.out(out)))
    return out


def locality_scale(scores: npt.NDArray[Any], q_positions: npt.ArrayLike,
                   k_positions: npt.ArrayLike, c: float = 0.98) -> npt.NDArray[Any]:
    """scores[r, c] *= c^|q_positions[r] - k_positions[c]| in place (Kogkalidis et al.,
    sec. 4); returns scores. Its backward is the same scaling of dL/dscores."""
    qp = _positions(q_positions, "q_positions")
    kp = _positions(k_positions, "k_positions")
    t = _Call()
    check(lib().gpe_locality_scale(float(c), t(qp), t(kp), t.out(scores)))
    return scores


# ---- Shaw value terms and Transformer-XL ----------------------------------------------


def shaw_value_output(probabilities: npt.ArrayLike, label_table: npt.ArrayLike,
                      query_positions: npt.ArrayLike,
                      key_positions: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """out[a] = sum_b probabilities[a, b] label_table[clip(kp[b] - qp[a], -k, k) + k]
    (Shaw et al., eq. 3: the value-side term of output row a). Returns float64 [Lq, dv]."""
    qp = _positions(query_positions, "query_positions")
    kp = _positions(key_positions, "key_positions")
    p, table = np.asarray(probabilities), np.asarray(label_table)
    out = np.empty((qp.shape[0], table.shape[1] if table.ndim == 2 else 0))
    t = _Call()
    check(lib().gpe_shaw_value_output(t(p), t(table), t(qp), t(kp), t.out(out)))
    return out


def shaw_value_output_backward(
        probabilities: npt.ArrayLike, label_table: npt.ArrayLike,
        query_positions: npt.ArrayLike, key_positions: npt.ArrayLike, grad_out: npt.ArrayLike,
        grad_label_table: Optional[npt.NDArray[np.float64]] = None
) -> Tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """Returns (grad_probabilities, grad_label_table); dL/dlabel_table is added into
    grad_label_table (a new float64 zero array when None)."""
    qp = _positions(query_positions, "query_positions")
    kp = _positions(key_positions, "key_positions")
    p, table = np.asarray(probabilities), np.asarray(label_table)
    grad_out = np.asarray(grad_out)
    grad_p = np.empty(p.shape)
    if grad_label_table is None:
        grad_label_table = np.zeros(table.shape)
    t = _Call()
    check(lib().gpe_shaw_value_output_backward(t(p), t(table), t(qp), t(kp), t(grad_out),
                                               t.out(grad_p), t.out(grad_label_table)))
    return grad_p, grad_label_table


def _txl_options(base):
    o = _ffi.TransformerXLOptions()
    o.struct_size = ctypes.sizeof(o)
    o.base = base
    return o


def transformer_xl_score_terms(q: npt.ArrayLike, k: npt.ArrayLike,
                               query_positions: npt.ArrayLike, key_positions: npt.ArrayLike,
                               w_r: npt.ArrayLike, u: npt.ArrayLike, v: npt.ArrayLike,
                               base: float = 10000.0) -> npt.NDArray[np.float64]:
    """Dai et al., sec. 3.3: terms[a, b] = q_a^T W_R R_{i-j} + u^T k_b + v^T W_R R_{i-j}
    (R the sinusoidal encoding of i - j, gpe.sinusoidal's layout). Returns float64
    [Lq, Lk]."""
    qp = _positions(query_positions, "query_positions")
    kp = _positions(key_positions, "key_positions")
    arrays = [np.asarray(a) for a in (q, k, w_r, u, v)]
    out = np.empty((qp.shape[0], kp.shape[0]))
    t = _Call()
    o = _txl_options(base)
    check(lib().gpe_transformer_xl_score_terms(ctypes.byref(o), t(arrays[0]), t(arrays[1]),
                                               t(qp), t(kp), t(arrays[2]), t(arrays[3]),
                                               t(arrays[4]), t.out(out)))
    return out


def transformer_xl_score_terms_backward(
        q: npt.ArrayLike, k: npt.ArrayLike, query_positions: npt.ArrayLike,
        key_positions: npt.ArrayLike, w_r: npt.ArrayLike, u: npt.ArrayLike, v: npt.ArrayLike,
        grad_terms: npt.ArrayLike, base: float = 10000.0
) -> Tuple[npt.NDArray[np.float64], npt.NDArray[np.float64], npt.NDArray[np.float64],
           npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """Returns (grad_q, grad_k, grad_w_r, grad_u, grad_v), float64."""
    qp = _positions(query_positions, "query_positions")
    kp = _positions(key_positions, "key_positions")
    arrays = [np.asarray(a) for a in (q, k, w_r, u, v)]
    grads = [np.empty(a.shape) for a in arrays]
    g = np.asarray(grad_terms)
    t = _Call()
    o = _txl_options(base)
    check(lib().gpe_transformer_xl_score_terms_backward(
        ctypes.byref(o), t(arrays[0]), t(arrays[1]), t(qp), t(kp), t(arrays[2]), t(arrays[3]),
        t(arrays[4]), t(g), *[t.out(x) for x in grads]))
    grad_q, grad_k, grad_w_r, grad_u, grad_v = grads
    return grad_q, grad_k, grad_w_r, grad_u, grad_v
