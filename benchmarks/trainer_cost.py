"""What a training step pays for its data: the bill per rank, step-time overhead, CPU per token.

Two tables. By default (``--ranks 8``; ``--quick``: 2 ranks, 2e6 tokens, 1 repeat) the bill
per rank when ranks share a host (issue 35): ``--ranks`` rank processes started together,
each with its own loader and workers and the pinned step below, for every worker kind
(``--worker-kinds in-process,thread,process``, each non-zero ``--num-workers`` count) and
layout (``--layouts full,compact,masks``) beside ``DataLoader``/``StatefulDataLoader``: the
loaders' CPU seconds per 10^9 tokens over all ranks and each rank's peak PSS/USS from
``/proc/PID/smaps_rollup`` (``_rank_bill.py``, ``_rank_report.py`` say how). With
``--ranks 0``, the single-process table of step-time overhead described below.

A stand-in training step copies the batch into preallocated "device" buffers (``copy_``, the
CPU stand-in for the host-to-device copy of ``input_ids``/``labels``, or of a compact batch's
``tokens``/``label_mask``), then holds the GIL for ``--step-python-us`` (dict/list/attribute
work: kernel launches, optimizer bookkeeping) and releases it for ``--step-release-us``
(``torch.mm`` of fixed matrices on one thread). The work is pinned: calibrated once at
start-up to iteration counts, which every case then runs (no time-based loop).

Cases, round-robin within each repeat (warm-up steps, then timed steps):

* ``none``: a pre-made batch (a concat loader's first, per layout: compact off/on) reused
  every step: the floor.
* ``streamload``: ``build_loader`` with 0 or ``--num-workers`` workers of ``--worker-types``,
  ``--masks`` off/on (packing masks), ``--modes`` concat/packed and ``--compact`` off/on.
* ``--peers``: torch's ``DataLoader`` and torchdata's ``StatefulDataLoader`` over a map-style
  dataset of memmap windows (one per ``__getitem__``, default collate, ``--peer-workers``
  processes) in streamload's sample order, as ``throughput.py``'s peer reads them.

Reported per case, medians over repeats: step time, its overhead over ``none`` (same layout,
same repeat), time in ``next()``, the process tree's CPU seconds per 10^9 input tokens (also
beyond ``none``, and off the training thread), tokens/s relative to ``none``.

Example:
    python benchmarks/trainer_cost.py                      # 8 ranks: the bill per rank
    python benchmarks/trainer_cost.py --quick --repeats 3 --num-workers 1,2   # 2 ranks
    python benchmarks/trainer_cost.py --ranks 0 --modes concat --compact off --peers DataLoader
"""

from __future__ import annotations

import argparse
import collections
import gc
import itertools
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from _common import (
    add_common_args,
    bench_config,
    emit,
    ensure_corpus,
    int_list,
    median,
    on_off_list,
    str_list,
    worker_label,
)
from _rank_report import add_bill_args, bill_main, resolve_bill_args
from _train_step import MATRIX, TrainStep, calibrate, time_steps, timed_window
from throughput import PAD_TOKEN_ID, PeerDataset, Windows
from torchdata.stateful_dataloader import StatefulDataLoader

import streamload
from streamload.nodes.chain import chunk_batches

Batch = dict[str, torch.Tensor]

PEERS: dict[str, Callable[..., Any]] = {
    "DataLoader": torch.utils.data.DataLoader,
    "StatefulDataLoader": StatefulDataLoader,
}
MODES = ("concat", "packed")
WORKER_TYPES = ("thread", "process")


@dataclass(frozen=True)
class Case:
    """One measured configuration."""

    kind: str  # "none", "streamload" or a key of PEERS
    num_workers: int = 0
    worker_type: str = "thread"
    masks: bool = False
    mode: str = "concat"
    compact: bool = False

    @property
    def floor(self) -> Case:
        """The ``none`` case of this case's batch layout."""
        return Case("none", compact=self.compact)

    @property
    def label(self) -> str:
        workers = f"workers={worker_label(self.num_workers, self.worker_type)}"
        if self.kind != "streamload":
            return f"{self.kind} {workers}" + (" compact" if self.compact else "")
        return f"streamload {self.mode} masks={self.masks} {workers} compact={self.compact}"


@dataclass(frozen=True)
class Run:
    """One timed window of one case."""

    steps: int
    step_s: float  # mean wall time per step, next() included
    wait_s: float  # mean time per step inside next()
    cpu_s: float  # process tree CPU seconds over the window
    off_main_s: float  # of which not on the training thread


@dataclass
class Bench:
    """What every case shares: arguments, the step, the configs, the peers' windows."""

    args: argparse.Namespace
    step: TrainStep
    configs: dict[Case, dict[str, Any]]
    windows: Windows
    premade: dict[bool, Batch] = field(default_factory=dict)


def open_case(case: Case, bench: Bench) -> tuple[Iterator[Batch], Callable[[], None], int]:
    """The batches of a case, how to stop them, and the batches per hand-over (1: per batch)."""
    args = bench.args
    if case.kind == "none":
        return itertools.repeat(bench.premade[case.compact]), lambda: None, 1
    if case.kind in PEERS:
        loader = PEERS[case.kind](
            PeerDataset(bench.windows), batch_size=args.batch_size, num_workers=case.num_workers
        )
        it = iter(loader)
        return it, lambda: getattr(it, "_shutdown_workers", lambda: None)(), 1
    options = streamload.LoaderOptions(worker_type=case.worker_type)
    stream_loader = streamload.build_loader(
        bench.configs[case],
        batch_size=args.batch_size,
        num_workers=case.num_workers,
        options=options,
    )
    # Batches per chunk: the timed window must hold whole chunks (see above).
    chunk = chunk_batches(stream_loader.stream, stream_loader.rank, stream_loader.options)
    return iter(stream_loader), stream_loader.close, chunk


def measure(case: Case, bench: Bench) -> Run:
    """Warm up, then time the case's steps: wall time, time in ``next()``, CPU."""
    step = bench.step
    batches, close, chunk = open_case(case, bench)
    try:
        warmup, steps = timed_window(bench.args.warmup_steps, bench.args.steps, chunk)
        for _ in range(warmup):
            step(next(batches))
        gc.collect()
        timed = time_steps(batches, step, steps)
    finally:
        close()
    return Run(steps, timed.wall_s / steps, timed.wait_s / steps, timed.cpu_s, timed.off_main_s)


def case_config(paths: Sequence[str], args: argparse.Namespace, case: Case) -> dict[str, Any]:
    """The loader config of a case: the benchmark config, packed mode's pad id, compact."""
    config = bench_config(paths, seq_len=args.seq_len, masks=case.masks, num_samples=args.samples)
    if case.mode != "concat":
        config["sampling"]["mode"] = case.mode
        config["pad_token_id"] = PAD_TOKEN_ID
    if case.compact:
        config["packing"]["compact"] = True
    return config


def make_cases(args: argparse.Namespace) -> list[Case]:
    """The floors, the streamload cases and the peers, in the order they run."""
    workers = [(0, "thread"), *[(w, t) for w in args.num_workers if w for t in args.worker_types]]
    loaders = [
        Case("streamload", w, t, masks, mode, compact)
        for compact in args.compact
        for masks in args.masks
        for mode in args.modes
        for w, t in workers
    ]
    peers = [Case(name, args.peer_workers, "process") for name in args.peers]
    layouts = sorted({case.compact for case in loaders + peers})
    return [Case("none", compact=c) for c in layouts] + loaders + peers


def prime(config: dict[str, Any], batch_size: int) -> Batch:
    """Read a whole pass once without workers, before the repeats (first-use costs: lazy
    imports, plan caches, mapping the shards); return its first batch, cloned."""
    with streamload.build_loader(config, batch_size=batch_size) as loader:
        batches = iter(loader)
        first = {key: value.clone() for key, value in next(batches).items()}
        collections.deque(batches, maxlen=0)
    return first


def table_rows(
    cases: Sequence[Case], runs: dict[Case, list[Run]], tokens_per_step: int
) -> list[dict[str, Any]]:
    """One row per case: medians over the repeats; overhead and ratio per repeat against
    the ``none`` case of the same layout."""
    rows, per_gtok = [], 1e9 / tokens_per_step
    for case in cases:
        mine, floor = runs[case], runs[case.floor]
        pairs = list(zip(mine, floor, strict=True))
        overhead = [(r.step_s - f.step_s) * 1e6 for r, f in pairs]
        rows.append(
            {
                "loader": case.kind,
                "mode": case.mode if case.kind == "streamload" else None,
                "masks": "on" if case.masks else "off",
                "compact": "on" if case.compact else "off",
                "workers": worker_label(case.num_workers, case.worker_type),
                "steps": mine[0].steps,
                "step_ms": median(r.step_s for r in mine) * 1e3,
                "overhead_us": median(overhead),
                "overhead_range": f"{min(overhead):.0f}..{max(overhead):.0f}",
                "wait_us": median(r.wait_s for r in mine) * 1e6,
                "cpu_s_gtok": median(r.cpu_s / r.steps * per_gtok for r in mine),
                "extra_cpu_s_gtok": median(
                    (r.cpu_s / r.steps - f.cpu_s / f.steps) * per_gtok for r, f in pairs
                ),
                "off_main_s_gtok": median(r.off_main_s / r.steps * per_gtok for r in mine),
                "ratio": median(f.step_s / r.step_s for r, f in pairs),
                "runs_step_ms": [round(r.step_s * 1e3, 4) for r in mine],
            }
        )
    return rows


COLUMNS = [
    ("loader", "loader", ""),
    ("mode", "mode", ""),
    ("masks", "masks", ""),
    ("compact", "compact", ""),
    ("workers", "workers", ""),
    ("steps", "timed steps", "d"),
    ("step_ms", "step ms", ".3f"),
    ("overhead_us", "overhead µs/step", ".0f"),
    ("overhead_range", "overhead min..max", ""),
    ("wait_us", "in next() µs/step", ".0f"),
    ("cpu_s_gtok", "tree CPU s/1e9 tok", ".0f"),
    ("extra_cpu_s_gtok", "of which beyond none", ".1f"),
    ("off_main_s_gtok", "off-main CPU s/1e9 tok", ".1f"),
    ("ratio", "tokens/s vs none", ".3f"),
]


def notes(args: argparse.Namespace, work: dict[str, float]) -> list[str]:
    return [
        f"Corpus: {args.corpus_tokens:.3g} uint32 tokens in NPY shards, seq_len {args.seq_len}, "
        f"batch {args.batch_size}, shuffle on, {args.samples} samples per pass; page cache warm.",
        "Pinned step: copy input_ids+labels (compact: tokens, label_mask if any) into "
        "preallocated buffers; "
        f"{work['python_iterations']} rounds of dict/list/attribute work holding the GIL "
        f"(calibrated {work['python_us']:.0f} µs); {work['matmuls']} torch.mm of "
        f"{MATRIX}x{MATRIX} float32 on one thread, releasing it (calibrated "
        f"{work['release_us']:.0f} µs). Every case runs these counts.",
        f"Per case and repeat: >= {args.warmup_steps} warm-up steps, then ~{args.steps} timed "
        "steps (streamload: half a chunk past a chunk boundary, whole chunks timed); "
        f"{args.repeats} round-robin repeats, medians shown; every streamload config read "
        "one whole pass without workers before the first repeat (imports, plan caches, maps).",
        "step ms = timed wall time / timed steps (next() included); overhead = step time minus "
        "the none case's of the same layout in the same repeat, median (and range) over "
        "repeats; tokens/s vs none = none's step time / the case's, median over repeats.",
        "tree CPU = this process (time.process_time) + its child processes (psutil, user + "
        "system) over the timed steps, per 1e9 input tokens (padding included); beyond none = "
        "minus the none case's (same layout, same repeat; median); off-main = the part not on "
        "the training thread (time.thread_time): loader threads and worker processes. "
        "Children's CPU has the kernel's tick resolution (10 ms per process and window).",
    ]


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    add_common_args(parser)
    parser.set_defaults(repeats=None)  # 5 for the single-process table; see resolve_bill_args
    add_bill_args(parser)
    parser.add_argument("--corpus-tokens", type=float, default=1e8, help="corpus size")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--steps", type=int, default=200, help="timed steps per case")
    parser.add_argument("--warmup-steps", type=int, default=10, help="untimed steps first")
    parser.add_argument("--step-python-us", type=float, default=3000, help="GIL-holding work")
    parser.add_argument("--step-release-us", type=float, default=12000, help="GIL-free work")
    parser.add_argument("--num-workers", type=int_list, default=[0, 2])
    parser.add_argument("--worker-types", type=str_list, default=list(WORKER_TYPES))
    parser.add_argument("--masks", type=on_off_list, default=[False, True], help="off,on")
    parser.add_argument("--modes", type=str_list, default=list(MODES), help="concat,packed")
    parser.add_argument("--compact", type=on_off_list, default=[False, True], help="off,on")
    parser.add_argument("--peers", type=str_list, default=list(PEERS), help=",".join(PEERS))
    parser.add_argument("--peer-workers", type=int, default=2, help="peer worker processes")
    args = parser.parse_args(argv)
    resolve_bill_args(parser, args)
    for flag, allowed in (("modes", MODES), ("worker_types", WORKER_TYPES), ("peers", PEERS)):
        if not set(getattr(args, flag)) <= set(allowed):
            name, given = flag.replace("_", "-"), ",".join(getattr(args, flag))
            parser.error(f"--{name} {given}: pick from {','.join(allowed)}")
    if min(args.steps, args.repeats, args.batch_size) < 1 or args.warmup_steps < 0:
        parser.error("--steps, --repeats and --batch-size must be >= 1, --warmup-steps >= 0")
    # One pass holds the longest window (rounded up to whole chunks of up to 64 batches)
    # and the chunks the workers prefetch beyond it.
    args.samples = (args.warmup_steps + args.steps + 2 * 64 + 8 * 64) * args.batch_size
    return args


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    if args.ranks:
        bill_main(args)
        return
    torch.set_num_threads(1)  # the step's GIL-free part uses one core
    paths = ensure_corpus(args.data_dir, int(args.corpus_tokens), args.shard_tokens)
    cases = make_cases(args)
    configs = {c: case_config(paths, args, c) for c in cases if c.kind == "streamload"}
    for case, config in configs.items():
        try:  # before anything runs: e.g. packing.compact needs a streamload that has it
            streamload.load_config(config)
        except streamload.ConfigError as err:
            sys.exit(f"{case.label}: this streamload rejects the case's config: {err}")
    config = bench_config(paths, seq_len=args.seq_len, num_samples=args.samples)
    stream = streamload.SampleStream.from_config(streamload.load_config(config))
    windows = Windows(paths, stream.window_starts(0, np.arange(args.samples)), args.seq_len)
    step, work = calibrate(args)
    bench = Bench(args, step, configs, windows)
    for case in cases:  # none's batch: the first of a concat loader without masks
        if case.kind == "none":
            base = case_config(paths, args, Case("streamload", compact=case.compact))
            bench.premade[case.compact] = prime(base, args.batch_size)
    for case, config in configs.items():
        if case.num_workers == 0:
            prime(config, args.batch_size)
    runs: dict[Case, list[Run]] = {c: [] for c in cases}
    for rep in range(args.repeats):
        for case in cases:
            runs[case].append(measure(case, bench))
            print(
                f"[{rep + 1}/{args.repeats}] {case.label}: "
                f"{runs[case][-1].step_s * 1e3:.3f} ms/step",
                file=sys.stderr,
            )
    rows = table_rows(cases, runs, args.batch_size * args.seq_len)
    title = f"Trainer cost: step-time overhead and CPU per token (batch {args.batch_size})"
    emit(args, title, rows, COLUMNS, notes(args, work))


if __name__ == "__main__":
    main()
