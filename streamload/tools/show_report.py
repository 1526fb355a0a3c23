"""The report of ``streamload show``: one step's samples as plain, JSON-ready data.

The schema (``"schema": 1``) is documented in docs/show.md; fields are only ever added.
Positions are input positions ``t`` of a row (``input_ids[t]``, ``labels[t]``); ranges are
half-open ``[start, end)``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from streamload.errors import ConfigError
from streamload.formats.encoder import load_tokenizer
from streamload.ops.masks import IGNORE_INDEX
from streamload.streams.interface import SampleStream
from streamload.tools._show_documents import DocumentTracer, documents_origin, row_segments
from streamload.tools.show import StepBatch

__all__ = ["SCHEMA", "Decoder", "describe_step", "label_ranges", "load_decoder"]

SCHEMA = 1
"""Version of the report's layout (docs/show.md)."""

Decoder = Callable[[Sequence[int]], str]
"""Token ids → text."""


def load_decoder(path: str) -> tuple[Decoder, int]:
    """A decoder of ``tokenizer.json`` at ``path`` (special tokens kept, so EOS shows) and
    its number of ids.

    Raises:
        ConfigError: the ``tokenizers`` library is missing (naming the extra), the file is
            missing or not a tokenizer.
    """
    try:
        import tokenizers  # noqa: F401  # optional: only to name the extra when missing
    except ImportError:
        raise ConfigError(
            f"--tokenizer {path}: decoding needs the 'tokenizers' library: "
            "pip install 'streamload[tokenizers]'"
        ) from None
    tokenizer = load_tokenizer(path)
    size = int(tokenizer.get_vocab_size(with_added_tokens=True))

    def decode(ids: Sequence[int]) -> str:
        return str(tokenizer.decode(list(ids), skip_special_tokens=False))

    return decode, size


def label_ranges(labels: np.ndarray) -> list[list[int]]:
    """``[start, end)`` runs of positions whose label is ``IGNORE_INDEX`` (-100)."""
    masked = np.concatenate([[False], np.asarray(labels) == IGNORE_INDEX, [False]])
    edges = np.flatnonzero(masked[1:] != masked[:-1])
    return [[int(a), int(b)] for a, b in zip(edges[::2], edges[1::2], strict=True)]


def describe_step(
    stream: SampleStream,
    view: StepBatch,
    decoder: tuple[Decoder, int] | None = None,
    tokenizer: str | None = None,
) -> dict[str, Any]:
    """The report of one step (docs/show.md): the split, then every sample, micro-batch by
    micro-batch, each in rank order.

    Args:
        stream: The stream the step came from.
        view: The step (:func:`streamload.tools.show.load_step`).
        decoder: With :func:`load_decoder`'s result, each document's ``text``.
        tokenizer: The tokenizer's path, recorded in the report.

    Raises:
        ConfigError: a token id the tokenizer does not hold.
    """
    if decoder is not None:
        _check_vocab(view, decoder[1], tokenizer)
    tracer = DocumentTracer(stream, view)
    segments = row_segments(stream, view)
    samples = [
        _sample(stream, view, tracer, row, segments[row], decoder) for row in range(view.ranks.size)
    ]
    split, request = view.split, view.request
    return {
        "schema": SCHEMA,
        "step": request.step,
        "pass": request.pass_index,
        "mode": stream.config.sampling.mode_name,
        "unit": stream.layout.unit,
        "seq_len": int(view.chunk.tokens.shape[1]) - 1,  # vsl mode: the step's length
        "masks": stream.config.packing.masks,
        "global_batch_size": view.grad_accum_steps * split.global_batch,
        "grad_accum_steps": view.grad_accum_steps,
        "world_size": split.world_size,
        "batch_size": split.batch_size,
        "rank": request.rank,
        "sources": [s.name for s in stream.sources],
        "tokenizer": tokenizer,
        "shards": tracer.shards,
        "samples": samples,
    }


def _check_vocab(view: StepBatch, size: int, path: str | None) -> None:
    ids = view.batch["input_ids"]
    top = int(ids.max()) if ids.numel() else 0
    if top >= size:
        raise ConfigError(
            f"--tokenizer {path} holds {size} ids, but the step has token id {top}; give the "
            "tokenizer the data was made with"
        )


def _sample(
    stream: SampleStream,
    view: StepBatch,
    tracer: DocumentTracer,
    row: int,
    starts: list[int] | None,
    decoder: tuple[Decoder, int] | None,
) -> dict[str, Any]:
    plan, chunk, batch = view.plan, view.chunk, view.batch
    source_id = int(plan.sources.ravel()[row])
    local = int(plan.local_ids.ravel()[row])
    source = stream.sources[source_id]
    lengths = chunk.lengths
    rank, micro = int(view.ranks[row]), int(view.micro_batches[row])
    input_ids = batch["input_ids"][row].tolist()
    mine = (view.ranks == rank) & (view.micro_batches == micro)
    return {
        "micro_batch": micro,
        "rank": rank,
        "row": row - int(np.flatnonzero(mine)[0]),
        "sample_index": int(batch["sample_index"][row]),
        "source": source.name,
        "source_id": source_id,
        "source_sample": local,
        "source_epoch": _source_epoch(stream, view, local, source.num_windows),
        "source_offset": tracer.offset(row, 0),
        "data_tokens": None if lengths is None else int(lengths[row]),
        "skipped": bool(np.isin(row, chunk.skipped_rows)),
        "input_ids": input_ids,
        "labels": batch["labels"][row].tolist(),
        "masked": label_ranges(batch["labels"][row].numpy()),
        "documents_from": None if starts is None else documents_origin(stream, source_id),
        "documents": _documents(tracer, row, starts, input_ids, lengths, decoder),
    }


def _source_epoch(stream: SampleStream, view: StepBatch, local: int, windows: int) -> int:
    """The source epoch a row was drawn in (vsl mode: the pass; its ids name pieces)."""
    if stream.layout.epoch_is_pass:
        return view.request.pass_index
    return local // windows


def _documents(
    tracer: DocumentTracer,
    row: int,
    starts: list[int] | None,
    input_ids: list[int],
    lengths: np.ndarray | None,
    decoder: tuple[Decoder, int] | None,
) -> list[dict[str, Any]]:
    width = len(input_ids)
    cuts = [0] if starts is None else starts
    data = width if lengths is None else int(lengths[row])
    out = []
    for start, end in zip(cuts, [*cuts[1:], width], strict=True):
        kind = "window" if starts is None else "padding" if start >= data else "document"
        where = tracer.blank() if kind == "padding" else tracer.describe(row, start)
        text = None if decoder is None else decoder[0](input_ids[start:end])
        out.append({"start": start, "end": end, "kind": kind, **where, "text": text})
    return out
