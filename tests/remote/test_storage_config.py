"""The ``[storage]`` table (:class:`streamload.config.storage.StorageConfig`): every field is
checked, and a bad value is a ``ConfigError`` naming the field, never accepted (a NaN timeout
made every wait raise or never end) and never another exception.

The fuzz is seeded and bounded (``random.Random(SEED)``, ``CASES`` tables of random values in
random fields); every accepted table has a finite request budget.
"""

from __future__ import annotations

import math
import random
from typing import Any

import pytest

from streamload.config import DataConfig
from streamload.config.storage import MAX_RETRIES, MAX_SECONDS, StorageConfig
from streamload.errors import ConfigError
from streamload.remote.retry import request_budget

SEED = 22
CASES = 3000

NAN, INF = float("nan"), float("inf")


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("timeout", NAN), ("timeout", INF), ("timeout", -INF), ("timeout", -1.0), ("timeout", 0),
        ("timeout", True), ("timeout", "2"), ("timeout", None), ("timeout", [2]),
        ("timeout", 1e300), ("timeout", 10**400),
        ("stall_timeout", NAN), ("stall_timeout", INF), ("stall_timeout", 0.0),
        ("stall_warning", NAN), ("stall_warning", -0.5), ("stall_warning", False),
        ("backoff", NAN), ("backoff", INF), ("backoff", -0.1), ("backoff", "0.1"),
        ("retries", -1), ("retries", 10**9), ("retries", 2**64), ("retries", 1.0),
        ("retries", True), ("retries", "3"), ("retries", NAN),
        ("max_concurrency", 0), ("max_concurrency", 10**6), ("max_concurrency", 2.5),
        ("prefetch_batches", -1), ("prefetch_batches", 2**63),
        ("block_size", 0), ("block_size", 10**30), ("block_size", 4096.0),
        ("cache_size", -1), ("cache_size", 1e9), ("memory_size", -1), ("memory_size", "1G"),
        ("whole_shard_size", -1), ("coalesce_gap", -1), ("coalesce_gap", None),
        ("cache_dir", ""), ("cache_dir", "a\x00b"), ("cache_dir", 3), ("cache_dir", ["/tmp"]),
        ("window_reads", "whole"), ("window_reads", ["exact"]), ("client", {}),
        ("client", None),
    ],
)  # fmt: skip
def test_a_bad_value_names_its_field(field: str, value: Any) -> None:
    with pytest.raises(ConfigError, match=rf"^storage\.{field} = "):
        StorageConfig(**{field: value})
    with pytest.raises(ConfigError, match=rf"storage\.{field} = "):  # through the config
        DataConfig.from_dict(
            {"seq_len": 4, "sources": [{"name": "a", "path": "x"}], "storage": {field: value}}
        )


def test_limits_are_accepted() -> None:
    config = StorageConfig(timeout=MAX_SECONDS, retries=MAX_RETRIES, stall_warning=0, backoff=0)
    assert math.isfinite(request_budget(config))
    StorageConfig(timeout=1e-3, stall_timeout=1e-3, retries=0)


_VALUES: list[Any] = [
    0, 1, -1, 2, 7, 100, 101, 1024, 1025, 1 << 20, 1 << 30, (1 << 30) + 1, 2**63 - 1, 2**63,
    0.0, 0.5, -0.5, 1e-9, 86_400.0, 86_401.0, 1e300, NAN, INF, -INF, True, False, None,
    "", "1", "exact", "blocks", "auto", "http", "fsspec", "/tmp/x", "a\x00", [], [1], {}, {"a": 1},
    (1,), b"1", object(),
]  # fmt: skip


def test_random_tables_are_accepted_consistently_or_refused() -> None:
    """Seeded: ``CASES`` tables of 1-4 random fields; each is a ``ConfigError`` naming one of
    its fields, or a config whose numbers are finite and in range."""
    rng = random.Random(SEED)
    fields = [name for name in StorageConfig.__dataclass_fields__]
    outcomes = {"accepted": 0, "refused": 0}
    for _ in range(CASES):
        table = {f: rng.choice(_VALUES) for f in rng.sample(fields, rng.randint(1, 4))}
        try:
            config = StorageConfig(**table)
        except ConfigError as exc:
            assert any(f"storage.{f} = " in str(exc) for f in table), (table, exc)
            outcomes["refused"] += 1
            continue
        outcomes["accepted"] += 1
        for name in ("timeout", "stall_timeout", "backoff", "stall_warning"):
            value = getattr(config, name)
            assert not isinstance(value, bool) and 0 <= value <= MAX_SECONDS, (name, value)
        assert config.timeout > 0 and config.stall_timeout > 0
        assert 0 <= config.retries <= MAX_RETRIES
        assert math.isfinite(request_budget(config))
    assert min(outcomes.values()) > CASES // 20, outcomes
