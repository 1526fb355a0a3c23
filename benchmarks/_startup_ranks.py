"""A simulated many-rank start: N ranks on one machine sharing one cache folder.

One fresh *rank server* process installs the operation counter (``_fsops``) and imports
streamload once; it then forks the ranks, at most ``concurrency`` alive at a time (a rank
starts as soon as another ends, so the first ``concurrency`` start together on the empty
cache, as a job's ranks do). Each rank sets ``RANK``, ``WORLD_SIZE`` and ``LOCAL_RANK``,
builds its loader with that rank and world size (``build_loader(rank=, world_size=)``: the
loader does not read these variables itself), takes one batch, and reports its counts, wall
and CPU seconds, and which cache folders it wrote (a rank that wrote into ``catalog/`` built
the catalog; into ``plans/`` or ``megatron/``, the indices). Forking after the imports keeps
a rank's cost to its start-up: a real rank pays the interpreter and imports too (~1-2 s).

Phases: ``cold`` (the cache folder empty) then ``warm`` (a second job start on the same
cache).
"""

from __future__ import annotations

import gc
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from _common import run_child
from _fsops import install, metadata_ops
from _scale_corpus import ensure_shards
from _startup_scale import scale_config

__all__ = ["RANK_COLUMNS", "RANK_NOTES", "measure_ranks", "serve_ranks"]

RANK_NOTES = [
    "Ranks: one server process imports streamload once and forks the ranks, at most "
    "--rank-concurrency alive (the next starts when one ends); each sets RANK, WORLD_SIZE, "
    "LOCAL_RANK, calls build_loader(rank=, world_size=) with batch size 1 and takes one "
    "batch. cold = the shared cache folder empty at the first rank; warm = a second job "
    "start on it. Times are wall and CPU of build + first batch inside each rank; with 50 "
    "ranks on 2 cores, wall is mostly waiting for a core. 'published' = ranks that renamed a "
    "file into that cache folder (an entry they built: written under a temporary name, "
    "then renamed; catalog/: the shard catalog; plans/ or megatron/: the indices); 'opened "
    "for writing' also counts lock files; '.' = the cache root.",
]


def _one_rank(counter: Any, spec: dict[str, Any]) -> dict[str, Any]:
    import streamload

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    counter.reset()
    cpu0, wall0 = time.process_time(), time.perf_counter()
    loader = streamload.build_loader(
        spec["config"], batch_size=spec["batch_size"], rank=rank, world_size=world
    )
    next(iter(loader))
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    counter.active = False
    loader._close()
    return {"rank": rank, "wall_s": wall, "cpu_s": cpu, "ops": counter.snapshot(),
            "written": counter.written()}  # fmt: skip


def _fork_rank(counter: Any, spec: dict[str, Any], rank: int, out: Path) -> int:
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:
        os.environ.update(
            RANK=str(rank), WORLD_SIZE=str(spec["world_size"]), LOCAL_RANK=str(rank % 8)
        )
        result = _one_rank(counter, spec)
        (out / f"rank_{rank}.json").write_text(json.dumps(result))
        code = 0
    except BaseException as err:  # reported by the server, never lost
        (out / f"rank_{rank}.json").write_text(json.dumps({"rank": rank, "error": repr(err)}))
    finally:
        os._exit(code)


def serve_ranks(spec: dict[str, Any]) -> dict[str, Any]:
    """In a fresh process: import once, fork every rank (bounded concurrency), collect."""
    # One thread per rank, even when the caller set more: a fork must not inherit a pool.
    os.environ.update(OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    counter = install(spec["data_root"], spec["cache_root"])
    import streamload.loader  # noqa: F401  (imported once, before the forks)

    gc.freeze()  # the forks share the imported objects: no collection copies their pages

    out = Path(spec["out_dir"])
    alive: set[int] = set()
    began = time.perf_counter()
    for rank in range(spec["world_size"]):
        while len(alive) >= spec["concurrency"]:
            alive.discard(os.wait()[0])
        alive.add(_fork_rank(counter, spec, rank, out))
    while alive:
        alive.discard(os.wait()[0])
    ranks = [json.loads((out / f"rank_{r}.json").read_text()) for r in range(spec["world_size"])]
    return {"seconds": time.perf_counter() - began, "ranks": ranks}


def _summary(phase: str, group: str, ranks: list[dict[str, Any]]) -> dict[str, Any]:
    def stats(values: Sequence[float]) -> tuple[float, float]:
        return (statistics.median(values), max(values)) if values else (float("nan"),) * 2

    data = [metadata_ops(r["ops"], ("data",)) for r in ranks]
    cache = [metadata_ops(r["ops"], ("cache",)) for r in ranks]
    row: dict[str, Any] = {"phase": phase, "ranks": group, "count": len(ranks)}
    row["wall_med_s"], row["wall_max_s"] = stats([r["wall_s"] for r in ranks])
    row["cpu_med_s"], row["cpu_max_s"] = stats([r["cpu_s"] for r in ranks])
    row["data_meta_med"], row["data_meta_max"] = stats(data)
    row["cache_meta_med"], row["cache_meta_max"] = stats(cache)
    for kind, column in (("rename", "published"), ("open_write", "opened_for_write")):
        ranks_per_folder: dict[str, int] = {}
        for r in ranks:
            for key in r["written"]:
                folder, _, what = key.rpartition(":")
                if what == kind:
                    ranks_per_folder[folder] = ranks_per_folder.get(folder, 0) + 1
        row[column] = ", ".join(f"{k}: {v}" for k, v in sorted(ranks_per_folder.items()))
        row[column] = row[column] or "none"
    return row


def measure_ranks(args: Any) -> list[dict[str, Any]]:
    """The simulated start, cold then warm: one row for rank 0, one for the others."""
    folder = ensure_shards(args.data_dir, args.rank_format, args.rank_shards)
    cache = Path(tempfile.mkdtemp(prefix="ranks-cache-", dir=args.data_dir))
    rows = []
    try:
        for phase in args.rank_phases:
            out = Path(tempfile.mkdtemp(prefix="ranks-out-", dir=args.data_dir))
            config = scale_config(
                args.rank_format,
                folder,
                args.rank_mode,
                cache,
                args.seq_len,
                10 * args.ranks,
                args.trust_catalog,
            )
            spec = {"config": config, "batch_size": 1, "world_size": args.ranks,
                    "concurrency": args.rank_concurrency, "data_root": str(folder),
                    "cache_root": str(cache), "out_dir": str(out)}  # fmt: skip
            run = run_child([args.script, "--child-ranks", json.dumps(spec)], timeout=args.timeout)
            shutil.rmtree(out, ignore_errors=True)
            ranks = (run.result or {}).get("ranks", [])
            failed = [r for r in ranks if "error" in r]
            if failed:
                raise RuntimeError(f"{len(failed)} rank(s) failed, e.g. {failed[0]}")
            print(f"ranks {phase}: {run.seconds:.1f} s for {len(ranks)} ranks", file=sys.stderr)
            rows.append(_summary(phase, "0", ranks[:1]))
            rows.append(_summary(phase, f"1-{len(ranks) - 1}", ranks[1:]))
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    return rows


RANK_COLUMNS = [
    ("phase", "start", ""),
    ("ranks", "ranks", ""),
    ("count", "n", "d"),
    ("wall_med_s", "wall med (s)", ".3f"),
    ("wall_max_s", "wall max (s)", ".3f"),
    ("cpu_med_s", "CPU med (s)", ".3f"),
    ("data_meta_med", "corpus meta ops med", ".0f"),
    ("data_meta_max", "corpus meta ops max", ".0f"),
    ("cache_meta_med", "cache meta ops med", ".0f"),
    ("cache_meta_max", "cache meta ops max", ".0f"),
    ("published", "ranks that published cache entries (renamed in, by folder)", ""),
    ("opened_for_write", "ranks that opened a cache file for writing", ""),
]
