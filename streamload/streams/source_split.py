"""Where a source's train, valid and test splits lie: document and token ranges.

The rule is :mod:`streamload.plan.split`'s (Megatron's rounding over the source's documents
when every shard has a document index, else over its tokens, each bookend moved to the next
document start). This module only finds the numbers it needs, and reads little:

* document counts come from the shard descriptions (``num_documents`` / Megatron's
  ``documents``, read at start-up from the headers), so the bookend documents are found
  without reading any index; only the shards where the two inner bookends fall are opened
  (none for a bookend at a shard's first document), for their document bounds;
* documents by EOS: the tokens from each bookend to the next EOS are read, in blocks that
  double from :data:`FIRST_SCAN_TOKENS`, never past the bookend's shard. Start-up reads the
  length of one document per bookend, whatever the size of the corpus.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from streamload.catalog.sources import SourceCatalog
from streamload.config import DataConfig
from streamload.errors import ConfigError
from streamload.formats.documents import BLOCK_TOKENS, document_bounds
from streamload.formats.registry import get_format
from streamload.plan.split import (
    SPLIT_NAMES,
    first_start_after_eos,
    split_bookends,
    split_index,
)
from streamload.streams.shard_set import ShardSet

__all__ = ["FIRST_SCAN_TOKENS", "SourceSplit", "source_split"]

FIRST_SCAN_TOKENS = 4096
"""Tokens read first when looking for the EOS after a bookend (then twice as many, …)."""


@dataclass(frozen=True)
class SourceSplit:
    """The splits of one source.

    Args:
        source: The source's name.
        split: The split string.
        name: The split the stream reads (``train``, ``valid`` or ``test``).
        rule: ``"documents"`` (every shard has an index: Megatron's rounding over documents)
            or ``"tokens"`` (over tokens, each bookend moved to the next document start).
        documents: Document bookends ``[d0, d1, d2, d3]`` (``None`` with the token rule:
            documents found by EOS are not counted).
        tokens: Token bookends ``[t0, t1, t2, t3]`` in the source's stream: split ``i`` is
            ``[t_i, t_(i+1))``.
        total_documents: Documents of the source (``None`` with the token rule).
        total_tokens: Tokens of the source.
    """

    source: str
    split: str
    name: str
    rule: str
    documents: tuple[int, ...] | None
    tokens: tuple[int, ...]
    total_documents: int | None
    total_tokens: int

    @property
    def span(self) -> tuple[int, int]:
        """The token range ``[lo, hi)`` of the split this stream reads."""
        which = split_index(self.name)
        return self.tokens[which], self.tokens[which + 1]

    def report(self) -> dict[str, Any]:
        """Plain values for ``streamload plan``: per split, its document and token ranges."""
        parts: dict[str, Any] = {}
        for i, part in enumerate(SPLIT_NAMES):
            docs = None if self.documents is None else [self.documents[i], self.documents[i + 1]]
            parts[part] = {"documents": docs, "tokens": [self.tokens[i], self.tokens[i + 1]]}
        return {
            "split": self.split,
            "reads": self.name,
            "rule": self.rule,
            "total_documents": self.total_documents,
            "total_tokens": self.total_tokens,
            "parts": parts,
        }


def source_split(
    config: DataConfig, catalog: SourceCatalog, shards: ShardSet
) -> SourceSplit | None:
    """The splits of a source under ``config.sampling.split`` (``None``: no split is set).

    Raises:
        ConfigError: the split this stream reads holds no token of the source.
    """
    sampling = config.sampling
    if sampling.split is None:
        return None
    infos, name, split = catalog.shards, catalog.config.name, sampling.split
    docs: list[int] | None = None
    total_docs: int | None = None
    if all(get_format(fmt).has_documents for fmt in infos.facts.formats):
        counts = np.array(infos.num_documents, dtype=np.int64)
        for i in np.flatnonzero(counts < 0).tolist():  # not in the description: its index
            counts[i] = int(np.asarray(document_bounds(shards.shard(i))).size) - 1
        firsts = np.concatenate([[0], np.cumsum(counts)])
        total_docs = int(firsts[-1])
        docs = split_bookends(split, total_docs)
        tokens = [_document_start(shards, firsts, d) for d in docs]
    else:
        bookends = split_bookends(split, shards.num_tokens)
        tokens = [_next_start(shards, t, config.eos_token_id) for t in bookends]
    found = SourceSplit(
        source=name,
        split=split,
        name=sampling.split_name.value,
        rule="tokens" if docs is None else "documents",
        documents=None if docs is None else tuple(docs),
        tokens=tuple(tokens),
        total_documents=total_docs,
        total_tokens=shards.num_tokens,
    )
    lo, hi = found.span
    if hi <= lo:
        raise ConfigError(
            f"source {name!r}: sampling.split = {sampling.split!r} leaves its "
            f"{found.name} split empty ({_describe(found)}); give that split a larger share "
            "or add data"
        )
    return found


def _describe(found: SourceSplit) -> str:
    if found.documents is not None:
        return f"{found.total_documents} documents, split at documents {list(found.documents)}"
    return (
        f"{found.total_tokens} tokens, split at the document starts {list(found.tokens)}; "
        "without a document index a bookend moves to the next start found by eos_token_id, "
        "or to the next shard"
    )


def _document_start(shards: ShardSet, firsts: np.ndarray, document: int) -> int:
    """Stream offset of the first token of the source's ``document`` (its end: the source's)."""
    if document >= int(firsts[-1]):
        return shards.num_tokens
    shard = int(np.searchsorted(firsts, document, side="right")) - 1
    if document == int(firsts[shard]):  # a shard's first document starts with the shard
        return int(shards.offsets[shard])  # (as packed mode's document bounds say)
    bounds = np.asarray(document_bounds(shards.shard(shard)))
    return int(shards.offsets[shard]) + int(bounds[document - int(firsts[shard])])


def _next_start(shards: ShardSet, at: int, eos_token_id: int | None) -> int:
    """The first document start at or after stream offset ``at``: a shard start, a start of
    the shard's indexed documents, or a position right after an EOS (the rule of
    :func:`streamload.formats.documents.document_bounds`)."""
    if at >= shards.num_tokens:
        return shards.num_tokens
    sid, local = shards.locate(at)
    base, size = int(shards.offsets[sid]), shards.shards[sid].num_tokens
    if local == 0:
        return at
    shard = shards.shard(sid)
    bounds = shard.document_bounds()
    if bounds is not None:
        bounds = np.asarray(bounds)
        after = int(np.searchsorted(bounds, local, side="left"))
        return base + (int(bounds[after]) if after < bounds.size else size)
    if eos_token_id is None:  # the whole shard is one document
        return base + size
    begin, width = local, FIRST_SCAN_TOKENS
    while begin < size:
        stop = min(size, begin + width)
        block = np.asarray(shard.tokens(begin - 1, stop))
        found = first_start_after_eos(block, eos_token_id, 1)
        if found is not None:  # block position p is shard position begin - 1 + p
            return base + begin - 1 + found
        begin, width = stop, min(2 * width, BLOCK_TOKENS)
    return base + size
