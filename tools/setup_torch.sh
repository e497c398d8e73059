#!/usr/bin/env bash
# Makes PyTorch importable from the project's .venv for the gpe.torch and
# gpe.context_parallel tests (./bazelw test runs this; safe to run again).
#
#   tools/setup_torch.sh           install once per machine if missing, link into .venv
#   tools/setup_torch.sh --check   only say whether .venv imports torch (exit 1 if not)
#
# PyPI's torch wheel (the only index reachable) is about 5.4 GB with the CUDA libraries it
# pulls, and takes minutes to download: it is installed ONCE per machine into a shared
# directory under $HOME (GPE_TORCH_SITE overrides it), keyed by the interpreter version and
# bindings/python/requirements-torch.txt, and every checkout's .venv reaches it through a .pth
# file, so a fresh clone (CI) costs nothing after the first run on a machine.
# GPE_TORCH=0 skips all of this (the torch tests then skip with a message).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${GPE_VENV:-$root/.venv}"
req="$root/bindings/python/requirements-torch.txt"
check_only=0
case "${1:-}" in
  "") ;;
  --check) check_only=1 ;;
  *) echo "usage: tools/setup_torch.sh [--check]" >&2; exit 2 ;;
esac

py="$venv/bin/python3"
# Cheap check on every ./bazelw test (finds the package without importing it, ~0.1 s);
# a full import verifies a new link below.
have_torch() {
  [[ -x "$py" ]] && "$py" -c "import importlib.util as u, sys; sys.exit(u.find_spec('torch') is None)" 2>/dev/null
}
torch_version() { "$py" -c 'import importlib.metadata as m; print(m.version("torch"))'; }

if have_torch; then
  echo "setup_torch: torch $(torch_version) in $venv"
  exit 0
fi
if ((check_only)); then
  echo "setup_torch: $venv does not import torch (run tools/setup_torch.sh)" >&2
  exit 1
fi
if [[ "${GPE_TORCH:-1}" == 0 ]]; then
  echo "setup_torch: GPE_TORCH=0, not installing torch" >&2
  exit 1
fi
[[ -x "$py" ]] || { echo "setup_torch: no $py (./bazelw makes .venv first)" >&2; exit 1; }

pyver="$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
key="$(cat "$req" | sha256sum | cut -c1-12)"
site="${GPE_TORCH_SITE:-$HOME/.cache/grouppe/torch-py$pyver-$key}"

if [[ ! -f "$site/.complete" ]]; then
  parent="$(dirname "$site")"
  mkdir -p "$parent"
  free_kb="$(df -Pk "$parent" | awk 'NR == 2 {print $4}')"
  if ((free_kb < 8 * 1024 * 1024)); then
    echo "setup_torch: torch needs about 8 GB free; $((free_kb / 1024)) MB free under $parent" >&2
    exit 1
  fi
  # One installer at a time per machine; the others wait and reuse its result.
  exec 9>"$site.lock"
  flock 9
  if [[ ! -f "$site/.complete" ]]; then
    echo "setup_torch: installing $(grep -v '^#' "$req" | xargs) from PyPI into $site" \
         "(once per machine; several minutes)" >&2
    start=$(date +%s)
    rm -rf "$site.tmp"
    "$py" -m pip install --disable-pip-version-check --progress-bar off --no-input \
      --target "$site.tmp" -r "$req" </dev/null >&2
    rm -rf "$site"
    mv "$site.tmp" "$site"
    touch "$site/.complete"
    echo "setup_torch: installed in $(( $(date +%s) - start )) s" >&2
  fi
  flock -u 9
fi

purelib="$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
echo "$site" >"$purelib/grouppe_torch.pth"
if ! "$py" -c "import torch" 2>/dev/null; then
  rm -f "$purelib/grouppe_torch.pth"
  echo "setup_torch: $venv does not import torch from $site" >&2
  exit 1
fi
echo "setup_torch: torch $(torch_version) linked into $venv from $site"
