"""The one interface every sampling mode implements, and the one place that picks the mode.

A *sampling mode* turns described sources into the global sample stream: sample ``g`` of a
pass is a pure function of ``(data, config, seed, g)`` (docs/design.md §1). Each mode is one
folder of :mod:`streamload.modes` whose stream satisfies :class:`SampleStream` structurally
(it does not inherit from it); :func:`build_stream` asks the mode registry
(:mod:`streamload.config.modes`) for the config's mode, so adding a mode touches nothing here.

The loader, :class:`streamload.StreamDataset`, the nodes and the tools type against these
protocols only. A stream is picklable (process workers get a copy) and holds no position:
the position is a :class:`~streamload.streams.cursor.StreamCursor` value that the caller
keeps, so saving and resuming never asks the stream for state.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

from streamload.config import DataConfig
from streamload.config.modes import mode_plugin
from streamload.streams.chunks import ChunkPlan, TokenChunk
from streamload.streams.cursor import StreamCursor
from streamload.streams.layout import BatchLayout

if TYPE_CHECKING:
    from streamload.catalog.sources import SourceCatalog
    from streamload.plan.mixture import Phase
    from streamload.streams.shard_set import ShardSet

__all__ = ["SampleStream", "StreamSource", "build_stream"]


@runtime_checkable
class StreamSource(Protocol):
    """One source of a stream, as the loader and the nodes see it."""

    @property
    def name(self) -> str:
        """The source's name (``[[sources]] name``), unique in the config."""
        ...

    @property
    def catalog(self) -> SourceCatalog:
        """The described shards (listing, headers, fingerprint)."""
        ...

    @property
    def shards(self) -> ShardSet:
        """The open shards of this process (lazily opened, LRU; remote prefetch and counters)."""
        ...

    @property
    def num_windows(self) -> int:
        """Samples in one epoch of this source (the unit of ``epochs`` and ``repetition``)."""
        ...

    @property
    def limit(self) -> int | None:
        """Samples this source may give before its policy ends the stream (``None``: no end)."""
        ...

    def prefetch(self, local: np.ndarray) -> None:
        """Start fetching the tokens of source-local sample ids (remote sources; else a no-op)."""
        ...

    def stream_offset(self, local: int, start: int, position: int) -> int | None:
        """Where ``position`` of source-local sample ``local`` (whose tokens were read from
        stream offset ``start``) lies in the source's tokens; ``None`` where untraceable."""
        ...

    def drawn(self, samples: int) -> dict[str, int]:
        """Counts of what the source's first ``samples`` samples hold, beyond their number
        (``packed``/``padded``: items, data, padding and truncated tokens; else empty)."""
        ...


@runtime_checkable
class SampleStream(Protocol):
    """The global sample stream of one sampling mode, walked by a cursor the caller keeps.

    Samples are ``seq_len + 1`` tokens (``seq_len`` in Megatron mode without the extra
    token), numbered per pass from 0. A pass is cut into global batches of ``global_batch``
    samples and each rank takes its slice (:mod:`streamload.plan.partition`); world size,
    workers and prefetch never change which sample has which index.
    """

    ended_by: str | None
    """Why the stream ended early (a source policy), once planning reached that point; the
    look-ahead that drives prefetch sets it back after planning ahead."""

    @classmethod
    def from_config(cls, config: DataConfig) -> SampleStream:
        """Describe the sources (listing and headers only) and build the stream. On this
        protocol itself it is :func:`build_stream` (the mode the config names); on a mode's
        class it builds that mode."""
        return build_stream(config)

    @property
    def config(self) -> DataConfig:
        """The data config the stream was built from."""
        ...

    @property
    def seq_len(self) -> int:
        """Tokens per sample, less the one of overlap (``input_ids`` and ``labels`` length)."""
        ...

    @property
    def sources(self) -> Sequence[StreamSource]:
        """The sources, in config order (a sample's source is an index into this)."""
        ...

    @property
    def is_mixture(self) -> bool:
        """Whether global batches are allocated to sources by weight (a mixture)."""
        ...

    @property
    def phases(self) -> tuple[Phase, ...]:
        """The mixture's weight phases (empty unless a mixture)."""
        ...

    @property
    def pass_length(self) -> int | None:
        """Samples in one pass (``None``: an endless mixture)."""
        ...

    @property
    def num_windows(self) -> int:
        """Samples in one epoch of the first source."""
        ...

    @property
    def has_documents(self) -> bool:
        """Whether document starts come from the formats' indices (else from EOS)."""
        ...

    @property
    def layout(self) -> BatchLayout:
        """What the mode's batches hold beyond the common layout (the nodes, the loader and
        the tools ask this, never the mode's name)."""
        ...

    def start(self, pass_index: int = 0) -> StreamCursor:
        """The cursor at the start of pass ``pass_index``."""
        ...

    def batches_left(self, cursor: StreamCursor, global_batch: int) -> int | None:
        """Whole global batches left in the cursor's pass (``None``: endless)."""
        ...

    def next_pass(self, cursor: StreamCursor) -> StreamCursor:
        """The start of the pass after the cursor's."""
        ...

    def advance(self, cursor: StreamCursor, batches: int, global_batch: int) -> StreamCursor:
        """The cursor after ``batches`` more delivered global batches (O(1))."""
        ...

    def plan_chunk(
        self, cursor: StreamCursor, max_batches: int, global_batch: int, world_size: int, rank: int
    ) -> tuple[ChunkPlan, StreamCursor] | None:
        """Up to ``max_batches`` batches of ``rank`` from ``cursor`` and the cursor after them;
        ``None`` once the pass (or a source's policy) ended. Pure: no I/O."""
        ...

    def read_chunk(self, plan: ChunkPlan, documents: bool) -> TokenChunk:
        """The tokens of a chunk plan's samples (with ``documents``, their document starts)."""
        ...

    def locate(self, pass_index: int, samples: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(source index, source-local index)`` of pass-relative sample ids (any shape)."""
        ...

    def window_starts(self, pass_index: int, samples: np.ndarray) -> np.ndarray:
        """Where each sample's tokens start in its source (for tools and benchmarks)."""
        ...

    def read(self, pass_index: int, samples: Any) -> tuple[np.ndarray, np.ndarray]:
        """Tokens ``[n, width]`` and window starts of pass-relative sample ids (random access)."""
        ...

    def source_positions(self, cursor: StreamCursor) -> dict[str, dict[str, int]]:
        """Per source name: ``{"samples": next source-local index, "epoch": its epoch}``; the
        loader state carries them and checks them on load."""
        ...

    def fingerprint(self, cursor: StreamCursor | None = None) -> dict[str, Any]:
        """Every input that decides which sample has which index (docs/design.md §2.8)."""
        ...


def build_stream(config: DataConfig) -> SampleStream:
    """Describe the sources and build the stream of ``config.sampling.mode``.

    Raises:
        ConfigError, FormatError: bad config or data (named).
    """
    stream: SampleStream = mode_plugin(config.sampling.mode_name).build(config)
    return stream
