"""What a mixture's state costs: ``load_state_dict`` (its checks), its bytes, and the batch
assignment, by sources and position, before and after issue 31 item 5, in one run.

* after: this checkout. A position of more than ``MAX_REPLAYED`` global batches × sources is
  checked against its bounds in O(sources) (``plan.mixture.cursor_bounds``); a shorter one is
  replayed (``plan.mixture.replay_cursor``, vectorized).
* before: the plain-Python allocation walk that every load replayed up to issue 31, kept below
  verbatim (``OldWalk``) and timed on the same state's position (the rest of a load, the
  baseline, is the same code). Where it would take longer than ``--before-max`` source-batches
  it is extrapolated from its cost per batch at the largest position timed (marked ``~``).
* baseline: ``load_state_dict`` of a single source at the same sample position (O(1)).
* assignment: ``plan.mixture.allocate_batches`` of ``--assign-batches`` global batches from the
  saved position (after) against the old walk and placement (before), µs per global batch.

The states are real: the loader's own ``state_dict()`` after its cursor was advanced by the
stream (``SampleStream.advance``), so they carry exactly what a run would have saved.

Example:
    python benchmarks/state_checks.py --sources 3,1000 --steps 1e4,1e6 --repeats 3
"""

from __future__ import annotations

import argparse
import bisect
import gc
import json
import sys
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
from _common import bench_config, bench_parser, emit, ensure_corpus, median, parse_sizes

import streamload
from streamload.plan._exact import integer_weights
from streamload.plan.mixture import MixtureCursor, Phase, allocate_batches


class OldWalk:
    """The allocation walk of ``plan/mixture.py`` before issue 31 (plain Python over every
    source, one batch after the other), kept to time "before" in the same run."""

    def __init__(self, phases: tuple[Phase, ...]) -> None:
        self.phases, self.rules = phases, {}

    def _rule(self, p: int, big: int) -> tuple[Any, ...]:
        if (p, big) not in self.rules:
            nums, total = integer_weights(self.phases[p].weights)
            exact = [n * big for n in nums]
            floors = [x // total for x in exact]
            candidates = [i for i, x in enumerate(exact) if x % total]
            self.rules[p, big] = (nums, total, floors, big - sum(floors), candidates)
        return self.rules[p, big]

    def walk(self, big: int, cursor: MixtureCursor, count: int, rows: list | None = None):
        starts = [p.start_step for p in self.phases]
        drawn, phase_drawn = list(cursor.drawn), list(cursor.phase_drawn)
        phase_step, step, end = cursor.phase_step, cursor.step, cursor.step + count
        while step < end:
            p = bisect.bisect_right(starts, step) - 1
            if starts[p] > phase_step:
                phase_step, phase_drawn = starts[p], list(drawn)
            stop = min(end, starts[p + 1]) if p + 1 < len(starts) else end
            nums, total, floors, extra, candidates = self._rule(p, big)
            since = [d - q for d, q in zip(drawn, phase_drawn, strict=True)]
            samples = sum(since)
            for _ in range(stop - step):
                counts = list(floors)
                t = samples + big
                order = sorted(
                    candidates, key=lambda i: total * (since[i] + counts[i]) - nums[i] * t
                )
                for i in order[:extra]:
                    counts[i] += 1
                if rows is not None:
                    rows.append(([q + a for q, a in zip(phase_drawn, since, strict=True)], counts))
                for i in range(len(since)):
                    since[i] += counts[i]
                samples += big
            drawn = [q + a for q, a in zip(phase_drawn, since, strict=True)]
            step = stop
        return MixtureCursor(end, tuple(drawn), phase_step, tuple(phase_drawn))

    def allocate(self, big: int, cursor: MixtureCursor, count: int) -> np.ndarray:
        rows: list[tuple[list[int], list[int]]] = []
        self.walk(big, cursor, count, rows)
        counts = np.array([c for _, c in rows], dtype=np.int64)
        before = np.array([d for d, _ in rows], dtype=np.int64)
        flat = counts.ravel()
        n, s = counts.shape
        row = np.repeat(np.repeat(np.arange(n), s), flat)
        source = np.repeat(np.tile(np.arange(s), n), flat)
        j = np.arange(flat.sum()) - np.repeat(np.cumsum(flat) - flat, flat)
        key = (j + 0.5) / np.repeat(np.maximum(flat, 1), flat)
        order = np.lexsort((source, key, row))
        return source[order].reshape(n, big), (before[row, source] + j)[order].reshape(n, big)


def mixture_config(
    paths: Sequence[str], seq_len: int, global_batch: int, sources: int
) -> dict[str, Any]:
    """``sources`` weighted sources over the corpus shards: 0.55/0.3/0.15 for three, else
    random weights (seed 0) with fractional batch shares, so every batch needs the rule."""
    config = bench_config(paths, seq_len=seq_len)
    if sources == 3:
        weights = [0.55, 0.3, 0.15]
    else:
        weights = (np.random.default_rng(0).random(sources) * 10 + 0.1).tolist()
    config["sources"] = [
        {"name": f"s{i}", "path": list(paths), "weight": w} for i, w in enumerate(weights)
    ]
    config["global_batch_size"] = global_batch
    return config


def loaded_after(config: dict[str, Any], batch_size: int, steps: int) -> Any:
    """A loader whose cursor stands after ``steps`` global batches, as iterating leaves it."""
    loader = streamload.build_loader(config, batch_size=batch_size)
    stream = loader.stream
    loader._cursor = stream.advance(stream.start(), steps, loader.rank.global_batch)
    loader._delivered = steps
    return loader


def time_load(config: dict[str, Any], batch_size: int, state: dict[str, Any]) -> float:
    loader = streamload.build_loader(config, batch_size=batch_size)
    gc.collect()  # not the garbage of the runs before (the old walk's lists) inside the load
    start = time.perf_counter()
    loader.load_state_dict(state)
    return time.perf_counter() - start


def timed(fn: Any, calls: int = 1) -> float:
    """Median seconds of ``calls`` calls of ``fn``."""
    gc.collect()
    seconds = []
    for _ in range(calls):
        start = time.perf_counter()
        fn()
        seconds.append(time.perf_counter() - start)
    return median(seconds)


def measure(args: argparse.Namespace) -> list[dict[str, Any]]:
    paths = ensure_corpus(args.data_dir, int(args.corpus_tokens), args.shard_tokens)
    big, count = args.batch_size, args.assign_batches
    single = bench_config(paths, seq_len=args.seq_len, num_samples=max(args.steps) * big + 1)
    singles = {n: loaded_after(single, big, n).state_dict() for n in args.steps}
    cases, walks = {}, {}
    for sources in args.sources:
        config = mixture_config(paths, args.seq_len, big, sources)
        for steps in args.steps:
            loader = loaded_after(config, big, steps)
            cases[sources, steps] = (config, loader.state_dict(), loader._cursor.mixture)
            walks[sources] = OldWalk(loader.stream.phases)
            print(f"state of {sources} sources at {steps:.0e} made", file=sys.stderr)
    runs: dict[tuple[Any, ...], list[float]] = {}
    for rep in range(args.repeats):
        for steps in args.steps:
            runs.setdefault(("single", steps), []).append(time_load(single, big, singles[steps]))
            for sources in args.sources:  # interleaved: after, before, assignment
                config, state, cursor = cases[sources, steps]
                old, phases = walks[sources], walks[sources].phases
                key = (sources, steps)
                runs.setdefault(("after", *key), []).append(time_load(config, big, state))
                if sources * steps <= args.before_max:
                    start = MixtureCursor.start(sources)
                    runs.setdefault(("before", *key), []).append(
                        timed(lambda o=old, s=start, n=steps: o.walk(big, s, n))
                    )
                new = timed(lambda p=phases, c=cursor: allocate_batches(p, big, c, count), 9)
                runs.setdefault(("assign_after", *key), []).append(new / count)
                before = timed(lambda o=old, c=cursor: o.allocate(big, c, count), 9)
                runs.setdefault(("assign_before", *key), []).append(before / count)
                print(f"[{rep + 1}/{args.repeats}] {sources} sources {steps:.0e}: load "
                      f"{runs[('after', *key)][-1]:.4f} s", file=sys.stderr)  # fmt: skip
    return rows_of(args, cases, runs)


def rows_of(
    args: argparse.Namespace, cases: dict[Any, Any], runs: dict[tuple[Any, ...], list[float]]
) -> list[dict[str, Any]]:
    rows = []
    for sources in args.sources:
        timed_steps = [n for n in args.steps if ("before", sources, n) in runs]
        for steps in args.steps:
            key = (sources, steps)
            after = median(runs[("after", *key)])
            if ("before", *key) in runs:
                before, mark = median(runs[("before", *key)]), ""
            elif timed_steps:  # linear in steps: the per-batch cost of the largest timed
                last = max(timed_steps)
                before, mark = median(runs[("before", sources, last)]) * steps / last, "~"
            else:
                before, mark = float("nan"), "~"
            state = cases[key][1]
            rows.append({
                "sources": f"{sources:,}",
                "steps": f"{steps:.0e}",
                "single_s": median(runs[("single", steps)]),
                "after_s": after,
                "before_s": f"{mark}{before:.4g}",
                "speedup": f"{mark}{before / after:,.0f}",
                "state_kb": len(json.dumps(state)) / 1000,
                "mixture_kb": len(json.dumps([state["sources"], state["schedule"]])) / 1000,
                "assign_after_us": 1e6 * median(runs[("assign_after", *key)]),
                "assign_before_us": 1e6 * median(runs[("assign_before", *key)]),
            })  # fmt: skip
    return rows


COLUMNS = [
    ("sources", "sources", ""),
    ("steps", "global batches", ""),
    ("single_s", "single source load (s, baseline)", ".4f"),
    ("after_s", "mixture load after (s)", ".4f"),
    ("before_s", "before: replay alone (s)", ""),
    ("speedup", "before / after", ""),
    ("state_kb", "state KB", ".1f"),
    ("mixture_kb", "of it sources + schedule KB", ".1f"),
    ("assign_after_us", "assignment after (µs/batch)", ".0f"),
    ("assign_before_us", "assignment before (µs/batch)", ".0f"),
]


def main(argv: Sequence[str] | None = None) -> None:
    parser = bench_parser(__doc__, ["thread"])
    parser.set_defaults(batch_size=64)
    parser.add_argument("--sources", type=parse_sizes, default=[3, 1000])
    parser.add_argument("--steps", type=parse_sizes, default=[10**4, 10**6])
    parser.add_argument("--corpus-tokens", type=float, default=1e7, help="corpus size")
    parser.add_argument(
        "--before-max", type=float, default=2e7,
        help="largest sources x global batches the old walk is timed at (else extrapolated)",
    )  # fmt: skip
    parser.add_argument("--assign-batches", type=int, default=16, help="batches per assignment")
    args = parser.parse_args(argv)
    rows = measure(args)
    notes = [
        f"Global batch {args.batch_size} samples (one rank), seq_len {args.seq_len}; 3 sources: "
        "weights 0.55/0.3/0.15, else random weights (seed 0). Median of "
        f"{args.repeats} interleaved repeats, a fresh loader each (build not timed).",
        "after = this checkout's load_state_dict (a position above 2**15 global batches x "
        "sources is checked against its bounds, O(sources); below, replayed). before = the "
        "replay every load ran up to issue 31 (plan/mixture.py's plain-Python walk, kept in "
        "this script), timed alone on the same position: a lower bound of the old load; "
        f"~ = extrapolated linearly from the largest position timed (--before-max "
        f"{args.before_max:.0e} sources x batches).",
        f"assignment = allocate_batches of {args.assign_batches} global batches from the saved "
        "position (counts, interleaving and source-local ids), new vs the old walk + placement; "
        "median of 9 calls per repeat. Garbage is collected before each timing.",
    ]
    emit(args, "State checks: a mixture's load_state_dict, state size and batch assignment, "
         "before and after issue 31 item 5", rows, COLUMNS, notes)  # fmt: skip


if __name__ == "__main__":
    main()
