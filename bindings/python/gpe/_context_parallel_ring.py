"""Ring attention (Liu et al.) for gpe.context_parallel, method="ring" (internal): K/V
blocks travel around the ring by isend/irecv, overlapped with the block in flight, and
partial results merge by log-sum-exp; the backward passes dK/dV accumulators around the
ring with the blocks and sums the parameter gradients over ranks (_RingAttention).
"""

import math

import torch
import torch.distributed as dist

from gpe._context_parallel_comm import _all_gather_sizes
from gpe._context_parallel_fox import _dense_fox_logits, _fox_block_bias
from gpe._context_parallel_ring_f64 import _ring_block_grads_split


# Kernel calls made for ring blocks, for tests: a block with no allowed (query, key) pair
# (causal, window, packed sequences: _Config.masked) is skipped without one.
BLOCK_CALLS = {"forward": 0, "backward": 0}


def _merge(o_a, lse_a, o_b, lse_b):
    """Exact merge of two partial attentions over disjoint keys (lse [b, s, h])."""
    lse = torch.logaddexp(lse_a, lse_b)
    ref = torch.where(torch.isinf(lse), torch.zeros_like(lse), lse)  # -inf only if both are
    return (o_a * torch.exp(lse_a - ref)[..., None] + o_b * torch.exp(lse_b - ref)[..., None],
            lse)


class _DrainOnError:
    """Around a block's kernel call: when it raises (an input the kernel refuses, the same
    on every rank), the step's sends and receives are completed before the exception
    leaves, so the pair is not left with an unfinished send that hangs the group's next
    collective until its timeout."""

    def __init__(self, reqs):
        self.reqs = reqs

    def __enter__(self):
        return self

    def __exit__(self, kind, value, tb):
        if kind is not None:
            for r in self.reqs:
                try:
                    r.wait()
                except Exception:  # the exception in flight is the one to report
                    pass
        return False


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


def _pack(a, b):
    """a and b ([batch, n, heads, dim], dims may differ: the value head size) flattened
    into one message."""
    return torch.cat([a.reshape(-1), b.reshape(-1)])


def _unpack(buf, a_like, b_like, n):
    """_pack's inverse for blocks of n tokens shaped like a_like and b_like."""
    a_shape = (a_like.shape[0], n) + tuple(a_like.shape[2:])
    b_shape = (b_like.shape[0], n) + tuple(b_like.shape[2:])
    na = math.prod(a_shape)
    return buf[:na].view(a_shape), buf[na:].view(b_shape)


def _packed_numel(k, v, n):
    return k.shape[0] * n * (math.prod(k.shape[2:]) + math.prod(v.shape[2:]))


def _kv_message(k, v, pos, fox):
    msg = [_pack(k, v), pos]
    if fox is not None:
        msg.append(fox)
    return msg


def _kv_like(k, v, n, fox):
    like = [((_packed_numel(k, v, n),), k.dtype), ((n,), torch.int64)]
    if fox is not None:
        like.append(((n,) + tuple(fox.shape[1:]), torch.float64))
    return like


def _next_block(k, v, fox, bufs, n):
    """The block that arrived (bufs from _kv_like) as (k, v, positions, fox), or an empty
    one where the previous rank holds no tokens (n = 0)."""
    if n > 0:
        kb, vb = _unpack(bufs[0], k, v, n)
        return kb, vb, bufs[1], (bufs[2] if fox is not None else None)
    return (k.new_empty((k.shape[0], 0) + tuple(k.shape[2:])),
            v.new_empty((v.shape[0], 0) + tuple(v.shape[2:])),
            torch.empty(0, dtype=torch.int64),
            None if fox is None else fox.new_empty((0,) + tuple(fox.shape[1:])))


def _block_bias(cfg, q_pos, q_fox, k_pos, k_fox):
    return None if q_fox is None else _fox_block_bias(q_pos, q_fox, k_pos, k_fox)


def _add_sinks(cfg, o, lse):
    """The sink logit z_h enters each row's denominator once, after every block's merge:
    lse' = logaddexp(lse, z_h), o' = o exp(lse - lse') (gpt-oss's sinks: a key of value
    0); rows with no key and no sink (lse' = -inf) keep o = 0."""
    z = cfg.sinks.to(lse.dtype)
    lse_s = torch.logaddexp(lse, z.expand_as(lse))
    w = torch.where(torch.isinf(lse_s), torch.zeros_like(lse), torch.exp(lse - lse_s))
    return o * w[..., None], lse_s


def _sink_grad(cfg, o, lse, d_o):
    """dL/dz_h = -sum_i exp(z_h - lse_i) <dO_i, o_i> over this rank's rows of head h (the
    sink is a key of value 0: dS = P (0 - D), D_i = <dO_i, o_i>), float64."""
    z = cfg.sinks
    lse64 = lse.to(torch.float64)
    p_sink = torch.where(torch.isinf(lse64), torch.zeros_like(lse64), torch.exp(z - lse64))
    dsum = (d_o.to(torch.float64) * o.to(torch.float64)).sum(-1)
    return -(p_sink * dsum).sum((0, 1))


class _RingAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, pos, fox, fox_logits, cfg, bias_a, grape_a, grape_b,
                grape_omega, sinks=None):
        g, ring = cfg.g, _Ring(cfg.g)
        gt = cfg.gt
        batch, s_q, heads = q.shape[0], q.shape[1], q.shape[2]
        sizes = _all_gather_sizes(g, k.shape[1])
        acc = torch.float64 if q.dtype == torch.float64 else torch.float32
        o_shape = tuple(q.shape[:3]) + (v.shape[3],)  # the value head size last
        o = torch.zeros(o_shape, dtype=acc)
        lse = torch.full((batch, s_q, heads), -math.inf, dtype=acc)
        cur = (k, v, pos, fox)
        for step in range(g.size):
            src = (g.rank - step) % g.size
            last = step + 1 == g.size
            nxt_n = sizes[(g.rank - step - 1) % g.size]
            reqs, bufs = ([], None) if last else ring.exchange(
                _kv_message(*cur), sizes[src] > 0,
                _kv_like(k, v, nxt_n, fox) if nxt_n > 0 else None)
            kb, vb, pb, fb = cur
            if not cfg.masked(pos, pb):
                bias = _block_bias(cfg, pos, fox, pb, fb)
                BLOCK_CALLS["forward"] += 1
                with _DrainOnError(reqs):
                    ob, lb = gt.forward_impl(cfg.rows(q), cfg.rows(kb), cfg.rows(vb),
                                             *cfg.op_args(pos, pb, batch, bias),
                                             *cfg.param_args(), **cfg.extras())
                o, lse = _merge(o, lse, ob.view(o_shape).to(acc),
                                lb.view(batch, s_q, heads).to(acc))
            for r in reqs:
                r.wait()
            if not last:
                cur = _next_block(k, v, fox, bufs, nxt_n)
        if cfg.sinks is not None:
            o, lse = _add_sinks(cfg, o, lse)
        o = o.to(q.dtype)
        lse_out = lse.to(torch.float64 if q.dtype == torch.float64 else torch.float32)
        ctx.save_for_backward(q, k, v, pos, o, lse_out)
        ctx.fox, ctx.cfg, ctx.sizes = fox, cfg, sizes
        ctx.param_like = (fox_logits, bias_a, grape_a, grape_b, grape_omega, sinks)
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
        want_sinks = len(ctx.needs_input_grad) > 11 and bool(ctx.needs_input_grad[11])
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
                _kv_like(k, v, nxt_n, fox) if nxt_n > 0 else None)
            kb, vb, pb, fb = cur
            grad_k = torch.zeros(kb.shape, dtype=acc_dtype)
            grad_v = torch.zeros(vb.shape, dtype=acc_dtype)
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
                BLOCK_CALLS["backward"] += 1
                with _DrainOnError(reqs + acc_reqs):
                    if f64:
                        out = _ring_block_grads_split(cfg, q, kb, vb, pos, pb, o, lse, d_o, bias,
                                                      bias_a if want_fox else cfg.params[0], want)
                    else:
                        # The global o and lse (the sinks' mass included) give each block's
                        # exact share: P_ij = exp(s_ij - lse_i), D_i = <dO_i, o_i>.
                        out = gt.backward_impl(cfg.rows(q), cfg.rows(kb), cfg.rows(vb),
                                               cfg.rows(o), lse_flat, cfg.rows(d_o),
                                               *cfg.op_args(pos, pb, batch, bias),
                                               *cfg.param_args(bias_a), None, None,
                                               param_grads=(want[0], False) + want[1:]
                                               + (False, False), **cfg.extras())
                        out = (out[0].view(q.shape), out[1].view(kb.shape),
                               out[2].view(vb.shape)) + tuple(out[3:])
                        if any(want):
                            out = out[:3] + (out[3],) + tuple(out[5:8])
                dqb, dkb, dvb = out[:3]
                dq += dqb
                grad_k += dkb
                grad_v += dvb
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
            grad = _pack(grad_k, grad_v)  # dK and dV travel as one message
            acc = grad if step == 0 else grad + acc_bufs[0]
            for r in reqs:
                r.wait()
            if g.size == 1:
                break
            # Pass dK/dV on with the block: after world_size hops it is home.
            recv_n = nxt_n  # the block the previous rank just finished
            acc_reqs, acc_bufs = ring.exchange(
                [acc], sizes[src] > 0,
                [((_packed_numel(k, v, recv_n),), acc_dtype)] if recv_n > 0 else None)
            if not recv_n:
                acc_bufs = [torch.zeros(0, dtype=acc_dtype)]
            if not last:
                cur = _next_block(k, v, fox, bufs, nxt_n)
        if g.size > 1:
            for r in acc_reqs:
                r.wait()
            acc = acc_bufs[0]
        acc_k, acc_v = _unpack(acc, k, v, k.shape[1])
        # Each rank holds its blocks' share of the parameter gradients (global lse and
        # positions): their sum over ranks is the unsharded gradient.
        fox_logits, bias_a, grape_a, grape_b, grape_omega, sinks = ctx.param_like
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
        d_sinks = None
        if want_sinks:  # each rank's rows' share, summed over ranks (after the others)
            d_sinks = _sink_grad(cfg, o, lse, d_o).contiguous()
            dist.all_reduce(d_sinks, group=g.group)
            d_sinks = d_sinks.to(sinks.dtype)
        return ((dq.to(q.dtype), acc_k.to(k.dtype), acc_v.to(v.dtype), None, None, d_fox,
                 None, d_bias) + d_grape + (d_sinks,))
