"""A global batch size that changes over the run: ``rampup_batch_size`` or ``[[batch_schedule]]``.

Two ways to say it (docs/config.md, docs/schedules.md), both top-level keys:

* ``rampup_batch_size = [start, increment, samples]``: Megatron-LM's ``--rampup-batch-size``
  with ``global_batch_size`` as ``--global-batch-size`` (the size after the ramp), computed
  as megatron-core's calculator does (:func:`streamload.plan.step_sizes.megatron_rampup`).
* ``[[batch_schedule]]`` tables, ``global_batch_size`` from ``start_step`` (optimizer steps)
  or ``start_sample`` (consumed samples; the first step that begins at or after it), the
  first at 0. ``global_batch_size`` at the top level is then the last table's (filled in
  when unset).

Either way the per-rank batch (``batch_size``) is fixed and an optimizer step of ``gbs_k``
samples is ``gbs_k / (world_size x batch_size)`` micro-batches, so ``grad_accum_steps`` stays
1. The sizes count consumed samples of the first pass; a later pass runs at the final size
(the ramp must end inside the first pass, checked when the loader is built).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from streamload.config.checks import check_int, show
from streamload.errors import ConfigError

if TYPE_CHECKING:
    from streamload.config.data import DataConfig
    from streamload.plan.step_sizes import StepSizes

__all__ = [
    "BatchStepConfig",
    "batch_schedule_fingerprint",
    "batch_schedule_tables",
    "check_batch_schedule",
    "has_batch_ramp",
    "step_sizes",
]


@dataclass(frozen=True, kw_only=True)
class BatchStepConfig:
    """One ``[[batch_schedule]]`` entry: optimizer steps hold ``global_batch_size`` samples
    from ``start_step`` (or ``start_sample``) on; give exactly one of the two.

    Args:
        global_batch_size: Samples per optimizer step over all ranks.
        start_step: First optimizer step of the entry.
        start_sample: First consumed sample of the entry (a step that begins at or after it).
    """

    global_batch_size: int
    start_step: int | None = None
    start_sample: int | None = None

    def __post_init__(self) -> None:
        check_int(self.global_batch_size, "batch_schedule.global_batch_size", 1)
        given = [n for n in ("start_step", "start_sample") if getattr(self, n) is not None]
        if len(given) != 1:
            raise ConfigError(
                f"batch_schedule entry with global_batch_size = {self.global_batch_size}: give "
                f"exactly one of start_step and start_sample (got {' and '.join(given) or 'none'})"
            )
        check_int(getattr(self, given[0]), f"batch_schedule.{given[0]}", 0)

    @property
    def start(self) -> int:
        """The entry's first step or sample."""
        return self.start_step if self.start_step is not None else int(self.start_sample or 0)


def batch_schedule_tables(
    data: Mapping[str, Any], table: Callable[[type, Any, str], Any]
) -> dict[str, Any]:
    """``DataConfig`` keyword arguments of a config mapping's ``batch_schedule``, where given
    (``table(kind, data, where)`` reads one table strictly).

    Raises:
        ConfigError: ``batch_schedule`` is not a list of tables, or a table is malformed.
    """
    if "batch_schedule" not in data:
        return {}
    raw = data["batch_schedule"]
    if not isinstance(raw, Sequence) or isinstance(raw, str):
        raise ConfigError("batch_schedule must be a list of [[batch_schedule]] tables")
    return {
        "batch_schedule": tuple(
            table(BatchStepConfig, t, f"batch_schedule[{i}]") for i, t in enumerate(raw)
        )
    }


def has_batch_ramp(config: DataConfig) -> bool:
    """Whether the config's global batch size changes over the run."""
    return config.rampup_batch_size is not None or bool(config.batch_schedule)


def check_batch_schedule(config: DataConfig) -> None:
    """Normalize and check ``rampup_batch_size`` / ``[[batch_schedule]]``; fill an unset
    ``global_batch_size`` from the last table.

    Raises:
        ConfigError: naming the key, its value and the rule.
    """
    ramp, table = config.rampup_batch_size, config.batch_schedule
    if isinstance(table, list):
        object.__setattr__(config, "batch_schedule", table := tuple(table))
    if ramp is None and not table:
        return
    if ramp is not None and table:
        raise ConfigError(
            "rampup_batch_size and [[batch_schedule]] both set; use one of them (the three "
            "numbers are a ramp, the tables any schedule)"
        )
    if config.seq_len_schedule or config.seq_len_warmup is not None:
        raise ConfigError(
            "a batch size schedule with a sequence-length warm-up ([[seq_len_schedule]] / "
            "[seq_len_warmup]) is not supported yet: the warm-up counts steps of one "
            "global_batch_size; use one of them"
        )
    if config.grad_accum_steps != 1:
        raise ConfigError(
            f"grad_accum_steps = {config.grad_accum_steps} with a batch size schedule: the "
            "micro-batches of each step follow the schedule (global batch size / (world_size "
            "x batch_size)); remove grad_accum_steps"
        )
    if ramp is not None:
        object.__setattr__(config, "rampup_batch_size", _check_ramp(ramp, config))
    else:
        _check_table(table, config)


def _check_ramp(ramp: Any, config: DataConfig) -> tuple[int, int, int]:
    if not isinstance(ramp, (list, tuple)) or len(ramp) != 3:
        raise ConfigError(
            f"rampup_batch_size = {show(ramp)} must be [start, increment, samples] (Megatron-LM's "
            "--rampup-batch-size)"
        )
    for value, name, low in zip(ramp, ("start", "increment", "samples"), (1, 1, 1), strict=True):
        check_int(value, f"rampup_batch_size {name}", low)
    start, increment, samples = (int(v) for v in ramp)
    final = config.global_batch_size
    if final is None:
        raise ConfigError(
            f"rampup_batch_size = {[start, increment, samples]} needs global_batch_size (the "
            "size after the ramp, Megatron-LM's --global-batch-size)"
        )
    if final <= start or (final - start) % increment:
        raise ConfigError(
            f"rampup_batch_size = {[start, increment, samples]} with global_batch_size = "
            f"{final}: the ramp must rise from start to global_batch_size in whole increments "
            f"(global_batch_size - start = {final - start} > 0 and a multiple of {increment})"
        )
    return start, increment, samples


def _check_table(table: tuple[BatchStepConfig, ...], config: DataConfig) -> None:
    if not all(isinstance(entry, BatchStepConfig) for entry in table):
        raise ConfigError("batch_schedule must be a list of [[batch_schedule]] tables")
    keys = {"start_step" if e.start_step is not None else "start_sample" for e in table}
    if len(keys) > 1:
        raise ConfigError(
            "batch_schedule: some entries give start_step, others start_sample; use one of "
            "them in every entry"
        )
    key = keys.pop()
    starts = [e.start for e in table]
    if starts[0] != 0 or starts != sorted(set(starts)):
        raise ConfigError(
            f"batch_schedule {key} values {starts} must begin at 0 and strictly increase"
        )
    final = table[-1].global_batch_size
    if config.global_batch_size is None:
        object.__setattr__(config, "global_batch_size", final)
    elif config.global_batch_size != final:
        raise ConfigError(
            f"global_batch_size = {config.global_batch_size}, but the last [[batch_schedule]] "
            f"entry says {final}; remove global_batch_size or make them equal"
        )


def batch_schedule_fingerprint(config: DataConfig) -> dict[str, Any] | None:
    """The schedule as a state's fingerprint holds it (``None`` when the size is constant:
    states saved without a schedule keep their fingerprint). It decides where each step
    begins, hence the mixture allocation and the position a state may stand at."""
    if config.rampup_batch_size is not None:
        ramp = [int(v) for v in config.rampup_batch_size]
        return {"rampup_batch_size": ramp, "global_batch_size": config.global_batch_size}
    if config.batch_schedule:
        key = "start_step" if config.batch_schedule[0].start_step is not None else "start_sample"
        return {key: [[e.start, e.global_batch_size] for e in config.batch_schedule]}
    return None


def step_sizes(config: DataConfig, micro: int, pass_index: int = 0) -> StepSizes:
    """Samples of each optimizer step of pass ``pass_index`` for global micro-batches of
    ``micro`` samples: ``grad_accum_steps x micro`` throughout, or the schedule (counted
    from the first pass's start; later passes run at its final size)."""
    from streamload.plan.step_sizes import StepSizes  # numpy's package: not at import time

    if not has_batch_ramp(config):
        return StepSizes.constant(config.grad_accum_steps * micro)
    entries = tuple(
        (e.start_step is not None, e.start, e.global_batch_size) for e in config.batch_schedule
    )
    sizes = _schedule(config.rampup_batch_size, config.global_batch_size, entries)
    return sizes if pass_index == 0 else StepSizes.constant(sizes.final)


@functools.lru_cache(maxsize=64)
def _schedule(
    ramp: tuple[int, int, int] | None, final: int | None, entries: tuple[tuple[bool, int, int], ...]
) -> StepSizes:
    from streamload.plan.step_sizes import StepSizes, megatron_rampup

    if ramp is not None:
        assert final is not None  # checked with the config
        return megatron_rampup(*ramp, final)
    pairs = [(start, size) for _, start, size in entries]
    by_step = entries[0][0]
    return StepSizes.from_steps(pairs) if by_step else StepSizes.from_samples(pairs)
