"""``LengthCounts`` tallies document lengths shard by shard in memory that follows the
distinct lengths, and ``inspect``'s histogram of the tally equals that of every length."""

from __future__ import annotations

import numpy as np
import pytest

from streamload.cli.inspect import length_histogram
from streamload.tools import documents
from streamload.tools.documents import LengthCounts


def shard_lengths(seed: int = 0) -> list[np.ndarray]:
    """Document lengths of 40 shards (0 to 3,000 tokens; some shards without documents)."""
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 3000, size=rng.integers(0, 200)) for _ in range(40)]


@pytest.mark.parametrize("pending", [1, 7, 1 << 20])
def test_the_tally_counts_every_length(monkeypatch: pytest.MonkeyPatch, pending: int) -> None:
    """Merged after every shard, every few, or once at the end: the same tally."""
    monkeypatch.setattr(documents, "PENDING_LENGTHS", pending)
    parts = shard_lengths()
    tally = LengthCounts()
    for part in parts:
        tally.add(part)
    lengths, counts = tally.counts()
    expected = np.unique(np.concatenate(parts), return_counts=True)
    assert lengths.tolist() == expected[0].tolist()
    assert counts.tolist() == expected[1].tolist()
    assert lengths.dtype == counts.dtype == np.int64


def test_an_empty_tally() -> None:
    lengths, counts = LengthCounts().counts()
    assert lengths.size == counts.size == 0
    assert length_histogram(lengths, counts) == []


def test_add_copies_what_it_is_given() -> None:
    """A view of a mapped index is not held (nor changed later) by the tally."""
    given = np.array([3, 3, 5])
    tally = LengthCounts()
    tally.add(given)
    given[:] = 9
    assert [a.tolist() for a in tally.counts()] == [[3, 5], [2, 1]]


def test_histogram_of_the_tally_equals_that_of_every_length() -> None:
    parts = shard_lengths(seed=1)
    tally = LengthCounts()
    for part in parts:
        tally.add(part)
    every = np.concatenate(parts)
    assert length_histogram(*tally.counts()) == length_histogram(every)
    assert length_histogram(np.array([0, 1, 2, 3, 4])) == [
        (0, 1, 1), (1, 2, 1), (2, 4, 2), (4, 8, 1)
    ]  # fmt: skip
