"""A saved fingerprint against the stream's: equal field by field and type by type, or a
:class:`~streamload.errors.StateError` naming every field that differs."""

from __future__ import annotations

import numbers
from collections.abc import Mapping
from typing import Any

from streamload.errors import StateError
from streamload.streams.cursor import short_repr

__all__ = ["MAX_FINGERPRINT_DEPTH", "check_fingerprint"]

MAX_FINGERPRINT_DEPTH = 32
"""Nesting allowed inside a fingerprint (a real one is 3 deep)."""


def check_fingerprint(saved: Any, current: Mapping[str, Any], ignore: bool) -> bool:
    """Whether ``saved`` equals ``current``; raise naming every field that differs, unless
    ``ignore``. A malformed fingerprint is refused even then.

    Raises:
        StateError: not a mapping of plain values, or saved for other data or config.
    """
    if not isinstance(saved, Mapping):
        raise StateError(
            f"state fingerprint = {short_repr(saved)} must be a mapping of the stream's "
            "order-deciding settings"
        )
    _check_plain(saved, "fingerprint", 0)
    keys = sorted(set(saved) | set(current), key=repr)
    diffs = [k for k in keys if not (k in saved and k in current and _same(saved[k], current[k]))]
    if not diffs:
        return True
    if ignore:
        return False
    parts = []
    for key in diffs:
        old, new = saved.get(key), current.get(key)
        if key == "data" and isinstance(old, Mapping) and isinstance(new, Mapping):
            changed = sorted(k for k in set(old) | set(new) if not _same(old.get(k), new.get(k)))
            parts.append(
                f"data of source(s) {', '.join(map(str, changed))} (files, sizes or dtypes)"
            )
        elif isinstance(old, Mapping) and isinstance(new, Mapping):  # name the inner fields
            for inner in sorted(set(old) | set(new), key=repr):
                a, b = old.get(inner), new.get(inner)
                if not (inner in old and inner in new and _same(a, b)):
                    parts.append(f"{key}.{inner}: saved {short_repr(a)}, now {short_repr(b)}")
        else:
            parts.append(f"{key}: saved {short_repr(old)}, now {short_repr(new)}")
    why = "".join(_WHY[key] for key in ("mixture_rule", "vsl") if key in diffs and key in _WHY)
    if "packing" in diffs:
        why += _packing_hint(saved.get("packing"), current.get("packing"))
    raise StateError(
        f"state fingerprint differs: the state was saved for a different stream — "
        f"{'; '.join(parts)}.{why} Resuming would not continue on the next sample; pass "
        "ignore_fingerprint_mismatch=True if you mean it"
    )


_WHY = {
    "mixture_rule": (
        " (a mixture's ties are decided by exact integers since issue 36: a state saved "
        "under the float rule before has no mixture_rule; with the override the run goes on "
        "from the saved per-source counts under the exact rule)"
    ),
    "vsl": (
        " (vsl rounds its per-length and per-source counts by an exact rule since issue 36: "
        "a state saved before has no vsl.rule)"
    ),
}
"""Why a field that a streamload release added to the fingerprint differs."""


def _packing_hint(old: Any, new: Any) -> str:
    """How a state packed under the other packing rule resumes (packed mode packs the whole
    epoch at once since issue 34; before, groups of 4,096 items)."""
    if not isinstance(old, Mapping) or not isinstance(new, Mapping):
        return ""
    group = old.get("group_size")
    if group == new.get("group_size"):
        return ""
    if group is None:
        return " (the state was packed over the whole epoch: leave [sampling] group_size unset)"
    return (
        f" (the state was packed within groups of {short_repr(group)} items, the default "
        f"before issue 34: set [sampling] group_size = {short_repr(group)} to resume it)"
    )


def _check_plain(value: Any, field: str, depth: int) -> None:
    if depth > MAX_FINGERPRINT_DEPTH:
        raise StateError(f"state {field} is nested deeper than {MAX_FINGERPRINT_DEPTH} levels")
    if value is None or isinstance(value, (str, bool, numbers.Real)):
        return
    if isinstance(value, Mapping):
        for key, item in value.items():
            _check_plain(item, f"{field}.{key}", depth + 1)
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            _check_plain(item, f"{field}[{index}]", depth + 1)
    else:
        raise StateError(
            f"state {field} holds a {type(value).__name__}; a fingerprint holds only plain "
            "values (strings, numbers, booleans, None, lists, mappings)"
        )


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, numbers.Integral):
        return "int"
    if isinstance(value, numbers.Real):
        return "float"
    return type(value).__name__


def _same(a: Any, b: Any) -> bool:
    """Equal values of equal kinds, all the way down (lists equal tuples)."""
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return set(a) == set(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return _kind(a) == _kind(b) and a == b
