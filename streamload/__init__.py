"""streamload: deterministic, exactly resumable loading of pre-tokenized shards.

Quick start::

    import streamload
    loader = streamload.build_loader("data.toml", batch_size=8, num_workers=2)
    for step, batch in enumerate(loader):
        ...
        state = loader.state_dict()
"""

from streamload.config import (
    DataConfig,
    PackingConfig,
    SamplingConfig,
    SamplingMode,
    ShardFormat,
    SourceConfig,
    load_config,
)
from streamload.dataset import StreamDataset
from streamload.errors import ConfigError, FormatError, StateError, StreamloadError
from streamload.loader import LoaderOptions, StreamLoader, WorkerType, build_loader
from streamload.nodes.plan_chunks import RankSpec
from streamload.stream import SampleStream

__version__ = "0.1.0"

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
