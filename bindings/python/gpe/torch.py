"""GroupPE attention as a PyTorch operator (optional: `import gpe` never imports torch).

    import gpe.torch
    o = gpe.torch.attention(q, k, v, causal=True, rope_dim=64)
    o.sum().backward()

attention() is differentiable in q, k and v through GroupPE's own backward kernels
(gpe_attention_backward, given the forward's o and lse). Tensors are handed to
libgpe.so as DLTensors that point at the tensors' own storage (no copies; inputs whose
head_dim is not contiguous are made contiguous first):

- float32 and bfloat16 run the optimised CPU kernels (float accumulation; attention()'s
  bf16_arithmetic / float32_arithmetic choose the products, gpe/attention.h's "CPU
  ARITHMETIC": the bf16 dot products, AMX tiles, float32 as split bf16 products);
- float64 runs the exact double reference (slow; for torch.autograd.gradcheck and as an
  oracle);
- tensors on a CUDA device run the CUDA kernels through the library's CUDA plugin
  (gpe.h, "CUDA TENSORS"), on PyTorch's current stream: bfloat16, float16 and float32
  (forward), bfloat16 and float16 with head_dim 64 or 128 (backward); causal masks, GQA,
  packed batches, positions, RoPE (rope_dim or a one-axis gpe.Rope) and ALiBi. Other
  options raise GpeError naming them. Not for CUDA-graph capture (index arrays and
  encodings are uploaded per call).

Layouts and options are gpe.attention's (gpe.h, "Attention"): q [batch, seq_q, heads_q,
head_dim], k, v [batch, seq_k, heads_kv, head_dim] (heads_q a multiple of heads_kv), or
packed [tokens, heads, head_dim] with cu_seqlens_q / cu_seqlens_k (int64 [batch + 1]).
Any strides with head_dim contiguous are read in place: a KV cache kept as PyTorch's
[batch, heads, seq, head_dim] is passed as k.transpose(1, 2), a view (decoding reads such
head-major caches head after head, as fast as token-major ones);
q_positions / k_positions (int64, one per token) are global positions, so a shard of a
long sequence keeps its encoding and causal mask. Encodings: rope_dim (RoPE), alibi,
or encoding = a gpe.GrapeM / gpe.AlgebraicSequence; additive bias: alibi, or bias = a
gpe.bias object (Alibi, T5Bias; FoxBias or GrapeApBias for batch 1). gpe.bias and
gpe.sequence objects hold copies of their parameters, which stay fixed.

Learnable encodings: bias = AlibiBias(slopes), T5Bias(table), FoxBias(gate_logits),
GrapeABias(slopes= or gate_logits=), GrapeApBias(w, u), and encoding =
GrapeMEncoding(a, b, omega) or AlgebraicSequenceEncoding(weight) (Kogkalidis et al.'s
W^p = exp(p S), S = weight - weight^T) take torch tensors (nn.Parameters, or activations such as
gate logits computed from the tokens). They are torch.nn.Modules (a Parameter given to
one is registered), rebuilt into the library's handle from the tensors' current values
at every call, and their tensors receive gradients through
gpe_attention_backward_with_parameters (accumulated inside the backward kernels, float64,
cast to each tensor's dtype). Under torch.compile, build them outside the compiled
function (as modules usually are) and pass them in.

Structured positions and Shaw labels take gpe.attention's keyword arguments (rope_axes,
rope_sections, rope_sections_interleaved, q_axes, k_axes, q_tree, k_tree,
algebraic_tree, algebraic_grid, shaw_max_distance, shaw_key_table, shaw_value_table);
the Shaw tables and the algebraic tree's or grid's skew generators (algebraic_tree,
algebraic_grid; keep them skew, e.g. A - A^T of a Parameter A) may be tensors with
requires_grad (their gradients come from the same backward), the rest are constants of
the call.

Any RoPE schedule inside the kernel: rope=gpe.Rope(...) in place of rope_dim (q in the
query role, k in the key role: gpe.attention's docstring). Inference-engine options,
under flash-attn's and SDPA's names (the layout stays [batch, seq, heads, head_dim],
flash-attn's): window_size=(left, right) (sliding window, -1 unbounded), softcap
(Gemma 2; at most 1e30), alibi_slopes ([heads_q]: flash-attn's ALiBi, -slope |i - j| on the KV-cache
positions; learnable when it requires grad), is_causal (SDPA's: top-left where seq_q !=
seq_k, query i sees keys j <= i; causal over explicit q / k positions where given; refused
where seq_q != seq_k with windows or positional encodings and default positions, where
causal's bottom-right reading is the library's), softmax_scale
(flash-attn's scale), enable_gqa (SDPA's: heads_q a multiple of heads_kv is always
allowed; False refuses it as SDPA does), attn_mask (SDPA's: bool, True takes part, or
float added to the scores; broadcastable to [batch, heads_q, seq_q, seq_k]; no gradient;
a row with every key masked gives o = 0, as PyTorch 2.15's SDPA; older SDPA gives NaN;
a row filled with finfo.min, the Hugging Face eager convention, counts as masked here
where SDPA averages v over it; scale=0 is refused); dropout_p is refused. sinks: one
logit per query head (gpt-oss), a tensor [heads_q] whose gradient comes from the same
backward (requires_grad); AttentionSinks(num_heads) holds learnable ones.

rope(x, gpe.Rope(...), positions / offsets) applies any RoPE schedule (linear, dynamic
NTK, YaRN, LongRoPE, Llama 3), xPos or partial rotary as an operator (gpe::rope_forward /
gpe::rope_backward), differentiable in x.

Context parallelism over torch.distributed (ring, all-gather-KV, Ulysses) is the
separate module gpe.context_parallel (its attention and sharding helpers take these
modules' learnable biases and encodings too).

The operators are registered with torch.library as gpe::attention_forward and
gpe::attention_backward, with shape-only (fake) implementations, so they trace under
torch.compile and FakeTensor mode; autograd is registered on the forward.
return_lse=True also returns lse [tokens_q, heads_q] (float64 for float64 inputs, else
float32; -inf for rows with no allowed key) for gpe.merge_attention-style combination;
lse carries no gradient (it is marked non-differentiable).
"""

import ctypes
from typing import TYPE_CHECKING, Any, List, Literal, Optional, Sequence, Tuple, Union, cast

import numpy.typing as npt
import torch

from gpe import _ffi
from gpe._core import check, lib, live_handle
# Shared with gpe.torch_sequence (and named here too: gpe.context_parallel and callers
# reach them as gpe.torch._register, gpe.torch._LearnableBias).
from gpe._torch_base import (_DTYPES, _ENCODINGS, _LearnableBias, _dltensor,  # noqa: F401
                              _int64s, _register, _rope_cuda)

# No `from __future__ import annotations` here: torch.library.custom_op reads the
# operators' annotations as objects to infer their schemas. Names imported for annotations
# only are therefore quoted.
if TYPE_CHECKING:  # imported lazily at run time, as the code below does
    from gpe.bias import AdditiveBias as _AdditiveBias
    from gpe.bias import Alibi as _Alibi
    from gpe.bias import FoxBias as _GpeFoxBias
    from gpe.bias import GrapeABias as _GpeGrapeABias
    from gpe.bias import GrapeApBias as _GpeGrapeApBias
    from gpe.bias import T5Bias as _GpeT5Bias
    from gpe.rope import Layout as _Layout
    from gpe.rope import Role as _Role
    from gpe.rope import Rope as _Rope
    from gpe.sequence import AlgebraicSequence as _AlgebraicSequence
    from gpe.sequence import GrapeM as _GrapeM

# A tensor, or anything torch.as_tensor takes.
_TensorLike = Union[torch.Tensor, npt.ArrayLike]

__all__ = ["AlgebraicSequenceEncoding", "AlibiBias", "AttentionSinks", "FoxBias", "GrapeABias",
           "GrapeApBias", "GrapeMEncoding", "T5Bias", "attention", "rope"]

_PAIRING = {"interleaved": 0, "half": 1}
# ---- Learnable encodings: torch tensors in, gradients out ------------------------------


def _as_param(module, name, t):
    """Stores t on module: registered when it is an nn.Parameter, a plain attribute (an
    activation, e.g. gate logits computed from the tokens) otherwise."""
    if t is None:
        setattr(module, name, None)
        return
    if not isinstance(t, torch.Tensor):
        t = torch.as_tensor(t, dtype=torch.float64)
    setattr(module, name, t)


def _doubles(t):
    """A float64 NumPy copy of a parameter tensor (the library copies it again at creation)."""
    return t.detach().to(device="cpu", dtype=torch.float64).contiguous().numpy()


class AlibiBias(_LearnableBias):
    """ALiBi with learnable slopes [heads] (Press et al., sec. 3): b = -m_h (i - j), or
    -m_h |i - j| with symmetric=True. AlibiBias.press(heads) starts from Press et al.'s
    slopes as a Parameter."""

    def __init__(self, slopes: _TensorLike, symmetric: bool = False) -> None:
        super().__init__()
        _as_param(self, "slopes", slopes)
        self.symmetric = bool(symmetric)

    @classmethod
    def press(cls, num_heads: int, symmetric: bool = False) -> "AlibiBias":
        from gpe.bias import Alibi
        return cls(torch.nn.Parameter(torch.as_tensor(Alibi(num_heads).slopes)), symmetric)

    def tensors(self) -> Tuple[torch.Tensor, None]:
        return self.slopes, None

    def build(self, a: torch.Tensor, b: Optional[torch.Tensor], heads: Optional[int],
              head_dim: int) -> "_Alibi":
        from gpe.bias import Alibi
        return Alibi(a.shape[0], slopes=_doubles(a), symmetric=self.symmetric)


class T5Bias(_LearnableBias):
    """T5 relative buckets (Raffel et al., sec. 2.1): b = table[bucket(j - i), h], table
    [num_buckets, heads] learnable."""

    def __init__(self, table: _TensorLike, max_distance: int = 128,
                 bidirectional: bool = True) -> None:
        super().__init__()
        _as_param(self, "table", table)
        self.max_distance, self.bidirectional = int(max_distance), bool(bidirectional)

    def tensors(self) -> Tuple[torch.Tensor, None]:
        return self.table, None

    def build(self, a: torch.Tensor, b: Optional[torch.Tensor], heads: Optional[int],
              head_dim: int) -> "_GpeT5Bias":
        from gpe.bias import T5Bias as _T5
        return _T5(_doubles(a), max_distance=self.max_distance,
                   bidirectional=self.bidirectional)


class FoxBias(_LearnableBias):
    """FoX (Lin et al., Forgetting Transformer): b = c_i - c_j, c_t = sum_{l <= t} ln
    sigmoid(x_l), gate logits x [length, heads] (token t at first_position + t; batch 1)."""

    def __init__(self, gate_logits: _TensorLike, first_position: int = 0) -> None:
        super().__init__()
        _as_param(self, "gate_logits", gate_logits)
        self.first_position = int(first_position)

    def tensors(self) -> Tuple[torch.Tensor, None]:
        return self.gate_logits, None

    def build(self, a: torch.Tensor, b: Optional[torch.Tensor], heads: Optional[int],
              head_dim: int) -> "_GpeFoxBias":
        from gpe.bias import FoxBias as _Fox
        return _Fox(_doubles(a), first_position=self.first_position)


class GrapeABias(_LearnableBias):
    """Additive GRAPE (GRAPE, "Additive GRAPE"): slopes [heads] (b = -m_h (i - j)) or, with
    gate_logits [length, heads], FoX's content-gated c_i - c_j; path "closed_form" or
    "lifted" (the lift to head_dim + 2 dimensions)."""

    def __init__(self, slopes: Optional[_TensorLike] = None,
                 gate_logits: Optional[_TensorLike] = None, first_position: int = 0,
                 path: Literal["closed_form", "lifted"] = "closed_form") -> None:
        super().__init__()
        if (slopes is None) == (gate_logits is None):
            raise ValueError("GrapeABias takes slopes or gate_logits (one of them)")
        _as_param(self, "slopes", slopes)
        _as_param(self, "gate_logits", gate_logits)
        self.first_position, self.path = int(first_position), path

    def tensors(self) -> Tuple[torch.Tensor, None]:
        return (self.slopes if self.gate_logits is None else self.gate_logits), None

    def build(self, a: torch.Tensor, b: Optional[torch.Tensor], heads: Optional[int],
              head_dim: int) -> "_GpeGrapeABias":
        from gpe.bias import GrapeABias as _GrapeA
        if self.gate_logits is None:
            return _GrapeA(head_dim=head_dim, slopes=_doubles(a), path=self.path)
        return _GrapeA(head_dim=head_dim, gate_logits=_doubles(a),
                       first_position=self.first_position, path=self.path)


class GrapeApBias(_LearnableBias):
    """Path-integral additive GRAPE: b(t, j) = sum_{l = j+1..t} -softplus(<w_t, u_l>), w, u
    [length, heads, rank] learnable (batch 1)."""

    def __init__(self, w: _TensorLike, u: _TensorLike, first_position: int = 0) -> None:
        super().__init__()
        _as_param(self, "w", w)
        _as_param(self, "u", u)
        self.first_position = int(first_position)

    def tensors(self) -> Tuple[torch.Tensor, torch.Tensor]:
        return self.w, self.u

    def build(self, a: torch.Tensor, b: Optional[torch.Tensor], heads: Optional[int],
              head_dim: int) -> "_GpeGrapeApBias":
        from gpe.bias import GrapeApBias as _Ap
        return _Ap(_doubles(a), _doubles(b), first_position=self.first_position)


class GrapeMEncoding(torch.nn.Module):
    """GRAPE-M with learnable generators: G(p) = prod_k exp(p omega_k (a_k b_k^T - b_k
    a_k^T)) (GRAPE, multiplicative), a, b [m, head_dim], omega [m], applied to q and k
    inside the kernels."""

    def __init__(self, a: _TensorLike, b: _TensorLike, omega: _TensorLike) -> None:
        super().__init__()
        _as_param(self, "a", a)
        _as_param(self, "b", b)
        _as_param(self, "omega", omega)

    def tensors(self) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return self.a, self.b, self.omega

    def build(self, a: torch.Tensor, b: torch.Tensor, omega: torch.Tensor) -> "_GrapeM":
        from gpe.sequence import GrapeM
        return GrapeM(_doubles(a), _doubles(b), _doubles(omega))


class AlgebraicSequenceEncoding(torch.nn.Module):
    """Kogkalidis et al.'s sequence encoding with a learnable generator: position p acts by
    W^p = exp(p S) on q and k inside the kernels (sec. 3.1), S = A - A^T skew-symmetric
    for any square `weight` A [head_dim, head_dim] (a Parameter is registered), so that
    every update keeps S skew. The kernels' entrywise dL/dS reaches A through that
    subtraction (dL/dA = X - X^T)."""

    def __init__(self, weight: _TensorLike) -> None:
        super().__init__()
        _as_param(self, "weight", weight)

    def skew(self) -> torch.Tensor:
        """S = A - A^T of the current weight A."""
        return self.weight - self.weight.transpose(-1, -2)

    def tensors(self) -> Tuple[torch.Tensor]:
        return (self.skew(),)

    def build(self, skew: torch.Tensor) -> "_AlgebraicSequence":
        from gpe.sequence import AlgebraicSequence
        return AlgebraicSequence(_doubles(skew))


class AttentionSinks(torch.nn.Module):
    """gpt-oss's attention sinks: one learnable logit per query head (zeros at start, a
    float32 Parameter `logits` [num_heads]) in every row's softmax denominator, attending
    to nothing. Pass it (or its logits) as attention(..., sinks=...)."""

    def __init__(self, num_heads: int, dtype: torch.dtype = torch.float32) -> None:
        super().__init__()
        self.logits = torch.nn.Parameter(torch.zeros(int(num_heads), dtype=dtype))

    def forward(self) -> torch.Tensor:
        return self.logits


class _Structured:
    """gpe.attention's structured-position keyword arguments (constants of a call), as the
    NumPy arrays its option builder reads; Shaw tables travel as operator tensors."""

    def __init__(self, kwargs):
        from gpe.attention import _split_structured
        st = _split_structured(kwargs)
        for name in ("q_axes", "k_axes", "rope_sections"):
            if isinstance(st[name], torch.Tensor):
                # A copy: a view would follow the caller's later in-place edits into
                # the backward.
                st[name] = st[name].detach().cpu().numpy().copy()
        # A tree's or grid's generators given as a tensor travel as the operator's
        # `algebraic` tensor (their gradient comes from the backward); the name says which.
        self.algebraic_param = None
        self.algebraic = None
        for name in ("algebraic_tree", "algebraic_grid"):
            if isinstance(st[name], torch.Tensor):
                self.algebraic_param, self.algebraic = name, st[name]
                st[name] = None
        if ((st["algebraic_tree"] is not None or self.algebraic_param == "algebraic_tree")
                and st["q_tree"] is None):
            raise ValueError("algebraic_tree needs q_tree and k_tree (tree addresses)")
        self.kwargs = {k: v for k, v in st.items()
                       if k not in ("shaw_key_table", "shaw_value_table")}


def _options(keep, q_positions, k_positions, cu_seqlens_q, cu_seqlens_k, causal, scale,
             rope_dim, rope_base, rope_pairing, alibi, encoding_key, bias_key, threads,
             structured_key, params, heads, head_dim, extras=None, arithmetic=(0, 0)):
    from gpe.attention import _Keep, _rope_window_softcap, _structured
    from gpe.sequence import AlgebraicSequence, GrapeM  # noqa: lazy, as gpe.attention
    bias_a, bias_b, grape_a, grape_b, grape_omega, shaw_k, shaw_v, sinks, algebraic = params
    o = _ffi.AttentionOptions()
    o.struct_size = ctypes.sizeof(o)
    o.causal = 1 if causal else 0
    o.softmax_scale = float(scale)
    o.num_threads = int(threads)
    o.rope_dim = int(rope_dim)
    o.rope_base = float(rope_base)
    o.rope_pairing = _PAIRING[rope_pairing]
    if alibi and bias_key:
        raise ValueError("give alibi or bias, not both")
    if bias_key:
        bias = _ENCODINGS.get(bias_key)
        if bias is None:
            raise ValueError("the bias object was freed before the call")
        if isinstance(bias, _LearnableBias):
            if bias_a is None:
                raise ValueError("a learnable bias needs its parameter tensors")
            bias = bias.build(bias_a, bias_b, heads, head_dim)
            keep.append(bias)
        o.bias = live_handle(bias, "bias", keep)
    if alibi:  # Press et al.'s slopes for the query heads, as a gpe.bias handle
        from gpe.bias import Alibi
        bias = Alibi(heads, symmetric=alibi == "symmetric")
        keep.append(bias)
        o.bias = bias._handle
    if encoding_key:
        enc = _ENCODINGS.get(encoding_key)
        if enc is None:
            raise ValueError("the encoding object was freed before the call")
        if isinstance(enc, GrapeMEncoding):
            enc = enc.build(grape_a, grape_b, grape_omega)
            keep.append(enc)
        elif isinstance(enc, AlgebraicSequenceEncoding):
            if algebraic is None:
                raise ValueError("a learnable algebraic encoding needs its generator tensor")
            enc = enc.build(algebraic)
            keep.append(enc)
        if isinstance(enc, GrapeM):
            o.grape_m = live_handle(enc, "encoding", keep)
        elif isinstance(enc, AlgebraicSequence):
            o.algebraic = live_handle(enc, "encoding", keep)
    ints = lambda t, n: None if t is None else _dltensor(t.contiguous(), n, keep, cuda=True)
    o.q_positions = ints(q_positions, "q_positions")
    o.k_positions = ints(k_positions, "k_positions")
    o.cu_seqlens_q = ints(cu_seqlens_q, "cu_seqlens_q")
    o.cu_seqlens_k = ints(cu_seqlens_k, "cu_seqlens_k")
    from gpe.attention import _STRUCTURED_DEFAULTS
    st = dict(_STRUCTURED_DEFAULTS)
    if structured_key:
        holder = _ENCODINGS.get(structured_key)
        if holder is None:
            raise ValueError("the structured positions were freed before the call")
        st.update(holder.kwargs)
        if holder.algebraic_param is not None:
            if algebraic is None:
                raise ValueError("%s was given as a tensor but not passed to the operator"
                                 % holder.algebraic_param)
            st[holder.algebraic_param] = _doubles(algebraic)
    rope_key, window_left, window_right, softcap, attn_mask = (
        tuple(extras or ()) + _EXTRA_DEFAULTS[len(extras or ()):])
    rope = None
    if rope_key:
        rope = _ENCODINGS.get(rope_key)
        if rope is None:
            raise ValueError("the gpe.Rope object was freed before the call")
    window = None if (window_left, window_right) == (-1, -1) else (window_left, window_right)
    _rope_window_softcap(o, keep, rope, window, softcap)
    if attn_mask is not None:  # 4-D float32 or uint8 (attention() prepared it)
        o.attn_mask = _dltensor(attn_mask, "attn_mask", keep)
    if sinks is not None:
        o.sinks = _dltensor(_sinks_float32(sinks), "sinks", keep)
    st["shaw_key_table"] = None if shaw_k is None else _doubles(shaw_k)
    st["shaw_value_table"] = None if shaw_v is None else _doubles(shaw_v)
    k2 = _Keep()
    keep.append(k2)
    _structured(k2, o, **st)
    o.bf16_arithmetic, o.float32_arithmetic = (int(a) for a in arithmetic)
    return o


# The attention operators upload index arrays and encodings per call (and may wait for
# a device-to-host copy of index arrays): never captured into a CUDA graph.
_CUDAGRAPH_UNSAFE = ((torch.Tag.cudagraph_unsafe,) if hasattr(torch.Tag, "cudagraph_unsafe")
                     else ())


def _cuda_stream(opts, q):
    """Calls on CUDA tensors run on PyTorch's current stream of q's device: the library
    enqueues its kernels there and returns without waiting, as a PyTorch operator does."""
    if q.device.type == "cuda":
        opts.cuda_stream = torch.cuda.current_stream(q.device).cuda_stream


def _o_like(q, v):
    """An empty contiguous o: q's shape with v's head size last (the value head size may
    differ from q's and k's, e.g. DeepSeek's 192/128)."""
    return q.new_empty(q.shape[:-1] + v.shape[-1:])


def _lse_like(q, packed):
    tokens = q.shape[0] if packed else q.shape[0] * q.shape[1]
    dtype = torch.float64 if q.dtype == torch.float64 else torch.float32
    return q.new_empty((tokens, q.shape[-2]), dtype=dtype)


def forward_impl(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                 q_positions: Optional[torch.Tensor], k_positions: Optional[torch.Tensor],
                 cu_seqlens_q: Optional[torch.Tensor], cu_seqlens_k: Optional[torch.Tensor],
                 causal: bool, scale: float, rope_dim: int, rope_base: float,
                 rope_pairing: str, alibi: str, encoding_key: int, bias_key: int,
                 threads: int, structured_key: int = 0, bias_a: Optional[torch.Tensor] = None,
                 bias_b: Optional[torch.Tensor] = None, grape_a: Optional[torch.Tensor] = None,
                 grape_b: Optional[torch.Tensor] = None,
                 grape_omega: Optional[torch.Tensor] = None,
                 shaw_key_table: Optional[torch.Tensor] = None,
                 shaw_value_table: Optional[torch.Tensor] = None,
                 sinks: Optional[torch.Tensor] = None, rope_key: int = 0,
                 window_left: int = -1, window_right: int = -1, softcap: float = 0.0,
                 attn_mask: Optional[torch.Tensor] = None,
                 algebraic: Optional[torch.Tensor] = None, bf16_arithmetic: int = 0,
                 float32_arithmetic: int = 0
                 ) -> Tuple[torch.Tensor, torch.Tensor]:
    """(o, lse) through gpe_attention_forward: the body of gpe::attention_forward, also
    called directly by eager autograd and gpe.context_parallel. bf16_arithmetic and
    float32_arithmetic: gpe/attention.h's GPE_BF16_ARITHMETIC_* / GPE_FLOAT32_ARITHMETIC_*
    codes."""
    keep: List[Any] = []
    params = (bias_a, bias_b, grape_a, grape_b, grape_omega, shaw_key_table, shaw_value_table,
              sinks, algebraic)
    opts = _options(keep, q_positions, k_positions, cu_seqlens_q, cu_seqlens_k, causal, scale,
                    rope_dim, rope_base, rope_pairing, alibi, encoding_key, bias_key, threads,
                    structured_key, params, q.shape[-2], q.shape[-1],
                    (rope_key, window_left, window_right, softcap, attn_mask),
                    (bf16_arithmetic, float32_arithmetic))
    o = _o_like(q, v)
    lse = _lse_like(q, cu_seqlens_q is not None)
    _cuda_stream(opts, q)
    t = lambda x, n: _dltensor(x, n, keep, cuda=True)
    check(lib().gpe_attention_forward(ctypes.byref(opts), t(q, "q"), t(k, "k"), t(v, "v"),
                                      t(o, "o"), t(lse, "lse")))
    return o, lse


@torch.library.custom_op("gpe::attention_forward", mutates_args=(),
                         device_types=("cpu", "cuda"), tags=_CUDAGRAPH_UNSAFE)
def _forward_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                q_positions: Optional[torch.Tensor], k_positions: Optional[torch.Tensor],
                cu_seqlens_q: Optional[torch.Tensor], cu_seqlens_k: Optional[torch.Tensor],
                causal: bool, scale: float, rope_dim: int, rope_base: float, rope_pairing: str,
                alibi: str, encoding_key: int, bias_key: int, threads: int,
                structured_key: int = 0, bias_a: Optional[torch.Tensor] = None,
                bias_b: Optional[torch.Tensor] = None, grape_a: Optional[torch.Tensor] = None,
                grape_b: Optional[torch.Tensor] = None,
                grape_omega: Optional[torch.Tensor] = None,
                shaw_key_table: Optional[torch.Tensor] = None,
                shaw_value_table: Optional[torch.Tensor] = None,
                sinks: Optional[torch.Tensor] = None, rope_key: int = 0, window_left: int = -1,
                window_right: int = -1, softcap: float = 0.0,
                attn_mask: Optional[torch.Tensor] = None,
                algebraic: Optional[torch.Tensor] = None, bf16_arithmetic: int = 0,
                float32_arithmetic: int = 0
                ) -> Tuple[torch.Tensor, torch.Tensor]:
    return forward_impl(q, k, v, q_positions, k_positions, cu_seqlens_q, cu_seqlens_k, causal,
                        scale, rope_dim, rope_base, rope_pairing, alibi, encoding_key, bias_key,
                        threads, structured_key, bias_a, bias_b, grape_a, grape_b, grape_omega,
                        shaw_key_table, shaw_value_table, sinks, rope_key, window_left,
                        window_right, softcap, attn_mask, algebraic, bf16_arithmetic,
                        float32_arithmetic)


@_forward_op.register_fake
def _(q, k, v, q_positions, k_positions, cu_seqlens_q, cu_seqlens_k, *args, **kwargs):
    return _o_like(q, v), _lse_like(q, cu_seqlens_q is not None)


def backward_impl(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor,
                  lse: torch.Tensor, d_o: torch.Tensor, q_positions: Optional[torch.Tensor],
                  k_positions: Optional[torch.Tensor], cu_seqlens_q: Optional[torch.Tensor],
                  cu_seqlens_k: Optional[torch.Tensor], causal: bool, scale: float,
                  rope_dim: int, rope_base: float, rope_pairing: str, alibi: str,
                  encoding_key: int, bias_key: int, threads: int, structured_key: int = 0,
                  bias_a: Optional[torch.Tensor] = None, bias_b: Optional[torch.Tensor] = None,
                  grape_a: Optional[torch.Tensor] = None, grape_b: Optional[torch.Tensor] = None,
                  grape_omega: Optional[torch.Tensor] = None,
                  shaw_key_table: Optional[torch.Tensor] = None,
                  shaw_value_table: Optional[torch.Tensor] = None,
                  sinks: Optional[torch.Tensor] = None,
                  param_grads: Sequence[bool] = (False,) * 9, rope_key: int = 0,
                  window_left: int = -1, window_right: int = -1, softcap: float = 0.0,
                  attn_mask: Optional[torch.Tensor] = None,
                  algebraic: Optional[torch.Tensor] = None, bf16_arithmetic: int = 0,
                  float32_arithmetic: int = 0
                  ) -> Tuple[Optional[torch.Tensor], ...]:
    """(dq, dk, dv) through gpe_attention_backward given the forward's o and lse (float32 and
    bfloat16 kernels read them; the float64 reference recomputes its own). With any of
    param_grads set (one flag per parameter: bias_a, bias_b, grape_a, grape_b,
    grape_omega, shaw_key_table, shaw_value_table, sinks, algebraic; missing trailing
    flags are False), returns (dq, dk, dv) + nine float64 parameter gradients (None where
    not asked) through gpe_attention_backward_with_parameters. algebraic: the generators
    of the algebraic encoding (an AlgebraicSequenceEncoding's skew, or a tree's or grid's
    generators given as a tensor); its gradient is d_algebraic, d_algebraic_tree or
    d_algebraic_grid, whichever the options hold."""
    keep: List[Any] = []
    params = (bias_a, bias_b, grape_a, grape_b, grape_omega, shaw_key_table, shaw_value_table,
              sinks, algebraic)
    param_grads = tuple(param_grads) + (False,) * (len(params) - len(param_grads))
    opts = _options(keep, q_positions, k_positions, cu_seqlens_q, cu_seqlens_k, causal, scale,
                    rope_dim, rope_base, rope_pairing, alibi, encoding_key, bias_key, threads,
                    structured_key, params, q.shape[-2], q.shape[-1],
                    (rope_key, window_left, window_right, softcap, attn_mask),
                    (bf16_arithmetic, float32_arithmetic))
    # The ABI wants d_o with o's strides (on dimensions of size above 1; the strides of
    # size-1 dimensions are free) and gradients with their inputs' strides.
    if o is None:  # o and lse recomputed by the library
        d_o = d_o.contiguous()
    elif any(n > 1 and a != b for n, a, b in zip(o.shape, d_o.stride(), o.stride())):
        d_o = torch.empty_strided(o.shape, o.stride(), dtype=d_o.dtype,
                                  device=d_o.device).copy_(d_o)
    dq, dk, dv = (torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device=x.device)
                  for x in (q, k, v))
    _cuda_stream(opts, q)
    t = lambda x, n: _dltensor(x, n, keep, cuda=True)
    args = (ctypes.byref(opts), t(q, "q"), t(k, "k"), t(v, "v"), t(o, "o"), t(lse, "lse"),
            t(d_o, "d_o"), t(dq, "dq"), t(dk, "dk"), t(dv, "dv"))
    if not any(param_grads):
        check(lib().gpe_attention_backward(*args))
        return dq, dk, dv
    grads = [torch.empty(p.shape, dtype=torch.float64) if want and p is not None else None
             for p, want in zip(params, param_grads)]
    pg = _ffi.AttentionParamGrads()
    for name, g in zip(_PARAM_NAMES, grads):  # the struct's fields are d_<name> ...
        if name == "algebraic":  # ... but the algebraic generators' field names the kind
            name = ("algebraic_tree" if opts.algebraic_tree else
                    "algebraic_grid" if opts.algebraic_grid else "algebraic")
        setattr(pg, "d_" + name, None if g is None else _dltensor(g, "d_" + name, keep))
    check(lib().gpe_attention_backward_with_parameters(*args, ctypes.byref(pg)))
    return (dq, dk, dv) + tuple(grads)


@torch.library.custom_op("gpe::attention_backward", mutates_args=(),
                         device_types=("cpu", "cuda"), tags=_CUDAGRAPH_UNSAFE)
def _backward_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor,
                 lse: torch.Tensor, d_o: torch.Tensor, q_positions: Optional[torch.Tensor],
                 k_positions: Optional[torch.Tensor], cu_seqlens_q: Optional[torch.Tensor],
                 cu_seqlens_k: Optional[torch.Tensor], causal: bool, scale: float,
                 rope_dim: int, rope_base: float, rope_pairing: str, alibi: str,
                 encoding_key: int, bias_key: int,
                 threads: int) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    # Without parameter gradients backward_impl returns exactly (dq, dk, dv).
    return cast(Tuple[torch.Tensor, torch.Tensor, torch.Tensor],
                backward_impl(q, k, v, o, lse, d_o, q_positions, k_positions, cu_seqlens_q,
                              cu_seqlens_k, causal, scale, rope_dim, rope_base, rope_pairing,
                              alibi, encoding_key, bias_key, threads))


@_backward_op.register_fake
def _(q, k, v, o, lse, d_o, *args):
    return tuple(torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device=x.device)
                 for x in (q, k, v))


@torch.library.custom_op("gpe::attention_backward_with_parameters", mutates_args=(),
                         device_types=("cpu", "cuda"), tags=_CUDAGRAPH_UNSAFE)
def _backward_params_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor,
                        lse: torch.Tensor, d_o: torch.Tensor,
                        q_positions: Optional[torch.Tensor], k_positions: Optional[torch.Tensor],
                        cu_seqlens_q: Optional[torch.Tensor],
                        cu_seqlens_k: Optional[torch.Tensor], causal: bool, scale: float,
                        rope_dim: int, rope_base: float, rope_pairing: str, alibi: str,
                        encoding_key: int, bias_key: int, threads: int, structured_key: int,
                        bias_a: Optional[torch.Tensor], bias_b: Optional[torch.Tensor],
                        grape_a: Optional[torch.Tensor], grape_b: Optional[torch.Tensor],
                        grape_omega: Optional[torch.Tensor],
                        shaw_key_table: Optional[torch.Tensor],
                        shaw_value_table: Optional[torch.Tensor],
                        sinks: Optional[torch.Tensor],
                        param_grads: List[bool], rope_key: int = 0, window_left: int = -1,
                        window_right: int = -1, softcap: float = 0.0,
                        attn_mask: Optional[torch.Tensor] = None,
                        algebraic: Optional[torch.Tensor] = None, bf16_arithmetic: int = 0,
                        float32_arithmetic: int = 0) -> List[torch.Tensor]:
    """dq, dk, dv and the nine parameter gradients (float64; a 0-element tensor where not
    asked: a schema returns no None)."""
    out = backward_impl(q, k, v, o, lse, d_o, q_positions, k_positions, cu_seqlens_q,
                        cu_seqlens_k, causal, scale, rope_dim, rope_base, rope_pairing, alibi,
                        encoding_key, bias_key, threads, structured_key, bias_a, bias_b,
                        grape_a, grape_b, grape_omega, shaw_key_table, shaw_value_table, sinks,
                        tuple(param_grads), rope_key, window_left, window_right, softcap,
                        attn_mask, algebraic, bf16_arithmetic, float32_arithmetic)
    grads = list(out[3:]) + [None] * (len(_PARAM_NAMES) - len(out[3:]))
    return list(out[:3]) + [q.new_empty((0,), dtype=torch.float64) if g is None else g
                            for g in grads]


@_backward_params_op.register_fake
def _(q, k, v, o, lse, d_o, *args):
    # 14 options, 8 parameters, the flags, 5 extras, then the algebraic generators.
    params, want = tuple(args[14:22]) + (args[28] if len(args) > 28 else None,), args[22]
    return ([torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device=x.device)
             for x in (q, k, v)]
            + [q.new_empty(p.shape if w and p is not None else (0,), dtype=torch.float64)
               for p, w in zip(params, want)])


_OPTION_NAMES = ("q_positions", "k_positions", "cu_seqlens_q", "cu_seqlens_k", "causal", "scale",
                 "rope_dim", "rope_base", "rope_pairing", "alibi", "encoding_key", "bias_key",
                 "threads", "structured_key")
_PARAM_NAMES = ("bias_a", "bias_b", "grape_a", "grape_b", "grape_omega", "shaw_key_table",
                "shaw_value_table", "sinks", "algebraic")
# Options after the parameters (0.9.0): the gpe.Rope's key, the window, the softcap, the
# score mask (a constant tensor: no gradient).
_EXTRA_NAMES = ("rope_key", "window_left", "window_right", "softcap", "attn_mask")
_EXTRA_DEFAULTS = (0, -1, -1, 0.0, None)
# After the algebraic generators (0.10.0): the CPU arithmetic, two integer codes.
_NUM_ARITHMETIC = 2
_NUM_INPUTS = 3 + len(_OPTION_NAMES) + len(_PARAM_NAMES) + len(_EXTRA_NAMES) + _NUM_ARITHMETIC


def _param_input(i):
    """The operator input of parameter i: the first eight follow the options; the algebraic
    generators (0.10.0) come last, after the extras, so that earlier positional calls of
    gpe::attention_forward keep their meaning."""
    n = 3 + len(_OPTION_NAMES)
    return n + i if i < 8 else n + 8 + len(_EXTRA_NAMES) + (i - 8)


def _setup_context(ctx, inputs, output):
    q, k, v = inputs[:3]
    o, lse = output
    n, m = len(_OPTION_NAMES), len(_PARAM_NAMES)
    params = tuple(inputs[_param_input(i)] if _param_input(i) < len(inputs) else None
                   for i in range(m))
    extras = tuple(inputs[3 + n + 8:3 + n + 8 + len(_EXTRA_NAMES)])
    ctx.extras = extras + _EXTRA_DEFAULTS[len(extras):]
    first = _param_input(len(_PARAM_NAMES) - 1) + 1  # the arithmetic codes
    ctx.arithmetic = tuple(int(inputs[first + i]) if first + i < len(inputs) else 0
                           for i in range(_NUM_ARITHMETIC))
    ctx.save_for_backward(q, k, v, o, lse, *params)
    ctx.options = tuple(inputs[3:3 + n])
    # The integer and mask inputs (positions, cu_seqlens, attn_mask, structured axes) are
    # held by reference, not saved: record their versions so that backward refuses them
    # after an in-place change, as autograd does for saved tensors.
    ctx.versions = [(t, t._version) for t in ctx.options + ctx.extras
                    if isinstance(t, torch.Tensor)]
    # Hold the encoding, bias, structured and RoPE objects until backward: their keys alone
    # would dangle once a caller's temporary object is gone.
    ctx.objects = [_ENCODINGS.get(ctx.options[_OPTION_NAMES.index(name)])
                   for name in ("encoding_key", "bias_key", "structured_key")]
    ctx.objects.append(_ENCODINGS.get(ctx.extras[0]))
    ctx.mark_non_differentiable(lse)


def _param_flags(ctx):
    return [bool(ctx.needs_input_grad[_param_input(i)])
            if _param_input(i) < len(ctx.needs_input_grad) else False
            for i in range(len(_PARAM_NAMES))]


def _grads_out(ctx, dq, dk, dv, pgrads, params):
    """The autograd answer: parameter gradients cast to their tensors' dtypes."""
    out = [None] * _NUM_INPUTS
    out[:3] = [dq, dk, dv]
    for i, (g, p, want) in enumerate(zip(pgrads, params, _param_flags(ctx))):
        out[_param_input(i)] = g.to(p.dtype) if want and p is not None else None
    return tuple(out[:len(ctx.needs_input_grad)])


def _check_versions(ctx):
    for t, version in getattr(ctx, "versions", ()):
        if t._version != version:
            raise RuntimeError(
                "gpe.torch.attention: a positions, cu_seqlens, mask or axes tensor of this "
                "call was modified in place after the forward (version %d, now %d); the "
                "backward would use the new values" % (version, t._version))


def _backward(ctx, d_o, d_lse):
    q, k, v, o, lse, *params = ctx.saved_tensors
    _check_versions(ctx)
    flags = _param_flags(ctx)
    if not any(ctx.needs_input_grad[:3]) and not any(flags):
        return (None,) * len(ctx.needs_input_grad)
    out = _backward_params_op(q, k, v, o, lse, d_o, *ctx.options, *params[:8], flags,
                              *ctx.extras, params[8], *ctx.arithmetic)
    return _grads_out(ctx, out[0], out[1], out[2], out[3:], params)


_forward_op.register_autograd(_backward, setup_context=_setup_context)


class _EagerAttention(torch.autograd.Function):
    """The same forward and backward as the registered operators, called directly: eager
    code skips the dispatcher's custom-op layer, whose first call imports the compiler
    stack (seconds per process). Under torch.compile attention() takes the operators."""

    @staticmethod
    def forward(ctx, q, k, v, *options):
        o, lse = forward_impl(q, k, v, *options)
        _setup_context(ctx, (q, k, v) + options, (o, lse))
        return o, lse

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, d_o, d_lse):
        # once_differentiable: a double backward (create_graph=True) raises rather than
        # dropping the second-order terms, as the registered operator does under compile.
        q, k, v, o, lse, *params = ctx.saved_tensors
        _check_versions(ctx)
        flags = _param_flags(ctx)
        if not any(ctx.needs_input_grad[:3]) and not any(flags):
            return (None,) * len(ctx.needs_input_grad)
        *params8, algebraic = params
        out = backward_impl(q, k, v, o, lse, d_o, *ctx.options, *params8, param_grads=flags,
                            algebraic=algebraic, bf16_arithmetic=ctx.arithmetic[0],
                            float32_arithmetic=ctx.arithmetic[1],
                            **dict(zip(_EXTRA_NAMES, ctx.extras)))
        return _grads_out(ctx, out[0], out[1], out[2],
                          out[3:] if any(flags) else (None,) * len(_PARAM_NAMES), params)


def _arithmetic_codes(bf16_arithmetic, float32_arithmetic):
    """gpe.attention's names of the CPU arithmetic as gpe/attention.h's codes."""
    from gpe.attention import _arithmetic_codes as codes
    return codes(bf16_arithmetic, float32_arithmetic)


def _sinks_float32(sinks):
    """sinks as the contiguous float32 CPU tensor the library reads. As gpe.attention's
    numpy path: a finite logit past float32's range is refused (ValueError naming its
    index) rather than rounded to +-inf, which would make its head's rows NaN (+inf) or
    drop its sink (-inf); NaN and +-inf given as such keep their documented meaning."""
    given = sinks.detach().to(device="cpu")
    out = given.to(torch.float32).contiguous()
    if given.is_floating_point() and given.dtype != torch.float32:
        overflowed = torch.isfinite(given) & ~torch.isfinite(out)
        if bool(overflowed.any()):
            i = [int(x) for x in torch.nonzero(overflowed)[0]]
            raise ValueError("sinks%s is %r, beyond float32's range (sinks are float32 "
                             "logits): give a value within +-3.4e38, or -inf for no sink"
                             % (i, given[tuple(i)].item()))
    return out


def _check_cuda_call(q, k, v, attn_mask, sinks):
    """What the CUDA kernels cannot run, refused before any host copy (a mask and sinks
    would be moved to the host only to be refused) and, for a call autograd will
    differentiate, before the forward (the backward takes 16-bit tensors and head_dim 64
    or 128)."""
    if attn_mask is not None:
        raise ValueError("attn_mask is not available for CUDA tensors yet (the CUDA kernels "
                         "take causal masks, positions, RoPE and ALiBi)")
    if sinks is not None:
        raise ValueError("sinks are not available for CUDA tensors yet")
    if torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v)):
        if q.dtype not in (torch.bfloat16, torch.float16) or q.shape[-1] not in (64, 128):
            raise ValueError(
                "the backward on CUDA tensors takes bfloat16 or float16 with head_dim 64 or "
                "128; got %s with head_dim %d (run it under torch.no_grad() for the forward "
                "alone)" % (q.dtype, q.shape[-1]))


def _sdpa_mask(attn_mask):
    """SDPA's attn_mask as the library's: 4-D (leading size-1 dimensions added, which
    broadcast), bool as uint8 (True takes part), floats as float32 (additive); None stays
    None. A mask that requires grad is refused: the library gives it no gradient."""
    if attn_mask is None:
        return None
    if not isinstance(attn_mask, torch.Tensor):
        attn_mask = torch.as_tensor(attn_mask)
    if attn_mask.requires_grad:
        raise ValueError("attn_mask requires grad, but the mask has no gradient here (it is a "
                         "constant of the call); pass attn_mask.detach(), or express a "
                         "learnable additive term as a learnable bias (gpe.torch.AlibiBias, "
                         "T5Bias, ...)")
    if not 2 <= attn_mask.dim() <= 4:
        raise ValueError("attn_mask must have 2 to 4 dimensions, broadcastable to [batch, "
                         "heads_q, seq_q, seq_k]; got shape %s" % (tuple(attn_mask.shape),))
    m = attn_mask.cpu()
    m = m.reshape((1,) * (4 - m.dim()) + tuple(m.shape)) if m.dim() < 4 else m
    if m.dtype == torch.bool:
        return m.view(torch.uint8)
    if m.dtype == torch.uint8 or m.dtype == torch.float32:
        return m
    if m.is_floating_point():
        return m.to(torch.float32)
    raise TypeError("attn_mask must be bool, uint8 or floating point; got %s" % m.dtype)


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
              scale: Optional[float] = None, rope_dim: int = 0, rope_base: float = 10000.0,
              rope_pairing: Literal["half", "interleaved"] = "half",
              alibi: Optional[Literal["causal", "symmetric"]] = None,
              bias: Optional[Union[_LearnableBias, "_AdditiveBias"]] = None,
              encoding: Optional[Union["GrapeMEncoding", "AlgebraicSequenceEncoding",
                                       "_GrapeM", "_AlgebraicSequence"]] = None,
              q_positions: Optional[_TensorLike] = None,
              k_positions: Optional[_TensorLike] = None,
              cu_seqlens_q: Optional[_TensorLike] = None,
              cu_seqlens_k: Optional[_TensorLike] = None, threads: int = 0,
              return_lse: bool = False, rope: Optional["_Rope"] = None,
              window_size: Optional[Tuple[int, int]] = None, softcap: Optional[float] = None,
              sinks: Optional[Union[_TensorLike, "AttentionSinks"]] = None,
              alibi_slopes: Optional[_TensorLike] = None, is_causal: Optional[bool] = None,
              softmax_scale: Optional[float] = None, enable_gqa: Optional[bool] = None,
              attn_mask: Optional[_TensorLike] = None, dropout_p: float = 0.0,
              bf16_arithmetic: str = "auto", float32_arithmetic: str = "exact",
              **structured: Any) -> Union[torch.Tensor, Tuple[torch.Tensor, torch.Tensor]]:
    """softmax(scale <T q, T k> + bias) v per head, differentiable in q, k, v and in the
    tensors of a learnable bias / encoding (AlibiBias, T5Bias, FoxBias, GrapeABias,
    GrapeApBias, GrapeMEncoding, AlgebraicSequenceEncoding), of Shaw tables, of an
    algebraic tree's or grid's generators and of the sinks.

    Arguments as gpe.attention (module docstring), structured positions, rope=gpe.Rope,
    window_size, softcap, sinks, bf16_arithmetic and float32_arithmetic included (the
    CPU kernels' products; the backward of a split float32 forward stays float32; CUDA
    tensors refuse values other than the defaults); positions and cu_seqlens may be int64
    tensors or anything torch.as_tensor takes. flash-attn's alibi_slopes and
    softmax_scale and SDPA's is_causal and enable_gqa are accepted under their names
    (module docstring), SDPA's attn_mask too (module docstring); dropout_p != 0 is
    refused. sinks: a tensor
    [heads_q] (any float dtype, read as float32) or an AttentionSinks. Returns o (like
    q), or (o, lse)."""
    if torch.compiler.is_compiling() and (alibi_slopes is not None or structured):
        # Objects built per call (the ALiBi of alibi_slopes, the structured positions)
        # cannot be constants of a compiled graph: this call runs eagerly (a graph break),
        # with its gradients as outside torch.compile.
        return _attention_eager(
            q, k, v, causal=causal, scale=scale, rope_dim=rope_dim, rope_base=rope_base,
            rope_pairing=rope_pairing, alibi=alibi, bias=bias, encoding=encoding,
            q_positions=q_positions, k_positions=k_positions, cu_seqlens_q=cu_seqlens_q,
            cu_seqlens_k=cu_seqlens_k, threads=threads, return_lse=return_lse, rope=rope,
            window_size=window_size, softcap=softcap, sinks=sinks, alibi_slopes=alibi_slopes,
            is_causal=is_causal, softmax_scale=softmax_scale, enable_gqa=enable_gqa,
            attn_mask=attn_mask, dropout_p=dropout_p, bf16_arithmetic=bf16_arithmetic,
            float32_arithmetic=float32_arithmetic, **structured)
    arithmetic = _arithmetic_codes(bf16_arithmetic, float32_arithmetic)  # names checked first
    if q.device.type == "cuda":
        _check_cuda_call(q, k, v, attn_mask, sinks)
    attn_mask = _sdpa_mask(attn_mask)
    if dropout_p:
        raise ValueError("dropout_p must be 0: attention dropout is not supported")
    if is_causal is not None:
        if causal and not is_causal:
            raise ValueError("causal=True and is_causal=False disagree")
        explicit = (q_positions is not None or k_positions is not None
                    or cu_seqlens_q is not None or cu_seqlens_k is not None)
        if (is_causal and not causal and not explicit and q.dim() == 4
                and q.shape[1] != k.shape[1]):
            # SDPA's is_causal aligns the mask top-left (query i sees keys j <= i); causal
            # here, flash-attn's, aligns it bottom-right (queries are the last seq_q
            # positions). Without positional encodings the first is causal over query
            # positions 0 .. seq_q - 1; with them the two readings give different
            # positions, so the call must say which. (Positions given: causal over them.)
            positional = (rope is not None or rope_dim or alibi or bias is not None
                          or alibi_slopes is not None or encoding is not None or structured
                          or window_size not in (None, (-1, -1)))
            if positional:
                raise ValueError(
                    "is_causal=True with seq_q (%d) != seq_k (%d): SDPA's is_causal aligns "
                    "the mask top-left (query i sees keys j <= i), which is ambiguous here "
                    "with windows or positional encodings; pass causal=True (flash-attn's: "
                    "queries are the last seq_q positions) or explicit q_positions and "
                    "k_positions" % (q.shape[1], k.shape[1]))
            # One position per token, in token order (batch-major): each sequence's own.
            q_positions = torch.arange(q.shape[1], dtype=torch.int64).repeat(q.shape[0])
            k_positions = torch.arange(k.shape[1], dtype=torch.int64).repeat(k.shape[0])
        causal = bool(is_causal) or bool(causal)
    if softmax_scale is not None:
        if scale is not None and float(scale) != float(softmax_scale):
            raise ValueError("give scale or softmax_scale, not both")
        scale = softmax_scale
    if scale is not None and float(scale) == 0.0:
        raise ValueError("scale=0 is not supported (0 selects the default 1/sqrt(head_dim) in "
                         "the library; SDPA's scale=0 is uniform attention)")
    if enable_gqa is not None and not enable_gqa and q.shape[-2] != k.shape[-2]:
        raise ValueError("enable_gqa=False but q has %d heads and k %d (grouped-query "
                         "attention needs enable_gqa=True, as in SDPA)"
                         % (q.shape[-2], k.shape[-2]))
    if alibi_slopes is not None:
        if alibi or bias is not None:
            raise ValueError("give one of alibi, bias and alibi_slopes")
        slopes = torch.as_tensor(alibi_slopes)
        if slopes.dim() != 1:
            raise ValueError("alibi_slopes must be [heads_q] (one slope per query head); "
                             "per-batch slopes [batch, heads_q] are not supported")
        # flash-attn's bias -slope |i + seqlen_k - seqlen_q - j|: symmetric ALiBi on the
        # KV-cache positions (the default ones here).
        bias = AlibiBias(slopes, symmetric=True)
    if isinstance(sinks, AttentionSinks):
        sinks = sinks.logits
    if sinks is not None and not isinstance(sinks, torch.Tensor):
        sinks = torch.as_tensor(sinks, dtype=torch.float32)
    if rope_pairing not in _PAIRING:
        raise ValueError("rope_pairing must be 'half' or 'interleaved'")
    if alibi not in (None, "causal", "symmetric"):
        raise ValueError("alibi must be None, 'causal' or 'symmetric'")
    if rope is not None:
        from gpe.rope import Rope  # noqa: lazy
        if not isinstance(rope, Rope):
            raise TypeError("rope must be a gpe.Rope; got %s" % type(rope).__name__)
    grape, algebraic = (None, None, None), None
    if encoding is not None:
        from gpe.sequence import AlgebraicSequence, GrapeM  # noqa: lazy
        if isinstance(encoding, GrapeMEncoding):
            grape = encoding.tensors()
        elif isinstance(encoding, AlgebraicSequenceEncoding):
            algebraic, = encoding.tensors()
        elif not isinstance(encoding, (GrapeM, AlgebraicSequence)):
            raise TypeError("encoding must be a gpe.GrapeM, gpe.AlgebraicSequence, "
                            "gpe.torch.GrapeMEncoding or gpe.torch.AlgebraicSequenceEncoding")
    bias_ab = (None, None)
    if bias is not None:
        from gpe.bias import AdditiveBias  # noqa: lazy
        if isinstance(bias, _LearnableBias):
            bias_ab = bias.tensors()
        elif not isinstance(bias, AdditiveBias):
            raise TypeError("bias must be a gpe.bias object (Alibi, T5Bias, FoxBias, "
                            "GrapeApBias, GrapeABias) or a learnable gpe.torch bias")
        if alibi:
            raise ValueError("give alibi or bias, not both")
    shaw: Tuple[Any, ...] = (structured.pop("shaw_key_table", None),
                             structured.pop("shaw_value_table", None))
    shaw = tuple(None if t is None else torch.as_tensor(t) for t in shaw)
    from gpe.attention import _window
    _, window_left, window_right = _window(window_size)
    holder = _Structured(structured) if structured else None
    if holder is not None and holder.algebraic is not None:
        if algebraic is not None:
            raise ValueError("give one algebraic encoding")
        algebraic = holder.algebraic

    def rows(x):
        # The kernels need head_dim contiguous; anything else is copied once here.
        # A zero stride (an expanded tensor, as SDPA takes) would overlap rows: copied too.
        zero = any(st == 0 and n > 1 for st, n in zip(x.stride(), x.shape))
        if x.dim() == 0 or (not zero and (x.stride(-1) == 1 or x.shape[-1] <= 1)):
            return x
        return x.contiguous()

    call = _forward_op if torch.compiler.is_compiling() else _EagerAttention.apply
    o, lse = call(rows(q), rows(k), rows(v), _int64s(q_positions, "q_positions"),
                  _int64s(k_positions, "k_positions"), _int64s(cu_seqlens_q, "cu_seqlens_q"),
                  _int64s(cu_seqlens_k, "cu_seqlens_k"), bool(causal),
                  0.0 if scale is None else float(scale), int(rope_dim), float(rope_base),
                  rope_pairing, alibi or "", _register(encoding), _register(bias),
                  int(threads), _register(holder), *bias_ab, *grape, *shaw, sinks,
                  _register(rope), window_left, window_right,
                  0.0 if softcap is None else float(softcap), attn_mask, algebraic,
                  *arithmetic)
    return (o, lse) if return_lse else o


# ---- RoPE as an operator (gpe.Rope: every schedule, pairing, partial rotary, xPos) ------


def _rope_impl(backward, x, positions, offsets, cu_seqlens, layout, role, rope_key):
    """gpe_rope_forward / _backward on x's storage into a new contiguous tensor."""
    import numpy as np
    rope = _ENCODINGS.get(rope_key)
    if rope is None:
        raise ValueError("the gpe.Rope object was freed before the call")
    if x.device.type == "cuda":
        return _rope_cuda(backward, rope, x, positions, offsets, cu_seqlens, layout, role)
    if x.device.type != "cpu":
        raise ValueError("x must be a CPU or CUDA tensor, got device %s" % x.device)
    if x.dtype not in (torch.float32, torch.float64, torch.float16, torch.bfloat16):
        raise TypeError("rope: unsupported dtype %s" % x.dtype)
    bf16 = x.dtype == torch.bfloat16
    x = x.detach()
    # Rows must be unit-stride and no axis broadcast (stride 0): a gradient autograd made
    # by expanding a reduction has zero strides, which the C rope refuses.
    if x.dim() and (x.stride(-1) != 1 or 0 in x.stride()):
        x = x.contiguous()
    out = torch.empty_like(x, memory_format=torch.contiguous_format)

    def arr(t):  # NumPy views of the same memory (bfloat16 as its uint16 bit patterns)
        return t.view(torch.int16).numpy().view(np.uint16) if bf16 else t.numpy()

    ints = lambda t: None if t is None else t.numpy()
    fn = rope.backward if backward else rope.forward
    fn(arr(x), positions=ints(positions), offsets=ints(offsets), cu_seqlens=ints(cu_seqlens),
       layout=layout, role=role, out=arr(out), bfloat16=bf16)
    return out


@torch.library.custom_op("gpe::rope_forward", mutates_args=(), device_types=("cpu", "cuda"),
                         tags=_CUDAGRAPH_UNSAFE)
def _rope_forward_op(x: torch.Tensor, positions: Optional[torch.Tensor],
                     offsets: Optional[torch.Tensor], cu_seqlens: Optional[torch.Tensor],
                     layout: str, role: str, rope_key: int) -> torch.Tensor:
    return _rope_impl(False, x, positions, offsets, cu_seqlens, layout, role, rope_key)


@torch.library.custom_op("gpe::rope_backward", mutates_args=(), device_types=("cpu", "cuda"),
                         tags=_CUDAGRAPH_UNSAFE)
def _rope_backward_op(dy: torch.Tensor, positions: Optional[torch.Tensor],
                      offsets: Optional[torch.Tensor], cu_seqlens: Optional[torch.Tensor],
                      layout: str, role: str, rope_key: int) -> torch.Tensor:
    return _rope_impl(True, dy, positions, offsets, cu_seqlens, layout, role, rope_key)


@_rope_forward_op.register_fake
def _(x, *args):
    return torch.empty_like(x, memory_format=torch.contiguous_format)


@_rope_backward_op.register_fake
def _(dy, *args):
    return torch.empty_like(dy, memory_format=torch.contiguous_format)


def _rope_setup(ctx, inputs, output):
    ctx.options = inputs[1:]
    ctx.rope = _ENCODINGS.get(inputs[-1])  # alive until backward


def _rope_grad(ctx, dy):
    # y = m R(p theta) x is linear in x: dx = (m R)^T dy, the library's rope backward.
    return (_rope_backward_op(dy, *ctx.options),) + (None,) * len(ctx.options)


def _rope_backward_setup(ctx, inputs, output):
    ctx.options = inputs[1:]
    ctx.rope = _ENCODINGS.get(inputs[-1])


def _rope_backward_grad(ctx, ddx):
    # The transpose's own gradient is the forward map (twice differentiable).
    return (_rope_forward_op(ddx, *ctx.options),) + (None,) * len(ctx.options)


_rope_forward_op.register_autograd(_rope_grad, setup_context=_rope_setup)
_rope_backward_op.register_autograd(_rope_backward_grad, setup_context=_rope_backward_setup)


def _eager_rope_function(transpose: bool) -> Any:
    """The rotation (transpose False) or its transpose, the rope backward, as an autograd
    Function whose gradient is the other one (the map is linear in x), so that eager
    gradients are themselves differentiable, as the registered operators' are."""

    class _Function(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, *options):
            ctx.options = options
            ctx.rope = _ENCODINGS.get(options[-1])
            return _rope_impl(transpose, x, *options)

        @staticmethod
        def backward(ctx, dy):
            other = _EAGER_ROPE[not transpose]
            return (other.apply(dy, *ctx.options),) + (None,) * len(ctx.options)

    return _Function


_EAGER_ROPE = {t: _eager_rope_function(t) for t in (False, True)}
_EagerRope = _EAGER_ROPE[False]


def rope(x: torch.Tensor, rope: "_Rope", positions: Optional[_TensorLike] = None,
         offsets: Optional[_TensorLike] = None, cu_seqlens: Optional[_TensorLike] = None,
         layout: "_Layout" = "bshd", role: "_Role" = "query") -> torch.Tensor:
    """gpe.Rope `rope` applied to x (its forward: every schedule, pairing, partial rotary,
    xPos, multi-axis), differentiable in x through the library's RoPE backward.

    Arguments as gpe.Rope.forward (positions / offsets / cu_seqlens: int64 tensors or
    anything torch.as_tensor takes). float32, float64, float16, bfloat16 CPU tensors; on a
    CUDA device float32, bfloat16, float16 through the library's CUDA plugin on PyTorch's
    current stream (every schedule and multi-axis RoPE; xPos refused).
    Registered as gpe::rope_forward / gpe::rope_backward (fake implementations, autograd)
    for torch.compile; eager calls skip the custom-op layer, as attention() does."""
    from gpe.rope import Rope  # noqa: lazy
    if not isinstance(rope, Rope):
        raise TypeError("rope must be a gpe.Rope")
    as_ints = lambda v, name: None if v is None else _int64s(v, name).contiguous()
    call = _rope_forward_op if torch.compiler.is_compiling() else _EagerRope.apply
    return call(x, as_ints(positions, "positions"), as_ints(offsets, "offsets"),
                as_ints(cu_seqlens, "cu_seqlens"), str(layout),
                str(role), _register(rope))


# ---- RoPE as an nn.Module (gpe.torch_rotary) and every sequence encoding as an operator
# (gpe.torch_sequence) -----------------------------------------------------------------

from gpe.torch_rotary import RotaryEmbedding  # noqa: E402
from gpe.torch_sequence import (  # noqa: E402
    algebraic_grid, algebraic_periodic, algebraic_sequence, algebraic_tree, bias_tile, grape_m,
    learned_positions, locality_scale, shaw_key_scores, shaw_value_output, sinusoidal,
    transformer_xl_score_terms)

__all__ += ["RotaryEmbedding", "algebraic_grid", "algebraic_periodic", "algebraic_sequence",
            "algebraic_tree", "bias_tile", "grape_m", "learned_positions", "locality_scale",
            "shaw_key_scores", "shaw_value_output", "sinusoidal", "transformer_xl_score_terms"]

# ---- Hugging Face transformers' attention interface --------------------------------------
# GroupPE's fused attention as a Hugging Face transformers attention implementation.
#
#     import gpe.torch as gt
#     gt.register_hf_attention()                     # registers "gpe" (once per process)
#     model = AutoModelForCausalLM.from_config(config, attn_implementation="gpe")
#
# transformers (5.x) looks an attention implementation up by name in its
# AttentionInterface and the matching mask builder in its AttentionMaskInterface.
# register_hf_attention() puts gpe.torch.attention under `name` in the first and
# transformers' own SDPA mask builder (a boolean [batch, 1, q, k] mask, or None for a
# plain causal mask) in the second, so a model runs exactly as with
# attn_implementation="sdpa" with GroupPE's kernels doing the attention (CPU tensors;
# forward and backward through autograd).
#
# What the function receives and does (the contract of transformers' attention
# functions): query, key, value [batch, heads, seq, head_dim] (a view with the heads axis
# second; passed to the kernel as [batch, seq, heads, head_dim] views, no copy); the
# module's num_key_value_groups (GQA: the kernel reads the shared kv heads directly);
# attention_mask (boolean or additive [batch or 1, 1, q, k], SDPA's attn_mask) or None
# with is_causal; scaling; position_bias (T5-style models: added to the mask, as
# transformers' SDPA path does); and the keyword extras softcap (Gemma 2) and s_aux (per
# head sink logits, gpt-oss). Dropout is refused while training (the kernel has none);
# transformers passes 0.0 in eval. Returns (output [batch, seq, heads, head_dim], None): no
# attention weights are formed.


def _hf_attention(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor,
                  value: torch.Tensor, attention_mask: Optional[torch.Tensor],
                  dropout: float = 0.0, scaling: Optional[float] = None,
                  is_causal: Optional[bool] = None,
                  position_bias: Optional[torch.Tensor] = None,
                  **kwargs: Any) -> Tuple[torch.Tensor, None]:
    if dropout and module.training:
        raise ValueError("gpe attention has no dropout: set the model's attention dropout to 0 "
                         "(it is applied only while training)")
    if kwargs.get("output_attentions", False):
        raise ValueError("gpe attention forms no attention weights (output_attentions=True)")
    q_len, kv_len = query.shape[2], key.shape[2]
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    # As transformers' SDPA path: a mask given carries the causal rule (and any window or
    # padding); without one, causal applies from the second query on.
    causal = bool(causal) and attention_mask is None and q_len > 1
    if causal and kv_len > q_len:
        # A prefill into an empty static cache: the keys past the queries are masked for
        # every query (top-left causal alignment, as SDPA's is_causal); drop them.
        key, value = key[:, :, :q_len], value[:, :, :q_len]
        if position_bias is not None:
            position_bias = position_bias[..., :q_len]
    mask = attention_mask
    if position_bias is not None:  # an additive bias joins the mask
        if mask is None:
            mask = position_bias
            if causal:
                allowed = torch.ones(q_len, key.shape[2], dtype=torch.bool,
                                     device=query.device).tril()
                mask = position_bias.masked_fill(~allowed, float("-inf"))
                causal = False
        elif mask.dtype == torch.bool:
            mask = position_bias.masked_fill(~mask, float("-inf"))
        else:
            mask = position_bias + mask
    sinks = kwargs.get("s_aux")
    out = attention(query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2),
                    attn_mask=mask, is_causal=causal, scale=scaling, enable_gqa=True,
                    softcap=kwargs.get("softcap"), sinks=sinks)
    return out, None


_attention_eager = torch.compiler.disable(attention)


def register_hf_attention(name: str = "gpe") -> str:
    """Registers GroupPE's attention with transformers under `name` (and SDPA's mask
    builder under the same name); returns the name, for
    from_pretrained / from_config(..., attn_implementation=name). ImportError without
    transformers."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

    AttentionInterface.register(name, _hf_attention)
    ALL_MASK_ATTENTION_FUNCTIONS.register(name, sdpa_mask)
    return name


__all__ += ["register_hf_attention"]

# ---- Coordinate encoders as operators and a module (gpe.torch_coordinate) ----------------

from gpe.torch_coordinate import CoordinateEncoding, coordinate_encode  # noqa: E402

__all__ += ["CoordinateEncoding", "coordinate_encode"]
