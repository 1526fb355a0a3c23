"""``streamload plan`` and ``streamload samples`` in vsl mode: what an epoch holds per length,
and any step's rows, equal to what the loader delivers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import streamload
from streamload.cli.main import main
from tests.helpers.corpus_factory import write_corpus


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("vslcli")
    corpus = write_corpus(root / "data", [5000, 2000], mean_doc_len=50.0, seed=7)
    cfg = corpus.config(
        seq_len=32,
        sampling={
            "mode": "vsl",
            "min_seq_len": 4,
            "tokens_per_batch": 128,
            "curriculum": "cyclic_p2",
            "num_cycles": 2,
        },
    )
    path = root / "vsl.json"
    path.write_text(json.dumps(cfg))
    return path


def test_plan_reports_each_length_and_segment(
    config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["plan", str(config), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)["vsl"]
    loader = streamload.build_loader(str(config))
    assert report["steps"] == len(loader) and report["first_step_length"] == 32
    assert [r["length"] for r in report["lengths"]] == [4, 8, 16, 32]
    assert sum(r["batches"] for r in report["lengths"]) == report["steps"]
    assert len(report["segments"]) == 2 * 4  # cycles x lengths
    assert sum(sum(s["tokens"].values()) for s in report["segments"]) + 128 == report["tokens"]
    assert main(["plan", str(config)]) == 0
    text = capsys.readouterr().out
    assert "cyclic_p2 curriculum" in text and "length     16:" in text


def test_plan_plots_the_curriculum(config: Path, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    out = tmp_path / "curriculum.png"
    assert main(["plan", str(config), "--plot", str(out)]) == 0
    assert out.read_bytes()[:4] == b"\x89PNG"


def test_samples_writes_the_steps_the_loader_delivers(config: Path, tmp_path: Path) -> None:
    out = tmp_path / "steps.npz"
    assert main(["samples", str(config), "--start", "2", "--count", "3", "--out", str(out)]) == 0
    saved = np.load(out)
    batches = list(streamload.build_loader(str(config)))[2:5]
    assert saved["lengths"].tolist() == [b["input_ids"].shape[1] for b in batches]
    for k, batch in zip(range(2, 5), batches, strict=True):
        assert saved[f"step_{k}"][:, :-1].tolist() == batch["input_ids"].tolist()
        assert saved[f"sources_{k}"].tolist() == batch["source_ids"].tolist()
    rank = tmp_path / "r1.npz"
    args: list[Any] = ["--rank", "1", "--world-size", "2", "--out", str(rank)]
    assert main(["samples", str(config), "--start", "2", "--count", "1", *args]) == 0
    mine = streamload.build_loader(str(config), world_size=2, rank=1)
    assert np.load(rank)["step_2"][:, :-1].tolist() == list(mine)[2]["input_ids"].tolist()


def test_samples_refuses_what_cannot_be_written(
    config: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    npy = ["samples", str(config), "--start", "0", "--count", "1", "--out", str(tmp_path / "a.npy")]
    assert main(npy) == 2
    assert ".npz" in capsys.readouterr().err
    far = [
        "samples",
        str(config),
        "--start",
        "0",
        "--count",
        "99999",
        "--out",
        str(tmp_path / "a.npz"),
    ]
    assert main(far) == 2
    assert "outside the epoch" in capsys.readouterr().err
    assert not (tmp_path / "a.npz").exists()


def test_show_traces_a_vsl_step(config: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["show", str(config), "--step", "3", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    batch = list(streamload.build_loader(str(config)))[3]
    assert report["seq_len"] == batch["input_ids"].shape[1]
    assert [s["input_ids"] for s in report["samples"]] == batch["input_ids"].tolist()
    assert {s["documents_from"] for s in report["samples"]} == {"pieces"}
    assert main(["show", str(config), "--step", "3"]) == 0
    assert "slots of max_seq_len" in capsys.readouterr().out


def test_a_world_size_of_zero_is_refused_by_name(
    config: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 36, item 3: no ZeroDivisionError from build_loader, and samples does not write
    the world-size-1 output for --world-size 0."""
    out = str(tmp_path / "w0.npz")
    args = ["samples", str(config), "--start", "0", "--count", "1", "--out", out]
    assert main([*args, "--world-size", "0", "--rank", "0"]) == 2
    assert "--world-size 0" in capsys.readouterr().err
    assert not Path(out).exists()
    for world, rank in ((0, 0), (2, 2), (-1, 0)):
        with pytest.raises(streamload.ConfigError, match=r"world_size|rank"):
            streamload.build_loader(config, world_size=world, rank=rank)
