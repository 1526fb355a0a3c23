"""``streamload validate``: every check of the reader checklists, then a working config block.

Header and index checks run when each file is described (the format readers refuse any
inconsistency); then one streaming pass over the tokens checks ids against ``--vocab-size``,
EOS presence and density against ``--eos``, zero-filled tails, and each loss mask found beside
a token file (one byte per token of it, every byte 0 or 1:
:func:`streamload.tools.masks.check_mask`). Exit 0 when sound; else one line per problem and
exit 1. It ends by printing the ``[[sources]]`` block that reads the data.
"""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING, Any

from streamload.cli._common import add_data_arguments, catalog_from_args
from streamload.errors import FormatError

if TYPE_CHECKING:
    from streamload.catalog.sources import SourceCatalog

__all__ = ["ZERO_TAIL_WARN", "add_parser", "run", "sources_block"]

ZERO_TAIL_WARN = 1024
"""A run of at least this many 0 tokens at a file's end is reported (tatm-style padding)."""


def add_parser(sub: Any) -> None:
    """Register the subcommand."""
    p = sub.add_parser("validate", help="check token files thoroughly; print a working config")
    add_data_arguments(p)
    p.add_argument("--vocab-size", type=int, help="every token id must be below this")
    p.add_argument("--eos", type=int, help="EOS id: check it is present and plausible")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Validate; returns 0 when sound, 1 with problems."""
    from streamload.tools.masks import check_mask

    try:
        catalog = catalog_from_args(args, args.vocab_size, args.eos)
    except FormatError as exc:
        print(f"problem: {exc}")
        return 1
    problems, fits = [], set()
    for info in catalog.shards:
        found, fit = _check_tokens(info, args.vocab_size, args.eos)
        problems += [f"{info.path}: {p}" for p in found + check_mask(info)]
        fits.add(fit)
    for line in problems:
        print(f"problem: {line}")
    tokens = f"{catalog.num_tokens:,} tokens in {len(catalog.shards)} files"
    masked = sum(info.loss_mask is not None for info in catalog.shards)
    if masked:
        tokens += f" ({masked} with a loss mask)"
    print(f"{'sound' if not problems else f'{len(problems)} problem(s)'}: {tokens}")
    # Every file read at the wrong width and one width fits them all: the block says it.
    dtype = next(iter(fits)) if len(fits) == 1 else None
    print(sources_block(catalog, args, dtype))
    return 0 if not problems else 1


def _check_tokens(
    info: Any, vocab_size: int | None, eos: int | None
) -> tuple[list[str], str | None]:
    """The problems of one shard's tokens, and for a headerless file whose ids are out of
    range the dtype that reads them in range (``None``: none, or not such a file)."""
    from streamload.formats.registry import get_format, open_shard
    from streamload.tools.documents import scan_tokens

    stats = scan_tokens(open_shard(info), eos)
    found, fit = [], None
    if stats.min_id is not None and stats.min_id < 0:
        found.append(f"token ids go down to {stats.min_id}; expected >= 0")
    if vocab_size is not None and stats.max_id is not None and stats.max_id >= vocab_size:
        fit = _fitting_dtype(info, vocab_size)
        hint = f"; the file looks like {fit}: set dtype = {fit!r}" if fit else ""
        found.append(f"token ids reach {stats.max_id}; expected < vocab_size {vocab_size}{hint}")
    if eos is not None and stats.eos_count == 0 and not get_format(info.format).has_documents:
        found.append(f"no EOS token {eos} anywhere: documents cannot be found")
    elif eos is not None and stats.eos_count:
        mean = stats.num_tokens / stats.eos_count
        if mean < 2:
            found.append(f"EOS {eos} every {mean:.1f} tokens: is {eos} really the EOS id?")
    if stats.zero_tail >= ZERO_TAIL_WARN:
        found.append(f"ends with {stats.zero_tail:,} zero tokens (padding, as tatm writes?)")
    return found, fit


def _fitting_dtype(info: Any, vocab_size: int) -> str | None:
    """For a headerless file, the narrower dtype that reads a sample of it (its first and
    last tokens) as ids below ``vocab_size`` (issue 36: a uint16 file read as uint32)."""
    import numpy as np

    from streamload.formats.numpy.plausible_ids import SAMPLE_TOKENS, fitting_dtype
    from streamload.formats.registry import open_shard

    if info.format != "raw":
        return None
    shard, count = open_shard(info), min(SAMPLE_TOKENS, info.num_tokens)
    ends = (shard.tokens(0, count), shard.tokens(info.num_tokens - count, info.num_tokens))
    data = b"".join(np.ascontiguousarray(part).tobytes() for part in ends)
    return fitting_dtype(data, np.dtype(info.dtype), vocab_size)


def sources_block(
    catalog: SourceCatalog, args: argparse.Namespace, dtype: str | None = None
) -> str:
    """The ``[[sources]]`` TOML block (and top-level hints) that reads this data; ``dtype``
    replaces the files' dtype when validation found the one that fits."""
    import numpy as np

    formats = sorted({s.format for s in catalog.shards})
    dtypes = [dtype] if dtype else sorted({np.dtype(s.dtype).name for s in catalog.shards})
    name = os.path.basename(os.path.normpath(args.paths[0])) or "data"
    paths = args.paths[0] if len(args.paths) == 1 else list(args.paths)
    lines = ["# streamload config for this data", "[[sources]]", f'name = "{name}"']
    lines.append(f"path = {paths!r}".replace("'", '"'))
    lines.append(f'format = "{formats[0]}"' if len(formats) == 1 else 'format = "auto"')
    if len(dtypes) == 1 and formats[0] in ("raw", "dolma", "datatrove"):
        lines.append(f'dtype = "{dtypes[0]}"')
    if args.vocab_size is not None:
        lines.insert(1, f"vocab_size = {args.vocab_size}")
    if args.eos is not None:
        lines.insert(1, f"eos_token_id = {args.eos}")
    return "\n".join(lines)
