"""Split strings and their bookends (``plan/split.py``): Megatron's rounding, contiguous parts."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamload.errors import ConfigError
from streamload.plan import megatron
from streamload.plan.split import (
    first_start_after_eos,
    parse_split,
    split_bookends,
    split_index,
    split_matrix,
    split_ranges,
)

SETTINGS = settings(max_examples=200, deadline=None, derandomize=True)

weights = st.lists(st.integers(0, 1000), min_size=1, max_size=3).filter(lambda w: any(w))


def test_megatron_keeps_the_same_functions() -> None:
    """The Megatron mode imports the very functions every mode splits with."""
    assert megatron.parse_split is parse_split
    assert megatron.split_matrix is split_matrix
    assert megatron.split_ranges is split_ranges


@SETTINGS
@given(parts=weights, count=st.integers(0, 10**7))
def test_bookends_are_megatrons_ranges_laid_end_to_end(parts: list[int], count: int) -> None:
    split = ",".join(map(str, parts))
    bounds = split_bookends(split, count)
    assert bounds[0] == 0 and len(bounds) == 4
    assert all(a <= b <= count for a, b in itertools.pairwise(bounds))
    for i, part in enumerate(split_ranges(split, count)):
        if part is None:
            assert bounds[i] == bounds[i + 1]
        else:
            assert (bounds[i], bounds[i + 1]) == (part[0], min(part[1], count))


def test_the_worked_example() -> None:
    """The module docstring's numbers: 10 documents under "80,20"."""
    assert split_ranges("80,20", 10) == [(0, 8), (8, 10), None]
    assert split_bookends("80,20", 10) == [0, 8, 10, 10]
    assert split_bookends("85,15", 1000) == [0, 850, 1000, 1000]
    assert split_bookends("98,2,0", 1000) == [0, 980, 1000, 1000]


def test_megatron_rounding_is_half_to_even() -> None:
    """``round(0.5 · 5) = 2`` and ``round(0.5 · 7) = 4``: Python's rounding, as Megatron's."""
    assert split_bookends("1,1", 5) == [0, 2, 5, 5]
    assert split_bookends("1,1", 7) == [0, 4, 7, 7]


@pytest.mark.parametrize(
    ("tokens", "at", "expected"),
    [
        ([5, 0, 7, 7, 0, 3], 2, 2),  # the token before position 2 is EOS
        ([5, 0, 7, 7, 0, 3], 3, 5),
        ([5, 0, 7, 7, 0, 3], 5, 5),
        ([5, 0, 7, 7, 0, 3], 6, None),  # no EOS in [5, 6)
        ([5, 0, 7, 7, 0, 0], 6, 6),  # the run's last token is EOS: its end is a start
        ([5, 7], 0, 0),
        ([5, 7], 1, None),
    ],
)
def test_first_start_after_eos(tokens: list[int], at: int, expected: int | None) -> None:
    assert first_start_after_eos(np.array(tokens), 0, at) == expected


def test_split_names() -> None:
    assert [split_index(n) for n in ("train", "valid", "test")] == [0, 1, 2]
    with pytest.raises(ConfigError, match=r"split name 'dev' is not one of train, valid, test"):
        split_index("dev")
