"""The option tables: ``[sampling]``, ``[packing]``, ``[mixture]`` and ``[[schedule]]``."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from streamload.config.checks import (
    check_bool,
    check_int,
    check_number,
    check_path,
    check_weight_sum,
    show,
    to_enum,
)
from streamload.config.enums import (
    MEGATRON_DEFAULT_SPLIT,
    LongDocuments,
    MegatronSplit,
    MixtureUnit,
    SamplingMode,
    SplitName,
)
from streamload.config.vsl import CurriculumPhase, VslCurriculum, check_vsl_sampling
from streamload.errors import ConfigError

__all__ = [
    "LongDocuments",
    "MegatronSplit",
    "MixtureConfig",
    "MixtureUnit",
    "PackingConfig",
    "PhaseConfig",
    "SamplingConfig",
    "SamplingMode",
    "SplitName",
    "evaluation_sampling",
]


@dataclass(frozen=True, kw_only=True)
class SamplingConfig:
    """How the token stream becomes an ordered sequence of samples.

    Args:
        mode: Sampling mode.
        shuffle: Permute a source's samples (windows, or packed/padded samples) per epoch,
            keyed by (seed, epoch, source).
        shuffle_block: Samples per shuffle block: nearby positions read one region of this
            many consecutive samples (block order and samples inside shuffled;
            :mod:`streamload.plan.block_shuffle`). 0: one uniform permutation.
        num_samples: Length of one pass in samples; more than one epoch repeats the data,
            reshuffled per epoch. ``None``: one pass is one epoch.
        cross_shard: ``False`` keeps every window inside one shard (KempnerForge/OLMo);
            ``concat`` mode only (documents never span shards).
        long_documents: ``packed``/``padded`` modes: split a document longer than
            ``seq_len + 1`` tokens into pieces, or truncate it.
        split: Megatron's ``--split`` (train, valid, test weights), e.g. ``"98,2,0"``: each
            source's documents are cut into three contiguous ranges
            (:mod:`streamload.plan.split`, docs/sampling.md). Unset: ``megatron`` mode uses
            Megatron's default ``"969,30,1"``; the other modes do not split (every document
            is training data).
        split_name: The split this stream reads (``train``, ``valid`` or ``test``); other
            than ``train`` it needs ``split`` in the concat, packed and padded modes.
        add_extra_token: ``megatron`` mode: samples read ``seq_len + 1`` tokens
            (``add_extra_token_to_sequence``).
        drop_last_partial: ``megatron`` mode, valid split only: drop a last sample shorter
            than the others (``drop_last_partial_validation_sequence``); ``False`` pads it.
        cache_dir: ``megatron`` mode: folder for built indices (also searched for the index
            files megatron-core wrote there, e.g. Megatron-LM's ``--data-cache-path``);
            ``packed``/``padded``/``vsl`` modes: folder for the packing and piece plans
            (unset: ``plans/`` in the storage cache folder).
        min_seq_len, max_seq_len, tokens_per_batch, curriculum, num_cycles: ``vsl`` mode
            (:mod:`streamload.config.vsl`): the shortest and longest piece (powers of two;
            ``max_seq_len`` defaults to ``seq_len``), input tokens per global batch, the order
            of an epoch's batches by length, and its cycles.
    """

    mode: SamplingMode | str = SamplingMode.CONCAT
    shuffle: bool = True
    shuffle_block: int = 0
    num_samples: int | None = None
    cross_shard: bool = True
    long_documents: LongDocuments = LongDocuments.SPLIT
    split: str | None = None
    split_name: MegatronSplit = MegatronSplit.TRAIN
    add_extra_token: bool = True
    drop_last_partial: bool = True
    cache_dir: str | None = None
    min_seq_len: int | None = None
    max_seq_len: int | None = None
    tokens_per_batch: int | None = None
    curriculum: VslCurriculum | tuple[CurriculumPhase, ...] = VslCurriculum.NATURAL
    num_cycles: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "mode", _mode_value(self.mode))
        object.__setattr__(
            self, "split_name", to_enum(MegatronSplit, self.split_name, "sampling.split_name")
        )
        object.__setattr__(
            self,
            "long_documents",
            to_enum(LongDocuments, self.long_documents, "sampling.long_documents"),
        )
        for name in ("shuffle", "cross_shard", "add_extra_token", "drop_last_partial"):
            check_bool(getattr(self, name), f"sampling.{name}")
        if self.num_samples is not None:
            check_int(self.num_samples, "sampling.num_samples", 1)
        check_int(self.shuffle_block, "sampling.shuffle_block", 0)
        if self.shuffle_block and not self.shuffle:
            raise ConfigError(
                f"sampling.shuffle_block = {self.shuffle_block} needs shuffle = true (an "
                "unshuffled stream already reads consecutive windows); remove one of them"
            )
        if not self.whole_documents and self.long_documents is not LongDocuments.SPLIT:
            raise ConfigError(
                f"sampling.long_documents = {self.long_documents.value!r} applies only to "
                f"mode = 'packed' or 'padded', but mode = {self.mode_name!r}"
            )
        check_vsl_sampling(self)
        if self.mode is SamplingMode.MEGATRON:
            if self.split is None:  # Megatron-LM's default: the Megatron code reads a str
                object.__setattr__(self, "split", MEGATRON_DEFAULT_SPLIT)
            self._check_megatron()
            return
        self._refuse_megatron_keys()
        self._check_split()
        if self.cache_dir is not None:
            check_path(self.cache_dir, "sampling.cache_dir")
        if self.whole_documents and not self.cross_shard:
            raise ConfigError(
                f"sampling.cross_shard = false has no meaning with mode = {self.mode_name!r}: "
                "items are whole documents or pieces of one, which never span two shards (a "
                "packed sample may hold items of several shards); remove it"
            )

    def _check_megatron(self) -> None:
        if self.num_samples is None:
            raise ConfigError(
                "sampling.num_samples is required with mode = 'megatron' (Megatron's "
                "train_samples, or eval/test samples for the valid/test split)"
            )
        if self.shuffle_block:
            raise ConfigError(
                f"sampling.shuffle_block = {self.shuffle_block} has no meaning with mode = "
                "'megatron' (Megatron's document and sample shuffles decide the order); remove it"
            )
        for name in ("shuffle", "cross_shard"):
            if getattr(self, name) is not True:
                raise ConfigError(
                    f"sampling.{name} = false has no meaning with mode = 'megatron': Megatron "
                    "shuffles documents and samples with its own RandomState and samples cross "
                    "sequence boundaries; remove it"
                )
        self._split_shares()
        if not self.drop_last_partial and self.split_name is not MegatronSplit.VALID:
            raise ConfigError(
                f"sampling.drop_last_partial = false applies only to split_name = 'valid' "
                f"(Megatron always drops the partial last sample of {self.split_name.value!r})"
            )
        if self.cache_dir is not None:
            check_path(self.cache_dir, "sampling.cache_dir")

    @property
    def mode_name(self) -> str:
        """The mode's name (a built-in's value, or a registered mode's name)."""
        return self.mode.value if isinstance(self.mode, SamplingMode) else self.mode

    @property
    def whole_documents(self) -> bool:
        """A built-in whole-document mode (``packed``/``padded``) reads the keys for them."""
        return isinstance(self.mode, SamplingMode) and self.mode.whole_documents

    @property
    def megatron_split(self) -> str:
        """The split string ``megatron`` mode reads (Megatron-LM's default when unset)."""
        return MEGATRON_DEFAULT_SPLIT if self.split is None else self.split

    def _split_shares(self) -> list[float]:
        """The normalized (train, valid, test) shares of ``split`` (set), checked."""
        if not isinstance(self.split, str):
            raise ConfigError(
                f"sampling.split = {show(self.split)} must be a string like '969,30,1'"
            )
        import numpy as np  # not at `import streamload`

        from streamload.plan.split import parse_split

        with np.errstate(invalid="ignore"):  # a number beyond float range: refused below
            shares = parse_split(self.split)
        if not all(math.isfinite(share) for share in shares):
            raise ConfigError(
                f"sampling.split = {self.split!r} holds a number too large for a float"
            )
        return shares

    def _check_split(self) -> None:
        """concat, packed, padded: a split is optional (an empty part is refused when a
        stream reads it: the data decides whether it is empty)."""
        if self.split is not None:
            self._split_shares()
        elif self.split_name is not MegatronSplit.TRAIN:
            raise ConfigError(
                f"sampling.split_name = {self.split_name.value!r} needs sampling.split "
                "(e.g. split = '98,2,0'); without a split every document is training data"
            )

    def _refuse_megatron_keys(self) -> None:
        megatron_only = {
            "add_extra_token": (self.add_extra_token, True),
            "drop_last_partial": (self.drop_last_partial, True),
        }
        plans = isinstance(self.mode, SamplingMode) and self.mode.plans_documents
        if self.cache_dir is not None and not plans:
            raise ConfigError(
                f"sampling.cache_dir = {show(self.cache_dir)} applies only to mode = "
                f"'megatron', 'packed', 'padded' or 'vsl' (built indices, plans), but mode = "
                f"{self.mode_name!r}"
            )
        for name, (value, default) in megatron_only.items():
            if value != default:
                raise ConfigError(
                    f"sampling.{name} = {show(getattr(value, 'value', value))} applies only to "
                    f"mode = 'megatron', but mode = {self.mode_name!r}"
                )


def _mode_value(value: object) -> SamplingMode | str:
    """A built-in mode as its :class:`SamplingMode`, a registered one by its name."""
    if isinstance(value, SamplingMode):
        return value
    if isinstance(value, str) and value not in {m.value for m in SamplingMode}:
        from streamload.config.modes import mode_plugin  # the registry names the valid modes

        return str(mode_plugin(value).name)
    return to_enum(SamplingMode, value, "sampling.mode")


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
    if sampling.mode is SamplingMode.MEGATRON:
        if shuffle is not None:
            raise ConfigError(
                f"shuffle = {show(shuffle)} has no meaning with mode = 'megatron': Megatron's "
                "document and sample shuffles decide the order of its valid and test sets"
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
    """

    masks: bool = False
    reset_position_ids: bool | None = None
    reset_attention_mask: bool | None = None
    eod_mask_loss: bool | None = None
    compact: bool = False

    def __post_init__(self) -> None:
        check_bool(self.masks, "packing.masks")
        check_bool(self.compact, "packing.compact")
        for name in ("reset_position_ids", "reset_attention_mask", "eod_mask_loss"):
            value = getattr(self, name)
            if value is not None:
                check_bool(value, f"packing.{name}")
            if value is True and not self.masks:
                raise ConfigError(
                    f"packing.{name} = true needs packing.masks = true (the mask outputs "
                    "position_ids, doc_ids and cu_seqlens exist only with masks)"
                )

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
    """

    unit: MixtureUnit = MixtureUnit.SAMPLES
    temperature: float = 1.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "unit", to_enum(MixtureUnit, self.unit, "mixture.unit"))
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
