"""``streamload plan CONFIG`` prints each source's split bounds (document and token ranges)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from streamload.cli.main import main
from streamload.plan.split import split_bookends
from tests.helpers.shards import write_megatron_documents


@pytest.fixture
def megatron_source(tmp_path: Path) -> tuple[dict[str, Any], list[int]]:
    lengths = [5, 0, 7, 3, 9, 4, 6, 2, 8, 5]  # 10 documents, one empty
    tokens = np.arange(1, sum(lengths) + 1, dtype=np.uint16)
    path = write_megatron_documents(tmp_path / "d", tokens, lengths)
    starts = np.concatenate([[0], np.cumsum(lengths)]).tolist()
    return {"name": "web", "path": str(path)}, starts


def run_plan(
    tmp_path: Path, cfg: dict[str, Any], capsys: pytest.CaptureFixture[str], *args: str
) -> str:
    config = tmp_path / "c.json"
    config.write_text(json.dumps(cfg))
    assert main(["plan", str(config), *args]) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("mode", ["concat", "packed", "megatron"])
def test_plan_prints_the_document_and_token_ranges(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], megatron_source: Any, mode: str
) -> None:
    source, starts = megatron_source
    sampling = {"mode": mode, "split": "70,20,10"} | (
        {"num_samples": 4} if mode == "megatron" else {}
    )
    cfg = {"seq_len": 2, "pad_token_id": 0, "sources": [source], "sampling": sampling}
    if mode != "packed":
        del cfg["pad_token_id"]
    report = json.loads(run_plan(tmp_path, cfg, capsys, "--json"))["splits"]["web"]
    docs = split_bookends("70,20,10", 10)  # [0, 7, 9, 10]
    assert report["total_documents"] == 10 and report["total_tokens"] == starts[-1]
    for i, name in enumerate(("train", "valid", "test")):
        assert report["parts"][name] == {
            "documents": [docs[i], docs[i + 1]],
            "tokens": [starts[docs[i]], starts[docs[i + 1]]],
        }
    text = run_plan(tmp_path, cfg, capsys)
    rule = "sequences" if mode == "megatron" else "documents"
    assert f"web: split '70,20,10' over 10 {rule} and 49 tokens (this config reads 'train')" in text
    assert f"  valid  {rule} [7, 9), tokens [{starts[7]}, {starts[9]})" in text


def test_plan_prints_eos_splits_by_tokens(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], make_corpus: Callable
) -> None:
    corpus = make_corpus([400, 300])
    cfg = corpus.config(sampling={"split": "90,10,0", "split_name": "valid"})
    text = run_plan(tmp_path, cfg, capsys)
    assert "web: split '90,10,0' over documents found by EOS and 700 tokens" in text
    assert "(this config reads 'valid')" in text and "  test   tokens [700, 700)  (empty)" in text


def test_a_mixture_still_needs_steps(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        np.save(tmp_path / name / "s.npy", np.arange(300, dtype=np.uint16))
    cfg = {
        "seq_len": 4, "global_batch_size": 4,
        "sources": [{"name": n, "path": str(tmp_path / n), "weight": 0.5} for n in ("a", "b")],
    }  # fmt: skip
    (tmp_path / "m.json").write_text(json.dumps(cfg))
    assert main(["plan", str(tmp_path / "m.json")]) != 0
    assert "--steps N is required" in capsys.readouterr().err
