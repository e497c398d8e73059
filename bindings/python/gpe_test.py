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
        self.assertEqual(gpe.version(), (0, 10, 0))
        self.assertEqual(gpe.version_string(), "0.10.0")


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

    def test_one_row_of_any_row_stride(self):
        # A one-row view with a negative row stride (numpy's [:1][::-1]) was refused
        # ("strides (-4, 4) must be >= dim 4"); its row stride is never stepped. Exact:
        # the same kernel on the same row.
        rep = gpe.SoRepresentation.planes(4)
        x = np.arange(8, dtype=np.float64).reshape(2, 4)[:1][::-1]
        self.assertLess(x.strides[0], 0)
        np.testing.assert_array_equal(rep.apply([5], x), rep.apply([5], x.copy()))

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


    def test_copies_and_pickles_rebuild_an_equal_representation(self):
        import copy
        import pickle
        rng = np.random.default_rng(4)
        a, b = rng.standard_normal(6), rng.standard_normal(6)
        x, pos = rng.standard_normal((3, 6)), np.array([0, -5, 1 << 40])
        for rep in (gpe.SoRepresentation.planes(6, rotary_dim=4, pairing="half_split"),
                    gpe.SoRepresentation.planes(6, thetas=[0.5, 0.1, 0.01]),
                    gpe.SoRepresentation.rank2(a, b, omega=0.3)):
            want = rep.apply(pos, x)
            copies = [copy.copy(rep), copy.deepcopy(rep), pickle.loads(pickle.dumps(rep))]
            rep.close()  # each copy owns its handle
            for c in copies:
                # The same arguments through the same code: bit-equal rotations.
                np.testing.assert_array_equal(c.apply(pos, x), want)
                c.close()
            with self.assertRaisesRegex(ValueError, "closed"):
                copy.deepcopy(rep)
        # The caller's arrays changed after creation do not reach a copy.
        rep = gpe.SoRepresentation.rank2(a, b)
        want = rep.apply(pos, x)
        a[0] = -3.0
        np.testing.assert_array_equal(copy.deepcopy(rep).apply(pos, x), want)


class NothingSilentlyWrongTest(unittest.TestCase):
    """Issue 24: inputs the ctypes layer used to pass on wrapped, truncated or written
    through. Each case says what happened before the check."""

    def test_read_only_outputs_are_refused_before_the_call(self):
        rep = gpe.SoRepresentation.planes(8)
        pos, x = np.arange(3), np.ones((3, 8))
        ro = np.zeros((3, 8))
        ro.flags.writeable = False
        # Before: the library wrote the rotated rows into the read-only array.
        with self.assertRaisesRegex(ValueError, "read-only"):
            rep.apply(pos, x, out=ro)
        self.assertEqual(np.count_nonzero(ro), 0)
        # Before: sinusoidal() overwrote the immutable bytes object behind the array.
        raw = bytes(3 * 4 * 8)
        with self.assertRaisesRegex(ValueError, "read-only"):
            gpe.sinusoidal(np.arange(3), 4, out=np.frombuffer(raw, dtype=np.float64)
                           .reshape(3, 4))
        self.assertEqual(raw, bytes(3 * 4 * 8))
        # In-place applies and gradient accumulators are outputs too.
        scores = np.ones((2, 2))
        scores.flags.writeable = False
        with self.assertRaisesRegex(ValueError, "read-only"):
            gpe.locality_scale(scores, [0, 1], [0, 1])
        grad = np.zeros(4)
        grad.flags.writeable = False
        with self.assertRaisesRegex(ValueError, "read-only"):
            gpe.Alibi(4).accumulate_gradient(0, [1], [0], np.ones((1, 1)), grad)
        rope = gpe.Rope(8)
        xr = np.ones((1, 2, 1, 8), dtype=np.float32)
        xr.flags.writeable = False
        with self.assertRaisesRegex(ValueError, "read-only"):
            rope.forward(xr, out=xr)
        # A read-only input is fine.
        np.testing.assert_allclose(rope.forward(xr), rope.forward(np.array(xr)))

    def test_read_only_memmap_output_does_not_crash(self):
        # Before: the library wrote into a PROT_READ mapping: SIGSEGV, interpreter gone.
        # Run in a child so that a regression fails this test instead of killing it.
        code = (
            "import os, sys, tempfile, numpy as np, gpe\n"
            "path = os.path.join(tempfile.mkdtemp(), 'm')\n"
            "np.zeros((3, 8)).tofile(path)\n"
            "m = np.memmap(path, dtype=np.float64, mode='r', shape=(3, 8))\n"
            "try:\n"
            "    gpe.SoRepresentation.planes(8).apply(np.arange(3), np.ones((3, 8)), out=m)\n"
            "except ValueError as e:\n"
            "    print('refused:', e)\n"
            "    sys.exit(0)\n"
            "sys.exit(3)\n")
        import os
        import subprocess
        import sys
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            [os.path.dirname(os.path.dirname(os.path.abspath(gpe.__file__)))]
            + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
        r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                           text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("read-only", r.stdout)

    def test_integers_beyond_int64_are_refused(self):
        # Before: ctypes stored 2**64 + 64 modulo 2^64, a 64-dimensional RoPE.
        with self.assertRaises(OverflowError):
            gpe.Rope(2**64 + 64)
        # Before: an 8-head ALiBi.
        with self.assertRaises(OverflowError):
            gpe.Alibi(2**64 + 8)
        with self.assertRaises(OverflowError):
            gpe.SoRepresentation.planes(2**64 + 8)
        rep = gpe.SoRepresentation.planes(8)
        # Before: the matrix at position 1.
        with self.assertRaises(OverflowError):
            rep.matrix(2**64 + 1)
        # Before: int(1.5) silently gave the matrix at 1.
        with self.assertRaises(TypeError):
            rep.matrix(1.5)
        # A 32-bit field: before, 2**32 + 1 threads became 1.
        with self.assertRaises(OverflowError):
            gpe.bessel_j(2**32, [1.0])
        self.assertEqual(gpe.Rope(64).shape, (64, 64, 1))

    def test_positions_at_or_above_2_63_are_refused(self):
        rep = gpe.SoRepresentation.planes(8)
        x = np.ones((1, 8))
        # Before: uint64 2^63 became int64 -2^63, a different rotation.
        for pos in (np.array([2**63], dtype=np.uint64), [2**63], [2**64 - 1]):
            with self.assertRaises(OverflowError):
                rep.apply(pos, x)
            with self.assertRaises(OverflowError):
                gpe.sinusoidal(pos, 4)
        # Beyond uint64 NumPy makes an object array; mixed signs a float64 one.
        for pos in ([2**64], [-1, 2**63]):
            with self.assertRaises(OverflowError):
                rep.apply(pos, np.ones((len(pos), 8)))
        # Other integer dtypes convert exactly; uint64 below 2^63 is fine.
        want = rep.apply(np.array([2**63 - 1]), x)
        np.testing.assert_array_equal(rep.apply(np.array([2**63 - 1], np.uint64), x), want)
        np.testing.assert_array_equal(rep.apply(np.array([7], np.uint8), x),
                                      rep.apply([7], x))
        # Before: attention's positions went through astype(int64): 2^63 wrapped and
        # 0.5 truncated to 0.
        q = np.ones((1, 1, 1, 4), np.float32)
        with self.assertRaises(OverflowError):
            gpe.attention(q, q, q, q_positions=np.array([2**63], np.uint64),
                          k_positions=[0])
        with self.assertRaises(TypeError):
            gpe.attention(q, q, q, q_positions=[0.5], k_positions=[0])

    def test_none_and_wrongly_typed_tensors_name_the_argument(self):
        q = np.ones((1, 2, 1, 4), np.float32)
        # Before: IndexError (tuple index out of range) from np.asarray(None).shape[-2].
        with self.assertRaisesRegex(TypeError, r"\bq\b"):
            gpe.attention(None, q, q)
        with self.assertRaisesRegex(TypeError, r"\bk\b"):
            gpe.attention(q, None, q)
        with self.assertRaisesRegex(TypeError, r"\bv\b"):
            gpe.attention(q, q, "v")
        with self.assertRaisesRegex(TypeError, r"\bd_o\b"):
            gpe.attention_backward(q, q, q, None)
        # Before: AttributeError ('str' object has no attribute '_handle').
        with self.assertRaisesRegex(TypeError, "bias"):
            gpe.attention(q, q, q, bias="alibi")
        with self.assertRaisesRegex(TypeError, "positions"):
            gpe.SoRepresentation.planes(4).apply(None, np.ones((1, 4)))


if __name__ == "__main__":
    unittest.main()
