#!/usr/bin/env bash
# The GPU check's plumbing on a machine without a GPU: the bundle holds every binary and
# the peers' script, every library a binary needs resolves from bin/ + lib/ + the libraries
# left to the GPU machine (cuBLAS, the driver, glibc, libstdc++), and run_gpu_check.sh runs
# end to end: each test binary runs and skips (exit 0), and results.json lists them.
set -euo pipefail
bundle_tar="tools/cuda_check/gpu_bundle.tar"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir "$work/b"
tar -xf "$bundle_tar" -C "$work/b"
for f in axpy_test attention_cuda_plugin_test cuda_attention_benchmark cuda_attention_test \
         rope_cuda_benchmark rope_cuda_test gpu_limits_main gpu_limits_test \
         closed_form_cuda_benchmark closed_form_cuda_test; do
  [[ -x "$work/b/bin/$f" ]] || { echo "FAIL: bin/$f missing"; exit 1; }
done
[[ -f "$work/b/torch_peers.py" ]] || { echo "FAIL: torch_peers.py missing"; exit 1; }
ls "$work/b/lib" | grep -q '^libcudart\.so' || { echo "FAIL: cudart not bundled"; exit 1; }
for f in lib/libgpe_cuda.so lib/libgpe.so python/gpe/torch.py python/torch_cuda_test.py; do
  [[ -f "$work/b/$f" ]] || { echo "FAIL: $f missing"; exit 1; }
done
# The libraries make_bundle.sh leaves to the GPU machine (its `skip`).
left='^(linux-vdso|ld-linux|libc\.so|libm\.so|libpthread|libdl\.so|librt\.so|libstdc\+\+|libgcc_s|libcuda\.so|libcublas|libcublasLt|libcusolver|libcusparse|libnvJitLink)'
for b in "$work"/b/bin/* "$work"/b/lib/libgpe_cuda.so "$work"/b/lib/libgpe.so; do
  # Resolve with the bundle first; every library must come from lib/ or be one the GPU
  # machine supplies.
  LD_LIBRARY_PATH="$work/b/lib" ldd "$b" | awk '$2 == "=>" {print $1, $3}' | while read -r name path; do
    if [[ "$path" == "$work/b/lib/"* || "$name" =~ $left ]]; then continue; fi
    echo "FAIL: $(basename "$b") loads $name from $path, outside the bundle"; exit 1
  done
done
set +e
OUT="$work/out" bash tools/cuda_check/run_gpu_check.sh "$work/b" >"$work/log" 2>&1
set -e
python3 - "$work/out/results.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
names = set(r["tests"])
want = {"axpy_test", "attention_cuda_plugin_test", "cuda_attention_test", "rope_cuda_test",
        "gpu_limits_test", "closed_form_cuda_test", "torch_cuda_test"}
assert names == want, names
for n, t in r["tests"].items():
    assert t["exit"] == 0, (n, t)
    assert t["cases"], n
    for c in t["cases"]:  # no GPU here: each case skipped, none failed
        assert not c["failures"], (n, c)
# The plugin loaded from the bundle and said there is no GPU (the case that runs here).
plugin = {c["name"] for c in r["tests"]["attention_cuda_plugin_test"]["cases"]}
assert any("LoadsAndSaysWhenThereIsNoGpu" in c for c in plugin), plugin
print("results.json:", sorted(names), "all skipped cleanly")
PY
grep -q "no CUDA device" "$work/log" || { echo "FAIL: no skip message"; cat "$work/log"; exit 1; }
echo PASS
