#!/usr/bin/env bash
# Installs the C ABI into a temporary prefix with install.sh (what `bazel run
# //c_api:install -- PREFIX` runs), then builds and runs a small C program against the
# installed copy using only pkg-config: the path of a user without Bazel.
#
# Arguments (from Bazel): install.sh, the shared library, dlpack.h, every public header
# (gpe.h and the per-area headers), consumer.c.
set -euo pipefail

install_sh="$1" lib="$2" dlpack="$3"
shift 3
consumer="${@: -1}"
headers=("${@:1:$#-1}")
for tool in cc pkg-config; do
  if ! command -v "$tool" >/dev/null; then
    echo "SKIPPED: $tool is not installed; nothing to check the install with"
    exit 0
  fi
done

tmp="${TEST_TMPDIR:-$(mktemp -d)}"
prefix="$tmp/prefix"  # no spaces: pkg-config output is split on them
"$install_sh" "$lib" "$dlpack" "${headers[@]}" "$prefix"

fail() { echo "FAIL: $*" >&2; exit 1; }
for f in include/gpe/gpe.h include/gpe/dlpack/dlpack.h lib/libgpe.so lib/pkgconfig/gpe.pc; do
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
