"""``streamload docs``: documents ``I .. I+N-1`` in storage order, exactly as stored.

A Megatron document is a ``document_indices`` range (one or more sequences, maybe empty);
``--sequences`` lists Megatron sequences instead. Formats without a document index split
after each ``--eos`` token, else each shard is one document. Each document's metadata is
shown where the format records some (Dolma's CSV ``id``, ``src``, ``loc``; an Arrow or
Parquet row's scalar columns, its ``id`` column, or the one ``--id-column`` names, first as
``id``), read for the printed documents only: ``I id=doc-3 source=web: tokens`` (long values
shortened), and in ``--json`` whole, beside the ids.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from streamload.cli._common import add_data_arguments, catalog_from_args, opened_shards
from streamload.errors import ConfigError

__all__ = ["add_parser", "run"]

"""Longest value the text output prints whole (JSON prints every value whole)."""


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
        "--json",
        action="store_true",
        help='print {"documents": [[...], ...], "ids": [...], "metadata": [{...}, ...]}',
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Print the documents; returns the exit code."""
    from streamload.tools.documents import document_bounds, iter_documents

    if args.start < 0 or args.count < 0:
        raise ConfigError(f"--start {args.start} and --count {args.count} must be >= 0")
    catalog = catalog_from_args(args)
    out: list[list[int]] = []
    fields: list[dict[str, Any] | None] = []
    skip = args.start
    for _, shard in opened_shards(catalog):
        if len(out) == args.count:
            break
        bounds = document_bounds(shard, args.eos, args.sequences)
        n = len(bounds) - 1
        if skip >= n:
            skip -= n
            continue
        for index, doc in enumerate(iter_documents(shard, bounds, skip), start=skip):
            out.append([int(t) for t in doc])
            fields.append(None if args.sequences else _metadata(shard, index, args.id_column))
            if len(out) == args.count:
                break
        skip = 0
    _print(out, fields, args)
    return 0


def _metadata(shard: Any, index: int, id_column: str | None) -> dict[str, Any] | None:
    """Document ``index``'s metadata, ``None`` when the format records none or it is empty."""
    from streamload.tools.documents import document_metadata

    return document_metadata(shard, index, id_column) or None


def _print(
    docs: list[list[int]], fields: list[dict[str, Any] | None], args: argparse.Namespace
) -> None:
    """The documents (and their metadata, where any has some) as text or JSON."""
    from streamload.tools.documents import short_value

    if args.json:
        report: dict[str, Any] = {"documents": docs}
        if any(fields):
            report["ids"] = [None if f is None else f.get("id") for f in fields]
            report["metadata"] = fields
        print(json.dumps(report))
        return
    for i, (tokens, found) in enumerate(zip(docs, fields, strict=True), start=args.start):
        shown = "".join(f" {k}={short_value(v)}" for k, v in (found or {}).items() if v is not None)
        print(f"{i}{shown}: {' '.join(map(str, tokens))}")
