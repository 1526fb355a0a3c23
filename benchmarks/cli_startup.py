"""Start-up of the command line and of the imports: wall time of fresh processes (issue 30).

Each command runs in a fresh interpreter and is timed from the parent (interpreter start,
imports, the command, exit): ``streamload --help`` (as ``python -m streamload --help``, what
the console script runs), ``streamload plan --help``, ``python -c "import streamload"`` and
``python -c "import streamload.loader"``; one more row times, inside a process that imported
torch and torchdata already, what ``import streamload.loader`` adds. With ``--before-ref REF``
the same commands also run on the package as committed at ``REF`` (extracted with ``git
archive`` into a temporary folder), interleaved with this checkout's runs (command by command,
before then after, one round per repeat), so both see the same load; the table shows the
medians.

Both trees have their bytecode written by an untimed first run of every command (so neither
pays for compiling its sources; ``PYTHONDONTWRITEBYTECODE`` is dropped for the children).

Example:
    python benchmarks/cli_startup.py --before-ref f11e48b --repeats 7
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from _common import BENCH_DIR, emit, median

REPO = BENCH_DIR.parent
_BEYOND_TORCH = (
    "import time; import torch, torchdata.nodes; t = time.perf_counter(); "
    "import streamload.loader; print(time.perf_counter() - t)"
)
COMMANDS = {
    "streamload --help": ["-m", "streamload", "--help"],
    "streamload plan --help": ["-m", "streamload", "plan", "--help"],
    'python -c "import streamload"': ["-c", "import streamload"],
    'python -c "import streamload.loader"': ["-c", "import streamload.loader"],
    "import streamload.loader after torch, torchdata (in-process)": ["-c", _BEYOND_TORCH],
}
"""Row label → the interpreter's arguments. The last row is timed inside the child (what
streamload's own imports add to a process that has torch already): the seconds it prints."""


def extract(ref: str, into: Path) -> Path:
    """The ``streamload`` package as committed at ``ref``, written under ``into``."""
    archive = into / "tree.tar"
    with open(archive, "wb") as fh:
        command = ["git", "-C", str(REPO), "archive", ref, "streamload"]
        subprocess.run(command, stdout=fh, check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(into / "tree", filter="data")
    return into / "tree"


def time_once(tree: Path, argv: Sequence[str]) -> float:
    """Seconds of one fresh ``python argv...`` that imports streamload from ``tree`` (the
    seconds the child printed, when it printed a number).

    Raises:
        RuntimeError: the command failed.
    """
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = str(tree)
    began = time.perf_counter()
    done = subprocess.run(
        [sys.executable, *argv], cwd=tree, env=env, capture_output=True, text=True, check=False
    )
    seconds = time.perf_counter() - began
    if done.returncode != 0:
        raise RuntimeError(f"{argv} in {tree} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    if argv[-1] == _BEYOND_TORCH:
        return float(done.stdout.split()[-1])
    return seconds


def measure(trees: dict[str, Path], repeats: int) -> list[dict[str, Any]]:
    """Median wall time per command and tree, interleaved round by round."""
    for tree in trees.values():  # untimed: writes each tree's bytecode
        for argv in COMMANDS.values():
            time_once(tree, argv)
    times: dict[tuple[str, str], list[float]] = {}
    for rep in range(repeats):
        for label, argv in COMMANDS.items():
            for name, tree in trees.items():
                seconds = time_once(tree, argv)
                times.setdefault((label, name), []).append(seconds)
                print(f"[{rep + 1}/{repeats}] {name} {label}: {seconds:.3f} s", file=sys.stderr)
    rows = []
    for label in COMMANDS:
        row: dict[str, Any] = {"command": label, "runs": repeats}
        for name in trees:
            row[f"{name}_s"] = median(times[(label, name)])
            row[f"{name}_max_s"] = max(times[(label, name)])
        if "before" in trees:
            row["ratio"] = row["after_s"] / row["before_s"]
        rows.append(row)
    return rows


COLUMNS = [
    ("command", "command", ""),
    ("runs", "runs", "d"),
    ("before_s", "before (s)", ".3f"),
    ("before_max_s", "before worst (s)", ".3f"),
    ("after_s", "after (s)", ".3f"),
    ("after_max_s", "after worst (s)", ".3f"),
    ("ratio", "after / before", ".2f"),
]


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--before-ref", help="git ref to compare with (default: none)")
    parser.add_argument("--repeats", type=int, default=7, help="fresh processes per cell")
    parser.add_argument(
        "--json", action=argparse.BooleanOptionalAction, default=False, help="print JSON"
    )
    parser.add_argument(
        "--record",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="append the results to benchmarks/RESULTS.md",
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    # "after" is this checkout: the machine line names its commit, not an installed copy
    sys.path.insert(0, str(REPO))
    with tempfile.TemporaryDirectory(prefix="streamload-cli-startup-") as tmp:
        trees = {"before": extract(args.before_ref, Path(tmp))} if args.before_ref else {}
        trees["after"] = REPO
        rows = measure(trees, args.repeats)
    notes = [
        f"Median (and worst) of {args.repeats} fresh processes per cell, timed from the parent: "
        "interpreter start, imports, the command, exit (the in-process row: from after "
        "`import torch, torchdata.nodes` to after `import streamload.loader`). Runs "
        "interleaved command by command, before then after, one round per repeat; bytecode "
        "written by an untimed first run.",
        f"before = streamload as committed at {args.before_ref or '-'}; after = this checkout "
        "(its commit in the machine line).",
    ]
    emit(args, "CLI and import start-up (issue 30)", rows, COLUMNS, notes)


if __name__ == "__main__":
    main()
