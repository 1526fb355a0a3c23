"""``streamload docs``: documents ``I .. I+N-1`` in storage order, exactly as stored.

A Megatron document is a ``document_indices`` range (one or more sequences, maybe empty);
``--sequences`` lists Megatron sequences instead. Formats without a document index split
after each ``--eos`` token, else each shard is one document.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from streamload.cli._common import add_data_arguments, catalog_from_args, open_all
from streamload.errors import ConfigError
from streamload.tools.documents import document_bounds, iter_documents

__all__ = ["add_parser", "run"]


def add_parser(sub: Any) -> None:
    """Register the subcommand."""
    p = sub.add_parser("docs", help="print documents in storage order")
    add_data_arguments(p)
    p.add_argument("--start", type=int, default=0, help="first document I")
    p.add_argument("--count", type=int, default=10, help="number of documents N")
    p.add_argument("--eos", type=int, help="EOS id ending documents where there is no index")
    p.add_argument("--sequences", action="store_true", help="Megatron: list sequences")
    p.add_argument("--json", action="store_true", help='print {"documents": [[...], ...]}')
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Print the documents; returns the exit code."""
    if args.start < 0 or args.count < 0:
        raise ConfigError(f"--start {args.start} and --count {args.count} must be >= 0")
    catalog = catalog_from_args(args)
    out: list[list[int]] = []
    skip = args.start
    for shard in open_all(catalog):
        if len(out) == args.count:
            break
        bounds = document_bounds(shard, args.eos, args.sequences)
        n = len(bounds) - 1
        if skip >= n:
            skip -= n
            continue
        for doc in iter_documents(shard, bounds, skip):
            out.append([int(t) for t in doc])
            if len(out) == args.count:
                break
        skip = 0
    if args.json:
        print(json.dumps({"documents": out}))
    else:
        for i, tokens in enumerate(out, start=args.start):
            print(f"{i}: {' '.join(map(str, tokens))}")
    return 0
