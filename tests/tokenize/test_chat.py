"""Chat templates (issue 33, item 2): conversations rendered with the tokenizer's template,
tokens and loss masks equal to transformers' ``apply_chat_template(..., tokenize=True,
return_dict=True, return_assistant_tokens_mask=True)`` token for token
(tests/fixtures/chat, written by transformers), through the library and ``streamload
tokenize``; ``train_on``; where the template is found; bad input named."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("jinja2", reason="chat templates need jinja2 (pip install 'streamload[chat]')")

from streamload.cli.main import main
from streamload.config.chat import TrainOn
from streamload.errors import ConfigError, FormatError
from streamload.formats.encoder import DocumentEncoder
from streamload.tokenize import TokenizeConfig, tokenize
from streamload.tokenize.chat import (
    ChatRenderer,
    encode_chat,
    generation_mask,
    load_chat_template,
    parse_messages,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "chat"
EXPECTED = json.loads((FIXTURES / "expected.json").read_text(encoding="utf-8"))
CONVERSATIONS = [
    json.loads(line) for line in (FIXTURES / "conversations.jsonl").read_text("utf-8").splitlines()
]
FAMILIES = ["chatml", "llama3"]


def tokenizer_of(family: str) -> str:
    return str(FIXTURES / family / "tokenizer.json")


def encode(family: str, train_on: str = "assistant", template: str | None = None) -> Any:
    """Texts, ids and masks of the fixture conversations through the library."""
    tok = tokenizer_of(family)
    renderer = ChatRenderer(load_chat_template(tok, template), "messages", TrainOn(train_on))
    rendered = [renderer.render(c["messages"]) for c in CONVERSATIONS]
    ids, masks = encode_chat(DocumentEncoder(tok, None, None), *zip(*rendered, strict=True))
    return [text for text, _ in rendered], ids, masks


def last_run(mask: list[int]) -> list[int]:
    """Only the last run of ones of ``mask`` kept (the last assistant answer)."""
    out = [0] * len(mask)
    end = max((i for i, m in enumerate(mask) if m), default=-1)
    i = end
    while i >= 0 and mask[i]:
        out[i] = 1
        i -= 1
    return out


@pytest.mark.parametrize("family", FAMILIES)
def test_ids_and_masks_equal_transformers(family: str) -> None:
    texts, ids, masks = encode(family)
    rows = EXPECTED["families"][family]
    assert len(rows) == len(CONVERSATIONS) == 5
    for text, got, mask, row in zip(texts, ids, masks, rows, strict=True):
        assert text == row["text"]
        assert got.tolist() == row["input_ids"]
        assert mask.astype(int).tolist() == row["assistant_masks"]
    assert sum(map(sum, (r["assistant_masks"] for r in rows))) > 0  # not vacuous


@pytest.mark.parametrize("family", FAMILIES)
def test_train_on_last_and_all(family: str) -> None:
    rows = EXPECTED["families"][family]
    _, ids, masks = encode(family, "last")
    for got, mask, row in zip(ids, masks, rows, strict=True):
        assert got.tolist() == row["input_ids"]
        assert mask.astype(int).tolist() == last_run(row["assistant_masks"])
    _, ids, masks = encode(family, "all")
    for got, mask, row in zip(ids, masks, rows, strict=True):
        assert got.tolist() == row["input_ids"]
        assert mask.all() and mask.size == len(row["input_ids"])


def test_a_template_without_markers_trains_all_or_is_refused() -> None:
    plain = str(FIXTURES / "chatml_plain.jinja")
    _, ids, masks = encode("chatml", "all", plain)
    assert [i.tolist() for i in ids] == EXPECTED["chatml_plain"]
    assert all(m.all() for m in masks)
    for train_on in ("assistant", "last"):
        with pytest.raises(ConfigError, match=r"chatml_plain.jinja has no \{% generation %\}"):
            encode("chatml", train_on, plain)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("fmt", ["numpy", "megatron", "datatrove"])
def test_tokenize_writes_the_tokens_and_masks_of_transformers(
    family: str, fmt: str, tmp_path: Path
) -> None:
    dst = tmp_path / "out"
    main(["tokenize", "--documents", str(FIXTURES / "conversations.jsonl"),
          "--destination", str(dst), "--tokenizer", tokenizer_of(family), "--no-progress",
          "--messages-field", "messages", "--keep-order", "--format", fmt])  # fmt: skip
    rows = EXPECTED["families"][family]
    tokens = np.concatenate([np.asarray(r["input_ids"]) for r in rows])
    flags = np.concatenate([np.asarray(r["assistant_masks"]) for r in rows])
    token_file = {"numpy": "part-0-00000.npy", "megatron": "part-0-00000.bin"}.get(fmt)
    if token_file is None:  # datatrove: its own .ds + .ds.loss
        got = np.fromfile(dst / "part-0-00000.ds", dtype=np.uint16)
        mask = np.fromfile(dst / "part-0-00000.ds.loss", dtype=np.uint8)
    else:
        path = dst / token_file
        got = np.load(path) if fmt == "numpy" else np.fromfile(path, dtype=np.uint16)
        mask = np.fromfile(dst / (token_file + ".loss"), dtype=np.uint8)
    assert got.tolist() == tokens.tolist()
    assert mask.tolist() == flags.tolist()


def test_bos_and_eos_follow_the_tokenize_rule(tmp_path: Path) -> None:
    """Given explicitly, EOS is appended when absent (trained as the token before it)."""
    tok = tokenizer_of("chatml")
    renderer = ChatRenderer(load_chat_template(tok), "messages", TrainOn.ASSISTANT)
    text, spans = renderer.render(CONVERSATIONS[0]["messages"])
    eos = 0  # <|endoftext|>
    ids, masks = encode_chat(DocumentEncoder(tok, None, eos), [text], [spans])
    row = EXPECTED["families"]["chatml"][0]
    assert ids[0].tolist() == [*row["input_ids"], eos]
    assert masks[0].astype(int).tolist() == [*row["assistant_masks"], row["assistant_masks"][-1]]


def test_where_the_template_is_found(tmp_path: Path) -> None:
    folder = tmp_path / "tok"
    folder.mkdir()
    shutil.copy(FIXTURES / "llama3" / "tokenizer.json", folder)
    with pytest.raises(ConfigError, match=r"no chat template found.*--chat-template"):
        load_chat_template(str(folder / "tokenizer.json"))
    shutil.copy(FIXTURES / "llama3" / "tokenizer_config.json", folder)
    found = load_chat_template(str(folder / "tokenizer.json"))
    assert found.origin.endswith("tokenizer_config.json") and "<|eot_id|>" in found.source
    assert dict(found.special_tokens) == {
        "bos_token": "<|begin_of_text|>",
        "eos_token": "<|eot_id|>",
    }
    (folder / "chat_template.jinja").write_text("{{ bos_token }}x", encoding="utf-8")  # first
    assert load_chat_template(str(folder / "tokenizer.json")).source == "{{ bos_token }}x"
    config = str(FIXTURES / "chatml" / "tokenizer_config.json")  # given: a config's template
    given = load_chat_template(str(folder / "tokenizer.json"), config)
    assert given.source.startswith("{%- if messages[0]['role'] == 'system' %}")
    named = tmp_path / "named.json"
    named.write_text(json.dumps({"chat_template": [{"name": "tool_use", "template": "t"}]}))
    with pytest.raises(ConfigError, match=r"no 'default'"):
        load_chat_template(str(folder / "tokenizer.json"), str(named))
    named.write_text(json.dumps({"chat_template": [{"name": "default", "template": "d"}]}))
    assert load_chat_template(str(folder / "tokenizer.json"), str(named)).source == "d"


def test_a_template_that_does_not_parse_names_its_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jinja"
    bad.write_text("{% generation %}\n{% for m in messages %}{{ m.content }}\n", encoding="utf-8")
    template = load_chat_template(tokenizer_of("chatml"), str(bad))
    with pytest.raises(ConfigError, match=r"bad.jinja line \d+: "):
        ChatRenderer(template, "messages", TrainOn.ASSISTANT)


@pytest.mark.parametrize(
    ("messages", "message"),
    [
        (None, "is missing or null"),
        ("hi", "is a str, not a list"),
        ([["user", "hi"]], "message 0 is a list, not an object"),
        ([{"content": "hi"}], "message 0 has no 'role'"),
        ([{"role": 3, "content": "hi"}], "message 0 has a int role"),
        ([{"role": "user"}], r"message 0 \(user\) has no 'content'"),
        ([{"role": "user", "content": None}], r"message 0 \(user\) has no 'content'"),
        (
            [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
            r"message 0 \(user\) has a list content, not a string; join its parts",
        ),
    ],
)
def test_bad_messages_are_named(messages: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_messages(messages)


def test_messages_are_normalized_as_transformers() -> None:
    got = parse_messages(
        [{"role": "assistant", "content": "a", "tool_calls": None, "reasoning": "r"}]
    )
    assert got == [{"thinking": "r", "role": "assistant", "content": "a", "reasoning": "r",
                    "reasoning_content": "r"}]  # fmt: skip
    assert parse_messages([]) == []


def write(path: Path, rows: list[Any]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def run(docs: Path, dst: Path, family: str = "llama3", **options: Any) -> Any:
    config = TokenizeConfig(
        documents=(str(docs),), destination=str(dst), tokenizer=tokenizer_of(family),
        messages_field="messages", keep_order=True, format="numpy", **options,
    )  # fmt: skip
    return tokenize(config)


def test_bad_rows_name_file_line_and_field_or_are_skipped(tmp_path: Path) -> None:
    good = CONVERSATIONS[0]["messages"]
    docs = write(tmp_path / "in.jsonl", [
        {"id": "a", "messages": good},
        {"id": "b", "messages": [{"role": "tool", "content": "42"}]},  # the template refuses
        {"id": "c", "messages": [{"role": "user"}]},
        {"id": "d", "messages": []},  # empty: counted, no document
    ])  # fmt: skip
    with pytest.raises(FormatError) as info:
        run(docs, tmp_path / "out")
    text = str(info.value)
    assert (
        f"{docs}: line 2 messages field 'messages' could not be rendered by chat template" in text
    )
    assert 'Conversation roles must be system, user or assistant, got "tool"' in text
    summary = run(docs, tmp_path / "skipped", skip_bad_lines=True)
    assert (summary.documents, summary.bad, summary.empty) == (1, 2, 1)
    assert "line 3 messages field 'messages' message 0 (user) has no 'content'" in str(
        summary.bad_examples
    )
    row = EXPECTED["families"]["llama3"][0]
    assert np.load(tmp_path / "skipped" / "part-0-00000.npy").tolist() == row["input_ids"]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"loss_spans_field": "spans"}, "cannot be combined with loss_spans_field"),
        ({"segment_before_tokenization": True}, "cannot be combined with segment_before"),
        ({"train_on": "first"}, "train_on = 'first' is not one of"),
    ],
)
def test_chat_options_are_checked(options: dict[str, Any], message: str) -> None:
    base = {"documents": ["x.jsonl"], "destination": "/tmp/x", "tokenizer": "t.json"}
    with pytest.raises(ConfigError, match=message):
        TokenizeConfig(**base, messages_field="messages", **options)
    with pytest.raises(ConfigError, match="only apply to conversations; set messages_field"):
        TokenizeConfig(**base, eos_token_id=0, chat_template="t.jinja")
    # the template writes BOS/EOS: neither id is required for conversations
    assert TokenizeConfig(**base, messages_field="messages").bos_token_id is None


def test_the_run_record_holds_the_template(tmp_path: Path) -> None:
    """Another template into the same destination is another run (refused), the same one
    finishes as done; an ordinary run's record is unchanged (no chat keys)."""
    docs = write(tmp_path / "in.jsonl", [{"id": "a", "messages": CONVERSATIONS[0]["messages"]}])
    run(docs, tmp_path / "out", family="chatml")
    assert run(docs, tmp_path / "out", family="chatml").groups_skipped == 1
    with pytest.raises(ConfigError):
        run(docs, tmp_path / "out", family="chatml", train_on="all")
    plain = TokenizeConfig(documents=("x",), destination="/tmp/x", tokenizer="t", eos_token_id=0)
    assert not {"messages_field", "chat_template", "train_on"} & set(plain.output_key())


def test_generation_mask_follows_transformers_pass() -> None:
    offsets = [(0, 2), (2, 5), (5, 5), (5, 9), (9, 12)]
    assert generation_mask(offsets, ((3, 5),)).astype(int).tolist() == [0, 1, 0, 0, 0]
    assert generation_mask(offsets, ((0, 1), (6, 10))).astype(int).tolist() == [1, 0, 0, 1, 1]
    assert generation_mask(offsets, ()).tolist() == [False] * 5
    # offsets out of order: the token-by-token pass gives the same rule
    shuffled = [(5, 9), (0, 2), (9, 12)]
    assert generation_mask(shuffled, ((6, 10),)).astype(int).tolist() == [1, 0, 1]


def test_without_jinja2_rendering_is_refused_naming_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "jinja2", None)  # import jinja2 raises ImportError
    monkeypatch.delitem(sys.modules, "streamload.tokenize._jinja", raising=False)
    monkeypatch.delattr(sys.modules["streamload.tokenize"], "_jinja", raising=False)
    with pytest.raises(ConfigError, match=r"needs jinja2.*streamload\[chat\]"):
        ChatRenderer(load_chat_template(tokenizer_of("chatml")), "messages", TrainOn.ASSISTANT)
