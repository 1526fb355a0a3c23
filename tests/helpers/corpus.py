"""Small corpora on disk for the loader, dataset, node and distributed tests.

Two kinds of token streams:

* ``position_tokens``: token = its position in the concatenated stream (``uint32``), so a
  window is identified by its first token and its contiguity is checkable;
* ``document_tokens``: documents of random length, each ending in EOS, for packing masks.

Shards are real NumPy ``.npy`` files (or headerless ``.bin`` when ``fmt="raw"``), written in
lexicographic order ``shard_00000`` … so the listing order is the writing order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["Corpus", "document_tokens", "position_tokens", "write_shards"]


@dataclass(frozen=True)
class Corpus:
    """Shards written by :func:`write_shards`.

    Attributes:
        folder: Folder holding only the shards.
        shards: Each shard's tokens, in listing order.
        eos_token_id: EOS id (documents end with it in document corpora).
        raw_dtype: The dtype to put in the config for headerless shards (None for NPY).
    """

    folder: Path
    shards: list[np.ndarray]
    eos_token_id: int
    raw_dtype: str | None = None

    @property
    def tokens(self) -> np.ndarray:
        """All shards concatenated (the cross-shard stream)."""
        return np.concatenate(self.shards)

    def window_starts(self, seq_len: int, cross_shard: bool) -> list[int]:
        """Stream offsets of every window, in window-id order (written independently here)."""
        if cross_shard:
            count = (int(sum(len(s) for s in self.shards)) - 1) // seq_len
            return [w * seq_len for w in range(max(count, 0))]
        starts, base = [], 0
        for shard in self.shards:
            count = max((len(shard) - 1) // seq_len, 0)
            starts += [base + k * seq_len for k in range(count)]
            base += len(shard)
        return starts

    def config(self, seq_len: int = 8, **overrides: Any) -> dict[str, Any]:
        """A config dict with one source ``web`` over the folder.

        Args:
            seq_len: Tokens per sample input.
            **overrides: Top-level keys (``seed``, ``sampling``, ``packing``...).
        """
        source: dict[str, Any] = {"name": "web", "path": str(self.folder)}
        if self.raw_dtype is not None:
            source.update(format="raw", dtype=self.raw_dtype)
        cfg: dict[str, Any] = {
            "seq_len": seq_len,
            "seed": 0,
            "eos_token_id": self.eos_token_id,
            "sources": [source],
        }
        cfg.update(overrides)
        return cfg


def position_tokens(total: int) -> np.ndarray:
    """Token t = t (``uint32``)."""
    return np.arange(total, dtype=np.uint32)


def document_tokens(
    total: int, *, eos_token_id: int = 0, vocab: int = 500, seed: int = 0
) -> np.ndarray:
    """``total`` tokens of documents 1..40 tokens long, each ending in EOS (``uint16``)."""
    rng = np.random.default_rng(seed)
    out = rng.integers(1, vocab, size=total).astype(np.uint16)
    out[out == eos_token_id] = eos_token_id + 1
    ends = np.cumsum(rng.integers(1, 41, size=total))
    out[ends[ends < total]] = eos_token_id
    return out


def write_shards(
    folder: Path,
    sizes: Sequence[int],
    *,
    kind: str = "documents",
    fmt: str = "npy",
    seed: int = 0,
    eos_token_id: int = 0,
) -> Corpus:
    """Cut one token stream into shards of ``sizes`` tokens and write them to ``folder``.

    Args:
        folder: Created if missing.
        sizes: Tokens per shard.
        kind: ``documents`` (uint16, EOS-separated) or ``positions`` (uint32, token = offset).
        fmt: ``npy`` or ``raw``.
        seed: Seed of document tokens.
        eos_token_id: EOS id.
    """
    folder.mkdir(parents=True, exist_ok=True)
    total = int(sum(sizes))
    if kind == "positions":
        stream = position_tokens(total)
    else:
        stream = document_tokens(total, eos_token_id=eos_token_id, seed=seed)
    bounds = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    shards = []
    for i in range(len(sizes)):
        part = stream[bounds[i] : bounds[i + 1]]
        if fmt == "npy":
            np.save(folder / f"shard_{i:05d}.npy", part)
        else:
            part.tofile(folder / f"shard_{i:05d}.bin")
        shards.append(part)
    return Corpus(folder, shards, eos_token_id, None if fmt == "npy" else str(stream.dtype))
