"""``sampling.mode = "vsl"``: variable sequence lengths, one length per global batch.

Dataset decomposition with a length curriculum (Pouransari et al. 2024; OLMo-core's
``NumpyVSLDataset``): documents are cut into pieces of power-of-two lengths
(:mod:`streamload.plan.vsl`), every global batch holds ``tokens_per_batch`` input tokens of
pieces of one length ``L`` (``tokens_per_batch / L`` rows of ``L + 1`` tokens), and the
curriculum orders an epoch's batches (:mod:`streamload.plan.vsl_curriculum`).

Everything above the source is concat mode's (:class:`~streamload.streams.concat.
ConcatStream`) with one change of unit: the cursor counts **slots** of ``max_seq_len``
inputs, and a global batch is always ``tokens_per_batch / max_seq_len`` slots, whatever its
length. So step ``s`` starts at slot ``s·U``; rank ``r`` of ``W`` takes rows
``[r·R/W, (r+1)·R/W)`` of the step's ``R`` rows (the same tokens on every rank); the state,
its checks and the resumption across world sizes and workers are unchanged. A chunk holds
one step (its rows have their own length). ``sample_index`` of a row is its piece's id in
the source's plan (the same piece in every epoch).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from streamload.config.vsl import default_cycles
from streamload.errors import ConfigError
from streamload.streams.chunks import ChunkPlan, TokenChunk
from streamload.streams.concat import ConcatStream
from streamload.streams.cursor import StreamCursor
from streamload.streams.vsl_plan import LAYOUT
from streamload.streams.vsl_source import VslSource

__all__ = ["VslStream"]


class VslStream(ConcatStream):
    """Global batches of one length each, in the curriculum's order (implements
    :class:`streamload.streams.interface.SampleStream`; samples are slots).

    Args:
        config: The data config (``vsl`` mode).
        catalogs: The described source (one).
    """

    source_class = VslSource
    sources: tuple[VslSource, ...]
    max_chunk_batches = 1
    """A chunk is one step: its rows have the step's own length."""

    @property
    def source(self) -> VslSource:
        """The one source."""
        return self.sources[0]

    @property
    def has_documents(self) -> bool:
        """A piece is part of one document: it starts at its row's start."""
        return True

    def step_length(self, pass_index: int, step: int) -> int:
        """Inputs per row of pass-relative ``step``."""
        bucket, _ = self.source.step_pieces(pass_index, step)
        return self.source.pieces.lengths[bucket]

    def step_rows(
        self, pass_index: int, step: int, world_size: int = 1, rank: int = 0
    ) -> np.ndarray:
        """Piece ids of ``rank``'s rows of ``step`` (all rows: ``world_size = 1``)."""
        _, pieces = self.source.step_pieces(pass_index, step)
        share = pieces.size // world_size
        return pieces[rank * share : (rank + 1) * share]

    def plan_chunk(
        self, cursor: StreamCursor, max_batches: int, global_batch: int, world_size: int, rank: int
    ) -> tuple[ChunkPlan, StreamCursor] | None:
        """``rank``'s rows of the step at ``cursor`` (one step per chunk); ``None`` at the
        pass end."""
        slots = self.source.slots
        if global_batch != slots:
            raise ConfigError(
                f"a global batch of {global_batch} samples, but in vsl mode it is "
                f"tokens_per_batch / max_seq_len = {slots} slots (batch_size x world_size)"
            )
        if self.batches_left(cursor, global_batch) == 0:
            return None
        rows = self.step_rows(cursor.pass_index, cursor.sample // slots, world_size, rank)
        ids = rows.reshape(1, -1)
        plan = ChunkPlan(cursor.pass_index, ids, np.zeros(ids.shape, np.int16), ids)
        return plan, self.advance(cursor, 1, global_batch)

    def read_chunk(self, plan: ChunkPlan, documents: bool) -> TokenChunk:
        """Tokens ``[rows, L + 1]`` of a chunk's pieces (and, with ``documents``, their
        document starts: each row's first token)."""
        tokens, starts = self.source.read_pieces(plan.local_ids.ravel())
        doc_starts = None
        if documents:
            doc_starts = np.zeros(tokens.shape, dtype=bool)
            doc_starts[:, 0] = True
        loss_mask = self.source.read_piece_mask(starts, tokens.shape[1])
        return TokenChunk(plan, tokens, starts, doc_starts, loss_mask=loss_mask)

    def locate(self, pass_index: int, samples: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Refused: a slot is no sample of its own in vsl mode (steps are; see
        :meth:`step_rows`)."""
        raise ConfigError(
            "vsl mode has no fixed-length samples to look up: a step's rows have the step's "
            "length (streamload samples lists steps; StreamLoader / StreamDataset deliver them)"
        )

    def fingerprint(self, cursor: StreamCursor | None = None) -> dict[str, Any]:
        """Concat mode's fingerprint plus what decides each step: the lengths, tokens per
        batch, curriculum and its cycles, and the decomposition rule."""
        out = super().fingerprint(cursor)
        sampling = self.config.sampling
        out["vsl"] = {
            "layout": LAYOUT,
            "min_seq_len": sampling.min_seq_len,
            "max_seq_len": self.seq_len,
            "tokens_per_batch": sampling.tokens_per_batch,
            "curriculum": sampling.curriculum.value,
            "num_cycles": sampling.num_cycles or default_cycles(sampling.curriculum),
        }
        return out
