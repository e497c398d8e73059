"""Context-parallel GroupPE attention over torch.distributed (sequence sharded across ranks).

    import gpe.context_parallel as cp
    pos = cp.shard_positions(seq_len, world, rank)          # load-balanced causal layout
    q_r, k_r, v_r = (cp.shard(x, world, rank) for x in (q, k, v))   # [batch, seq, heads, d]
    o_r = cp.attention(q_r, k_r, v_r, pos, causal=True, rope_dim=64, method="ring")
    o = cp.unshard([o_0, o_1, ...], seq_len)                 # where all shards are at hand
    o_r = cp.attention(q_r, k_r, v_r, pos, causal=True, rope=gpe.Rope(64, schedule="yarn",
                       factor=4.0), window_size=(1023, 0), sinks=sinks)  # any method
    pos = cp.packed_shard_positions(cu_seqlens, world, rank)  # packed: part of each sequence
    o_r = cp.attention(q[pos], k[pos], v[pos], pos, causal=True, cu_seqlens=cu_seqlens)

Every rank holds the tokens at `positions` (int64 global ids, any order, possibly none) of
one self-attention sequence: q, k [batch, tokens, heads, head_dim], v [batch, tokens,
heads_kv, value_dim] (heads_q a multiple of heads_kv; the value head size may differ from
head_dim, as DeepSeek's 192/128, and o takes it). Each rank's attention uses the global positions, so RoPE, GRAPE-M,
algebraic encodings, ALiBi and the causal mask are exactly those of the unsharded
sequence. Three methods, forward and backward (autograd):

- "ring" (Liu et al., Ring Attention; flash-attention's lse merge): K/V blocks travel
  around the ring with isend/irecv, overlapped with the block in flight; each rank merges
  its partial outputs by log-sum-exp (gpe.merge_attention's formula). The backward passes
  dK/dV accumulators around the ring with the K/V blocks and runs GroupPE's backward per
  block with the GLOBAL o and lse, which gives each block's exact share of the gradient
  (dS = P (dP - rowsum(dO o)) with P normalised by the global lse).
- "all_gather": K/V (and positions) all-gathered, one local attention call; dK/dV
  reduce-scattered back to their owners.
- "ulysses" (Jacobs et al., DeepSpeed-Ulysses): all-to-all from sequence shards to head
  shards (heads_q and heads_kv divisible by the world size), full-sequence attention on
  heads / world heads, all-to-all back.

Load-balanced causal sharding (shard_positions, layout "load_balanced"): the sequence is
cut into 2 W chunks at floor(c L / 2W), rank r holds chunks r and 2W - 1 - r, so every
rank does about the same causal work; short or odd lengths give unequal or empty shards,
which every method handles.

Encodings: rope_dim (RoPE, default schedule, either pairing), encoding = gpe.GrapeM,
gpe.AlgebraicSequence or a learnable gpe.torch.GrapeMEncoding, alibi ("causal" /
"symmetric"), bias = gpe.Alibi or gpe.T5Bias ("ring" and "all_gather"; "ulysses" takes
Alibi only, whose slopes it re-slices per head shard) or a learnable gpe.torch.AlibiBias,
T5Bias or GrapeABias (slopes) on every method, and FoX (Lin et al.) through
fox_gate_logits [tokens, heads_q] (the local tokens' gate logits x, batch 1; a tensor
that may require grad). FoX's bias c_i - c_j (c_t = sum_{l <= t} ln sigmoid(x_l)) crosses
shard boundaries: each rank sums its gates per contiguous run of positions, the run
totals are all-gathered, and an exclusive prefix scan over them gives every local token
its global c (exact in float64). A ring block's FoX bias is then a gpe.FoxBias over the
span of its query and key positions whose logits are the tokens' own, one logit per gap
carrying the gap's total (sigmoid(x) = exp(G)) and +1e4 (ln sigmoid = 0 exactly in
double) elsewhere: exact, at the cost of span x heads float64 of gate table per block.
"all_gather" and "ulysses" hold every token's logits (all-gathered, or all-to-all'd per
head shard) and use the whole sequence's FoX bias.

Learnable parameters get gradients (autograd, into the tensors the modules hold): each
rank computes its share, the gradient over its blocks' (query, key) pairs with the GLOBAL
lse and positions, and backward sums the shares over ranks with an all_reduce, so every
rank receives the unsharded gradient (replicated parameters: do not average it again over
the context-parallel group). "ring" does this inside its backward node; "all_gather" and
"ulysses" pass the parameters through one collective node (_Collect,
gpe/_context_parallel_comm.py) beside the K/V gather, so every rank runs the collectives
in one order. Under "ulysses" a rank owns heads h0 .. h0 + H/W: per-head slopes and T5
table columns are sliced to them (the other entries of its share are zero) and GRAPE-M's
generators, shared by the heads, get its heads' share. FoX gate logits: b_ij = c_i - c_j
gives dL/dc_t = sum_j dS_tj - sum_i dS_it, and the transpose of the cross-rank prefix
scan is a suffix sum across ranks, dL/dx_l = sigmoid(-x_l) sum_{t >= l} dL/dc_t; the
ring's backward gathers every rank's logits once, gives each block the FoX bias over its
span with the tokens' own logits (its kernel returns the block's part of that suffix sum
at every position of the span) and all-reduces the table (see _RingAttention.backward in
gpe/_context_parallel_ring.py); "all_gather" reduce-scatters and "ulysses" all-to-alls
the logit gradient back. Whether a parameter requires grad must agree on every rank (the
sum is a collective). Refused: GRAPE-AP, fixed or learnable (psi(i, l) depends on the
query, so its bias is a running sum over every key between j and i, not a difference of
prefix sums), and FoX or gated GRAPE-A as a bias object (one contiguous run of logits,
not a rank's two chunks: pass fox_gate_logits).

Issue 25's options, on every method, forward and backward:
- rope = a gpe.Rope handle (any schedule: Llama 3, YaRN with its attention factor,
  LongRoPE, linear, dynamic NTK, xPos, partial rotary; single-axis), in place of rope_dim:
  q rotated in the query role and k in the key role at their global positions.
- softcap = c: Gemma 2's logit cap c tanh(s / c) on every score's q.k part, elementwise
  (0 < c <= 1e30: a larger cap is no cap, leave it unset), so every block caps its own scores and the merge is unchanged (float64 under "ring":
  forward only, see attention()).
- window_size = (left, right): flash-attn's sliding window (-1: unbounded side; other
  negative values are refused), key j allowed for query i iff p_i - left <= p_j <= p_i +
  right (and p_j <= p_i under causal). "ring" skips, with no attention call (forward or
  backward), every step whose key block holds no key allowed for any local query (causal
  rule, window, packed sequences: an exact test, one binary search per query); the K/V
  still travel. BLOCK_CALLS in gpe/_context_parallel_ring.py counts the calls made, for
  tests.
- sinks: gpt-oss's sink logits z_h, [heads_q] (read as float32, as the kernels do; a
  tensor that may require grad, or a gpe.torch.AttentionSinks). Each row's denominator
  gains e^{z_h} once: "ring" merges the blocks by log-sum-exp without the sink and then
  adds it, lse' = logaddexp(lse, z_h), o' = o e^{lse - lse'}; its backward runs each block
  with that global lse (so P_ij already holds the sink's share) and gives dL/dz_h =
  -sum_i e^{z_h - lse'_i} <dO_i, o'_i> over the rank's rows (the sink is a key of value
  0), summed over ranks by an all_reduce. "all_gather" and "ulysses" pass the sinks to
  their one attention call (Ulysses: the head shard's) through _Collect, which sums
  their gradient over ranks like the learnable parameters' (bfloat16 too, since 0.10.0;
  "ring" computes it itself).
- cu_seqlens: packed variable-length sequences (flash-attn's varlen batch). Sequences are
  packed in one token dimension of total length T = cu_seqlens[-1] (int64 [S + 1], 0 =
  cu[0] <= ... <= cu[S], the same on every rank: one small all_gather checks it and that
  the ranks hold T tokens together); q, k, v are [1, tokens, heads, head_dim] or
  [tokens, heads, head_dim] and `positions` are the PACKED indices (0 .. T-1) of the
  rank's tokens, in any order. Token t belongs to the sequence s with cu[s] <= t <
  cu[s + 1] and its encoding position is t - cu[s] (positions restart at 0 in every
  sequence, as gpe.attention's packed layout numbers them); keys attend only to queries
  of their own sequence. packed_shard_positions(cu_seqlens, W, r) shards every sequence
  on its own (load-balanced per sequence, so each rank holds part of each sequence);
  shard_positions(T, W, r) on the packed dimension works too. Internally the rank's
  tokens are put in packed order (output rows go back to the caller's order), and each
  ring block, or the single call of "all_gather" / "ulysses", runs the kernels' packed
  layout with per-block cu_seqlens. Not with FoX (one sequence's gates).

dtypes: float32 and bfloat16 (optimised kernels), float64 (exact reference). The float64
reference's backward recomputes o and lse from the keys it is given instead of reading
the global ones, so the float64 ring backward gives it each block's keys plus one
phantom key standing for the rest of the ring (two extra features carry its score and
value; see _ring_block_grads_f64 in gpe/_context_parallel_ring_f64.py): exact, with no
change to the C ABI. The phantom must be an allowed key for every query it serves: under
a window the queries are cut into runs one phantom position serves, and packed blocks go
sequence by sequence (_ring_block_grads_split); a gpe.Rope handle is applied outside
that kernel, like GRAPE-M. A learnable bias's gradient there has the phantom column's share
subtracted (the bias object accumulates it), and GRAPE-M, applied outside that kernel,
gets its generator gradients from gpe.torch.grape_m's VJP.

The same code runs on the gloo backend (CPU tensors, as GroupPE's kernels here) and
takes whichever backend the process group has.

This module holds attention() and its argument checks; the parts are private modules:
_context_parallel_shard (shard_positions, shard, unshard, chunk_bounds: re-exported
here), _context_parallel_comm (the process group and the shared collectives),
_context_parallel_fox (FoX across ranks; fox_global_prefix is re-exported here),
_context_parallel_config (one call's options and learnable tensors), one module per
method (_context_parallel_ring, _context_parallel_all_gather, _context_parallel_ulysses)
and _context_parallel_ring_f64 (the float64 ring backward).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Literal, Optional, Tuple, Union

import numpy.typing as npt

import torch
import torch.distributed as dist

from gpe._context_parallel_all_gather import _all_gather_attention
from gpe._context_parallel_comm import _Group
from gpe._context_parallel_config import _Config, _learnable_tensors
from gpe._context_parallel_fox import fox_global_prefix
from gpe._context_parallel_ring import BLOCK_CALLS as _RING_BLOCK_CALLS  # noqa: F401
from gpe._context_parallel_ring import _RingAttention
from gpe._context_parallel_shard import (LAYOUTS, chunk_bounds, shard,  # noqa: F401
                                         shard_positions, unshard)
from gpe._context_parallel_ulysses import _ulysses_attention

if TYPE_CHECKING:  # imported lazily at run time, as attention() does
    from gpe._torch_base import _LearnableBias
    from gpe.bias import AdditiveBias
    from gpe.rope import Rope
    from gpe.sequence import AlgebraicSequence, GrapeM
    from gpe.torch import AttentionSinks, GrapeMEncoding

# A tensor, or anything torch.as_tensor takes.
_TensorLike = Union[torch.Tensor, npt.ArrayLike]

__all__ = ["METHODS", "attention", "chunk_bounds", "fox_global_prefix",
           "packed_shard_positions", "shard", "shard_positions", "unshard"]

METHODS = ("ring", "all_gather", "ulysses")


def _window_arg(window_size):
    """flash-attn's window_size as (left, right), or None for no window ((-1, -1) too)."""
    if window_size is None:
        return None
    try:
        left, right = (int(x) if int(x) == x else None for x in window_size)
        if left is None or right is None:
            raise TypeError
    except (TypeError, ValueError):
        raise ValueError("window_size must be a pair (left, right) of ints, -1 for an "
                         "unbounded side; got %r" % (window_size,)) from None
    if left < -1 or right < -1:
        raise ValueError("window_size: each side must be -1 (unbounded) or >= 0; got (%d, %d)"
                         % (left, right))
    return None if (left, right) == (-1, -1) else (left, right)


def _sinks_arg(sinks, heads_q):
    """The sink logits as a floating tensor [heads_q] (the caller's, so a tensor that
    requires grad keeps its graph), or None."""
    if sinks is None:
        return None
    from gpe.torch import AttentionSinks
    if isinstance(sinks, AttentionSinks):
        sinks = sinks.logits
    if not isinstance(sinks, torch.Tensor):
        sinks = torch.as_tensor(sinks, dtype=torch.float32)
    if not sinks.is_floating_point():
        sinks = sinks.to(torch.float32)
    if sinks.dim() != 1 or sinks.shape[0] != heads_q:
        raise ValueError("sinks must hold one logit per query head, [heads_q] = [%d]; got "
                         "shape %s" % (heads_q, tuple(sinks.shape)))
    z = sinks.detach()
    if bool(torch.isnan(z).any()) or bool((z == float("inf")).any()):
        raise ValueError("sinks must be finite (or -inf: no sink for that head)")
    from gpe.torch import _sinks_float32
    _sinks_float32(z)  # a finite logit past float32's range: ValueError naming its index
    return sinks


def _cu_seqlens_arg(cu_seqlens, positions, batch):
    """cu_seqlens as int64 [S + 1] (0 = cu[0] <= cu[1] <= ... <= cu[S]), checked against
    this rank's packed token indices."""
    cu = torch.as_tensor(cu_seqlens)
    if cu.is_floating_point() or cu.dtype == torch.bool:
        raise ValueError("cu_seqlens must be integers")
    cu = cu.to(torch.int64).flatten()
    if cu.numel() < 2 or int(cu[0]) != 0 or bool((cu[1:] < cu[:-1]).any()):
        raise ValueError("cu_seqlens must be [0, ..., total_tokens], non-decreasing, with at "
                         "least one sequence; got %s" % cu.tolist())
    if batch != 1:
        raise ValueError("cu_seqlens: packed sequences share one token dimension, so q, k, "
                         "v are [1, tokens, heads, head_dim] or [tokens, heads, head_dim]; "
                         "got batch %d" % batch)
    if positions.numel() and (int(positions.min()) < 0 or
                              int(positions.max()) >= int(cu[-1])):
        raise ValueError("cu_seqlens: positions are packed token indices in [0, %d) (= "
                         "cu_seqlens[-1]); got %d .. %d" % (int(cu[-1]), int(positions.min()),
                                                            int(positions.max())))
    if positions.numel() > 1 and bool((torch.sort(positions).values[1:]
                                       == torch.sort(positions).values[:-1]).any()):
        raise ValueError("cu_seqlens: a packed token index repeats within this rank's shard")
    return cu


# The packed tokens' fingerprint: position p = q M + r summed as (q, r, r^2) over a
# rank's tokens; the ranks' sums add up to those of 0 .. T-1 when they hold each token
# once (a token on two ranks and another on none differ in q or r). Exact in int64 for
# T <= 2^30 (r^2 < 2^33 over at most 2^30 tokens).
_FINGERPRINT_M = 65537


def _fingerprint(positions):
    q, r = positions // _FINGERPRINT_M, positions % _FINGERPRINT_M
    return [int(q.sum()), int(r.sum()), int((r * r).sum())]


def _fingerprint_of_all(t):
    """_fingerprint of 0 .. t-1 in closed form (t = Q M + R)."""
    m = _FINGERPRINT_M
    big, rest = divmod(t, m)
    s1 = lambda n: n * (n - 1) // 2
    s2 = lambda n: (n - 1) * n * (2 * n - 1) // 6
    return [m * s1(big) + big * rest, big * s1(m) + s1(rest), big * s2(m) + s2(rest)]


def _check_packed_agreement(g, cu, positions):
    """One small all_gather: every rank must give the same cu_seqlens, and the ranks'
    tokens together must be the T = cu_seqlens[-1] packed tokens, each on exactly one
    rank (counted, and fingerprinted: a token on two ranks and another on none was
    accepted; raised on every rank alike, since every rank sees the same summaries)."""
    tokens = positions.numel()
    i = torch.arange(1, cu.numel() + 1, dtype=torch.int64)
    mine = torch.tensor([tokens, cu.numel(), int(cu[-1]), int(cu.sum()), int((cu * i).sum())]
                        + _fingerprint(positions.to(torch.int64)), dtype=torch.int64)
    every = [torch.zeros_like(mine) for _ in range(g.size)]
    dist.all_gather(every, mine, group=g.group)
    every = torch.stack(every)
    if bool((every[:, 1:5] != every[0, 1:5]).any()):  # the cu_seqlens summaries
        raise ValueError("cu_seqlens differs across ranks (every rank must pass the same "
                         "global boundaries)")
    if int(every[:, 0].sum()) != int(cu[-1]):
        raise ValueError("cu_seqlens: the ranks hold %d tokens together, but cu_seqlens[-1] = "
                         "%d (every packed token must be on exactly one rank)"
                         % (int(every[:, 0].sum()), int(cu[-1])))
    total = int(cu[-1])
    if total <= 2**30 and every[:, 5:].sum(0).tolist() != _fingerprint_of_all(total):
        raise ValueError("cu_seqlens: the ranks' packed token indices are not 0 .. %d each "
                         "once (a token on two ranks, another on none: every packed token "
                         "must be on exactly one rank)" % (total - 1))


def packed_shard_positions(cu_seqlens: _TensorLike, world_size: int, rank: int,
                           layout: Literal["load_balanced", "contiguous"] = "load_balanced"
                           ) -> torch.Tensor:
    """Packed token indices (int64, ascending) that `rank` holds when every sequence of a
    packed batch (boundaries cu_seqlens) is sharded on its own: shard_positions of each
    sequence's length, offset by its start, so every rank holds a part of every sequence
    (load-balanced: causal work balanced sequence by sequence)."""
    cu = torch.as_tensor(cu_seqlens, dtype=torch.int64).flatten()
    if cu.numel() < 2 or int(cu[0]) != 0 or bool((cu[1:] < cu[:-1]).any()):
        raise ValueError("cu_seqlens must be [0, ..., total_tokens], non-decreasing")
    return torch.cat([torch.empty(0, dtype=torch.int64)] + [
        shard_positions(int(b - a), world_size, rank, layout) + int(a)
        for a, b in zip(cu[:-1], cu[1:])])


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, positions: _TensorLike,
              causal: bool = False, scale: Optional[float] = None, rope_dim: int = 0,
              rope_base: float = 10000.0, rope_pairing: Literal["half", "interleaved"] = "half",
              alibi: Optional[Literal["causal", "symmetric"]] = None,
              bias: Optional[Union[AdditiveBias, _LearnableBias]] = None,
              encoding: Optional[Union[GrapeM, AlgebraicSequence, GrapeMEncoding]] = None,
              fox_gate_logits: Optional[_TensorLike] = None,
              method: Literal["ring", "all_gather", "ulysses"] = "ring",
              group: Optional[dist.ProcessGroup] = None, threads: int = 0,
              return_lse: bool = False,
              rope: Optional[Rope] = None, window_size: Optional[Tuple[int, int]] = None,
              sinks: Optional[Union[_TensorLike, AttentionSinks]] = None,
              cu_seqlens: Optional[_TensorLike] = None, softcap: Optional[float] = None,
              bf16_arithmetic: str = "auto", float32_arithmetic: str = "exact"
              ) -> Union[torch.Tensor, Tuple[torch.Tensor, torch.Tensor]]:
    """This rank's rows of softmax(scale <T q, T k> + bias) v over the whole sharded sequence.

    q, k, v: [batch, tokens, heads, head_dim] CPU tensors (v's last axis, and o's, the
    value head size, which may differ) holding the tokens at
    `positions` (int64 [tokens], global); options as gpe.torch.attention, plus
    fox_gate_logits ([tokens, heads_q], batch 1) and method ("ring", "all_gather",
    "ulysses"). Differentiable in q, k, v, FoX gate logits and the tensors of learnable
    gpe.torch modules (bias = AlibiBias, T5Bias, GrapeABias(slopes=); encoding =
    GrapeMEncoding), whose gradients are summed over ranks (the unsharded gradient).
    return_lse=True (ring and all_gather) also returns lse [batch, tokens, heads_q] over
    the whole sequence. rope (a single-axis gpe.Rope, any schedule), window_size
    ((left, right), -1 unbounded), sinks ([heads_q], may require grad) and cu_seqlens
    (packed sequences; positions are then packed token indices): the module docstring.
    softcap: Gemma 2's logit cap c tanh(s / c) on the q.k part of every score, elementwise
    (finite, > 0 and at most 1e30: a larger cap is no cap, leave it unset; ValueError
    otherwise), so each shard's blocks cap their own scores (float64 inputs under method="ring" take it
    without gradients only: that backward's phantom key would be capped too).
    bf16_arithmetic / float32_arithmetic: gpe.torch.attention's CPU arithmetic, run by
    every block of every method, forward and backward (each block's backward recomputes
    its scores with it; float64 tensors take no such choice and ignore them)."""
    from gpe.bias import Alibi, AdditiveBias, FoxBias, GrapeABias, GrapeApBias, T5Bias
    from gpe.sequence import AlgebraicSequence, GrapeM
    import gpe.torch as gt
    from gpe.attention import _arithmetic_codes
    if method not in METHODS:
        raise ValueError("method must be one of %s, got %r" % (METHODS, method))
    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError("gpe.context_parallel needs an initialised torch.distributed "
                           "process group (torch.distributed.init_process_group)")
    packed_3d = cu_seqlens is not None and all(isinstance(x, torch.Tensor) and x.dim() == 3
                                               for x in (q, k, v))
    if packed_3d:  # [tokens, heads, head_dim]: one packed batch
        q, k, v = q[None], k[None], v[None]
    for name, x in (("q", q), ("k", k), ("v", v)):
        if not isinstance(x, torch.Tensor) or x.dim() != 4:
            raise ValueError("%s must be a 4-D tensor [batch, tokens, heads, head_dim] (or, "
                             "with cu_seqlens, [tokens, heads, head_dim])" % name)
    if q.shape[3] != k.shape[3]:
        raise ValueError("q and k must have the same head_dim: got %d and %d"
                         % (q.shape[3], k.shape[3]))
    if tuple(v.shape[:3]) != tuple(k.shape[:3]) or v.shape[3] < 1:
        raise ValueError("v must be [batch, tokens, heads_kv, value_dim] with k's batch, "
                         "tokens and heads (%s), value_dim >= 1; got %s"
                         % (tuple(k.shape[:3]), tuple(v.shape)))
    positions = torch.as_tensor(positions)
    if positions.dtype.is_floating_point or positions.dtype.is_complex or positions.dtype == torch.bool:
        raise TypeError("positions must be integers; got %s" % positions.dtype)
    positions = positions.to(torch.int64).flatten()
    if not (q.shape[1] == k.shape[1] == v.shape[1] == positions.numel()):
        raise ValueError("q, k, v and positions must hold the same tokens (self-attention "
                         "shards): got %d, %d, %d tokens and %d positions"
                         % (q.shape[1], k.shape[1], v.shape[1], positions.numel()))
    if rope_pairing not in ("half", "interleaved"):
        raise ValueError("rope_pairing must be 'half' or 'interleaved'")
    if alibi not in (None, "causal", "symmetric"):
        raise ValueError("alibi must be None, 'causal' or 'symmetric'")
    if encoding is not None and not isinstance(encoding, (GrapeM, AlgebraicSequence,
                                                          gt.GrapeMEncoding)):
        raise TypeError("encoding must be a gpe.GrapeM, gpe.AlgebraicSequence or "
                        "gpe.torch.GrapeMEncoding (RoPE: rope_dim)")
    if isinstance(bias, (GrapeApBias, gt.GrapeApBias)):
        raise ValueError("GRAPE-AP is not supported under context parallelism: psi(i, l) "
                         "depends on the query i, so its bias is a running sum over every key "
                         "between j and i, not a difference of prefix sums that shards can "
                         "exchange; run it on one rank")
    if isinstance(bias, (FoxBias, gt.FoxBias)) or (
            isinstance(bias, GrapeABias) and bias.gated) or (
            isinstance(bias, gt.GrapeABias) and bias.gate_logits is not None):
        raise ValueError("pass FoX as fox_gate_logits (this rank's gate logits [tokens, "
                         "heads_q], a tensor that may require grad); a FoX or gated GRAPE-A "
                         "bias object holds one contiguous run of tokens, not a rank's shard")
    if bias is not None and not isinstance(bias, (Alibi, T5Bias, gt.AlibiBias, gt.T5Bias,
                                                  gt.GrapeABias)):
        raise TypeError("bias must be a gpe.Alibi, gpe.T5Bias or a learnable "
                        "gpe.torch.AlibiBias, T5Bias or GrapeABias (slopes) under context "
                        "parallelism" if isinstance(bias, (AdditiveBias, torch.nn.Module))
                        else "bias must be a gpe.bias object or a learnable gpe.torch bias")
    if sum(x is not None for x in (alibi, bias, fox_gate_logits)) > 1:
        raise ValueError("give at most one of alibi, bias and fox_gate_logits")
    if rope is not None:
        from gpe.rope import Rope
        if not isinstance(rope, Rope):
            raise TypeError("rope must be a gpe.Rope; got %s" % type(rope).__name__)
        if rope_dim or encoding is not None:
            raise ValueError("give one positional rotation: rope (a gpe.Rope), rope_dim or "
                             "encoding")
        head_dim, _, axes = rope.shape
        if axes != 1:
            raise ValueError("rope: a multi-axis gpe.Rope (axial / M-RoPE) reads per-axis "
                             "coordinates, which gpe.context_parallel does not shard; use a "
                             "single-axis one")
        if head_dim != q.shape[3]:
            raise ValueError("rope: the gpe.Rope's head_dim (%d) must be q's (%d)"
                             % (head_dim, q.shape[3]))
    arithmetic = _arithmetic_codes(bf16_arithmetic, float32_arithmetic)  # ValueError
    window = _window_arg(window_size)
    sinks = _sinks_arg(sinks, q.shape[2])
    if softcap is not None:
        softcap = float(softcap)
        if not (math.isfinite(softcap) and 0.0 < softcap <= 1e30):
            raise ValueError("softcap must be a finite number > 0 and at most 1e30 (a larger "
                             "cap is no cap: leave it unset), got %r" % softcap)
    cu, order = None, None
    if cu_seqlens is not None:
        if fox_gate_logits is not None:
            raise ValueError("cu_seqlens: FoX (fox_gate_logits) reads one sequence's gates; "
                             "packed sequences are not supported with it")
        cu = _cu_seqlens_arg(cu_seqlens, positions, q.shape[0])
        # Tokens grouped by sequence (packed index order), as the kernels' packed layout
        # needs them; the outputs are put back in the caller's order at the end.
        order = torch.argsort(positions)
        if bool((order == torch.arange(order.numel())).all()):
            order = None
        else:
            q, k, v = (x.index_select(1, order) for x in (q, k, v))
            positions = positions[order]
    g = _Group(group)
    if cu is not None:
        _check_packed_agreement(g, cu, positions)
    cfg = _Config(g, causal, scale, rope_dim, rope_base, rope_pairing, alibi, bias, encoding,
                  threads, rope, window, sinks, cu, softcap,
                  ((bf16_arithmetic, float32_arithmetic), arithmetic))
    learnable = _learnable_tensors(cfg)
    cfg.params = tuple(None if t is None else t.detach() for t in learnable)
    fox, fox_logits = None, None
    if fox_gate_logits is not None:
        fox_logits = torch.as_tensor(fox_gate_logits)
        if not fox_logits.is_floating_point():
            fox_logits = fox_logits.to(torch.float64)
        x = fox_logits.detach().to(torch.float64)
        if q.shape[0] != 1:
            raise ValueError("fox_gate_logits: FoX reads one sequence's gates (batch 1), got "
                             "batch %d" % q.shape[0])
        if x.dim() != 2 or x.shape[0] != positions.numel() or x.shape[1] != q.shape[2]:
            raise ValueError("fox_gate_logits must be [tokens, heads_q] = [%d, %d], got %s"
                             % (positions.numel(), q.shape[2], tuple(x.shape)))
        if not bool(torch.isfinite(x).all()):
            raise ValueError("fox_gate_logits must be finite")
        if method == "ring":
            fox = torch.stack([x, fox_global_prefix(g, positions, x)], -1)
    if softcap is not None and method == "ring" and q.dtype == torch.float64 and (
            torch.is_grad_enabled() and any(
                isinstance(t, torch.Tensor) and t.requires_grad
                for t in (q, k, v, sinks, fox_logits) + tuple(learnable))):
        raise ValueError("softcap: the float64 ring backward stands for the rest of the ring "
                         "with one phantom key whose score the cap would change; use float32 "
                         "or bfloat16, method='all_gather' or 'ulysses', or no gradients")
    lse = None
    if method == "ring":
        o, lse = _RingAttention.apply(q, k, v, positions, fox, fox_logits, cfg, *learnable,
                                      sinks)
    elif method == "all_gather":
        o, lse = _all_gather_attention(cfg, q, k, v, positions, fox_logits, sinks)
    else:
        if return_lse:
            raise ValueError("return_lse is available with method='ring' or 'all_gather'")
        o = _ulysses_attention(cfg, q, k, v, positions, fox_logits, sinks)
    if order is not None:
        back = torch.argsort(order)
        o, lse = o.index_select(1, back), (None if lse is None else lse.index_select(1, back))
    if packed_3d:
        o, lse = o[0], (None if lse is None else lse[0])
    return (o, lse) if return_lse else o
