"""Peak memory of the main process and of each worker process while iterating, by corpus size.

Each measurement runs in a fresh child process that iterates a fixed number of tokens
(touching every page of every delivered tensor); the parent samples the child and its worker
processes every ``--interval`` seconds and keeps each process's peak of:

* ``RSS``: everything resident, including the pages of the memory-mapped shards that this
  process has touched (page cache, shared, reclaimable: they grow with what is read, not
  with what the loader holds);
* ``anon``: ``RssAnon`` of ``/proc/PID/status``, the process's own heap (what must stay flat);
* ``file``: ``RssFile``, mapped file pages (shards, libraries);
* ``shmem``: ``RssShmem``, shared-memory pages (tensors handed over by process workers);
* ``USS``: psutil's unique set size (private pages, including privately mapped file pages).

Baseline (``raw``): the loop of ``throughput.py``'s raw case in the same child setup.

Example:
    python benchmarks/memory.py --sizes 1e8,1e9 --tokens 64e6
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psutil
from _common import (
    bench_config,
    bench_parser,
    emit,
    ensure_corpus,
    median,
    parse_sizes,
    run_child,
    worker_label,
)

FIELDS = ("rss", "anon", "file", "shmem", "uss")
STATUS_KEYS = {"VmRSS": "rss", "RssAnon": "anon", "RssFile": "file", "RssShmem": "shmem"}
MIB = 1 << 20


def child(spec: dict[str, Any]) -> None:
    """Iterate ``spec['tokens']`` tokens of one case (runs in the fresh child process)."""
    import numpy as np
    from throughput import Windows, raw_batches, touch

    import streamload

    batch_size, seq_len = spec["batch_size"], spec["seq_len"]
    count = -(-int(spec["tokens"]) // (batch_size * seq_len))
    config = bench_config(
        spec["paths"], seq_len=seq_len, masks=spec["masks"], num_samples=count * batch_size * 2
    )
    if spec["kind"] == "raw":
        stream = streamload.SampleStream.from_config(streamload.load_config(config))
        starts = stream.window_starts(0, np.arange(count * batch_size))
        batches = raw_batches(Windows(spec["paths"], starts, seq_len), batch_size)
        close = None
    else:
        options = streamload.LoaderOptions(worker_type=spec["worker_type"])
        loader = streamload.build_loader(
            config, batch_size=batch_size, num_workers=spec["num_workers"], options=options
        )
        batches, close = iter(loader), loader._close  # no public close()
    for _ in range(count):
        touch(next(batches))
    if close is not None:
        close()


def read_status(pid: int) -> dict[str, int]:
    """VmRSS/RssAnon/RssFile/RssShmem of a process, in bytes."""
    out: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in STATUS_KEYS:
            out[STATUS_KEYS[key]] = int(value.split()[0]) * 1024
    return out


def sample(pid: int, peaks: dict[int, dict[str, int]]) -> None:
    """Update each process's peaks (the child ``pid`` and its worker processes)."""
    try:
        proc = psutil.Process(pid)
        family = [proc, *proc.children(recursive=True)]
    except psutil.NoSuchProcess:
        return
    for p in family:
        try:
            if "resource_tracker" in " ".join(p.cmdline()):
                continue
            values = read_status(p.pid)
            values["uss"] = p.memory_full_info().uss
        except (psutil.NoSuchProcess, psutil.AccessDenied, FileNotFoundError, ProcessLookupError):
            continue
        peak = peaks.setdefault(p.pid, dict.fromkeys(FIELDS, 0))
        for key in FIELDS:
            peak[key] = max(peak[key], values.get(key, 0))


def run_case(spec: dict[str, Any], interval: float) -> dict[str, dict[str, int]]:
    """Peaks of the main process and the largest peaks over its workers (bytes)."""
    peaks: dict[int, dict[str, int]] = {}
    pids: list[int] = []

    def watch(pid: int) -> None:
        pids[:] = [pid]
        sample(pid, peaks)

    run_child([__file__, "--child", json.dumps(spec)], watch=watch, interval=interval)
    main = pids[0]
    result = {"main": peaks.get(main, dict.fromkeys(FIELDS, 0))}
    workers = [v for pid, v in peaks.items() if pid != main]
    if workers:
        result["worker"] = {k: max(w[k] for w in workers) for k in FIELDS}
        result["worker"]["count"] = len(workers)
    return result


def cases(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Raw baseline, then the loader with 0 workers and each worker type."""
    common = {"batch_size": args.batch_size, "seq_len": args.seq_len, "tokens": args.tokens}
    out = [{"kind": "raw", **common, "masks": False, "num_workers": 0, "worker_type": "-"}]
    for workers in args.num_workers:
        for wtype in ["thread"] if workers == 0 else args.worker_types:
            out.append(
                {
                    "kind": "streamload",
                    **common,
                    "masks": args.masks,
                    "num_workers": workers,
                    "worker_type": wtype,
                }
            )
    return out


def measure(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Median peaks per (size, case, process role), round-robin over repeats."""
    corpora = {n: ensure_corpus(args.data_dir, n, args.shard_tokens) for n in args.sizes}
    runs: dict[tuple[int, int, str], list[dict[str, int]]] = {}
    for rep in range(args.repeats):
        for size, paths in corpora.items():
            for i, case in enumerate(cases(args)):
                result = run_case({**case, "paths": paths}, args.interval)
                for role, peak in result.items():
                    runs.setdefault((size, i, role), []).append(peak)
                print(
                    f"[{rep + 1}/{args.repeats}] {size:.0e} {case['kind']} "
                    f"w={case['num_workers']} {case['worker_type']}: main anon "
                    f"{result['main']['anon'] / MIB:.0f} MiB",
                    file=sys.stderr,
                )
    rows = []
    for (size, i, role), peaks in sorted(runs.items(), key=lambda kv: kv[0]):
        case = cases(args)[i]
        row: dict[str, Any] = {
            "tokens": f"{len(corpora[size]) * args.shard_tokens:.0e}",
            "case": case["kind"],
            "workers": worker_label(case["num_workers"], case["worker_type"]),
            "role": role if role == "main" else f"each of {peaks[0]['count']} workers",
        }
        row.update({f"{k}_mib": median(p[k] for p in peaks) / MIB for k in FIELDS})
        rows.append(row)
    return rows


COLUMNS = [
    ("tokens", "corpus tokens", ""),
    ("case", "case", ""),
    ("workers", "workers", ""),
    ("role", "process", ""),
    ("rss_mib", "peak RSS (MiB)", ".0f"),
    ("anon_mib", "peak anon (MiB)", ".0f"),
    ("file_mib", "peak file (MiB)", ".0f"),
    ("shmem_mib", "peak shmem (MiB)", ".0f"),
    ("uss_mib", "peak USS (MiB)", ".0f"),
]


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = bench_parser(__doc__, ["thread", "process"])
    parser.add_argument("--sizes", type=parse_sizes, default=[10**8, 10**9])
    parser.add_argument("--tokens", type=float, default=64e6, help="input tokens per run")
    parser.add_argument("--masks", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--interval", type=float, default=0.05, help="sampling period (s)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    if args.child:
        child(json.loads(args.child))
        return
    rows = measure(args)
    notes = [
        f"Each run: a fresh process iterates {args.tokens:.3g} input tokens (batch "
        f"{args.batch_size}, seq_len {args.seq_len}, shuffle on, masks "
        f"{'on' if args.masks else 'off'}; raw: no masks), touching every page it receives; "
        f"peaks sampled every {args.interval} s; median of {args.repeats} repeats.",
        "Flat in corpus size means: anon (heap) and shmem do not grow from 1e8 to 1e9 "
        "tokens; file pages grow with the distinct windows read (page cache, reclaimable).",
        "The main process includes torch itself (~the raw row).",
    ]
    emit(args, "Memory: peak per process", rows, COLUMNS, notes)


if __name__ == "__main__":
    main()
