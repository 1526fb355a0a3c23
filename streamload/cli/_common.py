"""What the data subcommands share: turning PATH arguments into described, opened shards."""

from __future__ import annotations

import argparse
from typing import Any

from streamload.catalog.sources import SourceCatalog, describe_source
from streamload.config import SourceConfig
from streamload.formats.base import TokenShard
from streamload.formats.registry import open_shard

__all__ = ["add_data_arguments", "catalog_from_args", "open_all"]


def add_data_arguments(parser: Any) -> None:
    """``PATH...``, ``--format``, ``--dtype`` and ``--column``."""
    parser.add_argument("paths", nargs="+", metavar="PATH", help="files, folders, globs, prefixes")
    parser.add_argument("--format", default="auto", help="format (default: sniff each file)")
    parser.add_argument("--dtype", default="auto", help="token dtype where the format lacks it")
    parser.add_argument(
        "--column", default=None, help="token column of Arrow, Parquet or MDS files"
    )


def catalog_from_args(
    args: argparse.Namespace, vocab_size: int | None = None, eos_token_id: int | None = None
) -> SourceCatalog:
    """Describe the shards named on the command line (listing and headers only).

    ``eos_token_id`` defaults to the command's ``--eos``: the describe step needs it (a tatm
    file's trailing zeros keep a final EOS 0), so every subcommand that takes ``--eos`` passes
    it here, not only to the steps after (issue 36: ``docs --eos 0`` lost a last EOS).
    """
    if eos_token_id is None:
        eos_token_id = getattr(args, "eos", None)
    source = SourceConfig(
        name="cli", path=tuple(args.paths), format=args.format, dtype=args.dtype,
        column=getattr(args, "column", None),
    )  # fmt: skip
    return describe_source(source, vocab_size, eos_token_id=eos_token_id)


def open_all(catalog: SourceCatalog) -> list[TokenShard]:
    """Open every shard of a catalog."""
    return [open_shard(info) for info in catalog.shards]
