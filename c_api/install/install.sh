#!/usr/bin/env bash
# Installs GroupPE's C ABI for users without Bazel:
#
#   ./bazelw run //c_api:install -- PREFIX
#
# writes
#   PREFIX/include/gpe/gpe.h and the per-area headers it includes (common.h, so.h, ...)
#   PREFIX/include/gpe/deps/dlpack/dlpack.h   (the DLPack header libgpe was built against, in
#                                        a directory of its own on the include path, so
#                                        that gpe's own headers, reached as "gpe/x.h", put
#                                        no generic names such as common.h on it)
#   PREFIX/lib/libgpe.so.MAJOR.MINOR.PATCH, libgpe.so.MAJOR -> it, libgpe.so -> libgpe.so.MAJOR
#   PREFIX/lib/libgpe.a                  (the static library: GroupPE's objects, C++ inside)
#   PREFIX/lib/libgpe_cuda.so            (where the build has the CUDA toolkit: the plugin
#                                        that runs attention on CUDA tensors, loaded by
#                                        libgpe.so from beside itself; gpe/attention.h)
#   PREFIX/lib/pkgconfig/gpe.pc
#   PREFIX/lib/cmake/GroupPE/GroupPEConfig.cmake, GroupPEConfigVersion.cmake
# so that `cc prog.c $(pkg-config --cflags --libs gpe)` builds against the shared library
# (with PKG_CONFIG_PATH=PREFIX/lib/pkgconfig when PREFIX is not a system prefix), and
# CMake's `find_package(GroupPE)` (CMAKE_PREFIX_PATH=PREFIX) gives the imported targets
# GroupPE::gpe (shared) and GroupPE::gpe_static (static, with the system libraries it
# needs: Abseil, Highway, OpenBLAS, libpng, libjpeg, the C++ runtime). The shared
# library's soname is libgpe.so.MAJOR and its symbols carry the version node of
# c_api/gpe.lds; the static library holds every object of the implementation.
#
# Bazel passes the files to install: the shared library, the static library, its link
# flags (a file), dlpack.h, every public header (c_api/include/gpe/*.h), then the CUDA
# plugin where there is one; PREFIX comes last.
set -euo pipefail

lib="$1" static="$2" static_linkopts="$3" dlpack="$4"
shift 4
headers=()
while [[ $# -gt 0 && "$1" == *.h ]]; do
  headers+=("$1")
  shift
done
# The CUDA plugin, where this build has one (libgpe.so loads it from beside itself).
plugin=""
if [[ $# -ge 1 && "$1" == */libgpe_cuda.so ]]; then
  plugin="$1"
  shift
fi
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

mkdir -p "$prefix/include/gpe/deps/dlpack" "$prefix/lib/pkgconfig"
rm -rf "$prefix/include/gpe/dlpack"  # an earlier install's place for it
prefix="$(cd "$prefix" && pwd)"
for h in "${headers[@]}"; do
  install -m 0644 "$h" "$prefix/include/gpe/$(basename "$h")"
done
install -m 0644 "$dlpack" "$prefix/include/gpe/deps/dlpack/dlpack.h"
install -m 0755 "$lib" "$prefix/lib/libgpe.so.$version"
ln -sf "libgpe.so.$version" "$prefix/lib/libgpe.so.$major"
ln -sf "libgpe.so.$major" "$prefix/lib/libgpe.so"
install -m 0644 "$static" "$prefix/lib/libgpe.a"
# Beside libgpe.so, where it looks for the plugin; a plugin of an earlier install goes when
# this build has none (it would be refused as another build's, but need not linger).
if [[ -n "$plugin" ]]; then
  install -m 0755 "$plugin" "$prefix/lib/libgpe_cuda.so"
else
  rm -f "$prefix/lib/libgpe_cuda.so"
fi
# The static library's own dependencies (the C++ runtime last: libgpe.a is C++ inside,
# and a C program's link does not add it).
private="$(cat "$static_linkopts") -lstdc++ -lm"

# pkg-config splits its flags at spaces: a prefix with whitespace gets no gpe.pc (CMake's
# files quote their paths and still work).
if [[ "$prefix" =~ [[:space:]] ]]; then
  echo "install: the prefix contains whitespace, which pkg-config cannot carry; gpe.pc not" \
    "written (use CMake's package or -I / -L by hand)" >&2
  rm -f "$prefix/lib/pkgconfig/gpe.pc"
else
cat >"$prefix/lib/pkgconfig/gpe.pc" <<PC
prefix=$prefix
includedir=\${prefix}/include
libdir=\${prefix}/lib

Name: gpe
Description: GroupPE positional encodings from group theory: the stable C ABI
Version: $version
Cflags: -I\${includedir} -I\${includedir}/gpe/deps
Libs: -L\${libdir} -lgpe
Libs.private: $private
PC
fi

# CMake's package: the two imported targets, from the prefix the files sit in (so a
# relocated prefix still works), and a version file that accepts any request with the
# same major version and a minor version no newer (the ABI's rule, gpe/common.h).
cmake_dir="$prefix/lib/cmake/GroupPE"
mkdir -p "$cmake_dir"
# The static link flags as a CMake list: -l and -L flags and -pthread pass to the linker as
# given; --push-state groups stay in order.
cmake_libs="$(sed 's/  */;/g; s/^;//; s/;$//' <<<"$private")"
cat >"$cmake_dir/GroupPEConfig.cmake" <<CMAKE
# GroupPE $version: find_package(GroupPE) gives
#   GroupPE::gpe         the shared library libgpe.so.$major (the stable C ABI, gpe/gpe.h)
#   GroupPE::gpe_static  the static library libgpe.a with the system libraries it needs
# Written by GroupPE's install.sh.
get_filename_component(_gpe_prefix "\${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)
if(NOT TARGET GroupPE::gpe)
  add_library(GroupPE::gpe SHARED IMPORTED)
  set_target_properties(GroupPE::gpe PROPERTIES
    IMPORTED_LOCATION "\${_gpe_prefix}/lib/libgpe.so.$version"
    IMPORTED_SONAME "libgpe.so.$major"
    INTERFACE_INCLUDE_DIRECTORIES "\${_gpe_prefix}/include;\${_gpe_prefix}/include/gpe/deps")
endif()
if(NOT TARGET GroupPE::gpe_static)
  find_package(Threads REQUIRED)
  add_library(GroupPE::gpe_static STATIC IMPORTED)
  set_target_properties(GroupPE::gpe_static PROPERTIES
    IMPORTED_LOCATION "\${_gpe_prefix}/lib/libgpe.a"
    IMPORTED_LINK_INTERFACE_LANGUAGES "CXX"
    INTERFACE_INCLUDE_DIRECTORIES "\${_gpe_prefix}/include;\${_gpe_prefix}/include/gpe/deps"
    INTERFACE_LINK_LIBRARIES "Threads::Threads;$cmake_libs")
endif()
unset(_gpe_prefix)
set(GroupPE_VERSION "$version")
CMAKE
cat >"$cmake_dir/GroupPEConfigVersion.cmake" <<CMAKE
# GroupPE $version: compatible with requests for $major.x where x <= $minor.
set(PACKAGE_VERSION "$version")
if(PACKAGE_FIND_VERSION_MAJOR STREQUAL "$major" AND
   NOT PACKAGE_FIND_VERSION VERSION_GREATER PACKAGE_VERSION)
  set(PACKAGE_VERSION_COMPATIBLE TRUE)
  if(PACKAGE_FIND_VERSION VERSION_EQUAL PACKAGE_VERSION)
    set(PACKAGE_VERSION_EXACT TRUE)
  endif()
else()
  set(PACKAGE_VERSION_COMPATIBLE FALSE)
endif()
CMAKE

# A library directory the dynamic loader finds through its cache (e.g. /usr/local/lib on
# Debian, listed in /etc/ld.so.conf.d) needs the cache rebuilt before programs find the new
# soname there; as root that is done here.
if grep -qsxF "$prefix/lib" /etc/ld.so.conf /etc/ld.so.conf.d/*.conf; then
  if [[ $(id -u) -eq 0 ]] && command -v ldconfig >/dev/null; then
    ldconfig
    echo "ran ldconfig ($prefix/lib is in the loader's configuration)"
  else
    echo "install: run ldconfig as root so that programs find libgpe.so.$major in $prefix/lib" >&2
  fi
fi

echo "installed GroupPE $version into $prefix"
echo "  build: cc prog.c \$(PKG_CONFIG_PATH=$prefix/lib/pkgconfig pkg-config --cflags --libs gpe)"
echo "  run:   LD_LIBRARY_PATH=$prefix/lib ./a.out   (or link with -Wl,-rpath,$prefix/lib)"
echo "  CMake: find_package(GroupPE) with CMAKE_PREFIX_PATH=$prefix; GroupPE::gpe or GroupPE::gpe_static"
