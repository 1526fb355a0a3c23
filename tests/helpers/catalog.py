"""Test helper for files rewritten in place between two descriptions."""

from __future__ import annotations

import os
import time
from pathlib import Path


def rewrote_in_place(path: Path | str) -> None:
    """Mark ``path``'s folder modified, as a writer that replaces files by renaming would:
    a file rewritten under its own name changes neither its folder's time nor its names, so
    the cached catalog would serve until the shard is opened (streamload.catalog.identity);
    a test that describes such a file again wants the catalog described anew."""
    folder = Path(path).parent
    now = time.time_ns()
    os.utime(folder, ns=(now, max(now, folder.stat().st_mtime_ns + 1)))
