"""The C declarations of gpe.h as data, for the bindings' drift checks.

Parses gpe.h and every header it includes by `#include "gpe/..."` or `<gpe/...>` (found
under the include root, c_api/include, or beside the including file), plus any other
header found in the extra search directories (dlpack/dlpack.h, for DLTensor), into:

  functions  name -> Function(name, ret, params): every prototype (GPE_API and the other
             upper-case macros in front of it are dropped)
  records    name -> [Field(name, type)]: every struct with a body, by typedef name
  opaque     names declared `typedef struct x x;` and never given a body
  callbacks  name -> CType of kind "fnptr": function-pointer typedefs

Types are CType values in an LP64 C ABI (Linux and macOS on x86-64 and arm64, where the
library is built): int is int32_t, long and size_t are 64-bit, a C enum is int32_t.
Macros are not expanded beyond dropping the upper-case words before a prototype; the
header is written so that this suffices (the checks fail loudly when it does not, as
their counts of parsed prototypes fall).
"""
import os
import re

# Fixed-width names for C's scalar spellings (LP64).
_SCALAR_WORDS = {
    "int8_t": "int8_t", "signed char": "int8_t", "uint8_t": "uint8_t",
    "unsigned char": "uint8_t", "int16_t": "int16_t", "short": "int16_t",
    "short int": "int16_t", "uint16_t": "uint16_t", "unsigned short": "uint16_t",
    "int32_t": "int32_t", "int": "int32_t", "signed": "int32_t", "signed int": "int32_t",
    "uint32_t": "uint32_t", "unsigned": "uint32_t", "unsigned int": "uint32_t",
    "int64_t": "int64_t", "long": "int64_t", "long int": "int64_t", "long long": "int64_t",
    "long long int": "int64_t", "ptrdiff_t": "int64_t", "ssize_t": "int64_t",
    "uint64_t": "uint64_t", "unsigned long": "uint64_t", "unsigned long int": "uint64_t",
    "unsigned long long": "uint64_t", "unsigned long long int": "uint64_t",
    "size_t": "uint64_t", "uintptr_t": "uint64_t", "intptr_t": "int64_t",
    "float": "float", "double": "double", "char": "char", "_Bool": "bool", "bool": "bool",
}
_QUALIFIERS = {"const", "volatile", "restrict", "struct", "enum", "union"}


class CType:
    """A C type. kind is one of
      "scalar"  name: a fixed-width name of _SCALAR_WORDS ("int32_t", "double", "char")
      "void"
      "record"  name: a struct with a body (its fields in HeaderModel.records)
      "opaque"  name: a struct without a body (a handle)
      "ptr"     pointee: a CType; const: whether the pointee is const-qualified
      "fnptr"   name (the typedef's, or ""), ret: a CType, params: [CType]
    """

    __slots__ = ("kind", "name", "pointee", "const", "ret", "params")

    def __init__(self, kind, name="", pointee=None, const=False, ret=None, params=()):
        self.kind, self.name, self.pointee, self.const = kind, name, pointee, const
        self.ret, self.params = ret, tuple(params)

    def __str__(self):
        if self.kind == "ptr":
            return ("const " if self.const else "") + str(self.pointee) + "*"
        if self.kind == "void":
            return "void"
        if self.kind == "fnptr":
            sig = "%s (*)(%s)" % (self.ret, ", ".join(str(p) for p in self.params))
            return "%s = %s" % (self.name, sig) if self.name else sig
        return self.name

    __repr__ = __str__


VOID = CType("void")


class Field:
    __slots__ = ("name", "type")

    def __init__(self, name, ctype):
        self.name, self.type = name, ctype

    def __repr__(self):
        return "%s %s" % (self.type, self.name)


class Function:
    __slots__ = ("name", "ret", "params", "header")

    def __init__(self, name, ret, params, header):
        self.name, self.ret, self.params, self.header = name, ret, params, header

    def __repr__(self):
        return "%s %s(%s)" % (self.ret, self.name, ", ".join(map(repr, self.params)))


class HeaderError(Exception):
    pass


def split_top(s, sep=","):
    """Splits s at sep outside (), {} and []."""
    parts, depth, cur = [], 0, []
    for ch in s:
        if ch in "({[":
            depth += 1
        elif ch in ")}]":
            depth -= 1
        if ch == sep and depth == 0:
            parts.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    if "".join(cur).strip():
        parts.append("".join(cur).strip())
    return parts


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def _directives(text):
    """(code without preprocessor lines, [(quoted?, path) of every #include])."""
    code, includes = [], []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.lstrip().startswith("#"):
            full = line
            while full.endswith("\\") and i + 1 < len(lines):  # a continued #define
                i += 1
                full = full[:-1] + lines[i]
            m = re.match(r'\s*#\s*include\s*([<"])([^>"]+)[>"]', full)
            if m:
                includes.append((m.group(1) == '"', m.group(2)))
            code.append("")
        else:
            code.append(line)
        i += 1
    return "\n".join(code), includes


def _statements(code):
    """Top-level declarations: split at ';' outside braces. extern "C" { ... } wrappers
    are dropped; an inline function's body ends its statement."""
    code = re.sub(r'extern\s+"C"\s*\{', " ", code)
    out, cur, depth = [], [], 0
    for ch in code:
        if ch == "{":
            depth += 1
        elif ch == "}":
            if depth == 0:  # closes a dropped extern "C" {
                continue
            depth -= 1
            if depth == 0:
                head = "".join(cur).split("{")[0].rstrip()
                if head.endswith(")"):  # a function definition: no ';' follows
                    cur.append(ch)
                    out.append(" ".join("".join(cur).split()))
                    cur = []
                    continue
        if ch == ";" and depth == 0:
            out.append(" ".join("".join(cur).split()))
            cur = []
            continue
        cur.append(ch)
    return [s for s in out if s]


_TOKEN = re.compile(r"[A-Za-z_]\w*|\d+|\S")


class HeaderModel:
    """Every declaration of one umbrella header and the headers it includes."""

    def __init__(self):
        self.functions = {}
        self.records = {}
        self.opaque = set()
        self.callbacks = {}
        self.headers = []  # paths parsed, in order
        self._aliases = {}  # typedef name -> CType (scalars, enums)
        self._forward = set()

    # ---- types ------------------------------------------------------------------------

    def _base(self, words):
        """The CType named by base-type words ('const' and 'struct' removed)."""
        key = " ".join(words)
        if key == "void":
            return VOID
        if key in _SCALAR_WORDS:
            return CType("scalar", _SCALAR_WORDS[key])
        if len(words) == 1:
            w = words[0]
            if w in self._aliases:
                return self._aliases[w]
            if w in self.callbacks:
                return self.callbacks[w]
            if w in self.records:
                return CType("record", w)
            if w in self._forward:
                return CType("opaque", w)
        raise HeaderError("unknown type %r" % key)

    def parse_decl(self, decl):
        """(name or None, CType) of a declaration: 'const DLTensor* x', 'double lo',
        'void (*cb)(void*, int64_t)', 'int64_t' (unnamed)."""
        decl = " ".join(decl.split())
        m = re.match(r"(.*?)\(\s*\*\s*(\w*)\s*\)\s*\((.*)\)$", decl)
        if m:  # a function pointer
            _, ret = self.parse_decl(m.group(1))
            params = [] if m.group(3).strip() in ("", "void") else [
                self.parse_decl(p)[1] for p in split_top(m.group(3))]
            return m.group(2) or None, CType("fnptr", "", ret=ret, params=params)
        if "[" in decl:
            raise HeaderError("arrays are not supported: %r" % decl)
        tokens = _TOKEN.findall(decl)
        # The declared name: the last identifier, when a type precedes it.
        name = None
        idents = [t for t in tokens if re.match(r"[A-Za-z_]", t) and t not in _QUALIFIERS]
        if len(idents) >= 2 and tokens[-1] == idents[-1]:
            joined = " ".join(idents)
            if joined not in _SCALAR_WORDS:  # 'unsigned int' names no variable
                name = tokens.pop()
        # Base words and qualifiers up to the first '*', then pointer levels.
        words, const, i = [], False, 0
        while i < len(tokens) and tokens[i] != "*":
            t = tokens[i]
            if t == "const":
                const = True
            elif t not in _QUALIFIERS:
                words.append(t)
            i += 1
        ctype = self._base(words)
        while i < len(tokens):
            if tokens[i] == "*":
                ctype = CType("ptr", pointee=ctype, const=const)
                const = False
            elif tokens[i] == "const":  # qualifies the pointer itself
                const = True
            else:
                raise HeaderError("cannot parse declaration %r" % decl)
            i += 1
        return name, ctype

    # ---- declarations -----------------------------------------------------------------

    def _fields(self, body):
        fields = []
        for decl in split_top(body, ";"):
            parts = split_top(decl)
            name, ctype = self.parse_decl(parts[0])
            fields.append(Field(name, ctype))
            if len(parts) > 1:  # 'double lo, hi': more declarators of the first's base type
                base = re.sub(r"[\s*]*\w+$", "", parts[0].split("(")[0]).strip()
                for more in parts[1:]:
                    n, t = self.parse_decl(base + " " + more)
                    fields.append(Field(n, t))
        return fields

    def _statement(self, s, header):
        m = re.match(r"typedef (?:struct|union) (\w+ )?\{(.*)\} (\w+)$", s)
        if m:
            name, tag = m.group(3), (m.group(1) or "").strip()
            for n in (name, tag):  # it may point to itself
                if n:
                    self.records[n] = []
            fields = self._fields(m.group(2))
            for n in (name, tag):
                if n:
                    self.records[n] = fields
            self._forward.discard(name)
            self.opaque.discard(name)
            return
        m = re.match(r"(?:struct|union) (\w+) \{(.*)\}$", s)
        if m:
            self.records[m.group(1)] = self._fields(m.group(2))
            self.opaque.discard(m.group(1))
            return
        m = re.match(r"typedef enum (\w+ )?\{.*\} (\w+)$", s)
        if m:
            self._aliases[m.group(2)] = CType("scalar", "int32_t")
            return
        if re.match(r"enum (\w+ )?\{", s):
            return  # constants
        m = re.match(r"typedef (?:struct|union) (\w+) (\w+)$", s)
        if m:
            if m.group(2) not in self.records:
                self._forward.add(m.group(2))
                self.opaque.add(m.group(2))
            return
        if s.startswith("typedef "):
            name, ctype = self.parse_decl(s[len("typedef "):])
            if ctype.kind == "fnptr":
                ctype.name = name
                self.callbacks[name] = ctype
            else:
                self._aliases[name] = ctype
            return
        if s.endswith("}"):
            return  # an inline function's definition: not exported
        m = re.match(r"((?:[A-Z][A-Z0-9_]*(?:\(\(.*?\)\))? )*)(.*?)\b(\w+) ?\((.*)\)$", s)
        if m:
            _, ret = self.parse_decl(m.group(2))
            params = [] if m.group(4).strip() in ("", "void") else [
                Field(*self.parse_decl(p)) for p in split_top(m.group(4))]
            self.functions[m.group(3)] = Function(m.group(3), ret, params, header)
            return
        if s.startswith(("struct ", "extern ", "static ")):
            return
        raise HeaderError("cannot parse %r" % s[:120])

    def add_header(self, path, root, extra, seen):
        """Parses path and, first, the headers it includes that are part of the model:
        "gpe/..." under root (or beside path), a quoted name beside path, or a name of
        `extra` ({include name: path}). Other includes are system headers (stdint.h)."""
        path = os.path.normpath(path)
        if path in seen:
            return
        seen.add(path)
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except OSError as e:
            raise HeaderError("cannot read %s: %s" % (path, e))
        self.headers.append(path)
        code, includes = _directives(strip_comments(text))
        here = os.path.dirname(path)
        for quoted, inc in includes:
            candidates = [os.path.join(here, inc)] if quoted else []
            if inc.startswith("gpe/"):
                candidates.append(os.path.join(root, inc))
            found = next((c for c in candidates if os.path.isfile(c)), extra.get(inc))
            if found:
                self.add_header(found, root, extra, seen)
            elif inc.startswith("gpe/"):
                raise HeaderError("%s includes %s, found in none of %s"
                                  % (path, inc, candidates))
        for s in _statements(code):
            try:
                self._statement(s, path)
            except HeaderError as e:
                raise HeaderError("%s: %s" % (path, e))


def load(header, extra_headers=()):
    """The model of `header` (c_api/include/gpe/gpe.h): "gpe/..." includes are found under
    the include root two levels up (c_api/include). extra_headers are other headers to
    follow where included, as paths ending in their include name (".../dlpack/dlpack.h"
    for `#include <dlpack/dlpack.h>`)."""
    header = os.path.abspath(header)
    root = os.path.dirname(os.path.dirname(header))
    extra = {}
    for h in extra_headers:
        h = os.path.abspath(h)
        extra["/".join(h.split(os.sep)[-2:])] = h
    model = HeaderModel()
    model.add_header(header, root, extra, set())
    return model


def read_symbols(path):
    """The names of exported_symbols.txt (one a line; '#' starts a comment)."""
    with open(path, encoding="utf-8") as f:
        return [n for n in (line.split("#")[0].strip() for line in f) if n]


def coverage_errors(binding, declared, exported, undeclared):
    """Every exported symbol is declared by the binding or listed in `undeclared`
    ({symbol: why the binding leaves it out}, a constant of the binding's check); every
    listed one is exported, has a reason and is not declared after all (a stale entry
    would hide the next gap)."""
    errors = []
    for name in sorted(set(exported) - set(declared) - set(undeclared)):
        errors.append("%s does not declare exported %s (declare it, or list it in the "
                      "check's UNDECLARED with a reason)" % (binding, name))
    for name, reason in sorted(undeclared.items()):
        if name not in exported:
            errors.append("UNDECLARED lists %s, which is not an exported symbol" % name)
        elif name in declared:
            errors.append("UNDECLARED lists %s, which %s declares: remove the entry"
                          % (name, binding))
        elif not str(reason).strip():
            errors.append("UNDECLARED lists %s without a reason" % name)
    return errors
