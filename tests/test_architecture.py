"""The package's shape is a contract (docs/design.md §2): checked here beside the import-layer
contract that ``lint-imports`` runs in CI (pyproject.toml ``[tool.importlinter]``)."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

import streamload

if TYPE_CHECKING:
    import grimp

PACKAGE = Path(streamload.__file__).parent
ROOT_MODULES = {
    "__init__.py",
    "__main__.py",
    "dataset.py",
    "distributed.py",
    "errors.py",
    "loader.py",
    "testing.py",
}


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    # grimp comes with import-linter (the dev extra): without it only the graph tests skip.
    importer = pytest.importorskip("grimp", reason="import-linter (grimp) is not installed")
    return importer.build_graph("streamload")


def _unit(module: str) -> str:
    """A module's folder (``streamload.streams.concat`` → ``streamload.streams``); a root
    module is a unit of its own (each sits in its own layer)."""
    path = PACKAGE.joinpath(*module.split(".")[1:])
    folder = module if path.is_dir() else module.rpartition(".")[0]
    return module if folder == "streamload" else folder


def test_the_root_holds_only_entry_points() -> None:
    assert {p.name for p in PACKAGE.glob("*.py")} == ROOT_MODULES


def test_no_module_imports_another_packages_private_module(graph: grimp.ImportGraph) -> None:
    offenders = []
    for module in sorted(graph.modules):
        for imported in graph.find_modules_directly_imported_by(module):
            parts = imported.split(".")
            private = [i for i, p in enumerate(parts) if p.startswith("_") and p[:2] != "__"]
            if not private:
                continue
            owner = ".".join(parts[: private[0]])
            if module != owner and not module.startswith(owner + "."):
                offenders.append(f"{module} -> {imported}")
    assert offenders == []


def test_no_import_cycle_between_folders(graph: grimp.ImportGraph) -> None:
    edges: dict[str, set[str]] = {}
    for a in graph.modules:
        for b in graph.find_modules_directly_imported_by(a):
            if _unit(a) != _unit(b):
                edges.setdefault(_unit(a), set()).add(_unit(b))
    cycles = [
        f"{unit} -> ... -> {unit}" for unit in sorted(edges) if unit in _reachable(edges, unit)
    ]
    assert cycles == []


def _reachable(edges: dict[str, set[str]], start: str) -> set[str]:
    """Every unit reachable from ``start`` by one import or more."""
    seen: set[str] = set()
    todo = list(edges.get(start, ()))
    while todo:
        unit = todo.pop()
        if unit not in seen:
            seen.add(unit)
            todo.extend(edges.get(unit, ()))
    return seen


def test_every_error_class_is_in_errors_and_exported() -> None:
    from streamload import errors

    classes = {
        name
        for name, value in vars(errors).items()
        if isinstance(value, type) and issubclass(value, streamload.StreamloadError)
    }
    assert classes <= set(streamload.__all__)
    for path in PACKAGE.rglob("*.py"):
        if path.name != "errors.py":
            assert "(StreamloadError)" not in path.read_text(), path


@pytest.mark.parametrize("old", sorted(streamload._MOVED))
def test_old_module_paths_import_the_new_module_with_a_warning(old: str) -> None:
    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match=streamload._MOVED[old]):
        module = importlib.import_module(old)
    assert module is importlib.import_module(streamload._MOVED[old])


def test_import_streamload_leaves_torch_and_numpy_for_later() -> None:
    code = "import sys, streamload; print(sorted({'torch', 'numpy'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_python_dash_m_streamload_is_the_console_script() -> None:
    run = subprocess.run(
        [sys.executable, "-m", "streamload", "--help"], capture_output=True, text=True, check=True
    )
    assert run.stdout.startswith("usage: streamload ")
