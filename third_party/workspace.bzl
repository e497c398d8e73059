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

def gpe_dependencies(grouppe_path = "."):
    """Declares every repository GroupPE needs.

    Args:
      grouppe_path: where this repository sits, relative to the main workspace root
        (".", or for a consumer the path given to its local_repository).
    """
    # Offline stand-ins that Bazel 4.2.3 itself asks for.
    _maybe(
        native.local_repository,
        name = "rules_cc",
        path = grouppe_path + "/third_party/local_rules/rules_cc",
    )
    _maybe(
        native.local_repository,
        name = "rules_java",
        path = grouppe_path + "/third_party/local_rules/rules_java",
    )
    _maybe(
        native.local_repository,
        name = "remote_coverage_tools",
        path = grouppe_path + "/third_party/local_rules/remote_coverage_tools",
    )
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
