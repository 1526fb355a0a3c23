"""One source as a Megatron ``IndexedDataset``: its sequences, and vectorized sample reads.

A source's sequences are its shards' sequences in listing order (for a Megatron ``.bin/.idx``
the ``.idx`` sequences, GPTDataset's "documents"; for other formats the format's documents),
as if ``tools/merge_datasets.py`` had merged the shards. A format without a document index
has no sequences and is rejected. Where each sequence starts in the source's token stream and
how long it is come from the source's sequence table (:mod:`.sequences`): built from the
shards' indices once per job, then mapped by every rank and worker (a warm start reads no
document index), and the shard of a sequence is found from its start.

Reading a chunk is one gather: every sample spans a run of document-index positions; the
pieces (one per position) are listed with ``np.repeat`` and their tokens copied by one fancy
index per shard touched, never a Python loop over samples.

Remote shards are read as the runs of consecutive tokens the samples need. Under
``on_error = "skip"`` a sample with a piece that stays unreadable is delivered in place with
zero tokens (its labels masked by the reader); the rest of the chunk is unchanged.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from streamload.catalog.sources import SourceCatalog
from streamload.config import DataConfig
from streamload.errors import ConfigError, RemoteReadError
from streamload.modes.megatron.sequences import load_sequence_table, table_arrays
from streamload.plan.megatron import GPTIndices
from streamload.streams.shard_set import ShardSet, loss_mask_set, skip_unreadable

__all__ = ["PAD_TOKEN", "MegatronSource"]

PAD_TOKEN = -1
"""Megatron's pad id when the tokenizer has none: fills a short last sample's tail."""


class MegatronSource:
    """The sequences of one source and the reads of its ``GPTDataset`` samples.

    Args:
        catalog: The described source.
    """

    def __init__(self, catalog: SourceCatalog, config: DataConfig) -> None:
        self.catalog = catalog
        self.name = catalog.config.name
        self.shards = ShardSet(catalog.shards)
        self.loss_masks = loss_mask_set(catalog.shards)
        if "jsonl" in catalog.shards.facts.formats:  # else no shard is decoded at start
            jsonl = [s.path for s in catalog.shards if s.format == "jsonl"]
            raise ConfigError(
                f"source {self.name!r}: sampling.mode = 'megatron' reads token files; "
                f"{jsonl[0]} is a jsonl file (pre-tokenize it with streamload tokenize)"
            )
        self.sequences = load_sequence_table(config, catalog, self._table)
        self.num_windows = 1
        self.limit: int | None = None  # no mixture policy: Megatron decides the epochs
        self.indices: GPTIndices | None = None
        self.extra = 1

    @property
    def num_sequences(self) -> int:
        """Sequences of the source (Megatron's ``num_elements``)."""
        return self.sequences.count

    @property
    def sequence_starts(self) -> np.ndarray:
        """int64 ``[S]``: stream offset of each sequence (mapped)."""
        return self.sequences.starts

    @property
    def prefix(self) -> str | None:
        """The Megatron path prefix when the source is one ``.bin/.idx`` dataset."""
        shards = self.catalog.shards
        if len(shards) == 1 and shards[0].format == "megatron" and shards[0].path.endswith(".bin"):
            return shards[0].path[: -len(".bin")]
        return None

    def _table(self) -> dict[str, np.ndarray]:
        """Build the sequence table from every shard's document index (once per job)."""
        bounds = [self._bounds(i) for i in range(len(self.catalog.shards))]
        return table_arrays(bounds, self.shards.offsets, self.name)

    def _bounds(self, index: int) -> np.ndarray:
        shard = self.shards.shard(index)
        sequence_bounds = getattr(shard, "sequence_bounds", None)
        bounds = sequence_bounds() if callable(sequence_bounds) else shard.document_bounds()
        if bounds is None:
            info = self.catalog.shards[index]
            raise ConfigError(
                f"source {self.name!r}: {info.path} ({info.format}) has no document index, so "
                "it has no sequences for sampling.mode = 'megatron'; convert it to a format "
                "with documents (e.g. `streamload convert --to megatron`)"
            )
        return np.asarray(bounds, dtype=np.int64)

    def _shard_of(self, sequence: np.ndarray) -> np.ndarray:
        """The shard of each sequence (of those with tokens: an empty sequence at a shard's
        end may name the next shard; it is never read)."""
        offsets = self.shards.offsets
        if offsets.shape[0] <= 2:
            return np.zeros(sequence.shape, dtype=np.int64)
        found = np.searchsorted(offsets, self.sequences.starts[sequence], side="right") - 1
        return np.minimum(found, offsets.shape[0] - 2)

    def attach(self, indices: GPTIndices, tokens_per_epoch: int, seq_len: int, extra: int) -> None:
        """Use the built indices; ``num_windows`` becomes the samples of one data epoch."""
        self.indices = indices
        self.extra = extra
        self.num_windows = max(1, (tokens_per_epoch - extra) // seq_len)

    def read(
        self, local: np.ndarray, width: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
        """The ``text`` of GPTDataset samples ``local``, ``[n, width]``, each row's length,
        the rows skipped under ``on_error = "skip"`` (zeros; int64 row indices), and the
        loss flags of the text from the shards' mask files (uint8 ``[n, width]``, 0 over
        Megatron's pad; ``None`` when the source has none).

        Rows shorter than ``width`` (the padded last sample) are filled with
        :data:`PAD_TOKEN`; the array is int64 then, else the shards' dtype.
        """
        n = int(local.shape[0])
        pieces, sequence, start, size = self._pieces(local)
        row = np.repeat(np.arange(n, dtype=np.int64), pieces)
        lengths = np.bincount(row, weights=size, minlength=n).astype(np.int64)
        before = np.cumsum(size) - size  # flat start of each piece
        in_row = before - np.repeat(np.cumsum(lengths) - lengths, pieces)
        step = np.arange(int(size.sum()), dtype=np.int64) - np.repeat(before, size)
        source = np.repeat(self.sequences.starts[sequence] + start, size) + step
        target = np.repeat(row * width + in_row, size) + step
        padded = bool((lengths < width).any())
        out = np.full((n, width), PAD_TOKEN, np.int64) if padded else None
        shard_ids = np.repeat(self._shard_of(sequence), size)
        flat, failed, culprit = self._gather(self.shards, source, shard_ids)
        if out is None:
            out = flat.reshape(n, width)
        else:
            out.reshape(-1)[target] = flat
        skipped = np.zeros(0, dtype=np.int64)
        if failed is not None and culprit is not None:
            skipped = np.unique(np.repeat(row, size)[failed])
            out[skipped] = 0  # counted by the loader when their batch is delivered
        loss_mask = None
        if self.loss_masks is not None:  # the same pieces of the mask files; pad: untrained
            loss_mask = np.zeros((n, width), dtype=np.uint8)
            loss_mask.reshape(-1)[target] = self._gather(self.loss_masks, source, shard_ids)[0]
        return out, lengths, skipped, loss_mask

    def _pieces(self, local: np.ndarray) -> tuple[np.ndarray, ...]:
        """Per sample its piece count; per piece (one per document-index position the sample
        spans) its sequence, first token inside the sequence and token count."""
        assert self.indices is not None, "attach() the indices first"
        doc_index, sample_index, shuffle_index = self.indices
        j = np.asarray(shuffle_index[local], dtype=np.int64)
        begin = np.asarray(sample_index[j], dtype=np.int64)
        end = np.asarray(sample_index[j + 1], dtype=np.int64)
        pieces = end[:, 0] - begin[:, 0] + 1
        total = int(pieces.sum())
        first = np.cumsum(pieces) - pieces
        position = np.arange(total, dtype=np.int64) + np.repeat(begin[:, 0] - first, pieces)
        sequence = np.asarray(doc_index[position], dtype=np.int64)
        start = np.zeros(total, dtype=np.int64)
        start[first] = begin[:, 1]
        stop = self.sequences.lengths(sequence)
        stop[first + pieces - 1] = end[:, 1] + self.extra
        return pieces, sequence, start, stop - start

    def drawn(self, samples: int) -> dict[str, int]:
        """Nothing to count beyond the samples (Megatron's samples are all data tokens)."""
        return {}

    def stream_offset(self, local: int, start: int, position: int) -> int | None:
        """Not traced: a Megatron sample's pieces come from megatron-core's document index."""
        return None

    def prefetch(self, local: np.ndarray) -> None:
        """Start fetching the pieces of samples ``local`` from remote shards (the planner's
        lookahead; :mod:`streamload.nodes.lookahead`); a no-op for local shards."""
        if not self.shards.remote or local.size == 0:
            return
        _, sequence, start, size = self._pieces(local)
        keep = size > 0
        sequence, start, size = sequence[keep], start[keep], size[keep]
        shard_ids = self._shard_of(sequence)
        begin = self.sequences.starts[sequence] + start - self.shards.offsets[shard_ids]
        self.shards.prefetch_pieces(shard_ids, begin, size)

    def _gather(
        self, shards: ShardSet, offsets: np.ndarray, shard_ids: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray | None, int | None]:
        """Values of ``shards`` (the tokens, or their loss masks) at source stream offsets
        (pieces never cross shards); under ``on_error = "skip"`` also which of them stayed
        unreadable (zeros) and the first shard that failed (else ``None, None``)."""
        out = np.empty(offsets.shape[0], dtype=shards.dtype)
        failed: np.ndarray | None = None
        culprit: int | None = None
        touched = np.unique(shard_ids).tolist() if len(shards.shards) > 1 else [0]
        for sid in touched:
            where = slice(None) if len(touched) == 1 else shard_ids == sid
            local = offsets[where] - shards.offsets[sid]
            if local.size == 0:
                continue
            try:
                shard = shards.shard(sid)
                array = getattr(shard, "remote_array", None)
                if array is None:
                    low, high = int(local.min()), int(local.max()) + 1
                    out[where] = shard.tokens(low, high)[local - low]
                    continue
                tokens, bad, error = _read_runs(array, local)  # only the pieces, together
            except RemoteReadError as exc:  # the shard could not be opened
                tokens, bad, error = np.zeros(local.shape[0], out.dtype), None, exc
            out[where] = tokens
            if error is not None:
                skip_unreadable(shards.shards[sid], error, samples=0)  # raises unless "skip"
                failed = np.zeros(offsets.shape[0], dtype=bool) if failed is None else failed
                failed[where] = True if bad is None else bad
                culprit = sid if culprit is None else culprit
        return out, failed, culprit


def _read_runs(
    array: Any, local: np.ndarray
) -> tuple[np.ndarray, np.ndarray | None, RemoteReadError | None]:
    """Tokens at shard offsets ``local`` of a remote token array, read as the runs of
    consecutive offsets they form (one range each, scheduled together; the store coalesces
    near neighbours); when a run stayed unreadable, it is zero-filled and the mask of those
    tokens and the first error (naming the object) come too (else ``None, None``)."""
    cut = np.flatnonzero(np.diff(local) != 1) + 1
    first = local[np.concatenate([[0], cut])]
    count = np.diff(np.concatenate([[0], cut, [local.shape[0]]]))
    size = array.dtype.itemsize
    begin = array.offset + first * size
    got = array.store.read_many(array.obj, begin, begin + count * size)
    errors = [item for item in got if isinstance(item, RemoteReadError)]
    if not errors:
        return np.concatenate([np.frombuffer(item, array.dtype) for item in got]), None, None
    lost = [isinstance(item, RemoteReadError) for item in got]
    parts = [
        np.zeros(n, array.dtype) if miss else np.frombuffer(item, array.dtype)
        for item, n, miss in zip(got, count.tolist(), lost, strict=True)
    ]
    bad = np.repeat(np.array(lost), count)
    return np.concatenate(parts), bad, errors[0]
