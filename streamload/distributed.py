"""Where the data-parallel rank and size come from: arguments, a mesh, sizes, or the group.

Only data-parallel (DP) ranks read different samples: tensor-, pipeline- and
context-parallel peers (TP, PP, CP) of one DP rank must get identical batches. The DP
position is taken, in this order, from

1. ``rank``/``world_size`` given explicitly;
2. a ``DeviceMesh``: its data-parallel dimensions are picked by name
   (:data:`DATA_PARALLEL_DIMS`, e.g. ``dp``, or HSDP's ``dp_replicate`` × ``dp_shard``), the
   model-parallel ones (:data:`MODEL_PARALLEL_DIMS`: ``tp``, ``pp``, ``cp``…) are left out,
   and the DP rank is the row-major index over the DP dimensions in the mesh's order
   (``replicate_rank * shard_size + shard_rank``, as torchtitan's flattened ``batch`` mesh);
   a dimension of another name makes a mesh of several dimensions ambiguous, and it is
   refused; a 1-D mesh of any other name is taken as the DP mesh itself (``mesh["dp"]``);
3. :class:`ModelParallel` sizes over an initialised ``torch.distributed``, with the ranks laid
   out as torchtitan and Megatron-LM lay them out (TP fastest, then CP, then DP, then PP):
   ``rank = ((pp_rank * dp + dp_rank) * cp + cp_rank) * tp + tp_rank``;
4. an initialised ``torch.distributed``: the global group is the DP group, unless this process
   created a device mesh with a model-parallel dimension of size > 1, which is refused (the
   message says what to pass);
5. ``(0, 1)``.

Example (world 8, ``init_device_mesh("cuda", (2, 2, 2), mesh_dim_names=("dp_replicate",
"dp_shard", "tp"))``): global rank 5 has coordinates (1, 0, 1); its DP rank is
``1 * 2 + 0 = 2`` of 4, and rank 4 (coordinates (1, 0, 0)) is its TP peer with the same DP
rank.
"""

from __future__ import annotations

import dataclasses
import os
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from streamload.config.checks import check_count, table_fields
from streamload.errors import ConfigError

__all__ = [
    "prepare_text_in_job",
    "DATA_PARALLEL_DIMS",
    "MODEL_PARALLEL_DIMS",
    "ModelParallel",
    "mesh_data_parallel",
    "mesh_dims_in_use",
    "pick_data_parallel",
    "resolve_data_parallel",
]

DATA_PARALLEL_DIMS = frozenset(
    {"dp", "batch", "dp_replicate", "dp_shard", "ddp", "replicate", "shard"}
)
"""Mesh dimension names whose ranks read different samples (torchtitan's ``ParallelDims``
names, ``batch`` being its flattened ``dp_replicate`` × ``dp_shard``, and FSDP2's HSDP
``replicate``/``shard``)."""

MODEL_PARALLEL_DIMS = frozenset({"tp", "pp", "cp", "sp"})
"""Mesh dimension names whose ranks share a batch: tensor, pipeline, context and sequence
parallelism."""

_WITH_CONTEXT = frozenset({"dp_shard_cp", "dp_cp", "loss", "loss_mesh"})
"""torchtitan's flattened dimensions that include context-parallel ranks (which must share a
batch): never a DP dimension, whatever the mesh."""

_OVERLAPPING = frozenset({"fsdp", "efsdp", "ep", "etp", "world"})
"""Dimensions that may hold DP and model-parallel ranks together (torchtitan's ``fsdp`` is
``dp_shard`` × ``cp``, pure DP elsewhere; ``ep``/``efsdp`` are carved out of DP, CP and TP):
in a mesh of several dimensions they are ambiguous and refused; a 1-D mesh of them is taken
as the DP mesh; among the meshes a process created they say nothing, so no warning."""


@dataclass(frozen=True, kw_only=True)
class ModelParallel:
    """Model-parallel sizes of the global group, for a job without a ``DeviceMesh``.

    The DP size is ``world_size / (tp * cp * pp)`` and the ranks are laid out as in
    torchtitan and Megatron-LM: TP fastest, then CP, then DP, then PP. Another layout needs
    ``mesh=`` or explicit ``rank``/``world_size``.

    Args:
        tp: Tensor-parallel size.
        cp: Context-parallel size.
        pp: Pipeline-parallel size.
    """

    tp: int = 1
    cp: int = 1
    pp: int = 1

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            check_count(getattr(self, field.name), f"model_parallel.{field.name}", 1)

    @classmethod
    def coerce(cls, value: ModelParallel | Mapping[str, Any]) -> ModelParallel:
        """``value`` itself, or a ``ModelParallel`` made from a mapping such as ``{"tp": 2}``.

        Raises:
            ConfigError: not a ``ModelParallel`` or mapping, an unknown key, a bad size.
        """
        if isinstance(value, ModelParallel):
            return value
        if not isinstance(value, Mapping):
            raise ConfigError(
                f"model_parallel = {value!r}: expected ModelParallel(tp=, cp=, pp=) or a "
                "mapping of those keys"
            )
        return cls(**table_fields(value, cls, "model_parallel"))

    @property
    def size(self) -> int:
        """Ranks that share one DP rank: ``tp * cp * pp``."""
        return self.tp * self.cp * self.pp

    def data_parallel(self, rank: int, world_size: int) -> tuple[int, int]:
        """(DP rank, DP size) of global ``rank`` in a group of ``world_size``.

        Raises:
            ConfigError: ``world_size`` is not a multiple of ``tp * cp * pp``.
        """
        if world_size % self.size:
            raise ConfigError(
                f"torch.distributed has {world_size} ranks, not a multiple of tp * cp * pp = "
                f"{self.tp} * {self.cp} * {self.pp} = {self.size} (model_parallel)"
            )
        dp = world_size // self.size
        return (rank // (self.tp * self.cp)) % dp, dp


def pick_data_parallel(
    names: Sequence[str] | None, shape: Sequence[int], coordinate: Sequence[int]
) -> tuple[int, int]:
    """(DP rank, DP size) of the mesh position ``coordinate`` in a mesh of ``shape``.

    Args:
        names: The mesh's dimension names (``None``: unnamed).
        shape: Its size per dimension.
        coordinate: This rank's index per dimension.

    The DP dimensions are those named in :data:`DATA_PARALLEL_DIMS`; the rank is row-major
    over them, in the mesh's order. Example: names ``("dp_replicate", "dp_shard", "tp")``,
    shape ``(2, 2, 2)``, coordinate ``(1, 0, 1)`` → ``(2, 4)``.

    Raises:
        ConfigError: an unnamed mesh of several dimensions, a dimension name that is
            neither data- nor model-parallel in a mesh of several, a 1-D mesh of a
            model-parallel or context-including dimension.
    """
    if len(shape) == 1 and (names is None or names[0] not in MODEL_PARALLEL_DIMS | _WITH_CONTEXT):
        return int(coordinate[0]), int(shape[0])  # a 1-D mesh is the DP mesh (mesh["dp"])
    if names is None:
        raise ConfigError(
            f"mesh has {len(shape)} unnamed dimensions {tuple(shape)}: name them "
            "(init_device_mesh(..., mesh_dim_names=...)) or pass the data-parallel "
            "submesh, e.g. mesh['dp']"
        )
    _check_dim_names(names)
    rank, size = 0, 1
    for name, extent, index in zip(names, shape, coordinate, strict=True):
        if name in DATA_PARALLEL_DIMS:
            rank, size = rank * int(extent) + int(index), size * int(extent)
    return rank, size


def _check_dim_names(names: Sequence[str]) -> None:
    if len(names) == 1 and names[0] in MODEL_PARALLEL_DIMS:
        raise ConfigError(
            f"mesh['{names[0]}'] is a model-parallel dimension, whose ranks share a batch; "
            "pass the data-parallel one (e.g. mesh['dp']) or the whole mesh"
        )
    known = DATA_PARALLEL_DIMS | MODEL_PARALLEL_DIMS
    problems = [
        f"{found} {why}"
        for found, why in (
            ([n for n in names if n in _WITH_CONTEXT], "include context-parallel ranks"),
            ([n for n in names if n in _OVERLAPPING], "may mix data- and model-parallel ranks"),
            (
                [n for n in names if n not in known | _WITH_CONTEXT | _OVERLAPPING],
                "are neither data- nor model-parallel names",
            ),
        )
        if found
    ]
    if problems:
        raise ConfigError(
            f"mesh dimensions {tuple(names)}: {'; '.join(problems)}. Pass a mesh of "
            f"data-parallel dimensions ({sorted(DATA_PARALLEL_DIMS)}) and model-parallel "
            f"ones ({sorted(MODEL_PARALLEL_DIMS)}) only, e.g. mesh['dp_replicate', "
            "'dp_shard'] or torchtitan's parallel_dims.get_mesh('batch'), or "
            "rank=/world_size="
        )


def mesh_data_parallel(mesh: Any) -> tuple[int, int]:
    """(DP rank, DP size) of this process in a ``DeviceMesh`` (see :func:`pick_data_parallel`).

    Raises:
        ConfigError: the mesh is ambiguous (see :func:`pick_data_parallel`), this process is
            not in it, it names no DP dimension and spans only part of the world, or it is a
            1-D mesh of every rank while a mesh of this process has a model-parallel
            dimension.
    """
    names = getattr(mesh, "mesh_dim_names", None)
    shape = tuple(int(extent) for extent in mesh.shape)
    coordinate = mesh.get_coordinate()
    if coordinate is None:
        raise ConfigError(f"this process is not a member of the mesh {mesh}")
    rank, size = pick_data_parallel(None if names is None else tuple(names), shape, coordinate)
    world = _world_size()
    named_dp = DATA_PARALLEL_DIMS.intersection(names or ())
    if len(shape) > 1 and not named_dp and world not in (None, mesh.size()):
        raise ConfigError(
            f"mesh dimensions {tuple(names or ())} name no data-parallel dimension and span "
            f"{mesh.size()} of {world} ranks; pass the mesh that holds the "
            "data-parallel dimension too"
        )
    if len(shape) == 1 and world is not None and 1 < world == size:
        # A 1-D mesh of every rank is the global group: taken as DP only if no mesh of this
        # process has a model-parallel dimension (torchtitan's 1-D "world" mesh under TP).
        _refuse_model_parallel(
            mesh_dims_in_use(), f"the 1-D mesh {mesh} of all {world} ranks is not data-parallel"
        )
    return rank, size


def resolve_data_parallel(
    rank: int | None,
    world_size: int | None,
    mesh: Any | None = None,
    model_parallel: ModelParallel | Mapping[str, Any] | None = None,
) -> tuple[int, int]:
    """(rank, world_size) of data parallelism (the order is the module docstring's).

    Args:
        rank: Explicit DP rank.
        world_size: Explicit DP size.
        mesh: A ``DeviceMesh``: the data-parallel one (``mesh["dp"]``), or one whose
            dimensions are named (DP dimensions are picked by name, TP/PP/CP peers share a
            DP rank and so get identical batches).
        model_parallel: TP/CP/PP sizes of the global group (no mesh).

    Raises:
        ConfigError: only one of rank/world_size; more than one of rank/world_size, mesh,
            model_parallel; an ambiguous mesh; model_parallel without ``torch.distributed``;
            a global group holding model-parallel mesh dimensions and nothing given.
    """
    if (rank is None) != (world_size is None):
        raise ConfigError("give both rank and world_size, or neither")
    sources = (("rank/world_size", rank), ("mesh", mesh), ("model_parallel", model_parallel))
    given = [name for name, value in sources if value is not None]
    if len(given) > 1:
        raise ConfigError(f"give one of rank/world_size, mesh or model_parallel, not {given}")
    if rank is not None and world_size is not None:
        return rank, world_size
    if mesh is not None:
        return mesh_data_parallel(mesh)
    import torch.distributed as dist

    initialised = dist.is_available() and dist.is_initialized()
    if model_parallel is not None:
        sizes = ModelParallel.coerce(model_parallel)
        if not initialised:
            raise ConfigError(
                f"model_parallel = {sizes} needs an initialised torch.distributed; "
                "without it pass rank= and world_size="
            )
        return sizes.data_parallel(dist.get_rank(), dist.get_world_size())
    if initialised:
        _check_global_group_is_data_parallel(dist.get_world_size())
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def _check_global_group_is_data_parallel(world_size: int) -> None:
    """Refuse the global group as the DP group when a mesh of this process has a model-parallel
    dimension of size > 1; warn when it has dimensions of unknown names."""
    if world_size == 1:
        return
    dims = mesh_dims_in_use()
    _refuse_model_parallel(
        dims,
        f"its {world_size} ranks are not all data-parallel and the "
        "loader cannot take its rank from the global group",
    )
    known = DATA_PARALLEL_DIMS | _WITH_CONTEXT | _OVERLAPPING
    unknown = sorted(name for name in dims if name not in known)
    if unknown:
        warnings.warn(
            f"torch.distributed runs a device mesh with dimensions {unknown}, whose names "
            "say neither data- nor model-parallel; the loader takes the global group as "
            "all data-parallel. If it is not, pass mesh=, model_parallel= or rank=/world_size=",
            stacklevel=4,
        )


def _refuse_model_parallel(dims: Mapping[str, int], consequence: str) -> None:
    """Raise when ``dims`` (from :func:`mesh_dims_in_use`) hold a model-parallel dimension."""
    model = {name: size for name, size in sorted(dims.items()) if name in MODEL_PARALLEL_DIMS}
    if not model:
        return
    found = ", ".join(f"{name}={size}" for name, size in model.items())
    sizes = ", ".join(f"{n}={s}" for n, s in model.items() if n in ("tp", "cp", "pp"))
    raise ConfigError(
        f"torch.distributed runs a device mesh with model-parallel dimensions ({found}), so "
        f"{consequence}. Pass mesh= (the mesh: its data-parallel dimensions are picked by "
        "name; or its DP submesh, e.g. mesh['dp']), "
        f"model_parallel=ModelParallel({sizes or 'tp=..., cp=..., pp=...'}) for torchtitan's "
        "and Megatron's rank layout, or rank= and world_size="
    )


def mesh_dims_in_use() -> dict[str, int]:
    """Dimension names and sizes (> 1) of the device meshes this process has created.

    ``DeviceMesh`` gives each dimension's process group the description ``mesh_<name>``;
    torch has no public list of process groups, so this reads ``distributed_c10d._world``
    and finds nothing (``{}``) where a torch release lays it out otherwise.
    """
    import torch.distributed.distributed_c10d as c10d

    groups = getattr(getattr(c10d, "_world", None), "pg_map", None) or {}
    dims: dict[str, int] = {}
    for group in list(groups):
        desc = getattr(group, "group_desc", None)
        if isinstance(desc, str) and desc.startswith("mesh_") and group.size() > 1:
            name = desc.removeprefix("mesh_")
            dims[name] = max(dims.get(name, 1), int(group.size()))
    return dims


def _world_size() -> int | None:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return int(dist.get_world_size())
    return None


def prepare_text_in_job(config: Any, processes: int = 1) -> None:
    """Fill the caches of a config's text sources with every process of the job helping
    (docs/text.md): under ``torch.distributed`` the input files are dealt to the global
    group's ranks (every rank, model-parallel ones too), each tokenizes its share, waits on
    the cache for the others', and a barrier ends it; rank 0 shows the progress. Without a
    process group the processes share the work through file locks. Under torchrun each of
    a host's ``LOCAL_WORLD_SIZE`` ranks gets ``cores / LOCAL_WORLD_SIZE`` tokenizer threads
    (``RAYON_NUM_THREADS``, unless set). A no-op without text sources."""
    sources = [s for s in config.sources if s.is_text]
    if not sources:
        return
    import torch.distributed as dist

    from streamload.catalog.text_source import prepare_text_source
    from streamload.tokenize.text_progress import TextProgress

    local = int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1)  # torchrun's ranks per host
    if local > 1 and "RAYON_NUM_THREADS" not in os.environ:  # each rank's tokenizer threads
        os.environ["RAYON_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // local))
    grouped = dist.is_available() and dist.is_initialized()
    rank, world = (dist.get_rank(), dist.get_world_size()) if grouped else (0, 1)
    for source in sources:
        progress = TextProgress(0, source.name) if rank == 0 else None
        try:
            prepare_text_source(
                source, config.storage, rank=rank, world=world, processes=processes,
                progress=progress,
            )  # fmt: skip
        finally:
            if progress is not None:
                progress.close()
    if grouped and world > 1:
        dist.barrier()
