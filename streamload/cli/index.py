"""``streamload index FILE.jsonl``: the Modalities raw JSONL index (``create_raw_index``)."""

from __future__ import annotations

import argparse
from typing import Any

__all__ = ["add_parser", "run"]


def add_parser(sub: Any) -> None:
    """Register the subcommand."""
    p = sub.add_parser("index", help="write the byte-offset index of a JSONL file (Modalities)")
    p.add_argument("jsonl", help="the JSONL file")
    p.add_argument("--index-path", help="output (default: FILE.idx beside it)")
    p.add_argument(
        "--drop-faulty-entries", action="store_true", help="skip lines that are not JSON"
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Write the index; returns the exit code."""
    from streamload.formats.jsonl.index import create_raw_index, read_raw_index

    path = create_raw_index(
        args.jsonl, args.index_path, drop_faulty_entries=args.drop_faulty_entries
    )
    print(f"indexed {len(read_raw_index(path)):,} lines of {args.jsonl} into {path}")
    return 0
