"""One source's samples made of whole documents: local sample ``j`` → its items → tokens.

The source's documents (the format's index, else EOS: :func:`streamload.formats.documents.
document_bounds`, what ``streamload docs`` returns) become items of at most ``seq_len + 1``
tokens (:func:`streamload.plan.packing.document_items`); ``packed`` mode packs them best-fit
into samples, ``padded`` mode gives each its own sample (:mod:`streamload.plan.packing`).
Which items a sample holds is fixed per (data, config), built once and cached on disk
(:mod:`streamload.modes.packed.plan_cache`); each epoch visits the samples in its own keyed
permutation (:class:`streamload.plan.passes.PassPlan`), exactly as concat windows.

A sample's row is its items, contiguous from position 0 in storage order, then
``pad_token_id`` to ``seq_len + 1`` tokens; :meth:`PackedSource.read_rows` also returns each
row's data length and where its documents (items) start, for labels and masks.
"""

from __future__ import annotations

import numpy as np

from streamload.catalog.readable import without_unreadable_documents
from streamload.catalog.sources import SourceCatalog
from streamload.config import DataConfig
from streamload.errors import ConfigError, RemoteReadError
from streamload.formats.base import TokenShard
from streamload.modes.packed.plan_cache import load_plan
from streamload.modes.packed.trained import trained_labels
from streamload.plan.passes import PassPlan
from streamload.streams.shard_set import ShardSet
from streamload.streams.source_documents import source_document_bounds
from streamload.streams.source_split import source_split
from streamload.streams.token_source import TokenSource

__all__ = ["PackedSource", "RowBlock"]

RowBlock = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]
"""``(tokens [n, seq_len + 1], first item start [n], data length [n], document starts
[n, seq_len + 1] bool, skipped [n] bool, loss mask [n, seq_len + 1] uint8 or None)`` of a
block of samples; a row is skipped when one of its items stayed unreadable under
``on_error = "skip"`` (its tokens are zeros); the loss mask (the shards' mask files, zero
over the padding) is ``None`` when the source has none."""

_MIN_READ = 64
"""Narrowest read: items are read in width classes 64, 128, … ``seq_len + 1`` tokens."""


class PackedSource(TokenSource):
    """Samples of whole documents of one source, indexed by the source-local index ``j``.

    Shares :class:`TokenSource`'s policy, vocabulary and document rules; only what a
    sample holds differs.

    Args:
        config: The data config (``packed`` or ``padded`` mode).
        catalog: The described source.

    Raises:
        ConfigError: the source holds no document, or has neither a document index nor an
            ``eos_token_id`` to find its documents.
    """

    def __init__(self, config: DataConfig, catalog: SourceCatalog) -> None:
        self.pad_token_id = int(config.pad_token_id)  # type: ignore[arg-type]  # checked by config
        try:
            self._plan_from(config, catalog)
        except RemoteReadError:
            # Building the plan read every shard's documents, and one stayed unreadable: under
            # on_error = "skip" it is left out like an unreadable header (docs/remote.md), and
            # the plan of the shards kept is cached under their own description. A plan found
            # in the cache reads no document, so a warm start never pays this walk.
            kept = without_unreadable_documents(catalog, config.eos_token_id)
            if kept is catalog:
                raise
            self._plan_from(config, kept)
        self.order = PassPlan(
            name=self.name,
            num_windows=self.plan.num_samples,
            seed=config.seed,
            shuffle=config.sampling.shuffle,
            shuffle_block=config.sampling.shuffle_block,  # with group_size: nearby items
            num_samples=None,
        )
        self._counted = (0, 0, (0, 0, 0))  # (epoch, samples, totals) last counted by drawn()

    def _plan_from(self, config: DataConfig, catalog: SourceCatalog) -> None:
        """Bind the described shards, then the split and the plan of exactly those shards."""
        self._bind(config, catalog)
        if not np.can_cast(np.min_scalar_type(self.pad_token_id), self.shards.dtype):
            raise ConfigError(
                f"pad_token_id = {self.pad_token_id} does not fit source {self.name!r}'s "
                f"token dtype {self.shards.dtype.name}; pick a pad id the dtype holds"
            )
        self.split = source_split(config, catalog, self.shards)  # None: no split is set
        self.plan = load_plan(config, catalog, self._document_bounds, self._span)

    @property
    def num_windows(self) -> int:
        """Samples in one epoch of this source."""
        return self.plan.num_samples

    def packing_report(self) -> dict[str, int | float]:
        """One epoch of this source: documents, items, samples, data, padding and truncated
        tokens, and the samples over the bound ``ceil(data / (seq_len + 1))`` in percent;
        documents truncated or dropped (``long_documents``); label positions
        (``samples · seq_len``) and those trained (:mod:`.trained`: reads the loss masks
        once, where the source has them)."""
        width = self.seq_len + 1
        data, samples = self.plan.data_tokens, self.plan.num_samples
        bound = -(-data // width)
        first = np.zeros(self.plan.num_items, dtype=bool)
        first[self.plan.offsets[:-1]] = True
        trained = trained_labels(
            self.plan.starts, self.plan.lengths, first, self.loss_masks,
            self.config.packing.masks,
        )  # fmt: skip
        return {
            "documents": self.plan.documents,
            "items": self.plan.num_items,
            "samples": samples,
            "data_tokens": data,
            "padding_tokens": samples * width - data,
            "truncated_tokens": self.plan.truncated_tokens,
            "samples_over_bound_pct": round(100.0 * (samples - bound) / bound, 4),
            "truncated_documents": int(self.plan.cut_items.size),
            "dropped_documents": self.plan.dropped_documents,
            "dropped_tokens": self.plan.dropped_tokens,
            "label_tokens": samples * self.seq_len,
            "trained_tokens": trained,
        }

    def drawn(self, samples: int) -> dict[str, int]:
        """What the source's first ``samples`` samples (all epochs) hold: items, data,
        padding and truncated tokens. Incremental: a call after a later position costs only
        the samples between (a resumed run pays its epoch's position once)."""
        n, width = self.plan.num_samples, self.seq_len + 1
        epoch, into = divmod(samples, n)
        last_epoch, last_into, totals = self._counted
        if (epoch, into) != (last_epoch, last_into):
            begin = last_into if epoch == last_epoch and into >= last_into else 0
            base = totals if begin else (0, 0, 0)
            local = np.arange(epoch * n + begin, epoch * n + into, dtype=np.int64)
            more = self.plan.totals(self.order.window_ids(0, local))
            totals = (base[0] + more[0], base[1] + more[1], base[2] + more[2])
            self._counted = (epoch, into, totals)
        whole = (self.plan.num_items, self.plan.data_tokens, self.plan.truncated_tokens)
        items, data, cut = (epoch * w + t for w, t in zip(whole, totals, strict=True))
        return {
            "items": items,
            "data_tokens": data,
            "padding_tokens": samples * width - data,
            "truncated_tokens": cut,
        }

    def _document_bounds(self) -> np.ndarray:
        """Stream offsets of every document of the source, shard by shard (int64 ``[d + 1]``);
        with a split, those of the split's documents only."""
        return source_document_bounds(self.config, self.catalog, self.shards, self._span)

    @property
    def _span(self) -> tuple[int, int] | None:
        """The token range of the split this stream reads (``None``: no split is set)."""
        return None if self.split is None else self.split.span

    def _items_of(self, local: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Items of the samples at source-local indices: ``(row of each item, item ids,
        position of each item in its row)``, rows in the order of ``local``."""
        slots = self.order.window_ids(0, np.asarray(local, dtype=np.int64).ravel())
        first, last = self.plan.offsets[slots], self.plan.offsets[slots + 1]
        counts = last - first
        rows = np.repeat(np.arange(slots.size), counts)
        begin = np.cumsum(counts) - counts
        flat = np.arange(rows.size) - np.repeat(begin, counts) + np.repeat(first, counts)
        items = flat  # the plan is in sample order: a sample's items are a range
        lengths = self.plan.lengths[items].astype(np.int64)
        before = np.cumsum(lengths) - lengths  # tokens of the block before each item
        return rows, items, before - before[begin][rows]  # every sample has an item

    def window_starts(self, local: np.ndarray) -> np.ndarray:
        """Stream offset of each sample's first item (any shape)."""
        ids = np.asarray(local, dtype=np.int64)
        slots = self.order.window_ids(0, ids.ravel())
        return self.plan.starts[self.plan.offsets[slots]].reshape(ids.shape)

    def prefetch(self, local: np.ndarray) -> None:
        """Start fetching the items of source-local samples from remote shards."""
        if self.shards.remote:
            _, items, _ = self._items_of(local)
            for _, begin, read in self._reads(items):  # the very ranges read_rows gathers
                self.shards.prefetch(begin, read)
                if self.loss_masks is not None:
                    self.loss_masks.prefetch(begin, read)

    def stream_offset(self, local: int, start: int, position: int) -> int | None:
        """Where ``position`` of sample ``local`` lies in the source's tokens: inside one of
        its items; ``None`` in the padding after them."""
        slot = int(self.order.window_ids(0, np.array([local], dtype=np.int64))[0])
        first, last = int(self.plan.offsets[slot]), int(self.plan.offsets[slot + 1])
        lengths = np.asarray(self.plan.lengths[first:last], dtype=np.int64)
        ends = np.cumsum(lengths)
        item = int(np.searchsorted(ends, position, side="right"))
        if item == lengths.size:
            return None  # padding after the items
        return int(self.plan.starts[first + item]) + position - int(ends[item] - lengths[item])

    def read(self, local: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Tokens ``[n, seq_len + 1]`` (padded) and each sample's first item offset ``[n]``."""
        tokens, starts, *_ = self.read_rows(local)
        return tokens, starts

    def read_rows(self, local: np.ndarray) -> RowBlock:
        """The rows of source-local samples: tokens, first item offsets, data lengths and
        document (item) starts; see :data:`RowBlock`."""
        rows, items, positions = self._items_of(local)
        n, width = np.asarray(local).size, self.seq_len + 1
        tokens = np.full((n, width), self.pad_token_id, dtype=self.shards.dtype)
        lengths = self.plan.lengths[items].astype(np.int64)
        pairs = [(self.shards, tokens)]
        loss_mask = None
        if self.loss_masks is not None:  # zero over the padding: a pad label is untrained
            loss_mask = np.zeros((n, width), dtype=np.uint8)
            pairs.append((self.loss_masks, loss_mask))
        unread = self._gather_items(pairs, items, rows, positions)
        self._check_items(items, rows, positions, tokens)
        data = np.bincount(rows, lengths, n).astype(np.int64)
        doc_starts = np.zeros((n, width), dtype=bool)
        doc_starts[rows, positions] = True
        padded = np.flatnonzero(data < width)
        doc_starts[padded, data[padded]] = True  # the padding is the row's last segment
        skipped = np.bincount(rows[unread], minlength=n) > 0
        first = self.plan.starts[items[np.searchsorted(rows, np.arange(n))]]  # rows ascend
        return tokens, first, data, doc_starts, skipped, loss_mask

    def _reads(self, items: np.ndarray) -> list[tuple[np.ndarray, np.ndarray, int]]:
        """How the items are read: per width class (64, 128, … ``seq_len + 1`` tokens, at most
        twice an item's tokens), ``(which items, read starts, width)``; a read that would pass
        the source's end starts earlier, so it still holds its item."""
        total = self.shards.num_tokens
        lengths = self.plan.lengths[items]
        classes = np.maximum(_MIN_READ, 1 << np.ceil(np.log2(np.maximum(lengths, 1))).astype(int))
        classes = np.minimum(classes, min(self.seq_len + 1, total))
        out = []
        for read in np.unique(classes).tolist():
            pick = np.flatnonzero(classes == read)
            out.append((pick, np.minimum(self.plan.starts[items[pick]], total - read), read))
        return out

    def _gather_items(
        self,
        pairs: list[tuple[ShardSet, np.ndarray]],
        items: np.ndarray,
        rows: np.ndarray,
        positions: np.ndarray,
    ) -> np.ndarray:
        """Copy each item's values from each ``(shards, out)`` pair (the tokens, and the
        loss masks) into ``out[row, position:position + length]``: local shards one slice
        copy per item (:meth:`_copy_local_items`), remote ones one :meth:`ShardSet.gather`
        per width class (:meth:`_reads`), then one slice copy per item.

        Returns:
            Which items stayed unreadable (skipped under ``on_error = "skip"``), bool ``[k]``.
        """
        unread = np.zeros(items.size, dtype=bool)
        if not any(shards.remote for shards, _ in pairs):
            self._copy_local_items(pairs, items, rows, positions)
            return unread
        starts, lengths = self.plan.starts[items], self.plan.lengths[items].astype(np.int64)
        for shards, out in pairs:
            for pick, begin, read in self._reads(items):
                block = np.empty((pick.size, read), dtype=out.dtype)
                shards.take_skipped()  # only this read's skipped windows below
                shards.gather(begin, block)
                unread[pick] |= np.isin(begin, shards.take_skipped())
                # One slice copy per item: a per-token fancy-index scatter (index arrays of
                # every token, then a random-access copy) cost 3.6x this loop at ~2.7 items
                # per row.
                places = zip(
                    rows[pick].tolist(),
                    positions[pick].tolist(),
                    (starts[pick] - begin).tolist(),
                    lengths[pick].tolist(),
                    strict=True,
                )
                for line, (row, position, shift, size) in zip(block, places, strict=True):
                    out[row, position : position + size] = line[shift : shift + size]
        return unread

    def _copy_local_items(
        self,
        pairs: list[tuple[ShardSet, np.ndarray]],
        items: np.ndarray,
        rows: np.ndarray,
        positions: np.ndarray,
    ) -> None:
        """Local shards: copy each item straight from its shard into ``out[row, position:]``
        of each pair, one copy of its own values (an item never crosses a shard end:
        documents are found shard by shard). The tokens and their loss masks are copied in
        one loop: the per-item step, not the bytes, is what this costs."""
        starts, sizes = self.plan.starts[items], self.plan.lengths[items]
        offsets = pairs[0][0].offsets  # a mask set has its token set's offsets
        sids = np.searchsorted(offsets, starts, side="right") - 1
        order = np.argsort(sids, kind="stable")  # by shard: each shard held once, then let go
        targets = (rows * pairs[0][1].shape[1] + positions)[order]  # row-major offsets
        begins, sizes, sids = (starts - offsets[sids])[order], sizes[order], sids[order]
        present, firsts = np.unique(sids, return_index=True)
        edges = [*firsts.tolist(), int(sids.shape[0])]
        flat = [out.reshape(-1) for _, out in pairs]
        for at, sid in enumerate(present.tolist()):
            # a shard's values as one mapped array (a slice per item, no call), or for a
            # shard held in pieces (Arrow record batches, Parquet row groups) its reader,
            # sliced per item: slicing one array out of it would copy or decode it all
            whole = [_sliceable(shards.shard(sid)) for shards, _ in pairs]
            lo, hi = edges[at], edges[at + 1]
            places = zip(targets[lo:hi].tolist(), begins[lo:hi].tolist(),
                         sizes[lo:hi].tolist(), strict=True)  # fmt: skip
            if len(pairs) == 1:
                (source,), (target_out,) = whole, flat
                for target, begin, size in places:
                    target_out[target : target + size] = source[begin : begin + size]
                continue
            (source, mask_source), (target_out, mask_out) = whole, flat
            for target, begin, size in places:
                target_out[target : target + size] = source[begin : begin + size]
                mask_out[target : target + size] = mask_source[begin : begin + size]

    def _check_items(
        self, items: np.ndarray, rows: np.ndarray, positions: np.ndarray, out: np.ndarray
    ) -> None:
        """:meth:`check_tokens` of the items' tokens in ``out`` (the padding is a valid id:
        the config holds ``pad_token_id`` below ``vocab_size``); a bad token is located
        through its item, as a row of ``out`` is not one stream range."""
        found = self.first_bad_token(out)
        if found is None:
            return
        row, col = found
        item = np.flatnonzero((rows == row) & (positions <= col))[-1]  # rows ascend
        offset = int(self.plan.starts[items[item]]) + col - int(positions[item])
        self.refuse_token(offset, int(out[row, col]))


class _ShardSlices:
    """A shard that is not one array (record batches, row groups), sliced like one: ``[a:b]``
    is ``shard.tokens(a, b)``, a view of one piece or a copy of the few pieces it spans."""

    def __init__(self, shard: TokenShard) -> None:
        self._shard = shard

    def __getitem__(self, span: slice) -> np.ndarray:
        return self._shard.tokens(span.start, span.stop)


def _sliceable(shard: TokenShard) -> np.ndarray | _ShardSlices:
    """A shard's values sliceable per item: the mapped array of a shard that is one
    (``remote_array`` is ``None``: a memory map, one record batch), else :class:`_ShardSlices`."""
    if getattr(shard, "remote_array", True) is None:
        return shard.tokens(0, shard.info.num_tokens)
    return _ShardSlices(shard)
