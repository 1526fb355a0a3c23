"""Arrow IPC token datasets (``format = "arrow"``): ``datasets.save_to_disk`` folders and
plain Arrow IPC files.

A ``save_to_disk`` folder holds ``data-00000-of-0000N.arrow`` files (Arrow IPC *streams*, as
``datasets`` writes them) beside ``dataset_info.json`` and ``state.json``; a folder listing
takes the ``.arrow`` files in name order, which is the dataset's row order. Each file is one
shard. One row is one document; its tokens are a ``list<int*>`` or ``large_list<int*>``
column, ``input_ids`` unless the source names another (``column = "tokens"``). The list
offsets are the document index, the dtype is the list's value type (int8..int64,
uint8..uint64).

Reading: the file is memory-mapped and every record batch's token values are a numpy view
of the map (no copy, no decode). A file of one record batch is one contiguous array, read
like a NumPy shard (windows indexed straight out of the map); ``datasets`` writes a batch per
1,000 rows, and then a window inside a batch is a view and a window across two batches a
small copy (:mod:`streamload.formats.arrow._pieces`). A remote file is copied whole into the
disk cache once (:func:`~streamload.formats.base.check_size_unchanged`) and mapped.

Sniffed by content: the ``ARROW1`` magic of the IPC file format, or the continuation marker
``0xFFFFFFFF`` and an 8-byte-aligned metadata length that start every IPC stream message.

Refused, naming file and column: a missing column (the columns that exist are listed), a
non-list or non-integer column, null rows or null tokens, a stream without its
end-of-stream marker (truncated) or with bytes after it, and any file pyarrow cannot parse.
"""

from __future__ import annotations

import contextlib
import struct
from collections.abc import Iterator
from functools import partial
from typing import Any

import numpy as np

from streamload.errors import FormatError
from streamload.formats.arrow._metadata import locate_row, metadata_columns, row_metadata
from streamload.formats.arrow._pieces import piece_starts, pieces_bounds, take_tokens
from streamload.formats.arrow.columns import (
    arrow_errors,
    column_name,
    import_pyarrow,
    list_columns,
    token_dtype,
    token_lists,
)
from streamload.formats.arrow.masks import (
    check_row_lengths,
    column_types,
    mask_lists,
    mask_values,
)
from streamload.formats.base import (
    ListedFile,
    ReadOptions,
    ShardInfo,
    check_configured_dtype,
    check_size_unchanged,
    local_path,
)

__all__ = [
    "ARROW_FILE_MAGIC",
    "FORMAT",
    "STREAM_CONTINUATION",
    "ArrowFormat",
    "ArrowShard",
    "ipc_batches",
]

ARROW_FILE_MAGIC = b"ARROW1"
"""First (and last) bytes of an Arrow IPC *file*."""
STREAM_CONTINUATION = b"\xff\xff\xff\xff"
"""First bytes of every message of an Arrow IPC *stream* (format version >= 0.15)."""
STREAM_END = STREAM_CONTINUATION + b"\x00\x00\x00\x00"
"""The end-of-stream marker a closed stream writer appends."""
_MAX_METADATA = 1 << 26
"""Largest plausible metadata length of a stream's first message (a schema)."""


def is_arrow_ipc(head: bytes) -> bool:
    """Whether ``head`` starts an Arrow IPC file or stream."""
    if head.startswith(ARROW_FILE_MAGIC):
        return True
    if len(head) < 8 or not head.startswith(STREAM_CONTINUATION):
        return False
    (length,) = struct.unpack_from("<i", head, 4)
    return 0 < length < _MAX_METADATA and length % 8 == 0


@contextlib.contextmanager
def ipc_batches(fs: Any, path: str, size: int) -> Iterator[tuple[Any, Iterator[Any], str]]:
    """``(schema, record batches, "file" | "stream")`` of an IPC file of ``size`` bytes:
    memory-mapped when local, else read through ``fs``; pyarrow's parse errors inside the
    block become :class:`FormatError`
    (:func:`~streamload.formats.arrow.columns.arrow_errors`), and a stream read to its end
    must end with its end-of-stream marker, at the file's end."""
    pa = import_pyarrow(path)
    local = local_path(path)
    with arrow_errors(path, "Arrow IPC"), contextlib.ExitStack() as stack:
        source = pa.memory_map(local) if local is not None else fs.open(path, "rb")
        stack.callback(source.close)
        kind = "file" if source.read(len(ARROW_FILE_MAGIC)) == ARROW_FILE_MAGIC else "stream"
        source.seek(0)
        if kind == "file":
            reader = pa.ipc.open_file(source)
            batches = (reader.get_batch(i) for i in range(reader.num_record_batches))
            yield reader.schema, batches, kind
        else:
            reader = pa.ipc.open_stream(source)
            yield reader.schema, iter(reader), kind
            _check_stream_end(source, path, size)


def _check_stream_end(source: Any, path: str, size: int) -> None:
    """A stream read to its end must stop at the end-of-stream marker, at the file's end."""
    at = source.tell()
    source.seek(max(at - len(STREAM_END), 0))
    if source.read(len(STREAM_END)) != STREAM_END:
        raise FormatError(
            f"{path}: the Arrow stream has no end-of-stream marker; the file is truncated "
            "(or its writer was not closed)"
        )
    if at != size:
        raise FormatError(
            f"{path}: {size - at} bytes follow the Arrow stream's end-of-stream marker; "
            "expected the file to end there"
        )


def _batch_column(batch: Any, column: str) -> Any:
    return batch.column(batch.schema.get_field_index(column))


class ArrowShard:
    """An opened Arrow IPC shard: the token values of each record batch, views of the map.

    Described with ``meta["mask_of"]`` (:func:`~streamload.formats.loss_mask.mask_shard`),
    the shard reads its ``column`` as the loss mask of the token column ``mask_of``: each
    row's flags are checked against the row's tokens when it opens (offsets only, no
    flag is read), and each record batch's flags become ``uint8`` on first use
    (:func:`~streamload.formats.arrow.masks.mask_values`: a ``labels`` column is checked
    against the batch's tokens then).

    Attributes:
        info: The shard.
        remote_array: ``None`` (the shard is mapped): with one record batch the whole shard is
            one array, read through sliding-window views; with several, windows are read one
            by one (the attribute is then absent, like for any shard that is not one array).
    """

    def __init__(self, info: ShardInfo) -> None:
        self.info = info
        column = info.meta.get("column")
        if not isinstance(column, str):
            raise FormatError(f"{info.path}: shard was not described by the arrow format")
        local = check_size_unchanged(info.path, info.size, info.storage, info.version or None)
        self._batches: list[Any] = []
        self._pieces: list[np.ndarray | None] = []
        self._raw: list[Any] = []  # a mask's conversion of its stored flags, run on first use
        offsets = []
        with ipc_batches(None, local, info.size) as (self._schema, batches, _kind):
            for number, batch in enumerate(batches):
                offsets.append(self._read_batch(batch, column, number))
                self._batches.append(batch)
        self._offsets = offsets
        self._starts = piece_starts([int(o[-1]) - int(o[0]) for o in offsets])
        self._starts_list: list[int] = self._starts.tolist()
        self._rows: list[int] = piece_starts([b.num_rows for b in self._batches]).tolist()
        if self._starts_list[-1] != info.num_tokens:
            raise FormatError(
                f"{info.path}: column {column!r} now holds {self._starts_list[-1]} tokens but "
                f"held {info.num_tokens} at start-up; the file changed"
            )
        self._bounds: np.ndarray | None = None
        if len(offsets) == 1:
            self.remote_array = None

    def _read_batch(self, batch: Any, column: str, number: int) -> np.ndarray:
        """Keep record batch ``number``'s values of ``column`` (tokens, or a mask's flags
        checked row by row against the tokens); returns its list offsets."""
        where = f"{self.info.path}: record batch {number}"
        mask_of = self.info.meta.get("mask_of")
        if not isinstance(mask_of, str):
            tokens, bounds = token_lists(_batch_column(batch, column), column, where)
            self._pieces.append(tokens)
            return bounds
        flags, bounds = mask_lists(_batch_column(batch, column), column, where)
        tokens, token_bounds = token_lists(_batch_column(batch, mask_of), mask_of, where)
        first_row = sum(b.num_rows for b in self._batches)
        check_row_lengths(token_bounds, bounds, self.info.path, first_row, (mask_of, column))
        self._pieces.append(None)
        at = (self.info.path, first_row)
        self._raw.append(partial(mask_values, column, flags, tokens, bounds, at, mask_of))
        return bounds

    def _piece(self, index: int) -> np.ndarray:
        """Record batch ``index``'s values (a mask's converted once, ``labels`` checked
        against the tokens then; a race converts twice, harmlessly)."""
        piece = self._pieces[index]
        if piece is None:
            piece = self._pieces[index] = self._raw[index]()
        return piece

    def tokens(self, start: int, stop: int) -> np.ndarray:
        if len(self._pieces) == 1:
            return self._piece(0)[start:stop]
        return take_tokens(self._starts_list, self._piece, start, stop, np.dtype(self.info.dtype))

    def document_bounds(self) -> np.ndarray:
        """Token offsets of the rows (int64, rows + 1; empty rows repeat a value)."""
        if self._bounds is None:
            self._bounds = pieces_bounds(self._offsets, self._starts)
        return self._bounds

    def document_metadata(self, i: int, id_column: str | None = None) -> dict[str, Any]:
        """The metadata of document (row) ``i``: its id (the ``id_column`` value, by default
        the ``id`` column's) as ``id``, then its other scalar columns
        (:mod:`~streamload.formats.arrow._metadata`; ``{}`` when there are none). Reads that
        row's values of the map only.

        Raises:
            FormatError: a named ``id_column`` that the file does not have.
        """
        columns = metadata_columns(self._schema, id_column, self.info.path)
        if not columns:
            return {}
        batch, row = locate_row(self._rows, i)
        return row_metadata(self._batches[batch], row, columns)


class ArrowFormat:
    """Arrow IPC streams and files with a list-of-integers token column (module docstring)."""

    name = "arrow"
    has_documents = True

    def sniff(self, path: str, head: bytes, siblings: frozenset[str]) -> bool:
        return is_arrow_ipc(head)

    def describe(self, fs: Any, file: ListedFile, options: ReadOptions) -> ShardInfo:
        column = column_name(options.column)
        tokens = rows = count = 0
        # A remote file is read whole here (through fs). Its facts (rows, tokens and nulls of
        # every record batch) are in each message's FieldNodes, which a reader could take
        # from the metadata alone by range, but pyarrow parses no message without its body
        # (ipc.read_message, MessageReader, open_stream and open_file's get_batch all read
        # the body; only an IPC *file*'s footer is read alone, and it holds no counts), so
        # that would need a flatbuffer parser of our own. datasets writes streams of
        # <= 500 MB; a remote source's files are then read once per listed version (the
        # catalog cache) and once more into the disk cache when opened.
        with ipc_batches(fs, file.path, file.size) as (schema, batches, kind):
            dtype = token_dtype(schema, column, file.path)
            for count, batch in enumerate(batches, 1):
                where = f"{file.path}: record batch {count - 1}"
                _values, offsets = token_lists(_batch_column(batch, column), column, where)
                tokens += int(offsets[-1]) - int(offsets[0])
                rows += batch.num_rows
            others = list_columns(schema, column)
            types = column_types(schema)
        what = f"column {column!r} holds {dtype.name} tokens"
        check_configured_dtype(options.dtype, dtype, file.path, what)
        meta = {"column": column, "ipc": kind, "documents": rows, "batches": count}
        if others:
            meta["list_columns"] = others
        meta["column_types"] = types
        return ShardInfo(
            file.path, file.relpath, file.size, self.name, dtype.str, 0, tokens, None, meta
        )

    def open(self, info: ShardInfo) -> ArrowShard:
        return ArrowShard(info)


FORMAT = ArrowFormat()
