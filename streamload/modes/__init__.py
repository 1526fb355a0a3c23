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

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, cast

from streamload.config.modes import mode_names, mode_plugin, register_mode, unregister_mode
from streamload.modes.base import ModeSpec, SamplesRequest

if TYPE_CHECKING:
    from streamload.config import DataConfig
    from streamload.streams.interface import SampleStream

__all__ = [
    "ModeSpec",
    "SamplesRequest",
    "adopted_stream",
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


def adopted_stream(stream: SampleStream, state: Any) -> SampleStream:
    """The stream a saved state resumes in: ``stream``, or, where its mode adopts the rule
    the state was saved under (:attr:`ModeSpec.adopt_state`; packed mode: the packing group
    size of states made before issue 34) and the config leaves it unset, the stream of the
    config that names it. An evaluation stream, a state without a fingerprint mapping or a
    malformed one is left to the state checks.

    Raises:
        ConfigError, FormatError: the adopted config's stream cannot be built (named).
    """
    fingerprint = state.get("fingerprint") if isinstance(state, Mapping) else None
    if not isinstance(fingerprint, Mapping) or stream.layout.evaluation:
        return stream
    adopt = get_mode(stream.config.sampling.mode_name).adopt_state
    config = None if adopt is None else adopt(stream.config, fingerprint)
    return stream if config is None else build_stream(config)
