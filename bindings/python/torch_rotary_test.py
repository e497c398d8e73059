"""gpe.torch.RotaryEmbedding (gpe/torch_rotary.py): equal to gpe.Rope.forward in every
dtype the library takes, gradients (gradcheck and gradgradcheck in float64), the cached
table, torchtune's input_pos, strided (head-major) views, and bad input. Its comparison
with transformers' LlamaRotaryEmbedding is in rope_hf_test.py. Skips with a message
where PyTorch is not installed."""

import copy
import gc
import pickle
import unittest

import sanitizer_preload
from gpe import _ffi

sanitizer_preload.reexec_if_needed(next((str(p) for p in _ffi._candidates() if p.is_file()), None))

import numpy as np  # noqa: E402

import gpe  # noqa: E402

try:
    import torch  # noqa: E402
    import gpe.torch as gt  # noqa: E402
    _SKIP = None
except ImportError as e:
    torch = None
    _SKIP = "PyTorch is not installed (%s); gpe.torch.RotaryEmbedding tests skipped" % e

needs_torch = unittest.skipIf(_SKIP is not None, _SKIP or "")


def bf16_bits(t):
    return t.view(torch.int16).numpy().view(np.uint16)


@needs_torch
class RotaryEmbeddingTest(unittest.TestCase):
    def setUp(self):
        self.gen = torch.Generator().manual_seed(0)

    def randn(self, *shape, dtype=None):
        x = torch.randn(*shape, generator=self.gen, dtype=torch.float64)
        return x if dtype is None else x.to(dtype)

    def test_equals_rope_forward_every_schedule_and_dtype(self):
        # The module runs the library's table; gpe.Rope.forward forms the same cos/sin
        # rows (exact angles, rounded once to the table type), so the results are equal
        # bit for bit in every dtype.
        cases = [
            dict(schedule="default", base=10000.0),
            dict(schedule="linear", factor=4.0, pairing="interleaved"),
            dict(schedule="yarn", factor=8.0, original_max_position=64),
            dict(schedule="llama3", base=500000.0, original_max_position=64),
            dict(schedule="dynamic_ntk", factor=2.0, original_max_position=16,
                 current_length=40, partial_rotary_factor=0.5),
            dict(schedule="longrope", original_max_position=16, max_position=64,
                 short_factor=[1.0 + 0.1 * i for i in range(8)],
                 long_factor=[2.0 + 0.1 * i for i in range(8)], rotary_dim=16),
        ]
        pos = torch.tensor([[3, 4, 5, 100, 7], [0, 1, 2, 3, 1 << 40]])
        for kw in cases:
            for dtype in (torch.float64, torch.float32, torch.float16, torch.bfloat16):
                with self.subTest(kw=kw, dtype=dtype):
                    module = gt.RotaryEmbedding(32, **kw)
                    x = self.randn(2, 5, 3, 32, dtype=dtype)
                    bf16 = dtype == torch.bfloat16
                    arr = bf16_bits(x) if bf16 else x.numpy()
                    for input_pos, positions in ((None, None), (pos, pos.reshape(-1).numpy())):
                        want = module.rope.forward(arr, positions=positions, bfloat16=bf16)
                        got = module(x, input_pos=input_pos)
                        self.assertEqual(got.dtype, dtype)
                        got = bf16_bits(got) if bf16 else got.numpy()
                        np.testing.assert_array_equal(got, want)

    def test_gradcheck_float64(self):
        # The rotation is linear: central differences agree with the library's backward
        # to ~1e-10 (gradcheck's default eps 1e-6, atol 1e-5 are far above that).
        for kw in (dict(schedule="yarn", factor=4.0, original_max_position=16),
                   dict(pairing="interleaved", rotary_dim=6)):
            module = gt.RotaryEmbedding(8, **kw)
            x = self.randn(2, 3, 2, 8).requires_grad_()
            pos = torch.tensor([5, 9, 1000])
            self.assertTrue(torch.autograd.gradcheck(lambda t: module(t, input_pos=pos), (x,)))
            self.assertTrue(torch.autograd.gradgradcheck(lambda t: module(t), (x,)))

    def test_backward_float32_is_transpose(self):
        # <R x, dy> = <x, R^T dy> for the float32 table: both sides are sums of 2 * 5 *
        # 3 * 32 products of size ~1, rounded in float32 (relative 2^-24 each): rtol 1e-5.
        module = gt.RotaryEmbedding(32, schedule="llama3", base=500000.0)
        x = self.randn(2, 5, 3, 32, dtype=torch.float32).requires_grad_()
        dy = self.randn(2, 5, 3, 32, dtype=torch.float32)
        y = module(x)
        (dx,) = torch.autograd.grad(y, x, dy)
        lhs = float((y.detach().double() * dy.double()).sum())
        rhs = float((x.detach().double() * dx.double()).sum())
        self.assertAlmostEqual(lhs, rhs, delta=1e-5 * max(1.0, abs(lhs)))

    def test_table_cached_and_refreshed(self):
        module = gt.RotaryEmbedding(16)
        q, k = self.randn(1, 6, 4, 16), self.randn(1, 6, 2, 16)
        t1 = module.table(q)
        module(q)
        module(k, input_pos=None)  # any number of heads: the same table
        self.assertIs(module.table(k), t1)
        pos = torch.arange(10, 16)
        t2 = module.table(q, input_pos=pos)
        self.assertIsNot(t2, t1)
        self.assertIs(module.table(q, input_pos=pos.clone()), t2)
        self.assertIsNot(module.table(q.float()), t2)  # a float32 table for float32
        self.assertIsNot(module.table(self.randn(2, 6, 4, 16)), t2)  # another batch

    def test_positions_advanced_in_place_give_a_new_table(self):
        # A decoding loop that advances one position buffer in place: each step rotates
        # at the buffer's current value (the cache keeps a copy, not a view of it).
        module = gt.RotaryEmbedding(16)
        pos = torch.tensor([[0]])
        x = self.randn(1, 1, 2, 16)
        for step in range(3):
            got = module(x, input_pos=pos)
            fresh = gt.RotaryEmbedding(16)(x, input_pos=torch.tensor([[step]]))
            self.assertTrue(torch.equal(got, fresh), "step %d" % step)
            pos += 1

    def test_gradient_with_zero_strides(self):
        # A reduction over the sequence hands backward a gradient expanded along it
        # (stride 0): made contiguous, not refused by the C rope.
        module = gt.RotaryEmbedding(8)
        x = self.randn(1, 5, 2, 8).requires_grad_()
        (module(x).sum(dim=1) ** 2).sum().backward()
        self.assertTrue(torch.isfinite(x.grad).all())

    def test_torchtune_layouts_and_views(self):
        # A [batch, heads, seq, dim] tensor given as its transpose view (strided, read in
        # place) and a shared input_pos [seq]: the same values as the contiguous tensor
        # with input_pos [batch, seq].
        module = gt.RotaryEmbedding(16, pairing="interleaved", max_seq_len=4096)
        x_bhsd = self.randn(2, 3, 7, 16)
        view = x_bhsd.transpose(1, 2)
        self.assertFalse(view.is_contiguous())
        pos = torch.arange(3, 10)
        got = module(view, input_pos=pos)
        want = module(view.contiguous(), input_pos=pos[None].expand(2, 7))
        torch.testing.assert_close(got, want, rtol=0, atol=0)
        # A head_dim that is not contiguous is copied first.
        odd = self.randn(2, 7, 3, 32)[..., ::2]
        torch.testing.assert_close(module(odd), module(odd.contiguous()), rtol=0, atol=0)

    def test_rope_argument_and_hf_config(self):
        rope = gpe.Rope(16, schedule="linear", factor=2.0)
        module = gt.RotaryEmbedding(16, rope=rope)
        x = self.randn(1, 4, 1, 16)
        np.testing.assert_array_equal(module(x).numpy(), rope.forward(x.numpy()))
        from_cfg = gt.RotaryEmbedding.from_hf_config(
            {"head_dim": 16, "rope_parameters": {"rope_type": "linear", "factor": 2.0,
                                                  "rope_theta": 10000.0}})
        np.testing.assert_array_equal(from_cfg(x).numpy(), module(x).numpy())
        self.assertIn("rotary_dim=16", repr(module))

    def test_track_length(self):
        # Each call's frequencies are those of gpe.Rope with the current_length the rule
        # gives (L = largest position + 1, L0 = 16): longrope long while L > L0; dynamic
        # NTK grows with the longest L and resets below L0.
        common = dict(original_max_position=16, track_length=True)
        lr = dict(schedule="longrope", max_position=64, short_factor=[1.0] * 8,
                  long_factor=[2.0 + 0.5 * i for i in range(8)])
        for kw, steps in ((dict(schedule="dynamic_ntk", factor=2.0),
                           [(10, 0), (40, 40), (30, 40), (60, 60), (12, 0), (17, 17)]),
                          (lr, [(10, 0), (40, 40), (30, 30), (12, 0), (17, 17)])):
            module = gt.RotaryEmbedding(16, **kw, **common)
            params = {k: v for k, v in kw.items()}
            for length, current in steps:
                with self.subTest(kw["schedule"], length=length):
                    x = self.randn(1, 3, 2, 16)
                    pos = torch.tensor([0, length // 2, length - 1])
                    want = gpe.Rope(16, original_max_position=16, current_length=current,
                                    **params).forward(x.numpy(), positions=pos.numpy())
                    np.testing.assert_array_equal(module(x, input_pos=pos).numpy(), want)
        # Off by default: the given current_length stays.
        module = gt.RotaryEmbedding(16, schedule="dynamic_ntk", factor=2.0,
                                    original_max_position=16)
        module(self.randn(1, 40, 1, 16))
        self.assertEqual(module.rope._args["current_length"], 0)

    def test_deepcopy_and_pickle(self):
        # Models are deep-copied (EMA, checkpoints): the copy rebuilds its gpe.Rope and
        # table and gives the same bits after the original is gone.
        module = gt.RotaryEmbedding(16, schedule="llama3", base=500000.0)
        x = self.randn(2, 4, 2, 16)
        want = module(x)
        copies = [copy.deepcopy(module), pickle.loads(pickle.dumps(module))]
        del module
        gc.collect()
        for c in copies:
            torch.testing.assert_close(c(x), want, rtol=0, atol=0)

    def test_compile_falls_back_to_eager(self):
        module = gt.RotaryEmbedding(16, schedule="yarn", factor=4.0, original_max_position=8)
        x = self.randn(1, 5, 2, 16, dtype=torch.float32)
        compiled = torch.compile(lambda t: module(t) * 2.0, backend="eager")
        torch.testing.assert_close(compiled(x), module(x) * 2.0, rtol=0, atol=0)

    def test_bad_input(self):
        module = gt.RotaryEmbedding(16)
        with self.assertRaisesRegex(ValueError, r"\[batch, seq, heads, 16\]"):
            module(self.randn(4, 16))
        with self.assertRaisesRegex(ValueError, r"\[batch, seq, heads, 16\]"):
            module(self.randn(1, 4, 2, 8))
        with self.assertRaisesRegex(TypeError, "unsupported dtype"):
            module(torch.zeros(1, 2, 1, 16, dtype=torch.int32))
        with self.assertRaisesRegex(ValueError, "input_pos"):
            module(self.randn(2, 4, 1, 16), input_pos=torch.arange(3))
        with self.assertRaisesRegex(TypeError, "integers"):
            module(self.randn(1, 4, 1, 16), input_pos=torch.arange(4.0))
        with self.assertRaisesRegex(ValueError, "pairing"):
            gt.RotaryEmbedding(16, pairing="halves")
        with self.assertRaisesRegex(ValueError, "head_dim 16 but dim is 8"):
            gt.RotaryEmbedding(8, rope=gpe.Rope(16))
        with self.assertRaisesRegex(ValueError, "not both"):
            gt.RotaryEmbedding(16, rope=gpe.Rope(16), factor=2.0)
        with self.assertRaisesRegex(ValueError, "single-axis.*2 axes"):
            gt.RotaryEmbedding(16, rope=gpe.Rope(16, mrope_sections=[4, 4]))
        with self.assertRaises(gpe.GpeError):  # the library's own check: odd rotary_dim
            gt.RotaryEmbedding(16, rotary_dim=5)


if __name__ == "__main__":
    unittest.main()
