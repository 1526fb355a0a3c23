"""``sampling.mode = "vsl"``: variable sequence lengths, one length per global batch.

Dataset decomposition with a length curriculum (Pouransari et al. 2024; OLMo-core's
``NumpyVSLDataset``): documents are cut into pieces of power-of-two lengths
(:mod:`streamload.plan.vsl`), every global batch holds ``tokens_per_batch`` input tokens of
pieces of one length ``L`` (``tokens_per_batch / L`` rows of ``L + 1`` tokens), and the
curriculum orders an epoch's batches (:mod:`streamload.plan.vsl_curriculum`).

Everything above the source is concat mode's (:class:`~streamload.streams.concat.
ConcatStream`) with one change of unit: the cursor counts **slots** of ``max_seq_len``
inputs, and a global batch is always ``tokens_per_batch / max_seq_len`` slots, whatever its
length. So step ``s`` starts at slot ``s·U``; rank ``r`` of ``W`` takes rows
``[r·R/W, (r+1)·R/W)`` of the step's ``R`` rows (the same tokens on every rank); the state,
its checks and the resumption across world sizes and workers are unchanged. A chunk holds
one step (its rows have their own length). ``sample_index`` of a row is its piece's id in
its source's plan (the same piece in every epoch).

The epoch: bucket ``k`` gives ``m_k = (pieces of length L_k over all sources) // R_k``
batches (the pooled bucket sizes), which the curriculum orders. One source: each piece is
used at most once per epoch (its bucket's permutation for epoch ``e`` is read in its first
``m_k·R_k`` slots). Several sources (weights, ``[[schedule]]`` phases): every step's rows
are split among the sources that have pieces of its length by cumulative rounding of their
weights (:mod:`streamload.plan.vsl_mixture`), each source walking its own reshuffled epochs
of each bucket; a source without pieces of a length gives its share of those steps to the
others.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from streamload.catalog.sources import SourceCatalog
from streamload.config import DataConfig
from streamload.errors import ConfigError
from streamload.modes.vsl.draws import VslDraws
from streamload.modes.vsl.options import default_cycles, table_weights
from streamload.modes.vsl.plan_cache import LAYOUT
from streamload.modes.vsl.source import VslSource
from streamload.plan.mixture import Phase, phase_at
from streamload.plan.passes import PassPlan
from streamload.plan.vsl_curriculum import APPORTION, EpochOrder, epoch_order, table_order
from streamload.streams.chunks import (
    ChunkPlan,
    TokenChunk,
    new_loss_mask,
    put_loss_mask,
    put_rows,
)
from streamload.streams.cursor import StreamCursor
from streamload.streams.layout import BatchLayout
from streamload.streams.source_stream import SourceStream, mixture_phases

__all__ = ["VslStream", "unused_tokens_warning"]

_SEARCHED = 4096
"""Smaller ``tokens_per_batch`` values :func:`unused_tokens_warning` tries at most."""


class VslStream(SourceStream):
    """Global batches of one length each, in the curriculum's order (implements
    :class:`streamload.streams.interface.SampleStream`; samples are slots).

    Args:
        config: The data config (``vsl`` mode).
        catalogs: The described sources.

    Raises:
        ConfigError: no length has enough pieces for one global batch.
    """

    sources: tuple[VslSource, ...]
    max_chunk_batches = 1
    """A chunk is one step: its rows have the step's own length."""
    layout: BatchLayout

    def __init__(self, config: DataConfig, catalogs: tuple[SourceCatalog, ...]) -> None:
        self.config = config
        self.seq_len = config.seq_len
        self.sources = tuple(VslSource(config, c) for c in catalogs)
        self.is_mixture = False  # the weights split each step's rows: a plain slot cursor
        self.phases = ()
        self.ended_by: str | None = None
        sampling = config.sampling
        first = self.sources[0]
        self.lengths, self.rows = first.pieces.lengths, first.rows
        counts = np.array([np.diff(s.pieces.offsets) for s in self.sources], dtype=np.int64)
        self.batches = tuple((counts.sum(axis=0) // np.array(self.rows)).tolist())
        single = len(self.sources) == 1
        self.epoch_pieces = counts if not single else np.array([self.batches]) * self.rows
        """Pieces of bucket k an epoch of source s uses (a mixture: all of them)."""
        self.schedule = mixture_phases(config) if config.is_mixture else (Phase(0, (1.0,)),)
        self.order = self._epoch_order()
        self.slots = int(sampling.tokens_per_batch or 0) // self.seq_len
        self.layout = BatchLayout(  # a step's rows: pieces of one length, positions restart
            positions=True,
            label_padding=True,
            max_chunk_batches=self.max_chunk_batches,
            rows_per_sample=self.seq_len // int(sampling.min_seq_len or 1),
            unit="slots of max_seq_len",
            documents="pieces",
            epoch_is_pass=True,
        )
        if self.order.steps == 0:
            self._refuse_empty(counts)
        self._warn_unused(counts)
        for s, source in enumerate(self.sources):  # a mixture's source: its own pieces
            held = int(np.dot(counts[s], self.lengths)) // self.seq_len
            source.epoch_slots = max(self.order.steps * self.slots if single else held, 1)
        self.plan = PassPlan(
            name=first.name,
            num_windows=self.order.steps * self.slots,
            seed=config.seed,
            shuffle=sampling.shuffle,
            shuffle_block=0,
            num_samples=None,
        )
        self._steps: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # pass_steps, 2 kept
        self.draws = VslDraws(
            self.schedule,
            counts,
            self.rows,
            self.batches,
            self.order.steps,
            config.grad_accum_steps,
            self._buckets_before,
        )

    def _epoch_order(self) -> EpochOrder:
        """The order of an epoch's batches by the configured curriculum."""
        curriculum = self.config.sampling.curriculum
        if isinstance(curriculum, tuple):  # a table: phases of weights per length
            starts = [p.start_step for p in curriculum]
            weights = np.array(table_weights(curriculum, self.lengths))
            return table_order(self.batches, starts, weights)
        cycles = self.config.sampling.num_cycles or default_cycles(curriculum)
        return epoch_order(self.batches, curriculum.value, cycles)

    def _buckets_before(self, pass_index: int, step: int) -> np.ndarray:
        """Batches of each bucket in pass ``pass_index``'s steps before ``step``."""
        buckets, _ = self.pass_steps(pass_index)
        return np.bincount(buckets[:step], minlength=len(self.lengths))

    def _warn_unused(self, counts: np.ndarray) -> None:
        """A UserWarning when an epoch leaves most of the pieces' tokens unused."""
        tokens = int(self.config.sampling.tokens_per_batch or 0)
        unused = unused_tokens_warning(counts.sum(axis=0), self.lengths, self.order.steps, tokens)
        if unused is not None:
            warnings.warn(unused, UserWarning, stacklevel=3)

    def _refuse_empty(self, counts: np.ndarray) -> None:
        held = ", ".join(
            f"{n} of length {length}"
            for n, length in zip(counts.sum(axis=0).tolist(), self.lengths, strict=True)
        )
        raise ConfigError(
            f"no length has enough pieces for one global batch of tokens_per_batch = "
            f"{self.config.sampling.tokens_per_batch} (pieces: {held}); lower "
            "tokens_per_batch or add data"
        )

    @property
    def has_documents(self) -> bool:
        """A piece is part of one document: it starts at its row's start."""
        return True

    def _keys(self, pass_index: int) -> tuple[int, int, str] | None:
        if not self.config.sampling.shuffle:
            return None
        return (self.config.seed, pass_index, "+".join(s.name for s in self.sources))

    def step_length(self, pass_index: int, step: int) -> int:
        """Inputs per row of pass-relative ``step``."""
        return self.lengths[int(self.pass_steps(pass_index)[0][step])]

    def step_rows(
        self, pass_index: int, step: int, world_size: int = 1, rank: int = 0
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(source, piece id)`` of each of ``rank``'s rows of ``step`` (all rows:
        ``world_size = 1``), in the order the global batch holds them."""
        buckets, ranks = self.pass_steps(pass_index)
        bucket = int(buckets[step])
        batch = pass_index * self.batches[bucket] + int(ranks[step])  # of this bucket, in time
        sources, draws = self.draws.place(bucket, batch)
        pieces = np.empty(draws.size, dtype=np.int64)
        for s in np.unique(sources).tolist():
            mine = sources == s
            size = int(self.epoch_pieces[s, bucket])
            pieces[mine] = self.sources[s].piece_ids(bucket, draws[mine], size)
        share = pieces.size // world_size
        cut = slice(rank * share, (rank + 1) * share)
        return sources[cut], pieces[cut]

    def plan_chunk(
        self, cursor: StreamCursor, max_batches: int, global_batch: int, world_size: int, rank: int
    ) -> tuple[ChunkPlan, StreamCursor] | None:
        """``rank``'s rows of the step at ``cursor`` (one step per chunk); ``None`` at the
        pass end."""
        slots = self.slots
        if global_batch != slots:
            raise ConfigError(
                f"a global batch of {global_batch} samples, but in vsl mode it is "
                f"tokens_per_batch / max_seq_len = {slots} slots (batch_size x world_size)"
            )
        if self.batches_left(cursor, global_batch) == 0:
            return None
        step = cursor.sample // slots
        sources, pieces = self.step_rows(cursor.pass_index, step, world_size, rank)
        ids = pieces.reshape(1, -1)
        plan = ChunkPlan(cursor.pass_index, ids, sources.astype(np.int16).reshape(1, -1), ids)
        return plan, self.advance(cursor, 1, global_batch)

    def read_chunk(self, plan: ChunkPlan, documents: bool) -> TokenChunk:
        """Tokens ``[rows, L + 1]`` of a chunk's pieces (and, with ``documents``, their
        document starts: each row's first token)."""
        src, local = plan.sources.ravel(), plan.local_ids.ravel()
        dtype = np.result_type(*[s.shards.dtype for s in self.sources])
        width = self.sources[int(src[0])].pieces.lengths[0] if src.size else 0
        tokens = np.empty((0, 0), dtype=dtype)
        starts = np.empty(src.size, dtype=np.int64)
        loss_mask = None
        for index in np.unique(src).tolist():
            rows = np.flatnonzero(src == index)
            source = self.sources[index]
            part, part_starts = source.read_pieces(local[rows])
            if tokens.size == 0:
                width = part.shape[1]
                tokens = np.empty((src.size, width), dtype=dtype)
                loss_mask = new_loss_mask(self.sources, tokens.shape)
            tokens, starts = put_rows(tokens, rows, part), put_rows(starts, rows, part_starts)
            if loss_mask is not None:
                mask = source.read_piece_mask(part_starts, width)
                loss_mask = put_loss_mask(loss_mask, rows, mask)
        doc_starts = None
        if documents:
            doc_starts = np.zeros(tokens.shape, dtype=bool)
            doc_starts[:, 0] = True
        return TokenChunk(plan, tokens, starts, doc_starts, loss_mask=loss_mask)

    def locate(self, pass_index: int, samples: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Refused: a slot is no sample of its own in vsl mode (steps are; see
        :meth:`step_rows`)."""
        raise ConfigError(
            "vsl mode has no fixed-length samples to look up: a step's rows have the step's "
            "length (streamload samples lists steps; StreamLoader / StreamDataset deliver them)"
        )

    def source_positions(self, cursor: StreamCursor) -> dict[str, dict[str, int]]:
        """Per source: the slots of ``max_seq_len`` inputs it gave so far (its tokens //
        max_seq_len) and the epochs of its own pieces they make; one source gives every
        slot, and its epoch is the pass."""
        if len(self.sources) == 1:
            return super().source_positions(cursor)
        step, p = cursor.sample // self.slots, cursor.pass_index
        before = self._buckets_before(p, step)
        tokens = np.zeros(len(self.sources), dtype=np.int64)
        for k, length in enumerate(self.lengths):
            batches = p * self.batches[k] + int(before[k])
            tokens += self.draws.drawn(k, batches) * length
        out = {}
        for source, drawn in zip(self.sources, tokens.tolist(), strict=True):
            samples = int(drawn) // self.seq_len
            out[source.name] = {"epoch": samples // source.num_windows, "samples": samples}
        return out

    def pass_steps(self, pass_index: int) -> tuple[np.ndarray, np.ndarray]:
        """``(bucket, rank)`` of every step of a pass: its bucket (int8) and how many steps of
        that bucket come before it in the pass (int32). Computed once per pass (the
        curriculum's O(1) lookups, vectorized: ~5 bytes and well under a microsecond per
        step) and kept for the last two passes; a batch's draws follow from its rank, so
        they are taken in time order and a schedule phase starts exactly at its step."""
        if pass_index not in self._steps:
            steps = np.arange(self.order.steps, dtype=np.int64)
            buckets, _ = self.order.locate(steps, self._keys(pass_index))
            ranks = np.empty(buckets.size, dtype=np.int32)
            for k in range(len(self.lengths)):
                where = np.flatnonzero(buckets == k)
                ranks[where] = np.arange(where.size, dtype=np.int32)
            if len(self._steps) >= 2:
                self._steps.pop(next(iter(self._steps)))
            self._steps[pass_index] = (buckets.astype(np.int8), ranks)
        return self._steps[pass_index]

    def __getstate__(self) -> dict[str, Any]:
        return dict(self.__dict__, _steps={})  # workers read chunks; they plan nothing

    def fingerprint(self, cursor: StreamCursor | None = None) -> dict[str, Any]:
        """Concat mode's fingerprint plus what decides each step: the lengths, tokens per
        batch, curriculum and its cycles, and the decomposition rule."""
        out = super().fingerprint(cursor)
        sampling = self.config.sampling
        out["vsl"] = {
            "layout": LAYOUT,
            "min_seq_len": sampling.min_seq_len,
            "max_seq_len": self.seq_len,
            "tokens_per_batch": sampling.tokens_per_batch,
            "curriculum": _curriculum_key(sampling.curriculum),
            "num_cycles": sampling.num_cycles or default_cycles(sampling.curriculum),
            "rule": APPORTION,  # how counts per length and per source are rounded
        }
        if self.config.is_mixture:  # the phases used by a delivered batch (as concat mode's)
            done = 0 if cursor is None else cursor.pass_index * self.order.steps
            done += 0 if cursor is None else cursor.sample // self.slots
            accum = self.config.grad_accum_steps
            last = done // accum if done % accum else done // accum - 1
            started = self.schedule[: phase_at(self.schedule, max(last, 0)) + 1]
            out["vsl"]["schedule"] = [[p.start_step, list(p.weights)] for p in started]
        return out


def _curriculum_key(curriculum: Any) -> Any:
    """The curriculum as plain data: its name, or a table's ``[start_step, weights]``."""
    if isinstance(curriculum, tuple):
        return [[p.start_step, dict(sorted(p.weights.items()))] for p in curriculum]
    return curriculum.value


def unused_tokens_warning(
    pieces: np.ndarray, lengths: tuple[int, ...], steps: int, tokens_per_batch: int
) -> str | None:
    """Why an epoch leaves most tokens unused, or ``None`` when it uses at least half.

    A length's pieces fill ``pieces // rows`` batches (``rows = tokens_per_batch / length``);
    the rest of them wait for a later epoch, so with a large ``tokens_per_batch`` and few
    pieces of some lengths an epoch can leave most of the data out (docs/vsl.md).

    Args:
        pieces: Pieces of each length, all sources together ``[K]``.
        lengths: The lengths (powers of two, the last ``max_seq_len``).
        steps: Steps (global batches) of an epoch.
        tokens_per_batch: Input tokens per global batch.

    Returns:
        A one-paragraph warning naming ``tokens_per_batch`` and the largest smaller one (a
        multiple of ``max_seq_len``) whose epoch would use at least half, or ``None``.
    """
    sizes = np.asarray(lengths, dtype=np.int64)
    held = int(np.dot(pieces, sizes))
    used = steps * tokens_per_batch
    if 2 * used >= held:
        return None
    message = (
        f"vsl: an epoch uses {used:,} of the {held:,} tokens in pieces "
        f"({100 * used // held} %): with tokens_per_batch = {tokens_per_batch:,} "
        "the pieces of a length that do not fill a whole batch wait for later epochs"
    )
    # The epoch of smaller batches (multiples of max_seq_len no larger than the data, at most
    # _SEARCHED of them, evenly spaced): pooled batches x their tokens.
    top = min(tokens_per_batch // int(sizes[-1]) - 1, held // int(sizes[-1]))
    stride = max(1, -(-top // _SEARCHED))
    candidates = sizes[-1] * np.arange(top, 0, -stride, dtype=np.int64)
    rows = candidates[:, None] // sizes[None, :]
    fills = (np.asarray(pieces)[None, :] // rows).sum(axis=1) * candidates
    fits = np.flatnonzero(2 * fills >= held)
    if fits.size == 0:
        return f"{message}; no smaller tokens_per_batch uses half of them (too few pieces)"
    best = int(candidates[fits[0]])
    return (
        f"{message}; tokens_per_batch = {best:,} would use {int(fills[fits[0]]):,} "
        f"({100 * int(fills[fits[0]]) // held} %)"
    )
