"""The sampling modes by name: the one table ``sampling.mode`` is looked up in.

A mode is a plug-in (docs/design.md §2.0): a folder of :mod:`streamload.modes` whose package
defines ``MODE``, a :class:`streamload.modes.ModeSpec`. This table maps each name to where its
plug-in lives and loads it on first use, so the config layer knows modes by name only and
never imports a mode's code at ``import streamload``; :func:`register_mode` adds a mode
defined anywhere (a user's package, a test) without touching this package.

Example:
    >>> mode_plugin("concat").name
    'concat'
"""

from __future__ import annotations

import importlib
from typing import Any, Protocol

from streamload.errors import ConfigError

__all__ = ["ModeChecks", "mode_names", "mode_plugin", "register_mode", "unregister_mode"]

_BUILTIN = {
    "concat": "streamload.modes.concat",
    "megatron": "streamload.modes.megatron",
    "packed": "streamload.modes.packed:PACKED",
    "padded": "streamload.modes.packed:PADDED",
    "vsl": "streamload.modes.vsl",
}
"""Built-in modes: ``module`` (its ``MODE``) or ``module:attribute``."""

_REGISTERED: dict[str, Any] = {}
"""Modes added by :func:`register_mode`, and built-ins once loaded."""


class ModeChecks(Protocol):
    """What the config layer asks a mode (the whole plug-in: :class:`streamload.modes.ModeSpec`)."""

    @property
    def name(self) -> str:
        """The ``sampling.mode`` value."""
        ...

    @property
    def options(self) -> type | None:
        """The dataclass of the mode's own ``[sampling]`` keys (``None``: none)."""
        ...

    @property
    def check_sampling(self) -> Any:
        """Checks of the shared ``[sampling]`` keys in this mode, or ``None``."""
        ...

    @property
    def uses_cache_dir(self) -> bool:
        """``sampling.cache_dir`` means something in this mode."""
        ...

    @property
    def own_evaluation_pass(self) -> bool:
        """An evaluation loader walks the mode's own pass of the split."""
        ...

    @property
    def blends_sources(self) -> bool:
        """Several sources (or a ``[[schedule]]``) form a weighted mixture."""
        ...

    def check_config(self, config: Any) -> None:
        """Checks of the whole config in this mode (:class:`streamload.config.DataConfig`)."""
        ...

    def check_evaluation(self, split: str | None) -> None:
        """Refuse an evaluation pass over ``split`` where the mode has none."""
        ...


def mode_names() -> tuple[str, ...]:
    """Every known mode name: the built-ins, then the registered ones."""
    return (*_BUILTIN, *(name for name in _REGISTERED if name not in _BUILTIN))


def register_mode(mode: Any, *, replace: bool = False) -> None:
    """Make ``mode`` (a :class:`streamload.modes.ModeSpec`) the plug-in of ``mode.name``.

    Raises:
        ConfigError: the name is taken (a built-in, or registered before) and not ``replace``.
    """
    name = mode.name
    if not isinstance(name, str) or not name.isidentifier():
        raise ConfigError(f"mode name {name!r} must be an identifier like 'concat'")
    if not replace and name in mode_names():
        raise ConfigError(f"sampling mode {name!r} exists; pass replace=True to swap it")
    _REGISTERED[name] = mode


def unregister_mode(name: str) -> None:
    """Forget a registered mode (a built-in comes back as it was)."""
    _REGISTERED.pop(name, None)


def mode_plugin(name: str) -> Any:
    """The plug-in of mode ``name`` (loaded on first use).

    Raises:
        ConfigError: no mode has that name.
    """
    mode = _REGISTERED.get(name)
    if mode is not None:
        return mode
    where = _BUILTIN.get(name)
    if where is None:
        allowed = ", ".join(repr(n) for n in mode_names())
        raise ConfigError(f"sampling.mode = {name!r} is not one of {allowed}")
    module, _, attribute = where.partition(":")
    mode = getattr(importlib.import_module(module), attribute or "MODE")
    _REGISTERED[name] = mode
    return mode
