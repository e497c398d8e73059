"""Additive attention biases, one tile at a time (gpe.h, "Additive attention biases";
encodings/sequence/bias.h).

A bias adds b_h(i, j) to the score of query position i and key position j in head h:

- Alibi (Press et al.): causal -m_h (i - j), symmetric -m_h |i - j|.
- T5Bias (Raffel et al.): table[bucket(j - i), h].
- FoxBias (Lin et al., Forgetting Transformer): c_i - c_j, c_t = sum_{l <= t} ln sigmoid(x_l).
- GrapeApBias (path-integral additive GRAPE): sum_{l = j+1..i} -softplus(<w_i, u_l>).
- GrapeABias (additive GRAPE): the unipotent lift whose score term is ALiBi's causal
  -m_h (i - j), or FoX's c_i - c_j in the content-gated form; lift() returns the lifted
  q / k rows.

fill_tile(head, q_positions, k_positions) returns the [len(q), len(k)] tile (positions
are explicit int64 ids; nothing is masked: causal biases continue their closed form
above the diagonal). accumulate_gradient adds dL/dparameters for a tile's dL/db into
float64 arrays, so summing over tiles gives the full gradient. Parameters are copied at
creation.

Alibi, T5Bias and the ungated GrapeABias copy and pickle (rebuilt from their arguments);
FoxBias, GrapeApBias and the gated GrapeABias hold per-call activations of a sequence's
length and refuse (a TypeError): build another from the activations.
"""

from __future__ import annotations

import ctypes
from typing import Any, Literal, Optional, Sequence, Tuple, Union

import numpy as np
import numpy.typing as npt

from gpe import _ffi
from gpe._core import check, hold, lib
from gpe.sequence import _Call, _Handle, _doubles, _positions


class AdditiveBias(_Handle):
    """Common interface of the additive biases (use the subclasses to create one)."""

    _destroy = "gpe_bias_destroy"
    _KINDS = {0: "alibi", 1: "t5", 2: "fox", 3: "grape_ap", 4: "grape_a"}

    def _info(self):
        kind, causal = ctypes.c_int32(), ctypes.c_int32()
        heads = ctypes.c_int64()
        with hold(self) as h:
            check(lib().gpe_bias_info(h, ctypes.byref(kind), ctypes.byref(heads),
                                      ctypes.byref(causal)))
        return self._KINDS[kind.value], heads.value, bool(causal.value)

    @property
    def kind(self) -> str:
        """The kind of bias: "alibi", "t5", "fox", "grape_ap" or "grape_a"."""
        return self._info()[0]

    @property
    def num_heads(self) -> int:
        return self._info()[1]

    @property
    def causal(self) -> bool:
        """True when only keys j <= i are meaningful (the caller masks j > i)."""
        return self._info()[2]

    def fill_tile(self, head: int, q_positions: npt.ArrayLike, k_positions: npt.ArrayLike,
                  out: Optional[npt.NDArray[Any]] = None,
                  dtype: npt.DTypeLike = np.float64) -> npt.NDArray[Any]:
        """out[r, c] = b_head(q_positions[r], k_positions[c]); a new [M, N] array of `dtype`
        (float32 or float64) unless `out` (any strides) is given."""
        qp = _positions(q_positions, "q_positions")
        kp = _positions(k_positions, "k_positions")
        if out is None:
            out = np.empty((qp.shape[0], kp.shape[0]), dtype=dtype)
        t = _Call()
        with hold(self) as h:
            check(lib().gpe_bias_fill_tile(h, _ffi.checked_int(head, "head"), t(qp),
                                           t(kp), t.out(out)))
        return out

    def _accumulate(self, head, q_positions, k_positions, grad_tile, grad_a, grad_b=None):
        qp = _positions(q_positions, "q_positions")
        kp = _positions(k_positions, "k_positions")
        grad_tile = np.asarray(grad_tile)
        t = _Call()
        with hold(self) as h:
            check(lib().gpe_bias_accumulate_gradient(h, _ffi.checked_int(head, "head"),
                                                     t(qp), t(kp),
                                                     t(grad_tile), t.out(grad_a), t.out(grad_b)))


class Alibi(AdditiveBias):
    """ALiBi with Press et al.'s slopes (slopes=None) or given per-head slopes.

    Standard slopes: 2^(-8h/n) for n a power of two; otherwise the c = 2^floor(log2 n)
    slopes of c heads followed by the 1st, 3rd, 5th, ... slopes of 2c heads."""

    def __init__(self, num_heads: int, slopes: Optional[npt.ArrayLike] = None,
                 symmetric: bool = False) -> None:
        o = _ffi.AlibiOptions()
        o.struct_size = ctypes.sizeof(o)
        o.form = 1 if symmetric else 0
        o.num_heads = num_heads
        kept = None
        if slopes is not None:
            arr, ptr = _doubles(slopes, "slopes", 1)
            if arr.shape[0] != num_heads:
                raise ValueError("slopes must have num_heads = %d entries" % num_heads)
            o.slopes = ptr
            kept = arr.copy()
        out = ctypes.c_void_p()
        check(lib().gpe_bias_create_alibi(ctypes.byref(o), ctypes.byref(out)))
        super().__init__(out.value)
        self._recipe = (type(self), (num_heads, kept, symmetric))

    @property
    def slopes(self) -> npt.NDArray[np.float64]:
        n = self.num_heads
        s = np.empty(n)
        with hold(self) as h:
            check(lib().gpe_bias_alibi_slopes(h,
                                              s.ctypes.data_as(ctypes.POINTER(ctypes.c_double)), n))
        return s

    def accumulate_gradient(self, head: int, q_positions: npt.ArrayLike,
                            k_positions: npt.ArrayLike, grad_tile: npt.ArrayLike,
                            grad_slopes: Optional[npt.NDArray[np.float64]] = None
                            ) -> npt.NDArray[np.float64]:
        """grad_slopes[head] += sum of grad_tile * db/dm (a new zero array when None)."""
        if grad_slopes is None:
            grad_slopes = np.zeros(self.num_heads)
        self._accumulate(head, q_positions, k_positions, grad_tile, grad_slopes)
        return grad_slopes


class T5Bias(AdditiveBias):
    """T5 relative buckets: table [num_buckets, num_heads] (row-major, copied)."""

    def __init__(self, table: npt.ArrayLike, max_distance: int = 128,
                 bidirectional: bool = True) -> None:
        arr, ptr = _doubles(table, "table", 2)
        o = _ffi.T5Options()
        o.struct_size = ctypes.sizeof(o)
        o.bidirectional = 1 if bidirectional else 0
        o.num_buckets, o.num_heads = arr.shape
        o.max_distance = max_distance
        o.table = ptr
        out = ctypes.c_void_p()
        check(lib().gpe_bias_create_t5(ctypes.byref(o), ctypes.byref(out)))
        super().__init__(out.value)
        self._recipe = (type(self), (arr.copy(), max_distance, bidirectional))
        self.table_shape: Tuple[int, ...] = arr.shape

    def accumulate_gradient(self, head: int, q_positions: npt.ArrayLike,
                            k_positions: npt.ArrayLike, grad_tile: npt.ArrayLike,
                            grad_table: Optional[npt.NDArray[np.float64]] = None
                            ) -> npt.NDArray[np.float64]:
        """grad_table[bucket, head] += the tile's dL/db summed per bucket."""
        if grad_table is None:
            grad_table = np.zeros(self.table_shape)
        self._accumulate(head, q_positions, k_positions, grad_tile, grad_table)
        return grad_table


class FoxBias(AdditiveBias):
    """FoX: gate_logits [length, num_heads]; token t sits at first_position + t."""

    def __init__(self, gate_logits: npt.ArrayLike, first_position: int = 0) -> None:
        arr, ptr = _doubles(gate_logits, "gate_logits", 2)
        o = _ffi.FoxOptions()
        o.struct_size = ctypes.sizeof(o)
        o.length, o.num_heads = arr.shape
        o.first_position = first_position
        o.gate_logits = ptr
        out = ctypes.c_void_p()
        check(lib().gpe_bias_create_fox(ctypes.byref(o), ctypes.byref(out)))
        super().__init__(out.value)
        self.logits_shape: Tuple[int, ...] = arr.shape

    def accumulate_gradient(self, head: int, q_positions: npt.ArrayLike,
                            k_positions: npt.ArrayLike, grad_tile: npt.ArrayLike,
                            grad_prefix: Optional[npt.NDArray[np.float64]] = None
                            ) -> npt.NDArray[np.float64]:
        """grad_prefix[t, head] += dL/dc_t from this tile; after all tiles, pass it to
        logit_gradient."""
        if grad_prefix is None:
            grad_prefix = np.zeros(self.logits_shape)
        self._accumulate(head, q_positions, k_positions, grad_tile, grad_prefix)
        return grad_prefix

    def logit_gradient(self, grad_prefix: npt.ArrayLike) -> npt.NDArray[np.float64]:
        """dL/dx[l, h] = sigmoid(-x[l, h]) * sum_{t >= l} grad_prefix[t, h]."""
        grad_prefix = np.asarray(grad_prefix, dtype=np.float64)
        out = np.empty(self.logits_shape)
        t = _Call()
        with hold(self) as h:
            check(lib().gpe_bias_fox_logit_gradient(h, t(grad_prefix), t.out(out)))
        return out


class GrapeApBias(AdditiveBias):
    """GRAPE-AP: w, u [length, num_heads, rank]; psi_h(t, l) = -softplus(<w_t, u_l>)."""

    def __init__(self, w: npt.ArrayLike, u: npt.ArrayLike, first_position: int = 0) -> None:
        w_arr, w_ptr = _doubles(w, "w", 3)
        u_arr, u_ptr = _doubles(u, "u", 3)
        if w_arr.shape != u_arr.shape:
            raise ValueError("w and u must have the same shape")
        o = _ffi.GrapeApOptions()
        o.struct_size = ctypes.sizeof(o)
        o.length, o.num_heads, o.rank = w_arr.shape
        o.first_position = first_position
        o.w, o.u = w_ptr, u_ptr
        out = ctypes.c_void_p()
        check(lib().gpe_bias_create_grape_ap(ctypes.byref(o), ctypes.byref(out)))
        super().__init__(out.value)
        self.param_shape: Tuple[int, ...] = w_arr.shape

    def accumulate_gradient(self, head: int, q_positions: npt.ArrayLike,
                            k_positions: npt.ArrayLike, grad_tile: npt.ArrayLike,
                            grad_w: Optional[npt.NDArray[np.float64]] = None,
                            grad_u: Optional[npt.NDArray[np.float64]] = None
                            ) -> Tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
        """(grad_w, grad_u) += dL/dw, dL/du from this tile (new zero arrays when None)."""
        if grad_w is None:
            grad_w = np.zeros(self.param_shape)
        if grad_u is None:
            grad_u = np.zeros(self.param_shape)
        self._accumulate(head, q_positions, k_positions, grad_tile, grad_w, grad_u)
        return grad_w, grad_u


class GrapeABias(AdditiveBias):
    """Additive GRAPE (Zhang et al., GRAPE, "Additive GRAPE"): rows lift to head_dim + 2
    dimensions, q~ = [q; 1; 0], k~ = [k; 0; 1], moved by G(p) = I + p m A with
    A = E_{d, d+1}: queries by G(i)^-T, keys by G(j). <lift_q(i), lift_k(j)> =
    <q, k> + b(i, j), b = -m_h (i - j) (causal ALiBi with slopes m_h; slopes=None gives
    Press et al.'s), or, with gate_logits [length, num_heads], FoX's c_i - c_j.

    path: "closed_form" (the fast path) or "lifted" (the general path: tiles from the
    lifted rows' dot products)."""

    _PATHS = {"closed_form": 0, "lifted": 1}

    def __init__(self, num_heads: Optional[int] = None, head_dim: int = 1,
                 slopes: Optional[Union[Sequence[float], npt.NDArray[Any]]] = None,
                 gate_logits: Optional[npt.ArrayLike] = None, first_position: int = 0,
                 path: Literal["closed_form", "lifted"] = "closed_form") -> None:
        if path not in self._PATHS:
            raise ValueError("path must be 'closed_form' or 'lifted'")
        o = _ffi.GrapeAOptions()
        o.struct_size = ctypes.sizeof(o)
        o.path = self._PATHS[path]
        o.head_dim = head_dim
        self.logits_shape: Optional[Tuple[int, ...]] = None
        if gate_logits is not None:
            if slopes is not None:
                raise ValueError("slopes are for the ungated form; pass one of slopes, gate_logits")
            arr, ptr = _doubles(gate_logits, "gate_logits", 2)
            o.gated = 1
            o.length, o.num_heads = arr.shape
            if num_heads is not None and num_heads != arr.shape[1]:
                raise ValueError("gate_logits must have num_heads = %d columns" % num_heads)
            o.first_position = first_position
            o.gate_logits = ptr
            self.logits_shape = arr.shape
        else:
            if num_heads is None:
                if slopes is None:
                    raise ValueError("give num_heads, slopes or gate_logits")
                num_heads = len(slopes)
            o.num_heads = num_heads
            kept = None
            if slopes is not None:
                arr, ptr = _doubles(slopes, "slopes", 1)
                if arr.shape[0] != num_heads:
                    raise ValueError("slopes must have num_heads = %d entries" % num_heads)
                o.slopes = ptr
                kept = arr.copy()
        out = ctypes.c_void_p()
        check(lib().gpe_bias_create_grape_a(ctypes.byref(o), ctypes.byref(out)))
        super().__init__(out.value)
        if gate_logits is None:  # the gated form, like FoxBias, is built from activations
            self._recipe = (type(self), (num_heads, head_dim, kept, None, first_position, path))
        self.head_dim: int = head_dim

    @property
    def gated(self) -> bool:
        return self.logits_shape is not None

    @property
    def slopes(self) -> npt.NDArray[np.float64]:
        """The per-head slopes m_h (ungated form)."""
        n = self.num_heads
        s = np.empty(n)
        with hold(self) as h:
            check(lib().gpe_bias_alibi_slopes(h,
                                              s.ctypes.data_as(ctypes.POINTER(ctypes.c_double)), n))
        return s

    def lift(self, head: int, positions: npt.ArrayLike, x: npt.ArrayLike,
             role: Literal["query", "key"] = "query") -> npt.NDArray[Any]:
        """The lifted rows [N, head_dim + 2] of x [N, head_dim] (float32 or float64):
        role "query" gives G(i)^-T [q; 1; 0], "key" gives G(j) [k; 0; 1]."""
        if role not in ("query", "key"):
            raise ValueError("role must be 'query' or 'key'")
        p = _positions(positions)
        x = np.asarray(x)
        if x.dtype not in (np.float32, np.float64):
            x = x.astype(np.float64)
        if x.ndim != 2:
            raise ValueError("x must be [N, head_dim]")
        out = np.empty((x.shape[0], self.head_dim + 2), dtype=x.dtype)
        t = _Call()
        with hold(self) as h:
            check(lib().gpe_bias_grape_a_lift(h, _ffi.checked_int(head, "head"),
                                              0 if role == "query" else 1,
                                              t(p), t(x), t.out(out)))
        return out

    def accumulate_gradient(self, head: int, q_positions: npt.ArrayLike,
                            k_positions: npt.ArrayLike, grad_tile: npt.ArrayLike,
                            grad: Optional[npt.NDArray[np.float64]] = None
                            ) -> npt.NDArray[np.float64]:
        """Ungated: grad[head] += dL/dm_head ([num_heads]); gated: grad += dL/dc
        ([length, num_heads], then logit_gradient). New zero arrays when None."""
        if grad is None:
            grad = np.zeros(self.logits_shape if self.logits_shape is not None
                            else self.num_heads)
        self._accumulate(head, q_positions, k_positions, grad_tile, grad)
        return grad

    def logit_gradient(self, grad_prefix: npt.ArrayLike) -> npt.NDArray[np.float64]:
        """Gated: dL/dx[l, h] = sigmoid(-x[l, h]) * sum_{t >= l} grad_prefix[t, h]."""
        if self.logits_shape is None:  # not self.gated
            raise ValueError("logit_gradient is for the gated form")
        grad_prefix = np.asarray(grad_prefix, dtype=np.float64)
        out = np.empty(self.logits_shape)
        t = _Call()
        with hold(self) as h:
            check(lib().gpe_bias_fox_logit_gradient(h, t(grad_prefix), t.out(out)))
        return out
