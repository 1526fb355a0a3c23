"""Open files, memory and time of ``inspect``, ``docs``, ``validate`` over many shards (issue 31).

Each command runs in a fresh interpreter under a soft open-file limit (``--file-limit``,
default 1024: a common default of ``ulimit -n``) over a folder of ``N`` tiny shards (12
tokens, two documents each; Megatron: a ``.bin`` and an ``.idx`` per shard). A row reports
whether the command succeeded (``ok``: 1, or 0 when it failed, e.g. with ``EMFILE``), its
wall time (interpreter start to exit), its peak resident memory, and the most file
descriptors it held at once (``/proc/PID/fd`` sampled every 5 ms: a lower bound).

The commands: ``inspect DIR --json`` (document counts from the index, or at ``--eos``),
``docs DIR --start 2N-3`` (the last three documents: every shard before them is opened) and
``validate DIR --eos 0``. Compare two trees with ``before_after.py`` (``--key
format,shards,command``).

Example:
    python benchmarks/cli_open_files.py --shards 1e3,1e4 --repeats 3
"""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from _common import emit, median, parse_sizes, str_list

COMMANDS = {
    "inspect": lambda folder, n: ["inspect", folder, "--eos", "0", "--json"],
    "docs": lambda folder, n: ["docs", folder, "--eos", "0", "--start", str(2 * n - 3)],
    "validate": lambda folder, n: ["validate", folder, "--eos", "0"],
}
"""Command name → its arguments over a folder of ``n`` shards."""


def ensure_folder(data_dir: Path, fmt: str, count: int) -> Path:
    """A folder of ``count`` tiny shards of ``fmt`` (``megatron`` or ``numpy``), reused."""
    folder = data_dir / f"tiny-{fmt}-{count}"
    done = folder / ".complete"
    if done.exists():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    from streamload.formats.megatron.megatron import MegatronWriter

    for i in range(count):
        tokens = ((np.arange(12) + i) % 97 + 1).astype(np.uint16)
        tokens[[3, 11]] = 0
        if fmt == "numpy":
            np.save(folder / f"part_{i:06d}.npy", tokens)
            continue
        with MegatronWriter(folder / f"part_{i:06d}", tokens.dtype) as writer:
            writer.add_document(tokens[:4], lengths=[4])
            writer.add_document(tokens[4:], lengths=[8])
    done.touch()
    return folder


def run_command(argv: Sequence[str], file_limit: int) -> dict[str, Any]:
    """``python -m streamload argv...`` under ``file_limit``: ok, seconds, MiB, most fds."""

    def limit() -> None:
        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        resource.setrlimit(resource.RLIMIT_NOFILE, (file_limit, hard))

    import streamload

    # `-m` puts the working folder first on sys.path: run in the tree this script imported
    # (PYTHONPATH, as before_after.py sets it), else the children would import another one.
    tree = Path(streamload.__file__).resolve().parents[1]
    began = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamload", *argv],
        cwd=tree,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        preexec_fn=limit,
    )
    most = 0
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        with contextlib.suppress(OSError):  # exited between the two calls
            most = max(most, len(os.listdir(f"/proc/{proc.pid}/fd")))
        time.sleep(0.005)
    proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
    return {
        "ok": int(proc.returncode == 0),
        "wall_s": time.perf_counter() - began,
        "peak_rss_mib": usage.ru_maxrss / 1024,
        "open_fds_max": most,
    }


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shards", type=parse_sizes, default=[1000, 10_000])
    parser.add_argument("--formats", type=str_list, default=["megatron", "numpy"])
    parser.add_argument("--commands", type=str_list, default=list(COMMANDS))
    parser.add_argument("--file-limit", type=int, default=1024, help="soft RLIMIT_NOFILE")
    parser.add_argument("--data-dir", default="/tmp/streamload-bench", help="shard cache folder")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", action=argparse.BooleanOptionalAction, default=False)
    parser.add_argument("--record", action=argparse.BooleanOptionalAction, default=True)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    rows = []
    for fmt in args.formats:
        for count in args.shards:
            folder = str(ensure_folder(Path(args.data_dir), fmt, count))
            for name in args.commands:
                runs = [
                    run_command(COMMANDS[name](folder, count), args.file_limit)
                    for _ in range(args.repeats)
                ]
                row: dict[str, Any] = {"format": fmt, "shards": count, "command": name}
                row.update({k: median(r[k] for r in runs) for k in runs[0]})
                rows.append(row)
    columns = [
        ("format", "format", ""),
        ("shards", "shards", ","),
        ("command", "command", ""),
        ("ok", "ok", ".0f"),
        ("wall_s", "wall s", ".2f"),
        ("peak_rss_mib", "peak RSS MiB", ".0f"),
        ("open_fds_max", "most open fds", ".0f"),
    ]
    notes = [
        f"soft open-file limit {args.file_limit}; medians of {args.repeats} fresh processes; "
        "ok 0 = the command failed; most open fds sampled every 5 ms (a lower bound)."
    ]
    emit(args, "CLI over many tiny shards: open files, memory, time", rows, columns, notes)


if __name__ == "__main__":
    main()
