"""Stage 7 (workers): an in-order parallel map over thread or process workers.

Why not ``torchdata.nodes.ParallelMapper``: its process workers can exit while tensors they
sent through shared memory are still in flight, and its sorting thread then fails on the dead
sender's file descriptors. Here shutdown first asks every worker to finish, drains every
result until each worker has said it is done, and only then joins them — so closing a loader
mid-pass (a ``break``, a restore) is silent and leaks nothing. A worker that dies is
reported by name and exit code instead of hanging the training loop.

Items are chunks of batches (megabytes each), so one queue message per chunk is cheap;
process workers return ``torch`` tensors, which ``torch.multiprocessing`` passes through
shared memory instead of pickling their bytes.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections.abc import Callable
from typing import Any, Generic, TypeVar

import torch
import torch.multiprocessing as tmp
from torchdata.nodes import BaseNode

from streamload.errors import StreamloadError
from streamload.nodes._slots import SlotRef, read_slot, write_slot

__all__ = ["MapWorkers", "WorkerDied"]

X = TypeVar("X")
Y = TypeVar("Y")

_DONE = "__streamload_worker_done__"
_POLL_SECONDS = 1.0
_SHUTDOWN_SECONDS = 30.0


class WorkerDied(StreamloadError):
    """A loader worker process exited without finishing its work."""


def _worker_loop(
    fn: Callable[[Any], Any], tasks: Any, results: Any, release: Any, slots: list[Any]
) -> None:
    while True:
        task = tasks.get()
        if task is None:
            results.put(_DONE)
            # A process serves the shared-memory handles of the tensors it sent until it
            # exits, so it stays until the consumer has received everything.
            release.wait(_SHUTDOWN_SECONDS)
            return
        seq, item, slot = task
        try:
            results.put((seq, write_slot(fn(item), slots, slot), None))
        except BaseException as exc:
            results.put((seq, None, exc))


class MapWorkers(BaseNode[Y], Generic[X, Y]):
    """Apply ``fn`` to the source's items in worker threads or processes; yield in order.

    Args:
        source: The input stage.
        fn: A picklable callable (for processes).
        num_workers: Workers (>= 1).
        method: ``"thread"`` or ``"process"``.
        max_inflight: Items submitted but not yet delivered (default ``2 * num_workers``).
        mp_context: ``fork``/``spawn``/``forkserver`` for processes (default: torch's).
        slot_bytes: For processes: size of each reused shared-memory result slot (see
            :mod:`streamload.nodes._slots`); results that are dicts of tensors and fit are
            handed over through a slot. 0 disables slots.

    State:
        ``source``: the source's state right after the last delivered item was drawn from it
        (items in flight are not part of the state; they are recomputed after a restore).
    """

    SOURCE_KEY = "source"

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
        self._free: list[int] = []
        self._workers: list[Any] = []
        self._tasks: Any = None
        self._results: Any = None
        self._state: dict[str, Any] | None = None

    def reset(self, initial_state: dict[str, Any] | None = None) -> None:
        super().reset(initial_state)
        self._shutdown()
        self.source.reset(initial_state[self.SOURCE_KEY] if initial_state else None)
        self._state = self.source.state_dict()
        self._submitted = self._delivered = 0
        self._exhausted = False
        self._ready: dict[int, tuple[Any, BaseException | None]] = {}
        self._states: dict[int, dict[str, Any]] = {}
        self._start()

    def next(self) -> Y:
        if not self._workers:  # shut down (closed, restored elsewhere, or a worker failed)
            raise StopIteration
        self._fill()
        if self._delivered == self._submitted:
            raise StopIteration
        while self._delivered not in self._ready:
            self._receive()
        value, error = self._ready.pop(self._delivered)
        if error is not None:
            self._shutdown()
            raise error
        if isinstance(value, SlotRef):
            slot, value = value.slot, read_slot(value, self._slots)
            self._free.append(slot)
        self._state = self._states.pop(self._delivered)
        self._delivered += 1
        return value

    def get_state(self) -> dict[str, Any]:
        return {self.SOURCE_KEY: self._state}

    def _start(self) -> None:
        make: Any
        if self.method == "thread":
            self._tasks, self._results = queue.Queue(), queue.Queue()
            self._release: Any = threading.Event()
            make = threading.Thread
        else:
            ctx: Any = tmp.get_context(self.mp_context)
            self._tasks, self._results = ctx.Queue(), ctx.Queue()
            self._release = ctx.Event()
            make = ctx.Process
            if self.slot_bytes and not self._slots:
                count = self.max_inflight  # a slot is freed as soon as its chunk is copied out
                self._slots = [torch.empty(self.slot_bytes, dtype=torch.uint8).share_memory_()
                               for _ in range(count)]  # fmt: skip
            self._free = list(range(len(self._slots)))
        for index in range(self.num_workers):
            worker = make(
                target=_worker_loop,
                args=(self.fn, self._tasks, self._results, self._release, self._slots),
                name=f"streamload-worker-{index}",
                daemon=True,
            )
            worker.start()
            self._workers.append(worker)

    def _fill(self) -> None:
        while not self._exhausted and self._submitted - self._delivered < self.max_inflight:
            try:
                item = next(self.source)
            except StopIteration:
                self._exhausted = True
                return
            self._states[self._submitted] = self.source.state_dict()
            slot = self._free.pop() if self._free else None
            self._tasks.put((self._submitted, item, slot))
            self._submitted += 1

    def _receive(self) -> None:
        while True:
            try:
                message = self._results.get(timeout=_POLL_SECONDS)
            except queue.Empty:
                self._check_alive()
                continue
            if message != _DONE:
                seq, value, error = message
                if error is not None and isinstance(value, SlotRef):  # pragma: no cover
                    self._free.append(value.slot)
                self._ready[seq] = (value, error)
                return

    def _check_alive(self) -> None:
        for worker in self._workers:
            code = getattr(worker, "exitcode", None)
            if code is not None:
                self._shutdown()
                raise WorkerDied(
                    f"loader worker {worker.name} exited with code {code} while working; "
                    "it was killed (out of memory?) or crashed"
                )

    def _shutdown(self) -> None:
        workers, self._workers = self._workers, []
        if not workers:
            return
        for _ in workers:
            self._tasks.put(None)
        self._drain(workers)
        self._release.set()
        for worker in workers:
            worker.join(timeout=_SHUTDOWN_SECONDS)
            if self.method == "process" and worker.is_alive():
                worker.terminate()

    def _drain(self, workers: list[Any]) -> None:
        """Receive (and drop) every result until each live worker has said it is done."""
        done = 0
        deadline = time.monotonic() + _SHUTDOWN_SECONDS
        while done < len(workers) and time.monotonic() < deadline:
            try:
                message = self._results.get(timeout=_POLL_SECONDS)
            except queue.Empty:
                if all(not w.is_alive() for w in workers):
                    return
                continue
            done += message == _DONE

    def __del__(self) -> None:
        # Garbage collection must never wait (queue feeder threads may already be gone, or
        # this may run inside a worker thread): stop without draining.
        with contextlib.suppress(Exception):
            self._abandon()

    def _abandon(self) -> None:
        workers, self._workers = self._workers, []
        if not workers:
            return
        self._release.set()
        for worker in workers:
            if self.method == "process":
                worker.terminate()
            else:
                self._tasks.put_nowait(None)
