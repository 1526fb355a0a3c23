"""The bill per rank of ``trainer_cost.py``: N rank processes on one host, each its own loader.

Per case, the parent starts ``--ranks`` fresh interpreters at once (``python _rank_bill.py
SPEC``), as ``torchrun`` starts the ranks of a host: each imports torch, builds its loader
for its ``rank`` of ``world_size`` (its own worker threads or processes), runs untimed
warm-up steps, waits at a barrier (a file per ready rank, then one ``go`` file) and times
its steps while the others time theirs. A rank's step is ``_train_step.TrainStep`` with the
iteration counts the parent calibrated once: the batch copied into preallocated buffers, a
GIL-holding Python loop, one-core ``torch.mm`` calls. With ``pin`` the training thread of
rank ``r`` is pinned to one core after the warm-up (``os.sched_setaffinity`` on that thread
only: the loader's threads and processes, started before, keep every core).

Cases: ``none`` (a pre-made random batch, no loader imported: the floor of torch and the
step), streamload per layout (``full``: int64 ``input_ids``/``labels``; ``compact``:
``packing.compact``; ``masks``: ``packing.masks``) and worker kind (``in-process``: 0
workers; ``thread``/``process``: each non-zero count of ``--num-workers``), torch ``DataLoader`` and
torchdata ``StatefulDataLoader`` over map-style memmap windows of the same corpus (rank r
reads samples ``r, r + N, ...`` of streamload's order) with ``--peer-workers`` processes.

While the ranks run, the parent samples each rank's process tree every ``--mem-interval``
seconds (``_proc_memory``). Each rank reports its CPU over the timed steps: its loader's
(the training thread's CPU inside ``next()`` plus all CPU off that thread: loader threads,
worker processes) and its whole tree's (the step included).
"""

from __future__ import annotations

import gc
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from _proc_memory import TreePeak, sample_tree
from _train_step import TrainStep, time_steps, timed_window

__all__ = ["LAYOUTS", "PEER_KINDS", "WORKER_KINDS", "RankCase", "make_rank_cases", "run_case"]

Batch = dict[str, torch.Tensor]
LAYOUTS = ("full", "compact", "masks")
WORKER_KINDS = ("in-process", "thread", "process")
PEER_KINDS = ("DataLoader", "StatefulDataLoader")
BARRIER_TIMEOUT_S = 900
MIB = 1 << 20


@dataclass(frozen=True)
class RankCase:
    """One configuration that every rank of a run uses."""

    kind: str  # "none", "streamload" or one of PEER_KINDS
    layout: str = "full"
    worker_kind: str = "in-process"
    num_workers: int = 0

    @property
    def label(self) -> str:
        workers = f"{self.num_workers} {self.worker_kind}" if self.num_workers else "0"
        return f"{self.kind} {self.layout} workers={workers}"


def make_rank_cases(
    layouts: Sequence[str],
    kinds: Sequence[str],
    counts: Sequence[int],
    peers: Sequence[str],
    peer_w: int,
) -> list[RankCase]:
    """The floor, streamload per layout, worker kind and count, the peers (full layout)."""
    cases = [RankCase("none")]
    for layout in layouts:
        for kind in kinds:
            for count in [0] if kind == "in-process" else counts:
                cases.append(RankCase("streamload", layout, kind, count))
    cases += [RankCase(peer, "full", "process", peer_w) for peer in peers]
    return cases


# ---- inside a rank ---------------------------------------------------------------------


def _config(spec: dict[str, Any], case: RankCase) -> dict[str, Any]:
    from _common import bench_config

    masks = case.layout == "masks"
    config = bench_config(
        spec["paths"], seq_len=spec["seq_len"], masks=masks, num_samples=spec["samples"]
    )
    if case.layout == "compact":
        config["packing"]["compact"] = True
    return config


def _open(spec: dict[str, Any], case: RankCase) -> tuple[Iterator[Batch], Callable[[], Any], int]:
    """The rank's batches, how to stop them, and batches per hand-over (for the window)."""
    b, length, rank, world = spec["batch_size"], spec["seq_len"], spec["rank"], spec["world"]
    if case.kind == "none":
        ids = torch.randint(1, 1000, (b, length), dtype=torch.int64)
        return itertools.repeat({"input_ids": ids, "labels": ids.clone()}), lambda: None, 1
    import numpy as np

    import streamload

    config = _config(spec, case)
    if case.kind == "streamload":
        from streamload.nodes.chain import chunk_batches

        options = streamload.LoaderOptions(
            worker_type="thread" if case.worker_kind == "in-process" else case.worker_kind,
            **spec.get("loader_options", {}),  # --prefetch, --chunk-batches where given
        )
        loader = streamload.build_loader(
            config, batch_size=b, rank=rank, world_size=world,
            num_workers=case.num_workers, options=options,
        )  # fmt: skip
        chunk = chunk_batches(loader.stream, loader.rank, loader.options)
        return iter(loader), loader.close, chunk
    from throughput import PeerDataset, Windows
    from torchdata.stateful_dataloader import StatefulDataLoader

    stream = streamload.SampleStream.from_config(streamload.load_config(config))
    sample_ids = np.arange(rank, spec["samples"], world)
    windows = Windows(spec["paths"], stream.window_starts(0, sample_ids), length)
    make = torch.utils.data.DataLoader if case.kind == "DataLoader" else StatefulDataLoader
    peer = make(PeerDataset(windows), batch_size=b, num_workers=case.num_workers)
    it = iter(peer)
    return it, lambda: getattr(it, "_shutdown_workers", lambda: None)(), 1


def _barrier(ready_dir: Path, rank: int) -> None:
    """Say this rank is ready; wait for the parent's ``go`` (every rank warmed up)."""
    (ready_dir / f"rank_{rank}").touch()
    deadline = time.monotonic() + BARRIER_TIMEOUT_S
    while not (ready_dir / "go").exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"rank {rank}: no go after {BARRIER_TIMEOUT_S} s")
        time.sleep(0.005)


def rank_main(spec: dict[str, Any]) -> dict[str, Any]:
    """One rank: warm up, wait for the others, time the steps; what it measured."""
    torch.set_num_threads(1)  # the step's GIL-free part uses one core
    case = RankCase(**spec["case"])
    step = TrainStep(spec["python_iterations"], spec["matmuls"])
    batches, close, chunk = _open(spec, case)
    try:
        warmup, steps = timed_window(spec["warmup_steps"], spec["steps"], chunk)
        for _ in range(warmup):
            step(next(batches))
        if spec["pin_core"] is not None:
            os.sched_setaffinity(0, {spec["pin_core"]})  # this thread only (Linux)
        gc.collect()
        _barrier(Path(spec["ready_dir"]), spec["rank"])
        timed = time_steps(batches, step, steps)
    finally:
        close()
    tokens = steps * spec["batch_size"] * spec["seq_len"]
    return {"steps": steps, "tokens": tokens, "wall_s": timed.wall_s, "wait_s": timed.wait_s,
            "loader_cpu_s": timed.next_cpu_s + timed.off_main_s,
            "tree_cpu_s": timed.cpu_s}  # fmt: skip


# ---- the parent ------------------------------------------------------------------------


def _launch(spec: dict[str, Any], log: Any) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, __file__, json.dumps(spec)], stdout=subprocess.PIPE, stderr=log, text=True
    )


def _supervise(
    procs: list[subprocess.Popen[str]], peaks: list[TreePeak], ready: Path, interval: float
) -> None:
    """Sample the ranks' memory until they exit; say ``go`` once every rank is ready."""
    go = ready / "go"
    while any(p.poll() is None for p in procs):
        if any(p.returncode not in (None, 0) for p in procs):
            return  # a rank failed: the others would wait at the barrier
        for proc, peak in zip(procs, peaks, strict=True):
            sample_tree(proc.pid, peak)
        if not go.exists() and len(list(ready.glob("rank_*"))) == len(procs):
            go.touch()
        time.sleep(interval)


def run_case(case: RankCase, common: dict[str, Any], interval: float) -> dict[str, Any]:
    """Run every rank of one case at once; their reports and memory peaks (one dict)."""
    world = common["world"]
    cores = os.cpu_count() or 1
    with tempfile.TemporaryDirectory() as ready, tempfile.TemporaryFile("w+") as log:
        procs = []
        for rank in range(world):
            pin = rank * (cores // world) if common["pin"] else None
            spec = {**common, "case": asdict(case), "rank": rank, "ready_dir": ready,
                    "pin_core": pin}  # fmt: skip
            procs.append(_launch(spec, log))
        peaks = [TreePeak() for _ in procs]
        try:
            _supervise(procs, peaks, Path(ready), interval)
        finally:
            for proc in procs:  # a failed rank, an interrupt: none is left at the barrier
                if proc.poll() is None:
                    proc.kill()
        outs = [p.communicate()[0] for p in procs]
        log.seek(0)
        if any(p.returncode != 0 for p in procs):
            raise RuntimeError(f"{case.label}: a rank failed:\n{log.read()[-3000:]}")
    ranks = [json.loads(out.strip().splitlines()[-1]) for out in outs]
    return {"ranks": ranks, "peaks": peaks}


if __name__ == "__main__":
    print(json.dumps(rank_main(json.loads(sys.argv[1]))))
