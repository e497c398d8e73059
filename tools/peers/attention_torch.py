"""PyTorch peers of GroupPE's CPU attention and RoPE, for `gpe bench`.

What a PyTorch user would write on a CPU, on the shapes and thread count GroupPE runs:
  sdpa           torch.nn.functional.scaled_dot_product_attention forward, q [b, hq, sq, d],
                 k and v [b, hkv, sk, d] (GQA through enable_gqa), dtype float32 or bfloat16
  rope_sdpa      RoPE in the eager rotate-half form (cos/sin built from the positions each
                 call, as transformer code does), applied to q and k, then sdpa
  sdpa_backward  the gradients of sdpa's output (dq, dk, dv) from a random dO; the forward
                 runs outside the timed region
  rope           RoPE alone on q and k, [s, h, d] each: eager rotate-half, or with
                 compile=1 the same function through torch.compile (skipped with a note when
                 it cannot compile, e.g. no C++ compiler)
Each case is one argument "kind,key=value,...": keys b, hq, hkv, sq, sk, d, causal, dtype
(sdpa*), s, h, d, compile (rope). Prints one JSON line per case with the best wall time over
the repetitions ("seconds") or an "error"; never a partial line.

usage: attention_torch.py THREADS REPETITIONS CASE...
"""

import json
import sys
import time

_torch = None  # imported in main, so that a missing torch is reported per case


def best_seconds(reps, fn):
    fn()  # warm-up: first-call allocations, kernel selection, compilation
    best = float("inf")
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def rope_cos_sin(torch, positions, d, base=10000.0):
    # Su et al. (RoFormer) eq. 34: theta_i = base^(-2i/d); rotate-half pairs i with i + d/2.
    inv_freq = 1.0 / (base ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
    freqs = torch.outer(positions.to(torch.float32), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def apply_rope(x, cos, sin):
    # rotate_half: (x1, x2) -> (-x2, x1) over the two halves of the head dimension.
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + _torch.cat((-x2, x1), dim=-1) * sin


def run_case(torch, spec, reps):
    kind, *pairs = spec.split(",")
    p = dict(pair.split("=", 1) for pair in pairs)
    gen = torch.Generator().manual_seed(1)
    F = torch.nn.functional
    if kind in ("sdpa", "rope_sdpa", "sdpa_backward"):
        b, hq, hkv = int(p.get("b", 1)), int(p["hq"]), int(p.get("hkv", p["hq"]))
        sq, sk, d = int(p["sq"]), int(p.get("sk", p["sq"])), int(p["d"])
        causal = p.get("causal", "0") == "1"
        dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[p.get("dtype", "float32")]
        q = torch.randn(b, hq, sq, d, generator=gen).to(dtype)
        k = torch.randn(b, hkv, sk, d, generator=gen).to(dtype)
        v = torch.randn(b, hkv, sk, d, generator=gen).to(dtype)
        gqa = {"enable_gqa": True} if hq != hkv else {}
        # Queries are the last sq positions of the sk keys (decode), as GroupPE's default;
        # SDPA's is_causal aligns top-left, which equals it only for sq == sk.
        if causal and sq != sk:
            return {"error": "causal with sq != sk is not SDPA's is_causal"}
        if kind == "sdpa":
            def fn():
                with torch.no_grad():
                    F.scaled_dot_product_attention(q, k, v, is_causal=causal, **gqa)
        elif kind == "rope_sdpa":
            pos_q = torch.arange(sk - sq, sk)
            pos_k = torch.arange(sk)

            def fn():
                with torch.no_grad():
                    cq, sq_ = rope_cos_sin(torch, pos_q, d)
                    ck, sk_ = rope_cos_sin(torch, pos_k, d)
                    F.scaled_dot_product_attention(apply_rope(q, cq, sq_), apply_rope(k, ck, sk_),
                                                   v, is_causal=causal, **gqa)
        else:
            q.requires_grad_(True)
            k.requires_grad_(True)
            v.requires_grad_(True)
            out = F.scaled_dot_product_attention(q, k, v, is_causal=causal, **gqa)
            grad = torch.randn(out.shape, generator=gen).to(dtype)

            def fn():
                torch.autograd.grad(out, (q, k, v), grad, retain_graph=True)
        return {"seconds": best_seconds(reps, fn)}
    if kind == "rope":
        s, h, d = int(p["s"]), int(p["h"]), int(p["d"])
        q = torch.randn(1, s, h, d, generator=gen)
        k = torch.randn(1, s, h, d, generator=gen)
        cos, sin = rope_cos_sin(torch, torch.arange(s), d)
        cos, sin = cos[None, :, None, :], sin[None, :, None, :]

        def rope_qk(q, k, cos, sin):
            return apply_rope(q, cos, sin), apply_rope(k, cos, sin)

        f = rope_qk
        if p.get("compile", "0") == "1":
            try:
                f = torch.compile(rope_qk)
                with torch.no_grad():
                    f(q, k, cos, sin)
            except Exception as e:  # no compiler, no cache directory, ...: say why
                return {"skipped": "torch.compile failed: " + str(e).splitlines()[0][:200]}

        def fn():
            with torch.no_grad():
                f(q, k, cos, sin)
        return {"seconds": best_seconds(reps, fn)}
    return {"error": "unknown case kind '%s'" % kind}


def main():
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    threads, reps = int(sys.argv[1]), int(sys.argv[2])
    global _torch
    try:
        import torch
        _torch = torch
    except ImportError as e:
        for spec in sys.argv[3:]:
            print(json.dumps({"case": spec, "error": "no torch (tools/setup_peers.sh): %s" % e}))
        return
    torch.set_num_threads(threads)
    for spec in sys.argv[3:]:
        try:
            result = run_case(torch, spec, reps)
        except Exception as e:  # one failing case must not hide the others
            result = {"error": "%s: %s" % (type(e).__name__, str(e).splitlines()[0][:200])}
        result.update({"case": spec, "torch": torch.__version__,
                       "threads": torch.get_num_threads()})
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
