"""The option tables and mixture weights: missing, mistyped and overflowing values are
ConfigErrors naming the field, the value and the rule."""

from __future__ import annotations

from typing import Any

import pytest

from streamload.config import load_config
from streamload.errors import ConfigError


def mixture(*weights: Any, **top: Any) -> dict[str, Any]:
    sources = [
        {"name": name, "path": f"/data/{name}", "weight": w}
        for name, w in zip("ab", weights, strict=True)
    ]
    return {"seq_len": 8, "global_batch_size": 4, "sources": sources, **top}


def phase(**fields: Any) -> dict[str, Any]:
    return mixture(1, 1, schedule=[fields])


@pytest.mark.parametrize(
    ("cfg", "match"),
    [
        (phase(weights={"a": 1, "b": 1}), r"schedule\[0\]: start_step is required"),
        (phase(start_step=5), r"schedule\[0\]: weights is required"),
        (phase(), r"schedule\[0\]: start_step, weights are required"),
    ],
)
def test_schedule_entry_without_a_required_key(cfg: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        load_config(cfg)


@pytest.mark.parametrize(
    ("cfg", "match"),
    [
        (mixture(1e308, 1e308), r"source weights 1e\+308, 1e\+308 sum to inf; .* below 1e\+308"),
        (mixture(1e308, 5e307), r"source weights 1e\+308, 5e\+307 sum to 1\.5e\+308; the sum must"),
        (
            phase(start_step=0, weights={"a": 6e307, "b": 5e307}),
            r"schedule at start_step 0: weights 6e\+307, 5e\+307 sum to 1\.1e\+308",
        ),
        (
            mixture(1e308, 1e308, sampling={"mode": "megatron", "num_samples": 10}),
            r"source weights .* sum to inf",
        ),
    ],
)
def test_weights_whose_sum_overflows(cfg: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        load_config(cfg)


def test_huge_weights_below_the_limit_are_fine() -> None:
    assert load_config(mixture(4e307, 5e307)).sources[1].weight == 5e307


@pytest.mark.parametrize(
    ("weights", "match"),
    [
        ({"a": float("nan"), "b": 1}, r"weight of 'a' = nan must be finite and >= 0"),
        ({"a": -1, "b": 1}, r"weight of 'a' = -1 must be finite and >= 0"),
        ({"a": True, "b": 1}, r"weight of 'a' = True must be a number"),
        ({"a": "1", "b": 1}, r"weight of 'a' = '1' must be a number"),
        ({"a": float("inf"), "b": 1}, r"weight of 'a' = inf must be finite"),
        ({"a": 10**400, "b": 1}, r"weight of 'a' = 1000+\.\.\. must be finite and >= 0"),
        ({1: 1, "a": 1, "b": 1}, r"start_step 0: weights key 1 must be a source name"),
        ([1, 1], r"weights = \[1, 1\] must be a table of source = weight"),
    ],
)
def test_bad_schedule_weights(weights: Any, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        load_config(phase(start_step=0, weights=weights))


@pytest.mark.parametrize(
    ("start", "match"),
    [
        (1.5, r"schedule\.start_step = 1\.5 must be an integer"),
        (True, r"start_step = True must be an integer"),
        (-1, r"start_step = -1 must be >= 0"),
        (2**63, r"start_step = 9223372036854775808 must be <= 9223372036854775807"),
    ],
)
def test_bad_start_step(start: Any, match: str) -> None:
    with pytest.raises(ConfigError, match=match) as info:
        load_config(phase(start_step=start, weights={"a": 1, "b": 1}))
    assert "in schedule[0]" in getattr(info.value, "__notes__", [str(info.value)])


@pytest.mark.parametrize(
    ("temperature", "match"),
    [
        (0, r"mixture\.temperature = 0 must be finite and > 0"),
        (float("nan"), r"mixture\.temperature = nan must be"),
        ("1", r"mixture\.temperature = '1' must be"),
        (True, r"mixture\.temperature = True must be"),
    ],
)
def test_bad_temperature(temperature: Any, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        load_config(mixture(1, 1, mixture={"temperature": temperature}))


MEGATRON = {"mode": "megatron", "num_samples": 100}


@pytest.mark.parametrize(
    ("cfg", "match"),
    [
        (
            mixture(1, 1, seed=2**32, sampling=MEGATRON),
            r"seed = 4294967296 must be < 2\*\*32 with sampling\.mode = 'megatron'",
        ),
        (
            mixture(1, 1, sampling={**MEGATRON, "split": "9" * 400}),
            r"sampling\.split = '9999.*' holds a number too large for a float",
        ),
        (mixture(1, 1, sampling={**MEGATRON, "split": "."}), r"split '\.': could not convert"),
        (mixture(1, 1, sampling={**MEGATRON, "split": 5}), r"sampling\.split = 5 must be"),
    ],
)
def test_bad_megatron_values(cfg: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        load_config(cfg)


def test_largest_megatron_seed_is_fine() -> None:
    assert load_config(mixture(1, 1, seed=2**32 - 1, sampling=MEGATRON)).seed == 2**32 - 1
