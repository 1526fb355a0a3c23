"""One chunk plan to one chunk of tensors: read the windows, pack them, mask skipped rows.

The loader's workers and :class:`streamload.StreamDataset` both run this, so a sample is
built the same way whichever path delivers it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from streamload.nodes._worker_stats import SKIPPED_KEY, count_delivered_skips, skipped_counts
from streamload.nodes.compact import can_mask_labels, stream_dtype
from streamload.nodes.pack_masks import MaskPacker
from streamload.nodes.read_windows import WindowReader, mask_skipped
from streamload.streams.chunks import ChunkPlan

__all__ = ["Materialize", "count_delivered_skips"]  # the loader counts what it delivers


class Materialize:
    """Picklable ``ChunkPlan → chunk dict``: read windows, then inputs/labels/masks.

    Args:
        stream: The sample stream (its config decides masks, EOS and Megatron's switches).
        count_skipped: Add the chunk's skipped samples per batch and source under
            ``SKIPPED_KEY`` when there are any (the loader counts them as it delivers each
            batch, and takes the entry out; :mod:`streamload.nodes._worker_stats`).
        compact: Compact batches (``None``: the config's ``packing.compact``).
    """

    def __init__(
        self, stream: Any, count_skipped: bool = False, compact: bool | None = None
    ) -> None:
        cfg = stream.config
        compact = cfg.packing.compact if compact is None else compact
        self.reader = WindowReader(stream, documents=cfg.packing.masks)
        self.packer = MaskPacker(
            cfg.packing.masks,
            cfg.eos_token_id,
            cfg.packing.flags,
            compact=compact,
            label_mask=compact and can_mask_labels(stream),
            token_dtype=stream_dtype(stream) if compact else None,
            positions=stream.layout.positions,
            mask_dtype=np.dtype(cfg.packing.id_dtype),
            mask_ids=cfg.packing.mask_ids,
        )
        self.num_sources = len(stream.sources) if count_skipped else 0

    def __call__(self, plan: ChunkPlan) -> dict[str, torch.Tensor]:
        chunk = self.reader(plan)
        out = mask_skipped(self.packer(chunk), chunk)  # on_error = "skip" rows: no loss
        if self.num_sources:
            counts = skipped_counts(chunk, self.num_sources)
            if counts is not None:
                out[SKIPPED_KEY] = counts
        return out
