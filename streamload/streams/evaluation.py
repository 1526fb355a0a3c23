"""An evaluation pass over a split: every sample once, the last global batch padded.

:class:`EvaluationStream` wraps the stream of a config whose ``split_name`` (and ``shuffle``)
were set for evaluation (:func:`streamload.config.evaluation_sampling`) and keeps the
:class:`~streamload.streams.interface.SampleStream` interface, so the loader, the nodes and
:class:`streamload.StreamDataset` run it unchanged. It differs from a training stream in two
ways (docs/sampling.md, "Evaluation"):

* **What a pass is.** concat, packed and padded modes: the samples of every source's split
  once, the sources one after another in config order (pass sample ``g`` is sample
  ``g - first[s]`` of source ``s``, in its first epoch's order: the split's order, or its
  keyed permutation with ``shuffle=True``). Weights, schedules, policies and ``num_samples``
  decide nothing here. Megatron mode: Megatron's dataset of the split, as configured. Every
  pass is the same.
* **The last global batch is kept.** A pass of ``P`` samples has ``ceil(P / B)`` global
  batches; the rows of the last one past ``P`` are padding: they repeat sample ``P - 1`` (so
  every row holds real tokens and a valid source) and are marked in
  :attr:`ChunkPlan.padding`, which the batch turns into ``sample_mask`` false, ``sample_index``
  -1 and labels -100. Every rank gets the same number of batches, and over all ranks each
  sample of the pass is delivered exactly once with ``sample_mask`` true.

Example: ``P = 10`` samples, 2 ranks of 4 (``B = 8``): two global batches; batch 1 holds
samples 8 and 9 on rank 0 (rows 2 and 3 are padding, repeating sample 9) and four padding rows
on rank 1. The cursor after it stands at sample 10, the end of the pass.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from streamload.config import DataConfig, load_config
from streamload.config.modes import mode_plugin
from streamload.config.options import evaluation_sampling
from streamload.errors import ConfigError, add_note
from streamload.plan.partition import chunk_sample_ids
from streamload.streams.chunks import ChunkPlan, TokenChunk, source_window_starts
from streamload.streams.cursor import StreamCursor

if TYPE_CHECKING:
    from streamload.plan.mixture import Phase
    from streamload.streams.interface import SampleStream, StreamSource

__all__ = ["EvaluationStream", "evaluation_config", "evaluation_stream"]


class EvaluationStream:
    """One evaluation pass of a split (implements
    :class:`streamload.streams.interface.SampleStream`; see the module docstring).

    Args:
        inner: The stream of the evaluation config (split and order already set).
    """

    is_mixture = False
    phases: tuple[Phase, ...] = ()

    def __init__(self, inner: SampleStream) -> None:
        self.inner = inner
        # what the inner stream decides, and never changes
        self.config: DataConfig = inner.config
        self.seq_len: int = inner.seq_len  # tokens per sample, less the one of overlap
        self.sources: Sequence[StreamSource] = inner.sources
        self.num_windows: int = inner.num_windows  # samples in one epoch of the first source
        self.has_documents: bool = inner.has_documents  # document starts from the indices
        self.ended_by: str | None = None
        # a padded last batch: labels can be -100 where no mode of its own pads
        self.layout = replace(inner.layout, evaluation=True, label_padding=True)
        self.own_pass = mode_plugin(inner.config.sampling.mode_name).own_evaluation_pass
        counts = [0] if self.own_pass else [s.num_windows for s in inner.sources]
        self._firsts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        length = inner.pass_length if self.own_pass else int(self._firsts[-1])
        self._length = int(length or 0)

    @classmethod
    def from_config(cls, config: DataConfig) -> EvaluationStream:
        """Describe the sources of an evaluation config (its split and order already set,
        :func:`evaluation_config`) and build the pass."""
        from streamload.streams.interface import build_stream  # the stream of the config's mode

        return cls(build_stream(config))

    def read_chunk(self, plan: ChunkPlan, documents: bool) -> TokenChunk:
        """The inner stream reads any (source, local) plan, its padding rows included."""
        return self.inner.read_chunk(plan, documents)

    # -- shape of the pass ---------------------------------------------------------------
    @property
    def pass_length(self) -> int:
        """Samples of one evaluation pass (``P``)."""
        return self._length

    def start(self, pass_index: int = 0) -> StreamCursor:
        """The cursor at the start of a pass."""
        return StreamCursor(pass_index, 0, None)

    def batches_left(self, cursor: StreamCursor, global_batch: int) -> int:
        """Global batches left in the pass, the partial last one included."""
        return max(0, -(-(self._length - cursor.sample) // global_batch))

    def next_pass(self, cursor: StreamCursor) -> StreamCursor:
        """The start of the next pass (the same samples again)."""
        return self.start(cursor.pass_index + 1)

    def advance(self, cursor: StreamCursor, batches: int, global_batch: int) -> StreamCursor:
        """The cursor after ``batches`` more global batches; it stops at the pass end."""
        sample = min(self._length, cursor.sample + batches * global_batch)
        return replace(cursor, sample=max(sample, cursor.sample))

    def plan_chunk(
        self, cursor: StreamCursor, max_batches: int, global_batch: int, world_size: int, rank: int
    ) -> tuple[ChunkPlan, StreamCursor] | None:
        """Up to ``max_batches`` batches of ``rank``, padding rows past the pass end marked;
        ``None`` once the pass ended."""
        count = min(max_batches, self.batches_left(cursor, global_batch))
        if count == 0:
            return None
        ids = chunk_sample_ids(cursor.sample, 0, count, global_batch, world_size, rank)
        padding = ids >= self._length
        real = np.where(padding, self._length - 1, ids)
        sources, local = self.locate(cursor.pass_index, real)
        plan = ChunkPlan(cursor.pass_index, real, sources, local, padding=padding)
        return plan, self.advance(cursor, count, global_batch)

    # -- random access -------------------------------------------------------------------
    def locate(self, pass_index: int, samples: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(source, source-local index) of pass samples (any shape; every pass the same)."""
        ids = np.asarray(samples, dtype=np.int64)
        if ids.size and (ids.min() < 0 or ids.max() >= self._length):
            raise IndexError(f"sample index out of range [0, {self._length})")
        if self.own_pass:
            return self.inner.locate(0, ids)
        source = np.searchsorted(self._firsts, ids, side="right") - 1
        return source.astype(np.int16), ids - self._firsts[source]

    def window_starts(self, pass_index: int, samples: np.ndarray) -> np.ndarray:
        """Where each sample's tokens start in its source."""
        if self.own_pass:
            return self.inner.window_starts(0, samples)
        src, local = self.locate(pass_index, samples)
        return source_window_starts(self.sources, src, local)

    def read(self, pass_index: int, samples: Any) -> tuple[np.ndarray, np.ndarray]:
        """Tokens and window starts of pass samples (random access)."""
        if self.own_pass:
            return self.inner.read(0, samples)
        ids = np.asarray(samples, dtype=np.int64).ravel()
        src, local = self.locate(pass_index, ids)
        chunk = self.inner.read_chunk(ChunkPlan(pass_index, ids, src, local), documents=False)
        return chunk.tokens, chunk.starts

    # -- accounting ----------------------------------------------------------------------
    def source_positions(self, cursor: StreamCursor) -> dict[str, dict[str, int]]:
        """Per source: its samples before the cursor in this pass, and their epoch (1 once
        the source's split is done)."""
        if self.own_pass:
            return self.inner.source_positions(replace(cursor, pass_index=0))
        drawn = np.clip(cursor.sample - self._firsts[:-1], 0, np.diff(self._firsts))
        return {
            s.name: {"epoch": int(d) // s.num_windows, "samples": int(d)}
            for s, d in zip(self.sources, drawn.tolist(), strict=True)
        }

    def fingerprint(self, cursor: StreamCursor | None = None) -> dict[str, Any]:
        """The inner stream's, marked as an evaluation pass; concat, packed and padded modes
        drop the mixture's schedule and ``num_samples``, which do not decide this order."""
        out = dict(self.inner.fingerprint(None))
        if not self.own_pass:
            out.pop("schedule", None)
            out.pop("num_samples", None)
        out["evaluation"] = True
        return out


def evaluation_config(config: DataConfig, split: str | None, shuffle: bool | None) -> DataConfig:
    """``config`` set for an evaluation pass over ``split`` (``None``: unchanged, and then
    ``shuffle`` must be ``None``: a training loader's order is the config's).

    Raises:
        ConfigError: a bad split name, a split the config lacks, a bad ``shuffle``.
    """
    if split is None:
        if shuffle is not None:
            raise ConfigError(
                f"shuffle = {shuffle!r} applies only to an evaluation loader (split='valid', "
                "...); a training loader's order is sampling.shuffle in the config"
            )
        return config
    mode_plugin(config.sampling.mode_name).check_evaluation(split)
    try:
        return replace(config, sampling=evaluation_sampling(config.sampling, split, shuffle))
    except ConfigError as exc:
        add_note(exc, f"in the evaluation loader's split = {split!r}")
        raise


def evaluation_stream(
    config: str | os.PathLike[str] | Mapping[str, Any] | DataConfig,
    split: str,
    shuffle: bool | None = None,
) -> EvaluationStream:
    """The stream of an evaluation pass over ``split`` (what ``build_loader(...,
    split=split)`` iterates), e.g. for :class:`streamload.StreamDataset`.

    Raises:
        ConfigError: invalid config, split or ``shuffle``.
    """
    return EvaluationStream.from_config(evaluation_config(load_config(config), split, shuffle))
