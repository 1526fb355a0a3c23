"""One source in ``vsl`` mode: its pieces in buckets, and which piece each draw is.

The source's documents (:func:`streamload.streams.source_documents.source_document_bounds`)
are cut into pieces once (:mod:`streamload.modes.vsl.plan_cache`, cached). Each bucket (pieces of
one length) is an endless sequence of draws: draw ``d`` is slot ``d mod E`` of the bucket's
keyed permutation for epoch ``d // E`` (key: seed, that epoch, source, length), ``E`` the
pieces one epoch uses (:class:`streamload.modes.vsl.stream.VslStream` decides it and which draws
each step takes).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from streamload.catalog.sources import SourceCatalog
from streamload.config import DataConfig
from streamload.modes.vsl.plan_cache import buckets_of, load_piece_plan
from streamload.plan.permutation import KeyedPermutation, derive_key
from streamload.streams.source_documents import source_document_bounds
from streamload.streams.source_split import source_split
from streamload.streams.token_source import TokenSource

__all__ = ["VslSource"]


class VslSource(TokenSource):
    """The pieces of one source and the order of its epochs' steps.

    Args:
        config: The data config (``vsl`` mode).
        catalog: The described source.

    Raises:
        ConfigError: the source has no document long enough for a piece.
    """

    def __init__(self, config: DataConfig, catalog: SourceCatalog) -> None:
        self._bind(config, catalog)
        sampling = config.sampling
        self.split = source_split(config, catalog, self.shards)  # None: no split is set
        span = None if self.split is None else self.split.span
        self.pieces, self._arrays = load_piece_plan(
            config,
            catalog,
            lambda: source_document_bounds(config, catalog, self.shards, span),
            span,
        )
        tokens = int(sampling.tokens_per_batch)  # checked by config
        self.rows = tuple(tokens // length for length in self.pieces.lengths)
        """Pieces per global batch of each bucket."""
        self.epoch_slots = 0
        """Slots of ``max_seq_len`` inputs in one epoch (set by the stream: of the stream for
        a single source, of the source's own pieces in a mixture)."""

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["pieces"] = None  # rebuilt from the plan's arrays, which travel as paths
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        low = int(self.config.sampling.min_seq_len or 0)
        self.pieces = buckets_of(self._arrays, low, self.config.seq_len)

    @property
    def num_windows(self) -> int:
        """Slots of ``max_seq_len`` inputs in one epoch (:attr:`epoch_slots`)."""
        return self.epoch_slots

    @property
    def limit(self) -> int | None:
        """vsl mode has no source policy: a pass is one epoch."""
        return None

    @property
    def has_documents(self) -> bool:
        """Every piece lies inside one document: a chunk always knows where it starts."""
        return True

    def piece_ids(self, bucket: int, draws: np.ndarray, epoch_pieces: int) -> np.ndarray:
        """Piece ids (indices of ``self.pieces.starts``) of draws of ``bucket``, whose epochs
        use ``epoch_pieces`` of its pieces each."""
        draws = np.asarray(draws, dtype=np.int64)
        epochs, slots = np.divmod(draws, epoch_pieces)
        out = slots.copy()
        if self.config.sampling.shuffle:
            length, size = self.pieces.lengths[bucket], self.pieces.count(bucket)
            for epoch in np.unique(epochs).tolist():
                rows = epochs == epoch
                name = f"{self.name}/vsl/{length}"
                key = derive_key(seed=self.config.seed, epoch=epoch, stream=name)
                out[rows] = KeyedPermutation(size, key)(slots[rows])
        return int(self.pieces.offsets[bucket]) + out

    def bucket_of(self, pieces: np.ndarray) -> np.ndarray:
        """The bucket of each piece id."""
        return np.searchsorted(self.pieces.offsets, pieces, "right") - 1

    def read_pieces(self, pieces: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Tokens ``[n, L + 1]`` (file dtype) and stream offsets ``[n]`` of pieces of one
        bucket (length ``L``)."""
        starts = np.asarray(self.pieces.starts[pieces], dtype=np.int64)
        width = self._width(pieces)
        tokens = self.shards.windows(starts, width, self.shards.dtype)
        self.check_tokens(tokens, starts)
        return tokens, starts

    def read_piece_mask(self, starts: np.ndarray, width: int) -> np.ndarray | None:
        """Loss flags ``[n, width]`` of the pieces at ``starts`` (``None``: no mask files)."""
        if self.loss_masks is None:
            return None
        return self.loss_masks.windows(starts, width, np.dtype(np.uint8))

    def _width(self, pieces: np.ndarray) -> int:
        buckets = np.unique(self.bucket_of(pieces))
        if buckets.size != 1:
            raise ValueError(f"pieces of {buckets.size} lengths in one read")
        return self.pieces.lengths[int(buckets[0])] + 1

    def prefetch(self, local: np.ndarray) -> None:
        """Start fetching the pieces ``local`` from remote shards (a no-op locally)."""
        if not self.shards.remote:
            return
        ids = np.asarray(local, dtype=np.int64).ravel()
        buckets = self.bucket_of(ids)
        for bucket in np.unique(buckets).tolist():
            starts = np.asarray(self.pieces.starts[ids[buckets == bucket]], dtype=np.int64)
            width = self.pieces.lengths[bucket] + 1
            self.shards.prefetch(starts, width)
            if self.loss_masks is not None:
                self.loss_masks.prefetch(starts, width)

    def report(self, batches: tuple[int, ...] | None = None) -> dict[str, Any]:
        """The source's documents, pieces per length and dropped tails; with ``batches``
        (a single source's batches per length and epoch), the pieces each epoch leaves."""
        per_length = []
        for k, length in enumerate(self.pieces.lengths):
            row: dict[str, int] = {"length": length, "pieces": self.pieces.count(k)}
            if batches is not None:
                row["leftover_pieces"] = row["pieces"] - batches[k] * self.rows[k]
            per_length.append(row)
        return {
            "source": self.name,
            "documents": self.pieces.documents,
            "dropped_tokens": self.pieces.dropped_tokens,
            "lengths": per_length,
        }
