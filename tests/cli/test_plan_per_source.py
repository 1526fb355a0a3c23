"""``streamload plan``, ``samples`` and ``show`` with ``[mixture] batching = "per_source"``:
the report counts whole steps per source, far steps are reached without walking them one by
one, and the random-access paths equal the loader."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

import streamload
from streamload import SampleStream, load_config
from streamload.cli.main import main
from streamload.plan.mixture import MixtureCursor, allocate_batches
from streamload.tools.report import mixture_report
from tests.cli.test_plan_report import write_mixture

PER_SOURCE = {"batching": "per_source"}


def test_the_report_counts_whole_steps(tmp_path: Path) -> None:
    stream = SampleStream.from_config(load_config(write_mixture(tmp_path, mixture=PER_SOURCE)))
    report = mixture_report(stream, 150)
    sources, _, _ = allocate_batches(stream.phases, 10, MixtureCursor.start(2), 150)
    per_step = sources[:, 0]
    assert (sources == per_step[:, None]).all()
    assert report["sources"]["web"]["samples"] == 10 * int((per_step == 0).sum())
    # 0.7 of the first 50 steps exactly, then 0.23 of 100 steps exactly (periods of 10, 100)
    assert report["sources"]["web"]["samples"] == 10 * (35 + 23)


def test_ten_million_steps_answer_fast(tmp_path: Path, capsys) -> None:
    config = write_mixture(tmp_path, mixture=PER_SOURCE)
    steps = 50 + 10**7
    assert main(["plan", str(config), "--steps", str(steps), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["sources"]["web"]["samples"] == 10 * (35 + 23 * 10**5)
    assert report["phases"][1]["realized"] == {"web": 0.23, "code": 0.77}


def test_samples_far_into_the_run_equal_the_loader(tmp_path: Path) -> None:
    config = write_mixture(tmp_path, mixture=PER_SOURCE)
    loader = streamload.build_loader(str(config), batch_size=10)
    batches = [b["input_ids"] for _, b in zip(range(130), loader, strict=False)]
    out = tmp_path / "s.npy"
    assert (
        main(["samples", str(config), "--start", "1205", "--count", "20", "--out", str(out)]) == 0
    )
    want = np.concatenate([b.numpy() for b in batches])[1205:1225]
    np.testing.assert_array_equal(np.load(out)[:, :-1], want)
    stream = SampleStream.from_config(load_config(config))
    src, _ = stream.locate(0, np.arange(10**6 * 10, 10**6 * 10 + 30))
    assert (src.reshape(3, 10) == src.reshape(3, 10)[:, :1]).all()


def test_show_a_step(tmp_path: Path, capsys) -> None:
    config = write_mixture(tmp_path, mixture=PER_SOURCE)
    assert main(["show", str(config), "--step", "77", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    loader = streamload.build_loader(str(config), batch_size=10)
    batch = next(b for step, b in enumerate(loader) if step == 77)
    assert [s["input_ids"] for s in report["samples"]] == batch["input_ids"].tolist()
    assert len({s["source"] for s in report["samples"]}) == 1


def test_the_report_names_the_deviation_over_prefixes(tmp_path: Path, capsys) -> None:
    """Per-source phases report how far a source's samples since the phase began stray from
    its share (less than one step of B = 10 samples), not a per-batch deviation."""
    config = write_mixture(tmp_path, mixture=PER_SOURCE)
    assert main(["plan", str(config), "--steps", "400", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    for phase in report["phases"]:
        assert "max_batch_deviation" not in phase
        assert 0 < phase["max_prefix_deviation"] < 10
    assert main(["plan", str(config), "--steps", "400"]) == 0
    assert "one source a step; max deviation from the share" in capsys.readouterr().out
