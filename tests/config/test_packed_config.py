"""``sampling.mode = "packed" | "padded"`` in the config: ``pad_token_id``,
``sampling.long_documents`` and the options that have no meaning with whole documents."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from streamload.config import (
    DataConfig,
    LongDocuments,
    SamplingConfig,
    SamplingMode,
    load_config,
)
from streamload.errors import ConfigError

MODES = ["packed", "padded"]


def config(mode: str = "packed", pad: int | None = 1, **top: Any) -> dict[str, Any]:
    """A one-source config of ``mode``; ``sampling`` in ``top`` adds to the table."""
    sampling = {"mode": mode, **top.pop("sampling", {})}
    cfg: dict[str, Any] = {"seq_len": 8, "eos_token_id": 0, "sampling": sampling, **top}
    cfg.setdefault("sources", [{"name": "web", "path": "/data/web"}])
    if pad is not None:
        cfg["pad_token_id"] = pad
    return cfg


def mixture(mode: str = "packed", **top: Any) -> dict[str, Any]:
    sources = [{"name": n, "path": f"/data/{n}", "weight": w} for n, w in (("a", 3), ("b", 1))]
    return config(mode, sources=sources, global_batch_size=4, **top)


def jsonl(**ids: int) -> list[dict[str, Any]]:
    return [{"name": "docs", "path": "/d/*.jsonl", "format": "jsonl", "tokenizer": "t.json", **ids}]


def refused(cfg: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        load_config(cfg)


def test_mode_and_long_document_values() -> None:
    assert [m.value for m in SamplingMode] == ["concat", "megatron", "packed", "padded", "vsl"]
    assert [m.value for m in LongDocuments] == ["split", "truncate", "drop"]
    assert [m for m in SamplingMode if m.whole_documents] == [
        SamplingMode.PACKED,
        SamplingMode.PADDED,
    ]
    sampling = SamplingConfig(mode="padded", long_documents="truncate")  # type: ignore[arg-type]
    assert (sampling.mode, sampling.long_documents) == (SamplingMode.PADDED, LongDocuments.TRUNCATE)


def test_the_issue_contract_loads_from_toml(tmp_path: Path) -> None:
    path = tmp_path / "data.toml"
    path.write_text(
        "seq_len = 2048\neos_token_id = 0\npad_token_id = 1\n"
        '[sampling]\nmode = "packed"\nlong_documents = "split"\n'
        '[[sources]]\nname = "web"\npath = "web/"\n'
    )
    cfg = load_config(path)
    assert (cfg.sampling.mode, cfg.sampling.long_documents) == (
        SamplingMode.PACKED,
        LongDocuments.SPLIT,
    )
    assert (cfg.eos_token_id, cfg.pad_token_id) == (0, 1)


@pytest.mark.parametrize("mode", MODES)
def test_defaults_of_a_whole_document_mode(mode: str) -> None:
    cfg = load_config(config(mode))
    assert cfg.sampling.long_documents is LongDocuments.SPLIT
    assert cfg.sampling.shuffle is True and cfg.sampling.shuffle_block == 0
    assert not cfg.is_mixture


@pytest.mark.parametrize("mode", MODES)
def test_pad_token_id_is_required(mode: str) -> None:
    refused(config(mode, pad=None), rf"pad_token_id is required with sampling\.mode = '{mode}'")


@pytest.mark.parametrize("mode", MODES)
def test_pad_token_id_must_differ_from_eos_token_id(mode: str) -> None:
    refused(
        config(mode, pad=0),
        rf"pad_token_id = 0 equals eos_token_id = 0; with sampling\.mode = '{mode}' they must",
    )
    assert load_config(config(mode, pad=0, eos_token_id=5)).pad_token_id == 0
    without_eos = config(mode, pad=0)
    del without_eos["eos_token_id"]  # documents from the format's index
    assert load_config(without_eos).eos_token_id is None


@pytest.mark.parametrize(
    ("ids", "match"),
    [
        ({"eos_token_id": 1}, r"pad_token_id = 1 equals source 'docs': eos_token_id = 1"),
        ({"bos_token_id": 1}, r"pad_token_id = 1 equals source 'docs': bos_token_id = 1"),
    ],
)
def test_pad_token_id_must_differ_from_a_tokenizing_sources_ids(
    ids: dict[str, int], match: str
) -> None:
    refused(config(sources=jsonl(**ids)), match)
    assert load_config(config(sources=jsonl(bos_token_id=2, eos_token_id=3))).pad_token_id == 1


@pytest.mark.parametrize("mode", ["packed", "concat"])
@pytest.mark.parametrize(
    ("pad", "match"),
    [
        (-1, r"pad_token_id = -1 must be >= 0"),
        (True, r"pad_token_id = True must be an integer"),
        (1.0, r"pad_token_id = 1\.0 must be an integer"),
        ("1", r"pad_token_id = '1' must be an integer"),
        (2**63, r"pad_token_id = 9223372036854775808 must be <= 9223372036854775807"),
        (100, r"pad_token_id = 100 must be < vocab_size = 100"),
    ],
)
def test_pad_token_id_values(mode: str, pad: Any, match: str) -> None:
    refused(config(mode, pad=pad, vocab_size=100), match)


def test_pad_token_id_below_vocab_size_is_fine() -> None:
    assert load_config(config(pad=99, vocab_size=100)).pad_token_id == 99


def test_pad_token_id_is_data_description_in_concat_mode() -> None:
    """Unused there (concat windows hold no padding), so a config switches modes by one key."""
    cfg = load_config(config("concat", pad=1))
    assert (cfg.sampling.mode, cfg.pad_token_id) == (SamplingMode.CONCAT, 1)
    assert load_config(config("concat", pad=0)).pad_token_id == 0  # equal to eos: unused


def test_pad_token_id_is_refused_in_megatron_mode() -> None:
    refused(
        config("megatron", sampling={"num_samples": 10}),
        r"pad_token_id = 1 has no meaning with sampling\.mode = 'megatron'.*-1",
    )


def test_long_documents_values() -> None:
    refused(
        config(sampling={"long_documents": "skip"}),
        r"sampling\.long_documents = 'skip' is not one of 'split', 'truncate', 'drop'",
    )
    refused(config(sampling={"long_documents": True}), r"sampling\.long_documents = True")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("value", ["split", "truncate", "drop"])
def test_long_documents_in_whole_document_modes(mode: str, value: str) -> None:
    cfg = load_config(config(mode, sampling={"long_documents": value}))
    assert cfg.sampling.long_documents is LongDocuments(value)


@pytest.mark.parametrize(("mode", "extra"), [("concat", {}), ("megatron", {"num_samples": 10})])
def test_long_documents_only_in_whole_document_modes(mode: str, extra: dict[str, Any]) -> None:
    refused(
        config(mode, pad=None, sampling={"long_documents": "truncate", **extra}),
        rf"sampling\.long_documents = 'truncate' applies only to mode = 'packed' or 'padded', "
        rf"but mode = '{mode}'",
    )
    default = config(mode, pad=None, sampling={"long_documents": "split", **extra})
    assert load_config(default).sampling.long_documents is LongDocuments.SPLIT


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    ("key", "value", "shown"),
    [
        ("add_extra_token", False, "False"),
        ("drop_last_partial", False, "False"),
    ],
)
def test_megatron_only_keys_are_refused(mode: str, key: str, value: Any, shown: str) -> None:
    refused(
        config(mode, sampling={key: value}),
        rf"sampling\.{key} = {shown} applies only to mode = 'megatron', but mode = '{mode}'",
    )


@pytest.mark.parametrize("mode", MODES)
def test_cross_shard_false_is_refused(mode: str) -> None:
    refused(
        config(mode, sampling={"cross_shard": False}),
        rf"sampling\.cross_shard = false has no meaning with mode = '{mode}': items are whole "
        r"documents or pieces of one, which never span two shards",
    )


@pytest.mark.parametrize("mode", MODES)
def test_sample_order_options_keep_their_meaning(mode: str) -> None:
    sampling = {"shuffle": True, "shuffle_block": 64, "num_samples": 1000, "cross_shard": True}
    cfg = load_config(config(mode, sampling=sampling))
    assert (cfg.sampling.shuffle_block, cfg.sampling.num_samples) == (64, 1000)
    assert load_config(config(mode, sampling={"shuffle": False})).sampling.shuffle is False
    refused(config(mode, sampling={"shuffle": False, "shuffle_block": 4}), r"needs shuffle = true")


@pytest.mark.parametrize("mode", MODES)
def test_mixtures_allocate_samples(mode: str) -> None:
    schedule = [{"start_step": 10, "weights": {"a": 1, "b": 1}}]
    cfg = load_config(mixture(mode, schedule=schedule, mixture={"temperature": 2.0}))
    assert cfg.is_mixture and cfg.schedule[0].start_step == 10
    refused(
        mixture(mode, mixture={"unit": "tokens"}),
        rf"mixture\.unit = 'tokens' with sampling\.mode = '{mode}': .* use unit = 'samples'",
    )
    refused(config(mode, sources=mixture()["sources"]), r"a mixture needs global_batch_size")


def test_concat_mode_is_judged_as_before() -> None:
    """The whole-document rules stay out of concat mode (tokens equal samples there)."""
    cfg = load_config(config("concat", pad=0, mixture={"unit": "tokens"}, sampling={}))
    assert cfg.mixture.unit.value == "tokens"
    refused(
        config("concat", sampling={"add_extra_token": False}), r"applies only to mode = 'megatron'"
    )


@pytest.mark.parametrize(
    ("mode", "long_documents"),
    [("packed", "truncate"), ("padded", "truncate"), ("concat", "split")],
)
def test_round_trips(mode: str, long_documents: str, tmp_path: Path) -> None:
    cfg = load_config(config(mode, sampling={"long_documents": long_documents}))
    plain = cfg.to_dict()
    assert plain["pad_token_id"] == 1 and plain["sampling"]["mode"] == mode
    # a mode prints its own [sampling] keys only: concat has no long_documents to print
    assert plain["sampling"].get("long_documents", "split") == long_documents
    assert ("long_documents" in plain["sampling"]) == (mode != "concat")
    assert cfg.sampling.long_documents.value == long_documents
    assert DataConfig.from_dict(plain) == cfg
    assert json.loads(json.dumps(plain)) == plain
    (tmp_path / "again.json").write_text(cfg.to_json())
    assert load_config(tmp_path / "again.json") == cfg


def test_an_unset_pad_token_id_is_not_printed() -> None:
    plain = load_config(config("concat", pad=None)).to_dict()
    assert "pad_token_id" not in plain


@pytest.mark.parametrize(
    ("cfg", "match"),
    [
        (
            config(pad=None, sampling={"pad_token_id": 1}),
            r"sampling: unknown key\(s\) pad_token_id \(it belongs in the top level\)",
        ),
        (
            config(long_documents="split"),
            r"config: unknown key\(s\) long_documents "
            r"\(it belongs in \[sampling\] \(mode = 'packed' or 'padded'\)\)",
        ),
    ],
)
def test_keys_in_the_wrong_table_say_where_they_go(cfg: dict[str, Any], match: str) -> None:
    refused(cfg, match)


def test_errors_in_a_file_name_the_file(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("seq_len: 8\nsampling: {mode: padded}\nsources: [{name: w, path: /d}]\n")
    with pytest.raises(ConfigError, match=r"pad_token_id is required") as info:
        load_config(path)
    assert any(str(path) in note for note in getattr(info.value, "__notes__", []))


def test_to_json_refuses_an_integer_too_long_to_print() -> None:
    """Found by the config fuzz (dict case 213 once it drew the new keys): a storage_options
    value given in a dict beyond Python's limit of digits for ``str()`` made ``to_json`` raise
    json's ValueError; it is a ConfigError naming the path."""
    cfg = load_config(
        config("concat", sources=[{"name": "w", "path": "/d", "storage_options": {"x": 10**5000}}])
    )
    assert cfg.to_dict()["sources"][0]["storage_options"]["x"] == 10**5000
    with pytest.raises(
        ConfigError,
        match=r"cannot print the config as JSON: sources\[0\]\.storage_options\.x = <an integer "
        r"of 16610 bits> has more digits than Python prints",
    ):
        cfg.to_json()
