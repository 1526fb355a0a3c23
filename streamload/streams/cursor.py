"""A position in the global sample stream: a value, saved in the loader state.

The state's shape is :mod:`streamload.state`'s (one envelope for every entry point); the
checks of the position it names live here. Rules (violations raise ``StateError`` naming
the field, the value and what was expected):

* Integers are ``int`` (or NumPy integers), never ``bool``, ``float`` or ``str``; they are
  ``>= 0`` (``>= 1`` for a batch size) and below :data:`MAX_STATE_INT`, so every index
  computed from them stays inside int64.
* Mappings have exactly their keys: a missing or unknown key is an error.
* A position must be one the stream can stand at (:func:`check_cursor`): inside its pass
  (a pass that holds no samples, like Megatron's passes after the first, only at 0), and
  for mixtures the per-source counts and the schedule position must equal what replaying
  ``step`` global batches of the recorded sizes gives
  (:func:`streamload.plan.mixture.replay_cursor`) while that replay is cheap
  (:data:`MAX_REPLAYED`); beyond, they must lie within the bounds every such position
  satisfies (:func:`streamload.plan.mixture.cursor_bounds`: the schedule position exactly, the
  samples before and since the phase exactly, each count between the sums of its floors and
  ceilings), so loading is O(sources) at any step.
* A position inside an optimizer step (``grad_accum_steps > 1``; ``in_step``: samples of
  the step delivered and the step's size) lies inside its step, and that step inside the pass;
  a mixture's counts stand at the step's start. It continues only with the same step size, in
  global batches that divide the rest of the step (:func:`check_step_resume`).

The integer and mapping readers live in :mod:`streamload.streams._state_values` and are
re-exported here.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from streamload.config.batch_schedule import step_sizes
from streamload.errors import ConfigError, StateError
from streamload.plan.mixture import MixtureCursor, cursor_bounds, replay_cursor
from streamload.plan.step_sizes import StepSizes
from streamload.streams._state_values import (
    MAX_STATE_INT,
    short_repr,
    state_int,
    state_ints,
    state_mapping,
)

if TYPE_CHECKING:
    from streamload.streams.interface import SampleStream

__all__ = [
    "MAX_REPLAYED",
    "MAX_STATE_INT",
    "CursorFields",
    "StreamCursor",
    "check_cursor",
    "check_step_resume",
    "check_step_sizes",
    "loader_steps",
    "read_batch_sizes",
    "read_in_step",
    "short_repr",
    "state_int",
    "state_ints",
    "state_mapping",
    "step_size_at",
]

MAX_REPLAYED = 1 << 15
"""Global batches × sources up to which a loaded mixture position is verified by replaying
its allocation (:func:`streamload.plan.mixture.replay_cursor`: at most some 50 ms,
``benchmarks/state_checks.py``); a longer one is checked against the bounds every position
of its step satisfies (:func:`streamload.plan.mixture.cursor_bounds`), in O(sources)."""


@dataclass(frozen=True)
class StreamCursor:
    """Position in the stream after some delivered batches.

    Args:
        pass_index: Current pass.
        sample: Pass-relative samples consumed.
        mixture: Per-source counts and schedule position (mixtures only), at the start of
            the optimizer step in progress.
        in_step: Samples of the optimizer step in progress already delivered (0: at a step
            boundary; always 0 without gradient accumulation).
        step_size: Samples of that step (0 at a step boundary).
    """

    pass_index: int
    sample: int
    mixture: MixtureCursor | None = None
    in_step: int = 0
    step_size: int = 0


def read_in_step(value: Any, field: str) -> tuple[int, int]:
    """``[done, size]`` of a position inside an optimizer step (``None``: at a boundary).

    Raises:
        StateError: not two integers with ``1 <= done < size``.
    """
    if value is None:
        return 0, 0
    rule = "must be [samples of the step delivered, samples of the step], 1 <= done < size"
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        raise StateError(f"state {field} = {short_repr(value)} {rule}")
    done, size = state_int(value[0], f"{field}[0]", 1), state_int(value[1], f"{field}[1]", 2)
    if done >= size:
        raise StateError(f"state {field} = {[done, size]} {rule}")
    return done, size


def read_batch_sizes(
    value: Any, field: str, step: int, global_batch: int | None
) -> tuple[tuple[int, int], ...]:
    """The ``(first step, global batch size)`` pairs of a mixture position.

    ``None`` (a state saved before they were recorded) means ``global_batch`` for every step.
    The first steps rise strictly from 0 and lie below ``step``; neighbours differ in size.

    Raises:
        StateError: malformed, or ``None`` without a ``global_batch`` to assume.
    """
    if value is None:
        if step == 0:
            return ()
        if global_batch is None:
            raise StateError(f"state {field} is missing")
        return ((0, global_batch),)
    rule = (
        f"must be [first step, global batch size] pairs, first steps rising from 0 and below "
        f"the step ({step}), neighbouring sizes different"
    )
    if not isinstance(value, (list, tuple)) or not all(
        isinstance(p, (list, tuple)) and len(p) == 2 for p in value
    ):
        raise StateError(f"state {field} = {short_repr(value)} {rule}")
    pairs = tuple(
        (state_int(a, f"{field}[{i}][0]"), state_int(b, f"{field}[{i}][1]", 1))
        for i, (a, b) in enumerate(value)
    )
    firsts = [a for a, _ in pairs]
    rising = all(x < y for x, y in itertools.pairwise(firsts))
    changing = all(x[1] != y[1] for x, y in itertools.pairwise(pairs))
    starts_at_zero = bool(pairs) and firsts[0] == 0 and firsts[-1] < step
    if not ((not pairs and step == 0) or (starts_at_zero and rising and changing)):
        raise StateError(f"state {field} = {short_repr(value)} {rule}")
    return pairs


@dataclass(frozen=True)
class CursorFields:
    """How the fields of a position are named in a given state's messages."""

    pass_index: str
    sample: str
    step: str
    phase_step: str
    batch_sizes: str
    drawn: Callable[[int, str], str]
    phase_drawn: Callable[[int, str], str]


def check_cursor(
    stream: SampleStream,
    cursor: StreamCursor,
    fields: CursorFields,
    slack: int = 0,
    derive: bool = True,
) -> None:
    """Raise unless the stream can stand at ``cursor`` (see the module rules).

    Args:
        stream: The stream the position is loaded into.
        cursor: The parsed position.
        fields: Field names for the messages.
        slack: Samples a position may lie past the pass end (a ``StreamDataset`` worker's
            cursor steps over the end by up to ``workers - 1`` batches).
        derive: Check the mixture counts by replay (off when the user overrides a
            fingerprint mismatch: the history was made with other weights).

    Raises:
        StateError: naming the field, its value and what was expected.
    """
    p, sample, length = cursor.pass_index, cursor.sample, stream.pass_length
    _check_in_step(cursor, None if length is None else length + slack, fields)
    if length is not None and sample > length + slack:
        raise StateError(
            f"state {fields.sample} = {sample} lies beyond the pass of {length} samples; the "
            "state was edited or saved for another num_samples"
        )
    if p > 0 and sample > 0 and stream.batches_left(stream.start(p), 1) == 0:
        raise StateError(
            f"state {fields.pass_index} = {p} with {fields.sample} = {sample}: pass {p} of "
            "this stream holds no samples (Megatron mode has one pass: only pass 0 has "
            "samples; a later pass stands at 0); the state was edited or is corrupt"
        )
    widest = max(s.num_windows for s in stream.sources)
    if p * widest + sample >= MAX_STATE_INT:
        raise StateError(f"state {fields.pass_index} = {p} is too large for this stream")
    if stream.is_mixture != (cursor.mixture is not None):
        kind = "a mixture" if stream.is_mixture else "not a mixture"
        raise StateError(f"the state's position does not fit this stream, which is {kind}")
    if cursor.mixture is not None:
        _check_mixture(stream, cursor, cursor.mixture, fields, derive)


def _check_in_step(cursor: StreamCursor, length: int | None, fields: CursorFields) -> None:
    done, size = cursor.in_step, cursor.step_size
    if not done:
        return
    where = f"state {fields.sample} = {cursor.sample} with {done} samples into a step of {size}"
    if not 0 < done < size or done > cursor.sample:
        raise StateError(f"{where}: the step would begin before the pass; the state is corrupt")
    if length is not None and cursor.sample - done + size > length:
        raise StateError(
            f"{where}: that step ends after the pass of {length} samples (only whole steps are "
            "delivered); the state was edited or saved for another num_samples"
        )


def loader_steps(stream: SampleStream, micro: int, pass_index: int) -> StepSizes:
    """Samples of each optimizer step of a loader of global micro-batches of ``micro``
    samples in pass ``pass_index``: the config's (``grad_accum_steps``, or its batch size
    schedule); an evaluation pass counts no steps (``grad_accum_steps`` batches, as before)."""
    if stream.layout.evaluation:
        return StepSizes.constant(stream.config.grad_accum_steps * micro)
    return step_sizes(stream.config, micro, pass_index)


def step_size_at(stream: SampleStream, cursor: StreamCursor, micro: int) -> int:
    """Samples of the optimizer step the cursor stands in (or begins, at a boundary)."""
    if cursor.in_step:
        return cursor.step_size
    return loader_steps(stream, micro, cursor.pass_index).size_at(cursor.sample)


def check_step_sizes(stream: SampleStream, world_size: int, batch_size: int) -> None:
    """Raise unless every optimizer step of a batch size schedule splits into global
    micro-batches of ``world_size x batch_size`` samples, and the schedule reaches its final
    size inside the first pass (consumed samples count from the run's start, and a later
    pass runs at the final size). A constant size, or an evaluation pass, always passes.

    Raises:
        ConfigError: naming the step and the sizes (or the pass length).
    """
    micro = world_size * batch_size
    steps, length = loader_steps(stream, micro, 0), stream.pass_length
    if steps.is_constant:
        return
    steps.check_divides(micro, f"world_size {world_size} x batch_size {batch_size}")
    last = steps.runs()[-1]
    if length is not None and steps.whole_end(0, length) < last.first_sample:
        raise ConfigError(
            f"the batch size schedule reaches its final global batch size {last.size} at "
            f"optimizer step {last.first_step} (sample {last.first_sample}), but a pass holds "
            f"{length} samples: the schedule must end inside the first pass; shorten it or "
            "raise sampling.num_samples"
        )


def check_step_resume(cursor: StreamCursor, stream: SampleStream, micro: int, field: str) -> None:
    """Raise unless a loader of ``stream`` in global batches of ``micro`` samples can
    continue at ``cursor``: at a step boundary anything may change (with a batch size
    schedule, the boundary must be one of its steps'); inside a step the step keeps its
    size and the batches must split its rest.

    Args:
        cursor: The loaded position.
        stream: The stream it is loaded into (its steps: :func:`loader_steps`).
        micro: Samples per global batch of the resuming loader (``W·b``).
        field: How the position is named in messages.

    Raises:
        StateError: naming the position, the sizes and what would fit.
    """
    done, size = cursor.in_step, cursor.step_size
    steps = loader_steps(stream, micro, cursor.pass_index)
    boundary = cursor.sample - done
    if not steps.is_boundary(boundary):
        _, first, _ = steps.step_at(boundary)
        raise StateError(
            f"state {field} puts an optimizer step at sample {boundary}, but the batch size "
            f"schedule's step there begins at sample {first}; the state was edited or saved "
            "with another schedule"
        )
    if not done:
        return
    where = (
        f"state {field} stands {done} samples into an optimizer step of {size} samples (saved "
        "between two micro-batches of a gradient accumulation)"
    )
    step = steps.size_at(boundary)
    if step != size:
        raise StateError(
            f"{where}, but this loader's steps hold {step} samples (grad_accum_steps x "
            "world_size x batch_size, or the batch size schedule's): a resume inside a step "
            "must keep the step's size; resume from a state saved at a step boundary to "
            "change it"
        )
    if (size - done) % micro:
        raise StateError(
            f"{where}: its remaining {size - done} samples do not split into global batches "
            f"of world_size x batch_size = {micro} samples; resume with a world_size x "
            "batch_size that divides them, or from a state saved at a step boundary"
        )


def _check_mixture(
    stream: SampleStream,
    cursor: StreamCursor,
    m: MixtureCursor,
    fields: CursorFields,
    derive: bool,
) -> None:
    names = [s.name for s in stream.sources]
    for name_of, counts in ((fields.drawn, m.drawn), (fields.phase_drawn, m.phase_drawn)):
        if len(counts) != len(names):
            raise StateError(
                f"state {name_of(0, names[0])}: {len(counts)} counts for sources {names}"
            )
    ends = [first for first, _ in m.batch_sizes[1:]] + [m.step] if m.batch_sizes else []
    total = sum(
        size * (end - first) for (first, size), end in zip(m.batch_sizes, ends, strict=True)
    )
    sizes = [list(pair) for pair in m.batch_sizes]
    sample = cursor.sample - cursor.in_step  # the counts stand at the step's start
    if total != sample:
        inside = f" less {cursor.in_step} of the step in progress = {sample}"
        raise StateError(
            f"state {fields.step} = {m.step} with {fields.batch_sizes} = {sizes} gives "
            f"{total} samples, but {fields.sample} = {cursor.sample}"
            f"{inside if cursor.in_step else ''}; the state was edited or is corrupt"
        )
    if not derive:
        return
    if m.step * len(names) > MAX_REPLAYED:
        _check_mixture_bounds(stream, m, fields, sizes)
        return
    want = replay_cursor(stream.phases, len(names), m.batch_sizes, m.step)
    found = [(fields.phase_step, m.phase_step, want.phase_step)]
    found += [(fields.drawn(i, n), m.drawn[i], want.drawn[i]) for i, n in enumerate(names)]
    found += [
        (fields.phase_drawn(i, n), m.phase_drawn[i], want.phase_drawn[i])
        for i, n in enumerate(names)
    ]
    for label, value, expected in found:
        if value != expected:
            raise StateError(
                f"state {label} = {value} disagrees with {fields.step} = {m.step} (global "
                f"batch sizes {sizes}), which give {expected}; the state was edited or is corrupt"
            )


_BOUNDS = {
    False: "the floor or ceiling of its share of each global batch",
    True: "its share of the steps, to within the rule's bound (docs/design.md §2.10)",
}
"""What the bounds of a long mixture position are, by ``Phase.per_source``."""


def _check_mixture_bounds(
    stream: SampleStream, m: MixtureCursor, fields: CursorFields, sizes: list[list[int]]
) -> None:
    """The O(sources) check of a long mixture position (:data:`MAX_REPLAYED`)."""
    names = [s.name for s in stream.sources]
    bounds = cursor_bounds(stream.phases, len(names), m.batch_sizes, m.step)
    given = f"{fields.step} = {m.step} (global batch sizes {sizes})"
    if m.phase_step != bounds.phase_step:
        raise StateError(
            f"state {fields.phase_step} = {m.phase_step} disagrees with {given}, which give "
            f"{bounds.phase_step}; the state was edited or is corrupt"
        )
    drawn, phase = np.array(m.drawn, dtype=np.int64), np.array(m.phase_drawn, dtype=np.int64)
    checks = (
        (fields.phase_drawn, phase, bounds.phase_low, bounds.phase_high, bounds.before, "before"),
        (fields.drawn, drawn - phase, bounds.since_low, bounds.since_high, bounds.since, "since"),
    )
    for name_of, counts, low, high, samples, when in checks:
        what = f"samples drawn {when} {fields.phase_step} = {m.phase_step}"
        bad = np.flatnonzero((counts < low) | (counts > high))
        if bad.size:
            i = int(bad[0])
            raise StateError(
                f"state {name_of(i, names[i])} = {int(drawn[i] if when == 'since' else phase[i])}"
                f" gives {int(counts[i])} {what} for source {names[i]!r}, but {given} give it "
                f"between {int(low[i])} and {int(high[i])} ({_BOUNDS[stream.phases[0].per_source]}"
                "); the state was edited or is corrupt"
            )
        if int(counts.sum()) != samples:
            raise StateError(
                f"state {name_of(0, names[0])} … {name_of(len(names) - 1, names[-1])}: the "
                f"sources' {what} sum to "
                f"{int(counts.sum())}, but {given} allocate {samples}; the state was edited or "
                "is corrupt"
            )
