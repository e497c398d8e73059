"""gpe.attention's attn_mask, kv_lengths and block_table against a NumPy implementation
of the formulas and against the same call written another way (run by `bazel test`)."""

import unittest

import sanitizer_preload
from gpe import _ffi

sanitizer_preload.reexec_if_needed(next((str(p) for p in _ffi._candidates() if p.is_file()), None))

import numpy as np  # noqa: E402

import gpe  # noqa: E402
from gpe._core import GpeError  # noqa: E402

B, SQ, SK, HQ, HK, D = 2, 5, 12, 4, 2, 8


def reference(q, k, v, add, lens):
    """softmax(q k^T / sqrt(d) + add) v in float64, [B, s, h, d]; add broadcast to
    [B, HQ, SQ, SK] (-inf masks); sequence b keeps its first lens[b] keys. Returns o and
    lse [B * SQ, HQ]."""
    add = np.broadcast_to(add, (B, HQ, SQ, SK))
    o = np.zeros(q.shape)
    lse = np.zeros((B, SQ, HQ))
    for b in range(B):
        for h in range(HQ):
            g = h // (HQ // HK)
            n = lens[b]
            s = q[b, :, h] @ k[b, :n, g].T / np.sqrt(D) + add[b, h, :, :n]
            m = s.max(axis=1, keepdims=True)
            e = np.exp(s - m)
            z = e.sum(axis=1, keepdims=True)
            o[b, :, h] = (e / z) @ v[b, :n, g]
            lse[b, :, h] = (m + np.log(z))[:, 0]
    return o, lse.reshape(B * SQ, HQ)


def draw(seed):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((B, SQ, HQ, D))
    k = rng.standard_normal((B, SK, HK, D))
    v = rng.standard_normal((B, SK, HK, D))
    return q, k, v, rng


class MaskTest(unittest.TestCase):
    def test_masks_against_reference(self):
        # float64 runs the exact reference (1e-12: summation order only); float32 the
        # tiled kernels (2e-5 relative: float accumulation over <= 12 O(1) terms).
        q, k, v, rng = draw(1)
        allowed = rng.random((B, 1, SQ, SK)) > 0.3  # broadcast over heads
        allowed[..., 0] = True                      # every row keeps a key
        # float32 values: the library reads an additive mask as float32.
        values = rng.standard_normal((SQ, SK)).astype(np.float32)  # over batch and heads
        cases = [
            ("bool [B, 1, SQ, SK]", allowed, np.where(allowed, 0.0, -np.inf)),
            ("uint8", allowed.astype(np.uint8), np.where(allowed, 0.0, -np.inf)),
            ("float [SQ, SK]", values, values),
            ("float with -inf", np.where(allowed, values, -np.inf).astype(np.float32),
             np.where(allowed, values.astype(np.float32), -np.inf)),
        ]
        for lens in ([SK, SK], [7, SK]):
            for name, mask, add in cases:
                with self.subTest(name, lens=lens):
                    want_o, want_lse = reference(q, k, v, add, lens)
                    for dt, tol in ((np.float64, 1e-12), (np.float32, 2e-5)):
                        o, lse = gpe.attention(q.astype(dt), k.astype(dt), v.astype(dt),
                                               attn_mask=mask, kv_lengths=lens, return_lse=True)
                        np.testing.assert_allclose(o, want_o, rtol=tol, atol=tol)
                        np.testing.assert_allclose(lse, want_lse, rtol=tol, atol=tol)

    def test_backward_float32_matches_float64(self):
        # The kernels' backward against the exact reference's with the same mask; 1e-4:
        # float32 gradients of O(1) values through a softmax over <= 12 keys.
        q, k, v, rng = draw(2)
        mask = rng.random((SQ, SK)) > 0.3
        mask[:, 0] = True
        w = rng.standard_normal(q.shape)
        want = gpe.attention_backward(q, k, v, w, attn_mask=mask, kv_lengths=[9, SK])
        f = lambda x: x.astype(np.float32)
        got = gpe.attention_backward(f(q), f(k), f(v), f(w), attn_mask=mask, kv_lengths=[9, SK])
        for g, x in zip(got, want):
            np.testing.assert_allclose(g, x, rtol=1e-4, atol=1e-4)
        self.assertTrue((got[1][0, 9:] == 0).all() and (got[2][0, 9:] == 0).all())

    def test_bad_masks(self):
        q, k, v, _ = draw(3)
        with self.assertRaisesRegex(GpeError, "attn_mask"):
            gpe.attention(q, k, v, attn_mask=np.ones((B, HQ, SQ, SK + 1), dtype=bool))
        with self.assertRaisesRegex(GpeError, "kv_lengths"):
            gpe.attention(q, k, v, kv_lengths=[1, SK + 1])
        with self.assertRaises(TypeError):
            gpe.attention(q, k, v, attn_mask=np.ones((SQ, SK), dtype=np.int32))
        with self.assertRaises(ValueError):
            gpe.attention(q, k, v, attn_mask=np.ones(SK, dtype=bool))


class PagedTest(unittest.TestCase):
    def paged(self, k, v, lens, page):
        """k, v [B, SK, HK, D] cut into pages, shuffled into a pool among pages of NaN."""
        per = SK // page
        pool = B * per + 3
        ids = np.random.default_rng(5).permutation(pool)[: B * per].reshape(B, per)
        kp = np.full((pool, page, HK, D), np.nan, dtype=k.dtype)
        vp = np.full_like(kp, np.nan)
        for b in range(B):
            for i in range(per):
                if i * page < lens[b]:
                    kp[ids[b, i]] = k[b, i * page:(i + 1) * page]
                    vp[ids[b, i]] = v[b, i * page:(i + 1) * page]
        return kp, vp, ids

    def test_paged_equals_contiguous(self):
        # 1e-6 relative: paged and contiguous calls may take different kernels, each in
        # float32 arithmetic (float64: the exact reference either way).
        q, k, v, _ = draw(4)
        lens = [7, SK]
        for dt, kv_dt in ((np.float64, np.float64), (np.float32, np.float32),
                          (np.float32, np.float16)):
            for causal in (False, True):
                with self.subTest(str(kv_dt), causal=causal):
                    qq, kk, vv = q.astype(dt), k.astype(kv_dt), v.astype(kv_dt)
                    kp, vp, table = self.paged(kk, vv, lens, 4)
                    want = gpe.attention(qq, kk, vv, causal=causal, kv_lengths=lens)
                    got = gpe.attention(qq, kp, vp, causal=causal, kv_lengths=lens,
                                        block_table=table)
                    self.assertFalse(np.isnan(got).any())
                    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)

    def test_page_outside_pool_refused(self):
        q, k, v, _ = draw(6)
        kp, vp, table = self.paged(k, v, [SK, SK], 4)
        table[1, 2] = len(kp)
        with self.assertRaisesRegex(GpeError, "block_table"):
            gpe.attention(q, kp, vp, block_table=table)


if __name__ == "__main__":
    unittest.main()
