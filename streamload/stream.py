"""The global sample stream: sample index → tokens, a pure function of (data, config, seed).

Everything the loader, the ``IterableDataset`` and ``streamload samples`` deliver comes from
:meth:`SampleStream.read`; world size, workers and prefetch only decide who calls it and when.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from streamload.catalog import SourceCatalog, describe_source
from streamload.config import DataConfig
from streamload.errors import ConfigError, FormatError
from streamload.formats.registry import get_format
from streamload.ops.gather import ShardSet
from streamload.plan.passes import PassPlan
from streamload.plan.permutation import ALGORITHM
from streamload.plan.windows import WindowLayout

__all__ = ["SampleStream"]


class SampleStream:
    """Samples of ``seq_len + 1`` tokens, indexed by (pass, pass-relative sample index).

    Args:
        config: The data config.
        catalogs: Described sources, one per ``config.sources`` entry.

    Raises:
        ConfigError: the config cannot be served by this data (no whole window, masks without
            a way to find documents, a vocabulary the dtype cannot hold...).
    """

    def __init__(self, config: DataConfig, catalogs: tuple[SourceCatalog, ...]) -> None:
        if len(config.sources) != 1:
            raise ConfigError(
                f"{len(config.sources)} sources given; mixing sources by weight is not available "
                "yet: use one [[sources]] entry (its path may list several folders)"
            )
        self.config = config
        self.catalog = catalogs[0]
        self.seq_len = config.seq_len
        self.shards = ShardSet(self.catalog.shards)
        counts = np.array([s.num_tokens for s in self.catalog.shards], dtype=np.int64)
        self.layout = WindowLayout(counts, config.seq_len, config.sampling.cross_shard)
        self._check()
        self.plan = PassPlan(
            name=self.catalog.config.name,
            num_windows=self.layout.num_windows,
            seed=config.seed,
            shuffle=config.sampling.shuffle,
            num_samples=config.sampling.num_samples,
        )

    @classmethod
    def from_config(cls, config: DataConfig) -> SampleStream:
        """Describe every source (listing and headers only) and build the stream."""
        return cls(config, tuple(describe_source(s, config.vocab_size) for s in config.sources))

    @property
    def pass_length(self) -> int:
        """Samples in one pass."""
        return self.plan.pass_length

    @property
    def num_windows(self) -> int:
        """Windows in one epoch of the data."""
        return self.layout.num_windows

    def window_starts(self, pass_index: int, samples: np.ndarray) -> np.ndarray:
        """Stream offsets of the windows of pass-relative sample ids (any shape)."""
        ids = np.asarray(samples, dtype=np.int64)
        flat = ids.ravel()
        if flat.size and (flat.min() < 0 or flat.max() >= self.pass_length):
            raise IndexError(f"sample index out of range [0, {self.pass_length})")
        return self.layout.starts(self.plan.window_ids(pass_index, flat)).reshape(ids.shape)

    @property
    def has_documents(self) -> bool:
        """Whether the shards' format records document boundaries (else EOS finds them)."""
        return all(get_format(s.format).has_documents for s in self.catalog.shards)

    def document_starts(self, starts: np.ndarray) -> np.ndarray:
        """Document starts ``[n, seq_len + 1]`` of windows at stream offsets ``starts``.

        From the format's document index when it has one, else after each ``eos_token_id``
        (which then needs the tokens: use :func:`streamload.ops.masks.starts_from_eos`).
        """
        return self.shards.document_starts(starts, self.seq_len + 1)

    def read(self, pass_index: int, samples: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Tokens ``[n, seq_len + 1]`` (file dtype) and window stream offsets ``[n]``.

        Raises:
            FormatError: a token id is out of range for ``vocab_size`` (names file and offset).
        """
        starts = self.window_starts(pass_index, np.asarray(samples).ravel())
        tokens = np.empty((starts.shape[0], self.seq_len + 1), dtype=self.shards.dtype)
        self.shards.gather(starts, tokens)
        self.check_tokens(tokens, starts)
        return tokens, starts

    def check_tokens(self, tokens: np.ndarray, starts: np.ndarray) -> None:
        """Raise if a token id is negative or ``>= vocab_size`` (one pass over the block)."""
        vocab = self.config.vocab_size
        if tokens.size == 0:
            return
        bad_high = vocab is not None and int(tokens.max()) >= vocab
        bad_low = tokens.dtype.kind == "i" and int(tokens.min()) < 0
        if not (bad_high or bad_low):
            return
        bad = (tokens >= vocab) if bad_high else (tokens < 0)
        row, col = (int(v[0]) for v in np.nonzero(bad))
        shard, offset = self.shards.locate(int(starts[row]) + col)
        expected = f"< vocab_size = {vocab}" if bad_high else ">= 0"
        path, value = self.shards.shards[shard].path, int(tokens[row, col])
        raise FormatError(
            f"{path}: token {offset} is {value}, expected {expected}; the data was tokenized "
            "with another vocabulary or the dtype is wrong"
        )

    def source_positions(self, pass_index: int, sample: int) -> dict[str, dict[str, int]]:
        """Per source: index of its next sample in its own sequence, and that sample's epoch."""
        plan = self.plan
        local = sample if plan.num_samples is not None else pass_index * plan.num_windows + sample
        return {plan.name: {"epoch": local // plan.num_windows, "samples": local}}

    def fingerprint(self) -> dict[str, Any]:
        """Every input that decides which sample has which index (see docs/design.md §2.8).

        Batch size, world size, workers, prefetch, masks, eos and vocab_size are left out on
        purpose: they change who reads a sample or what is added to it, never its index.
        """
        sampling = self.config.sampling
        return {
            "algorithm": ALGORITHM,
            "seq_len": self.seq_len,
            "seed": self.config.seed,
            "mode": sampling.mode.value,
            "shuffle": sampling.shuffle,
            "num_samples": sampling.num_samples,
            "cross_shard": sampling.cross_shard,
            "sources": [self.catalog.config.name],
            "data": {self.catalog.config.name: self.catalog.fingerprint()},
        }

    def _check(self) -> None:
        name, cfg = self.catalog.config.name, self.config
        if self.layout.num_windows == 0:
            where = "any single shard" if not cfg.sampling.cross_shard else "the source"
            raise ConfigError(
                f"source {name!r}: {where} holds fewer than seq_len + 1 = {cfg.seq_len + 1} "
                f"tokens ({self.catalog.num_tokens} tokens in {len(self.catalog.shards)} shards); "
                "lower seq_len or add data"
            )
        top = np.iinfo(self.shards.dtype).max
        first = self.catalog.shards[0].path
        if cfg.vocab_size is not None and cfg.vocab_size - 1 > top:
            raise ConfigError(
                f"source {name!r}: vocab_size = {cfg.vocab_size} needs ids up to "
                f"{cfg.vocab_size - 1} but {first} stores {self.shards.dtype} (max {top}); "
                "the dtype or the vocabulary is wrong"
            )
        if cfg.eos_token_id is not None and cfg.eos_token_id > top:
            raise ConfigError(
                f"source {name!r}: eos_token_id = {cfg.eos_token_id} cannot occur in "
                f"{self.shards.dtype} tokens (max {top}) of {first}"
            )
        if cfg.packing.masks and cfg.eos_token_id is None and not self.has_documents:
            raise ConfigError(
                f"source {name!r}: packing.masks = true, but its format has no document index; "
                "set eos_token_id so documents can be found"
            )
