"""fetch_images without the network: synthetic files under skimage's names in a folder
(--from-dir), each cropped to its centred square, gray files kept one channel, colour
files three, every source hashed on its line, and the source (the scikit-image version
actually read) named on the first line."""

import contextlib
import hashlib
import io
import os
import sys
import tempfile
import types
import unittest

import numpy as np

import sanitizer_preload
from gpe import _ffi

sanitizer_preload.reexec_if_needed(next((str(p) for p in _ffi._candidates() if p.is_file()), None))

import gpe  # noqa: E402
import fetch_images  # noqa: E402


def write_stand_ins(src, seed=5, base=40):
    """Random images under skimage's file names in src (made): wide, square and tall
    ones, gray and colour, PNG and JPEG as the real files are, the shorter side at
    least base - 3 (40: every one is at least run.py --quick's 32 pixels). Returns
    name -> (rows, cols, gray, path)."""
    rng = np.random.default_rng(seed)
    os.makedirs(src, exist_ok=True)
    shapes = {}
    for i, (name, f) in enumerate(sorted(fetch_images.IMAGES.items())):
        rows, cols = base + 3 * i, base + 11 - 2 * i
        gray = i % 2 == 0
        px = rng.random((rows, cols) if gray else (rows, cols, 3))
        path = os.path.join(src, f)
        if f.endswith(".png"):
            gpe.image_write_png(path, px)
        else:
            gpe.image_write_jpeg(path, px, quality=100)
        shapes[name] = (rows, cols, gray, path)
    return shapes


class FetchImagesTest(unittest.TestCase):
    def test_crops_keeps_gray_and_hashes(self):
        with tempfile.TemporaryDirectory() as tmp:
            src, out = os.path.join(tmp, "src"), os.path.join(tmp, "out")
            shapes = write_stand_ins(src)
            log = io.StringIO()
            with contextlib.redirect_stdout(log):
                self.assertEqual(fetch_images.main([out, "--from-dir", src]), 0)
            lines = log.getvalue().splitlines()
            self.assertEqual(len(lines), 1 + len(fetch_images.IMAGES))
            # Files from a folder: the folder is named, and no scikit-image version is
            # claimed (the folder does not say which one its files came from).
            self.assertEqual(lines[0], "source: scikit-image's data files from %s (version "
                             "not recorded there)" % src)
            for name, (rows, cols, gray, path) in shapes.items():
                n = min(rows, cols)
                got = gpe.image_read(os.path.join(out, name + ".png"))
                self.assertEqual(got.shape[:2], (n, n), name)
                channels_equal = np.array_equal(got[..., 0], got[..., 1])
                self.assertEqual(channels_equal, gray, name)
                # The centred square, exactly, for PNG sources (8-bit values survive the
                # round trip bit for bit; JPEG sources are lossy, so only their shape and
                # grayness are checked).
                if path.endswith(".png"):
                    want = gpe.image_read(path)
                    r0, c0 = (rows - n) // 2, (cols - n) // 2
                    np.testing.assert_array_equal(got, want[r0:r0 + n, c0:c0 + n])
                digest = hashlib.sha256(open(path, "rb").read()).hexdigest()
                line = next(l for l in lines if l.startswith(name + " "))
                self.assertIn(digest, line)
                self.assertIn("%d x %4d" % (n, n), line)
            self.assertFalse([f for f in os.listdir(out) if f.endswith(".tmp")])

    def test_installed_version_is_recorded(self):
        # An installed skimage (a stand-in module whose data folder holds the files) is
        # read, and its own version is the one printed, not the pinned SKIMAGE_VERSION.
        with tempfile.TemporaryDirectory() as tmp:
            src, out = os.path.join(tmp, "src"), os.path.join(tmp, "out")
            write_stand_ins(src)
            fake = types.ModuleType("skimage")
            fake.__version__ = "9.8.7"
            data = types.ModuleType("skimage.data")
            data.__file__ = os.path.join(src, "__init__.py")
            fake.data = data
            saved = {k: sys.modules.get(k) for k in ("skimage", "skimage.data")}
            sys.modules.update({"skimage": fake, "skimage.data": data})
            try:
                log = io.StringIO()
                with contextlib.redirect_stdout(log):
                    self.assertEqual(fetch_images.main([out]), 0)
            finally:
                for k, v in saved.items():
                    if v is None:
                        sys.modules.pop(k, None)
                    else:
                        sys.modules[k] = v
            first = log.getvalue().splitlines()[0]
            self.assertEqual(first, "source: scikit-image 9.8.7 (installed, %s)" % src)
            self.assertNotIn(fetch_images.SKIMAGE_VERSION, first)

    def test_missing_file_is_a_clear_error(self):
        with tempfile.TemporaryDirectory() as tmp:
            with self.assertRaises(SystemExit) as e:
                fetch_images.main([os.path.join(tmp, "out"), "--from-dir", tmp])
            self.assertIn("camera.png", str(e.exception))


if __name__ == "__main__":
    unittest.main()
