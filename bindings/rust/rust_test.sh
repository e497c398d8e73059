#!/usr/bin/env bash
# `cargo test --offline` of the Rust bindings (bindings/rust) against the Bazel-built
# libgpe.so. Prefers Debian's cargo and rustc (the cargo package ./bazelw installs);
# skips with a message where no cargo exists. Everything cargo writes stays in
# TEST_TMPDIR: a copy of the crate, its target dir and CARGO_HOME.
#
# Arguments (from Bazel): libgpe.so, Cargo.toml (the crate is the directory holding it).
set -euo pipefail

lib="$(readlink -f "$1")"
crate="$(dirname "$(readlink -f "$2")")"

if [[ -x /usr/bin/cargo && -x /usr/bin/rustc ]]; then
  cargo=/usr/bin/cargo
  export RUSTC=/usr/bin/rustc
elif command -v cargo >/dev/null; then
  cargo="$(command -v cargo)"
else
  echo "SKIPPED: no cargo found (Debian: apt-get install cargo; ./bazelw installs it)"
  exit 0
fi
echo "using $("$cargo" --version) with $("${RUSTC:-rustc}" --version)"

tmp="${TEST_TMPDIR:-$(mktemp -d)}"
# A plain copy: cargo writes Cargo.lock next to Cargo.toml, and runfiles are read-only.
work="$tmp/crate"
rm -rf "$work"
mkdir -p "$work"
cp -rL "$crate/Cargo.toml" "$crate/build.rs" "$crate/src" "$crate/tests" "$work/"
# The library under the name the linker looks for (-lgpe).
libdir="$tmp/lib"
mkdir -p "$libdir"
ln -sf "$lib" "$libdir/libgpe.so"

if [[ "$cargo" == /usr/bin/cargo ]]; then export CARGO_HOME="$tmp/cargo_home"; fi
export CARGO_TARGET_DIR="$tmp/target"
export GPE_LIB_DIR="$libdir"
export LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
cd "$work"
"$cargo" test --offline --quiet
