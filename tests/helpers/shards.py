"""Shared checks of an opened shard: its documents, and whether a token view is zero-copy."""

from __future__ import annotations

import mmap
from collections.abc import Sequence
from pathlib import Path

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


def write_megatron_documents(prefix: Path, tokens: np.ndarray, lengths: Sequence[int]) -> Path:
    """A Megatron dataset ``prefix.bin``/``.idx`` cutting ``tokens`` into documents of
    ``lengths`` (one sequence each), written (or rewritten) with streamload's writer."""
    from streamload.formats.megatron.megatron import MegatronWriter

    with MegatronWriter(prefix, tokens.dtype) as writer:
        begin = 0
        for n in lengths:
            writer.add_document(tokens[begin : begin + n], lengths=[n])
            begin += n
    return prefix.with_name(prefix.name + ".bin")
