"""Sample streams: the machinery every sampling mode shares, behind one interface.

:class:`SampleStream` is the interface every mode's stream implements
(:mod:`streamload.streams.interface`); :func:`build_stream` builds the stream of the config's
mode (the modes themselves are plug-ins: :mod:`streamload.modes`). Shared here: the cursor,
chunks, the batch layout, a source's shards and windows (:class:`TokenSource`), passes and
mixtures (:class:`SourceStream`), evaluation passes, index caches.
"""

from streamload.streams.chunks import ChunkPlan, TokenChunk
from streamload.streams.cursor import StreamCursor
from streamload.streams.interface import SampleStream, StreamSource, build_stream
from streamload.streams.layout import BatchLayout
from streamload.streams.source_stream import SourceStream
from streamload.streams.token_source import TokenSource

__all__ = [
    "BatchLayout",
    "ChunkPlan",
    "SampleStream",
    "SourceStream",
    "StreamCursor",
    "StreamSource",
    "TokenChunk",
    "TokenSource",
    "build_stream",
]
