"""``streamload demo``: build a small corpus, run, checkpoint, resume in a fresh process."""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["add_parser", "run"]


def add_parser(sub: Any) -> None:
    """Register the subcommand."""
    p = sub.add_parser("demo", help="run the loader on built-in demo data and resume exactly")
    p.add_argument("--dir", help="working folder (default: a new temporary folder)")
    p.add_argument("--num-workers", type=int, default=2, help="workers of the first run")
    p.add_argument("--resume-workers", type=int, default=1, help="workers after the resume")
    p.add_argument("--resume", action="store_true", help=argparse.SUPPRESS)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Run the demo (or, with the hidden ``--resume``, its fresh-process half)."""
    # Imported here: the demo trains with torch, which the other subcommands (and the
    # tokenizing workers that re-import the CLI under spawn) need not load.
    from streamload.tools.demo import describe, resume_segment, run_demo

    if args.resume:
        paths = describe(Path(args.dir))
        return resume_segment(paths["config"], paths["state"], args.num_workers, paths["resumed"])
    if args.dir:
        Path(args.dir).mkdir(parents=True, exist_ok=True)
        ok = run_demo(
            Path(args.dir), num_workers=args.num_workers, resume_workers=args.resume_workers
        )
    else:
        with tempfile.TemporaryDirectory(prefix="streamload-demo-") as tmp:
            ok = run_demo(
                Path(tmp), num_workers=args.num_workers, resume_workers=args.resume_workers
            )
    print("demo: exact resume OK" if ok else "demo: resume was NOT exact")
    return 0 if ok else 1
