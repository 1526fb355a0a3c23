"""Shared benchmark helpers: the synthetic corpus, the machine, timing, tables, RESULTS.md.

The corpus is a cache folder of NPY shards of ``uint32`` tokens: documents of log-normal
length (median ~500 tokens), each ending with EOS (id 0), token ids drawn uniformly from
``[1, VOCAB_SIZE)``. Shard ``i`` depends only on ``(seed, i)``, so a corpus of ``N`` tokens is
the first ``ceil(N / shard_tokens)`` shards of one folder and a larger corpus reuses the
shards of a smaller one. Shards are written to a temporary name and renamed, so an interrupted
run never leaves a half-written shard behind.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "BENCH_DIR",
    "EOS_ID",
    "RESULTS_PATH",
    "VOCAB_SIZE",
    "ChildRun",
    "Column",
    "add_common_args",
    "add_loader_args",
    "bench_config",
    "bench_parser",
    "emit",
    "ensure_corpus",
    "int_list",
    "machine_info",
    "median",
    "parse_sizes",
    "run_child",
    "str_list",
    "worker_label",
]

BENCH_DIR = Path(__file__).resolve().parent
RESULTS_PATH = BENCH_DIR / "RESULTS.md"
EOS_ID = 0
VOCAB_SIZE = 128_256
"""Llama-3 vocabulary: ids need ``uint32``."""
MEDIAN_DOC_TOKENS = 500
DOC_SIGMA = 1.0
"""Log-normal sigma of document lengths: median 500, mean ~825, 1% above ~5,100 tokens."""

Column = tuple[str, str, str]
"""(row key, header, format spec) of one table column."""


def add_common_args(parser: argparse.ArgumentParser) -> None:
    """Flags every benchmark shares: corpus cache, repeats, output."""
    parser.add_argument(
        "--data-dir", default="/tmp/streamload-bench", help="corpus cache folder (reused)"
    )
    parser.add_argument("--shard-tokens", type=int, default=50_000_000, help="tokens per NPY shard")
    parser.add_argument("--seq-len", type=int, default=2048, help="tokens per sample input")
    parser.add_argument("--repeats", type=int, default=3, help="repeats per measurement")
    parser.add_argument(
        "--json", action=argparse.BooleanOptionalAction, default=False, help="print JSON"
    )
    parser.add_argument(
        "--record",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="append the results to benchmarks/RESULTS.md",
    )


def int_list(text: str) -> list[int]:
    """``"0,2"`` → ``[0, 2]``."""
    return [int(part) for part in text.split(",") if part.strip()]


def str_list(text: str) -> list[str]:
    """``"thread,process"`` → ``["thread", "process"]``."""
    return [part.strip() for part in text.split(",") if part.strip()]


def on_off_list(text: str) -> list[bool]:
    """``"off,on"`` → ``[False, True]`` (anything but on/off is refused, not read as off)."""
    values = str_list(text)
    if not set(values) <= {"on", "off"}:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a comma-separated list of on/off")
    return [value == "on" for value in values]


def parse_sizes(text: str) -> list[int]:
    """``"1e8,1e9"`` → ``[100000000, 1000000000]``."""
    return [int(float(part)) for part in text.split(",") if part.strip()]


def _write_shard(path: Path, index: int, num_tokens: int, seed: int) -> None:
    rng = np.random.default_rng([seed, index])
    tokens = rng.integers(1, VOCAB_SIZE, num_tokens, dtype=np.uint32)
    # Draw more lengths than needed (mean ~825 > median 500), keep those that fit.
    draws = max(16, 2 * num_tokens // MEDIAN_DOC_TOKENS)
    lengths = rng.lognormal(math.log(MEDIAN_DOC_TOKENS), DOC_SIGMA, draws)
    ends = np.cumsum(np.maximum(1, lengths.astype(np.int64)))
    tokens[ends[ends <= num_tokens] - 1] = EOS_ID
    tokens[-1] = EOS_ID  # the last document of a shard is cut short but still ends in EOS
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as fh:
        np.save(fh, tokens)
    os.replace(tmp, path)


def ensure_corpus(
    data_dir: str | os.PathLike[str], num_tokens: int, shard_tokens: int, seed: int = 0
) -> list[str]:
    """Write the missing shards of a corpus of at least ``num_tokens`` tokens; list its shards.

    Args:
        data_dir: Cache folder.
        num_tokens: Tokens wanted (rounded up to whole shards).
        shard_tokens: Tokens per shard (part of the folder name).
        seed: Corpus seed (part of the folder name).

    Returns:
        The shard paths, in order.
    """
    folder = Path(data_dir) / f"u32-shard{shard_tokens}-seed{seed}"
    folder.mkdir(parents=True, exist_ok=True)
    count = max(1, math.ceil(num_tokens / shard_tokens))
    paths = [folder / f"shard_{i:05d}.npy" for i in range(count)]
    missing = [i for i, p in enumerate(paths) if not p.exists()]
    if missing:
        start = time.perf_counter()
        for i in missing:
            _write_shard(paths[i], i, shard_tokens, seed)
        took = time.perf_counter() - start
        print(
            f"wrote {len(missing)} shard(s) of {shard_tokens} tokens in {took:.1f} s",
            file=sys.stderr,
        )
    return [str(p) for p in paths]


def ensure_loss_masks(paths: Sequence[str], pattern: str = "spans") -> list[str]:
    """A loss-mask file per shard in a folder beside the corpus (written once, seeded), one
    byte per token. ``spans``: what SFT data holds, runs of untrained (prompt) and trained
    (answer) tokens, geometric with means 100 and 400; ``random``: each token untrained with
    probability 0.1 (a worst case: the masking's branches are unpredictable)."""
    out = []
    for i, path in enumerate(paths):
        folder = Path(path).parent
        mask = folder.with_name(f"{folder.name}-masks-{pattern}") / Path(path).name
        if not mask.exists():
            mask.parent.mkdir(parents=True, exist_ok=True)
            count = int(np.load(path, mmap_mode="r").shape[0])
            rng = np.random.default_rng(i)
            if pattern == "random":
                flags = rng.random(count) >= 0.1
            else:
                runs = rng.geometric(np.tile([1 / 100, 1 / 400], count // 250 + 1))
                flags = np.repeat(np.arange(runs.size) % 2 == 1, runs)[:count]
            flags.astype(np.uint8).tofile(mask)
        out.append(str(mask))
    return out


def bench_config(
    paths: Sequence[str],
    *,
    seq_len: int,
    masks: bool = False,
    num_samples: int | None = None,
    vocab_size: int | None = None,
) -> dict[str, Any]:
    """A streamload config dict over the corpus shards (shuffled, one source)."""
    sampling: dict[str, Any] = {"shuffle": True}
    if num_samples is not None:
        sampling["num_samples"] = num_samples
    config: dict[str, Any] = {
        "seq_len": seq_len,
        "seed": 1234,
        "eos_token_id": EOS_ID,
        "sources": [{"name": "bench", "path": list(paths)}],
        "sampling": sampling,
        "packing": {"masks": masks},
    }
    if vocab_size is not None:
        config["vocab_size"] = vocab_size
    return config


def median(values: Iterable[float]) -> float:
    """Median of the values (NaN when empty)."""
    data = list(values)
    return statistics.median(data) if data else float("nan")


@dataclass(frozen=True)
class ChildRun:
    """One fresh interpreter run by :func:`run_child`."""

    seconds: float
    """Wall time of the whole process: interpreter start, imports, work, exit."""
    result: dict[str, Any] | None
    """The JSON object its last stdout line printed (``None`` when it printed nothing)."""


def run_child(
    argv: Sequence[str],
    timeout: float = 600,
    watch: Callable[[int], None] | None = None,
    interval: float = 0.05,
) -> ChildRun:
    """Run ``python argv...`` in a fresh interpreter and time it.

    Args:
        argv: Script and arguments.
        timeout: Seconds before the child is killed and this raises.
        watch: Called with the child's pid right after it starts and then every
            ``interval`` seconds while it runs (e.g. to sample its memory).
        interval: Period of ``watch``.

    Raises:
        RuntimeError: the child failed or timed out (with the end of its stderr).
    """
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        began = time.perf_counter()
        proc = subprocess.Popen([sys.executable, *argv], stdout=out, stderr=err, text=True)
        while True:
            if watch is not None:
                watch(proc.pid)
            left = began + timeout - time.perf_counter()
            try:  # wait() returns as soon as the child exits: the wall time stays exact
                proc.wait(timeout=max(0.0, min(left, interval) if watch else left))
                break
            except subprocess.TimeoutExpired:
                if time.perf_counter() - began >= timeout:
                    proc.kill()
                    proc.wait()
                    break
        seconds = time.perf_counter() - began
        out.seek(0)
        err.seek(0)
        lines, stderr = out.read().strip().splitlines(), err.read()
    if proc.returncode != 0:
        raise RuntimeError(f"child {argv} failed ({proc.returncode}):\n{stderr[-3000:]}")
    return ChildRun(seconds, json.loads(lines[-1]) if lines else None)


def worker_label(num_workers: int, worker_type: str) -> str:
    """The ``workers`` cell of a table row: ``"0"`` or e.g. ``"2 process"``."""
    return f"{num_workers} {worker_type}" if num_workers else "0"


def bench_parser(doc: str | None, worker_types: Sequence[str]) -> argparse.ArgumentParser:
    """A parser described by the script docstring's first line, with the common and the
    loader flags (``--batch-size``, ``--num-workers``, ``--worker-types``)."""
    parser = argparse.ArgumentParser(description=(doc or "").split("\n")[0])
    add_common_args(parser)
    add_loader_args(parser, worker_types)
    return parser


def add_loader_args(parser: argparse.ArgumentParser, worker_types: Sequence[str]) -> None:
    """``--batch-size``, ``--num-workers`` and ``--worker-types`` (default ``worker_types``)."""
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--num-workers", type=int_list, default=[0, 2])
    parser.add_argument("--worker-types", type=str_list, default=list(worker_types))


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _ram_gib() -> float:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) / (1 << 20)
    except OSError:
        pass
    return float("nan")


def _streamload_origin(package_dir: Path) -> str:
    """The commit of the imported streamload (``+dirty`` if edited), or its folder."""
    if package_dir != BENCH_DIR.parent / "streamload":
        return f"imported from {package_dir.parent}"
    try:
        head = subprocess.run(
            ["git", "-C", str(BENCH_DIR), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=False,
        )
        dirty = subprocess.run(
            ["git", "-C", str(BENCH_DIR), "status", "--porcelain", "--", str(package_dir)],
            capture_output=True,
            text=True,
            check=False,
        )
    except OSError:
        return "unknown commit"
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def machine_info() -> dict[str, Any]:
    """CPU, cores, RAM, versions, date, load: what a reader needs to weigh the numbers."""
    import torch
    import torchdata

    import streamload

    return {
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "ram_gib": round(_ram_gib(), 1),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torchdata": getattr(torchdata, "__version__", "unknown"),
        "numpy": np.__version__,
        "streamload": f"{streamload.__version__} "
        f"({_streamload_origin(Path(streamload.__file__).resolve().parent)})",
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "loadavg_1m": round(os.getloadavg()[0], 2),
    }


def _cell(value: Any, spec: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return format(value, spec) if spec else str(value)


def markdown_table(rows: Sequence[Mapping[str, Any]], columns: Sequence[Column]) -> str:
    """Rows as a Markdown table (``-`` for missing cells)."""
    lines = [
        "| " + " | ".join(h for _, h, _ in columns) + " |",
        "|" + "|".join("---" for _ in columns) + "|",
    ]
    for row in rows:
        lines.append("| " + " | ".join(_cell(row.get(k), f) for k, _, f in columns) + " |")
    return "\n".join(lines)


def emit(
    args: argparse.Namespace,
    title: str,
    rows: Sequence[Mapping[str, Any]],
    columns: Sequence[Column],
    notes: Sequence[str] = (),
    machine: Mapping[str, Any] | None = None,
) -> None:
    """Print the table (or JSON) and append command, machine, table and notes to RESULTS.md."""
    machine = dict(machine or machine_info())
    command = "python " + shlex.join(
        [os.path.relpath(sys.argv[0], BENCH_DIR.parent), *sys.argv[1:]]
    )
    table = markdown_table(rows, columns)
    if args.json:
        print(
            json.dumps(
                {
                    "title": title,
                    "command": command,
                    "machine": machine,
                    "rows": rows,
                    "notes": list(notes),
                },
                indent=2,
                default=str,
            )
        )
    else:
        print(f"{title}\n\n{table}\n")
        for note in notes:
            print(f"* {note}")
    if not args.record:
        return
    described = ", ".join(f"{k} {v}" for k, v in machine.items())
    section = [f"\n## {title}\n", f"`{command}`\n", f"Machine: {described}.\n", table, ""]
    section += [f"* {note}" for note in notes]
    with open(RESULTS_PATH, "a", encoding="utf-8") as fh:
        fh.write("\n".join(section) + "\n")
