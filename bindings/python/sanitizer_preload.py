"""Makes Python tests work with a sanitizer-built libgpe.so.

An AddressSanitizer runtime must be the first library loaded into the process, which a
plain `python3` is not built for. When libgpe.so needs libasan, re-execute the test
with that runtime in LD_PRELOAD (and leak detection off: the interpreter's own
allocations at exit are not GroupPE's leaks).
"""

import os
import subprocess
import sys


def _needed_runtime(lib_path):
    """The preload list: libasan, then the libstdc++ libgpe.so uses. ASan resolves its
    __cxa_throw interceptor when it starts; with libstdc++ loaded only later (by an
    extension module such as torch's or matplotlib's), the first C++ exception thrown in
    one of them stops the process with "real___cxa_throw != 0"."""
    try:
        out = subprocess.run(["ldd", lib_path], check=True, capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    found = {}
    for line in out.splitlines():
        for name in ("libasan.so", "libstdc++.so"):
            if name in line and "=>" in line:
                found[name] = line.split("=>")[1].split("(")[0].strip()
    if "libasan.so" not in found:
        return None
    return " ".join(found[n] for n in ("libasan.so", "libstdc++.so") if n in found)


def reexec_if_needed(lib_path):
    if os.environ.get("GPE_SANITIZER_PRELOADED") or lib_path is None:
        return
    runtime = _needed_runtime(lib_path)
    if not runtime:
        return
    env = dict(os.environ)
    env["GPE_SANITIZER_PRELOADED"] = "1"
    env["LD_PRELOAD"] = runtime + (" " + env["LD_PRELOAD"] if env.get("LD_PRELOAD") else "")
    # Appended: ASan takes the last occurrence of an option, and the test environment
    # already sets detect_leaks=1. allocator_may_return_null: an allocation beyond what
    # the machine can give fails as it does without ASan (NumPy raises MemoryError, the
    # library's new throws and the C ABI reports it) instead of aborting the process:
    # the property test draws sizes of 2^40 and more on purpose.
    prior = env.get("ASAN_OPTIONS", "")
    env["ASAN_OPTIONS"] = (prior + ":" if prior else "") + "detect_leaks=0:allocator_may_return_null=1"
    sys.stdout.flush()
    os.execve(sys.executable, [sys.executable] + sys.argv, env)
