"""Corpora of the ``make_corpus`` fixture (``tests/conftest.py``): documents of log-normal
length, each ending in EOS, concatenated and cut into shards of the requested sizes (so
documents may span shards, as in real tokenized corpora), in any token dtype, as NPY or raw
shards.

The other corpora of the tests (token = position, or short documents; ``write_shards``) are in
:mod:`tests.helpers.corpus`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["Corpus", "document_tokens", "write_corpus"]


@dataclass(frozen=True, eq=False)
class Corpus:
    """A corpus written by :func:`write_corpus`.

    Attributes:
        folder: The folder holding the shards (nothing else is in it).
        tokens: Each shard's tokens, in listing (lexicographic) order.
        paths: Each shard's path, same order.
        dtype: Token dtype name (``uint16``...).
        eos_token_id: The EOS id that ends every document.
        vocab_size: Every token is below it.
    """

    folder: Path
    tokens: list[np.ndarray]
    paths: list[Path]
    dtype: str
    eos_token_id: int
    vocab_size: int

    def __iter__(self) -> Iterator[Any]:
        """Unpack as ``(folder, tokens)``."""
        return iter((self.folder, self.tokens))

    @property
    def stream(self) -> np.ndarray:
        """All shards concatenated (the cross-shard token stream)."""
        return np.concatenate(self.tokens)

    def config(self, **overrides: Any) -> dict[str, Any]:
        """A config dict for this corpus: one source ``web`` over the folder.

        Args:
            **overrides: Top-level keys to set (``seq_len``, ``sampling``...); ``source`` is a
                dict merged into the source entry.
        """
        source = {"name": "web", "path": str(self.folder), "dtype": self.dtype}
        source.update(overrides.pop("source", {}))
        cfg: dict[str, Any] = {
            "seq_len": 8,
            "seed": 0,
            "eos_token_id": self.eos_token_id,
            "vocab_size": self.vocab_size,
            "sources": [source],
        }
        cfg.update(overrides)
        return cfg


def document_tokens(
    total: int, *, eos_token_id: int, vocab_size: int, mean_doc_len: float, seed: int
) -> np.ndarray:
    """``total`` tokens made of documents of log-normal length, each ending in EOS.

    Non-EOS tokens are drawn uniformly from ``[0, vocab_size)`` minus the EOS id. The last
    token is always EOS (the final document is cut short to fit).
    """
    rng = np.random.default_rng(seed)
    lengths: list[int] = []
    while sum(lengths) < total:
        lengths.append(max(1, round(rng.lognormal(np.log(mean_doc_len), 0.75))))
    out = rng.integers(0, vocab_size - 1, size=total, dtype=np.int64)
    out[out >= eos_token_id] += 1  # skip the EOS id
    ends = np.cumsum(lengths) - 1
    out[ends[ends < total]] = eos_token_id
    out[-1] = eos_token_id
    return out


def write_corpus(
    folder: Path,
    shard_sizes: Sequence[int],
    *,
    fmt: str = "npy",
    dtype: str = "uint16",
    eos_token_id: int = 0,
    vocab_size: int = 1000,
    mean_doc_len: float = 20.0,
    seed: int = 0,
) -> Corpus:
    """Write ``len(shard_sizes)`` shards named ``shard_00000.npy`` (or ``.bin`` when raw).

    Args:
        folder: Created if missing; should be empty.
        shard_sizes: Tokens per shard (>= 0; 0 writes an empty shard).
        fmt: ``npy`` (``numpy.save``) or ``raw`` (headerless little-endian ``.bin``).
        dtype: Token dtype.
        eos_token_id: EOS id ending every document.
        vocab_size: Token ids are below it.
        mean_doc_len: Median document length.
        seed: Seed of the token generator.
    """
    folder.mkdir(parents=True, exist_ok=True)
    total = int(sum(shard_sizes))
    stream = document_tokens(
        max(total, 1),
        eos_token_id=eos_token_id,
        vocab_size=vocab_size,
        mean_doc_len=mean_doc_len,
        seed=seed,
    )[:total].astype(np.dtype(dtype).newbyteorder("<"))
    bounds = np.concatenate([[0], np.cumsum(shard_sizes)]).astype(np.int64)
    tokens, paths = [], []
    for i in range(len(shard_sizes)):
        part = stream[bounds[i] : bounds[i + 1]]
        if fmt == "npy":
            path = folder / f"shard_{i:05d}.npy"
            np.save(path, part)
        elif fmt == "raw":
            path = folder / f"shard_{i:05d}.bin"
            part.tofile(path)
        else:
            raise ValueError(f"fmt = {fmt!r} is not 'npy' or 'raw'")
        tokens.append(part.astype(np.dtype(dtype)))
        paths.append(path)
    return Corpus(folder, tokens, paths, dtype, eos_token_id, vocab_size)
