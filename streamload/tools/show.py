"""What the loader delivered at one training step, rebuilt from the plan alone.

``streamload show CONFIG --step N`` answers "what was in the batch at step N?" without GPUs.
The batch is built by the loader's own path, so it is the loader's batch exactly: the cursor
before optimizer step ``N`` of the pass (``SampleStream.advance`` over the run's step sizes,
as the loader advances after each batch it delivers), ``SampleStream.plan_chunk`` for that
step's ``grad_accum_steps`` batches (micro-batches), and
:class:`~streamload.nodes.materialize.Materialize` (the loader's worker function: read,
:class:`~streamload.nodes.pack_masks.MaskPacker`, skipped rows). Without a rank the plan takes
whole global micro-batches (world size 1): rank ``r``'s part of micro-batch ``m`` is its
rows ``[r·b, (r+1)·b)`` of it, as the rank split is contiguous (docs/design.md §2.6).

A step counts optimizer steps (``global_batch_size`` samples, ``grad_accum_steps`` loader
batches of every rank; with a batch size schedule, its size at the step over ``--world-size x
--batch-size``) from the start of its pass (``--pass``, default 0). A run that was
resumed with another global batch size names each run of equal sizes as ``(first step,
global batch size)`` pairs (``--batch-sizes 0:64,1000:128``; a mixture's saved state records
them as ``schedule.batch_sizes``).

Example (one source, ``B = 4``, world 2, ``grad_accum_steps = 1``): step 3 is samples
``[12, 16)``; rank 1 gets ``[14, 16)``, rows 2 and 3 of the whole batch. With
``grad_accum_steps = 2`` (``global_batch_size = 8``), step 1 is samples ``[8, 16)``: its
micro-batch 0 is ``[8, 12)``, micro-batch 1 ``[12, 16)``, rank 1 taking ``[10, 12)`` and
``[14, 16)``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import torch

from streamload.config import DataConfig
from streamload.config.batch_schedule import has_batch_ramp, step_sizes
from streamload.config.checks import check_count
from streamload.config.loader_args import check_loader_args
from streamload.errors import ConfigError
from streamload.nodes.materialize import Materialize
from streamload.nodes.read_windows import WindowReader
from streamload.plan.partition import RankSpec
from streamload.streams.chunks import ChunkPlan, TokenChunk
from streamload.streams.cursor import StreamCursor
from streamload.streams.interface import SampleStream

__all__ = [
    "StepBatch",
    "StepRequest",
    "cursor_at_step",
    "load_step",
    "parse_batch_sizes",
    "resolve_split",
]

_PAIR = re.compile(r"\s*(\d+)\s*:\s*(\d+)\s*")


@dataclass(frozen=True, kw_only=True)
class StepRequest:
    """Which step to show, and how the run split its batches.

    Args:
        step: Optimizer steps delivered before it in its pass (``>= 0``).
        pass_index: The pass (an epoch of a single source without ``num_samples``).
        rank: Show only this data-parallel rank's batch; ``None``: the whole global batch.
        world_size: Data-parallel size (``None``: 1; required with ``rank``).
        batch_size: Per-rank batch size (``None``: the config's ``global_batch_size`` over
            ``grad_accum_steps`` and the world size, or the size ``batch_sizes`` gives at the
            step).
        batch_sizes: ``(first step, global batch size)`` runs of a resumed run, rising from
            step 0 (empty: one size for every step); sizes are samples per optimizer step.
    """

    step: int
    pass_index: int = 0
    rank: int | None = None
    world_size: int | None = None
    batch_size: int | None = None
    batch_sizes: tuple[tuple[int, int], ...] = ()


@dataclass(frozen=True)
class StepBatch:
    """One step's samples as the loader delivered them.

    Args:
        request: What was asked.
        split: The rank split of each micro-batch (``global_batch = world_size *
            batch_size``; the step holds ``grad_accum_steps`` of them).
        ranks: The rank of each row of ``batch`` (int64 ``[n]``).
        batch: The loader's tensors, leading dimension ``n``: the step's micro-batches in
            order, each one rank's ``b`` rows or the whole global micro-batch in rank order.
        chunk: The rows' tokens with their document starts where the stream can find them
            (a second read of the same plan, for the view; never used to build ``batch``).
        micro_batches: The micro-batch (0 to ``grad_accum_steps - 1``) of each row.
    """

    request: StepRequest
    split: RankSpec
    ranks: np.ndarray
    batch: dict[str, torch.Tensor]
    chunk: TokenChunk
    micro_batches: np.ndarray

    @property
    def plan(self) -> ChunkPlan:
        """The planned step (sample ids, sources, source-local ids ``[micro-batches, n]``)."""
        return self.chunk.plan

    @property
    def grad_accum_steps(self) -> int:
        """Loader batches (micro-batches) of each rank in the step."""
        return int(self.plan.sample_ids.shape[0])

    def rank_batch(self, rank: int, micro_batch: int = 0) -> dict[str, torch.Tensor]:
        """The batch rank ``rank`` received as micro-batch ``micro_batch`` of the step (a
        slice of :attr:`batch`).

        Raises:
            ConfigError: the rank or micro-batch is not among those shown.
        """
        rows = np.flatnonzero((self.ranks == rank) & (self.micro_batches == micro_batch))
        if rows.size == 0:
            shown = sorted(set(self.ranks.tolist()))
            raise ConfigError(
                f"rank {rank}, micro-batch {micro_batch} is not shown (ranks {shown}, "
                f"micro-batches 0 to {self.grad_accum_steps - 1})"
            )
        first, last = int(rows[0]), int(rows[-1]) + 1
        return {key: value[first:last] for key, value in self.batch.items()}


def parse_batch_sizes(text: str) -> tuple[tuple[int, int], ...]:
    """``"0:64,1000:128"`` → ``((0, 64), (1000, 128))``.

    Raises:
        ConfigError: not ``FIRST_STEP:SIZE`` pairs with steps rising from 0 and sizes >= 1.
    """
    rule = (
        f"--batch-sizes {text!r} must be FIRST_STEP:GLOBAL_BATCH_SIZE pairs separated by "
        "commas, the first at step 0, steps rising, sizes >= 1 (e.g. 0:64,1000:128)"
    )
    matches = [_PAIR.fullmatch(part) for part in text.split(",")]
    if not all(matches):
        raise ConfigError(rule)
    pairs = tuple((int(m.group(1)), int(m.group(2))) for m in matches if m)
    firsts = [first for first, _ in pairs]
    if firsts[0] != 0 or firsts != sorted(set(firsts)) or any(b < 1 for _, b in pairs):
        raise ConfigError(rule)
    return pairs


def resolve_split(config: DataConfig, request: StepRequest) -> RankSpec:
    """The rank split at the requested step (``rank`` 0 when every rank is shown).

    Raises:
        ConfigError: a value out of range, or sizes that disagree, named.
    """
    step = check_count(request.step, "--step", 0)
    check_count(request.pass_index, "--pass", 0)
    if request.rank is not None and request.world_size is None:
        raise ConfigError(f"--rank {request.rank} needs --world-size (the run's DP size)")
    world = check_count(1 if request.world_size is None else request.world_size, "--world-size", 1)
    if request.rank is not None:
        rank = check_count(request.rank, "--rank", 0)
        if rank >= world:
            raise ConfigError(f"--rank {rank} must be in [0, --world-size {world})")
    total, where = _global_batch(config, request, world, step)
    steps = config.grad_accum_steps
    if total % (steps * world):
        split = f"grad_accum_steps {steps} x " if steps > 1 else ""
        raise ConfigError(f"{where} does not split over {split}--world-size {world}")
    per_rank = total // (steps * world)
    if request.batch_size is not None and request.batch_size != per_rank:
        factor = f"{steps} micro-batches x " if steps > 1 else ""
        raise ConfigError(
            f"--batch-size {request.batch_size} disagrees with {where}: {factor}{world} ranks "
            f"x {request.batch_size} != {total}"
        )
    return RankSpec(request.rank or 0, world, per_rank)


def _global_batch(
    config: DataConfig, request: StepRequest, world: int, step: int
) -> tuple[int, str]:
    """The global batch size at ``step``, and where it came from (for messages)."""
    if request.batch_sizes:
        total = [size for first, size in request.batch_sizes if first <= step][-1]
        return total, f"the global batch size {total} at step {step} (--batch-sizes)"
    if has_batch_ramp(config) and request.batch_size is None:
        raise ConfigError(
            "--batch-size is needed with a batch size schedule (the per-rank micro-batch the "
            "run used; each step holds its global batch size / (--world-size x --batch-size) "
            "micro-batches)"
        )
    if request.batch_size is not None:
        per_rank = check_count(request.batch_size, "--batch-size", 1)
        check_loader_args(config, batch_size=per_rank, rank=None, world_size=world, num_workers=0)
        steps = config.grad_accum_steps
        factor = f"grad_accum_steps {steps} x " if steps > 1 else ""
        return steps * world * per_rank, f"{factor}--world-size {world} x --batch-size {per_rank}"
    if config.global_batch_size is not None:
        total = config.global_batch_size
        return total, f"global_batch_size = {total} in the config"
    raise ConfigError(
        "--batch-size is needed: the config sets no global_batch_size (give the per-rank "
        "batch size the run used, and --world-size)"
    )


def cursor_at_step(
    stream: SampleStream, pass_index: int, step: int, sizes: tuple[tuple[int, int], ...]
) -> StreamCursor:
    """The loader's cursor before optimizer step ``step`` of pass ``pass_index``.

    Args:
        stream: The stream.
        pass_index: The pass.
        step: Optimizer steps delivered before, in this pass.
        sizes: ``(first step, global batch size)`` runs from step 0 (:func:`parse_batch_sizes`);
            each size is samples per optimizer step, ``grad_accum_steps`` global batches.

    Raises:
        ConfigError: the pass ends before ``step``, or a size does not split into
            ``grad_accum_steps`` global batches.
    """
    accum = stream.config.grad_accum_steps
    cursor = stream.start(pass_index)
    ends = [first for first, _ in sizes[1:]] + [None]
    for (first, size), end in zip(sizes, ends, strict=True):
        if size % accum:
            raise ConfigError(
                f"global batch size {size} (from step {first}) does not split into "
                f"grad_accum_steps = {accum} global batches"
            )
        last = end is None or step < end
        count = step - first if last else end - first  # type: ignore[operator]
        left = stream.batches_left(cursor, size // accum)
        left = None if left is None else left // accum
        if left is not None and left < count + last:
            held = first + left
            steps = f" (steps 0 to {held - 1})" if held else ""
            shown = ", ".join(f"{a}:{b}" for a, b in sizes)
            unit = "global batches" if accum == 1 else "optimizer steps"
            of = f"of {size} samples" if len(sizes) == 1 else f"at global batch sizes {shown}"
            raise ConfigError(
                f"--step {step} lies beyond the end of pass {pass_index}, which holds {held} "
                f"{unit} {of}{steps}"
            )
        cursor = stream.advance(cursor, count * accum, size // accum)
        if last:
            return cursor
    raise AssertionError("unreachable: the last run has no end")  # pragma: no cover


def _scheduled_step(
    stream: SampleStream, request: StepRequest, micro: int
) -> tuple[StreamCursor, int]:
    """The cursor before step ``request.step`` of a batch size schedule, and its micro-batches
    (its size over ``micro``, the global micro-batch).

    Raises:
        ConfigError: the pass ends before that step.
    """
    steps = step_sizes(stream.config, micro, request.pass_index)
    run = [r for r in steps.runs() if r.first_step <= request.step][-1]
    first = run.first_sample + (request.step - run.first_step) * run.size
    start = stream.start(request.pass_index)
    left = stream.batches_left(start, micro)
    if left is not None and first + run.size > left * micro:
        raise ConfigError(
            f"--step {request.step} lies beyond the end of pass {request.pass_index}, whose "
            f"whole steps of the batch size schedule end at sample {left * micro}"
        )
    return stream.advance(start, first // micro, micro), run.size // micro


def load_step(stream: SampleStream, request: StepRequest) -> StepBatch:
    """The batches of optimizer step ``request.step`` as the loader built them (module
    docstring): its ``grad_accum_steps`` micro-batches in order.

    Raises:
        ConfigError: an argument out of range, a step beyond the pass, or after a source's
            policy ended the stream.
    """
    split = resolve_split(stream.config, request)
    accum = stream.config.grad_accum_steps
    sizes = request.batch_sizes or ((0, accum * split.global_batch),)
    if has_batch_ramp(stream.config) and not request.batch_sizes:
        cursor, accum = _scheduled_step(stream, request, split.global_batch)
    else:
        cursor = cursor_at_step(stream, request.pass_index, request.step, sizes)
    world, rank = (1, 0) if request.rank is None else (split.world_size, split.rank)
    stream.ended_by = None
    planned = stream.plan_chunk(cursor, accum, split.global_batch, world, rank)
    if planned is None or planned[0].sample_ids.shape[0] < accum:
        why = stream.ended_by or "the pass ends before it"
        raise ConfigError(f"--step {request.step} was never delivered: {why}")
    plan = planned[0]
    full = Materialize(stream, compact=False)(plan)  # the full layout, whatever the config
    batch = {key: value.flatten(0, 1) for key, value in full.items()}
    config = stream.config
    findable = config.eos_token_id is not None or stream.has_documents
    chunk = WindowReader(stream, documents=findable)(plan)
    n = chunk.plan.sample_ids.shape[1]  # rows: a seq_len warm-up cuts each window in `cut`
    cut = n // plan.sample_ids.shape[1]
    if request.rank is None:
        ranks = np.tile(np.arange(n, dtype=np.int64) // (split.batch_size * cut), accum)
    else:
        ranks = np.full(n * accum, split.rank, dtype=np.int64)
    micro = np.repeat(np.arange(accum, dtype=np.int64), n)
    return StepBatch(request, split, ranks, batch, chunk, micro)
