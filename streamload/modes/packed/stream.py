"""``sampling.mode = "packed"`` and ``"padded"``: whole documents as samples.

Everything above a source is the shared
:class:`~streamload.streams.source_stream.SourceStream`'s:
passes, mixtures (a mixture allocates *samples* per global batch), the rank split, the cursor
and its state. Only what a source-local sample holds changes (:class:`~streamload.streams.
packed_source.PackedSource`): its items (whole documents, or pieces of long ones), contiguous
from position 0, then ``pad_token_id``. A chunk carries each row's data length, so labels
that are padding become −100, and with masks every item is its own document and the padding
the row's last segment (docs/design.md §3.1).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from streamload.modes.packed.plan_cache import packing_rule
from streamload.modes.packed.source import PackedSource
from streamload.streams.chunks import (
    ChunkPlan,
    TokenChunk,
    new_loss_mask,
    put_loss_mask,
    put_rows,
)
from streamload.streams.cursor import StreamCursor
from streamload.streams.layout import BatchLayout
from streamload.streams.source_stream import SourceStream

__all__ = ["PackedStream"]


class PackedStream(SourceStream):
    """Samples of whole documents in their global order (implements
    :class:`streamload.streams.interface.SampleStream`).

    Args:
        config: The data config (``packed`` or ``padded`` mode).
        catalogs: Described sources, one per ``config.sources`` entry.
    """

    source_class = PackedSource
    sources: tuple[PackedSource, ...]
    layout = BatchLayout(label_padding=True, documents="items")

    @property
    def has_documents(self) -> bool:
        """Items are documents: a chunk always knows where they start."""
        return True

    def read_chunk(self, plan: ChunkPlan, documents: bool) -> TokenChunk:
        """Tokens, data lengths and (with ``documents``) item starts of a chunk's samples."""
        src = plan.sources.ravel()
        local = plan.local_ids.ravel()
        dtype = np.result_type(*[s.shards.dtype for s in self.sources])
        width = self.seq_len + 1
        tokens = np.empty((src.shape[0], width), dtype=dtype)
        starts = np.empty(src.shape[0], dtype=np.int64)
        lengths = np.empty(src.shape[0], dtype=np.int64)
        doc_starts = np.zeros(tokens.shape, dtype=bool) if documents else None
        skipped = np.zeros(src.shape[0], dtype=bool)
        loss_mask = new_loss_mask(self.sources, tokens.shape)
        for index in np.unique(src).tolist():
            rows = np.flatnonzero(src == index)
            block = self.sources[index].read_rows(local[rows])
            tokens, starts = put_rows(tokens, rows, block[0]), put_rows(starts, rows, block[1])
            lengths = put_rows(lengths, rows, block[2])
            if doc_starts is not None:
                doc_starts = put_rows(doc_starts, rows, block[3])
            skipped[rows] = block[4]
            if loss_mask is not None:
                loss_mask = put_loss_mask(loss_mask, rows, block[5])
        return TokenChunk(
            plan,
            tokens,
            starts,
            doc_starts,
            skipped_rows=np.flatnonzero(skipped),
            lengths=lengths,
            loss_mask=loss_mask,
        )

    def fingerprint(self, cursor: StreamCursor | None = None) -> dict[str, Any]:
        """The shared fingerprint plus what decides a sample's items: the packing rule
        (algorithm, and the group size when groups are set), ``long_documents``,
        ``pad_token_id``, the EOS that finds documents and ``max_documents_per_sample``
        (only when set: states saved without it are unchanged)."""
        out = super().fingerprint(cursor)
        out["packing"] = {
            **packing_rule(self.config),  # a change of the rule re-keys states
            "long_documents": self.config.sampling.long_documents.value,
            "pad_token_id": self.config.pad_token_id,
            "eos_token_id": self.config.eos_token_id,
        }
        cap = self.config.sampling.max_documents_per_sample
        if cap is not None:
            out["packing"]["max_documents_per_sample"] = int(cap)
        return out
