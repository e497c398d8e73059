"""A character-level transformer trained twice on corpus.txt: PyTorch attention with RoPE,
then GroupPE's fused attention (RoPE inside the kernel), from the same initial weights
and the same batches, step by step in lockstep. Prints both loss curves, their largest
difference and the median time per step of each; writes loss_curves.png (matplotlib) and
losses.json.

    tools/setup_torch.sh && ./bazelw run //examples/char_transformer:train
    ./bazelw run //examples/char_transformer:train -- --steps 50 --out /tmp/ct

Relative --out and --corpus paths are taken from where the command was typed (under
`bazel run`, BUILD_WORKING_DIRECTORY). losses.json and loss_curves.png are written
beside their final names and renamed, so an interrupted run leaves the old files whole.

The two runs differ only in the attention: torch applies RoPE (Su et al., eq. 34, pairs
(i, i + d/2)) to q and k and calls scaled_dot_product_attention; GroupPE rotates q and k
as tiles load, inside gpe.torch.attention. Both are float32, so the curves agree to
rounding that training slowly amplifies (printed as the largest difference).
"""

import argparse
import json
import os
import pathlib
import sys
import time

from gpe._files import write_atomic as _write_atomic


def _import_torch():
    try:
        import torch  # noqa: F401
    except ImportError as e:
        sys.exit("char_transformer: PyTorch is not installed (%s); run tools/setup_torch.sh" % e)


def _fail(message):
    """A usage error: the message on stderr and exit status 2 (argparse's convention)."""
    print("char_transformer: " + message, file=sys.stderr)
    raise SystemExit(2)


def rope(x, base=10000.0):
    """RoPE on x [batch, seq, heads, d] at positions 0..seq-1, half-split pairing."""
    import torch
    s, d = x.shape[1], x.shape[-1]
    half = d // 2
    theta = base ** (-2.0 * torch.arange(half, dtype=torch.float64) / d)
    ang = torch.arange(s, dtype=torch.float64)[:, None] * theta[None, :]
    c = torch.cos(ang).to(x.dtype)[None, :, None, :]
    sn = torch.sin(ang).to(x.dtype)[None, :, None, :]
    a, b = x[..., :half], x[..., half:]
    return torch.cat([a * c - b * sn, a * sn + b * c], -1)


def torch_attention(q, k, v):
    import torch.nn.functional as F
    q, k = rope(q), rope(k)
    o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                       is_causal=True)
    return o.transpose(1, 2)


_THREADS = [1]


def gpe_attention(q, k, v):
    import gpe.torch as gt
    return gt.attention(q, k, v, causal=True, rope_dim=q.shape[-1], threads=_THREADS[0])


ATTENTION = {"torch": torch_attention, "gpe": gpe_attention}  # run in this order


def make_model(vocab, d_model, heads, layers, attention):
    from torch import nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
            self.qkv = nn.Linear(d_model, 3 * d_model, bias=False)
            self.proj = nn.Linear(d_model, d_model)
            self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(),
                                     nn.Linear(4 * d_model, d_model))

        def forward(self, x):
            b, s, _ = x.shape
            q, k, v = self.qkv(self.ln1(x)).view(b, s, 3, heads, d_model // heads).unbind(2)
            x = x + self.proj(attention(q, k, v).reshape(b, s, d_model))
            return x + self.mlp(self.ln2(x))

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(vocab, d_model)
            self.blocks = nn.Sequential(*[Block() for _ in range(layers)])
            self.ln = nn.LayerNorm(d_model)
            self.head = nn.Linear(d_model, vocab, bias=False)

        def forward(self, idx):
            return self.head(self.ln(self.blocks(self.embed(idx))))

    return Model()


def load_corpus(path):
    try:
        text = pathlib.Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        _fail("cannot read --corpus %s (%s)" % (path, e))
    chars = sorted(set(text))
    index = {c: i for i, c in enumerate(chars)}
    import torch
    return torch.tensor([index[c] for c in text], dtype=torch.int64), len(chars)


def batches(data, steps, batch, seq, seed):
    """The same windows for both runs (one generator, drawn up front)."""
    import torch
    g = torch.Generator().manual_seed(seed)
    starts = torch.randint(0, data.numel() - seq - 1, (steps, batch), generator=g)
    offs = torch.arange(seq + 1)
    return [data[(s[:, None] + offs[None, :])] for s in starts]


def train(init_state, data_batches, vocab, args):
    """Both runs in lockstep (a torch step, then a GroupPE step, on each batch), so that
    whatever else loads the machine slows both alike; returns {kind: (losses, seconds)}."""
    import torch
    runs = {}
    for kind in ATTENTION:
        model = make_model(vocab, args.d_model, args.heads, args.layers, ATTENTION[kind])
        model.load_state_dict(init_state)
        opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
        runs[kind] = (model, opt, [], [])
    for xy in data_batches:
        for kind, (model, opt, losses, seconds) in runs.items():
            t0 = time.perf_counter()
            logits = model(xy[:, :-1])
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, vocab),
                                                     xy[:, 1:].reshape(-1))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            seconds.append(time.perf_counter() - t0)
            losses.append(float(loss.detach()))
    return {kind: (r[2], r[3]) for kind, r in runs.items()}


def run(args):
    _import_torch()
    import torch
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    _THREADS[0] = args.threads
    data, vocab = load_corpus(args.corpus)
    if data.numel() < args.seq + 2:
        _fail("--corpus %s has %d characters, too few for windows of --seq %d (at least %d)"
              % (args.corpus, data.numel(), args.seq, args.seq + 2))
    init = make_model(vocab, args.d_model, args.heads, args.layers, None).state_dict()
    data_batches = batches(data, args.steps, args.batch, args.seq, args.seed)
    results = {}
    for kind, (losses, seconds) in train(init, data_batches, vocab, args).items():
        # The first steps warm caches and allocators: time the rest (median: robust to
        # other processes' bursts).
        timed = sorted(seconds[min(3, len(seconds) - 1):])
        results[kind] = {"losses": losses, "ms_per_step": 1e3 * timed[len(timed) // 2]}
    diff = max(abs(a - b) for a, b in zip(results["torch"]["losses"], results["gpe"]["losses"]))
    results["max_abs_loss_difference"] = diff
    results["config"] = {k: v for k, v in vars(args).items() if k != "out"}
    results["config"]["vocab"] = vocab
    results["config"]["torch"] = torch.__version__
    t, g = results["torch"], results["gpe"]
    print("step  loss(torch+RoPE)  loss(GroupPE)")
    every = max(1, args.steps // 10)
    for i in list(range(0, args.steps, every)) + [args.steps - 1]:
        print("%4d  %16.4f  %13.4f" % (i, t["losses"][i], g["losses"][i]))
    print("largest |loss difference| over %d steps: %.2e" % (args.steps, diff))
    print("median time per step: torch+RoPE %.2f ms, GroupPE %.2f ms (GroupPE / torch = %.2f; "
          "same process, same threads, steps interleaved)" % (t["ms_per_step"], g["ms_per_step"],
                                     g["ms_per_step"] / t["ms_per_step"]))
    if args.out:
        out = pathlib.Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        _write_atomic(out / "losses.json", json.dumps(results, indent=1).encode("utf-8"))
        plot(results, out / "loss_curves.png")
    return results


def plot(results, path):
    import io
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("char_transformer: matplotlib not installed; skipped %s (tools/setup_peers.sh "
              "installs it)" % path)
        return
    fig, ax = plt.subplots(figsize=(7, 4))
    t, g = results["torch"], results["gpe"]
    ax.plot(t["losses"], label="PyTorch SDPA + RoPE (%.1f ms/step)" % t["ms_per_step"], lw=2.5,
            alpha=0.6)
    ax.plot(g["losses"], label="GroupPE fused attention (%.1f ms/step)" % g["ms_per_step"],
            lw=1.0, ls="--")
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy (nats / char)")
    ax.set_title("Character transformer on corpus.txt: max |diff| %.1e"
                 % results["max_abs_loss_difference"])
    ax.legend()
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    _write_atomic(path, buf.getvalue())
    print("wrote %s" % path)


def parse(argv=None):
    here = pathlib.Path(__file__).resolve().parent
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--d-model", type=int, default=64)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1,
                   help="threads for torch and for GroupPE's kernels (the same for both runs)")
    p.add_argument("--corpus", default=None,
                   help="a UTF-8 text file (default: corpus.txt beside this script)")
    default_out = os.path.join(os.environ.get("BUILD_WORKSPACE_DIRECTORY", "."), "gpe_out",
                               "char_transformer")
    p.add_argument("--out", default=None,
                   help="where losses.json and the PNG go (default %s)" % default_out)
    args = p.parse_args(argv)
    for name in ("steps", "batch", "seq", "d_model", "heads", "layers", "threads"):
        v = getattr(args, name)
        if v < 1:  # --steps 0 trained nothing and then failed on the empty timings
            _fail("--%s must be >= 1, got %d" % (name.replace("_", "-"), v))
    if args.d_model % args.heads or (args.d_model // args.heads) % 2:
        # Heads of d_model / heads dimensions; RoPE rotates pairs of them (Su et al.,
        # eq. 34), so the head is even.
        _fail("--d-model %d does not split into %d heads of an even size (d_model must be "
              "a multiple of %d)" % (args.d_model, args.heads, 2 * args.heads))
    # Paths as the user typed them: relative to where `bazel run` was called, not to the
    # runfiles tree the script runs in (an absolute path stays as it is).
    user = lambda path: os.path.join(os.environ.get("BUILD_WORKING_DIRECTORY", ""), path)
    args.corpus = user(args.corpus) if args.corpus is not None else str(here / "corpus.txt")
    args.out = user(args.out) if args.out is not None else default_out
    return args


if __name__ == "__main__":
    run(parse())
