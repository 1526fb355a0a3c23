"""The ``[sampling]`` keys of ``packed`` and ``padded`` modes, and their checks of the shared
ones."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from streamload.config.checks import to_enum
from streamload.config.enums import LongDocuments
from streamload.errors import ConfigError

__all__ = ["PackedOptions", "check_packed_sampling"]


@dataclass(frozen=True, kw_only=True)
class PackedOptions:
    """Args:
    long_documents: What a document of more than ``seq_len + 1`` tokens becomes: pieces
        (``split``, every next-token pair trained once) or its first ``seq_len + 1``
        tokens (``truncate``, the rest dropped and counted).
    """

    long_documents: LongDocuments = LongDocuments.SPLIT

    def __post_init__(self) -> None:
        value = to_enum(LongDocuments, self.long_documents, "sampling.long_documents")
        object.__setattr__(self, "long_documents", value)


def check_packed_sampling(sampling: Any) -> None:
    """Items never span two shards: ``cross_shard = false`` means nothing here."""
    if not sampling.cross_shard:
        raise ConfigError(
            f"sampling.cross_shard = false has no meaning with mode = {sampling.mode_name!r}: "
            "items are whole documents or pieces of one, which never span two shards (a "
            "packed sample may hold items of several shards); remove it"
        )
