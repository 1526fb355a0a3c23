"""Tokenize one group of input files into its output files (the unit of work and of resume).

Per batch of documents from the ring (:mod:`streamload.tokenize.shuffle`): one
``encode_batch`` call for the whole batch, one seeded shuffle of the batch, then each
document goes to the :class:`~streamload.tokenize.outputs.PartWriter`. Per-document Python
work is the JSON parse, a strip, a list → array conversion and a write call. With
``loss_spans_field`` the batch is encoded with offsets and each document's loss mask is
written beside its tokens (:mod:`streamload.tokenize.loss_spans`); with ``messages_field``
each document is a conversation rendered by the chat template, its mask the trained turns'
(:mod:`streamload.tokenize.chat`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from streamload.config.chat import TrainOn
from streamload.formats.encoder import DocumentEncoder
from streamload.tokenize.chat import ChatRenderer, encode_chat, load_chat_template
from streamload.tokenize.config import TokenizeConfig
from streamload.tokenize.inputs import DocumentReader, InputDocument, ReadCounts, open_documents
from streamload.tokenize.loss_spans import encode_with_masks
from streamload.tokenize.markers import RunRecord
from streamload.tokenize.outputs import PartWriter, part_stem
from streamload.tokenize.shuffle import batch_rng, ring_batches

__all__ = ["GroupJob", "run_group"]

ProgressFn = Callable[[int, int], None]
"""Called with (documents, tokens) written since the last call."""


@dataclass(frozen=True)
class GroupJob:
    """One group: its number, files and everything needed to write it (picklable)."""

    index: int
    files: tuple[str, ...]
    num_groups: int
    dtype: str
    config: TokenizeConfig


@functools.lru_cache(maxsize=4)
def _encoder(
    path: str, bos: int | None, eos: int | None, segment: bool, sha256: str
) -> DocumentEncoder:
    """One encoder per process and tokenizer (``sha256`` keys a changed file)."""
    return DocumentEncoder(path, bos, eos, segment)


@functools.lru_cache(maxsize=4)
def chat_renderer(
    tokenizer: str, template: str | None, field: str, train_on: TrainOn, sha256: str
) -> ChatRenderer:
    """One chat renderer per process and template (``sha256``: the template's, a changed
    file is another renderer)."""
    return ChatRenderer(load_chat_template(tokenizer, template), field, train_on)


def _chat_of(cfg: TokenizeConfig) -> ChatRenderer | None:
    """The run's chat renderer (``None``: documents are texts)."""
    if cfg.messages_field is None:
        return None
    sha = load_chat_template(cfg.tokenizer, cfg.chat_template).sha256
    return chat_renderer(cfg.tokenizer, cfg.chat_template, cfg.messages_field, cfg.train_on, sha)


def run_group(
    job: GroupJob, tokenizer_sha256: str, progress: ProgressFn | None = None
) -> dict[str, Any]:
    """Write group ``job`` into the destination and mark it done.

    Returns:
        The done marker: documents, tokens, files (name → bytes) and read counts.

    Raises:
        FormatError: a bad line (without ``skip_bad_lines``), an unreadable input, or a
            document of ``max_size`` tokens or more. Nothing of the group is left looking
            complete.
    """
    cfg = job.config
    segment = cfg.segment_before_tokenization
    encoder = _encoder(cfg.tokenizer, cfg.bos_token_id, cfg.eos_token_id, segment, tokenizer_sha256)
    chat = _chat_of(cfg)
    record = RunRecord(cfg.destination, cfg.work_dir_output)
    staging = record.staging(job.index)
    readers: list[DocumentReader] = []

    def open_file(path: str) -> DocumentReader:
        reader = open_documents(
            path,
            cfg.text_field,
            cfg.id_field,
            skip_bad_lines=cfg.skip_bad_lines,
            loss_spans_field=cfg.loss_spans_field,
            chat=chat,
        )
        readers.append(reader)
        return reader

    stem = part_stem(job.index, job.num_groups)
    documents = tokens = 0
    batches = ring_batches(job.files, open_file, cfg.ring_size, cfg.batch_size)
    masks = cfg.loss_spans_field is not None or chat is not None
    with PartWriter(
        cfg.format, staging, stem, np.dtype(job.dtype), cfg.max_size, cfg.tokenizer, masks=masks
    ) as writer:
        for number, batch in enumerate(batches):
            encoded, loss_masks = _encode(encoder, batch, masks, chat is not None)
            order = list(range(len(batch)))
            if not cfg.keep_order:  # keep_order: one file per group, read in order (shuffle.py)
                batch_rng(cfg.seed, job.index, number).shuffle(order)
            batch_tokens = 0
            for i in order:
                writer.add(encoded[i], batch[i], loss_masks[i] if loss_masks else None)
                batch_tokens += int(encoded[i].size)
            documents += len(batch)
            tokens += batch_tokens
            if progress is not None:
                progress(len(batch), batch_tokens)
    counts = ReadCounts()
    for reader in readers:
        counts.add(reader.counts)
    stats = {"documents": documents, "tokens": tokens, "parts": writer.parts, **asdict(counts)}
    return record.finish(job.index, staging, writer.files, stats)


def _encode(
    encoder: DocumentEncoder, batch: list[InputDocument], masks: bool, chat: bool
) -> tuple[list[np.ndarray], list[np.ndarray] | None]:
    """A batch's token ids, and with ``masks`` their loss masks from the trained spans
    (``chat``: of rendered conversations, by transformers' rule)."""
    texts = [doc.text for doc in batch]
    if chat:
        return encode_chat(encoder, texts, [doc.trained for doc in batch])
    if not masks:
        return encoder.encode(texts), None
    return encode_with_masks(encoder, texts, [doc.trained or () for doc in batch])
