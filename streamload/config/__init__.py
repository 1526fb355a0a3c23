"""Configuration: frozen dataclasses, loaded from TOML, YAML or a dict, printable back.

Example:
    >>> cfg = DataConfig.from_dict({
    ...     "seq_len": 8,
    ...     "sources": [{"name": "web", "path": "/data/web", "dtype": "uint16"}],
    ... })
    >>> cfg.sampling.mode
    <SamplingMode.CONCAT: 'concat'>

Relative source paths in a config *file* are resolved against the file's folder, so a config
travels with its data; in a dict they are taken as they are (relative to the working folder).
"""

from streamload.config.batch_schedule import BatchStepConfig
from streamload.config.data import DataConfig, load_config
from streamload.config.options import (
    LongDocuments,
    MixtureBatching,
    MixtureConfig,
    MixtureUnit,
    PackingConfig,
    PhaseConfig,
    SamplingConfig,
    SamplingMode,
)
from streamload.config.source import (
    TOKEN_DTYPES,
    OnError,
    ShardFormat,
    SourceConfig,
    SourcePolicy,
)
from streamload.config.storage import StorageConfig

__all__ = [
    "TOKEN_DTYPES",
    "BatchStepConfig",
    "DataConfig",
    "LongDocuments",
    "MixtureBatching",
    "MixtureConfig",
    "MixtureUnit",
    "OnError",
    "PackingConfig",
    "PhaseConfig",
    "SamplingConfig",
    "SamplingMode",
    "ShardFormat",
    "SourceConfig",
    "SourcePolicy",
    "StorageConfig",
    "load_config",
]
