"""GroupPE's layering, checked: dependencies point down, and the Python package has no
import cycle.

Layers, low to high (README.md, "Layout"):
  third_party, build_defs, measure < group < encodings < attention, inr < c_api
  < bindings, tools, examples
RULES below says, area by area, what each may use. An area is a directory of the tree;
a package, file or include path belongs to the deepest area that is it or holds it
(attention/cuda follows attention, encodings/sequence/cuda encodings/sequence). An edge
from area A to area B != A is allowed only when B is in A's `uses`. The edges:
  - every label in a BUILD file (deps, data, srcs, hdrs, ... of any rule or macro, the
    labels inside $(location ...) of args, and load() statements; not visibility) and
    every load() of a .bzl file: //pkg:x and //pkg are pkg, :x and x the file's own
    package, @repo//... an external repository (third_party);
  - every `#include "pkg/..."` or <pkg/...> of a C, C++ or CUDA file whose first
    directory is a top-level directory of the tree (gpe/... is c_api's public include
    root, c_api/include/gpe); other includes (absl/, Eigen/, <vector>) are external.
Directories that Bazel ignores (.bazelignore: other workspaces) or git ignores
(.gitignore: build outputs) are not read.

The Python check builds the import graph of each package of PYTHON_PACKAGES (every
`import` and `from ... import` anywhere in a module, relative ones included, except
under `if TYPE_CHECKING:`; an import inside a function still runs, so it still counts)
and fails on any cycle: a cycle works, if at all, only by import order.

Usage: layering.py [ROOT]   (ROOT: the workspace, default the current directory)
"""
import ast
import collections
import fnmatch
import os
import re
import sys

# ---- The rules: one row per area, what it may use besides itself -----------------------

# The order of the layers; an area's `uses` may name only areas of lower layers, or of its
# own layer where the row says why (checked by layering_test: no cycle, nothing upward).
LAYERS = ("third_party", "build_defs", "measure, parallel", "group", "encodings", "attention, inr",
          "c_api", "top")

Rule = collections.namedtuple("Rule", "area layer uses")

_FOUNDATION = ("third_party", "build_defs", "measure", "parallel")
_ENCODINGS = ("encodings/sequence", "encodings/coordinate", "encodings/analysis")
_CORE = _FOUNDATION + ("group",) + _ENCODINGS + ("attention", "inr")

RULES = (
    # External libraries (labels @repo//...), their BUILD files and repository rules.
    Rule("third_party", "third_party", ()),
    # Bazel definitions (copts, the CUDA rule): load only external rules.
    Rule("build_defs", "build_defs", ("third_party",)),
    # Machine limits and timing, for the benchmarks of every layer above.
    Rule("measure", "measure, parallel", ("third_party", "build_defs")),
    # The library-wide thread pool, for every threaded layer above.
    Rule("parallel", "measure, parallel", ("third_party", "build_defs")),
    # Group theory: representations, generators, exponentials.
    Rule("group", "group", _FOUNDATION),
    # Sequence encodings (RoPE, GRAPE, biases) over group.
    Rule("encodings/sequence", "encodings", _FOUNDATION + ("group",)),
    # Coordinate encoders (Fourier features, shifted bases, SO(2) Bessel, harmonics).
    Rule("encodings/coordinate", "encodings", _FOUNDATION + ("group",)),
    # Analysis of embedders (stable rank, distance preservation): it analyses the
    # coordinate encoders, so it may use them (a peer one step above, never the reverse).
    Rule("encodings/analysis", "encodings", _FOUNDATION + ("group", "encodings/coordinate")),
    # Attention: descriptor, reference, CPU and CUDA kernels; never inr.
    Rule("attention", "attention, inr", _FOUNDATION + ("group",) + _ENCODINGS),
    # Implicit neural representations (solvers, MLPs); never attention.
    Rule("inr", "attention, inr", _FOUNDATION + ("group",) + _ENCODINGS),
    # The C ABI over every layer below.
    Rule("c_api", "c_api", _CORE),
    # The bindings see only the C ABI (and their shared checks in bindings/ itself);
    # python, rust and julia never use each other.
    Rule("bindings", "top", ("third_party", "build_defs", "c_api")),
    Rule("bindings/python", "top", ("third_party", "build_defs", "c_api", "bindings")),
    Rule("bindings/rust", "top", ("third_party", "build_defs", "c_api", "bindings")),
    Rule("bindings/julia", "top", ("third_party", "build_defs", "c_api", "bindings")),
    # The CLI (gpe), its benchmarks and peers: over c_api and any layer below; not over
    # the bindings (it is C++, and the bindings are its peers, not its base).
    Rule("tools", "top", _CORE + ("c_api",)),
    # The GPU check: a bundle of every CUDA test and benchmark, the Python bindings' CUDA
    # test among them (with the package it drives); nothing uses it.
    Rule("tools/cuda_check", "top", _CORE + ("c_api", "bindings", "bindings/python", "tools")),
    # The papers' experiments as commands: scripts over the Python bindings, and the gpe
    # tool (its `gpe inr` tables) as data they run; a peer of tools' layer, never used by
    # it.
    Rule("experiments", "top", ("third_party", "build_defs", "c_api", "bindings",
                                "bindings/python", "tools")),
    # Examples of use: the bindings and the C ABI, as a user sees them.
    Rule("examples", "top", ("third_party", "build_defs", "c_api", "bindings",
                             "bindings/python", "bindings/rust", "bindings/julia")),
    # The workspace root (this checker's test): exact package only, may read anything.
    Rule("", "top", None),
)

# Files of the root package that any layer may name: the project's own documents (the
# wheel carries them), not code, so no dependency points up through them.
ROOT_DOCUMENTS = ("//:LICENSE", "//:README.md")

# Include paths that live under an area's include root rather than at their path.
INCLUDE_ROOTS = {"gpe": "c_api"}

# Python packages whose modules must not import each other in a cycle.
PYTHON_PACKAGES = ("bindings/python/gpe",)

SOURCE_EXTENSIONS = (".h", ".hh", ".hpp", ".c", ".cc", ".cpp", ".cu", ".cuh", ".inc")
BUILD_NAMES = ("BUILD", "BUILD.bazel")
# Attributes whose strings are not dependencies.
NOT_DEPS = {"name", "visibility", "default_visibility", "packages", "tags", "copts",
            "linkopts", "defines", "local_defines", "includes", "include_prefix",
            "strip_include_prefix", "env", "size", "timeout", "python_version",
            "srcs_version", "imports", "licenses", "features", "deprecation"}


class Violation:
    def __init__(self, path, line, what):
        self.path, self.line, self.what = path, line, what

    def __str__(self):
        return "%s:%s: %s" % (self.path, self.line, self.what)


def _rules_by_area(rules):
    return {r.area: r for r in rules}


def area_of(relpath, rules=RULES):
    """The area of a directory (package) path: the deepest area holding it; the root
    area "" only for the root itself. None when no area holds it."""
    by_area = _rules_by_area(rules)
    if relpath in ("", "."):
        return "" if "" in by_area else None
    parts = relpath.split("/")
    for n in range(len(parts), 0, -1):
        cand = "/".join(parts[:n])
        if cand in by_area:
            return cand
    return None


def allowed(src, dst, rules=RULES):
    if src == dst:
        return True
    uses = _rules_by_area(rules)[src].uses
    return uses is None or dst in uses


# ---- The tree ---------------------------------------------------------------------------


def _ignore_patterns(root):
    """(.bazelignore directories, .gitignore patterns) of the workspace."""
    bazel, git = [], []
    for name, out in ((".bazelignore", bazel), (".gitignore", git)):
        try:
            with open(os.path.join(root, name), encoding="utf-8") as f:
                lines = f.read().splitlines()
        except OSError:
            continue
        for line in lines:
            line = line.strip()
            if line and not line.startswith(("#", "!")):
                out.append(line)
    return [b.strip("/") for b in bazel], git


def _ignored(relpath, name, bazel, git):
    if name.startswith(".") or name.startswith("bazel-"):
        return True
    if relpath in bazel:
        return True
    for pat in git:
        p = pat.rstrip("/")
        if p.startswith("/"):
            if fnmatch.fnmatch(relpath, p[1:]):
                return True
        elif fnmatch.fnmatch(name, p) or fnmatch.fnmatch(relpath, p):
            return True
    return False


def walk(root):
    """(relative directory, [file names]) of the tree, ignored directories left out."""
    bazel, git = _ignore_patterns(root)
    for dirpath, dirnames, filenames in os.walk(root):
        rel = os.path.relpath(dirpath, root).replace(os.sep, "/")
        rel = "" if rel == "." else rel
        dirnames[:] = sorted(d for d in dirnames
                             if not _ignored((rel + "/" + d).lstrip("/"), d, bazel, git))
        yield rel, sorted(f for f in filenames
                          if not _ignored((rel + "/" + f).lstrip("/"), f, bazel, git))


# ---- Bazel labels -------------------------------------------------------------------------


def label_package(label, own_package):
    """The package a label names ("@" for an external repository), or None for a
    string that is not a label."""
    if label.startswith("@"):
        repo, sep, rest = label[1:].partition("//")
        if repo and sep:
            return "@"
        if not repo and sep:  # @//pkg: the main repository
            label = "//" + rest
        else:
            return None
    if label.startswith("//"):
        return label[2:].split(":")[0].rstrip("/")
    if label.startswith(":"):
        return own_package
    return None


_MAKE_VARIABLE = re.compile(r"\$\((?:location|locations|rootpath|rootpaths|execpath|execpaths)"
                            r"\s+([^)\s]+)\)")


def _strings(node, names):
    """(string, line) of every string constant under node, module-level names expanded."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        yield node.value, node.lineno
    elif isinstance(node, ast.Name) and node.id in names:
        for s, _ in _strings(names[node.id], names):
            yield s, node.lineno
    elif isinstance(node, ast.Call):
        fn = node.func.id if isinstance(node.func, ast.Name) else ""
        if fn == "glob":  # file patterns of the own package
            return
        if fn == "select":  # the values; the keys are conditions (//conditions:default)
            for a in node.args:
                if isinstance(a, ast.Dict):
                    for v in a.values:
                        yield from _strings(v, names)
            return
        for a in node.args:
            yield from _strings(a, names)
        for k in node.keywords:
            yield from _strings(k.value, names)
    else:
        for child in ast.iter_child_nodes(node):
            yield from _strings(child, names)


def build_labels(text, path):
    """(label string, line) of the dependencies a BUILD or .bzl file declares."""
    tree = ast.parse(text, filename=path)
    names = {}
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(
                stmt.targets[0], ast.Name):
            names[stmt.targets[0].id] = stmt.value
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        fn = node.func.id if isinstance(node.func, ast.Name) else ""
        if fn == "load":
            if node.args and isinstance(node.args[0], ast.Constant):
                out.append((node.args[0].value, node.lineno))
            continue
        if path.endswith(".bzl") or fn in ("package", "package_group", "glob", "select"):
            continue
        for k in node.keywords:
            if k.arg in NOT_DEPS:
                continue
            for s, line in _strings(k.value, names):
                if k.arg == "args" or s.startswith("$("):
                    out += [(m, line) for m in _MAKE_VARIABLE.findall(s)]
                else:
                    out.append((s, line))
    return out


# ---- Includes ----------------------------------------------------------------------------

_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*[<"]([^>"]+)[>"]', re.M)


def include_area(include, top_dirs, rules=RULES):
    """The area an include path points into, or None for an external header."""
    first = include.split("/")[0]
    if "/" not in include:
        return None
    if first in INCLUDE_ROOTS:
        return INCLUDE_ROOTS[first]
    if first in top_dirs:
        return area_of(os.path.dirname(include), rules)
    return None


# ---- The checks ---------------------------------------------------------------------------


def check_layering(root, rules=RULES):
    """Violations of RULES in the tree at root."""
    violations = []
    top_dirs = {d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d))}
    packages = set()
    tree = list(walk(root))
    for rel, files in tree:
        if any(f in BUILD_NAMES for f in files):
            packages.add(rel)

    def package_of(rel):
        while rel not in packages and rel:
            rel = rel.rsplit("/", 1)[0] if "/" in rel else ""
        return rel

    def edge(path, line, src_area, dst_area, what):
        if dst_area is None:
            violations.append(Violation(path, line, "%s names %s, which is in no area of "
                                        "layering.py's RULES" % (src_area or "//", what)))
        elif not allowed(src_area, dst_area, rules):
            uses = _rules_by_area(rules)[src_area].uses
            violations.append(Violation(path, line, "%s -> %s (%s): %s may use only %s" % (
                src_area, dst_area, what, src_area, ", ".join(uses) or "itself")))

    for rel, files in tree:
        for f in files:
            path = (rel + "/" + f).lstrip("/")
            is_build, is_bzl = f in BUILD_NAMES, f.endswith(".bzl")
            is_source = f.endswith(SOURCE_EXTENSIONS)
            if not (is_build or is_bzl or is_source):
                continue
            pkg = package_of(rel)
            src = area_of(pkg if is_build or is_bzl else rel, rules)
            if src is None:
                violations.append(Violation(path, 1, "%s is in no area of layering.py's RULES"
                                            % (pkg or rel or "//")))
                continue
            with open(os.path.join(root, path), encoding="utf-8", errors="replace") as fh:
                text = fh.read()
            if is_build or is_bzl:
                try:
                    labels = build_labels(text, path)
                except SyntaxError as e:
                    violations.append(Violation(path, e.lineno, "cannot parse: %s" % e.msg))
                    continue
                for label, line in labels:
                    if label in ROOT_DOCUMENTS:
                        continue
                    dst_pkg = label_package(label, pkg)
                    if dst_pkg is None:
                        continue
                    dst = "third_party" if dst_pkg == "@" else area_of(dst_pkg, rules)
                    edge(path, line, src, dst, label)
            else:
                for m in _INCLUDE.finditer(text):
                    dst = include_area(m.group(1), top_dirs, rules)
                    if dst is not None or m.group(1).split("/")[0] in top_dirs:
                        line = text[:m.start()].count("\n") + 1
                        edge(path, line, src, dst, '#include "%s"' % m.group(1))
    return violations


def _is_type_checking(node):
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING")


def _imports(tree):
    """Import and ImportFrom nodes of a module, `if TYPE_CHECKING:` bodies left out."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        for child in ast.iter_child_nodes(node):
            if isinstance(node, ast.If) and _is_type_checking(node) and child in node.body:
                continue
            stack.append(child)


def import_graph(package_dir, package_name=None):
    """{module: {imported module: first line}} of the modules of one package directory
    (modules named as Python names them: gpe, gpe.torch; subpackages included)."""
    package_name = package_name or os.path.basename(package_dir.rstrip("/"))
    modules = {}
    for dirpath, dirnames, filenames in os.walk(package_dir):
        dirnames[:] = sorted(d for d in dirnames if os.path.isfile(
            os.path.join(dirpath, d, "__init__.py")))
        rel = os.path.relpath(dirpath, package_dir)
        prefix = package_name if rel == "." else package_name + "." + rel.replace(os.sep, ".")
        for f in sorted(filenames):
            if f.endswith(".py"):
                name = prefix if f == "__init__.py" else prefix + "." + f[:-3]
                modules[name] = (os.path.join(dirpath, f), f == "__init__.py")
    graph = {}
    for name, (path, is_init) in modules.items():
        edges = graph.setdefault(name, {})
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), filename=path)
        package = name if is_init else name.rpartition(".")[0]
        for node in _imports(tree):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                if node.level:
                    base = package.split(".")
                    base = base[:len(base) - (node.level - 1)]
                    base = ".".join(base + ([node.module] if node.module else []))
                else:
                    base = node.module
                for a in node.names:  # `from gpe import torch`: the submodule, if it is one
                    sub = base + "." + a.name
                    targets.append(sub if sub in modules else base)
            for t in targets:
                # The longest module of this package that t is or lies in.
                while t and t not in modules:
                    t = t.rpartition(".")[0]
                if t and t != name:
                    edges.setdefault(t, node.lineno)
    return graph, {n: p for n, (p, _) in modules.items()}


def cycles(graph):
    """The strongly connected components of more than one module (Tarjan), each as a
    list of modules in cycle order."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def _cycle_path(graph, comp):
    """One shortest cycle through the component's first module: [m0, m1, ..., m0]."""
    members, start = set(comp), comp[0]
    prev, frontier = {start: None}, [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v]):
                if w == start:
                    path = [v]
                    while prev[path[-1]] is not None:
                        path.append(prev[path[-1]])
                    return path[::-1] + [start]
                if w in members and w not in prev:
                    prev[w] = v
                    nxt.append(w)
        frontier = nxt
    raise AssertionError("no cycle through %s" % start)


def check_python_cycles(root, packages=PYTHON_PACKAGES):
    violations = []
    for pkg in packages:
        graph, paths = import_graph(os.path.join(root, pkg))
        for comp in cycles(graph):
            path = _cycle_path(graph, comp)
            hops = ["%s (%s:%d)" % (a, os.path.relpath(paths[a], root), graph[a][b])
                    for a, b in zip(path, path[1:])]
            violations.append(Violation(
                os.path.relpath(paths[path[0]], root), graph[path[0]][path[1]],
                "import cycle: %s -> %s" % (" -> ".join(hops), path[-1])))
    return violations


def main(argv):
    root = os.path.abspath(argv[1] if len(argv) > 1 else ".")
    violations = check_layering(root) + check_python_cycles(root)
    for v in violations:
        print("LAYERING:", v)
    print("layering of %s: %s" % (root, "%d violations" % len(violations) if violations
                                  else "OK"))
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
