"""``streamload tokenize --loss-spans-field``: trained character spans → loss masks beside
every output file, read back through the catalog; datatrove's own masks agree."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import numpy as np
import pytest

from streamload.catalog.sources import describe_source
from streamload.cli.main import main
from streamload.config import SourceConfig
from streamload.errors import ConfigError, FormatError
from streamload.formats.loss_mask import mask_shard
from streamload.formats.registry import open_shard
from streamload.tokenize import DocumentEncoder, TokenizeConfig, tokenize
from streamload.tokenize.loss_spans import encode_with_masks, parse_spans, token_mask
from streamload.tools.documents import document_bounds, iter_documents
from tests.helpers.tokenizer import train_bpe

DATA = Path(__file__).resolve().parents[1] / "data" / "datatrove_loss"
TOK300 = str(DATA / "tok300.json")
"""WordLevel, whitespace split: ``w{i}`` = i + 2, ``<|endoftext|>`` = 0 (one token per word)."""
FORMATS = ["dolma", "megatron", "modalities", "numpy", "datatrove"]
PATTERNS = {"megatron": "*.bin", "modalities": "*.pbin", "datatrove": "*.ds"}


def word_documents(n: int, seed: int) -> list[tuple[dict[str, object], list[int], list[int]]]:
    """Lines of words ``w{i}`` with random trained word runs, each with its expected tokens
    and mask (one token per word; EOS appended, trained iff the last word is), built from
    the words alone."""
    rng = random.Random(seed)
    out = []
    for d in range(n):
        words = [rng.randrange(290) for _ in range(rng.randint(1, 12))]
        trained = [rng.random() < 0.5 for _ in words]
        text, spans = "", []
        for w, t in zip(words, trained, strict=True):
            token = f"w{w}"
            if text:
                text += " " * rng.randint(1, 2)
            start = len(text)
            text += token
            if t:  # a span of the word, sometimes reaching into the spaces around it
                spans.append([max(0, start - rng.randint(0, 1)), len(text)])
        pad = " " * rng.randint(0, 2)  # stripped: spans shift by the leading spaces
        spans = [[s + len(pad), e + len(pad)] for s, e in spans]
        line = {"id": f"d{d}", "text": pad + text + pad, "trained": spans}
        out.append((line, [w + 2 for w in words] + [0], [*map(int, trained), int(trained[-1])]))
    return out


def write_lines(path: Path, lines: list[dict[str, object]]) -> None:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")


def run(docs: Path, dst: Path, **options: object) -> None:
    defaults: dict[str, object] = {"eos_token_id": 0, "batch_size": 1, "ring_size": 1}
    config = TokenizeConfig(
        documents=(str(docs),),
        destination=str(dst),
        tokenizer=TOK300,
        loss_spans_field="trained",
        **{**defaults, **options},  # type: ignore[arg-type]
    )
    tokenize(config)


def read_back(dst: Path, fmt: str) -> tuple[list[list[int]], list[list[int]], int]:
    """Documents and their loss masks, through the catalog's mask discovery; and the number
    of shards (each must have its mask)."""
    source = SourceConfig(
        name="t", path=str(dst / PATTERNS.get(fmt, "*.npy")), format="auto", dtype="uint16"
    )
    shards = describe_source(source, vocab_size=300).shards
    docs, masks = [], []
    for info in shards:
        assert info.loss_mask is not None, info.path
        shard, mask = open_shard(info), open_shard(mask_shard(info))
        bounds = document_bounds(shard, 0)
        docs += [doc.tolist() for doc in iter_documents(shard, bounds)]
        masks += [np.asarray(flags).tolist() for flags in iter_documents(mask, bounds)]
    return docs, masks, len(shards)


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_format_writes_the_masks_the_spans_give(tmp_path: Path, fmt: str) -> None:
    cases = word_documents(40, seed=FORMATS.index(fmt))
    write_lines(tmp_path / "in.jsonl", [line for line, _, _ in cases])
    run(tmp_path / "in.jsonl", tmp_path / "out", format=fmt, max_size=60)
    docs, masks, shards = read_back(tmp_path / "out", fmt)
    assert shards > 2  # parts roll at max_size: every part has its own mask
    assert docs == [tokens for _, tokens, _ in cases]  # one file, ring 1, batch 1: in order
    assert masks == [mask for _, _, mask in cases]


def test_masks_match_datatrove_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The datatrove fixture's texts, trained spans = the complement of its no_loss_ranges:
    the same .ds, .ds.index and .ds.loss bytes, except that datatrove crops a document whose
    range reaches the end (we keep its tokens, untrained)."""
    lines = [
        {"text": "w5 w6 w7 w8 w9", "trained": [[0, 14]]},
        {"text": "w10 w11 w12 w13 w14", "trained": [[0, 4], [12, 19]]},
        {"text": "w20 w21 w22 w23", "trained": [[8, 15]]},
        {"text": "w40 w41 w42 w43 w44 w45", "trained": [[4, 8], [12, 23]]},
        {"text": "w30 w31 w32 w33", "trained": [[0, 8]]},
    ]
    write_lines(tmp_path / "in.jsonl", lines)
    monkeypatch.chdir(tmp_path)
    shutil.copy(TOK300, tmp_path / "tok300.json")  # the name datatrove's metadata records
    config = TokenizeConfig(
        documents=("in.jsonl",),
        destination="out",
        tokenizer="tok300.json",
        eos_token_id=0,
        batch_size=1,
        ring_size=1,
        id_field=None,
        format="datatrove",
        loss_spans_field="trained",
    )
    tokenize(config)
    ours = tmp_path / "out" / "part-0-00000.ds"
    theirs = DATA / "loss_00000_unshuffled.ds"
    ends = np.fromfile(f"{theirs}.index", dtype="<u8")
    order = [0, 1, 2, 4, 3]  # the cropped document last
    bounds = np.concatenate([[0], ends]).astype(int)
    pieces = [slice(bounds[i], bounds[i + 1]) for i in order]
    for suffix, dtype in (("", "<u2"), (".loss", "u1")):
        want = np.fromfile(f"{theirs}{suffix}", dtype=dtype)
        got = np.fromfile(f"{ours}{suffix}", dtype=dtype)
        assert got[:24].tolist() == np.concatenate([want[p] for p in pieces[:4]]).tolist()
        assert got[24:26].tolist() == want[pieces[4]].tolist()  # datatrove kept only these
    assert np.fromfile(f"{ours}.loss", dtype="u1")[24:].tolist() == [1, 1, 0, 0, 0]
    assert np.fromfile(f"{ours}.index", dtype="<u8").tolist() == [6, 12, 17, 24, 29]


def test_token_mask_is_overlap_in_characters() -> None:
    # tokens: "ab" [0,2), " cd" [2,5), "" at 5, "e" [5,6)
    offsets = [(0, 2), (2, 5), (5, 5), (5, 6)]
    assert token_mask(offsets, ((3, 4),), 6).tolist() == [False, True, False, False]
    assert token_mask(offsets, ((1, 3),), 6).tolist() == [True, True, False, False]
    assert token_mask(offsets, ((5, 6),), 6).tolist() == [False, False, True, True]
    assert token_mask(offsets, (), 6).tolist() == [False] * 4
    assert token_mask([], ((0, 1),), 1).size == 0


def test_token_mask_matches_a_per_character_reference() -> None:
    """200 seeded random tokenizations and span sets against a character-by-character check."""
    rng = random.Random(17)
    for _ in range(200):
        length = rng.randint(0, 40)
        cuts = sorted(rng.randint(0, length) for _ in range(rng.randint(0, 12)))
        offsets = [(a, b) for a, b in zip([0, *cuts], [*cuts, length], strict=True)]
        spans = []
        for _ in range(rng.randint(0, 4)):
            start = rng.randint(0, length)
            spans.append((start, rng.randint(start, length)))
        trained = {c for s, e in spans for c in range(s, e)}
        want = [
            any(c in trained for c in range(a, b)) if b > a else a in trained for a, b in offsets
        ]
        assert token_mask(offsets, tuple(spans), length).tolist() == want


def test_byte_level_tokens_follow_their_characters(tmp_path: Path) -> None:
    """A BPE token " yo" is trained by a span starting at "y"; the byte tokens of one
    character all follow it; BOS never trained; EOS as the token before it."""
    path = tmp_path / "bpe.json"
    train_bpe(path, ["Q: hi A: yo café 日本"] * 50)
    encoder = DocumentEncoder(str(path), 1, 0)
    texts = ["Q: hi A: yo", "日本 x", "Q: hi A: yo"]
    spans = [((9, 11),), ((1, 2),), ((0, 5),)]
    ids, masks = encode_with_masks(encoder, texts, spans)
    assert [i.tolist() for i in ids] == [e.tolist() for e in encoder.encode(texts)]
    enc = encoder.tokenizer.encode_batch(texts, add_special_tokens=False)
    first = [texts[0][a:b] for a, b in enc[0].offsets]
    trained = [t for t, m in zip(["<bos>", *first, "<eos>"], masks[0], strict=True) if m]
    assert "".join(trained[:-1]).strip() == "yo" and trained[-1] == "<eos>"
    assert not masks[0][0]  # BOS
    assert masks[1][1:-1].tolist() == [a <= 1 < b for a, b in enc[1].offsets]
    assert masks[2][-1] == masks[2][-2] == 0  # the prompt is trained, the end is not


def test_spans_are_checked_and_shifted_by_the_strip() -> None:
    raw = "  ab cd "
    assert parse_spans([[2, 4], [5, 8], [0, 1]], raw, raw.strip()) == ((0, 2), (3, 5))
    assert parse_spans([], raw, raw.strip()) == ()
    for bad, why in [
        (None, "missing or null; give \\[\\[0, 8\\]\\]"),
        ({"a": 1}, "is dict, not a list"),
        ([[1]], "item 0 is \\[1\\], not a \\[start, end\\] pair"),
        ([[0, True]], "not a \\[start, end\\] pair of integers"),
        ([[0, 2], [3, 1]], "item 1 is \\[3, 1\\]; expected 0 <= start <= end <= 8"),
        ([[0, 9]], "<= 8"),
        ([[-1, 2]], "<= 8"),
    ]:
        with pytest.raises(ValueError, match=why):
            parse_spans(bad, raw, raw.strip())


def test_a_line_without_valid_spans_is_a_bad_line(tmp_path: Path) -> None:
    lines = [
        {"id": "a", "text": "w1 w2", "trained": [[0, 2]]},
        {"id": "b", "text": "w3"},
        {"id": "c", "text": "w4", "trained": [[0, 9]]},
    ]
    write_lines(tmp_path / "in.jsonl", lines)
    with pytest.raises(FormatError, match=r"in\.jsonl: line 2 loss spans field 'trained' is miss"):
        run(tmp_path / "in.jsonl", tmp_path / "out")
    base = ["tokenize", "--documents", str(tmp_path / "in.jsonl"), "--tokenizer", TOK300]
    base += ["--eos-token-id", "0", "--loss-spans-field", "trained", "--no-progress"]
    assert main([*base, "--destination", str(tmp_path / "b"), "--skip-bad-lines"]) == 0
    docs, masks, _ = read_back(tmp_path / "b", "dolma")
    assert (docs, masks) == ([[3, 4, 0]], [[1, 0, 0]])


def test_options_that_cannot_keep_masks_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="segment_before_tokenization"):
        TokenizeConfig(
            documents=("x",),
            destination=str(tmp_path),
            tokenizer=TOK300,
            eos_token_id=0,
            loss_spans_field="trained",
            segment_before_tokenization=True,
        )
    args = ["tokenize", "--format", "jsonl", "--documents", "x.jsonl", "--tokenizer", TOK300]
    assert main([*args, "--loss-spans-field", "trained"]) == 2


def test_resume_redoes_a_group_whose_mask_went_missing(tmp_path: Path) -> None:
    cases = word_documents(30, seed=7)
    for f in range(3):
        write_lines(tmp_path / f"in{f}.jsonl", [line for line, _, _ in cases[f * 10 :][:10]])
    dst = tmp_path / "out"
    run(tmp_path / "in*.jsonl", dst, files_per_process=1, format="megatron")
    first = {p.name: p.read_bytes() for p in dst.iterdir() if p.is_file()}
    assert sum(name.endswith(".bin.loss") for name in first) == 3
    marker = json.loads((dst / ".streamload-tokenize" / "done" / "1.json").read_text())
    assert any(name.endswith(".loss") for name in marker["files"])  # the marker covers it
    (dst / "part-1-00000.bin.loss").unlink()
    run(tmp_path / "in*.jsonl", dst, files_per_process=1, format="megatron")
    assert {p.name: p.read_bytes() for p in dst.iterdir() if p.is_file()} == first


def test_a_run_without_masks_records_no_mask_option(tmp_path: Path) -> None:
    write_lines(tmp_path / "in.jsonl", [{"id": "a", "text": "w1 w2"}])
    config = TokenizeConfig(
        documents=(str(tmp_path / "in.jsonl"),),
        destination=str(tmp_path / "out"),
        tokenizer=TOK300,
        eos_token_id=0,
    )
    tokenize(config)
    record = json.loads((tmp_path / "out" / ".streamload-tokenize" / "run.json").read_text())
    assert "loss_spans_field" not in record["config"]
    assert sorted(p.name for p in (tmp_path / "out").glob("part-*")) == [
        "part-0-00000.csv.gz",
        "part-0-00000.npy",
    ]


@pytest.mark.parametrize("fmt", ["dolma", "megatron", "datatrove"])
def test_a_token_file_is_published_after_its_mask_and_companions(
    tmp_path: Path, fmt: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from streamload.tokenize import markers

    moved: list[str] = []
    real = markers._move_atomic

    def record(src: str, dst: str) -> None:
        moved.append(Path(dst).name)
        real(src, dst)

    monkeypatch.setattr(markers, "_move_atomic", record)
    write_lines(tmp_path / "in.jsonl", [line for line, _, _ in word_documents(20, seed=3)])
    run(tmp_path / "in.jsonl", tmp_path / "out", format=fmt, max_size=40)
    token = {"dolma": ".npy", "megatron": ".bin", "datatrove": ".ds"}[fmt]
    parts = sorted({name.split(".")[0] for name in moved})
    assert len(parts) > 1
    for part in parts:
        mine = [name for name in moved if name.split(".")[0] == part]
        assert mine[-1] == part + token and f"{part}{token}.loss" in mine, mine
