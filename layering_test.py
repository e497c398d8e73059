"""The layering of the real tree (layering.py), and the checker itself on small fake trees:
each rule it enforces is shown to fail on a violation and to pass without one."""
import os
import re
import sys
import tempfile
import textwrap
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import layering  # noqa: E402


def workspace_root():
    """The source tree: argv[1] is the WORKSPACE file (a runfiles link under Bazel)."""
    if len(sys.argv) > 1 and os.path.exists(sys.argv[1]):
        return os.path.dirname(os.path.realpath(sys.argv[1]))
    return os.path.dirname(os.path.realpath(__file__))


class FakeTree:
    """A workspace in a temporary directory: write(path, text) adds a file."""

    def __init__(self, test):
        self.dir = tempfile.TemporaryDirectory()
        test.addCleanup(self.dir.cleanup)
        self.root = self.dir.name
        self.write("WORKSPACE", "")

    def write(self, path, text):
        full = os.path.join(self.root, path)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "w", encoding="utf-8") as f:
            f.write(textwrap.dedent(text))

    def violations(self):
        return [str(v) for v in layering.check_layering(self.root)
                + layering.check_python_cycles(self.root)]


def clean_tree(test):
    """A small tree that keeps every rule: group < encodings < attention, inr < c_api <
    bindings, tools, examples, and an acyclic gpe package."""
    t = FakeTree(test)
    t.write("build_defs/BUILD", 'exports_files(["copts.bzl"])\n')
    t.write("build_defs/copts.bzl",
            'load("@bazel_skylib//lib:paths.bzl", "paths")\nGPE_COPTS = []\n')
    t.write("measure/BUILD", 'cc_library(name = "timing", hdrs = ["timing.h"])\n')
    t.write("group/BUILD", """\
        load("//build_defs:copts.bzl", "GPE_COPTS")
        cc_library(name = "so", srcs = ["so.cc"], deps = ["@eigen", ":angle"])
        cc_library(name = "angle", hdrs = ["angle.h"],
                   visibility = ["//encodings:__subpackages__", "//attention:__pkg__"])
        """)
    t.write("group/so.cc",
            '#include "group/angle.h"\n#include <vector>\n#include "absl/status/status.h"\n')
    t.write("encodings/sequence/BUILD", """\
        DEPS = ["//group:so", "//measure:timing"]
        cc_library(name = "rope", srcs = ["rope.cc"], deps = DEPS)
        """)
    t.write("encodings/sequence/rope.cc", '#include "group/so.h"\n')
    t.write("encodings/sequence/cuda/BUILD",
            'cc_library(name = "k", deps = ["//encodings/sequence:rope"])\n')
    t.write("encodings/coordinate/BUILD", 'cc_library(name = "ff", deps = ["//group:so"])\n')
    t.write("encodings/analysis/BUILD",
            'cc_library(name = "sr", deps = ["//encodings/coordinate:ff"])\n')
    t.write("attention/BUILD", 'cc_library(name = "d", deps = ["//encodings/sequence:rope"])\n')
    t.write("attention/cuda/BUILD",
            'cc_library(name = "c", deps = ["//attention:d", "//encodings/sequence/cuda:k"])\n')
    t.write("attention/cuda/k.cu",
            '#include "attention/descriptor.h"\n#include "encodings/sequence/cuda/k.cuh"\n')
    t.write("inr/BUILD", 'cc_library(name = "mlp", deps = ["//encodings/coordinate:ff"])\n')
    t.write("c_api/BUILD", """\
        cc_library(name = "impl", deps = ["//attention:d", "//inr:mlp"])
        cc_binary(name = "libgpe.so", deps = [":impl"])
        exports_files(["include/gpe/gpe.h"], visibility = ["//bindings:__subpackages__"])
        """)
    t.write("c_api/include/gpe/gpe.h", "#include <dlpack/dlpack.h>\n")
    t.write("c_api/attention.cc", '#include "gpe/gpe.h"\n#include "attention/descriptor.h"\n')
    t.write("bindings/BUILD",
            'py_library(name = "header_model", data = ["//c_api:include/gpe/gpe.h"])\n')
    t.write("bindings/python/BUILD", """\
        py_library(name = "gpe", srcs = glob(["gpe/*.py"]), data = ["//c_api:libgpe.so"])
        py_test(name = "check", srcs = ["check.py"], deps = ["//bindings:header_model"],
                args = ["$(location //c_api:include/gpe/gpe.h)"])
        """)
    t.write("bindings/python/gpe/__init__.py", "from gpe.a import f\nfrom gpe import b\n")
    t.write("bindings/python/gpe/a.py",
            "from . import _core\n\ndef f():\n    from gpe.b import g\n")
    t.write("bindings/python/gpe/b.py", "import gpe._core as c\nfrom typing import TYPE_CHECKING\n"
            "if TYPE_CHECKING:\n    from gpe.a import f\n")
    t.write("bindings/python/gpe/_core.py", "import ctypes\n")
    t.write("tools/BUILD", 'cc_binary(name = "gpe", deps = ["//c_api:impl", "//measure:timing"])\n')
    t.write("tools/cli.cc", '#include "gpe/gpe.h"\n#include "inr/mlp.h"\n')
    t.write("examples/demo/BUILD", 'py_binary(name = "demo", deps = ["//bindings/python:gpe"])\n')
    t.write(".bazelignore", "examples/consumer\n")
    t.write("examples/consumer/BUILD", 'cc_binary(name = "x", deps = ["//attention:d"])\n')
    t.write(".gitignore", "/bindings/rust/target/\n")
    t.write("bindings/rust/target/debug/x.h", '#include "attention/descriptor.h"\n')
    return t


class RulesTable(unittest.TestCase):
    def test_uses_point_down_or_to_a_listed_peer_without_cycles(self):
        rank = {r.area: layering.LAYERS.index(r.layer) for r in layering.RULES}
        graph = {}
        for r in layering.RULES:
            for u in r.uses or ():
                self.assertIn(u, rank, "%s uses unknown area %s" % (r.area, u))
                self.assertLessEqual(rank[u], rank[r.area], "%s uses %s above it" % (r.area, u))
                graph.setdefault(r.area, {})[u] = 1
        self.assertEqual(layering.cycles(graph), [])

    def test_attention_and_inr_never_see_each_other(self):
        by = {r.area: r for r in layering.RULES}
        self.assertNotIn("inr", by["attention"].uses)
        self.assertNotIn("attention", by["inr"].uses)
        for b in ("bindings/python", "bindings/rust", "bindings/julia"):
            others = {"bindings/python", "bindings/rust", "bindings/julia"} - {b}
            self.assertFalse(others & set(by[b].uses))
            self.assertNotIn("tools", by[b].uses)
        self.assertFalse({"bindings", "bindings/python", "examples"} & set(by["tools"].uses))

    def test_areas(self):
        self.assertEqual(layering.area_of("attention/cuda"), "attention")
        self.assertEqual(layering.area_of("encodings/sequence/cuda"), "encodings/sequence")
        self.assertEqual(layering.area_of("bindings/python"), "bindings/python")
        self.assertEqual(layering.area_of(""), "")
        self.assertIsNone(layering.area_of("encodings"))  # a directory of areas, no area
        self.assertIsNone(layering.area_of("newdir/x"))

    def test_labels(self):
        self.assertEqual(layering.label_package("//group:so", "x"), "group")
        self.assertEqual(layering.label_package("//group", "x"), "group")
        self.assertEqual(layering.label_package(":so", "inr"), "inr")
        self.assertEqual(layering.label_package("@eigen", "inr"), None)  # no //: not a label
        self.assertEqual(layering.label_package("@eigen//:eigen", "inr"), "@")
        self.assertEqual(layering.label_package("@//attention:d", "inr"), "attention")
        self.assertIsNone(layering.label_package("so.cc", "inr"))


class FakeTrees(unittest.TestCase):
    def test_clean_tree_passes(self):
        self.assertEqual(clean_tree(self).violations(), [])

    def assert_one(self, tree, *parts):
        v = tree.violations()
        self.assertEqual(len(v), 1, v)
        for p in parts:
            self.assertIn(p, v[0])

    def test_dep_upward(self):
        t = clean_tree(self)
        t.write("group/BUILD", 'cc_library(name = "so", deps = ["//encodings/sequence:rope"])\n')
        self.assert_one(t, "group/BUILD:1",
                        "group -> encodings/sequence (//encodings/sequence:rope)")

    def test_data_and_location_upward(self):
        t = clean_tree(self)
        t.write("measure/BUILD",
                'sh_test(name = "t", srcs = ["t.sh"], args = ["$(rootpath //c_api:libgpe.so)"])\n')
        self.assert_one(t, "measure -> c_api")

    def test_dep_through_a_variable(self):
        t = clean_tree(self)
        t.write("encodings/sequence/BUILD",
                'DEPS = ["//attention:d"]\ncc_library(name = "r", deps = DEPS)\n')
        self.assert_one(t, "encodings/sequence -> attention")

    def test_select_values_are_deps_and_its_keys_are_not(self):
        t = clean_tree(self)
        t.write("group/BUILD", """\
            cc_library(name = "so", deps = select({
                "//conditions:default": ["//group:angle"],
                "@platforms//os:linux": ["//inr:mlp"],
            }))
            """)
        self.assert_one(t, "group/BUILD:3", "group -> inr (//inr:mlp)")

    def test_load_upward(self):
        t = clean_tree(self)
        t.write("build_defs/copts.bzl", 'load("//tools:defs.bzl", "X")\n')
        self.assert_one(t, "build_defs/copts.bzl:1", "build_defs -> tools")

    def test_include_upward(self):
        t = clean_tree(self)
        t.write("group/so.cc", '#include "encodings/sequence/rope.h"\n')
        self.assert_one(t, "group/so.cc:1", '#include "encodings/sequence/rope.h"')

    def test_attention_and_inr(self):
        t = clean_tree(self)
        t.write("inr/x.cc", '\n#include "attention/descriptor.h"\n')
        self.assert_one(t, "inr/x.cc:2", "inr -> attention")
        t = clean_tree(self)
        t.write("attention/cuda/BUILD", 'cc_library(name = "c", deps = ["//inr:mlp"])\n')
        self.assert_one(t, "attention -> inr")

    def test_encodings_peers(self):
        t = clean_tree(self)
        t.write("encodings/coordinate/BUILD",
                'cc_library(name = "ff", deps = ["//encodings/analysis:sr"])\n')
        self.assert_one(t, "encodings/coordinate -> encodings/analysis")
        t = clean_tree(self)
        t.write("encodings/sequence/x.h", '#include "encodings/coordinate/ff.h"\n')
        self.assert_one(t, "encodings/sequence -> encodings/coordinate")

    def test_public_header_from_below(self):
        t = clean_tree(self)
        t.write("attention/x.h", '#include <gpe/gpe.h>\n')
        self.assert_one(t, "attention -> c_api")

    def test_bindings_see_only_c_api(self):
        t = clean_tree(self)
        t.write("bindings/rust/BUILD", 'sh_test(name = "t", data = ["//attention:d"])\n')
        self.assert_one(t, "bindings/rust -> attention")
        t = clean_tree(self)
        t.write("bindings/julia/BUILD", 'sh_test(name = "t", data = ["//bindings/python:gpe"])\n')
        self.assert_one(t, "bindings/julia -> bindings/python")
        t = clean_tree(self)
        t.write("tools/BUILD", 'py_binary(name = "t", deps = ["//bindings/python:gpe"])\n')
        self.assert_one(t, "tools -> bindings/python")
        t = clean_tree(self)
        t.write("c_api/BUILD", 'cc_library(name = "impl", data = ["//bindings/python:gpe"])\n')
        self.assert_one(t, "c_api -> bindings/python")

    def test_unknown_area(self):
        t = clean_tree(self)
        t.write("newdir/BUILD", 'cc_library(name = "x")\n')
        self.assert_one(t, "newdir is in no area")
        t = clean_tree(self)
        t.write("tools/BUILD", 'cc_library(name = "x", deps = ["//newdir:x"])\n')
        self.assert_one(t, "names //newdir:x, which is in no area")

    def test_import_cycle(self):
        t = clean_tree(self)
        t.write("bindings/python/gpe/_core.py", "from gpe import a\n")
        self.assert_one(t, "import cycle: gpe._core", "-> gpe.a", "-> gpe._core")

    def test_import_cycles_of_every_form(self):
        forms = {
            "import gpe.a": "gpe.a", "import gpe.a as x": "gpe.a", "from gpe import a": "gpe.a",
            "from gpe.a import f": "gpe.a", "from . import a": "gpe.a", "from .a import f": "gpe.a",
            "def lazy():\n    from gpe.a import f": "gpe.a",
            "from gpe import f": "gpe",  # a name of __init__, which imports gpe.a
        }
        for stmt, target in forms.items():
            with self.subTest(stmt=stmt):
                t = clean_tree(self)
                t.write("bindings/python/gpe/_core.py", stmt + "\n")
                v = t.violations()
                self.assertEqual(len(v), 1, v)
                self.assertRegex(v[0], r"gpe\._core \(bindings/python/gpe/_core\.py:\d\) -> %s( |$)"
                                 % re.escape(target))

    def test_the_original_torch_cycle(self):
        """gpe.torch re-exporting gpe.torch_sequence, which reached into gpe.torch."""
        t = clean_tree(self)
        t.write("bindings/python/gpe/torch.py", "def _register(o):\n    return 0\n\n"
                "from gpe.torch_sequence import bias_tile  # noqa: E402\n")
        t.write("bindings/python/gpe/torch_sequence.py", "import gpe.torch as _gt\n")
        self.assert_one(t, "import cycle: gpe.torch (bindings/python/gpe/torch.py:4) -> "
                        "gpe.torch_sequence (bindings/python/gpe/torch_sequence.py:1) -> gpe.torch")


class RealTree(unittest.TestCase):
    def test_layering(self):
        root = workspace_root()
        self.assertTrue(os.path.isdir(os.path.join(root, "c_api")), root)
        v = layering.check_layering(root)
        print("layering of %s: %d violations" % (root, len(v)))
        self.assertEqual([str(x) for x in v], [], "dependencies against layering.py's RULES")

    def test_python_imports_acyclic(self):
        root = workspace_root()
        graph, _ = layering.import_graph(os.path.join(root, "bindings/python/gpe"))
        self.assertIn("gpe.torch", graph)  # the package was read
        v = layering.check_python_cycles(root)
        self.assertEqual([str(x) for x in v], [], "import cycles in the Python package")


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1])
