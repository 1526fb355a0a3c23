"""The per-source batching rule of :mod:`streamload.plan.mixture` (``[mixture] batching =
"per_source"``): every optimizer step is drawn whole from one source.

The rule is Balinski and Young's *quota method* of apportionment (1975), applied to steps: a
step of ``B`` samples, ``t`` samples into the phase, goes to the source with the smallest
``(d_i + B) / w_i`` among those whose count stays under their upper quota, ``d_i < w_i·(t + B)``
(``d_i``: its samples since the phase began), ties to the lowest index. ``(d_i + B) / w_i`` is
when the source's next step falls due (Jefferson / D'Hondt); the quota keeps a source from
running ahead. With one batch size over a phase, the steps a source has received after any
``n`` steps of it are ``floor(w·n)`` or ``ceil(w·n)``: within one step of its share, over every
prefix of the phase (the method *satisfies quota*). The plain largest-deficit rule does not:
equal weights listed after a larger one fall behind by more than a step (1.25 steps with weights
(68, 3, 1000, 68, 3, 1000)). Where the batch size changes inside a phase (a ramp-up, a resume
with another global batch size) the rule carries on from the sample counts: a source is never
ahead by a batch or more, and never behind by ``(S − 1)`` of the largest batches.

Decisions are exact: weight ``i`` is ``n_i / T`` (:mod:`streamload.plan._exact`); with ``L`` the
least common multiple of the positive ``n_i``, the due time is the integer ``(d_i + B)·(L / n_i)``
and the quota ``d_i·T < n_i·(t + B)``, in int64 where they fit; else float64 decides the steps
whose quotas and earliest due are clear by far more than rounding, and Python integers the
others.

Walking is vectorized by guessing and checking (as :mod:`streamload.plan.mixture_counts`): a
block of steps is guessed (the sources in order of their due times, the rule without its
quota), then every step's choice is recomputed from the guessed steps before it, all rows at
once; each miss is moved into place (the steps up to that source's next one shift by one, so
the counts before every later step, and their checks, stay) and the block is checked again;
the steps up to and including the first remaining miss are kept, so the result never depends
on the guess. Weights whose denominator ``T`` is small repeat every ``T`` steps (then every
source has exactly ``n_i`` of them), so a walk of many steps walks one period and repeats it.

Worked example, weights (0.5, 0.3, 0.2), B = 1:

| step | quota (``d < w·(t+1)``) | due ``(d + 1)/w`` | to | counts |
|---|---|---|---|---|
| 0 | all | 2, 3.3, 5 | 0 | 1, 0, 0 |
| 1 | 0: 1 < 1 no | -, 3.3, 5 | 1 | 1, 1, 0 |
| 2 | 1: 1 < 0.9 no | 4, -, 5 | 0 | 2, 1, 0 |
| 3 | 0: 2 < 2 no | -, 6.7, 5 | 2 | 2, 1, 1 |

Example:
    >>> SourceWalk((0.5, 0.3, 0.2), 1, np.zeros(3, np.int64)).choices(10).tolist()
    [0, 1, 0, 2, 0, 1, 0, 1, 0, 2]
"""

from __future__ import annotations

import functools
import math
from fractions import Fraction

import numpy as np

from streamload.plan._exact import integer_weights

__all__ = ["SourceWalk", "share_bounds"]

_MAX_PERIOD = 1 << 16
"""Longest period (``T`` steps) walked once and then repeated."""
_FIRST_GUESS = 64
"""Steps a guess covers after a miss (each right guess doubles it)."""
_REPAIRS = 8
"""Checks of one block, each repairing the misses it found, before keeping its exact part."""
_MAX_CELLS = 1 << 20
"""Rows × sources of one checked block (bounded memory)."""
_INT64_SAFE = 1 << 62
"""Integer keys below it are compared in int64 (exactly, with room for one addition)."""


class SourceWalk:
    """The per-source steps of one phase at one batch size, from a position in the phase.

    Args:
        weights: The phase's normalized weights ``[S]``.
        size: B, samples per step.
        since: int64 ``[S]``: samples each source drew since the phase began (copied).

    Attributes:
        since: The counts after the steps walked so far.
    """

    def __init__(self, weights: tuple[float, ...], size: int, since: np.ndarray) -> None:
        self.nums, self.total, self.lcm, self.scale, self.floats = _weights_of(weights)
        self.size = size
        self.since = np.array(since, dtype=np.int64)

    def block(self, count: int) -> np.ndarray:
        """int64 ``[count, S]``: samples per source of the next ``count`` steps (one-hot × B)."""
        chosen = self.choices(count)
        rows = np.zeros((count, len(self.nums)), dtype=np.int64)
        rows[np.arange(count), chosen] = self.size
        return rows

    def skip(self, count: int) -> None:
        """Walk ``count`` steps, whole periods at once (bounded memory)."""
        period = self._period(count)
        if period is not None:
            whole = (count - period.size) // period.size
            self.since += whole * np.array(self.nums, dtype=np.int64) * self.size
            count -= period.size * (whole + 1)
        for first in range(0, count, 1 << 16):
            self.choices(min(1 << 16, count - first))

    def choices(self, count: int) -> np.ndarray:
        """int64 ``[count]``: the source of each of the next ``count`` steps; advances."""
        period = self._period(count)
        if period is not None:  # the rest repeats the period (it already advanced by one)
            rest = np.resize(period, count - period.size)
            self.since += np.bincount(rest, minlength=len(self.nums)) * self.size
            return np.concatenate([period, rest])
        return self._checked(count)

    def _period(self, count: int) -> np.ndarray | None:
        """The next ``T`` choices (walked) when they give every source exactly its share
        ``n_i`` and ``count`` spans more than two of them: then the steps after repeat them
        (the rule's comparisons do not change when every ``d_i`` grows by ``n_i·B`` and ``t``
        by ``T·B``); else ``None`` (nothing walked)."""
        if self.total > _MAX_PERIOD or count <= 2 * self.total:
            return None
        before = self.since.copy()
        period = self._checked(self.total)
        if np.array_equal(self.since - before, np.array(self.nums, dtype=np.int64) * self.size):
            return period
        self.since = before  # not a period from here: walk step by step instead
        return None

    def _checked(self, count: int) -> np.ndarray:
        """The next ``count`` choices by guessing, checking and repairing (module docstring)."""
        out: list[np.ndarray] = []
        done, span = 0, _FIRST_GUESS
        cap = max(1, _MAX_CELLS // len(self.nums))
        while done < count:
            guess = self._guess(min(count - done, span, cap))
            for _ in range(_REPAIRS):
                actual = self._check(guess)
                wrong = np.flatnonzero(actual != guess)
                if not wrong.size:
                    break
                guess = _repaired(guess, actual, wrong)
            if wrong.size:  # exact up to and including the first miss
                actual = actual[: wrong[0] + 1]
                span = max(_FIRST_GUESS, span // 2)
            else:
                span *= 2
            self.since += np.bincount(actual, minlength=len(self.nums)) * self.size
            out.append(actual)
            done += actual.size
        return np.concatenate(out) if out else np.zeros(0, dtype=np.int64)

    def _guess(self, n: int) -> np.ndarray:
        """The sources in order of their due times from here (the rule without its quota)."""
        weights = self.floats
        live = np.flatnonzero(weights > 0)
        due = (self.since[live, None] + self.size * np.arange(1, n + 1)) / weights[live, None]
        order = np.argsort(due.T.ravel(), kind="stable")[:n]  # step-major: ties to low index
        return live[order % live.size]

    def _check(self, guess: np.ndarray) -> np.ndarray:
        """The rule's choice of each step when the steps before it chose ``guess``."""
        n, sources, size = guess.size, len(self.nums), self.size
        onehot = np.zeros((n, sources), dtype=np.int64)
        onehot[np.arange(n), guess] = size
        drawn = self.since + np.cumsum(onehot, axis=0) - onehot  # before each step
        after = int(self.since.sum()) + size * np.arange(1, n + 1, dtype=np.int64)  # t + B
        largest = (int(after[-1]) + size) * max(self.total, self.lcm)
        if largest >= _INT64_SAFE or not self.lcm:
            return self._check_floats(drawn, after)
        nums = np.array(self.nums, dtype=np.int64)
        quota = drawn * self.total < nums[None, :] * after[:, None]
        due = (drawn + size) * np.array(self.scale, dtype=np.int64)[None, :]
        due = np.where(quota & (nums > 0)[None, :], due, np.iinfo(np.int64).max)
        return np.argmin(due, axis=1).astype(np.int64)  # the first minimum: the lowest index

    def _check_floats(self, drawn: np.ndarray, after: np.ndarray) -> np.ndarray:
        """:meth:`_check` where the integer keys outgrow int64: float64 decides every row
        whose quotas and earliest due are clear by far more than rounding (a few ulps of the
        magnitudes), the exact rule the others."""
        weights = self.floats
        live = weights > 0
        gap = weights[None, :] * after[:, None].astype(np.float64) - drawn
        tol = 2.0**-48 * (after[:, None].astype(np.float64) + np.abs(drawn))
        quota = (gap > tol) & live[None, :]
        with np.errstate(divide="ignore"):
            due = np.where(quota, (drawn + self.size) / np.where(live, weights, 1.0), np.inf)
        best = due.min(axis=1)
        near = due <= best[:, None] * (1 + 2.0**-46)
        unsure = (np.abs(gap) <= tol).any(axis=1) | (near.sum(axis=1) > 1)
        out = np.argmin(due, axis=1).astype(np.int64)
        for row in np.flatnonzero(unsure).tolist():
            out[row] = self._exact(drawn[row].tolist(), int(after[row]))
        return out

    def _exact(self, drawn: list[int], after: int) -> int:
        """The rule for one step in Python integers (``after``: the phase's samples with it)."""
        nums, total, size = self.nums, self.total, self.size
        under = [i for i, n in enumerate(nums) if n and drawn[i] * total < n * after]
        return min(under, key=lambda i: (Fraction(drawn[i] + size, nums[i]), i))


@functools.lru_cache(maxsize=64)
def _weights_of(
    weights: tuple[float, ...],
) -> tuple[list[int], int, int, list[int], np.ndarray]:
    """A phase's exact weights ``n_i / T`` (reduced: only ratios matter, so 1/3 each becomes
    (1, 1, 1) over 3), ``L`` (0 past int64: floats decide then), ``L / n_i`` (0 for a zero
    weight) and the float weights, each ``n_i / T`` correctly rounded (cached: a loader walks
    the same phase chunk after chunk)."""
    nums, total = integer_weights(weights)
    common = math.gcd(*nums)
    nums, total = [n // common for n in nums], total // common
    lcm = _bounded_lcm([n for n in nums if n > 0])
    scale = [lcm // n if n > 0 and lcm else 0 for n in nums]
    floats = np.array([n / total for n in nums], dtype=np.float64)
    floats.flags.writeable = False
    return nums, total, lcm, scale, floats


def _bounded_lcm(values: list[int]) -> int:
    """The least common multiple of ``values``, or 0 once it passes int64 (1,000 weights of
    17 digits would make it thousands of digits long, for nothing)."""
    out = 1
    for value in values:
        out = out * value // math.gcd(out, value)
        if out >= _INT64_SAFE:
            return 0
    return out


def _repaired(guess: np.ndarray, actual: np.ndarray, wrong: np.ndarray) -> np.ndarray:
    """``guess`` with its misses moved into place: at a miss ``m`` the rule's source ``x``
    takes the step and the guessed steps up to ``x``'s next one (at ``g``) move one later, so
    the counts before every step after ``g`` are unchanged and its check still holds; misses
    up to ``g`` wait for the next check."""
    new = guess.copy()
    positions = [np.flatnonzero(guess == s) for s in range(int(guess.max()) + 1)]
    dirty = -1
    for m in wrong.tolist():
        if m <= dirty:
            continue
        x = int(actual[m])
        later = positions[x] if x < len(positions) else positions[0][:0]
        k = int(np.searchsorted(later, m))
        g = int(later[k]) if k < later.size else guess.size - 1
        new[m + 1 : g + 1] = guess[m:g]
        new[m] = x
        dirty = g
    return new


def share_bounds(
    weights: tuple[float, ...], samples: int, sizes: set[int]
) -> tuple[np.ndarray, np.ndarray]:
    """Bounds of each source's samples after ``samples`` of a phase (module docstring).

    Args:
        weights: The phase's normalized weights ``[S]``.
        samples: Samples of the phase so far.
        sizes: The batch sizes its steps had.

    Returns:
        int64 ``[S]`` low and high: with one size B, B times the floor and ceiling of the
        source's share of the steps; else its share less ``(S − 1)`` and plus one of the largest
        batches.
    """
    nums, total = integer_weights(weights)
    low, high = [], []
    for num in nums:
        if len(sizes) == 1:
            (size,) = sizes
            steps = samples // size
            low.append(num * steps // total * size)
            high.append(-(-num * steps // total) * size)
        else:
            largest = max(sizes)
            low.append(max(0, num * samples // total - (len(nums) - 1) * largest))
            high.append(min(samples, -(-num * samples // total) + largest) if num else 0)
    return np.array(low, dtype=np.int64), np.array(high, dtype=np.int64)
