"""Compares the dynamic symbols libgpe.so defines with the committed list."""

import subprocess
import sys


def main():
    lib, committed = sys.argv[1], sys.argv[2]
    out = subprocess.run(["nm", "-D", "--defined-only", lib], check=True,
                         capture_output=True, text=True).stdout
    # Versioned names read "gpe_x@@GPE_0": compare the bare names.
    exported = sorted({line.split()[-1].split("@")[0] for line in out.splitlines()
                       if line.split() and line.split()[-2] in ("T", "D", "B", "R", "W", "V")})
    exported = [s for s in exported if s not in ("GPE_0",)]
    with open(committed) as f:
        expected = sorted(l.strip() for l in f if l.strip() and not l.startswith("#"))
    extra = sorted(set(exported) - set(expected))
    missing = sorted(set(expected) - set(exported))
    if extra or missing:
        print("libgpe.so's exported symbols differ from c_api/exported_symbols.txt")
        print("  exported but not listed:", extra)
        print("  listed but not exported:", missing)
        sys.exit(1)
    non_gpe = [s for s in exported if not s.startswith("gpe_")]
    if non_gpe:
        print("symbols outside the gpe_ prefix are exported:", non_gpe)
        sys.exit(1)
    print("%d exported symbols match" % len(exported))


if __name__ == "__main__":
    main()
