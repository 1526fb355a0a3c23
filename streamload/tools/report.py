"""The realized mixture of a run's first steps, computed from the plan alone (no token reads),
and where each source's train/valid/test splits lie.

Used by ``streamload plan``: per schedule phase, the target weights and the realized shares;
per source, samples drawn, epochs completed and the step where each epoch began; with
``sampling.split``, each source's document and token ranges of every split.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import numpy as np

from streamload.config import SamplingMode
from streamload.config.batch_schedule import has_batch_ramp, step_sizes
from streamload.config.checks import INT64_MAX, check_count
from streamload.errors import ConfigError
from streamload.plan.mixture import MixtureCursor, Phase, allocate_batches
from streamload.plan.mixture_counts import count_blocks
from streamload.plan.split import SPLIT_NAMES, split_bookends
from streamload.plan.step_sizes import StepSizes
from streamload.streams.interface import SampleStream

__all__ = [
    "MAX_EPOCH_STEPS",
    "check_plan_steps",
    "cumulative_shares",
    "mixture_report",
    "seq_len_report",
    "split_report",
]

MAX_EPOCH_STEPS = 20
"""Epoch start steps listed per source."""


def check_plan_steps(stream: SampleStream, steps: int | None) -> int | None:
    """``--steps N`` checked as ``show --step`` checks its step: an integer from 0; for a
    mixture, at most the steps of its pass (``num_samples``) and no more samples than int64
    counts, the state's limit.

    Raises:
        ConfigError: a negative N, or one beyond what the stream holds.
    """
    if steps is None:
        return None
    steps = check_count(steps, "--steps", 0)
    batch = stream.config.global_batch_size
    if not stream.is_mixture or batch is None:
        return steps
    length = stream.pass_length
    ramp = has_batch_ramp(stream.config)
    sizes = step_sizes(stream.config, 1) if ramp else StepSizes.constant(batch)
    held = None if length is None else _whole_steps(sizes, length)
    if held is not None and steps > held:
        raise ConfigError(
            f"--steps {steps} lies beyond the end of the pass, which holds {held} "
            f"steps (num_samples = {length}, global_batch_size = {batch}"
            + (", after its batch size schedule)" if not sizes.is_constant else ")")
        )
    return check_count(steps, "--steps", 0, INT64_MAX // batch)


def _whole_steps(sizes: StepSizes, length: int) -> int:
    """Whole optimizer steps in a pass of ``length`` samples."""
    runs, _, _ = sizes.walk(0, sizes.whole_end(0, length))
    return sum(count for _, count in runs)


def _step_blocks(stream: SampleStream, steps: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Samples per source of each of the first ``steps`` global steps, int64 ``[n, S]``
    blocks in order, with each step's size ``[n]`` (bounded memory:
    :func:`streamload.plan.mixture.count_blocks`; a batch size schedule: each run of equal
    sizes allocated by :func:`streamload.plan.mixture.allocate_batches`, block by block)."""
    batch = stream.config.global_batch_size
    if not stream.is_mixture or batch is None:
        raise ConfigError("streamload plan needs a mixture config with global_batch_size")
    if not has_batch_ramp(stream.config):
        for counts in count_blocks(stream.phases, batch, steps):
            yield counts, np.full(len(counts), batch, dtype=np.int64)
        return
    cursor, width = MixtureCursor.start(len(stream.sources)), len(stream.sources)
    for run in step_sizes(stream.config, 1).runs():
        count = max(0, min(steps, run.first_step + (run.steps or steps)) - run.first_step)
        block = max(1, (1 << 22) // run.size)
        for first in range(0, count, block):
            n = min(block, count - first)
            sources, _, cursor = allocate_batches(stream.phases, run.size, cursor, n)
            rows = np.arange(n, dtype=np.int64)[:, None] * width + sources
            counts = np.bincount(rows.ravel(), minlength=n * width).reshape(n, width)
            yield counts.astype(np.int64), np.full(n, run.size, dtype=np.int64)


class _Tally:
    """Running sums of a mixture's steps, one block at a time."""

    def __init__(self, stream: SampleStream) -> None:
        self.stream = stream
        self.batch = stream.config.global_batch_size or 0
        sources = len(stream.sources)
        self.step = 0
        self.drawn = np.zeros(sources, dtype=np.int64)
        self.per_phase = np.zeros((len(stream.phases), sources), dtype=np.int64)
        self.deviation = np.zeros(len(stream.phases))
        self.epoch_starts: list[list[int]] = [[0] for _ in stream.sources]

    def add(self, counts: np.ndarray, sizes: np.ndarray) -> None:
        """Count the next ``len(counts)`` steps (of ``sizes`` samples each)."""
        steps = self.step + np.arange(len(counts))
        phase = np.searchsorted([p.start_step for p in self.stream.phases], steps, side="right")
        for index in np.unique(phase - 1).tolist():
            part = counts[phase - 1 == index]
            weights = np.asarray(self.stream.phases[index].weights)
            if self.stream.phases[index].per_source:  # whole steps: the phase's prefixes
                since = self.per_phase[index] + np.cumsum(part, axis=0)
                worst = np.abs(since - np.outer(since.sum(axis=1), weights)).max()
            else:
                worst = np.abs(part - weights * sizes[phase - 1 == index][:, None]).max()
            self.per_phase[index] += part.sum(axis=0)
            self.deviation[index] = max(self.deviation[index], worst)
        cumulative = self.drawn + np.cumsum(counts, axis=0)
        for index, source in enumerate(self.stream.sources):
            starts = self.epoch_starts[index]
            epochs = np.arange(len(starts), MAX_EPOCH_STEPS + 1) * source.num_windows
            # epoch m starts in the step that draws the source's sample m * windows
            found = np.searchsorted(cumulative[:, index], epochs, side="right")
            starts.extend(self.step + found[found < len(counts)])
        self.drawn = cumulative[-1]
        self.step += len(counts)


def _deviation_key(phase: Phase) -> str:
    """Per-sample allocation: the worst batch's distance from ``w·B``; per-source steps: the
    worst distance of a source's samples since the phase began from its share (below B)."""
    return "max_prefix_deviation" if phase.per_source else "max_batch_deviation"


def mixture_report(stream: SampleStream, steps: int) -> dict[str, Any]:
    """Phases (target vs realized shares, worst per-batch deviation) and per-source epochs of
    the first ``steps`` global steps, walked in blocks (memory does not grow with ``steps``)."""
    tally = _Tally(stream)
    for counts, sizes in _step_blocks(stream, steps):
        tally.add(counts, sizes)
    names = [s.name for s in stream.sources]
    phases = []
    bounds = [p.start_step for p in stream.phases] + [steps]
    for index, (lo, hi) in enumerate(itertools.pairwise(bounds)):
        hi = min(hi, steps)
        if lo >= hi:
            continue
        part, target = tally.per_phase[index], np.asarray(stream.phases[index].weights)
        phases.append({
            "start_step": lo, "end_step": hi,
            "weights": dict(zip(names, target.round(6).tolist(), strict=True)),
            "realized": dict(zip(names, (part / part.sum()).round(6).tolist(), strict=True)),
            _deviation_key(stream.phases[index]): float(tally.deviation[index]),
        })  # fmt: skip
    sources = {
        source.name: {
            "windows": source.num_windows,
            "samples": int(drawn),
            "epochs_completed": int(drawn) // source.num_windows,
            "epoch_starts": [int(s) for s in starts],
        }
        for source, drawn, starts in zip(
            stream.sources, tally.drawn.tolist(), tally.epoch_starts, strict=True
        )
    }
    batch = tally.batch if steps else 0
    out = {"steps": steps, "global_batch_size": batch, "phases": phases, "sources": sources}
    if has_batch_ramp(stream.config):  # the sizes of the steps walked, by run
        runs = step_sizes(stream.config, 1).runs()
        out["batch_sizes"] = [[r.first_step, r.size] for r in runs if r.first_step < steps]
    return out


def cumulative_shares(
    stream: SampleStream, steps: int, points: int = 2000
) -> tuple[np.ndarray, np.ndarray]:
    """Each source's share of all samples drawn by the end of a step, at up to ``points``
    evenly spaced steps: (steps ``[n]``, shares ``[n, S]``), for a plot."""
    wanted = np.unique(np.linspace(0, steps - 1, min(points, steps)).astype(np.int64))
    drawn = np.zeros(len(stream.sources), dtype=np.int64)
    rows, first = [], 0
    for counts, _ in _step_blocks(stream, steps):
        cumulative = drawn + np.cumsum(counts, axis=0)
        inside = wanted[(wanted >= first) & (wanted < first + len(counts))]
        rows.append(cumulative[inside - first])
        drawn, first = cumulative[-1], first + len(counts)
    drawn_at = np.concatenate(rows) if rows else np.zeros((0, len(drawn)), dtype=np.int64)
    return wanted, drawn_at / np.maximum(drawn_at.sum(axis=1, keepdims=True), 1)


def split_report(stream: SampleStream) -> dict[str, Any]:
    """Per source, the bounds of every split of ``sampling.split`` (empty: no split is set):
    ``{"split", "reads", "rule", "total_documents", "total_tokens", "parts": {name:
    {"documents": [begin, end) or None, "tokens": [begin, end)}}}``. Megatron mode counts
    sequences (GPTDataset's documents), as megatron-core splits them."""
    sampling = stream.config.sampling
    if sampling.split is None:
        return {}
    if sampling.mode is not SamplingMode.MEGATRON:
        found = {s.name: getattr(s, "split", None) for s in stream.sources}
        return {name: split.report() for name, split in found.items() if split is not None}
    out = {}
    for source in stream.sources:
        starts = np.append(source.sequence_starts, source.shards.num_tokens)  # type: ignore[attr-defined]
        docs = split_bookends(sampling.split, int(starts.size) - 1)
        parts = {
            name: {"documents": [docs[i], docs[i + 1]],
                   "tokens": [int(starts[docs[i]]), int(starts[docs[i + 1]])]}
            for i, name in enumerate(SPLIT_NAMES)
        }  # fmt: skip
        out[source.name] = {
            "split": sampling.split, "reads": sampling.split_name.value, "rule": "sequences",
            "total_documents": int(starts.size) - 1, "total_tokens": int(starts[-1]),
            "parts": parts,
        }  # fmt: skip
    return out


def batch_schedule_report(stream: SampleStream) -> dict[str, Any]:
    """``{"batch_schedule": runs}`` of a stream with a batch size schedule (each run of equal
    steps: ``first_step``, ``first_sample``, ``global_batch_size``, ``steps``, ``None`` for the
    last, endless one), else ``{}``."""
    if not has_batch_ramp(stream.config):
        return {}
    runs = step_sizes(stream.config, 1).runs()
    return {
        "batch_schedule": [
            {"first_step": r.first_step, "first_sample": r.first_sample,
             "global_batch_size": r.size, "steps": r.steps}
            for r in runs
        ]
    }  # fmt: skip


def seq_len_report(stream: SampleStream) -> dict[str, Any]:
    """``{"seq_len_schedule": stretches}`` of a stream with a sequence-length schedule
    (:meth:`streamload.plan.seq_len.SeqLenSchedule.describe`), else ``{}``."""
    schedule = getattr(stream, "seq_schedule", None)  # source-based streams have one
    return {} if schedule is None else {"seq_len_schedule": schedule.describe()}
