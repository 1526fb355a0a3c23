"""Where the data-parallel rank and size come from: arguments, a mesh, or torch.distributed."""

from __future__ import annotations

from typing import Any

from streamload.errors import ConfigError

__all__ = ["resolve_data_parallel"]


def resolve_data_parallel(
    rank: int | None, world_size: int | None, mesh: Any | None = None
) -> tuple[int, int]:
    """(rank, world_size) of data parallelism.

    Args:
        rank: Explicit DP rank.
        world_size: Explicit DP size.
        mesh: A 1-D ``DeviceMesh`` of the data-parallel dimension, e.g. ``mesh["dp"]``.
            Tensor/pipeline-parallel peers share a DP rank, so they get identical batches.

    Order: explicit arguments, then ``mesh``, then an initialised ``torch.distributed``
    default group, then ``(0, 1)``.

    Raises:
        ConfigError: only one of rank/world_size given, both mesh and arguments given, or a
            mesh that is not 1-D.
    """
    if (rank is None) != (world_size is None):
        raise ConfigError("give both rank and world_size, or neither")
    if rank is not None and world_size is not None:
        if mesh is not None:
            raise ConfigError("give either rank/world_size or mesh, not both")
        return rank, world_size
    if mesh is not None:
        if getattr(mesh, "ndim", 1) != 1:
            raise ConfigError(
                f"mesh has {mesh.ndim} dimensions; pass the data-parallel one, e.g. mesh['dp']"
            )
        return int(mesh.get_local_rank()), int(mesh.size())
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1
