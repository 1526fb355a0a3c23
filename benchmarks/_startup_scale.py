"""Start-up at scale: cold and warm first batch over many shards or many documents.

A *case* is (suite, format, mode, size): suite ``shards`` grows the number of tiny shards,
suite ``documents`` the number of documents (``_scale_corpus``). Each repeat runs every case
twice in fresh processes sharing one new, empty ``storage.cache_dir``: **cold** (nothing
cached: the catalog, indices and plans are built) then **warm** (the second start: all of it
cached). The child counts its filesystem operations (``_fsops``) during ``build_loader`` +
the first ``next()``, and reports wall and CPU seconds and its peak RSS.

Growth exponents: per (suite, format, mode) the least-squares slope of ``log(time)`` on
``log(size)`` over the sizes measured (1.0: linear; 0: flat).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import resource
import shlex
import shutil
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from _common import BENCH_DIR, RESULTS_PATH, Column, machine_info, markdown_table, median, run_child
from _fsops import Syscalls, install, metadata_ops
from _scale_corpus import (
    DOC_FORMATS,
    EOS,
    PAD,
    VOCAB,
    ensure_documents,
    ensure_shards,
    source_entry,
)

__all__ = [
    "MODES",
    "SCALE_COLUMNS",
    "SLOPE_COLUMNS",
    "emit_tables",
    "growth_rows",
    "measure_scale",
    "measure_start",
    "ops_text",
    "scale_config",
]

MODES = ("concat", "concat+masks", "packed", "padded", "megatron")
"""Mode names of the cases: ``concat+masks`` is concat with ``packing.masks = true``."""


def scale_config(
    fmt: str,
    folder: Path,
    mode: str,
    cache: Path,
    seq_len: int,
    num_samples: int,
    trust_catalog: bool = False,
) -> dict[str, Any]:
    """The loader config of one case (shuffled, one source, every cache under ``cache``);
    ``trust_catalog`` sets ``storage.trust_catalog`` (an error on trees without it)."""
    name = mode.split("+")[0]
    sampling: dict[str, Any] = {"mode": name, "shuffle": True}
    config: dict[str, Any] = {
        "seq_len": seq_len,
        "seed": 1234,
        "eos_token_id": EOS,
        "vocab_size": VOCAB,
        "sources": [source_entry(fmt, folder)],
        "sampling": sampling,
        "packing": {"masks": mode == "concat+masks"},
        "storage": {"cache_dir": str(cache)},
    }
    if trust_catalog:  # only when asked: older trees refuse the key
        config["storage"]["trust_catalog"] = True
    if name in ("packed", "padded"):
        config["pad_token_id"] = PAD
    if name == "megatron":  # megatron-core's arguments: a sample count, an index cache folder
        sampling.update(num_samples=num_samples, cache_dir=str(cache / "megatron"))
    return config


def measure_start(spec: dict[str, Any]) -> dict[str, Any]:
    """In a fresh process: count file operations, build the loader, take one batch."""
    counter = install(spec["data_root"], spec["cache_root"])
    import streamload
    import streamload.loader

    with Syscalls(counter) if spec.get("strace") else contextlib.nullcontext() as calls:
        counter.reset()
        cpu0, wall0 = time.process_time(), time.perf_counter()
        loader = streamload.build_loader(spec["config"], batch_size=spec["batch_size"])
        built = time.perf_counter()
        batch = next(iter(loader))
        wall1, cpu1 = time.perf_counter(), time.process_time()
        counter.active = False
    assert batch["input_ids"].shape[0] == spec["batch_size"]
    loader._close()  # no public close() on main; stop before exit
    return {
        "build_s": built - wall0,
        "first_next_s": wall1 - built,
        "wall_s": wall1 - wall0,
        "cpu_s": cpu1 - cpu0,
        "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "ops": counter.snapshot(),
        "written": counter.written(),
        "syscalls": calls.counts if calls is not None else {},
        "streamload": streamload.__file__,
    }


def _cases(args: Any) -> list[dict[str, Any]]:
    out = []
    for suite, sizes, formats, modes in (
        ("shards", args.shards, args.shard_formats, args.shard_modes),
        ("documents", args.documents, args.doc_formats, args.doc_modes),
    ):
        if suite not in args.suites:
            continue
        out += [
            {"suite": suite, "format": f, "mode": m, "size": n}
            for f in formats
            for m in modes
            for n in sizes
            if m != "megatron" or f in DOC_FORMATS  # its samples need a document index
        ]
    return out


def _corpus(args: Any, case: dict[str, Any]) -> Path:
    ensure = ensure_shards if case["suite"] == "shards" else ensure_documents
    return ensure(args.data_dir, case["format"], case["size"])


def _run(
    args: Any, case: dict[str, Any], folder: Path, cache: Path, strace: bool = False
) -> dict[str, Any]:
    config = scale_config(
        case["format"], folder, case["mode"], cache, args.seq_len, 10_000, args.trust_catalog
    )
    spec = {
        "config": config,
        "batch_size": args.batch_size,
        "data_root": str(folder),
        "cache_root": str(cache),
        "strace": strace,
    }
    run = run_child([args.script, "--child-start", json.dumps(spec)], timeout=args.timeout)
    return {**(run.result or {}), "process_s": run.seconds}


def measure_scale(args: Any) -> list[dict[str, Any]]:
    """Per case, medians over the repeats of its cold and its warm start (round-robin)."""
    cases = _cases(args)
    folders = [_corpus(args, case) for case in cases]
    runs: dict[int, dict[str, list[dict[str, Any]]]] = {}
    for rep in range(args.repeats):
        for i, (case, folder) in enumerate(zip(cases, folders, strict=True)):
            cache = Path(tempfile.mkdtemp(prefix="cache-", dir=args.data_dir))
            try:
                phases = ["cold", "warm"] + (["strace"] if args.strace and rep == 0 else [])
                for phase in phases:
                    result = _run(args, case, folder, cache, strace=phase == "strace")
                    runs.setdefault(i, {}).setdefault(phase, []).append(result)
                    print(
                        f"[{rep + 1}/{args.repeats}] {case['suite']} {case['format']} "
                        f"{case['mode']} {case['size']:.0e} {phase}: {result['wall_s']:.2f} s "
                        f"({result['cpu_s']:.2f} s CPU)",
                        file=sys.stderr,
                    )
            finally:
                shutil.rmtree(cache, ignore_errors=True)
    return [_row(case, runs[i]) for i, case in enumerate(cases)]


def _row(case: dict[str, Any], phases: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    row: dict[str, Any] = dict(case)
    traced = phases.pop("strace", None)
    if traced:
        calls = traced[0]["syscalls"]
        row["warm_data_syscalls"] = sum(calls.get("data", {}).values())
        row["warm_dirents"] = sum(calls.get("dirents", {}).values())
        row["warm_syscalls"] = calls
    for phase, results in phases.items():
        for key in ("wall_s", "cpu_s", "build_s", "first_next_s", "rss_mib"):
            row[f"{phase}_{key}"] = median(r[key] for r in results)
        last = results[-1]["ops"]  # counts are deterministic: the last repeat's
        row[f"{phase}_data_meta"] = metadata_ops(last, ("data",))
        row[f"{phase}_cache_meta"] = metadata_ops(last, ("cache",))
        row[f"{phase}_data_ops"] = ops_text(last.get("data", {}))
        row[f"{phase}_ops"] = last
    return row


def ops_text(kinds: dict[str, int]) -> str:
    """``{"stat": 2000, "open": 1000}`` → ``"open 1000, stat 2000"`` (empty: ``-``)."""
    return ", ".join(f"{k} {v}" for k, v in sorted(kinds.items())) or "-"


def _slope(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of log(y) on log(x) (NaN with fewer than two usable points)."""
    pts = [(math.log(x), math.log(y)) for x, y in points if x > 0 and y > 0]
    if len(pts) < 2:
        return float("nan")
    mx = sum(x for x, _ in pts) / len(pts)
    my = sum(y for _, y in pts) / len(pts)
    var = sum((x - mx) ** 2 for x, _ in pts)
    return sum((x - mx) * (y - my) for x, y in pts) / var if var else float("nan")


def growth_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (suite, format, mode): the growth exponents of time, CPU and operations."""
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault((row["suite"], row["format"], row["mode"]), []).append(row)
    out = []
    for (suite, fmt, mode), members in groups.items():
        sizes = sorted({r["size"] for r in members})
        out_row: dict[str, Any] = {"suite": suite, "format": fmt, "mode": mode}
        out_row["sizes"] = "–".join(f"{s:.0e}" for s in (sizes[0], sizes[-1]))
        for key in ("warm_wall_s", "warm_cpu_s", "cold_wall_s", "cold_cpu_s", "warm_data_meta"):
            out_row[f"k_{key}"] = _slope([(r["size"], r[key]) for r in members])
        out.append(out_row)
    return out


def _tree_commit(tree: str) -> str:
    """The tree's commit (``+dirty`` when its ``streamload/`` is edited), else ``unknown``."""
    import subprocess

    def git(*argv: str) -> str:
        done = subprocess.run(["git", "-C", tree, *argv], capture_output=True, text=True)
        return done.stdout.strip() if done.returncode == 0 else ""

    head = git("rev-parse", "--short", "HEAD") or "unknown commit"
    return head + ("+dirty" if git("status", "--porcelain", "--", "streamload") else "")


def emit_tables(
    args: argparse.Namespace,
    title: str,
    tables: Sequence[tuple[str, Sequence[Mapping[str, Any]], Sequence[Column]]],
    notes: Sequence[str] = (),
) -> None:
    """Like :func:`emit` for several tables under one title: one section in RESULTS.md, one
    JSON object (each row tagged with its table's ``table`` name)."""
    machine = machine_info()
    origin = str(machine.get("streamload", ""))
    if "imported from " in origin:  # --repo: name the tree's commit too
        tree = origin.split("imported from ", 1)[1].rstrip(")")
        machine["streamload"] = f"{origin[:-1]}, {_tree_commit(tree)})"
    command = "python " + shlex.join(
        [os.path.relpath(sys.argv[0], BENCH_DIR.parent), *sys.argv[1:]]
    )
    parts = [f"### {name}\n\n{markdown_table(rows, columns)}" for name, rows, columns in tables]
    if args.json:
        rows = [{"table": name, **row} for name, table_rows, _ in tables for row in table_rows]
        out = {"title": title, "command": command, "machine": machine, "rows": rows,
               "notes": list(notes)}  # fmt: skip
        print(json.dumps(out, indent=2, default=str))
    else:
        print(f"{title}\n\n" + "\n\n".join(parts) + "\n")
        for note in notes:
            print(f"* {note}")
    if not args.record:
        return
    described = ", ".join(f"{k} {v}" for k, v in machine.items())
    section = [f"\n## {title}\n", f"`{command}`\n", f"Machine: {described}.\n"]
    section += [part + "\n" for part in parts] + [f"* {note}" for note in notes]
    with open(RESULTS_PATH, "a", encoding="utf-8") as fh:
        fh.write("\n".join(section) + "\n")


SCALE_COLUMNS = [
    ("suite", "grows", ""),
    ("format", "format", ""),
    ("mode", "mode", ""),
    ("size", "shards / documents", ".0e"),
    ("cold_wall_s", "cold (s)", ".2f"),
    ("cold_cpu_s", "cold CPU (s)", ".2f"),
    ("warm_wall_s", "warm (s)", ".3f"),
    ("warm_cpu_s", "warm CPU (s)", ".3f"),
    ("warm_rss_mib", "warm RSS (MiB)", ".0f"),
    ("cold_data_meta", "cold corpus meta ops", "d"),
    ("warm_data_meta", "warm corpus meta ops", "d"),
    ("warm_cache_meta", "warm cache meta ops", "d"),
    ("warm_data_syscalls", "warm corpus file syscalls (strace)", "d"),
    ("warm_dirents", "warm getdents64", "d"),
    ("warm_data_ops", "warm corpus ops by kind", ""),
]

SLOPE_COLUMNS = [
    ("suite", "grows", ""),
    ("format", "format", ""),
    ("mode", "mode", ""),
    ("sizes", "over", ""),
    ("k_warm_wall_s", "k warm", ".2f"),
    ("k_warm_cpu_s", "k warm CPU", ".2f"),
    ("k_cold_wall_s", "k cold", ".2f"),
    ("k_cold_cpu_s", "k cold CPU", ".2f"),
    ("k_warm_data_meta", "k warm corpus meta ops", ".2f"),
]
