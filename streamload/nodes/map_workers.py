"""Stage 7 (workers): an in-order parallel map over thread or process workers.

Why not ``torchdata.nodes.ParallelMapper``: its process workers can exit while tensors they
sent through shared memory are still in flight, and its sorting thread then fails on the dead
sender's file descriptors. Here shutdown first asks every worker to finish, drains every
result until each worker has said it is done, and only then lets them exit — so closing a
loader mid-pass (a ``break``, a restore) is silent and leaks nothing.

Each worker has its own task queue and its own result queue (as ``torch.utils.data``
workers have their own index queue): item ``s`` goes to worker ``s % num_workers``, and as a
worker serves its items in order, the next item to deliver is always the next message of one
known queue — no reordering buffer, and no queue lock shared between workers, so a worker
killed while it waits for work (holding its queue's read lock) stalls nobody. A dead worker is
reported by name, pid and exit code or signal (:meth:`MapWorkers.check_workers`), never a
hang, and never only when its own item is due: every ``next()`` and every poll while waiting
for any result checks all workers, and the loader checks before each batch it delivers, so a
death is noticed at the next batch even while the other workers keep producing. A process
worker also watches its parent and exits when the parent dies, so a killed training process
leaves no orphans.

Items are chunks of batches (megabytes each), so one queue message per chunk is cheap;
results are written into reused shared-memory slots (:mod:`streamload.nodes._slots`), or
else handed over as ``torch`` tensors through ``torch.multiprocessing``'s shared memory.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import queue
import signal
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import wait
from multiprocessing.reduction import ForkingPickler
from typing import Any, Generic, TypeVar

import torch
import torch.multiprocessing as tmp
from torchdata.nodes import BaseNode

from streamload.errors import WorkerDiedError, add_note
from streamload.nodes._exit import stop_at_exit
from streamload.nodes._slots import SlotPool, SlotRef, read_slot, write_slot
from streamload.nodes._worker_failure import _Failure
from streamload.nodes._worker_stats import merge_storage_deltas, take_storage_deltas
from streamload.nodes.map_stage import unwrap_legacy_state
from streamload.util.lifeline import watch_parent

__all__ = ["MapWorkers", "WorkerDied"]

X = TypeVar("X")
Y = TypeVar("Y")

_DONE = "__streamload_worker_done__"
_POLL_SECONDS = 0.2
_HELD_CHUNKS = 2
"""Slots beyond those of the items in flight: delivered chunks whose views are still alive
(the chunk being split into batches and the batch the training step holds)."""
_SHUTDOWN_SECONDS = 30.0


WorkerDied = WorkerDiedError
"""Old name of :class:`streamload.errors.WorkerDiedError`, kept for existing ``except``s."""


def _worker_loop(
    fn: Callable[[Any], Any], tasks: Any, results: Any, slots: list[Any], is_process: bool
) -> None:
    if is_process:
        watch_parent(os.getppid())  # a killed trainer leaves no orphans
    while True:
        task = tasks.get()
        if task is None:  # with the counts of reads made since the last result (prefetch)
            results.put((_DONE, take_storage_deltas() if is_process else None))
            # A process serves the shared-memory handles of the tensors it sent until it
            # exits, so it stays until the consumer has received everything and says so.
            tasks.get()
            return
        seq, item, slot = task
        try:
            message: Any = (seq, write_slot(fn(item), slots, slot), None)
            if is_process:  # pickle here, not in the queue's feeder thread, to catch failures
                try:
                    message = _dumps(message)
                except Exception as exc:
                    kind = type(message[1]).__name__
                    add_note(exc, f"the result of item {seq} (a {kind}) does not pickle")
                    raise
        except BaseException as exc:  # every failure goes to the consumer
            message = (seq, None, _Failure.of(exc)) if is_process else (seq, None, exc)
            if is_process:
                message = _dumps(message)
        # Along with each result, what the worker's storage counters gained (docs/remote.md).
        results.put((message, take_storage_deltas() if is_process else None))


def _dumps(message: Any) -> bytes:
    """Pickle with torch's reductions (tensors travel through shared memory)."""
    return bytes(ForkingPickler.dumps(message, pickle.HIGHEST_PROTOCOL))


def _describe_exit(code: int) -> str:
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"was killed by signal {signal.Signals(-code).name} (exit code {code})"
    return f"exited with code {code}"


class MapWorkers(BaseNode[Y], Generic[X, Y]):
    """Apply ``fn`` to the source's items in worker threads or processes; yield in order.

    Args:
        source: The input stage.
        fn: A picklable callable (for processes).
        num_workers: Workers (>= 1); item ``s`` is computed by worker ``s % num_workers``.
        method: ``"thread"`` or ``"process"``.
        max_inflight: Items submitted but not yet delivered (default ``2 * num_workers``).
        mp_context: ``fork``/``spawn``/``forkserver`` for processes (default: torch's).
        slot_bytes: For processes: size of each reused shared-memory result slot (see
            :mod:`streamload.nodes._slots`); results that are dicts of tensors and fit are
            handed over through a slot. 0 disables slots.

    Raises:
        WorkerDiedError: a worker process died (killed, out of memory, crashed), or a worker
            thread's loop ended; raised by the next call after the death.
        WorkerError: ``fn`` raised an exception that does not pickle (one that does is
            re-raised as itself); either way a note carries the worker's traceback.

    State:
        Exactly the source's state right after the last delivered item was drawn from it
        (items in flight are recomputed after a restore), as for every map stage. A state
        saved by older versions, ``{"source": <source state>}``, is still accepted.
    """

    def __init__(
        self,
        source: BaseNode[X],
        fn: Callable[[X], Y],
        num_workers: int,
        method: str = "thread",
        max_inflight: int | None = None,
        mp_context: str | None = None,
        slot_bytes: int = 0,
    ) -> None:
        super().__init__()
        if num_workers < 1 or method not in ("thread", "process"):
            raise ValueError(f"need num_workers >= 1 and method thread/process, got {method!r}")
        self.source = source
        self.fn = fn
        self.num_workers = num_workers
        self.method = method
        self.max_inflight = max_inflight or 2 * num_workers
        self.mp_context = mp_context
        self.slot_bytes = slot_bytes if method == "process" else 0
        self._slots: list[Any] = []
        self._pool = SlotPool()
        self._workers: list[Any] = []
        self._tasks: list[Any] = []
        self._results: list[Any] = []
        self._state: dict[str, Any] | None = None

    def reset(self, initial_state: dict[str, Any] | None = None) -> None:
        super().reset(initial_state)
        self._shutdown()
        if initial_state is not None:
            initial_state = unwrap_legacy_state(self.source, initial_state)
        self.source.reset(initial_state)
        self._state = self.source.state_dict()
        self._submitted = self._delivered = 0
        self._exhausted = False
        self._states: dict[int, dict[str, Any]] = {}
        self._slot_of: dict[int, int | None] = {}
        self._start()

    def next(self) -> Y:
        if not self._workers:  # shut down (closed, restored elsewhere, or a worker failed)
            raise StopIteration
        self.check_workers()  # one that died while the training loop worked fails now
        self._fill()
        if self._delivered == self._submitted:
            raise StopIteration
        seq = self._delivered
        value, failure = self._receive(seq)
        slot = self._slot_of.pop(seq)
        if isinstance(value, SlotRef):  # views: the slot comes back when they are freed
            value = read_slot(value, self._slots, self._pool)
        elif slot is not None:  # the result fell back to a normal hand-off (or failed)
            self._pool.give_back(slot)
        if failure is not None:
            self._shutdown()
            raise self._reraise(seq, failure)
        self._state = self._states.pop(seq)
        self._delivered += 1
        return value

    def get_state(self) -> dict[str, Any]:
        return self._state if self._state is not None else self.source.state_dict()

    def free_slots(self) -> int:
        """Shared-memory slots neither assigned to an item in flight nor viewed by a delivered
        result (all of them when idle and every result is freed)."""
        return len(self._pool.free())

    def _start(self) -> None:
        make: Any
        if self.method == "thread":
            new_queue: Any = queue.Queue
            make = threading.Thread
        else:
            ctx: Any = tmp.get_context(self.mp_context)
            new_queue, make = ctx.Queue, ctx.Process
            if self.slot_bytes and not self._slots:
                # items in flight, and the chunks whose batches the consumer still holds
                # (the one being split into batches, the training step's)
                count = self.max_inflight + _HELD_CHUNKS
                self._slots = [torch.empty(self.slot_bytes, dtype=torch.uint8).share_memory_()
                               for _ in range(count)]  # fmt: skip
        self._pool.reset(len(self._slots))
        self._tasks = [new_queue() for _ in range(self.num_workers)]
        self._results = [new_queue() for _ in range(self.num_workers)]
        for index in range(self.num_workers):
            worker = make(
                target=_worker_loop,
                args=(
                    self.fn,
                    self._tasks[index],
                    self._results[index],
                    self._slots,
                    self.method == "process",
                ),
                name=f"streamload-worker-{index}",
                daemon=True,
            )
            self._workers.append(worker)
            try:
                worker.start()
            except BaseException:  # e.g. spawn cannot pickle fn: stop the ones started
                self._workers.pop()
                self._abandon(join=True)
                raise
        # Stopped before the interpreter exits: a thread killed inside numpy's C++ aborts.
        stop_at_exit(self, self._workers if self.method == "thread" else ())

    def _fill(self) -> None:
        while not self._exhausted and self._submitted - self._delivered < self.max_inflight:
            try:
                item = next(self.source)
            except StopIteration:
                self._exhausted = True
                return
            seq = self._submitted
            self._states[seq] = self.source.state_dict()
            slot = self._pool.take()
            self._slot_of[seq] = slot
            self._tasks[seq % self.num_workers].put((seq, item, slot))
            self._submitted += 1

    def _receive(self, seq: int) -> tuple[Any, Any]:
        """The result of item ``seq``: the next message of its worker's result queue."""
        results = self._results[seq % self.num_workers]
        while True:
            try:
                message, deltas = results.get(timeout=_POLL_SECONDS)
            except queue.Empty:
                self.check_workers()  # every worker, not only the one awaited
                continue
            merge_storage_deltas(deltas)
            if self.method == "process":
                message = pickle.loads(message)
            _, value, failure = message
            return value, failure

    def _reraise(self, seq: int, failure: Any) -> BaseException:
        worker = f"streamload-worker-{seq % self.num_workers}"
        exc = failure.rebuild(worker) if isinstance(failure, _Failure) else failure
        add_note(exc, f"(while {type(self).__name__} computed item {seq} in {worker})")
        return exc

    def check_workers(self) -> None:
        """Raise if a worker stopped while the pool runs: a process that exited (killed, out of
        memory, crashed) or a thread whose loop ended. Cheap (one ``poll`` system call for all
        processes), so the loader calls it before every batch it delivers: a death is
        reported at the next batch, not when the dead worker's item is due.

        Raises:
            WorkerDiedError: naming the worker, its pid and exit code or signal, and the items
                it held; the pool is stopped first.
        """
        worker = self._stopped_worker()
        if worker is None:
            return
        index = self._workers.index(worker)
        if self.method == "process":
            worker.join(timeout=_POLL_SECONDS)  # its exit code (a sentinel fires at exit)
            code = worker.exitcode
            who = f"{worker.name} (pid {worker.pid}) "
            who += _describe_exit(code) if code is not None else "exited"
        else:
            who = f"{worker.name} (a thread) stopped (its traceback is printed above)"
        held = [s for s in range(self._delivered, self._submitted) if s % self.num_workers == index]
        self._abandon(join=True)
        raise WorkerDiedError(
            f"loader worker {who} before item {self._delivered} was delivered (it held items "
            f"{held}); it was killed (out of memory?) or crashed"
        )

    def _stopped_worker(self) -> Any:
        """The first worker that is no longer running, or ``None``."""
        if not self._workers:
            return None
        if self.method == "process":
            ready = set(wait([w.sentinel for w in self._workers], timeout=0))
            return next((w for w in self._workers if w.sentinel in ready), None)
        return next((w for w in self._workers if not w.is_alive()), None)

    def _shutdown(self) -> None:
        """Stop the workers: each finishes, every result is drained, then they exit."""
        workers, self._workers = self._workers, []
        if not workers:
            return
        for tasks in self._tasks:
            tasks.put(None)
        deadline = time.monotonic() + _SHUTDOWN_SECONDS
        for worker, results in zip(workers, self._results, strict=False):
            self._drain(worker, results, deadline)
        for tasks in self._tasks:
            tasks.put(None)  # the consumer holds every result: the worker may exit
        for worker in workers:
            worker.join(timeout=max(0.0, deadline - time.monotonic()))
            if self.method == "process" and worker.is_alive():
                worker.terminate()
        self._close_queues()

    @staticmethod
    def _drain(worker: Any, results: Any, deadline: float) -> None:
        """Receive (and drop) a worker's results until it says it is done or it is gone."""
        while time.monotonic() < deadline:
            try:
                message, deltas = results.get(timeout=_POLL_SECONDS)
                merge_storage_deltas(deltas)  # reads made for results dropped here count too
                if message == _DONE:
                    return
            except queue.Empty:
                if not worker.is_alive():
                    return

    def _close_queues(self) -> None:
        if self.method == "process":
            for q in (*self._tasks, *self._results):
                # A dead worker never reads its tasks: exiting must not wait to flush them.
                q.cancel_join_thread()
                q.close()
        self._tasks, self._results = [], []

    def __del__(self) -> None:
        # Garbage collection must never wait (queue feeder threads may already be gone, or
        # this may run inside a worker thread): stop without draining.
        with contextlib.suppress(Exception):
            self._abandon(join=False)

    def stop_without_draining(self) -> None:
        """Stop now (at interpreter exit): a thread worker ends after the item it is
        computing, and is joined by the exit hook (:mod:`streamload.nodes._exit`); a process
        worker is terminated."""
        self._abandon(join=True)

    def _abandon(self, join: bool) -> None:
        """Stop at once without draining (after a worker died, at garbage collection, at
        exit)."""
        workers, self._workers = self._workers, []
        for worker, tasks in zip(workers, self._tasks, strict=False):
            if self.method == "process":
                worker.terminate()
            else:
                # Items not started are dropped: the thread ends after its current one.
                with contextlib.suppress(queue.Empty):
                    while True:
                        tasks.get_nowait()
                tasks.put_nowait(None)
                tasks.put_nowait(None)
        for worker in workers:
            if join and self.method == "process":
                worker.join(timeout=_POLL_SECONDS)
        self._close_queues()
