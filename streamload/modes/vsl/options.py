"""Checks of ``sampling.mode = "vsl"``: variable sequence lengths with a length curriculum.

Dataset decomposition (Pouransari et al. 2024, OLMo-core's ``NumpyVSLDataset``): every
document is cut into pieces whose lengths are powers of two between ``min_seq_len`` and
``max_seq_len``; every global batch holds ``tokens_per_batch`` input tokens of pieces of one
length; a curriculum orders the batches of an epoch (docs/sampling.md, "Variable sequence
lengths"). The ``[sampling]`` keys are checked here, with their relation to the rest of the
config (:func:`check_vsl_config`).

In this mode a loader's *sample* is a slot of ``max_seq_len`` input tokens: a global batch
is ``tokens_per_batch / max_seq_len`` slots, whatever its length, so the cursor, the rank
split and the state count slots and stay exact and elastic (docs/design.md §3.0).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from streamload.config.checks import check_int, check_number, show, to_enum
from streamload.errors import ConfigError

if TYPE_CHECKING:
    from streamload.config.data import DataConfig

__all__ = [
    "CurriculumPhase",
    "VslOptions",
    "VslCurriculum",
    "check_vsl_config",
    "check_vsl_sampling",
    "curriculum_name",
    "default_cycles",
    "table_weights",
]


class VslCurriculum(str, enum.Enum):
    """How the batches of one epoch are ordered by length (``sampling.curriculum``)."""

    NATURAL = "natural"
    """Every batch of the epoch in one keyed shuffle: lengths in their natural shares."""
    GROW_P2 = "grow_p2"
    """Short to long: each cycle's sub-cycles favour each length in turn by odds 1, 2, 4, …
    (OLMo-core's ``VSLGrowP2Curriculum``); one cycle unless ``num_cycles``."""
    GROW_LINEAR = "grow_linear"
    """As ``grow_p2`` with odds 1, 2, 3, … (OLMo-core's ``VSLGrowLinearCurriculum``)."""
    CYCLIC_P2 = "cyclic_p2"
    """``grow_p2`` repeated ``num_cycles`` times per epoch (default 8, OLMo-core's default)."""


@dataclass(frozen=True)
class CurriculumPhase:
    """One entry of a table curriculum (``[[sampling.curriculum]]``): from epoch step
    ``start_step`` on, the batches are drawn by ``weights`` per length.

    Args:
        start_step: First step of the phase, counted from the start of each epoch (the
            first phase starts at 0).
        weights: Weight of each length, by the length as a string (``"256" = 4``); lengths
            not named have weight 0.
    """

    start_step: int
    weights: dict[str, float]

    def __post_init__(self) -> None:
        check_int(self.start_step, "sampling.curriculum.start_step", 0)
        where = f"sampling.curriculum at start_step {self.start_step}"
        if not isinstance(self.weights, dict) or not self.weights:
            raise ConfigError(
                f"{where}: weights = {show(self.weights)} must be a table of length = weight "
                '(e.g. {"256" = 4, "512" = 1})'
            )
        for key, weight in self.weights.items():
            if not isinstance(key, str) or not key.isdigit():
                raise ConfigError(f"{where}: weights key {show(key)} must be a length like '256'")
            check_number(weight, f"{where}: weight of length {key}", 0)
        if not any(w > 0 for w in self.weights.values()):
            raise ConfigError(f"{where}: all weights are 0; at least one must be positive")


Curriculum = VslCurriculum | tuple[CurriculumPhase, ...]


def curriculum_name(curriculum: Curriculum) -> str:
    """``natural``, ``grow_p2``, … or ``table``."""
    return curriculum.value if isinstance(curriculum, VslCurriculum) else "table"


def table_weights(
    phases: tuple[CurriculumPhase, ...], lengths: tuple[int, ...]
) -> list[list[float]]:
    """Each phase's weight of each length (ascending lengths)."""
    return [[float(p.weights.get(str(n), 0.0)) for n in lengths] for p in phases]


def _table(value: Any) -> tuple[CurriculumPhase, ...]:
    """A table curriculum from its config entries (checked)."""
    phases = []
    for index, entry in enumerate(value):
        if isinstance(entry, CurriculumPhase):
            phases.append(entry)
            continue
        if not isinstance(entry, dict) or set(entry) != {"start_step", "weights"}:
            raise ConfigError(
                f"sampling.curriculum[{index}] = {show(entry)} must be a table with exactly "
                "start_step and weights"
            )
        phases.append(CurriculumPhase(**entry))
    starts = [p.start_step for p in phases]
    if not starts or starts[0] != 0 or starts != sorted(set(starts)):
        raise ConfigError(
            f"sampling.curriculum start_step values {starts} must begin at 0 and strictly increase"
        )
    return tuple(phases)


MAX_BUCKETS = 24
"""Lengths from ``min_seq_len`` to ``max_seq_len`` may span at most this many powers of two."""


def default_cycles(curriculum: Any) -> int:
    """Cycles per epoch when ``num_cycles`` is unset."""
    return 8 if curriculum is VslCurriculum.CYCLIC_P2 else 1


@dataclass(frozen=True, kw_only=True)
class VslOptions:
    """The ``[sampling]`` keys of vsl mode.

    Args:
        min_seq_len: The shortest piece (a power of two; required).
        max_seq_len: The longest piece (a power of two; default ``seq_len``, which it must
            equal).
        tokens_per_batch: Input tokens per global batch (required; a multiple of
            ``max_seq_len``).
        curriculum: The order of an epoch's batches by length: a :class:`VslCurriculum`, or
            a table (``[[sampling.curriculum]]``) of weights per length by epoch step.
        num_cycles: Cycles per epoch of ``grow_p2``, ``grow_linear`` or ``cyclic_p2``.
    """

    min_seq_len: int | None = None
    max_seq_len: int | None = None
    tokens_per_batch: int | None = None
    curriculum: Curriculum = VslCurriculum.NATURAL
    num_cycles: int | None = None

    def __post_init__(self) -> None:
        value = self.curriculum
        if isinstance(value, (list, tuple)):
            curriculum: Curriculum = _table(value)
        else:
            curriculum = to_enum(VslCurriculum, value, "sampling.curriculum")
        object.__setattr__(self, "curriculum", curriculum)
        for name in ("min_seq_len", "tokens_per_batch"):
            if getattr(self, name) is None:
                raise ConfigError(f"sampling.{name} is required with mode = 'vsl'")
        for name in ("min_seq_len", "max_seq_len"):
            length = getattr(self, name)
            if length is not None:
                check_int(length, f"sampling.{name}", 1)
                _check_power_of_two(length, f"sampling.{name}")
        check_int(self.tokens_per_batch, "sampling.tokens_per_batch", 1)
        if self.num_cycles is not None:
            check_int(self.num_cycles, "sampling.num_cycles", 1)
            if not isinstance(curriculum, VslCurriculum) or curriculum is VslCurriculum.NATURAL:
                raise ConfigError(
                    f"sampling.num_cycles = {self.num_cycles} has no meaning with curriculum = "
                    f"{curriculum_name(curriculum)!r}; use grow_p2, grow_linear or cyclic_p2"
                )


def check_vsl_sampling(sampling: Any) -> None:
    """The shared ``[sampling]`` keys vsl mode cannot honour."""
    _refuse_other_keys(sampling)


def _refuse_other_keys(sampling: Any) -> None:
    """Keys of the other modes that vsl mode cannot honour."""
    if sampling.num_samples is not None:
        raise ConfigError(
            f"sampling.num_samples = {sampling.num_samples} has no meaning with mode = 'vsl': a "
            "pass is one epoch of the curriculum (its steps follow from the data and "
            "tokens_per_batch) and the next iter() starts the next epoch; remove it"
        )
    if sampling.shuffle_block:
        raise ConfigError(
            f"sampling.shuffle_block = {sampling.shuffle_block} has no meaning with mode = 'vsl' "
            "(pieces are shuffled inside their length's bucket); remove it"
        )
    if sampling.cross_shard is not True:
        raise ConfigError(
            "sampling.cross_shard = false has no meaning with mode = 'vsl': every piece lies "
            "inside one document, which never spans two shards; remove it"
        )


def _check_power_of_two(value: int, name: str) -> None:
    if value & (value - 1):
        raise ConfigError(f"{name} = {value} must be a power of two (256, 512, …)")


def check_vsl_config(config: DataConfig) -> None:
    """Raise :class:`ConfigError` for a vsl config whose parts disagree; fill
    ``global_batch_size`` (slots per optimizer step) when it is unset."""
    _refuse_unbuilt(config)
    sampling = config.sampling
    top = sampling.max_seq_len if sampling.max_seq_len is not None else config.seq_len
    if top != config.seq_len:
        raise ConfigError(
            f"sampling.max_seq_len = {top} differs from seq_len = {config.seq_len}; in vsl mode "
            "seq_len is the longest length (set one of them, or both equal)"
        )
    _check_power_of_two(top, "seq_len (vsl mode: max_seq_len)")
    low, tokens = int(sampling.min_seq_len or 0), int(sampling.tokens_per_batch or 0)
    if low > top:
        raise ConfigError(f"sampling.min_seq_len = {low} exceeds max_seq_len = {top}")
    if top.bit_length() - low.bit_length() >= MAX_BUCKETS:
        raise ConfigError(
            f"sampling.min_seq_len = {low} to max_seq_len = {top} spans more than "
            f"{MAX_BUCKETS} powers of two; raise min_seq_len"
        )
    if not isinstance(sampling.curriculum, VslCurriculum):
        allowed = {str(1 << k) for k in range(low.bit_length() - 1, top.bit_length())}
        for phase in sampling.curriculum:
            wrong = sorted(set(phase.weights) - allowed, key=int)
            if wrong:
                raise ConfigError(
                    f"sampling.curriculum at start_step {phase.start_step}: length(s) "
                    f"{', '.join(wrong)} are not among the lengths {low}..{top} (powers of two)"
                )
    if tokens % top:
        raise ConfigError(
            f"sampling.tokens_per_batch = {tokens} is not a multiple of max_seq_len = {top}: "
            "every global batch holds tokens_per_batch / L pieces of its length L"
        )
    slots = config.grad_accum_steps * (tokens // top)
    if config.global_batch_size is None:
        object.__setattr__(config, "global_batch_size", slots)
    elif config.global_batch_size != slots:
        raise ConfigError(
            f"global_batch_size = {config.global_batch_size}, but in vsl mode an optimizer "
            f"step holds grad_accum_steps x tokens_per_batch / max_seq_len = {slots} slots of "
            f"{top} tokens; remove global_batch_size"
        )


def _refuse_unbuilt(config: DataConfig) -> None:
    """Raise :class:`ConfigError` for the options vsl mode does not have: a batch size
    schedule, source policies, per-source batches."""
    if config.rampup_batch_size is not None or config.batch_schedule:
        raise ConfigError(
            "rampup_batch_size / [[batch_schedule]] have no meaning with mode = 'vsl': an "
            "optimizer step holds a fixed number of tokens (sampling.tokens_per_batch); "
            "remove them"
        )
    for source in config.sources:
        if source.policy.value != "repeat" or source.max_epochs is not None:
            raise ConfigError(
                f"source {source.name!r}: policy = 'stop' and max_epochs are not built for "
                "mode = 'vsl' yet (a pass is one epoch of the curriculum; a mixture's sources "
                "repeat their pieces); remove them"
            )
    if config.mixture.batching.value != "mixed":
        raise ConfigError(
            f"mixture.batching = {config.mixture.batching.value!r} is not built for mode = "
            "'vsl': a vsl step splits each length's slots between the sources by weight "
            "(docs/vsl.md); use batching = 'mixed', or mode = 'concat' or 'packed'"
        )


def vsl_batch_size(config: DataConfig, batch_size: int | None, world_size: int) -> int:
    """The per-rank batch size of a loader in vsl mode: slots of ``max_seq_len`` inputs per
    rank and global batch, ``tokens_per_batch / (max_seq_len x world_size)``; ``batch_size``
    may be omitted (``None``) or must equal it.

    Raises:
        ConfigError: the global batch's slots do not split over ``world_size`` ranks, or
            ``batch_size`` is another number.
    """
    slots = int(config.sampling.tokens_per_batch) // config.seq_len
    where = (
        f"tokens_per_batch = {config.sampling.tokens_per_batch} is {slots} slots of "
        f"max_seq_len = {config.seq_len} inputs"
    )
    if slots % world_size:
        raise ConfigError(
            f"{where}, which do not split evenly over world_size = {world_size} ranks (every "
            "rank gets the same tokens at every step); make tokens_per_batch a multiple of "
            f"max_seq_len x world_size = {config.seq_len * world_size}"
        )
    if batch_size is not None and batch_size != slots // world_size:
        raise ConfigError(
            f"batch_size = {batch_size}, but in vsl mode batch_size counts slots of max_seq_len "
            f"inputs per rank: {where}, so batch_size = {slots // world_size} at world_size = "
            f"{world_size} (or leave it out); a step of length L gives each rank "
            "batch_size x max_seq_len / L rows"
        )
    return slots // world_size
