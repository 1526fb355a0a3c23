"""Plan and run a tokenization: groups, this machine's share, processes, progress, summary.

:func:`plan_run` does everything that can fail on the arguments before any work: it expands
the inputs, loads the tokenizer, picks and checks the dtype, forms the groups and claims the
destination (:mod:`streamload.tokenize.markers`). :func:`run_plan` then writes the groups of
this shard (``g % num_shards == shard_index``) that are not done yet, inline with one
process (``encode_batch`` already uses every core) or in a ``spawn`` pool, where each worker
gets ``cores // processes`` tokenizer threads so the processes do not oversubscribe.
"""

from __future__ import annotations

import multiprocessing
import os
import queue
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from streamload.formats.encoder import DocumentEncoder
from streamload.tokenize.config import TokenizeConfig
from streamload.tokenize.group import GroupJob, run_group
from streamload.tokenize.inputs import expand_documents
from streamload.tokenize.markers import RunRecord
from streamload.tokenize.outputs import choose_dtype
from streamload.tokenize.shuffle import group_files
from streamload.util.files import file_sha256

__all__ = ["RunPlan", "RunSummary", "plan_run", "run_plan", "tokenize"]

ProgressFn = Callable[[int, int], None]


@dataclass(frozen=True)
class RunPlan:
    """A checked run: the groups, the dtype and which groups this shard still has to write."""

    config: TokenizeConfig
    files: tuple[str, ...]
    groups: tuple[tuple[str, ...], ...]
    dtype: str
    vocab_size: int
    tokenizer_sha256: str
    todo: tuple[int, ...]
    done: dict[int, dict[str, Any]]

    def describe(self) -> dict[str, Any]:
        """The resolved run, for ``--dryrun``."""
        return {
            **self.config.to_dict(),
            "files": len(self.files),
            "groups": len(self.groups),
            "groups_of_this_shard": len(self.todo) + len(self.done),
            "groups_done": len(self.done),
            "dtype": self.dtype,
            "vocab_size": self.vocab_size,
            "tokenizer_sha256": self.tokenizer_sha256,
        }


@dataclass
class RunSummary:
    """What a run wrote (this process) and what earlier runs had already written."""

    groups_written: int = 0
    groups_skipped: int = 0
    documents: int = 0
    tokens: int = 0
    files: int = 0
    empty: int = 0
    bad: int = 0
    bad_examples: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def add(self, marker: dict[str, Any]) -> None:
        """Count a finished group."""
        self.groups_written += 1
        self.documents += marker["documents"]
        self.tokens += marker["tokens"]
        self.files += len(marker["files"])
        self.empty += marker["empty"]
        self.bad += marker["bad"]
        self.bad_examples.extend(marker["bad_examples"][: 5 - len(self.bad_examples)])


def plan_run(config: TokenizeConfig, *, claim: bool = True) -> RunPlan:
    """Check everything and plan the groups (no tokenization yet).

    Args:
        config: The run.
        claim: Record the run in the destination (``False`` for a dry run).

    Raises:
        ConfigError: no input, bad tokenizer, a dtype too small, or a destination that holds
            another run.
    """
    files = tuple(expand_documents(config.documents))
    encoder = DocumentEncoder(config.tokenizer, config.bos_token_id, config.eos_token_id)
    special = {k: getattr(config, k) for k in ("bos_token_id", "eos_token_id", "pad_token_id")}
    dtype = choose_dtype(config.format, config.dtype, encoder.vocab_size, special)
    groups = tuple(
        tuple(g)
        for g in group_files(files, config.seed, config.processes, config.files_per_process)
    )
    sha = file_sha256(config.tokenizer)
    record = RunRecord(config.destination, config.work_dir_output)
    mine = [g for g in range(len(groups)) if g % config.num_shards == config.shard_index]
    if claim:
        os.makedirs(config.destination, exist_ok=True)
        record.claim(
            {
                "config": config.output_key(),
                "files": list(files),
                "tokenizer_sha256": sha,
                "dtype": dtype.name,
                "groups": len(groups),
            }
        )
    done = {g: m for g in mine if (m := record.done(g, repair=claim)) is not None}
    todo = tuple(g for g in mine if g not in done)
    return RunPlan(config, files, groups, dtype.name, encoder.vocab_size, sha, todo, done)


def _job(plan: RunPlan, g: int) -> GroupJob:
    return GroupJob(g, plan.groups[g], len(plan.groups), plan.dtype, plan.config)


_QUEUE: Any = None


def _init_worker(progress_queue: Any, threads: int) -> None:
    global _QUEUE
    _QUEUE = progress_queue
    # read by the tokenizers' Rust thread pool when it starts (first encode in this process)
    os.environ["RAYON_NUM_THREADS"] = str(threads)


def _worker(job: GroupJob, sha: str) -> dict[str, Any]:
    def report(documents: int, tokens: int) -> None:
        _QUEUE.put((documents, tokens))

    return run_group(job, sha, report)


def run_plan(plan: RunPlan, progress: ProgressFn | None = None) -> RunSummary:
    """Write this shard's remaining groups; returns the summary.

    Raises:
        FormatError: a bad line, an unreadable input or an oversized document (the failing
            group leaves no complete-looking output; finished groups stay done).
    """
    summary = RunSummary(groups_skipped=len(plan.done))
    start = time.monotonic()
    processes = min(plan.config.processes, len(plan.todo))
    if processes <= 1:
        for g in plan.todo:
            summary.add(run_group(_job(plan, g), plan.tokenizer_sha256, progress))
    else:
        _run_pool(plan, processes, progress, summary)
    summary.seconds = time.monotonic() - start
    return summary


def _run_pool(
    plan: RunPlan, processes: int, progress: ProgressFn | None, summary: RunSummary
) -> None:
    ctx = multiprocessing.get_context("spawn")
    progress_queue = ctx.Queue()
    threads = max(1, (os.cpu_count() or 1) // processes)
    with ctx.Pool(processes, _init_worker, (progress_queue, threads)) as pool:
        pending = [
            pool.apply_async(_worker, (_job(plan, g), plan.tokenizer_sha256)) for g in plan.todo
        ]
        while pending:
            try:
                documents, tokens = progress_queue.get(timeout=0.2)
                if progress is not None:
                    progress(documents, tokens)
            except queue.Empty:
                pass
            for result in [r for r in pending if r.ready()]:
                pending.remove(result)
                summary.add(result.get())  # re-raises a worker's error
        while True:  # the last few progress messages
            try:
                documents, tokens = progress_queue.get_nowait()
            except queue.Empty:
                break
            if progress is not None:
                progress(documents, tokens)


def tokenize(config: TokenizeConfig, progress: ProgressFn | None = None) -> RunSummary:
    """Plan and run (the library entry point of ``streamload tokenize``)."""
    return run_plan(plan_run(config), progress)
