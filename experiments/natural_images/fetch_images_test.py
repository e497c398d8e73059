"""fetch_images without the network: synthetic files under skimage's names in a folder
(--from-dir), each cropped to its centred square, gray files kept one channel, colour
files three, every source hashed on its line."""

import contextlib
import hashlib
import io
import os
import tempfile
import unittest

import numpy as np

import sanitizer_preload
from gpe import _ffi

sanitizer_preload.reexec_if_needed(next((str(p) for p in _ffi._candidates() if p.is_file()), None))

import gpe  # noqa: E402
import fetch_images  # noqa: E402


def write_stand_ins(src, seed=5):
    """Random images under skimage's file names in src (made): wide, square and tall
    ones, gray and colour, PNG and JPEG as the real files are. Returns name -> (rows,
    cols, gray, path)."""
    rng = np.random.default_rng(seed)
    os.makedirs(src, exist_ok=True)
    shapes = {}
    for i, (name, f) in enumerate(sorted(fetch_images.IMAGES.items())):
        rows, cols = 20 + 3 * i, 31 - 2 * i
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
            self.assertEqual(len(lines), len(fetch_images.IMAGES))
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

    def test_missing_file_is_a_clear_error(self):
        with tempfile.TemporaryDirectory() as tmp:
            with self.assertRaises(SystemExit) as e:
                fetch_images.main([os.path.join(tmp, "out"), "--from-dir", tmp])
            self.assertIn("camera.png", str(e.exception))


if __name__ == "__main__":
    unittest.main()
