"""gpe.attention against a NumPy implementation of the formulas (run by `bazel test`)."""

import unittest

import sanitizer_preload
from gpe import _ffi

sanitizer_preload.reexec_if_needed(next((str(p) for p in _ffi._candidates() if p.is_file()), None))

import numpy as np  # noqa: E402

import gpe  # noqa: E402


def rope(x, positions, rotary_dim, base):
    """Su et al. eq. 34 with half-split pairs (i, i + r/2), theta_i = base^(-2i/r)."""
    y = x.astype(np.float64).copy()
    half = rotary_dim // 2
    theta = base ** (-2.0 * np.arange(half) / rotary_dim)
    ang = positions[:, None] * theta[None, :]
    c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    a, b = y[..., :half].copy(), y[..., half:rotary_dim].copy()
    y[..., :half] = a * c - b * s
    y[..., half:rotary_dim] = a * s + b * c
    return y


def reference(q, k, v, causal, rotary_dim=0, alibi=False):
    """One sequence, [s, h, d]: softmax(q k^T / sqrt(d) + bias) v in float64."""
    s_q, hq, d = q.shape
    s_k, hkv, _ = k.shape
    pq = np.arange(s_k - s_q, s_k, dtype=np.float64)
    pk = np.arange(s_k, dtype=np.float64)
    if rotary_dim:
        q, k = rope(q, pq, rotary_dim, 10000.0), rope(k, pk, rotary_dim, 10000.0)
    o = np.zeros((s_q, hq, v.shape[-1]))  # v's head size may differ from d
    for h in range(hq):
        g = h // (hq // hkv)
        scores = q[:, h, :] @ k[:, g, :].T / np.sqrt(d)
        if alibi:  # Press et al.: slopes 2^(-8 i / n), i = 1..n (n a power of two)
            scores -= 2.0 ** (-8.0 * (h + 1) / hq) * (pq[:, None] - pk[None, :])
        if causal:
            scores = np.where(pk[None, :] <= pq[:, None], scores, -np.inf)
        scores -= scores.max(axis=1, keepdims=True)
        p = np.exp(scores)
        p /= p.sum(axis=1, keepdims=True)
        o[:, h, :] = p @ v[:, g, :]
    return o


def rope_planes(x, angles):
    """Half-split pairs (i, i + r/2) rotated by angles [tokens, r/2] (Su et al. eq. 34)."""
    y = x.astype(np.float64).copy()
    half = angles.shape[1]
    c, s = np.cos(angles)[:, None, :], np.sin(angles)[:, None, :]
    a, b = y[..., :half].copy(), y[..., half:2 * half].copy()
    y[..., :half] = a * c - b * s
    y[..., half:2 * half] = a * s + b * c
    return y


def expm_skew(s):
    """exp(S) of a real skew matrix through the Hermitian H = -i S = V diag(w) V^H."""
    w, v = np.linalg.eigh(-1j * s)
    return ((v * np.exp(1j * w)) @ v.conj().T).real


def attend(qr, kr, v, causal, scale=None, key_labels=None, value_labels=None, labels=None):
    """One sequence of already-encoded rows [s, h, d]: softmax attention in float64, with
    optional Shaw tables (labels [s_q, s_k] of table rows)."""
    s_q, hq, d = qr.shape
    hkv = kr.shape[1]
    scale = 1.0 / np.sqrt(d) if scale is None else scale
    o = np.zeros((s_q, hq, v.shape[-1]))  # v's head size may differ from d
    for h in range(hq):
        g = h // (hq // hkv)
        scores = qr[:, h, :] @ kr[:, g, :].T
        if key_labels is not None:  # Shaw et al. eq. 4: q_i . aK[label(i, j)]
            scores = scores + np.einsum("id,ijd->ij", qr[:, h, :], key_labels[labels])
        scores = scores * scale
        if causal:
            scores = np.where(np.tri(s_q, kr.shape[0], kr.shape[0] - s_q, dtype=bool), scores,
                              -np.inf)
        scores -= scores.max(axis=1, keepdims=True)
        p = np.exp(scores)
        p /= p.sum(axis=1, keepdims=True)
        o[:, h, :] = p @ v[:, g, :]
        if value_labels is not None:  # eq. 3: sum_j p_ij aV[label(i, j)]
            o[:, h, :] += np.einsum("ij,ijd->id", p, value_labels[labels])
    return o


class AttentionTest(unittest.TestCase):
    def setUp(self):
        self.rng = np.random.default_rng(0)

    def randn(self, *shape):
        return self.rng.standard_normal(shape).astype(np.float32)

    def test_forward_matches_reference(self):
        # float32 kernel against float64: 1e-5 covers float rounding of 32-term dot
        # products and 40-term sums; a wrong angle, slope or mask moves outputs by >1e-2.
        for causal, rotary, alibi in [(False, 0, False), (True, 32, True), (True, 16, False)]:
            q, k, v = self.randn(1, 40, 4, 32), self.randn(1, 40, 2, 32), self.randn(1, 40, 2, 32)
            o = gpe.attention(q, k, v, causal=causal, rope_dim=rotary,
                              alibi="causal" if alibi else None)
            want = reference(q[0], k[0], v[0], causal, rotary, alibi)
            np.testing.assert_allclose(o[0], want, atol=1e-5)

    def test_kv_cache_and_packed(self):
        q, k, v = self.randn(1, 3, 2, 16), self.randn(1, 50, 2, 16), self.randn(1, 50, 2, 16)
        o = gpe.attention(q, k, v, causal=True, rope_dim=16)
        np.testing.assert_allclose(o[0], reference(q[0], k[0], v[0], True, 16), atol=1e-5)
        # Two sequences packed: each equals its own padded run.
        q2, k2, v2 = self.randn(7, 2, 16), self.randn(7, 2, 16), self.randn(7, 2, 16)
        cu = np.array([0, 3, 7])
        o2 = gpe.attention(q2, k2, v2, causal=True, cu_seqlens_q=cu, cu_seqlens_k=cu)
        for b in range(2):
            sl = slice(cu[b], cu[b + 1])
            np.testing.assert_allclose(o2[sl], reference(q2[sl], k2[sl], v2[sl], True), atol=1e-5)

    def test_value_head_size_of_its_own(self):
        # v and o of 24 components against q and k of 40 (and 8 against 16, packed), with
        # a Shaw value table of v's width: float32 kernels against float64 formulas, 1e-5
        # as in test_forward_matches_reference.
        q, k, v = self.randn(1, 30, 4, 40), self.randn(1, 30, 2, 40), self.randn(1, 30, 2, 24)
        o = gpe.attention(q, k, v, causal=True)
        self.assertEqual(o.shape, (1, 30, 4, 24))
        np.testing.assert_allclose(o[0], attend(q[0].astype(np.float64), k[0], v[0], True),
                                   atol=1e-5)
        q2, k2, v2 = self.randn(7, 2, 16), self.randn(9, 1, 16), self.randn(9, 1, 8)
        cu_q, cu_k = np.array([0, 3, 7]), np.array([0, 4, 9])
        table = self.rng.standard_normal((5, 8))
        o2 = gpe.attention(q2, k2, v2, causal=True, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k,
                           shaw_max_distance=2, shaw_value_table=table)
        for b in range(2):
            sq, sk = slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1])
            lq, lk = cu_q[b + 1] - cu_q[b], cu_k[b + 1] - cu_k[b]
            pq, pk = np.arange(lk - lq, lk), np.arange(lk)
            labels = np.clip(pk[None, :] - pq[:, None], -2, 2) + 2
            want = attend(q2[sq].astype(np.float64), k2[sk], v2[sk], True,
                          value_labels=table, labels=labels)
            np.testing.assert_allclose(o2[sq], want, atol=1e-5)

    def test_float16_kv_cache(self):
        # A float16 KV cache with float32 queries: the float32 call on the same (widened)
        # values, up to the summation order of the two paths (1e-5 on O(1) outputs over
        # 300 keys); the backward refuses a cache (forward only).
        q = self.randn(1, 2, 4, 32)
        k16 = self.randn(1, 300, 2, 32).astype(np.float16)
        v16 = self.randn(1, 300, 2, 32).astype(np.float16)
        o16, lse16 = gpe.attention(q, k16, v16, causal=True, rope_dim=32, return_lse=True)
        o32, lse32 = gpe.attention(q, k16.astype(np.float32), v16.astype(np.float32),
                                   causal=True, rope_dim=32, return_lse=True)
        self.assertEqual(o16.dtype, np.float32)
        np.testing.assert_allclose(o16, o32, rtol=0, atol=1e-5)
        np.testing.assert_allclose(lse16, lse32, rtol=0, atol=1e-5)
        with self.assertRaises(gpe.GpeError):
            gpe.attention_backward(q, k16, v16, np.ones_like(q))
        with self.assertRaises(gpe.GpeError):  # float16 queries: a cache type only
            gpe.attention(q.astype(np.float16), k16, v16)

    def test_backward_matches_finite_differences(self):
        q, k, v = self.randn(1, 12, 2, 8), self.randn(1, 12, 2, 8), self.randn(1, 12, 2, 8)
        w = self.randn(*q.shape)
        o, lse = gpe.attention(q, k, v, causal=True, rope_dim=8, return_lse=True)
        dq, dk, dv = gpe.attention_backward(q, k, v, w, o=o, lse=lse, causal=True, rope_dim=8)

        def loss(q_, k_, v_):
            return float(np.sum(w * reference(q_[0], k_[0], v_[0], True, 8)))

        # Central differences of the float64 reference, step 1e-3: truncation ~1e-6; the
        # float32 gradients agree to ~1e-5 relative, so 1e-3 leaves a wide margin.
        for grad, which in ((dq, 0), (dk, 1), (dv, 2)):
            direction = self.rng.standard_normal(q.shape)
            args = [q.astype(np.float64), k.astype(np.float64), v.astype(np.float64)]
            plus = [a.copy() for a in args]
            minus = [a.copy() for a in args]
            plus[which] += 1e-3 * direction
            minus[which] -= 1e-3 * direction
            fd = (loss(*plus) - loss(*minus)) / 2e-3
            an = float(np.sum(grad * direction))
            self.assertAlmostEqual(fd, an, delta=1e-3 * max(1.0, abs(an)))

    def test_float64_matches_reference(self):
        # float64 runs the exact double reference: agreement to double rounding (1e-12 on
        # O(1) outputs; float32 arithmetic would miss by ~1e-7).
        q, k, v = (self.rng.standard_normal((1, 23, 4, 16)) for _ in range(3))
        k, v = k[:, :, :2], v[:, :, :2]
        o, lse = gpe.attention(q, k, v, causal=True, rope_dim=16, alibi="causal",
                               return_lse=True)
        self.assertEqual((o.dtype, lse.dtype), (np.float64, np.float64))
        np.testing.assert_allclose(o[0], reference(q[0], k[0], v[0], True, 16, True),
                                   rtol=0, atol=1e-12)

    def test_merge_of_key_chunks_equals_unsplit(self):
        # Keys split into chunks (one empty, one that the first queries cannot see) at their
        # global positions; the merge equals the unsplit attention. float64: exact reference
        # on both sides, 1e-12. float32: each part within ~1e-6, 1e-5 after the merge.
        for dtype, tol in ((np.float64, 1e-12), (np.float32, 1e-5)):
            s_q, s_k = 9, 30
            q = self.rng.standard_normal((s_q, 4, 16)).astype(dtype)
            k = self.rng.standard_normal((s_k, 2, 16)).astype(dtype)
            v = self.rng.standard_normal((s_k, 2, 16)).astype(dtype)
            qp = np.arange(s_k - s_q, s_k)
            kp = np.arange(s_k)
            kw = dict(causal=True, rope_dim=16, alibi="causal", return_lse=True)
            cu_q = np.array([0, s_q])
            want, want_lse = gpe.attention(q, k, v, q_positions=qp, k_positions=kp,
                                           cu_seqlens_q=cu_q, cu_seqlens_k=np.array([0, s_k]),
                                           **kw)
            os_, ls = [], []
            for lo, hi in ((0, 8), (8, 8), (8, 22), (22, 30)):
                o, lse = gpe.attention(q, k[lo:hi], v[lo:hi], q_positions=qp,
                                       k_positions=kp[lo:hi], cu_seqlens_q=cu_q,
                                       cu_seqlens_k=np.array([0, hi - lo]), **kw)
                os_.append(o)
                ls.append(lse)
            self.assertTrue(np.isneginf(ls[1]).all() and np.isneginf(ls[3][0]).all())
            o, lse = gpe.merge_attention(os_, ls)
            self.assertEqual((o.dtype, lse.shape), (dtype, want_lse.shape))
            np.testing.assert_allclose(o, want, rtol=0, atol=tol)
            np.testing.assert_allclose(lse, want_lse, rtol=0, atol=tol * 10)
        # A part's NaN lse (its row saw a NaN score) makes that row NaN, as unsplit
        # attention would be (attention/merge.h); +inf is refused.
        nan_lse = lse.copy()
        nan_lse[0] = np.nan
        mo, ml = gpe.merge_attention([o, o], [lse, nan_lse])
        self.assertTrue(np.isnan(mo[0]).all() and np.isnan(ml[0]).all())
        self.assertTrue(np.isfinite(mo[1:]).all())
        with self.assertRaises(ValueError):
            gpe.merge_attention([o], [np.full(lse.shape, np.inf)])
        with self.assertRaises(ValueError):
            gpe.merge_attention([o, o], [lse])

    def test_cpu_arithmetic_options(self):
        # Every float32 arithmetic stays within the float32 check above (1e-5): the split
        # modes run float32's accuracy on AMX tiles (six terms) and are exact float32
        # elsewhere; three terms (about 2^-16 per product) within 1e-3. The names map to
        # gpe/attention.h's codes in the options struct, and unknown names are refused.
        q, k, v = self.randn(1, 40, 4, 32), self.randn(1, 40, 2, 32), self.randn(1, 40, 2, 32)
        want = reference(q[0], k[0], v[0], True, 0, False)
        for name, tol in (("exact", 1e-5), ("split_bf16x6", 1e-5), ("split_bf16x3", 1e-3)):
            o = gpe.attention(q, k, v, causal=True, float32_arithmetic=name)
            np.testing.assert_allclose(o[0], want, atol=tol, err_msg=name)
            dq, _, _ = gpe.attention_backward(q, k, v, o, causal=True, float32_arithmetic=name)
            self.assertTrue(np.isfinite(dq).all(), name)
        import importlib
        from gpe import _ffi
        attention_module = importlib.import_module("gpe.attention")  # (gpe.attention: the function)
        opts = _ffi.AttentionOptions()
        attention_module._arithmetic(opts, "amx_tiles", "split_bf16x3")
        self.assertEqual((opts.bf16_arithmetic, opts.float32_arithmetic), (3, 2))
        attention_module._arithmetic(opts, "widen", "split_bf16x6")
        self.assertEqual((opts.bf16_arithmetic, opts.float32_arithmetic), (2, 1))
        for kwargs in ({"bf16_arithmetic": "amx"}, {"float32_arithmetic": "split"}):
            with self.assertRaises(ValueError):
                gpe.attention(q, k, v, **kwargs)

    def test_bad_input_raises(self):
        q = self.randn(1, 8, 3, 8)
        k = self.randn(1, 8, 2, 8)
        with self.assertRaises(gpe.GpeError):
            gpe.attention(q, k, k)  # 3 query heads over 2 kv heads
        with self.assertRaises(gpe.GpeError):
            gpe.attention(k, k, k, rope_dim=3)
        with self.assertRaises(ValueError):
            gpe.attention(k, k, k, alibi="sideways")

    def test_bias_objects(self):
        # A bias object (gpe.bias) is what the alibi= shorthand builds: identical results.
        q, k, v = self.randn(1, 30, 2, 16), self.randn(1, 30, 2, 16), self.randn(1, 30, 2, 16)
        alibi = gpe.Alibi(2)
        np.testing.assert_allclose(gpe.attention(q, k, v, causal=True, bias=alibi),
                                   gpe.attention(q, k, v, causal=True, alibi="causal"), atol=0)


    def test_axial_and_mrope_match_numpy(self):
        # Axial 2D RoPE (planes split in two blocks, each with the frequencies of dimension
        # r / 2) and M-RoPE sections [2, 3, 3] (default frequencies, contiguous sections):
        # float32 kernel within 1e-5 of NumPy in float64 (float rounding of 16-term dots).
        s, d = 21, 16
        q, k, v = self.randn(1, s, 2, d), self.randn(1, s, 2, d), self.randn(1, s, 2, d)
        for axes, sections in ((2, None), (3, [2, 3, 3])):
            coords = self.rng.integers(-20, 21, size=(s, axes))
            if sections is None:
                m = d // (2 * axes)
                theta = np.tile(10000.0 ** (-2.0 * np.arange(m) / (d // axes)), axes)
                plane_axis = np.repeat(np.arange(axes), m)
                kw = dict(rope_axes=axes)
            else:
                theta = 10000.0 ** (-2.0 * np.arange(d // 2) / d)
                plane_axis = np.repeat(np.arange(axes), sections)
                kw = dict(rope_sections=sections)
            angles = coords[:, plane_axis] * theta[None, :]
            o = gpe.attention(q, k, v, causal=True, rope_dim=d, q_axes=coords, k_axes=coords, **kw)
            want = attend(rope_planes(q[0], angles), rope_planes(k[0], angles), v[0], True)
            np.testing.assert_allclose(o[0], want, atol=1e-5)

    def test_algebraic_tree_and_grid_match_numpy(self):
        # Kogkalidis et al.: tree addresses act by the path product W_c1 W_c2 ... (sec.
        # 3.2), grids by blockdiag(exp(x S_x), exp(y S_y)) (sec. 3.3). float64 runs the
        # exact reference: 1e-12 against NumPy in float64.
        s, d = 13, 8
        q, k, v = (self.rng.standard_normal((1, s, 2, d)) for _ in range(3))
        a = self.rng.standard_normal((2, d, d))
        tree = 0.4 * (a - a.transpose(0, 2, 1))
        w = [expm_skew(t) for t in tree]
        addresses = [list(self.rng.integers(0, 2, size=self.rng.integers(0, 5))) for _ in range(s)]

        def node(addr):
            m = np.eye(d)
            for c in addr:
                m = m @ w[c]
            return m

        rot = np.stack([node(x) for x in addresses])  # [s, d, d]
        o = gpe.attention(q, k, v, causal=True, algebraic_tree=tree, q_tree=addresses,
                          k_tree=addresses)
        enc = lambda x: np.einsum("tij,thj->thi", rot, x)
        np.testing.assert_allclose(o[0], attend(enc(q[0]), enc(k[0]), v[0], True), atol=1e-12)
        g = self.rng.standard_normal((2, 4, 4))
        grid = 0.5 * (g - g.transpose(0, 2, 1))
        coords = self.rng.integers(-5, 6, size=(s, 2))
        blocks = np.zeros((s, d, d))
        for t in range(s):
            blocks[t, :4, :4] = expm_skew(coords[t, 0] * grid[0])
            blocks[t, 4:, 4:] = expm_skew(coords[t, 1] * grid[1])
        o = gpe.attention(q, k, v, algebraic_grid=grid, q_axes=coords, k_axes=coords)
        enc = lambda x: np.einsum("tij,thj->thi", blocks, x)
        np.testing.assert_allclose(o[0], attend(enc(q[0]), enc(k[0]), v[0], False), atol=1e-12)

    def test_shaw_labels_and_table_gradients_match_numpy(self):
        s, d, kmax = 15, 8, 2
        q, k, v, w = (self.rng.standard_normal((1, s, 2, d)) for _ in range(4))
        ak, av = self.rng.standard_normal((2 * kmax + 1, d)), self.rng.standard_normal((2 * kmax + 1, d))
        labels = np.clip(np.arange(s)[None, :] - np.arange(s)[:, None], -kmax, kmax) + kmax
        kw = dict(causal=True, shaw_max_distance=kmax, shaw_key_table=ak, shaw_value_table=av)
        want = attend(q[0], k[0], v[0], True, key_labels=ak, value_labels=av, labels=labels)
        # float64: the exact reference (1e-12); float32: the kernel (float rounding, 1e-5).
        np.testing.assert_allclose(gpe.attention(q, k, v, **kw)[0], want, atol=1e-12)
        f = lambda x: x.astype(np.float32)
        np.testing.assert_allclose(gpe.attention(f(q), f(k), f(v), **kw)[0], want, atol=1e-5)
        dq, dk, dv, gak, gav = gpe.attention_backward(q, k, v, w, shaw_table_grads=True, **kw)

        def loss(ak_, av_):
            o = attend(q[0], k[0], v[0], True, key_labels=ak_, value_labels=av_, labels=labels)
            return float(np.sum(w[0] * o))

        # Central differences of the NumPy float64 loss, step 1e-5: error ~1e-10.
        for table, grad, which in ((ak, gak, 0), (av, gav, 1)):
            fd = np.zeros_like(table)
            for idx in np.ndindex(*table.shape):
                plus, minus = table.copy(), table.copy()
                plus[idx] += 1e-5
                minus[idx] -= 1e-5
                args_p = (plus, av) if which == 0 else (ak, plus)
                args_m = (minus, av) if which == 0 else (ak, minus)
                fd[idx] = (loss(*args_p) - loss(*args_m)) / 2e-5
            np.testing.assert_allclose(grad, fd, atol=1e-7)
        # float32 kernel table gradients agree with the double ones (float rounding, 1e-4).
        _, _, _, gak32, gav32 = gpe.attention_backward(f(q), f(k), f(v), f(w),
                                                       shaw_table_grads=True, **kw)
        np.testing.assert_allclose(gak32, gak, atol=1e-4)
        np.testing.assert_allclose(gav32, gav, atol=1e-4)
        with self.assertRaises(ValueError):
            gpe.attention(q, k, v, shaw_key_table=ak)  # no shaw_max_distance
        with self.assertRaises(gpe.GpeError):
            gpe.attention(q, k, v, shaw_max_distance=3, shaw_key_table=ak)  # 5 rows, not 7
        with self.assertRaises(TypeError):
            gpe.attention(q, k, v, shaw_tables=ak)


    def test_bias_parameter_gradients_match_finite_differences(self):
        # L = <d_o, o> in float64 (the exact reference); central differences with step
        # 1e-6 (truncation ~1e-12, rounding ~1e-10): 1e-7 absolute on O(1) gradients.
        rng = np.random.default_rng(12)
        q, k, v, d_o = (rng.standard_normal((1, 6, 2, 8)) for _ in range(4))
        logits = rng.standard_normal((6, 2))
        slopes = np.array([0.3, 0.7])
        for make, param in ((lambda p: gpe.FoxBias(p), logits),
                            (lambda p: gpe.Alibi(2, slopes=p), slopes)):
            _, _, _, ga, gb = gpe.attention_backward(q, k, v, d_o, causal=True, bias=make(param),
                                                     bias_grads=True)
            self.assertIsNone(gb)
            self.assertEqual(ga.shape, param.shape)
            for idx in np.ndindex(param.shape):
                up, down = param.copy(), param.copy()
                up[idx] += 1e-6
                down[idx] -= 1e-6
                lu = np.sum(gpe.attention(q, k, v, causal=True, bias=make(up)) * d_o)
                ld = np.sum(gpe.attention(q, k, v, causal=True, bias=make(down)) * d_o)
                self.assertAlmostEqual(ga[idx], (lu - ld) / 2e-6, delta=1e-7)
        with self.assertRaises(ValueError):
            gpe.attention_backward(q, k, v, d_o, bias_grads=True)

    def test_encoding_gradients_ignore_keys_past_kv_lengths(self):
        # Keys past kv_lengths are never read (an unwritten cache slot may hold NaN): GRAPE-M's
        # generator gradients equal those of the same call with the tail zeroed, exactly (the
        # same rows, each 0 in both, enter the same sums).
        rng = np.random.default_rng(33)
        q, k, v, d_o = (rng.standard_normal((1, 8, 1, 4)).astype(np.float32) for _ in range(4))
        enc = gpe.GrapeM(rng.standard_normal((1, 4)), rng.standard_normal((1, 4)), np.array([0.3]))
        grads = []
        for fill in (0.0, np.nan):
            kk, vv = k.copy(), v.copy()
            kk[0, 5:] = fill
            vv[0, 5:] = fill
            out = gpe.attention_backward(q, kk, vv, d_o, encoding=enc, kv_lengths=[5],
                                         encoding_grads=True, threads=1)
            grads.append(out[3:])
        for zeroed, nan_tail in zip(*grads):
            self.assertTrue(np.isfinite(nan_tail).all(), nan_tail)
            np.testing.assert_array_equal(nan_tail, zeroed)

    def test_encoding_parameter_gradients_match_finite_differences(self):
        # GRAPE-M's (a, b, omega) and Kogkalidis et al.'s skew generators (sequence, tree,
        # grid) from attention_backward(..., encoding_grads=True), against central
        # differences of L = <d_o, o> in float64 (the exact reference), step 1e-6
        # (truncation ~1e-12 times the third derivative, rounding ~1e-10): 1e-7 absolute.
        # Skew generators move in skew directions (S_ij += h, S_ji -= h), whose derivative
        # is X_ij - X_ji for the entrywise gradient X. GQA (4 query heads over 2), padded
        # and packed.
        rng = np.random.default_rng(31)
        s, d = 5, 6
        q, d_o = (rng.standard_normal((1, s, 4, d)) for _ in range(2))
        k, v = (rng.standard_normal((1, s, 2, d)) for _ in range(2))
        packed = dict(cu_seqlens_q=[0, 2, 5], cu_seqlens_k=[0, 2, 5])

        def skews(*shape):
            a = 0.3 * rng.standard_normal(shape)
            return a - np.swapaxes(a, -1, -2)

        def check_skew(grad, param, loss):
            self.assertGreater(np.abs(grad).max(), 1e-3)  # a vanishing gradient proves nothing
            for idx in np.ndindex(param.shape):
                *c, i, j = idx
                if i >= j:
                    continue
                up, down = param.copy(), param.copy()
                up[(*c, i, j)] += 1e-6
                up[(*c, j, i)] -= 1e-6
                down[(*c, i, j)] -= 1e-6
                down[(*c, j, i)] += 1e-6
                fd = (loss(up) - loss(down)) / 2e-6
                self.assertAlmostEqual(grad[(*c, i, j)] - grad[(*c, j, i)], fd, delta=1e-7)

        tree = [list(rng.integers(0, 2, size=rng.integers(0, 4))) for _ in range(s)]
        coords = rng.integers(-3, 4, size=(s, 2))
        for layout in ({}, packed):
            x = (lambda t: t[0]) if layout else (lambda t: t)
            qq, kk, vv, gg = x(q), x(k), x(v), x(d_o)

            def loss_of(**kw):
                return float(np.sum(gpe.attention(qq, kk, vv, causal=True, **layout, **kw) * gg))

            # GRAPE-M.
            ps = [rng.standard_normal((2, d)), rng.standard_normal((2, d)), np.array([0.6, -0.3])]
            out = gpe.attention_backward(qq, kk, vv, gg, causal=True, encoding=gpe.GrapeM(*ps),
                                         encoding_grads=True, **layout)
            self.assertEqual(len(out), 6)
            for which, grad in enumerate(out[3:]):
                self.assertEqual(grad.shape, ps[which].shape)
                for idx in np.ndindex(ps[which].shape):
                    moved = []
                    for h in (1e-6, -1e-6):
                        p = [t.copy() for t in ps]
                        p[which][idx] += h
                        moved.append(loss_of(encoding=gpe.GrapeM(*p)))
                    self.assertAlmostEqual(grad[idx], (moved[0] - moved[1]) / 2e-6, delta=1e-7)
            # Algebraic sequence, tree, grid.
            seq = skews(d, d)
            *_, g = gpe.attention_backward(qq, kk, vv, gg, causal=True,
                                           encoding=gpe.AlgebraicSequence(seq),
                                           encoding_grads=True, **layout)
            self.assertEqual(g.shape, (d, d))
            check_skew(g, seq, lambda p: loss_of(encoding=gpe.AlgebraicSequence(p)))
            tr = skews(2, d, d)
            *_, g = gpe.attention_backward(qq, kk, vv, gg, causal=True, algebraic_tree=tr,
                                           q_tree=tree, k_tree=tree, encoding_grads=True,
                                           **layout)
            self.assertEqual(g.shape, (2, d, d))
            check_skew(g, tr, lambda p: loss_of(algebraic_tree=p, q_tree=tree, k_tree=tree))
            gr = skews(2, 3, 3)
            *_, g = gpe.attention_backward(qq, kk, vv, gg, causal=True, algebraic_grid=gr,
                                           q_axes=coords, k_axes=coords, encoding_grads=True,
                                           **layout)
            self.assertEqual(g.shape, (2, 3, 3))
            check_skew(g, gr, lambda p: loss_of(algebraic_grid=p, q_axes=coords, k_axes=coords))
        # Beside other gradients, the encoding's come last; without one it is refused.
        out = gpe.attention_backward(q, k, v, d_o, encoding=gpe.AlgebraicSequence(skews(d, d)),
                                     sinks=np.zeros(4, np.float32), sink_grad=True,
                                     encoding_grads=True)
        self.assertEqual([t.shape for t in out[3:]], [(4,), (d, d)])
        with self.assertRaises(ValueError):
            gpe.attention_backward(q, k, v, d_o, encoding_grads=True)

def window_softcap_sinks_reference(q, k, v, d_o, causal, window=None, softcap=None,
                                   sinks=None, scale=None):
    """One sequence [s, h, d] with the default positions, in float64, from the formulas of
    attention/descriptor.h ("WINDOW, SOFTCAP AND SINKS"): x = scale q.k, s = cap(x),
    masked by the causal rule and the window, Z = sum e^s (+ e^z), o = sum e^s v / Z;
    the backward through p = e^(s - lse): dS = p (dP - D), dx = dS (1 - tanh^2(x / c)),
    dz = -sum_i e^(z - lse_i) D_i. Returns o, lse [s_q, h], dq, dk, dv, dz."""
    q, k, v, d_o = (np.asarray(a, dtype=np.float64) for a in (q, k, v, d_o))
    s_q, hq, d = q.shape
    s_k, hkv, _ = k.shape
    scale = 1.0 / np.sqrt(d) if scale is None else scale
    pq = np.arange(s_k - s_q, s_k)[:, None]
    pk = np.arange(s_k)[None, :]
    allowed = np.ones((s_q, s_k), dtype=bool)
    if causal:
        allowed &= pk <= pq
    if window is not None:
        left, right = window
        if left >= 0:
            allowed &= pk >= pq - left
        if right >= 0:
            allowed &= pk <= pq + right
    o, lse = np.zeros_like(q), np.zeros((s_q, hq))
    dq, dk, dv, dz = np.zeros_like(q), np.zeros_like(k), np.zeros_like(v), np.zeros(hq)
    for h in range(hq):
        g = h // (hq // hkv)
        x = scale * q[:, h] @ k[:, g].T
        t = np.tanh(x / softcap) if softcap else None
        s = softcap * t if softcap else x
        s = np.where(allowed, s, -np.inf)
        z = -np.inf if sinks is None else float(sinks[h])
        m = np.maximum(s.max(axis=1), z)
        m = np.where(np.isinf(m), 0.0, m)
        total = np.exp(s - m[:, None]).sum(axis=1) + np.exp(z - m)
        lse[:, h] = np.where(total > 0, m + np.log(np.where(total > 0, total, 1.0)), -np.inf)
        p = np.exp(s - lse[:, h][:, None])
        p = np.where(allowed, p, 0.0)
        o[:, h] = p @ v[:, g]
        dsum = (d_o[:, h] * o[:, h]).sum(axis=1)
        dp = d_o[:, h] @ v[:, g].T
        dx = p * (dp - dsum[:, None])
        if softcap:
            dx = dx * (1.0 - t * t)
        dq[:, h] += scale * dx @ k[:, g]
        dk[:, g] += scale * dx.T @ q[:, h]
        dv[:, g] += p.T @ d_o[:, h]
        if sinks is not None:
            dz[h] = -(np.exp(z - lse[:, h]) * dsum).sum()
    return o, lse, dq, dk, dv, dz


class RopeHandleTest(unittest.TestCase):
    """attention(..., rope=gpe.Rope(...)) equals Rope.forward on q (query role) and k (key
    role) followed by attention without an encoding, forward and backward."""

    def schedules(self, d):
        return {
            "default": gpe.Rope(d),
            "llama3": gpe.Rope(d, base=500000.0, schedule="llama3", original_max_position=16),
            "yarn": gpe.Rope(d, schedule="yarn", factor=4.0, original_max_position=16),
            "xpos": gpe.Rope(d, xpos=True, xpos_scale_base=16.0, xpos_centre=12),
            "linear partial interleaved": gpe.Rope(d, rotary_dim=d // 2, schedule="linear",
                                                   factor=2.0, pairing="interleaved"),
        }

    def test_fused_equals_rope_then_attention(self):
        # float64: both sides in double (the exact reference, double tables), differing in
        # rounding order only (~1e-15): 1e-11. float32: the same float tables on both sides,
        # then the float32 kernels, each ~1e-6 on these O(1) outputs and gradients: 5e-5,
        # far below a wrong role, a missing attention factor or angle (>= 1e-2).
        rng = np.random.default_rng(1)
        b, sq, sk, hq, hk, d = 2, 5, 9, 4, 2, 16
        offs_q, offs_k = np.full(b, sk - sq), np.zeros(b, dtype=np.int64)
        for dtype, tol in ((np.float64, 1e-11), (np.float32, 5e-5)):
            q = rng.standard_normal((b, sq, hq, d)).astype(dtype)
            k = rng.standard_normal((b, sk, hk, d)).astype(dtype)
            v = rng.standard_normal((b, sk, hk, d)).astype(dtype)
            w = rng.standard_normal((b, sq, hq, d)).astype(dtype)
            for name, r in self.schedules(d).items():
                with self.subTest(name=name, dtype=dtype.__name__):
                    o = gpe.attention(q, k, v, causal=True, rope=r)
                    dq, dk, dv = gpe.attention_backward(q, k, v, w, causal=True, rope=r)
                    qr = r.forward(q, offsets=offs_q, role="query")
                    kr = r.forward(k, offsets=offs_k, role="key")
                    want = gpe.attention(qr, kr, v, causal=True)
                    gq, gk, gv = gpe.attention_backward(qr, kr, v, w, causal=True)
                    np.testing.assert_allclose(o, want, atol=tol, rtol=0)
                    np.testing.assert_allclose(dq, r.backward(gq, offsets=offs_q, role="query"),
                                               atol=tol, rtol=0)
                    np.testing.assert_allclose(dk, r.backward(gk, offsets=offs_k, role="key"),
                                               atol=tol, rtol=0)
                    np.testing.assert_allclose(dv, gv, atol=tol, rtol=0)

    def test_mrope_handle_with_axes(self):
        # As above (float64, 1e-11), a multi-axis handle reading q_axes / k_axes.
        rng = np.random.default_rng(2)
        s, h, d = 6, 2, 16
        r = gpe.Rope(d, mrope_sections=[2, 3, 3])
        q, k, v, w = (rng.standard_normal((1, s, h, d)) for _ in range(4))
        qa, ka = rng.integers(0, 10, (s, 3)), rng.integers(0, 10, (s, 3))
        o = gpe.attention(q, k, v, causal=True, rope=r, q_axes=qa, k_axes=ka)
        want = gpe.attention(r.forward(q, positions=qa.T, role="query"),
                             r.forward(k, positions=ka.T, role="key"), v, causal=True)
        np.testing.assert_allclose(o, want, atol=1e-11, rtol=0)

    def test_rope_with_rope_dim_is_refused(self):
        q = np.zeros((1, 4, 2, 8), dtype=np.float32)
        with self.assertRaisesRegex(gpe.GpeError, "rope_dim"):
            gpe.attention(q, q, q, rope=gpe.Rope(8), rope_dim=8)
        with self.assertRaises(TypeError):
            gpe.attention(q, q, q, rope="yarn")


class WindowSoftcapSinksTest(unittest.TestCase):
    def test_match_numpy_formulas(self):
        # float64 runs the exact reference: against the NumPy formulas (both double,
        # ~1e-15 apart), 1e-10. float32 kernels: ~1e-6 on these O(1) values (q drawn at
        # scale 2: scores up to ~10): 5e-5 on o and lse, 2e-4 on gradients and dL/dsinks
        # (sums of <= 11 and 2 x 7 terms). A window off by one key, a cap after the mask
        # or a sink missing from the denominator moves them by >= 1e-2.
        rng = np.random.default_rng(3)
        sq, sk, hq, hk, d = 7, 11, 4, 2, 16
        sinks = np.array([0.5, -2.0, 3.0, 1.25], dtype=np.float32)
        cases = [dict(causal=True, window=(3, -1)), dict(causal=False, window=(2, 1)),
                 dict(causal=True, softcap=5.0), dict(causal=True, sinks=sinks),
                 dict(causal=False, sinks=sinks),
                 dict(causal=True, window=(4, -1), softcap=20.0, sinks=sinks)]
        for dtype, tol, gtol in ((np.float64, 1e-10, 1e-10), (np.float32, 5e-5, 2e-4)):
            q = (2 * rng.standard_normal((1, sq, hq, d))).astype(dtype)
            k = rng.standard_normal((1, sk, hk, d)).astype(dtype)
            v = rng.standard_normal((1, sk, hk, d)).astype(dtype)
            w = rng.standard_normal((1, sq, hq, d)).astype(dtype)
            for c in cases:
                with self.subTest(dtype=dtype.__name__, **{n: str(x) for n, x in c.items()}):
                    kw = dict(causal=c["causal"], window_size=c.get("window"),
                              softcap=c.get("softcap"), sinks=c.get("sinks"))
                    o, lse = gpe.attention(q, k, v, return_lse=True, **kw)
                    grads = gpe.attention_backward(q, k, v, w, o=o, lse=lse,
                                                   sink_grad=c.get("sinks") is not None, **kw)
                    want = window_softcap_sinks_reference(q[0], k[0], v[0], w[0], c["causal"],
                                                          c.get("window"), c.get("softcap"),
                                                          c.get("sinks"))
                    np.testing.assert_allclose(o[0], want[0], atol=tol, rtol=0)
                    np.testing.assert_allclose(lse, want[1], atol=tol, rtol=0)
                    for g, r in zip(grads[:3], want[2:5]):
                        np.testing.assert_allclose(g[0], r, atol=gtol, rtol=0)
                    if c.get("sinks") is not None:
                        np.testing.assert_allclose(grads[3], want[5], atol=gtol, rtol=0)

    def test_bad_values_raise(self):
        q = np.zeros((1, 4, 2, 8), dtype=np.float32)
        with self.assertRaisesRegex(gpe.GpeError, "window_left"):
            gpe.attention(q, q, q, window_size=(-3, 0))
        with self.assertRaises(TypeError):
            gpe.attention(q, q, q, window_size=4)
        with self.assertRaisesRegex(gpe.GpeError, "softcap"):
            gpe.attention(q, q, q, softcap=float("nan"))
        with self.assertRaisesRegex(gpe.GpeError, "sinks"):
            gpe.attention(q, q, q, sinks=np.zeros(3, dtype=np.float32))
        with self.assertRaises(ValueError):
            gpe.attention_backward(q, q, q, q, sink_grad=True)
        with self.assertRaisesRegex(gpe.GpeError, "softcap must be at most"):
            gpe.attention(q, q, q, softcap=1e38)  # no cap: refused, was every score 0

    def test_sinks_past_float32_are_refused_not_rounded_to_inf(self):
        # 1e300 became float32 +inf: its head's rows NaN with no error. Given non-finite
        # values keep their meaning (-inf: no sink; NaN / +inf: NaN rows).
        rng = np.random.default_rng(3)
        q = rng.standard_normal((1, 4, 2, 8)).astype(np.float32)
        for bad in ([1e300, 0.0], [0.0, -1e39]):
            with self.subTest(bad=bad):
                with self.assertRaisesRegex(ValueError, r"sinks\[\d\] is .*float32's range"):
                    gpe.attention(q, q, q, sinks=bad)
                with self.assertRaisesRegex(ValueError, "float32's range"):
                    gpe.attention_backward(q, q, q, q, sinks=bad, sink_grad=True)
        plain = gpe.attention(q, q, q)
        np.testing.assert_array_equal(gpe.attention(q, q, q, sinks=[-np.inf, -np.inf]), plain)
        o = gpe.attention(q, q, q, sinks=[np.inf, 0.0])
        self.assertTrue(np.isnan(o[:, :, 0]).all())
        self.assertTrue(np.isfinite(o[:, :, 1]).all())
        # The largest float32 logit itself is a finite sink (every row's mass goes to it).
        o = gpe.attention(q, q, q, sinks=np.array([np.finfo(np.float32).max, 0.0]))
        self.assertTrue(np.isfinite(o).all())


class ClosedHandlesAndMergeShapesTest(unittest.TestCase):
    def test_closed_handles_are_refused(self):
        # A closed handle is NULL, which the options read as "none": the call gave plain
        # attention (and its gradients) without the encoding / bias / RoPE asked for.
        rng = np.random.default_rng(1)
        q, k, v = (rng.standard_normal((1, 6, 2, 8)) for _ in range(3))
        g = gpe.GrapeM(rng.standard_normal(8), rng.standard_normal(8), 0.7)
        r = gpe.Rope(8)
        a = gpe.Alibi(2)
        for name, kw in (("encoding", dict(encoding=g)), ("rope", dict(rope=r)),
                         ("bias", dict(bias=a))):
            gpe.attention(q, k, v, causal=True, **kw)  # open: fine
            kw[name].close()
            with self.subTest(name):
                with self.assertRaisesRegex(ValueError, "closed"):
                    gpe.attention(q, k, v, causal=True, **kw)
                with self.assertRaisesRegex(ValueError, "closed"):
                    gpe.attention_backward(q, k, v, np.ones_like(q), causal=True, **kw)

    def test_merge_refuses_lse_of_another_layout(self):
        # lse as [batch, heads, seq] (flash-attn's) for o [batch, seq, heads, d]: as many
        # entries, other rows; it was reshaped and merged wrongly (0.78 off).
        rng = np.random.default_rng(2)
        q, k, v = (rng.standard_normal((1, 4, 2, 8)) for _ in range(3))
        o1, l1 = gpe.attention(q, k[:, :2], v[:, :2], return_lse=True)
        o2, l2 = gpe.attention(q, k[:, 2:], v[:, 2:], return_lse=True)
        want = gpe.attention(q, k, v)
        # Float64 throughout: the merge is exact to rounding (1e-12).
        np.testing.assert_allclose(gpe.merge_attention([o1, o2], [l1, l2])[0], want, atol=1e-12)
        np.testing.assert_allclose(
            gpe.merge_attention([o1, o2], [l1.reshape(1, 4, 2), l2.reshape(1, 4, 2)])[0], want,
            atol=1e-12)
        bhs = [l.reshape(1, 4, 2).transpose(0, 2, 1).copy() for l in (l1, l2)]
        with self.assertRaisesRegex(ValueError, "lse part 0 has shape"):
            gpe.merge_attention([o1, o2], bhs)

if __name__ == "__main__":
    unittest.main()
