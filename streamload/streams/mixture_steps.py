"""A mixture's samples walked by optimizer step: each step allocated as one global batch of
its size (``grad_accum_steps`` global batches, or a batch size schedule's size at the step,
:mod:`streamload.plan.step_sizes`), then read in order.

Used by :class:`streamload.streams.source_stream.SourceStream` to plan chunks (from a cursor,
which may stand inside a step: that step is allocated again from its start) and to locate
arbitrary sample ids (``streamload samples``, ``show``: counts are walked from the start to
the first step asked for, then the steps up to the last one are allocated).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from streamload.plan.mixture import MixtureCursor, Phase, advance_cursor
from streamload.plan.step_sizes import StepSizes
from streamload.streams.cursor import StreamCursor

__all__ = ["Allocate", "mixture_samples", "step_start"]

Allocate = Callable[[MixtureCursor, int, int], tuple[np.ndarray, np.ndarray]]
"""``allocate(cursor, count, size)``: ``count`` steps of ``size`` samples as rows of
(source, source-local index), cut before the first one a source's policy forbids."""


def mixture_samples(
    phases: tuple[Phase, ...],
    allocate: Allocate,
    cursor: StreamCursor,
    samples: int,
    steps: StepSizes,
) -> tuple[np.ndarray, np.ndarray]:
    """(source, source-local index) of up to ``samples`` samples from ``cursor``, flat: the
    rest of the step in progress, then whole steps of ``steps``' sizes; fewer where a
    source's policy ends the stream."""
    mixture = cursor.mixture
    assert mixture is not None  # a mixture's cursor
    parts: list[tuple[np.ndarray, np.ndarray]] = []
    done, size = cursor.in_step, cursor.step_size
    start = cursor.sample - done
    if done:  # the step in progress, allocated as a whole again from its start
        sources, local = allocate(mixture, 1, size)
        parts.append((sources.ravel()[done:], local.ravel()[done:]))
        samples, start = samples - (size - done), start + size
        mixture = advance_cursor(phases, size, mixture, 1)
    runs, rest, size = steps.walk(start, max(samples, 0))
    todo = [*runs, (size, 1)] if rest else list(runs)
    if parts and not parts[0][0].size:
        todo = []  # a source's policy ended the stream in the step in progress
    for i, (run_size, count) in enumerate(todo):
        sources, local = allocate(mixture, count, run_size)
        parts.append((sources.ravel(), local.ravel()))
        if sources.shape[0] < count:
            break  # a source's policy ended the stream
        if i + 1 < len(todo):
            mixture = advance_cursor(phases, run_size, mixture, count)
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])


def step_start(
    phases: tuple[Phase, ...], num_sources: int, steps: StepSizes, sample: int
) -> tuple[int, MixtureCursor]:
    """The first sample of the step holding pass-relative ``sample``, and the mixture's
    counts there (walked from the pass start, counts only)."""
    _, first, _ = steps.step_at(sample)
    cursor = MixtureCursor.start(num_sources)
    for size, count in steps.walk(0, first)[0]:
        cursor = advance_cursor(phases, size, cursor, count)
    return first, cursor
