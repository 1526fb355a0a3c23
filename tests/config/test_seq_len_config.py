"""``[[seq_len_schedule]]`` and ``[seq_len_warmup]``: checks, printing, the fingerprint, the
plan report; off by default (no key printed, no fingerprint entry)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from streamload import ConfigError, DataConfig, StateError, build_loader, load_config
from streamload.cli.main import main

PHASES = [{"start_step": 0, "seq_len": 2}, {"start_step": 3, "seq_len": 4}]


@pytest.fixture
def base(tmp_path: Path) -> dict[str, Any]:
    np.save(tmp_path / "s.npy", np.arange(400, dtype=np.uint16))
    return {
        "seq_len": 8,
        "global_batch_size": 4,
        "sources": [{"name": "web", "path": str(tmp_path)}],
    }


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            {"seq_len_schedule": [{"start_step": 4, "seq_len": 3}]},
            "start_step 4: seq_len = 3 must divide seq_len = 8",
        ),
        ({"seq_len_schedule": [{"start_step": 0, "seq_len": 16}]}, "seq_len = 16 must divide"),
        (
            {
                "seq_len_schedule": [
                    {"start_step": 5, "seq_len": 2},
                    {"start_step": 5, "seq_len": 4},
                ]
            },
            "start_step values [5, 5] must strictly increase",
        ),
        (
            {"seq_len_schedule": [{"start_step": -1, "seq_len": 2}]},
            "seq_len_schedule.start_step = -1 must be >= 0",
        ),
        ({"seq_len_schedule": [{"start_step": 0, "seq_len": 0}]}, "seq_len = 0 must be >= 1"),
        ({"seq_len_schedule": [{"start_step": 0, "length": 2}]}, "length"),
        ({"seq_len_schedule": {"start_step": 0}}, "must be a list of [[seq_len_schedule]] tables"),
        (
            {"seq_len_warmup": {"start_seq_len": 3, "steps": 10}},
            "start_seq_len = 3 must be seq_len = 8 divided by a power",
        ),
        ({"seq_len_warmup": {"start_seq_len": 8, "steps": 10}}, "start_seq_len = 8 must be"),
        (
            {"seq_len_warmup": {"start_seq_len": 2, "steps": 0}},
            "seq_len_warmup.steps = 0 must be >= 1",
        ),
        (
            {"seq_len_warmup": {"start_seq_len": 2, "steps": 5}, "seq_len_schedule": PHASES},
            "both set",
        ),
        ({"seq_len_schedule": PHASES, "global_batch_size": None}, "needs global_batch_size"),
        (
            {"seq_len_schedule": PHASES, "sampling": {"mode": "padded"}, "pad_token_id": 0},
            "mode = 'padded' cannot cut",
        ),
        (
            {
                "seq_len_schedule": PHASES,
                "sampling": {"mode": "vsl", "min_seq_len": 2, "tokens_per_batch": 32},
            },
            "mode = 'vsl' cannot cut",
        ),
    ],
)
def test_bad_schedules_name_key_value_and_rule(
    base: dict[str, Any], extra: dict[str, Any], message: str
) -> None:
    cfg = {**base, **extra}
    if cfg["global_batch_size"] is None:
        del cfg["global_batch_size"]
    with pytest.raises(ConfigError, match=re.escape(message)):
        DataConfig.from_dict(cfg)


def test_a_world_that_does_not_split_a_step_is_refused(base: dict[str, Any]) -> None:
    with pytest.raises(ConfigError, match="global_batch_size"):
        build_loader({**base, "seq_len_schedule": PHASES}, batch_size=1, world_size=3, rank=0)


def test_off_by_default(base: dict[str, Any]) -> None:
    config = DataConfig.from_dict(base)
    assert "seq_len_schedule" not in config.to_dict()
    assert "seq_len_warmup" not in config.to_dict()
    state = build_loader(base, batch_size=4).state_dict()
    assert "seq_len_schedule" not in state["fingerprint"]


def test_printed_config_reads_back_equal(base: dict[str, Any]) -> None:
    for extra in (
        {"seq_len_schedule": PHASES},
        {"seq_len_warmup": {"start_seq_len": 2, "steps": 9}},
    ):
        config = DataConfig.from_dict({**base, **extra})
        assert DataConfig.from_dict(json.loads(config.to_json())) == config


def test_fingerprint_holds_the_phases_begun(base: dict[str, Any]) -> None:
    cfg = {**base, "seq_len_schedule": PHASES}
    loader = build_loader(cfg, batch_size=4)
    batches = iter(loader)
    next(batches)
    next(batches)
    state = loader.state_dict()
    assert state["fingerprint"]["seq_len_schedule"]["phases"] == [[0, 2]]
    later = {**base, "seq_len_schedule": [*PHASES, {"start_step": 9, "seq_len": 8}]}
    resumed = build_loader(later, batch_size=2, world_size=2, rank=0)
    resumed.load_state_dict(state)  # a phase added after the save point: allowed
    assert next(iter(resumed))["input_ids"].shape == (8, 2)
    changed = {**base, "seq_len_schedule": [{"start_step": 0, "seq_len": 4}]}
    with pytest.raises(StateError, match="seq_len_schedule"):
        build_loader(changed, batch_size=4).load_state_dict(state)
    with pytest.raises(StateError, match="seq_len_schedule"):
        build_loader(base, batch_size=4).load_state_dict(state)


def test_plan_prints_the_schedule(
    base: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "warm.json"
    path.write_text(json.dumps({**base, "seq_len_warmup": {"start_seq_len": 2, "steps": 30}}))
    assert main(["plan", str(path)]) == 0
    out = capsys.readouterr().out
    assert "sequence-length schedule: 32 input tokens per step" in out
    assert "steps [0, 10): seq_len 2, 4 row(s) per window, 16 per step" in out
    assert "steps [10, 30): seq_len 4, 2 row(s) per window, 8 per step" in out
    assert "steps [30, …): seq_len 8, 1 row(s) per window, 4 per step" in out
    assert main(["plan", str(path), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [p["seq_len"] for p in report["seq_len_schedule"]] == [2, 4, 8]
    assert load_config(path).seq_len_warmup is not None


def test_show_attributes_cut_rows_to_their_ranks(
    base: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "warm.json"
    path.write_text(json.dumps({**base, "seq_len_schedule": PHASES}))
    assert main(["show", str(path), "--step", "2", "--world-size", "2", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["samples"]
    assert [r["rank"] for r in rows] == [0] * 8 + [1] * 8  # 2 windows of 4 rows per rank
    assert [r["row"] for r in rows] == list(range(8)) * 2
    assert [r["sample_index"] for r in rows] == [8] * 4 + [9] * 4 + [10] * 4 + [11] * 4
