"""The APE experiments in miniature (run.py --quick), and properties of their data and
models that the full run relies on.

PyTorch is optional: without it the test skips with a message."""

import math
import os
import random
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
        # nodes (operators) have both children and leaves none, depth within the bounds.
        rng = random.Random(2)
        for _ in range(30):
            depth = rng.randrange(1, 6)
            t = run.random_tree(rng, depth, 0.75)
            for task in run.TREE_TASKS:
                for order in run.ORDERS:
                    s = run.tree_sample(task, order, random.Random(3), run.QUICK)
                    self.assertEqual(len(s["tgt_tree"]), len(s["tgt"]))
                    self.assertEqual(len({tuple(a) for a in s["src_tree"]}), len(s["src"]))
            self.assertEqual(len(set(t)), len(t))
            for a, lab in t.items():
                self.assertLessEqual(len(a), depth)
                if a:
                    self.assertIn(a[:-1], t)
                    self.assertLess(t[a[:-1]], run.OPERATORS)
                internal = lab < run.OPERATORS
                self.assertEqual(a + (0,) in t, internal)
                self.assertEqual(a + (1,) in t, internal)

    def test_reduced_keeps_the_full_model_on_shorter_data(self):
        # --reduced changes only the data sizes and the step count, never the model or
        # the optimiser, so its ordering of the encodings is the full configuration's.
        for key in ("d_model", "ffn", "heads", "layers", "batch", "seeds", "branch"):
            self.assertEqual(run.REDUCED[key], run.FULL[key], key)
        self.assertLess(run.REDUCED["seq_mean"], run.FULL["seq_mean"])
        self.assertLess(run.REDUCED["depth_max"], run.FULL["depth_max"])
        with self.assertRaises(SystemExit):
            run.main(["--quick", "--reduced"])
        # Names that match no encoding, and zero seeds, are refused before anything runs
        # (they ran nothing and replaced the reports with empty tables).
        for bad in (["--quick", "--encodings", "rotary"], ["--quick", "--encodings", ","],
                    ["--quick", "--seeds", "0"]):
            with self.assertRaises(SystemExit):
                run.main(bad)

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
        self.assertFalse(os.path.exists(os.path.join(self.tmp.name, "ape_sequences.md.tmp")))

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
