"""The whole data configuration, and loading it from TOML, YAML, JSON or a dict."""

from __future__ import annotations

import dataclasses
import enum
import functools
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from streamload.config import batch_schedule as batches
from streamload.config.checks import (
    check_int,
    check_plain,
    check_weight_sum,
    close_match,
    show,
    table_fields,
    unknown_keys,
)
from streamload.config.files import read_config_file
from streamload.config.modes import mode_plugin
from streamload.config.options import (
    MixtureConfig,
    PackingConfig,
    PhaseConfig,
    SamplingConfig,
)
from streamload.config.seq_len import (
    SeqLenPhaseConfig,
    SeqLenWarmupConfig,
    check_seq_len_schedule,
    seq_len_tables,
)
from streamload.config.source import SourceConfig
from streamload.config.storage import StorageConfig
from streamload.errors import ConfigError, add_note

__all__ = ["DataConfig", "load_config", "read_config_file"]

_TOP_LEVEL_INTS = (
    ("eos_token_id", 0),
    ("pad_token_id", 0),
    ("vocab_size", 1),
    ("global_batch_size", 1),
)
"""Optional top-level integers and their minimum."""


@dataclass(frozen=True, kw_only=True)
class DataConfig:
    """The whole data configuration: everything that decides which sample has which index.

    Args:
        seq_len: Tokens per sample input; samples hold ``seq_len + 1`` tokens.
        sources: The datasets.
        seed: Seed of every permutation.
        eos_token_id: End-of-document token, for masks when the format has no document index.
        pad_token_id: Fills ``packed``/``padded`` samples after their documents (required
            there); unused in ``concat`` mode, refused in ``megatron`` mode.
        vocab_size: When set, every delivered token id is checked to be below it.
        global_batch_size: Samples per optimizer step over all ranks; when set,
            ``grad_accum_steps * world_size * batch_size`` must equal it.
        grad_accum_steps: Loader batches (micro-batches) per optimizer step: a step holds
            ``grad_accum_steps`` global batches of ``world_size * batch_size`` samples, and
            the mixture allocation, ``[[schedule]] start_step`` and the drop rule count steps.
        rampup_batch_size: ``[start, increment, samples]``: Megatron-LM's batch size ramp up
            to ``global_batch_size`` (:mod:`streamload.config.batch_schedule`).
        batch_schedule: The global batch size by optimizer step or consumed sample.
        sampling: Sampling options.
        packing: Packing-mask options.
        mixture: How weights are read (several sources).
        schedule: Weight phases by global step (annealing).
        seq_len_schedule: Row lengths by optimizer step (sequence-length warm-up; windows
            are carved at ``seq_len`` and cut into shorter rows: docs/config.md).
        seq_len_warmup: The shorthand of such a schedule: OLMo-core's doubling warm-up.
        storage: Fetching and caching of remote shards (never changes the order, so it is
            not in the fingerprint).
    """

    seq_len: int
    sources: tuple[SourceConfig, ...]
    seed: int = 0
    eos_token_id: int | None = None
    pad_token_id: int | None = None
    vocab_size: int | None = None
    global_batch_size: int | None = None
    grad_accum_steps: int = 1
    rampup_batch_size: tuple[int, int, int] | None = None
    batch_schedule: tuple[batches.BatchStepConfig, ...] = ()
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    packing: PackingConfig = field(default_factory=PackingConfig)
    mixture: MixtureConfig = field(default_factory=MixtureConfig)
    schedule: tuple[PhaseConfig, ...] = ()
    seq_len_schedule: tuple[SeqLenPhaseConfig, ...] = ()
    seq_len_warmup: SeqLenWarmupConfig | None = None
    storage: StorageConfig = field(default_factory=StorageConfig)

    @property
    def is_mixture(self) -> bool:
        """Several sources, or a schedule: samples are allocated to sources by weight.

        Never in a mode that blends by its own rule (``megatron``).
        """
        if not mode_plugin(self.sampling.mode_name).blends_sources:
            return False
        return len(self.sources) > 1 or bool(self.schedule)

    def __post_init__(self) -> None:
        check_int(self.seq_len, "seq_len", 1)
        check_int(self.seed, "seed", 0)
        for name, minimum in _TOP_LEVEL_INTS:
            if getattr(self, name) is not None:
                check_int(getattr(self, name), name, minimum)
        check_int(self.grad_accum_steps, "grad_accum_steps", 1)
        steps, total = self.grad_accum_steps, self.global_batch_size
        if total is not None and total % steps:
            raise ConfigError(
                f"global_batch_size = {total} (samples per optimizer step) is not a multiple of "
                f"grad_accum_steps = {steps}: a step holds grad_accum_steps x world_size x "
                "batch_size samples"
            )
        if isinstance(self.sources, list):
            object.__setattr__(self, "sources", tuple(self.sources))
        if not self.sources:
            raise ConfigError("sources: at least one [[sources]] entry is required")
        names = [s.name for s in self.sources]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ConfigError(f"sources: duplicate source name(s) {', '.join(dupes)}")
        for name in ("eos_token_id", "pad_token_id"):
            token = getattr(self, name)
            if self.vocab_size is not None and token is not None and token >= self.vocab_size:
                raise ConfigError(f"{name} = {token} must be < vocab_size = {self.vocab_size}")
        for name in ("schedule", "seq_len_schedule"):
            if isinstance(getattr(self, name), list):
                object.__setattr__(self, name, tuple(getattr(self, name)))
        weights = [s.weight for s in self.sources if s.weight is not None]
        check_weight_sum(weights, "source weights")
        mode_plugin(self.sampling.mode_name).check_config(self)
        batches.check_batch_schedule(self)  # it may fill global_batch_size, which a mixture needs
        if self.is_mixture:
            self._check_mixture(names)
        check_seq_len_schedule(self)

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
                    + (f"unknown source(s) {_suggest(unknown, names)}; " if unknown else "")
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
        _check_unknown_keys(data)
        if "seq_len" not in data:
            raise ConfigError("config: seq_len is required")
        raw_sources = data.get("sources", [])
        if not isinstance(raw_sources, Sequence) or isinstance(raw_sources, str):
            raise ConfigError("sources must be a list of [[sources]] tables")
        sources = tuple(_source_from_dict(s, i, base_dir) for i, s in enumerate(raw_sources))
        nested = ("sources", "sampling", "packing", "mixture", "schedule", "storage")
        kwargs = {k: v for k, v in data.items() if k not in nested + _SEQ_LEN_TABLES}
        kwargs.pop("batch_schedule", None)  # its tables: batches.batch_schedule_tables
        raw_schedule = data.get("schedule", [])
        if not isinstance(raw_schedule, Sequence) or isinstance(raw_schedule, str):
            raise ConfigError("schedule must be a list of [[schedule]] tables")
        return cls(
            **kwargs,
            sources=sources,
            sampling=_sampling(data.get("sampling", {})),
            packing=_sub(PackingConfig, data.get("packing", {}), "packing"),
            mixture=_sub(MixtureConfig, data.get("mixture", {}), "mixture"),
            storage=_sub(StorageConfig, data.get("storage", {}), "storage"),
            schedule=tuple(
                _sub(PhaseConfig, p, f"schedule[{i}]") for i, p in enumerate(raw_schedule)
            ),
            **seq_len_tables(data, _sub),
            **batches.batch_schedule_tables(data, _sub),
        )

    def to_dict(self) -> dict[str, Any]:
        """A JSON/TOML-safe mapping that ``from_dict`` turns back into an equal config.

        Fields that are ``None`` (unset options) are left out; values inside
        ``storage_options`` are kept as they are.
        """
        plain = _plain(self)
        if not plain["seq_len_schedule"]:  # unset: printed as before it existed
            del plain["seq_len_schedule"]
        return plain

    def to_json(self) -> str:
        """The config as indented JSON.

        Raises:
            ConfigError: a ``storage_options`` value given in a dict is not JSON data.
        """
        plain = self.to_dict()
        check_plain(plain, "cannot print the config as JSON: ")  # storage_options from a dict
        return json.dumps(plain, indent=2, sort_keys=True)


# What a table's unknown key may have been meant as: a field of another table, or a loader
# argument (so `batch_size = 8` in a config says where it goes).
_TABLES: dict[str, type] = {
    "config": DataConfig,
    "[[sources]]": SourceConfig,
    "[sampling]": SamplingConfig,
    "[packing]": PackingConfig,
    "[mixture]": MixtureConfig,
    "[[schedule]]": PhaseConfig,
    "[[batch_schedule]]": batches.BatchStepConfig,
    "[storage]": StorageConfig,
    "[[seq_len_schedule]]": SeqLenPhaseConfig,
    "[seq_len_warmup]": SeqLenWarmupConfig,
}
_SEQ_LEN_TABLES = ("seq_len_schedule", "seq_len_warmup")
"""The sequence-length warm-up's tables (read only when given: other configs unchanged)."""


@functools.cache
def _hints(table: str) -> dict[str, str]:
    from streamload.config.loader_args import LOADER_ARGUMENTS, LoaderOptions  # on errors only

    homes: dict[str, list[str]] = {}
    for name, kind in _TABLES.items():
        if name != table:
            for f in dataclasses.fields(kind):
                homes.setdefault(f.name, []).append("the top level" if name == "config" else name)
    if table != "[sampling]":
        from streamload.config.sampling import mode_option_keys

        for key, modes in mode_option_keys().items():
            where = " or ".join(repr(m) for m in modes)
            homes.setdefault(key, []).append(f"[sampling] (mode = {where})")
    hints = {key: f"it belongs in {' or '.join(where)}" for key, where in homes.items()}
    for arg in LOADER_ARGUMENTS:
        hints.setdefault(arg, f"it is a loader argument: build_loader({arg}=...)")
    for f in dataclasses.fields(LoaderOptions):
        hints.setdefault(f.name, f"it is a loader option: LoaderOptions({f.name}=...)")
    return hints


def _suggest(unknown: list[str], names: list[str]) -> str:
    """``webb (did you mean web?), code``: each unknown name with the one it may misspell."""
    close = [(name, close_match(name, names)) for name in unknown]
    return ", ".join(f"{n} (did you mean {c}?)" if c else n for n, c in close)


def _check_unknown_keys(data: Mapping[Any, Any]) -> None:
    """The unknown keys of every table of a config, all in one error: a user with three typos
    fixes them in one go, not in three runs."""
    tables: list[tuple[Any, type, str, str]] = [(data, DataConfig, "config", "config")]
    for name in ("sources", "sampling", "packing", "mixture", "storage", "schedule"):
        value = data.get(name)
        if name in ("sources", "schedule"):  # a list of tables
            if isinstance(value, Sequence) and not isinstance(value, str):
                label = f"[[{name}]]"
                tables += [(t, _TABLES[label], f"{name}[{i}]", label) for i, t in enumerate(value)]
        else:
            if name == "sampling" and isinstance(value, Mapping):  # a mode's own keys too
                from streamload.config.sampling import mode_option_keys

                own = mode_option_keys()
                value = {k: v for k, v in value.items() if k not in own}
            tables.append((value, _TABLES[f"[{name}]"], name, f"[{name}]"))
    problems = [
        unknown_keys(table, kind, where, functools.partial(_hints, label))
        for table, kind, where, label in tables
        if isinstance(table, Mapping)
    ]
    found = [problem for problem in problems if problem]
    if found:
        raise ConfigError("; ".join(found))


def _sub(kind: type, data: Any, where: str) -> Any:
    table = next((n for n, k in _TABLES.items() if k is kind), where)
    try:
        return kind(**table_fields(data, kind, where, functools.partial(_hints, table)))
    except ConfigError as exc:
        add_note(exc, f"in {where}")
        raise


def _sampling(data: Any) -> SamplingConfig:
    """``[sampling]``: the shared keys, and the mode's own (checked by the mode's options)."""
    from streamload.config.sampling import mode_option_keys  # on a config with [sampling]

    try:
        if isinstance(data, Mapping) and "options" in data:
            raise ConfigError(
                "sampling: unknown key options; a mode's own keys are written in [sampling] "
                "itself (e.g. min_seq_len = 64)"
            )
        own = mode_option_keys() if isinstance(data, Mapping) else {}
        shared = {k: v for k, v in data.items() if k not in own} if own else data
        hints = functools.partial(_hints, "[sampling]")
        kwargs = table_fields(shared, SamplingConfig, "sampling", hints)
        return SamplingConfig(**kwargs, **{k: v for k, v in data.items() if k in own})
    except ConfigError as exc:
        add_note(exc, "in sampling")
        raise


def _source_from_dict(data: Any, index: int, base_dir: str | None) -> SourceConfig:
    where = f"sources[{index}]"
    data = table_fields(data, SourceConfig, where, functools.partial(_hints, "[[sources]]"))
    path = data["path"]
    if isinstance(path, (list, tuple)):
        data["path"] = tuple(_resolve(p, base_dir) for p in path)
    elif isinstance(path, str):
        data["path"] = _resolve(path, base_dir)
    for key in ("tokenizer", "cache_dir", "chat_template"):
        if key in data:
            data[key] = _resolve(data[key], base_dir)
    return SourceConfig(**data)


def _resolve(path: Any, base_dir: str | None) -> Any:
    if not isinstance(path, str) or base_dir is None or "://" in path or os.path.isabs(path):
        return path
    return os.path.normpath(os.path.join(base_dir, path)) + ("/" if path.endswith("/") else "")


def _plain(value: Any) -> Any:
    if isinstance(value, SamplingConfig):  # the mode's options are [sampling] keys too
        return {name: _plain(v) for name, v in value.table().items() if v is not None}
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
    name = os.fspath(config) if isinstance(config, os.PathLike) else config
    if not isinstance(name, str):
        raise ConfigError(
            f"config = {show(config, 80)}: expected a path to a TOML/YAML/JSON file, a mapping or "
            f"a DataConfig, got {type(config).__name__}"
        )
    path = Path(name)
    data = read_config_file(path)
    if data is None:  # an empty YAML document
        raise ConfigError(f"{path}: the config file is empty")
    try:
        return DataConfig.from_dict(data, base_dir=str(path.parent.resolve()))
    except ConfigError as exc:
        add_note(exc, f"in config file {path}")
        raise
