"""The ``[sampling]`` table: the keys every mode shares, and the mode's own options.

A mode's own keys (``long_documents`` of packed/padded, ``add_extra_token`` of megatron,
``min_seq_len`` … of vsl) are written in ``[sampling]`` like the shared ones, but they live in
the mode's folder: its ``ModeSpec.options`` dataclass checks them, and
:attr:`SamplingConfig.options` holds them (``None`` for a mode without any). Reading one as
``sampling.<key>`` still works; a key of another mode reads as that mode's default, and giving
it a value other than its default is refused, naming the modes it belongs to.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

from streamload.config.checks import check_bool, check_int, check_path, show, to_enum
from streamload.config.enums import MEGATRON_DEFAULT_SPLIT, MegatronSplit, SamplingMode
from streamload.config.modes import mode_names, mode_plugin
from streamload.errors import ConfigError

__all__ = ["SamplingConfig", "mode_option_keys"]

_MISSING = object()


@dataclasses.dataclass(frozen=True, init=False)
class SamplingConfig:
    """How the token stream becomes an ordered sequence of samples.

    Args:
        mode: Sampling mode (a built-in :class:`SamplingMode`, or a registered mode's name).
        shuffle: Permute a source's samples (windows, or packed/padded samples) per epoch,
            keyed by (seed, epoch, source).
        shuffle_block: Samples per shuffle block: nearby positions read one region of this
            many consecutive samples (block order and samples inside shuffled;
            :mod:`streamload.plan.block_shuffle`). 0: one uniform permutation.
        num_samples: Length of one pass in samples; more than one epoch repeats the data,
            reshuffled per epoch. ``None``: one pass is one epoch.
        cross_shard: ``False`` keeps every window inside one shard (KempnerForge/OLMo);
            ``concat`` mode only (documents never span shards).
        split: Megatron's ``--split`` (train, valid, test weights), e.g. ``"98,2,0"``: each
            source's documents are cut into three contiguous ranges
            (:mod:`streamload.plan.split`, docs/sampling.md). Unset: ``megatron`` mode uses
            Megatron's default ``"969,30,1"``; the other modes do not split (every document
            is training data).
        split_name: The split this stream reads (``train``, ``valid`` or ``test``); other
            than ``train`` it needs ``split`` in the concat, packed and padded modes.
        cache_dir: Folder of a mode's built indices and plans (megatron, packed, padded,
            vsl; unset: ``plans/`` in the storage cache folder).
        options: The mode's own options (its ``ModeSpec.options`` dataclass, or a mapping of
            its keys); the keys may also be given as keywords.
    """

    mode: SamplingMode | str = SamplingMode.CONCAT
    shuffle: bool = True
    shuffle_block: int = 0
    num_samples: int | None = None
    cross_shard: bool = True
    split: str | None = None
    split_name: MegatronSplit = MegatronSplit.TRAIN
    cache_dir: str | None = None
    options: Any = None

    def __init__(
        self,
        *,
        mode: SamplingMode | str = SamplingMode.CONCAT,
        shuffle: bool = True,
        shuffle_block: int = 0,
        num_samples: int | None = None,
        cross_shard: bool = True,
        split: str | None = None,
        split_name: MegatronSplit | str = MegatronSplit.TRAIN,
        cache_dir: str | None = None,
        options: Any = None,
        **mode_options: Any,
    ) -> None:
        shared = locals()
        for field in dataclasses.fields(self):
            object.__setattr__(self, field.name, shared[field.name])
        object.__setattr__(self, "mode", _mode_value(mode))
        plugin = mode_plugin(self.mode_name)
        object.__setattr__(self, "options", _options(plugin, self.mode_name, options, mode_options))
        self._check()
        if plugin.check_sampling is not None:
            plugin.check_sampling(self)
        self.check_split()

    def __getattr__(self, name: str) -> Any:
        """A mode option by its key (the mode's, else another mode's default)."""
        if name.startswith("_"):
            raise AttributeError(name)
        options = self.__dict__.get("options")
        if options is not None and name in _keys(type(options)):
            return getattr(options, name)
        default = _default_of(name)
        if default is _MISSING:
            raise AttributeError(f"'SamplingConfig' object has no attribute {name!r}")
        return default

    @property
    def mode_name(self) -> str:
        """The mode's name (a built-in's value, or a registered mode's name)."""
        return self.mode.value if isinstance(self.mode, SamplingMode) else self.mode

    @property
    def megatron_split(self) -> str:
        """The split string ``megatron`` mode reads (Megatron-LM's default when unset)."""
        return MEGATRON_DEFAULT_SPLIT if self.split is None else self.split

    def table(self) -> dict[str, Any]:
        """The ``[sampling]`` keys as written: the shared ones, then the mode's options."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        options = out.pop("options")
        if options is not None:
            out.update((f.name, getattr(options, f.name)) for f in dataclasses.fields(options))
        return out

    def _check(self) -> None:
        object.__setattr__(
            self, "split_name", to_enum(MegatronSplit, self.split_name, "sampling.split_name")
        )
        for name in ("shuffle", "cross_shard"):
            check_bool(getattr(self, name), f"sampling.{name}")
        if self.num_samples is not None:
            check_int(self.num_samples, "sampling.num_samples", 1)
        check_int(self.shuffle_block, "sampling.shuffle_block", 0)
        if self.shuffle_block and not self.shuffle:
            raise ConfigError(
                f"sampling.shuffle_block = {self.shuffle_block} needs shuffle = true (an "
                "unshuffled stream already reads consecutive windows); remove one of them"
            )
        if self.cache_dir is not None:
            if not mode_plugin(self.mode_name).uses_cache_dir:
                raise ConfigError(
                    f"sampling.cache_dir = {show(self.cache_dir)} applies only to mode = "
                    f"'megatron', 'packed', 'padded' or 'vsl' (built indices, plans), but "
                    f"mode = {self.mode_name!r}"
                )
            check_path(self.cache_dir, "sampling.cache_dir")

    def split_shares(self) -> list[float]:
        """The normalized (train, valid, test) shares of ``split`` (set), checked.

        Raises:
            ConfigError: not a split string, or a number too large for a float.
        """
        if not isinstance(self.split, str):
            raise ConfigError(
                f"sampling.split = {show(self.split)} must be a string like '969,30,1'"
            )
        import numpy as np  # not at `import streamload`

        from streamload.plan.split import parse_split

        with np.errstate(invalid="ignore"):  # a number beyond float range: refused below
            shares = parse_split(self.split)
        if not all(math.isfinite(share) for share in shares):
            raise ConfigError(
                f"sampling.split = {self.split!r} holds a number too large for a float"
            )
        return shares

    def check_split(self) -> None:
        """A split is optional (an empty part is refused when a stream reads it: the data
        decides whether it is empty); another split than train needs one.

        Raises:
            ConfigError: a malformed split, or ``split_name`` without a split.
        """
        if self.split is not None:
            self.split_shares()
        elif self.split_name is not MegatronSplit.TRAIN:
            raise ConfigError(
                f"sampling.split_name = {self.split_name.value!r} needs sampling.split "
                "(e.g. split = '98,2,0'); without a split every document is training data"
            )


def mode_option_keys() -> dict[str, list[str]]:
    """Every mode option key, with the modes whose ``[sampling]`` has it."""
    out: dict[str, list[str]] = {}
    for name in mode_names():
        kind = mode_plugin(name).options
        for key in () if kind is None else _keys(kind):
            out.setdefault(key, []).append(name)
    return out


def _mode_value(value: object) -> SamplingMode | str:
    """A built-in mode as its :class:`SamplingMode`, a registered one by its name."""
    if isinstance(value, SamplingMode):
        return value
    if isinstance(value, str) and value not in {m.value for m in SamplingMode}:
        return str(mode_plugin(value).name)  # the registry names the valid modes
    return to_enum(SamplingMode, value, "sampling.mode")


def _options(plugin: Any, mode: str, options: Any, given: dict[str, Any]) -> Any:
    """The mode's options from an instance, a mapping and keywords; another mode's key is
    dropped at its default and refused otherwise."""
    kind = plugin.options
    if kind is not None and isinstance(options, kind) and not given:
        return options
    if options is not None and not isinstance(options, Mapping):
        raise ConfigError(f"sampling options = {show(options)} must be a table of mode options")
    values = {**(options or {}), **given}
    own = set() if kind is None else set(_keys(kind))
    for key in sorted(set(values) - own):
        value = values.pop(key)
        owners = mode_option_keys().get(key)
        if owners is None:
            raise ConfigError(f"sampling: unknown key {key!r}")
        if value != _default_of(key):
            shown = show(getattr(value, "value", value))
            where = " or ".join(repr(n) for n in owners)
            raise ConfigError(
                f"sampling.{key} = {shown} applies only to mode = {where}, but mode = {mode!r}"
            )
    return None if kind is None else kind(**values)


def _keys(kind: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(kind))


def _default_of(key: str) -> Any:
    """The default of mode option ``key`` (the first mode declaring it), or ``_MISSING``."""
    for name in mode_option_keys().get(key, ()):
        for field in dataclasses.fields(mode_plugin(name).options):
            if field.name == key:
                return field.default
    return _MISSING
