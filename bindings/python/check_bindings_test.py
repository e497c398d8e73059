"""check_bindings.py (the ctypes drift check) on a small _ffi.py against the fake split
headers of bindings/fake_headers.py: it passes when they agree and fails on each kind of
drift."""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import check_bindings  # noqa: E402
import fake_headers  # noqa: E402
import header_model  # noqa: E402

GOOD = '''
import ctypes


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


Progress = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_double)


class SoOptions(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_uint32), ("pairing", ctypes.c_int32),
                ("lo", ctypes.c_double), ("hi", ctypes.c_double),
                ("thetas", ctypes.POINTER(ctypes.c_double)), ("progress", Progress),
                ("progress_user_data", ctypes.c_void_p)]


def _declare(lib):
    st = ctypes.c_int32
    p = ctypes.c_void_p
    t = ctypes.POINTER(DLTensor)
    sigs = {
        "gpe_version_string": (ctypes.c_char_p, []),
        "gpe_so_create": (st, [ctypes.POINTER(SoOptions), ctypes.POINTER(p)]),
        "gpe_so_destroy": (None, [p]),
        "gpe_so_apply": (st, [p, ctypes.c_int64, t, t]),
    }
    for name, (res, args) in sigs.items():
        fn = getattr(lib, name)
        fn.restype = res
        fn.argtypes = args
    return lib
'''


class PythonDrift(unittest.TestCase):
    def setUp(self):
        self.h = fake_headers.FakeHeaders()
        self.addCleanup(self.h.cleanup)
        self.model = header_model.load(self.h.gpe_h, [self.h.dlpack_h])

    def errors(self, text, undeclared=None):
        path = self.h.write("ffi_%d.py" % id(text), text)
        errors, _, _ = check_bindings.check(check_bindings.load_ffi(path), self.model,
                                            fake_headers.EXPORTED, undeclared or {})
        return errors

    def drift(self, old, new, *expected):
        self.assertIn(old, GOOD)
        errors = self.errors(GOOD.replace(old, new, 1))
        self.assertTrue(errors, "no error for %r -> %r" % (old, new))
        for e in expected:
            self.assertTrue(any(e in x for x in errors), "%r not in %s" % (e, errors))

    def test_agreeing_declarations_pass(self):
        self.assertEqual(self.errors(GOOD), [])

    def test_renamed_field(self):
        self.drift('("pairing", ctypes.c_int32)', '("pairs", ctypes.c_int32)',
                   "Structure SoOptions (gpe.h gpe_so_options): field 1 is pairs; "
                   "gpe.h has pairing")

    def test_swapped_fields(self):
        self.drift('("lo", ctypes.c_double), ("hi", ctypes.c_double)',
                   '("hi", ctypes.c_double), ("lo", ctypes.c_double)', "field 2 is hi")

    def test_field_type(self):
        self.drift('("struct_size", ctypes.c_uint32)', '("struct_size", ctypes.c_uint64)',
                   "field struct_size is c_ulong; gpe.h has uint32_t")

    def test_missing_and_extra_field(self):
        self.drift('("progress_user_data", ctypes.c_void_p)]', "]", "6 fields; gpe.h has 7")
        self.drift('("progress_user_data", ctypes.c_void_p)',
                   '("progress_user_data", ctypes.c_void_p), ("more", ctypes.c_int32)',
                   "8 fields; gpe.h has 7")

    def test_nested_dlpack_struct(self):
        self.drift('("ndim", ctypes.c_int32)', '("ndim", ctypes.c_int64)',
                   "Structure DLTensor (gpe.h DLTensor): field ndim is c_long; gpe.h has int32_t")
        self.drift('("lanes", ctypes.c_uint16)', '("lanes", ctypes.c_uint8)', "DLDataType")

    def test_callback_signature(self):
        self.drift("ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_double)",
                   "ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int32, ctypes.c_double)",
                   "callback Progress: is c_int; gpe.h has int64_t")
        self.drift('("progress", Progress)', '("progress", ctypes.c_void_p)',
                   "field progress is c_void_p; gpe.h has the callback")

    def test_swapped_argument_type(self):
        self.drift('"gpe_so_apply": (st, [p, ctypes.c_int64, t, t])',
                   '"gpe_so_apply": (st, [p, ctypes.c_int32, t, t])',
                   "sigs['gpe_so_apply']: argument 2 (position) is c_int; gpe.h has int64_t")
        self.drift('"gpe_so_apply": (st, [p, ctypes.c_int64, t, t])',
                   '"gpe_so_apply": (st, [p, ctypes.c_int64, ctypes.POINTER(ctypes.c_double), t])',
                   "argument 3 (x) is POINTER(c_double), whose pointee is c_double; "
                   "gpe.h has the struct DLTensor")

    def test_argument_count(self):
        self.drift('"gpe_so_apply": (st, [p, ctypes.c_int64, t, t])',
                   '"gpe_so_apply": (st, [p, ctypes.c_int64, t])', "3 argument types; gpe.h has 4")

    def test_return_type(self):
        self.drift('"gpe_so_destroy": (None, [p])', '"gpe_so_destroy": (st, [p])',
                   "sigs['gpe_so_destroy']: return type is c_int; gpe.h has void")
        self.drift('"gpe_version_string": (ctypes.c_char_p, [])',
                   '"gpe_version_string": (ctypes.c_void_p, [])', "return type is c_void_p")

    def test_untyped_struct_pointer(self):
        self.drift("(st, [ctypes.POINTER(SoOptions), ctypes.POINTER(p)])",
                   "(st, [p, ctypes.POINTER(p)])",
                   "argument 1 (options) is c_void_p; gpe.h has const gpe_so_options*",
                   "Structure SoOptions is used by no declared function")

    def test_missing_function(self):
        self.drift('        "gpe_so_destroy": (None, [p]),\n', "",
                   "_ffi.py does not declare exported gpe_so_destroy")
        errors = self.errors(GOOD.replace('        "gpe_so_destroy": (None, [p]),\n', ""),
                             {"gpe_so_destroy": "freed by the garbage collector elsewhere"})
        self.assertEqual(errors, [])

    def test_function_not_in_header(self):
        self.drift('"gpe_so_destroy": (None, [p]),',
                   '"gpe_so_destroy": (None, [p]), "gpe_so_free": (None, [p]),',
                   "sigs['gpe_so_free']: no prototype in gpe.h")

    def test_stale_undeclared_entry(self):
        errors = self.errors(GOOD, {"gpe_so_destroy": "why"})
        self.assertEqual(errors, ["UNDECLARED lists gpe_so_destroy, which _ffi.py declares: "
                                  "remove the entry"])

    def test_keyword_field_names(self):
        self.assertEqual(check_bindings.field_name("lambda_"), "lambda")
        self.assertEqual(check_bindings.field_name("rank_"), "rank_")


if __name__ == "__main__":
    unittest.main()
