"""MODULE.bazel's module version is the C ABI's version (c_api/include/gpe/common.h's
GPE_VERSION_MAJOR / _MINOR / _PATCH): a release bumps both or the test fails.

Usage (Bazel passes them): module_version_test.py MODULE.bazel common.h
"""
import re
import sys
import unittest


def module_version(text):
    """The version argument of MODULE.bazel's module(...) call."""
    m = re.search(r"module\(\s*[^)]*?version\s*=\s*\"([^\"]+)\"", text, re.S)
    if m is None:
        raise ValueError("MODULE.bazel has no module(version = ...)")
    return m.group(1)


def abi_version(text):
    parts = []
    for part in ("MAJOR", "MINOR", "PATCH"):
        m = re.search(r"^#define GPE_VERSION_%s (\d+)" % part, text, re.M)
        if m is None:
            raise ValueError("common.h has no GPE_VERSION_%s" % part)
        parts.append(m.group(1))
    return ".".join(parts)


class ModuleVersionTest(unittest.TestCase):
    def test_module_version_is_the_abi_version(self):
        with open(sys.argv[1]) as f:
            module = module_version(f.read())
        with open(sys.argv[2]) as f:
            abi = abi_version(f.read())
        self.assertEqual(module, abi, "MODULE.bazel says %s but gpe/common.h says %s" % (module, abi))

    def test_parsers_read_what_they_should(self):
        self.assertEqual(module_version('module(\n    name = "x",\n    version = "1.2.3",\n)'), "1.2.3")
        self.assertEqual(abi_version("#define GPE_VERSION_MAJOR 0\n#define GPE_VERSION_MINOR 10\n"
                                     "#define GPE_VERSION_PATCH 2\n"), "0.10.2")
        with self.assertRaises(ValueError):
            module_version('bazel_dep(name = "x", version = "1.0")')


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1])
