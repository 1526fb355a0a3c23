"""Rows of an MDS text shard: the columns a tokenizer reads from ``shard.NNNNN.mds[.zstd|.gz]``.

Mosaic Streaming's text datasets (LLM Foundry's ``convert_dataset_hf`` without
``--concat_tokens``) keep each document's text in a ``str`` column. One shard file is read
whole, as the token reader does: found in the ``index.json`` of its folder
(:func:`~streamload.formats.mds.mds.shard_entry`), decompressed when compressed
(:mod:`streamload.formats.mds._read`), its samples located by their offset table and
column sizes (:mod:`streamload.formats.mds._decode`). Each sample's asked-for columns are
decoded as Streaming decodes them:

* ``str`` → ``str`` (UTF-8); ``json`` → the parsed value; ``str_int`` → ``int``;
* ``int``, ``int8`` … ``int64``, ``uint8`` … ``uint64`` (little-endian scalars) → ``int``.

Any other encoding asked for is refused, naming the column and its encoding: ``pkl`` (never
unpickled: unpickling runs code), ``bytes``, ``ndarray…``, floats and images.

Example: a shard with columns ``id: str`` and ``text: str`` gives ``{"text": "The quick
brown fox", "id": "t0"}`` for ``iter_text_rows(url, ["text", "id"])``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import fsspec
import numpy as np

from streamload.errors import FormatError
from streamload.formats._mds_index import MdsIndex, MdsShardEntry, parse_mds_index
from streamload.formats.base import ListedFile
from streamload.formats.index_json import load_index
from streamload.formats.mds._decode import column_spans, sample_offsets
from streamload.formats.mds._read import decompress, read_listed
from streamload.formats.mds.mds import shard_entry
from streamload.formats.text_columns import requested_columns

__all__ = ["TEXT_ENCODINGS", "iter_text_rows"]

_SCALARS = {"int": (8, True)} | {
    f"{sign}int{bits}": (bits // 8, sign == "") for sign in ("", "u") for bits in (8, 16, 32, 64)
}
"""Integer scalar encodings: (bytes, signed)."""
TEXT_ENCODINGS = ("json", "str", "str_int", *sorted(_SCALARS))
"""The MDS column encodings read (everything else is refused when asked for)."""

Decoder = Callable[[bytes], Any]


def iter_text_rows(
    url: str, columns: Sequence[str], storage_options: Mapping[str, Any] | None = None
) -> Iterator[dict[str, Any]]:
    """Each sample of one MDS shard file, as a dict of ``columns``, in shard order.

    Args:
        url: The shard (a local path or an fsspec URL); ``index.json`` must be beside it.
        columns: Columns to read (a name given twice is read once).
        storage_options: fsspec options of the file's file system (credentials, endpoint).

    Yields:
        ``{column: value}`` per sample (module docstring: the values of each encoding).

    Raises:
        MissingColumnError: (a :class:`FormatError`) a column the shard does not have, naming
            the columns it has.
        FormatError: a column of an encoding not read; no index, or an index that does not
            list the file with its size; a damaged or truncated shard; a value its encoding
            cannot hold (a ``str`` that is not UTF-8, a ``json`` that does not parse).
    """
    fs, _ = fsspec.core.url_to_fs(url, **dict(storage_options or {}))
    index: MdsIndex = load_index(fs, url, "MDS", parse_mds_index)
    size = int(fs.size(url))
    entry, compression = shard_entry(index, ListedFile(url, url, size))
    names = requested_columns(url, columns, entry.names)
    decoders = {name: _decoder(url, entry, name) for name in names}
    data = read_listed(fs, url, size)
    if compression is not None:
        data = decompress(data, compression, entry.raw_bytes, url)
    return _rows(url, data, entry, decoders)


def _rows(
    url: str, data: Any, entry: MdsShardEntry, decoders: dict[str, Decoder]
) -> Iterator[dict[str, Any]]:
    buf = np.frombuffer(data, dtype=np.uint8)
    offsets = sample_offsets(buf, entry, url)
    spans = []
    for name in decoders:
        starts, sizes = column_spans(buf, offsets, entry, entry.names.index(name), url)
        spans.append((name, starts.tolist(), (starts + sizes).tolist()))
    for row in range(entry.samples):
        sample = {}
        for name, starts, ends in spans:
            raw = bytes(data[starts[row] : ends[row]])
            try:
                sample[name] = decoders[name](raw)
            except ValueError as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
                encoding = entry.encodings[entry.names.index(name)]
                raise FormatError(
                    f"{url}: row {row + 1} (sample {row}) has a column {name!r} that its "
                    f"encoding {encoding!r} cannot decode ({exc}); the shard is damaged"
                ) from None
        yield sample


def _decoder(url: str, entry: MdsShardEntry, name: str) -> Decoder:
    """How column ``name`` of ``entry`` is decoded (module docstring).

    Raises:
        FormatError: an encoding not read, or a scalar whose fixed size in the index is not
            its width.
    """
    position = entry.names.index(name)
    encoding = entry.encodings[position]
    if encoding == "str":
        return _utf8
    if encoding == "json":
        return json.loads
    if encoding == "str_int":
        return _str_int
    if encoding in _SCALARS:
        width, signed = _SCALARS[encoding]
        if entry.sizes[position] != width:
            raise FormatError(
                f"{url}: column {name!r} is encoded {encoding!r} ({width} bytes) but "
                f"index.json gives it size {entry.sizes[position]}; the index is damaged"
            )
        return lambda raw: int.from_bytes(raw, "little", signed=signed)
    pickled = " (pkl is never read: unpickling runs code)" if encoding == "pkl" else ""
    raise FormatError(
        f"{url}: column {name!r} is encoded {encoding!r}{pickled}; text is read from columns "
        f"encoded {', '.join(TEXT_ENCODINGS)}"
    )


def _utf8(raw: bytes) -> str:
    return raw.decode("utf-8")


def _str_int(raw: bytes) -> int:
    """Streaming's ``str_int``: ``str(int)`` in ASCII (``int()`` alone would also take other
    scripts' digits, spaces and underscores)."""
    text = raw.decode("ascii")
    if not text.lstrip("-").isdigit() or text.startswith("--"):
        raise ValueError(f"{text!r} is not a decimal integer")
    return int(text)
