#!/usr/bin/env bash
# Installs the C ABI into a temporary prefix with install.sh (what `bazel run
# //c_api:install -- PREFIX` runs), then builds and runs a small C program against the
# installed copy using only pkg-config: the path of a user without Bazel; then (where
# cmake is installed) c_api/install/cmake_consumer, a C++ program found through
# find_package(GroupPE), linked once to the shared and once to the static library.
#
# Arguments (from Bazel): install.sh, the shared library, the static library, its link
# flags, dlpack.h, every public header (gpe.h and the per-area headers), consumer.c, then
# the CMake example's CMakeLists.txt and main.cc.
set -euo pipefail

install_sh="$1" lib="$2" static="$3" static_linkopts="$4" dlpack="$5"
shift 5
cmake_lists="${@: -2:1}" cmake_main="${@: -1}"
consumer="${@: -3:1}"
headers=("${@:1:$#-3}")
for tool in cc pkg-config; do
  if ! command -v "$tool" >/dev/null; then
    echo "SKIPPED: $tool is not installed; nothing to check the install with"
    exit 0
  fi
done

tmp="${TEST_TMPDIR:-$(mktemp -d)}"
prefix="$tmp/prefix"  # no spaces: pkg-config output is split on them
"$install_sh" "$lib" "$static" "$static_linkopts" "$dlpack" "${headers[@]}" "$prefix"

fail() { echo "FAIL: $*" >&2; exit 1; }
# The CUDA plugin, where the build has one, lands beside libgpe.so; an install without it
# removes an earlier one (a stand-in file: install.sh only copies it).
mkdir -p "$tmp/plugin"
echo "stand-in" >"$tmp/plugin/libgpe_cuda.so"
"$install_sh" "$lib" "$static" "$static_linkopts" "$dlpack" "${headers[@]}" \
  "$tmp/plugin/libgpe_cuda.so" "$tmp/with_plugin"
[[ -x "$tmp/with_plugin/lib/libgpe_cuda.so" ]] || fail "the CUDA plugin was not installed in lib/"
"$install_sh" "$lib" "$static" "$static_linkopts" "$dlpack" "${headers[@]}" "$tmp/with_plugin"
[[ ! -e "$tmp/with_plugin/lib/libgpe_cuda.so" ]] || fail "an earlier install's plugin stayed"

# A prefix with a space: pkg-config cannot carry it, so no gpe.pc (rather than one whose
# -I flags split into wrong paths); the rest installs.
spaced="$tmp/with space"
"$install_sh" "$lib" "$static" "$static_linkopts" "$dlpack" "${headers[@]}" "$spaced" 2>"$tmp/spaced.err" ||
  fail "install into a prefix with a space failed: $(cat "$tmp/spaced.err")"
[[ ! -e "$spaced/lib/pkgconfig/gpe.pc" ]] || fail "a gpe.pc was written under a prefix with a space"
[[ -e "$spaced/lib/cmake/GroupPE/GroupPEConfig.cmake" && -e "$spaced/lib/libgpe.so" ]] ||
  fail "the prefix with a space got no library or CMake package"
grep -q "pkg-config cannot carry" "$tmp/spaced.err" || fail "no message on the skipped gpe.pc"
for f in include/gpe/gpe.h include/gpe/deps/dlpack/dlpack.h lib/libgpe.so lib/libgpe.a \
         lib/pkgconfig/gpe.pc lib/cmake/GroupPE/GroupPEConfig.cmake \
         lib/cmake/GroupPE/GroupPEConfigVersion.cmake; do
  [[ -e "$prefix/$f" ]] || fail "install wrote no $f"
done
# Every public header, as in the source (the consumer below compiles against them all
# through gpe.h's includes).
for h in "${headers[@]}"; do
  cmp -s "$h" "$prefix/include/gpe/$(basename "$h")" ||
    fail "installed $(basename "$h") differs from the source (or is missing)"
done
version_part() { sed -n "s/^#define GPE_VERSION_$1 \([0-9]*\).*/\1/p" "${headers[@]}"; }

major="$(version_part MAJOR)"
if command -v readelf >/dev/null; then
  soname="$(readelf -d "$prefix/lib/libgpe.so" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')"
  [[ "$soname" == "libgpe.so.$major" ]] || fail "soname is '$soname'; expected libgpe.so.$major"
  # The version script's node: every gpe_* symbol is exported as NAME@@GPE_0. (The
  # symbol table is read once: `readelf | grep -q` under pipefail fails whenever grep
  # exits before readelf has written everything, SIGPIPE.)
  dynsyms="$(readelf --dyn-syms -W "$prefix/lib/libgpe.so")"
  grep -q ' gpe_version@@GPE_0$' <<<"$dynsyms" ||
    fail "gpe_version is not exported under the GPE_0 version node"
  others="$(awk '$7 != "UND" && $5 == "GLOBAL" && $8 !~ /^gpe_/ && $8 != "GPE_0" {print $8}' \
    <<<"$dynsyms")"
  [[ -z "$others" ]] || fail "symbols outside gpe_* are exported: $others"
fi

export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
# The include path gpe.pc gives holds gpe/ and dlpack/ only: no generic header names
# (gpe's common.h, image.h, ...) that a user's "common.h" could resolve to.
for dir in $(pkg-config --cflags-only-I gpe | sed 's/-I//g'); do
  [[ ! -e "$dir/common.h" ]] || fail "gpe.pc puts $dir/common.h on the include path"
done
[[ "$(pkg-config --modversion gpe)" == "$major.$(version_part MINOR).$(version_part PATCH)" ]] ||
  fail "pkg-config --modversion gpe disagrees with gpe/common.h"
# Compiled as strict C99 outside Bazel, with only what pkg-config says.
# shellcheck disable=SC2046
eval "cc -std=c99 -Wall -Wextra -Werror -o \"$tmp/consumer\" \"$consumer\" $(pkg-config --cflags --libs gpe) -lm"
if command -v readelf >/dev/null; then
  readelf -d "$tmp/consumer" | grep -q "NEEDED.*\[libgpe.so.$major\]" ||
    fail "the program does not record libgpe.so.$major as NEEDED"
fi
LD_LIBRARY_PATH="$prefix/lib" "$tmp/consumer"
echo "PASS: installed into '$prefix', built with pkg-config, ran"

# The same C program linked statically with what `pkg-config --static` says: it must not
# need libgpe.so at run time.
# shellcheck disable=SC2046
eval "cc -std=c99 -Wall -Wextra -Werror -o \"$tmp/consumer_static\" \"$consumer\" \
  $(pkg-config --cflags gpe) \"$prefix/lib/libgpe.a\" $(pkg-config --static --libs gpe | sed 's/-lgpe\( \|$\)/\1/')"
if command -v readelf >/dev/null && readelf -d "$tmp/consumer_static" | grep -q 'NEEDED.*libgpe'; then
  fail "the statically linked program still needs libgpe.so"
fi
"$tmp/consumer_static"
echo "PASS: linked with libgpe.a and pkg-config --static, ran"

if ! command -v cmake >/dev/null; then
  echo "SKIPPED: cmake is not installed; the CMake package is not checked"
  exit 0
fi
# c_api/install/cmake_consumer as a user would build it: a copy outside the source tree,
# CMAKE_PREFIX_PATH pointing at the prefix, nothing else.
src="$tmp/cmake_consumer"
mkdir -p "$src"
cp "$cmake_lists" "$src/CMakeLists.txt"
cp "$cmake_main" "$src/main.cc"
cmake -S "$src" -B "$tmp/cmake_build" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release \
  >"$tmp/cmake.log" 2>&1 || { cat "$tmp/cmake.log"; fail "cmake could not configure the example"; }
cmake --build "$tmp/cmake_build" >>"$tmp/cmake.log" 2>&1 ||
  { cat "$tmp/cmake.log"; fail "the CMake example did not build"; }
if command -v readelf >/dev/null; then
  readelf -d "$tmp/cmake_build/consumer_shared" | grep -q "NEEDED.*\[libgpe.so.$major\]" ||
    fail "GroupPE::gpe did not link libgpe.so.$major"
  if readelf -d "$tmp/cmake_build/consumer_static" | grep -q 'NEEDED.*libgpe'; then
    fail "GroupPE::gpe_static linked libgpe.so"
  fi
fi
LD_LIBRARY_PATH="$prefix/lib" "$tmp/cmake_build/consumer_shared"
"$tmp/cmake_build/consumer_static"
echo "PASS: find_package(GroupPE) from CMake, shared and static, ran"
