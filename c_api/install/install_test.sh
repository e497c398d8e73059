#!/usr/bin/env bash
# Installs the C ABI into a temporary prefix with install.sh (what `bazel run
# //c_api:install -- PREFIX` runs), then builds and runs a small C program against the
# installed copy using only pkg-config: the path of a user without Bazel.
#
# Arguments (from Bazel): install.sh, gpe.h, dlpack.h, the shared library, consumer.c.
set -euo pipefail

install_sh="$1" header="$2" dlpack="$3" lib="$4" consumer="$5"
for tool in cc pkg-config; do
  if ! command -v "$tool" >/dev/null; then
    echo "SKIPPED: $tool is not installed; nothing to check the install with"
    exit 0
  fi
done

tmp="${TEST_TMPDIR:-$(mktemp -d)}"
prefix="$tmp/prefix"  # no spaces: pkg-config output is split on them
"$install_sh" "$header" "$dlpack" "$lib" "$prefix"

fail() { echo "FAIL: $*" >&2; exit 1; }
for f in include/gpe/gpe.h include/gpe/dlpack/dlpack.h lib/libgpe.so lib/pkgconfig/gpe.pc; do
  [[ -e "$prefix/$f" ]] || fail "install wrote no $f"
done
cmp -s "$header" "$prefix/include/gpe/gpe.h" || fail "installed gpe.h differs from the source"

major="$(sed -n 's/^#define GPE_VERSION_MAJOR \([0-9]*\).*/\1/p' "$header")"
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
[[ "$(pkg-config --modversion gpe)" == "$(sed -n 's/^#define GPE_VERSION_MAJOR \([0-9]*\).*/\1/p' "$header").$(sed -n 's/^#define GPE_VERSION_MINOR \([0-9]*\).*/\1/p' "$header").$(sed -n 's/^#define GPE_VERSION_PATCH \([0-9]*\).*/\1/p' "$header")" ]] ||
  fail "pkg-config --modversion gpe disagrees with gpe.h"
# Compiled as strict C99 outside Bazel, with only what pkg-config says.
# shellcheck disable=SC2046
eval "cc -std=c99 -Wall -Wextra -Werror -o \"$tmp/consumer\" \"$consumer\" $(pkg-config --cflags --libs gpe) -lm"
if command -v readelf >/dev/null; then
  readelf -d "$tmp/consumer" | grep -q "NEEDED.*\[libgpe.so.$major\]" ||
    fail "the program does not record libgpe.so.$major as NEEDED"
fi
LD_LIBRARY_PATH="$prefix/lib" "$tmp/consumer"
echo "PASS: installed into '$prefix', built with pkg-config, ran"
