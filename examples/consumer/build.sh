#!/usr/bin/env bash
# Builds and runs examples/consumer, a separate Bazel workspace that depends on this
# repository as @grouppe (local_repository): the check that GroupPE is consumable from
# another workspace. Not part of `bazel test //...` (a nested Bazel server and a cold
# build of what main.cc needs cost minutes); .ci/run calls it after the fuzzers, or by hand:
#
#   examples/consumer/build.sh
#
# Uses ./bazelw once to install the Debian packages, then Debian's Bazel in this directory
# with an output base of this checkout's own (under $HOME/.cache, named by a hash of the
# checkout's path) and a disk cache only where GPE_BAZEL_DISK_CACHE names one (as bazelw:
# one cache shared between checkouts can serve an object built against another
# checkout's header).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
"$root/bazelw" --version >/dev/null  # packages and the .venv, as for GroupPE itself
key="$(printf '%s' "$root" | sha256sum | cut -c1-12)"
output_base="${GPE_CONSUMER_OUTPUT_BASE:-$HOME/.cache/grouppe/consumer-output-base-$key}"
cache=()
if [[ -n "${GPE_BAZEL_DISK_CACHE:-}" ]]; then
  mkdir -p "$GPE_BAZEL_DISK_CACHE"
  cache=(--disk_cache="$GPE_BAZEL_DISK_CACHE")
fi
cd "$here"
status=0
/usr/bin/bazel --output_base="$output_base" run "${cache[@]}" //:main || status=$?
# Stop the nested server so it does not hold memory after the check.
/usr/bin/bazel --output_base="$output_base" shutdown || true
exit $status
