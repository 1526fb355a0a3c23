"""``streamload show``: what the loader delivered at one step, readable (docs/show.md).

::

    streamload show data.toml --step 41200
    streamload show data.toml --step 7 --rank 1 --world-size 4 --batch-size 2 \\
        --tokenizer tokenizer.json --max-tokens 48
    streamload show data.toml --step 7 --json > step7.json
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from streamload.cli._common import add_pass_argument
from streamload.config import load_config
from streamload.errors import ConfigError

__all__ = ["add_parser", "run"]


def add_parser(sub: Any) -> None:
    """Register the subcommand."""
    p = sub.add_parser("show", help="print the samples the loader delivered at a step")
    p.add_argument("config", help="TOML/YAML/JSON data config")
    p.add_argument("--step", type=int, required=True, help="global step N, counted in its pass")
    add_pass_argument(p)
    p.add_argument("--rank", type=int, help="show only this DP rank's batch (default: all)")
    p.add_argument("--world-size", type=int, help="DP world size W the run used (default 1)")
    p.add_argument(
        "--batch-size", type=int, help="per-rank batch size b (default: global_batch_size / W)"
    )
    p.add_argument(
        "--batch-sizes",
        metavar="STEP:B,...",
        help="global batch sizes of a run resumed with others, e.g. 0:64,1000:128",
    )
    p.add_argument(
        "--tokenizer",
        metavar="PATH",
        help="tokenizer.json: print decoded text (default: a text source's own tokenizer)",
    )
    p.add_argument(
        "--max-tokens",
        type=int,
        default=32,
        help="tokens shown per document, both ends (default 32; not applied to --json)",
    )
    p.add_argument("--json", action="store_true", help="print the complete report as JSON")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Print the step; returns the exit code."""
    from streamload.streams.interface import SampleStream
    from streamload.tools.show import StepRequest, load_step, parse_batch_sizes
    from streamload.tools.show_report import describe_step, load_decoder
    from streamload.tools.show_text import format_step

    if args.max_tokens < 0:
        raise ConfigError(f"--max-tokens {args.max_tokens} must be >= 0")
    request = StepRequest(
        step=args.step,
        pass_index=args.pass_index,
        rank=args.rank,
        world_size=args.world_size,
        batch_size=args.batch_size,
        batch_sizes=parse_batch_sizes(args.batch_sizes) if args.batch_sizes else (),
    )
    config = load_config(args.config)
    # a text source's own tokenizer decodes when --tokenizer is not given (the first one's)
    tokenizer = args.tokenizer or next((s.tokenizer for s in config.sources if s.is_text), None)
    decoder = load_decoder(tokenizer) if tokenizer else None
    stream = SampleStream.from_config(config)
    report = describe_step(stream, load_step(stream, request), decoder, tokenizer)
    if args.json:
        print(json.dumps(report, ensure_ascii=False))
    else:
        print(format_step(report, decoder[0] if decoder else None, args.max_tokens))
    return 0
