"""``sampling.mode = "megatron"``: megatron-core's ``GPTDataset``/``BlendedDataset`` samples,
bit for bit (docs/megatron.md): its checks (:mod:`.checks`), its sources and index caches
(:mod:`.source`, :mod:`.indices`, :mod:`.core_cache`) and its stream (:mod:`.stream`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from streamload.modes.base import ModeSpec
from streamload.modes.megatron.options import MegatronOptions, check_megatron_sampling

if TYPE_CHECKING:
    from streamload.config import DataConfig
    from streamload.streams.interface import SampleStream

__all__ = ["MODE"]


def _check(config: DataConfig) -> None:
    from streamload.modes.megatron.checks import check_megatron_config

    check_megatron_config(config)


def _build(config: DataConfig) -> SampleStream:
    from streamload.modes.megatron.stream import MegatronStream

    return MegatronStream.from_config(config)


MODE = ModeSpec(
    name="megatron",
    build=_build,
    options=MegatronOptions,
    check_sampling=check_megatron_sampling,
    uses_cache_dir=True,
    own_evaluation_pass=True,
    check=_check,
    blends_sources=False,
)
"""The megatron mode's plug-in: several sources blend by Megatron's own rule, not by the
per-step mixture allocation."""
