"""One source's own endless sequence of samples: sample ``j`` → epoch ``j // n`` → window → tokens.

Each epoch of a source is a fresh permutation of its ``n`` windows keyed by
``(seed, epoch, source name)``, so a source that runs out simply continues with its next
epoch, reshuffled, whatever the other sources do.
"""

from __future__ import annotations

from typing import NoReturn

import numpy as np

from streamload.catalog.sources import SourceCatalog
from streamload.config import DataConfig, SourcePolicy
from streamload.errors import ConfigError, FormatError
from streamload.formats.registry import get_format
from streamload.plan.passes import PassPlan
from streamload.plan.windows import WindowLayout
from streamload.streams.shard_set import ShardSet, loss_mask_set
from streamload.streams.source_documents import ShardDocuments
from streamload.streams.source_split import source_split

__all__ = ["ConcatSource", "TokenSource"]


class TokenSource:
    """Samples of one source, indexed by the source-local index ``j``.

    Args:
        config: The data config (seq_len, seed, sampling, vocabulary checks).
        catalog: The described source.

    Raises:
        ConfigError: the source cannot serve this config (no whole window, a vocabulary or
            EOS its dtype cannot hold, masks without any way to find documents).
    """

    def __init__(self, config: DataConfig, catalog: SourceCatalog) -> None:
        self._bind(config, catalog)
        self.split = source_split(config, catalog, self.shards)  # None: no split is set
        counts = catalog.shards.num_tokens
        span = None if self.split is None else self.split.span
        self.layout = WindowLayout(counts, config.seq_len, config.sampling.cross_shard, span)
        self._check()
        self.order = PassPlan(
            name=self.name,
            num_windows=self.layout.num_windows,
            seed=config.seed,
            shuffle=config.sampling.shuffle,
            shuffle_block=config.sampling.shuffle_block,
            num_samples=None,
        )

    def _bind(self, config: DataConfig, catalog: SourceCatalog) -> None:
        """What every source class holds: the config, the described source, its open shards."""
        self.config = config
        self.catalog = catalog
        self.name = catalog.config.name
        self.seq_len = config.seq_len
        self.shards = ShardSet(catalog.shards, config.storage)
        self.loss_masks = loss_mask_set(catalog.shards, config.storage)
        self.documents = ShardDocuments(config, self.shards)  # read when a chunk needs them

    @property
    def num_windows(self) -> int:
        """Windows in one epoch of this source."""
        return self.layout.num_windows

    @property
    def limit(self) -> int | None:
        """Samples this source may give before its policy ends the stream (``None``: endless)."""
        src = self.catalog.config
        if src.max_epochs is not None:
            return src.max_epochs * self.num_windows
        return self.num_windows if src.policy is SourcePolicy.STOP else None

    def drawn(self, samples: int) -> dict[str, int]:
        """Nothing to count beyond the samples: every window is ``seq_len + 1`` data tokens."""
        return {}

    @property
    def has_documents(self) -> bool:
        """Whether the shards' format records document boundaries (else EOS finds them)."""
        return all(get_format(name).has_documents for name in self.catalog.shards.facts.formats)

    def window_starts(self, local: np.ndarray) -> np.ndarray:
        """Stream offsets of the windows of source-local sample indices (any shape)."""
        ids = np.asarray(local, dtype=np.int64)
        return self.layout.starts(self.order.window_ids(0, ids.ravel())).reshape(ids.shape)

    def prefetch(self, local: np.ndarray) -> None:
        """Start fetching the windows of source-local samples from remote shards (the
        planner's lookahead, :mod:`streamload.nodes.lookahead`); a no-op for local shards."""
        if self.shards.remote:
            starts = self.window_starts(local)
            self.shards.prefetch(starts, self.seq_len + 1)
            if self.loss_masks is not None:
                self.loss_masks.prefetch(starts, self.seq_len + 1)

    def read(self, local: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Tokens ``[n, seq_len + 1]`` (file dtype) and window stream offsets ``[n]``."""
        starts = self.window_starts(np.asarray(local).ravel())
        tokens = self.shards.windows(starts, self.seq_len + 1, self.shards.dtype)
        self.check_tokens(tokens, starts)
        return tokens, starts

    def read_loss_mask(self, starts: np.ndarray) -> np.ndarray | None:
        """Loss flags ``[n, seq_len + 1]`` (uint8, nonzero = trained) of the windows at stream
        offsets ``starts``, from the shards' mask files; ``None`` when the source has none."""
        if self.loss_masks is None:
            return None
        return self.loss_masks.windows(starts, self.seq_len + 1, np.dtype(np.uint8))

    def stream_offset(self, local: int, start: int, position: int) -> int | None:
        """Where ``position`` of source-local sample ``local`` (read from stream offset
        ``start``) lies in the source's tokens; ``None`` for padding (``streamload show``)."""
        return start + position

    def document_starts(self, starts: np.ndarray) -> np.ndarray:
        """Document starts ``[n, seq_len + 1]`` of the windows at stream offsets ``starts``,
        from the indexes of the shards they touch (:class:`ShardDocuments`)."""
        return self.documents.starts(starts, self.seq_len + 1)

    def check_tokens(self, tokens: np.ndarray, starts: np.ndarray) -> None:
        """Raise if a token id is negative or ``>= vocab_size`` (one pass over the block);
        row ``r`` of ``tokens`` starts at stream offset ``starts[r]``."""
        found = self.first_bad_token(tokens)
        if found is not None:
            row, col = found
            self.refuse_token(int(starts[row]) + col, int(tokens[row, col]))

    def first_bad_token(self, tokens: np.ndarray) -> tuple[int, int] | None:
        """``(row, column)`` of the first token id that is negative or ``>= vocab_size``
        (one max, and one min for signed dtypes, when all are good)."""
        vocab = self.config.vocab_size
        if tokens.size == 0:
            return None
        bad_high = vocab is not None and int(tokens.max()) >= vocab
        bad_low = tokens.dtype.kind == "i" and int(tokens.min()) < 0
        if not (bad_high or bad_low):
            return None
        bad = (tokens >= vocab) if bad_high else (tokens < 0)
        row, col = (int(v[0]) for v in np.nonzero(bad))
        return row, col

    def refuse_token(self, stream_offset: int, value: int) -> NoReturn:
        """The error of a bad token id ``value`` at ``stream_offset``, naming file and offset."""
        shard, offset = self.shards.locate(stream_offset)
        vocab = self.config.vocab_size
        expected = f"< vocab_size = {vocab}" if value >= 0 else ">= 0"
        raise FormatError(
            f"{self.shards.shards[shard].path}: token {offset} is {value}, expected {expected}; "
            "the data was tokenized with another vocabulary or the dtype is wrong"
        )

    def _check(self) -> None:
        name, cfg = self.name, self.config
        if self.layout.num_windows == 0:
            where = "any single shard" if not cfg.sampling.cross_shard else "the source"
            held = f"{self.catalog.num_tokens} tokens in {len(self.catalog.shards)} shards"
            if self.split is not None:
                lo, hi = self.split.span
                where = f"the {self.split.name} split of {where}"
                held = f"tokens [{lo}, {hi}) of {held}, split = {self.split.split!r}"
            raise ConfigError(
                f"source {name!r}: {where} holds fewer than seq_len + 1 = {cfg.seq_len + 1} "
                f"tokens ({held}); lower seq_len or add data"
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


ConcatSource = TokenSource
"""The name of :class:`TokenSource` before sampling modes became plug-ins (issue 30); it is
the shared source base of every source-based mode, not concat mode's own."""
