"""header_model on the fake split headers (fake_headers.py) and on the real gpe.h."""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fake_headers  # noqa: E402
import header_model  # noqa: E402


class FakeHeaders(unittest.TestCase):
    def setUp(self):
        self.h = fake_headers.FakeHeaders()
        self.addCleanup(self.h.cleanup)

    def load(self):
        return header_model.load(self.h.gpe_h, [self.h.dlpack_h])

    def test_follows_includes_across_the_split(self):
        m = self.load()
        self.assertEqual([os.path.basename(p) for p in m.headers],
                         ["gpe.h", "common.h", "dlpack.h", "so.h"])
        self.assertEqual(sorted(m.functions), fake_headers.EXPORTED)
        self.assertEqual(m.opaque, {"gpe_so_rep"})
        self.assertEqual(set(m.callbacks), {"gpe_progress_callback"})

    def test_types(self):
        m = self.load()
        create = m.functions["gpe_so_create"]
        self.assertEqual(str(create.ret), "int32_t")  # gpe_status
        self.assertEqual([str(p.type) for p in create.params],
                         ["const gpe_so_options*", "gpe_so_rep**"])
        self.assertEqual([p.name for p in create.params], ["options", "out"])
        self.assertEqual(str(m.functions["gpe_version_string"].ret), "const char*")
        self.assertEqual(m.functions["gpe_version_string"].params, [])
        self.assertEqual(m.functions["gpe_so_destroy"].ret.kind, "void")
        apply_ = m.functions["gpe_so_apply"]
        self.assertEqual([p.type.kind for p in apply_.params], ["ptr", "scalar", "ptr", "ptr"])
        self.assertTrue(apply_.params[0].type.const)
        self.assertFalse(apply_.params[3].type.const)
        self.assertEqual(apply_.params[0].type.pointee.kind, "opaque")
        self.assertEqual(apply_.params[2].type.pointee.kind, "record")

    def test_records(self):
        m = self.load()
        so = m.records["gpe_so_options"]
        self.assertEqual([f.name for f in so], ["struct_size", "pairing", "lo", "hi", "thetas",
                                                "progress", "progress_user_data"])
        self.assertEqual(str(so[2].type), "double")
        self.assertEqual(str(so[3].type), "double")
        self.assertEqual(so[5].type.kind, "fnptr")
        self.assertEqual([str(p) for p in so[5].type.params], ["void*", "int64_t", "double"])
        dl = m.records["DLTensor"]
        self.assertEqual([str(f.type) for f in dl], ["void*", "DLDevice", "int32_t", "DLDataType",
                                                     "int64_t*", "int64_t*", "uint64_t"])
        self.assertEqual(str(m.records["DLDevice"][0].type), "int32_t")  # a C enum

    def test_missing_area_header_fails(self):
        os.remove(os.path.join(self.h.dir, "c_api/include/gpe/so.h"))
        with self.assertRaisesRegex(header_model.HeaderError, "includes gpe/so.h"):
            self.load()

    def test_unknown_type_fails(self):
        self.h.write("c_api/include/gpe/so.h", fake_headers.SO_H.replace(
            "int64_t position", "gpe_position position"))
        with self.assertRaisesRegex(header_model.HeaderError, "unknown type 'gpe_position'"):
            self.load()

    def test_coverage(self):
        exported = ["gpe_a", "gpe_b", "gpe_c"]
        self.assertEqual(header_model.coverage_errors("x", {"gpe_a", "gpe_b"}, exported,
                                                      {"gpe_c": "why"}), [])
        errs = header_model.coverage_errors("x", {"gpe_a"}, exported, {"gpe_c": "why"})
        self.assertEqual(len(errs), 1)
        self.assertIn("does not declare exported gpe_b", errs[0])
        errs = header_model.coverage_errors("x", {"gpe_a", "gpe_b", "gpe_c"}, exported,
                                            {"gpe_c": "why", "gpe_z": "old"})
        self.assertEqual(len(errs), 2, errs)
        self.assertIn("gpe_c, which x declares", errs[0])
        self.assertIn("gpe_z, which is not an exported symbol", errs[1])
        errs = header_model.coverage_errors("x", {"gpe_a", "gpe_b"}, exported, {"gpe_c": " "})
        self.assertIn("without a reason", errs[0])


class RealHeader(unittest.TestCase):
    def test_every_exported_symbol_has_a_prototype(self):
        gpe_h, dlpack_h, symbols = sys.argv[1:4]
        m = header_model.load(gpe_h, [dlpack_h])
        exported = header_model.read_symbols(symbols)
        self.assertGreater(len(exported), 50)
        self.assertEqual(sorted(set(exported) - set(m.functions)), [])
        self.assertIn("DLTensor", m.records)
        self.assertIn("gpe_attention_options", m.records)


if __name__ == "__main__":
    if len(sys.argv) < 4:
        sys.exit("usage: header_model_test.py gpe.h dlpack.h exported_symbols.txt")
    unittest.main(argv=sys.argv[:1])
