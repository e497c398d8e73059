"""Tests of gpe.sequence against independent NumPy implementations of the published
formulas (run by `bazel test`)."""

import unittest
from fractions import Fraction

import sanitizer_preload
from gpe import _ffi

sanitizer_preload.reexec_if_needed(next((str(p) for p in _ffi._candidates() if p.is_file()), None))

import numpy as np  # noqa: E402

import gpe  # noqa: E402

# pi to 60 digits, as an exact rational.
_PI = Fraction("3.14159265358979323846264338327950288419716939937510582097494459")


def reduced_angle(p, theta):
    """p * theta mod 2 pi from the exact rational product (no float rounding)."""
    a = Fraction(p) * Fraction(theta)
    k = round(a / (2 * _PI))
    return float(a - k * 2 * _PI)


def sinusoidal_reference(positions, dim, base):
    """Vaswani et al., sec. 3.5: PE(p, 2i) = sin(p theta_i), PE(p, 2i+1) = cos(p theta_i)."""
    out = np.empty((len(positions), dim))
    for n, p in enumerate(positions):
        for c in range(dim):
            a = reduced_angle(int(p), base ** (-2.0 * (c // 2) / dim))
            out[n, c] = np.sin(a) if c % 2 == 0 else np.cos(a)
    return out


def expm_normal(m):
    """exp(M) for a normal (here skew-symmetric) M by eigendecomposition."""
    w, v = np.linalg.eig(m)
    return (v @ np.diag(np.exp(w)) @ np.linalg.inv(v)).real


def grape_reference(a, b, omega, p):
    """GRAPE-M: G(p) = prod_k exp(p omega_k (a_k b_k^T - b_k a_k^T)), leftmost k = 0."""
    g = np.eye(a.shape[1])
    for k in range(a.shape[0]):
        g = g @ expm_normal(p * omega[k] * (np.outer(a[k], b[k]) - np.outer(b[k], a[k])))
    return g


def central_difference(loss, param, h=1e-5):
    """d loss / d param by central differences (param modified and restored in place)."""
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


class SinusoidalTest(unittest.TestCase):
    def test_matches_formula(self):
        pos = np.array([0, 1, 5, -17, 9999])
        for dim in (1, 6, 9):
            for dtype, atol in ((np.float64, 1e-11), (np.float32, 1e-11 + 2.0**-24)):
                # float64: theta from pow (reference) vs exp/log (library) differs by
                # ~1 ulp, times |p| <= 1e4: ~2e-12 rad. float32 adds one output rounding.
                got = gpe.sinusoidal(pos, dim, base=1000.0, dtype=dtype)
                self.assertEqual(got.dtype, dtype)
                np.testing.assert_allclose(got, sinusoidal_reference(pos, dim, 1000.0),
                                           rtol=0, atol=atol)

    def test_angle_addition_at_large_positions(self):
        # Exact reduction makes PE(p + q) = rotate(PE(p), q) to rounding even at 2^40;
        # an unreduced double product would be off by ~ulp(2^40) ~ 1e-4 rad.
        big = 2**40 + 3
        e = gpe.sinusoidal([big, 11, big + 11], 10)
        s, c = e[:, 0::2], e[:, 1::2]
        np.testing.assert_allclose(s[2], s[0] * c[1] + c[0] * s[1], rtol=0, atol=1e-14)
        np.testing.assert_allclose(c[2], c[0] * c[1] - s[0] * s[1], rtol=0, atol=1e-14)

    def test_bad_input(self):
        with self.assertRaises(gpe.GpeError) as ctx:
            gpe.sinusoidal([1, 2], 4, base=-1.0)
        self.assertEqual(ctx.exception.status, "GPE_ERROR_INVALID_ARGUMENT")
        self.assertIn("base", str(ctx.exception))
        with self.assertRaises(gpe.GpeError):
            gpe.sinusoidal([1, 2], 4, out=np.empty((3, 4)))
        with self.assertRaises(TypeError):
            gpe.sinusoidal([1.5, 2.0], 4)
        # A writable output whose rows alias (row stride 0) is rejected.
        base = np.zeros(4)
        aliased = np.lib.stride_tricks.as_strided(base, shape=(3, 4), strides=(0, 8))
        with self.assertRaises(gpe.GpeError) as ctx:
            gpe.sinusoidal([1, 2, 3], 4, out=aliased)
        self.assertIn("overlap themselves", str(ctx.exception))


class LearnedPositionsTest(unittest.TestCase):
    def test_lookup_and_backward(self):
        rng = np.random.default_rng(0)
        table = rng.standard_normal((7, 4))
        lp = gpe.LearnedPositions(table)
        self.assertEqual(lp.shape, (7, 4))
        pos = np.array([6, 0, 3, 3, 6, 6])
        np.testing.assert_array_equal(lp.lookup(pos), table[pos])  # a copy: exact
        g = rng.standard_normal((6, 4))
        acc = np.full((7, 4), 0.25)
        want = acc.copy()
        np.add.at(want, pos, g)
        out = lp.backward(pos, g, acc)
        self.assertIs(out, acc)
        # Sums of <= 4 O(1) terms in double: rounding ~1e-15.
        np.testing.assert_allclose(acc, want, rtol=0, atol=1e-14)
        # Strided float32 gradient rows.
        g32 = np.asfortranarray(g.astype(np.float32))
        np.testing.assert_allclose(lp.backward(pos, g32), want - 0.25, rtol=0, atol=1e-6)

    def test_bad_input(self):
        lp = gpe.LearnedPositions(np.zeros((3, 2)))
        with self.assertRaises(gpe.GpeError) as ctx:
            lp.lookup([0, 3])
        self.assertIn("3", str(ctx.exception))
        with self.assertRaises(gpe.GpeError):
            gpe.LearnedPositions(np.array([[1.0, np.inf]]))
        with self.assertRaises(gpe.GpeError):
            lp.backward([0, 1], np.zeros((2, 2)), np.zeros((4, 2)))


class GrapeMTest(unittest.TestCase):
    def setUp(self):
        rng = np.random.default_rng(1)
        self.a = rng.standard_normal((3, 5))
        self.b = rng.standard_normal((3, 5))
        self.omega = 0.3 * rng.standard_normal(3)
        self.rng = rng

    def test_matrix_and_apply_match_numpy(self):
        g = gpe.GrapeM(self.a, self.b, self.omega)
        self.assertEqual(g.shape, (3, 5))
        pos = np.array([0, 2, -3, 11])
        x = self.rng.standard_normal((4, 5))
        y = g.apply(pos, x)
        for n, p in enumerate(pos):
            ref = grape_reference(self.a, self.b, self.omega, p)
            # eig-based expm of skew matrices with entries up to ~30: ~1e-12.
            np.testing.assert_allclose(g.matrix(p), ref, rtol=0, atol=1e-10)
            np.testing.assert_allclose(y[n], ref @ x[n], rtol=0, atol=1e-10)
        # In place on a column-major float32 view: float32 rounding of O(1) values.
        x32 = np.asfortranarray(x.astype(np.float32))
        g.apply(pos, x32, out=x32)
        np.testing.assert_allclose(x32, y, rtol=0, atol=1e-5)

    def test_single_generator_is_relative(self):
        g = gpe.GrapeM(self.a[0], self.b[0], self.omega[0])
        q, k = self.rng.standard_normal(5), self.rng.standard_normal(5)
        for i, j in ((3, 9), (-50, 4), (1000, 997)):
            lhs = g.apply([i], q[None])[0] @ g.apply([j], k[None])[0]
            rhs = q @ g.apply([j - i], k[None])[0]
            self.assertAlmostEqual(lhs, rhs, delta=1e-12)  # rounding of O(1) dot products

    def test_backward_matches_finite_differences(self):
        pos = np.array([1, -2, 3])
        x = self.rng.standard_normal((3, 5))
        w = self.rng.standard_normal((3, 5))
        a, b, om = self.a.copy(), self.b.copy(), self.omega.copy()
        gx, ga, gb, gw = gpe.GrapeM(a, b, om).backward(pos, x, w)

        def loss():
            return float(np.sum(w * gpe.GrapeM(a, b, om).apply(pos, x)))

        # h = 1e-5: truncation ~h^2 |p|^3 ~ 1e-9, rounding ~eps/h ~ 1e-11.
        for got, param in ((ga, a), (gb, b), (gw, om), (gx, x)):
            np.testing.assert_allclose(got, central_difference(loss, param), rtol=1e-6,
                                       atol=1e-7)

    def test_bad_input(self):
        with self.assertRaises(gpe.GpeError) as ctx:
            gpe.GrapeM(self.a, self.b, [0.1, np.nan, 0.2])
        self.assertIn("omega[1]", str(ctx.exception))
        with self.assertRaises(ValueError):
            gpe.GrapeM(self.a, self.b[:2], self.omega)
        g = gpe.GrapeM(self.a, self.b, self.omega)
        with self.assertRaises(gpe.GpeError) as ctx:
            g.apply([1, 2], np.zeros((2, 4)))
        self.assertIn("dim 5", str(ctx.exception))
        with self.assertRaises(gpe.GpeError):
            g.backward([1, 2], np.zeros((2, 5)), np.zeros((2, 5), dtype=np.float32))


class AlgebraicSequenceTest(unittest.TestCase):
    def setUp(self):
        rng = np.random.default_rng(2)
        self.A = 0.4 * rng.standard_normal((4, 4))
        self.rng = rng

    def test_powers_match_numpy_expm(self):
        s = self.A - self.A.T
        seq = gpe.AlgebraicSequence(s)
        self.assertEqual(seq.dim, 4)
        for p in (0, 1, -2, 9):
            # eig-based expm of a skew matrix, |pS| <= ~10: ~1e-13.
            np.testing.assert_allclose(seq.matrix(p), expm_normal(p * s), rtol=0, atol=1e-10)
        # Homomorphism at far positions: W^p W^q = W^(p+q) (exactly reduced angles).
        big = 2**45
        np.testing.assert_allclose(seq.matrix(big) @ seq.matrix(-big + 5), seq.matrix(5),
                                   rtol=0, atol=1e-12)
        x = self.rng.standard_normal((2, 4))
        y = seq.apply([3, -1], x)
        np.testing.assert_allclose(y[0], seq.matrix(3) @ x[0], rtol=0, atol=1e-13)
        np.testing.assert_allclose(y[1], seq.matrix(-1) @ x[1], rtol=0, atol=1e-13)

    def test_backward_matches_finite_differences(self):
        pos = np.array([2, -1, 3])
        x = self.rng.standard_normal((3, 4))
        w = self.rng.standard_normal((3, 4))
        A = self.A.copy()
        gx, gs = gpe.AlgebraicSequence(A - A.T).backward(pos, x, w)

        def loss():
            return float(np.sum(w * gpe.AlgebraicSequence(A - A.T).apply(pos, x)))

        # S = A - A^T: dL/dA = G - G^T for the unprojected G = dL/dS. Tolerances as in
        # GrapeMTest (h = 1e-5, |p| <= 3).
        np.testing.assert_allclose(gs - gs.T, central_difference(loss, A), rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(gx, central_difference(loss, x), rtol=1e-6, atol=1e-7)

    def test_bad_input(self):
        with self.assertRaises(gpe.GpeError) as ctx:
            gpe.AlgebraicSequence(self.A)  # not skew
        self.assertEqual(ctx.exception.status, "GPE_ERROR_INVALID_ARGUMENT")
        self.assertIn("skew-symmetric", str(ctx.exception))
        with self.assertRaises(ValueError):
            gpe.AlgebraicSequence(np.zeros((2, 3)))
        seq = gpe.AlgebraicSequence(self.A - self.A.T)
        with self.assertRaises(gpe.GpeError):
            seq.apply([1, 2, 3], np.zeros((2, 4)))


def shaw_reference(q, table, qp, kp):
    """Shaw et al.: label clip(j - i, -k, k) with Python integers (exact differences)."""
    k = (table.shape[0] - 1) // 2
    out = np.empty((len(qp), len(kp)))
    for a, i in enumerate(qp):
        for b, j in enumerate(kp):
            out[a, b] = q[a] @ table[max(-k, min(k, int(j) - int(i))) + k]
    return out


class ShawKeyScoresTest(unittest.TestCase):
    def setUp(self):
        rng = np.random.default_rng(3)
        self.q = rng.standard_normal((4, 3))
        self.table = rng.standard_normal((5, 3))  # k = 2
        self.qp = np.array([0, 4, -2**63, 10])
        self.kp = np.array([0, 1, 3, 2**63 - 1, 11])
        self.rng = rng

    def test_matches_reference(self):
        got = gpe.shaw_key_scores(self.q, self.table, self.qp, self.kp)
        # d = 3 products summed: rounding ~1e-16.
        np.testing.assert_allclose(got, shaw_reference(self.q, self.table, self.qp, self.kp),
                                   rtol=0, atol=1e-14)
        # Relativity: a common shift of all positions changes nothing.
        qp, kp = np.array([0, 4, -50, 10]), np.array([0, 1, 3, 70, 11])
        np.testing.assert_array_equal(gpe.shaw_key_scores(self.q, self.table, qp, kp),
                                      gpe.shaw_key_scores(self.q, self.table, qp + 999, kp + 999))

    def test_backward_matches_finite_differences(self):
        w = self.rng.standard_normal((4, 5))
        q, table = self.q.copy(), self.table.copy()
        gq, gt = gpe.shaw_key_scores_backward(q, table, self.qp, self.kp, w)

        def loss():
            return float(np.sum(w * gpe.shaw_key_scores(q, table, self.qp, self.kp)))

        # Linear loss: central differences are exact up to rounding eps |L| / h ~ 1e-10.
        np.testing.assert_allclose(gq, central_difference(loss, q), rtol=0, atol=1e-8)
        np.testing.assert_allclose(gt, central_difference(loss, table), rtol=0, atol=1e-8)

    def test_bad_input(self):
        with self.assertRaises(gpe.GpeError) as ctx:
            gpe.shaw_key_scores(self.q, self.table[:4], self.qp, self.kp)
        self.assertIn("odd", str(ctx.exception))
        with self.assertRaises(gpe.GpeError):
            gpe.shaw_key_scores(self.q[:3], self.table, self.qp, self.kp)


class AlgebraicTreeTest(unittest.TestCase):
    """Kogkalidis et al., sec. 3.2, in NumPy: node matrix = product of expm(S_c) along the
    path, free-group relativity, gradients by central differences."""

    def setUp(self):
        self.rng = np.random.default_rng(11)
        a = 0.5 * self.rng.standard_normal((3, 4, 4))
        self.A = a
        self.paths = [[], [2], [0, 1], [1, 1, 2, 0]]

    def reference(self, skews, path):
        m = np.eye(skews.shape[1])
        for c in path:
            m = m @ expm_normal(skews[c])
        return m

    def test_apply_matrix_and_relativity(self):
        s = self.A - self.A.transpose(0, 2, 1)
        tree = gpe.AlgebraicTree(s)
        x = self.rng.standard_normal((4, 4))
        y = tree.apply(self.paths, x)
        for n, path in enumerate(self.paths):
            ref = self.reference(s, path)
            # eig-based expm of skew matrices, depth <= 4: ~1e-13.
            np.testing.assert_allclose(tree.matrix(path), ref, atol=1e-12)
            np.testing.assert_allclose(y[n], ref @ x[n], atol=1e-12)
            # Orthogonal: norms preserved.
            self.assertAlmostEqual(np.linalg.norm(y[n]), np.linalg.norm(x[n]), places=12)
        # <rho(a) q, rho(b) k> = <q, rho(a)^T rho(b) k>: the path a^-1 b.
        ra, rb = self.reference(s, self.paths[2]), self.reference(s, self.paths[3])
        self.assertAlmostEqual(y[2] @ y[3], x[2] @ (ra.T @ rb @ x[3]), places=12)
        # The padded int64 form gives the same bits.
        np.testing.assert_array_equal(tree.apply(gpe.AlgebraicTree.addresses(self.paths), x), y)

    def test_backward_matches_finite_differences(self):
        x = self.rng.standard_normal((4, 4))
        w = self.rng.standard_normal((4, 4))
        A = self.A.copy()

        def skews():
            return A - A.transpose(0, 2, 1)
        gx, gs = gpe.AlgebraicTree(skews()).backward(self.paths, x, w)

        def loss():
            return float(np.sum(w * gpe.AlgebraicTree(skews()).apply(self.paths, x)))
        # S_c = A_c - A_c^T: dL/dA_c = G_c - G_c^T. h = 1e-5, paths of <= 4 generators
        # with |S| ~ 1: central-difference error ~1e-9.
        np.testing.assert_allclose(gs - gs.transpose(0, 2, 1), central_difference(loss, A),
                                   rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(gx, central_difference(loss, x), rtol=1e-6, atol=1e-7)

    def test_node_matrices_level_order(self):
        s = self.A - self.A.transpose(0, 2, 1)
        tree = gpe.AlgebraicTree(s)
        table = tree.node_matrices(2)
        self.assertEqual(table.shape, (1 + 3 + 9, 4, 4))
        paths = [[]] + [[a] for a in range(3)] + [[a, b] for a in range(3) for b in range(3)]
        for n, path in enumerate(paths):
            # One product per node from the previous level: 1e-12 against the direct path.
            np.testing.assert_allclose(table[n], self.reference(s, path), atol=1e-12)

    def test_bad_input(self):
        tree = gpe.AlgebraicTree(self.A - self.A.transpose(0, 2, 1))
        with self.assertRaises(gpe.GpeError):
            tree.node_matrices(-1)
        with self.assertRaises(gpe.GpeError):
            tree.apply([[3]], np.zeros((1, 4)))  # branch 3 of 3
        with self.assertRaises(gpe.GpeError):
            tree.apply(np.array([[-1, 0]]), np.zeros((1, 4)))  # index after the padding
        with self.assertRaises(gpe.GpeError) as ctx:
            gpe.AlgebraicTree(self.A)  # not skew
        self.assertIn("skew", str(ctx.exception))


class AlgebraicGridTest(unittest.TestCase):
    def test_apply_and_backward(self):
        rng = np.random.default_rng(12)
        A = [0.5 * rng.standard_normal((2, 2)), 0.5 * rng.standard_normal((3, 3))]
        grid = gpe.AlgebraicGrid([a - a.T for a in A])
        pos = np.array([[3, -2], [0, 5], [-7, 1]])
        x = rng.standard_normal((3, 5))
        y = grid.apply(pos, x)
        for n in range(3):
            # Block diagonal (Kogkalidis et al., sec. 3.3): axis 0 on coordinates 0..1,
            # axis 1 on 2..4; eig expm at |p S| <~ 10: 1e-11.
            want = np.concatenate([expm_normal(pos[n, 0] * (A[0] - A[0].T)) @ x[n, :2],
                                   expm_normal(pos[n, 1] * (A[1] - A[1].T)) @ x[n, 2:]])
            np.testing.assert_allclose(y[n], want, atol=1e-11)
        w = rng.standard_normal((3, 5))
        gx, gs = grid.backward(pos, x, w)

        def loss():
            return float(np.sum(w * gpe.AlgebraicGrid([a - a.T for a in A]).apply(pos, x)))
        for a, g in zip(A, gs):
            np.testing.assert_allclose(g - g.T, central_difference(loss, a), rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(gx, central_difference(loss, x), rtol=1e-6, atol=1e-7)
        with self.assertRaises(gpe.GpeError):
            grid.apply(np.zeros((3, 3), dtype=np.int64), x)  # 3 coordinates for 2 axes


class AlgebraicPeriodicAndLocalityTest(unittest.TestCase):
    def test_periodic_wraps_exactly(self):
        rng = np.random.default_rng(13)
        x = np.tile(rng.standard_normal(4), (6, 1))
        pos = np.array([0, 1, 12, 13, -11, 10**12 + 1])  # 10^12 = 4 mod 12
        y = gpe.algebraic_periodic(pos, x, period=12, multipliers=[1, 5])
        for n, p in enumerate(pos):
            for k, m in enumerate((1, 5)):
                a = 2 * np.pi * ((m * int(p)) % 12) / 12
                c, s = np.cos(a), np.sin(a)
                want = [c * x[n, 2 * k] - s * x[n, 2 * k + 1], s * x[n, 2 * k] + c * x[n, 2 * k + 1]]
                np.testing.assert_allclose(y[n, 2 * k:2 * k + 2], want, atol=1e-14)
        np.testing.assert_array_equal(y[0], y[2])  # W^12 = I, bit for bit
        np.testing.assert_array_equal(y[1], y[3])
        np.testing.assert_array_equal(y[1], y[4])
        # Backward: apply at -p undoes apply at p (orthogonal).
        back = gpe.algebraic_periodic(-pos, y, period=12, multipliers=[1, 5])
        np.testing.assert_allclose(back, x, atol=1e-14)
        with self.assertRaises(gpe.GpeError):
            gpe.algebraic_periodic(pos, x, period=0, multipliers=[1, 5])

    def test_locality(self):
        rng = np.random.default_rng(14)
        q, k = np.array([0, 10, 10**12]), np.array([0, 3, 10, 10**12 - 10])
        s = rng.standard_normal((3, 4))
        want = s * 0.98 ** np.abs(q[:, None] - k[None, :]).astype(np.float64)
        got = gpe.locality_scale(s.copy(), q, k, c=0.98)
        # exp(d ln c) against NumPy's power: a few ulps.
        np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-300)
        with self.assertRaises(gpe.GpeError):
            gpe.locality_scale(s.copy(), q, k, c=1.5)


class ShawValueAndTransformerXLTest(unittest.TestCase):
    def test_shaw_value_output(self):
        rng = np.random.default_rng(15)
        qp, kp = np.array([0, 4, -2**63, 10]), np.array([0, 1, 3, 2**63 - 1, 11])
        p = rng.random((4, 5))
        table = rng.standard_normal((5, 3))  # k = 2
        k = 2
        want = np.zeros((4, 3))
        for a, i in enumerate(qp):
            for b, j in enumerate(kp):
                # Shaw et al., eq. 3: label clip(j - i, -k, k), exact with Python ints.
                want[a] += p[a, b] * table[max(-k, min(k, int(j) - int(i))) + k]
        got = gpe.shaw_value_output(p, table, qp, kp)
        np.testing.assert_allclose(got, want, atol=1e-14)  # 5-term sums
        w = rng.standard_normal((4, 3))
        pp, tt = p.copy(), table.copy()
        gp, gt = gpe.shaw_value_output_backward(pp, tt, qp, kp, w)

        def loss():
            return float(np.sum(w * gpe.shaw_value_output(pp, tt, qp, kp)))
        # Linear in each argument: central differences exact up to rounding ~1e-10.
        np.testing.assert_allclose(gp, central_difference(loss, pp), atol=1e-8)
        np.testing.assert_allclose(gt, central_difference(loss, tt), atol=1e-8)
        with self.assertRaises(gpe.GpeError):
            gpe.shaw_value_output(p[:3], table, qp, kp)  # probabilities [3, 5] for 4 queries

    def test_transformer_xl(self):
        rng = np.random.default_rng(16)
        d, dr = 3, 6
        qp, kp = np.array([5, 9, 12]), np.array([0, 5, 9, 11])
        q, k = rng.standard_normal((3, d)), rng.standard_normal((4, d))
        w_r, u, v = rng.standard_normal((d, dr)), rng.standard_normal(d), rng.standard_normal(d)

        def reference(q, k, w_r, u, v):
            out = np.empty((3, 4))
            for a, i in enumerate(qp):
                for b, j in enumerate(kp):
                    r = sinusoidal_reference([int(i) - int(j)], dr, 10000.0)[0]
                    # Dai et al., sec. 3.3, terms (b), (c), (d).
                    out[a, b] = q[a] @ w_r @ r + u @ k[b] + v @ w_r @ r
            return out
        got = gpe.transformer_xl_score_terms(q, k, qp, kp, w_r, u, v)
        np.testing.assert_allclose(got, reference(q, k, w_r, u, v), atol=1e-13)
        g = rng.standard_normal((3, 4))
        grads = gpe.transformer_xl_score_terms_backward(q, k, qp, kp, w_r, u, v, g)
        params = [q.copy(), k.copy(), w_r.copy(), u.copy(), v.copy()]

        def loss():
            return float(np.sum(g * gpe.transformer_xl_score_terms(
                params[0], params[1], qp, kp, params[2], params[3], params[4])))
        # Bilinear / linear: central differences exact up to rounding ~1e-10.
        for grad, param in zip(grads, params):
            np.testing.assert_allclose(grad, central_difference(loss, param), atol=1e-8)
        with self.assertRaises(gpe.GpeError):
            gpe.transformer_xl_score_terms(q, k, qp, kp, w_r, u[:2], v)
        with self.assertRaises(gpe.GpeError):
            gpe.transformer_xl_score_terms(q, k, qp, kp, w_r, u, v, base=-1.0)


class CopyTest(unittest.TestCase):
    """copy.copy, copy.deepcopy and pickle rebuild an equal handle from the arguments (a
    shallow copy of the pointer was freed twice); the originals' later fate and the
    callers' arrays do not reach the copies."""

    def test_handles_rebuild_equal_and_independent(self):
        import copy
        import pickle
        rng = np.random.default_rng(5)
        pos = np.array([0, 3, -7, 1 << 40], dtype=np.int64)
        a, b = rng.normal(size=(2, 6)), rng.normal(size=(2, 6))
        skews = [rng.normal(size=(3, 3)) for _ in range(2)]
        skews = [m - m.T for m in skews]
        table = rng.normal(size=(9, 4)).astype(np.float32)
        slopes = np.array([0.5, 0.25, 0.125])
        cases = [
            (gpe.GrapeM(a, b, [0.3, 0.01]), lambda h: h.apply(pos, rng_x(4, 6))),
            (gpe.AlgebraicSequence(skews[0]), lambda h: h.apply(pos[:3], rng_x(3, 3))),
            (gpe.AlgebraicTree(np.stack(skews)), lambda h: h.matrix([0, 1, 1])),
            (gpe.AlgebraicGrid(skews), lambda h: h.apply(np.array([[1, 2], [-3, 5]]), rng_x(2, 6))),
            (gpe.LearnedPositions(table), lambda h: h.lookup([0, 8, 3])),
            (gpe.Alibi(3, slopes=slopes, symmetric=True),
             lambda h: h.fill_tile(1, [0, 5, 9], [2, 9])),
            (gpe.Alibi(4), lambda h: h.fill_tile(3, [0, 5, 9], [2, 9])),
            (gpe.T5Bias(rng.normal(size=(8, 2)), max_distance=16, bidirectional=False),
             lambda h: h.fill_tile(1, [0, 5, 40], [2, 9])),
            (gpe.GrapeABias(num_heads=3, head_dim=4, slopes=slopes, path="lifted"),
             lambda h: h.fill_tile(2, [0, 5, 9], [2, 9])),
        ]
        for handle, probe in cases:
            with self.subTest(type(handle).__name__):
                want = probe(handle)
                copies = [copy.copy(handle), copy.deepcopy(handle),
                          pickle.loads(pickle.dumps(handle))]
                handle.close()  # each copy owns its handle
                for c in copies:
                    self.assertIs(type(c), type(handle))
                    # Rebuilt from the same values by the same code: bit-equal results.
                    np.testing.assert_array_equal(probe(c), want)
                    c.close()
                with self.assertRaisesRegex(ValueError, "closed"):
                    copy.deepcopy(handle)
        # The caller's arrays changed after creation do not change a copy.
        alibi = gpe.Alibi(3, slopes=slopes)
        want = alibi.fill_tile(0, [4], [1])
        slopes[0] = 9.0
        np.testing.assert_array_equal(copy.deepcopy(alibi).fill_tile(0, [4], [1]), want)
        # Built from activations of a sequence's length: refused with a message.
        for h in (gpe.FoxBias(np.zeros((4, 2))),
                  gpe.GrapeABias(gate_logits=np.zeros((4, 2)), head_dim=2)):
            with self.assertRaisesRegex(TypeError, "cannot be copied or pickled"):
                copy.deepcopy(h)


def rng_x(n, d):
    return np.random.default_rng(n * 100 + d).normal(size=(n, d))


class HandleLifetimeAndTreeInputTest(unittest.TestCase):
    def test_two_threads_closing_one_handle_free_it_once(self):
        # close() was check, destroy (GIL released), clear: two threads could both
        # destroy (glibc: "double free or corruption", the process aborted).
        import threading
        for _ in range(200):
            h = gpe.AlgebraicSequence(np.zeros((32, 32)))
            barrier = threading.Barrier(2)
            ts = [threading.Thread(target=lambda: (barrier.wait(), h.close())) for _ in range(2)]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
            self.assertFalse(h._handle)

    def test_periodic_names_a_one_dimensional_x(self):
        # x must be [N, dim]: a 1-D x was reported as a wrong multiplier count (dim 0).
        with self.assertRaisesRegex(ValueError, r"x must be \[N, dim\]"):
            gpe.algebraic_periodic([0, 1], np.zeros(4), 5, [1, 2])

    def test_tree_addresses_are_integers_and_paths_one_dimensional(self):
        rng = np.random.default_rng(3)
        a = rng.standard_normal((2, 4, 4))
        t = gpe.AlgebraicTree(a - a.transpose(0, 2, 1))
        with self.assertRaises(TypeError):  # truncated to [[1, 0]] before
            t.addresses([[1.9, 0.2]])
        with self.assertRaises(TypeError):
            t.addresses([[True, False]])
        with self.assertRaisesRegex(ValueError, "one list"):  # read as [0] before
            t.matrix([[0, 1]])
        np.testing.assert_array_equal(t.addresses([[1, 0], [1]]), [[1, 0], [1, -1]])

if __name__ == "__main__":
    unittest.main()
