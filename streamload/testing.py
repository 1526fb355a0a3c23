"""Test helpers for exact resumption, usable on any stateful loader.

:func:`assert_resumes_exactly` is the contract check of streamload. It holds every check of
grain's ``assert_equal_output_after_checkpoint`` and torchdata's ``run_test_save_load_state``
(written here, not imported): run a loader without interruption, then for each save point
restore its state into a fresh loader and demand

* the exact, ordered remainder of the stream (every later pass included);
* ``state_dict()`` right after ``load_state_dict(s)`` equal to ``s`` (``echo``);
* the same output when the same state is restored again into the used loader
  (``restore_twice``);
* with ``same_structure``, one state structure (keys and leaf types) at every step;
* with ``same_states``, the resumed loader's states equal to the uninterrupted ones.

It works on anything with ``__iter__``, ``state_dict`` and ``load_state_dict``:
:class:`streamload.StreamLoader`, ``torchdata.stateful_dataloader.StatefulDataLoader``,
``torchdata.nodes.Loader``.

Example:
    >>> from streamload.testing import assert_resumes_exactly
    >>> assert_resumes_exactly(                                   # doctest: +SKIP
    ...     lambda: build_loader(cfg, batch_size=4, num_workers=2), passes=2
    ... )

Save point ``s`` is the state taken after ``s`` delivered batches (counted over all passes;
``s = 0`` is the state of a loader that has not yielded anything yet). After the last batch
of a pass, the state is taken twice: inside the loop (right after the batch) and after the
loop has ended. Both must resume exactly; the first may resume with one empty loop that ends
the saved pass (``StatefulDataLoader`` does), the second must go straight on to the next
pass (an empty loop there would skip a whole epoch).
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
    echo: bool = True,
    restore_twice: bool = True,
    same_structure: bool = False,
    same_states: bool = False,
) -> None:
    """Assert that restoring a saved state continues with exactly the uninterrupted batches.

    The uninterrupted run is ``passes`` ``for`` loops over one loader from ``make_loader``;
    ``state_dict()`` is taken before the first batch and after every batch. For each save
    point a fresh loader from ``make_resumed`` (default ``make_loader``) loads the state
    (after a ``torch.save``/``torch.load(weights_only=True)`` round trip, proving it is plain
    and small), then runs ``for`` loops that must complete the current pass and the remaining
    ones. Batches are compared in order, key by key, with ``torch.equal`` and equal dtypes.

    Args:
        make_loader: Builds the loader of the uninterrupted run (and of resumed runs).
        save_points: Numbers of delivered batches after which to save (0 .. total, counted
            over all passes). Default: every step for short runs, else the first steps,
            every pass end and its neighbours, the last step and an even spread.
        passes: ``for`` loops of the uninterrupted run.
        make_resumed: Builds the loader that loads each state, e.g. with another world size
            or worker count whose batches must equal the reference ones.
        max_state_bytes: Upper bound on the serialized state (``None``: no bound).
        echo: ``state_dict()`` of a fresh loader right after ``load_state_dict(s)`` must
            equal ``s``.
        restore_twice: At the first and last save point, load the same state again into the
            used loader; its output must be the same again.
        same_structure: Every state of the uninterrupted run has the keys and leaf types of
            the first one (grain's state spec).
        same_states: After a restore, the state after each batch equals the uninterrupted
            run's state after the same number of batches.

    Raises:
        AssertionError: a state does not round-trip, is too big, is not echoed, or a
            resumed run differs; the message names the save point, the batch and the key.
        ValueError: ``passes < 1`` or a save point outside ``[0, total]``.
    """
    if passes < 1:
        raise ValueError(f"passes = {passes} must be >= 1")
    reference = _run_reference(make_loader(), passes, same_structure)
    checks = _Checks(make_resumed or make_loader, max_state_bytes, echo, same_states)
    points = _save_points(reference, save_points)
    for step in points:
        twice = restore_twice and step in (points[0], points[-1])
        _check_resume(reference, checks, step, reference.states[step], "", twice)
        if step in reference.loop_end_states:
            state = reference.loop_end_states[step]
            _check_resume(reference, checks, step, state, " (after the loop)", twice)


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


def _run_reference(loader: StatefulIterable, passes: int, same_structure: bool) -> _Reference:
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
    if same_structure:
        for step, state in enumerate([*states, *loop_end.values()]):
            if _structure(state) != _structure(states[0]):
                raise AssertionError(
                    f"the state's structure changed (state {step}): {_structure(state)} "
                    f"instead of {_structure(states[0])}"
                )
    return _Reference(per_pass, states, loop_end)


def _structure(state: Any) -> Any:
    """Nested keys with leaf type names (lists and tuples are leaves, as in grain's spec)."""
    if isinstance(state, Mapping):
        return {key: _structure(value) for key, value in state.items()}
    if isinstance(state, torch.Tensor):
        return f"Tensor[{state.dtype}]"
    return type(state).__name__


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


@dataclass(frozen=True)
class _Checks:
    build: Callable[[], StatefulIterable]
    max_state_bytes: int | None
    echo: bool
    same_states: bool


def _check_resume(
    reference: _Reference, checks: _Checks, step: int, state: Any, how: str, twice: bool
) -> None:
    pass_index, done = reference.locate(step)
    where = f"save point {step}{how} (pass {pass_index}, after batch {done} of that pass)"
    saved = _round_trip(state, where, checks.max_state_bytes)
    loader = checks.build()
    for attempt in range(2 if twice else 1):
        again = " (restored again into the used loader)" if attempt else ""
        loader.load_state_dict(copy.deepcopy(saved))
        if checks.echo and not attempt:  # a used loader may report its old state until iter()
            problem = _difference(saved, loader.state_dict(), "state")
            if problem is not None:
                raise AssertionError(
                    f"{where}: state_dict() after load_state_dict(s) is not s: {problem}"
                )
        _check_loops(reference, checks, loader, step, where + again, in_loop=not how)


def _check_loops(
    reference: _Reference,
    checks: _Checks,
    loader: StatefulIterable,
    step: int,
    where: str,
    in_loop: bool,
) -> None:
    """Run the resumed loops; an empty first loop is allowed only for an in-loop state saved
    after the last batch of a pass (it ends that pass)."""
    pass_index, done = reference.locate(step)
    at_pass_end = done == len(reference.passes[pass_index]) and done > 0
    first = pass_index + 1 if at_pass_end else pass_index
    may_skip_empty = at_pass_end and in_loop
    delivered = step
    for offset, want in enumerate(reference.remainder(step)):
        got = []
        for batch in loader:
            got.append(_detach(batch))
            delivered += 1
            if checks.same_states and delivered < len(reference.states):
                problem = _difference(reference.states[delivered], loader.state_dict(), "state")
                if problem is not None:
                    raise AssertionError(f"{where}: after {delivered} batches: {problem}")
        if may_skip_empty and not got:
            got = [_detach(batch) for batch in loader]
            delivered += len(got)
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
