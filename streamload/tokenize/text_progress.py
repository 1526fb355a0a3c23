"""The progress of filling a text cache: files, documents, tokens/s and the time left.

tqdm when installed (the ``progress`` extra), else a log line every 30 seconds; shown by
one process of a job (rank 0) and by ``streamload prepare``.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import Any

__all__ = ["TextProgress"]

_LOG = logging.getLogger("streamload.text")


class TextProgress:
    """Counts files done of ``total`` and the documents and tokens tokenized (a callable
    taking ``(files, documents, tokens)`` increments, as the builder reports them).

    Args:
        total: Files to tokenize (or set by :meth:`start`).
        what: What is tokenized (the source's name), shown first.
    """

    def __init__(self, total: int, what: str) -> None:
        self.total = total
        self.what = what
        self.documents = 0
        self.tokens = 0
        self._start = time.monotonic()
        self._last = self._start
        self._bar: Any = None

    def start(self, total: int) -> None:
        """Show the bar for ``total`` files (nothing is shown when no file is missing)."""
        self.total = total
        self._start = self._last = time.monotonic()
        try:
            from tqdm import tqdm
        except ImportError:
            _LOG.warning("%s: tokenizing %d files into the cache", self.what, total)
            return
        tty = sys.stderr.isatty()  # a job's log file gets a line every 30 s, not a stream
        self._bar = tqdm(
            total=total, unit=" files", desc=self.what, file=sys.stderr,
            mininterval=0.1 if tty else 30.0,
        )  # fmt: skip

    def __call__(self, files: int, documents: int, tokens: int) -> None:
        self.documents += documents
        self.tokens += tokens
        rate = self.tokens / max(time.monotonic() - self._start, 1e-9)
        if self._bar is not None:
            self._bar.update(files)
            self._bar.set_postfix(docs=f"{self.documents:,}", tok_s=f"{rate:,.0f}", refresh=False)
            return
        now = time.monotonic()
        if now - self._last >= 30:
            self._last = now
            _LOG.warning(
                "%s: %d documents, %d tokens tokenized (%.0f tokens/s)",
                self.what, self.documents, self.tokens, rate,
            )  # fmt: skip

    def close(self) -> None:
        """Finish the bar."""
        if self._bar is not None:
            self._bar.close()
