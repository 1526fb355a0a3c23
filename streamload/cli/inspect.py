"""``streamload inspect``: format, dtype, documents and tokens per shard, from headers and indexes.

JSON keys (public contract): ``format``, ``dtype``, ``num_documents``, ``num_tokens``,
``shards`` (``path``, ``num_documents``, ``num_tokens``). ``num_documents`` is ``null`` for
formats without a document index (inspect never scans token data).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import numpy as np

from streamload.cli._common import add_data_arguments, catalog_from_args, open_all
from streamload.formats.registry import get_format

__all__ = ["add_parser", "length_histogram", "run"]


def add_parser(sub: Any) -> None:
    """Register the subcommand."""
    p = sub.add_parser("inspect", help="describe token files from their headers and indexes")
    add_data_arguments(p)
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--plot", metavar="FILE.png", help="plot document lengths (needs matplotlib)")
    p.set_defaults(run=run)


def length_histogram(lengths: np.ndarray) -> list[tuple[int, int, int]]:
    """(low, high, count) of document lengths in power-of-two bins (``[0, 1)``, ``[1, 2)``…)."""
    if lengths.size == 0:
        return []
    bins = np.zeros(lengths.shape, dtype=np.int64)
    positive = lengths > 0
    bins[positive] = np.floor(np.log2(lengths[positive])).astype(np.int64) + 1
    counts = np.bincount(bins)
    return [
        (0 if b == 0 else 1 << (b - 1), 1 if b == 0 else 1 << b, int(c))
        for b, c in enumerate(counts)
        if c
    ]


def run(args: argparse.Namespace) -> int:
    """Print the description; returns the exit code."""
    catalog = catalog_from_args(args)
    shards, lengths = [], []
    for info, shard in zip(catalog.shards, open_all(catalog), strict=True):
        bounds = shard.document_bounds() if get_format(info.format).has_documents else None
        docs = None if bounds is None else len(bounds) - 1
        if bounds is not None:
            lengths.append(np.diff(np.asarray(bounds)))
        shards.append({"path": info.path, "num_documents": docs, "num_tokens": info.num_tokens})
    formats = sorted({s.format for s in catalog.shards})
    dtypes = sorted({np.dtype(s.dtype).name for s in catalog.shards})
    counts = [s["num_documents"] for s in shards]
    report = {
        "format": formats[0] if len(formats) == 1 else formats,
        "dtype": dtypes[0] if len(dtypes) == 1 else dtypes,
        "num_documents": None if None in counts else sum(counts),  # type: ignore[arg-type]
        "num_tokens": catalog.num_tokens,
        "shards": shards,
    }
    all_lengths = np.concatenate(lengths) if lengths else np.zeros(0, dtype=np.int64)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        _print_table(report, all_lengths)
    if args.plot:
        _plot(all_lengths, args.plot)
    return 0


def _print_table(report: dict[str, Any], lengths: np.ndarray) -> None:
    print(
        f"format {report['format']}, dtype {report['dtype']}, {report['num_tokens']:,} tokens, "
        f"{report['num_documents'] if report['num_documents'] is not None else '?'} documents"
    )
    width = max(len(s["path"]) for s in report["shards"])
    for s in report["shards"]:
        docs = "-" if s["num_documents"] is None else f"{s['num_documents']:,}"
        print(f"  {s['path']:<{width}}  {s['num_tokens']:>14,} tokens  {docs:>10} documents")
    histogram = length_histogram(lengths)
    if histogram:
        print("document lengths (tokens):")
        top = max(c for _, _, c in histogram)
        for low, high, count in histogram:
            bar = "#" * max(1, round(40 * count / top))
            print(f"  [{low:>8}, {high:>8})  {count:>10,}  {bar}")


def _plot(lengths: np.ndarray, path: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("--plot needs matplotlib: pip install 'streamload[plot]'")
        return
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.hist(np.maximum(lengths, 1), bins=np.logspace(0, np.log10(max(2, lengths.max())), 50))
    ax.set_xscale("log")
    ax.set_xlabel("document length (tokens)")
    ax.set_ylabel("documents")
    fig.tight_layout()
    fig.savefig(path)
    print(f"wrote {path}")
