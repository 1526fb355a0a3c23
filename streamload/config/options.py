"""The option tables: ``[sampling]``, ``[packing]``, ``[mixture]`` and ``[[schedule]]``."""

from __future__ import annotations

from dataclasses import dataclass, replace

from streamload.config.checks import (
    check_bool,
    check_int,
    check_number,
    check_weight_sum,
    show,
    to_enum,
)
from streamload.config.enums import (
    MEGATRON_DEFAULT_SPLIT,
    LongDocuments,
    MaskDtype,
    MaskFields,
    MegatronSplit,
    MixtureBatching,
    MixtureUnit,
    SamplingMode,
    SplitName,
)
from streamload.config.modes import mode_plugin
from streamload.config.sampling import SamplingConfig
from streamload.errors import ConfigError

__all__ = [
    "MEGATRON_DEFAULT_SPLIT",
    "LongDocuments",
    "MaskDtype",
    "MaskFields",
    "MegatronSplit",
    "MixtureBatching",
    "MixtureConfig",
    "MixtureUnit",
    "PackingConfig",
    "PhaseConfig",
    "SamplingConfig",
    "SamplingMode",
    "SplitName",
    "evaluation_sampling",
]


def evaluation_sampling(
    sampling: SamplingConfig, split: str, shuffle: bool | None = None
) -> SamplingConfig:
    """The ``[sampling]`` of an evaluation loader over ``split`` (docs/sampling.md).

    concat, packed, padded: the split's samples once, unshuffled unless ``shuffle`` is true
    (then each source's first-epoch permutation, ``shuffle_block`` kept); ``num_samples``
    does not apply (one pass is every sample of the split). megatron: Megatron's dataset of
    that split, in Megatron's order, ``num_samples`` as configured.

    Args:
        sampling: The config's sampling options.
        split: ``train``, ``valid`` or ``test``.
        shuffle: Shuffle the evaluation order (``None``: no; megatron mode: not allowed).

    Raises:
        ConfigError: an unknown split name, a split the config does not have, ``shuffle``
            given in megatron mode or not a bool.
    """
    name = to_enum(MegatronSplit, split, "split")
    if mode_plugin(sampling.mode_name).own_evaluation_pass:
        if shuffle is not None:
            raise ConfigError(
                f"shuffle = {show(shuffle)} has no meaning with mode = {sampling.mode_name!r}: "
                "its own shuffles decide the order of its valid and test sets (megatron: "
                "Megatron's document and sample shuffles)"
            )
        return replace(sampling, split_name=name)
    keep = False if shuffle is None else shuffle
    check_bool(keep, "shuffle")
    block = sampling.shuffle_block if keep else 0
    return replace(sampling, split_name=name, shuffle=keep, shuffle_block=block, num_samples=None)


@dataclass(frozen=True, kw_only=True)
class PackingConfig:
    """Document-packing outputs.

    Args:
        masks: Add ``doc_ids``, ``position_ids``, ``cu_seqlens``, ``max_seqlen`` and mask
            labels that cross a document boundary with -100.
        reset_position_ids: With masks, positions restart at each document (Megatron's
            ``--reset-position-ids``); unset: follows ``masks``.
        reset_attention_mask: With masks, ``doc_ids``/``cu_seqlens`` split at each document
            (``--reset-attention-mask``); ``false``: one segment per sample. Unset: ``masks``.
        eod_mask_loss: With masks, labels predicted from an end-of-document token are -100
            (``--eod-mask-loss``); unset: follows ``masks``.
        compact: Batches hold ``tokens`` ``[b, seq_len + 1]`` in the data's width (at most
            int32) instead of int64 ``input_ids`` and ``labels``, which the training step
            slices on the device; ``label_mask`` where a label can be -100
            (:mod:`streamload.nodes.compact`, docs/config.md "Compact batches").
        mask_dtype: With masks, the dtype of ``doc_ids`` and ``position_ids``
            (:class:`MaskDtype`); unset: int64, int32 in compact batches.
        mask_fields: With masks, ``"all"`` fields or ``"cu_seqlens"`` (and ``max_seqlen``)
            only (:class:`MaskFields`); unset: all.
    """

    masks: bool = False
    reset_position_ids: bool | None = None
    reset_attention_mask: bool | None = None
    eod_mask_loss: bool | None = None
    compact: bool = False
    mask_dtype: MaskDtype | None = None
    mask_fields: MaskFields | None = None

    def __post_init__(self) -> None:
        check_bool(self.masks, "packing.masks")
        check_bool(self.compact, "packing.compact")
        self._check_mask_fields()
        for name in ("reset_position_ids", "reset_attention_mask", "eod_mask_loss"):
            value = getattr(self, name)
            if value is not None:
                check_bool(value, f"packing.{name}")
            if value is True and not self.masks:
                raise ConfigError(
                    f"packing.{name} = true needs packing.masks = true (the mask outputs "
                    "position_ids, doc_ids and cu_seqlens exist only with masks)"
                )

    def _check_mask_fields(self) -> None:
        """``mask_dtype`` and ``mask_fields``: known values, only with masks; positions
        derived from ``cu_seqlens`` restart at each segment, as Megatron's switches must say."""
        for name, kind in (("mask_dtype", MaskDtype), ("mask_fields", MaskFields)):
            value = getattr(self, name)
            if value is None:
                continue
            object.__setattr__(self, name, to_enum(kind, value, f"packing.{name}"))
            if not self.masks:
                raise ConfigError(
                    f"packing.{name} = {getattr(self, name).value!r} needs packing.masks = "
                    "true (it shapes the mask fields, which exist only with masks)"
                )
        if self.mask_fields is MaskFields.CU_SEQLENS and self.flags[0] != self.flags[1]:
            raise ConfigError(
                'packing.mask_fields = "cu_seqlens" needs reset_position_ids equal to '
                "reset_attention_mask: position_ids derived from cu_seqlens restart at each "
                'segment (set mask_fields = "all" for positions that do not)'
            )

    @property
    def id_dtype(self) -> str:
        """The dtype of ``doc_ids`` and ``position_ids`` with masks."""
        if self.mask_dtype is not None:
            return self.mask_dtype.value
        return "int32" if self.compact else "int64"

    @property
    def mask_ids(self) -> bool:
        """Whether batches with masks carry ``doc_ids`` and ``position_ids``."""
        return self.mask_fields is not MaskFields.CU_SEQLENS

    @property
    def flags(self) -> tuple[bool, bool, bool]:
        """Effective (reset_position_ids, reset_attention_mask, eod_mask_loss)."""
        return (
            self.masks if self.reset_position_ids is None else self.reset_position_ids,
            self.masks if self.reset_attention_mask is None else self.reset_attention_mask,
            self.masks if self.eod_mask_loss is None else self.eod_mask_loss,
        )


@dataclass(frozen=True, kw_only=True)
class MixtureConfig:
    """How source weights are read.

    Args:
        unit: What the weights count (``samples`` or ``tokens``).
        temperature: Weights become ``w ** (1 / temperature)`` before normalizing
            (KempnerForge); above 1 flattens the mixture, below 1 sharpens it; 0 stays 0.
        batching: ``mixed`` (every optimizer step holds every source in proportion) or
            ``per_source`` (every optimizer step from one source).
    """

    unit: MixtureUnit = MixtureUnit.SAMPLES
    temperature: float = 1.0
    batching: MixtureBatching = MixtureBatching.MIXED

    def __post_init__(self) -> None:
        object.__setattr__(self, "unit", to_enum(MixtureUnit, self.unit, "mixture.unit"))
        batching = to_enum(MixtureBatching, self.batching, "mixture.batching")
        object.__setattr__(self, "batching", batching)
        check_number(self.temperature, "mixture.temperature", 0, exclusive=True)


@dataclass(frozen=True, kw_only=True)
class PhaseConfig:
    """One ``[[schedule]]`` entry: new weights from global step ``start_step`` on.

    Args:
        start_step: First global batch (optimizer step) of the phase.
        weights: Weight of every source by name.
    """

    start_step: int
    weights: dict[str, float]

    def __post_init__(self) -> None:
        check_int(self.start_step, "schedule.start_step", 0)
        where = f"schedule at start_step {self.start_step}"
        if not isinstance(self.weights, dict) or not self.weights:
            raise ConfigError(
                f"{where}: weights = {show(self.weights)} must be a table of source = weight"
            )
        for name, w in self.weights.items():
            if not isinstance(name, str):
                raise ConfigError(f"{where}: weights key {show(name)} must be a source name")
            check_number(w, f"{where}: weight of {name!r}", 0)
        if not any(w > 0 for w in self.weights.values()):
            raise ConfigError(f"{where}: all weights are 0; at least one must be positive")
        check_weight_sum(list(self.weights.values()), f"{where}: weights")
