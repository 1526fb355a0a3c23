"""The bill per rank (``trainer_cost.py --ranks N``): its flags, its run, its table.

``_rank_bill`` runs the ranks of one case; this module runs every case round-robin over the
repeats, then makes one row per case: CPU per 10^9 tokens over all ranks, memory of the worst
rank, medians over repeats (``none``'s memory subtracted per repeat).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from _common import emit, ensure_corpus, median, str_list
from _rank_bill import LAYOUTS, WORKER_KINDS, RankCase, make_rank_cases, run_case
from _train_step import calibrate

__all__ = ["BILL_COLUMNS", "add_bill_args", "bill_main", "bill_rows", "resolve_bill_args"]

MIB = 1 << 20
PREFETCH_BATCHES = 16 * 64
"""Batches a pass holds beyond the timed window: chunk rounding and workers' prefetch."""
QUICK = {"ranks": 2, "tokens": 2e6, "repeats": 1}
FULL = {"ranks": 8, "tokens": 8e6, "repeats": 3}


def add_bill_args(parser: argparse.ArgumentParser) -> None:
    """The flags of the bill per rank (``--num-workers``' non-zero counts are its workers;
    ``--peers``/``--peer-workers`` are shared with the single-process table)."""
    parser.add_argument("--ranks", type=int, help="ranks on this host, 0: single-process table")
    parser.add_argument("--tokens", type=float, help="timed input tokens per rank and case")
    parser.add_argument("--layouts", type=str_list, default=list(LAYOUTS), help="full,...")
    parser.add_argument("--worker-kinds", type=str_list, default=list(WORKER_KINDS))
    parser.add_argument("--pin", action=argparse.BooleanOptionalAction, default=None,
                        help="pin each rank's training thread to a core (default: cores >= "
                        "2 x ranks)")  # fmt: skip
    parser.add_argument("--prefetch", type=int, help="streamload LoaderOptions.prefetch")
    parser.add_argument("--chunk-batches", type=int, help="LoaderOptions.chunk_batches")
    parser.add_argument("--mem-interval", type=float, default=0.5, help="seconds per sample")
    parser.add_argument("--goal-cpu", type=float, default=20.0, help="loader s per 1e9 tokens")
    parser.add_argument("--goal-memory-mib", type=float, default=300.0, help="PSS per rank")
    parser.add_argument("--quick", action="store_true", help="2 ranks, 2e6 tokens, 1 repeat")


def resolve_bill_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Fill ``--ranks``/``--tokens``/``--repeats`` (``--quick`` or full defaults); check."""
    defaults = QUICK if args.quick else FULL
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, 5 if key == "repeats" and args.ranks == 0 else value)
    if args.ranks < 0 or args.tokens <= 0:
        parser.error("--ranks must be >= 0 and --tokens > 0")
    for flag, allowed in (("layouts", LAYOUTS), ("worker_kinds", WORKER_KINDS)):
        if not set(getattr(args, flag)) <= set(allowed):
            name, given = flag.replace("_", "-"), ",".join(getattr(args, flag))
            parser.error(f"--{name} {given}: pick from {','.join(allowed)}")


def _warm_page_cache(paths: Sequence[str]) -> None:
    """Read the shards once, so no case pays the disk (every case finds them cached)."""
    for path in paths:
        with Path(path).open("rb") as fh:
            while fh.read(1 << 24):
                pass


def _common_spec(
    args: argparse.Namespace, paths: list[str], work: dict[str, float]
) -> dict[str, Any]:
    """What every rank of every case is given (its case, rank and barrier are added)."""
    batch_tokens = args.batch_size * args.seq_len
    steps = max(1, round(args.tokens / batch_tokens))
    per_rank = args.warmup_steps + steps + PREFETCH_BATCHES
    # Pinned only where each rank's training thread can have a core of its own and one is
    # left for its loader: on fewer cores pinning would stack loaders on the step's core.
    pin = args.pin if args.pin is not None else (os.cpu_count() or 1) >= 2 * args.ranks
    return {"paths": paths, "seq_len": args.seq_len, "batch_size": args.batch_size,
            "world": args.ranks, "samples": args.ranks * args.batch_size * per_rank,
            "warmup_steps": args.warmup_steps, "steps": steps, "pin": bool(pin),
            "python_iterations": int(work["python_iterations"]),
            "matmuls": int(work["matmuls"]), "loader_options": _loader_options(args)}  # fmt: skip


def _loader_options(args: argparse.Namespace) -> dict[str, int]:
    """streamload's ``LoaderOptions`` given on the command line (the others: defaults)."""
    given = {"prefetch": args.prefetch, "chunk_batches": args.chunk_batches}
    return {key: value for key, value in given.items() if value is not None}


def _summary(run: dict[str, Any]) -> dict[str, float]:
    """One repeat of one case, over its ranks: CPU per 1e9 tokens (all ranks' CPU over all
    ranks' tokens), mean step and wait, the worst rank's memory peaks."""
    ranks, peaks = run["ranks"], run["peaks"]
    tokens = sum(r["tokens"] for r in ranks)
    return {
        "loader_cpu": sum(r["loader_cpu_s"] for r in ranks) / tokens * 1e9,
        "tree_cpu": sum(r["tree_cpu_s"] for r in ranks) / tokens * 1e9,
        "step_ms": sum(r["wall_s"] / r["steps"] for r in ranks) / len(ranks) * 1e3,
        "wait_us": sum(r["wait_s"] / r["steps"] for r in ranks) / len(ranks) * 1e6,
        "pss": max(p.pss for p in peaks) / MIB,
        "uss": max(p.uss for p in peaks) / MIB,
        "shared": max(p.shared for p in peaks) / MIB,
        "shmem": max(p.shmem for p in peaks) / MIB,
        "hwm": max(p.main_hwm for p in peaks) / MIB,
        "procs": max(p.processes for p in peaks),
        "steps": ranks[0]["steps"],
    }


def bill_rows(
    cases: Sequence[RankCase],
    runs: dict[RankCase, list[dict[str, Any]]],
    goals: tuple[float, float],
) -> list[dict[str, Any]]:
    """One row per case: medians over repeats; memory beyond ``none`` per repeat."""
    floor = [_summary(r) for r in runs[RankCase("none")]]
    rows = []
    for case in cases:
        mine = [_summary(r) for r in runs[case]]
        row: dict[str, Any] = {"loader": case.kind, "layout": case.layout}
        row["workers"] = f"{case.num_workers} {case.worker_kind}" if case.num_workers else "0"
        for key in mine[0]:
            row[key] = median(m[key] for m in mine)
        row["extra_pss"] = median(m["pss"] - f["pss"] for m, f in zip(mine, floor, strict=True))
        cpu_goal, memory_goal = goals
        ok = row["loader_cpu"] <= cpu_goal and row["pss"] <= memory_goal
        row["goals"] = "-" if case.kind == "none" else ("yes" if ok else "no")
        rows.append(row)
    return rows


BILL_COLUMNS = [
    ("loader", "loader", ""),
    ("layout", "layout", ""),
    ("workers", "workers per rank", ""),
    ("steps", "timed steps per rank", "d"),
    ("step_ms", "step ms", ".2f"),
    ("wait_us", "in next() µs/step", ".0f"),
    ("loader_cpu", "loader CPU s/1e9 tok", ".1f"),
    ("tree_cpu", "tree CPU s/1e9 tok (step incl.)", ".0f"),
    ("pss", "peak PSS MiB/rank", ".0f"),
    ("extra_pss", "PSS beyond none MiB", ".0f"),
    ("uss", "peak USS MiB/rank", ".0f"),
    ("shared", "shared MiB/rank (RSS-USS)", ".0f"),
    ("shmem", "shm MiB/rank", ".0f"),
    ("hwm", "rank main peak RSS MiB", ".0f"),
    ("procs", "processes/rank", "d"),
    ("goals", "<= goals", ""),
]


def bill_notes(common: dict[str, Any], work: dict[str, float], args: Any) -> list[str]:
    """What a reader needs to weigh the table."""
    pin = "pinned to one core each" if common["pin"] else "not pinned (fewer cores than 2/rank)"
    return [
        f"{common['world']} ranks on one host of {os.cpu_count()} cores, started together per "
        f"case (fresh interpreters), each with its own loader; batch {common['batch_size']} x "
        f"{common['seq_len']}, shuffled; {common['steps']} timed steps per rank (~"
        f"{args.tokens:.3g} tokens) after >= {common['warmup_steps']} warm-up steps, a "
        "barrier between; cases round-robin, medians of "
        f"{args.repeats} repeats. Corpus: {args.corpus_tokens:.3g} uint32 tokens, NPY shards. "
        f"streamload LoaderOptions: {common['loader_options'] or 'defaults'}.",
        f"Step (fixed work, calibrated once by the parent): batch copy into preallocated "
        f"buffers, {work['python_iterations']} rounds of GIL-holding Python (~"
        f"{work['python_us']:.0f} µs), {work['matmuls']} one-core torch.mm (~"
        f"{work['release_us']:.0f} µs); training threads {pin}.",
        "loader CPU = the training thread's CPU inside next() + all CPU off it (loader "
        "threads, worker processes), summed over ranks, per 1e9 input tokens; tree CPU adds "
        "the step itself. Children's CPU has the kernel tick's resolution.",
        "Memory: the parent reads /proc/PID/smaps_rollup of each rank and its worker "
        f"processes every {args.mem_interval} s; PSS divides each shared page (libtorch, shard "
        "page cache, shm slots) among the processes that map it, so 8 ranks' PSS add up to "
        "the host's use; the worst rank is shown. USS = private pages; shared = RSS - USS at "
        "the PSS peak, counted in full; shm = PSS of shared-memory slots; rank main peak RSS "
        "= VmHWM (exact). none = torch + the step, no loader imported.",
        f"<= goals: loader CPU <= {args.goal_cpu:g} s/1e9 tok and peak PSS <= "
        f"{args.goal_memory_mib:g} MiB per rank (issue 35).",
    ]


def bill_main(args: argparse.Namespace) -> None:
    """Run every case's ranks, round-robin over the repeats; print and record the table."""
    torch.set_num_threads(1)  # the calibrated matmuls: one core, as in each rank
    # A terminated run stops its ranks too (run_case kills them on the way out).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    paths = ensure_corpus(args.data_dir, int(args.corpus_tokens), args.shard_tokens)
    _warm_page_cache(paths)
    counts = [w for w in args.num_workers if w] or [2]
    cases = make_rank_cases(args.layouts, args.worker_kinds, counts, args.peers, args.peer_workers)
    _, work = calibrate(args)
    common = _common_spec(args, paths, work)
    runs: dict[RankCase, list[dict[str, Any]]] = {case: [] for case in cases}
    for rep in range(args.repeats):
        for case in cases:
            runs[case].append(run_case(case, common, args.mem_interval))
            summary = _summary(runs[case][-1])
            print(
                f"[{rep + 1}/{args.repeats}] {case.label}: {summary['step_ms']:.2f} ms/step, "
                f"loader {summary['loader_cpu']:.1f} CPU s/1e9 tok, PSS {summary['pss']:.0f} MiB",
                file=sys.stderr,
            )
    rows = bill_rows(cases, runs, (args.goal_cpu, args.goal_memory_mib))
    quick = " (--quick: a small run, not the 8-rank bill)" if args.quick else ""
    options = "".join(f", {k} {v}" for k, v in common["loader_options"].items())
    title = f"Trainer cost: the bill per rank, {args.ranks} ranks on one host{options}{quick}"
    emit(args, title, rows, BILL_COLUMNS, bill_notes(common, work, args))
