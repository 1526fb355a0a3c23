"""One benchmark script run against two streamload trees, interleaved: before and after a change.

Runs ``SCRIPT ARGS --json --no-record`` alternately with ``PYTHONPATH`` at the ``--before``
and the ``--after`` tree (``--rounds`` times each, before first, so drift in the machine's load
hits both alike), takes the median of each numeric column per row, and prints (and with
``--record`` appends to RESULTS.md) the two medians and their ratio, after / before.

Example::

    git worktree add /tmp/before f11e48b
    python benchmarks/before_after.py --before /tmp/before --after . \\
        --script benchmarks/throughput.py --key batch,workers,masks \\
        -- --corpus-tokens 2e7 --tokens 8e6 --no-peer
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from _common import RESULTS_PATH, machine_info


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--before", required=True, help="the tree of the change's parent")
    parser.add_argument("--after", required=True, help="the tree with the change")
    parser.add_argument("--script", required=True, help="a benchmark script with --json")
    parser.add_argument("--key", required=True, help="columns naming a row, comma-separated")
    parser.add_argument("--columns", help="numeric columns to compare (default: every one)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--title", default="before / after")
    parser.add_argument("--record", action=argparse.BooleanOptionalAction, default=False)
    parser.add_argument("rest", nargs=argparse.REMAINDER, help="-- then the script's arguments")
    return parser.parse_args(argv)


def run_once(tree: str, script: str, rest: list[str]) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(Path(tree).resolve())}
    cmd = [sys.executable, script, *rest, "--json", "--no-record"]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout
    return json.loads(out[out.index("{") :])


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    rest = [a for a in args.rest if a != "--"]
    keys = args.key.split(",")
    runs: dict[str, list[dict[str, Any]]] = {"before": [], "after": []}
    for _ in range(args.rounds):
        for side in ("before", "after"):
            runs[side].append(run_once(getattr(args, side), args.script, rest))
    table = compare(runs, keys, args.columns.split(",") if args.columns else None)
    command = "python " + " ".join(
        [os.path.relpath(sys.argv[0]), *(sys.argv[1:] if argv is None else argv)]
    )
    machine = ", ".join(f"{k} {v}" for k, v in machine_info().items())
    head = [f"\n## {args.title}\n", f"`{command}`\n", f"Machine: {machine}.\n"]
    origins = {side: runs[side][0]["machine"].get("streamload") for side in runs}
    notes = [
        f"before: streamload {origins['before']}; after: {origins['after']}; medians of "
        f"{args.rounds} interleaved runs of `{args.script}` each (itself the median of its "
        "own repeats); ratio = after / before."
    ]
    text = "\n".join([*head, table, "", *[f"* {n}" for n in notes]]) + "\n"
    print(text)
    if args.record:
        with open(RESULTS_PATH, "a", encoding="utf-8") as fh:
            fh.write(text)


def compare(
    runs: dict[str, list[dict[str, Any]]], keys: list[str], columns: list[str] | None
) -> str:
    """A markdown table: per row and numeric column, the medians and their ratio."""

    def rows_of(side: str) -> dict[tuple[Any, ...], list[dict[str, Any]]]:
        out: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
        for run in runs[side]:
            for row in run["rows"]:
                out.setdefault(tuple(row.get(k) for k in keys), []).append(row)
        return out

    before, after = rows_of("before"), rows_of("after")
    lines = ["| " + " | ".join([*keys, "column", "before", "after", "after / before"]) + " |"]
    lines.append("|" + "---|" * (len(keys) + 4))
    for key in before:
        if key not in after:
            continue
        numeric = [
            c for c, v in before[key][0].items()
            if c not in keys and isinstance(v, (int, float)) and not isinstance(v, bool)
        ]  # fmt: skip
        for column in columns or numeric:
            b = statistics.median(r[column] for r in before[key] if r.get(column) is not None)
            a = statistics.median(r[column] for r in after[key] if r.get(column) is not None)
            ratio = f"{a / b:.2f}" if b else "-"
            cells = [*map(str, key), column, f"{b:.4g}", f"{a:.4g}", ratio]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
