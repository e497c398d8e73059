"""Tests of the gpe package's type hints (PEP 561: gpe/py.typed): every public function,
method and property is annotated, and mypy accepts typed use of the package, and the
package itself, while rejecting wrongly typed use. Run by `bazel test`."""

import importlib
import importlib.util
import inspect
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import unittest

import sanitizer_preload
from gpe import _ffi

sanitizer_preload.reexec_if_needed(next((str(p) for p in _ffi._candidates() if p.is_file()), None))

import gpe  # noqa: E402

# The modules whose public names are the API: the package and every module without a
# leading underscore. The torch ones only where torch is installed.
NUMPY_MODULES = ("gpe", "gpe.attention", "gpe.bias", "gpe.coordinate", "gpe.inr",
                 "gpe.inr_solvers", "gpe.rope", "gpe.sequence", "gpe.so", "gpe.thread_pool")
TORCH_MODULES = ("gpe.torch", "gpe.torch_sequence", "gpe.torch_rotary", "gpe.torch_coordinate",
                 "gpe.context_parallel")
# Dunder methods that are part of a class's interface (the rest are Python's machinery).
DUNDERS = ("__init__", "__call__", "__enter__", "__exit__")
# The receiver of a method, annotated by Python itself.
RECEIVERS = ("self", "cls")


def has_torch():
    return importlib.util.find_spec("torch") is not None


def unannotated(fn, where):
    """['where(param)' for each parameter without an annotation, 'where -> return' when
    the return is unannotated]; self / cls excepted."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):  # a builtin or C function: nothing to annotate
        return []
    missing = ["%s(%s)" % (where, p.name) for i, p in enumerate(sig.parameters.values())
               if p.annotation is inspect.Parameter.empty
               and not (i == 0 and p.name in RECEIVERS)]
    if sig.return_annotation is inspect.Signature.empty:
        missing.append("%s -> return" % where)
    return missing


def class_members(cls):
    """(name, function) of the public methods, static and class methods and property
    getters / setters that gpe's own classes in cls's MRO define."""
    seen = set()
    for klass in cls.__mro__:
        if not klass.__module__.startswith("gpe"):
            continue
        for name, member in vars(klass).items():
            if name in seen or (name.startswith("_") and name not in DUNDERS):
                continue
            seen.add(name)
            if isinstance(member, (staticmethod, classmethod)):
                yield name, member.__func__
            elif isinstance(member, property):
                for accessor in (member.fget, member.fset):
                    if accessor is not None:
                        yield name, accessor
            elif inspect.isfunction(member):
                yield name, member


def public_objects(module):
    """(qualified name, object) of the functions and classes a module makes public: the
    names of its __all__, or else the public names it defines itself."""
    names = getattr(module, "__all__", None)
    if names is None:
        names = [n for n, obj in vars(module).items()
                 if not n.startswith("_") and getattr(obj, "__module__", None) == module.__name__]
    for name in names:
        obj = getattr(module, name)
        if inspect.isclass(obj) or inspect.isfunction(obj):
            yield "%s.%s" % (module.__name__, name), obj


def missing_annotations(modules):
    """Every missing annotation of the modules' public functions and classes."""
    missing, done = [], set()
    for module in modules:
        for where, obj in public_objects(module):
            if id(obj) in done:
                continue
            done.add(id(obj))
            if inspect.isfunction(obj):
                missing += unannotated(obj, where)
                continue
            for name, fn in class_members(obj):
                missing += unannotated(fn, "%s.%s" % (where, name))
    return sorted(set(missing))


class AnnotationCompletenessTest(unittest.TestCase):
    """Proves that no public function, method or property of gpe lacks an annotation
    (parameters and returns), in the NumPy package and, where torch is installed, in
    gpe.torch, its modules and gpe.context_parallel. Reports every gap at once."""

    def test_numpy_api_is_annotated(self):
        modules = [importlib.import_module(m) for m in NUMPY_MODULES]
        missing = missing_annotations(modules)
        self.assertEqual(missing, [], "unannotated in gpe (%d):\n  %s"
                         % (len(missing), "\n  ".join(missing)))

    def test_torch_api_is_annotated(self):
        if not has_torch():
            self.skipTest("torch is not installed: gpe.torch and gpe.context_parallel not "
                          "checked")
        modules = [importlib.import_module(m) for m in TORCH_MODULES]
        missing = missing_annotations(modules)
        self.assertEqual(missing, [], "unannotated in gpe's torch modules (%d):\n  %s"
                         % (len(missing), "\n  ".join(missing)))

    def test_the_check_finds_gaps(self):
        """The checker itself on a synthetic module: it reports an unannotated parameter,
        an unannotated return and an unannotated property, and accepts annotated ones,
        so the two tests above can fail."""
        import types
        module = types.ModuleType("gpe_fake")

        def annotated(x: int, *args: int, **kwargs: str) -> int:
            return x

        def bare(x, y: int = 0):
            return y

        class Thing:
            def __init__(self, n: int) -> None:
                self.n = n

            def method(self, m) -> int:
                return m

            @property
            def size(self):
                return 1

            @classmethod
            def make(cls, n: int) -> "Thing":
                return cls(n)

            def _private(self, anything):
                return anything

        for obj in (annotated, bare, Thing):
            obj.__module__ = "gpe_fake"
            setattr(module, obj.__name__, obj)
        self.assertEqual(missing_annotations([module]),
                         ["gpe_fake.Thing.method(m)", "gpe_fake.Thing.size -> return",
                          "gpe_fake.bare -> return", "gpe_fake.bare(x)"])


# Typed use of the package that mypy must accept: the NumPy API's classes, results and
# string options, and gpe.torch's (torch itself is not followed: see MYPY_CONFIG).
GOOD = """
import concurrent.futures
from typing import Tuple

import numpy as np
import numpy.typing as npt

import gpe
import gpe.torch as gt

r: gpe.Rope = gpe.Rope(64, schedule="yarn", factor=4.0, pairing="interleaved")
x = np.zeros((1, 8, 2, 64), dtype=np.float32)
y: npt.NDArray[np.float32] = r.forward(x, layout="bshd", role="key")
table: gpe.RopeTable = r.table(x, positions=np.arange(8))
y = table.forward(x, out=y)
thetas, factor = r.frequencies()
planes: int = thetas.shape[0]
scale: float = factor
head_dim, rotary_dim, axes = r.shape
o = gpe.attention(x, x, x, causal=True, rope=r, window_size=(3, 0), alibi="causal")
o_and_lse = gpe.attention(x, x, x, return_lse=True)
if isinstance(o_and_lse, tuple):
    merged, lse = gpe.merge_attention([o_and_lse[0]], [o_and_lse[1]])
grads = gpe.attention_backward(x, x, x, x)
with gpe.Alibi(2) as alibi:
    slopes: npt.NDArray[np.float64] = alibi.slopes
    kind: str = alibi.kind
    tile = alibi.fill_tile(0, [0, 1], [0, 1])
grape = gpe.GrapeM(np.ones((1, 4)), np.zeros((1, 4)), 0.5)
gx, ga, gb, gw = grape.backward([0, 1], np.ones((2, 4)), np.ones((2, 4)))
enc = gpe.FourierFeatures("gaussian", 2, 16, scale=10.0)
d, f = enc.dims
feats: npt.NDArray[np.float64] = enc.encode(np.zeros((3, 2)))
w, iterations, rms = gpe.fit_blended_2d(enc, enc, [0.0], [0.0], [[0.0, 0.0]], [0.0])
fit = gpe.fit_dense_adam(np.ones((4, 2)), np.ones(4), steps=3,
                         progress=lambda step, loss: None)
final: float = fit.final_loss
mlp = gpe.Mlp(2, 1, hidden_width=8)
prediction = mlp.predict(np.zeros((3, 2)))
train, validation, test = gpe.random_split(100, seed=1)
version: Tuple[int, int, int] = gpe.version()
executor = concurrent.futures.ThreadPoolExecutor(2)
gpe.set_thread_pool(lambda n, run: list(executor.map(run, range(n))), num_threads=2)
gpe.set_thread_pool()
threads: int = gpe.thread_pool_num_threads()
rope_module = gt.RotaryEmbedding(64, schedule="llama3", factor=8.0, pairing="half")
"""

# Wrongly typed use: each line marked "# error" must be an error under mypy.
BAD = """
import numpy as np

import gpe

r = gpe.Rope("64")  # error: a str for head_dim: int
n: int = gpe.sinusoidal([0, 1], 8)  # error: an ndarray assigned to an int
gpe.Rope(64, schedule="llama4")  # error: not one of the schedules (Literal)
s: str = gpe.version()  # error: a tuple assigned to a str
gpe.attention(np.zeros(3), np.zeros(3), np.zeros(3), alibi="sideways")  # error: Literal
bad_sum = gpe.thread_pool_num_threads() + "x"  # error: int + str
gpe.Alibi(4).fill_tile("head", [0], [0])  # error: a str for head: int
"""

# The checked configuration: the package's own hints, strictly for gpe, not those of
# torch or transformers (an optional, very large dependency whose own stubs vary by
# version; followed or not, gpe's annotations of torch types are checked by name).
MYPY_CONFIG = """
[mypy]
python_version = 3.11
follow_imports = silent
warn_unused_ignores = True

[mypy-torch.*]
follow_imports = skip
ignore_missing_imports = True

[mypy-transformers.*]
follow_imports = skip
ignore_missing_imports = True
"""


class MypyTest(unittest.TestCase):
    """Proves, with mypy, that the package type-checks clean and typed use of its API is
    accepted (GOOD), and that the hints have teeth: every deliberately wrong line of BAD
    is reported, and nothing else."""

    @classmethod
    def setUpClass(cls):
        if importlib.util.find_spec("mypy") is None:
            raise unittest.SkipTest("mypy is not installed (bindings/python/requirements.txt; "
                                    "./bazelw installs it): the type hints are not checked")
        cls.dir = tempfile.mkdtemp(prefix="gpe_typing_test_")
        cls.config = os.path.join(cls.dir, "mypy.ini")
        with open(cls.config, "w") as f:
            f.write(MYPY_CONFIG)
        # The directory holding the gpe package (the source tree or Bazel's runfiles).
        cls.root = os.path.dirname(os.path.dirname(os.path.abspath(gpe.__file__)))

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, ignore_errors=True)

    def mypy(self, name, source, *targets):
        with open(os.path.join(self.dir, name), "w") as f:
            f.write(textwrap.dedent(source))
        env = dict(os.environ, MYPYPATH=self.root)
        # One cache for both runs (the second reuses NumPy's analysed stubs).
        cmd = [sys.executable, "-m", "mypy", "--config-file", self.config, "--cache-dir",
               os.path.join(self.dir, "cache"), "--no-color-output", "--show-error-codes",
               *targets, name]
        run = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=self.dir,
                             timeout=600)
        return run.returncode, run.stdout + run.stderr

    def test_package_and_typed_use_check_clean(self):
        # The package's directory as a target: its modules are checked, not only followed.
        code, out = self.mypy("good.py", GOOD, os.path.join(self.root, "gpe"))
        self.assertEqual(code, 0, "mypy rejected gpe or typed use of it:\n" + out)

    def test_wrongly_typed_use_is_rejected(self):
        code, out = self.mypy("bad.py", BAD)
        self.assertNotEqual(code, 0, "mypy accepted wrongly typed use of gpe:\n" + out)
        lines = textwrap.dedent(BAD).splitlines()
        expected = {i + 1 for i, line in enumerate(lines) if "# error" in line}
        reported = set()
        for line in out.splitlines():
            head, _, rest = line.partition(": error:")
            if rest and head.startswith("bad.py:"):  # mypy names it as given, in its cwd
                reported.add(int(head[len("bad.py:"):]))
        self.assertEqual(reported, expected, "lines of bad.py mypy reported vs. marked:\n"
                         + out)


if __name__ == "__main__":
    unittest.main()
