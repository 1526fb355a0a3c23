"""The option tables: ``[sampling]``, ``[packing]``, ``[mixture]`` and ``[[schedule]]``."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from streamload.config._checks import check_int, to_enum
from streamload.errors import ConfigError

__all__ = [
    "MixtureConfig",
    "MixtureUnit",
    "PackingConfig",
    "PhaseConfig",
    "SamplingConfig",
    "SamplingMode",
]


class SamplingMode(str, enum.Enum):
    """How windows of tokens become samples."""

    CONCAT = "concat"
    """Windows of ``seq_len + 1`` tokens at stride ``seq_len`` over the token stream."""


class MixtureUnit(str, enum.Enum):
    """What mixture weights count."""

    SAMPLES = "samples"
    """Shares of samples."""
    TOKENS = "tokens"
    """Shares of tokens. Every sample holds ``seq_len`` input tokens, so with fixed-length
    sampling the allocation is the same as for samples."""


@dataclass(frozen=True, kw_only=True)
class SamplingConfig:
    """How the token stream becomes an ordered sequence of samples.

    Args:
        mode: Sampling mode.
        shuffle: Permute windows per epoch, keyed by (seed, epoch, source).
        num_samples: Length of one pass; more than one epoch repeats the data, reshuffled per
            epoch. ``None``: one pass is one epoch.
        cross_shard: ``False`` keeps every window inside one shard (KempnerForge/OLMo).
    """

    mode: SamplingMode = SamplingMode.CONCAT
    shuffle: bool = True
    num_samples: int | None = None
    cross_shard: bool = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "mode", to_enum(SamplingMode, self.mode, "sampling.mode"))
        for name in ("shuffle", "cross_shard"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"sampling.{name} = {getattr(self, name)!r} must be true/false")
        if self.num_samples is not None:
            check_int(self.num_samples, "sampling.num_samples", 1)


@dataclass(frozen=True, kw_only=True)
class PackingConfig:
    """Document-packing outputs.

    Args:
        masks: Add ``doc_ids``, ``position_ids``, ``cu_seqlens``, ``max_seqlen`` and mask
            labels that cross a document boundary with -100.
    """

    masks: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.masks, bool):
            raise ConfigError(f"packing.masks = {self.masks!r} must be true/false")


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
        t = self.temperature
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not 0 < t < float("inf"):
            raise ConfigError(f"mixture.temperature = {t!r} must be a positive number")


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
            raise ConfigError(f"{where}: weights must be a table of source = weight")
        for name, w in self.weights.items():
            if isinstance(w, bool) or not isinstance(w, (int, float)) or not 0 <= w < float("inf"):
                raise ConfigError(f"{where}: weight of {name!r} = {w!r} must be finite and >= 0")
        if not any(w > 0 for w in self.weights.values()):
            raise ConfigError(f"{where}: all weights are 0; at least one must be positive")
