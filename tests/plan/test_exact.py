"""plan/_exact.py: weights as exact integers (issue 36, item 19)."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamload.plan._exact import integer_weights
from streamload.plan.vsl_curriculum import apportion

weight = st.floats(0, 1e6, allow_nan=False, allow_infinity=False)


def test_a_weight_is_its_shortest_decimal() -> None:
    assert integer_weights([0.7, 0.3]) == ([7, 3], 10)
    assert integer_weights([1.0, 2.0, 0.5]) == ([2, 4, 1], 7)
    assert integer_weights([0.0, 0.0]) == ([0, 0], 0)


@given(st.lists(weight, min_size=1, max_size=6))
def test_the_integers_keep_every_ratio(weights: list[float]) -> None:
    nums, total = integer_weights(weights)
    assert total == sum(nums)
    decimals = [Fraction(repr(w)) for w in weights]
    for n, d in zip(nums, decimals, strict=True):
        assert n * sum(decimals) == d * total


@pytest.mark.parametrize("bad", [-1.0, float("nan"), float("inf")])
def test_a_negative_or_non_finite_weight_is_refused(bad: float) -> None:
    with pytest.raises(ValueError, match="expected a finite value >= 0"):
        integer_weights([1.0, bad])


def test_exact_ties_go_to_the_lowest_index() -> None:
    """146 · 0.6/0.8 = 109.5 and 146 · 0.2/0.8 = 36.5: an exact tie of remainders, which the
    float quotas (0.7499999999999999) used to give to the second bucket."""
    assert apportion(146, [0.6, 0.2]).tolist() == [110, 36]


@given(st.integers(0, 10**6), st.lists(weight, min_size=1, max_size=6))
def test_apportion_adds_up_within_one_of_each_quota(total: int, weights: list[float]) -> None:
    counts = apportion(total, weights)
    nums, denominator = integer_weights(weights)
    if denominator == 0:
        assert counts.tolist() == [0] * len(weights)
        return
    assert int(counts.sum()) == total
    for c, n in zip(counts.tolist(), nums, strict=True):
        assert abs(Fraction(c) - Fraction(total * n, denominator)) < 1
