"""Weights as exact integers, so that every rounding decision is the same on every machine.

A decision that compares float expressions (which source's deficit is largest, whether
``w·B`` is whole, whose remainder is largest) is decided by rounding wherever the exact values
tie or nearly tie, and rounding is not the same everywhere: Python 3.12's ``sum()`` of floats
is compensated, 3.11's is not; numpy may evaluate a ufunc on a SIMD path. A job resumed on
another image could then take another order. So the allocation rules of
:mod:`streamload.plan.mixture` and :mod:`streamload.plan.vsl_curriculum` compare integers:
each weight is read as the **shortest decimal that reads back as the same float** (its
``repr``: ``0.7`` is 7/10, not 0.69999999999999995559…), and the weights are scaled by a
common denominator. The shortest decimal is what a config says, is computed the same way on
every platform, and lies within half an ulp of the float, so an exact decision agrees with
the float one wherever the float one was not decided by rounding.

Example:
    >>> integer_weights([0.7, 0.3])
    ([7, 3], 10)
    >>> integer_weights([1.0, 2.0, 0.5])
    ([2, 4, 1], 7)
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from fractions import Fraction

__all__ = ["integer_weights"]


def integer_weights(weights: Iterable[float]) -> tuple[list[int], int]:
    """Integers ``n`` and their sum ``s``: weight ``i`` is exactly ``n[i] / s`` of the total.

    Args:
        weights: Finite weights >= 0 (floats, or anything ``float()`` accepts).

    Returns:
        ``(n, s)``: ``n[i] = shortest_decimal(w[i]) · D`` for the least common denominator
        ``D`` of those decimals, and ``s = sum(n)`` (0 when every weight is 0).

    Raises:
        ValueError: a weight is negative or not finite.
    """
    decimals = []
    for weight in weights:
        value = float(weight)
        if not math.isfinite(value) or value < 0:
            raise ValueError(f"weight {value!r}: expected a finite value >= 0")
        decimals.append(Fraction(repr(value)))
    denominator = math.lcm(*(d.denominator for d in decimals)) if decimals else 1
    scaled = [d.numerator * (denominator // d.denominator) for d in decimals]
    return scaled, sum(scaled)
