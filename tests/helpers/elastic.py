"""Resuming on another world size: the global batches of ranks saved at one world size and
resumed at another equal the uninterrupted single-rank run's."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from streamload import StreamLoader
from streamload.testing import assert_batches_equal, collect_global_batches

__all__ = ["assert_resumes_on_world"]

MakeRanks = Callable[[int, int, int], Sequence[StreamLoader]]
"""``(world_size, batch_size, chunk_batches) -> one loader per rank``."""


def assert_resumes_on_world(
    make: MakeRanks,
    saved: tuple[int, int, int],
    resumed: tuple[int, int, int],
    pick_step: Callable[[int], int],
) -> None:
    """Save after ``pick_step(batches of a pass)`` global batches with the ranks of
    ``saved`` (world, batch size, chunk), resume with those of ``resumed``; a state saved after
    a pass's last batch resumes into the next pass.

    Args:
        make: Builds the loaders of every rank.
        saved: ``(world_size, batch_size, chunk_batches)`` of the saving run.
        resumed: The same of the resumed run (``world_size × batch_size`` as saved).
        pick_step: The save point, from the number of global batches in a pass.
    """
    world, b, chunk = saved
    single = make(1, world * b, chunk)
    reference: list[dict[str, Any]] = collect_global_batches(single)
    next_pass = collect_global_batches(single)
    step = pick_step(len(reference))
    before = make(world, b, chunk)
    assert_batches_equal(reference[:step], collect_global_batches(before, steps=step))
    state = before[-1].state_dict()
    after = make(*resumed)
    for loader in after:
        loader.load_state_dict(state)
    expected = reference[step:] if step < len(reference) else next_pass
    assert_batches_equal(expected, collect_global_batches(after))
