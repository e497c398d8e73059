"""gpe.torch against eager PyTorch: gradcheck in float64 for every encoding family, float64
forward and gradients against an eager implementation of the formulas written here, and
float32 forward/backward against torch.nn.functional.scaled_dot_product_attention.

PyTorch is an optional dependency of the bindings: without it every test that needs it is
skipped with a message (the import-without-torch check still runs).
"""

import math
import os
import re
import subprocess
import sys
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
    _SKIP = "PyTorch is not installed (%s); gpe.torch tests skipped" % e

needs_torch = unittest.skipIf(_SKIP is not None, _SKIP or "")


class ImportTest(unittest.TestCase):
    def test_import_gpe_does_not_import_torch(self):
        code = "import sys, gpe; assert 'torch' not in sys.modules, 'gpe imported torch'"
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
        r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)


# ---- Eager references, written from the papers' formulas ------------------------------


def rope_eager(x, pos, rotary_dim, base=10000.0, pairing="half"):
    """Su et al. eq. 34 on x [tokens, heads, d]: pairs (i, i + r/2) ("half") or (2i, 2i+1)."""
    half = rotary_dim // 2
    theta = base ** (-2.0 * torch.arange(half, dtype=torch.float64) / rotary_dim)
    ang = pos.to(torch.float64)[:, None] * theta[None, :]
    c = torch.cos(ang).to(x.dtype)[:, None, :]
    s = torch.sin(ang).to(x.dtype)[:, None, :]
    if pairing == "half":
        a, b = x[..., :half], x[..., half:rotary_dim]
        return torch.cat([a * c - b * s, a * s + b * c, x[..., rotary_dim:]], dim=-1)
    a, b = x[..., 0:rotary_dim:2], x[..., 1:rotary_dim:2]
    rot = torch.stack([a * c - b * s, a * s + b * c], dim=-1).flatten(-2)
    return torch.cat([rot, x[..., rotary_dim:]], dim=-1)


def matrices_eager(generator, pos):
    """exp(p A) for each position, A [d, d] skew (torch.linalg.matrix_exp)."""
    return torch.linalg.matrix_exp(pos.to(torch.float64)[:, None, None] * generator[None])


def grape_m_matrices(a, b, omega, pos):
    """GRAPE-M (Zhang et al.): G(p) = G_1(p) ... G_m(p), G_k(p) = exp(p w_k (a_k b_k^T - b_k a_k^T))."""
    out = None
    for ak, bk, wk in zip(a, b, omega):
        gen = wk * (torch.outer(ak, bk) - torch.outer(bk, ak))
        g = matrices_eager(gen, pos)
        out = g if out is None else out @ g
    return out


def alibi_slopes(h):
    """Press et al.: 2^(-8 i / h), i = 1..h, for h a power of two."""
    return 2.0 ** (-8.0 * torch.arange(1, h + 1, dtype=torch.float64) / h)


def attention_eager(q, k, v, qp, kp, causal=False, scale=None, rope_dim=0, pairing="half",
                    alibi=None, mats_q=None, mats_k=None):
    """One sequence [tokens, heads, d] in eager torch (differentiable): positions qp, kp."""
    d = q.shape[-1]
    hq, hkv = q.shape[1], k.shape[1]
    if rope_dim:
        q, k = rope_eager(q, qp, rope_dim, pairing=pairing), rope_eager(k, kp, rope_dim,
                                                                           pairing=pairing)
    if mats_q is not None:
        q = torch.einsum("tij,thj->thi", mats_q.to(q.dtype), q)
        k = torch.einsum("tij,thj->thi", mats_k.to(k.dtype), k)
    k = k.repeat_interleave(hq // hkv, dim=1)
    v = v.repeat_interleave(hq // hkv, dim=1)
    s = torch.einsum("ihd,jhd->hij", q, k) * (scale if scale else d ** -0.5)
    rel = (qp[:, None] - kp[None, :]).to(s.dtype)
    if alibi == "causal":
        s = s - alibi_slopes(hq).to(s.dtype)[:, None, None] * rel
    elif alibi == "symmetric":
        s = s - alibi_slopes(hq).to(s.dtype)[:, None, None] * rel.abs()
    if causal:
        s = s.masked_fill(~(kp[None, :] <= qp[:, None]), float("-inf"))
    p = torch.softmax(s, dim=-1)
    p = torch.nan_to_num(p)  # rows with no allowed key: o = 0
    return torch.einsum("hij,jhd->ihd", p, v)


@needs_torch
class TorchAttentionTest(unittest.TestCase):
    def setUp(self):
        torch.manual_seed(0)
        self.rng = np.random.default_rng(0)

    def rand(self, *shape, dtype=None):
        return torch.randn(*shape, dtype=dtype or torch.float64, requires_grad=True)

    def encodings(self, d):
        a = self.rng.standard_normal((2, d))
        b = self.rng.standard_normal((2, d))
        w = np.array([0.3, -0.7])
        grape = gpe.GrapeM(a, b, w)
        s = self.rng.standard_normal((d, d)) * 0.3
        skew = s - s.T
        alg = gpe.AlgebraicSequence(skew)
        ta, tb, tw, ts = (torch.as_tensor(x) for x in (a, b, w, skew))
        return [
            ("grape_m", grape, lambda p: grape_m_matrices(ta, tb, tw, p)),
            ("algebraic", alg, lambda p: matrices_eager(ts, p)),
        ]

    def cases(self):
        """(name, gpe kwargs, eager kwargs) over every encoding family, causal and not."""
        d = 8
        out = [
            ("rope causal", dict(causal=True, rope_dim=8), dict(causal=True, rope_dim=8)),
            ("partial interleaved rope", dict(rope_dim=4, rope_pairing="interleaved"),
             dict(rope_dim=4, pairing="interleaved")),
            ("alibi causal", dict(causal=True, alibi="causal"),
             dict(causal=True, alibi="causal")),
            ("alibi symmetric + rope", dict(alibi="symmetric", rope_dim=8, scale=0.3),
             dict(alibi="symmetric", rope_dim=8, scale=0.3)),
        ]
        for name, enc, mats in self.encodings(d):
            for causal in (False, True):
                out.append(("%s causal=%s" % (name, causal), dict(causal=causal, encoding=enc),
                            dict(causal=causal, mats=mats)))
        return out

    def eager_bshd(self, q, k, v, kw, qp=None, kp=None):
        """Padded batch through attention_eager per sequence (KV-cache default positions)."""
        kw = dict(kw)
        mats = kw.pop("mats", None)
        s_q, s_k = q.shape[1], k.shape[1]
        qp = torch.arange(s_k - s_q, s_k) if qp is None else qp
        kp = torch.arange(s_k) if kp is None else kp
        if mats is not None:
            kw.update(mats_q=mats(qp), mats_k=mats(kp))
        return torch.stack([attention_eager(q[b], k[b], v[b], qp, kp, **kw)
                            for b in range(q.shape[0])])

    def test_upstream_gradient_with_other_strides_on_size_one_dims(self):
        # A d_o that torch calls contiguous but whose strides on a size-1 dimension differ
        # from o's (one head: the transpose of [1, 1, 16, 64]) was refused by the library
        # ("o and d_o must have the same strides"); such strides are now free, and d_o
        # reaches the library as it is. Gradients against a contiguous copy of the same
        # values: identical calls, exact.
        q, k, v = (torch.randn(1, 16, 1, 64, dtype=torch.float32, requires_grad=True)
                   for _ in range(3))
        g = torch.randn(1, 1, 16, 64).transpose(1, 2)
        self.assertTrue(g.is_contiguous())
        gt.attention(q, k, v, causal=True).backward(g)
        want = [t.grad.clone() for t in (q, k, v)]
        for t in (q, k, v):
            t.grad = None
        gt.attention(q, k, v, causal=True).backward(torch.empty(1, 16, 1, 64).copy_(g))
        for a, b in zip(want, (q.grad, k.grad, v.grad)):
            self.assertTrue(torch.equal(a, b))

    def test_gradcheck_float64_every_encoding(self):
        # float64 runs the exact reference; gradcheck's central differences (eps 1e-6) are
        # accurate to ~1e-9 on these O(1) Jacobians, inside its atol 1e-5 / rtol 1e-3, while
        # a wrong gradient term is O(0.1). GQA: 4 query heads over 2 kv heads.
        for name, kw, _ in self.cases():
            # fast_mode: the Jacobian checked along random vectors (the full one is ~10x the
            # time; the float64 eager test below compares every gradient entry).
            q, k, v = self.rand(1, 5, 4, 8), self.rand(1, 6, 2, 8), self.rand(1, 6, 2, 8)
            with self.subTest(name):
                self.assertTrue(torch.autograd.gradcheck(
                    lambda q, k, v: gt.attention(q, k, v, **kw), (q, k, v), fast_mode=True))

    def test_float64_matches_eager_formulas(self):
        # Forward and gradients against the eager formulas (autograd through torch ops):
        # both in double, differing only in summation order (~1e-15); 1e-10 catches any
        # wrong angle, slope, mask or matrix (errors >= 1e-3).
        for name, kw, ekw in self.cases():
            q, k, v = self.rand(2, 5, 4, 8), self.rand(2, 7, 2, 8), self.rand(2, 7, 2, 8)
            w = torch.randn(2, 5, 4, 8, dtype=torch.float64)
            with self.subTest(name):
                o = gt.attention(q, k, v, **kw)
                want = self.eager_bshd(q, k, v, ekw)
                torch.testing.assert_close(o, want, atol=1e-10, rtol=0)
                got = torch.autograd.grad((o * w).sum(), (q, k, v))
                ref = torch.autograd.grad((want * w).sum(), (q, k, v))
                for g, r in zip(got, ref):
                    torch.testing.assert_close(g, r, atol=1e-10, rtol=0)

    def test_packed_gqa_positions_gradcheck_and_eager(self):
        # Three packed sequences (one empty) at explicit global positions (a shard starting
        # at 40 with gaps), causal, RoPE + causal ALiBi, 4 query heads over 2 kv heads.
        cu_q, cu_k = [0, 3, 3, 7], [0, 4, 4, 9]
        qp = torch.tensor([41, 43, 45, 10, 11, 12, 13])
        kp = torch.tensor([40, 41, 43, 44, 9, 10, 11, 12, 13])
        kw = dict(causal=True, rope_dim=8, alibi="causal", q_positions=qp, k_positions=kp,
                  cu_seqlens_q=cu_q, cu_seqlens_k=cu_k)
        q, k, v = self.rand(7, 4, 8), self.rand(9, 2, 8), self.rand(9, 2, 8)
        self.assertTrue(torch.autograd.gradcheck(lambda q, k, v: gt.attention(q, k, v, **kw),
                                                 (q, k, v)))
        o = gt.attention(q, k, v, **kw)
        for b in range(3):
            sq, sk = slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1])
            if sq.start == sq.stop:
                continue
            want = attention_eager(q[sq], k[sk], v[sk], qp[sq], kp[sk], causal=True,
                                   rope_dim=8, alibi="causal")
            torch.testing.assert_close(o[sq], want, atol=1e-10, rtol=0)  # as above

    def test_float32_matches_sdpa(self):
        # float32 kernels against torch's scaled_dot_product_attention on eager-RoPE'd q, k
        # (ALiBi as an additive mask), both float32, 64 tokens, head_dim 32, O(1) values.
        # Each side's float32 error is ~1e-6 (32-term dots, 64-term sums); 2e-5 on outputs
        # and 1e-4 on gradients (which sum 64 products of O(1) terms more) leave margin,
        # far below a wrong rotation or slope (>= 1e-2).
        b, s, hq, hkv, d = 2, 64, 4, 2, 32
        for causal, alibi in ((True, None), (False, "symmetric"), (True, "causal")):
            q = torch.randn(b, s, hq, d, requires_grad=True)
            k = torch.randn(b, s, hkv, d, requires_grad=True)
            v = torch.randn(b, s, hkv, d, requires_grad=True)
            w = torch.randn(b, s, hq, d)
            with self.subTest(causal=causal, alibi=alibi):
                o = gt.attention(q, k, v, causal=causal, rope_dim=d, alibi=alibi)
                pos = torch.arange(s)
                qr = torch.stack([rope_eager(q[i], pos, d) for i in range(b)])
                kr = torch.stack([rope_eager(k[i], pos, d) for i in range(b)])
                rel = (pos[:, None] - pos[None, :]).float()
                mask = None
                if alibi:
                    rel = rel if alibi == "causal" else rel.abs()
                    mask = -alibi_slopes(hq).float()[:, None, None] * rel
                    if causal:
                        mask = mask.masked_fill(rel < 0, float("-inf"))
                want = F.scaled_dot_product_attention(
                    qr.transpose(1, 2), kr.transpose(1, 2).repeat_interleave(hq // hkv, 1),
                    v.transpose(1, 2).repeat_interleave(hq // hkv, 1), attn_mask=mask,
                    is_causal=causal and mask is None).transpose(1, 2)
                torch.testing.assert_close(o, want, atol=2e-5, rtol=0)
                got = torch.autograd.grad((o * w).sum(), (q, k, v))
                ref = torch.autograd.grad((want * w).sum(), (q, k, v))
                for g, r in zip(got, ref):
                    torch.testing.assert_close(g, r, atol=1e-4, rtol=0)

    def test_bfloat16(self):
        # bf16 storage, float32 arithmetic: against float32 on the same (bf16-rounded)
        # inputs, within bf16 output rounding (2^-9 relative) plus input rounding: 2e-2.
        q, k, v = (torch.randn(1, 16, 2, 16).bfloat16().requires_grad_() for _ in range(3))
        o = gt.attention(q, k, v, causal=True, rope_dim=16)
        self.assertEqual(o.dtype, torch.bfloat16)
        want = gt.attention(q.float(), k.float(), v.float(), causal=True, rope_dim=16)
        torch.testing.assert_close(o.float(), want, atol=2e-2, rtol=0)
        o.float().sum().backward()
        self.assertEqual(q.grad.dtype, torch.bfloat16)
        self.assertTrue(torch.isfinite(q.grad.float()).all())

    def test_cpu_arithmetic(self):
        # The CPU arithmetic keywords reach the operators (two trailing integer inputs of
        # the schemas), eager and under torch.compile, and their backward: float32 with six
        # split products on AMX tiles (float32 FMAs elsewhere) stays within 1e-5 of the
        # default (a float32 result of O(1) outputs); bf16 widened to float32 or on the dot
        # products within 2e-2 (bf16 rounding, as test_bfloat16). Unknown names refuse.
        for op in (torch.ops.gpe.attention_forward, torch.ops.gpe.attention_backward_with_parameters):
            names = [a.name for a in op.default._schema.arguments]
            self.assertEqual(names[-2:], ["bf16_arithmetic", "float32_arithmetic"])
        q, k, v = (torch.randn(1, 40, 2, 16, requires_grad=True) for _ in range(3))
        o = gt.attention(q, k, v, causal=True, rope_dim=16)
        (g,) = torch.autograd.grad(o.sum(), q)
        for name in ("split_bf16x6", "split_bf16x3"):
            o2 = gt.attention(q, k, v, causal=True, rope_dim=16, float32_arithmetic=name)
            tol = 1e-5 if name == "split_bf16x6" else 1e-3
            torch.testing.assert_close(o2, o, atol=tol, rtol=0, msg=name)
            (g2,) = torch.autograd.grad(o2.sum(), q)
            torch.testing.assert_close(g2, g, atol=10 * tol, rtol=0, msg=name)
        f = torch.compile(lambda q, k, v: gt.attention(q, k, v, causal=True, rope_dim=16,
                                                       float32_arithmetic="split_bf16x6"),
                          backend="aot_eager", fullgraph=True)
        torch.testing.assert_close(f(q, k, v), o, atol=1e-5, rtol=0)
        qb, kb, vb = (x.detach().bfloat16() for x in (q, k, v))
        want = gt.attention(qb.float(), kb.float(), vb.float(), causal=True)
        for name in ("auto", "dot_products", "widen", "amx_tiles"):
            ob = gt.attention(qb, kb, vb, causal=True, bf16_arithmetic=name)
            torch.testing.assert_close(ob.float(), want, atol=2e-2, rtol=0, msg=name)
        for kwargs in ({"bf16_arithmetic": "tiles"}, {"float32_arithmetic": "split"}):
            with self.assertRaises(ValueError):
                gt.attention(q, k, v, **kwargs)
        # Every call of the options builder sees the two codes, distinct so that a swap
        # shows: the forward and the backward, eager and compiled (the split modes equal
        # the default on CPUs without AMX, so the results alone could not tell).
        from unittest import mock
        for compiled in (False, True):
            call = lambda q, k, v: gt.attention(q, k, v, causal=True, bf16_arithmetic="amx_tiles",
                                                float32_arithmetic="split_bf16x6")
            if compiled:
                call = torch.compile(call, backend="aot_eager", fullgraph=True)
            with mock.patch.object(gt, "_options", wraps=gt._options) as spy:
                call(q, k, v).sum().backward()
            seen = [c.args[19] if len(c.args) > 19 else c.kwargs.get("arithmetic")
                    for c in spy.call_args_list]
            self.assertGreaterEqual(len(seen), 2, compiled)  # forward and backward
            self.assertEqual(set(map(tuple, seen)), {(3, 1)}, compiled)
        # The codes reach the C ABI (which refuses an unknown one by name).
        for name in ("bf16_arithmetic", "float32_arithmetic"):
            with self.assertRaisesRegex(gpe.GpeError, name):
                gt.forward_impl(q.detach(), k.detach(), v.detach(), None, None, None, None, True,
                                0.0, 0, 10000.0, "half", "", 0, 0, 0, **{name: 7})
            with self.assertRaisesRegex(gpe.GpeError, name):
                x = q.detach()
                torch.ops.gpe.attention_backward_with_parameters(
                    x, x, x, None, None, x, None, None, None, None, True, 0.0, 0, 10000.0,
                    "half", "", 0, 0, 0, 0, None, None, None, None, None, None, None, None,
                    [False] * 9, **{name: 7})

    def test_lse_strided_inputs_and_registration(self):
        # lse equals logsumexp of the eager scores (double, 1e-10); a transposed
        # ([b, h, s, d] -> [b, s, h, d]) input runs in place of a copy with equal results;
        # the operator passes torch.library.opcheck (schema, fake tensors, autograd
        # registration) and traces under torch.compile (aot_eager: no C++ compiler needed).
        q, k, v = self.rand(1, 6, 2, 8), self.rand(1, 6, 2, 8), self.rand(1, 6, 2, 8)
        o, lse = gt.attention(q, k, v, causal=True, return_lse=True)
        self.assertFalse(lse.requires_grad)
        scores = torch.einsum("ihd,jhd->hij", q[0], k[0]) / 8 ** 0.5
        scores = scores.masked_fill(torch.ones(6, 6, dtype=torch.bool).triu(1), float("-inf"))
        torch.testing.assert_close(lse, torch.logsumexp(scores, -1).T, atol=1e-10, rtol=0)
        qt = q.detach().transpose(1, 2).contiguous().transpose(1, 2).requires_grad_()
        ot = gt.attention(qt, k, v, causal=True)
        torch.testing.assert_close(ot, o, atol=1e-12, rtol=0)
        ot.sum().backward()
        self.assertEqual(qt.grad.stride(), qt.stride())
        args = (q.detach(), k.detach(), v.detach(), None, None, None, None, True, 0.0, 8,
                10000.0, "half", "causal", 0, 0, 1)
        torch.library.opcheck(torch.ops.gpe.attention_forward.default, args)
        f = torch.compile(lambda q, k, v: gt.attention(q, k, v, causal=True, rope_dim=8),
                          backend="aot_eager", fullgraph=True)
        torch.testing.assert_close(f(q, k, v), gt.attention(q, k, v, causal=True, rope_dim=8),
                                   atol=0, rtol=0)
        # Arguments that build objects per call (flash-attn's alibi_slopes, Shaw's
        # structured positions) run eagerly inside a compiled function (a graph break; it
        # raised AttributeError): the eager outputs and slope gradients, bit for bit.
        slopes = torch.tensor([0.5, 0.25], requires_grad=True)
        f = torch.compile(lambda q, k, v, s: gt.attention(q, k, v, alibi_slopes=s, causal=True),
                          backend="aot_eager")
        got, want = f(q, k, v, slopes), gt.attention(q, k, v, alibi_slopes=slopes, causal=True)
        torch.testing.assert_close(got, want, atol=0, rtol=0)
        torch.testing.assert_close(torch.autograd.grad(got.sum(), slopes)[0],
                                   torch.autograd.grad(want.sum(), slopes)[0], atol=0, rtol=0)
        table = torch.randn(5, q.shape[-1], dtype=q.dtype)
        f = torch.compile(lambda q, k, v: gt.attention(q, k, v, shaw_max_distance=2,
                                                       shaw_key_table=table), backend="aot_eager")
        torch.testing.assert_close(
            f(q, k, v), gt.attention(q, k, v, shaw_max_distance=2, shaw_key_table=table),
            atol=0, rtol=0)

    def test_decode_head_major_cache_view(self):
        # A KV cache kept as [b, h, s, d] and passed as its transpose (a view: decoding's
        # head-major path, 1100 keys so the keys are split across threads) gives what the
        # same values copied token-major give: the same float32 operations in the same
        # order per output row, so 1e-6 (a few float32 ulps of O(1) outputs) is ample,
        # far below a wrong head or stride (O(1)).
        q = torch.randn(1, 1, 8, 16)
        k_cache, v_cache = torch.randn(1, 2, 1100, 16), torch.randn(1, 2, 1100, 16)
        k, v = k_cache.transpose(1, 2), v_cache.transpose(1, 2)
        self.assertFalse(k.is_contiguous())
        o = gt.attention(q, k, v, causal=True)  # (no RoPE: keys read as stored)
        want = gt.attention(q, k.contiguous(), v.contiguous(), causal=True)
        torch.testing.assert_close(o, want, atol=1e-6, rtol=0)

    def bias_cases(self, s, h):
        """(name, bias object, causal) for the additive biases (one sequence of s tokens)."""
        t5 = gpe.T5Bias(self.rng.standard_normal((8, h)), max_distance=6)
        fox = gpe.FoxBias(self.rng.standard_normal((s, h)) * 2.0 + 1.0)
        w = self.rng.standard_normal((s, h, 2)) * 0.7
        u = self.rng.standard_normal((s, h, 2)) * 0.7
        ap = gpe.GrapeApBias(w, u)
        return [("t5", t5, False), ("t5 causal", t5, True), ("fox", fox, True),
                ("grape_ap", ap, True)]

    def test_gradcheck_float64_biases_and_rope_base(self):
        # The additive families through gpe.bias objects (T5, FoX, GRAPE-AP; ALiBi above)
        # and RoPE at another base, gradcheck in double as above (q, k, v; the bias
        # parameters are fixed: the ABI's backward returns dq, dk, dv only).
        s, h = 6, 2
        for name, bias, causal in self.bias_cases(s, h):
            q, k, v = self.rand(1, s, h, 8), self.rand(1, s, h, 8), self.rand(1, s, h, 8)
            with self.subTest(name):
                self.assertTrue(torch.autograd.gradcheck(
                    lambda q, k, v: gt.attention(q, k, v, causal=causal, bias=bias,
                                                 rope_dim=4), (q, k, v), fast_mode=True))
        q, k, v = self.rand(1, 5, 2, 8), self.rand(1, 7, 2, 8), self.rand(1, 7, 2, 8)
        self.assertTrue(torch.autograd.gradcheck(
            lambda q, k, v: gt.attention(q, k, v, causal=True, rope_dim=8, rope_base=500.0),
            (q, k, v), fast_mode=True))

    def test_biases_match_eager_softmax(self):
        # Forward and gradients against eager softmax(q.k scale + B) v where B is the bias
        # tile from bias.fill_tile, and FoX's tile against its formula c_i - c_j, c_t =
        # sum_{l <= t} ln sigmoid(x_l) (Lin et al.). Double on both sides: 1e-10 as above.
        s, h, d = 7, 2, 8
        pos = torch.arange(s)
        for name, bias, causal in self.bias_cases(s, h):
            q, k, v = self.rand(1, s, h, d), self.rand(1, s, h, d), self.rand(1, s, h, d)
            tile = torch.stack([torch.as_tensor(bias.fill_tile(i, pos.numpy(), pos.numpy()))
                                for i in range(h)])
            with self.subTest(name):
                o = gt.attention(q, k, v, causal=causal, bias=bias)
                sc = torch.einsum("ihd,jhd->hij", q[0], k[0]) / d ** 0.5 + tile
                if causal:
                    sc = sc.masked_fill(torch.ones(s, s, dtype=torch.bool).triu(1), -math.inf)
                want = torch.einsum("hij,jhd->ihd", torch.softmax(sc, -1), v[0])[None]
                torch.testing.assert_close(o, want, atol=1e-10, rtol=0)
                wgt = torch.randn(o.shape, dtype=torch.float64)
                got = torch.autograd.grad((o * wgt).sum(), (q, k, v))
                ref = torch.autograd.grad((want * wgt).sum(), (q, k, v))
                for a, b in zip(got, ref):
                    torch.testing.assert_close(a, b, atol=1e-10, rtol=0)
        logits = self.rng.standard_normal((s, h))
        c = torch.cumsum(F.logsigmoid(torch.as_tensor(logits)), 0)  # [s, h]
        tile = gpe.FoxBias(logits).fill_tile(1, pos.numpy(), pos.numpy())
        torch.testing.assert_close(torch.as_tensor(tile)[torch.ones(s, s).tril() > 0],
                                   (c[:, None, 1] - c[None, :, 1])[torch.ones(s, s).tril() > 0],
                                   atol=1e-12, rtol=0)

    def rope_schedules(self):
        """gpe.Rope in every schedule (Su et al.; Chen et al.; bloc97; Peng et al.; Ding et
        al.; Llama 3), xPos and partial interleaved rotary, head_dim 8."""
        return [
            ("default", gpe.Rope(8)),
            ("linear", gpe.Rope(8, schedule="linear", factor=4.0)),
            ("dynamic_ntk", gpe.Rope(8, schedule="dynamic_ntk", factor=2.0,
                                     original_max_position=8, current_length=32)),
            ("yarn", gpe.Rope(8, schedule="yarn", factor=4.0, original_max_position=8)),
            ("longrope", gpe.Rope(8, schedule="longrope", short_factor=[1.0, 1.5, 2.0, 2.5],
                                  long_factor=[2.0, 3.0, 4.0, 5.0], original_max_position=8,
                                  current_length=32)),
            ("llama3", gpe.Rope(8, schedule="llama3", factor=8.0, original_max_position=8)),
            ("xpos", gpe.Rope(8, xpos=True, xpos_scale_base=16.0)),
            ("partial interleaved", gpe.Rope(8, rotary_dim=4, pairing="interleaved")),
        ]

    def test_rope_operator_every_schedule(self):
        # gt.rope is the library's RoPE: equal to gpe.Rope.forward bitwise (the same call);
        # gradcheck in double through the library's backward (the map is linear in x, so
        # central differences are exact to rounding, ~1e-12, inside atol 1e-5); and each
        # schedule feeding attention, gradcheck of q, k, v through rope then attention.
        off = [100]
        for name, r in self.rope_schedules():
            x = self.rand(1, 5, 2, 8)
            with self.subTest(name):
                y = gt.rope(x, r, offsets=off)
                want = r.forward(x.detach().numpy(), offsets=off)
                self.assertTrue(np.array_equal(y.detach().numpy(), want))
                self.assertTrue(torch.autograd.gradcheck(
                    lambda x: gt.rope(x, r, offsets=off), (x,)))
                # Twice differentiable in eager mode too (the backward is the transpose's
                # own Function, whose gradient is the forward map).
                self.assertTrue(torch.autograd.gradgradcheck(
                    lambda x: gt.rope(x, r, offsets=off), (x,)))
                q, k, v = self.rand(1, 5, 2, 8), self.rand(1, 5, 2, 8), self.rand(1, 5, 2, 8)
                self.assertTrue(torch.autograd.gradcheck(
                    lambda q, k, v: gt.attention(gt.rope(q, r, offsets=off),
                                                 gt.rope(k, r, offsets=off, role="key"), v,
                                                 causal=True), (q, k, v), fast_mode=True))
        # float32 and bfloat16 storage; the registered operator traces under torch.compile.
        r = gpe.Rope(8)
        x = torch.randn(2, 3, 2, 8)
        y32 = gt.rope(x, r)
        torch.testing.assert_close(gt.rope(x.bfloat16(), r).float(), y32, atol=3e-2, rtol=0)
        f = torch.compile(lambda x: gt.rope(x, r), backend="aot_eager", fullgraph=True)
        torch.testing.assert_close(f(x), y32, atol=0, rtol=0)
        with self.assertRaises(TypeError):
            gt.rope(x, "rope")
        # Positions must be integers: fractional ones were floored silently.
        with self.assertRaises(TypeError):
            gt.rope(x, r, positions=torch.arange(6) / 2)
        # A gradient expanded along the sequence (stride 0) reaches the C backward
        # contiguous: the same as the explicit gradient.
        xg = x.clone().requires_grad_()
        (gt.rope(xg, r).sum(dim=1) ** 2).sum().backward()
        y = gt.rope(x, r)
        dy = (2.0 * y.sum(dim=1, keepdim=True)).expand_as(y).contiguous()
        want = torch.from_numpy(r.backward(dy.numpy()))
        torch.testing.assert_close(xg.grad, want, atol=1e-5, rtol=0)

    def test_positions_changed_in_place_before_backward_are_refused(self):
        # Positions are held by reference for the backward (not saved): changing them in
        # place in between is an error, as autograd gives for saved tensors, rather than a
        # gradient of other positions. Unchanged, the backward runs.
        q = self.rand(1, 4, 2, 8).requires_grad_()
        pos = torch.arange(4)
        out = gt.attention(q, q, q, causal=True, q_positions=pos, k_positions=pos)
        pos += 1
        with self.assertRaisesRegex(RuntimeError, "modified in place"):
            out.sum().backward()
        pos2 = torch.arange(4)
        gt.attention(q, q, q, causal=True, q_positions=pos2, k_positions=pos2).sum().backward()
        self.assertIsNotNone(q.grad)

    def test_attention_positions_must_be_integers(self):
        q = self.rand(1, 4, 2, 8)
        with self.assertRaises(TypeError):
            gt.attention(q, q, q, causal=True, q_positions=torch.arange(4) / 2,
                         k_positions=torch.arange(4) / 2)
        # Integer tensors and lists still pass.
        gt.attention(q, q, q, causal=True, q_positions=[0, 1, 2, 3], k_positions=torch.arange(4))

    # ---- Learnable parameters (gpe_attention_backward_with_parameters) ---------------

    def learnable_cases(self, s, h, d):
        """(name, make(params) -> attention kwargs, params, causal) for every learnable
        family; params are float64 leaves with requires_grad."""
        r = self.rng
        leaf = lambda x: torch.tensor(x, dtype=torch.float64, requires_grad=True)
        rot = lambda: r.standard_normal((2, d))
        skew = lambda a: a - a.transpose(-1, -2)
        tree = [list(r.integers(0, 2, size=r.integers(0, 4))) for _ in range(s)]
        axes = r.integers(-3, 4, size=(s, 2))
        return [
            ("alibi slopes", lambda m: dict(bias=gt.AlibiBias(m)), [leaf([0.5, 0.125])], True),
            ("alibi symmetric slopes", lambda m: dict(bias=gt.AlibiBias(m, symmetric=True)),
             [leaf([0.3, 0.7])], False),
            ("t5 table", lambda t: dict(bias=gt.T5Bias(t, max_distance=6)),
             [leaf(r.standard_normal((8, h)))], False),
            ("fox gate logits", lambda x: dict(bias=gt.FoxBias(x)),
             [leaf(r.standard_normal((s, h)) + 1.0)], True),
            ("grape_a slopes", lambda m: dict(bias=gt.GrapeABias(slopes=m)),
             [leaf([0.25, 0.6])], True),
            ("grape_a gated", lambda x: dict(bias=gt.GrapeABias(gate_logits=x)),
             [leaf(r.standard_normal((s, h)) + 1.0)], True),
            ("grape_ap w u", lambda w, u: dict(bias=gt.GrapeApBias(w, u)),
             [leaf(r.standard_normal((s, h, 2)) * 0.7), leaf(r.standard_normal((s, h, 2)) * 0.7)],
             True),
            ("grape_m a b omega", lambda a, b, w: dict(encoding=gt.GrapeMEncoding(a, b, w)),
             [leaf(rot()), leaf(rot()), leaf([0.3, -0.7])], False),
            ("shaw tables", lambda tk, tv: dict(shaw_max_distance=2, shaw_key_table=tk,
                                                shaw_value_table=tv),
             [leaf(r.standard_normal((5, d))), leaf(r.standard_normal((5, d)))], True),
            # Kogkalidis et al.'s generators, S = A - A^T (skew whatever gradcheck does to
            # A): a sequence module, a tree's and a grid's generators as tensors.
            ("algebraic sequence", lambda a: dict(encoding=gt.AlgebraicSequenceEncoding(a)),
             [leaf(0.3 * r.standard_normal((d, d)))], True),
            ("algebraic tree", lambda a: dict(algebraic_tree=skew(a), q_tree=tree, k_tree=tree),
             [leaf(0.3 * r.standard_normal((2, d, d)))], True),
            ("algebraic grid", lambda a: dict(algebraic_grid=skew(a), q_axes=axes, k_axes=axes),
             [leaf(0.3 * r.standard_normal((2, d // 2, d // 2)))], False),
        ]

    def test_gradcheck_float64_learnable_parameters(self):
        # Every learnable family's parameters get dL/dparameters from the library's backward
        # (accumulated inside the kernels), checked by gradcheck in double against central
        # differences (eps 1e-6: truncation ~1e-12 on these smooth O(1) maps, inside atol
        # 1e-5 / rtol 1e-3, while a missing or wrong term is O(0.1)), jointly with q (the
        # full Jacobian: 5 x 2 x 4 outputs).
        s, h, d = 5, 2, 4
        for name, make, params, causal in self.learnable_cases(s, h, d):
            q, k, v = self.rand(1, s, h, d), self.rand(1, s, h, d), self.rand(1, s, h, d)
            with self.subTest(name):
                fn = lambda q, *p: gt.attention(q, k, v, causal=causal, **make(*p))
                self.assertTrue(torch.autograd.gradcheck(fn, (q, *params)))
                # Every parameter receives a gradient (none is silently dropped).
                fn(q, *params).sum().backward()
                for p in params:
                    self.assertIsNotNone(p.grad)
                    self.assertGreater(float(p.grad.abs().sum()), 0.0)

    def test_algebraic_sequence_encoding_learns(self):
        # A learnable generator finds its way back to one that produced the targets: Adam
        # (lr 0.05, 60 steps, float64) on ||o(A) - o(A*)||^2 from A* + N(0, 0.3^2) noise
        # lowers the loss at least twentyfold (about a thousandfold when written), with
        # S = A - A^T skew after every update (the handle accepts each), and the module's
        # weight is its one registered Parameter.
        torch.manual_seed(3)
        s, h, d = 8, 2, 4
        q, k, v = (torch.randn(1, s, h, d, dtype=torch.float64) for _ in range(3))
        target_weight = 0.4 * torch.randn(d, d, dtype=torch.float64)
        with torch.no_grad():
            target = gt.attention(q, k, v, causal=True,
                                  encoding=gt.AlgebraicSequenceEncoding(target_weight))
        start = target_weight + 0.3 * torch.randn(d, d, dtype=torch.float64)
        enc = gt.AlgebraicSequenceEncoding(torch.nn.Parameter(start))
        self.assertEqual([n for n, _ in enc.named_parameters()], ["weight"])
        opt = torch.optim.Adam(enc.parameters(), lr=0.05)
        losses = []
        for _ in range(60):
            opt.zero_grad()
            loss = ((gt.attention(q, k, v, causal=True, encoding=enc) - target) ** 2).sum()
            loss.backward()
            opt.step()
            losses.append(float(loss.detach()))
        self.assertLess(losses[-1], 0.05 * losses[0])

    def test_algebraic_generators_under_compile(self):
        # The generator travels as gpe::attention_forward's last input: torch.compile
        # (aot_eager, through the registered operators and their fake implementations)
        # gives the eager outputs and gradients bitwise for a module built outside it.
        q, k, v = self.rand(1, 5, 2, 4), self.rand(1, 5, 2, 4), self.rand(1, 5, 2, 4)
        weight = torch.nn.Parameter(0.3 * torch.randn(4, 4, dtype=torch.float64))
        enc = gt.AlgebraicSequenceEncoding(weight)
        fn = lambda q, k, v: gt.attention(q, k, v, causal=True, encoding=enc)
        f = torch.compile(fn, backend="aot_eager", fullgraph=True)
        o, want = f(q, k, v), fn(q, k, v)
        self.assertTrue(torch.equal(o, want))
        for a, b in zip(torch.autograd.grad(o.sum(), (q, weight)),
                        torch.autograd.grad(want.sum(), (q, weight))):
            self.assertTrue(torch.equal(a, b))

    def test_learnable_matches_fixed_objects(self):
        # The learnable forms build the same library handles as the fixed gpe objects: equal
        # outputs bitwise in float32 (one kernel, one set of parameters), and float32 inputs
        # with float64 parameters give float64 parameter gradients.
        s, h, d = 6, 2, 8
        table = self.rng.standard_normal((8, h))
        logits = self.rng.standard_normal((s, h))
        q, k, v = (torch.randn(1, s, h, d) for _ in range(3))
        pairs = [(gt.T5Bias(torch.as_tensor(table)), gpe.T5Bias(table)),
                 (gt.FoxBias(torch.as_tensor(logits)), gpe.FoxBias(logits)),
                 (gt.AlibiBias.press(h), gpe.Alibi(h))]
        for mine, fixed in pairs:
            with self.subTest(fixed.kind):
                self.assertTrue(torch.equal(gt.attention(q, k, v, causal=True, bias=mine),
                                            gt.attention(q, k, v, causal=True, bias=fixed)))
        m = torch.nn.Parameter(torch.tensor([0.5, 0.25], dtype=torch.float64))
        bias = gt.AlibiBias(m)
        self.assertEqual([n for n, _ in bias.named_parameters()], ["slopes"])
        gt.attention(q.requires_grad_(), k, v, causal=True, bias=bias).sum().backward()
        self.assertEqual(m.grad.dtype, torch.float64)
        self.assertIsNotNone(q.grad)

    def test_learnable_registration_and_compile(self):
        # gpe::attention_forward with a learnable bias tensor passes opcheck (its autograd
        # goes through gpe::attention_backward_with_parameters, traced with fake tensors),
        # and a module built outside torch.compile gives the eager outputs and gradients
        # bitwise (aot_eager: the same library calls).
        q, k, v = self.rand(1, 5, 2, 4), self.rand(1, 5, 2, 4), self.rand(1, 5, 2, 4)
        table = torch.nn.Parameter(torch.randn(8, 2, dtype=torch.float64))
        t5 = gt.T5Bias(table, max_distance=6)
        args = (q, k, v, None, None, None, None, False, 0.0, 0, 10000.0, "half", "", 0,
                gt._register(t5), 1, 0, table)
        torch.library.opcheck(torch.ops.gpe.attention_forward.default, args)
        f = torch.compile(lambda q, k, v: gt.attention(q, k, v, bias=t5), backend="aot_eager",
                          fullgraph=True)
        o = f(q, k, v)
        want = gt.attention(q, k, v, bias=t5)
        self.assertTrue(torch.equal(o, want))
        for a, b in zip(torch.autograd.grad(o.sum(), (q, table)),
                        torch.autograd.grad(want.sum(), (q, table))):
            self.assertTrue(torch.equal(a, b))

    # ---- GRAPE-A and structured positions (trees, grids) --------------------------------

    def test_grape_a_equals_alibi_and_gradcheck(self):
        # GRAPE-A's score term is ALiBi's causal -m (i - j) (GRAPE, "Additive GRAPE"): both
        # paths (closed form and lifted rows) match gt.attention with ALiBi of the same
        # slopes to 1e-10 in double (one bias value per score, computed two ways), and
        # gradcheck (double, as above) passes for q, k, v through each path.
        s, h, d = 6, 2, 8
        slopes = np.array([0.5, 0.125])
        q, k, v = self.rand(1, s, h, d), self.rand(1, s, h, d), self.rand(1, s, h, d)
        want = gt.attention(q, k, v, causal=True, bias=gpe.Alibi(h, slopes=slopes))
        for path in ("closed_form", "lifted"):
            ga = gpe.GrapeABias(num_heads=h, head_dim=d, slopes=slopes, path=path)
            with self.subTest(path):
                torch.testing.assert_close(gt.attention(q, k, v, causal=True, bias=ga), want,
                                           atol=1e-10, rtol=0)
                self.assertTrue(torch.autograd.gradcheck(
                    lambda q, k, v: gt.attention(q, k, v, causal=True, bias=ga), (q, k, v),
                    fast_mode=True))
        gated = gpe.GrapeABias(head_dim=d, gate_logits=self.rng.standard_normal((s, h)))
        self.assertTrue(torch.autograd.gradcheck(
            lambda q, k, v: gt.attention(q, k, v, causal=True, bias=gated), (q, k, v),
            fast_mode=True))

    def structured_cases(self, s, d):
        """(name, attention kwargs, transform(x [s, h, d], role) -> encoded x) for algebraic
        trees and grids (Kogkalidis et al., secs. 3.2-3.3) and axial RoPE."""
        r = self.rng
        skew = lambda m: (lambda a: (a - a.T) * 0.4)(r.standard_normal((m, m)))
        tree_skews = np.stack([skew(d), skew(d)])
        tree = gpe.AlgebraicTree(tree_skews)
        addresses = [[], [0], [1], [0, 1], [1, 1, 0], [0, 0]][:s]
        grid_skews = np.stack([skew(d // 2), skew(d // 2)])
        grid = gpe.AlgebraicGrid(list(grid_skews))
        axes = r.integers(0, 5, size=(s, 2))

        def per_head(apply):  # x [tokens, heads, d]: each head's rows through `apply`
            rows = lambda x, i: x[:, i].detach().contiguous().numpy()
            return lambda x: torch.stack([torch.as_tensor(apply(rows(x, i)))
                                          for i in range(x.shape[1])], 1)

        return [
            ("algebraic tree", dict(algebraic_tree=tree_skews, q_tree=addresses,
                                    k_tree=addresses),
             per_head(lambda x: tree.apply(addresses, x))),
            ("algebraic grid", dict(algebraic_grid=grid_skews, q_axes=axes, k_axes=axes),
             per_head(lambda x: grid.apply(axes, x))),
        ]

    def test_structured_positions_tree_grid(self):
        # Trees and grids inside the kernel equal the encoding applied outside by gpe's
        # AlgebraicTree / AlgebraicGrid (a separate code path) followed by plain attention:
        # 1e-10 in double (products of a few d x d orthogonal matrices, ~1e-15). gradcheck
        # in double (as above) for q, k, v through each structured encoding, causal (the
        # tokens' order still comes from q_positions / k_positions).
        s, h, d = 6, 2, 4
        for name, kw, enc in self.structured_cases(s, d):
            q, k, v = self.rand(1, s, h, d), self.rand(1, s, h, d), self.rand(1, s, h, d)
            with self.subTest(name):
                o = gt.attention(q, k, v, causal=True, **kw)
                want = gt.attention(enc(q[0])[None], enc(k[0])[None], v, causal=True)
                torch.testing.assert_close(o, want, atol=1e-10, rtol=0)
                self.assertTrue(torch.autograd.gradcheck(
                    lambda q, k, v: gt.attention(q, k, v, causal=True, **kw), (q, k, v)))

    def test_bad_input_raises(self):
        q = torch.randn(1, 4, 3, 8)
        k = torch.randn(1, 4, 2, 8)
        with self.assertRaises(gpe.GpeError):
            gt.attention(q, k, k)  # 3 query heads over 2 kv heads
        with self.assertRaises(gpe.GpeError):
            gt.attention(k, k.double(), k)  # mixed dtypes
        with self.assertRaises(ValueError):
            gt.attention(k, k, k, alibi="sideways")
        with self.assertRaises(TypeError):
            gt.attention(k, k, k, encoding="rope")
        with self.assertRaisesRegex(gpe.GpeError, "float16"):
            gt.attention(k.half(), k.half(), k.half())  # float16 only as a KV cache
        with self.assertRaises(TypeError):
            gt.attention(k, k, k, bias="alibi")
        with self.assertRaises(ValueError):
            gt.attention(k, k, k, alibi="causal", bias=gpe.Alibi(2))


# ---- What inference engines add: RoPE handles, windows, softcap, sinks, SDPA's names --


def repeat_kv(x, hq):
    """[b, s, hkv, d] -> [b, hq, s, d] with each kv head repeated for its query heads (SDPA's
    layout, GQA expanded)."""
    return x.transpose(1, 2).repeat_interleave(hq // x.shape[2], 1)


def window_mask(s_q, s_k, left, right, causal):
    """flash-attn's window on the KV-cache positions: query i at s_k - s_q + i may see key j
    iff pos_i - left <= j <= pos_i + right (-1: that side unbounded), and j <= pos_i if
    causal. Boolean [s_q, s_k], True where allowed (SDPA's convention)."""
    pq = torch.arange(s_k - s_q, s_k)[:, None]
    pk = torch.arange(s_k)[None, :]
    m = torch.ones(s_q, s_k, dtype=torch.bool)
    if left >= 0:
        m &= pk >= pq - left
    if right >= 0:
        m &= pk <= pq + right
    if causal:
        m &= pk <= pq
    return m


def gemma2_softcap_attention(q, k, v, cap, causal):
    """Gemma 2's attention with a logit softcap, written out (bshd in, bshd out):
    scores = q k^T * scale; scores = cap * tanh(scores / cap); mask; softmax; @ v."""
    hq, d = q.shape[2], q.shape[3]
    qh, kh, vh = q.transpose(1, 2), repeat_kv(k, hq), repeat_kv(v, hq)
    scores = qh @ kh.transpose(-1, -2) * d ** -0.5
    scores = cap * torch.tanh(scores / cap)
    if causal:
        scores = scores.masked_fill(~window_mask(q.shape[1], k.shape[1], -1, -1, True),
                                    float("-inf"))
    return (torch.softmax(scores, dim=-1) @ vh).transpose(1, 2)


def gpt_oss_sink_attention(q, k, v, sinks, sliding_window=0):
    """gpt-oss's causal attention with sinks (openai/gpt-oss, torch model's sdpa): the
    per-head sink logit is concatenated to every row of scores as an extra column, the
    row softmaxed, the column dropped; sliding_window W > 0 masks keys W or more behind.
    Equal lengths, bshd in and out."""
    b, s, hq, d = q.shape
    qh, kh, vh = q.transpose(1, 2), repeat_kv(k, hq), repeat_kv(v, hq)
    mask = torch.triu(q.new_full((s, s), float("-inf")), diagonal=1)
    if sliding_window > 0:
        mask += torch.tril(mask.new_full((s, s), float("-inf")), diagonal=-sliding_window)
    qk = qh @ kh.transpose(-1, -2) * d ** -0.5 + mask
    sink_col = sinks.to(q.dtype).reshape(1, hq, 1, 1).expand(b, hq, s, 1)
    w = torch.softmax(torch.cat([qk, sink_col], dim=-1), dim=-1)[..., :-1]
    return (w @ vh).transpose(1, 2)


@needs_torch
@needs_torch
class TorchAttnMaskTest(unittest.TestCase):
    """SDPA's attn_mask against torch.nn.functional.scaled_dot_product_attention with the
    same mask, forward and q, k, v gradients, float32: 1e-5 (float32 kernels against
    PyTorch's float32 math over 16 keys of O(1) values; both round differently)."""

    def qkv(self, seed, b=2, sq=6, sk=16, hq=4, hkv=2, d=16):
        g = torch.Generator().manual_seed(seed)
        make = lambda *s: torch.randn(*s, generator=g, dtype=torch.float32).requires_grad_()
        return make(b, sq, hq, d), make(b, sk, hkv, d), make(b, sk, hkv, d)

    def sdpa(self, q, k, v, mask):
        hq = q.shape[2]
        return F.scaled_dot_product_attention(
            q.transpose(1, 2), repeat_kv(k, hq), repeat_kv(v, hq),
            attn_mask=mask).transpose(1, 2)

    def check(self, q, k, v, mask, tol=1e-5):
        o = gt.attention(q, k, v, attn_mask=mask)
        want = self.sdpa(q, k, v, mask)
        torch.testing.assert_close(o, want, rtol=tol, atol=tol)
        w = torch.randn_like(o)
        got = torch.autograd.grad((o * w).sum(), (q, k, v))
        ref = torch.autograd.grad((want * w).sum(), (q, k, v))
        for a, b in zip(got, ref):
            torch.testing.assert_close(a, b, rtol=tol, atol=tol)

    def test_masks_match_sdpa(self):
        g = torch.Generator().manual_seed(3)
        q, k, v = self.qkv(1)
        b, sq, hq, sk = 2, 6, 4, 16
        allowed = torch.rand(b, hq, sq, sk, generator=g) > 0.4
        allowed[..., 0] = True  # no fully masked row (tested below)
        cases = {
            "bool [B, H, Lq, Lk]": allowed,
            "bool [Lq, Lk] (2-D, broadcast)": allowed[0, 0],
            "bool [B, 1, Lq, Lk] expanded over heads (stride 0)":
                allowed[:, :1].expand(b, hq, sq, sk),
            "float [H, Lq, Lk] (3-D)": torch.randn(hq, sq, sk, generator=g),
            "float with -inf, [B, 1, 1, Lk] (key padding)":
                torch.where(allowed[:, :1, :1], torch.zeros(()), torch.tensor(-math.inf)),
            "float transposed (strided)": torch.randn(b, hq, sk, sq, generator=g).transpose(2, 3),
        }
        for name, mask in cases.items():
            with self.subTest(name):
                self.check(q, k, v, mask)

    def test_fully_masked_row_is_zero(self):
        # A row with no allowed key: GroupPE gives o = 0 (descriptor.h, SCORE MASK) and no
        # gradient through it; SDPA gives 0 too in PyTorch 2.15 and NaN in older versions'
        # math path; the other rows match SDPA.
        q, k, v = self.qkv(4)
        mask = torch.ones(6, 16, dtype=torch.bool)
        mask[2] = False
        o = gt.attention(q, k, v, attn_mask=mask)
        self.assertTrue(torch.equal(o[:, 2], torch.zeros_like(o[:, 2])))
        want = self.sdpa(q, k, v, mask)
        self.assertTrue((torch.isnan(want[:, 2]) | (want[:, 2] == 0)).all())
        keep = [0, 1, 3, 4, 5]
        torch.testing.assert_close(o[:, keep], want[:, keep], rtol=1e-5, atol=1e-5)
        dq, = torch.autograd.grad(o.sum(), q)
        self.assertTrue(torch.equal(dq[:, 2], torch.zeros_like(dq[:, 2])))

    def test_mask_under_compile(self):
        q, k, v = self.qkv(5)
        mask = torch.rand(6, 16, generator=torch.Generator().manual_seed(6)) > 0.3
        mask[:, 0] = True
        fn = lambda q, k, v, m: gt.attention(q, k, v, attn_mask=m)
        f = torch.compile(fn, backend="aot_eager", fullgraph=True)
        o, want = f(q, k, v, mask), fn(q, k, v, mask)
        self.assertTrue(torch.equal(o, want))
        for a, b in zip(torch.autograd.grad(o.sum(), (q, k, v)),
                        torch.autograd.grad(want.sum(), (q, k, v))):
            self.assertTrue(torch.equal(a, b))


class TorchInferenceOptionsTest(unittest.TestCase):
    # float32 parity with PyTorch, the criterion of test_float32_matches_sdpa: each side's
    # float32 error is ~1e-6 on these O(1) outputs and gradients (head_dim 32, 64 tokens;
    # measured <= 4e-6 with the softcap's scores at |x| ~ 10 and for the sinks' gradient,
    # which sums 2 x 64 rows per head), so 2e-5 on outputs and 1e-4 on gradients leave
    # margin while a window off by one key, a cap applied after the mask or a sink left out
    # of the denominator moves them by >= 1e-2.
    O_TOL, G_TOL = 2e-5, 1e-4

    def setUp(self):
        torch.manual_seed(0)

    def qkv(self, b=2, sq=64, sk=64, hq=4, hkv=2, d=32, scale=1.0):
        q = (scale * torch.randn(b, sq, hq, d)).requires_grad_()
        k = torch.randn(b, sk, hkv, d, requires_grad=True)
        v = torch.randn(b, sk, hkv, d, requires_grad=True)
        return q, k, v

    def check(self, o, want, inputs, o_tol, g_tol):
        torch.testing.assert_close(o, want, atol=o_tol, rtol=0)
        w = torch.randn_like(o)
        got = torch.autograd.grad((o * w).sum(), inputs)
        ref = torch.autograd.grad((want * w).sum(), inputs)
        for g, r in zip(got, ref):
            torch.testing.assert_close(g, r, atol=g_tol, rtol=0)

    def test_window_matches_sdpa_with_boolean_mask(self):
        # SDPA's names (scale, enable_gqa) and flash-attn's window_size and causal (both
        # aligned bottom-right: the KV-cache positions) against SDPA with the equivalent
        # explicit boolean mask; fewer queries than keys, GQA.
        for left, right, causal, sq in ((15, -1, True, 64), (8, 4, False, 64), (6, 0, False, 40),
                                        (-1, 3, False, 40), (0, 0, True, 40)):
            q, k, v = self.qkv(sq=sq)
            with self.subTest(window=(left, right), causal=causal, sq=sq):
                o = gt.attention(q, k, v, causal=causal, scale=0.2, enable_gqa=True,
                                 window_size=(left, right))
                mask = window_mask(sq, 64, left, right, causal)
                want = F.scaled_dot_product_attention(
                    q.transpose(1, 2), repeat_kv(k, 4), repeat_kv(v, 4), attn_mask=mask,
                    scale=0.2).transpose(1, 2)
                self.check(o, want, (q, k, v), self.O_TOL, self.G_TOL)

    def test_is_causal_is_sdpas_top_left(self):
        # SDPA's is_causal with seq_q != seq_k masks top-left (query i sees keys j <= i),
        # fewer and more queries than keys, forward and gradients against SDPA in float64
        # (tolerance 1e-12: both are exact softmaxes of the same 5 scores per row, rounding
        # of a few operations in double); with a positional encoding the alignment is
        # ambiguous and refused.
        for sq in (3, 6):
            q = torch.randn(1, sq, 2, 8, dtype=torch.float64, requires_grad=True)
            k = torch.randn(1, 5, 2, 8, dtype=torch.float64, requires_grad=True)
            v = torch.randn(1, 5, 2, 8, dtype=torch.float64, requires_grad=True)
            with self.subTest(sq=sq):
                o = gt.attention(q, k, v, is_causal=True)
                want = F.scaled_dot_product_attention(
                    q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                    is_causal=True).transpose(1, 2)
                self.check(o, want, (q, k, v), 1e-12, 1e-12)
                with self.assertRaisesRegex(ValueError, "top-left"):
                    gt.attention(q, k, v, is_causal=True, rope_dim=8)
                # Explicit positions define the alignment: causal over them.
                qp, kp = torch.arange(sq) + 2, torch.arange(5)
                torch.testing.assert_close(
                    gt.attention(q, k, v, is_causal=True, rope_dim=8, q_positions=qp,
                                 k_positions=kp),
                    gt.attention(q, k, v, causal=True, rope_dim=8, q_positions=qp,
                                 k_positions=kp), rtol=0, atol=0)
        # Equal lengths: one alignment, encodings allowed.
        q, k, v = (torch.randn(1, 5, 2, 8, dtype=torch.float64) for _ in range(3))
        torch.testing.assert_close(gt.attention(q, k, v, is_causal=True, rope_dim=8),
                                   gt.attention(q, k, v, causal=True, rope_dim=8), rtol=0, atol=0)

    def test_is_causal_top_left_batched(self):
        # The top-left default positions hold one entry per token of every sequence
        # (batch-major token order), so batch >= 2 with seq_q != seq_k runs: float32 against
        # SDPA's is_causal, fewer and more queries than keys, GQA.
        for sq, sk in ((40, 64), (64, 40)):
            q, k, v = self.qkv(b=2, sq=sq, sk=sk)
            with self.subTest(sq=sq, sk=sk):
                o = gt.attention(q, k, v, is_causal=True, enable_gqa=True)
                want = F.scaled_dot_product_attention(
                    q.transpose(1, 2), repeat_kv(k, 4), repeat_kv(v, 4),
                    is_causal=True).transpose(1, 2)
                self.check(o, want, (q, k, v), self.O_TOL, self.G_TOL)

    def test_sdpa_inputs_scale_zero_and_expanded(self):
        q, k, v = self.qkv(b=1, sq=8, sk=8)
        # scale=0 would select the library's default 1/sqrt(d): refused.
        with self.assertRaisesRegex(ValueError, "scale=0"):
            gt.attention(q, k, v, scale=0.0)
        with self.assertRaisesRegex(ValueError, "scale=0"):
            gt.attention(q, k, v, softmax_scale=0.0)
        # Keys and values expanded over the batch (stride 0), as SDPA takes them: copied,
        # then as SDPA within float32 rounding (1e-5 on outputs of size ~1).
        k0 = torch.randn(1, 8, 2, 32)
        v0 = torch.randn(1, 8, 2, 32)
        qb = torch.randn(3, 8, 2, 32)
        ke, ve = k0.expand(3, 8, 2, 32), v0.expand(3, 8, 2, 32)
        want = F.scaled_dot_product_attention(qb.transpose(1, 2), ke.transpose(1, 2),
                                              ve.transpose(1, 2)).transpose(1, 2)
        torch.testing.assert_close(gt.attention(qb, ke, ve), want, atol=1e-5, rtol=0)

    def test_closed_handles_are_refused(self):
        # A closed gpe handle read as NULL: no bias / encoding, plain attention silently.
        q, k, v = self.qkv(b=1, sq=8, sk=8)
        a = gpe.Alibi(4)
        g = gpe.GrapeM(np.ones(32), np.linspace(0, 1, 32), 0.5)
        for name, kw in (("bias", dict(bias=a)), ("encoding", dict(encoding=g))):
            kw[name].close()
            with self.subTest(name):
                with self.assertRaisesRegex(ValueError, "closed"):
                    gt.attention(q, k, v, causal=True, **kw)

    def test_double_backward_raises(self):
        # The attention backward is not itself differentiable: create_graph=True then a
        # second backward raises, rather than leaving the second-order terms out.
        q, k, v = self.qkv(b=1, sq=8, sk=8)
        o = gt.attention(q, k, v, causal=True)
        gq, = torch.autograd.grad(o.pow(2).sum(), q, create_graph=True)
        with self.assertRaisesRegex(RuntimeError, "differentiate twice"):
            (o.sum() + gq.pow(2).sum()).backward()

    def test_structured_axes_edited_after_forward(self):
        # q_axes / k_axes are copied at the call: an in-place edit before backward leaves
        # the gradient as it was (bit for bit).
        g = torch.Generator().manual_seed(11)
        q, k, v = (torch.randn(1, 6, 2, 8, generator=g, dtype=torch.float64, requires_grad=True)
                   for _ in range(3))
        ax = torch.stack([torch.arange(6), 2 * torch.arange(6)], 1)
        o = gt.attention(q, k, v, rope_dim=8, rope_axes=2, q_axes=ax, k_axes=ax)
        ref = torch.autograd.grad(o.sum(), q)[0]
        o = gt.attention(q, k, v, rope_dim=8, rope_axes=2, q_axes=ax, k_axes=ax)
        ax.mul_(7)
        torch.testing.assert_close(torch.autograd.grad(o.sum(), q)[0], ref, rtol=0, atol=0)

    def test_value_head_size_matches_sdpa(self):
        # v (and o) with a head size of their own (DeepSeek's MLA: 192 / 128; here 48 / 32
        # and 16 / 40), GQA, causal, against SDPA (whose math path takes Ev != E), forward
        # and backward; float64 gradcheck through the exact reference.
        for d, dv in ((48, 32), (16, 40)):
            q, k, _ = self.qkv(d=d)
            v = torch.randn(2, 64, 2, dv, requires_grad=True)
            with self.subTest(d=d, dv=dv):
                o = gt.attention(q, k, v, is_causal=True, enable_gqa=True)
                self.assertEqual(tuple(o.shape), (2, 64, 4, dv))
                want = F.scaled_dot_product_attention(
                    q.transpose(1, 2), repeat_kv(k, 4), repeat_kv(v, 4),
                    is_causal=True).transpose(1, 2)
                self.check(o, want, (q, k, v), self.O_TOL, self.G_TOL)
        q = torch.randn(1, 5, 2, 6, dtype=torch.float64, requires_grad=True)
        k = torch.randn(1, 7, 1, 6, dtype=torch.float64, requires_grad=True)
        v = torch.randn(1, 7, 1, 3, dtype=torch.float64, requires_grad=True)
        self.assertTrue(torch.autograd.gradcheck(
            lambda q, k, v: gt.attention(q, k, v, causal=True), (q, k, v), fast_mode=True))

    def test_softcap_matches_gemma2(self):
        for causal, cap in ((True, 5.0), (False, 20.0)):
            q, k, v = self.qkv(scale=3.0)
            with self.subTest(causal=causal, cap=cap):
                o = gt.attention(q, k, v, causal=causal, softcap=cap)
                want = gemma2_softcap_attention(q, k, v, cap, causal)
                self.check(o, want, (q, k, v), self.O_TOL, self.G_TOL)

    def test_sinks_match_gpt_oss(self):
        # Forward and backward, the sinks' gradient included, through autograd; gpt-oss's
        # sliding window W is window_size=(W - 1, 0) with causal.
        for window in (0, 16):
            q, k, v = self.qkv()
            sinks = torch.tensor([0.5, -2.0, 3.0, 1.25], requires_grad=True)
            with self.subTest(sliding_window=window):
                o = gt.attention(q, k, v, causal=True, sinks=sinks,
                                 window_size=(window - 1, 0) if window else None)
                want = gpt_oss_sink_attention(q, k, v, sinks, window)
                self.check(o, want, (q, k, v, sinks), self.O_TOL, self.G_TOL)

    def test_sinks_past_float32_are_refused(self):
        # Sinks are float32 logits: a finite float64 logit past float32's range would round
        # to +inf (its head's rows NaN) or -inf (its sink dropped); refused naming its index,
        # while +-inf given as such keeps its meaning (-inf: no sink).
        q, k, v = self.qkv()
        for bad, where in (([0.0, 1e39, 0.0, 0.0], "sinks[1]"),
                           ([0.0, 0.0, -1e39, 0.0], "sinks[2]")):
            with self.subTest(sinks=bad):
                with self.assertRaisesRegex(ValueError, r"%s.*float32's range" % re.escape(where)):
                    gt.attention(q, k, v, causal=True,
                                 sinks=torch.tensor(bad, dtype=torch.float64))
        z = torch.tensor([0.0, float("-inf"), 0.0, 0.0], dtype=torch.float64)
        o = gt.attention(q, k, v, causal=True, sinks=z)
        self.assertTrue(bool(torch.isfinite(o).all()))

    def test_window_softcap_sinks_together_float64(self):
        # All three at once in float64 (the exact reference). torch.autograd.gradcheck in q,
        # k, v (central differences eps 1e-6: ~1e-9 on these O(1) Jacobians, inside atol
        # 1e-5 / rtol 1e-3, while a wrong term is O(0.1)). The sinks are float32 logits (a
        # 1e-6 step is lost to their rounding), so their gradient is checked against
        # autograd through the eager formulas instead, both double (~1e-15): 1e-10.
        q = torch.randn(1, 6, 4, 8, dtype=torch.float64, requires_grad=True)
        k = torch.randn(1, 9, 2, 8, dtype=torch.float64, requires_grad=True)
        v = torch.randn(1, 9, 2, 8, dtype=torch.float64, requires_grad=True)
        z = torch.tensor([0.5, -1.0, 2.0, 0.0], dtype=torch.float64, requires_grad=True)
        kw = dict(causal=True, window_size=(3, -1), softcap=2.0)
        self.assertTrue(torch.autograd.gradcheck(
            lambda q, k, v: gt.attention(q, k, v, sinks=z.detach(), **kw), (q, k, v),
            fast_mode=True))
        o = gt.attention(q, k, v, sinks=z, **kw)
        scores = 2.0 * torch.tanh(q.transpose(1, 2) @ repeat_kv(k, 4).transpose(-1, -2)
                                  * 8 ** -0.5 / 2.0)
        scores = scores.masked_fill(~window_mask(6, 9, 3, -1, True), float("-inf"))
        col = z.reshape(1, 4, 1, 1).expand(1, 4, 6, 1)
        w = torch.softmax(torch.cat([scores, col], -1), -1)[..., :-1]
        want = (w @ repeat_kv(v, 4)).transpose(1, 2)
        torch.testing.assert_close(o, want, atol=1e-10, rtol=0)
        d_o = torch.randn_like(o)
        for g, r in zip(torch.autograd.grad((o * d_o).sum(), (q, k, v, z)),
                        torch.autograd.grad((want * d_o).sum(), (q, k, v, z))):
            torch.testing.assert_close(g, r, atol=1e-10, rtol=0)

    def test_attention_sinks_module_learns(self):
        sinks = gt.AttentionSinks(4)
        self.assertEqual(tuple(sinks.logits.shape), (4,))
        self.assertTrue(torch.equal(sinks.logits.detach(), torch.zeros(4)))
        q, k, v = self.qkv(b=1, sq=16, sk=16)
        o = gt.attention(q, k, v, causal=True, sinks=sinks)
        want = gpt_oss_sink_attention(q, k, v, sinks.logits)
        torch.testing.assert_close(o, want, atol=self.O_TOL, rtol=0)
        o.square().sum().backward()
        self.assertEqual(sinks.logits.grad.shape, (4,))
        self.assertTrue(bool((sinks.logits.grad != 0).all()))

    def test_attention_sinks_gradient_in_bfloat16(self):
        # bfloat16 q, k, v with learnable sinks (float32 logits): the sinks' gradient against
        # gpt-oss's definition in float64 on the same (widened) bf16 inputs. It sums, over
        # the 16 rows of each head, exp(z - lse) <dL/do, o> with o rounded to bf16 (2^-9
        # relative) and lse from bf16 products: 2e-2 relative to the largest entry.
        q, k, v = (x.detach().bfloat16().requires_grad_() for x in self.qkv(b=1, sq=16, sk=16))
        z = torch.tensor([0.5, -1.0, 2.0, 0.25], requires_grad=True)
        o = gt.attention(q, k, v, causal=True, sinks=z)
        self.assertEqual(o.dtype, torch.bfloat16)
        d_o = torch.randn(o.shape, generator=torch.Generator().manual_seed(3))
        (gz,) = torch.autograd.grad((o.float() * d_o).sum(), (z,))
        qd, kd, vd = (x.detach().double() for x in (q, k, v))
        zd = z.detach().double().requires_grad_()
        want = gpt_oss_sink_attention(qd, kd, vd, zd)
        (gz_ref,) = torch.autograd.grad((want * d_o.double()).sum(), (zd,))
        tol = 2e-2 * max(1.0, float(gz_ref.abs().max()))
        torch.testing.assert_close(gz.double(), gz_ref, atol=tol, rtol=0)
        self.assertTrue(bool((gz != 0).all()))

    def test_alibi_slopes_match_flash_attn_bias(self):
        # flash-attn's alibi_slopes: -slope |i + s_k - s_q - j| added to the scores (SDPA's
        # float mask here), causal; slopes learnable (gradient against eager autograd).
        q, k, v = self.qkv(sq=40)
        slopes = torch.tensor([0.5, 0.25, 0.125, 0.0625], requires_grad=True)
        o = gt.attention(q, k, v, causal=True, alibi_slopes=slopes)
        pq = torch.arange(24, 64)[:, None]
        pk = torch.arange(64)[None, :]
        bias = -slopes[:, None, None] * (pq - pk).abs().float()
        bias = bias.masked_fill(~window_mask(40, 64, -1, -1, True), float("-inf"))
        want = F.scaled_dot_product_attention(q.transpose(1, 2), repeat_kv(k, 4),
                                              repeat_kv(v, 4), attn_mask=bias).transpose(1, 2)
        self.check(o, want, (q, k, v, slopes), self.O_TOL, self.G_TOL)

    def test_rope_handle_equals_rope_operator_then_attention(self):
        # gpe.Rope inside the kernel against gt.rope on q (query role) and k (key role) then
        # attention without an encoding: float64 (both the exact reference, 1e-10) and
        # float32 (the same float tables, 2e-5 / 1e-4 as above), forward and gradients.
        d = 16
        ropes = {"yarn": gpe.Rope(d, schedule="yarn", factor=4.0, original_max_position=16),
                 "xpos": gpe.Rope(d, xpos=True, xpos_scale_base=16.0, xpos_centre=12),
                 "llama3": gpe.Rope(d, base=500000.0, schedule="llama3",
                                    original_max_position=16)}
        for dtype, o_tol, g_tol in ((torch.float64, 1e-10, 1e-10),
                                    (torch.float32, self.O_TOL, self.G_TOL)):
            for name, r in ropes.items():
                q = torch.randn(2, 5, 4, d, dtype=dtype, requires_grad=True)
                k = torch.randn(2, 9, 2, d, dtype=dtype, requires_grad=True)
                v = torch.randn(2, 9, 2, d, dtype=dtype, requires_grad=True)
                with self.subTest(rope=name, dtype=dtype):
                    o = gt.attention(q, k, v, causal=True, rope=r)
                    qr = gt.rope(q, r, offsets=[4, 4], role="query")
                    kr = gt.rope(k, r, offsets=[0, 0], role="key")
                    want = gt.attention(qr, kr, v, causal=True)
                    self.check(o, want, (q, k, v), o_tol, g_tol)

    def test_float16_kv_cache_forward(self):
        # float32 q over a float16 cache: the cache widened exactly as tiles load, the same
        # float32 kernels as on the widened tensors (summation order aside: 1e-5).
        q = torch.randn(1, 1, 4, 32)
        k, v = torch.randn(1, 50, 2, 32).half(), torch.randn(1, 50, 2, 32).half()
        o = gt.attention(q, k, v, causal=True, window_size=(15, -1), softcap=10.0)
        want = gt.attention(q, k.float(), v.float(), causal=True, window_size=(15, -1),
                            softcap=10.0)
        torch.testing.assert_close(o, want, atol=1e-5, rtol=0)

    def test_registration_with_sinks_and_compile(self):
        # gpe::attention_forward with sinks, a gpe.Rope, a window and a softcap passes
        # opcheck (schema, fake tensors, autograd through
        # gpe::attention_backward_with_parameters), and a compiled call (the Rope built
        # outside it, as modules are) gives the eager outputs and gradients bitwise
        # (aot_eager: the same library calls).
        q = torch.randn(1, 5, 2, 8, dtype=torch.float64, requires_grad=True)
        k = torch.randn(1, 5, 2, 8, dtype=torch.float64, requires_grad=True)
        sinks = torch.tensor([0.3, -0.4], requires_grad=True)
        r = gpe.Rope(8, xpos=True)
        args = (q, k, k, None, None, None, None, True, 0.0, 0, 10000.0, "half", "", 0, 0, 1, 0,
                None, None, None, None, None, None, None, sinks, gt._register(r), 2, -1, 3.0)
        torch.library.opcheck(torch.ops.gpe.attention_forward.default, args)
        fn = lambda q, k, z: gt.attention(q, k, k, causal=True, rope=r, window_size=(2, -1),
                                          softcap=3.0, sinks=z)
        f = torch.compile(fn, backend="aot_eager", fullgraph=True)
        o, want = f(q, k, sinks), fn(q, k, sinks)
        self.assertTrue(torch.equal(o, want))
        for a, b in zip(torch.autograd.grad(o.sum(), (q, sinks)),
                        torch.autograd.grad(want.sum(), (q, sinks))):
            self.assertTrue(torch.equal(a, b))

    def test_refused_names(self):
        q, k, v = self.qkv(b=1, sq=4, sk=4)
        with self.assertRaisesRegex(ValueError, "attn_mask requires grad"):
            gt.attention(q, k, v, attn_mask=torch.zeros(4, 4, requires_grad=True))
        with self.assertRaisesRegex(ValueError, "dropout"):
            gt.attention(q, k, v, dropout_p=0.1)
        with self.assertRaisesRegex(ValueError, "enable_gqa"):
            gt.attention(q, k, v, enable_gqa=False)
        with self.assertRaisesRegex(ValueError, "per-batch"):
            gt.attention(q, k, v, alibi_slopes=torch.ones(1, 4))
        with self.assertRaisesRegex(ValueError, "scale"):
            gt.attention(q, k, v, scale=0.1, softmax_scale=0.2)
        with self.assertRaisesRegex(gpe.GpeError, "window"):
            gt.attention(q, k, v, window_size=(-2, 0))
        with self.assertRaisesRegex(gpe.GpeError, "sinks"):
            gt.attention(q, k, v, sinks=torch.zeros(3))
        with self.assertRaisesRegex(gpe.GpeError, "rope_dim"):
            gt.attention(q, k, v, rope=gpe.Rope(32), rope_dim=32)


if __name__ == "__main__":
    unittest.main()
