"""A CLI error about a config names the config file, on one line; the library's exceptions
keep their message and carry the file as a note (issue 36 item 12)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from streamload.cli.main import main
from streamload.config import load_config
from streamload.errors import ConfigError


def write(folder: Path, body: str, name: str = "data.toml") -> Path:
    """A config file over one NumPy shard folder ``shards/`` (tokens 1000..1299)."""
    shards = folder / "shards"
    shards.mkdir(exist_ok=True)
    np.save(shards / "shard_00000.npy", np.arange(1000, 1300, dtype=np.uint16))
    config = folder / name
    config.write_text(body)
    return config


SOURCE = '[[sources]]\nname = "web"\npath = "shards/"\n'


def error_of(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """The one line a failing command prints (exit 2)."""
    assert main(list(argv)) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1, err
    return err.strip()


def run_each(config: Path) -> list[list[str]]:
    """A command line of each subcommand that reads a data config."""
    return [
        ["plan", str(config)],
        ["samples", str(config), "--start", "0", "--count", "1", "--out", "x.npy"],
        ["show", str(config), "--step", "0", "--batch-size", "1"],
    ]


def test_a_bad_value_names_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = write(tmp_path, f'seq_len = 8\n{SOURCE}[sampling]\nmode = "x"\n')
    for argv in run_each(config):
        assert error_of(capsys, *argv) == (
            f"streamload {argv[0]}: error: {config}: sampling.mode = 'x' is not one of "
            "'concat', 'megatron', 'packed', 'padded', 'vsl'"
        )


def test_a_missing_path_names_file_source_field_and_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write(tmp_path, 'seq_len = 8\n[[sources]]\nname = "web"\npath = "gone"\n')
    for argv in run_each(config):
        assert error_of(capsys, *argv) == (
            f"streamload {argv[0]}: error: {config}: source 'web': path '{tmp_path}/gone': no "
            "such file or folder"
        )
    config.write_text('seq_len = 8\n[[sources]]\nname = "web"\npath = "shards/*.bin"\n')
    assert error_of(capsys, "plan", str(config)).startswith(
        f"streamload plan: error: {config}: source 'web': path '{tmp_path}/shards/*.bin' "
        "matches no token files (looked for *.npy"
    )


def test_every_unknown_key_on_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    body = f"seq_len = 8\nsed = 1\n{SOURCE}pth = 1\n[sampling]\nshufle = true\n"
    config = write(tmp_path, body)
    line = error_of(capsys, "plan", str(config))
    assert line.startswith(
        f"streamload plan: error: {config}: config: unknown key(s) sed (did you mean seed?); "
    )
    assert "; sources[0]: unknown key(s) pth (did you mean path?); allowed: " in line
    assert "; sampling: unknown key(s) shufle (did you mean shuffle?); allowed: " in line


def test_the_file_is_named_once_and_as_given(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Errors that already start with the file (missing, unparsable) are not prefixed again,
    also when the path was given as ``./data.toml``."""
    monkeypatch.chdir(tmp_path)
    assert error_of(capsys, "plan", "./none.toml") == (
        "streamload plan: error: none.toml: config file not found"
    )
    write(tmp_path, "seq_len = = 8\n")
    assert error_of(capsys, "plan", "./data.toml").startswith(
        "streamload plan: error: data.toml: cannot parse config as TOML at line 1"
    )
    write(tmp_path, "seq_len = 0\n" + SOURCE, name="zero.toml")
    assert error_of(capsys, "show", "zero.toml", "--step", "0") == (
        "streamload show: error: zero.toml: seq_len = 0 must be >= 1"
    )


def test_inspect_names_the_config_it_was_given(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write(tmp_path, f"seq_len = 8\neos_token_id = -1\n{SOURCE}")
    assert error_of(capsys, "inspect", str(tmp_path / "shards"), "--config", str(config)) == (
        f"streamload inspect: error: {config}: eos_token_id = -1 must be >= 0"
    )


def test_a_flag_error_is_not_put_on_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write(tmp_path, f"seq_len = 8\n{SOURCE}")
    assert error_of(capsys, "show", str(config), "--step", "-1") == (
        "streamload show: error: --step = -1 must be >= 0"
    )


def test_library_errors_keep_their_message_and_note(tmp_path: Path) -> None:
    config = write(tmp_path, f'seq_len = 8\n{SOURCE}[sampling]\nmode = "x"\n')
    with pytest.raises(ConfigError) as caught:
        load_config(config)
    assert str(caught.value).startswith("sampling.mode = 'x' is not one of")
    assert caught.value.__notes__ == ["in sampling", f"in config file {config}"]
