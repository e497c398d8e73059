#!/usr/bin/env bash
# Installs GroupPE's C ABI for users without Bazel:
#
#   ./bazelw run //c_api:install -- PREFIX
#
# writes
#   PREFIX/include/gpe/gpe.h and the per-area headers it includes (common.h, so.h, ...)
#   PREFIX/include/gpe/dlpack/dlpack.h   (the DLPack header libgpe was built against)
#   PREFIX/lib/libgpe.so.MAJOR.MINOR.PATCH, libgpe.so.MAJOR -> it, libgpe.so -> libgpe.so.MAJOR
#   PREFIX/lib/pkgconfig/gpe.pc
# so that `cc prog.c $(pkg-config --cflags --libs gpe)` builds against it (with
# PKG_CONFIG_PATH=PREFIX/lib/pkgconfig when PREFIX is not a system prefix). The library's
# soname is libgpe.so.MAJOR and its symbols carry the version node of c_api/gpe.lds.
#
# Bazel passes the files to install: the library, dlpack.h, then every public header
# (c_api/include/gpe/*.h); PREFIX comes last.
set -euo pipefail

lib="$1" dlpack="$2"
shift 2
headers=()
while [[ $# -gt 0 && "$1" == *.h ]]; do
  headers+=("$1")
  shift
done
if [[ ${#headers[@]} -eq 0 || $# -ne 1 || -z "$1" || "$1" == -* ]]; then
  echo "usage: bazel run //c_api:install -- PREFIX" >&2
  exit 2
fi
prefix="$1"
# `bazel run` starts in the runfiles tree: a relative PREFIX means the caller's directory.
if [[ "$prefix" != /* && -n "${BUILD_WORKING_DIRECTORY:-}" ]]; then
  prefix="$BUILD_WORKING_DIRECTORY/$prefix"
fi

# The version comes from the headers (gpe/common.h), so the file names and gpe.pc follow
# it.
version_part() {
  local v
  v="$(sed -n "s/^#define GPE_VERSION_$1 \([0-9][0-9]*\).*/\1/p" "${headers[@]}")"
  [[ -n "$v" ]] || { echo "install: no GPE_VERSION_$1 in ${headers[*]}" >&2; exit 1; }
  echo "$v"
}
major="$(version_part MAJOR)"
minor="$(version_part MINOR)"
patch="$(version_part PATCH)"
version="$major.$minor.$patch"

mkdir -p "$prefix/include/gpe/dlpack" "$prefix/lib/pkgconfig"
prefix="$(cd "$prefix" && pwd)"
for h in "${headers[@]}"; do
  install -m 0644 "$h" "$prefix/include/gpe/$(basename "$h")"
done
install -m 0644 "$dlpack" "$prefix/include/gpe/dlpack/dlpack.h"
install -m 0755 "$lib" "$prefix/lib/libgpe.so.$version"
ln -sf "libgpe.so.$version" "$prefix/lib/libgpe.so.$major"
ln -sf "libgpe.so.$major" "$prefix/lib/libgpe.so"

cat >"$prefix/lib/pkgconfig/gpe.pc" <<PC
prefix=$prefix
includedir=\${prefix}/include
libdir=\${prefix}/lib

Name: gpe
Description: GroupPE positional encodings from group theory: the stable C ABI
Version: $version
Cflags: -I\${includedir} -I\${includedir}/gpe
Libs: -L\${libdir} -lgpe
PC

echo "installed GroupPE $version into $prefix"
echo "  build: cc prog.c \$(PKG_CONFIG_PATH=$prefix/lib/pkgconfig pkg-config --cflags --libs gpe)"
echo "  run:   LD_LIBRARY_PATH=$prefix/lib ./a.out   (or link with -Wl,-rpath,$prefix/lib)"
