"""``streamload show``: real files, exit codes, the terminal view and the JSON schema."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

import streamload
from streamload.cli.main import main
from streamload.formats.dolma.dolma import DolmaWriter
from tests.helpers.corpus_factory import Corpus
from tests.helpers.tokenizer import train_bpe

TOP_KEYS = {
    "schema", "step", "pass", "mode", "unit", "seq_len", "masks", "global_batch_size",
    "grad_accum_steps", "world_size", "batch_size", "rank", "sources", "tokenizer", "shards",
    "samples",
}  # fmt: skip
SAMPLE_KEYS = {
    "micro_batch", "rank", "row", "sample_index", "source", "source_id", "source_sample",
    "source_epoch", "source_offset", "data_tokens", "skipped", "input_ids", "labels", "masked",
    "documents_from", "documents",
}  # fmt: skip
DOCUMENT_KEYS = {
    "start", "end", "kind", "shard", "shard_offset", "document", "document_start",
    "continued", "metadata", "text",
}  # fmt: skip


@pytest.fixture
def config(make_corpus: Callable[..., Corpus], tmp_path: Path) -> Path:
    corpus = make_corpus([600, 300], mean_doc_len=10.0)
    cfg = corpus.config(
        seq_len=16, global_batch_size=4, sampling={"shuffle": True}, packing={"masks": True}
    )
    path = tmp_path / "data.json"
    path.write_text(json.dumps(cfg))
    return path


def test_json_is_the_loaders_step_in_the_documented_schema(config: Path, capsys) -> None:
    args = ["show", str(config), "--step", "5", "--world-size", "2", "--json"]
    assert main(args) == 0
    report = json.loads(capsys.readouterr().out)
    assert set(report) == TOP_KEYS and report["schema"] == 1
    assert (report["global_batch_size"], report["world_size"], report["batch_size"]) == (4, 2, 2)
    assert [s["rank"] for s in report["samples"]] == [0, 0, 1, 1]
    assert [s["row"] for s in report["samples"]] == [0, 1, 0, 1]
    for sample in report["samples"]:
        assert set(sample) == SAMPLE_KEYS
        assert all(set(doc) == DOCUMENT_KEYS for doc in sample["documents"])
    loader = streamload.build_loader(str(config), batch_size=2, rank=1, world_size=2)
    batch = next(b for step, b in enumerate(loader) if step == 5)
    assert [s["input_ids"] for s in report["samples"][2:]] == batch["input_ids"].tolist()
    assert [s["labels"] for s in report["samples"][2:]] == batch["labels"].tolist()
    assert [s["sample_index"] for s in report["samples"]] == list(range(20, 24))


def test_the_terminal_view_shows_both_ends_of_long_documents(config: Path, capsys) -> None:
    assert main(["show", str(config), "--step", "0", "--max-tokens", "4"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("step 0 of pass 0: global batch 4 = 1 rank x 4 samples (all ranks)")
    assert out.count("\nsample ") == 4
    assert "masked labels" in out and "documents (from eos):" in out
    assert "more tokens …" in out
    assert "shard_0000" in out


def test_a_tokenizer_prints_decoded_text(tmp_path: Path, capsys) -> None:
    texts = ["the quick brown fox", "jumps over the lazy dog", "and runs away"] * 4
    train_bpe(tmp_path / "tok.json", texts)
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tmp_path / "tok.json"))
    (tmp_path / "d").mkdir()
    writer = DolmaWriter(tmp_path / "d" / "part-0-00000.npy", "uint16", mtime=0)
    for k, text in enumerate(texts):
        writer.add_document(np.append(tok.encode(text).ids, 0), doc_id=f"id{k}", src="web.gz")
    writer.close()
    cfg = {"seq_len": 12, "seed": 0, "eos_token_id": 0,
           "sources": [{"name": "d", "path": str(tmp_path / "d"), "dtype": "uint16"}]}  # fmt: skip
    path = tmp_path / "data.json"
    path.write_text(json.dumps(cfg))
    args = ["show", str(path), "--step", "0", "--batch-size", "2"]
    assert main([*args, "--tokenizer", str(tmp_path / "tok.json"), "--max-tokens", "64"]) == 0
    out = capsys.readouterr().out
    assert '"the quick brown fox<|endoftext|>"' in out
    assert "doc 0 of part-0-00000.npy @ 0 · id=id0 src=web.gz loc=1" in out


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--step", "999"], "--step 999 lies beyond the end of pass 0"),
        (["--step", "0", "--rank", "2", "--world-size", "2"], "--rank 2 must be in [0,"),
        (["--step", "0", "--tokenizer", "missing.json"], "tokenizer 'missing.json': no such"),
        (["--step", "0", "--batch-sizes", "4:4"], "--batch-sizes '4:4' must be"),
        (["--step", "0", "--max-tokens", "-1"], "--max-tokens -1 must be >= 0"),
    ],
)
def test_wrong_input_exits_2_with_one_line(
    config: Path, capsys, extra: list[str], message: str
) -> None:
    assert main(["show", str(config), *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("streamload show: error: ")
    assert message in err


def test_gradient_accumulation_labels_each_micro_batch(config: Path, capsys) -> None:
    cfg = json.loads(config.read_text())
    config.write_text(json.dumps({**cfg, "global_batch_size": 8, "grad_accum_steps": 2}))
    assert main(["show", str(config), "--step", "1", "--world-size", "2"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(
        "step 1 of pass 0: global batch 8 = 2 micro-batches x 2 ranks x 2 samples (all ranks)"
    )
    assert out.count("\nsample ") == 8
    assert "\nsample 12 · micro-batch 1 · rank 0 row 0 · " in out
