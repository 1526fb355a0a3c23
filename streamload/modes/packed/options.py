"""The ``[sampling]`` keys of ``packed`` and ``padded`` modes, and their checks of the shared
ones."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from streamload.config.checks import check_int, to_enum
from streamload.config.enums import LongDocuments
from streamload.errors import ConfigError

__all__ = ["PackedOptions", "check_packed_sampling"]


@dataclass(frozen=True, kw_only=True)
class PackedOptions:
    """Args:
    long_documents: What a document of more than ``seq_len + 1`` tokens becomes: pieces
        (``split``, every next-token pair trained once), its first ``seq_len + 1``
        tokens (``truncate``, the rest dropped and counted) or nothing (``drop``: the
        document left out and counted).
    max_documents_per_sample: The most items (documents, or pieces of a long one) a
        ``packed`` sample holds, as grain's ``max_sequences_per_bin``: a sample that
        reaches it takes no more, even with room left (more padding). ``None``: no cap.
    group_size: ``packed``: run best fit decreasing within consecutive groups of this many
        items, the rule before issue 34 (``4096`` gives its plans, plan caches and states
        bit for bit). ``None``: one best fit over the whole epoch (the tightest).
    """

    long_documents: LongDocuments = LongDocuments.SPLIT
    max_documents_per_sample: int | None = None
    group_size: int | None = None

    def __post_init__(self) -> None:
        value = to_enum(LongDocuments, self.long_documents, "sampling.long_documents")
        object.__setattr__(self, "long_documents", value)
        if self.max_documents_per_sample is not None:
            check_int(self.max_documents_per_sample, "sampling.max_documents_per_sample", 1)
        if self.group_size is not None:
            check_int(self.group_size, "sampling.group_size", 1)


def check_packed_sampling(sampling: Any) -> None:
    """Items never span two shards: ``cross_shard = false`` means nothing here; nor do a
    cap of documents per sample or a packing group size in ``padded`` mode (one item per
    sample)."""
    for key in ("max_documents_per_sample", "group_size"):
        value = getattr(sampling, key)
        if value is not None and sampling.mode_name == "padded":
            raise ConfigError(
                f"sampling.{key} = {value} has no meaning with mode = 'padded': every sample "
                "holds one document (or piece of one); remove it, or use mode = 'packed'"
            )
    if not sampling.cross_shard:
        raise ConfigError(
            f"sampling.cross_shard = false has no meaning with mode = {sampling.mode_name!r}: "
            "items are whole documents or pieces of one, which never span two shards (a "
            "packed sample may hold items of several shards); remove it"
        )
