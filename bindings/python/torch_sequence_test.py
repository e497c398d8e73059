"""gpe.torch's sequence-encoding operators (gpe/torch_sequence.py): forward against eager
PyTorch written from the papers' formulas, gradcheck in double through the library's own
backward passes, and torch.library registration (opcheck, torch.compile). Skips with a
message without PyTorch.

Tolerances: forward checks compare two double computations of the same formula (matrix
exponentials by torch.linalg.matrix_exp against the library's closed forms or Pade, angle
reduction mod 2 pi), which agree to ~1e-14 on O(1) values: 1e-10 is checked, while a wrong
angle, sign, bucket or path is O(0.1). gradcheck uses central differences (eps 1e-6) on
smooth maps: truncation and rounding ~1e-10, inside its atol 1e-5 / rtol 1e-3, far below
a wrong or missing gradient term (O(0.1)).
"""

import math
import unittest

import sanitizer_preload
from gpe import _ffi

sanitizer_preload.reexec_if_needed(next((str(p) for p in _ffi._candidates() if p.is_file()), None))

import numpy as np  # noqa: E402

import gpe  # noqa: E402

try:
    import torch  # noqa: E402
    import torch.nn.functional as F  # noqa: E402
    import gpe.torch as gt  # noqa: E402
    _SKIP = None
except ImportError as e:  # the CI .venv has no torch
    torch = None
    _SKIP = "PyTorch is not installed (%s); gpe.torch operator tests skipped" % e

needs_torch = unittest.skipIf(_SKIP is not None, _SKIP or "")
ATOL = 1e-10


def skew(rng, m, s=0.4):
    a = rng.standard_normal((m, m))
    return torch.tensor((a - a.T) * s)


def leaf(x):
    return torch.as_tensor(x, dtype=torch.float64).clone().requires_grad_()


@needs_torch
class SequenceOperatorTest(unittest.TestCase):
    def setUp(self):
        torch.manual_seed(0)
        self.rng = np.random.default_rng(0)

    def assert_gradcheck(self, fn, *inputs):
        self.assertTrue(torch.autograd.gradcheck(fn, inputs))

    def test_grape_m(self):
        # GRAPE-M: G(p) = prod_k exp(p w_k (a_k b_k^T - b_k a_k^T)) (GRAPE, multiplicative).
        n, d = 5, 4
        a, b = leaf(self.rng.standard_normal((2, d))), leaf(self.rng.standard_normal((2, d)))
        w = leaf([0.3, -0.7])
        x = leaf(self.rng.standard_normal((n, d)))
        pos = torch.tensor([0, 3, -2, 7, 11])
        y = gt.grape_m(x, pos, a, b, w)
        g = torch.eye(d, dtype=torch.float64).expand(n, d, d)
        for k in range(2):
            gen = w[k] * (torch.outer(a[k], b[k]) - torch.outer(b[k], a[k]))
            g = g @ torch.linalg.matrix_exp(pos.double()[:, None, None] * gen)
        torch.testing.assert_close(y, torch.einsum("nij,nj->ni", g, x), atol=ATOL, rtol=0)
        self.assert_gradcheck(lambda x, a, b, w: gt.grape_m(x, pos, a, b, w), x, a, b, w)
        # [N, heads, d]: a token's position is shared by its heads.
        x3 = torch.randn(n, 3, d, dtype=torch.float64)
        torch.testing.assert_close(gt.grape_m(x3, pos, a, b, w)[:, 1],
                                   gt.grape_m(x3[:, 1], pos, a, b, w), atol=0, rtol=0)

    def test_algebraic_sequence_tree_grid(self):
        # Kogkalidis et al.: W^p = exp(p S) (sec. 3.1); trees W_{c_1} ... W_{c_m} (sec. 3.2);
        # grids blockdiag(exp(p_a S_a)) (sec. 3.3). S = A - A^T keeps the skews skew under
        # gradcheck's perturbations of A.
        d, n = 4, 5
        x = leaf(self.rng.standard_normal((n, d)))
        pos = torch.tensor([0, 1, 4, -3, 9])
        a = leaf(skew(self.rng, d))
        s = a - a.T
        y = gt.algebraic_sequence(x, pos, s)
        powers = torch.linalg.matrix_exp(pos.double()[:, None, None] * s)
        want = torch.einsum("nij,nj->ni", powers, x)
        torch.testing.assert_close(y, want, atol=ATOL, rtol=0)
        self.assert_gradcheck(lambda x, a: gt.algebraic_sequence(x, pos, a - a.T), x, a)

        paths = [[], [0], [1, 0], [0, 1, 1], [1]]
        at = leaf(torch.stack([skew(self.rng, d), skew(self.rng, d)]))
        st = at - at.transpose(1, 2)
        w = torch.linalg.matrix_exp(st)
        rho = []
        for path in paths:
            m = torch.eye(d, dtype=torch.float64)
            for c in path:
                m = m @ w[c]
            rho.append(m)
        torch.testing.assert_close(gt.algebraic_tree(x, paths, st),
                                   torch.einsum("nij,nj->ni", torch.stack(rho), x),
                                   atol=ATOL, rtol=0)
        self.assert_gradcheck(lambda x, a: gt.algebraic_tree(x, paths, a - a.transpose(1, 2)),
                              x, at)

        ag = leaf(torch.stack([skew(self.rng, 2), skew(self.rng, 2)]))
        sg = ag - ag.transpose(1, 2)
        gp = torch.tensor([[0, 1], [2, -1], [3, 3], [-2, 5], [1, 0]])
        blocks = [torch.linalg.matrix_exp(gp[:, i].double()[:, None, None] * sg[i])
                  for i in range(2)]
        want = torch.cat([torch.einsum("nij,nj->ni", blocks[i], x[:, 2 * i:2 * i + 2])
                          for i in range(2)], 1)
        torch.testing.assert_close(gt.algebraic_grid(x, gp, sg), want, atol=ATOL, rtol=0)
        self.assert_gradcheck(lambda x, a: gt.algebraic_grid(x, gp, a - a.transpose(1, 2)),
                              x, ag)

    def test_periodic_sinusoidal_learned(self):
        # Periodic (sec. 3.4.2): plane i rotated by 2 pi m_i p / n, (x1, x2) ->
        # (x1 cos - x2 sin, x1 sin + x2 cos); sinusoidal (Vaswani et al., sec. 3.5);
        # learned table rows with a scatter-add gradient.
        n, d, period = 5, 4, 7
        x = leaf(self.rng.standard_normal((n, d)))
        pos = torch.tensor([0, 1, 6, 7, -3])
        mult = [1, 3]
        ang = (2 * math.pi * torch.tensor(mult, dtype=torch.float64)[None]
               * pos.double()[:, None] / period)
        x1, x2 = x[:, 0::2], x[:, 1::2]
        want = torch.stack([x1 * ang.cos() - x2 * ang.sin(), x1 * ang.sin() + x2 * ang.cos()],
                           -1).flatten(1)
        torch.testing.assert_close(gt.algebraic_periodic(x, pos, period, mult), want,
                                   atol=ATOL, rtol=0)
        self.assert_gradcheck(lambda x: gt.algebraic_periodic(x, pos, period, mult), x)

        pe = gt.sinusoidal(pos.abs(), 6)
        theta = 10000.0 ** (-torch.arange(0, 6, 2, dtype=torch.float64) / 6)
        a2 = pos.abs().double()[:, None] * theta[None]
        torch.testing.assert_close(pe, torch.stack([a2.sin(), a2.cos()], -1).flatten(1),
                                   atol=ATOL, rtol=0)

        table = leaf(self.rng.standard_normal((9, 3)))
        ids = torch.tensor([2, 0, 2, 8])
        torch.testing.assert_close(gt.learned_positions(table, ids), table[ids], atol=0, rtol=0)
        self.assert_gradcheck(lambda t: gt.learned_positions(t, ids), table)

    def test_bias_tiles(self):
        # Bias tiles against their formulas (no mask: causal biases continue their closed
        # form above the diagonal): ALiBi -m (i - j) (Press et al.); FoX c_i - c_j, c_t =
        # sum_{l <= t} ln sigmoid(x_l) (Lin et al.); GRAPE-A gated = FoX's tile and slope
        # form = ALiBi's (GRAPE, additive); GRAPE-AP sum_{l=j+1..i} -softplus(<w_i, u_l>)
        # for j <= i. gradcheck (double) of each learnable tensor through
        # gpe_bias_accumulate_gradient (and FoX's logit gradient); T5 against the fixed
        # gpe.T5Bias tile and by gradcheck.
        s, h = 5, 2
        qp = torch.arange(s)
        kp = torch.arange(s)
        rel = (qp[:, None] - kp[None, :]).double()
        m = leaf([0.5, 0.25])
        torch.testing.assert_close(gt.bias_tile(gt.AlibiBias(m), qp, kp),
                                   -m[:, None, None] * rel, atol=ATOL, rtol=0)
        torch.testing.assert_close(gt.bias_tile(gt.GrapeABias(slopes=m), qp, kp),
                                   -m[:, None, None] * rel, atol=ATOL, rtol=0)
        self.assert_gradcheck(lambda m: gt.bias_tile(gt.AlibiBias(m, symmetric=True), qp, kp), m)
        x = leaf(self.rng.standard_normal((s, h)) + 1.0)
        c = torch.cumsum(F.logsigmoid(x), 0)
        fox_want = (c.T[:, :, None] - c.T[:, None, :])
        low = torch.ones(s, s, dtype=torch.bool).tril()
        for make in (gt.FoxBias, lambda x: gt.GrapeABias(gate_logits=x)):
            tile = gt.bias_tile(make(x), qp, kp)
            torch.testing.assert_close(tile[:, low], fox_want[:, low], atol=ATOL, rtol=0)
            self.assert_gradcheck(lambda x: gt.bias_tile(make(x), qp, kp)[:, low], x)
        w = leaf(self.rng.standard_normal((s, h, 2)) * 0.7)
        u = leaf(self.rng.standard_normal((s, h, 2)) * 0.7)
        psi = -F.softplus(torch.einsum("thr,lhr->htl", w, u))  # psi_h(t, l)
        want = torch.zeros(h, s, s, dtype=torch.float64)
        for i in range(s):
            for j in range(i + 1):
                want[:, i, j] = psi[:, i, j + 1:i + 1].sum(-1)
        tile = gt.bias_tile(gt.GrapeApBias(w, u), qp, kp)
        torch.testing.assert_close(tile[:, low], want[:, low], atol=ATOL, rtol=0)
        self.assert_gradcheck(lambda w, u: gt.bias_tile(gt.GrapeApBias(w, u), qp, kp)[:, low],
                              w, u)
        table = leaf(self.rng.standard_normal((8, h)))
        fixed = gpe.T5Bias(table.detach().numpy(), max_distance=6)
        torch.testing.assert_close(gt.bias_tile(gt.T5Bias(table, max_distance=6), qp, kp),
                                   gt.bias_tile(fixed, qp, kp), atol=0, rtol=0)
        self.assert_gradcheck(lambda t: gt.bias_tile(gt.T5Bias(t, max_distance=6), qp, kp),
                              table)

    def test_relative_terms(self):
        # Shaw et al. (eqs. 3-4) with k = 2, Transformer-XL (Dai et al., sec. 3.3) and
        # locality scaling c^|i - j| (Kogkalidis et al., sec. 4).
        lq, lk, d, k = 3, 4, 4, 2
        qp, kp = torch.tensor([5, 6, 9]), torch.tensor([2, 5, 6, 7])
        q = leaf(self.rng.standard_normal((lq, d)))
        table = leaf(self.rng.standard_normal((2 * k + 1, d)))
        idx = (kp[None, :] - qp[:, None]).clamp(-k, k) + k
        torch.testing.assert_close(gt.shaw_key_scores(q, table, qp, kp),
                                   torch.einsum("ad,abd->ab", q, table[idx]), atol=ATOL, rtol=0)
        self.assert_gradcheck(lambda q, t: gt.shaw_key_scores(q, t, qp, kp), q, table)
        # An input changed in place between forward and backward raises, as autograd's
        # saved tensors do (the backward reads the inputs themselves); a double backward
        # raises rather than dropping the second-order terms.
        q2 = q.detach().clone()
        s = gt.shaw_key_scores(q2, table, qp, kp)
        q2.mul_(100)
        with self.assertRaisesRegex(RuntimeError, "modified in place"):
            s.sum().backward()
        g, = torch.autograd.grad(gt.shaw_key_scores(q, table, qp, kp).pow(2).sum(), q,
                                 create_graph=True)
        with self.assertRaisesRegex(RuntimeError, "differentiate twice"):
            g.sum().backward()
        p = leaf(torch.softmax(torch.randn(lq, lk, dtype=torch.float64), -1))
        torch.testing.assert_close(gt.shaw_value_output(p, table, qp, kp),
                                   torch.einsum("ab,abd->ad", p, table[idx]), atol=ATOL, rtol=0)
        self.assert_gradcheck(lambda p, t: gt.shaw_value_output(p, t, qp, kp), p, table)

        kk = leaf(self.rng.standard_normal((lk, d)))
        w_r = leaf(self.rng.standard_normal((d, d)) * 0.5)
        u, v = leaf(self.rng.standard_normal(d)), leaf(self.rng.standard_normal(d))
        rel = (qp[:, None] - kp[None, :]).reshape(-1)
        r = gt.sinusoidal(rel, d).reshape(lq, lk, d)
        wr = torch.einsum("ij,abj->abi", w_r, r)
        want = torch.einsum("ai,abi->ab", q, wr) + (kk @ u)[None] + torch.einsum("i,abi->ab", v, wr)
        torch.testing.assert_close(gt.transformer_xl_score_terms(q, kk, qp, kp, w_r, u, v), want,
                                   atol=ATOL, rtol=0)
        self.assert_gradcheck(lambda *a: gt.transformer_xl_score_terms(a[0], a[1], qp, kp,
                                                                       *a[2:]),
                              q, kk, w_r, u, v)
        sc = leaf(self.rng.standard_normal((lq, lk)))
        dist = (qp[:, None] - kp[None, :]).abs().double()
        torch.testing.assert_close(gt.locality_scale(sc, qp, kp, 0.9), sc * 0.9 ** dist,
                                   atol=ATOL, rtol=0)
        self.assert_gradcheck(lambda s: gt.locality_scale(s, qp, kp, 0.9), sc)

    def test_registration_opcheck_and_compile(self):
        # The registered operators pass torch.library.opcheck (schema, fake tensors,
        # autograd registration, AOT dispatch), and run under torch.compile (aot_eager: no
        # C++ compiler needed) with gradients equal to eager ones (the same library calls:
        # bitwise).
        d = 4
        x = torch.randn(3, d, dtype=torch.float64, requires_grad=True)
        pos = torch.tensor([0, 2, 5])
        a, b = torch.randn(1, d, dtype=torch.float64), torch.randn(1, d, dtype=torch.float64)
        w = torch.tensor([0.4], dtype=torch.float64, requires_grad=True)
        torch.library.opcheck(torch.ops.gpe.grape_m_apply.default, (x, pos, a, b, w))
        torch.library.opcheck(torch.ops.gpe.algebraic_periodic_apply.default,
                              (x, pos, 5, torch.tensor([1, 2])))
        slopes = torch.tensor([0.5, 0.25], dtype=torch.float64, requires_grad=True)
        bias = gt.AlibiBias(slopes)
        key = gt._register(bias)
        torch.library.opcheck(torch.ops.gpe.bias_tile.default,
                              (slopes, None, pos, pos, key, 2))

        def f(x, w):
            return gt.grape_m(x, pos, a, b, w).sum() + gt.algebraic_periodic(x, pos, 5,
                                                                             [1, 2]).pow(2).sum()

        cf = torch.compile(f, backend="aot_eager", fullgraph=True)
        got = torch.autograd.grad(cf(x, w), (x, w))
        want = torch.autograd.grad(f(x, w), (x, w))
        for g, r in zip(got, want):
            torch.testing.assert_close(g, r, atol=0, rtol=0)

    def test_bad_input(self):
        x = torch.randn(3, 4, dtype=torch.float64)
        with self.assertRaises(gpe.GpeError):
            gt.grape_m(x, [0, 1], torch.randn(1, 4), torch.randn(1, 4), [0.1])  # 2 positions
        with self.assertRaises(ValueError):
            gt.grape_m(x[0], [0], torch.randn(1, 4), torch.randn(1, 4), [0.1])  # 1-D x
        with self.assertRaises(TypeError):
            gt.bias_tile("alibi", [0], [0])


if __name__ == "__main__":
    unittest.main()
