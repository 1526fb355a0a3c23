"""Stages 2–4 (read, carve, shuffle): sample ids → window tokens, one block per chunk."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
from torchdata.nodes import BaseNode

from streamload.nodes.map_stage import MapStage
from streamload.streams.chunks import ChunkPlan, TokenChunk
from streamload.streams.interface import SampleStream
from streamload.streams.seq_len import cut_chunk

__all__ = ["IGNORE_INDEX", "ReadWindows", "WindowReader", "mask_skipped"]

IGNORE_INDEX = -100
"""Label of a sample skipped under ``on_error = "skip"`` (PyTorch's cross-entropy ignores it)."""


def mask_skipped(batch: dict[str, Any], chunk: TokenChunk) -> dict[str, Any]:
    """Set every label of the chunk's skipped rows to ``IGNORE_INDEX`` (a compact batch:
    its ``label_mask`` to false), so they add no loss; the samples keep their index, so order
    and resumption are unchanged."""
    rows = chunk.skipped_rows
    if rows.size:
        key, fill = ("labels", IGNORE_INDEX) if "labels" in batch else ("label_mask", False)
        labels = batch[key]
        labels.view(-1, labels.shape[-1])[rows] = fill
    return batch


class WindowReader:
    """Picklable map ``ChunkPlan → TokenChunk`` (the stream's shards open lazily per process).

    Args:
        stream: The sample stream.
        documents: Also find document starts (the format's index, else EOS) for masks.
    """

    def __init__(self, stream: SampleStream, documents: bool = False) -> None:
        self.stream = stream
        self.documents = documents

    def __call__(self, plan: ChunkPlan) -> TokenChunk:
        chunk = self._read(plan)
        if plan.row_length is None:
            return chunk
        return cut_chunk(chunk, plan.row_length)  # a seq_len warm-up step: rows of its length

    def _read(self, plan: ChunkPlan) -> TokenChunk:
        remote = [s.shards for s in self.stream.sources if s.shards.remote]
        for shards in remote:
            shards.take_skipped()
        chunk = self.stream.read_chunk(plan, self.documents)
        if not remote:
            return chunk
        src = plan.sources.ravel()
        skipped = np.zeros(src.shape[0], dtype=bool)
        for index, source in enumerate(self.stream.sources):
            starts = source.shards.take_skipped() if source.shards.remote else []
            if starts:
                skipped |= (src == index) & np.isin(chunk.starts, starts)
        if not skipped.any():
            return chunk
        return replace(chunk, skipped_rows=np.flatnonzero(skipped))


class ReadWindows(MapStage[ChunkPlan, TokenChunk]):
    """Read the windows of each chunk plan.

    State:
        The source's state (this stage holds nothing).
    """

    def __init__(
        self, source: BaseNode[ChunkPlan], stream: SampleStream, documents: bool = False
    ) -> None:
        super().__init__(source, WindowReader(stream, documents))
