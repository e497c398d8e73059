"""Multi-head attention with the positional encoding inside the kernel (gpe.h, "Attention").

attention() and attention_backward() run GroupPE's CPU kernels (flash-style tiles,
memory linear in the sequence length) on float32 NumPy arrays, without copies (float64
arrays run the exact double reference instead: slow, for gradient checks and oracles):

- padded batch: q [batch, seq_q, heads_q, head_dim], k and v [batch, seq_k, heads_kv,
  head_dim] (heads_q a multiple of heads_kv: grouped-query attention);
- packed variable-length batch: pass cu_seqlens_q and cu_seqlens_k (int64 [batch + 1]) and
  q [tokens_q, heads_q, head_dim], k, v [tokens_k, heads_kv, head_dim].

Encodings: rope_dim (RoPE on the first rope_dim features, base rope_base, pairing
"half" (GPT-NeoX, Llama) or "interleaved" (RoFormer, GPT-J)), or a GrapeM or
AlgebraicSequence object (rotations of q and k); bias: a gpe.bias object (Alibi, T5Bias;
FoxBias or GrapeApBias for a single sequence), or alibi="causal" / "symmetric" as a
shorthand for gpe.Alibi(heads_q).
Positions default to 0..seq_k-1 for keys and the last seq_q of them for queries
(KV-cache decoding); causal masks compare positions.

Structured positions (the encoding's group element is not one integer; q_positions /
k_positions still order the tokens for causal masks, biases and Shaw labels):
- q_axes, k_axes: int [tokens, axes] per-axis coordinates for axial RoPE
  (rope_axes=2 or 3), M-RoPE (rope_sections, e.g. [16, 24, 24] planes per axis summing to
  rope_dim / 2; rope_sections_interleaved=True for Qwen3-VL's layout) and algebraic grids
  (algebraic_grid: float64 skew generators [axes, m, m], axes * m = head_dim);
- q_tree, k_tree: one tree address per token (a list of 0-based child-index lists from
  the root) for algebraic trees (algebraic_tree: float64 skew generators
  [branching, head_dim, head_dim]).
Shaw et al.'s relative labels: shaw_key_table and/or shaw_value_table (float64
[2 shaw_max_distance + 1, head_dim], row r for label r - k, shared by every head) add
scale q . aK[clip(j - i)] to the scores and sum_j p_ij aV[clip(j - i)] to the outputs;
attention_backward(..., shaw_table_grads=True) also returns their gradients.

Any RoPE schedule inside the kernel: rope=gpe.Rope(...) (Llama 3, YaRN with its
attention factor, LongRoPE, dynamic NTK, linear, xPos, partial rotary, either pairing,
axial / M-RoPE with q_axes, k_axes) in place of rope_dim; q is rotated in the query role
and k in the key role, exactly as rope.forward(q, role="query") and
rope.forward(k, role="key") would, so the schedule's attention factor m multiplies both
(scores carry m^2, as in Hugging Face transformers).
What inference engines add (attention/descriptor.h, "WINDOW, SOFTCAP AND SINKS"):
- window_size=(left, right): flash-attn's sliding window, -1 unbounded on a side; key j
  is allowed for query i only if pos_i - left <= pos_j <= pos_i + right (with causal=True
  and left = W - 1: Mistral's window of W tokens);
- softcap=c: Gemma 2's logit softcap, scores c tanh(x / c) of the scaled q.k part x (0 or
  None: none; at most 1e30, a larger cap being no cap), biases added after it;
- sinks: gpt-oss's attention sinks, one logit per query head (float32 [heads_q]) in every
  row's softmax denominator, attending to nothing; attention_backward(...,
  sink_grad=True) also returns dL/dsinks.
The encoding's own parameters: attention_backward(..., encoding_grads=True) also returns
GRAPE-M's dL/da, dL/db, dL/domega (encoding=gpe.GrapeM) or dL/dS of Kogkalidis et al.'s
skew generators (encoding=gpe.AlgebraicSequence: [dim, dim]; algebraic_tree: [branching,
head_dim, head_dim]; algebraic_grid: [axes, m, m]; entrywise and unprojected, as
AlgebraicSequence.backward's).
CPU arithmetic (gpe/attention.h, "CPU ARITHMETIC"): bf16_arithmetic for bfloat16 tensors
("auto": the CPU's bf16 dot products where a one-time probe finds them faster than float
FMAs; "dot_products"; "widen": float32 kernels; "amx_tiles": Intel AMX tiles where usable,
else the dot products) and float32_arithmetic for float32 ones ("exact": float32 FMAs;
"split_bf16x6" / "split_bf16x3": both products of the forward on AMX tiles as six or three
bf16 products per float product, float32's accuracy or about 2^-16 relative; "exact"
where the tiles are not usable). The AMX paths are opt-in and not yet measured on AMX
hardware.
Masks and caches (attention/descriptor.h, "SCORE MASK" and "LAYOUTS"):
- attn_mask: PyTorch SDPA's attn_mask, float (additive, natural-log units, -inf masks the
  key; read as float32) or bool / uint8 (False / 0 masks the key, True takes part), of
  2 to 4 dimensions broadcastable to [batch, heads_q, seq_q, seq_k] (packed:
  [sequences, heads_q, max_lq, max_lk], counted within each sequence); size-1 dimensions
  broadcast without copies. No gradient. A row with every key masked gives o = 0 and
  lse = -inf (as PyTorch 2.15's SDPA; older versions' math path gives NaN);
- kv_lengths: int [batch] (padded layout): sequence b uses only its first kv_lengths[b]
  keys (flash-attn's cache_seqlens; a key padding mask);
- block_table: int [batch, pages_per_sequence], a paged KV cache (vLLM, FlashInfer;
  attention() only): k and v are [num_pages, page_size, heads_kv, head_dim], and
  sequence b's key t is in page block_table[b, t // page_size] at slot t % page_size;
  seq_k = pages_per_sequence * page_size (kv_lengths: how much of it is used).
"""

from __future__ import annotations

import ctypes
from typing import TYPE_CHECKING, Any, Literal, Optional, Sequence, Tuple, Union

import numpy as np
import numpy.typing as npt

from gpe import _ffi
from gpe._core import check, lib, live_handle

if TYPE_CHECKING:  # imported lazily at run time (gpe.sequence, gpe.bias, gpe.rope)
    from gpe.bias import AdditiveBias
    from gpe.rope import Rope
    from gpe.sequence import AlgebraicSequence, GrapeM

_PAIRING = {"interleaved": 0, "half": 1}
RopePairing = Literal["half", "interleaved"]
AlibiForm = Literal["causal", "symmetric"]


class _Keep:
    def __init__(self):
        self.items = []

    def __call__(self, array, output=False):
        if array is None:
            return None
        t, keep = _ffi.as_dltensor(array, output=output)
        self.items.append((t, keep))
        return ctypes.pointer(t)

    def out(self, array):
        """An array the library writes into (refused when read-only)."""
        return self(array, output=True)


def _ints(x, name):
    """An optional integer array argument as int64 (None stays None)."""
    if x is None:
        return None
    return np.ascontiguousarray(_ffi.int64_array(x, name))


def _tree_csr(addresses):
    """Tree addresses (one sequence of child indices per token) as CSR offsets, children."""
    offsets = np.zeros(len(addresses) + 1, dtype=np.int64)
    children = []
    for t, a in enumerate(addresses):
        children.extend(_ffi.checked_int(c, "a tree address entry") for c in a)
        offsets[t + 1] = len(children)
    return offsets, np.asarray(children, dtype=np.int64)


def _structured(keep, o, rope_axes, rope_sections, rope_sections_interleaved, q_axes, k_axes,
                q_tree, k_tree, algebraic_tree, algebraic_grid, shaw_max_distance,
                shaw_key_table, shaw_value_table):
    f64 = lambda x: None if x is None else np.ascontiguousarray(x, dtype=np.float64)
    o.rope_axes = _ffi.checked_int(rope_axes, "rope_axes", ctypes.c_int32)
    o.rope_sections_interleaved = 1 if rope_sections_interleaved else 0
    o.rope_sections = keep(_ints(rope_sections, "rope_sections"))
    o.algebraic_tree = keep(f64(algebraic_tree))
    o.algebraic_grid = keep(f64(algebraic_grid))
    o.q_axes = keep(_ints(q_axes, "q_axes"))
    o.k_axes = keep(_ints(k_axes, "k_axes"))
    if (q_tree is None) != (k_tree is None):
        raise ValueError("give both q_tree and k_tree, or neither")
    if q_tree is not None:
        qo, qc = _tree_csr(q_tree)
        ko, kc = _tree_csr(k_tree)
        o.q_tree_offsets, o.q_tree_children = keep(qo), keep(qc)
        o.k_tree_offsets, o.k_tree_children = keep(ko), keep(kc)
    if (shaw_key_table is not None or shaw_value_table is not None) and shaw_max_distance is None:
        raise ValueError("Shaw tables need shaw_max_distance")
    o.shaw_max_distance = (0 if shaw_max_distance is None
                           else _ffi.checked_int(shaw_max_distance, "shaw_max_distance"))
    o.shaw_key_table = keep(f64(shaw_key_table))
    o.shaw_value_table = keep(f64(shaw_value_table))


def _options(keep, causal, scale, threads, rope_dim, rope_base, rope_pairing, alibi, bias, heads,
             encoding, q_positions, k_positions, cu_seqlens_q, cu_seqlens_k, structured=None):
    from gpe.sequence import AlgebraicSequence, GrapeM  # noqa: avoid an import cycle
    o = _ffi.AttentionOptions()
    o.struct_size = ctypes.sizeof(o)
    o.causal = 1 if causal else 0
    o.softmax_scale = 0.0 if scale is None else float(scale)
    o.num_threads = _ffi.checked_int(threads, "threads", ctypes.c_int32)
    o.rope_dim = _ffi.checked_int(rope_dim, "rope_dim")
    o.rope_base = float(rope_base)
    if rope_pairing not in _PAIRING:
        raise ValueError("rope_pairing must be 'half' or 'interleaved'")
    o.rope_pairing = _PAIRING[rope_pairing]
    if alibi is not None and bias is not None:
        raise ValueError("give alibi or bias, not both")
    if alibi is not None:
        if alibi not in ("causal", "symmetric"):
            raise ValueError("alibi must be None, 'causal' or 'symmetric'")
        from gpe.bias import Alibi
        bias = Alibi(heads, symmetric=alibi == "symmetric")
        keep.items.append(bias)  # alive for the call
    if bias is not None:
        from gpe.bias import AdditiveBias
        if not isinstance(bias, AdditiveBias):
            raise TypeError("bias must be a gpe bias object (gpe.Alibi, gpe.T5Bias, ...); got %s"
                            % type(bias).__name__)
        o.bias = live_handle(bias, "bias", keep.items)
    if isinstance(encoding, GrapeM):
        o.grape_m = live_handle(encoding, "encoding", keep.items)
    elif isinstance(encoding, AlgebraicSequence):
        o.algebraic = live_handle(encoding, "encoding", keep.items)
    elif encoding is not None:
        raise TypeError("encoding must be a GrapeM or AlgebraicSequence")
    o.q_positions = keep(_ints(q_positions, "q_positions"))
    o.k_positions = keep(_ints(k_positions, "k_positions"))
    o.cu_seqlens_q = keep(_ints(cu_seqlens_q, "cu_seqlens_q"))
    o.cu_seqlens_k = keep(_ints(cu_seqlens_k, "cu_seqlens_k"))
    _structured(keep, o, **(structured or _STRUCTURED_DEFAULTS))
    return o


def _window(window_size):
    """flash-attn's window_size (left, right) as the options' (window, left, right); None
    is no window."""
    if window_size is None:
        return 0, -1, -1
    try:
        left, right = window_size
    except (TypeError, ValueError):
        raise TypeError("window_size must be a pair (left, right) of ints, -1 for an "
                        "unbounded side; got %r" % (window_size,)) from None
    return (1, _ffi.checked_int(left, "window_size[0]"),
            _ffi.checked_int(right, "window_size[1]"))


def _rope_window_softcap(o, keep_items, rope, window_size, softcap):
    """Sets the 0.9.0 options but the sinks: a gpe.Rope handle (kept alive in keep_items
    for the call), the sliding window and the softcap (None or 0: none)."""
    if rope is not None:
        from gpe.rope import Rope  # noqa: lazy, as the encodings above
        if not isinstance(rope, Rope):
            raise TypeError("rope must be a gpe.Rope; got %s" % type(rope).__name__)
        o.rope = live_handle(rope, "rope", keep_items)
        keep_items.append(rope)
    o.window, o.window_left, o.window_right = _window(window_size)
    o.softcap = 0.0 if softcap is None else float(softcap)


def _mask_array(attn_mask):
    """attn_mask as the 4-D float32 or uint8 array the library reads (None stays None):
    leading size-1 axes added (views), bool viewed as uint8, other floats as float32."""
    if attn_mask is None:
        return None
    m = _ffi.array_arg(attn_mask, "attn_mask")
    if not 2 <= m.ndim <= 4:
        raise ValueError("attn_mask must have 2 to 4 dimensions, broadcastable to [batch, "
                         "heads_q, seq_q, seq_k]; got shape %s" % (m.shape,))
    m = m[(None,) * (4 - m.ndim)]
    if m.dtype == np.bool_:
        return m.view(np.uint8)
    if m.dtype == np.uint8 or m.dtype == np.float32:
        return m
    if m.dtype.kind == "f":
        return m.astype(np.float32)
    raise TypeError("attn_mask must be bool, uint8 or float (additive); got %s" % m.dtype)


def _masks(o, keep, attn_mask, kv_lengths, block_table=None):
    """Sets the options' attn_mask, kv_lengths and block_table (None: none)."""
    o.attn_mask = keep(_mask_array(attn_mask))
    o.kv_lengths = keep(_ints(kv_lengths, "kv_lengths"))
    o.block_table = keep(_ints(block_table, "block_table"))


def _sinks_array(sinks):
    """sinks as the float32 vector the library reads (None stays None). A finite logit
    past float32's range is refused (ValueError) rather than rounded to +-inf, which
    would make its head's rows NaN (+inf) or drop its sink (-inf); NaN and +-inf given
    as such keep their documented meaning."""
    if sinks is None:
        return None
    given = _ffi.array_arg(sinks, "sinks")
    with np.errstate(over="ignore"):
        out = np.ascontiguousarray(given, dtype=np.float32)
    overflowed = np.isfinite(given) & ~np.isfinite(out)
    if overflowed.any():
        i = tuple(int(x) for x in np.argwhere(overflowed)[0])
        raise ValueError("sinks%s is %r, beyond float32's range (sinks are float32 logits): "
                         "give a value within +-3.4e38, or -inf for no sink"
                         % (list(i), given[i].item()))
    return out


_STRUCTURED_DEFAULTS = dict(rope_axes=0, rope_sections=None, rope_sections_interleaved=False,
                            q_axes=None, k_axes=None, q_tree=None, k_tree=None,
                            algebraic_tree=None, algebraic_grid=None, shaw_max_distance=None,
                            shaw_key_table=None, shaw_value_table=None)


# gpe/attention.h's CPU ARITHMETIC: GPE_BF16_ARITHMETIC_* and GPE_FLOAT32_ARITHMETIC_*.
_BF16_ARITHMETIC = {"auto": 0, "dot_products": 1, "widen": 2, "amx_tiles": 3}
_FLOAT32_ARITHMETIC = {"exact": 0, "split_bf16x6": 1, "split_bf16x3": 2}


def _arithmetic_codes(bf16_arithmetic, float32_arithmetic):
    """The names as gpe/attention.h's codes (ValueError for another name); plain lookups,
    which torch.compile traces (gpe.torch passes the codes to its operators)."""
    codes = []
    for name, value, table in (("bf16_arithmetic", bf16_arithmetic, _BF16_ARITHMETIC),
                               ("float32_arithmetic", float32_arithmetic, _FLOAT32_ARITHMETIC)):
        if not isinstance(value, str) or value not in table:
            raise ValueError("%s must be one of %s; got %r"
                             % (name, ", ".join(repr(c) for c in table), value))
        codes.append(table[value])
    return tuple(codes)


def _arithmetic(o, bf16_arithmetic, float32_arithmetic):
    o.bf16_arithmetic, o.float32_arithmetic = _arithmetic_codes(bf16_arithmetic,
                                                                float32_arithmetic)


def _split_structured(kwargs):
    unknown = set(kwargs) - set(_STRUCTURED_DEFAULTS)
    if unknown:
        raise TypeError("unexpected keyword argument(s): %s" % ", ".join(sorted(unknown)))
    merged = dict(_STRUCTURED_DEFAULTS)
    merged.update(kwargs)
    return merged


def _qkv(q: Any, k: Any, v: Any
         ) -> Tuple[npt.NDArray[Any], npt.NDArray[Any], npt.NDArray[Any]]:
    """q, k, v as arrays (TypeError naming a None or non-numeric one); q must have the
    heads axis (3 or 4 dimensions) that the defaults are computed from."""
    q, k, v = (_ffi.array_arg(x, n) for x, n in ((q, "q"), (k, "k"), (v, "v")))
    if q.ndim not in (3, 4):
        raise ValueError("q must be [batch, seq, heads, head_dim] or (packed) [tokens, heads, "
                         "head_dim]; got %d dimensions" % q.ndim)
    return q, k, v


def attention(q: npt.ArrayLike, k: npt.ArrayLike, v: npt.ArrayLike, causal: bool = False,
              scale: Optional[float] = None, rope_dim: int = 0, rope_base: float = 10000.0,
              rope_pairing: RopePairing = "half", alibi: Optional[AlibiForm] = None,
              bias: Optional[AdditiveBias] = None,
              encoding: Optional[Union[GrapeM, AlgebraicSequence]] = None,
              q_positions: Optional[npt.ArrayLike] = None,
              k_positions: Optional[npt.ArrayLike] = None,
              cu_seqlens_q: Optional[npt.ArrayLike] = None,
              cu_seqlens_k: Optional[npt.ArrayLike] = None, threads: int = 0,
              return_lse: bool = False, out: Optional[npt.NDArray[Any]] = None,
              rope: Optional[Rope] = None, window_size: Optional[Tuple[int, int]] = None,
              softcap: Optional[float] = None, sinks: Optional[npt.ArrayLike] = None,
              attn_mask: Optional[npt.ArrayLike] = None,
              kv_lengths: Optional[npt.ArrayLike] = None,
              block_table: Optional[npt.ArrayLike] = None, bf16_arithmetic: str = "auto",
              float32_arithmetic: str = "exact", **structured: Any
              ) -> Union[npt.NDArray[Any], Tuple[npt.NDArray[Any], npt.NDArray[Any]]]:
    """softmax(scale <T q, T k> + bias) v per head; returns o (and lse [tokens_q, heads_q]).

    lse is float64 for float64 inputs, else float32; -inf (with o = 0) for rows with no
    allowed key (the sink logit with sinks), NaN for rows whose scores hold a NaN (NaN or
    infinite inputs propagate as PyTorch's do; masked keys contribute nothing). k and v
    may be a float16 KV cache with float32 q; the result is float32 (a bfloat16 cache:
    the C ABI, Rust or gpe.torch). rope (a gpe.Rope), window_size, softcap, sinks,
    attn_mask, kv_lengths, block_table, bf16_arithmetic and float32_arithmetic: the module
    docstring. Keyword arguments of the
    module docstring's structured positions and Shaw labels: rope_axes, rope_sections,
    rope_sections_interleaved, q_axes, k_axes, q_tree, k_tree, algebraic_tree,
    algebraic_grid, shaw_max_distance, shaw_key_table, shaw_value_table."""
    keep = _Keep()
    q, k, v = _qkv(q, k, v)
    opts = _options(keep, causal, scale, threads, rope_dim, rope_base, rope_pairing, alibi, bias,
                    q.shape[-2], encoding, q_positions, k_positions, cu_seqlens_q, cu_seqlens_k,
                    _split_structured(structured))
    _rope_window_softcap(opts, keep.items, rope, window_size, softcap)
    opts.sinks = keep(_sinks_array(sinks))
    _masks(opts, keep, attn_mask, kv_lengths, block_table)
    _arithmetic(opts, bf16_arithmetic, float32_arithmetic)
    if out is None:  # q's shape with v's head size last (v may differ from k there)
        out = np.empty(q.shape[:-1] + v.shape[-1:], dtype=q.dtype)
    lse = None
    if return_lse:
        tokens = q.shape[0] if cu_seqlens_q is not None else q.shape[0] * q.shape[1]
        heads = q.shape[-2]
        lse = np.empty((tokens, heads),
                       dtype=np.float64 if q.dtype == np.float64 else np.float32)
    check(lib().gpe_attention_forward(ctypes.byref(opts), keep(q), keep(k), keep(v),
                                      keep.out(out), keep.out(lse)))
    return (out, lse) if lse is not None else out  # lse is set exactly when return_lse


def attention_backward(q: npt.ArrayLike, k: npt.ArrayLike, v: npt.ArrayLike,
                       d_o: npt.ArrayLike, o: Optional[npt.ArrayLike] = None,
                       lse: Optional[npt.ArrayLike] = None, causal: bool = False,
                       scale: Optional[float] = None, rope_dim: int = 0,
                       rope_base: float = 10000.0, rope_pairing: RopePairing = "half",
                       alibi: Optional[AlibiForm] = None, bias: Optional[AdditiveBias] = None,
                       encoding: Optional[Union[GrapeM, AlgebraicSequence]] = None,
                       q_positions: Optional[npt.ArrayLike] = None,
                       k_positions: Optional[npt.ArrayLike] = None,
                       cu_seqlens_q: Optional[npt.ArrayLike] = None,
                       cu_seqlens_k: Optional[npt.ArrayLike] = None, threads: int = 0,
                       shaw_table_grads: bool = False, bias_grads: bool = False,
                       rope: Optional[Rope] = None,
                       window_size: Optional[Tuple[int, int]] = None,
                       softcap: Optional[float] = None, sinks: Optional[npt.ArrayLike] = None,
                       sink_grad: bool = False, attn_mask: Optional[npt.ArrayLike] = None,
                       kv_lengths: Optional[npt.ArrayLike] = None,
                       encoding_grads: bool = False, bf16_arithmetic: str = "auto",
                       float32_arithmetic: str = "exact", **structured: Any
                       ) -> Tuple[Optional[npt.NDArray[Any]], ...]:
    """(dq, dk, dv) given dL/do, with respect to q, k, v before the encoding.

    o and lse from attention(..., return_lse=True) skip recomputing the forward. With
    shaw_table_grads=True, returns (dq, dk, dv, d_shaw_key_table, d_shaw_value_table)
    (float64; None for a table not given). With bias_grads=True (a `bias` object given),
    also appends the bias's parameter gradients (d_a, d_b), float64, accumulated inside
    the kernels: ALiBi / slope GRAPE-A dL/dslopes [heads]; T5 dL/dtable; FoX / gated
    GRAPE-A dL/dgate_logits [length, heads]; GRAPE-AP dL/dw and dL/du (d_b None for the
    other kinds). With sink_grad=True (sinks given), appends
    dL/dsinks (float64 [heads_q]). With encoding_grads=True, appends the encoding's
    parameter gradients last (float64, summed over the tokens and heads of q and k):
    (dL/da, dL/db, dL/domega) for encoding=gpe.GrapeM ([m, head_dim], [m, head_dim],
    [m]); dL/dS for encoding=gpe.AlgebraicSequence ([dim, dim]), algebraic_tree
    ([branching, head_dim, head_dim]) or algebraic_grid ([axes, m, m]), entrywise and
    unprojected (for S = A - A^T, dL/dA = X - X^T). attn_mask and kv_lengths as the
    forward's (the mask has no gradient; keys past kv_lengths get dk = dv = 0); a paged
    cache has no backward. bf16_arithmetic and float32_arithmetic as the forward's (the
    forward recomputed without o and lse runs with them)."""
    keep = _Keep()
    q, k, v = _qkv(q, k, v)
    d_o = _ffi.array_arg(d_o, "d_o")
    o = None if o is None else _ffi.array_arg(o, "o")
    lse = None if lse is None else _ffi.array_arg(lse, "lse")
    st = _split_structured(structured)
    opts = _options(keep, causal, scale, threads, rope_dim, rope_base, rope_pairing, alibi, bias,
                    q.shape[-2], encoding, q_positions, k_positions, cu_seqlens_q, cu_seqlens_k,
                    st)
    _arithmetic(opts, bf16_arithmetic, float32_arithmetic)
    _rope_window_softcap(opts, keep.items, rope, window_size, softcap)
    sinks = _sinks_array(sinks)
    opts.sinks = keep(sinks)
    _masks(opts, keep, attn_mask, kv_lengths)
    dq, dk, dv = np.empty_like(q), np.empty_like(k), np.empty_like(v)
    enc_grads = _encoding_grads(encoding, st) if encoding_grads else {}
    if not shaw_table_grads and not bias_grads and not sink_grad and not encoding_grads:
        check(lib().gpe_attention_backward(ctypes.byref(opts), keep(q), keep(k), keep(v),
                                           keep(o), keep(lse), keep(d_o), keep.out(dq),
                                           keep.out(dk), keep.out(dv)))
        return dq, dk, dv
    like = lambda t: None if t is None else np.empty(np.shape(t), dtype=np.float64)
    gk, gv = like(st["shaw_key_table"]), like(st["shaw_value_table"])
    if bias_grads or sink_grad or encoding_grads:
        if bias_grads and bias is None:
            raise ValueError("bias_grads=True needs a bias object (bias=...)")
        if sink_grad and sinks is None:
            raise ValueError("sink_grad=True needs sinks (sinks=...)")
        ga, gb = (None, None) if not bias_grads else (
            np.empty(s_, dtype=np.float64) if s_ is not None else None
            for s_ in _bias_grad_shapes(bias))
        gs = like(sinks) if sink_grad else None
        pg = _ffi.AttentionParamGrads()
        pg.d_bias_a, pg.d_bias_b = keep.out(ga), keep.out(gb)
        pg.d_sinks = keep.out(gs)
        for field, g in enc_grads.items():
            setattr(pg, field, keep.out(g))
        if shaw_table_grads:
            pg.d_shaw_key_table, pg.d_shaw_value_table = keep.out(gk), keep.out(gv)
        check(lib().gpe_attention_backward_with_parameters(
            ctypes.byref(opts), keep(q), keep(k), keep(v), keep(o), keep(lse), keep(d_o),
            keep.out(dq), keep.out(dk), keep.out(dv), ctypes.byref(pg)))
        return ((dq, dk, dv) + ((gk, gv) if shaw_table_grads else ())
                + ((ga, gb) if bias_grads else ()) + ((gs,) if sink_grad else ())
                + tuple(enc_grads.values()))
    check(lib().gpe_attention_backward_v2(ctypes.byref(opts), keep(q), keep(k), keep(v), keep(o),
                                          keep(lse), keep(d_o), keep.out(dq), keep.out(dk),
                                          keep.out(dv), keep.out(gk), keep.out(gv)))
    return dq, dk, dv, gk, gv


def _encoding_grads(encoding, st):
    """{gpe_attention_param_grads field: float64 output} for the call's encoding (in the
    order attention_backward returns them); ValueError when it has no parameters here."""
    from gpe.sequence import AlgebraicSequence, GrapeM  # noqa: lazy, as _options
    if isinstance(encoding, GrapeM):
        m, d = encoding.shape
        return {"d_grape_a": np.empty((m, d)), "d_grape_b": np.empty((m, d)),
                "d_grape_omega": np.empty(m)}
    if isinstance(encoding, AlgebraicSequence):
        d = encoding.dim
        return {"d_algebraic": np.empty((d, d))}
    for name in ("algebraic_tree", "algebraic_grid"):
        if st[name] is not None:
            return {"d_" + name: np.empty(np.shape(st[name]), dtype=np.float64)}
    raise ValueError("encoding_grads=True needs an encoding with parameters: encoding="
                     "gpe.GrapeM or gpe.AlgebraicSequence, algebraic_tree or algebraic_grid")


def _bias_grad_shapes(bias):
    """(shape of d_a, shape of d_b or None) of a bias object's parameter gradients."""
    kind = bias.kind
    if kind == "alibi":
        return (bias.num_heads,), None
    if kind == "t5":
        return tuple(bias.table_shape), None
    if kind == "fox":
        return tuple(bias.logits_shape), None
    if kind == "grape_ap":
        return tuple(bias.param_shape), tuple(bias.param_shape)
    # GRAPE-A: gated (FoX gates) or slopes.
    return (tuple(bias.logits_shape) if bias.logits_shape is not None else (bias.num_heads,)), None


def merge_attention(o_list: Sequence[npt.ArrayLike], lse_list: Sequence[npt.ArrayLike]
                    ) -> Tuple[npt.NDArray[Any], npt.NDArray[Any]]:
    """Exact merge of attention over disjoint key sets (attention/merge.h's formula).

    o_list[i]: part i's output, any shape [..., head_dim] (e.g. [tokens, heads, head_dim]
    or [batch, seq, heads, head_dim]); lse_list[i]: its lse, the shape of o without
    head_dim ([tokens, heads] from attention(..., return_lse=True) is reshaped to it).
    Each part must be attention over its own keys with their global positions. Returns
    (o, lse) of the attention over the union:
        lse = logsumexp_i lse_i,   o = sum_i exp(lse_i - lse) o_i;
    parts with lse_i = -inf contribute nothing, rows empty in every part get o = 0 and
    lse = -inf; a NaN lse_i (a row that saw a NaN score) makes that row NaN, o and lse,
    as unsplit attention would be; +inf is refused. Sums in float64; results in the
    dtype of o_list[0] / lse_list[0].
    """
    if len(o_list) == 0 or len(o_list) != len(lse_list):
        raise ValueError("need as many o parts as lse parts (>= 1), got %d and %d"
                         % (len(o_list), len(lse_list)))
    os_ = [np.asarray(o) for o in o_list]
    shape = os_[0].shape
    if len(shape) < 1 or any(o.shape != shape for o in os_):
        raise ValueError("every o part must have one shape [..., head_dim]")
    # lse as the parts' rows: [..., heads] like o's leading axes, or [rows, heads]; a
    # reshape of anything with as many entries (flash-attn's [batch, heads, seq]) would
    # merge the wrong rows.
    rows_shape = shape[:-1]
    flat_shape = (int(np.prod(shape[:-2], dtype=np.int64)), shape[-2]) if len(shape) >= 2 else None
    ls = []
    for i, l in enumerate(lse_list):
        l = np.asarray(l, dtype=np.float64)
        if l.shape != rows_shape and l.shape != flat_shape:
            raise ValueError("lse part %d has shape %s; expected %s (o's shape without "
                             "head_dim)" % (i, l.shape, rows_shape))
        ls.append(l.reshape(rows_shape))
    for i, l in enumerate(ls):
        if (l == np.inf).any():
            raise ValueError("lse of part %d holds +inf (must be finite, -inf or NaN)" % i)
    stack = np.stack(ls)                          # [parts, ...rows]
    nan_rows = np.isnan(stack).any(axis=0)
    stack = np.where(nan_rows, -np.inf, stack)    # merged as empty, then set to NaN below
    m = stack.max(axis=0)
    empty = m == -np.inf
    m_safe = np.where(empty, 0.0, m)
    w = np.exp(stack - m_safe)                    # 0 for -inf parts
    z = w.sum(axis=0)
    lse = np.where(empty, -np.inf, m_safe + np.log(np.where(empty, 1.0, z)))
    c = w / np.where(empty, 1.0, z)
    o = np.zeros(shape, dtype=np.float64)
    for ci, oi in zip(c, os_):
        # Rows where a part is empty carry any value there (0 by convention): skip them.
        o += np.where(ci[..., None] > 0, ci[..., None] * oi.astype(np.float64), 0.0)
    o[nan_rows] = np.nan
    lse = np.where(nan_rows, np.nan, lse)
    lse_dtype = np.asarray(lse_list[0]).dtype
    return (o.astype(os_[0].dtype),
            lse.reshape(np.asarray(lse_list[0]).shape).astype(lse_dtype))
