"""bzlmod extension for GroupPE's machine-local repositories (Bazel 7+ only)."""

load("//third_party:cuda_configure.bzl", "cuda_configure")
load("//third_party:python_configure.bzl", "python_configure")
load("//third_party:system_libs.bzl", "system_library_repository")

def _gpe_local_impl(_ctx):
    cuda_configure(name = "local_cuda")
    python_configure(name = "gpe_python")
    system_library_repository(
        name = "libpng",
        build_file = Label("//third_party:libpng.BUILD"),
        pkg_config_modules = ["libpng"],
        header_dirs = ["libpng16"],
    )
    system_library_repository(
        name = "libjpeg",
        build_file = Label("//third_party:libjpeg.BUILD"),
        pkg_config_modules = ["libjpeg"],
        header_dirs = [],
    )
    # The system's OpenBLAS, as the WORKSPACE uses (MODULE.bazel says why not the
    # registry's module).
    system_library_repository(
        name = "openblas",
        build_file = Label("//third_party:openblas.BUILD"),
        pkg_config_modules = ["openblas"],
        header_dirs = ["x86_64-linux-gnu/openblas-pthread"],
    )

gpe_local = module_extension(implementation = _gpe_local_impl)
