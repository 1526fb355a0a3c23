"""``streamload convert SRC DST --to FORMAT``: rewrite token data in another format.

Documents keep their order and tokens. The whole output appears at once when complete (a
hidden staging folder, then renames; :mod:`streamload.tools.convert` states the destination
rules), an existing output is never replaced, and the command prints every path it wrote. A
progress bar (tqdm, when installed) shows documents and tokens. Loss masks go with the data
(:mod:`streamload.tools.masks`: ``--drop-masks``, ``--assume-trained``).
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from streamload.cli._common import catalog_from_args
from streamload.cli._progress import Progress
from streamload.tools.convert import TARGETS, ConvertStats, convert, open_output, parse_dtype

__all__ = ["add_mask_arguments", "add_parser", "run"]


def add_parser(sub: Any) -> None:
    """Register the subcommand."""
    p = sub.add_parser("convert", help="rewrite token files in another format")
    p.add_argument("src", help="source file, folder, glob or Megatron prefix")
    p.add_argument(
        "dst",
        help="output: a prefix (megatron), a file ending in .pbin (modalities), .npy (dolma), "
        ".ds (datatrove) or .parquet (parquet), or a folder (numpy); never replaced if it exists",
    )
    p.add_argument("--to", required=True, choices=TARGETS, help="output format")
    p.add_argument("--dtype", help="output token dtype (default: the source's)")
    p.add_argument("--format", default="auto", help="source format (default: sniff)")
    p.add_argument("--source-dtype", default="auto", help="source dtype where it is not stored")
    p.add_argument("--eos", type=int, help="EOS id splitting documents where there is no index")
    p.add_argument("--tokenizer-name", help="tokenizer recorded by formats that store it")
    add_mask_arguments(p)
    p.set_defaults(run=run)


def add_mask_arguments(parser: Any) -> None:
    """``--drop-masks`` and ``--assume-trained`` (convert and merge)."""
    parser.add_argument(
        "--drop-masks",
        action="store_true",
        help="write no loss mask even where the inputs have one",
    )
    parser.add_argument(
        "--assume-trained",
        action="store_true",
        help="inputs without a loss mask are all trained (needed when only some have one)",
    )


def run(args: argparse.Namespace) -> int:
    """Convert; returns the exit code."""
    dtype = parse_dtype(args.dtype) if args.dtype else None
    source = argparse.Namespace(paths=[args.src], format=args.format, dtype=args.source_dtype)
    catalog = catalog_from_args(source)
    writer = open_output(
        catalog,
        args.to,
        args.dst,
        dtype=dtype,
        tokenizer_name=args.tokenizer_name,
        drop_masks=args.drop_masks,
        assume_trained=args.assume_trained,
    )
    with Progress(total=catalog.num_tokens, unit="tokens") as bar:
        stats = convert(catalog, writer, eos_token_id=args.eos, progress=bar.update_to)
    print(summary(stats, args.to))
    return 0


def summary(stats: ConvertStats, fmt: str) -> str:
    """``wrote D documents, T tokens as FMT (DTYPE): PATH, COMPANION…`` (a NumPy folder
    with its shard count)."""
    dtype = stats.dtype.name if stats.dtype is not None else "?"
    where = ", ".join(stats.paths)
    if fmt == "numpy" and stats.paths:
        shards = len(os.listdir(stats.paths[0]))
        where += f"{os.sep} ({shards} NPY shard{'' if shards == 1 else 's'})"
    return (
        f"wrote {stats.documents:,} documents, {stats.tokens:,} tokens as {fmt} ({dtype}): {where}"
    )
