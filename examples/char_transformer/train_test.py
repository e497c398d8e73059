"""The char_transformer example in miniature: a handful of steps with each attention.

PyTorch is optional: without it the test skips with a message."""

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
    _SKIP = "PyTorch is not installed (%s); char_transformer test skipped" % e

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train  # noqa: E402


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
            r = train.run(args)
            self.assertTrue(os.path.isfile(os.path.join(out, "losses.json")))
        t, g = r["torch"]["losses"], r["gpe"]["losses"]
        self.assertEqual((len(t), len(g)), (6, 6))
        self.assertLess(r["max_abs_loss_difference"], 1e-4)
        # Untrained: about ln(vocab) nats per character; and training lowers it.
        self.assertLess(abs(t[0] - math.log(r["config"]["vocab"])), 0.5)
        self.assertLess(t[-1], t[0])
        self.assertLess(g[-1], g[0])
        self.assertGreater(r["gpe"]["ms_per_step"], 0.0)


if __name__ == "__main__":
    unittest.main()
