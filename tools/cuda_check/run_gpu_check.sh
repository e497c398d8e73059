#!/usr/bin/env bash
# The GPU check (issue: CUDA that has run): every CUDA test against its CPU reference,
# every CUDA benchmark with the GPU's limits measured in the same binary, and PyTorch on
# the same shapes as the peers, in one command on a GPU machine. Prepare it here with
# tools/cuda_check/prepare.sh (a Bazel build of :gpu_bundle unpacked into gpu_carry/),
# then on the GPU machine, from the repository root:
#   bash tools/cuda_check/run_gpu_check.sh [BUNDLE_DIR, default gpu_carry]
# It needs only what the GPU image has: the NVIDIA driver, cuBLAS / cuSOLVER of CUDA 13
# (found under /usr/local/cuda* or PyTorch's nvidia packages), python3 with torch.
# Writes $OUT (default ./gpu_check_out): check.log (everything printed) and results.json
# (tests, benchmarks, peers). Ends with a short table. Exit 0 iff every test passed.
set -uo pipefail
bundle="$(cd "${1:-gpu_carry}" && pwd)"
out="${OUT:-$PWD/gpu_check_out}"
mkdir -p "$out"
tmp="$(mktemp -d)"
exec > >(tee "$out/check.log") 2>&1
start=$(date +%s)
echo "=== GPU check: $(date -u +%FT%TZ), bundle $bundle"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw \
  --format=csv 2>&1 || echo "nvidia-smi failed"

# cuBLAS / cuSOLVER of CUDA 13 from the machine (the bundle leaves them out).
libdirs=()
for lib in libcublas.so.13 libcublasLt.so.13 libcusolver.so.12 libcusparse.so.12 libnvJitLink.so.13; do
  p="$(find /usr/local/cuda*/lib64/ /usr/local/cuda*/targets/*/lib/ /opt /usr/lib /usr/local/lib \
        -name "$lib" 2>/dev/null | head -1)"
  if [[ -n "$p" ]]; then libdirs+=("$(dirname "$p")"); else echo "warning: $lib not found"; fi
done
ld_path="$bundle/lib"
for d in "${libdirs[@]}" /usr/local/nvidia/lib64; do ld_path="$ld_path:$d"; done
export LD_LIBRARY_PATH="$ld_path${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
# The C ABI's CUDA plugin, for the tests of attention on CUDA tensors through gpe.h.
export GPE_CUDA_PLUGIN="$bundle/lib/libgpe_cuda.so"

status=0
echo "=== limits"
timeout 120 "$bundle/bin/gpu_limits_main" | tee "$tmp/limits.txt" || status=1

for t in "$bundle"/bin/*_test; do
  name="$(basename "$t")"
  echo "=== test $name"
  timeout 240 "$t" --gtest_output="json:$tmp/test_$name.json" --gtest_brief=0
  rc=$?
  echo "$name exit $rc"
  echo "$name $rc" >>"$tmp/tests.txt"
  [[ $rc -eq 0 ]] || status=1
done

# gpe.torch.attention on CUDA tensors: the bundled package over the bundled libgpe.so
# (its CUDA plugin beside it), the GPU's PyTorch as the caller.
echo "=== test torch_cuda_test"
# A GPU the driver lists must be used: skipping there fails (GPE_EXPECT_GPU).
expect_gpu=0
nvidia-smi -L >/dev/null 2>&1 && expect_gpu=1
GPE_EXPECT_GPU=$expect_gpu PYTHONPATH="$bundle/python" GPE_LIBRARY="$bundle/lib/libgpe.so" PYTHONUNBUFFERED=1 \
  timeout 240 python3 "$bundle/python/torch_cuda_test.py" --json "$tmp/test_torch_cuda_test.json"
rc=$?
echo "torch_cuda_test exit $rc"
echo "torch_cuda_test $rc" >>"$tmp/tests.txt"
[[ $rc -eq 0 ]] || status=1

# Optional: every test again under compute-sanitizer's memcheck (out-of-bounds and
# misaligned accesses, leaks of device memory), where the tool works (not on gVisor).
if [[ "${GPE_GPU_SANITIZE:-0}" == 1 ]] && command -v compute-sanitizer >/dev/null; then
  for t in "$bundle"/bin/*_test; do
    name="$(basename "$t")"
    echo "=== memcheck $name"
    timeout 240 compute-sanitizer --tool memcheck --error-exitcode 9 "$t" --gtest_brief=1
    rc=$?
    echo "memcheck $name exit $rc"
    echo "memcheck_$name $rc" >>"$tmp/tests.txt"
    [[ $rc -eq 0 ]] || status=1
  done
fi

for b in "$bundle"/bin/*_benchmark; do
  name="$(basename "$b")"
  echo "=== benchmark $name"
  timeout 240 "$b" --benchmark_out="$tmp/bench_$name.json" --benchmark_out_format=json \
    --benchmark_counters_tabular=true
  echo "$name exit $?"
done

echo "=== peers: PyTorch"
PYTHONPATH="$bundle/python" GPE_LIBRARY="$bundle/lib/libgpe.so" PYTHONUNBUFFERED=1 \
  timeout 240 python3 "$bundle/torch_peers.py" "$tmp/peers.json" >"$tmp/peers.out" 2>&1
echo "torch_peers exit $?"; tail -5 "$tmp/peers.out"

python3 - "$tmp" "$out/results.json" <<'PY'
import glob, json, os, sys
tmp, dest = sys.argv[1:]
res = {"limits": {}, "tests": {}, "benchmarks": {}, "peers": None}
if os.path.exists(f"{tmp}/limits.txt"):
    for line in open(f"{tmp}/limits.txt"):
        k, _, v = line.partition(": ")
        res["limits"][k] = v.strip()
for line in open(f"{tmp}/tests.txt") if os.path.exists(f"{tmp}/tests.txt") else []:
    name, rc = line.split()
    j = f"{tmp}/test_{name}.json"
    cases = []
    if os.path.exists(j):
        for suite in json.load(open(j)).get("testsuites", []):
            for c in suite.get("testsuite", []):
                cases.append({"name": f"{suite['name']}.{c['name']}",
                              "result": c.get("result"), "status": c.get("status"),
                              "failures": [f.get("failure", "")[:400] for f in c.get("failures", [])]})
    res["tests"][name] = {"exit": int(rc), "cases": cases}
for j in glob.glob(f"{tmp}/bench_*.json"):
    try:
        data = json.load(open(j))
    except ValueError:
        continue
    res["benchmarks"][os.path.basename(j)[6:-5]] = data.get("benchmarks", [])
if os.path.exists(f"{tmp}/peers.json"):
    res["peers"] = json.load(open(f"{tmp}/peers.json"))
json.dump(res, open(dest, "w"), indent=1)
print("=== summary")
print("limits:", res["limits"])
for name, t in res["tests"].items():
    bad = [c["name"] for c in t["cases"] if c["failures"]]
    print(f"test {name}: exit {t['exit']}, {len(t['cases'])} cases, failed: {bad}")
for name, rows in res["benchmarks"].items():
    for r in rows:
        keys = [k for k in ("TFLOPs", "of_gemm", "rope_GBps", "of_copy", "GBps", "gflops") if k in r]
        err = r.get("error_message", "")
        print(f"{r['name']}: {r.get('real_time', 0):.3f} {r.get('time_unit', '')} "
              + " ".join(f"{k}={r[k]:.3g}" for k in keys) + (f" ERROR {err}" if err else ""))
p = res["peers"] or {}
print("peers:", {k: p.get(k) for k in ("torch", "copy_GBps", "bf16_gemm_TFLOPs")})
gt_rows = p.get("gpe_torch")
if isinstance(gt_rows, dict):
    print("gpe.torch on CUDA:", gt_rows)
for r in gt_rows if isinstance(gt_rows, list) else []:
    print("gpe.torch.attention (CUDA) causal=%s rope_dim=%s: " % (r["causal"], r["rope_dim"])
          + (r["error"] if "error" in r else "fwd %.1f TFLOP/s (%.2fx peer), bwd %.1f TFLOP/s%s"
             % (r["fwd_TFLOPs"], r.get("fwd_vs_peer", float("nan")), r["bwd_TFLOPs"],
                " (%.2fx SDPA)" % r["bwd_vs_sdpa"] if "bwd_vs_sdpa" in r else "")))
# GroupPE's forward against PyTorch's on the same shape, same run, same GPU.
import re
sdpa = {(r["d"], r["causal"]): r for r in p.get("sdpa", [])}
for rows in res["benchmarks"].values():
    for r in rows:
        mb = re.search(r"BM_Backward/s:(\d+)/h:(\d+)/d:(\d+)/causal:(\d)/enc:(\d)", r["name"])
        if mb and "TFLOPs" in r:
            peer = sdpa.get((int(mb.group(3)), mb.group(4) == "1"))
            if peer and "bwd_TFLOPs" in peer:
                print(f"vs torch: backward d{mb.group(3)} causal={mb.group(4) == '1'} enc={mb.group(5)}: "
                      f"{r['TFLOPs']:.1f} / {peer['bwd_TFLOPs']:.1f} TFLOP/s = "
                      f"{r['TFLOPs'] / peer['bwd_TFLOPs']:.3f}x (bwd_TFLOPs)")
            continue
        m = re.search(r"s:(\d+)/h:(\d+)/d:(\d+)/causal:(\d)/enc:(\d)/kernel:(\d)", r["name"])
        if not m or "TFLOPs" not in r:
            continue
        d, causal, enc = int(m.group(3)), m.group(4) == "1", int(m.group(5))
        peer = sdpa.get((d, causal))
        if not peer:
            continue
        key = "rope_then_sdpa_TFLOPs" if enc in (1, 3) else "fwd_TFLOPs"
        if key in peer:
            print(f"vs torch: d{d} causal={causal} enc={enc} kernel={m.group(6)}: "
                  f"{r['TFLOPs']:.1f} / {peer[key]:.1f} TFLOP/s = {r['TFLOPs'] / peer[key]:.3f}x ({key})")
for r in p.get("sdpa", []):
    print("  sdpa", {k: (round(v, 3) if isinstance(v, float) else v) for k, v in r.items()})
for r in p.get("rope", []):
    print("  rope", {k: (round(v, 3) if isinstance(v, float) else v) for k, v in r.items()})
PY
echo "GPU check wall time: $(( $(date +%s) - start )) s; status $status"
rm -rf "$tmp"
exit $status
