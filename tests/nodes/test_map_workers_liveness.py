"""A worker that stops is reported promptly, whichever item the training loop waits for.

Issue 22, item 10: a killed process worker was noticed only when its own chunk was awaited
(181 steps later in a DDP run with 64-batch chunks). Now every ``next()`` of the map stage,
every poll while it waits for any result, and every batch the loader delivers check all
workers, so a death fails the loader at the next batch (``WorkerDiedError`` naming the worker,
its pid and signal), even while other workers keep producing.
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import pytest
from torchdata.nodes import IterableWrapper

from streamload import LoaderOptions, build_loader
from streamload.errors import WorkerDiedError
from tests.helpers.corpus import write_shards
from tests.nodes.test_map_workers import take_all, who, within, workers

pytestmark = pytest.mark.filterwarnings("ignore:each pass of")


def test_a_worker_that_died_while_the_consumer_was_busy_fails_the_next_call() -> None:
    """Worker 1 has already sent item 1 when it is killed: the next ``next()`` reports the
    death instead of delivering item 1 (and item 2 of the live worker) first."""
    node = workers(IterableWrapper(range(40)), who, num_workers=2, method="process")
    first = within(30, lambda: next(node))
    time.sleep(0.5)  # worker 1 has sent item 1 and waits for work
    victim = node._workers[1]
    os.kill(victim.pid, signal.SIGKILL)
    victim.join(10)  # the training step that was running meanwhile
    delivered = [first]
    with pytest.raises(WorkerDiedError, match=r"streamload-worker-1 .*SIGKILL") as caught:
        within(10, lambda: take_all(node, delivered))
    assert delivered == [(0, "streamload-worker-0")], "nothing is delivered after the death"
    assert f"pid {victim.pid}" in str(caught.value)
    assert not node._workers, "the pool is stopped"


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_stopped_worker_thread_is_reported_not_a_hang() -> None:
    """A worker thread whose loop ends outside a shutdown (here: fed a malformed task) is a
    dead worker too; threads have no exit code, so it used to be a hang."""
    node = workers(IterableWrapper(range(40)), who, num_workers=2, method="thread")
    within(30, lambda: next(node))
    node._tasks[1].put("not a task")  # the thread's loop raises and the thread ends
    node._workers[1].join(10)
    with pytest.raises(WorkerDiedError, match=r"streamload-worker-1 .*stopped"):
        within(10, lambda: take_all(node))
    assert not node._workers


def test_the_failure_of_a_thread_worker_arrives_at_its_item() -> None:
    """An exception of the map function in a thread worker is raised by the ``next()`` that
    would deliver its item, the other worker producing meanwhile: in order, as torch's
    DataLoader does, because the items before it are good and the failure point must not
    depend on timing or the number of workers. The pool is stopped."""
    node = workers(IterableWrapper(range(40)), fail_on_five, num_workers=2, method="thread")
    got = within(30, lambda: [next(node) for _ in range(5)])
    time.sleep(0.3)  # item 5 has failed meanwhile, and worker 0 went on with items 6 and 8
    with pytest.raises(KeyError, match="item 5"):
        within(10, lambda: next(node))
    assert got == [0, 1, 2, 3, 4]
    assert not node._workers


def fail_on_five(item: int) -> int:
    if item == 5:
        raise KeyError(f"item {item}")
    return item


# -- through the loader: chunks of many batches ------------------------------------------------
CHUNK = 32
RAMP = 63
"""Chunks ramp up 1, 2, 4, 8, 16 batches: chunk 6 (worker 0) is batches 63-94, chunk 7
(worker 1) batches 95-126."""


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """About 240 batches of 4 windows of 8 tokens (chunks 0-8 and more) for one rank."""
    corpus = write_shards(tmp_path_factory.mktemp("big"), [2700, 2600, 2500], seed=7)
    return corpus.config(8, seed=3)


@pytest.mark.slow
def test_a_killed_worker_fails_the_next_batch_not_its_chunk(config: dict[str, Any]) -> None:
    """Worker 1 holds chunk 7 (batches 95-126); it is killed while the training loop works
    through chunk 6 (one batch every 100 ms): the next batch fails, not batch 95, 3 s later."""
    options = LoaderOptions(worker_type="process", chunk_batches=CHUNK, prefetch=2)
    with build_loader(config, batch_size=4, num_workers=2, options=options) as loader:
        it = iter(loader)
        within(60, lambda: [next(it) for _ in range(RAMP + 1)])
        victim = loader._chain.source._workers[1]  # type: ignore[union-attr]
        os.kill(victim.pid, signal.SIGKILL)
        killed = time.monotonic()
        batches = RAMP + 1
        with pytest.raises(WorkerDiedError, match=r"streamload-worker-1 .*SIGKILL") as caught:
            while True:
                time.sleep(0.1)  # a training step
                within(10, lambda: next(it))
                batches += 1
        waited = time.monotonic() - killed
        assert waited < 2.0, f"noticed {waited:.1f} s after the kill, at batch {batches}"
        assert batches < RAMP + CHUNK, f"noticed only at batch {batches}, when its chunk was due"
        assert f"pid {victim.pid}" in str(caught.value)
