"""Reading a config file and what ``load_config`` accepts: every bad input is a ConfigError
naming the file (and the line, for a syntax error), never a traceback from a parser."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest

from streamload.config import load_config
from streamload.config.checks import MAX_CONFIG_BYTES
from streamload.errors import ConfigError

VALID_TOML = "seq_len = 8\n[[sources]]\nname = 'web'\npath = '/data/web'\n"


def write(tmp_path: Path, name: str, content: str | bytes) -> Path:
    path = tmp_path / name
    if isinstance(content, str):
        path.write_text(content, encoding="utf-8")
    else:
        path.write_bytes(content)
    return path


@pytest.mark.parametrize("name", ["c.toml", "c.yaml", "c.json"])
def test_a_file_that_is_not_utf8(tmp_path: Path, name: str) -> None:
    path = write(tmp_path, name, "seq_len = 8\n# café\n".encode("latin-1"))
    with pytest.raises(
        ConfigError, match=rf"c\.{name[2:]}: config is not UTF-8 text \(byte 0xe9 at line 2"
    ):
        load_config(path)


def test_random_bytes_as_a_config(tmp_path: Path) -> None:
    path = write(tmp_path, "shard.bin", bytes(range(256)) * 4)
    with pytest.raises(ConfigError, match=r"shard\.bin: config is not UTF-8 text"):
        load_config(path)


def test_a_utf8_byte_order_mark_is_accepted(tmp_path: Path) -> None:
    path = write(tmp_path, "bom.toml", b"\xef\xbb\xbf" + VALID_TOML.encode())
    assert load_config(path).seq_len == 8


def test_a_huge_file_is_refused_before_it_is_read(tmp_path: Path) -> None:
    path = tmp_path / "data.toml"
    with open(path, "wb") as fh:
        fh.truncate(MAX_CONFIG_BYTES + 1)
    with pytest.raises(ConfigError, match=rf"data\.toml: {MAX_CONFIG_BYTES + 1} bytes"):
        load_config(path)


@pytest.mark.parametrize(
    ("name", "text", "where"),
    [
        ("c.toml", "seq_len = 8\nseed = = 3\n", r"TOML at line 2, column 8: Invalid value"),
        ("c.yaml", "seq_len: 8\nsources: [1\n", r"YAML at line 3, column 1: expected ','"),
        ("c.json", '{"seq_len": 8,\n "seed": }', r"JSON at line 2, column 10: Expecting value"),
        ("c.yaml", "seq_len: 8\nbad: \x07\n", r"YAML at line 2, column 6: special characters"),
    ],
)
def test_syntax_errors_name_the_file_and_line(
    tmp_path: Path, name: str, text: str, where: str
) -> None:
    path = write(tmp_path, name, text)
    with pytest.raises(
        ConfigError, match=rf"{re.escape(str(path))}: cannot parse config as {where}"
    ):
        load_config(path)


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("deep.json", "[" * 100_000),
        ("deep.yaml", "[" * 100_000),
        ("deep.toml", "a = " + "[" * 100_000),
    ],
)
def test_nesting_too_deep_for_the_parser(tmp_path: Path, name: str, text: str) -> None:
    path = write(tmp_path, name, text)
    with pytest.raises(ConfigError, match=rf"{name}: cannot parse config.*nested too deeply"):
        load_config(path)


def test_nesting_deeper_than_a_config_needs(tmp_path: Path) -> None:
    path = write(tmp_path, "deep.json", '{"seq_len": 8, "x": ' + "[" * 60 + "]" * 60 + "}")
    with pytest.raises(ConfigError, match=r"deep\.json: x\[0\]\[0\].* nested deeper than 32"):
        load_config(path)


def test_a_yaml_alias_bomb_is_refused(tmp_path: Path) -> None:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)]
    path = write(tmp_path, "bomb.yaml", "\n".join(lines) + "\n")
    with pytest.raises(ConfigError, match=r"bomb\.yaml: .*more than 100000 values"):
        load_config(path)


def test_a_self_referencing_yaml_value(tmp_path: Path) -> None:
    path = write(tmp_path, "loop.yaml", "seq_len: 8\nx: &x [*x]\n")
    with pytest.raises(ConfigError, match=r"loop\.yaml: x(\[0\])+ .*nested deeper than 32"):
        load_config(path)


@pytest.mark.parametrize(
    ("name", "text", "match"),
    [
        ("c.yaml", "seq_len: 8\n1: 2\n", r"c\.yaml: key 1 \(int\) must be a string"),
        ("c.yaml", "seq_len: 8\n~: 2\n", r"c\.yaml: key None \(NoneType\) must be a string"),
        ("c.yaml", "seq_len: 8\nsampling: {true: 1}\n", r"sampling: key True \(bool\) must be"),
        ("c.yaml", "seq_len: 8\nseed: 2020-01-01\n", r"seed = datetime\.date\(2020, 1, 1\) is of"),
        ("c.toml", "seq_len = 8\nseed = 2020-01-01\n", r"c\.toml: seed = datetime\.date\(2020"),
        ("c.yaml", "seq_len: 8\nseed: !!binary aGk=\n", r"seed = b'hi' is of type bytes"),
        ("c.yaml", "seq_len: 8\nseed: !!set {a}\n", r"seed = \{'a'\} is of type set"),
        ("c.toml", "seq_len = 8\n[[sources]]\nname='w'\npath='/d'\nstorage_options = "
         "{t = 07:32:00}\n", r"sources\[0\]\.storage_options\.t = datetime\.time"),
    ],
)  # fmt: skip
def test_values_no_config_field_can_hold(tmp_path: Path, name: str, text: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        load_config(write(tmp_path, name, text))


@pytest.mark.parametrize(
    ("name", "text", "match"),
    [
        (
            "c.yaml",
            "seq_len: 8\nseed: 1\nseed: 2\n",
            r"c\.yaml: cannot parse config as YAML at line 3, column 1: key 'seed' appears twice",
        ),
        ("c.yaml", "seq_len: 8\nsampling:\n  shuffle: true\n  shuffle: false\n", r"'shuffle'"),
        (
            "c.json",
            '{"seq_len": 8, "seq_len": 9}',
            r"c\.json: .* JSON: key 'seq_len' appears twice",
        ),
    ],
)
def test_duplicate_keys(tmp_path: Path, name: str, text: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        load_config(write(tmp_path, name, text))


@pytest.mark.parametrize(
    ("config", "kind"),
    [(None, "NoneType"), ([1, 2], "list"), (3, "int"), (b"c.toml", "bytes"), (2.5, "float")],
)
def test_what_is_not_a_config(config: Any, kind: str) -> None:
    with pytest.raises(
        ConfigError,
        match=rf"config = .*: expected a path to a TOML/YAML/JSON file, a mapping or a "
        rf"DataConfig, got {kind}",
    ):
        load_config(config)


@pytest.mark.parametrize("text", ["", "# only a comment\n", "---\n"])
def test_an_empty_yaml_file(tmp_path: Path, text: str) -> None:
    with pytest.raises(ConfigError, match=r"empty\.yaml: the config file is empty"):
        load_config(write(tmp_path, "empty.yaml", text))


def test_a_folder_is_not_a_config(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=rf"{re.escape(str(tmp_path))}: a folder, not a config"):
        load_config(tmp_path)
    with pytest.raises(ConfigError, match=r"gone\.yaml: config file not found"):
        load_config(str(tmp_path / "gone.yaml"))


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file")
def test_an_unreadable_file(tmp_path: Path) -> None:
    path = write(tmp_path, "secret.toml", VALID_TOML)
    path.chmod(0)
    with pytest.raises(ConfigError, match=r"secret\.toml: cannot read config: .*Permission"):
        load_config(path)
