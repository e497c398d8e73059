"""FoX (Lin et al., Forgetting Transformer) across ranks for gpe.context_parallel (internal;
fox_global_prefix is re-exported there): every local token's prefix sum of log-gates over
the whole sharded sequence, a ring block's exact FoX bias over its span, the dense table of
every rank's gate logits for the ring's backward, and the check that shards tile one range.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from gpe._context_parallel_comm import _all_gather_sizes, _all_gather_var, _Group


# ln sigmoid(1e4) = -log1p(exp(-1e4)) is exactly 0.0 in double: a neutral gate.
_NEUTRAL_GATE = 1e4


def _log_sigmoid(x):
    return torch.nn.functional.logsigmoid(x.to(torch.float64))


def fox_global_prefix(g: _Group, positions: torch.Tensor,
                      gate_logits: torch.Tensor) -> torch.Tensor:
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


def _check_tiled(sorted_pos):
    if sorted_pos.numel() > 1 and bool((sorted_pos[1:] != sorted_pos[:-1] + 1).any()):
        raise ValueError("fox under context parallelism needs the shards to tile one "
                         "contiguous range of positions (no gaps, no overlaps)")
