"""Raw JSONL sources (``format = "jsonl"``), tokenized on the fly as Modalities does.

* ``jsonl`` — the format: prepare, describe, read;
* ``index`` — the Modalities raw JSONL index ``X.idx`` (byte range of each line);
* ``_record`` — the ``X.tok.json`` tokenization record.

The package re-exports the names of :mod:`streamload.formats.jsonl.jsonl`: that module was
``streamload.formats.jsonl`` before the formats were grouped by family, and imports of the old
path keep working.
"""

from streamload.formats.jsonl.jsonl import (
    FORMAT,
    JsonlFormat,
    JsonlShard,
    prepare_jsonl,
    record_path,
)

__all__ = [
    "FORMAT",
    "JsonlFormat",
    "JsonlShard",
    "prepare_jsonl",
    "record_path",
]
