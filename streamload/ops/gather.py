"""Gathering windows of tokens from a source's shards, one slice copy per window.

The shards of a source form one stream; ``offsets[i]`` is the stream offset of shard i's
first token. A window is located with one ``searchsorted`` over shards (never over documents)
and copied straight from the memory map into the output row, so the work per window is one
``memcpy``. Windows that straddle two shards (only with ``cross_shard = true``) are stitched.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

import numpy as np

from streamload.errors import FormatError
from streamload.formats.base import ShardInfo, TokenShard
from streamload.formats.registry import open_shard
from streamload.ops.masks import starts_from_offsets

__all__ = ["MAX_OPEN_SHARDS", "ShardSet"]

MAX_OPEN_SHARDS = 256
"""Shards kept mapped per process; older ones are unmapped (each map holds a file handle)."""


def _common_dtype(shards: tuple[ShardInfo, ...]) -> np.dtype:
    """The narrowest integer dtype holding every shard's tokens (uint16 + uint32 → uint32)."""
    dtypes = sorted({np.dtype(s.dtype).newbyteorder("=") for s in shards}, key=str)
    common = np.result_type(*dtypes)
    if common.kind not in "ui":
        found = ", ".join(
            f"{d.name} ({next(s.path for s in shards if np.dtype(s.dtype).newbyteorder('=') == d)})"
            for d in dtypes
        )
        raise FormatError(
            f"shards of one source hold token dtypes no integer dtype can hold together: {found}"
        )
    return common


class ShardSet:
    """The shards of one source, opened lazily in whichever process uses them.

    Pickling drops the open maps, so a ``ShardSet`` travels cheaply into worker processes.

    Args:
        shards: The described shards, in stream order.
    """

    def __init__(self, shards: tuple[ShardInfo, ...]) -> None:
        self.shards = shards
        counts = np.array([s.num_tokens for s in shards], dtype=np.int64)
        self.offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        self.dtype = _common_dtype(shards)
        self._open: OrderedDict[int, TokenShard] = OrderedDict()
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_open"] = OrderedDict()
        del state["_lock"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    @property
    def num_tokens(self) -> int:
        """Tokens in the whole stream."""
        return int(self.offsets[-1])

    def shard(self, index: int) -> TokenShard:
        """The opened shard ``index`` (opened on first use in this process; thread-safe)."""
        with self._lock:  # thread workers share the cache; eviction races get/move_to_end
            opened = self._open.get(index)
            if opened is None:
                opened = open_shard(self.shards[index])
                self._open[index] = opened
                if len(self._open) > MAX_OPEN_SHARDS:
                    self._open.popitem(last=False)
            else:
                self._open.move_to_end(index)
            return opened

    def locate(self, stream_offset: int) -> tuple[int, int]:
        """(shard index, offset inside the shard) of a stream offset."""
        index = int(np.searchsorted(self.offsets, stream_offset, side="right")) - 1
        return index, stream_offset - int(self.offsets[index])

    def gather(self, starts: np.ndarray, out: np.ndarray) -> np.ndarray:
        """Fill ``out[i]`` with stream tokens ``[starts[i], starts[i] + out.shape[1])``.

        Args:
            starts: Stream offsets, int64 ``[n]``.
            out: Output ``[n, length]``; any integer dtype wide enough for the tokens.

        Returns:
            ``out``.
        """
        length = out.shape[1]
        shard_ids = np.searchsorted(self.offsets, starts, side="right") - 1
        local = starts - self.offsets[shard_ids]
        ends = self.offsets[shard_ids + 1] - self.offsets[shard_ids]
        inside = (local + length <= ends).tolist()
        for row, (sid, loc, fits) in enumerate(
            zip(shard_ids.tolist(), local.tolist(), inside, strict=True)
        ):
            if fits:
                out[row] = self.shard(sid).tokens(loc, loc + length)
            else:
                self._stitch(sid, loc, out[row])
        return out

    def _stitch(self, sid: int, loc: int, row: np.ndarray) -> None:
        filled = 0
        while filled < row.shape[0]:
            piece = self.shard(sid).tokens(loc, loc + row.shape[0] - filled)
            row[filled : filled + piece.shape[0]] = piece
            filled += piece.shape[0]
            sid, loc = sid + 1, 0

    def document_starts(self, starts: np.ndarray, width: int) -> np.ndarray:
        """Document starts ``[n, width]`` of windows from the shards' document indexes.

        ``out[i, t]`` is True when stream token ``starts[i] + t`` (t > 0) begins a document;
        a shard's first token always does. Work is per window and per shard it touches (a
        ``searchsorted`` in the mmapped index), never proportional to the document count.
        """
        out = np.zeros((starts.shape[0], width), dtype=bool)
        first = np.searchsorted(self.offsets, starts, side="right") - 1
        last = np.searchsorted(self.offsets, starts + width - 1, side="right") - 1
        spans = [
            np.arange(f + 1, t)
            for f, t in zip(first.tolist(), last.tolist(), strict=True)
            if t - f > 1
        ]
        for sid in np.unique(np.concatenate([first, last, *spans])).tolist():
            rows = np.flatnonzero((first <= sid) & (last >= sid))
            bounds = self.shard(sid).document_bounds()
            if bounds is None:
                raise FormatError(f"{self.shards[sid].path}: format has no document index")
            local = starts[rows] - self.offsets[sid]
            out[rows] |= starts_from_offsets(local, width, bounds)
        return out
