"""The loss of each source of a mixture, from a batch's ``source_ids``.

A training step computes per-token losses (``cross_entropy(..., reduction="none")``); each
sample's source is ``batch["source_ids"]``, an index into ``loader.source_names``. Summing
losses and counting trained labels per source (rather than averaging per rank) lets ranks
all-reduce the two vectors and divide once, so every source's mean weighs each trained token
equally whatever rank it landed on.

Example:
    >>> losses = torch.tensor([[1.0, 3.0], [2.0, 0.0]])
    >>> labels = torch.tensor([[5, 6], [7, -100]])
    >>> sums, counts = source_loss_sums(losses, labels, torch.tensor([1, 0]), 2)
    >>> sums.tolist(), counts.tolist()
    ([2.0, 4.0], [1.0, 2.0])
    >>> mean_loss_by_source(sums, counts, ("web", "code"))
    {'web': 2.0, 'code': 2.0}
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

__all__ = ["IGNORE_INDEX", "mean_loss_by_source", "source_loss_sums"]

IGNORE_INDEX = -100
"""Labels that are not trained (padding, masked prompts, document boundaries)."""


def source_loss_sums(
    token_losses: torch.Tensor,
    labels: torch.Tensor,
    source_ids: torch.Tensor,
    num_sources: int,
    ignore_index: int = IGNORE_INDEX,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per source: the sum of the losses of trained labels and their count.

    Args:
        token_losses: ``[b, L]`` per-token losses (any float dtype; 0 where not trained, or
            anything: untrained positions are left out by ``labels``).
        labels: ``[b, L]`` labels; ``ignore_index`` marks untrained positions.
        source_ids: ``[b]`` source index of each sample.
        num_sources: Length of the result (``len(loader.source_names)``).
        ignore_index: The label of untrained positions.

    Returns:
        ``(sums, counts)``, float32 ``[num_sources]`` each, on the losses' device: all-reduce
        both across ranks (``SUM``) before :func:`mean_loss_by_source`.

    Raises:
        ValueError: the shapes do not match, or a source id is outside ``[0, num_sources)``.
    """
    if token_losses.shape != labels.shape or token_losses.dim() != 2:
        raise ValueError(
            f"token_losses {tuple(token_losses.shape)} and labels {tuple(labels.shape)}: "
            "expected the same [b, L] shape"
        )
    if source_ids.shape != (labels.shape[0],):
        raise ValueError(
            f"source_ids {tuple(source_ids.shape)}: expected [b] = [{labels.shape[0]}]"
        )
    if source_ids.numel() and not 0 <= int(source_ids.min()) <= int(source_ids.max()) < num_sources:
        raise ValueError(f"source_ids outside [0, {num_sources}): expected the loader's ids")
    trained = (labels != ignore_index).to(torch.float32)
    row_sums = (token_losses.to(torch.float32) * trained).sum(dim=1)
    ids = source_ids.to(device=token_losses.device, dtype=torch.int64)
    sums = torch.zeros(num_sources, dtype=torch.float32, device=token_losses.device)
    counts = torch.zeros_like(sums)
    sums.index_add_(0, ids, row_sums)
    counts.index_add_(0, ids, trained.sum(dim=1))
    return sums, counts


def mean_loss_by_source(
    sums: torch.Tensor, counts: torch.Tensor, names: Sequence[str]
) -> dict[str, float]:
    """``{name: sum / count}`` for the sources that trained at least one label."""
    return {
        name: float(total) / float(count)
        for name, total, count in zip(names, sums.tolist(), counts.tolist(), strict=True)
        if count > 0
    }
