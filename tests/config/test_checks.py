"""The one validation layer (``streamload.config.checks``): unknown keys with the closest valid
one, integers in range (int64 at most), finite numbers, and the path of a bad value."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest

from streamload.config import load_config
from streamload.config.checks import INT64_MAX, check_count, check_int, check_number
from streamload.errors import ConfigError
from streamload.tokenize.config import flatten_options


def minimal(**top: Any) -> dict[str, Any]:
    return {"seq_len": 8, "sources": [{"name": "web", "path": "/data/web"}], **top}


def with_source(**fields: Any) -> dict[str, Any]:
    return minimal(sources=[{"name": "web", "path": "/data/web", **fields}])


@pytest.mark.parametrize(
    ("cfg", "match"),
    [
        (minimal(sed=3), r"config: unknown key\(s\) sed \(did you mean seed\?\); allowed: "),
        (minimal(seqlen=8), r"unknown key\(s\) seqlen \(did you mean seq_len\?\)"),
        (minimal(sampling={"shufle": True}), r"sampling: unknown key\(s\) shufle \(did you "),
        (with_source(dtyp="uint16"), r"sources\[0\]: unknown key\(s\) dtyp \(did you mean dtype"),
        (minimal(storage={"timout": 3}), r"storage: unknown key\(s\) timout \(did you mean tim"),
        (
            minimal(schedule=[{"start_step": 0, "weight": {"web": 1}}]),
            r"schedule\[0\]: unknown key\(s\) weight \(did you mean weights\? it belongs in "
            r"\[\[sources\]\]\)",
        ),
        (minimal(zzz=1), r"config: unknown key\(s\) zzz; allowed: batch_schedule, eos_token_id"),
        (minimal(shuffle=False), r"unknown key\(s\) shuffle \(it belongs in \[sampling\]\)"),
        (minimal(timeout=3), r"unknown key\(s\) timeout \(it belongs in \[storage\]\)"),
        (minimal(weight=3), r"unknown key\(s\) weight \(it belongs in \[\[sources\]\]\)"),
        (
            minimal(batch_size=4),
            r"unknown key\(s\) batch_size \(did you mean global_batch_size\? it is a loader "
            r"argument: build_loader\(batch_size=\.\.\.\)\)",
        ),
        (minimal(**{"sed": 1, "7": 2}), r"unknown key\(s\) 7, sed \(did you mean seed\?\)"),
    ],
)
def test_unknown_keys_name_the_closest_valid_one(cfg: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        load_config(cfg)


def test_keys_that_are_not_strings() -> None:
    with pytest.raises(ConfigError, match=r"config: key 3 \(int\) must be a string"):
        load_config({3: 1, **minimal()})
    with pytest.raises(ConfigError, match=r"sampling: key None \(NoneType\) must be a string"):
        load_config(minimal(sampling={None: 1}))


@pytest.mark.parametrize(
    ("cfg", "match"),
    [
        (minimal(seed=2**63), r"seed = 9223372036854775808 must be <= 9223372036854775807"),
        (minimal(seq_len=2**70), r"seq_len = 1180591620717411303424 must be <= "),
        (minimal(sampling={"num_samples": 2**64}), r"sampling\.num_samples = .* must be <="),
        (minimal(vocab_size=-(2**70)), r"vocab_size = -1180591620717411303424 must be >= 1"),
        (with_source(max_epochs=2**63), r"source 'web': max_epochs = .* must be <="),
    ],
)
def test_integers_beyond_int64(cfg: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        load_config(cfg)


def test_int64_max_is_fine() -> None:
    assert load_config(minimal(seed=INT64_MAX)).seed == INT64_MAX


@pytest.mark.parametrize(
    ("cfg", "match"),
    [
        (minimal(seed="1"), r"seed = '1' must be an integer"),
        (minimal(seed=1.5), r"seed = 1\.5 must be an integer"),
        (minimal(seed=True), r"seed = True must be an integer"),
        (minimal(seed=None), r"seed = None must be an integer"),
        (minimal(seq_len=float("nan")), r"seq_len = nan must be an integer"),
        (with_source(weight=[1]), r"source 'web': weight = \[1\] must be a number"),
        (with_source(path="/d/\x00x"), r"source 'web': path = '/d/\\x00x' holds a NUL character"),
        (with_source(path=["/a", "/b\x00"]), r"source 'web': path .* holds a NUL character"),
        (
            with_source(format="jsonl", tokenizer="t\x00.json", eos_token_id=0),
            r"source 'web': tokenizer = 't\\x00\.json' holds a NUL character",
        ),
    ],
)
def test_wrong_types_and_impossible_values(cfg: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        load_config(cfg)


@pytest.mark.parametrize(
    ("value", "kwargs", "match"),
    [
        (float("nan"), {}, r"x = nan must be a finite number"),
        (float("inf"), {}, r"x = inf must be a finite number"),
        (-1.0, {"minimum": 0.0}, r"x = -1\.0 must be finite and >= 0\.0"),
        (0.0, {"minimum": 0, "exclusive": True}, r"x = 0\.0 must be finite and > 0"),
        (float("nan"), {"minimum": 0}, r"x = nan must be finite and >= 0"),
        (True, {}, r"x = True must be a number"),
        ("2", {}, r"x = '2' must be a number"),
        (10**400, {}, r"x = 1000000000+\.\.\. must be a finite number"),
        (2e9, {"maximum": 1e9}, r"x = 2000000000\.0 must be finite and <= 1000000000\.0"),
    ],
)
def test_check_number(value: Any, kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        check_number(value, "x", **kwargs)


def test_messages_show_any_value() -> None:
    """An int too long for str() (or a list of one) is shown by its size, never a ValueError."""
    with pytest.raises(ConfigError, match=r"x = <an integer of 16610 bits> must be <= "):
        check_int(10**5000, "x", 0)
    with pytest.raises(ConfigError, match=r"x = <a list holding an integer too long to print>"):
        check_number([10**5000], "x")
    with pytest.raises(ConfigError, match=r"source name <an integer of 16610 bits> must be"):
        load_config(minimal(sources=[{"name": 10**5000, "path": "/d"}]))
    with pytest.raises(ConfigError, match=r"x = 'aaaa+\.\.\. must be a number"):
        check_number("a" * 1000, "x")


def test_check_int_accepts_the_bounds() -> None:
    check_int(0, "x", 0)
    check_int(INT64_MAX, "x", 0)
    check_int(5, "x", 0, maximum=5)
    with pytest.raises(ConfigError, match=r"x = 6 must be <= 5"):
        check_int(6, "x", 0, maximum=5)


def test_check_count_takes_numpy_integers_as_int() -> None:
    """Arguments given in code: a NumPy integer counts as one (and comes back an ``int``);
    bools, floats and values out of range are refused as :func:`check_int` refuses them."""
    got = check_count(np.int64(3), "x", 1)
    assert got == 3 and type(got) is int
    assert check_count(np.uint8(0), "x", 0, maximum=0) == 0
    for value, match in (
        (np.True_, r"x = np\.True_ must be an integer|x = True must be an integer"),
        (True, r"x = True must be an integer"),
        (4.0, r"x = 4\.0 must be an integer"),
        (np.int32(0), r"x = 0 must be >= 1"),
        (2**63, r"x = 9223372036854775808 must be <= 9223372036854775807"),
    ):
        with pytest.raises(ConfigError, match=match):
            check_count(value, "x", 1)


def test_every_unknown_key_of_every_table_at_once() -> None:
    """Three typos in three tables are one error naming each with its suggestion."""
    cfg = {
        **with_source(pth="/d", dtyp="uint16"),
        "sed": 1,
        "batch_size": 4,
        "sampling": {"shufle": True},
        "schedule": [{"start_step": 0, "weights": {"web": 1}}, {"start_stp": 9}],
    }
    with pytest.raises(ConfigError) as caught:
        load_config(cfg)
    message = str(caught.value)
    assert "\n" not in message
    parts = [
        r"config: unknown key\(s\) batch_size \(did you mean global_batch_size\? it is a loader "
        r"argument: build_loader\(batch_size=\.\.\.\)\), sed \(did you mean seed\?\); allowed: ",
        r"; sources\[0\]: unknown key\(s\) dtyp \(did you mean dtype\?\), pth \(did you mean "
        r"path\?\); allowed: ",
        r"; sampling: unknown key\(s\) shufle \(did you mean shuffle\?\); allowed: ",
        r"; schedule\[1\]: unknown key\(s\) start_stp \(did you mean start_step\?\); allowed: ",
    ]
    assert re.fullmatch(".*".join(f"(?:{p})" for p in parts) + ".*", message), message


def test_a_misspelled_source_in_a_schedule_names_the_one_meant() -> None:
    cfg = minimal(
        sources=[{"name": "web", "path": "/a", "weight": 1}, {"name": "code", "path": "/b"}],
        global_batch_size=4,
        schedule=[{"start_step": 0, "weights": {"webb": 1, "cod": 1, "zzz": 2}}],
    )
    cfg["sources"][1]["weight"] = 1
    with pytest.raises(
        ConfigError,
        match=r"unknown source\(s\) cod \(did you mean code\?\), webb \(did you mean web\?\), "
        r"zzz; no weight for web, code",
    ):
        load_config(cfg)


def test_every_unknown_key_of_a_nested_tokenize_table_at_once() -> None:
    with pytest.raises(
        ConfigError,
        match=r"^tokenizer\.name_or_pth: unknown key \(did you mean name_or_path\?\); allowed: "
        r".*; work_dir\.inptu: unknown key \(did you mean input\?\); allowed: input, output; "
        r"work_dir\.7: unknown key; allowed: input, output$",
    ):
        flatten_options({"tokenizer": {"name_or_pth": "t"}, "work_dir": {"inptu": "a", 7: "b"}})


def test_a_modes_own_sampling_keys_are_not_unknown() -> None:
    """``[sampling]`` holds the shared keys and the mode's own (``long_documents``)."""
    cfg = minimal(
        pad_token_id=1,
        sampling={"mode": "packed", "long_documents": "split", "shufle": True},
        packing={"mask": True},
    )
    with pytest.raises(ConfigError) as caught:
        load_config(cfg)
    message = str(caught.value)
    assert message.startswith("sampling: unknown key(s) shufle (did you mean shuffle?); ")
    assert "; packing: unknown key(s) mask (did you mean masks?); " in message
    assert "long_documents" not in message.split("allowed:")[0]
