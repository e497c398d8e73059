"""Keeps the ctypes declarations of gpe/_ffi.py true to gpe.h.

Imports _ffi.py on its own (it loads no library), runs its _declare(lib) against a
recorder to read the `sigs` table as ctypes objects, and checks against the header model
(bindings/header_model.py: gpe.h, the headers it includes, dlpack.h):
  - every declared function has a prototype in gpe.h and is exported;
  - the argument count, each argument type and the return type agree (c_int32 for
    int32_t, POINTER(c_double) for double*, c_char_p for char*, c_void_p for void* and
    for pointers to opaque handles, POINTER(SomeStructure) for a pointer to a struct,
    a CFUNCTYPE for a callback typedef, None for void);
  - each ctypes.Structure reached that way has the C struct's fields: the same names
    (a trailing _ dropped from Python keywords: lambda_), in order, all of them, with
    agreeing types, recursively (DLTensor's DLDevice and DLDataType), and no _pack_;
  - every Structure of _ffi.py is reached (none is left unchecked);
  - every exported symbol is declared, or listed in UNDECLARED below with a reason.
Usage: check_bindings.py _ffi.py gpe.h dlpack.h exported_symbols.txt
"""
import ctypes
import importlib.util
import keyword
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import header_model  # noqa: E402

# Exported symbols the Python package deliberately does not declare: {name: why}.
UNDECLARED = {}

_SIGNED, _UNSIGNED = "bhilq", "BHILQ"


def scalar_name(t):
    """The fixed-width C name of a ctypes simple type (c_int -> int32_t), else None."""
    code = getattr(t, "_type_", None)
    if not (isinstance(t, type) and issubclass(t, ctypes._SimpleCData) and isinstance(code, str)):
        return None
    if code in _SIGNED:
        return "int%d_t" % (8 * ctypes.sizeof(t))
    if code in _UNSIGNED:
        return "uint%d_t" % (8 * ctypes.sizeof(t))
    return {"f": "float", "d": "double", "c": "char", "?": "bool"}.get(code)


# The names _ffi.py gives its ctypes types (a CFUNCTYPE class has none of its own).
_NAMES = {}


def py_name(t):
    if t is None:
        return "None"
    if isinstance(t, type) and issubclass(t, ctypes._Pointer):
        return "POINTER(%s)" % py_name(t._type_)
    return _NAMES.get(t) or getattr(t, "__name__", repr(t))


def field_name(name):
    """lambda_ -> lambda: Python spells a C field that is a keyword with a trailing _."""
    return name[:-1] if name.endswith("_") and keyword.iskeyword(name[:-1]) else name


class Checker:
    def __init__(self, model):
        self.model = model
        self.errors = []
        self.compared = {}  # Structure class -> C record name

    def match(self, py, c, where):
        """An error message if ctypes type py cannot stand for C type c, else None;
        Structures met on the way are compared field by field."""
        if c.kind == "void":
            return None if py is None else "is %s; gpe.h has void" % py_name(py)
        if py is None:
            return "is None (void); gpe.h has %s" % c
        if c.kind == "scalar":
            if scalar_name(py) != c.name:
                return "is %s; gpe.h has %s" % (py_name(py), c)
            return None
        if c.kind == "fnptr":
            if not (isinstance(py, type) and issubclass(py, ctypes._CFuncPtr)):
                return "is %s; gpe.h has the callback %s (a CFUNCTYPE)" % (py_name(py), c)
            inner = [self.match(py._restype_, c.ret, where)]
            if len(py._argtypes_) != len(c.params):
                return "callback %s takes %d arguments; gpe.h's %s takes %d" % (
                    py_name(py), len(py._argtypes_), c, len(c.params))
            inner += [self.match(a, p, where) for a, p in zip(py._argtypes_, c.params)]
            bad = [e for e in inner if e]
            return "callback %s: %s" % (py_name(py), "; ".join(bad)) if bad else None
        if c.kind == "record":
            if not (isinstance(py, type) and issubclass(py, ctypes.Structure)):
                return "is %s; gpe.h has the struct %s" % (py_name(py), c)
            self.compare_struct(py, c.name, where)
            return None
        if c.kind == "ptr":
            pointee = c.pointee
            if py is ctypes.c_char_p:
                ok = pointee.kind == "scalar" and pointee.name == "char"
                return None if ok else "is c_char_p; gpe.h has %s" % c
            if py is ctypes.c_void_p:
                # An untyped pointer: right for void* and for handles the binding never
                # looks into; a struct or number behind it would go unchecked.
                ok = pointee.kind in ("void", "opaque")
                return None if ok else "is c_void_p; gpe.h has %s (declare its type)" % c
            if isinstance(py, type) and issubclass(py, ctypes._Pointer):
                err = self.match(py._type_, pointee, where)
                return None if err is None else "is %s, whose pointee %s" % (py_name(py), err)
            return "is %s; gpe.h has %s" % (py_name(py), c)
        return "is %s; gpe.h has %s" % (py_name(py), c)  # an opaque struct by value

    def compare_struct(self, py, cname, where):
        if py in self.compared:
            if self.compared[py] != cname:
                self.errors.append("%s: Structure %s stands for both %s and %s" % (
                    where, py.__name__, self.compared[py], cname))
            return
        self.compared[py] = cname
        cfields = self.model.records[cname]
        pfields = list(py._fields_)
        where = "Structure %s (gpe.h %s)" % (py.__name__, cname)
        if getattr(py, "_pack_", 0):
            self.errors.append("%s: has _pack_; gpe.h's structs are naturally aligned" % where)
        for i, (pf, cf) in enumerate(zip(pfields, cfields)):
            name, ptype = pf[0], pf[1]
            if len(pf) > 2:
                self.errors.append("%s: field %s is a bit field" % (where, name))
            if field_name(name) != cf.name:
                self.errors.append("%s: field %d is %s; gpe.h has %s there (order or name)"
                                   % (where, i, name, cf.name))
                return
            err = self.match(ptype, cf.type, where)
            if err:
                self.errors.append("%s: field %s %s" % (where, name, err))
        if len(pfields) != len(cfields):
            names = [f.name for f in cfields]
            self.errors.append("%s: %d fields; gpe.h has %d (%s)" % (
                where, len(pfields), len(cfields), ", ".join(names)))

    def check_function(self, name, restype, argtypes, exported):
        where = "sigs[%r]" % name
        if name not in self.model.functions:
            self.errors.append("%s: no prototype in gpe.h" % where)
            return
        if name not in exported:
            self.errors.append("%s: not in exported_symbols.txt" % where)
        fn = self.model.functions[name]
        err = self.match(restype, fn.ret, where)
        if err:
            self.errors.append("%s: return type %s" % (where, err))
        if argtypes is None or len(argtypes) != len(fn.params):
            self.errors.append("%s: %s argument types; gpe.h has %d: %s" % (
                where, "no" if argtypes is None else len(argtypes), len(fn.params), fn))
            return
        for i, (a, p) in enumerate(zip(argtypes, fn.params)):
            err = self.match(a, p.type, where)
            if err:
                self.errors.append("%s: argument %d (%s) %s" % (where, i + 1, p.name, err))


class _Recorder:
    """Stands in for the CDLL: records what _declare sets on each function."""

    _UNSET = object()

    def __init__(self):
        self.functions = {}

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        fn = self.functions.get(name)
        if fn is None:
            fn = type("Fn", (), {"restype": self._UNSET, "argtypes": None})()
            self.functions[name] = fn
        return fn


def load_ffi(path):
    spec = importlib.util.spec_from_file_location("gpe_ffi_under_check", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def check(ffi, model, exported, undeclared=None):
    """The errors of module ffi (an imported _ffi.py) against the header model."""
    _NAMES.clear()
    _NAMES.update({v: k for k, v in vars(ffi).items() if isinstance(v, type)
                   and issubclass(v, (ctypes.Structure, ctypes._CFuncPtr))})
    recorder = _Recorder()
    ffi._declare(recorder)
    checker = Checker(model)
    for name, fn in sorted(recorder.functions.items()):
        if fn.restype is _Recorder._UNSET:
            checker.errors.append("sigs[%r]: no restype set" % name)
            continue
        checker.check_function(name, fn.restype, fn.argtypes, exported)
    structures = sorted((v for v in vars(ffi).values() if isinstance(v, type)
                         and issubclass(v, ctypes.Structure) and v is not ctypes.Structure
                         and v.__module__ == ffi.__name__), key=lambda c: c.__name__)
    for s in structures:
        if s not in checker.compared:
            checker.errors.append("Structure %s is used by no declared function: nothing ties "
                                  "it to a struct of gpe.h" % s.__name__)
    checker.errors += header_model.coverage_errors(
        "_ffi.py", recorder.functions, exported,
        UNDECLARED if undeclared is None else undeclared)
    return checker.errors, len(recorder.functions), len(checker.compared)


def main(argv):
    if len(argv) != 5:
        print(__doc__)
        return 2
    ffi_path, header, dlpack, symbols = argv[1:5]
    model = header_model.load(header, [dlpack])
    exported = header_model.read_symbols(symbols)
    errors, nfun, nstruct = check(load_ffi(ffi_path), model, exported)
    if len(model.functions) < 50:
        errors.append("only %d prototypes parsed from %s" % (len(model.functions), header))
    for e in errors:
        print("ERROR:", e)
    print("%d ctypes declarations and %d Structures checked against %d prototypes of %s: %s"
          % (nfun, nstruct, len(model.functions), ", ".join(
              os.path.basename(h) for h in model.headers), "FAILED" if errors else "OK"))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
