"""Train/valid/test splits of a source: Megatron's split string and where its splits begin.

A split string like ``"98,2,0"`` names the shares of three consecutive parts of a source
(train, valid, test). The numbers are normalized and summed into bookends exactly as
megatron-core does (:func:`split_matrix`), and part ``i`` of ``n`` things is
``[round(c_i · n), round(c_(i+1) · n))`` (:func:`split_ranges`; Python's round half to even).
The Megatron sampling mode splits its sequences this way; the concat, packed and padded modes
split each source's documents the same way and turn the document bounds into token offsets.

Where documents come from decides what ``n`` counts (:func:`split_offsets`):

* every shard has a document index: ``n`` is the number of documents of the source (its
  shards in stream order); split ``i`` is documents ``[round(c_i · D), round(c_(i+1) · D))``,
  and its tokens run from the first token of its first document to the first token of the
  next split's first document;
* otherwise (documents found by EOS, or a whole shard as one document): ``n`` is the number
  of tokens ``T``; each bookend ``round(c_i · T)`` moves forward to the first document start
  at or after it (:func:`first_start_after_eos` on the tokens there, or a shard start), so no
  document is ever cut, and finding it reads only the tokens up to that start.

Worked example: a source of 10 documents of 100 tokens (bounds 0, 100, … 1000) and split
``"80,20"``: bookends 0, 0.8, 1.0, 1.0; documents ``[0, 8)``, ``[8, 10)`` and the empty test
split; tokens ``[0, 800)``, ``[800, 1000)``. With documents found by EOS instead, ``n`` is
1000 tokens: bookend 800 is already a document start; ``"85,15"`` gives bookend 850, which
moves to the next document start, 900.

>>> split_ranges("80,20", 10)
[(0, 8), (8, 10), None]
>>> first_start_after_eos(np.array([5, 0, 7, 7, 0, 3]), 0, 2)
2
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence

import numpy as np

from streamload.errors import ConfigError

__all__ = [
    "SPLIT_NAMES",
    "first_start_after_eos",
    "parse_split",
    "split_bookends",
    "split_index",
    "split_matrix",
    "split_ranges",
]

SPLIT_NAMES = ("train", "valid", "test")
"""The parts of a split string, in its order (Megatron's ``Split`` names)."""


def _normalize(values: Sequence[float]) -> list[float]:
    """megatron ``utils.normalize``: float64 ``w / numpy.sum(w)`` back to Python floats."""
    array = np.asarray(values, dtype=np.float64)
    return (array / np.sum(array)).tolist()


def parse_split(split: str) -> list[float]:
    """Parse a split string like ``"969,30,1"`` into 3 normalized floats (train, valid, test).

    Numbers are found with the regex ``[.0-9]+`` (any separator), padded with zeros to three
    and normalized, as megatron's ``parse_and_normalize_split``.

    Raises:
        ConfigError: more than three numbers, or none of them positive.
    """
    try:
        parts = [float(p) for p in re.findall(r"[.0-9]+", split)]
    except ValueError as exc:
        raise ConfigError(f"split {split!r}: {exc}") from None
    if len(parts) > 3 or not any(p > 0 for p in parts):
        raise ConfigError(
            f"split {split!r}: expected up to 3 non-negative weights (train, valid, test) "
            "with a positive sum"
        )
    return _normalize(parts + [0.0] * (3 - len(parts)))


def split_matrix(split: str | Sequence[float]) -> list[tuple[float, float] | None]:
    """The split's bookends ``[(0, c1), (c1, c2), (c2, c3)]``; a zero-width split is ``None``.

    The cumulative sums start from the int ``0`` and add Python floats in order, as megatron's
    ``convert_split_vector_to_split_matrix``.
    """
    vector = parse_split(split) if isinstance(split, str) else [float(v) for v in split]
    bounds: list[float] = [0]
    for value in vector:
        bounds.append(bounds[-1] + value)
    return [(a, b) if b > a else None for a, b in itertools.pairwise(bounds)]


def split_ranges(split: str | Sequence[float], num_sequences: int) -> list[tuple[int, int] | None]:
    """Sequence id ranges ``[begin, end)`` of the train/valid/test splits (``None``: empty).

    ``begin = int(round(c_i * float(num_sequences)))`` (Python round-half-even); the split's
    ``indices`` are ``numpy.arange(begin, end, dtype=numpy.int32)``.
    """
    return [
        None
        if bookend is None
        else (
            round(bookend[0] * float(num_sequences)),
            round(bookend[1] * float(num_sequences)),
        )
        for bookend in split_matrix(split)
    ]


def split_bookends(split: str, count: int) -> list[int]:
    """The four boundaries ``[b0, b1, b2, b3]`` of :func:`split_ranges` over ``count`` things:
    split ``i`` is ``[b_i, b_(i+1))``, empty where Megatron's split is ``None`` (then
    ``b_i = b_(i+1)``). Boundaries never pass ``count`` (a sum of shares just above 1).
    """
    bounds = [0]
    for part in split_ranges(split, count):
        if part is not None:
            bounds.append(min(part[1], count))  # contiguous: part[0] is the previous end
        else:
            bounds.append(bounds[-1])
    return bounds


def split_index(name: str) -> int:
    """Position of ``train``/``valid``/``test`` in a split string.

    Raises:
        ConfigError: another name.
    """
    if name not in SPLIT_NAMES:
        raise ConfigError(f"split name {name!r} is not one of {', '.join(SPLIT_NAMES)}")
    return SPLIT_NAMES.index(name)


def first_start_after_eos(tokens: np.ndarray, eos_token_id: int, at: int) -> int | None:
    """The first document start ``p >= at`` inside ``tokens`` found by EOS: ``p`` is a start
    when ``tokens[p - 1]`` is EOS (a document ends after its EOS); ``0`` is a start.

    Args:
        tokens: A run of a shard's tokens (position 0 is where the run begins).
        eos_token_id: The EOS id.
        at: First position that may be returned (``0 <= at <= len(tokens)``).

    Returns:
        The position, or ``None`` when no start lies in ``[at, len(tokens)]`` (the caller
        reads further, or the shard ends there).
    """
    if at == 0:
        return 0
    ends = np.flatnonzero(np.asarray(tokens[at - 1 :]) == eos_token_id)
    return int(ends[0]) + at if ends.size else None
