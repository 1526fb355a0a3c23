"""``streamload convert SRC DST --to FORMAT``: rewrite token data in another format.

Documents keep their order and tokens; outputs appear only when complete (temporary names,
then rename). A progress bar (tqdm, when installed) shows documents and tokens.
"""

from __future__ import annotations

import argparse
from typing import Any

from streamload.cli._common import catalog_from_args, write_catalog
from streamload.tools.convert import TARGETS

__all__ = ["add_parser", "run"]


def add_parser(sub: Any) -> None:
    """Register the subcommand."""
    p = sub.add_parser("convert", help="rewrite token files in another format")
    p.add_argument("src", help="source file, folder, glob or Megatron prefix")
    p.add_argument("dst", help="output: a prefix (megatron), a file, or a folder (numpy)")
    p.add_argument("--to", required=True, choices=TARGETS, help="output format")
    p.add_argument("--dtype", help="output token dtype (default: the source's)")
    p.add_argument("--format", default="auto", help="source format (default: sniff)")
    p.add_argument("--source-dtype", default="auto", help="source dtype where it is not stored")
    p.add_argument("--eos", type=int, help="EOS id splitting documents where there is no index")
    p.add_argument("--tokenizer-name", help="tokenizer recorded by formats that store it")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Convert; returns the exit code."""
    source = argparse.Namespace(paths=[args.src], format=args.format, dtype=args.source_dtype)
    stats, destination, dtype = write_catalog(
        catalog_from_args(source),
        args.to,
        args.dst,
        dtype=args.dtype,
        eos=args.eos,
        tokenizer_name=args.tokenizer_name,
    )
    print(
        f"wrote {stats.documents:,} documents, {stats.tokens:,} tokens as {args.to} "
        f"({dtype.name}) to {destination}"
    )
    return 0
