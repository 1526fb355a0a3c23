"""Committed orders of the planning rules (issue 36, item 19): the same on every machine.

``tests/golden/orders.json`` holds, for fixed inputs, the orders of mixture allocations (ties,
weights whose float sums round, schedules, temperatures), vsl apportionments, curricula,
table curricula and row patterns, and Megatron blends with exact ties (written by
``tests/golden/make_order_goldens.py``). Every rule that decides by comparing weighted
quantities is exact (integers, :mod:`streamload.plan._exact`) or, for Megatron, performs
megatron-core's own float operations in its order (docs/design.md, "Exact decisions"), so
these orders must not move with the machine, the Python version or the numpy version.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from streamload.plan.megatron_blend import build_blending_indices, normalize
from tests.helpers.paths import GOLDEN, load_script

WRITER = load_script(GOLDEN / "make_order_goldens.py")
GOLDENS: dict[str, Any] = json.loads((GOLDEN / "orders.json").read_text())
NOW: dict[str, Any] = WRITER.goldens()


@pytest.mark.parametrize("part", sorted(GOLDENS))
def test_orders_match_the_committed_goldens(part: str) -> None:
    assert NOW[part] == GOLDENS[part]


def test_the_megatron_three_way_tie_follows_numpy_sum() -> None:
    """Megatron normalizes twice with ``numpy.sum``; 3.12's compensated ``sum()`` would make
    the second sum exactly 1 and give dataset 0 instead of 1 at step 6."""
    once = normalize([1.5, 2.25, 0.75])
    twice = normalize(once)
    assert float(np.sum(once)) == 0.9999999999999999  # the second division is not a no-op
    index, sample = build_blending_indices(twice, 7)
    assert index.tolist() == [1, 0, 2, 1, 0, 1, 1]
    assert sample.tolist() == [0, 0, 0, 1, 1, 2, 3]
