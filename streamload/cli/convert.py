"""``streamload convert SRC DST --to FORMAT``: rewrite token data in another format.

Documents keep their order and tokens. The whole output appears at once when complete (a
hidden staging folder, then renames; :mod:`streamload.tools.convert_targets` states the
destination rules and which option belongs to which target), an existing output is never
replaced, and the command prints every path it wrote. A progress bar (tqdm, when installed)
shows documents and tokens (``--to arrow`` writes a ``datasets.save_to_disk`` folder that
``datasets.load_from_disk`` opens). Loss masks go with the data (:mod:`streamload.tools.masks`:
``--drop-masks``, ``--assume-trained``).
"""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING, Any

from streamload.cli._common import catalog_from_args
from streamload.cli._progress import Progress
from streamload.tools.convert_names import TARGETS

if TYPE_CHECKING:
    from streamload.tools.convert import ConvertStats
    from streamload.tools.convert_targets import WriteOptions

__all__ = ["add_mask_arguments", "add_parser", "add_target_arguments", "run", "summary",
           "write_options"]  # fmt: skip

_FOLDER_UNITS = {"numpy": "NPY shard", "mds": "MDS shard", "litdata": "chunk"}
"""What a folder output's files are called in the summary (Parquet files are listed)."""


def add_parser(sub: Any) -> None:
    """Register the subcommand."""
    p = sub.add_parser("convert", help="rewrite token files in another format")
    p.add_argument("src", help="source file, folder, glob or Megatron prefix")
    p.add_argument(
        "dst",
        help="output: a prefix (megatron); a file ending in .pbin (modalities), .npy (dolma), "
        ".ds (datatrove) or .parquet (parquet); a folder (numpy, mds, litdata, arrow: a "
        "datasets.save_to_disk folder, or parquet: Hub-sized train-00000-of-0000N.parquet "
        "files); never replaced if it exists",
    )
    p.add_argument("--to", required=True, choices=TARGETS, help="output format")
    p.add_argument("--dtype", help="output token dtype (default: the source's)")
    p.add_argument("--format", default="auto", help="source format (default: sniff)")
    p.add_argument("--source-dtype", default="auto", help="source dtype where it is not stored")
    p.add_argument("--eos", type=int, help="EOS id splitting documents where there is no index")
    p.add_argument("--tokenizer-name", help="tokenizer recorded by formats that store it")
    add_target_arguments(p)
    add_mask_arguments(p)
    p.set_defaults(run=run)


def add_target_arguments(parser: Any) -> None:
    """The options of one target each (convert and merge)."""
    parser.add_argument(
        "--compression",
        help="mds: compress the shards with zstd ('zstd' or 'zstd:LEVEL'; needs zstandard)",
    )
    parser.add_argument(
        "--size-limit",
        help="mds: shard size limit in bytes, e.g. 64MiB (default 67108864, MDSWriter's)",
    )
    parser.add_argument(
        "--chunk-bytes",
        help="litdata: token bytes per chunk, e.g. 64MB (default 64MB, litdata's chunk_bytes)",
    )
    parser.add_argument(
        "--max-file-size",
        help="parquet folder, arrow: data bytes per file, e.g. 500MB (default 500MB, the "
        "Hub's and save_to_disk's)",
    )


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


def write_options(args: argparse.Namespace) -> WriteOptions:
    """The target options of the command line (sizes parsed)."""
    from streamload.tools.convert_targets import WriteOptions, parse_size

    def size(value: str | None, flag: str) -> int | None:
        return None if value is None else parse_size(value, flag)

    return WriteOptions(
        tokenizer_name=getattr(args, "tokenizer_name", None),
        compression=args.compression,
        size_limit=size(args.size_limit, "--size-limit"),
        chunk_bytes=size(args.chunk_bytes, "--chunk-bytes"),
        max_file_bytes=size(args.max_file_size, "--max-file-size"),
    )


def run(args: argparse.Namespace) -> int:
    """Convert; returns the exit code."""
    from streamload.tools.convert import convert, open_output, parse_dtype

    dtype = parse_dtype(args.dtype) if args.dtype else None
    options = write_options(args)
    source = argparse.Namespace(
        paths=[args.src], format=args.format, dtype=args.source_dtype, eos=args.eos
    )
    catalog = catalog_from_args(source)
    writer = open_output(
        catalog,
        args.to,
        args.dst,
        dtype=dtype,
        drop_masks=args.drop_masks,
        assume_trained=args.assume_trained,
        options=options,
    )
    with Progress(total=catalog.num_tokens, unit="tokens") as bar:
        stats = convert(catalog, writer, eos_token_id=args.eos, progress=bar.update_to)
    print(summary(stats, args.to))
    return 0


def summary(stats: ConvertStats, fmt: str) -> str:
    """``wrote D documents, T tokens as FMT (DTYPE): PATH, COMPANION…`` (a folder with its
    file count; a folder of Parquet files as its files; an ``arrow`` folder as every file
    in it)."""
    dtype = stats.dtype.name if stats.dtype is not None else "?"
    where = ", ".join(stats.paths)
    if len(stats.paths) == 1 and os.path.isdir(stats.paths[0]):
        folder = stats.paths[0]
        if fmt in ("parquet", "arrow"):
            names = sorted(os.listdir(folder))
            if fmt == "parquet":
                names = [n for n in names if n.endswith(".parquet")]
            where = ", ".join(os.path.join(folder, n) for n in names)
        else:
            files = [n for n in os.listdir(folder) if n.endswith((".npy", ".mds", ".zstd", ".bin"))]
            unit = _FOLDER_UNITS.get(fmt, "file")
            where += f"{os.sep} ({len(files)} {unit}{'' if len(files) == 1 else 's'})"
    return (
        f"wrote {stats.documents:,} documents, {stats.tokens:,} tokens as {fmt} ({dtype}): {where}"
    )
