"""Size and import guardrails over the package's source (house style, docs/design.md §2).

Checked on the syntax tree alone (nothing of the package is imported, so a broken module still
gets a precise report):

- every ``streamload/**/*.py`` file holds at most ``MAX_FILE_LINES`` lines;
- every function or method spans at most ``MAX_FUNCTION_LINES`` lines, from its ``def`` line to
  its last line (decorators excluded);
- no import cycle at import time between the modules of one folder: module-level imports only
  (an import under ``if TYPE_CHECKING:`` never runs, and one inside a function runs after every
  module has loaded, so neither can close a cycle at import time).

``PENDING`` lists violations that are being fixed right now, so CI stays green meanwhile. Every
entry must still violate (a test fails once it no longer does), so the list only shrinks:
delete the entry in the commit that fixes it, and never add one to dodge a limit.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "streamload"
MAX_FILE_LINES = 400
MAX_FUNCTION_LINES = 60

_RESTRUCTURE = "issue 30: being restructured by the lead"

# Keys: ``path`` (a file over MAX_FILE_LINES), ``path::Qual.name`` (a function over
# MAX_FUNCTION_LINES), ``folder/`` (a folder with an import cycle), paths relative to the repo.
PENDING: dict[str, str] = {}


def _relative(path: Path) -> str:
    return path.relative_to(REPO).as_posix()


@functools.cache
def _sources() -> tuple[Path, ...]:
    return tuple(sorted(PACKAGE.rglob("*.py")))


@functools.cache
def _trees() -> dict[Path, ast.Module]:
    return {path: ast.parse(path.read_text(), filename=str(path)) for path in _sources()}


# --- sizes -------------------------------------------------------------------------------------


@functools.cache
def _long_files() -> dict[str, int]:
    """``{path: line count}`` of every file over the limit."""
    counts = {_relative(p): len(p.read_text().splitlines()) for p in _sources()}
    return {path: n for path, n in counts.items() if n > MAX_FILE_LINES}


def _functions(node: ast.AST, prefix: str = "") -> Iterator[tuple[str, ast.AST]]:
    """``(qualified name, node)`` of every function under ``node``, nested ones included."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
            yield prefix + child.name, child
            yield from _functions(child, prefix + child.name + ".")
        elif isinstance(child, ast.ClassDef):
            yield from _functions(child, prefix + child.name + ".")
        else:
            yield from _functions(child, prefix)


@functools.cache
def _long_functions() -> dict[str, int]:
    """``{path::qualname: line count}`` of every function over the limit."""
    found = {}
    for path, tree in _trees().items():
        for name, node in _functions(tree):
            assert node.end_lineno is not None
            lines = node.end_lineno - node.lineno + 1
            if lines > MAX_FUNCTION_LINES:
                found[f"{_relative(path)}::{name}"] = lines
    return found


# --- import cycles -----------------------------------------------------------------------------


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _folder(path: Path) -> str:
    return _relative(path.parent) + "/"


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _runtime_imports(body: list[ast.stmt]) -> Iterator[ast.Import | ast.ImportFrom]:
    """The imports a module runs while it loads: its top level, ``if``/``try``/``with`` blocks
    and class bodies, but not function bodies nor ``if TYPE_CHECKING:`` branches."""
    for stmt in body:
        if isinstance(stmt, ast.Import | ast.ImportFrom):
            yield stmt
        elif isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        elif isinstance(stmt, ast.If) and _is_type_checking(stmt.test):
            yield from _runtime_imports(stmt.orelse)
        else:
            for field in ("body", "orelse", "finalbody", "handlers"):
                block = getattr(stmt, field, None)
                if isinstance(block, list):
                    nested = [s.body if isinstance(s, ast.ExceptHandler) else [s] for s in block]
                    yield from _runtime_imports([s for group in nested for s in group])


def _imported_modules(
    stmt: ast.Import | ast.ImportFrom, path: Path, modules: set[str]
) -> Iterator[str]:
    """The modules ``stmt`` loads: ``import a.b`` → ``a.b``; ``from a import b`` → ``a.b``
    where that is a module (``from pkg import submodule``), else ``a`` (a name defined there)."""
    if isinstance(stmt, ast.Import):
        yield from (alias.name for alias in stmt.names)
        return
    if stmt.level:
        package = _module_name(path).split(".")
        if path.name != "__init__.py":
            package = package[:-1]
        package = package[: len(package) - stmt.level + 1]
        base = ".".join(package + ([stmt.module] if stmt.module else []))
    else:
        base = stmt.module or ""
    for alias in stmt.names:
        yield f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base


def _import_graph() -> dict[str, dict[str, set[str]]]:
    """``{folder: {module: modules of that folder it imports at import time}}``."""
    modules = {_module_name(p): p for p in _sources()}
    graph: dict[str, dict[str, set[str]]] = {}
    for path, tree in _trees().items():
        name = _module_name(path)
        edges = graph.setdefault(_folder(path), {}).setdefault(name, set())
        for stmt in _runtime_imports(tree.body):
            for target in _imported_modules(stmt, path, set(modules)):
                if target in modules and _folder(modules[target]) == _folder(path):
                    edges.add(target)
    return graph


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module, and self-imports (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1 or node in edges.get(node, ()):
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


@functools.cache
def _folder_cycles() -> dict[str, list[list[str]]]:
    cycles = {folder: _cycles(edges) for folder, edges in _import_graph().items()}
    return {folder: found for folder, found in sorted(cycles.items()) if found}


# --- tests -------------------------------------------------------------------------------------


def test_files_are_short() -> None:
    long = {p: n for p, n in _long_files().items() if p not in PENDING}
    assert not long, "\n".join(
        f"{p}: {n} lines, over the limit of {MAX_FILE_LINES}; split it along a seam"
        for p, n in long.items()
    )


def test_functions_are_short() -> None:
    long = {f: n for f, n in _long_functions().items() if f not in PENDING}
    assert not long, "\n".join(
        f"{f}: {n} lines from def to its end, over the limit of {MAX_FUNCTION_LINES}"
        for f, n in long.items()
    )


def test_no_import_cycle_inside_a_folder() -> None:
    cycles = {f: c for f, c in _folder_cycles().items() if f not in PENDING}
    assert not cycles, "\n".join(
        f"{folder}: modules import each other at import time (limit: no cycle): "
        + " <-> ".join(component)
        for folder, found in cycles.items()
        for component in found
    )


@pytest.mark.parametrize("key", sorted(PENDING))
def test_every_pending_entry_still_violates(key: str) -> None:
    if key.endswith("/"):
        still = key in _folder_cycles()
    elif "::" in key:
        still = key in _long_functions()
    else:
        still = key in _long_files()
    assert still, f"{key} is within the limits now: delete its PENDING entry"


def test_the_checks_find_what_they_look_for() -> None:
    """The cycle finder on a known graph: a two-module cycle, a self-import, an acyclic tail."""
    edges = {"a": {"b"}, "b": {"a", "c"}, "c": set(), "d": {"d"}}
    assert _cycles(edges) == [["a", "b"], ["d"]]
    source = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import x\n"
    source += "def f():\n    import y\nclass C:\n    import z\ntry:\n    import w\n"
    source += "except ImportError:\n    import v\n"
    names = [a.name for s in _runtime_imports(ast.parse(source).body) for a in s.names]
    assert names == ["TYPE_CHECKING", "z", "w", "v"]
    path = PACKAGE / "remote" / "store.py"
    modules = {"streamload", "streamload.errors", "streamload.remote", "streamload.remote.fetch"}
    expected = {
        "from . import fetch": ["streamload.remote.fetch"],
        "from .fetch import RangeFetcher": ["streamload.remote.fetch"],
        "from streamload.remote import fetch, RemoteStore": [
            "streamload.remote.fetch",
            "streamload.remote",
        ],
        "from .. import errors": ["streamload.errors"],
        "import streamload.remote.fetch": ["streamload.remote.fetch"],
    }
    for line, targets in expected.items():
        stmt = ast.parse(line).body[0]
        assert isinstance(stmt, ast.Import | ast.ImportFrom)
        assert list(_imported_modules(stmt, path, modules)) == targets, line
