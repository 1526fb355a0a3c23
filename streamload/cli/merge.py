"""``streamload merge SRC... DST``: concatenate datasets of one format into one output.

Megatron inputs merge like ``tools/merge_datasets.py`` (``add_index``: sequences, document
indices and token bytes appended, pointers recomputed). Other formats are concatenated
document by document through the format's writer, keeping every document and its order —
Modalities ``.pbin`` files included, without the tool's −12-byte index defect.
"""

from __future__ import annotations

import argparse
from typing import Any

from streamload.catalog.sources import SourceCatalog
from streamload.cli._common import catalog_from_args, write_catalog
from streamload.errors import ConfigError
from streamload.tools.convert import TARGETS

__all__ = ["add_parser", "run"]


def add_parser(sub: Any) -> None:
    """Register the subcommand."""
    p = sub.add_parser("merge", help="concatenate token files of one format")
    p.add_argument("inputs", nargs="+", metavar="SRC", help="inputs (Megatron: path prefixes)")
    p.add_argument("dst", help="output: a prefix (megatron), a file, or a folder (numpy)")
    p.add_argument("--format", default="auto", help="input format (default: sniff)")
    p.add_argument("--dtype", default="auto", help="input dtype where the format lacks it")
    p.add_argument("--eos", type=int, help="EOS id splitting documents where there is no index")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Merge; returns the exit code."""
    # Each input is described on its own: merging a dataset with itself is legitimate.
    parts = [
        catalog_from_args(argparse.Namespace(paths=[p], format=args.format, dtype=args.dtype))
        for p in args.inputs
    ]
    catalog = SourceCatalog(parts[0].config, tuple(s for part in parts for s in part.shards))
    fmt = _single_format(catalog)
    if fmt == "megatron":
        from streamload.formats.megatron import merge_megatron

        merge_megatron([s.path for s in catalog.shards], args.dst)
        print(f"merged {len(catalog.shards)} Megatron datasets into {args.dst}")
        return 0
    target = "numpy" if fmt in ("npy", "raw") else fmt
    if target not in TARGETS:
        raise ConfigError(f"cannot merge {fmt} files; convert them first")
    stats, destination, _ = write_catalog(catalog, target, args.dst, eos=args.eos)
    print(
        f"merged {len(catalog.shards)} files: {stats.documents:,} documents, "
        f"{stats.tokens:,} tokens into {destination}"
    )
    return 0


def _single_format(catalog: SourceCatalog) -> str:
    formats = sorted({s.format for s in catalog.shards})
    if len(formats) != 1:
        raise ConfigError(f"inputs mix formats {', '.join(formats)}; merge one format at a time")
    return formats[0]
