"""Loader arguments: :class:`LoaderOptions` and the checks of ``build_loader``'s arguments.

None of these change which sample is where (they decide who computes it and when), so they
are not in the config file or the fingerprint. They are checked here, with the config's
checks, so that a bad value is a :class:`ConfigError` naming it before any listing, header
read or worker start, never a ``TypeError`` from deep inside or a value silently truncated
(``batch_size=1.5`` used as 1). The rules (docs/config.md, "Loader arguments"):

* ``batch_size``: an integer >= 1; ``grad_accum_steps * world_size * batch_size`` (the
  samples of one optimizer step) fits int64 and equals the config's ``global_batch_size``
  when that is set; with a batch size schedule (``rampup_batch_size``, ``[[batch_schedule]]``)
  ``world_size * batch_size`` instead divides every step's size.
* ``rank``, ``world_size``: integers, ``0 <= rank < world_size``.
* ``num_workers``: an integer in ``[0, NUM_WORKERS_LIMIT]``.
* ``options``: a :class:`LoaderOptions`, a table of its fields, or ``None``.

Integers are Python or NumPy integers, never ``bool`` and never ``float`` (not even ``4.0``).
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from streamload.config.batch_schedule import has_batch_ramp, step_sizes
from streamload.config.checks import (
    INT64_MAX,
    check_bool,
    check_count,
    show,
    table_fields,
    to_enum,
)
from streamload.errors import ConfigError

if TYPE_CHECKING:
    from streamload.config.data import DataConfig

__all__ = [
    "CHUNK_BATCHES_LIMIT",
    "LOADER_ARGUMENTS",
    "NUM_WORKERS_LIMIT",
    "PREFETCH_LIMIT",
    "LoaderOptions",
    "WorkerType",
    "check_loader_args",
]

NUM_WORKERS_LIMIT = 256
"""Most loader workers per rank: each holds a chunk (~16 MiB) and a thread or a process;
beyond a few per core they only add memory and start-up time."""
PREFETCH_LIMIT = 256
"""Most chunks in flight beyond one per worker (process workers allocate one shared-memory
slot of a chunk's size for each chunk in flight, up front)."""
CHUNK_BATCHES_LIMIT = 4096
"""Most batches per chunk: a worker holds a whole chunk in memory."""
LOADER_ARGUMENTS = (
    "batch_size",
    "mesh",
    "model_parallel",
    "num_workers",
    "options",
    "rank",
    "shuffle",
    "split",
    "world_size",
)
"""``build_loader``'s keyword arguments besides the config."""


class WorkerType(str, enum.Enum):
    """Where loader workers run."""

    THREAD = "thread"
    """Threads in the training process (the default and the fastest here): no IPC, and the
    numpy copies and mask kernels release the GIL."""
    PROCESS = "process"
    """Processes (like ``torch.utils.data.DataLoader``): chunks return through reused
    shared-memory slots and are copied once in the main process (see benchmarks/RESULTS.md)."""


@dataclass(frozen=True, kw_only=True)
class LoaderOptions:
    """How batches are produced; none of these change which sample is where.

    Args:
        worker_type: Threads or processes for ``num_workers > 0``.
        prefetch: Chunks in flight beyond one per worker (0: each worker holds one), at most
            :data:`PREFETCH_LIMIT`.
        pin_memory: Pin batches (only when CUDA is available).
        chunk_batches: Batches per work unit, at most :data:`CHUNK_BATCHES_LIMIT`; ``None``
            picks about 16 MiB per chunk.
        multiprocessing_context: A start method of this platform (``fork``, ``spawn``,
            ``forkserver`` on Linux) for process workers; ``None``: torch's default.

    Raises:
        ConfigError: a value of the wrong type or out of range.
    """

    worker_type: WorkerType = WorkerType.THREAD
    prefetch: int = 2
    pin_memory: bool = False
    chunk_batches: int | None = None
    multiprocessing_context: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "worker_type", to_enum(WorkerType, self.worker_type, "worker_type")
        )
        check_count(self.prefetch, "prefetch", 0, PREFETCH_LIMIT)
        check_bool(self.pin_memory, "pin_memory")
        if self.chunk_batches is not None:
            check_count(self.chunk_batches, "chunk_batches", 1, CHUNK_BATCHES_LIMIT)
        context = self.multiprocessing_context
        if context is None:
            return
        import multiprocessing  # ~6 ms: not at `import streamload`

        methods = multiprocessing.get_all_start_methods()
        if not isinstance(context, str) or context not in methods:
            allowed = ", ".join(repr(m) for m in methods)
            raise ConfigError(f"multiprocessing_context = {show(context)} is not one of {allowed}")
        if self.worker_type is not WorkerType.PROCESS:
            raise ConfigError(
                f"multiprocessing_context = {context!r} applies only to worker_type = "
                "'process' (thread workers start no process); remove it or use processes"
            )

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LoaderOptions:
        """Build from a table of the fields (``{"worker_type": "process", ...}``)."""
        return cls(**table_fields(data, cls, "options"))

    def to_dict(self) -> dict[str, Any]:
        """The fields as plain values (``worker_type`` as its string)."""
        out = dataclasses.asdict(self)
        out["worker_type"] = self.worker_type.value
        return out


def check_loader_args(
    config: DataConfig | None,
    *,
    batch_size: Any,
    rank: Any,
    world_size: Any,
    num_workers: Any,
    options: Any = None,
) -> LoaderOptions:
    """Check ``build_loader``'s (or ``StreamLoader``'s) arguments; return the options to use.

    Args:
        config: The loaded config (its ``global_batch_size`` must be ``grad_accum_steps x
            world_size x batch_size``), or ``None``.
        batch_size: Per-rank batch size.
        rank: Data-parallel rank, or ``None`` while it is still to be discovered.
        world_size: Data-parallel size, or ``None`` likewise.
        num_workers: Loader workers.
        options: ``LoaderOptions``, a table of its fields, or ``None`` (the defaults).

    Raises:
        ConfigError: naming the argument, its value and the rule it breaks.
    """
    check_count(batch_size, "batch_size", 1)
    check_count(num_workers, "num_workers", 0, NUM_WORKERS_LIMIT)
    if world_size is not None:
        check_count(world_size, "world_size", 1)
    if rank is not None:
        check_count(rank, "rank", -INT64_MAX)
        if world_size is not None and not 0 <= rank < world_size:
            raise ConfigError(f"rank {rank} is not in [0, world_size = {world_size})")
    if world_size is not None:
        _check_global_batch(config, int(world_size), int(batch_size))
    return _options(options)


def _check_global_batch(config: DataConfig | None, world_size: int, batch_size: int) -> None:
    if config is not None and has_batch_ramp(config):  # every step a whole number of micro-batches
        what = f"world_size {world_size} x batch_size {batch_size}"
        step_sizes(config, world_size * batch_size).check_divides(world_size * batch_size, what)
        return
    steps = 1 if config is None else config.grad_accum_steps
    total = steps * world_size * batch_size
    product = f"world_size {world_size} x batch_size {batch_size}"
    if steps != 1:  # the message of a config without accumulation stays as it was
        product = f"grad_accum_steps {steps} x {product}"
    if total > INT64_MAX:
        raise ConfigError(f"{product} = {total} samples per global batch does not fit int64")
    expected = None if config is None else config.global_batch_size
    if expected is not None and expected != total:
        raise ConfigError(f"global_batch_size = {expected} in the config, but {product} = {total}")


def _options(options: Any) -> LoaderOptions:
    if options is None:
        return LoaderOptions()
    if isinstance(options, LoaderOptions):
        return options
    if isinstance(options, Mapping):
        return LoaderOptions.from_dict(options)
    raise ConfigError(
        f"options = {show(options)} must be a LoaderOptions, a table of its fields "
        f"({', '.join(f.name for f in dataclasses.fields(LoaderOptions))}) or None"
    )
