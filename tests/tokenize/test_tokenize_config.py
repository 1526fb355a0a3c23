"""Bad ``streamload tokenize`` input is a :class:`ConfigError` naming it, never a traceback.

The config parser and the command line are fuzzed: any mapping of options (valid names with
values of every type, nested dolma tables, unknown and non-string keys), and any bytes in a
config file, give a valid config or a ``StreamloadError``.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamload.cli.main import main
from streamload.errors import ConfigError, StreamloadError
from streamload.tokenize.config import TokenizeConfig, load_tokenize_config
from streamload.tokenize.outputs import choose_dtype

FIELDS = [
    "documents", "destination", "tokenizer", "bos_token_id", "eos_token_id", "pad_token_id",
    "segment_before_tokenization", "format", "dtype", "max_size", "processes",
    "files_per_process", "ring_size", "batch_size", "seed", "text_field", "id_field",
    "work_dir_input", "work_dir_output", "shard_index", "num_shards", "skip_bad_lines",
]  # fmt: skip
VALID = {"documents": ["in/*.jsonl"], "destination": "out", "tokenizer": "tok.json",
         "eos_token_id": 0}  # fmt: skip


def check(data: Any) -> TokenizeConfig | None:
    """The config of ``data`` (also through the dtype check), or ``None`` after a
    StreamloadError; any other exception fails the test."""
    try:
        config = TokenizeConfig.from_dict(data)
        special = {k: getattr(config, k) for k in ("bos_token_id", "eos_token_id", "pad_token_id")}
        choose_dtype(config.format, config.dtype, 300, special)
    except StreamloadError:
        return None
    assert Path(config.destination).is_absolute()
    assert TokenizeConfig.from_dict(config.to_dict()) == config  # normalized once, stable
    return config


SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([0, 1, 2, 299, 300, 65535, 2**31, 2**63, 2**64]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.sampled_from(["", "auto", "uint16", "int8", "i4,i4", "(2,)i4", "M8", "O", "S5", "int64[",
                     "dolma", "numpy", "megatron", "datatrove", "modalities", "jsonl", "s3://b/x",
                     "file:///tmp/x", "./x", "../x", "a\x00b", "text.inner", " "]),
)  # fmt: skip
PLAUSIBLE = st.one_of(
    st.integers(min_value=0, max_value=70_000),
    st.booleans(),
    st.none(),
    st.sampled_from(["auto", "uint16", "uint32", "numpy", "megatron", "datatrove", "modalities",
                     "./x", "../x", "x/y", "file:///tmp/x", "id", "text.inner"]),
)  # fmt: skip
"""Values of the right type more often than not, so many cases are valid configs."""
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=6,
)
KEYS = st.one_of(
    *[st.sampled_from(FIELDS)] * 12,
    st.sampled_from(["tokenizer", "work_dir", "dryrun", "max-size", "bogus"]),
    st.text(max_size=6),
    st.integers(),  # YAML allows them
)
"""Mostly valid names."""
TOKENIZER_KEYS = ["name_or_path", "bos_token_id", "eos_token_id", "pad_token_id",
                  "segment_before_tokenization"]  # fmt: skip
NESTED = st.fixed_dictionaries(
    {},
    optional={
        "tokenizer": st.fixed_dictionaries(
            {"name_or_path": st.one_of(st.just("tok.json"), VALUES)},
            optional={k: st.one_of(PLAUSIBLE, VALUES) for k in TOKENIZER_KEYS[1:]},
        ),
        "work_dir": st.dictionaries(st.sampled_from(["input", "output"]), PLAUSIBLE, max_size=2),
    },
)

FUZZ_EXAMPLES = 400


@settings(
    max_examples=FUZZ_EXAMPLES,
    derandomize=True,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)
@given(
    base=st.sampled_from([{}, VALID, VALID, VALID]),
    changes=st.dictionaries(KEYS, st.one_of(PLAUSIBLE, PLAUSIBLE, VALUES), max_size=3),
    nested=NESTED,
)
def test_fuzzed_options_give_a_config_or_a_config_error(
    base: dict[str, Any], changes: dict[Any, Any], nested: dict[str, Any]
) -> None:
    check({**base, **nested, **changes})


@pytest.mark.parametrize("data", [None, [], ["documents"], "documents = 1", 5, b"x"])
def test_a_config_that_is_not_a_table_is_refused(data: Any) -> None:
    with pytest.raises(ConfigError, match="must be a table of options"):
        TokenizeConfig.from_dict(data)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"segment_before_tokenization": "yes"}, "segment_before_tokenization = 'yes' must be"),
        ({"skip_bad_lines": 1}, "skip_bad_lines = 1 must be"),
        ({"work_dir_output": ["a"]}, r"work_dir_output = \['a'\] must be"),
        ({"work_dir_input": 5}, "work_dir_input = 5 must be"),
        ({"documents": [1]}, "documents = 1 must be"),
        ({"documents": ["a\x00b"]}, "NUL"),
        ({"tokenizer": {"name_or_path": 5}}, "tokenizer = 5 must be"),
        ({"seed": 2**64}, "seed = 18446744073709551616 must be <="),
        ({"max_size": 1.5}, "max_size = 1.5 must be an integer"),
        ({1: "x"}, "key 1 must be a string"),
        ({"work_dir": {2: "x"}}, "work_dir.2: unknown key"),
        ({"format": ["numpy"]}, r"format = \['numpy'\] is not one of"),
        ({"destination": "s3://bucket/out"}, "tokenize writes into a local folder"),
    ],
)
def test_a_wrong_type_names_the_field(change: dict[Any, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        TokenizeConfig.from_dict({**VALID, **change})


@pytest.mark.parametrize("dtype", ["i4,i4", "(2,)i4", "M8", "O", "int64[", "float32", "S5"])
def test_a_dtype_that_is_no_integer_is_refused(dtype: str) -> None:
    with pytest.raises(ConfigError, match="dtype"):
        choose_dtype(TokenizeConfig.from_dict({**VALID, "dtype": dtype}).format, dtype, 300, {})


@pytest.mark.parametrize("suffix", [".json", ".yaml", ".toml"])
def test_a_config_file_that_is_not_utf8_is_a_config_error(
    tmp_path: Path, suffix: str, capsys: pytest.CaptureFixture
) -> None:
    path = tmp_path / f"c{suffix}"
    path.write_bytes(b'{"destination": "\xff\xfe out"}\n')
    with pytest.raises(ConfigError, match=str(path)):
        load_tokenize_config(path)
    assert main(["tokenize", "-c", str(path), "--dryrun"]) == 2
    assert str(path) in capsys.readouterr().err


def test_format_jsonl_checks_its_options(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"documents": 5, "tokenizer": "tok.json", "eos_token_id": 0}))
    assert main(["tokenize", "-c", str(path), "--format", "jsonl"]) == 2
    assert "--format jsonl needs --documents, got 5" in capsys.readouterr().err
    path.write_text(json.dumps({"documents": ["a.jsonl"], "tokenizer": 7}))
    assert main(["tokenize", "-c", str(path), "--format", "jsonl"]) == 2
    assert "tokenizer = 7 must be" in capsys.readouterr().err


def test_bad_command_line_values_exit_2_with_a_reason(capsys: pytest.CaptureFixture) -> None:
    for bad in (["--max-size", "x"], ["--format", "bogus"], ["--processes", "1.5"]):
        with pytest.raises(SystemExit) as exc:
            main(["tokenize", *bad])
        assert exc.value.code == 2
        assert "error: argument" in capsys.readouterr().err


FILE_CASES = 300


def test_fuzzed_config_files_give_a_config_or_a_config_error(tmp_path: Path) -> None:
    """Seeded byte mutations (flips, cuts, inserted bytes such as non-UTF-8 ones) of valid
    JSON, YAML and TOML config files."""
    sources = {
        ".json": json.dumps({**VALID, "tokenizer": {"name_or_path": "tok.json"}}).encode(),
        ".yaml": b"documents: [in/*.jsonl]\ndestination: out\ntokenizer:\n"
        b"  name_or_path: tok.json\n  eos_token_id: 0\nmax_size: 1000\n",
        ".toml": b'documents = ["in/*.jsonl"]\ndestination = "out"\nmax_size = 1000\n'
        b'[tokenizer]\nname_or_path = "tok.json"\neos_token_id = 0\n',
    }
    rng = random.Random(22)
    outcomes = {"config": 0, "error": 0}
    for case in range(FILE_CASES):
        suffix = rng.choice(sorted(sources))
        data = bytearray(sources[suffix])
        for _ in range(rng.randint(1, 4)):
            at = rng.randrange(len(data))
            kind = rng.randrange(3)
            if kind == 0:
                data[at] = rng.randrange(256)
            elif kind == 1:
                del data[at:]
                data.extend(b"x")
            else:
                data[at:at] = bytes([rng.choice([0x80, 0xC3, 0xFF, 0x00, 0x22, 0x5B, 0x7B])])
        path = tmp_path / f"c{case}{suffix}"
        path.write_bytes(bytes(data))
        try:
            parsed = load_tokenize_config(path)
        except StreamloadError:
            outcomes["error"] += 1
            continue
        outcomes["config" if check(parsed) is not None else "error"] += 1
    assert outcomes["config"] > 0 and outcomes["error"] > 0, outcomes
