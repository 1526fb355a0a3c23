"""Input files of documents: expand the ``documents`` patterns and read documents from them.

Patterns are local paths or fsspec URLs with wildcards; each expands to its matches sorted
by path, the patterns' results are concatenated in order and a file named twice is an error.
Each file's kind comes from its name (:func:`input_kind`, :data:`TEXT_SUFFIXES`):

* JSONL (``.jsonl``, ``.json``, ``.ndjson``, optionally ``.gz``, ``.zst``/``.zstd``, ``.bz2``,
  ``.xz``, decompressed while streaming): a document is one line, a JSON object
  (:class:`LineReader`);
* Parquet (``.parquet``), Arrow IPC (``.arrow``, what ``datasets.save_to_disk`` writes) and
  Mosaic MDS shards (``.mds``, ``.mds.zstd``, ``.mds.gz``): a document is one row, the
  columns named by the fields (:class:`TableReader`, through the format families' text
  readers :mod:`streamload.formats.arrow.text` and :mod:`streamload.formats.mds.text`).

Every document follows the same rules, in one place (:meth:`DocumentReader._document`): a
string text field (``text_field``, dots reach into nested objects; for a table the first part
is the column), stripped, an empty text counted and left out; an id (``id_field``) or
dolma's ``{sha256(path)}-{n}``; with ``loss_spans_field`` the trained ``[start, end)``
character spans of the text (:mod:`streamload.tokenize.loss_spans`); with a chat renderer, a
conversation (``messages_field``) rendered by the chat template instead of a text, never
stripped (:mod:`streamload.tokenize.chat`). ``n`` is the 1-based line or row of the file.

Bad lines and rows (not JSON, not an object, no string text, no id, bad spans) raise
:class:`FormatError` naming the file, the line or row and the field, or with
``skip_bad_lines`` are counted and left out. A table without a column a field names is an
error for the whole file, naming the columns it has and the option to set.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import fsspec

from streamload.errors import ConfigError, FormatError
from streamload.formats.arrow import text as arrow_text
from streamload.formats.mds import text as mds_text
from streamload.formats.text_columns import MissingColumnError
from streamload.tokenize.documents import InputDocument, ReadCounts
from streamload.tokenize.loss_spans import Spans, parse_spans

if TYPE_CHECKING:
    from streamload.tokenize.chat import ChatRenderer

__all__ = [
    "TEXT_SUFFIXES",
    "DocumentReader",
    "InputDocument",
    "LineReader",
    "ReadCounts",
    "TableReader",
    "expand_documents",
    "input_kind",
    "open_documents",
]

_GLOB_CHARS = "*?["
_JSONL_NAMES = (".jsonl", ".json", ".ndjson")
_COMPRESSIONS = {".gz": "gzip", ".zst": "zstd", ".zstd": "zstd", ".bz2": "bz2", ".xz": "xz"}
"""A JSONL file's compression by its last suffix (fsspec infers no ``.zstd``)."""
_TABLE_SUFFIXES = {".parquet": "parquet", ".arrow": "arrow", ".mds": "mds",
                   ".mds.zstd": "mds", ".mds.gz": "mds"}  # fmt: skip
TEXT_SUFFIXES = (
    *_JSONL_NAMES,
    *(name + zipped for name in _JSONL_NAMES for zipped in _COMPRESSIONS),
    *_TABLE_SUFFIXES,
)
"""Every file name suffix read as documents (:func:`input_kind`), for folder listings."""
_KINDS = {
    **{name: "jsonl" for name in TEXT_SUFFIXES if name not in _TABLE_SUFFIXES},
    **_TABLE_SUFFIXES,
}


def input_kind(path: str) -> str:
    """What ``path`` holds, by its name: ``"jsonl"``, ``"parquet"``, ``"arrow"`` or ``"mds"``.

    Raises:
        ConfigError: a name without one of :data:`TEXT_SUFFIXES`, naming the file and them.
    """
    name = path.lower()
    for suffix in sorted(_KINDS, key=len, reverse=True):
        if name.endswith(suffix):
            return _KINDS[suffix]
    raise ConfigError(
        f"{path}: not a file of documents by its name; known suffixes: "
        f"{', '.join(_JSONL_NAMES)} (optionally {', '.join(_COMPRESSIONS)}), "
        f"{', '.join(_TABLE_SUFFIXES)}"
    )


def expand_documents(patterns: tuple[str, ...]) -> list[str]:
    """Every input file, in pattern order, each pattern's matches sorted.

    Returns:
        Paths as the user wrote them for local files (a relative pattern gives relative
        paths, as dolma's ``src`` column shows them); full URLs for remote ones.

    Raises:
        ConfigError: a pattern matches nothing, a file is named twice, or a file's name is
            not one of a file of documents (:func:`input_kind`).
    """
    files: list[str] = []
    for pattern in patterns:
        fs, path = fsspec.core.url_to_fs(pattern)
        if any(c in path for c in _GLOB_CHARS):
            found = sorted(p for p in fs.glob(path) if fs.isfile(p))
        else:
            found = [path] if fs.isfile(path) else []
        if not found:
            raise ConfigError(f"documents: {pattern!r} matches no file")
        files.extend(_as_given(pattern, path, p, fs) for p in found)
    seen: set[str] = set()
    for f in files:
        input_kind(f)
        if f in seen:
            raise ConfigError(f"documents: {f} is named twice by the patterns")
        seen.add(f)
    return files


def _as_given(pattern: str, stripped: str, found: str, fs: Any) -> str:
    """``found`` spelled like the pattern: relative stays relative, a URL keeps its protocol."""
    if "://" in pattern:
        return str(fs.unstrip_protocol(found))
    if pattern.startswith("/"):
        return found
    # fsspec's local glob answers absolute paths; cut the working directory back off.
    root = fs._strip_protocol(".").rstrip("/") + "/"
    return found[len(root) :] if found.startswith(root) else found


def _field(obj: Any, keys: tuple[str, ...]) -> Any:
    for key in keys:
        if not isinstance(obj, dict) or key not in obj:
            return None
        obj = obj[key]
    return obj


def _keys(dotted: str | None) -> tuple[str, ...] | None:
    return tuple(dotted.split(".")) if dotted else None


_BAD = object()
"""A record that is not an object at all (a line that is not JSON), already counted bad."""


class DocumentReader:
    """Documents of one input file, in file order; the rules every kind shares.

    A subclass gives the file's records (:meth:`_records`) and turns one into an object
    (:meth:`_object`); each object becomes a document by :meth:`_document`.

    Args:
        path: The file (as :func:`expand_documents` spells it).
        text_field: Key of the text (dotted for nested objects).
        id_field: Key of the id (a record without it is bad, as dolma drops it); ``None`` or
            empty: every document gets dolma's ``{sha256(path)}-{n}`` (``n``: line or row).
        skip_bad_lines: Count bad records instead of failing.
        loss_spans_field: Key of the trained character spans (dotted for nested objects);
            ``None``: documents carry none.
        storage_options: fsspec options of the file's file system.
        chat: Renders each record's messages (its ``messages_field``) into the document's
            text and trained spans; ``text_field`` is then unused.

    Attributes:
        path: The file.
        counts: What was read so far (``lines`` counts lines or rows).
    """

    unit = "line"
    """What one record is called in messages."""
    skip_hint = "pass --skip-bad-lines to skip it"
    """How a bad record's message says to skip such records (a text source's says its
    ``on_error``)."""

    def __init__(
        self,
        path: str,
        text_field: str,
        id_field: str | None,
        *,
        skip_bad_lines: bool = False,
        loss_spans_field: str | None = None,
        storage_options: Mapping[str, Any] | None = None,
        chat: ChatRenderer | None = None,
    ) -> None:
        self.path = path
        self._chat = chat
        self._messages = _keys(chat.messages_field) if chat is not None else None
        self._text = tuple(text_field.split("."))
        self._id = _keys(id_field)
        self._spans = _keys(loss_spans_field)
        self._skip = skip_bad_lines
        self._storage_options = dict(storage_options or {})
        self.counts = ReadCounts()
        self._path_hash = hashlib.sha256(path.encode()).hexdigest()

    def _records(self) -> Iterator[Any]:
        raise NotImplementedError

    def _object(self, number: int, record: Any) -> Any:
        """Record ``number`` as an object to take the fields from (default: itself)."""
        return record

    def _bad(self, number: int, why: str) -> None:
        message = f"{self.path}: {self.unit} {number} {why}"
        if not self._skip:
            raise FormatError(f"{message}; fix the {self.unit} or {self.skip_hint}")
        self.counts.bad += 1
        if len(self.counts.bad_examples) < 5:
            self.counts.bad_examples.append(message)

    def _document(self, number: int, obj: Any) -> InputDocument | None:
        """Record ``number``'s document, or ``None`` (empty text, or bad and skipped)."""
        found = self._text_of(number, obj) if self._messages is None else self._chat_of(number, obj)
        if found is None:
            return None
        text, trained = found
        if not text:
            self.counts.empty += 1
            return None
        if self._id is None:
            doc_id = f"{self._path_hash}-{number}"
        else:
            doc_id = _field(obj, self._id)
            if doc_id is None:  # dolma logs an error and drops the document
                self._bad(number, f"has no id field {'.'.join(self._id)!r} (--id-field)")
                return None
            doc_id = str(doc_id)
        return InputDocument(text, doc_id, self.path, number, trained)

    def _text_of(self, number: int, obj: Any) -> tuple[str, Spans | None] | None:
        """The stripped text and trained spans of a record (``None``: bad, counted)."""
        text = _field(obj, self._text)
        if not isinstance(text, str):
            what = "has no" if text is None else f"has a {type(text).__name__} in its"
            self._bad(number, f"{what} text field {'.'.join(self._text)!r}; expected a string")
            return None
        raw, text = text, text.strip()
        if not text or self._spans is None:
            return text, None
        try:
            return text, parse_spans(_field(obj, self._spans), raw, text)
        except ValueError as exc:
            self._bad(number, f"loss spans field {'.'.join(self._spans)!r} {exc}")
            return None

    def _chat_of(self, number: int, obj: Any) -> tuple[str, Spans | None] | None:
        """A conversation rendered by the chat template (``None``: bad, counted)."""
        assert self._chat is not None and self._messages is not None
        try:
            return self._chat.render(_field(obj, self._messages))
        except ValueError as exc:
            self._bad(number, f"messages field {'.'.join(self._messages)!r} {exc}")
            return None

    def __iter__(self) -> Iterator[InputDocument]:
        try:
            for number, record in enumerate(self._records(), start=1):
                self.counts.lines += 1
                obj = self._object(number, record)
                doc = None if obj is _BAD else self._document(number, obj)
                if doc is not None:
                    self.counts.documents += 1
                    yield doc
        except (OSError, EOFError) as exc:
            raise FormatError(f"{self.path}: cannot read: {exc}") from exc


def _lines(fh: Any, block: int = 1 << 20) -> Iterator[bytes]:
    """Lines of a binary stream by ``read()`` alone (decompressors such as zstd's have no
    ``readline``); the last line may lack its newline."""
    rest = b""
    while chunk := fh.read(block):
        lines = (rest + chunk).split(b"\n")
        rest = lines.pop()
        yield from lines
    if rest:
        yield rest


def _compression(path: str) -> str:
    """fsspec's compression of a JSONL file, by its last suffix."""
    name = path.lower()
    return next((c for s, c in _COMPRESSIONS.items() if name.endswith(s)), "infer")


class LineReader(DocumentReader):
    """Documents of one JSONL file, in line order (arguments: :class:`DocumentReader`)."""

    def _records(self) -> Iterator[bytes]:
        compression = _compression(self.path)
        with fsspec.open(self.path, "rb", compression=compression, **self._storage_options) as fh:
            yield from _lines(fh)

    def _object(self, number: int, record: bytes) -> Any:
        try:
            return json.loads(record)
        except ValueError as exc:
            self._bad(number, f"is not valid JSON ({exc})")
            return _BAD


_TABLE_ROWS: dict[str, Callable[..., Iterator[dict[str, Any]]]] = {
    "parquet": arrow_text.iter_text_rows,
    "arrow": arrow_text.iter_text_rows,
    "mds": mds_text.iter_text_rows,
}
"""The text reader of each table kind (:func:`input_kind`)."""


class TableReader(DocumentReader):
    """Documents of one Parquet, Arrow IPC or MDS file, in row order: the rules of
    :class:`DocumentReader`, each row an object of the columns the fields name (the first
    part of each dotted field; the rest reaches into a struct or JSON value).

    Arguments: :class:`DocumentReader`'s.

    Raises:
        ConfigError: (when built) the file's name is not a table's (:func:`input_kind`).
    """

    unit = "row"

    def __init__(self, path: str, *args: Any, **kwargs: Any) -> None:
        super().__init__(path, *args, **kwargs)
        read = _TABLE_ROWS.get(input_kind(path))
        if read is None:
            raise ConfigError(f"{path}: a JSONL file, not a table; read it with LineReader")
        self._read = read
        fields = {"text_field": self._text if self._messages is None else None,
                  "messages_field": self._messages, "id_field": self._id,
                  "loss_spans_field": self._spans}  # fmt: skip
        self._options: dict[str, str] = {}  # column -> the option that names it
        for option, keys in fields.items():
            if keys is not None:
                self._options.setdefault(keys[0], option)

    def _records(self) -> Iterator[dict[str, Any]]:
        try:
            yield from self._read(self.path, list(self._options), self._storage_options)
        except MissingColumnError as exc:
            option = self._options.get(exc.column, "text_field")
            raise FormatError(f"{exc}; set {option}") from None


def open_documents(
    path: str,
    text_field: str,
    id_field: str | None,
    *,
    skip_bad_lines: bool = False,
    loss_spans_field: str | None = None,
    storage_options: Mapping[str, Any] | None = None,
    chat: ChatRenderer | None = None,
) -> DocumentReader:
    """A reader of the documents of ``path``, by its kind (:func:`input_kind`).

    Args: As :class:`DocumentReader`.

    Returns:
        A :class:`LineReader` (JSONL) or :class:`TableReader` (Parquet, Arrow, MDS); iterate
        it for :class:`InputDocument` s, then read its ``counts``.

    Raises:
        ConfigError: a name of no known kind.
    """
    reader = LineReader if input_kind(path) == "jsonl" else TableReader
    return reader(
        path,
        text_field,
        id_field,
        skip_bad_lines=skip_bad_lines,
        loss_spans_field=loss_spans_field,
        storage_options=storage_options,
        chat=chat,
    )
