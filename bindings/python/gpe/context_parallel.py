"""Context-parallel GroupPE attention over torch.distributed (sequence sharded across ranks).

    import gpe.context_parallel as cp
    pos = cp.shard_positions(seq_len, world, rank)          # load-balanced causal layout
    q_r, k_r, v_r = (cp.shard(x, world, rank) for x in (q, k, v))   # [batch, seq, heads, d]
    o_r = cp.attention(q_r, k_r, v_r, pos, causal=True, rope_dim=64, method="ring")
    o = cp.unshard([o_0, o_1, ...], seq_len)                 # where all shards are at hand

Every rank holds the tokens at `positions` (int64 global ids, any order, possibly none) of
one self-attention sequence: q, k, v [batch, tokens, heads, head_dim] (heads_q a
multiple of heads_kv). Each rank's attention uses the global positions, so RoPE, GRAPE-M,
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
rank computes its share, the gradient over its blocks' (query, key) pairs with the
GLOBAL lse and positions, and backward sums the shares over ranks with an all_reduce, so
every rank receives the unsharded gradient (replicated parameters: do not average it
again over the context-parallel group). "ring" does this inside its backward node;
"all_gather" and "ulysses" pass the parameters through one collective node (_Collect)
beside the K/V gather, so every rank runs the collectives in one order. Under
"ulysses" a rank owns heads h0 .. h0 + H/W: per-head slopes and T5 table columns are
sliced to them (the other entries of its share are zero) and GRAPE-M's generators, shared
by the heads, get its heads' share. FoX gate logits: b_ij = c_i - c_j gives dL/dc_t =
sum_j dS_tj - sum_i dS_it, and the transpose of the cross-rank prefix scan is a suffix
sum across ranks, dL/dx_l = sigmoid(-x_l) sum_{t >= l} dL/dc_t; the ring's backward
gathers every rank's logits once, gives each block the FoX bias over its span with the
tokens' own logits (its kernel returns the block's part of that suffix sum at every
position of the span) and all-reduces the table (see _RingAttention.backward);
"all_gather" reduce-scatters and "ulysses" all-to-alls the logit gradient back.
Whether a parameter requires grad must agree on every rank (the sum is a collective).
Refused: GRAPE-AP, fixed or learnable (psi(i, l) depends on the query, so its bias is a
running sum over every key between j and i, not a difference of prefix sums), and FoX
or gated GRAPE-A as a bias object (one contiguous run of logits, not a rank's two
chunks: pass fox_gate_logits).

dtypes: float32 and bfloat16 (optimised kernels), float64 (exact reference). The float64
reference's backward recomputes o and lse from the keys it is given instead of reading
the global ones, so the float64 ring backward gives it each block's keys plus one
phantom key standing for the rest of the ring (two extra features carry its score and
value; see _ring_block_grads_f64): exact, with no change to the C ABI. A learnable bias's
gradient there has the phantom column's share subtracted (the bias object accumulates
it), and GRAPE-M, applied outside that kernel, gets its generator gradients from
gpe.torch.grape_m's VJP.

The same code runs on the gloo backend (CPU tensors, as GroupPE's kernels here) and
takes whichever backend the process group has.
"""

import math

import numpy as np
import torch
import torch.distributed as dist

__all__ = ["METHODS", "attention", "chunk_bounds", "fox_global_prefix", "shard",
           "shard_positions", "unshard"]

METHODS = ("ring", "all_gather", "ulysses")
LAYOUTS = ("load_balanced", "contiguous")

# ln sigmoid(1e4) = -log1p(exp(-1e4)) is exactly 0.0 in double: a neutral gate.
_NEUTRAL_GATE = 1e4


# ---- Sharding --------------------------------------------------------------------------


def chunk_bounds(seq_len, num_chunks):
    """[0, floor(L / n), floor(2L / n), ..., L]: n chunks whose sizes differ by at most 1."""
    if seq_len < 0 or num_chunks < 1:
        raise ValueError("need seq_len >= 0 and num_chunks >= 1, got %d and %d"
                         % (seq_len, num_chunks))
    return [(c * seq_len) // num_chunks for c in range(num_chunks + 1)]


def shard_positions(seq_len, world_size, rank, layout="load_balanced"):
    """Global positions (int64, ascending) of the tokens `rank` holds.

    "load_balanced": chunks rank and 2 world_size - 1 - rank of 2 world_size (causal work
    balanced); "contiguous": chunk rank of world_size."""
    if not 0 <= rank < world_size:
        raise ValueError("rank %d outside [0, %d)" % (rank, world_size))
    if layout == "load_balanced":
        b = chunk_bounds(seq_len, 2 * world_size)
        lo, hi = rank, 2 * world_size - 1 - rank
        return torch.cat([torch.arange(b[lo], b[lo + 1]), torch.arange(b[hi], b[hi + 1])])
    if layout == "contiguous":
        b = chunk_bounds(seq_len, world_size)
        return torch.arange(b[rank], b[rank + 1])
    raise ValueError("layout must be one of %s, got %r" % (LAYOUTS, layout))


def shard(x, world_size, rank, dim=1, layout="load_balanced"):
    """The tokens of x (sequence along `dim`) that `rank` holds (differentiable)."""
    return x.index_select(dim, shard_positions(x.shape[dim], world_size, rank, layout))


def unshard(shards, seq_len=None, dim=1, layout="load_balanced"):
    """Inverse of shard: every rank's shard, in rank order, back into one sequence."""
    world = len(shards)
    if seq_len is None:
        seq_len = sum(s.shape[dim] for s in shards)
    pos = torch.cat([shard_positions(seq_len, world, r, layout) for r in range(world)])
    if pos.numel() != seq_len:
        raise ValueError("the shards hold %d tokens, not seq_len = %d" % (pos.numel(), seq_len))
    return torch.cat(list(shards), dim).index_select(dim, torch.argsort(pos))


# ---- Process-group helpers ------------------------------------------------------------


class _Group:
    def __init__(self, group):
        self.group = group
        self.size = dist.get_world_size(group)
        self.rank = dist.get_rank(group)
        self.ranks = (dist.get_process_group_ranks(group) if group is not None
                      else list(range(self.size)))

    def global_rank(self, r):
        return self.ranks[r % self.size]


def _all_gather_sizes(g, n):
    t = torch.tensor([n], dtype=torch.int64)
    out = [torch.zeros(1, dtype=torch.int64) for _ in range(g.size)]
    dist.all_gather(out, t, group=g.group)
    return [int(x) for x in out]


def _all_gather_var(g, x, sizes, dim=0):
    """all_gather of tensors whose size along `dim` differs per rank (padded to the max)."""
    m = max(sizes)
    if m == 0:
        return x.new_empty(x.shape[:dim] + (0,) + x.shape[dim + 1:])
    pad_shape = list(x.shape)
    pad_shape[dim] = m - x.shape[dim]
    padded = torch.cat([x, x.new_zeros(pad_shape)], dim).contiguous()
    out = [torch.empty_like(padded) for _ in range(g.size)]
    dist.all_gather(out, padded, group=g.group)
    return torch.cat([o.narrow(dim, 0, n) for o, n in zip(out, sizes)], dim)


# ---- FoX across ranks -----------------------------------------------------------------


def _log_sigmoid(x):
    return torch.nn.functional.logsigmoid(x.to(torch.float64))


def fox_global_prefix(g, positions, gate_logits):
    """c_t = sum_{l <= t} ln sigmoid(x_l) (Lin et al., Forgetting Transformer) for the local
    tokens, summed over the WHOLE sharded sequence: per-run totals all-gathered, then an
    exclusive prefix scan over the runs in position order. float64 [tokens, heads]."""
    heads = gate_logits.shape[1]
    ls = _log_sigmoid(gate_logits)
    order = torch.argsort(positions)
    sp, sls = positions[order], ls[order]
    n = sp.numel()
    if n > 1 and bool((sp[1:] == sp[:-1]).any()):
        raise ValueError("fox: positions repeat within a shard")
    new_run = torch.ones(n, dtype=torch.bool)
    if n > 1:
        new_run[1:] = sp[1:] != sp[:-1] + 1
    run_id = torch.cumsum(new_run.to(torch.int64), 0) - 1
    starts = torch.nonzero(new_run).flatten()
    num_runs = starts.numel()
    incl = torch.cumsum(sls, 0)                              # inclusive, local order
    before = torch.zeros(num_runs, heads, dtype=torch.float64)  # local sum before each run
    if num_runs > 1:
        before[1:] = incl[starts[1:] - 1]
    ends = torch.cat([starts[1:], torch.tensor([n])]) if num_runs else starts
    totals = incl[ends - 1] - before if num_runs else before
    # Table row: (first position, length, totals per head), float64 (positions exact to 2^53).
    table = torch.cat([sp[starts].to(torch.float64)[:, None],
                       (ends - starts).to(torch.float64)[:, None], totals], 1)
    counts = _all_gather_sizes(g, num_runs)
    runs = _all_gather_var(g, table, counts)
    runs = runs[torch.argsort(runs[:, 0])]
    first, length = runs[:, 0], runs[:, 1]
    if runs.shape[0] > 1 and bool((first[1:] != first[:-1] + length[:-1]).any()):
        raise ValueError("fox under context parallelism needs the shards to tile one "
                         "contiguous range of positions (no gaps, no overlaps)")
    # Exclusive prefix scan of the run totals (in position order).
    offsets = torch.cumsum(runs[:, 2:], 0) - runs[:, 2:]
    if num_runs:
        mine = torch.searchsorted(first.contiguous(), sp[starts].to(torch.float64))
        c_sorted = offsets[mine][run_id] + incl - before[run_id]
    else:
        c_sorted = incl
    c = torch.empty_like(c_sorted)
    c[order] = c_sorted
    return c


def _gap_logit(total):
    """x with ln sigmoid(x) = total (<= 0): sigmoid(x) = e^total, x = total - ln(1 - e^total)."""
    if total >= 0.0:
        return _NEUTRAL_GATE
    return min(total - math.log(-math.expm1(total)), _NEUTRAL_GATE)


def _fox_block_bias(q_pos, q_fox, k_pos, k_fox):
    """A gpe.FoxBias giving c_i - c_j exactly for these query and key tokens.

    *_fox: float64 [tokens, heads, 2] = (gate logit x, global prefix c) per token."""
    from gpe.bias import FoxBias
    pos = torch.cat([q_pos, k_pos])
    fox = torch.cat([q_fox, k_fox])
    order = torch.argsort(pos, stable=True)
    pos, fox = pos[order], fox[order]
    keep = torch.ones(pos.numel(), dtype=torch.bool)
    keep[1:] = pos[1:] != pos[:-1]  # the same token seen as query and key
    pos, fox = pos[keep].numpy(), fox[keep].numpy()
    lo, hi = int(pos[0]), int(pos[-1])
    heads = fox.shape[1]
    logits = np.full((hi - lo + 1, heads), _NEUTRAL_GATE)
    logits[pos - lo] = fox[:, :, 0]
    gaps = np.nonzero(pos[1:] > pos[:-1] + 1)[0]
    if gaps.size:
        ls_next = -np.logaddexp(0.0, -fox[gaps + 1, :, 0])  # ln sigmoid(x_b)
        # Sum of the gates strictly between tokens a and b: c_{b-1} - c_a.
        totals = (fox[gaps + 1, :, 1] - ls_next) - fox[gaps, :, 1]
        for gi, a in enumerate(gaps):
            logits[pos[a] + 1 - lo] = [_gap_logit(float(t)) for t in totals[gi]]
    return FoxBias(logits, first_position=lo)


# ---- Configuration shared by the methods ----------------------------------------------


class _Config:
    def __init__(self, g, causal, scale, rope_dim, rope_base, rope_pairing, alibi, bias,
                 encoding, threads):
        import gpe.torch as gt
        self.g = g
        self.causal = bool(causal)
        self.scale = 0.0 if scale is None else float(scale)
        self.rope_dim = int(rope_dim)
        self.rope_base = float(rope_base)
        self.rope_pairing = rope_pairing
        self.alibi = alibi or ""
        self.bias = bias
        self.encoding = encoding
        self.threads = int(threads)
        self.gt = gt
        # Learnable tensors (bias_a, grape_a, grape_b, grape_omega), detached: the values
        # the library's handles are rebuilt from at every block.
        self.params = (None,) * 4

    def param_args(self, bias_a=None):
        """forward_impl / backward_impl's trailing tensors (structured_key, bias_a, bias_b,
        grape_a, grape_b, grape_omega)."""
        pa, ga, gb, gw = self.params
        return (0, pa if bias_a is None else bias_a, None, ga, gb, gw)

    def op_args(self, q_pos, k_pos, batch, bias=None):
        """The trailing arguments of gpe::attention_forward / _backward for one block."""
        gt = self.gt
        bias = self.bias if bias is None else bias
        return (q_pos.repeat(batch), k_pos.repeat(batch), None, None, self.causal, self.scale,
                self.rope_dim, self.rope_base, self.rope_pairing,
                self.alibi if bias is None else "", gt._register(self.encoding),
                gt._register(bias), self.threads)

    def masked(self, q_pos, k_pos):
        """True when no (query, key) pair of the block is allowed (or the block is empty)."""
        if q_pos.numel() == 0 or k_pos.numel() == 0:
            return True
        return self.causal and int(k_pos.min()) > int(q_pos.max())


def _merge(o_a, lse_a, o_b, lse_b):
    """Exact merge of two partial attentions over disjoint keys (lse [b, s, h])."""
    lse = torch.logaddexp(lse_a, lse_b)
    ref = torch.where(torch.isinf(lse), torch.zeros_like(lse), lse)  # -inf only if both are
    return (o_a * torch.exp(lse_a - ref)[..., None] + o_b * torch.exp(lse_b - ref)[..., None],
            lse)


# ---- Ring -----------------------------------------------------------------------------


class _Ring:
    """Point-to-point exchange with the ring neighbours; zero-size blocks are not sent."""

    def __init__(self, g):
        self.g = g
        self.next = g.global_rank(g.rank + 1)
        self.prev = g.global_rank(g.rank - 1)

    def exchange(self, tensors, send, recv_like):
        """Starts sending `tensors` (if send) to the next rank and receiving tensors shaped
        like recv_like (None: nothing arrives) from the previous one; returns (requests,
        received buffers)."""
        reqs, bufs = [], []
        if send:
            for t in tensors:
                reqs.append(dist.isend(t.contiguous(), self.next, group=self.g.group))
        if recv_like is not None:
            for shape, dtype in recv_like:
                b = torch.empty(shape, dtype=dtype)
                reqs.append(dist.irecv(b, self.prev, group=self.g.group))
                bufs.append(b)
        return reqs, bufs


def _kv_message(k, v, pos, fox):
    msg = [torch.stack([k, v]), pos]
    if fox is not None:
        msg.append(fox)
    return msg


def _kv_like(k, n, fox):
    like = [((2, k.shape[0], n) + tuple(k.shape[2:]), k.dtype), ((n,), torch.int64)]
    if fox is not None:
        like.append(((n,) + tuple(fox.shape[1:]), torch.float64))
    return like


def _block_bias(cfg, q_pos, q_fox, k_pos, k_fox):
    return None if q_fox is None else _fox_block_bias(q_pos, q_fox, k_pos, k_fox)


# ---- float64 ring backward: one phantom key for the rest of the ring ------------------

# A score whose exponential is exactly 0 against any finite lse (a phantom that stands
# for no keys): finite, so 0 * it stays 0 in the kernels' dot products.
_NO_MASS = -1e30


def _encode_rows(enc, x, pos, transpose=False):
    """T(p) x (or T(p)^T x) for a gpe.GrapeM / gpe.AlgebraicSequence on x [b, s, h, d]
    (every head of token t at pos[t]): the float64 ring backward applies the encoding
    outside the kernel, which then sees head_dim + 2 features."""
    b, s, h, d = x.shape
    p = pos[None, :, None].expand(b, s, h).reshape(-1).numpy()
    rows = x.detach().reshape(-1, d).contiguous().numpy()
    out = enc.backward(p, rows, rows)[0] if transpose else enc.apply(p, rows)
    return torch.from_numpy(np.ascontiguousarray(out)).view(b, s, h, d)


def _grape_vjp(cfg, x, pos, dx_enc):
    """dL/d(a, b, omega) of T(p) x given dL/d(T(p) x) (GRAPE-M applied outside the float64
    ring's kernel): the VJP of gpe.torch.grape_m, differentiable in its generators."""
    _, ga, gb, gw = cfg.params
    b, s, h, d = x.shape
    p = pos[None, :, None].expand(b, s, h).reshape(-1)
    with torch.enable_grad():
        leaves = [t.detach().to(torch.float64).requires_grad_() for t in (ga, gb, gw)]
        y = cfg.gt.grape_m(x.detach().reshape(-1, d), p, *leaves)
        return torch.autograd.grad(y, leaves, dx_enc.reshape(-1, d).to(y.dtype))


def _ring_block_grads_f64(cfg, q, kb, vb, pos, pb, o, lse, d_o, bias, bias_a=None,
                          want=(False,) * 4):
    """This block's exact share of dq, dk, dv in float64 (Liu et al.'s ring backward), and
    of the learnable tensors flagged in `want` (bias_a, grape a, b, omega; None where not
    wanted).

    The share is P_ij (dO_i . v_j - D_i) with P normalised by the GLOBAL lse and D_i =
    dO_i . o_i from the GLOBAL o (flash-attention's backward), but the float64 reference
    recomputes o and lse from the keys it is given. So it is given this block's keys plus
    one phantom key that carries the mass of every other block: with the block's own
    lse_b (a forward call) and alpha_i = exp(lse_b,i - lse_i), the phantom's score is
    ln(1 - alpha_i) + lse_i (the other blocks' log-sum-exp), so the recomputed lse is the
    global one and P over the block's keys is the global P. Two features are appended:
    feature A carries the phantom's score (q_A = (score - bias at the phantom) / scale,
    k_A = 1 on the phantom, 0 on real keys); feature B carries its value (v_B = 1 on the
    phantom), and dO_B = dO . o_rest = (D - alpha dO . o_b) / (1 - alpha), so the
    recomputed D equals the global D. Real keys have A = B = 0 and the phantom has no
    real features, so dq, dk, dv over the real features are exactly the block's share.
    RoPE (on the first rope_dim features) stays in the kernel; GRAPE-M / algebraic
    encodings act on all head_dim features and are applied outside (T q, T k in; T^T dq,
    T^T dk out; learnable GRAPE-M's generator gradients by the VJP of gpe.torch.grape_m).
    A learnable bias's gradient from the kernel also holds the phantom column's term
    sum_i dS_i* db(i, p*)/dtheta with dS_i* = P_i* (dO_B,i - D_i) (flash-attention's dS),
    P_i* = 1 - alpha_i: it is accumulated by the bias object itself and subtracted."""
    from gpe.bias import Alibi, FoxBias
    gt = cfg.gt
    batch, s_q, heads, d = q.shape
    n, heads_kv = kb.shape[1], kb.shape[2]
    scale = cfg.scale or 1.0 / math.sqrt(d)
    enc = cfg.encoding
    q0, k0 = q, kb
    if isinstance(enc, gt.GrapeMEncoding):
        enc = enc.build(*cfg.params[1:])
    if enc is not None:
        q, kb = _encode_rows(enc, q, pos), _encode_rows(enc, kb, pb)
    if bias is None and cfg.alibi:
        bias = Alibi(heads, symmetric=cfg.alibi == "symmetric")
    elif bias is None:
        bias = cfg.bias
    learnable = isinstance(bias, gt._LearnableBias)
    bias_obj = bias.build(bias_a, None, heads, d) if learnable else bias
    p_star = min(int(pos.min()), int(pb.min()))  # allowed for every query under causal
    pk = torch.cat([torch.tensor([p_star]), pb])

    def args(k_pos):
        return (pos.repeat(batch), k_pos.repeat(batch), None, None, cfg.causal, scale,
                cfg.rope_dim, cfg.rope_base, cfg.rope_pairing, "", 0, gt._register(bias),
                cfg.threads, 0, bias_a if learnable else None)

    ob, lb = gt.forward_impl(q, kb, vb, *args(pb))
    lb = lb.view(batch, s_q, heads)
    empty = torch.isinf(lse) | torch.isinf(lb)     # no global mass, or none in this block
    diff = torch.where(empty, torch.zeros_like(lb), lb - lse)
    alpha = torch.where(empty, torch.zeros_like(lb), torch.exp(diff))
    rest_share = torch.where(empty, torch.ones_like(lb), -torch.expm1(diff))  # 1 - alpha
    score = torch.where(rest_share > 0, lse + torch.log(rest_share),
                        torch.full_like(lse, _NO_MASS))
    score = torch.where(torch.isinf(lse), torch.full_like(lse, _NO_MASS), score)
    no_mass = score == _NO_MASS
    if bias_obj is not None:
        tile = np.stack([bias_obj.fill_tile(h, pos.numpy(), np.array([p_star]))[:, 0]
                         for h in range(heads)], -1)          # [s_q, heads]
        score = score - torch.from_numpy(tile)[None]
    dsum = (d_o * o).sum(-1)                                  # global D
    rest_dot = torch.where(rest_share > 0,
                           (dsum - alpha * (d_o * ob).sum(-1)) / rest_share,
                           torch.zeros_like(dsum))            # dO . o_rest
    zq = q.new_zeros(batch, s_q, heads, 1)
    q_aug = torch.cat([q, (score / scale)[..., None], zq], -1)
    d_o_aug = torch.cat([d_o, zq, rest_dot[..., None]], -1)
    zk = kb.new_zeros(batch, n, heads_kv, 2)
    phantom_k = kb.new_zeros(batch, 1, heads_kv, d + 2)
    phantom_v = phantom_k.clone()
    phantom_k[..., d] = 1.0
    phantom_v[..., d + 1] = 1.0
    k_aug = torch.cat([phantom_k, torch.cat([kb, zk], -1)], 1)
    v_aug = torch.cat([phantom_v, torch.cat([vb, zk], -1)], 1)
    want_bias = bool(want[0]) and learnable
    out = gt.backward_impl(q_aug, k_aug, v_aug, None, None, d_o_aug, *args(pk),
                           param_grads=(want_bias,) + (False,) * 6)
    dq, dk, dv = out[0][..., :d], out[1][:, 1:, :, :d], out[2][:, 1:, :, :d]
    g_bias = None
    if want_bias:
        # The phantom column's share (computed as the kernel does), summed over the batch.
        ds_star = torch.where(no_mass, torch.zeros_like(rest_share),
                              rest_share * (rest_dot - dsum)).sum(0)      # [s_q, heads]
        fox_like = isinstance(bias_obj, FoxBias)  # a gated GRAPE-A is refused upstream
        corr = None
        for h in range(heads):
            corr = bias_obj.accumulate_gradient(h, pos.numpy(), np.array([p_star]),
                                                ds_star[:, h:h + 1].numpy().copy(), corr)
        if fox_like:  # dL/dc -> dL/dx (Lin et al.: c_t = sum_{l <= t} ln sigmoid(x_l))
            corr = bias_obj.logit_gradient(corr)
        g_bias = out[3] - torch.from_numpy(np.asarray(corr)).view(out[3].shape)
    g_grape = (None, None, None)
    if enc is not None:
        dq_enc, dk_enc = dq, dk
        dq, dk = _encode_rows(enc, dq, pos, True), _encode_rows(enc, dk, pb, True)
        if any(want[1:]):
            gq = _grape_vjp(cfg, q0, pos, dq_enc)
            gk = _grape_vjp(cfg, k0, pb, dk_enc)
            g_grape = tuple(a + b if w else None for a, b, w in zip(gq, gk, want[1:]))
    return (dq, dk, dv, g_bias) + g_grape


def _dense_fox_logits(g, pos, x, sizes):
    """Every rank's gate logits in one table over the global positions [lo, hi] (float64
    [hi - lo + 1, heads], lo): the span FoX biases of the ring's backward."""
    pf = _all_gather_var(g, pos, sizes)
    xf = _all_gather_var(g, x, sizes)
    if pf.numel() == 0:
        return torch.zeros(0, x.shape[1], dtype=torch.float64), 0
    lo = int(pf.min())
    table = torch.zeros(int(pf.max()) - lo + 1, x.shape[1], dtype=torch.float64)
    table[pf - lo] = xf
    return table, lo


class _RingAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, pos, fox, fox_logits, cfg, bias_a, grape_a, grape_b,
                grape_omega):
        g, ring = cfg.g, _Ring(cfg.g)
        gt = cfg.gt
        batch, s_q, heads = q.shape[0], q.shape[1], q.shape[2]
        sizes = _all_gather_sizes(g, k.shape[1])
        acc = torch.float64 if q.dtype == torch.float64 else torch.float32
        o = torch.zeros(q.shape, dtype=acc)
        lse = torch.full((batch, s_q, heads), -math.inf, dtype=acc)
        cur = (k, v, pos, fox)
        for step in range(g.size):
            src = (g.rank - step) % g.size
            last = step + 1 == g.size
            nxt_n = sizes[(g.rank - step - 1) % g.size]
            reqs, bufs = ([], None) if last else ring.exchange(
                _kv_message(*cur), sizes[src] > 0,
                _kv_like(k, nxt_n, fox) if nxt_n > 0 else None)
            kb, vb, pb, fb = cur
            if not cfg.masked(pos, pb):
                bias = _block_bias(cfg, pos, fox, pb, fb)
                ob, lb = gt.forward_impl(q, kb, vb, *cfg.op_args(pos, pb, batch, bias),
                                         *cfg.param_args())
                o, lse = _merge(o, lse, ob.to(acc), lb.view(batch, s_q, heads).to(acc))
            for r in reqs:
                r.wait()
            if not last:
                if nxt_n > 0:
                    kv = bufs[0]
                    cur = (kv[0], kv[1], bufs[1], bufs[2] if fox is not None else None)
                else:
                    cur = (k.new_empty((batch, 0) + tuple(k.shape[2:])),
                           v.new_empty((batch, 0) + tuple(v.shape[2:])),
                           torch.empty(0, dtype=torch.int64),
                           None if fox is None else fox.new_empty((0,) + tuple(fox.shape[1:])))
        o = o.to(q.dtype)
        lse_out = lse.to(torch.float64 if q.dtype == torch.float64 else torch.float32)
        ctx.save_for_backward(q, k, v, pos, o, lse_out)
        ctx.fox, ctx.cfg, ctx.sizes = fox, cfg, sizes
        ctx.param_like = (fox_logits, bias_a, grape_a, grape_b, grape_omega)
        ctx.mark_non_differentiable(lse_out)
        return o, lse_out

    @staticmethod
    def backward(ctx, d_o, d_lse):
        q, k, v, pos, o, lse = ctx.saved_tensors
        fox, cfg, sizes = ctx.fox, ctx.cfg, ctx.sizes
        f64 = q.dtype == torch.float64
        g, ring, gt = cfg.g, _Ring(cfg.g), cfg.gt
        batch, s_q = q.shape[0], q.shape[1]
        # needs_input_grad: (q, k, v, pos, fox, fox_logits, cfg, bias_a, a, b, omega); the
        # same on every rank (the parameters' all_reduce below is a collective).
        want_fox = bool(ctx.needs_input_grad[5])
        want = (bool(ctx.needs_input_grad[7]) or want_fox,) + tuple(
            bool(x) for x in ctx.needs_input_grad[8:11])
        d_o = d_o.contiguous()
        lse_flat = lse.reshape(batch * s_q, lse.shape[-1]).contiguous()
        acc_dtype = torch.float64 if f64 else torch.float32
        dq = torch.zeros(q.shape, dtype=acc_dtype)
        pgrads = [None] * 4  # bias_a (or the dense FoX logit table), grape a, b, omega
        if want_fox:
            # FoX (Lin et al., eq. for D_ij = sum_{l=j+1..i} ln f_l, f_l = sigmoid(x_l)):
            # b_ij = c_i - c_j, c_t = sum_{l <= t} ln sigmoid(x_l), so dL/dc_t = sum_j dS_tj
            # - sum_i dS_it, and since the forward's c is an exclusive prefix scan across
            # ranks plus a local one, its transpose is a suffix sum across ranks:
            # dL/dx_l = sigmoid(-x_l) sum_{t >= l} dL/dc_t, every t of the whole sequence.
            # Each block's kernel takes its FoX bias over the block's span of positions
            # with every token's own logit (the dense table of all ranks' logits) and
            # returns sigmoid(-x_l) sum_{t >= l, t in the block} dL/dc_t for each l of the
            # span, i.e. the suffix sum restricted to the block's pairs (j < l <= i);
            # the suffix sum over the whole sequence is the sum of these over blocks
            # (linear in dS), taken over ranks by one all_reduce of the table.
            table, lo = _dense_fox_logits(g, pos, fox[:, :, 0], sizes)
            pgrads[0] = torch.zeros_like(table)
        cur = (k, v, pos, fox)
        acc, acc_bufs, acc_reqs = None, None, []
        for step in range(g.size):
            src = (g.rank - step) % g.size
            last = step + 1 == g.size
            nxt_n = sizes[(g.rank - step - 1) % g.size]
            reqs, bufs = ([], None) if last else ring.exchange(
                _kv_message(*cur), sizes[src] > 0,
                _kv_like(k, nxt_n, fox) if nxt_n > 0 else None)
            kb, vb, pb, fb = cur
            grad = torch.zeros((2,) + tuple(kb.shape), dtype=acc_dtype)
            if not cfg.masked(pos, pb):
                bias_a, span = None, None
                if want_fox:
                    b_lo = min(int(pos.min()), int(pb.min()))
                    b_hi = max(int(pos.max()), int(pb.max()))
                    span = slice(b_lo - lo, b_hi - lo + 1)
                    bias_a = table[span]
                    bias = gt.FoxBias(bias_a, first_position=b_lo)
                else:
                    bias = _block_bias(cfg, pos, fox, pb, fb)
                if f64:
                    out = _ring_block_grads_f64(cfg, q, kb, vb, pos, pb, o, lse, d_o, bias,
                                                bias_a if want_fox else cfg.params[0], want)
                else:
                    out = gt.backward_impl(q, kb, vb, o, lse_flat, d_o,
                                           *cfg.op_args(pos, pb, batch, bias),
                                           *cfg.param_args(bias_a), None, None,
                                           param_grads=(want[0], False) + want[1:]
                                           + (False, False))
                    if any(want):
                        out = out[:3] + (out[3],) + tuple(out[5:8])
                dqb, dkb, dvb = out[:3]
                dq += dqb
                grad[0] += dkb
                grad[1] += dvb
                for i, pg in enumerate(out[3:7]):
                    if pg is None or not want[i]:
                        continue
                    if i == 0 and want_fox:
                        pgrads[0][span] += pg
                    else:
                        pgrads[i] = pg if pgrads[i] is None else pgrads[i] + pg
            # The accumulator of this block arrived from the previous rank (step > 0).
            for r in acc_reqs:
                r.wait()
            acc = grad if step == 0 else grad + acc_bufs[0]
            for r in reqs:
                r.wait()
            if g.size == 1:
                break
            # Pass dK/dV on with the block: after world_size hops it is home.
            recv_n = nxt_n  # the block the previous rank just finished
            acc_reqs, acc_bufs = ring.exchange(
                [acc], sizes[src] > 0,
                [((2, batch, recv_n) + tuple(k.shape[2:]), acc_dtype)] if recv_n > 0
                else None)
            if not recv_n:
                acc_bufs = [torch.zeros((2, batch, 0) + tuple(k.shape[2:]), dtype=acc_dtype)]
            if not last:
                if nxt_n > 0:
                    kv = bufs[0]
                    cur = (kv[0], kv[1], bufs[1], bufs[2] if fox is not None else None)
                else:
                    cur = (k.new_empty((batch, 0) + tuple(k.shape[2:])),
                           v.new_empty((batch, 0) + tuple(v.shape[2:])),
                           torch.empty(0, dtype=torch.int64),
                           None if fox is None else fox.new_empty((0,) + tuple(fox.shape[1:])))
        if g.size > 1:
            for r in acc_reqs:
                r.wait()
            acc = acc_bufs[0]
        # Each rank holds its blocks' share of the parameter gradients (global lse and
        # positions): their sum over ranks is the unsharded gradient.
        fox_logits, bias_a, grape_a, grape_b, grape_omega = ctx.param_like
        targets = (fox_logits if want_fox else bias_a, grape_a, grape_b, grape_omega)
        totals = [None] * 4
        for i in range(4):
            if not want[i]:
                continue
            shape = table.shape if i == 0 and want_fox else targets[i].shape
            total = (pgrads[i] if pgrads[i] is not None
                     else torch.zeros(shape, dtype=torch.float64)).to(torch.float64)
            total = total.contiguous()
            dist.all_reduce(total, group=g.group)
            totals[i] = total
        d_fox = d_bias = None
        if want_fox:
            d_fox = totals[0][pos - lo].to(fox_logits.dtype)
        elif want[0]:
            d_bias = totals[0].to(bias_a.dtype)
        d_grape = tuple(None if t is None else t.to(p.dtype)
                        for t, p in zip(totals[1:], targets[1:]))
        return ((dq.to(q.dtype), acc[0].to(k.dtype), acc[1].to(v.dtype), None, None, d_fox,
                 None, d_bias) + d_grape)


# ---- All-gather KV --------------------------------------------------------------------


def _reduce_scatter_seq(g, grad, sizes, dim):
    """Transpose of _all_gather_var: the gradient summed over ranks, this rank's slice."""
    m = max(sizes)
    if m == 0:
        return grad
    padded = []
    for p in grad.split(sizes, dim=dim):
        shape = list(p.shape)
        shape[dim] = m - p.shape[dim]
        padded.append(torch.cat([p, p.new_zeros(shape)], dim))
    stacked = torch.cat(padded, 0).contiguous()  # rank r's slice: rows r*n0 .. (r+1)*n0
    out = torch.empty_like(padded[0])
    dist.reduce_scatter_tensor(out, stacked, group=g.group)
    return out.narrow(dim, 0, sizes[g.rank])


class _Collect(torch.autograd.Function):
    """The collectives of one call in one autograd node, so every rank runs them in the
    same order in backward: tensors[:len(dims)] are all-gathered along their dims
    ([..., s_r, ...] -> [..., sum_r s_r, ...] in rank order; backward: a reduce-scatter
    gives each rank its slice of the gradient summed over ranks), the rest (learnable
    parameters, replicated) pass unchanged and their gradients are summed over ranks by
    an all_reduce (each rank's share comes from its own queries and the global lse)."""

    @staticmethod
    def forward(ctx, g, sizes, dims, *tensors):
        ctx.g, ctx.sizes, ctx.dims = g, sizes, dims
        gathered = [_all_gather_var(g, x, sizes, dim=d) for x, d in zip(tensors, dims)]
        return tuple(gathered) + tuple(t.clone() for t in tensors[len(dims):])

    @staticmethod
    def backward(ctx, *grads):
        g, sizes, dims = ctx.g, ctx.sizes, ctx.dims
        out = [_reduce_scatter_seq(g, gr.contiguous(), sizes, d)
               for gr, d in zip(grads, dims)]
        for gr in grads[len(dims):]:
            total = gr.to(torch.float64).contiguous()
            dist.all_reduce(total, group=g.group)
            out.append(total.to(gr.dtype))
        return (None, None, None) + tuple(out)


def _learnable_tensors(cfg):
    """(bias tensor or None, GRAPE-M (a, b, omega) or Nones) of cfg's learnable modules."""
    gt = cfg.gt
    bias_a = cfg.bias.tensors()[0] if isinstance(cfg.bias, gt._LearnableBias) else None
    grape = (cfg.encoding.tensors() if isinstance(cfg.encoding, gt.GrapeMEncoding)
             else (None, None, None))
    return (bias_a,) + tuple(grape)


def _rebuilt(cfg, bias_a, grape, head_slice=None):
    """cfg's learnable bias and encoding over the given tensors (the outputs of _Collect:
    gradients flow back through its all_reduce); per-head tensors cut to head_slice."""
    gt = cfg.gt
    bias, enc = cfg.bias, cfg.encoding
    if isinstance(bias, gt._LearnableBias):
        hs = slice(None) if head_slice is None else head_slice
        if isinstance(bias, gt.AlibiBias):
            bias = gt.AlibiBias(bias_a[hs], symmetric=bias.symmetric)
        elif isinstance(bias, gt.T5Bias):
            bias = gt.T5Bias(bias_a[:, hs], max_distance=bias.max_distance,
                             bidirectional=bias.bidirectional)
        else:  # GrapeABias with slopes (the gated form is refused by attention())
            bias = gt.GrapeABias(slopes=bias_a[hs], path=bias.path)
    if isinstance(enc, gt.GrapeMEncoding):
        enc = gt.GrapeMEncoding(*grape)
    return bias, enc


def _check_tiled(sorted_pos):
    if sorted_pos.numel() > 1 and bool((sorted_pos[1:] != sorted_pos[:-1] + 1).any()):
        raise ValueError("fox under context parallelism needs the shards to tile one "
                         "contiguous range of positions (no gaps, no overlaps)")


def _all_gather_attention(cfg, q, k, v, pos, fox_logits):
    g, gt = cfg.g, cfg.gt
    batch = q.shape[0]
    sizes = _all_gather_sizes(g, k.shape[1])
    params = _learnable_tensors(cfg)
    present = [t for t in params if t is not None]
    gathered = [torch.stack([k, v])]
    dims = [2]
    if fox_logits is not None:  # FoX: every rank's gate logits, differentiable
        gathered.append(fox_logits.to(torch.float64))
        dims.append(0)
    outs = _Collect.apply(g, sizes, tuple(dims), *gathered, *present)
    kv, xf = outs[0], (outs[1] if fox_logits is not None else None)
    it = iter(outs[len(dims):])
    bias_a, *grape = [None if t is None else next(it) for t in params]
    bias, enc = _rebuilt(cfg, bias_a, grape)
    kf, vf = kv[0], kv[1]
    pf = _all_gather_var(g, pos, sizes)
    lse_dtype = torch.float64 if q.dtype == torch.float64 else torch.float32
    if q.shape[1] == 0 or pf.numel() == 0:
        # No rows here: o = 0, with every collected tensor kept in the graph (the node's
        # backward, a collective, must run on every rank).
        o = q * 0.0 + sum(t.sum() for t in outs).to(q.dtype) * 0.0
        return o, torch.full(q.shape[:3], -math.inf, dtype=lse_dtype)
    order = torch.argsort(pf)  # keys in position order (tiles skip masked ranges)
    kf, vf, pf = kf.index_select(1, order), vf.index_select(1, order), pf[order]
    if xf is not None:
        # With every key here the FoX bias is the whole sequence's: c_t from the logits
        # of every token (Lin et al.), its gradient reaching each rank's logits through
        # _Collect's reduce-scatter.
        _check_tiled(pf)
        bias = gt.FoxBias(xf.index_select(0, order), first_position=int(pf[0]))
    o, lse = gt.attention(q, kf, vf, causal=cfg.causal, scale=cfg.scale or None,
                          rope_dim=cfg.rope_dim, rope_base=cfg.rope_base,
                          rope_pairing=cfg.rope_pairing,
                          alibi=(cfg.alibi or None) if bias is None else None,
                          bias=bias, encoding=enc,
                          q_positions=pos.repeat(batch), k_positions=pf.repeat(batch),
                          threads=cfg.threads, return_lse=True)
    return o, lse.view(q.shape[:3])


# ---- Ulysses (all-to-all between sequence and head shards) ----------------------------


def _seq_to_heads(g, x, sizes):
    """[b, s_r, h, d] -> [b, sum s, h / W, d]: rank j receives head group j of every rank."""
    b, s, h, d = x.shape
    hw = h // g.size
    send = x.reshape(b, s, g.size, hw, d).permute(2, 0, 1, 3, 4).contiguous().view(-1)
    recv = x.new_empty(sum(b * n * hw * d for n in sizes))
    dist.all_to_all_single(recv, send, [b * n * hw * d for n in sizes],
                           [b * s * hw * d] * g.size, group=g.group)
    parts = recv.split([b * n * hw * d for n in sizes])
    return torch.cat([p.view(b, n, hw, d) for p, n in zip(parts, sizes)], 1)


def _heads_to_seq(g, x, sizes):
    """Inverse of _seq_to_heads: [b, sum s, h / W, d] -> [b, s_r, h, d]."""
    b, _, hw, d = x.shape
    s = sizes[g.rank]
    send = torch.cat([p.reshape(-1) for p in x.split(sizes, 1)]).contiguous()
    recv = x.new_empty(g.size * b * s * hw * d)
    dist.all_to_all_single(recv, send, [b * s * hw * d] * g.size,
                           [b * n * hw * d for n in sizes], group=g.group)
    return recv.view(g.size, b, s, hw, d).permute(1, 2, 0, 3, 4).reshape(b, s, g.size * hw, d)


class _SeqToHeads(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, g, sizes):
        ctx.g, ctx.sizes = g, sizes
        return _seq_to_heads(g, x, sizes)

    @staticmethod
    def backward(ctx, grad):
        return _heads_to_seq(ctx.g, grad.contiguous(), ctx.sizes), None, None


class _HeadsToSeq(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, g, sizes):
        ctx.g, ctx.sizes = g, sizes
        return _heads_to_seq(g, x, sizes)

    @staticmethod
    def backward(ctx, grad):
        return _seq_to_heads(ctx.g, grad.contiguous(), ctx.sizes), None, None


def _ulysses_attention(cfg, q, k, v, pos, fox_logits):
    from gpe.bias import Alibi, T5Bias
    g, gt = cfg.g, cfg.gt
    batch, heads_q, heads_kv = q.shape[0], q.shape[2], k.shape[2]
    if isinstance(cfg.bias, T5Bias):
        raise ValueError("method='ulysses' cannot re-slice a gpe.T5Bias table per head shard; "
                         "use gpe.torch.T5Bias (a tensor table) or method='ring' or "
                         "'all_gather'")
    if heads_q % g.size or heads_kv % g.size:
        raise ValueError("method='ulysses' shards heads: heads_q (%d) and heads_kv (%d) must "
                         "be multiples of the world size (%d)" % (heads_q, heads_kv, g.size))
    sizes = _all_gather_sizes(g, q.shape[1])
    hw = heads_q // g.size
    h0 = g.rank * hw
    # q, k and v in one all-to-all (one autograd node: the same collectives in the same
    # order on every rank in backward): head group j = (q, k, v heads of group j).
    b, s, d = q.shape[0], q.shape[1], q.shape[3]
    w, hkw = g.size, heads_kv // g.size
    qkv = torch.cat([q.reshape(b, s, w, hw, d), k.reshape(b, s, w, hkw, d),
                     v.reshape(b, s, w, hkw, d)], 3).reshape(b, s, w * (hw + 2 * hkw), d)
    qkv = _SeqToHeads.apply(qkv, g, sizes)
    qh, kh, vh = (t.contiguous() for t in qkv.split([hw, hkw, hkw], 2))
    pf = _all_gather_var(g, pos, sizes)
    # Learnable tensors: replicated, each rank's gradient covers its head shard (per-head
    # slopes or table columns h0 .. h0 + hw, the rest zero; GRAPE-M's generators, shared
    # by the heads, get this shard's heads' share): summed over ranks by _Collect.
    params = _learnable_tensors(cfg)
    present = [t for t in params if t is not None]
    outs = _Collect.apply(g, sizes, (), *present) if present else ()
    it = iter(outs)
    bias_a, *grape = [None if t is None else next(it) for t in params]
    bias, enc = _rebuilt(cfg, bias_a, grape, slice(h0, h0 + hw))
    alibi = cfg.alibi
    if alibi or isinstance(bias, Alibi):
        full = bias if bias is not None else Alibi(heads_q, symmetric=alibi == "symmetric")
        symmetric = (alibi == "symmetric") if bias is None else not full.causal
        bias, alibi = Alibi(hw, slopes=full.slopes[h0:h0 + hw], symmetric=symmetric), ""
    if fox_logits is not None:
        # Every token of this head shard is here: the prefix sums are local. The logits
        # travel by a differentiable all-to-all, so their gradient (this head shard's,
        # complete) goes back to the ranks that hold the tokens.
        x = _SeqToHeads.apply(fox_logits.to(torch.float64)[None, :, :, None], g,
                              sizes)[0, :, :, 0]
        if pf.numel():
            order = torch.argsort(pf)
            _check_tiled(pf[order])
            bias = gt.FoxBias(x.index_select(0, order), first_position=int(pf[order][0]))
        else:
            outs = tuple(outs) + (x,)
    if pf.numel() == 0:  # an empty sequence
        return q * 0.0 + (k.sum() + v.sum() + sum(t.sum() for t in outs)).to(q.dtype) * 0.0
    o = gt.attention(qh, kh, vh, causal=cfg.causal, scale=cfg.scale or None,
                     rope_dim=cfg.rope_dim, rope_base=cfg.rope_base,
                     rope_pairing=cfg.rope_pairing, alibi=alibi or None, bias=bias,
                     encoding=enc, q_positions=pf.repeat(batch),
                     k_positions=pf.repeat(batch), threads=cfg.threads)
    return _HeadsToSeq.apply(o, g, sizes)


# ---- Entry point ----------------------------------------------------------------------


def attention(q, k, v, positions, causal=False, scale=None, rope_dim=0, rope_base=10000.0,
              rope_pairing="half", alibi=None, bias=None, encoding=None, fox_gate_logits=None,
              method="ring", group=None, threads=0, return_lse=False):
    """This rank's rows of softmax(scale <T q, T k> + bias) v over the whole sharded sequence.

    q, k, v: [batch, tokens, heads, head_dim] CPU tensors holding the tokens at
    `positions` (int64 [tokens], global); options as gpe.torch.attention, plus
    fox_gate_logits ([tokens, heads_q], batch 1) and method ("ring", "all_gather",
    "ulysses"). Differentiable in q, k, v, FoX gate logits and the tensors of learnable
    gpe.torch modules (bias = AlibiBias, T5Bias, GrapeABias(slopes=); encoding =
    GrapeMEncoding), whose gradients are summed over ranks (the unsharded gradient).
    return_lse=True (ring and all_gather) also returns lse [batch, tokens, heads_q] over
    the whole sequence."""
    from gpe.bias import Alibi, AdditiveBias, FoxBias, GrapeABias, GrapeApBias, T5Bias
    from gpe.sequence import AlgebraicSequence, GrapeM
    import gpe.torch as gt
    if method not in METHODS:
        raise ValueError("method must be one of %s, got %r" % (METHODS, method))
    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError("gpe.context_parallel needs an initialised torch.distributed "
                           "process group (torch.distributed.init_process_group)")
    for name, x in (("q", q), ("k", k), ("v", v)):
        if not isinstance(x, torch.Tensor) or x.dim() != 4:
            raise ValueError("%s must be a 4-D tensor [batch, tokens, heads, head_dim]" % name)
    positions = torch.as_tensor(positions, dtype=torch.int64).flatten()
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
    g = _Group(group)
    cfg = _Config(g, causal, scale, rope_dim, rope_base, rope_pairing, alibi, bias, encoding,
                  threads)
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
    if method == "ring":
        o, lse = _RingAttention.apply(q, k, v, positions, fox, fox_logits, cfg, *learnable)
    elif method == "all_gather":
        o, lse = _all_gather_attention(cfg, q, k, v, positions, fox_logits)
    else:
        if return_lse:
            raise ValueError("return_lse is available with method='ring' or 'all_gather'")
        return _ulysses_attention(cfg, q, k, v, positions, fox_logits)
    return (o, lse) if return_lse else o
