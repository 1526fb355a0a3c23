"""Validation helpers shared by every config dataclass (the data config and ``tokenize``'s):
unknown keys, integers with a minimum, enum values, each failing with a :class:`ConfigError`
that names the field, the value and what is allowed."""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from typing import Any

from streamload.errors import ConfigError

__all__ = ["check_int", "check_keys", "to_enum"]


def to_enum(kind: type[enum.Enum], value: Any, field_name: str) -> Any:
    try:
        return kind(value)
    except ValueError:
        allowed = ", ".join(repr(m.value) for m in kind)
        raise ConfigError(f"{field_name} = {value!r} is not one of {allowed}") from None


def check_int(value: Any, field_name: str, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{field_name} = {value!r} must be an integer")
    if value < minimum:
        raise ConfigError(f"{field_name} = {value} must be >= {minimum}")


def check_keys(data: Mapping[str, Any], kind: type, where: str) -> None:
    allowed = {f.name for f in dataclasses.fields(kind)}
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise ConfigError(
            f"{where}: unknown key(s) {', '.join(unknown)}; allowed: {', '.join(sorted(allowed))}"
        )
