"""Draws `gpe bench`'s figures from the bench.json it writes (matplotlib, Agg backend).

  attention_vs_seqlen.png  attention forward time against sequence length, causal and
                           not, GroupPE and PyTorch SDPA (log-log)
  rope_bandwidth.png       RoPE on q and k, GB/s against tensor size, GroupPE and PyTorch
                           eager, beside the machine's triad bandwidth

Exits 0 with a "plot_bench: skipped" message when matplotlib is not installed (it is an
optional peer: tools/setup_peers.sh installs it).

usage: plot_bench.py BENCH_JSON OUT_DIR
"""

import json
import math
import os
import sys


def save_atomically(fig, path):
    """fig as a PNG at path through a temporary file in the same directory and a rename:
    a run killed mid-write (the caller's timeout, a full disk) leaves the previous picture
    whole, as the C++ side's WriteFileAtomically does."""
    tmp = "%s.tmp.%d" % (path, os.getpid())
    try:
        fig.savefig(tmp, dpi=110, format="png")
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def finite(v):
    return v is not None and math.isfinite(v)


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("plot_bench: skipped, matplotlib is not installed (tools/setup_peers.sh)")
        return
    with open(sys.argv[1]) as f:
        bench = json.load(f)
    out = sys.argv[2]
    machine = "%d threads, FMA peak %.0f GFLOP/s, triad %.1f GB/s" % (
        bench["threads"], bench["fma_peak_gflops"], bench["triad_gbs"])

    sweep = bench["attention_sweep"]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for causal, style in ((False, "-"), (True, "--")):
        pts = [p for p in sweep if p["causal"] == causal]
        label = "causal" if causal else "non-causal"
        ax.plot([p["s"] for p in pts], [p["grouppe_s"] * 1e3 for p in pts], style, marker="o",
                color="C0", label="GroupPE CpuForward, " + label)
        peer = [p for p in pts if finite(p["torch_s"])]
        if peer:
            ax.plot([p["s"] for p in peer], [p["torch_s"] * 1e3 for p in peer], style,
                    marker="s", color="C1", label="PyTorch SDPA, " + label)
    if sweep:
        ax.set_title("Attention forward f32, b1 h%d d%d\n%s" % (
            sweep[0]["heads"], sweep[0]["head_dim"], machine), fontsize=9)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("sequence length")
    ax.set_ylabel("time (ms, best of N)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_atomically(fig, os.path.join(out, "attention_vs_seqlen.png"))
    plt.close(fig)

    rope = bench["rope_sweep"]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    mib = [p["bytes"] / 4 / 2**20 for p in rope]  # bytes counts q and k, read and written
    ax.plot(mib, [p["grouppe_gbs"] for p in rope], marker="o", color="C0", label="GroupPE Rope::Apply")
    peer = [(m, p["torch_eager_gbs"]) for m, p in zip(mib, rope) if finite(p["torch_eager_gbs"])]
    if peer:
        ax.plot([m for m, _ in peer], [g for _, g in peer], marker="s", color="C1",
                label="PyTorch eager rotate-half")
    ax.axhline(bench["triad_gbs"], color="k", linestyle=":", label="triad bandwidth")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("size of q (= size of k), MiB float32, s x 32 x 128")
    ax.set_ylabel("GB/s (read + write of q and k)")
    ax.set_title("RoPE on q and k\n" + machine, fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_atomically(fig, os.path.join(out, "rope_bandwidth.png"))
    plt.close(fig)
    print("plot_bench: wrote %s and %s" % (os.path.join(out, "attention_vs_seqlen.png"),
                                           os.path.join(out, "rope_bandwidth.png")))


if __name__ == "__main__":
    main()
