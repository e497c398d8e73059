#!/usr/bin/env bash
# Packs the GPU check into one tar: bin/ (the CUDA tests and benchmarks, debug info
# stripped), lib/ (every shared library they load that a GPU machine may lack: Abseil,
# gtest, Google Benchmark, cudart; never the driver's libcuda, nor glibc, libstdc++,
# libgcc_s, nor cuBLAS / cuSOLVER, which are hundreds of MB and come with the GPU
# machine's CUDA), and the peers' script. Called by the :gpu_bundle genrule:
#   make_bundle.sh OUT.tar FILE...   (executables go to bin/, shared libraries (*.so:
#                                     libgpe.so, its CUDA plugin) to lib/, the Python
#                                     package and its tests to python/, other *.py to the
#                                     top)
# Fails when the bundle would exceed 60 MiB (a device call carries at most 64 MiB).
set -euo pipefail
out="$1"; shift
stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib"
mkdir -p "$stage/python/gpe"
for f in "$@"; do
  case "$f" in
    */bindings/python/gpe/*.py | bindings/python/gpe/*.py) cp "$f" "$stage/python/gpe/" ;;
    */bindings/python/*.py | bindings/python/*.py) cp "$f" "$stage/python/" ;;
    *.py) cp "$f" "$stage/" ;;
    *.so) cp "$f" "$stage/lib/"; chmod u+w "$stage/lib/$(basename "$f")"
          strip --strip-debug "$stage/lib/$(basename "$f")" ;;
    *) cp "$f" "$stage/bin/"; chmod u+w "$stage/bin/$(basename "$f")"
       strip --strip-debug "$stage/bin/$(basename "$f")" ;;
  esac
done
skip='^(linux-vdso|ld-linux|libc\.so|libm\.so|libpthread|libdl\.so|librt\.so|libstdc\+\+|libgcc_s|libcuda\.so|libcublas|libcublasLt|libcusolver|libcusparse|libnvJitLink)'
for b in "$stage"/bin/* "$stage"/lib/*.so; do
  [[ -e "$b" ]] || continue
  # "name => /path (addr)" lines; a missing library is an error here, not on the GPU.
  # Libraries staged in lib/ (libgpe.so) resolve from there, as on the GPU machine.
  deps="$(LD_LIBRARY_PATH="$stage/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" ldd "$b")"
  if grep -q "not found" <<<"$deps"; then echo "make_bundle: $b: $(grep 'not found' <<<"$deps")" >&2; exit 1; fi
  awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' <<<"$deps" | while read -r name path; do
    if [[ "$name" =~ $skip ]]; then continue; fi
    [[ -e "$stage/lib/$name" ]] || cp -L "$path" "$stage/lib/$name"
  done
done
size=$(du -sk "$stage" | cut -f1)
if (( size > 60 * 1024 )); then echo "make_bundle: ${size} KiB, over 60 MiB" >&2; exit 1; fi
tar -C "$stage" -cf "$out" --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 .
