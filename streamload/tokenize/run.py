"""Plan and run a tokenization: groups, this machine's share, processes, progress, summary.

:func:`plan_run` does everything that can fail on the arguments before any work: it expands
the inputs, loads the tokenizer, picks and checks the dtype, forms the groups and claims the
destination (:mod:`streamload.tokenize.markers`). :func:`run_plan` then writes the groups of
this shard (``g % num_shards == shard_index``) that are not done yet, inline with one
process (``encode_batch`` already uses every core) or in a ``spawn`` process pool, where each
worker gets ``cores // processes`` tokenizer threads so the processes do not oversubscribe.

Both hold the destination's lock for this shard (:mod:`streamload.tokenize.lock`) while they
change it, so a second run is refused instead of deleting the first one's staging. Workers
exit when the run's process dies (:mod:`streamload.util.lifeline`), and a worker that
dies fails the run at once (:class:`~streamload.errors.WorkerDiedError`) instead of leaving
it waiting for a group that will never finish.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import os
import queue
import signal
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from typing import Any

from streamload.errors import WorkerDiedError
from streamload.formats.encoder import DocumentEncoder
from streamload.tokenize.chat import ChatRenderer, load_chat_template
from streamload.tokenize.config import TokenizeConfig
from streamload.tokenize.group import GroupJob, run_group
from streamload.tokenize.inputs import expand_documents
from streamload.tokenize.lock import DestinationLock
from streamload.tokenize.markers import RunRecord
from streamload.tokenize.outputs import choose_dtype
from streamload.tokenize.shuffle import group_files, ordered_groups
from streamload.util.files import file_sha256
from streamload.util.lifeline import exit_with_parent

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
        ConfigError: no input, bad tokenizer, a dtype too small, no chat template (or one
            that does not parse or lacks what ``train_on`` needs), or a destination that
            holds another run's outputs or is being written by another run (``claim`` only).
    """
    files = tuple(expand_documents(config.documents))
    encoder = DocumentEncoder(config.tokenizer, config.bos_token_id, config.eos_token_id)
    special = {k: getattr(config, k) for k in ("bos_token_id", "eos_token_id", "pad_token_id")}
    dtype = choose_dtype(config.format, config.dtype, encoder.vocab_size, special)
    if config.keep_order:
        listed = ordered_groups(files)
    else:
        listed = group_files(files, config.seed, config.processes, config.files_per_process)
    groups = tuple(tuple(g) for g in listed)
    sha = file_sha256(config.tokenizer)
    chat = {}
    if config.messages_field is not None:  # the template's text decides the outputs too
        template = load_chat_template(config.tokenizer, config.chat_template)
        ChatRenderer(template, config.messages_field, config.train_on)  # fails before any work
        chat = {"chat_template_sha256": template.sha256}
    record = RunRecord(config.destination, config.work_dir_output)
    mine = [g for g in range(len(groups)) if g % config.num_shards == config.shard_index]
    if claim:
        run = {"config": config.output_key(), "files": list(files), "tokenizer_sha256": sha,
               "dtype": dtype.name, "groups": len(groups), **chat}  # fmt: skip
        with _lock(config):
            record.claim(run)
            record.make_staging_root()
            record.remove_stale_temps()
            done = {g: m for g in mine if (m := record.done(g)) is not None}
    else:
        done = {g: m for g in mine if (m := record.done(g, repair=False)) is not None}
    todo = tuple(g for g in mine if g not in done)
    return RunPlan(config, files, groups, dtype.name, encoder.vocab_size, sha, todo, done)


def _lock(config: TokenizeConfig) -> DestinationLock:
    """The lock of this run's shard of the destination (not yet taken)."""
    record = RunRecord(config.destination, config.work_dir_output)
    return DestinationLock(record.root, config.destination, config.shard_index)


def _job(plan: RunPlan, g: int) -> GroupJob:
    return GroupJob(g, plan.groups[g], len(plan.groups), plan.dtype, plan.config)


_QUEUE: Any = None


def _init_worker(progress_queue: Any, threads: int, parent_pid: int) -> None:
    global _QUEUE
    exit_with_parent(parent_pid)  # a killed run leaves no orphan finishing its group
    _QUEUE = progress_queue
    # read by the tokenizers' Rust thread pool when it starts (first encode in this process)
    os.environ["RAYON_NUM_THREADS"] = str(threads)


def _worker(job: GroupJob, sha: str) -> dict[str, Any]:
    def report(documents: int, tokens: int) -> None:
        _QUEUE.put((documents, tokens))

    return run_group(job, sha, report)


def run_plan(plan: RunPlan, progress: ProgressFn | None = None) -> RunSummary:
    """Write this shard's remaining groups, holding the destination's lock; returns the
    summary (groups another run finished since :func:`plan_run` count as done).

    Raises:
        ConfigError: another run holds this shard of the destination.
        FormatError: a bad line, an unreadable input or an oversized document (the failing
            group leaves no complete-looking output; finished groups stay done).
        WorkerDiedError: a worker process died (killed, out of memory); its group is not done.
    """
    start = time.monotonic()
    with _lock(plan.config):
        record = RunRecord(plan.config.destination, plan.config.work_dir_output)
        todo = [g for g in plan.todo if record.done(g) is None]
        summary = RunSummary(groups_skipped=len(plan.done) + len(plan.todo) - len(todo))
        processes = min(plan.config.processes, len(todo))
        if processes <= 1:
            for g in todo:
                summary.add(run_group(_job(plan, g), plan.tokenizer_sha256, progress))
        else:
            _run_pool(plan, todo, processes, progress, summary)
    summary.seconds = time.monotonic() - start
    return summary


def _run_pool(
    plan: RunPlan,
    todo: list[int],
    processes: int,
    progress: ProgressFn | None,
    summary: RunSummary,
) -> None:
    ctx = multiprocessing.get_context("spawn")
    progress_queue = ctx.Queue()
    threads = max(1, (os.cpu_count() or 1) // processes)
    pool = ProcessPoolExecutor(
        processes, ctx, initializer=_init_worker, initargs=(progress_queue, threads, os.getpid())
    )
    try:
        futures = {pool.submit(_worker, _job(plan, g), plan.tokenizer_sha256): g for g in todo}
        workers = dict(getattr(pool, "_processes", None) or {})  # for the error message
        pending: set[Future[dict[str, Any]]] = set(futures)
        while pending:
            finished, pending = wait(pending, timeout=0.2, return_when=FIRST_COMPLETED)
            _drain(progress_queue, progress)
            for future in finished:
                try:
                    summary.add(future.result())  # re-raises a worker's error
                except BrokenProcessPool as exc:
                    raise WorkerDiedError(_died(workers, futures[future])) from exc
        _drain(progress_queue, progress)
    except BaseException:
        _terminate(pool)
        raise
    pool.shutdown()


def _drain(progress_queue: Any, progress: ProgressFn | None) -> None:
    """Pass on the progress messages that arrived."""
    while True:
        try:
            documents, tokens = progress_queue.get_nowait()
        except queue.Empty:
            return
        if progress is not None:
            progress(documents, tokens)


def _died(workers: dict[int, Any], group: int) -> str:
    """What a ``BrokenProcessPool`` means, with the dead worker's pid and signal if known
    (the executor then stops the other workers with SIGTERM: those are named only when no
    other cause is seen)."""
    # The executor's thread reaps the workers as it stops them; a worker it is reaping at
    # this moment reads as still running here, so wait (briefly) until every exit is known.
    deadline = time.monotonic() + 5.0
    while any(p.exitcode is None for p in workers.values()) and time.monotonic() < deadline:
        time.sleep(0.02)
    dead = [p for p in workers.values() if p.exitcode not in (None, 0)]
    causes = [p for p in dead if p.exitcode != -signal.SIGTERM] or dead
    how = ", ".join(map(_exit_of, causes))
    return (
        f"a tokenize worker process died ({how or 'pid unknown'}) while group {group} or "
        "another was being written; unfinished groups are not marked done: run the same "
        "command again to redo them"
    )


def _exit_of(process: Any) -> str:
    code = process.exitcode
    if code < 0 and -code in signal.valid_signals():
        return f"pid {process.pid} killed by {signal.Signals(-code).name}"
    return f"pid {process.pid} exit status {code}"


def _terminate(pool: ProcessPoolExecutor) -> None:
    """Stop the workers now (an error or Ctrl-C): ``shutdown`` alone would let each finish
    its group, which can take hours. ``terminate_workers`` is Python 3.14's; before it, the
    executor's own process table."""
    stop = getattr(pool, "terminate_workers", None)
    if stop is not None:  # pragma: no cover - Python 3.14: it shuts the executor down too
        stop()
        return
    processes = list((getattr(pool, "_processes", None) or {}).values())
    for process in processes:
        process.terminate()
    # A worker's sentinel is ready once it has exited, whoever reaps it: the executor's own
    # thread joins the workers too, so our join could see no exit code in a race.
    pending = {p.sentinel: p for p in processes}
    deadline = time.monotonic() + 10.0
    while pending and (left := deadline - time.monotonic()) > 0:
        for sentinel in multiprocessing.connection.wait(list(pending), timeout=left):
            pending.pop(sentinel)
    for process in pending.values():  # SIGTERM not taken within 10 s (a loaded machine)
        process.kill()
    pool.shutdown(wait=True, cancel_futures=True)  # its thread reaps every worker


def tokenize(config: TokenizeConfig, progress: ProgressFn | None = None) -> RunSummary:
    """Plan and run (the library entry point of ``streamload tokenize``)."""
    return run_plan(plan_run(config), progress)
