"""Pipeline stages, each a ``torchdata.nodes.BaseNode`` in its own module.

The chain :class:`streamload.StreamLoader` runs, assembled by :func:`build_chain`
(:mod:`streamload.nodes.chain`) for the loader and for anyone composing torchdata nodes::

    PlanChunks → MapStage(Materialize) | MapWorkers(Materialize) → SplitBatches [→ PinMemory]

``PlanChunks`` is the only stage with state (the loader's envelope, :mod:`streamload.state`);
the others pass their source's state through (``SplitBatches`` adds its offset inside a
chunk), so any recomposition stays exactly resumable. ``Materialize`` is ``WindowReader``
then ``MaskPacker``; ``ReadWindows`` and ``PackMasks`` are those two halves as stages of their
own, and ``ListShards`` lists a source's shards, for custom chains.
"""

from streamload.nodes.chain import Chain, build_chain
from streamload.nodes.list_shards import ListShards
from streamload.nodes.map_stage import MapStage
from streamload.nodes.map_workers import MapWorkers
from streamload.nodes.materialize import Materialize
from streamload.nodes.pack_masks import MaskPacker, PackMasks
from streamload.nodes.plan_chunks import PlanChunks
from streamload.nodes.read_windows import ReadWindows, WindowReader
from streamload.nodes.split_batches import SplitBatches
from streamload.plan.partition import RankSpec
from streamload.streams.chunks import ChunkPlan, TokenChunk

__all__ = [
    "Chain",
    "ChunkPlan",
    "ListShards",
    "MapStage",
    "MapWorkers",
    "MaskPacker",
    "Materialize",
    "PackMasks",
    "PlanChunks",
    "RankSpec",
    "ReadWindows",
    "SplitBatches",
    "TokenChunk",
    "WindowReader",
    "build_chain",
]
