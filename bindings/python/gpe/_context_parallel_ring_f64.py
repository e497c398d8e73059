"""The float64 ring backward of gpe.context_parallel (internal): each block's exact share of
the gradients from the float64 reference kernel, which recomputes o and lse from the keys
it is given, so it is given the block's keys plus one phantom key standing for the rest of
the ring (see _ring_block_grads_f64).
"""

import math

import numpy as np
import torch


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


def _rope_rows(rope, x, pos, role, transpose=False):
    """m R(p theta) x (or its transpose) for a gpe.Rope on x [b, s, h, d] in the query or key
    role (xPos scales them inversely): the float64 ring backward applies RoPE outside the
    kernel, whose head_dim + 2 features a Rope handle of head_dim would refuse."""
    b = x.shape[0]
    rows = np.ascontiguousarray(x.detach().numpy())
    fn = rope.backward if transpose else rope.forward
    out = fn(rows, positions=pos.repeat(b).numpy(), layout="bshd", role=role)
    return torch.from_numpy(np.ascontiguousarray(out))


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


def _phantom_groups(cfg, q_pos):
    """The block's queries (positions ascending) cut into runs that one phantom position
    p* serves: p* must be an allowed key for every query of the run, p_i - L <= p* <=
    p_i + R (L = left, R = 0 under causal, else right; -1: unbounded), which a run with
    max - min <= L + R admits at p* = max(min, max - L). Yields (slice, p*), p* None
    (the default) without a window."""
    n = q_pos.numel()
    if cfg.window is None:
        yield slice(0, n), None
        return
    left, right = cfg.window
    inf = float("inf")
    lw = inf if left < 0 else left
    rw = 0 if cfg.causal else (inf if right < 0 else right)
    p = q_pos.tolist()
    start = 0
    for i in range(1, n + 1):
        if i == n or p[i] - p[start] > lw + rw:
            lo, hi = p[start], p[i - 1]
            yield slice(start, i), (lo if lw == inf else max(lo, hi - int(lw)))
            start = i


def _ring_block_grads_split(cfg, q, kb, vb, pos, pb, o, lse, d_o, bias, bias_a=None,
                            want=(False,) * 4):
    """_ring_block_grads_f64 per packed sequence and per run of queries one phantom serves
    under a window (_phantom_groups): the phantom key must be allowed for every query it
    stands for, and keys see queries of their own sequence only. Same results as
    _ring_block_grads_f64 (the shares add up: dq row by row, dk, dv and the parameters'
    gradients over the runs)."""
    if cfg.cu_seqlens is None and cfg.window is None:
        return _ring_block_grads_f64(cfg, q, kb, vb, pos, pb, o, lse, d_o, bias, bias_a, want)
    if cfg.cu_seqlens is None:
        qs, ql = torch.zeros_like(pos), pos
        ks, kl = torch.zeros_like(pb), pb
    else:
        (qs, ql), (ks, kl) = cfg.seq_local(pos), cfg.seq_local(pb)
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(kb), torch.zeros_like(vb)
    pgrads = [None] * 4
    for seq in sorted(set(qs.tolist()) & set(ks.tolist())):
        iq = torch.nonzero(qs == seq).flatten()
        ik = torch.nonzero(ks == seq).flatten()
        iq = iq[torch.argsort(ql[iq])]
        for part, p_star in _phantom_groups(cfg, ql[iq]):
            qi = iq[part]
            out = _ring_block_grads_f64(cfg, q[:, qi], kb[:, ik], vb[:, ik], ql[qi], kl[ik],
                                        o[:, qi], lse[:, qi], d_o[:, qi], bias, bias_a, want,
                                        p_star)
            dq.index_add_(1, qi, out[0])
            dk.index_add_(1, ik, out[1])
            dv.index_add_(1, ik, out[2])
            for i, g in enumerate(out[3:7]):
                if g is not None:
                    pgrads[i] = g if pgrads[i] is None else pgrads[i] + g
    return (dq, dk, dv) + tuple(pgrads)


def _ring_block_grads_f64(cfg, q, kb, vb, pos, pb, o, lse, d_o, bias, bias_a=None,
                          want=(False,) * 4, p_star=None):
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
    RoPE by rope_dim (on the first rope_dim features) stays in the kernel; GRAPE-M /
    algebraic encodings act on all head_dim features and a gpe.Rope handle has the call's
    head_dim, so they are applied outside (T q, T k in; T^T dq, T^T dk out; learnable
    GRAPE-M's generator gradients by the VJP of gpe.torch.grape_m). The window is the
    kernel's; p_star (the phantom's position) must be an allowed key for every query
    (_phantom_groups), by default min(pos, pb), which the causal rule allows.
    A learnable bias's gradient from the kernel also holds the phantom column's term
    sum_i dS_i* db(i, p*)/dtheta with dS_i* = P_i* (dO_B,i - D_i) (flash-attention's dS),
    P_i* = 1 - alpha_i: it is accumulated by the bias object itself and subtracted."""
    from gpe.bias import Alibi, FoxBias
    gt = cfg.gt
    batch, s_q, heads, d = q.shape
    n, heads_kv, dv = kb.shape[1], kb.shape[2], vb.shape[3]
    scale = cfg.scale or 1.0 / math.sqrt(d)
    enc = cfg.encoding
    q0, k0 = q, kb
    if isinstance(enc, gt.GrapeMEncoding):
        enc = enc.build(*cfg.params[1:])
    if enc is not None:
        q, kb = _encode_rows(enc, q, pos), _encode_rows(enc, kb, pb)
    if cfg.rope is not None:
        q, kb = _rope_rows(cfg.rope, q, pos, "query"), _rope_rows(cfg.rope, kb, pb, "key")
    left, right = cfg.window or (-1, -1)
    window = dict(window_left=left, window_right=right)
    if bias is None and cfg.alibi:
        bias = Alibi(heads, symmetric=cfg.alibi == "symmetric")
    elif bias is None:
        bias = cfg.bias
    learnable = isinstance(bias, gt._LearnableBias)
    bias_obj = bias.build(bias_a, None, heads, d) if learnable else bias
    if p_star is None:
        p_star = min(int(pos.min()), int(pb.min()))  # allowed for every query under causal
    pk = torch.cat([torch.tensor([p_star]), pb])

    def args(k_pos):
        return (pos.repeat(batch), k_pos.repeat(batch), None, None, cfg.causal, scale,
                cfg.rope_dim, cfg.rope_base, cfg.rope_pairing, "", 0, gt._register(bias),
                cfg.threads, 0, bias_a if learnable else None)

    ob, lb = gt.forward_impl(q, kb, vb, *args(pb), **window)
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
    # Keys and queries take head_dim + 2 features, values and dO the value head size + 2
    # (A at index head_dim of the first, B at index dv + 1 of the second).
    zq = q.new_zeros(batch, s_q, heads, 1)
    q_aug = torch.cat([q, (score / scale)[..., None], zq], -1)
    d_o_aug = torch.cat([d_o, zq, rest_dot[..., None]], -1)
    zk = kb.new_zeros(batch, n, heads_kv, 2)
    phantom_k = kb.new_zeros(batch, 1, heads_kv, d + 2)
    phantom_v = vb.new_zeros(batch, 1, heads_kv, dv + 2)
    phantom_k[..., d] = 1.0
    phantom_v[..., dv + 1] = 1.0
    k_aug = torch.cat([phantom_k, torch.cat([kb, zk], -1)], 1)
    v_aug = torch.cat([phantom_v, torch.cat([vb, zk], -1)], 1)
    want_bias = bool(want[0]) and learnable
    out = gt.backward_impl(q_aug, k_aug, v_aug, None, None, d_o_aug, *args(pk),
                           param_grads=(want_bias,) + (False,) * 6, **window)
    dq, dk, d_v = out[0][..., :d], out[1][:, 1:, :, :d], out[2][:, 1:, :, :dv]
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
    if cfg.rope is not None:
        dq, dk = _rope_rows(cfg.rope, dq, pos, "query", True), _rope_rows(cfg.rope, dk, pb,
                                                                          "key", True)
    return (dq, dk, d_v, g_bias) + g_grape
