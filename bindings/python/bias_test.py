"""Tests of gpe's additive biases against independent NumPy references (Press et al.'s
slope rule, T5's bucket function, FoX as prefix-sum differences, GRAPE-AP's path sum),
gradients against central differences in double, run by `bazel test`."""

import math
import unittest

import sanitizer_preload
from gpe import _ffi

sanitizer_preload.reexec_if_needed(next((str(p) for p in _ffi._candidates() if p.is_file()), None))

import numpy as np  # noqa: E402

import gpe  # noqa: E402


def alibi_slopes_reference(n):
    """Press et al.: a geometric sequence starting at 2^(-8/n) with that ratio for n a
    power of two; otherwise the closest power of two's slopes, then every other slope of
    twice that many heads."""
    def power_of_two(k):
        start = 2 ** (-(2 ** -(math.log2(k) - 3)))
        return [start * start ** i for i in range(k)]
    if math.log2(n).is_integer():
        return power_of_two(n)
    c = 2 ** math.floor(math.log2(n))
    return power_of_two(c) + power_of_two(2 * c)[0::2][:n - c]


def t5_bucket_reference(rel, bidirectional, num_buckets, max_distance):
    """Raffel et al. (T5's relative_position_bucket), rel = key - query."""
    ret = 0
    n = -rel
    if bidirectional:
        num_buckets //= 2
        if n < 0:
            ret += num_buckets
        n = abs(n)
    else:
        n = max(n, 0)
    max_exact = num_buckets // 2
    if n < max_exact:
        return ret + n
    v = max_exact + int(math.log(n / max_exact) / math.log(max_distance / max_exact)
                        * (num_buckets - max_exact))
    return ret + min(v, num_buckets - 1)


def log_sigmoid(x):
    return -np.logaddexp(0.0, -x)


def central_difference(loss, param, h=1e-5):
    grad = np.empty_like(param)
    for i in np.ndindex(param.shape):
        keep = param[i]
        param[i] = keep + h
        lp = loss()
        param[i] = keep - h
        lm = loss()
        param[i] = keep
        grad[i] = (lp - lm) / (2 * h)
    return grad


class AlibiTest(unittest.TestCase):
    def test_standard_slopes(self):
        for n in (1, 2, 5, 6, 8, 12, 20, 32, 48):
            # Both are products / powers of 2^(-8/n): equal to a few ulps.
            np.testing.assert_allclose(gpe.Alibi(n).slopes, alibi_slopes_reference(n),
                                       rtol=1e-14, err_msg="n=%d" % n)

    def test_tiles(self):
        q, k = np.array([0, 9, 1000003]), np.array([0, 4, 9, 999990, 1000003])
        for symmetric in (False, True):
            bias = gpe.Alibi(12, symmetric=symmetric)
            self.assertEqual(bias.causal, not symmetric)
            m = bias.slopes
            d = (q[:, None] - k[None, :]).astype(np.float64)
            for h in (0, 11):
                want = -m[h] * (np.abs(d) if symmetric else d)
                np.testing.assert_allclose(bias.fill_tile(h, q, k), want, rtol=1e-15)
                got32 = bias.fill_tile(h, q, k, dtype=np.float32)
                self.assertEqual(got32.dtype, np.float32)
                np.testing.assert_allclose(got32, want, rtol=2.0**-24)

    def test_slope_gradient(self):
        bias = gpe.Alibi(2, slopes=[0.3, 0.7])
        q, k = np.array([5, 2, 8]), np.array([1, 5, 7, 9])
        g = np.random.default_rng(0).standard_normal((3, 4))
        grad = bias.accumulate_gradient(1, q, k, g)
        # db/dm = -(i - j): exact sums of small integers times g.
        np.testing.assert_allclose(grad, [0.0, -np.sum(g * (q[:, None] - k[None, :]))],
                                   rtol=1e-14)


class T5Test(unittest.TestCase):
    def test_tiles_and_gradient(self):
        rng = np.random.default_rng(2)
        for bidirectional, nb, md in ((True, 32, 128), (False, 16, 40), (True, 8, 20)):
            table = rng.standard_normal((nb, 3))
            bias = gpe.T5Bias(table, max_distance=md, bidirectional=bidirectional)
            q = rng.integers(-300, 300, 7)
            k = rng.integers(-300, 300, 9)
            buckets = np.array([[t5_bucket_reference(int(j - i), bidirectional, nb, md)
                                 for j in k] for i in q])
            # A lookup: exact.
            np.testing.assert_array_equal(bias.fill_tile(2, q, k), table[buckets, 2])
            g = rng.standard_normal((7, 9))
            want = np.zeros_like(table)
            np.add.at(want[:, 2], buckets.ravel(), g.ravel())
            # Sums of a few normals in a different order: 1e-14.
            np.testing.assert_allclose(bias.accumulate_gradient(2, q, k, g), want, atol=1e-14)


class FoxTest(unittest.TestCase):
    def setUp(self):
        rng = np.random.default_rng(3)
        self.x = rng.standard_normal((12, 2)) * 3
        self.first = 50
        self.bias = gpe.FoxBias(self.x, first_position=self.first)
        self.q = np.array([61, 50, 55, 58])
        self.k = np.array([50, 53, 61, 57, 55])
        self.g = rng.standard_normal((4, 5))

    def test_prefix_sum_differences(self):
        c = np.cumsum(log_sigmoid(self.x), axis=0)
        for h in range(2):
            want = c[self.q - self.first, h][:, None] - c[self.k - self.first, h][None, :]
            # |c| ~ 20: rounding of two cumulative sums, ~1e-14.
            np.testing.assert_allclose(self.bias.fill_tile(h, self.q, self.k), want, atol=1e-12)
        self.assertTrue(self.bias.causal)

    def test_logit_gradient_matches_central_differences(self):
        prefix = self.bias.accumulate_gradient(1, self.q, self.k, self.g)
        grad = self.bias.logit_gradient(prefix)
        x = self.x.copy()

        def loss():
            return np.sum(self.g * gpe.FoxBias(x, first_position=self.first)
                          .fill_tile(1, self.q, self.k))
        # Smooth in x: truncation ~h^2 = 1e-10, rounding ~1e-16 * |L| / h ~ 1e-10.
        np.testing.assert_allclose(grad, central_difference(loss, x), atol=1e-7)
        self.assertGreater(np.abs(grad).max(), 1e-2)

    def test_bad_input(self):
        with self.assertRaises(gpe.GpeError):
            self.bias.fill_tile(0, [62], [50])  # outside the 12 tokens
        with self.assertRaises(gpe.GpeError):
            self.bias.fill_tile(2, [50], [50])  # head 2 of 2
        with self.assertRaises(gpe.GpeError) as ctx:
            gpe.FoxBias(np.array([[0.0], [np.nan]]))
        self.assertIn("gate_logits[1]", str(ctx.exception))


class GrapeApTest(unittest.TestCase):
    def test_path_sum_and_gradients(self):
        rng = np.random.default_rng(4)
        length, heads, rank = 7, 2, 3
        w = rng.standard_normal((length, heads, rank))
        u = rng.standard_normal((length, heads, rank))
        bias = gpe.GrapeApBias(w, u)
        q, k = np.array([6, 0, 3]), np.array([0, 2, 3, 5, 6])

        def reference(w_, u_, h):
            psi = lambda t, l: -np.logaddexp(0.0, w_[t, h] @ u_[l, h])  # -softplus
            out = np.empty((len(q), len(k)))
            for r, t in enumerate(q):
                for c, j in enumerate(k):
                    if j <= t:
                        out[r, c] = sum(psi(t, l) for l in range(j + 1, t + 1))
                    else:  # the signed path sum continued above the diagonal
                        out[r, c] = -sum(psi(t, l) for l in range(t + 1, j + 1))
            return out
        np.testing.assert_allclose(bias.fill_tile(1, q, k), reference(w, u, 1), atol=1e-12)
        g = rng.standard_normal((3, 5))
        gw, gu = bias.accumulate_gradient(1, q, k, g)

        def loss():
            return np.sum(g * reference(w, u, 1))
        # Smooth: central-difference error ~1e-10 (see FoxTest).
        np.testing.assert_allclose(gw, central_difference(loss, w), atol=1e-7)
        np.testing.assert_allclose(gu, central_difference(loss, u), atol=1e-7)
        self.assertGreater(np.abs(gw).max(), 1e-2)


class GrapeATest(unittest.TestCase):
    """Additive GRAPE against NumPy: the lift built from its definition (G(p) = I + p m A,
    A = E_{d, d+1}, queries by G(i)^-T, keys by G(j)) and ALiBi's / FoX's published
    formulas."""

    @staticmethod
    def lift_reference(x, positions, clock, role):
        """Dense unipotent action on the homogeneous lift, independent of the library:
        query rows G(i)^-T [q; 1; 0], key rows G(j) [k; 0; 1] with G(p) = I + clock(p) A."""
        n, d = x.shape
        a = np.zeros((d + 2, d + 2))
        a[d, d + 1] = 1.0
        out = np.empty((n, d + 2))
        for r in range(n):
            g = np.eye(d + 2) + clock(positions[r]) * a
            if role == "query":
                out[r] = np.linalg.inv(g).T @ np.concatenate([x[r], [1.0, 0.0]])
            else:
                out[r] = g @ np.concatenate([x[r], [0.0, 1.0]])
        return out

    def test_equals_alibi_exactly(self):
        # Tolerance 0: the closed form is ALiBi's arithmetic for any slopes; the lifted
        # path's m j - m i is exact for the power-of-two slopes of 8 heads.
        q = np.array([0, 9, 1000003, 17])
        k = np.array([0, 4, 9, 999990, 1000003, 20])
        for n, paths in ((12, ("closed_form",)), (8, ("closed_form", "lifted"))):
            alibi = gpe.Alibi(n)
            slopes = np.array(alibi_slopes_reference(n))
            for path in paths:
                grape = gpe.GrapeABias(n, head_dim=8, path=path)
                self.assertEqual(grape.kind, "grape_a")
                self.assertTrue(grape.causal)
                np.testing.assert_allclose(grape.slopes, slopes, rtol=1e-14)
                for h in range(n):
                    got = grape.fill_tile(h, q, k)
                    np.testing.assert_array_equal(got, alibi.fill_tile(h, q, k))
                    # Press et al.: -m_h (i - j), NumPy with the library's slope.
                    np.testing.assert_array_equal(
                        got, -grape.slopes[h] * (q[:, None] - k[None, :]).astype(np.float64))

    def test_lifted_path_matches_closed_form(self):
        # Any slopes: the lift rounds m j and m i once each: |diff| <= eps m (|i| + |j|)
        # + eps |b|; twice that allowed.
        slopes = np.array([0.3, 1 / 3, 2.7])
        fast = gpe.GrapeABias(head_dim=5, slopes=slopes)
        lifted = gpe.GrapeABias(head_dim=5, slopes=slopes, path="lifted")
        q, k = np.array([10, 20000, 123457]), np.array([0, 19999, 123456, 7])
        eps = np.finfo(np.float64).eps
        for h in range(3):
            a, b = fast.fill_tile(h, q, k), lifted.fill_tile(h, q, k)
            bound = 2 * eps * (slopes[h] * (np.abs(q)[:, None] + np.abs(k)[None, :]) + np.abs(a))
            self.assertTrue(np.all(np.abs(a - b) <= bound))

    def test_gated_equals_fox(self):
        rng = np.random.default_rng(7)
        x = rng.standard_normal((15, 2)) * 2
        first = 30
        q, k = np.array([44, 30, 37, 40]), np.array([30, 31, 38, 44, 41])
        c = np.cumsum(log_sigmoid(x), axis=0)
        fox = gpe.FoxBias(x, first_position=first)
        for path in ("closed_form", "lifted"):
            grape = gpe.GrapeABias(gate_logits=x, first_position=first, head_dim=3, path=path)
            self.assertTrue(grape.gated)
            for h in range(2):
                got = grape.fill_tile(h, q, k)
                # The same bits as FoX through the library for the closed form (tolerance
                # 0); the lifted path carries one double per prefix sum where FoX carries a
                # compensated pair, so it is within half an ulp of |c_q| and of |c_k|
                # (grape_a.h): 2^-53 (|c_q| + |c_k|), here ~4e-15 ...
                fx = fox.fill_tile(h, q, k)
                if path == "closed_form":
                    np.testing.assert_array_equal(got, fx)
                else:
                    cq = np.abs(c[q - first, h])[:, None]
                    ck = np.abs(c[k - first, h])[None, :]
                    self.assertTrue(np.all(np.abs(got - fx) <= 2.0 ** -53 * (cq + ck)))
                # ... and FoX's formula in NumPy: |c| ~ 20, two cumulative sums ~1e-14.
                want = c[q - first, h][:, None] - c[k - first, h][None, :]
                np.testing.assert_allclose(got, want, atol=1e-12)

    def test_lift_rows_against_numpy(self):
        rng = np.random.default_rng(8)
        d = 4
        slopes = np.array([0.25, 0.7])
        x = rng.standard_normal((10, 2)) * 2
        first = 3
        c = np.cumsum(log_sigmoid(x), axis=0)
        forms = [
            (gpe.GrapeABias(head_dim=d, slopes=slopes), lambda h: lambda p: slopes[h] * p),
            # The gated clock: key at j moved by I - c_j A (GRAPE: exp(-ln f_l A) steps).
            (gpe.GrapeABias(gate_logits=x, first_position=first, head_dim=d),
             lambda h: lambda p: -c[p - first, h]),
        ]
        qp, kp = np.array([4, 9, 12]), np.array([3, 4, 11, 12])
        q, k = rng.standard_normal((3, d)), rng.standard_normal((4, d))
        for bias, clock in forms:
            for h in range(2):
                lq = bias.lift(h, qp, q, role="query")
                lk = bias.lift(h, kp, k, role="key")
                # Entries are sums of a few products of size <~ 20: 1e-13.
                np.testing.assert_allclose(lq, self.lift_reference(q, qp, clock(h), "query"),
                                           atol=1e-13)
                np.testing.assert_allclose(lk, self.lift_reference(k, kp, clock(h), "key"),
                                           atol=1e-13)
                # The lifted score is <q, k> + b (a 6-term dot, terms <~ 20: 1e-12).
                np.testing.assert_allclose(lq @ lk.T, q @ k.T + bias.fill_tile(h, qp, kp),
                                           atol=1e-12)
                lq32 = bias.lift(h, qp, q.astype(np.float32), role="query")
                self.assertEqual(lq32.dtype, np.float32)
                # float32 inputs are exact in double; one rounding on store.
                np.testing.assert_array_equal(
                    lq32, bias.lift(h, qp, q.astype(np.float32).astype(np.float64),
                                    role="query").astype(np.float32))

    def test_gradients_match_central_differences(self):
        rng = np.random.default_rng(9)
        q, k = np.array([2, 6, 9]), np.array([1, 2, 5, 9, 11])
        g = rng.standard_normal((3, 5))
        slopes = np.array([0.4, 0.15])
        for path in ("closed_form", "lifted"):
            grad = np.zeros(2)
            bias = gpe.GrapeABias(head_dim=2, slopes=slopes, path=path)
            for h in range(2):
                bias.accumulate_gradient(h, q, k, g, grad)
            s = slopes.copy()

            def loss():
                b = gpe.GrapeABias(head_dim=2, slopes=s, path=path)
                return sum(np.sum(g * b.fill_tile(h, q, k)) for h in range(2))
            # Linear in the slopes: the central difference is exact up to rounding, 1e-9.
            np.testing.assert_allclose(grad, central_difference(loss, s, h=1e-3), atol=1e-9)
            # db/dm = (j - i): NumPy.
            want = [np.sum(g * (k[None, :] - q[:, None])) for _ in range(2)]
            np.testing.assert_allclose(grad, want, rtol=1e-14)
        x = rng.standard_normal((12, 2))
        bias = gpe.GrapeABias(gate_logits=x, first_position=0, head_dim=2, path="lifted")
        prefix = np.zeros((12, 2))
        for h in range(2):
            bias.accumulate_gradient(h, q, k, g, prefix)
        grad = bias.logit_gradient(prefix)
        xx = x.copy()

        def gated_loss():
            b = gpe.GrapeABias(gate_logits=xx, head_dim=2)
            return sum(np.sum(g * b.fill_tile(h, q, k)) for h in range(2))
        # Smooth in x: truncation ~h^2 = 1e-10, rounding ~1e-16 |L| / h ~ 1e-10.
        np.testing.assert_allclose(grad, central_difference(gated_loss, xx), atol=1e-7)
        self.assertGreater(np.abs(grad).max(), 1e-2)

    def test_bad_input(self):
        with self.assertRaises(gpe.GpeError) as ctx:
            gpe.GrapeABias(2, head_dim=0)
        self.assertIn("head_dim", str(ctx.exception))
        with self.assertRaises(gpe.GpeError):
            gpe.GrapeABias(head_dim=2, slopes=[0.5, np.inf])
        with self.assertRaises(gpe.GpeError):
            gpe.GrapeABias(gate_logits=np.array([[0.0], [np.nan]]), head_dim=2)
        with self.assertRaises(ValueError):
            gpe.GrapeABias(2, head_dim=2, path="fast")
        bias = gpe.GrapeABias(2, head_dim=3)
        with self.assertRaises(gpe.GpeError):
            bias.lift(0, [1, 2], np.zeros((2, 4)))  # head_dim is 3
        with self.assertRaises(gpe.GpeError):
            bias.lift(2, [1, 2], np.zeros((2, 3)))  # head 2 of 2
        with self.assertRaises(gpe.GpeError):
            bias.lift(0, [1], np.zeros((2, 3)))  # one position, two rows
        gated = gpe.GrapeABias(gate_logits=np.zeros((4, 1)), first_position=10, head_dim=3)
        with self.assertRaises(gpe.GpeError):
            gated.fill_tile(0, [9], [10])  # before the first gate
        with self.assertRaises(ValueError):
            bias.logit_gradient(np.zeros((4, 1)))


if __name__ == "__main__":
    unittest.main()
