"""Pipeline stages, each a ``torchdata.nodes.BaseNode`` in its own module.

A typical chain (what :class:`streamload.StreamLoader` builds)::

    PlanChunks → ReadWindows → PackMasks [→ MapWorkers] → SplitBatches

``PlanChunks`` is the only stage with state (the cursor); the others are pure maps that
pass their source's state through, so any recomposition stays exactly resumable.
"""

from streamload.nodes.list_shards import ListShards
from streamload.nodes.map_workers import MapWorkers
from streamload.nodes.pack_masks import MaskPacker, PackMasks
from streamload.nodes.plan_chunks import PlanChunks
from streamload.nodes.read_windows import ReadWindows, WindowReader
from streamload.nodes.split_batches import SplitBatches
from streamload.plan.partition import RankSpec
from streamload.streams.chunks import ChunkPlan, TokenChunk

__all__ = [
    "ChunkPlan",
    "ListShards",
    "MapWorkers",
    "MaskPacker",
    "PackMasks",
    "PlanChunks",
    "RankSpec",
    "ReadWindows",
    "SplitBatches",
    "TokenChunk",
    "WindowReader",
]
