"""All-gather KV for gpe.context_parallel, method="all_gather" (internal): every rank's K/V
(and FoX gate logits) gathered by one _Collect node, then one attention call over the
whole sequence; backward reduce-scatters dK/dV back to their owners.
"""

import math

import torch

from gpe._context_parallel_comm import _Collect, _all_gather_sizes, _all_gather_var
from gpe._context_parallel_config import _learnable_tensors, _rebuilt
from gpe._context_parallel_fox import _check_tiled


def _packed_call(cfg, q, kf, vf, pos, pf):
    """gt.attention's packed-layout arguments for queries at `pos` and keys at `pf` (both
    grouped by sequence): q, k, v [tokens, heads, head_dim] and the per-sequence positions
    and cu_seqlens, which keep every key to its own sequence's queries."""
    (qs, ql), (ks, kl) = cfg.seq_local(pos), cfg.seq_local(pf)
    return (cfg.rows(q), cfg.rows(kf), cfg.rows(vf),
            dict(q_positions=ql, k_positions=kl, cu_seqlens_q=cfg.block_cu(qs),
                 cu_seqlens_k=cfg.block_cu(ks)))


def _all_gather_attention(cfg, q, k, v, pos, fox_logits, sinks=None):
    g, gt = cfg.g, cfg.gt
    batch = q.shape[0]
    sizes = _all_gather_sizes(g, k.shape[1])
    params = _learnable_tensors(cfg)
    # The sinks ride with the learnable tensors: _Collect sums their gradient over ranks.
    present = [t for t in params if t is not None] + ([sinks] if sinks is not None else [])
    # k and v in one gather, side by side on the last axis (their head sizes may differ).
    dk_size = k.shape[3]
    gathered = [torch.cat([k, v], -1)]
    dims = [1]
    if fox_logits is not None:  # FoX: every rank's gate logits, differentiable
        gathered.append(fox_logits.to(torch.float64))
        dims.append(0)
    outs = _Collect.apply(g, sizes, tuple(dims), *gathered, *present)
    kv, xf = outs[0], (outs[1] if fox_logits is not None else None)
    it = iter(outs[len(dims):])
    bias_a, *grape = [None if t is None else next(it) for t in params]
    sinks = next(it) if sinks is not None else None
    bias, enc = _rebuilt(cfg, bias_a, grape)
    kf, vf = kv[..., :dk_size], kv[..., dk_size:]
    pf = _all_gather_var(g, pos, sizes)
    lse_dtype = torch.float64 if q.dtype == torch.float64 else torch.float32
    if q.shape[1] == 0 or pf.numel() == 0:
        # No rows here: o = 0, with every collected tensor kept in the graph (the node's
        # backward, a collective, must run on every rank).
        o = (q.new_zeros(tuple(q.shape[:3]) + (v.shape[3],)) +
             (q.sum() + sum(t.sum() for t in outs)).to(q.dtype) * 0.0)
        return o, torch.full(q.shape[:3], -math.inf, dtype=lse_dtype)
    order = torch.argsort(pf)  # keys in position order (tiles skip masked ranges)
    kf, vf, pf = kf.index_select(1, order), vf.index_select(1, order), pf[order]
    if xf is not None:
        # With every key here the FoX bias is the whole sequence's: c_t from the logits
        # of every token (Lin et al.), its gradient reaching each rank's logits through
        # _Collect's reduce-scatter.
        _check_tiled(pf)
        bias = gt.FoxBias(xf.index_select(0, order), first_position=int(pf[0]))
    if cfg.cu_seqlens is None:
        qx, kx, vx = q, kf, vf
        layout = dict(q_positions=pos.repeat(batch), k_positions=pf.repeat(batch))
    else:
        qx, kx, vx, layout = _packed_call(cfg, q, kf, vf, pos, pf)
    o, lse = gt.attention(qx, kx, vx, causal=cfg.causal, scale=cfg.scale or None,
                          rope_dim=cfg.rope_dim, rope_base=cfg.rope_base,
                          rope_pairing=cfg.rope_pairing,
                          alibi=(cfg.alibi or None) if bias is None else None,
                          bias=bias, encoding=enc, rope=cfg.rope, window_size=cfg.window,
                          sinks=sinks, softcap=cfg.softcap, threads=cfg.threads,
                          return_lse=True, **layout, **cfg.arithmetic_names())
    return o.view(tuple(q.shape[:3]) + (v.shape[3],)), lse.view(q.shape[:3])
