"""The one validation layer for user input: every config dataclass (the data config, the
loader options and ``tokenize``'s) and every parsed config file goes through these checks.

Each check fails with a :class:`ConfigError` naming the field, the value and what is allowed:
unknown keys (with the closest valid one), missing keys, keys that are not strings, integers
in range (never beyond int64, which every array and state holds them in), finite numbers,
booleans, enum values, weights whose sum stays finite, paths without NUL characters, and the
plain-data shape of a parsed file (strings, numbers, booleans, lists and tables only; integers
short enough to print).
"""

from __future__ import annotations

import dataclasses
import enum
import math
import numbers
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from streamload.errors import ConfigError

__all__ = [
    "INT64_MAX",
    "MAX_CONFIG_BYTES",
    "MAX_DEPTH",
    "MAX_VALUES",
    "WEIGHT_SUM_LIMIT",
    "Hints",
    "check_bool",
    "check_count",
    "check_int",
    "check_keys",
    "check_number",
    "check_path",
    "check_plain",
    "check_weight_sum",
    "close_match",
    "show",
    "table_fields",
    "to_enum",
    "unknown_keys",
]

Hints = Callable[[], Mapping[str, str]]
"""What unknown keys may have been meant as (``{key: "it belongs in [sampling]"}``)."""

INT64_MAX = 2**63 - 1
"""Largest integer any config field takes: counts, sizes and seeds become int64 arrays and
state entries."""
MAX_CONFIG_BYTES = 16 << 20
"""A config file larger than this is refused before it is read (likely a data file)."""
MAX_DEPTH = 32
"""Tables and lists nest at most this deep in a config file (a config needs 4)."""
MAX_VALUES = 100_000
"""Values (counting every reference of a YAML alias) a config file may hold."""
WEIGHT_SUM_LIMIT = 1e308
"""The weights of one table must sum below this: normalizing divides by the float sum,
which overflows to ``inf`` near 1.8e308 (only the ratios of weights matter)."""


def show(value: Any, limit: int = 200) -> str:
    """``repr(value)`` for a message: shortened, and safe for an int of any size."""
    try:
        text = repr(value)
    except ValueError:  # an int beyond Python's limit of digits for str(), maybe nested
        if isinstance(value, int):
            return f"<an integer of {value.bit_length()} bits>"
        return f"<a {type(value).__name__} holding an integer too long to print>"
    return text if len(text) <= limit else f"{text[: limit - 3]}..."


def to_enum(kind: type[enum.Enum], value: Any, field_name: str) -> Any:
    """``kind(value)``, or a ConfigError listing the allowed values."""
    try:
        return kind(value)
    except (ValueError, TypeError):
        allowed = ", ".join(repr(m.value) for m in kind)
        raise ConfigError(f"{field_name} = {show(value)} is not one of {allowed}") from None


def check_int(value: Any, field_name: str, minimum: int, maximum: int = INT64_MAX) -> None:
    """An ``int`` (never a bool or a float, even ``4.0``) in ``[minimum, maximum]``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{field_name} = {show(value)} must be an integer")
    if value < minimum:
        raise ConfigError(f"{field_name} = {show(value)} must be >= {minimum}")
    if value > maximum:
        raise ConfigError(f"{field_name} = {show(value)} must be <= {maximum}")


def check_count(value: Any, field_name: str, minimum: int, maximum: int = INT64_MAX) -> int:
    """:func:`check_int` that also takes a NumPy (any ``numbers.Integral``) integer, for
    arguments given in code rather than parsed from a file; returns it as an ``int``."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        value = int(value)
    check_int(value, field_name, minimum, maximum)
    return int(value)


def check_number(
    value: Any,
    field_name: str,
    minimum: float | None = None,
    *,
    exclusive: bool = False,
    maximum: float | None = None,
) -> None:
    """A finite ``int`` or ``float`` (never a bool, NaN or infinity) within the bounds.

    Args:
        value: The value.
        field_name: Its name in messages.
        minimum: Lower bound, if any.
        exclusive: The value must be above ``minimum``, not equal to it.
        maximum: Upper bound (inclusive), if any.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{field_name} = {show(value)} must be a number")
    rules = []
    if minimum is not None:
        rules.append(f"{'>' if exclusive else '>='} {minimum}")
    if maximum is not None:
        rules.append(f"<= {maximum}")
    below = minimum is not None and (value <= minimum if exclusive else value < minimum)
    above = maximum is not None and value > maximum
    if not _is_finite(value) or below or above:
        rule = f"finite and {' and '.join(rules)}" if rules else "a finite number"
        raise ConfigError(f"{field_name} = {show(value)} must be {rule}")


def _is_finite(value: int | float) -> bool:
    try:
        return math.isfinite(value)
    except OverflowError:  # an int beyond float range: every weight and number becomes a float
        return False


def check_bool(value: Any, field_name: str) -> None:
    """``True`` or ``False`` (never 0/1 or the strings ``"true"``/``"false"``)."""
    if not isinstance(value, bool):
        raise ConfigError(f"{field_name} = {show(value)} must be true/false")


def check_path(value: Any, field_name: str) -> None:
    """A non-empty string without NUL characters (no file system accepts them)."""
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{field_name} = {show(value)} must be a non-empty path")
    if "\x00" in value:
        raise ConfigError(f"{field_name} = {show(value)} holds a NUL character")


def check_weight_sum(weights: Sequence[float], where: str) -> None:
    """The sum of (already checked, finite, non-negative) weights stays below the limit."""
    total = sum(float(w) for w in weights)  # as normalizing sums them: may overflow to inf
    if not total < WEIGHT_SUM_LIMIT:
        listed = ", ".join(f"{float(w):g}" for w in weights)
        raise ConfigError(
            f"{where} {listed} sum to {total:.2g}; the sum must be below {WEIGHT_SUM_LIMIT:g} "
            "(only their ratios matter: scale them down)"
        )


def check_keys(data: Mapping[Any, Any], kind: type, where: str, hints: Hints | None = None) -> None:
    """Every key is a string naming a field of the dataclass ``kind``.

    Every unknown key is named at once, each with the closest field (``difflib``) and
    ``hints()[key]`` when given (a key that belongs in another table, or a loader argument;
    called on errors only).
    """
    problem = unknown_keys(data, kind, where, hints)
    if problem:
        raise ConfigError(problem)


def unknown_keys(
    data: Mapping[Any, Any], kind: type, where: str, hints: Hints | None = None
) -> str | None:
    """What :func:`check_keys` would say of a table's unknown keys (``None``: none), so a
    caller can report those of several tables in one message.

    Raises:
        ConfigError: a key is not a string.
    """
    for key in data:
        if not isinstance(key, str):
            raise ConfigError(f"{where}: key {show(key)} ({type(key).__name__}) must be a string")
    allowed = sorted(f.name for f in dataclasses.fields(kind))
    unknown = sorted(set(data) - set(allowed))
    if not unknown:
        return None
    known = hints() if hints is not None else {}
    named = ", ".join(_explain(key, allowed, known) for key in unknown)
    return f"{where}: unknown key(s) {named}; allowed: {', '.join(allowed)}"


def close_match(word: str, choices: Sequence[str]) -> str | None:
    """The choice ``word`` most likely misspells (``difflib``, similarity >= 0.7), if any;
    of equally close ones the alphabetically first (``batch_size``: ``global_batch_size``,
    not ``rampup_batch_size``)."""
    import difflib  # only on an error: not at `import streamload`

    close = difflib.get_close_matches(word, list(choices), n=len(choices) or 1, cutoff=0.7)
    if not close:
        return None
    best = difflib.SequenceMatcher(None, close[0], word).ratio()
    return min(c for c in close if difflib.SequenceMatcher(None, c, word).ratio() == best)


def _explain(key: str, allowed: list[str], hints: Mapping[str, str]) -> str:
    close = close_match(key, allowed)
    notes = [f"did you mean {close}?"] if close else []
    if key in hints:
        notes.append(hints[key])
    return f"{key} ({' '.join(notes)})" if notes else key


def table_fields(data: Any, kind: type, where: str, hints: Hints | None = None) -> dict[str, Any]:
    """The keyword arguments of ``kind`` from a table: a mapping with known string keys and
    every required field present (so the dataclass never raises ``TypeError``)."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where} must be a table, got {show(data)}")
    check_keys(data, kind, where, hints)
    required = [
        f.name
        for f in dataclasses.fields(kind)
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    ]
    missing = [name for name in required if name not in data]
    if missing:
        verb = "is" if len(missing) == 1 else "are"
        raise ConfigError(f"{where}: {', '.join(missing)} {verb} required")
    return dict(data)


_PLAIN = (str, int, float, bool, type(None))


def check_plain(data: Any, where: str = "") -> None:
    """A parsed config file holds only strings, numbers, booleans, null, lists and tables
    with string keys, at most :data:`MAX_DEPTH` deep and :data:`MAX_VALUES` values in all
    (a YAML alias counts each time it is used: alias "bombs" and cycles are refused).

    Args:
        data: The parsed document.
        where: Prefix of the path in messages (e.g. ``"file.yaml: "``).
    """
    count = 0
    todo: list[tuple[Any, str, int]] = [(data, "", 0)]
    while todo:
        value, path, depth = todo.pop()
        count += 1
        if count > MAX_VALUES:
            raise ConfigError(f"{where}the config holds more than {MAX_VALUES} values")
        if depth > MAX_DEPTH:
            raise ConfigError(f"{where}{path} is nested deeper than {MAX_DEPTH} levels")
        if isinstance(value, Mapping):
            for key, item in value.items():
                if not isinstance(key, str):
                    at = f"{where}{path}: " if path else where
                    raise ConfigError(
                        f"{at}key {show(key)} ({type(key).__name__}) must be a string"
                    )
                todo.append((item, f"{path}.{key}" if path else key, depth + 1))
        elif isinstance(value, list):
            todo.extend((item, f"{path}[{i}]", depth + 1) for i, item in enumerate(value))
        elif not isinstance(value, _PLAIN):
            raise ConfigError(
                f"{where}{path or 'config'} = {show(value)} is of type {type(value).__name__}; a "
                "config holds only strings, numbers, booleans, lists and tables"
            )
        elif isinstance(value, int) and not _printable(value):
            raise ConfigError(
                f"{where}{path or 'config'} = {show(value)} has more digits than Python prints "
                f"({sys.get_int_max_str_digits()}); no config field takes such a number"
            )


def _printable(value: int) -> bool:
    """``str(value)`` works: a parser never yields a longer int, but a dict may hold one."""
    if value.bit_length() <= 64:  # every int a field takes; str() fails only far beyond
        return True
    try:
        str(value)
    except ValueError:  # beyond sys.get_int_max_str_digits()
        return False
    return True
