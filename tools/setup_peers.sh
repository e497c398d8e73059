#!/usr/bin/env bash
# Installs the peers `gpe bench` measures GroupPE against into the project-local .venv
# (the one ./bazelw makes for the Python tests), from PyPI:
#   torch       PyTorch's CPU attention (scaled_dot_product_attention) and RoPE
#   numpy       NumPy with its OpenBLAS, for the INR closed form
#   matplotlib  the PNG plots `gpe bench` writes
#
#   tools/setup_peers.sh          install what is missing (safe to run again)
#   tools/setup_peers.sh --check  only report what is installed; exit 1 if something lacks
#
# Only PyPI is reachable, so torch is PyPI's default wheel: it runs on CPUs and also pulls
# its nvidia-* CUDA libraries (about 5.4 GB on disk in all, minutes to download); it is
# installed once per machine by tools/setup_torch.sh and linked into .venv.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$root/.venv"
check_only=0
case "${1:-}" in
  "") ;;
  --check) check_only=1 ;;
  *) echo "usage: tools/setup_peers.sh [--check]" >&2; exit 2 ;;
esac

# module name -> pip requirement
modules=(torch numpy matplotlib)
declare -A requirement=([torch]="torch>=2.1" [numpy]="numpy>=1.24" [matplotlib]="matplotlib>=3.5")

have() { [[ -x "$venv/bin/python3" ]] && "$venv/bin/python3" -c "import $1" 2>/dev/null; }

missing=()
for m in "${modules[@]}"; do
  if have "$m"; then
    echo "setup_peers: $m $("$venv/bin/python3" -c "import $m; print($m.__version__)") already in $venv"
  else
    missing+=("$m")
  fi
done
if ((${#missing[@]} == 0)); then
  echo "setup_peers: all peers installed; run ./bazelw run //tools:gpe -- bench"
  exit 0
fi
if ((check_only)); then
  echo "setup_peers: missing from $venv: ${missing[*]} (run tools/setup_peers.sh)" >&2
  exit 1
fi

if [[ ! -x "$venv/bin/python3" ]]; then
  python="$(command -v python3 || true)"
  [[ -n "$python" ]] || { echo "setup_peers: python3 not found" >&2; exit 1; }
  echo "setup_peers: creating $venv"
  "$python" -m venv "$venv"
fi

# torch: the machine-wide install that ./bazelw test uses too (tools/setup_torch.sh).
if [[ " ${missing[*]} " == *" torch "* ]]; then
  "$root/tools/setup_torch.sh"
  rest=()
  for m in "${missing[@]}"; do [[ $m == torch ]] || rest+=("$m"); done
  missing=("${rest[@]}")
fi
if ((${#missing[@]} == 0)); then
  echo "setup_peers: done; run ./bazelw run //tools:gpe -- bench"
  exit 0
fi

reqs=()
for m in "${missing[@]}"; do reqs+=("${requirement[$m]}"); done
echo "setup_peers: installing ${reqs[*]} into $venv from PyPI (torch takes a few minutes)"
"$venv/bin/python3" -m pip install --disable-pip-version-check --progress-bar off "${reqs[@]}" </dev/null

for m in "${missing[@]}"; do
  have "$m" || { echo "setup_peers: $m still does not import after pip install" >&2; exit 1; }
done
echo "setup_peers: done; run ./bazelw run //tools:gpe -- bench"
