"""The char_transformer example in miniature: a handful of steps with each attention.

PyTorch is optional: without it the test skips with a message."""

import contextlib
import io
import math
import os
import pathlib
import sys
import tempfile
import unittest
from unittest import mock

import sanitizer_preload
from gpe import _ffi

sanitizer_preload.reexec_if_needed(next((str(p) for p in _ffi._candidates() if p.is_file()), None))

try:
    import torch  # noqa: E402
    _SKIP = None
except ImportError as e:
    torch = None
    _SKIP = "PyTorch is not installed (%s); char_transformer test skipped" % e

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train  # noqa: E402


TINY = ["--batch", "2", "--seq", "16", "--d-model", "16", "--heads", "2", "--layers", "1"]


class ArgumentsTest(unittest.TestCase):
    """What parse refuses and how it resolves paths (no torch needed)."""

    def test_bad_sizes_are_refused(self):
        # --steps 0 trained nothing and then failed on its empty list of step times.
        for argv, message in ((["--steps", "0"], "--steps must be >= 1, got 0"),
                              (["--batch", "-1"], "--batch must be >= 1, got -1"),
                              (["--d-model", "30", "--heads", "4"],
                               "--d-model 30 does not split into 4 heads of an even size"),
                              (["--d-model", "12", "--heads", "4"],
                               "--d-model 12 does not split into 4 heads of an even size")):
            with self.subTest(argv=argv):
                err = io.StringIO()
                with contextlib.redirect_stderr(err), self.assertRaises(SystemExit) as e:
                    train.parse(argv)
                self.assertEqual(e.exception.code, 2)
                self.assertIn(message, err.getvalue())

    def test_relative_paths_are_the_callers(self):
        # Under `bazel run` the script runs in its runfiles tree; a relative --out or
        # --corpus means the directory the command was typed in.
        with tempfile.TemporaryDirectory() as cwd:
            with mock.patch.dict(os.environ, {"BUILD_WORKING_DIRECTORY": cwd}):
                args = train.parse(["--out", "ct", "--corpus", "my.txt"])
                absolute = train.parse(["--out", "/abs/ct"])
            self.assertEqual(args.out, os.path.join(cwd, "ct"))
            self.assertEqual(args.corpus, os.path.join(cwd, "my.txt"))
            self.assertEqual(absolute.out, "/abs/ct")
            self.assertTrue(os.path.isfile(absolute.corpus))  # corpus.txt beside train.py


@unittest.skipIf(_SKIP is not None, _SKIP or "")
class CharTransformerTest(unittest.TestCase):
    def test_attentions_agree(self):
        # The two attention paths on one random batch, float32: each side's rounding is
        # ~1e-7 relative (16-wide dots, 32-term sums), so 2e-5 on outputs and 1e-4 on
        # gradients; a RoPE pairing, base or mask mismatch moves outputs by >= 1e-2.
        torch.manual_seed(0)
        q, k, v = (torch.randn(2, 32, 4, 16, requires_grad=True) for _ in range(3))
        w = torch.randn(2, 32, 4, 16)
        a = train.torch_attention(q, k, v)
        b = train.gpe_attention(q, k, v)
        torch.testing.assert_close(b, a, atol=2e-5, rtol=0)
        ga = torch.autograd.grad((a * w).sum(), (q, k, v))
        gb = torch.autograd.grad((b * w).sum(), (q, k, v))
        for x, y in zip(ga, gb):
            torch.testing.assert_close(y, x, atol=1e-4, rtol=0)

    def test_few_steps_same_curve(self):
        # Same weights, same batches: the loss curves differ only by float32 rounding in
        # attention, ~1e-7 per step and barely amplified over 6 Adam steps (2.4e-7 seen
        # over 20 steps of the full example); 1e-4 leaves margin.
        with tempfile.TemporaryDirectory() as out:
            args = train.parse(["--steps", "6", "--batch", "4", "--seq", "32", "--d-model", "32",
                                "--layers", "1", "--out", out])
            with contextlib.redirect_stdout(io.StringIO()):
                r = train.run(args)
            self.assertTrue(os.path.isfile(os.path.join(out, "losses.json")))
            self.assertFalse([f for f in os.listdir(out) if f.endswith(".tmp")])
        t, g = r["torch"]["losses"], r["gpe"]["losses"]
        self.assertEqual((len(t), len(g)), (6, 6))
        self.assertLess(r["max_abs_loss_difference"], 1e-4)
        # Untrained: about ln(vocab) nats per character; and training lowers it.
        self.assertLess(abs(t[0] - math.log(r["config"]["vocab"])), 0.5)
        self.assertLess(t[-1], t[0])
        self.assertLess(g[-1], g[0])
        self.assertGreater(r["gpe"]["ms_per_step"], 0.0)

    def test_failed_write_leaves_old_results_whole(self):
        # A write that fails before it is on disk (a full disk, simulated: the flush to
        # disk raises OSError) leaves the previous losses.json as it was and no temporary
        # file: the new one is written beside it, renamed only when complete, and removed
        # when not.
        with tempfile.TemporaryDirectory() as out:
            old = os.path.join(out, "losses.json")
            with open(old, "w", encoding="utf-8") as f:
                f.write('{"old": true}')
            args = train.parse(["--steps", "1", "--out", out] + TINY)
            with mock.patch.object(train.os, "fsync",
                                   side_effect=OSError(28, "No space left on device")), \
                    contextlib.redirect_stdout(io.StringIO()), self.assertRaises(OSError):
                train.run(args)
            with open(old, encoding="utf-8") as f:
                self.assertEqual(f.read(), '{"old": true}')
            self.assertEqual(sorted(os.listdir(out)), ["losses.json"])

    def test_short_corpus_is_refused(self):
        # Fewer characters than one training window: a message, not torch's error.
        with tempfile.TemporaryDirectory() as tmp:
            corpus = os.path.join(tmp, "short.txt")
            with open(corpus, "w", encoding="utf-8") as f:
                f.write("abc")
            err = io.StringIO()
            with contextlib.redirect_stderr(err), self.assertRaises(SystemExit) as e:
                train.run(train.parse(["--corpus", corpus, "--out", tmp] + TINY))
            self.assertEqual(e.exception.code, 2)
            self.assertIn("has 3 characters, too few for windows of --seq 16", err.getvalue())


if __name__ == "__main__":
    unittest.main()
