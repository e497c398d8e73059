"""One static archive of a cc_library and everything it depends on that Bazel builds.

Bazel 4 has no rule for a self-contained static library (cc_static_library came in
Bazel 7.4): a cc_library's own archive holds only its own sources. cc_static_archive
walks the dependency's linking context, merges every static (PIC, as --force_pic builds
them) archive Bazel built for it into one with `ar` (an MRI script: no objects are
extracted, so equal object names in different packages stay apart), and writes beside it
the link flags of the system libraries the archive still needs (Abseil, Highway,
OpenBLAS, ... as the third_party rules name them: -l flags, in link order), which
install.sh puts into gpe.pc (Libs.private) and the CMake package.
"""

def _impl(ctx):
    cc_toolchain = ctx.attr._cc_toolchain[cc_common.CcToolchainInfo]
    archives = []
    flags = []
    seen = {}
    for dep in ctx.attr.deps:
        for linker_input in dep[CcInfo].linking_context.linker_inputs.to_list():
            for lib in linker_input.libraries:
                a = lib.pic_static_library or lib.static_library
                if a != None and a.path not in seen:
                    seen[a.path] = True
                    archives.append(a)
            for flag in linker_input.user_link_flags:
                if flag not in flags:
                    flags.append(flag)
    out = ctx.outputs.out
    script = ctx.actions.declare_file(ctx.label.name + ".mri")
    ctx.actions.write(
        script,
        "\n".join(["CREATE " + out.path] + ["ADDLIB " + a.path for a in archives] + ["SAVE", "END", ""]),
    )
    ctx.actions.run_shell(
        inputs = depset([script] + archives),
        tools = cc_toolchain.all_files,
        outputs = [out],
        command = "rm -f '{out}' && '{ar}' -M < '{script}'".format(
            out = out.path,
            ar = cc_toolchain.ar_executable,
            script = script.path,
        ),
        mnemonic = "StaticArchive",
        progress_message = "Merging %d archives into %s" % (len(archives), out.short_path),
    )
    ctx.actions.write(ctx.outputs.linkopts, " ".join(flags) + "\n")
    return [DefaultInfo(files = depset([out, ctx.outputs.linkopts]))]

cc_static_archive = rule(
    implementation = _impl,
    attrs = {
        "deps": attr.label_list(providers = [CcInfo]),
        "out": attr.output(mandatory = True),
        "linkopts": attr.output(mandatory = True),
        "_cc_toolchain": attr.label(default = "@bazel_tools//tools/cpp:current_cc_toolchain"),
    },
    toolchains = ["@bazel_tools//tools/cpp:toolchain_type"],
    doc = "Merges the static archives Bazel builds for deps into `out`; `linkopts` gets " +
          "the system libraries' link flags, space-separated.",
)
