"""One source in ``vsl`` mode: its pieces in buckets, and which pieces each step takes.

The source's documents (:func:`streamload.streams.source_documents.source_document_bounds`)
are cut into pieces once (:mod:`streamload.streams.vsl_plan`, cached). Bucket ``k`` (pieces
of ``L_k`` inputs) gives ``R_k = tokens_per_batch / L_k`` pieces to each of its
``pieces_k // R_k`` batches per epoch; the curriculum orders an epoch's batches
(:mod:`streamload.plan.vsl_curriculum`) and each bucket's pieces are shuffled per epoch by
their own keyed permutation, so step ``s`` of epoch ``e`` is a pure function of
``(data, config, seed, e, s)``, computed in O(1).

The loader counts *slots* of ``max_seq_len`` inputs: every step is ``tokens_per_batch /
max_seq_len`` of them, so :attr:`VslSource.num_windows` (the slots of one epoch) is what the
stream's cursor and the loader's stats count.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from streamload.catalog.sources import SourceCatalog
from streamload.config import DataConfig
from streamload.config.vsl import default_cycles
from streamload.errors import ConfigError
from streamload.plan.permutation import KeyedPermutation, derive_key
from streamload.plan.vsl_curriculum import EpochOrder, epoch_order
from streamload.streams.concat_source import ConcatSource
from streamload.streams.source_documents import source_document_bounds
from streamload.streams.source_split import source_split
from streamload.streams.vsl_plan import buckets_of, load_piece_plan

__all__ = ["VslSource"]


class VslSource(ConcatSource):
    """The pieces of one source and the order of its epochs' steps.

    Args:
        config: The data config (``vsl`` mode).
        catalog: The described source.

    Raises:
        ConfigError: the source has no documents to cut, or too few pieces for one batch.
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
        tokens = int(sampling.tokens_per_batch)  # type: ignore[arg-type]  # checked by config
        self.rows = tuple(tokens // length for length in self.pieces.lengths)
        """Pieces per global batch of each bucket."""
        self.slots = tokens // config.seq_len
        """Slots of ``max_seq_len`` inputs per global batch."""
        self.batches = tuple(
            self.pieces.count(k) // r for k, r in enumerate(self.rows)
        )  # per epoch, per bucket
        cycles = sampling.num_cycles or default_cycles(sampling.curriculum)
        self.epoch_order: EpochOrder = epoch_order(self.batches, sampling.curriculum.value, cycles)
        if self.epoch_order.steps == 0:
            self._refuse_empty(tokens)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["pieces"] = None  # rebuilt from the plan's arrays, which travel as paths
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        low = int(self.config.sampling.min_seq_len or 0)
        self.pieces = buckets_of(self._arrays, low, self.config.seq_len)

    def _refuse_empty(self, tokens: int) -> None:
        counts = ", ".join(
            f"{n} of {length}"
            for n, length in zip(
                np.diff(self.pieces.offsets).tolist(), self.pieces.lengths, strict=True
            )
        )
        raise ConfigError(
            f"source {self.name!r}: no length has enough pieces for one global batch of "
            f"tokens_per_batch = {tokens} (pieces: {counts}); lower tokens_per_batch or add data"
        )

    @property
    def num_windows(self) -> int:
        """Slots of ``max_seq_len`` inputs in one epoch (steps × slots per step)."""
        return self.epoch_order.steps * self.slots

    @property
    def limit(self) -> int | None:
        """vsl mode has no source policy: a pass is one epoch."""
        return None

    @property
    def has_documents(self) -> bool:
        """Every piece lies inside one document: a chunk always knows where it starts."""
        return True

    def step_pieces(self, epoch: int, step: int) -> tuple[int, np.ndarray]:
        """``(bucket, piece ids [R])`` of epoch-relative ``step`` (piece ids index
        ``self.pieces.starts``), in the order the global batch holds them."""
        shuffle = self.config.sampling.shuffle
        keys = (self.config.seed, epoch, self.name) if shuffle else None
        bucket, index = (int(v) for v in self.epoch_order.locate(np.array(step), keys))
        rows = self.rows[bucket]
        slots = np.arange(index * rows, (index + 1) * rows, dtype=np.int64)
        if shuffle:
            length = self.pieces.lengths[bucket]
            key = derive_key(seed=self.config.seed, epoch=epoch, stream=f"{self.name}/vsl/{length}")
            slots = KeyedPermutation(self.pieces.count(bucket), key)(slots)
        return bucket, int(self.pieces.offsets[bucket]) + slots

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

    def report(self) -> dict[str, object]:
        """One epoch of the source: documents, pieces, batches and tokens per length, and
        the tokens in no batch (dropped tails, and each bucket's leftover pieces)."""
        per_length = []
        for k, length in enumerate(self.pieces.lengths):
            pieces, used = self.pieces.count(k), self.batches[k] * self.rows[k]
            per_length.append(
                {
                    "length": length,
                    "pieces": pieces,
                    "batches": self.batches[k],
                    "tokens": used * length,
                    "leftover_pieces": pieces - used,
                }
            )
        leftover = sum(p["leftover_pieces"] * p["length"] for p in per_length)
        return {
            "documents": self.pieces.documents,
            "steps": self.epoch_order.steps,
            "tokens": self.epoch_order.steps * self.slots * self.seq_len,
            "dropped_tokens": self.pieces.dropped_tokens,
            "leftover_tokens": leftover,
            "lengths": per_length,
        }
