"""``sampling.mode = "concat"``: windows over each source's concatenated tokens.

Sample ``g`` is a window of ``seq_len + 1`` tokens (stride ``seq_len``) chosen by a keyed
permutation; passes, mixtures and the cursor are the shared
:class:`~streamload.streams.source_stream.SourceStream`'s. Only reading is concat's own.
"""

from __future__ import annotations

import numpy as np

from streamload.ops.masks import starts_from_eos
from streamload.streams.chunks import (
    ChunkPlan,
    TokenChunk,
    new_loss_mask,
    put_loss_mask,
    put_rows,
)
from streamload.streams.source_stream import SourceStream
from streamload.streams.token_source import TokenSource

__all__ = ["ConcatStream"]


class ConcatStream(SourceStream):
    """Windows of ``seq_len + 1`` tokens in their global order (implements
    :class:`streamload.streams.interface.SampleStream`).

    Args:
        config: The data config.
        catalogs: Described sources, one per ``config.sources`` entry.
    """

    def read_chunk(self, plan: ChunkPlan, documents: bool) -> TokenChunk:
        """Tokens (and, with ``documents``, document starts) of a chunk plan's samples."""
        src = plan.sources.ravel()
        local = plan.local_ids.ravel()
        dtype = np.result_type(*[s.shards.dtype for s in self.sources])
        tokens = np.empty((src.shape[0], self.seq_len + 1), dtype=dtype)
        starts = np.empty(src.shape[0], dtype=np.int64)
        doc_starts = np.zeros(tokens.shape, dtype=bool) if documents else None
        loss_mask = new_loss_mask(self.sources, tokens.shape)
        for index in np.unique(src).tolist():
            rows = np.flatnonzero(src == index)
            source = self.sources[index]
            part, part_starts = source.read(local[rows])
            tokens, starts = put_rows(tokens, rows, part), put_rows(starts, rows, part_starts)
            if doc_starts is not None:
                found = self._doc_starts(source, part, part_starts)
                doc_starts = put_rows(doc_starts, rows, found)
            if loss_mask is not None:
                loss_mask = put_loss_mask(loss_mask, rows, source.read_loss_mask(part_starts))
        return TokenChunk(plan, tokens, starts, doc_starts, loss_mask=loss_mask)

    def _doc_starts(
        self, source: TokenSource, tokens: np.ndarray, starts: np.ndarray
    ) -> np.ndarray:
        if source.has_documents:
            return source.document_starts(starts)
        return starts_from_eos(tokens, int(self.config.eos_token_id))  # type: ignore[arg-type]
