"""cuda_library: compiles .cu files with nvcc and links them into ordinary cc targets.

Each .cu source becomes one position-independent object built for sm_80 and sm_90,
plus compute_90 PTX so newer GPUs can JIT it. The cc_library that wraps the objects
links cudart. When the toolkit is absent (see third_party/cuda_configure.bzl) every
target made here is incompatible, so `bazel test //...` skips it and its dependants.
CUDA sources must not include Abseil: the GPU machines build them without it.
"""

load("@local_cuda//:defs.bzl", "CUDA_AVAILABLE", "NVCC")
load("//build_defs:copts.bzl", "GPE_COPTS")

CUDA_ARCH_FLAGS = [
    "-gencode=arch=compute_80,code=sm_80",
    "-gencode=arch=compute_90,code=sm_90",
    "-gencode=arch=compute_90,code=compute_90",
]

NVCC_FLAGS = [
    "-std=c++17",
    "-O3",
    "--expt-relaxed-constexpr",
    "-Xcompiler=-fPIC",
    "-Xcompiler=" + ",".join([c for c in GPE_COPTS if c != "-Werror"]),
    "--Werror=all-warnings",
]

def cuda_library(name, srcs, hdrs = [], cuda_hdrs = [], deps = [], nvcc_flags = [], tags = [], visibility = None, **kwargs):
    """A cc_library whose sources are CUDA files compiled by nvcc.

    Args:
      name: the cc_library's name.
      srcs: .cu files, one object each.
      hdrs: public headers (plain C++, usable without CUDA headers).
      cuda_hdrs: further headers the .cu files include (not exported).
      deps: cc dependencies of the wrapper library.
      nvcc_flags: extra nvcc flags.
      tags: extra tags; "cuda" is always added (sanitizer runs filter it out).
      visibility: as for cc_library.
      **kwargs: passed to the cc_library.
    """
    compat = [] if CUDA_AVAILABLE else ["@platforms//:incompatible"]
    objs = []
    for src in srcs:
        stem = src.rsplit("/", 1)[-1].rsplit(".", 1)[0]
        obj = "_%s_cuda/%s.pic.o" % (name, stem)
        native.genrule(
            name = "_%s_%s_nvcc" % (name, stem),
            srcs = [src] + hdrs + cuda_hdrs,
            outs = [obj],
            cmd = " ".join([NVCC] + NVCC_FLAGS + CUDA_ARCH_FLAGS + nvcc_flags + [
                "-I.",
                "-I$(GENDIR)",
                "-c",
                "$(location %s)" % src,
                "-o",
                "$@",
            ]),
            tags = tags + ["cuda"],
            target_compatible_with = compat,
            visibility = ["//visibility:private"],
        )
        objs.append(obj)
    native.cc_library(
        name = name,
        srcs = objs,
        hdrs = hdrs,
        deps = deps + ["@local_cuda//:cudart"],
        tags = tags + ["cuda"],
        target_compatible_with = compat,
        visibility = visibility,
        **kwargs
    )
