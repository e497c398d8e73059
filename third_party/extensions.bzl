"""bzlmod extension for GroupPE's machine-local repositories (Bazel 7+ only)."""

load("//third_party:cuda_configure.bzl", "cuda_configure")
load("//third_party:python_configure.bzl", "python_configure")

def _gpe_local_impl(_ctx):
    cuda_configure(name = "local_cuda")
    python_configure(name = "gpe_python")

gpe_local = module_extension(implementation = _gpe_local_impl)
