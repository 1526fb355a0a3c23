"""Names of a package loaded on first use (PEP 562), so importing the package stays light.

Example (in a package's ``__init__.py``)::

    __getattr__ = lazy_attributes(__name__, globals(), {"RemoteStore": "streamload.remote.store"})
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_attributes"]


def lazy_attributes(
    package: str, namespace: dict[str, Any], table: Mapping[str, str]
) -> Callable[[str], Any]:
    """A module ``__getattr__`` that imports ``table[name]`` on first use and keeps the value
    in ``namespace`` (the package's ``globals()``), so later lookups are plain ones."""

    def __getattr__(name: str) -> Any:
        module = table.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    return __getattr__
