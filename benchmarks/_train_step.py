"""The pinned training step of ``trainer_cost.py`` and its CPU meter.

The step copies the batch into preallocated "device" buffers (the CPU stand-in for the
host-to-device copy), holds the GIL for a calibrated number of dict/list/attribute rounds
(kernel launches, optimizer bookkeeping), then releases it for a calibrated number of
one-core ``torch.mm`` calls. The counts are fixed once at start-up, so every case runs the
same work.
"""

from __future__ import annotations

import argparse
import math
import time
import timeit
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import psutil
import torch

Batch = dict[str, torch.Tensor]

CONSUMED = {False: ("input_ids", "labels"), True: ("tokens", "label_mask")}
"""What the step copies to the "device", by whether the batch is compact."""
MATRIX = 256
"""Side of the step's square float32 matrices (~0.3 ms per ``torch.mm`` on one core)."""


class Bookkeeping:
    """What the step's Python part touches: attributes, a dict of parameters, a launch queue."""

    KEYS = tuple(f"layer{i}.weight" for i in range(64))

    def __init__(self) -> None:
        self.launched = 0
        self.params = dict.fromkeys(self.KEYS, 0)
        self.queue: list[tuple[str, int]] = []

    def run(self, iterations: int) -> None:
        """``iterations`` rounds of dict/list/attribute operations, the GIL held."""
        keys, params, queue = self.KEYS, self.params, self.queue
        for i in range(iterations):
            key = keys[i & 63]
            params[key] = params[key] + 1
            self.launched += 1
            queue.append((key, self.launched))
            if len(queue) >= 64:
                queue.clear()


@dataclass
class TrainStep:
    """The pinned step: copy the batch to the "device" buffers, Python work, one-core matmuls."""

    python_iterations: int
    matmuls: int
    bookkeeping: Bookkeeping = field(default_factory=Bookkeeping)
    buffers: dict[str, torch.Tensor] = field(default_factory=dict)

    def __post_init__(self) -> None:
        gen = torch.Generator().manual_seed(0)
        self.left = torch.randn(MATRIX, MATRIX, generator=gen)
        self.right = torch.randn(MATRIX, MATRIX, generator=gen)
        self.out = torch.empty(MATRIX, MATRIX)

    def __call__(self, batch: Batch) -> None:
        for key in CONSUMED["tokens" in batch]:
            if (tensor := batch.get(key)) is None:
                continue  # label_mask: only where a label can be masked
            buffer = self.buffers.get(key)
            if buffer is None or buffer.shape != tensor.shape or buffer.dtype != tensor.dtype:
                buffer = self.buffers[key] = torch.empty_like(tensor)  # once, in the warm-up
            buffer.copy_(tensor)
        self.bookkeeping.run(self.python_iterations)
        self.matmul(self.matmuls)

    def matmul(self, count: int) -> None:
        """``count`` products of the fixed matrices (torch releases the GIL in each)."""
        for _ in range(count):
            torch.mm(self.left, self.right, out=self.out)


def calibrate(args: argparse.Namespace) -> tuple[TrainStep, dict[str, float]]:
    """The pinned step: iteration counts for the two targets, from the fastest of several
    probes (the least disturbed by other work on the machine)."""
    probe = TrainStep(0, 0)
    per_iteration = min(timeit.repeat(lambda: probe.bookkeeping.run(10_000), number=1, repeat=9))
    per_matmul = min(timeit.repeat(lambda: probe.matmul(8), number=1, repeat=9)) / 8
    iterations = max(1, round(args.step_python_us * 1e-6 / (per_iteration / 10_000)))
    matmuls = max(1, round(args.step_release_us * 1e-6 / per_matmul))
    work = {
        "python_iterations": iterations,
        "python_us": iterations * per_iteration / 10_000 * 1e6,
        "matmuls": matmuls,
        "release_us": matmuls * per_matmul * 1e6,
    }
    return TrainStep(iterations, matmuls), work


def timed_window(warmup_steps: int, steps: int, chunk: int) -> tuple[int, int]:
    """(warm-up steps, timed steps). streamload hands batches over in chunks of ``chunk`` and
    makes one when one is consumed: its window starts half a chunk past a chunk boundary and
    holds whole chunks (``steps`` rounded), so every repeat times the same number of chunk
    productions (``chunk`` <= 1: the steps as given)."""
    if chunk <= 1:
        return warmup_steps, steps
    half = chunk // 2
    warmup = half + chunk * math.ceil(max(0, warmup_steps - half) / chunk)
    return warmup, chunk * max(1, round(steps / chunk))


class CpuMeter:
    """CPU seconds of this process (all threads; the training thread apart) and its children."""

    def __init__(self) -> None:
        self.me = psutil.Process()
        self.children = {p.pid: _cpu(p) for p in self.me.children(recursive=True)}
        self.process, self.thread = time.process_time(), time.thread_time()

    def stop(self) -> tuple[float, float]:
        """(tree CPU seconds, of which off this thread) since construction; a child that
        exited in between is not counted."""
        thread = time.thread_time() - self.thread
        process = time.process_time() - self.process
        children = sum(
            _cpu(p) - self.children.get(p.pid, 0.0) for p in self.me.children(recursive=True)
        )
        return process + children, process - thread + children


def _cpu(process: psutil.Process) -> float:
    try:
        times = process.cpu_times()
    except psutil.NoSuchProcess:
        return 0.0
    return float(times.user + times.system)


@dataclass(frozen=True)
class Timed:
    """One timed window of steps."""

    wall_s: float
    """Wall time of the window, ``next()`` included."""
    wait_s: float
    """Of which inside ``next()``."""
    next_cpu_s: float
    """CPU of the training thread inside ``next()``."""
    cpu_s: float
    """The process tree's CPU (this process, all threads, and its children)."""
    off_main_s: float
    """Of which not on the training thread (loader threads, worker processes)."""


def time_steps(batches: Iterator[Batch], step: Callable[[Batch], None], steps: int) -> Timed:
    """Run ``steps`` steps on ``next(batches)``; their wall time, time and CPU in ``next()``,
    and the tree's CPU."""
    meter, wait, next_cpu = CpuMeter(), 0.0, 0.0
    start = time.perf_counter()
    for _ in range(steps):
        # thread_time() is a system call, where a loaded machine may switch threads: outside
        # the wall-time window, or an idle next() would be charged for another's run.
        asked_cpu = time.thread_time()
        asked = time.perf_counter()
        batch = next(batches)
        wait += time.perf_counter() - asked
        next_cpu += time.thread_time() - asked_cpu
        step(batch)
    wall = time.perf_counter() - start
    cpu, off_main = meter.stop()
    return Timed(wall, wait, next_cpu, cpu, off_main)
