"""Keeps the Rust crate's declarations (src/ffi.rs and its modules) true to gpe.h without
a Rust build.

Reads the `extern "C" { ... }` blocks, #[repr(C)] structs and `pub type` aliases of
ffi.rs and of every module file it declares (`mod so;` -> ffi/so.rs or ffi/so/mod.rs,
`#[path = "..."]` followed, recursively; a declared module without its file is an
error), and checks them, as one set of declarations, against the header model
(bindings/header_model.py: gpe.h, the headers it includes, dlpack.h):
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
  - no function or struct is declared in two files;
  - every exported symbol is declared, or listed in UNDECLARED below with a reason.
Errors name the file that declares the item (ffi.rs, ffi/so.rs, ...).
Usage: check_bindings.py ffi.rs gpe.h dlpack.h exported_symbols.txt
"""
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import header_model  # noqa: E402

# Exported symbols the crate deliberately does not declare: {name: why}.
UNDECLARED = {}

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
    inner), "named" (name: a struct or alias of the crate), "fn" (ret, params, nullable),
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
    """The FFI declarations of Rust source files: `sources` is the text of one file
    (named ffi.rs) or a list of (name, text), the files of one module tree (root first).
    `file_of` maps ("fn" | "struct", name) to the file that declares it; `where` names
    the whole tree in messages about it."""

    def __init__(self, sources):
        if isinstance(sources, str):
            sources = [("ffi.rs", sources)]
        self.files = [name for name, _ in sources]
        self.where = self.files[0] if len(self.files) == 1 else "%s (with its modules)" % (
            self.files[0])
        self.aliases, self.structs, self.opaque, self.plain_structs = {}, {}, set(), set()
        self.functions, self.file_of, self.unparsed, self.duplicates = {}, {}, [], []
        for name, text in sources:
            self._read(name, strip_comments(text))

    def _declare(self, kind, name, path):
        """Records that `path` declares `name`; False (and an error) if another file did."""
        first = self.file_of.setdefault((kind, name), path)
        if first != path:
            self.duplicates.append("%s %s %s: also declared in %s" % (path, kind, name, first))
            return False
        return True

    def _read(self, path, text):
        self.aliases.update((m.group(1), parse_type(m.group(2)))
                            for m in re.finditer(r"\bpub\s+type\s+(\w+)\s*=\s*([^;]*);", text))
        for m in re.finditer(r"((?:#\[[^\]]*\]\s*)*)pub\s+struct\s+(\w+)\s*\{([^{}]*)\}", text):
            attrs, name, body = m.groups()
            if not self._declare("struct", name, path):
                continue
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
                    self.unparsed.append((path, decl))
                    continue
                if self._declare("fn", fm.group(1), path):
                    self.functions[fm.group(1)] = (_params(fm.group(2)),
                                                   parse_type(fm.group(3) or ""))

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
                return "is %s, not a #[repr(C)] struct with fields in %s" % (r, self.crate.where)
            return None  # its fields are compared once, in check_structs
        if c.kind == "opaque":
            if r.kind != "named" or r.name != c.name:
                return "is %s; gpe.h has the opaque %s" % (r, c)
            if r.name not in self.crate.opaque:
                return "is %s, not a zero-sized #[repr(C)] struct in %s" % (r, self.crate.where)
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
        where = "%s fn %s" % (self.crate.file_of["fn", name], name)
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
            where = "%s struct %s" % (self.crate.file_of["struct", name], name)
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
                self.errors.append("%s opaque struct %s: gpe.h has no opaque %s" % (
                    self.crate.file_of["struct", name], name, name))


def check(sources, model, exported, undeclared=None):
    """The errors of the crate's declarations (ffi.rs's text, or the (name, text) list of
    read_module_tree) against the header model."""
    crate = Crate(sources)
    checker = Checker(model, crate)
    for path, decl in crate.unparsed:
        checker.errors.append("%s: cannot parse the extern declaration %r" % (path, decl[:80]))
    checker.errors += crate.duplicates
    for name, (params, ret) in sorted(crate.functions.items()):
        checker.check_function(name, params, ret, exported)
    checker.check_structs()
    checker.errors += header_model.coverage_errors(
        crate.where, crate.functions, exported, UNDECLARED if undeclared is None else undeclared)
    return checker.errors, crate


def _read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def module_files(path, text):
    """The files of the `mod name;` declarations in `text` (the file at `path`), by
    Rust's rules: [(name, [candidate paths])] with the first existing candidate the
    module's file. ffi.rs's modules sit in ffi/, mod.rs's (and lib.rs's) beside it;
    #[path = "p"] is relative to the declaring file's directory."""
    text = strip_comments(text)
    base, stem = os.path.split(path)
    stem = os.path.splitext(stem)[0]
    subdir = base if stem in ("mod", "lib", "main") else os.path.join(base, stem)
    out = []
    for m in re.finditer(r"((?:#\[[^\]]*\]\s*)*)(?:pub(?:\s*\([^)]*\))?\s+)?mod\s+(\w+)\s*;", text):
        attrs, name = m.groups()
        pm = re.search(r'#\[\s*path\s*=\s*"([^"]*)"\s*\]', attrs)
        if pm:
            out.append((name, [os.path.join(base, pm.group(1))]))
        else:
            out.append((name, [os.path.join(subdir, name + ".rs"),
                               os.path.join(subdir, name, "mod.rs")]))
    return out


def read_module_tree(root):
    """([(name, text)], errors): the file `root` and, depth first in declaration order,
    the files of the modules it declares, named relative to root's directory (ffi.rs,
    ffi/so.rs); an error for each declared module whose file is missing."""
    top = os.path.dirname(root)
    sources, errors = [], []

    def visit(path):
        name = os.path.relpath(path, top)
        text = _read(path)
        sources.append((name, text))
        for mod, candidates in module_files(path, text):
            found = [c for c in candidates if os.path.isfile(c)]
            if found and os.path.relpath(found[0], top) in [n for n, _ in sources]:
                errors.append("%s: mod %s; names %s, read already" % (
                    name, mod, os.path.relpath(found[0], top)))
            elif found:
                visit(found[0])
            else:
                errors.append("%s: mod %s; has no file (%s)" % (
                    name, mod, " or ".join(os.path.relpath(c, top) for c in candidates)))

    visit(root)
    return sources, errors


def main(argv):
    if len(argv) != 5:
        print(__doc__)
        return 2
    rs_path, header, dlpack, symbols = argv[1:5]
    model = header_model.load(header, [dlpack])
    exported = header_model.read_symbols(symbols)
    sources, missing = read_module_tree(rs_path)
    errors, crate = check(sources, model, exported)
    errors = missing + errors
    if len(model.functions) < 50:
        errors.append("only %d prototypes parsed from %s" % (len(model.functions), header))
    for e in errors:
        print("ERROR:", e)
    print("%d extern functions, %d structs and %d opaque handles in %d file%s checked "
          "against %d prototypes of %s: %s" % (
              len(crate.functions), len(crate.structs), len(crate.opaque), len(sources),
              "" if len(sources) == 1 else "s", len(model.functions),
              ", ".join(os.path.basename(h) for h in model.headers),
              "FAILED" if errors else "OK"))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
