"""One name for one thing on the command line: ``--pass`` (``samples --epoch`` is a hidden,
deprecated alias that still works), and every ``tokenize`` option described in ``--help``."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import numpy as np
import pytest

from streamload import SampleStream, load_config
from streamload.cli.main import build_parser, main
from tests.cli.test_cli import write_config


@pytest.mark.parametrize("flag", ["--pass", "--epoch"])
def test_samples_reads_the_pass_by_either_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: str
) -> None:
    config = write_config(tmp_path)
    out = tmp_path / "s.npy"
    args = ["samples", str(config), "--start", "3", "--count", "4", flag, "2", "--out", str(out)]
    assert main(args) == 0
    want, _ = SampleStream.from_config(load_config(config)).read(2, np.arange(3, 7))
    np.testing.assert_array_equal(np.load(out), want)
    err = capsys.readouterr().err
    assert ("--epoch is deprecated; use --pass" in err) == (flag == "--epoch")


@pytest.mark.parametrize("command", ["samples", "show"])
def test_help_names_pass_only(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main([command, "--help"])
    text = capsys.readouterr().out
    assert "--pass P" in text and "--epoch" not in text


def subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    return next(a.choices for a in parser._actions if isinstance(a, argparse._SubParsersAction))


def test_every_tokenize_option_has_help() -> None:
    undocumented = [
        action.option_strings[0]
        for action in subcommands()["tokenize"]._actions
        if action.option_strings and not action.help
    ]
    assert undocumented == []


def test_the_readme_lists_every_subcommand() -> None:
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    table = readme.split("## Command line", 1)[1].split("\n## ", 1)[0]
    rows = [line.split("|")[1] for line in table.splitlines() if line.startswith("| `streamload")]
    named = {word for row in rows for word in re.findall(r"[a-z]+", row)}
    assert sorted(set(subcommands()) - named) == []
