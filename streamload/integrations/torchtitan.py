"""streamload as torchtitan's data loader: its builder call, its batches, a DCP state any DP
degree resumes.

torchtitan (0.1 to 0.3, ``torchtitan/components/dataloader.py`` and the trainer) asks of a
data loader:

* **a builder** called with ``dp_world_size``, ``dp_rank`` and ``tokenizer``, plus
  ``job_config`` (0.1-0.2: ``TrainSpec.build_dataloader_fn``) or ``seq_len``,
  ``local_batch_size`` and ``snapshot_every_n_steps`` (0.3: ``config.dataloader.build(...)``).
  The DP rank and size are those of torchtitan's flattened ``dp_replicate`` × ``dp_shard``
  mesh, so TP/PP/CP peers of a DP rank get identical batches;
* **batches** ``(input_dict, labels)``: ``input_dict["input"]`` the ``[b, seq_len]`` int64
  tokens, each other key of ``input_dict`` a keyword argument of the model's forward
  (``positions``: per-document positions, from which torchtitan's flex/varlen attention builds
  block-causal masks), ``labels`` ``[b, seq_len]`` int64 with -100 for untrained tokens;
* **gradient accumulation**: its trainer runs ``global_batch_size // (local_batch_size x
  dp_degree)`` batches per optimizer step; the job config's ``training.global_batch_size``
  sets streamload's ``grad_accum_steps`` to match (0.1-0.2), so streamload's steps are
  torchtitan's (0.3 passes no job config: set ``grad_accum_steps`` in the streamload config);
* **a DCP ``Stateful``**: the checkpointer saves ``{"dataloader": loader, "model": ...}``
  with ``dcp.save`` on every rank and restores it with ``dcp.load``.

torchtitan's own ``ParallelAwareDataloader`` keys its state by rank (``{"dp_rank_<r>": ...,
"world_size": W}``) and asserts the same DP degree when loading: saved at DP 2, the ranks 2
and 3 of a DP-4 job find no entry of theirs in the checkpoint (DCP: missing key), and a DP-1
job stops at its assertion. :class:`TorchtitanLoader` saves one key, :attr:`STATE_KEY`, the
same on every rank (the global sample cursor, ``docs/design.md`` §2.8), which DCP writes once
and every rank of any DP degree, worker count or batch size reads to continue on exactly the
next sample.

Example (torchtitan 0.3)::

    from streamload.integrations.torchtitan import TorchtitanDataConfig
    config.dataloader = TorchtitanDataConfig(data="data.toml", num_workers=2)

(torchtitan 0.1-0.2: ``TrainSpec(..., build_dataloader_fn=TorchtitanDataConfig(
data="data.toml").build)``.)
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from streamload.config import DataConfig, load_config
from streamload.config.batch_schedule import has_batch_ramp
from streamload.config.checks import check_bool
from streamload.config.loader_args import LoaderOptions
from streamload.errors import ConfigError, StateError
from streamload.loader import Batch, StreamLoader, build_loader

__all__ = [
    "STATE_KEY",
    "TorchtitanBatch",
    "TorchtitanDataConfig",
    "TorchtitanLoader",
    "build_torchtitan_dataloader",
    "to_torchtitan_batch",
]

STATE_KEY = "streamload"
"""The one key of :meth:`TorchtitanLoader.state_dict`, the same on every rank."""

TorchtitanBatch = tuple[dict[str, torch.Tensor], torch.Tensor]
"""``(input_dict, labels)``, what torchtitan's training loop unpacks from each batch."""


def to_torchtitan_batch(batch: Batch) -> TorchtitanBatch:
    """``({"input": input_ids[, "positions": position_ids]}, labels)`` of a streamload batch.

    ``positions`` is there when the config has ``packing.masks = true``. The batch's other
    fields (``sample_index``, ``source_ids``, masks) are left out: torchtitan passes every
    key of ``input_dict`` but ``input`` to the model's forward.
    """
    inputs = {"input": batch["input_ids"]}
    if "position_ids" in batch:
        inputs["positions"] = batch["position_ids"]
    return inputs, batch["labels"]


class TorchtitanLoader:
    """A :class:`streamload.StreamLoader` in torchtitan's data loader contract.

    Args:
        loader: This DP rank's loader.
        infinite: Go on with the next pass when one ends (torchtitan's ``infinite``, its
            default): the loop ends only with the stream (a source's ``stop`` policy) or a
            pass with no batch. False: one pass per ``iter()``.

    State:
        ``streamload`` (:data:`STATE_KEY`): the loader's state (``docs/design.md`` §2.8) as
        one JSON string, equal on every rank. One string, not the nested state: DCP makes
        one checkpoint entry per leaf of a nested state and demands every entry of the
        loading side's from the checkpoint, so a state of another format version or source
        list would fail inside DCP as a missing key, never reaching the state's upgraders
        or the ``StateError`` that names the difference.
    """

    STATE_KEY = STATE_KEY

    def __init__(self, loader: StreamLoader, *, infinite: bool = True) -> None:
        check_bool(infinite, "infinite")
        if loader.stream.config.packing.compact:
            raise ConfigError(
                "packing.compact = true: torchtitan's loop takes int64 inputs and labels; "
                "set packing.compact = false for the torchtitan adapter"
            )
        self.loader = loader
        self.infinite = infinite

    @property
    def dp_rank(self) -> int:
        """This loader's data-parallel rank."""
        return self.loader.rank.rank

    @property
    def dp_world_size(self) -> int:
        """The data-parallel size."""
        return self.loader.rank.world_size

    def __iter__(self) -> Iterator[TorchtitanBatch]:
        while True:
            delivered = 0
            for batch in self.loader:
                delivered += 1
                yield to_torchtitan_batch(batch)
            if not self.infinite or delivered == 0 or self.loader.stats()["ended_by"]:
                return

    def state_dict(self) -> dict[str, str]:
        """``{STATE_KEY: the loader's state as JSON}``, the same on every rank."""
        state = self.loader.state_dict()
        return {STATE_KEY: json.dumps(state, sort_keys=True, separators=(",", ":"))}

    def load_state_dict(
        self, state: Mapping[str, Any], *, ignore_fingerprint_mismatch: bool = False
    ) -> None:
        """Continue at the saved position, whatever DP degree saved it.

        Args:
            state: ``{STATE_KEY: JSON string}`` as :meth:`state_dict` makes it (the loader's
                state as a mapping is accepted too).
            ignore_fingerprint_mismatch: As :meth:`streamload.StreamLoader.load_state_dict`.

        Raises:
            StateError: not such a mapping (a torchtitan ``ParallelAwareDataloader`` state
                is named as one), unparsable JSON, or a state the loader refuses.
        """
        self.loader.load_state_dict(
            _saved_state(state), ignore_fingerprint_mismatch=ignore_fingerprint_mismatch
        )

    def close(self) -> None:
        """Stop the loader's workers (see :meth:`streamload.StreamLoader.close`)."""
        self.loader.close()

    def __enter__(self) -> TorchtitanLoader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _saved_state(state: Any) -> Any:
    """The loader state inside a :meth:`TorchtitanLoader.state_dict`-made mapping: its JSON
    string parsed, anything else as it is (``streamload.state.read_state`` checks it)."""
    if not isinstance(state, Mapping):
        raise StateError(
            f"torchtitan loader state is of type {type(state).__name__}; expected a mapping "
            f"{{'{STATE_KEY}': <JSON string>}}"
        )
    keys = sorted(str(key) for key in state)
    if keys != [STATE_KEY]:
        per_rank = [key for key in keys if key.startswith("dp_rank_")]
        what = (
            f"a torchtitan ParallelAwareDataloader state (per-rank keys {per_rank}), which "
            "only the dataset that saved it can resume"
            if per_rank
            else "not a streamload state"
        )
        raise StateError(
            f"torchtitan loader state has keys {keys}: {what}; expected ['{STATE_KEY}']"
        )
    value = state[STATE_KEY]
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except json.JSONDecodeError as exc:
        raise StateError(
            f"torchtitan loader state['{STATE_KEY}'] is not JSON ({exc}): {value[:80]!r}"
        ) from None


def build_torchtitan_dataloader(
    config: TorchtitanDataConfig,
    *,
    dp_world_size: int,
    dp_rank: int,
    tokenizer: Any = None,
    seq_len: int | None = None,
    local_batch_size: int | None = None,
    job_config: Any = None,
    snapshot_every_n_steps: int | None = None,
) -> TorchtitanLoader:
    """This DP rank's loader, called as torchtitan calls a data loader builder.

    Args:
        config: The streamload config and loader settings.
        dp_world_size: torchtitan's DP degree (``dp_replicate * dp_shard``).
        dp_rank: This rank's DP rank.
        tokenizer: Unused: the data is tokenized already.
        seq_len: torchtitan's ``training.seq_len`` (0.3); checked against the config's.
        local_batch_size: Samples per rank and batch (0.3).
        job_config: torchtitan's ``JobConfig`` (0.1-0.2): ``training.seq_len`` and
            ``training.local_batch_size`` are read from it when not given, and its
            ``training.global_batch_size`` decides the gradient accumulation
            (:func:`_with_accumulation`).
        snapshot_every_n_steps: Unused: the state is exact after every batch.

    Raises:
        ConfigError: no batch size, a ``seq_len`` other than the config's, gradient
            accumulation other than torchtitan's, or what :func:`streamload.build_loader`
            refuses.
    """
    del tokenizer, snapshot_every_n_steps  # pre-tokenized data; an O(1) state every step
    training = getattr(job_config, "training", None)
    if seq_len is None:
        seq_len = getattr(training, "seq_len", None)
    if local_batch_size is None:
        local_batch_size = getattr(training, "local_batch_size", None)
    if local_batch_size is None:
        raise ConfigError(
            "torchtitan loader: no local_batch_size (pass it, or a job_config with "
            "training.local_batch_size)"
        )
    data = _with_accumulation(load_config(config.data), training, local_batch_size, dp_world_size)
    if seq_len is not None and seq_len != data.seq_len:
        raise ConfigError(
            f"torchtitan trains seq_len = {seq_len!r} but the streamload config has seq_len = "
            f"{data.seq_len}; set them equal"
        )
    loader = build_loader(
        data,
        batch_size=local_batch_size,
        rank=dp_rank,
        world_size=dp_world_size,
        num_workers=config.num_workers,
        options=config.options,
    )
    return TorchtitanLoader(loader, infinite=config.infinite)


def _torchtitan_config_base() -> type:
    """torchtitan's ``BaseDataLoader.Config`` when torchtitan imports, else ``object``.

    torchtitan parses its command line with tyro, which expands ``--dataloader.*`` only for
    a value that is an instance of the field's declared type (``BaseDataLoader.Config``);
    a value of another class becomes a union of subcommands that every override must name.
    """
    try:
        from torchtitan.components.dataloader import BaseDataLoader
    except ImportError:  # torchtitan absent (or 0.2 without triton): plain dataclass
        return object
    base: type = BaseDataLoader.Config
    return base


# Not frozen: torchtitan's configs are mutable dataclasses, and a frozen dataclass cannot
# subclass one. slots and kw_only as torchtitan demands of every Configurable.Config.
@dataclass(kw_only=True, slots=True)
class TorchtitanDataConfig(_torchtitan_config_base()):  # type: ignore[misc]
    """torchtitan's ``config.dataloader`` (0.3) for streamload; its ``build`` is also a
    ``TrainSpec.build_dataloader_fn`` (0.1-0.2).

    Where torchtitan is installed this is a subclass of its ``BaseDataLoader.Config``
    (whose ``dataset`` and ``dataset_path`` fields it inherits and ignores), and every field
    has a type torchtitan's command line (tyro) parses, so ``--dataloader.data other.toml``,
    ``--dataloader.num-workers 4``, ``--dataloader.no-infinite`` and
    ``--dataloader.options.worker-type PROCESS`` override a config registry's values.

    Args:
        data: Path of the streamload config (TOML/YAML/JSON). Its ``seq_len`` must equal
            torchtitan's ``training.seq_len``. In code a :class:`DataConfig` or a mapping
            is accepted too (torchtitan's command line cannot override those).
        num_workers: Loader workers per rank.
        infinite: See :class:`TorchtitanLoader`.
        options: Worker type, prefetch, pinning, chunk size.
    """

    data: str
    num_workers: int = 0
    infinite: bool = True
    options: LoaderOptions = field(default_factory=LoaderOptions)

    def __post_init__(self) -> None:
        if isinstance(self.data, os.PathLike):  # a Path given in code: the field's type
            self.data = os.fspath(self.data)

    build = build_torchtitan_dataloader
    """:func:`build_torchtitan_dataloader` of this config: torchtitan's builder call
    (``config.dataloader.build(...)``, 0.3; ``TrainSpec.build_dataloader_fn``, 0.1-0.2)."""


def _with_accumulation(
    data: DataConfig, training: Any, local_batch_size: Any, dp_world_size: Any
) -> DataConfig:
    """``data`` with torchtitan's gradient accumulation, so that streamload's steps (mixture
    allocation, ``[[schedule]] start_step``, the drop rule) are torchtitan's optimizer steps.

    torchtitan's trainer accumulates ``training.global_batch_size // (local_batch_size x
    dp_degree)`` batches per step (``global_batch_size < 0``: 1). When the job config names
    it, the streamload config takes that ``grad_accum_steps`` (and then its
    ``global_batch_size``, when unset, follows from the loader arguments); a config that
    sets another ``grad_accum_steps`` or ``global_batch_size`` is refused. torchtitan 0.3
    passes no job config: the streamload config must then say ``grad_accum_steps`` itself.

    Raises:
        ConfigError: the streamload config disagrees with torchtitan's batch sizes.
    """
    wanted = getattr(training, "global_batch_size", None)
    if not isinstance(wanted, int) or isinstance(wanted, bool) or training is None:
        return data
    if has_batch_ramp(data):
        raise ConfigError(
            "the streamload config has a batch size schedule (rampup_batch_size or "
            "[[batch_schedule]]), but torchtitan's trainer runs every optimizer step at "
            f"training.global_batch_size = {wanted}; remove the schedule"
        )
    if not isinstance(local_batch_size, int) or not isinstance(dp_world_size, int):
        return data  # build_loader names a bad batch size or world size
    micro = local_batch_size * dp_world_size
    if wanted < 0:  # torchtitan's default: one batch per optimizer step
        wanted = micro
    if micro < 1 or wanted % micro:
        raise ConfigError(
            f"torchtitan training.global_batch_size = {wanted} is not a multiple of "
            f"local_batch_size {local_batch_size} x dp_degree {dp_world_size} = {micro}"
        )
    steps = wanted // micro
    keeps = data.grad_accum_steps in (1, steps) and data.global_batch_size in (None, wanted)
    if not keeps:
        raise ConfigError(
            f"torchtitan accumulates {steps} batch(es) per optimizer step (training."
            f"global_batch_size {wanted} / (local_batch_size {local_batch_size} x dp_degree "
            f"{dp_world_size})), but the streamload config has grad_accum_steps = "
            f"{data.grad_accum_steps}, global_batch_size = {data.global_batch_size}; make "
            "them agree (or leave them unset)"
        )
    return data if data.grad_accum_steps == steps else replace(data, grad_accum_steps=steps)
