"""A chat text source (issue 33, item 2): ``messages_field`` rendered with the tokenizer's
chat template into the cache, with loss masks the loader reads. The loader's label at
position ``t`` is token ``t + 1``, or -100 where that token's mask is 0 (the prompt, the
template's headers) and past a document's end; the cache key follows the template and
``train_on``."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

pytest.importorskip("jinja2", reason="chat templates need jinja2 (pip install 'streamload[chat]')")

import streamload
from streamload.catalog.text_source import text_cache
from streamload.config import SourceConfig
from streamload.errors import ConfigError
from streamload.formats.megatron._index import read_index
from streamload.tokenize import TokenizeConfig, tokenize

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "chat"
EXPECTED = json.loads((FIXTURES / "expected.json").read_text(encoding="utf-8"))
TOKENIZER = str(FIXTURES / "chatml" / "tokenizer.json")


def conversations(n: int) -> list[list[dict[str, str]]]:
    """``n`` distinct conversations of 1 to 3 exchanges (a system prompt in some)."""
    out = []
    for i in range(n):
        messages = [{"role": "system", "content": f"Answer briefly, {i}."}] if i % 3 == 0 else []
        for turn in range(1 + i % 3):
            messages.append({"role": "user", "content": f"What is {i} + {turn}?"})
            messages.append({"role": "assistant", "content": f"{i} + {turn} is {i + turn}."})
        out.append(messages)
    return out


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("chat")
    (root / "in").mkdir()
    convs = conversations(40)
    for f in range(2):
        rows = [{"messages": m} for m in convs[f * 20 : (f + 1) * 20]]
        (root / "in" / f"part_{f}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return root


def chat_config(root: Path, mode: str, seq_len: int, **source: Any) -> dict[str, Any]:
    config: dict[str, Any] = {
        "seq_len": seq_len,
        "seed": 5,
        "pad_token_id": 0,
        "sampling": {"mode": mode},
        "sources": [
            {
                "name": "chat",
                "path": str(root / "in"),
                "tokenizer": TOKENIZER,
                "messages_field": "messages",
                "cache_dir": str(root / "cache"),
                **source,
            }
        ],
        "storage": {"cache_dir": str(root / "storage-cache")},
    }
    return config


def batches(config: dict[str, Any], count: int = 10) -> list[dict[str, Any]]:
    out = []
    for i, batch in enumerate(streamload.build_loader(config, batch_size=4)):
        out.append(batch)
        if i + 1 == count:
            break
    return out


def cache_documents(config: dict[str, Any]) -> list[tuple[list[int], list[int]]]:
    """Every cached conversation's tokens and mask, read from the parts of the cache folder
    of ``config``'s source."""
    folder = Path(text_cache(SourceConfig(**config["sources"][0])).folder)
    markers = [json.loads(p.read_text()) for p in folder.glob("*.json") if "input" in p.read_text()]
    parts = [
        folder / name
        for m in sorted(markers, key=lambda m: m["input"]["url"])
        for name in m["parts"]
    ]
    out = []
    for part in parts:  # in input order (a part's name is its input's hash)
        tokens = np.fromfile(part, dtype=np.uint16)
        mask = np.fromfile(str(part) + ".loss", dtype=np.uint8)
        index, _ = read_index(str(part)[: -len(".bin")] + ".idx", part.stat().st_size)
        for start, length in zip(index.pointers // 2, index.lengths, strict=True):
            out.append(
                (tokens[start : start + length].tolist(), mask[start : start + length].tolist())
            )
    return out


@pytest.mark.parametrize("train_on", ["assistant", "last", "all"])
def test_padded_labels_are_minus_100_exactly_on_untrained_tokens(
    corpus: Path, train_on: str
) -> None:
    config = chat_config(corpus, "padded", 128, train_on=train_on)
    rows = [(b["input_ids"][i], b["labels"][i]) for b in batches(config) for i in range(4)]
    documents = {tuple(ids): mask for ids, mask in cache_documents(config)}
    assert len(documents) == 40
    trained = 0
    for input_ids, labels in rows:
        (ids, mask) = next(
            (list(d), m) for d, m in documents.items() if input_ids[: len(d)].tolist() == list(d)
        )
        n = len(ids)
        want = [ids[t + 1] if mask[t + 1] else -100 for t in range(n - 1)]
        want += [-100] * (len(labels) - len(want))
        assert labels.tolist() == want
        trained += sum(mask[1:])
        if train_on == "all":
            assert all(mask)
    assert trained > 0


def test_cached_masks_are_those_of_the_template(corpus: Path) -> None:
    """Each cached conversation equals the library's rendering (tokens and mask)."""
    from streamload.config.chat import TrainOn
    from streamload.formats.encoder import DocumentEncoder
    from streamload.tokenize.chat import ChatRenderer, encode_chat, load_chat_template

    config = chat_config(corpus, "padded", 128)
    batches(config, count=1)
    renderer = ChatRenderer(load_chat_template(TOKENIZER), "messages", TrainOn.ASSISTANT)
    rendered = [renderer.render(m) for m in conversations(40)]
    ids, masks = encode_chat(DocumentEncoder(TOKENIZER, None, None), *zip(*rendered, strict=True))
    got = cache_documents(config)
    assert [g for g, _ in got] == [i.tolist() for i in ids]
    assert [m for _, m in got] == [m.astype(int).tolist() for m in masks]


@pytest.mark.parametrize("mode", ["concat", "packed"])
def test_batches_equal_tokenize_then_a_token_source_with_masks(corpus: Path, mode: str) -> None:
    out = corpus / f"tok-{mode}"
    tokenize(TokenizeConfig(
        documents=(str(corpus / "in" / "*.jsonl"),), destination=str(out), tokenizer=TOKENIZER,
        messages_field="messages", format="megatron", keep_order=True, id_field=None,
    ))  # fmt: skip
    text = chat_config(corpus, mode, 32)
    tokens = {**text, "sources": [{"name": "chat", "path": str(out)}]}
    a, b = batches(text), batches(tokens)
    assert len(a) == len(b) == 10
    for x, y in zip(a, b, strict=True):
        for key, value in x.items():
            if isinstance(value, torch.Tensor):
                assert torch.equal(value, y[key]), key
    assert any((x["labels"] == -100).any() and (x["labels"] != -100).any() for x in a)


def test_the_cache_key_follows_template_and_train_on(tmp_path: Path) -> None:
    def key(**source: Any) -> str:
        config = SourceConfig(name="c", path=str(tmp_path), tokenizer=TOKENIZER, **source)
        return text_cache(config).key

    base = key(messages_field="messages")
    assert key(messages_field="messages", train_on="last") != base
    assert key(messages_field="messages", train_on="assistant") == base
    assert key(messages_field="turns") != base
    assert key(eos_token_id=0) != base
    folder = tmp_path / "tok"
    shutil.copytree(FIXTURES / "chatml", folder)
    moved = str(folder / "tokenizer.json")
    same = SourceConfig(name="c", path=str(tmp_path), tokenizer=moved, messages_field="messages")
    assert text_cache(same).key == base  # a template's text keys it, not its path
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config["chat_template"] = config["chat_template"].replace("helpful", "kind")
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    assert text_cache(same).key != base
    plain = text_cache(
        SourceConfig(name="c", path=str(tmp_path), tokenizer=TOKENIZER, eos_token_id=0)
    )
    assert not {"messages_field", "chat_template", "train_on"} & set(plain.described)


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ({"messages_field": "m"}, "messages_field only apply with a tokenizer"),
        ({"tokenizer": "t.json", "format": "jsonl", "eos_token_id": 0, "messages_field": "m"},
         "messages_field needs a text source"),
        ({"tokenizer": "t.json", "eos_token_id": 0, "train_on": "last"},
         "train_on = 'last' only apply to conversations"),
        ({"tokenizer": "t.json", "messages_field": "m", "train_on": "every"},
         "train_on = 'every' is not one of"),
        ({"tokenizer": "t.json", "messages_field": "m", "label_masks": "none"},
         "label_masks = 'none' does not apply to a text source"),
    ],
)  # fmt: skip
def test_chat_source_options_are_checked(source: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        SourceConfig(name="c", path="x", **source)


def test_a_chat_source_needs_no_bos_or_eos_and_prints_back() -> None:
    source = SourceConfig(name="c", path="x", tokenizer="t.json", messages_field="m")
    assert source.train_on is not None and source.train_on.value == "assistant"
    plain = SourceConfig(name="c", path="x", tokenizer="t.json", eos_token_id=0)
    assert plain.train_on is None  # an ordinary text source prints as before


def test_a_parquet_messages_column_is_read_like_json_lines(corpus: Path, tmp_path: Path) -> None:
    """A list-of-structs column (a key one message lacks reads as null there: dropped, as
    transformers drops null keys) caches the same tokens and masks as the JSON lines."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    convs = conversations(40)
    convs[0][0]["name"] = "sys"  # every other message gets name = null in the struct column
    (tmp_path / "in").mkdir()
    rows = [{"messages": m} for m in convs]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "in" / "chats.parquet")
    (tmp_path / "json").mkdir()
    lines = "".join(json.dumps(r) + "\n" for r in rows)
    (tmp_path / "json" / "chats.jsonl").write_text(lines)
    table = chat_config(tmp_path, "padded", 128)
    batches(table, count=1)
    text = chat_config(tmp_path, "padded", 128)
    text["sources"][0].update(path=str(tmp_path / "json"), cache_dir=str(tmp_path / "cache-json"))
    batches(text, count=1)
    assert cache_documents(table) == cache_documents(text)
    assert len(cache_documents(table)) == 40
