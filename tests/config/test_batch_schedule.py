"""``rampup_batch_size`` and ``[[batch_schedule]]``: parsing, printing back, clear refusals."""

from __future__ import annotations

from typing import Any

import pytest

from streamload import ConfigError
from streamload.config import DataConfig, load_config
from streamload.config.batch_schedule import (
    BatchStepConfig,
    batch_schedule_fingerprint,
    step_sizes,
)
from streamload.config.loader_args import check_loader_args


def config(**extra: Any) -> dict[str, Any]:
    return {"seq_len": 8, "sources": [{"name": "web", "path": "/data/web"}], **extra}


def test_megatron_three_numbers_round_trip() -> None:
    cfg = load_config(config(global_batch_size=24, rampup_batch_size=[4, 4, 40]))
    assert cfg.rampup_batch_size == (4, 4, 40)
    assert DataConfig.from_dict(cfg.to_dict()) == cfg
    sizes = step_sizes(cfg, 4)
    assert (sizes.starts, sizes.sizes) == ((0, 8, 16, 24, 32, 40), (4, 8, 12, 16, 20, 24))
    assert step_sizes(cfg, 4, pass_index=1).sizes == (24,)  # a later pass: the final size
    fingerprint = {"rampup_batch_size": [4, 4, 40], "global_batch_size": 24}
    assert batch_schedule_fingerprint(cfg) == fingerprint


@pytest.mark.parametrize("key", ["start_step", "start_sample"])
def test_tables_round_trip_and_fill_the_global_batch_size(key: str) -> None:
    table = [{key: 0, "global_batch_size": 8}, {key: 4, "global_batch_size": 16}]
    cfg = load_config(config(batch_schedule=table))
    assert cfg.global_batch_size == 16
    assert cfg.batch_schedule[1] == BatchStepConfig(global_batch_size=16, **{key: 4})
    assert DataConfig.from_dict(cfg.to_dict()) == cfg
    starts = (0, 32) if key == "start_step" else (0, 4)
    assert step_sizes(cfg, 8).starts == starts
    assert batch_schedule_fingerprint(cfg) == {key: [[0, 8], [4, 16]]}


def test_no_schedule_leaves_the_fingerprint_and_steps_alone() -> None:
    cfg = load_config(config(grad_accum_steps=3))
    assert batch_schedule_fingerprint(cfg) is None
    assert step_sizes(cfg, 4).sizes == (12,)


@pytest.mark.parametrize(
    ("extra", "match"),
    [
        ({"rampup_batch_size": [4, 4, 40]}, r"needs global_batch_size"),
        ({"rampup_batch_size": [4, 4], "global_batch_size": 8}, r"\[start, increment, samples\]"),
        ({"rampup_batch_size": [0, 4, 40], "global_batch_size": 8}, r"rampup_batch_size start"),
        ({"rampup_batch_size": [4, 4, 0], "global_batch_size": 8}, r"rampup_batch_size samples"),
        ({"rampup_batch_size": [4, 3, 40], "global_batch_size": 8}, r"multiple of 3"),
        ({"rampup_batch_size": [8, 4, 40], "global_batch_size": 8}, r"whole increments"),
        ({"rampup_batch_size": [4.0, 4, 40], "global_batch_size": 8}, r"must be an integer"),
        (
            {"rampup_batch_size": [4, 4, 40], "global_batch_size": 8, "grad_accum_steps": 2},
            r"grad_accum_steps = 2 with a batch size schedule",
        ),
        (
            {
                "rampup_batch_size": [4, 4, 40],
                "global_batch_size": 8,
                "batch_schedule": [{"start_step": 0, "global_batch_size": 8}],
            },
            r"both set",
        ),
        ({"batch_schedule": [{"global_batch_size": 8}]}, r"exactly one of start_step"),
        (
            {"batch_schedule": [{"start_step": 0, "start_sample": 0, "global_batch_size": 8}]},
            r"exactly one of start_step and start_sample \(got start_step and start_sample\)",
        ),
        ({"batch_schedule": [{"start_step": 2, "global_batch_size": 8}]}, r"must begin at 0"),
        (
            {
                "batch_schedule": [
                    {"start_step": 0, "global_batch_size": 8},
                    {"start_sample": 9, "global_batch_size": 4},
                ]
            },
            r"use one of them in every entry",
        ),
        (
            {
                "batch_schedule": [
                    {"start_step": 0, "global_batch_size": 8},
                    {"start_step": 0, "global_batch_size": 4},
                ]
            },
            r"strictly increase",
        ),
        (
            {"batch_schedule": [{"start_step": 0, "global_batch_size": 8}], "global_batch_size": 4},
            r"last \[\[batch_schedule\]\] entry says 8",
        ),
        ({"batch_schedule": [{"start_step": 0, "global_batch_size": 0}]}, r">= 1"),
        (
            {"batch_schedule": [{"start_step": 0, "gbs": 8}]},
            r"batch_schedule\[0\]: unknown key\(s\) gbs",
        ),
        ({"batch_schedule": {"start_step": 0}}, r"list of \[\[batch_schedule\]\] tables"),
    ],
)
def test_bad_schedules_are_refused_with_the_rule(extra: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        load_config(config(**extra))


def test_a_sequence_length_warm_up_beside_it_is_refused() -> None:
    warmup = {"seq_len": 8, "seq_len_schedule": [{"start_step": 0, "seq_len": 4}]}
    cfg = config(global_batch_size=8, rampup_batch_size=[4, 4, 40], **warmup)
    with pytest.raises(ConfigError, match=r"with a sequence-length warm-up .* not supported yet"):
        load_config(cfg)


def test_vsl_refuses_a_schedule() -> None:
    sampling = {"mode": "vsl", "tokens_per_batch": 64, "min_seq_len": 4}
    cfg = config(sampling=sampling, global_batch_size=8, rampup_batch_size=[4, 4, 40])
    with pytest.raises(ConfigError, match=r"no meaning with mode = 'vsl'.*fixed number of tokens"):
        load_config(cfg)


def test_a_world_size_that_does_not_divide_a_step_is_refused_before_any_listing() -> None:
    cfg = load_config(config(global_batch_size=24, rampup_batch_size=[4, 4, 40]))
    check_loader_args(cfg, batch_size=2, rank=0, world_size=2, num_workers=0)
    with pytest.raises(ConfigError, match=r"optimizer step 0 \(from sample 0\) holds 4 samples.*"
                       r"world_size 3 x batch_size 1 = 3"):  # fmt: skip
        check_loader_args(cfg, batch_size=1, rank=0, world_size=3, num_workers=0)
