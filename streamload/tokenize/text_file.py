"""One input file of a text source tokenized into Megatron parts (the cache's unit of work).

:func:`write_parts` reads the file's documents (:func:`~streamload.tokenize.inputs.open_documents`:
JSONL, Parquet, Arrow, MDS), encodes them in batches with ``streamload tokenize``'s encoder and
writes them with its :class:`~streamload.tokenize.outputs.PartWriter` into a staging folder,
so the parts are the bytes ``streamload tokenize --keep-order --format megatron`` writes for
that file; :mod:`streamload.tokenize.text_cache` publishes them. A chat source
(``messages_field``) renders each row's conversation with the chat template and writes each
part's loss mask beside it (``<part>.bin.loss``, found by the loader like any mask file).
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from streamload.formats.encoder import DocumentEncoder
from streamload.tokenize.chat import ChatRenderer, encode_chat
from streamload.tokenize.config import DEFAULT_MAX_SIZE, OutputFormat
from streamload.tokenize.inputs import ReadCounts, open_documents
from streamload.tokenize.outputs import PartWriter

__all__ = [
    "BATCH_DOCUMENTS",
    "TextInput",
    "TextSettings",
    "build_stamp",
    "encoder_of",
    "open_text",
    "write_parts",
]

BATCH_DOCUMENTS = 1024
"""Documents encoded per ``encode_batch`` call (the tokenizer's threads share a batch)."""

ProgressFn = Callable[[int, int], None]
"""Called with (documents, tokens) tokenized since the last call."""


@dataclass(frozen=True)
class TextInput:
    """One input file as listed: its URL, its path under the source's root (what the data
    fingerprint uses), its size and version (ETag, generation or local mtime)."""

    url: str
    relpath: str
    size: int
    version: str


@dataclass(frozen=True)
class TextSettings:
    """How a text source tokenizes (what its ``[[sources]]`` entry says).

    Args:
        tokenizer: Local ``tokenizer.json``.
        bos_token_id: Prepended when absent (``streamload tokenize``'s rule).
        eos_token_id: Appended when absent.
        text_field: JSON key or column of the text (dotted: nested).
        kind: Every input's kind (``parquet``, ``arrow``, ``mds``), or ``None``: by name.
        dtype: Token dtype or ``auto`` (Megatron's rule: uint16 below 65,500 ids, else int32).
        skip_bad: Skip and count bad rows instead of failing.
        messages_field: The chat messages' field (``None``: documents are texts).
        chat_template: With ``messages_field``: the template file, or ``None``: the
            tokenizer's own (:func:`~streamload.tokenize.chat.load_chat_template`).
        train_on: With ``messages_field``: ``assistant``, ``last`` or ``all``.
    """

    tokenizer: str
    bos_token_id: int | None
    eos_token_id: int | None
    text_field: str = "text"
    kind: str | None = None
    dtype: str = "auto"
    skip_bad: bool = False
    messages_field: str | None = None
    chat_template: str | None = None
    train_on: str = "assistant"


def write_parts(
    item: TextInput,
    key: str,
    staging: str,
    settings: TextSettings,
    dtype: np.dtype,
    encoder: DocumentEncoder,
    input_options: dict[str, Any],
    progress: ProgressFn | None,
    chat: ChatRenderer | None = None,
) -> dict[str, Any]:
    """Tokenize ``item`` into ``{key}-{M:05d}`` parts in ``staging``; what its marker says
    (input, parts, file sizes, counts, the build's stamp); ``chat`` renders conversations.

    Raises:
        FormatError: a bad row (without ``skip_bad``) or an unreadable input.
    """
    reader = open_text(item.url, settings, input_options, chat)
    documents = tokens = 0
    writer = PartWriter(
        OutputFormat.MEGATRON, staging, key, dtype, DEFAULT_MAX_SIZE, settings.tokenizer,
        masks=chat is not None,
    )  # fmt: skip
    with writer:
        batch: list[Any] = []
        for doc in reader:
            batch.append(doc)
            if len(batch) == BATCH_DOCUMENTS:
                tokens += _encode_into(encoder, batch, writer, progress)
                documents += len(batch)
                batch = []
        if batch:
            tokens += _encode_into(encoder, batch, writer, progress)
            documents += len(batch)
    counts: ReadCounts = reader.counts
    files = {name: os.path.getsize(os.path.join(staging, name)) for name in writer.files}
    return {
        "input": asdict(item),
        "parts": [n for n in writer.files if n.endswith(".bin")],
        "files": files,
        "documents": documents,
        "tokens": tokens,
        "dtype": dtype.name,
        "rows": counts.lines,
        "empty": counts.empty,
        "bad": counts.bad,
        "bad_examples": counts.bad_examples,
        "built": build_stamp(),
    }


def _encode_into(
    encoder: DocumentEncoder, batch: list[Any], writer: PartWriter, progress: ProgressFn | None
) -> int:
    texts = [doc.text for doc in batch]
    masks: list[np.ndarray] | list[None]
    if writer.masks:  # conversations: their masks from the template's trained blocks
        encoded, masks = encode_chat(encoder, texts, [doc.trained for doc in batch])
    else:
        encoded, masks = encoder.encode(texts), [None] * len(batch)
    total = 0
    for tokens, doc, mask in zip(encoded, batch, masks, strict=True):
        writer.add(tokens, doc, mask)
        total += int(tokens.size)
    if progress is not None:
        progress(len(batch), total)
    return total


def open_text(
    url: str, s: TextSettings, storage_options: dict[str, Any], chat: ChatRenderer | None = None
) -> Any:
    """A reader of ``url``'s documents whose messages speak of the source's options."""
    reader = open_documents(
        url, s.text_field, None, skip_bad_lines=s.skip_bad, storage_options=storage_options,
        chat=chat,
    )  # fmt: skip
    reader.skip_hint = 'set on_error = "skip" in the source to skip and count such rows'
    return reader


_ENCODERS: dict[tuple[Any, ...], DocumentEncoder] = {}


def encoder_of(path: str, bos: int | None, eos: int | None, sha256: str) -> DocumentEncoder:
    """One encoder per process and tokenizer (``sha256`` keys a changed file)."""
    key = (path, bos, eos, sha256)
    if key not in _ENCODERS:
        _ENCODERS[key] = DocumentEncoder(path, bos, eos)
    return _ENCODERS[key]


def build_stamp() -> str:
    """Which build wrote a marker: time, pid and a random tag."""
    return f"{time.time_ns()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
