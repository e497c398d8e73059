"""Rotary position embeddings (gpe.h, "RoPE"; encodings/sequence/rope.h).

Rope applies RoPE to q or k tensors laid out as

- "bshd": [batch, seq, heads, head_dim]
- "sbhd": [seq, batch, heads, head_dim]
- "thd":  [total_tokens, heads, head_dim], sequences delimited by cu_seqlens

with any positive strides and a contiguous head_dim axis; arrays are passed to the
library without copies. Dtypes: float32, float64, float16, and bfloat16 given as a
uint16 array of bfloat16 bit patterns with bfloat16=True (NumPy has no bfloat16).

Plane i (i < rotary_dim / 2) pairs features (2i, 2i + 1) ("interleaved") or
(i, i + rotary_dim / 2) ("half_split") and rotates them by a = p * theta_i:
(x1, x2) -> (x1 cos a - x2 sin a, x1 sin a + x2 cos a), then multiplies by the schedule's
attention factor. Angles are reduced exactly mod 2 pi in double, so any int64 position
is accurate.
"""

from __future__ import annotations

import ctypes
from typing import Any, Dict, List, Literal, NoReturn, Optional, Sequence, Tuple

import numpy as np
import numpy.typing as npt

from gpe import _ffi
from gpe._core import check, hold, lib, rebuild_recipe
from gpe.sequence import _Handle, _positions

_PAIRINGS = {"interleaved": 0, "half_split": 1}
_SCHEDULES = {"default": 0, "linear": 1, "dynamic_ntk": 2, "yarn": 3, "longrope": 4,
              "llama3": 5}
_LAYOUTS = {"bshd": 0, "sbhd": 1, "thd": 2}
_ROLES = {"query": 0, "key": 1}
_KDL_BFLOAT = 4

Pairing = Literal["interleaved", "half_split"]
Schedule = Literal["default", "linear", "dynamic_ntk", "yarn", "longrope", "llama3"]
Layout = Literal["bshd", "sbhd", "thd"]
Role = Literal["query", "key"]


def _choice(table, value, name):
    try:
        return table[value]
    except KeyError:
        raise ValueError("%s must be one of %s; got %r" % (name, sorted(table), value)) from None


class Rope(_Handle):
    """RoPE with a frequency schedule, pairing, partial rotary, xPos and multi-axis options.

    Schedules (Su et al.; Chen et al.; bloc97; Peng et al.; Ding et al.; Llama 3):
      "default"      theta_i = base^(-2i / rotary_dim)
      "linear"       theta_i / factor
      "dynamic_ntk"  base * (factor L / L0 - (factor - 1))^(r / (r - 2)) when
                     L = current_length > L0 = original_max_position
      "yarn"         NTK-by-parts ramp between beta_fast and beta_slow, attention factor
                     0.1 ln(factor) + 1 (or mscale / mscale_all_dim, or attention_factor)
      "longrope"     theta_i / e_i, e = long_factor if current_length > L0 else short_factor
      "llama3"       wavelength bands set by low_freq_factor / high_freq_factor
    Schedule parameters left as None take the values the models publish
    (gpe_rope_options_use_schedule): llama3 factor 8, low/high 1 and 4, L0 = 8192; yarn
    beta_fast 32, beta_slow 1; longrope L0 = 4096, max_position 131072; otherwise factor 1,
    L0 = 4096.
    xpos=True scales queries by zeta_i^((p - xpos_centre) / xpos_scale_base) and keys by its
    inverse (Sun et al.). axial_axes=k splits the planes into k axial blocks (default
    schedule only); mrope_sections=[...] assigns planes to axes as Qwen2-VL's M-RoPE
    (mrope_interleaved=True: Qwen3-VL). Multi-axis encodings take position ids
    [num_axes, num_tokens].
    """

    _destroy = "gpe_rope_destroy"

    def __init__(self, head_dim: int, rotary_dim: Optional[int] = None, base: float = 10000.0,
                 pairing: Pairing = "half_split", schedule: Schedule = "default",
                 factor: Optional[float] = None, original_max_position: Optional[int] = None,
                 current_length: int = 0, beta_fast: Optional[float] = None,
                 beta_slow: Optional[float] = None, truncate: bool = True,
                 mscale: Optional[float] = None, mscale_all_dim: Optional[float] = None,
                 attention_factor: Optional[float] = None,
                 short_factor: Optional[Sequence[float]] = None,
                 long_factor: Optional[Sequence[float]] = None,
                 max_position: Optional[int] = None, low_freq_factor: Optional[float] = None,
                 high_freq_factor: Optional[float] = None, xpos: bool = False,
                 xpos_gamma: float = 0.4, xpos_scale_base: float = 512.0, xpos_centre: int = 0,
                 axial_axes: Optional[int] = None, mrope_sections: Optional[Sequence[int]] = None,
                 mrope_interleaved: bool = False, num_threads: int = 1) -> None:
        # Kept for copies (__reduce__): a copy builds its own handle from them; sequences
        # as private copies (the caller's array changed later would change the copy).
        copied = ("short_factor", "long_factor", "mrope_sections")
        self._args: Dict[str, Any] = {
            k: (list(v) if k in copied and v is not None else v)
            for k, v in locals().items() if k not in ("self", "__class__", "copied")}
        o = _ffi.RopeOptions()
        o.struct_size = ctypes.sizeof(o)
        o.pairing = _choice(_PAIRINGS, pairing, "pairing")
        o.head_dim = head_dim
        o.rotary_dim = 0 if rotary_dim is None else rotary_dim
        o.base = base
        # The schedule's published parameters (gpe_rope_options_use_schedule), then the
        # caller's: None keeps the published value.
        check(lib().gpe_rope_options_use_schedule(_choice(_SCHEDULES, schedule, "schedule"),
                                                  ctypes.byref(o)))
        o.num_threads = num_threads
        for name, value in (("factor", factor), ("original_max_position", original_max_position),
                            ("beta_fast", beta_fast), ("beta_slow", beta_slow),
                            ("max_position", max_position), ("low_freq_factor", low_freq_factor),
                            ("high_freq_factor", high_freq_factor)):
            if value is not None:
                setattr(o, name, value)
        o.current_length = current_length
        o.yarn_truncate = 1 if truncate else 0
        o.has_mscale = 0 if mscale is None and mscale_all_dim is None else 1
        o.mscale = 1.0 if mscale is None else mscale
        o.mscale_all_dim = 1.0 if mscale_all_dim is None else mscale_all_dim
        o.has_attention_factor = 0 if attention_factor is None else 1
        o.attention_factor = 1.0 if attention_factor is None else attention_factor
        keep: List[Any] = []
        for name in ("short_factor", "long_factor"):
            values = locals()[name]
            if values is not None:
                arr = np.ascontiguousarray(values, dtype=np.float64).ravel()
                keep.append(arr)
                setattr(o, name, arr.ctypes.data_as(ctypes.POINTER(ctypes.c_double)))
                setattr(o, name + "_len", arr.size)
        o.xpos = 1 if xpos else 0
        o.xpos_gamma, o.xpos_scale_base, o.xpos_centre = xpos_gamma, xpos_scale_base, xpos_centre
        o.axes, o.num_axes = 0, 1
        if axial_axes is not None and mrope_sections is not None:
            raise ValueError("give axial_axes or mrope_sections, not both")
        if axial_axes is not None:
            o.axes, o.num_axes = 1, axial_axes
        if mrope_sections is not None:
            sec = np.ascontiguousarray(_ffi.int64_array(mrope_sections, "mrope_sections")).ravel()
            keep.append(sec)
            o.axes = 3 if mrope_interleaved else 2
            o.mrope_sections = sec.ctypes.data_as(ctypes.POINTER(ctypes.c_int64))
            o.num_mrope_sections = sec.size
        out = ctypes.c_void_p()
        check(lib().gpe_rope_create(ctypes.byref(o), ctypes.byref(out)))
        super().__init__(out.value)

    @classmethod
    def from_hf_config(cls, config: Any, *, layer_type: Optional[str] = None,
                       current_length: Optional[int] = None, pairing: Pairing = "half_split",
                       num_threads: int = 1) -> Rope:
        """The RoPE of a Hugging Face transformers model config: a PretrainedConfig, any
        object with its attributes, or a config.json dict.

        Reads head_dim (or hidden_size // num_attention_heads), partial_rotary_factor,
        max_position_embeddings, rope_theta and rope_parameters (transformers 5, with
        rope_theta inside; nested by layer type: pass layer_type) or rope_scaling (older
        configs), for every rope_type transformers defines: "default", "linear",
        "dynamic", "yarn", "longrope", "llama3", and "proportional" where every plane
        rotates (partial proportional RoPE raises NotImplementedError: its unrotated
        planes sit inside the half-split pairing, which takes two axes here;
        gpe.torch.RotaryEmbedding.from_hf_config supports it). How HF's names map to
        this class's is in gpe/_hf_config.py.

        current_length is transformers' seq_len: dynamic NTK rescales its base, and
        LongRoPE takes long_factor, once it exceeds their original context; None gives
        the frequencies transformers builds at initialisation. transformers rotates
        half-split pairs (rotate_half); pairing="interleaved" serves models whose own
        code pairs (2i, 2i + 1).
        """
        from gpe._hf_config import rope_arguments  # noqa: lazy, pure Python
        return cls(**rope_arguments(config, layer_type=layer_type,
                                    current_length=current_length, pairing=pairing),
                   num_threads=num_threads)

    def __reduce__(self) -> Tuple[Any, Tuple[Any, ...]]:
        # copy.deepcopy and pickle (a model holding a Rope, e.g. in gpe.torch's
        # RotaryEmbedding) rebuild the encoding from its arguments: copying the handle
        # would free it twice.
        return rebuild_recipe(self, (_rebuild_rope, (type(self), self._args)))

    @property
    def shape(self) -> Tuple[int, int, int]:
        """(head_dim, rotary_dim, num_axes)."""
        v = [ctypes.c_int64() for _ in range(3)]
        with hold(self) as h:
            check(lib().gpe_rope_shape(h, *[ctypes.byref(x) for x in v]))
        return v[0].value, v[1].value, v[2].value

    def frequencies(self) -> Tuple[npt.NDArray[np.float64], float]:
        """(thetas [rotary_dim / 2] in radians per position, attention_factor)."""
        n = self.shape[1] // 2
        thetas = np.empty(n, dtype=np.float64)
        m = ctypes.c_double()
        with hold(self) as h:
            check(lib().gpe_rope_frequencies(h,
                                             thetas.ctypes.data_as(ctypes.POINTER(ctypes.c_double)),
                                             n, ctypes.byref(m)))
        return thetas, m.value

    def _run(self, fn, x, positions, offsets, cu_seqlens, layout, role, out, bfloat16):
        x, out = _arrays(x, out, bfloat16)
        tok, keep = _tokens(positions, offsets, cu_seqlens, layout, role)
        tx, kx = _tensor(x, bfloat16)
        tout, kout = _tensor(out, bfloat16, output=True)
        with hold(self) as h:
            check(fn(h, ctypes.byref(tok), ctypes.byref(tx), ctypes.byref(tout)))
        del keep, kx, kout
        return out

    def table(self, like: npt.ArrayLike, positions: Optional[npt.ArrayLike] = None,
              offsets: Optional[npt.ArrayLike] = None,
              cu_seqlens: Optional[npt.ArrayLike] = None, layout: Layout = "bshd",
              role: Role = "query", bfloat16: bool = False) -> RopeTable:
        """A RopeTable: the cos/sin rows for the tokens of `like` (an array of the shape and
        dtype to be rotated; its values are not read), built once and reused for q, k
        and every layer with the same tokens (any number of heads)."""
        return RopeTable(self, like, positions, offsets, cu_seqlens, layout, role, bfloat16)

    def forward(self, x: npt.ArrayLike, positions: Optional[npt.ArrayLike] = None,
                offsets: Optional[npt.ArrayLike] = None,
                cu_seqlens: Optional[npt.ArrayLike] = None, layout: Layout = "bshd",
                role: Role = "query", out: Optional[npt.NDArray[Any]] = None,
                bfloat16: bool = False) -> npt.NDArray[Any]:
        """out = m R(p theta) x for every token and head.

        positions: int [num_tokens] (tokens numbered b * seq + s, or by row for "thd") or
        [num_axes, num_tokens]; offsets: int [batch], position = offsets[b] + index in
        the sequence; neither means offsets of 0. cu_seqlens: int [batch + 1] for "thd".
        role ("query" / "key") matters only for xPos. out=x works in place; an out with
        other strides is filled without touching anything else."""
        return self._run(lib().gpe_rope_forward, x, positions, offsets, cu_seqlens, layout, role,
                         out, bfloat16)

    def backward(self, dy: npt.ArrayLike, positions: Optional[npt.ArrayLike] = None,
                 offsets: Optional[npt.ArrayLike] = None,
                 cu_seqlens: Optional[npt.ArrayLike] = None, layout: Layout = "bshd",
                 role: Role = "query", out: Optional[npt.NDArray[Any]] = None,
                 bfloat16: bool = False) -> npt.NDArray[Any]:
        """dx = (m R(p theta))^T dy, the gradient of forward; arguments as forward."""
        return self._run(lib().gpe_rope_backward, dy, positions, offsets, cu_seqlens, layout,
                         role, out, bfloat16)


class RopeTable(_Handle):
    """Rope.table(...): RoPE's cos/sin table for one token numbering (see Rope.table).
    Built exactly once (angles reduced mod 2 pi in double); forward/backward then run at
    memory bandwidth. float64 tables serve float64 arrays; float32 tables serve float32,
    float16 and bfloat16."""

    _destroy = "gpe_rope_table_destroy"

    def __init__(self, rope: Rope, like: npt.ArrayLike, positions: Optional[npt.ArrayLike],
                 offsets: Optional[npt.ArrayLike], cu_seqlens: Optional[npt.ArrayLike],
                 layout: Layout, role: Role, bfloat16: bool) -> None:
        like, _ = _arrays(like, like, bfloat16)
        tok, keep = _tokens(positions, offsets, cu_seqlens, layout, role)
        tl, kl = _tensor(like, bfloat16)
        out = ctypes.c_void_p()
        with hold(rope, "rope") as h:
            check(lib().gpe_rope_table_create(h, ctypes.byref(tok), ctypes.byref(tl),
                                              ctypes.byref(out)))
        del keep, kl
        super().__init__(out.value)

    def __reduce__(self) -> NoReturn:
        raise TypeError("a RopeTable cannot be copied or pickled (it owns a library handle); "
                        "build another with Rope.table")

    def _run(self, fn, x, out, bfloat16):
        x, out = _arrays(x, out, bfloat16)
        tx, kx = _tensor(x, bfloat16)
        tout, kout = _tensor(out, bfloat16, output=True)
        with hold(self) as h:
            check(fn(h, ctypes.byref(tx), ctypes.byref(tout)))
        del kx, kout
        return out

    def forward(self, x: npt.ArrayLike, out: Optional[npt.NDArray[Any]] = None,
                bfloat16: bool = False) -> npt.NDArray[Any]:
        """Rope.forward with this table's tokens; out=x works in place."""
        return self._run(lib().gpe_rope_table_forward, x, out, bfloat16)

    def backward(self, dy: npt.ArrayLike, out: Optional[npt.NDArray[Any]] = None,
                 bfloat16: bool = False) -> npt.NDArray[Any]:
        """Rope.backward with this table's tokens."""
        return self._run(lib().gpe_rope_table_backward, dy, out, bfloat16)


def _rebuild_rope(cls, args):
    return cls(**args)


def _arrays(x, out, bfloat16):
    if not isinstance(x, np.ndarray):
        x = np.asarray(x)
    if bfloat16 and x.dtype != np.uint16:
        raise TypeError("bfloat16=True takes a uint16 array of bfloat16 bit patterns")
    if out is None:
        out = np.empty_like(x)
    return x, out


def _tensor(array, bfloat16, output=False):
    t, keep = _ffi.as_dltensor(array, output=output)
    if bfloat16:
        t.dtype.code = _KDL_BFLOAT
    return t, keep


def _tokens(positions, offsets, cu_seqlens, layout, role):
    tok = _ffi.RopeTokens()
    tok.struct_size = ctypes.sizeof(tok)
    tok.layout = _choice(_LAYOUTS, layout, "layout")
    tok.role = _choice(_ROLES, role, "role")
    keep = []
    for field, value in (("position_ids", positions), ("offsets", offsets),
                         ("cu_seqlens", cu_seqlens)):
        if value is not None:
            tensor, alive = _ffi.as_dltensor(_positions(value, field), output=False)
            keep.append((tensor, alive))
            setattr(tok, field, ctypes.pointer(tensor))
    return tok, keep
