"""A progress bar: tqdm when installed (the ``progress`` extra), else a line every few seconds."""

from __future__ import annotations

import sys
import time
from typing import Any

__all__ = ["Progress"]


class Progress:
    """Counts towards ``total``; ``update_to(documents, done)`` reports absolute progress."""

    def __init__(self, total: int, unit: str) -> None:
        self.total = total
        self.unit = unit
        self._bar: Any = None
        self._last = time.monotonic()

    def __enter__(self) -> Progress:
        try:
            from tqdm import tqdm
        except ImportError:
            return self
        self._bar = tqdm(total=self.total, unit=" " + self.unit, unit_scale=True, file=sys.stderr)
        return self

    def update_to(self, documents: int, done: int) -> None:
        """Show ``done`` of ``total`` (and the documents so far)."""
        if self._bar is not None:
            self._bar.update(done - self._bar.n)
            self._bar.set_postfix(documents=documents, refresh=False)
            return
        now = time.monotonic()
        if now - self._last >= 5:
            self._last = now
            print(f"{done:,}/{self.total:,} {self.unit}, {documents:,} documents", file=sys.stderr)

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.close()
