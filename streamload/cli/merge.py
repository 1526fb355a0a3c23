"""``streamload merge SRC... DST``: concatenate datasets of one format into one output.

Megatron inputs merge like ``tools/merge_datasets.py`` (``add_index``: sequences, document
indices and token bytes appended, pointers recomputed). Other formats are concatenated
document by document through the format's writer, keeping every document and its order —
Modalities ``.pbin`` files included, without the tool's −12-byte index defect; MDS and
LitData folders into one folder, Parquet files into one file or a folder of Hub-sized files,
Arrow files (``save_to_disk`` folders) into one ``save_to_disk`` folder
(the target options of ``convert``: ``--compression``, ``--chunk-bytes``…). Loss masks
are merged with the data (:mod:`streamload.tools.masks`): inputs that all have one give a
merged mask; inputs of which only some have one are refused unless ``--assume-trained``
(the others are all trained) or ``--drop-masks``.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from streamload.cli._common import catalog_from_args
from streamload.cli._progress import Progress
from streamload.cli.convert import add_mask_arguments, add_target_arguments, write_options
from streamload.errors import ConfigError
from streamload.tools.convert_names import TARGETS

if TYPE_CHECKING:
    from streamload.catalog.sources import SourceCatalog

__all__ = ["add_parser", "run"]


def add_parser(sub: Any) -> None:
    """Register the subcommand."""
    p = sub.add_parser("merge", help="concatenate token files of one format")
    p.add_argument("inputs", nargs="+", metavar="SRC", help="inputs (Megatron: path prefixes)")
    p.add_argument(
        "dst",
        help="output: a prefix (megatron), a file, or a folder (numpy, mds, litdata, parquet, "
        "arrow)",
    )
    p.add_argument("--format", default="auto", help="input format (default: sniff)")
    p.add_argument("--dtype", default="auto", help="input dtype where the format lacks it")
    p.add_argument("--eos", type=int, help="EOS id splitting documents where there is no index")
    add_target_arguments(p)
    add_mask_arguments(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Merge; returns the exit code."""
    from streamload.catalog.sources import SourceCatalog
    from streamload.catalog.table import ShardTable
    from streamload.tools.convert import convert, open_output
    from streamload.tools.masks import merge_megatron_with_masks, wants_masks

    # Each input is described on its own: merging a dataset with itself is legitimate.
    parts = [
        catalog_from_args(
            argparse.Namespace(paths=[p], format=args.format, dtype=args.dtype, eos=args.eos)
        )
        for p in args.inputs
    ]
    catalog = SourceCatalog(
        parts[0].config, ShardTable.of([s for part in parts for s in part.shards])
    )
    fmt = _single_format(catalog)
    policy = {"drop_masks": args.drop_masks, "assume_trained": args.assume_trained}
    if fmt == "megatron":
        if wants_masks(catalog.shards, **policy):
            paths = merge_megatron_with_masks(catalog.shards, args.dst)
            print(f"merged {len(catalog.shards)} Megatron datasets: {', '.join(paths)}")
            return 0
        from streamload.formats.megatron.megatron import merge_megatron

        merge_megatron([s.path for s in catalog.shards], args.dst)
        print(f"merged {len(catalog.shards)} Megatron datasets into {args.dst}")
        return 0
    target = "numpy" if fmt in ("npy", "raw") else fmt
    if target not in TARGETS:
        raise ConfigError(f"cannot merge {fmt} files; convert them first")
    writer = open_output(catalog, target, args.dst, options=write_options(args), **policy)
    with Progress(total=catalog.num_tokens, unit="tokens") as bar:
        stats = convert(catalog, writer, eos_token_id=args.eos, progress=bar.update_to)
    print(
        f"merged {len(catalog.shards)} files: {stats.documents:,} documents, "
        f"{stats.tokens:,} tokens into {stats.paths[0]}"
        + (" with its loss masks" if writer.masks else "")
    )
    return 0


def _single_format(catalog: SourceCatalog) -> str:
    formats = sorted({s.format for s in catalog.shards})
    if len(formats) != 1:
        raise ConfigError(f"inputs mix formats {', '.join(formats)}; merge one format at a time")
    return formats[0]
