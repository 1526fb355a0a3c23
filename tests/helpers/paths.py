"""Fixed places of the repository, whatever the depth of the test file that needs them."""

from __future__ import annotations

from pathlib import Path

__all__ = ["DATA", "GOLDEN", "REPO", "TESTS"]

TESTS = Path(__file__).resolve().parents[1]
"""The ``tests`` folder."""
REPO = TESTS.parent
"""The repository root (holds ``streamload``, ``examples`` and ``tests``)."""
DATA = TESTS / "data"
"""Tiny files written by real tools (see ``tests/data/README.md``)."""
GOLDEN = TESTS / "golden"
"""Golden outputs of other libraries and the scripts that write them."""
