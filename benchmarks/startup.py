"""Time to first batch (``build_loader`` + first ``next()``) against corpus size.

Each measurement runs in a fresh Python process, so nothing is cached in the interpreter
(the OS page cache may be warm: shard headers and the first windows were read before). The
child times ``import streamload`` separately; the parent also reports the whole process wall
time (interpreter start, imports, first batch, exit).

Baseline (``raw``): open every shard with ``numpy.load(mmap_mode="r")``, draw a full
permutation of the windows (``numpy.random.default_rng().permutation``, what a simple loader
does) and slice the first batch into int64 tensors.

Example:
    python benchmarks/startup.py --sizes 1e8,1e9 --repeats 5
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from typing import Any

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


def child(spec: dict[str, Any]) -> dict[str, float]:
    """Run one measurement in this (fresh) process; return its timings in seconds."""
    start = time.perf_counter()
    import numpy as np
    import torch

    import streamload

    imported = time.perf_counter()
    batch_size, seq_len = spec["batch_size"], spec["seq_len"]
    if spec["kind"] == "raw":
        maps = [np.load(p, mmap_mode="r") for p in spec["paths"]]
        offsets = np.concatenate([[0], np.cumsum([m.shape[0] for m in maps])])
        order = np.random.default_rng(0).permutation((int(offsets[-1]) - 1) // seq_len)
        built = time.perf_counter()
        inputs = np.empty((batch_size, seq_len), dtype=np.int64)
        labels = np.empty((batch_size, seq_len), dtype=np.int64)
        for row, w in enumerate(order[:batch_size].tolist()):
            sid = int(np.searchsorted(offsets, w * seq_len, side="right")) - 1
            local = w * seq_len - int(offsets[sid])
            piece = maps[sid][local : local + seq_len + 1]  # straddling: not in a first batch
            inputs[row], labels[row] = piece[:-1], piece[1:]
        batch = {"input_ids": torch.from_numpy(inputs), "labels": torch.from_numpy(labels)}
        close = None
    else:
        config = bench_config(spec["paths"], seq_len=seq_len, masks=spec["masks"])
        options = streamload.LoaderOptions(worker_type=spec["worker_type"])
        loader = streamload.build_loader(
            config, batch_size=batch_size, num_workers=spec["num_workers"], options=options
        )
        built = time.perf_counter()
        batch = next(iter(loader))
        close = loader._close  # no public close(); stop workers before exiting
    first = time.perf_counter()
    assert batch["input_ids"].shape == (batch_size, seq_len)
    if close is not None:
        close()
    return {
        "import_s": imported - start,
        "build_s": built - imported,
        "first_next_s": first - built,
        "to_first_batch_s": first - imported,
    }


def cases(args: argparse.Namespace) -> list[dict[str, Any]]:
    """The measured configurations (without paths)."""
    common = {"batch_size": args.batch_size, "seq_len": args.seq_len, "masks": args.masks}
    out = [{"kind": "raw", **common, "num_workers": 0, "worker_type": "-"}]
    for workers in args.num_workers:
        types = ["thread"] if workers == 0 else args.worker_types
        out += [
            {"kind": "streamload", **common, "num_workers": workers, "worker_type": t}
            for t in types
        ]
    return out


def measure(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Median timings per (size, case), each repeat in a fresh process, round-robin."""
    corpora = {n: ensure_corpus(args.data_dir, n, args.shard_tokens) for n in args.sizes}
    runs: dict[tuple[int, int], list[dict[str, float]]] = {}
    for rep in range(args.repeats):
        for size, paths in corpora.items():
            for i, case in enumerate(cases(args)):
                run = run_child([__file__, "--child", json.dumps({**case, "paths": paths})])
                result = {**(run.result or {}), "process_s": run.seconds}
                runs.setdefault((size, i), []).append(result)
                print(
                    f"[{rep + 1}/{args.repeats}] {size:.0e} {case['kind']} "
                    f"w={case['num_workers']}: {result['to_first_batch_s']:.3f} s",
                    file=sys.stderr,
                )
    rows = []
    for (size, i), results in runs.items():
        case = cases(args)[i]
        row: dict[str, Any] = {
            "tokens": f"{len(corpora[size]) * args.shard_tokens:.0e}",
            "shards": len(corpora[size]),
            "case": case["kind"],
            "workers": worker_label(case["num_workers"], case["worker_type"]),
        }
        for key in ("import_s", "build_s", "first_next_s", "to_first_batch_s", "process_s"):
            row[key] = median(r[key] for r in results)
        row["max_to_first_batch_s"] = max(r["to_first_batch_s"] for r in results)
        rows.append(row)
    return rows


COLUMNS = [
    ("tokens", "corpus tokens", ""),
    ("shards", "shards", "d"),
    ("case", "case", ""),
    ("workers", "workers", ""),
    ("build_s", "build (s)", ".3f"),
    ("first_next_s", "first next() (s)", ".3f"),
    ("to_first_batch_s", "to first batch (s)", ".3f"),
    ("max_to_first_batch_s", "worst (s)", ".3f"),
    ("import_s", "imports (s)", ".2f"),
    ("process_s", "whole process (s)", ".2f"),
]


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = bench_parser(__doc__, ["thread"])
    parser.add_argument("--sizes", type=parse_sizes, default=[10**8, 10**9])
    parser.add_argument("--masks", action=argparse.BooleanOptionalAction, default=False)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    if args.child:
        print(json.dumps(child(json.loads(args.child))))
        return
    rows = measure(args)
    notes = [
        f"Median of {args.repeats} fresh processes per row (round-robin); batch size "
        f"{args.batch_size}, seq_len {args.seq_len}, masks {'on' if args.masks else 'off'}, "
        "shuffle on, one pass = one epoch.",
        "to first batch = build + first next(), timed inside the child after its imports; "
        "the page cache is warm (the corpus was written or read before), so shard headers "
        "and first windows come from memory.",
        "raw = np.load(mmap_mode='r') per shard + a full numpy permutation of the windows + "
        "slicing the first batch.",
    ]
    emit(args, "Start-up: time to first batch", rows, COLUMNS, notes)


if __name__ == "__main__":
    main()
