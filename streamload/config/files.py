"""Reading a config file: JSON (``.json``), YAML (``.yaml``/``.yml``) or TOML (any other name).

Every failure is a :class:`ConfigError` that names the file: missing, a folder, unreadable,
larger than :data:`~streamload.config.checks.MAX_CONFIG_BYTES`, not UTF-8 (the byte, line and
column), a syntax error (the parser's reason, line and column), a key given twice in one table
(YAML and JSON would keep the last silently; TOML refuses it itself), nesting too deep, or a
value no config field takes (a date, bytes, a set: :func:`~streamload.config.checks.check_plain`).
"""

from __future__ import annotations

import functools
import json
import os
import re
import stat
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from streamload.config.checks import MAX_CONFIG_BYTES, check_plain
from streamload.errors import ConfigError, add_note

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

__all__ = ["config_kind", "read_config_file"]

_BOM = b"\xef\xbb\xbf"
_TOML_AT = re.compile(r"^(?P<msg>.*) \(at line (?P<line>\d+), column (?P<col>\d+)\)$", re.S)


def config_kind(path: Path) -> str:
    """``"JSON"``, ``"YAML"`` or ``"TOML"``: the parser a config file's suffix selects."""
    if path.suffix in (".yaml", ".yml"):
        return "YAML"
    return "JSON" if path.suffix == ".json" else "TOML"


def read_config_file(path: str | os.PathLike[str]) -> Any:
    """The parsed content of a JSON, YAML or TOML config file (plain data only).

    Raises:
        ConfigError: the file is missing, unreadable, too large, not UTF-8, unparsable, or
            holds a value no config takes.
    """
    file = Path(path)
    text = _read_text(file)
    kind = config_kind(file)
    try:
        data = _parser(kind)(text)
    except RecursionError:
        raise ConfigError(f"{file}: cannot parse config as {kind}: nested too deeply") from None
    except ConfigError as exc:  # a duplicate JSON key
        raise ConfigError(f"{file}: cannot parse config as {kind}: {exc}") from None
    except Exception as exc:  # every parser's own error type, and their ValueErrors
        error = ConfigError(f"{file}: cannot parse config as {kind}{_position(exc, text)}")
        add_note(error, "expected JSON (.json), YAML (.yaml/.yml) or TOML (any other name)")
        raise error from exc
    check_plain(data, f"{file}: ")
    return data


def _read_text(file: Path) -> str:
    try:
        info = file.stat()
        mode, size = info.st_mode, info.st_size
        if stat.S_ISDIR(mode):
            raise ConfigError(f"{file}: a folder, not a config file")
        if not stat.S_ISREG(mode):  # a FIFO or a device would be read without end
            raise ConfigError(f"{file}: not a regular file, so not a config file")
        if size > MAX_CONFIG_BYTES:
            raise ConfigError(
                f"{file}: {size} bytes; a config file holds at most {MAX_CONFIG_BYTES} bytes "
                "(is it a data file?)"
            )
        raw = file.read_bytes()
    except FileNotFoundError:
        raise ConfigError(f"{file}: config file not found") from None
    except OSError as exc:
        raise ConfigError(f"{file}: cannot read config: {exc.strerror or exc}") from None
    except ValueError as exc:  # a NUL character in the path
        raise ConfigError(f"{str(file)!r}: not a valid file path ({exc})") from None
    if raw.startswith(_BOM):  # editors on Windows write one; every parser here refuses it
        raw = raw[len(_BOM) :]
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        column = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
        raise ConfigError(
            f"{file}: config is not UTF-8 text (byte 0x{raw[exc.start]:02x} at line {line}, "
            f"column {column}); save it as UTF-8"
        ) from None


def _position(exc: Exception, text: str) -> str:
    """`` at line L, column C: reason`` from any of the three parsers' errors."""
    mark = getattr(exc, "problem_mark", None)  # yaml.MarkedYAMLError
    if mark is not None:
        reason = getattr(exc, "problem", None) or str(exc)
        context = getattr(exc, "context", None)
        reason = f"{reason} ({context})" if context else reason
        return f" at line {mark.line + 1}, column {mark.column + 1}: {reason}"
    if isinstance(getattr(exc, "position", None), int):  # yaml.reader.ReaderError
        pos = exc.position  # type: ignore[attr-defined]
        line, column = text.count("\n", 0, pos) + 1, pos - (text.rfind("\n", 0, pos) + 1) + 1
        return f" at line {line}, column {column}: {getattr(exc, 'reason', exc)}"
    if isinstance(exc, json.JSONDecodeError):
        return f" at line {exc.lineno}, column {exc.colno}: {exc.msg}"
    found = _TOML_AT.match(str(exc))  # tomllib: "Invalid value (at line 2, column 8)"
    if found:
        return f" at line {found['line']}, column {found['col']}: {found['msg']}"
    return f": {exc}"


@functools.cache
def _parser(kind: str) -> Callable[[str], Any]:
    if kind == "JSON":
        return functools.partial(json.loads, object_pairs_hook=_unique_pairs)
    if kind == "TOML":
        return tomllib.loads
    import yaml  # not at `import streamload`

    class UniqueKeyLoader(yaml.SafeLoader):
        """``yaml.SafeLoader`` that refuses a key given twice in one mapping."""

        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            seen: set[Any] = set()
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue  # `<<: *base` then overriding a merged key is the idiom
                key = self.construct_object(key_node, deep=True)
                try:
                    duplicate = key in seen
                except TypeError:
                    continue  # unhashable: the base class reports it
                if duplicate:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"key {key!r} appears twice", key_node.start_mark
                    )
                seen.add(key)
            return super().construct_mapping(node, deep)

    return functools.partial(yaml.load, Loader=UniqueKeyLoader)


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ConfigError(f"key {key!r} appears twice in one object")
        out[key] = value
    return out
