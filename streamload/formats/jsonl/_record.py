"""The ``X.tok.json`` tokenization record of a ``format = "jsonl"`` source, read strictly.

A record is written by :func:`streamload.formats.jsonl.jsonl.prepare_jsonl`; a reader trusts none
of it: every field is type- and range-checked (:mod:`streamload.formats._fields`), the index
it names must be a file beside the JSONL, and :func:`check_against_tokenizer` compares it with
the tokenizer it names (vocabulary size, BOS/EOS below it), because the token dtype is chosen
from ``vocab_size``: a record saying 200 for a 300-id tokenizer would make it uint8 and ids
>= 256 wrap silently.

Example: ``{"tokenizer": "/t/tok.json", "tokenizer_sha256": "ab…", "bos_token_id": null,
"eos_token_id": 0, "text_field": "text", "vocab_size": 300, "jsonl_size": 1234,
"jsonl_mtime_ns": 17…, "jsonl_sha256": "cd…", "index": "a.idx", "lengths": [5, 0, 12]}``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from streamload.errors import ConfigError, FormatError
from streamload.formats._fields import json_int, json_int_list, json_object, json_str

__all__ = ["TokenizationRecord", "check_against_tokenizer", "parse_record", "tokenizer_error"]


@dataclass(frozen=True)
class TokenizationRecord:
    """A checked record (fields as :func:`~streamload.formats.jsonl.jsonl.prepare_jsonl` writes)."""

    path: str
    tokenizer: str
    tokenizer_sha256: str
    bos_token_id: int | None
    eos_token_id: int | None
    text_field: str
    vocab_size: int
    jsonl_size: int
    jsonl_mtime_ns: int
    jsonl_sha256: str
    index: str
    lengths: np.ndarray

    @property
    def index_path(self) -> str:
        """The raw index, beside the record."""
        return str(Path(self.path).parent / self.index)


def _index_name(record: dict[str, Any], where: str) -> str:
    index = json_str(record, "index", where)
    if Path(index).name != index or index in (".", ".."):
        raise FormatError(
            f"{where}: field 'index' is {index!r}; expected the name of a file beside the record"
        )
    if not (Path(where).parent / index).is_file():
        raise FormatError(
            f"{where}: field 'index' names {index}, which is not a file beside the record; "
            "prepare the file again"
        )
    return index


def parse_record(data: bytes, where: str) -> TokenizationRecord:
    """Check and type the fields of a record's bytes read from ``where``.

    Raises:
        FormatError: not UTF-8 JSON (truncated, malformed), not an object, a missing field or
            one of the wrong type or range, naming the record and the field.
    """
    record = json_object(data, where)
    ids = {
        key: json_int(record, key, where, optional=True) for key in ("bos_token_id", "eos_token_id")
    }
    return TokenizationRecord(
        path=where,
        tokenizer=json_str(record, "tokenizer", where),
        tokenizer_sha256=json_str(record, "tokenizer_sha256", where),
        bos_token_id=ids["bos_token_id"],
        eos_token_id=ids["eos_token_id"],
        text_field=json_str(record, "text_field", where),
        vocab_size=int(json_int(record, "vocab_size", where, minimum=1) or 0),
        jsonl_size=int(json_int(record, "jsonl_size", where) or 0),
        jsonl_mtime_ns=int(json_int(record, "jsonl_mtime_ns", where) or 0),
        jsonl_sha256=json_str(record, "jsonl_sha256", where),
        index=_index_name(record, where),
        lengths=json_int_list(record, "lengths", where),
    )


def check_against_tokenizer(record: TokenizationRecord, vocab_size: int) -> None:
    """Check the record agrees with its tokenizer of ``vocab_size`` ids.

    Raises:
        FormatError: another vocabulary size, or BOS/EOS not below it.
    """
    if record.vocab_size != vocab_size:
        raise FormatError(
            f"{record.path}: vocab_size = {record.vocab_size} but the tokenizer it names "
            f"({record.tokenizer}) has {vocab_size} ids; the record was edited or damaged: "
            "prepare the file again"
        )
    for key in ("bos_token_id", "eos_token_id"):
        value = getattr(record, key)
        if value is not None and value >= vocab_size:
            raise FormatError(
                f"{record.path}: {key} = {value} is not below the tokenizer's vocab_size = "
                f"{vocab_size}; prepare the file again"
            )


def tokenizer_error(record: TokenizationRecord, exc: OSError | ConfigError) -> FormatError:
    """The error for a record whose tokenizer cannot be read."""
    return FormatError(
        f"{record.path}: the tokenizer it names ({record.tokenizer}) cannot be read ({exc}); "
        "restore it or prepare the file again"
    )
