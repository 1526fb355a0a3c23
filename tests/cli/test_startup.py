"""The command line starts at once: parsing (``--help`` of the command and of every
subcommand, ``--version``) imports neither torch nor numpy nor fsspec; each command imports
what it drives only when it runs (docs/design.md, the `cli/` row).

Each check runs in a fresh interpreter: this test process has long imported all of them.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import streamload
from streamload.cli.main import build_parser
from tests.helpers.paths import REPO

HEAVY = ("torch", "numpy", "fsspec")
"""Modules that parsing must not import (torch alone costs 1-2 s)."""

_PARSE_ALL = """
import json, sys
from streamload.cli.main import build_parser

heavy = json.loads(sys.argv[1])
found = {}
for argv in json.loads(sys.argv[2]):
    try:
        build_parser().parse_args(argv)
    except SystemExit:  # --help prints and exits
        pass
    found[" ".join(argv)] = [m for m in heavy if m in sys.modules]
print(json.dumps(found))
"""


def _python(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=120
    )


def _subcommands() -> list[str]:
    """The names of every subcommand, as the parser registers them."""
    parser = build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return list(sub.choices)


def test_every_help_parses_without_torch_numpy_or_fsspec() -> None:
    names = _subcommands()
    assert {"convert", "plan", "samples", "show", "tokenize"} <= set(names)
    commands = [["--help"], ["--version"]] + [[name, "--help"] for name in names]
    done = _python("-c", _PARSE_ALL, json.dumps(HEAVY), json.dumps(commands))
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.splitlines()[-1])
    assert list(found) == [" ".join(c) for c in commands]
    assert found == {name: [] for name in found}, found


def test_help_of_the_installed_entry_point_imports_no_torch() -> None:
    # `python -m streamload` is what the console script runs; -X importtime lists every
    # module the interpreter imported, so this sees the real command, not a re-creation
    for argv in (["--help"], ["plan", "--help"], ["show", "--help"]):
        done = _python("-X", "importtime", "-m", "streamload", *argv)
        assert done.returncode == 0, done.stderr
        assert "usage: streamload" in done.stdout
        imported = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines()}
        assert not {m for m in imported if m.split(".")[0] in HEAVY}, argv


def test_version_prints_the_package_version() -> None:
    done = _python("-m", "streamload", "--version")
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"streamload {streamload.__version__}\n"
