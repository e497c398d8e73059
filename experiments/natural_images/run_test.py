"""run.py --quick end to end, offline: stand-in images (fetch_images_test), both tools
on tiny sizes, one report with both measured tables and both papers' numbers; images
smaller than Zheng's size refused, never enlarged."""

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


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


class RunQuickTest(unittest.TestCase):
    def test_quick_report(self):
        with tempfile.TemporaryDirectory() as tmp:
            src = os.path.join(tmp, "src")
            fetch_images_test.write_stand_ins(src)
            out, report = os.path.join(tmp, "out"), os.path.join(tmp, "report.md")
            with contextlib.redirect_stdout(io.StringIO()):
                self.assertEqual(run.main(["--quick", "--from-dir", src, "--out", out,
                                           "--report", report,
                                           "--zheng-images", "cameraman,ihc"]), 0)
            text = read(report)
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
            # The files' source as read: a folder, no scikit-image version claimed.
            self.assertIn("Images (scikit-image's data files from %s" % src, text)
            self.assertNotIn("scikit-image %s" % fetch_images_test.fetch_images.SKIMAGE_VERSION,
                             text)
            self.assertTrue(os.path.isfile(os.path.join(out, "lim", "cameraman_so2.png")))
            self.assertTrue(os.path.isfile(os.path.join(out, "zheng", "ihc_truth.png")))
            self.assertFalse([f for f in os.listdir(os.path.dirname(report)) if f.endswith(".tmp")])

    def test_one_table(self):
        with tempfile.TemporaryDirectory() as tmp:
            src = os.path.join(tmp, "src")
            fetch_images_test.write_stand_ins(src)
            report = os.path.join(tmp, "report.md")
            with contextlib.redirect_stdout(io.StringIO()):
                run.main(["--quick", "--tables", "lim", "--from-dir", src,
                          "--out", os.path.join(tmp, "out"), "--report", report])
            text = read(report)
            self.assertIn("| Cameraman | Retina |", text)
            self.assertNotIn("Zheng et al. Table 1 on photographs", text)
            self.assertIn("--tables lim", text)
        with self.assertRaises(SystemExit) as e:
            run.main(["--quick", "--tables", "lim,mlp"])
        self.assertIn("--tables", str(e.exception))

    def test_quick_keeps_seeds(self):
        # --quick with --seeds: the Lim tool runs that many seeds, as the report's command
        # line says (the quick default is the tool's 2).
        with tempfile.TemporaryDirectory() as tmp:
            src = os.path.join(tmp, "src")
            fetch_images_test.write_stand_ins(src)
            report = os.path.join(tmp, "report.md")
            with contextlib.redirect_stdout(io.StringIO()):
                run.main(["--quick", "--tables", "lim", "--seeds", "1", "--from-dir", src,
                          "--out", os.path.join(tmp, "out"), "--report", report])
            text = read(report)
            self.assertIn("--seeds 1", text)
            self.assertIn("over 1 seed(s)", text)

    def test_smaller_image_is_refused(self):
        # Stand-ins of 17..41 pixels a side against --quick's 32: enlarged, some of their
        # test pixels would be copies of training pixels, so the run stops (exit 2,
        # before either tool runs) and says which image and what to do; at --size 16
        # the same image runs.
        with tempfile.TemporaryDirectory() as tmp:
            src, out = os.path.join(tmp, "src"), os.path.join(tmp, "out")
            shapes = fetch_images_test.write_stand_ins(src, base=20)
            small = min(shapes, key=lambda n: min(shapes[n][:2]))
            n = min(shapes[small][:2])
            self.assertLess(n, 32)
            err = io.StringIO()
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err), \
                    self.assertRaises(SystemExit) as e:
                run.main(["--quick", "--from-dir", src, "--out", out,
                          "--report", os.path.join(tmp, "r.md"), "--zheng-images", small])
            self.assertEqual(e.exception.code, 2)
            self.assertIn("%s is %d x %d smaller than --size 32" % (small, n, n), err.getvalue())
            self.assertFalse(os.path.exists(os.path.join(out, "lim")))
            self.assertFalse(os.path.exists(os.path.join(tmp, "r.md")))
            report = os.path.join(tmp, "report.md")
            with contextlib.redirect_stdout(io.StringIO()):
                self.assertEqual(run.main(["--quick", "--tables", "zheng", "--size", "16",
                                           "--from-dir", src, "--out", out, "--report", report,
                                           "--zheng-images", small]), 0)
            text = read(report)
            self.assertIn("16x16", text)
            self.assertIn("--size 16", text)

    def test_unknown_image_is_a_clear_error(self):
        with self.assertRaises(SystemExit) as e:
            run.main(["--quick", "--zheng-images", "cameraman,lena"])
        self.assertIn("lena", str(e.exception))


if __name__ == "__main__":
    unittest.main()
