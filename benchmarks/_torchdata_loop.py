"""The bare torchdata map-style loop a user writes with ``torchdata.nodes``, over the same
windows as the loader (``throughput.py``'s ``Windows``): ``SamplerWrapper`` →
``Mapper(dataset.__getitem__)`` (one ``uint32`` window per sample, a memmap view) →
``Batcher`` → ``Mapper(torch.stack)`` → ``Loader``; with workers, ``ParallelMapper`` threads.
Its batches hold the windows in the data's width (4 bytes per token), not int64."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torchdata import nodes

__all__ = ["WindowDataset", "torchdata_batches"]


class WindowDataset:
    """The map-style dataset of the bare loop: one ``uint32`` window per index."""

    def __init__(self, windows: Any) -> None:
        self.windows = windows

    def __len__(self) -> int:
        return len(self.windows.shard)

    def __getitem__(self, index: int) -> torch.Tensor:
        return torch.from_numpy(self.windows.window(index))


def torchdata_batches(
    windows: Any, batch_size: int, workers: int
) -> Iterator[dict[str, torch.Tensor]]:
    """The bare torchdata loop: sampler, per-sample map, batcher, stack."""
    dataset = WindowDataset(windows)
    sampler = torch.utils.data.SequentialSampler(range(len(dataset)))
    node: nodes.BaseNode[Any] = nodes.SamplerWrapper(sampler)
    if workers:
        node = nodes.ParallelMapper(node, dataset.__getitem__, num_workers=workers, method="thread")
    else:
        node = nodes.Mapper(node, dataset.__getitem__)
    node = nodes.Batcher(node, batch_size=batch_size, drop_last=True)
    node = nodes.Mapper(node, lambda rows: {"tokens": torch.stack(rows)})
    return iter(nodes.Loader(node))
