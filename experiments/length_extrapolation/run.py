"""Length extrapolation of every sequence encoding GroupPE has: a small causal character
model trained at one length L and evaluated at L, 2L, 4L and 8L.

    ./bazelw run //experiments/length_extrapolation:run            # full run, 3 seeds
    ./bazelw run //experiments/length_extrapolation:run -- --quick # a smoke run (< 1 min)

Data: the Python standard library's own .py sources (sysconfig's "stdlib" path,
site-packages and test directories skipped), read as bytes in sorted path order; the
first --chars bytes, bytes >= 128 mapped to one token (129 tokens). The first 90% is
the training split, the last 10% the evaluation split.

Model: a pre-norm causal decoder (--d-model 64, --layers 2, --heads 4 of 16, MLP 4x).
For every seed the core weights (embedding, attention projections, MLPs, norms, head)
are the same for every encoding and so are the training batches: only the positional
encoding differs. All attention is gpe.torch.attention with the encoding applied inside
the kernel; the absolute encodings (sinusoidal, learned) are added to the embedding.

Evaluation: per-token perplexity on non-overlapping windows of the evaluation split,
the same tokens at every length: --eval-tokens (at most what the split holds) rounded
down to a multiple of the longest evaluation length, the value the report states. The
RoPE scaling schedules (linear / position interpolation, dynamic NTK, YaRN, Llama 3) are
not trained: they are the trained RoPE model evaluated with gpe.Rope(schedule=...,
factor = eval length / L), as they are used to stretch a trained model.

Timing: the median time per training step of the RoPE model with gpe.torch.attention
(RoPE inside) against the same model, weights and batches with RoPE applied by plain
torch ops and torch.nn.functional.scaled_dot_product_attention, steps interleaved in
one process.

Writes length_extrapolation.md (table), length_extrapolation.png (plot) and
length_extrapolation.json (per-seed numbers) into --out (full mode: docs/measured/ of the
workspace; --quick: a temporary directory). --from-json rewrites the table and plot from
the numbers (e.g. with --intro) without training.

Budget: the full run trains 12 models x 3 seeds for 300 steps in two worker processes
(one thread each). Its cost per step varies by encoding: on this project's 2-core Xeon
the algebraic encoding, GRAPE-AP, GRAPE-M and FoX cost 3-6x a RoPE step (the last two
call the kernel once per sequence). The committed run took 47 minutes with a C++ build
competing for both cores; the jobs that ran with the machine less loaded suggest about
25 minutes on two idle cores. --quick takes about 20 s.
"""

import argparse
import json
import math
import multiprocessing
import os
import pathlib
import platform
import statistics
import sys
import sysconfig
import tempfile
import time

from gpe._files import write_atomic

VOCAB = 129  # bytes 0..127, and one token for every byte >= 128
OTHER = 128

# name -> (trained as, description). The RoPE schedules reuse the trained RoPE model.
ENCODINGS = {
    "sinusoidal": ("sinusoidal", "absolute, Vaswani et al. sec. 3.5, added to the embedding"),
    "learned": ("learned", "absolute learned table [8L, d_model]; rows >= L never trained"),
    "shaw": ("shaw", "Shaw et al. relative key/value tables, labels clip(j - i, -k, k)"),
    "t5": ("t5", "T5 causal buckets (32 buckets, max_distance max(L, 32)), learned table"),
    "rope": ("rope", "RoPE (Su et al.), base 10000, no scaling at any length"),
    "rope_linear": ("rope", "trained RoPE, linear / position interpolation at eval"),
    "rope_dynamic_ntk": ("rope", "trained RoPE, dynamic NTK at eval"),
    "rope_yarn": ("rope", "trained RoPE, YaRN at eval"),
    "rope_llama3": ("rope", "trained RoPE, Llama 3 schedule at eval"),
    "xpos": ("xpos", "xPos (Sun et al.), gamma 0.4, scale base 512"),
    "alibi": ("alibi", "ALiBi (Press et al.), fixed slopes 2^(-8h/H)"),
    "fox": ("fox", "FoX forget gates from the tokens (Lin et al.)"),
    "grape_m": ("grape_m", "GRAPE-M, learnable rank-2 generators, RoPE's planes at init"),
    "grape_a": ("grape_a", "GRAPE-A, learnable slopes, ALiBi's at init"),
    "grape_ap": ("grape_ap", "GRAPE-AP, softplus path costs from the tokens (rank 2)"),
    "algebraic": ("algebraic", "Kogkalidis et al. W^p = exp(pS), learnable S near identity"),
}
SCHEDULES = {"rope_linear": "linear", "rope_dynamic_ntk": "dynamic_ntk", "rope_yarn": "yarn",
             "rope_llama3": "llama3"}


def _import_torch():
    try:
        import torch  # noqa: F401
    except ImportError as e:
        sys.exit("length_extrapolation: PyTorch is not installed (%s); run tools/setup_torch.sh"
                 % e)


def _fail(message):
    """A usage error: the message on stderr and exit status 2 (argparse's convention)."""
    print("length_extrapolation: " + message, file=sys.stderr)
    raise SystemExit(2)


def eval_window_tokens(asked, n_eval, longest):
    """The held-out tokens evaluated at every length: `asked`, at most the n_eval - 1 that
    have a next token, rounded down to a multiple of the longest evaluation length so that
    every length's windows tile exactly the same tokens. 0 when not one longest window
    fits."""
    return (min(asked, n_eval - 1) // longest) * longest


# ---- Data -------------------------------------------------------------------------------


def stdlib_sources():
    """The standard library's .py files, sorted by path (site-packages and tests skipped)."""
    root = pathlib.Path(sysconfig.get_paths()["stdlib"])
    files = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames
                             if d not in ("site-packages", "dist-packages", "test", "tests",
                                          "idle_test", "__pycache__"))
        files.extend(pathlib.Path(dirpath) / f for f in filenames if f.endswith(".py"))
    return root, sorted(files)


def load_corpus(chars):
    """(tokens [chars] uint8 tensor, description): the first `chars` bytes of the stdlib."""
    import torch
    root, files = stdlib_sources()
    buf = bytearray()
    for f in files:
        buf += f.read_bytes()
        if len(buf) >= chars:
            break
    buf = bytes(buf[:chars])
    data = torch.frombuffer(bytearray(buf), dtype=torch.uint8).to(torch.int64)
    data = torch.where(data >= 128, torch.full_like(data, OTHER), data)
    desc = ("Python %s standard library (%s), .py files in sorted path order, first %d bytes"
            % (platform.python_version(), root, len(buf)))
    return data, desc


# ---- Model ------------------------------------------------------------------------------


def alibi_slopes(heads):
    """Press et al.'s slopes for a power-of-two number of heads: m_h = 2^(-8h/H)."""
    return [2.0 ** (-8.0 * (h + 1) / heads) for h in range(heads)]


def rope_thetas(head_dim, base=10000.0):
    """RoPE's frequencies theta_i = base^(-2i/d) (Su et al., eq. 15)."""
    return [base ** (-2.0 * i / head_dim) for i in range(head_dim // 2)]


def torch_rope(x, base=10000.0):
    """RoPE on x [batch, seq, heads, d] at positions 0..seq-1 by plain torch ops, half-split
    pairs (i, i + d/2), as gpe.Rope's default pairing (the timing baseline)."""
    import torch
    s, d = x.shape[1], x.shape[-1]
    half = d // 2
    theta = base ** (-2.0 * torch.arange(half, dtype=torch.float64) / d)
    ang = torch.arange(s, dtype=torch.float64)[:, None] * theta[None, :]
    c = torch.cos(ang).to(x.dtype)[None, :, None, :]
    sn = torch.sin(ang).to(x.dtype)[None, :, None, :]
    a, b = x[..., :half], x[..., half:]
    return torch.cat([a * c - b * sn, a * sn + b * c], -1)


def make_model(cfg, encoding):
    """The decoder with `encoding` (a trained name of ENCODINGS, "none" for the core alone,
    or "sdpa_rope": RoPE by torch ops + SDPA, the timing baseline)."""
    import torch
    from torch import nn
    import gpe
    import gpe.torch as gt

    d_model, heads, layers, L = cfg["d_model"], cfg["heads"], cfg["layers"], cfg["seq"]
    hd = d_model // heads
    threads = cfg["threads"]
    rank = 2  # GRAPE-AP's rank
    # T5: distances >= max_distance share the last bucket; at L every bucket is trained
    # (the library needs max_distance > num_buckets / 2 = 16).
    t5_max = max(L, 32)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
            self.qkv = nn.Linear(d_model, 3 * d_model, bias=False)
            self.proj = nn.Linear(d_model, d_model)
            self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(),
                                     nn.Linear(4 * d_model, d_model))
            if encoding == "fox":
                # FoX's forget gate per head, f_t = sigmoid(w^T x_t + b).
                self.gate = nn.Linear(d_model, heads)
            if encoding == "grape_ap":
                # GRAPE-AP's per-token w_t and u_l [heads, rank]: psi(t, l) = -softplus(<w_t, u_l>).
                self.ap_w = nn.Linear(d_model, heads * rank)
                self.ap_u = nn.Linear(d_model, heads * rank)

        def attend(self, h, q, k, v, shared, rope):
            kw = dict(causal=True, threads=threads)
            if encoding in ("rope", "xpos"):
                return gt.attention(q, k, v, rope=rope, **kw)
            if encoding == "sdpa_rope":
                import torch.nn.functional as F
                q, k = torch_rope(q), torch_rope(k)
                o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                                   v.transpose(1, 2), is_causal=True)
                return o.transpose(1, 2)
            if encoding == "alibi":
                return gt.attention(q, k, v, alibi="causal", **kw)
            if encoding == "t5":
                return gt.attention(q, k, v, bias=gt.T5Bias(shared.t5_table, max_distance=t5_max,
                                                             bidirectional=False), **kw)
            if encoding == "shaw":
                return gt.attention(q, k, v, shaw_max_distance=shared.shaw_k,
                                    shaw_key_table=shared.shaw_key,
                                    shaw_value_table=shared.shaw_value, **kw)
            if encoding == "grape_a":
                return gt.attention(q, k, v, bias=gt.GrapeABias(slopes=shared.grape_a_slopes),
                                    **kw)
            if encoding == "grape_m":
                return gt.attention(q, k, v, encoding=gt.GrapeMEncoding(
                    shared.grape_m_a, shared.grape_m_b, shared.grape_m_omega), **kw)
            if encoding == "algebraic":
                return gt.attention(q, k, v, encoding=gt.AlgebraicSequenceEncoding(
                    shared.algebraic_weight), **kw)
            if encoding in ("fox", "grape_ap"):
                # Both take per-token tensors of one sequence (batch 1): one call per row.
                b, s = h.shape[0], h.shape[1]
                if encoding == "fox":
                    logits = self.gate(h)  # [b, s, heads]
                    bias = [gt.FoxBias(logits[i]) for i in range(b)]
                else:
                    w = self.ap_w(h).view(b, s, heads, rank)
                    u = self.ap_u(h).view(b, s, heads, rank)
                    bias = [gt.GrapeApBias(w[i], u[i]) for i in range(b)]
                return torch.cat([gt.attention(q[i:i + 1], k[i:i + 1], v[i:i + 1],
                                               bias=bias[i], **kw) for i in range(b)])
            # none, sinusoidal, learned: no encoding inside attention.
            return gt.attention(q, k, v, **kw)

        def forward(self, x, shared, rope):
            b, s, _ = x.shape
            h = self.ln1(x)
            q, k, v = self.qkv(h).view(b, s, 3, heads, hd).unbind(2)
            x = x + self.proj(self.attend(h, q, k, v, shared, rope).reshape(b, s, d_model))
            return x + self.mlp(self.ln2(x))

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(VOCAB, d_model)
            self.blocks = nn.ModuleList([Block() for _ in range(layers)])
            self.ln = nn.LayerNorm(d_model)
            self.head = nn.Linear(d_model, VOCAB, bias=False)
            self.encoding = encoding
            # Encoding parameters, shared by the layers (as T5 shares its table and
            # Kogkalidis et al. their generators).
            if encoding == "learned":
                # 8L rows so that the model can be evaluated at 8L at all; rows L..8L-1
                # receive no gradient in training and stay at their random init.
                self.pos_table = nn.Parameter(torch.randn(8 * L, d_model))
            if encoding == "t5":
                self.t5_table = nn.Parameter(torch.zeros(32, heads))
            if encoding == "shaw":
                self.shaw_k = cfg["shaw_k"]
                n = 2 * self.shaw_k + 1
                self.shaw_key = nn.Parameter(torch.randn(n, hd) * hd ** -0.5)
                self.shaw_value = nn.Parameter(torch.randn(n, hd) * hd ** -0.5)
            if encoding == "grape_a":
                self.grape_a_slopes = nn.Parameter(torch.tensor(alibi_slopes(heads)))
            if encoding == "grape_m":
                # RoPE as GRAPE-M (GRAPE, "RoPE as a special case"): d/2 generators on the
                # planes (i, i + d/2) with omega_i = theta_i; all of a, b, omega learnable.
                a, b = torch.zeros(hd // 2, hd), torch.zeros(hd // 2, hd)
                for i in range(hd // 2):
                    a[i, i], b[i, i + hd // 2] = 1.0, 1.0
                self.grape_m_a, self.grape_m_b = nn.Parameter(a), nn.Parameter(b)
                self.grape_m_omega = nn.Parameter(torch.tensor(rope_thetas(hd)))
            if encoding == "algebraic":
                # Kogkalidis et al. sec. 4.2: start near the identity, many low-angle
                # rotations and progressively fewer at larger angles: S block-diagonal
                # with RoPE's geometric angles, plus a little noise so that the planes
                # are not the axis-aligned ones. S = A - A^T, so A = S / 2 gives S.
                s_mat = torch.zeros(hd, hd)
                for i, t in enumerate(rope_thetas(hd)):
                    s_mat[i, i + hd // 2], s_mat[i + hd // 2, i] = -t, t
                noise = 1e-3 * torch.randn(hd, hd)
                self.algebraic_weight = nn.Parameter(s_mat / 2 + noise)

        def forward(self, idx, rope=None):
            s = idx.shape[1]
            x = self.embed(idx)
            if encoding == "sinusoidal":
                x = x + gt.sinusoidal(torch.arange(s), d_model, dtype=x.dtype)[None]
            elif encoding == "learned":
                x = x + gt.learned_positions(self.pos_table, torch.arange(s))[None]
            if rope is None and encoding in ("rope", "xpos"):
                rope = self.default_rope
            for blk in self.blocks:
                x = blk(x, self, rope)
            return self.head(self.ln(x))

    m = Model()
    if encoding == "rope":
        m.default_rope = gpe.Rope(hd)
    elif encoding == "xpos":
        m.default_rope = gpe.Rope(hd, xpos=True)
    return m


def eval_rope(name, cfg, length):
    """The gpe.Rope that evaluates the trained RoPE model at `length` under `name`'s
    schedule, factor = length / L (None: the trained default)."""
    import gpe
    hd, L = cfg["d_model"] // cfg["heads"], cfg["seq"]
    factor = length / L
    if name not in SCHEDULES or factor <= 1.0:
        return None
    sched = SCHEDULES[name]
    if sched == "dynamic_ntk":
        return gpe.Rope(hd, schedule="dynamic_ntk", factor=factor, original_max_position=L,
                        current_length=length)
    return gpe.Rope(hd, schedule=sched, factor=factor, original_max_position=L)


# ---- Training and evaluation -------------------------------------------------------------


def core_state(cfg, seed):
    """The weights every encoding starts from for this seed."""
    import torch
    torch.manual_seed(seed)
    return make_model(cfg, "none").state_dict()


def build(cfg, encoding, seed):
    import torch
    state = core_state(cfg, seed)
    torch.manual_seed(10_000 + seed)  # the encoding's own parameters
    m = make_model(cfg, encoding)
    missing, unexpected = m.load_state_dict(state, strict=False)
    core = set(state)
    if unexpected or any(k in core for k in missing):
        raise RuntimeError("core weights do not match: %s %s" % (missing, unexpected))
    return m


def batches(data, steps, batch, seq, seed):
    """The training windows of a seed, drawn up front (the same for every encoding)."""
    import torch
    g = torch.Generator().manual_seed(seed)
    starts = torch.randint(0, data.numel() - seq - 1, (steps, batch), generator=g)
    offs = torch.arange(seq + 1)
    return data[starts[:, :, None] + offs[None, None, :]]


def lr_at(step, cfg):
    """Linear warmup over 5% of the steps, then cosine decay to 10% of the peak."""
    steps, peak = cfg["steps"], cfg["lr"]
    warm = max(1, steps // 20)
    if step < warm:
        return peak * (step + 1) / warm
    t = (step - warm) / max(1, steps - warm)
    return peak * (0.1 + 0.45 * (1.0 + math.cos(math.pi * t)))


def step_fn(model, opt):
    import torch

    def step(xy, lr):
        for g in opt.param_groups:
            g["lr"] = lr
        logits = model(xy[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), xy[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return float(loss.detach())
    return step


def evaluate(model, eval_data, length, rope, max_windows):
    """exp(mean next-token cross-entropy) over non-overlapping windows of `length` tokens."""
    import torch
    n = min(max_windows, (eval_data.numel() - 1) // length)
    x = eval_data[:n * length].view(n, length)
    y = eval_data[1:n * length + 1].view(n, length)
    total = 0.0
    with torch.no_grad():
        for i in range(0, n, 8):
            logits = model(x[i:i + 8], rope=rope)
            total += float(torch.nn.functional.cross_entropy(
                logits.reshape(-1, VOCAB), y[i:i + 8].reshape(-1), reduction="sum"))
    return math.exp(total / (n * length))


def train_one(job):
    """Trains one (encoding, seed) and evaluates it (and the RoPE schedules on the trained
    RoPE model) at every length; returns a list of result rows."""
    cfg, trained, seed, data = job
    import torch
    torch.set_num_threads(cfg["threads"])
    n_train = int(0.9 * data.numel())
    train_data, eval_data = data[:n_train], data[n_train:]
    t0 = time.perf_counter()
    model = build(cfg, trained, seed)
    opt = torch.optim.Adam(model.parameters(), lr=cfg["lr"])
    step = step_fn(model, opt)
    losses = []
    for i, xy in enumerate(batches(train_data, cfg["steps"], cfg["batch"], cfg["seq"], seed)):
        losses.append(step(xy, lr_at(i, cfg)))
    model.eval()
    # The same tokens at every length: a whole number of windows of the longest length.
    longest = cfg["seq"] * max(cfg["factors"])
    windows_tokens = eval_window_tokens(cfg["eval_tokens"], eval_data.numel(), longest)
    if windows_tokens == 0:  # main refuses such a run before training
        raise ValueError("no window of %d tokens to evaluate" % longest)
    rows = []
    names = [n for n, (t, _) in ENCODINGS.items() if t == trained and n in cfg["encodings"]]
    for name in names:
        ppl = {}
        for f in cfg["factors"]:
            length = cfg["seq"] * f
            ppl[f] = evaluate(model, eval_data, length, eval_rope(name, cfg, length),
                              windows_tokens // length)
        tail = losses[-max(1, len(losses) // 20):]
        rows.append({"encoding": name, "seed": seed, "ppl": ppl, "loss0": losses[0],
                     "final_loss": sum(tail) / len(tail), "seconds": time.perf_counter() - t0,
                     "eval_tokens": windows_tokens})
    return rows


def time_attention(cfg, data, steps):
    """Median ms per training step of the RoPE model with gpe.torch.attention (RoPE inside)
    and with torch RoPE + SDPA, same weights and batches, steps interleaved."""
    import torch
    torch.set_num_threads(cfg["threads"])
    n_train = int(0.9 * data.numel())
    runs = {}
    for kind in ("gpe", "sdpa"):
        m = build(cfg, "rope" if kind == "gpe" else "sdpa_rope", 0)
        runs[kind] = (step_fn(m, torch.optim.Adam(m.parameters(), lr=cfg["lr"])), [])
    for xy in batches(data[:n_train], steps, cfg["batch"], cfg["seq"], 12345):
        for kind, (step, secs) in runs.items():
            t0 = time.perf_counter()
            step(xy, cfg["lr"])
            secs.append(time.perf_counter() - t0)
    out = {}
    for kind, (_, secs) in runs.items():
        timed = sorted(secs[min(3, len(secs) - 1):])  # the first steps warm caches
        out[kind] = 1e3 * timed[len(timed) // 2]
    return out


# ---- Report -----------------------------------------------------------------------------


def summarise(rows, factors):
    """{encoding: {factor: (mean, std)}, ...}, sample std (0 for one seed)."""
    out = {}
    for name in ENCODINGS:
        mine = [r for r in rows if r["encoding"] == name]
        if not mine:
            continue
        s = {}
        for f in factors:
            vals = [r["ppl"][f] for r in mine]
            s[f] = (statistics.mean(vals), statistics.stdev(vals) if len(vals) > 1 else 0.0)
        losses = [r["final_loss"] for r in mine]
        s["final_loss"] = (statistics.mean(losses),
                           statistics.stdev(losses) if len(losses) > 1 else 0.0)
        s["seeds"] = len(mine)
        out[name] = s
    return out


def cpu_model():
    try:
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def fmt(mean, std):
    if not math.isfinite(mean):
        return "nan"
    if mean >= 1000:
        return "%.3g ± %.2g" % (mean, std)
    return "%.2f ± %.2f" % (mean, std)


def eval_note(meta):
    """Why the evaluated tokens differ from --eval-tokens, when they do."""
    asked = meta.get("eval_tokens_asked", meta["eval_tokens"])
    if asked == meta["eval_tokens"]:
        return ""
    return (" (--eval-tokens %d: at most the held-out tokens with a next token, rounded down "
            "to a multiple of the longest length, %d)"
            % (asked, meta["seq"] * max(meta["factors"])))


def report(summary, skipped, timing, meta, intro=""):
    f = meta["factors"]
    L = meta["seq"]
    lines = ["# Length extrapolation of GroupPE's sequence encodings", ""]
    if intro:
        lines += [intro.strip(), ""]
    lines += [
        "Perplexity per character on the held-out split (mean ± sample std over %d seed%s), "
        "trained at L = %d, evaluated at %s." % (meta["seeds"], "s" if meta["seeds"] > 1 else "",
                                                 L, ", ".join("%dL" % x for x in f)),
        "",
        "| encoding | %s | final train loss (nats) | what |" % " | ".join(
            "ppl @ %d (%dL)" % (L * x, x) for x in f),
        "|---|%s---|---|" % ("---|" * len(f)),
    ]
    for name, (_, what) in ENCODINGS.items():
        if name in summary:
            s = summary[name]
            cells = " | ".join(fmt(*s[x]) for x in f)
            lines.append("| %s | %s | %.3f ± %.3f | %s |" % (name, cells, s["final_loss"][0],
                                                             s["final_loss"][1], what))
        elif name in skipped:
            lines.append("| %s | %s | — | not run: %s |" % (
                name, " | ".join("—" for _ in f), skipped[name]))
    lines += ["", "RoPE schedules: the trained `rope` model evaluated with gpe.Rope("
              "schedule=..., factor = eval length / L, original_max_position = L; dynamic NTK "
              "also current_length = eval length); at 1L they are `rope` itself. Final train "
              "loss: mean over the last 5% of the steps (the schedules share rope's)."]
    if timing:
        lines += ["", "Time per training step (RoPE, batch %d x %d tokens, %d thread%s, median "
                  "of %d interleaved steps after 3 warm-up): gpe.torch.attention with RoPE "
                  "inside %.2f ms, torch RoPE + scaled_dot_product_attention %.2f ms "
                  "(GroupPE / SDPA = %.2f)." % (
                      meta["batch"], L, meta["threads"], "" if meta["threads"] == 1 else "s",
                      meta["timing_steps"], timing["gpe"], timing["sdpa"],
                      timing["gpe"] / timing["sdpa"])]
    lines += ["", "## Run", "",
              "- command: `%s`" % meta["command"],
              "- machine: %s, %d cores; %d worker process%s, %d torch thread each"
              % (meta["cpu"], os.cpu_count() or 0, meta["workers"],
                 "" if meta["workers"] == 1 else "es", meta["threads"]),
              "- Python %s, torch %s" % (meta["python"], meta["torch"]),
              "- data: %s; %d training tokens, %d held-out tokens of which %d evaluated at "
              "every length%s" % (meta["corpus"], meta["n_train"], meta["n_eval"],
                                  meta["eval_tokens"], eval_note(meta)),
              "- model: pre-norm causal decoder, d_model %d, %d layers, %d heads of %d, MLP 4x, "
              "vocabulary %d" % (meta["d_model"], meta["layers"], meta["heads"],
                                 meta["d_model"] // meta["heads"], VOCAB),
              "- training: L = %d, %d steps of batch %d, Adam lr %g (5%% warmup, cosine to "
              "10%%), gradient clip 1; seeds %s; Shaw k = %d"
              % (L, meta["steps"], meta["batch"], meta["lr"], meta["seed_list"], meta["shaw_k"]),
              "- wall time: %.0f s" % meta["wall"]]
    return "\n".join(lines) + "\n"


def plot(summary, meta, path):
    """Perplexity against eval length, log2 x axis, one line per encoding with error bars;
    False when matplotlib is missing."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        import matplotlib.ticker  # noqa: F401
    except ImportError:
        print("length_extrapolation: matplotlib not installed; no plot (tools/setup_peers.sh "
              "installs it)")
        return False
    import io
    f = meta["factors"]
    xs = [meta["seq"] * x for x in f]
    fig, ax = plt.subplots(figsize=(9, 6))
    colors = plt.get_cmap("tab20").colors
    for i, (name, s) in enumerate(summary.items()):
        # The eval-time RoPE schedules dashed: they are the trained RoPE model.
        ax.errorbar(xs, [s[x][0] for x in f], yerr=[s[x][1] for x in f], label=name,
                    marker="o", ms=3, capsize=3, color=colors[i % len(colors)],
                    ls="--" if name in SCHEDULES else "-")
    ax.set_xscale("log", base=2)
    means = [s[x][0] for s in summary.values() for x in f]
    logy = bool(means) and max(means) > 10 * min(means)  # a blow-up: log scale
    if logy:
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
    ax.set_xticks(xs)
    ax.set_xticklabels(["%d (%dL)" % (a, x) for a, x in zip(xs, f)])
    ax.set_xlabel("evaluation length (tokens)")
    ax.set_ylabel("perplexity per character" + (" (log scale)" if logy else ""))
    ax.set_title("Trained at L = %d, %d steps, %d seed%s" % (
        meta["seq"], meta["steps"], meta["seeds"], "s" if meta["seeds"] > 1 else ""))
    ax.axvline(meta["seq"], color="grey", lw=0.5)
    ax.legend(fontsize=7, ncol=2, loc="upper left")
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    write_atomic(path, buf.getvalue())
    return True


# ---- Main -------------------------------------------------------------------------------


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true",
                   help="smoke run: tiny corpus slice, L 16, 10 steps, 1 seed, 1x and 2x")
    p.add_argument("--out", default=None,
                   help="directory for the report and plot (full: docs/measured of the "
                        "workspace; --quick: a temporary directory)")
    p.add_argument("--encodings", default=",".join(ENCODINGS),
                   help="comma-separated subset of: " + ", ".join(ENCODINGS))
    p.add_argument("--seeds", type=int, default=None, help="full 3, quick 1")
    p.add_argument("--steps", type=int, default=None, help="full 300, quick 10")
    p.add_argument("--seq", type=int, default=None, help="training length L (full 64, quick 16)")
    p.add_argument("--batch", type=int, default=None, help="full 16, quick 4")
    p.add_argument("--chars", type=int, default=None, help="corpus bytes (full 2e6, quick 2e5)")
    p.add_argument("--eval-tokens", type=int, default=None,
                   help="held-out tokens evaluated at every length (full 32768, quick 512)")
    p.add_argument("--d-model", type=int, default=64)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--shaw-k", type=int, default=16, help="Shaw et al.'s clipping distance")
    p.add_argument("--workers", type=int, default=None,
                   help="training processes (full: the cores, at most 2; quick: 1)")
    p.add_argument("--timing-steps", type=int, default=None, help="full 40, quick 6")
    p.add_argument("--intro", default=None, help="a file whose text opens the report")
    p.add_argument("--from-json", default=None,
                   help="rewrite the report and plot in --out from a run's "
                        "length_extrapolation.json (no training)")
    return p.parse_args(argv)


def rewrite(path, out, intro):
    """The report and plot again from a run's raw numbers (e.g. with an introduction)."""
    raw = json.loads(path.read_text())
    rows, meta = raw["rows"], raw["meta"]
    for r in rows:
        r["ppl"] = {int(k): v for k, v in r["ppl"].items()}
    meta["factors"] = tuple(meta["factors"])
    summary = summarise(rows, meta["factors"])
    text = report(summary, {}, raw["timing"], meta, intro)
    write_atomic(out / "length_extrapolation.md", text)
    plotted = plot(summary, meta, out / "length_extrapolation.png")
    print(text)
    return {"rows": rows, "summary": summary, "timing": raw["timing"], "meta": meta,
            "out": out, "report": text, "plotted": plotted}


def main(argv=None):
    args = parse(argv)
    # Every argument is checked before torch is imported or the corpus is read, so that a
    # mistyped command fails at once, with its own message.
    q = args.quick
    pick = lambda v, full, quick: v if v is not None else (quick if q else full)
    encodings = [e.strip() for e in args.encodings.split(",") if e.strip()]
    if not encodings:  # a run of nothing would still replace the report with empty tables
        _fail("--encodings names no encoding (known: %s)" % ", ".join(ENCODINGS))
    for e in encodings:
        if e not in ENCODINGS:
            _fail("unknown encoding %r (known: %s)" % (e, ", ".join(ENCODINGS)))
    for name in ("seeds", "steps", "batch", "seq", "eval_tokens", "workers", "timing_steps",
                 "d_model", "heads", "layers", "chars"):
        v = getattr(args, name)
        if v is not None and v < 1:
            _fail("--%s must be >= 1, got %d" % (name.replace("_", "-"), v))
    if args.d_model % args.heads:
        _fail("--d-model %d does not split into %d heads" % (args.d_model, args.heads))
    paired = [e for e in encodings if ENCODINGS[e][0] in ("rope", "xpos", "grape_m", "algebraic")]
    if paired and (args.d_model // args.heads) % 2:
        # RoPE, xPos, GRAPE-M and the algebraic encoding rotate pairs of a head's
        # dimensions (Su et al. eq. 34), so their heads are even.
        _fail("--d-model %d gives heads of %d dimensions; %s rotate pairs of them (d_model "
              "must be a multiple of %d)" % (args.d_model, args.d_model // args.heads,
                                             ", ".join(paired), 2 * args.heads))
    # Paths as the user typed them: relative to where `bazel run` was called.
    user = lambda p: os.path.join(os.environ.get("BUILD_WORKING_DIRECTORY", ""), p)
    if args.out is not None:
        args.out = user(args.out)
    if args.intro:
        args.intro = user(args.intro)
    if args.from_json:
        args.from_json = user(args.from_json)
    cfg = {"d_model": args.d_model, "heads": args.heads, "layers": args.layers,
           "seq": pick(args.seq, 64, 16), "steps": pick(args.steps, 300, 10),
           "batch": pick(args.batch, 16, 4), "lr": args.lr, "threads": 1,
           "shaw_k": args.shaw_k, "factors": (1, 2) if q else (1, 2, 4, 8),
           "eval_tokens": pick(args.eval_tokens, 32768, 512), "encodings": encodings}
    seeds = list(range(pick(args.seeds, 3, 1)))
    workers = pick(args.workers, min(2, os.cpu_count() or 1), 1)
    timing_steps = pick(args.timing_steps, 40, 6)
    if args.out is None:
        if q:
            out = pathlib.Path(tempfile.mkdtemp(prefix="length_extrapolation_"))
        else:
            ws = os.environ.get("BUILD_WORKSPACE_DIRECTORY",
                                str(pathlib.Path(__file__).resolve().parents[2]))
            out = pathlib.Path(ws) / "docs" / "measured"
    else:
        out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    intro = pathlib.Path(args.intro).read_text() if args.intro else ""
    if args.from_json:
        return rewrite(pathlib.Path(args.from_json), out, intro)

    _import_torch()
    import torch
    t_start = time.perf_counter()
    torch.set_num_threads(1)
    data, corpus = load_corpus(pick(args.chars, 2_000_000, 200_000))
    # The held-out tokens evaluated at every length, known before any training: a run
    # that could evaluate nothing stops here, not after all its training.
    n_train = int(0.9 * data.numel())
    longest = cfg["seq"] * max(cfg["factors"])
    used = eval_window_tokens(cfg["eval_tokens"], data.numel() - n_train, longest)
    if used == 0:
        _fail("--eval-tokens %d (and %d held-out tokens) hold no window of the longest "
              "evaluation length %d (%dL); give --eval-tokens >= %d, or more --chars"
              % (cfg["eval_tokens"], data.numel() - n_train, longest, max(cfg["factors"]),
                 longest))
    cfg = dict(cfg, eval_tokens=used, eval_tokens_asked=cfg["eval_tokens"])
    trained = []
    for e in encodings:
        if ENCODINGS[e][0] not in trained:
            trained.append(ENCODINGS[e][0])
    # The slowest encodings first, so that the workers finish together.
    slow = ("algebraic", "grape_ap", "grape_m", "fox")
    order = sorted(trained, key=lambda t: slow.index(t) if t in slow else len(slow))
    jobs = [(cfg, t, s, data) for s in seeds for t in order]
    rows = []
    if workers > 1:
        ctx = multiprocessing.get_context("fork")
        with ctx.Pool(workers) as pool:
            for r in pool.imap_unordered(train_one, jobs):
                rows.extend(r)
                print("  %s seed %d: %.0f s" % (r[0]["encoding"], r[0]["seed"], r[0]["seconds"]),
                      flush=True)
    else:
        for job in jobs:
            r = train_one(job)
            rows.extend(r)
            print("  %s seed %d: %.1f s" % (r[0]["encoding"], r[0]["seed"], r[0]["seconds"]),
                  flush=True)
    # After training, alone on the machine: the per-step time of both attentions.
    timing = time_attention(cfg, data, timing_steps) if "rope" in encodings else None
    wall = time.perf_counter() - t_start

    summary = summarise(rows, cfg["factors"])
    meta = dict(cfg, seeds=len(seeds), seed_list=seeds, workers=workers, wall=wall,
                timing_steps=timing_steps, cpu=cpu_model(), python=platform.python_version(),
                torch=torch.__version__, corpus=corpus, n_train=n_train,
                n_eval=data.numel() - n_train,
                command="run.py " + " ".join(argv if argv is not None else sys.argv[1:]))
    text = report(summary, {}, timing, meta, intro)
    md = out / "length_extrapolation.md"
    write_atomic(md, text)
    # The raw numbers (per seed), for other tables and plots.
    raw = {"rows": rows, "timing": timing,
           "meta": {k: v for k, v in meta.items() if k != "encodings"}}
    write_atomic(out / "length_extrapolation.json", json.dumps(raw, indent=1, default=str))
    plotted = plot(summary, meta, out / "length_extrapolation.png")
    print(text)
    print("wrote %s%s (%.0f s)" % (md, " and the plot" if plotted else "", wall))
    return {"rows": rows, "summary": summary, "timing": timing, "meta": meta, "out": out,
            "report": text, "plotted": plotted}


if __name__ == "__main__":
    main()
