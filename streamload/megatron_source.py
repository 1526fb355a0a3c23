"""One source as a Megatron ``IndexedDataset``: its sequences, and vectorized sample reads.

A source's sequences are its shards' sequences in listing order (for a Megatron ``.bin/.idx``
the ``.idx`` sequences, GPTDataset's "documents"; for other formats the format's documents),
as if ``tools/merge_datasets.py`` had merged the shards. A format without a document index
has no sequences and is rejected.

Reading a chunk is one gather: every sample spans a run of document-index positions; the
pieces (one per position) are listed with ``np.repeat`` and their tokens copied by one fancy
index per shard touched, never a Python loop over samples.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from streamload.catalog import SourceCatalog
from streamload.errors import ConfigError, FormatError
from streamload.ops.gather import ShardSet
from streamload.plan.megatron import GPTIndices

__all__ = ["PAD_TOKEN", "MegatronSource"]

PAD_TOKEN = -1
"""Megatron's pad id when the tokenizer has none: fills a short last sample's tail."""


class MegatronSource:
    """The sequences of one source and the reads of its ``GPTDataset`` samples.

    Args:
        catalog: The described source.
    """

    def __init__(self, catalog: SourceCatalog) -> None:
        self.catalog = catalog
        self.name = catalog.config.name
        self.shards = ShardSet(catalog.shards)
        jsonl = [s.path for s in catalog.shards if s.format == "jsonl"]
        if jsonl:
            raise ConfigError(
                f"source {self.name!r}: sampling.mode = 'megatron' reads token files; "
                f"{jsonl[0]} is a jsonl file (pre-tokenize it with streamload tokenize)"
            )
        skip = [s.path for s in catalog.shards if s.is_remote and s.storage.on_error == "skip"]
        if skip:
            # A sample spans pieces of several documents; zero-filling one in place is not
            # wired in this mode, so an unreadable piece must stop the job, never be guessed.
            raise ConfigError(
                f"source {self.name!r}: on_error = 'skip' is not supported with sampling.mode "
                f"= 'megatron' ({skip[0]}); use on_error = 'raise'"
            )
        bounds = [self._bounds(i) for i in range(len(catalog.shards))]
        self.shard_of_sequence = np.repeat(
            np.arange(len(bounds), dtype=np.int32), [b.shape[0] - 1 for b in bounds]
        )
        starts = [b[:-1] + self.shards.offsets[i] for i, b in enumerate(bounds)]
        self.sequence_starts = np.concatenate(starts) if starts else np.zeros(0, np.int64)
        lengths = np.concatenate([np.diff(b) for b in bounds])
        if lengths.size and int(lengths.max()) > np.iinfo(np.int32).max:
            raise FormatError(f"source {self.name!r}: a sequence holds more than 2**31 tokens")
        self.sequence_lengths = lengths.astype(np.int32)
        self.num_windows = 1
        self.limit: int | None = None  # no mixture policy: Megatron decides the epochs
        self.indices: GPTIndices | None = None
        self.extra = 1

    @property
    def num_sequences(self) -> int:
        """Sequences of the source (Megatron's ``num_elements``)."""
        return int(self.sequence_lengths.shape[0])

    @property
    def prefix(self) -> str | None:
        """The Megatron path prefix when the source is one ``.bin/.idx`` dataset."""
        shards = self.catalog.shards
        if len(shards) == 1 and shards[0].format == "megatron" and shards[0].path.endswith(".bin"):
            return shards[0].path[: -len(".bin")]
        return None

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

    def attach(self, indices: GPTIndices, tokens_per_epoch: int, seq_len: int, extra: int) -> None:
        """Use the built indices; ``num_windows`` becomes the samples of one data epoch."""
        self.indices = indices
        self.extra = extra
        self.num_windows = max(1, (tokens_per_epoch - extra) // seq_len)

    def read(self, local: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray]:
        """The ``text`` of GPTDataset samples ``local``, ``[n, width]``, and each row's length.

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
        source = np.repeat(self.sequence_starts[sequence] + start, size) + step
        target = np.repeat(row * width + in_row, size) + step
        padded = bool((lengths < width).any())
        out = np.full((n, width), PAD_TOKEN, np.int64) if padded else None
        flat = self._gather(source, np.repeat(self.shard_of_sequence[sequence], size))
        if out is None:
            out = flat.reshape(n, width)
        else:
            out.reshape(-1)[target] = flat
        return out, lengths

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
        stop = self.sequence_lengths[sequence].astype(np.int64)
        stop[first + pieces - 1] = end[:, 1] + self.extra
        return pieces, sequence, start, stop - start

    def prefetch(self, local: np.ndarray) -> None:
        """Start fetching the pieces of samples ``local`` from remote shards (the planner's
        lookahead; :mod:`streamload.remote.prefetch`); a no-op for local shards."""
        if not self.shards.remote or local.size == 0:
            return
        _, sequence, start, size = self._pieces(local)
        keep = size > 0
        sequence, start, size = sequence[keep], start[keep], size[keep]
        shard_ids = self.shard_of_sequence[sequence]
        begin = self.sequence_starts[sequence] + start - self.shards.offsets[shard_ids]
        self.shards.prefetch_pieces(shard_ids, begin, size)

    def _gather(self, offsets: np.ndarray, shard_ids: np.ndarray) -> np.ndarray:
        """Tokens at source stream offsets (pieces never cross shards)."""
        shards = self.shards
        out = np.empty(offsets.shape[0], dtype=shards.dtype)
        touched = np.unique(shard_ids).tolist() if len(shards.shards) > 1 else [0]
        for sid in touched:
            where = slice(None) if len(touched) == 1 else shard_ids == sid
            local = offsets[where] - shards.offsets[sid]
            if local.size == 0:
                continue
            shard = shards.shard(sid)
            array = getattr(shard, "remote_array", None)
            if array is not None:  # remote: only the pieces, all requested at once
                out[where] = _read_runs(array, local)
                continue
            low, high = int(local.min()), int(local.max()) + 1
            out[where] = shard.tokens(low, high)[local - low]
        return out


def _read_runs(array: Any, local: np.ndarray) -> np.ndarray:
    """Tokens at shard offsets ``local`` of a remote token array, read as the runs of
    consecutive offsets they form (one range each, scheduled together; the store coalesces
    near neighbours).

    Raises:
        RemoteReadError: a run stayed unreadable (named by the store).
    """
    cut = np.flatnonzero(np.diff(local) != 1) + 1
    first = local[np.concatenate([[0], cut])]
    count = np.diff(np.concatenate([[0], cut, [local.shape[0]]]))
    size = array.dtype.itemsize
    begin = array.offset + first * size
    got = array.store.read_many(array.obj, begin, begin + count * size)
    for item in got:
        if isinstance(item, Exception):
            raise item
    return np.concatenate([np.frombuffer(item, array.dtype) for item in got])
