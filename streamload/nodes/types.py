"""What flows between stages (defined in :mod:`streamload.chunks`, re-exported here)."""

from streamload.chunks import ChunkPlan, TokenChunk

__all__ = ["ChunkPlan", "TokenChunk"]
