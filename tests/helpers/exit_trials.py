"""Run "take a few batches and return" scripts many times; report how each process ended.

Usage (from the repository root): ``python -m tests.helpers.exit_trials DIR KIND=TRIALS...``.
``DIR`` gets issue 36's corpus (item 6) once; ``KIND`` is ``loader-0``, ``loader-thread``,
``loader-process`` (``build_loader`` with 0 workers, thread or process workers),
``dataset-0`` or ``dataset-2`` (``StreamDataset`` under ``StatefulDataLoader`` with that
many workers), or ``busy-thread`` or ``busy-process`` (a bare ``MapWorkers`` whose items
keep its workers in numpy's C++ code: the sharpest test, 6 to 28 aborts in 30 trials before
the fix). Prints one JSON object: ``{KIND: [{"trial", "exit", "stderr"}, ...]}``, the failed
trials of each kind, a failure being an exit code other than 0 or a ``terminate called`` on
stderr.

Each trial is a fork of this process, which has imported torch and planned the loader once
(so a trial costs its batches and its exit, not torch's import); the child takes 8 batches
and leaves by ``sys.exit``, which runs the interpreter's whole shutdown as a script that
returns does — the path that aborted (``streamload/nodes/_exit.py``). Two trials run at a
time, as the aborts came from worker threads still busy while the interpreter shut down.
"""

from __future__ import annotations

import json
import os
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np

import streamload

KINDS = (
    "busy-process",
    "busy-thread",
    "dataset-0",
    "dataset-2",
    "loader-0",
    "loader-process",
    "loader-thread",
)
_CONFIG = (
    'seq_len = 256\nseed = 99\neos_token_id = 0\npad_token_id = 1\n[[sources]]\nname = "web"\n'
    'path = {path!r}\n[sampling]\nmode = "packed"\nshuffle = true\n'
)
_IN_FLIGHT = 2


def write_corpus(folder: Path) -> Path:
    """Issue 36's corpus (4 NumPy shards, lognormal documents) and config; the config path."""
    config = folder / "cfg.toml"
    if config.exists():
        return config
    rng = np.random.default_rng(0)
    (folder / "web").mkdir()
    for i, n in enumerate((900, 13, 1400, 700)):
        lens = np.clip(rng.lognormal(np.log(90), 0.8, size=n).astype(int), 1, 771)
        docs = [np.append(rng.integers(2, 50304, size=k), 0) for k in lens]
        np.save(folder / "web" / f"shard_{i:05d}.npy", np.concatenate(docs).astype(np.uint16))
    config.write_text(_CONFIG.format(path=str(folder / "web")))
    return config


def _distinct(values: np.ndarray, item: int) -> int:
    """Work that spends its time in numpy's C++ with the GIL released (as ``np.unique`` in
    a packed chunk's read did when the interpreter ended the thread)."""
    return item + len(np.unique(values))


def make_iterator(config: Path, kind: str) -> Any:
    """An iterator over the batches of ``config`` through the entry point ``kind`` names."""
    if kind.startswith("busy-"):
        from functools import partial

        from torchdata.nodes import IterableWrapper

        from streamload.nodes import MapWorkers

        values = np.random.default_rng(0).integers(0, 1 << 40, size=100_000)
        fn = partial(_distinct, values)
        node = MapWorkers(IterableWrapper(range(10**6)), fn, 2, kind.removeprefix("busy-"))
        node.reset()
        return node
    if kind.startswith("loader-"):
        workers = kind.removeprefix("loader-")
        options = streamload.LoaderOptions(
            worker_type="process" if workers == "process" else "thread"
        )
        count = 0 if workers == "0" else 2
        loader = streamload.build_loader(config, batch_size=4, num_workers=count, options=options)
        return iter(loader)
    from torchdata.stateful_dataloader import StatefulDataLoader

    stream = streamload.SampleStream.from_config(streamload.load_config(config))
    dataset = streamload.StreamDataset(stream, streamload.RankSpec(0, 1, 4))
    workers = int(kind.removeprefix("dataset-"))
    return iter(StatefulDataLoader(dataset, batch_size=None, num_workers=workers))


def _trial(config: Path, kind: str, stderr: Path) -> None:
    """The child: stderr to a file, 8 batches, then the interpreter's normal exit."""
    fd = os.open(stderr, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(fd, 2)
    os.close(fd)
    it = make_iterator(config, kind)
    for _ in range(8):
        next(it)
    sys.exit(0)


def run_trials(folder: Path, kind: str, trials: int) -> list[dict[str, Any]]:
    """Fork ``trials`` children, two at a time; the exit and stderr of each that failed."""
    config = write_corpus(folder)
    # Import and plan once here, starting no thread: every child inherits it.
    streamload.build_loader(config, batch_size=4)
    if kind.startswith("dataset-"):
        import torchdata.stateful_dataloader  # noqa: F401
    running: dict[int, tuple[int, Path]] = {}
    failures = []
    started = 0
    while started < trials or running:
        if started < trials and len(running) < _IN_FLIGHT:
            stderr = folder / f"stderr_{kind}_{started}.txt"
            pid = os.fork()
            if pid == 0:
                _trial(config, kind, stderr)
            running[pid] = (started, stderr)
            started += 1
            continue
        pid, status = os.wait()
        trial, stderr = running.pop(pid)
        code = os.waitstatus_to_exitcode(status)
        text = stderr.read_text(errors="replace")
        stderr.unlink()
        if code != 0 or "terminate called" in text:
            failures.append({"trial": trial, "exit": code, "stderr": text[-2000:]})
    return failures


def main(argv: list[str]) -> None:
    """Run the trials ``argv`` asks for (``DIR KIND=TRIALS...``); print the failures."""
    warnings.simplefilter("ignore")  # "each pass ... ends with 1 samples ..."
    runs = [arg.partition("=") for arg in argv[1:]]
    if not runs or any(kind not in KINDS or not count.isdigit() for kind, _, count in runs):
        sys.exit(f"usage: python -m tests.helpers.exit_trials DIR KIND=TRIALS... ({KINDS})")
    folder = Path(argv[0])
    print(json.dumps({kind: run_trials(folder, kind, int(count)) for kind, _, count in runs}))


if __name__ == "__main__":
    main(sys.argv[1:])
