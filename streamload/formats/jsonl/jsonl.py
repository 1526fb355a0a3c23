"""Raw JSONL sources (``format = "jsonl"``): documents tokenized on the fly (Modalities
``MemMapDataset``), with the determinism and exact resumption of pre-tokenized data.

The loader must know every shard's token count and document bounds at start-up, before any
token is read, and those depend on the tokenizer. So a JSONL file is *prepared* once
(``streamload tokenize --format jsonl`` or :func:`prepare_jsonl`), which writes beside
``X.jsonl``:

* ``X.idx`` — the Modalities raw index (byte range of each line, FORMATS §3.1), rebuilt;
* ``X.tok.json`` — the tokenization record: the tokenizer's path and sha256, BOS/EOS, the
  text field, the vocabulary size, the JSONL size and the token count of every line
  (stripped text, BOS/EOS added only when absent, as ``streamload tokenize``; a line with
  empty text is a document of 0 tokens).

Describing a shard reads only that record and checks it still matches (JSONL size, its
sha256 when its mtime moved, index length, tokenizer sha256): a changed file or tokenizer is
an error that says to prepare it again, never a silent shift of the sample stream. Reading
tokens ``[a, b)`` encodes just the documents overlapping the range (a small per-shard cache
keeps the last ones, as windows are read in runs) and checks each length against the record.

A source may instead name its tokenizing in the config (``tokenizer``, ``bos_token_id``,
``eos_token_id``, ``text_field``): then ``describe`` prepares each file whose record is
missing, stale, or made with other settings, and the configured tokenizer is the one used.

A file with no record, read without a tokenizer, is JSONL rows of token ids (``input_ids``,
with their loss mask: ``labels``, ``assistant_masks``...), read by the Arrow family's
pyarrow table reader (:mod:`streamload.formats.arrow.jsonl_rows`), which this format finds
by name in the registry (families never import each other).
"""

from __future__ import annotations

import functools
import json
import os
from collections import OrderedDict
from pathlib import Path
from typing import Any

import numpy as np

from streamload.errors import ConfigError, FormatError
from streamload.formats.base import ListedFile, ReadOptions, ShardInfo, TokenizerSpec, local_path
from streamload.formats.jsonl._record import (
    TokenizationRecord,
    check_against_tokenizer,
    parse_record,
    tokenizer_error,
)
from streamload.formats.jsonl.index import (
    JsonlDocuments,
    create_raw_index,
    default_index_path,
    read_raw_index,
)
from streamload.util.files import atomic_output

__all__ = ["FORMAT", "JsonlFormat", "JsonlShard", "prepare_jsonl", "record_path"]

RECORD_SUFFIX = ".tok.json"
_CACHE_DOCUMENTS = 64
"""Encoded documents kept per opened shard."""


def record_path(jsonl_path: str | os.PathLike[str]) -> Path:
    """``{parent}/{stem}.tok.json`` of ``X.jsonl``."""
    src = Path(jsonl_path)
    return src.parent / f"{src.stem}{RECORD_SUFFIX}"


@functools.lru_cache(maxsize=8)
def _encoder(path: str, bos: int | None, eos: int | None, sha256: str) -> Any:
    from streamload.formats.encoder import DocumentEncoder

    return DocumentEncoder(path, bos, eos)


def prepare_jsonl(
    jsonl_path: str | os.PathLike[str],
    tokenizer: str,
    *,
    bos_token_id: int | None = None,
    eos_token_id: int | None = None,
    text_field: str = "text",
    batch_size: int = 1024,
) -> Path:
    """Index and measure a JSONL file for ``format = "jsonl"`` (module docstring).

    Returns:
        The record path (written atomically; the ``.idx`` too when it was absent).

    Raises:
        ConfigError: bad tokenizer or neither BOS nor EOS.
        FormatError: a line that is not JSON or lacks the text field.
    """
    from streamload.util.files import file_sha256

    if bos_token_id is None and eos_token_id is None:
        from streamload.errors import ConfigError

        raise ConfigError("a jsonl source needs bos_token_id or eos_token_id (or both)")
    src = Path(jsonl_path)
    mtime_ns = os.stat(src).st_mtime_ns  # before reading: a later edit then shows
    # always rebuilt: an index left from before lines were appended would hide them
    index = create_raw_index(src, default_index_path(src))
    docs = JsonlDocuments(src, index, text_key=text_field.split("."))
    sha = file_sha256(tokenizer)
    encoder = _encoder(os.path.abspath(tokenizer), bos_token_id, eos_token_id, sha)
    lengths: list[int] = []
    for start in range(0, len(docs), batch_size):
        texts = [docs.text(i).strip() for i in range(start, min(start + batch_size, len(docs)))]
        lengths.extend(
            len(ids) if text else 0 for text, ids in zip(texts, encoder.encode(texts), strict=True)
        )
    record = {
        "tokenizer": os.path.abspath(tokenizer),
        "tokenizer_sha256": sha,
        "bos_token_id": bos_token_id,
        "eos_token_id": eos_token_id,
        "text_field": text_field,
        "vocab_size": encoder.vocab_size,
        "jsonl_size": docs.size,
        "jsonl_mtime_ns": mtime_ns,
        "jsonl_sha256": file_sha256(str(src)),
        "index": index.name,
        "lengths": lengths,
    }
    out = record_path(src)
    with atomic_output(out) as tmp, open(tmp, "w", encoding="utf-8") as fh:
        json.dump(record, fh)
    return out


def _read_record(path: str, file: ListedFile) -> TokenizationRecord:
    """The checked record of ``path`` (:mod:`._jsonl_record`), still matching the file.

    Raises:
        FormatError: missing, malformed, or written for other bytes of the file.
    """
    rec_path = str(record_path(path))
    try:
        with open(rec_path, "rb") as fh:
            data = fh.read()
    except OSError as exc:
        raise FormatError(
            f"{path}: its tokenization record {rec_path} is missing ({exc}); prepare the file "
            "with: streamload tokenize --format jsonl --documents FILE --tokenizer TOK.json "
            "--eos-token-id ID"
        ) from exc
    record = parse_record(data, rec_path)
    if record.jsonl_size != file.size:
        raise FormatError(
            f"{path}: is {file.size} bytes but was {record.jsonl_size} bytes when "
            f"{rec_path} was written; the file changed: prepare it again"
        )
    if record.jsonl_mtime_ns != os.stat(path).st_mtime_ns:
        # touched or copied since: accept it only with the same bytes (an edit that keeps
        # the size would otherwise shift tokens under the same fingerprint)
        from streamload.util.files import file_sha256

        if record.jsonl_sha256 != file_sha256(path):
            raise FormatError(
                f"{path}: its content (sha256) differs from when {rec_path} was written; "
                "the file changed: prepare it again"
            )
    return record


def _record_encoder(record: TokenizationRecord) -> Any:
    """The encoder of the record's tokenizer, after checking the tokenizer is unchanged and
    agrees with the record (vocabulary size, BOS/EOS).

    Raises:
        FormatError: the tokenizer is missing, unreadable, changed, or disagrees.
    """
    from streamload.util.files import file_sha256

    try:
        sha = file_sha256(record.tokenizer)
        if sha != record.tokenizer_sha256:
            raise FormatError(
                f"{record.path}: tokenizer {record.tokenizer} changed since the file was "
                "prepared; prepare it again"
            )
        encoder = _encoder(record.tokenizer, record.bos_token_id, record.eos_token_id, sha)
    except (OSError, ConfigError) as exc:
        raise tokenizer_error(record, exc) from exc
    check_against_tokenizer(record, encoder.vocab_size)
    return encoder


def _prepare_if_stale(path: str, file: ListedFile, spec: TokenizerSpec) -> None:
    """Prepare ``path`` unless its record was made for this file and exactly this tokenizing.

    Every rank may run this at once: the index and record are written to temp names and
    renamed, and equal inputs give equal bytes.
    """
    from streamload.util.files import file_sha256

    try:
        record: TokenizationRecord | None = _read_record(path, file)
    except FormatError:
        record = None
    wanted = {
        "tokenizer_sha256": file_sha256(spec.path),
        "bos_token_id": spec.bos_token_id,
        "eos_token_id": spec.eos_token_id,
        "text_field": spec.text_field,
    }
    if record is not None and all(getattr(record, k) == v for k, v in wanted.items()):
        return
    prepare_jsonl(
        path,
        spec.path,
        bos_token_id=spec.bos_token_id,
        eos_token_id=spec.eos_token_id,
        text_field=spec.text_field,
    )


class JsonlFormat:
    """``.jsonl`` files with a ``.tok.json`` record beside them, or rows of token ids."""

    name = "jsonl"
    has_documents = True

    def sniff(self, path: str, head: bytes, siblings: frozenset[str]) -> bool:
        if not path.endswith(".jsonl"):
            return False
        return record_path(path).name in siblings or head.lstrip(b"\xef\xbb\xbf \t\r\n")[:1] == b"{"

    def describe(self, fs: Any, file: ListedFile, options: ReadOptions) -> ShardInfo:
        path = local_path(file.path)
        if options.tokenizer is None and (path is None or not record_path(path).exists()):
            return _rows_format().describe(fs, file, options)
        if path is None:
            raise FormatError(f"{file.path}: jsonl sources are read from local files only")
        if options.tokenizer is not None:
            _prepare_if_stale(path, file, options.tokenizer)
        record = _read_record(path, file)
        index, lengths = record.index_path, record.lengths
        entries = len(read_raw_index(index))
        if entries != lengths.size:
            raise FormatError(
                f"{index}: holds {entries} lines but {record.path} measured "
                f"{lengths.size}; prepare the file again"
            )
        vocab = _record_encoder(record).vocab_size
        auto = np.min_scalar_type(max(vocab - 1, 0))
        dtype = np.dtype(auto if options.dtype == "auto" else options.dtype).newbyteorder("<")
        if np.iinfo(dtype).max < vocab - 1:
            raise FormatError(
                f"{path}: dtype {dtype.name} cannot hold {vocab} token ids (its tokenizer's "
                "vocabulary); remove dtype or widen it"
            )
        meta = {
            "tokenizer": record.tokenizer, "tokenizer_sha256": record.tokenizer_sha256,
            "text_field": record.text_field, "jsonl_sha256": record.jsonl_sha256,
            "bos": record.bos_token_id, "eos": record.eos_token_id, "vocab_size": vocab,
            "num_documents": int(lengths.size), "record": record.path,
        }  # fmt: skip
        return ShardInfo(
            file.path, file.relpath, file.size, self.name, dtype.str, 0,
            int(lengths.sum()), index, meta,
        )  # fmt: skip

    def open(self, info: ShardInfo) -> Any:
        if info.meta.get("kind") == _ROWS_KIND:
            return _rows_format().open(info)
        return JsonlShard(info)


_ROWS_KIND = "rows"
"""``meta["kind"]`` of a shard the rows reader described (its ``ROWS_KIND``)."""
_ROWS_FORMAT = "jsonl_rows"
"""The rows reader's name in the registry (its ``ROWS_FORMAT``)."""


def _rows_format() -> Any:
    """The reader of JSONL rows of token ids, by name (imported here, not at module level:
    the registry imports this module while it loads)."""
    from streamload.formats.registry import open_only_format

    return open_only_format(_ROWS_FORMAT)


class JsonlShard:
    """A prepared JSONL file read as tokens: documents are encoded when a range needs them."""

    def __init__(self, info: ShardInfo) -> None:
        self.info = info
        path = local_path(info.path) or info.path
        record = _read_record(path, ListedFile(info.path, info.relpath, info.size))
        self._bounds = np.concatenate([[0], np.cumsum(record.lengths)]).astype(np.int64)
        if int(self._bounds[-1]) != info.num_tokens:
            raise FormatError(f"{path}: record changed since start-up; restart the loader")
        self._docs = JsonlDocuments(
            path, info.index_path, text_key=str(info.meta["text_field"]).split(".")
        )
        meta = info.meta
        self._encoder = _encoder(
            meta["tokenizer"], meta["bos"], meta["eos"], meta["tokenizer_sha256"]
        )
        self._dtype = np.dtype(info.dtype)
        # ids must be below the vocabulary and fit the dtype (a cast would wrap silently)
        self._max_id = min(int(meta.get("vocab_size", 1 << 62)) - 1, int(np.iinfo(self._dtype).max))
        self._cache: OrderedDict[int, np.ndarray] = OrderedDict()

    def _documents(self, first: int, last: int) -> list[np.ndarray]:
        missing = [i for i in range(first, last) if i not in self._cache]
        if missing:
            texts = [self._docs.text(i).strip() for i in missing]
            for i, text, ids in zip(missing, texts, self._encoder.encode(texts), strict=True):
                ids = ids if text else ids[:0]
                expected = int(self._bounds[i + 1] - self._bounds[i])
                if ids.size != expected:
                    raise FormatError(
                        f"{self.info.path}: document {i} encodes to {ids.size} tokens but was "
                        f"measured at {expected}; the file or tokenizer changed: prepare again"
                    )
                if ids.size and (int(ids.max()) > self._max_id or int(ids.min()) < 0):
                    raise FormatError(
                        f"{self.info.path}: document {i} holds token id {int(ids.max())}, "
                        f"outside [0, {self._max_id}] (the vocabulary and dtype "
                        f"{self._dtype.name}); prepare the file again"
                    )
                self._cache[i] = ids.astype(self._dtype)
        out = []
        for i in range(first, last):
            self._cache.move_to_end(i)
            out.append(self._cache[i])
        while len(self._cache) > max(_CACHE_DOCUMENTS, last - first):
            self._cache.popitem(last=False)
        return out

    def tokens(self, start: int, stop: int) -> np.ndarray:
        """Tokens ``[start, stop)``, clipped to the shard like a slice of a mapped file."""
        stop = min(stop, int(self._bounds[-1]))
        if stop <= start:
            return np.empty(0, dtype=self._dtype)
        first = int(np.searchsorted(self._bounds, start, side="right")) - 1
        last = int(np.searchsorted(self._bounds, stop, side="left"))
        docs = self._documents(first, last)
        offset = start - int(self._bounds[first])
        if len(docs) == 1:
            return docs[0][offset : offset + stop - start]
        # only the window's parts of its first and last documents are copied
        docs[0] = docs[0][offset:]
        docs[-1] = docs[-1][: stop - int(self._bounds[last - 1])]
        return np.concatenate(docs)

    def document_bounds(self) -> np.ndarray:
        return self._bounds


FORMAT = JsonlFormat()
