"""Optional extras in tests: skip a test of an extra where it is not installed."""

from __future__ import annotations

import importlib

import pytest

__all__ = ["has_module", "needs"]


def has_module(name: str) -> bool:
    """Whether ``import name`` works (an import, not ``find_spec``: a package that fails to
    import is as absent as a missing one)."""
    try:
        importlib.import_module(name)
    except ImportError:
        return False
    return True


def needs(name: str, extra: str) -> None:
    """Skip the calling test unless ``name`` imports; ``extra`` names what installs it."""
    pytest.importorskip(name, reason=f"needs {name} (pip install 'streamload[{extra}]')")
