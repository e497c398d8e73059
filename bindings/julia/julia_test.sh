#!/usr/bin/env bash
# Runs the Julia bindings' tests (bindings/julia/test/runtests.jl) against the Bazel-built
# libgpe.so where a julia binary exists; skips with a message where none does (Debian 12
# ships no julia package).
#
# Arguments (from Bazel): libgpe.so, runtests.jl.
set -euo pipefail
lib="$(readlink -f "$1")"
tests="$(readlink -f "$2")"
julia="${JULIA:-$(command -v julia || true)}"
if [[ -z "$julia" ]]; then
  echo "SKIPPED: no julia binary on PATH (set JULIA=/path/to/julia to run the Julia tests)"
  exit 0
fi
# The module (GroupPE.jl and the src/ files it includes) sits next to test/: include it
# from the real (non-runfiles) tree.
export GPE_LIBRARY="$lib"
export JULIA_DEPOT_PATH="${TEST_TMPDIR:-$(mktemp -d)}/julia_depot:"
exec "$julia" --startup-file=no --history-file=no "$tests"
