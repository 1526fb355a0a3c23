"""``streamload prepare CONFIG``: tokenize a config's text sources into their caches now.

A job does this itself on first use (docs/text.md); ``prepare`` does it ahead, on any
machine that reaches the cache, so the job starts at once.
"""

from __future__ import annotations

import argparse
from typing import Any

__all__ = ["add_parser", "run"]


def add_parser(sub: Any) -> None:
    """Register the subcommand."""
    p = sub.add_parser(
        "prepare",
        help="tokenize the text sources of a config into their caches (docs/text.md)",
        description="Tokenize every text source of CONFIG (a source with a tokenizer) into its "
        "cache, each input file once; files already cached are kept. Several machines may run "
        "it at once against one cache: give each --rank and --world-size.",
    )
    p.add_argument("config", help="data config (TOML/YAML/JSON)")
    p.add_argument("--processes", type=int, default=1, help="tokenizing processes (default 1)")
    p.add_argument("--rank", type=int, default=0, help="this machine's share (default 0)")
    p.add_argument("--world-size", type=int, default=1, help="machines sharing (default 1)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Prepare every text source; print what was written where. Returns the exit code."""
    from streamload.catalog.text_source import prepare_text_source, text_cache
    from streamload.config import load_config
    from streamload.config.checks import check_int
    from streamload.errors import ConfigError
    from streamload.tokenize.text_progress import TextProgress

    check_int(args.processes, "--processes", 1)
    check_int(args.world_size, "--world-size", 1)
    check_int(args.rank, "--rank", 0)
    if args.rank >= args.world_size:
        raise ConfigError(f"--rank {args.rank} must be below --world-size {args.world_size}")
    config = load_config(args.config)
    sources = [s for s in config.sources if s.is_text]
    if not sources:
        print(f"{args.config}: no text source (a source with a tokenizer); nothing to prepare")
        return 0
    for source in sources:
        progress = TextProgress(0, source.name)
        try:
            report = prepare_text_source(
                source, config.storage, rank=args.rank, world=args.world_size,
                processes=args.processes, progress=progress,
            )  # fmt: skip
        finally:
            progress.close()
        cache = text_cache(source, config.storage)
        print(_summary(source.name, report, cache))
    return 0


def _summary(name: str, report: Any, cache: Any) -> str:
    files = len(report.markers)
    tokens = report.total("tokens")
    line = (
        f"{name}: {files:,} files ({report.built:,} tokenized now, {files - report.built:,} "
        f"already cached), {report.total('documents'):,} documents, {tokens:,} tokens "
        f"({report.markers[0].get('dtype', '?') if files else cache.dtype.name}) in {cache.url}"
    )
    skipped = report.total("empty"), report.total("bad")
    if any(skipped):
        line += f"; {skipped[0]:,} empty texts and {skipped[1]:,} bad rows skipped"
    if report.built:
        line += f"; {report.seconds:.1f} s"
    return line
