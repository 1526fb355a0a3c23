"""``streamload docs``: documents ``I .. I+N-1`` in storage order, exactly as stored.

A Megatron document is a ``document_indices`` range (one or more sequences, maybe empty);
``--sequences`` lists Megatron sequences instead. Formats without a document index split
after each ``--eos`` token, else each shard is one document. Each document's id is shown
where the format records one (Dolma's CSV ``id``; an Arrow or Parquet ``id`` column, or the
one ``--id-column`` names), read for the printed documents only.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from streamload.cli._common import add_data_arguments, catalog_from_args, open_all
from streamload.errors import ConfigError
from streamload.tools.documents import document_bounds, document_metadata, iter_documents

__all__ = ["add_parser", "run"]


def add_parser(sub: Any) -> None:
    """Register the subcommand."""
    p = sub.add_parser("docs", help="print documents in storage order")
    add_data_arguments(p)
    p.add_argument("--start", type=int, default=0, help="first document I")
    p.add_argument("--count", type=int, default=10, help="number of documents N")
    p.add_argument("--eos", type=int, help="EOS id ending documents where there is no index")
    p.add_argument("--sequences", action="store_true", help="Megatron: list sequences")
    p.add_argument(
        "--id-column", help="Arrow/Parquet: the column of document ids (default: id, if any)"
    )
    p.add_argument(
        "--json", action="store_true", help='print {"documents": [[...], ...], "ids": [...]}'
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Print the documents; returns the exit code."""
    if args.start < 0 or args.count < 0:
        raise ConfigError(f"--start {args.start} and --count {args.count} must be >= 0")
    catalog = catalog_from_args(args)
    out: list[list[int]] = []
    ids: list[Any] = []
    skip = args.start
    for shard in open_all(catalog):
        if len(out) == args.count:
            break
        bounds = document_bounds(shard, args.eos, args.sequences)
        n = len(bounds) - 1
        if skip >= n:
            skip -= n
            continue
        for index, doc in enumerate(iter_documents(shard, bounds, skip), start=skip):
            out.append([int(t) for t in doc])
            ids.append(None if args.sequences else _document_id(shard, index, args.id_column))
            if len(out) == args.count:
                break
        skip = 0
    _print(out, ids, args)
    return 0


def _document_id(shard: Any, index: int, id_column: str | None) -> Any:
    fields = document_metadata(shard, index, id_column)
    return None if fields is None else fields.get("id")


def _print(docs: list[list[int]], ids: list[Any], args: argparse.Namespace) -> None:
    """The documents (and their ids, where any has one) as text or JSON."""
    shown = any(i is not None for i in ids)
    if args.json:
        print(json.dumps({"documents": docs, "ids": ids} if shown else {"documents": docs}))
        return
    for i, (tokens, doc_id) in enumerate(zip(docs, ids, strict=True), start=args.start):
        name = f" id={doc_id}" if shown else ""
        print(f"{i}{name}: {' '.join(map(str, tokens))}")
