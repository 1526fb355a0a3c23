"""Fuzzing every way a config and the loader arguments come in: each case is a
:class:`StreamloadError` (a ConfigError naming what is wrong) or a valid config that prints
back to an equal one; never another exception.

Seeded and bounded (``random.Random(SEED)``, a fixed number of cases per kind): dicts with
random types in every field, missing, extra and misspelled keys and nested garbage (Python
objects included); the same printed as TOML, YAML and JSON files and garbled; random bytes
as a file; random ``build_loader`` arguments and ``LoaderOptions``. The counts of each
outcome are printed (``pytest -s``) and checked to cover both outcomes.
"""

from __future__ import annotations

import copy
import json
import math
import random
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from streamload.config import DataConfig, load_config
from streamload.config.loader_args import LoaderOptions, check_loader_args
from streamload.errors import ConfigError, StreamloadError
from tests.config import fuzz_inputs as fz

SEED = 22
CASES = {"dict": 2000, "toml": 500, "yaml": 400, "json": 400, "bytes": 300, "loader": 3000}
"""Cases per kind (about 4 s in all on one core, most of it printing configs back)."""


def same(a: Any, b: Any) -> bool:
    """Equal as printed data: NaN equals NaN, a tuple equals a list."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b) and type(a) is type(b)


def round_trips(cfg: DataConfig) -> str:
    """The config prints back equal through ``to_dict`` and, when printable, ``to_json``."""
    again = DataConfig.from_dict(cfg.to_dict())
    assert same(again.to_dict(), cfg.to_dict())
    try:
        text = cfg.to_json()
    except ConfigError:  # a storage_options value a dict held that JSON cannot print
        return "valid (not JSON)"
    parsed = DataConfig.from_dict(json.loads(text))
    assert same(parsed.to_dict(), cfg.to_dict())
    assert parsed.to_json() == text
    return "valid"


def outcome(load: Callable[[], DataConfig]) -> str:
    try:
        cfg = load()
    except StreamloadError:
        return "error"
    return round_trips(cfg)


def run_cases(kind: str, make: Callable[[random.Random, int], Callable[[], str]]) -> Counter:
    rng = random.Random(f"{SEED}-{kind}")
    counts: Counter = Counter()
    for index in range(CASES[kind]):
        case = make(rng, index)
        try:
            counts[case()] += 1
        except Exception as exc:
            raise AssertionError(f"{kind} case {index}: {type(exc).__name__}: {exc}") from exc
    print(f"{kind}: {CASES[kind]} cases, {dict(sorted(counts.items()))}")
    return counts


def draw_config(rng: random.Random, python_only: bool) -> Any:
    cfg = fz.valid_config(rng)
    for _ in range(rng.choice([0, 0, 1, 1, 2, 3, 6])):
        cfg = fz.mutate(rng, cfg, python_only)
    return cfg


def test_valid_configs_are_accepted() -> None:
    """The generator's unmutated configs follow every rule: all load and round-trip."""
    rng = random.Random(SEED)
    for index in range(200):
        cfg = fz.valid_config(rng)
        assert outcome(lambda cfg=cfg: load_config(copy.deepcopy(cfg))) == "valid", (index, cfg)


def test_dicts() -> None:
    def make(rng: random.Random, index: int) -> Callable[[], str]:
        cfg = draw_config(rng, python_only=True)
        return lambda: outcome(lambda: load_config(cfg))

    counts = run_cases("dict", make)
    assert counts["error"] > 500 and counts["valid"] > 200


@pytest.mark.parametrize(
    ("kind", "suffix", "printer"),
    [
        ("toml", ".toml", fz.toml_text),
        ("yaml", ".yaml", fz.yaml_text),
        ("json", ".json", fz.json_text),
    ],
)
def test_files(tmp_path: Path, kind: str, suffix: str, printer: Callable[[Any], str]) -> None:
    def make(rng: random.Random, index: int) -> Callable[[], str]:
        cfg = draw_config(rng, python_only=False)
        text = printer(cfg) if isinstance(cfg, dict) or kind != "toml" else repr(cfg)
        if rng.random() < 0.4:
            text = fz.damage(rng, text)
        path = tmp_path / f"c{index}{suffix}"
        data = text.encode("utf-8", "surrogatepass")
        if rng.random() < 0.05:
            data = data.replace(b"e", b"\xe9")  # Latin-1 bytes in a UTF-8 file
        path.write_bytes(data)
        return lambda: outcome(lambda: load_config(path))

    counts = run_cases(kind, make)
    assert counts["error"] > 50 and counts["valid"] > 50


def test_random_bytes_as_a_file(tmp_path: Path) -> None:
    def make(rng: random.Random, index: int) -> Callable[[], str]:
        path = tmp_path / f"b{index}{rng.choice(['.toml', '.yaml', '.yml', '.json', ''])}"
        if rng.random() < 0.5:
            path.write_bytes(rng.randbytes(rng.randrange(300)))
        else:  # valid UTF-8 of random characters, ASCII punctuation first
            pool = "[]{}=:,-\"'#\n ab1.\t&*!|>~" + "".join(map(chr, range(0x80, 0x100)))
            path.write_text("".join(rng.choice(pool) for _ in range(rng.randrange(200))))
        return lambda: outcome(lambda: load_config(path))

    counts = run_cases("bytes", make)
    assert counts["error"] == CASES["bytes"]


_LOADER_VALUES = [0, 1, 2, 3, 8, -1, 255, 256, 257, 10_000, 2**62, 2**63, 1.5, 4.0, "4", None,
                  True, False, [], {}, float("nan")]  # fmt: skip
_OPTION_VALUES: dict[str, list[Any]] = {
    "worker_type": ["thread", "process", "gpu", 1, None, ["thread"]],
    "prefetch": [0, 2, 256, 257, -1, 1.5, "2", True],
    "pin_memory": [True, False, 0, "no", None],
    "chunk_batches": [None, 1, 64, 4096, 4097, 0, -2, 2.0, "8"],
    "multiprocessing_context": [None, "fork", "spawn", "forkserver", "bogus", 3, ""],
}
CONFIG = load_config(
    {"seq_len": 8, "global_batch_size": 8, "sources": [{"name": "w", "path": "/d"}]}
)


def draw_options(rng: random.Random) -> Any:
    roll = rng.random()
    if roll < 0.2:
        return None
    fields = {k: rng.choice(v) for k, v in _OPTION_VALUES.items() if rng.random() < 0.5}
    if rng.random() < 0.1:
        fields[fz.key(rng)] = fz.scalar(rng)
    if roll < 0.6:
        return fields
    if roll < 0.9:
        try:
            return LoaderOptions(**fields)
        except TypeError:  # an unknown keyword: Python's own call check
            return None
        except ConfigError:
            return LoaderOptions()
    return fz.scalar(rng, python_only=True)


def test_loader_arguments() -> None:
    def make(rng: random.Random, index: int) -> Callable[[], str]:
        args = {
            name: rng.choice(_LOADER_VALUES if rng.random() < 0.3 else [1, 2, 4, 8])
            for name in ("batch_size", "num_workers")
        }
        args["world_size"] = rng.choice([None, 1, 1, 2, 2, 4, 0, 2.0, "2"])
        args["rank"] = None if args["world_size"] is None else rng.choice([0, 0, 1, 3, -1, 0.0])
        options = draw_options(rng)

        def check() -> str:
            try:
                result = check_loader_args(CONFIG, **args, options=options)
            except StreamloadError:
                return "error"
            assert isinstance(result, LoaderOptions)
            assert LoaderOptions(**result.to_dict()) == result
            assert args["batch_size"] >= 1 and 0 <= args["num_workers"] <= 256
            return "valid"

        return check

    counts = run_cases("loader", make)
    assert counts["error"] > 1000 and counts["valid"] > 50
