"""The named choices of the option tables: sampling modes, long documents, splits, mixture
units, mixture batching and packing-mask fields (re-exported by
:mod:`streamload.config.options`)."""

from __future__ import annotations

import enum

__all__ = [
    "MEGATRON_DEFAULT_SPLIT",
    "LongDocuments",
    "MaskDtype",
    "MaskFields",
    "MegatronSplit",
    "MixtureBatching",
    "MixtureUnit",
    "SamplingMode",
    "SplitName",
]


class SamplingMode(str, enum.Enum):
    """How the sources' tokens become samples of ``seq_len + 1`` tokens."""

    CONCAT = "concat"
    """Windows of ``seq_len + 1`` tokens at stride ``seq_len`` over the token stream."""
    MEGATRON = "megatron"
    """Megatron-Core ``GPTDataset``/``BlendedDataset`` samples, bit for bit (docs/megatron.md)."""
    PACKED = "packed"
    """Whole documents (or pieces of long ones) packed best-fit into samples of ``seq_len + 1``
    tokens, padded with ``pad_token_id``."""
    PADDED = "padded"
    """One document (or piece) per sample, padded with ``pad_token_id``."""
    VSL = "vsl"
    """Variable sequence lengths: pieces of documents of power-of-two lengths, one length per
    global batch, ordered by a curriculum (:mod:`streamload.modes.vsl.options`)."""

    @property
    def whole_documents(self) -> bool:
        """``packed`` or ``padded``: samples hold whole documents (items), then padding."""
        return self in (SamplingMode.PACKED, SamplingMode.PADDED)

    @property
    def plans_documents(self) -> bool:
        """``packed``, ``padded`` or ``vsl``: a source's documents become a plan cached in
        ``sampling.cache_dir``."""
        return self.whole_documents or self is SamplingMode.VSL


class LongDocuments(str, enum.Enum):
    """What ``packed`` and ``padded`` modes do with a document of more than ``seq_len + 1``
    tokens."""

    SPLIT = "split"
    """Pieces of ``seq_len + 1`` tokens at stride ``seq_len`` (every next-token pair inside the
    document trained once, like concat windows), the last piece shorter; each piece is an item."""
    TRUNCATE = "truncate"
    """Only the first ``seq_len + 1`` tokens are an item; the rest is dropped and counted."""
    DROP = "drop"
    """The whole document is left out and counted (an SFT conversation cut short would train
    on a reply without its end)."""


class MegatronSplit(str, enum.Enum):
    """Which part of ``sampling.split`` a stream reads (every mode; the name is historical)."""

    TRAIN = "train"
    """The first share of every source's documents (Megatron: sequences)."""
    VALID = "valid"
    """The second share."""
    TEST = "test"
    """The third share."""


SplitName = MegatronSplit
"""The name the other sampling modes use for :class:`MegatronSplit`."""


MEGATRON_DEFAULT_SPLIT = "969,30,1"
"""Megatron-LM's ``--split`` default."""


class MixtureBatching(str, enum.Enum):
    """How a mixture fills an optimizer step."""

    MIXED = "mixed"
    """Every step holds every source in proportion: ``floor`` or ``ceil`` of ``w·B`` samples
    each, interleaved (:mod:`streamload.plan.mixture`)."""
    PER_SOURCE = "per_source"
    """Every step is drawn whole from one source, the sources taking steps in proportion to
    their weights, each within one step of its share (Mosaic's ``per_stream``;
    :mod:`streamload.plan._source_rule`)."""


class MixtureUnit(str, enum.Enum):
    """What mixture weights count."""

    SAMPLES = "samples"
    """Shares of samples."""
    TOKENS = "tokens"
    """Shares of tokens. Every sample holds ``seq_len`` input tokens, so with fixed-length
    sampling the allocation is the same as for samples (``concat`` mode only: ``packed`` and
    ``padded`` samples hold fewer real tokens than positions)."""


class MaskDtype(str, enum.Enum):
    """The dtype of ``doc_ids`` and ``position_ids`` with ``packing.masks``."""

    INT64 = "int64"
    """What embedding lookups and Megatron take without a cast (full batches' default)."""
    INT32 = "int32"
    """Half the bytes (any ``seq_len`` fits); ``torch.nn.Embedding`` and rotary tables index
    with it as they are (compact batches' default)."""


class MaskFields(str, enum.Enum):
    """Which packing-mask fields a batch carries with ``packing.masks``."""

    ALL = "all"
    """``doc_ids``, ``position_ids``, ``cu_seqlens`` and ``max_seqlen``."""
    CU_SEQLENS = "cu_seqlens"
    """``cu_seqlens`` and ``max_seqlen`` only: the training step derives ``position_ids`` and
    ``doc_ids`` on the device (:mod:`streamload.ops.varlen`)."""
