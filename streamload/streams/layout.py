"""What a sampling mode's batches hold beyond the common layout.

The loader, the nodes and the tools never branch on a mode's name or type: they read the
stream's :class:`BatchLayout` (``stream.layout``), which each mode sets once.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["BatchLayout"]


@dataclass(frozen=True)
class BatchLayout:
    """A mode's batch facts (the defaults are concat mode's: fixed-length windows).

    Args:
        positions: Every batch carries ``position_ids`` (rows of several lengths or pieces
            whose positions restart), masks or not.
        label_padding: A label can be -100 without packing masks or loss masks (padding
            rows or positions), so compact batches carry ``label_mask``.
        max_chunk_batches: The most batches one chunk may hold (``None``: the loader's cap).
        rows_per_sample: The most rows a sample (slot) becomes in a batch (sizes the
            workers' shared-memory slots).
        unit: What the loader's batch size and sample ids count (for readers: ``show``).
        documents: How ``show`` finds the documents of a row: ``"items"`` (the row's
            items), ``"pieces"`` (a row is part of one document); ``None``: the format's
            index, else EOS.
        traced: ``show`` can trace a row's positions back to shard offsets.
        epoch_is_pass: A source-local sample id is numbered within its pass (``show``
            reports the pass as its epoch).
        evaluation: The stream is an evaluation pass (its last global batch padded, every
            batch with ``sample_mask``): set by the evaluation wrapper, never by a mode.
    """

    positions: bool = False
    label_padding: bool = False
    max_chunk_batches: int | None = None
    rows_per_sample: int = 1
    unit: str = "samples"
    documents: str | None = None
    traced: bool = True
    epoch_is_pass: bool = False
    evaluation: bool = False
