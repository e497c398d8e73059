"""Tests of gpe.coordinate against independent NumPy computations of the papers' formulas
(run by `bazel test`). No SciPy: Bessel functions come from the power series below."""

import copy
import math
import pickle
import unittest

import sanitizer_preload
from gpe import _ffi

sanitizer_preload.reexec_if_needed(next((str(p) for p in _ffi._candidates() if p.is_file()), None))

import numpy as np  # noqa: E402

import gpe  # noqa: E402


def bessel_j_series(m, x, terms=60):
    """J_m(x) = sum_j (-1)^j / (j! (j + m)!) (x / 2)^(2j + m) (DLMF 10.2.2). For x <= 10
    the largest term is ~(e x / 2)^... below 1e3, so cancellation costs < 4 digits."""
    x = np.asarray(x, dtype=np.float64)
    total = np.zeros_like(x)
    term = (x / 2) ** m / math.factorial(m)
    for j in range(terms):
        total += term
        term = term * -(x / 2) ** 2 / ((j + 1) * (j + 1 + m))
    return total


def finite_difference_vjp(encoder, points, grad_features, h=1e-6):
    """sum_f g[n, f] d features[n, f] / d points[n, d] by central differences."""
    out = np.zeros_like(points)
    for d in range(points.shape[1]):
        step = np.zeros_like(points)
        step[:, d] = h
        df = (encoder.encode(points + step) - encoder.encode(points - step)) / (2 * h)
        out[:, d] = (df * grad_features).sum(axis=1)
    return out


class FourierFeaturesTest(unittest.TestCase):
    def test_deterministic_frequency_schedules(self):
        x = np.random.default_rng(0).uniform(-1, 1, (9, 2))
        k, sigma = 6, 3.0
        i = np.arange(k)
        schedules = {
            # Zheng et al. eq. 50 (LinF) and eq. 51 (LogF), angle 2 pi b x.
            "linear": 2 * np.pi * ((k - i) + i * 2 ** sigma) / k,
            "log_linear": 2 * np.pi * 2 ** (sigma * i / k),
            # NeRF (Mildenhall et al. eq. 4): angles 2^k pi x.
            "nerf": 2.0 ** i * np.pi,
        }
        for kind, per_axis in schedules.items():
            with self.subTest(kind=kind):
                ff = gpe.FourierFeatures(kind, 2, k, scale=sigma)
                self.assertEqual(ff.dims, (2, 4 * k))
                # Axis-major rows: frequency vector per_axis[i] e_d at row d k + i.
                w = np.zeros((2 * k, 2))
                w[:k, 0] = per_axis
                w[k:, 1] = per_axis
                # Same products in double: relative 1e-15 on the frequencies.
                np.testing.assert_allclose(ff.angular_frequencies, w, rtol=1e-15, atol=0)
                a = x @ w.T
                # Angles up to |w x| ~ 2^5 pi ~ 100 rad: their rounding (~100 eps) is
                # the features' error, 1e-13 absolute with margin.
                np.testing.assert_allclose(ff.encode(x), np.hstack([np.cos(a), np.sin(a)]),
                                           rtol=0, atol=1e-13)

    def test_gaussian_and_txt_are_seeded_normals_with_their_conventions(self):
        x = np.random.default_rng(1).uniform(-1, 1, (5, 2))
        for kind, conv, factor in [("gaussian", "two_pi", 2 * np.pi),
                                   ("gaussian", "angular", 1.0), ("txt", "two_pi", 1.0)]:
            with self.subTest(kind=kind, convention=conv):
                ff = gpe.FourierFeatures(kind, 2, 2000, scale=3.0, convention=conv, seed=7)
                w = ff.angular_frequencies
                # b = w / factor ~ N(0, 9) entrywise: 4000 samples, the sample std is
                # within 3 / sqrt(8000) ~ 1.1% (1 sigma) of 3; 5% is > 4 sigma.
                self.assertAlmostEqual(np.std(w / factor) / 3.0, 1.0, delta=0.05)
                self.assertLess(abs(np.mean(w / factor)), 0.25)  # 3 / sqrt(4000) ~ 0.05
                a = x @ w.T
                np.testing.assert_allclose(ff.encode(x), np.hstack([np.cos(a), np.sin(a)]),
                                           rtol=0, atol=1e-12)
                # The same seed draws the same frequencies; another seed does not.
                again = gpe.FourierFeatures(kind, 2, 2000, 3.0, conv, seed=7)
                np.testing.assert_array_equal(again.angular_frequencies, w)
                other = gpe.FourierFeatures(kind, 2, 2000, 3.0, conv, seed=8)
                self.assertFalse(np.array_equal(other.angular_frequencies, w))

    def test_from_frequencies_and_backward(self):
        b = np.array([[0.5, -1.0], [2.0, 0.25], [0.0, 3.0]])
        ff = gpe.FourierFeatures.from_frequencies(b, "two_pi")
        x = np.random.default_rng(2).uniform(-1, 1, (4, 2))
        a = 2 * np.pi * x @ b.T
        np.testing.assert_allclose(ff(x), np.hstack([np.cos(a), np.sin(a)]), rtol=0, atol=1e-14)
        g = np.random.default_rng(3).standard_normal((4, 6))
        # Analytic VJP: -sin(a) w g_cos + cos(a) w g_sin.
        w = 2 * np.pi * b
        want = (-np.sin(a) * g[:, :3]) @ w + (np.cos(a) * g[:, 3:]) @ w
        np.testing.assert_allclose(ff.backward(x, g), want, rtol=0, atol=1e-13)
        # Central differences, h = 1e-6: truncation ~h^2 |f'''| ~ 1e-12 |w|^3 ~ 1e-9 and
        # rounding ~eps / h ~ 1e-10 (times |w| |g|): 1e-6 absolute.
        np.testing.assert_allclose(ff.backward(x, g), finite_difference_vjp(ff, x, g),
                                   rtol=0, atol=1e-6)


class So2BesselTest(unittest.TestCase):
    def test_bessel_j_matches_the_power_series(self):
        x = np.linspace(0, 10, 41)
        for m in (0, 1, 2, 5):
            # Series cancellation loses < 4 digits for x <= 10 (see bessel_j_series):
            # 1e-12 absolute on |J| <= 1.
            np.testing.assert_allclose(gpe.bessel_j(m, x), bessel_j_series(m, x), rtol=0,
                                       atol=1e-12)
        # First zeros of J_0 and J_1 (DLMF table 10.21.1, 10 digits given): 1e-10.
        self.assertLess(abs(gpe.bessel_j(0, np.array([2.4048255577]))[0]), 1e-10)
        self.assertLess(abs(gpe.bessel_j(1, np.array([3.8317059702]))[0]), 1e-10)

    def test_sampled_encoder_is_lim_et_al_formula(self):
        enc = gpe.So2Bessel(num_terms=12, max_scale=6.0, max_k=4, order_m=0, seed=3)
        m, c, k = enc.terms
        # Lim et al. appendix D.2: c ~ U[0, C], integer k in {1, ..., K - 1}.
        self.assertTrue(np.all(m == 0))
        self.assertTrue(np.all((c >= 0) & (c <= 6.0)))
        self.assertTrue(np.all((k >= 1) & (k <= 3)))
        xy = np.random.default_rng(4).uniform(-1, 1, (10, 2))
        r, theta = np.hypot(xy[:, 0], xy[:, 1]), np.arctan2(xy[:, 1], xy[:, 0])
        j = bessel_j_series(0, np.outer(r, c))  # c r <= 6 sqrt(2) < 10
        want = np.hstack([j * np.cos(np.outer(theta, k)), j * np.sin(np.outer(theta, k))])
        np.testing.assert_allclose(enc(xy), want, rtol=0, atol=1e-12)

    def test_explicit_terms_polar_input_and_backward(self):
        terms = (np.array([0, 1, 2]), np.array([1.5, 3.0, 0.5]), np.array([1, -2, 3]))
        polar = gpe.So2Bessel(terms=terms, polar=True)
        rt = np.column_stack([np.random.default_rng(5).uniform(0.1, 2, 6),
                              np.random.default_rng(6).uniform(-3, 3, 6)])
        j = np.column_stack([bessel_j_series(m, c * rt[:, 0]) for m, c in zip(*terms[:2])])
        kt = np.outer(rt[:, 1], terms[2])
        np.testing.assert_allclose(polar(rt), np.hstack([j * np.cos(kt), j * np.sin(kt)]),
                                   rtol=0, atol=1e-12)
        cart = gpe.So2Bessel(terms=terms)
        xy = np.random.default_rng(7).uniform(-1, 1, (5, 2))
        g = np.random.default_rng(8).standard_normal((5, 6))
        # Smooth away from the origin: central differences as in the Fourier test.
        np.testing.assert_allclose(cart.backward(xy, g), finite_difference_vjp(cart, xy, g),
                                   rtol=0, atol=1e-6)


class ShiftedEncoderTest(unittest.TestCase):
    def test_simple_and_complex_are_concatenation_and_kronecker(self):
        axes = [dict(kind="gaussian", num_shifts=5, width=0.1),
                dict(kind="triangle", num_shifts=4, width=0.5),
                dict(kind="gaussian", num_shifts=3, width=0.2, lo=-1.0, hi=1.0)]
        pts = np.random.default_rng(9).uniform(0, 1, (7, 3))

        def axis(d):  # Zheng et al. Prop. 2 and Prop. 5, shifts t_i = lo + i (hi - lo) / K
            a = axes[d]
            lo, hi = a.get("lo", 0.0), a.get("hi", 1.0)
            t = lo + np.arange(a["num_shifts"]) * (hi - lo) / a["num_shifts"]
            u = pts[:, d:d + 1] - t[None, :]
            if a["kind"] == "gaussian":
                return np.exp(-u ** 2 / (2 * a["width"] ** 2))
            return np.maximum(1 - np.abs(u) / (a["width"] / 2), 0)

        rows = [axis(d) for d in range(3)]
        simple = gpe.ShiftedEncoder(axes, "simple")
        self.assertEqual(simple.dims, (3, 12))
        # One exp per entry: 1e-14 absolute.
        np.testing.assert_allclose(simple(pts), np.hstack(rows), rtol=0, atol=1e-14)
        for dims in (2, 3):
            cx = gpe.ShiftedEncoder(axes[:dims], "complex")
            want = np.stack([
                # psi(x_{D-1}) (x) ... (x) psi(x_0): axis 0 varies fastest.
                np.kron(rows[2][n], np.kron(rows[1][n], rows[0][n])) if dims == 3
                else np.kron(rows[1][n], rows[0][n]) for n in range(7)])
            np.testing.assert_allclose(cx(pts[:, :dims]), want, rtol=0, atol=1e-14)


class SphericalHarmonicsTest(unittest.TestCase):
    def test_low_degrees_match_the_closed_forms(self):
        v = np.random.default_rng(10).standard_normal((8, 3))
        u = v / np.linalg.norm(v, axis=1, keepdims=True)
        x, y, z = u.T
        c2 = 0.5 * np.sqrt(15 / np.pi)
        # Real, orthonormal, no Condon-Shortley phase; order m = -l..l.
        want = np.column_stack([
            np.full(8, 0.5 / np.sqrt(np.pi)),
            np.sqrt(3 / (4 * np.pi)) * y, np.sqrt(3 / (4 * np.pi)) * z,
            np.sqrt(3 / (4 * np.pi)) * x,
            c2 * x * y, c2 * y * z, 0.25 * np.sqrt(5 / np.pi) * (3 * z ** 2 - 1), c2 * x * z,
            0.5 * c2 * (x ** 2 - y ** 2)])
        np.testing.assert_allclose(gpe.SphericalHarmonics(2)(v), want, rtol=0, atol=1e-14)

    def test_orthonormal_by_quadrature(self):
        big_l = 6
        # Gauss-Legendre in z = cos(theta) (exact to degree 2n - 1) times the uniform
        # rule in phi (exact for trigonometric degree < n_phi): products of two degree-L
        # harmonics are integrated exactly with n = L + 2, n_phi = 2L + 3.
        z, wz = np.polynomial.legendre.leggauss(big_l + 2)
        phi = 2 * np.pi * np.arange(2 * big_l + 3) / (2 * big_l + 3)
        zz, pp = np.meshgrid(z, phi, indexing="ij")
        s = np.sqrt(1 - zz ** 2)
        pts = np.column_stack([(s * np.cos(pp)).ravel(), (s * np.sin(pp)).ravel(), zz.ravel()])
        w = (wz[:, None] * np.full(phi.shape, 2 * np.pi / phi.size)[None, :]).ravel()
        y = gpe.SphericalHarmonics(big_l)(pts)
        gram = (y * w[:, None]).T @ y
        # Exact quadrature: only rounding (~1e-15 per entry, 49 x 49 Gram) remains.
        np.testing.assert_allclose(gram, np.eye((big_l + 1) ** 2), rtol=0, atol=1e-13)


class LaplacianTest(unittest.TestCase):
    def test_matches_numpy_eigh_with_the_sign_convention(self):
        rng = np.random.default_rng(11)
        n = 12
        edges = [(i, i + 1) for i in range(n - 1)] + [(0, 5), (3, 9), (2, 11), (6, 10)]
        weights = rng.uniform(0.5, 2.0, len(edges))
        a = np.zeros((n, n))
        for (i, j), wt in zip(edges, weights):
            a[i, j] += wt
            a[j, i] += wt
        deg = a.sum(axis=1)
        for kind, lap in [("combinatorial", np.diag(deg) - a),
                          ("symmetric", np.eye(n) - a / np.sqrt(np.outer(deg, deg)))]:
            with self.subTest(kind=kind):
                vals, vecs = gpe.laplacian_eigenvectors(n, edges, 4, weights=weights, kind=kind,
                                                        skip_first=True)
                ev, evec = np.linalg.eigh(lap)
                # Two dense symmetric eigensolvers on a 12 x 12 matrix of norm < 10:
                # eigenvalues agree to ~1e-14; 1e-10 with margin.
                np.testing.assert_allclose(vals, ev[1:5], rtol=0, atol=1e-10)
                # Random weights give simple eigenvalues (gaps > 1e-3 here), so vectors
                # are unique up to sign: fix it as gpe.h states (largest |entry| > 0).
                ref = evec[:, 1:5]
                ref = ref * np.sign(ref[np.abs(ref).argmax(axis=0), np.arange(4)])
                self.assertGreater(np.diff(ev[:6]).min(), 1e-3)
                # Vector error ~ eps / gap ~ 1e-13: 1e-9 with margin.
                np.testing.assert_allclose(vecs, ref, rtol=0, atol=1e-9)

    def test_symmetric_isolated_node_rule_is_documented_and_holds(self):
        # Issue 24: the docstring did not say what the symmetric Laplacian does with an
        # isolated node (I - D^-1/2 A D^-1/2 is undefined at degree 0).
        doc = gpe.laplacian_eigenvectors.__doc__
        self.assertIn("isolated node", doc)
        self.assertIn("zero row and column", doc)
        vals, vecs = gpe.laplacian_eigenvectors(3, [[0, 1]], 3, kind="symmetric")
        np.testing.assert_allclose(vals, [0.0, 0.0, 2.0], atol=1e-12)
        # Node 2 (isolated) spans its own eigenvalue-0 vector.
        self.assertAlmostEqual(float(np.abs(vecs[2, :2]).max()), 1.0, places=12)


class AnalysisTest(unittest.TestCase):
    def test_distance_matrix_and_closed_forms(self):
        f = np.random.default_rng(12).standard_normal((6, 9))
        np.testing.assert_allclose(gpe.embedded_distance_matrix(f, 0.5), 0.5 * f @ f.T,
                                   rtol=0, atol=1e-13)
        s, d = 0.05, 0.03
        # Zheng et al. eq. 24 (Gaussian), eq. 34 (rectangle), the triangle's
        # autocorrelation (2/3 - u^2 + u^3 / 2 on [0, 1]) and the RFF expectation.
        self.assertAlmostEqual(gpe.embedder_distance("gaussian", s, d),
                               np.sqrt(np.pi) * s * np.exp(-d ** 2 / (4 * s ** 2)), places=14)
        self.assertAlmostEqual(gpe.embedder_distance("rectangle", 0.1, d), 0.07, places=14)
        u = 2 * d / 0.1
        self.assertAlmostEqual(gpe.embedder_distance("triangle", 0.1, d),
                               0.05 * (2 / 3 - u ** 2 + u ** 3 / 2), places=14)
        self.assertAlmostEqual(gpe.embedder_distance("rff", 4.0, d),
                               np.exp(-2 * np.pi ** 2 * 16 * d ** 2), places=14)
        self.assertAlmostEqual(gpe.embedder_stable_rank("gaussian", s, 10 ** 6),
                               1 / (2 * np.sqrt(np.pi) * s), places=10)
        self.assertAlmostEqual(gpe.embedder_stable_rank("rff", 4.0, 10 ** 6),
                               np.sqrt(2 * np.pi) * 4.0, places=10)
        self.assertAlmostEqual(gpe.embedder_stable_rank("rectangle", 0.1, 10 ** 6), 10.0,
                               places=10)
        self.assertAlmostEqual(gpe.embedder_stable_rank("triangle", 0.1, 10 ** 6), 40 / 3,
                               places=10)

    def test_sampled_stable_ranks_approach_the_closed_forms(self):
        # Gaussian embedder (Prop. 2): N = K = 1000 dense samples on [0, 1], sigma = 0.02
        # -> 1 / (2 sqrt(pi) sigma) ~ 14.1; boundary shifts (within ~3 sigma of an end)
        # change it by O(sigma) relative: 5%.
        x = (np.arange(1000) + 0.5) / 1000
        sr = gpe.stable_rank(gpe.shifted_basis(x, "gaussian", 1000, 0.02))
        self.assertAlmostEqual(sr / gpe.embedder_stable_rank("gaussian", 0.02, 1000), 1, delta=0.05)
        # RFF (Prop. 3): [cos 2 pi b x, sin 2 pi b x] with b ~ N(0, 4^2), F = 2048, on 128
        # points of [0, 1] -> sqrt(2 pi) 4 ~ 10.0. srank is a random variable: the mean
        # of 4 seeds has a standard deviation of ~2% of the limit (as in
        # encodings/analysis/stable_rank_test.cc); 8% is 4 standard deviations, while
        # sigma instead of sqrt(2 pi) sigma (2.5x) fails.
        x = np.linspace(0, 1, 128)[:, None]
        mean = np.mean([gpe.stable_rank(gpe.FourierFeatures("gaussian", 1, 2048, 4.0, seed=s)(x))
                        for s in (1, 2, 3, 4)])
        self.assertAlmostEqual(mean / gpe.embedder_stable_rank("rff", 4.0, 1 << 20), 1, delta=0.08)


class ConditioningTest(unittest.TestCase):
    def test_condition_number_and_rcond_fit_match_numpy(self):
        rng = np.random.default_rng(13)
        psi = rng.standard_normal((20, 8)) @ np.diag(np.logspace(0, -6, 8))
        # SVD vs SVD: relative 1e-8 on a condition number of 1e6 (error ~cond eps).
        self.assertAlmostEqual(gpe.condition_number(psi) / np.linalg.cond(psi), 1, delta=1e-8)
        self.assertEqual(gpe.condition_number(psi[:5]), np.inf)  # K > N
        image = rng.standard_normal((20, 20))
        for rcond in (1e-3, 1e-10):
            p = np.linalg.pinv(psi, rcond=rcond)
            want = p @ image @ p.T
            w = gpe.fit_separable_2d(psi, psi, image, rcond=rcond)
            # Kept singular values >= ~1e-6 s_max: both SVD routes agree to ~cond^2 eps
            # relative on W (1e-4 at cond 1e6); rcond 1e-3 keeps cond <= 1e3 (1e-10).
            tol = 1e-3 if rcond < 1e-6 else 1e-9
            np.testing.assert_allclose(w, want, rtol=0, atol=tol * np.abs(want).max())


def gaussian_factor(x, k, sigma):
    """Zheng et al. Prop. 2 on [0, 1]: exp(-(x - t_i)^2 / (2 sigma^2)), t_i = i / k."""
    t = np.arange(k) / k
    return np.exp(-(np.asarray(x)[:, None] - t[None, :]) ** 2 / (2 * sigma ** 2))


class SolversTest(unittest.TestCase):
    def test_separable_3d_is_mode_products_of_ridge_pseudo_inverses(self):
        rng = np.random.default_rng(14)
        psi = [gaussian_factor((np.arange(n) + 0.5) / n, k, 0.15)
               for n, k in ((9, 5), (7, 4), (8, 6))]
        v = rng.standard_normal((9, 7, 8))
        lam = 1e-3
        a = [np.linalg.solve(p.T @ p + lam * np.eye(p.shape[1]), p.T) for p in psi]
        want = np.einsum("ia,jb,kc,abc->ijk", a[0], a[1], a[2], v)
        w = gpe.fit_separable_3d(psi, v, lam)
        # Ridge systems of condition ~1e3 solved two ways: ~1e-13 relative; 1e-9 has
        # margin and fails on any mode ordering or transposition.
        np.testing.assert_allclose(w, want, rtol=0, atol=1e-9 * np.abs(want).max())
        pred = np.einsum("ia,jb,kc,abc->ijk", psi[0], psi[1], psi[2], w)
        np.testing.assert_allclose(gpe.predict_separable_3d(psi, w), pred, rtol=0,
                                   atol=1e-12 * np.abs(pred).max())

    def test_blended_2d_matches_dense_ridge_least_squares(self):
        rng = np.random.default_rng(15)
        k, sigma = 5, 0.2
        enc = gpe.ShiftedEncoder([dict(kind="gaussian", num_shifts=k, width=sigma)], "simple")
        grid = np.linspace(0, 1, 7)
        pts = rng.uniform(0, 1, (80, 2))
        vals = np.sin(4 * pts[:, 0]) + pts[:, 1] ** 2
        lam = 1e-3

        def blended_rows(q):  # Zheng et al. eq. 44 per point: the best pair of corners
            cell = np.clip(np.searchsorted(grid, q, side="right") - 1, 0, len(grid) - 2)
            g0, g1 = gaussian_factor(grid[cell], k, sigma), gaussian_factor(grid[cell + 1], k, sigma)
            pq = gaussian_factor(q, k, sigma)
            rows = np.empty_like(pq)
            for i in range(len(q)):
                basis = np.column_stack([g0[i], g1[i]])
                alpha = np.linalg.solve(basis.T @ basis, basis.T @ pq[i])
                rows[i] = basis @ alpha
            return rows

        bx, by = blended_rows(pts[:, 0]), blended_rows(pts[:, 1])
        m = np.stack([np.kron(by[i], bx[i]) for i in range(80)])  # f = by^T W bx, W row-major
        pg = gaussian_factor(grid, k, sigma)
        r = np.kron(pg, pg)  # vec(Psi(g_y) W Psi(g_x)^T)
        want = np.linalg.solve(m.T @ m + lam * r.T @ r, m.T @ vals).reshape(k, k)
        w, iterations, rms = gpe.fit_blended_2d(enc, enc, grid, grid, pts, vals, lam=lam,
                                                max_iterations=5000, tolerance=1e-12)
        # As inr/blended_test.cc: CGLS to a 1e-12 relative gradient, mapped back through
        # a preconditioner of condition ~1e3, leaves ~1e-9 relative; 1e-6 with margin.
        np.testing.assert_allclose(w, want, rtol=0, atol=1e-6 * np.abs(want).max())
        self.assertGreater(iterations, 0)
        f = gpe.predict_blended_2d(enc, enc, grid, grid, pts, w)
        np.testing.assert_allclose(f, m @ w.ravel(), rtol=0, atol=1e-12 * np.abs(f).max())
        self.assertAlmostEqual(rms, np.sqrt(np.mean((f - vals) ** 2)), places=12)
        # Another handle type (an AlgebraicGrid has dims and a handle too) or a closed
        # encoder: refused before C reads the pointer as a coordinate encoder.
        a = np.array([[0.0, 1.0], [-1.0, 0.0]])
        grid_enc = gpe.AlgebraicGrid([a, a])
        with self.assertRaisesRegex(TypeError, "encoder_x"):
            gpe.fit_blended_2d(grid_enc, enc, grid, grid, pts, vals)
        closed = copy.deepcopy(enc)
        closed.close()
        with self.assertRaisesRegex(ValueError, "closed"):
            gpe.predict_blended_2d(enc, closed, grid, grid, pts, w)


class CopyTest(unittest.TestCase):
    def test_copies_and_pickles_rebuild_equal_encoders_with_their_own_handles(self):
        rng = np.random.default_rng(3)
        cases = [
            (gpe.FourierFeatures("gaussian", 2, 8, scale=3.0, seed=11), rng.uniform(-1, 1, (5, 2))),
            (gpe.FourierFeatures.from_frequencies(rng.normal(size=(4, 3)), "angular"),
             rng.uniform(-1, 1, (5, 3))),
            (gpe.So2Bessel(num_terms=5, max_scale=4.0, max_k=4, order_m=1, seed=2),
             rng.uniform(-1, 1, (5, 2))),
            (gpe.So2Bessel(terms=([0, 2], [1.5, 3.0], [1, -3]), polar=True),
             rng.uniform(0, 2, (5, 2))),
            (gpe.ShiftedEncoder([{"kind": "gaussian", "num_shifts": 4, "width": 0.3},
                                 {"kind": "triangle", "num_shifts": 3, "width": 0.5}], "complex"),
             rng.uniform(0, 1, (5, 2))),
            (gpe.SphericalHarmonics(3), rng.normal(size=(5, 3))),
        ]
        for enc, pts in cases:
            with self.subTest(type(enc).__name__):
                want = enc.encode(pts)
                copies = [copy.copy(enc), copy.deepcopy(enc), pickle.loads(pickle.dumps(enc))]
                enc.close()  # the copies own their handles: they outlive the original
                for c in copies:
                    self.assertIs(type(c), type(enc))
                    # The same construction through the same code: bit-equal features.
                    np.testing.assert_array_equal(c.encode(pts), want)
                    c.close()
                with self.assertRaisesRegex(ValueError, "closed"):
                    copy.deepcopy(enc)

    def test_copies_do_not_share_the_callers_term_arrays(self):
        orders, scales, weights = np.array([0, 1]), np.array([1.0, 2.0]), np.array([1, 2])
        enc = gpe.So2Bessel(terms=(orders, scales, weights))
        scales[0] = 7.0  # changing the caller's array later does not change copies
        np.testing.assert_array_equal(copy.deepcopy(enc).terms[1], [1.0, 2.0])


class ErrorsTest(unittest.TestCase):
    def test_bad_inputs_raise_with_the_library_message(self):
        ff = gpe.FourierFeatures("nerf", 2, 3)
        with self.assertRaisesRegex(gpe.GpeError, "finite"):
            ff(np.array([[0.0, np.nan]]))
        with self.assertRaisesRegex(gpe.GpeError, "empty"):
            ff(np.zeros((0, 2)))
        with self.assertRaisesRegex(gpe.GpeError, r"\[N, 2\]"):
            ff(np.zeros((3, 3)))
        with self.assertRaisesRegex(gpe.GpeError, "rcond"):
            gpe.fit_separable_2d(np.eye(3), np.eye(3), np.eye(3), rcond=1.5)
        with self.assertRaisesRegex(gpe.GpeError, "dim must be 2"):
            gpe.FourierFeatures("txt", 3, 4)
        with self.assertRaises(gpe.GpeError):
            gpe.laplacian_eigenvectors(3, [(0, 0)], 1)
        with self.assertRaises(gpe.GpeError):
            gpe.SphericalHarmonics(2)(np.zeros((1, 3)))


class LaplacianEdgesLayoutTest(unittest.TestCase):
    def test_edges_must_be_rows(self):
        # A [2, E] edge_index (PyTorch Geometric) was reshaped to [E, 2] pairing the wrong
        # nodes: another graph, silently.
        ei = np.array([[0, 1, 2, 3], [4, 5, 4, 5]])
        with self.assertRaisesRegex(ValueError, r"\[E, 2\]"):
            gpe.laplacian_eigenvectors(6, ei, 3)
        with self.assertRaisesRegex(ValueError, r"\[E, 2\]"):
            gpe.laplacian_eigenvectors(6, ei.T.reshape(-1), 3)
        vals, vecs = gpe.laplacian_eigenvectors(6, ei.T, 3)
        self.assertEqual(vecs.shape, (6, 3))

if __name__ == "__main__":
    unittest.main()
