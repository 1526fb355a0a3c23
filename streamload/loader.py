"""The public entry point: :func:`build_loader` and :class:`StreamLoader`.

Example:
    >>> loader = build_loader("data.toml", batch_size=8, num_workers=2)  # doctest: +SKIP
    >>> for step, batch in enumerate(loader):                              # doctest: +SKIP
    ...     state = loader.state_dict()   # after any delivered batch

An evaluation loader (``split=``) walks one pass of a split, every sample once (concat,
packed, padded: each source's split in config order, ``num_samples`` and weights aside;
megatron: Megatron's dataset of that split), in storage order unless ``shuffle=True``, and
keeps the last global batch: its rows past the pass end are padding, marked ``sample_mask``
false, ``sample_index`` -1, labels -100. Each further ``iter()`` walks the same pass again:

    >>> valid = build_loader("data.toml", batch_size=8, split="valid")  # doctest: +SKIP
    >>> for batch in valid:                                             # doctest: +SKIP
    ...     loss_sum += per_token_loss(batch)[batch["labels"] != -100].sum()
"""

from __future__ import annotations

import os
import time
import warnings
from collections.abc import Iterator, Mapping
from typing import Any

import torch
from torchdata.nodes import BaseNode

from streamload.config import DataConfig, load_config
from streamload.config.loader_args import LoaderOptions, WorkerType, check_loader_args
from streamload.distributed import ModelParallel, prepare_text_in_job, resolve_data_parallel
from streamload.modes import adopted_stream, build_stream, get_mode
from streamload.nodes.chain import build_chain, shutdown_chain
from streamload.nodes.map_workers import MapWorkers
from streamload.nodes.materialize import count_delivered_skips
from streamload.nodes.plan_chunks import PlanChunks
from streamload.plan.partition import RankSpec
from streamload.remote.stats import sources_storage_stats
from streamload.state import load_position, make_state
from streamload.streams.cursor import (
    check_step_resume,
    check_step_sizes,
    loader_steps,
    step_size_at,
)
from streamload.streams.evaluation import EvaluationStream, evaluation_config, evaluation_stream
from streamload.streams.interface import SampleStream

__all__ = [
    "Batch",
    "LoaderOptions",
    "StreamLoader",
    "WorkerType",
    "build_loader",
    "evaluation_config",
    "evaluation_stream",
]

Batch = dict[str, torch.Tensor]


class StreamLoader:
    """Iterates this rank's batches; its state resumes exactly, on any world size or workers.

    Each ``iter()`` continues the current pass from the cursor (a fresh loader starts at pass
    0); when a pass ends, the next ``iter()`` starts the next one.

    Over an :class:`~streamload.streams.evaluation.EvaluationStream` (``build_loader(...,
    split=...)``) it is an evaluation loader: a pass holds every sample of the split once,
    the last global batch is kept and padded, and every batch has ``sample_mask`` (bool
    ``[b]``, false on a padding row; such a row also has ``sample_index`` -1 and every label
    -100). A training loader never pads: it drops the last partial global batch.

    Args:
        stream: The global sample stream.
        rank: Data-parallel rank, size and per-rank batch size.
        num_workers: Worker threads/processes (0: produce batches in the calling thread).
        options: Worker type, prefetch, pinning, chunk size.
    """

    def __init__(
        self,
        stream: SampleStream,
        rank: RankSpec,
        num_workers: int = 0,
        options: LoaderOptions | None = None,
    ) -> None:
        self.options = check_loader_args(
            stream.config,
            batch_size=rank.batch_size,
            rank=rank.rank,
            world_size=rank.world_size,
            num_workers=num_workers,
            options=options,
        )
        self.stream = stream
        self.rank = rank
        self.num_workers = num_workers
        self._cursor = stream.start()
        self._delivered = 0
        self._wait = 0.0
        self._ended_by: str | None = None
        self._chain: BaseNode[Batch] | None = None
        self._planner: PlanChunks | None = None
        self._workers: MapWorkers[Any, Batch] | None = None
        self.evaluation = stream.layout.evaluation
        # Only a source policy can end a stream early; others need no end-of-stream look-ahead.
        limits = any(source.limit is not None for source in stream.sources)
        self._limited = limits and not self.evaluation  # an evaluation pass ignores policies
        # An optimizer step: grad_accum_steps global batches (micro-batches) of W·b samples,
        # or the batch size schedule's size at the step's first sample.
        check_step_sizes(stream, rank.world_size, rank.batch_size)
        steps = loader_steps(stream, rank.global_batch, 0)
        length = stream.pass_length
        kept = 0 if length is None or self.evaluation else steps.whole_end(0, length)
        dropped = 0 if length is None or self.evaluation else length - kept
        if dropped and rank.rank == 0:
            size = steps.size_at(kept)
            what = "a global batch" if size == rank.global_batch else "an optimizer step"
            warnings.warn(
                f"each pass of {length} samples ends with {dropped} samples that do "
                f"not fill {what} of {size}; they are dropped",
                stacklevel=3,
            )

    def close(self) -> None:
        """Stop the workers now (they also stop when the loader is garbage-collected), and
        drop the in-memory piece caches of its remote stores (their disk cache, counters and
        connections stay: another loader, or this one iterated again, reuses them)."""
        self._close()
        handles = {  # a source's shards share one storage handle
            handle.key: handle
            for source in self.stream.sources
            if source.shards.remote and (handle := source.shards.shards[0].storage) is not None
        }
        for handle in handles.values():
            handle.store().clear_memory()

    @property
    def source_names(self) -> tuple[str, ...]:
        """The sources' names in the config's order: ``batch["source_ids"]`` indexes this."""
        return tuple(source.name for source in self.stream.sources)

    def __enter__(self) -> StreamLoader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __len__(self) -> int:
        """Batches (micro-batches) per full pass for this rank: whole optimizer steps of
        ``grad_accum_steps`` batches each (an evaluation loader: every batch, its padded last
        one included).

        Raises:
            TypeError: an endless mixture (no ``num_samples``) has no length.
        """
        left = self.stream.batches_left(self.stream.start(), self.rank.global_batch)
        if left is None:
            raise TypeError("an endless mixture has no length; set sampling.num_samples")
        return left

    def __iter__(self) -> Iterator[Batch]:
        self._close()
        if self.stream.batches_left(self._cursor, self.rank.global_batch) == 0:
            self._cursor, self._delivered = self.stream.next_pass(self._cursor), 0
        chain = self._build_chain()
        self._chain = chain
        return self._run(chain, self._workers)

    def _run(
        self, chain: BaseNode[Batch], workers: MapWorkers[Any, Batch] | None
    ) -> Iterator[Batch]:
        while True:
            if not self._is_current(chain):  # superseded by a newer iter(), close(), restore
                return
            started = time.perf_counter()
            try:
                if workers is not None:  # a dead worker fails the next batch, not its chunk
                    workers.check_workers()
                batch = next(chain)
            except StopIteration:
                break
            self._wait += time.perf_counter() - started
            if not self._is_current(chain):  # superseded while this batch was made
                return
            count_delivered_skips(self.stream.sources, batch)  # counted once, when delivered
            self._cursor = self.stream.advance(self._cursor, 1, self.rank.global_batch)
            self._delivered += 1
            self._note_end()
            yield batch
        if chain is self._chain:
            self._close()
            self._note_end()
            if self._ended_by:
                warnings.warn(f"the stream ended: {self._ended_by}", stacklevel=2)

    def _note_end(self) -> None:
        """Record why the stream ended once the delivered cursor is at its end: a planner
        with workers runs ahead of delivery (``stream.ended_by`` alone is set too early); a
        lazy one (no workers) meets the end only when asked for the next chunk."""
        planner = self._planner
        if not self._limited or planner is None:
            return
        if planner.cursor != self._cursor:
            return  # the end lies at or after the planner's cursor: one look-ahead per chunk
        spec = self.rank
        planned = self.stream.plan_chunk(
            self._cursor, 1, spec.global_batch, spec.world_size, spec.rank
        )
        if planned is None and self.stream.ended_by:
            self._ended_by = self.stream.ended_by

    def _is_current(self, chain: BaseNode[Batch]) -> bool:
        # A method, not an inline ``is`` test: mypy would narrow ``chain`` to ``_chain``'s
        # optional type after an inline test.
        return chain is self._chain

    def state_dict(self) -> dict[str, Any]:
        """The position after the last delivered batch (small, JSON-safe; the envelope of
        :mod:`streamload.state`)."""
        step = step_size_at(self.stream, self._cursor, self.rank.global_batch)
        return make_state(self.stream, self._cursor, batches=self._delivered, global_batch=step)

    def load_state_dict(
        self, state: Mapping[str, Any], *, ignore_fingerprint_mismatch: bool = False
    ) -> None:
        """Continue at the saved position; the next ``iter()`` yields the next sample's batch.

        A state saved at an optimizer step boundary resumes with any world size, batch size
        or ``grad_accum_steps``; one saved inside a step (between micro-batches) only with the
        same step size (``global_batch_size``) and a ``world_size x batch_size`` that divides
        the rest of the step (the step is finished, then the new sizes apply). With a batch
        size schedule the steps are the schedule's: any ``world_size x batch_size`` that
        divides them (docs/schedules.md).

        The state is checked and normalized once; ``state_dict()`` then returns it as saved
        (with the ``batches`` count of the pass continuing from it). A state saved under an
        older default rule that the config leaves unset (packed: groups of 4,096 items) is
        resumed under that rule (:func:`streamload.modes.adopted_stream`).

        Raises:
            StateError: malformed, too new, saved for other data or config, or a position
                this stream cannot stand at (see :mod:`streamload.state`); the loader is unchanged.
        """
        stream = adopted_stream(self.stream, state)
        loaded = load_position(
            state,
            stream,
            global_batch=self.rank.global_batch,
            ignore_fingerprint_mismatch=ignore_fingerprint_mismatch,
        )
        check_step_resume(loaded.cursor, stream, self.rank.global_batch, "cursor")
        self._close()
        self.stream = stream
        self._cursor, self._delivered, self._ended_by = loaded.cursor, loaded.batches, None

    def stats(self) -> dict[str, Any]:
        """Per-source samples, tokens, epochs and repetition so far (all ranks), and waiting.

        ``batches`` counts the batches (micro-batches) delivered in this pass, ``steps`` the
        optimizer steps completed in it (``grad_accum_steps`` batches each; a mixture's
        ``cursor.step``), ``in_step`` the batches delivered of the step in progress.

        ``epochs`` counts a source's completed epochs; ``repetition`` is samples drawn per
        window (1.0 = each window seen once on average). ``wait_seconds`` is the time the
        training loop spent waiting for this loader. ``ended_by`` says why the stream ended
        (a source policy), once this loader has delivered its last batch; ``None`` before.
        ``storage`` has, per remote source, the request/retry/fault/cache counters and what
        ``on_error = "skip"`` skipped (:class:`streamload.remote.RemoteStats`): the sum over
        the training process and its loader workers (process workers report theirs with each
        result; thread workers count in the training process). ``skipped_samples`` counts
        each skipped sample once, when the batch it is in is delivered (zero tokens, every
        label -100); chunks read ahead and never delivered count nothing. In ``packed`` and
        ``padded`` modes each source also counts ``items``, ``data_tokens``,
        ``padding_tokens`` and ``truncated_tokens`` of its samples drawn so far (all ranks;
        ``tokens`` counts positions, padding included): a pure function of the position,
        so a resumed run counts on exactly where the saved one stood.
        """
        sources = {}
        for source, (name, pos) in zip(
            self.stream.sources, self.stream.source_positions(self._cursor).items(), strict=True
        ):
            drawn = pos["samples"]
            sources[name] = {
                "samples": drawn,
                "tokens": drawn * self.stream.seq_len,
                "epochs": drawn // source.num_windows,
                "repetition": drawn / source.num_windows,
                **source.drawn(drawn),
            }
        return {
            "sources": sources,
            "batches": self._delivered,
            "steps": self._steps(),
            "in_step": self._cursor.in_step // self.rank.global_batch,
            "wait_seconds": self._wait,
            "ended_by": self._ended_by,
            "storage": sources_storage_stats(self.stream.sources),
        }

    def _steps(self) -> int:
        """Optimizer steps completed in this pass: a mixture counts them; otherwise they are
        the pass's whole steps of this loader's size so far (exact unless the step size
        changed inside the pass)."""
        cursor = self._cursor
        if cursor.mixture is not None:
            return cursor.mixture.step
        steps = loader_steps(self.stream, self.rank.global_batch, cursor.pass_index)
        return steps.step_at(cursor.sample - cursor.in_step)[0]

    @property
    def micro_batches_in_step(self) -> int:
        """Batches (micro-batches) of the optimizer step the next batch belongs to: its
        ``global batch size / (world_size x batch_size)`` (``grad_accum_steps``, or the
        batch size schedule's at that step), like Megatron-LM's ``get_num_microbatches()``
        after ``update_num_microbatches(consumed_samples)``."""
        return step_size_at(self.stream, self._cursor, self.rank.global_batch) // (
            self.rank.global_batch
        )

    def _build_chain(self) -> BaseNode[Batch]:
        chain = build_chain(
            self.stream, self.rank, self.num_workers, self.options, self._cursor, self._delivered
        )
        self._planner, self._workers = chain.planner, chain.workers
        chain.root.reset(None)
        return chain.root

    def _close(self) -> None:
        chain, self._chain = self._chain, None
        if chain is not None:
            shutdown_chain(chain)


def build_loader(
    config: str | os.PathLike[str] | Mapping[str, Any] | DataConfig,
    *,
    batch_size: int | None = None,
    rank: int | None = None,
    world_size: int | None = None,
    num_workers: int = 0,
    mesh: Any | None = None,
    options: LoaderOptions | None = None,
    split: str | None = None,
    shuffle: bool | None = None,
    model_parallel: ModelParallel | Mapping[str, Any] | None = None,
) -> StreamLoader:
    """Build this rank's loader from a config file, mapping or :class:`DataConfig`; with
    ``split``, an evaluation loader (the module docstring; docs/sampling.md, "Evaluation").

    Args:
        config: TOML/YAML/JSON path, mapping, or DataConfig.
        batch_size: Per-rank batch size b (a global batch holds ``world_size * b`` samples;
            an optimizer step ``grad_accum_steps`` global batches). Required, except in
            ``vsl`` mode, where it counts slots of ``max_seq_len`` inputs per rank,
            ``tokens_per_batch / (max_seq_len x world_size)``, and may be left out.
        rank: DP rank (default: from ``mesh``, ``model_parallel`` or ``torch.distributed``,
            else 0).
        world_size: DP size (default: likewise, else 1).
        num_workers: Loader workers.
        mesh: A ``DeviceMesh``: the DP one (``mesh["dp"]``), or one with named dimensions
            whose DP ones are picked by name (docs/torchtitan.md).
        options: Worker type, prefetch, pinning, chunk size.
        split: ``"train"``, ``"valid"`` or ``"test"``: an evaluation loader over that split
            of ``sampling.split`` (``None``: the training loader of the config's
            ``split_name``).
        shuffle: Evaluation loaders only: visit the split in its first epoch's keyed
            permutation instead of storage order (not in megatron mode).
        model_parallel: TP/CP/PP sizes of the global group when there is no mesh
            (``ModelParallel(tp=2)`` or ``{"tp": 2}``).

    Raises:
        ConfigError: invalid config or arguments.
        FormatError: a shard is corrupt or unreadable as configured.
    """
    cfg = load_config(config)
    mode = get_mode(cfg.sampling.mode_name)
    cfg = evaluation_config(cfg, split, shuffle)  # refuses a mode without evaluation passes
    r, w = resolve_data_parallel(rank, world_size, mesh, model_parallel)
    if mode.derive_batch_size is not None:  # it divides by the world size: check that first
        given = 1 if batch_size is None else batch_size
        check_loader_args(None, batch_size=given, rank=r, world_size=w, num_workers=num_workers)
    batch_size = mode.batch_size(cfg, batch_size, w)
    opts = check_loader_args(  # before any listing, header read or worker start
        cfg, batch_size=batch_size, rank=r, world_size=w, num_workers=num_workers, options=options
    )
    spec = RankSpec(r, w, batch_size)
    prepare_text_in_job(cfg)  # text sources: tokenized by every rank at once, first use only
    stream = build_stream(cfg) if split is None else EvaluationStream(build_stream(cfg))
    return StreamLoader(stream, spec, num_workers, opts)
