"""Tests of gpe.Rope against an independent NumPy RoPE written from the published
formulas (RoFormer's rotation; the frequency rules of position interpolation, dynamic
NTK, YaRN, LongRoPE and Llama 3), run by `bazel test`."""

import copy
import gc
import math
import pickle
import unittest

import sanitizer_preload
from gpe import _ffi

sanitizer_preload.reexec_if_needed(next((str(p) for p in _ffi._candidates() if p.is_file()), None))

import numpy as np  # noqa: E402

import gpe  # noqa: E402


# ---- Reference frequency rules ----------------------------------------------------------

def default_thetas(r, base):
    """Su et al., eq. 15: theta_i = base^(-2i/r)."""
    return np.array([base ** (-2.0 * i / r) for i in range(r // 2)])


def yarn_thetas(r, base, factor, l0, beta_fast=32.0, beta_slow=1.0):
    """Peng et al., sec. 3.2 (NTK-by-parts): planes whose wavelength fits many times in
    L0 keep theta, those that fit less than once are interpolated (theta / factor), a
    linear ramp between; the ramp's ends are floored / ceiled dimension indices."""
    def dim_of(rotations):  # the plane index whose period fits `rotations` times in L0
        return r * math.log(l0 / (rotations * 2 * math.pi)) / (2 * math.log(base))
    low = max(math.floor(dim_of(beta_fast)), 0)
    high = min(math.ceil(dim_of(beta_slow)), r - 1)
    if low == high:
        high += 0.001
    theta = default_thetas(r, base)
    ramp = np.clip((np.arange(r // 2) - low) / (high - low), 0.0, 1.0)
    return theta / factor * ramp + theta * (1 - ramp), 0.1 * math.log(factor) + 1.0


def llama3_thetas(r, base, factor, low_ff, high_ff, l0):
    """Llama 3: wavelengths beyond L0 / low_ff are interpolated, below L0 / high_ff kept,
    smoothly blended between."""
    out = []
    for theta in default_thetas(r, base):
        wavelen = 2 * math.pi / theta
        if wavelen > l0 / low_ff:
            out.append(theta / factor)
        elif wavelen < l0 / high_ff:
            out.append(theta)
        else:
            s = (l0 / wavelen - low_ff) / (high_ff - low_ff)
            out.append((1 - s) * theta / factor + s * theta)
    return np.array(out)


def rope_reference(x, pos, thetas, m, pairing, rotary_dim):
    """RoFormer's rotation of x [..., d] at positions pos [...] (float64 throughout)."""
    x = np.asarray(x, dtype=np.float64)
    y = x.copy()
    half = rotary_dim // 2
    a = np.asarray(pos, dtype=np.float64)[..., None] * thetas  # |p theta| < 1e6: ~1e-10 rad
    c, s = np.cos(a), np.sin(a)
    if pairing == "interleaved":
        i1, i2 = np.arange(0, rotary_dim, 2), np.arange(1, rotary_dim, 2)
    else:
        i1, i2 = np.arange(half), np.arange(half, rotary_dim)
    x1, x2 = x[..., i1], x[..., i2]
    c, s = c[..., None, :], s[..., None, :]  # broadcast over heads
    y[..., i1] = m * (x1 * c - x2 * s)
    y[..., i2] = m * (x1 * s + x2 * c)
    return y


def to_bfloat16_bits(f32):
    """Round-to-nearest-even float32 -> bfloat16 bit patterns (uint16)."""
    u = np.ascontiguousarray(f32, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def from_bfloat16_bits(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32)


class FrequencyTest(unittest.TestCase):
    R, BASE = 64, 500000.0

    def check(self, rope, thetas, m=1.0):
        got, got_m = rope.frequencies()
        # Same closed forms in double; pow vs exp/log may differ by a few ulps.
        np.testing.assert_allclose(got, thetas, rtol=1e-13, atol=0)
        self.assertAlmostEqual(got_m, m, places=13)

    def test_default_and_linear(self):
        self.check(gpe.Rope(64, base=self.BASE), default_thetas(64, self.BASE))
        self.check(gpe.Rope(64, base=self.BASE, schedule="linear", factor=4.0),
                   default_thetas(64, self.BASE) / 4.0)

    def test_dynamic_ntk(self):
        # bloc97's dynamic NTK: base' = base (f L / L0 - (f - 1))^(r / (r - 2)) for L > L0.
        factor, l0, length = 2.0, 4096, 10000
        base2 = self.BASE * (factor * length / l0 - (factor - 1)) ** (64 / 62)
        self.check(gpe.Rope(64, base=self.BASE, schedule="dynamic_ntk", factor=factor,
                            original_max_position=l0, current_length=length),
                   default_thetas(64, base2))
        self.check(gpe.Rope(64, base=self.BASE, schedule="dynamic_ntk", factor=factor,
                            original_max_position=l0, current_length=l0),
                   default_thetas(64, self.BASE))

    def test_yarn(self):
        for factor, l0 in ((16.0, 4096), (4.0, 32768), (40.0, 4096)):
            thetas, m = yarn_thetas(self.R, self.BASE, factor, l0)
            self.check(gpe.Rope(64, base=self.BASE, schedule="yarn", factor=factor,
                                original_max_position=l0), thetas, m)
        # A given attention factor overrides 0.1 ln s + 1.
        rope = gpe.Rope(64, base=self.BASE, schedule="yarn", factor=8.0, attention_factor=1.5)
        self.assertEqual(rope.frequencies()[1], 1.5)

    def test_published_defaults(self):
        # Llama 3.1's published rope_scaling (factor 8, low 1, high 4, L0 = 8192) when
        # the parameters are left out: the same thetas as given explicitly.
        np.testing.assert_array_equal(
            gpe.Rope(128, base=self.BASE, schedule="llama3").frequencies()[0],
            gpe.Rope(128, base=self.BASE, schedule="llama3", factor=8.0, low_freq_factor=1.0,
                     high_freq_factor=4.0, original_max_position=8192).frequencies()[0])
        np.testing.assert_array_equal(
            gpe.Rope(64, schedule="yarn", factor=4.0).frequencies()[0],
            gpe.Rope(64, schedule="yarn", factor=4.0, beta_fast=32.0, beta_slow=1.0,
                     original_max_position=4096).frequencies()[0])

    def test_llama3(self):
        self.check(gpe.Rope(128, base=self.BASE, schedule="llama3", factor=8.0,
                            low_freq_factor=1.0, high_freq_factor=4.0,
                            original_max_position=8192),
                   llama3_thetas(128, self.BASE, 8.0, 1.0, 4.0, 8192))

    def test_longrope(self):
        # Ding et al.: theta_i = 1 / (e_i base^(2i/r)); attention factor
        # sqrt(1 + ln(L / L0) / ln L0) with L = max_position.
        rng = np.random.default_rng(0)
        short, long = 1 + rng.random(32), 1 + 10 * rng.random(32)
        for length, e in ((4000, short), (9000, long)):
            rope = gpe.Rope(64, base=self.BASE, schedule="longrope", short_factor=short,
                            long_factor=long, original_max_position=4096,
                            max_position=131072, current_length=length)
            m = math.sqrt(1 + math.log(131072 / 4096) / math.log(4096))
            self.check(rope, 1 / (e * self.BASE ** (2 * np.arange(32) / 64)), m)


class ApplyTest(unittest.TestCase):
    def setUp(self):
        self.rng = np.random.default_rng(1)

    def test_bshd_sbhd_with_offsets_all_schedules(self):
        b, s, h, d, r = 2, 5, 3, 24, 16
        offsets = np.array([7, 90000])
        pos = offsets[:, None] + np.arange(s)[None, :]  # [b, s]
        for pairing in ("interleaved", "half_split"):
            for kwargs in ({}, {"schedule": "yarn", "factor": 8.0, "original_max_position": 64},
                           {"schedule": "llama3", "factor": 8.0, "original_max_position": 128}):
                rope = gpe.Rope(d, rotary_dim=r, pairing=pairing, **kwargs)
                thetas, m = rope.frequencies()
                if kwargs.get("schedule") == "yarn":
                    thetas, m = yarn_thetas(r, 10000.0, 8.0, 64)
                elif kwargs.get("schedule") == "llama3":
                    thetas = llama3_thetas(r, 10000.0, 8.0, 1.0, 4.0, 128)
                else:
                    thetas = default_thetas(r, 10000.0)
                x = self.rng.standard_normal((b, s, h, d))
                want = rope_reference(x, pos, thetas, m, pairing, r)
                # float64: |p theta| <= 1e5 rad carries ~1e-11 rad of rounding in both.
                np.testing.assert_allclose(rope.forward(x, offsets=offsets), want, atol=1e-9)
                xs = np.ascontiguousarray(x.transpose(1, 0, 2, 3))
                got = rope.forward(xs, offsets=offsets, layout="sbhd")
                np.testing.assert_allclose(got.transpose(1, 0, 2, 3), want, atol=1e-9)

    def test_thd_with_cu_seqlens_and_position_ids(self):
        d = 16
        cu = np.array([0, 3, 3, 8])
        rope = gpe.Rope(d)
        x = self.rng.standard_normal((8, 2, d))
        offsets = np.array([10, 0, -4])
        pos = np.concatenate([offsets[k] + np.arange(cu[k + 1] - cu[k]) for k in range(3)])
        want = rope_reference(x, pos, default_thetas(d, 10000.0), 1.0, "half_split", d)
        np.testing.assert_allclose(rope.forward(x, offsets=offsets, cu_seqlens=cu, layout="thd"),
                                   want, atol=1e-12)
        np.testing.assert_allclose(rope.forward(x, positions=pos, cu_seqlens=cu, layout="thd"),
                                   want, atol=1e-12)

    def test_in_place_and_strided_without_copies(self):
        rope = gpe.Rope(8, pairing="interleaved")
        base = self.rng.standard_normal((2, 6, 2, 8))
        x = base[:, ::2]  # a strided view: every other token
        pos = np.arange(6).reshape(1, 6).repeat(2, 0)[:, ::2]
        want = rope_reference(x, pos, default_thetas(8, 10000.0), 1.0, "interleaved", 8)
        out = rope.forward(x, positions=pos.reshape(-1), out=x)
        self.assertIs(out, x)
        # The rotation landed in `base`'s memory: the view was not copied.
        np.testing.assert_allclose(base[:, ::2], want, atol=1e-12)

    def test_backward_is_the_adjoint(self):
        # <forward(x), g> = <x, backward(g)> for the linear map, to rounding (~1e-13 on
        # sums of ~500 products of unit normals).
        rope = gpe.Rope(12, rotary_dim=8, schedule="yarn", factor=4.0, original_max_position=32)
        x = self.rng.standard_normal((2, 7, 3, 12))
        g = self.rng.standard_normal(x.shape)
        ids = self.rng.integers(-1000, 1000, 14)
        lhs = np.sum(rope.forward(x, positions=ids) * g)
        rhs = np.sum(x * rope.backward(g, positions=ids))
        self.assertAlmostEqual(lhs, rhs, delta=1e-11 * max(1.0, abs(lhs)))

    def test_low_precision_dtypes(self):
        d = 32
        rope = gpe.Rope(d)
        x = self.rng.standard_normal((1, 16, 2, d)).astype(np.float32)
        pos = np.arange(16) * 997
        thetas = default_thetas(d, 10000.0)
        # float32: one rounding of cos/sin and a few float32 products: 1e-6 relative.
        want = rope_reference(x, pos, thetas, 1.0, "half_split", d)
        np.testing.assert_allclose(rope.forward(x, positions=pos), want, atol=1e-5)
        # float16: inputs rounded to half first (the reference rotates those), then one
        # half rounding on store, 2^-11 relative: atol 2^-10 * max|y|.
        x16 = x.astype(np.float16)
        want16 = rope_reference(x16, pos, thetas, 1.0, "half_split", d)
        got16 = rope.forward(x16, positions=pos)
        self.assertEqual(got16.dtype, np.float16)
        np.testing.assert_allclose(got16.astype(np.float64), want16,
                                   atol=2.0**-10 * np.abs(want16).max())
        # bfloat16 as bit patterns: 8 significant bits, atol 2^-7 * max|y|.
        bits = to_bfloat16_bits(x)
        wantb = rope_reference(from_bfloat16_bits(bits), pos, thetas, 1.0, "half_split", d)
        gotb = rope.forward(bits, positions=pos, bfloat16=True)
        np.testing.assert_allclose(from_bfloat16_bits(gotb), wantb,
                                   atol=2.0**-7 * np.abs(wantb).max())

    def test_table_reuse(self):
        # One table for q (4 heads) and k (1 head): the one-shot calls' exact values.
        rope = gpe.Rope(16, schedule="llama3", factor=8.0, original_max_position=64)
        q = self.rng.standard_normal((2, 5, 4, 16)).astype(np.float32)
        k = self.rng.standard_normal((2, 5, 1, 16)).astype(np.float32)
        offsets = [3, 400]
        table = rope.table(q, offsets=offsets, role="key")
        np.testing.assert_array_equal(table.forward(q), rope.forward(q, offsets=offsets))
        np.testing.assert_array_equal(table.forward(k), rope.forward(k, offsets=offsets))
        np.testing.assert_array_equal(table.backward(k), rope.backward(k, offsets=offsets))
        with self.assertRaises(gpe.GpeError):
            table.forward(q.astype(np.float64))  # a float32 table

    def test_copies_own_their_handles(self):
        # copy.deepcopy and pickle rebuild the encoding from its arguments (a copied handle
        # would be freed twice); the copies give the original's bits after it is gone. A
        # table refuses to be copied.
        rope = gpe.Rope(16, rotary_dim=12, schedule="longrope", original_max_position=8,
                        max_position=64, current_length=9, short_factor=[1.0] * 6,
                        long_factor=np.linspace(1.0, 3.0, 6), pairing="interleaved")
        x = self.rng.standard_normal((1, 4, 2, 16))
        want = rope.forward(x, offsets=[5])
        copies = [copy.deepcopy(rope), pickle.loads(pickle.dumps(rope))]
        self.assertNotEqual(copies[0]._handle.value, rope._handle.value)
        del rope
        gc.collect()
        for c in copies:
            np.testing.assert_array_equal(c.forward(x, offsets=[5]), want)
        with self.assertRaisesRegex(TypeError, "RopeTable cannot be copied"):
            copy.deepcopy(copies[0].table(x))
        # Every other handle refuses to be copied (a shallow copy shared the handle and both
        # copies freed it) or pickled, with a message.
        # (Coordinate encoders, SO(n) representations, Alibi, T5, GRAPE-M and the
        # algebraic handles are rebuilt instead: the copy tests of coordinate_test,
        # sequence_test and gpe_test.)
        for obj in (gpe.FoxBias(np.zeros((4, 2))),
                    gpe.GrapeApBias(np.zeros((4, 2, 1)), np.zeros((4, 2, 1)))):
            for fn in (copy.copy, copy.deepcopy, pickle.dumps):
                with self.assertRaisesRegex(TypeError, "cannot be copied or pickled"):
                    fn(obj)

    def test_mrope_and_axial(self):
        d = 16
        rope = gpe.Rope(d, mrope_sections=[4, 2, 2])
        self.assertEqual(rope.shape, (16, 16, 3))
        ids = self.rng.integers(0, 50, (3, 5))
        x = self.rng.standard_normal((1, 5, 1, d))
        got = rope.forward(x, positions=ids)
        # Qwen2-VL sections: planes 0-3 follow axis 0, 4-5 axis 1, 6-7 axis 2.
        axis = np.array([0, 0, 0, 0, 1, 1, 2, 2])
        a = ids[axis].T * default_thetas(d, 10000.0)  # [5, 8]
        want = x.copy()
        c, s = np.cos(a)[None, :, None, :], np.sin(a)[None, :, None, :]
        x1, x2 = x[..., :8], x[..., 8:]
        want[..., :8], want[..., 8:] = x1 * c - x2 * s, x1 * s + x2 * c
        np.testing.assert_allclose(got, want, atol=1e-12)
        self.assertEqual(gpe.Rope(d, axial_axes=2).shape, (16, 16, 2))

    def test_bad_input(self):
        cases = [
            lambda: gpe.Rope(16, rotary_dim=7),
            lambda: gpe.Rope(16, rotary_dim=18),
            lambda: gpe.Rope(16, schedule="linear", factor=float("nan")),
            lambda: gpe.Rope(16, schedule="longrope", short_factor=[1.0] * 3,
                             long_factor=[1.0] * 3),
            lambda: gpe.Rope(16).forward(np.zeros((6, 1, 16)), layout="thd",
                                         cu_seqlens=[0, 4, 2, 6]),
            lambda: gpe.Rope(16).forward(np.zeros((1, 2, 1, 8))),
            lambda: gpe.Rope(16).forward(np.zeros((1, 2, 1, 16)), positions=[1, 2, 3]),
        ]
        for make in cases:
            with self.assertRaises(gpe.GpeError) as ctx:
                make()
            self.assertEqual(ctx.exception.status, "GPE_ERROR_INVALID_ARGUMENT")
            self.assertTrue(str(ctx.exception))
        with self.assertRaises(ValueError):
            gpe.Rope(16, schedule="ntk")


class RopeCopiesAndEmptyInputsTest(unittest.TestCase):
    def test_copy_keeps_its_own_factors_and_closed_refuses(self):
        sf = np.ones(4)
        r = gpe.Rope(8, schedule="longrope", short_factor=sf, long_factor=np.ones(4) * 2,
                     original_max_position=16, max_position=64)
        want = r.frequencies()[0]
        sf[:] = 5.0  # the caller's array, changed after the Rope was built
        np.testing.assert_array_equal(copy.deepcopy(r).frequencies()[0], want)
        np.testing.assert_array_equal(pickle.loads(pickle.dumps(r)).frequencies()[0], want)
        r.close()
        with self.assertRaisesRegex(ValueError, "closed"):
            copy.deepcopy(r)

    def test_empty_batches(self):
        # NumPy's strides of empty arrays (all 0) failed the library's layout checks.
        r = gpe.Rope(8)
        for shape in ((0, 4, 2, 8), (1, 0, 2, 8)):
            self.assertEqual(r.forward(np.zeros(shape)).shape, shape)

if __name__ == "__main__":
    unittest.main()
