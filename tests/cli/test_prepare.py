"""``streamload prepare`` and ``show`` on a text source (docs/text.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from streamload.cli.main import main
from tests.catalog.test_text_source import text_config, write_corpus


def write_config(tmp_path: Path, **source: object) -> Path:
    write_corpus(tmp_path / "in", files=3)
    config = text_config(tmp_path / "in", tmp_path / "cache", **source)
    path = tmp_path / "data.json"
    path.write_text(json.dumps(config))
    return path


def test_prepare_says_what_it_wrote_where(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path)
    assert main(["prepare", str(config)]) == 0
    first = capsys.readouterr().out
    assert "web: 3 files (3 tokenized now, 0 already cached), 57 documents" in first
    assert str(tmp_path / "cache") in first
    assert main(["prepare", str(config), "--processes", "2"]) == 0
    assert "(0 tokenized now, 3 already cached)" in capsys.readouterr().out


def test_prepare_counts_skipped_rows(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = write_config(tmp_path, on_error="skip")
    with open(tmp_path / "in" / "part_0.jsonl", "a") as fh:
        fh.write("{oops\n")
    assert main(["prepare", str(config)]) == 0
    assert "3 empty texts and 1 bad rows skipped" in capsys.readouterr().out


def test_prepare_refuses_bad_arguments_and_bad_rows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path)
    assert main(["prepare", str(config), "--rank", "2", "--world-size", "2"]) == 2
    assert "--rank 2 must be below --world-size 2" in capsys.readouterr().err
    with open(tmp_path / "in" / "part_2.jsonl", "a") as fh:
        fh.write('{"text": 7}\n')
    assert main(["prepare", str(config)]) == 2
    err = capsys.readouterr().err
    assert "part_2.jsonl: line 21 has a int in its text field 'text'" in err
    assert 'set on_error = "skip" in the source' in err


def test_show_decodes_with_the_sources_own_tokenizer(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path)
    assert main(["show", str(config), "--step", "0", "--batch-size", "2", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    texts = " ".join(
        json.loads(line)["text"]
        for f in sorted((tmp_path / "in").iterdir())
        for line in f.read_text().splitlines()
    )
    decoded = [d["text"] for s in report["samples"] for d in s["documents"] if d.get("text")]
    assert decoded and all(t.strip()[:10] in texts for t in decoded)
    assert all(v["text_input"].endswith(".jsonl") for v in report["shards"].values())
