"""The APE experiments in miniature (run.py --quick), and properties of their data and
models that the full run relies on.

PyTorch is optional: without it the test skips with a message."""

import contextlib
import io
import json
import math
import os
import random
import shutil
import sys
import tempfile
import unittest

import sanitizer_preload
from gpe import _ffi

sanitizer_preload.reexec_if_needed(next((str(p) for p in _ffi._candidates() if p.is_file()), None))

try:
    import torch  # noqa: E402
    _SKIP = None
except ImportError as e:
    torch = None
    _SKIP = "PyTorch is not installed (%s); ape test skipped" % e

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run  # noqa: E402
import refusal_testing  # noqa: E402


def table_rows(text, header):
    """{first cell: [cells]} of the markdown table whose header starts with `header`."""
    rows, inside = {}, False
    for line in text.splitlines():
        if line.startswith(header):
            inside = True
            continue
        if inside:
            if not line.startswith("|"):
                break
            if line.startswith("|---"):
                continue
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            rows[cells[0]] = cells[1:]
    return rows


def accuracy(cell):
    return float(cell.split("±")[0]) / 100.0


def refusal(test, argv, allow_torch=False):
    return refusal_testing.refusal(test, run, argv, allow_torch)


class DataTest(unittest.TestCase):
    """The generators (no torch needed)."""

    def test_sequence_targets(self):
        rng = random.Random(0)
        for _ in range(20):
            x = [rng.randrange(run.SYMBOLS) for _ in range(rng.randrange(1, 30))]
            self.assertEqual(run.seq_target("copy", x), x)
            self.assertEqual(run.seq_target("reverse", run.seq_target("reverse", x)), x)
            self.assertEqual(run.seq_target("reverse", x)[0], x[-1])
            self.assertEqual(run.seq_target("repeat", x), x + x)

    def test_sequence_sample(self):
        s = run.seq_sample("reverse", random.Random(1), run.QUICK)
        self.assertEqual(s["tgt"], list(reversed(s["src"])) + [run.EOS])
        self.assertEqual(s["tgt_in"], [run.BOS] + s["tgt"][:-1])
        self.assertTrue(all(0 <= x < run.SYMBOLS for x in s["src"]))

    def test_rotation_of_a_hand_built_tree(self):
        #       a            a
        #      / \          / \
        #     b   L1  ->  L1   b
        #    / \              / \
        #   L2  L3          L3   L2
        t = {(): 0, (0,): 1, (1,): 11, (0, 0): 12, (0, 1): 13}
        r = run.rotate(t)
        self.assertEqual(r, {(): 0, (1,): 1, (0,): 11, (1, 1): 12, (1, 0): 13})
        self.assertEqual(run.rotate(r), t)
        self.assertEqual([t[a] for a in run.linearise(t, "breadth")], [0, 1, 11, 12, 13])
        self.assertEqual([r[a] for a in run.linearise(r, "breadth")], [0, 11, 1, 13, 12])
        self.assertEqual([t[a] for a in run.linearise(t, "depth")], [0, 1, 12, 13, 11])
        self.assertEqual([r[a] for a in run.linearise(r, "depth")], [0, 11, 1, 13, 12])

    def test_tree_addresses(self):
        # Addresses are distinct, every non-root node's parent is in the tree, internal
        # nodes (operators) have both children and leaves none, no node below the depth.
        rng = random.Random(2)
        for _ in range(30):
            depth = rng.randrange(1, 6)
            t = run.random_tree(rng, depth, 0.75)
            self.assertEqual(len(set(t)), len(t))
            self.assertLess(t[()], run.OPERATORS)  # the root is always internal
            for a, lab in t.items():
                self.assertLessEqual(len(a), depth)
                if a:
                    self.assertIn(a[:-1], t)
                    self.assertLess(t[a[:-1]], run.OPERATORS)
                internal = lab < run.OPERATORS
                self.assertEqual(a + (0,) in t, internal)
                self.assertEqual(a + (1,) in t, internal)

    def test_tree_sample_depth(self):
        # tree_sample draws the maximum depth first (discretised normal, clipped to
        # depth_min..depth_max); with branching probability 1 every node above it is
        # internal, so the tree is complete at exactly that depth: 2^(d+1) - 1 nodes,
        # addresses of length d at the bottom. The sample's source and target carry
        # the same nodes (copy and rotation keep the shape up to mirroring).
        cfg = dict(run.REDUCED, branch=1.0)
        seen = set()
        for seed in range(40):
            d = run.discrete_normal(random.Random(seed), cfg["depth_mean"], cfg["depth_std"],
                                    cfg["depth_min"], cfg["depth_max"])
            self.assertTrue(cfg["depth_min"] <= d <= cfg["depth_max"], d)
            seen.add(d)
            for task in run.TREE_TASKS:
                for order in run.ORDERS:
                    s = run.tree_sample(task, order, random.Random(seed), cfg)
                    self.assertEqual(max(len(a) for a in s["src_tree"]), d)
                    self.assertEqual(len(s["src"]), 2 ** (d + 1) - 1)
                    self.assertEqual(len(s["tgt"]), len(s["src"]))
                    self.assertEqual(len(s["tgt_tree"]), len(s["tgt"]))
                    self.assertEqual(len({tuple(a) for a in s["src_tree"]}), len(s["src"]))
        self.assertGreater(len(seen), 2)  # the drawn depths vary (N(4, 1) over 40 seeds)

    def test_reduced_keeps_the_full_model_on_shorter_data(self):
        # --reduced changes only the data sizes and the step count, never the model or
        # the optimiser, so its ordering of the encodings is the full configuration's.
        for key in ("d_model", "ffn", "heads", "layers", "batch", "seeds", "branch"):
            self.assertEqual(run.REDUCED[key], run.FULL[key], key)
        self.assertLess(run.REDUCED["seq_mean"], run.FULL["seq_mean"])
        self.assertLess(run.REDUCED["depth_max"], run.FULL["depth_max"])

    def test_bad_arguments_are_refused_before_torch(self):
        # Every refusal comes before torch is imported and before any data are built,
        # with its own message and exit status 2; none writes anything into --out.
        with tempfile.TemporaryDirectory() as out:
            for argv, message in (
                    (["--quick", "--reduced"], "--quick and --reduced are exclusive"),
                    # Names that match no encoding, and zero seeds: they ran nothing and
                    # replaced the reports with empty tables.
                    (["--quick", "--encodings", "rotary"], "--encodings: unknown rotary"),
                    (["--quick", "--encodings", ","], "--encodings: unknown (none given)"),
                    (["--quick", "--seeds", "0"], "--seeds must be >= 1, got 0"),
                    # Runs with no job: an encoding the suite lacks, or no suite.
                    (["--quick", "--suites", "trees", "--encodings", "shiv_quirk"],
                     "nothing to run: --encodings shiv_quirk"),
                    (["--quick", "--suites", "sequences", "--encodings", "algebraic_tree"],
                     "nothing to run: --encodings algebraic_tree"),
                    (["--quick", "--suites", ","], "--suites takes sequences, trees"),
                    (["--quick", "--suites", "forests"], "--suites takes sequences, trees"),
                    # Heads of d_model / heads dimensions (quick: 2 heads), even where an
                    # encoding rotates pairs of them (every encoding runs by default).
                    (["--quick", "--d-model", "15"], "--d-model 15 does not split into 2 heads"),
                    (["--quick", "--d-model", "6"], "--d-model 6 gives heads of 3 dimensions"),
                    (["--quick", "--d-model", "6", "--encodings", "sinusoidal,rope"],
                     "rope rotate pairs of them")):
                with self.subTest(argv=argv):
                    self.assertIn(message, refusal(self, argv + ["--out", out]))
            self.assertEqual(os.listdir(out), [])

    def test_schedule(self):
        steps = 200
        self.assertAlmostEqual(run.lr_at(0, steps), run.START_LR)
        self.assertAlmostEqual(run.lr_at(10, steps), run.PEAK_LR)
        self.assertAlmostEqual(run.lr_at(steps, steps), run.END_LR)


@unittest.skipIf(_SKIP is not None, _SKIP or "")
class ModelTest(unittest.TestCase):
    CFG = dict(run.QUICK, d_model=16, heads=2, layers=2)

    def batch(self, task, order="breadth"):
        train, _ = run.dataset(task, order, dict(self.CFG, train=8, test=1))
        return run.collate(train)

    def test_initial_loss_is_log_vocab(self):
        # Tied output embedding scaled by d^-1/2: logits of std ~ d^-1/2 = 0.25 at
        # d_model 16, so the first loss is log(22) = 3.09 plus ~var/2 = 0.03; 0.15 allows
        # for the sampled weights and batch. A missing scale gives log V + ~0.5.
        torch.manual_seed(0)
        for enc in list(run.SEQ_ENCODINGS) + ["algebraic_tree"]:
            task = "tree_rotation" if enc == "algebraic_tree" else "copy"
            with self.subTest(enc):
                model = run.make_model(self.CFG, enc, 0, 10)
                b = self.batch(task)
                with torch.no_grad():
                    loss = float(torch.nn.functional.cross_entropy(model(b), b["target"]))
                self.assertLess(abs(loss - math.log(run.VOCAB)), 0.15, loss)

    def test_identical_core_weights(self):
        ref = run.core_state(run.make_model(self.CFG, "sinusoidal", 3, 10))
        for enc in list(run.SEQ_ENCODINGS) + ["algebraic_tree"]:
            with self.subTest(enc):
                state = run.core_state(run.make_model(self.CFG, enc, 3, 10))
                self.assertEqual(set(state), set(ref))
                for k in ref:
                    self.assertTrue(torch.equal(state[k], ref[k]), k)
        other = run.core_state(run.make_model(self.CFG, "sinusoidal", 4, 10))
        self.assertFalse(torch.equal(other["emb.weight"], ref["emb.weight"]))

    def test_locality_path_matches_fused_at_c_1(self):
        # The unfused path (gpe.torch.algebraic_sequence + plain softmax) equals the fused
        # kernel's AlgebraicSequenceEncoding when the locality factor is 1, so the two
        # orthogonal rows differ by the scaling only (float32: 1e-4).
        # Causal self-attention, and cross-attention between sequences of other lengths
        # (repeat: targets twice the sources). At c = 0.98 the outputs differ.
        import gpe.torch as gt
        model = run.make_model(self.CFG, "algebraic_local", 0, 10)
        b = self.batch("repeat")
        for qs, ks, causal in ((b["src"], b["src"], True), (b["tgt"], b["src"], False)):
            q = torch.randn(qs["tok"].numel(), 2, 8)
            k, v = (torch.randn(ks["tok"].numel(), 2, 8) for _ in range(2))
            want = gt.attention(q, k, v, causal=causal, cu_seqlens_q=qs["cu"],
                                cu_seqlens_k=ks["cu"], q_positions=qs["pos"],
                                k_positions=ks["pos"], encoding=model.pe.seq)
            old = run.LOCALITY
            try:
                run.LOCALITY = 1.0
                got = model.pe.local(q, k, v, qs, ks, causal)
            finally:
                run.LOCALITY = old
            torch.testing.assert_close(got, want, atol=1e-4, rtol=0)
            scaled = model.pe.local(q, k, v, qs, ks, causal)
            self.assertGreater(float((scaled - want).abs().max()), 1e-3)

    def test_near_identity_skew(self):
        s = run.near_identity_skew(8, torch.Generator().manual_seed(0)).double()
        torch.testing.assert_close(s, -s.T)
        angles = sorted(torch.linalg.eigvals(s).imag.abs().tolist())
        self.assertAlmostEqual(angles[-1], 1.0, places=5)
        self.assertAlmostEqual(angles[0], 1e-4, places=6)


@unittest.skipIf(_SKIP is not None, _SKIP or "")
class QuickRunTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.result = run.main(["--quick", "--out", cls.tmp.name])

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def read(self, name):
        with open(os.path.join(self.tmp.name, name), encoding="utf-8") as f:
            return f.read()

    def test_sequence_report(self):
        text = self.read("ape_sequences.md")
        rows = table_rows(text, "| encoding")
        self.assertEqual(set(rows), set(run.SEQ_ENCODINGS))
        for enc, cells in rows.items():
            with self.subTest(enc):
                for c in cells[:3]:
                    a = accuracy(c)
                    self.assertTrue(math.isfinite(a) and 0.0 <= a <= 1.0, c)
                for task, (mean, _) in run.PAPER_T1.get(enc, {}).items():
                    self.assertEqual(cells[3 + run.SEQ_TASKS.index(task)].split(" ")[0],
                                     "%.2f" % mean)
        self.assertIn("scaled down", text)
        self.assertFalse([f for f in os.listdir(self.tmp.name) if f.endswith(".tmp")])

    def test_tree_report(self):
        text = self.read("ape_trees.md")
        rows = table_rows(text, "| encoding")
        self.assertEqual(set(rows), set(run.TREE_ENCODINGS))
        for enc, cells in rows.items():
            with self.subTest(enc):
                if enc in run.NOT_RUN:
                    self.assertIn("not run:", cells[-1])
                    continue
                for c in cells[:4]:
                    a = accuracy(c)
                    self.assertTrue(math.isfinite(a) and 0.0 <= a <= 1.0, c)
        paper = table_rows(text, "| paper")
        self.assertEqual(paper["algebraic_tree"][0], "99.06 ± 0.1")
        self.assertEqual(paper["sinusoidal"][3], "25.70 ± 0.6")

    def test_first_losses_and_rows(self):
        rows = self.result["rows"]
        n_seq = len(run.SEQ_TASKS) * len(run.SEQ_ENCODINGS)
        n_tree = len(run.TREE_TASKS) * len(run.ORDERS) * (len(run.TREE_ENCODINGS)
                                                          - len(run.NOT_RUN))
        self.assertEqual(len(rows), n_seq + n_tree)
        for r in rows:
            self.assertLess(abs(r["first_loss"] - math.log(run.VOCAB)), 0.3, r)

    def test_one_suite_keeps_the_other_in_json(self):
        # A run of the trees alone (one encoding) into a folder holding a full run's
        # ape.json rewrites the tree report and keeps the sequence rows and their run's
        # description, so --from-json still rebuilds the sequence table unchanged.
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "out")
            shutil.copytree(self.tmp.name, out)
            with contextlib.redirect_stdout(io.StringIO()):
                r = run.main(["--quick", "--suites", "trees", "--encodings", "rope",
                              "--out", out])
            self.assertEqual(set(r["reports"]), {"trees"})
            with open(os.path.join(out, "ape.json"), encoding="utf-8") as f:
                raw = json.load(f)
            seq = [x for x in raw["rows"] if x["task"] in run.SEQ_TASKS]
            old_seq = [x for x in self.result["rows"] if x["task"] in run.SEQ_TASKS]
            self.assertEqual(seq, old_seq)
            trees = [x for x in raw["rows"] if x["task"] in run.TREE_TASKS]
            self.assertEqual({x["encoding"] for x in trees}, {"rope"})
            self.assertEqual(raw["suite_meta"]["trees"]["command"],
                             "run.py --quick --suites trees --encodings rope --out " + out)
            with open(os.path.join(out, "ape_sequences.md"), encoding="utf-8") as f:
                self.assertEqual(f.read(), self.read("ape_sequences.md"))
            again = os.path.join(tmp, "again")
            with contextlib.redirect_stdout(io.StringIO()):
                rebuilt = run.main(["--from-json", os.path.join(out, "ape.json"),
                                    "--out", again])
            self.assertEqual(rebuilt["reports"]["sequences"], self.read("ape_sequences.md"))
            self.assertIn("--suites trees --encodings rope", rebuilt["reports"]["trees"])

    def test_unreadable_previous_json_stops_before_training(self):
        # An ape.json in --out that cannot be merged (not JSON, or not a run's) stops the
        # run before any training, not after it.
        for text in ("{not json", '{"rows": []}', '{"rows": [], "meta": {"suites": ["trees"]}}',
                     # meta.suites a string (read letter by letter), a row without the
                     # fields the reports read (a KeyError at a later --from-json).
                     '{"rows": [], "meta": {"suites": "trees"}}',
                     '{"rows": [{"task": "copy"}], "meta": {"suites": []}}'):
            with self.subTest(text=text), tempfile.TemporaryDirectory() as out:
                with open(os.path.join(out, "ape.json"), "w", encoding="utf-8") as f:
                    f.write(text)
                err = refusal(self, ["--quick", "--suites", "sequences", "--encodings", "rope",
                                     "--out", out], allow_torch=True)
                self.assertIn("is not a run's ape.json", err)
                with open(os.path.join(out, "ape.json"), encoding="utf-8") as f:
                    self.assertEqual(f.read(), text)

    def test_rewritten_from_json(self):
        with tempfile.TemporaryDirectory() as out:
            intro = os.path.join(out, "intro.txt")
            with open(intro, "w", encoding="utf-8") as f:
                f.write("An introduction.")
            again = run.main(["--from-json", os.path.join(self.tmp.name, "ape.json"),
                              "--out", out, "--intro", intro])
            mine = self.read("ape_sequences.md")
            self.assertEqual(again["reports"]["sequences"].replace("An introduction.\n\n", ""),
                             mine)


if __name__ == "__main__":
    unittest.main()
