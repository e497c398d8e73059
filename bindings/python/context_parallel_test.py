"""gpe.context_parallel on 2 and 4 processes (gloo, CPU) against the unsharded attention.

Every rank builds the same full q, k, v (one seed), computes the unsharded gpe.torch
attention and its gradients, runs its shard through each method (ring, all_gather,
ulysses) and compares its rows of the output and of dq, dk, dv, and the gradients of
learnable tensors (gpe.torch ALiBi slopes, GRAPE-A slopes, T5 table, GRAPE-M a, b, omega;
FoX gate logits), which every rank must receive whole (summed over ranks). Lengths are
odd, and short enough that some ranks hold no token. Issue 25's options too: gpe.Rope
handles, sliding windows (and the ring's skipped blocks, counted), sinks and their
gradient, packed sequences (cu_seqlens); the CPU arithmetic keywords reaching every
block's kernel call. Skips with a message without PyTorch.
"""

import datetime
import os
import socket
import unittest

import sanitizer_preload
from gpe import _ffi

sanitizer_preload.reexec_if_needed(next((str(p) for p in _ffi._candidates() if p.is_file()), None))

import numpy as np  # noqa: E402

import gpe  # noqa: E402

try:
    import torch  # noqa: E402
    import torch.distributed as dist  # noqa: E402
    import torch.multiprocessing as mp  # noqa: E402
    import gpe.context_parallel as cp  # noqa: E402
    import gpe.torch as gt  # noqa: E402
    _SKIP = None if dist.is_available() and dist.is_gloo_available() else \
        "torch.distributed with gloo is not available; context-parallel tests skipped"
except ImportError as e:
    torch = None
    _SKIP = "PyTorch is not installed (%s); context-parallel tests skipped" % e

needs_torch = unittest.skipIf(_SKIP is not None, _SKIP or "")

# float32 tolerances. Sharded and unsharded runs add the same float32 terms in different
# orders (key tiles vs ring blocks, then the lse merge: one exp and a rescale per block),
# each ~1e-7 relative on O(1) values; over <= 17 keys and 4 blocks that stays below 1e-6.
# 2e-5 on outputs and 1e-4 on gradients (dS sums products of O(1) terms over every key
# and query) leave margin, while a wrong position, mask, slope or gate shifts values by
# >= 1e-2. float64 runs (exact reference on both sides, FoX prefix scan in double) agree
# to ~1e-14; 1e-10 is checked.
# bfloat16 (storage; float32 arithmetic) against the unsharded bfloat16 run: both round
# outputs and gradients to 8 significant bits (2^-9 relative), O(1) outputs and gradients
# up to ~4 differ by a rounding step or two: 2e-2 and 6e-2, still far below the O(0.1-1)
# error of a wrong mask or position.
ATOL_O, ATOL_GRAD, ATOL_F64 = 2e-5, 1e-4, 1e-10
ATOL_BF16_O, ATOL_BF16_GRAD = 2e-2, 6e-2


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _cases(world):
    """(name, lengths, kwargs, fox): lengths chosen so some rank is empty (1 and 3 tokens
    for 2 and 4 ranks: load-balanced chunks floor(c L / 2W) leave ranks with none)."""
    lengths = (13, 1) if world == 2 else (11, 3)
    return [
        ("rope causal", lengths, dict(causal=True, rope_dim=8), False),
        ("alibi causal + interleaved rope", lengths,
         dict(causal=True, alibi="causal", rope_dim=4, rope_pairing="interleaved"), False),
        ("alibi symmetric, not causal", lengths[:1], dict(alibi="symmetric", scale=0.4), False),
        ("fox + rope causal", lengths, dict(causal=True, rope_dim=8), True),
        ("grape_m causal", lengths[:1], dict(causal=True, encoding="grape_m"), False),
        # Ulysses refuses T5 (its table cannot be re-sliced per head shard): ring and
        # all_gather only (_worker skips it for ulysses).
        ("t5 causal + rope", lengths[:1], dict(causal=True, bias="t5", rope_dim=8), False),
    ]


def _run_case(rank, world, method, name, seq_len, kw, fox, dtype, batch, heads_kv):
    heads_q, d = 4, 8
    g = torch.Generator().manual_seed(seq_len * 1000 + world)
    kw = dict(kw, threads=1)  # one kernel thread per rank: ranks share 2 cores
    if kw.get("bias") == "t5":
        kw["bias"] = gpe.T5Bias(np.random.default_rng(4).standard_normal((8, heads_q)),
                                max_distance=5)
    if kw.get("encoding") == "grape_m":
        rng = np.random.default_rng(3)
        kw["encoding"] = gpe.GrapeM(rng.standard_normal((2, d)), rng.standard_normal((2, d)),
                                    np.array([0.3, -0.7]))
    if fox:
        batch = 1
    q = torch.randn(batch, seq_len, heads_q, d, generator=g, dtype=dtype)
    k = torch.randn(batch, seq_len, heads_kv, d, generator=g, dtype=dtype)
    v = torch.randn(batch, seq_len, heads_kv, d, generator=g, dtype=dtype)
    w = torch.randn(batch, seq_len, heads_q, d, generator=g, dtype=dtype)
    logits = torch.randn(seq_len, heads_q, generator=g, dtype=torch.float64) * 2.0 + 1.0
    full = [x.clone().requires_grad_() for x in (q, k, v)]
    ref_kw = dict(kw)
    if fox:
        ref_kw["bias"] = gpe.FoxBias(logits.numpy())
    o_ref = gt.attention(*full, **ref_kw)
    grads_ref = torch.autograd.grad((o_ref * w).sum(), full)

    pos = cp.shard_positions(seq_len, world, rank)
    mine = [cp.shard(x, world, rank).clone().requires_grad_() for x in (q, k, v)]
    cp_kw = dict(kw, method=method)
    if fox:
        cp_kw["fox_gate_logits"] = logits[pos]
    o = cp.attention(*mine, pos, **cp_kw)
    grads = torch.autograd.grad((o * cp.shard(w, world, rank)).sum(), mine)
    where = "%s / %s / L=%d / %s / rank %d of %d" % (method, name, seq_len, dtype, rank, world)
    atol_o, atol_g = {torch.float64: (ATOL_F64, ATOL_F64),
                      torch.bfloat16: (ATOL_BF16_O, ATOL_BF16_GRAD)}.get(dtype,
                                                                        (ATOL_O, ATOL_GRAD))
    torch.testing.assert_close(o, cp.shard(o_ref, world, rank).detach(), atol=atol_o, rtol=0,
                               msg=lambda m: "output, %s: %s" % (where, m))
    for label, got, want in zip("qkv", grads, grads_ref):
        torch.testing.assert_close(got, cp.shard(want, world, rank), atol=atol_g, rtol=0,
                                   msg=lambda m: "d%s, %s: %s" % (label, where, m))
    return 1


def _learnable(kind, heads, d, dtype):
    """Fresh leaf tensors of one learnable kind (same values every call) and the keyword
    arguments that use them; "<kind> window" adds a sliding window, (3, 0) under causal,
    else (2, 3) (the float64 ring then cuts its queries into runs, one phantom key each,
    and subtracts each phantom's bias gradient)."""
    if kind.endswith(" window"):
        ts, kw = _learnable(kind[:-len(" window")], heads, d, dtype)
        return ts, dict(kw, window_size=(3, 0) if kw.get("causal") else (2, 3))
    rng = np.random.default_rng(7)
    leaf = lambda a: torch.tensor(a, dtype=dtype, requires_grad=True)
    if kind == "alibi":
        ts = [leaf(rng.uniform(0.1, 0.9, heads))]
        return ts, dict(causal=True, rope_dim=4, bias=gt.AlibiBias(ts[0]))
    if kind == "alibi symmetric":
        ts = [leaf(rng.uniform(0.1, 0.9, heads))]
        return ts, dict(bias=gt.AlibiBias(ts[0], symmetric=True))
    if kind == "grape_a":  # additive GRAPE, closed form: b = -m_h (i - j)
        ts = [leaf(rng.uniform(0.1, 0.9, heads))]
        return ts, dict(causal=True, bias=gt.GrapeABias(slopes=ts[0]))
    if kind == "t5":  # bidirectional buckets, no mask: keys after the query count too
        ts = [leaf(rng.standard_normal((8, heads)))]
        return ts, dict(bias=gt.T5Bias(ts[0], max_distance=5))
    if kind == "grape_m":
        ts = [leaf(rng.standard_normal((2, d))), leaf(rng.standard_normal((2, d))),
              leaf(np.array([0.3, -0.7]))]
        return ts, dict(causal=True, encoding=gt.GrapeMEncoding(*ts))
    assert kind == "fox"  # gate logits ~ N(1, 4): gates from ~0.05 to ~1
    ts = [leaf(rng.standard_normal((64, heads)) * 2.0 + 1.0)]
    return ts, dict(causal=True, rope_dim=8)


# Parameter gradients (float32): each is a sum over all (query, key) pairs of dS times
# O(1)-O(L) factors (ALiBi: |i - j| <= 12; T5 and FoX: counts of pairs per bucket or per
# cut; GRAPE-M: position times rotation terms), O(1-20) here and ~200 for omega. Sharded
# and unsharded runs round dS in float32 (~1e-7 relative) and add the pairs in different
# orders (the kernels accumulate parameter gradients in float64). The largest difference
# measured on these shapes is 3e-6 absolute; atol 5e-5 + rtol 1e-5 leaves a tenfold
# margin, while a wrong position, mask, head slice or a missing / doubled rank's share
# changes a gradient by O(0.1-1).
ATOL_PARAM, RTOL_PARAM = 5e-5, 1e-5


def _run_param_case(rank, world, method, kind, seq_len, dtype, heads_kv):
    """Gradients of the learnable tensors of `kind` through cp.attention against the
    unsharded gt.attention (and dq, dk, dv, the output on the way)."""
    heads_q, d = 4, 8
    fox = kind.startswith("fox")
    batch = 1 if fox else 2
    g = torch.Generator().manual_seed(seq_len * 1000 + world + 17)
    q, k, v, w = (torch.randn(batch, seq_len, h, d, generator=g, dtype=dtype)
                  for h in (heads_q, heads_kv, heads_kv, heads_q))
    pos = cp.shard_positions(seq_len, world, rank)
    where = "%s / learnable %s / L=%d / %s / rank %d of %d" % (method, kind, seq_len, dtype,
                                                               rank, world)
    results = []
    for sharded in (False, True):
        ts, kw = _learnable(kind, heads_q, d, dtype)
        kw["threads"] = 1
        xs = [x.clone().requires_grad_() for x in (q, k, v)]
        if fox:
            logits = ts[0][:seq_len]
        if sharded:
            if fox:
                kw["fox_gate_logits"] = logits[pos]
            o = cp.attention(*(cp.shard(x, world, rank) for x in xs), pos, method=method, **kw)
            loss = (o * cp.shard(w, world, rank)).sum()
        else:
            if fox:
                kw["bias"] = gt.FoxBias(logits)
            o = gt.attention(*xs, **kw)
            loss = (o * w).sum()
        grads = torch.autograd.grad(loss, xs + ts)
        if sharded:  # this rank's rows (the unsharded run's rows are every rank's)
            grads = [cp.shard(gr, world, rank) for gr in grads[:3]] + list(grads[3:])
            if fox:  # the logits' gradient reaches this rank's tokens only
                mask = torch.zeros(64, dtype=torch.bool)
                mask[pos] = True
                assert not bool(grads[3][~mask].any()), where
                grads[3] = grads[3][pos]
        else:
            grads = [cp.shard(gr, world, rank) for gr in grads[:3]] + list(grads[3:])
            if fox:
                grads[3] = grads[3][pos]
        results.append(grads)
    f64 = dtype == torch.float64
    for i, (want, got) in enumerate(zip(*results)):
        label = "dq dk dv".split()[i] if i < 3 else "parameter %d" % (i - 3)
        if i < 3:
            atol, rtol = (ATOL_F64, 0) if f64 else (ATOL_GRAD, 0)
        else:
            atol, rtol = (ATOL_F64, ATOL_F64) if f64 else (ATOL_PARAM, RTOL_PARAM)
        torch.testing.assert_close(got, want, atol=atol, rtol=rtol,
                                   msg=lambda m: "%s, %s: %s" % (label, where, m))
    return 1


LEARNABLE = ("alibi", "alibi symmetric", "grape_a", "t5", "grape_m", "fox", "alibi window",
             "t5 window", "fox window")


def _worker(rank, world, port, methods):
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % port, rank=rank,
                            world_size=world)
    try:
        heads_kv = 2 if world == 2 else 4  # GQA with 2 ranks; ulysses needs heads % world
        count = 0
        for method in methods:
            for name, lengths, kw, fox in _cases(world):
                if method == "ulysses" and kw.get("bias") == "t5":
                    continue
                for seq_len in lengths:
                    count += _run_case(rank, world, method, name, seq_len, kw, fox,
                                       torch.float32, 2, heads_kv)
            # bfloat16 tensors (lse and the ring's partial results stay float32).
            count += _run_case(rank, world, method, "rope causal bf16", 21,
                               dict(causal=True, rope_dim=8), False, torch.bfloat16, 1,
                               heads_kv)
            # float64: the FoX prefix scan and the positions are exact, not just close.
            count += _run_case(rank, world, method, "fox float64", 9, dict(causal=True),
                               True, torch.float64, 1, heads_kv)
        # float64 through the ring's phantom-key backward (_ring_block_grads_f64 in
        # gpe/_context_parallel_ring_f64.py) with each bias and encoding path it treats
        # differently: RoPE in the kernel with ALiBi (bias at the phantom subtracted),
        # symmetric ALiBi without a mask, GRAPE-M applied outside the kernel with T5; odd
        # lengths, and 3 tokens on 4 ranks (empty shards).
        if "ring" in methods:
            for name, lengths, kw in (
                    ("rope + alibi causal float64", (11, 3),
                     dict(causal=True, rope_dim=4, alibi="causal")),
                    ("alibi symmetric float64", (7,), dict(alibi="symmetric")),
                    ("grape_m + t5 causal float64", (9,),
                     dict(causal=True, encoding="grape_m", bias="t5"))):
                for seq_len in lengths:
                    count += _run_case(rank, world, "ring", name, seq_len, kw, False,
                                       torch.float64, 2, heads_kv)
        # Learnable parameters (gpe.torch modules, FoX gate logits): float32 at an odd
        # length and at one leaving a rank empty, float64 (1e-10) at the odd one.
        for method in methods:
            lengths = (13, 1) if world == 2 else (11, 3)
            for kind in LEARNABLE:
                for seq_len, dtype in ((lengths[0], torch.float32),
                                       (lengths[1], torch.float32),
                                       (lengths[0], torch.float64)):
                    count += _run_param_case(rank, world, method, kind, seq_len, dtype,
                                             heads_kv)
        # Clear refusals.
        x = torch.zeros(1, 2, 4, 8)
        pos = torch.arange(2) + 2 * rank
        for bad, err in ((dict(bias=gpe.GrapeApBias(np.zeros((4, 4, 1)), np.zeros((4, 4, 1)))),
                          "GRAPE-AP"), (dict(method="sideways"), "method"),
                         (dict(method="ulysses", bias=gpe.T5Bias(np.zeros((8, 4)))), "T5Bias"),
                         (dict(bias=gpe.FoxBias(np.zeros((4, 4)))), "fox_gate_logits"),
                         # Learnable kinds that cannot be sharded cleanly: GRAPE-AP (query-
                         # dependent path sums), FoX / gated GRAPE-A as one contiguous run of
                         # logits (a rank holds two chunks: use fox_gate_logits).
                         (dict(bias=gt.GrapeApBias(torch.zeros(4, 4, 1, requires_grad=True),
                                                   torch.zeros(4, 4, 1))), "GRAPE-AP"),
                         (dict(bias=gt.FoxBias(torch.zeros(4, 4, requires_grad=True))),
                          "fox_gate_logits"),
                         (dict(bias=gt.GrapeABias(gate_logits=torch.zeros(4, 4))),
                          "fox_gate_logits"),
                         (dict(bias=gt.AlibiBias(torch.ones(4)), alibi="causal"),
                          "at most one")):
            try:
                cp.attention(x, x, x, pos, **bad)
            except (ValueError, TypeError) as e:
                assert err in str(e), str(e)
            else:
                raise AssertionError("expected a refusal for %s" % bad)
        assert count > 0 or not methods
    finally:
        dist.destroy_process_group()


# Issue 25's options under context parallelism: a gpe.Rope handle (any schedule), sliding
# windows, sinks and packed sequences, each against the unsharded gt.attention with the
# same option. Tolerances as above: ATOL_O / ATOL_GRAD (float32: reordered float32 sums
# over <= 13 keys and <= 4 blocks), ATOL_F64 (float64: both sides exact to ~1e-14); the
# sinks' gradient is a parameter gradient, a sum of exp(z - lse_i) <dO_i, o_i> over every
# row (O(1-10) here): ATOL_PARAM + RTOL_PARAM in float32 (a missing or doubled rank's
# share, or a sink added once per block, changes it by O(0.1-1)), ATOL_F64 in float64.
# Sink logits are exact in float32 (the kernels read them as float32).
SINKS = (0.5, -1.25, 2.0, 0.0)


def _feature_cases(world):
    """(name, kwargs, packed cu_seqlens or None, sinks?). Lengths 13 (2 ranks) and 11 (4
    ranks); packed batches hold a 1-token sequence (some ranks get none of it) and, in one
    case, an empty one."""
    n = 13 if world == 2 else 11
    llama3 = gpe.Rope(8, schedule="llama3", factor=8.0, original_max_position=8)
    yarn = gpe.Rope(8, schedule="yarn", factor=4.0, original_max_position=4)
    return n, [
        ("llama3 rope causal", dict(causal=True, rope=llama3), None, False),
        ("yarn rope, window (3, 0) causal", dict(causal=True, rope=yarn, window_size=(3, 0)),
         None, False),
        ("xpos rope, window (2, 3), alibi symmetric",
         dict(window_size=(2, 3), alibi="symmetric",
              rope=gpe.Rope(8, xpos=True, xpos_scale_base=16.0)), None, False),
        ("sinks + rope causal", dict(causal=True, rope_dim=8), None, True),
        ("packed causal + llama3 rope + window (4, 0) + sinks",
         dict(causal=True, rope=llama3, window_size=(4, 0)), [0, 5, 6, n], True),
        ("packed, empty sequence, not causal", dict(rope_dim=4), [0, 3, 3, n], False),
        ("softcap 2.5 + llama3 rope causal", dict(causal=True, rope=llama3, softcap=2.5), None,
         False),
        ("packed softcap 4 + window (3, 1) + sinks",
         dict(softcap=4.0, window_size=(3, 1)), [0, 5, 6, n], True),
        # A value head size of its own (o takes it): the ring's blocks and gradient
        # accumulators, the all-gather and the Ulysses all-to-all carry k and v of
        # different widths, and the float64 ring's phantom key has both.
        ("value head size 12, alibi causal + rope + sinks",
         dict(causal=True, rope_dim=8, alibi="causal", value_dim=12), None, True),
        ("packed value head size 5 + window (3, 0)",
         dict(causal=True, window_size=(3, 0), value_dim=5), [0, 5, 6, n], False),
    ]


def _run_feature_case(rank, world, method, name, seq_len, kw, cu, with_sinks, dtype,
                      heads_kv):
    heads_q, d = 4, 8
    kw = dict(kw, threads=1)
    dv = kw.pop("value_dim", d)
    batch = 1 if cu is not None else 2
    g = torch.Generator().manual_seed(seq_len * 1000 + world + 29)
    q, k, v, w = (torch.randn(batch, seq_len, h, e, generator=g, dtype=dtype)
                  for h, e in ((heads_q, d), (heads_kv, d), (heads_kv, dv), (heads_q, dv)))
    sink_leaf = lambda: [torch.tensor(SINKS, dtype=dtype, requires_grad=True)] \
        if with_sinks else []
    full = [x.clone().requires_grad_() for x in (q, k, v)] + sink_leaf()
    sinks = full[3] if with_sinks else None
    if cu is None:
        o_ref = gt.attention(*full[:3], sinks=sinks, **kw)
        loss = (o_ref * w).sum()
        pos = cp.shard_positions(seq_len, world, rank)
    else:  # the packed layout [tokens, heads, head_dim], positions within each sequence
        o_ref = gt.attention(*(x[0] for x in full[:3]), cu_seqlens_q=cu, cu_seqlens_k=cu,
                             sinks=sinks, **kw)[None]
        loss = (o_ref * w).sum()
        # Every sequence sharded on its own, given in reverse order (the module regroups
        # the tokens by sequence and puts the rows back).
        pos = cp.packed_shard_positions(cu, world, rank).flip(0)
    grads_ref = torch.autograd.grad(loss, full)
    mine = [x.index_select(1, pos).clone().requires_grad_() for x in (q, k, v)] + sink_leaf()
    sinks = mine[3] if with_sinks else None
    if cu is None:
        o = cp.attention(*mine[:3], pos, method=method, sinks=sinks, **kw)
    else:  # packed [tokens, heads, head_dim] in, the same layout out
        o = cp.attention(*(x[0] for x in mine[:3]), pos, method=method, sinks=sinks,
                         cu_seqlens=cu, **kw)[None]
    grads = torch.autograd.grad((o * w.index_select(1, pos)).sum(), mine)
    where = "%s / %s / L=%d / %s / rank %d of %d" % (method, name, seq_len, dtype, rank, world)
    f64 = dtype == torch.float64
    atol_o, atol_g = {torch.float64: (ATOL_F64, ATOL_F64),
                      torch.bfloat16: (ATOL_BF16_O, ATOL_BF16_GRAD)}.get(dtype,
                                                                        (ATOL_O, ATOL_GRAD))
    torch.testing.assert_close(o, o_ref.index_select(1, pos).detach(), atol=atol_o, rtol=0,
                               msg=lambda m: "output, %s: %s" % (where, m))
    for label, got, want in zip(("dq", "dk", "dv"), grads, grads_ref):
        torch.testing.assert_close(got, want.index_select(1, pos), atol=atol_g, rtol=0,
                                   msg=lambda m: "%s, %s: %s" % (label, where, m))
    if with_sinks:
        # bfloat16: the gradient is in the sinks' own dtype (one rounding, 2^-9 relative, of
        # sums of O(1-10)) and the shards' o and lse round differently from the whole's.
        atol, rtol = {torch.float64: (ATOL_F64, ATOL_F64),
                      torch.bfloat16: (ATOL_BF16_GRAD, 2e-2)}.get(dtype, (ATOL_PARAM, RTOL_PARAM))
        torch.testing.assert_close(grads[3], grads_ref[3], atol=atol, rtol=rtol,
                                   msg=lambda m: "d sinks, %s: %s" % (where, m))
    return 1


def _run_packed_param_case(rank, world, method, kind, dtype, heads_kv):
    """Learnable parameters (ALiBi slopes, GRAPE-M generators) with packed sequences and a
    window: dq, dk, dv and the parameters' gradients against the unsharded packed
    gt.attention (tolerances as _run_param_case's)."""
    seq_len, cu = (13, [0, 5, 6, 13]) if world == 2 else (11, [0, 4, 5, 11])
    g = torch.Generator().manual_seed(world + 41)
    q, k, v, w = (torch.randn(seq_len, h, 8, generator=g, dtype=dtype)
                  for h in (4, heads_kv, heads_kv, 4))
    pos = cp.packed_shard_positions(cu, world, rank)
    results = []
    for sharded in (False, True):
        ts, kw = _learnable(kind, 4, 8, dtype)
        kw.update(threads=1, window_size=(2, 0) if kw.get("causal") else (3, 1))
        xs = [x.clone().requires_grad_() for x in (q, k, v)]
        if sharded:
            o = cp.attention(*(x[pos] for x in xs), pos, method=method, cu_seqlens=cu, **kw)
            loss = (o * w[pos]).sum()
        else:
            o = gt.attention(*xs, cu_seqlens_q=cu, cu_seqlens_k=cu, **kw)
            loss = (o * w).sum()
        grads = torch.autograd.grad(loss, xs + ts)
        results.append([gr[pos] for gr in grads[:3]] + list(grads[3:]))
    where = "%s / packed learnable %s / %s / rank %d of %d" % (method, kind, dtype, rank, world)
    f64 = dtype == torch.float64
    for i, (want, got) in enumerate(zip(*results)):
        if i < 3:
            atol, rtol = (ATOL_F64, 0) if f64 else (ATOL_GRAD, 0)
        else:
            atol, rtol = (ATOL_F64, ATOL_F64) if f64 else (ATOL_PARAM, RTOL_PARAM)
        torch.testing.assert_close(got, want, atol=atol, rtol=rtol,
                                   msg=lambda m: "gradient %d, %s: %s" % (i, where, m))


def _check_ring_skips(rank, world):
    """Ring steps with no allowed pair make no attention call, and the result stays exact:
    contiguous shards of 4 tokens, causal with window (1, 0), so rank r's first query
    reaches back exactly to rank r - 1's last key and no further: 1 call on rank 0, 2
    elsewhere (not r + 1 as the causal rule alone gives), in forward and in backward."""
    seq_len, heads = 4 * world, 2
    expected = 1 if rank == 0 else 2
    for dtype in (torch.float32, torch.float64):
        g = torch.Generator().manual_seed(world)
        q, k, v, w = (torch.randn(1, seq_len, heads, 8, generator=g, dtype=dtype)
                      for _ in range(4))
        kw = dict(causal=True, window_size=(1, 0), rope_dim=8, threads=1)
        full = [x.clone().requires_grad_() for x in (q, k, v)]
        o_ref = gt.attention(*full, **kw)
        grads_ref = torch.autograd.grad((o_ref * w).sum(), full)
        pos = cp.shard_positions(seq_len, world, rank, layout="contiguous")
        mine = [x.index_select(1, pos).clone().requires_grad_() for x in (q, k, v)]
        calls = cp._RING_BLOCK_CALLS
        calls["forward"] = calls["backward"] = 0
        o = cp.attention(*mine, pos, method="ring", **kw)
        grads = torch.autograd.grad((o * w.index_select(1, pos)).sum(), mine)
        where = "ring skips / %s / rank %d of %d" % (dtype, rank, world)
        assert calls == {"forward": expected, "backward": expected}, (where, calls)
        atol_o, atol_g = ((ATOL_F64, ATOL_F64) if dtype == torch.float64
                          else (ATOL_O, ATOL_GRAD))
        torch.testing.assert_close(o, o_ref.index_select(1, pos).detach(), atol=atol_o,
                                   rtol=0, msg=lambda m: "output, %s: %s" % (where, m))
        for label, got, want in zip(("dq", "dk", "dv"), grads, grads_ref):
            torch.testing.assert_close(got, want.index_select(1, pos), atol=atol_g, rtol=0,
                                       msg=lambda m: "%s, %s: %s" % (label, where, m))


def _check_feature_refusals(rank):
    x = torch.zeros(1, 2, 4, 8)
    pos = torch.arange(2) + 2 * rank
    for bad, err in ((dict(window_size=(-2, 0)), "window_size"),
                     (dict(window_size=(3,)), "window_size"),
                     (dict(window_size=(1.5, 0)), "window_size"),
                     (dict(sinks=torch.zeros(3)), "sinks"),
                     (dict(sinks=torch.tensor([0.0, float("nan"), 0.0, 0.0])), "sinks"),
                     (dict(sinks=torch.tensor([0.0, 1e39, 0.0, 0.0], dtype=torch.float64)),
                      "sinks[1] is 1e+39, beyond float32's range"),
                     (dict(cu_seqlens=[1, 4, 8]), "cu_seqlens"),
                     (dict(cu_seqlens=[0, 5, 3]), "cu_seqlens"),
                     (dict(cu_seqlens=[0, 2]), "cu_seqlens"),  # rank 1's tokens 2, 3
                     (dict(rope=gpe.Rope(8), rope_dim=8), "one positional rotation"),
                     (dict(rope=gpe.Rope(4)), "head_dim"),
                     (dict(softcap=0.0), "softcap"),
                     (dict(softcap=float("nan")), "softcap"),
                     (dict(softcap=2e30), "at most 1e30"),
                     (dict(bf16_arithmetic="tiles"), "bf16_arithmetic"),
                     (dict(float32_arithmetic=1), "float32_arithmetic")):
        if rank == 0 and "cu_seqlens" in bad and bad["cu_seqlens"] == [0, 2]:
            bad = dict(cu_seqlens=[0, 1])  # rank 0 holds tokens 0, 1: index 1 is outside
        try:
            cp.attention(x, x, x, pos, **bad)
        except ValueError as e:
            assert err in str(e), str(e)
        else:
            raise AssertionError("expected a ValueError for %s" % bad)
    # k's head_dim must be q's; v must match k but in its last axis.
    for kk, vv, err in ((torch.zeros(1, 2, 4, 6), x, "head_dim"),
                        (x, torch.zeros(1, 2, 2, 8), "heads_kv"),
                        (x, torch.zeros(1, 2, 4, 0), "value_dim")):
        try:
            cp.attention(x, kk, vv, pos)
        except ValueError as e:
            assert err in str(e), str(e)
        else:
            raise AssertionError("expected a ValueError for k %s, v %s"
                                 % (tuple(kk.shape), tuple(vv.shape)))
    # float64 under the ring with a softcap: refused when gradients are wanted, taken
    # without them (the forward needs no phantom key).
    x64 = torch.zeros(1, 2, 4, 8, dtype=torch.float64, requires_grad=True)
    try:
        cp.attention(x64, x64, x64, pos, softcap=5.0)
    except ValueError as e:
        assert "softcap" in str(e), str(e)
    else:
        raise AssertionError("expected a ValueError for float64 ring softcap with gradients")
    with torch.no_grad():
        cp.attention(x64, x64, x64, pos, softcap=5.0)
    # Checked across ranks (one all_gather, the same answer everywhere): cu_seqlens that
    # differ between ranks, and shards that do not hold cu_seqlens[-1] tokens together.
    world = dist.get_world_size()
    for bad, err in ((dict(cu_seqlens=[0, 2 * world] if rank else [0, 1, 2 * world]),
                      "differs across ranks"),
                     (dict(cu_seqlens=[0, 2 * world + 1]), "hold %d tokens" % (2 * world))):
        try:
            cp.attention(x, x, x, pos, **bad)
        except ValueError as e:
            assert err in str(e), str(e)
        else:
            raise AssertionError("expected a ValueError for %s" % bad)
    # The right number of tokens, but token 1 on two ranks and the last one on none (rank
    # 1 holds 1, 3 instead of 2, 3): accepted before, with wrong attention.
    dup = torch.tensor([1, 3]) if rank == 1 else pos
    for method in cp.METHODS:
        try:
            cp.attention(x, x, x, dup, cu_seqlens=[0, 2 * world], method=method)
        except ValueError as e:
            assert "exactly one rank" in str(e), str(e)
        else:
            raise AssertionError("expected a ValueError for a token on two ranks (%s)" % method)
    # Ulysses with an ALiBi of other heads than q's: refused on every rank before any
    # exchange (it took slices of the wrong slopes; ring and all_gather refused it).
    if 4 % world == 0:
        try:
            cp.attention(x, x, x, pos, bias=gpe.Alibi(8), method="ulysses")
        except ValueError as e:
            assert "heads" in str(e), str(e)
        else:
            raise AssertionError("expected a ValueError for Alibi(8) under ulysses")
    # A block the kernel refuses (an ALiBi of 8 heads for 4) under the ring: the error
    # leaves after the step's sends and receives complete, so the group's next collective
    # runs (it waited on the unfinished send until the group's timeout, 60 s here).
    try:
        cp.attention(x, x, x, pos, bias=gpe.Alibi(8), method="ring")
    except gpe.GpeError as e:
        assert "heads" in str(e), str(e)
    else:
        raise AssertionError("expected a GpeError for Alibi(8) under the ring")
    t = torch.ones(1)
    dist.all_reduce(t)
    assert t.item() == dist.get_world_size()
    y = torch.zeros(2, 2, 4, 8)  # packed sequences share one token dimension: batch 1
    try:
        cp.attention(y, y, y, pos, cu_seqlens=[0, 8])
    except ValueError as e:
        assert "batch" in str(e), str(e)
    else:
        raise AssertionError("expected a ValueError for batch 2 with cu_seqlens")


def _check_arithmetic(rank, world, heads_kv):
    """The CPU arithmetic keywords reach every block's kernel call, forward and backward,
    under every method: a spy on gpe.torch's options builder must see the two codes
    (distinct, so a swap shows) in every call, the default's (0, 0) without them (the split
    and AMX modes equal the default on CPUs without AMX, so results alone could not tell).
    The results stay within the modes' accuracy of the default run's: float32 with six
    split products within float32's tolerances above (ATOL_O, ATOL_GRAD), bfloat16 storage
    within bf16 rounding (ATOL_BF16_O, ATOL_BF16_GRAD)."""
    from unittest import mock
    seq_len = 13
    gen = torch.Generator().manual_seed(11)
    full = [torch.randn(1, seq_len, h, 8, generator=gen) for h in (4, heads_kv, heads_kv)]
    w = torch.randn(1, seq_len, 4, 8, generator=gen)
    pos = cp.shard_positions(seq_len, world, rank)
    chosen = dict(bf16_arithmetic="amx_tiles", float32_arithmetic="split_bf16x6")
    for dtype, (atol_o, atol_g) in ((torch.float32, (ATOL_O, ATOL_GRAD)),
                                    (torch.bfloat16, (ATOL_BF16_O, ATOL_BF16_GRAD))):
        for method in cp.METHODS:
            runs = []
            for arith, codes in (({}, (0, 0)), (chosen, (3, 1))):
                mine = [x.to(dtype).index_select(1, pos).clone().requires_grad_() for x in full]
                with mock.patch.object(gt, "_options", wraps=gt._options) as spy:
                    o = cp.attention(*mine, pos, causal=True, rope_dim=8, method=method,
                                     **arith)
                    grads = torch.autograd.grad((o.float() * w.index_select(1, pos)).sum(),
                                                mine)
                seen = [tuple(c.args[19] if len(c.args) > 19
                              else c.kwargs.get("arithmetic", (0, 0)))
                        for c in spy.call_args_list]
                where = "arithmetic %s / %s / %s / rank %d of %d" % (arith, dtype, method,
                                                                     rank, world)
                assert len(seen) >= 2 and set(seen) == {codes}, (where, seen)  # fwd and bwd
                runs.append((o, grads))
            (o0, g0), (o1, g1) = runs
            torch.testing.assert_close(o1.float(), o0.float(), atol=atol_o, rtol=0,
                                       msg=lambda m: "output, %s: %s" % (where, m))
            for label, got, want in zip(("dq", "dk", "dv"), g1, g0):
                torch.testing.assert_close(got.float(), want.float(), atol=atol_g, rtol=0,
                                           msg=lambda m: "%s, %s: %s" % (label, where, m))


def _worker_features(rank, world, port):
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    torch.set_num_threads(1)
    # A short timeout: a collective left waiting (see _check_feature_refusals) fails the
    # test in a minute instead of half an hour.
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % port, rank=rank,
                            world_size=world, timeout=datetime.timedelta(seconds=60))
    try:
        heads_kv = 2 if world == 2 else 4  # GQA with 2 ranks; ulysses needs heads % world
        seq_len, cases = _feature_cases(world)
        for method in cp.METHODS:
            for name, kw, cu, with_sinks in cases:
                for dtype in (torch.float32, torch.float64, torch.bfloat16):
                    if "softcap" in kw and method == "ring" and dtype == torch.float64:
                        continue  # refused with gradients (_check_feature_refusals)
                    _run_feature_case(rank, world, method, name, seq_len, kw, cu, with_sinks,
                                      dtype, heads_kv)
            for kind in ("alibi", "grape_m"):
                for dtype in (torch.float32, torch.float64):
                    _run_packed_param_case(rank, world, method, kind, dtype, heads_kv)
        _check_ring_skips(rank, world)
        _check_arithmetic(rank, world, heads_kv)
        _check_feature_refusals(rank)
    finally:
        dist.destroy_process_group()


@needs_torch
class ContextParallelTest(unittest.TestCase):
    def spawn(self, world, methods):
        # fork: the ranks inherit the imported torch and gpe instead of importing them again.
        mp.start_processes(_worker, args=(world, _free_port(), methods), nprocs=world,
                           join=True, start_method="fork")

    def test_two_ranks_every_method(self):
        self.spawn(2, cp.METHODS)

    def test_four_ranks_every_method(self):
        self.spawn(4, cp.METHODS)

    def test_two_ranks_rope_window_sinks_packed(self):
        mp.start_processes(_worker_features, args=(2, _free_port()), nprocs=2, join=True,
                           start_method="fork")

    def test_four_ranks_rope_window_sinks_packed(self):
        mp.start_processes(_worker_features, args=(4, _free_port()), nprocs=4, join=True,
                           start_method="fork")

    def test_packed_shard_positions(self):
        # Each sequence load-balanced on its own, offset by its start.
        # The 1-token sequence's chunks are [0, 0), [0, 0), [0, 0), [0, 1): rank 0's.
        self.assertEqual(cp.packed_shard_positions([0, 4, 5, 9], 2, 0).tolist(),
                         [0, 3, 4, 5, 8])
        self.assertEqual(cp.packed_shard_positions([0, 4, 5, 9], 2, 1).tolist(),
                         [1, 2, 6, 7])

    def test_shard_unshard_round_trip(self):
        # Load-balanced chunks: rank r holds chunks r and 2W-1-r; unshard inverts shard.
        x = torch.arange(2 * 11 * 3.0).view(2, 11, 3)
        for world in (1, 2, 3, 4):
            shards = [cp.shard(x, world, r) for r in range(world)]
            self.assertTrue(torch.equal(cp.unshard(shards), x))
        self.assertEqual(cp.shard_positions(8, 2, 0).tolist(), [0, 1, 6, 7])
        self.assertEqual(cp.shard_positions(8, 2, 1).tolist(), [2, 3, 4, 5])
        self.assertEqual(cp.shard_positions(1, 2, 1).tolist(), [])
        self.assertEqual(cp.shard_positions(5, 2, 1, layout="contiguous").tolist(), [2, 3, 4])

    def test_needs_a_process_group(self):
        x = torch.zeros(1, 2, 4, 8)
        with self.assertRaises(RuntimeError):
            cp.attention(x, x, x, [0, 1])


if __name__ == "__main__":
    unittest.main()
