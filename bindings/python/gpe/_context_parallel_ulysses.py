"""DeepSpeed-Ulysses (Jacobs et al.) for gpe.context_parallel, method="ulysses" (internal):
a differentiable all-to-all from sequence shards to head shards, attention over the whole
sequence on heads / world heads, and the all-to-all back.
"""

import torch
import torch.distributed as dist

from gpe._context_parallel_comm import _Collect, _all_gather_sizes, _all_gather_var
from gpe._context_parallel_config import _learnable_tensors, _rebuilt
from gpe._context_parallel_fox import _check_tiled


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


def _ulysses_attention(cfg, q, k, v, pos, fox_logits, sinks=None):
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
    # An ALiBi object is re-sliced per head shard below: it must have q's heads (checked
    # before any exchange, so every rank refuses alike; other slopes were sliced silently).
    if isinstance(cfg.bias, Alibi) and cfg.bias.num_heads != heads_q:
        raise ValueError("bias: the gpe.Alibi has %d heads, q has %d"
                         % (cfg.bias.num_heads, heads_q))
    sizes = _all_gather_sizes(g, q.shape[1])
    hw = heads_q // g.size
    h0 = g.rank * hw
    # q, k and v in one all-to-all (one autograd node: the same collectives in the same
    # order on every rank in backward): head group j = (q, k, v heads of group j).
    # Each head group's q, k and v heads side by side in one row per group (v's head size
    # may differ from q's and k's): [b, s, W, hw d + hkw d + hkw dv].
    b, s, d, dv = q.shape[0], q.shape[1], q.shape[3], v.shape[3]
    w, hkw = g.size, heads_kv // g.size
    qkv = torch.cat([q.reshape(b, s, w, hw * d), k.reshape(b, s, w, hkw * d),
                     v.reshape(b, s, w, hkw * dv)], 3)
    qkv = _SeqToHeads.apply(qkv, g, sizes)[:, :, 0]  # [b, S, row]
    qh, kh, vh = qkv.split([hw * d, hkw * d, hkw * dv], 2)
    n_all = qkv.shape[1]
    qh, kh, vh = (t.reshape(b, n_all, hh, dd).contiguous()
                  for t, hh, dd in ((qh, hw, d), (kh, hkw, d), (vh, hkw, dv)))
    pf = _all_gather_var(g, pos, sizes)
    # Learnable tensors: replicated, each rank's gradient covers its head shard (per-head
    # slopes or table columns h0 .. h0 + hw, the rest zero; GRAPE-M's generators, shared
    # by the heads, get this shard's heads' share): summed over ranks by _Collect.
    params = _learnable_tensors(cfg)
    # The sinks too: this head shard's entries get its rows' gradient, the rest zero.
    present = [t for t in params if t is not None] + ([sinks] if sinks is not None else [])
    outs = _Collect.apply(g, sizes, (), *present) if present else ()
    it = iter(outs)
    bias_a, *grape = [None if t is None else next(it) for t in params]
    sinks = next(it)[h0:h0 + hw] if sinks is not None else None
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
        return (q.new_zeros(tuple(q.shape[:3]) + (v.shape[3],)) +
                (q.sum() + k.sum() + v.sum() + sum(t.sum() for t in outs)).to(q.dtype) * 0.0)
    common = dict(causal=cfg.causal, scale=cfg.scale or None, rope_dim=cfg.rope_dim,
                  rope_base=cfg.rope_base, rope_pairing=cfg.rope_pairing,
                  alibi=alibi or None, bias=bias, encoding=enc, rope=cfg.rope,
                  window_size=cfg.window, sinks=sinks, softcap=cfg.softcap,
                  threads=cfg.threads, **cfg.arithmetic_names())
    if cfg.cu_seqlens is None:
        o = gt.attention(qh, kh, vh, q_positions=pf.repeat(batch),
                         k_positions=pf.repeat(batch), **common)
    else:
        # Packed: the whole sequence's tokens arrive in rank order; grouped by sequence
        # (packed index order) for the kernel's packed layout, and put back after.
        order = torch.argsort(pf)
        ps = pf[order]
        qh, kh, vh = (t.index_select(1, order) for t in (qh, kh, vh))
        (qs, ql) = cfg.seq_local(ps)
        cu = cfg.block_cu(qs)
        o = gt.attention(qh[0], kh[0], vh[0], q_positions=ql, k_positions=ql,
                         cu_seqlens_q=cu, cu_seqlens_k=cu, **common)
        o = o[None].index_select(1, torch.argsort(order))
    return _HeadsToSeq.apply(o, g, sizes)
