"""Megatron-Core ``BlendedDataset`` indices, bit-identical to ``helpers.cpp`` (FORMATS §2.2, §2.10).

Megatron blends datasets greedily: at step ``s`` (with ``x = max(s, 1)``) it takes the
dataset with the largest error ``w[d] * x - count[d]`` (IEEE double, strict ``>``, so ties go
to the lowest index) and records ``(d, count[d])``. The exhaustive variant weighs datasets by
their sizes and skips the ones already used up.

The rule is a sequential recurrence with no closed form for three or more datasets, and a
fixed-point iteration over a guessed sequence converges only one step at a time. What does
hold is that two runs of the rule started from different counts at the same step *merge*,
mostly within a few steps (the errors stay within a sample or two of zero). So the steps are cut
into chunks that are simulated **side by side** (one numpy operation per step for all chunks):
chunk ``i`` starts ``burn_in`` steps before its output from the largest-remainder guess of the
counts, which it has almost always forgotten when its output begins. Then each chunk's state
where its output starts is compared with the exact state its predecessor ended in; on a
mismatch the chunk is replayed exactly, step by step, from the true state until it merges
with the speculative run. Every output step is therefore checked against the exact rule, and
the result equals the C++ loop whatever the weights; only the speed depends on merging.

Example (weights 0.7/0.3, as measured on megatron-core 0.16.1):

>>> index, sample = build_blending_indices([0.7, 0.3], 10)
>>> index.tolist()
[0, 1, 0, 0, 1, 0, 0, 1, 0, 0]
>>> sample.tolist()
[0, 0, 1, 2, 1, 3, 4, 2, 5, 6]
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from streamload.errors import ConfigError

__all__ = [
    "MID_LEVEL_SURPLUS",
    "BlendSizes",
    "blend_sizes",
    "blended_dataset_indices",
    "build_blending_indices",
    "build_exhaustive_blending_indices",
    "normalize",
]

MID_LEVEL_SURPLUS = 0.005
"""``mid_level_dataset_surplus``: each dataset builds 0.5 % more samples than the blend takes."""

Weights = Sequence[float] | np.ndarray
"""Blend weights or sizes: a sequence or a 1-D array."""

_MAX_DATASETS = 32767
_SEQUENTIAL_WORK = 1 << 17
"""Blends of at most this many (step, dataset) pairs run the plain loop."""
_BURN_IN = 1024
_BURN_IN_RARE = 4096
"""Longer burn-in when a dataset is rarer than 1e-4: its count takes longer to settle."""
_STEP_OVERHEAD = 160.0
"""Cost of one vectorized step relative to one (chunk, dataset) element; sizes the chunks."""


class BlendSizes(NamedTuple):
    """Sample counts of a weighted blend split (megatron's builder)."""

    target: tuple[int, ...]
    """``ceil(size * w_d)``: samples the blend takes from each dataset."""
    build: tuple[int, ...]
    """``ceil(target_d * (1 + surplus))``: samples each dataset builds (its ``num_samples``)."""
    total: int
    """``sum(target)``: the size of the ``BlendedDataset`` (can exceed ``size`` slightly)."""


def normalize(weights: Weights) -> np.ndarray:
    """megatron ``utils.normalize``: float64 ``w / numpy.sum(w)``.

    megatron-core's own float operations in its order, on purpose (docs/design.md §2.14):
    ``numpy.sum``, never the built-in ``sum()``, whose result moved in Python 3.12
    (compensated summation) and decides exact ties of the blend otherwise than Megatron.
    """
    array = np.asarray(weights, dtype=np.float64)
    return array / np.sum(array)


def blend_sizes(weights: Weights, size: int, surplus: float = MID_LEVEL_SURPLUS) -> BlendSizes:
    """Per-dataset sample counts for a blend of ``size`` samples with raw ``weights``.

    The weights are normalized once, as ``BlendedMegatronDatasetBuilder`` does; pass the same
    normalized weights to :func:`blended_dataset_indices` with ``total`` as its size.

    Example:
        >>> blend_sizes([0.7, 0.3], 200)
        BlendSizes(target=(140, 60), build=(141, 61), total=200)
    """
    if size < 0:
        raise ConfigError(f"blend size {size}: expected >= 0")
    target = tuple(math.ceil(size * w) for w in normalize(weights).tolist())
    build = tuple(math.ceil(t * (1 + surplus)) for t in target)
    return BlendSizes(target, build, sum(target))


def _check_weights(weights: Weights) -> np.ndarray:
    array = np.asarray(weights, dtype=np.float64).reshape(-1)
    if not 1 <= array.size <= _MAX_DATASETS:
        raise ConfigError(f"blend of {array.size} datasets: expected 1..{_MAX_DATASETS}")
    if not np.all(np.isfinite(array)) or np.any(array < 0):
        raise ConfigError(f"blend weights {array.tolist()}: expected finite values >= 0")
    return array


def build_blending_indices(weights: Weights, size: int) -> tuple[np.ndarray, np.ndarray]:
    """``helpers.build_blending_indices``: dataset and per-dataset sample of each blend step.

    Args:
        weights: The weights exactly as megatron passes them (float64, normally normalized).
        size: Blend length.

    Returns:
        ``dataset_index`` int16 ``[size]`` and ``dataset_sample_index`` int64 ``[size]``.

    Raises:
        ConfigError: no datasets, more than 32767, negative or non-finite weights.
    """
    array = _check_weights(weights)
    if size < 0:
        raise ConfigError(f"blend size {size}: expected >= 0")
    index = _greedy(array, None, int(size))
    return index, _sample_ranks(index, array.size)


def build_exhaustive_blending_indices(
    sizes: Sequence[int] | np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """``helpers.build_exhaustive_blending_indices``: take exactly ``sizes[d]`` from each.

    Weights are ``sizes / sum(sizes)``; used-up datasets drop out of the comparison.

    Returns:
        ``dataset_index`` int16 and ``dataset_sample_index`` int64, both ``[sum(sizes)]``.

    Raises:
        ConfigError: a size below 1 (the C++ loop never ends on an empty dataset).
    """
    caps = np.asarray(sizes, dtype=np.int64).reshape(-1)
    _check_weights(caps)
    if np.any(caps < 1):
        raise ConfigError(f"exhaustive blend sizes {caps.tolist()}: expected every size >= 1")
    total = int(caps.sum())
    weights = caps / np.float64(total)
    index = _greedy(weights, caps, total)
    return index, _sample_ranks(index, caps.size)


def blended_dataset_indices(
    weights: Weights,
    size: int | None,
    dataset_lengths: Sequence[int] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """What ``BlendedDataset._build_indices`` builds for its ``weights`` and ``size``.

    With a size the weights are normalized (again, if the builder already did) and blended
    greedily; without one they are integer sample counts blended exhaustively.

    Args:
        weights: The ``BlendedDataset`` weights (the builder passes ``normalize(raw)``, or the
            dataset lengths when the blend has no weights).
        size: Its size (``BlendSizes.total``, or ``min(requested, sum(lengths))``), or None.
        dataset_lengths: ``len()`` of each dataset, to check for oversampling.

    Raises:
        ConfigError: a dataset is asked for more samples than it has (megatron's
            ``IndexError``; raise ``mid_level_dataset_surplus``).
    """
    if size is None:
        if any(float(w) != int(w) for w in weights):
            raise ConfigError(f"blend weights {list(weights)} without a size must be integers")
        index, sample = build_exhaustive_blending_indices([int(w) for w in weights])
    else:
        index, sample = build_blending_indices(normalize(weights), size)
    if dataset_lengths is not None:
        used = np.bincount(index, minlength=len(dataset_lengths))
        for d, (need, have) in enumerate(zip(used.tolist(), dataset_lengths, strict=False)):
            if need > have:
                raise ConfigError(
                    f"blend dataset {d}: {need} samples requested but it holds {have}; "
                    "increase mid_level_dataset_surplus"
                )
    return index, sample


def _sample_ranks(index: np.ndarray, num_datasets: int) -> np.ndarray:
    """``dataset_sample_index``: how many earlier steps took the same dataset."""
    order = np.argsort(index, kind="stable")
    counts = np.bincount(index, minlength=num_datasets)
    ranks = np.arange(index.size, dtype=np.int64)
    ranks -= np.repeat(np.cumsum(counts) - counts, counts)
    out = np.empty(index.size, dtype=np.int64)
    out[order] = ranks
    return out


def _greedy(
    weights: np.ndarray,
    caps: np.ndarray | None,
    size: int,
    chunk: int | None = None,
    burn_in: int | None = None,
) -> np.ndarray:
    """The dataset of every step, ``int16 [size]`` (``chunk`` forces the speculative path)."""
    out = np.zeros(size, dtype=np.int16)
    num = weights.size
    if num == 1 or size == 0:
        return out
    if chunk is None and size * num <= _SEQUENTIAL_WORK:
        _walk(weights.tolist(), _caps(caps), [0] * num, 0, size, out)
        return out
    if burn_in is None:
        rare = bool(np.any((weights > 0) & (weights < 1e-4)))
        burn_in = _BURN_IN_RARE if rare else _BURN_IN
    if chunk is None:
        width = math.sqrt(size * _STEP_OVERHEAD / (burn_in * num))
        chunk = max(burn_in, size // max(1, round(width)))
    _speculate(weights, caps, out, max(1, chunk), burn_in)
    return out


def _caps(caps: np.ndarray | None) -> list[int] | None:
    return None if caps is None else caps.tolist()


def _walk(
    weights: list[float],
    caps: list[int] | None,
    counts: list[int],
    step: int,
    stop: int,
    out: np.ndarray,
    guess: list[int] | None = None,
) -> bool:
    """Run the exact rule from ``counts`` at ``step`` to ``stop``, writing ``out[step:stop]``.

    With ``guess`` (the speculative counts at ``step``, whose picks ``out`` already holds),
    stop as soon as the exact counts equal the speculative ones: from there on ``out`` is
    right. ``counts`` is updated in place. Returns whether it merged.
    """
    num = len(weights)
    low = -math.inf
    diff = None if guess is None else [c - g for c, g in zip(counts, guess, strict=True)]
    apart = 0 if diff is None else sum(1 for v in diff if v)
    for s in range(step, stop):
        if diff is not None and apart == 0:
            return True
        x = float(s) if s > 1 else 1.0
        best, best_err = -1, low
        for d in range(num):
            if caps is not None and counts[d] == caps[d]:
                continue
            err = weights[d] * x - counts[d]
            if err > best_err:
                best, best_err = d, err
        counts[best] += 1
        if diff is not None:
            old = int(out[s])
            if old != best:
                for d, delta in ((best, 1), (old, -1)):
                    before = diff[d]
                    diff[d] = before + delta
                    apart += (diff[d] != 0) - (before != 0)
        out[s] = best
    return diff is not None and apart == 0


def _guess_counts(weights: np.ndarray, caps: np.ndarray | None, steps: np.ndarray) -> np.ndarray:
    """Largest-remainder counts ``[K, n]`` summing to each of ``steps`` (ties: lowest index)."""
    ideal = weights[:, None] * steps[None, :].astype(np.float64)
    counts = np.floor(ideal)
    room = np.ones(counts.shape, dtype=bool)
    if caps is not None:
        np.minimum(counts, caps[:, None], out=counts)
        room = counts < caps[:, None]
    spare = steps - counts.sum(axis=0)
    remainder = np.where(room, ideal - counts, -1.0)
    order = np.argsort(-remainder, axis=0, kind="stable")
    rank = np.empty_like(order)
    np.put_along_axis(rank, order, np.arange(weights.size)[:, None], axis=0)
    counts += (rank < spare[None, :]) & room
    return counts


def _speculate(
    weights: np.ndarray, caps: np.ndarray | None, out: np.ndarray, chunk: int, burn_in: int
) -> None:
    """Fill ``out`` by chunks simulated side by side, then verify and repair them in order.

    Chunk 0 starts exactly at step 0 and outputs its first ``burn_in + chunk`` steps; chunk
    ``i >= 1`` starts at ``i * chunk`` from guessed counts and outputs steps
    ``[i * chunk + burn_in, (i + 1) * chunk + burn_in)``.
    """
    size = out.size
    span = burn_in + chunk
    chunks = 1 + max(0, -(-(size - span) // chunk))
    begins = np.arange(chunks, dtype=np.int64) * chunk
    counts = _guess_counts(weights, caps, begins)
    picks, at_output = _simulate(weights, caps, counts, begins, span, burn_in)
    out[: min(span, size)] = picks[: min(span, size), 0]
    rest = picks[burn_in:, 1:].T.reshape(-1)
    out[span:] = rest[: size - span]
    exact = counts[:, 0].astype(np.int64).tolist()
    weight_list, cap_list = weights.tolist(), _caps(caps)
    for i in range(1, chunks):
        start = int(begins[i]) + burn_in
        guess = at_output[:, i].astype(np.int64).tolist()
        if exact != guess:
            stop = min(start + chunk, size)
            if not _walk(weight_list, cap_list, exact, start, stop, out, guess):
                continue
        exact = counts[:, i].astype(np.int64).tolist()


def _simulate(
    weights: np.ndarray,
    caps: np.ndarray | None,
    counts: np.ndarray,
    begins: np.ndarray,
    steps: int,
    burn_in: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Run the rule ``steps`` times for every column of ``counts`` (float64 ``[K, n]``, in place).

    Returns the picks ``int16 [steps, n]`` and the counts after ``burn_in`` steps.
    """
    num, width = counts.shape
    picks = np.empty((steps, width), dtype=np.int16)
    at_output = counts.copy()
    base = begins.astype(np.float64)
    x = np.empty(width)
    err = np.empty((num, width))
    spent = np.empty((num, width), dtype=bool)
    column = np.arange(width)
    flat = counts.reshape(-1)
    limit = None if caps is None else caps[:, None].astype(np.float64)
    for k in range(steps):
        if k == burn_in:
            at_output = counts.copy()
        np.add(base, k, out=x)
        np.maximum(x, 1.0, out=x)
        np.multiply(weights[:, None], x, out=err)
        np.subtract(err, counts, out=err)
        if limit is not None:
            np.greater_equal(counts, limit, out=spent)
            np.copyto(err, -np.inf, where=spent)
        best = err.argmax(axis=0)
        picks[k] = best
        best *= width
        best += column
        flat[best] += 1
    return picks, at_output
