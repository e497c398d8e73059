#!/usr/bin/env bash
# Builds and runs examples/consumer, a separate Bazel workspace that depends on this
# repository as @grouppe (local_repository): the check that GroupPE is consumable from
# another workspace. Not part of `bazel test //...` (a nested Bazel server and a cold
# build of what main.cc needs cost minutes); .ci/run calls it after the fuzzers, or by hand:
#
#   examples/consumer/build.sh
#
# Uses ./bazelw once to install the Debian packages, then Bazel in this directory with
# its own output base (under $HOME/.cache) and GroupPE's disk cache.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
"$root/bazelw" --version >/dev/null  # packages and the .venv, as for GroupPE itself
cache="${GPE_BAZEL_DISK_CACHE:-$HOME/.cache/grouppe/bazel-disk-cache}"
output_base="${GPE_CONSUMER_OUTPUT_BASE:-$HOME/.cache/grouppe/consumer-output-base}"
mkdir -p "$cache"
cd "$here"
status=0
bazel --output_base="$output_base" run --disk_cache="$cache" //:main || status=$?
# Stop the nested server so it does not hold memory after the check.
bazel --output_base="$output_base" shutdown || true
exit $status
