"""The wheel as a user gets it: packaging/build_wheel.py builds it (auditwheel bundling
the shared libraries), pip installs it into a fresh virtual environment, and a script
run there with no environment variables (no GPE_LIBRARY, no Bazel runfiles, nothing but
PATH) imports gpe and gpe.torch and runs a RoPE, an attention forward and backward, an
INR fit, gpe.torch's attention, RotaryEmbedding from a Hugging Face config, a coordinate
encoder as a torch layer and (where transformers is installed) a tiny Llama through
register_hf_attention, each checked against a value computed another way.

The fresh environment reaches NumPy (and PyTorch, where the project's .venv has it)
through a .pth file naming the project environment's site-packages, as
tools/setup_torch.sh shares PyTorch: nothing is downloaded. Skips with a message where
auditwheel or the venv module is missing.

Usage (Bazel passes them): wheel_test.py --library=... --common-h=... --license=...
--readme=... --package=... (build_wheel.py's arguments, without OUT_DIR).
"""
import os
import pathlib
import shutil
import site
import subprocess
import sys
import tempfile
import textwrap
import unittest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent / "packaging"))
import build_wheel  # noqa: E402

# Run inside the fresh environment: every check fails the script (exit 1) with a message.
SMOKE = textwrap.dedent("""
    import os, sys
    import numpy as np
    import gpe
    assert "GPE_LIBRARY" not in os.environ, "the environment is not clean"
    lib = gpe._ffi.__file__
    assert "site-packages" in lib, lib
    rng = np.random.default_rng(0)
    # RoPE through gpe.Rope against the rotation written out (half-split pairs, base 1e4):
    # angles below 8 rad in double, so 1e-12.
    x = rng.standard_normal((1, 8, 2, 16))
    y = gpe.Rope(16).forward(x)
    p = np.arange(8)[:, None]
    theta = 10000.0 ** (-np.arange(8) / 8.0)
    c, s = np.cos(p * theta), np.sin(p * theta)
    a, b = x[0, :, :, :8], x[0, :, :, 8:]
    want = np.concatenate([a * c[:, None] - b * s[:, None], a * s[:, None] + b * c[:, None]], -1)
    assert np.abs(y[0] - want).max() < 1e-12, "RoPE"
    # Attention forward and backward in float32 against float64 (the exact reference):
    # 1e-4 on O(1) outputs and gradients of 16-term sums.
    q, k, v = (rng.standard_normal((1, 16, 2, 16)).astype(np.float32) for _ in range(3))
    o = gpe.attention(q, k, v, causal=True, rope_dim=16)
    o64 = gpe.attention(*(t.astype(np.float64) for t in (q, k, v)), causal=True, rope_dim=16)
    assert np.abs(o - o64).max() < 1e-4, "attention forward"
    g = gpe.attention_backward(q, k, v, np.ones_like(o), causal=True, rope_dim=16)
    g64 = gpe.attention_backward(*(t.astype(np.float64) for t in (q, k, v)),
                                 np.ones_like(o64), causal=True, rope_dim=16)
    assert max(np.abs(a - b).max() for a, b in zip(g, g64)) < 1e-4, "attention backward"
    # The separable closed form reproduces an image that is exactly in its span: a
    # rank-one product of two encoded columns (ridge 1e-10: residual far below 1e-6).
    xs = (np.arange(32) + 0.5) / 32
    psi = gpe.shifted_basis(xs, "gaussian", 16, 1 / 16)
    img = np.outer(psi[:, 3], psi[:, 7])
    w = gpe.fit_separable_2d(psi, psi, img, lam=1e-10)
    recon = gpe.predict_separable_2d(psi, psi, w)
    assert np.abs(recon - img).max() < 1e-6, "INR closed form"
    try:
        import torch
    except ImportError:
        print("gpe.torch not checked: no PyTorch")
    else:
        import gpe.torch as gt
        qt = torch.tensor(q, requires_grad=True)
        ot = gt.attention(qt, torch.tensor(k), torch.tensor(v), is_causal=True)
        ot.sum().backward()
        assert qt.grad is not None and torch.isfinite(qt.grad).all(), "gpe.torch backward"
        # RotaryEmbedding and a Hugging Face config (a Llama 3.1 rope_scaling dict): the
        # module's rotation equals gpe.Rope's forward on the same rows (one code path: 0).
        config = {"hidden_size": 256, "num_attention_heads": 4, "rope_theta": 500000.0,
                  "max_position_embeddings": 131072,
                  "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                   "high_freq_factor": 4.0,
                                   "original_max_position_embeddings": 8192}}
        rope = gpe.Rope.from_hf_config(config)
        module = gt.RotaryEmbedding.from_hf_config(config)
        xt = torch.randn(1, 8, 4, 64, dtype=torch.float64)
        got = module(xt)
        want = rope.forward(xt.numpy())
        assert np.abs(got.numpy() - want).max() == 0.0, "RotaryEmbedding"
        # A coordinate encoder as a torch layer: its features equal the encoder's own.
        enc = gpe.FourierFeatures("gaussian", dim=2, num_frequencies=8)
        pts = torch.rand(5, 2, dtype=torch.float64)
        assert torch.equal(gt.CoordinateEncoding(enc)(pts),
                           torch.from_numpy(enc.encode(pts.numpy()))), "CoordinateEncoding"
        # transformers' attention interface, where transformers is installed: a tiny random
        # Llama gives the same logits with "gpe" as with "sdpa" (float32, 1e-4).
        try:
            from transformers import LlamaConfig, LlamaForCausalLM
        except ImportError:
            print("register_hf_attention not checked: no transformers")
        else:
            def config():
                return LlamaConfig(vocab_size=50, hidden_size=32, intermediate_size=64,
                                   num_hidden_layers=1, num_attention_heads=4,
                                   num_key_value_heads=2)
            torch.manual_seed(0)
            ref = LlamaForCausalLM._from_config(config(), attn_implementation="sdpa").eval()
            ours = LlamaForCausalLM._from_config(config(), attn_implementation=gt.register_hf_attention()).eval()
            ours.load_state_dict(ref.state_dict())
            ids = torch.randint(0, 50, (1, 9))
            with torch.no_grad():
                diff = (ref(ids).logits - ours(ids).logits).abs().max().item()
            assert diff < 1e-4, "register_hf_attention: %g" % diff
    # Where the wheel carries the CUDA plugin, libgpe.so finds it beside itself and it
    # loads (its CUDA runtime bundled): on this GPU-less machine the plugin itself says so.
    plugin = os.path.join(os.path.dirname(lib), "libgpe_cuda.so")
    if os.path.exists(plugin):
        import ctypes
        from gpe import _ffi
        shape = (ctypes.c_int64 * 4)(1, 8, 2, 64)
        def fake(address):
            t = _ffi.DLTensor()
            t.data, t.ndim, t.shape = address, 4, shape
            t.device = _ffi.DLDevice(_ffi.KDL_CUDA, 0)
            t.dtype = _ffi.DLDataType(4, 16, 1)
            return t
        ts = [fake(0x10000000 + i * 0x100000) for i in range(4)]
        opts = _ffi.AttentionOptions()
        opts.struct_size, opts.rope_base, opts.rope_pairing = ctypes.sizeof(opts), 1e4, 1
        l = gpe._core.lib()
        st = l.gpe_attention_forward(ctypes.byref(opts), *(ctypes.byref(t) for t in ts), None)
        msg = l.gpe_last_error_message().decode()
        assert l.gpe_status_name(st).decode() == "GPE_ERROR_UNSUPPORTED", msg
        assert "no usable CUDA device" in msg, msg
        print("CUDA plugin: loaded,", msg[:60])
    print("wheel smoke test passed:", gpe.version_string())
""")


class WheelTest(unittest.TestCase):
    def test_installed_wheel_works_without_environment(self):
        tool = build_wheel.auditwheel()
        if tool is None:
            self.skipTest("auditwheel is not installed (bazelw installs it into .venv)")
        tmp = pathlib.Path(os.environ.get("TEST_TMPDIR") or tempfile.mkdtemp())
        dist = tmp / "dist"
        self.assertEqual(build_wheel.main(ARGS + [str(dist)]), 0)
        wheels = list(dist.glob("grouppe-*.whl"))
        self.assertEqual(len(wheels), 1, wheels)
        self.assertIn("manylinux", wheels[0].name)
        venv = tmp / "venv"
        base = getattr(sys, "_base_executable", sys.executable)
        made = subprocess.run([base, "-m", "venv", str(venv)], capture_output=True, text=True)
        if made.returncode != 0:
            self.skipTest("cannot make a virtual environment: " + made.stderr[-300:])
        py = venv / "bin" / "python"
        purelib = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                 capture_output=True, text=True, check=True).stdout.strip()
        # The project environment's packages (NumPy, and PyTorch through its own .pth).
        project = [p for p in site.getsitepackages() if pathlib.Path(p, "numpy").is_dir()]
        self.assertTrue(project, "the test's interpreter has no NumPy")
        pathlib.Path(purelib, "project_packages.pth").write_text(
            "import site; site.addsitedir(%r)\n" % project[0])
        subprocess.run([str(py), "-m", "pip", "install", "--quiet", "--no-deps", "--no-index",
                        str(wheels[0])], check=True)
        work = tmp / "elsewhere"  # not the source tree: only the installed package
        work.mkdir(exist_ok=True)
        run = subprocess.run([str(py), "-c", SMOKE], cwd=work, capture_output=True, text=True,
                             env={"PATH": "/usr/bin:/bin", "HOME": str(tmp)})
        self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
        self.assertIn("wheel smoke test passed", run.stdout)
        print(run.stdout)
        shutil.rmtree(venv, ignore_errors=True)


ARGS = []

if __name__ == "__main__":
    ARGS = sys.argv[1:]
    unittest.main(argv=sys.argv[:1])
