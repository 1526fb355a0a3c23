"""A toy sampling mode defined outside the package: concat's windows, each reversed.

It is what a user's plug-in looks like: a stream that extends the shared
:class:`~streamload.streams.source_stream.SourceStream` with its own ``read_chunk`` (and a
fingerprint entry), and a :class:`~streamload.modes.ModeSpec` naming it. Nothing in
``streamload/`` knows it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from streamload.modes import ModeSpec
from streamload.streams import ChunkPlan, SourceStream, StreamCursor, TokenChunk

__all__ = ["REVERSED", "ReversedOptions", "ReversedStream"]


@dataclass(frozen=True, kw_only=True)
class ReversedOptions:
    """The toy mode's own ``[sampling]`` key: ``reverse = false`` reads windows as concat."""

    reverse: bool = True


class ReversedStream(SourceStream):
    """Concat mode's windows of ``seq_len + 1`` tokens, each read back to front."""

    def read_chunk(self, plan: ChunkPlan, documents: bool) -> TokenChunk:
        src, local = plan.sources.ravel(), plan.local_ids.ravel()
        dtype = np.result_type(*[s.shards.dtype for s in self.sources])
        tokens = np.empty((src.size, self.seq_len + 1), dtype=dtype)
        starts = np.empty(src.size, dtype=np.int64)
        for index in np.unique(src).tolist():
            rows = np.flatnonzero(src == index)
            part, part_starts = self.sources[index].read(local[rows])
            flip = self.config.sampling.reverse  # the mode's own option
            tokens[rows], starts[rows] = (part[:, ::-1] if flip else part), part_starts
        return TokenChunk(plan, tokens, starts, None)

    def fingerprint(self, cursor: StreamCursor | None = None) -> dict[str, Any]:
        return {**super().fingerprint(cursor), "reversed": True}


REVERSED = ModeSpec(name="reversed", build=ReversedStream.from_config, options=ReversedOptions)
"""The toy mode's plug-in: a name, a builder and its options."""
