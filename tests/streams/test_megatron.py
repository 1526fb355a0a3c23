"""``sampling.mode = "megatron"``: every sample equals megatron-core 0.16.1's ``text``.

The golden ``text`` arrays were written by ``tests/golden/make_megatron_goldens.py`` with the
real megatron-core over datasets that script writes deterministically; here the same datasets
are written again and read through the stream, the CLI and the loader.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from streamload import build_loader, load_config
from streamload.cli.main import main
from streamload.errors import ConfigError, StateError
from streamload.modes.megatron.stream import MegatronStream
from streamload.streams.interface import SampleStream
from streamload.testing import assert_resumes_exactly
from tests.helpers.paths import TESTS, load_script

GOLDEN = TESTS / "golden" / "megatron"
SCRIPT = TESTS / "golden" / "make_megatron_goldens.py"
SPLITS = ("train", "valid", "test")


def golden_script() -> Any:
    return load_script(SCRIPT)


GOLDENS = golden_script()


def load(name: str) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    with np.load(GOLDEN / f"{name}.npz") as data:
        arrays = {key: data[key] for key in data.files}
    return json.loads(str(arrays.pop("meta"))), arrays


@pytest.fixture(scope="module")
def prefixes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return GOLDENS.write_datasets(tmp_path_factory.mktemp("megatron_data"))


def config_of(name: str, prefixes: dict[str, str], **sampling: Any) -> dict[str, Any]:
    """The streamload config equivalent to the megatron-core config of a golden case."""
    meta, _ = load(name)
    sampling = {
        "mode": "megatron",
        "split": meta.get("split", "100,0,0"),
        "split_name": SPLITS[meta.get("split_index", 0)],
    } | sampling
    if meta["kind"] == "blend":
        weights = meta["weights"] or [None, None]
        sources = [
            {"name": n, "path": prefixes[n] + ".bin"} | ({} if w is None else {"weight": w})
            for n, w in zip("AB", weights, strict=True)
        ]
        sampling.setdefault("num_samples", meta["size"])
    else:
        sources = [{"name": "A", "path": prefixes["A"] + ".bin"}]
        sampling.setdefault("num_samples", meta["num_samples"])
        sampling.setdefault("add_extra_token", meta.get("add_extra_token", True))
        if not meta.get("drop_last_partial", True):
            sampling["drop_last_partial"] = False
    return {"seq_len": meta["seq_len"], "seed": meta["seed"], "sources": sources,
            "sampling": sampling}  # fmt: skip


SAMPLE_CASES = [n for n in GOLDENS.SAMPLE_CASES if n != "gpt_split_valid_keep_last"]


@pytest.mark.parametrize("name", SAMPLE_CASES)
def test_every_sample_equals_megatron(name: str, prefixes: dict[str, str]) -> None:
    _, arrays = load(name)
    stream = SampleStream.from_config(load_config(config_of(name, prefixes)))
    assert isinstance(stream, MegatronStream)
    length = stream.pass_length
    assert length is not None and 0 < length <= arrays["text"].shape[0]
    text, _ = stream.read(0, np.arange(length))
    np.testing.assert_array_equal(text, arrays["text"][:length])
    assert text.dtype == np.int64


def test_padded_last_sample_of_the_valid_split(prefixes: dict[str, str]) -> None:
    """drop_last_partial = false: the short last sample is padded with -1, as Megatron does."""
    _, arrays = load("gpt_split_valid_keep_last")
    count = arrays["text"].shape[0]
    # num_samples 12 builds one epoch, like Megatron's None here: the same indices
    stream = SampleStream.from_config(
        load_config(config_of("gpt_split_valid_keep_last", prefixes, num_samples=count - 1))
    )
    source = stream.sources[0]
    text, lengths, skipped, _ = source.read(np.arange(count), stream.seq_len + 1)
    np.testing.assert_array_equal(text, arrays["text"])
    assert (text == -1).any() and (lengths < stream.seq_len + 1).sum() == 1
    assert skipped.size == 0


def test_cli_samples_reproduce_the_golden(prefixes: dict[str, str], tmp_path: Path) -> None:
    config = tmp_path / "megatron.toml"
    cfg = config_of("blend_train", prefixes)
    lines = [f"seq_len = {cfg['seq_len']}", f"seed = {cfg['seed']}", "[sampling]"]
    lines += [f"{k} = {json.dumps(v)}" for k, v in cfg["sampling"].items()]
    for source in cfg["sources"]:
        lines += ["[[sources]]"] + [f"{k} = {json.dumps(v)}" for k, v in source.items()]
    config.write_text("\n".join(lines) + "\n")
    out = tmp_path / "s.npy"
    assert main(["samples", str(config), "--start", "0", "--count", "40", "--out", str(out)]) == 0
    np.testing.assert_array_equal(np.load(out), load("blend_train")[1]["text"][:40])


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("name", ["gpt_e3_separate", "blend_valid", "gpt_no_extra_e2"])
def test_loader_batches_equal_megatron(name: str, workers: int, prefixes: dict[str, str]) -> None:
    _, arrays = load(name)
    cfg = config_of(name, prefixes)
    with build_loader(cfg, batch_size=4, num_workers=workers) as loader:
        batches = list(loader)
        assert list(loader) == []  # Megatron has no second pass
    inputs = torch.cat([b["input_ids"] for b in batches]).numpy()
    labels = torch.cat([b["labels"] for b in batches]).numpy()
    text = arrays["text"][: inputs.shape[0]]
    np.testing.assert_array_equal(inputs, text[:, : cfg["seq_len"]])
    if cfg["sampling"].get("add_extra_token", True):
        np.testing.assert_array_equal(labels, text[:, 1:])
    else:  # Megatron's rolled label: the last one is pad, its loss masked
        np.testing.assert_array_equal(labels[:, :-1], text[:, 1:])
        assert (labels[:, -1] == -100).all()
    assert inputs.shape[0] == (loader.stream.pass_length or 0) // 4 * 4


def test_loader_resumes_exactly(prefixes: dict[str, str], tmp_path: Path) -> None:
    cfg = config_of("blend_train", prefixes)
    cfg["sampling"]["cache_dir"] = str(tmp_path / "cache")
    assert_resumes_exactly(lambda: build_loader(cfg, batch_size=8, num_workers=1))


def test_rank_shares_are_the_global_batches(prefixes: dict[str, str]) -> None:
    _, arrays = load("gpt_e2_not_separate")
    cfg = config_of("gpt_e2_not_separate", prefixes)
    ranks = [list(build_loader(cfg, batch_size=3, rank=r, world_size=2)) for r in range(2)]
    for step, (a, b) in enumerate(zip(*ranks, strict=True)):
        got = torch.cat([a["input_ids"], b["input_ids"]]).numpy()
        np.testing.assert_array_equal(got, arrays["text"][step * 6 : step * 6 + 6, :-1])


def test_fingerprint_covers_the_index_inputs(prefixes: dict[str, str]) -> None:
    base = config_of("blend_train", prefixes)
    loader = build_loader(base, batch_size=4)
    next(iter(loader))
    state = loader.state_dict()
    for key, value in [("seed", 7), ("split", "99,1,0"), ("add_extra_token", False)]:
        other = config_of("blend_train", prefixes)
        (other if key == "seed" else other["sampling"])[key] = value
        with pytest.raises(StateError, match=key):
            build_loader(other, batch_size=4).load_state_dict(state)
    assert state["sources"]["A"]["samples"] + state["sources"]["B"]["samples"] == 4


@pytest.mark.parametrize(
    ("sampling", "match"),
    [
        ({"mode": "megatron"}, "num_samples is required"),
        ({"mode": "megatron", "num_samples": 5, "shuffle": False}, "shuffle"),
        ({"mode": "megatron", "num_samples": 5, "cross_shard": False}, "cross_shard"),
        ({"mode": "megatron", "num_samples": 5, "drop_last_partial": False}, "valid"),
        ({"mode": "megatron", "num_samples": 5, "split": "1,2,3,4"}, "split"),
        ({"mode": "megatron", "num_samples": 5, "split_name": "dev"}, "split_name"),
        ({"add_extra_token": False}, "applies only to mode = 'megatron'"),
        ({"cache_dir": "/tmp/x"}, "applies only"),
    ],
)
def test_config_errors(sampling: dict[str, Any], match: str) -> None:
    cfg = {"seq_len": 8, "sources": [{"name": "a", "path": "/x"}], "sampling": sampling}
    with pytest.raises(ConfigError, match=match):
        load_config(cfg)


def test_config_errors_across_tables() -> None:
    two = [{"name": "a", "path": "/x", "weight": 1.0}, {"name": "b", "path": "/y"}]
    base = {"seq_len": 8, "sampling": {"mode": "megatron", "num_samples": 5}}
    with pytest.raises(ConfigError, match="no weight"):
        load_config(base | {"sources": two})
    one = [{"name": "a", "path": "/x"}]
    with pytest.raises(ConfigError, match="schedule"):
        load_config(base | {"sources": one, "schedule": [{"start_step": 0, "weights": {"a": 1}}]})
    with pytest.raises(ConfigError, match="eos_token_id"):
        load_config(base | {"sources": one, "packing": {"masks": True}})
    with pytest.raises(ConfigError, match="policy"):
        load_config(base | {"sources": [{"name": "a", "path": "/x", "max_epochs": 2}]})
    with pytest.raises(ConfigError, match=r"needs packing\.masks"):
        load_config(base | {"sources": one, "packing": {"eod_mask_loss": True}})


def test_format_without_documents_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "a.bin").write_bytes(np.arange(100, dtype=np.uint16).tobytes())
    cfg = {
        "seq_len": 8,
        "sources": [
            {"name": "a", "path": str(tmp_path / "a.bin"), "format": "raw", "dtype": "uint16"}
        ],
        "sampling": {"mode": "megatron", "num_samples": 5},
    }
    with pytest.raises(ConfigError, match="no document index"):
        SampleStream.from_config(load_config(cfg))


def test_stream_dataset_yields_the_same_batches(prefixes: dict[str, str]) -> None:
    from streamload import StreamDataset
    from streamload.plan.partition import RankSpec

    cfg = config_of("gpt_e1_n", prefixes)
    stream = SampleStream.from_config(load_config(cfg))
    batches = list(StreamDataset(stream, RankSpec(0, 1, 5)))
    got = torch.cat([b["input_ids"] for b in batches]).numpy()
    np.testing.assert_array_equal(got, load("gpt_e1_n")[1]["text"][: got.shape[0], :-1])


def test_config_round_trips(prefixes: dict[str, str]) -> None:
    config = load_config(config_of("blend_valid", prefixes) | {"eos_token_id": 0})
    assert load_config(config.to_dict()) == config
    assert config.to_dict()["sampling"]["split_name"] == "valid"
