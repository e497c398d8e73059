"""Tests of gpe.inr against NumPy computations of the same formulas (run by `bazel test`)."""

import unittest

import sanitizer_preload
from gpe import _ffi

sanitizer_preload.reexec_if_needed(next((str(p) for p in _ffi._candidates() if p.is_file()), None))

import numpy as np  # noqa: E402

import gpe  # noqa: E402


def gaussian_reference(coords, k, sigma, lo=0.0, hi=1.0):
    """Zheng et al. Prop. 2: exp(-(x - t_i)^2 / (2 sigma^2)), t_i = lo + i (hi - lo) / k."""
    t = lo + np.arange(k) * (hi - lo) / k
    return np.exp(-(coords[:, None] - t[None, :]) ** 2 / (2 * sigma ** 2))


class InrTest(unittest.TestCase):
    def test_shifted_basis_matches_numpy(self):
        x = np.linspace(-0.2, 1.2, 37)
        # Same formula, one exp each. The exponent u^2 / (2 sigma^2) reaches ~150 here and
        # its rounding (~150 eps) becomes the result's relative error: rtol 1e-13.
        np.testing.assert_allclose(gpe.shifted_basis(x, "gaussian", 16, 0.07),
                                   gaussian_reference(x, 16, 0.07), rtol=1e-13, atol=1e-300)
        tri = gpe.shifted_basis(x[::3], "triangle", 10, 0.3)  # strided input, no copy needed
        t = np.arange(10) / 10
        np.testing.assert_allclose(
            tri, np.maximum(1 - np.abs(x[::3, None] - t[None, :]) / 0.15, 0), rtol=0, atol=1e-15)

    def test_closed_form_matches_numpy_ridge_solution(self):
        rng = np.random.default_rng(3)
        y, x = (np.arange(40) + 0.5) / 40, (np.arange(30) + 0.5) / 30
        py, px = gaussian_reference(y, 12, 0.06), gaussian_reference(x, 9, 0.08)
        image = rng.standard_normal((40, 30))
        lam = 1e-3
        ay = np.linalg.solve(py.T @ py + lam * np.eye(12), py.T)
        ax = np.linalg.solve(px.T @ px + lam * np.eye(9), px.T)
        want = ay @ image @ ax.T
        w = gpe.fit_separable_2d(py, px, image, lam)
        # Two routes through systems of condition ~1e4: agreement to ~1e-12 relative;
        # 1e-9 has margin and still fails on any transposition.
        np.testing.assert_allclose(w, want, rtol=0, atol=1e-9 * np.abs(want).max())
        np.testing.assert_allclose(gpe.predict_separable_2d(py, px, w), py @ w @ px.T,
                                   rtol=0, atol=1e-12 * np.abs(py @ w @ px.T).max())
        # float32 image products stay within 1e-4 relative (see closed_form.h).
        w32 = gpe.fit_separable_2d(py, px, image, lam, float32_image_products=True)
        self.assertLess(np.abs(w32 - want).max(), 1e-4 * np.abs(want).max())

    def test_stable_rank_matches_numpy(self):
        a = np.random.default_rng(5).standard_normal((20, 7))
        s = np.linalg.svd(a, compute_uv=False)
        self.assertAlmostEqual(gpe.stable_rank(a), (s ** 2).sum() / s[0] ** 2, places=12)

    def test_errors_carry_the_library_message(self):
        psi = gaussian_reference(np.array([0.1, 0.5, 0.9]), 8, 0.05)
        with self.assertRaisesRegex(gpe.GpeError, "lambda"):
            gpe.fit_separable_2d(psi, psi, np.ones((3, 3)))
        with self.assertRaisesRegex(gpe.GpeError, "finite"):
            gpe.shifted_basis(np.array([np.nan]), "gaussian", 4, 0.1)
        with self.assertRaises(ValueError):
            gpe.shifted_basis(np.zeros(3), "cosine", 4, 0.1)


class PathsAndDeferredErrorsTest(unittest.TestCase):
    def test_paths_with_nul_are_refused(self):
        # C reads a path up to its first NUL: "a.png\0.txt" wrote a.png.
        with self.assertRaisesRegex(ValueError, "null byte"):
            gpe.image_write_png("/nonexistent/a.png\0.txt", np.zeros((2, 2)))
        with self.assertRaisesRegex(ValueError, "null byte"):
            gpe.image_read("/nonexistent/a.png\0x")

    def test_pool_error_does_not_leak_into_the_next_call(self):
        # A failing progress callback and a failing installed pool in one fit: the
        # callback's error is raised by the fit, the pool's consumed with it (it surfaced
        # in the thread's next, unrelated call).
        def pool(n, run):
            for i in range(n):
                run(i)
            raise KeyError("pool failure")

        def progress(step, loss):
            raise RuntimeError("progress failure")

        x = np.random.default_rng(0).random((8192, 2)).astype(np.float32)
        y = x[:, :1].copy()
        gpe.set_thread_pool(pool, num_threads=4)
        try:
            with self.assertRaises((RuntimeError, KeyError)):
                gpe.mlp_fit(x, y, hidden_width=32, num_hidden_layers=1, steps=2,
                            progress=progress)
        finally:
            gpe.set_thread_pool(None)  # raised KeyError('pool failure') here before
        gpe.version()

if __name__ == "__main__":
    unittest.main()
