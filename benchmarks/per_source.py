"""Per-source batches (``[mixture] batching = "per_source"``): what reaching step N costs,
and what allocating the next steps costs, against the mixed allocation in the same run.

* reach: ``plan.mixture.advance_cursor`` from step 0 to step N (what ``streamload samples``,
  ``show`` and a replayed state check do; ``plan --steps`` walks the same blocks), per-source
  and mixed, medians of interleaved repeats, and their ratio.
* next: ``plan.mixture.allocate_batches`` of ``--next-steps`` steps from step N (what the
  loader does per chunk), µs per step.

Weight sets: short decimals (0.7/0.2/0.1: a period of 10 steps), equal thirds (1/3 each:
a period of 3 after the gcd), and random weights over 5 and 20 sources (17 significant
digits, as after a ``temperature``: no short period, walked by guessing and checking).

Example:
    python benchmarks/per_source.py --steps 1e5,1e6 --repeats 3
"""

from __future__ import annotations

import argparse
import gc
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from _common import add_common_args, emit, median, parse_sizes

from streamload.plan.mixture import MixtureCursor, Phase, advance_cursor, allocate_batches

COLUMNS = [
    ("weights", "weights", ""),
    ("steps", "steps N", ""),
    ("mixed_s", "reach N, mixed (s, baseline)", ".4f"),
    ("per_source_s", "reach N, per-source (s)", ".4f"),
    ("ratio", "per-source / mixed", ".2f"),
    ("mixed_next_us", "next steps, mixed (µs/step)", ".1f"),
    ("per_source_next_us", "next steps, per-source (µs/step)", ".1f"),
]


def weight_sets() -> dict[str, tuple[float, ...]]:
    rng = np.random.default_rng(0)
    out = {"0.7/0.2/0.1": (0.7, 0.2, 0.1), "1/3 each": (1 / 3,) * 3}
    for count in (5, 20):
        raw = rng.random(count) ** 2 + 0.01
        out[f"random x{count}"] = tuple((raw / raw.sum()).tolist())
    return out


def timed(fn: Callable[[], Any]) -> float:
    gc.collect()
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def measure(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows = []
    for name, weights in weight_sets().items():
        phases = {flag: (Phase(0, weights, flag),) for flag in (False, True)}
        start = MixtureCursor.start(len(weights))
        for steps in args.steps:
            reach: dict[bool, list[float]] = {False: [], True: []}
            following: dict[bool, list[float]] = {False: [], True: []}
            for _ in range(args.repeats):
                for flag in (False, True):  # interleaved: noise hits both alike
                    ph, big = phases[flag], args.batch_size
                    reach[flag].append(
                        timed(lambda ph=ph, b=big, s=start, n=steps: advance_cursor(ph, b, s, n))
                    )
                    cursor = advance_cursor(ph, big, start, steps)
                    count = args.next_steps
                    spent = timed(
                        lambda ph=ph, b=big, c=cursor, k=count: allocate_batches(ph, b, c, k)
                    )
                    following[flag].append(spent / args.next_steps * 1e6)
            mixed, per_source = median(reach[False]), median(reach[True])
            rows.append({
                "weights": name, "steps": steps, "mixed_s": mixed, "per_source_s": per_source,
                "ratio": per_source / mixed if mixed else float("nan"),
                "mixed_next_us": median(following[False]),
                "per_source_next_us": median(following[True]),
            })  # fmt: skip
    return rows


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    add_common_args(parser)
    parser.add_argument("--steps", type=parse_sizes, default=[10**5, 10**6])
    parser.add_argument("--batch-size", type=int, default=512, help="global batch (samples)")
    parser.add_argument("--next-steps", type=int, default=16, help="steps allocated from N")
    args = parser.parse_args(argv)
    rows = measure(args)
    notes = [
        f"Global batch {args.batch_size} samples; one phase. Median of {args.repeats} "
        "interleaved repeats; garbage collected before each timing.",
        "reach N = advance_cursor from step 0 to N (counts only, bounded memory): the cost of "
        "random access (streamload samples/show) and of a replayed state check; mixed is the "
        "existing per-sample allocation, the baseline.",
        f"next steps = allocate_batches of {args.next_steps} steps from step N (sources and "
        "source-local ids of every sample), µs per step: the loader's cost per chunk.",
    ]
    emit(args, "Per-source batches: reaching step N and allocating the next steps", rows,
         COLUMNS, notes)  # fmt: skip


if __name__ == "__main__":
    main()
