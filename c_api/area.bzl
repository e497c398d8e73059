"""The rule the C ABI's per-area implementation libraries share (c_api/BUILD)."""

load("//build_defs:copts.bzl", "GPE_COPTS")

# libgpe.so exports only what GPE_API marks (and c_api/gpe.lds lets through).
C_API_COPTS = GPE_COPTS + [
    "-fvisibility=hidden",
    "-fvisibility-inlines-hidden",
]

def gpe_c_api_area(name, srcs, hdrs = [], deps = [], linkopts = []):
    """One area of the ABI's implementation (src/<area>/), private to c_api.

    alwayslink: nothing in libgpe.so references an area's entry points, and they must
    still be linked in. linkstatic: their symbols are hidden, so the areas are linked into
    one image (libgpe.so, a test), never each into a shared library the others call into.
    Every area sees the public headers (:headers).
    """
    native.cc_library(
        name = name,
        srcs = srcs,
        hdrs = hdrs,
        copts = C_API_COPTS,
        linkopts = linkopts,
        linkstatic = True,
        alwayslink = True,
        deps = deps if ":headers" in deps else deps + [":headers"],
    )
