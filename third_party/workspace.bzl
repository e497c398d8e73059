"""Declares GroupPE's external repositories, all of them local (no network).

A monorepo that depends on GroupPE calls gpe_dependencies() from its WORKSPACE; any
repository it already declares (for instance its own @com_google_absl) is kept, since
the labels used here follow the upstream projects' own labels.
"""

load("//third_party:system_libs.bzl", "system_library_repository")
load("//third_party:cuda_configure.bzl", "cuda_configure")
load("//third_party:python_configure.bzl", "python_configure")

def _maybe(rule, name, **kwargs):
    if not native.existing_rule(name):
        rule(name = name, **kwargs)

def _local_rules_impl(ctx):
    # third_party/local_rules/<name> of the repository holding this file, found from a
    # label (so wherever GroupPE comes from: the main workspace, local_repository,
    # http_archive or git_repository), its entries linked into the new repository.
    src = ctx.path(ctx.attr._anchor).dirname.get_child("local_rules").get_child(ctx.attr.dir)
    for entry in src.readdir():
        ctx.symlink(entry, entry.basename)

_local_rules = repository_rule(
    implementation = _local_rules_impl,
    attrs = {
        "dir": attr.string(mandatory = True),
        "_anchor": attr.label(default = Label("//third_party:workspace.bzl")),
    },
    local = True,
)

def gpe_dependencies(grouppe_path = "."):
    """Declares every repository GroupPE needs.

    Args:
      grouppe_path: no longer used (kept so that existing calls work): the stand-ins below
        are found from this file's own label, wherever GroupPE is fetched from.
    """
    # Offline stand-ins that Bazel 4.2.3 itself asks for (a path relative to the main
    # workspace named them before, which no value could give for an http_archive).
    _maybe(_local_rules, name = "rules_cc", dir = "rules_cc")
    _maybe(_local_rules, name = "rules_java", dir = "rules_java")
    _maybe(_local_rules, name = "remote_coverage_tools", dir = "remote_coverage_tools")
    _maybe(
        native.local_repository,
        name = "platforms",
        path = "/usr/share/bazel/tools/platforms",
    )
    _maybe(
        native.local_repository,
        name = "bazel_skylib",
        path = "/usr/share/bazel/tools/skylib",
    )

    # Eigen 3.4 (libeigen3-dev): header-only.
    _maybe(
        native.new_local_repository,
        name = "eigen",
        path = "/usr/include/eigen3",
        build_file = str(Label("//third_party:eigen.BUILD")),
    )

    # Abseil (libabsl-dev), GoogleTest (libgtest-dev, libgmock-dev), Google Benchmark
    # (libbenchmark-dev), DLPack (libdlpack-dev), Highway (libhwy-dev): headers under
    # /usr/include, libraries found through pkg-config or the default linker path.
    _maybe(
        system_library_repository,
        name = "com_google_absl",
        build_file = Label("//third_party:absl.BUILD"),
        pkg_config_modules = [
            "absl_status",
            "absl_statusor",
            "absl_strings",
            "absl_str_format",
            "absl_span",
            "absl_synchronization",
            "absl_time",
        ],
        header_dirs = ["absl"],
        packages = {
            "absl/base": ["core_headers", "base"],
            "absl/functional": ["function_ref"],
            "absl/status": ["status", "statusor"],
            "absl/strings": ["strings", "str_format"],
            "absl/types": ["span", "optional", "variant"],
            "absl/synchronization": ["synchronization"],
            "absl/time": ["time"],
        },
        packages_target = "absl",
    )
    _maybe(
        system_library_repository,
        name = "com_google_googletest",
        build_file = Label("//third_party:googletest.BUILD"),
        header_dirs = ["gtest", "gmock"],
    )
    _maybe(
        system_library_repository,
        name = "com_github_google_benchmark",
        build_file = Label("//third_party:benchmark.BUILD"),
        header_dirs = ["benchmark"],
    )
    _maybe(
        system_library_repository,
        name = "dlpack",
        build_file = Label("//third_party:dlpack.BUILD"),
        header_dirs = ["dlpack"],
    )
    _maybe(
        system_library_repository,
        name = "highway",
        build_file = Label("//third_party:highway.BUILD"),
        pkg_config_modules = ["libhwy"],
        header_dirs = ["hwy"],
    )

    # libpng (libpng-dev): reading and writing images for the INR tools.
    _maybe(
        system_library_repository,
        name = "libpng",
        build_file = Label("//third_party:libpng.BUILD"),
        pkg_config_modules = ["libpng"],
        header_dirs = ["libpng16"],
    )

    # libjpeg-turbo (libjpeg62-turbo-dev): JPEG input for the INR tools. Its headers sit
    # directly in /usr/include (jconfig.h in the multiarch directory), the compiler's
    # builtin include path, so no directory is linked in.
    _maybe(
        system_library_repository,
        name = "libjpeg",
        build_file = Label("//third_party:libjpeg.BUILD"),
        pkg_config_modules = ["libjpeg"],
        header_dirs = [],
    )

    # OpenBLAS (libopenblas-dev, pthreads build): BLAS-3 and LAPACK for the INR solvers,
    # with the CPU kernel chosen at run time (DYNAMIC_ARCH), so one binary is fast on
    # AVX2 and AVX-512 machines.
    _maybe(
        system_library_repository,
        name = "openblas",
        build_file = Label("//third_party:openblas.BUILD"),
        pkg_config_modules = ["openblas"],
        header_dirs = ["x86_64-linux-gnu/openblas-pthread"],
    )

    # The CUDA toolkit, when nvcc exists; otherwise CUDA targets become incompatible.
    _maybe(cuda_configure, name = "local_cuda")

    # The Python interpreter the py_tests use (project-local venv made by ./bazelw).
    _maybe(python_configure, name = "gpe_python")
