"""No import cycles between introspect's own modules, and every module importable on its
own in a fresh interpreter.

The graph is read from the source (``ast``): every ``import introspect.x`` and ``from
introspect.x import y`` anywhere in a module — at the top or inside a function, since an
import inside a function that closes a cycle is still a cycle — except under ``if
TYPE_CHECKING:``, which never runs. A module's own ancestor packages are not edges
(Python imports them first, whoever asks). Heavy optional libraries (torch, MLX,
transformers) may stay inside functions: the rule is for introspect's own modules.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import introspect.adapters

import introspect

PACKAGE = Path(introspect.__file__).resolve().parent
#: ``adapters/`` installs as ``introspect.adapters`` (pyproject's package-dir): walked
#: where the import system finds it, beside the package or linked inside it.
ADAPTERS = Path(introspect.adapters.__file__).resolve().parent


def _modules() -> dict[str, Path]:
    """Every module of the package, ``introspect.adapters`` included."""
    out: dict[str, Path] = {}
    _walk(PACKAGE, ("introspect",), out)
    _walk(ADAPTERS, ("introspect", "adapters"), out)
    return out


def _walk(root: Path, prefix: tuple[str, ...], out: dict[str, Path]) -> None:
    for folder, dirs, files in os.walk(root, followlinks=True):
        dirs[:] = sorted(d for d in dirs if d not in ("__pycache__", "adapters"))
        rel = Path(folder).relative_to(root)
        if rel.parts and not (Path(folder) / "__init__.py").exists():
            dirs[:] = []  # a data folder, not a package
            continue
        for name in sorted(files):
            if not name.endswith(".py"):
                continue
            parts = [*prefix, *rel.parts]
            if name != "__init__.py":
                parts.append(name[:-3])
            out[".".join(parts)] = Path(folder) / name


MODULES = _modules()


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST):
    """Every import statement that can run (not under ``if TYPE_CHECKING:``)."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and _is_type_checking(node):
            yield from (n for branch in node.orelse for n in _imports_in(branch))
            continue
        yield from _imports_in(node)


def _imports_in(node: ast.AST):
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        yield node
    else:
        yield from _imports(node)


def _owner(name: str) -> str | None:
    """The project module ``name`` is, or is an attribute of."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _targets(module: str, node: ast.Import | ast.ImportFrom) -> set[str]:
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        base = node.module or ""
        if node.level:
            here = module.split(".")
            if not MODULES[module].name == "__init__.py":
                here = here[:-1]
            here = here[: len(here) - (node.level - 1)]
            base = ".".join([*here, *([node.module] if node.module else [])])
        # ``from pkg import sub``: the submodule; ``from pkg import name``: pkg itself.
        names = [f"{base}.{alias.name}" for alias in node.names]
    out = set()
    for name in names:
        if not name.startswith("introspect"):
            continue
        owner = _owner(name)
        if owner and owner != module and not module.startswith(owner + "."):
            out.add(owner)
    return out


def import_graph() -> dict[str, set[str]]:
    """``{module: the project modules it imports}``."""
    graph = {}
    for module, path in MODULES.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        graph[module] = set().union(*(_targets(module, n) for n in _imports(tree)))
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1 or v in graph.get(v, ()):
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_graph_sees_the_package_and_its_edges():
    graph = import_graph()
    # the adapters (a linked folder) and the sub-packages are walked
    assert "introspect.adapters.bundled" in graph
    assert "introspect.refined.saved" in graph and "introspect.measure.mlx_replay_trace" in graph
    # a top-level import, a function-level one and a relative one are all edges
    assert "introspect.params" in graph["introspect.spec"]
    assert "introspect.refined.lora" in graph["introspect.refined.causes"]  # in a function
    assert "introspect.measure.mlx_replay_moe" in graph["introspect.measure.mlx_replay_trace"]


def test_the_cycle_finder_finds_a_cycle_through_a_function_level_import():
    source = {
        "introspect.a": "from introspect import b\n",
        "introspect.b": "def f():\n    from introspect.c import g\n",
        "introspect.c": "import introspect.a\n",
        "introspect.d": "TYPE_CHECKING = False\nif TYPE_CHECKING:\n    import introspect.a\n",
    }
    saved = dict(MODULES)
    try:
        MODULES.update({m: Path(f"/nonexistent/{m}.py") for m in source})
        graph = {m: set().union(*(_targets(m, n) for n in _imports(ast.parse(s))), set())
                 for m, s in source.items()}  # fmt: skip
    finally:
        MODULES.clear()
        MODULES.update(saved)
    assert cycles(graph) == [["introspect.a", "introspect.b", "introspect.c"]]
    assert graph["introspect.d"] == set()  # TYPE_CHECKING imports never run


def test_no_import_cycles():
    found = cycles(import_graph())
    assert found == [], "import cycles: " + "; ".join(" ↔ ".join(c) for c in found)


def test_the_spec_imports_no_estimator():
    graph = import_graph()
    estimators = {"introspect.simplified", "introspect.refined"}
    reach, todo = set(), ["introspect.spec"]
    while todo:
        for dep in graph[todo.pop()] - reach:
            reach.add(dep)
            todo.append(dep)
    assert not {m for m in reach if m in estimators or m.startswith("introspect.refined.")}


#: Run in a fresh interpreter that has imported none of introspect: it loads the heavy
#: third-party libraries once (an import order of *their* modules is not what the test
#: checks), then forks one child per module, which imports that module first and reports
#: the last line of its error. ``fork`` copies the loaded libraries, so each child costs
#: its own modules' import, not torch's again.
_FORKING_IMPORTER = r"""
import importlib, os, sys, traceback
for heavy in ("torch", "transformers", "safetensors", "huggingface_hub", "numpy"):
    try:
        importlib.import_module(heavy)
    except Exception:
        pass
assert not any(m == "introspect" or m.startswith("introspect.") for m in sys.modules)
failed = []
for module in sys.argv[1:]:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        code, message = 0, ""
        try:
            importlib.import_module(module)
        except BaseException:
            code, message = 1, traceback.format_exc().strip().splitlines()[-1]
        os.write(write, message.encode())
        os._exit(code)
    os.close(write)
    with os.fdopen(read) as pipe:
        message = pipe.read()
    _, status = os.waitpid(pid, 0)
    if status != 0:
        failed.append(f"{module}: {message or status}")
print("\n".join(failed))
sys.exit(1 if failed else 0)
"""


def test_every_module_imports_on_its_own():
    """Each module first in an interpreter that has imported nothing of introspect."""
    # __main__ runs the command line when imported: not a module to import alone
    modules = sorted(set(MODULES) - {"introspect.__main__"})
    proc = subprocess.run(
        [sys.executable, "-c", _FORKING_IMPORTER, *modules],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=PACKAGE.parent,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr[-2000:]


def test_the_importer_reports_a_module_that_fails_alone(tmp_path):
    """The forking importer names a module whose import fails, with its error."""
    (tmp_path / "broken_alone.py").write_text("import introspect_missing_module\n")
    proc = subprocess.run(
        [sys.executable, "-c", _FORKING_IMPORTER, "json", "broken_alone"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
    )
    assert proc.returncode == 1
    assert "broken_alone: ModuleNotFoundError" in proc.stdout and "json" not in proc.stdout
