"""MapWorkers robustness: real worker threads and processes, real signals, bounded in time.

Every check that could hang on a regression runs under :func:`within`, so a regression fails
with a timeout instead of stalling the suite.
"""

from __future__ import annotations

import gc
import json
import multiprocessing
import os
import pickle
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

import psutil
import pytest
import torch
from torchdata.nodes import BaseNode, IterableWrapper

from streamload import RankSpec, SampleStream, load_config
from streamload.errors import WorkerDiedError, WorkerError
from streamload.nodes import MapWorkers, PackMasks, PlanChunks, ReadWindows, SplitBatches
from streamload.nodes.read_windows import WindowReader
from streamload.testing import assert_batches_equal
from tests.helpers.corpus import Corpus, write_shards

pytestmark = pytest.mark.filterwarnings("ignore:each pass of")

T = TypeVar("T")


def within(seconds: float, action: Callable[[], T]) -> T:
    """``action()``'s result (or exception), failing the test if it takes over ``seconds``."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = action()
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        pytest.fail(f"did not finish within {seconds} s (a hang)")
    if "error" in box:
        raise box["error"]
    return box["value"]


def workers(source: BaseNode[Any], fn: Callable[[Any], Any], **kwargs: Any) -> MapWorkers:
    node: MapWorkers[Any, Any] = MapWorkers(source, fn, **kwargs)
    node.reset(None)
    return node


def take_all(node: BaseNode[Any], out: list[Any] | None = None) -> list[Any]:
    """Every item left in ``node``, appended to ``out`` as they arrive."""
    out = [] if out is None else out
    while True:
        try:
            out.append(next(node))
        except StopIteration:
            return out


# -- picklable map functions (module level, for process workers) -----------------------------
def who(item: int) -> tuple[int, str]:
    """The item and the worker (thread or process) that computed it."""
    name = multiprocessing.current_process().name
    if name == "MainProcess":
        name = threading.current_thread().name
    return item, name


def nap_on_two(item: int) -> int:
    if item == 2:
        time.sleep(60)
    return item


class LockedError(ValueError):
    """Does not pickle: it holds a lock."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.lock = threading.Lock()


class TwoArgError(Exception):
    """Pickles, but does not unpickle: ``__init__`` needs two arguments."""

    def __init__(self, name: str, value: int) -> None:
        super().__init__(f"{name} = {value}")


def raise_locked(item: int) -> int:
    if item == 3:
        raise LockedError(f"item {item} holds a lock")
    return item


def raise_two_args(item: int) -> int:
    if item == 1:
        raise TwoArgError("width", item)
    return item


def raise_key_error(item: int) -> int:
    if item == 2:
        raise KeyError(f"no key {item}")
    return item


def return_a_lock(item: int) -> Any:
    return threading.Lock() if item == 1 else item


def tensors(item: int) -> dict[str, torch.Tensor]:
    """Every third result is too big for a 1 KiB slot (it falls back to a normal hand-off)."""
    size = 4096 if item % 3 == 0 else 16
    return {"x": torch.full((size,), item, dtype=torch.int64)}


# -- 1. one task queue per worker: deterministic assignment, dead workers reported ------------
@pytest.mark.parametrize("method", ["thread", "process"])
def test_item_s_is_computed_by_worker_s_mod_n(method: str) -> None:
    node = workers(IterableWrapper(range(11)), who, num_workers=3, method=method, max_inflight=5)
    got = within(30, lambda: take_all(node))
    assert got == [(s, f"streamload-worker-{s % 3}") for s in range(11)]


def test_a_killed_idle_worker_is_reported_not_a_hang() -> None:
    node = workers(IterableWrapper(range(40)), who, num_workers=2, method="process")
    first = within(30, lambda: next(node))
    time.sleep(0.5)  # worker 1 has sent its results and waits for work (holding its queue lock)
    victim = node._workers[1]
    os.kill(victim.pid, signal.SIGKILL)
    delivered = [first]
    with pytest.raises(WorkerDiedError) as caught:
        within(10, lambda: take_all(node, delivered))
    message = str(caught.value)
    assert "streamload-worker-1" in message and f"pid {victim.pid}" in message
    assert "SIGKILL" in message and "exit code -9" in message
    assert delivered == [(s, f"streamload-worker-{s % 2}") for s in range(len(delivered))]
    assert not node._workers, "the pool is stopped"


def test_a_worker_killed_while_working_is_reported() -> None:
    node = workers(IterableWrapper(range(8)), nap_on_two, num_workers=2, method="process")
    assert within(30, lambda: [next(node), next(node)]) == [0, 1]
    time.sleep(0.3)  # worker 0 is inside fn(2)
    os.kill(node._workers[0].pid, signal.SIGTERM)
    with pytest.raises(WorkerDiedError, match=r"streamload-worker-0 .*SIGTERM.*item 2"):
        within(10, lambda: next(node))


def test_a_worker_that_cannot_start_leaves_nothing_running() -> None:
    node: MapWorkers[Any, Any] = MapWorkers(
        IterableWrapper(range(4)), lambda x: x, num_workers=2, method="process", mp_context="spawn"
    )
    with pytest.raises((pickle.PicklingError, AttributeError)):
        within(30, lambda: node.reset(None))
    assert not node._workers and not node._tasks


# -- 3. exceptions from the map function -------------------------------------------------------
@pytest.mark.parametrize(
    ("fn", "kind", "pattern"),
    [
        (raise_locked, "LockedError", "item 3 holds a lock"),
        (raise_two_args, "TwoArgError", "width = 1"),
    ],
)
def test_an_unpicklable_failure_arrives_as_a_worker_error(
    fn: Callable[[int], Any], kind: str, pattern: str
) -> None:
    node = workers(IterableWrapper(range(6)), fn, num_workers=2, method="process")
    with pytest.raises(WorkerError) as caught:
        within(20, lambda: take_all(node))
    assert kind in str(caught.value) and pattern in str(caught.value)
    notes = "\n".join(getattr(caught.value, "__notes__", []))
    assert "traceback in loader worker streamload-worker-" in notes
    assert f"in {fn.__name__}" in notes, "the worker's traceback is attached"
    assert not node._workers


@pytest.mark.parametrize("method", ["thread", "process"])
def test_a_picklable_failure_is_reraised_as_itself_with_the_worker_traceback(method: str) -> None:
    node = workers(IterableWrapper(range(6)), raise_key_error, num_workers=2, method=method)
    got: list[int] = []
    with pytest.raises(KeyError, match="no key 2") as caught:
        within(20, lambda: take_all(node, got))
    assert got == [0, 1]
    notes = "\n".join(getattr(caught.value, "__notes__", []))
    assert "item 2 in streamload-worker-0" in notes
    if method == "process":
        assert "in raise_key_error" in notes


def test_an_unpicklable_result_is_reported_not_a_hang() -> None:
    node = workers(IterableWrapper(range(6)), return_a_lock, num_workers=2, method="process")
    with pytest.raises(TypeError, match="lock") as caught:
        within(20, lambda: take_all(node))
    notes = "\n".join(getattr(caught.value, "__notes__", []))
    assert "the result of item 1 (a lock) does not pickle" in notes
    assert "item 1 in streamload-worker-1" in notes


# -- 4. shared-memory slots always come back ---------------------------------------------------
def test_fallback_results_return_their_slots() -> None:
    node = workers(
        IterableWrapper(range(60)),
        tensors,
        num_workers=2,
        method="process",
        max_inflight=4,
        slot_bytes=1024,
    )
    got = within(60, lambda: take_all(node))
    assert [r["x"].tolist() for r in got] == [[s] * (4096 if s % 3 == 0 else 16) for s in range(60)]
    assert node.free_slots() < 6, "the results still held keep their slots"
    del got
    gc.collect()
    assert node.free_slots() == 6, "every slot is free again once its results are freed"


def test_results_are_views_of_slots_never_overwritten_while_alive() -> None:
    """Slot results are handed out as views (no copy on the consumer's thread); a slot comes
    back only when the last view of it is freed, so results kept (or sliced, or viewed by
    numpy) stay intact while later items reuse the free slots."""
    node = workers(
        IterableWrapper(range(40)),
        small_tensors,
        num_workers=2,
        method="process",
        max_inflight=2,
        slot_bytes=1024,
    )
    kept: list[Any] = []
    views = 0
    for s in range(40):
        result = within(60, lambda: next(node))
        ptr = result["x"].data_ptr()
        views += any(0 <= ptr - t.data_ptr() < 1024 for t in node._slots)
        if s in (4, 9):  # two slots stay leased: a slice of a result, a numpy view of one
            kept.append((s, result["x"][1:3] if s % 2 else result["x"].numpy()))
        del result
    assert [k[1].tolist() for k in kept] == [[4] * 16, [9] * 2]
    assert views == 40, "every result came through a slot: freed ones are reused at once"
    held = node.free_slots()
    kept.clear()
    gc.collect()
    assert node.free_slots() > held


def small_tensors(item: int) -> dict[str, torch.Tensor]:
    return {"x": torch.full((16,), item, dtype=torch.int64)}


# -- 2. process workers exit when their parent dies -------------------------------------------
PARENT = """
import json, time, warnings
warnings.simplefilter("ignore")
import streamload

if __name__ == "__main__":
    options = streamload.LoaderOptions(worker_type="process", multiprocessing_context={ctx!r})
    loader = streamload.build_loader({cfg!r}, batch_size=2, num_workers=2, options=options)
    it = iter(loader)
    next(it)
    pids = [w.pid for w in loader._chain.source._workers]
    print(json.dumps(pids), flush=True)
    time.sleep(120)
"""


@pytest.mark.slow
@pytest.mark.parametrize("ctx", ["fork", "spawn"])
def test_workers_exit_when_the_parent_is_killed(corpus: Corpus, tmp_path: Any, ctx: str) -> None:
    script = tmp_path / "parent.py"
    script.write_text(PARENT.format(ctx=ctx, cfg=corpus.config(8)))
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    pids: list[int] = []
    try:
        assert parent.stdout is not None
        pids = json.loads(within(60, parent.stdout.readline))
        assert len(pids) == 2 and all(psutil.pid_exists(p) for p in pids)
        parent.send_signal(signal.SIGKILL)
        parent.wait(10)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and any(alive(p) for p in pids):
            time.sleep(0.1)
        assert not [p for p in pids if alive(p)], "orphaned workers outlived their parent"
    finally:
        parent.kill()
        parent.wait()
        for pid in pids:  # a regression must not leave orphans behind
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


# -- 5. one state shape for every map stage ----------------------------------------------------
@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Corpus:
    return write_shards(tmp_path_factory.mktemp("docs"), [300, 200, 260])


def chain(corpus: Corpus, with_workers: bool) -> BaseNode[Any]:
    """``PlanChunks → (MapWorkers(WindowReader) | ReadWindows) → PackMasks → SplitBatches``."""
    stream = SampleStream.from_config(load_config(corpus.config(8, seed=5)))
    node: BaseNode[Any] = PlanChunks(stream, RankSpec(0, 1, 3), chunk_batches=2)
    if with_workers:
        node = MapWorkers(node, WindowReader(stream), num_workers=2, max_inflight=4)
    else:
        node = ReadWindows(node, stream)
    return SplitBatches(PackMasks(node, True, corpus.eos_token_id))


def run(node: BaseNode[Any], state: dict[str, Any] | None, count: int | None = None) -> list[Any]:
    node.reset(state)
    out = []
    for _ in range(count) if count is not None else iter(int, 1):
        try:
            out.append(next(node))
        except StopIteration:
            break
    return out


@pytest.mark.parametrize(("saved", "restored"), [(True, False), (False, True), (True, True)])
def test_a_state_saved_with_or_without_workers_restores_in_either_chain(
    corpus: Corpus, saved: bool, restored: bool
) -> None:
    full = run(chain(corpus, False), None)
    assert len(full) > 10
    for step in (0, 1, 2, 5, len(full) - 1):
        node = chain(corpus, saved)
        assert_batches_equal(full[:step], run(node, None, step))
        state = node.state_dict()
        if saved:
            node.source.source._shutdown()
        other = chain(corpus, not saved)
        run(other, None, step)
        assert state == other.state_dict(), "one state shape with and without workers"
        if not saved:
            other.source.source._shutdown()
        resumed = chain(corpus, restored)
        assert_batches_equal(full[step:], run(resumed, state), f"restored at {step}")


def test_a_state_of_the_old_wrapped_shape_still_restores(corpus: Corpus) -> None:
    full = run(chain(corpus, False), None)
    node = chain(corpus, True)
    run(node, None, 3)
    state = node.state_dict()
    node.source.source._shutdown()
    legacy = {**state, "source": {"source": state["source"]}}  # MapWorkers wrapped its source
    assert_batches_equal(full[3:], run(chain(corpus, True), legacy))
