"""Loader arguments (``build_loader``'s and :class:`LoaderOptions`): types, ranges and caps."""

from __future__ import annotations

import multiprocessing
from typing import Any

import pytest

from streamload.config import load_config
from streamload.config.loader_args import (
    CHUNK_BATCHES_LIMIT,
    NUM_WORKERS_LIMIT,
    PREFETCH_LIMIT,
    LoaderOptions,
    WorkerType,
    check_loader_args,
)
from streamload.errors import ConfigError

CONFIG = load_config(
    {"seq_len": 8, "global_batch_size": 8, "sources": [{"name": "web", "path": "/d"}]}
)
GOOD: dict[str, Any] = {"batch_size": 4, "rank": 1, "world_size": 2, "num_workers": 2}


def check(**changes: Any) -> LoaderOptions:
    return check_loader_args(CONFIG, **{**GOOD, "options": None, **changes})


def test_good_arguments_give_the_options() -> None:
    assert check() == LoaderOptions()
    options = LoaderOptions(worker_type="process", prefetch=0)
    assert check(options=options) is options
    assert check(options={"worker_type": "process"}).worker_type is WorkerType.PROCESS
    assert check(num_workers=NUM_WORKERS_LIMIT, world_size=1, rank=0, batch_size=8)


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"batch_size": "4"}, r"batch_size = '4' must be an integer"),
        ({"batch_size": 1.5}, r"batch_size = 1\.5 must be an integer"),
        ({"batch_size": 4.0}, r"batch_size = 4\.0 must be an integer"),
        ({"batch_size": True}, r"batch_size = True must be an integer"),
        ({"batch_size": None}, r"batch_size = None must be an integer"),
        ({"batch_size": 0}, r"batch_size = 0 must be >= 1"),
        ({"batch_size": 2**63}, r"batch_size = 9223372036854775808 must be <= "),
        ({"num_workers": 1.5}, r"num_workers = 1\.5 must be an integer"),
        ({"num_workers": "2"}, r"num_workers = '2' must be an integer"),
        ({"num_workers": True}, r"num_workers = True must be an integer"),
        ({"num_workers": -1}, r"num_workers = -1 must be >= 0"),
        ({"num_workers": 10_000}, rf"num_workers = 10000 must be <= {NUM_WORKERS_LIMIT}"),
        ({"rank": 0.0}, r"rank = 0\.0 must be an integer"),
        ({"rank": "1"}, r"rank = '1' must be an integer"),
        ({"world_size": "2"}, r"world_size = '2' must be an integer"),
        ({"world_size": 0, "rank": 0}, r"world_size = 0 must be >= 1"),
        ({"rank": 2}, r"rank 2 is not in \[0, world_size = 2\)"),
        ({"rank": -1}, r"rank -1 is not in \[0, world_size = 2\)"),
        ({"batch_size": 2**62}, r"world_size 2 x batch_size 4611686018427387904 = .* int64"),
        ({"batch_size": 3}, r"global_batch_size = 8 in the config, but world_size 2 x batch"),
        ({"options": "fast"}, r"options = 'fast' must be a LoaderOptions, a table of its "),
        ({"options": {"prefech": 1}}, r"options: unknown key\(s\) prefech \(did you mean pre"),
    ],
)
def test_bad_arguments(changes: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        check(**changes)


def test_ranks_may_be_unset() -> None:
    """Before a mesh or torch.distributed is asked, rank and world_size may be None."""
    assert check_loader_args(None, batch_size=2, rank=None, world_size=None, num_workers=0)


@pytest.mark.parametrize(
    ("fields", "match"),
    [
        ({"worker_type": "gpu"}, r"worker_type = 'gpu' is not one of 'thread', 'process'"),
        ({"worker_type": ["x"]}, r"worker_type = \['x'\] is not one of"),
        ({"prefetch": -1}, r"prefetch = -1 must be >= 0"),
        ({"prefetch": "2"}, r"prefetch = '2' must be an integer"),
        ({"prefetch": 1.5}, r"prefetch = 1\.5 must be an integer"),
        ({"prefetch": PREFETCH_LIMIT + 1}, rf"prefetch = {PREFETCH_LIMIT + 1} must be <= "),
        ({"chunk_batches": 0}, r"chunk_batches = 0 must be >= 1"),
        ({"chunk_batches": "2"}, r"chunk_batches = '2' must be an integer"),
        ({"chunk_batches": CHUNK_BATCHES_LIMIT + 1}, r"chunk_batches = \d+ must be <= "),
        ({"pin_memory": "no"}, r"pin_memory = 'no' must be true/false"),
        ({"pin_memory": 1}, r"pin_memory = 1 must be true/false"),
        (
            {"worker_type": "process", "multiprocessing_context": "bogus"},
            r"multiprocessing_context = 'bogus' is not one of .*'spawn'",
        ),
        (
            {"worker_type": "process", "multiprocessing_context": 3},
            r"multiprocessing_context = 3 is not one of",
        ),
        (
            {"multiprocessing_context": "spawn"},
            r"multiprocessing_context = 'spawn' applies only to worker_type = 'process'",
        ),
    ],
)
def test_bad_options(fields: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        LoaderOptions(**fields)


@pytest.mark.parametrize("method", multiprocessing.get_all_start_methods())
def test_every_start_method_of_the_platform(method: str) -> None:
    options = LoaderOptions(worker_type="process", multiprocessing_context=method)
    assert options.multiprocessing_context == method


def test_options_are_frozen_and_print_back() -> None:
    options = LoaderOptions(worker_type="process", prefetch=3, chunk_batches=2)
    assert LoaderOptions(**options.to_dict()) == options
    assert options.to_dict()["worker_type"] == "process"
    with pytest.raises(AttributeError):
        options.prefetch = 4  # type: ignore[misc]
