#!/usr/bin/env bash
# Makes Hugging Face transformers importable from the project's .venv for the golden tests
# of gpe.Rope.from_hf_config and gpe.torch.RotaryEmbedding (./bazelw test runs this after
# tools/setup_torch.sh; safe to run again).
#
#   tools/setup_transformers.sh           install bindings/python/requirements-hf.txt if missing
#   tools/setup_transformers.sh --check   only say whether .venv imports transformers
#
# transformers and its pure-Python dependencies are small (about 30 MB of wheels, seconds
# from PyPI's cache), so unlike torch they go into .venv itself; pip sees torch and NumPy
# there already (torch through tools/setup_torch.sh's .pth file) and leaves them alone.
# GPE_TRANSFORMERS=0 (or GPE_TORCH=0: the tests need both) skips it; the tests then skip
# with a message. Nothing in the library or in `import gpe` needs transformers.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${GPE_VENV:-$root/.venv}"
req="$root/bindings/python/requirements-hf.txt"
py="$venv/bin/python3"
check_only=0
case "${1:-}" in
  "") ;;
  --check) check_only=1 ;;
  *) echo "usage: tools/setup_transformers.sh [--check]" >&2; exit 2 ;;
esac

# Installed and within requirements-hf.txt's range (a version outside it is replaced).
have_transformers() {
  [[ -x "$py" ]] && "$py" - "$req" <<'PY' 2>/dev/null
import importlib.metadata as m, sys
try:
    from packaging.requirements import Requirement
except ImportError:  # a bare venv: pip's own copy
    from pip._vendor.packaging.requirements import Requirement
reqs = [Requirement(l.strip()) for l in open(sys.argv[1]) if l.strip() and not l.startswith("#")]
sys.exit(0 if all(m.version(r.name) in r.specifier for r in reqs) else 1)
PY
}
version() { "$py" -c 'import importlib.metadata as m; print(m.version("transformers"))'; }

if have_transformers; then
  echo "setup_transformers: transformers $(version) in $venv"
  exit 0
fi
if ((check_only)); then
  echo "setup_transformers: $venv lacks transformers in range (run tools/setup_transformers.sh)" >&2
  exit 1
fi
if [[ "${GPE_TRANSFORMERS:-1}" == 0 || "${GPE_TORCH:-1}" == 0 ]]; then
  echo "setup_transformers: GPE_TRANSFORMERS=0 or GPE_TORCH=0, not installing transformers" >&2
  exit 1
fi
[[ -x "$py" ]] || { echo "setup_transformers: no $py (./bazelw makes .venv first)" >&2; exit 1; }
echo "setup_transformers: installing $(grep -v '^#' "$req" | xargs) from PyPI into $venv" >&2
"$py" -m pip install -q --disable-pip-version-check --progress-bar off --no-input -r "$req" \
  </dev/null >&2
have_transformers || { echo "setup_transformers: $venv still lacks transformers" >&2; exit 1; }
echo "setup_transformers: transformers $(version) installed in $venv"
