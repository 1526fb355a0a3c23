"""Checks of a whole config in ``sampling.mode = "packed"`` or ``"padded"``.

Samples hold whole documents (or pieces of long ones) and then ``pad_token_id`` up to
``seq_len + 1`` tokens, so the pad id is required, and it must be an id that never stands for
a real token the config names: ``eos_token_id``, or a tokenizing source's ``bos_token_id`` and
``eos_token_id`` (padding would read as a document boundary). The ``[sampling]`` table checks
its own keys (:class:`~streamload.config.options.SamplingConfig`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from streamload.config.options import MixtureUnit
from streamload.errors import ConfigError

if TYPE_CHECKING:
    from streamload.config.data import DataConfig

__all__ = ["check_packed_config"]


def check_packed_config(config: DataConfig) -> None:
    """Raise :class:`ConfigError` for settings that ``packed``/``padded`` modes cannot honour."""
    where = f"sampling.mode = {config.sampling.mode_name!r}"
    pad = config.pad_token_id
    if pad is None:
        raise ConfigError(
            f"pad_token_id is required with {where}: it fills every sample after its "
            "documents up to seq_len + 1 tokens; give an id that is not a real token of the "
            "data (e.g. the tokenizer's pad token), other than eos_token_id"
        )
    named = [("eos_token_id", config.eos_token_id)]
    for source in config.sources:
        for name in ("bos_token_id", "eos_token_id"):
            named.append((f"source {source.name!r}: {name}", getattr(source, name)))
    for name, token in named:
        if token == pad:
            raise ConfigError(
                f"pad_token_id = {pad} equals {name} = {token}; with {where} they must differ "
                "(padding would read as a document boundary)"
            )
    if config.mixture.unit is MixtureUnit.TOKENS:
        raise ConfigError(
            f"mixture.unit = 'tokens' with {where}: a mixture allocates samples per global "
            "batch, and these samples hold different numbers of real tokens (the rest is "
            "padding), so the weights would not be token shares; use unit = 'samples'"
        )
