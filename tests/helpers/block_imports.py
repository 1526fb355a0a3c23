"""A pytest plugin that makes packages look uninstalled: ``import X`` raises ImportError.

Usage: ``STREAMLOAD_BLOCK_IMPORTS=zstandard,grimp python -m pytest -p
tests.helpers.block_imports …``. The shared environment has every optional extra; this is how
the suite proves its tests of an extra skip, not fail, where the extra is absent
(``tests/test_optional_extras.py``). Loaded with ``-p``, it is installed before any test
module is collected.
"""

from __future__ import annotations

import importlib.abc
import os
import sys
from collections.abc import Sequence
from types import ModuleType

__all__ = ["BLOCKED_ENV", "ImportBlocker"]

BLOCKED_ENV = "STREAMLOAD_BLOCK_IMPORTS"


class ImportBlocker(importlib.abc.MetaPathFinder):
    """Refuse the top-level packages ``names`` and everything under them."""

    def __init__(self, names: Sequence[str]) -> None:
        self.names = frozenset(names)

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> None:
        if fullname.partition(".")[0] in self.names:
            raise ModuleNotFoundError(f"No module named {fullname!r} (blocked)", name=fullname)


_names = [n for n in os.environ.get(BLOCKED_ENV, "").split(",") if n]
if _names:
    for _loaded in [m for m in sys.modules if m.partition(".")[0] in _names]:
        del sys.modules[_loaded]
    sys.meta_path.insert(0, ImportBlocker(_names))
