"""The length-extrapolation experiment in miniature (run.py --quick), and properties of its
models that the full run relies on.

PyTorch is optional: without it the test skips with a message."""

import contextlib
import io
import math
import os
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
    _SKIP = "PyTorch is not installed (%s); length_extrapolation test skipped" % e

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run  # noqa: E402
import refusal_testing  # noqa: E402

try:
    import matplotlib  # noqa: F401
    _HAVE_MPL = True
except ImportError:
    _HAVE_MPL = False

def refusal(test, argv, allow_torch=False):
    return refusal_testing.refusal(test, run, argv, allow_torch)


class ArgumentsTest(unittest.TestCase):
    """Refusals that need no torch."""

    def test_bad_arguments_are_refused_before_torch(self):
        with tempfile.TemporaryDirectory() as out:
            for argv, message in (
                    # No encoding named, or zero seeds: they replaced the report, JSON and
                    # plot with empty results.
                    (["--quick", "--encodings", ","], "--encodings names no encoding"),
                    (["--quick", "--encodings", "rotary"], "unknown encoding 'rotary'"),
                    (["--quick", "--seeds", "0"], "--seeds must be >= 1, got 0"),
                    (["--quick", "--eval-tokens", "0"], "--eval-tokens must be >= 1, got 0"),
                    # Heads of d_model / heads dimensions, and an even number of them where
                    # an encoding rotates pairs (the default list has RoPE).
                    (["--quick", "--d-model", "30", "--heads", "4"],
                     "--d-model 30 does not split into 4 heads"),
                    (["--quick", "--d-model", "12", "--heads", "4"],
                     "--d-model 12 gives heads of 3 dimensions")):
                with self.subTest(argv=argv):
                    self.assertIn(message, refusal(self, argv + ["--out", out]))
            self.assertEqual(os.listdir(out), [])

    def test_eval_window_tokens(self):
        # A whole number of windows of the longest length, at most the held-out tokens
        # that have a next token; 0 when not one window fits.
        self.assertEqual(run.eval_window_tokens(32768, 200000, 512), 32768)
        self.assertEqual(run.eval_window_tokens(1000, 200000, 512), 512)
        self.assertEqual(run.eval_window_tokens(32768, 1025, 512), 1024)
        self.assertEqual(run.eval_window_tokens(32768, 1024, 512), 512)
        self.assertEqual(run.eval_window_tokens(511, 200000, 512), 0)


CFG = {"d_model": 32, "heads": 2, "layers": 1, "seq": 16, "steps": 2, "batch": 2, "lr": 3e-3,
       "threads": 1, "shaw_k": 4, "factors": (1, 2), "eval_tokens": 64,
       "encodings": list(run.ENCODINGS)}


@unittest.skipIf(_SKIP is not None, _SKIP or "")
class LengthExtrapolationTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.result = run.main(["--quick", "--out", cls.tmp.name])

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_eval_tokens_below_the_longest_window_are_refused(self):
        # --quick evaluates at L = 16 and 2L = 32: 20 tokens hold no 32-token window, so
        # the run stops before training (it trained every model, then divided by zero).
        with tempfile.TemporaryDirectory() as out:
            err = refusal(self, ["--quick", "--eval-tokens", "20", "--out", out],
                          allow_torch=True)
            self.assertIn("--eval-tokens 20", err)
            self.assertIn("longest evaluation length 32 (2L)", err)
            self.assertEqual(os.listdir(out), [])

    def test_odd_heads_pass_without_a_rotating_encoding(self):
        # Heads of 3 dimensions are fine for ALiBi and T5 (nothing rotates pairs): the run
        # gets past the head check to the next refusal (too few evaluation tokens).
        with tempfile.TemporaryDirectory() as out:
            err = refusal(self, ["--quick", "--encodings", "alibi,t5", "--d-model", "12",
                                 "--heads", "4", "--eval-tokens", "20", "--out", out],
                          allow_torch=True)
            self.assertNotIn("heads", err)
            self.assertIn("--eval-tokens 20", err)

    def test_eval_tokens_rounded_to_the_longest_window(self):
        # 50 tokens: 32 at every length (two windows of 16, one of 32), and the report
        # says 32 and why, not 50 (three windows of 16 against one of 32 before).
        with tempfile.TemporaryDirectory() as out:
            with contextlib.redirect_stdout(io.StringIO()):
                r = run.main(["--quick", "--encodings", "alibi", "--steps", "2",
                              "--eval-tokens", "50", "--out", out])
        self.assertEqual([row["eval_tokens"] for row in r["rows"]], [32])
        self.assertEqual(r["meta"]["eval_tokens"], 32)
        self.assertIn("of which 32 evaluated at every length (--eval-tokens 50: at most "
                      "the held-out tokens with a next token, rounded down to a multiple of "
                      "the longest length, 32)", r["report"])
        # The default (512, a multiple of 32) is used as given, without the note.
        self.assertIn("of which 512 evaluated at every length\n", self.result["report"])

    def test_report_has_every_encoding(self):
        with open(os.path.join(self.tmp.name, "length_extrapolation.md"), encoding="utf-8") as f:
            text = f.read()
        rows = {line.split("|")[1].strip(): line for line in text.splitlines()
                if line.startswith("| ") and not line.startswith("| encoding")}
        for name in run.ENCODINGS:
            with self.subTest(name):
                self.assertIn(name, rows)
                cells = [c.strip() for c in rows[name].split("|")[2:4]]  # ppl at 1L and 2L
                self.assertNotIn("not run:", rows[name])  # --quick runs every encoding
                for c in cells:
                    mean = float(c.split("±")[0])
                    self.assertTrue(math.isfinite(mean) and mean > 1.0, rows[name])
        self.assertRegex(text, r"gpe\.torch\.attention with RoPE inside [0-9.]+ ms, torch RoPE "
                               r"\+ scaled_dot_product_attention [0-9.]+ ms")
        self.assertIn("Python %s" % sys.version.split()[0], text)
        self.assertFalse(os.path.exists(os.path.join(self.tmp.name,
                                                     "length_extrapolation.md.tmp")))
        self.assertTrue(os.path.isfile(os.path.join(self.tmp.name, "length_extrapolation.json")))
        png = os.path.join(self.tmp.name, "length_extrapolation.png")
        if _HAVE_MPL:
            self.assertTrue(os.path.isfile(png) and os.path.getsize(png) > 1000)
        else:
            print("matplotlib not installed: the plot is not checked")

    def test_report_rewritten_from_json(self):
        # --from-json rebuilds the same report from the per-seed numbers (how an
        # introduction is added to a full run's report without training again).
        with tempfile.TemporaryDirectory() as out:
            intro = os.path.join(out, "intro.txt")
            with open(intro, "w", encoding="utf-8") as f:
                f.write("An introduction.\n")
            again = run.main(["--from-json", os.path.join(self.tmp.name,
                                                          "length_extrapolation.json"),
                              "--out", out, "--intro", intro])
        self.assertEqual(again["report"].replace("An introduction.\n\n", ""),
                         self.result["report"])

    def test_initial_loss_is_uniform(self):
        # Untrained, every model predicts nearly uniformly: the final LayerNorm gives unit
        # variance features and the head's default init U(-1/8, 1/8) (fan-in 64) gives
        # logits of variance 64 / 192 = 1/3, so the first loss is about ln(129) + 1/6 =
        # 5.03. 0.5 around ln(129) holds that with margin; an encoding that blows up the
        # scores fails it. (Causality is test_no_position_sees_a_later_token's.)
        for r in self.result["rows"]:
            with self.subTest(r["encoding"]):
                self.assertLess(abs(r["loss0"] - math.log(run.VOCAB)), 0.5)

    def test_fused_rope_matches_sdpa_baseline(self):
        # The timing compares like with like: the RoPE model through gpe.torch.attention
        # and the baseline (RoPE by torch ops, SDPA) from the same weights give the same
        # logits and gradients. float32 on both sides: rounding ~1e-6 on O(1) logits, so
        # 1e-4; a pairing, base or mask mismatch moves them by >= 1e-2.
        a, b = run.build(CFG, "rope", 0), run.build(CFG, "sdpa_rope", 0)
        x = torch.randint(0, run.VOCAB, (2, 24))
        la, lb = a(x), b(x)
        torch.testing.assert_close(la, lb, atol=1e-4, rtol=0)
        la.square().mean().backward()
        lb.square().mean().backward()
        ga, gb = a.blocks[0].qkv.weight.grad, b.blocks[0].qkv.weight.grad
        torch.testing.assert_close(ga, gb, atol=1e-4, rtol=1e-3)

    def test_no_position_sees_a_later_token(self):
        # Next-token prediction needs causal models: changing the token at position t
        # leaves the logits of positions < t as they were, for every trained encoding
        # (FoX's and GRAPE-AP's per-token gates included), and changes those from t on.
        # Earlier rows go through the same operations on the same values either way, so
        # they agree to float32 rounding (1e-6 allows for a reordered sum); an untrained
        # model's logits move by ~1e-2 or more where a token is seen.
        torch.manual_seed(0)
        x = torch.randint(0, run.VOCAB, (2, 24))
        y = x.clone()
        t = 13
        y[:, t] = (x[:, t] + 1) % run.VOCAB
        for enc in sorted({trained for trained, _ in run.ENCODINGS.values()}):
            with self.subTest(enc):
                m = run.build(CFG, enc, 0)
                with torch.no_grad():
                    a, b = m(x), m(y)
                torch.testing.assert_close(b[:, :t], a[:, :t], atol=1e-6, rtol=0)
                self.assertGreater(float((b[:, t:] - a[:, t:]).abs().max()), 1e-3)

    def test_learned_rows_beyond_L_get_no_gradient(self):
        # The learned table has 8L rows so that it can be evaluated at 8L; training at L
        # reaches rows 0..L-1 only, so rows L.. keep their initial values exactly.
        m = run.build(CFG, "learned", 0)
        before = m.pos_table.detach().clone()
        data = torch.randint(0, run.VOCAB, (500,))
        step = run.step_fn(m, torch.optim.Adam(m.parameters(), lr=1e-2))
        for xy in run.batches(data, 2, 2, CFG["seq"], 0):
            step(xy, 1e-2)
        L = CFG["seq"]
        self.assertEqual(m.pos_table.shape[0], 8 * L)
        self.assertTrue(torch.equal(m.pos_table[L:], before[L:]))
        self.assertFalse(torch.equal(m.pos_table[:L], before[:L]))

    def test_same_core_weights_for_every_encoding(self):
        # Only the encoding differs: every model of a seed starts from the same core.
        ref = run.build(CFG, "none", 3).state_dict()
        for enc in ("alibi", "fox", "learned", "algebraic"):
            s = run.build(CFG, enc, 3).state_dict()
            for k, v in ref.items():
                self.assertTrue(torch.equal(s[k], v), (enc, k))


if __name__ == "__main__":
    unittest.main()
