"""The import graph holds the architecture: no import cycles, and no import against the pipeline's
order. Read from the source (ast), so a new violation fails here, not in review.

Layers, lowest first; a module may import its own package and any lower layer:
  base      errors, names, files, limits (and the package root: the version)
  numerics  number formats, their proofs, the bit-exact fixed-point model
  ir        the model graph, layer semantics, the numpy reference
  frontends one module per input format (produce IR)
  passes    graph rewrites (IR -> IR)
  codegen   one module per code shape (IR -> C)
  compilers one module per compiler family
  runners   one module per way of running a program
  wcet      one module per analyzer
  checks    gates, reports, memory
  kinds     one module per model kind; boards: a board's compiler, runner and analyzers
  entry     options, steps, pipeline, project; then cli and scons_tool on top
Besides, the stages after the front-ends see a model only as IR: they never import frontends.
"""

import dis
import functools
import types
from collections import defaultdict
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "nnbuild"
LAYERS = [
    ("nnbuild", "errors", "names", "files", "limits"),
    ("numerics",),
    ("ir",),
    ("frontends",),
    ("passes",),
    ("codegen",),
    ("compilers",),
    ("runners",),
    ("wcet",),
    ("checks",),
    ("kinds", "boards"),
    ("options", "steps", "pipeline", "project"),
    ("cli", "scons_tool", "__main__", "jit"),
]
RANK = {part: rank for rank, parts in enumerate(LAYERS) for part in parts}
#: stages that must not see the front-ends (they read IR)
AFTER_FRONTENDS = ("passes", "codegen", "compilers", "runners", "wcet", "checks")


def module_name(path):
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


#: the opcode of an import statement: its name in co_names, its level and fromlist the two constants
#: loaded before it (`import a.b`, `from .c import d` alike)
IMPORT_NAME = dis.opmap["IMPORT_NAME"]
#: how a constant is loaded (Python 3.14 loads small ints by LOAD_SMALL_INT)
LOADS = ("LOAD_CONST", "LOAD_SMALL_INT")


def code_objects(code):
    """`code` and every code object nested in it (functions, classes, comprehensions)."""
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from code_objects(const)


def import_statements(path):
    """(module or None, level, imported names or None) of every import statement of `path`, at any
    depth. Read from the bytecode (compile() builds no Python AST objects: a third of ast.parse's
    time over the package), where each statement is one IMPORT_NAME after the loads of its level
    and fromlist."""
    found = []
    for code in code_objects(compile(path.read_text(), str(path), "exec", dont_inherit=True)):
        if IMPORT_NAME not in code.co_code[::2]:
            continue
        ops = [op for op in dis.get_instructions(code) if op.opname not in ("EXTENDED_ARG", "CACHE")]
        for k, op in enumerate(ops):
            if op.opcode == IMPORT_NAME:
                level, fromlist = ops[k - 2], ops[k - 1]
                assert level.opname in LOADS and fromlist.opname in LOADS, (path, op.offset)
                found.append((op.argval or None, level.argval, fromlist.argval))
    return found


@functools.lru_cache(maxsize=None)
def imports():
    """{module: {imported nnbuild module}} from every import statement, at any depth (read once
    for the module's tests)."""
    modules = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph = defaultdict(set)
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        for module, level, fromlist in import_statements(path):
            if fromlist is None:     # import a.b [as c]
                targets = [module]
            else:                    # from [.]a import b, c
                base = module or ""
                if level:
                    base = ".".join(package.split(".")[:len(package.split(".")) - level + 1] + ([base] if base else []))
                targets = [f"{base}.{a}" if f"{base}.{a}" in modules else base for a in fromlist]
            for target in targets:
                while target not in modules and "." in target:
                    target = target.rsplit(".", 1)[0]
                if target in modules and target != name:
                    graph[name].add(target)
    return modules, graph


def layer(module):
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "nnbuild"


def test_every_module_has_a_layer():
    modules, _ = imports()
    assert {layer(m) for m in modules} <= set(RANK), sorted({layer(m) for m in modules} - set(RANK))


def test_no_import_against_the_pipeline_order():
    _, graph = imports()
    wrong = []
    for module, targets in sorted(graph.items()):
        for target in sorted(targets):
            a, b = layer(module), layer(target)
            if a == b:
                continue
            if RANK[b] > RANK[a] or (a in AFTER_FRONTENDS and b == "frontends"):
                wrong.append(f"{module} -> {target}")
    assert wrong == [], "imports against the layering:\n" + "\n".join(wrong)


def test_no_import_cycles():
    _, graph = imports()
    index, low, stack, on, cycles = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in list(graph):
        if v not in index:
            visit(v)
    # a package's __init__ importing its own submodules lazily is not a cycle of the design
    cycles = [c for c in cycles if not all(m.startswith(c[0] + ".") or m == c[0] for m in c)]
    assert cycles == [], cycles


def test_kind_and_tool_names_stay_in_their_homes():
    """No string test of a model kind, a simulator or an analyzer outside its registry/module."""
    homes = {"'tpg'": ("kinds/tpg.py", "kinds/__init__.py", "codegen/tpg_", "frontends/gegelati_dot.py", "ir/tpg"),
             "'simavr'": ("runners/", "wcet/"), "'qemu": ("runners/",), "'native'": ("runners/",),
             "'builtin-avr'": ("wcet/",), "'otawa'": ("wcet/",), "'platin'": ("wcet/",)}
    found = []
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE).as_posix()
        text = path.read_text().replace('"', "'")
        for needle, allowed in homes.items():
            if needle in text and not rel.startswith(allowed):
                found.append(f"{rel}: {needle}")
    assert found == [], found


def test_every_module_imports():
    """The quick tier touches every module: each one imports on its own (no hidden order dependency)."""
    import importlib
    import subprocess
    import sys
    modules, _ = imports()
    names = sorted(m for m in modules if not m.endswith("__main__"))
    code = "import importlib, sys\nfor m in sys.argv[1:]:\n    importlib.import_module(m)\n"
    run = subprocess.run([sys.executable, "-c", code, *names], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-2000:]
    assert importlib.import_module("nnbuild.steps").STEPS
