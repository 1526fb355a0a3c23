"""Strict readers of the values inside a saved state (the rules of
:mod:`streamload.streams.cursor`): integers that are ``int`` (never ``bool``, ``float`` or
``str``) in ``[minimum, MAX_STATE_INT)``, and mappings with exactly their keys. Every error is
a ``StateError`` naming the field, its value (bounded by :func:`short_repr`) and the rule.
"""

from __future__ import annotations

import numbers
import reprlib
from collections.abc import Mapping, Sequence
from typing import Any

from streamload.errors import StateError

__all__ = ["MAX_STATE_INT", "short_repr", "state_int", "state_ints", "state_mapping"]

MAX_STATE_INT = 1 << 62
"""Exclusive bound of every integer in a state: indices derived from it (a sample's index in
its source, ``epoch · windows + sample``) then stay inside int64; no run comes near it."""

_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxstring, _REPR.maxother, _REPR.maxlong = 3, 40, 40, 40


def short_repr(value: Any) -> str:
    """A bounded ``repr`` (safe on deeply nested or huge values)."""
    return _REPR.repr(value)


def state_int(value: Any, field: str, minimum: int = 0) -> int:
    """``value`` as an ``int`` in ``[minimum, MAX_STATE_INT)``.

    Raises:
        StateError: not an integer (``bool``, ``float`` and ``str`` are not), or out of range.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise StateError(f"state {field} = {short_repr(value)} must be an integer >= {minimum}")
    number = int(value)
    if number < minimum:
        raise StateError(f"state {field} = {number} must be an integer >= {minimum}")
    if number >= MAX_STATE_INT:
        raise StateError(
            f"state {field} = {number} is too large (positions stay below 2**62 so that int64 "
            "indices can be computed from them); the state is corrupt"
        )
    return number


def state_mapping(
    value: Any, field: str, keys: Sequence[str], optional: Sequence[str] = ()
) -> Mapping[str, Any]:
    """``value`` checked to be a mapping with all of ``keys``, some of ``optional``, no other.

    Raises:
        StateError: not a mapping, or keys missing or unknown.
    """
    expected = ", ".join(repr(k) for k in [*keys, *optional])
    if not isinstance(value, Mapping):
        raise StateError(
            f"state {field} = {short_repr(value)} must be a mapping with keys {expected}"
        )
    missing = [repr(k) for k in keys if k not in value]
    unknown = sorted(repr(k) for k in value if k not in keys and k not in optional)
    if missing or unknown:
        problems = [f"missing {', '.join(missing)}"] if missing else []
        problems += [f"unknown key(s) {', '.join(unknown)}"] if unknown else []
        raise StateError(f"state {field}: {'; '.join(problems)} (expected keys {expected})")
    return value


def state_ints(value: Any, field: str) -> tuple[int, ...]:
    """A list of integers (see :func:`state_int`)."""
    if not isinstance(value, (list, tuple)):
        raise StateError(f"state {field} = {short_repr(value)} must be a list of integers")
    return tuple(state_int(v, f"{field}[{i}]") for i, v in enumerate(value))
