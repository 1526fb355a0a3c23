"""Shared checks of an opened shard: its documents, and whether a token view is zero-copy."""

from __future__ import annotations

import mmap

import numpy as np

from streamload.formats.base import TokenShard


def documents(shard: TokenShard) -> list[list[int]]:
    """Every document of ``shard`` as a list of token ids (from its document bounds)."""
    b = shard.document_bounds()
    assert b is not None and b.dtype == np.int64
    return [shard.tokens(int(b[i]), int(b[i + 1])).tolist() for i in range(len(b) - 1)]


def is_mapped(view: np.ndarray) -> bool:
    """Whether ``view`` is a zero-copy view of a memory-mapped file."""
    base = view
    while isinstance(base, np.ndarray) and base.base is not None:
        base = base.base
    if isinstance(base, memoryview):  # np.frombuffer over a map
        base = base.obj
    return isinstance(base, mmap.mmap)
