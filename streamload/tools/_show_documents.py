"""The documents of a shown sample: where each begins in the row, and where it comes from.

Boundaries come from what the loader used: the batch's ``cu_seqlens`` when it carries packing
masks (with every Megatron switch on), else the document starts the stream finds for masks
(the format's index, packed items, or EOS). A segment's first token is then traced back to
its source: concat rows are one window (``window start + position``), packed rows a list of
items (:class:`~streamload.modes.packed.source.PackedSource`'s plan), Megatron rows are not
traced (their pieces come from megatron-core's document index). From the stream offset come
the shard and the offset inside it (``ShardSet.locate``), the document number from the
shard's index, and the format's per-document metadata where it has some (Dolma's CSV ``id``,
``src``, ``loc``; an Arrow or Parquet row's scalar columns, ``id`` first (or the source's
``id_column``):
:func:`~streamload.tools.documents.document_metadata`); datatrove records only a tokenizer
name per shard (``.ds.metadata``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from streamload.ops.masks import starts_from_eos
from streamload.streams.interface import SampleStream
from streamload.tools.documents import document_metadata
from streamload.tools.show import StepBatch

__all__ = ["DocumentTracer", "documents_origin", "row_segments"]

_FIELDS = ("shard", "shard_offset", "document", "document_start", "continued", "metadata")


def _starts_matrix(stream: SampleStream, view: StepBatch) -> np.ndarray | None:
    """Document starts ``[n, seq_len + 1]`` of the rows, or ``None`` when none can be found."""
    chunk = view.chunk
    if chunk.doc_starts is not None:
        return chunk.doc_starts
    eos = stream.config.eos_token_id
    return None if eos is None else starts_from_eos(chunk.tokens, eos)


def documents_origin(stream: SampleStream, source: int) -> str:
    """How a source's document starts are found: ``items``, ``pieces`` (vsl mode: a row is
    part of one document), ``index`` or ``eos``."""
    origin = stream.layout.documents
    if origin is not None:
        return origin
    return "index" if getattr(stream.sources[source], "has_documents", False) else "eos"


def row_segments(stream: SampleStream, view: StepBatch) -> list[list[int] | None]:
    """Per row, the input positions where its segments start (``0`` first), or ``None``.

    With masks (and every Megatron switch on) they are the batch's ``cu_seqlens``: what the
    model attended within; else the stream's document starts in the inputs.
    """
    length = view.chunk.tokens.shape[1] - 1  # vsl mode: the step's length
    cu = view.batch.get("cu_seqlens")
    if cu is not None and all(stream.config.packing.flags):
        return [[int(v) for v in row.tolist() if v < length] for row in cu]
    starts = _starts_matrix(stream, view)
    if starts is None:
        return [None] * view.chunk.tokens.shape[0]
    return [[0, *(np.flatnonzero(row[1:length]) + 1).tolist()] for row in starts]


class DocumentTracer:
    """Traces input positions of shown rows back to shards and documents (shards opened once
    per process by the sources' ``ShardSet``).

    Args:
        stream: The stream the rows came from.
        view: The step's rows.
    """

    def __init__(self, stream: SampleStream, view: StepBatch) -> None:
        self.stream = stream
        self.view = view
        self.eos = stream.config.eos_token_id
        self.traced = stream.layout.traced
        self.shards: dict[str, dict[str, Any]] = {}
        """Every shard a traced document lies in: ``{path: {"format", "tokenizer"}}``."""

    def offset(self, row: int, position: int) -> int | None:
        """Stream offset (in the row's source) of input ``position``; ``None`` for padding or
        a Megatron row."""
        if not self.traced:
            return None
        plan = self.view.plan
        source = self.stream.sources[int(plan.sources.ravel()[row])]
        local = int(plan.local_ids.ravel()[row])
        return source.stream_offset(local, int(self.view.chunk.starts[row]), position)

    @staticmethod
    def blank() -> dict[str, Any]:
        """The fields of :meth:`describe`, all ``None`` (padding, Megatron rows)."""
        return dict.fromkeys(_FIELDS)

    def describe(self, row: int, position: int) -> dict[str, Any]:
        """Where input ``position`` of ``row`` lies: ``shard``, ``shard_offset``, ``document``
        (its number in the shard, ``None`` without an index), ``document_start`` (shard
        offset), ``continued`` (the document began before this position) and ``metadata``
        (the format's per-document fields, or ``None``); all ``None`` when untraced."""
        out = self.blank()
        offset = self.offset(row, position)
        if offset is None:
            return out
        source = self.stream.sources[int(self.view.plan.sources.ravel()[row])]
        sid, local = source.shards.locate(offset)
        info = source.shards.shards[sid]
        shard = source.shards.shard(sid)
        entry = {"format": info.format, "tokenizer": info.meta.get("tokenizer")}
        if info.meta.get("text_input"):  # a text source's cache part: the file it came from
            entry["text_input"] = info.meta["text_input"]
        self.shards.setdefault(info.path, entry)
        out.update(shard=info.path, shard_offset=local)
        bounds = shard.document_bounds()
        if bounds is not None:
            doc = int(np.searchsorted(bounds, local, side="right")) - 1
            out.update(document=doc, document_start=int(bounds[doc]))
            out["continued"] = bool(bounds[doc] < local)
            id_column = source.catalog.config.id_column
            out["metadata"] = document_metadata(shard, doc, id_column)
        elif self.eos is not None:
            out["continued"] = offset > 0 and self._token(source.shards, offset - 1) != self.eos
        return out

    @staticmethod
    def _token(shards: Any, offset: int) -> int:
        out = np.empty((1, 1), dtype=shards.dtype)
        shards.gather(np.array([offset], dtype=np.int64), out)
        return int(out[0, 0])
