"""Keeps the Julia module's ccalls true to gpe.h without a julia binary.

Reads GroupPE.jl and every file it includes (each `include("path")` line, the path
relative to the including file, followed recursively; a missing file, or an include whose
path is not a string literal, is an error), parses every
`ccall((:name, libgpe), Ret, (Args...), ...)` of them and checks, against the header
model (bindings/header_model.py: gpe.h, the headers it includes, dlpack.h):
  - the name is in exported_symbols.txt and has a prototype in gpe.h;
  - the argument count equals the prototype's parameter count;
  - each argument and the return type agree in kind with the C type (a pointer for a
    pointer or a callback; Int64 for int64_t; Int32 / Cint for int32_t / int /
    gpe_status; Float64 for double; UInt64 for uint64_t), and pointees agree where Julia
    names them (Ref{Float64} for double*, Ref{DLTensor} for DLTensor*, Ref{SomeOptions}
    for a gpe_*_options*);
  - every Julia struct passed by Ref{...} (the option structs, DLTensor) matches the C
    struct it is passed as: the same field names in order, with matching types, for as
    many fields as the Julia struct has (a prefix: struct_size tells the library which);
    structs nested by value (DLTensor's DLDevice, DLDataType) likewise;
  - every exported symbol is called, or listed in UNDECLARED below with a reason.
Errors name the file (relative to GroupPE.jl's directory) and line.
Usage: check_bindings.py GroupPE.jl gpe.h dlpack.h exported_symbols.txt
"""
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import header_model  # noqa: E402
from header_model import split_top  # noqa: E402

# Exported symbols the Julia module deliberately does not call: {name: why}.
UNDECLARED = {
    # 0.8.0: a C callback interface for engines that own their threads (C/C++ callers
    # install their pool directly); not wrapped in this binding yet.
    "gpe_set_thread_pool": "the application's thread pool: C/C++ engines only, not wrapped yet",
    "gpe_thread_pool_num_threads": "pairs with gpe_set_thread_pool; not wrapped yet",
}


def matching(s, i):
    """Index of the bracket closing the one at s[i]."""
    pairs = {"(": ")", "{": "}", "[": "]"}
    stack = []
    for j in range(i, len(s)):
        if s[j] in pairs:
            stack.append(pairs[s[j]])
        elif stack and s[j] == stack[-1]:
            stack.pop()
            if not stack:
                return j
    raise ValueError("unbalanced brackets at %d" % i)


def parse_ccalls(text):
    calls = []
    for m in re.finditer(r"ccall\(\(:(\w+),\s*libgpe\)\s*,", text):
        rest = text[m.end():]
        # Return type: up to the next top-level comma.
        depth = 0
        for k, ch in enumerate(rest):
            if ch in "({[":
                depth += 1
            elif ch in ")}]":
                depth -= 1
            elif ch == "," and depth == 0:
                break
        ret = rest[:k].strip()
        after = rest[k + 1:]
        p = after.index("(")
        q = matching(after, p)
        args = split_top(after[p + 1:q])
        line = text[: m.start()].count("\n") + 1
        calls.append((m.group(1), ret, args, line))
    return calls


def parse_julia_structs(text):
    structs = {}
    for m in re.finditer(r"^(?:mutable\s+)?struct\s+(\w+)\s*\n(.*?)^end", text, flags=re.S | re.M):
        fields = []
        for line in m.group(2).splitlines():
            fm = re.match(r"\s*(\w+)::(.+?)\s*$", line)
            if fm:
                fields.append((fm.group(1), fm.group(2)))
        structs[m.group(1)] = fields
    return structs


SCALARS = {
    "Int64": "int64_t", "Clonglong": "int64_t", "Int32": "int32_t", "Cint": "int32_t",
    "Float64": "double", "Cdouble": "double", "Float32": "float", "Cfloat": "float",
    "UInt64": "uint64_t", "Culonglong": "uint64_t", "Csize_t": "uint64_t",
    "UInt32": "uint32_t", "Cuint": "uint32_t", "UInt8": "uint8_t", "UInt16": "uint16_t",
    "Int8": "int8_t", "Int16": "int16_t", "Cchar": "char", "Cvoid": "void",
}


def c_kind(ctype):
    """('ptr', pointee CType) or ('scalar', name) of a C type: a callback is a pointer
    (Ptr{Cvoid} in Julia); a struct passed by value is ('scalar', its name)."""
    if ctype.kind == "ptr":
        return ("ptr", ctype.pointee)
    if ctype.kind == "fnptr":
        return ("ptr", header_model.VOID)
    if ctype.kind == "void":
        return ("scalar", "void")
    return ("scalar", ctype.name)


def julia_kind(jt):
    jt = jt.strip()
    if jt == "Cstring":
        return ("ptr", "Cchar")
    m = re.match(r"(Ptr|Ref)\{(.*)\}$", jt)
    if m:
        inner = m.group(2).strip()
        if re.match(r"(Ptr|Ref)\{", inner):
            return ("ptr", "ptr")
        return ("ptr", inner)
    return ("scalar", SCALARS.get(jt, jt))


def kinds_agree(jk, ck):
    return jk[0] == ck[0] and (jk[0] == "ptr" or jk[1] == ck[1])


def pointee_ok(jinner, cpointee, jstructs, model, errors, where, seen):
    """Does Julia's pointee name agree with C's? Unknown or opaque ones are accepted (an
    opaque handle is Ptr{Cvoid}); a Julia struct is checked against the C struct."""
    if jinner in ("Cvoid", "Nothing", "ptr") or cpointee.kind in ("void", "ptr", "opaque"):
        return True
    if jinner in SCALARS:
        return cpointee.kind == "scalar" and SCALARS[jinner] == cpointee.name
    if jinner in jstructs:
        if cpointee.kind != "record":
            return False
        check_struct(jinner, jstructs, cpointee.name, model, errors, where, seen)
        return True
    return True


def check_struct(jname, jstructs, cname, model, errors, where, seen):
    """The Julia struct's fields are a prefix of the C struct's (struct_size tells the
    library which), by name and kind; nested structs (DLTensor's DLDevice) likewise.
    seen: the (Julia, C) pairs already checked (each is reported once, where first met)."""
    if (jname, cname) in seen:
        return
    seen.add((jname, cname))
    jfields, cfields = jstructs[jname], model.records[cname]
    if len(jfields) > len(cfields):
        errors.append("%s: Julia struct %s has %d fields, C %s only %d"
                      % (where, jname, len(jfields), cname, len(cfields)))
        return
    for (jn, jt), cf in zip(jfields, cfields):
        if jn != cf.name:
            errors.append("%s: %s.%s is %s.%s in gpe.h (field order)"
                          % (where, jname, jn, cname, cf.name))
            return
        jk, ck = julia_kind(jt), c_kind(cf.type)
        if not kinds_agree(jk, ck):
            errors.append("%s: %s.%s is %s; gpe.h has %s" % (where, jname, jn, jt, cf.type))
        elif jk[0] == "ptr" and jk[1] in SCALARS and not pointee_ok(
                jk[1], ck[1], {}, model, errors, where, seen):
            errors.append("%s: %s.%s is %s; gpe.h has %s" % (where, jname, jn, jt, cf.type))
        elif jk[0] == "scalar" and cf.type.kind == "record" and jt.strip() in jstructs:
            check_struct(jt.strip(), jstructs, cf.type.name, model, errors, where, seen)


def _docstring_spans(text):
    """(start, end) of each triple-quoted string: prose, whatever it shows."""
    return [(m.start(), m.end()) for m in re.finditer(r'"""(?:.|\n)*?"""', text)]


def read_module(path):
    """The Julia module file and every file it includes, in include order, as [(name,
    text)] with names relative to the module file's directory, and the errors met: an
    `include(...)` line (outside docstrings) whose argument is not a string literal, or
    that names no file. Paths are relative to the including file, as Julia resolves
    them; a file included twice is read once."""
    top = os.path.dirname(path) or "."
    sources, errors, done = [], [], set()

    def visit(p):
        name = os.path.relpath(p, top)
        key = os.path.normpath(p)
        if key in done:
            return
        done.add(key)
        text = _read(p)
        sources.append((name.replace(os.sep, "/"), text))
        spans = _docstring_spans(text)
        for m in re.finditer(r"^[ \t]*include\((.*)\)[ \t]*(?:#.*)?$", text, flags=re.M):
            if any(a <= m.start() < b for a, b in spans):
                continue
            line = text[: m.start()].count("\n") + 1
            lit = re.match(r'^"([^"\\$]+)"$', m.group(1).strip())
            if not lit:
                errors.append("%s:%d: include(%s) without a literal path: the check cannot "
                              "follow it" % (name, line, m.group(1).strip()))
                continue
            target = os.path.join(os.path.dirname(p), lit.group(1))
            if not os.path.isfile(target):
                errors.append('%s:%d: include("%s"): no such file (%s)'
                              % (name, line, lit.group(1), target))
                continue
            visit(target)

    visit(path)
    return sources, errors


def check(sources, model, exported, undeclared=None):
    """The errors of the Julia module against the header model, and its ccalls as (name,
    ret, args, line, file). sources: [(file name, text)], the module file first (as
    read_module gives them), or one text, named GroupPE.jl. The module's structs are
    known in every file (Julia includes them into one module)."""
    if isinstance(sources, str):
        sources = [("GroupPE.jl", sources)]
    jstructs = {}
    for _, text in sources:
        jstructs.update(parse_julia_structs(text))
    calls = [c + (fname,) for fname, text in sources for c in parse_ccalls(text)]
    protos = model.functions
    errors = []
    seen = set()
    # Every ccall names its function literally (ccall needs a constant; the checks need it).
    for fname, jl in sources:
        for m in re.finditer(r"ccall\(", jl):
            if not re.match(r"ccall\(\(:\w+,\s*libgpe\)", jl[m.start():]):
                line = jl[: m.start()].count("\n") + 1
                if not jl[max(0, m.start() - 1)] == "`":  # prose in a docstring
                    errors.append("%s:%d: a ccall without a literal (:name, libgpe)"
                                  % (fname, line))
    for name, ret, args, line, fname in calls:
        where = "%s:%d %s" % (fname, line, name)
        if name not in exported:
            errors.append("%s: not in exported_symbols.txt" % where)
        if name not in protos:
            errors.append("%s: no prototype in gpe.h" % where)
            continue
        fn = protos[name]
        if len(args) != len(fn.params):
            errors.append("%s: %d argument types; gpe.h has %d parameters (%s)" % (
                where, len(args), len(fn.params), ", ".join(map(repr, fn.params))))
            continue
        if not kinds_agree(julia_kind(ret), c_kind(fn.ret)):
            errors.append("%s: returns %s; gpe.h returns %s" % (where, ret, fn.ret))
        for i, (jt, cp) in enumerate(zip(args, fn.params)):
            jk, ck = julia_kind(jt), c_kind(cp.type)
            if not kinds_agree(jk, ck):
                errors.append("%s: argument %d is %s; gpe.h has %r" % (where, i + 1, jt, cp))
            elif jk[0] == "ptr" and not pointee_ok(jk[1], ck[1], jstructs, model, errors, where,
                                                   seen):
                errors.append("%s: argument %d points to %s; gpe.h has %r"
                              % (where, i + 1, jk[1], cp))
    errors += header_model.coverage_errors(
        sources[0][0], {c[0] for c in calls}, exported,
        UNDECLARED if undeclared is None else undeclared)
    return errors, calls


def _read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def main(argv):
    if len(argv) != 5:
        print(__doc__)
        return 2
    jl_path, header_path, dlpack, symbols_path = argv[1:5]
    sources, errors = read_module(jl_path)
    model = header_model.load(header_path, [dlpack])
    exported = header_model.read_symbols(symbols_path)
    check_errors, calls = check(sources, model, exported)
    errors += check_errors
    if len(calls) < 10:
        errors.append("only %d ccalls found in %s and the files it includes: the parser is "
                      "out of date" % (len(calls), jl_path))
    if len(model.functions) < 50:
        errors.append("only %d prototypes parsed from %s" % (len(model.functions), header_path))
    for e in errors:
        print("ERROR:", e)
    print("%d ccalls of %d distinct entry points in %d Julia file%s checked against %d "
          "prototypes of %s: %s" % (
        len(calls), len({c[0] for c in calls}), len(sources), "" if len(sources) == 1 else "s",
        len(model.functions),
        ", ".join(os.path.basename(h) for h in model.headers), "FAILED" if errors else "OK"))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
