"""Adapters that make streamload a drop-in data loader of training frameworks.

One module per framework; each imports its framework only where it must (never at
``import streamload``): :mod:`streamload.integrations.torchtitan`.
"""

from __future__ import annotations

__all__: list[str] = []
