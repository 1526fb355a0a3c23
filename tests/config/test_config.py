"""Config loading: TOML/YAML/JSON/dict agree, round trips, strict validation, relative paths."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import streamload
from streamload.config import DataConfig, SamplingMode, ShardFormat, load_config
from streamload.errors import ConfigError

TOML = """
seq_len = 16
seed = 7
eos_token_id = 0
vocab_size = 1000
global_batch_size = 8

[sampling]
shuffle = false
num_samples = 100
cross_shard = false

[packing]
masks = true

[[sources]]
name = "web"
path = ["{root}/a", "{root}/b/*.npy"]
format = "npy"
dtype = "uint16"
weight = 1.5
storage_options = {{ anon = true }}
"""

YAML = """
seq_len: 16
seed: 7
eos_token_id: 0
vocab_size: 1000
global_batch_size: 8
sampling: {{shuffle: false, num_samples: 100, cross_shard: false}}
packing: {{masks: true}}
sources:
  - name: web
    path: ["{root}/a", "{root}/b/*.npy"]
    format: npy
    dtype: uint16
    weight: 1.5
    storage_options: {{anon: true}}
"""


def full_dict(root: str) -> dict[str, Any]:
    return {
        "seq_len": 16,
        "seed": 7,
        "eos_token_id": 0,
        "vocab_size": 1000,
        "global_batch_size": 8,
        "sampling": {"shuffle": False, "num_samples": 100, "cross_shard": False},
        "packing": {"masks": True},
        "sources": [
            {
                "name": "web",
                "path": [f"{root}/a", f"{root}/b/*.npy"],
                "format": "npy",
                "dtype": "uint16",
                "weight": 1.5,
                "storage_options": {"anon": True},
            }
        ],
    }


def minimal(**top: Any) -> dict[str, Any]:
    cfg: dict[str, Any] = {"seq_len": 8, "sources": [{"name": "web", "path": "/data/web"}]}
    cfg.update(top)
    return cfg


def with_source(**fields: Any) -> dict[str, Any]:
    return minimal(sources=[{"name": "web", "path": "/data/web", **fields}])


def test_all_file_formats_and_dict_agree(tmp_path: Path) -> None:
    root = str(tmp_path)
    (tmp_path / "c.toml").write_text(TOML.format(root=root))
    (tmp_path / "c.yaml").write_text(YAML.format(root=root))
    (tmp_path / "c.yml").write_text(YAML.format(root=root))
    (tmp_path / "c.json").write_text(json.dumps(full_dict(root)))
    from_dict = load_config(full_dict(root))
    for name in ("c.toml", "c.yaml", "c.yml", "c.json"):
        assert load_config(tmp_path / name) == from_dict, name
        assert load_config(str(tmp_path / name)) == from_dict, name
    assert from_dict.sources[0].path == (f"{root}/a", f"{root}/b/*.npy")
    assert from_dict.sources[0].format is ShardFormat.NPY
    assert from_dict.sampling.mode is SamplingMode.CONCAT
    assert from_dict.packing.masks is True


def test_defaults() -> None:
    cfg = load_config(minimal())
    assert (cfg.seed, cfg.eos_token_id, cfg.vocab_size, cfg.global_batch_size) == (
        0,
        None,
        None,
        None,
    )
    assert cfg.sampling == streamload.SamplingConfig()
    assert cfg.sampling.shuffle is True and cfg.sampling.cross_shard is True
    assert cfg.sampling.num_samples is None
    assert cfg.packing.masks is False
    source = cfg.sources[0]
    assert (source.format, source.dtype, source.weight) == (ShardFormat.AUTO, "auto", None)
    assert source.paths == ("/data/web",)


@pytest.mark.parametrize("cfg", [full_dict("/data"), minimal()])
def test_to_dict_round_trips(cfg: dict[str, Any], tmp_path: Path) -> None:
    config = load_config(cfg)
    plain = config.to_dict()
    assert DataConfig.from_dict(plain) == config
    assert json.loads(json.dumps(plain)) == plain  # JSON-safe
    assert "None" not in config.to_json()
    (tmp_path / "again.json").write_text(config.to_json())
    assert load_config(tmp_path / "again.json") == config
    assert plain["sources"][0]["format"] in ("auto", "numpy")  # enums print as plain strings


def test_load_config_passes_a_config_through() -> None:
    config = load_config(minimal())
    assert load_config(config) is config


@pytest.mark.parametrize(
    ("cfg", "match"),
    [
        (minimal(batch_size=4), r"config: unknown key\(s\) batch_size"),
        (minimal(sampling={"shufle": True}), r"sampling: unknown key\(s\) shufle"),
        (minimal(packing={"mask": True}), r"packing: unknown key\(s\) mask"),
        (with_source(compression="zstd"), r"sources\[0\]: unknown key\(s\) compression"),
    ],
)
def test_unknown_keys(cfg: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        load_config(cfg)


@pytest.mark.parametrize(
    ("cfg", "match"),
    [
        (minimal(seq_len="8"), r"seq_len = '8' must be an integer"),
        (minimal(seq_len=8.0), r"seq_len = 8\.0 must be an integer"),
        (minimal(seq_len=True), r"seq_len = True must be an integer"),
        (minimal(seed=1.5), r"seed = 1\.5 must be an integer"),
        (minimal(vocab_size="big"), r"vocab_size = 'big' must be an integer"),
        (minimal(eos_token_id=[0]), r"eos_token_id = \[0\] must be an integer"),
        (minimal(global_batch_size=2.5), r"global_batch_size = 2\.5 must be an integer"),
        (minimal(sampling={"shuffle": "yes"}), r"sampling\.shuffle = 'yes' must be true/false"),
        (minimal(sampling={"cross_shard": 1}), r"sampling\.cross_shard = 1 must be true/false"),
        (minimal(sampling={"num_samples": "10"}), r"sampling\.num_samples = '10' must be an"),
        (minimal(packing={"masks": "true"}), r"packing\.masks = 'true' must be true/false"),
        (minimal(sampling=3), r"sampling must be a table, got 3"),
        (minimal(packing=[True]), r"packing must be a table"),
        (minimal(sources={"name": "web"}), r"sources"),
        (minimal(sources="web"), r"sources must be a list"),
        (minimal(sources=["web"]), r"sources\[0\] must be a table, got 'web'"),
        (with_source(path=5), r"source 'web': path 5 must be"),
        (with_source(path=[]), r"source 'web': path (\[\]|\(\)) must be a non-empty"),
        (with_source(path={"a": 1}), r"source 'web': path \{'a': 1\} must be"),
        (with_source(path=["/a", 3]), r"source 'web': path .* must be a non-empty"),
        (with_source(weight="heavy"), r"source 'web': weight = 'heavy' must be a number"),
        (with_source(weight=True), r"source 'web': weight = True must be a number"),
        (with_source(storage_options="anon"), r"source 'web': storage_options\b.*'anon'"),
        (with_source(storage_options=[1]), r"source 'web': storage_options\b.*\[1\]"),
        (minimal(sources=[{"name": 3, "path": "/d"}]), r"source name 3 must be a non-empty"),
        (minimal(sources=[{"name": "", "path": "/d"}]), r"source name '' must be a non-empty"),
    ],
)
def test_wrong_types(cfg: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        load_config(cfg)


@pytest.mark.parametrize(
    ("cfg", "match"),
    [
        (minimal(seq_len=0), r"seq_len = 0 must be >= 1"),
        (minimal(seq_len=-4), r"seq_len = -4 must be >= 1"),
        (minimal(seed=-1), r"seed = -1 must be >= 0"),
        (minimal(eos_token_id=-1), r"eos_token_id = -1 must be >= 0"),
        (minimal(vocab_size=0), r"vocab_size = 0 must be >= 1"),
        (minimal(global_batch_size=-8), r"global_batch_size = -8 must be >= 1"),
        (minimal(sampling={"num_samples": 0}), r"sampling\.num_samples = 0 must be >= 1"),
        (minimal(sampling={"num_samples": -3}), r"sampling\.num_samples = -3 must be >= 1"),
        (with_source(weight=-0.5), r"source 'web': weight = -0\.5 must be finite and >= 0"),
        (with_source(weight=float("inf")), r"source 'web': weight = inf must be finite"),
        (with_source(weight=float("nan")), r"source 'web': weight = nan must be finite"),
        (minimal(eos_token_id=50, vocab_size=50), r"eos_token_id = 50 must be < vocab_size = 50"),
    ],
)
def test_out_of_range_values(cfg: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        load_config(cfg)


@pytest.mark.parametrize(
    ("cfg", "match"),
    [
        (with_source(format="orc"), r"source 'web': format = 'orc' is not one of 'auto'"),
        (minimal(sampling={"mode": "sharded"}), r"sampling\.mode = 'sharded' is not one of"),
        (with_source(dtype="float32"), r"source 'web': dtype = 'float32' is not 'auto' or one"),
        (with_source(dtype="u2"), r"source 'web': dtype = 'u2'"),
    ],
)
def test_bad_enums(cfg: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        load_config(cfg)


def test_duplicate_source_names() -> None:
    sources = [{"name": "web", "path": "/a"}, {"name": "web", "path": "/b"}]
    with pytest.raises(ConfigError, match=r"duplicate source name\(s\) web"):
        load_config(minimal(sources=sources))


@pytest.mark.parametrize(
    ("cfg", "match"),
    [
        ({"sources": [{"name": "web", "path": "/d"}]}, r"seq_len is required"),
        (minimal(sources=[]), r"at least one \[\[sources\]\] entry"),
        ({"seq_len": 8}, r"at least one \[\[sources\]\] entry"),
        (minimal(sources=[{"path": "/d"}]), r"sources\[0\]: name is required"),
        (minimal(sources=[{"name": "web"}]), r"sources\[0\]: path is required"),
    ],
)
def test_missing_fields(cfg: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        load_config(cfg)


def test_config_errors_are_value_errors() -> None:
    with pytest.raises(ValueError):
        load_config(minimal(seq_len=0))


def test_relative_paths_resolve_against_the_config_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "data.toml").write_text(
        "seq_len = 8\n[[sources]]\nname = 'web'\n"
        "path = ['shards/', '../other/*.npy', '/abs/x.bin', 's3://bucket/p']\n"
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    cfg = load_config(Path("..") / "conf" / "data.toml")  # a relative config path, too
    assert cfg.sources[0].path == (
        f"{conf}/shards/",
        f"{tmp_path}/other/*.npy",
        "/abs/x.bin",
        "s3://bucket/p",
    )


def test_relative_single_path_in_yaml(tmp_path: Path) -> None:
    (tmp_path / "data.yaml").write_text("seq_len: 8\nsources: [{name: web, path: shards}]\n")
    assert load_config(tmp_path / "data.yaml").sources[0].path == f"{tmp_path}/shards"


def test_relative_paths_in_a_dict_stay_relative() -> None:
    cfg = load_config(with_source(path="shards/"))
    assert cfg.sources[0].path == "shards/"


def test_relative_config_reads_its_data(
    make_corpus: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A config next to its data loads the same stream from any working folder."""
    corpus = make_corpus([100, 50])
    (corpus.folder / "data.toml").write_text(
        "seq_len = 8\n[sampling]\nshuffle = false\n[[sources]]\nname = 'web'\npath = '.'\n"
    )
    monkeypatch.chdir(tmp_path)
    stream = streamload.SampleStream.from_config(load_config(corpus.folder / "data.toml"))
    tokens, _ = stream.read(0, [0, 1])
    assert tokens.tolist() == [corpus.stream[0:9].tolist(), corpus.stream[8:17].tolist()]


def test_file_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"missing\.toml: config file not found"):
        load_config(tmp_path / "missing.toml")
    (tmp_path / "broken.toml").write_text("seq_len = = 3\n")
    with pytest.raises(ConfigError, match=r"broken\.toml: cannot parse config"):
        load_config(tmp_path / "broken.toml")
    (tmp_path / "broken.yaml").write_text("seq_len: [8\n")
    with pytest.raises(ConfigError, match=r"broken\.yaml: cannot parse config"):
        load_config(tmp_path / "broken.yaml")
    (tmp_path / "list.json").write_text("[1, 2]")
    with pytest.raises(ConfigError, match=r"config must be a mapping, got list"):
        load_config(tmp_path / "list.json")


def test_value_errors_in_a_file_name_the_file(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text("seq_len = 0\n[[sources]]\nname = 'web'\npath = '/d'\n")
    with pytest.raises(ConfigError, match=r"seq_len = 0 must be >= 1") as info:
        load_config(path)
    notes = getattr(info.value, "__notes__", [str(info.value)])
    assert any(str(path) in note for note in notes)


def test_configs_are_frozen() -> None:
    cfg = load_config(minimal())
    with pytest.raises(AttributeError):
        cfg.seq_len = 4  # type: ignore[misc]
    with pytest.raises(AttributeError):
        cfg.sources[0].name = "x"  # type: ignore[misc]


def test_path_list_becomes_a_tuple() -> None:
    source = streamload.SourceConfig(name="web", path=["/a", "/b"])
    assert source.path == ("/a", "/b")
    assert source.paths == ("/a", "/b")


def test_column_is_a_name_for_formats_with_columns() -> None:
    """``column`` names a token column of an arrow, parquet or mds source (or ``auto``)."""
    config = DataConfig.from_dict(with_source(format="parquet", column="tokens"))
    assert config.sources[0].column == "tokens"
    with pytest.raises(ConfigError, match=r"source 'web': column = '' must be a column name"):
        DataConfig.from_dict(with_source(format="parquet", column=""))
    with pytest.raises(ConfigError, match=r"column = 'tokens' only applies to format = 'auto'"):
        DataConfig.from_dict(with_source(format="megatron", column="tokens"))
