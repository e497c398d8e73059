"""The peers of the GPU check: PyTorch on the same GPU and shapes as GroupPE's CUDA
benchmarks, written as one JSON file.

- limits as PyTorch sees them: a 1 GiB device copy (GB/s, read + write) and an 8192^3 bf16
  matrix product (TFLOP/s), random data;
- scaled_dot_product_attention with the flash backend, bf16, b1 h16 s4096 d{128,64},
  causal or not, forward and forward + backward (TFLOP/s counting 4 d per allowed pair
  forward, 2.5x that for the backward);
- RoPE the way model code applies it (q * cos + rotate_half(q) * sin on q and k, cos/sin
  precomputed), standalone (GB/s, q and k read + written once) and followed by SDPA
  ("rotate-then-SDPA", the peer of RoPE inside the attention kernel);
- gpe.torch.attention on CUDA tensors on the same shapes, as a PyTorch user calls
  GroupPE (the bundled package, when it imports), with its ratio to the rows above.
Times are medians of CUDA-event-timed calls after warm-up.

Usage: python3 torch_peers.py OUT.json
"""
import json
import math
import sys

import torch
import torch.nn.functional as F


def median_seconds(fn, reps=20, warmup=3):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start = torch.cuda.Event(enable_timing=True)
        stop = torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) * 1e-3)
    times.sort()
    return times[len(times) // 2]


def rand(*shape, dtype=torch.bfloat16, grad=False):
    x = torch.rand(*shape, device="cuda", dtype=torch.float32).mul_(2).sub_(1).to(dtype)
    return x.requires_grad_(grad)


def rope_tables(s, d, base=10000.0):
    inv = 1.0 / base ** (torch.arange(0, d, 2, device="cuda", dtype=torch.float64) / d)
    ang = torch.arange(s, device="cuda", dtype=torch.float64)[:, None] * inv[None, :]
    ang = torch.cat([ang, ang], dim=-1)  # half-split pairing
    return ang.cos().to(torch.bfloat16), ang.sin().to(torch.bfloat16)


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rope(x, cos, sin):  # x: (b, h, s, d); cos, sin: (s, d)
    return x * cos + rotate_half(x) * sin


def gpe_torch_rows(res):
    """GroupPE as a PyTorch user calls it (gpe.torch.attention on CUDA tensors, through the
    C ABI's CUDA plugin: the kernels plus the call's checks, uploads and stream-ordered
    scratch) beside SDPA's rows above, same shapes: bf16 b1 h16 s4096 d128, causal and
    not, forward and forward + backward, and with RoPE (rope_dim) against
    rotate-then-SDPA. Where the bundled package does not import (run_gpu_check.sh puts it
    on PYTHONPATH), the reason instead."""
    try:
        import gpe.torch as gt
    except Exception as e:  # noqa: BLE001 - reported, not raised
        return {"error": repr(e)[:300]}
    rows = []
    bsz, h, s, d = 1, 16, 4096, 128
    for causal, rope in ((False, 0), (True, 0), (True, d)):
        q, k, v = (rand(bsz, s, h, d, grad=True) for _ in range(3))  # bshd
        pairs = s * (s + 1) / 2 if causal else s * s
        fwd_flops = 4 * d * h * bsz * pairs
        row = {"b": bsz, "h": h, "s": s, "d": d, "causal": causal, "rope_dim": rope}
        try:
            def fwd():
                return gt.attention(q, k, v, causal=causal, rope_dim=rope)
            t_f = median_seconds(fwd)
            do = rand(bsz, s, h, d)

            def fwdbwd():
                fwd().backward(do)
            t_fb = median_seconds(fwdbwd, reps=10)
        except Exception as e:  # noqa: BLE001 - reported per row
            row["error"] = repr(e)[:300]
            rows.append(row)
            continue
        row["fwd_ms"] = t_f * 1e3
        row["fwd_TFLOPs"] = fwd_flops / t_f * 1e-12
        row["bwd_ms"] = (t_fb - t_f) * 1e3
        row["bwd_TFLOPs"] = 2.5 * fwd_flops / (t_fb - t_f) * 1e-12
        peer = next((r for r in res.get("sdpa", []) if r["d"] == d and r["causal"] == causal),
                    None)
        if peer is not None:
            key = "rope_then_sdpa_TFLOPs" if rope else "fwd_TFLOPs"
            if key in peer:
                row["fwd_vs_peer"] = row["fwd_TFLOPs"] / peer[key]
            if not rope and "bwd_TFLOPs" in peer:
                row["bwd_vs_sdpa"] = row["bwd_TFLOPs"] / peer["bwd_TFLOPs"]
        rows.append(row)
        del q, k, v
    return rows


def main(out_path):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    res = {"torch": torch.__version__, "device": torch.cuda.get_device_name(),
           "cuda": torch.version.cuda}
    n = 1 << 29  # bf16 elements: 1 GiB
    a, b = rand(n), torch.empty(n, device="cuda", dtype=torch.bfloat16)
    res["copy_GBps"] = 2 * a.numel() * 2 / median_seconds(lambda: b.copy_(a)) * 1e-9
    del a, b
    m1, m2 = rand(8192, 8192), rand(8192, 8192)
    res["bf16_gemm_TFLOPs"] = 2 * 8192 ** 3 / median_seconds(lambda: m1 @ m2, reps=10) * 1e-12
    del m1, m2

    res["sdpa"] = []
    for d in (128, 64):
        for causal in (False, True):
            bsz, h, s = 1, 16, 4096
            q, k, v = (rand(bsz, h, s, d, grad=True) for _ in range(3))
            pairs = s * (s + 1) / 2 if causal else s * s
            fwd_flops = 4 * d * h * bsz * pairs
            row = {"b": bsz, "h": h, "s": s, "d": d, "causal": causal}
            try:
                with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
                    def fwd():
                        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                    t_f = median_seconds(lambda: fwd())
                    do = rand(bsz, h, s, d)

                    def fwdbwd():
                        out = fwd()
                        out.backward(do)
                    t_fb = median_seconds(fwdbwd, reps=10)
                    row["backend"] = "flash"
            except RuntimeError as e:  # flash unavailable: the default choice, named
                row["flash_error"] = str(e)[:200]
                t_f = median_seconds(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal))
                t_fb = float("nan")
                row["backend"] = "default"
            row["fwd_ms"] = t_f * 1e3
            row["fwd_TFLOPs"] = fwd_flops / t_f * 1e-12
            if not math.isnan(t_fb):
                row["bwd_ms"] = (t_fb - t_f) * 1e3
                row["bwd_TFLOPs"] = 2.5 * fwd_flops / (t_fb - t_f) * 1e-12
            if d == 128 and causal:
                cos, sin = rope_tables(s, d)
                qd, kd, vd = q.detach(), k.detach(), v.detach()
                with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
                    t_r = median_seconds(lambda: F.scaled_dot_product_attention(
                        apply_rope(qd, cos, sin), apply_rope(kd, cos, sin), vd, is_causal=True))
                row["rope_then_sdpa_ms"] = t_r * 1e3
                row["rope_then_sdpa_TFLOPs"] = fwd_flops / t_r * 1e-12
            res["sdpa"].append(row)
            del q, k, v

    res["rope"] = []
    for tokens, heads, d in ((4096, 32, 128), (65536, 8, 128)):
        q, k = rand(1, heads, tokens, d), rand(1, heads, tokens, d)
        cos, sin = rope_tables(tokens, d)
        t = median_seconds(lambda: (apply_rope(q, cos, sin), apply_rope(k, cos, sin)))
        moved = 4 * q.numel() * 2
        res["rope"].append({"tokens": tokens, "heads": heads, "d": d, "dtype": "bf16",
                            "us": t * 1e6, "GBps": moved / t * 1e-9,
                            "of_copy": moved / t * 1e-9 / res["copy_GBps"]})
    res["gpe_torch"] = gpe_torch_rows(res)
    with open(out_path, "w") as f:
        json.dump(res, f, indent=1)
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main(sys.argv[1])
