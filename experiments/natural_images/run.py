"""Lim et al.'s Table 2 on Cameraman and Retina and Zheng et al.'s Table 1 on photographs,
as one command:

    ./bazelw run //experiments/natural_images:run              # ~55 min on 2 cores
    ./bazelw run //experiments/natural_images:run -- --no-mlp  # without the MLP rows: ~30 min
    ./bazelw run //experiments/natural_images:run -- --quick   # smoke run (the CI test)

Measured on a 2-core AMD Zen 5 VM (2026-12-07, OpenBLAS on its Cooperlake kernels):
Lim's table 2.5 minutes; Zheng's 53 minutes for 8 images (the set before ihc, brick and
grass replaced three photographs smaller than 512 x 512): per image, about 37 s per
encoding for the 2000 Adam steps of the linear layer (per channel on colour images) and
about 42 s per encoding for the 100 steps of the simple + MLP rows (~0.37 s a step; all
channels in one network), the closed forms in hundredths of a second. An environment
that forces OpenBLAS's AVX2 kernels (OPENBLAS_CORETYPE=Haswell on an AVX-512 CPU) halves
the MLP rows' speed: `gpe machine`'s "BLAS kernels" line, in the report, says which ran.

Fetches the images (fetch_images.py: scikit-image's data module, pinned), then runs
`gpe inr lim-table2` on Cameraman and Retina (10 seeds; Lim et al. Section 5.1: 256 x 256
grid, 5% train, MLP 3 x 128, 500 Adam steps) and `gpe inr zheng-table1` on every image
(512 x 512, trained on the [::2] grid, PSNR on the other pixels; Zheng et al. Section 4.1),
refusing any image smaller than --size (enlarged by copying pixels, its test pixels
would repeat its training pixels and inflate the PSNR), and writes one markdown report:
the command, the machine's limits (`gpe machine`) before and after, each image's source
(the scikit-image version read) and hash, both tools' tables with the papers' numbers
beside them, and wall times. Full runs write docs/measured/natural_images.md (give
--report to write elsewhere); pictures go to gpe_out/natural_images/.
"""

import argparse
import contextlib
import datetime
import io
import os
import platform
import re
import subprocess
import sys
import time

import fetch_images
from gpe import image_read
from gpe._files import write_atomic

HERE = os.path.dirname(os.path.abspath(__file__))


def _workspace():
    """The source tree: Bazel's BUILD_WORKSPACE_DIRECTORY under `bazel run`, else the
    directory two levels above this file."""
    return os.environ.get("BUILD_WORKSPACE_DIRECTORY") or os.path.dirname(os.path.dirname(HERE))


def _user_path(path):
    """A path as the user typed it: relative to where `bazel run` was called."""
    return os.path.join(os.environ.get("BUILD_WORKING_DIRECTORY", ""), path)


def _gpe_binary():
    """tools/gpe: in the runfiles beside this script (bazel run / test), else bazel-bin."""
    for cand in (os.path.join(os.path.dirname(os.path.dirname(HERE)), "tools", "gpe"),
                 os.path.join(_workspace(), "bazel-bin", "tools", "gpe")):
        if os.path.isfile(cand) and os.access(cand, os.X_OK):
            return cand
    raise SystemExit("run: tools/gpe not found (./bazelw build //tools:gpe)")


# Zheng et al., Table 1 (16 natural 512 x 512 images, PSNR dB mean +- std, time s): the
# published rows, for the report. LogF's closed form is missing in the paper (rank
# deficient).
ZHENG_PUBLISHED = (
    ("simple + MLP", "LinF", "24.46 +- 3.66", "60.61"),
    ("simple + MLP", "LogF", "24.65 +- 3.90", "60.30"),
    ("simple + MLP", "RFF", "25.24 +- 3.91", "61.06"),
    ("simple + MLP", "Tri", "24.56 +- 3.75", "61.06"),
    ("simple + MLP", "Gau", "24.70 +- 3.90", "62.39"),
    ("complex + linear (GD)", "LinF", "19.04 +- 2.54", "3.40"),
    ("complex + linear (GD)", "LogF", "21.96 +- 2.92", "3.37"),
    ("complex + linear (GD)", "RFF", "22.47 +- 2.77", "3.45"),
    ("complex + linear (GD)", "Tri", "25.12 +- 3.27", "3.32"),
    ("complex + linear (GD)", "Gau", "25.56 +- 3.62", "3.40"),
    ("complex + linear (closed form)", "LinF", "21.07 +- 4.91", "0.71"),
    ("complex + linear (closed form)", "LogF", "-", "-"),
    ("complex + linear (closed form)", "RFF", "18.05 +- 2.22", "0.68"),
    ("complex + linear (closed form)", "Tri", "26.36 +- 3.39", "0.02"),
    ("complex + linear (closed form)", "Gau", "26.63 +- 3.86", "0.13"),
)


def _zheng_published():
    rows = ["| method | encoding | PSNR (dB) | time (s, their GPU) |", "|---|---|---|---|"]
    rows += ["| %s | %s | %s | %s |" % r for r in ZHENG_PUBLISHED]
    return "\n".join(rows)


def _cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def _run(cmd, log):
    """Runs cmd, echoing its output into log; returns (stdout, wall seconds)."""
    print("+ " + " ".join(cmd), flush=True)
    start = time.time()
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    wall = time.time() - start
    log.write("$ %s\n%s\n" % (" ".join(cmd), proc.stdout))
    if proc.returncode != 0:
        sys.stdout.write(proc.stdout)
        raise SystemExit("run: %s failed (exit %d)" % (cmd[1:3], proc.returncode))
    return proc.stdout, wall


def _machine(gpe):
    """`gpe machine`'s table, as one line: FMA peak and triad on 2 threads."""
    out = subprocess.run([gpe, "machine"], stdout=subprocess.PIPE, text=True, check=True).stdout
    fma = re.search(r"FMA peak \(GFLOP/s\) \| ([\d.]+) \| ([\d.]+)", out)
    triad = re.search(r"triad bandwidth \(GB/s\) \| ([\d.]+) \| ([\d.]+)", out)
    blas = re.search(r"BLAS kernels: (.*)", out)
    if not fma or not triad:
        return out.strip()
    return "float32 FMA peak %s GFLOP/s, triad %s GB/s (2 threads); OpenBLAS kernels %s" % (
        fma.group(2), triad.group(2), blas.group(1).strip() if blas else "unknown")


def _fail(message):
    """A usage error: the message on stderr and exit status 2 (argparse's convention)."""
    print("run: " + message, file=sys.stderr)
    raise SystemExit(2)


def _too_small(images, names, size):
    """[(name, rows, cols)] of the fetched images that are smaller than size x size: the
    Zheng tool would enlarge them by nearest-pixel copying (tools/gpe_inr_common.cc,
    ResampleSquare), so that some of the test pixels (off the [::2] grid) would be copies
    of training pixels (on it; Zheng et al. Section 4.1 train on one, test on the other)."""
    small = []
    for name in names:
        rows, cols = image_read(os.path.join(images, name + ".png")).shape[:2]
        if min(rows, cols) < size:
            small.append((name, rows, cols))
    return small


def _demote(markdown):
    """A tool's report nested one heading level down, without its first title line."""
    lines = markdown.strip().splitlines()
    if lines and lines[0].startswith("# "):
        lines = lines[1:]
    return "\n".join("#" + l if l.startswith("#") else l for l in lines).strip()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="tiny sizes throughout (seconds; the CI smoke run)")
    parser.add_argument("--tables", default="lim,zheng",
                        help="which tables: lim, zheng or both (default lim,zheng)")
    parser.add_argument("--seeds", type=int, default=None,
                        help="Lim: seeds (default 10; --quick: the tool's quick default, 2)")
    parser.add_argument("--search", action="store_true",
                        help="Lim: choose scales and learning rates on seed 0's validation set")
    parser.add_argument("--zheng-images", default=",".join(fetch_images.IMAGES),
                        help="Zheng: comma-separated image names (default: all fetched)")
    parser.add_argument("--size", type=int, default=None,
                        help="Zheng: image size (default 512, Zheng et al.'s; --quick: 32); "
                             "images smaller than this are refused, never enlarged")
    parser.add_argument("--gray", action="store_true", help="Zheng: grayscale, not per channel")
    parser.add_argument("--no-mlp", action="store_true", help="Zheng: skip simple + MLP rows")
    parser.add_argument("--from-dir", metavar="DIR",
                        help="skimage's data files from DIR (offline; fetch_images.py)")
    parser.add_argument("--out", help="pictures and logs (default gpe_out/natural_images)")
    parser.add_argument("--report", help="the markdown report (default: full runs "
                        "docs/measured/natural_images.md, quick runs OUT/report.md)")
    args = parser.parse_args(argv)
    unknown = set(args.zheng_images.split(",")) - set(fetch_images.IMAGES)
    if unknown:
        raise SystemExit("run: --zheng-images: no image %s (have %s)"
                         % (", ".join(sorted(unknown)), ", ".join(fetch_images.IMAGES)))

    tables = set(args.tables.split(","))
    if not tables or tables - {"lim", "zheng"}:
        raise SystemExit("run: --tables takes lim, zheng or lim,zheng (got %r)" % args.tables)
    if args.seeds is not None and not 1 <= args.seeds <= 100:
        _fail("--seeds takes 1..100 (got %d)" % args.seeds)
    size = args.size if args.size is not None else 32 if args.quick else 512
    if not 16 <= size <= 2048 or size % 2:
        _fail("--size takes an even number in 16..2048 (got %d)" % size)

    ws = _workspace()
    out = _user_path(args.out) if args.out else os.path.join(ws, "gpe_out", "natural_images")
    report = (_user_path(args.report) if args.report else
              os.path.join(out, "report.md") if args.quick else
              os.path.join(ws, "docs", "measured", "natural_images.md"))
    os.makedirs(out, exist_ok=True)
    gpe = _gpe_binary()
    started = datetime.datetime.now(datetime.timezone.utc)
    t0 = time.time()

    images = os.path.join(out, "images")
    fetch_args = [images] + (["--from-dir", _user_path(args.from_dir)] if args.from_dir else [])
    fetched = io.StringIO()
    with contextlib.redirect_stdout(fetched):
        fetch_images.main(fetch_args)
    fetch_lines = fetched.getvalue().rstrip().splitlines()
    source = (fetch_lines[0][len("source: "):]
              if fetch_lines and fetch_lines[0].startswith("source: ") else "unknown source")
    zheng_names = args.zheng_images.split(",")
    small = _too_small(images, zheng_names, size) if "zheng" in tables else []
    if small:
        _fail("--zheng-images: %s smaller than --size %d; enlarging would copy training "
              "pixels into the test pixels and inflate the PSNR. Leave %s out, or give a "
              "--size no larger than %d." % (
                  ", ".join("%s is %d x %d" % s for s in small), size,
                  "it" if len(small) == 1 else "them",
                  min(min(r, c) for _, r, c in small) // 2 * 2))
    # Quick runs skip the ~10 s limit probes: their timings mean nothing.
    machine_before = "not measured (--quick)" if args.quick else _machine(gpe)

    quick = ["--quick"] if args.quick else []
    lim_wall = zheng_wall = 0.0
    with open(os.path.join(out, "log.txt"), "w") as log:
        if "lim" in tables:
            lim_cmd = [gpe, "inr", "lim-table2", "--tasks", "cameraman,retina",
                       "--cameraman", os.path.join(images, "cameraman.png"),
                       "--retina", os.path.join(images, "retina.png"),
                       "--out", os.path.join(out, "lim")] + quick
            if args.seeds is not None or not args.quick:
                lim_cmd += ["--seeds", str(args.seeds if args.seeds is not None else 10)]
            lim_cmd += ["--search"] if args.search else []
            _, lim_wall = _run(lim_cmd, log)
        if "zheng" in tables:
            zheng_cmd = ([gpe, "inr", "zheng-table1"] +
                         [os.path.join(images, n + ".png") for n in zheng_names] +
                         ["--out", os.path.join(out, "zheng"), "--size", str(size)] + quick +
                         (["--gray"] if args.gray else []) +
                         (["--no-mlp"] if args.no_mlp else []))
            _, zheng_wall = _run(zheng_cmd, log)
    machine_after = "not measured (--quick)" if args.quick else _machine(gpe)

    def read(path):
        with open(path) as f:
            return f.read()
    lim_md = read(os.path.join(out, "lim", "table2.md")) if "lim" in tables else None
    zheng_md = read(os.path.join(out, "zheng", "table1.md")) if "zheng" in tables else None
    shown = " ".join(["--quick"] * args.quick +
                     (["--tables", args.tables] if tables != {"lim", "zheng"} else []) +
                     ["--search"] * args.search +
                     (["--seeds", str(args.seeds)] if args.seeds is not None else []) +
                     (["--zheng-images", args.zheng_images]
                      if args.zheng_images != parser.get_default("zheng_images") else []) +
                     (["--size", str(args.size)] if args.size is not None else []) +
                     ["--gray"] * args.gray + ["--no-mlp"] * args.no_mlp)
    text = [
        "# Natural images: Lim et al. Table 2 (Cameraman, Retina) and Zheng et al. Table 1 "
        "(photographs), %s" % started.strftime("%Y-%m-%d"),
        "",
        "Command: `./bazelw run //experiments/natural_images:run%s`, %.0f s in all "
        "(Lim %.0f s, Zheng %.0f s)." % (" -- " + shown if shown else "", time.time() - t0,
                                          lim_wall, zheng_wall),
        "",
        "Machine: %s; `gpe machine` before the run: %s; after: %s." % (
            _cpu_model(), machine_before, machine_after),
        "",
        "Images (%s; centre-cropped to squares; SHA-256 of each source file):" % source,
        "",
        "```",
        "\n".join(l for l in fetch_lines if not l.startswith("source: ")),
        "```",
        "",
    ]
    if lim_md is not None:
        text += ["## Lim et al. Table 2: Cameraman and Retina", "", _demote(lim_md), ""]
    if zheng_md is not None:
        text += [
            "## Zheng et al. Table 1 on photographs",
            "",
            "Zheng et al. average 16 of the 32 512 x 512 images of their reference [34], not "
            "on PyPI; the photographs above stand in for them, so compare the rows' order "
            "with the paper's, not the values.",
            "",
            _demote(zheng_md),
            "",
            "### Zheng et al. (published, 16 images of [34])",
            "",
            _zheng_published(),
            "",
        ]
    os.makedirs(os.path.dirname(report), exist_ok=True)
    write_atomic(report, "\n".join(text))  # a failed run leaves an older report whole
    print("Wrote %s (%.0f s in all)" % (report, time.time() - t0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
