"""check_bindings.py (the Julia drift check) on a small GroupPE.jl against the fake split
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


if __name__ == "__main__":
    unittest.main()
