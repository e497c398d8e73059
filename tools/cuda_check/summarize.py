"""Turns the GPU check's results.json into the Markdown tables of docs/measured/cuda.md.

Usage: python3 tools/cuda_check/summarize.py RESULTS.json [DATE] > docs/measured/cuda.md

Every figure is a ratio to a limit measured in the same run on the same GPU: the copy
bandwidth and the cuBLAS bf16 GEMM rate in GroupPE's own binaries, and PyTorch's SDPA
(flash backend) and rotary on the same shapes in the peers' process.
"""
import json
import re
import sys


def _args(name):
    return dict((k, int(v)) for k, v in re.findall(r"(\w+):(\d+)", name))


def main(path, date):
    r = json.load(open(path))
    lim, peers = r["limits"], r.get("peers") or {}
    out = []
    w = out.append
    w("# GroupPE on a GPU: measured")
    w("")
    w(f"One run of `tools/cuda_check/run_gpu_check.sh` ({date}) on {lim.get('device', '?')}; "
      f"PyTorch {peers.get('torch', '?')} (CUDA {peers.get('cuda', '?')}) as the peer, same "
      "GPU, same run. Regenerate: `python3 tools/cuda_check/summarize.py results.json`.")
    w("")
    w("| limit | GroupPE's binary | PyTorch |")
    w("|---|---|---|")
    w(f"| copy bandwidth (read + write) | {float(lim.get('copy_GBps', 0)):.0f} GB/s | "
      f"{peers.get('copy_GBps', 0):.0f} GB/s |")
    w(f"| bf16 GEMM 8192^3 | {float(lim.get('bf16_gemm_TFLOPs', 0)):.0f} TFLOP/s (cuBLAS) | "
      f"{peers.get('bf16_gemm_TFLOPs', 0):.0f} TFLOP/s |")
    w("")
    tests = r.get("tests", {})
    plain = {k: v for k, v in tests.items() if not k.startswith("memcheck_")}
    w("Tests: " + ", ".join(
        f"`{k}` {sum(1 for c in v['cases'] if not c['failures'])}/{len(v['cases'])} passed"
        for k, v in sorted(plain.items())) + ".")
    mem = {k: v for k, v in tests.items() if k.startswith("memcheck_")}
    if mem:
        w("Under compute-sanitizer memcheck: " + ", ".join(
            f"`{k[9:]}` exit {v['exit']}" for k, v in sorted(mem.items())) + " (0: no error).")
    w("")
    sdpa = {(p["d"], p["causal"]): p for p in peers.get("sdpa", [])}
    enc_names = {0: "none", 1: "RoPE (keys rotated once, workspace)", 2: "ALiBi",
                 3: "RoPE (keys rotated per block)"}
    w("## Attention, bf16, b1 h16 s4096")
    w("")
    w("Forward (`cuda_attention_benchmark`, tensor-core kernel unless said):")
    w("")
    w("| d | causal | encoding | kernel / config | TFLOP/s | of GEMM | PyTorch | ratio |")
    w("|---|---|---|---|---|---|---|---|")
    for b in r["benchmarks"].get("cuda_attention_benchmark", []):
        if not b["name"].startswith("BM_Forward") or "TFLOPs" not in b:
            continue
        a = _args(b["name"])
        peer = sdpa.get((a["d"], bool(a["causal"])), {})
        key = "rope_then_sdpa_TFLOPs" if a["enc"] in (1, 3) else "fwd_TFLOPs"
        pv = peer.get(key)
        kern = "SIMT" if a.get("kernel") == 1 else f"tensor cores / {a.get('cfg', 0)}"
        peer_txt = f"{pv:.0f} ({'rotate, then SDPA' if key.startswith('rope') else 'SDPA'})" if pv else "-"
        ratio = f"{b['TFLOPs'] / pv:.2f}x" if pv else "-"
        w(f"| {a['d']} | {'yes' if a['causal'] else 'no'} | {enc_names.get(a['enc'], a['enc'])} | "
          f"{kern} | {b['TFLOPs']:.0f} | {b.get('of_gemm', 0):.2f} | {peer_txt} | {ratio} |")
    w("")
    w("Backward (flops: 2.5x the forward's, as PyTorch's peer counts them):")
    w("")
    w("| d | causal | encoding | config | TFLOP/s | of GEMM | PyTorch SDPA | ratio |")
    w("|---|---|---|---|---|---|---|---|")
    for b in r["benchmarks"].get("cuda_attention_benchmark", []):
        if not b["name"].startswith("BM_Backward") or "TFLOPs" not in b:
            continue
        a = _args(b["name"])
        pv = sdpa.get((a["d"], bool(a["causal"])), {}).get("bwd_TFLOPs")
        ratio = f"{b['TFLOPs'] / pv:.2f}x" if pv else "-"
        w(f"| {a['d']} | {'yes' if a['causal'] else 'no'} | {enc_names.get(a['enc'], a['enc'])} | "
          f"{a.get('cfg', 0)} | {b['TFLOPs']:.0f} | {b.get('of_gemm', 0):.2f} | "
          f"{pv:.0f} | {ratio} |" if pv else "")
    w("")
    w("## RoPE on q and k (`rope_cuda_benchmark`)")
    w("")
    w("| tokens | heads | d | dtype | pairing | GB/s | of copy |")
    w("|---|---|---|---|---|---|---|")
    dt = {0: "float32", 1: "bfloat16", 2: "float16"}
    for b in r["benchmarks"].get("rope_cuda_benchmark", []):
        if "rope_GBps" not in b:
            continue
        a = _args(b["name"])
        w(f"| {a['tokens']} | {a['heads']} | {a['d']} | {dt[a['dtype']]} | "
          f"{'interleaved' if a['interleaved'] else 'half-split'} | {b['rope_GBps']:.0f} | "
          f"{b['of_copy']:.2f} |")
    for p in peers.get("rope", []):
        w(f"| {p['tokens']} | {p['heads']} | {p['d']} | bfloat16 | PyTorch (q cos + rotate_half(q) sin) | "
          f"{p['GBps']:.0f} | {p['of_copy']:.2f} |")
    w("")
    w("## INR closed form on the GPU (`closed_form_cuda_benchmark`, K = 256 per axis, float64)")
    w("")
    w("| image | float32 image products | GPU ms | images/s | fit TFLOP/s | CPU ms (this GPU host) | speed-up | PSNR dB |")
    w("|---|---|---|---|---|---|---|---|")
    for b in r["benchmarks"].get("closed_form_cuda_benchmark", []):
        if not b["name"].startswith("BM_FitCuda"):
            continue
        n, f32 = re.findall(r"BM_FitCuda/(\d+)/(\d)", b["name"])[0]
        cpu = f"{b['cpu_ms']:.2f}" if "cpu_ms" in b else "-"
        sp = f"{b['speedup']:.1f}x" if "speedup" in b else "-"
        w(f"| {n}^2 | {'yes' if f32 == '1' else 'no'} | {b['gpu_ms']:.3f} | {b['images_per_s']:.0f} | "
          f"{b['fit_GFLOPs'] / 1000:.2f} | {cpu} | {sp} | {b['PSNR_dB']:.1f} |")
    print("\n".join(line for line in out))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "")
