"""The trained labels of a packed epoch (:mod:`streamload.modes.packed.trained`), counted
against labels built by hand."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from streamload.modes.packed import trained
from streamload.modes.packed.trained import trained_labels


class Masks:
    """A stand-in for a source's mask set: windows of one flat array."""

    def __init__(self, flags: np.ndarray) -> None:
        self.flags = flags

    def windows(self, starts: np.ndarray, length: int, dtype: Any) -> np.ndarray:
        return np.stack([self.flags[s : s + length] for s in starts.tolist()]).astype(dtype)


def by_hand(
    starts: list[int], lengths: list[int], first: list[bool], flags: Any, masked: bool
) -> int:
    count = 0
    for s, n, opens in zip(starts, lengths, first, strict=True):
        count += sum(int(flags[t] != 0) for t in range(s + 1, s + n))
        if not masked and not opens:
            count += int(flags[s] != 0)
    return count


def test_the_module_docstrings_example() -> None:
    masks = Masks(np.array([0, 1, 1, 0, 1], dtype=np.uint8))
    args = (np.array([0, 3]), np.array([3, 2]), np.array([True, False]))
    assert trained_labels(*args, masks, True) == trained_labels(*args, masks, False) == 3  # type: ignore[arg-type]
    assert trained_labels(*args, None, True) == 3
    assert trained_labels(*args, None, False) == 4


@pytest.mark.parametrize("masked", [True, False])
def test_random_items_in_small_spans(monkeypatch: pytest.MonkeyPatch, masked: bool) -> None:
    monkeypatch.setattr(trained, "SPAN_TOKENS", 7)  # many spans, items across their ends
    rng = np.random.default_rng(4)
    sizes = rng.integers(1, 9, size=60)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    flags = rng.integers(0, 2, size=int(sizes.sum())).astype(np.uint8)
    order = rng.permutation(60)  # sample order is not storage order
    first = rng.random(60) < 0.3
    got = trained_labels(starts[order], sizes[order], first, Masks(flags), masked)  # type: ignore[arg-type]
    want = by_hand(starts[order].tolist(), sizes[order].tolist(), first.tolist(), flags, masked)
    assert got == want
