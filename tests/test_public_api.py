"""The public surface is deliberate (issue 30): the root's names and the documented public
modules' ``__all__`` equal the committed list (docs/api.md); changing it changes the list."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PUBLIC = json.loads((ROOT / "tests" / "golden" / "public_api.json").read_text())


def test_docs_api_names_every_public_module() -> None:
    text = (ROOT / "docs" / "api.md").read_text()
    assert all(f"`{module}`" in text for module in PUBLIC), "docs/api.md misses a module"


@pytest.mark.parametrize("module", sorted(PUBLIC))
def test_a_public_modules_names_are_the_committed_ones(module: str) -> None:
    names = sorted(getattr(importlib.import_module(module), "__all__", []))
    added, removed = (
        sorted(set(names) - set(PUBLIC[module])),
        sorted(set(PUBLIC[module]) - set(names)),
    )
    assert not added and not removed, (
        f"{module}: added {added}, removed {removed}; a change of the public API updates "
        "tests/golden/public_api.json and docs/api.md on purpose"
    )


@pytest.mark.parametrize("module", sorted(PUBLIC))
def test_every_public_name_resolves(module: str) -> None:
    loaded = importlib.import_module(module)
    missing = [name for name in PUBLIC[module] if not hasattr(loaded, name)]
    assert not missing, f"{module} lists {missing} in __all__ but has no such names"
