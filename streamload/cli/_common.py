"""What the data subcommands share: turning PATH arguments into described, opened shards."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from streamload.config import SourceConfig

if TYPE_CHECKING:
    from streamload.catalog.sources import SourceCatalog
    from streamload.formats.base import ShardInfo, TokenShard

__all__ = [
    "DeprecatedAlias",
    "add_data_arguments",
    "add_pass_argument",
    "catalog_from_args",
    "opened_shards",
]


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
    The commands look at the files as they are now: described afresh, never from the
    catalog cache (which is checked by folder listings, docs/design.md §2.15).
    """
    if eos_token_id is None:
        eos_token_id = getattr(args, "eos", None)
    # Imported when a command runs, as in every subcommand: building the parser (`--help`)
    # needs argparse alone (docs/design.md, the `cli/` row).
    from streamload.catalog.sources import describe_source

    source = SourceConfig(
        name="cli", path=tuple(args.paths), format=args.format, dtype=args.dtype,
        column=getattr(args, "column", None),
    )  # fmt: skip
    return describe_source(source, vocab_size, eos_token_id=eos_token_id, fresh=True)


def opened_shards(catalog: SourceCatalog) -> Iterator[tuple[ShardInfo, TokenShard]]:
    """Each shard of a catalog with its reader, opened as the loop reaches it.

    A reader holds its mapped files (token file, index) until dropped, so a loop that keeps
    no reference past its turn holds at most two shards open (the one it holds while the next
    opens), at any shard count (issue 31: opening them all at once ran out of file
    descriptors at 10^4 Megatron shards). A loop that stops early opens no more.
    """
    from streamload.formats.registry import open_shard

    for info in catalog.shards:
        yield info, open_shard(info)


class DeprecatedAlias(argparse.Action):
    """An old option name that still works, hidden from ``--help``: stores its value under
    the new option's ``dest`` and says on stderr which name to use (``new_name``)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        self.new_name = kwargs.pop("new_name")
        super().__init__(option_strings, dest, help=argparse.SUPPRESS, **kwargs)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        print(f"{parser.prog}: {option_string} is deprecated; use {self.new_name}", file=sys.stderr)
        setattr(namespace, self.dest, values)


def add_pass_argument(parser: Any) -> None:
    """``--pass P`` (``dest="pass_index"``; the state's and ``show``'s word), and ``--epoch``,
    its old name in ``samples``, as a hidden deprecated alias."""
    parser.add_argument(
        "--pass",
        dest="pass_index",
        metavar="P",
        type=int,
        default=0,
        help="pass (epoch) index; default 0",
    )
    parser.add_argument(
        "--epoch", dest="pass_index", type=int, action=DeprecatedAlias, new_name="--pass"
    )
