"""``streamload`` command: dispatches to one module per subcommand.

Every subcommand exits 0 on success and 2 with a one-line reason on bad input
(a :class:`~streamload.errors.StreamloadError`).

Building the parser imports each subcommand module, which imports only argparse-level
modules at its top; the library it drives (torch, numpy, the formats, the streams) is imported
inside its ``run``, so ``streamload --help``, ``streamload X --help`` and ``--version`` start
at once (a test checks that parsing imports no torch).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from streamload import __version__
from streamload.cli import (
    convert,
    demo,
    docs,
    index,
    inspect,
    merge,
    plan,
    prepare,
    samples,
    show,
    tokenize,
    validate,
)
from streamload.errors import ConfigError, StreamloadError

__all__ = ["main"]

_COMMANDS = (
    samples,
    show,
    demo,
    inspect,
    docs,
    validate,
    convert,
    merge,
    index,
    plan,
    prepare,
    tokenize,
)


_READS_CONFIG = ("plan", "prepare", "samples", "show")
"""Subcommands whose input is the data config (``CONFIG``): a ConfigError they raise is about
it (a source's path, a value), unless it names a command-line flag."""


def _error_line(exc: StreamloadError, args: argparse.Namespace) -> str:
    """The error's first line; one about a config file starts with the file's name.

    A config's load errors carry the file as a note (:func:`~streamload.config.load_config`),
    which a terminal line would not show; later errors about the config (a source path
    naming nothing) come from the subcommands that read it.
    """
    line = (str(exc).splitlines() or [""])[0]
    config = getattr(args, "config", None)
    if not isinstance(config, str) or line.startswith((config, os.path.normpath(config))):
        return line
    noted = any(n.startswith("in config file ") for n in getattr(exc, "__notes__", ()))
    flag = line.startswith(("--", "streamload "))  # a command-line argument's error
    if noted or (isinstance(exc, ConfigError) and args.command in _READS_CONFIG and not flag):
        return f"{config}: {line}"
    return line


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand."""
    parser = argparse.ArgumentParser(
        prog="streamload", description="Deterministic, exactly resumable token data loading."
    )
    parser.add_argument("--version", action="version", version=f"streamload {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    for command in _COMMANDS:
        command.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit code."""
    args = build_parser().parse_args(argv)
    try:
        return int(args.run(args))
    except StreamloadError as exc:
        print(f"streamload {args.command}: error: {_error_line(exc, args)}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `streamload show ... | head`: the reader left; stop quietly
        # Python's documented recipe: point stdout at devnull so the flush at exit is silent.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, as a shell reports a command a pipe closed on


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
