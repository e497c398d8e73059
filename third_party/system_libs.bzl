"""A repository rule for libraries installed by Debian's -dev packages.

Headers live under /usr/include (a builtin include directory of the host compiler);
the rule links `header_dirs` into the repository so the headers are declared inputs,
and asks pkg-config for the link flags of `pkg_config_modules`, written into the
generated BUILD file as the `@<repo>//:LINKOPTS` substitution.
"""

def _system_library_repository_impl(ctx):
    for header_dir in ctx.attr.header_dirs:
        src = "/usr/include/" + header_dir
        if not ctx.path(src).exists:
            fail("GroupPE: %s is missing; run ./bazelw, which installs the Debian packages." % src)
        ctx.symlink(src, "include/" + header_dir)

    linkopts = []
    if ctx.attr.pkg_config_modules:
        result = ctx.execute(["pkg-config", "--libs"] + ctx.attr.pkg_config_modules)
        if result.return_code != 0:
            fail("GroupPE: pkg-config --libs %s failed: %s" % (
                " ".join(ctx.attr.pkg_config_modules),
                result.stderr,
            ))
        linkopts = result.stdout.strip().split(" ")
    ctx.template(
        "BUILD.bazel",
        ctx.attr.build_file,
        substitutions = {"%{LINKOPTS}": repr(linkopts)},
    )
    for package, targets in ctx.attr.packages.items():
        ctx.file(package + "/BUILD.bazel", "".join([
            "package(default_visibility = [\"//visibility:public\"])\n",
        ] + [
            "alias(name = \"%s\", actual = \"//:%s\")\n" % (t, ctx.attr.packages_target)
            for t in targets
        ]))
    ctx.file("WORKSPACE", "workspace(name = \"%s\")\n" % ctx.name)

system_library_repository = repository_rule(
    implementation = _system_library_repository_impl,
    attrs = {
        "build_file": attr.label(mandatory = True, allow_single_file = True),
        "header_dirs": attr.string_list(mandatory = True),
        "pkg_config_modules": attr.string_list(),
        # Sub-packages whose targets alias `packages_target`, mirroring upstream labels.
        "packages": attr.string_list_dict(),
        "packages_target": attr.string(),
    },
    local = True,
)
