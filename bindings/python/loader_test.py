"""gpe._ffi.load_library's search order (package directory, GPE_LIBRARY, build tree,
system by soname) with the places monkeypatched: a temporary package directory, fake
runfiles and a fake dlopen, so no install is needed. One test loads the real library
through a symlink in a fake package directory."""

import ctypes
import os
import pathlib
import tempfile
import unittest
from unittest import mock

import sanitizer_preload
from gpe import _ffi

REAL = next((str(p) for p in _ffi._candidates() if p.is_file()), None)
sanitizer_preload.reexec_if_needed(REAL)

import gpe  # noqa: E402


class FakeLoader:
    """Stands in for dlopen: records every name asked for; opens existing files (paths)
    and the bare names in `loadable` (what the system's loader would find)."""

    def __init__(self, loadable):
        self.loadable = set(loadable)
        self.asked = []

    def __call__(self, name):
        self.asked.append(name)
        if name in self.loadable or (os.path.isabs(name) and os.path.isfile(name)):
            return "handle:" + name
        raise OSError("%s: cannot open shared object file" % name)


class LoaderOrderTest(unittest.TestCase):
    def setUp(self):
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        root = pathlib.Path(tmp.name)
        self.pkg = root / "site" / "gpe"
        self.runfiles = root / "runfiles"
        self.env_lib = root / "elsewhere" / "libgpe.so"
        for d in (self.pkg, self.runfiles / "__main__" / "c_api", self.env_lib.parent):
            d.mkdir(parents=True)
        self.build_lib = self.runfiles / "__main__" / "c_api" / "libgpe.so"
        env = {"RUNFILES_DIR": str(self.runfiles)}
        patches = [mock.patch.dict(os.environ, env),
                   mock.patch.object(_ffi, "_package_dir", lambda: self.pkg),
                   mock.patch.object(_ffi, "_declare", lambda lib: lib),
                   mock.patch.object(ctypes.util, "find_library", lambda name: None)]
        for p in patches:
            p.start()
            self.addCleanup(p.stop)
        os.environ.pop("TEST_SRCDIR", None)
        os.environ.pop("GPE_LIBRARY", None)

    def load(self, loadable=()):
        fake = FakeLoader(loadable)
        with mock.patch.object(_ffi, "_open", fake):
            return _ffi.load_library(), fake.asked

    def touch(self, path):
        path.write_bytes(b"")
        return str(path)

    def test_order(self):
        build = self.touch(self.build_lib)
        env = self.touch(self.env_lib)
        os.environ["GPE_LIBRARY"] = env
        pkg = self.touch(self.pkg / "libgpe.so")
        self.assertEqual(self.load(), ("handle:" + pkg, [pkg]))  # the package first
        (self.pkg / "libgpe.so").unlink()
        self.assertEqual(self.load(), ("handle:" + env, [env]))  # then GPE_LIBRARY
        del os.environ["GPE_LIBRARY"]
        self.assertEqual(self.load(), ("handle:" + build, [build]))  # then the build tree
        self.build_lib.unlink()
        # bazel-bin above the (fake) package would come next; there is none here.
        lib, asked = self.load(loadable=[_ffi.SONAME])  # then the system, by soname
        self.assertEqual((lib, asked), ("handle:" + _ffi.SONAME, [_ffi.SONAME]))

    def test_missing_gpe_library_warns_and_searches_on(self):
        build = self.touch(self.build_lib)
        os.environ["GPE_LIBRARY"] = str(self.env_lib)  # no such file
        with self.assertWarnsRegex(RuntimeWarning, "GPE_LIBRARY=.* is not a file"):
            self.assertEqual(self.load()[0], "handle:" + build)

    def test_find_library_same_major_only(self):
        with mock.patch.object(ctypes.util, "find_library", lambda name: "libgpe.so.1"):
            with self.assertRaises(OSError):
                self.load(loadable=["libgpe.so.1"])  # another ABI is never opened
        newer_patch = _ffi.SONAME + ".3"
        with mock.patch.object(ctypes.util, "find_library", lambda name: newer_patch):
            self.assertEqual(self.load(loadable=[newer_patch]),
                             ("handle:" + newer_patch, [_ffi.SONAME, newer_patch]))

    def test_error_lists_every_place(self):
        os.environ["GPE_LIBRARY"] = str(self.env_lib)
        with self.assertWarns(RuntimeWarning):
            with self.assertRaises(OSError) as cm:
                self.load()
        msg = str(cm.exception)
        places = [str(self.pkg / "libgpe.so"), str(self.env_lib), str(self.build_lib),
                  _ffi.SONAME + " on the system's loader path"]
        at = [msg.find(p) for p in places]
        self.assertNotIn(-1, at, msg)
        self.assertEqual(at, sorted(at), "places out of search order:\n" + msg)
        self.assertIn("GPE_LIBRARY: no such file", msg)
        self.assertIn("package directory", msg)


class PackageTest(unittest.TestCase):
    def test_py_typed_ships_with_the_package(self):
        # PEP 561: type checkers read the package's hints only when py.typed is beside
        # it (the py_library's data, so also in Bazel's runfiles).
        self.assertTrue((pathlib.Path(gpe.__file__).parent / "py.typed").is_file())


@unittest.skipIf(REAL is None, "no built libgpe.so to load")
class RealLibraryTest(unittest.TestCase):
    def test_package_directory_symlink_loads(self):
        with tempfile.TemporaryDirectory() as tmp:
            pkg = pathlib.Path(tmp)
            (pkg / "libgpe.so").symlink_to(os.path.realpath(REAL))
            with mock.patch.object(_ffi, "_package_dir", lambda: pkg):
                lib = _ffi.load_library()
            self.assertEqual(lib._name, str(pkg / "libgpe.so"))
            self.assertEqual(lib.gpe_version(), gpe._core.lib().gpe_version())

    def test_soname_is_the_abi_major(self):
        self.assertEqual(_ffi.SONAME, "libgpe.so.%d" % gpe.version()[0])


if __name__ == "__main__":
    unittest.main()
