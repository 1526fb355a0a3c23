"""Stage 5 (pack): tokens → ``input_ids``, ``labels`` and optional document-packing masks."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torchdata.nodes import BaseNode

from streamload.errors import ConfigError
from streamload.nodes._blocks import BlockCarver, BlockPool
from streamload.nodes.compact import compact_dtype, compact_tokens
from streamload.nodes.map_stage import MapStage
from streamload.ops.masks import (
    IGNORE_INDEX,
    field_shapes,
    mask_padding,
    mask_untrained,
    packing_fields,
    starts_from_eos,
)
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

    Compact (``packing.compact``): ``tokens`` (``[K, b, L + 1]`` in the data's width, at most
    int32: :mod:`streamload.nodes.compact`) replaces ``input_ids`` and
    ``labels``, which are ``tokens[..., :-1]`` and ``tokens[..., 1:]``; where a label could
    be -100, ``label_mask`` (bool ``[K, b, L]``, aligned with the labels) is false exactly
    where the full batch's label is -100.

    Args:
        masks: Whether to add packing masks.
        eos_token_id: EOS id that ends documents, where chunks carry no document starts.
        flags: ``PackingConfig.flags``, Megatron's three switches.
        compact: Hand out ``tokens`` (and ``label_mask``) instead of inputs and labels.
        label_mask: With ``compact``, add ``label_mask`` (the config can mask a label:
            :func:`streamload.nodes.compact.can_mask_labels`).
        token_dtype: With ``compact``, the dtype of ``tokens`` in every batch
            (:func:`streamload.nodes.compact.stream_dtype`); ``None``: each chunk's own
            (:func:`streamload.nodes.compact.compact_dtype`).
        positions: Add ``position_ids`` (int64 ``[K, b, L]``, ``0 … L − 1`` in every row)
            without masks (``vsl`` mode: every row is part of one document).
        mask_dtype: Of ``doc_ids`` and ``position_ids`` with masks (``packing.mask_dtype``);
            ``None``: int64, int32 in compact batches.
        mask_ids: With masks, add ``doc_ids`` and ``position_ids`` (``False``:
            ``cu_seqlens`` and ``max_seqlen`` only, ``packing.mask_fields = "cu_seqlens"``).

    A chunk's arrays are carved from one block of a :class:`~streamload.nodes._blocks.BlockPool`
    (reused once every view of it is freed: no page faults per chunk), one region per key.
    """

    def __init__(
        self,
        masks: bool,
        eos_token_id: int | None,
        flags: tuple[bool, bool, bool] = (True, True, True),
        compact: bool = False,
        label_mask: bool = True,
        token_dtype: np.dtype[Any] | None = None,
        positions: bool = False,
        mask_dtype: np.dtype[Any] | None = None,
        mask_ids: bool = True,
    ) -> None:
        self.masks = masks
        self.eos_token_id = eos_token_id
        self.flags = flags
        self.compact = compact
        self.label_mask = label_mask
        self.token_dtype = token_dtype
        self.positions = positions
        default = np.int32 if compact else np.int64
        self.mask_dtype = np.dtype(default if mask_dtype is None else mask_dtype)
        self.mask_ids = mask_ids
        self.blocks = BlockPool()

    def __call__(self, chunk: TokenChunk) -> dict[str, torch.Tensor]:
        batches, batch_size = chunk.plan.sample_ids.shape
        arrays = self._compact(chunk) if self.compact else self._full(chunk)
        if self.positions and "position_ids" not in arrays:
            rows, width = chunk.tokens.shape
            arrays["position_ids"] = np.tile(np.arange(width - 1, dtype=np.int64), (rows, 1))
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
            if "labels" in out:
                out["labels"][out["sample_mask"].logical_not()] = IGNORE_INDEX
            elif "label_mask" in out:
                out["label_mask"][out["sample_mask"].logical_not()] = False
        return out

    def _full(self, chunk: TokenChunk) -> dict[str, np.ndarray]:
        tokens = chunk.tokens
        rows, width = tokens.shape
        pair = (np.dtype(np.int64), (rows, width - 1))
        carver = self._carver(rows, width - 1, [pair, pair])
        # Two regions of one block, each written once from the tokens (no int64 temporary):
        # writing labels in place never changes input_ids.
        arrays = {"input_ids": carver.array(*pair), "labels": carver.array(*pair)}
        np.copyto(arrays["input_ids"], tokens[:, :-1], casting="unsafe")
        np.copyto(arrays["labels"], tokens[:, 1:], casting="unsafe")
        if tokens.dtype.kind == "i" and tokens.size and int(tokens.min()) < 0:
            mask_pad(arrays["input_ids"], arrays["labels"])  # Megatron's pad (-1)
        arrays.update(self._mark(chunk, arrays["labels"], IGNORE_INDEX, carver))
        return arrays

    def _compact(self, chunk: TokenChunk) -> dict[str, np.ndarray]:
        tokens = chunk.tokens
        rows, width = tokens.shape
        trained = None
        shape = (np.dtype(np.bool_), (rows, width - 1))
        carver = self._carver(rows, width - 1, [shape] if self.label_mask else [])
        if self.label_mask:
            trained = carver.array(*shape)
            trained.fill(True)
        pads = tokens.dtype.kind == "i" and tokens.size and int(tokens.min()) < 0
        if pads and trained is not None:  # Megatron's pad (-1): label masked, input 0
            np.greater_equal(tokens[:, 1:], 0, out=trained)
        fields = self._mark(chunk, trained, False, carver)
        if pads:
            tokens[tokens < 0] = 0  # after the document starts were found from the tokens
        dtype = compact_dtype(tokens.dtype) if self.token_dtype is None else self.token_dtype
        arrays = {"tokens": compact_tokens(chunk, dtype), **fields}
        if trained is not None:
            arrays["label_mask"] = trained
        return arrays

    def _carver(self, rows: int, length: int, shapes: list[Any]) -> BlockCarver:
        """A block for ``shapes`` and, with masks, the packing fields."""
        if self.masks and all(self.flags):
            shapes = shapes + list(
                field_shapes(rows, length, self.mask_dtype, self.mask_ids).values()
            )
        return BlockCarver(self.blocks, shapes)

    def _mark(
        self, chunk: TokenChunk, labels: np.ndarray | None, fill: int, carver: BlockCarver
    ) -> dict[str, Any]:
        """Set ``labels`` (int64 labels, or a bool "trained" mask; ``None``: no label can be
        masked) to ``fill`` where padding, the data's loss mask or, with masks, a document
        boundary says; return the packing masks."""
        if labels is not None and chunk.lengths is not None:  # padding is not predicted
            mask_padding(labels, chunk.lengths, fill)
        if labels is not None and chunk.loss_mask is not None:  # the data's own mask
            mask_untrained(labels, chunk.loss_mask)
        if not self.masks:
            return {}
        starts = chunk.doc_starts
        if starts is None:
            if self.eos_token_id is None:
                raise ConfigError("packing masks need eos_token_id or a document index")
            starts = starts_from_eos(chunk.tokens, self.eos_token_id)
        if labels is None:  # no label is masked: the fields alone
            labels = np.ones((starts.shape[0], starts.shape[1] - 1), dtype=bool)
        rows, length = labels.shape
        if all(self.flags):
            shapes = field_shapes(rows, length, self.mask_dtype, self.mask_ids)
            out = {key: carver.array(*shape) for key, shape in shapes.items()}
            return packing_fields(
                starts, labels, fill, dtype=self.mask_dtype, ids=self.mask_ids, out=out
            )
        return switched_fields(
            starts, labels, self.flags, fill, dtype=self.mask_dtype, ids=self.mask_ids
        )


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
