"""Keeps the Rust crate's declarations (src/ffi.rs) true to gpe.h without a Rust build.

Reads ffi.rs's `extern "C" { ... }` blocks, its #[repr(C)] structs and its `pub type`
aliases, and checks against the header model (bindings/header_model.py: gpe.h, the
headers it includes, dlpack.h):
  - every declared function has a prototype in gpe.h and is exported;
  - the argument count, each argument type and the return type agree: i32 / c_int for
    int32_t, f64 for double, u64 for uint64_t (usize too), *const T for const T* and
    *mut T for T* (constness checked), *const c_char for const char*, a #[repr(C)]
    struct of the same name for a struct, a zero-sized #[repr(C)] struct of the same
    name for an opaque handle, Option<unsafe extern "C" fn(..)> for a callback typedef
    (a C function pointer may be NULL), no `->` for void;
  - every #[repr(C)] struct matches the C struct of its name: all the fields, by name
    (r#type for type), in order, with agreeing types; a zero-sized one is an opaque
    handle of gpe.h;
  - every exported symbol is declared, or listed in UNDECLARED below with a reason.
Usage: check_bindings.py ffi.rs gpe.h dlpack.h exported_symbols.txt
"""
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import header_model  # noqa: E402

# Exported symbols the crate deliberately does not declare: {name: why}.
UNDECLARED = {
    # 0.8.0: a C callback interface for engines that own their threads (C/C++ callers
    # install their pool directly); not wrapped in this binding yet.
    "gpe_set_thread_pool": "the application's thread pool: C/C++ engines only, not wrapped yet",
    "gpe_thread_pool_num_threads": "pairs with gpe_set_thread_pool; not wrapped yet",
}

# Rust primitive and std::os::raw / core::ffi names -> gpe.h's fixed-width names (LP64).
PRIMITIVES = {
    "i8": "int8_t", "u8": "uint8_t", "i16": "int16_t", "u16": "uint16_t", "i32": "int32_t",
    "u32": "uint32_t", "i64": "int64_t", "u64": "uint64_t", "isize": "int64_t",
    "usize": "uint64_t", "f32": "float", "f64": "double", "bool": "bool",
    "c_char": "char", "c_schar": "int8_t", "c_uchar": "uint8_t", "c_short": "int16_t",
    "c_ushort": "uint16_t", "c_int": "int32_t", "c_uint": "uint32_t", "c_long": "int64_t",
    "c_ulong": "uint64_t", "c_longlong": "int64_t", "c_ulonglong": "uint64_t",
    "c_float": "float", "c_double": "double",
}


class RustType:
    """kind: "prim" (name: a C fixed-width name), "void" (c_void, ()), "ptr" (const,
    inner), "named" (name: a struct or alias of ffi.rs), "fn" (ret, params, nullable),
    "other" (text)."""

    def __init__(self, kind, name="", inner=None, const=False, ret=None, params=(),
                 nullable=False, text=""):
        self.kind, self.name, self.inner, self.const = kind, name, inner, const
        self.ret, self.params, self.nullable, self.text = ret, list(params), nullable, text

    def __str__(self):
        return self.text


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def parse_type(text):
    t = " ".join(text.split())
    if t in ("", "()"):
        return RustType("void", text=t or "()")
    m = re.match(r"Option\s*<\s*(.*)>$", t)
    if m:
        inner = parse_type(m.group(1))
        if inner.kind == "fn":
            inner.nullable, inner.text = True, t
            return inner
        return RustType("other", text=t)
    m = re.match(r'(?:unsafe\s+)?extern\s+"C"\s+fn\s*\((.*)\)\s*(?:->\s*(.*))?$', t)
    if m:
        params = [parse_type(p.split(":", 1)[1] if ":" in p else p)
                  for p in header_model.split_top(m.group(1))]
        return RustType("fn", ret=parse_type(m.group(2) or ""), params=params, text=t)
    m = re.match(r"\*\s*(const|mut)\s+(.*)$", t)
    if m:
        return RustType("ptr", inner=parse_type(m.group(2)), const=m.group(1) == "const", text=t)
    name = t.split("::")[-1].strip()
    if name == "c_void":
        return RustType("void", text=t)
    if name in PRIMITIVES:
        return RustType("prim", PRIMITIVES[name], text=t)
    if re.match(r"\w+$", name):
        return RustType("named", name, text=t)
    return RustType("other", text=t)


def _params(text):
    out = []
    for p in header_model.split_top(text):
        p = re.sub(r"#\[[^\]]*\]", "", p).strip()
        name, _, ty = p.partition(":")
        out.append((name.strip(), parse_type(ty)))
    return out


class Crate:
    """The FFI declarations of one Rust source file."""

    def __init__(self, text):
        text = strip_comments(text)
        self.aliases = {m.group(1): parse_type(m.group(2))
                        for m in re.finditer(r"\bpub\s+type\s+(\w+)\s*=\s*([^;]*);", text)}
        self.structs, self.opaque, self.plain_structs = {}, set(), set()
        for m in re.finditer(r"((?:#\[[^\]]*\]\s*)*)pub\s+struct\s+(\w+)\s*\{([^{}]*)\}", text):
            attrs, name, body = m.groups()
            if not re.search(r"#\[repr\(C\)\]", attrs):
                self.plain_structs.add(name)
                continue
            fields = []
            for f in header_model.split_top(body):
                f = re.sub(r"#\[[^\]]*\]", "", f).strip()
                fm = re.match(r"(?:pub(?:\([^)]*\))?\s+)?(?:r#)?(\w+)\s*:\s*(.*)$", f, flags=re.S)
                fields.append((fm.group(1), parse_type(fm.group(2))))
            # A zero-sized struct of private fields ([u8; 0]) is an opaque handle.
            if fields and all(n.startswith("_") and re.match(r"\[\s*u8\s*;\s*0\s*\]$", str(t))
                              for n, t in fields):
                self.opaque.add(name)
            else:
                self.structs[name] = fields
        self.functions = {}
        for block in re.finditer(r'(?:unsafe\s+)?extern\s+"C"\s*\{', text):
            depth, i = 1, block.end()
            while depth:
                depth += {"{": 1, "}": -1}.get(text[i], 0)
                i += 1
            for decl in text[block.end():i - 1].split(";"):
                decl = re.sub(r"#\[[^\]]*\]", "", decl).strip()
                if not decl:
                    continue
                fm = re.match(r"(?:pub(?:\([^)]*\))?\s+)?(?:safe\s+|unsafe\s+)?fn\s+(\w+)\s*"
                              r"\((.*)\)\s*(?:->\s*(.*))?$", decl, flags=re.S)
                if not fm:
                    self.functions.setdefault("<unparsed>", []).append(decl)
                    continue
                self.functions[fm.group(1)] = (_params(fm.group(2)), parse_type(fm.group(3) or ""))

    def resolve(self, t, seen=()):
        """t with `pub type` aliases replaced (gpe_status -> i32)."""
        if t.kind == "named" and t.name in self.aliases and t.name not in seen:
            return self.resolve(self.aliases[t.name], seen + (t.name,))
        return t


class Checker:
    def __init__(self, model, crate):
        self.model, self.crate = model, crate
        self.errors = []

    def match(self, r, c):
        """An error message if Rust type r cannot stand for C type c, else None."""
        r = self.crate.resolve(r)
        if c.kind == "void":
            return None if r.kind == "void" else "is %s; gpe.h has void" % r
        if c.kind == "scalar":
            if r.kind != "prim" or r.name != c.name:
                return "is %s; gpe.h has %s" % (r, c)
            return None
        if c.kind == "fnptr":
            if r.kind != "fn":
                return "is %s; gpe.h has the callback %s" % (r, c)
            if not r.nullable:
                return ("is %s; a C function pointer may be NULL: Option<unsafe extern \"C\" "
                        "fn(..)>" % r)
            if len(r.params) != len(c.params):
                return "is %s (%d arguments); gpe.h has %s" % (r, len(r.params), c)
            bad = [e for e in [self.match(r.ret, c.ret)] + [
                self.match(a, p) for a, p in zip(r.params, c.params)] if e]
            return "callback %s: %s" % (c.name or "", "; ".join(bad)) if bad else None
        if c.kind == "record":
            if r.kind != "named" or r.name != c.name:
                return "is %s; gpe.h has the struct %s" % (r, c)
            if r.name not in self.crate.structs:
                return "is %s, not a #[repr(C)] struct with fields in ffi.rs" % r
            return None  # its fields are compared once, in check_structs
        if c.kind == "opaque":
            if r.kind != "named" or r.name != c.name:
                return "is %s; gpe.h has the opaque %s" % (r, c)
            if r.name not in self.crate.opaque:
                return "is %s, not a zero-sized #[repr(C)] struct in ffi.rs" % r
            return None
        if c.kind == "ptr":
            if r.kind != "ptr":
                return "is %s; gpe.h has %s" % (r, c)
            if r.const != c.const:
                return "is %s; gpe.h has %s (constness)" % (r, c)
            err = self.match(r.inner, c.pointee)
            return None if err is None else "is %s, whose pointee %s" % (r, err)
        return "is %s; gpe.h has %s" % (r, c)

    def check_function(self, name, params, ret, exported):
        where = "ffi.rs fn %s" % name
        if name not in self.model.functions:
            self.errors.append("%s: no prototype in gpe.h" % where)
            return
        if name not in exported:
            self.errors.append("%s: not in exported_symbols.txt" % where)
        fn = self.model.functions[name]
        err = self.match(ret, fn.ret)
        if err:
            self.errors.append("%s: return type %s" % (where, err))
        if len(params) != len(fn.params):
            self.errors.append("%s: %d parameters; gpe.h has %d: %s" % (
                where, len(params), len(fn.params), fn))
            return
        for i, ((pname, ptype), cp) in enumerate(zip(params, fn.params)):
            err = self.match(ptype, cp.type)
            if err:
                self.errors.append("%s: parameter %d (%s) %s" % (where, i + 1, pname, err))

    def check_structs(self):
        for name, fields in sorted(self.crate.structs.items()):
            where = "ffi.rs struct %s" % name
            if name not in self.model.records:
                what = "an opaque handle" if name in self.model.opaque else "no struct"
                self.errors.append("%s: gpe.h has %s of that name" % (where, what))
                continue
            cfields = self.model.records[name]
            for i, ((fname, ftype), cf) in enumerate(zip(fields, cfields)):
                if fname != cf.name:
                    self.errors.append("%s: field %d is %s; gpe.h has %s there (order or name)"
                                       % (where, i, fname, cf.name))
                    break
                err = self.match(ftype, cf.type)
                if err:
                    self.errors.append("%s: field %s %s" % (where, fname, err))
            if len(fields) != len(cfields):
                self.errors.append("%s: %d fields; gpe.h has %d (%s)" % (
                    where, len(fields), len(cfields), ", ".join(f.name for f in cfields)))
        for name in sorted(self.crate.opaque):
            if name not in self.model.opaque:
                self.errors.append("ffi.rs opaque struct %s: gpe.h has no opaque %s" % (name, name))


def check(text, model, exported, undeclared=None):
    """The errors of ffi.rs's text against the header model."""
    crate = Crate(text)
    checker = Checker(model, crate)
    for decl in crate.functions.pop("<unparsed>", []):
        checker.errors.append("ffi.rs: cannot parse the extern declaration %r" % decl[:80])
    for name, (params, ret) in sorted(crate.functions.items()):
        checker.check_function(name, params, ret, exported)
    checker.check_structs()
    checker.errors += header_model.coverage_errors(
        "ffi.rs", crate.functions, exported, UNDECLARED if undeclared is None else undeclared)
    return checker.errors, crate


def _read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def main(argv):
    if len(argv) != 5:
        print(__doc__)
        return 2
    rs_path, header, dlpack, symbols = argv[1:5]
    model = header_model.load(header, [dlpack])
    exported = header_model.read_symbols(symbols)
    errors, crate = check(_read(rs_path), model, exported)
    if len(model.functions) < 50:
        errors.append("only %d prototypes parsed from %s" % (len(model.functions), header))
    for e in errors:
        print("ERROR:", e)
    print("%d extern functions, %d structs and %d opaque handles checked against %d "
          "prototypes of %s: %s" % (
              len(crate.functions), len(crate.structs), len(crate.opaque), len(model.functions),
              ", ".join(os.path.basename(h) for h in model.headers),
              "FAILED" if errors else "OK"))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
