"""What the data subcommands share: turning PATH arguments into described, opened shards."""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np

from streamload.catalog.sources import SourceCatalog, describe_source
from streamload.cli._progress import Progress
from streamload.config import SourceConfig
from streamload.formats.base import TokenShard
from streamload.formats.registry import open_shard
from streamload.tools.convert import ConvertStats, convert, open_output, parse_dtype

__all__ = ["add_data_arguments", "catalog_from_args", "open_all", "write_catalog"]


def add_data_arguments(parser: Any) -> None:
    """``PATH...``, ``--format`` and ``--dtype``."""
    parser.add_argument("paths", nargs="+", metavar="PATH", help="files, folders, globs, prefixes")
    parser.add_argument("--format", default="auto", help="format (default: sniff each file)")
    parser.add_argument("--dtype", default="auto", help="token dtype where the format lacks it")


def catalog_from_args(
    args: argparse.Namespace, vocab_size: int | None = None, eos_token_id: int | None = None
) -> SourceCatalog:
    """Describe the shards named on the command line (listing and headers only)."""
    source = SourceConfig(name="cli", path=tuple(args.paths), format=args.format, dtype=args.dtype)
    return describe_source(source, vocab_size, eos_token_id=eos_token_id)


def open_all(catalog: SourceCatalog) -> list[TokenShard]:
    """Open every shard of a catalog."""
    return [open_shard(info) for info in catalog.shards]


def write_catalog(
    catalog: SourceCatalog,
    fmt: str,
    destination: str,
    *,
    dtype: str | None = None,
    eos: int | None = None,
    tokenizer_name: str | None = None,
) -> tuple[ConvertStats, str, np.dtype]:
    """Write every document of ``catalog`` as ``fmt`` with a progress bar.

    Returns:
        What was written, the output path, and the token dtype (default: the sources').
    """
    writer = open_output(
        catalog,
        fmt,
        destination,
        dtype=parse_dtype(dtype) if dtype else None,
        tokenizer_name=tokenizer_name,
    )
    with Progress(total=catalog.num_tokens, unit="tokens") as bar:
        stats = convert(catalog, writer, eos_token_id=eos, progress=bar.update_to)
    assert stats.dtype is not None  # a staged writer reports its dtype
    return stats, stats.paths[0], stats.dtype
