"""check_bindings.py (the Julia drift check) on a small GroupPE.jl against the fake split
headers of bindings/fake_headers.py: it passes when they agree and fails on each kind of
drift, in GroupPE.jl or in a file it includes."""
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
module GroupPE
struct DLDevice
    device_type::Int32
    device_id::Int32
end
struct DLDataType
    code::UInt8
    bits::UInt8
    lanes::UInt16
end
struct DLTensor
    data::Ptr{Cvoid}
    device::DLDevice
    ndim::Int32
    dtype::DLDataType
    shape::Ptr{Int64}
    strides::Ptr{Int64}
    byte_offset::UInt64
end
struct SoOptions
    struct_size::UInt32
    pairing::Int32
    lo::Float64
    hi::Float64
    thetas::Ptr{Float64}
end
version() = unsafe_string(ccall((:gpe_version_string, libgpe), Cstring, ()))
create(o) = ccall((:gpe_so_create, libgpe), Int32, (Ref{SoOptions}, Ref{Ptr{Cvoid}}), o, out)
destroy(p) = ccall((:gpe_so_destroy, libgpe), Cvoid, (Ptr{Cvoid},), p)
apply(p, n, x, y) = ccall((:gpe_so_apply, libgpe), Int32,
                          (Ptr{Cvoid}, Int64, Ref{DLTensor}, Ref{DLTensor}), p, n, x, y)
end
'''


class JuliaDrift(unittest.TestCase):
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

    def test_a_prefix_of_an_option_struct_passes(self):
        """struct_size tells the library how much of the struct a caller knows."""
        self.assertEqual(self.errors(GOOD.replace("    thetas::Ptr{Float64}\n", "")), [])

    def test_renamed_field(self):
        self.drift("    pairing::Int32", "    pairs::Int32",
                   "SoOptions.pairs is gpe_so_options.pairing in gpe.h (field order)")

    def test_field_type(self):
        self.drift("    lo::Float64", "    lo::Float32",
                   "SoOptions.lo is Float32; gpe.h has double")
        self.drift("    thetas::Ptr{Float64}", "    thetas::Ptr{Int64}",
                   "SoOptions.thetas is Ptr{Int64}; gpe.h has const double*")

    def test_too_many_fields(self):
        self.drift("    thetas::Ptr{Float64}\n", "    thetas::Ptr{Float64}\n    a::Ptr{Cvoid}\n"
                   "    b::Ptr{Cvoid}\n    c::Ptr{Cvoid}\n",
                   "has 8 fields, C gpe_so_options only 7")

    def test_dlpack_structs(self):
        self.drift("    ndim::Int32", "    ndim::Int64",
                   "DLTensor.ndim is Int64; gpe.h has int32_t")
        self.drift("    lanes::UInt16", "    lanes::UInt8", "DLDataType.lanes is UInt8")

    def test_swapped_argument_type(self):
        self.drift("(Ptr{Cvoid}, Int64, Ref{DLTensor}, Ref{DLTensor})",
                   "(Ptr{Cvoid}, Int32, Ref{DLTensor}, Ref{DLTensor})",
                   "gpe_so_apply: argument 2 is Int32; gpe.h has int64_t position")
        self.drift("(Ptr{Cvoid}, Int64, Ref{DLTensor}, Ref{DLTensor})",
                   "(Ptr{Cvoid}, Int64, Ref{Float64}, Ref{DLTensor})",
                   "gpe_so_apply: argument 3 points to Float64; gpe.h has const DLTensor* x")

    def test_argument_count(self):
        self.drift("(Ptr{Cvoid}, Int64, Ref{DLTensor}, Ref{DLTensor})",
                   "(Ptr{Cvoid}, Ref{DLTensor}, Ref{DLTensor})", "3 argument types; gpe.h has 4")

    def test_return_type(self):
        self.drift("(:gpe_so_destroy, libgpe), Cvoid", "(:gpe_so_destroy, libgpe), Int32",
                   "gpe_so_destroy: returns Int32; gpe.h returns void")

    def test_missing_function(self):
        self.drift("destroy(p) = ccall((:gpe_so_destroy, libgpe), Cvoid, (Ptr{Cvoid},), p)\n", "",
                   "GroupPE.jl does not declare exported gpe_so_destroy")

    def test_function_not_in_header(self):
        self.drift("(:gpe_so_destroy, libgpe)", "(:gpe_so_free, libgpe)",
                   "gpe_so_free: not in exported_symbols.txt", "gpe_so_free: no prototype in gpe.h")

    def test_ccall_without_a_literal_name(self):
        self.drift("ccall((:gpe_so_destroy, libgpe)", "ccall((name, libgpe)",
                   "a ccall without a literal (:name, libgpe)")


# GOOD as a module file that includes src/so.jl, which holds the SO calls (the struct they
# pass stays in the module file, as GroupPE.jl's DLTensor does).
_HEAD, _REST = GOOD.split("create(o) = ", 1)
ROOT_JL = _HEAD + 'include("src/so.jl")\nend\n'
SO_JL = "# The SO area.\ncreate(o) = " + _REST.rsplit("end\n", 1)[0]


class IncludedFiles(unittest.TestCase):
    def setUp(self):
        self.h = fake_headers.FakeHeaders()
        self.addCleanup(self.h.cleanup)
        self.model = header_model.load(self.h.gpe_h, [self.h.dlpack_h])
        self.dir = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.dir)

    def write(self, name, text):
        path = os.path.join(self.dir, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        return path

    def run_check(self, root=ROOT_JL, so=SO_JL):
        """(read errors, check errors, file names) of the module written to self.dir."""
        if so is not None:
            self.write("src/so.jl", so)
        sources, read_errors = check_bindings.read_module(self.write("GroupPE.jl", root))
        errors, _ = check_bindings.check(sources, self.model, fake_headers.EXPORTED, {})
        return read_errors, errors, [name for name, _ in sources]

    def assert_error(self, errors, expected):
        self.assertTrue(any(expected in e for e in errors), "%r not in %s" % (expected, errors))

    def test_agreeing_files_pass(self):
        read_errors, errors, names = self.run_check()
        self.assertEqual((read_errors, errors), ([], []))
        self.assertEqual(names, ["GroupPE.jl", "src/so.jl"])

    def test_drift_in_an_included_file(self):
        old, new = "Int64, Ref{DLTensor}", "Int32, Ref{DLTensor}"
        self.assertIn(old, SO_JL)
        so = SO_JL.replace(old, new, 1)
        line = so[: so.index("ccall((:gpe_so_apply")].count("\n") + 1
        read_errors, errors, _ = self.run_check(so=so)
        self.assertEqual(read_errors, [])
        self.assert_error(errors, "src/so.jl:%d gpe_so_apply: argument 2 is Int32" % line)

    def test_struct_of_the_module_file_checked_where_passed(self):
        read_errors, errors, _ = self.run_check(root=ROOT_JL.replace("pairing::", "pairs::"))
        self.assertEqual(read_errors, [])
        self.assert_error(errors, "src/so.jl:2 gpe_so_create: SoOptions.pairs is "
                                  "gpe_so_options.pairing in gpe.h")

    def test_missing_included_file(self):
        line = ROOT_JL[: ROOT_JL.index("include(")].count("\n") + 1
        read_errors, errors, names = self.run_check(so=None)
        self.assertEqual(names, ["GroupPE.jl"])
        self.assertEqual(len(read_errors), 1, read_errors)
        self.assert_error(read_errors, 'GroupPE.jl:%d: include("src/so.jl"): no such file' % line)
        # And the calls it held are missing: the exported functions only it called.
        self.assert_error(errors, "GroupPE.jl does not declare exported gpe_so_destroy")

    def test_include_relative_to_the_including_file(self):
        destroy = [l for l in SO_JL.splitlines(True) if l.startswith("destroy(")][0]
        self.write("src/more.jl", destroy)
        self.write("more.jl", "not Julia: never read\n")
        so = SO_JL.replace(destroy, 'include("more.jl")\n')
        read_errors, errors, names = self.run_check(so=so)
        self.assertEqual((read_errors, errors), ([], []))
        self.assertEqual(names, ["GroupPE.jl", "src/so.jl", "src/more.jl"])

    def test_include_without_a_literal_path(self):
        root = ROOT_JL.replace('include("src/so.jl")', 'include(joinpath(@__DIR__, "src/so.jl"))')
        read_errors, _, _ = self.run_check(root=root)
        self.assert_error(read_errors, 'include(joinpath(@__DIR__, "src/so.jl")) without a '
                                       'literal path')

    def test_include_in_a_docstring_is_prose(self):
        root = ROOT_JL.replace("module GroupPE\n", 'module GroupPE\n"""\ninclude("gone.jl")\n"""\n')
        read_errors, errors, _ = self.run_check(root=root)
        self.assertEqual((read_errors, errors), ([], []))


if __name__ == "__main__":
    unittest.main()
