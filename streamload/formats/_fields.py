"""Strict parsing of the numbers and records formats read from headers and companion files.

Every value a format takes from a file goes through one of these, so a malformed file is a
:class:`~streamload.errors.FormatError` that names the file, the field, the value and what was
expected, never a ``ValueError``/``KeyError`` traceback and never a value silently read wrong.
Written here rather than with ``int()``/``json.loads`` directly because both accept more than
the formats' writers produce: ``int()`` takes any Unicode digit (``int("١٥") == 15``),
underscores, signs and spaces; ``json.loads`` takes ``NaN``, ``Infinity`` and floats where a
count belongs.

Example:
    ``ascii_int("15", "x.ds.metadata", "line 2 (token count)")`` is 15;
    ``ascii_int("١٥", ...)`` raises ``x.ds.metadata: line 2 (token count) is '١٥'; expected a
    non-negative integer in ASCII digits``.
"""

from __future__ import annotations

import json
import re
from typing import Any

import numpy as np

from streamload.errors import FormatError

__all__ = [
    "INT64_MAX",
    "ascii_int",
    "decode_text",
    "json_int",
    "json_int_list",
    "json_object",
    "json_str",
]

INT64_MAX = (1 << 63) - 1
_ASCII_DIGITS = re.compile(rb"[0-9]+")


def ascii_int(text: str | bytes, where: str, field: str, *, maximum: int = INT64_MAX) -> int:
    """``text`` as a non-negative integer written in ASCII digits only, at most ``maximum``.

    Raises:
        FormatError: any other character (Unicode digits, sign, space, underscore), no digit,
            or a value above ``maximum``.
    """
    raw = text.encode("utf-8", "replace") if isinstance(text, str) else text
    shown = raw.decode("utf-8", "replace")[:40]
    if _ASCII_DIGITS.fullmatch(raw) is None or len(raw) > len(str(maximum)):
        raise FormatError(
            f"{where}: {field} is {shown!r}; expected a non-negative integer in ASCII digits"
            + (f" (at most {maximum})" if len(raw) > len(str(maximum)) else "")
        )
    value = int(raw)
    if value > maximum:
        raise FormatError(f"{where}: {field} is {value}; expected at most {maximum}")
    return value


def decode_text(data: bytes, where: str) -> str:
    """``data`` decoded as UTF-8, or a ``FormatError`` naming the first bad byte."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FormatError(
            f"{where}: not UTF-8 text (byte {data[exc.start : exc.start + 1]!r} at offset "
            f"{exc.start})"
        ) from None


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")


def json_object(data: bytes, where: str) -> dict[str, Any]:
    """``data`` parsed as a UTF-8 JSON object (``NaN``/``Infinity`` refused).

    Raises:
        FormatError: not UTF-8, not JSON (truncated or malformed), or not an object.
    """
    text = decode_text(data, where)
    try:
        value = json.loads(text, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as exc:
        reason = "empty" if not text.strip() else f"not valid JSON ({exc})"
        raise FormatError(f"{where}: {reason}; the file is truncated or damaged") from None
    if not isinstance(value, dict):
        raise FormatError(
            f"{where}: holds a JSON {type(value).__name__}; expected an object of fields"
        )
    return value


def _field(record: dict[str, Any], key: str, where: str) -> Any:
    if key not in record:
        raise FormatError(f"{where}: field {key!r} is missing; the file is damaged")
    return record[key]


def json_int(
    record: dict[str, Any],
    key: str,
    where: str,
    *,
    minimum: int = 0,
    maximum: int = INT64_MAX,
    optional: bool = False,
) -> int | None:
    """``record[key]`` as an integer in ``[minimum, maximum]`` (``None`` allowed if
    ``optional``); booleans and floats are refused."""
    value = _field(record, key, where)
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
        none = " or null" if optional else ""
        raise FormatError(
            f"{where}: field {key!r} is {value!r}; expected an integer in "
            f"[{minimum}, {maximum}]{none}"
        )
    return value


def json_str(record: dict[str, Any], key: str, where: str) -> str:
    """``record[key]`` as a non-empty string."""
    value = _field(record, key, where)
    if not isinstance(value, str) or not value:
        raise FormatError(f"{where}: field {key!r} is {value!r}; expected a non-empty string")
    return value


def json_int_list(record: dict[str, Any], key: str, where: str) -> np.ndarray:
    """``record[key]`` as int64: a list of integers in ``[0, 2**63)``."""
    value = _field(record, key, where)
    if not isinstance(value, list):
        raise FormatError(
            f"{where}: field {key!r} is a {type(value).__name__}; expected a list of integers"
        )
    # one cheap pass (type() is exact: bools and floats fail it); details only on failure
    if all(type(item) is int for item in value):
        if not value:
            return np.zeros(0, dtype=np.int64)
        array = np.array(value)  # int64 when every value fits, else uint64 or object
        if array.dtype == np.int64 and int(array.min()) >= 0:
            return array
    for i, item in enumerate(value):
        if type(item) is not int or not 0 <= item <= INT64_MAX:
            raise FormatError(
                f"{where}: field {key!r}[{i}] is {item!r}; expected an integer in [0, {INT64_MAX}]"
            )
    raise FormatError(f"{where}: field {key!r} holds values outside int64")  # pragma: no cover
