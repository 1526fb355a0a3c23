"""Sample streams: the global sample order of each sampling mode, behind one interface.

:func:`build_stream` picks the mode; :class:`SampleStream` is the interface every mode
implements (:mod:`streamload.streams.interface`). One module per mode: ``concat`` (windows
over the concatenated tokens) and ``megatron`` (megatron-core's exact sample order).
"""

from streamload.streams.chunks import ChunkPlan, TokenChunk
from streamload.streams.concat import ConcatStream
from streamload.streams.cursor import StreamCursor
from streamload.streams.interface import SampleStream, StreamSource, build_stream
from streamload.streams.megatron import MegatronStream

__all__ = [
    "ChunkPlan",
    "ConcatStream",
    "MegatronStream",
    "SampleStream",
    "StreamCursor",
    "StreamSource",
    "TokenChunk",
    "build_stream",
]
