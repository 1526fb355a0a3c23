"""What checking a loaded state costs: ``load_state_dict`` of a mixture, whose per-source counts
are verified by replaying its cursor's global batches (``plan.mixture.replay_cursor``), against
the same call for a single source at the same sample position (O(1) checks only, the
baseline), by position in global batches.

The states are real: the loader's own ``state_dict()`` after its cursor was advanced by the
stream (``SampleStream.advance``), so both carry exactly what a run would have saved.

Example:
    python benchmarks/state_checks.py --steps 1e3,1e5,1e6 --repeats 3
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from typing import Any

from _common import bench_config, bench_parser, emit, ensure_corpus, median, parse_sizes

import streamload


def mixture_config(paths: Sequence[str], seq_len: int, global_batch: int) -> dict[str, Any]:
    """Three weighted sources over the corpus shards (weights with fractional batch shares,
    so every global batch needs the deficit rule)."""
    config = bench_config(paths, seq_len=seq_len)
    config["sources"] = [
        {"name": name, "path": list(paths), "weight": weight}
        for name, weight in (("web", 0.55), ("code", 0.3), ("math", 0.15))
    ]
    config["global_batch_size"] = global_batch
    return config


def state_after(config: dict[str, Any], batch_size: int, steps: int) -> dict[str, Any]:
    """The state a run saves after ``steps`` global batches."""
    loader = streamload.build_loader(config, batch_size=batch_size)
    stream = loader.stream
    cursor = stream.advance(stream.start(), steps, loader.rank.global_batch)
    loader._cursor, loader._delivered = cursor, steps  # as iterating would leave them
    return loader.state_dict()


def time_load(config: dict[str, Any], batch_size: int, state: dict[str, Any]) -> float:
    loader = streamload.build_loader(config, batch_size=batch_size)
    start = time.perf_counter()
    loader.load_state_dict(state)
    return time.perf_counter() - start


def measure(args: argparse.Namespace) -> list[dict[str, Any]]:
    paths = ensure_corpus(args.data_dir, int(args.corpus_tokens), args.shard_tokens)
    top = max(args.steps) * args.batch_size + 1
    configs = {
        "single": bench_config(paths, seq_len=args.seq_len, num_samples=top),
        "mixture": mixture_config(paths, args.seq_len, args.batch_size),
    }
    states = {
        (kind, steps): state_after(cfg, args.batch_size, steps)
        for kind, cfg in configs.items()
        for steps in args.steps
    }
    runs: dict[tuple[str, int], list[float]] = {}
    for rep in range(args.repeats):
        for steps in args.steps:
            for kind, cfg in configs.items():  # interleaved
                seconds = time_load(cfg, args.batch_size, states[kind, steps])
                runs.setdefault((kind, steps), []).append(seconds)
                print(f"[{rep + 1}/{args.repeats}] {steps:.0e} {kind}: {seconds:.4f} s",
                      file=sys.stderr)  # fmt: skip
    rows = []
    for steps in args.steps:
        single = median(runs["single", steps])
        mixture = median(runs["mixture", steps])
        rows.append({
            "steps": f"{steps:.0e}",
            "single_s": single,
            "mixture_s": mixture,
            "ratio": mixture / single,
            "us_per_step": 1e6 * (mixture - single) / steps,
        })  # fmt: skip
    return rows


COLUMNS = [
    ("steps", "global batches", ""),
    ("single_s", "single source load_state_dict (s)", ".4f"),
    ("mixture_s", "3-source mixture load_state_dict (s)", ".4f"),
    ("ratio", "ratio to single", ".1f"),
    ("us_per_step", "replay µs per global batch", ".2f"),
]


def main(argv: Sequence[str] | None = None) -> None:
    parser = bench_parser(__doc__, ["thread"])
    parser.add_argument("--steps", type=parse_sizes, default=[10**3, 10**5, 10**6])
    parser.add_argument("--corpus-tokens", type=float, default=1e7, help="corpus size")
    args = parser.parse_args(argv)
    rows = measure(args)
    notes = [
        f"Global batch {args.batch_size} samples, seq_len {args.seq_len}; weights 0.55/0.3/0.15. "
        f"Median of {args.repeats} interleaved repeats, a fresh loader each (build not timed).",
        "single = the O(1) checks of a single-source state (the baseline); the mixture adds the "
        "replay of its cursor, which is what verifies its per-source counts.",
    ]
    emit(args, "State checks: load_state_dict of a mixture vs a single source", rows, COLUMNS,
         notes)  # fmt: skip


if __name__ == "__main__":
    main()
