"""check_bindings.py (the Rust drift check) on a small ffi.rs against the fake split
headers of bindings/fake_headers.py: it passes when they agree and fails on each kind of
drift, in ffi.rs itself or in a module file it declares (ffi/so.rs)."""
import os
import shutil
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import check_bindings  # noqa: E402
import fake_headers  # noqa: E402
import header_model  # noqa: E402

GOOD = '''
//! Declarations of gpe.h.
use std::os::raw::{c_char, c_int, c_void};

pub type gpe_status = i32;

#[repr(C)]
#[derive(Clone, Copy)]
pub struct DLDevice {
    pub device_type: i32,
    pub device_id: c_int,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct DLDataType {
    pub code: u8,
    pub bits: u8,
    pub lanes: u16,
}

#[repr(C)]
pub struct DLTensor {
    pub data: *mut c_void,
    pub device: DLDevice,
    pub ndim: i32,
    pub dtype: DLDataType,
    pub shape: *mut i64,
    pub strides: *mut i64,
    pub byte_offset: u64,
}

#[repr(C)]
pub struct gpe_so_rep {
    _private: [u8; 0],
}

pub type gpe_progress_callback =
    Option<unsafe extern "C" fn(user_data: *mut c_void, step: i64, loss: f64)>;

/// gpe_so_options (GPE_SO_OPTIONS_INIT: init()).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct gpe_so_options {
    pub struct_size: u32,
    pub pairing: i32,
    pub lo: f64,
    pub hi: f64, // the upper end
    pub thetas: *const f64,
    pub progress: gpe_progress_callback,
    pub progress_user_data: *mut c_void,
}

extern "C" {
    pub fn gpe_version_string() -> *const c_char;
    pub fn gpe_so_create(options: *const gpe_so_options, out: *mut *mut gpe_so_rep) -> gpe_status;
    pub fn gpe_so_destroy(rep: *mut gpe_so_rep);
}

extern "C" {
    pub fn gpe_so_apply(
        rep: *const gpe_so_rep,
        position: i64,
        x: *const DLTensor,
        out: *mut DLTensor,
    ) -> gpe_status;
}
'''


class RustDrift(unittest.TestCase):
    def setUp(self):
        self.h = fake_headers.FakeHeaders()
        self.addCleanup(self.h.cleanup)
        self.model = header_model.load(self.h.gpe_h, [self.h.dlpack_h])

    def errors(self, text, undeclared=None):
        errors, _ = check_bindings.check(text, self.model, fake_headers.EXPORTED,
                                         undeclared or {})
        return errors

    def drift(self, old, new, *expected):
        self.assertIn(old, GOOD)
        errors = self.errors(GOOD.replace(old, new, 1))
        self.assertTrue(errors, "no error for %r -> %r" % (old, new))
        for e in expected:
            self.assertTrue(any(e in x for x in errors), "%r not in %s" % (e, errors))

    def test_agreeing_declarations_pass(self):
        self.assertEqual(self.errors(GOOD), [])
        crate = check_bindings.Crate(GOOD)
        self.assertEqual(sorted(crate.functions), fake_headers.EXPORTED)
        self.assertEqual(crate.opaque, {"gpe_so_rep"})
        self.assertEqual(len(crate.structs["gpe_so_options"]), 7)

    def test_renamed_field(self):
        self.drift("pub pairing: i32,", "pub pairs: i32,",
                   "ffi.rs struct gpe_so_options: field 1 is pairs; gpe.h has pairing there")

    def test_swapped_fields(self):
        self.drift("pub lo: f64,\n    pub hi: f64,", "pub hi: f64,\n    pub lo: f64,",
                   "field 2 is hi; gpe.h has lo")

    def test_field_type(self):
        self.drift("pub struct_size: u32,", "pub struct_size: usize,",
                   "field struct_size is usize; gpe.h has uint32_t")
        self.drift("pub thetas: *const f64,", "pub thetas: *const f32,",
                   "field thetas is *const f32, whose pointee is f32; gpe.h has double")

    def test_missing_field(self):
        self.drift("    pub progress_user_data: *mut c_void,\n", "", "6 fields; gpe.h has 7")

    def test_dlpack_struct(self):
        self.drift("pub ndim: i32,", "pub ndim: i64,", "struct DLTensor: field ndim is i64")

    def test_callback(self):
        self.drift("step: i64, loss: f64)>", "step: i32, loss: f64)>",
                   "field progress callback gpe_progress_callback: is i32; gpe.h has int64_t")
        self.drift('Option<unsafe extern "C" fn(user_data: *mut c_void, step: i64, loss: f64)>',
                   'unsafe extern "C" fn(user_data: *mut c_void, step: i64, loss: f64)',
                   "a C function pointer may be NULL")

    def test_swapped_argument_type(self):
        self.drift("        position: i64,\n", "        position: i32,\n",
                   "ffi.rs fn gpe_so_apply: parameter 2 (position) is i32; gpe.h has int64_t")
        self.drift("        x: *const DLTensor,\n", "        x: *const f64,\n",
                   "parameter 3 (x) is *const f64, whose pointee is f64; "
                   "gpe.h has the struct DLTensor")

    def test_constness(self):
        self.drift("rep: *const gpe_so_rep,", "rep: *mut gpe_so_rep,",
                   "parameter 1 (rep) is *mut gpe_so_rep; gpe.h has const gpe_so_rep* (constness)")

    def test_opaque_handle(self):
        self.drift("out: *mut *mut gpe_so_rep", "out: *mut *mut c_void",
                   "parameter 2 (out) is *mut *mut c_void, whose pointee is *mut c_void, whose "
                   "pointee is c_void; gpe.h has the opaque gpe_so_rep")

    def test_argument_count(self):
        self.drift("        position: i64,\n", "", "3 parameters; gpe.h has 4")

    def test_return_type(self):
        self.drift("pub fn gpe_so_destroy(rep: *mut gpe_so_rep);",
                   "pub fn gpe_so_destroy(rep: *mut gpe_so_rep) -> gpe_status;",
                   "ffi.rs fn gpe_so_destroy: return type is i32; gpe.h has void")
        self.drift("out: *mut *mut gpe_so_rep) -> gpe_status;", "out: *mut *mut gpe_so_rep);",
                   "return type is (); gpe.h has int32_t")

    def test_missing_function(self):
        self.drift("    pub fn gpe_so_destroy(rep: *mut gpe_so_rep);\n", "",
                   "ffi.rs does not declare exported gpe_so_destroy")
        errors = self.errors(GOOD.replace("    pub fn gpe_so_destroy(rep: *mut gpe_so_rep);\n", ""),
                             {"gpe_so_destroy": "the crate frees through another path"})
        self.assertEqual(errors, [])

    def test_function_not_in_header(self):
        self.drift("pub fn gpe_so_destroy(rep: *mut gpe_so_rep);",
                   "pub fn gpe_so_destroy(rep: *mut gpe_so_rep);\n"
                   "    pub fn gpe_so_free(rep: *mut gpe_so_rep);",
                   "ffi.rs fn gpe_so_free: no prototype in gpe.h")

    def test_struct_not_in_header(self):
        self.drift("pub struct gpe_so_options {", "pub struct gpe_so_opts {",
                   "ffi.rs struct gpe_so_opts: gpe.h has no struct of that name",
                   "parameter 1 (options) is *const gpe_so_options, whose pointee is "
                   "gpe_so_options, not a #[repr(C)] struct with fields in ffi.rs")

    def test_struct_without_repr_c(self):
        self.drift("#[repr(C)]\n#[derive(Clone, Copy)]\npub struct gpe_so_options",
                   "#[derive(Clone, Copy)]\npub struct gpe_so_options",
                   "is gpe_so_options, not a #[repr(C)] struct with fields in ffi.rs")


# GOOD as a module tree: ffi.rs declares common (ffi/common.rs: DLPack) and so
# (ffi/so.rs: the rest), as src/ffi.rs declares one module per header.
SPLIT_AT = "#[repr(C)]\npub struct gpe_so_rep {"
ROOT = '''
//! Declarations of gpe.h, one module per header.
#![allow(non_camel_case_types)]

mod common;
// mod ghost; (a comment, not a module)
pub(crate) mod so;

pub use common::*;
pub use so::*;
'''
SO_PRELUDE = "//! gpe/so.h.\nuse super::common::*;\nuse std::os::raw::{c_char, c_void};\n"


class RustModuleTree(unittest.TestCase):
    def setUp(self):
        self.h = fake_headers.FakeHeaders()
        self.addCleanup(self.h.cleanup)
        self.model = header_model.load(self.h.gpe_h, [self.h.dlpack_h])
        self.dir = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.dir)
        self.root = os.path.join(self.dir, "src", "ffi.rs")
        i = GOOD.index(SPLIT_AT)
        self.write("ffi.rs", ROOT)
        self.write("ffi/common.rs", GOOD[:i])
        self.write("ffi/so.rs", SO_PRELUDE + GOOD[i:])

    def write(self, name, text):
        path = os.path.join(self.dir, "src", name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)

    def errors(self):
        sources, missing = check_bindings.read_module_tree(self.root)
        errors, _ = check_bindings.check(sources, self.model, fake_headers.EXPORTED, {})
        return missing + errors

    def drift(self, name, old, new, *expected):
        path = os.path.join(self.dir, "src", name)
        with open(path, encoding="utf-8") as f:
            text = f.read()
        self.assertIn(old, text)
        self.write(name, text.replace(old, new, 1))
        errors = self.errors()
        self.assertTrue(errors, "no error for %r -> %r in %s" % (old, new, name))
        for e in expected:
            self.assertTrue(any(e in x for x in errors), "%r not in %s" % (e, errors))

    def test_files_in_declaration_order(self):
        sources, missing = check_bindings.read_module_tree(self.root)
        self.assertEqual(missing, [])
        self.assertEqual([n for n, _ in sources], ["ffi.rs", "ffi/common.rs", "ffi/so.rs"])

    def test_agreeing_tree_passes(self):
        self.assertEqual(self.errors(), [])
        sources, _ = check_bindings.read_module_tree(self.root)
        crate = check_bindings.Crate(sources)
        self.assertEqual(sorted(crate.functions), fake_headers.EXPORTED)
        self.assertEqual(crate.file_of["fn", "gpe_so_apply"], "ffi/so.rs")
        self.assertEqual(crate.file_of["struct", "DLTensor"], "ffi/common.rs")

    def test_mod_rs_and_nested_modules(self):
        # so as ffi/so/mod.rs declaring ffi/so/inner.rs, which holds the declarations.
        so = os.path.join(self.dir, "src", "ffi", "so.rs")
        with open(so, encoding="utf-8") as f:
            text = f.read()
        os.remove(so)
        self.write("ffi/so/mod.rs", "mod inner;\npub use inner::*;\n")
        self.write("ffi/so/inner.rs", text)
        sources, missing = check_bindings.read_module_tree(self.root)
        self.assertEqual(missing, [])
        self.assertEqual([n for n, _ in sources],
                         ["ffi.rs", "ffi/common.rs", "ffi/so/mod.rs", "ffi/so/inner.rs"])
        self.assertEqual(self.errors(), [])
        self.drift("ffi/so/inner.rs", "rep: *const gpe_so_rep,", "rep: *mut gpe_so_rep,",
                   "ffi/so/inner.rs fn gpe_so_apply: parameter 1 (rep) is *mut gpe_so_rep")

    def test_drift_in_a_module_file(self):
        self.drift("ffi/so.rs", "        position: i64,\n", "        position: i32,\n",
                   "ffi/so.rs fn gpe_so_apply: parameter 2 (position) is i32; gpe.h has int64_t")

    def test_struct_drift_in_a_module_file(self):
        self.drift("ffi/so.rs", "pub pairing: i32,", "pub pairs: i32,",
                   "ffi/so.rs struct gpe_so_options: field 1 is pairs; gpe.h has pairing there")
        self.drift("ffi/common.rs", "pub ndim: i32,", "pub ndim: i64,",
                   "ffi/common.rs struct DLTensor: field ndim is i64")

    def test_missing_module_file(self):
        os.remove(os.path.join(self.dir, "src", "ffi", "so.rs"))
        errors = self.errors()
        self.assertIn("ffi.rs: mod so; has no file (ffi/so.rs or ffi/so/mod.rs)", errors)
        self.assertTrue(any("ffi.rs (with its modules) does not declare exported gpe_so_apply"
                            in e for e in errors), errors)

    def test_undeclared_module(self):
        self.drift("ffi.rs", "pub(crate) mod so;", "// pub(crate) mod so;",
                   "ffi.rs (with its modules) does not declare exported gpe_so_destroy")

    def test_declared_twice(self):
        self.drift("ffi/common.rs", "pub type gpe_status = i32;\n",
                   "pub type gpe_status = i32;\nextern \"C\" {\n"
                   "    pub fn gpe_so_destroy(rep: *mut gpe_so_rep);\n}\n",
                   "ffi/so.rs fn gpe_so_destroy: also declared in ffi/common.rs")

    def test_struct_missing_from_every_file(self):
        self.drift("ffi/so.rs", "pub struct gpe_so_options {", "pub struct gpe_so_opts {",
                   "ffi/so.rs struct gpe_so_opts: gpe.h has no struct of that name",
                   "is gpe_so_options, not a #[repr(C)] struct with fields in ffi.rs "
                   "(with its modules)")


if __name__ == "__main__":
    unittest.main()
