"""Command-line interface: thin subcommands over the library."""

from streamload.cli.main import main

__all__ = ["main"]
