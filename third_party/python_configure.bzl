"""Pins the Python interpreter that py_test targets run under.

./bazelw makes a project-local virtual environment (.venv, with NumPy) before Bazel
starts; this rule points a Python toolchain at it, falling back to python3 on PATH.
"""

def _python_configure_impl(ctx):
    root = ctx.path(Label("@//:WORKSPACE")).dirname
    interpreter = ctx.os.environ.get("GPE_PYTHON", "")
    if not interpreter:
        venv = root.get_child(".venv").get_child("bin").get_child("python3")
        if venv.exists:
            interpreter = str(venv)
    if not interpreter:
        found = ctx.which("python3")
        if found == None:
            fail("GroupPE: no python3 found; run ./bazelw, which sets up .venv.")
        interpreter = str(found)
    ctx.file("WORKSPACE", "workspace(name = \"%s\")\n" % ctx.name)
    ctx.file("BUILD.bazel", """
load("@bazel_tools//tools/python:toolchain.bzl", "py_runtime_pair")

package(default_visibility = ["//visibility:public"])

py_runtime(
    name = "py3_runtime",
    interpreter_path = "{interpreter}",
    python_version = "PY3",
)

py_runtime_pair(
    name = "runtime_pair",
    py3_runtime = ":py3_runtime",
)

toolchain(
    name = "python_toolchain",
    toolchain = ":runtime_pair",
    toolchain_type = "@bazel_tools//tools/python:toolchain_type",
)
""".format(interpreter = interpreter))

python_configure = repository_rule(
    implementation = _python_configure_impl,
    environ = ["GPE_PYTHON"],
    local = True,
)
