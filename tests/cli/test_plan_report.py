"""``streamload plan``: ``--steps`` is checked like ``show --step``, a mixture's report walks
its steps in bounded memory and equals the step-by-step computation, and ``--plot`` always
writes a plot or exits 2 saying why not."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from streamload import SampleStream, load_config
from streamload.cli.main import main
from streamload.plan.mixture import MixtureCursor, counts_for
from streamload.tools.report import MAX_EPOCH_STEPS, mixture_report

PNG = b"\x89PNG"


def write_mixture(folder: Path, **extra: Any) -> Path:
    """Two sources (224 and 124 windows of 4 tokens), weights 0.7/0.3, a phase at step 50."""
    for name, n in (("web", 900), ("code", 500)):
        (folder / name).mkdir()
        np.save(folder / name / "s.npy", np.arange(n, dtype=np.uint16))
    cfg = {
        "seq_len": 4, "global_batch_size": 10, **extra,
        "sources": [
            {"name": "web", "path": str(folder / "web"), "weight": 0.7},
            {"name": "code", "path": str(folder / "code"), "weight": 0.3},
        ],
        "schedule": [{"start_step": 50, "weights": {"web": 0.23, "code": 0.77}}],
    }  # fmt: skip
    path = folder / "mix.json"
    path.write_text(json.dumps(cfg))
    return path


def brute_report(stream: SampleStream, steps: int) -> dict[str, Any]:
    """The report computed step by step from the rule (the code before the block walk); an
    epoch starts at the step that draws its first sample."""
    batch = stream.config.global_batch_size
    assert batch is not None
    drawn = np.zeros(len(stream.sources), dtype=np.int64)
    phase_step, phase_drawn = MixtureCursor.start(len(drawn)).phase_step, drawn.copy()
    rows = []
    for step in range(steps):
        counts, phase_step, phase_drawn = counts_for(
            stream.phases, batch, step, phase_step, drawn, phase_drawn
        )
        rows.append(counts)
        drawn = drawn + counts
    counts = np.array(rows).reshape(steps, len(drawn))
    names = [s.name for s in stream.sources]
    bounds = [p.start_step for p in stream.phases] + [steps]
    phases = []
    for phase, lo, hi in zip(stream.phases, bounds, bounds[1:], strict=False):
        hi = min(hi, steps)
        if lo < hi:
            part, target = counts[lo:hi], np.asarray(phase.weights)
            phases.append({
                "start_step": lo, "end_step": hi,
                "weights": dict(zip(names, target.round(6).tolist(), strict=True)),
                "realized": dict(
                    zip(names, (part.sum(0) / part.sum()).round(6).tolist(), strict=True)
                ),
                "max_batch_deviation": float(np.abs(part - target * batch).max()),
            })  # fmt: skip
    cumulative = np.cumsum(counts, axis=0)
    sources = {}
    for index, source in enumerate(stream.sources):
        n = source.num_windows
        starts = [0]
        for step in range(steps):  # the step whose samples include the epoch's first one
            before = cumulative[step - 1, index] if step else 0
            while (
                len(starts) <= MAX_EPOCH_STEPS
                and before <= len(starts) * n < (cumulative[step, index])
            ):
                starts.append(step)
        total = int(cumulative[-1, index]) if steps else 0
        sources[source.name] = {
            "windows": n, "samples": total, "epochs_completed": total // n,
            "epoch_starts": starts,
        }  # fmt: skip
    return {
        "steps": steps, "global_batch_size": batch if steps else 0, "phases": phases,
        "sources": sources,
    }  # fmt: skip


@pytest.mark.parametrize("steps", [0, 1, 49, 50, 51, 173, 2000])
def test_the_report_equals_the_step_by_step_computation(tmp_path: Path, steps: int) -> None:
    stream = SampleStream.from_config(load_config(write_mixture(tmp_path)))
    assert mixture_report(stream, steps) == brute_report(stream, steps)


def test_an_epoch_starts_at_the_step_that_draws_its_first_sample(tmp_path: Path) -> None:
    stream = SampleStream.from_config(load_config(write_mixture(tmp_path)))
    report = mixture_report(stream, 400)
    # web draws 7 of 10 samples per step in phase 0: its sample 224 lies in step 32 (224 // 7)
    assert report["sources"]["web"]["epoch_starts"][:2] == [0, 32]


def test_ten_million_steps_answer_in_bounded_memory(tmp_path: Path, capsys) -> None:
    config = write_mixture(tmp_path)
    assert main(["plan", str(config), "--steps", str(10**7), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    web = report["sources"]["web"]
    assert web["samples"] + report["sources"]["code"]["samples"] == 10**8
    # phase 1 (0.23/0.77 of 10) gives web 2 or 3 samples a step, 2.3 on average, exactly
    assert web["samples"] == 50 * 7 + (10**7 - 50) * 23 // 10
    assert report["phases"][1]["realized"] == {"web": 0.23, "code": 0.77}


@pytest.mark.parametrize(
    ("steps", "message"),
    [
        ("-1", "--steps = -1 must be >= 0"),
        (str(10**20), "--steps = 100000000000000000000 must be <= 9223372036854775807"),
        (str(2**62), "must be <= 922337203685477580"),  # samples would pass int64
    ],
)
def test_bad_steps_are_one_line_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], steps: str, message: str
) -> None:
    assert main(["plan", str(write_mixture(tmp_path)), "--steps", steps]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


def test_steps_beyond_the_pass_are_refused(tmp_path: Path, capsys) -> None:
    config = write_mixture(tmp_path, sampling={"num_samples": 1000})  # a pass of 100 steps
    assert main(["plan", str(config), "--steps", "100", "--json"]) == 0
    capsys.readouterr()
    assert main(["plan", str(config), "--steps", "101"]) == 2
    err = capsys.readouterr().err
    assert "--steps 101 lies beyond the end of the pass, which holds 100 steps" in err


def test_a_batch_size_ramp_is_walked_step_by_step(tmp_path: Path, capsys) -> None:
    """Each step counts at its own size: the report's draws are the stream's samples of the
    first steps (5, 5, 10, then 20 from step 3: megatron-core's float rule gives 20 at 20
    consumed samples, int(20 / (20 / 3)) = 3 increments)."""
    ramp = {"global_batch_size": 20, "rampup_batch_size": [5, 5, 20], "sampling": {
        "num_samples": 1000}}  # fmt: skip
    config = write_mixture(tmp_path, **ramp)
    stream = SampleStream.from_config(load_config(config))
    report = mixture_report(stream, 40)
    assert report["batch_sizes"] == [[0, 5], [2, 10], [3, 20]]
    end = 5 + 5 + 10 + 37 * 20
    drawn = np.bincount(stream.locate(0, np.arange(end))[0], minlength=2)
    assert [report["sources"][n]["samples"] for n in ("web", "code")] == drawn.tolist()
    assert report["phases"][0]["max_batch_deviation"] < 1
    assert main(["plan", str(config), "--steps", "40"]) == 0
    assert "40 steps of a batch size schedule: 5 from step 0, 10 from step 2" in (
        capsys.readouterr().out
    )
    assert main(["plan", str(config), "--steps", "52"]) == 0  # 20 + 49 x 20 = 1000 samples
    assert main(["plan", str(config), "--steps", "53"]) == 2
    assert "holds 52 steps" in capsys.readouterr().err


def test_a_single_source_prints_its_batch_size_schedule(tmp_path: Path, capsys) -> None:
    """Without a mixture (no --steps needed) the schedule's runs are printed: megatron-core's
    rule for a ramp 4 -> 16 by 4 over 100 samples (33.3 samples an increment)."""
    np.save(tmp_path / "t.npy", np.arange(4000, dtype=np.uint16))
    cfg = {"seq_len": 8, "global_batch_size": 16, "rampup_batch_size": [4, 4, 100],
           "sources": [{"name": "t", "path": str(tmp_path / "t.npy")}]}  # fmt: skip
    (tmp_path / "ramp.json").write_text(json.dumps(cfg))
    assert main(["plan", str(tmp_path / "ramp.json")]) == 0
    out = capsys.readouterr().out
    assert "  steps [0, 9): 4 samples a step, from sample 0\n" in out
    assert "  steps [9, 13): 8 samples a step, from sample 36\n" in out
    assert "  steps [16, …): 16 samples a step, from sample 104\n" in out
    assert main(["plan", str(tmp_path / "ramp.json"), "--json"]) == 0
    runs = json.loads(capsys.readouterr().out)["batch_schedule"]
    assert [(r["first_step"], r["global_batch_size"], r["steps"]) for r in runs] == [
        (0, 4, 9), (9, 8, 4), (13, 12, 3), (16, 16, None)
    ]  # fmt: skip


def test_vsl_refuses_negative_steps_too(
    make_corpus: Callable, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    corpus = make_corpus([3000], mean_doc_len=50.0)
    cfg = corpus.config(
        seq_len=32, sampling={"mode": "vsl", "min_seq_len": 4, "tokens_per_batch": 64}
    )
    (tmp_path / "vsl.json").write_text(json.dumps(cfg))
    assert main(["plan", str(tmp_path / "vsl.json"), "--steps", "-1"]) == 2
    assert "--steps = -1 must be >= 0" in capsys.readouterr().err


def test_plot_of_a_mixture_draws_its_shares(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    out = tmp_path / "shares.png"
    assert main(["plan", str(write_mixture(tmp_path)), "--steps", "300", "--plot", str(out)]) == 0
    assert out.read_bytes()[:4] == PNG


@pytest.mark.parametrize(
    "sampling",
    [{"mode": "packed"}, {"mode": "padded"}, {"split": "80,10,10"}],
    ids=["packed", "padded", "split"],
)
def test_plot_of_packing_or_splits_writes_a_png(
    make_corpus: Callable, tmp_path: Path, capsys, sampling: dict[str, Any]
) -> None:
    pytest.importorskip("matplotlib")
    cfg = make_corpus([400, 300]).config(sampling=sampling, pad_token_id=1)
    (tmp_path / "c.json").write_text(json.dumps(cfg))
    out = tmp_path / "plan.png"
    assert main(["plan", str(tmp_path / "c.json"), "--plot", str(out)]) == 0
    assert out.read_bytes()[:4] == PNG and f"wrote {out}" in capsys.readouterr().out


def test_plot_says_why_there_is_nothing_to_plot(
    make_corpus: Callable, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("matplotlib")
    (tmp_path / "c.json").write_text(json.dumps(make_corpus([400]).config()))
    out = tmp_path / "none.png"
    assert main(["plan", str(tmp_path / "c.json"), "--plot", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert "nothing to plot for a single-source concat config" in err
    assert len(err.splitlines()) == 1 and not out.exists()
