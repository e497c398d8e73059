"""Property-based tests of the Python package (Hypothesis; issue 24, "nothing silently
wrong").

Every public name of gpe (gpe.__all__) has a case below (ApiCoverageTest fails on a new
name without one). Each case draws small legal arguments, then replaces each argument
by a variant: read-only, non-contiguous (strided, Fortran order), a plain list, float32,
an output aliasing an input or overlapping it in part, a read-only or strided output,
huge, negative and non-finite values, None, strings and other wrong types. Properties:

- nothing crashes or hangs: each example runs in this process under a faulthandler
  watchdog (HANG_S seconds, then a traceback and exit); a segfault kills the process,
  which `bazel test` reports as a failure;
- an exception is a clear one (ValueError, TypeError, OverflowError or gpe.GpeError);
  IndexError, AttributeError, KeyError, ctypes.ArgumentError and the rest fail the test;
- a read-only output is refused with ValueError and left untouched;
- integers beyond int64 (2^63 and up, below -2^63) and positions >= 2^63 are refused;
- a call that succeeds on a layout variant of legal input (read-only, strided, Fortran,
  list) returns what the plain float64 call returns (to 1e-12 relative: the same
  double computation, other memory order), and a float32 call returns it to
  F32_RTOL (single-precision rounding of O(1) values, summed over a few terms);
  when the plain call is refused, the variant must be refused too.

The settings profile is fixed (derandomize=True, max_examples per test, no deadline,
no example database), so CI runs the same examples every time in bounded time.
"""

import ctypes
import faulthandler
import os
import sys
import tempfile
import unittest

import sanitizer_preload
from gpe import _ffi

sanitizer_preload.reexec_if_needed(next((str(p) for p in _ffi._candidates() if p.is_file()), None))

import numpy as np  # noqa: E402

try:
    import hypothesis  # noqa: E402
    from hypothesis import HealthCheck, Phase, given, settings  # noqa: E402
    from hypothesis import strategies as st  # noqa: E402
except ImportError:  # pragma: no cover
    sys.exit("property_test.py needs Hypothesis (bindings/python/requirements.txt). ./bazelw "
             "installs it into .venv when `import hypothesis` fails there; outside Bazel: "
             "pip install -r bindings/python/requirements.txt")

import gpe  # noqa: E402

MAX_EXAMPLES = int(os.environ.get("GPE_PROPERTY_EXAMPLES", "30"))
HANG_S = int(os.environ.get("GPE_PROPERTY_HANG_S", "30"))
F32_RTOL = 2e-4
F64_RTOL = 1e-12

settings.register_profile("ci", max_examples=MAX_EXAMPLES, derandomize=True, deadline=None,
                          database=None, print_blob=False, report_multiple_bugs=False,
                          # No shrinking: a failure is reported as drawn, in bounded time.
                          phases=[Phase.explicit, Phase.generate],
                          suppress_health_check=[HealthCheck.too_slow,
                                                 HealthCheck.data_too_large,
                                                 HealthCheck.filter_too_much])
settings.load_profile("ci")

# MemoryError: a legal size (2^32 + 1 rows) whose output NumPy cannot allocate before the
# library would have refused it; clear, and no crash.
CLEAR = (ValueError, TypeError, OverflowError, gpe.GpeError, MemoryError)
INT64_MIN, INT64_MAX = -2**63, 2**63 - 1


class Refused:
    """The outcome of a call that raised one of the clear exceptions."""

    def __init__(self, error):
        self.error = error

    def __repr__(self):
        return "Refused(%r)" % (self.error,)


def outcome(fn):
    """fn()'s result, or Refused for a clear exception; anything else propagates (and
    fails the test). A watchdog ends the process if fn hangs."""
    faulthandler.dump_traceback_later(HANG_S, exit=True)
    try:
        return fn()
    except CLEAR as e:
        if isinstance(e, ctypes.ArgumentError):  # a TypeError subclass: not clear
            raise AssertionError("ctypes.ArgumentError leaked: %s" % e) from e
        return Refused(e)
    finally:
        faulthandler.cancel_dump_traceback_later()


def close(a, b, rtol):
    """Recursive comparison of results (arrays, tuples, namedtuples, scalars); NaN == NaN."""
    if isinstance(a, (tuple, list)):
        return (isinstance(b, (tuple, list)) and len(a) == len(b)
                and all(close(x, y, rtol) for x, y in zip(a, b)))
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, gpe.AdditiveBias) or isinstance(a, gpe.CoordinateEncoder):
        return type(a) is type(b)
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        return False
    if a.dtype.kind in "iub" or b.dtype.kind in "iub":
        return np.array_equal(a, b)
    a, b = a.astype(np.float64), b.astype(np.float64)
    same_nan = np.array_equal(np.isnan(a), np.isnan(b))
    fa, fb = np.nan_to_num(a, nan=0.0), np.nan_to_num(b, nan=0.0)
    inf = np.isinf(fa) | np.isinf(fb)
    if not np.array_equal(fa[inf], fb[inf]):
        return False
    fa, fb = fa[~inf], fb[~inf]
    scale = max(1.0, float(np.abs(fb).max())) if fb.size else 1.0
    return same_nan and bool(np.all(np.abs(fa - fb) <= rtol * scale))


# ---- Variants of array arguments -------------------------------------------------------

LAYOUT = ("plain", "readonly", "strided", "fortran", "list")  # same values, other memory
FLOAT_VARIANTS = LAYOUT + ("float32", "nan", "inf", "huge", "int64", "complex", "bool",
                           "none", "string", "object", "scalar", "extra_dim", "empty")
POS_VARIANTS = ("plain", "readonly", "strided", "list", "int32", "uint8", "uint64_small",
                "uint64_big", "list_big", "list_beyond_uint64", "list_mixed_sign", "negative",
                "int64_extremes", "float", "none", "string", "bool")
OUT_VARIANTS = ("none", "fresh", "readonly", "strided", "frombuffer", "float32", "wrong_shape",
                "list", "alias", "overlap")


def strided(a):
    """a's values in a non-contiguous view (every other element of a bigger buffer)."""
    a = np.asarray(a)
    if a.ndim == 0:
        return a
    big = np.zeros(a.shape[:-1] + (2 * a.shape[-1],), dtype=a.dtype)
    view = big[..., ::2]
    view[...] = a
    return view


def read_only(a):
    a = np.array(a)
    a.flags.writeable = False
    return a


def float_variant(a, kind):
    """Variant `kind` of the float64 array a; returns (value, is_legal_layout, is_f32)."""
    a = np.asarray(a, dtype=np.float64)
    if kind == "plain":
        return a.copy(), True, False
    if kind == "readonly":
        return read_only(a), True, False
    if kind == "strided":
        return strided(a), True, False
    if kind == "fortran":
        return np.asfortranarray(a), True, False
    if kind == "list":  # an empty list has lost its shape
        return a.tolist(), a.size > 0, False
    if kind == "float32":
        return a.astype(np.float32), False, True
    bad = a.copy()
    if kind in ("nan", "inf", "huge"):
        if bad.size:
            bad.flat[bad.size // 2] = {"nan": np.nan, "inf": -np.inf, "huge": 1e300}[kind]
        return bad, False, False
    return {"int64": lambda: np.ones(a.shape, np.int64),
            "complex": lambda: a.astype(np.complex128),
            "bool": lambda: a > 0,
            "none": lambda: None,
            "string": lambda: "not an array",
            "object": lambda: np.array([object()] * max(a.size, 1), dtype=object),
            "scalar": lambda: 1.0,
            "extra_dim": lambda: a[None],
            "empty": lambda: a[:0]}[kind](), False, False


def pos_variant(p, kind):
    """Variant `kind` of the int64 positions p; returns (value, is_legal_layout, must_refuse)."""
    p = np.asarray(p, dtype=np.int64)
    if kind == "plain":
        return p.copy(), True, False
    if kind == "readonly":
        return read_only(p), True, False
    if kind == "strided":
        return strided(p), True, False
    if kind == "list":
        return p.tolist(), p.size > 0, False
    if kind == "int32":
        return p.astype(np.int32), True, False
    if kind == "uint8":
        return (np.abs(p) % 200).astype(np.uint8), False, False
    if kind == "uint64_small":
        return np.abs(p).astype(np.uint64), False, False
    big = p.size > 0
    if kind == "uint64_big":
        q = np.abs(p).astype(np.uint64)
        if big:
            q[0] = np.uint64(2**63 + 5)
        return q, False, big
    if kind == "list_big":
        return [2**63 + 1] + p.tolist()[1:] if big else [], False, big
    if kind == "list_beyond_uint64":
        return [2**64 + 3] + p.tolist()[1:] if big else [], False, big
    if kind == "list_mixed_sign":
        # NumPy stores [-1, 2^63] as float64, rounding 2^63 + 1: must not pass as 2^63.
        return ([-1, 2**63 + 1] + p.tolist()[2:] if p.size >= 2 else p.tolist()), False, \
            p.size >= 2
    if kind == "negative":
        return -p - 1, False, False
    if kind == "int64_extremes":
        q = p.copy()
        if big:
            q[0] = INT64_MAX
            q[-1] = INT64_MIN
        return q, False, False
    if kind == "float":
        return p.astype(np.float64) + 0.5, False, big
    return {"none": None, "string": "0 1 2", "bool": p > 0}[kind], False, False


# Legal but huge sizes are 2^40 and up (NumPy refuses the output at once); 2^31 would
# make a 16 GiB output NumPy can allocate and the library then fills, for minutes.
INTS = st.one_of(st.integers(-3, 40), st.sampled_from(
    [2**40, 2**40 + 1, INT64_MAX, INT64_MAX + 1, 2**64, 2**64 + 8, INT64_MIN, INT64_MIN - 1,
     -2**70, np.uint64(2**63), np.int64(-1), 1.5, float("nan"), None, "8", True]))


def huge_int(v, unsigned=False):
    """Whether v is an integer outside int64 (uint64 for a seed): must be refused, with
    OverflowError, or ValueError/GpeError where another check comes first."""
    try:
        import operator
        v = operator.index(v)
    except TypeError:
        return False
    return not (0 <= v < 2**64 if unsigned else INT64_MIN <= v <= INT64_MAX)


def not_integer(v):
    import operator
    try:
        operator.index(v)
        return False
    except TypeError:
        return True


# ---- The engine -------------------------------------------------------------------------


class Case(unittest.TestCase):
    """Helpers shared by the test classes."""

    def check_variants(self, data, call, floats=(), positions=(), f32=True, rtol=F64_RTOL,
                       skip=()):
        """call(**args) with one argument replaced by a drawn variant, against the plain
        call. floats / positions: {name: legal float64 / int64 array}; skip: variant
        kinds not drawn (known library crashes, each with its reason at the call)."""
        base = dict(floats)
        base.update(positions)
        names = sorted(floats) + sorted(positions)
        if not names:
            return
        name = data.draw(st.sampled_from(names), label="argument")
        if name in floats:
            kind = data.draw(st.sampled_from([k for k in FLOAT_VARIANTS if k not in skip]),
                             label="variant")
            value, legal, is_f32 = float_variant(floats[name], kind)
            must_refuse = False
        else:
            kind = data.draw(st.sampled_from(POS_VARIANTS), label="variant")
            value, legal, must_refuse = pos_variant(positions[name], kind)
            is_f32 = False
        args = {k: np.array(v) for k, v in base.items()}
        want = outcome(lambda: call(**args))
        args[name] = value
        got = outcome(lambda: call(**args))
        where = "%s=%s variant of %s" % (name, kind, call.__name__)
        if must_refuse:
            self.assertIsInstance(got, Refused, where)
        if legal:
            # Layouts the library documents as unsupported (RoPE's head_dim must be
            # contiguous) may be refused, clearly; read-only inputs and lists may not.
            if kind in ("strided", "fortran") and isinstance(got, Refused):
                return got
            if isinstance(want, Refused):
                self.assertIsInstance(got, Refused, where + ": the plain call was refused")
            else:
                self.assertNotIsInstance(got, Refused, where + " refused: %r" % (got,))
                self.assertTrue(close(got, want, rtol), "%s: %r != %r" % (where, got, want))
        elif is_f32 and f32 and not isinstance(want, Refused) and not isinstance(got, Refused):
            self.assertTrue(close(got, want, F32_RTOL), "%s: %r != %r" % (where, got, want))
        return got

    def check_out(self, data, call, x_name, x, dtype=np.float64, alias_ok=True, fill=7.0):
        """call(out=...) for drawn output variants; x is the input out may alias. fill:
        what a given output holds before the call (0 for accumulated gradients)."""
        kind = data.draw(st.sampled_from(OUT_VARIANTS), label="out")
        want = outcome(lambda: call(x=x.copy(), out=None))
        xx = x.copy()
        shape = np.shape(want) if not isinstance(want, Refused) else x.shape
        if kind == "none":
            out = None
        elif kind == "fresh":
            out = np.full(shape, fill, dtype=dtype)
        elif kind == "readonly":
            out = read_only(np.full(shape, fill, dtype=dtype))
        elif kind == "frombuffer":
            out = np.frombuffer(np.full(shape, fill, dtype=dtype).tobytes(),
                                dtype=dtype).reshape(shape)
        elif kind == "strided":
            out = strided(np.full(shape, fill, dtype=dtype))
        elif kind == "float32":
            out = np.full(shape, fill, dtype=np.float32 if dtype == np.float64 else np.float64)
        elif kind == "wrong_shape":
            out = np.full(tuple(s + 1 for s in shape), 7.0, dtype=dtype)
        elif kind == "list":
            out = np.full(shape, 7.0).tolist()
        elif kind == "alias":
            out = xx
        else:  # overlap: out is x shifted by one element
            flat = np.zeros(xx.size + 1, dtype=xx.dtype)
            flat[:xx.size] = xx.ravel()
            xx = flat[:xx.size].reshape(xx.shape)
            out = flat[1:].reshape(xx.shape)
        before = None if out is None or isinstance(out, list) else np.array(out)
        got = outcome(lambda: call(x=xx, out=out))
        where = "out=%s variant of %s" % (kind, call.__name__)
        if kind in ("readonly", "frombuffer"):
            self.assertIsInstance(got, Refused, where)
            self.assertIsInstance(got.error, ValueError, where)
            np.testing.assert_array_equal(out, before, where + " was written")
            return
        if isinstance(want, Refused):
            return
        if kind in ("none", "fresh", "strided") or (kind == "alias" and alias_ok):
            if isinstance(got, Refused) and kind in ("alias", "strided"):
                return  # in place or a strided out refused by the library: clear enough
            self.assertNotIsInstance(got, Refused, where + " refused: %r" % (got,))
            self.assertTrue(close(got, want, F64_RTOL), "%s: %r != %r" % (where, got, want))
        elif kind == "overlap" and not isinstance(got, Refused):
            self.assertTrue(close(got, want, F64_RTOL), "%s gave a wrong result" % where)

    def check_int(self, make, value, where, unsigned=False, none_ok=False):
        """make(value) for a drawn scalar integer argument: refused when huge or not an
        integer (bool counts as one; None where none_ok, the argument's default)."""
        got = outcome(lambda: make(value))
        if huge_int(value, unsigned) or (not_integer(value) and not (none_ok and value is None)):
            self.assertIsInstance(got, Refused, "%s(%r)" % (where, value))
        return got


def rng_arrays(data, *shapes):
    seed = data.draw(st.integers(0, 2**32 - 1), label="seed")
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s) for s in shapes]


def positions(data, n, lo=-50, hi=50):
    return np.array(data.draw(st.lists(st.integers(lo, hi), min_size=n, max_size=n),
                              label="positions"), dtype=np.int64)


SMALL = st.integers(1, 4)
EVEN = st.sampled_from([2, 4, 6])


# ---- Sequence encodings: representations applied at positions -------------------------


class RepresentationTest(Case):
    def _apply_case(self, data, make, dim):
        rep = make()
        n = data.draw(st.integers(0, 4), label="n")
        (x,) = rng_arrays(data, (n, dim))
        p = positions(data, n)

        def apply(x, p, out=None):
            return rep.apply(p, x, out=out)
        self.check_variants(data, apply, floats={"x": x}, positions={"p": p})
        self.check_out(data, lambda x, out: rep.apply(p, x, out=out), "x", x)
        return rep

    @given(st.data())
    def test_so_representation(self, data):
        dim = data.draw(EVEN, label="dim")
        pairing = data.draw(st.sampled_from(["interleaved", "half_split"]))
        rep = self._apply_case(data, lambda: gpe.SoRepresentation.planes(dim, pairing=pairing),
                               dim)
        self.check_int(rep.matrix, data.draw(INTS), "SoRepresentation.matrix")
        self.check_int(lambda v: gpe.SoRepresentation.planes(v), data.draw(INTS), "planes")
        a, b = rng_arrays(data, dim, dim)
        self.check_variants(data, lambda a, b: gpe.SoRepresentation.rank2(a, b).matrix(3),
                            floats={"a": a, "b": b}, f32=False)

    @given(st.data())
    def test_grape_m(self, data):
        dim, m = data.draw(EVEN), data.draw(SMALL)
        a, b, w = rng_arrays(data, (m, dim), (m, dim), m)
        g = self._apply_case(data, lambda: gpe.GrapeM(a, b, w), dim)
        self.check_int(g.matrix, data.draw(INTS), "GrapeM.matrix")
        self.check_variants(data, lambda a, b, w: gpe.GrapeM(a, b, w).matrix(2),
                            floats={"a": a, "b": b, "w": w}, f32=False)
        n = data.draw(st.integers(0, 3))
        x, go = rng_arrays(data, (n, dim), (n, dim))
        p = positions(data, n)
        self.check_variants(data, lambda x, go, p: g.backward(p, x, go),
                            floats={"x": x, "go": go}, positions={"p": p})

    @given(st.data())
    def test_algebraic_sequence(self, data):
        dim = data.draw(st.integers(1, 5))
        (s,) = rng_arrays(data, (dim, dim))
        skew = s - s.T
        alg = self._apply_case(data, lambda: gpe.AlgebraicSequence(skew), dim)
        self.check_int(alg.matrix, data.draw(INTS), "AlgebraicSequence.matrix")
        self.check_variants(data, lambda s: gpe.AlgebraicSequence(s).matrix(2),
                            floats={"s": skew}, f32=False)
        n = data.draw(st.integers(0, 3))
        x, go = rng_arrays(data, (n, dim), (n, dim))
        p = positions(data, n)
        self.check_variants(data, lambda x, go, p: alg.backward(p, x, go),
                            floats={"x": x, "go": go}, positions={"p": p})

    @given(st.data())
    def test_algebraic_tree(self, data):
        k, dim = data.draw(st.integers(1, 3)), data.draw(st.integers(1, 4))
        (s,) = rng_arrays(data, (k, dim, dim))
        skews = s - s.transpose(0, 2, 1)
        tree = gpe.AlgebraicTree(skews)
        n, depth = data.draw(st.integers(0, 3)), data.draw(st.integers(1, 3))
        addr = np.array(data.draw(st.lists(st.lists(st.integers(-1, k - 1), min_size=depth,
                                                    max_size=depth), min_size=n, max_size=n)),
                        dtype=np.int64).reshape(n, depth)
        x, go = rng_arrays(data, (n, dim), (n, dim))
        self.check_variants(data, lambda x, a: tree.apply(a, x), floats={"x": x},
                            positions={"a": addr})
        self.check_out(data, lambda x, out: tree.apply(addr, x, out=out), "x", x)
        self.check_variants(data, lambda x, go, a: tree.backward(a, x, go),
                            floats={"x": x, "go": go}, positions={"a": addr})
        self.check_variants(data, lambda path: tree.matrix(path), positions={
            "path": np.array(data.draw(st.lists(st.integers(0, k - 1), max_size=3)), np.int64)})
        self.check_int(tree.node_matrices, data.draw(INTS), "AlgebraicTree.node_matrices")
        self.check_variants(data, lambda s: gpe.AlgebraicTree(s).matrix([0]), floats={"s": skews},
                            f32=False)
        self.assertIsInstance(outcome(lambda: gpe.AlgebraicTree.addresses([[0], [0, 0]])),
                              np.ndarray)

    @given(st.data())
    def test_algebraic_grid(self, data):
        dims = data.draw(st.lists(st.integers(1, 3), min_size=1, max_size=3))
        mats = [m - m.T for m in rng_arrays(data, *[(d, d) for d in dims])]
        grid = gpe.AlgebraicGrid(mats)
        n = data.draw(st.integers(0, 3))
        (x, go) = rng_arrays(data, (n, sum(dims)), (n, sum(dims)))
        p = np.array(data.draw(st.lists(st.integers(-9, 9), min_size=n * len(dims),
                                        max_size=n * len(dims))), np.int64).reshape(n, len(dims))
        self.check_variants(data, lambda x, p: grid.apply(p, x), floats={"x": x},
                            positions={"p": p})
        self.check_out(data, lambda x, out: grid.apply(p, x, out=out), "x", x)
        self.check_variants(data, lambda x, go, p: grid.backward(p, x, go),
                            floats={"x": x, "go": go}, positions={"p": p})

    @given(st.data())
    def test_learned_positions(self, data):
        rows, dim = data.draw(st.integers(1, 6)), data.draw(SMALL)
        (table,) = rng_arrays(data, (rows, dim))
        self.check_variants(data, lambda t: gpe.LearnedPositions(t).shape, floats={"t": table},
                            f32=False)
        lp = gpe.LearnedPositions(table)
        n = data.draw(st.integers(0, 4))
        p = positions(data, n, 0, rows - 1)
        (go,) = rng_arrays(data, (n, dim))
        self.check_variants(data, lambda p: lp.lookup(p), positions={"p": p})
        self.check_out(data, lambda x, out: lp.lookup(p, out=out), "x", go)
        self.check_variants(data, lambda p, go: lp.backward(p, go), floats={"go": go},
                            positions={"p": p})
        self.check_out(data, lambda x, out: lp.backward(p, go, grad_table=out), "x",
                       np.zeros((rows, dim)), alias_ok=False, fill=0.0)


class RopeTest(Case):
    @given(st.data())
    def test_rope(self, data):
        dim = data.draw(st.sampled_from([2, 4, 8]))
        schedule = data.draw(st.sampled_from(["default", "linear", "yarn", "llama3"]))
        rope = outcome(lambda: gpe.Rope(dim, schedule=schedule))
        if isinstance(rope, Refused):
            return
        b, s, h = data.draw(SMALL), data.draw(st.integers(0, 3)), data.draw(SMALL)
        (x,) = rng_arrays(data, (b, s, h, dim))
        p = positions(data, b * s)
        self.check_variants(data, lambda x, p: rope.forward(x, positions=p),
                            floats={"x": x}, positions={"p": p})
        self.check_variants(data, lambda x, off: rope.backward(x, offsets=off),
                            floats={"x": x}, positions={"off": positions(data, b)})
        self.check_out(data, lambda x, out: rope.forward(x, positions=p, out=out), "x", x)
        table = outcome(lambda: rope.table(x, positions=p))
        if not isinstance(table, Refused):
            self.assertIsInstance(table, gpe.RopeTable)
            self.check_out(data, lambda x, out: table.forward(x, out=out), "x", x)
            self.check_out(data, lambda x, out: table.backward(x, out=out), "x", x)
        self.check_int(lambda v: gpe.Rope(v), data.draw(INTS), "Rope")
        self.check_int(lambda v: gpe.Rope(8, rotary_dim=v), data.draw(INTS), "Rope rotary_dim",
                       none_ok=True)
        self.check_int(lambda v: gpe.Rope(8, xpos=True, xpos_centre=v), data.draw(INTS),
                       "Rope xpos_centre")
        self.check_variants(data, lambda f: gpe.Rope(dim, schedule="longrope", short_factor=f,
                                                     long_factor=f).frequencies(),
                            floats={"f": np.ones(dim // 2)}, f32=False)


class SequenceFunctionTest(Case):
    @given(st.data())
    def test_sinusoidal(self, data):
        n, dim = data.draw(st.integers(0, 4)), data.draw(EVEN)
        p = positions(data, n, -10**6, 10**6)
        self.check_variants(data, lambda p: gpe.sinusoidal(p, dim), positions={"p": p})
        self.check_out(data, lambda x, out: gpe.sinusoidal(p, dim, out=out), "x",
                       np.zeros((n, dim)), alias_ok=False)
        self.check_int(lambda v: gpe.sinusoidal(p, v), data.draw(INTS), "sinusoidal dim")

    @given(st.data())
    def test_periodic_and_locality(self, data):
        n, half = data.draw(st.integers(0, 4)), data.draw(SMALL)
        (x,) = rng_arrays(data, (n, 2 * half))
        p = positions(data, n)
        mult = np.arange(1, half + 1)
        self.check_variants(data, lambda x, p, m: gpe.algebraic_periodic(p, x, 7, m),
                            floats={"x": x}, positions={"p": p, "m": mult})
        self.check_out(data, lambda x, out: gpe.algebraic_periodic(p, x, 7, mult, out=out), "x",
                       x)
        self.check_int(lambda v: gpe.algebraic_periodic(p, x, v, mult), data.draw(INTS),
                       "algebraic_periodic period")
        m = data.draw(st.integers(0, 3))
        (sc,) = rng_arrays(data, (n, m))
        qp, kp = positions(data, n), positions(data, m)

        self.check_variants(data, lambda qp, kp: gpe.locality_scale(sc.copy(), qp, kp, 0.9),
                            positions={"qp": qp, "kp": kp})
        # scores is the output (scaled in place): read-only is refused, untouched.
        ro = read_only(sc)
        r = outcome(lambda: gpe.locality_scale(ro, qp, kp))
        self.assertIsInstance(r, Refused)
        self.assertIsInstance(r.error, ValueError)
        np.testing.assert_array_equal(ro, sc)

    @given(st.data())
    def test_shaw(self, data):
        lq, lk, d, k = (data.draw(st.integers(0, 3)), data.draw(st.integers(0, 3)),
                        data.draw(SMALL), data.draw(st.integers(0, 2)))
        q, table, g, probs, gv = rng_arrays(data, (lq, d), (2 * k + 1, d), (lq, lk), (lq, lk),
                                            (lq, d))
        qp, kp = positions(data, lq), positions(data, lk)
        pos = {"qp": qp, "kp": kp}
        self.check_variants(data, lambda q, t, qp, kp: gpe.shaw_key_scores(q, t, qp, kp),
                            floats={"q": q, "t": table}, positions=pos)
        self.check_variants(data, lambda q, t, g, qp, kp:
                            gpe.shaw_key_scores_backward(q, t, qp, kp, g),
                            floats={"q": q, "t": table, "g": g}, positions=pos)
        self.check_out(data, lambda x, out: gpe.shaw_key_scores(q, table, qp, kp, out=out), "x",
                       np.zeros((lq, lk)), alias_ok=False)
        self.check_out(data, lambda x, out: gpe.shaw_key_scores_backward(
            q, table, qp, kp, g, grad_label_table=out)[1], "x", np.zeros(table.shape),
            alias_ok=False, fill=0.0)
        self.check_variants(data, lambda p, t, qp, kp: gpe.shaw_value_output(p, t, qp, kp),
                            floats={"p": probs, "t": table}, positions=pos)
        self.check_variants(data, lambda p, t, g, qp, kp:
                            gpe.shaw_value_output_backward(p, t, qp, kp, g),
                            floats={"p": probs, "t": table, "g": gv}, positions=pos)

    @given(st.data())
    def test_transformer_xl(self, data):
        lq, lk, d = data.draw(st.integers(0, 3)), data.draw(st.integers(0, 3)), data.draw(EVEN)
        q, k, w, u, v, g = rng_arrays(data, (lq, d), (lk, d), (d, d), d, d, (lq, lk))
        pos = {"qp": positions(data, lq), "kp": positions(data, lk)}
        fl = {"q": q, "k": k, "w": w, "u": u, "v": v}
        self.check_variants(data, lambda q, k, w, u, v, qp, kp:
                            gpe.transformer_xl_score_terms(q, k, qp, kp, w, u, v),
                            floats=fl, positions=pos)
        fl["g"] = g
        self.check_variants(data, lambda q, k, w, u, v, g, qp, kp:
                            gpe.transformer_xl_score_terms_backward(q, k, qp, kp, w, u, v, g),
                            floats=fl, positions=pos)


# ---- Additive biases --------------------------------------------------------------------


class BiasTest(Case):
    def _bias_case(self, data, bias, grads):
        """fill_tile and accumulate_gradient with variants; grads: the accumulate
        keyword arguments' shapes."""
        m, n = data.draw(st.integers(0, 3)), data.draw(st.integers(0, 3))
        heads = bias.num_heads
        hi = getattr(bias, "_positions_hi", 50)
        qp, kp = positions(data, m, 0, hi), positions(data, n, 0, hi)
        head = data.draw(st.integers(0, max(heads - 1, 0)))
        self.check_variants(data, lambda qp, kp: bias.fill_tile(head, qp, kp),
                            positions={"qp": qp, "kp": kp})
        self.check_out(data, lambda x, out: bias.fill_tile(head, qp, kp, out=out), "x",
                       np.zeros((m, n)), alias_ok=False)
        self.check_int(lambda h: bias.fill_tile(h, qp, kp), data.draw(INTS), "fill_tile head")
        (gt,) = rng_arrays(data, (m, n))
        self.check_variants(data, lambda gt, qp, kp: bias.accumulate_gradient(head, qp, kp, gt),
                            floats={"gt": gt}, positions={"qp": qp, "kp": kp})
        names = sorted(grads)
        name = data.draw(st.sampled_from(names))

        def accumulate(x, out):
            r = bias.accumulate_gradient(head, qp, kp, gt, **{name: out})
            return r[names.index(name)] if isinstance(r, tuple) else r
        self.check_out(data, accumulate, "x", np.zeros(grads[name]), alias_ok=False, fill=0.0)

    @given(st.data())
    def test_alibi(self, data):
        heads = data.draw(SMALL)
        self.check_int(lambda v: gpe.Alibi(v), data.draw(INTS), "Alibi")
        bias = gpe.Alibi(heads, symmetric=data.draw(st.booleans()))
        self._bias_case(data, bias, {"grad_slopes": heads})
        self.check_variants(data, lambda s: gpe.Alibi(heads, slopes=s).slopes,
                            floats={"s": np.linspace(0.5, 0.1, heads)}, f32=False)

    @given(st.data())
    def test_t5(self, data):
        buckets, heads = data.draw(st.integers(4, 6)), data.draw(SMALL)
        (table,) = rng_arrays(data, (buckets, heads))
        self.check_int(lambda v: gpe.T5Bias(table, max_distance=v), data.draw(INTS),
                       "T5Bias max_distance")
        self.check_variants(data, lambda t: gpe.T5Bias(t).fill_tile(0, [0, 1], [1, 0]),
                            floats={"t": table}, f32=False)
        self._bias_case(data, gpe.T5Bias(table), {"grad_table": (buckets, heads)})

    @given(st.data())
    def test_fox_and_grape_ap(self, data):
        length, heads, rank = data.draw(st.integers(1, 4)), data.draw(SMALL), data.draw(SMALL)
        x, w, u = rng_arrays(data, (length, heads), (length, heads, rank),
                             (length, heads, rank))
        self.check_int(lambda v: gpe.FoxBias(x, first_position=v), data.draw(INTS), "FoxBias")
        fox = gpe.FoxBias(x)
        fox._positions_hi = length - 1
        self._bias_case(data, fox, {"grad_prefix": (length, heads)})
        self.check_variants(data, lambda g: fox.logit_gradient(g), floats={"g": x}, f32=False)
        ap = gpe.GrapeApBias(w, u)
        ap._positions_hi = length - 1
        self._bias_case(data, ap, {"grad_w": w.shape, "grad_u": u.shape})
        self.check_variants(data, lambda w, u: gpe.GrapeApBias(w, u).fill_tile(0, [0], [0]),
                            floats={"w": w, "u": u}, f32=False)

    @given(st.data())
    def test_grape_a(self, data):
        heads, dim = data.draw(SMALL), data.draw(SMALL)
        path = data.draw(st.sampled_from(["closed_form", "lifted"]))
        self.check_int(lambda v: gpe.GrapeABias(v, head_dim=dim), data.draw(INTS), "GrapeABias")
        self.check_int(lambda v: gpe.GrapeABias(heads, head_dim=v), data.draw(INTS),
                       "GrapeABias head_dim")
        bias = gpe.GrapeABias(heads, head_dim=dim, path=path)
        self._bias_case(data, bias, {"grad": heads})
        n = data.draw(st.integers(0, 3))
        (x,) = rng_arrays(data, (n, dim))
        self.check_variants(data, lambda x, p: bias.lift(0, p, x), floats={"x": x},
                            positions={"p": positions(data, n)})
        (g,) = rng_arrays(data, (3, heads))
        gated = gpe.GrapeABias(gate_logits=g, head_dim=dim, path=path)
        gated._positions_hi = 2
        self._bias_case(data, gated, {"grad": (3, heads)})
        self.check_variants(data, lambda g: gated.logit_gradient(g), floats={"g": g}, f32=False)
        self.assertIsInstance(bias, gpe.AdditiveBias)


# ---- Attention ---------------------------------------------------------------------------


class AttentionTest(Case):
    @given(st.data())
    def test_attention(self, data):
        b, sq, sk = data.draw(SMALL), data.draw(st.integers(1, 3)), data.draw(st.integers(1, 3))
        hkv, groups, d = data.draw(st.integers(1, 2)), data.draw(st.integers(1, 2)), \
            data.draw(EVEN)
        q, k, v, do = rng_arrays(data, (b, sq, hkv * groups, d), (b, sk, hkv, d),
                                 (b, sk, hkv, d), (b, sq, hkv * groups, d))
        causal = data.draw(st.booleans())
        rope = data.draw(st.sampled_from([0, d]))
        alibi = data.draw(st.sampled_from([None, "causal"]))
        kw = dict(causal=causal, rope_dim=rope, alibi=alibi)
        qp, kp = positions(data, sq, 0, 20), positions(data, sk, 0, 20)
        # float64 is the exact reference; float32 (the kernels) must agree to F32_RTOL.
        self.check_variants(data, lambda q, k, v: gpe.attention(q, k, v, **kw),
                            floats={"q": q, "k": k, "v": v}, rtol=1e-10)
        self.check_variants(data, lambda q, k, v, qp, kp: gpe.attention(
            q, k, v, q_positions=qp, k_positions=kp, **kw),
            floats={"q": q, "k": k, "v": v}, positions={"qp": qp, "kp": kp}, rtol=1e-10)
        self.check_variants(data, lambda q, k, v, do: gpe.attention_backward(q, k, v, do, **kw),
                            floats={"q": q, "k": k, "v": v, "do": do}, rtol=1e-10)
        self.check_out(data, lambda x, out: gpe.attention(x, k, v, out=out, **kw), "q", q)
        self.check_int(lambda t: gpe.attention(q, k, v, threads=t), data.draw(INTS), "threads")
        self.check_int(lambda r: gpe.attention(q, k, v, rope_dim=r), data.draw(INTS), "rope_dim")
        bad = data.draw(st.sampled_from([None, "q", 3, [1.0], object(), np.ones(3)]))
        arg = data.draw(st.sampled_from(["q", "k", "v"]))
        args = {"q": q, "k": k, "v": v}
        args[arg] = bad
        r = outcome(lambda: gpe.attention(**args))
        self.assertIsInstance(r, Refused)
        r = outcome(lambda: gpe.attention(q, k, v, bias=data.draw(
            st.sampled_from(["alibi", 3, object()]))))
        self.assertIsInstance(r, Refused)

    @given(st.data())
    def test_merge_attention(self, data):
        parts, rows, d = data.draw(st.integers(1, 3)), data.draw(st.integers(1, 4)), \
            data.draw(SMALL)
        arrays = rng_arrays(data, *[(rows, d) for _ in range(parts)] + [(rows,)] * parts)
        os_, ls = arrays[:parts], arrays[parts:]
        floats = {"o%d" % i: o for i, o in enumerate(os_)}
        floats.update({"l%d" % i: l for i, l in enumerate(ls)})
        self.check_variants(data, lambda **a: gpe.merge_attention(
            [a["o%d" % i] for i in range(parts)], [a["l%d" % i] for i in range(parts)]),
            floats=floats, f32=False)


# ---- Coordinate encoders and analysis ----------------------------------------------------


class CoordinateTest(Case):
    def _encoder_case(self, data, enc):
        d, f = enc.dims
        n = data.draw(st.integers(0, 4))
        pts, g = rng_arrays(data, (n, d), (n, f))
        pts = pts + 2.0  # away from the origin (spherical harmonics need non-zero points)
        self.check_variants(data, lambda pts: enc.encode(pts), floats={"pts": pts}, f32=False)
        self.check_variants(data, lambda pts, g: enc.backward(pts, g), floats={"pts": pts, "g": g},
                            f32=False)
        self.assertIsInstance(enc, gpe.CoordinateEncoder)

    @given(st.data())
    def test_encoders(self, data):
        kind = data.draw(st.sampled_from(["fourier", "from_frequencies", "bessel", "bessel_terms",
                                          "shifted", "harmonics"]))
        if kind == "fourier":
            fk = data.draw(st.sampled_from(["gaussian", "linear", "log_linear", "nerf", "txt"]))
            self.check_int(lambda v: gpe.FourierFeatures(fk, 2, v), data.draw(INTS), "nfreq")
            self.check_int(lambda v: gpe.FourierFeatures(fk, v, 3), data.draw(INTS), "dim")
            enc = outcome(lambda: gpe.FourierFeatures(fk, 2, 3, seed=data.draw(
                st.integers(0, 2**64 - 1))))
            self.check_int(lambda v: gpe.FourierFeatures("gaussian", 2, 3, seed=v),
                           data.draw(st.sampled_from([2**64, -1])), "seed", unsigned=True)
        elif kind == "from_frequencies":
            (fr,) = rng_arrays(data, (3, 2))
            self.check_variants(data, lambda fr: gpe.FourierFeatures.from_frequencies(fr)
                                .angular_frequencies, floats={"fr": fr}, f32=False)
            enc = gpe.FourierFeatures.from_frequencies(fr)
        elif kind == "bessel":
            self.check_int(lambda v: gpe.So2Bessel(num_terms=v), data.draw(INTS), "num_terms")
            self.check_int(lambda v: gpe.So2Bessel(max_k=v), data.draw(INTS), "max_k")
            enc = gpe.So2Bessel(num_terms=4, max_scale=3.0, seed=1)
            self.assertEqual(len(enc.terms), 3)
        elif kind == "bessel_terms":
            orders = np.array([0, 1, 2])
            self.check_variants(data, lambda o, w, c: gpe.So2Bessel(terms=(o, c, w)).terms,
                                floats={"c": np.array([1.0, 2.0, 3.0])},
                                positions={"o": orders, "w": orders}, f32=False)
            enc = gpe.So2Bessel(terms=(orders, [1.0, 2.0, 3.0], orders))
        elif kind == "shifted":
            ns = data.draw(INTS)
            self.check_int(lambda v: gpe.ShiftedEncoder([{"kind": "gaussian", "num_shifts": v,
                                                          "width": 0.1}]), ns, "num_shifts")
            enc = gpe.ShiftedEncoder([{"kind": "triangle", "num_shifts": 3, "width": 0.5}] * 2,
                                     form=data.draw(st.sampled_from(["simple", "complex"])))
        else:
            self.check_int(gpe.SphericalHarmonics, data.draw(INTS), "max_degree")
            enc = gpe.SphericalHarmonics(2)
        if not isinstance(enc, Refused):
            self._encoder_case(data, enc)

    @given(st.data())
    def test_functions(self, data):
        n = data.draw(st.integers(0, 4))
        (x,) = rng_arrays(data, n)
        x = np.abs(x)
        self.check_variants(data, lambda x: gpe.bessel_j(1, x), floats={"x": x}, f32=False)
        self.check_int(lambda v: gpe.bessel_j(v, x), data.draw(INTS), "bessel_j order")
        (f,) = rng_arrays(data, (n + 1, 3))
        self.check_variants(data, lambda f: gpe.embedded_distance_matrix(f), floats={"f": f},
                            f32=False)
        self.check_variants(data, lambda f: gpe.condition_number(f), floats={"f": f}, f32=False)
        self.check_variants(data, lambda f: gpe.stable_rank(f), floats={"f": f}, f32=False)
        emb = data.draw(st.sampled_from(["gaussian", "rectangle", "triangle", "rff"]))
        self.check_int(lambda v: gpe.embedder_stable_rank(emb, 0.1, v), data.draw(INTS),
                       "num_points")
        outcome(lambda: gpe.embedder_distance(emb, data.draw(st.floats(allow_nan=True)), 0.1))
        nodes = data.draw(st.integers(1, 5))
        edges = np.array(data.draw(st.lists(st.tuples(st.integers(0, nodes - 1),
                                                      st.integers(0, nodes - 1)), max_size=6)),
                         np.int64).reshape(-1, 2)
        kind = data.draw(st.sampled_from(["combinatorial", "symmetric"]))
        self.check_variants(data, lambda e: gpe.laplacian_eigenvectors(nodes, e, 1, kind=kind)[0],
                            positions={"e": edges})
        self.check_variants(data, lambda w: gpe.laplacian_eigenvectors(
            nodes, edges, 1, weights=w)[0], floats={"w": np.ones(len(edges))}, f32=False)
        self.check_int(lambda v: gpe.laplacian_eigenvectors(v, edges, 1), data.draw(INTS),
                       "num_nodes")
        self.check_int(lambda v: gpe.laplacian_eigenvectors(nodes, edges, v), data.draw(INTS),
                       "k")


# ---- INR solvers, training, data, metrics, images ------------------------------------------


class InrTest(Case):
    @given(st.data())
    def test_separable_and_blended(self, data):
        ny, nx, ky, kx = [data.draw(st.integers(1, 4)) for _ in range(4)]
        py, px, img, w = rng_arrays(data, (ny, ky), (nx, kx), (ny, nx), (ky, kx))
        self.check_variants(data, lambda c: gpe.shifted_basis(c, "gaussian", 3, 0.2),
                            floats={"c": px[:, 0]}, f32=False)
        self.check_int(lambda v: gpe.shifted_basis([0.5], "gaussian", v, 0.2), data.draw(INTS),
                       "num_shifts")
        self.check_variants(data, lambda py, px, img: gpe.fit_separable_2d(py, px, img, lam=0.1),
                            floats={"py": py, "px": px, "img": img}, f32=False, rtol=1e-9)
        self.check_variants(data, lambda py, px, w: gpe.predict_separable_2d(py, px, w),
                            floats={"py": py, "px": px, "w": w}, f32=False)
        p0, vol, w3 = rng_arrays(data, (2, 2), (2, ny, nx), (2, ky, kx))
        self.check_variants(data, lambda p0, vol: gpe.fit_separable_3d((p0, py, px), vol, lam=0.1),
                            floats={"p0": p0, "vol": vol}, f32=False, rtol=1e-9)
        self.check_variants(data, lambda w3: gpe.predict_separable_3d((p0, py, px), w3),
                            floats={"w3": w3}, f32=False)
        ex = gpe.ShiftedEncoder([{"kind": "gaussian", "num_shifts": 3, "width": 0.3}])
        grid = np.linspace(0, 1, 4)
        pts, vals = rng_arrays(data, (5, 2), 5)
        pts = np.abs(pts) % 1.0
        self.check_variants(data, lambda pts, vals: gpe.fit_blended_2d(
            ex, ex, grid, grid, pts, vals, max_iterations=20)[0],
            floats={"pts": pts, "vals": vals}, f32=False, rtol=1e-8)
        # A non-finite W once aborted the process here (inr/blended.cc dereferenced a
        # refused StatusOr); it is drawn like every other variant.
        self.check_variants(data, lambda pts, w: gpe.predict_blended_2d(ex, ex, grid, grid, pts, w),
                            floats={"pts": pts, "w": np.ones((3, 3))}, f32=False)

    @given(st.data())
    def test_mlp(self, data):
        n, din, dout = data.draw(st.integers(1, 4)), data.draw(SMALL), data.draw(SMALL)
        feat, targ = rng_arrays(data, (n, din), (n, dout))
        self.check_int(lambda v: gpe.mlp_num_parameters(v, 1, 4, 1), data.draw(INTS), "input_dim")
        self.check_int(lambda v: gpe.mlp_init(2, 1, 4, 1, seed=v), data.draw(INTS), "seed",
                       unsigned=True)
        self.check_int(lambda v: gpe.mlp_num_evaluations(v), data.draw(INTS), "steps")
        kw = dict(hidden_width=4, num_hidden_layers=1, steps=3)
        self.check_variants(data, lambda f, t: gpe.mlp_fit(f, t, **kw).weights,
                            floats={"f": feat, "t": targ}, f32=False)
        self.check_variants(data, lambda f, t, vf, vt: gpe.mlp_fit(
            f, t, validation=(vf, vt), report_every=1, **kw).validation_loss,
            floats={"f": feat, "t": targ, "vf": feat, "vt": targ}, f32=False)
        params = gpe.mlp_init(din, dout, 4, 1, dtype=np.float64)
        self.check_variants(data, lambda p, f: gpe.mlp_predict(p, f, dout, 4, 1),
                            floats={"p": params, "f": feat}, f32=False)
        mlp = gpe.Mlp(din, dout, 4, 1, dtype=np.float64)
        self.check_variants(data, lambda f: mlp.predict(f), floats={"f": feat}, f32=False)
        self.assertEqual(mlp.weight(0).shape, (din, 4))
        # Layers outside 0..num_hidden_layers raise IndexError (documented): not drawn.
        self.assertEqual(mlp.bias(1).shape, (dout,))
        r = outcome(lambda: mlp.fit(feat, targ, steps=2))
        self.assertNotIsInstance(r, Refused)
        self.assertTrue(issubclass(gpe.Fit, tuple) and issubclass(gpe.ValidatedFit, tuple))

    @given(st.data())
    def test_linear_adam(self, data):
        n, f, c = data.draw(st.integers(1, 4)), data.draw(SMALL), data.draw(SMALL)
        feat, targ, py, px, img = rng_arrays(data, (n, f), (n, c), (3, 2), (2, 2), (3, 2))
        self.check_variants(data, lambda f, t: gpe.fit_dense_adam(f, t, steps=3).weights,
                            floats={"f": feat, "t": targ}, f32=False)
        self.check_variants(data, lambda py, px, img: gpe.fit_separable_adam_2d(
            py, px, img, steps=3).weights, floats={"py": py, "px": px, "img": img}, f32=False)
        self.check_int(lambda v: gpe.fit_dense_adam(feat, targ, steps=v), data.draw(INTS),
                       "steps")

    @given(st.data())
    def test_data_and_metrics(self, data):
        task = data.draw(st.sampled_from(["radial", "spiral"]))
        self.check_int(lambda v: gpe.synthetic_image(task, v), data.draw(INTS), "n")
        self.check_int(lambda v: gpe.synthetic_vector_field(task, v), data.draw(INTS), "n")
        self.check_int(gpe.grid_coordinates, data.draw(INTS), "n")
        self.check_int(lambda v: gpe.random_split(v), data.draw(INTS), "num_points")
        self.check_int(lambda v: gpe.random_split(10, seed=v), data.draw(INTS), "seed",
                       unsigned=True)
        self.check_int(lambda v: gpe.regular_grid_split(v, 4), data.draw(INTS), "rows")
        a, b = rng_arrays(data, (3, 4), (3, 4))
        self.check_variants(data, lambda a, b: gpe.mse(a, b), floats={"a": a, "b": b}, f32=False)
        self.check_variants(data, lambda a, b: gpe.psnr(a, b), floats={"a": a, "b": b},
                            f32=False)

    @given(st.data())
    def test_images(self, data):
        (img,) = rng_arrays(data, (3, 4, 3))
        img = np.abs(img) % 1.0
        with tempfile.TemporaryDirectory() as tmp:
            png = os.path.join(tmp, "a.png")
            self.check_variants(data, lambda img: (gpe.image_write_png(png, img),
                                                   gpe.image_read(png))[1],
                                floats={"img": img}, f32=False)
            jpg = os.path.join(tmp, "a.jpg")
            self.check_int(lambda q: gpe.image_write_jpeg(jpg, img, quality=q), data.draw(INTS),
                           "quality")
            r = outcome(lambda: gpe.image_read(data.draw(st.sampled_from(
                [os.path.join(tmp, "missing.png"), tmp, png]))))
            self.assertIsInstance(r, (np.ndarray, Refused))


# ---- The rest: thread pool, version, errors ------------------------------------------------


class MiscTest(Case):
    @given(st.data())
    def test_thread_pool(self, data):
        try:
            self.check_int(lambda v: gpe.set_thread_pool(lambda n, run: [run(i) for i in
                                                                         range(n)], v),
                           data.draw(INTS), "num_threads")
            self.assertGreaterEqual(gpe.thread_pool_num_threads(), 1)
        finally:
            gpe.set_thread_pool(None)

    def test_version(self):
        self.assertEqual(len(gpe.version()), 3)
        self.assertEqual(gpe.version_string().count("."), 2)
        self.assertTrue(issubclass(gpe.GpeError, RuntimeError))


class ApiCoverageTest(unittest.TestCase):
    def test_every_public_name_has_a_case(self):
        """Every name in gpe.__all__ appears in this file outside this test: a new public
        function without a property case fails here."""
        with open(os.path.abspath(__file__)) as f:
            text = f.read()
        text = text[:text.index("class ApiCoverageTest")]
        missing = [n for n in gpe.__all__ if "gpe.%s" % n not in text]
        self.assertEqual(missing, [], "public names without a property case")


if __name__ == "__main__":
    faulthandler.enable()
    print("hypothesis %s, %d examples per test" % (hypothesis.__version__, MAX_EXAMPLES))
    unittest.main()
