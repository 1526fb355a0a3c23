"""streamload: deterministic, exactly resumable loading of pre-tokenized shards.

Quick start::

    import streamload
    loader = streamload.build_loader("data.toml", batch_size=8, num_workers=2)
    for step, batch in enumerate(loader):
        ...
        state = loader.state_dict()
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from streamload.config import (
    DataConfig,
    PackingConfig,
    SamplingConfig,
    SamplingMode,
    ShardFormat,
    SourceConfig,
    load_config,
)
from streamload.errors import ConfigError, FormatError, StateError, StreamloadError

if TYPE_CHECKING:
    from streamload.dataset import StreamDataset
    from streamload.loader import LoaderOptions, StreamLoader, WorkerType, build_loader
    from streamload.nodes.plan_chunks import RankSpec
    from streamload.stream import SampleStream

__version__ = "0.1.0"

# The loader's names import torch (1-2 s); they load on first use, so the CLI's tokenizing
# workers and other torch-free paths start fast.
_LAZY = {
    "LoaderOptions": "streamload.loader",
    "RankSpec": "streamload.nodes.plan_chunks",
    "SampleStream": "streamload.stream",
    "StreamDataset": "streamload.dataset",
    "StreamLoader": "streamload.loader",
    "WorkerType": "streamload.loader",
    "build_loader": "streamload.loader",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'streamload' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__all__ = [
    "ConfigError",
    "DataConfig",
    "FormatError",
    "LoaderOptions",
    "PackingConfig",
    "RankSpec",
    "SampleStream",
    "SamplingConfig",
    "SamplingMode",
    "ShardFormat",
    "SourceConfig",
    "StateError",
    "StreamDataset",
    "StreamLoader",
    "StreamloadError",
    "WorkerType",
    "__version__",
    "build_loader",
    "load_config",
]
