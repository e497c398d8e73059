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
