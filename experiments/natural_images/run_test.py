"""run.py --quick end to end, offline: stand-in images (fetch_images_test), both tools
on tiny sizes, one report with both measured tables and both papers' numbers."""

import contextlib
import io
import os
import re
import tempfile
import unittest

import sanitizer_preload
from gpe import _ffi

sanitizer_preload.reexec_if_needed(next((str(p) for p in _ffi._candidates() if p.is_file()), None))

import fetch_images_test  # noqa: E402
import run  # noqa: E402


class RunQuickTest(unittest.TestCase):
    def test_quick_report(self):
        with tempfile.TemporaryDirectory() as tmp:
            src = os.path.join(tmp, "src")
            fetch_images_test.write_stand_ins(src)
            out, report = os.path.join(tmp, "out"), os.path.join(tmp, "report.md")
            with contextlib.redirect_stdout(io.StringIO()):
                self.assertEqual(run.main(["--quick", "--from-dir", src, "--out", out,
                                           "--report", report,
                                           "--zheng-images", "cameraman,coffee"]), 0)
            text = open(report).read()
            # Lim: three encodings, each with a measured MSE in both columns.
            for enc in ("None", "T x T", "SO(2)"):
                self.assertRegex(text, r"\| %s \| [\d.]+ \+- [\d.]+ \| [\d.]+ \+- [\d.]+ \|"
                                 % re.escape(enc))
            self.assertIn("| Cameraman | Retina |", text)
            self.assertIn("0.0249 +- 0.0017", text)  # Lim et al.'s Cameraman, None
            # Zheng: 2 images, every method with each of the five encodings measured.
            self.assertIn("2 image(s)", text)
            for method in ("simple + MLP (Adam)", "complex + linear (Adam)"):
                for enc in ("Gau", "Tri", "LinF", "LogF", "RFF"):
                    self.assertRegex(text, r"\| %s \| %s[^|]*\| -?[\d.]+ \+- [\d.]+ \|"
                                     % (re.escape(method), enc))
            self.assertIn("26.63 +- 3.86", text)  # Zheng et al.'s closed-form Gau
            self.assertIn("--quick", text)
            self.assertTrue(os.path.isfile(os.path.join(out, "lim", "cameraman_so2.png")))
            self.assertTrue(os.path.isfile(os.path.join(out, "zheng", "coffee_truth.png")))
            self.assertFalse(os.path.exists(report + ".tmp"))

    def test_one_table(self):
        with tempfile.TemporaryDirectory() as tmp:
            src = os.path.join(tmp, "src")
            fetch_images_test.write_stand_ins(src)
            report = os.path.join(tmp, "report.md")
            with contextlib.redirect_stdout(io.StringIO()):
                run.main(["--quick", "--tables", "lim", "--from-dir", src,
                          "--out", os.path.join(tmp, "out"), "--report", report])
            text = open(report).read()
            self.assertIn("| Cameraman | Retina |", text)
            self.assertNotIn("Zheng et al. Table 1 on photographs", text)
            self.assertIn("--tables lim", text)
        with self.assertRaises(SystemExit) as e:
            run.main(["--quick", "--tables", "lim,mlp"])
        self.assertIn("--tables", str(e.exception))

    def test_unknown_image_is_a_clear_error(self):
        with self.assertRaises(SystemExit) as e:
            run.main(["--quick", "--zheng-images", "cameraman,lena"])
        self.assertIn("lena", str(e.exception))


if __name__ == "__main__":
    unittest.main()
