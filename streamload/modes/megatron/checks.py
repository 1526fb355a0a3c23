"""Checks of a whole config in ``sampling.mode = "megatron"`` (what has no Megatron meaning fails).

Options of the other modes that Megatron has no counterpart for are errors, never ignored:
``[[schedule]]``, ``[mixture]`` settings, per-source ``policy``/``max_epochs``, a weight on
some sources but not on others (Megatron's ``--data-path`` takes weights for all or none), and
``pad_token_id`` (a short last sample is padded as megatron-core pads without a tokenizer pad).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from streamload.config.options import MixtureConfig
from streamload.config.source import SourcePolicy
from streamload.errors import ConfigError

if TYPE_CHECKING:
    from streamload.config.data import DataConfig

__all__ = ["check_megatron_config"]


def check_megatron_config(config: DataConfig) -> None:
    """Raise :class:`ConfigError` for settings that make no sense with ``mode = "megatron"``."""
    where = "sampling.mode = 'megatron'"
    if config.seq_len < 2:
        raise ConfigError(f"seq_len = {config.seq_len}: {where} needs seq_len >= 2")
    if config.seed >= 2**32:
        raise ConfigError(
            f"seed = {config.seed} must be < 2**32 with {where} (Megatron seeds numpy's "
            "RandomState with it)"
        )
    if config.pad_token_id is not None:
        raise ConfigError(
            f"pad_token_id = {config.pad_token_id} has no meaning with {where}: a short last "
            "sample is padded with -1, as megatron-core pads when the tokenizer has no pad; "
            "remove it"
        )
    if config.schedule:
        raise ConfigError(f"[[schedule]] has no meaning with {where}; Megatron blends are static")
    if config.mixture != MixtureConfig():
        raise ConfigError(
            f"[mixture] options have no meaning with {where}; Megatron normalizes the source "
            "weights as they are"
        )
    for source in config.sources:
        if source.policy is not SourcePolicy.REPEAT or source.max_epochs is not None:
            raise ConfigError(
                f"source {source.name!r}: policy/max_epochs have no meaning with {where}; "
                "Megatron decides the epochs from num_samples"
            )
    weighted = [s.name for s in config.sources if s.weight is not None]
    if weighted and len(weighted) != len(config.sources):
        missing = [s.name for s in config.sources if s.weight is None]
        raise ConfigError(
            f"source(s) {', '.join(missing)} have no weight but {', '.join(weighted)} do; with "
            f"{where} give every source a weight (a weighted blend) or none (blend by size)"
        )
    if weighted and not any(s.weight for s in config.sources):
        raise ConfigError("all source weights are 0; at least one must be positive")
    if config.packing.masks and config.eos_token_id is None:
        raise ConfigError(
            f"packing.masks with {where} needs eos_token_id: Megatron finds documents by the "
            "EOD token inside each sample (the tokenizer's eod)"
        )
