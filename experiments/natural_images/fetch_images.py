"""Fetches the test photographs the natural-image experiments use from scikit-image's
data module, centre-crops each to a square and writes it as an 8-bit PNG:

    ./bazelw run //experiments/natural_images:fetch_images -- OUT_DIR

The images are Lim et al.'s Cameraman and Retina (their Table 2) and the photographs that
stand in for Zheng et al.'s 512 x 512 natural-image set (their Table 1; that set is not
on PyPI). Every one is at least 512 pixels on its shorter side, so that Zheng's table
never enlarges an image (an enlarged image repeats its training pixels among its test
pixels). They come from an installed `skimage` when there is one, else from the
scikit-image wheel itself (`pip download --no-deps`, no install, no SciPy), pinned to
SKIMAGE_VERSION. Prints where the files came from (the scikit-image version actually
read), then one line per image: name, size, SHA-256 of the source file (the tables quote
them).
"""

import argparse
import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile

import numpy as np

import gpe
from gpe._files import replace_with

SKIMAGE_VERSION = "0.26.0"

# name -> file in skimage/data. Cameraman and Retina are Lim et al.'s; the colour and
# gray photographs stand in for Zheng et al.'s natural images (a portrait, a histology
# slide, a brick wall, grass, an astronomical plate, the Moon). Shorter sides in
# scikit-image 0.26.0: camera, astronaut, ihc, brick, grass, moon 512; hubble 872;
# retina 1411 (Zheng et al. use 512 x 512 images; run.py refuses smaller ones).
IMAGES = {
    "cameraman": "camera.png",
    "retina": "retina.jpg",
    "astronaut": "astronaut.png",
    "ihc": "ihc.png",
    "brick": "brick.png",
    "grass": "grass.png",
    "hubble": "hubble_deep_field.jpg",
    "moon": "moon.png",
}


def _read(path):
    with open(path, "rb") as f:
        return f.read()


def _from_installed():
    """(files, source) from the data folder of an installed skimage, or None."""
    try:
        import skimage.data  # noqa: F401 (only its location is used)
    except ImportError:
        return None
    folder = os.path.dirname(sys.modules["skimage.data"].__file__)
    if all(os.path.isfile(os.path.join(folder, f)) for f in IMAGES.values()):
        version = getattr(sys.modules["skimage"], "__version__", "of unknown version")
        return ({name: _read(os.path.join(folder, f)) for name, f in IMAGES.items()},
                "scikit-image %s (installed, %s)" % (version, folder))
    return None


def _from_wheel(tmp):
    """(files, source): the files read out of scikit-image's wheel, downloaded (not
    installed) by pip."""
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps",
                    "--only-binary", ":all:", "--disable-pip-version-check", "-d", tmp,
                    "scikit-image==" + SKIMAGE_VERSION], check=True)
    wheels = [f for f in os.listdir(tmp) if f.endswith(".whl")]
    if len(wheels) != 1:
        raise SystemExit("fetch_images: expected one scikit-image wheel in %s, found %s"
                         % (tmp, wheels))
    with zipfile.ZipFile(os.path.join(tmp, wheels[0])) as z:
        return ({name: z.read("skimage/data/" + f) for name, f in IMAGES.items()},
                "scikit-image %s (wheel %s)" % (SKIMAGE_VERSION, wheels[0]))


def centre_square(pixels):
    """The largest centred square of an [rows, cols(, ch)] image."""
    rows, cols = pixels.shape[:2]
    n = min(rows, cols)
    r0, c0 = (rows - n) // 2, (cols - n) // 2
    return pixels[r0:r0 + n, c0:c0 + n]


def _from_dir(folder):
    """(files, source): the files of a folder that holds skimage's data files (an unpacked
    wheel's skimage/data, Debian's python3-skimage data folder, a copy made offline).
    Which scikit-image version they came from is not known here: the SHA-256 lines say
    which files they are."""
    missing = [f for f in IMAGES.values() if not os.path.isfile(os.path.join(folder, f))]
    if missing:
        raise SystemExit("fetch_images: %s lacks %s" % (folder, ", ".join(missing)))
    return ({name: _read(os.path.join(folder, f)) for name, f in IMAGES.items()},
            "scikit-image's data files from %s (version not recorded there)" % folder)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir", help="where the PNG files go (created)")
    parser.add_argument("--from-dir", metavar="DIR",
                        help="read skimage's data files from DIR instead (offline)")
    args = parser.parse_args(argv)
    out = os.path.abspath(os.path.join(os.environ.get("BUILD_WORKING_DIRECTORY", ""),
                                       args.out_dir))
    os.makedirs(out, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        if args.from_dir:
            files, source = _from_dir(os.path.join(os.environ.get("BUILD_WORKING_DIRECTORY", ""),
                                                   args.from_dir))
        else:
            files, source = _from_installed() or _from_wheel(tmp)
        print("source: %s" % source)
        for name, data in files.items():
            ext = os.path.splitext(IMAGES[name])[1]
            src = os.path.join(tmp, name + ext)
            with open(src, "wb") as f:
                f.write(data)
            pixels = centre_square(gpe.image_read(src))
            if np.array_equal(pixels[..., 0], pixels[..., 1]) and \
                    np.array_equal(pixels[..., 0], pixels[..., 2]):
                pixels = pixels[..., 0]  # a gray file stays one channel
            dst = os.path.join(out, name + ".png")
            # Written beside and renamed: an interrupted run leaves no truncated PNG.
            replace_with(dst, lambda tmp: gpe.image_write_png(tmp, pixels), suffix=".png")
            print("%-10s %4d x %4d  sha256 %s  %s" % (
                name, pixels.shape[0], pixels.shape[1], hashlib.sha256(data).hexdigest(),
                IMAGES[name]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
