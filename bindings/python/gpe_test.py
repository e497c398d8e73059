"""Tests of the Python package against NumPy references (run by `bazel test`)."""

import unittest
from fractions import Fraction

import sanitizer_preload
from gpe import _ffi

sanitizer_preload.reexec_if_needed(next((str(p) for p in _ffi._candidates() if p.is_file()), None))

import numpy as np  # noqa: E402

import gpe  # noqa: E402


# pi to 60 digits, as an exact rational: reductions below are exact to ~1e-50 rad.
_PI = Fraction("3.14159265358979323846264338327950288419716939937510582097494459")


def reduced_angle(p, theta):
    """p * theta mod 2 pi in [-pi, pi], from the exact rational product (no float rounding)."""
    a = Fraction(p) * Fraction(theta)
    k = round(a / (2 * _PI))
    return float(a - k * 2 * _PI)


def rope_reference(x, positions, rotary_dim, base, pairing):
    """RoPE in float64 NumPy: angles p * theta_i reduced mod 2 pi before cos/sin."""
    y = np.array(x, dtype=np.float64, copy=True)
    half = rotary_dim // 2
    # Scalar pow (libm), as the library forms theta: NumPy's vectorised power may differ
    # by an ulp, which p = 2^31 magnifies to ~2e-7 rad.
    theta = [base ** (-2.0 * i / rotary_dim) for i in range(half)]
    for n, p in enumerate(positions):
        ang = np.array([reduced_angle(int(p), t) for t in theta])
        c, s = np.cos(ang), np.sin(ang)
        if pairing == "interleaved":
            i1, i2 = 2 * np.arange(half), 2 * np.arange(half) + 1
        else:
            i1, i2 = np.arange(half), np.arange(half) + half
        a, b = x[n, i1].astype(np.float64), x[n, i2].astype(np.float64)
        y[n, i1] = a * c - b * s
        y[n, i2] = a * s + b * c
    return y


def rank2_reference(a, b, omega, p):
    """exp(p omega (a b^T - b a^T)) by eigendecomposition of the skew matrix."""
    L = np.outer(a, b) - np.outer(b, a)
    w, v = np.linalg.eig(p * omega * L)
    return (v @ np.diag(np.exp(w)) @ np.linalg.inv(v)).real


class VersionTest(unittest.TestCase):
    def test_version(self):
        self.assertEqual(gpe.version(), (0, 8, 0))
        self.assertEqual(gpe.version_string(), "0.8.0")


class SoRepresentationTest(unittest.TestCase):
    def test_planes_match_numpy(self):
        rng = np.random.default_rng(0)
        for pairing in ("interleaved", "half_split"):
            for dim, rot in ((8, 8), (12, 8), (64, 64)):
                rep = gpe.SoRepresentation.planes(dim, rotary_dim=rot, pairing=pairing)
                x = rng.standard_normal((6, dim))
                pos = np.array([0, 1, 17, -5, 123456, 2**31 - 1])
                y = rep.apply(pos, x)
                # Double in, double out: differences are rounding of O(1) values
                # (~1e-16) plus the long-double reference's own (~1e-19).
                np.testing.assert_allclose(y, rope_reference(x, pos, rot, 10000.0, pairing),
                                           rtol=0, atol=1e-12)
                self.assertEqual(rep.dim, dim)

    def test_float32_in_place_and_strided(self):
        rng = np.random.default_rng(1)
        rep = gpe.SoRepresentation.planes(16, pairing="half_split")
        x = rng.standard_normal((16, 5)).astype(np.float32).T  # column-major view
        pos = np.arange(5) * 1000
        want = rope_reference(x.astype(np.float64), pos, 16, 10000.0, "half_split")
        out = rep.apply(pos, x, out=x)
        self.assertIs(out, x)
        # float32 storage: one rounding of |y| <= ~4 after exact-angle rotation.
        np.testing.assert_allclose(x, want, rtol=0, atol=4 * 2.0**-23)

    def test_rank2_matches_numpy_expm(self):
        rng = np.random.default_rng(2)
        a, b = rng.standard_normal(7), rng.standard_normal(7)
        rep = gpe.SoRepresentation.rank2(a, b, omega=0.3)
        for p in (0, 1, -4, 1000):
            m = rep.matrix(p)
            # eig-based expm of a skew matrix with entries O(|a||b|): ~1e-12 accuracy.
            np.testing.assert_allclose(m, rank2_reference(a, b, 0.3, p), atol=1e-10)
            np.testing.assert_allclose(m @ m.T, np.eye(7), atol=1e-12)
        x = rng.standard_normal((3, 7))
        pos = np.array([2, -3, 9])
        y = rep.apply(pos, x)
        for n in range(3):
            np.testing.assert_allclose(y[n], rep.matrix(pos[n]) @ x[n], atol=1e-12)

    def test_bad_input_raises_with_library_message(self):
        with self.assertRaises(gpe.GpeError) as ctx:
            gpe.SoRepresentation.planes(8, rotary_dim=5)
        self.assertEqual(ctx.exception.status, "GPE_ERROR_INVALID_ARGUMENT")
        self.assertIn("rotary_dim", str(ctx.exception))
        rep = gpe.SoRepresentation.planes(8)
        with self.assertRaises(gpe.GpeError) as ctx:
            rep.apply(np.arange(3), np.zeros((3, 6), dtype=np.float32))
        self.assertIn("8", str(ctx.exception))
        with self.assertRaises(gpe.GpeError):
            rep.apply(np.arange(2), np.zeros((3, 8)))  # 2 positions, 3 vectors
        with self.assertRaises(gpe.GpeError):
            rep.apply(np.arange(3), np.zeros((3, 8)), out=np.zeros((3, 8), dtype=np.float32))
        with self.assertRaises(TypeError):
            rep.apply(np.arange(3), np.zeros((3, 8), dtype=np.complex64))
        with self.assertRaises(gpe.GpeError):
            gpe.SoRepresentation.rank2([1.0, np.nan], [0.0, 1.0])


if __name__ == "__main__":
    unittest.main()
