"""Test helpers for exact resumption, usable on any stateful loader.

:func:`assert_resumes_exactly` is the contract check of streamload (in the spirit of grain's
``assert_equal_output_after_checkpoint`` and torchdata's ``run_test_save_load_state``): run a
loader without interruption, then for each save point restore its state into a fresh loader
and demand the exact, ordered remainder of the stream. It works on anything with
``__iter__``, ``state_dict`` and ``load_state_dict``: :class:`streamload.StreamLoader`,
``torchdata.stateful_dataloader.StatefulDataLoader``, ``torchdata.nodes.Loader``.

Example:
    >>> from streamload.testing import assert_resumes_exactly
    >>> assert_resumes_exactly(                                   # doctest: +SKIP
    ...     lambda: build_loader(cfg, batch_size=4, num_workers=2), passes=2
    ... )

Save point ``s`` is the state taken after ``s`` delivered batches (counted over all passes;
``s = 0`` is the state of a loader that has not yielded anything yet). After the last batch
of a pass, the state is taken twice: inside the loop (right after the batch) and after the
loop has ended; both must resume exactly.
"""

from __future__ import annotations

import copy
import io
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch

__all__ = [
    "StatefulIterable",
    "assert_batches_equal",
    "assert_resumes_exactly",
    "collect_global_batches",
]

MAX_STATE_BYTES = 64 << 10
"""Default bound on a serialized state: positions, never data buffers."""
_SPREAD = 24
"""Save points picked evenly, besides the first, last and pass ends, for long runs."""


class StatefulIterable(Protocol):
    """What :func:`assert_resumes_exactly` needs from a loader."""

    def __iter__(self) -> Any: ...

    def state_dict(self) -> Any: ...

    def load_state_dict(self, state: Any) -> None: ...


@dataclass(frozen=True)
class _Reference:
    """The uninterrupted run: batches per pass and the state after each delivered batch."""

    passes: list[list[Any]]
    states: list[Any]  # states[s]: after s delivered batches (states[0]: before any)
    loop_end_states: dict[int, Any]  # step s at a pass end -> state after that loop ended

    @property
    def total(self) -> int:
        return len(self.states) - 1

    def locate(self, step: int) -> tuple[int, int]:
        """(pass, batches of that pass delivered) after ``step`` delivered batches."""
        left = step
        for index, batches in enumerate(self.passes):
            if left <= len(batches):
                return index, left
            left -= len(batches)
        raise ValueError(f"save point {step} is past the end of the run ({self.total})")

    def remainder(self, step: int) -> list[list[Any]]:
        """The batches expected per later ``for`` loop after resuming at ``step``."""
        pass_index, done = self.locate(step)
        rest = self.passes[pass_index][done:]
        later = self.passes[pass_index + 1 :]
        if done == len(self.passes[pass_index]) and done > 0:
            return later
        return [rest, *later]


def assert_resumes_exactly(
    make_loader: Callable[[], StatefulIterable],
    *,
    save_points: Iterable[int] | None = None,
    passes: int = 1,
    make_resumed: Callable[[], StatefulIterable] | None = None,
    max_state_bytes: int | None = MAX_STATE_BYTES,
) -> None:
    """Assert that restoring a saved state continues with exactly the uninterrupted batches.

    The uninterrupted run is ``passes`` ``for`` loops over one loader from ``make_loader``;
    ``state_dict()`` is taken before the first batch and after every batch. For each save
    point a fresh loader from ``make_resumed`` (default ``make_loader``) loads the state
    (after a ``torch.save``/``torch.load(weights_only=True)`` round trip, proving it is plain
    and small), then runs ``for`` loops that must complete the current pass and the remaining
    ones. Batches are compared in order, key by key, with ``torch.equal`` and equal dtypes.

    A state saved after the last batch of a pass may resume either straight into the next
    pass (StreamLoader, ``torchdata.nodes.Loader``) or with one empty loop that finishes the
    saved pass first (``StatefulDataLoader``); both are accepted.

    Args:
        make_loader: Builds the loader of the uninterrupted run (and of resumed runs).
        save_points: Numbers of delivered batches after which to save (0 .. total, counted
            over all passes). Default: every step for short runs, else the first steps,
            every pass end and its neighbours, the last step and an even spread.
        passes: ``for`` loops of the uninterrupted run.
        make_resumed: Builds the loader that loads each state, e.g. with another world size
            or worker count whose batches must equal the reference ones.
        max_state_bytes: Upper bound on the serialized state (``None``: no bound).

    Raises:
        AssertionError: a state does not round-trip, is too big, or a resumed run differs;
            the message names the save point, the batch position and the key.
        ValueError: ``passes < 1`` or a save point outside ``[0, total]``.
    """
    if passes < 1:
        raise ValueError(f"passes = {passes} must be >= 1")
    reference = _run_reference(make_loader(), passes)
    build = make_resumed or make_loader
    points = _save_points(reference, save_points)
    for step in points:
        _check_resume(reference, build, step, reference.states[step], "", max_state_bytes)
        if step in reference.loop_end_states:
            state = reference.loop_end_states[step]
            _check_resume(reference, build, step, state, " (after the loop)", max_state_bytes)


def assert_batches_equal(expected: Sequence[Any], actual: Sequence[Any], where: str = "") -> None:
    """Assert two ordered lists of batches are identical (same length, keys, dtypes, values).

    Args:
        expected: The reference batches (dicts of tensors, tensors, or nested lists/tuples).
        actual: The batches to check, in order.
        where: Prefix of the failure message.

    Raises:
        AssertionError: naming the first differing batch position and key.
    """
    _compare_loop(list(expected), list(actual), where or "batches")


def collect_global_batches(
    loaders: Sequence[Iterable[Mapping[str, torch.Tensor]]], steps: int | None = None
) -> list[dict[str, torch.Tensor]]:
    """Global batches from per-rank loaders of one step: rank batches concatenated on dim 0.

    Iterates every loader once (one ``for`` loop each, in lockstep), so a loader's cursor
    stands after the last collected batch when ``steps`` stops early.

    Args:
        loaders: One loader per data-parallel rank, in rank order.
        steps: Stop after this many global batches (default: until the loaders end).

    Returns:
        One dict per step, each tensor the concatenation of the ranks' tensors in rank order.

    Raises:
        AssertionError: the ranks yield different numbers of batches or different keys.
    """
    iterators = [iter(loader) for loader in loaders]
    out: list[dict[str, torch.Tensor]] = []
    while steps is None or len(out) < steps:
        parts = [next(it, None) for it in iterators]
        ended = [rank for rank, part in enumerate(parts) if part is None]
        if len(ended) == len(parts):
            break
        if ended:
            raise AssertionError(f"ranks {ended} ended at step {len(out)} while others did not")
        keys = [sorted(part) for part in parts if part is not None]
        if any(k != keys[0] for k in keys):
            raise AssertionError(f"step {len(out)}: ranks yield different keys {keys}")
        out.append(
            {key: torch.cat([part[key] for part in parts if part is not None]) for key in keys[0]}
        )
    return out


def _run_reference(loader: StatefulIterable, passes: int) -> _Reference:
    states = [copy.deepcopy(loader.state_dict())]
    per_pass: list[list[Any]] = []
    loop_end: dict[int, Any] = {}
    for _ in range(passes):
        batches: list[Any] = []
        for batch in loader:
            batches.append(_detach(batch))
            states.append(copy.deepcopy(loader.state_dict()))
        per_pass.append(batches)
        if batches:
            loop_end[len(states) - 1] = copy.deepcopy(loader.state_dict())
    empty = [index for index, batches in enumerate(per_pass) if not batches]
    if empty:
        raise AssertionError(f"pass(es) {empty} of the uninterrupted run yielded no batch")
    return _Reference(per_pass, states, loop_end)


def _save_points(reference: _Reference, wanted: Iterable[int] | None) -> list[int]:
    total = reference.total
    if wanted is not None:
        points = sorted(set(wanted))
        bad = [p for p in points if not 0 <= p <= total]
        if bad:
            raise ValueError(f"save points {bad} are outside [0, {total}]")
        return points
    if total <= 2 * _SPREAD:
        return list(range(total + 1))
    ends = set(reference.loop_end_states)
    near_ends = {s + d for s in ends for d in (-1, 0, 1)}
    spread = {round(i * total / _SPREAD) for i in range(_SPREAD + 1)}
    return sorted(p for p in {0, 1, 2, total, *near_ends, *spread} if 0 <= p <= total)


def _check_resume(
    reference: _Reference,
    build: Callable[[], StatefulIterable],
    step: int,
    state: Any,
    how: str,
    max_state_bytes: int | None,
) -> None:
    pass_index, done = reference.locate(step)
    where = f"save point {step}{how} (pass {pass_index}, after batch {done} of that pass)"
    loader = build()
    loader.load_state_dict(_round_trip(state, where, max_state_bytes))
    expected = reference.remainder(step)
    at_pass_end = done == len(reference.passes[pass_index]) and done > 0
    first = pass_index + 1 if at_pass_end else pass_index
    may_skip_empty = at_pass_end
    for offset, want in enumerate(expected):
        got = [_detach(batch) for batch in loader]
        if may_skip_empty and not got:
            got = [_detach(batch) for batch in loader]
        may_skip_empty = False
        _compare_loop(want, got, f"{where}: resumed pass {first + offset}")


def _compare_loop(expected: list[Any], got: list[Any], where: str) -> None:
    for position, (want, have) in enumerate(zip(expected, got, strict=False)):
        problem = _difference(want, have, "batch")
        if problem is not None:
            raise AssertionError(f"{where}, batch {position}: {problem}")
    if len(expected) != len(got):
        raise AssertionError(
            f"{where}: {len(got)} batches resumed, the uninterrupted run has {len(expected)}"
        )


def _difference(want: Any, have: Any, path: str) -> str | None:
    """A description of the first difference between two batches, or None."""
    if isinstance(want, torch.Tensor) or isinstance(have, torch.Tensor):
        if not (isinstance(want, torch.Tensor) and isinstance(have, torch.Tensor)):
            return f"{path}: {type(have).__name__} instead of {type(want).__name__}"
        if want.dtype != have.dtype or want.shape != have.shape:
            return (
                f"{path}: {have.dtype} {tuple(have.shape)} instead of "
                f"{want.dtype} {tuple(want.shape)}"
            )
        if not torch.equal(want, have):
            return f"{path}: values differ\n  expected {want}\n  got      {have}"
        return None
    if isinstance(want, Mapping) and isinstance(have, Mapping):
        if sorted(want) != sorted(have):
            return f"{path}: keys {sorted(have)} instead of {sorted(want)}"
        for key in want:
            problem = _difference(want[key], have[key], f"key {key!r}")
            if problem is not None:
                return problem
        return None
    if isinstance(want, (list, tuple)) and isinstance(have, (list, tuple)):
        if len(want) != len(have):
            return f"{path}: length {len(have)} instead of {len(want)}"
        for index, (a, b) in enumerate(zip(want, have, strict=True)):
            problem = _difference(a, b, f"{path}[{index}]")
            if problem is not None:
                return problem
        return None
    return None if want == have else f"{path}: {have!r} instead of {want!r}"


def _detach(batch: Any) -> Any:
    """A private copy of a batch, so later batches cannot overwrite recorded ones."""
    if isinstance(batch, torch.Tensor):
        return batch.detach().clone()
    if isinstance(batch, Mapping):
        return {key: _detach(value) for key, value in batch.items()}
    if isinstance(batch, list):
        return [_detach(value) for value in batch]
    if isinstance(batch, tuple):
        return tuple(_detach(value) for value in batch)
    return batch


def _round_trip(state: Any, where: str, max_state_bytes: int | None) -> Any:
    buffer = io.BytesIO()
    try:
        torch.save(state, buffer)
        size = buffer.tell()
        buffer.seek(0)
        restored = torch.load(buffer, weights_only=True)
    except Exception as exc:
        raise AssertionError(
            f"{where}: the state does not round-trip through torch: {exc}"
        ) from exc
    if max_state_bytes is not None and size > max_state_bytes:
        raise AssertionError(
            f"{where}: the serialized state takes {size} bytes, more than {max_state_bytes}; "
            "a state should hold positions, not data"
        )
    return restored
