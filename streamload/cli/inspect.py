"""``streamload inspect``: format, dtype, documents and tokens per shard, from headers and indexes.

JSON keys (public contract): ``format``, ``dtype``, ``num_documents``, ``num_tokens``,
``trained_tokens``, ``shards`` (``path``, ``num_documents``, ``num_tokens``,
``trained_tokens``, ``loss_mask``: the shard's loss-mask file or ``null``,
``loss_mask_column``: the column of an Arrow/Parquet/JSONL token file that is its loss mask,
else ``null``; docs/formats.md "Loss masks"). ``trained_tokens`` counts the tokens the loss
mask trains as targets (each mask read once, one byte a token; all of them without a mask):
an SFT dataset's answer tokens against its total. ``format`` is the format's one name
(as ``format =`` in a config takes it). For formats without a document index (``numpy``,
``raw``), ``num_documents`` counts the documents ending in ``--eos`` (default: the
``eos_token_id`` of ``--config``), streaming the tokens in bounded memory; without an EOS it
is ``null`` and the table says why.
"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from streamload.cli._common import add_data_arguments, catalog_from_args, opened_shards
from streamload.errors import ConfigError

if TYPE_CHECKING:
    import numpy as np

    from streamload.formats.base import ShardInfo

__all__ = ["add_parser", "length_histogram", "run"]


def add_parser(sub: Any) -> None:
    """Register the subcommand."""
    p = sub.add_parser("inspect", help="describe token files from their headers and indexes")
    add_data_arguments(p)
    p.add_argument(
        "--eos",
        type=int,
        metavar="ID",
        help="EOS id: count the documents of formats without a document index (numpy, raw)",
    )
    p.add_argument(
        "--config", metavar="FILE", help="data config whose eos_token_id counts documents"
    )
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument(
        "--plot",
        metavar="FILE.png",
        help="plot document lengths (needs matplotlib): indexed ones, and with --eos those "
        "of formats without an index; exits 2 when no shard has document boundaries",
    )
    p.set_defaults(run=run)


def eos_of(args: argparse.Namespace) -> int | None:
    """``--eos``, else the ``eos_token_id`` of ``--config``, else ``None``.

    Raises:
        ConfigError: a negative ``--eos``, or a config that does not load.
    """
    if args.eos is not None:
        if args.eos < 0:
            raise ConfigError(f"--eos {args.eos} must be a token id >= 0")
        return int(args.eos)
    if args.config:
        from streamload.config import load_config

        return load_config(args.config).eos_token_id
    return None


def length_histogram(
    lengths: np.ndarray, counts: np.ndarray | None = None
) -> list[tuple[int, int, int]]:
    """(low, high, count) of document lengths in power-of-two bins (``[0, 1)``, ``[1, 2)``…).

    Args:
        lengths: Document lengths (each document once), or distinct lengths with ``counts``.
        counts: Documents of each of ``lengths`` (:meth:`LengthCounts.counts`), if given.
    """
    import numpy as np

    if lengths.size == 0:
        return []
    bins = np.zeros(lengths.shape, dtype=np.int64)
    positive = lengths > 0
    bins[positive] = np.floor(np.log2(lengths[positive])).astype(np.int64) + 1
    per_bin = np.bincount(bins) if counts is None else np.bincount(bins, weights=counts)
    return [
        (0 if b == 0 else 1 << (b - 1), 1 if b == 0 else 1 << b, int(c))
        for b, c in enumerate(per_bin)
        if c
    ]


def trained_tokens(info: ShardInfo) -> int:
    """Tokens of shard ``info`` its loss mask trains (nonzero flags; every token without a
    mask), read in blocks."""
    import numpy as np

    from streamload.tools.documents import BLOCK_TOKENS
    from streamload.tools.masks import mask_reader

    if info.loss_mask is None:
        return info.num_tokens
    reader = mask_reader(info)
    return sum(
        int(np.count_nonzero(reader.tokens(start, start + BLOCK_TOKENS)))
        for start in range(0, info.num_tokens, BLOCK_TOKENS)
    )


def run(args: argparse.Namespace) -> int:
    """Print the description; returns the exit code."""
    import numpy as np

    from streamload.formats.registry import get_format
    from streamload.tools.documents import LengthCounts, count_documents, document_bounds

    eos = eos_of(args)
    catalog = catalog_from_args(args, eos_token_id=eos)
    shards, unindexed, counted = [], set(), False
    # Tallies, not every document's length: memory follows the distinct lengths.
    indexed, plotted = LengthCounts(), LengthCounts()
    for info, shard in opened_shards(catalog):
        bounds = shard.document_bounds() if get_format(info.format).has_documents else None
        docs: int | None = None
        if bounds is not None:
            docs, found = len(bounds) - 1, np.diff(np.asarray(bounds))
            indexed.add(found)
            if args.plot:
                plotted.add(found)
        elif eos is not None and args.plot:  # the plot needs each length, not just the count
            found = np.diff(document_bounds(shard, eos))
            plotted.add(found)
            docs, counted = len(found), True
        elif eos is not None:
            docs, counted = count_documents(shard, eos), True
        else:
            unindexed.add(info.format)
        shards.append(
            {
                "path": info.path,
                "num_documents": docs,
                "num_tokens": info.num_tokens,
                "trained_tokens": trained_tokens(info),
                "loss_mask": info.loss_mask,
                "loss_mask_column": info.meta.get("mask_column") if info.loss_mask else None,
            }
        )
    formats = sorted({s.format for s in catalog.shards})
    dtypes = sorted({np.dtype(s.dtype).name for s in catalog.shards})
    counts = [s["num_documents"] for s in shards]
    report = {
        "format": formats[0] if len(formats) == 1 else formats,
        "dtype": dtypes[0] if len(dtypes) == 1 else dtypes,
        "num_documents": None if None in counts else sum(counts),  # type: ignore[arg-type]
        "num_tokens": catalog.num_tokens,
        "trained_tokens": sum(int(s["trained_tokens"] or 0) for s in shards),
        "shards": shards,
    }
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        _print_table(report, length_histogram(*indexed.counts()))
        _print_document_note(sorted(unindexed), eos if counted else None)
    if args.plot:
        _plot(*plotted.counts(), args.plot)
    return 0


def _print_document_note(unindexed: list[str], eos: int | None) -> None:
    """Say why formats without an index have no count, or which EOS counted them."""
    if unindexed:
        verb = "records" if len(unindexed) == 1 else "record"
        print(
            f"({', '.join(unindexed)} {verb} no document boundaries; pass --eos ID to count "
            "documents ending in an EOS token, or --config FILE to use its eos_token_id)"
        )
    elif eos is not None:
        print(f"(documents without an index counted at EOS {eos})")


def _print_table(report: dict[str, Any], histogram: list[tuple[int, int, int]]) -> None:
    total, trained = report["num_tokens"], report["trained_tokens"]
    share = f", {trained:,} trained ({100.0 * trained / total:.2f} %)" if total else ""
    # without any mask every token is trained: the line stays as it was
    masked = any(s["loss_mask"] is not None for s in report["shards"])
    print(
        f"format {report['format']}, dtype {report['dtype']}, {total:,} tokens, "
        f"{report['num_documents'] if report['num_documents'] is not None else '?'} documents"
        + (share if masked else "")
    )
    width = max(len(s["path"]) for s in report["shards"])
    for s in report["shards"]:
        docs = "-" if s["num_documents"] is None else f"{s['num_documents']:,}"
        column = f" column {s['loss_mask_column']!r}" if s["loss_mask_column"] else ""
        mask = f"  loss mask {s['loss_mask']}{column}" if s["loss_mask"] else ""
        mask += f", {s['trained_tokens']:,} trained" if s["loss_mask"] else ""
        print(f"  {s['path']:<{width}}  {s['num_tokens']:>14,} tokens  {docs:>10} documents{mask}")
    if histogram:
        print("document lengths (tokens):")
        top = max(c for _, _, c in histogram)
        for low, high, count in histogram:
            bar = "#" * max(1, round(40 * count / top))
            print(f"  [{low:>8}, {high:>8})  {count:>10,}  {bar}")


def _plot(lengths: np.ndarray, counts: np.ndarray, path: str) -> None:
    """A log-log histogram of documents by length (``counts`` documents of each of
    ``lengths``) into ``path``."""
    import numpy as np

    from streamload.tools.report_plot import pyplot

    if lengths.size == 0:
        raise ConfigError(
            "--plot: no document lengths to plot: these shards record no document boundaries "
            "(pass --eos ID to split them at an EOS token)"
        )
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    edges = np.logspace(0, np.log10(max(2, lengths.max())), 50).tolist()
    ax.hist(np.maximum(lengths, 1), bins=edges, weights=counts)
    ax.set_xscale("log")
    ax.set_xlabel("document length (tokens)")
    ax.set_ylabel("documents")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    print(f"wrote {path}")
