"""Start-up: time to the first batch against corpus size, shards, documents and ranks.

Suites (``--suites``, each measured in fresh processes; every number is ``build_loader`` +
the first ``next()`` timed inside the child after its imports):

* ``shards``: 10³, 10⁴ (``--shards 1e3,1e4,1e5``) tiny shards per format and mode, cold
  (empty ``storage.cache_dir``) and warm (second start), with the filesystem operations each
  start made, counted per kind (``_fsops``), and the growth exponents (log-log slopes);
* ``documents``: 10⁵, 10⁶ (``--documents 1e5,1e6,1e7``) documents in Megatron and Dolma
  shards, likewise;
* ``ranks``: a simulated 1,000-rank start on one machine sharing one cache folder
  (``_startup_ranks``): how many ranks built the caches, and each rank's metadata operations;
* ``tokens``: the original table, first batch over 10⁸-10⁹ tokens of 50 M-token NPY shards
  against a plain numpy baseline (``--sizes``).

The defaults (shards, documents, ranks) run in about 10 minutes on 2 cores; ``--repo PATH``
measures the streamload of another tree (the children import it first). Corpora are cached
in ``--data-dir``; caches are made and removed per case.

Baseline of ``tokens`` (``raw``): open every shard with ``numpy.load(mmap_mode="r")``, draw a
full permutation of the windows (``numpy.random.default_rng().permutation``, what a simple
loader does) and slice the first batch into int64 tensors.

Example:
    python benchmarks/startup.py --shards 1e3,1e4,1e5 --documents 1e5,1e6,1e7 --ranks 1000
    python benchmarks/startup.py --suites tokens --sizes 1e8,1e9 --repeats 5
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from _common import (
    BENCH_DIR,
    bench_config,
    bench_parser,
    emit,
    ensure_corpus,
    median,
    parse_sizes,
    run_child,
    str_list,
    worker_label,
)
from _startup_ranks import RANK_COLUMNS, RANK_NOTES, measure_ranks, serve_ranks
from _startup_scale import (
    MODES,
    SCALE_COLUMNS,
    SLOPE_COLUMNS,
    emit_tables,
    growth_rows,
    measure_scale,
    measure_start,
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
    parser.set_defaults(repeats=1)
    add = parser.add_argument
    add(
        "--suites",
        type=str_list,
        default=["shards", "documents", "ranks"],
        help="tokens, shards, documents, ranks",
    )
    add("--repo", default=str(BENCH_DIR.parent), help="the tree whose streamload is measured")
    add("--title", default="Start-up at scale (issue 31)", help="RESULTS.md section title")
    add("--timeout", type=float, default=3600, help="seconds before a child is killed")
    add("--sizes", type=parse_sizes, default=[10**8, 10**9], help="tokens suite: tokens")
    add("--masks", action=argparse.BooleanOptionalAction, default=False, help="tokens suite")
    add("--shards", type=parse_sizes, default=[10**3, 10**4])
    add("--shard-formats", type=str_list, default=["megatron", "numpy", "raw"])
    add("--shard-modes", type=str_list, default=["concat", "packed"], help=", ".join(MODES))
    add("--documents", type=parse_sizes, default=[10**5, 10**6])
    add("--doc-formats", type=str_list, default=["megatron", "dolma"])
    add("--doc-modes", type=str_list, default=["concat+masks", "packed", "megatron"])
    add(
        "--trust-catalog",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="set storage.trust_catalog (trees that have it): no listing at a warm start",
    )
    add(
        "--strace",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="count a third (warm) start's file syscalls with strace (first repeat)",
    )
    add("--ranks", type=int, default=1000, help="ranks suite: world size")
    add("--rank-concurrency", type=int, default=50, help="ranks alive at once")
    add("--rank-shards", type=int, default=1000)
    add("--rank-format", default="megatron")
    add("--rank-mode", default="packed")
    add("--rank-phases", type=str_list, default=["cold"], help="cold, warm")
    add("--child", help=argparse.SUPPRESS)
    add("--child-start", help=argparse.SUPPRESS)
    add("--child-ranks", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.script = str(Path(__file__).resolve())
    unknown = set(args.suites) - {"tokens", "shards", "documents", "ranks"}
    unknown |= set(args.shard_modes + args.doc_modes) - set(MODES)
    if unknown:
        parser.error(f"unknown suite or mode {sorted(unknown)}")
    return args


def use_repo(repo: str) -> None:
    """Import streamload from ``repo`` here and in every child (``PYTHONPATH`` first)."""
    repo = str(Path(repo).resolve())
    sys.path.insert(0, repo)
    rest = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = repo + (os.pathsep + rest if rest else "")
    # One BLAS/OpenMP thread per child, as in the "before" runs of RESULTS.md (a start is
    # single-threaded numpy; the machine is 2 shared cores; a fork must not inherit a pool).
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


SCALE_NOTES = [
    "Each case: a new empty storage.cache_dir, then two fresh processes: cold (catalog, "
    "indices and plans built) and warm (the second start, everything cached); batch size "
    "per rank as given, 0 workers, shuffle on. Times are build_loader + first next(), timed "
    "inside the child after its imports; CPU = process_time over the same span. The OS page "
    "cache is warm (the corpus was written or read before): cold means streamload's caches.",
    "Corpora (_scale_corpus.py): shards = tiny shards of 4,096 uint16 tokens (8 documents of "
    "512); documents = documents of 16-240 tokens (mean 128) in shards of at most 10^6, "
    "sparse token files, boundaries from the .idx or .csv.gz. Modes: concat+masks = concat "
    "with packing.masks; megatron with num_samples 10,000 and sampling.cache_dir in the cache.",
    "Operations (_fsops.py): os.stat/lstat/access/scandir/listdir wrapped (os.path.* and "
    "pathlib go through them) and open/glob counted by audit hook, in the child, from after "
    "the imports; corpus = paths under the corpus folder, cache = under the cache folder. "
    "meta ops = stat + lstat + access + scandir + listdir + listed + open + glob, where "
    "listed = the entries a scandir returned (fsspec's ls(detail=True) stats each through "
    "DirEntry.stat, which no wrapper sees); not included: names (what a listdir returned: "
    "no stat), fstat and mmap of open files; by kind in the JSON. strace = the kernel's "
    "count of file-name syscalls on corpus paths in a third (warm) start traced by strace -f "
    "(first repeat; not timed); getdents64 = directory reads of any folder.",
    "k = growth exponent: least-squares slope of log(value) on log(size) over the sizes "
    "measured (1 = linear in shards or documents, 0 = flat).",
]


def run_scale(args: argparse.Namespace) -> list[tuple[str, list[dict[str, Any]], list[Any]]]:
    """The tables of the shards, documents and ranks suites that were asked for."""
    tables: list[tuple[str, list[dict[str, Any]], list[Any]]] = []
    if {"shards", "documents"} & set(args.suites):
        rows = measure_scale(args)
        tables.append(("Cold and warm start", rows, SCALE_COLUMNS))
        tables.append(("Growth exponents", growth_rows(rows), SLOPE_COLUMNS))
    if "ranks" in args.suites:
        title = (
            f"{args.ranks} ranks ({args.rank_concurrency} alive at a time), "
            f"{args.rank_shards} {args.rank_format} shards, {args.rank_mode} mode, one cache"
        )
        tables.append((title, measure_ranks(args), RANK_COLUMNS))
    return tables


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    if not (args.child or args.child_start or args.child_ranks):
        use_repo(args.repo)  # a child imports what its parent's PYTHONPATH names
    if args.child:
        print(json.dumps(child(json.loads(args.child))))
        return
    if args.child_start:
        print(json.dumps(measure_start(json.loads(args.child_start))))
        return
    if args.child_ranks:
        print(json.dumps(serve_ranks(json.loads(args.child_ranks))))
        return
    if "tokens" in args.suites:
        rows = measure(args)
        notes = [
            f"Median of {args.repeats} fresh processes per row (round-robin); batch size "
            f"{args.batch_size}, seq_len {args.seq_len}, masks "
            f"{'on' if args.masks else 'off'}, shuffle on, one pass = one epoch.",
            "to first batch = build + first next(), timed inside the child after its "
            "imports; the page cache is warm (the corpus was written or read before), so "
            "shard headers and first windows come from memory.",
            "raw = np.load(mmap_mode='r') per shard + a full numpy permutation of the "
            "windows + slicing the first batch.",
        ]
        emit(args, "Start-up: time to first batch", rows, COLUMNS, notes)
    tables = run_scale(args)
    if tables:
        notes = [f"Medians of {args.repeats} round-robin repeat(s).", *SCALE_NOTES]
        notes += ["storage.trust_catalog = true in every config."] if args.trust_catalog else []
        notes += RANK_NOTES if "ranks" in args.suites else []
        emit_tables(args, args.title, tables, notes)


if __name__ == "__main__":
    main()
