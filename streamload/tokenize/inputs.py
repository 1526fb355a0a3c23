"""Input JSONL files: expand the ``documents`` patterns and read documents line by line.

Patterns are local paths or fsspec URLs with wildcards; each expands to its matches sorted
by path, the patterns' results are concatenated in order and a file named twice is an error.
``.gz``, ``.zst``/``.zstd`` (and whatever else fsspec infers from the suffix) are
decompressed while streaming. A document is one line: a JSON object with a string text field
(``text_field``, dots reach into nested objects) and optionally an id (``id_field``).

With ``loss_spans_field`` each line also names the trained ``[start, end)`` character spans
of its text (:mod:`streamload.tokenize.loss_spans`); a line without a valid list of them is
a bad line.

Bad lines (not JSON, not an object, no string text) raise :class:`FormatError` naming the
file and the 1-based line, or with ``skip_bad_lines`` are counted and left out.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import fsspec

from streamload.errors import ConfigError, FormatError
from streamload.tokenize.loss_spans import Spans, parse_spans

__all__ = ["InputDocument", "LineReader", "ReadCounts", "expand_documents"]

_GLOB_CHARS = "*?["


def expand_documents(patterns: tuple[str, ...]) -> list[str]:
    """Every input file, in pattern order, each pattern's matches sorted.

    Returns:
        Paths as the user wrote them for local files (a relative pattern gives relative
        paths, as dolma's ``src`` column shows them); full URLs for remote ones.

    Raises:
        ConfigError: a pattern matches nothing, or a file is named twice.
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


@dataclass(frozen=True)
class InputDocument:
    """One document read from a line: stripped text, id, source path, 1-based line, and
    the trained character spans of the text (``None`` without ``loss_spans_field``)."""

    text: str
    id: str
    src: str
    loc: int
    trained: Spans | None = None


@dataclass
class ReadCounts:
    """What a reader saw: lines, documents given out, empty texts and bad lines skipped."""

    lines: int = 0
    documents: int = 0
    empty: int = 0
    bad: int = 0
    bad_examples: list[str] = field(default_factory=list)

    def add(self, other: ReadCounts) -> None:
        """Add another reader's counts (keeps the first few bad-line examples)."""
        self.lines += other.lines
        self.documents += other.documents
        self.empty += other.empty
        self.bad += other.bad
        self.bad_examples.extend(other.bad_examples[: 5 - len(self.bad_examples)])


def _field(obj: Any, keys: tuple[str, ...]) -> Any:
    for key in keys:
        if not isinstance(obj, dict) or key not in obj:
            return None
        obj = obj[key]
    return obj


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


class LineReader:
    """Documents of one input file, in line order.

    Args:
        path: The file (as :func:`expand_documents` spells it).
        text_field: Key of the text (dotted for nested objects).
        id_field: Key of the id (a line without it is bad, as dolma drops it); ``None`` or
            empty: every document gets dolma's ``{sha256(path)}-{line}``.
        skip_bad_lines: Count bad lines instead of failing.
        loss_spans_field: Key of the trained character spans (dotted for nested objects);
            ``None``: documents carry none.
    """

    def __init__(
        self,
        path: str,
        text_field: str,
        id_field: str | None,
        *,
        skip_bad_lines: bool = False,
        loss_spans_field: str | None = None,
    ) -> None:
        self.path = path
        self._text = tuple(text_field.split("."))
        self._id = tuple(id_field.split(".")) if id_field else None
        self._spans = tuple(loss_spans_field.split(".")) if loss_spans_field else None
        self._skip = skip_bad_lines
        self.counts = ReadCounts()
        self._path_hash = hashlib.sha256(path.encode()).hexdigest()

    def _bad(self, line_no: int, why: str) -> None:
        message = f"{self.path}: line {line_no} {why}"
        if not self._skip:
            raise FormatError(f"{message}; fix the line or pass --skip-bad-lines to skip it")
        self.counts.bad += 1
        if len(self.counts.bad_examples) < 5:
            self.counts.bad_examples.append(message)

    def _document(self, line_no: int, line: bytes) -> InputDocument | None:
        try:
            obj = json.loads(line)
        except ValueError as exc:
            self._bad(line_no, f"is not valid JSON ({exc})")
            return None
        text = _field(obj, self._text)
        if not isinstance(text, str):
            what = "has no" if text is None else f"has a {type(text).__name__} in its"
            self._bad(line_no, f"{what} text field {'.'.join(self._text)!r}; expected a string")
            return None
        raw, text = text, text.strip()
        if not text:
            self.counts.empty += 1
            return None
        trained = None
        if self._spans is not None:
            try:
                trained = parse_spans(_field(obj, self._spans), raw, text)
            except ValueError as exc:
                self._bad(line_no, f"loss spans field {'.'.join(self._spans)!r} {exc}")
                return None
        if self._id is None:
            doc_id = f"{self._path_hash}-{line_no}"
        else:
            doc_id = _field(obj, self._id)
            if doc_id is None:  # dolma logs an error and drops the document
                self._bad(line_no, f"has no id field {'.'.join(self._id)!r} (--id-field)")
                return None
            doc_id = str(doc_id)
        return InputDocument(text, doc_id, self.path, line_no, trained)

    def __iter__(self) -> Iterator[InputDocument]:
        try:
            with fsspec.open(self.path, "rb", compression="infer") as fh:
                for line_no, line in enumerate(_lines(fh), start=1):
                    self.counts.lines += 1
                    doc = self._document(line_no, line)
                    if doc is not None:
                        self.counts.documents += 1
                        yield doc
        except (OSError, EOFError) as exc:
            raise FormatError(f"{self.path}: cannot read: {exc}") from exc
