"""The loader over worker pools: ``stats()["ended_by"]`` follows delivery, and a killed
worker is an error the loader recovers from by restoring its last state."""

from __future__ import annotations

import os
import signal
import threading
from typing import Any

import pytest

from streamload import LoaderOptions, build_loader
from streamload.errors import WorkerDiedError
from streamload.testing import assert_batches_equal
from tests.helpers.corpus import write_shards

pytestmark = pytest.mark.filterwarnings("ignore:each pass of")

SEQ_LEN = 8


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Two sources; ``short`` (12 windows, half of each batch of 4) stops after 6 batches."""
    root = tmp_path_factory.mktemp("ends")
    long = write_shards(root / "long", [400], seed=1)
    short = write_shards(root / "short", [100], seed=2)
    return {
        "seq_len": SEQ_LEN,
        "seed": 3,
        "eos_token_id": 0,
        "global_batch_size": 4,
        "sources": [
            {"name": "long", "path": str(long.folder), "weight": 0.5},
            {"name": "short", "path": str(short.folder), "weight": 0.5, "policy": "stop"},
        ],
    }


@pytest.mark.parametrize(("workers", "kind"), [(0, "thread"), (2, "thread"), (2, "process")])
def test_ended_by_is_reported_once_the_last_batch_is_delivered(
    config: dict[str, Any], workers: int, kind: str
) -> None:
    options = LoaderOptions(worker_type=kind, prefetch=3, chunk_batches=1)
    with build_loader(config, batch_size=4, num_workers=workers, options=options) as loader:
        it = iter(loader)
        for step in range(5):
            next(it)
            assert loader.stats()["ended_by"] is None, f"reported after batch {step} of 6"
        next(it)
        ended = loader.stats()["ended_by"]
        assert ended is not None and "'short'" in ended, "the last batch was delivered"
        with pytest.warns(UserWarning, match="stream ended: source 'short'"):
            assert list(it) == []
        assert "'short'" in loader.stats()["ended_by"]
        assert loader.stats()["batches"] == 6


def test_after_a_worker_is_killed_the_loader_restores_and_continues_exactly(
    config: dict[str, Any],
) -> None:
    single = {**config, "sources": config["sources"][:1], "global_batch_size": None}
    options = LoaderOptions(worker_type="process", prefetch=1, chunk_batches=1)
    reference = list(build_loader(single, batch_size=4))
    with build_loader(single, batch_size=4, num_workers=2, options=options) as loader:
        it = iter(loader)
        got = [next(it) for _ in range(3)]
        state = loader.state_dict()
        workers = loader._chain.source._workers  # type: ignore[union-attr]
        os.kill(workers[1].pid, signal.SIGKILL)
        done = threading.Event()
        errors: list[BaseException] = []

        def drain() -> None:
            try:
                list(it)
            except BaseException as exc:
                errors.append(exc)
            done.set()

        threading.Thread(target=drain, daemon=True).start()
        assert done.wait(10), "a killed worker hung the loader"
        assert len(errors) == 1 and isinstance(errors[0], WorkerDiedError), errors
        assert "SIGKILL" in str(errors[0])
        loader.load_state_dict(state)
        assert_batches_equal(reference, got + list(loader), "restored after the crash")
