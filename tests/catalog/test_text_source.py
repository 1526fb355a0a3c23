"""Text sources: text files tokenized once into a cache, then read as token shards.

The promise checked here (issue 32, item 5): a text source's batches equal those of
``streamload tokenize --keep-order`` into a folder read as a token source, sample for sample,
in every mode; the cache is filled once and reused; a changed input or tokenizer never mixes
with the old entry; resumption is exact and elastic; bad input is named.
"""

from __future__ import annotations

import json
import os
import random
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch

import streamload
from streamload.catalog.sources import describe_source
from streamload.catalog.text_source import prepare_text_source, text_cache
from streamload.config import SourceConfig
from streamload.errors import ConfigError, FormatError
from streamload.testing import assert_resumes_exactly
from streamload.tokenize import TokenizeConfig, tokenize

TOKENIZER = str(Path(__file__).parents[1] / "golden" / "tokenize" / "tokenizer.json")
WORDS = [
    *("the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog", "while"),
    *("data", "streams", "into", "loaders"),
]


def write_corpus(folder: Path, files: int = 12, docs: int = 20, seed: int = 0) -> list[Path]:
    """``files`` JSONL files of ``docs`` documents of 1..60 words (some empty texts)."""
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for f in range(files):
        path = folder / f"part_{f}.jsonl"  # part_10 sorts before part_2
        lines = []
        for d in range(docs):
            text = "" if d == 7 else " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 60)))
            lines.append(json.dumps({"text": text, "n": d}))
        path.write_text("\n".join(lines) + "\n")
        paths.append(path)
    return paths


def text_config(inputs: Any, cache: Path, mode: str = "concat", **source: Any) -> dict[str, Any]:
    config: dict[str, Any] = {
        "seq_len": 32,
        "seed": 3,
        "eos_token_id": 0,
        "sampling": {"mode": mode},
        "sources": [
            {
                "name": "web",
                "path": str(inputs),
                "tokenizer": TOKENIZER,
                "eos_token_id": 0,
                "cache_dir": str(cache),
                **source,
            }
        ],
        "storage": {"cache_dir": str(cache.parent / "storage-cache")},
    }
    return with_mode(config, mode)


def with_mode(config: dict[str, Any], mode: str) -> dict[str, Any]:
    if mode in ("packed", "padded", "vsl"):
        config["pad_token_id"] = 1
    if mode == "megatron":
        config["sampling"]["num_samples"] = 200
    if mode == "vsl":
        config["sampling"].update(min_seq_len=8, tokens_per_batch=128)
    return config


def batches(config: dict[str, Any], count: int = 25, **kwargs: Any) -> list[dict[str, Any]]:
    world = kwargs.get("world_size", 1)
    batch_size = None if config["sampling"]["mode"] == "vsl" else 4 // world
    loader = streamload.build_loader(config, batch_size=batch_size, **kwargs)
    out = []
    for i, batch in enumerate(loader):
        out.append(batch)
        if i + 1 == count:
            break
    return out


def assert_same(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> None:
    assert len(a) == len(b) > 0
    for x, y in zip(a, b, strict=True):
        assert x.keys() == y.keys()
        for key, value in x.items():
            if isinstance(value, torch.Tensor):
                assert torch.equal(value, y[key]), key


def tokenize_to(destination: Path, *documents: str, keep_order: bool = True) -> None:
    """``streamload tokenize --keep-order --format megatron --id-field ''`` (what a text
    source's cache holds) of ``documents`` into ``destination``."""
    tokenize(
        TokenizeConfig(
            documents=documents, destination=str(destination), tokenizer=TOKENIZER,
            eos_token_id=0, format="megatron", keep_order=keep_order, id_field=None,
        )
    )  # fmt: skip


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("text")
    write_corpus(root / "in")
    tokenize_to(root / "tok", str(root / "in" / "*.jsonl"))
    return root


@pytest.mark.parametrize("mode", ["concat", "packed", "padded", "megatron", "vsl"])
def test_batches_equal_tokenize_keep_order_then_a_token_source(corpus: Path, mode: str) -> None:
    text = text_config(corpus / "in", corpus / "cache", mode)
    tokens = with_mode(
        {
            **text,
            "sources": [{"name": "web", "path": str(corpus / "tok")}],
            "sampling": {"mode": mode},
        },
        mode,
    )
    assert_same(batches(text), batches(tokens))


def test_the_cache_is_filled_once_and_mapped_after(corpus: Path, tmp_path: Path) -> None:
    config = text_config(corpus / "in", tmp_path / "cache")
    first = batches(config, 5)
    folder = text_cache(SourceConfig(**config["sources"][0])).folder
    parts = sorted(p for p in os.listdir(folder) if p.endswith(".bin"))
    assert len(parts) == 12
    stamps = {p: os.stat(os.path.join(folder, p)).st_mtime_ns for p in parts}
    report = prepare_text_source(SourceConfig(**config["sources"][0]))
    assert report.built == 0 and len(report.markers) == 12
    assert_same(first, batches(config, 5))
    assert stamps == {p: os.stat(os.path.join(folder, p)).st_mtime_ns for p in parts}


def test_a_changed_input_is_tokenized_again_without_mixing(tmp_path: Path) -> None:
    paths = write_corpus(tmp_path / "in", files=3)
    config = text_config(tmp_path / "in", tmp_path / "cache")
    source = SourceConfig(**config["sources"][0])
    before = prepare_text_source(source)
    paths[1].write_text(json.dumps({"text": "a brand new document"}) + "\n")
    os.utime(paths[1], (1, 1))  # another size and time: another file key
    after = prepare_text_source(source)
    assert after.built == 1
    assert [m["input"] for m in after.markers][::2] == [m["input"] for m in before.markers][::2]
    assert after.markers[1]["documents"] == 1
    catalog = describe_source(source)
    assert catalog.shards.num_tokens.sum() == after.total("tokens")


def test_another_tokenizer_setting_is_another_entry(corpus: Path, tmp_path: Path) -> None:
    eos = SourceConfig(**text_config(corpus / "in", tmp_path / "c")["sources"][0])
    both = SourceConfig(**text_config(corpus / "in", tmp_path / "c", bos_token_id=2)["sources"][0])
    assert text_cache(eos).folder != text_cache(both).folder
    a, b = describe_source(eos), describe_source(both)
    assert b.num_tokens == a.num_tokens + sum(
        m["documents"] for m in prepare_text_source(both).markers
    )
    assert a.fingerprint() != b.fingerprint()


def test_the_fingerprint_follows_the_inputs_not_the_cache(corpus: Path, tmp_path: Path) -> None:
    shutil.copytree(corpus / "in", tmp_path / "moved")
    here = describe_source(
        SourceConfig(**text_config(corpus / "in", corpus / "cache")["sources"][0])
    )
    moved = SourceConfig(**text_config(tmp_path / "moved", tmp_path / "other")["sources"][0])
    assert describe_source(moved).fingerprint() == here.fingerprint()
    assert here.shards[0].relpath == "part_0.jsonl"


def test_resume_is_exact_and_elastic(corpus: Path) -> None:
    config = text_config(corpus / "in", corpus / "cache", "packed")
    config["global_batch_size"] = 4

    def make(world: int, rank: int = 0) -> Any:
        return streamload.build_loader(config, batch_size=4 // world, rank=rank, world_size=world)

    assert_resumes_exactly(lambda: make(1), save_points=[0, 3, 17])
    reference = batches(config, 6)
    halves = [batches(config, 6, rank=r, world_size=2) for r in range(2)]
    for step in range(6):
        joined = torch.cat([halves[0][step]["input_ids"], halves[1][step]["input_ids"]])
        assert torch.equal(joined, reference[step]["input_ids"])


def test_a_bad_line_is_named_or_skipped_and_counted(tmp_path: Path) -> None:
    write_corpus(tmp_path / "in", files=2)
    with open(tmp_path / "in" / "part_1.jsonl", "a") as fh:
        fh.write("{not json\n" + json.dumps({"body": "no text field"}) + "\n")
    config = text_config(tmp_path / "in", tmp_path / "cache")
    with pytest.raises(FormatError, match=r"part_1\.jsonl: line 21 is not valid JSON"):
        batches(config, 1)
    assert not [n for n in os.listdir(text_cache(SourceConfig(**config["sources"][0])).folder)
                if n.endswith(".bin") and "part_1" in n]  # fmt: skip
    skipping = text_config(tmp_path / "in", tmp_path / "cache", on_error="skip")
    report = prepare_text_source(SourceConfig(**skipping["sources"][0]))
    assert report.total("bad") == 2 and report.total("empty") == 2
    assert batches(skipping, 2)


def test_a_failed_build_publishes_nothing_and_a_rerun_writes_the_same_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_corpus(tmp_path / "in", files=4)
    config = text_config(tmp_path / "in", tmp_path / "cache")
    source = SourceConfig(**config["sources"][0])
    clean = SourceConfig(**text_config(tmp_path / "in", tmp_path / "clean")["sources"][0])
    prepare_text_source(clean)
    from streamload.tokenize import outputs

    calls = {"n": 0}
    add = outputs.PartWriter.add

    def failing(self: Any, *args: Any, **kwargs: Any) -> None:
        calls["n"] += 1
        if calls["n"] == 50:  # in the third file
            raise KeyboardInterrupt
        add(self, *args, **kwargs)

    monkeypatch.setattr(outputs.PartWriter, "add", failing)
    with pytest.raises(KeyboardInterrupt):
        prepare_text_source(source)
    folder = text_cache(source).folder
    markers = [n for n in os.listdir(folder) if n.endswith(".json") and n != "settings.json"]
    assert len(markers) == 2 and len([n for n in os.listdir(folder) if n.endswith(".bin")]) == 2
    monkeypatch.setattr(outputs.PartWriter, "add", add)
    assert prepare_text_source(source).built == 2
    other = text_cache(clean).folder
    for name in sorted(n for n in os.listdir(other) if n.endswith((".bin", ".idx"))):
        assert Path(folder, name).read_bytes() == Path(other, name).read_bytes(), name
    assert not os.listdir(os.path.join(folder, ".staging"))


def test_a_marker_of_another_version_is_refused(corpus: Path, tmp_path: Path) -> None:
    shutil.copytree(corpus / "cache", tmp_path / "cache")
    source = SourceConfig(**text_config(corpus / "in", tmp_path / "cache")["sources"][0])
    cache = text_cache(source)
    marker = next(n for n in sorted(os.listdir(cache.folder)) if n.endswith("0.json") or (
        n.endswith(".json") and n != "settings.json"))  # fmt: skip
    path = Path(cache.folder, marker)
    path.write_text(json.dumps({**json.loads(path.read_text()), "schema": "streamload-text-0"}))
    shutil.rmtree(Path(cache.folder, "manifests"))
    with pytest.raises(FormatError, match="written by another streamload version"):
        prepare_text_source(source)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"column": "input_ids"}, "column does not apply to a text source"),
        ({"label_masks": "none"}, "label_masks = 'none' does not apply to a text source"),
        (
            {"tokenizer": None, "eos_token_id": None, "format": "text"},
            'format = "text" needs a tokenizer',
        ),
        ({"tokenizer": None, "eos_token_id": None, "cache_dir": "c"}, "cache_dir only apply"),
        ({"format": "npy"}, "a source with a tokenizer reads text"),
        ({"eos_token_id": None}, "a text source with a tokenizer needs bos_token_id"),
    ],
)
def test_text_source_options_are_checked(extra: dict[str, Any], message: str) -> None:
    fields = {"name": "s", "path": "x", "tokenizer": "t.json", "eos_token_id": 0, **extra}
    with pytest.raises(ConfigError, match=message):
        SourceConfig(**{k: v for k, v in fields.items() if v is not None})


def test_a_folder_without_text_files_is_named(tmp_path: Path) -> None:
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "notes.txt").write_text("hello")
    config = text_config(tmp_path / "in", tmp_path / "cache")
    with pytest.raises(ConfigError, match=r"holds no text files \(looked for \*\.jsonl"):
        batches(config, 1)


def test_a_removed_part_is_tokenized_again(corpus: Path, tmp_path: Path) -> None:
    shutil.copytree(corpus / "cache", tmp_path / "cache")
    source = SourceConfig(**text_config(corpus / "in", tmp_path / "cache")["sources"][0])
    folder = text_cache(source).folder
    part = sorted(n for n in os.listdir(folder) if n.endswith(".bin"))[3]
    os.remove(os.path.join(folder, part))  # the manifest still lists it
    report = prepare_text_source(source)
    assert report.built == 1 and os.path.exists(os.path.join(folder, part))
