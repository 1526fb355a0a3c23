"""Sampling modes, one folder each, found by name (docs/design.md §2.0).

``concat`` (windows over concatenated tokens), ``megatron`` (megatron-core's samples),
``packed`` and ``padded`` (whole documents), ``vsl`` (variable sequence lengths). A new mode is
a folder (or any module) defining a :class:`ModeSpec`, made known by :func:`register_mode`;
nothing else in the package changes.

Example:
    >>> from streamload.modes import get_mode
    >>> get_mode("packed").blends_sources
    True
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from streamload.config.modes import mode_names, mode_plugin, register_mode, unregister_mode
from streamload.modes.base import ModeSpec, SamplesRequest

if TYPE_CHECKING:
    from streamload.config import DataConfig
    from streamload.streams.interface import SampleStream

__all__ = [
    "ModeSpec",
    "SamplesRequest",
    "build_stream",
    "get_mode",
    "mode_names",
    "register_mode",
    "unregister_mode",
]


def get_mode(name: str) -> ModeSpec:
    """The plug-in of mode ``name``.

    Raises:
        ConfigError: no mode has that name.
    """
    return cast(ModeSpec, mode_plugin(name))


def build_stream(config: DataConfig) -> SampleStream:
    """Describe the sources and build the stream of the config's mode.

    Raises:
        ConfigError, FormatError: bad config or data (named).
    """
    return get_mode(config.sampling.mode_name).build(config)
