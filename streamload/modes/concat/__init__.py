"""``sampling.mode = "concat"``: windows of ``seq_len + 1`` tokens at stride ``seq_len`` over
each source's concatenated tokens (:mod:`streamload.modes.concat.stream`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from streamload.modes.base import ModeSpec

if TYPE_CHECKING:
    from streamload.config import DataConfig
    from streamload.streams.interface import SampleStream

__all__ = ["MODE"]


def _build(config: DataConfig) -> SampleStream:
    from streamload.modes.concat.stream import ConcatStream  # numpy and the catalog: on use

    return ConcatStream.from_config(config)


MODE = ModeSpec(name="concat", build=_build, cuts_rows=True)
"""The concat mode's plug-in."""
