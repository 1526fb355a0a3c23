"""The ``[sampling]`` keys of ``megatron`` mode, and its checks of the shared ones."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from streamload.config.checks import check_bool
from streamload.config.enums import MEGATRON_DEFAULT_SPLIT, MegatronSplit
from streamload.errors import ConfigError

__all__ = ["MegatronOptions", "check_megatron_sampling"]


@dataclass(frozen=True, kw_only=True)
class MegatronOptions:
    """Args:
    add_extra_token: Samples read ``seq_len + 1`` tokens (``add_extra_token_to_sequence``).
    drop_last_partial: Valid split only: drop a last sample shorter than the others
        (``drop_last_partial_validation_sequence``); ``False`` pads it.
    """

    add_extra_token: bool = True
    drop_last_partial: bool = True

    def __post_init__(self) -> None:
        for name in ("add_extra_token", "drop_last_partial"):
            check_bool(getattr(self, name), f"sampling.{name}")


def check_megatron_sampling(sampling: Any) -> None:
    """Megatron's rules for the shared keys: ``num_samples`` required (its ``train_samples``),
    its own shuffles, ``split`` defaulting to Megatron-LM's ``"969,30,1"``."""
    if sampling.split is None:  # Megatron-LM's default: the Megatron code reads a str
        object.__setattr__(sampling, "split", MEGATRON_DEFAULT_SPLIT)
    if sampling.num_samples is None:
        raise ConfigError(
            "sampling.num_samples is required with mode = 'megatron' (Megatron's "
            "train_samples, or eval/test samples for the valid/test split)"
        )
    if sampling.shuffle_block:
        raise ConfigError(
            f"sampling.shuffle_block = {sampling.shuffle_block} has no meaning with mode = "
            "'megatron' (Megatron's document and sample shuffles decide the order); remove it"
        )
    for name in ("shuffle", "cross_shard"):
        if getattr(sampling, name) is not True:
            raise ConfigError(
                f"sampling.{name} = false has no meaning with mode = 'megatron': Megatron "
                "shuffles documents and samples with its own RandomState and samples cross "
                "sequence boundaries; remove it"
            )
    sampling.split_shares()
    if not sampling.options.drop_last_partial and sampling.split_name is not MegatronSplit.VALID:
        raise ConfigError(
            f"sampling.drop_last_partial = false applies only to split_name = 'valid' "
            f"(Megatron always drops the partial last sample of {sampling.split_name.value!r})"
        )
