"""On-disk token formats, all behind one protocol (see :mod:`streamload.formats.base`)."""

from streamload.formats.base import ListedFile, ReadOptions, ShardInfo, TokenShard
from streamload.formats.registry import FORMATS, get_format, open_shard
from streamload.formats.sniff import describe_shard

__all__ = [
    "FORMATS",
    "ListedFile",
    "ReadOptions",
    "ShardInfo",
    "TokenShard",
    "describe_shard",
    "get_format",
    "open_shard",
]
