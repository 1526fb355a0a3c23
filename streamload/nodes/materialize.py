"""One chunk plan to one chunk of tensors: read the windows, pack them, mask skipped rows.

The loader's workers and :class:`streamload.StreamDataset` both run this, so a sample is
built the same way whichever path delivers it.
"""

from __future__ import annotations

from typing import Any

import torch

from streamload.nodes.pack_masks import MaskPacker
from streamload.nodes.read_windows import WindowReader, mask_skipped
from streamload.streams.chunks import ChunkPlan

__all__ = ["Materialize"]


class Materialize:
    """Picklable ``ChunkPlan → chunk dict``: read windows, then inputs/labels/masks.

    Args:
        stream: The sample stream (its config decides masks, EOS and Megatron's switches).
    """

    def __init__(self, stream: Any) -> None:
        cfg = stream.config
        self.reader = WindowReader(stream, documents=cfg.packing.masks)
        self.packer = MaskPacker(cfg.packing.masks, cfg.eos_token_id, cfg.packing.flags)

    def __call__(self, plan: ChunkPlan) -> dict[str, torch.Tensor]:
        chunk = self.reader(plan)
        return mask_skipped(self.packer(chunk), chunk)  # on_error = "skip" rows: no loss
