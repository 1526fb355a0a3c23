"""On-disk token formats, all behind one small protocol (see :mod:`streamload.formats.base`)."""

from streamload.formats.base import ShardInfo, TokenShard, open_shard
from streamload.formats.sniff import describe_shard

__all__ = ["ShardInfo", "TokenShard", "describe_shard", "open_shard"]
