"""Dolma's light shuffle: input groups, a ring of open files, shuffled batches.

1. The input file list is shuffled with the seed (:func:`group_files`) and cut into groups:
   step ``min(files_per_process, n_files / processes)`` files, slice bounds rounded, as
   dolma does. One group is read by one process and gives one series of output files.
2. Inside a group, up to ``ring_size`` files are open at once (:func:`ring_batches`); the
   files are taken from the **end** of the group's list. A batch takes ``batch_size``
   steps, step ``i`` reading the next document of ring member ``i % len(ring)``; a file
   that ends uses its step, leaves the ring and the next file joins at the ring's end.
3. Each batch is shuffled (``random.Random`` seeded per group and batch) before it is
   written, so documents of different files mix within ``batch_size``.

Unlike dolma, whose ``random.shuffle`` runs unseeded in each worker, every shuffle here is a
function of ``(seed, group, batch)``: a rerun, a restart or another process count writes the
same files.

Example: files ``[a, b, c]`` in one group, ``ring_size = 2``, ``batch_size = 4``; ``c`` and
``b`` open first (popped from the end); the first batch holds ``c1 b1 c2 b2``.

``keep_order`` skips all three steps: each input file is its own group, in the listed order
(:func:`ordered_groups`; group ``G`` is file ``G``, so the zero-padded ``part-{G}`` names
sort in input order), a ring over one file reads it from start to end, and no batch is
shuffled. The output is the inputs' documents in order, one series of files per input file.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TypeVar

__all__ = ["batch_rng", "group_files", "ordered_groups", "ring_batches"]

T = TypeVar("T")


def group_files(
    files: Sequence[str], seed: int, processes: int, files_per_process: int | None
) -> list[list[str]]:
    """Shuffle the input files with ``seed`` and cut them into groups as dolma does.

    Args:
        files: Input files in listing order.
        seed: Seed of the shuffle.
        processes: dolma's ``processes`` (the group count when ``files_per_process`` is unset).
        files_per_process: At most this many files per group.

    Returns:
        Non-empty groups covering every file once.
    """
    order = list(files)
    random.Random(seed).shuffle(order)
    if not order:
        return []
    step = len(order) / processes
    if files_per_process is not None:
        step = min(step, float(files_per_process))
    groups = []
    current = 0.0
    while current < len(order):
        part = order[round(current) : round(current + step)]
        if part:
            groups.append(part)
        current += step
    return groups


def ordered_groups(files: Sequence[str]) -> list[list[str]]:
    """``keep_order``'s groups: each input file alone, in listing order (no seed, no cut)."""
    return [[f] for f in files]


def batch_rng(seed: int, group: int, batch: int) -> random.Random:
    """The generator that shuffles batch ``batch`` of group ``group``."""
    return random.Random(f"streamload-tokenize:{seed}:{group}:{batch}")


def ring_batches(
    files: Sequence[str], open_file: Callable[[str], Iterable[T]], ring_size: int, batch_size: int
) -> Iterator[list[T]]:
    """Batches of items read round robin from a ring of open files (module docstring, 2).

    Args:
        files: The group's files; the last is opened first.
        open_file: Opens a file as an iterable of items.
        ring_size: Files open at once.
        batch_size: Steps per batch (a batch holds at most this many items).

    Yields:
        Non-empty batches in reading order (not shuffled).
    """
    pending = list(files)
    ring: list[Iterator[T]] = []
    while pending and len(ring) < ring_size:
        ring.append(iter(open_file(pending.pop())))
    while ring:
        batch: list[T] = []
        for i in range(batch_size):
            if not ring:
                break
            j = i % len(ring)
            try:
                batch.append(next(ring[j]))
            except StopIteration:
                ring.pop(j)
                if pending:
                    ring.append(iter(open_file(pending.pop())))
        if batch:
            yield batch
