"""The sequence encodings of gpe.sequence and gpe.bias as PyTorch operators (re-exported by
gpe.torch; needs PyTorch).

Each function is differentiable through the library's own backward pass (the ABI's
*_backward entry points, or its gradient accumulators for the additive biases):

- grape_m(x, positions, a, b, omega): G(p) x, GRAPE-M's product of rank-2 rotations
  (gpe_grape_m_apply / _backward); gradients for x, a, b, omega.
- algebraic_sequence(x, positions, skew): W^p x, W = exp(S) (Kogkalidis et al., sec. 3.1);
  gradients for x and S (entrywise dL/dS, as gpe_algebraic_sequence_backward).
- algebraic_tree(x, addresses, skews): rho(address) x, the path product of W_c =
  exp(S_c) (sec. 3.2); gradients for x and the skews.
- algebraic_grid(x, positions, skews): blockdiag(exp(p_a S_a)) x (sec. 3.3), skews
  [axes, m, m]; gradients for x and the skews.
- algebraic_periodic(x, positions, period, multipliers): plane rotations by
  2 pi k p / period (sec. 3.4.2); gradient for x (the same rotation at -p).
- sinusoidal(positions, dim, base): Vaswani et al.'s absolute encoding (no parameters).
- learned_positions(table, positions): rows of a learned table; gradient for the table.
- bias_tile(bias, q_positions, k_positions): the [heads, M, N] tile b_h(i, j) of an
  additive bias, ALiBi / T5 / FoX / GRAPE-A / GRAPE-AP, given as a learnable gpe.torch
  bias (gradients for its tensors, through gpe_bias_accumulate_gradient and FoX's logit
  gradient) or a fixed gpe.bias object.
- shaw_key_scores(q, table, q_positions, k_positions) and shaw_value_output(p, table,
  q_positions, k_positions): Shaw et al.'s relative terms (eqs. 3-4); gradients for q / p
  and the table.
- transformer_xl_score_terms(q, k, q_positions, k_positions, w_r, u, v): Dai et al.'s
  score terms (sec. 3.3); gradients for q, k, w_r, u, v.
- locality_scale(scores, q_positions, k_positions, c): scores c^|i - j| (Kogkalidis et
  al., sec. 4); gradient for scores.

x is [N, dim] (or [N, heads, dim], the positions then shared by a token's heads),
float32 or float64; parameters are float64 in the library and their gradients come back
in each tensor's dtype; positions are int64. Every function is registered with
torch.library as gpe::<name> and gpe::<name>_backward (sinusoidal: no backward) with
shape-only (fake) implementations, so torch.compile traces them; eager calls skip the
custom-op layer, as gpe.torch.attention does. grape_m and the algebraic functions are
registered as gpe::<name>_apply and gpe::<name>_apply_backward (gpe::grape_m_apply,
gpe::algebraic_sequence_apply, gpe::algebraic_tree_apply, gpe::algebraic_grid_apply,
gpe::algebraic_periodic_apply).
"""

from __future__ import annotations

from typing import Sequence, Union

import numpy as np
import numpy.typing as npt
import torch

from gpe import bias as _bias
from gpe import sequence as _seq
from gpe._torch_base import _ENCODINGS, _LearnableBias, _register

# A tensor, or anything torch.as_tensor takes.
_TensorLike = Union[torch.Tensor, npt.ArrayLike]

__all__ = ["algebraic_grid", "algebraic_periodic", "algebraic_sequence", "algebraic_tree",
           "bias_tile", "grape_m", "learned_positions", "locality_scale", "shaw_key_scores",
           "shaw_value_output", "sinusoidal", "transformer_xl_score_terms"]


def _np(t):
    return None if t is None else t.detach().contiguous().numpy()


def _f64(t):
    return t.detach().to(torch.float64).contiguous().numpy()


def _t(a):
    return torch.from_numpy(np.ascontiguousarray(a))


class _Op:
    """One encoding as gpe::<name> (forward) and gpe::<name>_backward (the gradients of the
    inputs listed in `diff`, in that order), with fake implementations and autograd."""

    def __init__(self, name, args, forward, fake, backward=None, diff=(), keys=()):
        self.forward, self.backward, self.diff = forward, backward, tuple(diff)
        self.keys = tuple(keys)  # arguments that are _register keys
        sig = ", ".join("%s %s" % (t, n) for n, t in args)
        self.op = torch.library.custom_op("gpe::" + name, forward, mutates_args=(),
                                          device_types="cpu", schema="(%s) -> Tensor" % sig)
        self.op.register_fake(fake)
        if backward is None:
            return
        self.bop = torch.library.custom_op(
            "gpe::%s_backward" % name, self._backward_in_dtypes, mutates_args=(),
            device_types="cpu", schema="(Tensor grad, %s) -> Tensor[]" % sig)
        self.bop.register_fake(
            lambda grad, *a: [torch.empty(0, dtype=torch.float64) if a[i] is None
                              else torch.empty_like(a[i]) for i in self.diff])
        self.op.register_autograd(self._grad, setup_context=self._setup)

    def _backward_in_dtypes(self, grad, *inputs):
        """The library's gradients (float64 for parameters) in their inputs' dtypes (a
        0-element float64 tensor for an absent optional input: a schema returns no None)."""
        return [g.to(inputs[i].dtype) if inputs[i] is not None else g
                for i, g in zip(self.diff, self.backward(grad, *inputs))]

    def _setup(self, ctx, inputs, output):
        ctx.inputs = inputs
        self.hold(ctx, inputs)

    def hold(self, ctx, inputs):
        """Keeps the registered objects of a call alive until its backward (their keys
        alone would dangle once a caller's temporary object is gone)."""
        ctx.objects = [_ENCODINGS.get(inputs[i]) for i in self.keys]

    def _answer(self, needs, inputs, grads):
        out = [None] * len(inputs)
        for i, g in zip(self.diff, grads):
            if needs[i]:
                out[i] = g.to(inputs[i].dtype)
        return tuple(out)

    def _grad(self, ctx, grad):
        if not any(ctx.needs_input_grad):
            return (None,) * len(ctx.inputs)
        return self._answer(ctx.needs_input_grad, ctx.inputs,
                            self.bop(grad.contiguous(), *ctx.inputs))

    def __call__(self, *args):
        if torch.compiler.is_compiling():
            return self.op(*args)
        return _EagerOp.apply(self, *args)


def _record_versions(ctx, inputs):
    """The tensors' version counters at the forward: the backward reads the inputs
    themselves, so one changed in place in between would give other gradients."""
    ctx.versions = [(i, t._version) for i, t in enumerate(inputs) if isinstance(t, torch.Tensor)]


def _check_unchanged(ctx):
    for i, version in ctx.versions:
        if ctx.inputs[i]._version != version:
            raise RuntimeError("an input of this gpe operation (argument %d) was modified in "
                               "place after the forward; its backward needs it unchanged (as "
                               "autograd's saved tensors)" % i)


class _EagerOp(torch.autograd.Function):
    @staticmethod
    def forward(ctx, op, *args):
        ctx.op, ctx.inputs = op, args
        _record_versions(ctx, args)
        op.hold(ctx, args)
        return op.forward(*args)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad):
        op, inputs = ctx.op, ctx.inputs
        _check_unchanged(ctx)
        needs = ctx.needs_input_grad[1:]
        if op.backward is None or not any(needs):
            return (None,) * (1 + len(inputs))
        return (None,) + op._answer(needs, inputs,
                                    op._backward_in_dtypes(grad.contiguous(), *inputs))


def _like_x(x, *args):
    return torch.empty_like(x, memory_format=torch.contiguous_format)


def _rows(x, positions, name):
    """x [N, d] or [N, heads, d] as rows [N * heads, d] with one position per row."""
    positions = torch.as_tensor(positions, dtype=torch.int64)
    if x.dim() == 3:
        positions = positions.repeat_interleave(x.shape[1], 0)
        return x.reshape(-1, x.shape[-1]), positions, x.shape
    if x.dim() != 2:
        raise ValueError("%s: x must be [N, dim] or [N, heads, dim], got %s"
                         % (name, tuple(x.shape)))
    return x, positions, None


# ---- GRAPE-M (GRAPE, multiplicative) ----------------------------------------------------


def _grape_m_handle(a, b, omega):
    return _seq.GrapeM(_f64(a), _f64(b), _f64(omega))


_GRAPE_M = _Op(
    "grape_m_apply",
    [("x", "Tensor"), ("positions", "Tensor"), ("a", "Tensor"), ("b", "Tensor"),
     ("omega", "Tensor")],
    lambda x, p, a, b, w: _t(_grape_m_handle(a, b, w).apply(_np(p), _np(x))),
    _like_x,
    lambda g, x, p, a, b, w: [_t(r) for r in _grape_m_handle(a, b, w).backward(
        _np(p), _np(x), _np(g.to(x.dtype)))],
    diff=(0, 2, 3, 4))


def grape_m(x: torch.Tensor, positions: _TensorLike, a: _TensorLike, b: _TensorLike,
            omega: _TensorLike) -> torch.Tensor:
    """G(p) x with G(p) = prod_k exp(p omega_k (a_k b_k^T - b_k a_k^T)) (GRAPE-M); a, b
    [m, dim], omega [m]; differentiable in x, a, b and omega."""
    rows, pos, shape = _rows(x, positions, "grape_m")
    as_t = lambda t: t if isinstance(t, torch.Tensor) else torch.as_tensor(t, dtype=torch.float64)
    out = _GRAPE_M(rows, pos, as_t(a), as_t(b), as_t(omega))
    return out if shape is None else out.view(shape)


# ---- Algebraic encodings (Kogkalidis et al.) ---------------------------------------------


_ALG_SEQ = _Op(
    "algebraic_sequence_apply",
    [("x", "Tensor"), ("positions", "Tensor"), ("skew", "Tensor")],
    lambda x, p, s: _t(_seq.AlgebraicSequence(_f64(s)).apply(_np(p), _np(x))),
    _like_x,
    lambda g, x, p, s: [_t(r) for r in _seq.AlgebraicSequence(_f64(s)).backward(
        _np(p), _np(x), _np(g.to(x.dtype)))],
    diff=(0, 2))


def algebraic_sequence(x: torch.Tensor, positions: _TensorLike,
                       skew: torch.Tensor) -> torch.Tensor:
    """W^p x, W = exp(S) for a skew-symmetric S [dim, dim] (Kogkalidis et al., sec. 3.1);
    differentiable in x and S (parametrise S = A - A^T to keep it skew)."""
    rows, pos, shape = _rows(x, positions, "algebraic_sequence")
    out = _ALG_SEQ(rows, pos, skew)
    return out if shape is None else out.view(shape)


_ALG_TREE = _Op(
    "algebraic_tree_apply",
    [("x", "Tensor"), ("addresses", "Tensor"), ("skews", "Tensor")],
    lambda x, a, s: _t(_seq.AlgebraicTree(_f64(s)).apply(_np(a), _np(x))),
    _like_x,
    lambda g, x, a, s: [_t(r) for r in _seq.AlgebraicTree(_f64(s)).backward(
        _np(a), _np(x), _np(g.to(x.dtype)))],
    diff=(0, 2))


def algebraic_tree(x: torch.Tensor,
                   addresses: Union[torch.Tensor, npt.NDArray[np.integer],
                                    Sequence[Sequence[int]]],
                   skews: torch.Tensor) -> torch.Tensor:
    """rho(address) x: the product W_{c_1} ... W_{c_m}, W_c = exp(S_c), along each token's
    path from the root (Kogkalidis et al., sec. 3.2). addresses: a list of child-index
    paths or int64 [N, L] padded with -1; skews [branches, dim, dim]; differentiable in x
    and the skews."""
    if not isinstance(addresses, torch.Tensor):
        addresses = torch.from_numpy(_seq.AlgebraicTree.addresses(list(addresses))
                                     if not isinstance(addresses, np.ndarray) else addresses)
    rows, addr, shape = x, addresses.to(torch.int64), None
    if x.dim() == 3:
        rows, shape = x.reshape(-1, x.shape[-1]), x.shape
        addr = addr.repeat_interleave(x.shape[1], 0)
    out = _ALG_TREE(rows, addr, skews)
    return out if shape is None else out.view(shape)


def _grid_grads(g, x, p, s):
    """[dL/dx, dL/dskews [axes, m, m]] of algebraic_grid."""
    gx, gs = _seq.AlgebraicGrid(list(_f64(s))).backward(_np(p), _np(x), _np(g.to(x.dtype)))
    return [_t(gx), _t(np.stack(gs))]


_ALG_GRID = _Op(
    "algebraic_grid_apply",
    [("x", "Tensor"), ("positions", "Tensor"), ("skews", "Tensor")],
    lambda x, p, s: _t(_seq.AlgebraicGrid(list(_f64(s))).apply(_np(p), _np(x))),
    _like_x,
    lambda g, x, p, s: _grid_grads(g, x, p, s),
    diff=(0, 2))


def algebraic_grid(x: torch.Tensor, positions: _TensorLike,
                   skews: torch.Tensor) -> torch.Tensor:
    """blockdiag(exp(p_1 S_1), ..., exp(p_A S_A)) x (Kogkalidis et al., sec. 3.3);
    positions int64 [N, A], skews [A, m, m] with A m = dim; differentiable in x and the
    skews."""
    positions = torch.as_tensor(positions, dtype=torch.int64)
    rows, shape = x, None
    if x.dim() == 3:
        rows, shape = x.reshape(-1, x.shape[-1]), x.shape
        positions = positions.repeat_interleave(x.shape[1], 0)
    out = _ALG_GRID(rows, positions, skews)
    return out if shape is None else out.view(shape)


def _periodic(x, p, period, multipliers):
    return _t(_seq.algebraic_periodic(_np(p), _np(x), int(period), _np(multipliers)))


_ALG_PERIODIC = _Op(
    "algebraic_periodic_apply",
    [("x", "Tensor"), ("positions", "Tensor"), ("period", "int"), ("multipliers", "Tensor")],
    _periodic,
    _like_x,
    # Rotations: the transpose is the rotation at -p.
    lambda g, x, p, period, m: [_periodic(g.to(x.dtype), -p, period, m)],
    diff=(0,))


def algebraic_periodic(x: torch.Tensor, positions: _TensorLike, period: int,
                       multipliers: _TensorLike) -> torch.Tensor:
    """Plane i of x rotated by 2 pi multipliers[i] p / period (Kogkalidis et al., sec.
    3.4.2; W^period = I exactly); differentiable in x."""
    rows, pos, shape = _rows(x, positions, "algebraic_periodic")
    out = _ALG_PERIODIC(rows, pos, int(period),
                        torch.as_tensor(multipliers, dtype=torch.int64))
    return out if shape is None else out.view(shape)


# ---- Absolute encodings -----------------------------------------------------------------


_SINUSOIDAL = _Op(
    "sinusoidal",
    [("positions", "Tensor"), ("dim", "int"), ("base", "float")],
    lambda p, dim, base: _t(_seq.sinusoidal(_np(p), dim, base)),
    lambda p, dim, base: p.new_empty((p.shape[0], dim), dtype=torch.float64))


def sinusoidal(positions: _TensorLike, dim: int, base: float = 10000.0,
               dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """PE[n, 2i] = sin(p theta_i), PE[n, 2i + 1] = cos(p theta_i), theta_i =
    base^(-2i/dim) (Vaswani et al., sec. 3.5), [N, dim]."""
    out = _SINUSOIDAL(torch.as_tensor(positions, dtype=torch.int64), int(dim), float(base))
    return out.to(dtype)


_LEARNED = _Op(
    "learned_positions",
    [("table", "Tensor"), ("positions", "Tensor")],
    lambda t, p: _t(_seq.LearnedPositions(_f64(t)).lookup(_np(p), dtype=_np(t).dtype)),
    lambda t, p: t.new_empty((p.shape[0], t.shape[1])),
    lambda g, t, p: [_t(_seq.LearnedPositions(_f64(t)).backward(_np(p), _f64(g)))],
    diff=(0,))


def learned_positions(table: torch.Tensor, positions: _TensorLike) -> torch.Tensor:
    """table[positions[n]] (a learned absolute table [max_positions, dim]; Gehring et al.);
    differentiable in the table (scatter-add)."""
    return _LEARNED(table, torch.as_tensor(positions, dtype=torch.int64))


# ---- Additive bias tiles ----------------------------------------------------------------


def _bias_handle(key, a, b):
    obj = _ENCODINGS.get(key)
    if obj is None:
        raise ValueError("the bias object was freed before the call")
    if isinstance(obj, _LearnableBias):
        return obj.build(a, b, None, 1)
    return obj


def _tile(a, b, qp, kp, key, heads):
    bias = _bias_handle(key, a, b)
    return _t(np.stack([bias.fill_tile(h, _np(qp), _np(kp)) for h in range(heads)]))


def _tile_grad(g, a, b, qp, kp, key, heads):
    """dL/da, dL/db from dL/dtile: gpe_bias_accumulate_gradient per head (FoX and gated
    GRAPE-A accumulate dL/dc, the prefix sums, then take the logits' chain rule)."""
    bias = _bias_handle(key, a, b)
    ga = np.zeros(tuple(a.shape))
    gb = None if b is None else np.zeros(tuple(b.shape))
    g = _f64(g)
    for h in range(heads):
        bias._accumulate(h, _np(qp), _np(kp), g[h], ga, gb)
    if isinstance(bias, _bias.FoxBias) or (isinstance(bias, _bias.GrapeABias) and bias.gated):
        ga = bias.logit_gradient(ga)
    return [_t(ga), _t(gb) if gb is not None else torch.empty(0, dtype=torch.float64)]


_BIAS_TILE = _Op(
    "bias_tile",
    [("a", "Tensor"), ("b", "Tensor?"), ("q_positions", "Tensor"), ("k_positions", "Tensor"),
     ("bias_key", "int"), ("heads", "int")],
    _tile,
    lambda a, b, qp, kp, key, heads: qp.new_empty((heads, qp.shape[0], kp.shape[0]),
                                                  dtype=torch.float64),
    _tile_grad,
    diff=(0, 1), keys=(4,))


def bias_tile(bias: Union[_LearnableBias, _bias.AdditiveBias], q_positions: _TensorLike,
              k_positions: _TensorLike) -> torch.Tensor:
    """The tile b_h(q_positions[r], k_positions[c]), float64 [heads, M, N], of an additive
    bias: a learnable gpe.torch bias (AlibiBias, T5Bias, FoxBias, GrapeABias, GrapeApBias;
    differentiable in its tensors) or a gpe.bias object (constant). Nothing is masked:
    causal biases continue their closed form above the diagonal."""
    qp = torch.as_tensor(q_positions, dtype=torch.int64)
    kp = torch.as_tensor(k_positions, dtype=torch.int64)
    if isinstance(bias, _LearnableBias):
        a, b = bias.tensors()
        heads = bias.build(a, b, None, 1).num_heads
        return _BIAS_TILE(a, b, qp, kp, _register(bias), heads)
    if not isinstance(bias, _bias.AdditiveBias):
        raise TypeError("bias must be a gpe.torch learnable bias or a gpe.bias object")
    return _BIAS_TILE(torch.zeros(0, dtype=torch.float64), None, qp, kp,
                      _register(bias), bias.num_heads)


# ---- Relative terms: Shaw et al., Transformer-XL, locality ------------------------------


def _ints(x):
    return torch.as_tensor(x, dtype=torch.int64)


_SHAW_KEY = _Op(
    "shaw_key_scores",
    [("q", "Tensor"), ("table", "Tensor"), ("q_positions", "Tensor"), ("k_positions", "Tensor")],
    lambda q, t, qp, kp: _t(_seq.shaw_key_scores(_np(q), _np(t), _np(qp), _np(kp))),
    lambda q, t, qp, kp: q.new_empty((qp.shape[0], kp.shape[0]), dtype=torch.float64),
    lambda g, q, t, qp, kp: [_t(r) for r in _seq.shaw_key_scores_backward(
        _np(q), _np(t), _np(qp), _np(kp), _f64(g))],
    diff=(0, 1))


def shaw_key_scores(q: torch.Tensor, table: torch.Tensor, q_positions: _TensorLike,
                    k_positions: _TensorLike) -> torch.Tensor:
    """scores[a, b] = q[a] . table[clip(kp[b] - qp[a], -k, k) + k] (Shaw et al., eq. 4's
    key term), float64 [Lq, Lk]; differentiable in q and the table."""
    return _SHAW_KEY(q, table, _ints(q_positions), _ints(k_positions))


_SHAW_VALUE = _Op(
    "shaw_value_output",
    [("probabilities", "Tensor"), ("table", "Tensor"), ("q_positions", "Tensor"),
     ("k_positions", "Tensor")],
    lambda p, t, qp, kp: _t(_seq.shaw_value_output(_np(p), _np(t), _np(qp), _np(kp))),
    lambda p, t, qp, kp: p.new_empty((qp.shape[0], t.shape[1]), dtype=torch.float64),
    lambda g, p, t, qp, kp: [_t(r) for r in _seq.shaw_value_output_backward(
        _np(p), _np(t), _np(qp), _np(kp), _f64(g))],
    diff=(0, 1))


def shaw_value_output(probabilities: torch.Tensor, table: torch.Tensor,
                      q_positions: _TensorLike, k_positions: _TensorLike) -> torch.Tensor:
    """out[a] = sum_b probabilities[a, b] table[clip(kp[b] - qp[a], -k, k) + k] (Shaw et
    al., eq. 3's value term), float64 [Lq, dv]; differentiable in both inputs."""
    return _SHAW_VALUE(probabilities, table, _ints(q_positions), _ints(k_positions))


_TXL = _Op(
    "transformer_xl_score_terms",
    [("q", "Tensor"), ("k", "Tensor"), ("q_positions", "Tensor"), ("k_positions", "Tensor"),
     ("w_r", "Tensor"), ("u", "Tensor"), ("v", "Tensor"), ("base", "float")],
    lambda q, k, qp, kp, w, u, v, base: _t(_seq.transformer_xl_score_terms(
        _np(q), _np(k), _np(qp), _np(kp), _np(w), _np(u), _np(v), base)),
    lambda q, k, qp, kp, *a: q.new_empty((qp.shape[0], kp.shape[0]), dtype=torch.float64),
    lambda g, q, k, qp, kp, w, u, v, base: [_t(r) for r in
                                            _seq.transformer_xl_score_terms_backward(
        _np(q), _np(k), _np(qp), _np(kp), _np(w), _np(u), _np(v), _f64(g), base)],
    diff=(0, 1, 4, 5, 6))


def transformer_xl_score_terms(q: torch.Tensor, k: torch.Tensor, q_positions: _TensorLike,
                               k_positions: _TensorLike, w_r: torch.Tensor, u: torch.Tensor,
                               v: torch.Tensor, base: float = 10000.0) -> torch.Tensor:
    """terms[a, b] = q_a^T W_R R_{i-j} + u^T k_b + v^T W_R R_{i-j} (Dai et al., sec. 3.3;
    R sinusoidal), float64 [Lq, Lk]; differentiable in q, k, w_r, u, v."""
    return _TXL(q, k, _ints(q_positions), _ints(k_positions), w_r, u, v, float(base))


def _locality(s, qp, kp, c):
    out = _np(s).copy()
    _seq.locality_scale(out, _np(qp), _np(kp), c)
    return _t(out)


_LOCALITY = _Op(
    "locality_scale",
    [("scores", "Tensor"), ("q_positions", "Tensor"), ("k_positions", "Tensor"), ("c", "float")],
    _locality,
    _like_x,
    lambda g, s, qp, kp, c: [_locality(g.to(s.dtype), qp, kp, c)],  # linear, diagonal
    diff=(0,))


def locality_scale(scores: torch.Tensor, q_positions: _TensorLike, k_positions: _TensorLike,
                   c: float = 0.98) -> torch.Tensor:
    """scores[r, c] c^|qp[r] - kp[c]| (Kogkalidis et al., sec. 4; a new tensor);
    differentiable in scores."""
    return _LOCALITY(scores, _ints(q_positions), _ints(k_positions), float(c))
