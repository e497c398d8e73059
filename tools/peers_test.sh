#!/usr/bin/env bash
# The peers' scripts behave as `gpe bench` relies on, whatever the interpreter has:
# one JSON line per case (a time, or an error such as "no torch"), plots or a "skipped"
# message, and setup_peers.sh's --check reports without installing.
set -uo pipefail
fail() { echo "FAIL: $*"; exit 1; }
torch_py="$1" plot_py="$2" setup="$3"
python="$(command -v python3)" || fail "no python3"
cd "${TEST_TMPDIR:-$(mktemp -d)}" || fail "no scratch directory"

out="$("$python" "$OLDPWD/$torch_py" 1 1 "sdpa,hq=2,sq=8,d=16,causal=1" "rope,s=8,h=2,d=16" "bogus")" ||
  fail "attention_torch.py exited $?"
[[ $(wc -l <<<"$out") -eq 3 ]] || fail "expected 3 JSON lines: $out"
while read -r line; do
  grep -qE '"(seconds|error)": ' <<<"$line" || fail "a line has neither a time nor an error: $line"
  grep -q '"case": ' <<<"$line" || fail "a line does not name its case: $line"
done <<<"$out"
grep -q "unknown case kind 'bogus'\|no torch" <<<"$(sed -n 3p <<<"$out")" || fail "bogus case not rejected: $out"
"$python" "$OLDPWD/$torch_py" >/dev/null 2>&1 && fail "attention_torch.py without arguments exited 0"

cat >bench.json <<'JSON'
{"threads": 2, "fma_peak_gflops": 300, "triad_gbs": 20, "isa": "AVX3",
 "attention_sweep": [{"s": 64, "causal": false, "heads": 2, "head_dim": 64, "grouppe_s": 0.001, "torch_s": null},
  {"s": 64, "causal": true, "heads": 2, "head_dim": 64, "grouppe_s": 0.0006, "torch_s": 0.0007}],
 "rope_sweep": [{"s": 16, "bytes": 262144, "grouppe_gbs": 30, "torch_eager_gbs": 2}]}
JSON
out="$("$python" "$OLDPWD/$plot_py" bench.json .)" || fail "plot_bench.py exited $?: $out"
if grep -q "plot_bench: skipped" <<<"$out"; then
  [[ ! -e attention_vs_seqlen.png ]] || fail "skipped yet wrote a plot"
else
  [[ -s attention_vs_seqlen.png && -s rope_bandwidth.png ]] || fail "no plots and no message: $out"
  # Written through a temporary file and a rename: none is left behind.
  ! compgen -G "*.tmp.*" >/dev/null || fail "plot_bench.py left temporary files: $(ls)"
fi

"$OLDPWD/$setup" --bogus >/dev/null 2>&1; [[ $? -eq 2 ]] || fail "setup_peers.sh --bogus did not exit 2"
# In the runfiles tree there is no .venv: --check must say what is missing, exit 1, install nothing.
err="$("$OLDPWD/$setup" --check 2>&1)"; rc=$?
if [[ -d "$(dirname "$OLDPWD/$setup")/../.venv" ]]; then
  [[ $rc -eq 0 || $rc -eq 1 ]] || fail "setup_peers.sh --check exited $rc: $err"
else
  [[ $rc -eq 1 ]] || fail "setup_peers.sh --check without .venv exited $rc: $err"
  grep -q "missing from" <<<"$err" || fail "setup_peers.sh --check did not say what is missing: $err"
  [[ ! -d "$(dirname "$OLDPWD/$setup")/../.venv" ]] || fail "setup_peers.sh --check created a .venv"
fi
echo "PASS"
