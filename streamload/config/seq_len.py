"""Sequence-length warm-up: ``[[seq_len_schedule]]`` and ``[seq_len_warmup]``
(docs/config.md "Sequence-length warm-up"; the rule: :mod:`streamload.plan.seq_len`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from streamload.config.checks import check_int
from streamload.config.modes import mode_plugin
from streamload.errors import ConfigError

if TYPE_CHECKING:
    from streamload.config.data import DataConfig
    from streamload.plan.seq_len import SeqLenSchedule

__all__ = [
    "SeqLenPhaseConfig",
    "SeqLenWarmupConfig",
    "check_seq_len_schedule",
    "seq_len_schedule",
    "seq_len_tables",
]


@dataclass(frozen=True, kw_only=True)
class SeqLenPhaseConfig:
    """One ``[[seq_len_schedule]]`` entry: rows of ``seq_len`` inputs from optimizer step
    ``start_step`` on (windows are still carved at the config's ``seq_len``, the maximum).

    Args:
        start_step: First optimizer step of the phase (from 0, over the whole run).
        seq_len: Inputs per row; divides the config's ``seq_len``.
    """

    start_step: int
    seq_len: int

    def __post_init__(self) -> None:
        check_int(self.start_step, "seq_len_schedule.start_step", 0)
        check_int(self.seq_len, f"seq_len_schedule at start_step {self.start_step}: seq_len", 1)


@dataclass(frozen=True, kw_only=True)
class SeqLenWarmupConfig:
    """``[seq_len_warmup]``: OLMo-core's split warm-up from ``start_seq_len`` to the config's
    ``seq_len`` over the first ``steps`` optimizer steps (the length doubles where a straight
    line from the one to the other reaches it: :func:`streamload.plan.seq_len.warmup_phases`).

    Args:
        start_seq_len: Inputs per row at step 0; ``seq_len / start_seq_len`` is a power of 2.
        steps: Optimizer steps of the warm-up; ``seq_len`` from this step on.
    """

    start_seq_len: int
    steps: int

    def __post_init__(self) -> None:
        check_int(self.start_seq_len, "seq_len_warmup.start_seq_len", 1)
        check_int(self.steps, "seq_len_warmup.steps", 1)


def seq_len_tables(
    data: Mapping[str, Any], table: Callable[[type, Any, str], Any]
) -> dict[str, Any]:
    """``DataConfig`` keyword arguments of a config mapping's ``seq_len_schedule`` and
    ``seq_len_warmup``, where given (``table(kind, data, where)`` reads one table strictly).

    Raises:
        ConfigError: ``seq_len_schedule`` is not a list of tables, or a table is malformed.
    """
    out: dict[str, Any] = {}
    if "seq_len_schedule" in data:
        raw = data["seq_len_schedule"]
        if not isinstance(raw, Sequence) or isinstance(raw, str):
            raise ConfigError("seq_len_schedule must be a list of [[seq_len_schedule]] tables")
        out["seq_len_schedule"] = tuple(
            table(SeqLenPhaseConfig, p, f"seq_len_schedule[{i}]") for i, p in enumerate(raw)
        )
    if "seq_len_warmup" in data:
        out["seq_len_warmup"] = table(SeqLenWarmupConfig, data["seq_len_warmup"], "seq_len_warmup")
    return out


def seq_len_schedule(config: DataConfig) -> SeqLenSchedule | None:
    """The config's schedule (``None``: none set; every step at ``seq_len``)."""
    from streamload.plan.seq_len import SeqLenSchedule, warmup_phases  # numpy: on use

    warmup = config.seq_len_warmup
    if warmup is not None:
        phases = warmup_phases(warmup.start_seq_len, config.seq_len, warmup.steps)
    elif config.seq_len_schedule:
        phases = tuple((p.start_step, p.seq_len) for p in config.seq_len_schedule)
    else:
        return None
    return SeqLenSchedule(config.seq_len, phases, int(config.global_batch_size or 0))


def check_seq_len_schedule(config: DataConfig) -> None:
    """The schedule's rules against the whole config.

    Raises:
        ConfigError: both tables set; a mode whose samples cannot be cut into rows; no
            ``global_batch_size`` (it fixes which windows make step k); start steps not
            strictly increasing; a length above or not dividing ``seq_len``; a warm-up whose
            start length is not ``seq_len`` over a power of two.
    """
    warmup, phases = config.seq_len_warmup, config.seq_len_schedule
    if warmup is None and not phases:
        return
    if warmup is not None and phases:
        raise ConfigError(
            "[seq_len_warmup] and [[seq_len_schedule]] are both set; give one (the warm-up is "
            "a shorthand for a schedule)"
        )
    key = "seq_len_warmup" if warmup is not None else "seq_len_schedule"
    mode = config.sampling.mode_name
    if not mode_plugin(mode).cuts_rows:
        raise ConfigError(
            f"{key}: sampling.mode = {mode!r} cannot cut its samples into shorter rows; a "
            "sequence-length schedule works in concat and packed modes"
        )
    if config.global_batch_size is None:
        raise ConfigError(
            f"{key} needs global_batch_size (windows per optimizer step over all ranks): it "
            "fixes which windows make step k, whatever the world size"
        )
    top = config.seq_len
    if warmup is not None:
        start = warmup.start_seq_len
        ratio = top // start
        if start >= top or top % start or ratio & (ratio - 1):
            raise ConfigError(
                f"seq_len_warmup.start_seq_len = {start} must be seq_len = {top} divided by a "
                "power of two >= 2 (the length doubles during the warm-up)"
            )
        return
    starts = [p.start_step for p in phases]
    if starts != sorted(set(starts)):
        raise ConfigError(f"seq_len_schedule start_step values {starts} must strictly increase")
    for phase in phases:
        if phase.seq_len > top or top % phase.seq_len:
            raise ConfigError(
                f"seq_len_schedule at start_step {phase.start_step}: seq_len = {phase.seq_len} "
                f"must divide seq_len = {top} (windows are carved at seq_len and cut into "
                "seq_len / L rows of L inputs)"
            )
