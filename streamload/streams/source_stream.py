"""The machinery every source-based sampling mode shares: passes, mixtures, the cursor.

:class:`SourceStream` walks the global sample stream of one or more sources whose samples are
numbered per source (``source.num_windows`` per epoch); a mode supplies its source class (what
source-local sample ``j`` holds) and its ``read_chunk`` (how a chunk's samples become tokens),
and inherits everything positional: sample ``g`` is a pure function of (data, config, seed),
walked by a cursor (docs/design.md §1).

* One source: pass ``p``, pass-relative sample ``g`` → the source's sample ``g`` (with
  ``num_samples``) or ``p·n + g`` (one epoch per pass). Random access is O(1).
* A mixture: optimizer step ``k`` (``global_batch_size`` samples: ``grad_accum_steps``
  global batches) is allocated to sources by :mod:`streamload.plan.mixture` (``per_source``:
  all to one), then cut into its global batches in order; source-local indices continue. The
  cursor carries the per-source counts at the start of the step in progress, so resuming is
  O(1) (inside a step, that step is allocated again); random access (``streamload samples``)
  replays counts only.
* A pass delivers whole optimizer steps only (its last partial step is dropped).

World size, workers and prefetch only decide who reads a sample and when.
"""

from __future__ import annotations

import functools
from dataclasses import replace
from typing import Any, TypeVar

import numpy as np

from streamload.catalog.sources import SourceCatalog, describe_sources
from streamload.config import DataConfig
from streamload.config.batch_schedule import (
    batch_schedule_fingerprint,
    has_batch_ramp,
    step_sizes,
)
from streamload.config.seq_len import seq_len_schedule
from streamload.plan.mixture import (
    ALLOCATION,
    MixtureCursor,
    Phase,
    advance_cursor,
    allocate_batches,
    effective_weights,
    phase_at,
)
from streamload.plan.partition import (
    chunk_sample_ids,
    rank_share,
    step_batches_left,
    walk_steps,
)
from streamload.plan.passes import PassPlan
from streamload.plan.permutation import ALGORITHM
from streamload.plan.seq_len import CUT, SeqLenSchedule
from streamload.plan.split import split_matrix
from streamload.plan.step_sizes import StepSizes
from streamload.streams.chunks import (
    ChunkPlan,
    TokenChunk,
    source_window_starts,
)
from streamload.streams.cursor import StreamCursor
from streamload.streams.layout import BatchLayout
from streamload.streams.mixture_steps import mixture_samples, step_start
from streamload.streams.seq_len import batches_to_switch, schedule_step
from streamload.streams.token_source import TokenSource

__all__ = ["SourceStream", "mixture_phases"]

_Stream = TypeVar("_Stream", bound="SourceStream")


class SourceStream:
    """The positional part of a source-based mode's stream (with a mode's ``read_chunk`` it
    implements :class:`streamload.streams.interface.SampleStream`).

    Args:
        config: The data config.
        catalogs: Described sources, one per ``config.sources`` entry.
    """

    source_class: type[TokenSource] = TokenSource
    """How one source's local sample ``j`` becomes tokens (a mode sets its own)."""
    layout: BatchLayout = BatchLayout()
    """What the mode's batches hold beyond the common layout (a mode sets its own)."""
    seq_schedule: SeqLenSchedule | None = None
    """Row lengths by step (``[[seq_len_schedule]]``; ``None``: every row a window)."""

    def __init__(self, config: DataConfig, catalogs: tuple[SourceCatalog, ...]) -> None:
        self.config = config
        self.seq_len = config.seq_len
        self.sources = tuple(self.source_class(config, c) for c in catalogs)
        self.is_mixture = config.is_mixture
        self.phases = mixture_phases(config) if self.is_mixture else ()
        first = self.sources[0]
        self.plan = PassPlan(
            name=first.name,
            num_windows=first.num_windows,
            seed=config.seed,
            shuffle=config.sampling.shuffle,
            shuffle_block=config.sampling.shuffle_block,
            num_samples=config.sampling.num_samples,
        )
        self.ended_by: str | None = None
        self.seq_schedule = schedule = seq_len_schedule(config)
        if schedule is not None:  # a window becomes up to this many rows (sizes worker slots)
            cut = max(self.seq_len // length for _, length in schedule.phases)
            self.layout = replace(self.layout, rows_per_sample=max(cut, 1))

    @classmethod
    def from_config(cls: type[_Stream], config: DataConfig) -> _Stream:
        """Describe every source (listing and headers only) and build the stream."""
        return cls(config, describe_sources(config))

    # -- shape of the stream -------------------------------------------------------------
    @property
    def pass_length(self) -> int | None:
        """Samples in one pass (``None``: an endless mixture)."""
        if self.is_mixture:
            return self.config.sampling.num_samples
        limit = self.sources[0].limit  # policy / max_epochs: a pass of num_samples may span epochs
        return self.plan.pass_length if limit is None else min(self.plan.pass_length, limit)

    @property
    def num_windows(self) -> int:
        """Windows in one epoch of the (first) source."""
        return self.sources[0].num_windows

    @property
    def has_documents(self) -> bool:
        """Whether every source's format records document boundaries."""
        return all(s.has_documents for s in self.sources)

    def start(self, pass_index: int = 0) -> StreamCursor:
        """The cursor at the start of a pass."""
        mixture = MixtureCursor.start(len(self.sources)) if self.is_mixture else None
        return StreamCursor(pass_index, 0, mixture)

    def batches_left(self, cursor: StreamCursor, global_batch: int) -> int | None:
        """Global batches left in the cursor's pass, of whole optimizer steps only (``None``:
        endless)."""
        length = self.pass_length
        if length is None:
            return None
        steps = step_sizes(self.config, global_batch, cursor.pass_index)
        done, size = cursor.in_step, cursor.step_size
        return step_batches_left(length, cursor.sample, done, size, global_batch, steps)

    def next_pass(self, cursor: StreamCursor) -> StreamCursor:
        """The start of the pass after the cursor's."""
        return self.start(cursor.pass_index + 1)

    def advance(self, cursor: StreamCursor, batches: int, global_batch: int) -> StreamCursor:
        """The cursor after ``batches`` more delivered global batches (a mixture's counts move
        by whole optimizer steps; the position inside a step is ``in_step``)."""
        steps = step_sizes(self.config, global_batch, cursor.pass_index)
        finished, runs, done, size = walk_steps(
            cursor.in_step, cursor.step_size, batches * global_batch, steps, cursor.sample
        )
        mixture = cursor.mixture
        if mixture is not None:
            if finished:
                mixture = advance_cursor(self.phases, cursor.step_size, mixture, 1)
            for run_size, count in runs:
                mixture = advance_cursor(self.phases, run_size, mixture, count)
        return replace(
            cursor,
            sample=cursor.sample + batches * global_batch,
            mixture=mixture,
            in_step=done,
            step_size=size,
        )

    # -- planning ------------------------------------------------------------------------
    def plan_chunk(
        self, cursor: StreamCursor, max_batches: int, global_batch: int, world_size: int, rank: int
    ) -> tuple[ChunkPlan, StreamCursor] | None:
        """Up to ``max_batches`` batches of ``rank`` from ``cursor``; ``None`` once it ended.
        Under a sequence-length schedule a chunk stops before a change of length and its plan
        carries its steps' length (:mod:`streamload.streams.seq_len`)."""
        schedule = self.seq_schedule
        if schedule is None:
            return self._plan_windows(cursor, max_batches, global_batch, world_size, rank)
        step, until = batches_to_switch(schedule, cursor, self.pass_length, global_batch)
        count = max_batches if until is None else min(max_batches, until)
        planned = self._plan_windows(cursor, count, global_batch, world_size, rank)
        length = schedule.length_at(step)
        if planned is None or length == self.seq_len:
            return planned
        return replace(planned[0], row_length=length), planned[1]

    def _plan_windows(
        self, cursor: StreamCursor, max_batches: int, global_batch: int, world_size: int, rank: int
    ) -> tuple[ChunkPlan, StreamCursor] | None:
        left = self.batches_left(cursor, global_batch)
        count = max_batches if left is None else min(max_batches, left)
        if count == 0:
            length = self.pass_length
            if not self.is_mixture and length is not None and length < self.plan.pass_length:
                self.ended_by = self._policy_end(self.sources[0], length, "the end of the pass")
            return None
        if cursor.mixture is None:
            ids = chunk_sample_ids(cursor.sample, 0, count, global_batch, world_size, rank)
            local = self._single_local(cursor.pass_index, ids)
            plan = ChunkPlan(cursor.pass_index, ids, np.zeros(ids.shape, np.int16), local)
            return plan, self.advance(cursor, count, global_batch)
        steps = step_sizes(self.config, global_batch, cursor.pass_index)
        samples = count * global_batch
        sources, local = mixture_samples(self.phases, self._allocate, cursor, samples, steps)
        count = min(count, sources.size // global_batch)
        if count == 0:
            return None
        sources = sources[: count * global_batch].reshape(count, global_batch)
        local = local[: count * global_batch].reshape(count, global_batch)
        offset, per_rank = rank_share(global_batch, world_size, rank)
        ids = chunk_sample_ids(cursor.sample, 0, count, global_batch, world_size, rank)
        cols = slice(offset, offset + per_rank)
        plan = ChunkPlan(cursor.pass_index, ids, sources[:, cols], local[:, cols])
        return plan, self.advance(cursor, count, global_batch)

    def _single_local(self, pass_index: int, samples: np.ndarray) -> np.ndarray:
        if self.plan.num_samples is not None:
            return samples
        return samples + pass_index * self.plan.num_windows

    def _allocate(
        self, mixture: MixtureCursor, count: int, global_batch: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """Allocate steps (rows of ``global_batch``), cut before the first one a source's
        policy forbids."""
        sources, local, _ = allocate_batches(self.phases, global_batch, mixture, count)
        limits = self._limits
        if limits is None:
            return sources, local
        over = local >= limits[sources]
        rows = np.flatnonzero(over.any(axis=1))
        if rows.size:
            if rows[0] == 0:  # nothing left: the lowest source over its limit names the end
                source = self.sources[int(sources[0][over[0]].min())]
                limit = source.limit
                assert limit is not None  # its limit was exceeded
                self.ended_by = self._policy_end(source, limit, f"step {mixture.step}")
            sources, local = sources[: rows[0]], local[: rows[0]]
        return sources, local

    @functools.cached_property
    def _limits(self) -> np.ndarray | None:
        """int64 ``[S]``: samples each source may give (int64 max: endless); ``None`` when no
        source has a policy limit."""
        limits = [s.limit for s in self.sources]
        if all(limit is None for limit in limits):
            return None
        endless = np.iinfo(np.int64).max
        return np.array([endless if x is None else x for x in limits], dtype=np.int64)

    @staticmethod
    def _policy_end(source: TokenSource, limit: int, where: str) -> str:
        return (
            f"source {source.name!r} has no samples left under its policy ({limit} samples = "
            f"{limit // source.num_windows} epoch(s)) at {where}"
        )

    # -- reading (random access; a mode's read_chunk makes the tokens) --------------------
    def read_chunk(self, plan: ChunkPlan, documents: bool) -> TokenChunk:
        """The tokens of a chunk plan's samples: the mode's own."""
        raise NotImplementedError(f"{type(self).__name__} must define read_chunk")

    def locate(self, pass_index: int, samples: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(source, source-local index) of pass-relative sample ids (any shape).

        O(1) per sample for one source; a mixture walks its per-batch counts from the start to
        the first batch asked for (counts only, bounded memory), then allocates the batches
        from there to the last.
        """
        ids = np.asarray(samples, dtype=np.int64)
        length = self.pass_length
        if ids.size and (ids.min() < 0 or (length is not None and ids.max() >= length)):
            raise IndexError(f"sample index out of range [0, {length})")
        if not self.is_mixture:
            return np.zeros(ids.shape, np.int16), self._single_local(pass_index, ids)
        batch = self.config.global_batch_size
        assert batch is not None  # guaranteed by DataConfig for mixtures
        if not ids.size:
            return np.zeros(ids.shape, np.int16), np.zeros(ids.shape, np.int64)
        ramp = has_batch_ramp(self.config)
        steps = step_sizes(self.config, 1, pass_index) if ramp else StepSizes.constant(batch)
        first, start = step_start(self.phases, len(self.sources), steps, int(ids.min()))
        limits = self._limits
        if limits is not None and (np.array(start.drawn) > limits).any():
            sources = local = np.zeros(0, np.int64)  # a policy ended it before
        else:
            cursor, count = StreamCursor(pass_index, first, start), int(ids.max()) + 1 - first
            sources, local = mixture_samples(self.phases, self._allocate, cursor, count, steps)
        flat = ids.ravel() - first
        if flat.max() >= sources.size:
            raise IndexError(f"sample {int(ids.max())} lies after the end of the stream")
        return sources[flat].reshape(ids.shape), local[flat].reshape(ids.shape)

    def window_starts(self, pass_index: int, samples: np.ndarray) -> np.ndarray:
        """Stream offsets (in their sources) of the windows of pass-relative sample ids."""
        src, local = self.locate(pass_index, samples)
        return source_window_starts(self.sources, src, local)

    def read(self, pass_index: int, samples: Any) -> tuple[np.ndarray, np.ndarray]:
        """Tokens ``[n, seq_len + 1]`` and window offsets of pass-relative sample ids."""
        ids = np.asarray(samples, dtype=np.int64).ravel()
        src, local = self.locate(pass_index, ids)
        chunk = self.read_chunk(ChunkPlan(pass_index, ids, src, local), documents=False)
        return chunk.tokens, chunk.starts

    # -- accounting ----------------------------------------------------------------------
    def source_positions(self, cursor: StreamCursor) -> dict[str, dict[str, int]]:
        """Per source: index of its next sample in its own sequence, and that sample's epoch."""
        if cursor.mixture is None:
            drawn: tuple[int, ...] = (
                int(self._single_local(cursor.pass_index, np.array(cursor.sample))),
            )
        else:
            drawn = cursor.mixture.drawn
            if cursor.in_step:  # plus what the delivered part of the step in progress drew
                sources, _, _ = allocate_batches(self.phases, cursor.step_size, cursor.mixture, 1)
                counts = np.bincount(sources[0, : cursor.in_step], minlength=len(drawn))
                drawn = tuple(int(d + c) for d, c in zip(drawn, counts.tolist(), strict=True))
        return {
            s.name: {"epoch": d // s.num_windows, "samples": d}
            for s, d in zip(self.sources, drawn, strict=True)
        }

    def fingerprint(self, cursor: StreamCursor | None = None) -> dict[str, Any]:
        """Every input that decides which sample has which index (docs/design.md §2.8).

        Batch size, world size, workers, prefetch, masks, eos and vocab_size are left out on
        purpose: they change who reads a sample or what is added to it, never its index. For
        mixtures, only the schedule phases that have started by the cursor count, so phases
        may be added for the future between a save and a resume.
        """
        sampling = self.config.sampling
        out: dict[str, Any] = {
            "algorithm": ALGORITHM,
            "seq_len": self.seq_len,
            "seed": self.config.seed,
            "mode": sampling.mode_name,
            "shuffle": sampling.shuffle,
            "num_samples": sampling.num_samples,
            "cross_shard": sampling.cross_shard,
            "sources": [s.name for s in self.sources],
            "data": {s.name: s.catalog.fingerprint() for s in self.sources},
        }
        if sampling.shuffle_block:  # only when set: states saved before it existed still load
            out["shuffle_block"] = sampling.shuffle_block
        if sampling.split is not None:  # only when set: states of unsplit streams still load
            out["split"] = [None if b is None else list(b) for b in split_matrix(sampling.split)]
            out["split_name"] = sampling.split_name.value
        batches = batch_schedule_fingerprint(self.config)
        if batches is not None:  # only when set: states saved without one still load
            out["batch_schedule"] = batches
        if self.is_mixture:
            # Phases used by a delivered batch (the last one is step - 1, or the step in
            # progress): a phase may still be added at the very step where the state was saved.
            step = cursor.mixture.step if cursor is not None and cursor.mixture else 0
            last = step if cursor is not None and cursor.in_step else step - 1
            started = self.phases[: phase_at(self.phases, max(last, 0)) + 1]
            out["schedule"] = [[p.start_step, list(p.weights)] for p in started]
            out["mixture_rule"] = ALLOCATION  # exact ties (issue 36): older states refused
            if self.phases[0].per_source:  # only when set: states of mixed steps still load
                out["batching"] = "per_source"
        schedule = self.seq_schedule
        if schedule is not None:  # only when set; its phases begun by the cursor, as above
            step = 0 if cursor is None else schedule_step(schedule, cursor, self.pass_length)
            inside = cursor is not None and cursor.sample % schedule.global_batch
            out["seq_len_schedule"] = {
                "cut": CUT,
                "global_batch_size": schedule.global_batch,  # step k's windows
                "phases": schedule.started(step if inside else max(step - 1, 0)),
            }
        return out


def mixture_phases(config: DataConfig) -> tuple[Phase, ...]:
    """Base weights from step 0, then each ``[[schedule]]`` phase (a phase at 0 replaces them)."""
    names = [s.name for s in config.sources]
    temperature = config.mixture.temperature
    one = config.mixture.batching.value == "per_source"
    base = np.array([s.weight or 0.0 for s in config.sources])
    phases = [Phase(0, tuple(effective_weights(base, temperature).tolist()), one)]
    for entry in config.schedule:
        raw = np.array([float(entry.weights[n]) for n in names])
        phase = Phase(entry.start_step, tuple(effective_weights(raw, temperature).tolist()), one)
        if phase.start_step == 0:
            phases[0] = phase
        else:
            phases.append(phase)
    return tuple(phases)
