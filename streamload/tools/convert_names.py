"""The names of the formats ``streamload convert`` writes, apart from their writers.

The command line offers them as ``--to`` choices while it builds its parser; kept here, that
costs no format code (numpy, the readers), so ``streamload --help`` starts at once.
:mod:`streamload.tools.convert_targets` holds each target's rules.
"""

from __future__ import annotations

__all__ = ["TARGETS"]

TARGETS = (
    "megatron", "modalities", "dolma", "numpy", "datatrove", "parquet", "arrow", "mds", "litdata"
)  # fmt: skip
"""Formats ``streamload convert`` writes."""
