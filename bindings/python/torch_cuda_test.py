"""gpe.torch.attention and gpe.torch.rope on CUDA tensors (the C ABI's CUDA plugin) against
the same calls on the CPU in float64 and against PyTorch's SDPA on the same GPU: forward
and autograd backward in bfloat16 and float16, RoPE by rope_dim and by a gpe.Rope (YaRN),
ALiBi, GQA, packed batches with cu_seqlens on the device, a non-default stream, the
registered operator under torch.compile, and a clear error for an option the GPU
kernels lack.

Skips with a message without PyTorch or without a CUDA device (CI); runs in the GPU
check (tools/cuda_check/run_gpu_check.sh), which points GPE_LIBRARY at the bundled
libgpe.so (its CUDA plugin beside it) and passes --json to write gtest-style results.
"""

import json
import os
import sys
import unittest

try:
    import torch
    import torch.nn.functional as F
    import gpe
    import gpe.torch as gt
    _SKIP = None if torch.cuda.is_available() else "no CUDA device: gpe.torch on CUDA skipped"
except ImportError as e:  # PyTorch, or what gpe needs (NumPy), is missing
    torch = None
    _SKIP = "cannot import torch / gpe (%r): gpe.torch on CUDA skipped" % e

needs_gpu = unittest.skipIf(_SKIP is not None, _SKIP or "")

# Tolerances as attention/cuda/cuda_attention_test (inputs k / 128 in [-1, 1), exact in
# every type): max |o - o_ref| 0.03 for bfloat16, 0.004 for float16 (16-bit q, k, P and o
# roundings); gradients within 12 u max|ref| (u = 2^-8 / 2^-11).
_TOL = {"bf16": 0.03, "f16": 0.004}
_U = {"bf16": 2.0 ** -8, "f16": 2.0 ** -11}


def exact(shape, gen):
    """Values k / 128, k uniform in [-128, 128): exact in bfloat16, float16 and float32."""
    return torch.randint(-128, 128, shape, generator=gen).to(torch.float64) / 128.0


def dtype_of(name):
    return torch.bfloat16 if name == "bf16" else torch.float16


@needs_gpu
class CudaAttentionTest(unittest.TestCase):
    def setUp(self):
        self.gen = torch.Generator().manual_seed(5)

    def check_against_cpu(self, name, q, k, v, **kw):
        """Forward and backward of gt.attention on CUDA (dtype `name`) against the same call
        in float64 on the CPU."""
        dt = dtype_of(name)
        qc, kc, vc = (x.to("cuda", dt).requires_grad_() for x in (q, k, v))
        kw_cuda = {key: (val.cuda() if isinstance(val, torch.Tensor) else val)
                   for key, val in kw.items()}
        o = gt.attention(qc, kc, vc, **kw_cuda)
        self.assertEqual(o.device.type, "cuda")
        self.assertEqual(o.dtype, dt)
        q64, k64, v64 = (x.clone().requires_grad_() for x in (q, k, v))
        o64 = gt.attention(q64, k64, v64, **kw)
        err = (o.double().cpu() - o64.detach()).abs().max().item()
        self.assertLessEqual(err, _TOL[name], "o")
        g = exact(o64.shape, self.gen)
        o.backward(g.to("cuda", dt))
        o64.backward(g)
        for got, want, what in ((qc.grad, q64.grad, "dq"), (kc.grad, k64.grad, "dk"),
                                (vc.grad, v64.grad, "dv")):
            bound = 12 * _U[name] * want.abs().max().item() + 1e-6
            self.assertLessEqual((got.double().cpu() - want).abs().max().item(), bound, what)

    def test_padded_causal_rope_alibi_gqa(self):
        for name in ("bf16", "f16"):
            with self.subTest(name):
                q = exact((2, 40, 8, 64), self.gen)
                k, v = exact((2, 70, 2, 64), self.gen), exact((2, 70, 2, 64), self.gen)
                self.check_against_cpu(name, q, k, v, causal=True, rope_dim=64, alibi="causal")

    def test_packed_with_a_rope_handle(self):
        rope = gpe.Rope(128, schedule="yarn", factor=4.0, original_max_position=64)
        cu_q = torch.tensor([0, 5, 5, 60])
        cu_k = torch.tensor([0, 9, 12, 90])
        q = exact((60, 4, 128), self.gen)
        k, v = exact((90, 4, 128), self.gen), exact((90, 4, 128), self.gen)
        self.check_against_cpu("bf16", q, k, v, causal=True, rope=rope, cu_seqlens_q=cu_q,
                               cu_seqlens_k=cu_k)

    def test_matches_sdpa_on_the_gpu(self):
        for name in ("bf16", "f16"):
            with self.subTest(name):
                dt = dtype_of(name)
                q, k, v = (exact((1, 8, 128, 64), self.gen).to("cuda", dt) for _ in range(3))
                want = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                # gpe.torch takes bshd; SDPA bhsd.
                got = gt.attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                   is_causal=True).transpose(1, 2)
                self.assertLessEqual((got.float() - want.float()).abs().max().item(),
                                     2 * _TOL[name], name)

    def test_runs_on_the_current_stream(self):
        # On a side stream q2 is filled only after a long sleep: a call enqueued anywhere
        # but that stream would read the zeros (PyTorch's side streams do not wait for the
        # legacy stream), so equality shows the library used the current stream.
        q, k, v = (exact((1, 300, 4, 64), self.gen).to("cuda", torch.bfloat16)
                   for _ in range(3))
        want = gt.attention(q, k, v, causal=True)
        q2 = torch.zeros_like(q)
        torch.cuda.synchronize()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            torch.cuda._sleep(100_000_000)
            q2.copy_(q)
            got = gt.attention(q2, k, v, causal=True)
        torch.cuda.current_stream().wait_stream(s)
        torch.cuda.synchronize()
        self.assertTrue(torch.equal(got, want))

    def test_registered_operator_under_compile(self):
        q, k, v = (exact((1, 64, 4, 64), self.gen).to("cuda", torch.bfloat16).requires_grad_()
                   for _ in range(3))
        f = torch.compile(lambda a, b, c: gt.attention(a, b, c, causal=True), backend="aot_eager")
        o = f(q, k, v)
        want = gt.attention(q, k, v, causal=True)
        self.assertTrue(torch.equal(o, want))
        o.sum().backward()
        self.assertEqual(q.grad.device.type, "cuda")

    def test_rope_matches_the_cpu(self):
        # gt.rope on CUDA (offsets on the device) against float64 on the CPU, forward and
        # the autograd backward. |y| < 2 (YaRN's attention factor ~1.14 times sqrt(2)): the
        # output's rounding is at most 2^-8 (bfloat16) / 2^-11 (float16); tolerance twice.
        rope = gpe.Rope(64, schedule="yarn", factor=4.0, original_max_position=16)
        x = exact((2, 30, 4, 64), self.gen)
        offsets = torch.tensor([0, 7])
        for name, tol in (("bf16", 2.0 ** -7), ("f16", 2.0 ** -10)):
            with self.subTest(name):
                xc = x.to("cuda", dtype_of(name)).requires_grad_()
                y = gt.rope(xc, rope, offsets=offsets.cuda())
                self.assertEqual(y.device.type, "cuda")
                x64 = x.clone().requires_grad_()
                y64 = gt.rope(x64, rope, offsets=offsets)
                self.assertLessEqual((y.double().cpu() - y64.detach()).abs().max().item(), tol)
                g = exact(y64.shape, self.gen)
                y.backward(g.to("cuda", dtype_of(name)))
                y64.backward(g)
                self.assertLessEqual((xc.grad.double().cpu() - x64.grad).abs().max().item(), tol)

    def test_rotary_embedding_module_on_the_gpu(self):
        # gpe.torch.RotaryEmbedding (Llama 3 schedule, positions given) on CUDA against the
        # same module on the CPU, float32 (both in float32 arithmetic: 2e-5), and its
        # gradient.
        m = gt.RotaryEmbedding(64, schedule="llama3", factor=8.0, original_max_position=32)
        x = exact((2, 20, 3, 64), self.gen).float()
        pos = torch.arange(20) + 40
        xc = x.cuda().requires_grad_()
        y = m(xc, input_pos=pos)
        self.assertEqual(y.device.type, "cuda")
        xr = x.clone().requires_grad_()
        want = m(xr, input_pos=pos)
        self.assertLessEqual((y.cpu() - want.detach()).abs().max().item(), 2e-5)
        g = exact(tuple(want.shape), self.gen).float()
        y.backward(g.cuda())
        want.backward(g)
        self.assertLessEqual((xc.grad.cpu() - xr.grad).abs().max().item(), 2e-5)

    def test_an_option_the_gpu_lacks_is_refused_by_name(self):
        q, k, v = (exact((1, 16, 2, 64), self.gen).to("cuda", torch.bfloat16) for _ in range(3))
        with self.assertRaisesRegex(gpe.GpeError, "window"):
            gt.attention(q, k, v, causal=True, window_size=(4, 0))


def _json_results(path):
    """Runs the tests and writes gtest's JSON shape (what run_gpu_check.sh reads)."""
    suite = unittest.defaultTestLoader.loadTestsFromModule(sys.modules[__name__])
    cases = {}
    for test in _iter(suite):  # before run(), which drops each test once it has run
        cases[test.id()] = {"name": test.id().split(".", 1)[1], "result": "COMPLETED",
                            "failures": []}
    result = unittest.TestResult()
    suite.run(result)
    for test, why in result.skipped:
        cases[test.id()]["result"] = "SKIPPED"
    for test, tb in result.failures + result.errors:
        cases.setdefault(test.id(), {"name": test.id(), "result": "COMPLETED", "failures": []})
        # The summary keeps a failure's first 400 characters: the assertion first.
        cases[test.id()]["failures"].append({"failure": tb.strip().splitlines()[-1] + "\n" + tb})
        print(tb, file=sys.stderr)
    # Where the GPU check has seen a GPU (GPE_EXPECT_GPU=1), skipping is a failure: a
    # missing module or an invisible device must not read as a pass.
    if os.environ.get("GPE_EXPECT_GPU") == "1" and (_SKIP or result.skipped):
        print("torch_cuda_test: skipped on a GPU machine: %s" % _SKIP, file=sys.stderr)
        for case in cases.values():
            case["failures"].append({"failure": "skipped on a GPU machine: %s" % _SKIP})
        json.dump({"testsuites": [{"name": "torch_cuda_test",
                                   "testsuite": list(cases.values())}]}, open(path, "w"))
        return False
    json.dump({"testsuites": [{"name": "torch_cuda_test", "testsuite": list(cases.values())}]},
              open(path, "w"), indent=1)
    print("torch_cuda_test: %d run, %d failed, %d skipped"
          % (result.testsRun, len(result.failures) + len(result.errors), len(result.skipped)))
    return result.wasSuccessful()


def _iter(suite):
    for t in suite:
        if isinstance(t, unittest.TestSuite):
            yield from _iter(t)
        else:
            yield t


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--json":
        sys.exit(0 if _json_results(sys.argv[2]) else 1)
    unittest.main()
