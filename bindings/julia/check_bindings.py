"""Keeps the Julia module's ccalls true to gpe.h without a julia binary.

Parses every `ccall((:name, libgpe), Ret, (Args...), ...)` of GroupPE.jl and checks:
  - the name is in exported_symbols.txt and has a prototype in gpe.h;
  - the argument count equals the prototype's parameter count;
  - each argument and the return type agree in kind with the C type (a pointer for a
    pointer; Int64 for int64_t; Int32 / Cint for int32_t / int / gpe_status; Float64 for
    double; UInt64 for uint64_t), and pointees agree where Julia names them (Ref{Float64}
    for double*, Ref{DLTensor} for DLTensor*, Ref{SomeOptions} for a gpe_*_options*);
  - every Julia option struct (first field struct_size) passed by Ref{...} matches the C
    struct it is passed as: the same field names in order, with matching types, for as
    many fields as the Julia struct has (a prefix: struct_size tells the library which).
Usage: check_bindings.py GroupPE.jl gpe.h exported_symbols.txt
"""
import re
import sys


def split_top(s):
    """Splits s at commas outside (), {} and []."""
    parts, depth, cur = [], 0, []
    for ch in s:
        if ch in "({[":
            depth += 1
        elif ch in ")}]":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    if "".join(cur).strip():
        parts.append("".join(cur).strip())
    return parts


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


def strip_c_comments(s):
    s = re.sub(r"/\*.*?\*/", " ", s, flags=re.S)
    return re.sub(r"//[^\n]*", " ", s)


def parse_header(text):
    text = strip_c_comments(text)
    protos = {}
    for m in re.finditer(r"GPE_API\s+(?:GPE_NODISCARD\s+)?([^;(]*?)\b(gpe_\w+)\s*\(([^;]*?)\)\s*;", text, flags=re.S):
        ret = " ".join(m.group(1).split())
        params = [" ".join(p.split()) for p in split_top(m.group(3))]
        if params == ["void"]:
            params = []
        protos[m.group(2)] = (ret, params)
    for m in re.finditer(r"typedef\s+[^;{}()]*?\(\s*\*\s*(\w+)\s*\)\s*\(", text):
        FUNCTION_POINTERS.add(m.group(1))
    structs = {}
    for m in re.finditer(r"typedef\s+struct\s+(gpe_\w+)\s*\{(.*?)\}\s*(\w+)\s*;", text, flags=re.S):
        fields = []
        for decl in m.group(2).split(";"):
            decl = " ".join(decl.split())
            if not decl:
                continue
            # "double lo, hi" declares two fields of one type.
            head, *more = [d.strip() for d in decl.split(",")]
            hm = re.match(r"(.*?)([\w]+)$", head)
            ctype = hm.group(1).strip()
            names = [hm.group(2)] + more
            for n in names:
                star = n.count("*")
                fields.append((n.strip("* "), (ctype + " " + "*" * star).strip()))
        structs[m.group(3)] = fields
    return protos, structs


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
    "Int64": "int64", "Clonglong": "int64", "Int32": "int32", "Cint": "int32",
    "Float64": "double", "Cdouble": "double", "UInt64": "uint64", "Culonglong": "uint64",
    "UInt32": "uint32", "Cuint": "uint32", "UInt8": "uint8", "UInt16": "uint16", "Cvoid": "void",
}
C_SCALARS = {
    "int64_t": "int64", "int32_t": "int32", "int": "int32", "gpe_status": "int32",
    "double": "double", "uint64_t": "uint64", "uint32_t": "uint32", "size_t": "uint64",
    "uint8_t": "uint8", "uint16_t": "uint16", "void": "void",
}


# Function-pointer typedefs of gpe.h (gpe_progress_callback): pointers (Ptr{Cvoid} in Julia).
FUNCTION_POINTERS = set()


def c_kind(ctype):
    """('ptr', pointee) or ('scalar', kind) of a C parameter or field type (name removed)."""
    t = ctype.replace("const", " ")
    if " ".join(t.split()) in FUNCTION_POINTERS:
        return ("ptr", "void")
    stars = t.count("*")
    base = " ".join(t.replace("*", " ").split())
    if stars:
        pointee = base if stars == 1 else "ptr"
        return ("ptr", pointee)
    return ("scalar", C_SCALARS.get(base, base))


def c_param_type(param):
    """The type part of a C parameter declaration ('const DLTensor* x' -> 'const DLTensor*')."""
    m = re.match(r"(.*?[\s*])(\w+)$", param)
    return m.group(1).strip() if m else param


def julia_kind(jt):
    jt = jt.strip()
    if jt == "Cstring":
        return ("ptr", "char")
    m = re.match(r"(Ptr|Ref)\{(.*)\}$", jt)
    if m:
        inner = m.group(2).strip()
        if re.match(r"(Ptr|Ref)\{", inner):
            return ("ptr", "ptr")
        return ("ptr", inner)
    return ("scalar", SCALARS.get(jt, jt))


def pointee_ok(jinner, cpointee, jstructs, cstructs, errors, where):
    """Does Julia's pointee name agree with C's? Unknown or opaque ones are accepted."""
    if jinner in ("Cvoid", "Nothing", "ptr") or cpointee in ("void", "ptr"):
        return True
    if jinner in SCALARS:
        return SCALARS[jinner] == C_SCALARS.get(cpointee, cpointee)
    if jinner == "DLTensor":
        return cpointee == "DLTensor"
    if jinner in jstructs:
        if cpointee not in cstructs:
            return False
        check_struct(jinner, jstructs[jinner], cpointee, cstructs[cpointee], errors, where)
        return True
    return True


def check_struct(jname, jfields, cname, cfields, errors, where):
    if len(jfields) > len(cfields):
        errors.append("%s: Julia struct %s has %d fields, C %s only %d" % (where, jname, len(jfields), cname, len(cfields)))
        return
    for (jn, jt), (cn, ct) in zip(jfields, cfields):
        if jn != cn:
            errors.append("%s: %s.%s is %s.%s in gpe.h (field order)" % (where, jname, jn, cname, cn))
            return
        jk, ck = julia_kind(jt), c_kind(ct)
        if jk[0] != ck[0] or (jk[0] == "scalar" and jk[1] != ck[1]):
            errors.append("%s: %s.%s is %s; gpe.h has %s" % (where, jname, jn, jt, ct))
        elif jk[0] == "ptr" and jk[1] in SCALARS and not pointee_ok(jk[1], ck[1], {}, {}, errors, where):
            errors.append("%s: %s.%s is %s; gpe.h has %s" % (where, jname, jn, jt, ct))


def main(argv):
    jl_path, header_path, symbols_path = argv[1:4]
    jl = open(jl_path, encoding="utf-8").read()
    protos, cstructs = parse_header(open(header_path, encoding="utf-8").read())
    exported = {l.strip() for l in open(symbols_path) if l.strip() and not l.startswith("#")}
    jstructs = parse_julia_structs(jl)
    calls = parse_ccalls(jl)
    errors = []
    # Every ccall names its function literally (ccall needs a constant; the checks need it).
    for m in re.finditer(r"ccall\(", jl):
        if not re.match(r"ccall\(\(:\w+,\s*libgpe\)", jl[m.start():]):
            line = jl[: m.start()].count("\n") + 1
            if not jl[max(0, m.start() - 1)] == "`":  # prose in a docstring
                errors.append("GroupPE.jl:%d: a ccall without a literal (:name, libgpe)" % line)
    if len(calls) < 10:
        errors.append("only %d ccalls found in %s: the parser is out of date" % (len(calls), jl_path))
    if len(protos) < 50:
        errors.append("only %d prototypes parsed from %s" % (len(protos), header_path))
    for name, ret, args, line in calls:
        where = "GroupPE.jl:%d %s" % (line, name)
        if name not in exported:
            errors.append("%s: not in exported_symbols.txt" % where)
        if name not in protos:
            errors.append("%s: no prototype in gpe.h" % where)
            continue
        cret, cparams = protos[name]
        if len(args) != len(cparams):
            errors.append("%s: %d argument types; gpe.h has %d parameters (%s)" % (where, len(args), len(cparams), ", ".join(cparams)))
            continue
        rk, crk = julia_kind(ret), c_kind(cret)
        if rk[0] != crk[0] or (rk[0] == "scalar" and rk[1] != crk[1]):
            errors.append("%s: returns %s; gpe.h returns %s" % (where, ret, cret))
        for i, (jt, cp) in enumerate(zip(args, cparams)):
            ct = c_param_type(cp)
            jk, ck = julia_kind(jt), c_kind(ct)
            if jk[0] != ck[0] or (jk[0] == "scalar" and jk[1] != ck[1]):
                errors.append("%s: argument %d is %s; gpe.h has %s" % (where, i + 1, jt, cp))
            elif jk[0] == "ptr" and not pointee_ok(jk[1], ck[1], jstructs, cstructs, errors, where):
                errors.append("%s: argument %d points to %s; gpe.h has %s" % (where, i + 1, jk[1], cp))
    for e in errors:
        print("ERROR:", e)
    print("%d ccalls of %d distinct entry points checked against %d prototypes: %s" % (
        len(calls), len({c[0] for c in calls}), len(protos), "FAILED" if errors else "OK"))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
