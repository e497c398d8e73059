"""libgpe.so finds its CUDA plugin beside itself (gpe/attention.h, "CUDA TENSORS"): with
libgpe.so and libgpe_cuda.so copied into one directory and GPE_CUDA_PLUGIN unset, an
attention call on (fake) CUDA tensors reaches the plugin, which reports that this machine
has no usable GPU; with the plugin removed from the directory the call names the missing
libgpe_cuda.so instead. Each case runs in a fresh interpreter (a loaded plugin stays
loaded). Needs no GPU and no PyTorch: the tensors' device addresses are never read.

Usage (Bazel passes both): cuda_plugin_test.py LIBGPE_SO LIBGPE_CUDA_SO
"""

import os
import shutil
import subprocess
import sys
import tempfile
import unittest

# Run in the child: a forward on bf16 [1, 8, 2, 64] tensors claiming CUDA device 0.
_CHILD = r"""
import ctypes, sys
from gpe import _ffi
lib = _ffi.load_library()
shape = (ctypes.c_int64 * 4)(1, 8, 2, 64)
def fake(address):
    t = _ffi.DLTensor()
    t.data = address
    t.device = _ffi.DLDevice(_ffi.KDL_CUDA, 0)
    t.ndim = 4
    t.dtype = _ffi.DLDataType(4, 16, 1)
    t.shape = shape
    return t
q, k, v, o = (fake(0x10000000 + i * 0x100000) for i in range(4))
opts = _ffi.AttentionOptions()
opts.struct_size = ctypes.sizeof(opts)
opts.rope_base = 10000.0
opts.rope_pairing = 1
status = lib.gpe_attention_forward(ctypes.byref(opts), ctypes.byref(q), ctypes.byref(k),
                                   ctypes.byref(v), ctypes.byref(o), None)
print(lib.gpe_status_name(status).decode())
print(lib.gpe_last_error_message().decode())
"""


class PluginDiscoveryTest(unittest.TestCase):
    libgpe = libcuda = None

    def run_child(self, directory):
        env = {k: v for k, v in os.environ.items() if k != "GPE_CUDA_PLUGIN"}
        env["GPE_LIBRARY"] = os.path.join(directory, "libgpe.so")
        env["PYTHONPATH"] = os.pathsep.join(sys.path)
        r = subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True,
                           text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        status, message = r.stdout.split("\n", 1)
        return status, message

    def test_plugin_beside_libgpe_is_found(self):
        with tempfile.TemporaryDirectory() as d:
            shutil.copy(self.libgpe, os.path.join(d, "libgpe.so"))
            shutil.copy(self.libcuda, os.path.join(d, "libgpe_cuda.so"))
            status, message = self.run_child(d)
        self.assertEqual(status, "GPE_ERROR_UNSUPPORTED", message)
        self.assertIn("no usable CUDA device", message)

    def test_missing_plugin_is_named(self):
        with tempfile.TemporaryDirectory() as d:
            shutil.copy(self.libgpe, os.path.join(d, "libgpe.so"))
            status, message = self.run_child(d)
        self.assertEqual(status, "GPE_ERROR_UNSUPPORTED", message)
        self.assertIn(os.path.join(d, "libgpe_cuda.so"), message)
        self.assertIn("GPE_CUDA_PLUGIN", message)


if __name__ == "__main__":
    PluginDiscoveryTest.libgpe, PluginDiscoveryTest.libcuda = sys.argv[1:3]
    unittest.main(argv=sys.argv[:1])
