"""gpe.torch.RotaryEmbedding: RoPE as a torch.nn.Module over gpe.Rope (re-exported by
gpe.torch; needs PyTorch).

    rope = gpe.torch.RotaryEmbedding(128, base=500000.0, schedule="llama3", factor=8.0)
    q, k = rope(q), rope(k, role="key")          # q, k: [batch, seq, heads, head_dim]
    rope = gpe.torch.RotaryEmbedding.from_hf_config(model.config)

Layout: x is [batch, seq, heads, head_dim] (flash-attn's and torchtune's layout; a
PyTorch-style [batch, heads, seq, head_dim] tensor is passed as x.transpose(1, 2), a view:
the library reads any strides with head_dim contiguous). Positions: input_pos int
[batch, seq] (torchtune's, e.g. packed samples) or [seq] (the same for every sequence);
None means 0 .. seq - 1. The cos/sin table of a call (gpe.RopeTable: angles reduced
exactly in double, built once) is kept and reused while the next call has the same
batch, sequence length, positions and table dtype, so q and k and every layer of a
forward pass share it. Gradients come from the library's RoPE backward (the transpose of
the rotation); the backward is itself differentiable. Dtypes: float32, float64 (a float64
table), bfloat16, float16 (float32 tables; results rounded once). CPU tensors.
"""

from typing import Any, Dict, Literal, Optional, Tuple

import numpy as np
import torch

from gpe._torch_base import _rope_cuda
from gpe.rope import Pairing, Role, Rope, RopeTable, Schedule

__all__ = ["RotaryEmbedding"]

_PAIRINGS: Dict[str, Pairing] = {"half": "half_split", "half_split": "half_split",
                                 "interleaved": "interleaved"}
_DTYPES = (torch.float32, torch.float64, torch.bfloat16, torch.float16)
# Schedules whose frequencies depend on the length (RotaryEmbedding's track_length).
_TRACKED = ("dynamic_ntk", "longrope")


def _array(t: torch.Tensor) -> np.ndarray:
    """A NumPy view of t's memory (bfloat16 as its uint16 bit patterns)."""
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(np.uint16)
    return t.numpy()


def _apply(table: RopeTable, x: torch.Tensor, backward: bool) -> torch.Tensor:
    x = x.detach()
    if x.stride(-1) != 1 or 0 in x.stride():  # zero strides: an expanded gradient
        x = x.contiguous()
    out = torch.empty_like(x, memory_format=torch.contiguous_format)
    fn = table.backward if backward else table.forward
    fn(_array(x), out=_array(out), bfloat16=x.dtype == torch.bfloat16)
    return out


class _TableRope(torch.autograd.Function):
    """y = m R(p theta) x through a prepared table; dx = (m R)^T dy (the table's backward)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, table: RopeTable) -> torch.Tensor:
        ctx.table = table
        return _apply(table, x, backward=False)

    @staticmethod
    def backward(ctx: Any, dy: torch.Tensor) -> Tuple[Optional[torch.Tensor], None]:
        return _TableRopeTranspose.apply(dy, ctx.table), None


class _TableRopeTranspose(torch.autograd.Function):
    """The transpose map, whose own gradient is the forward map (double backward)."""

    @staticmethod
    def forward(ctx: Any, dy: torch.Tensor, table: RopeTable) -> torch.Tensor:
        ctx.table = table
        return _apply(table, dy, backward=True)

    @staticmethod
    def backward(ctx: Any, ddx: torch.Tensor) -> Tuple[Optional[torch.Tensor], None]:
        return _TableRope.apply(ddx, ctx.table), None


class _CudaRope(torch.autograd.Function):
    """y = m R(p theta) x on a CUDA tensor (transpose: the backward map), whose gradient is
    the other map: differentiable to any order."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, rope: Rope, positions: Optional[torch.Tensor],
                role: Role, transpose: bool) -> torch.Tensor:
        ctx.args = (rope, positions, role, transpose)
        return _rope_cuda(transpose, rope, x, positions, None, None, "bshd", role)

    @staticmethod
    def backward(ctx: Any, dy: torch.Tensor) -> Tuple[Optional[torch.Tensor], None, None, None,
                                                      None]:
        rope, positions, role, transpose = ctx.args
        return _CudaRope.apply(dy, rope, positions, role, not transpose), None, None, None, None


class RotaryEmbedding(torch.nn.Module):
    """Rotary position embeddings (Su et al.) in any gpe.Rope schedule, as an nn.Module.

    dim: the head dimension (the last axis of x). base: rope_theta. schedule: "default",
    "linear", "dynamic_ntk", "yarn", "longrope" or "llama3", with that schedule's
    parameters as keyword arguments under gpe.Rope's names (factor,
    original_max_position, beta_fast, beta_slow, attention_factor, short_factor,
    long_factor, low_freq_factor, high_freq_factor, ...). rotary_dim, or
    partial_rotary_factor (rotary_dim = int(dim * factor)): only the first rotary_dim
    features rotate, the rest pass through. pairing: "half" (pairs (i, i + r/2): Llama,
    transformers' rotate_half; also "half_split") or "interleaved" (pairs (2i, 2i + 1):
    torchtune, RoFormer, GPT-J). rope: a gpe.Rope instead of all of these (its head_dim
    must be dim). max_seq_len is accepted for torchtune's signature and not needed: the
    angles are exact at every int64 position, nothing is precomputed up to a length.

    track_length=True (from_hf_config's default) follows the length as transformers'
    RoPE modules do for the schedules whose frequencies depend on it, from L = the
    largest position of a call + 1: "longrope" takes long_factor while L > L0, and
    "dynamic_ntk" rescales its base for the longest L seen, until a call with L < L0
    returns to the original frequencies. Each change builds a new gpe.Rope. Otherwise
    the schedule's current_length stays as given.

    The module holds no parameters; forward(x, input_pos=None, role="query") is
    documented in the module docstring (role matters only for xPos).
    """

    def __init__(self, dim: int, max_seq_len: Optional[int] = None, base: float = 10000.0, *,
                 schedule: Schedule = "default", rotary_dim: Optional[int] = None,
                 partial_rotary_factor: Optional[float] = None,
                 pairing: Literal["half", "half_split", "interleaved"] = "half",
                 rope: Optional[Rope] = None, num_threads: int = 1,
                 track_length: bool = False, _still_axis: bool = False,
                 **schedule_params: Any) -> None:
        super().__init__()
        if rope is not None:
            if not isinstance(rope, Rope):
                raise TypeError("rope must be a gpe.Rope; got %s" % type(rope).__name__)
            if schedule_params or rotary_dim is not None or partial_rotary_factor is not None:
                raise ValueError("give rope= or the schedule's parameters, not both")
            if rope.shape[0] != dim:
                raise ValueError("rope has head_dim %d but dim is %d" % (rope.shape[0], dim))
            if rope.shape[2] != (2 if _still_axis else 1):
                raise ValueError("RotaryEmbedding takes single-axis RoPE (one position per "
                                 "token); rope has %d axes" % rope.shape[2])
        else:
            if pairing not in _PAIRINGS:
                raise ValueError("pairing must be 'half' or 'interleaved'; got %r" % (pairing,))
            if rotary_dim is not None and partial_rotary_factor is not None:
                raise ValueError("give rotary_dim or partial_rotary_factor, not both")
            if partial_rotary_factor is not None:
                rotary_dim = int(dim * partial_rotary_factor)
            rope = Rope(dim, rotary_dim=rotary_dim, base=base, pairing=_PAIRINGS[pairing],
                        schedule=schedule, num_threads=num_threads, **schedule_params)
        self.rope = rope
        # Partial "proportional" RoPE (from_hf_config): a second axis held at position 0.
        self._still_axis = bool(_still_axis)
        self.dim = int(dim)
        self.max_seq_len = max_seq_len
        self.track_length = bool(track_length) and rope._args["schedule"] in _TRACKED
        if self.track_length and rope._args["original_max_position"] is None:
            raise ValueError("track_length needs the schedule's original_max_position")
        # (shape, dtype class, role), positions, table: the last call's table.
        self._cache: Optional[Tuple[Any, Optional[torch.Tensor], RopeTable]] = None

    @classmethod
    def from_hf_config(cls, config: Any, *, layer_type: Optional[str] = None,
                       current_length: Optional[int] = None,
                       pairing: Literal["half", "half_split", "interleaved"] = "half",
                       num_threads: int = 1, track_length: bool = True) -> "RotaryEmbedding":
        """The RoPE of a Hugging Face transformers config (gpe.Rope.from_hf_config),
        following the length as transformers does (track_length). Partial
        "proportional" RoPE too: its frequency-0 planes are M-RoPE's second section,
        held at position 0."""
        from gpe._hf_config import rope_arguments  # noqa: lazy, pure Python
        args = rope_arguments(config, layer_type=layer_type, current_length=current_length,
                              pairing=_PAIRINGS.get(pairing, pairing), still_planes=True)
        rope = Rope(**args, num_threads=num_threads)
        return cls(rope.shape[0], rope=rope, track_length=track_length,
                   _still_axis="mrope_sections" in args)

    def _follow_length(self, x: torch.Tensor, pos: Optional[torch.Tensor]) -> None:
        """track_length: the Rope for this call's length (class docstring)."""
        args = self.rope._args
        length = x.shape[1] if pos is None else int(pos.max()) + 1 if pos.numel() else 0
        current = args["current_length"]
        l0 = args["original_max_position"]
        # Lengths up to L0 all mean "not extended" (0): a new Rope only when that changes.
        if args["schedule"] == "longrope":
            current = length if length > l0 else 0
        elif length > max(current, l0):  # dynamic NTK: grow
            current = length
        elif length < l0 < current:  # back below the original context: reset
            current = 0
        if current != args["current_length"]:
            self.rope = Rope(**dict(args, current_length=current))
            self._cache = None

    def __getstate__(self) -> Any:
        # copy.deepcopy / pickle: the Rope rebuilds itself (gpe.Rope.__reduce__); the
        # cached table is left behind and rebuilt on the next call.
        state = super().__getstate__() if hasattr(super(), "__getstate__") else self.__dict__
        state = dict(state)
        state["_cache"] = None
        return state

    def extra_repr(self) -> str:
        head_dim, rotary_dim, axes = self.rope.shape
        return "dim=%d, rotary_dim=%d" % (head_dim, rotary_dim)

    def _positions(self, x: torch.Tensor, input_pos: Any) -> Optional[torch.Tensor]:
        if input_pos is None:
            return None
        pos = torch.as_tensor(input_pos).detach().to("cpu")
        if pos.dtype.is_floating_point or pos.dtype.is_complex or pos.dtype == torch.bool:
            raise TypeError("input_pos must be integers; got %s" % pos.dtype)
        batch, seq = x.shape[0], x.shape[1]
        if pos.dim() == 1 and pos.shape[0] == seq:
            pos = pos.expand(batch, seq)
        if tuple(pos.shape) != (batch, seq):
            raise ValueError("input_pos must be [batch, seq] = [%d, %d] or [seq]; got %s"
                             % (batch, seq, tuple(pos.shape)))
        return pos.to(torch.int64).reshape(-1).contiguous()

    def table(self, x: torch.Tensor, input_pos: Any = None, role: Role = "query") -> RopeTable:
        """The gpe.RopeTable forward uses for x's tokens (cached: see the module
        docstring)."""
        pos = self._positions(x, input_pos)
        if self.track_length:
            self._follow_length(x, pos)
        wide = x.dtype == torch.float64
        key = (tuple(x.shape[:2]), wide, role)
        if self._cache is not None:
            ckey, cpos, table = self._cache
            if ckey == key and (cpos is None if pos is None else
                                cpos is not None and torch.equal(cpos, pos)):
                return table
        like = np.empty((x.shape[0], x.shape[1], 1, self.dim),
                        dtype=np.float64 if wide else np.float32)
        positions = None if pos is None else pos.numpy()
        if self._still_axis:
            first = pos if pos is not None else torch.arange(x.shape[1]).repeat(x.shape[0])
            positions = torch.stack([first, torch.zeros_like(first)]).numpy()
        table = self.rope.table(like, positions=positions, role=role)
        # A copy: pos may be a view of the caller's tensor (int64 on the CPU), which a
        # decoding loop advances in place; the cached copy must keep the table's positions.
        self._cache = (key, None if pos is None else pos.clone(), table)
        return table

    def forward(self, x: torch.Tensor, input_pos: Any = None, *,
                role: Role = "query") -> torch.Tensor:
        """x [batch, seq, heads, dim] rotated at its tokens' positions (module docstring)."""
        if not isinstance(x, torch.Tensor):
            raise TypeError("x must be a torch.Tensor")
        if x.dim() != 4 or x.shape[-1] != self.dim:
            raise ValueError("x must be [batch, seq, heads, %d]; got shape %s"
                             % (self.dim, tuple(x.shape)))
        if x.dtype not in _DTYPES:
            raise TypeError("RotaryEmbedding: unsupported dtype %s (float32, float64, "
                            "bfloat16, float16)" % x.dtype)
        if x.device.type == "cuda":
            return self._rotate_cuda(x, input_pos, role)
        if x.device.type != "cpu":
            raise ValueError("x must be a CPU or CUDA tensor, got device %s" % x.device)
        return self._rotate(x, input_pos, role)

    def _rotate_cuda(self, x: torch.Tensor, input_pos: Any, role: Role) -> torch.Tensor:
        """On a CUDA device: the library's RoPE on the GPU with this module's Rope (the kernel
        forms the angles per call from the positions, so no table is cached),
        differentiable; float64 is refused by the library."""
        pos = self._positions(x, input_pos)
        if self.track_length:
            self._follow_length(x, pos)
        positions = pos
        if self._still_axis:
            first = pos if pos is not None else torch.arange(x.shape[1]).repeat(x.shape[0])
            positions = torch.stack([first, torch.zeros_like(first)])
        return _CudaRope.apply(x, self.rope, positions, role, False)

    # The table (a library handle) cannot be traced: under torch.compile this is a graph
    # break, run eagerly. gpe.torch.rope(x, module.rope, positions=...) is the traceable
    # operator (it forms the angles per call).
    @torch.compiler.disable
    def _rotate(self, x: torch.Tensor, input_pos: Any, role: Role) -> torch.Tensor:
        return _TableRope.apply(x, self.table(x, input_pos, role))
