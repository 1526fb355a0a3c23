"""Stage 5 (pack): tokens → ``input_ids``, ``labels`` and optional document-packing masks."""

from __future__ import annotations

import numpy as np
import torch
from torchdata.nodes import BaseNode

from streamload.errors import ConfigError
from streamload.nodes.map_stage import MapStage
from streamload.ops.masks import mask_padding, mask_untrained, packing_fields, starts_from_eos
from streamload.ops.megatron_masks import mask_pad, switched_fields
from streamload.streams.chunks import TokenChunk

__all__ = ["MaskPacker", "PackMasks"]


class MaskPacker:
    """Picklable map ``TokenChunk → dict of tensors`` with a leading ``[batches, batch_size]``.

    Keys: ``input_ids``, ``labels`` (int64 ``[K, b, L]``), ``sample_index`` (int64 ``[K, b]``,
    pass-relative), ``source_ids`` (int64 ``[K, b]``: each sample's source, an index into the
    config's sources), and with masks ``doc_ids``, ``position_ids``, ``cu_seqlens``, ``max_seqlen``
    (see :mod:`streamload.ops.masks`). A label is ``-100`` where it is padding, where the
    data's loss mask says its token is not trained (``TokenChunk.loss_mask``), and with masks
    where it belongs to the next document. Evaluation chunks (``ChunkPlan.padding`` set) add
    ``sample_mask`` (bool ``[K, b]``, false on a padding row, whose ``sample_index`` is -1 and
    labels all -100).

    Args:
        masks: Whether to add packing masks.
        eos_token_id: EOS id that ends documents, where chunks carry no document starts.
    """

    def __init__(
        self,
        masks: bool,
        eos_token_id: int | None,
        flags: tuple[bool, bool, bool] = (True, True, True),
    ) -> None:
        self.masks = masks
        self.eos_token_id = eos_token_id
        self.flags = flags  # PackingConfig.flags: Megatron's three switches

    def __call__(self, chunk: TokenChunk) -> dict[str, torch.Tensor]:
        batches, batch_size = chunk.plan.sample_ids.shape
        tokens = chunk.tokens
        arrays: dict[str, np.ndarray] = {
            "input_ids": tokens[:, :-1].astype(np.int64),
            "labels": tokens[:, 1:].astype(np.int64),
        }
        if tokens.dtype.kind == "i" and tokens.size and int(tokens.min()) < 0:
            mask_pad(arrays["input_ids"], arrays["labels"])  # Megatron's pad (-1)
        if chunk.lengths is not None:  # a label that is padding is not predicted
            mask_padding(arrays["labels"], chunk.lengths)
        if chunk.loss_mask is not None:  # the data's own mask: an untrained label token
            mask_untrained(arrays["labels"], chunk.loss_mask)
        if self.masks:
            starts = chunk.doc_starts
            if starts is None:
                if self.eos_token_id is None:
                    raise ConfigError("packing masks need eos_token_id or a document index")
                starts = starts_from_eos(tokens, self.eos_token_id)
            if all(self.flags):
                arrays.update(packing_fields(starts, arrays["labels"]))
            else:
                arrays.update(switched_fields(starts, arrays["labels"], self.flags))
        out = {
            key: torch.from_numpy(value.reshape(batches, batch_size, *value.shape[1:]))
            for key, value in arrays.items()
        }
        out["sample_index"] = torch.from_numpy(np.ascontiguousarray(chunk.plan.sample_ids))
        out["source_ids"] = torch.from_numpy(chunk.plan.sources.astype(np.int64))
        padding = chunk.plan.padding  # evaluation loaders: rows past the pass end
        if padding is not None:  # sample_mask [K, b]: false on a padding row, which adds no loss
            out["sample_mask"] = torch.from_numpy(~padding)
            out["sample_index"] = torch.from_numpy(np.where(padding, -1, chunk.plan.sample_ids))
            out["labels"][out["sample_mask"].logical_not()] = -100  # ops.masks.IGNORE_INDEX
        return out


class PackMasks(MapStage[TokenChunk, dict[str, torch.Tensor]]):
    """Turn token chunks into chunk dicts of tensors.

    State:
        The source's state (this stage holds nothing).
    """

    def __init__(
        self,
        source: BaseNode[TokenChunk],
        masks: bool,
        eos_token_id: int | None,
        flags: tuple[bool, bool, bool] = (True, True, True),
    ) -> None:
        super().__init__(source, MaskPacker(masks, eos_token_id, flags))
