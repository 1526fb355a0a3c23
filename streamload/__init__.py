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
import importlib.util
import sys
import warnings
from types import ModuleType
from typing import TYPE_CHECKING, Any

from streamload.config import (
    DataConfig,
    LongDocuments,
    PackingConfig,
    SamplingConfig,
    SamplingMode,
    ShardFormat,
    SourceConfig,
    load_config,
)
from streamload.errors import (
    ConfigError,
    FormatError,
    RemoteReadError,
    RemoteStallError,
    StateError,
    StreamloadError,
    WorkerDiedError,
    WorkerError,
)
from streamload.util.lazy import lazy_attributes

if TYPE_CHECKING:
    from streamload.dataset import StreamDataset
    from streamload.distributed import ModelParallel
    from streamload.loader import (
        LoaderOptions,
        StreamLoader,
        WorkerType,
        build_loader,
        evaluation_stream,
    )
    from streamload.plan.partition import RankSpec
    from streamload.streams.interface import SampleStream, build_stream

__version__ = "0.1.0"

# The loader's names import torch (1-2 s), RankSpec and the streams numpy; they load on first
# use, so `import streamload` (the CLI, its tokenizing workers) stays light.
_LAZY = {
    "LoaderOptions": "streamload.loader",
    "ModelParallel": "streamload.distributed",
    "RankSpec": "streamload.plan.partition",
    "SampleStream": "streamload.streams.interface",
    "StreamDataset": "streamload.dataset",
    "StreamLoader": "streamload.loader",
    "WorkerType": "streamload.loader",
    "build_loader": "streamload.loader",
    "build_stream": "streamload.streams.interface",
    "evaluation_stream": "streamload.loader",
}


__getattr__ = lazy_attributes(__name__, globals(), _LAZY)


_MOVED = {
    "streamload.catalog_cache": "streamload.catalog.store",
    "streamload.chunks": "streamload.streams.chunks",
    "streamload.convert": "streamload.tools.convert",
    "streamload.demo": "streamload.tools.demo",
    "streamload.documents": "streamload.tools.documents",
    "streamload.listing": "streamload.catalog.listing",
    "streamload.megatron_cache": "streamload.util.index_cache",
    # issue 31: the build-once array cache serves the catalog too (a layer below it)
    "streamload.streams.array_record": "streamload.util.array_record",
    "streamload.streams.index_cache": "streamload.util.index_cache",
    "streamload.megatron_config": "streamload.modes.megatron.checks",
    "streamload.megatron_source": "streamload.modes.megatron.source",
    "streamload.megatron_stream": "streamload.modes.megatron.stream",
    "streamload.nodes.types": "streamload.streams.chunks",
    "streamload.ops.gather": "streamload.streams.shard_set",
    "streamload.remote.errors": "streamload.errors",
    "streamload.remote.prefetch": "streamload.nodes.lookahead",
    "streamload.report": "streamload.tools.report",
    "streamload.source_stream": "streamload.streams.token_source",
    "streamload.stream": "streamload.streams.interface",
    "streamload.tokenize.encoder": "streamload.formats.encoder",
    "streamload.varlen": "streamload.ops.varlen",
    # issue 30: each sampling mode is a folder of streamload.modes
    "streamload.config.megatron": "streamload.modes.megatron.checks",
    "streamload.config.packed": "streamload.modes.packed.checks",
    "streamload.config.vsl": "streamload.modes.vsl.options",
    "streamload.streams.concat": "streamload.modes.concat.stream",
    "streamload.streams.concat_source": "streamload.streams.token_source",
    "streamload.streams.megatron": "streamload.modes.megatron.stream",
    "streamload.streams.megatron_core_cache": "streamload.modes.megatron.core_cache",
    "streamload.streams.megatron_indices": "streamload.modes.megatron.indices",
    "streamload.streams.megatron_source": "streamload.modes.megatron.source",
    "streamload.streams.packed": "streamload.modes.packed.stream",
    "streamload.streams.packed_plan": "streamload.modes.packed.plan_cache",
    "streamload.streams.packed_source": "streamload.modes.packed.source",
    "streamload.streams.vsl": "streamload.modes.vsl.stream",
    "streamload.streams.vsl_draws": "streamload.modes.vsl.draws",
    "streamload.streams.vsl_plan": "streamload.modes.vsl.plan_cache",
    "streamload.streams.vsl_source": "streamload.modes.vsl.source",
    "streamload.tools.vsl_report": "streamload.modes.vsl.report",
    # issue 30: formats/ by family (a family named as its old module re-exports its names)
    "streamload.formats.arrow_columns": "streamload.formats.arrow.columns",
    "streamload.formats.arrow_folder": "streamload.formats.arrow.folder",
    "streamload.formats.arrow_masks": "streamload.formats.arrow.masks",
    "streamload.formats.jsonl_index": "streamload.formats.jsonl.index",
    "streamload.formats.mds_write": "streamload.formats.mds.write",
    "streamload.formats.npy": "streamload.formats.numpy.npy",
    "streamload.formats.numpy_folder": "streamload.formats.numpy.folder",
    "streamload.formats.parquet": "streamload.formats.arrow.parquet",
    "streamload.formats.parquet_folder": "streamload.formats.arrow.parquet_folder",
    "streamload.formats.raw": "streamload.formats.numpy.raw",
    "streamload.formats.save_to_disk": "streamload.formats.arrow.save_to_disk",
}
"""Module paths of releases before the layered layout (docs/design.md §2) → where they live
now. Importing an old path gives the new module, with a ``DeprecationWarning``."""


class _MovedModules:
    """A meta path finder and loader (by protocol: ``importlib.abc`` alone would add ~7 ms to
    ``import streamload``) that resolves the old module paths of :data:`_MOVED` to their new
    modules; no files are left at the old paths (the package root holds only entry points)."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname not in _MOVED:
            return None
        # typeshed wants the legacy load_module of a loader; the import system does not
        return importlib.util.spec_from_loader(fullname, self)  # type: ignore[arg-type]

    def create_module(self, spec: Any) -> ModuleType:
        new = _MOVED[spec.name]
        warnings.warn(
            f"{spec.name} moved to {new}; import it from there", DeprecationWarning, stacklevel=2
        )
        return importlib.import_module(new)

    def exec_module(self, module: ModuleType) -> None:
        """The module is the new one, already executed."""


if not any(isinstance(finder, _MovedModules) for finder in sys.meta_path):
    sys.meta_path.append(_MovedModules())

__all__ = [
    "ConfigError",
    "DataConfig",
    "FormatError",
    "LoaderOptions",
    "LongDocuments",
    "ModelParallel",
    "PackingConfig",
    "RankSpec",
    "RemoteReadError",
    "RemoteStallError",
    "SampleStream",
    "SamplingConfig",
    "SamplingMode",
    "ShardFormat",
    "SourceConfig",
    "StateError",
    "StreamDataset",
    "StreamLoader",
    "StreamloadError",
    "WorkerDiedError",
    "WorkerError",
    "WorkerType",
    "__version__",
    "build_loader",
    "build_stream",
    "evaluation_stream",
    "load_config",
]
