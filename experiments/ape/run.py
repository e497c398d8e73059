"""Kogkalidis, Bernardy and Garg, "Algebraic Positional Encodings": the synthetic sequence
tasks of Table 1 and the tree copy / tree rotation tasks of Table 2, as commands over
gpe.torch.

    ./bazelw run //experiments/ape:run            # full run, 3 seeds
    ./bazelw run //experiments/ape:run -- --reduced  # shorter sequences and trees (~1 h)
    ./bazelw run //experiments/ape:run -- --quick # a smoke run (< 1 min)

Tasks (paper, sec. 4.1 and appendix B). Vocabulary 20 (+ BOS, EOS).
- copy: y = x. reverse: y = x reversed. repeat: y = x x (the paper names the task
  "sequence repetition" without defining it; the input written twice is our reading).
  Lengths from the discretised N(100, 10) (full mode; --quick: N(10, 1)).
- tree copy and tree rotation (the paper's "Reorder": every left child becomes a right
  child and vice versa) on binary trees whose maximum depth is drawn from the discretised
  N(7, 1) (full; --quick: N(3, 0.5) clipped to 2..3); 10 operator symbols on internal
  nodes and 10 leaf symbols (appendix B). A node below the maximum depth is internal with
  probability --branch (0.75; the paper gives no rate), the root always. The output tree is
  produced in a regression order: breadth-first or depth-first (preorder), Table 2's two
  columns, without padding nodes (the paper's "pad-free projection").

Model: a pre-norm encoder-decoder transformer (paper, Table 4: d_model 512, FFN 2048,
ReLU, (2, 2) layers, 8 heads; here smaller by default, see --d-model and the report),
input and output embeddings tied (sec. 4.2), the encoding applied in every attention:
encoder self-attention, causal decoder self-attention and cross-attention (the decoder's
positions against the encoder's, both from 0 / from the root). Token sequences of a batch
are packed (cu_seqlens): no padding. For every seed the core weights are identical across
encodings; the data are fixed across seeds (sec. 4.2: seeds vary initialisation and
optimisation only).

Teacher forcing: the decoder reads BOS + target[:-1]. Sequences predict target + EOS.
Trees predict exactly the output tree's nodes: decoder slot t carries the position of
output node t (its address for the tree encoding, t for the flat ones) and reads the
label of node t - 1, so the structure of the output is given and the labels are learned.

Encodings (all inside gpe.torch.attention except the additive sinusoidal one):
- sinusoidal: Vaswani et al.'s table added to the embeddings (flat positions);
- shaw: Shaw et al.'s key and value tables, clipping distance fixed at the length
  distribution's mean (appendix B; repeat: the targets' mean, twice it), shared by the
  layers and heads;
- rope: gpe.Rope(head_dim), base 10000;
- algebraic: W^p = exp(p S) (sec. 3.1), one learnable S shared by the layers (sec. 4.2)
  and, as gpe.torch.AlgebraicSequenceEncoding takes one [head_dim, head_dim] generator,
  by the heads too (the paper has one per head); near-identity initialisation: S has
  rotation angles spread geometrically from 1 down to 1e-4 rad (many small angles, few
  large; sec. 4.2) in a random orthonormal basis. The locality scaling c^|i - j| of the
  scores (sec. 4.2, c = 0.98) is multiplicative and the fused kernel has no
  multiplicative score term, so this row runs without it;
- algebraic_local: the same encoding with the locality scaling, c = 0.98, computed
  outside the fused kernel: q and k through gpe.torch.algebraic_sequence, the scores
  scaled by gpe.torch.locality_scale, softmax and the product with v by torch ops;
- trees: algebraic_tree, the free-group encoding (sec. 3.2) with two learnable skew
  generators S_0, S_1 (left, right) initialised as above, shared by layers and heads,
  node addresses as paths from the root (gpe.torch.attention's q_tree / k_tree); no
  locality scaling (gpe.torch.locality_scale takes integer positions, not tree
  distances). The flat encodings see the regression order's linearisation.
  Shiv and Quirk's tree encoding is not in gpe: reported as not run.

Training (appendix B): AdamW, 5% linear warm-up from 1e-7 to 5e-4, then cosine decay to
1e-9; gradient clip 1. Metric: token accuracy with teacher forcing on a held-out set, and
whole-sequence accuracy; mean ± sample std over seeds, beside the paper's numbers.

Writes ape_sequences.md, ape_trees.md and their .json (per-seed numbers) into --out
(full: docs/measured/ of the workspace; --quick: a temporary directory); a run of one
suite rewrites that suite's report and keeps the other suite's rows (and the run
description they came from) in ape.json; --from-json rewrites the reports from the
numbers without training. A run that would train nothing stops with exit status 2.

Budget (an extrapolation, not a full run): 20 training steps of the full configuration
per encoding (copy; tree rotation, breadth-first), one thread, on this project's 2-core
Xeon while other jobs kept its load average at 3-4: s/step sinusoidal 1.06, shaw 2.06,
rope 0.83, algebraic 3.12, algebraic_local 2.32 (sequences); sinusoidal 0.41, rope 0.43,
algebraic 2.90, algebraic_tree 2.03 (trees). Times 1500 steps x tasks x orders x 3 seeds:
about 230,000 s of single-thread training, some 32 hours on two workers (repeat's
targets are twice as long, so a little more); an idle machine should do better, by an
unmeasured factor. --time-steps N repeats this estimate; --suites / --encodings /
--steps cut the run down. --quick takes about 25 s.
"""

import argparse
import json
import math
import multiprocessing
import os
import pathlib
import platform
import random
import statistics
import sys
import tempfile
import time

from gpe._files import write_atomic

SYMBOLS = 20  # the paper's vocabulary (appendix B); trees: 10 operators, 10 leaves
BOS, EOS = SYMBOLS, SYMBOLS + 1
VOCAB = SYMBOLS + 2
OPERATORS = 10

SEQ_TASKS = ("copy", "reverse", "repeat")
TREE_TASKS = ("tree_copy", "tree_rotation")
ORDERS = ("breadth", "depth")

# name -> description (the report's last column).
SEQ_ENCODINGS = {
    "sinusoidal": "absolute, Vaswani et al. sec. 3.5, added to the embeddings",
    "shaw": "Shaw et al. relative key and value tables, clip(j - i, -k, k)",
    "rope": "RoPE (Su et al.), base 10000, inside the kernel",
    "algebraic": "orthogonal W^p = exp(pS), inside the kernel; no locality scaling",
    "algebraic_local": "orthogonal W^p, locality scaling c = 0.98 (unfused: gpe.torch ops)",
}
TREE_ENCODINGS = {
    "sinusoidal": "flat: absolute sinusoidal on the linearisation",
    "shiv_quirk": "Shiv and Quirk's tree encoding",
    "rope": "flat: RoPE on the linearisation",
    "algebraic": "flat orthogonal W^p on the linearisation, no locality scaling",
    "algebraic_tree": "tree orthogonal: free group on 2 generators, addresses from the root",
}
NOT_RUN = {
    "shiv_quirk": "gpe has no Shiv and Quirk tree encoding",
}

# Paper's Table 1 (accuracy %, mean and std over 3 seeds), transcribed from the text copy
# in shared/papers; the Relative copy score is printed without a std.
PAPER_T1 = {
    "sinusoidal": {"copy": (13.80, 3.5), "reverse": (13.30, 0.3), "repeat": (12.80, 0.5)},
    "shaw": {"copy": (100.00, None), "reverse": (64.80, 2.8), "repeat": (92.34, 0.3)},
    "rope": {"copy": (99.99, 0.0), "reverse": (97.00, 0.8), "repeat": (99.76, 0.3)},
    "algebraic_local": {"copy": (100.00, 0.0), "reverse": (99.81, 0.1), "repeat": (99.90, 0.0)},
}
# Paper's Table 2, Copy and Reorder (= rotation), breadth / depth regression (accuracy %).
# The text copy garbles RoPE's copy/depth cell into the same 85.46 ± 2.0 as its
# reorder/depth cell; it is transcribed as printed. Orthogonal (tree) and (flat) are the
# paper's runs with the locality scaling (ours: without it, see the docstring).
PAPER_T2 = {
    "sinusoidal": {("tree_copy", "breadth"): (24.52, 0.5), ("tree_copy", "depth"): (26.51, 0.4),
                   ("tree_rotation", "breadth"): (24.57, 0.2),
                   ("tree_rotation", "depth"): (25.70, 0.6)},
    "shiv_quirk": {("tree_copy", "breadth"): (98.35, 0.2), ("tree_copy", "depth"): (99.86, 0.2),
                   ("tree_rotation", "breadth"): (97.99, 0.2),
                   ("tree_rotation", "depth"): (99.62, 0.1)},
    "rope": {("tree_copy", "breadth"): (100.00, 0.0), ("tree_copy", "depth"): (85.46, 2.0),
             ("tree_rotation", "breadth"): (91.19, 5.2), ("tree_rotation", "depth"): (85.46, 2.0)},
    "algebraic": {("tree_copy", "breadth"): (99.99, 0.0), ("tree_copy", "depth"): (79.02, 4.9),
                  ("tree_rotation", "breadth"): (91.95, 2.3),
                  ("tree_rotation", "depth"): (74.90, 2.7)},
    "algebraic_tree": {("tree_copy", "breadth"): (99.06, 0.1),
                       ("tree_copy", "depth"): (99.70, 0.2),
                       ("tree_rotation", "breadth"): (95.92, 2.8),
                       ("tree_rotation", "depth"): (99.86, 0.0)},
}

# The configurations. FULL: the paper's lengths and depths and its optimiser schedule, with
# a smaller transformer than Table 4's (d_model 512, FFN 2048, 8 heads) so that the run
# fits two CPU cores (the budget: the module docstring); the paper gives no step count or
# batch size, these are ours. QUICK: a smoke run.
FULL = {"d_model": 64, "ffn": 256, "heads": 4, "layers": 2, "steps": 1500, "batch": 16,
        "train": 4000, "test": 500, "seq_mean": 100.0, "seq_std": 10.0, "depth_mean": 7.0,
        "depth_std": 1.0, "depth_min": 3, "depth_max": 9, "branch": 0.75, "seeds": 3}
# REDUCED: FULL's model and schedule on shorter sequences (N(20, 2)) and shallower trees
# (N(4, 1)), 1000 steps: the whole comparison (every encoding, task and order, 3 seeds) in
# about an hour on two idle cores, where FULL takes about 32 hours.
REDUCED = dict(FULL, steps=1000, train=2000, test=300, seq_mean=20.0, seq_std=2.0,
               depth_mean=4.0, depth_std=1.0, depth_min=2, depth_max=6)
QUICK = {"d_model": 16, "ffn": 32, "heads": 2, "layers": 1, "steps": 6, "batch": 4,
         "train": 64, "test": 16, "seq_mean": 10.0, "seq_std": 1.0, "depth_mean": 3.0,
         "depth_std": 0.5, "depth_min": 2, "depth_max": 3, "branch": 0.75, "seeds": 1}
PEAK_LR, START_LR, END_LR, WARMUP = 5e-4, 1e-7, 1e-9, 0.05
LOCALITY = 0.98


def _import_torch():
    try:
        import torch  # noqa: F401
    except ImportError as e:
        sys.exit("ape: PyTorch is not installed (%s); run tools/setup_torch.sh" % e)


def _fail(message):
    """A usage error: the message on stderr and exit status 2 (argparse's convention)."""
    print("ape: " + message, file=sys.stderr)
    raise SystemExit(2)


# ---- Data -------------------------------------------------------------------------------
# A sample: dict(src=[tokens], src_pos=[flat positions], src_tree=[addresses] or None,
# tgt=[targets], tgt_in=[decoder inputs], tgt_pos, tgt_tree).


def discrete_normal(rng, mean, std, lo, hi):
    return min(hi, max(lo, int(round(rng.gauss(mean, std)))))


def seq_target(task, x):
    if task == "copy":
        return list(x)
    if task == "reverse":
        return list(reversed(x))
    if task == "repeat":
        return list(x) + list(x)
    raise ValueError(task)


def seq_sample(task, rng, cfg):
    n = discrete_normal(rng, cfg["seq_mean"], cfg["seq_std"], 2, 10 ** 6)
    x = [rng.randrange(SYMBOLS) for _ in range(n)]
    y = seq_target(task, x) + [EOS]
    return {"src": x, "src_pos": list(range(n)), "src_tree": None,
            "tgt": y, "tgt_in": [BOS] + y[:-1], "tgt_pos": list(range(len(y))), "tgt_tree": None}


def random_tree(rng, max_depth, branch):
    """{address (tuple of 0 = left, 1 = right): label}: internal nodes carry operators
    0..9 and have two children, leaves carry 10..19; the root is internal."""
    tree = {}

    def grow(addr):
        if len(addr) < max_depth and (not addr or rng.random() < branch):
            tree[addr] = rng.randrange(OPERATORS)
            grow(addr + (0,))
            grow(addr + (1,))
        else:
            tree[addr] = OPERATORS + rng.randrange(SYMBOLS - OPERATORS)

    grow(())
    return tree


def rotate(tree):
    """The mirror image: every left child becomes a right child and vice versa."""
    return {tuple(1 - c for c in a): lab for a, lab in tree.items()}


def linearise(tree, order):
    """Addresses in regression order: breadth-first (level by level, left to right) or
    depth-first (preorder; tuple order puts a node before its subtrees, left first)."""
    if order == "breadth":
        return sorted(tree, key=lambda a: (len(a), a))
    if order == "depth":
        return sorted(tree)
    raise ValueError(order)


def tree_sample(task, order, rng, cfg):
    d = discrete_normal(rng, cfg["depth_mean"], cfg["depth_std"], cfg["depth_min"],
                        cfg["depth_max"])
    t = random_tree(rng, d, cfg["branch"])
    out = t if task == "tree_copy" else rotate(t)
    src_addr, tgt_addr = linearise(t, order), linearise(out, order)
    y = [out[a] for a in tgt_addr]
    return {"src": [t[a] for a in src_addr], "src_pos": list(range(len(src_addr))),
            "src_tree": [list(a) for a in src_addr], "tgt": y, "tgt_in": [BOS] + y[:-1],
            "tgt_pos": list(range(len(y))), "tgt_tree": [list(a) for a in tgt_addr]}


def dataset(task, order, cfg, data_seed=1234):
    """(train, test): fixed across the model seeds (sec. 4.2)."""
    rng = random.Random("%s/%s/%d" % (task, order, data_seed))
    make = (lambda: seq_sample(task, rng, cfg)) if task in SEQ_TASKS else (
        lambda: tree_sample(task, order, rng, cfg))
    return [make() for _ in range(cfg["train"])], [make() for _ in range(cfg["test"])]


# ---- Model ------------------------------------------------------------------------------


def near_identity_skew(dim, gen):
    """A skew-symmetric S whose rotation angles run geometrically from 1 to 1e-4 rad (many
    small, few large: the paper's near-identity initialisation, sec. 4.2), in a random
    orthonormal basis Q: S = Q B Q^T, B block-diagonal [[0, t], [-t, 0]]."""
    import torch
    half = dim // 2
    angles = [10.0 ** (-4.0 * i / max(1, half - 1)) for i in range(half)]
    b = torch.zeros(dim, dim, dtype=torch.float64)
    for i, t in enumerate(angles):
        b[2 * i, 2 * i + 1], b[2 * i + 1, 2 * i] = t, -t
    q, _ = torch.linalg.qr(torch.randn(dim, dim, generator=gen, dtype=torch.float64))
    return (q @ b @ q.T).float()


def make_model(cfg, encoding, seed, shaw_k):
    """The encoder-decoder with `encoding`; its core weights depend on the seed only."""
    import torch
    from torch import nn
    import gpe
    import gpe.torch as gt

    d, heads, layers, ffn = cfg["d_model"], cfg["heads"], cfg["layers"], cfg["ffn"]
    hd = d // heads

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.q, self.k, self.v = (nn.Linear(d, d, bias=False) for _ in range(3))
            self.o = nn.Linear(d, d)

        def forward(self, x, mem, qs, ks, causal, enc):
            t, s = x.shape[0], mem.shape[0]
            q = self.q(x).view(t, heads, hd)
            k = self.k(mem).view(s, heads, hd)
            v = self.v(mem).view(s, heads, hd)
            return self.o(enc.attend(q, k, v, qs, ks, causal).reshape(t, d))

    def ff():
        return nn.Sequential(nn.Linear(d, ffn), nn.ReLU(), nn.Linear(ffn, d))

    class EncLayer(nn.Module):
        def __init__(self):
            super().__init__()
            self.n1, self.n2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.att, self.ff = Attention(), ff()

        def forward(self, x, s, enc):
            h = self.n1(x)
            x = x + self.att(h, h, s, s, False, enc)
            return x + self.ff(self.n2(x))

    class DecLayer(nn.Module):
        def __init__(self):
            super().__init__()
            self.n1, self.n2, self.n3 = nn.LayerNorm(d), nn.LayerNorm(d), nn.LayerNorm(d)
            self.self_att, self.cross, self.ff = Attention(), Attention(), ff()

        def forward(self, x, mem, t, s, enc):
            h = self.n1(x)
            x = x + self.self_att(h, h, t, t, True, enc)
            x = x + self.cross(self.n2(x), mem, t, s, False, enc)
            return x + self.ff(self.n3(x))

    class Encoding(nn.Module):
        """The positional encoding's parameters (shared by every layer, sec. 4.2) and how
        an attention applies them."""

        def __init__(self, gen):
            super().__init__()
            self.rope = gpe.Rope(hd) if encoding == "rope" else None
            if encoding == "shaw":
                self.shaw_key = nn.Parameter(0.02 * torch.randn(2 * shaw_k + 1, hd, generator=gen))
                self.shaw_value = nn.Parameter(0.02 * torch.randn(2 * shaw_k + 1, hd,
                                                                  generator=gen))
            if encoding in ("algebraic", "algebraic_local"):
                # S = A - A^T: A = S / 2 gives S back.
                self.seq = gt.AlgebraicSequenceEncoding(
                    nn.Parameter(0.5 * near_identity_skew(hd, gen)))
            if encoding == "algebraic_tree":
                self.tree = nn.Parameter(0.5 * torch.stack([near_identity_skew(hd, gen)
                                                            for _ in range(2)]))

        def attend(self, q, k, v, qs, ks, causal):
            """qs, ks: dict(cu=, pos=, tree=) of the query and key tokens (packed)."""
            kw = dict(causal=causal, cu_seqlens_q=qs["cu"], cu_seqlens_k=ks["cu"],
                      q_positions=qs["pos"], k_positions=ks["pos"], threads=1)
            if encoding == "rope":
                return gt.attention(q, k, v, rope=self.rope, **kw)
            if encoding == "shaw":
                return gt.attention(q, k, v, shaw_max_distance=shaw_k,
                                    shaw_key_table=self.shaw_key,
                                    shaw_value_table=self.shaw_value, **kw)
            if encoding == "algebraic":
                return gt.attention(q, k, v, encoding=self.seq, **kw)
            if encoding == "algebraic_tree":
                a = self.tree
                return gt.attention(q, k, v, algebraic_tree=a - a.transpose(-1, -2),
                                    q_tree=qs["tree"], k_tree=ks["tree"], **kw)
            if encoding == "algebraic_local":
                return self.local(q, k, v, qs, ks, causal)
            return gt.attention(q, k, v, **kw)  # sinusoidal: positions added to the input

        def local(self, q, k, v, qs, ks, causal):
            # Sec. 4.2's locality scaling: score(i, j) c^|i - j| on the orthogonally
            # encoded q . k, then softmax. The packed tokens are scattered into a padded
            # [sequences, length] grid (positions are 0.. within each sequence), so that
            # the scores are [sequences, heads, Lq, Lk] blocks, padding masked out.
            skew = self.seq.skew()
            qe = gt.algebraic_sequence(q, qs["pos"], skew)
            ke = gt.algebraic_sequence(k, ks["pos"], skew)
            nb = qs["cu"].numel() - 1
            lq, lk = int(qs["pos"].max()) + 1, int(ks["pos"].max()) + 1

            def pad(x, side, length):
                out = x.new_zeros(nb, length, heads, hd)
                return out.index_put((side["seg"], side["pos"]), x)

            qp, kp, vp = pad(qe, qs, lq), pad(ke, ks, lk), pad(v, ks, lk)
            scores = torch.einsum("bqhd,bkhd->bhqk", qp, kp) / math.sqrt(hd)
            factor = gt.locality_scale(torch.ones(lq, lk), torch.arange(lq), torch.arange(lk),
                                       LOCALITY)
            lengths = ks["cu"][1:] - ks["cu"][:-1]
            allowed = (torch.arange(lk)[None, :] < lengths[:, None])[:, None, None, :]
            if causal:
                allowed = allowed & (torch.arange(lq)[:, None] >= torch.arange(lk)[None, :])
            scores = (scores * factor).masked_fill(~allowed, float("-inf"))
            o = torch.einsum("bhqk,bkhd->bqhd", torch.softmax(scores, -1), vp)
            return o[qs["seg"], qs["pos"]]

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            gen = torch.Generator().manual_seed(seed)
            torch.manual_seed(seed)  # the core: identical for every encoding of a seed
            self.emb = nn.Embedding(VOCAB, d)
            nn.init.normal_(self.emb.weight, std=d ** -0.5)
            self.enc_layers = nn.ModuleList(EncLayer() for _ in range(layers))
            self.dec_layers = nn.ModuleList(DecLayer() for _ in range(layers))
            self.enc_norm, self.dec_norm = nn.LayerNorm(d), nn.LayerNorm(d)
            gen.manual_seed(seed + 7919)
            self.pe = Encoding(gen)

        def embed(self, tokens, pos):
            x = self.emb(tokens) * math.sqrt(d)
            if encoding == "sinusoidal":
                x = x + gt.sinusoidal(pos, d).to(x.dtype)
            return x

        def forward(self, b):
            s, t = b["src"], b["tgt"]
            x = self.embed(s["tok"], s["pos"])
            for layer in self.enc_layers:
                x = layer(x, s, self.pe)
            mem = self.enc_norm(x)
            y = self.embed(t["tok"], t["pos"])
            for layer in self.dec_layers:
                y = layer(y, mem, t, s, self.pe)
            # Tied output embedding (sec. 4.2), scaled by d^-1/2 so that the logits start
            # small (the loss starts at about log VOCAB).
            return self.dec_norm(y) @ self.emb.weight.T / math.sqrt(d)

    return Model()


def core_state(model):
    """The weights every encoding shares (everything but the positional encoding's)."""
    return {k: v for k, v in model.state_dict().items() if not k.startswith("pe.")}


def collate(samples):
    """Packs samples into one token stream per side: tokens, positions, cu_seqlens,
    sequence ids and tree addresses."""
    import torch

    def side(tok_key, pos_key, tree_key):
        lens = [len(s[tok_key]) for s in samples]
        cu = [0]
        for n in lens:
            cu.append(cu[-1] + n)
        tree = None
        if samples[0][tree_key] is not None:
            tree = [a for s in samples for a in s[tree_key]]
        return {"tok": torch.tensor([x for s in samples for x in s[tok_key]]),
                "pos": torch.tensor([p for s in samples for p in s[pos_key]]),
                "cu": torch.tensor(cu), "tree": tree,
                "seg": torch.repeat_interleave(torch.arange(len(lens)), torch.tensor(lens))}

    b = {"src": side("src", "src_pos", "src_tree"), "tgt": side("tgt_in", "tgt_pos", "tgt_tree")}
    b["target"] = torch.tensor([x for s in samples for x in s["tgt"]])
    return b


def lr_at(step, steps):
    """Appendix B: 5% linear warm-up from 1e-7 to 5e-4, 95% cosine decay to 1e-9."""
    warm = max(1, int(WARMUP * steps))
    if step < warm:
        return START_LR + (PEAK_LR - START_LR) * step / warm
    f = (step - warm) / max(1, steps - warm)
    return END_LR + 0.5 * (PEAK_LR - END_LR) * (1 + math.cos(math.pi * f))


def evaluate(model, test, batch):
    """(token accuracy, sequence accuracy) with teacher forcing."""
    import torch
    right = total = seq_right = 0
    with torch.no_grad():
        for i in range(0, len(test), batch):
            chunk = test[i:i + batch]
            b = collate(chunk)
            ok = model(b).argmax(-1) == b["target"]
            right += int(ok.sum())
            total += ok.numel()
            start = 0
            for s in chunk:
                n = len(s["tgt"])
                seq_right += bool(ok[start:start + n].all())
                start += n
    return right / total, seq_right / len(test)


def train_one(job):
    """Trains one (task, order, encoding, seed); returns its row."""
    import torch
    torch.set_num_threads(1)
    cfg, task, order, encoding, seed, data = job
    train, test = data
    shaw_k = int(round(cfg["seq_mean"] * (2 if task == "repeat" else 1)))
    if task in TREE_TASKS:
        shaw_k = max(1, int(sum(len(s["src"]) for s in train) / len(train)))
    t0 = time.perf_counter()
    model = make_model(cfg, encoding, seed, shaw_k)
    opt = torch.optim.AdamW(model.parameters(), lr=START_LR)
    rng = random.Random(seed)
    losses = []
    for step in range(cfg["steps"]):
        for g in opt.param_groups:
            g["lr"] = lr_at(step, cfg["steps"])
        b = collate([train[rng.randrange(len(train))] for _ in range(cfg["batch"])])
        loss = torch.nn.functional.cross_entropy(model(b), b["target"])
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(float(loss.detach()))
    acc, seq_acc = evaluate(model, test, cfg["batch"])
    tail = losses[-max(1, len(losses) // 20):]
    return {"task": task, "order": order, "encoding": encoding, "seed": seed,
            "accuracy": acc, "sequence_accuracy": seq_acc, "first_loss": losses[0],
            "final_loss": statistics.mean(tail), "seconds": time.perf_counter() - t0}


# ---- Report -----------------------------------------------------------------------------


def mean_std(vals):
    return statistics.mean(vals), (statistics.stdev(vals) if len(vals) > 1 else 0.0)


def cell(rows, key="accuracy"):
    if not rows:
        return "—"
    m, s = mean_std([100.0 * r[key] for r in rows])
    return "%.2f ± %.2f" % (m, s) if math.isfinite(m) else "nan"


def paper_cell(v):
    if v is None:
        return "—"
    return "%.2f" % v[0] if v[1] is None else "%.2f ± %.1f" % v


def cpu_model():
    try:
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def run_section(meta, suite):
    c = meta["cfg"]
    lines = ["", "## Run", "",
             "- command: `%s`%s" % (meta["command"],
                                    " (smoke run: tiny model and data, scaled down)"
                                    if meta["quick"] else
                                    " (reduced: the full model and schedule on shorter "
                                    "sequences and shallower trees, 1000 steps, so that the "
                                    "comparison fits about an hour on 2 cores)"
                                    if meta.get("reduced") else ""),
             "- machine: %s, %d cores; %d worker process%s, 1 torch thread each"
             % (meta["cpu"], meta["cores"], meta["workers"],
                "" if meta["workers"] == 1 else "es"),
             "- Python %s, torch %s" % (meta["python"], meta["torch"]),
             "- model: pre-norm encoder-decoder, d_model %d, FFN %d (ReLU), (%d, %d) layers, "
             "%d heads of %d, tied embeddings (the paper's Table 4: 512, 2048, (2, 2), 8 heads)"
             % (c["d_model"], c["ffn"], c["layers"], c["layers"], c["heads"],
                c["d_model"] // c["heads"]),
             "- training: %d steps of batch %d, AdamW, 5%% warm-up 1e-7 -> 5e-4, cosine to "
             "1e-9, clip 1; %d training and %d held-out samples per task, fixed across seeds; "
             "seeds %s" % (c["steps"], c["batch"], c["train"], c["test"], meta["seeds"])]
    if suite == "sequences":
        lines.append("- lengths: discretised N(%g, %g)%s" % (
            c["seq_mean"], c["seq_std"], " (the paper: N(100, 10))"
            if c["seq_mean"] != 100 else ""))
    else:
        lines.append("- trees: maximum depth discretised N(%g, %g) clipped to %d..%d%s, "
                     "branching probability %g below it" % (
                         c["depth_mean"], c["depth_std"], c["depth_min"], c["depth_max"],
                         " (the paper: N(7, 1))" if c["depth_mean"] != 7 else "", c["branch"]))
    lines.append("- wall time: %.0f s" % meta["wall"])
    return lines


def report_sequences(rows, meta, intro=""):
    lines = ["# APE Table 1: synthetic sequence tasks", ""]
    if intro:
        lines += [intro.strip(), ""]
    lines += ["Token accuracy (%%) with teacher forcing on held-out samples, mean ± sample std "
              "over %d seed%s; the paper's Table 1 beside it. Sequence accuracy (every "
              "target token right) in brackets." % (len(meta["seeds"]),
                                                   "s" if len(meta["seeds"]) > 1 else ""),
              "",
              "| encoding | %s | %s | what |" % (
                  " | ".join(t for t in SEQ_TASKS),
                  " | ".join("paper %s" % t for t in SEQ_TASKS)),
              "|---|%s%s---|" % ("---|" * len(SEQ_TASKS), "---|" * len(SEQ_TASKS))]
    for enc, what in SEQ_ENCODINGS.items():
        paper = " | ".join(paper_cell(PAPER_T1.get(enc, {}).get(t)) for t in SEQ_TASKS)
        if enc in meta["not_run"]:
            lines.append("| %s | %s | %s | not run: %s |" % (
                enc, " | ".join("—" for _ in SEQ_TASKS), paper, meta["not_run"][enc]))
            continue
        cells = []
        for t in SEQ_TASKS:
            mine = [r for r in rows if r["encoding"] == enc and r["task"] == t]
            cells.append("%s (%s)" % (cell(mine), cell(mine, "sequence_accuracy"))
                         if mine else "—")
        lines.append("| %s | %s | %s | %s |" % (enc, " | ".join(cells), paper, what))
    lines += ["", "The paper's Orthogonal row (with its locality scaling) stands beside "
              "`algebraic_local`; `algebraic` is the same encoding inside the fused kernel, "
              "which cannot apply the multiplicative locality scaling. The paper's Relative "
              "row stands beside `shaw`. Repeat: the target is the input written twice (the "
              "paper does not define the task further). The orthogonal generators are "
              "shared by the layers (as the paper) and by the heads (the paper: one per "
              "head; gpe.torch.AlgebraicSequenceEncoding takes one [head_dim, head_dim] "
              "generator)."]
    return "\n".join(lines + run_section(meta, "sequences")) + "\n"


def report_trees(rows, meta, intro=""):
    cols = [(t, o) for t in TREE_TASKS for o in ORDERS]
    lines = ["# APE Table 2: tree copy and tree rotation", ""]
    if intro:
        lines += [intro.strip(), ""]
    lines += ["Token accuracy (%%) with teacher forcing on held-out trees, mean ± sample std "
              "over %d seed%s, for each task and regression order (breadth-first, "
              "depth-first); the paper's Table 2 (Copy, Reorder) below it."
              % (len(meta["seeds"]), "s" if len(meta["seeds"]) > 1 else ""), "",
              "| encoding | %s | what |" % " | ".join("%s %s" % c for c in cols),
              "|---|%s---|" % ("---|" * len(cols))]
    for enc, what in TREE_ENCODINGS.items():
        if enc in meta["not_run"]:
            lines.append("| %s | %s | not run: %s |" % (
                enc, " | ".join("—" for _ in cols), meta["not_run"][enc]))
            continue
        cells = [cell([r for r in rows if r["encoding"] == enc and (r["task"], r["order"]) == c])
                 for c in cols]
        lines.append("| %s | %s | %s |" % (enc, " | ".join(cells), what))
    lines += ["", "The paper's Table 2 (accuracy %; Tree = Shiv and Quirk; Orthogonal flat and "
              "tree with the locality scaling):", "",
              "| paper | %s |" % " | ".join("%s %s" % c for c in cols),
              "|---|%s" % ("---|" * len(cols))]
    for enc in TREE_ENCODINGS:
        lines.append("| %s | %s |" % (enc, " | ".join(paper_cell(PAPER_T2[enc].get(c))
                                                      for c in cols)))
    lines += ["", "Our tree rows run without the locality scaling (gpe.torch.locality_scale "
              "takes integer positions; the fused kernel has no multiplicative score term). "
              "RoPE's copy/depth cell is printed in the paper's text copy as the same "
              "85.46 ± 2.0 as its reorder/depth cell; transcribed as printed. The generators "
              "are shared by the layers and the heads (the paper: one set per head)."]
    return "\n".join(lines + run_section(meta, "trees")) + "\n"


# ---- Main -------------------------------------------------------------------------------


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="smoke run: tiny model and data, 1 seed")
    p.add_argument("--reduced", action="store_true",
                   help="the full comparison on shorter sequences and shallower trees, 1000 "
                        "steps (about an hour on 2 cores; the full sizes take ~32 h)")
    p.add_argument("--out", default=None,
                   help="directory for the reports (full: docs/measured of the workspace; "
                        "--quick: a temporary directory)")
    p.add_argument("--suites", default="sequences,trees", help="sequences, trees or both")
    p.add_argument("--encodings", default=None,
                   help="comma-separated subset (default: every encoding of each suite)")
    p.add_argument("--seeds", type=int, default=None, help="full 3, quick 1")
    p.add_argument("--steps", type=int, default=None)
    p.add_argument("--batch", type=int, default=None)
    p.add_argument("--d-model", type=int, default=None)
    p.add_argument("--workers", type=int, default=None,
                   help="training processes (full: the cores, at most 2; quick: 1)")
    p.add_argument("--time-steps", type=int, default=None,
                   help="time this many full-size training steps of every encoding on one "
                        "sample task and print the extrapolated full-run budget (no report)")
    p.add_argument("--intro", default=None, help="a file whose text opens the reports")
    p.add_argument("--from-json", default=None,
                   help="rewrite the reports in --out from a run's ape.json (no training)")
    return p.parse_args(argv)


# What a row of ape.json holds (train_one) that the reports read.
ROW_KEYS = ("task", "order", "encoding", "seed", "accuracy", "sequence_accuracy", "seconds")


def suite_of(row):
    return "sequences" if row["task"] in SEQ_TASKS else "trees"


def suite_metas(raw):
    """{suite: the description of the run its rows came from}: raw["suite_meta"] where the
    JSON has it, else (a single run's JSON) raw["meta"] for each of its suites."""
    metas = dict(raw.get("suite_meta", {}))
    for suite in raw["meta"]["suites"]:
        metas.setdefault(suite, raw["meta"])
    return metas


def read_previous(path):
    """The ape.json already at path, checked (None where there is none): read before
    training, so that a file that cannot be merged stops the run before it starts."""
    if not path.is_file():
        return None
    try:
        old = json.loads(path.read_text(encoding="utf-8"))
        suites = old["meta"]["suites"]
        if not isinstance(suites, list) or set(suites) - {"sequences", "trees"}:
            raise ValueError("meta.suites must list sequences and / or trees, got %r" % (suites,))
        metas = suite_metas(old)
        if set(metas) - {"sequences", "trees"}:
            raise ValueError("suite_meta names %s" % ", ".join(sorted(set(metas))))
        for r in old["rows"]:  # the fields the reports read of every row
            missing = [k for k in ROW_KEYS if k not in r]
            if missing:
                raise KeyError("a row lacks " + ", ".join(missing))
            suite_of(r)
        for meta in metas.values():  # what the reports read besides the rows
            missing = [k for k in ("cfg", "seeds", "not_run", "command", "wall") if k not in meta]
            if missing:
                raise KeyError(", ".join(missing))
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        _fail("%s is not a run's ape.json (%s: %s); move it away or give another --out"
              % (path, type(e).__name__, e))
    return old


def merge_previous(raw, old):
    """raw with the rows and run descriptions of the suites it did not run taken from the
    previous ape.json `old` (None: none), so that a run of one suite keeps the other's."""
    metas = suite_metas(raw)
    rows = list(raw["rows"])
    for suite, meta in (suite_metas(old) if old is not None else {}).items():
        if suite not in metas:
            metas[suite] = meta
            rows += [r for r in old["rows"] if suite_of(r) == suite]
    return dict(raw, rows=rows, suite_meta=metas)


def write_reports(raw, out, intro, suites=None):
    """Writes the reports of `suites` (default: every suite raw has rows or a run
    description for) and raw itself as ape.json."""
    metas = suite_metas(raw)
    texts = {}
    for suite, fn in (("sequences", report_sequences), ("trees", report_trees)):
        if suite not in (metas if suites is None else suites):
            continue
        rows = [r for r in raw["rows"] if suite_of(r) == suite]
        meta = metas[suite]
        m = dict(meta, not_run={k: v for k, v in meta["not_run"].items()})
        texts[suite] = fn(rows, m, intro)
        write_atomic(out / ("ape_%s.md" % suite), texts[suite])
    write_atomic(out / "ape.json", json.dumps(raw, indent=1))
    return texts


def time_budget(cfg, n):
    """Times n full-size steps of each encoding (copy for sequences, tree rotation for
    trees) and extrapolates to the full run (an extrapolation, not a measurement)."""
    total = 0.0
    for suite, task, order, encs in (("sequences", "copy", "breadth", list(SEQ_ENCODINGS)),
                                     ("trees", "tree_rotation", "breadth",
                                      [e for e in TREE_ENCODINGS if e not in NOT_RUN])):
        c = dict(cfg, steps=n, train=max(cfg["batch"], 64), test=cfg["batch"])
        data = dataset(task, order, c)
        runs = len(SEQ_TASKS) if suite == "sequences" else len(TREE_TASKS) * len(ORDERS)
        for e in encs:
            t0 = time.perf_counter()
            train_one((c, task, order, e, 0, data))
            per = (time.perf_counter() - t0) / n
            total += per * cfg["steps"] * runs * cfg["seeds"]
            print("  %s %s: %.3f s/step" % (suite, e, per), flush=True)
    print("extrapolated full run: %.0f s of single-thread training (%.1f h), about %.1f h "
          "on 2 workers" % (total, total / 3600, total / 7200))
    return total


def plan(suites, chosen):
    """[(suite, task, order, encoding)] that a run of `suites` with the encodings `chosen`
    (None: all) trains, seeds aside."""
    out = []
    for suite in suites:
        if suite == "sequences":
            combos, encs = [(t, "-") for t in SEQ_TASKS], SEQ_ENCODINGS
        else:
            combos, encs = [(t, o) for t in TREE_TASKS for o in ORDERS], TREE_ENCODINGS
        for task, order in combos:
            out += [(suite, task, order, e) for e in encs
                    if e not in NOT_RUN and (chosen is None or e in chosen)]
    return out


def main(argv=None):
    args = parse(argv)
    # Every argument is checked before torch is imported or any data are built, so that
    # a mistyped command fails at once, with its own message.
    if args.quick and args.reduced:
        _fail("--quick and --reduced are exclusive")
    cfg = dict(QUICK if args.quick else REDUCED if args.reduced else FULL)
    for key, v in (("seeds", args.seeds), ("steps", args.steps), ("batch", args.batch),
                   ("d_model", args.d_model)):
        if v is not None:
            if v < 1:  # a run of nothing would still replace the reports with empty tables
                _fail("--%s must be >= 1, got %d" % (key.replace("_", "-"), v))
            cfg[key] = v
    hd = cfg["d_model"] // cfg["heads"]
    if cfg["d_model"] % cfg["heads"]:
        _fail("--d-model %d does not split into %d heads" % (cfg["d_model"], cfg["heads"]))
    rotating = {"rope", "algebraic", "algebraic_local", "algebraic_tree"}
    asked_rotating = rotating if args.encodings is None else \
        rotating & {e.strip() for e in args.encodings.split(",")}
    if asked_rotating and hd % 2:
        # RoPE and the orthogonal encodings rotate pairs of a head's dimensions (Su et al.
        # eq. 34; Kogkalidis et al. sec. 3.1), so their heads are even.
        _fail("--d-model %d gives heads of %d dimensions; %s rotate pairs of them (d_model "
              "must be a multiple of %d)" % (cfg["d_model"], hd,
                                             ", ".join(sorted(asked_rotating)),
                                             2 * cfg["heads"]))
    if args.encodings is not None:
        known = set(SEQ_ENCODINGS) | set(TREE_ENCODINGS)
        asked = {e.strip() for e in args.encodings.split(",")}
        if not asked - {""} or asked - known:
            _fail("--encodings: unknown %s (have %s)"
                  % (", ".join(sorted(asked - known)) or "(none given)",
                     ", ".join(sorted(known))))
    suites = [s.strip() for s in args.suites.split(",") if s.strip()]
    if not suites or set(suites) - {"sequences", "trees"}:
        _fail("--suites takes sequences, trees or sequences,trees (got %r)" % args.suites)
    suites = [s for s in ("sequences", "trees") if s in suites]
    chosen = None if args.encodings is None else {e.strip() for e in args.encodings.split(",")}
    if not args.from_json and not args.time_steps and not plan(suites, chosen):
        # Nothing to train: the reports and ape.json would be replaced with empty tables.
        _fail("nothing to run: --encodings %s names no encoding that runs in --suites %s "
              "(sequences: %s; trees: %s; not run: %s)" % (
                  args.encodings, ",".join(suites), ", ".join(SEQ_ENCODINGS),
                  ", ".join(e for e in TREE_ENCODINGS if e not in NOT_RUN),
                  ", ".join(NOT_RUN)))
    # Paths as the user typed them: relative to where `bazel run` was called, not to the
    # runfiles tree the script runs in.
    user = lambda p: os.path.join(os.environ.get("BUILD_WORKING_DIRECTORY", ""), p)
    if args.out is not None:
        args.out = user(args.out)
    if args.intro:
        args.intro = user(args.intro)
    if args.from_json:
        args.from_json = user(args.from_json)
    if args.out is None:
        if args.quick:
            out = pathlib.Path(tempfile.mkdtemp(prefix="ape_"))
        else:
            ws = os.environ.get("BUILD_WORKSPACE_DIRECTORY",
                                str(pathlib.Path(__file__).resolve().parents[2]))
            out = pathlib.Path(ws) / "docs" / "measured"
    else:
        out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    intro = pathlib.Path(args.intro).read_text() if args.intro else ""
    if args.from_json:
        raw = json.loads(pathlib.Path(args.from_json).read_text())
        texts = write_reports(raw, out, intro)
        print("\n".join(texts.values()))
        return {"rows": raw["rows"], "meta": raw["meta"], "out": out, "reports": texts}
    _import_torch()
    import torch
    torch.set_num_threads(1)
    if args.time_steps:
        return {"budget_s": time_budget(cfg, args.time_steps)}
    previous = read_previous(out / "ape.json")

    t_start = time.perf_counter()
    jobs, data = [], {}
    for _, task, order, e in plan(suites, chosen):
        if (task, order) not in data:
            data[task, order] = dataset(task, order, cfg)
        jobs += [(cfg, task, order, e, s, data[task, order]) for s in range(cfg["seeds"])]
    # The slowest first, so that the workers finish together.
    slow = ("algebraic_local", "algebraic_tree", "algebraic")
    jobs.sort(key=lambda j: slow.index(j[3]) if j[3] in slow else len(slow))
    workers = args.workers or (1 if args.quick else min(2, os.cpu_count() or 1))
    rows = []
    if workers > 1:
        ctx = multiprocessing.get_context("fork")
        with ctx.Pool(workers) as pool:
            for r in pool.imap_unordered(train_one, jobs):
                rows.append(r)
                print("  %s/%s %s seed %d: %.2f (%.0f s)" % (
                    r["task"], r["order"], r["encoding"], r["seed"], r["accuracy"],
                    r["seconds"]), flush=True)
    else:
        for job in jobs:
            r = train_one(job)
            rows.append(r)
            print("  %s/%s %s seed %d: %.2f (%.1f s)" % (
                r["task"], r["order"], r["encoding"], r["seed"], r["accuracy"], r["seconds"]),
                flush=True)
    meta = {"cfg": cfg, "quick": bool(args.quick), "reduced": bool(args.reduced),
            "suites": suites,
            "seeds": list(range(cfg["seeds"])), "workers": workers,
            "wall": time.perf_counter() - t_start, "cpu": cpu_model(),
            "cores": os.cpu_count() or 0, "python": platform.python_version(),
            "torch": torch.__version__, "not_run": NOT_RUN,
            "command": "run.py " + " ".join(argv if argv is not None else sys.argv[1:])}
    # The suites not run here keep their rows from the ape.json already in --out.
    raw = merge_previous({"rows": rows, "meta": meta}, previous)
    texts = write_reports(raw, out, intro, suites)
    print("\n".join(texts.values()))
    print("wrote %s (%.0f s)" % (", ".join(str(out / ("ape_%s.md" % s)) for s in texts),
                                 meta["wall"]))
    return {"rows": rows, "meta": meta, "out": out, "reports": texts}


if __name__ == "__main__":
    main()
