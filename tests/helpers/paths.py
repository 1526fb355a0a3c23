"""Fixed places of the repository, whatever the depth of the test file that needs them."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

__all__ = ["DATA", "GOLDEN", "REPO", "TESTS", "load_script"]

TESTS = Path(__file__).resolve().parents[1]
"""The ``tests`` folder."""
REPO = TESTS.parent
"""The repository root (holds ``streamload``, ``examples`` and ``tests``)."""
DATA = TESTS / "data"
"""Tiny files written by real tools (see ``tests/data/README.md``)."""
GOLDEN = TESTS / "golden"
"""Golden outputs of other libraries and the scripts that write them."""


def load_script(path: Path) -> ModuleType:
    """A script of the repository (an example, a golden writer) imported as a module, so a
    test can call its functions without running its ``__main__`` block."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
