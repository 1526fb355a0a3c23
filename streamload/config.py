"""Configuration: frozen dataclasses, loaded from TOML, YAML or a dict, printable back.

Example:
    >>> cfg = DataConfig.from_dict({
    ...     "seq_len": 8,
    ...     "sources": [{"name": "web", "path": "/data/web", "dtype": "uint16"}],
    ... })
    >>> cfg.sampling.mode
    <SamplingMode.CONCAT: 'concat'>

Relative source paths in a config *file* are resolved against the file's folder, so a config
travels with its data; in a dict they are taken as they are (relative to the working folder).
"""

from __future__ import annotations

import dataclasses
import enum
import json
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from streamload.errors import ConfigError, add_note

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

__all__ = [
    "TOKEN_DTYPES",
    "DataConfig",
    "MixtureConfig",
    "MixtureUnit",
    "PackingConfig",
    "PhaseConfig",
    "SamplingConfig",
    "SamplingMode",
    "ShardFormat",
    "SourceConfig",
    "SourcePolicy",
    "load_config",
]

TOKEN_DTYPES = ("uint8", "uint16", "uint32", "uint64", "int16", "int32", "int64")
"""Token dtypes a shard may hold (unsigned or signed integers; never floats)."""


class SamplingMode(str, enum.Enum):
    """How windows of tokens become samples."""

    CONCAT = "concat"
    """Windows of ``seq_len + 1`` tokens at stride ``seq_len`` over the token stream."""


class ShardFormat(str, enum.Enum):
    """On-disk format of a source's shards."""

    AUTO = "auto"
    """Decide per file from magic bytes and companions."""
    NPY = "npy"
    """A real NumPy ``.npy`` file (``\\x93NUMPY`` magic); dtype from its header."""
    RAW = "raw"
    """Headerless flat tokens (tatm/KempnerForge ``.bin``, Dolma-style ``.npy``); needs a dtype."""
    MEGATRON = "megatron"
    """Megatron-LM / Megatron-Core ``.bin`` + ``.idx`` (MMIDIDX)."""
    MODALITIES = "modalities"
    """Modalities packed ``.pbin``."""
    DOLMA = "dolma"
    """Dolma ``part-*.npy`` (headerless) + ``.csv.gz`` document metadata."""
    DATATROVE = "datatrove"
    """datatrove / nanotron ``.ds`` + ``.ds.index`` + ``.ds.metadata``."""


class SourcePolicy(str, enum.Enum):
    """What a mixture does when a source has given all its windows."""

    REPEAT = "repeat"
    """Start the source's next epoch, reshuffled with (seed, source, epoch)."""
    STOP = "stop"
    """End the whole stream before the batch that would need a second epoch."""


class MixtureUnit(str, enum.Enum):
    """What mixture weights count."""

    SAMPLES = "samples"
    """Shares of samples."""
    TOKENS = "tokens"
    """Shares of tokens. Every sample holds ``seq_len`` input tokens, so with fixed-length
    sampling the allocation is the same as for samples."""


def _enum(kind: type[enum.Enum], value: Any, field_name: str) -> Any:
    try:
        return kind(value)
    except ValueError:
        allowed = ", ".join(repr(m.value) for m in kind)
        raise ConfigError(f"{field_name} = {value!r} is not one of {allowed}") from None


def _check_int(value: Any, field_name: str, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{field_name} = {value!r} must be an integer")
    if value < minimum:
        raise ConfigError(f"{field_name} = {value} must be >= {minimum}")


def _check_keys(data: Mapping[str, Any], kind: type, where: str) -> None:
    allowed = {f.name for f in dataclasses.fields(kind)}
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise ConfigError(
            f"{where}: unknown key(s) {', '.join(unknown)}; allowed: {', '.join(sorted(allowed))}"
        )


@dataclass(frozen=True, kw_only=True)
class SourceConfig:
    """One dataset: a folder, glob or list of token shards.

    Args:
        name: Unique name, used in state, stats and seeds.
        path: A folder, a glob, a file, or a list of those (local paths or fsspec URLs).
        format: Shard format; ``auto`` sniffs each file.
        dtype: Token dtype, or ``auto`` where the format stores it.
        weight: Mixture weight (required when mixing several sources).
        policy: ``repeat`` (default) or ``stop`` when the source runs out in a mixture.
        max_epochs: End the stream before this source would start epoch ``max_epochs``.
        storage_options: Passed to fsspec for remote paths.
    """

    name: str
    path: str | tuple[str, ...]
    format: ShardFormat = ShardFormat.AUTO
    dtype: str = "auto"
    weight: float | None = None
    policy: SourcePolicy = SourcePolicy.REPEAT
    max_epochs: int | None = None
    storage_options: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        where = f"source {self.name!r}"
        object.__setattr__(self, "policy", _enum(SourcePolicy, self.policy, f"{where}: policy"))
        if self.max_epochs is not None:
            _check_int(self.max_epochs, f"{where}: max_epochs", 1)
        if not isinstance(self.name, str) or not self.name:
            raise ConfigError(f"source name {self.name!r} must be a non-empty string")
        if not isinstance(self.path, (str, list, tuple)):
            raise ConfigError(f"{where}: path {self.path!r} must be a non-empty string or list")
        paths = (self.path,) if isinstance(self.path, str) else tuple(self.path)
        if not paths or not all(isinstance(p, str) and p for p in paths):
            raise ConfigError(f"{where}: path {self.path!r} must be a non-empty string or list")
        if isinstance(self.path, list):
            object.__setattr__(self, "path", paths)
        if not isinstance(self.storage_options, dict) or not all(
            isinstance(k, str) for k in self.storage_options
        ):
            raise ConfigError(
                f"{where}: storage_options = {self.storage_options!r} must be a table of options"
            )
        object.__setattr__(self, "format", _enum(ShardFormat, self.format, f"{where}: format"))
        if self.dtype != "auto" and self.dtype not in TOKEN_DTYPES:
            raise ConfigError(
                f"{where}: dtype = {self.dtype!r} is not 'auto' or one of {', '.join(TOKEN_DTYPES)}"
            )
        if self.weight is not None:
            if isinstance(self.weight, bool) or not isinstance(self.weight, (int, float)):
                raise ConfigError(f"{where}: weight = {self.weight!r} must be a number")
            if not self.weight >= 0 or self.weight == float("inf"):
                raise ConfigError(f"{where}: weight = {self.weight} must be finite and >= 0")

    @property
    def paths(self) -> tuple[str, ...]:
        """The path entries as a tuple."""
        return (self.path,) if isinstance(self.path, str) else self.path


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
        object.__setattr__(self, "mode", _enum(SamplingMode, self.mode, "sampling.mode"))
        for name in ("shuffle", "cross_shard"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"sampling.{name} = {getattr(self, name)!r} must be true/false")
        if self.num_samples is not None:
            _check_int(self.num_samples, "sampling.num_samples", 1)


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
        object.__setattr__(self, "unit", _enum(MixtureUnit, self.unit, "mixture.unit"))
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
        _check_int(self.start_step, "schedule.start_step", 0)
        where = f"schedule at start_step {self.start_step}"
        if not isinstance(self.weights, dict) or not self.weights:
            raise ConfigError(f"{where}: weights must be a table of source = weight")
        for name, w in self.weights.items():
            if isinstance(w, bool) or not isinstance(w, (int, float)) or not 0 <= w < float("inf"):
                raise ConfigError(f"{where}: weight of {name!r} = {w!r} must be finite and >= 0")
        if not any(w > 0 for w in self.weights.values()):
            raise ConfigError(f"{where}: all weights are 0; at least one must be positive")


@dataclass(frozen=True, kw_only=True)
class DataConfig:
    """The whole data configuration: everything that decides which sample has which index.

    Args:
        seq_len: Tokens per sample input; samples hold ``seq_len + 1`` tokens.
        sources: The datasets.
        seed: Seed of every permutation.
        eos_token_id: End-of-document token, for masks when the format has no document index.
        vocab_size: When set, every delivered token id is checked to be below it.
        global_batch_size: When set, ``world_size * batch_size`` must equal it.
        sampling: Sampling options.
        packing: Packing-mask options.
        mixture: How weights are read (several sources).
        schedule: Weight phases by global step (annealing).
    """

    seq_len: int
    sources: tuple[SourceConfig, ...]
    seed: int = 0
    eos_token_id: int | None = None
    vocab_size: int | None = None
    global_batch_size: int | None = None
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    packing: PackingConfig = field(default_factory=PackingConfig)
    mixture: MixtureConfig = field(default_factory=MixtureConfig)
    schedule: tuple[PhaseConfig, ...] = ()

    @property
    def is_mixture(self) -> bool:
        """Several sources, or a schedule: samples are allocated to sources by weight."""
        return len(self.sources) > 1 or bool(self.schedule)

    def __post_init__(self) -> None:
        _check_int(self.seq_len, "seq_len", 1)
        _check_int(self.seed, "seed", 0)
        for name, minimum in (("eos_token_id", 0), ("vocab_size", 1), ("global_batch_size", 1)):
            if getattr(self, name) is not None:
                _check_int(getattr(self, name), name, minimum)
        if isinstance(self.sources, list):
            object.__setattr__(self, "sources", tuple(self.sources))
        if not self.sources:
            raise ConfigError("sources: at least one [[sources]] entry is required")
        names = [s.name for s in self.sources]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ConfigError(f"sources: duplicate source name(s) {', '.join(dupes)}")
        v, e = self.vocab_size, self.eos_token_id
        if v is not None and e is not None and e >= v:
            raise ConfigError(f"eos_token_id = {e} must be < vocab_size = {v}")
        if isinstance(self.schedule, list):
            object.__setattr__(self, "schedule", tuple(self.schedule))
        if self.is_mixture:
            self._check_mixture(names)

    def _check_mixture(self, names: list[str]) -> None:
        missing = [s.name for s in self.sources if s.weight is None]
        if missing:
            raise ConfigError(
                f"source(s) {', '.join(missing)} have no weight; a mixture needs a weight on "
                "every [[sources]] entry"
            )
        if not any(s.weight for s in self.sources):
            raise ConfigError("all source weights are 0; at least one must be positive")
        if self.global_batch_size is None:
            raise ConfigError(
                "a mixture needs global_batch_size (samples per optimizer step over all ranks): "
                "it fixes the per-batch allocation and the schedule's steps"
            )
        starts = [p.start_step for p in self.schedule]
        if starts != sorted(set(starts)):
            raise ConfigError(f"schedule start_step values {starts} must strictly increase")
        for phase in self.schedule:
            unknown = sorted(set(phase.weights) - set(names))
            absent = [n for n in names if n not in phase.weights]
            if unknown or absent:
                raise ConfigError(
                    f"schedule at start_step {phase.start_step}: "
                    + (f"unknown source(s) {', '.join(unknown)}; " if unknown else "")
                    + (f"no weight for {', '.join(absent)}; " if absent else "")
                    + f"sources are {', '.join(names)}"
                )

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], base_dir: str | None = None) -> DataConfig:
        """Build from a plain mapping (parsed TOML/YAML/JSON).

        Args:
            data: The mapping.
            base_dir: Folder that relative local source paths are resolved against.
        """
        if not isinstance(data, Mapping):
            raise ConfigError(f"config must be a mapping, got {type(data).__name__}")
        _check_keys(data, cls, "config")
        if "seq_len" not in data:
            raise ConfigError("config: seq_len is required")
        raw_sources = data.get("sources", [])
        if not isinstance(raw_sources, Sequence) or isinstance(raw_sources, str):
            raise ConfigError("sources must be a list of [[sources]] tables")
        sources = tuple(_source_from_dict(s, i, base_dir) for i, s in enumerate(raw_sources))
        nested = ("sources", "sampling", "packing", "mixture", "schedule")
        kwargs = {k: v for k, v in data.items() if k not in nested}
        raw_schedule = data.get("schedule", [])
        if not isinstance(raw_schedule, Sequence) or isinstance(raw_schedule, str):
            raise ConfigError("schedule must be a list of [[schedule]] tables")
        return cls(
            **kwargs,
            sources=sources,
            sampling=_sub(SamplingConfig, data.get("sampling", {}), "sampling"),
            packing=_sub(PackingConfig, data.get("packing", {}), "packing"),
            mixture=_sub(MixtureConfig, data.get("mixture", {}), "mixture"),
            schedule=tuple(
                _sub(PhaseConfig, p, f"schedule[{i}]") for i, p in enumerate(raw_schedule)
            ),
        )

    def to_dict(self) -> dict[str, Any]:
        """A JSON/TOML-safe mapping that ``from_dict`` turns back into an equal config.

        Fields that are ``None`` (unset options) are left out; values inside
        ``storage_options`` are kept as they are.
        """
        return _plain(self)

    def to_json(self) -> str:
        """The config as indented JSON."""
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)


def _sub(kind: type, data: Any, where: str) -> Any:
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where} must be a table, got {data!r}")
    _check_keys(data, kind, where)
    return kind(**data)


def _source_from_dict(data: Any, index: int, base_dir: str | None) -> SourceConfig:
    where = f"sources[{index}]"
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where} must be a table, got {data!r}")
    _check_keys(data, SourceConfig, where)
    for key in ("name", "path"):
        if key not in data:
            raise ConfigError(f"{where}: {key} is required")
    data = dict(data)
    path = data["path"]
    if isinstance(path, (list, tuple)):
        data["path"] = tuple(_resolve(p, base_dir) for p in path)
    elif isinstance(path, str):
        data["path"] = _resolve(path, base_dir)
    return SourceConfig(**data)


def _resolve(path: Any, base_dir: str | None) -> Any:
    if not isinstance(path, str) or base_dir is None or "://" in path or os.path.isabs(path):
        return path
    return os.path.normpath(os.path.join(base_dir, path)) + ("/" if path.endswith("/") else "")


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = ((f.name, getattr(value, f.name)) for f in dataclasses.fields(value))
        return {name: _plain(v) for name, v in fields if v is not None}
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return dict(value)
    return value


def load_config(config: str | os.PathLike[str] | Mapping[str, Any] | DataConfig) -> DataConfig:
    """Load a config from a TOML/YAML/JSON file path, a mapping, or pass a DataConfig through.

    Raises:
        ConfigError: the file is missing or unparsable, or a value is invalid.
    """
    if isinstance(config, DataConfig):
        return config
    if isinstance(config, Mapping):
        return DataConfig.from_dict(config)
    path = Path(config)
    if not path.is_file():
        raise ConfigError(f"{path}: config file not found")
    text = path.read_text(encoding="utf-8")
    try:
        if path.suffix in (".yaml", ".yml"):
            import yaml

            data = yaml.safe_load(text)
        elif path.suffix == ".json":
            data = json.loads(text)
        else:
            data = tomllib.loads(text)
    except Exception as exc:
        raise ConfigError(f"{path}: cannot parse config: {exc}") from exc
    try:
        return DataConfig.from_dict(data, base_dir=str(path.parent.resolve()))
    except ConfigError as exc:
        add_note(exc, f"in config file {path}")
        raise
